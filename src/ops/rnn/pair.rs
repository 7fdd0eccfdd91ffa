//! The steps of one batch-1 float32 LSTM sequence on two threads in lockstep (issue 9: the
//! reference tagger's 64 steps of a [1,128] x [128,512] product plus gates).
//!
//! Splitting each step through the pool (a rayon join per step) cost more than the half step it
//! saved: a step is 2-3 us and a hand-off through rayon's queues and sleep states costs about as
//! much. Here one pool job joins for the whole sequence. Each thread owns half of the hidden
//! units (all four gates of them: a quarter of `W_hh^T`'s columns per gate, half of the packed
//! weights, which stay in that core's cache for the whole sequence), computes their gates, cell
//! and hidden values, and the two exchange only the new hidden values (`hidden` floats) per step
//! through atomics, each publishing its finished step count with release ordering.
//!
//! Nothing waits on a thread that may never come: the calling thread (the leader) starts the
//! steps alone on all the units and hands half of them over at the first step boundary after the
//! helper job has been picked up by another pool thread; if it never is (a busy pool, a pool of
//! one, the job popped back by the leader's own thread), the leader ends the sequence alone and
//! the job, when it runs, finds the sequence closed and returns. Every column is computed as the
//! one-thread product computes it ([`gemm::gemv_packed_b_columns`]) and the gate functions are
//! elementwise, so the result does not depend on when (or whether) the helper joined.

use crate::ops::gemm;
use crate::ops::kernels::vmath::{self, VecFn};
use std::ops::Range;
use std::sync::atomic::{AtomicU32, AtomicU8, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Gate multiply-adds per step below which the sequence stays on one thread: the per-step
/// exchange (a cache-line round trip each way, ~0.2-0.5 us on a virtual machine) must stay small
/// against the half step it saves. The reference tagger's step is 128 x 512 = 64 Ki.
const PAIR_MIN_STEP_MACS: usize = 1 << 15;

/// How long a thread spins on the other's step counter before it starts yielding its core (the
/// other thread may have been descheduled on a loaded machine; a step is a few microseconds).
const SPIN_BEFORE_YIELD: Duration = Duration::from_micros(50);

/// The states of the hand-over, in [`Lockstep::state`].
const OPEN: u8 = 0;
/// The helper job runs on another thread and waits for its half.
const CLAIMED: u8 = 1;
/// The leader finished alone (or handed over at the last step): the helper has nothing to do.
const CLOSED: u8 = 2;
/// The helper owns its units from step [`Lockstep::split_from`] on.
const SPLIT: u8 = 3;

/// A counter on its own cache line, so that one thread's stores do not evict the line the other
/// thread is polling.
#[repr(align(64))]
struct Line(AtomicUsize);

/// The synchronization of the two threads over one sequence.
struct Lockstep {
    state: AtomicU8,
    split_from: AtomicUsize,
    /// Steps each thread has published (its hidden values of that step are in the exchange).
    leader_done: Line,
    helper_done: Line,
    /// Set by either side that stops early (a panic unwinding through it), so the other does
    /// not wait for it forever.
    gone: AtomicU8,
    leader_thread: std::thread::ThreadId,
}

impl Lockstep {
    /// Spins until `ready()`, yielding the core between polls once it has spun for
    /// [`SPIN_BEFORE_YIELD`]; false if the other side has gone.
    fn wait_until(&self, ready: impl Fn() -> bool) -> bool {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if ready() {
                return true;
            }
            if self.gone.load(Ordering::Acquire) != 0 {
                return false;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) && start.elapsed() > SPIN_BEFORE_YIELD {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// Waits until `counter >= target`; false if the other side has gone.
    fn wait(&self, counter: &Line, target: usize) -> bool {
        self.wait_until(|| counter.0.load(Ordering::Acquire) >= target)
    }

    /// Waits until the leader has answered the helper's claim (split or closed).
    fn wait_answer(&self) -> Option<u8> {
        self.wait_until(|| self.state.load(Ordering::Acquire) != CLAIMED)
            .then(|| self.state.load(Ordering::Acquire))
    }
}

/// Marks the sequence abandoned when dropped before [`GoneOnUnwind::finish`]: a panic in either
/// thread releases the other from its waits.
struct GoneOnUnwind<'a>(&'a Lockstep, bool);

impl GoneOnUnwind<'_> {
    fn finish(mut self) {
        self.1 = true;
    }
}

impl Drop for GoneOnUnwind<'_> {
    fn drop(&mut self) {
        if !self.1 {
            self.0.gone.store(1, Ordering::Release);
        }
    }
}

/// What both threads read: the gate pre-activations of every step (`steps x 4*hidden`, the
/// input projection with both biases, set by the leader before it hands over), `W_hh^T`
/// packed, and the exchange.
struct Shared<'a> {
    xg: OnceLock<Vec<f32>>,
    packed: &'a gemm::PackedB,
    hidden: usize,
    steps: usize,
    reverse: bool,
    /// The hidden values entering step `s` are in slot `s % 2` (`2 * hidden` words, f32 bits).
    h_slots: Vec<AtomicU32>,
    /// The helper's cell values: at the hand-over (from the leader) and after its last step.
    c_slot: Vec<AtomicU32>,
    sync: Lockstep,
}

impl Shared<'_> {
    fn time(&self, s: usize) -> usize {
        if self.reverse {
            self.steps - 1 - s
        } else {
            s
        }
    }
    fn store_h(&self, s: usize, units: Range<usize>, h: &[f32]) {
        let slot = &self.h_slots[(s % 2) * self.hidden..][units];
        slot.iter()
            .zip(h)
            .for_each(|(a, &v)| a.store(v.to_bits(), Ordering::Relaxed));
    }
    fn load_h(&self, s: usize, units: Range<usize>, h: &mut [f32]) {
        let slot = &self.h_slots[(s % 2) * self.hidden..][units];
        h.iter_mut()
            .zip(slot)
            .for_each(|(v, a)| *v = f32::from_bits(a.load(Ordering::Relaxed)));
    }
}

/// One thread's units and its buffers for the steps.
struct Units {
    units: Range<usize>,
    /// The four gate column ranges of these units (i, f, g, o).
    columns: [Range<usize>; 4],
    gates: Vec<f32>,
    hnew: Vec<f32>,
}

impl Units {
    fn new(units: Range<usize>, hidden: usize) -> Self {
        let n = units.len();
        let columns = [0, 1, 2, 3].map(|q| q * hidden + units.start..q * hidden + units.end);
        Units {
            units,
            columns,
            gates: vec![0.0; 4 * n],
            hnew: vec![0.0; n],
        }
    }

    /// Step `s` for these units: `h` is the whole hidden state entering the step, `c` these
    /// units' cells (updated); the new hidden values are left in `self.hnew`. The arithmetic is
    /// the one-thread step's ([`super::step`]) restricted to these units. Out of line: it has
    /// three callers, and inlined into each it would copy the product's and the gate
    /// functions' fallback loops (binary size, issue 9); a call per step costs nothing here.
    #[inline(never)]
    fn step(&mut self, sh: &Shared<'_>, xg: &[f32], s: usize, h: &[f32], c: &mut [f32]) {
        let (hs, n) = (sh.hidden, self.units.len());
        let row = &xg[sh.time(s) * 4 * hs..][..4 * hs];
        for (q, cols) in self.columns.iter().enumerate() {
            self.gates[q * n..][..n].copy_from_slice(&row[cols.clone()]);
        }
        gemm::gemv_packed_b_columns(h, sh.packed, &self.columns, &mut self.gates);
        let gt = &mut self.gates[..];
        vmath::apply(VecFn::Sigmoid, &mut gt[..2 * n]);
        vmath::apply(VecFn::Tanh, &mut gt[2 * n..3 * n]);
        vmath::apply(VecFn::Sigmoid, &mut gt[3 * n..]);
        for j in 0..n {
            c[j] = gt[n + j] * c[j] + gt[j] * gt[2 * n + j];
        }
        self.hnew.copy_from_slice(&c[..n]);
        vmath::apply(VecFn::Tanh, &mut self.hnew);
        for (hv, &o) in self.hnew.iter_mut().zip(&gt[3 * n..]) {
            *hv *= o;
        }
    }
}

/// Whether [`lstm_steps`] would try to share the sequence: a pool of two or more threads and a
/// step worth splitting.
pub(super) fn worth_pairing(hidden: usize, steps: usize) -> bool {
    rayon::current_num_threads() >= 2
        && hidden >= 32
        && steps >= 2
        && hidden.saturating_mul(4 * hidden) >= PAIR_MIN_STEP_MACS
}

/// The LSTM steps of one batch-1 sequence: `project` computes the gate pre-activations
/// `[steps, 4*hidden]` (the input projection with both biases; it runs on the calling thread
/// while the helper job waits to be picked up), `packed` = `W_hh^T` packed (`hidden x
/// 4*hidden`), `h` and `c` the state (`hidden` each, updated), `out [steps, hidden]` each step's
/// hidden state (at its time index: reversed for the backward direction). Shared with another
/// pool thread when one picks the helper job up in time (see the module doc).
pub(super) fn lstm_steps(
    project: &mut dyn FnMut() -> crate::Result<Vec<f32>>,
    packed: &gemm::PackedB,
    reverse: bool,
    h: &mut [f32],
    c: &mut [f32],
    out: &mut [f32],
) -> crate::Result<()> {
    let hidden = h.len();
    let steps = out.len() / hidden.max(1);
    // the leader's units: the first half, a whole number of 16-column panels where possible
    let half = match hidden / 2 {
        m if m >= 16 => m - m % 16,
        m => m,
    };
    let sh = Shared {
        xg: OnceLock::new(),
        packed,
        hidden,
        steps,
        reverse,
        h_slots: (0..2 * hidden).map(|_| AtomicU32::new(0)).collect(),
        c_slot: (0..hidden).map(|_| AtomicU32::new(0)).collect(),
        sync: Lockstep {
            state: AtomicU8::new(OPEN),
            split_from: AtomicUsize::new(0),
            leader_done: Line(AtomicUsize::new(0)),
            helper_done: Line(AtomicUsize::new(0)),
            gone: AtomicU8::new(0),
            leader_thread: std::thread::current().id(),
        },
    };
    let sh = &sh;
    rayon::in_place_scope(|scope| {
        scope.spawn(move |_| helper(sh, half..hidden));
        let xg = match project() {
            Ok(xg) if xg.len() == steps * 4 * hidden => xg,
            other => {
                // nothing to hand over: a claimed helper is answered, a later one finds it shut
                sh.sync.state.store(CLOSED, Ordering::Release);
                return Err(match other {
                    Err(e) => e,
                    Ok(xg) => crate::ops::kernels::shape_err(format!(
                        "lstm: the input projection has {} values, expected {steps} x {}",
                        xg.len(),
                        4 * hidden
                    )),
                });
            }
        };
        let xg: &[f32] = sh.xg.get_or_init(|| xg);
        leader(sh, xg, half, h, c, out);
        Ok(())
    })
}

/// The calling thread's part: all units until the helper claims its half, then units
/// `..half`, writing every step's whole hidden state to `out`.
fn leader(sh: &Shared<'_>, xg: &[f32], half: usize, h: &mut [f32], c: &mut [f32], out: &mut [f32]) {
    let hidden = sh.hidden;
    let guard = GoneOnUnwind(&sh.sync, false);
    let mut all = Units::new(0..hidden, hidden);
    let mut s = 0;
    while s < sh.steps {
        if sh.sync.state.load(Ordering::Acquire) == CLAIMED {
            break;
        }
        all.step(sh, xg, s, h, c);
        h.copy_from_slice(&all.hnew);
        out[sh.time(s) * hidden..][..hidden].copy_from_slice(h);
        s += 1;
    }
    if s == sh.steps
        && sh
            .sync
            .state
            .compare_exchange(OPEN, CLOSED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    {
        guard.finish();
        return;
    }
    // The helper has claimed its half: hand it the state entering step `s`.
    sh.store_h(s, 0..hidden, h);
    sh.c_slot[half..]
        .iter()
        .zip(&c[half..])
        .for_each(|(a, &v)| a.store(v.to_bits(), Ordering::Relaxed));
    sh.sync.split_from.store(s, Ordering::Relaxed);
    sh.sync.state.store(SPLIT, Ordering::Release);
    let mut mine = Units::new(0..half, hidden);
    while s < sh.steps {
        mine.step(sh, xg, s, h, &mut c[..half]);
        sh.store_h(s + 1, 0..half, &mine.hnew);
        sh.sync.leader_done.0.store(s + 1, Ordering::Release);
        if !sh.sync.wait(&sh.sync.helper_done, s + 1) {
            // the helper panicked; the scope resumes its panic
            guard.finish();
            return;
        }
        h[..half].copy_from_slice(&mine.hnew);
        sh.load_h(s + 1, half..hidden, &mut h[half..]);
        out[sh.time(s) * hidden..][..hidden].copy_from_slice(h);
        s += 1;
    }
    // the helper stored its cells before publishing its last step
    c[half..]
        .iter_mut()
        .zip(&sh.c_slot[half..])
        .for_each(|(v, a)| *v = f32::from_bits(a.load(Ordering::Relaxed)));
    guard.finish();
}

/// The pool job: units `units` from the hand-over step on, if the leader is another thread
/// still before its last step.
fn helper(sh: &Shared<'_>, units: Range<usize>) {
    // Popped back by the leader's own thread (inside a parallel kernel it waits on): the
    // leader cannot answer from below us, and runs the sequence alone.
    if std::thread::current().id() == sh.sync.leader_thread {
        return;
    }
    if sh
        .sync
        .state
        .compare_exchange(OPEN, CLAIMED, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return;
    }
    let guard = GoneOnUnwind(&sh.sync, false);
    let xg = match (sh.sync.wait_answer(), sh.xg.get()) {
        (Some(SPLIT), Some(xg)) => xg,
        _ => {
            guard.finish();
            return;
        }
    };
    let hidden = sh.hidden;
    let mut s = sh.sync.split_from.load(Ordering::Relaxed);
    let mut h = vec![0.0f32; hidden];
    sh.load_h(s, 0..hidden, &mut h);
    let mut c: Vec<f32> = sh.c_slot[units.clone()]
        .iter()
        .map(|a| f32::from_bits(a.load(Ordering::Relaxed)))
        .collect();
    let mut mine = Units::new(units.clone(), hidden);
    while s < sh.steps {
        mine.step(sh, xg, s, &h, &mut c);
        sh.store_h(s + 1, units.clone(), &mine.hnew);
        if s + 1 == sh.steps {
            sh.c_slot[units.clone()]
                .iter()
                .zip(&c)
                .for_each(|(a, &v)| a.store(v.to_bits(), Ordering::Relaxed));
        }
        sh.sync.helper_done.0.store(s + 1, Ordering::Release);
        if s + 1 == sh.steps {
            break;
        }
        if !sh.sync.wait(&sh.sync.leader_done, s + 1) {
            break;
        }
        h[units.clone()].copy_from_slice(&mine.hnew);
        sh.load_h(s + 1, 0..units.start, &mut h[..units.start]);
        sh.load_h(s + 1, units.end..hidden, &mut h[units.end..]);
        s += 1;
    }
    guard.finish();
}
