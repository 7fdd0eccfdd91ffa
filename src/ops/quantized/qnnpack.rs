//! The arithmetic of PyTorch's `qnnpack` engine as it runs on x86 (QNNPACK's SSE2 kernels,
//! [`QuantizedEngine::Qnnpack`](crate::ops::QuantizedEngine::Qnnpack)) where it differs from
//! fbgemm's: the requantization of convolutions and linear layers (int32 bias, one float
//! multiply), the fixed-point `add`, and average pooling, adaptive average pooling with whole
//! windows and the spatial `mean` through QNNPACK's (global) average pooling. The callers
//! choose these paths under the same conditions as ATen does; other ops run as fbgemm.

use super::{int_values, make_quantized, per_tensor_params, quantize_val, round_ties_even};
use crate::ops::kernels::invalid_argument;
use crate::tensor::{DType, Quantizer, Tensor};
use crate::Result;

/// QNNPACK's requantization (the SSE2 `q8gemm`, `q8conv` and `q8dwconv` kernels): the float
/// bias is quantized to int32 at scale `w_scale * x_scale` (ATen's `QuantizeBias`, double
/// scales) and starts the integer sum; the sum is then converted to float, multiplied by
/// `(w_scale * x_scale) * (1 / out_scale)` in float (`generate_requantization_scales`),
/// rounded (CVTPS2DQ), saturated to i16, the zero point added with i16 saturation,
/// saturated to u8 and clamped to the ReLU range.
pub(crate) struct QnnpackRequant {
    bias: Vec<i32>,
    multiplier: Vec<f32>,
    out_zp: i32,
    out_min: i32,
}

impl QnnpackRequant {
    /// `w_scales`: the weight's scale per output channel (one value repeated when per tensor).
    pub(crate) fn new(
        x_scale: f64,
        w_scales: &[f64],
        bias: Option<&[f32]>,
        out_scale: f64,
        out_zp: i64,
        relu: bool,
    ) -> QnnpackRequant {
        let inv_out = 1.0f32 / out_scale as f32;
        let multiplier = w_scales
            .iter()
            .map(|&w| (w as f32 * x_scale as f32) * inv_out)
            .collect();
        let int32_range = (i64::from(i32::MIN), i64::from(i32::MAX));
        let bias = w_scales
            .iter()
            .enumerate()
            .map(|(j, &w)| {
                let b = bias.and_then(|b| b.get(j).copied()).unwrap_or(0.0);
                quantize_val(b, 1.0f32 / (w * x_scale) as f32, 0, int32_range)
            })
            .collect();
        QnnpackRequant {
            bias,
            multiplier,
            out_zp: out_zp as i32,
            // ATen's `activationLimits(.., RELU)`: the zero point
            out_min: if relu { out_zp.clamp(0, 255) as i32 } else { 0 },
        }
    }

    /// Output channel `j`'s quint8 value for integer sum `raw`.
    #[inline]
    pub(crate) fn apply(&self, raw: i32, j: usize) -> i32 {
        let acc = raw.wrapping_add(self.bias[j]);
        scaled_to_u8(acc, self.multiplier[j], self.out_zp).max(self.out_min)
    }
}

/// `cvtps(float(acc) * scale)`, saturated to i16, plus the zero point with i16 saturation,
/// saturated to u8: the common tail of QNNPACK's float-scaled SSE2 kernels.
#[inline]
fn scaled_to_u8(acc: i32, scale: f32, zp: i32) -> i32 {
    let scaled = acc as f32 * scale;
    let rounded = if !(-2147483648.0..2147483648.0).contains(&scaled) {
        i32::MIN // CVTPS2DQ's "integer indefinite"
    } else {
        round_ties_even(scaled) as i32
    };
    // packs_epi32 (saturate to i16), adds_epi16 (zero point), packus_epi16 (u8)
    let s16 = rounded.clamp(i16::MIN as i32, i16::MAX as i32);
    (s16 + zp)
        .clamp(i16::MIN as i32, i16::MAX as i32)
        .clamp(0, 255)
}

/// `quantized::add` / `add_relu` of two quint8 tensors of one shape (ATen's `qnnpack_add`,
/// QNNPACK's `q8vadd`): each input multiplied by a 22-bit fixed-point multiplier of its scale
/// over the output's, summed with the zero points' product in wrapping i32, shifted right
/// with rounding of the remainder away from zero past half, the output zero point added.
pub(crate) fn add(
    op: &str,
    x: &Tensor,
    y: &Tensor,
    scale: f64,
    zp: i64,
    relu: bool,
) -> Result<Tensor> {
    let (xs, xz) = per_tensor_params(op, x)?;
    let (ys, yz) = per_tensor_params(op, y)?;
    let a_scale = xs as f32 / scale as f32;
    let b_scale = ys as f32 / scale as f32;
    for s in [a_scale, b_scale] {
        // pytorch_qnnp_create_add_nc_q8 refuses other ratios ("failed to create QNNPACK
        // Add operator")
        if !(2f32.powi(-14)..2f32.powi(8)).contains(&s) {
            return Err(invalid_argument(
                op,
                "the ratio of an input's scale to the output scale",
                "must lie in [2**-14, 2**8) for QNNPACK",
                s,
            ));
        }
    }
    let max_exponent = (a_scale.max(b_scale).to_bits() >> 23) as i32 - 127;
    let shift = (21 - max_exponent) as u32;
    let scale_multiplier = f32::from_bits(((21 - max_exponent + 127) as u32) << 23);
    let a_mult = round_ties_even(a_scale * scale_multiplier) as i32 as u32;
    let b_mult = round_ties_even(b_scale * scale_multiplier) as i32 as u32;
    let zero_point_product = (a_mult
        .wrapping_mul(xz as u32)
        .wrapping_add(b_mult.wrapping_mul(yz as u32)))
    .wrapping_neg() as i32;
    let remainder_mask = ((1u32 << shift) - 1) as i32;
    let remainder_threshold = remainder_mask >> 1;
    let out_min = if relu { zp.clamp(0, 255) as i32 } else { 0 };
    let zp32 = zp as i32;
    let xv = int_values(x)?;
    let yv = int_values(y)?;
    let vals: Vec<i32> = xv
        .iter()
        .zip(&yv)
        .map(|(&a, &b)| {
            let acc = zero_point_product
                .wrapping_add((a as u32).wrapping_mul(a_mult) as i32)
                .wrapping_add((b as u32).wrapping_mul(b_mult) as i32);
            let rem = (acc & remainder_mask) - i32::from(acc < 0);
            let q = (acc >> shift) + i32::from(rem > remainder_threshold);
            let s16 = q.clamp(i16::MIN as i32, i16::MAX as i32);
            (s16 + zp32)
                .clamp(i16::MIN as i32, i16::MAX as i32)
                .clamp(0, 255)
                .max(out_min)
        })
        .collect();
    make_quantized(
        &vals,
        x.shape(),
        DType::QUInt8,
        Quantizer::PerTensorAffine {
            scale,
            zero_point: zp,
        },
    )
}

/// `avg_pool2d` of a 4-d quint8 tensor without `ceil_mode` (ATen's `qnnpack_avg_pool2d`,
/// QNNPACK's `q8avgpool`): padding counts as the zero point and every window divides by the
/// kernel's size (QNNPACK ignores `count_include_pad` and `divisor_override`); the integer
/// window sum less the zero points is scaled by `scale / (scale * k_h * k_w)` in float.
pub(crate) fn avg_pool2d(
    op: &str,
    x: &Tensor,
    kernel: [i64; 2],
    stride: [i64; 2],
    pad: [i64; 2],
) -> Result<Tensor> {
    let (scale, zp) = per_tensor_params(op, x)?;
    let shape = x.shape();
    let (nc, h, w) = (shape[0] * shape[1], shape[2] as i64, shape[3] as i64);
    let out_len = |n: i64, i: usize| (n + 2 * pad[i] - kernel[i]) / stride[i] + 1;
    let (oh, ow) = (out_len(h, 0), out_len(w, 1));
    if h == 0 || w == 0 || oh <= 0 || ow <= 0 || kernel.iter().chain(&stride).any(|&v| v <= 0) {
        return Err(invalid_argument(
            op,
            "the pooling geometry",
            "must give a positive output size",
            format!("kernel {kernel:?}, stride {stride:?}, padding {pad:?}, input {shape:?}"),
        ));
    }
    let pooling_size = (kernel[0] * kernel[1]) as f32;
    let s = scale as f32;
    let multiplier = s / (s * pooling_size);
    let xv = int_values(x)?;
    let zp32 = zp as i32;
    let mut out = Vec::with_capacity(nc * (oh * ow) as usize);
    for plane in xv.chunks((h * w).max(1) as usize).take(nc) {
        for oy in 0..oh {
            for ox in 0..ow {
                let mut acc = 0i32;
                for ky in 0..kernel[0] {
                    let iy = oy * stride[0] - pad[0] + ky;
                    if !(0..h).contains(&iy) {
                        continue;
                    }
                    for kx in 0..kernel[1] {
                        let ix = ox * stride[1] - pad[1] + kx;
                        if (0..w).contains(&ix) {
                            acc += plane[(iy * w + ix) as usize] - zp32;
                        }
                    }
                }
                out.push(scaled_to_u8(acc, multiplier, zp32));
            }
        }
    }
    let oshape = [shape[0], shape[1], oh as usize, ow as usize];
    make_quantized(&out, &oshape, DType::QUInt8, same_quantizer(scale, zp))
}

/// `mean(dim=[2, 3])` of a 4-d quint8 tensor (ATen's `qnnpack_mean`, QNNPACK's global average
/// pooling): the plane's integer sum less `h * w` zero points, scaled by
/// `scale / (scale * (h * w))` in float; the input's parameters.
pub(crate) fn spatial_mean(op: &str, x: &Tensor, keepdim: bool) -> Result<Tensor> {
    let (scale, zp) = per_tensor_params(op, x)?;
    let shape = x.shape();
    let rows = shape[2] * shape[3];
    if rows == 0 {
        return Err(invalid_argument(
            op,
            "input",
            "must have non-empty planes",
            format!("{shape:?}"),
        ));
    }
    let s = scale as f32;
    let multiplier = s / (s * rows as f32);
    let zp32 = zp as i32;
    let xv = int_values(x)?;
    let out: Vec<i32> = xv
        .chunks(rows.max(1))
        .take(shape[0] * shape[1])
        .map(|plane| {
            let sum = plane.iter().sum::<i32>() - rows as i32 * zp32;
            scaled_to_u8(sum, multiplier, zp32)
        })
        .collect();
    let oshape: Vec<usize> = if keepdim {
        vec![shape[0], shape[1], 1, 1]
    } else {
        vec![shape[0], shape[1]]
    };
    make_quantized(&out, &oshape, DType::QUInt8, same_quantizer(scale, zp))
}

fn same_quantizer(scale: f64, zero_point: i64) -> Quantizer {
    Quantizer::PerTensorAffine { scale, zero_point }
}
