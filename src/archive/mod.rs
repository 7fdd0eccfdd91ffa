//! Reading and writing TorchScript zip archives (records, storages, extra files).
//!
//! An archive is a zip whose records sit under one top folder (`net/data.pkl`, `net/data/0`,
//! `net/code/__torch__.py`, ...). Record names here are relative to that folder.

mod reader;
mod writer;

pub use reader::Archive;
pub use writer::{ArchiveWriter, STORAGE_RECORD_ALIGN};

/// Newest archive format version this reader understands (PyTorch's
/// `kMaxSupportedFileFormatVersion`).
pub const MAX_SUPPORTED_VERSION: u64 = 10;
/// Oldest zip-format version (version 1 archives are the legacy `model.json` format).
pub const MIN_SUPPORTED_VERSION: u64 = 1;

/// Errors reading or writing an archive.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("archive: {0}")]
    Invalid(String),
    #[error("archive: not a zip file or corrupt zip: {0}")]
    Zip(String),
    #[error("archive: {0} is not supported: {1}")]
    LegacyFormat(&'static str, String),
    #[error("archive: file format version {found} is not supported (supported: {MIN_SUPPORTED_VERSION}..={MAX_SUPPORTED_VERSION})")]
    UnsupportedVersion { found: String },
    #[error("archive: record '{0}' is missing")]
    MissingRecord(String),
    #[error("archive: unsafe or malformed record path '{0}'")]
    BadPath(String),
    #[error("archive: record '{name}' {problem}")]
    BadRecord { name: String, problem: String },
    #[error("archive I/O error: {0}")]
    Io(#[from] std::io::Error),
}

impl From<zip::result::ZipError> for ArchiveError {
    fn from(e: zip::result::ZipError) -> Self {
        match e {
            zip::result::ZipError::Io(e) => ArchiveError::Io(e),
            other => ArchiveError::Zip(other.to_string()),
        }
    }
}
