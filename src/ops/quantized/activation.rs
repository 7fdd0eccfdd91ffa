//! Quantized activations (`quantized::hardswish`, `leaky_relu`, `sigmoid`, `relu6`, `clamp`,
//! `threshold`, `elu`, `celu`, `prelu`, `dropout`) with the arithmetic of ATen's
//! `QuantizedOpKernels.cpp`: its `cpu_kernel_vec` loops run whole pairs of AVX512 vectors with
//! the vector formulas (dequantize by FMA, quantize with the kernel's precomputed inverse scale)
//! and the rest of the elements with the scalar ones (`dequantize_val` / `quantize_val`), so
//! which element takes which path matters for bit-exact results.

use super::{
    arg_qtensor, int_values, make_quantized, map_byte_values, per_tensor_params,
    per_tensor_quantized, quantize_val, tensor_result, unit_interval_qparams, VEC_ELEMS_U8,
};
use crate::ops::kernels::{check_rank, invalid_argument, wrong_dtype};
use crate::ops::{Args, Registry};
use crate::tensor::RankRequirement;
use crate::tensor::{DType, Quantizer, Tensor};
use crate::values::IValue;
use crate::Result;

pub fn register(r: &mut Registry) {
    r.add("quantized::hardswish", |a| {
        super::layout::elementwise(a, &[0], hardswish)
    });
    r.add("quantized::leaky_relu", |a| {
        super::layout::elementwise(a, &[0], leaky_relu)
    });
    r.add("quantized::sigmoid", |a| {
        super::layout::elementwise(a, &[0], sigmoid)
    });
    r.add("quantized::relu6", |a| {
        super::layout::elementwise(a, &[0], relu6)
    });
    r.add("quantized::clamp", clamp_in_layout);
    r.add("quantized::threshold", |a| {
        super::layout::elementwise(a, &[0], threshold)
    });
    r.add("quantized::elu", |a| {
        super::layout::elementwise(a, &[0], elu)
    });
    r.add("quantized::celu", |a| {
        super::layout::elementwise(a, &[0], celu)
    });
    r.add("quantized::prelu", prelu);
    r.add("quantized::dropout", |a| {
        super::layout::elementwise(a, &[0], dropout)
    });
}

/// The elements ATen's vectorized loop covers: whole pairs of `Vectorized<T>` (64 one-byte or
/// 16 four-byte elements on AVX512).
fn vec_end(len: usize, dtype: DType) -> usize {
    let chunk = if dtype == DType::QInt32 {
        2 * 16
    } else {
        2 * VEC_ELEMS_U8
    };
    len / chunk * chunk
}

/// ATen's scalar `dequantize_val(double scale, zp, q)`: `(float(q) - zp) * scale` in double,
/// rounded to float.
#[inline]
fn dequant_scalar(q: i32, scale: f64, zp: i64) -> f32 {
    ((q as f32 - zp as f32) as f64 * scale) as f32
}

/// `Vectorized<T>::quantize` (AVX512 `QuantizeAvx512`): `x * inverse_scale` clipped below
/// int32's maximum, rounded to nearest even, plus the zero point, saturated.
#[inline]
fn quant_vec(x: f32, inv: f32, zp: i64, range: (i64, i64)) -> i32 {
    let t = (x * inv).min(2147483520.0);
    let r = if t.is_nan() {
        i32::MIN as i64
    } else {
        t.round_ties_even() as i64
    };
    (r + zp).clamp(range.0, range.1) as i32
}

/// A unary quantized kernel: for element `i` with integer `q`, `vec_f(q)` (vector path) or
/// `scalar_f(q)` (scalar tail) gives the float result, quantized into (`scale`, `zp`) with
/// `inv_vec` on the vector path and `1.0f / float(scale)` on the scalar one.
fn map_requant(
    x: &Tensor,
    scale: f64,
    zp: i64,
    inv_vec: f32,
    vec_f: impl Fn(i32) -> f32,
    scalar_f: impl Fn(i32) -> f32,
) -> Result<Tensor> {
    let dtype = x.dtype();
    let range = dtype
        .quantized_range()
        .ok_or_else(|| wrong_dtype("quantized op", "input", "quantized", dtype))?;
    let inv_scalar = 1.0f32 / scale as f32;
    let vector = |q: i32| quant_vec(vec_f(q), inv_vec, zp, range);
    let scalar = |q: i32| quantize_val(scalar_f(q), inv_scalar, zp, range);
    let end = vec_end(x.numel(), dtype);
    let quantizer = Quantizer::PerTensorAffine {
        scale,
        zero_point: zp,
    };
    if let Some(out) = map_byte_values(x, end, vector, scalar, quantizer)? {
        return Ok(out);
    }
    let vals: Vec<i32> = int_values(x)?
        .iter()
        .enumerate()
        .map(|(i, &q)| if i < end { vector(q) } else { scalar(q) })
        .collect();
    per_tensor_quantized(&vals, x.shape(), dtype, scale, zp)
}

/// The input's dequantization on both paths: the vector one by FMA with the premultiplied
/// zero point (`scale` as float), the scalar one as `dequantize_val` with `scalar_scale`.
fn dequantizers(
    scale: f64,
    zp: i64,
    scalar_scale: f64,
) -> (impl Fn(i32) -> f32, impl Fn(i32) -> f32) {
    let s = scale as f32;
    let premul = s * -(zp as f32);
    (
        move |q: i32| s.mul_add(q as f32, premul),
        move |q: i32| dequant_scalar(q, scalar_scale, zp),
    )
}

/// `qhardswish_kernel`: `x * min(max(x + 3, 0), 6) / 6`; the input scale stays double on the
/// scalar path, the vector path's inverse output scale is `float(1.0 / o_scale)`.
fn hardswish(a: &mut Args<'_>) -> Result<IValue> {
    let x = arg_qtensor(a, 0)?;
    let (scale, zp) = per_tensor_params(a.op, &x)?;
    let (os, ozp) = (a.double(1)?, a.int(2)?);
    let (dv, ds) = dequantizers(scale, zp, scale);
    let f = |v: f32| v * (v + 3.0).clamp(0.0, 6.0) / 6.0;
    tensor_result(map_requant(
        &x,
        os,
        ozp,
        (1.0 / os) as f32,
        |q| f(dv(q)),
        |q| f(ds(q)),
    )?)
}

/// `leaky_qrelu_out_kernel` into the given output parameters.
fn leaky_relu(a: &mut Args<'_>) -> Result<IValue> {
    let x = arg_qtensor(a, 0)?;
    let (scale, zp) = per_tensor_params(a.op, &x)?;
    let slope = a.scalar(1)?.to_f64() as f32;
    let (os, ozp) = (a.double(3)?, a.int(4)?);
    let (dv, ds) = dequantizers(scale, zp, scale as f32 as f64);
    let f = move |v: f32| if v > 0.0 { v } else { v * slope };
    tensor_result(map_requant(
        &x,
        os,
        ozp,
        1.0f32 / os as f32,
        |q| f(dv(q)),
        |q| f(ds(q)),
    )?)
}

/// `qsigmoid_kernel`: the vector path dequantizes as `(q - zp) * scale` and computes
/// `1 / (1 + exp(-x))` in float; the scalar one `1.0f / (1.0 + expf(-x))` in double.
fn sigmoid(a: &mut Args<'_>) -> Result<IValue> {
    let x = arg_qtensor(a, 0)?;
    let (os, ozp) = (a.double(1)?, a.int(2)?);
    tensor_result(sigmoid_into(a.op, &x, os, ozp)?)
}

fn sigmoid_into(op: &str, x: &Tensor, os: f64, ozp: i64) -> Result<Tensor> {
    let (scale, zp) = per_tensor_params(op, x)?;
    let s = scale as f32;
    map_requant(
        x,
        os,
        ozp,
        (1.0 / os) as f32,
        |q| 1.0 / (1.0 + (-((q as f32 - zp as f32) * s)).exp()),
        |q| {
            let v = dequant_scalar(q, s as f64, zp);
            (1.0 / (1.0 + (-v).exp() as f64)) as f32
        },
    )
}

/// `aten::sigmoid` of a quantized tensor (`sigmoid_quantized_cpu`): `qsigmoid_kernel` into
/// the fixed output parameters covering [0, 1].
pub(super) fn sigmoid_fixed_qparams(a: &mut Args<'_>) -> Result<IValue> {
    let x = arg_qtensor(a, 0)?;
    let (os, ozp) = unit_interval_qparams(x.dtype());
    tensor_result(sigmoid_into(a.op, &x, os, ozp)?)
}

/// `aten::tanh` of a quantized tensor (`qtanh_kernel`): output scale 2^-7 (2^-31 for qint32)
/// and zero point 128 for quint8 (0 for the signed types), so [-1, 1] is covered. The
/// vector path dequantizes by FMA, the tail with `dequantize_val` of the float input scale.
pub(super) fn tanh_fixed_qparams(a: &mut Args<'_>) -> Result<IValue> {
    let x = arg_qtensor(a, 0)?;
    let (scale, zp) = per_tensor_params(a.op, &x)?;
    // powers of two, exact in float as ATen holds them
    let (os, ozp): (f64, i64) = match x.dtype() {
        DType::QInt32 => (4.656612873077393e-10, 0),
        DType::QUInt8 => (0.0078125, 128),
        _ => (0.0078125, 0),
    };
    let (dv, ds) = dequantizers(scale, zp, scale as f32 as f64);
    tensor_result(map_requant(
        &x,
        os,
        ozp,
        (1.0 / os) as f32,
        |q| dv(q).tanh(),
        |q| ds(q).tanh(),
    )?)
}

/// An integer clamp of `x` to `[lo, hi]`, the parameters kept.
fn clamp_ints(x: &Tensor, lo: i32, hi: i32) -> Result<Tensor> {
    let vals: Vec<i32> = int_values(x)?.iter().map(|&v| v.max(lo).min(hi)).collect();
    let q = x
        .quantizer()
        .map(|q| (**q).clone())
        .ok_or_else(|| wrong_dtype("quantized op", "input", "quantized", x.dtype()))?;
    make_quantized(&vals, x.shape(), x.dtype(), q)
}

/// `quantize_val(scale, zp, v)` of the input's parameters.
fn quantize_bound(x: &Tensor, op: &str, v: f32) -> Result<i32> {
    let (scale, zp) = per_tensor_params(op, x)?;
    let range = x
        .dtype()
        .quantized_range()
        .ok_or_else(|| wrong_dtype(op, "input", "quantized", x.dtype()))?;
    Ok(quantize_val(v, 1.0f32 / scale as f32, zp, range))
}

/// `quantized::relu6`: integers clamped to `[zp, quantize(6)]`; `inplace` writes them back.
fn relu6(a: &mut Args<'_>) -> Result<IValue> {
    let inplace = a.bool(1)?;
    relu6_with(a, inplace)
}

/// `aten::relu6` of a quantized tensor: ATen's composite `hardtanh(0, 6)`, whose `qclamp`
/// bounds are `quantize(0) = zp` and `quantize(6)`, as `quantized::relu6`.
pub(super) fn relu6_aten(a: &mut Args<'_>) -> Result<IValue> {
    relu6_with(a, false)
}

fn relu6_with(a: &mut Args<'_>, inplace: bool) -> Result<IValue> {
    let x = arg_qtensor(a, 0)?;
    let (_, zp) = per_tensor_params(a.op, &x)?;
    let six = quantize_bound(&x, a.op, 6.0)?;
    let out = clamp_ints(&x, zp as i32, six)?;
    if inplace {
        x.int_repr_view()?.copy_from(&out.int_repr_view()?)?;
        return tensor_result(x);
    }
    tensor_result(out)
}

/// `clamp` / `hardtanh` in ATen's layout: QNNPACK's kernel (quint8, both bounds, the
/// `qnnpack` engine) keeps the input bytes' memory order in a contiguous output, the others
/// allocate the input's memory format.
pub(super) fn clamp_in_layout(a: &mut Args<'_>) -> Result<IValue> {
    let both = a.opt_scalar(1)?.is_some() && a.opt_scalar(2)?.is_some();
    let quint8 = matches!(a.get(0)?, IValue::Tensor(t) if t.dtype() == DType::QUInt8);
    if a.ctx.quantized_engine.qnnpack() && quint8 && both {
        return super::layout::qnnpack_clamp(a, clamp);
    }
    super::layout::elementwise(a, &[0], clamp)
}

/// `qclamp_kernel` (and its min-only / max-only forms): the bounds quantized with the input's
/// parameters, an integer clamp.
pub(super) fn clamp(a: &mut Args<'_>) -> Result<IValue> {
    let x = arg_qtensor(a, 0)?;
    let lo = match a.opt_scalar(1)? {
        Some(v) => quantize_bound(&x, a.op, v.to_f64() as f32)?,
        None => i32::MIN,
    };
    let hi = match a.opt_scalar(2)? {
        Some(v) => quantize_bound(&x, a.op, v.to_f64() as f32)?,
        None => i32::MAX,
    };
    if lo == i32::MIN && hi == i32::MAX {
        return Err(invalid_argument(
            a.op,
            "(min, max)",
            "must not both be None",
            "(None, None)",
        ));
    }
    tensor_result(clamp_ints(&x, lo, hi)?)
}

/// `qthreshold_kernel`: `x > threshold ? x : value` in float, output parameters the input's.
fn threshold(a: &mut Args<'_>) -> Result<IValue> {
    let x = arg_qtensor(a, 0)?;
    let (scale, zp) = per_tensor_params(a.op, &x)?;
    let th = a.scalar(1)?.to_f64() as f32;
    let val = a.scalar(2)?.to_f64() as f32;
    let (dv, ds) = dequantizers(scale, zp, scale as f32 as f64);
    let f = move |v: f32| if v > th { v } else { val };
    let inv = (1.0 / (scale as f32 as f64)) as f32;
    tensor_result(map_requant(&x, scale, zp, inv, |q| f(dv(q)), |q| f(ds(q)))?)
}

/// `qelu_kernel`: `x * scale` for positive `x`, else `expm1(x * input_scale) * alpha * scale`
/// (the vector path's test is `x > 0`, the scalar one's `x >= 0`: zero gives zero either way).
fn elu_into(
    x: &Tensor,
    op: &str,
    os: f64,
    ozp: i64,
    alpha: f32,
    coef: f32,
    input_coef: f32,
) -> Result<Tensor> {
    let (scale, zp) = per_tensor_params(op, x)?;
    let (dv, ds) = dequantizers(scale, zp, scale as f32 as f64);
    let fv = move |v: f32| {
        let v = if v > 0.0 {
            v
        } else {
            (v * input_coef).exp_m1() * alpha
        };
        v * coef
    };
    let fs = move |v: f32| {
        if v >= 0.0 {
            v * coef
        } else {
            (v * input_coef).exp_m1() * alpha * coef
        }
    };
    map_requant(
        x,
        os,
        ozp,
        (1.0 / (os as f32 as f64)) as f32,
        |q| fv(dv(q)),
        |q| fs(ds(q)),
    )
}

fn elu(a: &mut Args<'_>) -> Result<IValue> {
    let x = arg_qtensor(a, 0)?;
    let (os, ozp) = (a.double(1)?, a.int(2)?);
    let alpha = a.scalar(3)?.to_f64() as f32;
    let coef = a.scalar(4)?.to_f64() as f32;
    let input_coef = a.scalar(5)?.to_f64() as f32;
    tensor_result(elu_into(&x, a.op, os, ozp, alpha, coef, input_coef)?)
}

/// `quantized_celu`: ELU with `input_scale = 1 / alpha`.
fn celu(a: &mut Args<'_>) -> Result<IValue> {
    let x = arg_qtensor(a, 0)?;
    let (os, ozp) = (a.double(1)?, a.int(2)?);
    let alpha = a.scalar(3)?.to_f64();
    tensor_result(elu_into(
        &x,
        a.op,
        os,
        ozp,
        alpha as f32,
        1.0,
        (1.0 / alpha) as f32,
    )?)
}

/// `qprelu_out_kernel`: integer arithmetic, `(max(q, zp) - zp) * (quantize_w(1) - w_zp) +
/// (min(q, zp) - zp) * (w - w_zp)` requantized with `x_scale * w_scale / out_scale`; the
/// weight (one per channel, or one) broadcasts along dimension 1.
fn prelu(a: &mut Args<'_>) -> Result<IValue> {
    let x = arg_qtensor(a, 0)?;
    let w = arg_qtensor(a, 1)?;
    let (os, ozp) = (a.double(2)?, a.int(3)?);
    let (xs, xzp) = per_tensor_params(a.op, &x)?;
    let (ws, wzp) = per_tensor_params(a.op, &w)?;
    check_rank(a.op, "input", RankRequirement::AtLeast(1), x.shape())?;
    let range = x
        .dtype()
        .quantized_range()
        .ok_or_else(|| wrong_dtype(a.op, "input", "quantized", x.dtype()))?;
    let w_range = w
        .dtype()
        .quantized_range()
        .ok_or_else(|| wrong_dtype(a.op, "weight", "quantized", w.dtype()))?;
    let channels = if x.dim() > 1 { x.shape()[1] } else { 1 };
    let wv = int_values(&w)?;
    if wv.len() != 1 && wv.len() != channels {
        return Err(invalid_argument(
            a.op,
            "the number of weight elements",
            format!("must be 1 or the input's channels ({channels})"),
            wv.len(),
        ));
    }
    let inner: usize = x.shape().iter().skip(2).product();
    let multiplier = xs as f32 * ws as f32 * (1.0f32 / os as f32);
    let w_one = quantize_val(1.0, 1.0f32 / ws as f32, wzp, w_range) - wzp as i32;
    let (xzp, wzp) = (xzp as i32, wzp as i32);
    let vals: Vec<i32> = int_values(&x)?
        .iter()
        .enumerate()
        .map(|(i, &q)| {
            let c = if wv.len() == 1 {
                0
            } else {
                (i / inner.max(1)) % channels
            };
            let acc = (q.max(xzp) - xzp) * w_one + (q.min(xzp) - xzp) * (wv[c] - wzp);
            let r = ozp + (acc as f32 * multiplier).round_ties_even() as i64;
            r.clamp(range.0, range.1) as i32
        })
        .collect();
    tensor_result(per_tensor_quantized(&vals, x.shape(), x.dtype(), os, ozp)?)
}

/// `quantized::dropout`: the identity (quantized models run in eval mode).
fn dropout(a: &mut Args<'_>) -> Result<IValue> {
    tensor_result(arg_qtensor(a, 0)?)
}
