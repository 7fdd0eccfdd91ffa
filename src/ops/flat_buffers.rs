//! Tensor lists packed into one buffer and back (what data-parallel training does with
//! gradients): `flatten_dense_tensors`, `unflatten_dense_tensors`, `_chunk_cat`.

use super::kernels::{invalid_argument, rank_mismatch, shape_mismatch};
use super::shape::{cat, narrow, reshape, tensor_list, wdim};
use super::{Args, Registry};
use crate::tensor::{RankRequirement, Tensor, TensorError};
use crate::values::IValue;

type R = crate::Result<IValue>;

fn as_i64(shape: &[usize]) -> Vec<i64> {
    shape.iter().map(|&s| s as i64).collect()
}

/// flatten_dense_tensors(tensors): every tensor flattened, concatenated.
fn flatten_dense_tensors(a: &mut Args) -> R {
    let flat = a
        .tensor_list(0)?
        .iter()
        .map(|t| reshape(t, &[-1]))
        .collect::<crate::Result<Vec<_>>>()?;
    Ok(IValue::Tensor(cat(&flat, 0)?))
}

/// unflatten_dense_tensors(flat, tensors): views of consecutive pieces of `flat` shaped as each
/// tensor (an empty tensor gets a fresh `[0]` tensor, as in PyTorch).
fn unflatten_dense_tensors(a: &mut Args) -> R {
    let flat = a.tensor(0)?;
    let mut offset = 0usize;
    let mut outs = Vec::new();
    for t in a.tensor_list(1)? {
        let n = t.numel();
        if n == 0 {
            outs.push(Tensor::zeros(&[0], flat.dtype())?);
            continue;
        }
        let piece = narrow(&flat, 0, offset as i64, n as i64)?;
        outs.push(reshape(&piece, &as_i64(t.shape()))?);
        offset += n;
    }
    Ok(tensor_list(outs))
}

/// _chunk_cat(tensors, dim, num_chunks): each tensor zero-padded along `dim` to a multiple of
/// `num_chunks`, viewed as `[..dim, num_chunks, -1]`, and the views concatenated along dim + 1.
fn chunk_cat(a: &mut Args) -> R {
    let ts = a.tensor_list(0)?;
    let chunks = a.int(2)?;
    let first = ts
        .first()
        .ok_or_else(|| invalid_argument(a.op, "tensors", "must not be empty", "[]"))?;
    if chunks < 1 {
        return Err(invalid_argument(
            a.op,
            "num_chunks",
            "must be positive",
            chunks,
        ));
    }
    let dim = wdim(a.int(1)?, first.dim())?;
    let chunks = chunks as usize;
    let mut pieces = Vec::with_capacity(ts.len());
    for t in &ts {
        if t.dim() <= dim {
            return Err(rank_mismatch(
                a.op,
                "each tensor",
                RankRequirement::AtLeast(dim + 1),
                t.shape(),
            ));
        }
        if t.shape()[..dim] != first.shape()[..dim] {
            return Err(shape_mismatch(
                a.op,
                format!("each tensor's sizes before dim {dim}"),
                &first.shape()[..dim],
                &t.shape()[..dim],
            ));
        }
        if t.dtype() != first.dtype() {
            return Err(TensorError::DTypeMismatch {
                expected: first.dtype(),
                got: t.dtype(),
            }
            .into());
        }
        let size = t.shape()[dim];
        let padded_size = size.div_ceil(chunks) * chunks;
        let padded = if padded_size == size {
            t.clone()
        } else {
            let mut shape = t.shape().to_vec();
            shape[dim] = padded_size;
            let z = Tensor::zeros(&shape, t.dtype())?;
            narrow(&z, dim as i64, 0, size as i64)?.copy_from(t)?;
            z
        };
        let mut view = as_i64(&t.shape()[..dim]);
        view.extend([chunks as i64, -1]);
        pieces.push(reshape(&padded, &view)?);
    }
    Ok(IValue::Tensor(cat(&pieces, dim as i64 + 1)?))
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::flatten_dense_tensors", flatten_dense_tensors);
    r.add("aten::unflatten_dense_tensors", unflatten_dense_tensors);
    r.add("aten::_chunk_cat", chunk_cat);
}
