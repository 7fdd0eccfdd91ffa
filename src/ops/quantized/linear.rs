//! `quantized::linear*`: static (quint8 activations x qint8 weights -> quint8, requantized as
//! fbgemm's `ReQuantizeOutput`), dynamic (float input quantized on the fly with ATen's
//! `ChooseQuantizationParams`, float output as fbgemm's AVX512 `ReQuantizeForFloat`:
//! `fma(raw, act_scale * w_scale, bias)`) and the fp16
//! weight variant; prepack / unpack; `_saturate_weight_to_fp16` and the plain int8 GEMM
//! `_int_mm`.

use super::qnnpack::QnnpackRequant;
use super::torchbind::{packed_arg, LinearParams};
use super::{arg_qtensor, int_values, per_tensor_params, per_tensor_quantized, tensor_result};
use crate::ops::kernels::{
    check_rank, check_size, invalid_argument, rank_mismatch, shape_mismatch, wrong_dtype,
};
use crate::ops::{Args, QuantizedEngine, Registry};
use crate::tensor::{DType, Quantizer, RankRequirement, Tensor, TensorError};
use crate::values::{IValue, Tuple};
use crate::Result;

pub fn register(r: &mut Registry) {
    r.add("quantized::linear_prepack", linear_prepack);
    r.add("quantized::linear_prepack_fp16", linear_prepack_fp16);
    r.add_all(
        &["quantized::linear_unpack", "quantized::linear_unpack_fp16"],
        linear_unpack,
    );
    r.add("quantized::linear", |a| linear_static(a, false));
    r.add("quantized::linear_relu", |a| linear_static(a, true));
    r.add("quantized::linear_dynamic", |a| linear_dynamic(a, false));
    r.add("quantized::linear_relu_dynamic", |a| {
        linear_dynamic(a, true)
    });
    r.add("quantized::linear_dynamic_fp16", |a| {
        linear_dynamic_fp16(a, false)
    });
    r.add("quantized::linear_relu_dynamic_fp16", |a| {
        linear_dynamic_fp16(a, true)
    });
    r.add(
        "quantized::linear_with_input_q_dq_qweight_dq_output_fp32",
        linear_input_qdq::<false>,
    );
    r.add(
        "quantized::linear_with_input_q_dq_qweight_dq_relu_output_fp32",
        linear_input_qdq::<true>,
    );
    r.add(
        "quantized::linear_dynamic_fp16_unpacked_weight",
        linear_dynamic_fp16_unpacked_weight,
    );
    // the `_quantized` namespace registers the same fbgemm kernels under the same schemas
    r.add("_quantized::linear_prepack", linear_prepack);
    r.add("_quantized::linear_prepack_fp16", linear_prepack_fp16);
    r.add("_quantized::linear", |a| linear_static(a, false));
    r.add("_quantized::linear_dynamic", |a| linear_dynamic(a, false));
    r.add("aten::_weight_int8pack_mm", weight_int8pack_mm);
    r.add(
        "aten::fbgemm_linear_quantize_weight",
        fbgemm_linear_quantize_weight,
    );
    r.add(
        "_quantized::wrapped_quantized_linear",
        wrapped_quantized_linear,
    );
    r.add("aten::_saturate_weight_to_fp16", saturate_weight_to_fp16);
    r.add("aten::_int_mm", int_mm);
}

/// `Ok` when `w` (`op`'s `argument`) is a 2-d float32 tensor.
fn float32_matrix(op: &str, argument: &str, w: &Tensor) -> Result<()> {
    if w.dtype() != DType::Float32 {
        return Err(wrong_dtype(op, argument, "float32", w.dtype()));
    }
    check_rank(op, argument, RankRequirement::Exactly(2), w.shape())
}

/// The refusal of fp16 packed weights by the int8 linears.
fn fp16_weights_refused(op: &str) -> crate::Error {
    invalid_argument(
        op,
        "packed weight",
        "must hold qint8 weights (fp16 ones run in linear_dynamic_fp16)",
        "fp16 weights",
    )
}

fn linear_prepack(a: &mut Args<'_>) -> Result<IValue> {
    let w = arg_qtensor(a, 0)?;
    if w.dtype() != DType::QInt8 {
        return Err(wrong_dtype(a.op, "weight", "qint8", w.dtype()));
    }
    check_rank(a.op, "weight", RankRequirement::Exactly(2), w.shape())?;
    let p = LinearParams {
        weight: super::with_f32_scales(&w)?,
        bias: a.opt_tensor(1)?,
    };
    Ok(IValue::Object(p.to_object()))
}

fn linear_prepack_fp16(a: &mut Args<'_>) -> Result<IValue> {
    let w = a.tensor(0)?;
    float32_matrix(a.op, "weight", &w)?;
    // fbgemm keeps the weights as half: unpack gives them back rounded (archives PyTorch
    // saved hold them so already, and keep their tensor)
    let halves = round_to_half(&w.to_vec::<f32>()?);
    let weight = if halves
        .iter()
        .zip(w.to_vec::<f32>()?)
        .all(|(a, b)| a.to_bits() == b.to_bits())
    {
        w
    } else {
        Tensor::from_vec(halves, w.shape())?
    };
    let p = LinearParams {
        weight,
        bias: a.opt_tensor(1)?,
    };
    Ok(IValue::Object(p.to_object()))
}

/// The largest finite half: fp16 weights are clamped to +-this (`HandleWeightsSaturation`).
pub(crate) const HALF_MAX: f32 = 65504.0;

/// `_saturate_weight_to_fp16(weight)`: ATen clamps the first `size(0) * size(1)` values of
/// `weight.contiguous()` to the half range in place and returns `weight`, so a contiguous
/// weight is changed in place and a non-contiguous one comes back unchanged.
fn saturate_weight_to_fp16(a: &mut Args<'_>) -> Result<IValue> {
    let w = a.tensor(0)?;
    if w.dtype() != DType::Float32 {
        return Err(wrong_dtype(a.op, "weight", "float32", w.dtype()));
    }
    check_rank(a.op, "weight", RankRequirement::AtLeast(2), w.shape())?;
    if w.is_contiguous() {
        let n = w.shape()[0] * w.shape()[1];
        let mut v = w.to_vec::<f32>()?;
        for x in v.iter_mut().take(n) {
            *x = x.clamp(-HALF_MAX, HALF_MAX);
        }
        w.copy_from(&Tensor::from_vec(v, w.shape())?)?;
    }
    Ok(IValue::Tensor(w))
}

/// `_int_mm(self, mat2)`: int8 (or uint8) `[m, k]` times int8 `[k, n]`, exact int32 sums.
fn int_mm(a: &mut Args<'_>) -> Result<IValue> {
    let (x, w) = (a.tensor(0)?, a.tensor(1)?);
    check_rank(a.op, "self", RankRequirement::Exactly(2), x.shape())?;
    check_rank(a.op, "mat2", RankRequirement::Exactly(2), w.shape())?;
    if !matches!(x.dtype(), DType::Int8 | DType::UInt8) {
        return Err(wrong_dtype(a.op, "self", "int8 or uint8", x.dtype()));
    }
    if w.dtype() != DType::Int8 {
        return Err(wrong_dtype(a.op, "mat2", "int8", w.dtype()));
    }
    let (m, k, n) = (x.shape()[0], x.shape()[1], w.shape()[1]);
    if w.shape()[0] != k {
        return Err(TensorError::MatmulShapes {
            op: a.op.to_string(),
            mat1: [m, k],
            mat2: [w.shape()[0], n],
        }
        .into());
    }
    let xv = x.to_vec::<i32>()?;
    let wv = w.to_vec::<i32>()?;
    let mut out = vec![0i32; m * n];
    for (row, dst) in xv.chunks(k.max(1)).zip(out.chunks_mut(n.max(1))) {
        for (p, &xp) in row.iter().enumerate() {
            for (d, &wp) in dst.iter_mut().zip(&wv[p * n..(p + 1) * n]) {
                *d = d.wrapping_add(xp * wp);
            }
        }
    }
    Ok(IValue::Tensor(Tensor::from_vec(out, &[m, n])?))
}

/// fbgemm's `PackedGemmMatrixFP16` weights: each float saturated to the half range
/// (`HandleWeightsSaturation`, +-65504) and rounded to the nearest half, widened back.
fn round_to_half(v: &[f32]) -> Vec<f32> {
    v.iter()
        .map(|&x| half::f16::from_f32(x.clamp(-HALF_MAX, HALF_MAX)).to_f32())
        .collect()
}

fn linear_unpack(a: &mut Args<'_>) -> Result<IValue> {
    let p = LinearParams::from_object(&packed_arg(a, 0)?)?;
    Ok(IValue::Tuple(Tuple::new(vec![
        IValue::Tensor(p.weight),
        p.bias.map(IValue::Tensor).unwrap_or(IValue::None),
    ])))
}

/// Output channel `j`'s weight scale and zero point.
fn weight_params(w: &Tensor, n: usize) -> Result<(Vec<f32>, Vec<i32>, bool)> {
    match w.quantizer().map(|q| &**q) {
        Some(Quantizer::PerTensorAffine { scale, zero_point }) => {
            Ok((vec![*scale as f32; n], vec![*zero_point as i32; n], false))
        }
        Some(Quantizer::PerChannelAffine {
            scales,
            zero_points,
            axis: 0,
        }) => Ok((
            scales.iter().map(|&s| s as f32).collect(),
            zero_points.iter().map(|&z| z as i32).collect(),
            true,
        )),
        _ => Err(invalid_argument(
            "quantized linear",
            "the weight's qscheme",
            "must be per-tensor or per-channel along axis 0",
            "another quantization",
        )),
    }
}

/// The weight's scales as stored (double), one per output channel of `n`.
pub(crate) fn channel_scales(w: &Tensor, n: usize) -> Vec<f64> {
    match w.quantizer().map(|q| &**q) {
        Some(Quantizer::PerChannelAffine { scales, .. }) => scales.to_vec(),
        Some(Quantizer::PerTensorAffine { scale, .. }) => vec![*scale; n],
        _ => Vec::new(),
    }
}

/// fbgemm's requantization of int32 accumulators to quint8 (`requantizeOutputProcessingAvx2`
/// with a float bias).
pub(crate) struct Requant {
    act_times_w: Vec<f32>,
    multiplier: Vec<f32>,
    per_channel: bool,
    out_zp: i32,
    relu: bool,
}

impl Requant {
    pub(crate) fn new(
        act_scale: f64,
        w_scales: &[f32],
        per_channel: bool,
        out_scale: f64,
        out_zp: i64,
        relu: bool,
    ) -> Requant {
        let act = act_scale as f32;
        let out = out_scale as f32;
        let act_times_w: Vec<f32> = w_scales.iter().map(|&w| act * w).collect();
        let multiplier = act_times_w.iter().map(|&s| s / out).collect();
        Requant {
            act_times_w,
            multiplier,
            per_channel,
            out_zp: out_zp as i32,
            relu,
        }
    }

    /// The parameters of output channels `first .. first + count` for the int8 kernel's
    /// epilogue and [`Requantizer::apply_one`](super::int8_gemm::Requantizer) (a bias of
    /// `None` adds nothing, as adding 0.0 to an integer-valued float does).
    pub(super) fn columns(
        &self,
        bias: Option<&[f32]>,
        first: usize,
        count: usize,
    ) -> super::int8_gemm::Requantizer {
        let range = first..first + count;
        let bias_term = range
            .clone()
            .map(|j| match bias.and_then(|b| b.get(j)) {
                Some(&b) if self.per_channel => b / self.act_times_w[j],
                Some(&b) => b * ((1.0f64 / self.act_times_w[j] as f64) as f32),
                None => 0.0,
            })
            .collect();
        super::int8_gemm::Requantizer::Fbgemm {
            bias_term,
            multiplier: self.multiplier[range].to_vec(),
            zero_point: self.out_zp,
            floor: if self.relu {
                self.out_zp.clamp(0, 255)
            } else {
                0
            },
        }
    }
}

fn out_shape(x: &Tensor, n: usize) -> Vec<usize> {
    let mut s = x.shape().to_vec();
    if let Some(last) = s.last_mut() {
        *last = n;
    }
    s
}

fn dims(op: &str, x: &Tensor, w: &Tensor) -> Result<(usize, usize, usize)> {
    let k = *x
        .shape()
        .last()
        .ok_or_else(|| rank_mismatch(op, "input", RankRequirement::AtLeast(1), x.shape()))?;
    let (n, wk) = (w.shape()[0], w.shape()[1]);
    check_size(
        op,
        "input.size(-1) (the weight's in_features)",
        wk as i64,
        k as i64,
    )?;
    Ok((x.numel() / k.max(1), k, n))
}

fn linear_static(a: &mut Args<'_>, relu: bool) -> Result<IValue> {
    let x = arg_qtensor(a, 0)?;
    if x.dtype() != DType::QUInt8 {
        return Err(wrong_dtype(a.op, "input", "quint8", x.dtype()));
    }
    let p = LinearParams::from_object(&packed_arg(a, 1)?)?;
    if p.is_fp16() {
        return Err(fp16_weights_refused(a.op));
    }
    let (out_scale, out_zp) = (a.double(2)?, a.int(3)?);
    let (x_scale, x_zp) = per_tensor_params(a.op, &x)?;
    let (m, k, n) = dims(a.op, &x, &p.weight)?;
    let (w_scales, w_zps, per_channel) = weight_params(&p.weight, n)?;
    let xv = int_values(&x)?;
    let bias = match &p.bias {
        Some(b) => Some(b.to_vec::<f32>()?),
        None => None,
    };
    let rq = Requant::new(x_scale, &w_scales, per_channel, out_scale, out_zp, relu);
    let qnnpack = a.ctx.quantized_engine.qnnpack().then(|| {
        let scales = channel_scales(&p.weight, n);
        QnnpackRequant::new(x_scale, &scales, bias.as_deref(), out_scale, out_zp, relu)
    });
    let xzp = x_zp as i32;
    let requant = |first, count| rq.columns(bias.as_deref(), first, count);
    let vnni = match qnnpack {
        None => super::int8_sums::linear_quantized(a.op, &xv, m, xzp, &p.weight, &w_zps, &requant),
        Some(_) => None,
    };
    if let Some(out) = vnni {
        let ints = Tensor::from_vec(out?, &out_shape(&x, n))?;
        return tensor_result(Tensor::quantized_from_ints(
            &ints,
            Quantizer::PerTensorAffine {
                scale: out_scale,
                zero_point: out_zp,
            },
        )?);
    }
    let sums = integer_sums(a.op, &xv, m, k, n, xzp, &p.weight, &w_zps)?;
    let columns = rq.columns(bias.as_deref(), 0, n);
    let mut out = vec![0i32; m * n];
    for (i, row) in sums.chunks(n.max(1)).enumerate() {
        for (j, &raw) in row.iter().enumerate() {
            out[i * n + j] = match &qnnpack {
                Some(q) => q.apply(raw, j),
                None => columns.apply_one(j, raw).into(),
            };
        }
    }
    tensor_result(per_tensor_quantized(
        &out,
        &out_shape(&x, n),
        DType::QUInt8,
        out_scale,
        out_zp,
    )?)
}

/// The exact int32 sums `[m, n]` of `(x[i] - x_zp) . (w[j] - w_zp[j])`: through the float32
/// GEMM where that is exact (`exact_float`), else the direct loop (wrapping, as fbgemm's
/// int32 accumulators).
#[allow(clippy::too_many_arguments)]
fn integer_sums(
    op: &str,
    x: &[i32],
    m: usize,
    k: usize,
    n: usize,
    x_zp: i32,
    weight: &Tensor,
    w_zps: &[i32],
) -> Result<Vec<i32>> {
    let vnni = super::int8_sums::linear_sums(op, x, m, x_zp, weight, w_zps);
    if let Some(sums) =
        vnni.or_else(|| super::exact_float::linear_sums(op, x, m, x_zp, weight, w_zps))
    {
        let sums = sums?;
        if sums.len() == m * n {
            return Ok(sums);
        }
    }
    let wv = int_values(weight)?;
    let mut out = vec![0i32; m * n];
    for (row, dst) in x.chunks(k.max(1)).zip(out.chunks_mut(n.max(1))) {
        for (j, d) in dst.iter_mut().enumerate() {
            let wrow = wv.get(j * k..(j + 1) * k).unwrap_or(&[]);
            let wzp = w_zps.get(j).copied().unwrap_or(0);
            *d = row.iter().zip(wrow).fold(0i32, |acc, (&xq, &wq)| {
                acc.wrapping_add((xq - x_zp) * (wq - wzp))
            });
        }
    }
    Ok(out)
}

/// fbgemm's `FindMinMax`.
pub(crate) fn min_max(v: &[f32]) -> (f32, f32) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    v.iter()
        .fold((v[0], v[0]), |(lo, hi), &x| (lo.min(x), hi.max(x)))
}

/// ATen's `quant_utils::ChooseQuantizationParams` (no sparsity preservation, no power-of-two
/// scale): the scale (double, as `TensorQuantizationParams` holds it; fbgemm's kernels take it
/// as float) and the nudged zero point.
pub(crate) fn choose_qparams(
    min: f32,
    max: f32,
    qmin: i32,
    qmax: i32,
    reduce_range: bool,
) -> (f64, i32) {
    choose_qparams_sparsity(min, max, qmin, qmax, false, reduce_range)
}

/// [`choose_qparams`] with `preserve_sparsity` (symmetric quantization): a range straddling
/// zero is made symmetric and the zero point forced to the middle of `[qmin, qmax]`.
pub(crate) fn choose_qparams_sparsity(
    min: f32,
    max: f32,
    qmin: i32,
    qmax: i32,
    preserve_sparsity: bool,
    reduce_range: bool,
) -> (f64, i32) {
    let (qmin, qmax) = if reduce_range {
        (qmin / 2, qmax / 2)
    } else {
        (qmin, qmax)
    };
    let symmetric = min < 0.0 && max > 0.0 && preserve_sparsity;
    let (min, max) = if symmetric {
        let sym_qmin = -((qmax - qmin) / 2 + 1);
        let sym_qmax = (qmax - qmin) / 2;
        let max_scale = (min / sym_qmin as f32)
            .abs()
            .max((max / sym_qmax as f32).abs()) as f64;
        (
            (max_scale * sym_qmin as f64) as f32,
            (max_scale * sym_qmax as f64) as f32,
        )
    } else {
        (min, max)
    };
    let mut min = min.min(0.0);
    let mut max = max.max(0.0);
    let mut scale = (max as f64 - min as f64) / (qmax - qmin) as f64;
    if scale as f32 == 0.0 || (1.0f32 / scale as f32).is_infinite() {
        scale = 0.1;
    }
    if scale < SMALL_SCALE_THRESHOLD as f64 {
        stretch_to_small_scale(scale as f32, &mut min, &mut max, qmin, qmax);
        scale = SMALL_SCALE_THRESHOLD as f64;
    }
    let zp = nudged_zero_point(min, max, scale, i64::from(qmin), i64::from(qmax)) as i32;
    if min < 0.0 && max > 0.0 && preserve_sparsity {
        return (scale, (qmin + qmax) / 2);
    }
    (scale, zp)
}

/// The smallest scale ATen's and fbgemm's `ChooseQuantizationParams` let through (fp16's
/// smallest normal, rounded).
pub(crate) const SMALL_SCALE_THRESHOLD: f32 = 6.1e-5;

/// `ChooseQuantizationParams`' cut-off of a scale `org` below [`SMALL_SCALE_THRESHOLD`]: the
/// scale becomes the threshold and `[min, max]` (containing 0) is stretched to match.
pub(crate) fn stretch_to_small_scale(org: f32, min: &mut f32, max: &mut f32, qmin: i32, qmax: i32) {
    if *min == 0.0 {
        *max = SMALL_SCALE_THRESHOLD * (qmax - qmin) as f32;
    } else if *max == 0.0 {
        *min = -SMALL_SCALE_THRESHOLD * (qmax - qmin) as f32;
    } else {
        let amplifier = SMALL_SCALE_THRESHOLD / org;
        *min *= amplifier;
        *max *= amplifier;
    }
}

/// `ChooseQuantizationParams`' zero point for `[min, max]` (containing 0) at `scale`: from
/// whichever end loses less, clamped to `[qmin, qmax]`, rounded half to even.
fn nudged_zero_point(min: f32, max: f32, scale: f64, qmin: i64, qmax: i64) -> i64 {
    let zp_from_min = qmin as f64 - min as f64 / scale;
    let zp_from_max = qmax as f64 - max as f64 / scale;
    let err_min = (qmin as f64).abs() - (min as f64 / scale).abs();
    let err_max = (qmax as f64).abs() - (max as f64 / scale).abs();
    let initial = if err_min < err_max {
        zp_from_min
    } else {
        zp_from_max
    };
    if initial < qmin as f64 {
        qmin
    } else if initial > qmax as f64 {
        qmax
    } else {
        initial.round_ties_even() as i64
    }
}

/// fbgemm's legacy `Quantize` of one row as `PackAWithQuantRowOffset` runs it: AVX2 lanes of 8
/// with `round(fma(x, 1/scale, zp))`, the tail with `nearbyint(zp + x * (1/scale))`.
pub(crate) fn quantize_row_legacy(row: &[f32], scale: f32, zp: i32, out: &mut Vec<i32>) {
    let inv = 1.0f32 / scale;
    let zpf = zp as f32;
    let vec_len = row.len() / 8 * 8;
    for (i, &x) in row.iter().enumerate() {
        let t = if i < vec_len {
            x.mul_add(inv, zpf)
        } else {
            zpf + x * inv
        };
        out.push(t.round_ties_even().clamp(0.0, 255.0) as i32);
    }
}

fn linear_dynamic(a: &mut Args<'_>, relu: bool) -> Result<IValue> {
    let x = a.tensor(0)?;
    if x.dtype() != DType::Float32 {
        return Err(wrong_dtype(a.op, "input", "float32", x.dtype()));
    }
    let p = LinearParams::from_object(&packed_arg(a, 1)?)?;
    let reduce_range = a.bool(2)?;
    let (m, k, n) = dims(a.op, &x, &p.weight)?;
    let engine = a.ctx.quantized_engine;
    let out = dynamic_matmul(&x.to_vec::<f32>()?, m, k, n, &p, reduce_range, relu, engine)?;
    tensor_result(Tensor::from_vec(out, &out_shape(&x, n))?)
}

/// `quantized::linear_with_input_q_dq_qweight_dq_output_fp32` (and its relu form): fbgemm's
/// dynamic linear with the activation's quantization parameters given instead of chosen from
/// its range (a PT2E reference pattern's `quantize -> dequantize -> linear`), float output.
fn linear_input_qdq<const RELU: bool>(a: &mut Args<'_>) -> Result<IValue> {
    let x = a.tensor(0)?;
    if x.dtype() != DType::Float32 {
        return Err(wrong_dtype(a.op, "input", "float32", x.dtype()));
    }
    check_rank(a.op, "input", RankRequirement::AtLeast(2), x.shape())?;
    let x_scale = a.double(1)? as f32;
    let x_zp = a.int(2)?;
    let x_zp = i32::try_from(x_zp)
        .map_err(|_| invalid_argument(a.op, "input_zero_point", "must fit int32", x_zp))?;
    let p = LinearParams::from_object(&packed_arg(a, 3)?)?;
    let (m, k, n) = dims(a.op, &x, &p.weight)?;
    let out = matmul_quantized_activation(&x.to_vec::<f32>()?, m, k, n, &p, (x_scale, x_zp), RELU)?;
    tensor_result(Tensor::from_vec(out, &out_shape(&x, n))?)
}

/// `quantized::linear_dynamic_fp16_unpacked_weight(X, weight, bias)`: PyTorch packs the float
/// weight for fbgemm's fp16 GEMM on every call, then runs `linear_dynamic_fp16`.
fn linear_dynamic_fp16_unpacked_weight(a: &mut Args<'_>) -> Result<IValue> {
    let x = a.tensor(0)?;
    let w = a.tensor(1)?;
    float32_matrix(a.op, "weight", &w)?;
    let p = LinearParams {
        weight: w,
        bias: a.opt_tensor(2)?,
    };
    let (m, k, n) = dims(a.op, &x, &p.weight)?;
    let weights = Fp16Weights::new(&p)?;
    let out = weights.matmul(&x.to_vec::<f32>()?, m, k, n)?;
    tensor_result(Tensor::from_vec(out, &out_shape(&x, n))?)
}

/// `x` (`m` rows of `k`) times the packed int8 weights (`n` outputs) as fbgemm's dynamic
/// linear computes it: `x` quantized to quint8 with parameters from its own min/max.
#[allow(clippy::too_many_arguments)]
pub(crate) fn dynamic_matmul(
    xs: &[f32],
    m: usize,
    k: usize,
    n: usize,
    p: &LinearParams,
    reduce_range: bool,
    relu: bool,
    engine: QuantizedEngine,
) -> Result<Vec<f32>> {
    let (lo, hi) = min_max(xs);
    if engine.qnnpack() && !p.is_fp16() {
        return qnnpack_dynamic_matmul(xs, m, k, n, p, (lo, hi), relu);
    }
    let (a_scale, a_zp) = choose_qparams(lo, hi, 0, 255, reduce_range);
    matmul_quantized_activation(xs, m, k, n, p, (a_scale as f32, a_zp), relu)
}

/// QNNPACK's dynamic linear (ATen's `PackedLinearWeightsQnnp::apply_dynamic_impl`, the SSE2
/// `q8gemm_dq` kernel): `reduce_range` ignored, the input quantized by `quantize_per_tensor`
/// with the parameters of its range, the integer sums times `w_scale * x_scale` (float), the
/// bias added as a separate step, ReLU after.
fn qnnpack_dynamic_matmul(
    xs: &[f32],
    m: usize,
    k: usize,
    n: usize,
    p: &LinearParams,
    (lo, hi): (f32, f32),
    relu: bool,
) -> Result<Vec<f32>> {
    let op = "quantized::linear_dynamic";
    if p.weight.shape() != [n, k] {
        return Err(shape_mismatch(
            op,
            "packed weight",
            &[n, k],
            p.weight.shape(),
        ));
    }
    check_size(
        op,
        "the number of input elements",
        (m * k) as i64,
        xs.len() as i64,
    )?;
    let (a_scale, a_zp) = choose_qparams(lo, hi, 0, 255, false);
    let x = Tensor::from_vec(xs.to_vec(), &[m, k])?;
    let xq = int_values(&super::tensors::quantize_tensor(
        &x,
        a_scale,
        i64::from(a_zp),
        DType::QUInt8,
    )?)?;
    let (w_scales, w_zps, _) = weight_params(&p.weight, n)?;
    let bias = match &p.bias {
        Some(b) => Some(b.to_vec::<f32>()?),
        None => None,
    };
    let sums = integer_sums(op, &xq, m, k, n, a_zp, &p.weight, &w_zps)?;
    let mult: Vec<f32> = w_scales.iter().map(|&w| w * a_scale as f32).collect();
    let mut out = vec![0f32; m * n];
    for (i, row) in sums.chunks(n.max(1)).enumerate() {
        for (j, &raw) in row.iter().enumerate() {
            let mut r = mult[j] * raw as f32 + bias.as_ref().map_or(0.0, |b| b[j]);
            if relu {
                r = r.max(0.0);
            }
            out[i * n + j] = r;
        }
    }
    Ok(out)
}

/// `xs` quantized to quint8 with `(scale, zero_point)` as fbgemm's `PackAWithQuantRowOffset`
/// does, times the packed int8 weights, dequantized to float by `ReQuantizeForFloat`.
fn matmul_quantized_activation(
    xs: &[f32],
    m: usize,
    k: usize,
    n: usize,
    p: &LinearParams,
    (a_scale, a_zp): (f32, i32),
    relu: bool,
) -> Result<Vec<f32>> {
    if p.is_fp16() {
        return Err(fp16_weights_refused("quantized::linear_dynamic"));
    }
    if p.weight.shape() != [n, k] {
        return Err(shape_mismatch(
            "quantized::linear_dynamic",
            "packed weight",
            &[n, k],
            p.weight.shape(),
        ));
    }
    check_size(
        "quantized::linear_dynamic",
        "the number of input elements",
        (m * k) as i64,
        xs.len() as i64,
    )?;
    let mut xq = Vec::with_capacity(xs.len());
    for i in 0..m {
        quantize_row_legacy(&xs[i * k..(i + 1) * k], a_scale, a_zp, &mut xq);
    }
    let (w_scales, w_zps, per_channel) = weight_params(&p.weight, n)?;
    let bias = match &p.bias {
        Some(b) => Some(b.to_vec::<f32>()?),
        None => None,
    };
    let tensor_mult = a_scale * w_scales.first().copied().unwrap_or(1.0);
    let sums = integer_sums(
        "quantized::linear_dynamic",
        &xq,
        m,
        k,
        n,
        a_zp,
        &p.weight,
        &w_zps,
    )?;
    let mut out = vec![0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let raw = sums[i * n + j];
            let mult = if per_channel {
                a_scale * w_scales[j]
            } else {
                tensor_mult
            };
            // fbgemm's AVX512 ReQuantizeForFloat fuses the bias add (one rounding)
            let mut r = match &bias {
                Some(b) => (raw as f32).mul_add(mult, b[j]),
                None => raw as f32 * mult,
            };
            if relu {
                r = r.max(0.0);
            }
            out[i * n + j] = r;
        }
    }
    Ok(out)
}

/// `quantized::linear_dynamic_fp16` / `linear_relu_dynamic_fp16`: fbgemm's fp16 GEMM (weights
/// rounded to half, float accumulation), then the bias added as a separate step.
fn linear_dynamic_fp16(a: &mut Args<'_>, relu: bool) -> Result<IValue> {
    let x = a.tensor(0)?;
    let p = LinearParams::from_object(&packed_arg(a, 1)?)?;
    if !p.is_fp16() {
        return Err(invalid_argument(
            a.op,
            "packed weight",
            "must hold fp16 weights",
            p.weight.dtype(),
        ));
    }
    let (m, k, n) = dims(a.op, &x, &p.weight)?;
    let weights = Fp16Weights::new(&p)?;
    let mut out = weights.matmul(&x.to_vec::<f32>()?, m, k, n)?;
    if relu {
        out.iter_mut().for_each(|v| *v = v.max(0.0));
    }
    tensor_result(Tensor::from_vec(out, &out_shape(&x, n))?)
}

/// fp16 packed linear weights as fbgemm's `PackedGemmMatrixFP16` holds them: each float weight
/// saturated to the half range (`HandleWeightsSaturation`, +-65504) and rounded to the nearest
/// half, widened back to float for the product; the bias stays float.
pub(crate) struct Fp16Weights {
    /// `[n, k]` row-major, each value exactly representable in half precision.
    weight: Vec<f32>,
    bias: Option<Vec<f32>>,
}

impl Fp16Weights {
    pub(crate) fn new(p: &LinearParams) -> Result<Fp16Weights> {
        float32_matrix("quantized::linear_dynamic_fp16", "packed weight", &p.weight)?;
        let weight = round_to_half(&p.weight.to_vec::<f32>()?);
        let bias = match &p.bias {
            Some(b) => Some(b.to_vec::<f32>()?),
            None => None,
        };
        Ok(Fp16Weights { weight, bias })
    }

    /// `xs` (`m` rows of `k`) times the weights (`n` outputs): fbgemm's fp16 kernels
    /// accumulate each output from zero with one FMA per `k` in order, then `output.add_(bias)`.
    pub(crate) fn matmul(&self, xs: &[f32], m: usize, k: usize, n: usize) -> Result<Vec<f32>> {
        let op = "quantized::linear_dynamic_fp16";
        let counts = [
            ("the number of weight elements", self.weight.len(), n * k),
            ("the number of input elements", xs.len(), m * k),
            (
                "the number of bias elements",
                self.bias.as_ref().map_or(n, |b| b.len()),
                n,
            ),
        ];
        for (what, got, expected) in counts {
            check_size(op, what, expected as i64, got as i64)?;
        }
        let mut out = vec![0f32; m * n];
        for i in 0..m {
            let x_row = &xs[i * k..(i + 1) * k];
            for (j, o) in out[i * n..(i + 1) * n].iter_mut().enumerate() {
                let w_row = &self.weight[j * k..(j + 1) * k];
                let dot = x_row
                    .iter()
                    .zip(w_row)
                    .fold(0f32, |acc, (&x, &w)| x.mul_add(w, acc));
                *o = dot + self.bias.as_ref().map_or(0.0, |b| b[j]);
            }
        }
        Ok(out)
    }
}

/// `_weight_int8pack_mm(A [M, K] float/half/bfloat16, B [N, K] int8, scales [N])`: weight-only
/// int8 linear, `C[m, n] = scales[n] * sum_k A[m, k] * B[n, k]` accumulated in float (PyTorch's
/// CPU kernel sums with AVX512 lanes: float results agree to rounding), in A's dtype.
fn weight_int8pack_mm(a: &mut Args<'_>) -> Result<IValue> {
    let (x, w, scales) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
    if !matches!(x.dtype(), DType::Float32 | DType::Float16 | DType::BFloat16) {
        return Err(wrong_dtype(
            a.op,
            "A",
            "float32, float16 or bfloat16",
            x.dtype(),
        ));
    }
    check_rank(a.op, "A", RankRequirement::Exactly(2), x.shape())?;
    let (m, k) = (x.shape()[0], x.shape()[1]);
    if w.dtype() != DType::Int8 {
        return Err(wrong_dtype(a.op, "B", "int8", w.dtype()));
    }
    check_rank(a.op, "B", RankRequirement::Exactly(2), w.shape())?;
    check_size(a.op, "B.size(1) (A.size(1))", k as i64, w.shape()[1] as i64)?;
    let n = w.shape()[0];
    if scales.shape() != [n] {
        return Err(shape_mismatch(a.op, "scales", &[n], scales.shape()));
    }
    let xs = x.to_vec::<f32>()?;
    let ws = w.to_vec::<f32>()?;
    let sc = scales.to_vec::<f32>()?;
    let mut out = vec![0f32; m * n];
    for (i, row) in out.chunks_mut(n.max(1)).enumerate().take(m) {
        let xr = &xs[i * k..(i + 1) * k];
        for (j, o) in row.iter_mut().enumerate() {
            let wr = &ws[j * k..(j + 1) * k];
            let dot = xr
                .iter()
                .zip(wr)
                .fold(0f32, |acc, (&p, &q)| p.mul_add(q, acc));
            *o = dot * sc[j];
        }
    }
    tensor_result(Tensor::from_vec(out, &[m, n])?.to_dtype(x.dtype())?)
}

/// `_quantized::wrapped_quantized_linear(X, X_scale, X_zero_point, W, W_scale, W_zero_point, B,
/// output_scale, output_zero_point, out_channel)`: PyTorch's four steps, each by its kernel:
/// W quantized to qint8 and prepacked with B, X quantized to quint8, the static quantized
/// linear into (output_scale, output_zero_point), dequantized (`out_channel` is unused).
fn wrapped_quantized_linear(a: &mut Args<'_>) -> Result<IValue> {
    use crate::ops::prims::via_aten;
    let arg = |i: usize| a.get(i).cloned();
    let dtype_code = |d: DType| IValue::Int(d.to_scalar_type());
    let qw = via_aten(
        a,
        "aten::quantize_per_tensor.tensor_qparams",
        vec![arg(3)?, arg(4)?, arg(5)?, dtype_code(DType::QInt8)],
    )?;
    let packed = via_aten(a, "quantized::linear_prepack", vec![qw, arg(6)?])?;
    let qx = via_aten(
        a,
        "aten::quantize_per_tensor.tensor_qparams",
        vec![arg(0)?, arg(1)?, arg(2)?, dtype_code(DType::QUInt8)],
    )?;
    let single = |i: usize| super::fake_quantize::single(a, i);
    let (out_scale, out_zp) = (single(7)? as f32, single(8)? as i64);
    let y = via_aten(
        a,
        "quantized::linear",
        vec![
            qx,
            packed,
            IValue::Double(f64::from(out_scale)),
            IValue::Int(out_zp),
        ],
    )?;
    via_aten(a, "aten::dequantize.self", vec![y])
}

/// `fbgemm_linear_quantize_weight(W [N, K] float) -> (int8 W, col_offsets int32 [N], scale,
/// zero_point)` (the legacy `torch.jit.quantized` weight prep): fbgemm's own
/// `ChooseQuantizationParams` for int8 over W's min and max (its scale a float), `Quantize` (`zero_point + nearbyint(w * (1 / scale))`), and each row's
/// `sum(q) - zero_point * K`.
fn fbgemm_linear_quantize_weight(a: &mut Args<'_>) -> Result<IValue> {
    let (q, col_offsets, scale, zp) = fbgemm_quantize_weight(a.op, &a.tensor(0)?)?;
    Ok(IValue::Tuple(Tuple::new(vec![
        IValue::Tensor(q),
        IValue::Tensor(col_offsets),
        IValue::Double(scale),
        IValue::Int(zp),
    ])))
}

/// [`fbgemm_linear_quantize_weight`]'s `(int8 W, col_offsets, scale, zero_point)` of `w`.
pub(crate) fn fbgemm_quantize_weight(op: &str, w: &Tensor) -> Result<(Tensor, Tensor, f64, i64)> {
    float32_matrix(op, "weight", w)?;
    let (n, k) = (w.shape()[0], w.shape()[1]);
    let vals = w.contiguous()?.to_vec::<f32>()?;
    let (lo, hi) = min_max(&vals);
    let (qmin, qmax) = (-128i64, 127i64);
    let (scale, zp) = super::fbgemm_legacy::fbgemm_choose_qparams(lo, hi, -128, 127);
    let (s, zp) = (f64::from(scale), i64::from(zp));
    let inv = 1.0f32 / scale;
    let q: Vec<i8> = vals
        .iter()
        .map(|&v| super::quantize_val(v, inv, zp, (qmin, qmax)) as i8)
        .collect();
    let col_offsets: Vec<i32> = q
        .chunks(k.max(1))
        .take(n)
        .map(|row| row.iter().map(|&v| i32::from(v)).sum::<i32>() - zp as i32 * k as i32)
        .collect();
    Ok((
        Tensor::from_vec(q, &[n, k])?,
        Tensor::from_vec(col_offsets, &[n])?,
        s,
        zp,
    ))
}
