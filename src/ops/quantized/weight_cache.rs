//! Prepared forms of quantized weights (float copies, int8 panels packed for VNNI), made once
//! per weight storage and kept while that storage is alive and unwritten, so a model's later
//! calls reuse them.

use crate::tensor::{Tensor, WeakStorage};
use parking_lot::Mutex;
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// One prepared form: valid while the weight's storage is the same, unwritten, and the tensor
/// views the same elements with the same zero points.
struct Entry {
    storage: WeakStorage,
    version: u64,
    offset: usize,
    shape: Vec<usize>,
    strides: Vec<isize>,
    w_zps: Vec<i32>,
    prepared: Arc<dyn Any + Send + Sync>,
}

type Key = (usize, TypeId);

fn cache() -> &'static Mutex<HashMap<Key, Entry>> {
    static CACHE: OnceLock<Mutex<HashMap<Key, Entry>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The form `T` of `weight` (with zero points `w_zps`) made by `make`, from the cache when an
/// earlier call made it from the same unwritten elements; `None` when `make` gives none.
pub(super) fn prepared<T: Any + Send + Sync>(
    weight: &Tensor,
    w_zps: &[i32],
    make: impl FnOnce() -> Option<T>,
) -> Option<Arc<T>> {
    let storage = weight.storage();
    let key = (storage.id(), TypeId::of::<T>());
    {
        let cache = cache().lock();
        if let Some(e) = cache.get(&key) {
            if e.storage.is(storage)
                && e.version == storage.version()
                && e.offset == weight.storage_offset()
                && e.shape == weight.shape()
                && e.strides == weight.strides()
                && e.w_zps == w_zps
            {
                if let Ok(hit) = e.prepared.clone().downcast::<T>() {
                    return Some(hit);
                }
            }
        }
    }
    let version = storage.version();
    let made = Arc::new(make()?);
    let mut cache = cache().lock();
    cache.retain(|_, e| !e.storage.is_dead());
    cache.insert(
        key,
        Entry {
            storage: storage.downgrade(),
            version,
            offset: weight.storage_offset(),
            shape: weight.shape().to_vec(),
            strides: weight.strides().to_vec(),
            w_zps: w_zps.to_vec(),
            prepared: made.clone(),
        },
    );
    Some(made)
}
