//! Linear-algebra operators PyTorch composes from other ones, run through those kernels with
//! their arguments rearranged or reshaped: `lu_solve`, `_lu_with_info`, `linalg_tensorinv`,
//! `linalg_tensorsolve`, `_cholesky_solve_helper`; and the small helpers
//! `_linalg_check_errors`, `_euclidean_dist`, `_compute_linear_combination`,
//! `linalg__powsum`, computed in f64.

use super::kernels::not_implemented_for;
use super::kernels::via_f64::{build, t};
use super::kernels::{
    check_rank, check_size, invalid_argument, rank_mismatch, shape_err, shape_mismatch, value_err,
    wrong_dtype,
};
use super::prims::via_aten;
use super::shape::{movedim, reshape};
use super::{Args, Registry};
use crate::tensor::{RankRequirement, Tensor, TensorError};
use crate::values::IValue;

type R = crate::Result<IValue>;

fn tensor_of(v: IValue, op: &str) -> crate::Result<Tensor> {
    match v {
        IValue::Tensor(x) => Ok(x),
        other => Err(value_err(format!(
            "{op}: expected a tensor result, got {}",
            other.kind_name()
        ))),
    }
}

fn product(dims: &[usize]) -> crate::Result<i64> {
    dims.iter()
        .try_fold(1i64, |acc, &d| acc.checked_mul(i64::try_from(d).ok()?))
        .ok_or_else(|| shape_err("linalg: tensor size overflows"))
}

fn as_i64(dims: &[usize]) -> Vec<i64> {
    dims.iter().map(|&d| d as i64).collect()
}

/// `lu_solve(self=B, LU_data, LU_pivots)`: `linalg_lu_solve(LU, pivots, B)`.
fn lu_solve(args: &mut Args<'_>) -> R {
    let (b, lu, piv) = (
        args.get(0)?.clone(),
        args.get(1)?.clone(),
        args.get(2)?.clone(),
    );
    via_aten(
        args,
        "aten::linalg_lu_solve",
        vec![lu, piv, b, IValue::Bool(true), IValue::Bool(false)],
    )
}

/// `_lu_with_info(self, pivot, check_errors)`: `linalg_lu_factor_ex(self, pivot,
/// check_errors=False)` (PyTorch ignores the flag: `info` reports a singular matrix).
fn lu_with_info(args: &mut Args<'_>) -> R {
    let (a, pivot) = (args.get(0)?.clone(), args.get(1)?.clone());
    via_aten(
        args,
        "aten::linalg_lu_factor_ex",
        vec![a, pivot, IValue::Bool(false)],
    )
}

/// `linalg_tensorinv(self, ind)`: the inverse of `self` seen as a `prod(shape[..ind])` square
/// matrix, shaped `shape[ind..] + shape[..ind]`.
fn tensorinv(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let ind = args.int(1)?;
    let split = usize::try_from(ind)
        .ok()
        .filter(|&i| i > 0 && i <= x.dim())
        .ok_or_else(|| {
            invalid_argument(
                "linalg.tensorinv",
                "ind",
                format!("must be in [1, {}]", x.dim()),
                ind,
            )
        })?;
    let (rows, cols) = x.shape().split_at(split);
    let (m, n) = (product(rows)?, product(cols)?);
    check_size(
        "linalg.tensorinv",
        "prod(self.shape[ind:]) (prod(self.shape[:ind]))",
        m,
        n,
    )?;
    let out_shape: Vec<i64> = as_i64(cols).into_iter().chain(as_i64(rows)).collect();
    let square = reshape(&x, &[m, n])?;
    let inv = tensor_of(
        via_aten(args, "aten::linalg_inv", vec![square.into()])?,
        args.op,
    )?;
    t(reshape(&inv, &out_shape)?)
}

/// `linalg_tensorsolve(self, other, dims)`: `dims` of `self` moved last, then `self` as a
/// square matrix of side `prod(self.shape[other.ndim..])` (which must equal other's element
/// count) solved against `other` flattened.
fn tensorsolve(args: &mut Args<'_>) -> R {
    let mut a = args.tensor(0)?;
    let b = args.tensor(1)?;
    if let Some(dims) = args.opt_int_list(2)? {
        let nd = a.dim() as i64;
        let dst: Vec<i64> = (nd - dims.len() as i64..nd).collect();
        a = movedim(&a, &dims, &dst)?;
    }
    if b.dim() > a.dim() {
        return Err(rank_mismatch(
            "linalg.tensorsolve",
            "other",
            RankRequirement::AtMost(a.dim()),
            b.shape(),
        ));
    }
    let result_shape = &a.shape()[b.dim()..];
    let (m, n) = (product(b.shape())?, product(result_shape)?);
    check_size(
        "linalg.tensorsolve",
        "prod(self.shape[other.ndim:]) (prod(self.shape[:other.ndim]))",
        m,
        n,
    )?;
    let out_shape = as_i64(result_shape);
    let square = reshape(&a, &[m, n])?;
    let rhs = reshape(&b, &[m])?;
    let x = tensor_of(
        via_aten(
            args,
            "aten::linalg_solve",
            vec![square.into(), rhs.into(), IValue::Bool(true)],
        )?,
        args.op,
    )?;
    t(reshape(&x, &out_shape)?)
}

/// `_linalg_check_errors(info, api_name, *, is_matrix)`: PyTorch's error for the first nonzero
/// LAPACK `info`, worded by the kind of API; nothing when all are zero.
fn check_errors(args: &mut Args<'_>) -> R {
    let info = args.tensor(0)?;
    let api = args.str(1)?.to_string();
    let is_matrix = args.bool(2)?;
    if info.dtype().is_floating_point() || info.dtype().is_complex() {
        return Err(wrong_dtype(
            args.op,
            "info",
            "an integer tensor",
            info.dtype(),
        ));
    }
    let values = info.contiguous()?.to_vec::<i64>()?;
    let Some((batch, &code)) = values.iter().enumerate().find(|(_, &v)| v != 0) else {
        return Ok(IValue::None);
    };
    let at = if is_matrix {
        String::new()
    } else {
        format!(": (Batch element {batch})")
    };
    let what = if code < 0 {
        format!(
            "Argument {} has illegal value. Most certainly there is a bug in the implementation \
             calling the backend library.",
            -code
        )
    } else if api.contains("inv") {
        format!(
            "The diagonal element {code} is zero, the inversion could not be completed because \
             the input matrix is singular."
        )
    } else if api.contains("solve") {
        "The solver failed because the input matrix is singular.".to_string()
    } else if api.contains("cholesky") {
        format!(
            "The factorization could not be completed because the input is not \
             positive-definite (the leading minor of order {code} is not positive-definite)."
        )
    } else if api.contains("svd") {
        format!(
            "The algorithm failed to converge because the input matrix is ill-conditioned or \
             has too many repeated singular values (error code: {code})."
        )
    } else if api.contains("eig") || api.contains("syevd") {
        format!(
            "The algorithm failed to converge because the input matrix is ill-conditioned or \
             has too many repeated eigenvalues (error code: {code})."
        )
    } else if api.contains("lstsq") {
        format!(
            "The least squares solution could not be computed because the input matrix does \
             not have full rank (error code: {code})."
        )
    } else if api.contains("lu_factor") {
        format!(
            "U[{code},{code}] is zero and using it on lu_solve would result in a division by \
             zero."
        )
    } else {
        format!("Unknown error code: {code}.")
    };
    Err(value_err(format!("{api}{at}: {what}")))
}

/// `_euclidean_dist(x1, x2)`: distances between the rows of `(.., P, M)` and `(.., R, M)`
/// (same batch shape), `sqrt(max(|a|^2 + |b|^2 - 2 a.b, 0))` as PyTorch forms it.
fn euclidean_dist(args: &mut Args<'_>) -> R {
    let (x1, x2) = (args.tensor(0)?, args.tensor(1)?);
    // PyTorch's matmul of the two refuses mixed dtypes
    let dtype = x1.dtype();
    if !dtype.is_floating_point() {
        return Err(wrong_dtype(args.op, "x1", "a floating point tensor", dtype));
    }
    if x2.dtype() != dtype {
        return Err(TensorError::DTypeMismatch {
            expected: dtype,
            got: x2.dtype(),
        }
        .into());
    }
    let (s1, s2) = (x1.shape(), x2.shape());
    check_rank(args.op, "x1", RankRequirement::AtLeast(2), s1)?;
    check_rank(args.op, "x2", RankRequirement::Exactly(s1.len()), s2)?;
    if s1[..s1.len() - 2] != s2[..s2.len() - 2] {
        return Err(shape_mismatch(
            args.op,
            "x2's batch dims",
            &s1[..s1.len() - 2],
            &s2[..s2.len() - 2],
        ));
    }
    let nd = s1.len();
    let (p, m, r) = (s1[nd - 2], s1[nd - 1], s2[nd - 2]);
    check_size(
        args.op,
        "x2.size(-1) (x1.size(-1))",
        m as i64,
        s2[nd - 1] as i64,
    )?;
    let batch: usize = s1[..nd - 2].iter().product();
    let (a, b) = (
        x1.contiguous()?.to_vec::<f64>()?,
        x2.contiguous()?.to_vec::<f64>()?,
    );
    let mut out = Vec::with_capacity(batch * p * r);
    for k in 0..batch {
        let (ak, bk) = (
            &a[k * p * m..(k + 1) * p * m],
            &b[k * r * m..(k + 1) * r * m],
        );
        for u in ak.chunks_exact(m.max(1)).take(p) {
            let uu: f64 = u.iter().map(|v| v * v).sum();
            for v in bk.chunks_exact(m.max(1)).take(r) {
                let vv: f64 = v.iter().map(|w| w * w).sum();
                let uv: f64 = u.iter().zip(v).map(|(x, y)| x * y).sum();
                out.push((uu + vv - 2.0 * uv).max(0.0).sqrt());
            }
        }
        if m == 0 {
            out.extend(std::iter::repeat_n(0.0, p * r));
        }
    }
    let mut shape = s1[..nd - 2].to_vec();
    shape.extend([p, r]);
    t(build(out, &shape, dtype)?)
}

/// `_compute_linear_combination(input (n, ...), coefficients (m, n))`: row i of the result is
/// `sum_j coefficients[i, j] * input[j]`; both of one dtype.
fn linear_combination(args: &mut Args<'_>) -> R {
    let (x, c) = (args.tensor(0)?, args.tensor(1)?);
    // PyTorch's kernel reads the coefficients as the input's dtype (garbage when they differ)
    if x.dtype() != c.dtype() {
        return Err(TensorError::DTypeMismatch {
            expected: x.dtype(),
            got: c.dtype(),
        }
        .into());
    }
    let dtype = x.dtype();
    check_rank(args.op, "input", RankRequirement::AtLeast(1), x.shape())?;
    check_rank(
        args.op,
        "coefficients",
        RankRequirement::Exactly(2),
        c.shape(),
    )?;
    check_size(
        args.op,
        "coefficients.size(1) (input.size(0))",
        x.shape()[0] as i64,
        c.shape()[1] as i64,
    )?;
    let n = x.shape()[0] as i64;
    let flat = reshape(&x.to_dtype(dtype)?, &[n, -1])?;
    let prod = tensor_of(
        via_aten(
            args,
            "aten::mm",
            vec![c.to_dtype(dtype)?.into(), flat.into()],
        )?,
        args.op,
    )?;
    let mut shape = vec![c.shape()[0] as i64];
    shape.extend(as_i64(&x.shape()[1..]));
    t(reshape(&prod, &shape)?)
}

/// `linalg__powsum(self, ord, dim, keepdim, *, dtype)`: `sum(|x|^ord)` over `dim` (all when
/// none), the real dtype of `self` (or of `dtype`).
fn powsum(args: &mut Args<'_>) -> R {
    let mut x = args.tensor(0)?;
    if let Some(d) = args.opt_dtype(4)? {
        x = x.to_dtype(d)?;
    }
    let ord = args.scalar(1)?.to_f64();
    if !x.dtype().is_floating_point() && !x.dtype().is_complex() {
        // PyTorch's dispatcher refusal (its kernel has floating and complex instances only)
        return Err(not_implemented_for("powsum_cpu", x.dtype()));
    }
    let abs = tensor_of(via_aten(args, "aten::abs", vec![x.into()])?, args.op)?;
    let powered = tensor_of(
        via_aten(
            args,
            "aten::pow.Tensor_Scalar",
            vec![abs.into(), IValue::Double(ord)],
        )?,
        args.op,
    )?;
    let dims = args.get(2)?.clone();
    via_aten(
        args,
        "aten::sum.dim_IntList",
        vec![
            powered.into(),
            dims,
            IValue::Bool(args.bool(3)?),
            IValue::None,
        ],
    )
}

/// `_cholesky_solve_helper(self, A, upper)`: `cholesky_solve` (the helper skips only the
/// broadcasting, which `cholesky_solve` does itself).
fn cholesky_solve_helper(args: &mut Args<'_>) -> R {
    let values = vec![
        args.get(0)?.clone(),
        args.get(1)?.clone(),
        args.get(2)?.clone(),
    ];
    via_aten(args, "aten::cholesky_solve", values)
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::_cholesky_solve_helper", cholesky_solve_helper);
    r.add("aten::lu_solve", lu_solve);
    r.add("aten::_lu_with_info", lu_with_info);
    r.add("aten::linalg_tensorinv", tensorinv);
    r.add("aten::linalg_tensorsolve", tensorsolve);
    r.add("aten::_linalg_check_errors", check_errors);
    r.add("aten::_euclidean_dist", euclidean_dist);
    r.add("aten::_compute_linear_combination", linear_combination);
    r.add("aten::linalg__powsum", powsum);
}
