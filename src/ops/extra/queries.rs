//! Small tensor queries and helpers registered with the extra families.

use super::*;

pub(super) fn element_size(args: &mut Args<'_>) -> R {
    Ok(IValue::Int(args.tensor(0)?.dtype().size() as i64))
}
pub(super) fn get_device(args: &mut Args<'_>) -> R {
    args.tensor(0)?;
    Ok(IValue::Int(-1))
}
pub(super) fn is_nonzero(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    match x.numel() {
        0 => Err(value_err(
            "Boolean value of Tensor with no values is ambiguous",
        )),
        1 => Ok(IValue::Bool(
            x.item()?.to_c64() != num_complex::Complex64::new(0.0, 0.0),
        )),
        _ => Err(value_err(
            "Boolean value of Tensor with more than one value is ambiguous",
        )),
    }
}
pub(super) fn is_same_size(args: &mut Args<'_>) -> R {
    Ok(IValue::Bool(
        args.tensor(0)?.shape() == args.tensor(1)?.shape(),
    ))
}
pub(super) fn equal(args: &mut Args<'_>) -> R {
    let (a, b) = (args.tensor(0)?, args.tensor(1)?);
    if a.shape() != b.shape() {
        return Ok(IValue::Bool(false));
    }
    let dt = common_dtype(&[&Operand::Tensor(a.clone()), &Operand::Tensor(b.clone())]);
    if dt.is_complex() {
        let (x, y) = (
            a.to_vec::<num_complex::Complex64>()?,
            b.to_vec::<num_complex::Complex64>()?,
        );
        return Ok(IValue::Bool(x == y));
    }
    Ok(IValue::Bool(vals(&a)? == vals(&b)?))
}

pub(super) fn isclose_tensor(args: &Args<'_>) -> crate::Result<Tensor> {
    let (a, b) = (args.tensor(0)?, args.tensor(1)?);
    let rtol = args.double(2)?;
    let atol = args.double(3)?;
    let equal_nan = args.bool(4)?;
    if a.dtype() != b.dtype() {
        return Err(value_err(format!(
            "{} should be same dtype as {}",
            a.dtype(),
            b.dtype()
        )));
    }
    if rtol < 0.0 || atol < 0.0 {
        return Err(value_err("rtol and atol must be non-negative"));
    }
    if a.dtype().is_complex() {
        return Err(value_err("isclose is not implemented for complex tensors"));
    }
    let (x, y) = (a.to_dtype(DType::Float64)?, b.to_dtype(DType::Float64)?);
    map_binary::<f64, f64, bool, _>(&x, &y, move |p, q| {
        if p == q {
            return true;
        }
        if p.is_nan() || q.is_nan() {
            return equal_nan && p.is_nan() && q.is_nan();
        }
        if !p.is_finite() || !q.is_finite() {
            return false;
        }
        (p - q).abs() <= atol + rtol * q.abs()
    })
}
pub(super) fn isclose(args: &mut Args<'_>) -> R {
    t(isclose_tensor(args)?)
}
pub(super) fn allclose(args: &mut Args<'_>) -> R {
    let c = isclose_tensor(args)?;
    Ok(IValue::Bool(c.to_vec::<bool>()?.iter().all(|&v| v)))
}

/// `trace(self)`: the sum of a matrix's diagonal (integral inputs sum to int64).
pub(super) fn trace(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    if x.dim() != 2 {
        return Err(value_err(format!(
            "trace: expected a matrix, but got tensor with dim {}",
            x.dim()
        )));
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
pub(super) fn cross(args: &mut Args<'_>) -> R {
    let (a, b) = (args.tensor(0)?, args.tensor(1)?);
    let shape = broadcast_shapes(a.shape(), b.shape())?;
    let dim = match args.opt_int(2)? {
        Some(d) => crate::ops::shape::wdim(d, shape.len())?,
        None => shape.iter().position(|&s| s == 3).ok_or_else(|| {
            value_err(format!(
                "no dimension of size 3 in input of shape {shape:?}"
            ))
        })?,
    };
    if shape.get(dim) != Some(&3) || a.dim() != b.dim() {
        return Err(value_err(format!(
            "linalg.cross: inputs must have the same number of dimensions and size 3 at dim {dim}, got {:?} and {:?}",
            a.shape(),
            b.shape()
        )));
    }
    let dt = common_dtype(&[&Operand::Tensor(a.clone()), &Operand::Tensor(b.clone())]);
    if dt.is_complex() || dt == DType::Bool {
        return Err(value_err(format!("cross is not implemented for {dt}")));
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
