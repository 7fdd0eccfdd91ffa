//! The graph printer and the IR text parser against PyTorch's `str(graph)` goldens:
//! `print(parse(text)) == text` for every method's graph and inlined graph.

use crate::common::mask_warn_ids;
use std::path::Path;

use tsrun::internals::ir::parse_graph::parse_graph;
use tsrun::internals::ir::printer::{print_graph, PrintOptions};

/// (golden name, module path, method, "graph" or "inlined_graph", text)
type GoldenGraph = (String, String, String, &'static str, String);

/// Every printed graph in the goldens.
fn golden_graphs() -> Vec<GoldenGraph> {
    let mut dirs = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/golden")];
    // Extra golden folders for exploration, never required.
    if let Ok(extra) = std::env::var("TSRUN_EXTRA_GOLDENS") {
        dirs.extend(extra.split(':').map(std::path::PathBuf::from));
    }
    let mut out = Vec::new();
    let mut names: Vec<_> = dirs
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flat_map(|entries| entries.flatten().map(|e| e.path()))
        .collect();
    names.sort();
    for gdir in names {
        let Ok(text) = std::fs::read_to_string(gdir.join("printed.json")) else {
            continue;
        };
        let json: serde_json::Value = serde_json::from_str(&text).expect("printed.json is JSON");
        let name = gdir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let Some(modules) = json.as_object() else {
            continue;
        };
        for (path, methods) in modules {
            let Some(methods) = methods.as_object() else {
                continue;
            };
            for (method, printed) in methods {
                for which in ["graph", "inlined_graph"] {
                    if let Some(g) = printed.get(which).and_then(|g| g.as_str()) {
                        out.push((
                            name.clone(),
                            path.clone(),
                            method.clone(),
                            which,
                            g.to_string(),
                        ));
                    }
                }
            }
        }
    }
    out
}

#[test]
fn golden_graphs_round_trip_through_parser_and_printer() {
    let graphs = golden_graphs();
    assert!(
        !graphs.is_empty(),
        "no golden graphs under fixtures/golden/*/printed.json (merge main for the fixtures)"
    );
    let mut failures = Vec::new();
    for (name, path, method, which, text) in &graphs {
        let label = format!("{name} [{path}] {method} {which}");
        match parse_graph(text) {
            Err(e) => failures.push(format!("{label}: parse error: {e}")),
            Ok(g) => {
                let printed = print_graph(&g, PrintOptions::default());
                if mask_warn_ids(&printed) != mask_warn_ids(text) {
                    let first_diff = printed
                        .lines()
                        .zip(text.lines())
                        .find(|(a, b)| a != b)
                        .map(|(a, b)| format!("\n    ours:    {a}\n    pytorch: {b}"))
                        .unwrap_or_default();
                    failures.push(format!("{label}: printed text differs{first_diff}"));
                }
            }
        }
    }
    println!(
        "graph round trip: {}/{} golden graphs identical",
        graphs.len() - failures.len(),
        graphs.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Expected text observed from PyTorch 2.15 `graph.str(False)`: top-level comments go, nested
/// nodes keep theirs (Node::print recurses with default options).
#[test]
fn printing_without_source_locations_drops_top_level_comments() {
    let with = "graph(%n.1 : int):\n  %22 : int = prim::Constant[value=1]() # g2.py:24:17\n  %76 : int = prim::Constant[value=0]() # g2.py:23:18\n  %77 : bool = aten::gt(%n.1, %76) # g2.py:23:14\n  %78 : int = prim::Constant[value=9223372036854775807]() # g2.py:23:8\n  %n0 : int = prim::Loop(%78, %77, %n.1) # g2.py:23:8\n    block0(%81 : int, %n0.5 : int):\n      %n1.1 : int = aten::sub(%n0.5, %22) # g2.py:24:12\n      %85 : bool = aten::gt(%n1.1, %76) # g2.py:23:14\n      -> (%85, %n1.1)\n  return (%n0)\n";
    let without = "graph(%n.1 : int):\n  %22 : int = prim::Constant[value=1]()\n  %76 : int = prim::Constant[value=0]()\n  %77 : bool = aten::gt(%n.1, %76)\n  %78 : int = prim::Constant[value=9223372036854775807]()\n  %n0 : int = prim::Loop(%78, %77, %n.1)\n    block0(%81 : int, %n0.5 : int):\n      %n1.1 : int = aten::sub(%n0.5, %22) # g2.py:24:12\n      %85 : bool = aten::gt(%n1.1, %76) # g2.py:23:14\n      -> (%85, %n1.1)\n  return (%n0)\n";
    let g = parse_graph(with).expect("parses");
    assert_eq!(print_graph(&g, PrintOptions::default()), with);
    assert_eq!(
        print_graph(
            &g,
            PrintOptions {
                source_locations: false
            }
        ),
        without
    );
}
