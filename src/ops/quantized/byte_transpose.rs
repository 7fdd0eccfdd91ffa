//! Byte-matrix transposes for the quantized kernels' layout changes: NCHW planes into the
//! channels-last rows the VNNI GEMM reads, and the GEMM's channels-last output blocks back into
//! NCHW planes. 16x16 blocks go through SSE2 byte interleaves (x86_64's baseline, so no
//! detection); partial blocks through 16-byte staging copies.

/// `dst[c * dst_stride + r] = src[r * src_stride + c]` for `r < rows`, `c < cols`. Returns
/// false (writing nothing) when a slice is too short for that.
pub(super) fn transpose(
    src: &[u8],
    src_stride: usize,
    rows: usize,
    cols: usize,
    dst: &mut [u8],
    dst_stride: usize,
) -> bool {
    if rows == 0 || cols == 0 {
        return true;
    }
    let reach = |count: usize, stride: usize, run: usize| {
        (count - 1)
            .checked_mul(stride)
            .and_then(|v| v.checked_add(run))
    };
    let fits = matches!(reach(rows, src_stride, cols), Some(n) if n <= src.len())
        && matches!(reach(cols, dst_stride, rows), Some(n) if n <= dst.len());
    if !fits {
        return false;
    }
    // SAFETY: every read `src[r * src_stride + c]` and write `dst[c * dst_stride + r]`
    // (r < rows, c < cols) lies inside its slice (checked above), and `dst` is borrowed
    // exclusively, so no one else writes it meanwhile.
    unsafe {
        transpose_raw(
            src.as_ptr(),
            src_stride,
            rows,
            cols,
            dst.as_mut_ptr(),
            dst_stride,
        )
    };
    true
}

/// [`transpose`] through raw pointers, for a destination whose other bytes other threads write
/// meanwhile (an NCHW output shared by row blocks).
///
/// # Safety
/// `src` readable at `r * src_stride + c` and `dst` writable at `c * dst_stride + r` for
/// every `r < rows`, `c < cols`, those bytes written by no one else meanwhile.
pub(super) unsafe fn transpose_raw(
    src: *const u8,
    src_stride: usize,
    rows: usize,
    cols: usize,
    dst: *mut u8,
    dst_stride: usize,
) {
    #[cfg(target_arch = "x86_64")]
    sse2::transpose(src, src_stride, rows, cols, dst, dst_stride);
    #[cfg(not(target_arch = "x86_64"))]
    for r in 0..rows {
        for c in 0..cols {
            *dst.add(c * dst_stride + r) = *src.add(r * src_stride + c);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod sse2 {
    use std::arch::x86_64::*;

    /// See [`super::transpose`].
    ///
    /// # Safety
    /// `src` readable at `r * src_stride + c` and `dst` writable at `c * dst_stride + r` for
    /// every `r < rows`, `c < cols`.
    pub(super) unsafe fn transpose(
        src: *const u8,
        src_stride: usize,
        rows: usize,
        cols: usize,
        dst: *mut u8,
        dst_stride: usize,
    ) {
        let mut r0 = 0;
        while r0 < rows {
            let kr = (rows - r0).min(16);
            let mut c0 = 0;
            while c0 < cols {
                let kc = (cols - c0).min(16);
                let mut v = [_mm_setzero_si128(); 16];
                for (i, reg) in v.iter_mut().enumerate().take(kr) {
                    let p = src.add((r0 + i) * src_stride + c0);
                    *reg = if kc == 16 {
                        _mm_loadu_si128(p.cast())
                    } else {
                        let mut staged = [0u8; 16];
                        std::ptr::copy_nonoverlapping(p, staged.as_mut_ptr(), kc);
                        _mm_loadu_si128(staged.as_ptr().cast())
                    };
                }
                let t = transpose16(v);
                for (j, reg) in t.iter().enumerate().take(kc) {
                    let q = dst.add((c0 + j) * dst_stride + r0);
                    if kr == 16 {
                        _mm_storeu_si128(q.cast(), *reg);
                    } else {
                        let mut staged = [0u8; 16];
                        _mm_storeu_si128(staged.as_mut_ptr().cast(), *reg);
                        std::ptr::copy_nonoverlapping(staged.as_ptr(), q, kr);
                    }
                }
                c0 += 16;
            }
            r0 += 16;
        }
    }

    /// A 16x16 byte transpose: four rounds of interleaving row `i` with row `i + 8` (the
    /// perfect shuffle, whose fourth power is the transpose).
    #[inline(always)]
    unsafe fn transpose16(mut x: [__m128i; 16]) -> [__m128i; 16] {
        for _ in 0..4 {
            let mut t = [_mm_setzero_si128(); 16];
            for i in 0..8 {
                t[2 * i] = _mm_unpacklo_epi8(x[i], x[i + 8]);
                t[2 * i + 1] = _mm_unpackhi_epi8(x[i], x[i + 8]);
            }
            x = t;
        }
        x
    }
}
