//! A per-thread cache of freed storage buffers, reused by the next allocation of the same size.
//!
//! Running a model allocates and frees the same activation sizes on every call. Large buffers
//! come from `mmap` and go back with `munmap`, so without reuse each call pays a page fault per
//! 4 KiB of every intermediate tensor (and the kernel zeroes each page). Keeping a few freed
//! buffers per thread turns that into a pointer swap. Buffers are matched by exact layout, kept
//! only between [`MIN_BYTES`] and a per-thread cap of [`MAX_HELD_BYTES`], and freed when the
//! thread exits.

use std::alloc::{dealloc, Layout};
use std::cell::RefCell;
use std::ptr::NonNull;

/// Smaller buffers are cheap for the allocator itself; caching them gains nothing.
const MIN_BYTES: usize = 16 * 1024;
/// The most bytes one thread keeps cached (the oldest buffers are freed beyond it).
const MAX_HELD_BYTES: usize = 32 * 1024 * 1024;

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
            // SAFETY: every cached buffer was allocated with `b.layout` and is owned by the pool.
            unsafe { dealloc(b.ptr.as_ptr(), b.layout) }
        }
    }
}

thread_local! {
    static POOL: RefCell<Pool> = RefCell::new(Pool::default());
}

/// A cached buffer with exactly `layout`, if this thread holds one. Its bytes are initialized
/// (they are whatever its previous tensor left), and the caller now owns it.
pub(super) fn take(layout: Layout) -> Option<NonNull<u8>> {
    if layout.size() < MIN_BYTES {
        return None;
    }
    POOL.try_with(|p| {
        let mut p = p.try_borrow_mut().ok()?;
        let i = p.buffers.iter().rposition(|b| b.layout == layout)?;
        let b = p.buffers.swap_remove(i);
        p.held -= b.layout.size();
        Some(b.ptr)
    })
    .ok()
    .flatten()
}

/// Hands a buffer back: it is cached for reuse, or freed when it is too small or too large, or
/// the thread's cache is full.
///
/// # Safety
/// `ptr` must have been allocated by the global allocator with `layout`, its bytes must all be
/// initialized, and the caller must not use it afterwards.
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
                    // SAFETY: a cached buffer is owned by the pool and was allocated with its layout.
                    unsafe { dealloc(old.ptr.as_ptr(), old.layout) }
                }
                p.buffers.push(Cached { ptr, layout });
                p.held += size;
                true
            })
            .unwrap_or(false);
    if !kept {
        // SAFETY: the caller guarantees `ptr` came from the global allocator with `layout`.
        unsafe { dealloc(ptr.as_ptr(), layout) }
    }
}
