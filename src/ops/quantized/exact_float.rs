//! The integer sums of a quantized convolution or linear layer, `sum (x - x_zp) * (w - w_zp)`
//! per output, computed by the float32 convolution and GEMM kernels, bit-identical to the direct
//! integer loop.
//!
//! Why it is exact: every product and every partial sum the float kernels form is an integer
//! of magnitude at most `taps * max|x - x_zp| * max|w - w_zp|`, and float32 represents every
//! integer up to 2^24 exactly, in any summation order (fused or not). The input channels are
//! cut into chunks whose taps keep that bound within 2^24 (most layers need one chunk: 514
//! taps of a full-range uint8 input by a symmetric int8 weight); each chunk's float sums
//! convert to i32 exactly and the chunks add in wrapping i32, as the integer loop adds its
//! products. Padding holds the input zero point, real zero, as the float kernels' zeros do.
//!
//! The float weights `w - w_zp` (one contiguous tensor per chunk) are made once per weight
//! storage and kept while it is alive and unwritten, so the float kernels' cache of packed
//! weights serves every later call.

use super::weight_cache;
use crate::ops::conv::{convolution, ConvParams as FloatConv};
use crate::ops::kernels::size_mismatch;
use crate::tensor::Tensor;
use std::sync::Arc;

/// Integers up to this magnitude are exact in float32.
const EXACT_F32: i64 = 1 << 24;
/// The largest `|x - x_zp|` of a uint8 input, whatever its zero point.
const INPUT_RANGE: i64 = 255;

/// A forward (not transposed) convolution's geometry, spatial values lifted to 3 dims.
pub(super) struct Geometry<'a> {
    /// Input shape `[n, c, *spatial]` (1 to 3 spatial dims, as the weight has).
    pub input_shape: &'a [usize],
    pub stride: [i64; 3],
    pub pad: [i64; 3],
    pub dilation: [i64; 3],
    pub groups: usize,
}

/// What every route of a forward quantized convolution reads: the quint8 input and its zero
/// point, the int8/uint8 weight and its per-channel zero points, the geometry and the output's
/// spatial sizes (lifted to 3 dims), with the op name for errors.
#[derive(Clone, Copy)]
pub(super) struct ConvOperands<'a> {
    pub op: &'a str,
    pub x: &'a Tensor,
    pub x_zp: i32,
    pub weight: &'a Tensor,
    pub w_zps: &'a [i32],
    pub geo: &'a Geometry<'a>,
    pub out_spatial: [usize; 3],
}

/// The sums `[n, m, *out]` of `(x - x_zp) * (w - w_zp[oc])`, or `None` where the float route
/// cannot guarantee exactness (a single input channel's taps would pass 2^24; a grouped
/// convolution that would need chunks): the caller then runs the integer loop.
pub(super) fn conv_sums(c: &ConvOperands<'_>) -> Option<crate::Result<Vec<i32>>> {
    let ConvOperands {
        op,
        x,
        x_zp,
        weight,
        w_zps,
        geo,
        ..
    } = *c;
    let ws = weight.shape();
    let (m, c_per_g) = (*ws.first()?, *ws.get(1)?);
    let taps: usize = ws.get(2..)?.iter().product();
    let c = *geo.input_shape.get(1)?;
    if m == 0 || c_per_g == 0 || taps == 0 || w_zps.len() != m {
        return None;
    }
    // a grouped convolution runs whole: its chunks would cut every group
    let chunks = weight_chunks(weight, w_zps, c_per_g, taps, geo.groups == 1)?;
    let sums = || {
        let ints = super::layout::planar_ints(x)?;
        let read = ints.read::<u8>()?;
        run_chunks(op, read.as_slice().unwrap_or(&[]), x_zp, &chunks, c, geo)
    };
    Some(sums())
}

/// The sums `[m, n]` of `(x[i] - x_zp) . (w[j] - w_zp[j])` for `x` of `m` rows of `k` uint8
/// values (0..=255) and a weight `[n, k]`, or `None` where the weight's values are outside what
/// the float route keeps exact: the caller then runs the integer loop.
pub(super) fn linear_sums(
    op: &str,
    x: &[i32],
    m: usize,
    x_zp: i32,
    weight: &Tensor,
    w_zps: &[i32],
) -> Option<crate::Result<Vec<i32>>> {
    let &[n, k] = weight.shape() else {
        return None;
    };
    if n == 0 || k == 0 || w_zps.len() != n || x.len() != m * k {
        return None;
    }
    let chunks = weight_chunks(weight, w_zps, k, 1, true)?;
    let mut sums: Vec<i32> = Vec::new();
    let mut k0 = 0;
    for w_chunk in &chunks.tensors {
        let kc = w_chunk.shape()[1];
        let mut xf = Vec::with_capacity(m * kc);
        for row in x.chunks(k) {
            xf.extend(row[k0..k0 + kc].iter().map(|&v| (v - x_zp) as f32));
        }
        let part = match Tensor::from_vec(xf, &[m, kc])
            .map_err(crate::Error::from)
            .and_then(|xt| crate::ops::linalg::linear(op, &xt, w_chunk, None))
            .and_then(|t| t.contiguous())
        {
            Ok(t) => t,
            Err(e) => return Some(Err(e)),
        };
        let read = match part.read::<f32>() {
            Ok(r) => r,
            Err(e) => return Some(Err(e.into())),
        };
        add_chunk(&mut sums, read.as_slice().unwrap_or(&[]));
        k0 += kc;
    }
    Some(Ok(sums))
}

/// Add one chunk's float sums (integers of magnitude at most 2^24: exact as i32) to `sums`.
fn add_chunk(sums: &mut Vec<i32>, part: &[f32]) {
    if sums.is_empty() {
        sums.extend(part.iter().map(|&v| v as i32));
    } else {
        for (s, &v) in sums.iter_mut().zip(part) {
            *s = s.wrapping_add(v as i32);
        }
    }
}

fn run_chunks(
    op: &str,
    x: &[u8],
    x_zp: i32,
    chunks: &WeightChunks,
    c: usize,
    geo: &Geometry<'_>,
) -> crate::Result<Vec<i32>> {
    let lift = |v: [i64; 3]| v.map(|d| d.max(0) as usize);
    let params = FloatConv {
        stride: lift(geo.stride),
        pad: lift(geo.pad),
        pad_extra: [0; 3],
        dilation: lift(geo.dilation),
        output_padding: [0; 3],
        groups: geo.groups,
        transposed: false,
    };
    let n = geo.input_shape[0];
    let plane: usize = geo.input_shape[2..].iter().product();
    let mut sums: Vec<i32> = Vec::new();
    let mut c0 = 0;
    for w_chunk in &chunks.tensors {
        let cc = if chunks.tensors.len() == 1 {
            c
        } else {
            w_chunk.shape()[1]
        };
        // the chunk's input channels, shifted by the zero point (exact in float32)
        let mut xf = Vec::with_capacity(n * cc * plane);
        for b in 0..n {
            let start = (b * c + c0) * plane;
            let rows = x.get(start..start + cc * plane).ok_or_else(|| {
                size_mismatch(
                    op,
                    "the input's values",
                    (n * c * plane) as i64,
                    x.len() as i64,
                )
            })?;
            xf.extend(rows.iter().map(|&v| (i32::from(v) - x_zp) as f32));
        }
        let mut shape = geo.input_shape.to_vec();
        shape[1] = cc;
        let xt = Tensor::from_vec(xf, &shape)?;
        let out = convolution(op, &xt, w_chunk, None, &params)?.contiguous()?;
        let read = out.read::<f32>()?;
        add_chunk(&mut sums, read.as_slice().unwrap_or(&[]));
        c0 += cc;
    }
    Ok(sums)
}

/// A weight as float32 `w - w_zp[oc]`, cut along the input channels into chunks whose
/// products with any uint8 input sum exactly in float32.
struct WeightChunks {
    tensors: Vec<Tensor>,
}

/// `None` where exactness needs more than one chunk and `may_chunk` is false, or where even one
/// input channel's taps could pass 2^24.
fn weight_chunks(
    weight: &Tensor,
    w_zps: &[i32],
    c_per_g: usize,
    taps: usize,
    may_chunk: bool,
) -> Option<Arc<WeightChunks>> {
    weight_cache::prepared(weight, w_zps, || {
        make_chunks(weight, w_zps, c_per_g, taps, may_chunk)
    })
}

fn make_chunks(
    weight: &Tensor,
    w_zps: &[i32],
    c_per_g: usize,
    taps: usize,
    may_chunk: bool,
) -> Option<WeightChunks> {
    let w = super::int_values(weight).ok()?;
    let m = w_zps.len();
    if w.len() != m * c_per_g * taps {
        return None;
    }
    let per_oc = c_per_g * taps;
    let widest = w
        .chunks(per_oc)
        .zip(w_zps)
        .flat_map(|(row, &z)| {
            row.iter()
                .map(move |&v| (i64::from(v) - i64::from(z)).abs())
        })
        .max()
        .unwrap_or(0)
        .max(1);
    let per_channel = taps as i64 * INPUT_RANGE * widest;
    if per_channel > EXACT_F32 {
        return None;
    }
    let channels_per_chunk = ((EXACT_F32 / per_channel) as usize).clamp(1, c_per_g);
    if channels_per_chunk < c_per_g && !may_chunk {
        return None;
    }
    let mut tensors = Vec::new();
    let mut c0 = 0;
    while c0 < c_per_g {
        let cc = channels_per_chunk.min(c_per_g - c0);
        let mut data = Vec::with_capacity(m * cc * taps);
        for (oc, &z) in w_zps.iter().enumerate() {
            let row = &w[oc * per_oc + c0 * taps..oc * per_oc + (c0 + cc) * taps];
            data.extend(row.iter().map(|&v| (v - z) as f32));
        }
        let mut shape = weight.shape().to_vec();
        shape[1] = cc;
        tensors.push(Tensor::from_vec(data, &shape).ok()?);
        c0 += cc;
    }
    Some(WeightChunks { tensors })
}
