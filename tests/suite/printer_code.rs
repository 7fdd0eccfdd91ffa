//! The code printer against PyTorch's `m.code` goldens: each golden graph is read back with
//! the IR text parser and printed as code; the result is compared with the golden `code`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use tsrun::internals::ir::graph::{Graph, NodeId};
use tsrun::internals::ir::parse_graph::parse_graph;
use tsrun::internals::ir::python_print::{print_code, OpArg, OpArgs, SchemaSource, Signature};
use tsrun::internals::values::ivalue::List;
use tsrun::internals::values::types::Type;
use tsrun::IValue;

/// Operator schemas from `torch._C._jit_get_all_schemas()` (fixtures/schemas.txt), reduced to
/// what the printer needs. Overloads are chosen by arity and input types, since a graph read
/// back from text does not name them.
struct Schemas {
    by_name: HashMap<String, Vec<Overload>>,
}

/// (formal type, name) of each argument, and the printer's view of the schema.
type Overload = (Vec<(String, String)>, OpArgs);

fn split_top_level(s: &str) -> Vec<String> {
    let (mut depth, mut cur, mut out) = (0i32, String::new(), Vec::new());
    let mut in_str = false;
    for c in s.chars() {
        match c {
            '"' | '\'' => in_str = !in_str,
            '(' | '[' if !in_str => depth += 1,
            ')' | ']' if !in_str => depth -= 1,
            ',' if depth == 0 && !in_str => {
                out.push(cur.trim().to_string());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

fn parse_default(ty: &str, text: &str) -> Option<IValue> {
    let scalar = |t: &str| -> Option<IValue> {
        Some(match t {
            "None" => IValue::None,
            "True" => IValue::Bool(true),
            "False" => IValue::Bool(false),
            "contiguous_format" => IValue::Int(0),
            "Mean" => IValue::Int(1),
            "long" => IValue::Int(4),
            _ if t.starts_with('"') || t.starts_with('\'') => IValue::str(
                t[1..t.len() - 1]
                    .replace("\\n", "\n")
                    .replace("\\t", "\t")
                    .replace("\\f", "\x0c")
                    .replace("\\v", "\x0b"),
            ),
            _ => match t.parse::<i64>() {
                Ok(i) => IValue::Int(i),
                Err(_) => IValue::Double(t.parse::<f64>().ok()?),
            },
        })
    };
    let fixed_len = ty
        .split_once('[')
        .and_then(|(_, r)| r.split_once(']'))
        .and_then(|(n, _)| n.parse::<usize>().ok());
    if let Some(inner) = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
        let items: Option<Vec<IValue>> = split_top_level(inner).iter().map(|x| scalar(x)).collect();
        return Some(IValue::List(List::new(Type::Any, items?)));
    }
    let v = scalar(text)?;
    match (fixed_len, &v) {
        (Some(n), IValue::Int(_) | IValue::Double(_) | IValue::Bool(_)) => {
            Some(IValue::List(List::new(Type::Any, vec![v; n])))
        }
        _ => Some(v),
    }
}

impl Schemas {
    fn load() -> Schemas {
        let path = std::env::var("TSRUN_SCHEMAS")
            .map(PathBuf::from)
            .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/schemas.txt"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (merge main for fixtures/schemas.txt)",
                path.display()
            )
        });
        let mut by_name: HashMap<String, Vec<_>> = HashMap::new();
        for line in text.lines() {
            let Some((head, rest)) = line.split_once('(') else {
                continue;
            };
            let name = head.split('.').next().unwrap_or(head).to_string();
            let Some(close) = rest.rfind(") ->") else {
                continue;
            };
            let mut args = Vec::new();
            let mut types = Vec::new();
            let mut kwarg_only = false;
            let mut is_vararg = false;
            for a in split_top_level(&rest[..close]) {
                if a == "*" {
                    kwarg_only = true;
                    continue;
                }
                if a == "..." {
                    is_vararg = true;
                    continue;
                }
                let (decl, default) = match a.split_once('=') {
                    Some((d, v)) => (d.trim(), Some(v.trim())),
                    None => (a.as_str(), None),
                };
                let Some((ty, arg_name)) = decl.rsplit_once(' ') else {
                    continue;
                };
                args.push(OpArg {
                    name: arg_name.to_string(),
                    kwarg_only,
                    default: default.and_then(|d| parse_default(ty, d)),
                    is_out: kwarg_only && ty.contains('!'),
                });
                types.push((ty.to_string(), arg_name.to_string()));
            }
            by_name
                .entry(name)
                .or_default()
                .push((types, OpArgs { args, is_vararg }));
        }
        Schemas { by_name }
    }
}

fn type_fits(formal: &str, actual: &Type) -> bool {
    let formal = formal.split('(').next().unwrap_or(formal);
    if let Some(inner) = formal.strip_suffix('?') {
        return matches!(actual, Type::NoneType) || type_fits(inner, actual);
    }
    match formal {
        "Tensor" => matches!(actual, Type::Tensor),
        "int" | "SymInt" => matches!(actual, Type::Int | Type::Bool),
        "float" => matches!(actual, Type::Float | Type::Int),
        "bool" => matches!(actual, Type::Bool),
        "str" => matches!(actual, Type::Str),
        "Scalar" => matches!(
            actual,
            Type::Int | Type::Float | Type::Number | Type::Bool | Type::Complex
        ),
        "ScalarType" | "Layout" | "MemoryFormat" => matches!(actual, Type::Int),
        "Device" => matches!(actual, Type::Device),
        f if f.ends_with(']') => matches!(actual, Type::List(_)),
        _ => true,
    }
}

impl SchemaSource for Schemas {
    fn op_args(&self, g: &Graph, node: NodeId) -> Option<OpArgs> {
        let n = g.node(node);
        let inputs: Vec<&Type> = n.inputs.iter().map(|&v| &g.value(v).ty).collect();
        let overloads = self.by_name.get(&n.kind)?;
        // Prefer an overload taking exactly the node's inputs, then any that accepts them.
        let exact = overloads.iter().find(|(types, op)| {
            types.len() == inputs.len()
                && !op.is_vararg
                && inputs
                    .iter()
                    .zip(types)
                    .all(|(actual, (formal, _))| type_fits(formal, actual))
        });
        if let Some((_, op)) = exact {
            return Some(op.clone());
        }
        overloads.iter().find_map(|(types, op)| {
            let arity_ok = inputs.len() <= types.len() || op.is_vararg;
            let no_out = !op.args.iter().any(|a| a.is_out) || inputs.len() == types.len();
            let fits = inputs
                .iter()
                .zip(types)
                .all(|(actual, (formal, _))| type_fits(formal, actual));
            (arity_ok && no_out && fits).then(|| op.clone())
        })
    }
}

fn golden_dirs() -> Vec<PathBuf> {
    let mut dirs = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/golden")];
    if let Ok(extra) = std::env::var("TSRUN_EXTRA_GOLDENS") {
        dirs.extend(extra.split(':').map(PathBuf::from));
    }
    let mut out: Vec<PathBuf> = dirs
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flat_map(|entries| entries.flatten().map(|e| e.path()))
        .filter(|p| p.join("printed.json").exists())
        .collect();
    out.sort();
    out
}

/// The signature as far as the graph tells it: argument names are the inputs' debug names
/// without their `.N` suffix; defaults are not in the graph.
fn signature_from_graph(g: &Graph, method: &str) -> Signature {
    let args = g
        .inputs()
        .iter()
        .map(|&v| {
            let name = g.value(v).debug_name.clone().unwrap_or_default();
            let base = match name.rsplit_once('.') {
                Some((b, s)) if s.bytes().all(|c| c.is_ascii_digit()) => b.to_string(),
                _ => name,
            };
            (base, g.value(v).ty.clone(), None)
        })
        .collect();
    let returns = g
        .outputs()
        .first()
        .map(|&v| g.value(v).ty.clone())
        .unwrap_or(Type::NoneType);
    Signature {
        name: method.to_string(),
        args,
        returns,
        is_method: true,
    }
}

#[test]
fn golden_code_from_golden_graphs() {
    let schemas = Schemas::load();
    let dirs = golden_dirs();
    assert!(
        !dirs.is_empty(),
        "no goldens under fixtures/golden (merge main)"
    );
    let (mut total, mut same) = (0, 0);
    let mut mismatches = Vec::new();
    for dir in dirs {
        let text = std::fs::read_to_string(dir.join("printed.json")).expect("printed.json");
        let json: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        for (path, methods) in json.as_object().into_iter().flatten() {
            for (method, printed) in methods.as_object().into_iter().flatten() {
                let (Some(graph), Some(code)) = (
                    printed.get("graph").and_then(|g| g.as_str()),
                    printed.get("code").and_then(|c| c.as_str()),
                ) else {
                    continue;
                };
                total += 1;
                let label = format!("{name} [{path}] {method}");
                let g = match parse_graph(graph) {
                    Ok(g) => g,
                    Err(e) => {
                        mismatches.push(format!("{label}: graph parse error {e}"));
                        continue;
                    }
                };
                match print_code(&g, &signature_from_graph(&g, method), &schemas) {
                    Err(e) => mismatches.push(format!("{label}: {e}")),
                    Ok(ours) if ours.code == code => same += 1,
                    Ok(ours) => {
                        let diff = ours
                            .code
                            .lines()
                            .zip(code.lines())
                            .find(|(a, b)| a != b)
                            .map(|(a, b)| format!("\n    ours:    {a}\n    pytorch: {b}"))
                            .unwrap_or_else(|| "\n    (length differs)".to_string());
                        mismatches.push(format!("{label}: code differs{diff}"));
                    }
                }
            }
        }
    }
    println!("code printer: {same}/{total} methods identical to PyTorch's m.code");
    for m in &mismatches {
        println!("{m}");
    }
    assert!(total > 0, "no golden methods found");
    assert!(same > 0, "no method printed identically");
}
