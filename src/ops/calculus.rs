//! Numerical integration of sampled functions: `trapezoid` / `trapz` (the trapezoid rule along a
//! dim, with sample points `x` or a constant spacing `dx`) and `cumulative_trapezoid`.
//!
//! Each kernel is ATen's composite, step for step, over the crate's promoting arithmetic, so
//! dtypes come out as PyTorch's: integral samples sum in int64 and turn float32 at the division
//! by 2 (or the product with a float spacing), and a 1-D `x` broadcasts along `dim` only after
//! its differences are taken, as NumPy does.

use super::elementwise::{add_sub, div_op, mul_op};
use super::kernels::operand::Operand;
use super::reduce::{cumulative, sum_op};
use super::shape::{reshape, select, slice, value_err, wdim};
use super::{Args, Registry};
use crate::runtime::IValue;
use crate::tensor::{DType, Scalar, Tensor};

type R = crate::Result<IValue>;

fn tensor_operand(t: Tensor) -> Operand {
    Operand::Tensor(t)
}

fn plus(a: Tensor, b: Tensor) -> crate::Result<Tensor> {
    add_sub(
        &tensor_operand(a),
        &tensor_operand(b),
        Scalar::Int(1),
        false,
    )
}

fn minus(a: Tensor, b: Tensor) -> crate::Result<Tensor> {
    add_sub(&tensor_operand(a), &tensor_operand(b), Scalar::Int(1), true)
}

fn times(a: Tensor, b: Operand) -> crate::Result<Tensor> {
    mul_op(&tensor_operand(a), &b)
}

/// `t.slice(dim, 0, -1)` and `t.slice(dim, 1)`: the left and right ends of every interval.
fn interval_ends(t: &Tensor, dim: usize) -> crate::Result<(Tensor, Tensor)> {
    let dim = dim as i64;
    Ok((
        slice(t, dim, Some(0), Some(-1), 1)?,
        slice(t, dim, Some(1), None, 1)?,
    ))
}

/// The integral of no samples is 0, as NumPy says: zeros of `y`'s shape without `dim`.
fn zeros_without(y: &Tensor, dim: usize) -> crate::Result<Tensor> {
    let mut shape = y.shape().to_vec();
    shape.remove(dim);
    Ok(Tensor::zeros(&shape, y.dtype())?)
}

fn check_not_bool(op: &str, tensors: &[&Tensor]) -> crate::Result<()> {
    if tensors.iter().any(|t| t.dtype() == DType::Bool) {
        return Err(value_err(format!(
            "{op}: received a bool input for `x` or `y`, but bool is not supported"
        )));
    }
    Ok(())
}

/// A spacing `dx` must be a real number (ATen refuses complex and bool).
fn real_spacing(args: &Args<'_>, i: usize, op: &str) -> crate::Result<f64> {
    match args.scalar(i)? {
        Scalar::Int(v) => Ok(v as f64),
        Scalar::Float(v) => Ok(v),
        Scalar::Bool(_) | Scalar::Complex(_) => Err(value_err(format!(
            "{op}: Currently, we only support dx as a real number."
        ))),
    }
}

/// The spacings `x[i+1] - x[i]` along `dim`: a 1-D `x` (one point per sample) is viewed along
/// `dim`, a lower-rank `x` gets leading 1s, and the differences broadcast against `y`'s later.
fn sample_spacing(op: &str, y: &Tensor, x: &Tensor, dim: usize) -> crate::Result<Tensor> {
    let viewed = if x.dim() == 1 {
        if x.shape()[0] != y.shape()[dim] {
            return Err(value_err(format!(
                "{op}: There must be one `x` value for each sample point"
            )));
        }
        let mut sizes = vec![1i64; y.dim()];
        sizes[dim] = x.shape()[0] as i64;
        reshape(x, &sizes)?
    } else if x.dim() < y.dim() {
        let mut sizes = vec![1i64; y.dim() - x.dim()];
        sizes.extend(x.shape().iter().map(|&s| s as i64));
        reshape(x, &sizes)?
    } else {
        x.clone()
    };
    let (left, right) = interval_ends(&viewed, dim)?;
    minus(right, left)
}

/// `trapezoid.x(y, x, *, dim)` and `trapz.x`: `((left + right) * dx).sum(dim) / 2`.
fn trapezoid_x(args: &mut Args<'_>) -> R {
    let (y, x) = (args.tensor(0)?, args.tensor(1)?);
    let dim = wdim(args.int(2)?, y.dim())?;
    if y.shape()[dim] == 0 {
        return Ok(IValue::Tensor(zeros_without(&y, dim)?));
    }
    check_not_bool("trapezoid", &[&y, &x])?;
    let dx = sample_spacing("trapezoid", &y, &x, dim)?;
    let (left, right) = interval_ends(&y, dim)?;
    let areas = times(plus(left, right)?, tensor_operand(dx))?;
    let total = sum_op(&areas, Some(&[dim as i64]), false, None, false)?;
    let half = div_op(
        &tensor_operand(total),
        &Operand::Scalar(Scalar::Float(2.0)),
        None,
    )?;
    Ok(IValue::Tensor(half))
}

/// The constant-spacing rule `(sum(y) - (y[0] + y[-1]) / 2) * dx` along `dim`; `dx` is read
/// after ATen's empty and bool checks, in its order.
fn trapezoid_constant(y: &Tensor, dim: i64, dx: impl FnOnce() -> crate::Result<f64>) -> R {
    let wrapped = wdim(dim, y.dim())?;
    if y.shape()[wrapped] == 0 {
        return Ok(IValue::Tensor(zeros_without(y, wrapped)?));
    }
    if y.dtype() == DType::Bool {
        return Err(value_err(
            "trapezoid: received a bool input for `y`, but bool is not supported",
        ));
    }
    let dx = dx()?;
    let dim = wrapped as i64;
    let total = sum_op(y, Some(&[dim]), false, None, false)?;
    let ends = plus(select(y, dim, 0)?, select(y, dim, -1)?)?;
    let half_ends = times(ends, Operand::Scalar(Scalar::Float(0.5)))?;
    let inner = minus(total, half_ends)?;
    Ok(IValue::Tensor(times(
        inner,
        Operand::Scalar(Scalar::Float(dx)),
    )?))
}

/// `trapezoid.dx(y, *, Scalar dx, int dim)`.
fn trapezoid_dx(args: &mut Args<'_>) -> R {
    trapezoid_constant(&args.tensor(0)?, args.int(2)?, || {
        real_spacing(args, 1, "trapezoid")
    })
}

/// `trapz.dx(y, *, float dx, int dim)`.
fn trapz_dx(args: &mut Args<'_>) -> R {
    trapezoid_constant(&args.tensor(0)?, args.int(2)?, || args.double(1))
}

/// `cumulative_trapezoid.x(y, x, *, dim)`: `((left + right) * dx).cumsum(dim) / 2`.
fn cumulative_trapezoid_x(args: &mut Args<'_>) -> R {
    let (y, x) = (args.tensor(0)?, args.tensor(1)?);
    let dim = wdim(args.int(2)?, y.dim())?;
    check_not_bool("cumulative_trapezoid", &[&y, &x])?;
    let dx = sample_spacing("cumulative_trapezoid", &y, &x, dim)?;
    let (left, right) = interval_ends(&y, dim)?;
    let areas = times(plus(left, right)?, tensor_operand(dx))?;
    let running = cumulative(&areas, dim as i64, None, false)?;
    let half = div_op(
        &tensor_operand(running),
        &Operand::Scalar(Scalar::Float(2.0)),
        None,
    )?;
    Ok(IValue::Tensor(half))
}

/// `cumulative_trapezoid.dx(y, *, Scalar dx, int dim)`: `(dx / 2 * (left + right)).cumsum(dim)`.
fn cumulative_trapezoid_dx(args: &mut Args<'_>) -> R {
    let y = args.tensor(0)?;
    let dx = real_spacing(args, 1, "cumulative_trapezoid")?;
    let dim = wdim(args.int(2)?, y.dim())?;
    let (left, right) = interval_ends(&y, dim)?;
    let areas = times(plus(left, right)?, Operand::Scalar(Scalar::Float(dx / 2.0)))?;
    Ok(IValue::Tensor(cumulative(&areas, dim as i64, None, false)?))
}

pub fn register(r: &mut Registry) {
    r.add_all(&["aten::trapezoid.x", "aten::trapz.x"], trapezoid_x);
    r.add("aten::trapezoid.dx", trapezoid_dx);
    r.add("aten::trapz.dx", trapz_dx);
    r.add("aten::cumulative_trapezoid.x", cumulative_trapezoid_x);
    r.add("aten::cumulative_trapezoid.dx", cumulative_trapezoid_dx);
}
