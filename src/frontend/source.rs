//! Source text and ranges: where a node came from in the archive's code, and (from `debug_pkl`)
//! in the original Python file.

use std::sync::Arc;

/// Maps byte offsets of a generated code file to the original ranges that generated them: an
/// archive code file's `debug_pkl` records ([`super::debug_pkl::DebugRecords`]). A trait so
/// that a [`Source`] holds the records without this module depending on their decoder.
pub trait GeneratedRanges: std::fmt::Debug + Send + Sync {
    /// The original range that generated the code at byte `offset`, if any.
    fn find(&self, offset: usize) -> Option<SourceRange>;
}

/// A named piece of source text with precomputed line starts.
#[derive(Debug)]
pub struct Source {
    /// File name as PyTorch reports it (e.g. `code/__torch__.py` or the original `model.py`).
    pub name: String,
    pub text: String,
    /// Line number of the first line of `text` (1-based); debug_pkl ranges start mid-file.
    pub first_line: usize,
    line_starts: Vec<usize>,
    /// False for an original source saved without a file name (older debug_pkl files allow
    /// `None`): PyTorch prints no location for it.
    named: bool,
    /// For an archive code file, the original ranges that generated it (its `debug_pkl`).
    generated_by: Option<Box<dyn GeneratedRanges>>,
}

impl Source {
    pub fn new(name: impl Into<String>, text: impl Into<String>, first_line: usize) -> Arc<Source> {
        Arc::new(Source::build(
            name.into(),
            text.into(),
            first_line,
            true,
            None,
        ))
    }

    /// An archive code file whose `debug_pkl` records name the Python source behind it.
    pub fn with_debug_records(
        name: impl Into<String>,
        text: impl Into<String>,
        records: impl GeneratedRanges + 'static,
    ) -> Arc<Source> {
        Arc::new(Source::build(
            name.into(),
            text.into(),
            1,
            true,
            Some(Box::new(records)),
        ))
    }

    /// An original Python source from a debug_pkl record; `starting_line` is the file line
    /// of the text's first line.
    pub fn original(filename: Option<String>, text: String, starting_line: usize) -> Arc<Source> {
        let named = filename.is_some();
        Arc::new(Source::build(
            filename.unwrap_or_default(),
            text,
            starting_line,
            named,
            None,
        ))
    }

    fn build(
        name: String,
        text: String,
        first_line: usize,
        named: bool,
        generated_by: Option<Box<dyn GeneratedRanges>>,
    ) -> Source {
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Source {
            name,
            text,
            first_line,
            line_starts,
            named,
            generated_by,
        }
    }

    /// 1-based line and 0-based column (as PyTorch prints `file:line:col`) of a byte offset.
    /// An offset past the end (a hostile debug_pkl range) counts from the last line start.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let index = self.line_index(offset);
        let start = self.line_starts.get(index).copied().unwrap_or(0);
        // a debug_pkl record's starting line is input: saturate rather than overflow
        (
            index.saturating_add(self.first_line),
            offset.saturating_sub(start),
        )
    }

    /// Index in `line_starts` (0 for the text's first line) of the line containing `offset`.
    fn line_index(&self, offset: usize) -> usize {
        match self.line_starts.binary_search(&offset) {
            Ok(i) => i,
            Err(i) => i.saturating_sub(1),
        }
    }

    /// The text of the line containing `offset`.
    pub fn line_text(&self, offset: usize) -> &str {
        let idx = self.line_index(offset);
        let start = self.line_starts.get(idx).copied().unwrap_or(0);
        let end = self
            .line_starts
            .get(idx + 1)
            .map(|e| e - 1)
            .unwrap_or(self.text.len());
        &self.text[start..end]
    }
}

/// The largest character boundary of `text` not after `offset` (the text's length past it).
fn char_boundary_at_or_before(text: &str, offset: usize) -> usize {
    let mut at = offset.min(text.len());
    // 0 is a boundary, so this stops
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
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

    /// Where this range is, with the text a caret under it needs (errors that point at code).
    /// Bounds from a `debug_pkl` record are input: past the end or inside a character, they
    /// are moved back onto the text, never a panic.
    pub fn code_location(&self) -> crate::error::CodeLocation {
        let text = &self.source.text;
        let start = char_boundary_at_or_before(text, self.start);
        let end = char_boundary_at_or_before(text, self.end.max(start));
        let (line, col) = self.source.line_col(start);
        let source_line = self.source.line_text(start).to_string();
        let width = text[start..end]
            .lines()
            .next()
            .map_or(1, |t| t.chars().count().max(1));
        crate::error::CodeLocation {
            file: self.source.name.clone(),
            line,
            col: source_line.get(..col).map_or(col, |p| p.chars().count()) + 1,
            source_line,
            width,
        }
    }

    /// `file:line:col` of this range itself.
    pub fn location(&self) -> String {
        let (l, c) = self.source.line_col(self.start);
        format!("{}:{}:{}", self.source.name, l, c)
    }

    /// The original source range that generated this one, if its source is an archive code
    /// file with debug records (`SourceRange::findSourceRangeThatGenerated`).
    pub fn generated_by(&self) -> Option<SourceRange> {
        self.source.generated_by.as_ref()?.find(self.start)
    }

    /// Where in the original Python source this range was generated from (its code file's
    /// `debug_pkl` record), with the text a caret under it needs. `None` without records, and
    /// for records PyTorch prints nothing for: a source without a file name, or an empty one
    /// (the sentinel records of class headers and call targets, whose frame PyTorch's
    /// "original code" traceback leaves out).
    pub fn original_location(&self) -> Option<crate::error::CodeLocation> {
        let original = self.generated_by()?;
        let source = &original.source;
        (source.named && !source.name.is_empty() && !source.text.is_empty())
            .then(|| original.code_location())
    }

    /// The `file:line:col` comment PyTorch's `Node::print` writes: the location of the
    /// original range when the debug records have one, else of this range; nothing when that
    /// source has no file name.
    pub fn graph_location(&self) -> Option<String> {
        match self.generated_by() {
            Some(original) => original.source.named.then(|| original.location()),
            None => self.source.named.then(|| self.location()),
        }
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
