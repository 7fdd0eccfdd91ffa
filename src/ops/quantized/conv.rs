//! `quantized::conv1d/2d/3d` (+relu), `conv_transpose1d/2d`, and their prepack/unpack.
//! Accumulation is exact int32 over `(x - x_zp) * (w - w_zp)` (padding holds the input zero
//! point, i.e. real zero); requantization is fbgemm's (see `linear::Requant`), or oneDNN's
//! where PyTorch's x86 engine would hand the convolution to oneDNN ([`QuantizedEngine::X86`]).
//! Depthwise convolutions that fbgemm runs through its fast path saturate its pairs of products
//! to int16 as it does (`fbgemm_depthwise`). fbgemm's groupwise kernel (`fbgemmOptimizedGConv`:
//! 2-d/3-d, 2, 4, 8 or 16 channels per group in and out, 3x3(x3), padding 1) sums exactly on
//! AVX512-VNNI CPUs (`vpdpbusd`), as PyTorch measures there; only its AVX2 / plain AVX-512 code
//! pairs products through `vpmaddubsw`, which tsrun does not reproduce.

use super::exact_float::{self, ConvOperands, Geometry};
use super::fbgemm_depthwise;
use super::int8_depthwise;
use super::int8_gemm::{onednn_conv_scales, requantize_column, Requantizer};
use super::int8_sums;
use super::layout;
use super::linear::{channel_scales, Requant};
use super::qnnpack::QnnpackRequant;
use super::torchbind::{packed_arg, ConvParams};
use super::{arg_qtensor, int_values, per_tensor_params, tensor_result};
use crate::ops::kernels::{
    check_rank, invalid_argument, rank_mismatch, size_mismatch, wrong_dtype,
};
use crate::ops::linalg::permute;
use crate::ops::{Args, QuantizedEngine, Registry};
use crate::tensor::RankRequirement;
use crate::tensor::{DType, Quantizer, Tensor};
use crate::values::types::Type;
use crate::values::{IValue, List, Tuple};
use crate::Result;

pub fn register(r: &mut Registry) {
    r.add("quantized::conv1d_prepack", |a| prepack(a, 1, false));
    r.add("quantized::conv2d_prepack", |a| prepack(a, 2, false));
    r.add("quantized::conv3d_prepack", |a| prepack(a, 3, false));
    r.add("quantized::conv_transpose1d_prepack", |a| {
        prepack(a, 1, true)
    });
    r.add("quantized::conv_transpose2d_prepack", |a| {
        prepack(a, 2, true)
    });
    r.add("quantized::conv_transpose3d_prepack", |a| {
        prepack(a, 3, true)
    });
    r.add_all(
        &[
            "quantized::conv2d_unpack",
            "quantized::conv3d_unpack",
            "quantized::conv_unpack",
            "quantized::conv_transpose2d_unpack",
            "quantized::conv_transpose3d_unpack",
        ],
        |a| unpack(a, false),
    );
    r.add_all(
        &[
            "quantized::conv1d_unpack",
            "quantized::conv_transpose1d_unpack",
        ],
        |a| unpack(a, true),
    );
    for prefix in ["conv2d", "conv3d", "conv_transpose2d", "conv_transpose3d"] {
        r.add(&format!("quantized::{prefix}_stride"), |a| {
            accessor(a, |p| int_list(&p.stride))
        });
        r.add(&format!("quantized::{prefix}_padding"), |a| {
            accessor(a, |p| int_list(&p.padding))
        });
        r.add(&format!("quantized::{prefix}_dilation"), |a| {
            accessor(a, |p| int_list(&p.dilation))
        });
        r.add(&format!("quantized::{prefix}_output_padding"), |a| {
            accessor(a, |p| int_list(&p.output_padding))
        });
        r.add(&format!("quantized::{prefix}_groups"), |a| {
            accessor(a, |p| IValue::Int(p.groups))
        });
        r.add(&format!("quantized::{prefix}_transpose"), |a| {
            accessor(a, |p| IValue::Int(i64::from(p.transpose)))
        });
    }
    r.add("quantized::conv1d", |a| conv_packed(a, 1, false));
    r.add("quantized::conv1d_relu", |a| conv_packed(a, 1, true));
    r.add("quantized::conv2d.new", |a| conv_packed(a, 2, false));
    r.add("quantized::conv2d_relu.new", |a| conv_packed(a, 2, true));
    r.add("quantized::conv3d.new", |a| conv_packed(a, 3, false));
    r.add("quantized::conv3d_relu.new", |a| conv_packed(a, 3, true));
    r.add("quantized::conv2d", |a| conv_legacy(a, false));
    r.add("quantized::conv2d_relu", |a| conv_legacy(a, true));
    r.add("quantized::conv3d", |a| conv_legacy(a, false));
    r.add("quantized::conv3d_relu", |a| conv_legacy(a, true));
    r.add("quantized::conv2d_unpack_sizes", conv2d_unpack_sizes);
    // `conv_prepack` is conv2d_prepack's older name (4-d weights only)
    r.add("quantized::conv_prepack", |a| prepack(a, 2, false));
    // the `_quantized` namespace registers the same fbgemm kernels under the same schemas
    r.add("_quantized::conv2d_prepack", |a| prepack(a, 2, false));
    r.add("_quantized::conv3d_prepack", |a| prepack(a, 3, false));
    r.add("_quantized::conv_transpose1d_prepack", |a| {
        prepack(a, 1, true)
    });
    r.add("_quantized::conv_transpose2d_prepack", |a| {
        prepack(a, 2, true)
    });
    r.add("_quantized::conv_transpose3d_prepack", |a| {
        prepack(a, 3, true)
    });
    r.add("_quantized::conv2d", |a| conv_packed(a, 2, false));
    r.add("_quantized::conv2d_relu", |a| conv_packed(a, 2, true));
    r.add("_quantized::conv_transpose1d", |a| conv_packed(a, 1, false));
    r.add("_quantized::conv_transpose2d", |a| conv_packed(a, 2, false));
    r.add("quantized::conv_transpose1d", |a| conv_packed(a, 1, false));
    r.add("quantized::conv_transpose2d", |a| conv_packed(a, 2, false));
    r.add("quantized::conv_transpose3d", |a| conv_packed(a, 3, false));
    r.add_all(
        &[
            "quantized::conv1d_dynamic",
            "quantized::conv_transpose1d_dynamic",
        ],
        |a| conv_dynamic(a, 1),
    );
    r.add_all(
        &[
            "quantized::conv2d_dynamic",
            "quantized::conv_transpose2d_dynamic",
        ],
        |a| conv_dynamic(a, 2),
    );
    r.add_all(
        &[
            "quantized::conv3d_dynamic",
            "quantized::conv_transpose3d_dynamic",
        ],
        |a| conv_dynamic(a, 3),
    );
}

/// `quantized::conv*_dynamic(input, packed, reduce_range)` (fbgemm's
/// `PackedConvWeight::apply_dynamic`): the float input quantized to quint8 with
/// `ChooseQuantizationParams` of its min and max, the quantized convolution requantized into
/// those same parameters, dequantized.
fn conv_dynamic(a: &mut Args<'_>, spatial: usize) -> Result<IValue> {
    let x = a.tensor(0)?;
    if !x.dtype().is_floating_point() {
        return Err(wrong_dtype(a.op, "input", "floating-point", x.dtype()));
    }
    let p = ConvParams::from_object(&packed_arg(a, 1)?)?;
    let (lo, hi) = super::linear::min_max(&x.to_vec::<f32>()?);
    let (scale, zp) = super::linear::choose_qparams(lo, hi, 0, 255, a.bool(2)?);
    let q = super::tensors::quantize_tensor(&x, scale, zp as i64, DType::QUInt8)?;
    let engine = a.ctx.quantized_engine;
    let out = run_conv(a.op, &q, &p, spatial, scale, zp as i64, false, engine)?;
    tensor_result(super::tensors::dequantize_tensor(&out)?)
}

/// The packed-parameter accessors (`quantized::conv2d_stride`, ...): what `f` reads of the
/// packed object. A 1-d convolution is packed as 2-d of unit height, so its lists have two
/// values, as PyTorch's.
fn accessor(a: &mut Args<'_>, f: impl Fn(&ConvParams) -> IValue) -> Result<IValue> {
    Ok(f(&ConvParams::from_object(&packed_arg(a, 0)?)?))
}

/// `conv2d_unpack_sizes(packed)`: `(weight sizes, bias sizes or None, stride, padding,
/// dilation, groups)` of 2-d packed convolution parameters (conv1d ones are 2-d of unit
/// height), as `conv2d_unpack` and the accessors give them.
fn conv2d_unpack_sizes(a: &mut Args<'_>) -> Result<IValue> {
    let obj = packed_arg(a, 0)?;
    if &**obj.class_name() != super::torchbind::CONV2D_CLASS {
        return Err(invalid_argument(
            a.op,
            "packed weight",
            format!("must be a {}", super::torchbind::CONV2D_CLASS),
            obj.class_name(),
        ));
    }
    let p = ConvParams::from_object(&obj)?;
    let sizes = |t: &Tensor| int_list(&t.shape().iter().map(|&d| d as i64).collect::<Vec<_>>());
    Ok(IValue::Tuple(Tuple::new(vec![
        sizes(&p.weight),
        p.bias.as_ref().map_or(IValue::None, sizes),
        int_list(&p.stride),
        int_list(&p.padding),
        int_list(&p.dilation),
        IValue::Int(p.groups),
    ])))
}

fn int_list(v: &[i64]) -> IValue {
    IValue::List(List::new(
        Type::Int,
        v.iter().map(|&x| IValue::Int(x)).collect(),
    ))
}

fn prepack(a: &mut Args<'_>, spatial: usize, transpose: bool) -> Result<IValue> {
    let mut weight = arg_qtensor(a, 0)?;
    if weight.dtype() != DType::QInt8 {
        return Err(wrong_dtype(a.op, "weight", "qint8", weight.dtype()));
    }
    check_rank(
        a.op,
        "weight",
        RankRequirement::Exactly(spatial + 2),
        weight.shape(),
    )?;
    let bias = a.opt_tensor(1)?;
    let list = |i: usize| a.int_list(i);
    let (stride, padding, output_padding, dilation, groups) = if transpose {
        (list(2)?, list(3)?, list(4)?, list(5)?, a.int(6)?)
    } else {
        (list(2)?, list(3)?, vec![0; spatial], list(4)?, a.int(5)?)
    };
    for (name, v) in [
        ("stride", &stride),
        ("padding", &padding),
        ("dilation", &dilation),
        ("output_padding", &output_padding),
    ] {
        if v.len() != spatial {
            return Err(size_mismatch(
                a.op,
                format!("the length of {name}"),
                spatial as i64,
                v.len() as i64,
            ));
        }
    }
    // conv1d packs as a 2-d convolution of unit height
    let (stride, padding, dilation, output_padding) = if spatial == 1 {
        let shape = weight.shape().to_vec();
        let strides = weight.strides().to_vec();
        weight = weight.as_strided(
            &[shape[0], shape[1], 1, shape[2]],
            &[strides[0], strides[1], strides[2], strides[2]],
            weight.storage_offset(),
        )?;
        (
            vec![1, stride[0]],
            vec![0, padding[0]],
            vec![1, dilation[0]],
            vec![0, output_padding[0]],
        )
    } else {
        (stride, padding, dilation, output_padding)
    };
    let p = ConvParams {
        stride,
        padding,
        dilation,
        output_padding,
        groups,
        transpose,
        weight: super::with_f32_scales(&weight)?,
        bias,
    };
    Ok(IValue::Object(p.to_object()?))
}

/// The weight and bias; `squeeze`: the 1-d overloads drop the unit height a 1-d convolution
/// is packed with (`conv1d_unpack` gives `[out, in/groups, k]`).
fn unpack(a: &mut Args<'_>, squeeze: bool) -> Result<IValue> {
    let p = ConvParams::from_object(&packed_arg(a, 0)?)?;
    let w = p.weight;
    let w = if squeeze && w.dim() == 4 && w.shape()[2] == 1 {
        let (shape, strides) = (w.shape().to_vec(), w.strides().to_vec());
        w.as_strided(
            &[shape[0], shape[1], shape[3]],
            &[strides[0], strides[1], strides[3]],
            w.storage_offset(),
        )?
    } else {
        w
    };
    Ok(IValue::Tuple(Tuple::new(vec![
        IValue::Tensor(w),
        p.bias.map(IValue::Tensor).unwrap_or(IValue::None),
    ])))
}

fn conv_packed(a: &mut Args<'_>, spatial: usize, relu: bool) -> Result<IValue> {
    let x = arg_qtensor(a, 0)?;
    let p = ConvParams::from_object(&packed_arg(a, 1)?)?;
    let engine = a.ctx.quantized_engine;
    let out = run_conv(a.op, &x, &p, spatial, a.double(2)?, a.int(3)?, relu, engine)?;
    tensor_result(out)
}

/// The pre-`.new` overloads: convolution parameters given again next to the packed weights.
fn conv_legacy(a: &mut Args<'_>, relu: bool) -> Result<IValue> {
    let x = arg_qtensor(a, 0)?;
    let mut p = ConvParams::from_object(&packed_arg(a, 1)?)?;
    p.stride = a.int_list(2)?;
    p.padding = a.int_list(3)?;
    p.dilation = a.int_list(4)?;
    p.groups = a.int(5)?;
    let spatial = p.weight.dim().saturating_sub(2);
    tensor_result(run_conv(
        a.op,
        &x,
        &p,
        spatial,
        a.double(6)?,
        a.int(7)?,
        relu,
        a.ctx.quantized_engine,
    )?)
}

/// `[a, b, c]` padded in front with `fill` to three spatial dims.
fn three(v: &[i64], fill: i64) -> [i64; 3] {
    let mut out = [fill; 3];
    let off = 3 - v.len().min(3);
    for (i, &x) in v.iter().take(3).enumerate() {
        out[off + i] = x;
    }
    out
}

#[allow(clippy::too_many_arguments)]
fn run_conv(
    op: &str,
    x: &Tensor,
    p: &ConvParams,
    spatial: usize,
    out_scale: f64,
    out_zp: i64,
    relu: bool,
    engine: QuantizedEngine,
) -> Result<Tensor> {
    if x.dtype() != DType::QUInt8 {
        return Err(wrong_dtype(op, "input", "quint8", x.dtype()));
    }
    // conv1d runs as 2-d over [N, C, 1, L]
    let packed_spatial = p.weight.dim().saturating_sub(2);
    check_rank(
        op,
        "input",
        RankRequirement::Exactly(spatial + 2),
        x.shape(),
    )?;
    if !(1..=3).contains(&packed_spatial) {
        return Err(rank_mismatch(
            op,
            "packed weight",
            RankRequirement::OneOf(vec![3, 4, 5]),
            p.weight.shape(),
        ));
    }
    let mut xs: Vec<usize> = x.shape().to_vec();
    if spatial == 1 && packed_spatial == 2 {
        xs.insert(2, 1);
    }
    if xs.len() != packed_spatial + 2 {
        return Err(rank_mismatch(
            op,
            "packed weight",
            RankRequirement::Exactly(xs.len()),
            p.weight.shape(),
        ));
    }
    let (x_scale, x_zp) = per_tensor_params(op, x)?;
    let ws = p.weight.shape().to_vec();
    let g = usize::try_from(p.groups)
        .ok()
        .filter(|&g| g > 0)
        .ok_or_else(|| invalid_argument(op, "groups", "must be positive", p.groups))?;
    let (n, c) = (xs[0], xs[1]);
    let in_sp = three(&xs[2..].iter().map(|&d| d as i64).collect::<Vec<_>>(), 1);
    let k_sp = three(&ws[2..].iter().map(|&d| d as i64).collect::<Vec<_>>(), 1);
    let stride = three(&p.stride, 1);
    let pad = three(&p.padding, 0);
    let dil = three(&p.dilation, 1);
    let opad = three(&p.output_padding, 0);
    let (m, c_per_g) = if p.transpose {
        (ws[1] * g, ws[0] / g)
    } else {
        (ws[0], ws[1])
    };
    if c != c_per_g * g || (p.transpose && ws[0] != c) {
        let expected = if p.transpose { ws[0] } else { c_per_g * g };
        return Err(size_mismatch(
            op,
            format!("input.size(1) (the channels of weight {ws:?})"),
            expected as i64,
            c as i64,
        ));
    }
    let m_per_g = m / g;
    let mut out_sp = [0i64; 3];
    for d in 0..3 {
        out_sp[d] = if p.transpose {
            (in_sp[d] - 1) * stride[d] - 2 * pad[d] + dil[d] * (k_sp[d] - 1) + opad[d] + 1
        } else {
            (in_sp[d] + 2 * pad[d] - dil[d] * (k_sp[d] - 1) - 1).div_euclid(stride[d].max(1)) + 1
        };
        if stride[d] <= 0 || dil[d] <= 0 {
            return Err(invalid_argument(
                op,
                "stride and dilation",
                "must be positive",
                format!("{:?} and {:?}", p.stride, p.dilation),
            ));
        }
        if out_sp[d] <= 0 {
            return Err(invalid_argument(
                op,
                "output size",
                "must be positive",
                format!("{:?}", &out_sp[..=d]),
            ));
        }
    }
    // per output channel weight scale and zero point
    let (w_scales, w_zps, per_channel): (Vec<f32>, Vec<i32>, bool) =
        match p.weight.quantizer().map(|q| &**q) {
            Some(Quantizer::PerTensorAffine { scale, zero_point }) => {
                (vec![*scale as f32; m], vec![*zero_point as i32; m], false)
            }
            Some(Quantizer::PerChannelAffine {
                scales,
                zero_points,
                axis: 0,
            }) if !p.transpose => (
                scales.iter().map(|&s| s as f32).collect(),
                zero_points.iter().map(|&z| z as i32).collect(),
                true,
            ),
            _ => {
                return Err(invalid_argument(
                    op,
                    "the weight's qscheme",
                    "must be per-tensor or per-channel along axis 0",
                    "another quantization",
                ))
            }
        };
    let bias = match &p.bias {
        Some(b) => Some(b.to_vec::<f32>()?),
        None => None,
    };
    // PyTorch's x86 engine packs this convolution for oneDNN (`should_use_onednn_quant`):
    // symmetric weights, at most 100 groups, no output padding
    let onednn = engine.onednn_convolutions()
        && w_zps.iter().all(|&z| z == 0)
        && g <= 100
        && opad.iter().all(|&o| o == 0);
    let rq = Requant::new(x_scale, &w_scales, per_channel, out_scale, out_zp, relu);
    let qnnpack = engine.qnnpack().then(|| {
        let scales = channel_scales(&p.weight, m);
        QnnpackRequant::new(x_scale, &scales, bias.as_deref(), out_scale, out_zp, relu)
    });
    let xzp = x_zp as i32;
    let [id, ih, iw] = in_sp.map(|v| v as usize);
    let [kd, kh, kw] = k_sp.map(|v| v as usize);
    let [od, oh, ow] = out_sp.map(|v| v as usize);
    let in_plane = id * ih * iw;
    let k_vol = kd * kh * kw;
    let out_plane = od * oh * ow;
    let geo = Geometry {
        input_shape: &xs,
        stride,
        pad,
        dilation: dil,
        groups: g,
    };
    let operands = ConvOperands {
        op,
        x,
        x_zp: xzp,
        weight: &p.weight,
        w_zps: &w_zps,
        geo: &geo,
        out_spatial: [od, oh, ow],
    };
    // fbgemm's arithmetic on a convolution its depthwise fast path takes: pairs of products
    // saturate to int16
    let fbgemm_pairs = !onednn
        && qnnpack.is_none()
        && !p.transpose
        && fbgemm_depthwise::takes_fast_path(&ws, &geo);
    // the VNNI kernel requantizes in its epilogue (fbgemm's or oneDNN's arithmetic),
    // straight into the channels-last output
    let (onednn_x_scale, onednn_inv_out_scale) = onednn_conv_scales(x_scale, out_scale);
    let requant = |first: usize, count: usize| {
        if onednn {
            let range = first..first + count;
            Requantizer::Onednn {
                x_scale: onednn_x_scale,
                w_scale: w_scales[range.clone()].to_vec(),
                bias: range
                    .map(|j| bias.as_ref().and_then(|b| b.get(j).copied()).unwrap_or(0.0))
                    .collect(),
                inv_out_scale: onednn_inv_out_scale,
                zero_point: out_zp as f32,
                relu,
            }
        } else {
            rq.columns(bias.as_deref(), first, count)
        }
    };
    // one output channel's plane of sums to bytes: QNNPACK's requantization or the columns'
    let columns = qnnpack.is_none().then(|| requant(0, m));
    let finish = |oc: usize, plane: &[i32], dst: &mut [u8]| match (&qnnpack, &columns) {
        (Some(q), _) => {
            for (d, &raw) in dst.iter_mut().zip(plane) {
                *d = q.apply(raw, oc) as u8;
            }
        }
        (None, Some(columns)) => requantize_column(columns, oc, plane, dst),
        (None, None) => {}
    };
    // an integer route's uint8 output (`[n, plane, m]` when `pixels`, else `[n, m, plane]`)
    // as the quantized result
    let emit = |out: Vec<u8>, pixels: bool| -> Result<Tensor> {
        if out.len() != n * m * out_plane {
            return Err(size_mismatch(
                op,
                "the convolution's output elements",
                (n * m * out_plane) as i64,
                out.len() as i64,
            ));
        }
        let out = if pixels {
            out
        } else {
            layout::planes_to_pixels(&out, n, m, out_plane)
        };
        quantized_output(
            out,
            n,
            m,
            spatial,
            packed_spatial,
            [od, oh, ow],
            out_scale,
            out_zp,
        )
    };
    if !p.transpose {
        if let Some(out) = int8_depthwise::conv_quantized(&operands, fbgemm_pairs, &finish) {
            return emit(out?, false);
        }
    }
    // (the GEMM kernel sums exactly; it never serves a depthwise convolution)
    if !p.transpose && qnnpack.is_none() && !fbgemm_pairs {
        if let Some(out) = int8_sums::conv_quantized(&operands, &requant) {
            return emit(out?, true);
        }
    }
    let fast = if p.transpose {
        None
    } else {
        exact_float::conv_sums(&operands)
    };
    let mut acc = vec![0i32; n * m * out_plane];
    if let Some(sums) = fast {
        let sums = sums?;
        if sums.len() != acc.len() {
            return Err(size_mismatch(
                op,
                "the convolution's output elements",
                acc.len() as i64,
                sums.len() as i64,
            ));
        }
        acc = sums;
    } else {
        let xv = int_values(x)?;
        let wv = int_values(&p.weight)?;
        for b in 0..n {
            for gi in 0..g {
                for ml in 0..m_per_g {
                    let oc = gi * m_per_g + ml;
                    let wzp = w_zps[oc];
                    let out_base = (b * m + oc) * out_plane;
                    for cl in 0..c_per_g {
                        let ic = gi * c_per_g + cl;
                        let x_base = (b * c + ic) * in_plane;
                        // weight index of (oc, cl) or, transposed, (ic, ml)
                        let w_base = if p.transpose {
                            (ic * m_per_g + ml) * k_vol
                        } else {
                            (oc * c_per_g + cl) * k_vol
                        };
                        for a_d in 0..kd {
                            for a_h in 0..kh {
                                for a_w in 0..kw {
                                    let wq = wv[w_base + (a_d * kh + a_h) * kw + a_w] - wzp;
                                    if wq == 0 {
                                        continue;
                                    }
                                    // a transposed convolution scatters each input to
                                    // its outputs, a forward one gathers
                                    let tap = if p.transpose { scatter } else { gather };
                                    tap(
                                        &xv[x_base..x_base + in_plane],
                                        xzp,
                                        wq,
                                        [a_d, a_h, a_w],
                                        [id, ih, iw],
                                        [od, oh, ow],
                                        stride,
                                        pad,
                                        dil,
                                        &mut acc[out_base..out_base + out_plane],
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    if fbgemm_pairs {
        fbgemm_depthwise::add_int16_saturation(&operands, &mut acc)?;
    }
    // one output channel's plane at a time: its bias and scale read once, the uint8 written
    // directly (every requantized value lies in 0..=255)
    let mut out: Vec<u8> = vec![0; acc.len()];
    for (i, (plane, dst)) in acc
        .chunks(out_plane.max(1))
        .zip(out.chunks_mut(out_plane.max(1)))
        .enumerate()
    {
        finish(i % m, plane, dst);
    }
    emit(out, false)
}

/// The quint8 output `[n, m, *out]` (a conv1d's as `[n, m, ow]`) of requantized values
/// `out` (`[n, *out, m]`), channels-last as PyTorch's convolutions leave it: a conv1d's is
/// the `[n, m, ow]` squeeze of its `[n, m, 1, ow]` output, strides `(ow * m, 1, m)`.
#[allow(clippy::too_many_arguments)]
fn quantized_output(
    out: Vec<u8>,
    n: usize,
    m: usize,
    spatial: usize,
    packed_spatial: usize,
    [od, oh, ow]: [usize; 3],
    out_scale: f64,
    out_zp: i64,
) -> Result<Tensor> {
    let mut shape = vec![n, m];
    if spatial == 1 && packed_spatial == 2 {
        shape.push(ow);
    } else {
        shape.extend([od, oh, ow].iter().skip(3 - packed_spatial));
    }
    // the pixels' shape `[n, *out, m]`, viewed back as `[n, m, *out]`
    let mut pixel_shape = vec![n];
    pixel_shape.extend(&shape[2..]);
    pixel_shape.push(m);
    let ints = Tensor::from_vec(out, &pixel_shape)?;
    let q = Tensor::quantized_from_ints(
        &ints,
        Quantizer::PerTensorAffine {
            scale: out_scale,
            zero_point: out_zp,
        },
    )?;
    let back: Vec<usize> = std::iter::once(0)
        .chain(std::iter::once(shape.len() - 1))
        .chain(1..shape.len() - 1)
        .collect();
    permute(&q, &back)
}

/// Add `wq * (x - x_zp)` of kernel tap `k` to every output position (direct convolution).
#[allow(clippy::too_many_arguments)]
fn gather(
    x: &[i32],
    xzp: i32,
    wq: i32,
    k: [usize; 3],
    i_sz: [usize; 3],
    o_sz: [usize; 3],
    stride: [i64; 3],
    pad: [i64; 3],
    dil: [i64; 3],
    out: &mut [i32],
) {
    for o0 in 0..o_sz[0] {
        let i0 = o0 as i64 * stride[0] - pad[0] + k[0] as i64 * dil[0];
        if i0 < 0 || i0 >= i_sz[0] as i64 {
            continue;
        }
        for o1 in 0..o_sz[1] {
            let i1 = o1 as i64 * stride[1] - pad[1] + k[1] as i64 * dil[1];
            if i1 < 0 || i1 >= i_sz[1] as i64 {
                continue;
            }
            let xrow = (i0 as usize * i_sz[1] + i1 as usize) * i_sz[2];
            let orow = (o0 * o_sz[1] + o1) * o_sz[2];
            for o2 in 0..o_sz[2] {
                let i2 = o2 as i64 * stride[2] - pad[2] + k[2] as i64 * dil[2];
                if i2 < 0 || i2 >= i_sz[2] as i64 {
                    continue;
                }
                let xq = x[xrow + i2 as usize] - xzp;
                out[orow + o2] = out[orow + o2].wrapping_add(xq * wq);
            }
        }
    }
}

/// Transposed convolution: input position `i` feeds output `i * stride - pad + k * dil`.
#[allow(clippy::too_many_arguments)]
fn scatter(
    x: &[i32],
    xzp: i32,
    wq: i32,
    k: [usize; 3],
    i_sz: [usize; 3],
    o_sz: [usize; 3],
    stride: [i64; 3],
    pad: [i64; 3],
    dil: [i64; 3],
    out: &mut [i32],
) {
    for i0 in 0..i_sz[0] {
        let o0 = i0 as i64 * stride[0] - pad[0] + k[0] as i64 * dil[0];
        if o0 < 0 || o0 >= o_sz[0] as i64 {
            continue;
        }
        for i1 in 0..i_sz[1] {
            let o1 = i1 as i64 * stride[1] - pad[1] + k[1] as i64 * dil[1];
            if o1 < 0 || o1 >= o_sz[1] as i64 {
                continue;
            }
            for i2 in 0..i_sz[2] {
                let o2 = i2 as i64 * stride[2] - pad[2] + k[2] as i64 * dil[2];
                if o2 < 0 || o2 >= o_sz[2] as i64 {
                    continue;
                }
                let xq = x[(i0 * i_sz[1] + i1) * i_sz[2] + i2] - xzp;
                let oi = (o0 as usize * o_sz[1] + o1 as usize) * o_sz[2] + o2 as usize;
                out[oi] = out[oi].wrapping_add(xq * wq);
            }
        }
    }
}
