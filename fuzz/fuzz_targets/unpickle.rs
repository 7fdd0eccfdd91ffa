//! The unpickler on arbitrary bytes, with storages resolved to small zeroed buffers.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tsrun::internals::pickle::{StorageLoader, Unpickler};
use tsrun::internals::tensor::Storage;
use tsrun::DType;

fuzz_target!(|data: &[u8]| {
    let _ = tsrun::internals::pickle::unpickle_data(data, "fuzz.pkl");
    let mut load = |_: &str, dtype: DType, numel: usize| {
        let nbytes = numel.checked_mul(dtype.size()).ok_or("overflow")?;
        if nbytes > 1 << 16 {
            return Err("storage too large for the fuzzer".to_string());
        }
        Storage::zeroed(nbytes).map_err(|e| e.to_string())
    };
    let loader: &mut StorageLoader<'_> = &mut load;
    let _ = Unpickler::new(data, "data.pkl").with_storages(loader).load();
});
