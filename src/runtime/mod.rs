//! Values, objects and (in later modules) the interpreter and the module API.

pub mod interpreter;
pub mod ivalue;
pub mod ivalue_convert;
pub mod limits;
pub mod module;
pub mod swa;
pub mod traceback;

pub use ivalue::{Device, DeviceKind, Dict, DictKey, EnumValue, IValue, List, Object, Tuple};
pub use ivalue_convert::TorchType;
pub use limits::{CancelHandle, LoadOptions, RunOptions, DEFAULT_MAX_STEPS};
pub use module::{manual_seed, set_num_threads, set_num_threads_for_this_thread, Module};
pub use traceback::TracebackFrame;

/// An error raised while running TorchScript code.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// A failure of the interpreter itself (a call with the wrong number of arguments, an
    /// attribute the object lacks), with its message.
    #[error("{0}")]
    Other(String),
    /// An exception raised by the program itself (`raise ValueError(...)`); `kind` is the
    /// exception class as TorchScript names it (`builtins.ValueError`).
    #[error("{kind}: {message}")]
    Exception {
        /// `builtins.ValueError`.
        kind: String,
        /// The exception's message.
        message: String,
    },
    /// An error with the TorchScript call stack that led to it. `Display` writes it as
    /// PyTorch's interpreter does: "Traceback of TorchScript, serialized code (most recent call
    /// last)", each frame's code line with `~~~ <--- HERE` under the failing span, the same for
    /// the original Python lines when the archive has `debug_pkl` records, then the error.
    #[error("{}", DisplayTraceback { frames, cause })]
    Traceback {
        /// The calls, outermost first; the last frame holds the operation that failed.
        frames: Vec<TracebackFrame>,
        /// The error that stopped the innermost frame (never itself a traceback).
        cause: Box<crate::Error>,
    },
}

/// `RuntimeError::Traceback`'s text, built by [`traceback::write_traceback`].
struct DisplayTraceback<'a> {
    frames: &'a [TracebackFrame],
    cause: &'a crate::Error,
}

impl std::fmt::Display for DisplayTraceback<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        traceback::write_traceback(f, self.frames, self.cause)
    }
}
