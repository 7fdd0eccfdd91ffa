//! Vectorized float32 kernels over the rows of a contiguous matrix: layer normalization and
//! softmax, each one pass of statistics and one of output per row, with partial sums in lanes
//! (so the loops vectorize without reassociating a single running sum) and compiled, as
//! `vmath`, for AVX-512, AVX2+FMA and the baseline, the widest chosen at run time.
//!
//! Layer-norm statistics accumulate in f64 (as the generic kernel in `ops/norm.rs` does); the
//! output is `(x * rstd - mean * rstd) * weight + bias` in f32, the form PyTorch's CPU kernel
//! computes.

use super::vmath::{self, Level};
use rayon::prelude::*;

/// Elements a rayon task gets at least (smaller inputs stay on the calling thread).
const TASK_ELEMS: usize = 16 * 1024;

/// Rows of `len` elements per task: about one task per thread, none below `TASK_ELEMS`.
fn rows_per_task(rows: usize, len: usize) -> usize {
    let threads = rayon::current_num_threads().max(1);
    let min_rows = TASK_ELEMS.div_ceil(len.max(1));
    rows.div_ceil(threads).max(min_rows).max(1)
}

/// One task's rows of layer norm: output, input, (mean, rstd) per row.
type RowTask<'a> = (&'a mut [f32], (&'a [f32], &'a mut [(f64, f64)]));

/// Layer norm of each `len`-element row of `x` into `out` (same length, a multiple of `len`),
/// with optional per-element `weight` and `bias` of `len` elements; `stats[r]` receives row
/// r's (mean, rstd). Rows beyond the shortest of `x`, `out` and `stats` are left alone.
pub(crate) fn layer_norm_f32(
    x: &[f32],
    len: usize,
    weight: Option<&[f32]>,
    bias: Option<&[f32]>,
    eps: f64,
    out: &mut [f32],
    stats: &mut [(f64, f64)],
) {
    if len == 0 || weight.is_some_and(|w| w.len() != len) || bias.is_some_and(|b| b.len() != len) {
        return;
    }
    let per = rows_per_task(x.len() / len, len);
    let run = |(o, (xs, st)): RowTask| {
        for ((orow, xrow), s) in o
            .chunks_exact_mut(len)
            .zip(xs.chunks_exact(len))
            .zip(st.iter_mut())
        {
            *s = layer_norm_row(xrow, weight, bias, eps, orow);
        }
    };
    let tasks = out
        .par_chunks_mut(per * len)
        .zip(x.par_chunks(per * len).zip(stats.par_chunks_mut(per)));
    if tasks.len() > 1 {
        tasks.for_each(run);
    } else {
        out.chunks_mut(per * len)
            .zip(x.chunks(per * len).zip(stats.chunks_mut(per)))
            .for_each(run);
    }
}

/// One row, at the widest level; returns (mean, rstd).
fn layer_norm_row(
    x: &[f32],
    w: Option<&[f32]>,
    b: Option<&[f32]>,
    eps: f64,
    out: &mut [f32],
) -> (f64, f64) {
    #[cfg(target_arch = "x86_64")]
    match vmath::level() {
        // SAFETY: `level` reported that the CPU supports the features this function enables.
        Level::Avx512 => return unsafe { layer_norm_row_avx512(x, w, b, eps, out) },
        // SAFETY: as above, for AVX2 and FMA.
        Level::Avx2 => return unsafe { layer_norm_row_avx2(x, w, b, eps, out) },
        Level::Baseline => {}
    }
    layer_norm_row_inline(x, w, b, eps, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
unsafe fn layer_norm_row_avx512(
    x: &[f32],
    w: Option<&[f32]>,
    b: Option<&[f32]>,
    eps: f64,
    out: &mut [f32],
) -> (f64, f64) {
    layer_norm_row_inline(x, w, b, eps, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn layer_norm_row_avx2(
    x: &[f32],
    w: Option<&[f32]>,
    b: Option<&[f32]>,
    eps: f64,
    out: &mut [f32],
) -> (f64, f64) {
    layer_norm_row_inline(x, w, b, eps, out)
}

/// f64 lanes of the statistics sums.
const LANES64: usize = 8;

#[inline(always)]
fn layer_norm_row_inline(
    x: &[f32],
    w: Option<&[f32]>,
    b: Option<&[f32]>,
    eps: f64,
    out: &mut [f32],
) -> (f64, f64) {
    let n = x.len() as f64;
    let chunks = x.chunks_exact(LANES64);
    let tail = chunks.remainder();
    let mut acc = [0f64; LANES64];
    for c in chunks.clone() {
        for j in 0..LANES64 {
            acc[j] += c[j] as f64;
        }
    }
    let mean = (super::vmath::reduce_lanes(acc) + tail.iter().map(|&v| v as f64).sum::<f64>()) / n;
    let mut acc = [0f64; LANES64];
    for c in chunks {
        for j in 0..LANES64 {
            let d = c[j] as f64 - mean;
            acc[j] += d * d;
        }
    }
    let tail_sq = tail
        .iter()
        .map(|&v| {
            let d = v as f64 - mean;
            d * d
        })
        .sum::<f64>();
    let var = (super::vmath::reduce_lanes(acc) + tail_sq) / n;
    let rstd = 1.0 / (var + eps).sqrt();
    let (scale, shift) = (rstd as f32, (-mean * rstd) as f32);
    let out = &mut out[..x.len()];
    match (w, b) {
        (Some(w), Some(b)) => {
            for (((o, &v), &w), &b) in out.iter_mut().zip(x).zip(w).zip(b) {
                *o = (v * scale + shift) * w + b;
            }
        }
        (Some(w), None) => {
            for ((o, &v), &w) in out.iter_mut().zip(x).zip(w) {
                *o = (v * scale + shift) * w;
            }
        }
        (None, Some(b)) => {
            for ((o, &v), &b) in out.iter_mut().zip(x).zip(b) {
                *o = (v * scale + shift) + b;
            }
        }
        (None, None) => {
            for (o, &v) in out.iter_mut().zip(x) {
                *o = v * scale + shift;
            }
        }
    }
    (mean, rstd)
}

/// f32 lanes of the softmax reductions.
const LANES: usize = 16;

/// `row = softmax(row)` in place: the maximum and the sum of exponentials in lanes, the
/// exponentials through `vmath`'s exp.
pub(crate) fn softmax_row_f32(row: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    match vmath::level() {
        // SAFETY: `level` reported that the CPU supports the features this function enables.
        Level::Avx512 => return unsafe { softmax_row_avx512(row) },
        // SAFETY: as above, for AVX2 and FMA.
        Level::Avx2 => return unsafe { softmax_row_avx2(row) },
        Level::Baseline => {}
    }
    softmax_row_inline(row)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
unsafe fn softmax_row_avx512(row: &mut [f32]) {
    softmax_row_inline(row)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn softmax_row_avx2(row: &mut [f32]) {
    softmax_row_inline(row)
}

#[inline(always)]
fn softmax_row_inline(row: &mut [f32]) {
    if row.is_empty() {
        return;
    }
    let chunks = row.chunks_exact(LANES);
    let tail = chunks.remainder();
    let mut mx = [f32::NEG_INFINITY; LANES];
    for c in chunks {
        for j in 0..LANES {
            mx[j] = if c[j] > mx[j] { c[j] } else { mx[j] };
        }
    }
    let m = tail
        .iter()
        .chain(mx.iter())
        .fold(f32::NEG_INFINITY, |a, &v| a.max(v));
    let mut sums = [0f32; LANES];
    let mut chunks = row.chunks_exact_mut(LANES);
    for c in &mut chunks {
        for j in 0..LANES {
            let e = vmath::exp(c[j] - m);
            c[j] = e;
            sums[j] += e;
        }
    }
    let mut tail_sum = 0f32;
    for v in chunks.into_remainder() {
        *v = vmath::exp(*v - m);
        tail_sum += *v;
    }
    let mut width = LANES;
    while width > 1 {
        width /= 2;
        for j in 0..width {
            sums[j] += sums[j + width];
        }
    }
    let inv = 1.0 / (sums[0] + tail_sum);
    row.iter_mut().for_each(|v| *v *= inv);
}
