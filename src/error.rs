//! The crate-wide error type. Each layer has its own error enum; `Error` wraps them.

use crate::tensor::TensorError;

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
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
