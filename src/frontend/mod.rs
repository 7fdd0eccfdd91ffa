//! TorchScript source: lexer (logos), AST, and the lalrpop parser (grammar/).

/// A syntax error, located in its code file.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    #[error("{file}:{line}:{col}: {message}")]
    Syntax {
        file: String,
        line: usize,
        col: usize,
        message: String,
    },
}
