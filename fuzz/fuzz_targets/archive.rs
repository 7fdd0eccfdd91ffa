//! The archive loader on arbitrary bytes: open, unpickle the module, parse its code.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tsrun::internals::runtime::Module;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = Module::load_bytes(data) {
        let _ = m.program();
        let _ = m.state_dict();
    }
});
