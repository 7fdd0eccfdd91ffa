//! TorchScript tracebacks: the call stack of a failed call as data, one [`TracebackFrame`] per
//! function, and its text as PyTorch's interpreter writes it ("Traceback of TorchScript,
//! serialized code (most recent call last)", then the original code from `debug_pkl`).

use std::fmt;

use super::RuntimeError;
use crate::error::CodeLocation;
use crate::ir::source::SourceRange;

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
}

impl TracebackFrame {
    /// The frame of `function` at `source` (the failing node's range).
    pub(crate) fn new(function: &str, source: Option<&SourceRange>) -> TracebackFrame {
        TracebackFrame {
            function: function.to_string(),
            at: source.map(SourceRange::code_location),
            original: source.and_then(SourceRange::original_location),
        }
    }

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
fn write_frame(f: &mut fmt::Formatter<'_>, function: &str, at: &CodeLocation) -> fmt::Result {
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
    f: &mut fmt::Formatter<'_>,
    frames: &[TracebackFrame],
    cause: &crate::Error,
) -> fmt::Result {
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
