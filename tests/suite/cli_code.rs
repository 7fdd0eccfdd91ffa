//! `tsrun code` / `tsrun graph` and the printers behind them, against PyTorch's goldens
//! (`fixtures/golden/<fixture>/printed.json`: `m.code`, `str(m.graph)`, `str(m.inlined_graph)`
//! of every method of every submodule of the loaded archive).

use std::path::Path;
use std::process::Command;

use tsrun::internals::ir::printer::{print_graph, PrintOptions};
use tsrun::internals::ir::python_print::function_code;
use tsrun::internals::runtime::Module;

use crate::common::{compiled_method, fixtures_dir, mask_warn_ids, printed_goldens};

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

/// Graph text without the trailing `# file:line:col` comments.
fn strip_source_comments(text: &str) -> String {
    text.lines()
        .map(|l| match l.rfind(" # ") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
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
/// original Python source locations from `debug_pkl`; the code tally is a ratchet (it may
/// only go up).
#[test]
fn compiled_methods_print_like_pytorch() {
    let (mut code, mut graph, mut inlined) = (Tally::default(), Tally::default(), Tally::default());
    let (mut graph_bare, mut inlined_bare) = (Tally::default(), Tally::default());
    for (fixture, root, json) in &printed_goldens() {
        for (path, methods) in json.as_object().into_iter().flatten() {
            for (method, printed) in methods.as_object().into_iter().flatten() {
                let label = format!("{fixture} [{path}] {method}");
                let compiled = compiled_method(root, path, method);
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
                    graph_bare.check(
                        &label,
                        ours.clone().map(|o| strip_source_comments(&o)),
                        &strip_source_comments(want),
                    );
                    graph.check(&label, ours, want);
                }
                if let Some(want) = printed.get("inlined_graph").and_then(|c| c.as_str()) {
                    let ours = compiled.as_ref().map_err(Clone::clone).and_then(|(u, f)| {
                        u.inlined_graph(f)
                            .map(|g| print_graph(&g, PrintOptions::default()))
                            .map_err(|e| e.to_string())
                    });
                    inlined_bare.check(
                        &label,
                        ours.clone().map(|o| strip_source_comments(&o)),
                        &strip_source_comments(want),
                    );
                    inlined.check(&label, ours, want);
                }
            }
        }
    }
    let tallies = [
        ("code", &code),
        ("graph", &graph),
        ("inlined_graph", &inlined),
        ("graph without source comments", &graph_bare),
        ("inlined_graph without source comments", &inlined_bare),
    ];
    for (name, t) in tallies {
        println!(
            "{name}: {}/{} methods print identically to PyTorch",
            t.same, t.total
        );
    }
    for (name, t) in [
        ("code", &code),
        ("graph", &graph_bare),
        ("inlined_graph", &inlined_bare),
    ] {
        for d in &t.differing {
            println!("[{name}] {d}");
        }
    }
    assert!(code.total > 0 && graph.total > 0 && inlined.total > 0);
    // Every method prints exactly as PyTorch: `code`, and `graph` / `inlined_graph` with their
    // `%N` numbers (PyTorch counts every value its emitter and passes created, so the
    // emitter replays them) and their source comments (from debug_pkl).
    for (name, t) in tallies {
        assert_eq!(
            t.same,
            t.total,
            "{name}: {} methods differ, first: {:?}",
            t.differing.len(),
            t.differing.first()
        );
    }
}

/// `tsrun code` prints `m.code` of the root and of a submodule's method byte for byte.
#[test]
fn tsrun_code_prints_golden_code() {
    for (fixture, submodule, method) in [
        ("mlp", "", "forward"),
        ("batchnorm_training", "bn", "_check_input_dim"),
    ] {
        let path = archive(fixture);
        let mut args = vec!["code", path.as_str()];
        if !submodule.is_empty() {
            args.extend(["--submodule", submodule]);
        }
        args.extend(["--method", method]);
        let want = golden_text(fixture, submodule, method, "code").expect("golden code");
        assert_eq!(tsrun(&args), want, "tsrun {args:?}");
    }
}

/// `tsrun graph` prints the compiled graph (and with `--inlined` the inlined graph) as the
/// library's printer does, with the node sequence of PyTorch's graph.
#[test]
fn tsrun_graph_prints_the_compiled_graph() {
    let path = archive("mlp");
    let module = Module::load(&path).expect("load");
    let unit = module.compilation_unit().expect("unit");
    let f = unit
        .method(module.class_name(), "forward")
        .expect("forward");
    let ours = tsrun(&["graph", &path]);
    assert_eq!(ours, print_graph(&f.graph, PrintOptions::default()));
    let inlined = tsrun(&["graph", &path, "--inlined"]);
    let g = unit.inlined_graph(&f).expect("inlined");
    assert_eq!(inlined, print_graph(&g, PrintOptions::default()));
    let kinds = |text: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| l.split_once(" = ").map(|(_, r)| r))
            .map(|r| r.split(['(', '[']).next().unwrap_or("").to_string())
            .filter(|k| k != "prim::Constant")
            .collect()
    };
    let want = golden_text("mlp", "", "forward", "graph").expect("golden graph");
    assert_eq!(kinds(&ours), kinds(&want));
    let no_loc = tsrun(&["graph", &path, "--no-source-locations"]);
    assert!(!no_loc.lines().take(3).any(|l| l.contains(" # ")));
}

/// Unknown submodules and methods are reported, not printed as something else.
#[test]
fn tsrun_code_reports_unknown_methods() {
    let path = archive("mlp");
    let out = Command::new(env!("CARGO_BIN_EXE_tsrun"))
        .args(["code", &path, "--method", "no_such_method"])
        .output()
        .expect("run tsrun");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no_such_method"));
}

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

/// `code_with_constants` for every method: the code, and the `CONSTANTS.cN` tensors it
/// references in order (dtype, shape and a hash of the values, as the golden records them).
#[test]
fn code_with_constants_match_pytorch() {
    let (mut total, mut with_constants, mut differing) = (0, 0, Vec::new());
    for (fixture, root, json) in &printed_goldens() {
        for (path, methods) in json.as_object().into_iter().flatten() {
            for (method, printed) in methods.as_object().into_iter().flatten() {
                let Some(want) = printed.get("code_with_constants") else {
                    continue;
                };
                total += 1;
                let label = format!("{fixture} [{path}] {method}");
                let printed = compiled_method(root, path, method)
                    .and_then(|(_, f)| function_code(&f, true).map_err(|e| e.to_string()));
                let printed = match printed {
                    Ok(p) => p,
                    Err(e) => {
                        differing.push(format!("{label}: {e}"));
                        continue;
                    }
                };
                let constants: serde_json::Map<String, serde_json::Value> = printed
                    .constants
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        let summary = match c {
                            tsrun::internals::values::IValue::Tensor(t) => serde_json::json!({
                                "dtype": t.dtype().name(),
                                "shape": t.shape(),
                                "fnv1a64": crate::load_common::fnv1a64(
                                    &crate::load_common::tensor_bytes(t)
                                ),
                            }),
                            tsrun::internals::values::IValue::String(s) => {
                                serde_json::json!({"str": s.to_string()})
                            }
                            other => serde_json::json!(format!("{other:?}")),
                        };
                        (format!("c{i}"), summary)
                    })
                    .collect();
                if !constants.is_empty() {
                    with_constants += 1;
                }
                let got = serde_json::json!({"code": printed.code, "constants": constants});
                if &got != want {
                    differing.push(format!("{label}: ours {got}\n  pytorch {want}"));
                }
            }
        }
    }
    println!(
        "code_with_constants: {}/{total} methods identical ({with_constants} with tensor \
         constants)",
        total - differing.len()
    );
    assert!(total > 0 && with_constants > 0);
    assert!(differing.is_empty(), "{}", differing.join("\n"));
}
