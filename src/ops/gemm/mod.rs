//! Single-precision GEMM for the nn kernels (convolution, linear): `C = act(A . B + bias +
//! residual)`, blocked and packed as BLIS/MLAS do, at the widest SIMD the CPU offers (detected at
//! run time: AVX-512, else AVX2 + FMA, else portable code).
//!
//! Operands can be packed once and reused ([`PackedA`], [`PackedB`], and the weight cache in
//! `pack.rs`), and convolution reads its B operand straight from the image ([`ImageOperand`]),
//! so no im2col matrix is ever materialized: each `KC x NC` block is gathered into a packed
//! panel that stays in cache.

mod gemv;
mod microkernel;
mod pack;

pub use gemv::{gemv_packed_b, gemv_packed_b_columns};
pub use pack::{
    cached_packed_a, cached_packed_a_row_scaled, cached_packed_b, cached_packed_b_col_scaled,
    is_packed_a_cached, is_packed_b_cached, is_scaled_packing_cached, DirectImage, ImageOperand,
    MatRef, PackedA, PackedB,
};

use crate::ops::kernels::vmath::{self, VecFn};
use crate::tensor::TensorError;
use pack::{pack_a, pack_b, BSource};
use std::cell::RefCell;
use std::sync::OnceLock;

/// Depth of one packed block (the shared dimension is reduced `KC` at a time).
pub(crate) const KC: usize = 256;
/// Columns of B packed at once (a `KC x NC` block is sized for L2).
const NC: usize = 512;
/// Rows of A packed at once when A is not pre-packed.
const MC: usize = 120;

/// The instruction set a GEMM runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isa {
    Avx512,
    /// AVX-512 with the 7 x 64 tile (see `microkernel::avx512_wide`); never detected, chosen
    /// by convolution when its shape fits that tile better.
    Avx512Wide,
    Avx2,
    Portable,
}

impl Isa {
    /// The widest instruction set this CPU supports (detected once).
    pub fn detected() -> Isa {
        static ISA: OnceLock<Isa> = OnceLock::new();
        *ISA.get_or_init(|| {
            [Isa::Avx512, Isa::Avx2]
                .into_iter()
                .find(|i| i.is_supported())
                .unwrap_or(Isa::Portable)
        })
    }

    /// Whether this CPU can run kernels of this instruction set.
    pub fn is_supported(self) -> bool {
        match self {
            Isa::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"),
            #[cfg(target_arch = "x86_64")]
            // AVX-512 here also means the AVX2 + FMA set (every such CPU has it; kernels
            // outside the GEMM rely on that)
            Isa::Avx512 | Isa::Avx512Wide => {
                is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx2")
                    && is_x86_feature_detected!("fma")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// Rows of the register tile.
    pub fn mr(self) -> usize {
        match self {
            Isa::Avx512 => microkernel::AVX512_MR,
            Isa::Avx512Wide => microkernel::AVX512_WIDE_MR,
            Isa::Avx2 => microkernel::AVX2_MR,
            Isa::Portable => microkernel::PORTABLE_MR,
        }
    }

    /// Columns of the register tile.
    pub fn nr(self) -> usize {
        match self {
            Isa::Avx512 => microkernel::AVX512_NR,
            Isa::Avx512Wide => microkernel::AVX512_WIDE_NR,
            Isa::Avx2 => microkernel::AVX2_NR,
            Isa::Portable => microkernel::PORTABLE_NR,
        }
    }

    /// One full `mr x nr` tile.
    ///
    /// # Safety
    /// `self.is_supported()`; `a` holds `kc * mr` floats, `b` `kc * nr`, `c` addresses an
    /// `mr x nr` tile with row stride `ldc`.
    #[inline]
    unsafe fn tile(
        self,
        kc: usize,
        a: *const f32,
        b: *const f32,
        c: *mut f32,
        ldc: usize,
        acc: bool,
    ) {
        match self {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => microkernel::avx512(kc, a, b, c, ldc, acc),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Wide => microkernel::avx512_wide(kc, a, b, c, ldc, acc),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => microkernel::avx2(kc, a, b, c, ldc, acc),
            _ => microkernel::portable(kc, a, b, c, ldc, acc),
        }
    }
}

/// Which GEMM the nn kernels (convolution, linear) run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The packed kernels of this module at an instruction set.
    Packed(Isa),
    /// The `gemm` crate with a materialized im2col (the earlier path, kept so both can be
    /// measured side by side in one build).
    GemmCrate,
}

/// The backend in use: the packed kernels at the detected instruction set, unless the
/// environment variable `TSRUN_GEMM` names another (`avx512`, `avx2`, `portable`, `crate`;
/// an instruction set this CPU lacks is ignored). Read once.
pub fn backend() -> Backend {
    static BACKEND: OnceLock<Backend> = OnceLock::new();
    *BACKEND.get_or_init(|| {
        let wanted = match std::env::var("TSRUN_GEMM").as_deref() {
            Ok("crate") => return Backend::GemmCrate,
            Ok("avx512") => Some(Isa::Avx512),
            Ok("avx2") => Some(Isa::Avx2),
            Ok("portable") => Some(Isa::Portable),
            _ => None,
        };
        Backend::Packed(
            wanted
                .filter(|i| i.is_supported())
                .unwrap_or_else(Isa::detected),
        )
    })
}

/// The activation applied last in the output pass (each computed as the unfused activation
/// kernel computes it, in float32, so fusing it changes no result).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Activation {
    Identity,
    /// `relu(x)` (NaN propagates, as `aten::relu`).
    Relu,
    /// `clamp(x, lo, hi)` (relu6 is `Clamp(0, 6)`, hardtanh in general).
    Clamp(f32, f32),
    /// `x * relu6(x + 3) / 6`.
    Hardswish,
    /// `relu6(x + 3) / 6`.
    Hardsigmoid,
    /// `x * sigmoid(x)`.
    Silu,
}

impl Activation {
    #[inline]
    fn apply(self, v: f32) -> f32 {
        match self {
            Activation::Identity => v,
            Activation::Relu => relu(v),
            Activation::Clamp(lo, hi) => clamp(v, lo, hi),
            Activation::Hardswish => v * (v + 3.0).clamp(0.0, 6.0) / 6.0,
            Activation::Hardsigmoid => (v + 3.0).clamp(0.0, 6.0) / 6.0,
            Activation::Silu => vmath::silu(v),
        }
    }

    /// Apply to every element of `xs` (one branch per slice, so each loop vectorizes).
    #[inline]
    pub fn apply_slice(self, xs: &mut [f32]) {
        match self {
            Activation::Identity => {}
            Activation::Relu => xs.iter_mut().for_each(|v| *v = relu(*v)),
            Activation::Clamp(lo, hi) => xs.iter_mut().for_each(|v| *v = clamp(*v, lo, hi)),
            Activation::Hardswish => xs
                .iter_mut()
                .for_each(|v| *v = Activation::Hardswish.apply(*v)),
            Activation::Hardsigmoid => xs
                .iter_mut()
                .for_each(|v| *v = Activation::Hardsigmoid.apply(*v)),
            // the vector code `aten::silu` runs (libm's scalar `expf` per element was a third
            // of efficientnet's time), the same bits as `vmath::silu` above
            Activation::Silu => vmath::apply(VecFn::Silu, xs),
        }
    }
}

/// `relu` as `aten::relu` computes it: NaN stays NaN.
#[inline(always)]
fn relu(v: f32) -> f32 {
    if v > 0.0 || v.is_nan() {
        v
    } else {
        0.0
    }
}

/// `clamp(v, lo, hi)` as `aten::clamp` computes it: NaN stays NaN.
#[inline(always)]
fn clamp(v: f32, lo: f32, hi: f32) -> f32 {
    if v.is_nan() {
        v
    } else {
        v.max(lo).min(hi)
    }
}

/// A bias added to every output of a row (conv: an output channel) or of a column (linear: an
/// output feature).
#[derive(Clone, Copy, Debug)]
pub enum Bias<'a> {
    None,
    PerRow(&'a [f32]),
    PerColumn(&'a [f32]),
}

/// What the output pass does after the product: `act(acc + bias + residual)`.
#[derive(Clone, Copy, Debug)]
pub struct Epilogue<'a> {
    pub bias: Bias<'a>,
    /// Added elementwise; laid out like C (same row stride).
    pub residual: Option<&'a [f32]>,
    pub activation: Activation,
}

impl Epilogue<'_> {
    /// Plain `C = A . B`.
    pub const NONE: Epilogue<'static> = Epilogue {
        bias: Bias::None,
        residual: None,
        activation: Activation::Identity,
    };
}

/// Where a task copies its finished part of C transposed (`T[j * ld + i] = C[i * ldc + j]`),
/// while the part is in cache; see [`sgemm_transposed`].
#[derive(Clone, Copy)]
struct TransposedOut {
    ptr: OutPtr,
    ld: usize,
    /// The CPU has AVX2 (8 x 8 blocks transposed in registers).
    avx2: bool,
}

/// The left operand.
#[derive(Clone, Copy)]
pub enum AOperand<'a> {
    Packed(&'a PackedA),
    Mat(MatRef<'a>),
    /// The transposed im2col matrix of an image (`l x k`: a row per output position), read in
    /// place as the B operand's image is.
    ImageT(ImageOperand<'a>),
    /// The same matrix read by the wide tile straight from a padded image, never packed
    /// (only with [`Isa::Avx512Wide`]).
    Direct(DirectImage<'a>),
}

/// The right operand.
#[derive(Clone, Copy)]
pub enum BOperand<'a> {
    Packed(&'a PackedB),
    Mat(MatRef<'a>),
    Image(ImageOperand<'a>),
}

fn gemm_err(msg: String) -> crate::Error {
    TensorError::Shape(format!("gemm: {msg}")).into()
}

/// Raw output pointer shared by the tasks of one call; each task writes its own rectangle.
#[derive(Clone, Copy, Debug)]
struct OutPtr(*mut f32);
// SAFETY: tasks of one call write disjoint rectangles of C (see `sgemm`), so sharing the
// pointer across the pool's threads creates no data race.
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

thread_local! {
    /// Per-thread packing buffers (A block, B block, one gathered row), reused across calls.
    static SCRATCH: RefCell<(Vec<f32>, Vec<f32>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new(), Vec::new())) };
}

/// `C[m x n] = epilogue(A[m x k] . B[k x n])`, C row-major with row stride `ldc`, using `isa`
/// (which must be supported; see [`Isa::detected`]) and, when `parallel`, the kernel team
/// (`ops::kernels::parallel::for_each_index`).
#[allow(clippy::too_many_arguments)]
pub fn sgemm(
    isa: Isa,
    m: usize,
    n: usize,
    k: usize,
    a: AOperand,
    b: BOperand,
    c: &mut [f32],
    ldc: usize,
    epi: &Epilogue,
    parallel: bool,
) -> crate::Result<()> {
    sgemm_impl(isa, m, n, k, a, b, c, ldc, epi, None, parallel)
}

/// [`sgemm`], and each finished part of C also copied transposed into `t` (`t[j * ldt + i] =
/// C[i * ldc + j]`) by the task that computed it, while it is in cache: convolution computed
/// as `image^T . weight^T` gets its channel-major output this way, C being scratch.
#[allow(clippy::too_many_arguments)]
pub fn sgemm_transposed(
    isa: Isa,
    m: usize,
    n: usize,
    k: usize,
    a: AOperand,
    b: BOperand,
    c: &mut [f32],
    ldc: usize,
    epi: &Epilogue,
    t: &mut [f32],
    ldt: usize,
    parallel: bool,
) -> crate::Result<()> {
    // an empty product writes nothing, so needs no room
    if m > 0 && n > 0 {
        let need = (n - 1).checked_mul(ldt).and_then(|v| v.checked_add(m));
        if ldt < m || need.is_none_or(|need| t.len() < need) {
            return Err(gemm_err(format!(
                "transposed output of {} floats with stride {ldt} for {m}x{n}",
                t.len()
            )));
        }
    }
    let t = TransposedOut {
        ptr: OutPtr(t.as_mut_ptr()),
        ld: ldt,
        avx2: isa != Isa::Portable && isa.is_supported(),
    };
    sgemm_impl(isa, m, n, k, a, b, c, ldc, epi, Some(t), parallel)
}

#[allow(clippy::too_many_arguments)]
fn sgemm_impl(
    isa: Isa,
    m: usize,
    n: usize,
    k: usize,
    a: AOperand,
    b: BOperand,
    c: &mut [f32],
    ldc: usize,
    epi: &Epilogue,
    transposed: Option<TransposedOut>,
    parallel: bool,
) -> crate::Result<()> {
    if !isa.is_supported() {
        return Err(gemm_err(format!("{isa:?} is not supported by this CPU")));
    }
    let a_dims = match a {
        AOperand::Packed(p) if p.isa != isa => {
            return Err(gemm_err(format!(
                "A packed for {:?}, run with {isa:?}",
                p.isa
            )))
        }
        AOperand::Packed(p) => (p.m, p.k),
        AOperand::Mat(mat) => (mat.rows(), mat.cols()),
        AOperand::ImageT(im) => (im.cols(), im.rows()),
        AOperand::Direct(_) if isa != Isa::Avx512Wide => {
            return Err(gemm_err(format!("a direct image operand run with {isa:?}")))
        }
        AOperand::Direct(d) => (d.rows(), d.cols()),
    };
    let b_dims = match b {
        BOperand::Packed(p) if p.isa != isa => {
            return Err(gemm_err(format!(
                "B packed for {:?}, run with {isa:?}",
                p.isa
            )))
        }
        BOperand::Packed(p) => (p.k, p.n),
        BOperand::Mat(mat) => (mat.rows(), mat.cols()),
        BOperand::Image(im) => (im.rows(), im.cols()),
    };
    if a_dims != (m, k) || b_dims != (k, n) {
        return Err(gemm_err(format!(
            "operands {a_dims:?} and {b_dims:?} do not form a {m}x{k} by {k}x{n} product"
        )));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    let c_len = (m - 1)
        .checked_mul(ldc)
        .and_then(|v| v.checked_add(n))
        .filter(|_| ldc >= n)
        .ok_or_else(|| gemm_err(format!("bad output stride {ldc}")))?;
    if c.len() < c_len {
        return Err(gemm_err(format!(
            "output of {} floats, need {c_len}",
            c.len()
        )));
    }
    match epi.bias {
        Bias::PerRow(v) if v.len() != m => {
            return Err(gemm_err(format!("{} row biases for {m} rows", v.len())))
        }
        Bias::PerColumn(v) if v.len() != n => {
            return Err(gemm_err(format!(
                "{} column biases for {n} columns",
                v.len()
            )))
        }
        _ => {}
    }
    if let Some(r) = epi.residual {
        if r.len() < c_len {
            return Err(gemm_err(format!(
                "residual of {} floats, need {c_len}",
                r.len()
            )));
        }
    }
    let (mr, nr) = (isa.mr(), isa.nr());
    // tasks: split the larger side in whole tiles, one task per thread
    let macs = m.saturating_mul(n).saturating_mul(k);
    let threads = if parallel && crate::tensor::split_work(macs, crate::tensor::PARALLEL_MACS) {
        rayon::current_num_threads().max(1)
    } else {
        1
    };
    let (col_tiles, row_tiles) = (n.div_ceil(nr), m.div_ceil(mr));
    let tasks: Vec<(usize, usize, usize, usize)> = if threads == 1 {
        vec![(0, m, 0, n)]
    } else if col_tiles >= row_tiles || col_tiles >= 4 * threads {
        split(col_tiles, threads)
            .map(|(t0, t1)| (0, m, t0 * nr, (t1 * nr).min(n)))
            .collect()
    } else {
        split(row_tiles, threads)
            .map(|(t0, t1)| (t0 * mr, (t1 * mr).min(m), 0, n))
            .collect()
    };
    let out = OutPtr(c.as_mut_ptr());
    let run = |&(i0, i1, j0, j1): &(usize, usize, usize, usize)| {
        SCRATCH.with(|s| {
            let mut s = s.borrow_mut();
            let (abuf, bbuf, row) = &mut *s;
            // SAFETY: the operands' extents were checked against (m, n, k) above and the
            // output against (m, n, ldc); this task touches only rows [i0, i1) x cols [j0, j1)
            // of C, disjoint from every other task's.
            unsafe {
                run_task(
                    isa,
                    k,
                    a,
                    b,
                    out,
                    ldc,
                    epi,
                    transposed,
                    (i0, i1, j0, j1),
                    abuf,
                    bbuf,
                    row,
                )
            }
        })
    };
    if tasks.len() > 1 {
        crate::ops::kernels::parallel::for_each_index(tasks.len(), &|t| {
            if let Some(task) = tasks.get(t) {
                run(task);
            }
        });
    } else {
        tasks.iter().for_each(run);
    }
    Ok(())
}

/// `total` items cut into `parts` contiguous ranges (empty ones dropped).
fn split(total: usize, parts: usize) -> impl Iterator<Item = (usize, usize)> {
    let per = total.div_ceil(parts.max(1)).max(1);
    (0..parts)
        .map(move |p| (p * per, ((p + 1) * per).min(total)))
        .filter(|(a, b)| a < b)
}

/// One task: rows `[i0, i1)` x columns `[j0, j1)` of C (i0 a multiple of MR, j0 of NR).
///
/// # Safety
/// As checked by `sgemm`: operand sizes match (m, n, k), `out` addresses C with row stride
/// `ldc`, and no other thread touches this rectangle.
#[allow(clippy::too_many_arguments)]
unsafe fn run_task(
    isa: Isa,
    k: usize,
    a: AOperand,
    b: BOperand,
    out: OutPtr,
    ldc: usize,
    epi: &Epilogue,
    transposed: Option<TransposedOut>,
    (i0, i1, j0, j1): (usize, usize, usize, usize),
    abuf: &mut Vec<f32>,
    bbuf: &mut Vec<f32>,
    row: &mut Vec<f32>,
) {
    let (mr, nr) = (isa.mr(), isa.nr());
    let c = out.0;
    if k == 0 {
        for i in i0..i1 {
            std::slice::from_raw_parts_mut(c.add(i * ldc + j0), j1 - j0).fill(0.0);
        }
        epilogue(epi, transposed, c, ldc, (i0, i1, j0, j1));
        return;
    }
    let mut tile = [0f32; microkernel::MAX_TILE];
    // a 1x1 convolution's image on the 12 x 32 tile: whole panels read in place from its rows
    // (no packing), only a partial last panel packed
    let in_place = match b {
        #[cfg(target_arch = "x86_64")]
        BOperand::Image(im) if isa == Isa::Avx512 => {
            im.pointwise_rows().map(|img| (img, im.cols()))
        }
        _ => None,
    };
    // A row-major A is read in place by the AVX-512 kernel (a last partial panel too, by the
    // kernel for that many rows), unless B is (the strided-B kernel reads A packed)
    let a_in_place = match a {
        AOperand::Mat(mat)
            if isa == Isa::Avx512 && cfg!(target_arch = "x86_64") && in_place.is_none() =>
        {
            mat.row_major()
        }
        _ => None,
    };
    let mut jc = j0;
    while jc < j1 {
        let nc = NC.min(j1 - jc);
        // columns of this block read in place (whole panels)
        let direct_cols = in_place.map_or(0, |_| nc / nr * nr);
        let mut pc = 0;
        while pc < k {
            let kc = KC.min(k - pc);
            let bblock: &[f32] = match b {
                BOperand::Image(im) if in_place.is_some() => {
                    if row.len() < nc {
                        row.resize(nc, 0.0);
                    }
                    let rest = nc - direct_cols;
                    pack_into(bbuf, rest.div_ceil(nr) * nr * kc, |dst| {
                        if rest > 0 {
                            pack_b(
                                BSource::Image(im),
                                nr,
                                pc,
                                kc,
                                jc + direct_cols,
                                rest,
                                dst,
                                row,
                            )
                        }
                    })
                }
                BOperand::Packed(p) => p.block(pc, kc, jc),
                BOperand::Mat(mat) => pack_into(bbuf, nc.div_ceil(nr) * nr * kc, |dst| {
                    pack_b(BSource::Mat(mat), nr, pc, kc, jc, nc, dst, &mut [])
                }),
                BOperand::Image(im) => {
                    if row.len() < nc {
                        row.resize(nc, 0.0);
                    }
                    pack_into(bbuf, nc.div_ceil(nr) * nr * kc, |dst| {
                        pack_b(BSource::Image(im), nr, pc, kc, jc, nc, dst, row)
                    })
                }
            };
            let mut ic = i0;
            while ic < i1 {
                let mc = match a {
                    AOperand::Packed(_) => i1 - ic,
                    // whole panels, so only the last block of the task has a partial one
                    AOperand::Mat(_) | AOperand::ImageT(_) | AOperand::Direct(_) => {
                        (MC / mr * mr).min(i1 - ic)
                    }
                };
                // rows of this block before `packed_from` are read in place
                let packed_from = if a_in_place.is_some() { mc } else { 0 };
                let ablock: &[f32] = match a {
                    AOperand::Packed(p) => p.block(pc, kc, ic),
                    AOperand::Mat(mat) => {
                        let rows = mc - packed_from;
                        pack_into(abuf, rows.div_ceil(mr) * mr * kc, |dst| {
                            pack_a(&mat, mr, pc, kc, ic + packed_from, rows, dst)
                        })
                    }
                    // A's panel layout (kc groups of MR rows) is B's (kc rows of NR columns)
                    // for the transposed matrix
                    AOperand::ImageT(im) => {
                        if row.len() < mc {
                            row.resize(mc, 0.0);
                        }
                        pack_into(abuf, mc.div_ceil(mr) * mr * kc, |dst| {
                            pack_b(BSource::Image(im), mr, pc, kc, ic, mc, dst, row)
                        })
                    }
                    AOperand::Direct(_) => &[],
                };
                let mut jr = 0;
                while jr < nc {
                    let cols = nr.min(nc - jr);
                    let bp = bblock.as_ptr().add(jr.saturating_sub(direct_cols) * kc);
                    // in-place rows of A go 8 at a time (see `AVX512_ROWS_MR`)
                    let step = if a_in_place.is_some() {
                        microkernel::AVX512_ROWS_MR
                    } else {
                        mr
                    };
                    let mut ir = 0;
                    while ir < mc {
                        let rows = step.min(mc - ir);
                        let cp = c.add((ic + ir) * ldc + jc + jr);
                        // the in-place A kernel writes just its rows, so only a partial
                        // panel of columns needs the stack tile
                        let a_rows_in_place = a_in_place.is_some() && ir < packed_from;
                        let full = (rows == mr || a_rows_in_place) && cols == nr;
                        let (dst, ld) = if full {
                            (cp, ldc)
                        } else {
                            (tile.as_mut_ptr(), nr)
                        };
                        if let AOperand::Direct(d) = a {
                            direct_tile(&d, ic + ir, pc, kc, bp, dst, ld, full && pc > 0);
                        } else if let (Some((a0, lda)), true) = (a_in_place, a_rows_in_place) {
                            // rows [ic + ir, + rows) and depth [pc, pc + kc) lie inside A
                            // (checked against (m, k) by `sgemm`), so every element the
                            // kernel reads is one of the matrix's; `dst` has `rows` rows
                            #[cfg(target_arch = "x86_64")]
                            if let Some(kernel) = microkernel::avx512_rows_for(rows) {
                                kernel(
                                    kc,
                                    a0.add((ic + ir) * lda + pc),
                                    lda,
                                    bp,
                                    dst,
                                    ld,
                                    full && pc > 0,
                                );
                            }
                            #[cfg(not(target_arch = "x86_64"))]
                            let _ = (a0, lda);
                        } else if let (Some((img, il)), true) = (in_place, jr < direct_cols) {
                            // rows pc.. of the image, columns jc + jr.. (a whole panel: the
                            // image holds k rows of il >= jc + jr + nr columns)
                            #[cfg(target_arch = "x86_64")]
                            microkernel::avx512_strided_b(
                                kc,
                                ablock.as_ptr().add(ir * kc),
                                img.as_ptr().add(pc * il + jc + jr),
                                il,
                                dst,
                                ld,
                                full && pc > 0,
                            );
                            #[cfg(not(target_arch = "x86_64"))]
                            let _ = (img, il);
                        } else {
                            let ap = ablock.as_ptr().add((ir - packed_from) * kc);
                            isa.tile(kc, ap, bp, dst, ld, full && pc > 0);
                        }
                        if !full {
                            // edge tile: computed into the stack tile, now add the valid part
                            for r in 0..rows {
                                let dst = std::slice::from_raw_parts_mut(cp.add(r * ldc), cols);
                                let src = &tile[r * nr..r * nr + cols];
                                if pc > 0 {
                                    dst.iter_mut().zip(src).for_each(|(d, &v)| *d += v);
                                } else {
                                    dst.copy_from_slice(src);
                                }
                            }
                        }
                        ir += step;
                    }
                    jr += nr;
                }
                if pc + kc == k {
                    epilogue(epi, transposed, c, ldc, (ic, ic + mc, jc, jc + nc));
                }
                ic += mc;
            }
            pc += kc;
        }
        jc += nc;
    }
}

/// One wide tile of a direct image operand: positions `[i, i + 7)` (one output row, checked by
/// [`DirectImage::new`]), depth `[k0, k0 + kc)`.
///
/// # Safety
/// AVX-512F is available (`sgemm` accepts a direct operand only with [`Isa::Avx512Wide`]);
/// `i` is a multiple of 7 below the operand's rows and `[k0, k0 + kc)` lies within its depth;
/// `b` holds `kc * 64` floats and `c` addresses a `7 x 64` tile with row stride `ldc`.
#[allow(clippy::too_many_arguments)]
#[inline]
unsafe fn direct_tile(
    d: &DirectImage,
    i: usize,
    k0: usize,
    kc: usize,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    acc: bool,
) {
    #[cfg(target_arch = "x86_64")]
    {
        // DirectImage::new checked that every tap of every tile (a partial last one included)
        // lies inside src, so the kernel's reads stay in that one allocation
        let a = d.src().as_ptr().add(d.base(i));
        let offsets = d.offsets()[k0..k0 + kc].as_ptr();
        if d.col_step() == 1 {
            microkernel::avx512_wide_direct::<1>(kc, a, offsets, b, c, ldc, acc);
        } else {
            microkernel::avx512_wide_direct::<2>(kc, a, offsets, b, c, ldc, acc);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (d, i, k0, kc, b, c, ldc, acc);
}

/// `buf` grown to `len`, filled by `fill`, returned as the filled part.
fn pack_into(buf: &mut Vec<f32>, len: usize, fill: impl FnOnce(&mut [f32])) -> &[f32] {
    if buf.len() < len {
        buf.resize(len, 0.0);
    }
    fill(&mut buf[..len]);
    &buf[..len]
}

/// The output pass over rows `[i0, i1)` x cols `[j0, j1)` of C, then the transposed copy.
///
/// # Safety
/// The rectangle lies inside C (row stride `ldc`) and belongs to the caller's task; `t` was
/// checked by [`sgemm_transposed`].
unsafe fn epilogue(
    epi: &Epilogue,
    t: Option<TransposedOut>,
    c: *mut f32,
    ldc: usize,
    (i0, i1, j0, j1): (usize, usize, usize, usize),
) {
    output_pass(epi, c, ldc, i0, i1, j0, j1);
    if let Some(t) = t {
        copy_transposed(t, c, ldc, (i0, i1, j0, j1));
    }
}

/// `T[j * ld + i] = C[i * ldc + j]` over a rectangle: 8 x 8 blocks in AVX2 registers where
/// the CPU has it, the edges (and everything without AVX2) element by element.
///
/// # Safety
/// The rectangle lies inside C and belongs to the caller's task; `sgemm_transposed` checked
/// that T holds `(n - 1) * ld + m` floats and borrows it mutably for the call, so the
/// transposed rectangle lies inside T and no other task or thread writes it.
unsafe fn copy_transposed(
    t: TransposedOut,
    c: *const f32,
    ldc: usize,
    (i0, i1, j0, j1): (usize, usize, usize, usize),
) {
    let (dst, ld) = (t.ptr.0, t.ld);
    let (mut i8_end, mut j8_end) = (i0, j0);
    #[cfg(target_arch = "x86_64")]
    if t.avx2 {
        i8_end = i0 + (i1 - i0) / 8 * 8;
        j8_end = j0 + (j1 - j0) / 8 * 8;
        for i in (i0..i8_end).step_by(8) {
            for j in (j0..j8_end).step_by(8) {
                transpose8x8(c.add(i * ldc + j), ldc, dst.add(j * ld + i), ld);
            }
        }
    }
    let scalar = |(ia, ib): (usize, usize), (ja, jb): (usize, usize)| {
        for i in ia..ib {
            for j in ja..jb {
                *dst.add(j * ld + i) = *c.add(i * ldc + j);
            }
        }
    };
    // the right strip of the 8 x 8 blocks' rows, then every row below them
    scalar((i0, i8_end), (j8_end, j1));
    scalar((i8_end, i1), (j0, j1));
}

/// `dst[j * ldd + i] = src[i * lds + j]` for `i < rows`, `j < cols`: 8 x 8 blocks in AVX2
/// registers where the CPU has it, the edges element by element. Does nothing when a slice is
/// too short for that rectangle (or a stride narrower than it).
pub(crate) fn transpose_into(
    src: &[f32],
    lds: usize,
    dst: &mut [f32],
    ldd: usize,
    rows: usize,
    cols: usize,
) {
    if rows == 0 || cols == 0 || lds < cols || ldd < rows {
        return;
    }
    let fits = |len: usize, n: usize, ld: usize, w: usize| {
        (n - 1)
            .checked_mul(ld)
            .and_then(|v| v.checked_add(w))
            .is_some_and(|need| need <= len)
    };
    if !fits(src.len(), rows, lds, cols) || !fits(dst.len(), cols, ldd, rows) {
        return;
    }
    let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
    let (mut i8_end, mut j8_end) = (0, 0);
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        (i8_end, j8_end) = (rows / 8 * 8, cols / 8 * 8);
        for i in (0..i8_end).step_by(8) {
            for j in (0..j8_end).step_by(8) {
                // SAFETY: AVX2 was detected; rows i..i+8 x cols j..j+8 of src and the
                // transposed block of dst lie inside the slices (checked by `fits` above).
                unsafe { transpose8x8(s.add(i * lds + j), lds, d.add(j * ldd + i), ldd) };
            }
        }
    }
    // the right strip of the 8 x 8 blocks' rows, then every row below them
    for (ia, ib, ja, jb) in [(0, i8_end, j8_end, cols), (i8_end, rows, 0, cols)] {
        for i in ia..ib {
            for j in ja..jb {
                dst[j * ldd + i] = src[i * lds + j];
            }
        }
    }
}

/// One 8 x 8 block: `dst[j * ldd + i] = src[i * lds + j]`.
///
/// # Safety
/// AVX2 is available; both blocks lie inside their buffers.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn transpose8x8(src: *const f32, lds: usize, dst: *mut f32, ldd: usize) {
    use std::arch::x86_64::*;
    let r: [__m256; 8] = std::array::from_fn(|i| _mm256_loadu_ps(src.add(i * lds)));
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
    let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    let out = [
        _mm256_permute2f128_ps::<0x20>(u0, u4),
        _mm256_permute2f128_ps::<0x20>(u1, u5),
        _mm256_permute2f128_ps::<0x20>(u2, u6),
        _mm256_permute2f128_ps::<0x20>(u3, u7),
        _mm256_permute2f128_ps::<0x31>(u0, u4),
        _mm256_permute2f128_ps::<0x31>(u1, u5),
        _mm256_permute2f128_ps::<0x31>(u2, u6),
        _mm256_permute2f128_ps::<0x31>(u3, u7),
    ];
    for (j, v) in out.iter().enumerate() {
        _mm256_storeu_ps(dst.add(j * ldd), *v);
    }
}

/// Bias, residual and activation over rows `[i0, i1)` x cols `[j0, j1)` of C.
///
/// # Safety
/// As for [`epilogue`].
unsafe fn output_pass(
    epi: &Epilogue,
    c: *mut f32,
    ldc: usize,
    i0: usize,
    i1: usize,
    j0: usize,
    j1: usize,
) {
    if matches!(epi.bias, Bias::None)
        && epi.residual.is_none()
        && epi.activation == Activation::Identity
    {
        return;
    }
    for i in i0..i1 {
        let dst = std::slice::from_raw_parts_mut(c.add(i * ldc + j0), j1 - j0);
        match epi.bias {
            Bias::None => {}
            Bias::PerRow(b) => {
                let v = b[i];
                dst.iter_mut().for_each(|d| *d += v);
            }
            Bias::PerColumn(b) => dst.iter_mut().zip(&b[j0..j1]).for_each(|(d, &v)| *d += v),
        }
        if let Some(r) = epi.residual {
            dst.iter_mut()
                .zip(&r[i * ldc + j0..i * ldc + j1])
                .for_each(|(d, &v)| *d += v);
        }
        epi.activation.apply_slice(dst);
    }
}
