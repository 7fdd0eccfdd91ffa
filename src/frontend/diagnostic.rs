//! Syntax errors rendered as rustc renders its own: the location, the source line, a caret
//! under the offending token, and a short list of what was expected there.
//!
//! A parse error has one span on one line, so this small renderer does it; the diagnostic
//! crates (miette, codespan-reporting, ariadne) earn their place with multi-span, multi-file
//! labels, which these errors never have.

use super::ParseError;

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
                let number = line.to_string();
                let gutter = " ".repeat(number.len());
                // the caret goes under the column's character, tabs kept so it lines up
                let pad: String = source_line
                    .chars()
                    .take(col.saturating_sub(1))
                    .map(|c| if c == '\t' { '\t' } else { ' ' })
                    .collect();
                let label = expected_suffix(expected);
                let label = label.strip_prefix("; ").unwrap_or(&label);
                format!(
                    "error: {message}\n{gutter}--> {file}:{line}:{col}\n{gutter} |\n{number} | {}\n{gutter} | {pad}{} {label}",
                    source_line.trim_end(),
                    "^".repeat(*width)
                )
                .trim_end()
                .to_string()
            }
            other => format!("error: {other}"),
        }
    }
}
