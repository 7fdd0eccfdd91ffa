//! Reductions: sum, mean, prod, max/min, arg-reductions, all/any, var/std, norms, logsumexp,
//! cumulative ops, median and friends. Float sums use pairwise summation, except float32 `sum`
//! and `mean` over the trailing dims of a contiguous tensor, which add in ATen's order
//! (`aten_inner_sum`: a sum then rounded to a quantization step must round as PyTorch's);
//! half types accumulate in f32; integer sums accumulate in int64, as PyTorch does.

use super::kernels::map::map_unary;
use super::kernels::num::{Arith, Real};
use super::kernels::operand::inplace_of;
use super::kernels::reduce::{
    along_dim, aten_inner_sum, aten_outer_sums, inner_sum_applies, outer_sum_shape, pairwise_sum,
    reduce_dims, ReducePlan,
};
use super::kernels::{
    invalid_argument, not_implemented_for, rank_mismatch, unsupported_feature, wrong_dtype,
};
use super::{Args, Registry};
use crate::tensor::{wrap_dim, DType, RankRequirement, Tensor, TensorError};
use crate::values::{IValue, Tuple};
use crate::{dispatch_all, dispatch_int};
use half::{bf16, f16};
use num_complex::{Complex32, Complex64};

type R = crate::Result<IValue>;

fn t(x: Tensor) -> R {
    Ok(IValue::Tensor(x))
}
fn pair(a: Tensor, b: Tensor) -> R {
    Ok(IValue::Tuple(Tuple::new(vec![
        IValue::Tensor(a),
        IValue::Tensor(b),
    ])))
}

/// The dtype `sum`/`prod` produce: integral and bool inputs accumulate in int64.
fn sum_dtype(x: DType, dtype: Option<DType>) -> DType {
    dtype.unwrap_or(if x.is_integral(true) { DType::Int64 } else { x })
}

/// Whether a float32 `sum`/`mean` of `x` over `dims` follows ATen's summation order
/// (`aten_inner_sum`): float32 in and out, no NaN skipping, trailing dims of a contiguous
/// tensor.
fn aten_order(x: &Tensor, out: DType, dims: Option<&[i64]>, skip_nan: bool) -> crate::Result<bool> {
    if skip_nan || out != DType::Float32 || x.dtype() != DType::Float32 {
        return Ok(false);
    }
    Ok(inner_sum_applies(x, &reduce_dims(dims, x.dim())?))
}

/// A float32 `sum` of `x` over a run of dims followed by kept ones (a spatial
/// `mean((1, 2))` of a channels-last activation, a sum over the sequence of `[B, T, C]`), in
/// ATen's order (`aten_outer_sums`), shaped as `plan`'s result; `None` for other reductions.
fn aten_outer_reduction(
    x: &Tensor,
    out: DType,
    dims: Option<&[i64]>,
    skip_nan: bool,
    plan: &ReducePlan,
    finish: impl Fn(f32) -> f32,
) -> crate::Result<Option<Tensor>> {
    if skip_nan || out != DType::Float32 || x.dtype() != DType::Float32 {
        return Ok(None);
    }
    let Some((outer, rows, columns)) = outer_sum_shape(x, &reduce_dims(dims, x.dim())?) else {
        return Ok(None);
    };
    let x = x.contiguous()?;
    let guard = x.read::<f32>()?;
    let Some(values) = guard.as_slice() else {
        return Ok(None);
    };
    let mut sums = Vec::with_capacity(outer * columns);
    for block in values.chunks(rows * columns).take(outer) {
        sums.extend(
            aten_outer_sums(block, rows, columns)
                .into_iter()
                .map(&finish),
        );
    }
    Ok(Some(Tensor::from_vec(sums, &plan.out_shape)?))
}

/// `sum` over `dims` (`None`: all) in `out` dtype; `skip_nan` gives `nansum`.
pub(crate) fn sum_op(
    x: &Tensor,
    dims: Option<&[i64]>,
    keepdim: bool,
    dtype: Option<DType>,
    skip_nan: bool,
) -> crate::Result<Tensor> {
    let out = sum_dtype(x.dtype(), dtype);
    let xc = x.to_dtype(out)?;
    let plan = ReducePlan::new(&xc, dims, keepdim)?;
    if aten_order(x, out, dims, skip_nan)? {
        return plan.rows::<f32, f32, _>(aten_inner_sum);
    }
    if let Some(sums) = aten_outer_reduction(x, out, dims, skip_nan, &plan, |s| s)? {
        return Ok(sums);
    }
    let nz = |v: f64| if skip_nan && v.is_nan() { 0.0 } else { v };
    match out {
        DType::Float32 => plan.rows::<f32, f32, _>(|r| {
            if skip_nan {
                pairwise_sum(r, &|v: f32| if v.is_nan() { 0.0 } else { v })
            } else {
                pairwise_sum(r, &|v: f32| v)
            }
        }),
        DType::Float64 => plan.rows::<f64, f64, _>(|r| pairwise_sum(r, &|v: f64| nz(v))),
        DType::Float16 => plan.rows::<f16, f16, _>(|r| {
            f16::from_f32(pairwise_sum(r, &|v: f16| nz(v.to_f64()) as f32))
        }),
        DType::BFloat16 => plan.rows::<bf16, bf16, _>(|r| {
            bf16::from_f32(pairwise_sum(r, &|v: bf16| nz(v.to_f64()) as f32))
        }),
        DType::Complex64 => {
            plan.rows::<Complex32, Complex32, _>(|r| pairwise_sum(r, &|v: Complex32| v))
        }
        DType::Complex128 => {
            plan.rows::<Complex64, Complex64, _>(|r| pairwise_sum(r, &|v: Complex64| v))
        }
        DType::Bool => plan.rows::<bool, bool, _>(|r| r.iter().any(|&v| v)),
        d => dispatch_int!(d, "sum", |T| plan
            .rows::<T, T, _>(|r| r.iter().fold(T::zero(), |a, &b| a.add(b)))),
    }
}

fn sum(args: &mut Args<'_>) -> R {
    t(sum_op(
        &args.tensor(0)?,
        None,
        false,
        args.opt_dtype(1)?,
        false,
    )?)
}
fn sum_dim(args: &mut Args<'_>) -> R {
    let dims = args.opt_int_list(1)?;
    t(sum_op(
        &args.tensor(0)?,
        dims.as_deref(),
        args.bool(2)?,
        args.opt_dtype(3)?,
        false,
    )?)
}
fn nansum(args: &mut Args<'_>) -> R {
    let dims = args.opt_int_list(1)?;
    t(sum_op(
        &args.tensor(0)?,
        dims.as_deref(),
        args.bool(2)?,
        args.opt_dtype(3)?,
        true,
    )?)
}

/// `mean` over `dims`; integral inputs need an explicit floating `dtype`, as in PyTorch.
pub(crate) fn mean_op(
    x: &Tensor,
    dims: Option<&[i64]>,
    keepdim: bool,
    dtype: Option<DType>,
    skip_nan: bool,
) -> crate::Result<Tensor> {
    let out = dtype.unwrap_or(x.dtype());
    if !(out.is_floating_point() || out.is_complex()) {
        return Err(wrong_dtype(
            "mean",
            "the output dtype (inferred from the input)",
            "a floating point or complex dtype",
            out,
        ));
    }
    let xc = x.to_dtype(out)?;
    let plan = ReducePlan::new(&xc, dims, keepdim)?;
    let n = plan.reduced as f64;
    if aten_order(x, out, dims, skip_nan)? {
        // ATen's mean on CPU: the sum, divided by the count
        return plan.rows::<f32, f32, _>(|r| aten_inner_sum(r) / n as f32);
    }
    if let Some(means) = aten_outer_reduction(x, out, dims, skip_nan, &plan, |s| s / n as f32)? {
        return Ok(means);
    }
    macro_rules! mean_rows {
        ($T:ty, $A:ty, $to:expr, $from:expr) => {{
            let to: fn($T) -> $A = $to;
            let from: fn($A) -> $T = $from;
            plan.rows::<$T, $T, _>(|r| {
                if skip_nan {
                    let cnt = r.iter().filter(|&&v| !to(v).is_nan()).count() as $A;
                    let s = pairwise_sum(r, &|v: $T| {
                        let a = to(v);
                        if a.is_nan() {
                            0.0
                        } else {
                            a
                        }
                    });
                    from(s / cnt)
                } else {
                    from(pairwise_sum(r, &to) / n as $A)
                }
            })
        }};
    }
    match out {
        DType::Float32 => mean_rows!(f32, f32, |v| v, |v| v),
        DType::Float64 => mean_rows!(f64, f64, |v| v, |v| v),
        DType::Float16 => mean_rows!(f16, f32, |v| v.to_f32(), f16::from_f32),
        DType::BFloat16 => mean_rows!(bf16, f32, |v| v.to_f32(), bf16::from_f32),
        DType::Complex64 => {
            plan.rows::<Complex32, Complex32, _>(|r| pairwise_sum(r, &|v: Complex32| v) / n as f32)
        }
        DType::Complex128 => {
            plan.rows::<Complex64, Complex64, _>(|r| pairwise_sum(r, &|v: Complex64| v) / n)
        }
        d => Err(not_implemented_for("mean", d)),
    }
}
fn mean(args: &mut Args<'_>) -> R {
    t(mean_op(
        &args.tensor(0)?,
        None,
        false,
        args.opt_dtype(1)?,
        false,
    )?)
}
fn mean_dim(args: &mut Args<'_>) -> R {
    let dims = args.opt_int_list(1)?;
    t(mean_op(
        &args.tensor(0)?,
        dims.as_deref(),
        args.bool(2)?,
        args.opt_dtype(3)?,
        false,
    )?)
}
fn nanmean(args: &mut Args<'_>) -> R {
    let dims = args.opt_int_list(1)?;
    t(mean_op(
        &args.tensor(0)?,
        dims.as_deref(),
        args.bool(2)?,
        args.opt_dtype(3)?,
        true,
    )?)
}

fn prod_op(
    x: &Tensor,
    dims: Option<&[i64]>,
    keepdim: bool,
    dtype: Option<DType>,
) -> crate::Result<Tensor> {
    let out = sum_dtype(x.dtype(), dtype);
    let xc = x.to_dtype(out)?;
    let plan = ReducePlan::new(&xc, dims, keepdim)?;
    match out {
        DType::Float16 => plan
            .rows::<f16, f16, _>(|r| f16::from_f32(r.iter().fold(1.0f32, |a, &b| a * b.to_f32()))),
        DType::BFloat16 => plan.rows::<bf16, bf16, _>(|r| {
            bf16::from_f32(r.iter().fold(1.0f32, |a, &b| a * b.to_f32()))
        }),
        d => dispatch_all!(d, "prod", |T| plan
            .rows::<T, T, _>(|r| r.iter().fold(T::one(), |a, &b| a.mul(b)))),
    }
}
fn prod(args: &mut Args<'_>) -> R {
    t(prod_op(&args.tensor(0)?, None, false, args.opt_dtype(1)?)?)
}
fn prod_dim(args: &mut Args<'_>) -> R {
    let d = args.int(1)?;
    t(prod_op(
        &args.tensor(0)?,
        Some(&[d]),
        args.bool(2)?,
        args.opt_dtype(3)?,
    )?)
}

/// A full reduction of an empty tensor, which has no identity: PyTorch asks for a `dim`.
fn dim_required_for_empty(op: &str) -> crate::Error {
    invalid_argument(
        op,
        "dim",
        "must be specified when input.numel() == 0",
        "None",
    )
}

/// A reduction without identity over a dimension of size 0.
fn empty_reduction_dim(op: &str, x: &Tensor, dim: i64) -> crate::Error {
    invalid_argument(
        op,
        "dim",
        format!("must have non-zero size (input shape {:?})", x.shape()),
        dim,
    )
}

fn empty_check(x: &Tensor, op: &str) -> crate::Result<()> {
    if x.numel() == 0 {
        return Err(dim_required_for_empty(op));
    }
    Ok(())
}

/// max (`is_max`) or min over `dims`, NaN-propagating.
pub(crate) fn extreme_op(
    x: &Tensor,
    dims: Option<&[i64]>,
    keepdim: bool,
    is_max: bool,
) -> crate::Result<Tensor> {
    let plan = ReducePlan::new(x, dims, keepdim)?;
    if plan.reduced == 0 && plan.outer > 0 {
        return Err(dim_required_for_empty(if is_max { "max" } else { "min" }));
    }
    crate::dispatch_standard_real!(x.dtype(), "max", |T| plan.rows::<T, T, _>(|r| {
        if is_max {
            r.iter().fold(T::lowest(), |a, &b| a.max_nan(b))
        } else {
            r.iter().fold(T::highest(), |a, &b| a.min_nan(b))
        }
    }))
}
fn max_all(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    empty_check(&x, "max")?;
    t(extreme_op(&x, None, false, true)?)
}
fn min_all(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    empty_check(&x, "min")?;
    t(extreme_op(&x, None, false, false)?)
}
fn amax(args: &mut Args<'_>) -> R {
    let dims = args.int_list(1)?;
    t(extreme_op(
        &args.tensor(0)?,
        Some(&dims),
        args.bool(2)?,
        true,
    )?)
}
fn amin(args: &mut Args<'_>) -> R {
    let dims = args.int_list(1)?;
    t(extreme_op(
        &args.tensor(0)?,
        Some(&dims),
        args.bool(2)?,
        false,
    )?)
}

/// Index of the first maximum (minimum) of a row; the first NaN wins.
fn arg_extreme<T: Real>(r: &[T], is_max: bool) -> (T, i64) {
    let mut best = match r.first() {
        Some(&v) => v,
        None => return (T::zero(), 0),
    };
    let mut idx = 0usize;
    if !best.is_nan_val() {
        for (i, &v) in r.iter().enumerate().skip(1) {
            if v.is_nan_val() {
                best = v;
                idx = i;
                break;
            }
            if (is_max && v > best) || (!is_max && v < best) {
                best = v;
                idx = i;
            }
        }
    }
    (best, idx as i64)
}

/// `max.dim`/`min.dim`: (values, int64 indices).
pub(crate) fn extreme_dim(
    x: &Tensor,
    dim: i64,
    keepdim: bool,
    is_max: bool,
) -> crate::Result<(Tensor, Tensor)> {
    let plan = ReducePlan::new(x, Some(&[dim]), keepdim)?;
    if plan.reduced == 0 {
        return Err(empty_reduction_dim(
            if is_max { "max" } else { "min" },
            x,
            dim,
        ));
    }
    crate::dispatch_standard_real!(x.dtype(), "max.dim", |T| plan
        .rows2::<T, T, i64, _>(|r| arg_extreme(r, is_max)))
}
fn max_dim(args: &mut Args<'_>) -> R {
    let (v, i) = extreme_dim(&args.tensor(0)?, args.int(1)?, args.bool(2)?, true)?;
    pair(v, i)
}
fn min_dim(args: &mut Args<'_>) -> R {
    let (v, i) = extreme_dim(&args.tensor(0)?, args.int(1)?, args.bool(2)?, false)?;
    pair(v, i)
}
fn argext(args: &Args<'_>, is_max: bool) -> R {
    let x = args.tensor(0)?;
    let dim = args.opt_int(1)?;
    let keepdim = args.bool(2)?;
    let plan = match dim {
        Some(d) => ReducePlan::new(&x, Some(&[d]), keepdim)?,
        None => ReducePlan::new(&x, None, keepdim)?,
    };
    if plan.reduced == 0 {
        return Err(dim_required_for_empty(if is_max {
            "argmax"
        } else {
            "argmin"
        }));
    }
    t(crate::dispatch_standard_real!(x.dtype(), "argmax", |T| {
        plan.rows::<T, i64, _>(|r| arg_extreme(r, is_max).1)
    })?)
}
fn argmax(args: &mut Args<'_>) -> R {
    argext(args, true)
}
fn argmin(args: &mut Args<'_>) -> R {
    argext(args, false)
}
/// The deprecated `_aminmax(self)`: `aminmax` over every element.
fn aminmax_all(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    empty_check(&x, "_aminmax")?;
    pair(
        extreme_op(&x, None, false, false)?,
        extreme_op(&x, None, false, true)?,
    )
}

fn aminmax(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let dim = args.opt_int(1)?;
    let keepdim = args.bool(2)?;
    let dims: Option<Vec<i64>> = dim.map(|d| vec![d]);
    if dims.is_none() {
        empty_check(&x, "aminmax")?;
    }
    let lo = extreme_op(&x, dims.as_deref(), keepdim, false)?;
    let hi = extreme_op(&x, dims.as_deref(), keepdim, true)?;
    pair(lo, hi)
}

/// `all` (`is_all`) / `any` over dims; uint8 inputs give uint8, others bool.
fn all_any(x: &Tensor, dims: Option<&[i64]>, keepdim: bool, is_all: bool) -> crate::Result<Tensor> {
    let xb = x.to_dtype(DType::Bool)?;
    let plan = ReducePlan::new(&xb, dims, keepdim)?;
    let r = plan.rows::<bool, bool, _>(|r| {
        if is_all {
            r.iter().all(|&v| v)
        } else {
            r.iter().any(|&v| v)
        }
    })?;
    if x.dtype() == DType::UInt8 {
        r.to_dtype(DType::UInt8)
    } else {
        Ok(r)
    }
}
fn all(args: &mut Args<'_>) -> R {
    t(all_any(&args.tensor(0)?, None, false, true)?)
}
fn any(args: &mut Args<'_>) -> R {
    t(all_any(&args.tensor(0)?, None, false, false)?)
}
fn all_dim(args: &mut Args<'_>) -> R {
    let d = args.int(1)?;
    t(all_any(&args.tensor(0)?, Some(&[d]), args.bool(2)?, true)?)
}
fn any_dim(args: &mut Args<'_>) -> R {
    let d = args.int(1)?;
    t(all_any(&args.tensor(0)?, Some(&[d]), args.bool(2)?, false)?)
}
fn all_dims(args: &mut Args<'_>) -> R {
    let d = args.opt_int_list(1)?;
    t(all_any(
        &args.tensor(0)?,
        d.as_deref(),
        args.bool(2)?,
        true,
    )?)
}
fn any_dims(args: &mut Args<'_>) -> R {
    let d = args.opt_int_list(1)?;
    t(all_any(
        &args.tensor(0)?,
        d.as_deref(),
        args.bool(2)?,
        false,
    )?)
}

/// Row statistics in f64: (variance with `correction`, mean).
fn var_mean_row(r: &[f64], correction: f64) -> (f64, f64) {
    let n = r.len() as f64;
    let mean = pairwise_sum(r, &|v: f64| v) / n;
    let ss = pairwise_sum(r, &|v: f64| (v - mean) * (v - mean));
    (ss / (n - correction).max(0.0), mean)
}

/// (var or std, mean) over dims.
fn var_std(
    x: &Tensor,
    dims: Option<&[i64]>,
    correction: f64,
    keepdim: bool,
    take_sqrt: bool,
) -> crate::Result<(Tensor, Tensor)> {
    let dt = x.dtype();
    if !dt.is_floating_point() {
        return Err(wrong_dtype(
            "std/var",
            "input",
            "a floating point tensor",
            dt,
        ));
    }
    let plan = ReducePlan::new(&x.to_dtype(DType::Float64)?, dims, keepdim)?;
    let (v, m) = plan.rows2::<f64, f64, f64, _>(|r| {
        let (v, m) = var_mean_row(r, correction);
        (if take_sqrt { v.sqrt() } else { v }, m)
    })?;
    Ok((v.to_dtype(dt)?, m.to_dtype(dt)?))
}

/// The overload of a var/std kernel, fixed at registration.
#[derive(Clone, Copy)]
enum VarOverload {
    /// `(self, unbiased)`
    Unbiased,
    /// `.dim(self, dim, unbiased, keepdim)`
    Dim,
    /// `.correction(self, dim, *, correction, keepdim)`
    Correction,
}

/// Arguments of the var/std family: (dims, correction, keepdim).
fn var_args(args: &Args<'_>, ov: VarOverload) -> crate::Result<(Option<Vec<i64>>, f64, bool)> {
    match ov {
        VarOverload::Correction => {
            let c = args.opt_scalar(2)?.map(|s| s.to_f64()).unwrap_or(1.0);
            Ok((args.opt_int_list(1)?, c, args.bool(3)?))
        }
        VarOverload::Dim => {
            let c = if args.bool(2)? { 1.0 } else { 0.0 };
            Ok((args.opt_int_list(1)?, c, args.bool(3)?))
        }
        VarOverload::Unbiased => {
            let c = if args.bool(1)? { 1.0 } else { 0.0 };
            Ok((None, c, false))
        }
    }
}

/// var / std (`sqrt`), alone or with the mean (`with_mean`).
fn var_family(args: &mut Args<'_>, ov: VarOverload, sqrt: bool, with_mean: bool) -> R {
    let (d, c, k) = var_args(args, ov)?;
    let (v, m) = var_std(&args.tensor(0)?, d.as_deref(), c, k, sqrt)?;
    if with_mean {
        pair(v, m)
    } else {
        t(v)
    }
}

macro_rules! var_kernels {
    ($($name:ident => $ov:ident, $sqrt:expr, $mean:expr;)*) => {$(
        fn $name(args: &mut Args<'_>) -> R {
            var_family(args, VarOverload::$ov, $sqrt, $mean)
        }
    )*};
}
var_kernels! {
    var => Unbiased, false, false;
    var_dim => Dim, false, false;
    var_correction => Correction, false, false;
    std => Unbiased, true, false;
    std_dim => Dim, true, false;
    std_correction => Correction, true, false;
    var_mean => Unbiased, false, true;
    var_mean_dim => Dim, false, true;
    var_mean_correction => Correction, false, true;
    std_mean => Unbiased, true, true;
    std_mean_dim => Dim, true, true;
    std_mean_correction => Correction, true, true;
}

/// The vector p-norm over dims, computed in f64 and stored as `dtype` (or the input's real dtype).
pub(crate) fn vector_norm(
    x: &Tensor,
    p: f64,
    dims: Option<&[i64]>,
    keepdim: bool,
    dtype: Option<DType>,
) -> crate::Result<Tensor> {
    let dt = x.dtype();
    if !(dt.is_floating_point() || dt.is_complex()) {
        return Err(wrong_dtype(
            "linalg.vector_norm",
            "input",
            "a floating point or complex tensor",
            dt,
        ));
    }
    let out = dtype.map(|d| d.to_real()).unwrap_or(dt.to_real());
    let mag = match dt {
        DType::Complex64 => map_unary::<Complex32, f64, _>(x, |v| v.norm() as f64)?,
        DType::Complex128 => map_unary::<Complex64, f64, _>(x, |v| v.norm())?,
        _ => x.to_dtype(DType::Float64)?,
    };
    let plan = ReducePlan::new(&mag, dims, keepdim)?;
    let r = plan.rows::<f64, f64, _>(|r| {
        if p == f64::INFINITY {
            r.iter().fold(0.0f64, |a, &b| {
                if b.is_nan() || a.is_nan() {
                    f64::NAN
                } else {
                    a.max(b.abs())
                }
            })
        } else if p == f64::NEG_INFINITY {
            r.iter().fold(f64::INFINITY, |a, &b| {
                if b.is_nan() || a.is_nan() {
                    f64::NAN
                } else {
                    a.min(b.abs())
                }
            })
        } else if p == 0.0 {
            r.iter().filter(|&&v| v != 0.0).count() as f64
        } else if p == 1.0 {
            pairwise_sum(r, &|v: f64| v.abs())
        } else if p == 2.0 {
            pairwise_sum(r, &|v: f64| v * v).sqrt()
        } else {
            pairwise_sum(r, &|v: f64| v.abs().powf(p)).powf(1.0 / p)
        }
    })?;
    r.to_dtype(out)
}
fn linalg_vector_norm(args: &mut Args<'_>) -> R {
    let p = args.scalar(1)?.to_f64();
    let dims = args.opt_int_list(2)?;
    t(vector_norm(
        &args.tensor(0)?,
        p,
        dims.as_deref(),
        args.bool(3)?,
        args.opt_dtype(4)?,
    )?)
}
/// `norm.Scalar(self, p)`, `.ScalarOpt_dim(self, p, dim, keepdim)`,
/// `.ScalarOpt_dim_dtype(self, p, dim, keepdim, *, dtype)`, `.ScalarOpt_dtype(self, p, *, dtype)`:
/// one kernel per overload, `with_dim` / `with_dtype` fixed at registration.
fn norm_overload(args: &mut Args<'_>, with_dim: bool, with_dtype: bool) -> R {
    let x = args.tensor(0)?;
    let p = args.opt_scalar(1)?.map(|s| s.to_f64()).unwrap_or(2.0);
    let (dims, keepdim) = if with_dim {
        (Some(args.int_list(2)?), args.bool(3)?)
    } else {
        (None, false)
    };
    let dtype = match (with_dim, with_dtype) {
        (true, true) => Some(args.dtype(4)?),
        (false, true) => Some(args.dtype(2)?),
        _ => None,
    };
    t(vector_norm(&x, p, dims.as_deref(), keepdim, dtype)?)
}
fn norm_scalar(args: &mut Args<'_>) -> R {
    norm_overload(args, false, false)
}
fn norm_dim(args: &mut Args<'_>) -> R {
    norm_overload(args, true, false)
}
fn norm_dim_dtype(args: &mut Args<'_>) -> R {
    norm_overload(args, true, true)
}
fn norm_dtype(args: &mut Args<'_>) -> R {
    norm_overload(args, false, true)
}
fn frobenius_norm(args: &mut Args<'_>) -> R {
    let dims = args.int_list(1)?;
    t(vector_norm(
        &args.tensor(0)?,
        2.0,
        Some(&dims),
        args.bool(2)?,
        None,
    )?)
}

fn logsumexp(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let dims = args.int_list(1)?;
    let keepdim = args.bool(2)?;
    let out = if x.dtype().is_integral(true) {
        DType::Float32
    } else {
        x.dtype()
    };
    if !out.is_floating_point() {
        return Err(not_implemented_for("logsumexp", out));
    }
    let plan = ReducePlan::new(&x.to_dtype(DType::Float64)?, Some(&dims), keepdim)?;
    let r = plan.rows::<f64, f64, _>(|r| {
        let m = r.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b));
        if m.is_infinite() {
            return m;
        }
        m + pairwise_sum(r, &|v: f64| (v - m).exp()).ln()
    })?;
    t(r.to_dtype(out)?)
}

/// cumsum (`product`: cumprod) along `dim`, in `dtype` (ints default to int64).
pub(crate) fn cumulative(
    x: &Tensor,
    dim: i64,
    dtype: Option<DType>,
    product: bool,
) -> crate::Result<Tensor> {
    let out = sum_dtype(x.dtype(), dtype);
    let dim = wrap_dim(dim, x.dim())?;
    let compute = match out {
        DType::Float16 | DType::BFloat16 => DType::Float32,
        d => d,
    };
    let xc = x.to_dtype(compute)?;
    let r = dispatch_all!(compute, "cumsum", |T| along_dim::<T, T, _>(
        &xc,
        dim,
        |s, d| {
            let mut acc = if product { T::one() } else { T::zero() };
            for (o, &v) in d.iter_mut().zip(s) {
                acc = if product { acc.mul(v) } else { acc.add(v) };
                *o = acc;
            }
        }
    ))?;
    r.to_dtype(out)
}
fn cumsum(args: &mut Args<'_>) -> R {
    t(cumulative(
        &args.tensor(0)?,
        args.int(1)?,
        args.opt_dtype(2)?,
        false,
    )?)
}
fn cumprod(args: &mut Args<'_>) -> R {
    t(cumulative(
        &args.tensor(0)?,
        args.int(1)?,
        args.opt_dtype(2)?,
        true,
    )?)
}
inplace_of! { cumsum_ => cumsum; }
inplace_of! { cumprod_ => cumprod; }

fn count_nonzero_op(x: &Tensor, dims: Option<&[i64]>) -> crate::Result<Tensor> {
    let xb = x.to_dtype(DType::Bool)?;
    let plan = ReducePlan::new(&xb, dims, false)?;
    plan.rows::<bool, i64, _>(|r| r.iter().filter(|&&v| v).count() as i64)
}
fn count_nonzero(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let d = args.opt_int(1)?;
    t(match d {
        Some(d) => count_nonzero_op(&x, Some(&[d]))?,
        None => count_nonzero_op(&x, None)?,
    })
}
fn count_nonzero_dims(args: &mut Args<'_>) -> R {
    let d = args.int_list(1)?;
    t(count_nonzero_op(
        &args.tensor(0)?,
        if d.is_empty() { None } else { Some(&d) },
    )?)
}

/// Lower median of a row with its index (`skip_nan`: ignore NaNs; otherwise NaN wins).
fn median_row<T: Real>(r: &[T], skip_nan: bool) -> (T, i64) {
    if !skip_nan {
        if let Some(i) = r.iter().position(|v| v.is_nan_val()) {
            return (r[i], i as i64);
        }
    }
    let mut idx: Vec<usize> = (0..r.len()).filter(|&i| !r[i].is_nan_val()).collect();
    if idx.is_empty() {
        return match r.first() {
            Some(&v) => (v, 0),
            None => (T::zero(), 0),
        };
    }
    let k = (idx.len() - 1) / 2;
    idx.sort_by(|&a, &b| {
        r[a].partial_cmp(&r[b])
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.cmp(&b))
    });
    let i = idx[k];
    (r[i], i as i64)
}
fn median_all(args: &Args<'_>, skip_nan: bool) -> R {
    let x = args.tensor(0)?;
    if x.numel() == 0 {
        return Err(invalid_argument(
            "median",
            "input",
            "must not be empty",
            "a tensor of 0 elements",
        ));
    }
    let plan = ReducePlan::new(&x, None, false)?;
    t(crate::dispatch_standard_real!(x.dtype(), "median", |T| {
        plan.rows::<T, T, _>(|r| median_row(r, skip_nan).0)
    })?)
}
fn median_dim(args: &Args<'_>, skip_nan: bool) -> R {
    let x = args.tensor(0)?;
    let plan = ReducePlan::new(&x, Some(&[args.int(1)?]), args.bool(2)?)?;
    if plan.reduced == 0 {
        return Err(empty_reduction_dim("median", &x, args.int(1)?));
    }
    let (v, i) = crate::dispatch_standard_real!(x.dtype(), "median", |T| plan
        .rows2::<T, T, i64, _>(|r| median_row(r, skip_nan)))?;
    pair(v, i)
}
fn median(args: &mut Args<'_>) -> R {
    median_all(args, false)
}
fn nanmedian(args: &mut Args<'_>) -> R {
    median_all(args, true)
}
fn median_d(args: &mut Args<'_>) -> R {
    median_dim(args, false)
}
fn nanmedian_d(args: &mut Args<'_>) -> R {
    median_dim(args, true)
}

/// `quantile`'s `interpolation` argument.
#[derive(Clone, Copy, PartialEq)]
enum QuantileInterpolation {
    Linear,
    Lower,
    Higher,
    Midpoint,
    Nearest,
}

impl QuantileInterpolation {
    fn parse(op: &str, name: &str) -> crate::Result<Self> {
        Ok(match name {
            "linear" => Self::Linear,
            "lower" => Self::Lower,
            "higher" => Self::Higher,
            "midpoint" => Self::Midpoint,
            "nearest" => Self::Nearest,
            other => {
                return Err(invalid_argument(
                    op,
                    "interpolation",
                    "must be one of linear, lower, higher, midpoint, nearest",
                    format!("'{other}'"),
                ))
            }
        })
    }
}

/// The quantiles `qs` of one row, as ATen's `quantile_compute`: the row sorted with NaN last,
/// ranks `q * (n - 1)` in the input's dtype (`n` counts non-NaN values for nanquantile; a NaN
/// makes quantile's rank the last index, so the result is NaN), rounded per `interp`, then
/// `lerp` between the neighbouring order statistics.
fn quantiles_of_row<F: num_traits::Float>(
    row: &[F],
    qs: &[F],
    ignore_nan: bool,
    interp: QuantileInterpolation,
    out: &mut [F],
) {
    let mut sorted: Vec<F> = row.to_vec();
    sorted.sort_by(|a, b| match (a.is_nan(), b.is_nan()) {
        (true, true) => std::cmp::Ordering::Equal,
        (true, false) => std::cmp::Ordering::Greater,
        (false, true) => std::cmp::Ordering::Less,
        _ => a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal),
    });
    let last_index = F::from(sorted.len().saturating_sub(1)).unwrap_or_else(F::zero);
    let valid = sorted.iter().filter(|v| !v.is_nan()).count();
    let has_nan = valid < sorted.len();
    let at = |rank: F| -> F {
        let i = rank
            .to_usize()
            .unwrap_or(0)
            .min(sorted.len().saturating_sub(1));
        sorted.get(i).copied().unwrap_or_else(F::nan)
    };
    for (o, &q) in out.iter_mut().zip(qs) {
        let mut rank = if ignore_nan {
            // all-NaN rows get rank 0, which reads a NaN
            let r = q * (F::from(valid).unwrap_or_else(F::zero) - F::one());
            if r < F::zero() {
                F::zero()
            } else {
                r
            }
        } else if has_nan {
            last_index
        } else {
            q * last_index
        };
        match interp {
            QuantileInterpolation::Lower => rank = rank.floor(),
            QuantileInterpolation::Higher => rank = rank.ceil(),
            // torch.round rounds half to even
            QuantileInterpolation::Nearest => rank = round_half_even(rank),
            _ => {}
        }
        let below = at(rank);
        *o = match interp {
            QuantileInterpolation::Linear | QuantileInterpolation::Midpoint => {
                let weight = if interp == QuantileInterpolation::Midpoint {
                    F::from(0.5).unwrap_or_else(F::zero)
                } else {
                    rank - rank.floor()
                };
                lerp(below, at(rank.ceil()), weight)
            }
            _ => below,
        };
    }
}

fn round_half_even<F: num_traits::Float>(x: F) -> F {
    let r = x.round();
    let two = F::one() + F::one();
    if (x - x.trunc()).abs() == F::from(0.5).unwrap_or_else(F::zero) && r % two != F::zero() {
        r - x.signum()
    } else {
        r
    }
}

/// ATen's `lerp` formula (exact at both ends).
fn lerp<F: num_traits::Float>(start: F, end: F, weight: F) -> F {
    if weight.abs() < F::from(0.5).unwrap_or_else(F::zero) {
        start + weight * (end - start)
    } else {
        end - (end - start) * (F::one() - weight)
    }
}

/// quantile / nanquantile with `q` a tensor (0-d or 1-d, the input's dtype) or, for the
/// `.scalar` overloads, a float cast to the input's dtype. A 1-d `q` puts its dim first.
fn quantile_family(args: &mut Args<'_>, ignore_nan: bool) -> R {
    let op = if ignore_nan {
        "nanquantile"
    } else {
        "quantile"
    };
    let x = args.tensor(0)?;
    let dim = args.opt_int(2)?;
    let keepdim = args.bool(3)?;
    let interp = QuantileInterpolation::parse(op, &args.str(4)?)?;
    let (q, q_shape): (Tensor, Vec<usize>) = match args.get(1)? {
        IValue::Tensor(q) => {
            if q.dim() > 1 {
                return Err(rank_mismatch(
                    op,
                    "q",
                    RankRequirement::AtMost(1),
                    q.shape(),
                ));
            }
            if q.dtype() != x.dtype() {
                return Err(TensorError::DTypeMismatch {
                    expected: x.dtype(),
                    got: q.dtype(),
                }
                .into());
            }
            (q.clone(), q.shape().to_vec())
        }
        _ => {
            let q = args.double(1)?;
            if !(0.0..=1.0).contains(&q) {
                return Err(invalid_argument(op, "q", "must be in [0, 1]", q));
            }
            (Tensor::from_vec(vec![q], &[])?.to_dtype(x.dtype())?, vec![])
        }
    };
    if !matches!(x.dtype(), DType::Float32 | DType::Float64) {
        return Err(wrong_dtype(op, "input", "float or double", x.dtype()));
    }
    if x.numel() == 0 {
        return Err(invalid_argument(
            op,
            "input",
            "must not be empty",
            "a tensor of 0 elements",
        ));
    }
    let plan = match dim {
        Some(d) => ReducePlan::new(&x, Some(&[d]), keepdim)?,
        None => {
            let mut p = ReducePlan::new(&x, None, keepdim)?;
            if !keepdim {
                p.out_shape.clear();
            }
            p
        }
    };
    macro_rules! compute {
        ($F:ty) => {{
            let qs = q.to_vec::<$F>()?;
            if let Some(v) = qs.iter().find(|&&v| !(0.0..=1.0).contains(&v)) {
                return Err(invalid_argument(op, "q", "must hold values in [0, 1]", v));
            }
            let src = plan.input.to_vec::<$F>()?;
            let (nq, red) = (qs.len(), plan.reduced.max(1));
            let mut per_row = vec![0.0 as $F; plan.outer * nq];
            for (row, out) in src.chunks(red).zip(per_row.chunks_mut(nq)) {
                quantiles_of_row(row, &qs, ignore_nan, interp, out);
            }
            // rows are [outer, q]; the result is [q, outer...]
            let mut data = vec![0.0 as $F; per_row.len()];
            for r in 0..plan.outer {
                for k in 0..nq {
                    data[k * plan.outer + r] = per_row[r * nq + k];
                }
            }
            let mut shape = q_shape.clone();
            shape.extend_from_slice(&plan.out_shape);
            Tensor::from_vec(data, &shape)?
        }};
    }
    let out = match x.dtype() {
        DType::Float64 => compute!(f64),
        _ => compute!(f32),
    };
    t(out)
}
fn quantile(args: &mut Args<'_>) -> R {
    quantile_family(args, false)
}
fn nanquantile(args: &mut Args<'_>) -> R {
    quantile_family(args, true)
}

/// The most frequent value of a row and its index, as ATen's CPU `mode` kernel: values sorted,
/// the first (smallest) of the most frequent values wins, and its index is the last position
/// of that value in the sorted order (a stable sort: the largest original index).
fn mode_row<T: Real>(r: &[T]) -> (T, i64) {
    let mut idx: Vec<usize> = (0..r.len()).collect();
    idx.sort_by(|&a, &b| r[a].partial_cmp(&r[b]).unwrap_or(std::cmp::Ordering::Equal));
    let (mut best, mut best_i, mut best_freq, mut freq) = (T::zero(), 0i64, 0usize, 0usize);
    for (k, &i) in idx.iter().enumerate() {
        freq += 1;
        let group_ends = idx.get(k + 1).is_none_or(|&j| r[j] != r[i]);
        if group_ends {
            if freq > best_freq {
                (best, best_i, best_freq) = (r[i], i as i64, freq);
            }
            freq = 0;
        }
    }
    (best, best_i)
}
fn mode(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let plan = ReducePlan::new(&x, Some(&[args.int(1)?]), args.bool(2)?)?;
    if plan.reduced == 0 && x.numel() > 0 {
        return Err(empty_reduction_dim("mode", &x, args.int(1)?));
    }
    let (v, i) = crate::dispatch_standard_real!(x.dtype(), "mode", |T| plan
        .rows2::<T, T, i64, _>(mode_row))?;
    pair(v, i)
}

/// segment_reduce(data, reduce, *, lengths, indices, offsets, axis, unsafe, initial): each
/// run of `lengths[i]` slices along `axis` (or `offsets[i]..offsets[i + 1]`) reduced by max,
/// min, sum, mean or prod, as PyTorch's CPU kernel does: `initial` (or the reduction's
/// identity) starts each segment and is all an empty one holds (an empty mean without
/// `initial` is NaN); a mean divides by the segment's length; NaN propagates through max/min.
/// The lengths (offsets) are `data.shape[..axis] + [segments]` (`+ [segments + 1]`).
fn segment_reduce(a: &mut Args) -> crate::Result<IValue> {
    #[derive(PartialEq, Clone, Copy)]
    enum Kind {
        Max,
        Min,
        Sum,
        Mean,
        Prod,
    }
    let x = a.tensor(0)?;
    let kind = match &*a.str(1)? {
        "max" => Kind::Max,
        "min" => Kind::Min,
        "sum" => Kind::Sum,
        "mean" => Kind::Mean,
        "prod" => Kind::Prod,
        other => {
            return Err(invalid_argument(
                "segment_reduce",
                "reduce",
                "must be one of sum, prod, max, min, mean",
                format!("'{other}'"),
            ))
        }
    };
    if !x.dtype().is_floating_point() {
        return Err(not_implemented_for("segment_reduce", x.dtype()));
    }
    if a.opt_tensor(3)?.is_some() {
        return Err(unsupported_feature(
            "segment_reduce",
            "indices based reduction (PyTorch lacks it too)",
        ));
    }
    let axis = wrap_dim(a.int(5)?, x.dim())?;
    let outer: usize = x.shape()[..axis].iter().product();
    let size = x.shape()[axis];
    let inner: usize = x.shape()[axis + 1..].iter().product();
    // per outer index, the segments' (start, length)
    let segments: Vec<Vec<(usize, usize)>> = match (a.opt_tensor(2)?, a.opt_tensor(4)?) {
        (Some(l), _) => {
            let lv = l.contiguous()?.to_vec::<i64>()?;
            let per = lv.len().checked_div(outer).unwrap_or(0);
            if per * outer != lv.len()
                || l.shape()[..l.dim().saturating_sub(1)] != x.shape()[..axis]
            {
                return Err(invalid_argument(
                    "segment_reduce",
                    "lengths",
                    format!("must match data {:?} before axis {axis}", x.shape()),
                    format!("shape {:?}", l.shape()),
                ));
            }
            lv.chunks(per.max(1))
                .map(|row| {
                    let mut start = 0usize;
                    row.iter()
                        .map(|&n| {
                            let n = usize::try_from(n).map_err(|_| {
                                invalid_argument(
                                    "segment_reduce",
                                    "lengths",
                                    "must be non-negative",
                                    n,
                                )
                            })?;
                            let seg = (start, n);
                            start += n;
                            Ok(seg)
                        })
                        .collect::<crate::Result<Vec<_>>>()
                })
                .collect::<crate::Result<_>>()?
        }
        (None, Some(o)) => {
            let ov = o.contiguous()?.to_vec::<i64>()?;
            let per = ov.len().checked_div(outer).unwrap_or(0);
            if per == 0 || per * outer != ov.len() {
                return Err(invalid_argument(
                    "segment_reduce",
                    "offsets",
                    format!("must match data {:?} before axis {axis}", x.shape()),
                    format!("shape {:?}", o.shape()),
                ));
            }
            ov.chunks(per)
                .map(|row| {
                    row.windows(2)
                        .map(|w| match (usize::try_from(w[0]), usize::try_from(w[1])) {
                            (Ok(lo), Ok(hi)) if hi >= lo => Ok((lo, hi - lo)),
                            _ => Err(invalid_argument(
                                "segment_reduce",
                                "offsets",
                                "must be non-negative and non-decreasing",
                                format!("{} then {}", w[0], w[1]),
                            )),
                        })
                        .collect::<crate::Result<Vec<_>>>()
                })
                .collect::<crate::Result<_>>()?
        }
        (None, None) => {
            return Err(invalid_argument(
                "segment_reduce",
                "lengths or offsets",
                "must be defined (one of them)",
                "None",
            ))
        }
    };
    if segments
        .iter()
        .any(|row| row.iter().map(|&(s, n)| s + n).max().unwrap_or(0) > size)
    {
        return Err(invalid_argument(
            "segment_reduce",
            "lengths/offsets",
            format!("must stay within data.size({axis}) = {size}"),
            "segments past it",
        ));
    }
    let count = segments.first().map_or(0, Vec::len);
    let initial = a.opt_scalar(7)?.map(|s| s.to_f64());
    let single = x.dtype() != DType::Float64;
    let initial = initial.map(|v| if single { v as f32 as f64 } else { v });
    let xs = x.contiguous()?.to_vec::<f64>()?;
    let mut out = vec![0.0; outer * count * inner];
    for (o, row) in segments.iter().enumerate() {
        for (k, &(start, n)) in row.iter().enumerate() {
            for i in 0..inner {
                let mut acc = initial.unwrap_or(match kind {
                    Kind::Max => f64::NEG_INFINITY,
                    Kind::Min => f64::INFINITY,
                    Kind::Sum | Kind::Mean => 0.0,
                    Kind::Prod => 1.0,
                });
                for j in start..start + n {
                    let v = xs[(o * size + j) * inner + i];
                    acc = match kind {
                        Kind::Max if v.is_nan() => v,
                        Kind::Max => {
                            if acc.is_nan() || acc >= v {
                                acc
                            } else {
                                v
                            }
                        }
                        Kind::Min if v.is_nan() => v,
                        Kind::Min => {
                            if acc.is_nan() || acc <= v {
                                acc
                            } else {
                                v
                            }
                        }
                        Kind::Sum | Kind::Mean => acc + v,
                        Kind::Prod => acc * v,
                    };
                }
                if kind == Kind::Mean {
                    if n > 0 && !acc.is_nan() {
                        acc /= n as f64;
                    } else if n == 0 && initial.is_none() {
                        acc = f64::NAN;
                    }
                }
                out[(o * count + k) * inner + i] = acc;
            }
        }
    }
    let mut shape = x.shape().to_vec();
    shape[axis] = count;
    Ok(IValue::Tensor(
        Tensor::from_vec(out, &shape)?.to_dtype(x.dtype())?,
    ))
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::sum", sum);
    r.add("aten::sum.dim_IntList", sum_dim);
    r.add("aten::nansum", nansum);
    r.add("aten::mean", mean);
    r.add("aten::mean.dim", mean_dim);
    r.add("aten::nanmean", nanmean);
    r.add("aten::prod", prod);
    r.add("aten::prod.dim_int", prod_dim);
    r.add("aten::max", max_all);
    r.add("aten::min", min_all);
    r.add("aten::max.dim", max_dim);
    r.add("aten::min.dim", min_dim);
    r.add("aten::max.dim_max", |a| {
        let r = max_dim(a)?;
        a.write_outs(3, r)
    });
    r.add("aten::min.dim_min", |a| {
        let r = min_dim(a)?;
        a.write_outs(3, r)
    });
    r.add("aten::amax", amax);
    r.add("aten::amin", amin);
    r.add("aten::argmax", argmax);
    r.add("aten::argmin", argmin);
    r.add("aten::aminmax", aminmax);
    // `_aminmax.dim(self, dim, keepdim)` has aminmax's argument layout
    r.add("aten::_aminmax.dim", aminmax);
    r.add("aten::_aminmax", aminmax_all);
    r.add_all(&["aten::all", "aten::_is_all_true"], all);
    r.add_all(&["aten::any", "aten::_is_any_true"], any);
    r.add("aten::all.dim", all_dim);
    r.add("aten::any.dim", any_dim);
    r.add("aten::all.dims", all_dims);
    r.add("aten::any.dims", any_dims);
    r.add("aten::var", var);
    r.add("aten::var.dim", var_dim);
    r.add("aten::var.correction", var_correction);
    r.add("aten::std", std);
    r.add("aten::std.dim", std_dim);
    r.add("aten::std.correction", std_correction);
    r.add("aten::var_mean", var_mean);
    r.add("aten::var_mean.dim", var_mean_dim);
    r.add("aten::var_mean.correction", var_mean_correction);
    r.add("aten::std_mean", std_mean);
    r.add("aten::std_mean.dim", std_mean_dim);
    r.add("aten::std_mean.correction", std_mean_correction);
    r.add("aten::norm.Scalar", norm_scalar);
    r.add("aten::norm.ScalarOpt_dim", norm_dim);
    r.add("aten::norm.ScalarOpt_dim_dtype", norm_dim_dtype);
    r.add("aten::norm.ScalarOpt_dtype", norm_dtype);
    r.add("aten::linalg_vector_norm", linalg_vector_norm);
    r.add("aten::frobenius_norm.dim", frobenius_norm);
    r.add("aten::logsumexp", logsumexp);
    r.add("aten::special_logsumexp", logsumexp);
    r.add("aten::cumsum", cumsum);
    r.add("aten::cumprod", cumprod);
    r.add("aten::cumsum_", cumsum_);
    r.add("aten::cumprod_", cumprod_);
    r.add("aten::count_nonzero", count_nonzero);
    r.add("aten::count_nonzero.dim_IntList", count_nonzero_dims);
    r.add("aten::median", median);
    r.add("aten::nanmedian", nanmedian);
    r.add("aten::median.dim", median_d);
    r.add("aten::nanmedian.dim", nanmedian_d);
    r.add("aten::median.dim_values", |a| {
        let r = median_d(a)?;
        a.write_outs(3, r)
    });
    r.add("aten::nanmedian.dim_values", |a| {
        let r = nanmedian_d(a)?;
        a.write_outs(3, r)
    });
    r.add_overloads("aten::quantile", &["", "scalar"], quantile);
    r.add_overloads("aten::nanquantile", &["", "scalar"], nanquantile);
    r.add("aten::mode", mode);
    r.add("aten::segment_reduce", segment_reduce);
    r.add("aten::mode.values", |a| {
        let r = mode(a)?;
        a.write_outs(3, r)
    });
}
