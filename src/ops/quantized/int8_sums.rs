//! The integer sums `sum (x - x_zp) * (w - w_zp)` of quantized convolutions and linear layers
//! through the VNNI kernel (`int8_gemm`): the operands laid out for it, the weights packed once
//! per weight storage (`weight_cache`), the zero points applied after the kernel's raw sums.
//! Bit-identical to the direct loop (wrapping i32, see `int8_gemm`).
//!
//! A convolution's input is copied channels-last into a buffer with its padding border holding
//! the input zero point (real zero), each group's channels padded to a multiple of 4, so every
//! kernel tap of every output pixel is one run of bytes; a channels-last input whose groups
//! fill whole 4-byte runs is read in place (or copied row by row when padded). Its output is
//! requantized in the kernel's epilogue and written channels-last, as PyTorch's convolutions
//! leave it; a linear layer's sums are either requantized the same way (static) or returned
//! (dynamic: the caller makes floats of them).

use super::byte_transpose;
use super::exact_float::ConvOperands;
use super::int8_gemm::{self, Dest, PackedWeights, Requantizer, RowSource};
use super::weight_cache;
use crate::ops::kernels::parallel::for_each_chunk_mut;
use crate::tensor::{DType, Tensor};

/// Largest channels-last input copy made (bytes): beyond it the caller's other routes run.
const MAX_LAYOUT_BYTES: usize = 1 << 31;

/// The per-group packed weights of one convolution or linear layer.
struct GroupWeights {
    groups: Vec<PackedWeights>,
    /// Whether a weight zero point is not 0 (the packing then has a row-sum column).
    row_sums: bool,
}

/// Whether the kernel serves a weight of this kind: int8 values on a CPU with VNNI.
fn usable(weight: &Tensor) -> bool {
    weight.dtype() == DType::QInt8 && int8_gemm::supported()
}

fn pack(
    weight: &Tensor,
    w_zps: &[i32],
    groups: usize,
    taps: usize,
    c_per_g: usize,
) -> Option<std::sync::Arc<GroupWeights>> {
    weight_cache::prepared(weight, w_zps, || {
        let w = super::int_values(weight).ok()?;
        let m = w_zps.len();
        if groups == 0 || !m.is_multiple_of(groups) || w.len() != m * c_per_g * taps {
            return None;
        }
        let m_per_g = m / groups;
        let row_sums = w_zps.iter().any(|&z| z != 0);
        let mut packed = Vec::with_capacity(groups);
        for g in 0..groups {
            // `[oc][c][tap]` (PyTorch's weight layout) to the kernel's `[oc][tap][c]`
            let mut reordered = Vec::with_capacity(m_per_g * taps * c_per_g);
            for oc in g * m_per_g..(g + 1) * m_per_g {
                let row = &w[oc * c_per_g * taps..(oc + 1) * c_per_g * taps];
                for t in 0..taps {
                    reordered.extend((0..c_per_g).map(|c| row[c * taps + t]));
                }
            }
            packed.push(PackedWeights::new(
                &reordered, m_per_g, taps, c_per_g, row_sums,
            )?);
        }
        Some(GroupWeights {
            groups: packed,
            row_sums,
        })
    })
}

fn refused(op: &str, e: int8_gemm::Misuse) -> crate::Error {
    crate::Error::Tensor(crate::tensor::TensorError::Unsupported(format!(
        "{op}: the int8 kernel refused its operands ({e:?})"
    )))
}

/// Run the packed groups over `x`'s rows into `[rows, m]` sums (group `g`'s outputs at
/// columns `g * m_per_g ..`), zero points applied.
fn sums_of(
    op: &str,
    packed: &GroupWeights,
    x: &RowSource<'_>,
    group_stride: usize,
    x_zp: i32,
    w_zps: &[i32],
) -> crate::Result<Vec<i32>> {
    let rows = x.rows.len();
    let m_per_g = packed.groups.first().map_or(0, |p| p.outputs());
    let m = m_per_g * packed.groups.len();
    let extra = usize::from(packed.row_sums);
    let ldc = (m_per_g + extra) * packed.groups.len();
    let mut out = vec![0i32; rows * ldc];
    for (g, weights) in packed.groups.iter().enumerate() {
        let offsets = weights.zero_point_offsets(x_zp, &w_zps[g * m_per_g..(g + 1) * m_per_g]);
        let source = RowSource {
            base: x.base + g * group_stride,
            ..*x
        };
        let dest = Dest::Sums {
            out: &mut out,
            ldc,
            first_column: g * (m_per_g + extra),
        };
        int8_gemm::run(weights, &source, &offsets, dest).map_err(|e| refused(op, e))?;
    }
    if !packed.row_sums {
        return Ok(out);
    }
    // `- w_zp[j] * sum x`, the row sums in each group's extra column
    let mut sums = vec![0i32; rows * m];
    for (dst, src) in sums.chunks_mut(m.max(1)).zip(out.chunks(ldc.max(1))) {
        for (g, (d, s)) in dst
            .chunks_mut(m_per_g.max(1))
            .zip(src.chunks(m_per_g + 1))
            .enumerate()
        {
            let row_sum = s[m_per_g];
            for (j, (d, &v)) in d.iter_mut().zip(s).enumerate() {
                *d = v.wrapping_sub(w_zps[g * m_per_g + j].wrapping_mul(row_sum));
            }
        }
    }
    Ok(sums)
}

/// Run the packed groups (packed without row sums: every weight zero point is 0) over `x`'s
/// rows, requantized by `requant(first, count)` (the parameters of output channels
/// `first .. first + count`) into `[rows / plane, m, plane]` uint8.
fn quantized_of(
    op: &str,
    packed: &GroupWeights,
    x: &RowSource<'_>,
    group_stride: usize,
    x_zp: i32,
    plane: usize,
    requant: &dyn Fn(usize, usize) -> Requantizer,
) -> crate::Result<Vec<u8>> {
    let rows = x.rows.len();
    let m_per_g = packed.groups.first().map_or(0, |p| p.outputs());
    let m = m_per_g * packed.groups.len();
    let mut out = vec![0u8; rows * m];
    let zeros = vec![0i32; m_per_g];
    for (g, weights) in packed.groups.iter().enumerate() {
        let offsets = weights.zero_point_offsets(x_zp, &zeros);
        let source = RowSource {
            base: x.base + g * group_stride,
            ..*x
        };
        let params = requant(g * m_per_g, m_per_g);
        let dest = Dest::Quantized {
            out: &mut out,
            ldc: m,
            first_column: g * m_per_g,
            plane,
            requant: &params,
        };
        int8_gemm::run(weights, &source, &offsets, dest).map_err(|e| refused(op, e))?;
    }
    Ok(out)
}

/// The requantized uint8 output `[n, *out, m]` (channels-last) of a forward convolution (`requant(first,
/// count)`: the parameters of output channels `first .. first + count`), or `None` where the
/// kernel does not serve it (no VNNI, a weight that is not int8 or has a zero point other
/// than 0, depthwise-like groups of fewer than 4 channels or 8 outputs, an input copy above
/// `MAX_LAYOUT_BYTES`).
pub(super) fn conv_quantized(
    c: &ConvOperands<'_>,
    requant: &dyn Fn(usize, usize) -> Requantizer,
) -> Option<crate::Result<Vec<u8>>> {
    let ConvOperands {
        op,
        x,
        x_zp,
        weight,
        w_zps,
        geo,
        out_spatial,
    } = *c;
    if !usable(weight) || w_zps.iter().any(|&z| z != 0) {
        return None;
    }
    let ws = weight.shape();
    let (m, c_per_g) = (*ws.first()?, *ws.get(1)?);
    let g = geo.groups;
    // a depthwise-like group wastes most of each 4-byte group and 16-lane register; one
    // group of 1 to 3 channels (an RGB image) wastes only its channel padding
    let narrow = g > 1 && (c_per_g < 4 || m / g < 8);
    if g == 0 || !m.is_multiple_of(g) || narrow || !(3..=5).contains(&ws.len()) {
        return None;
    }
    let mut kernel = [1usize; 3];
    for (k, &s) in kernel.iter_mut().rev().zip(ws[2..].iter().rev()) {
        *k = s;
    }
    let taps: usize = kernel.iter().product();
    let shape = geo.input_shape;
    let (n, c) = (*shape.first()?, *shape.get(1)?);
    if c != c_per_g * g || shape.len() != ws.len() {
        return None;
    }
    let mut image = [1usize; 3];
    for (i, &s) in image.iter_mut().rev().zip(shape[2..].iter().rev()) {
        *i = s;
    }
    let lift = |v: [i64; 3]| -> Option<[usize; 3]> {
        let mut out = [0usize; 3];
        for (o, &d) in out.iter_mut().zip(&v) {
            *o = usize::try_from(d).ok()?;
        }
        Some(out)
    };
    let (stride, pad, dil) = (lift(geo.stride)?, lift(geo.pad)?, lift(geo.dilation)?);
    let c4 = c_per_g.div_ceil(4) * 4;
    let cp = g * c4;
    let padded: [usize; 3] = std::array::from_fn(|d| image[d] + 2 * pad[d]);
    let bytes = n.checked_mul(padded.iter().product())?.checked_mul(cp)?;
    if bytes > MAX_LAYOUT_BYTES {
        return None;
    }
    let packed = pack(weight, w_zps, g, taps, c_per_g)?;
    let run = || -> crate::Result<Vec<u8>> {
        let plane: usize = image.iter().product();
        let check = |len: usize| {
            if len == n * c * plane {
                Ok(())
            } else {
                Err(crate::ops::kernels::size_mismatch(
                    op,
                    "the input's values",
                    (n * c * plane) as i64,
                    len as i64,
                ))
            }
        };
        // a channels-last input (a quantized convolution's output) is the kernel's layout
        // already when its groups' channels fill whole 4-byte runs: read in place, or copied
        // row by row into the padded buffer
        let pixels = match super::layout::channels_last_ints(x)? {
            Some(t) if c_per_g == c4 => Some(t),
            _ => None,
        };
        let pixels_read = pixels.as_ref().map(|t| t.read::<u8>()).transpose()?;
        let padded_copy;
        let layout: &[u8] = match pixels_read.as_ref().map(|r| r.as_slice()) {
            Some(Some(src)) => {
                check(src.len())?;
                if pad == [0; 3] {
                    src
                } else {
                    padded_copy = pad_pixels(src, x_zp, n, c, image, padded, pad);
                    &padded_copy
                }
            }
            _ => {
                let ints = x.int_repr_view()?.contiguous()?;
                let read = ints.read::<u8>()?;
                let src = read.as_slice().unwrap_or(&[]);
                check(src.len())?;
                padded_copy = channels_last(src, x_zp, n, c, c_per_g, c4, image, padded, pad);
                &padded_copy
            }
        };
        let [pd, ph, pw] = padded;
        let taps_at: Vec<usize> = (0..kernel[0])
            .flat_map(|a| (0..kernel[1]).flat_map(move |b| (0..kernel[2]).map(move |e| (a, b, e))))
            .map(|(a, b, e)| ((a * dil[0] * ph + b * dil[1]) * pw + e * dil[2]) * cp)
            .collect();
        let [od, oh, ow] = out_spatial;
        let mut rows = Vec::with_capacity(n * od * oh * ow);
        for b in 0..n {
            for z in 0..od {
                for y in 0..oh {
                    let line = ((b * pd + z * stride[0]) * ph + y * stride[1]) * pw;
                    rows.extend((0..ow).map(|xo| (line + xo * stride[2]) * cp));
                }
            }
        }
        let source = RowSource {
            src: layout,
            base: 0,
            rows: &rows,
            taps: &taps_at,
        };
        quantized_of(op, &packed, &source, c4, x_zp, 1, requant)
    };
    Some(run())
}

/// Writes one interior padded row: `(image, z, y, row)`, `z` and `y` unpadded.
type FillRow<'a> = &'a (dyn Fn(usize, usize, usize, &mut [u8]) + Sync);

/// A channels-last uint8 buffer of `n` padded images (`padded` spatial sizes, `row_bytes` per
/// padded row) filled with `x_zp`, whose interior rows `fill_row(image, z, y, row)` writes
/// (`z`, `y` unpadded; the row is the whole padded row), in parallel on large buffers.
fn padded_rows(
    x_zp: i32,
    n: usize,
    row_bytes: usize,
    image: [usize; 3],
    padded: [usize; 3],
    pad: [usize; 3],
    fill_row: FillRow<'_>,
) -> Vec<u8> {
    let [d, h, _] = image;
    let ph = padded[1];
    let rows_total = n * padded[0] * ph;
    let mut out = vec![x_zp.clamp(0, 255) as u8; rows_total * row_bytes];
    let par = out.len() > 1 << 16;
    for_each_chunk_mut(
        &mut out,
        row_bytes.max(1),
        par && rows_total > 1,
        &|k, row| {
            let y = k % ph;
            let z = (k / ph) % padded[0];
            let b = k / (ph * padded[0]);
            if z < pad[0] || z >= pad[0] + d || y < pad[1] || y >= pad[1] + h {
                return;
            }
            fill_row(b, z - pad[0], y - pad[1], row);
        },
    );
    out
}

/// `x` (`[n, *image, c]` uint8, channels-last already) with a border of `pad` holding `x_zp`:
/// each interior row one copy.
fn pad_pixels(
    x: &[u8],
    x_zp: i32,
    n: usize,
    c: usize,
    image: [usize; 3],
    padded: [usize; 3],
    pad: [usize; 3],
) -> Vec<u8> {
    let [d, h, w] = image;
    padded_rows(
        x_zp,
        n,
        padded[2] * c,
        image,
        padded,
        pad,
        &|b, zi, yi, row| {
            let first = ((b * d + zi) * h + yi) * w * c;
            if let (Some(src), Some(dst)) = (
                x.get(first..first + w * c),
                row.get_mut(pad[2] * c..(pad[2] + w) * c),
            ) {
                dst.copy_from_slice(src);
            }
        },
    )
}

/// `x` (`[n, c, *image]` uint8) channels-last with a border of `pad` holding `x_zp`, each of
/// the groups' `c_per_g` channels at a multiple of `c4` bytes.
#[allow(clippy::too_many_arguments)]
fn channels_last(
    x: &[u8],
    x_zp: i32,
    n: usize,
    c: usize,
    c_per_g: usize,
    c4: usize,
    image: [usize; 3],
    padded: [usize; 3],
    pad: [usize; 3],
) -> Vec<u8> {
    let cp = c / c_per_g * c4;
    let [d, h, w] = image;
    let plane = d * h * w;
    padded_rows(
        x_zp,
        n,
        padded[2] * cp,
        image,
        padded,
        pad,
        &|b, zi, yi, row| {
            let first = (b * c) * plane + (zi * h + yi) * w;
            // groups of whole 4-byte runs sit where they are: the row is one transpose of the
            // `c x w` byte matrix (channel lines `plane` apart) into `w x c`
            if c_per_g == c4
                && byte_transpose::transpose(
                    &x[first.min(x.len())..],
                    plane,
                    c,
                    w,
                    &mut row[pad[2] * cp..],
                    cp,
                )
            {
                return;
            }
            for ch in 0..c {
                let at = (ch / c_per_g) * c4 + ch % c_per_g;
                let line = &x[(b * c + ch) * plane + (zi * h + yi) * w..][..w];
                for (xi, &v) in line.iter().enumerate() {
                    row[(xi + pad[2]) * cp + at] = v;
                }
            }
        },
    )
}

/// `x` (`m` rows of `k` values in 0..=255) as the kernel's rows: `[m, k4]` bytes.
fn linear_rows(x: &[i32], m: usize, k: usize) -> (Vec<u8>, Vec<usize>) {
    let k4 = k.div_ceil(4) * 4;
    let mut bytes = vec![0u8; m * k4];
    for (dst, src) in bytes.chunks_mut(k4).zip(x.chunks(k)) {
        for (d, &v) in dst.iter_mut().zip(src) {
            *d = v.clamp(0, 255) as u8;
        }
    }
    (bytes, (0..m).map(|i| i * k4).collect())
}

/// The packed weights of a linear layer `[n, k]` for `m` rows of `x`, or `None` where the
/// kernel does not serve it (no VNNI, a weight that is not int8).
fn linear_weights(
    x: &[i32],
    m: usize,
    weight: &Tensor,
    w_zps: &[i32],
) -> Option<(std::sync::Arc<GroupWeights>, usize)> {
    if !usable(weight) {
        return None;
    }
    let &[n, k] = weight.shape() else {
        return None;
    };
    if n == 0 || k == 0 || w_zps.len() != n || x.len() != m.checked_mul(k)? {
        return None;
    }
    Some((pack(weight, w_zps, 1, 1, k)?, k))
}

/// The sums `[m, n]` of a linear layer (`x`: `m` rows of `k` values in 0..=255), or `None`
/// where the kernel does not serve it (no VNNI, a weight that is not int8).
pub(super) fn linear_sums(
    op: &str,
    x: &[i32],
    m: usize,
    x_zp: i32,
    weight: &Tensor,
    w_zps: &[i32],
) -> Option<crate::Result<Vec<i32>>> {
    let (packed, k) = linear_weights(x, m, weight, w_zps)?;
    let (bytes, rows) = linear_rows(x, m, k);
    let source = RowSource {
        src: &bytes,
        base: 0,
        rows: &rows,
        taps: &[0],
    };
    Some(sums_of(op, &packed, &source, 0, x_zp, w_zps))
}

/// The requantized uint8 output `[m, n]` of a linear layer (`requant` as for
/// [`conv_quantized`]), or `None` where the kernel does not serve it (no VNNI, a weight that
/// is not int8 or has a zero point other than 0).
pub(super) fn linear_quantized(
    op: &str,
    x: &[i32],
    m: usize,
    x_zp: i32,
    weight: &Tensor,
    w_zps: &[i32],
    requant: &dyn Fn(usize, usize) -> Requantizer,
) -> Option<crate::Result<Vec<u8>>> {
    if w_zps.iter().any(|&z| z != 0) {
        return None;
    }
    let (packed, k) = linear_weights(x, m, weight, w_zps)?;
    let (bytes, rows) = linear_rows(x, m, k);
    let source = RowSource {
        src: &bytes,
        base: 0,
        rows: &rows,
        taps: &[0],
    };
    Some(quantized_of(op, &packed, &source, 0, x_zp, 1, requant))
}
