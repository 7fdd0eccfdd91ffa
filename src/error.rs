//! The crate-wide error type. Each layer has its own error enum; [`Error`] wraps them, and
//! [`Error::kind`] sorts every error into one of a few [`ErrorKind`]s callers can `match` on.

pub use crate::archive::ArchiveError;
pub use crate::frontend::ParseError;
pub use crate::ir::CompileError;
pub use crate::pickle::PickleError;
pub use crate::tensor::budget::LimitExceeded;
use crate::tensor::AllocError;
pub use crate::tensor::TensorError;

/// Every error tsrun returns.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading or writing a file or stream failed.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The archive's zip structure or records are malformed or unsupported.
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    /// A pickle in the archive (`data.pkl`, `constants.pkl`) is malformed or refused.
    #[error(transparent)]
    Pickle(#[from] PickleError),
    /// The archive's TorchScript code does not parse.
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// TorchScript code or IR text does not compile (type errors, unknown names).
    #[error(transparent)]
    Compile(#[from] CompileError),
    /// A tensor operation got incompatible shapes, dtypes or storage.
    #[error(transparent)]
    Tensor(#[from] TensorError),
    /// Running TorchScript code failed (with its TorchScript traceback).
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// An operator got an argument of the wrong kind.
    #[error("{op}: argument {index} must be {expected}, got {got}")]
    BadArgument {
        /// The operator (`aten::add.Tensor`).
        op: String,
        /// The argument's position in the schema.
        index: usize,
        /// What the schema wants there.
        expected: &'static str,
        /// What the call passed.
        got: String,
    },
    /// An operator name no kernel or schema knows.
    #[error("operator {0} is not supported by tsrun")]
    UnknownOp(String),
    /// Found when a function is compiled for execution (its first call): every operator overload
    /// of the function without a kernel, each with its TorchScript source line.
    #[error("{function} uses operator overloads tsrun has no kernel for:{}", missing_list(.ops))]
    UnsupportedOps {
        /// The function or method being compiled (`__torch__.Net.forward`).
        function: String,
        /// Every overload without a kernel, in the order the code calls them.
        ops: Vec<MissingOp>,
    },
    /// A module API call was given something it cannot take (an unknown attribute or
    /// submodule name, a value of the wrong type), with PyTorch's message.
    #[error("{0}")]
    Module(String),
    /// A limit of `LoadOptions` / `RunOptions` stopped the operation.
    #[error(transparent)]
    Limit(#[from] LimitExceeded),
    /// The call was cancelled from another thread through its `CancelHandle`.
    #[error("the call was cancelled through its cancel handle")]
    Cancelled,
}

/// An error raised while running TorchScript code.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// A failure with its message.
    #[error("{0}")]
    Other(String),
    /// An exception raised by the program itself (`raise ValueError(...)`); `kind` is the
    /// exception class as TorchScript names it (`builtins.ValueError`).
    #[error("{kind}: {message}")]
    Exception {
        /// `builtins.ValueError`.
        kind: String,
        /// The message the program raised.
        message: String,
    },
    /// An error with the TorchScript call stack that led to it, outermost frame first.
    #[error("The following operation failed in the TorchScript interpreter.\nTraceback of TorchScript (most recent call last):\n{}{cause}", .frames.concat())]
    Traceback {
        /// One line per frame, outermost first.
        frames: Vec<String>,
        /// The error the innermost frame raised.
        cause: Box<crate::Error>,
    },
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
    /// Where the code calls it, when the graph came from archive code.
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

/// The category of an [`Error`]: what went wrong, at the level a caller acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A file or stream could not be read or written.
    Io,
    /// The archive is malformed or refused (zip, records, pickles).
    Load,
    /// The code or IR does not parse or compile.
    Compile,
    /// The archive needs an operator or feature tsrun does not implement.
    Unsupported,
    /// Running failed: an operator's error, an exception the program raised, wrong inputs.
    Run,
    /// A bound of [`crate::LoadOptions`] or [`crate::RunOptions`] stopped the operation.
    Limit,
    /// The call was cancelled through its [`crate::CancelHandle`].
    Cancelled,
    /// The module API was called with something it cannot take.
    Usage,
}

impl Error {
    /// The category of this error, looking through TorchScript tracebacks to the error that
    /// stopped the call.
    pub fn kind(&self) -> ErrorKind {
        if self.limit().is_some() {
            return ErrorKind::Limit;
        }
        match self.root_cause() {
            Error::Io(_) => ErrorKind::Io,
            Error::Archive(ArchiveError::Io(_)) => ErrorKind::Io,
            Error::Archive(
                ArchiveError::LegacyFormat(..) | ArchiveError::UnsupportedVersion { .. },
            ) => ErrorKind::Unsupported,
            Error::Archive(_) | Error::Pickle(_) => ErrorKind::Load,
            Error::Parse(_) | Error::Compile(_) => ErrorKind::Compile,
            Error::UnknownOp(_) | Error::UnsupportedOps { .. } => ErrorKind::Unsupported,
            Error::Tensor(_) | Error::Runtime(_) | Error::BadArgument { .. } => ErrorKind::Run,
            Error::Limit(_) => ErrorKind::Limit,
            Error::Cancelled => ErrorKind::Cancelled,
            Error::Module(_) => ErrorKind::Usage,
        }
    }

    /// The error that stopped the call, below any TorchScript tracebacks wrapped around it.
    pub fn root_cause(&self) -> &Error {
        match self {
            Error::Runtime(RuntimeError::Traceback { cause, .. }) => cause.root_cause(),
            other => other,
        }
    }

    /// The operator this error names, where it names one (`aten::foo.bar`): a bad argument, an
    /// unknown operator, or the first of the overloads without a kernel.
    pub fn op(&self) -> Option<&str> {
        match self.root_cause() {
            Error::BadArgument { op, .. } => Some(op),
            Error::UnknownOp(op) => Some(op),
            Error::UnsupportedOps { ops, .. } => ops.first().map(|m| m.op.as_str()),
            _ => None,
        }
    }

    /// The limit that stopped this operation, looking through TorchScript tracebacks and the
    /// layer errors that carry one.
    pub fn limit(&self) -> Option<&LimitExceeded> {
        match self {
            Error::Limit(l) => Some(l),
            Error::Tensor(TensorError::Alloc(AllocError::Limit(l))) => Some(l),
            Error::Archive(ArchiveError::Limit(l)) => Some(l),
            Error::Runtime(RuntimeError::Traceback { cause, .. }) => cause.limit(),
            _ => None,
        }
    }

    /// Whether this operation was stopped by its cancel handle.
    pub fn is_cancelled(&self) -> bool {
        match self {
            Error::Cancelled => true,
            Error::Runtime(RuntimeError::Traceback { cause, .. }) => cause.is_cancelled(),
            _ => false,
        }
    }
}

/// `Result` with tsrun's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
