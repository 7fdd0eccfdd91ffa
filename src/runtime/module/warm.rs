//! Mapping the code a call runs before the first call. A program's code pages enter the
//! process's page table on first execution, one fault at a time (each maps the 64 KiB around
//! it); on a model whose call takes 10 us, the faults of the first call were most of it.
//! `Module::prepare` knows the kernels its plans call and the interpreter's call path, and
//! reads one byte of each, so those faults happen while preparing. Then it reads every cache
//! line of the 64 KiB around each of those functions (their helpers are mostly near them),
//! so the first call fetches its instructions from the CPU's caches rather than from memory.

use std::collections::HashMap;

/// Fault in the code page at each address (function addresses of this program), then read
/// the 64 KiB window around it through the cache (each window once, clipped to the executable
/// mapping that holds the address).
pub(super) fn map_code(addrs: impl IntoIterator<Item = usize>) {
    let mut windows = HashMap::new();
    for a in addrs {
        if a == 0 || windows.insert(a >> 16, a).is_some() {
            continue;
        }
        read_code_byte(a);
    }
    let mappings = executable_mappings();
    for (w, a) in windows {
        let (start, end) = (w << 16, (w + 1) << 16);
        let Some(&(lo, hi)) = mappings.iter().find(|&&(lo, hi)| (lo..hi).contains(&a)) else {
            continue;
        };
        let mut line = start.max(lo);
        while line < end.min(hi) {
            read_code_byte(line);
            line += 64;
        }
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
    // SAFETY: `a` is the address of a function of this program (a kernel's or the
    // interpreter's `fn` pointer), or an address in the readable executable mapping that
    // `/proc/self/maps` lists as holding such a function (the program's text). Linux maps the program's text
    // readable (r-x) on x86 for as long as the program runs, and nothing unmaps it; a
    // one-byte volatile read there changes nothing but the page table and the caches.
    unsafe {
        std::ptr::read_volatile(a as *const u8);
    }
}

/// Elsewhere code may be execute-only: nothing is read.
#[cfg(not(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "x86"))))]
fn read_code_byte(_a: usize) {}
