//! Reading and writing TorchScript zip archives (records, storages, extra files).
//!
//! An archive is a zip whose records sit under one top folder (`net/data.pkl`, `net/data/0`,
//! `net/code/__torch__.py`, ...). Record names here are relative to that folder.

mod atomic;
mod reader;
mod writer;

pub use atomic::write_atomically;
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
    #[error("archive: {0}")]
    Limit(#[from] crate::tensor::budget::LimitExceeded),
}

/// Bounds on what opening an archive may cost (the archive-level part of `LoadOptions`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArchiveLimits {
    /// Largest archive accepted, in bytes.
    pub max_archive_bytes: u64,
    /// Most zip records (central directory entries) accepted.
    pub max_records: usize,
}

impl ArchiveLimits {
    /// 64 GiB, a million records: far beyond real models, small enough to refuse absurd files.
    pub const DEFAULT: ArchiveLimits = ArchiveLimits {
        max_archive_bytes: 64 << 30,
        max_records: 1_000_000,
    };
}

impl Default for ArchiveLimits {
    fn default() -> Self {
        ArchiveLimits::DEFAULT
    }
}

impl From<zip::result::ZipError> for ArchiveError {
    fn from(e: zip::result::ZipError) -> Self {
        match e {
            zip::result::ZipError::Io(e) => ArchiveError::Io(e),
            other => ArchiveError::Zip(other.to_string()),
        }
    }
}
