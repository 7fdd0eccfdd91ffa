//! Untyped, shared tensor storage: an aligned heap buffer or a read-only region of the archive's
//! memory map, with a run-time borrow state that makes shared mutation sound.
//!
//! Storage is shared by every tensor that views it (PyTorch's aliasing semantics), so a write
//! through one view is seen through all. Rust forbids a write while any other reference to the
//! bytes is live, so every access goes through a guard: [`Storage::read`] (any number at once) or
//! [`Storage::write`] (exclusive). The borrow state is one atomic word, like a thread-safe
//! `RefCell`; a conflicting request fails with [`BorrowError`] instead of blocking, so a kernel that
//! reads and writes one storage gets an error, never a deadlock, and two threads that race on one
//! tensor get an error, never a data race. (The module call path serializes calls that mutate
//! module state, so conflicts do not arise from correct programs.)
//!
//! A mapped storage is never written in place: its first write guard copies the bytes to the heap
//! (copy-on-write), so the mapping stays read-only, loading stays zero-copy, and the archive may
//! hand out plain `&[u8]` of its records.

use std::alloc::Layout;
use std::cell::UnsafeCell;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

/// Alignment of heap storages: a cache line, enough for any element type and SIMD loads.
pub const STORAGE_ALIGN: usize = 64;

/// Where the bytes live.
enum Memory {
    /// An owned allocation (`layout` is `None` for the empty storage, which owns nothing).
    Heap {
        ptr: NonNull<u8>,
        layout: Option<Layout>,
        /// The memory budget this buffer is charged to (refunded when it is freed).
        _charge: Option<super::budget::Charge>,
    },
    /// A region of a read-only mapping, kept alive by the `Arc`; `file_backed` when it maps
    /// a file (whose pages can be dropped and read again), not an anonymous copy.
    Mapped {
        _map: Arc<memmap2::Mmap>,
        ptr: NonNull<u8>,
        file_backed: bool,
    },
}

impl Memory {
    fn ptr(&self) -> NonNull<u8> {
        match self {
            Memory::Heap { ptr, .. } | Memory::Mapped { ptr, .. } => *ptr,
        }
    }
}

/// The borrow word's value while a writer holds the storage.
const WRITING: usize = usize::MAX;

struct Inner {
    /// Number of live read guards, or [`WRITING`].
    borrow: AtomicUsize,
    /// Incremented each time a write guard is released (caches of derived data key on it).
    version: AtomicU64,
    /// One more than the `version` at which every byte was last seen to be 0 or 1 (0: not
    /// checked), so that bool reads of a large storage check its bytes once, not per read.
    bools_checked_at: AtomicU64,
    nbytes: usize,
    /// The alignment the bytes keep for the storage's life (a copy-on-write copy is more aligned).
    align: usize,
    /// Whether the bytes are still those of the mapping (cleared by the copy-on-write).
    mapped: std::sync::atomic::AtomicBool,
    /// Read under any guard; replaced (copy-on-write of a mapping) only under the write guard.
    memory: UnsafeCell<Memory>,
}

// SAFETY: `memory` is only dereferenced while a guard holds `borrow`: readers share it, a writer
// excludes everyone (acquire/release on `borrow` orders the accesses), exactly the discipline of
// `RwLock`. The bytes are plain data, and the mapping (`Mmap`) is Send + Sync itself.
unsafe impl Send for Inner {}
unsafe impl Sync for Inner {}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Memory::Heap {
            ptr,
            layout: Some(layout),
            ..
        } = self.memory.get_mut()
        {
            // SAFETY: `heap_alloc` got this buffer and layout from `pool::allocate`, its bytes are
            // initialized (zeroed or written since), and no guard can outlive the `Arc` that
            // owns `Inner`, so nothing uses it after this.
            unsafe { super::pool::give(*ptr, *layout) }
        }
    }
}

/// Why a storage could not be allocated.
#[derive(Debug, thiserror::Error)]
pub enum AllocError {
    /// The allocator refused this many bytes.
    #[error("cannot allocate a storage of {0} bytes")]
    OutOfMemory(usize),
    /// A memory limit of the call refused it (see `tensor::budget`).
    #[error(transparent)]
    Limit(#[from] super::budget::LimitExceeded),
}

/// Why a storage could not be borrowed: another guard holds it in a conflicting mode.
#[derive(Debug, thiserror::Error)]
pub enum BorrowError {
    #[error(
        "a tensor's memory is being written while it is read (an operation reads and writes one storage, or two threads share a tensor one of them writes)"
    )]
    /// A write was asked while a read guard is alive.
    WriteWhileRead,
    /// A read or write was asked while a write guard is alive.
    #[error("a tensor's memory is being read or written while another write to it is in progress")]
    AlreadyWriting,
    /// The copy made on first write could not be allocated.
    #[error(transparent)]
    Alloc(#[from] AllocError),
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

/// A heap buffer of `nbytes` initialized bytes: a cached buffer this thread freed when one fits
/// (its old contents unless `zero`), else a fresh zeroed allocation (see `pool.rs`).
fn heap_alloc(nbytes: usize, zero: bool) -> Result<Memory, AllocError> {
    if nbytes == 0 {
        return Ok(Memory::Heap {
            ptr: NonNull::dangling(),
            layout: None,
            _charge: None,
        });
    }
    let charge = super::budget::charge(nbytes)?;
    let layout = Layout::from_size_align(nbytes, STORAGE_ALIGN)
        .map_err(|_| AllocError::OutOfMemory(nbytes))?;
    let (ptr, layout, fresh) =
        super::pool::allocate(layout).ok_or(AllocError::OutOfMemory(nbytes))?;
    if zero && !fresh {
        // SAFETY: the buffer is exclusively ours and at least `nbytes` long.
        unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, nbytes) };
    }
    Ok(Memory::Heap {
        ptr,
        layout: Some(layout),
        _charge: charge,
    })
}

/// The smallest page size of the platforms tsrun runs on; a larger real page size makes
/// `madvise` refuse a range, which only means nothing is released or populated.
const PAGE: usize = 4096;

impl Storage {
    fn with_memory(memory: Memory, nbytes: usize) -> Storage {
        let align = if nbytes == 0 {
            STORAGE_ALIGN
        } else {
            let addr = memory.ptr().as_ptr() as usize;
            (1usize << addr.trailing_zeros().min(STORAGE_ALIGN.trailing_zeros())).min(STORAGE_ALIGN)
        };
        let mapped = matches!(memory, Memory::Mapped { .. });
        Storage {
            inner: Arc::new(Inner {
                borrow: AtomicUsize::new(0),
                version: AtomicU64::new(0),
                bools_checked_at: AtomicU64::new(0),
                nbytes,
                align,
                mapped: std::sync::atomic::AtomicBool::new(mapped),
                memory: UnsafeCell::new(memory),
            }),
        }
    }

    /// A zero-filled heap storage of `nbytes` bytes, aligned to [`STORAGE_ALIGN`].
    pub fn zeroed(nbytes: usize) -> Result<Storage, AllocError> {
        Ok(Storage::with_memory(heap_alloc(nbytes, true)?, nbytes))
    }

    /// A heap storage of `nbytes` bytes whose contents are unspecified (but initialized): for a
    /// result every byte of which is about to be written, so zeroing it first would be wasted.
    pub fn for_overwrite(nbytes: usize) -> Result<Storage, AllocError> {
        Ok(Storage::with_memory(heap_alloc(nbytes, false)?, nbytes))
    }

    /// A heap storage holding a copy of `bytes`.
    pub fn from_bytes(bytes: &[u8]) -> Result<Storage, AllocError> {
        let memory = heap_alloc(bytes.len(), false)?;
        // SAFETY: the allocation is fresh, exclusively owned, and `bytes.len()` long.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), memory.ptr().as_ptr(), bytes.len())
        };
        Ok(Storage::with_memory(memory, bytes.len()))
    }

    /// A storage over `len` bytes at `offset` of a read-only mapping (no copy); `file_backed`
    /// when `map` maps a file rather than anonymous memory.
    /// Returns `None` when the range is outside the mapping.
    pub fn from_mapping(
        map: Arc<memmap2::Mmap>,
        file_backed: bool,
        offset: usize,
        len: usize,
    ) -> Option<Storage> {
        if offset.checked_add(len)? > map.len() {
            return None;
        }
        let ptr = if len == 0 {
            NonNull::<u8>::dangling()
        } else {
            // SAFETY: offset + len lies inside the mapping (checked above).
            NonNull::new(unsafe { map.as_ptr().add(offset) } as *mut u8)?
        };
        Some(Storage::with_memory(
            Memory::Mapped {
                _map: map,
                ptr,
                file_backed,
            },
            len,
        ))
    }

    /// The storage's size in bytes.
    pub fn nbytes(&self) -> usize {
        self.inner.nbytes
    }

    /// Whether the bytes still live in the memory-mapped archive (no write has copied them yet).
    pub fn is_mapped(&self) -> bool {
        self.inner.mapped.load(Ordering::Acquire)
    }

    /// Let the OS drop the whole pages of the archive mapping that lie inside this storage
    /// from the process's memory; they are read back from the file on the next access. For a
    /// weight whose packed copy is what its kernel reads, so the archive's copy need not stay
    /// resident beside it. A heap storage, or a mapping of an archive read from bytes (an
    /// anonymous copy, which has no file to read back from), is left alone. Returns whether
    /// pages were released.
    pub fn release_mapped_pages(&self) -> bool {
        self.with_file_mapping(|map, offset, nbytes| {
            let start = offset.next_multiple_of(PAGE);
            let end = offset.saturating_add(nbytes) / PAGE * PAGE;
            end > start && {
                // SAFETY: MADV_DONTNEED on a private, read-only *file* mapping
                // (`map_copy_read_only`; `with_file_mapping` refuses anonymous ones) that nothing
                // ever writes (a write copies the storage to the heap first): there are no
                // private copies of its pages, so dropping them only means the next access
                // reads the same file bytes again. References into the range stay valid and see
                // the same values. The range lies inside the mapping (within this storage).
                unsafe {
                    map.unchecked_advise_range(
                        memmap2::UncheckedAdvice::DontNeed,
                        start,
                        end - start,
                    )
                }
                .is_ok()
            }
        })
    }

    /// Map the archive pages of a file-backed mapped storage into the page table now
    /// (`MADV_POPULATE_READ`), so the first read of a weight takes no page faults: a module's
    /// `prepare` does this for the weights kernels read in place, which on a 10 us model were
    /// most of the first call. Heap storages and anonymous mappings are resident already.
    /// Returns whether pages were populated (older kernels refuse the advice: nothing happens).
    pub fn populate_mapped_pages(&self) -> bool {
        self.with_file_mapping(|map, offset, nbytes| {
            let start = offset / PAGE * PAGE;
            let end = offset.saturating_add(nbytes).min(map.len());
            nbytes > 0
                && end > start
                && map
                    .advise_range(memmap2::Advice::PopulateRead, start, end - start)
                    .is_ok()
        })
    }

    /// `advise(map, offset of this storage in it, its bytes)` for a storage mapped from an
    /// archive file, under the read guard (no writer replaces the memory meanwhile); `false`
    /// for heap memory, an anonymous mapping (whose dropped pages would read back as zeros) and
    /// an empty storage whose pointer lies outside the mapping.
    fn with_file_mapping(&self, advise: impl FnOnce(&memmap2::Mmap, usize, usize) -> bool) -> bool {
        let Ok(guard) = self.read() else {
            return false;
        };
        // SAFETY: the read borrow is held, so `memory` is not replaced while we look.
        let Memory::Mapped {
            _map: map,
            ptr,
            file_backed: true,
        } = (unsafe { &*self.inner.memory.get() })
        else {
            return false;
        };
        let done = (ptr.as_ptr() as usize)
            .checked_sub(map.as_ptr() as usize)
            .is_some_and(|offset| advise(map, offset, self.inner.nbytes));
        drop(guard);
        done
    }

    /// Whether this handle is the only one to the buffer: no other tensor, view or cache (weak
    /// handle) can observe it, and it is heap memory (a mapped file's pages stay read-only). A
    /// kernel may then overwrite a dead input's bytes with its result.
    pub fn is_exclusive(&self) -> bool {
        Arc::strong_count(&self.inner) == 1
            && Arc::weak_count(&self.inner) == 0
            && !self.is_mapped()
    }

    /// Whether two handles share the same buffer.
    pub fn same(&self, other: &Storage) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// A stable identity for this buffer (for grouping shared storages when saving, and for caches).
    pub fn id(&self) -> usize {
        Arc::as_ptr(&self.inner) as usize
    }

    /// A handle that does not keep the buffer alive: lets a cache keyed on [`Storage::id`]
    /// tell its buffer from a later one allocated at the same address.
    pub fn downgrade(&self) -> WeakStorage {
        WeakStorage(Arc::downgrade(&self.inner))
    }

    /// How many times the bytes have been written through a guard (a cache of data derived from
    /// the bytes is valid while `(id, version)` is unchanged).
    pub fn version(&self) -> u64 {
        self.inner.version.load(Ordering::Acquire)
    }

    /// Whether every byte of `bytes` (this storage's bytes, under a guard the caller holds, so
    /// no writer runs) is 0 or 1, as a bool tensor's must be. The answer is remembered until
    /// the next write guard is released: a mask sliced from a large bool buffer (a causal-mask
    /// table) is read on every call, and scanning all of its bytes each time cost milliseconds.
    pub(crate) fn bytes_are_bools(&self, bytes: &[u8]) -> bool {
        let version = self.version();
        if self.inner.bools_checked_at.load(Ordering::Acquire) == version.wrapping_add(1) {
            return true;
        }
        // OR-folded in blocks (which vectorizes; a short-circuiting `all` runs byte by byte)
        let valid = bytes
            .chunks(4096)
            .all(|block| block.iter().fold(0u8, |acc, &b| acc | b) <= 1);
        if valid {
            self.inner
                .bools_checked_at
                .store(version.wrapping_add(1), Ordering::Release);
        }
        valid
    }

    /// The alignment the bytes are guaranteed to keep (heap storages and copies of mapped ones
    /// are cache-line aligned; a mapped region is as aligned as its offset in the file).
    pub fn alignment(&self) -> usize {
        self.inner.align
    }

    /// Shared read access to the bytes.
    pub fn read(&self) -> Result<StorageRead, BorrowError> {
        let b = &self.inner.borrow;
        let mut cur = b.load(Ordering::Relaxed);
        loop {
            if cur == WRITING {
                return Err(BorrowError::AlreadyWriting);
            }
            if cur == WRITING - 1 {
                // as many readers as fit in a word: treat as busy rather than overflow
                return Err(BorrowError::AlreadyWriting);
            }
            match b.compare_exchange_weak(cur, cur + 1, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        // SAFETY: the read borrow is held, so `memory` is not replaced while we look.
        let ptr = unsafe { &*self.inner.memory.get() }.ptr();
        Ok(StorageRead {
            inner: self.inner.clone(),
            ptr,
        })
    }

    /// Exclusive write access to the bytes. A mapped storage is first copied to the heap.
    pub fn write(&self) -> Result<StorageWrite, BorrowError> {
        let b = &self.inner.borrow;
        if let Err(now) = b.compare_exchange(0, WRITING, Ordering::Acquire, Ordering::Relaxed) {
            return Err(if now == WRITING {
                BorrowError::AlreadyWriting
            } else {
                BorrowError::WriteWhileRead
            });
        }
        // Releases the borrow if the copy-on-write below fails.
        let mut guard = StorageWrite {
            inner: self.inner.clone(),
            ptr: NonNull::dangling(),
        };
        // SAFETY: the write borrow is held: no other guard exists, so `memory` may be replaced.
        let memory = unsafe { &mut *self.inner.memory.get() };
        if let Memory::Mapped { ptr, .. } = memory {
            let copy = heap_alloc(self.inner.nbytes, false)?;
            // SAFETY: both regions are `nbytes` long and distinct (a fresh allocation).
            unsafe {
                std::ptr::copy_nonoverlapping(ptr.as_ptr(), copy.ptr().as_ptr(), self.inner.nbytes)
            };
            *memory = copy;
            self.inner.mapped.store(false, Ordering::Release);
        }
        guard.ptr = memory.ptr();
        Ok(guard)
    }

    /// A deep copy onto the heap.
    pub fn deep_copy(&self) -> Result<Storage, BorrowError> {
        let g = self.read()?;
        Ok(Storage::from_bytes(&g)?)
    }
}

/// A shared borrow of a storage's bytes; derefs to them. It holds the storage alive itself.
pub struct StorageRead {
    inner: Arc<Inner>,
    ptr: NonNull<u8>,
}

impl StorageRead {
    /// The first byte's address, valid while the guard lives.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }
}

impl std::ops::Deref for StorageRead {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` addresses `nbytes` initialized bytes that no writer can touch while this
        // read borrow is held; the slice borrows the guard, so it cannot outlive the borrow.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.inner.nbytes) }
    }
}

impl Drop for StorageRead {
    fn drop(&mut self) {
        self.inner.borrow.fetch_sub(1, Ordering::Release);
    }
}

/// An exclusive borrow of a storage's bytes; derefs (mutably) to them. It holds the storage alive
/// itself.
pub struct StorageWrite {
    inner: Arc<Inner>,
    ptr: NonNull<u8>,
}

impl StorageWrite {
    /// The first byte's address, valid for reads and writes while the guard lives.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
    /// The first byte's address for reading.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }
}

impl std::ops::Deref for StorageWrite {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the write borrow excludes every other access; the slice borrows the guard.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.inner.nbytes) }
    }
}

impl std::ops::DerefMut for StorageWrite {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes this the only live slice of the guard.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.inner.nbytes) }
    }
}

impl Drop for StorageWrite {
    fn drop(&mut self) {
        self.inner.version.fetch_add(1, Ordering::AcqRel);
        self.inner.borrow.store(0, Ordering::Release);
    }
}

/// A non-owning handle to a [`Storage`] (see [`Storage::downgrade`]).
#[derive(Clone)]
pub struct WeakStorage(Weak<Inner>);

impl std::fmt::Debug for WeakStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WeakStorage(alive: {})", !self.is_dead())
    }
}

impl WeakStorage {
    /// Whether `s` is the very buffer this handle was taken from (the weak count keeps the
    /// allocation, so no later storage can reuse its address).
    pub fn is(&self, s: &Storage) -> bool {
        std::ptr::eq(self.0.as_ptr(), Arc::as_ptr(&s.inner))
    }

    /// Whether the buffer has been freed.
    pub fn is_dead(&self) -> bool {
        self.0.strong_count() == 0
    }

    /// The version of the buffer's bytes (see [`Storage::version`]), if it is still alive.
    pub fn version(&self) -> Option<u64> {
        self.0.upgrade().map(|i| i.version.load(Ordering::Acquire))
    }
}
