//! Kernels: LSTM / GRU / Elman RNN (multi-layer, bidirectional, batch_first, LSTM projections)
//! and their single-step cells. The input projection of a whole sequence is one GEMM per layer
//! and direction (with both biases folded in where the cell allows); the recurrent projection is a
//! matrix-vector product per step for small batches (a GEMM's set-up costs more there), and the
//! gate nonlinearities run vectorized over each gate's contiguous block. A float32 LSTM of batch
//! 1 fuses each step (the gates computed on the recurrent product's sums while they are in
//! registers) and computes its input projection in pieces, beside the steps on a second thread,
//! which then takes half of each step's hidden units.

use super::kernels::parallel;
use super::kernels::vmath::{self, VecFn};
use super::kernels::{
    check_rank, check_size, invalid_argument, shape_mismatch, size_mismatch, unsupported_feature,
};
use super::linalg::{
    compute_dtype, contiguous_as, dispatch_real_compute, gemm_strided, reshape, shape_err,
    slice_of, value_err, Mat, Real,
};
use super::{gemm, Args, Registry};
#[allow(unused_imports)]
use crate::tensor::Element as _;
use crate::tensor::RankRequirement;
use crate::tensor::{DType, Tensor};
use crate::values::{IValue, Tuple};
#[allow(unused_imports)]
use num_traits::{Float as _, One as _, Zero as _};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

#[derive(Clone, Copy, PartialEq, Debug)]
enum Cell {
    Lstm,
    Gru,
    Tanh,
    Relu,
}

impl Cell {
    fn gates(self) -> usize {
        match self {
            Cell::Lstm => 4,
            Cell::Gru => 3,
            Cell::Tanh | Cell::Relu => 1,
        }
    }
}

/// `out[m x n] (+)= a[m x k] @ w[n x k]^T`, all row-major.
fn mm_wt<T: Real>(a: &[T], m: usize, k: usize, w: &[T], n: usize, out: &mut [T], accumulate: bool) {
    // SAFETY: callers size a >= m*k, w >= n*k, out >= m*n (checked by the shape validation).
    unsafe {
        gemm_strided(
            m,
            n,
            k,
            out.as_mut_ptr(),
            n as isize,
            1,
            if accumulate { Some(T::one()) } else { None },
            Mat {
                ptr: a.as_ptr(),
                rs: k as isize,
                cs: 1,
            },
            Mat {
                ptr: w.as_ptr(),
                rs: 1,
                cs: k as isize,
            },
            T::one(),
            true,
        )
    }
}

/// Multiply-adds below which a layer's input projection stays on the calling thread. It runs
/// once per call, right before the steps, and the pool's threads are asleep by then (the last
/// call ended a whole sequence ago), so a split pays a wake-up (tens of microseconds on a
/// virtual machine) to save half of a GEMM that takes about as long (the reference tagger's,
/// 64 x 64 x 512, is 2 Mi multiply-adds, ~40 us on one AVX-512 core): it ran slower on 2
/// threads than on 1.
const INPUT_PROJ_PARALLEL_MACS: usize = 1 << 24;

/// The cell arithmetic per compute dtype: gate nonlinearities over contiguous slices and the
/// recurrent product `h @ W_hh^T`. float32 uses the vectorized kernels; float64 stays scalar.
trait CellMath: Real {
    fn sigmoid_inplace(xs: &mut [Self]);
    fn tanh_inplace(xs: &mut [Self]);
    /// `out[b x n] += h[b x k] @ w[n x k]^T`, through `packed` (w^T packed) when given.
    fn recurrent(
        h: &[Self],
        b: usize,
        k: usize,
        w: &[Self],
        n: usize,
        packed: Option<&gemm::PackedB>,
        out: &mut [Self],
    );
    /// `w [n x k]` (the tensor `tensor`) transposed and packed once, cached on its storage,
    /// where this dtype has a packed one-row product.
    fn pack_recurrent(
        _tensor: &Tensor,
        _w: &[Self],
        _k: usize,
        _n: usize,
    ) -> Option<Arc<gemm::PackedB>> {
        None
    }
    /// A whole LSTM layer and direction of batch 1 without projection (input projection and
    /// steps, see [`lstm_layer_fused`]), where this dtype and the packings allow: `Ok(false)`
    /// (nothing done) otherwise. `out` receives each step's h.
    fn lstm_layer_fused(
        _proj: &LayerProjection<'_, Self>,
        _sw: &StepWeights<'_, Self>,
        _reverse: bool,
        _h: &mut Vec<Self>,
        _c: &mut [Self],
        _out: &mut [Self],
    ) -> crate::Result<bool> {
        Ok(false)
    }
    /// The input projection of the whole sequence (all its rows).
    fn input_proj(p: &LayerProjection<'_, Self>) -> crate::Result<Vec<Self>> {
        Ok(input_proj(p.w_ih, p.biases, p.g, p.input, p.x, p.rows))
    }
}

impl CellMath for f32 {
    fn input_proj(p: &LayerProjection<'_, f32>) -> crate::Result<Vec<f32>> {
        let Some(packed) = PackedInputProj::new(p) else {
            return Ok(input_proj(p.w_ih, p.biases, p.g, p.input, p.x, p.rows));
        };
        let mut xg = vec![0.0f32; p.rows * p.g];
        let parallel = p.rows * p.g * p.input >= INPUT_PROJ_PARALLEL_MACS;
        packed.rows(0..p.rows, &mut xg, parallel)?;
        Ok(xg)
    }
    fn lstm_layer_fused(
        proj: &LayerProjection<'_, f32>,
        sw: &StepWeights<'_, f32>,
        reverse: bool,
        h: &mut Vec<f32>,
        c: &mut [f32],
        out: &mut [f32],
    ) -> crate::Result<bool> {
        let hs = sw.hidden;
        let Some(w) = sw.w_hh_packed.as_deref() else {
            return Ok(false);
        };
        if sw.w_hr.is_some()
            || !lstm_fused_fits(w, hs)
            || proj.g != 4 * hs
            || h.len() != hs
            || c.len() != hs
            || out.len() != proj.rows * hs
        {
            return Ok(false);
        }
        let Some(packed) = PackedInputProj::new(proj) else {
            return Ok(false);
        };
        lstm_layer_fused(&packed, w, reverse, h, c, out)?;
        Ok(true)
    }
    fn sigmoid_inplace(xs: &mut [f32]) {
        vmath::apply(VecFn::Sigmoid, xs)
    }
    fn tanh_inplace(xs: &mut [f32]) {
        vmath::apply(VecFn::Tanh, xs)
    }
    fn recurrent(
        h: &[f32],
        b: usize,
        k: usize,
        w: &[f32],
        n: usize,
        packed: Option<&gemm::PackedB>,
        out: &mut [f32],
    ) {
        // A GEMM's tile set-up costs more than a few one-row products.
        if b <= 4 {
            for (hr, o) in h
                .chunks_exact(k.max(1))
                .zip(out.chunks_exact_mut(n.max(1)))
                .take(b)
            {
                match packed {
                    Some(p) => gemm::gemv_packed_b(hr, p, o),
                    None => vmath::matvec(w, n, k, hr, o, true),
                }
            }
        } else {
            mm_wt(h, b, k, w, n, out, true)
        }
    }
    fn pack_recurrent(
        tensor: &Tensor,
        w: &[f32],
        k: usize,
        n: usize,
    ) -> Option<Arc<gemm::PackedB>> {
        let gemm::Backend::Packed(isa) = gemm::backend() else {
            return None;
        };
        let wt = gemm::MatRef::new(w, k, n, 1, k)?;
        Some(gemm::cached_packed_b(
            isa,
            tensor.storage(),
            tensor.storage_offset(),
            &wt,
        ))
    }
}

impl CellMath for f64 {
    fn sigmoid_inplace(xs: &mut [f64]) {
        xs.iter_mut().for_each(|x| *x = 1.0 / (1.0 + (-*x).exp()));
    }
    fn tanh_inplace(xs: &mut [f64]) {
        xs.iter_mut().for_each(|x| *x = x.tanh());
    }
    fn recurrent(
        h: &[f64],
        b: usize,
        k: usize,
        w: &[f64],
        n: usize,
        _packed: Option<&gemm::PackedB>,
        out: &mut [f64],
    ) {
        mm_wt(h, b, k, w, n, out, true)
    }
}

/// The input side of one layer and direction: `x [rows, input] @ W_ih^T + biases`, `W_ih`
/// being the tensor `tensor` (`[g, input]`, its contiguous values `w_ih`).
struct LayerProjection<'a, T> {
    tensor: &'a Tensor,
    w_ih: &'a [T],
    biases: &'a [&'a [T]],
    g: usize,
    input: usize,
    x: &'a [T],
    rows: usize,
}

/// The float32 input projection on the packed GEMM, ready for any rows: `W_ih^T` packed once
/// (cached on its storage, as `linear`'s weight; `Module::prepare` packs it ahead) and the
/// biases summed, added in the GEMM's output pass.
struct PackedInputProj<'a> {
    isa: gemm::Isa,
    w: Arc<gemm::PackedB>,
    bias: Option<Vec<f32>>,
    x: &'a [f32],
    input: usize,
    g: usize,
}

impl<'a> PackedInputProj<'a> {
    /// `None` off the packed GEMM backend or for an empty product.
    fn new(p: &LayerProjection<'a, f32>) -> Option<Self> {
        let gemm::Backend::Packed(isa) = gemm::backend() else {
            return None;
        };
        if p.rows == 0 || p.g == 0 || p.input == 0 || p.x.len() < p.rows * p.input {
            return None;
        }
        let wt = gemm::MatRef::new(p.w_ih, p.input, p.g, 1, p.input)?;
        let w = gemm::cached_packed_b(isa, p.tensor.storage(), p.tensor.storage_offset(), &wt);
        let bias = match p.biases {
            [] => None,
            [first, rest @ ..] => {
                let mut sum = first.to_vec();
                for b in rest {
                    sum.iter_mut().zip(b.iter()).for_each(|(s, &v)| *s += v);
                }
                Some(sum)
            }
        };
        Some(PackedInputProj {
            isa,
            w,
            bias,
            x: p.x,
            input: p.input,
            g: p.g,
        })
    }

    /// Rows `rows` of the projection into `out` (`rows.len() * g` values). A row comes out
    /// with the same bits whichever rows are computed with it (the GEMM reduces each output
    /// over the depth in one order).
    fn rows(&self, rows: Range<usize>, out: &mut [f32], parallel: bool) -> crate::Result<()> {
        let x = self
            .x
            .get(rows.start * self.input..rows.end * self.input)
            .and_then(|x| gemm::MatRef::new(x, rows.len(), self.input, self.input, 1))
            .ok_or_else(|| shape_err(format!("lstm: input rows {rows:?} out of range")))?;
        gemm::sgemm(
            self.isa,
            rows.len(),
            self.g,
            self.input,
            gemm::AOperand::Mat(x),
            gemm::BOperand::Packed(&self.w),
            out,
            self.g,
            &gemm::Epilogue {
                bias: self
                    .bias
                    .as_deref()
                    .map_or(gemm::Bias::None, gemm::Bias::PerColumn),
                ..gemm::Epilogue::NONE
            },
            parallel,
        )
    }
}

/// Steps per piece of the input projection when it is computed beside the steps: one row
/// panel of the AVX-512 GEMM tile (12 rows), about a quarter of the time the steps that use it
/// take, so a helper that has woken up stays ahead of the steps.
const PROJECTION_PIECE_STEPS: usize = 12;

/// A piece of the input projection, once computed (`None`: it failed).
type Piece = OnceLock<Option<Vec<f32>>>;

/// Marks a piece failed if its computation ends without a result (an error or a panic), so
/// the steps waiting for it stop instead of waiting forever.
struct PieceGuard<'a>(&'a Piece);

impl Drop for PieceGuard<'_> {
    fn drop(&mut self) {
        // a no-op when the piece was set
        let _ = self.0.set(None);
    }
}

/// A whole float32 LSTM layer and direction of batch 1: the input projection in pieces of
/// [`PROJECTION_PIECE_STEPS`] steps, claimed one at a time from a counter, and the steps
/// ([`lstm_step_fused`]), which take each piece when it is ready and compute it themselves
/// when nobody has claimed it yet. On one thread the steps compute every piece as they reach
/// it; with a second thread in the pool it computes the pieces ahead of the steps, so the
/// projection is off the steps' path but for the first piece, and then, when a step is large
/// enough ([`SPLIT_STEP_MIN_MACS`]), takes the second half of each step's hidden units
/// ([`SplitSteps`]). The steps never wait for work nobody does, and every value is the same
/// whoever computes it: the result has the same bits on any number of threads.
fn lstm_layer_fused(
    proj: &PackedInputProj<'_>,
    w: &gemm::PackedB,
    reverse: bool,
    h: &mut Vec<f32>,
    c: &mut [f32],
    out: &mut [f32],
) -> crate::Result<()> {
    let (hs, g) = (c.len(), proj.g);
    let steps = out.len() / hs.max(1);
    let pieces = steps.div_ceil(PROJECTION_PIECE_STEPS);
    // the time rows of piece `j` (pieces follow the step order)
    let rows_of = |j: usize| {
        let s0 = j * PROJECTION_PIECE_STEPS;
        let s1 = (s0 + PROJECTION_PIECE_STEPS).min(steps);
        if reverse {
            steps - s1..steps - s0
        } else {
            s0..s1
        }
    };
    let done: Vec<Piece> = (0..pieces).map(|_| OnceLock::new()).collect();
    let next = AtomicUsize::new(0);
    let failure: Mutex<Option<crate::Error>> = Mutex::new(None);
    let compute = |j: usize| {
        let Some(cell) = done.get(j) else { return };
        let _guard = PieceGuard(cell);
        let rows = rows_of(j);
        let mut buf = vec![0.0f32; rows.len() * g];
        match proj.rows(rows, &mut buf, false) {
            Ok(()) => {
                let _ = cell.set(Some(buf));
            }
            Err(e) => {
                let mut f = failure.lock().unwrap_or_else(|e| e.into_inner());
                f.get_or_insert(e);
            }
        }
    };
    // piece `j`, computed here unless another thread claimed it first
    let piece = |j: usize| -> Option<&[f32]> {
        let cell = done.get(j)?;
        if next
            .compare_exchange(j, j + 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            compute(j);
        }
        let mut polls = 0u32;
        loop {
            if let Some(p) = cell.get() {
                return p.as_deref();
            }
            // the other thread is computing it (a few microseconds), unless it was
            // descheduled: then give it the core
            pause(&mut polls);
        }
    };
    // step `s`'s input projection row and its time index
    let step_row = |s: usize| -> Option<(&[f32], usize)> {
        let j = s / PROJECTION_PIECE_STEPS;
        let rows = rows_of(j);
        let i = s - j * PROJECTION_PIECE_STEPS;
        // the piece's rows in step order
        let r = if reverse { rows.len() - 1 - i } else { i };
        Some((piece(j)?.get(r * g..)?.get(..g)?, rows.start + r))
    };
    // the projection pieces nobody has claimed yet
    let project_ahead = || loop {
        let j = next.fetch_add(1, Ordering::AcqRel);
        if j >= pieces {
            break;
        }
        compute(j);
    };
    let blocks = hs / w.isa().nr().max(1);
    let split = rayon::current_num_threads() > 1
        && blocks >= 2
        && 4 * hs * w.depth() >= SPLIT_STEP_MIN_MACS;
    let result = if split {
        let shared = SplitSteps::new(h, c, blocks / 2, w.isa().nr());
        let state = Mutex::new((&mut *h, &mut *c, &mut *out, Ok(())));
        parallel::for_each_index(2, &|_| {
            // the first thread in leads (it may be either task: a pool thread can claim
            // task 0 before the caller does); a lead that has finished makes the other return
            if shared.entered.fetch_add(1, Ordering::AcqRel) == 0 {
                let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
                let (h, c, out, result) = &mut *st;
                *result = shared.lead(w, steps, &step_row, h, c, out);
            } else {
                project_ahead();
                shared.help(w, steps, &step_row);
            }
        });
        state.into_inner().unwrap_or_else(|e| e.into_inner()).3
    } else {
        let state = Mutex::new((h, c, out, Ok(())));
        let run_steps = || {
            let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
            let (h, c, out, result) = &mut *st;
            let mut hnext = vec![0.0f32; hs];
            for s in 0..steps {
                let Some((xg, t)) = step_row(s) else {
                    *result = Err(value_err("lstm: input projection failed"));
                    return;
                };
                lstm_step_fused(h, w, xg, c, &mut hnext, 0..blocks);
                std::mem::swap(*h, &mut hnext);
                out[t * hs..][..hs].copy_from_slice(h);
            }
        };
        parallel::for_each_index(2, &|task| {
            if task == 0 {
                run_steps()
            } else {
                project_ahead()
            }
        });
        state.into_inner().unwrap_or_else(|e| e.into_inner()).3
    };
    if let Some(e) = failure.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(e);
    }
    result
}

/// Multiply-adds of one step's recurrent product (`4 hidden x depth`) from which a second pool
/// thread takes half of every step's hidden units. The two threads exchange `h` through shared
/// memory at every step (a few hundred nanoseconds); the reference tagger's step (hidden 128,
/// 64 Ki multiply-adds over 256 KiB of weights) takes about 3 us on one core, bound by the
/// weights' reads from L2, which the split shares between two cores' caches.
const SPLIT_STEP_MIN_MACS: usize = 1 << 15;

/// A spin-wait's poll: spins a while, then yields the core (the thread being waited for may
/// have been descheduled on a loaded machine).
fn pause(polls: &mut u32) {
    *polls = polls.wrapping_add(1);
    if *polls < 4096 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// A counter on its own cache line (the two threads poll each other's).
#[repr(align(128))]
struct PaddedCounter(AtomicUsize);

/// The state two threads share while they split the steps of an LSTM layer of batch 1: the
/// lead computes the first half of every step's hidden units (blocks `..half`) and the second
/// half too unless the helper has claimed it (`claimed_b`), so the steps never wait for a
/// helper that has not come. `h` alternates between two buffers: step `s` reads `h[s % 2]`
/// and writes `h[(s + 1) % 2]`, and neither thread starts step `s + 1` before both halves of
/// step `s` are done, so nobody writes a buffer the other still reads. The values are f32 bits
/// in atomics (relaxed), published by the counters' release stores.
struct SplitSteps {
    h: [Vec<AtomicU32>; 2],
    /// The cell state of the second half's units (the first half's stays with the lead).
    c_b: Vec<AtomicU32>,
    /// First blocks of panels the lead always computes (`blocks / 2`).
    half: usize,
    /// Units per block.
    nr: usize,
    /// Steps whose first half is done.
    done_a: PaddedCounter,
    /// Steps whose second half someone has claimed.
    claimed_b: PaddedCounter,
    /// Steps whose second half is done.
    done_b: PaddedCounter,
    /// Set when the lead returns, or when the helper fails: the other stops waiting.
    stop: AtomicBool,
    /// Threads that have entered (the first leads).
    entered: AtomicUsize,
}

/// Sets a flag when dropped (also when unwinding).
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

fn load_bits(src: &[AtomicU32], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = f32::from_bits(s.load(Ordering::Relaxed));
    }
}

fn store_bits(src: &[f32], dst: &[AtomicU32]) {
    for (s, d) in src.iter().zip(dst) {
        d.store(s.to_bits(), Ordering::Relaxed);
    }
}

impl SplitSteps {
    fn new(h: &[f32], c: &[f32], half: usize, nr: usize) -> Self {
        let bits = |xs: &[f32]| xs.iter().map(|x| AtomicU32::new(x.to_bits())).collect();
        SplitSteps {
            h: [bits(h), bits(h)],
            c_b: bits(c),
            half,
            nr,
            done_a: PaddedCounter(AtomicUsize::new(0)),
            claimed_b: PaddedCounter(AtomicUsize::new(0)),
            done_b: PaddedCounter(AtomicUsize::new(0)),
            stop: AtomicBool::new(false),
            entered: AtomicUsize::new(0),
        }
    }

    /// The units of the second half.
    fn b_units(&self, hidden: usize) -> Range<usize> {
        (self.half * self.nr).min(hidden)..hidden
    }

    /// Waits until `counter` reaches `target`; false when the other thread stopped first.
    fn wait_for(&self, counter: &PaddedCounter, target: usize) -> bool {
        let mut polls = 0u32;
        loop {
            if counter.0.load(Ordering::Acquire) >= target {
                return true;
            }
            if self.stop.load(Ordering::Acquire) {
                return counter.0.load(Ordering::Acquire) >= target;
            }
            pause(&mut polls);
        }
    }

    /// The second half of step `s` from `h_prev` (step `s`'s input), on `c` and `h_next`
    /// (full-width scratch of the calling thread), published through `done_b`.
    fn second_half(
        &self,
        w: &gemm::PackedB,
        xg: &[f32],
        s: usize,
        h_prev: &[f32],
        c: &mut [f32],
        h_next: &mut [f32],
    ) {
        let units = self.b_units(c.len());
        let blocks = c.len() / self.nr.max(1);
        load_bits(&self.c_b[units.clone()], &mut c[units.clone()]);
        lstm_step_fused(h_prev, w, xg, c, h_next, self.half..blocks);
        store_bits(&c[units.clone()], &self.c_b[units.clone()]);
        store_bits(&h_next[units.clone()], &self.h[(s + 1) % 2][units]);
        self.done_b.0.store(s + 1, Ordering::Release);
    }

    /// The lead's side: every step's first half, and its second half where the helper has not
    /// claimed it; `h`, `c` and `out` receive the results.
    fn lead<'p>(
        &self,
        w: &gemm::PackedB,
        steps: usize,
        step_row: &dyn Fn(usize) -> Option<(&'p [f32], usize)>,
        h: &mut [f32],
        c: &mut [f32],
        out: &mut [f32],
    ) -> crate::Result<()> {
        let _stop = SetOnDrop(&self.stop);
        let hs = c.len();
        let a_units = 0..(self.half * self.nr).min(hs);
        let b_units = self.b_units(hs);
        let helper_stopped = || value_err("lstm: the helper thread of the steps stopped");
        let mut h_next = vec![0.0f32; hs];
        let mut t_prev = 0;
        for s in 0..steps {
            if s > 0 {
                if !self.wait_for(&self.done_b, s) {
                    return Err(helper_stopped());
                }
                load_bits(&self.h[s % 2], h);
                out[t_prev * hs..][..hs].copy_from_slice(h);
            }
            let (xg, t) = step_row(s).ok_or_else(|| value_err("lstm: input projection failed"))?;
            t_prev = t;
            lstm_step_fused(h, w, xg, c, &mut h_next, 0..self.half);
            store_bits(
                &h_next[a_units.clone()],
                &self.h[(s + 1) % 2][a_units.clone()],
            );
            self.done_a.0.store(s + 1, Ordering::Release);
            if self
                .claimed_b
                .0
                .compare_exchange(s, s + 1, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                self.second_half(w, xg, s, h, c, &mut h_next);
            }
        }
        if steps > 0 {
            if !self.wait_for(&self.done_b, steps) {
                return Err(helper_stopped());
            }
            load_bits(&self.h[steps % 2], h);
            out[t_prev * hs..][..hs].copy_from_slice(h);
        }
        load_bits(&self.c_b[b_units.clone()], &mut c[b_units]);
        Ok(())
    }

    /// The helper's side: the second half of each step it claims once the step before is
    /// done, until the lead has claimed the last or returned.
    fn help<'p>(
        &self,
        w: &gemm::PackedB,
        steps: usize,
        step_row: &dyn Fn(usize) -> Option<(&'p [f32], usize)>,
    ) {
        let hs = self.c_b.len();
        let (mut h_prev, mut c, mut h_next) = (vec![0.0f32; hs], vec![0.0f32; hs], vec![0.0; hs]);
        let mut polls = 0u32;
        loop {
            if self.stop.load(Ordering::Acquire) {
                return;
            }
            let s = self.claimed_b.0.load(Ordering::Acquire);
            if s >= steps {
                return;
            }
            if self.done_a.0.load(Ordering::Acquire) < s
                || self.done_b.0.load(Ordering::Acquire) < s
            {
                pause(&mut polls);
                continue;
            }
            if self
                .claimed_b
                .0
                .compare_exchange(s, s + 1, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                continue;
            }
            polls = 0;
            // stops the lead's wait for this half if it is never done
            let stop = SetOnDrop(&self.stop);
            let Some((xg, _)) = step_row(s) else {
                return;
            };
            load_bits(&self.h[s % 2], &mut h_prev);
            self.second_half(w, xg, s, &h_prev, &mut c, &mut h_next);
            std::mem::forget(stop);
        }
    }
}

/// Whether [`lstm_step_fused`] can run an LSTM of `hidden` units over `w` (`W_hh^T` packed,
/// `hidden x 4 hidden`): each gate's columns must start on a panel boundary, so the hidden
/// size must be a multiple of the panel width, and the instruction set must have the kernel.
fn lstm_fused_fits(w: &gemm::PackedB, hidden: usize) -> bool {
    let nr = w.isa().nr();
    let kernel_nr = match w.isa() {
        gemm::Isa::Avx512 => FUSED_AVX512_NR,
        gemm::Isa::Avx2 | gemm::Isa::Portable => FUSED_NARROW_NR,
        gemm::Isa::Avx512Wide => 0,
    };
    nr == kernel_nr
        && hidden > 0
        && hidden.is_multiple_of(nr)
        && w.depth() == hidden
        && w.width() == 4 * hidden
}

/// Panel widths of the packings [`lstm_step_fused`] is compiled for (checked against the
/// packing's own, [`lstm_fused_fits`]).
const FUSED_AVX512_NR: usize = 32;
const FUSED_NARROW_NR: usize = 16;

/// One LSTM step of one row: `h = o * tanh(c)`, `c = f * c + i * g` with the gates `act(xg +
/// h_prev . W_hh^T)` (`xg` holds the input projection and both biases, gate order i, f, g, o).
/// For each block of NR hidden units the four gates' panels of the packed `W_hh^T` stream
/// together (NR-wide accumulators per gate, in registers along the depth), and the gate and
/// cell arithmetic runs on the sums right away: no gate buffer, one pass over the weights.
///
/// Every value is computed as the unfused step computes it (the same FMA chain per column,
/// then `xg +` the chain, the same scalar sigmoid / tanh, the same expressions), so the two
/// agree bit for bit. Computes the hidden units of the blocks `blocks` (NR units each; `c` and
/// `h` are full width, the other units untouched). Does nothing unless [`lstm_fused_fits`].
fn lstm_step_fused(
    h_prev: &[f32],
    w: &gemm::PackedB,
    xg: &[f32],
    c: &mut [f32],
    h: &mut [f32],
    blocks: Range<usize>,
) {
    if !lstm_fused_fits(w, c.len()) {
        return;
    }
    match w.isa() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a PackedB is only built for an instruction set the CPU supports, and
        // AVX-512 implies these features here (`gemm::Isa::is_supported`).
        gemm::Isa::Avx512 => unsafe { lstm_step_avx512(h_prev, w, xg, c, h, blocks) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above, for AVX2 and FMA.
        gemm::Isa::Avx2 => unsafe { lstm_step_avx2(h_prev, w, xg, c, h, blocks) },
        _ => lstm_step_inline::<FUSED_NARROW_NR, false>(h_prev, w, xg, c, h, blocks),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2,fma")]
unsafe fn lstm_step_avx512(
    h_prev: &[f32],
    w: &gemm::PackedB,
    xg: &[f32],
    c: &mut [f32],
    h: &mut [f32],
    blocks: Range<usize>,
) {
    lstm_step_inline::<FUSED_AVX512_NR, true>(h_prev, w, xg, c, h, blocks)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn lstm_step_avx2(
    h_prev: &[f32],
    w: &gemm::PackedB,
    xg: &[f32],
    c: &mut [f32],
    h: &mut [f32],
    blocks: Range<usize>,
) {
    lstm_step_inline::<FUSED_NARROW_NR, true>(h_prev, w, xg, c, h, blocks)
}

/// [`lstm_step_fused`] for panels NR wide. The accumulators and sums are arrays indexed by
/// constants only (unrolled loops), so they stay in registers.
#[inline(always)]
fn lstm_step_inline<const NR: usize, const FMA: bool>(
    h_prev: &[f32],
    w: &gemm::PackedB,
    xg: &[f32],
    c: &mut [f32],
    h: &mut [f32],
    run: Range<usize>,
) {
    let hidden = c.len();
    let depth = w.depth();
    let blocks = hidden / NR;
    if h_prev.len() < depth || xg.len() < 4 * hidden || h.len() < hidden {
        return;
    }
    for u in run.start..run.end.min(blocks) {
        // pre-activations: the input side first, then each depth block's chain added, as
        // the unfused step adds `gemv`'s per-block sums to its copy of `xg`
        let mut pre = [[0.0f32; NR]; 4];
        for (gate, p) in pre.iter_mut().enumerate() {
            p.copy_from_slice(&xg[gate * hidden + u * NR..][..NR]);
        }
        let mut k0 = 0;
        while k0 < depth {
            let kc = gemm::KC.min(depth - k0);
            // the block's four gates: panels u, u + blocks, ... (gate order i, f, g, o)
            let qs = [u, blocks + u, 2 * blocks + u, 3 * blocks + u];
            let Some(acc) = w.panel_sums::<NR, FMA>(k0, qs, &h_prev[k0..k0 + kc]) else {
                return;
            };
            for j in 0..NR {
                pre[0][j] += acc[0][j];
                pre[1][j] += acc[1][j];
                pre[2][j] += acc[2][j];
                pre[3][j] += acc[3][j];
            }
            k0 += kc;
        }
        let cb = &mut c[u * NR..][..NR];
        let hb = &mut h[u * NR..][..NR];
        for j in 0..NR {
            let (i, f) = (vmath::sigmoid(pre[0][j]), vmath::sigmoid(pre[1][j]));
            let (g, o) = (vmath::tanh(pre[2][j]), vmath::sigmoid(pre[3][j]));
            let cn = f * cb[j] + i * g;
            cb[j] = cn;
            hb[j] = vmath::tanh(cn) * o;
        }
    }
}

/// Weights of one layer and direction, as contiguous compute-dtype tensors (no copy when the
/// parameters already are).
struct LayerWeights {
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Option<Tensor>,
    b_hh: Option<Tensor>,
    w_hr: Option<Tensor>,
    input: usize,
    hidden: usize,
    /// Size of the emitted hidden state (projection size or hidden).
    out: usize,
}

/// `mat1 and mat2 shapes cannot be multiplied`, as PyTorch's addmm/mm report it (mat2 is the
/// transposed weight).
fn mm_shape_err(prefix: &str, rows: usize, cols: usize, w: &Tensor) -> crate::Error {
    let (w0, w1) = (w.shape()[0], w.shape()[1]);
    crate::tensor::TensorError::MatmulShapes {
        op: prefix.to_string(),
        mat1: [rows, cols],
        mat2: [w1, w0],
    }
    .into()
}

/// What the weights of one layer and direction are multiplied with: the input rows
/// (`steps * batch`) and width, the batch and the width of the hidden state.
struct LayerInput {
    rows: usize,
    width: usize,
    batch: usize,
    h_width: usize,
}

/// Validate and convert the weights of one layer and direction, `ps` = `[w_ih, w_hh]`, then
/// `[b_ih, b_hh]` with biases, then `[w_hr]` with projections. Every shape the GEMMs below
/// rely on is checked here, with the error PyTorch raises at the product that would fail.
fn layer_weights(
    op: &str,
    cell: Cell,
    ps: &[Tensor],
    has_bias: bool,
    cd: DType,
    inp: &LayerInput,
) -> crate::Result<LayerWeights> {
    let (w_ih, w_hh) = match ps {
        [a, b, ..] => (a, b),
        _ => return Err(param_count(op, 2, ps.len())),
    };
    let (biases, rest) = if has_bias {
        match &ps[2..] {
            [bi, bh, rest @ ..] => (Some((bi, bh)), rest),
            _ => return Err(param_count(op, 4, ps.len())),
        }
    } else {
        (None, &ps[2..])
    };
    let w_hr = rest.first();
    for (w, name) in [
        (Some(w_ih), "weight_ih"),
        (Some(w_hh), "weight_hh"),
        (w_hr, "weight_hr"),
    ] {
        if let Some(w) = w {
            check_rank(op, name, RankRequirement::Exactly(2), w.shape())?;
        }
    }
    let g = cell.gates();
    let gh = w_ih.shape()[0];
    let hidden = gh / g;
    let prefix = if has_bias { "addmm" } else { "mm" };
    // x @ W_ih^T over the whole sequence
    if w_ih.shape()[1] != inp.width {
        return Err(mm_shape_err(prefix, inp.rows, inp.width, w_ih));
    }
    if gh != g * hidden {
        return Err(invalid_argument(
            op,
            "weight_ih.size(0)",
            format!("must be a multiple of the {g} gates"),
            gh,
        ));
    }
    check_size(
        op,
        "weight_hh.size(0) (weight_ih.size(0))",
        gh as i64,
        w_hh.shape()[0] as i64,
    )?;
    if let Some((bi, bh)) = biases {
        for b in [bi, bh] {
            if b.shape() != [gh] {
                return Err(shape_mismatch(op, "bias", &[gh], b.shape()));
            }
        }
    }
    // h @ W_hh^T at each step
    if w_hh.shape()[1] != inp.h_width {
        return Err(mm_shape_err(prefix, inp.batch, inp.h_width, w_hh));
    }
    let out = match w_hr {
        Some(w) => {
            // (h_new [batch, hidden]) @ W_hr^T
            if w.shape()[1] != hidden {
                return Err(mm_shape_err("mm", inp.batch, hidden, w));
            }
            w.shape()[0]
        }
        None => hidden,
    };
    check_size(
        op,
        "weight_hh.size(1) (the hidden or projection size)",
        out as i64,
        w_hh.shape()[1] as i64,
    )?;
    if rest.len() > 1 {
        return Err(param_count(op, ps.len() - rest.len() + 1, ps.len()));
    }
    let conv = |t: &Tensor| contiguous_as(t, cd);
    Ok(LayerWeights {
        w_ih: conv(w_ih)?,
        w_hh: conv(w_hh)?,
        b_ih: biases.map(|(b, _)| conv(b)).transpose()?,
        b_hh: biases.map(|(_, b)| conv(b)).transpose()?,
        w_hr: w_hr.map(conv).transpose()?,
        input: w_ih.shape()[1],
        hidden,
        out,
    })
}

/// The recurrent half of one layer and direction, borrowed for the steps.
struct StepWeights<'a, T> {
    w_hh: &'a [T],
    /// `w_hh^T` packed for one-row products (float32 with the packed GEMM backend).
    w_hh_packed: Option<Arc<gemm::PackedB>>,
    /// `b_hh` where it is not folded into the input projection (GRU's candidate gate needs it
    /// apart from the input side).
    b_hh: Option<&'a [T]>,
    w_hr: Option<&'a [T]>,
    hidden: usize,
    out: usize,
}

/// Buffers reused across the steps of a sequence.
struct StepScratch<T> {
    gates: Vec<T>,
    hh: Vec<T>,
    hnew: Vec<T>,
}

/// One recurrent step for a batch: `xg [b, G*H]` holds the input projection with its biases
/// (for LSTM and Elman cells also `b_hh`); updates h (and c).
fn step<T: CellMath>(
    cell: Cell,
    sw: &StepWeights<'_, T>,
    xg: &[T],
    b: usize,
    h: &mut [T],
    c: &mut [T],
    s: &mut StepScratch<T>,
) {
    let (hs, g) = (sw.hidden, cell.gates() * sw.hidden);
    s.hnew.resize(b * hs, T::zero());
    match cell {
        Cell::Lstm | Cell::Tanh | Cell::Relu => {
            s.gates.clear();
            s.gates.extend_from_slice(&xg[..b * g]);
            T::recurrent(
                h,
                b,
                sw.out,
                sw.w_hh,
                g,
                sw.w_hh_packed.as_deref(),
                &mut s.gates,
            );
            for i in 0..b {
                let gt = &mut s.gates[i * g..][..g];
                let hn = &mut s.hnew[i * hs..][..hs];
                match cell {
                    Cell::Lstm => {
                        // gate order i, f, g, o
                        T::sigmoid_inplace(&mut gt[..2 * hs]);
                        T::tanh_inplace(&mut gt[2 * hs..3 * hs]);
                        T::sigmoid_inplace(&mut gt[3 * hs..]);
                        let cc = &mut c[i * hs..][..hs];
                        for j in 0..hs {
                            cc[j] = gt[hs + j] * cc[j] + gt[j] * gt[2 * hs + j];
                        }
                        hn.copy_from_slice(cc);
                        T::tanh_inplace(hn);
                        for (hv, &o) in hn.iter_mut().zip(&gt[3 * hs..]) {
                            *hv *= o;
                        }
                    }
                    Cell::Tanh => {
                        T::tanh_inplace(gt);
                        hn.copy_from_slice(gt);
                    }
                    _ => {
                        for (hv, &v) in hn.iter_mut().zip(gt.iter()) {
                            *hv = v.max(T::zero());
                        }
                    }
                }
            }
        }
        Cell::Gru => {
            s.hh.clear();
            match sw.b_hh {
                Some(bh) => (0..b).for_each(|_| s.hh.extend_from_slice(bh)),
                None => s.hh.resize(b * g, T::zero()),
            }
            T::recurrent(
                h,
                b,
                sw.out,
                sw.w_hh,
                g,
                sw.w_hh_packed.as_deref(),
                &mut s.hh,
            );
            s.gates.resize(b * g, T::zero());
            for i in 0..b {
                let x = &xg[i * g..][..g];
                let hh = &s.hh[i * g..][..g];
                let gt = &mut s.gates[i * g..][..g];
                for j in 0..2 * hs {
                    gt[j] = x[j] + hh[j];
                }
                // r, z
                T::sigmoid_inplace(&mut gt[..2 * hs]);
                for j in 0..hs {
                    gt[2 * hs + j] = x[2 * hs + j] + gt[j] * hh[2 * hs + j];
                }
                T::tanh_inplace(&mut gt[2 * hs..]);
                let hp = &h[i * sw.out..][..sw.out];
                let hn = &mut s.hnew[i * hs..][..hs];
                for j in 0..hs {
                    let (z, n) = (gt[hs + j], gt[2 * hs + j]);
                    hn[j] = (T::one() - z) * n + z * hp[j];
                }
            }
        }
    }
    match sw.w_hr {
        Some(w) => mm_wt(&s.hnew, b, hs, w, sw.out, h, false),
        None => h.copy_from_slice(&s.hnew),
    }
}

/// `x [rows, input] @ W_ih^T + b_ih (+ b_hh)` for the whole sequence in one GEMM.
fn input_proj<T: Real>(
    w_ih: &[T],
    biases: &[&[T]],
    g: usize,
    input: usize,
    x: &[T],
    rows: usize,
) -> Vec<T> {
    let mut xg = vec![T::zero(); rows * g];
    for row in xg.chunks_mut(g) {
        for bias in biases {
            for (r, &v) in row.iter_mut().zip(bias.iter()) {
                *r += v;
            }
        }
    }
    mm_wt(x, rows, input, w_ih, g, &mut xg, !biases.is_empty());
    xg
}

struct RnnConfig {
    cell: Cell,
    has_bias: bool,
    layers: usize,
    bidirectional: bool,
    batch_first: bool,
}

/// Full-sequence RNN. `x` is [T, B, I] (or [B, T, I], or unbatched [T, I]); `h0` (and `c0`)
/// are [L*D, B, H]. Returns (output, h_n, c_n).
fn run_rnn(
    op: &str,
    cfg: &RnnConfig,
    x: &Tensor,
    h0: &Tensor,
    c0: Option<&Tensor>,
    params: &[Tensor],
) -> crate::Result<(Tensor, Tensor, Option<Tensor>)> {
    let dtype = x.dtype();
    let cd = compute_dtype(op, dtype)?;
    let unbatched = x.dim() == 2;
    check_rank(op, "input", RankRequirement::OneOf(vec![2, 3]), x.shape())?;
    let dirs = if cfg.bidirectional { 2 } else { 1 };
    // PyTorch's gather_params: tensors per layer and direction, projections told apart by
    // the hidden and cell state widths
    let has_proj = c0.is_some_and(|c| c.shape().last() != h0.shape().last());
    let per = 2 + 2 * usize::from(cfg.has_bias) + usize::from(has_proj);
    if !params.len().is_multiple_of(per) {
        return Err(param_count(op, per * cfg.layers * dirs, params.len()));
    }
    if params.len() / per != cfg.layers * dirs {
        // PyTorch's text (the hostile-input goldens compare it)
        return Err(value_err(format!(
            "{op}: Expected more weights in stacked_rnn (expected {} tensors, got {})",
            per * cfg.layers * dirs,
            params.len()
        )));
    }
    // Normalize to [T, B, I].
    let xs = if unbatched {
        reshape(x, &[x.shape()[0], 1, x.shape()[1]])?
    } else if cfg.batch_first {
        super::linalg::permute(x, &[1, 0, 2])?
    } else {
        x.clone()
    };
    let (steps, b) = (xs.shape()[0], xs.shape()[1]);
    dispatch_real_compute!(cd, op, |T| {
        let mut layer_in: Vec<T> = slice_of::<T>(&contiguous_as(&xs, cd)?.read::<T>()?)?.to_vec();
        let mut in_size = xs.shape()[2];
        let h0v: Vec<T> = slice_of::<T>(&contiguous_as(h0, cd)?.read::<T>()?)?.to_vec();
        let c0v: Option<Vec<T>> = match c0 {
            Some(c) => Some(slice_of::<T>(&contiguous_as(c, cd)?.read::<T>()?)?.to_vec()),
            None => None,
        };
        let mut hn: Vec<T> = Vec::new();
        let mut cn: Vec<T> = Vec::new();
        let mut out_size = 0;
        let mut hidden = 0;
        for layer in 0..cfg.layers {
            let mut outs: Vec<Vec<T>> = Vec::new();
            for d in 0..dirs {
                let idx = layer * dirs + d;
                let inp = LayerInput {
                    rows: steps * b,
                    width: in_size,
                    batch: b,
                    h_width: h0.shape().last().copied().unwrap_or(0),
                };
                let lw = layer_weights(
                    op,
                    cfg.cell,
                    &params[idx * per..(idx + 1) * per],
                    cfg.has_bias,
                    cd,
                    &inp,
                )?;
                check_size(
                    op,
                    "input.size(-1) (input_size)",
                    lw.input as i64,
                    in_size as i64,
                )?;
                let (hsz, osz) = (lw.hidden, lw.out);
                out_size = osz;
                hidden = hsz;
                let hlen = b * osz;
                let mut h: Vec<T> = h0v
                    .get(idx * hlen..(idx + 1) * hlen)
                    .ok_or_else(|| {
                        let mut want = vec![cfg.layers * dirs];
                        want.extend_from_slice(&[b, osz][usize::from(unbatched)..]);
                        shape_mismatch(op, "hx", &want, h0.shape())
                    })?
                    .to_vec();
                let mut c: Vec<T> = match &c0v {
                    Some(cv) => cv
                        .get(idx * b * hsz..(idx + 1) * b * hsz)
                        .ok_or_else(|| {
                            let mut want = vec![cfg.layers * dirs];
                            want.extend_from_slice(&[b, hsz][usize::from(unbatched)..]);
                            shape_mismatch(op, "cx", &want, c0.map_or(&[][..], |c| c.shape()))
                        })?
                        .to_vec(),
                    None => Vec::new(),
                };
                let g = cfg.cell.gates() * hsz;
                // read guards on the weights, held for the whole layer
                let b_ih_g = lw.b_ih.as_ref().map(|t| t.read::<T>()).transpose()?;
                let b_hh_g = lw.b_hh.as_ref().map(|t| t.read::<T>()).transpose()?;
                let w_ih_g = lw.w_ih.read::<T>()?;
                let w_hh_g = lw.w_hh.read::<T>()?;
                let w_hr_g = lw.w_hr.as_ref().map(|t| t.read::<T>()).transpose()?;
                let b_ih = b_ih_g.as_ref().map(slice_of::<T>).transpose()?;
                let b_hh = b_hh_g.as_ref().map(slice_of::<T>).transpose()?;
                // b_hh joins the input projection except for GRU's candidate gate.
                let fold_b_hh = cfg.cell != Cell::Gru;
                let mut biases: Vec<&[T]> = b_ih.into_iter().collect();
                if fold_b_hh {
                    biases.extend(b_hh);
                }
                let proj = LayerProjection {
                    tensor: &lw.w_ih,
                    w_ih: slice_of::<T>(&w_ih_g)?,
                    biases: &biases,
                    g,
                    input: lw.input,
                    x: &layer_in,
                    rows: steps * b,
                };
                let w_hh = slice_of::<T>(&w_hh_g)?;
                let sw = StepWeights {
                    w_hh,
                    w_hh_packed: if b <= 4 {
                        T::pack_recurrent(&lw.w_hh, w_hh, osz, g)
                    } else {
                        None
                    },
                    b_hh: if fold_b_hh { None } else { b_hh },
                    w_hr: w_hr_g.as_ref().map(slice_of::<T>).transpose()?,
                    hidden: hsz,
                    out: osz,
                };
                let mut out = vec![T::zero(); steps * b * osz];
                let fused = cfg.cell == Cell::Lstm
                    && b == 1
                    && T::lstm_layer_fused(&proj, &sw, d == 1, &mut h, &mut c, &mut out)?;
                // step by step where the fused kernel does not fit
                let xg = if fused {
                    Vec::new()
                } else {
                    T::input_proj(&proj)?
                };
                let mut scratch = StepScratch {
                    gates: Vec::new(),
                    hh: Vec::new(),
                    hnew: Vec::new(),
                };
                let steps_left = if fused { 0 } else { steps };
                for s in 0..steps_left {
                    let t = if d == 0 { s } else { steps - 1 - s };
                    step(
                        cfg.cell,
                        &sw,
                        &xg[t * b * g..][..b * g],
                        b,
                        &mut h,
                        &mut c,
                        &mut scratch,
                    );
                    out[t * b * osz..][..b * osz].copy_from_slice(&h);
                }
                hn.extend_from_slice(&h);
                cn.extend_from_slice(&c);
                outs.push(out);
            }
            let width = out_size * dirs;
            layer_in = match <[Vec<T>; 1]>::try_from(outs) {
                // one direction: its output is the layer's
                Ok([o]) => o,
                // Concatenate directions along the feature dim.
                Err(outs) => {
                    let mut next = vec![T::zero(); steps * b * width];
                    for (d, o) in outs.iter().enumerate() {
                        for r in 0..steps * b {
                            next[r * width + d * out_size..][..out_size]
                                .copy_from_slice(&o[r * out_size..][..out_size]);
                        }
                    }
                    next
                }
            };
            in_size = width;
        }
        let width = out_size * dirs;
        let out = Tensor::from_vec(layer_in, &[steps, b, width])?;
        let out = if unbatched {
            reshape(&out, &[steps, width])?
        } else if cfg.batch_first && b > 1 {
            super::linalg::permute(&out, &[1, 0, 2])?.contiguous()?
        } else if cfg.batch_first {
            // [steps, 1, width] and [1, steps, width] have the same layout
            reshape(&out, &[1, steps, width])?
        } else {
            out
        };
        let ld = cfg.layers * dirs;
        let (hshape, cshape): (Vec<usize>, Vec<usize>) = if unbatched {
            (vec![ld, out_size], vec![ld, hidden])
        } else {
            (vec![ld, b, out_size], vec![ld, b, hidden])
        };
        let hn = Tensor::from_vec(hn, &hshape)?;
        let cn = if c0.is_some() {
            Some(Tensor::from_vec(cn, &cshape)?.to_dtype(dtype)?)
        } else {
            None
        };
        Ok((out.to_dtype(dtype)?, hn.to_dtype(dtype)?, cn))
    })
}

/// PyTorch's "got an incorrect number of RNN parameters" (its text, which the hostile-input
/// goldens compare), with the counts.
fn param_count(op: &str, expected: usize, got: usize) -> crate::Error {
    value_err(format!(
        "{op}: got an incorrect number of RNN parameters (expected {expected}, got {got})"
    ))
}

/// An LSTM's `hx` list that is not `(h0, c0)`.
fn hx_pair(op: &str, got: usize) -> crate::Error {
    size_mismatch(op, "the length of hx (h0, c0)", 2, got as i64)
}

fn check_eval(a: &Args, dropout_i: usize, train_i: usize) -> crate::Result<()> {
    if a.bool(train_i)? && a.double(dropout_i)? > 0.0 {
        return Err(unsupported_feature(
            a.op,
            "dropout between RNN layers in training mode",
        ));
    }
    Ok(())
}

/// lstm.input(input, hx[], params[], has_biases, num_layers, dropout, train, bidirectional,
/// batch_first) -> (output, h_n, c_n)
pub(crate) fn lstm(a: &mut Args) -> crate::Result<IValue> {
    if matches!(a.get(1)?, IValue::Tensor(_)) {
        return Err(unsupported_feature(a.op, "packed sequences (lstm.data)"));
    }
    let x = a.tensor(0)?;
    let hx = a.tensor_list(1)?;
    let params = a.tensor_list(2)?;
    check_eval(a, 5, 6)?;
    let cfg = RnnConfig {
        cell: Cell::Lstm,
        has_bias: a.bool(3)?,
        layers: layers_arg(a, 4)?,
        bidirectional: a.bool(7)?,
        batch_first: a.bool(8)?,
    };
    let [h0, c0] = hx.as_slice() else {
        return Err(hx_pair(a.op, hx.len()));
    };
    let (o, h, c) = run_rnn(a.op, &cfg, &x, h0, Some(c0), &params)?;
    let c = c.ok_or_else(|| value_err("lstm: cell state missing"))?;
    Ok(IValue::Tuple(Tuple::new(vec![
        IValue::Tensor(o),
        IValue::Tensor(h),
        IValue::Tensor(c),
    ])))
}

fn layers_arg(a: &Args, i: usize) -> crate::Result<usize> {
    let n = a.int(i)?;
    usize::try_from(n)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| invalid_argument(a.op, "num_layers", "must be positive", n))
}

/// gru.input / rnn_tanh.input / rnn_relu.input(input, hx, params[], has_biases, num_layers,
/// dropout, train, bidirectional, batch_first) -> (output, h_n)
fn gru_like(a: &mut Args, cell: Cell) -> crate::Result<IValue> {
    if matches!(a.get(2)?, IValue::Tensor(_)) {
        return Err(unsupported_feature(
            a.op,
            "packed sequences (the .data overload)",
        ));
    }
    let x = a.tensor(0)?;
    let h0 = a.tensor(1)?;
    let params = a.tensor_list(2)?;
    check_eval(a, 5, 6)?;
    let cfg = RnnConfig {
        cell,
        has_bias: a.bool(3)?,
        layers: layers_arg(a, 4)?,
        bidirectional: a.bool(7)?,
        batch_first: a.bool(8)?,
    };
    let (o, h, _) = run_rnn(a.op, &cfg, &x, &h0, None, &params)?;
    Ok(IValue::Tuple(Tuple::new(vec![
        IValue::Tensor(o),
        IValue::Tensor(h),
    ])))
}

/// A single cell step: lstm_cell(input, hx[], w_ih, w_hh, b_ih, b_hh) -> (h, c);
/// gru_cell / rnn_tanh_cell / rnn_relu_cell(input, hx, ...) -> h.
fn cell_op(a: &mut Args, cell: Cell) -> crate::Result<IValue> {
    let x = a.tensor(0)?;
    let (h0, c0) = if cell == Cell::Lstm {
        let hx = a.tensor_list(1)?;
        let [h, c] = hx.as_slice() else {
            return Err(hx_pair(a.op, hx.len()));
        };
        (h.clone(), Some(c.clone()))
    } else {
        (a.tensor(1)?, None)
    };
    let (bi, bh) = (a.opt_tensor(4)?, a.opt_tensor(5)?);
    let mut params = vec![a.tensor(2)?, a.tensor(3)?];
    let has_bias = match (bi, bh) {
        (Some(bi), Some(bh)) => {
            params.extend([bi, bh]);
            true
        }
        (None, None) => false,
        _ => {
            return Err(invalid_argument(
                a.op,
                "b_ih and b_hh",
                "must both be given or both be None",
                "only one",
            ))
        }
    };
    let unbatched = x.dim() == 1;
    let xs = if unbatched {
        reshape(&x, &[1, 1, x.shape()[0]])?
    } else {
        reshape(
            &x,
            &[1, x.shape()[0], x.shape().get(1).copied().unwrap_or(0)],
        )?
    };
    let add_lead = |t: &Tensor| -> crate::Result<Tensor> {
        let mut s = vec![1];
        if unbatched {
            s.push(1);
        }
        s.extend_from_slice(t.shape());
        reshape(t, &s)
    };
    let h0l = add_lead(&h0)?;
    let c0l = match &c0 {
        Some(c) => Some(add_lead(c)?),
        None => None,
    };
    let cfg = RnnConfig {
        cell,
        has_bias,
        layers: 1,
        bidirectional: false,
        batch_first: false,
    };
    let (_, h, c) = run_rnn(a.op, &cfg, &xs, &h0l, c0l.as_ref(), &params)?;
    let h = reshape(&h, h0.shape())?;
    match (c, c0) {
        (Some(c), Some(c0)) => Ok(IValue::Tuple(Tuple::new(vec![
            IValue::Tensor(h),
            IValue::Tensor(reshape(&c, c0.shape())?),
        ]))),
        _ => Ok(IValue::Tensor(h)),
    }
}

// One kernel per operator: the cell kind is fixed at registration, not read from the name.
pub(crate) fn gru(a: &mut Args) -> crate::Result<IValue> {
    gru_like(a, Cell::Gru)
}
pub(crate) fn rnn_tanh(a: &mut Args) -> crate::Result<IValue> {
    gru_like(a, Cell::Tanh)
}
pub(crate) fn rnn_relu(a: &mut Args) -> crate::Result<IValue> {
    gru_like(a, Cell::Relu)
}
fn lstm_cell(a: &mut Args) -> crate::Result<IValue> {
    cell_op(a, Cell::Lstm)
}
fn gru_cell(a: &mut Args) -> crate::Result<IValue> {
    cell_op(a, Cell::Gru)
}
fn rnn_tanh_cell(a: &mut Args) -> crate::Result<IValue> {
    cell_op(a, Cell::Tanh)
}
fn rnn_relu_cell(a: &mut Args) -> crate::Result<IValue> {
    cell_op(a, Cell::Relu)
}

pub(crate) fn register(r: &mut Registry) {
    // the `.data` overloads (packed sequences) are src/ops/packed.rs
    r.add("aten::lstm.input", lstm);
    r.add("aten::gru.input", gru);
    r.add("aten::rnn_tanh.input", rnn_tanh);
    r.add("aten::rnn_relu.input", rnn_relu);
    r.add("aten::lstm_cell", lstm_cell);
    r.add("aten::gru_cell", gru_cell);
    r.add("aten::rnn_tanh_cell", rnn_tanh_cell);
    r.add("aten::rnn_relu_cell", rnn_relu_cell);
}
