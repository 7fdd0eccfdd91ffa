//! fbgemm's depthwise fast path: which quantized convolutions PyTorch's fbgemm kernels run
//! through it, and the one way its arithmetic differs from an exact sum.
//!
//! fbgemm (`takeDepthWiseFastPath`, `GenI8Depthwise`) multiplies the raw uint8 activations by
//! the raw int8 weights with `vpmaddubsw`, which adds each pair of neighbouring products into
//! int16 with saturation before `vpmaddwd` widens the pairs to int32. The taps pair up in
//! row-major kernel order (depth, row, column), `(0, 1), (2, 3), ...`, an odd last tap alone
//! (paired with a zero); padding taps hold the raw input zero point. The zero points are then
//! taken off exactly in int32 (`x_zp * sum (w - w_zp)`, `w_zp * sum x`), so a sum differs from
//! the exact `sum (x - x_zp) * (w - w_zp)` by `sum over pairs (sat16(p) - p)`, `p` the pair's
//! raw `x_a * w_a + x_b * w_b`. That is nonzero only where both taps of a pair have large
//! weights of one sign over large inputs (full-range per-channel weights). With a weight zero
//! point other than 0 the input sum it multiplies is accumulated in int16 with saturation
//! too (`vpaddsw`), so kernels of more than 128 taps (3-d) take `w_zp * min(sum x, 32767)`.

use super::exact_float::{ConvOperands, Geometry};
use super::weight_cache;
use crate::ops::kernels::parallel::for_each_chunk_mut;
use crate::tensor::Tensor;
use std::sync::Arc;

/// The largest uint8 input: pairs are bounded over inputs `0..=255`, whatever the zero point.
const INPUT_MAX: i32 = 255;
/// Output elements below which one thread adds the corrections.
const PARALLEL_ELEMENTS: usize = 1 << 14;

/// Whether fbgemm takes its depthwise fast path for this forward convolution (weight
/// `[m, c_per_g, *kernel]`): one input channel per group, groups a multiple of 8, one or two
/// outputs per group, a 2-d or 3-d kernel of 3, 5 or 7 taps per dimension with square
/// height x width, stride 1 or 2, dilation 1 and padding `(k - 1) / 2` on every side
/// (`takeDepthWiseFastPath`). A 1-d convolution (packed 2-d with a kernel of height 1) never
/// does.
pub(super) fn takes_fast_path(weight_shape: &[usize], geo: &Geometry<'_>) -> bool {
    let Some(spatial) = weight_shape.len().checked_sub(2) else {
        return false;
    };
    let (m, c_per_g) = (weight_shape[0], weight_shape[1]);
    let c = geo.input_shape.get(1).copied().unwrap_or(0);
    let kernel = &weight_shape[2..];
    if !(2..=3).contains(&spatial)
        || c_per_g != 1
        || geo.groups != c
        || c == 0
        || !c.is_multiple_of(8)
        || (m != c && m != 2 * c)
        || kernel[spatial - 2] != kernel[spatial - 1]
    {
        return false;
    }
    // the geometry's values are lifted to 3 dims, filled in front
    kernel.iter().enumerate().all(|(d, &k)| {
        let l = 3 - spatial + d;
        matches!(k, 3 | 5 | 7)
            && matches!(geo.stride[l], 1 | 2)
            && geo.dilation[l] == 1
            && usize::try_from(geo.pad[l]).is_ok_and(|p| p == (k - 1) / 2)
    })
}

/// `p` saturated to int16, as `vpmaddubsw` leaves a pair's sum.
fn saturate_i16(p: i32) -> i32 {
    p.clamp(i32::from(i16::MIN), i32::from(i16::MAX))
}

/// Whether a pair of taps with int8 weights `a` and `b` can leave int16 over uint8 inputs.
pub(super) fn pair_may_saturate(a: i32, b: i32) -> bool {
    let most = INPUT_MAX * (a.max(0) + b.max(0));
    let least = INPUT_MAX * (a.min(0) + b.min(0));
    saturate_i16(most) != most || saturate_i16(least) != least
}

/// Whether any of fbgemm's pairs of these taps (one output channel's weights in row-major
/// kernel order) can leave int16.
pub(super) fn channel_may_saturate(taps: &[i32]) -> bool {
    taps.chunks_exact(2).any(|p| pair_may_saturate(p[0], p[1]))
}

/// Where a depthwise weight's sums can saturate, made once per weight storage.
struct Saturating {
    /// Per output channel, its pairs that can leave int16: `(first tap, weight, weight)`
    /// (the second tap is the next).
    channels: Vec<Vec<(usize, i32, i32)>>,
    /// Per output channel: its weight zero point where its input sums can leave int16
    /// (more than 128 taps), else 0.
    input_sum_zps: Vec<i32>,
}

fn saturating(weight: &Tensor, w_zps: &[i32], taps: usize) -> Option<Arc<Saturating>> {
    weight_cache::prepared(weight, w_zps, || {
        let w = super::int_values(weight).ok()?;
        if taps == 0 || w.len() != w_zps.len() * taps {
            return None;
        }
        let channels = w
            .chunks(taps)
            .map(|oc| {
                oc.chunks_exact(2)
                    .enumerate()
                    .filter(|(_, p)| pair_may_saturate(p[0], p[1]))
                    .map(|(j, p)| (2 * j, p[0], p[1]))
                    .collect()
            })
            .collect();
        let sums_saturate = i64::from(INPUT_MAX) * taps as i64 > i64::from(i16::MAX);
        let input_sum_zps = w_zps
            .iter()
            .map(|&z| if sums_saturate { z } else { 0 })
            .collect();
        Some(Saturating {
            channels,
            input_sum_zps,
        })
    })
}

/// Add fbgemm's int16 saturation to the exact sums `[n, m, *out]` of a depthwise convolution
/// that takes the fast path ([`takes_fast_path`]): for every output, `sat16(p) - p` of each
/// pair of taps that can saturate, and `w_zp * (sum x - min(sum x, 32767))` where the input
/// sum can. `x` is the quint8 input `[n, c, *in]`.
pub(super) fn add_int16_saturation(c: &ConvOperands<'_>, sums: &mut [i32]) -> crate::Result<()> {
    let ConvOperands {
        op,
        x,
        x_zp,
        weight,
        w_zps,
        geo,
        out_spatial,
    } = *c;
    let ws = weight.shape();
    let shape = geo.input_shape;
    let lifted = |v: &[usize]| -> [usize; 3] {
        let mut out = [1usize; 3];
        for (o, &s) in out.iter_mut().rev().zip(v.iter().rev()) {
            *o = s;
        }
        out
    };
    let kernel = lifted(ws.get(2..).unwrap_or(&[]));
    let image = lifted(shape.get(2..).unwrap_or(&[]));
    let (m, n, c) = (ws[0], shape[0], shape[1]);
    let taps: usize = kernel.iter().product();
    let out_plane: usize = out_spatial.iter().product();
    let in_plane: usize = image.iter().product();
    let lift = |v: [i64; 3]| v.map(|d| usize::try_from(d).unwrap_or(0));
    let (stride, pad) = (lift(geo.stride), lift(geo.pad));
    let padded: [usize; 3] = std::array::from_fn(|d| image[d] + 2 * pad[d]);
    let Some(risky) = saturating(weight, w_zps, taps) else {
        return Err(crate::ops::kernels::size_mismatch(
            op,
            "the depthwise weight's values",
            (m * taps) as i64,
            weight.numel() as i64,
        ));
    };
    if risky.channels.iter().all(Vec::is_empty) && risky.input_sum_zps.iter().all(|&z| z == 0) {
        return Ok(());
    }
    let ints = super::layout::planar_ints(x)?;
    let read = ints.read::<u8>()?;
    let src = read.as_slice().unwrap_or(&[]);
    if src.len() != n * c * in_plane || sums.len() != n * m * out_plane || c == 0 {
        return Err(crate::ops::kernels::size_mismatch(
            op,
            "the depthwise convolution's elements",
            (n * m * out_plane) as i64,
            sums.len() as i64,
        ));
    }
    let m_per_c = m / c;
    let [_, ph, pw] = padded;
    // each tap's offset in the padded volume (dilation 1 on the fast path)
    let offsets: Vec<usize> = (0..taps)
        .map(|t| {
            let (a, rest) = (t / (kernel[1] * kernel[2]), t % (kernel[1] * kernel[2]));
            (a * ph + rest / kernel[2]) * pw + rest % kernel[2]
        })
        .collect();
    let zp = x_zp.clamp(0, 255) as u8;
    let par = sums.len() >= PARALLEL_ELEMENTS;
    for_each_chunk_mut(sums, out_plane, par, &|p, plane| {
        let (b, oc) = (p / m, p % m);
        let (pairs, sum_zp) = (&risky.channels[oc], risky.input_sum_zps[oc]);
        if pairs.is_empty() && sum_zp == 0 {
            return;
        }
        let ic = oc / m_per_c;
        let input = &src[(b * c + ic) * in_plane..][..in_plane];
        let volume = pad_volume(input, zp, image, padded, pad);
        let [od, oh, ow] = out_spatial;
        let mut i = 0;
        for z in 0..od {
            for y in 0..oh {
                let row = (z * stride[0] * ph + y * stride[1]) * pw;
                for xo in 0..ow {
                    let base = row + xo * stride[2];
                    let mut delta = 0i32;
                    for &(t, wa, wb) in pairs {
                        let xa = i32::from(volume[base + offsets[t]]);
                        let xb = i32::from(volume[base + offsets[t + 1]]);
                        let sum = xa * wa + xb * wb;
                        delta += saturate_i16(sum) - sum;
                    }
                    if sum_zp != 0 {
                        let total: i32 = offsets.iter().map(|&o| i32::from(volume[base + o])).sum();
                        delta += sum_zp * (total - saturate_i16(total));
                    }
                    plane[i] = plane[i].wrapping_add(delta);
                    i += 1;
                }
            }
        }
    });
    Ok(())
}

/// One channel's `[d, h, w]` values in a `padded` volume whose border holds `zp`.
fn pad_volume(
    input: &[u8],
    zp: u8,
    [d, h, w]: [usize; 3],
    [pd, ph, pw]: [usize; 3],
    [p0, p1, p2]: [usize; 3],
) -> Vec<u8> {
    let mut out = vec![zp; pd * ph * pw];
    for z in 0..d {
        for y in 0..h {
            let at = ((z + p0) * ph + y + p1) * pw + p2;
            out[at..at + w].copy_from_slice(&input[(z * h + y) * w..][..w]);
        }
    }
    out
}
