//! Vectorized f32 transcendental functions: exp, tanh, sigmoid, erf, gelu (erf and tanh forms)
//! and silu, applied in place over contiguous slices.
//!
//! Each function is written once as branch-free scalar code (range reduction, polynomial,
//! exponent bits, selects) that LLVM vectorizes; it is compiled three times, for AVX-512, for
//! AVX2+FMA and for the baseline target, and the widest the CPU supports is chosen at run time
//! (the processor behind a machine kind varies). Accuracy: exp, sigmoid and silu within 2 ulp,
//! tanh within 3 ulp, erf within 2e-7 relative; NaN propagates, infinities saturate as in libm,
//! exp underflows through the subnormals to 0.

use crate::tensor::{DType, Tensor, TensorError, PARALLEL_THRESHOLD};
use std::sync::OnceLock;

/// A vectorized elementwise function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum VecFn {
    Exp,
    Tanh,
    Sigmoid,
    Erf,
    /// `x * 0.5 * (1 + erf(x / sqrt(2)))` (gelu with `approximate="none"`).
    Gelu,
    /// `0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))`.
    GeluTanh,
    /// `x * sigmoid(x)`.
    Silu,
}

/// `xs[i] = f(xs[i])` at the widest SIMD level this CPU has.
pub(crate) fn apply(f: VecFn, xs: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    match level() {
        // SAFETY: `level` reported that the CPU supports the features these functions enable.
        Level::Avx512 => return unsafe { apply_avx512(f, xs) },
        // SAFETY: as above, for AVX2 and FMA.
        Level::Avx2 => return unsafe { apply_avx2(f, xs) },
        Level::Baseline => {}
    }
    apply_inline::<Separate>(f, xs)
}

/// `dst[i] = f(src[i])`; the slices must have the same length (a shorter one bounds the work).
pub(crate) fn map(f: VecFn, src: &[f32], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    dst[..n].copy_from_slice(&src[..n]);
    apply(f, &mut dst[..n]);
}

/// The widest SIMD level of this CPU the vector kernels are compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Level {
    Baseline,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

/// The level the kernels run at (detected once).
pub(crate) fn level() -> Level {
    static LEVEL: OnceLock<Level> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512dq")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("fma")
            {
                return Level::Avx512;
            }
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                return Level::Avx2;
            }
        }
        Level::Baseline
    })
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
unsafe fn apply_avx512(f: VecFn, xs: &mut [f32]) {
    apply_inline::<Fused>(f, xs)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn apply_avx2(f: VecFn, xs: &mut [f32]) {
    apply_inline::<Fused>(f, xs)
}

/// The loops, inlined into each target-feature wrapper so each gets its own vector code. The
/// functions are called by name inside the loop (not passed as `impl Fn` values): a function
/// item passed as a value is called through its `Fn::call` shim, which LLVM left out of line,
/// compiled without the wrapper's features, one scalar call per element.
///
/// `M` says whether erf's and gelu's polynomial steps are fused multiply-adds (the AVX levels
/// have FMA; gelu is most of a transformer's time outside its matrix products). The other
/// functions keep separate multiplies and adds: the LSTM's batch-one step calls the scalar
/// `sigmoid` and `tanh` below and must match the batched step's vector calls bit for bit.
#[inline(always)]
fn apply_inline<M: MulAdd>(f: VecFn, xs: &mut [f32]) {
    macro_rules! each {
        ($g:ident::<$m:ty>) => {
            for x in xs.iter_mut() {
                *x = $g::<$m>(*x);
            }
        };
    }
    match f {
        VecFn::Exp => each!(exp_with::<Separate>),
        VecFn::Tanh => each!(tanh_with::<Separate>),
        VecFn::Sigmoid => each!(sigmoid_with::<Separate>),
        VecFn::Erf => each!(erf_with::<M>),
        VecFn::Gelu => each!(gelu_with::<M>),
        VecFn::GeluTanh => each!(gelu_tanh_with::<Separate>),
        VecFn::Silu => each!(silu_with::<Separate>),
    }
}

/// How a polynomial step `a * b + c` is computed. Rust never contracts `a * b + c` into one
/// instruction, so without this the AVX levels ran a multiply and an add per step; the fused
/// form rounds once (at least as accurate) but only pays off where the CPU has FMA (elsewhere
/// `mul_add` is a libm call).
trait MulAdd {
    fn mul_add(a: f32, b: f32, c: f32) -> f32;
}

/// `a * b + c` rounded twice (the baseline level, and the scalar functions below).
struct Separate;

/// `a * b + c` rounded once: one FMA instruction inside the AVX wrappers.
#[cfg(target_arch = "x86_64")]
struct Fused;

impl MulAdd for Separate {
    #[inline(always)]
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a * b + c
    }
}

#[cfg(target_arch = "x86_64")]
impl MulAdd for Fused {
    #[inline(always)]
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }
}

/// `e^x` for one element, as the baseline vector level computes it.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    exp_with::<Separate>(x)
}

/// `tanh(x)` for one element.
#[inline(always)]
pub(crate) fn tanh(x: f32) -> f32 {
    tanh_with::<Separate>(x)
}

/// `sigmoid(x)` for one element.
#[inline(always)]
pub(crate) fn sigmoid(x: f32) -> f32 {
    sigmoid_with::<Separate>(x)
}

/// `silu(x)` for one element.
#[inline(always)]
pub(crate) fn silu(x: f32) -> f32 {
    silu_with::<Separate>(x)
}

/// `gelu(x)` (erf form) for one element, as the baseline vector level computes it (the AVX
/// levels fuse its multiply-adds).
#[inline(always)]
pub(crate) fn gelu(x: f32) -> f32 {
    gelu_with::<Separate>(x)
}

/// `gelu(x)` (tanh form) for one element.
#[inline(always)]
pub(crate) fn gelu_tanh(x: f32) -> f32 {
    gelu_tanh_with::<Separate>(x)
}

/// `2^n` for integral `n` in [-150, 128] as two factors, so subnormal and infinite results come
/// out of the final multiplications instead of a wrapped exponent field.
#[inline(always)]
fn scale_pow2(p: f32, n: i32) -> f32 {
    let n1 = n >> 1;
    let n2 = n - n1;
    let f1 = f32::from_bits(((n1 + 127) as u32) << 23);
    let f2 = f32::from_bits(((n2 + 127) as u32) << 23);
    p * f1 * f2
}

/// `e^x` (Cephes expf: Cody-Waite reduction by ln 2, degree-5 polynomial).
#[inline(always)]
fn exp_with<M: MulAdd>(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // 1.5 * 2^23: adding it rounds to an integer held in the low mantissa bits.
    const SHIFTER: f32 = 12_582_912.0;
    let xc = x.clamp(-104.0, 89.0);
    let t = xc * LOG2E + SHIFTER;
    let n = (t.to_bits() as i32) - (SHIFTER.to_bits() as i32);
    let nf = t - SHIFTER;
    let r = xc - nf * LN2_HI - nf * LN2_LO;
    let mut p = 1.987_569_1e-4f32;
    p = M::mul_add(p, r, 1.398_2e-3);
    p = M::mul_add(p, r, 8.333_452e-3);
    p = M::mul_add(p, r, 4.166_579_6e-2);
    p = M::mul_add(p, r, 0.166_666_65);
    p = M::mul_add(p, r, 0.5);
    let e = p * r * r + r + 1.0;
    let y = scale_pow2(e, n);
    // clamp maps NaN to a bound; give NaN back
    if x.is_nan() {
        x
    } else {
        y
    }
}

/// `tanh(x)`: an odd polynomial below 0.625 (Cephes tanhf), `1 - 2 / (e^{2|x|} + 1)` above.
#[inline(always)]
fn tanh_with<M: MulAdd>(x: f32) -> f32 {
    let a = x.abs();
    let z = x * x;
    let mut p = -5.704_988_7e-3f32;
    p = M::mul_add(p, z, 2.063_909e-2);
    p = M::mul_add(p, z, -5.373_971_6e-2);
    p = M::mul_add(p, z, 0.133_314_42);
    p = M::mul_add(p, z, -0.333_332_8);
    let small = p * z * x + x;
    let large = (1.0 - 2.0 / (exp_with::<M>(2.0 * a) + 1.0)).copysign(x);
    if a < 0.625 {
        small
    } else {
        large
    }
}

/// `1 / (1 + e^{-x})`.
#[inline(always)]
fn sigmoid_with<M: MulAdd>(x: f32) -> f32 {
    1.0 / (1.0 + exp_with::<M>(-x))
}

#[inline(always)]
fn silu_with<M: MulAdd>(x: f32) -> f32 {
    x / (1.0 + exp_with::<M>(-x))
}

/// `erf(x)`: `x P(x^2)` below 1 and `1 - e^{-x^2} R(1 / (1 + x/2))` above, with least-squares
/// polynomials fitted to the float64 erf (relative error < 2e-7 below 1, absolute < 8e-8 above).
#[inline(always)]
fn erf_with<M: MulAdd>(x: f32) -> f32 {
    let a = x.abs();
    let z = x * x;
    let mut p = 7.971_049e-5f32;
    p = M::mul_add(p, z, -8.043_374e-4);
    p = M::mul_add(p, z, 5.191_833e-3);
    p = M::mul_add(p, z, -2.685_551e-2);
    p = M::mul_add(p, z, 0.112_836_22);
    p = M::mul_add(p, z, -0.376_126_3);
    p = M::mul_add(p, z, std::f32::consts::FRAC_2_SQRT_PI);
    let small = x * p;
    let t = 1.0 / (1.0 + 0.5 * a);
    let mut q = 0.119_314_94f32;
    q = M::mul_add(q, t, -0.471_235_34);
    q = M::mul_add(q, t, 0.563_538_1);
    q = M::mul_add(q, t, -0.103_998_03);
    q = M::mul_add(q, t, 0.348_064_93);
    q = M::mul_add(q, t, 0.259_592_5);
    q = M::mul_add(q, t, 0.284_930_4);
    q = M::mul_add(q, t, -1.555_509_7e-4);
    let large = (1.0 - exp_with::<M>(-z) * q).copysign(x);
    if a < 1.0 {
        small
    } else {
        large
    }
}

#[inline(always)]
fn gelu_with<M: MulAdd>(x: f32) -> f32 {
    x * 0.5 * (1.0 + erf_with::<M>(x * std::f32::consts::FRAC_1_SQRT_2))
}

#[inline(always)]
fn gelu_tanh_with<M: MulAdd>(x: f32) -> f32 {
    const K: f32 = std::f32::consts::FRAC_2_SQRT_PI * std::f32::consts::FRAC_1_SQRT_2;
    let inner = K * (x + 0.044715 * x * x * x);
    0.5 * x * (1.0 + tanh_with::<M>(inner))
}

/// Elements per rayon task.
const CHUNK: usize = 8 * 1024;

/// `f` over a contiguous float32 tensor into a fresh tensor; `None` for any other input (the
/// caller's generic path handles strides and other dtypes).
pub(crate) fn unary_f32(f: VecFn, x: &Tensor) -> crate::Result<Option<Tensor>> {
    if x.dtype() != DType::Float32 {
        return Ok(None);
    }
    let src_guard = x.read::<f32>()?;
    let Some(src) = src_guard.as_slice() else {
        return Ok(None);
    };
    let out = Tensor::empty(x.shape(), DType::Float32)?;
    let mut dst_guard = out.write::<f32>()?;
    let dst = dst_guard
        .as_slice_mut()
        .ok_or_else(|| TensorError::Value("fresh output is not contiguous".into()))?;
    let par = src.len() >= PARALLEL_THRESHOLD;
    super::map::zip_chunks(dst, src, CHUNK, par, |_, d, s| map(f, s, d));
    Ok(Some(out))
}

/// `out[i] (+)= dot(w[i*k .. (i+1)*k], x)` for `i < n`: a row-major `[n, k]` matrix times a
/// vector, without a GEMM's packing and blocking (a recurrent step multiplies a few thousand
/// elements, where that set-up costs more than the arithmetic). Panics-free: rows are bounded by
/// the slices' lengths.
pub(crate) fn matvec(w: &[f32], n: usize, k: usize, x: &[f32], out: &mut [f32], accumulate: bool) {
    #[cfg(target_arch = "x86_64")]
    match level() {
        // SAFETY: `level` reported that the CPU supports the features these functions enable.
        Level::Avx512 => return unsafe { matvec_avx512(w, n, k, x, out, accumulate) },
        // SAFETY: as above, for AVX2 and FMA.
        Level::Avx2 => return unsafe { matvec_avx2(w, n, k, x, out, accumulate) },
        Level::Baseline => {}
    }
    matvec_inline(w, n, k, x, out, accumulate)
}

/// Multiply-adds from which [`matvec_split`] shares the rows among the pool's threads (a
/// quarter megabyte of weights): a batch-1 classifier layer streams megabytes of weights,
/// which one core's memory bandwidth limits.
const MATVEC_PARALLEL_MACS: usize = 1 << 16;

/// [`matvec`] with the rows shared among the pool's threads when the product is large enough.
/// Each thread takes a multiple of four rows, so every row is summed as [`matvec`] sums it
/// and the result does not depend on the thread count.
pub(crate) fn matvec_split(
    w: &[f32],
    n: usize,
    k: usize,
    x: &[f32],
    out: &mut [f32],
    accumulate: bool,
) {
    let n = n.min(out.len());
    if !crate::tensor::split_work(n.saturating_mul(k), MATVEC_PARALLEL_MACS) {
        return matvec(w, n, k, x, out, accumulate);
    }
    let rows = n
        .div_ceil(rayon::current_num_threads().max(1))
        .next_multiple_of(4);
    super::parallel::for_each_chunk_mut(&mut out[..n], rows, true, &|i, o| {
        if let Some(wi) = w.get(i * rows * k..) {
            matvec(wi, o.len(), k, x, o, accumulate);
        }
    });
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
unsafe fn matvec_avx512(w: &[f32], n: usize, k: usize, x: &[f32], out: &mut [f32], acc: bool) {
    matvec_inline(w, n, k, x, out, acc)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn matvec_avx2(w: &[f32], n: usize, k: usize, x: &[f32], out: &mut [f32], acc: bool) {
    matvec_inline(w, n, k, x, out, acc)
}

#[inline(always)]
fn matvec_inline(w: &[f32], n: usize, k: usize, x: &[f32], out: &mut [f32], acc: bool) {
    if k == 0 {
        if !acc {
            out.iter_mut().take(n).for_each(|o| *o = 0.0);
        }
        return;
    }
    let x = &x[..k.min(x.len())];
    let n = n.min(out.len()).min(w.len() / k);
    let out = &mut out[..n];
    // Four rows per pass: each loaded piece of `x` feeds four rows' accumulators, so the
    // loop does four FMAs per load of `x` instead of one.
    let mut blocks = out.chunks_exact_mut(4);
    let mut w_blocks = w.chunks_exact(4 * k);
    for (o4, w4) in (&mut blocks).zip(&mut w_blocks) {
        let (r01, r23) = w4.split_at(2 * k);
        let (r0, r1) = r01.split_at(k);
        let (r2, r3) = r23.split_at(k);
        let d = dot4([r0, r1, r2, r3], x);
        for (o, d) in o4.iter_mut().zip(d) {
            *o = if acc { *o + d } else { d };
        }
    }
    let done = n - blocks.into_remainder().len();
    for (o, row) in out[done..].iter_mut().zip(w[done * k..].chunks_exact(k)) {
        let d = dot(row, x);
        *o = if acc { *o + d } else { d };
    }
}

/// Lanes per partial-sum vector: one AVX-512 register of f32 (two AVX2 registers).
const LANES: usize = 16;

/// Sum of the lanes by halving (a tree of vector adds, not a chain of `N` scalar adds); `N` a
/// power of two. Shared by the f32 dot products here and `rowwise`'s f64 statistics.
#[inline(always)]
pub(crate) fn reduce_lanes<T: Copy + std::ops::AddAssign, const N: usize>(mut acc: [T; N]) -> T {
    let mut width = N;
    while width > 1 {
        width /= 2;
        for j in 0..width {
            acc[j] += acc[j + width];
        }
    }
    acc[0]
}

/// Four dot products of rows with the same `x`, sharing its loads.
#[inline(always)]
fn dot4(rows: [&[f32]; 4], x: &[f32]) -> [f32; 4] {
    let mut acc = [[0.0f32; LANES]; 4];
    let full = x.len() / LANES * LANES;
    let it = rows[0][..full]
        .chunks_exact(LANES)
        .zip(rows[1][..full].chunks_exact(LANES))
        .zip(rows[2][..full].chunks_exact(LANES))
        .zip(rows[3][..full].chunks_exact(LANES))
        .zip(x[..full].chunks_exact(LANES));
    for ((((a, b), c), d), xs) in it {
        for j in 0..LANES {
            acc[0][j] += a[j] * xs[j];
            acc[1][j] += b[j] * xs[j];
            acc[2][j] += c[j] * xs[j];
            acc[3][j] += d[j] * xs[j];
        }
    }
    let mut sums = acc.map(reduce_lanes);
    for (r, sum) in rows.iter().zip(sums.iter_mut()) {
        *sum += r[full..]
            .iter()
            .zip(&x[full..])
            .map(|(a, b)| a * b)
            .sum::<f32>();
    }
    sums
}

/// A dot product with `LANES` independent partial sums (lane-wise adds vectorize without
/// reassociating a single running sum).
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for j in 0..LANES {
            acc[j] += x[j] * y[j];
        }
    }
    let mut tail = 0.0f32;
    for (x, y) in ra.iter().zip(rb) {
        tail += x * y;
    }
    reduce_lanes(acc) + tail
}
