//! Making and taking apart quantized tensors: `quantize_per_tensor` / `_per_channel` (fbgemm's
//! `zero_point + nearbyint(x * (1/scale))` in float), `dequantize` (`scale * (q - zero_point)`),
//! `int_repr`, `q_scale`, `q_zero_point`, per-channel queries.

use super::affine_loops::{self, Byte};
use super::{
    arg_qtensor, dequantize_val, int_values, make_quantized, per_tensor_quantized, quantize_val,
    tensor_result,
};
use crate::ops::kernels::{
    check_rank, check_size, invalid_argument, size_mismatch, unsupported_feature, wrong_dtype,
};
use crate::ops::{Args, Registry};
use crate::tensor::{DType, Element, Quantizer, RankRequirement, Tensor, TensorError};
use crate::values::types::Type;
use crate::values::{IValue, List};
use crate::Result;

pub fn register(r: &mut Registry) {
    r.add("aten::quantize_per_tensor", quantize_per_tensor);
    r.add(
        "aten::quantize_per_tensor.tensor_qparams",
        quantize_per_tensor_tensor_qparams,
    );
    r.add(
        "aten::quantize_per_tensor.tensors",
        quantize_per_tensor_tensors,
    );
    r.add("aten::quantize_per_channel", quantize_per_channel);
    r.add(
        "aten::quantize_per_tensor_dynamic",
        quantize_per_tensor_dynamic,
    );
    r.add("aten::_make_per_tensor_quantized_tensor", make_per_tensor);
    r.add("aten::_make_per_channel_quantized_tensor", make_per_channel);
    r.add("aten::qscheme", qscheme);
    r.add(
        "quantization::_FloatToBfloat16Quantized",
        float_to_bfloat16_quantized,
    );
    r.add(
        "quantization::_Bfloat16QuantizedToFloat",
        bfloat16_quantized_to_float,
    );
    r.add_all(
        &["aten::dequantize.self", "aten::dequantize.tensor"],
        dequantize,
    );
    r.add_all(
        &["aten::dequantize.tensors", "aten::dequantize.list"],
        dequantize_list,
    );
    r.add("aten::dequantize.any", dequantize_any);
    r.add("aten::empty_quantized", empty_quantized);
    r.add("aten::_empty_affine_quantized", empty_affine_quantized);
    r.add(
        "aten::_empty_per_channel_affine_quantized",
        empty_per_channel_affine_quantized,
    );
    r.add(
        "aten::_choose_qparams_per_tensor",
        choose_qparams_per_tensor,
    );
    r.add("aten::int_repr", int_repr);
    // (registered after the device queries, which answer false for every tensor)
    r.add("prim::is_quantized", is_quantized);
    r.add("aten::q_scale", q_scale);
    r.add("aten::q_zero_point", q_zero_point);
    r.add("aten::q_per_channel_scales", q_per_channel_scales);
    r.add("aten::q_per_channel_zero_points", q_per_channel_zero_points);
    r.add("aten::q_per_channel_axis", q_per_channel_axis);
}

fn quantized_dtype(op: &str, d: DType) -> Result<DType> {
    if d.is_quantized() {
        Ok(d)
    } else {
        Err(wrong_dtype(op, "dtype", "a quantized dtype", d))
    }
}

/// `x` (any real dtype) as a contiguous float32 tensor (itself when it is one).
fn float32_contiguous(x: &Tensor) -> Result<Tensor> {
    if x.dtype() == DType::Float32 {
        return x.contiguous();
    }
    x.to_dtype(DType::Float32)?.contiguous()
}

/// The byte each stored byte of an 8-bit per-tensor `from` value becomes when dequantized
/// (`scale * (q - zero_point)`, [`dequantize_tensor`]'s rule), optionally ReLU'd, and
/// quantized to (`scale`, `zero_point`) of the same `dtype` ([`quantize_tensor`]'s rule):
/// both steps are functions of the one value, so a table of 256 entries gives exactly their
/// composition. Indexed by the stored byte (qint8 as two's complement). `None` for other
/// dtypes, quantizers or zero points outside the type's range.
pub(crate) fn requantize_byte_table(
    dtype: DType,
    from: &Quantizer,
    (scale, zero_point): (f64, i64),
    relu: bool,
) -> Option<[u8; 256]> {
    let Quantizer::PerTensorAffine {
        scale: from_scale,
        zero_point: from_zp,
    } = from
    else {
        return None;
    };
    let kind = byte_kind(dtype, *from_zp)?;
    byte_kind(dtype, zero_point)?;
    let (lo, hi) = kind.range();
    let (from_scale, from_zp) = (*from_scale as f32, *from_zp as i32);
    let inv = 1.0f32 / scale as f32;
    Some(std::array::from_fn(|byte| {
        let q = match kind {
            Byte::Unsigned => byte as i32,
            Byte::Signed => i32::from(byte as u8 as i8),
        };
        let x = from_scale * (q - from_zp) as f32;
        let x = if relu { x.max(0.0) } else { x };
        affine_loops::fbgemm_vector_lane(x, inv, zero_point as i32, lo, hi) as u8
    }))
}

/// The 8-bit type of `dtype` with `zero_point` in its range (the vector loops' cases).
fn byte_kind(dtype: DType, zero_point: i64) -> Option<Byte> {
    let kind = match dtype {
        DType::QUInt8 => Byte::Unsigned,
        DType::QInt8 => Byte::Signed,
        _ => return None,
    };
    let (lo, hi) = dtype.quantized_range()?;
    (lo..=hi).contains(&zero_point).then_some(kind)
}

/// A new contiguous tensor of `shape` holding the bytes `fill` writes: quint8 or qint8 values
/// under `quantizer`.
fn quantized_bytes(
    shape: &[usize],
    kind: Byte,
    quantizer: Quantizer,
    fill: impl FnOnce(&mut [u8]),
) -> Result<Tensor> {
    let ints = match kind {
        Byte::Unsigned => {
            let t = Tensor::empty(shape, DType::UInt8)?;
            fill(t.write::<u8>()?.as_slice_mut().unwrap_or(&mut []));
            t
        }
        Byte::Signed => {
            let t = Tensor::empty(shape, DType::Int8)?;
            let mut w = t.write::<i8>()?;
            fill(bytemuck::cast_slice_mut(
                w.as_slice_mut().unwrap_or(&mut []),
            ));
            drop(w);
            t
        }
    };
    Ok(Tensor::quantized_from_ints(&ints, quantizer)?)
}

/// `x` (any real dtype) quantized per tensor: quint8 and qint8 as fbgemm's `QuantizeAvx2`,
/// qint32 as its scalar `Quantize` (ATen's paths on x86), over the elements in memory order
/// and in `x`'s memory format, as ATen allocates it (`suggest_memory_format`).
pub(crate) fn quantize_tensor(
    x: &Tensor,
    scale: f64,
    zero_point: i64,
    dtype: DType,
) -> Result<Tensor> {
    super::layout::in_memory_order(x, |x| quantize_rows(x, scale, zero_point, dtype))
}

/// [`quantize_tensor`] in row-major order, into a contiguous tensor.
fn quantize_rows(x: &Tensor, scale: f64, zero_point: i64, dtype: DType) -> Result<Tensor> {
    let range = dtype
        .quantized_range()
        .ok_or_else(|| wrong_dtype("quantize_per_tensor", "dtype", "a quantized dtype", dtype))?;
    let inv = 1.0f32 / scale as f32;
    let quantizer = Quantizer::PerTensorAffine { scale, zero_point };
    if let Some(kind) = byte_kind(dtype, zero_point) {
        let floats = float32_contiguous(x)?;
        let read = floats.read::<f32>()?;
        let src = read.as_slice().unwrap_or(&[]);
        return quantized_bytes(x.shape(), kind, quantizer, |out| {
            affine_loops::quantize_per_tensor_bytes(src, inv, zero_point as i32, kind, out)
        });
    }
    let vals: Vec<i32> = match (dtype, i32::try_from(zero_point)) {
        (DType::QInt32, Ok(zp)) => x
            .to_vec::<f32>()?
            .iter()
            .map(|&v| affine_loops::fbgemm_scalar(v, inv, zp, i32::MIN, i32::MAX))
            .collect(),
        _ => x
            .to_vec::<f32>()?
            .iter()
            .map(|&v| quantize_val(v, inv, zero_point, range))
            .collect(),
    };
    per_tensor_quantized(&vals, x.shape(), dtype, scale, zero_point)
}

fn quantize_per_tensor(a: &mut Args<'_>) -> Result<IValue> {
    let x = a.tensor(0)?;
    let dtype = quantized_dtype(a.op, a.dtype(3)?)?;
    tensor_result(quantize_tensor(&x, a.double(1)?, a.int(2)?, dtype)?)
}

fn quantize_per_tensor_tensor_qparams(a: &mut Args<'_>) -> Result<IValue> {
    let x = a.tensor(0)?;
    let scale = a.tensor(1)?.item()?.to_f64();
    let zp = a.tensor(2)?.item()?.to_i64();
    let dtype = quantized_dtype(a.op, a.dtype(3)?)?;
    tensor_result(quantize_tensor(&x, scale, zp, dtype)?)
}

fn quantize_per_tensor_tensors(a: &mut Args<'_>) -> Result<IValue> {
    let xs = a.tensor_list(0)?;
    let scales = a.tensor(1)?.to_vec::<f64>()?;
    let zps = a.tensor(2)?.to_vec::<i64>()?;
    let dtype = quantized_dtype(a.op, a.dtype(3)?)?;
    for (what, len) in [("scales", scales.len()), ("zero_points", zps.len())] {
        if len != xs.len() {
            return Err(size_mismatch(
                a.op,
                format!("the number of {what} (one per tensor)"),
                xs.len() as i64,
                len as i64,
            ));
        }
    }
    let out = xs
        .iter()
        .zip(scales.iter().zip(&zps))
        .map(|(x, (&s, &z))| quantize_tensor(x, s, z, dtype).map(IValue::Tensor))
        .collect::<Result<Vec<_>>>()?;
    Ok(IValue::List(List::new(Type::Tensor, out)))
}

/// The integers of `x` quantized per index of `axis`, after checking there is one of each of
/// `params` (scale and zero point counts) per channel: `quantize(value, channel, range)`.
fn quantize_by_channel(
    x: &Tensor,
    params: (usize, usize),
    axis: usize,
    dtype: DType,
    quantize: impl Fn(f32, usize, (i64, i64)) -> i32,
) -> Result<Vec<i32>> {
    let op = "quantize_per_channel";
    let range = dtype
        .quantized_range()
        .ok_or_else(|| wrong_dtype(op, "dtype", "a quantized dtype", dtype))?;
    let shape = x.shape();
    let channels = *shape.get(axis).ok_or(TensorError::DimOutOfRange {
        dim: axis as i64,
        ndim: x.dim(),
    })?;
    for (what, len) in [("scales", params.0), ("zero_points", params.1)] {
        if len != channels {
            return Err(size_mismatch(
                op,
                format!("the number of {what} (one per channel along axis {axis})"),
                channels as i64,
                len as i64,
            ));
        }
    }
    let inner: usize = shape[axis + 1..].iter().product();
    Ok(x.to_vec::<f32>()?
        .iter()
        .enumerate()
        .map(|(i, &v)| quantize(v, (i / inner.max(1)) % channels.max(1), range))
        .collect())
}

/// `x` quantized with a scale and zero point per index of `axis`: ATen's `quantize_val`
/// (fbgemm's scalar `Quantize`) per element, channel by channel.
pub(crate) fn quantize_channels(
    x: &Tensor,
    scales: &[f64],
    zero_points: &[i64],
    axis: usize,
    dtype: DType,
) -> Result<Tensor> {
    let inv: Vec<f32> = scales.iter().map(|&s| 1.0f32 / s as f32).collect();
    let quantizer = Quantizer::PerChannelAffine {
        scales: scales.into(),
        zero_points: zero_points.into(),
        axis,
    };
    let shape = x.shape();
    let kind = zero_points
        .iter()
        .map(|&z| byte_kind(dtype, z))
        .collect::<Option<Vec<Byte>>>()
        .and_then(|kinds| kinds.first().copied());
    let channels = shape.get(axis).copied();
    if let (Some(kind), Some(channels)) = (kind, channels) {
        if channels == scales.len() && channels == zero_points.len() {
            let inner: usize = shape[axis + 1..].iter().product();
            let floats = float32_contiguous(x)?;
            let read = floats.read::<f32>()?;
            let src = read.as_slice().unwrap_or(&[]);
            return quantized_bytes(shape, kind, quantizer, |out| {
                // runs of `inner` values share a channel
                for (k, (o, s)) in out
                    .chunks_mut(inner.max(1))
                    .zip(src.chunks(inner.max(1)))
                    .enumerate()
                {
                    let c = k % channels;
                    affine_loops::quantize_scalar_rule_bytes(
                        s,
                        inv[c],
                        zero_points[c] as i32,
                        kind,
                        o,
                    );
                }
            });
        }
    }
    let vals = quantize_by_channel(
        x,
        (scales.len(), zero_points.len()),
        axis,
        dtype,
        |v, c, range| match (dtype, i32::try_from(zero_points[c])) {
            (DType::QInt32, Ok(zp)) => {
                affine_loops::fbgemm_scalar(v, inv[c], zp, i32::MIN, i32::MAX)
            }
            _ => quantize_val(v, inv[c], zero_points[c], range),
        },
    )?;
    make_quantized(&vals, x.shape(), dtype, quantizer)
}

fn quantize_per_channel(a: &mut Args<'_>) -> Result<IValue> {
    let x = a.tensor(0)?;
    let zps_t = a.tensor(2)?;
    let axis = crate::tensor::wrap_dim(a.int(3)?, x.dim())?;
    let dtype = quantized_dtype(a.op, a.dtype(4)?)?;
    if zps_t.dtype().is_floating_point() {
        // float zero points make a per_channel_affine_float_qparams tensor (float32 parameters)
        let scales = a.tensor(1)?.to_vec::<f32>()?;
        let zps = zps_t.to_vec::<f32>()?;
        return tensor_result(quantize_channels_float_qparams(
            &x, &scales, &zps, axis, dtype,
        )?);
    }
    let scales = a.tensor(1)?.to_vec::<f64>()?;
    let zps = zps_t.to_vec::<i64>()?;
    tensor_result(quantize_channels(&x, &scales, &zps, axis, dtype)?)
}

/// ATen's `quantize_val_float_qparams` per channel of `axis`:
/// `clamp(nearbyint(x * (1 / scale) + zero_point), qmin, qmax)` in float (inverse 1 for a zero
/// scale).
pub(crate) fn quantize_channels_float_qparams(
    x: &Tensor,
    scales: &[f32],
    zero_points: &[f32],
    axis: usize,
    dtype: DType,
) -> Result<Tensor> {
    let inv: Vec<f32> = scales
        .iter()
        .map(|&s| if s == 0.0 { 1.0 } else { 1.0f32 / s })
        .collect();
    let vals = quantize_by_channel(
        x,
        (scales.len(), zero_points.len()),
        axis,
        dtype,
        |v, c, range| {
            // lrintf of NaN is unspecified in C; x86 gives INT_MIN, clamped to qmin
            let r = (v * inv[c] + zero_points[c]).round_ties_even();
            if r.is_nan() {
                range.0 as i32
            } else {
                r.clamp(range.0 as f32, range.1 as f32) as i32
            }
        },
    )?;
    make_quantized(
        &vals,
        x.shape(),
        dtype,
        Quantizer::PerChannelAffineFloatQParams {
            scales: scales.into(),
            zero_points: zero_points.into(),
            axis,
        },
    )
}

/// ATen's `choose_qparams` as `quantize_per_tensor_dynamic` uses it (min/max including 0).
fn quantize_per_tensor_dynamic(a: &mut Args<'_>) -> Result<IValue> {
    let x = a.tensor(0)?;
    let dtype = quantized_dtype(a.op, a.dtype(1)?)?;
    let reduce_range = a.bool(2)?;
    let (qmin, qmax) = match dtype {
        DType::QUInt8 => (0, 255),
        DType::QInt8 => (-128, 127),
        other => return Err(wrong_dtype(a.op, "dtype", "quint8 or qint8", other)),
    };
    let v = x.to_vec::<f32>()?;
    let (lo, hi) = super::linear::min_max(&v);
    let (scale, zp) = super::linear::choose_qparams(lo, hi, qmin, qmax, reduce_range);
    tensor_result(quantize_tensor(&x, scale, zp as i64, dtype)?)
}

/// `Tensor.is_quantized` (`quantized::elu` and friends check their input with it).
fn is_quantized(a: &mut Args<'_>) -> Result<IValue> {
    Ok(IValue::Bool(a.tensor(0)?.is_quantized()))
}

/// Argument 0 of the `_make_per_*_quantized_tensor` ops: int8, uint8 or int32 values.
fn integer_arg(a: &Args<'_>) -> Result<Tensor> {
    let x = a.tensor(0)?;
    if !matches!(x.dtype(), DType::UInt8 | DType::Int8 | DType::Int32) {
        return Err(wrong_dtype(
            a.op,
            "input",
            "int8, uint8 or int32",
            x.dtype(),
        ));
    }
    Ok(x)
}

fn make_per_tensor(a: &mut Args<'_>) -> Result<IValue> {
    let x = integer_arg(a)?;
    let ints = x.contiguous()?.deep_clone()?;
    tensor_result(Tensor::quantized_from_ints(
        &ints,
        Quantizer::PerTensorAffine {
            scale: a.double(1)?,
            zero_point: a.int(2)?,
        },
    )?)
}

/// `_make_per_channel_quantized_tensor(self, scale, zero_point, axis)`: the integers of `self`
/// under per-channel parameters (float zero points give float32 `float_qparams` ones, integer
/// ones float64 scales and int64 zero points, as ATen's quantizer factory converts them).
fn make_per_channel(a: &mut Args<'_>) -> Result<IValue> {
    let x = integer_arg(a)?;
    let (scales, zero_points) = (a.tensor(1)?, a.tensor(2)?);
    if !scales.dtype().is_floating_point() {
        return Err(wrong_dtype(a.op, "scale", "floating-point", scales.dtype()));
    }
    super::check_channel_qparams(a.op, &scales, &zero_points)?;
    let axis = crate::tensor::wrap_dim(a.int(3)?, x.dim())?;
    let ints = x.contiguous()?.deep_clone()?;
    let quantizer = channel_quantizer(&scales, &zero_points, axis)?;
    tensor_result(Tensor::quantized_from_ints(&ints, quantizer)?)
}

/// `Tensor.qscheme()`: the `QScheme` number TorchScript passes as an int.
fn qscheme(a: &mut Args<'_>) -> Result<IValue> {
    let t = arg_qtensor(a, 0)?;
    let q = t
        .quantizer()
        .ok_or_else(|| wrong_dtype(a.op, "input", "quantized", t.dtype()))?;
    Ok(IValue::Int(q.qscheme_number()))
}

/// A 2-d tensor argument `i` of `dtype` (the bfloat16 row conversions).
fn matrix_arg(a: &Args<'_>, i: usize, dtype: DType) -> Result<Tensor> {
    let t = a.tensor(i)?;
    check_rank(a.op, "input", RankRequirement::Exactly(2), t.shape())?;
    if t.dtype() != dtype {
        return Err(TensorError::DTypeMismatch {
            expected: dtype,
            got: t.dtype(),
        }
        .into());
    }
    Ok(t)
}

/// `quantization::_FloatToBfloat16Quantized(input)`: fbgemm's `FloatToBfloat16_ref`, the float
/// bits `(bits + 0x8000) >> 16` (ties away from zero), stored in a float16 tensor's storage.
fn float_to_bfloat16_quantized(a: &mut Args<'_>) -> Result<IValue> {
    let x = matrix_arg(a, 0, DType::Float32)?;
    let halves: Vec<half::f16> = x
        .to_vec::<f32>()?
        .iter()
        .map(|v| half::f16::from_bits((v.to_bits().wrapping_add(1 << 15) >> 16) as u16))
        .collect();
    tensor_result(Tensor::from_vec(halves, x.shape())?)
}

/// `quantization::_Bfloat16QuantizedToFloat(input)`: the float16 tensor's 16-bit patterns read
/// as bfloat16 (`bits << 16`).
fn bfloat16_quantized_to_float(a: &mut Args<'_>) -> Result<IValue> {
    let x = matrix_arg(a, 0, DType::Float16)?;
    // the raw 16-bit patterns (a converting read could quiet NaN payloads)
    let floats: Vec<f32> = x
        .to_ndarray::<half::f16>()?
        .iter()
        .map(|h| f32::from_bits((h.to_bits() as u32) << 16))
        .collect();
    tensor_result(Tensor::from_vec(floats, x.shape())?)
}

/// `real(q, channel)` of each of `vals` (row-major over `shape`), its channel along `axis`.
fn by_channel(
    shape: &[usize],
    axis: usize,
    vals: &[i32],
    real: impl Fn(i32, usize) -> f32,
) -> Vec<f32> {
    let channels = shape.get(axis).copied().unwrap_or(1).max(1);
    let inner: usize = shape[(axis + 1).min(shape.len())..].iter().product();
    vals.iter()
        .enumerate()
        .map(|(i, &v)| real(v, (i / inner.max(1)) % channels))
        .collect()
}

/// A quantized tensor's real values (float32).
pub(crate) fn dequantize_tensor(t: &Tensor) -> Result<Tensor> {
    super::layout::in_memory_order(t, dequantize_rows)
}

/// [`dequantize_tensor`] in row-major order, into a contiguous tensor.
fn dequantize_rows(t: &Tensor) -> Result<Tensor> {
    let q = t
        .quantizer()
        .ok_or_else(|| wrong_dtype("dequantize", "input", "quantized", t.dtype()))?;
    if let Some(out) = dequantize_bytes_tensor(t, q)? {
        return Ok(out);
    }
    let vals = int_values(t)?;
    let out: Vec<f32> = match &**q {
        Quantizer::PerTensorAffine { scale, zero_point } => {
            let s = *scale as f32;
            vals.iter()
                .map(|&v| dequantize_val(v, s, *zero_point))
                .collect()
        }
        Quantizer::PerChannelAffine {
            scales,
            zero_points,
            axis,
        } => by_channel(t.shape(), *axis, &vals, |v, c| {
            // ATen's `(float(q) - zero_point) * scale`: the float difference times the double
            // scale, in double
            (f64::from((v as i64 - zero_points[c]) as f32) * scales[c]) as f32
        }),
        // ATen's float-qparams dequantize: `(float(q) - zero_point) * scale`
        Quantizer::PerChannelAffineFloatQParams {
            scales,
            zero_points,
            axis,
        } => by_channel(t.shape(), *axis, &vals, |v, c| {
            (v as f32 - zero_points[c]) * scales[c]
        }),
    };
    Ok(Tensor::from_vec(out, t.shape())?)
}

/// [`dequantize_tensor`] of a per-tensor quint8 or qint8 tensor whose zero point is in the
/// type's range, through the vector loop: fbgemm's `scale * (q - zero_point)`. `None` for the
/// other cases.
fn dequantize_bytes_tensor(t: &Tensor, q: &Quantizer) -> Result<Option<Tensor>> {
    let Quantizer::PerTensorAffine { scale, zero_point } = q else {
        return Ok(None);
    };
    let Some(kind) = byte_kind(t.dtype(), *zero_point) else {
        return Ok(None);
    };
    let (scale, zero_point) = (*scale as f32, *zero_point as i32);
    let shape = t.shape();
    let ints = t.int_repr_view()?.contiguous()?;
    let out = Tensor::empty(shape, DType::Float32)?;
    {
        let mut w = out.write::<f32>()?;
        let dst = w.as_slice_mut().unwrap_or(&mut []);
        let mut fill =
            |src: &[u8]| affine_loops::dequantize_bytes(src, kind, scale, zero_point, dst);
        match kind {
            Byte::Unsigned => fill(ints.read::<u8>()?.as_slice().unwrap_or(&[])),
            Byte::Signed => fill(bytemuck::cast_slice(
                ints.read::<i8>()?.as_slice().unwrap_or(&[]),
            )),
        }
    }
    Ok(Some(out))
}

fn dequantize(a: &mut Args<'_>) -> Result<IValue> {
    let t = a.tensor(0)?;
    if !t.is_quantized() {
        // ATen's `dequantize_cpu_or_cuda`: `self.to(kFloat)` (a float tensor is returned as it
        // is; a quantized U-Net's `dequantize(x > 0.5)` makes its bool mask float)
        return tensor_result(t.to_dtype(DType::Float32)?);
    }
    tensor_result(dequantize_tensor(&t)?)
}

fn dequantize_list(a: &mut Args<'_>) -> Result<IValue> {
    let out = a
        .tensor_list(0)?
        .iter()
        .map(|t| {
            if t.is_quantized() {
                dequantize_tensor(t).map(IValue::Tensor)
            } else {
                Ok(IValue::Tensor(t.clone()))
            }
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(IValue::List(List::new(Type::Tensor, out)))
}

/// `int_repr()`: the integers as their plain type; for quint4x2, as PyTorch gives them, the
/// first `ceil(numel / 2)` bytes of its storage (two values a byte) as a flat uint8 tensor.
fn int_repr(a: &mut Args<'_>) -> Result<IValue> {
    let t = arg_qtensor(a, 0)?;
    if t.dtype() == DType::QUInt4x2 {
        let mut stored = crate::tensor::pack_nibbles(&t)?;
        let n = t.numel().div_ceil(2);
        stored.truncate(n);
        return tensor_result(Tensor::from_vec(stored, &[n])?);
    }
    tensor_result(t.int_repr_view()?.deep_clone()?)
}

fn q_scale(a: &mut Args<'_>) -> Result<IValue> {
    let t = arg_qtensor(a, 0)?;
    Ok(IValue::Double(super::per_tensor_params(a.op, &t)?.0))
}

fn q_zero_point(a: &mut Args<'_>) -> Result<IValue> {
    let t = arg_qtensor(a, 0)?;
    Ok(IValue::Int(super::per_tensor_params(a.op, &t)?.1))
}

/// A per-channel tensor's scales, zero points (float32 for float qparams, else float64 and
/// int64, as PyTorch's quantizers hold them) and axis.
fn per_channel(a: &Args<'_>) -> Result<(Tensor, Tensor, usize)> {
    let t = arg_qtensor(a, 0)?;
    match t.quantizer().map(|q| &**q) {
        Some(Quantizer::PerChannelAffine {
            scales,
            zero_points,
            axis,
        }) => channel_tensors(scales, zero_points, *axis),
        Some(Quantizer::PerChannelAffineFloatQParams {
            scales,
            zero_points,
            axis,
        }) => channel_tensors(scales, zero_points, *axis),
        _ => Err(wrong_dtype(
            a.op,
            "input",
            "a per-channel quantized tensor",
            t.dtype(),
        )),
    }
}

fn channel_tensors<S: Element, Z: Element>(
    scales: &[S],
    zero_points: &[Z],
    axis: usize,
) -> Result<(Tensor, Tensor, usize)> {
    Ok((
        Tensor::from_slice(scales, &[scales.len()])?,
        Tensor::from_slice(zero_points, &[zero_points.len()])?,
        axis,
    ))
}

fn q_per_channel_scales(a: &mut Args<'_>) -> Result<IValue> {
    tensor_result(per_channel(a)?.0)
}

fn q_per_channel_zero_points(a: &mut Args<'_>) -> Result<IValue> {
    tensor_result(per_channel(a)?.1)
}

fn q_per_channel_axis(a: &mut Args<'_>) -> Result<IValue> {
    let (_, _, axis) = per_channel(a)?;
    Ok(IValue::Int(axis as i64))
}

/// `dequantize.any` (a JIT builtin): a tuple's tensors dequantized (other elements kept), or a
/// list of tensors dequantized; PyTorch refuses anything else, a lone tensor too.
fn dequantize_any(a: &mut Args<'_>) -> Result<IValue> {
    let one = |t: &Tensor| -> Result<Tensor> {
        if t.is_quantized() {
            dequantize_tensor(t)
        } else {
            Ok(t.clone())
        }
    };
    match a.get(0)? {
        IValue::Tuple(items) => {
            let out = items
                .items()
                .iter()
                .map(|v| match v {
                    IValue::Tensor(t) => one(t).map(IValue::Tensor),
                    other => Ok(other.clone()),
                })
                .collect::<Result<Vec<_>>>()?;
            Ok(IValue::Tuple(crate::values::Tuple::new(out)))
        }
        IValue::List(_) => {
            let out = a
                .tensor_list(0)?
                .iter()
                .map(|t| one(t).map(IValue::Tensor))
                .collect::<Result<Vec<_>>>()?;
            Ok(IValue::List(List::new(Type::Tensor, out)))
        }
        other => Err(invalid_argument(
            a.op,
            "tensors",
            "must be a Tensor or a List[Tensor]",
            other.kind_name(),
        )),
    }
}

/// The quantized dtype a quantized factory creates (PyTorch dispatches a plain dtype, or none,
/// to a backend without the op).
fn factory_qdtype(a: &Args<'_>, first: usize, default: Option<DType>) -> Result<DType> {
    let d = crate::ops::creation::factory_dtype(a, first, default.unwrap_or(DType::Float32))?;
    if !d.is_quantized() {
        return Err(wrong_dtype(
            a.op,
            "dtype",
            "a quantized dtype like torch.quint8",
            d,
        ));
    }
    Ok(d)
}

/// The quantized factories' `memory_format`: tsrun creates contiguous tensors only.
fn contiguous_format(a: &Args<'_>, i: usize) -> Result<()> {
    match a.opt_int(i)? {
        None | Some(0) | Some(1) => Ok(()),
        Some(f) => Err(unsupported_feature(
            a.op,
            format!("memory_format {f} (tsrun creates contiguous quantized tensors only)"),
        )),
    }
}

/// A quantized tensor of `shape` with `quantizer`: PyTorch leaves the integers uninitialized;
/// tsrun zeroes them.
fn empty_qtensor(shape: &[usize], dtype: DType, quantizer: Quantizer) -> Result<Tensor> {
    let int_dtype = dtype
        .underlying_int()
        .ok_or_else(|| wrong_dtype("empty_quantized", "dtype", "a quantized dtype", dtype))?;
    Ok(Tensor::quantized_from_ints(
        &Tensor::zeros(shape, int_dtype)?,
        quantizer,
    )?)
}

/// `empty_quantized(size, qtensor, *, dtype, layout, device, pin_memory, memory_format)`: an
/// uninitialized tensor with `qtensor`'s quantizer (its dtype unless `dtype` is given).
fn empty_quantized(a: &mut Args<'_>) -> Result<IValue> {
    let size = crate::ops::creation::size_arg(a, 0)?;
    let q = arg_qtensor(a, 1)?;
    let dtype = factory_qdtype(a, 2, Some(q.dtype()))?;
    contiguous_format(a, 6)?;
    let quantizer = q
        .quantizer()
        .map(|q| (**q).clone())
        .ok_or_else(|| wrong_dtype(a.op, "qtensor", "quantized", q.dtype()))?;
    tensor_result(empty_qtensor(&size, dtype, quantizer)?)
}

/// `_empty_affine_quantized(size, *, dtype, layout, device, pin_memory, scale=1,
/// zero_point=0, memory_format)`: uninitialized, per-tensor affine.
fn empty_affine_quantized(a: &mut Args<'_>) -> Result<IValue> {
    let size = crate::ops::creation::size_arg(a, 0)?;
    let dtype = factory_qdtype(a, 1, None)?;
    let (scale, zero_point) = (a.double(5)?, a.int(6)?);
    contiguous_format(a, 7)?;
    tensor_result(empty_qtensor(
        &size,
        dtype,
        Quantizer::PerTensorAffine { scale, zero_point },
    )?)
}

/// `_empty_per_channel_affine_quantized(size, *, scales, zero_points, axis, dtype, layout,
/// device, pin_memory, memory_format)`: uninitialized, per-channel affine (float zero points
/// make the float-qparams scheme, as PyTorch's quantizer factory does).
fn empty_per_channel_affine_quantized(a: &mut Args<'_>) -> Result<IValue> {
    let size = crate::ops::creation::size_arg(a, 0)?;
    let (scales, zero_points) = (a.tensor(1)?, a.tensor(2)?);
    let axis = a.int(3)?;
    let axis = usize::try_from(axis)
        .map_err(|_| invalid_argument(a.op, "axis", "must be non-negative", axis))?;
    let dtype = factory_qdtype(a, 4, None)?;
    contiguous_format(a, 8)?;
    if !scales.dtype().is_floating_point() {
        return Err(wrong_dtype(
            a.op,
            "scales",
            "floating-point",
            scales.dtype(),
        ));
    }
    check_size(
        a.op,
        "the number of zero_points (the number of scales)",
        scales.numel() as i64,
        zero_points.numel() as i64,
    )?;
    let quantizer = channel_quantizer(&scales, &zero_points, axis)?;
    tensor_result(empty_qtensor(&size, dtype, quantizer)?)
}

/// `_choose_qparams_per_tensor(self, reduce_range=False) -> (float, int)`: fbgemm's
/// `ChooseQuantizationParams` over the tensor's float min and max for quint8 (0..255).
fn choose_qparams_per_tensor(a: &mut Args<'_>) -> Result<IValue> {
    let x = a.tensor(0)?;
    let reduce_range = a.bool(1)?;
    let vals = x.to_vec::<f32>()?;
    if vals.is_empty() {
        return Err(invalid_argument(
            a.op,
            "input.numel()",
            "must be positive (min() of an empty tensor needs a reduction dim)",
            0,
        ));
    }
    // min()/max() propagate NaN
    let pick = |better: fn(f32, f32) -> bool| {
        vals.iter().copied().fold(vals[0], |m, v| {
            if m.is_nan() || v.is_nan() {
                f32::NAN
            } else if better(v, m) {
                v
            } else {
                m
            }
        })
    };
    let (lo, hi) = (pick(|v, m| v < m), pick(|v, m| v > m));
    let (scale, zp) = super::linear::choose_qparams(lo, hi, 0, 255, reduce_range);
    Ok(IValue::Tuple(crate::values::Tuple::new(vec![
        IValue::Double(scale),
        IValue::Int(i64::from(zp)),
    ])))
}

/// The per-channel quantizer of `scales` and `zero_points` along `axis`: float zero points make
/// the float-qparams scheme, as PyTorch's quantizer factory does.
fn channel_quantizer(scales: &Tensor, zero_points: &Tensor, axis: usize) -> Result<Quantizer> {
    Ok(if zero_points.dtype().is_floating_point() {
        Quantizer::PerChannelAffineFloatQParams {
            scales: scales.to_vec::<f32>()?.into(),
            zero_points: zero_points.to_vec::<f32>()?.into(),
            axis,
        }
    } else {
        Quantizer::PerChannelAffine {
            scales: scales.to_vec::<f64>()?.into(),
            zero_points: zero_points.to_vec::<i64>()?.into(),
            axis,
        }
    })
}
