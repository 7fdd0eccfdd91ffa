//! A safe unpickler (allowlisted globals, persistent ids to storages) and a pickler.

/// Errors decoding or encoding a pickle.
#[derive(Debug, thiserror::Error)]
pub enum PickleError {
    #[error("pickle: {0}")]
    Invalid(String),
}
