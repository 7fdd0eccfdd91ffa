//! The recurrence of a float32 LSTM layer shared by the pool's threads.
//!
//! A step's product `h @ W_hh^T` reads all of `W_hh` (256 KiB at hidden size 128) for a few
//! thousand multiply-adds per KiB: the step is bound by how fast one core streams `W_hh` from
//! its L2 cache, and the steps are sequential. Split by hidden units, each part of a step needs
//! only its units' four gate rows of `W_hh` (so each core streams its own share, which stays in
//! its own L2) and its units' cell states; the parts of a step only meet when the next step
//! reads the whole hidden state. So the steps run as `steps * parts` tasks claimed in order
//! from one counter by every thread that joins (the caller and, when they are free, pool
//! threads), each task waiting only until every task of the previous step is done. A thread
//! that never joins leaves its tasks to the others, so this never waits on a busy pool. Each
//! part computes exactly what the one-thread step computes for its units (the same products,
//! in the same order), so results are identical.

use super::gemm::{self, PackedB};
use super::kernels::vmath::{self, VecFn};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Multiply-adds of one step's recurrent product below which the steps stay on one thread:
/// a hand-over between threads per step (a cache-line round trip, ~0.1-0.2 us) must stay small
/// against each part's product. Hidden size 128 (64 Ki per batch row) is the smallest that
/// qualifies.
const MIN_STEP_MACS: usize = 1 << 16;

/// At most this many parts per step (the hand-overs per step grow with the parts).
const MAX_PARTS: usize = 4;

/// Spins before a waiting thread starts yielding its core.
const SPINS_BEFORE_YIELD: u32 = 1 << 12;

/// One LSTM layer and direction: what the steps read.
pub(super) struct Sequence<'a> {
    /// `W_hh^T` packed (`hidden x 4 * hidden`).
    pub w_hh: &'a PackedB,
    /// The input projections with both biases, `[steps, batch, 4 * hidden]`.
    pub xg: &'a [f32],
    pub steps: usize,
    pub batch: usize,
    pub hidden: usize,
    /// Steps run from the last to the first (the backward direction).
    pub reverse: bool,
}

/// The number of parts a step splits into on this pool, or `None` to stay on one thread.
fn parts_for(seq: &Sequence<'_>) -> Option<usize> {
    let threads = rayon::current_num_threads();
    let nr = seq.w_hh.panel_width();
    let macs = 4 * seq.hidden * seq.hidden * seq.batch;
    if threads < 2 || macs < MIN_STEP_MACS || nr == 0 {
        return None;
    }
    (2..=threads.min(MAX_PARTS))
        .rev()
        .find(|&p| seq.hidden.is_multiple_of(p * nr))
}

/// A buffer the tasks of one sequence write in disjoint parts.
#[derive(Clone, Copy)]
struct Shared {
    ptr: *mut f32,
    len: usize,
}

// SAFETY: `Shared` is only a pointer and a length; every access goes through `slice`/`slice_mut`,
// whose callers (the tasks below) touch disjoint ranges or are ordered by the step counter.
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

impl Shared {
    fn new(v: &mut [f32]) -> Shared {
        Shared {
            ptr: v.as_mut_ptr(),
            len: v.len(),
        }
    }

    /// # Safety
    /// `[at, at + len)` lies in the buffer, and no task may write it while the returned slice
    /// lives.
    unsafe fn slice<'a>(self, at: usize, len: usize) -> &'a [f32] {
        debug_assert!(at + len <= self.len, "lstm_split: read out of bounds");
        std::slice::from_raw_parts(self.ptr.add(at), len)
    }

    /// # Safety
    /// `[at, at + len)` lies in the buffer, and no other task may read or write it while the
    /// returned slice lives.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slice_mut<'a>(self, at: usize, len: usize) -> &'a mut [f32] {
        debug_assert!(at + len <= self.len, "lstm_split: write out of bounds");
        std::slice::from_raw_parts_mut(self.ptr.add(at), len)
    }
}

/// Run every step of `seq` split across the pool, from the hidden state `h` and cell state `c`
/// (`[batch, hidden]`, updated to the last step's), writing each step's hidden state to `out`
/// (`[steps, batch, hidden]`). Returns false, touching nothing, when the sequence is too small
/// to split or its sizes do not fit.
pub(super) fn run(seq: &Sequence<'_>, h: &mut [f32], c: &mut [f32], out: &mut [f32]) -> bool {
    let (hs, b) = (seq.hidden, seq.batch);
    let g = 4 * hs;
    let Some(parts) = parts_for(seq) else {
        return false;
    };
    if seq.w_hh.panel_width() == 0
        || h.len() != b * hs
        || c.len() != b * hs
        || out.len() != seq.steps * b * hs
        || seq.xg.len() != seq.steps * b * g
    {
        return false;
    }
    // the hidden state before and after each step: step s reads half s % 2, writes the other
    let mut hbuf = vec![0.0f32; 2 * b * hs];
    hbuf[..b * hs].copy_from_slice(h);
    let (hbuf_s, c_s, out_s) = (Shared::new(&mut hbuf), Shared::new(c), Shared::new(out));
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let total = seq.steps * parts;
    let work = || {
        let units = hs / parts;
        let nr = seq.w_hh.panel_width();
        // the panels of a part's units in each gate block, gate by gate
        let per = units / nr;
        let mut panels = vec![0usize; 4 * per];
        let mut gates = vec![0.0f32; 4 * units];
        loop {
            let task = next.fetch_add(1, Ordering::Relaxed);
            if task >= total {
                break;
            }
            let (s, part) = (task / parts, task % parts);
            wait_until(&done, s * parts);
            let u0 = part * units;
            for (q, ps) in panels.chunks_exact_mut(per).enumerate() {
                for (i, p) in ps.iter_mut().enumerate() {
                    *p = (q * hs + u0) / nr + i;
                }
            }
            let t = if seq.reverse { seq.steps - 1 - s } else { s };
            let (cur, nxt) = ((s % 2) * b * hs, ((s + 1) % 2) * b * hs);
            for i in 0..b {
                let xrow = &seq.xg[(t * b + i) * g..][..g];
                for (q, gq) in gates.chunks_exact_mut(units).enumerate() {
                    gq.copy_from_slice(&xrow[q * hs + u0..][..units]);
                }
                // SAFETY: the range lies in `hbuf` (2 * b * hs, i < b). Every task of the
                // previous step, the last to write this half of
                // `hbuf`, is done (`wait_until` above, with acquire ordering); tasks of this
                // step write only the other half, and no task of the next step starts before
                // this one is done.
                let hprev = unsafe { hbuf_s.slice(cur + i * hs, hs) };
                gemm::gemv_packed_b_panels(hprev, seq.w_hh, &panels, &mut gates);
                // SAFETY: the ranges lie in their buffers (sizes checked above: c is b * hs,
                // out steps * b * hs, u0 + units <= hs, i < b, t < steps). This task alone
                // owns units [u0, u0 + units) of row i of this step:
                // in `c` (the same part of the previous and next steps is ordered by the step
                // counter), in the next half of `hbuf` and in step t of `out`.
                let (cc, hn, o) = unsafe {
                    (
                        c_s.slice_mut(i * hs + u0, units),
                        hbuf_s.slice_mut(nxt + i * hs + u0, units),
                        out_s.slice_mut((t * b + i) * hs + u0, units),
                    )
                };
                cell_update(&mut gates, units, cc, hn);
                o.copy_from_slice(hn);
            }
            done.fetch_add(1, Ordering::Release);
        }
    };
    rayon::scope(|scope| {
        for _ in 1..parts {
            scope.spawn(|_| work());
        }
        work();
    });
    // every task is done (the scope joined them): the last step's hidden state
    let last = (seq.steps % 2) * b * hs;
    h.copy_from_slice(&hbuf[last..last + b * hs]);
    true
}

/// The LSTM cell on one part's gates (`[i, f, g, o]`, `units` each): `c = f * c + i * g`,
/// `h = o * tanh(c)`, as the one-thread step computes it.
fn cell_update(gates: &mut [f32], units: usize, c: &mut [f32], h: &mut [f32]) {
    vmath::apply(VecFn::Sigmoid, &mut gates[..2 * units]);
    vmath::apply(VecFn::Tanh, &mut gates[2 * units..3 * units]);
    vmath::apply(VecFn::Sigmoid, &mut gates[3 * units..]);
    for j in 0..units {
        c[j] = gates[units + j] * c[j] + gates[j] * gates[2 * units + j];
    }
    h.copy_from_slice(c);
    vmath::apply(VecFn::Tanh, h);
    for (hv, &o) in h.iter_mut().zip(&gates[3 * units..]) {
        *hv *= o;
    }
}

/// Wait until `done` reaches `target`: spin a while (a part of a step takes a microsecond or
/// so), then yield the core to whatever else runs.
fn wait_until(done: &AtomicUsize, target: usize) {
    let mut spins = 0u32;
    while done.load(Ordering::Acquire) < target {
        if spins < SPINS_BEFORE_YIELD {
            spins += 1;
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}
