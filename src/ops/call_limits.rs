//! What a running call may spend: a deadline, a step budget, a recursion depth, and a flag
//! another thread sets to cancel it. The interpreter polls these between instructions and at
//! every loop iteration (`RunOptions` in the runtime builds them).

use crate::tensor::budget::LimitExceeded;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Cancels a running call from any thread: `handle.cancel()`; the call stops at its next
/// instruction or loop iteration with `Error::Cancelled`. Clones share the flag.
#[derive(Clone, Debug, Default)]
pub struct CancelHandle(Arc<AtomicBool>);

impl CancelHandle {
    pub fn new() -> CancelHandle {
        CancelHandle::default()
    }
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Why a poll stopped the call.
#[derive(Debug)]
pub enum Stop {
    Limit(LimitExceeded),
    Cancelled,
}

/// Steps between two reads of the clock (a step is one instruction or loop iteration).
const CLOCK_EVERY: u64 = 64;

/// The limits of one call, with the steps it has taken so far.
#[derive(Debug)]
pub struct CallLimits {
    start: Instant,
    timeout: Option<Duration>,
    max_steps: Option<u64>,
    /// Deepest TorchScript call nesting.
    pub max_call_depth: usize,
    cancel: Option<CancelHandle>,
    steps: AtomicU64,
}

impl CallLimits {
    pub fn new(
        timeout: Option<Duration>,
        max_steps: Option<u64>,
        max_call_depth: usize,
        cancel: Option<CancelHandle>,
    ) -> CallLimits {
        CallLimits {
            start: Instant::now(),
            timeout,
            max_steps,
            max_call_depth,
            cancel,
            steps: AtomicU64::new(0),
        }
    }

    /// Steps taken so far.
    pub fn steps(&self) -> u64 {
        self.steps.load(Ordering::Relaxed)
    }

    /// Count one step and check every limit.
    #[inline]
    pub fn step(&self) -> Result<(), Stop> {
        let n = self.steps.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(max) = self.max_steps {
            if n > max {
                return Err(Stop::Limit(LimitExceeded {
                    which: "max_steps",
                    limit: max,
                    requested: n,
                    unit: "steps",
                }));
            }
        }
        if self.cancel.as_ref().is_some_and(|c| c.is_cancelled()) {
            return Err(Stop::Cancelled);
        }
        if n.is_multiple_of(CLOCK_EVERY) || n == 1 {
            self.poll()?;
        }
        Ok(())
    }

    /// Check the clock and the cancel flag (without counting a step).
    pub fn poll(&self) -> Result<(), Stop> {
        if self.cancel.as_ref().is_some_and(|c| c.is_cancelled()) {
            return Err(Stop::Cancelled);
        }
        if let Some(t) = self.timeout {
            let elapsed = self.start.elapsed();
            if elapsed > t {
                return Err(Stop::Limit(LimitExceeded {
                    which: "timeout",
                    limit: t.as_millis() as u64,
                    requested: elapsed.as_millis() as u64,
                    unit: "ms",
                }));
            }
        }
        Ok(())
    }
}
