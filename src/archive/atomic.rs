//! Replacing a file without ever losing it: the new contents go to a temporary file in the
//! target's directory, are flushed to disk, then renamed over the target in one step. A failed
//! or interrupted save leaves the original untouched (and a module still mapping the original,
//! e.g. when saving over the input path, keeps reading the old inode).

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A temporary file that is removed unless it was renamed into place.
struct TempFile {
    path: PathBuf,
    keep: bool,
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Write `path` atomically: `write` fills a temporary file next to it, which is fsynced and
/// renamed over `path` only if `write` succeeded.
pub fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    // the temporary file's name means nothing to the user: errors name the target instead
    write_via_temp(path, write)
        .map_err(|e| io::Error::new(e.kind(), format!("writing {}: {e}", path.display())))
}

fn write_via_temp(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a file path"))?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(
        ".tsrun-tmp-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let mut temp = TempFile {
        path: dir.join(tmp_name),
        keep: false,
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temp.path)?;
    write(&mut file)?;
    file.flush()?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&temp.path, path)?;
    temp.keep = true;
    // make the rename itself durable (best effort: not every platform opens directories)
    if let Ok(d) = std::fs::File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(())
}
