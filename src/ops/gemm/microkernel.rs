//! The register-blocked inner kernels: `C[MR x NR] (+)= A_panel[kc x MR]^T . B_panel[kc x NR]`
//! over packed panels (A panel: `kc` groups of MR values; B panel: `kc` rows of NR values).
//! One per instruction set, chosen once at run time (see [`super::Isa`]).

/// Accumulators of the portable kernel (MR x NR, row-major).
pub(super) const PORTABLE_MR: usize = 4;
pub(super) const PORTABLE_NR: usize = 16;
pub(super) const AVX2_MR: usize = 6;
pub(super) const AVX2_NR: usize = 16;
pub(super) const AVX512_MR: usize = 12;
pub(super) const AVX512_NR: usize = 32;
pub(super) const AVX512_WIDE_MR: usize = 7;
pub(super) const AVX512_WIDE_NR: usize = 64;

/// The largest tile of any kernel (sizes the stack tile used for partial edges).
pub(super) const MAX_TILE: usize = AVX512_WIDE_MR * AVX512_WIDE_NR;

/// Portable kernel: plain loops the compiler vectorizes for the baseline target.
///
/// # Safety
/// `a` must hold `kc * PORTABLE_MR` floats, `b` `kc * PORTABLE_NR`, and `c` must address a
/// `PORTABLE_MR x PORTABLE_NR` tile with row stride `ldc` (column stride 1).
pub(super) unsafe fn portable(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
) {
    const MR: usize = PORTABLE_MR;
    const NR: usize = PORTABLE_NR;
    let a = std::slice::from_raw_parts(a, kc * MR);
    let b = std::slice::from_raw_parts(b, kc * NR);
    let mut acc = [[0f32; NR]; MR];
    for (ak, bk) in a.chunks_exact(MR).zip(b.chunks_exact(NR)) {
        for (row, &av) in acc.iter_mut().zip(ak) {
            for (r, &bv) in row.iter_mut().zip(bk) {
                // no mul_add: without an FMA target it is a libm call per element
                *r += av * bv;
            }
        }
    }
    for (i, row) in acc.iter().enumerate() {
        let dst = std::slice::from_raw_parts_mut(c.add(i * ldc), NR);
        if accumulate {
            dst.iter_mut().zip(row).for_each(|(d, &v)| *d += v);
        } else {
            dst.copy_from_slice(row);
        }
    }
}

/// AVX2 + FMA kernel: 6 rows x 2 ymm (16 columns), 12 accumulators.
///
/// # Safety
/// The CPU must support AVX2 and FMA; buffer requirements as for [`portable`] with
/// `AVX2_MR` / `AVX2_NR`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn avx2(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
) {
    use std::arch::x86_64::*;
    const MR: usize = AVX2_MR;
    const NR: usize = AVX2_NR;
    let mut acc = [[_mm256_setzero_ps(); 2]; MR];
    for k in 0..kc {
        let bp = b.add(k * NR);
        let b0 = _mm256_loadu_ps(bp);
        let b1 = _mm256_loadu_ps(bp.add(8));
        let ap = a.add(k * MR);
        for (i, row) in acc.iter_mut().enumerate() {
            let av = _mm256_broadcast_ss(&*ap.add(i));
            row[0] = _mm256_fmadd_ps(av, b0, row[0]);
            row[1] = _mm256_fmadd_ps(av, b1, row[1]);
        }
    }
    for (i, row) in acc.iter().enumerate() {
        let p = c.add(i * ldc);
        if accumulate {
            _mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), row[0]));
            _mm256_storeu_ps(p.add(8), _mm256_add_ps(_mm256_loadu_ps(p.add(8)), row[1]));
        } else {
            _mm256_storeu_ps(p, row[0]);
            _mm256_storeu_ps(p.add(8), row[1]);
        }
    }
}

/// AVX-512 kernel: 12 rows x 2 zmm (32 columns), 24 accumulators.
///
/// # Safety
/// The CPU must support AVX-512F; buffer requirements as for [`portable`] with
/// `AVX512_MR` / `AVX512_NR`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn avx512(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
) {
    use std::arch::x86_64::*;
    const MR: usize = AVX512_MR;
    const NR: usize = AVX512_NR;
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    for k in 0..kc {
        let bp = b.add(k * NR);
        let b0 = _mm512_loadu_ps(bp);
        let b1 = _mm512_loadu_ps(bp.add(16));
        let ap = a.add(k * MR);
        for (i, row) in acc.iter_mut().enumerate() {
            let av = _mm512_set1_ps(*ap.add(i));
            row[0] = _mm512_fmadd_ps(av, b0, row[0]);
            row[1] = _mm512_fmadd_ps(av, b1, row[1]);
        }
    }
    for (i, row) in acc.iter().enumerate() {
        let p = c.add(i * ldc);
        if accumulate {
            _mm512_storeu_ps(p, _mm512_add_ps(_mm512_loadu_ps(p), row[0]));
            _mm512_storeu_ps(p.add(16), _mm512_add_ps(_mm512_loadu_ps(p.add(16)), row[1]));
        } else {
            _mm512_storeu_ps(p, row[0]);
            _mm512_storeu_ps(p.add(16), row[1]);
        }
    }
}

/// AVX-512 kernel with a wide tile: 7 rows x 4 zmm (64 columns), 28 accumulators, the A value
/// broadcast from memory. For convolution computed as `image^T . weight^T`: output channels
/// run along the 64 columns and spatial positions along the 7 rows, and 7 divides the spatial
/// sizes of 224-pixel networks (112^2, 56^2, 28^2, 14^2, 7^2), where the 12 x 32 tile wastes
/// up to a third of its work on 7 x 7 maps and an eighth on 64-channel layers.
///
/// # Safety
/// The CPU must support AVX-512F; buffer requirements as for [`portable`] with
/// `AVX512_WIDE_MR` / `AVX512_WIDE_NR`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn avx512_wide(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
) {
    use std::arch::x86_64::*;
    const MR: usize = AVX512_WIDE_MR;
    const NR: usize = AVX512_WIDE_NR;
    let mut acc = [[_mm512_setzero_ps(); 4]; MR];
    for k in 0..kc {
        let bp = b.add(k * NR);
        let bv = [
            _mm512_loadu_ps(bp),
            _mm512_loadu_ps(bp.add(16)),
            _mm512_loadu_ps(bp.add(32)),
            _mm512_loadu_ps(bp.add(48)),
        ];
        let ap = a.add(k * MR);
        for (i, row) in acc.iter_mut().enumerate() {
            let av = _mm512_set1_ps(*ap.add(i));
            for (r, &b) in row.iter_mut().zip(&bv) {
                *r = _mm512_fmadd_ps(av, b, *r);
            }
        }
    }
    for (i, row) in acc.iter().enumerate() {
        let p = c.add(i * ldc);
        for (q, &v) in row.iter().enumerate() {
            let pq = p.add(16 * q);
            if accumulate {
                _mm512_storeu_ps(pq, _mm512_add_ps(_mm512_loadu_ps(pq), v));
            } else {
                _mm512_storeu_ps(pq, v);
            }
        }
    }
}
