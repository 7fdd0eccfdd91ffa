//! Limits on loading an archive ([`LoadOptions`]) and on running a call ([`RunOptions`]), with
//! safe defaults: a model file is untrusted input, so every size, depth and duration it can
//! drive is bounded, and the error names the limit that stopped it.

#![deny(missing_docs)]

use crate::archive::ArchiveLimits;
use crate::ops::call_limits::CallLimits;
pub use crate::ops::call_limits::CancelHandle;
use crate::ops::OpContext;
pub use crate::ops::QuantizedEngine;
use crate::runtime::interpreter::{default_context, MAX_CALL_DEPTH};
use crate::tensor::budget::{MemoryBudget, DEFAULT_MAX_ALLOC_BYTES};
use std::sync::Arc;
use std::time::Duration;

/// Bounds on loading an archive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadOptions {
    /// Largest archive file accepted, in bytes.
    pub max_archive_bytes: u64,
    /// Most zip records accepted.
    pub max_records: usize,
    /// Deepest container nesting in `data.pkl` / `constants.pkl` (at most
    /// `pickle::MAX_NESTING`).
    pub max_pickle_depth: usize,
    /// Deepest nesting of blocks and expressions in the archive's code.
    pub max_code_depth: usize,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            max_archive_bytes: ArchiveLimits::DEFAULT.max_archive_bytes,
            max_records: ArchiveLimits::DEFAULT.max_records,
            max_pickle_depth: crate::pickle::MAX_NESTING,
            max_code_depth: crate::frontend::DEFAULT_MAX_CODE_DEPTH,
        }
    }
}

impl LoadOptions {
    /// The archive-level part of these options, for the archive reader.
    pub fn archive_limits(&self) -> ArchiveLimits {
        ArchiveLimits {
            max_archive_bytes: self.max_archive_bytes,
            max_records: self.max_records,
        }
    }
}

/// Interpreter steps (instructions and loop iterations) a call may take by default: about a
/// billion, far beyond any real model's call (resnet18's forward takes a few hundred), yet a
/// `while True:` in a hostile archive stops within seconds to a minute instead of never.
pub const DEFAULT_MAX_STEPS: u64 = 1 << 30;

/// Bounds on one call (`Module::run_method_opts`, `Module::call_opts`; `forward`, `call` and
/// `run_method` run under the defaults). The defaults stop nothing a real model does: no
/// deadline, a step budget of [`DEFAULT_MAX_STEPS`] (`max_steps: None` lifts it),
/// PyTorch-like recursion depth, and a single allocation of at most 8 GiB.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Wall-clock time the call may take.
    pub timeout: Option<Duration>,
    /// Interpreter steps (instructions and loop iterations) the call may take.
    pub max_steps: Option<u64>,
    /// Deepest TorchScript call nesting.
    pub max_call_depth: usize,
    /// Largest single storage (or list/string a program builds), in bytes.
    pub max_alloc_bytes: usize,
    /// Total bytes of heap storage the call may hold at once (allocated on its thread).
    pub max_live_bytes: Option<usize>,
    /// Cancels the call from another thread.
    pub cancel: Option<CancelHandle>,
    /// Seeds a generator of the call's own (`torch.manual_seed(seed)` before the call);
    /// `None` uses the process-wide generator.
    pub seed: Option<u64>,
    /// The quantized engine whose arithmetic quantized convolutions follow: by default
    /// PyTorch's default engine as it runs on this CPU ([`QuantizedEngine::Native`]).
    pub quantized_engine: QuantizedEngine,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            timeout: None,
            max_steps: Some(DEFAULT_MAX_STEPS),
            max_call_depth: MAX_CALL_DEPTH,
            max_alloc_bytes: DEFAULT_MAX_ALLOC_BYTES,
            max_live_bytes: None,
            cancel: None,
            seed: None,
            quantized_engine: QuantizedEngine::Native,
        }
    }
}

impl RunOptions {
    /// The operator context of one call under these options (a fresh step count and clock).
    pub fn context(&self) -> OpContext {
        let generator = match self.seed {
            Some(seed) => OpContext::with_seed(seed).generator,
            None => default_context().generator.clone(),
        };
        OpContext {
            generator,
            limits: Some(Arc::new(CallLimits::new(
                self.timeout,
                self.max_steps,
                self.max_call_depth,
                self.cancel.clone(),
            ))),
            quantized_engine: self.quantized_engine,
        }
    }

    /// The memory budget of one call under these options.
    pub fn memory_budget(&self) -> Arc<MemoryBudget> {
        Arc::new(MemoryBudget::new(self.max_alloc_bytes, self.max_live_bytes))
    }
}
