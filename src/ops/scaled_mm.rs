//! `aten::_scaled_mm` and `aten::_scaled_mm_v2`: float8 matrix products with scales, as ATen's
//! CPU kernel (`_scaled_mm_out_cpu_emulated`, Blas.cpp) computes them: both matrices converted to
//! float and multiplied by their scales (one number each, or one a row of `self` and one a column
//! of `mat2`), a float product, plus `bias`, divided by `scale_result` for an explicitly float8
//! (`e4m3fn`/`e5m2`) `out_dtype`, converted to the output dtype. `use_fast_accum` does not change
//! the CPU result. (`_scaled_addmm` and `_scaled_grouped_mm*` have no CPU kernel in PyTorch.)

use super::kernels::{check_size, invalid_argument, shape_mismatch, size_mismatch, wrong_dtype};
use super::prims::via_aten;
use super::{Args, Registry};
use crate::tensor::{DType, Tensor};
use crate::values::IValue;

type R = crate::Result<IValue>;

fn is_float8(d: DType) -> bool {
    matches!(
        d,
        DType::Float8E5M2 | DType::Float8E4M3FN | DType::Float8E5M2FNUZ | DType::Float8E4M3FNUZ
    )
}

/// How the scales apply (ATen's `ScaledGemmImplementation` of the CPU kernel).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scaling {
    /// One float scale for each matrix.
    TensorWise,
    /// A float scale per row of `self` (`[M, 1]`) and per column of `mat2` (`[1, N]`).
    RowWise,
}

/// The `at::blas::ScalingType` numbers `_scaled_mm_v2` recipes use.
const RECIPE_TENSORWISE: i64 = 0;
const RECIPE_ROWWISE: i64 = 1;

fn invalid_scaling(a: &Tensor, b: &Tensor, scale_a: &Tensor, scale_b: &Tensor) -> crate::Error {
    invalid_argument(
        "_scaled_mm",
        "scales",
        format!(
            "form a valid scaling configuration (TensorWise: float8 matrices, one float scale each; \
             RowWise: float8 matrices, float scales of shape [{}, 1] and [1, {}], contiguous)",
            a.shape().first().copied().unwrap_or(0),
            b.shape().get(1).copied().unwrap_or(0)
        ),
        format!(
            "self {}, scale_a {} {:?}, mat2 {}, scale_b {} {:?}",
            a.dtype(),
            scale_a.dtype(),
            scale_a.shape(),
            b.dtype(),
            scale_b.dtype(),
            scale_b.shape()
        ),
    )
}

/// `_scaled_mm`'s choice (`get_joint_scaling`): tensor-wise when both scales are single floats,
/// row-wise when `scale_a` is a contiguous `[M, 1]` and `scale_b` a `[1, N]` whose transpose is
/// contiguous; anything else is refused.
fn joint_scaling(
    a: &Tensor,
    b: &Tensor,
    scale_a: &Tensor,
    scale_b: &Tensor,
) -> crate::Result<Scaling> {
    if scale_b.dim() > 2 {
        // ATen transposes scale_b first
        return Err(invalid_argument(
            "_scaled_mm",
            "scale_b",
            "have at most 2 dimensions (t() expects a tensor with <= 2 dimensions)",
            format!("{:?}", scale_b.shape()),
        ));
    }
    let float8 = is_float8(a.dtype()) && is_float8(b.dtype());
    let floats = scale_a.dtype() == DType::Float32 && scale_b.dtype() == DType::Float32;
    if float8 && floats && scale_a.numel() == 1 && scale_b.numel() == 1 {
        return Ok(Scaling::TensorWise);
    }
    let (sa, sb) = (scale_a.shape(), scale_b.shape());
    let rows_of_a = a.dim() == 2 && sa.len() == 2 && sa[0] == a.shape()[0] && sa[1] == 1;
    let columns_of_b = b.dim() == 2 && sb.len() == 2 && sb[0] == 1 && sb[1] == b.shape()[1];
    // scale_a and scale_b.t() contiguous: only the long dim's stride counts
    let a_contiguous = sa
        .first()
        .is_none_or(|&m| m <= 1 || scale_a.strides()[0] == 1);
    let b_contiguous = sb
        .get(1)
        .is_none_or(|&n| n <= 1 || scale_b.strides()[1] == 1);
    if float8 && floats && rows_of_a && columns_of_b && a_contiguous && b_contiguous {
        return Ok(Scaling::RowWise);
    }
    Err(invalid_scaling(a, b, scale_a, scale_b))
}

fn tensor_of(r: IValue, op: &str) -> crate::Result<Tensor> {
    match r {
        IValue::Tensor(t) => Ok(t),
        other => Err(crate::ops::kernels::value_err(format!(
            "{op}: expected a tensor, got {}",
            other.kind_name()
        ))),
    }
}

/// `mat.to(float) * scale`: by the scale's single value (tensor-wise) or broadcast (row-wise).
fn scaled(
    args: &Args<'_>,
    mat: &Tensor,
    scale: &Tensor,
    scaling: Scaling,
) -> crate::Result<Tensor> {
    let wide = IValue::Tensor(mat.to_dtype(DType::Float32)?);
    let r = match scaling {
        Scaling::TensorWise => {
            let s = scale.contiguous()?.to_vec::<f32>()?;
            let s = s.first().copied().unwrap_or(1.0);
            via_aten(
                args,
                "aten::mul.Scalar",
                vec![wide, IValue::Double(f64::from(s))],
            )?
        }
        Scaling::RowWise => via_aten(
            args,
            "aten::mul.Tensor",
            vec![wide, IValue::Tensor(scale.clone())],
        )?,
    };
    tensor_of(r, "_scaled_mm")
}

/// The arguments of one product after the overload's own checks.
struct ScaledProduct<'t> {
    a: &'t Tensor,
    b: &'t Tensor,
    scale_a: &'t Tensor,
    scale_b: &'t Tensor,
    scaling: Scaling,
    bias: Option<Tensor>,
    /// `1 / scale_result` applies (an explicit `e4m3fn`/`e5m2` `out_dtype` and a scale given).
    result_scale: Option<Tensor>,
    out_dtype: DType,
}

/// Both operands must be matrices.
fn check_matrices(op: &str, a: &Tensor, b: &Tensor) -> crate::Result<()> {
    for (m, name) in [(a, "self"), (b, "mat2")] {
        if m.dim() != 2 {
            return Err(invalid_argument(
                op,
                name,
                "be a matrix",
                format!("{:?}", m.shape()),
            ));
        }
    }
    Ok(())
}

/// ATen's `_scaled_mm_out_cpu_emulated`.
fn emulated(args: &Args<'_>, p: ScaledProduct<'_>) -> crate::Result<Tensor> {
    let (a, b) = (p.a, p.b);
    check_matrices("_scaled_mm", a, b)?;
    let (m, k, n) = (a.shape()[0], a.shape()[1], b.shape()[1]);
    if b.shape()[0] != k {
        return Err(shape_mismatch(
            "_scaled_mm",
            "mat2 (shapes cannot be multiplied)",
            &[k, n],
            b.shape(),
        ));
    }
    if let Some(d) = [a.dtype(), b.dtype()].into_iter().find(|&d| !is_float8(d)) {
        return Err(wrong_dtype("_scaled_mm", "self and mat2", "float8", d));
    }
    for (s, name) in [(p.scale_a, "scale_a"), (p.scale_b, "scale_b")] {
        if s.dtype() != DType::Float32 {
            return Err(wrong_dtype("_scaled_mm", name, "float32", s.dtype()));
        }
    }
    match p.scaling {
        Scaling::TensorWise => {
            for (s, name) in [(p.scale_a, "scale_a"), (p.scale_b, "scale_b")] {
                if s.numel() != 1 {
                    return Err(size_mismatch(
                        "_scaled_mm",
                        format!("{name} elements"),
                        1,
                        s.numel() as i64,
                    ));
                }
            }
        }
        Scaling::RowWise => {
            let (sa, sb) = (p.scale_a, p.scale_b);
            if sa.dim() != 2 || sa.shape()[0] != m || sa.shape()[1] != 1 {
                return Err(shape_mismatch("_scaled_mm", "scale_a", &[m, 1], sa.shape()));
            }
            check_size(
                "_scaled_mm",
                "scale_b elements",
                n as i64,
                sb.numel() as i64,
            )?;
            for (s, name) in [(sa, "scale_a"), (sb, "scale_b")] {
                if s.dim() < 2 || s.strides()[1] != 1 {
                    return Err(invalid_argument(
                        "_scaled_mm",
                        format!("{name}.stride(1)"),
                        "be 1",
                        format!("{:?}", s.strides()),
                    ));
                }
            }
        }
    }
    if let Some(s) = &p.result_scale {
        if s.numel() != 1 || s.dtype() != DType::Float32 {
            return Err(invalid_argument(
                "_scaled_mm",
                "scale_result",
                "be a float scalar",
                format!("{} {:?}", s.dtype(), s.shape()),
            ));
        }
    }
    if let Some(bias) = &p.bias {
        check_size("_scaled_mm", "bias elements", n as i64, bias.numel() as i64)?;
    }
    let wide_a = scaled(args, a, p.scale_a, p.scaling)?;
    let wide_b = scaled(args, b, p.scale_b, p.scaling)?;
    let mut out = super::linalg::matmul("_scaled_mm", &wide_a, &wide_b)?;
    if let Some(bias) = p.bias {
        // `out.add_(bias)`: computed in the promoted type, stored as float
        let sum = via_aten(
            args,
            "aten::add.Tensor",
            vec![IValue::Tensor(out), IValue::Tensor(bias), IValue::Int(1)],
        )?;
        out = tensor_of(sum, "_scaled_mm")?.to_dtype(DType::Float32)?;
    }
    if let Some(s) = p.result_scale {
        let s = s
            .contiguous()?
            .to_vec::<f32>()?
            .first()
            .copied()
            .unwrap_or(1.0);
        // `at::mul(out, 1 / output_scale)`: the reciprocal in float
        let r = via_aten(
            args,
            "aten::mul.Scalar",
            vec![IValue::Tensor(out), IValue::Double(f64::from(1.0 / s))],
        )?;
        out = tensor_of(r, "_scaled_mm")?;
    }
    out.to_dtype(p.out_dtype)
}

/// `_scaled_mm(self, mat2, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum)`;
/// `out_index` names the out= tensor of the `.out` overload, whose dtype is the result's.
fn scaled_mm(args: &mut Args<'_>, out_index: Option<usize>) -> crate::Result<Tensor> {
    let (a, b) = (args.tensor(0)?, args.tensor(1)?);
    let (scale_a, scale_b) = (args.tensor(2)?, args.tensor(3)?);
    let bias = args.opt_tensor(4)?;
    let scale_result = args.opt_tensor(5)?;
    let out_dtype = args.opt_dtype(6)?;
    args.bool(7)?;
    let result_dtype = match out_index {
        Some(i) => {
            let out = args.tensor(i)?;
            if out_dtype.is_some_and(|d| d != out.dtype()) {
                return Err(wrong_dtype("_scaled_mm", "out", "out_dtype", out.dtype()));
            }
            out.dtype()
        }
        None => out_dtype.unwrap_or(a.dtype()),
    };
    let scaling = joint_scaling(&a, &b, &scale_a, &scale_b)?;
    let float8_out = matches!(out_dtype, Some(DType::Float8E4M3FN | DType::Float8E5M2));
    emulated(
        args,
        ScaledProduct {
            a: &a,
            b: &b,
            scale_a: &scale_a,
            scale_b: &scale_b,
            scaling,
            bias,
            result_scale: scale_result.filter(|_| float8_out),
            out_dtype: result_dtype,
        },
    )
}

/// The one scale and recipe of a `_scaled_mm_v2` side, with ATen's recipe acceptance.
fn v2_side(scales: &[Tensor], recipe: &[i64]) -> Option<(Tensor, i64)> {
    match (scales, recipe) {
        ([s], [r]) if s.dtype() == DType::Float32 => Some((s.clone(), *r)),
        _ => None,
    }
}

/// `_scaled_mm_v2(self, mat2, scale_a, recipe_a, swizzle_a, scale_b, recipe_b, swizzle_b, bias,
/// out_dtype, contraction_dim, use_fast_accum)` (ATen's `_scaled_mm_cpu_v2_out`).
fn scaled_mm_v2(args: &mut Args<'_>, out_index: Option<usize>) -> crate::Result<Tensor> {
    let (a, b) = (args.tensor(0)?, args.tensor(1)?);
    let (scales_a, recipe_a, swizzle_a) =
        (args.tensor_list(2)?, args.int_list(3)?, args.int_list(4)?);
    let (scales_b, recipe_b, swizzle_b) =
        (args.tensor_list(5)?, args.int_list(6)?, args.int_list(7)?);
    let bias = args.opt_tensor(8)?;
    let out_dtype = args.opt_dtype(9)?;
    let contraction = args.int_list(10)?;
    args.bool(11)?;
    let result_dtype = match out_index {
        Some(i) => args.tensor(i)?.dtype(),
        None => out_dtype.unwrap_or(a.dtype()),
    };
    check_matrices("_scaled_mm_v2", &a, &b)?;
    let (m, k, n) = (a.shape()[0], a.shape()[1], b.shape()[1]);
    if m == 0 || k == 0 || n == 0 {
        // ATen returns before looking at the scales: zeros when K is 0, else empty
        return Ok(Tensor::zeros(&[m, n], result_dtype)?);
    }
    if !contraction.is_empty() {
        let [da, db] = contraction[..] else {
            return Err(size_mismatch(
                "_scaled_mm_v2",
                "contraction_dim elements",
                2,
                contraction.len() as i64,
            ));
        };
        let (ka, kb) = (a.size(da)?, b.size(db)?);
        if ka != kb {
            return Err(shape_mismatch(
                "_scaled_mm_v2",
                "mat2 (contraction dims)",
                &[ka],
                &[kb],
            ));
        }
    } else if b.shape()[0] != k {
        return Err(shape_mismatch(
            "_scaled_mm_v2",
            "mat2 (shapes cannot be multiplied)",
            &[k, n],
            b.shape(),
        ));
    }
    if let Some(bias) = &bias {
        check_size(
            "_scaled_mm_v2",
            "bias elements",
            n as i64,
            bias.numel() as i64,
        )?;
        if !matches!(
            bias.dtype(),
            DType::Float32 | DType::BFloat16 | DType::Float16
        ) {
            return Err(wrong_dtype(
                "_scaled_mm_v2",
                "bias",
                "float32, bfloat16 or float16",
                bias.dtype(),
            ));
        }
    }
    if let Some(i) = out_index {
        let out = args.tensor(i)?;
        if out_dtype.is_some_and(|d| d != out.dtype()) {
            return Err(wrong_dtype(
                "_scaled_mm_v2",
                "out",
                "out_dtype",
                out.dtype(),
            ));
        }
    }
    // ATen reads the first swizzle of each side (CPU has no swizzled layouts)
    match (swizzle_a.first(), swizzle_b.first()) {
        (Some(0), Some(0)) => {}
        (None, _) | (_, None) => {
            return Err(invalid_argument(
                "_scaled_mm_v2",
                "swizzle_a and swizzle_b",
                "be non-empty",
                format!("{swizzle_a:?}, {swizzle_b:?}"),
            ));
        }
        _ => {
            return Err(invalid_argument(
                "_scaled_mm_v2",
                "swizzle",
                "be NO_SWIZZLE (CPU does not support swizzle)",
                format!("{swizzle_a:?}, {swizzle_b:?}"),
            ));
        }
    }
    let sides = (v2_side(&scales_a, &recipe_a), v2_side(&scales_b, &recipe_b));
    let float8 = is_float8(a.dtype()) && is_float8(b.dtype());
    let (scale_a, scale_b, scaling) = match sides {
        (Some((sa, RECIPE_TENSORWISE)), Some((sb, RECIPE_TENSORWISE))) if float8 => {
            (sa, sb, Scaling::TensorWise)
        }
        (Some((sa, RECIPE_ROWWISE)), Some((sb, RECIPE_ROWWISE))) if float8 => {
            (sa, sb, Scaling::RowWise)
        }
        _ => {
            let first = |s: &[Tensor]| s.first().cloned().unwrap_or_else(|| Tensor::scalar(0f32));
            return Err(invalid_scaling(
                &a,
                &b,
                &first(&scales_a),
                &first(&scales_b),
            ));
        }
    };
    emulated(
        args,
        ScaledProduct {
            a: &a,
            b: &b,
            scale_a: &scale_a,
            scale_b: &scale_b,
            scaling,
            bias,
            result_scale: None,
            out_dtype: result_dtype,
        },
    )
}

/// The overload with its out= tensor at `OUT` (0: the functional one) of a product `run`.
fn kernel<const OUT: usize>(
    args: &mut Args<'_>,
    run: fn(&mut Args<'_>, Option<usize>) -> crate::Result<Tensor>,
) -> R {
    if OUT == 0 {
        return Ok(run(args, None)?.into());
    }
    let r = run(args, Some(OUT))?;
    args.write_outs(OUT, r.into())
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::_scaled_mm", |a| kernel::<0>(a, scaled_mm));
    r.add("aten::_scaled_mm.out", |a| kernel::<8>(a, scaled_mm));
    r.add("aten::_scaled_mm_v2", |a| kernel::<0>(a, scaled_mm_v2));
    r.add("aten::_scaled_mm_v2.out", |a| kernel::<12>(a, scaled_mm_v2));
}
