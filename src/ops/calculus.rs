//! Numerical integration and differentiation of sampled functions: `trapezoid` / `trapz` (the
//! trapezoid rule along a dim, with sample points `x` or a constant spacing `dx`),
//! `cumulative_trapezoid`, and `gradient` (second-order central differences inside, first- or
//! second-order one-sided differences at the edges, with unit, scalar or coordinate spacing).
//!
//! Each kernel is ATen's composite, step for step, over the crate's promoting arithmetic, so
//! dtypes come out as PyTorch's: integral samples sum in int64 and turn float32 at the division
//! by 2 (or the product with a float spacing), and a 1-D `x` broadcasts along `dim` only after
//! its differences are taken, as NumPy does.

use super::elementwise::{add_sub, div_op, mul_op, neg_tensor};
use super::kernels::operand::Operand;
use super::reduce::{cumulative, sum_op};
use super::shape::{cat, reshape, select, slice, tensor_list, wdim};
use super::{Args, Registry};
use crate::ops::kernels::{check_rank, invalid_argument, size_mismatch, wrong_dtype};
use crate::tensor::RankRequirement;
use crate::tensor::{DType, Scalar, Tensor};
use crate::values::IValue;

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
    if let Some(t) = tensors.iter().find(|t| t.dtype() == DType::Bool) {
        return Err(wrong_dtype(op, "x or y", "not bool", t.dtype()));
    }
    Ok(())
}

/// A spacing `dx` must be a real number (ATen refuses complex and bool).
fn real_spacing(args: &Args<'_>, i: usize, op: &str) -> crate::Result<f64> {
    match args.scalar(i)? {
        Scalar::Int(v) => Ok(v as f64),
        Scalar::Float(v) => Ok(v),
        other @ (Scalar::Bool(_) | Scalar::Complex(_)) => Err(invalid_argument(
            op,
            "dx",
            "must be a real number",
            format!("{other:?}"),
        )),
    }
}

/// The spacings `x[i+1] - x[i]` along `dim`: a 1-D `x` (one point per sample) is viewed along
/// `dim`, a lower-rank `x` gets leading 1s, and the differences broadcast against `y`'s later.
fn sample_spacing(op: &str, y: &Tensor, x: &Tensor, dim: usize) -> crate::Result<Tensor> {
    let viewed = if x.dim() == 1 {
        if x.shape()[0] != y.shape()[dim] {
            return Err(size_mismatch(
                op,
                format!("the number of x values (y.size({dim}), one per sample point)"),
                y.shape()[dim] as i64,
                x.shape()[0] as i64,
            ));
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
        return Err(wrong_dtype("trapezoid", "y", "not bool", y.dtype()));
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

// ---------------------------------------------------------------- gradient

fn divided(a: Tensor, b: Operand) -> crate::Result<Tensor> {
    div_op(&tensor_operand(a), &b, None)
}

fn scalar(v: f64) -> Operand {
    Operand::Scalar(Scalar::Float(v))
}

/// `t.slice(dim, start, end)` with step 1.
fn part(t: &Tensor, dim: usize, start: i64, end: Option<i64>) -> crate::Result<Tensor> {
    slice(t, dim as i64, Some(start), end, 1)
}

/// ATen's `pre_check_gradient`: dtype, spacing count, edge order, valid distinct dims, and
/// enough samples along each dim for the edge formulas.
fn check_gradient(
    x: &Tensor,
    spacing_len: Option<usize>,
    dims: Option<&[i64]>,
    edge_order: i64,
) -> crate::Result<()> {
    const OP: &str = "torch.gradient";
    if x.dtype() == DType::UInt8 {
        return Err(wrong_dtype(OP, "input", "not uint8", x.dtype()));
    }
    match (spacing_len, dims) {
        (Some(n), None) if n != x.dim() => {
            return Err(size_mismatch(
                OP,
                "the length of spacing (self.dim(), as dim is not given)",
                x.dim() as i64,
                n as i64,
            ))
        }
        (Some(n), Some(d)) if n != d.len() => {
            return Err(size_mismatch(
                OP,
                "the length of spacing (the length of dim)",
                d.len() as i64,
                n as i64,
            ))
        }
        _ => {}
    }
    if edge_order != 1 && edge_order != 2 {
        return Err(invalid_argument(
            OP,
            "edge_order",
            "must be 1 or 2",
            edge_order,
        ));
    }
    let wrapped: Vec<usize> = match dims {
        Some(d) => d
            .iter()
            .map(|&v| wdim(v, x.dim()))
            .collect::<crate::Result<_>>()?,
        None => (0..x.dim()).collect(),
    };
    let mut seen = vec![false; x.dim()];
    for &d in &wrapped {
        if std::mem::replace(&mut seen[d], true) {
            return Err(invalid_argument(
                OP,
                "dim",
                "must not repeat a dimension",
                format!("{dims:?} (dim {d} twice)"),
            ));
        }
        if (x.shape()[d] as i64) < edge_order + 1 {
            return Err(invalid_argument(
                OP,
                format!("the size of dimension {d}"),
                format!("must be at least edge_order + 1 ({})", edge_order + 1),
                x.shape()[d],
            ));
        }
    }
    Ok(())
}

/// ATen's `gradient_helper_float`: a constant spacing per dim.
fn gradient_uniform(
    x: &Tensor,
    spacing: &[Scalar],
    dims: &[i64],
    edge_order: i64,
) -> crate::Result<Vec<Tensor>> {
    let mut out = Vec::with_capacity(dims.len());
    for (&dim, &h) in dims.iter().zip(spacing) {
        let d = wdim(dim, x.dim())?;
        let h = Operand::Scalar(h);
        let center = divided(
            minus(part(x, d, 2, None)?, part(x, d, 0, Some(-2))?)?,
            h.clone(),
        )?;
        let (prepend, append) = if edge_order == 1 {
            (
                divided(
                    minus(part(x, d, 1, Some(2))?, part(x, d, 0, Some(1))?)?,
                    h.clone(),
                )?,
                divided(minus(part(x, d, -1, None)?, part(x, d, -2, Some(-1))?)?, h)?,
            )
        } else {
            let first = plus(
                times(part(x, d, 0, Some(1))?, scalar(-1.5))?,
                times(part(x, d, 1, Some(2))?, Operand::Scalar(Scalar::Int(2)))?,
            )?;
            let first = minus(first, times(part(x, d, 2, Some(3))?, scalar(0.5))?)?;
            let last = plus(
                times(part(x, d, -3, Some(-2))?, scalar(0.5))?,
                times(part(x, d, -2, Some(-1))?, Operand::Scalar(Scalar::Int(-2)))?,
            )?;
            let last = plus(last, times(part(x, d, -1, None)?, scalar(1.5))?)?;
            (divided(first, h.clone())?, divided(last, h)?)
        };
        let center = divided(center, Operand::Scalar(Scalar::Int(2)))?;
        out.push(cat(&[prepend, center, append], d as i64)?);
    }
    Ok(out)
}

/// ATen's `gradient_helper`: sample coordinates (one 1-D tensor per dim), non-uniform spacing.
fn gradient_coordinates(
    x: &Tensor,
    coordinates: &[Tensor],
    dims: &[i64],
    edge_order: i64,
) -> crate::Result<Vec<Tensor>> {
    let mut out = Vec::with_capacity(dims.len());
    for (&dim, coords) in dims.iter().zip(coordinates) {
        check_rank(
            "torch.gradient",
            "each element of spacing",
            RankRequirement::Exactly(1),
            coords.shape(),
        )?;
        let d = wdim(dim, x.dim())?;
        let mut shape = vec![1i64; x.dim()];
        shape[d] = -1;
        let steps = minus(part(coords, 0, 1, None)?, part(coords, 0, 0, Some(-1))?)?;
        let dx1 = part(&steps, 0, 0, Some(-1))?;
        let dx2 = part(&steps, 0, 1, None)?;
        let t = tensor_operand;
        let sum12 = plus(dx1.clone(), dx2.clone())?;
        let a = divided(neg_tensor(&dx2)?, t(times(dx1.clone(), t(sum12.clone()))?))?;
        let b = divided(
            minus(dx2.clone(), dx1.clone())?,
            t(times(dx1.clone(), t(dx2.clone()))?),
        )?;
        let c = divided(dx1, t(times(dx2, t(sum12))?))?;
        let (a, b, c) = (
            reshape(&a, &shape)?,
            reshape(&b, &shape)?,
            reshape(&c, &shape)?,
        );
        let center = plus(
            plus(
                times(a, t(part(x, d, 0, Some(-2))?))?,
                times(b, t(part(x, d, 1, Some(-1))?))?,
            )?,
            times(c, t(part(x, d, 2, None)?))?,
        )?;
        let h = |i: i64| select(&steps, 0, i);
        let (prepend, append) = if edge_order == 1 {
            (
                divided(
                    minus(part(x, d, 1, Some(2))?, part(x, d, 0, Some(1))?)?,
                    t(h(0)?),
                )?,
                divided(
                    minus(part(x, d, -1, None)?, part(x, d, -2, Some(-1))?)?,
                    t(h(-1)?),
                )?,
            )
        } else {
            let (h0, h1) = (h(0)?, h(1)?);
            let h01 = plus(h0.clone(), h1.clone())?;
            let a = divided(
                neg_tensor(&plus(times(h0.clone(), scalar(2.0))?, h1.clone())?)?,
                t(times(h0.clone(), t(h01.clone()))?),
            )?;
            let b = divided(h01.clone(), t(times(h0.clone(), t(h1.clone()))?))?;
            let c = divided(neg_tensor(&h0)?, t(times(h1, t(h01))?))?;
            let prepend = plus(
                plus(
                    times(a, t(part(x, d, 0, Some(1))?))?,
                    times(b, t(part(x, d, 1, Some(2))?))?,
                )?,
                times(c, t(part(x, d, 2, Some(3))?))?,
            )?;
            let (hl, hm) = (h(-1)?, h(-2)?);
            let hlm = plus(hl.clone(), hm.clone())?;
            let a = divided(hl.clone(), t(times(hm.clone(), t(hlm.clone()))?))?;
            let b = divided(neg_tensor(&hlm)?, t(times(hl.clone(), t(hm.clone()))?))?;
            let c = divided(
                plus(times(hl.clone(), Operand::Scalar(Scalar::Int(2)))?, hm)?,
                t(times(hl, t(hlm))?),
            )?;
            let append = plus(
                plus(
                    times(a, t(part(x, d, -3, Some(-2))?))?,
                    times(b, t(part(x, d, -2, Some(-1))?))?,
                )?,
                times(c, t(part(x, d, -1, None)?))?,
            )?;
            (prepend, append)
        };
        out.push(cat(&[prepend, center, append], d as i64)?);
    }
    Ok(out)
}

/// Every dim of `x` (no `dim` given) or just `dim`: ATen's `gradient_dim_preprocess`.
fn dims_or_all(x: &Tensor, dim: Option<i64>) -> Vec<i64> {
    match dim {
        Some(d) => vec![d],
        None => (0..x.dim() as i64).collect(),
    }
}

fn scalar_list(args: &Args<'_>, i: usize) -> crate::Result<Vec<Scalar>> {
    args.list(i)?
        .items()
        .iter()
        .map(|v| {
            v.as_scalar().ok_or_else(|| {
                invalid_argument(args.op, "spacing", "must hold numbers", v.kind_name())
            })
        })
        .collect()
}

/// `gradient.scalarint(self, *, Scalar? spacing, int? dim, int edge_order)`.
fn gradient_scalar_int(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let unit = args.opt_scalar(1)?;
    let dim = args.opt_int(2)?;
    let edge_order = args.int(3)?;
    let dims = dims_or_all(&x, dim);
    let spacing = vec![unit.unwrap_or(Scalar::Float(1.0)); dims.len()];
    check_gradient(
        &x,
        unit.map(|_| spacing.len()),
        dim.map(|_| dims.as_slice()),
        edge_order,
    )?;
    Ok(tensor_list(gradient_uniform(
        &x, &spacing, &dims, edge_order,
    )?))
}

/// `gradient.scalararray(self, *, Scalar spacing, int[] dim, int edge_order)`.
fn gradient_scalar_array(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let dims = args.int_list(2)?;
    let spacing = vec![args.scalar(1)?; dims.len()];
    let edge_order = args.int(3)?;
    check_gradient(&x, Some(spacing.len()), Some(&dims), edge_order)?;
    Ok(tensor_list(gradient_uniform(
        &x, &spacing, &dims, edge_order,
    )?))
}

/// `gradient.array(self, *, int[] dim, int edge_order)`: unit spacing.
fn gradient_array(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let dims = args.int_list(1)?;
    let spacing = vec![Scalar::Float(1.0); dims.len()];
    let edge_order = args.int(2)?;
    check_gradient(&x, Some(spacing.len()), Some(&dims), edge_order)?;
    Ok(tensor_list(gradient_uniform(
        &x, &spacing, &dims, edge_order,
    )?))
}

/// `gradient.scalarrayint(self, *, Scalar[] spacing, int? dim, int edge_order)`.
fn gradient_scalars_int(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let spacing = scalar_list(args, 1)?;
    let dim = args.opt_int(2)?;
    let edge_order = args.int(3)?;
    let dims = dims_or_all(&x, dim);
    check_gradient(
        &x,
        Some(spacing.len()),
        dim.map(|_| dims.as_slice()),
        edge_order,
    )?;
    Ok(tensor_list(gradient_uniform(
        &x, &spacing, &dims, edge_order,
    )?))
}

/// `gradient.scalarrayarray(self, *, Scalar[] spacing, int[] dim, int edge_order)`.
fn gradient_scalars_array(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let spacing = scalar_list(args, 1)?;
    let dims = args.int_list(2)?;
    let edge_order = args.int(3)?;
    check_gradient(&x, Some(spacing.len()), Some(&dims), edge_order)?;
    Ok(tensor_list(gradient_uniform(
        &x, &spacing, &dims, edge_order,
    )?))
}

/// `gradient.tensorarrayint(self, *, Tensor[] spacing, int? dim, int edge_order)`.
fn gradient_coordinates_int(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let coordinates = args.tensor_list(1)?;
    let dim = args.opt_int(2)?;
    let edge_order = args.int(3)?;
    let dims = dims_or_all(&x, dim);
    check_gradient(
        &x,
        Some(coordinates.len()),
        dim.map(|_| dims.as_slice()),
        edge_order,
    )?;
    Ok(tensor_list(gradient_coordinates(
        &x,
        &coordinates,
        &dims,
        edge_order,
    )?))
}

/// `gradient.tensorarray(self, *, Tensor[] spacing, int[] dim, int edge_order)`.
fn gradient_coordinates_array(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let coordinates = args.tensor_list(1)?;
    let dims = args.int_list(2)?;
    let edge_order = args.int(3)?;
    check_gradient(&x, Some(coordinates.len()), Some(&dims), edge_order)?;
    Ok(tensor_list(gradient_coordinates(
        &x,
        &coordinates,
        &dims,
        edge_order,
    )?))
}

pub fn register(r: &mut Registry) {
    r.add("aten::gradient.scalarint", gradient_scalar_int);
    r.add("aten::gradient.scalararray", gradient_scalar_array);
    r.add("aten::gradient.array", gradient_array);
    r.add("aten::gradient.scalarrayint", gradient_scalars_int);
    r.add("aten::gradient.scalarrayarray", gradient_scalars_array);
    r.add("aten::gradient.tensorarrayint", gradient_coordinates_int);
    r.add("aten::gradient.tensorarray", gradient_coordinates_array);
    r.add_all(&["aten::trapezoid.x", "aten::trapz.x"], trapezoid_x);
    r.add("aten::trapezoid.dx", trapezoid_dx);
    r.add("aten::trapz.dx", trapz_dx);
    r.add("aten::cumulative_trapezoid.x", cumulative_trapezoid_x);
    r.add("aten::cumulative_trapezoid.dx", cumulative_trapezoid_dx);
}
