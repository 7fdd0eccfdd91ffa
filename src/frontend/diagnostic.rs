//! Errors in an archive's code rendered as rustc renders its own: the location, the source
//! line, a caret under the span and a label (for a syntax error, a short list of what was
//! expected there).
//!
//! A parse error has one span on one line, so this small renderer does it; the diagnostic
//! crates (miette, codespan-reporting, ariadne) earn their place with multi-span, multi-file
//! labels, which these errors never have.

use super::ParseError;
use crate::error::{CodeLocation, Error, MissingOp};

/// Alternatives an "expected one of" list names before summarizing the rest as a count.
pub const MAX_EXPECTED: usize = 6;

/// `; expected one of "(", ".", ... and 24 others` (empty for no alternatives).
pub fn expected_suffix(expected: &[String]) -> String {
    match expected {
        [] => String::new(),
        [one] => format!("; expected {one}"),
        many if many.len() <= MAX_EXPECTED => format!("; expected one of {}", many.join(", ")),
        many => format!(
            "; expected one of {} and {} others",
            many[..MAX_EXPECTED].join(", "),
            many.len() - MAX_EXPECTED
        ),
    }
}

/// One located snippet:
///
/// ```text
///  --> code/__torch__.py:3:9
///   |
/// 3 |     foo bar
///   |         ^^^ label
/// ```
pub fn snippet(at: &CodeLocation, label: &str) -> String {
    let number = at.line.to_string();
    let gutter = " ".repeat(number.len());
    // the caret goes under the column's character, tabs kept so it lines up
    let pad: String = at
        .source_line
        .chars()
        .take(at.col.saturating_sub(1))
        .map(|c| if c == '\t' { '\t' } else { ' ' })
        .collect();
    format!(
        "{gutter}--> {}:{}:{}\n{gutter} |\n{number} | {}\n{gutter} | {pad}{} {label}",
        at.file,
        at.line,
        at.col,
        at.source_line.trim_end(),
        "^".repeat(at.width.max(1))
    )
    .trim_end()
    .to_string()
}

/// `error` as rustc would show it when it points into the archive's code (a syntax error, an
/// operator without a kernel), else `None`.
pub fn render_error(error: &Error) -> Option<String> {
    match error {
        Error::Parse(p) => Some(p.render()),
        Error::UnsupportedOps { function, ops } => Some(render_missing(function, ops)),
        _ => None,
    }
}

fn render_missing(function: &str, ops: &[MissingOp]) -> String {
    let mut out = format!("error: {function} uses operator overloads tsrun has no kernel for");
    for op in ops {
        out.push('\n');
        match &op.at {
            Some(at) => out.push_str(&snippet(at, &format!("{} has no kernel", op.op))),
            None => out.push_str(&format!("  = {} has no kernel", op.op)),
        }
    }
    out.push_str("\n  = help: `tsrun ops MODEL` lists every operator the model uses");
    out
}

impl ParseError {
    /// The error as rustc shows one:
    ///
    /// ```text
    /// error: unexpected identifier `bar`
    ///  --> code/__torch__.py:3:9
    ///   |
    /// 3 |     foo bar
    ///   |         ^^^ expected one of "(", ".", "=" and 3 others
    /// ```
    pub fn render(&self) -> String {
        match self {
            ParseError::Syntax {
                file,
                line,
                col,
                message,
                expected,
                source_line,
                width,
            } => {
                let at = CodeLocation {
                    file: file.clone(),
                    line: *line,
                    col: *col,
                    source_line: source_line.clone(),
                    width: *width,
                };
                let label = expected_suffix(expected);
                let label = label.strip_prefix("; ").unwrap_or(&label);
                format!("error: {message}\n{}", snippet(&at, label))
            }
            other => format!("error: {other}"),
        }
    }
}
