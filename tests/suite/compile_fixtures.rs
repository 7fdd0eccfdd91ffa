//! Compiling archive code to graphs: every method of every fixture archive compiles, and
//! unsupported constructs fail with a located error.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use tsrun::internals::frontend;
use tsrun::internals::ir::graph::BlockId;
use tsrun::internals::ir::unit::CompilationUnit;
use tsrun::internals::ir::{CompileError, Graph};
use tsrun::internals::runtime::Module;

/// Archives to compile: every `.pt` under fixtures/, plus those under `$TSRUN_EXTRA_ARCHIVES`.
fn archives() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            // fixtures/custom_op calls operators that exist only once a test registers them
            // (tests/suite/custom_op.rs compiles it); fixtures/compile_errors fail to compile
            // on purpose (tests/suite/cli_errors.rs)
            if p.is_dir()
                && p.file_name()
                    .is_some_and(|n| n == "custom_op" || n == "compile_errors")
            {
                continue;
            }
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "pt") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures"),
        &mut out,
    );
    if let Ok(extra) = std::env::var("TSRUN_EXTRA_ARCHIVES") {
        walk(Path::new(&extra), &mut out);
    }
    out.sort();
    out
}

/// The archive's compilation unit as a loaded module has it (tensor constants bound).
fn unit_of(path: &Path) -> Result<Arc<CompilationUnit>, String> {
    let module = Module::load(path).map_err(|e| e.to_string())?;
    module.compilation_unit().map_err(|e| e.to_string())
}

fn node_count(g: &Graph) -> usize {
    let mut n = 0;
    g.walk(g.root, &mut |_| n += 1);
    n
}

#[test]
fn every_fixture_method_compiles() {
    let mut compiled = 0;
    let mut failures = Vec::new();
    for path in archives() {
        let unit = match unit_of(&path) {
            Ok(u) => u,
            Err(e) => {
                failures.push(format!("{}: {e}", path.display()));
                continue;
            }
        };
        for class in unit.class_names() {
            let Some(info) = unit.class(&class) else {
                continue;
            };
            for m in info.method_names() {
                match unit.method(&class, &m) {
                    Ok(f) => {
                        assert!(node_count(&f.graph) > 0 || f.graph.outputs().len() == 1);
                        match unit.inlined_graph(&f) {
                            Ok(_) => compiled += 1,
                            Err(e) => failures
                                .push(format!("{}: inlining {class}.{m}: {e}", path.display())),
                        }
                    }
                    Err(e) => failures.push(format!("{}: {class}.{m}: {e}", path.display())),
                }
            }
        }
        for f in unit.function_names() {
            match unit.function(&f) {
                Ok(_) => compiled += 1,
                Err(e) => failures.push(format!("{}: {f}: {e}", path.display())),
            }
        }
    }
    println!(
        "compiled {compiled} methods/functions, {} failed",
        failures.len()
    );
    for f in &failures {
        println!("  {f}");
    }
    assert!(
        failures.is_empty(),
        "{} methods failed to compile",
        failures.len()
    );
}

fn compile_source(code: &str) -> Result<Vec<String>, CompileError> {
    let file = frontend::parse_file("code/__torch__.py", code).expect("parse");
    let unit = CompilationUnit::from_files(&[file], Vec::new())?;
    let f = unit.method("__torch__.M", "forward")?;
    let mut kinds = Vec::new();
    f.graph.walk(f.graph.root, &mut |n| {
        kinds.push(f.graph.node(n).qualified_op())
    });
    Ok(kinds)
}

#[test]
fn unsupported_constructs_report_their_location() {
    let code = "class M(Module):\n  __parameters__ = []\n  __buffers__ = []\n  training : bool\n  def forward(self: __torch__.M,\n    x: Tensor) -> Tensor:\n    y = [i for i in range(3)]\n    return x\n";
    let err = compile_source(code)
        .expect_err("comprehensions are unsupported")
        .to_string();
    assert!(err.contains("code/__torch__.py:7:"), "{err}");
    assert!(err.contains("comprehension"), "{err}");

    let code = "class M(Module):\n  __parameters__ = []\n  __buffers__ = []\n  training : bool\n  def forward(self: __torch__.M,\n    x: Tensor) -> Tensor:\n    return torch.no_such_op(x)\n";
    let err = compile_source(code)
        .expect_err("unknown operator")
        .to_string();
    assert!(err.contains("code/__torch__.py:7:"), "{err}");
    assert!(err.contains("aten::no_such_op"), "{err}");
}

#[test]
fn overloads_resolve_like_pytorch() {
    // The overloads PyTorch 2.15 picks for this code (`node.schema()` of the scripted graph).
    let code = "class M(Module):\n  __parameters__ = []\n  __buffers__ = []\n  training : bool\n  def forward(self: __torch__.M,\n    x: Tensor,\n    n: int) -> Tensor:\n    m = torch.add(n, 1)\n    y = torch.add(x, m)\n    z = torch.max_pool2d(y, 2)\n    return torch.add(z, y)\n";
    let kinds = compile_source(code).expect("compiles");
    let ops: Vec<&str> = kinds
        .iter()
        .map(String::as_str)
        .filter(|k| !k.starts_with("prim::"))
        .collect();
    assert_eq!(
        ops,
        [
            "aten::add.int",
            "aten::add.Scalar",
            "aten::max_pool2d",
            "aten::add.Tensor"
        ]
    );
}

/// Node kinds of a printed graph, in print order (nested blocks inline).
fn printed_kinds(text: &str) -> Vec<String> {
    let mut kinds = Vec::new();
    for line in text.lines().skip(1) {
        let l = line.trim_start();
        if l.starts_with("block")
            || l.starts_with("->")
            || l.starts_with("return")
            || l.starts_with('%') && !l.contains(" = ")
        {
            continue;
        }
        // `%out : T = kind(...)`, or `= kind(...)` for a node without outputs
        let rest = match l.split_once(" = ") {
            Some((_, r)) if l.starts_with('%') => r,
            _ => l.strip_prefix("= ").unwrap_or(l),
        };
        let kind: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == ':' || *c == '_')
            .collect();
        if kind.contains("::") {
            kinds.push(kind);
        }
    }
    kinds
}

/// Node kinds in `str(graph)` order: a `prim::fork` prints as `prim::fork_N`, its subgraph's
/// nodes after the graph's.
fn graph_kinds(g: &Graph) -> Vec<String> {
    fn block_kinds(g: &Graph, b: BlockId, kinds: &mut Vec<String>, forks: &mut Vec<BlockId>) {
        for &n in &g.block(b).nodes {
            let node = g.node(n);
            if node.kind == "prim::fork" {
                kinds.push(format!("prim::fork_{}", forks.len()));
                forks.extend(node.blocks.first().copied());
                continue;
            }
            kinds.push(node.kind.clone());
            for &nb in &node.blocks {
                block_kinds(g, nb, kinds, forks);
            }
        }
    }
    fn subgraph_kinds(g: &Graph, root: BlockId, kinds: &mut Vec<String>) {
        let mut forks = Vec::new();
        block_kinds(g, root, kinds, &mut forks);
        for f in forks {
            subgraph_kinds(g, f, kinds);
        }
    }
    let mut kinds = Vec::new();
    subgraph_kinds(g, g.root, &mut kinds);
    kinds
}

/// The class a printed graph belongs to: the type of its `self` input.
fn printed_self_class(text: &str) -> Option<String> {
    let first = text.lines().next()?;
    let (_, rest) = first.split_once(" : ")?;
    Some(
        rest.trim_end_matches([',', ':'])
            .trim_end_matches(')')
            .to_string(),
    )
}

#[test]
fn graphs_match_pytorch_node_sequences() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let (mut checked, mut matched, mut inlined_matched) = (0, 0, 0);
    let mut mismatches = Vec::new();
    for path in archives() {
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        let golden = root.join("golden").join(stem).join("printed.json");
        let Ok(text) = std::fs::read_to_string(&golden) else {
            continue;
        };
        let printed: serde_json::Value = serde_json::from_str(&text).expect("printed.json");
        let unit = unit_of(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let Some(modules) = printed.as_object() else {
            continue;
        };
        for methods in modules.values() {
            let Some(methods) = methods.as_object() else {
                continue;
            };
            for (name, m) in methods {
                let Some(graph_text) = m.get("graph").and_then(|g| g.as_str()) else {
                    continue;
                };
                let Some(class) = printed_self_class(graph_text) else {
                    continue;
                };
                checked += 1;
                let f = match unit.method(&class, name) {
                    Ok(f) => f,
                    Err(e) => {
                        mismatches.push(format!("{stem} {class}.{name}: {e}"));
                        continue;
                    }
                };
                let strip = |v: Vec<String>| -> Vec<String> {
                    v.into_iter().filter(|k| k != "prim::Constant").collect()
                };
                let want = strip(printed_kinds(graph_text));
                let got = strip(graph_kinds(&f.graph));
                if want == got {
                    matched += 1;
                } else {
                    mismatches.push(format!(
                        "{stem} {class}.{name}:\n    want {want:?}\n    got  {got:?}"
                    ));
                }
                if let (Some(inl), Ok(g)) = (
                    m.get("inlined_graph").and_then(|g| g.as_str()),
                    unit.inlined_graph(&f),
                ) {
                    if strip(printed_kinds(inl)) == strip(graph_kinds(&g)) {
                        inlined_matched += 1;
                    }
                }
            }
        }
    }
    println!(
        "{checked} golden graphs: {matched} node sequences match, {inlined_matched} inlined match"
    );
    for m in &mismatches {
        println!("  {m}");
    }
    assert!(mismatches.is_empty(), "{} graphs differ", mismatches.len());
    // Inlined graphs: callee bodies are optimized as PyTorch's `preoptimizeGraph` does
    // (peephole, constant propagation, pooling) before they are inlined; all 1236 match.
    assert!(
        inlined_matched >= INLINED_FLOOR,
        "inlined node sequences: {inlined_matched} < {INLINED_FLOOR}"
    );
}

const INLINED_FLOOR: usize = 1236;
