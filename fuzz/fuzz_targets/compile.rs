//! The compiler (code to IR) on arbitrary code files: every method and function is compiled,
//! and the graph and inlined graph printed.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tsrun::internals::ir::printer::{print_graph, PrintOptions};
use tsrun::internals::ir::unit::CompilationUnit;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(file) = tsrun::internals::frontend::parse_file("code/__torch__/fuzz.py", text) else {
        return;
    };
    let Ok(unit) = CompilationUnit::from_files(&[file], Vec::new()) else {
        return;
    };
    let mut compiled = Vec::new();
    for class in unit.class_names() {
        let methods = unit.class(&class).map(|c| c.method_names()).unwrap_or_default();
        for m in methods {
            compiled.extend(unit.method(&class, &m).ok());
        }
    }
    for f in unit.function_names() {
        compiled.extend(unit.function(&f).ok());
    }
    for f in compiled {
        let _ = print_graph(&f.graph, PrintOptions::default());
        if let Ok(g) = unit.inlined_graph(&f) {
            let _ = print_graph(&g, PrintOptions::default());
        }
    }
});
