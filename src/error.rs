//! The crate-wide error type. Each layer has its own error enum; `Error` wraps them.

use crate::tensor::budget::LimitExceeded;
use crate::tensor::{AllocError, TensorError};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Archive(#[from] crate::archive::ArchiveError),
    #[error(transparent)]
    Pickle(#[from] crate::pickle::PickleError),
    #[error(transparent)]
    Parse(#[from] crate::frontend::ParseError),
    #[error(transparent)]
    Compile(#[from] crate::ir::CompileError),
    #[error(transparent)]
    Tensor(#[from] TensorError),
    #[error(transparent)]
    Runtime(#[from] crate::runtime::RuntimeError),
    #[error("{op}: argument {index} must be {expected}, got {got}")]
    BadArgument {
        op: String,
        index: usize,
        expected: &'static str,
        got: String,
    },
    #[error("operator {0} is not supported by tsrun")]
    UnknownOp(String),
    /// Found when a function is compiled for execution (its first call): every operator overload
    /// of the function without a kernel, each with its TorchScript source line.
    #[error("{function} uses operator overloads tsrun has no kernel for:\n  {}", .ops.join("\n  "))]
    UnsupportedOps { function: String, ops: Vec<String> },
    #[error("{0}")]
    Module(String),
    /// A limit of `LoadOptions` / `RunOptions` stopped the operation.
    #[error(transparent)]
    Limit(#[from] LimitExceeded),
    /// The call was cancelled from another thread through its `CancelHandle`.
    #[error("the call was cancelled through its cancel handle")]
    Cancelled,
}

impl Error {
    /// The limit that stopped this operation, looking through TorchScript tracebacks and the
    /// layer errors that carry one.
    pub fn limit(&self) -> Option<&LimitExceeded> {
        match self {
            Error::Limit(l) => Some(l),
            Error::Tensor(TensorError::Alloc(AllocError::Limit(l))) => Some(l),
            Error::Archive(crate::archive::ArchiveError::Limit(l)) => Some(l),
            Error::Runtime(crate::runtime::RuntimeError::Traceback { cause, .. }) => cause.limit(),
            _ => None,
        }
    }

    /// Whether this operation was stopped by its cancel handle.
    pub fn is_cancelled(&self) -> bool {
        match self {
            Error::Cancelled => true,
            Error::Runtime(crate::runtime::RuntimeError::Traceback { cause, .. }) => {
                cause.is_cancelled()
            }
            _ => false,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
