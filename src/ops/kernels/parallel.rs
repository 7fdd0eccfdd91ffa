//! The parallel driver of the shared kernels, and the strided walk of the elementwise maps.
//!
//! Rayon's splitting machinery (`join_context`, `bridge_producer_consumer`, `StackJob`, ...) and
//! ndarray's `Zip` are instantiated once per closure type. The kernels' closures are generic over
//! the element types and the op, so calling rayon or `Zip` from inside a generic kernel
//! instantiated that machinery thousands of times (issue 9: over 40 MB of the release binary's
//! code, and most of its build time). Here the work per task is a `&dyn Fn`: the drivers are
//! instantiated once, and the kernels keep only their own inner loops.
//!
//! A parallel kernel runs on the [team](for_each_index): persistent workers that spin a little
//! while between kernels before they sleep, and tasks claimed from one counter, so a layer of a
//! few microseconds (mobilenet's) is shared without rayon's sleep, wake-up and stealing per
//! layer. A call that finds the team busy (another thread's call) runs on rayon's pool instead.

use crate::tensor::Tensor;
use rayon::prelude::*;
use smallvec::SmallVec;
use std::any::Any;
use std::cell::Cell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

/// How long an idle team worker polls for the next kernel before it sleeps. The gaps between a
/// network's parallel kernels (the interpreter, small serial ops) are a few microseconds, so a
/// worker stays awake through a forward call; once calls stop it sleeps after this long.
const IDLE_SPIN: Duration = Duration::from_micros(50);

/// How long an idle team worker polls without yielding its core (see [`IDLE_SPIN`]).
const IDLE_SPIN_UNYIELDING: Duration = Duration::from_micros(5);

/// How long a caller polls for its helpers' last tasks before it sleeps until they finish (a
/// helper descheduled mid-task on a loaded machine needs the core the caller would spin on).
const JOIN_SPIN: Duration = Duration::from_micros(20);

/// Most team workers (a larger pool's tasks are shared among these and the caller).
const MAX_TEAM_WORKERS: usize = 255;

thread_local! {
    /// Set while this thread runs team tasks: a parallel call nested in one runs in place.
    static IN_TEAM_TASK: Cell<bool> = const { Cell::new(false) };
}

/// The tasks of one parallel call, shared by its caller and the workers that help.
struct Job {
    /// The work per task with its lifetime erased. It is called only for an index below
    /// `count` claimed from `next`, and the caller does not return (so the closure outlives
    /// the call) before every claimed task has finished (see [`JoinGuard`]).
    f: *const (dyn Fn(usize) + Sync + 'static),
    count: usize,
    /// The next unclaimed task (`count` or more: none left).
    next: AtomicUsize,
    /// Workers that may still join (the call's thread count minus the caller).
    seats: AtomicUsize,
    /// Tasks the workers have finished.
    helped: AtomicUsize,
    /// Set while the caller sleeps on `joined` for the workers' last tasks.
    caller_asleep: AtomicBool,
    join_lock: Mutex<()>,
    joined: Condvar,
    /// The payload of the first task that panicked on a worker, re-raised by the caller.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    panicked: AtomicBool,
}

// SAFETY: `f` points to a `Sync` closure, so calling it from several threads at once is
// allowed, and it is dereferenced only while the caller keeps it alive (see `Job::f`); the
// other fields are atomics and a mutex.
unsafe impl Send for Job {}
// SAFETY: as for `Send`.
unsafe impl Sync for Job {}

impl Job {
    /// Claims and runs tasks until none are left; a panic is kept for the caller.
    fn help(&self) {
        let _flag = TaskFlag::set();
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.count {
                return;
            }
            // SAFETY: task `i < count` was claimed above, so the caller is still waiting for
            // it in `JoinGuard::drop` and the closure behind `f` is alive.
            let f = unsafe { &*self.f };
            if let Err(payload) = catch_unwind(AssertUnwindSafe(|| f(i))) {
                if !self.panicked.swap(true, Ordering::Relaxed) {
                    *lock(&self.panic) = Some(payload);
                }
            }
            // SeqCst with `caller_asleep`: either the caller's check after it set the flag
            // sees this task done, or this load sees the flag and wakes it (under
            // `join_lock`, so not before it waits).
            self.helped.fetch_add(1, Ordering::SeqCst);
            if self.caller_asleep.load(Ordering::SeqCst) {
                let _guard = lock(&self.join_lock);
                self.joined.notify_one();
            }
        }
    }
}

/// Sets [`IN_TEAM_TASK`] for its lifetime (restoring the previous value, also on unwinding).
struct TaskFlag(bool);

impl TaskFlag {
    fn set() -> Self {
        TaskFlag(IN_TEAM_TASK.with(|c| c.replace(true)))
    }
}

impl Drop for TaskFlag {
    fn drop(&mut self) {
        IN_TEAM_TASK.with(|c| c.set(self.0));
    }
}

/// The persistent workers and the job they serve.
struct Team {
    /// Held by the thread whose call the team runs; one call at a time.
    owner: Mutex<()>,
    /// The current job (workers take a reference when they see `epoch` change).
    job: Mutex<Option<Arc<Job>>>,
    /// Counts the jobs published.
    epoch: AtomicU64,
    /// Workers asleep on `wake` (guarded by `sleep` for the sleep/wake handshake).
    sleepers: AtomicUsize,
    sleep: Mutex<()>,
    wake: Condvar,
    /// Workers started (only by the owner, so a plain counter under `owner`).
    workers: AtomicUsize,
}

static TEAM: Team = Team {
    owner: Mutex::new(()),
    job: Mutex::new(None),
    epoch: AtomicU64::new(0),
    sleepers: AtomicUsize::new(0),
    sleep: Mutex::new(()),
    wake: Condvar::new(),
    workers: AtomicUsize::new(0),
};

/// A mutex's guard, also when a panic elsewhere poisoned it (the data here stays consistent:
/// every critical section is a single store or wait).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Team {
    /// Starts workers until there are `want` (fewer if the system refuses a thread: the caller
    /// then does more of the tasks itself). Called by the owner only.
    fn grow(&'static self, want: usize) {
        let want = want.min(MAX_TEAM_WORKERS);
        while self.workers.load(Ordering::Relaxed) < want {
            let seen = self.epoch.load(Ordering::SeqCst);
            let n = self.workers.load(Ordering::Relaxed);
            let started = std::thread::Builder::new()
                .name(format!("tsrun-team-{n}"))
                .spawn(move || self.serve(seen));
            if started.is_err() {
                return;
            }
            self.workers.store(n + 1, Ordering::Relaxed);
        }
    }

    /// A worker's loop: wait for a new job, help with it, repeat.
    fn serve(&self, mut seen: u64) {
        loop {
            seen = self.next_epoch(seen);
            let job = lock(&self.job).clone();
            if let Some(job) = job {
                let seat = job
                    .seats
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| s.checked_sub(1));
                if seat.is_ok() {
                    job.help();
                }
            }
        }
    }

    /// Waits until a job after `seen` is published: polls for [`IDLE_SPIN`] (yielding the core
    /// between polls after [`IDLE_SPIN_UNYIELDING`], so on a loaded machine the poll costs
    /// others little), then sleeps.
    fn next_epoch(&self, seen: u64) -> u64 {
        let start = Instant::now();
        let mut polls = 0u32;
        let mut yielding = false;
        loop {
            let e = self.epoch.load(Ordering::Acquire);
            if e != seen {
                return e;
            }
            if yielding {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
            polls = polls.wrapping_add(1);
            if yielding || polls.is_multiple_of(64) {
                let waited = start.elapsed();
                if waited >= IDLE_SPIN {
                    break;
                }
                yielding = waited >= IDLE_SPIN_UNYIELDING;
            }
        }
        let mut guard = lock(&self.sleep);
        // SeqCst here and in `publish`: either the publisher sees this sleeper and notifies
        // (under `sleep`, so not before this thread waits), or this load sees its epoch.
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        loop {
            let e = self.epoch.load(Ordering::SeqCst);
            if e != seen {
                self.sleepers.fetch_sub(1, Ordering::SeqCst);
                return e;
            }
            guard = self.wake.wait(guard).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Makes `job` the current job and wakes sleeping workers.
    fn publish(&self, job: Arc<Job>) {
        *lock(&self.job) = Some(job);
        self.epoch.fetch_add(1, Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            let _guard = lock(&self.sleep);
            self.wake.notify_all();
        }
    }
}

/// Waits, when dropped (also while a task of the caller unwinds), until every task a worker
/// claimed has finished, after closing the job to further claims.
struct JoinGuard<'a> {
    job: &'a Job,
    /// Tasks the caller claimed itself.
    mine: usize,
}

impl Drop for JoinGuard<'_> {
    fn drop(&mut self) {
        let job = self.job;
        let claimed = job.next.swap(job.count, Ordering::AcqRel).min(job.count);
        let theirs = claimed.saturating_sub(self.mine);
        let start = Instant::now();
        let mut polls = 0u32;
        while job.helped.load(Ordering::Acquire) < theirs {
            std::hint::spin_loop();
            polls = polls.wrapping_add(1);
            if polls.is_multiple_of(64) && start.elapsed() >= JOIN_SPIN {
                let mut guard = lock(&job.join_lock);
                job.caller_asleep.store(true, Ordering::SeqCst);
                while job.helped.load(Ordering::SeqCst) < theirs {
                    guard = job.joined.wait(guard).unwrap_or_else(|e| e.into_inner());
                }
                break;
            }
        }
        *lock(&TEAM.job) = None;
    }
}

/// `f(i)` for every `i` in `0..count`, shared among the current pool's threads (rayon's
/// `current_num_threads`): the calling thread and team workers claim tasks one at a time from
/// a counter, so a worker still asleep or busy elsewhere leaves its tasks to the others and
/// nobody waits for it to wake. Callers size the tasks (equal shares, a few per thread).
///
/// In place when the pool has one thread or when called from inside a task; on rayon's pool
/// when another thread's call holds the team. A panic in a task is re-raised here after every
/// started task has finished.
pub(crate) fn for_each_index(count: usize, f: &(dyn Fn(usize) + Sync)) {
    let threads = rayon::current_num_threads();
    if count <= 1 || threads <= 1 || IN_TEAM_TASK.with(Cell::get) {
        (0..count).for_each(f);
        return;
    }
    let _owner = match TEAM.owner.try_lock() {
        Ok(g) => g,
        Err(TryLockError::Poisoned(p)) => p.into_inner(),
        Err(TryLockError::WouldBlock) => {
            (0..count).into_par_iter().for_each(f);
            return;
        }
    };
    TEAM.grow(threads - 1);
    // SAFETY: only the lifetime is erased; `Job::f` says why the closure outlives its uses.
    let erased: *const (dyn Fn(usize) + Sync + 'static) = unsafe {
        std::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), *const (dyn Fn(usize) + Sync)>(f)
    };
    let job = Arc::new(Job {
        f: erased,
        count,
        next: AtomicUsize::new(0),
        seats: AtomicUsize::new(threads - 1),
        helped: AtomicUsize::new(0),
        caller_asleep: AtomicBool::new(false),
        join_lock: Mutex::new(()),
        joined: Condvar::new(),
        panic: Mutex::new(None),
        panicked: AtomicBool::new(false),
    });
    TEAM.publish(Arc::clone(&job));
    {
        let _flag = TaskFlag::set();
        let mut join = JoinGuard { job: &job, mine: 0 };
        loop {
            let i = job.next.fetch_add(1, Ordering::Relaxed);
            if i >= count {
                break;
            }
            join.mine += 1;
            f(i);
        }
    }
    if job.panicked.load(Ordering::Relaxed) {
        if let Some(payload) = lock(&job.panic).take() {
            resume_unwind(payload);
        }
    }
}

/// `g(first, end)` over about `per_thread` equal ranges per pool thread covering `0..count`,
/// through [`for_each_index`].
fn for_each_range(count: usize, per_thread: usize, g: &(dyn Fn(usize, usize) + Sync)) {
    let parts = count.min(per_thread.max(1) * rayon::current_num_threads().max(1));
    if parts <= 1 {
        g(0, count);
        return;
    }
    let per = count.div_ceil(parts);
    for_each_index(count.div_ceil(per), &|p| {
        g(p * per, ((p + 1) * per).min(count))
    });
}

/// A slice's base pointer shared by the tasks of one call, each of which makes a `&mut` to its
/// own disjoint piece.
struct SharedMut<T>(*mut T);
// SAFETY: the tasks given the pointer write disjoint pieces (see each use), and `T: Send`
// allows handing those elements to another thread.
unsafe impl<T: Send> Sync for SharedMut<T> {}

impl<T> SharedMut<T> {
    /// The elements `start .. start + len`.
    ///
    /// # Safety
    /// The range lies inside the slice the pointer came from, that slice is mutably borrowed
    /// for the lifetime `'a`, and no other `&mut` to these elements exists meanwhile.
    #[allow(clippy::mut_from_ref)]
    unsafe fn piece<'a>(&self, start: usize, len: usize) -> &'a mut [T] {
        std::slice::from_raw_parts_mut(self.0.add(start), len)
    }
}

/// Pieces per pool thread the chunk drivers make (as equal runs of chunks): a few, so a worker
/// that starts late leaves the caller little to wait for.
const RANGES_PER_THREAD: usize = 4;

/// `f(k, piece_k)` over the `chunk`-sized pieces of `dst` (piece `k` starts at `k * chunk`; the
/// last may be shorter), on the kernel pool when `par`.
pub(crate) fn for_each_chunk_mut<T: Send>(
    dst: &mut [T],
    chunk: usize,
    par: bool,
    f: &(dyn Fn(usize, &mut [T]) + Sync),
) {
    let chunk = chunk.max(1);
    let len = dst.len();
    if !par || len <= chunk {
        dst.chunks_mut(chunk).enumerate().for_each(|(k, d)| f(k, d));
        return;
    }
    let base = SharedMut(dst.as_mut_ptr());
    for_each_range(len.div_ceil(chunk), RANGES_PER_THREAD, &|k0, k1| {
        for k in k0..k1 {
            let start = k * chunk;
            // SAFETY: `start < len` for `k < len.div_ceil(chunk)`, the piece ends within
            // `dst` (borrowed mutably for this call), and each `k` is visited once, so the
            // pieces are disjoint.
            let piece = unsafe { base.piece(start, chunk.min(len - start)) };
            f(k, piece);
        }
    });
}

/// The work on piece `k` of two outputs, for [`for_each_chunk_mut2`].
type PairChunkFn<'a, T, U> = dyn Fn(usize, &mut [T], &mut [U]) + Sync + 'a;

/// [`for_each_chunk_mut`] over two outputs split alike: `f(k, a_k, b_k)` with `a_k` the
/// `chunk_a`-sized piece `k` of `a` and `b_k` the `chunk_b`-sized piece `k` of `b`, for as many
/// pieces as both have.
pub(crate) fn for_each_chunk_mut2<T: Send, U: Send>(
    a: &mut [T],
    b: &mut [U],
    (chunk_a, chunk_b): (usize, usize),
    par: bool,
    f: &PairChunkFn<'_, T, U>,
) {
    let (chunk_a, chunk_b) = (chunk_a.max(1), chunk_b.max(1));
    let (len_a, len_b) = (a.len(), b.len());
    let pieces = len_a.div_ceil(chunk_a).min(len_b.div_ceil(chunk_b));
    if !par || pieces <= 1 {
        a.chunks_mut(chunk_a)
            .zip(b.chunks_mut(chunk_b))
            .enumerate()
            .for_each(|(k, (x, y))| f(k, x, y));
        return;
    }
    let (base_a, base_b) = (SharedMut(a.as_mut_ptr()), SharedMut(b.as_mut_ptr()));
    for_each_range(pieces, RANGES_PER_THREAD, &|k0, k1| {
        for k in k0..k1 {
            let (sa, sb) = (k * chunk_a, k * chunk_b);
            // SAFETY: `k < pieces`, so both starts lie inside their slices (borrowed mutably
            // for this call), the pieces end within them, and each `k` is visited once.
            let (x, y) = unsafe {
                (
                    base_a.piece(sa, chunk_a.min(len_a - sa)),
                    base_b.piece(sb, chunk_b.min(len_b - sb)),
                )
            };
            f(k, x, y);
        }
    });
}

/// `f(k, parts[k])` for every part, on the kernel pool when `par` (one task per part: callers
/// make a few equal parts per thread).
pub(crate) fn for_each_part_mut<T: Send>(
    parts: &mut [&mut [T]],
    par: bool,
    f: &(dyn Fn(usize, &mut [T]) + Sync),
) {
    if !par || parts.len() <= 1 {
        parts.iter_mut().enumerate().for_each(|(k, p)| f(k, p));
        return;
    }
    let count = parts.len();
    let base = SharedMut(parts.as_mut_ptr());
    for_each_index(count, &|k| {
        // SAFETY: `k < count` indexes `parts` (borrowed mutably for this call) and each `k`
        // is visited once, so this is the only `&mut` to part `k`.
        if let Some(part) = unsafe { base.piece(k, 1) }.first_mut() {
            f(k, part);
        }
    });
}

/// `N` operands broadcast to a contiguous output, as rows: the output's dims with size-1 dims
/// dropped and adjacent dims merged wherever every operand allows (so the last dim, the row, is
/// as long as possible), and each operand's element strides (0 along broadcast dims). Operands
/// are read through [`TensorRead::span`](crate::tensor::TensorRead::span).
pub(crate) struct Rows<const N: usize> {
    /// The merged dims before the row.
    outer: SmallVec<[usize; 6]>,
    outer_strides: SmallVec<[[usize; N]; 6]>,
    /// The row length (the last merged dim; 1 for a single element).
    pub(crate) len: usize,
    /// Each operand's stride along the row.
    pub(crate) strides: [usize; N],
}

impl<const N: usize> Rows<N> {
    /// The layout of `operands` broadcast to `shape` (an error naming both shapes if one does
    /// not broadcast).
    pub(crate) fn new(shape: &[usize], operands: [&Tensor; N]) -> crate::Result<Self> {
        let nd = shape.len();
        let mut dims: SmallVec<[(usize, [usize; N]); 6]> = SmallVec::new();
        for d in 0..nd {
            if shape[d] == 1 {
                continue;
            }
            let mut st = [0usize; N];
            for (o, t) in operands.iter().enumerate() {
                let lead = nd
                    .checked_sub(t.dim())
                    .ok_or_else(|| bad(t.shape(), shape))?;
                if d < lead {
                    continue; // a missing leading dim: broadcast
                }
                let size = t.shape()[d - lead];
                if size == shape[d] {
                    st[o] = t.strides()[d - lead].unsigned_abs();
                } else if size != 1 {
                    return Err(bad(t.shape(), shape));
                }
            }
            if let Some((psize, pst)) = dims.last_mut() {
                if (0..N).all(|o| pst[o] == st[o] * shape[d]) {
                    *psize *= shape[d];
                    *pst = st;
                    continue;
                }
            }
            dims.push((shape[d], st));
        }
        let (len, strides) = dims.pop().unwrap_or((1, [0; N]));
        Ok(Rows {
            outer: dims.iter().map(|d| d.0).collect(),
            outer_strides: dims.iter().map(|d| d.1).collect(),
            len,
            strides,
        })
    }

    /// `f(r, offsets)` for rows `first .. first + count`, `r` counting from 0 and `offsets` each
    /// operand's element offset of the row's first element.
    pub(crate) fn walk(&self, first: usize, count: usize, f: &mut dyn FnMut(usize, [usize; N])) {
        let nd = self.outer.len();
        let mut idx: SmallVec<[usize; 6]> = SmallVec::from_elem(0, nd);
        let mut offs = [0usize; N];
        let mut rest = first;
        for d in (0..nd).rev() {
            idx[d] = rest % self.outer[d];
            rest /= self.outer[d];
            for (o, off) in offs.iter_mut().enumerate() {
                *off += idx[d] * self.outer_strides[d][o];
            }
        }
        for r in 0..count {
            f(r, offs);
            // advance the odometer
            for d in (0..nd).rev() {
                idx[d] += 1;
                if idx[d] < self.outer[d] {
                    for (o, off) in offs.iter_mut().enumerate() {
                        *off += self.outer_strides[d][o];
                    }
                    break;
                }
                idx[d] = 0;
                for (o, off) in offs.iter_mut().enumerate() {
                    *off -= (self.outer[d] - 1) * self.outer_strides[d][o];
                }
            }
        }
    }

    /// Rows per parallel task so that a task covers about `elements` output elements.
    pub(crate) fn rows_per_task(&self, elements: usize) -> usize {
        (elements / self.len.max(1)).max(1)
    }
}

fn bad(from: &[usize], to: &[usize]) -> crate::Error {
    super::invalid_argument(
        "expand",
        "shape",
        format!("must broadcast to {to:?}"),
        format!("{from:?}"),
    )
}
