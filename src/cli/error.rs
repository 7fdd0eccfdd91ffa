//! The command line's error: a usage mistake (exit code 2, as clap's own) or an error of the
//! model or its inputs (exit code 1).

use super::log;
use crate::frontend::diagnostic;
use crate::ir::CompileError;
use crate::runtime::{RuntimeError, TracebackFrame};

/// An error of a `tsrun` subcommand.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The command line itself is wrong (a bad literal, a malformed `--set`, ...): exit code 2.
    #[error("{0}")]
    Usage(String),
    /// Loading, compiling or running the model failed, or an input file is unreadable: exit
    /// code 1.
    #[error(transparent)]
    Model(#[from] crate::Error),
    /// `tsrun compare` found results outside the tolerance: exit code 1.
    #[error("{0}")]
    Mismatch(String),
}

/// Exit code of a usage error (the one clap uses for its own).
pub const EXIT_USAGE: i32 = 2;
/// Exit code of a model error, an unreadable input or a `compare` mismatch.
pub const EXIT_MODEL: i32 = 1;

impl CliError {
    /// The process exit code documented in `tsrun --help`.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Usage(_) => EXIT_USAGE,
            CliError::Model(_) | CliError::Mismatch(_) => EXIT_MODEL,
        }
    }
}

impl CliError {
    /// The text `tsrun` prints for this error: syntax errors, operators without a kernel and
    /// errors raised in TorchScript code as rustc shows errors (location, source line, caret;
    /// for a run-time error one snippet per frame of the call stack, each with the original
    /// Python line when the archive has one), the others on one `tsrun: ` line.
    pub fn render(&self) -> String {
        match self {
            CliError::Model(e) => render_model_error(e),
            other => format!("tsrun: {other}"),
        }
    }
}

fn render_model_error(e: &crate::Error) -> String {
    match e {
        crate::Error::Runtime(RuntimeError::Traceback { frames, cause }) => {
            render_traceback(frames, cause)
        }
        e => render_located(e).unwrap_or_else(|| format!("tsrun: {e}")),
    }
}

/// `error` as rustc shows errors when it points into the archive's code: a syntax error, an
/// operator without a kernel, a construct the compiler rejects (marked where PyTorch's own
/// compile error marks it); else `None`.
fn render_located(error: &crate::Error) -> Option<String> {
    match error {
        crate::Error::Compile(CompileError::At { message, at, .. }) => {
            Some(format!("error: {message}\n{}", diagnostic::snippet(at, "")))
        }
        e => diagnostic::render_error(e),
    }
}

/// The error, then the call stack outermost first (most recent call last, as PyTorch's
/// traceback), a snippet per frame with its original Python line under it:
///
/// ```text
/// error: shape error: mm: mat1 and mat2 shapes cannot be multiplied (2x5 and 4x3)
///   --> code/__torch__/model.py:11:12
///    |
/// 11 |     return (block).project(h, )
///    |            ^^^^^^^^^^^^^^^^^^^^ called in forward
///   ::: model.py:30:16
///    |
/// 30 |         return self.block.project(h)
///    |                ^^^^^^^^^^^^^^^^^^ original Python
/// ...
/// ```
fn render_traceback(frames: &[TracebackFrame], cause: &crate::Error) -> String {
    let mut out = render_located(cause).unwrap_or_else(|| format!("error: {cause}"));
    let debug = log::verbosity() >= log::Verbosity::Debug;
    let innermost = frames.len().saturating_sub(1);
    for (i, frame) in frames.iter().enumerate() {
        // -vv: the qualified name, telling apart methods of the same name in different classes
        let function = if debug {
            frame.function.as_str()
        } else {
            frame.function_name()
        };
        let role = if i == innermost {
            "failed in"
        } else {
            "called in"
        };
        out.push('\n');
        match &frame.at {
            Some(at) => out.push_str(&diagnostic::snippet(at, &format!("{role} {function}"))),
            None => out.push_str(&format!("  = in {function}")),
        }
        if let Some(original) = &frame.original {
            out.push('\n');
            // rustc marks a secondary location of the same diagnostic with `:::`
            let snippet = diagnostic::snippet(original, "original Python");
            out.push_str(&snippet.replacen("--> ", "::: ", 1));
        }
    }
    out
}

/// The result of a subcommand.
pub type CliResult<T = ()> = std::result::Result<T, CliError>;

/// A usage error.
pub fn usage(msg: impl Into<String>) -> CliError {
    CliError::Usage(msg.into())
}
