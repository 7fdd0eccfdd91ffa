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
    // a packed panel is the strided case with rows NR apart
    avx512_strided_b(kc, a, b, AVX512_NR, c, ldc, accumulate)
}

/// [`avx512`] with B read in place from a row-major matrix (row `k` at `b + k * ldb`)
/// instead of a packed panel: the rows of a 1x1 convolution's image are already B's rows, so
/// whole 32-column panels need no packing.
///
/// # Safety
/// The CPU must support AVX-512F; `a` holds `kc * AVX512_MR` floats, `b + k * ldb` 32 floats
/// for every `k < kc`, and `c` addresses an `AVX512_MR x AVX512_NR` tile with row stride `ldc`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) unsafe fn avx512_strided_b(
    kc: usize,
    a: *const f32,
    b: *const f32,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
) {
    use std::arch::x86_64::*;
    const MR: usize = AVX512_MR;
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    for k in 0..kc {
        let bp = b.add(k * ldb);
        let b0 = _mm512_loadu_ps(bp);
        let b1 = _mm512_loadu_ps(bp.add(16));
        let ap = a.add(k * MR);
        for (i, row) in acc.iter_mut().enumerate() {
            let av = _mm512_set1_ps(*ap.add(i));
            row[0] = _mm512_fmadd_ps(av, b0, row[0]);
            row[1] = _mm512_fmadd_ps(av, b1, row[1]);
        }
    }
    store_avx512(&acc, c, ldc, accumulate);
}

/// Rows of the tile [`avx512_rows`] steps by: 8 x 32 (16 accumulators) rather than the
/// packed kernel's 12 x 32. It runs as fast on BERT's shapes, and about a tenth faster where
/// A's row stride is a multiple of 4 KiB (the FFN's second product, 1024 floats): twelve rows
/// that far apart share one set of the 8-way L1 cache and evict each other on every step,
/// eight do not. BERT's 128 tokens are also 16 x 8, with no partial tile.
pub(super) const AVX512_ROWS_MR: usize = 8;

/// [`avx512`] with A read in place rather than from a packed panel: row `i` of the tile's A
/// starts at `a + i * lda` and holds `kc` contiguous values (a row-major matrix). Linear
/// layers and attention multiply row-major activations; packing them (a transposing copy per
/// task and per thread) was a tenth of BERT's call. The products are the packed kernel's, in
/// the same order. `R` (at most `AVX512_ROWS_MR`) rows: the full tile, or the last rows of a
/// matrix whose height is not a multiple of it, computed in place too rather than packed and
/// padded.
///
/// # Safety
/// The CPU must support AVX-512F; `a + i * lda + k` is readable for `i < R`, `k < kc`; `b`
/// holds `kc * AVX512_NR` floats and `c` addresses an `R x AVX512_NR` tile with row stride
/// `ldc`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn avx512_rows<const R: usize>(
    kc: usize,
    a: *const f32,
    lda: usize,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
) {
    use std::arch::x86_64::*;
    const NR: usize = AVX512_NR;
    let rows: [*const f32; R] = std::array::from_fn(|i| a.add(i * lda));
    let mut acc = [[_mm512_setzero_ps(); 2]; R];
    for k in 0..kc {
        let bp = b.add(k * NR);
        let b0 = _mm512_loadu_ps(bp);
        let b1 = _mm512_loadu_ps(bp.add(16));
        for (row, r) in acc.iter_mut().zip(&rows) {
            let av = _mm512_set1_ps(*r.add(k));
            row[0] = _mm512_fmadd_ps(av, b0, row[0]);
            row[1] = _mm512_fmadd_ps(av, b1, row[1]);
        }
    }
    store_avx512(&acc, c, ldc, accumulate);
}

/// An [`avx512_rows`] kernel: `(kc, a, lda, b, c, ldc, accumulate)`.
#[cfg(target_arch = "x86_64")]
pub(super) type RowsKernel = unsafe fn(usize, *const f32, usize, *const f32, *mut f32, usize, bool);

/// The [`avx512_rows`] kernel for `rows` rows (1 to `AVX512_ROWS_MR`; `None` otherwise).
#[cfg(target_arch = "x86_64")]
pub(super) fn avx512_rows_for(rows: usize) -> Option<RowsKernel> {
    Some(match rows {
        8 => avx512_rows::<8>,
        7 => avx512_rows::<7>,
        6 => avx512_rows::<6>,
        5 => avx512_rows::<5>,
        4 => avx512_rows::<4>,
        3 => avx512_rows::<3>,
        2 => avx512_rows::<2>,
        1 => avx512_rows::<1>,
        _ => return None,
    })
}

/// Write (or add) `R` rows of 32 accumulators of [`avx512`] / [`avx512_rows`] to C.
///
/// # Safety
/// The CPU must support AVX-512F; `c` addresses an `R x AVX512_NR` tile with row stride
/// `ldc`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn store_avx512<const R: usize>(
    acc: &[[std::arch::x86_64::__m512; 2]; R],
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
) {
    use std::arch::x86_64::*;
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
/// `AVX512_WIDE_MR` / `AVX512_WIDE_NR`: the asm loop reads exactly `kc * 64` floats of `b`
/// and `kc * 7` of `a`, and writes nothing but its register operands.
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
    let mut acc = [[_mm512_setzero_ps(); 4]; AVX512_WIDE_MR];
    if kc > 0 {
        let [[c00, c01, c02, c03], [c10, c11, c12, c13], [c20, c21, c22, c23], [c30, c31, c32, c33], [c40, c41, c42, c43], [c50, c51, c52, c53], [c60, c61, c62, c63]] =
            &mut acc;
        let (mut bp, mut ap, mut k) = (b, a, kc);
        // One asm loop: 28 accumulators and 4 B vectors take all 32 zmm registers, so A is
        // broadcast from memory inside each FMA ({1to16}); written in Rust, the compiler
        // broadcasts into registers and spills accumulators on every step.
        std::arch::asm!(
            "2:",
            "vmovups {b0}, zmmword ptr [{bp} + 0]",
            "vmovups {b1}, zmmword ptr [{bp} + 64]",
            "vmovups {b2}, zmmword ptr [{bp} + 128]",
            "vmovups {b3}, zmmword ptr [{bp} + 192]",
            "vfmadd231ps {c00}, {b0}, dword ptr [{ap} + 0]{{1to16}}",
            "vfmadd231ps {c01}, {b1}, dword ptr [{ap} + 0]{{1to16}}",
            "vfmadd231ps {c02}, {b2}, dword ptr [{ap} + 0]{{1to16}}",
            "vfmadd231ps {c03}, {b3}, dword ptr [{ap} + 0]{{1to16}}",
            "vfmadd231ps {c10}, {b0}, dword ptr [{ap} + 4]{{1to16}}",
            "vfmadd231ps {c11}, {b1}, dword ptr [{ap} + 4]{{1to16}}",
            "vfmadd231ps {c12}, {b2}, dword ptr [{ap} + 4]{{1to16}}",
            "vfmadd231ps {c13}, {b3}, dword ptr [{ap} + 4]{{1to16}}",
            "vfmadd231ps {c20}, {b0}, dword ptr [{ap} + 8]{{1to16}}",
            "vfmadd231ps {c21}, {b1}, dword ptr [{ap} + 8]{{1to16}}",
            "vfmadd231ps {c22}, {b2}, dword ptr [{ap} + 8]{{1to16}}",
            "vfmadd231ps {c23}, {b3}, dword ptr [{ap} + 8]{{1to16}}",
            "vfmadd231ps {c30}, {b0}, dword ptr [{ap} + 12]{{1to16}}",
            "vfmadd231ps {c31}, {b1}, dword ptr [{ap} + 12]{{1to16}}",
            "vfmadd231ps {c32}, {b2}, dword ptr [{ap} + 12]{{1to16}}",
            "vfmadd231ps {c33}, {b3}, dword ptr [{ap} + 12]{{1to16}}",
            "vfmadd231ps {c40}, {b0}, dword ptr [{ap} + 16]{{1to16}}",
            "vfmadd231ps {c41}, {b1}, dword ptr [{ap} + 16]{{1to16}}",
            "vfmadd231ps {c42}, {b2}, dword ptr [{ap} + 16]{{1to16}}",
            "vfmadd231ps {c43}, {b3}, dword ptr [{ap} + 16]{{1to16}}",
            "vfmadd231ps {c50}, {b0}, dword ptr [{ap} + 20]{{1to16}}",
            "vfmadd231ps {c51}, {b1}, dword ptr [{ap} + 20]{{1to16}}",
            "vfmadd231ps {c52}, {b2}, dword ptr [{ap} + 20]{{1to16}}",
            "vfmadd231ps {c53}, {b3}, dword ptr [{ap} + 20]{{1to16}}",
            "vfmadd231ps {c60}, {b0}, dword ptr [{ap} + 24]{{1to16}}",
            "vfmadd231ps {c61}, {b1}, dword ptr [{ap} + 24]{{1to16}}",
            "vfmadd231ps {c62}, {b2}, dword ptr [{ap} + 24]{{1to16}}",
            "vfmadd231ps {c63}, {b3}, dword ptr [{ap} + 24]{{1to16}}",
            "add {bp}, 256",
            "add {ap}, 28",
            "dec {k}",
            "jnz 2b",
            bp = inout(reg) bp,
            ap = inout(reg) ap,
            k = inout(reg) k,
            b0 = out(zmm_reg) _,
            b1 = out(zmm_reg) _,
            b2 = out(zmm_reg) _,
            b3 = out(zmm_reg) _,
            c00 = inout(zmm_reg) *c00,
            c01 = inout(zmm_reg) *c01,
            c02 = inout(zmm_reg) *c02,
            c03 = inout(zmm_reg) *c03,
            c10 = inout(zmm_reg) *c10,
            c11 = inout(zmm_reg) *c11,
            c12 = inout(zmm_reg) *c12,
            c13 = inout(zmm_reg) *c13,
            c20 = inout(zmm_reg) *c20,
            c21 = inout(zmm_reg) *c21,
            c22 = inout(zmm_reg) *c22,
            c23 = inout(zmm_reg) *c23,
            c30 = inout(zmm_reg) *c30,
            c31 = inout(zmm_reg) *c31,
            c32 = inout(zmm_reg) *c32,
            c33 = inout(zmm_reg) *c33,
            c40 = inout(zmm_reg) *c40,
            c41 = inout(zmm_reg) *c41,
            c42 = inout(zmm_reg) *c42,
            c43 = inout(zmm_reg) *c43,
            c50 = inout(zmm_reg) *c50,
            c51 = inout(zmm_reg) *c51,
            c52 = inout(zmm_reg) *c52,
            c53 = inout(zmm_reg) *c53,
            c60 = inout(zmm_reg) *c60,
            c61 = inout(zmm_reg) *c61,
            c62 = inout(zmm_reg) *c62,
            c63 = inout(zmm_reg) *c63,
            options(nostack, readonly),
        );
        let _ = (bp, ap, k);
    }
    store_wide(&acc, c, ldc, accumulate);
}

/// The wide tile's accumulators into C (added to it when `accumulate`).
///
/// # Safety
/// AVX-512F is available; `c` addresses a `7 x 64` tile with row stride `ldc`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn store_wide(
    acc: &[[std::arch::x86_64::__m512; 4]; AVX512_WIDE_MR],
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
) {
    use std::arch::x86_64::*;
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

/// [`avx512_wide`] with A read in place from an image instead of a packed panel: row `i`,
/// depth `k` of the tile is `a[offsets[k] + i * S]` (a convolution's 7 neighbouring output
/// positions of one output row read tap `k` at input columns `S` apart, `S` the stride), so
/// the image is never unfolded or packed.
///
/// # Safety
/// The CPU must support AVX-512F; `offsets` holds `kc` values and, for each of them,
/// `a + offsets[k] + i * S` for `i < 7` lies inside one allocation; `b` holds `kc * 64` floats
/// and `c` addresses a `7 x 64` tile with row stride `ldc`. The asm loop reads exactly those
/// and writes nothing but its register operands.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn avx512_wide_direct<const S: usize>(
    kc: usize,
    a: *const f32,
    offsets: *const usize,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_ps(); 4]; AVX512_WIDE_MR];
    if kc > 0 {
        let [[c00, c01, c02, c03], [c10, c11, c12, c13], [c20, c21, c22, c23], [c30, c31, c32, c33], [c40, c41, c42, c43], [c50, c51, c52, c53], [c60, c61, c62, c63]] =
            &mut acc;
        let (mut bp, mut op, mut k) = (b, offsets, kc);
        std::arch::asm!(
            "2:",
            "mov {t}, qword ptr [{op}]",
            "vmovups {b0}, zmmword ptr [{bp} + 0]",
            "vmovups {b1}, zmmword ptr [{bp} + 64]",
            "vmovups {b2}, zmmword ptr [{bp} + 128]",
            "vmovups {b3}, zmmword ptr [{bp} + 192]",
            "lea {t}, [{ab} + {t} * 4]",
            "vfmadd231ps {c00}, {b0}, dword ptr [{t}]{{1to16}}",
            "vfmadd231ps {c01}, {b1}, dword ptr [{t}]{{1to16}}",
            "vfmadd231ps {c02}, {b2}, dword ptr [{t}]{{1to16}}",
            "vfmadd231ps {c03}, {b3}, dword ptr [{t}]{{1to16}}",
            "vfmadd231ps {c10}, {b0}, dword ptr [{t} + {d1}]{{1to16}}",
            "vfmadd231ps {c11}, {b1}, dword ptr [{t} + {d1}]{{1to16}}",
            "vfmadd231ps {c12}, {b2}, dword ptr [{t} + {d1}]{{1to16}}",
            "vfmadd231ps {c13}, {b3}, dword ptr [{t} + {d1}]{{1to16}}",
            "vfmadd231ps {c20}, {b0}, dword ptr [{t} + {d2}]{{1to16}}",
            "vfmadd231ps {c21}, {b1}, dword ptr [{t} + {d2}]{{1to16}}",
            "vfmadd231ps {c22}, {b2}, dword ptr [{t} + {d2}]{{1to16}}",
            "vfmadd231ps {c23}, {b3}, dword ptr [{t} + {d2}]{{1to16}}",
            "vfmadd231ps {c30}, {b0}, dword ptr [{t} + {d3}]{{1to16}}",
            "vfmadd231ps {c31}, {b1}, dword ptr [{t} + {d3}]{{1to16}}",
            "vfmadd231ps {c32}, {b2}, dword ptr [{t} + {d3}]{{1to16}}",
            "vfmadd231ps {c33}, {b3}, dword ptr [{t} + {d3}]{{1to16}}",
            "vfmadd231ps {c40}, {b0}, dword ptr [{t} + {d4}]{{1to16}}",
            "vfmadd231ps {c41}, {b1}, dword ptr [{t} + {d4}]{{1to16}}",
            "vfmadd231ps {c42}, {b2}, dword ptr [{t} + {d4}]{{1to16}}",
            "vfmadd231ps {c43}, {b3}, dword ptr [{t} + {d4}]{{1to16}}",
            "vfmadd231ps {c50}, {b0}, dword ptr [{t} + {d5}]{{1to16}}",
            "vfmadd231ps {c51}, {b1}, dword ptr [{t} + {d5}]{{1to16}}",
            "vfmadd231ps {c52}, {b2}, dword ptr [{t} + {d5}]{{1to16}}",
            "vfmadd231ps {c53}, {b3}, dword ptr [{t} + {d5}]{{1to16}}",
            "vfmadd231ps {c60}, {b0}, dword ptr [{t} + {d6}]{{1to16}}",
            "vfmadd231ps {c61}, {b1}, dword ptr [{t} + {d6}]{{1to16}}",
            "vfmadd231ps {c62}, {b2}, dword ptr [{t} + {d6}]{{1to16}}",
            "vfmadd231ps {c63}, {b3}, dword ptr [{t} + {d6}]{{1to16}}",
            "add {bp}, 256",
            "add {op}, 8",
            "dec {k}",
            "jnz 2b",
            d1 = const 4 * S,
            d2 = const 8 * S,
            d3 = const 12 * S,
            d4 = const 16 * S,
            d5 = const 20 * S,
            d6 = const 24 * S,
            ab = in(reg) a,
            t = out(reg) _,
            bp = inout(reg) bp,
            op = inout(reg) op,
            k = inout(reg) k,
            b0 = out(zmm_reg) _,
            b1 = out(zmm_reg) _,
            b2 = out(zmm_reg) _,
            b3 = out(zmm_reg) _,
            c00 = inout(zmm_reg) *c00,
            c01 = inout(zmm_reg) *c01,
            c02 = inout(zmm_reg) *c02,
            c03 = inout(zmm_reg) *c03,
            c10 = inout(zmm_reg) *c10,
            c11 = inout(zmm_reg) *c11,
            c12 = inout(zmm_reg) *c12,
            c13 = inout(zmm_reg) *c13,
            c20 = inout(zmm_reg) *c20,
            c21 = inout(zmm_reg) *c21,
            c22 = inout(zmm_reg) *c22,
            c23 = inout(zmm_reg) *c23,
            c30 = inout(zmm_reg) *c30,
            c31 = inout(zmm_reg) *c31,
            c32 = inout(zmm_reg) *c32,
            c33 = inout(zmm_reg) *c33,
            c40 = inout(zmm_reg) *c40,
            c41 = inout(zmm_reg) *c41,
            c42 = inout(zmm_reg) *c42,
            c43 = inout(zmm_reg) *c43,
            c50 = inout(zmm_reg) *c50,
            c51 = inout(zmm_reg) *c51,
            c52 = inout(zmm_reg) *c52,
            c53 = inout(zmm_reg) *c53,
            c60 = inout(zmm_reg) *c60,
            c61 = inout(zmm_reg) *c61,
            c62 = inout(zmm_reg) *c62,
            c63 = inout(zmm_reg) *c63,
            options(nostack, readonly),
        );
        let _ = (bp, op, k);
    }
    store_wide(&acc, c, ldc, accumulate);
}
