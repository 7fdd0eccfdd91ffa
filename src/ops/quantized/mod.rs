//! Quantized operators with the arithmetic of PyTorch's x86 (fbgemm) engine: `quantize_per_tensor`
//! / `dequantize` and friends (`tensors.rs`), `quantized::conv*` and the packed-parameter
//! accessors (`conv.rs`), `quantized::linear*` static, dynamic and fp16 (`linear.rs`), the
//! dynamic LSTM and GRU (`rnn.rs`), elementwise ops, pooling and the aten ops quantized models
//! apply to quantized tensors (`elementwise.rs`), activations (`activation.rs`), batch, layer,
//! group and instance norm (`norm.rs`), 8-bit row-wise embedding bags and the quantized
//! embedding modules' packed weights (`embedding.rs`), fake quantization (`fake_quantize.rs`),
//! the packed-weight torchbind classes (`torchbind.rs`), the RNN cell-parameter constructors
//! (`legacy.rs`), the pre-torchbind fbgemm API over packed-matrix tensors
//! (`fbgemm_legacy.rs`), the block-sparse `sparse::qlinear*` (`sparse_linear.rs`), and the
//! `onednn::` int8 ops of x86 inductor's quantization lowering with
//! oneDNN's arithmetic (`onednn.rs`), through which the oneDNN engine's fused
//! `quantized::linear_tanh` / `conv2d_add` and friends run (`onednn_engine.rs`), and the
//! uint8 `onednn::qadd.tensor` / `qmul.tensor`, which PyTorch runs with ATen's own kernels
//! (`int8_binary.rs`). Quantized tensors keep PyTorch's memory formats (channels-last after a
//! convolution, `layout.rs`). Under the `qnnpack` engine, convolutions, linear layers, `add`, average
//! pooling and the spatial `mean` follow QNNPACK's arithmetic instead (`qnnpack.rs`).
//!
//! Integer accumulation is exact (int32 sums of `(x - x_zp) * (w - w_zp)`); requantization
//! repeats fbgemm's float steps in its order (float bias divided by `act_scale * w_scale`, the
//! float multiplier `act_scale * w_scale / out_scale`, round half to even, zero point,
//! saturation), so outputs can be bit-exact.

pub mod activation;
mod affine_loops;
mod byte_pool;
mod byte_transpose;
pub mod conv;
pub mod elementwise;
pub mod embedding;
mod exact_float;
pub mod fake_quantize;
mod fbgemm_depthwise;
pub mod fbgemm_legacy;
pub mod int4_pack;
pub mod int8_binary;
mod int8_depthwise;
mod int8_gemm;
mod int8_sums;
pub mod layout;
pub mod legacy;
pub mod linear;
pub mod norm;
pub mod onednn;
pub mod onednn_engine;
pub mod qnnpack;
pub mod rnn;
pub mod sparse_linear;
pub mod tensors;
pub mod torchbind;
pub mod upsample;
mod weight_cache;

use super::kernels::{
    check_rank, invalid_argument, not_implemented_for, shape_mismatch, wrong_dtype,
};
use super::{Args, Registry};
use crate::tensor::{DType, Quantizer, RankRequirement, Tensor};
use crate::values::IValue;
use crate::Error;

pub fn register(r: &mut Registry) {
    tensors::register(r);
    conv::register(r);
    linear::register(r);
    rnn::register(r);
    elementwise::register(r);
    activation::register(r);
    norm::register(r);
    embedding::register(r);
    fake_quantize::register(r);
    int4_pack::register(r);
    legacy::register(r);
    fbgemm_legacy::register(r);
    sparse_linear::register(r);
    onednn::register(r);
    onednn_engine::register(r);
    int8_binary::register(r);
}

fn unsupported(op: &str, what: impl std::fmt::Display) -> Error {
    Error::Tensor(crate::tensor::TensorError::Unsupported(format!(
        "{op}: {what}"
    )))
}

/// `Ok` when per-channel `scale` and `zero_point` are 1-d tensors of one length (ATen's
/// checks of the per-channel factories and fake quantization).
pub(crate) fn check_channel_qparams(
    op: &str,
    scale: &Tensor,
    zero_point: &Tensor,
) -> crate::Result<()> {
    check_rank(op, "scale", RankRequirement::Exactly(1), scale.shape())?;
    check_rank(
        op,
        "zero_point",
        RankRequirement::Exactly(1),
        zero_point.shape(),
    )?;
    if scale.numel() != zero_point.numel() {
        return Err(shape_mismatch(
            op,
            "zero_point",
            scale.shape(),
            zero_point.shape(),
        ));
    }
    Ok(())
}

/// The per-tensor scale and zero point of quantized `t`.
pub(crate) fn per_tensor_params(op: &str, t: &Tensor) -> crate::Result<(f64, i64)> {
    match t.quantizer().map(|q| &**q) {
        Some(Quantizer::PerTensorAffine { scale, zero_point }) => Ok((*scale, *zero_point)),
        Some(
            Quantizer::PerChannelAffine { .. } | Quantizer::PerChannelAffineFloatQParams { .. },
        ) => Err(invalid_argument(
            op,
            "the input's qscheme",
            "must be per_tensor_affine",
            "per_channel_affine",
        )),
        None => Err(wrong_dtype(op, "input", "quantized", t.dtype())),
    }
}

/// `w` with its scales rounded to float, as fbgemm's packed weights hold them (`unpack` gives
/// them back that way); `w` itself when they already are (archives PyTorch saved).
pub(crate) fn with_f32_scales(w: &Tensor) -> crate::Result<Tensor> {
    let round = |s: f64| s as f32 as f64;
    let q = match w.quantizer().map(|q| &**q) {
        Some(Quantizer::PerTensorAffine { scale, zero_point }) if round(*scale) != *scale => {
            Quantizer::PerTensorAffine {
                scale: round(*scale),
                zero_point: *zero_point,
            }
        }
        Some(Quantizer::PerChannelAffine {
            scales,
            zero_points,
            axis,
        }) if scales.iter().any(|&s| round(s) != s) => Quantizer::PerChannelAffine {
            scales: scales.iter().map(|&s| round(s)).collect(),
            zero_points: zero_points.clone(),
            axis: *axis,
        },
        _ => return Ok(w.clone()),
    };
    Ok(Tensor::quantized_from_ints(&w.int_repr_view()?, q)?)
}

/// `x.round_ties_even()` (C's `nearbyint` in the default rounding mode) without the libm call
/// the baseline x86-64 target makes of it (no SSE4.1 `roundss`): at or above 2^23 every float
/// is an integer; below, adding 2^23 rounds the fraction away half to even (the sum's unit is
/// 1 and 2^23 is even) and subtracting it back is exact. NaN and infinities pass through.
#[inline]
pub(crate) fn round_ties_even(x: f32) -> f32 {
    const TWO_POW_23: f32 = 8_388_608.0;
    if x.abs() < TWO_POW_23 {
        ((x.abs() + TWO_POW_23) - TWO_POW_23).copysign(x)
    } else {
        x
    }
}

/// The integer values of quantized `t` in row-major order.
pub(crate) fn int_values(t: &Tensor) -> crate::Result<Vec<i32>> {
    t.int_repr_view()?.to_vec::<i32>()
}

/// Elements below which [`map_byte_values`] declines: tabulating costs 512 evaluations.
const BYTE_TABLE_MIN_ELEMS: usize = 1024;

/// `x` (quint8 or qint8) mapped value by value into a tensor of its shape and dtype with
/// `quantizer`: element `i` (row-major) of value `q` becomes `head(q)` below `split` and
/// `tail(q)` from it on (the vector body and scalar tail of ATen's loops), results in the
/// dtype's range. Each function is evaluated once per value the dtype holds, so a long tensor
/// costs a table lookup per element, with exactly the functions' results. `None` for other
/// dtypes and for tensors too short to gain.
pub(crate) fn map_byte_values(
    x: &Tensor,
    split: usize,
    head: impl Fn(i32) -> i32,
    tail: impl Fn(i32) -> i32,
    quantizer: Quantizer,
) -> crate::Result<Option<Tensor>> {
    if x.numel() < BYTE_TABLE_MIN_ELEMS {
        return Ok(None);
    }
    let ints = match x.dtype() {
        DType::QUInt8 => map_bytes::<u8>(x, split, &head, &tail)?,
        DType::QInt8 => map_bytes::<i8>(x, split, &head, &tail)?,
        _ => return Ok(None),
    };
    Ok(Some(Tensor::quantized_from_ints(&ints, quantizer)?))
}

/// [`map_byte_values`]'s integers for storage type `T` (`u8` or `i8`).
fn map_bytes<T: crate::tensor::Element>(
    x: &Tensor,
    split: usize,
    head: &dyn Fn(i32) -> i32,
    tail: &dyn Fn(i32) -> i32,
) -> crate::Result<Tensor> {
    // the table index of a stored value is its byte (i8 as two's complement)
    let value = |index: usize| -> i32 {
        if T::DTYPE == DType::Int8 {
            i32::from(index as u8 as i8)
        } else {
            index as i32
        }
    };
    let table = |f: &dyn Fn(i32) -> i32| -> [T; 256] {
        std::array::from_fn(|index| T::from_i64(i64::from(f(value(index)))))
    };
    let ints = x.int_repr_view()?.contiguous()?;
    let read = ints.read::<T>()?;
    let src = read.as_slice().unwrap_or(&[]);
    let split = split.min(src.len());
    let mut out = Vec::with_capacity(src.len());
    let head = table(head);
    out.extend(
        src[..split]
            .iter()
            .map(|&v| head[v.to_i64() as u8 as usize]),
    );
    if split < src.len() {
        let tail = table(tail);
        out.extend(
            src[split..]
                .iter()
                .map(|&v| tail[v.to_i64() as u8 as usize]),
        );
    }
    Ok(Tensor::from_vec(out, x.shape())?)
}

/// A contiguous quantized tensor of `dtype` holding `values` (already in range).
pub(crate) fn make_quantized(
    values: &[i32],
    shape: &[usize],
    dtype: DType,
    quantizer: Quantizer,
) -> crate::Result<Tensor> {
    let ints = match dtype {
        DType::QUInt8 => {
            Tensor::from_vec(values.iter().map(|&v| v as u8).collect::<Vec<u8>>(), shape)?
        }
        DType::QInt8 => {
            Tensor::from_vec(values.iter().map(|&v| v as i8).collect::<Vec<i8>>(), shape)?
        }
        DType::QUInt4x2 if matches!(quantizer, Quantizer::PerChannelAffine { .. }) => {
            return Err(not_implemented_for(
                "quantize_tensor_per_channel_affine",
                DType::QUInt4x2,
            ))
        }
        DType::QUInt4x2 => {
            let ints =
                Tensor::from_vec(values.iter().map(|&v| v as u8).collect::<Vec<u8>>(), shape)?;
            return Ok(Tensor::quantized_from_ints_as(&ints, quantizer, dtype)?);
        }
        DType::QInt32 => Tensor::from_slice(values, shape)?,
        other => return Err(wrong_dtype("quantize", "dtype", "a quantized dtype", other)),
    };
    Ok(Tensor::quantized_from_ints(&ints, quantizer)?)
}

/// A contiguous per-tensor affine quantized tensor of `dtype` holding `values` (already in range).
pub(crate) fn per_tensor_quantized(
    values: &[i32],
    shape: &[usize],
    dtype: DType,
    scale: f64,
    zero_point: i64,
) -> crate::Result<Tensor> {
    make_quantized(
        values,
        shape,
        dtype,
        Quantizer::PerTensorAffine { scale, zero_point },
    )
}

/// ATen's `quantize_val` / fbgemm's non-legacy `Quantize`: `zero_point + nearbyint(x * (1 /
/// scale))` in float, clamped to the type's range.
#[inline]
pub(crate) fn quantize_val(x: f32, inv_scale: f32, zero_point: i64, range: (i64, i64)) -> i32 {
    let r = round_ties_even(x * inv_scale);
    let q = if r.is_nan() {
        zero_point
    } else {
        (zero_point as f64 + r as f64).clamp(range.0 as f64, range.1 as f64) as i64
    };
    q.clamp(range.0, range.1) as i32
}

/// [`quantize_val`] into quint8 (zero point in 0..=255): the same value without f64 or
/// libm, so loops of it vectorize. `r + zero_point` is exact in f32 below 2^24 and saturates
/// alike above.
#[inline(always)]
pub(crate) fn quantize_u8(x: f32, inv_scale: f32, zero_point: i32) -> u8 {
    let r = round_ties_even(x * inv_scale);
    if r.is_nan() {
        zero_point.clamp(0, 255) as u8
    } else {
        (r + zero_point as f32).clamp(0.0, 255.0) as u8
    }
}

/// The scalar-path `dequantize_val`: `float(scale) * (q - zero_point)`.
#[inline]
pub(crate) fn dequantize_val(q: i32, scale: f32, zero_point: i64) -> f32 {
    scale * ((q as i64 - zero_point) as f32)
}

/// ATen's vectorized dequantize (`Vectorized<quint8>::dequantize`): one FMA,
/// `scale * q + (scale * -zero_point)`.
#[inline]
pub(crate) fn dequantize_val_fma(q: i32, scale: f32, neg_zp_premul: f32) -> f32 {
    scale.mul_add(q as f32, neg_zp_premul)
}

/// ATen's CPU vector width in bytes of quantized elements for the AVX512 build PyTorch runs
/// on this machine kind: elementwise quantized kernels process `2 * 64` elements per vector
/// step and the tail with the scalar formula.
pub(crate) const VEC_ELEMS_U8: usize = 64;

/// The fixed output parameters of ATen's quantized sigmoid and hardsigmoid, covering [0, 1]:
/// scale 2^-8 (2^-32 for qint32), zero point 0 (-128 for qint8).
pub(crate) fn unit_interval_qparams(dtype: DType) -> (f64, i64) {
    match dtype {
        DType::QInt32 => (2.3283064365386963e-10, 0),
        DType::QInt8 => (0.00390625, -128),
        _ => (0.00390625, 0),
    }
}

pub(crate) fn tensor_result(t: Tensor) -> crate::Result<IValue> {
    Ok(IValue::Tensor(t))
}

pub(crate) fn arg_qtensor(a: &Args<'_>, i: usize) -> crate::Result<Tensor> {
    let t = a.tensor(i)?;
    if !t.is_quantized() {
        return Err(wrong_dtype(
            a.op,
            format!("argument {i}"),
            "quantized",
            t.dtype(),
        ));
    }
    Ok(t)
}
