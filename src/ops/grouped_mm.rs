//! `aten::_grouped_mm`: one matrix product per group (mixture-of-experts layers), as ATen's CPU
//! fallback (`_grouped_mm_fallback` in GroupedMMUtils.h) computes it: 2-d x 3-d with `offs`
//! ending each group's rows of `self`, 3-d x 2-d with `offs` ending each group's columns of
//! `mat2`, 2-d x 2-d with `offs` ending each group's slice of the contraction dim, and 3-d x
//! 3-d as a batched product.

use super::kernels::{shape_err, value_err};
use super::prims::via_aten;
use super::{Args, Registry};
use crate::tensor::{DType, Tensor};
use crate::values::IValue;

type R = crate::Result<IValue>;

/// ATen's stride check: one of the last two dims unit-stride, the other's stride a multiple of
/// 16 bytes and at least the unit dim's size.
fn check_strides(t: &Tensor) -> crate::Result<()> {
    let (s, n) = (t.strides(), t.shape());
    let d = t.dim();
    let align = (16 / t.dtype().size().max(1)) as isize;
    // the stride of the dim that is not unit-stride
    let other = if s[d - 2] == 1 && s[d - 1] >= (n[d - 2] as isize).max(1) {
        s[d - 1]
    } else if s[d - 1] == 1 && s[d - 2] >= (n[d - 1] as isize).max(1) {
        s[d - 2]
    } else {
        return Err(value_err(format!(
            "_grouped_mm: Invalid strides/sizes, got {s:?} for strides and {n:?} for sizes"
        )));
    };
    if other % align != 0 {
        return Err(value_err(
            "_grouped_mm: strides should be multiple of 16 bytes",
        ));
    }
    Ok(())
}

fn tensor_result(r: IValue) -> crate::Result<Tensor> {
    match r {
        IValue::Tensor(t) => Ok(t),
        other => Err(value_err(format!(
            "_grouped_mm: expected a tensor, got {}",
            other.kind_name()
        ))),
    }
}

/// `t.slice(dim, start, end)` through the aten kernel.
fn slice(a: &Args<'_>, t: &Tensor, dim: i64, start: i64, end: i64) -> crate::Result<Tensor> {
    let values = vec![
        IValue::Tensor(t.clone()),
        IValue::Int(dim),
        IValue::Int(start),
        IValue::Int(end),
        IValue::Int(1),
    ];
    tensor_result(via_aten(a, "aten::slice.Tensor", values)?)
}

/// `t[i]` through the aten kernel.
fn select(a: &Args<'_>, t: &Tensor, i: i64) -> crate::Result<Tensor> {
    let values = vec![IValue::Tensor(t.clone()), IValue::Int(0), IValue::Int(i)];
    tensor_result(via_aten(a, "aten::select.int", values)?)
}

fn mm(a: &Args<'_>, x: &Tensor, y: &Tensor) -> crate::Result<Tensor> {
    let values = vec![IValue::Tensor(x.clone()), IValue::Tensor(y.clone())];
    tensor_result(via_aten(a, "aten::mm", values)?)
}

/// `_grouped_mm(self, mat2, offs, bias, out_dtype)`.
fn grouped_mm(a: &mut Args<'_>) -> R {
    let (x, y) = (a.tensor(0)?, a.tensor(1)?);
    let offs = a.opt_tensor(2)?;
    for (name, t) in [("mat_a", &x), ("mat_b", &y)] {
        if !matches!(t.dtype(), DType::Float32 | DType::BFloat16 | DType::Float16) {
            return Err(value_err(format!(
                "Expected {name} to be Float32, BFloat16 or Float16 matrix, got {}",
                t.dtype().name()
            )));
        }
        if t.dim() != 2 && t.dim() != 3 {
            return Err(shape_err(format!("{name} has to be 2 or 3d")));
        }
    }
    let (a2, b2) = (x.dim() == 2, y.dim() == 2);
    let (xs, ys) = (x.shape(), y.shape());
    if (!a2 || !b2) && xs[xs.len() - 1] != ys[ys.len() - 2] {
        return Err(shape_err(
            "contraction dimension of mat_a and mat_b must match",
        ));
    }
    check_strides(&x)?;
    check_strides(&y)?;
    if offs.is_some() != (a2 || b2) {
        return Err(value_err(
            "Have to provide offsets if there is a 2d matrix, or no offset if both matrices are 3d",
        ));
    }
    if !a.is_none(3) {
        return Err(value_err("Bias not supported yet"));
    }
    if let Some(d) = a.opt_dtype(4)? {
        if d != x.dtype() {
            return Err(value_err(
                "Grouped gemm output dtype must match `mat_a` dtype",
            ));
        }
    }
    let Some(offs) = offs else {
        let values = vec![IValue::Tensor(x), IValue::Tensor(y)];
        return via_aten(a, "aten::bmm", values);
    };
    if offs.dim() != 1 || offs.dtype() != DType::Int32 {
        return Err(value_err("offs has to be a 1D int32 tensor"));
    }
    let ends = offs.contiguous()?.to_vec::<i64>()?;
    let groups = ends.len();
    // the output; parts no group writes stay zero (ATen leaves them uninitialized)
    let out_shape: Vec<usize> = match (a2, b2) {
        (true, true) => vec![groups, xs[0], ys[1]],
        (true, false) => {
            if groups != ys[0] {
                return Err(shape_err("matrix batch sizes have to match"));
            }
            vec![xs[0], ys[2]]
        }
        _ => {
            if groups != xs[0] {
                return Err(shape_err("matrix batch sizes have to match"));
            }
            vec![xs[1], ys[1]]
        }
    };
    let out = Tensor::zeros(&out_shape, x.dtype())?;
    let mut start = 0i64;
    for (g, &end) in ends.iter().enumerate() {
        let g = g as i64;
        let (part, dst) = match (a2, b2) {
            (true, false) => (
                mm(a, &slice(a, &x, 0, start, end)?, &select(a, &y, g)?)?,
                slice(a, &out, 0, start, end)?,
            ),
            (false, true) => (
                mm(a, &select(a, &x, g)?, &slice(a, &y, 1, start, end)?)?,
                slice(a, &out, 1, start, end)?,
            ),
            _ => (
                mm(
                    a,
                    &slice(a, &x, 1, start, end)?,
                    &slice(a, &y, 0, start, end)?,
                )?,
                select(a, &out, g)?,
            ),
        };
        dst.copy_from(&part)?;
        start = end;
    }
    Ok(IValue::Tensor(out))
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::_grouped_mm", grouped_mm);
}
