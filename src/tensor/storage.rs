//! Untyped, shared tensor storage: an aligned heap buffer or a region of a memory-mapped archive.
//!
//! Storage is shared by every tensor that views it (PyTorch's aliasing semantics), so writes through
//! one view are seen through all. Like PyTorch, concurrent writes to one storage from several threads
//! are the caller's responsibility; model parameters are only read during inference.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

/// Alignment of heap storages: a cache line, enough for any element type and SIMD loads.
pub const STORAGE_ALIGN: usize = 64;

enum Backing {
    Heap {
        ptr: *mut u8,
        layout: Option<Layout>,
    },
    /// A private (copy-on-write) mapping: writes never reach the file.
    Mapped {
        map: Arc<UnsafeCell<memmap2::MmapMut>>,
        offset: usize,
    },
}

struct Inner {
    backing: Backing,
    nbytes: usize,
    /// Bumped whenever a writable view is taken, so caches derived from the bytes (packed
    /// GEMM weights) can tell a storage was possibly written since they read it.
    version: AtomicU64,
}

// SAFETY: the buffer is plain bytes owned by `Inner`; aliasing rules are those of PyTorch storages
// (see the module docs). Raw pointers are only dereferenced through `Storage`'s methods.
unsafe impl Send for Inner {}
unsafe impl Sync for Inner {}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Backing::Heap {
            ptr,
            layout: Some(layout),
        } = self.backing
        {
            // SAFETY: allocated in `Storage::zeroed` with this exact layout.
            unsafe { dealloc(ptr, layout) }
        }
    }
}

/// A reference-counted byte buffer. Cloning shares it.
#[derive(Clone)]
pub struct Storage {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Storage({} bytes)", self.inner.nbytes)
    }
}

/// Why a storage could not be allocated.
#[derive(Debug, thiserror::Error)]
#[error("cannot allocate a storage of {0} bytes")]
pub struct AllocError(pub usize);

impl Storage {
    /// A zero-filled heap storage of `nbytes` bytes, aligned to [`STORAGE_ALIGN`].
    pub fn zeroed(nbytes: usize) -> Result<Storage, AllocError> {
        if nbytes == 0 {
            return Ok(Storage {
                inner: Arc::new(Inner {
                    backing: Backing::Heap {
                        ptr: STORAGE_ALIGN as *mut u8,
                        layout: None,
                    },
                    nbytes: 0,
                    version: AtomicU64::new(0),
                }),
            });
        }
        let layout =
            Layout::from_size_align(nbytes, STORAGE_ALIGN).map_err(|_| AllocError(nbytes))?;
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(AllocError(nbytes));
        }
        Ok(Storage {
            inner: Arc::new(Inner {
                backing: Backing::Heap {
                    ptr,
                    layout: Some(layout),
                },
                nbytes,
                version: AtomicU64::new(0),
            }),
        })
    }

    /// A heap storage holding a copy of `bytes`.
    pub fn from_bytes(bytes: &[u8]) -> Result<Storage, AllocError> {
        let s = Storage::zeroed(bytes.len())?;
        // SAFETY: freshly allocated, exclusively owned, same length.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), s.as_mut_ptr(), bytes.len()) };
        Ok(s)
    }

    /// A storage over `len` bytes at `offset` of a private file mapping (no copy).
    /// Returns `None` when the range is outside the mapping.
    pub fn from_mapping(
        map: Arc<UnsafeCell<memmap2::MmapMut>>,
        offset: usize,
        len: usize,
    ) -> Option<Storage> {
        // SAFETY: only the length is read.
        let map_len = unsafe { (&*map.get()).len() };
        if offset.checked_add(len)? > map_len {
            return None;
        }
        Some(Storage {
            inner: Arc::new(Inner {
                backing: Backing::Mapped { map, offset },
                nbytes: len,
                version: AtomicU64::new(0),
            }),
        })
    }

    pub fn nbytes(&self) -> usize {
        self.inner.nbytes
    }

    /// Whether the bytes live in a memory-mapped file rather than on the heap.
    pub fn is_mapped(&self) -> bool {
        matches!(self.inner.backing, Backing::Mapped { .. })
    }

    /// Whether two handles share the same buffer.
    pub fn same(&self, other: &Storage) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// A stable identity for this buffer (for grouping shared storages when saving).
    pub fn id(&self) -> usize {
        Arc::as_ptr(&self.inner) as usize
    }

    /// How many times a writable view of this buffer has been handed out (see
    /// [`Storage::mark_written`]); unchanged means the bytes are unchanged.
    pub fn version(&self) -> u64 {
        self.inner.version.load(Ordering::Acquire)
    }

    /// Record that the bytes may be about to change (every writable access calls this).
    pub fn mark_written(&self) {
        self.inner.version.fetch_add(1, Ordering::AcqRel);
    }

    /// A handle that does not keep the buffer alive: lets a cache keyed on [`Storage::id`]
    /// tell its buffer from a later one allocated at the same address.
    pub fn downgrade(&self) -> WeakStorage {
        WeakStorage(Arc::downgrade(&self.inner))
    }

    pub fn as_ptr(&self) -> *const u8 {
        self.as_mut_ptr() as *const u8
    }

    pub fn as_mut_ptr(&self) -> *mut u8 {
        match &self.inner.backing {
            Backing::Heap { ptr, .. } => *ptr,
            // SAFETY: the mapping outlives `self`; offset was bounds-checked at construction.
            Backing::Mapped { map, offset } => unsafe {
                (&mut *map.get()).as_mut_ptr().add(*offset)
            },
        }
    }

    /// The bytes, read-only.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: pointer and length describe the live buffer.
        unsafe { std::slice::from_raw_parts(self.as_ptr(), self.nbytes()) }
    }

    /// The bytes, writable.
    ///
    /// # Safety
    /// No other reference to these bytes may be used while the returned slice lives
    /// (the caller upholds PyTorch's single-writer discipline).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn bytes_mut(&self) -> &mut [u8] {
        self.mark_written();
        std::slice::from_raw_parts_mut(self.as_mut_ptr(), self.nbytes())
    }

    /// A deep copy onto the heap.
    pub fn deep_copy(&self) -> Result<Storage, AllocError> {
        Storage::from_bytes(self.bytes())
    }
}

/// A non-owning handle to a [`Storage`] (see [`Storage::downgrade`]).
#[derive(Clone, Debug)]
pub struct WeakStorage(Weak<Inner>);

impl WeakStorage {
    /// Whether `s` is the very buffer this handle was taken from, and it is still alive.
    pub fn is(&self, s: &Storage) -> bool {
        std::ptr::eq(self.0.as_ptr(), Arc::as_ptr(&s.inner))
    }

    /// Whether the buffer has been freed.
    pub fn is_dead(&self) -> bool {
        self.0.strong_count() == 0
    }
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Inner({} bytes)", self.nbytes)
    }
}
