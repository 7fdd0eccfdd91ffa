//! `quantized::` overloads that PyTorch implements only for its oneDNN quantization engine
//! (`PackedLinearWeightsOnednn::apply_tanh` / `apply_leaky_relu`,
//! `PackedConvWeightsOnednn::apply_add` / `apply_add_relu`): `linear_tanh`,
//! `linear_leaky_relu`, `conv2d_add`, `conv2d_add_relu`. Their arithmetic is oneDNN's int8
//! linear / convolution with a fused post-op, which equals the `onednn::qlinear_pointwise` /
//! `onednn::qconv2d_pointwise.binary` kernels (`onednn.rs`) on the same weights, so these
//! unwrap the quantized tensors and the packed parameters and run those.
//!
//! (PyTorch's oneDNN packed weights cache the primitive of their first call, post-op
//! included: a packed weight used by `linear_tanh` and then `linear_leaky_relu` gives the tanh
//! result again. tsrun computes every call as a first call.)

use super::torchbind::{packed_arg, ConvParams, LinearParams};
use super::{arg_qtensor, per_tensor_params, unsupported};
use crate::ops::kernels::{check_rank, invalid_argument, rank_mismatch, wrong_dtype};
use crate::ops::prims::via_aten;
use crate::ops::{Args, Registry};
use crate::tensor::RankRequirement;
use crate::tensor::{DType, Quantizer, Tensor};
use crate::values::types::Type;
use crate::values::{IValue, List};
use crate::Result;

pub fn register(r: &mut Registry) {
    r.add("quantized::linear_tanh", linear_tanh);
    r.add("quantized::linear_leaky_relu", linear_leaky_relu);
    r.add("quantized::conv2d_add", conv2d_add::<false>);
    r.add("quantized::conv2d_add_relu", conv2d_add::<true>);
}

/// oneDNN's weight scales and (zero) zero points of a qint8 weight with `n` output channels:
/// oneDNN quantizes weights symmetrically and refuses other zero points.
fn symmetric_weight(op: &str, w: &Tensor, n: usize) -> Result<(IValue, IValue)> {
    let scales: Vec<f32> = match w.quantizer().map(|q| &**q) {
        Some(Quantizer::PerTensorAffine { scale, zero_point }) if *zero_point == 0 => {
            vec![*scale as f32; n]
        }
        Some(Quantizer::PerChannelAffine {
            scales,
            zero_points,
            axis: 0,
        }) if zero_points.iter().all(|&z| z == 0) && scales.len() == n => {
            scales.iter().map(|&s| s as f32).collect()
        }
        _ => {
            return Err(invalid_argument(
                op,
                "the weight's quantization",
                "must be symmetric (zero points 0) per tensor or per output channel for oneDNN",
                "another quantization",
            ))
        }
    };
    Ok((
        IValue::Tensor(Tensor::from_vec(scales, &[n])?),
        IValue::Tensor(Tensor::from_vec(vec![0i64; n], &[n])?),
    ))
}

/// The quantized activation at `i`: its integers, scale and zero point.
fn activation(a: &Args<'_>, i: usize) -> Result<(Tensor, f64, i64)> {
    let x = arg_qtensor(a, i)?;
    if !matches!(x.dtype(), DType::QUInt8 | DType::QInt8) {
        return Err(wrong_dtype(
            a.op,
            format!("argument {i}"),
            "quint8 or qint8",
            x.dtype(),
        ));
    }
    let (scale, zp) = per_tensor_params(a.op, &x)?;
    Ok((x.int_repr_view()?.contiguous()?, scale, zp))
}

/// The leading arguments of the `onednn::` int8 kernels: the activation's integers, scale
/// and zero point, the packed weight, its scales and zero points.
fn operands(
    x: Tensor,
    x_scale: f64,
    x_zp: i64,
    qw: IValue,
    w_scales: IValue,
    w_zps: IValue,
) -> Vec<IValue> {
    vec![
        IValue::Tensor(x),
        IValue::Double(x_scale),
        IValue::Int(x_zp),
        qw,
        w_scales,
        w_zps,
    ]
}

/// The integer result of a oneDNN kernel as a quantized tensor with `(scale, zero_point)`.
fn requantized(y: IValue, scale: f64, zero_point: i64) -> Result<IValue> {
    let IValue::Tensor(y) = y else {
        return Err(unsupported("onednn kernel", "returned no tensor"));
    };
    Ok(IValue::Tensor(Tensor::quantized_from_ints(
        &y,
        Quantizer::PerTensorAffine { scale, zero_point },
    )?))
}

/// `quantized::linear_{tanh,leaky_relu}(X, W_prepack, Y_scale_i, Y_zero_point_i, ...)`:
/// `onednn::qlinear_pointwise` with the unary post-op `post` (arguments `post_args`).
fn linear_unary(a: &Args<'_>, post: &str, post_args: Vec<IValue>) -> Result<IValue> {
    let (x, x_scale, x_zp) = activation(a, 0)?;
    let p = LinearParams::from_object(&packed_arg(a, 1)?)?;
    if p.is_fp16() {
        return Err(wrong_dtype(
            a.op,
            "packed weight",
            "qint8",
            p.weight.dtype(),
        ));
    }
    check_rank(
        a.op,
        "packed weight",
        RankRequirement::Exactly(2),
        p.weight.shape(),
    )?;
    let n = p.weight.shape()[0];
    let (w_scales, w_zps) = symmetric_weight(a.op, &p.weight, n)?;
    let w_ints = IValue::Tensor(p.weight.int_repr_view()?.contiguous()?);
    let qw = via_aten(a, "onednn::qlinear_prepack", vec![w_ints, IValue::None])?;
    let (out_scale, out_zp) = (a.double(2)?, a.int(3)?);
    let mut args = operands(x, x_scale, x_zp, qw, w_scales, w_zps);
    args.extend([
        p.bias.map(IValue::Tensor).unwrap_or(IValue::None),
        IValue::Double(out_scale),
        IValue::Int(out_zp),
        IValue::None,
        IValue::str(post),
        IValue::List(List::new(Type::Optional(Box::new(Type::Number)), post_args)),
        IValue::str(""),
    ]);
    let y = via_aten(a, "onednn::qlinear_pointwise", args)?;
    requantized(y, out_scale, out_zp)
}

fn linear_tanh(a: &mut Args<'_>) -> Result<IValue> {
    linear_unary(a, "tanh", Vec::new())
}

/// `linear_leaky_relu(X, W_prepack, Y_scale_i, Y_zero_point_i, negative_slope)`.
fn linear_leaky_relu(a: &mut Args<'_>) -> Result<IValue> {
    let slope = a.double(4)?;
    linear_unary(a, "leaky_relu", vec![IValue::Double(slope)])
}

/// `quantized::conv2d_add[_relu](qx, qaccum, packed_weight, output_scale, output_zero_point)`:
/// the convolution plus `qaccum` (dequantized), optionally relu, requantized:
/// `onednn::qconv2d_pointwise.binary` with the `sum` post-op.
fn conv2d_add<const RELU: bool>(a: &mut Args<'_>) -> Result<IValue> {
    let qx = arg_qtensor(a, 0)?;
    check_rank(a.op, "activation", RankRequirement::Exactly(4), qx.shape())?;
    let (x, x_scale, x_zp) = activation(a, 0)?;
    let (accum, accum_scale, accum_zp) = activation(a, 1)?;
    if accum.dtype() != x.dtype() {
        return Err(wrong_dtype(
            a.op,
            "accum",
            format!("{} (the activation's dtype)", x.dtype()),
            accum.dtype(),
        ));
    }
    let p = ConvParams::from_object(&packed_arg(a, 2)?)?;
    if p.transpose {
        return Err(invalid_argument(
            a.op,
            "packed weight",
            "must be a forward convolution's",
            "a transposed convolution's",
        ));
    }
    if p.spatial_dims() != 2 {
        return Err(rank_mismatch(
            a.op,
            "packed weight",
            RankRequirement::Exactly(4),
            p.weight.shape(),
        ));
    }
    let n = p.weight.shape().first().copied().unwrap_or(0);
    let (w_scales, w_zps) = symmetric_weight(a.op, &p.weight, n)?;
    let ints = |v: &[i64]| {
        IValue::List(List::new(
            Type::Int,
            v.iter().map(|&x| IValue::Int(x)).collect(),
        ))
    };
    let x_shape: Vec<i64> = x.shape().iter().map(|&d| d as i64).collect();
    let qw = via_aten(
        a,
        "onednn::qconv_prepack",
        vec![
            IValue::Tensor(p.weight.int_repr_view()?.contiguous()?),
            w_scales.clone(),
            IValue::Double(x_scale),
            IValue::Int(x_zp),
            ints(&p.stride),
            ints(&p.padding),
            ints(&p.dilation),
            IValue::Int(p.groups),
            ints(&x_shape),
        ],
    )?;
    let (out_scale, out_zp) = (a.double(3)?, a.int(4)?);
    let mut args = operands(x, x_scale, x_zp, qw, w_scales, w_zps);
    args.extend([
        // the kernel writes its result into the accumulator: a copy, not the caller's
        IValue::Tensor(accum.deep_clone()?),
        p.bias.map(IValue::Tensor).unwrap_or(IValue::None),
        ints(&p.stride),
        ints(&p.padding),
        ints(&p.dilation),
        IValue::Int(p.groups),
        IValue::Double(out_scale),
        IValue::Int(out_zp),
        IValue::None,
        IValue::Double(accum_scale),
        IValue::Int(accum_zp),
        IValue::str("sum"),
        IValue::Double(1.0),
        IValue::str(if RELU { "relu" } else { "none" }),
        IValue::List(List::new(
            Type::Optional(Box::new(Type::Number)),
            Vec::new(),
        )),
        IValue::str(""),
    ]);
    let y = via_aten(a, "onednn::qconv2d_pointwise.binary", args)?;
    requantized(y, out_scale, out_zp)
}
