//! Reading and writing TorchScript zip archives (records, storages, extra files).

/// Errors reading or writing an archive.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("archive: {0}")]
    Invalid(String),
}
