//! The archive reader: the whole file is mapped read-only once, the zip central directory indexes
//! it, and stored storage records become tensors' storages in place (a storage copies its bytes
//! to the heap on its first write, so the mapping itself is never written).

use super::{ArchiveError, ArchiveLimits, MAX_SUPPORTED_VERSION, MIN_SUPPORTED_VERSION};
use crate::tensor::budget::{self, LimitExceeded};
use crate::tensor::{DType, Storage};
use indexmap::IndexMap;
use std::borrow::Cow;
use std::io::{Cursor, Read, Seek};
use std::path::Path;
use std::sync::Arc;

type Result<T> = std::result::Result<T, ArchiveError>;

/// The archive's bytes: a read-only file mapping (the flag is true), or a read-only anonymous
/// mapping holding a copy (false; its pages must never be dropped: they would read as zeros).
#[derive(Clone)]
struct Bytes(Arc<memmap2::Mmap>, bool);

impl AsRef<[u8]> for Bytes {
    fn as_ref(&self) -> &[u8] {
        self.0.as_ref()
    }
}

#[derive(Clone, Copy, Debug)]
enum Method {
    Stored,
    Deflated,
}

#[derive(Clone, Debug)]
struct Entry {
    /// Index in the zip's central directory.
    index: usize,
    data_start: usize,
    size: usize,
    compressed_size: usize,
    method: Method,
}

/// An opened TorchScript archive.
pub struct Archive {
    bytes: Bytes,
    zip: zip::ZipArchive<Cursor<Bytes>>,
    /// Top folder name without the trailing slash (`net`).
    folder: String,
    records: IndexMap<String, Entry>,
    version: u64,
    big_endian: bool,
}

impl std::fmt::Debug for Archive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Archive")
            .field("folder", &self.folder)
            .field("records", &self.records.len())
            .field("version", &self.version)
            .finish()
    }
}

/// Deflate cannot expand data more than about 1032:1; larger declared sizes are corrupt.
const MAX_DEFLATE_RATIO: usize = 1032;

impl Archive {
    /// Open an archive file; its bytes are memory-mapped privately, not read.
    pub fn open(path: impl AsRef<Path>) -> Result<Archive> {
        Archive::open_with(path, &ArchiveLimits::DEFAULT)
    }

    /// [`Archive::open`] within `limits`.
    pub fn open_with(path: impl AsRef<Path>, limits: &ArchiveLimits) -> Result<Archive> {
        Archive::open_zip(path, true, limits)
    }

    /// Open a `torch.save` zip (a pickle and its storages, no TorchScript code), as state
    /// dicts are saved.
    pub fn open_torch_save(path: impl AsRef<Path>) -> Result<Archive> {
        let archive = Archive::open_zip(path, false, &ArchiveLimits::DEFAULT)?;
        if !archive.has_record("data.pkl") {
            return Err(ArchiveError::MissingRecord(format!(
                "{}/data.pkl",
                archive.folder
            )));
        }
        Ok(archive)
    }

    /// `check_kind`: refuse zips that are not TorchScript archives.
    fn open_zip(
        path: impl AsRef<Path>,
        check_kind: bool,
        limits: &ArchiveLimits,
    ) -> Result<Archive> {
        let path = path.as_ref();
        // every I/O failure names the file: the caller may be opening several
        let at_path = |e: std::io::Error| {
            ArchiveError::Io(std::io::Error::new(
                e.kind(),
                format!("{}: {e}", path.display()),
            ))
        };
        let file = std::fs::File::open(path).map_err(at_path)?;
        let metadata = file.metadata().map_err(at_path)?;
        if metadata.is_dir() {
            // opening a folder succeeds on Unix; mapping it fails with a bare "No such device"
            return Err(ArchiveError::Invalid(format!(
                "{} is a folder, not a TorchScript archive (a .pt file that torch.jit.save wrote)",
                path.display()
            )));
        }
        let len = metadata.len();
        check_size(len, limits)?;
        let map = if len == 0 {
            memmap2::MmapMut::map_anon(0)?.make_read_only()?
        } else {
            // SAFETY: a read-only private mapping that tsrun never writes. Truncation or
            // modification of the file by another process while it is mapped is outside our
            // control, as for every mmap-based loader (documented in the README).
            unsafe {
                memmap2::MmapOptions::new()
                    .map_copy_read_only(&file)
                    .map_err(at_path)?
            }
        };
        Archive::from_map(map, len > 0, check_kind, limits)
    }

    /// Open an archive held in memory (copied once into an aligned buffer).
    pub fn from_bytes(data: &[u8]) -> Result<Archive> {
        Archive::from_bytes_with(data, &ArchiveLimits::DEFAULT)
    }

    /// [`Archive::from_bytes`] within `limits`.
    pub fn from_bytes_with(data: &[u8], limits: &ArchiveLimits) -> Result<Archive> {
        check_size(data.len() as u64, limits)?;
        let mut map = memmap2::MmapMut::map_anon(data.len())?;
        map.copy_from_slice(data);
        Archive::from_map(map.make_read_only()?, false, true, limits)
    }

    /// Open an archive from any reader.
    pub fn from_reader<R: Read + Seek>(reader: R) -> Result<Archive> {
        Archive::from_reader_with(reader, &ArchiveLimits::DEFAULT)
    }

    /// [`Archive::from_reader`] within `limits`.
    pub fn from_reader_with<R: Read + Seek>(
        mut reader: R,
        limits: &ArchiveLimits,
    ) -> Result<Archive> {
        let end = reader.seek(std::io::SeekFrom::End(0))?;
        reader.seek(std::io::SeekFrom::Start(0))?;
        check_size(end, limits)?;
        let len = usize::try_from(end)
            .map_err(|_| ArchiveError::Invalid(format!("archive of {end} bytes is too large")))?;
        let mut map = memmap2::MmapMut::map_anon(len)?;
        reader.read_exact(&mut map[..])?;
        Archive::from_map(map.make_read_only()?, false, true, limits)
    }

    /// `check_kind`: refuse zips that are not TorchScript archives.
    fn from_map(
        map: memmap2::Mmap,
        file_backed: bool,
        check_kind: bool,
        limits: &ArchiveLimits,
    ) -> Result<Archive> {
        let bytes = Bytes(Arc::new(map), file_backed);
        detect_non_zip(bytes.as_ref())?;
        let declared_entries = eocd_entry_count(bytes.as_ref());
        if let Some(n) = declared_entries {
            check_records(n, limits)?;
        }
        let mut zip = zip::ZipArchive::new(Cursor::new(bytes.clone()))?;
        check_records(zip.len(), limits)?;
        if let Some(n) = declared_entries {
            if n != zip.len() {
                return Err(ArchiveError::Zip(format!(
                    "the central directory declares {n} entries but {} distinct names were found (duplicate record names)",
                    zip.len()
                )));
            }
        }
        let total = bytes.as_ref().len();
        let mut folder: Option<String> = None;
        let mut records = IndexMap::new();
        for index in 0..zip.len() {
            let f = zip.by_index_raw(index)?;
            let name = f.name().to_string();
            validate_path(&name)?;
            if f.is_dir() {
                continue;
            }
            let Some((top, rest)) = name.split_once('/') else {
                return Err(ArchiveError::Invalid(format!(
                    "record '{name}' is not inside a top folder"
                )));
            };
            let top_folder = folder.get_or_insert_with(|| top.to_string());
            if top != top_folder {
                // PyTorch only reads records under the first record's folder.
                continue;
            }
            let method = match f.compression() {
                zip::CompressionMethod::Stored => Method::Stored,
                zip::CompressionMethod::Deflated => Method::Deflated,
                other => {
                    return Err(ArchiveError::BadRecord {
                        name,
                        problem: format!("uses unsupported compression {other}"),
                    })
                }
            };
            if f.encrypted() {
                return Err(ArchiveError::BadRecord {
                    name,
                    problem: "is encrypted".into(),
                });
            }
            let to_usize = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
            let entry = Entry {
                index,
                data_start: to_usize(f.data_start()),
                size: to_usize(f.size()),
                compressed_size: to_usize(f.compressed_size()),
                method,
            };
            let end = entry.data_start.checked_add(entry.compressed_size);
            if end.is_none_or(|e| e > total) {
                return Err(ArchiveError::BadRecord {
                    name,
                    problem: format!(
                        "extends past the end of the archive ({} bytes at {} of {total})",
                        entry.compressed_size, entry.data_start
                    ),
                });
            }
            if matches!(method, Method::Stored) && entry.size != entry.compressed_size {
                return Err(ArchiveError::BadRecord {
                    name,
                    problem: "is stored with differing sizes".into(),
                });
            }
            if records.insert(rest.to_string(), entry).is_some() {
                return Err(ArchiveError::BadPath(format!("{name} (duplicate)")));
            }
        }
        let folder = folder.ok_or_else(|| ArchiveError::Invalid("the zip is empty".into()))?;
        let mut archive = Archive {
            bytes,
            zip,
            folder,
            records,
            version: 0,
            big_endian: false,
        };
        if check_kind {
            archive.check_kind()?;
        }
        archive.version = archive.read_version()?;
        archive.big_endian = archive.read_byteorder()?;
        Ok(archive)
    }

    /// Distinguish TorchScript archives from legacy or non-TorchScript zips.
    fn check_kind(&self) -> Result<()> {
        if self.has_record("model.json") {
            return Err(ArchiveError::LegacyFormat(
                "the legacy TorchScript format (model.json + protobuf, PyTorch < 1.4)",
                "re-save the model with a recent torch.jit.save".into(),
            ));
        }
        if !self.has_record("data.pkl") {
            return Err(ArchiveError::MissingRecord(format!(
                "{}/data.pkl",
                self.folder
            )));
        }
        let has_code = self.records.keys().any(|k| k.starts_with("code/"));
        if !has_code && !self.has_record("constants.pkl") {
            return Err(ArchiveError::LegacyFormat(
                "a torch.save archive (pickled tensors, no TorchScript code)",
                "tsrun loads torch.jit.save archives".into(),
            ));
        }
        Ok(())
    }

    fn read_version(&self) -> Result<u64> {
        let raw = match self.record("version") {
            Ok(r) => r,
            Err(ArchiveError::MissingRecord(_)) => self.record(".data/version")?,
            Err(e) => return Err(e),
        };
        let text = String::from_utf8_lossy(&raw);
        let text = text.trim();
        let v: u64 = text.parse().map_err(|_| ArchiveError::UnsupportedVersion {
            found: format!("'{}'", text.chars().take(32).collect::<String>()),
        })?;
        if !(MIN_SUPPORTED_VERSION..=MAX_SUPPORTED_VERSION).contains(&v) {
            return Err(ArchiveError::UnsupportedVersion {
                found: v.to_string(),
            });
        }
        Ok(v)
    }

    fn read_byteorder(&self) -> Result<bool> {
        if !self.has_record("byteorder") {
            return Ok(false);
        }
        let raw = self.record("byteorder")?;
        match String::from_utf8_lossy(&raw).trim() {
            "little" => Ok(false),
            "big" => Ok(true),
            other => Err(ArchiveError::BadRecord {
                name: "byteorder".into(),
                problem: format!("says '{}' (expected little or big)", other.escape_debug()),
            }),
        }
    }

    /// The top folder name (`net` for `net/data.pkl`).
    pub fn folder(&self) -> &str {
        &self.folder
    }

    /// The file format version (`version` record).
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Whether storages are big-endian (`byteorder` record says `big`).
    pub fn is_big_endian(&self) -> bool {
        self.big_endian
    }

    /// Record names relative to the top folder, in zip order.
    pub fn record_names(&self) -> impl Iterator<Item = &str> {
        self.records.keys().map(|k| k.as_str())
    }

    pub fn has_record(&self, name: &str) -> bool {
        self.records.contains_key(name)
    }

    /// Size in bytes of a record's (uncompressed) contents.
    pub fn record_size(&self, name: &str) -> Option<usize> {
        self.records.get(name).map(|e| e.size)
    }

    /// The contents of a record: borrowed when stored, decompressed otherwise.
    pub fn record(&self, name: &str) -> Result<Cow<'_, [u8]>> {
        let entry = self
            .records
            .get(name)
            .ok_or_else(|| ArchiveError::MissingRecord(format!("{}/{name}", self.folder)))?;
        match entry.method {
            Method::Stored => {
                let end = entry.data_start + entry.size;
                self.bytes
                    .as_ref()
                    .get(entry.data_start..end)
                    .map(Cow::Borrowed)
                    .ok_or_else(|| ArchiveError::BadRecord {
                        name: name.into(),
                        problem: "extends past the end of the archive".into(),
                    })
            }
            Method::Deflated => {
                let bound = entry.compressed_size.saturating_mul(MAX_DEFLATE_RATIO);
                if entry.size > bound {
                    return Err(ArchiveError::BadRecord {
                        name: name.into(),
                        problem: format!(
                            "declares {} bytes from {} compressed bytes",
                            entry.size, entry.compressed_size
                        ),
                    });
                }
                budget::check_alloc(entry.size)?;
                let mut out = Vec::new();
                out.try_reserve_exact(entry.size)
                    .map_err(|_| ArchiveError::BadRecord {
                        name: name.into(),
                        problem: format!("needs {} bytes that cannot be allocated", entry.size),
                    })?;
                let mut zip = self.zip.clone();
                let f = zip.by_index(entry.index)?;
                f.take(entry.size as u64)
                    .read_to_end(&mut out)
                    .map_err(|e| ArchiveError::BadRecord {
                        name: name.into(),
                        problem: format!("cannot be decompressed: {e}"),
                    })?;
                if out.len() != entry.size {
                    return Err(ArchiveError::BadRecord {
                        name: name.into(),
                        problem: format!(
                            "decompresses to {} bytes, expected {}",
                            out.len(),
                            entry.size
                        ),
                    });
                }
                Ok(Cow::Owned(out))
            }
        }
    }

    /// A record as UTF-8 text.
    pub fn record_text(&self, name: &str) -> Result<String> {
        let raw = self.record(name)?;
        String::from_utf8(raw.into_owned()).map_err(|_| ArchiveError::BadRecord {
            name: name.into(),
            problem: "is not valid UTF-8".into(),
        })
    }

    /// Extra files (`extra/NAME`) by name.
    pub fn extra_files(&self) -> Result<IndexMap<String, Vec<u8>>> {
        let mut out = IndexMap::new();
        for name in self.records.keys() {
            if let Some(extra) = name.strip_prefix("extra/") {
                out.insert(extra.to_string(), self.record(name)?.into_owned());
            }
        }
        Ok(out)
    }

    /// The storage in record `name` holding `numel` elements of `dtype`. Mapped in place when the
    /// record is stored, little-endian and aligned; otherwise copied (and byte-swapped if the
    /// archive is big-endian).
    pub fn storage(&self, name: &str, dtype: DType, numel: usize) -> Result<Storage> {
        let entry = self
            .records
            .get(name)
            .ok_or_else(|| ArchiveError::MissingRecord(format!("{}/{name}", self.folder)))?;
        let elem = dtype.size();
        let nbytes = numel
            .checked_mul(elem)
            .ok_or_else(|| ArchiveError::BadRecord {
                name: name.into(),
                problem: format!("{numel} elements of {dtype} overflow"),
            })?;
        if nbytes > entry.size {
            return Err(ArchiveError::BadRecord {
                name: name.into(),
                problem: format!(
                    "has {} bytes but the pickle declares {numel} elements of {dtype} ({nbytes} bytes)",
                    entry.size
                ),
            });
        }
        let alloc_err = |e: crate::tensor::AllocError| ArchiveError::BadRecord {
            name: name.into(),
            problem: e.to_string(),
        };
        let aligned = (self.bytes.as_ref().as_ptr() as usize + entry.data_start)
            .is_multiple_of(elem.clamp(1, 8));
        if matches!(entry.method, Method::Stored) && !self.big_endian && aligned {
            return Storage::from_mapping(
                self.bytes.0.clone(),
                self.bytes.1,
                entry.data_start,
                nbytes,
            )
            .ok_or_else(|| ArchiveError::BadRecord {
                name: name.into(),
                problem: "extends past the end of the archive".into(),
            });
        }
        let raw = self.record(name)?;
        let payload = raw.get(..nbytes).ok_or_else(|| ArchiveError::BadRecord {
            name: name.into(),
            problem: "is shorter than declared".into(),
        })?;
        if self.big_endian && elem > 1 {
            let swap = if dtype.is_complex() { elem / 2 } else { elem };
            let mut swapped = payload.to_vec();
            for chunk in swapped.chunks_exact_mut(swap) {
                chunk.reverse();
            }
            return Storage::from_bytes(&swapped).map_err(alloc_err);
        }
        Storage::from_bytes(payload).map_err(alloc_err)
    }
}

fn check_size(len: u64, limits: &ArchiveLimits) -> Result<()> {
    if len > limits.max_archive_bytes {
        return Err(LimitExceeded {
            which: "max_archive_bytes",
            limit: limits.max_archive_bytes,
            requested: len,
            unit: "bytes",
        }
        .into());
    }
    Ok(())
}

fn check_records(n: usize, limits: &ArchiveLimits) -> Result<()> {
    if n > limits.max_records {
        return Err(LimitExceeded {
            which: "max_records",
            limit: limits.max_records as u64,
            requested: n as u64,
            unit: "records",
        }
        .into());
    }
    Ok(())
}

/// Reject paths that could escape a directory or are otherwise malformed.
fn validate_path(name: &str) -> Result<()> {
    let bad = name.is_empty()
        || name.starts_with('/')
        || name.starts_with('\\')
        || name.contains('\0')
        || name.contains('\\')
        || name.as_bytes().get(1) == Some(&b':')
        || name.split('/').any(|c| c == ".." || c == ".");
    if bad {
        return Err(ArchiveError::BadPath(name.escape_debug().to_string()));
    }
    Ok(())
}

/// Name formats that are not zips but are known PyTorch formats.
fn detect_non_zip(data: &[u8]) -> Result<()> {
    if data.starts_with(b"PK\x03\x04") || data.starts_with(b"PK\x05\x06") {
        return Ok(());
    }
    if data.get(257..262) == Some(b"ustar") {
        return Err(ArchiveError::LegacyFormat(
            "the legacy tar format of torch.save (PyTorch < 0.4)",
            "re-save with torch.jit.save".into(),
        ));
    }
    // torch.save's legacy format: pickled magic number 0x1950a86a20f9469cfc6c as a LONG1.
    const LEGACY_MAGIC: [u8; 10] = [0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19];
    if data.first() == Some(&0x80) && data.get(4..14) == Some(&LEGACY_MAGIC[..]) {
        return Err(ArchiveError::LegacyFormat(
            "the legacy pickle format of torch.save (_use_new_zipfile_serialization=False)",
            "this is not a TorchScript archive; re-save with torch.jit.save".into(),
        ));
    }
    if data.first() == Some(&0x80) {
        return Err(ArchiveError::LegacyFormat(
            "a bare pickle file",
            "tsrun loads torch.jit.save zip archives".into(),
        ));
    }
    Err(ArchiveError::Zip(format!(
        "no zip signature at the start ({} bytes)",
        data.len()
    )))
}

/// The entry count the end-of-central-directory record declares (None for zip64 or if absent).
fn eocd_entry_count(data: &[u8]) -> Option<usize> {
    const EOCD_LEN: usize = 22;
    let search_from = data.len().saturating_sub(EOCD_LEN + 0xFFFF);
    let tail = data.get(search_from..)?;
    let pos = tail
        .windows(4)
        .rposition(|w| w == [0x50, 0x4b, 0x05, 0x06])?;
    let rec = tail.get(pos..pos + EOCD_LEN)?;
    let total = u16::from_le_bytes([*rec.get(10)?, *rec.get(11)?]);
    (total != 0xFFFF).then_some(total as usize)
}
