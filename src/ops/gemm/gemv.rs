//! One row times a packed B: `out (+)= x . B`, the product of a recurrent step (`h @ W_hh^T`)
//! and of batch-1 layers. A GEMM tile would waste all but one of its rows here; instead each
//! NR-column panel of B accumulates in registers along the depth, four panels at a time so
//! that enough independent FMA chains are in flight to hide the FMA latency.

use super::microkernel::{AVX2_NR, AVX512_NR, PORTABLE_NR};
use super::{Isa, PackedB, KC};

/// `out[j] += sum_k x[k] * B[k, j]` for `j < min(n, out.len())`. `x` shorter than B's depth
/// is treated as zero-padded.
pub fn gemv_packed_b(x: &[f32], b: &PackedB, out: &mut [f32]) {
    match b.isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a PackedB is only built for an instruction set the CPU supports
        // (`Isa::detected` / `backend`), and AVX-512 implies these features here.
        Isa::Avx512 => unsafe { gemv_avx512(x, b, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above, for AVX2 and FMA.
        Isa::Avx2 => unsafe { gemv_avx2(x, b, out) },
        _ => gemv_inline::<PORTABLE_NR, false>(x, b, out),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
unsafe fn gemv_avx512(x: &[f32], b: &PackedB, out: &mut [f32]) {
    gemv_inline::<AVX512_NR, true>(x, b, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn gemv_avx2(x: &[f32], b: &PackedB, out: &mut [f32]) {
    gemv_inline::<AVX2_NR, true>(x, b, out)
}

#[inline(always)]
fn fma<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

#[inline(always)]
fn gemv_inline<const NR: usize, const FMA: bool>(x: &[f32], b: &PackedB, out: &mut [f32]) {
    let (k, n) = (b.k.min(x.len()), b.n.min(out.len()));
    if NR != b.isa.nr() || n == 0 {
        return;
    }
    let panels = n.div_ceil(NR);
    let mut k0 = 0;
    while k0 < k {
        let kc = KC.min(b.k - k0);
        let used = KC.min(k - k0);
        let xs = &x[k0..k0 + used];
        let block = b.block(k0, kc, 0);
        let panel = |q: usize| &block[q * kc * NR..(q + 1) * kc * NR];
        let mut q = 0;
        while q + 4 <= panels {
            let (p0, p1, p2, p3) = (panel(q), panel(q + 1), panel(q + 2), panel(q + 3));
            let mut acc = [[0.0f32; NR]; 4];
            for (kk, &xv) in xs.iter().enumerate() {
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
            for (p, a) in acc.iter().enumerate() {
                add_panel(out, (q + p) * NR, n, a);
            }
            q += 4;
        }
        while q < panels {
            let p0 = panel(q);
            let mut acc = [0.0f32; NR];
            for (kk, &xv) in xs.iter().enumerate() {
                let r0 = &p0[kk * NR..(kk + 1) * NR];
                for j in 0..NR {
                    acc[j] = fma::<FMA>(r0[j], xv, acc[j]);
                }
            }
            add_panel(out, q * NR, n, &acc);
            q += 1;
        }
        k0 += kc;
    }
}

/// `out[j0 + j] += acc[j]` for the columns of this panel that exist.
#[inline(always)]
fn add_panel(out: &mut [f32], j0: usize, n: usize, acc: &[f32]) {
    let len = acc.len().min(n.saturating_sub(j0));
    for (o, &a) in out[j0..j0 + len].iter_mut().zip(acc) {
        *o += a;
    }
}
