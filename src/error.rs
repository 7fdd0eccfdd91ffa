//! The crate-wide error type. Each layer has its own error enum; [`Error`] wraps them, and
//! [`Error::kind`] sorts every error into one of a few [`ErrorKind`]s callers can `match` on.

pub use crate::archive::ArchiveError;
pub use crate::frontend::ParseError;
pub use crate::ir::CompileError;
pub use crate::pickle::PickleError;
pub use crate::tensor::budget::LimitExceeded;
use crate::tensor::AllocError;
pub use crate::tensor::{Int8BinaryCheck, RankRequirement, TensorError};

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
    /// An [`crate::IValue`] did not hold the Rust type asked for (`IValue::extract`, `TryFrom`).
    #[error("expected {expected}, got a value of type {got}")]
    Conversion {
        /// What the conversion wanted (`a Tensor`, `a tuple of 2 elements`).
        expected: String,
        /// The kind of value it got (`int`, `List`).
        got: &'static str,
    },
    /// A schema string given to [`crate::register_op`] does not parse.
    #[error("invalid operator schema: {0}")]
    InvalidSchema(#[from] crate::ops::schema::SchemaError),
    /// [`crate::register_op`] for an overload that already has a kernel: one built into tsrun
    /// (`builtin`) or registered before. Registrations are never replaced, as PyTorch refuses a
    /// second `define` of an operator.
    #[error(
        "operator {op} already has a {} kernel; registrations cannot replace a kernel",
        if *.builtin { "built-in" } else { "registered" }
    )]
    OpAlreadyRegistered {
        /// The overload (`myops::f`).
        op: String,
        /// Whether the kernel it has is built into tsrun.
        builtin: bool,
    },
    /// [`crate::register_op`] for an overload PyTorch's operator table declares differently.
    #[error("schema `{given}` differs from the declared schema of {op}: `{known}`")]
    SchemaMismatch {
        /// The overload.
        op: String,
        /// The schema given to `register_op`.
        given: String,
        /// The schema PyTorch declares.
        known: String,
    },
    /// The kernel of a custom operator (registered with [`crate::register_op`]) failed, or
    /// returned a value its schema does not declare.
    #[error("{op}: {source}")]
    CustomKernelFailed {
        /// The custom operator.
        op: String,
        /// What its kernel returned.
        source: Box<Error>,
    },
    /// An operator kernel's own failure, with its message: what a kernel registered with
    /// [`crate::register_op`] returns for an input it cannot handle.
    #[error("{0}")]
    Kernel(String),
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
        cause: Box<Error>,
    },
}

/// `RuntimeError::Traceback`'s text, built by [`write_traceback`].
struct DisplayTraceback<'a> {
    frames: &'a [TracebackFrame],
    cause: &'a Error,
}

impl std::fmt::Display for DisplayTraceback<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write_traceback(f, self.frames, self.cause)
    }
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
            // a golden-case folder that lacks a file or holds inputs tsrun cannot feed
            Error::Golden(_) => ErrorKind::Load,
            Error::Parse(_) | Error::Compile(_) => ErrorKind::Compile,
            Error::UnknownOp(_) | Error::UnsupportedOps { .. } => ErrorKind::Unsupported,
            Error::Tensor(TensorError::UnsupportedFeature { .. }) => ErrorKind::Unsupported,
            Error::Tensor(_) | Error::Runtime(_) | Error::BadArgument { .. } => ErrorKind::Run,
            Error::Limit(_) => ErrorKind::Limit,
            Error::Cancelled => ErrorKind::Cancelled,
            Error::Module(_) | Error::Conversion { .. } => ErrorKind::Usage,
            Error::InvalidSchema(_)
            | Error::OpAlreadyRegistered { .. }
            | Error::SchemaMismatch { .. } => ErrorKind::Usage,
            Error::CustomKernelFailed { .. } | Error::Kernel(_) => ErrorKind::Run,
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
            Error::CustomKernelFailed { op, .. } => Some(op),
            // any other failure of an operator kernel: the innermost frame records the call
            _ => self.innermost_frame().and_then(|f| f.op.as_deref()),
        }
    }

    /// The innermost TorchScript frame of this error's traceback: the function that was running
    /// and the operation in it that failed (`None` when the error did not come from running code).
    pub fn innermost_frame(&self) -> Option<&TracebackFrame> {
        match self {
            Error::Runtime(RuntimeError::Traceback { frames, cause }) => {
                cause.innermost_frame().or(frames.last())
            }
            _ => None,
        }
    }

    /// Where in the archive's code the failing operation is (file, line, column, source line),
    /// when the error came from running code with source text.
    pub fn location(&self) -> Option<&CodeLocation> {
        self.innermost_frame().and_then(|f| f.at.as_ref())
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

    /// The TorchScript call stack of a failed call, outermost frame first: for each function,
    /// the failing call or operation in the archive's code and, when its `debug_pkl` records
    /// name one, in the original Python. `None` for errors raised outside TorchScript code.
    pub fn traceback(&self) -> Option<&[TracebackFrame]> {
        match self {
            Error::Runtime(RuntimeError::Traceback { frames, .. }) => Some(frames),
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

// Warnings the archive's code or the runtime raise while running (`warnings.warn` in
// TorchScript, an accelerator device remapped to the CPU) go to stderr as PyTorch's do; a
// process embedding tsrun, or `tsrun --quiet`, can turn them off.
static WARNINGS_ENABLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Turn the runtime's warnings on stderr (`UserWarning: ...`) on or off for the whole process.
pub fn set_warnings_enabled(enabled: bool) {
    WARNINGS_ENABLED.store(enabled, std::sync::atomic::Ordering::Relaxed);
}

/// Print `UserWarning: {message}` on stderr unless warnings are off.
pub(crate) fn warn(message: impl std::fmt::Display) {
    if WARNINGS_ENABLED.load(std::sync::atomic::Ordering::Relaxed) {
        eprintln!("UserWarning: {message}");
    }
}

/// `Result` with tsrun's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

// ---- TorchScript tracebacks: the call stack of a failed call as data, and PyTorch's text ----

/// One frame of a TorchScript call stack: a function and the call or operation in it that
/// failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TracebackFrame {
    /// The function or method, qualified as the compilation unit names it
    /// (`__torch__.model.Block.project`).
    pub function: String,
    /// The failing call or operation in the archive's code (`code/__torch__/model.py`); `None`
    /// for a graph without source text (IR text) or a call refused before it ran (the call
    /// depth limit).
    pub at: Option<CodeLocation>,
    /// The original Python that code was generated from, when the code file has `debug_pkl`
    /// records naming it (`model.py`, line 12).
    pub original: Option<CodeLocation>,
    /// The operator overload the failing operation called (`aten::conv2d`), when it was an
    /// operator call rather than a method call or control flow.
    pub op: Option<String>,
}

impl TracebackFrame {
    /// The function's own name, as PyTorch's traceback prints it (`project`).
    pub fn function_name(&self) -> &str {
        self.function
            .rsplit_once('.')
            .map_or(self.function.as_str(), |(_, name)| name)
    }
}

/// The tildes PyTorch's `SourceRange::print_with_context` draws under a range.
const HIGHLIGHT: char = '~';

/// `  File "code/__torch__/model.py", line 30, in check_and_project`, the line and
/// `~~~~ <--- HERE` under the span.
fn write_frame(
    f: &mut std::fmt::Formatter<'_>,
    function: &str,
    at: &CodeLocation,
) -> std::fmt::Result {
    writeln!(f, "  File \"{}\", line {}, in {function}", at.file, at.line)?;
    let pad: String = at
        .source_line
        .chars()
        .take(at.col.saturating_sub(1))
        .map(|c| if c == '\t' { '\t' } else { ' ' })
        .collect();
    writeln!(f, "{}", at.source_line.trim_end())?;
    writeln!(
        f,
        "{pad}{} <--- HERE",
        HIGHLIGHT.to_string().repeat(at.width.max(1))
    )
}

/// PyTorch's text for an error raised under `frames` (outermost first): the serialized-code
/// traceback, the original-code one when any frame has an original location, then the error
/// as `builtins.ValueError: ...` for an exception the program raised, `RuntimeError: ...` for
/// anything else.
pub(crate) fn write_traceback(
    f: &mut std::fmt::Formatter<'_>,
    frames: &[TracebackFrame],
    cause: &crate::Error,
) -> std::fmt::Result {
    let has_original = frames.iter().any(|fr| fr.original.is_some());
    writeln!(
        f,
        "The following operation failed in the TorchScript interpreter."
    )?;
    writeln!(
        f,
        "Traceback of TorchScript{} (most recent call last):",
        if has_original {
            ", serialized code"
        } else {
            ""
        }
    )?;
    for frame in frames {
        match &frame.at {
            Some(at) => write_frame(f, frame.function_name(), at)?,
            None => writeln!(f, "  In {}", frame.function_name())?,
        }
    }
    if has_original {
        writeln!(
            f,
            "\nTraceback of TorchScript, original code (most recent call last):"
        )?;
        // as PyTorch, frames without an original range are left out here
        for frame in frames {
            if let Some(original) = &frame.original {
                write_frame(f, frame.function_name(), original)?;
            }
        }
    }
    match cause {
        crate::Error::Runtime(RuntimeError::Exception { .. }) => write!(f, "{cause}"),
        other => write!(f, "RuntimeError: {other}"),
    }
}
