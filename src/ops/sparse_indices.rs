//! Index conversions between the COO and CSR sparse layouts, on dense index tensors:
//! `_convert_indices_from_coo_to_csr`, `_convert_indices_from_csr_to_coo`.

use super::{Args, Registry};
use crate::ops::kernels::{check_rank, invalid_argument, unsupported_feature, wrong_dtype};
use crate::tensor::{DType, Tensor};
use crate::tensor::{RankRequirement, TensorError};
use crate::values::IValue;

type R = crate::Result<IValue>;

fn index_values(op: &str, what: &str, t: &Tensor) -> crate::Result<Vec<i64>> {
    if !matches!(t.dtype(), DType::Int64 | DType::Int32) {
        return Err(wrong_dtype(op, what, "int32 or int64", t.dtype()));
    }
    t.contiguous()?.to_vec::<i64>()
}

fn index_tensor(v: Vec<i64>, shape: &[usize], int32: bool) -> crate::Result<Tensor> {
    let t = Tensor::from_vec(v, shape)?;
    if int32 {
        t.to_dtype(DType::Int32)
    } else {
        Ok(t)
    }
}

/// _convert_indices_from_coo_to_csr(self, size, out_int32): the `size + 1` row pointers of
/// sorted COO row indices, by PyTorch's CPU algorithm (out-of-range rows are an error here).
fn coo_to_csr(a: &mut Args) -> R {
    let rows = a.tensor(0)?;
    check_rank(a.op, "input", RankRequirement::Exactly(1), rows.shape())?;
    let rows_v = index_values(a.op, "input", &rows)?;
    let size = a.int(1)?;
    let size = usize::try_from(size)
        .map_err(|_| invalid_argument(a.op, "size", "must be non-negative", size))?;
    let mut out = vec![0i64; size + 1];
    let nnz = rows_v.len();
    let slot = |r: i64| -> crate::Result<usize> {
        usize::try_from(r)
            .ok()
            .filter(|&r| r <= size)
            .ok_or_else(|| {
                TensorError::IndexOutOfBounds {
                    index: r,
                    dim: 0,
                    size: size + 1,
                }
                .into()
            })
    };
    if let (Some(&first), Some(&last)) = (rows_v.first(), rows_v.last()) {
        // (the leading pointers up to the first row stay 0)
        slot(first)?;
        for (i, w) in rows_v.windows(2).enumerate() {
            if w[0] != w[1] {
                for h in w[0] + 1..=w[1] {
                    out[slot(h)?] = i as i64 + 1;
                }
            }
        }
        for p in out.iter_mut().skip(slot(last)? + 1) {
            *p = nnz as i64;
        }
    }
    Ok(IValue::Tensor(index_tensor(out, &[size + 1], a.bool(2)?)?))
}

/// _convert_indices_from_csr_to_coo(crow_indices, col_indices, out_int32, transpose): the
/// `[2, nnz]` (row, col) indices, (col, row) when transposed. Unbatched indices only.
fn csr_to_coo(a: &mut Args) -> R {
    let (crow, col) = (a.tensor(0)?, a.tensor(1)?);
    if crow.dim() != 1 || col.dim() != 1 {
        return Err(unsupported_feature(
            a.op,
            format!(
                "batched CSR indices (crow {:?}, col {:?})",
                crow.shape(),
                col.shape()
            ),
        ));
    }
    let crow_v = index_values(a.op, "crow_indices", &crow)?;
    let col_v = index_values(a.op, "col_indices", &col)?;
    let nnz = col_v.len();
    let mut rows = vec![0i64; nnz];
    for (i, w) in crow_v.windows(2).enumerate() {
        let (lo, hi) = (w[0].max(0) as usize, w[1].max(0) as usize);
        let span = rows
            .get_mut(lo..hi.max(lo))
            .ok_or(TensorError::IndexOutOfBounds {
                index: hi as i64,
                dim: 0,
                size: nnz + 1,
            })?;
        span.fill(i as i64);
    }
    let v = if a.bool(3)? {
        [col_v, rows].concat()
    } else {
        [rows, col_v].concat()
    };
    Ok(IValue::Tensor(index_tensor(v, &[2, nnz], a.bool(2)?)?))
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::_convert_indices_from_coo_to_csr", coo_to_csr);
    r.add("aten::_convert_indices_from_csr_to_coo", csr_to_coo);
}
