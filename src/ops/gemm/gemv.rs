//! One row times a packed B: `out (+)= x . B`, the product of a recurrent step (`h @ W_hh^T`)
//! and of batch-1 layers. A GEMM tile would waste all but one of its rows here; instead each
//! NR-column panel of B accumulates in registers along the depth, four panels at a time so
//! that enough independent FMA chains are in flight to hide the FMA latency.
//!
//! Every column is one chain of FMAs over the depth in the same order whichever panel group it
//! falls in, so a product restricted to some columns ([`gemv_packed_b_columns`]) gives those
//! columns bit for bit as the whole product does.

use super::microkernel::{AVX2_NR, AVX512_NR, AVX512_WIDE_NR, PORTABLE_NR};
use super::{Isa, PackedB, KC};
use std::ops::Range;

/// `out[j] += sum_k x[k] * B[k, j]` for `j < min(n, out.len())`. `x` shorter than B's depth
/// is treated as zero-padded.
pub fn gemv_packed_b(x: &[f32], b: &PackedB, out: &mut [f32]) {
    let n = b.n.min(out.len());
    gemv_packed_b_columns(x, b, std::slice::from_ref(&(0..n)), out)
}

/// The columns `ranges` of `x . B`, added to `out` in the order given (`out` holds the first
/// range's columns, then the second's, ...); columns past B's width or past `out` are skipped.
/// Each column comes out exactly as [`gemv_packed_b`] computes it. Panels of all the ranges
/// are grouped four at a time, so several short ranges (the gates of some hidden units) run
/// as fast as one long one.
pub fn gemv_packed_b_columns(x: &[f32], b: &PackedB, ranges: &[Range<usize>], out: &mut [f32]) {
    match b.isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a PackedB is only built for an instruction set the CPU supports
        // (`Isa::detected` / `backend`), and AVX-512 implies these features here.
        Isa::Avx512 => unsafe { gemv_avx512::<AVX512_NR>(x, b, ranges, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above (the wide tile is AVX-512 too, with wider panels).
        Isa::Avx512Wide => unsafe { gemv_avx512::<AVX512_WIDE_NR>(x, b, ranges, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above, for AVX2 and FMA.
        Isa::Avx2 => unsafe { gemv_avx2(x, b, ranges, out) },
        _ => gemv_inline::<PORTABLE_NR, false>(x, b, ranges, out),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
unsafe fn gemv_avx512<const NR: usize>(
    x: &[f32],
    b: &PackedB,
    ranges: &[Range<usize>],
    out: &mut [f32],
) {
    gemv_inline::<NR, true>(x, b, ranges, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn gemv_avx2(x: &[f32], b: &PackedB, ranges: &[Range<usize>], out: &mut [f32]) {
    gemv_inline::<AVX2_NR, true>(x, b, ranges, out)
}

#[inline(always)]
fn fma<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// One panel's share of a column range: panel `q`, its lanes `lanes`, added to `out` from
/// index `out_at` on.
#[derive(Clone, Copy, Default)]
struct PanelPart {
    q: usize,
    lanes: (usize, usize),
    out_at: usize,
}

/// The panels covering `ranges` (clipped to `n` columns and to `out_len` outputs), in order.
fn panel_parts<const NR: usize>(
    ranges: &[Range<usize>],
    n: usize,
    out_len: usize,
) -> impl Iterator<Item = PanelPart> + '_ {
    let starts = ranges.iter().scan(0usize, |at, r| {
        let start = *at;
        *at += r.len();
        Some(start)
    });
    ranges.iter().zip(starts).flat_map(move |(r, at)| {
        let end = r
            .end
            .min(n)
            .min(r.start.saturating_add(out_len.saturating_sub(at)));
        let start = r.start;
        (start / NR..end.div_ceil(NR)).filter_map(move |q| {
            let (lo, hi) = ((q * NR).max(start), ((q + 1) * NR).min(end));
            (lo < hi).then_some(PanelPart {
                q,
                lanes: (lo - q * NR, hi - q * NR),
                out_at: at + lo - start,
            })
        })
    })
}

#[inline(always)]
fn gemv_inline<const NR: usize, const FMA: bool>(
    x: &[f32],
    b: &PackedB,
    ranges: &[Range<usize>],
    out: &mut [f32],
) {
    let k = b.k.min(x.len());
    if NR != b.isa.nr() {
        return;
    }
    let mut k0 = 0;
    while k0 < k {
        let kc = KC.min(b.k - k0);
        let used = KC.min(k - k0);
        let xs = &x[k0..k0 + used];
        let block = b.block(k0, kc, 0);
        let panel = |q: usize| &block[q * kc * NR..(q + 1) * kc * NR];
        let mut parts = panel_parts::<NR>(ranges, b.n, out.len());
        loop {
            let mut group = [PanelPart::default(); 4];
            let mut len = 0;
            for slot in group.iter_mut() {
                match parts.next() {
                    Some(p) => {
                        *slot = p;
                        len += 1;
                    }
                    None => break,
                }
            }
            if len == 4 {
                let qs = [group[0].q, group[1].q, group[2].q, group[3].q];
                let Some(acc) = b.panel_sums::<NR, FMA>(k0, qs, xs) else {
                    return;
                };
                add_panel(out, &group[0], &acc[0]);
                add_panel(out, &group[1], &acc[1]);
                add_panel(out, &group[2], &acc[2]);
                add_panel(out, &group[3], &acc[3]);
                continue;
            }
            for part in &group[..len] {
                let p0 = panel(part.q);
                let mut acc = [0.0f32; NR];
                for (kk, &xv) in xs.iter().enumerate() {
                    let r0 = &p0[kk * NR..(kk + 1) * NR];
                    for j in 0..NR {
                        acc[j] = fma::<FMA>(r0[j], xv, acc[j]);
                    }
                }
                add_panel(out, part, &acc);
            }
            break;
        }
        k0 += kc;
    }
}

/// `out[part.out_at + i] += acc[lane]` for the lanes of `part`, in order. Every lane is
/// indexed by a constant (the loop unrolls): a lane range sliced out of `acc` would make the
/// accumulators addressable memory, and they would live on the stack instead of in registers
/// for the whole depth loop (twice as slow).
#[inline(always)]
fn add_panel<const NR: usize>(out: &mut [f32], part: &PanelPart, acc: &[f32; NR]) {
    let (lo, hi) = part.lanes;
    for (j, &a) in acc.iter().enumerate() {
        if (lo..hi).contains(&j) {
            if let Some(o) = out.get_mut(part.out_at + j - lo) {
                *o += a;
            }
        }
    }
}

/// Read access to a packing's panels, for kernels that stream them themselves with their own
/// epilogue (the LSTM step runs each hidden unit block's four gate panels together and its
/// cell arithmetic on the sums while they are in registers).
impl PackedB {
    /// The instruction set the panels are laid out for (panels are `isa().nr()` wide).
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// Rows of B (the reduced dimension).
    pub fn depth(&self) -> usize {
        self.k
    }

    /// Columns of B.
    pub fn width(&self) -> usize {
        self.n
    }

    /// Panel `q` (columns `q * NR .. (q + 1) * NR`, zero past the width) of the depth block
    /// starting at `k0` (a multiple of `KC`): `kc = min(KC, depth - k0)` rows of NR values, row
    /// after row. `None` outside the packing.
    pub fn panel(&self, k0: usize, q: usize) -> Option<&[f32]> {
        let nr = self.isa.nr();
        if !k0.is_multiple_of(KC) || k0 >= self.k || q >= self.n.div_ceil(nr) {
            return None;
        }
        let kc = KC.min(self.k - k0);
        self.block(k0, kc, 0).get(q * kc * nr..(q + 1) * kc * nr)
    }

    /// `x` times the panels `qs` of the depth block at `k0` (see [`PackedB::panel`]):
    /// `sums[p][j] = sum over kk of x[kk] * panel_p[kk][j]`, each column one chain of FMAs in
    /// the order of `x` (no longer than the block; a shorter `x` meets the block's first rows),
    /// the four panels' chains in flight together to hide the FMA latency. `None` when a panel
    /// is missing or NR is not this packing's panel width.
    #[inline(always)]
    pub fn panel_sums<const NR: usize, const FMA: bool>(
        &self,
        k0: usize,
        qs: [usize; 4],
        x: &[f32],
    ) -> Option<[[f32; NR]; 4]> {
        if NR != self.isa.nr() {
            return None;
        }
        let (p0, p1, p2, p3) = (
            self.panel(k0, qs[0])?,
            self.panel(k0, qs[1])?,
            self.panel(k0, qs[2])?,
            self.panel(k0, qs[3])?,
        );
        // the panels of one block have the same length
        if x.len() * NR > p0.len() {
            return None;
        }
        let mut acc = [[0.0f32; NR]; 4];
        for (kk, &xv) in x.iter().enumerate() {
            let r = kk * NR;
            let (r0, r1, r2, r3) = (
                &p0[r..r + NR],
                &p1[r..r + NR],
                &p2[r..r + NR],
                &p3[r..r + NR],
            );
            for j in 0..NR {
                acc[0][j] = fma::<FMA>(r0[j], xv, acc[0][j]);
                acc[1][j] = fma::<FMA>(r1[j], xv, acc[1][j]);
                acc[2][j] = fma::<FMA>(r2[j], xv, acc[2][j]);
                acc[3][j] = fma::<FMA>(r3[j], xv, acc[3][j]);
            }
        }
        Some(acc)
    }
}
