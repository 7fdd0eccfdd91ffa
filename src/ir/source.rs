//! Source text and ranges: where a node came from in the archive's code, and (from `debug_pkl`)
//! in the original Python file.

use std::sync::Arc;

/// A named piece of source text with precomputed line starts.
#[derive(Debug)]
pub struct Source {
    /// File name as PyTorch reports it (e.g. `code/__torch__.py` or the original `model.py`).
    pub name: String,
    pub text: String,
    /// Line number of the first line of `text` (1-based); debug_pkl ranges start mid-file.
    pub first_line: usize,
    line_starts: Vec<usize>,
}

impl Source {
    pub fn new(name: impl Into<String>, text: impl Into<String>, first_line: usize) -> Arc<Source> {
        let text = text.into();
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Arc::new(Source {
            name: name.into(),
            text,
            first_line,
            line_starts,
        })
    }

    /// 1-based line and 0-based column (as PyTorch prints `file:line:col`) of a byte offset.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let line = match self.line_starts.binary_search(&offset) {
            Ok(i) => i,
            Err(i) => i.saturating_sub(1),
        };
        (line + self.first_line, offset - self.line_starts[line])
    }

    /// The text of the (1-based, relative to `first_line`) line containing `offset`.
    pub fn line_text(&self, offset: usize) -> &str {
        let (line, _) = self.line_col(offset);
        let idx = line - self.first_line;
        let start = self.line_starts[idx];
        let end = self
            .line_starts
            .get(idx + 1)
            .map(|e| e - 1)
            .unwrap_or(self.text.len());
        &self.text[start..end]
    }
}

/// A byte range in a [`Source`].
#[derive(Clone, Debug)]
pub struct SourceRange {
    pub source: Arc<Source>,
    pub start: usize,
    pub end: usize,
}

impl SourceRange {
    pub fn new(source: Arc<Source>, start: usize, end: usize) -> SourceRange {
        SourceRange { source, start, end }
    }

    /// `file:line:col`, as in PyTorch's graph comments.
    pub fn location(&self) -> String {
        let (l, c) = self.source.line_col(self.start);
        format!("{}:{}:{}", self.source.name, l, c)
    }

    pub fn text(&self) -> &str {
        self.source.text.get(self.start..self.end).unwrap_or("")
    }
}

impl std::fmt::Display for SourceRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {}",
            self.location(),
            self.source.line_text(self.start).trim()
        )
    }
}
