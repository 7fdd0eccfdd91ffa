//! Quantized normalization.
//!
//! Batch norm (`quantized::batch_norm{,1d,2d,3d}{,_relu}`) as ATen's `qbatch_norm.cpp`
//! computes it: per channel a float `alpha`/`beta` folding the statistics, the affine
//! parameters and both scales (`compute_fused_params`), then per element
//! `round(alpha * (q - zp) + beta) + out_zp` over the channels-last layout, whole groups of
//! 64 channels by FMA (`do_bn_compute`), the remaining channels by the scalar formula.
//!
//! Layer, group and instance norm (`quantized::layer_norm`, `group_norm`, `instance_norm`) as
//! ATen's `quantized_normalize_kernel` over contiguous input: each group's mean and variance
//! from exact integer sums of `q` and `q^2`, in float (the variance's `sum_sq / N - m * m` by
//! one FMA); then per element
//! `((q - zp) - mean) * (x_scale / std) * gamma + beta`, quantized with `1 / out_scale`.

use super::{arg_qtensor, int_values, per_tensor_params, per_tensor_quantized, tensor_result};
use crate::ops::kernels::{
    invalid_argument, rank_mismatch, size_mismatch, unsupported_feature, wrong_dtype,
};
use crate::ops::{Args, Registry};
use crate::tensor::{DType, RankRequirement, Tensor};
use crate::values::IValue;
use crate::Result;

pub fn register(r: &mut Registry) {
    r.add_all(
        &["quantized::batch_norm", "aten::quantized_batch_norm"],
        |a| batch_norm(a, None, false),
    );
    r.add("quantized::batch_norm_relu", |a| batch_norm(a, None, true));
    r.add("quantized::batch_norm1d", |a| batch_norm(a, Some(1), false));
    r.add("quantized::batch_norm1d_relu", |a| {
        batch_norm(a, Some(1), true)
    });
    r.add("quantized::batch_norm2d", |a| batch_norm(a, Some(2), false));
    r.add("quantized::batch_norm2d_relu", |a| {
        batch_norm(a, Some(2), true)
    });
    r.add("quantized::batch_norm3d", |a| batch_norm(a, Some(3), false));
    r.add("quantized::batch_norm3d_relu", |a| {
        batch_norm(a, Some(3), true)
    });
    r.add("quantized::layer_norm", layer_norm);
    r.add("quantized::group_norm", group_norm);
    r.add("quantized::instance_norm", instance_norm);
}

/// How `normalize` applies gamma and beta.
enum Affine {
    /// One value per element of a group (layer norm over `normalized_shape`).
    PerElement,
    /// One value per channel of `channels`, groups covering `channels / groups` channels
    /// (group and instance norm).
    PerChannel { channels: usize, groups: usize },
}

/// `quantized_normalize_kernel`: `m` groups of `n` contiguous elements of `x`, each
/// normalized by its own statistics and scaled by `gamma`/`beta`, into (`os`, `ozp`).
#[allow(clippy::too_many_arguments)]
fn normalize(
    op: &str,
    x: &Tensor,
    gamma: Option<Vec<f32>>,
    beta: Option<Vec<f32>>,
    affine: Affine,
    n: usize,
    eps: f64,
    os: f64,
    ozp: i64,
) -> Result<Tensor> {
    let (xs, xzp) = per_tensor_params(op, x)?;
    let range = x
        .dtype()
        .quantized_range()
        .ok_or_else(|| wrong_dtype(op, "input", "quantized", x.dtype()))?;
    if x.dtype() == DType::QInt32 {
        return Err(unsupported_feature(op, "a qint32 input"));
    }
    let xv = int_values(x)?;
    let xs = xs as f32;
    let inv = 1.0f32 / os as f32;
    let mut out = vec![0i32; xv.len()];
    if n == 0 {
        return per_tensor_quantized(&out, x.shape(), x.dtype(), os, ozp);
    }
    for (gi, (group, dst)) in xv.chunks(n).zip(out.chunks_mut(n)).enumerate() {
        let sum: i64 = group.iter().map(|&q| q as i64).sum();
        let sum_sq: i64 = group.iter().map(|&q| q as i64 * q as i64).sum();
        let mean_shifted = sum as f32 / n as f32;
        let mean = mean_shifted - xzp as f32;
        // `sum_sq / N - m * m`: ATen's AVX2 and AVX-512 builds of the kernel contract it
        // into one fused multiply-add
        let var = (-mean_shifted)
            .mul_add(mean_shifted, sum_sq as f32 / n as f32)
            .max(0.0);
        let s = (xs as f64 / (((var * xs * xs) as f64) + eps).sqrt()) as f32;
        match affine {
            Affine::PerElement => {
                for (k, (&q, d)) in group.iter().zip(dst.iter_mut()).enumerate() {
                    let g = gamma.as_ref().map_or(1.0, |g| g[k]);
                    let b = beta.as_ref().map_or(0.0, |b| b[k]);
                    let y = ((q as f32 - xzp as f32) - mean) * s * g + b;
                    *d = quantize_out(y, inv, ozp, range);
                }
            }
            Affine::PerChannel { channels, groups } => {
                let per_group = channels / groups;
                let per_channel = n / per_group.max(1);
                for c in 0..per_group {
                    let idx = (gi * per_group + c) % channels;
                    let g = gamma.as_ref().map_or(1.0, |g| g[idx]);
                    let b = beta.as_ref().map_or(0.0, |b| b[idx]);
                    let gp = s * g;
                    let span = c * per_channel..(c + 1) * per_channel;
                    for (&q, d) in group[span.clone()].iter().zip(&mut dst[span]) {
                        let y = ((q as f32 - xzp as f32) - mean) * gp + b;
                        *d = quantize_out(y, inv, ozp, range);
                    }
                }
            }
        }
    }
    per_tensor_quantized(&out, x.shape(), x.dtype(), os, ozp)
}

/// `Vectorized<T>::quantize` with the kernel's `1 / out_scale`.
fn quantize_out(y: f32, inv: f32, zp: i64, range: (i64, i64)) -> i32 {
    let t = y * inv;
    let r = if t.is_nan() {
        i32::MIN as i64
    } else {
        t.min(2147483520.0).round_ties_even() as i64
    };
    (r + zp).clamp(range.0, range.1) as i32
}

/// An optional float tensor argument with `len` elements, as a vector.
fn opt_params(a: &Args<'_>, i: usize, len: usize, what: &str) -> Result<Option<Vec<f32>>> {
    match a.opt_tensor(i)? {
        Some(t) if t.numel() == len => Ok(Some(t.to_vec::<f32>()?)),
        Some(t) => Err(size_mismatch(
            a.op,
            format!("the number of elements of {what}"),
            len as i64,
            t.numel() as i64,
        )),
        None => Ok(None),
    }
}

/// `quantized::layer_norm(input, normalized_shape, weight, bias, eps, output_scale,
/// output_zero_point)`.
fn layer_norm(a: &mut Args<'_>) -> Result<IValue> {
    let x = arg_qtensor(a, 0)?;
    let shape = a.int_list(1)?;
    let nd = shape.len();
    if nd == 0
        || nd > x.dim()
        || x.shape()[x.dim() - nd..]
            .iter()
            .zip(&shape)
            .any(|(&d, &s)| d as i64 != s)
    {
        return Err(invalid_argument(
            a.op,
            "normalized_shape",
            format!(
                "must be a non-empty suffix of the input shape {:?}",
                x.shape()
            ),
            format!("{shape:?}"),
        ));
    }
    let n: usize = x.shape()[x.dim() - nd..].iter().product();
    let gamma = opt_params(a, 2, n, "weight")?;
    let beta = opt_params(a, 3, n, "bias")?;
    let out = normalize(
        a.op,
        &x,
        gamma,
        beta,
        Affine::PerElement,
        n,
        a.double(4)?,
        a.double(5)?,
        a.int(6)?,
    )?;
    tensor_result(out)
}

/// `quantized_group_norm_impl`: `groups` groups per batch entry, per-channel affine.
#[allow(clippy::too_many_arguments)]
fn group_norm_of(
    op: &str,
    x: &Tensor,
    groups: usize,
    gamma: Option<Vec<f32>>,
    beta: Option<Vec<f32>>,
    eps: f64,
    os: f64,
    ozp: i64,
) -> Result<Tensor> {
    crate::ops::kernels::check_rank(op, "input", RankRequirement::AtLeast(2), x.shape())?;
    let channels = x.shape()[1];
    if groups == 0 || !channels.is_multiple_of(groups) {
        return Err(invalid_argument(
            op,
            "num_groups",
            format!("must be positive and divide the input's channels ({channels})"),
            groups,
        ));
    }
    let per_batch: usize = x.shape()[1..].iter().product();
    normalize(
        op,
        x,
        gamma,
        beta,
        Affine::PerChannel { channels, groups },
        per_batch / groups,
        eps,
        os,
        ozp,
    )
}

/// `quantized::group_norm(input, num_groups, weight, bias, eps, output_scale,
/// output_zero_point)`.
fn group_norm(a: &mut Args<'_>) -> Result<IValue> {
    let x = arg_qtensor(a, 0)?;
    let groups = a.int(1)?;
    let groups = usize::try_from(groups)
        .map_err(|_| invalid_argument(a.op, "num_groups", "must be non-negative", groups))?;
    let c = if x.dim() > 1 { x.shape()[1] } else { 0 };
    let gamma = opt_params(a, 2, c, "weight")?;
    let beta = opt_params(a, 3, c, "bias")?;
    let out = group_norm_of(
        a.op,
        &x,
        groups,
        gamma,
        beta,
        a.double(4)?,
        a.double(5)?,
        a.int(6)?,
    )?;
    tensor_result(out)
}

/// `quantized::instance_norm(input, weight, bias, eps, output_scale, output_zero_point)`: group
/// norm with one group per channel.
fn instance_norm(a: &mut Args<'_>) -> Result<IValue> {
    let x = arg_qtensor(a, 0)?;
    let c = if x.dim() > 1 { x.shape()[1] } else { 0 };
    let gamma = opt_params(a, 1, c, "weight")?;
    let beta = opt_params(a, 2, c, "bias")?;
    let out = group_norm_of(
        a.op,
        &x,
        c,
        gamma,
        beta,
        a.double(3)?,
        a.double(4)?,
        a.int(5)?,
    )?;
    tensor_result(out)
}

/// The channels one AVX512 step of `do_bn_compute` covers.
const BN_LANES: usize = 64;

/// A batch norm folded into one float multiply-add per element (`compute_fused_params`), as
/// `do_bn_compute` evaluates it: by FMA in whole groups of `BN_LANES` channels, the remaining
/// channels by the scalar formula.
pub(crate) struct FusedBatchNorm {
    alpha: Vec<f32>,
    beta: Vec<f32>,
    vec_channels: usize,
    x_zero_point: i64,
}

impl FusedBatchNorm {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        weight: &[f32],
        bias: &[f32],
        mean: &[f32],
        var: &[f32],
        eps: f64,
        x_scale: f64,
        out_scale: f64,
        x_zero_point: i64,
    ) -> FusedBatchNorm {
        let c = weight.len();
        let mut alpha = vec![0f32; c];
        let mut beta = vec![0f32; c];
        for ch in 0..c {
            let inv_sigma = (1.0 / ((var[ch] + eps as f32).sqrt() as f64)) as f32;
            let (w, b) = (weight[ch], bias[ch]);
            alpha[ch] = ((inv_sigma * w) as f64 * (x_scale / out_scale)) as f32;
            beta[ch] = ((b - mean[ch] * inv_sigma * w) as f64 / out_scale) as f32;
        }
        FusedBatchNorm {
            alpha,
            beta,
            vec_channels: c / BN_LANES * BN_LANES,
            x_zero_point,
        }
    }

    /// The normalized value of `q` in channel `ch`, in units of the output scale.
    #[inline]
    pub(crate) fn value(&self, q: i32, ch: usize) -> f32 {
        let (alpha, beta) = (self.alpha[ch], self.beta[ch]);
        if ch < self.vec_channels {
            alpha.mul_add(q as f32 - self.x_zero_point as f32, beta)
        } else {
            alpha * (q as i64 - self.x_zero_point) as f32 + beta
        }
    }
}

/// `spatial`: the overload's rank (1-d takes 2-d or 3-d inputs, 2-d 4-d, 3-d 5-d); `None`
/// (`quantized::batch_norm`) takes any of them.
fn batch_norm(a: &mut Args<'_>, spatial: Option<usize>, relu: bool) -> Result<IValue> {
    let x = arg_qtensor(a, 0)?;
    let ok = match spatial {
        Some(1) => matches!(x.dim(), 2 | 3),
        Some(s) => x.dim() == s + 2,
        None => (2..=5).contains(&x.dim()),
    };
    if !ok {
        let ranks = match spatial {
            Some(1) => RankRequirement::OneOf(vec![2, 3]),
            Some(s) => RankRequirement::Exactly(s + 2),
            None => RankRequirement::OneOf(vec![2, 3, 4, 5]),
        };
        return Err(rank_mismatch(a.op, "input", ranks, x.shape()));
    }
    let c = x.shape()[1];
    // ATen's q_batch_norm_impl requires both affine parameters (and the statistics)
    let per_channel = |i: usize, what: &str| -> Result<Vec<f32>> {
        match a.opt_tensor(i)? {
            Some(t) if t.numel() == c => Ok(t.to_vec::<f32>()?),
            Some(t) => Err(size_mismatch(
                a.op,
                format!("the number of elements of {what} (the input's channels)"),
                c as i64,
                t.numel() as i64,
            )),
            None => Err(invalid_argument(a.op, what, "must be provided", "None")),
        }
    };
    let weight = per_channel(1, "weight")?;
    let bias = per_channel(2, "bias")?;
    let mean = per_channel(3, "mean")?;
    let var = per_channel(4, "var")?;
    let eps = a.double(5)?;
    let (os, ozp) = (a.double(6)?, a.int(7)?);
    let (xs, xzp) = per_tensor_params(a.op, &x)?;
    let range = x
        .dtype()
        .quantized_range()
        .ok_or_else(|| wrong_dtype(a.op, "input", "quantized", x.dtype()))?;
    let bn = FusedBatchNorm::new(&weight, &bias, &mean, &var, eps, xs, os, xzp);
    let inner: usize = x.shape().iter().skip(2).product();
    let vals: Vec<i32> = int_values(&x)?
        .iter()
        .enumerate()
        .map(|(i, &q)| {
            let v = bn.value(q, (i / inner.max(1)) % c);
            let r = if v.is_nan() {
                i32::MIN as i64
            } else {
                v.min(2147483520.0).round_ties_even() as i64
            };
            let mut r = (r + ozp).clamp(range.0, range.1);
            if relu {
                r = r.max(ozp);
            }
            r as i32
        })
        .collect();
    tensor_result(per_tensor_quantized(&vals, x.shape(), x.dtype(), os, ozp)?)
}
