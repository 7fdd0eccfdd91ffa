//! The whole-buffer loops of `quantize_per_tensor`, `quantize_per_channel` and `dequantize`,
//! vectorized (AVX-512, AVX2, scalar fallback chosen at run time) with the bits of the
//! functions PyTorch runs on x86:
//!
//! - per tensor, 8 bits: fbgemm's `QuantizeAvx2` (its main loop and masked tail alike):
//!   `t = min(x * (1 / scale), 2147483520)` (`vminps`: a NaN product becomes the bound),
//!   `cvtps2dq` (ties to even; below -2^31 `i32::MIN`), plus the zero point in wrapping i32,
//!   clamped to the type's range;
//! - per channel and qint32: fbgemm's scalar `Quantize`: `zero_point + nearbyint(x * (1 /
//!   scale))` added in float, clamped in double, NaN converted as C does (`i32::MIN`, whose
//!   low byte is 0 for the 8-bit types);
//! - dequantize (per tensor and per channel): fbgemm's `scale * (q - zero_point)`.

/// The largest int32 below `i32::MAX` a float holds (`i32::MAX - 127`): fbgemm's clip before
/// converting, so a large product does not wrap to `i32::MIN`.
const INT32_FLOAT_MAX: f32 = 2147483520.0;

/// One lane of fbgemm's `QuantizeAvx2`: the value of `x` in `lo..=hi`.
#[inline]
pub(crate) fn fbgemm_vector_lane(x: f32, inv_scale: f32, zero_point: i32, lo: i32, hi: i32) -> i32 {
    let t = x * inv_scale;
    // `vminps(t, bound)` returns its second operand unless `t < bound` (so for a NaN too)
    let t = if t < INT32_FLOAT_MAX {
        t
    } else {
        INT32_FLOAT_MAX
    };
    let r = if t >= -2147483648.0 {
        super::round_ties_even(t) as i32
    } else {
        i32::MIN // CVTPS2DQ's "integer indefinite"
    };
    r.wrapping_add(zero_point).clamp(lo, hi)
}

/// fbgemm's scalar `Quantize` (ATen's `quantize_val`): the value of `x` in `lo..=hi`.
#[inline]
pub(crate) fn fbgemm_scalar(x: f32, inv_scale: f32, zero_point: i32, lo: i32, hi: i32) -> i32 {
    // `zero_point + nearbyint(..)` is a float sum
    let t = zero_point as f32 + super::round_ties_even(x * inv_scale);
    if t.is_nan() {
        // the clamp keeps a NaN and C's conversion of it gives `i32::MIN`, kept modulo the
        // type's width
        return match hi {
            255 => i32::from(i32::MIN as u8),
            127 => i32::from(i32::MIN as i8),
            _ => i32::MIN,
        };
    }
    (t as f64).clamp(f64::from(lo), f64::from(hi)) as i32
}

/// The 8-bit types the vector loops write (as their bytes).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Byte {
    /// quint8: 0..=255.
    Unsigned,
    /// qint8: -128..=127, stored two's complement.
    Signed,
}

impl Byte {
    pub(crate) fn range(self) -> (i32, i32) {
        match self {
            Byte::Unsigned => (0, 255),
            Byte::Signed => (-128, 127),
        }
    }
}

/// Which instructions the loops use on this CPU (detected once).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Isa {
    Avx512,
    Avx2,
    Scalar,
}

fn isa() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        use std::sync::OnceLock;
        static ISA: OnceLock<Isa> = OnceLock::new();
        *ISA.get_or_init(|| {
            if is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512vl")
            {
                Isa::Avx512
            } else if is_x86_feature_detected!("avx2") {
                Isa::Avx2
            } else {
                Isa::Scalar
            }
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        Isa::Scalar
    }
}

/// `out[i]` = fbgemm's `QuantizeAvx2` of `src[i]` (per-tensor quint8 / qint8), as bytes.
pub(crate) fn quantize_per_tensor_bytes(
    src: &[f32],
    inv_scale: f32,
    zero_point: i32,
    kind: Byte,
    out: &mut [u8],
) {
    let (lo, hi) = kind.range();
    let n = src.len().min(out.len());
    let (src, out) = (&src[..n], &mut out[..n]);
    #[cfg(target_arch = "x86_64")]
    match isa() {
        // SAFETY: the CPU has the features each function enables (`isa`).
        Isa::Avx512 => {
            return unsafe { x86::quantize_avx512(src, inv_scale, zero_point, lo, hi, out) }
        }
        Isa::Avx2 => return unsafe { x86::quantize_avx2(src, inv_scale, zero_point, kind, out) },
        Isa::Scalar => {}
    }
    for (o, &x) in out.iter_mut().zip(src) {
        *o = fbgemm_vector_lane(x, inv_scale, zero_point, lo, hi) as u8;
    }
}

/// `out[i]` = fbgemm's scalar `Quantize` of `src[i]` into `kind` (a run of one channel of a
/// per-channel quantization), as bytes.
pub(crate) fn quantize_scalar_rule_bytes(
    src: &[f32],
    inv_scale: f32,
    zero_point: i32,
    kind: Byte,
    out: &mut [u8],
) {
    let (lo, hi) = kind.range();
    let n = src.len().min(out.len());
    let (src, out) = (&src[..n], &mut out[..n]);
    #[cfg(target_arch = "x86_64")]
    if isa() == Isa::Avx512 {
        // SAFETY: the CPU has AVX-512 F, BW and VL (`isa`).
        return unsafe {
            x86::quantize_scalar_rule_avx512(src, inv_scale, zero_point, lo, hi, out)
        };
    }
    for (o, &x) in out.iter_mut().zip(src) {
        *o = fbgemm_scalar(x, inv_scale, zero_point, lo, hi) as u8;
    }
}

/// `out[i] = scale * (q[i] - zero_point)` of 8-bit values `q` (bytes of `kind`).
/// `zero_point` is within the type's range, so the difference is exact in i32.
pub(crate) fn dequantize_bytes(q: &[u8], kind: Byte, scale: f32, zero_point: i32, out: &mut [f32]) {
    let n = q.len().min(out.len());
    let (q, out) = (&q[..n], &mut out[..n]);
    #[cfg(target_arch = "x86_64")]
    match isa() {
        // SAFETY: the CPU has the features each function enables (`isa`).
        Isa::Avx512 => return unsafe { x86::dequantize_avx512(q, kind, scale, zero_point, out) },
        Isa::Avx2 => return unsafe { x86::dequantize_avx2(q, kind, scale, zero_point, out) },
        Isa::Scalar => {}
    }
    let value = |b: u8| match kind {
        Byte::Unsigned => i32::from(b),
        Byte::Signed => i32::from(b as i8),
    };
    for (o, &b) in out.iter_mut().zip(q) {
        *o = scale * (value(b) - zero_point) as f32;
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{fbgemm_scalar, fbgemm_vector_lane, Byte, INT32_FLOAT_MAX};
    use std::arch::x86_64::*;

    /// The lanes of a 16-wide step with `lanes` (1 to 16) elements.
    #[inline]
    fn mask16(lanes: usize) -> __mmask16 {
        if lanes >= 16 {
            0xffff
        } else {
            (1u16 << lanes) - 1
        }
    }

    /// [`super::quantize_per_tensor_bytes`], 16 lanes a step (the last one masked).
    ///
    /// # Safety
    /// AVX-512 F, BW and VL present; `out.len() == src.len()`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn quantize_avx512(
        src: &[f32],
        inv_scale: f32,
        zero_point: i32,
        lo: i32,
        hi: i32,
        out: &mut [u8],
    ) {
        let inv = _mm512_set1_ps(inv_scale);
        let bound = _mm512_set1_ps(INT32_FLOAT_MAX);
        let (zp, lo, hi) = (
            _mm512_set1_epi32(zero_point),
            _mm512_set1_epi32(lo),
            _mm512_set1_epi32(hi),
        );
        let n = src.len();
        let mut i = 0;
        while i < n {
            let mask = mask16(n - i);
            let x = _mm512_maskz_loadu_ps(mask, src.as_ptr().add(i));
            // operand order as fbgemm's: a NaN product takes the bound
            let t = _mm512_min_ps(_mm512_mul_ps(x, inv), bound);
            let r = _mm512_add_epi32(_mm512_cvtps_epi32(t), zp);
            let q = _mm512_min_epi32(_mm512_max_epi32(r, lo), hi);
            _mm_mask_storeu_epi8(
                out.as_mut_ptr().add(i).cast(),
                mask,
                _mm512_cvtepi32_epi8(q),
            );
            i += 16;
        }
    }

    /// [`super::quantize_per_tensor_bytes`] with AVX2, 8 lanes a step (as fbgemm's own loop),
    /// the tail lane by lane with the same rule.
    ///
    /// # Safety
    /// AVX2 present; `out.len() == src.len()`.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn quantize_avx2(
        src: &[f32],
        inv_scale: f32,
        zero_point: i32,
        kind: Byte,
        out: &mut [u8],
    ) {
        let (lo_s, hi_s) = kind.range();
        let inv = _mm256_set1_ps(inv_scale);
        let bound = _mm256_set1_ps(INT32_FLOAT_MAX);
        let (zp, lo, hi) = (
            _mm256_set1_epi32(zero_point),
            _mm256_set1_epi32(lo_s),
            _mm256_set1_epi32(hi_s),
        );
        let n = src.len();
        let body = n / 8 * 8;
        let mut i = 0;
        while i < body {
            let x = _mm256_loadu_ps(src.as_ptr().add(i));
            let t = _mm256_min_ps(_mm256_mul_ps(x, inv), bound);
            let r = _mm256_add_epi32(_mm256_cvtps_epi32(t), zp);
            let q = _mm256_min_epi32(_mm256_max_epi32(r, lo), hi);
            // the values fit the type, so the saturating packs keep them
            let words = _mm256_packs_epi32(q, q);
            let bytes = match kind {
                Byte::Unsigned => _mm256_packus_epi16(words, words),
                Byte::Signed => _mm256_packs_epi16(words, words),
            };
            // bytes 0..4 of each 128-bit half hold lanes 0..4 and 4..8
            let joined = _mm_unpacklo_epi32(
                _mm256_castsi256_si128(bytes),
                _mm256_extracti128_si256::<1>(bytes),
            );
            _mm_storel_epi64(out.as_mut_ptr().add(i).cast(), joined);
            i += 8;
        }
        for (o, &x) in out[body..].iter_mut().zip(&src[body..]) {
            *o = fbgemm_vector_lane(x, inv_scale, zero_point, lo_s, hi_s) as u8;
        }
    }

    /// [`super::quantize_scalar_rule_bytes`], 16 lanes a step (the last one masked).
    ///
    /// # Safety
    /// AVX-512 F, BW and VL present; `out.len() == src.len()`; `lo..=hi` an 8-bit range.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn quantize_scalar_rule_avx512(
        src: &[f32],
        inv_scale: f32,
        zero_point: i32,
        lo: i32,
        hi: i32,
        out: &mut [u8],
    ) {
        let nan_value = _mm512_set1_epi32(fbgemm_scalar(f32::NAN, 1.0, 0, lo, hi));
        let inv = _mm512_set1_ps(inv_scale);
        let zp = _mm512_set1_ps(zero_point as f32);
        // the 8-bit bounds are exact in float, so clamping in float is clamping in double
        let (lo, hi) = (_mm512_set1_ps(lo as f32), _mm512_set1_ps(hi as f32));
        let n = src.len();
        let mut i = 0;
        while i < n {
            let mask = mask16(n - i);
            let x = _mm512_maskz_loadu_ps(mask, src.as_ptr().add(i));
            let r = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                _mm512_mul_ps(x, inv),
            );
            let t = _mm512_add_ps(zp, r);
            let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(t, t);
            let q = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(t, lo), hi));
            let q = _mm512_mask_blend_epi32(nan, q, nan_value);
            _mm_mask_storeu_epi8(
                out.as_mut_ptr().add(i).cast(),
                mask,
                _mm512_cvtepi32_epi8(q),
            );
            i += 16;
        }
    }

    /// [`super::dequantize_bytes`], 16 lanes a step (the last one masked).
    ///
    /// # Safety
    /// AVX-512 F, BW and VL present; `out.len() == q.len()`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn dequantize_avx512(
        q: &[u8],
        kind: Byte,
        scale: f32,
        zero_point: i32,
        out: &mut [f32],
    ) {
        let (s, zp) = (_mm512_set1_ps(scale), _mm512_set1_epi32(zero_point));
        let n = q.len();
        let mut i = 0;
        while i < n {
            let mask = mask16(n - i);
            let bytes = _mm_maskz_loadu_epi8(mask, q.as_ptr().add(i).cast());
            let v = match kind {
                Byte::Unsigned => _mm512_cvtepu8_epi32(bytes),
                Byte::Signed => _mm512_cvtepi8_epi32(bytes),
            };
            let f = _mm512_mul_ps(s, _mm512_cvtepi32_ps(_mm512_sub_epi32(v, zp)));
            _mm512_mask_storeu_ps(out.as_mut_ptr().add(i), mask, f);
            i += 16;
        }
    }

    /// [`super::dequantize_bytes`] with AVX2, 8 lanes a step, the tail lane by lane.
    ///
    /// # Safety
    /// AVX2 present; `out.len() == q.len()`.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn dequantize_avx2(
        q: &[u8],
        kind: Byte,
        scale: f32,
        zero_point: i32,
        out: &mut [f32],
    ) {
        let (s, zp) = (_mm256_set1_ps(scale), _mm256_set1_epi32(zero_point));
        let n = q.len();
        let body = n / 8 * 8;
        let mut i = 0;
        while i < body {
            let bytes = _mm_loadl_epi64(q.as_ptr().add(i).cast());
            let v = match kind {
                Byte::Unsigned => _mm256_cvtepu8_epi32(bytes),
                Byte::Signed => _mm256_cvtepi8_epi32(bytes),
            };
            let f = _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_sub_epi32(v, zp)));
            _mm256_storeu_ps(out.as_mut_ptr().add(i), f);
            i += 8;
        }
        for (o, &b) in out[body..].iter_mut().zip(&q[body..]) {
            let v = match kind {
                Byte::Unsigned => i32::from(b),
                Byte::Signed => i32::from(b as i8),
            };
            *o = scale * (v - zero_point) as f32;
        }
    }
}
