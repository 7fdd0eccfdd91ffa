//! Memory limits: the largest single allocation and the total live bytes a call may hold.
//!
//! A call installs a [`MemoryBudget`] on its thread for its duration ([`with_budget`]); every heap
//! storage allocated on that thread is charged to it until the storage is freed (wherever that
//! happens). Without a budget only [`DEFAULT_MAX_ALLOC_BYTES`] applies, so an archive that asks
//! for `torch.zeros([1 << 40])` gets a typed error instead of an overcommitted mapping that the
//! first write turns into an out-of-memory kill. Allocations made on rayon worker threads inside a
//! kernel are not charged (kernels allocate their outputs on the calling thread).

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The largest single allocation allowed when no budget says otherwise (8 GiB).
pub const DEFAULT_MAX_ALLOC_BYTES: usize = 8 << 30;

/// A limit that stopped an operation: which one, its value and what was asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{which} limit exceeded: {requested} {unit} requested, the limit is {limit} {unit}")]
pub struct LimitExceeded {
    /// The option that set the limit (`max_alloc_bytes`, `timeout`, ...).
    pub which: &'static str,
    /// The limit's value.
    pub limit: u64,
    /// What the operation asked for.
    pub requested: u64,
    /// What the numbers count (`bytes`, `ms`, `steps`, ...).
    pub unit: &'static str,
}

/// The memory limits of one call and the bytes currently charged to it.
#[derive(Debug)]
pub struct MemoryBudget {
    max_single: usize,
    max_live: Option<usize>,
    live: AtomicUsize,
}

impl MemoryBudget {
    /// A budget refusing single allocations over `max_single` bytes and, if given, more than `max_live` bytes alive at once.
    pub fn new(max_single: usize, max_live: Option<usize>) -> MemoryBudget {
        MemoryBudget {
            max_single,
            max_live,
            live: AtomicUsize::new(0),
        }
    }

    /// Bytes of heap storage allocated under this budget and not yet freed.
    pub fn live_bytes(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    fn check_single(&self, nbytes: usize) -> Result<(), LimitExceeded> {
        if nbytes > self.max_single {
            return Err(LimitExceeded {
                which: "max_alloc_bytes",
                limit: self.max_single as u64,
                requested: nbytes as u64,
                unit: "bytes",
            });
        }
        Ok(())
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<MemoryBudget>>> = const { RefCell::new(None) };
}

/// Restores the previous budget when a scope ends (also on unwinding).
struct Restore(Option<Arc<MemoryBudget>>);

impl Drop for Restore {
    fn drop(&mut self) {
        let previous = self.0.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

/// Run `f` with `budget` charged for this thread's storage allocations.
pub fn with_budget<R>(budget: Arc<MemoryBudget>, f: impl FnOnce() -> R) -> R {
    let previous = CURRENT.with(|c| c.borrow_mut().replace(budget));
    let _restore = Restore(previous);
    f()
}

/// Bytes charged to a budget by one live storage; refunded on drop.
#[derive(Debug)]
pub(crate) struct Charge {
    budget: Arc<MemoryBudget>,
    nbytes: usize,
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.live.fetch_sub(self.nbytes, Ordering::Relaxed);
    }
}

/// Admit an allocation of `nbytes` under the current thread's budget (or the default cap);
/// the returned charge must live as long as the allocation.
pub(crate) fn charge(nbytes: usize) -> Result<Option<Charge>, LimitExceeded> {
    let Some(budget) = CURRENT.with(|c| c.borrow().clone()) else {
        check_default(nbytes)?;
        return Ok(None);
    };
    budget.check_single(nbytes)?;
    let before = budget.live.fetch_add(nbytes, Ordering::Relaxed);
    if let Some(max) = budget.max_live {
        let total = before.saturating_add(nbytes);
        if total > max {
            budget.live.fetch_sub(nbytes, Ordering::Relaxed);
            return Err(LimitExceeded {
                which: "max_live_bytes",
                limit: max as u64,
                requested: total as u64,
                unit: "bytes",
            });
        }
    }
    Ok(Some(Charge { budget, nbytes }))
}

fn check_default(nbytes: usize) -> Result<(), LimitExceeded> {
    if nbytes > DEFAULT_MAX_ALLOC_BYTES {
        return Err(LimitExceeded {
            which: "max_alloc_bytes",
            limit: DEFAULT_MAX_ALLOC_BYTES as u64,
            requested: nbytes as u64,
            unit: "bytes",
        });
    }
    Ok(())
}

/// Check a non-storage allocation (a list or string a program builds) of `nbytes` against the
/// single-allocation limit; it is not charged as live bytes.
pub fn check_alloc(nbytes: usize) -> Result<(), LimitExceeded> {
    match CURRENT.with(|c| c.borrow().clone()) {
        Some(b) => b.check_single(nbytes),
        None => check_default(nbytes),
    }
}
