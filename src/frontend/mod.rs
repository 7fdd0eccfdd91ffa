//! TorchScript source: lexer (logos), AST, and the lalrpop parser (grammar/).

pub mod ast;
pub mod debug_pkl;
pub mod diagnostic;
pub mod lexer;
pub mod parser;
pub mod source;

use std::sync::Arc;

use crate::frontend::source::Source;

/// A syntax error, located in its code file. `Clone` because a module caches its parse result
/// and replays a failure to every caller.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ParseError {
    #[error(
        "{file}:{line}:{col}: {message}{}",
        diagnostic::expected_suffix(expected)
    )]
    Syntax {
        file: String,
        line: usize,
        col: usize,
        message: String,
        /// The tokens the grammar would have accepted there (lalrpop's names, quoted).
        expected: Vec<String>,
        /// The text of the line, for a caret under the offending token.
        source_line: String,
        /// Characters the offending token spans (at least 1).
        width: usize,
    },
    #[error("{file}:{line}:{col}: code nests deeper than {limit} levels (max_code_depth)")]
    TooDeep {
        file: String,
        line: usize,
        col: usize,
        limit: usize,
    },
}

/// Deepest code nesting accepted by default (blocks plus expression levels, counted
/// conservatively from the tokens; PyTorch's printer nests far less).
pub const DEFAULT_MAX_CODE_DEPTH: usize = 1000;

/// Parse one TorchScript code file. `path` names it in errors and source ranges.
pub fn parse_file(path: &str, text: &str) -> Result<ast::File, ParseError> {
    let source = Source::new(path, text, 1);
    parse_source(source)
}

/// Parse an already-built [`Source`] (the AST's spans index into it).
pub fn parse_source(source: Arc<Source>) -> Result<ast::File, ParseError> {
    parse_source_with(source, DEFAULT_MAX_CODE_DEPTH)
}

/// [`parse_source`] rejecting code that nests deeper than `max_depth` levels, before any
/// AST is built (the emitter, clones and drops of the AST recurse on it).
pub fn parse_source_with(source: Arc<Source>, max_depth: usize) -> Result<ast::File, ParseError> {
    let error_at = |offset: usize, end: usize, message: String, expected: Vec<String>| {
        let text = &source.text;
        // offsets from the lexer may fall inside a multi-byte character: step back to its start
        let floor = |mut i: usize| {
            i = i.min(text.len());
            while !text.is_char_boundary(i) {
                i -= 1;
            }
            i
        };
        let offset = floor(offset);
        let end = floor(end.max(offset));
        let (line, col) = source.line_col(offset);
        let source_line = source.line_text(offset).to_string();
        // the caret stays on the line even when the token runs past it (a string, a dedent)
        let width = source.text[offset..end.clamp(offset, source.text.len())]
            .lines()
            .next()
            .map_or(1, |t| t.chars().count().max(1));
        ParseError::Syntax {
            file: source.name.clone(),
            line,
            // 1-based, as editors count columns.
            col: col + 1,
            message,
            expected,
            source_line,
            width,
        }
    };
    let tokens = lexer::tokenize(&source.text)
        .map_err(|e| error_at(e.start, e.start + 1, e.kind.to_string(), Vec::new()))?;
    if let Some(pos) = lexer::nesting_exceeds(&tokens, max_depth) {
        let (line, col) = source.line_col(pos.min(source.text.len()));
        return Err(ParseError::TooDeep {
            file: source.name.clone(),
            line,
            col: col + 1,
            limit: max_depth,
        });
    }
    let items = parser::grammar::FileParser::new()
        .parse(tokens.into_iter().map(Ok::<_, lexer::LexError>))
        .map_err(|e| {
            use lalrpop_util::ParseError as E;
            match e {
                E::InvalidToken { location } => {
                    error_at(location, location + 1, "invalid token".into(), Vec::new())
                }
                E::UnrecognizedEof { location, expected } => error_at(
                    location,
                    location + 1,
                    "unexpected end of file".into(),
                    expected,
                ),
                E::UnrecognizedToken {
                    token: (start, tok, end),
                    expected,
                } => error_at(start, end, format!("unexpected {tok}"), expected),
                E::ExtraToken {
                    token: (start, tok, end),
                } => error_at(start, end, format!("unexpected extra {tok}"), Vec::new()),
                E::User { error } => error_at(
                    error.start,
                    error.start + 1,
                    error.kind.to_string(),
                    Vec::new(),
                ),
            }
        })?;
    Ok(ast::File { items, source })
}

/// The Python module qualname of a code file in an archive:
/// `code/__torch__/torch/nn/modules/linear.py` -> `__torch__.torch.nn.modules.linear`,
/// `code/__torch__.py` -> `__torch__`. Any leading `<archive>/` folder is skipped. `None` if
/// the path is not a `.py` file under `code/`.
pub fn module_qualname(code_path: &str) -> Option<String> {
    let rest = code_path
        .strip_prefix("code/")
        .or_else(|| code_path.split_once("/code/").map(|(_, r)| r))?;
    let stem = rest.strip_suffix(".py")?;
    if stem.is_empty() {
        return None;
    }
    Some(stem.replace('/', "."))
}
