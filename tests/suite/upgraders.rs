//! PyTorch's operator upgraders: archives whose file format version predates an operator's
//! change load as PyTorch loads them (fixtures/gen_upgraders.py): the upgraders compile to
//! PyTorch's graphs, and old archives print (`code`, `graph`, `inlined_graph`) and compute
//! (integer division truncating, `full` of an integer making floats, `linspace` without
//! `steps` giving 100 points, ...) as PyTorch does.

use crate::common::{compare, decode, decode_all, fixtures_dir, Arrays};
use serde_json::Value;
use tsrun::internals::ir::printer::{print_graph, PrintOptions};
use tsrun::internals::ir::python_print::function_code;
use tsrun::internals::ir::unit::upgrader_graph;
use tsrun::internals::runtime::Module;

fn cases() -> Vec<Value> {
    let text = std::fs::read_to_string(fixtures_dir().join("upgraders/cases.json"))
        .expect("fixtures/upgraders/cases.json");
    let json: Value = serde_json::from_str(&text).expect("cases.json is JSON");
    json["cases"].as_array().expect("cases").clone()
}

/// The first differing line of two texts, for a readable failure.
fn first_difference(got: &str, want: &str) -> String {
    let (g, w): (Vec<&str>, Vec<&str>) = (got.lines().collect(), want.lines().collect());
    (0..g.len().max(w.len()))
        .find(|&i| g.get(i) != w.get(i))
        .map(|i| {
            format!(
                "line {}:\n    ours:    {}\n    pytorch: {}",
                i + 1,
                g.get(i).unwrap_or(&"<none>"),
                w.get(i).unwrap_or(&"<none>")
            )
        })
        .unwrap_or_default()
}

/// A graph's text with its unnamed values renumbered in order of appearance (`%v0`, `%v1`,
/// ...): an upgrader's own numbers never show, since inlining numbers its copy afresh in the
/// caller, while its structure, names, types and source ranges do.
fn renumbered(text: &str) -> String {
    let mut numbers: Vec<String> = Vec::new();
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..=i]);
        rest = &rest[i + 1..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let named = rest[digits..].starts_with(|c: char| c.is_alphanumeric() || c == '_');
        if digits == 0 || named {
            continue;
        }
        let n = rest[..digits].to_string();
        let k = numbers.iter().position(|m| *m == n).unwrap_or_else(|| {
            numbers.push(n);
            numbers.len() - 1
        });
        out.push_str(&format!("v{k}"));
        rest = &rest[digits..];
    }
    out.push_str(rest);
    out
}

#[test]
fn upgraders_compile_to_pytorchs_graphs() {
    let text = std::fs::read_to_string(fixtures_dir().join("upgraders/graphs.json"))
        .expect("fixtures/upgraders/graphs.json");
    let json: Value = serde_json::from_str(&text).expect("graphs.json is JSON");
    let graphs = json.as_object().expect("an object of graphs");
    assert!(graphs.len() >= 18, "{} upgrader graphs", graphs.len());
    let mut failures = Vec::new();
    for (name, want) in graphs {
        let want = want.as_str().expect("graph text");
        match upgrader_graph(name) {
            Err(e) => failures.push(format!("{name}: {e}")),
            Ok(g) => {
                let got = renumbered(&print_graph(&g, PrintOptions::default()));
                let want = renumbered(want);
                if got != want {
                    failures.push(format!("{name}: {}", first_difference(&got, &want)));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn old_archives_print_as_pytorch() {
    let mut failures = Vec::new();
    for case in cases() {
        let name = case["name"].as_str().expect("name");
        let module = Module::load(fixtures_dir().join(format!("upgraders/{name}.pt")))
            .expect("load the archive");
        let unit = module.compilation_unit().expect("compilation unit");
        let forward = match unit.method(module.class_name(), "forward") {
            Ok(f) => f,
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        let code = function_code(&forward, true)
            .map(|p| p.code)
            .unwrap_or_else(|e| e.to_string());
        let graph = print_graph(&forward.graph, PrintOptions::default());
        let inlined = unit
            .inlined_graph(&forward)
            .map(|g| print_graph(&g, PrintOptions::default()))
            .unwrap_or_else(|e| e.to_string());
        for (which, got) in [("code", code), ("graph", graph), ("inlined_graph", inlined)] {
            let want = case[which].as_str().expect("printed golden");
            if got != want {
                failures.push(format!("{name} {which}: {}", first_difference(&got, want)));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn old_archives_compute_as_pytorch() {
    let mut arrays = Arrays::open(&fixtures_dir().join("upgraders/cases.npz"));
    let mut failures = Vec::new();
    let mut runs = 0;
    for case in cases() {
        let name = case["name"].as_str().expect("name");
        let module = Module::load(fixtures_dir().join(format!("upgraders/{name}.pt")))
            .expect("load the archive");
        for (i, run) in case["runs"].as_array().expect("runs").iter().enumerate() {
            runs += 1;
            let inputs = decode_all(&run["inputs"], &mut arrays);
            let want = decode(&run["out"], &mut arrays);
            match module.forward(&inputs) {
                Err(e) => failures.push(format!("{name} run {i}: {e}")),
                Ok(got) => {
                    // integer results (truncating division) exactly; floats within a few
                    // ulp (tsrun's linspace and gelu kernels round 1-2 ulp from ATen's)
                    if let Err(e) = compare(&got, &want, 1e-6, 0.0, &format!("{name} run {i}")) {
                        failures.push(e);
                    }
                }
            }
        }
    }
    assert_eq!(runs, 16, "{runs} runs");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
