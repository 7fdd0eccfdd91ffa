//! Heap buffers of storages: fresh ones, and a per-thread cache of freed ones that later
//! allocations reuse.
//!
//! Running a model allocates and frees the same activation sizes on every call. Large buffers
//! come from `mmap` and go back with `munmap` (in the global allocator), so without reuse each call pays a page fault per
//! 4 KiB of every intermediate tensor (and the kernel zeroes each page). The interpreter drops
//! each value at its last use (computed when the plan is built), and a storage's buffer is
//! freed when its last handle (tensor, view, returned value) goes: the buffer then comes here,
//! and the next allocation of at most its size takes it back (the exact size first, else the
//! smallest buffer at most [`SLACK`] times the request). So later calls reuse the pages of
//! earlier ones, and within one call (the first one too) an output takes the buffer of a value
//! that died before it. Buffers are kept only from [`MIN_BYTES`] up to a per-thread cap of
//! [`MAX_HELD_BYTES`], and freed when the thread exits.
//!
//! A fresh buffer from [`POPULATE_MIN_BYTES`] to [`POPULATE_AT_MOST`] is a new mapping of the
//! global allocator: its pages are made present in one system call before it is zeroed,
//! instead of a page fault per 4 KiB page of the zeroing pass (which `alloc_zeroed` of a
//! 64-byte aligned buffer runs too).

use std::alloc::{alloc, dealloc, Layout};
use std::cell::RefCell;
use std::ptr::NonNull;

/// Smaller buffers are cheap for the allocator itself; caching them gains nothing.
const MIN_BYTES: usize = 16 * 1024;
/// The most bytes one thread keeps cached (the oldest buffers are freed beyond it).
const MAX_HELD_BYTES: usize = 32 * 1024 * 1024;
/// A cached buffer serves a request of at least `1 / SLACK` of its size. A first call takes a
/// fresh buffer (new pages, ~1.5 us per 4 KiB on the VMs measured) for every request no dead
/// buffer serves: replaying the pool's traffic of one first call, slack 2 / 3 / 4 / 8 took
/// 3.56 / 2.62 / 2.26 / 2.37 MB fresh on mobilenet_v3_small (1.27 MB live at most), 9.95 /
/// 9.95 / 8.04 / 8.04 MB on resnet18 and 1.75 MB at any slack on BERT.
const SLACK: usize = 4;
/// Fresh buffers from this size on have their pages populated at once (see the module docs).
const POPULATE_MIN_BYTES: usize = 128 * 1024;
/// Larger fresh buffers fault in as they are zeroed.
const POPULATE_AT_MOST: usize = 64 * 1024 * 1024;
/// The smallest page size of the platforms tsrun runs on.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
const PAGE: usize = 4096;

struct Cached {
    ptr: NonNull<u8>,
    layout: Layout,
}

#[derive(Default)]
struct Pool {
    buffers: Vec<Cached>,
    held: usize,
}

impl Drop for Pool {
    fn drop(&mut self) {
        for b in self.buffers.drain(..) {
            // SAFETY: every cached buffer came from the global allocator with `b.layout` and is
            // owned by the pool.
            unsafe { dealloc(b.ptr.as_ptr(), b.layout) }
        }
    }
}

thread_local! {
    static POOL: RefCell<Pool> = RefCell::new(Pool::default());
}

/// A buffer for `layout` (non-zero size): a cached one when this thread holds one that fits,
/// else a fresh zeroed one. Returns the buffer, the layout it was made with (at least
/// `layout`'s size, with its alignment: free it with that one), and whether it is fresh
/// (zeroed); a reused buffer holds whatever its previous tensor left. Its bytes are
/// initialized and the caller owns it. `None` when the system refuses the memory.
pub(super) fn allocate(layout: Layout) -> Option<(NonNull<u8>, Layout, bool)> {
    if let Some((ptr, held)) = take(layout) {
        return Some((ptr, held, false));
    }
    let (ptr, layout) = fresh(layout)?;
    Some((ptr, layout, true))
}

/// The best-fitting cached buffer for `layout`, with its own layout.
fn take(layout: Layout) -> Option<(NonNull<u8>, Layout)> {
    let want = layout.size();
    if want < MIN_BYTES {
        return None;
    }
    let most = want.saturating_mul(SLACK);
    POOL.try_with(|p| {
        let mut p = p.try_borrow_mut().ok()?;
        // the smallest that fits; among equal sizes the most recently freed (warmest)
        let mut best: Option<(usize, usize)> = None;
        for (i, b) in p.buffers.iter().enumerate().rev() {
            let size = b.layout.size();
            if b.layout.align() == layout.align()
                && (want..=most).contains(&size)
                && best.is_none_or(|(_, s)| size < s)
            {
                best = Some((i, size));
                if size == want {
                    break;
                }
            }
        }
        let (i, _) = best?;
        let b = p.buffers.swap_remove(i);
        p.held -= b.layout.size();
        Some((b.ptr, b.layout))
    })
    .ok()
    .flatten()
}

/// A fresh zeroed buffer for `layout` from the global allocator, with that layout. A large
/// one has its pages made present first in one system call (a fresh allocation of that size
/// is a new mapping, whose pages would otherwise each fault on the zeroing pass). Not
/// `alloc_zeroed`: below glibc's (growing) mmap threshold calloc zeroes the bytes itself, page
/// fault by page fault, before the pages could be populated (resnet18's first call measured
/// ~15% slower with it, 4 alternations).
fn fresh(layout: Layout) -> Option<(NonNull<u8>, Layout)> {
    // SAFETY: the callers never ask for a zero-size layout.
    let ptr = NonNull::new(unsafe { alloc(layout) })?;
    if (POPULATE_MIN_BYTES..=POPULATE_AT_MOST).contains(&layout.size()) {
        populate_pages(ptr, layout.size());
    }
    // SAFETY: the allocation is fresh, exclusively ours and `layout.size()` bytes long; this
    // initializes every byte.
    unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, layout.size()) };
    Some((ptr, layout))
}

/// Makes the whole pages inside `len` bytes at `ptr` present and writable now
/// (`MADV_POPULATE_WRITE`; kernels before Linux 5.14 refuse it: nothing happens).
#[cfg(target_os = "linux")]
fn populate_pages(ptr: NonNull<u8>, len: usize) {
    let addr = ptr.as_ptr() as usize;
    let (start, end) = (addr.next_multiple_of(PAGE), (addr + len) / PAGE * PAGE);
    if end > start {
        // SAFETY: [start, end) lies inside an allocation this thread exclusively owns (whole
        // pages of it, so no other allocation shares them). MADV_POPULATE_WRITE only faults
        // the pages in as a write would, without changing any byte.
        unsafe {
            libc::madvise(
                start as *mut libc::c_void,
                end - start,
                libc::MADV_POPULATE_WRITE,
            );
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn populate_pages(_ptr: NonNull<u8>, _len: usize) {}

/// Hands a buffer back: it is cached for reuse, or freed when it is too small or too large, or
/// the thread's cache is full.
///
/// # Safety
/// `ptr` and `layout` must be a buffer and its layout returned by [`allocate`], its bytes must all
/// be initialized, and the caller must not use it afterwards.
pub(super) unsafe fn give(ptr: NonNull<u8>, layout: Layout) {
    let size = layout.size();
    let kept = (MIN_BYTES..=MAX_HELD_BYTES).contains(&size)
        && POOL
            .try_with(|p| {
                let Ok(mut p) = p.try_borrow_mut() else {
                    return false;
                };
                while p.held + size > MAX_HELD_BYTES && !p.buffers.is_empty() {
                    let old = p.buffers.remove(0);
                    p.held -= old.layout.size();
                    // SAFETY: a cached buffer is owned by the pool and came from the global
                    // allocator with its layout.
                    unsafe { dealloc(old.ptr.as_ptr(), old.layout) }
                }
                p.buffers.push(Cached { ptr, layout });
                p.held += size;
                true
            })
            .unwrap_or(false);
    if !kept {
        // SAFETY: the caller guarantees `ptr` came from `allocate` (the global allocator) with
        // `layout` and is not used afterwards.
        unsafe { dealloc(ptr.as_ptr(), layout) }
    }
}
