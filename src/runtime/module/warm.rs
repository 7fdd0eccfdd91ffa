//! Mapping the code a call runs before the first call. A program's code pages enter the
//! process's page table on first execution, one fault at a time (each maps the 64 KiB around
//! it); on a model whose call takes 10 us, the faults of the first call were most of it.
//! `Module::prepare` knows the kernels its plans call and the interpreter's call path, and
//! reads one byte of each, so those faults happen while preparing.

use std::collections::HashSet;

/// Fault in the code page at each address (function addresses of this program). Each
/// 64 KiB window is read once.
pub(super) fn map_code(addrs: impl IntoIterator<Item = usize>) {
    let mut seen = HashSet::new();
    for a in addrs {
        if a == 0 || !seen.insert(a >> 16) {
            continue;
        }
        read_code_byte(a);
    }
}

#[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "x86")))]
fn read_code_byte(a: usize) {
    // SAFETY: `a` is the address of a function of this program (a kernel's or the
    // interpreter's `fn` pointer), so it lies in the program's text segment, which Linux maps
    // readable (r-x) on x86 for as long as the program runs; a one-byte volatile read there
    // changes nothing but the page table.
    unsafe {
        std::ptr::read_volatile(a as *const u8);
    }
}

/// Elsewhere code may be execute-only: nothing is read.
#[cfg(not(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "x86"))))]
fn read_code_byte(_a: usize) {}
