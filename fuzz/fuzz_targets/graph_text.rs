//! The parser of PyTorch's IR text, then the graph printer on what it accepts.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tsrun::internals::ir::printer::{print_graph, PrintOptions};

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(g) = tsrun::internals::ir::parse_graph::parse_graph(text) {
            let _ = print_graph(&g, PrintOptions::default());
        }
    }
});
