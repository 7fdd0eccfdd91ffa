//! Errors of the server: what went wrong with one request (`InferError`, mapped to an HTTP
//! status and a gRPC code) and what stops the server from starting (`ServeError`).

use std::path::PathBuf;

/// Why one request failed. Each kind has its own status so a client can tell its own mistakes
/// (4xx) from the model's (5xx) and from a full server (503).
#[derive(Debug, thiserror::Error)]
pub enum InferError {
    /// The request does not fit the protocol or the model (names, dtypes, shapes, sizes).
    #[error("{0}")]
    BadRequest(String),
    /// No such model or version.
    #[error("{0}")]
    NotFound(String),
    /// The model raised: the message holds the TorchScript traceback.
    #[error("{0}")]
    Model(String),
    /// The queue is full or the server is shutting down.
    #[error("{0}")]
    Unavailable(String),
    /// The request's deadline (`--timeout`) passed.
    #[error("{0}")]
    Timeout(String),
}

impl InferError {
    /// The same error with `input '<name>': ` in front.
    pub fn context(self, name: &str) -> InferError {
        match self {
            InferError::BadRequest(m) => InferError::BadRequest(format!("input '{name}': {m}")),
            other => other,
        }
    }

    /// Label of the `errors` metric.
    pub fn kind(&self) -> &'static str {
        match self {
            InferError::BadRequest(_) => "bad_request",
            InferError::NotFound(_) => "not_found",
            InferError::Model(_) => "model_error",
            InferError::Unavailable(_) => "unavailable",
            InferError::Timeout(_) => "timeout",
        }
    }

    pub fn http_status(&self) -> u16 {
        match self {
            InferError::BadRequest(_) => 400,
            InferError::NotFound(_) => 404,
            InferError::Model(_) => 500,
            InferError::Unavailable(_) => 503,
            InferError::Timeout(_) => 504,
        }
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("no model archives given (expected .pt files or directories holding them)")]
    NoModels,
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("loading model {path}: {source}")]
    Load {
        path: PathBuf,
        source: Box<crate::Error>,
    },
    #[error("{path}: {message}")]
    Config { path: PathBuf, message: String },
    #[error("two archives are both named '{0}' (models are named after their file stem)")]
    DuplicateModel(String),
    #[error("binding {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(String),
    #[error("server runtime: {0}")]
    Runtime(std::io::Error),
}
