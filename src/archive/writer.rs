//! The archive writer: PyTorch's record layout, stored storages aligned for memory mapping,
//! fixed timestamps so that saving the same module twice gives identical bytes.

use super::ArchiveError;
use std::collections::HashSet;
use std::io::{Cursor, Write};
use zip::write::SimpleFileOptions;

/// Alignment of stored record payloads inside the zip (as PyTorch's writer does).
pub const STORAGE_RECORD_ALIGN: u16 = 64;

/// Writes records under one top folder into an in-memory zip.
pub struct ArchiveWriter {
    zip: zip::ZipWriter<Cursor<Vec<u8>>>,
    folder: String,
    written: HashSet<String>,
}

impl ArchiveWriter {
    /// A writer whose records live under `folder/`.
    pub fn new(folder: &str) -> Result<ArchiveWriter, ArchiveError> {
        if folder.is_empty() || folder.contains(['/', '\\', '\0']) || folder == ".." {
            return Err(ArchiveError::BadPath(folder.escape_debug().to_string()));
        }
        Ok(ArchiveWriter {
            zip: zip::ZipWriter::new(Cursor::new(Vec::new())),
            folder: folder.to_string(),
            written: HashSet::new(),
        })
    }

    fn options(compress: bool) -> SimpleFileOptions {
        let base = SimpleFileOptions::default()
            .last_modified_time(zip::DateTime::default())
            .unix_permissions(0o644)
            .large_file(false);
        if compress {
            base.compression_method(zip::CompressionMethod::Deflated)
        } else {
            base.compression_method(zip::CompressionMethod::Stored)
                .with_alignment(STORAGE_RECORD_ALIGN)
        }
    }

    /// Add record `name` (relative to the folder). Uncompressed records are 64-byte aligned.
    pub fn write_record(
        &mut self,
        name: &str,
        data: &[u8],
        compress: bool,
    ) -> Result<(), ArchiveError> {
        if name.is_empty()
            || name.starts_with('/')
            || name.split('/').any(|c| c == ".." || c.is_empty())
        {
            return Err(ArchiveError::BadPath(name.escape_debug().to_string()));
        }
        if !self.written.insert(name.to_string()) {
            return Err(ArchiveError::BadPath(format!("{name} (written twice)")));
        }
        let large = data.len() >= u32::MAX as usize;
        let options = Self::options(compress).large_file(large);
        self.zip
            .start_file(format!("{}/{name}", self.folder), options)?;
        self.zip.write_all(data)?;
        Ok(())
    }

    /// Finish the zip and return its bytes.
    pub fn finish(self) -> Result<Vec<u8>, ArchiveError> {
        Ok(self.zip.finish()?.into_inner())
    }
}
