//! The command line's error: a usage mistake (exit code 2, as clap's own) or an error of the
//! model or its inputs (exit code 1).

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
    /// The text `tsrun` prints for this error: syntax errors and operators without a kernel
    /// as rustc shows errors (location, source line, caret), the others on one `tsrun: ` line.
    pub fn render(&self) -> String {
        match self {
            CliError::Model(e) => crate::frontend::diagnostic::render_error(e)
                .unwrap_or_else(|| format!("tsrun: {e}")),
            other => format!("tsrun: {other}"),
        }
    }
}

/// The result of a subcommand.
pub type CliResult<T = ()> = std::result::Result<T, CliError>;

/// A usage error.
pub fn usage(msg: impl Into<String>) -> CliError {
    CliError::Usage(msg.into())
}
