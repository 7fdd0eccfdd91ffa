//! Products built on the matrix multiply: `linalg_vecdot` (dot products along a dim), `inner`
//! (contraction over the last dims), `linalg_matmul` (`matmul`'s linalg spelling), and the
//! chains `linalg_multi_dot` / `chain_matmul`, multiplied in the order of fewest scalar
//! multiplications, as ATen chooses it; the cross product (`cross`, `linalg_cross`) and `trace`.

use super::elementwise::mul_op;
use super::kernels::operand::{common_dtype, Operand};
use super::kernels::via_f64::{build, t, vals};
use super::kernels::{
    invalid_argument, not_implemented_for, rank_mismatch, size_mismatch, wrong_dtype,
};
use super::linalg::{matmul, matmul_nd};
use super::reduce::sum_op;
use super::shape::{reshape, squeeze_list, transpose, unsqueeze};
use super::{Args, Registry};
use crate::tensor::{broadcast_shapes, DType, Tensor};
use crate::tensor::{RankRequirement, TensorError};
use crate::values::IValue;

type R = crate::Result<IValue>;

/// `linalg_vecdot(x, y, *, dim)`: `(x * y).sum(dim)` for same-dtype floating inputs.
fn linalg_vecdot(args: &mut Args<'_>) -> R {
    let (x, y) = (args.tensor(0)?, args.tensor(1)?);
    let dtype = x.dtype();
    if !dtype.is_floating_point() {
        return Err(wrong_dtype(
            "linalg.vecdot",
            "x",
            "a floating point or complex tensor",
            dtype,
        ));
    }
    if y.dtype() != dtype {
        return Err(TensorError::DTypeMismatch {
            expected: dtype,
            got: y.dtype(),
        }
        .into());
    }
    let products = mul_op(&Operand::Tensor(x), &Operand::Tensor(y))?;
    Ok(IValue::Tensor(sum_op(
        &products,
        Some(&[args.int(2)?]),
        false,
        None,
        false,
    )?))
}

/// `inner(self, other)`: a product with a 0-d operand, else the contraction of both last dims
/// (`self.shape[:-1] ++ other.shape[:-1]`).
fn inner(args: &mut Args<'_>) -> R {
    let (a, b) = (args.tensor(0)?, args.tensor(1)?);
    if a.dim() == 0 || b.dim() == 0 {
        return Ok(IValue::Tensor(mul_op(
            &Operand::Tensor(a),
            &Operand::Tensor(b),
        )?));
    }
    let (k, kb) = (a.shape()[a.dim() - 1], b.shape()[b.dim() - 1]);
    if k != kb {
        return Err(size_mismatch(
            "inner",
            format!(
                "the last size of other {:?} (of self {:?})",
                b.shape(),
                a.shape()
            ),
            k as i64,
            kb as i64,
        ));
    }
    let rows: usize = a.shape()[..a.dim() - 1].iter().product();
    let cols: usize = b.shape()[..b.dim() - 1].iter().product();
    let a2 = reshape(&a, &[rows as i64, k as i64])?;
    let b2 = reshape(&b, &[cols as i64, k as i64])?;
    let product = matmul_nd(args.op, &a2, &transpose(&b2, 0, 1)?, None, 1.0)?;
    let shape: Vec<i64> = a.shape()[..a.dim() - 1]
        .iter()
        .chain(&b.shape()[..b.dim() - 1])
        .map(|&s| s as i64)
        .collect();
    Ok(IValue::Tensor(reshape(&product, &shape)?))
}

fn linalg_matmul(args: &mut Args<'_>) -> R {
    Ok(IValue::Tensor(matmul(
        args.op,
        &args.tensor(0)?,
        &args.tensor(1)?,
    )?))
}

/// The cheapest parenthesization of a chain of matrices with `dims[i] x dims[i+1]` shapes
/// (the textbook dynamic program ATen's `multi_dot` uses): `split[i][j]` is where `i..=j` splits.
fn chain_order(dims: &[usize]) -> Vec<Vec<usize>> {
    let n = dims.len() - 1;
    let mut cost = vec![vec![0u128; n]; n];
    let mut split = vec![vec![0usize; n]; n];
    for len in 1..n {
        for i in 0..n - len {
            let j = i + len;
            cost[i][j] = u128::MAX;
            for k in i..j {
                let c = cost[i][k]
                    + cost[k + 1][j]
                    + (dims[i] as u128) * (dims[k + 1] as u128) * (dims[j + 1] as u128);
                if c < cost[i][j] {
                    cost[i][j] = c;
                    split[i][j] = k;
                }
            }
        }
    }
    split
}

fn chain_product(
    op: &str,
    ms: &[Tensor],
    split: &[Vec<usize>],
    i: usize,
    j: usize,
) -> crate::Result<Tensor> {
    if i == j {
        return Ok(ms[i].clone());
    }
    let k = split[i][j];
    let left = chain_product(op, ms, split, i, k)?;
    let right = chain_product(op, ms, split, k + 1, j)?;
    matmul_nd(op, &left, &right, None, 1.0)
}

/// ATen's `multi_dot`: 1-D ends become a row / column vector (and are squeezed from the
/// result), every tensor between must be 2-D, all of one dtype, with matching inner sizes.
fn multi_dot(op: &str, tensors: &[Tensor]) -> crate::Result<Tensor> {
    let n = tensors.len();
    if n < 2 {
        return Err(invalid_argument(
            "multi_dot",
            "the number of tensors",
            "must be at least 2",
            n,
        ));
    }
    let mut ms = tensors.to_vec();
    let first_is_vector = ms[0].dim() == 1;
    let last_is_vector = ms[n - 1].dim() == 1;
    match ms[0].dim() {
        1 => ms[0] = unsqueeze(&ms[0], 0)?,
        2 => {}
        _ => {
            return Err(rank_mismatch(
                "multi_dot",
                "the first tensor",
                RankRequirement::OneOf(vec![1, 2]),
                ms[0].shape(),
            ))
        }
    }
    match ms[n - 1].dim() {
        1 => ms[n - 1] = unsqueeze(&ms[n - 1], -1)?,
        2 => {}
        _ => {
            return Err(rank_mismatch(
                "multi_dot",
                "the last tensor",
                RankRequirement::OneOf(vec![1, 2]),
                ms[n - 1].shape(),
            ))
        }
    }
    for (i, m) in ms.iter().enumerate().take(n - 1).skip(1) {
        if m.dim() != 2 {
            return Err(rank_mismatch(
                "multi_dot",
                format!("tensor {i}"),
                RankRequirement::Exactly(2),
                m.shape(),
            ));
        }
    }
    let dtype = ms[0].dtype();
    for (i, m) in ms.iter().enumerate().skip(1) {
        if m.dtype() != dtype {
            return Err(TensorError::DTypeMismatch {
                expected: dtype,
                got: m.dtype(),
            }
            .into());
        }
        if ms[i - 1].shape()[1] != m.shape()[0] {
            return Err(TensorError::MatmulShapes {
                op: "multi_dot".into(),
                mat1: [ms[i - 1].shape()[0], ms[i - 1].shape()[1]],
                mat2: [m.shape()[0], m.shape()[1]],
            }
            .into());
        }
    }
    let mut dims: Vec<usize> = ms.iter().map(|m| m.shape()[0]).collect();
    dims.push(ms[n - 1].shape()[1]);
    let split = chain_order(&dims);
    let mut result = chain_product(op, &ms, &split, 0, n - 1)?;
    if first_is_vector {
        result = squeeze_list(&result, &[0])?;
    }
    if last_is_vector {
        result = squeeze_list(&result, &[-1])?;
    }
    Ok(result)
}

fn linalg_multi_dot(args: &mut Args<'_>) -> R {
    Ok(IValue::Tensor(multi_dot(args.op, &args.tensor_list(0)?)?))
}

/// `chain_matmul(matrices)`: 2-D matrices only; one matrix is returned as a copy.
fn chain_matmul(args: &mut Args<'_>) -> R {
    let ms = args.tensor_list(0)?;
    if ms.is_empty() {
        return Err(invalid_argument(
            "chain_matmul",
            "matrices",
            "must be non-empty",
            "[]",
        ));
    }
    if let Some(m) = ms.iter().find(|m| m.dim() != 2) {
        return Err(rank_mismatch(
            "chain_matmul",
            "each matrix",
            RankRequirement::Exactly(2),
            m.shape(),
        ));
    }
    if ms.len() == 1 {
        return Ok(IValue::Tensor(ms[0].deep_clone()?));
    }
    Ok(IValue::Tensor(multi_dot(args.op, &ms)?))
}

/// `trace(self)`: the sum of a matrix's diagonal (integral inputs sum to int64).
fn trace(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    if x.dim() != 2 {
        return Err(rank_mismatch(
            "trace",
            "self",
            RankRequirement::Exactly(2),
            x.shape(),
        ));
    }
    let d = crate::ops::shape::diagonal(&x, 0, 0, 1)?;
    let dt = if x.dtype().is_integral(true) {
        DType::Int64
    } else {
        x.dtype()
    };
    crate::ops::reduce::sum_op(&d, None, false, Some(dt), false).map(IValue::Tensor)
}

/// `cross(self, other, dim)` / `linalg_cross`: 3-vectors along `dim` (default: first of size 3).
fn cross(args: &mut Args<'_>) -> R {
    let (a, b) = (args.tensor(0)?, args.tensor(1)?);
    let shape = broadcast_shapes(a.shape(), b.shape())?;
    let dim = match args.opt_int(2)? {
        Some(d) => crate::ops::shape::wdim(d, shape.len())?,
        None => shape.iter().position(|&s| s == 3).ok_or_else(|| {
            invalid_argument(
                "cross",
                "input",
                "must have a dimension of size 3",
                format!("a tensor of shape {shape:?}"),
            )
        })?,
    };
    if shape.get(dim) != Some(&3) || a.dim() != b.dim() {
        return Err(invalid_argument(
            "linalg.cross",
            "input and other",
            format!("must have the same number of dimensions and size 3 at dim {dim}"),
            format!("shapes {:?} and {:?}", a.shape(), b.shape()),
        ));
    }
    let dt = common_dtype(&[&Operand::Tensor(a.clone()), &Operand::Tensor(b.clone())]);
    if dt.is_complex() || dt == DType::Bool {
        return Err(not_implemented_for("cross", dt));
    }
    let av = vals(&crate::ops::shape::expand_to(&a, &shape)?)?;
    let bv = vals(&crate::ops::shape::expand_to(&b, &shape)?)?;
    let inner: usize = shape[dim + 1..].iter().product();
    let outer: usize = shape[..dim].iter().product();
    let mut out = vec![0.0; av.len()];
    for o in 0..outer {
        for i in 0..inner {
            let at = |v: &[f64], k: usize| v[(o * 3 + k) * inner + i];
            for k in 0..3 {
                let (k1, k2) = ((k + 1) % 3, (k + 2) % 3);
                out[(o * 3 + k) * inner + i] =
                    at(&av, k1) * at(&bv, k2) - at(&av, k2) * at(&bv, k1);
            }
        }
    }
    t(build(out, &shape, dt)?)
}

/// _trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim): each input
/// unsqueezed at its expand dims (ascending), the three multiplied with broadcasting and summed
/// over `sumdim` (what bilinear computes; unroll_dim only picks PyTorch's loop order).
fn trilinear(a: &mut Args) -> crate::Result<IValue> {
    let mut product: Option<Tensor> = None;
    for k in 0..3 {
        let mut x = a.tensor(k)?;
        let mut dims = a.int_list(3 + k)?;
        dims.sort_unstable();
        for d in dims {
            x = unsqueeze(&x, d)?;
        }
        product = Some(match product {
            None => x,
            Some(p) => mul_op(&Operand::Tensor(p), &Operand::Tensor(x))?,
        });
    }
    let product = product
        .ok_or_else(|| invalid_argument("_trilinear", "inputs", "must be non-empty", "[]"))?;
    let sumdim = a.int_list(6)?;
    if sumdim.is_empty() {
        return Ok(IValue::Tensor(product));
    }
    Ok(IValue::Tensor(sum_op(
        &product,
        Some(&sumdim),
        false,
        None,
        false,
    )?))
}

pub fn register(r: &mut Registry) {
    r.add("aten::trace", trace);
    r.add("aten::cross", cross);
    r.add("aten::linalg_cross", cross);
    r.add("aten::linalg_vecdot", linalg_vecdot);
    r.add("aten::inner", inner);
    r.add("aten::linalg_matmul", linalg_matmul);
    r.add("aten::linalg_multi_dot", linalg_multi_dot);
    r.add("aten::chain_matmul", chain_matmul);
    r.add("aten::_trilinear", trilinear);
}
