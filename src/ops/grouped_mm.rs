//! `aten::_grouped_mm`: one matrix product per group (mixture-of-experts layers), as ATen's CPU
//! fallback (`_grouped_mm_fallback` in GroupedMMUtils.h) computes it: 2-d x 3-d with `offs`
//! ending each group's rows of `self`, 3-d x 2-d with `offs` ending each group's columns of
//! `mat2`, 2-d x 2-d with `offs` ending each group's slice of the contraction dim, and 3-d x
//! 3-d as a batched product.

use super::kernels::value_err;
use super::prims::via_aten;
use super::{Args, Registry};
use crate::ops::kernels::{check_rank, check_size, invalid_argument, size_mismatch, wrong_dtype};
use crate::tensor::RankRequirement;
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
        return Err(invalid_argument(
            "_grouped_mm",
            format!("the strides of an operand of sizes {n:?}"),
            "must be row- or column-major in the last two dimensions",
            format!("{s:?}"),
        ));
    };
    if other % align != 0 {
        return Err(invalid_argument(
            "_grouped_mm",
            "the leading stride",
            format!("must be a multiple of 16 bytes ({align} elements)"),
            other,
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
            return Err(wrong_dtype(
                a.op,
                name,
                "float32, bfloat16 or float16",
                t.dtype(),
            ));
        }
        check_rank(a.op, name, RankRequirement::OneOf(vec![2, 3]), t.shape())?;
    }
    let (a2, b2) = (x.dim() == 2, y.dim() == 2);
    let (xs, ys) = (x.shape(), y.shape());
    if (!a2 || !b2) && xs[xs.len() - 1] != ys[ys.len() - 2] {
        return Err(size_mismatch(
            a.op,
            "mat_b.size(-2) (the contraction dimension, mat_a.size(-1))",
            xs[xs.len() - 1] as i64,
            ys[ys.len() - 2] as i64,
        ));
    }
    check_strides(&x)?;
    check_strides(&y)?;
    if offs.is_some() != (a2 || b2) {
        return Err(invalid_argument(
            a.op,
            "offs",
            "must be given if there is a 2-D matrix, and only then",
            if offs.is_some() { "a tensor" } else { "None" },
        ));
    }
    if !a.is_none(3) {
        return Err(invalid_argument(
            a.op,
            "bias",
            "must be None (PyTorch does not support it yet)",
            "a tensor",
        ));
    }
    if let Some(d) = a.opt_dtype(4)? {
        if d != x.dtype() {
            return Err(wrong_dtype(
                a.op,
                "out_dtype",
                format!("{} (mat_a's dtype)", x.dtype()),
                d,
            ));
        }
    }
    let Some(offs) = offs else {
        let values = vec![IValue::Tensor(x), IValue::Tensor(y)];
        return via_aten(a, "aten::bmm", values);
    };
    check_rank(a.op, "offs", RankRequirement::Exactly(1), offs.shape())?;
    if offs.dtype() != DType::Int32 {
        return Err(wrong_dtype(a.op, "offs", "int32", offs.dtype()));
    }
    let ends = offs.contiguous()?.to_vec::<i64>()?;
    let groups = ends.len();
    // the output; parts no group writes stay zero (ATen leaves them uninitialized)
    let out_shape: Vec<usize> = match (a2, b2) {
        (true, true) => vec![groups, xs[0], ys[1]],
        (true, false) => {
            check_size(
                a.op,
                "mat_b.size(0) (the number of offsets)",
                groups as i64,
                ys[0] as i64,
            )?;
            vec![xs[0], ys[2]]
        }
        _ => {
            check_size(
                a.op,
                "mat_a.size(0) (the number of offsets)",
                groups as i64,
                xs[0] as i64,
            )?;
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
