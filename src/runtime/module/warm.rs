//! Mapping the code a call runs before the first call. A program's code pages enter the
//! process's page table on first execution, one fault at a time (each maps the 64 KiB around
//! it), and code never run before is fetched from memory, not the CPU's caches; on a model whose
//! call takes 10 us both were most of the first call. So `Module::prepare`, once per process,
//! reads one byte of every cache line of the program's executable text (16 MB: ~1 ms, the page
//! faults included), which leaves all of it mapped and in the last-level cache. Then, on each
//! `prepare`, it reads the 64 KiB around each kernel its plans call and the interpreter's call
//! path (their helpers are mostly near them), so those lines are also in the core's own cache.

use std::collections::HashMap;
use std::sync::Once;

/// The whole text is read once per process (see the module docs).
static TEXT_READ: Once = Once::new();

/// Read every cache line of the executable mapping that holds this program's code (once per
/// process), then the 64 KiB window around each address (function addresses of this program;
/// each window once, clipped to the executable mapping that holds the address).
pub(super) fn map_code(addrs: impl IntoIterator<Item = usize>) {
    let mappings = executable_mappings();
    TEXT_READ.call_once(|| {
        let own = read_code_lines as fn(usize, usize) as usize;
        if let Some(&(lo, hi)) = mappings.iter().find(|&&(lo, hi)| (lo..hi).contains(&own)) {
            if hi - lo <= TEXT_READ_MAX {
                read_code_lines(lo, hi);
            }
        }
    });
    let mut windows = HashMap::new();
    for a in addrs {
        if a != 0 {
            windows.entry(a >> WINDOW_BITS).or_insert(a);
        }
    }
    for (w, a) in windows {
        let (start, end) = (w << WINDOW_BITS, (w + 1) << WINDOW_BITS);
        let Some(&(lo, hi)) = mappings.iter().find(|&&(lo, hi)| (lo..hi).contains(&a)) else {
            continue;
        };
        read_code_lines(start.max(lo), end.min(hi));
    }
}

/// A program text larger than this (an application linking much more than tsrun) is not read
/// whole: ~4 ms of reading at most, once.
const TEXT_READ_MAX: usize = 64 << 20;

/// A window is 64 KiB, aligned.
const WINDOW_BITS: u32 = 16;

/// Read one byte of each 64-byte line of `lo..hi`, a range inside the executable mapping
/// that holds this program's code.
fn read_code_lines(lo: usize, hi: usize) {
    let mut line = lo;
    while line < hi {
        read_code_byte(line);
        line += 64;
    }
}

/// The address ranges the process maps executable and readable (`r-x` in
/// `/proc/self/maps`); empty where that file is not available.
fn executable_mappings() -> Vec<(usize, usize)> {
    if !cfg!(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "x86")
    )) {
        return Vec::new();
    }
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return Vec::new();
    };
    maps.lines()
        .filter_map(|l| {
            let mut fields = l.split_whitespace();
            let range = fields.next()?;
            let perms = fields.next()?;
            if !perms.starts_with('r') || perms.get(2..3) != Some("x") {
                return None;
            }
            let (lo, hi) = range.split_once('-')?;
            Some((
                usize::from_str_radix(lo, 16).ok()?,
                usize::from_str_radix(hi, 16).ok()?,
            ))
        })
        .collect()
}

#[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "x86")))]
fn read_code_byte(a: usize) {
    // SAFETY: `a` lies in a readable executable mapping that `/proc/self/maps` lists as
    // holding a function of this program (a kernel's or the interpreter's `fn` pointer, or
    // `read_code_lines` itself): the program's text. Linux maps the program's text readable (r-x) on
    // x86 for as long as the program runs, and nothing unmaps it; a one-byte volatile read
    // there changes nothing but the page table and the caches.
    unsafe {
        std::ptr::read_volatile(a as *const u8);
    }
}

/// Elsewhere code may be execute-only: nothing is read.
#[cfg(not(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "x86"))))]
fn read_code_byte(_a: usize) {}
