//! Values, objects and (in later modules) the interpreter and the module API.

pub mod interpreter;
pub mod ivalue;
pub mod ivalue_convert;
pub mod limits;
pub mod module;
pub mod swa;

pub use ivalue::{Device, DeviceKind, Dict, DictKey, EnumValue, IValue, List, Object, Tuple};
pub use ivalue_convert::TorchType;
pub use limits::{CancelHandle, LoadOptions, RunOptions, DEFAULT_MAX_STEPS};
pub use module::{manual_seed, set_num_threads, set_num_threads_for_this_thread, Module};

/// An error raised while running TorchScript code.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("{0}")]
    Other(String),
    /// An exception raised by the program itself (`raise ValueError(...)`); `kind` is the
    /// exception class as TorchScript names it (`builtins.ValueError`).
    #[error("{kind}: {message}")]
    Exception { kind: String, message: String },
    /// An error with the TorchScript call stack that led to it, outermost frame first.
    #[error("The following operation failed in the TorchScript interpreter.\nTraceback of TorchScript (most recent call last):\n{}{cause}", .frames.concat())]
    Traceback {
        frames: Vec<String>,
        cause: Box<crate::Error>,
    },
}
