//! Saving a module as a `torch.jit.save` archive: PyTorch's record layout, storages stored
//! uncompressed and 64-byte aligned, code and debug records copied unchanged, deterministic bytes.

use super::Module;
use crate::archive::ArchiveWriter;
use crate::pickle::Pickler;
use crate::tensor::{DType, Storage};
use crate::values::{IValue, Tuple};
use crate::Result;
use std::io::Write;
use std::path::Path;

/// FNV-1a 64 over `bytes`, continuing from `hash`.
fn fnv1a(mut hash: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        hash ^= b as u64;
        hash = hash.wrapping_mul(0x100000001b3);
    }
    hash
}

const FNV_OFFSET: u64 = 0xcbf29ce484222325;

fn write_storages(
    writer: &mut ArchiveWriter,
    dir: &str,
    storages: &[(Storage, DType)],
) -> Result<()> {
    for (key, (storage, _)) in storages.iter().enumerate() {
        let bytes = storage.read().map_err(crate::tensor::TensorError::from)?;
        writer.write_record(&format!("{dir}/{key}"), &bytes, false)?;
    }
    Ok(())
}

impl Module {
    /// Save as a `torch.jit.save` archive at `path`.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        self.save_with_extra_files(path, &[])
    }

    /// Save to `path`, adding (or replacing) extra files `extra/NAME`.
    pub fn save_with_extra_files(
        &self,
        path: impl AsRef<Path>,
        extra: &[(String, Vec<u8>)],
    ) -> Result<()> {
        self.save_through(path.as_ref(), extra, |w, bytes| w.write_all(bytes))
    }

    /// Save to `path` with `write` putting the archive bytes into the file: the bytes go to a
    /// temporary file next to `path` that replaces it only once completely written and synced,
    /// so a failed save (`write` failing, a full disk, a crash) never destroys `path`, also
    /// when `path` is the archive this module was loaded from.
    pub fn save_through(
        &self,
        path: &Path,
        extra: &[(String, Vec<u8>)],
        write: impl FnOnce(&mut dyn Write, &[u8]) -> std::io::Result<()>,
    ) -> Result<()> {
        let bytes = self.to_archive_bytes(extra)?;
        crate::archive::write_atomically(path, |w| write(w, &bytes)).map_err(|e| {
            crate::Error::Io(std::io::Error::new(
                e.kind(),
                format!("saving {}: {e}", path.display()),
            ))
        })
    }

    /// Save the archive into any writer.
    pub fn save_to<W: Write>(&self, mut writer: W) -> Result<()> {
        writer.write_all(&self.to_archive_bytes(&[])?)?;
        Ok(())
    }

    /// The archive bytes for this module (as root) plus extra files.
    pub fn to_archive_bytes(&self, extra: &[(String, Vec<u8>)]) -> Result<Vec<u8>> {
        let shared = &self.shared;
        let (data_pkl, data_storages) =
            Pickler::new().finish(&IValue::Object(self.object.clone()))?;
        let (constants_pkl, constant_storages) =
            Pickler::new().finish(&IValue::Tuple(Tuple::new(shared.constants.clone())))?;

        let mut writer = ArchiveWriter::new(&shared.folder)?;
        let mut extras: Vec<(String, Vec<u8>)> = shared
            .extra
            .iter()
            .filter(|(k, _)| !extra.iter().any(|(n, _)| n == *k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        extras.extend(extra.iter().cloned());
        for (name, bytes) in &extras {
            writer.write_record(&format!("extra/{name}"), bytes, false)?;
        }
        write_storages(&mut writer, "data", &data_storages)?;
        writer.write_record("data.pkl", &data_pkl, false)?;

        let mut id = fnv1a(FNV_OFFSET, &data_pkl);
        for (path, text) in &shared.code {
            writer.write_record(path, text.as_bytes(), true)?;
            id = fnv1a(id, text.as_bytes());
            let debug = format!("{path}.debug_pkl");
            if let Some(raw) = shared.raw_records.get(&debug) {
                writer.write_record(&debug, raw, true)?;
            }
        }
        write_storages(&mut writer, "constants", &constant_storages)?;
        writer.write_record("constants.pkl", &constants_pkl, false)?;
        id = fnv1a(id, &constants_pkl);
        for (name, raw) in &shared.raw_records {
            let is_debug = name
                .strip_suffix(".debug_pkl")
                .is_some_and(|code| shared.code.contains_key(code));
            if !is_debug {
                writer.write_record(name, raw, false)?;
            }
        }
        for (storage, _) in data_storages.iter().chain(&constant_storages) {
            id = fnv1a(id, &(storage.nbytes() as u64).to_le_bytes());
        }
        // PyTorch writes the version followed by a newline.
        writer.write_record("version", format!("{}\n", shared.version).as_bytes(), false)?;
        writer.write_record("byteorder", b"little", false)?;
        // PyTorch writes a random id; a content hash keeps saves reproducible.
        let serialization_id = format!("{:020}{:020}", id, fnv1a(id, b"tsrun"));
        writer.write_record(".data/serialization_id", serialization_id.as_bytes(), false)?;
        Ok(writer.finish()?)
    }
}
