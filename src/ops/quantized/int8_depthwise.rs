//! The integer sums of depthwise quantized convolutions (one input channel per group, as
//! mobilenets' 3x3 and 5x5 layers) with AVX512-VNNI, on the NCHW input as it lies.
//!
//! Each output channel's plane is made one output row at a time, 16 output pixels per
//! register: the input channel's plane is copied once with its padding border holding the
//! input zero point (real zero), and 64-byte loads of the padded input rows are permuted into
//! the 16 pixels' windows of 4 taps, which `vpdpbusd` multiplies by the 4 weights of those
//! taps (broadcast) and adds into 16 i32 lanes. Square 3x3, 5x5 and 7x7 kernels take the taps
//! flattened row-major, 4 consecutive ones per lane, gathered by `vpermi2b` from the two kernel
//! rows they lie on (3, 7 and 13 multiply-adds), with the kernel size fixed at compile time;
//! other kernels take 4 horizontal taps of one kernel row per lane (`vpermb`; a row of up to
//! 4 taps is one multiply-add, 5 taps two).
//!
//! Exactness: `vpdpbusd` adds the exact products of uint8 inputs and int8 weights into i32
//! lanes; `sum (x - x_zp) * w = sum x * w - x_zp * sum w` (the padding holds `x_zp`, so every
//! tap counts), and the bound on the taps keeps every partial sum far inside i32, so the sums
//! are the direct loop's values. Served: int8 weights with zero point 0 (fbgemm's and QNNPACK's
//! default symmetric weights), 2-d (and 1-d) geometry, windows of 16 pixels that fit in 64
//! bytes; elsewhere the caller's other routes run.
//!
//! Convolutions fbgemm runs through its depthwise fast path (`fbgemm_depthwise`) get fbgemm's
//! sums instead: in the flattened tap order `vpmaddubsw` saturates exactly fbgemm's pairs
//! `(0, 1), (2, 3), ...` to int16 and `vpdpwssd` widens and adds them, for the output channels
//! one of whose pairs can saturate (the others' exact sums are the same).

use super::exact_float::ConvOperands;
use super::fbgemm_depthwise::channel_may_saturate;
use crate::ops::kernels::parallel::for_each_chunk_mut;
use crate::tensor::{DType, Tensor};
use std::sync::Arc;

/// Output pixels per register (16 i32 lanes).
const LANES: usize = 16;
/// Taps per multiply-add (the 4 bytes `vpdpbusd` sums into a lane).
const TAPS_PER_GROUP: usize = 4;
/// Taps above which the sums could leave i32 (`taps * 255 * 128 < 2^31`); far above any
/// depthwise kernel.
const MAX_TAPS: usize = 1 << 16;
/// Multiply-adds below which one thread runs the call.
const PARALLEL_MACS: usize = 1 << 16;

/// Whether this CPU runs the kernel: the VNNI kernel's features plus AVX-512 VBMI (`vpermb`).
fn supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        super::int8_gemm::supported() && is_x86_feature_detected!("avx512vbmi")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// A depthwise weight `[m, 1, kh, kw]` packed for the kernel, made once per weight storage.
struct PackedDepthwise {
    kh: usize,
    groups: usize,
    /// Per output channel, per kernel row, per group of 4 taps: the taps' 4 int8 weights as
    /// one i32 (little-endian, tap `4g` lowest; taps past `kw` hold 0).
    words: Vec<i32>,
    /// `sum w` of each output channel.
    sums: Vec<i32>,
}

fn pack(
    weight: &Tensor,
    w_zps: &[i32],
    m: usize,
    kh: usize,
    kw: usize,
) -> Option<Arc<PackedDepthwise>> {
    super::weight_cache::prepared(weight, w_zps, || {
        let w = super::int_values(weight).ok()?;
        if w.len() != m * kh * kw {
            return None;
        }
        let groups = kw.div_ceil(TAPS_PER_GROUP);
        let mut words = Vec::with_capacity(m * kh * groups);
        for row in w.chunks(kw) {
            push_tap_words(row, &mut words)?;
        }
        let sums = w.chunks(kh * kw).map(|c| c.iter().sum()).collect();
        Some(PackedDepthwise {
            kh,
            groups,
            words,
            sums,
        })
    })
}

/// Kernel sizes of fbgemm's depthwise fast path (square): the pair kernel's `K`.
const PAIR_KERNELS: [usize; 3] = [3, 5, 7];
/// Groups of 4 taps of the largest such kernel (7x7).
const MAX_PAIR_GROUPS: usize = 13;

/// The first and the last kernel row of group `g`'s taps (4 consecutive taps, flattened
/// row-major) in a `k x k` kernel: at most one row apart, as every row has 3 taps or more.
const fn group_rows(g: usize, k: usize) -> [usize; 2] {
    let first = g * TAPS_PER_GROUP;
    let last = first + TAPS_PER_GROUP - 1;
    let last = if last < k * k { last } else { k * k - 1 };
    [first / k, last / k]
}

/// A depthwise weight `[m, 1, k, k]` packed in fbgemm's tap order, made once per weight
/// storage: the taps flattened row-major, 4 per group.
struct PackedPairs {
    /// Kernel height and width.
    k: usize,
    /// Per output channel, per group: its 4 int8 weights as one i32 (little-endian, tap `4g`
    /// lowest; taps past the kernel hold 0, so an odd last tap pairs with a zero product).
    words: Vec<i32>,
    /// `sum w` of each output channel.
    sums: Vec<i32>,
    /// Per output channel: whether one of its pairs can leave int16.
    saturates: Vec<bool>,
}

impl PackedPairs {
    fn groups(&self) -> usize {
        (self.k * self.k).div_ceil(TAPS_PER_GROUP)
    }
}

fn pack_pairs(weight: &Tensor, w_zps: &[i32], m: usize, k: usize) -> Option<Arc<PackedPairs>> {
    super::weight_cache::prepared(weight, w_zps, || {
        let w = super::int_values(weight).ok()?;
        let taps = k * k;
        if w.len() != m * taps || !PAIR_KERNELS.contains(&k) {
            return None;
        }
        let groups = taps.div_ceil(TAPS_PER_GROUP);
        let mut words = Vec::with_capacity(m * groups);
        for oc_w in w.chunks(taps) {
            push_tap_words(oc_w, &mut words)?;
        }
        Some(PackedPairs {
            k,
            words,
            sums: w.chunks(taps).map(|c| c.iter().sum()).collect(),
            saturates: w.chunks(taps).map(channel_may_saturate).collect(),
        })
    })
}

/// Appends a run of int8 tap weights as little-endian words of [`TAPS_PER_GROUP`] bytes, the
/// last one zero-padded; `None` when a weight is not an int8 value.
fn push_tap_words(run: &[i32], words: &mut Vec<i32>) -> Option<()> {
    for group in run.chunks(TAPS_PER_GROUP) {
        let mut bytes = [0u8; TAPS_PER_GROUP];
        for (byte, &v) in bytes.iter_mut().zip(group) {
            *byte = i8::try_from(v).ok()? as u8;
        }
        words.push(i32::from_le_bytes(bytes));
    }
    Some(())
}

/// The byte indices `vpermi2b` gathers for each group of 4 flattened taps of a `k x k` kernel
/// from the group's two kernel rows (`group_rows`; the second's bytes at 64 and above): lane
/// `j`, byte `b` reads tap `t = 4 g + b` at `j * stride + (t % k) * dilation` of its row (0
/// for taps past the kernel, whose weights are 0).
fn pair_indices(k: usize, stride: usize, dil: usize) -> Vec<[u8; 64]> {
    (0..(k * k).div_ceil(TAPS_PER_GROUP))
        .map(|g| {
            let [first, last] = group_rows(g, k);
            std::array::from_fn(|i| {
                let (j, b) = (i / TAPS_PER_GROUP, i % TAPS_PER_GROUP);
                let t = g * TAPS_PER_GROUP + b;
                if t >= k * k {
                    return 0;
                }
                let second = usize::from(t / k != first && last != first) * 64;
                (j * stride + (t % k) * dil + second) as u8
            })
        })
        .collect()
}

/// How one call's planes are walked (all in elements of the padded input plane).
#[derive(Clone, Copy)]
struct Walk {
    /// Input plane `[ih, iw]`, padded plane `[ph, pw]`, output plane `[oh, ow]`.
    ih: usize,
    iw: usize,
    pw: usize,
    ph: usize,
    oh: usize,
    ow: usize,
    pad: [usize; 2],
    stride: [usize; 2],
    dil: [usize; 2],
    /// Output channels per input channel.
    m_per_c: usize,
}

/// Output channel `oc`'s plane of sums to bytes: `finish(oc, sums, out)`.
pub(super) type PlaneFinish<'a> = dyn Fn(usize, &[i32], &mut [u8]) + Sync + 'a;

/// How a call's planes are summed: per kernel row (exact), or in fbgemm's tap order.
enum Packing {
    /// The weights per kernel row, with each group's `vpermb` indices.
    Rows(Arc<PackedDepthwise>, Vec<[u8; 64]>),
    /// The weights in fbgemm's tap order, with each group's `vpermi2b` indices, the exact
    /// and the saturating kernel for the kernel size, and whether fbgemm's pairs saturate.
    Pairs {
        packed: Arc<PackedPairs>,
        idx: Vec<[u8; 64]>,
        kernels: [PairKernel; 2],
        saturate: bool,
    },
}

/// The requantized uint8 output `[n, m, oh, ow]` of a depthwise convolution, `finish(oc,
/// sums, out)` turning output channel `oc`'s plane of sums into bytes; `fbgemm_pairs`: the
/// sums saturate fbgemm's pairs of taps to int16 as its depthwise fast path does (the caller
/// checked the convolution takes it). `None` where the kernel does not serve it (see the
/// module's note).
pub(super) fn conv_quantized(
    c: &ConvOperands<'_>,
    fbgemm_pairs: bool,
    finish: &PlaneFinish<'_>,
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
    let ws = weight.shape();
    let shape = geo.input_shape;
    if !supported()
        || weight.dtype() != DType::QInt8
        || ws.len() != 4
        || shape.len() != 4
        || w_zps.iter().any(|&z| z != 0)
        || !(0..=255).contains(&x_zp)
    {
        return None;
    }
    let (m, kh, kw) = (ws[0], ws[2], ws[3]);
    let (n, c, ih, iw) = (shape[0], shape[1], shape[2], shape[3]);
    // one input channel per group; the depth dimension of the lifted geometry is trivial
    if ws[1] != 1 || geo.groups != c || c == 0 || !m.is_multiple_of(c) || out_spatial[0] != 1 {
        return None;
    }
    let lift = |v: i64| usize::try_from(v).ok();
    let (stride, pad, dil) = (
        [lift(geo.stride[1])?, lift(geo.stride[2])?],
        [lift(geo.pad[1])?, lift(geo.pad[2])?],
        [lift(geo.dilation[1])?, lift(geo.dilation[2])?],
    );
    let row_groups = kw.div_ceil(TAPS_PER_GROUP);
    // square 3x3, 5x5 and 7x7 kernels run in fbgemm's tap order whether or not they saturate
    // (fewer groups of 4 taps than per row), others per row (exact sums only)
    let pair_kernels = if kh == kw { pair_kernels(kw) } else { None };
    if fbgemm_pairs && pair_kernels.is_none() {
        return None;
    }
    // the 16 pixels' windows must lie in one 64-byte load
    let last_tap = if pair_kernels.is_some() {
        kw - 1
    } else {
        row_groups * TAPS_PER_GROUP - 1
    };
    let reach = (LANES - 1) * stride[1] + last_tap * dil[1];
    if kh == 0 || kw == 0 || kh * kw > MAX_TAPS || reach >= 64 || stride.contains(&0) {
        return None;
    }
    let packing = match pair_kernels {
        Some(kernels) => Packing::Pairs {
            packed: pack_pairs(weight, w_zps, m, kw)?,
            idx: pair_indices(kw, stride[1], dil[1]),
            kernels,
            saturate: fbgemm_pairs,
        },
        None => {
            let packed = pack(weight, w_zps, m, kh, kw)?;
            Packing::Rows(packed, window_indices(stride[1], dil[1], row_groups))
        }
    };
    let [_, oh, ow] = out_spatial;
    let walk = Walk {
        ih,
        iw,
        pw: iw + 2 * pad[1],
        ph: ih + 2 * pad[0],
        oh,
        ow,
        pad,
        stride,
        dil,
        m_per_c: m / c,
    };
    if (oh - 1) * stride[0] + (kh - 1) * dil[0] >= walk.ph
        || (ow - 1) * stride[1] + (kw - 1) * dil[1] >= walk.pw
    {
        return None;
    }
    let run = || -> crate::Result<Vec<u8>> {
        let ints = super::layout::planar_ints(x)?;
        let read = ints.read::<u8>()?;
        let src = read.as_slice().unwrap_or(&[]);
        if src.len() != n * c * ih * iw {
            return Err(crate::ops::kernels::size_mismatch(
                op,
                "the input's values",
                (n * c * ih * iw) as i64,
                src.len() as i64,
            ));
        }
        let plane = oh * ow;
        let mut out = vec![0u8; n * m * plane];
        // whole planes per task, so each task pads an input plane once per output channel
        let planes = n * m;
        let macs = planes * plane * kh * kw;
        let threads = rayon::current_num_threads().max(1);
        let par = macs >= PARALLEL_MACS && threads > 1 && planes > 1;
        let per_task = if par {
            planes.div_ceil(threads * 4).max(1)
        } else {
            planes
        };
        for_each_chunk_mut(&mut out, per_task * plane, par, &|k, dst| {
            let mut padded = vec![0u8; walk.ph * walk.pw + 64];
            let mut sums = vec![0i32; plane];
            for (i, out_plane) in dst.chunks_mut(plane).enumerate() {
                let p = k * per_task + i;
                let (b, oc) = (p / m, p % m);
                let ic = oc / walk.m_per_c;
                let input = &src[(b * c + ic) * ih * iw..][..ih * iw];
                pad_plane(input, x_zp, &walk, &mut padded);
                match &packing {
                    Packing::Rows(packed, idx) => {
                        let offset = x_zp.wrapping_neg().wrapping_mul(packed.sums[oc]);
                        let words = &packed.words[oc * kh * row_groups..][..kh * row_groups];
                        // SAFETY: the CPU has the kernel's features (`supported`); `padded`
                        // holds the padded plane plus 64 bytes, so every 64-byte load of an
                        // output row's kernel rows (at most `ph - 1`, checked above) lies
                        // inside it; `words` has `kh * groups` entries and `idx` `groups`
                        // vectors; `sums` holds `oh * ow`.
                        #[cfg(target_arch = "x86_64")]
                        unsafe {
                            vnni::plane(&padded, &walk, packed, words, idx, offset, &mut sums);
                        }
                    }
                    Packing::Pairs {
                        packed,
                        idx,
                        kernels,
                        saturate,
                    } => {
                        let offset = x_zp.wrapping_neg().wrapping_mul(packed.sums[oc]);
                        let groups = packed.groups();
                        let words = &packed.words[oc * groups..][..groups];
                        let kernel = kernels[usize::from(*saturate && packed.saturates[oc])];
                        // SAFETY: the CPU has the kernel's features (`supported`); `padded`
                        // holds the padded plane plus 64 bytes and every output row's kernel
                        // rows lie below `ph` (checked above), so every 64-byte row load lies
                        // inside it; `kernel` is the one for this `k x k` kernel, `words` and
                        // `idx` have an entry per group of its taps; `sums` holds `oh * ow`.
                        unsafe { kernel(&padded, &walk, words, idx, offset, &mut sums) };
                    }
                }
                finish(oc, &sums, out_plane);
            }
        });
        Ok(out)
    };
    Some(run())
}

/// The byte indices `vpermb` gathers for each group of 4 taps: lane `j`, byte `b` reads the
/// padded row at `j * stride + (4 g + b) * dilation` (0 for taps past the kernel, whose
/// weights are 0).
fn window_indices(stride: usize, dil: usize, groups: usize) -> Vec<[u8; 64]> {
    (0..groups)
        .map(|g| {
            std::array::from_fn(|i| {
                let (j, b) = (i / TAPS_PER_GROUP, i % TAPS_PER_GROUP);
                (j * stride + (g * TAPS_PER_GROUP + b) * dil) as u8
            })
        })
        .collect()
}

/// `input` (`[ih, iw]`) into `padded` (`[ph, pw]` plus slack) with the border holding `x_zp`.
fn pad_plane(input: &[u8], x_zp: i32, walk: &Walk, padded: &mut [u8]) {
    let zp = x_zp.clamp(0, 255) as u8;
    let [pt, pl] = walk.pad;
    let interior = pt * walk.pw..(pt + walk.ih) * walk.pw;
    padded[..interior.start].fill(zp);
    padded[interior.end..].fill(zp);
    for (row, line) in padded[interior]
        .chunks_mut(walk.pw)
        .zip(input.chunks(walk.iw))
    {
        row[..pl].fill(zp);
        row[pl..pl + walk.iw].copy_from_slice(line);
        row[pl + walk.iw..].fill(zp);
    }
}

/// A kernel summing one output channel's plane in fbgemm's tap order (`vnni::plane_pairs`).
type PairKernel = unsafe fn(&[u8], &Walk, &[i32], &[[u8; 64]], i32, &mut [i32]);

/// The exact and the saturating kernel for a `k x k` kernel (3, 5 or 7).
fn pair_kernels(k: usize) -> Option<[PairKernel; 2]> {
    #[cfg(target_arch = "x86_64")]
    {
        let kernels: [PairKernel; 2] = match k {
            3 => [vnni::plane_pairs::<3, false>, vnni::plane_pairs::<3, true>],
            5 => [vnni::plane_pairs::<5, false>, vnni::plane_pairs::<5, true>],
            7 => [vnni::plane_pairs::<7, false>, vnni::plane_pairs::<7, true>],
            _ => return None,
        };
        Some(kernels)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = k;
        None
    }
}

#[cfg(target_arch = "x86_64")]
mod vnni {
    use super::{group_rows, PackedDepthwise, Walk, LANES, MAX_PAIR_GROUPS, TAPS_PER_GROUP};
    use std::arch::x86_64::*;

    /// One output channel's plane of sums (`sum x * w + offset`) into `sums` (`[oh, ow]`).
    ///
    /// # Safety
    /// AVX-512 F/BW/VNNI/VBMI present; `padded` holds `[ph, pw]` plus 64 bytes, every output
    /// row's kernel rows lie below `ph`; `words` has `kh * groups` entries, `idx` `groups`;
    /// `sums` holds `oh * ow`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx512vbmi")]
    pub(super) unsafe fn plane(
        padded: &[u8],
        walk: &Walk,
        packed: &PackedDepthwise,
        words: &[i32],
        idx: &[[u8; 64]],
        offset: i32,
        sums: &mut [i32],
    ) {
        let groups = packed.groups;
        let start = _mm512_set1_epi32(offset);
        let base = padded.as_ptr();
        let [sh, sw] = walk.stride;
        for oy in 0..walk.oh {
            let out_row = sums.as_mut_ptr().add(oy * walk.ow);
            let mut ox = 0;
            while ox < walk.ow {
                let lanes = (walk.ow - ox).min(LANES);
                let mut acc = start;
                for ky in 0..packed.kh {
                    let row = (oy * sh + ky * walk.dil[0]) * walk.pw + ox * sw;
                    let v = _mm512_loadu_si512(base.add(row).cast());
                    for (g, perm) in idx.iter().enumerate() {
                        let perm = _mm512_loadu_si512(perm.as_ptr().cast());
                        let windows = _mm512_permutexvar_epi8(perm, v);
                        let w = _mm512_set1_epi32(words[ky * groups + g]);
                        acc = _mm512_dpbusd_epi32(acc, windows, w);
                    }
                }
                let mask: __mmask16 = if lanes == LANES {
                    0xffff
                } else {
                    (1u16 << lanes) - 1
                };
                _mm512_mask_storeu_epi32(out_row.add(ox).cast(), mask, acc);
                ox += LANES;
            }
        }
    }

    /// One output channel's plane of sums (`sum x * w + offset`) into `sums` (`[oh, ow]`),
    /// the taps of a `K x K` kernel in fbgemm's order: per group of 4 flattened taps, the
    /// windows gathered from its two kernel rows (`group_rows`); `SATURATE`: each pair of
    /// products summed into int16 with saturation (`vpmaddubsw`) then widened and added
    /// (`vpdpwssd` by ones), as fbgemm; else the exact `vpdpbusd`. `K` fixed, the groups
    /// unroll and their indices and weights stay in registers.
    ///
    /// # Safety
    /// AVX-512 F/BW/VNNI/VBMI present; `K <= 7`; `padded` holds `[ph, pw]` plus 64 bytes,
    /// every output row's `K` kernel rows lie below `ph`; `words` and `idx` have an entry per
    /// group of 4 of the `K * K` taps; `sums` holds `oh * ow`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx512vbmi")]
    pub(super) unsafe fn plane_pairs<const K: usize, const SATURATE: bool>(
        padded: &[u8],
        walk: &Walk,
        words: &[i32],
        idx: &[[u8; 64]],
        offset: i32,
        sums: &mut [i32],
    ) {
        let groups = (K * K).div_ceil(TAPS_PER_GROUP);
        let mut perms = [_mm512_setzero_si512(); MAX_PAIR_GROUPS];
        let mut weights = [_mm512_setzero_si512(); MAX_PAIR_GROUPS];
        for g in 0..groups {
            perms[g] = _mm512_loadu_si512(idx[g].as_ptr().cast());
            weights[g] = _mm512_set1_epi32(words[g]);
        }
        let start = _mm512_set1_epi32(offset);
        let ones = _mm512_set1_epi16(1);
        let base = padded.as_ptr();
        let [sh, sw] = walk.stride;
        for oy in 0..walk.oh {
            let out_row = sums.as_mut_ptr().add(oy * walk.ow);
            let mut ox = 0;
            while ox < walk.ow {
                let lanes = (walk.ow - ox).min(LANES);
                let mut rows = [_mm512_setzero_si512(); 7];
                for (r, row) in rows.iter_mut().enumerate().take(K) {
                    let at = (oy * sh + r * walk.dil[0]) * walk.pw + ox * sw;
                    *row = _mm512_loadu_si512(base.add(at).cast());
                }
                let mut acc = start;
                for g in 0..groups {
                    let [first, last] = group_rows(g, K);
                    let windows = _mm512_permutex2var_epi8(rows[first], perms[g], rows[last]);
                    acc = if SATURATE {
                        let pairs = _mm512_maddubs_epi16(windows, weights[g]);
                        _mm512_dpwssd_epi32(acc, pairs, ones)
                    } else {
                        _mm512_dpbusd_epi32(acc, windows, weights[g])
                    };
                }
                let mask: __mmask16 = if lanes == LANES {
                    0xffff
                } else {
                    (1u16 << lanes) - 1
                };
                _mm512_mask_storeu_epi32(out_row.add(ox).cast(), mask, acc);
                ox += LANES;
            }
        }
    }
}
