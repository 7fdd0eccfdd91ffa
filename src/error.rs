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
    #[error("{function} uses operator overloads tsrun has no kernel for:{}", missing_list(.ops))]
    UnsupportedOps {
        function: String,
        ops: Vec<MissingOp>,
    },
    #[error("{0}")]
    Module(String),
    /// A limit of `LoadOptions` / `RunOptions` stopped the operation.
    #[error(transparent)]
    Limit(#[from] LimitExceeded),
    /// The call was cancelled from another thread through its `CancelHandle`.
    #[error("the call was cancelled through its cancel handle")]
    Cancelled,
    /// A golden-case folder is malformed or a result cannot be compared (`tsrun::golden`).
    #[error(transparent)]
    Golden(#[from] crate::golden::GoldenError),
}

/// A place in an archive's code file, with what a caret under it needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeLocation {
    /// `code/__torch__/model.py`.
    pub file: String,
    /// 1-based.
    pub line: usize,
    /// 1-based, in characters.
    pub col: usize,
    /// The text of the line.
    pub source_line: String,
    /// Characters the span covers on that line (at least 1).
    pub width: usize,
}

/// An operator overload without a kernel, and where the code calls it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MissingOp {
    /// `aten::special_airy_ai`.
    pub op: String,
    pub at: Option<CodeLocation>,
}

impl std::fmt::Display for MissingOp {
    /// `aten::foo.bar at "code/__torch__.py", line 12: y = torch.foo(x)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.at {
            Some(at) => write!(
                f,
                "{} at \"{}\", line {}: {}",
                self.op,
                at.file,
                at.line,
                at.source_line.trim()
            ),
            None => f.write_str(&self.op),
        }
    }
}

fn missing_list(ops: &[MissingOp]) -> String {
    ops.iter().map(|o| format!("\n  {o}")).collect()
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
