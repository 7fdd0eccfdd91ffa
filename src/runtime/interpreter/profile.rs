//! Per-operator timing of calls (`tsrun bench --profile`, [`profile_calls`]): the wall time of
//! each leaf instruction (a kernel, a fused chain, an attribute read, ...) summed by operator.
//!
//! Only the thread that opened the profile is timed: work a kernel shares with the pool's
//! threads counts in its wall time, and a forked body running on another thread counts in the
//! `aten::wait` that joins it. Calls, branches and loops are not leaves: what runs inside them
//! is timed, and their own bookkeeping is left in the gap between the call's wall time and the
//! operators' sum.

use super::plan::{Instr, Op};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Threads with a profile open. With none, the interpreter pays one relaxed load per
/// instruction.
static OPEN: AtomicUsize = AtomicUsize::new(0);

/// Timings by instruction (its address: plans live as long as their module).
type Timings = HashMap<usize, OpTime>;

thread_local! {
    static TIMINGS: RefCell<Option<Timings>> = const { RefCell::new(None) };
    /// A leaf is being timed: instructions a leaf runs itself (a fused module chain that
    /// falls back to its modules' calls) belong to it.
    static IN_LEAF: Cell<bool> = const { Cell::new(false) };
}

/// The time spent in one operator over the profiled calls.
#[derive(Clone, Debug, PartialEq)]
pub struct OpTime {
    /// The operator overload (`aten::conv2d`), or what a fused instruction runs
    /// (`fused elementwise (aten::add + aten::relu)`).
    pub op: String,
    /// How many times it ran.
    pub calls: u64,
    /// Its summed wall time.
    pub total: Duration,
}

/// Closes the thread's profile when `profile_calls` returns or unwinds.
struct Open;

impl Drop for Open {
    fn drop(&mut self) {
        IN_LEAF.set(false);
        OPEN.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Run `f` (calls of modules or methods on this thread) and return what it returned with the
/// time spent in each operator, the most expensive first. A profile opened inside another on
/// the same thread reports nothing (the outer one keeps the times).
pub fn profile_calls<R>(f: impl FnOnce() -> R) -> (R, Vec<OpTime>) {
    let nested = TIMINGS.with(|t| {
        let mut t = t.borrow_mut();
        let nested = t.is_some();
        if !nested {
            *t = Some(Timings::new());
        }
        nested
    });
    if nested {
        return (f(), Vec::new());
    }
    OPEN.fetch_add(1, Ordering::Relaxed);
    let open = Open;
    let out = f();
    drop(open);
    let timings = TIMINGS.with(|t| t.borrow_mut().take()).unwrap_or_default();
    let mut by_op: HashMap<String, OpTime> = HashMap::new();
    for time in timings.into_values() {
        let entry = by_op.entry(time.op.clone()).or_insert(OpTime {
            op: time.op,
            calls: 0,
            total: Duration::ZERO,
        });
        entry.calls += time.calls;
        entry.total += time.total;
    }
    let mut ops: Vec<OpTime> = by_op.into_values().collect();
    ops.sort_by(|a, b| b.total.cmp(&a.total).then_with(|| a.op.cmp(&b.op)));
    (out, ops)
}

/// The timing of one leaf instruction in progress.
pub(super) struct LeafTimer(Instant);

/// Start timing `instr` when this thread has a profile open and `instr` is a leaf not inside
/// another timed leaf.
#[inline]
pub(super) fn start(instr: &Instr) -> Option<LeafTimer> {
    if OPEN.load(Ordering::Relaxed) == 0 {
        return None;
    }
    start_open(instr)
}

#[cold]
fn start_open(instr: &Instr) -> Option<LeafTimer> {
    let container = matches!(
        instr.op,
        Op::If { .. }
            | Op::Loop { .. }
            | Op::Fork { .. }
            | Op::CallMethod { .. }
            | Op::CallFunction { .. }
    );
    if container || IN_LEAF.get() || !TIMINGS.with(|t| t.borrow().is_some()) {
        return None;
    }
    IN_LEAF.set(true);
    Some(LeafTimer(Instant::now()))
}

impl LeafTimer {
    /// Add the time since `start` to `instr`'s total.
    pub(super) fn finish(self, instr: &Instr) {
        let elapsed = self.0.elapsed();
        IN_LEAF.set(false);
        TIMINGS.with(|t| {
            if let Some(timings) = t.borrow_mut().as_mut() {
                let time = timings
                    .entry(instr as *const Instr as usize)
                    .or_insert_with(|| OpTime {
                        op: label(&instr.op),
                        calls: 0,
                        total: Duration::ZERO,
                    });
                time.calls += 1;
                time.total += elapsed;
            }
        });
    }
}

/// What a leaf instruction runs, as the profile names it.
fn label(op: &Op) -> String {
    let fixed = match op {
        Op::Kernel { name, .. } | Op::SortObjects { name, .. } => return name.to_string(),
        Op::Custom(custom) => return custom.name.to_string(),
        Op::OutVariant(o) => return o.name.to_string(),
        Op::NodePrim(prim) => prim.kind(),
        Op::ElementwiseChain { kernels, .. } => {
            let names: Vec<&str> = kernels.iter().map(|k| &*k.name).collect();
            return format!("fused elementwise ({})", names.join(" + "));
        }
        Op::CachedRegion(region) => return region.label.to_string(),
        Op::ModuleChain(chain) => {
            let steps: Vec<&str> = chain.steps.iter().map(|s| s.kind.label()).collect();
            return format!("fused modules ({})", steps.join(" + "));
        }
        Op::GetAttr { .. } => "prim::GetAttr",
        Op::SetAttr { .. } => "prim::SetAttr",
        Op::TupleConstruct { .. } => "prim::TupleConstruct",
        Op::TupleUnpack => "prim::TupleUnpack",
        Op::TupleIndex => "prim::TupleIndex",
        Op::TupleSlice { .. } => "prim::TupleSlice",
        Op::ListConstruct { .. } => "prim::ListConstruct",
        Op::ListUnpack => "prim::ListUnpack",
        Op::DictConstruct { .. } => "prim::DictConstruct",
        Op::Raise => "prim::RaiseException",
        Op::Uninitialized => "prim::Uninitialized",
        Op::Identity => "casts and unwraps without work",
        Op::IsInstance { .. } => "prim::isinstance",
        Op::CreateObject { .. } => "prim::CreateObject",
        Op::Enter => "prim::Enter",
        Op::Exit => "prim::Exit",
        Op::Print => "prim::Print",
        Op::Warn { .. } => "aten::warn",
        Op::Wait => "aten::wait",
        Op::Refused(_) | Op::Missing { .. } => "unsupported operator",
        Op::If { .. } => "prim::If",
        Op::Loop { .. } => "prim::Loop",
        Op::Fork { .. } => "prim::fork",
        Op::CallMethod { .. } => "prim::CallMethod",
        Op::CallFunction { .. } => "prim::CallFunction",
    };
    fixed.to_string()
}
