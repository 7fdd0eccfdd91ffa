//! `tsrun code` / `tsrun graph` and the printers behind them, against PyTorch's goldens
//! (`fixtures/golden/<fixture>/printed.json`: `m.code`, `str(m.graph)`, `str(m.inlined_graph)`
//! of every method of every submodule of the loaded archive).

use std::path::Path;
use std::process::Command;

use tsrun::ir::printer::{print_graph, PrintOptions};
use tsrun::ir::python_print::function_code;
use tsrun::runtime::Module;

use crate::common::fixtures_dir;

/// `aten::warn[warn_id=N]` carries a process-wide counter: compare with N as a wildcard.
fn mask_warn_ids(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find("warn_id=") {
        out.push_str(&rest[..i + 8]);
        rest = rest[i + 8..].trim_start_matches(|c: char| c.is_ascii_digit());
        out.push('N');
    }
    out.push_str(rest);
    out
}

/// The golden printed text of `which` (`code`, `graph`, `inlined_graph`) for a method.
fn golden_text(fixture: &str, path: &str, method: &str, which: &str) -> Option<String> {
    let text = std::fs::read_to_string(
        fixtures_dir()
            .join("golden")
            .join(fixture)
            .join("printed.json"),
    )
    .ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    json.get(path)?
        .get(method)?
        .get(which)?
        .as_str()
        .map(str::to_string)
}

fn first_difference(ours: &str, theirs: &str) -> String {
    ours.lines()
        .zip(theirs.lines())
        .find(|(a, b)| a != b)
        .map(|(a, b)| format!("\n    ours:    {a}\n    pytorch: {b}"))
        .unwrap_or_else(|| "\n    (one is a prefix of the other)".to_string())
}

#[derive(Default)]
struct Tally {
    total: usize,
    same: usize,
    differing: Vec<String>,
}

impl Tally {
    fn check(&mut self, label: &str, ours: Result<String, String>, theirs: &str) {
        self.total += 1;
        match ours {
            Ok(o) if mask_warn_ids(&o) == mask_warn_ids(theirs) => self.same += 1,
            Ok(o) => self
                .differing
                .push(format!("{label}{}", first_difference(&o, theirs))),
            Err(e) => self.differing.push(format!("{label}: {e}")),
        }
    }
}

/// Every method's code, graph and inlined graph as tsrun compiles and prints them, compared
/// with PyTorch's. Byte-for-byte equality needs the emitter to reproduce PyTorch's value
/// creation order (printed `%N` numbers), its passes (constant hoisting, dead code), and the
/// original Python source locations from `debug_pkl`; the tallies below are ratchets: they
/// may only go up.
#[test]
fn compiled_methods_print_like_pytorch() {
    let golden_root = fixtures_dir().join("golden");
    let mut fixtures: Vec<_> = std::fs::read_dir(&golden_root)
        .expect("fixtures/golden")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| golden_root.join(n).join("printed.json").exists())
        .collect();
    fixtures.sort();
    let (mut code, mut graph, mut inlined) = (Tally::default(), Tally::default(), Tally::default());
    for fixture in &fixtures {
        let archive = fixtures_dir().join("models").join(format!("{fixture}.pt"));
        let Ok(root) = Module::load(&archive) else {
            continue;
        };
        let text = std::fs::read_to_string(golden_root.join(fixture).join("printed.json"))
            .expect("printed.json");
        let json: serde_json::Value = serde_json::from_str(&text).expect("printed.json is JSON");
        for (path, methods) in json.as_object().into_iter().flatten() {
            for (method, printed) in methods.as_object().into_iter().flatten() {
                let label = format!("{fixture} [{path}] {method}");
                let compiled = root
                    .get_submodule(path)
                    .and_then(|m| {
                        let unit = m.compilation_unit()?;
                        let f = unit.method(m.class_name(), method)?;
                        Ok((unit, f))
                    })
                    .map_err(|e| e.to_string());
                if let Some(want) = printed.get("code").and_then(|c| c.as_str()) {
                    let ours = compiled.as_ref().map_err(Clone::clone).and_then(|(_, f)| {
                        function_code(f, true)
                            .map(|p| p.code)
                            .map_err(|e| e.to_string())
                    });
                    code.check(&label, ours, want);
                }
                if let Some(want) = printed.get("graph").and_then(|c| c.as_str()) {
                    let ours = compiled
                        .as_ref()
                        .map_err(Clone::clone)
                        .map(|(_, f)| print_graph(&f.graph, PrintOptions::default()));
                    graph.check(&label, ours, want);
                }
                if let Some(want) = printed.get("inlined_graph").and_then(|c| c.as_str()) {
                    let ours = compiled.as_ref().map_err(Clone::clone).and_then(|(u, f)| {
                        u.inlined_graph(f)
                            .map(|g| print_graph(&g, PrintOptions::default()))
                            .map_err(|e| e.to_string())
                    });
                    inlined.check(&label, ours, want);
                }
            }
        }
    }
    for (name, t) in [
        ("code", &code),
        ("graph", &graph),
        ("inlined_graph", &inlined),
    ] {
        println!(
            "{name}: {}/{} methods print identically to PyTorch",
            t.same, t.total
        );
    }
    for (name, t) in [
        ("code", &code),
        ("graph", &graph),
        ("inlined_graph", &inlined),
    ] {
        for d in &t.differing {
            println!("[{name}] {d}");
        }
    }
    assert!(code.total > 0 && graph.total > 0 && inlined.total > 0);
    assert!(
        code.same >= CODE_FLOOR,
        "code: {} < {CODE_FLOOR}",
        code.same
    );
    assert!(
        graph.same >= GRAPH_FLOOR,
        "graph: {} < {GRAPH_FLOOR}",
        graph.same
    );
    assert!(
        inlined.same >= INLINED_FLOOR,
        "inlined_graph: {} < {INLINED_FLOOR}",
        inlined.same
    );
}

const CODE_FLOOR: usize = 0;
const GRAPH_FLOOR: usize = 0;
const INLINED_FLOOR: usize = 0;

fn tsrun(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_tsrun"))
        .args(args)
        .output()
        .expect("run tsrun");
    assert!(
        out.status.success(),
        "tsrun {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

fn archive(fixture: &str) -> String {
    let p = fixtures_dir().join("models").join(format!("{fixture}.pt"));
    assert!(Path::new(&p).exists(), "{}", p.display());
    p.to_string_lossy().into_owned()
}
