//! The layering rule of ARCHITECTURE.md, checked on the source: every `.rs` file under `src/`
//! belongs to a layer and a module (`src/ir/emit/expr.rs` is layer `ir`, module `ir::emit`;
//! `src/ir/unit.rs` is `ir::unit`; a layer's own `mod.rs` is the layer's facade module `ir`), and
//! every path it names (`use crate::...` trees, `super::` / `self::` / child-module `use`s, and
//! `crate::...` / `super::...` paths anywhere in code, comments and strings excluded) must lead to
//! the same or a lower layer, with no cycle between modules.
//!
//! Paths through the crate root (`crate::Result`, `crate::IValue`, `crate::dispatch_all!`) are
//! followed to where the root re-exports them from (`lib.rs`'s `pub use`, `#[macro_export]`
//! macros); paths through a layer's facade (`crate::ir::Graph`) to the submodule its `mod.rs`
//! re-exports them from when it does, else to the facade itself.
//!
//! The one declared exception: `error.rs` (bottom layer) names the error enums of the layers
//! above it, because the crate-wide `Error` wraps each of them (see [`ERROR_EXCEPTIONS`]).
//! Edges into or out of a layer's facade module are left out of the cycle check: the facade
//! declares and re-exports the submodules, and the items it defines itself (the layer's error
//! enum, shared constants) are used by all of them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

/// The declared layers, lowest first; names in one entry are peers (they may import each other,
/// cycles aside). `root` is the crate root (`lib.rs`, `internals.rs`, `prelude.rs`).
const LAYERS: &[&[&str]] = &[
    &["error"],
    &["tensor"],
    &["values"],
    &["archive"],
    &["pickle"],
    &["frontend"],
    &["ops"],
    &["ir"],
    &["runtime"],
    &["golden"],
    &["cli", "serve"],
    &["root"],
];

/// Upward paths `error.rs` may name: the error types `crate::Error` wraps.
const ERROR_EXCEPTIONS: &[&str] = &[
    "archive::ArchiveError",
    "frontend::ParseError",
    "ir::CompileError",
    "pickle::PickleError",
    "tensor::TensorError",
    "tensor::RankRequirement",
    "tensor::Int8BinaryCheck",
    "tensor::AllocError",
    "ops::schema::SchemaError",
    "golden::GoldenError",
    "tensor::budget::LimitExceeded",
];

fn rank(layer: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&layer))
}

/// Code with comments removed and string / char literal contents blanked.
fn strip(src: &str) -> String {
    let b: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && (i == 0 || !(b[i - 1].is_alphanumeric() || b[i - 1] == '_'))
        {
            // raw string r"..." / r#"..."#
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == '"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' {
            // a char literal ('x', '\n', '\u{..}') or a lifetime ('a)
            if next == Some('\\') {
                i += 3;
                while i < b.len() && b[i] != '\'' {
                    i += 1;
                }
                i += 1;
                out.push_str("' '");
            } else if b.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// The module path of a file: `src/ir/emit/expr.rs` -> `[ir, emit, expr]`,
/// `src/ir/emit/mod.rs` -> `[ir, emit]`, `src/lib.rs` -> `[]`.
fn file_module(path: &str) -> Vec<String> {
    let rel = path.trim_start_matches("src/").trim_end_matches(".rs");
    let mut segs: Vec<String> = rel.split('/').map(str::to_string).collect();
    if matches!(
        segs.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        segs.pop();
    }
    if segs.first().map(String::as_str) == Some("bin") {
        return vec!["bin".into()];
    }
    segs
}

/// Expand a `use` tree (`a::{b, c::{d as e}, self}`) into full paths.
fn expand_use(tree: &str) -> Vec<Vec<String>> {
    fn split_top(s: &str) -> Vec<&str> {
        let mut parts = Vec::new();
        let mut depth = 0;
        let mut start = 0;
        for (i, c) in s.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(&s[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        parts.push(&s[start..]);
        parts
    }
    fn go(prefix: &[String], tree: &str, out: &mut Vec<Vec<String>>) {
        let tree = tree.trim();
        if tree.is_empty() {
            return;
        }
        if let Some(brace) = tree.find('{') {
            let head = tree[..brace].trim().trim_end_matches("::");
            let mut p = prefix.to_vec();
            p.extend(
                head.split("::")
                    .filter(|s| !s.is_empty())
                    .map(str::to_string),
            );
            let inner = &tree[brace + 1..tree.rfind('}').unwrap_or(tree.len())];
            for part in split_top(inner) {
                go(&p, part, out);
            }
        } else {
            let tree = tree.split(" as ").next().unwrap_or(tree).trim();
            let mut p = prefix.to_vec();
            for s in tree.split("::") {
                let s = s.trim();
                if s == "self" && !p.is_empty() {
                    continue;
                }
                if s != "*" && !s.is_empty() {
                    p.push(s.to_string());
                }
            }
            out.push(p);
        }
    }
    let mut out = Vec::new();
    go(&[], tree, &mut out);
    out
}

/// One file's paths into the crate, absolute (`[ir, emit, builder, constant_type]`), each
/// with whether it comes from a `pub use` (a re-export).
fn crate_paths(
    module: &[String],
    is_dir_module: bool,
    code: &str,
    exists: &dyn Fn(&[String]) -> bool,
) -> Vec<(Vec<String>, bool)> {
    let resolve = |path: &[String]| -> Option<Vec<String>> {
        let first = path.first()?;
        let mut abs: Vec<String>;
        let mut rest = path;
        match first.as_str() {
            "crate" => {
                abs = Vec::new();
                rest = &path[1..];
            }
            "self" => {
                abs = module.to_vec();
                rest = &path[1..];
            }
            "super" => {
                abs = module.to_vec();
                while rest.first().map(String::as_str) == Some("super") {
                    abs.pop()?;
                    rest = &rest[1..];
                }
            }
            _ => {
                // a child module of this one (`use graph::Graph;` in ir/mod.rs), else another crate
                let mut child = module.to_vec();
                child.push(first.clone());
                if !exists(&child) {
                    return None;
                }
                abs = module.to_vec();
            }
        }
        abs.extend(rest.iter().cloned());
        if abs.first().map(String::as_str) == Some("internals") {
            abs.remove(0);
        }
        Some(abs)
    };
    let _ = is_dir_module;
    let mut out = Vec::new();
    // `use` trees (with the statement's visibility)
    let mut rest = code;
    let mut use_spans = Vec::new();
    while let Some(p) = rest.find("use ") {
        let at = code.len() - rest.len() + p;
        let before = code[..at].chars().last();
        let is_word_start = before.is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        let after = &code[at + 4..];
        if is_word_start {
            if let Some(end) = after.find(';') {
                let tree = &after[..end];
                if !tree.contains('(') && !tree.contains('=') {
                    let stmt_start = code[..at].rfind(['\n', ';', '{', '}']).map_or(0, |i| i + 1);
                    let is_pub = code[stmt_start..at].contains("pub");
                    for path in expand_use(tree) {
                        if let Some(abs) = resolve(&path) {
                            out.push((abs, is_pub));
                        }
                    }
                    use_spans.push(at..at + 4 + end);
                }
            }
        }
        rest = &code[at + 4..];
    }
    // paths in code: `crate::a::b`, `super::x`, `self::y` outside `use` statements
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        let s = &code[i..];
        let starts = ["crate::", "super::", "self::"];
        let hit = starts.iter().find(|p| s.starts_with(**p));
        let boundary = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        if let (Some(_), true) = (hit, boundary) {
            if use_spans.iter().any(|r| r.contains(&i)) {
                i += 1;
                continue;
            }
            let end = s
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(s.len());
            let path: Vec<String> = s[..end]
                .split("::")
                .filter(|x| !x.is_empty())
                .map(str::to_string)
                .collect();
            if let Some(abs) = resolve(&path) {
                out.push((abs, false));
            }
            i += end.max(1);
        } else {
            i += 1;
        }
    }
    out
}

/// Layering violations in a set of files (path under `src/`, text).
pub fn check(files: &[(String, String)]) -> Vec<String> {
    let mut problems = Vec::new();
    let modules: BTreeSet<Vec<String>> = files.iter().map(|(p, _)| file_module(p)).collect();
    let dirs: BTreeSet<Vec<String>> = files
        .iter()
        .flat_map(|(p, _)| {
            let segs: Vec<String> = p
                .trim_start_matches("src/")
                .split('/')
                .map(str::to_string)
                .collect();
            (1..segs.len()).map(move |n| segs[..n].to_vec())
        })
        .collect();
    let exists = |m: &[String]| modules.contains(m) || dirs.contains(m);
    let layer_of = |m: &[String]| -> String {
        match m.first().map(String::as_str) {
            None | Some("internals" | "prelude") => "root".to_string(),
            Some("bin") => "root".to_string(),
            Some(l) => l.to_string(),
        }
    };
    // the module (layer + first submodule) a file or path belongs to
    let unit_of = |m: &[String]| -> Vec<String> {
        if m.len() >= 2 && exists(&m[..2]) {
            m[..2].to_vec()
        } else {
            m[..m.len().min(1)].to_vec()
        }
    };

    // every file's paths, and the re-exports (`pub use`) of facades and the root
    let mut per_file = Vec::new();
    let mut reexports: HashMap<(Vec<String>, String), Vec<String>> = HashMap::new();
    for (path, text) in files {
        let module = file_module(path);
        let code = strip(text);
        let is_dir = path.ends_with("/mod.rs") || path.ends_with("lib.rs");
        let paths = crate_paths(&module, is_dir, &code, &exists);
        for (p, is_pub) in &paths {
            if *is_pub {
                if let Some(name) = p.last() {
                    reexports.insert((module.clone(), name.clone()), p.clone());
                }
            }
        }
        // `#[macro_export]` macros live at the crate root
        let mut rest = code.as_str();
        while let Some(at) = rest.find("#[macro_export]") {
            rest = &rest[at + 15..];
            if let Some(m) = rest.find("macro_rules!") {
                let name: String = rest[m + 12..]
                    .trim_start()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                reexports.insert((Vec::new(), name), module.clone());
            }
        }
        per_file.push((path.clone(), module, paths));
    }
    // follow a path through root and facade re-exports to the module it names
    let target = |abs: &[String]| -> Option<Vec<String>> {
        let mut abs = abs.to_vec();
        for _ in 0..8 {
            if abs.is_empty() {
                return Some(abs);
            }
            let first_is_module = exists(&abs[..1]);
            if !first_is_module {
                // a crate-root item: `crate::Result`, `crate::dispatch_all`
                let re = reexports.get(&(Vec::new(), abs[0].clone()))?;
                let mut next = re.clone();
                next.extend(abs[1..].iter().cloned());
                abs = next;
                continue;
            }
            if abs.len() >= 2 && !exists(&abs[..2]) {
                // `crate::ir::Graph`: through ir/mod.rs's `pub use graph::Graph`, if any
                if let Some(re) = reexports.get(&(abs[..1].to_vec(), abs[1].clone())) {
                    if re.len() >= 2 && re[0] == abs[0] && exists(&re[..2]) && re[..2] != abs[..2] {
                        let mut next = re.clone();
                        next.extend(abs[2..].iter().cloned());
                        abs = next;
                        continue;
                    }
                }
            }
            return Some(abs);
        }
        Some(abs)
    };

    let mut edges: BTreeMap<Vec<String>, BTreeMap<Vec<String>, String>> = BTreeMap::new();
    for (path, module, paths) in &per_file {
        let from_layer = layer_of(module);
        let from_unit = unit_of(module);
        let Some(from_rank) = rank(&from_layer) else {
            problems.push(format!("{path}: layer `{from_layer}` is not declared"));
            continue;
        };
        for (p, _) in paths {
            let Some(t) = target(p) else {
                problems.push(format!("{path}: cannot resolve crate::{}", p.join("::")));
                continue;
            };
            if t.is_empty() {
                continue;
            }
            let to_layer = layer_of(&t);
            let to_unit = unit_of(&t);
            let Some(to_rank) = rank(&to_layer) else {
                problems.push(format!(
                    "{path}: crate::{} is in no declared layer",
                    p.join("::")
                ));
                continue;
            };
            if from_layer == "error"
                && to_layer != "error"
                && ERROR_EXCEPTIONS.iter().any(|e| p.join("::") == *e)
            {
                continue;
            }
            if to_rank > from_rank {
                problems.push(format!(
                    "{path}: layer {from_layer} imports crate::{} from higher layer {to_layer}",
                    p.join("::")
                ));
            }
            let facade = |u: &[String]| u.len() == 1 && u[0] != "error";
            if to_unit != from_unit && !facade(&from_unit) && !facade(&to_unit) {
                edges
                    .entry(from_unit.clone())
                    .or_default()
                    .entry(to_unit.clone())
                    .or_insert_with(|| format!("{path} (crate::{})", p.join("::")));
            }
        }
    }
    // cycles: strongly connected components of more than one module
    for cycle in cycles(&edges) {
        let names: Vec<String> = cycle.iter().map(|m| m.join("::")).collect();
        let mut detail = Vec::new();
        for (i, a) in cycle.iter().enumerate() {
            for b in cycle.iter().skip(i + 1).chain(cycle.iter().take(i)) {
                if let Some(w) = edges.get(a).and_then(|e| e.get(b)) {
                    detail.push(format!("{} -> {}: {w}", a.join("::"), b.join("::")));
                }
            }
        }
        problems.push(format!(
            "module cycle between {}:\n    {}",
            names.join(", "),
            detail.join("\n    ")
        ));
    }
    problems.sort();
    problems.dedup();
    problems
}

/// Strongly connected components with more than one member (Tarjan).
fn cycles(edges: &BTreeMap<Vec<String>, BTreeMap<Vec<String>, String>>) -> Vec<Vec<Vec<String>>> {
    struct State<'a> {
        edges: &'a BTreeMap<Vec<String>, BTreeMap<Vec<String>, String>>,
        index: HashMap<Vec<String>, usize>,
        low: HashMap<Vec<String>, usize>,
        stack: Vec<Vec<String>>,
        on_stack: BTreeSet<Vec<String>>,
        out: Vec<Vec<Vec<String>>>,
    }
    fn visit(s: &mut State, v: &Vec<String>) {
        let n = s.index.len();
        s.index.insert(v.clone(), n);
        s.low.insert(v.clone(), n);
        s.stack.push(v.clone());
        s.on_stack.insert(v.clone());
        let succ: Vec<Vec<String>> = s
            .edges
            .get(v)
            .map(|e| e.keys().cloned().collect())
            .unwrap_or_default();
        for w in &succ {
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low[v];
                s.low.insert(v.clone(), lv.min(lw));
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low[v];
                s.low.insert(v.clone(), lv.min(iw));
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(&w);
                let done = &w == v;
                comp.push(w);
                if done {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = State {
        edges,
        index: HashMap::new(),
        low: HashMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    let nodes: Vec<Vec<String>> = edges.keys().cloned().collect();
    for v in &nodes {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

fn source_files() -> Vec<(String, String)> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<(String, String)>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, root, out);
            } else if p.extension().is_some_and(|e| e == "rs") {
                let rel = p
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/");
                out.push((rel, std::fs::read_to_string(&p).unwrap()));
            }
        }
    }
    // `TSRUN_LAYERING_ROOT=/some/checkout` checks another tree (an older commit, say).
    let root = std::env::var("TSRUN_LAYERING_ROOT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into());
    let root = root.as_path();
    let mut out = Vec::new();
    walk(&root.join("src"), root, &mut out);
    out
}

#[test]
fn imports_only_go_down_and_modules_form_no_cycle() {
    let files = source_files();
    assert!(files.len() > 100, "found only {} source files", files.len());
    let problems = check(&files);
    assert!(
        problems.is_empty(),
        "{} layering problem(s) (declared order, lowest first: {:?}):\n{}",
        problems.len(),
        LAYERS,
        problems.join("\n")
    );
}

fn files(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(p, t)| (p.to_string(), t.to_string()))
        .collect()
}

#[test]
fn checker_accepts_downward_imports() {
    let ok = files(&[
        ("src/lib.rs", "pub use error::{Error, Result};\npub use values::IValue;\n"),
        ("src/error.rs", "pub use crate::ir::CompileError;\npub enum Error {}\n"),
        ("src/values/mod.rs", "pub mod ivalue;\npub use ivalue::IValue;\n"),
        ("src/values/ivalue.rs", "use crate::tensor::Tensor;\npub enum IValue { T(Tensor) }\n"),
        ("src/tensor/mod.rs", "pub struct Tensor;\nfn f() -> crate::Result<()> { Ok(()) }\n"),
        ("src/ir/mod.rs", "pub mod graph;\npub mod printer;\npub use graph::Graph;\npub enum CompileError {}\n"),
        ("src/ir/graph.rs", "use crate::values::IValue;\nuse crate::ir::CompileError;\npub struct Graph;\n"),
        (
            "src/ir/printer.rs",
            "// use crate::runtime::Module; (a comment)\nuse super::graph::Graph;\nfn f(g: &crate::ir::Graph) { let s = \"crate::runtime::x\"; }\n",
        ),
        ("src/runtime/mod.rs", "use crate::ir::printer;\nfn f() { let _ = crate::IValue::None; }\n"),
    ]);
    assert_eq!(check(&ok), Vec::<String>::new());
}

#[test]
fn checker_finds_upward_imports_and_cycles() {
    let bad = files(&[
        (
            "src/lib.rs",
            "pub use error::{Error, Result};\npub use runtime::Module;\n",
        ),
        ("src/error.rs", "pub use crate::runtime::Thing;\n"),
        ("src/tensor/mod.rs", "pub struct Tensor;\n"),
        ("src/ir/mod.rs", "pub mod a;\npub mod b;\n"),
        ("src/ir/a.rs", "use super::b::B;\npub struct A;\n"),
        (
            "src/ir/b.rs",
            "pub struct B;\nfn f() { let _ = crate::ir::a::A; }\n",
        ),
        (
            "src/ops/mod.rs",
            "fn f() -> crate::runtime::IValue { crate::runtime::IValue::None }\n",
        ),
        (
            "src/values/mod.rs",
            "use crate::{tensor::Tensor, Module};\n",
        ),
        (
            "src/runtime/mod.rs",
            "pub struct Module;\npub enum IValue { None }\npub struct Thing;\n",
        ),
    ]);
    let problems = check(&bad);
    let has = |needle: &str| problems.iter().any(|p| p.contains(needle));
    assert!(
        has("src/ops/mod.rs: layer ops imports crate::runtime::IValue"),
        "{problems:#?}"
    );
    assert!(
        has("src/values/mod.rs: layer values imports crate::Module"),
        "{problems:#?}"
    );
    assert!(
        has("src/error.rs: layer error imports crate::runtime::Thing"),
        "{problems:#?}"
    );
    assert!(has("module cycle between ir::a, ir::b"), "{problems:#?}");
    assert!(!has("tensor::Tensor"), "{problems:#?}");
    assert_eq!(problems.len(), 5, "{problems:#?}");
}
