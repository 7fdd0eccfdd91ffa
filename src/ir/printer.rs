//! `str(graph)`: the graph text exactly as PyTorch's `Graph::print` (torch/csrc/jit/ir/ir.cpp)
//! writes it, plus the value formatting helpers shared with the code printer.

use std::fmt::{self, Write};

use super::graph::{Attr, BlockId, Graph, NodeId, ValueId};
use crate::tensor::{DType, Scalar, Tensor};
use crate::values::format::{fmt_double, fmt_g};
use crate::values::types::Type;
use crate::values::IValue;

/// What to include when printing a graph.
#[derive(Clone, Copy, Debug)]
pub struct PrintOptions {
    /// Append `# file:line:col` to nodes that carry a source location (the original Python
    /// location when the archive's debug records give one).
    pub source_locations: bool,
}

impl Default for PrintOptions {
    fn default() -> Self {
        PrintOptions {
            source_locations: true,
        }
    }
}

impl fmt::Display for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&print_graph(self, PrintOptions::default()))
    }
}

/// The printed name of a value without `%`: its debug name (unique in its graph), else its
/// unique number.
pub fn value_name(g: &Graph, v: ValueId) -> String {
    let value = g.value(v);
    match &value.debug_name {
        Some(n) => n.clone(),
        None => value.unique.to_string(),
    }
}

/// Print a graph as `str(graph)` does.
pub fn print_graph(g: &Graph, opts: PrintOptions) -> String {
    let names: Vec<String> = (0..g.values.len())
        .map(|i| value_name(g, ValueId(i as u32)))
        .collect();
    let mut out = String::new();
    print_body(g, &names, g.inputs(), g.root, opts, &mut out);
    out
}

/// `graph(inputs):`, the nodes of `root` and its return, then the subgraphs of the `prim::fork`
/// nodes printed as `prim::fork_N` (`with prim::fork_N = graph(...)`, as `Graph::print`).
fn print_body(
    g: &Graph,
    names: &[String],
    inputs: &[ValueId],
    root: BlockId,
    opts: PrintOptions,
    out: &mut String,
) {
    let p = GraphPrinter {
        g,
        names,
        forks: std::cell::RefCell::new(Vec::new()),
    };
    out.push_str("graph(");
    out.push_str(&p.typed_values(inputs, ",\n      "));
    out.push_str("):\n");
    for &n in &g.block(root).nodes {
        p.node(n, 1, opts, out);
    }
    out.push_str("  return (");
    out.push_str(&p.plain_values(&g.block(root).returns));
    out.push_str(")\n");
    for (i, fork) in p.forks.take().into_iter().enumerate() {
        let Some(&body) = g.node(fork).blocks.first() else {
            continue;
        };
        let _ = write!(out, "with {}_{i} = ", g.node(fork).kind);
        let sub_names = subgraph_names(g, names, fork, body);
        print_body(g, &sub_names, &g.block(body).params, body, opts, out);
    }
}

/// Names of the values of a fork's subgraph, a graph of its own in PyTorch: its parameters
/// take the names of the captured values (the subgraph's numbering is set where it is made).
fn subgraph_names(g: &Graph, names: &[String], fork: NodeId, body: BlockId) -> Vec<String> {
    let mut sub = names.to_vec();
    let captured = &g.node(fork).inputs;
    for (k, &param) in g.block(body).params.iter().enumerate() {
        let outer = captured.get(k).and_then(|&c| g.value(c).debug_name.clone());
        let own = g.value(param).debug_name.clone();
        if let (Some(slot), Some(name)) = (sub.get_mut(param.0 as usize), own.or(outer)) {
            *slot = name;
        }
    }
    sub
}

struct GraphPrinter<'a> {
    g: &'a Graph,
    names: &'a [String],
    /// The `prim::fork` nodes printed so far, whose subgraphs follow the graph.
    forks: std::cell::RefCell<Vec<NodeId>>,
}

impl GraphPrinter<'_> {
    fn name(&self, v: ValueId) -> &str {
        self.names
            .get(v.0 as usize)
            .map(String::as_str)
            .unwrap_or("?")
    }

    fn typed_values(&self, vs: &[ValueId], sep: &str) -> String {
        vs.iter()
            .map(|&v| {
                format!(
                    "%{} : {}",
                    self.name(v),
                    type_text(self.g, &self.g.value(v).ty)
                )
            })
            .collect::<Vec<_>>()
            .join(sep)
    }

    fn plain_values(&self, vs: &[ValueId]) -> String {
        vs.iter()
            .map(|&v| format!("%{}", self.name(v)))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A type as `str(graph)` prints it: enum, interface and NamedTuple classes spelled as the
/// graph records them.
pub fn type_text(g: &Graph, ty: &Type) -> String {
    let text = ty.to_string();
    if g.class_spellings.is_empty() {
        return text;
    }
    spell_classes(&g.class_spellings, &text, &mut Vec::new())
}

/// `text` with every class name replaced by its spelling, and the class names in a spelling
/// (a NamedTuple field of NamedTuple or enum type) replaced in turn, as PyTorch's
/// `TupleType::str` prints its fields' types. `expanding` holds the classes being spelled, whose
/// names stay as they are inside their own spelling (`Enum<q>` names `q`).
fn spell_classes(
    spellings: &std::collections::BTreeMap<String, String>,
    text: &str,
    expanding: &mut Vec<String>,
) -> String {
    let mut out = String::with_capacity(text.len());
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < text.len() {
        // class names are maximal runs of identifier characters and dots
        let is_name = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'.';
        if is_name(bytes[i]) {
            let start = i;
            while i < text.len() && is_name(bytes[i]) {
                i += 1;
            }
            let word = &text[start..i];
            match spellings.get(word) {
                Some(spelling) if !expanding.iter().any(|e| e == word) => {
                    expanding.push(word.to_string());
                    out.push_str(&spell_classes(spellings, spelling, expanding));
                    expanding.pop();
                }
                _ => out.push_str(word),
            }
        } else {
            let c = text[i..].chars().next().unwrap_or(' ');
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

fn indent(out: &mut String, level: usize) {
    for _ in 0..level {
        out.push_str("  ");
    }
}

impl GraphPrinter<'_> {
    fn node(&self, n: NodeId, level: usize, opts: PrintOptions, out: &mut String) {
        let g = self.g;
        let node = g.node(n);
        indent(out, level);
        out.push_str(&self.typed_values(&node.outputs, ", "));
        out.push_str(" = ");
        out.push_str(&node.kind);
        let is_fork = node.kind == "prim::fork";
        if is_fork {
            let mut forks = self.forks.borrow_mut();
            let _ = write!(out, "_{}", forks.len());
            forks.push(n);
        }
        let attrs: Vec<&(String, Attr)> = node
            .attrs
            .iter()
            // `None` constants carry no attribute in PyTorch.
            .filter(|(name, a)| {
                !(node.kind == "prim::Constant"
                    && name == "value"
                    && matches!(a, Attr::Value(IValue::None)))
            })
            .collect();
        if !attrs.is_empty() {
            out.push('[');
            for (i, (name, a)) in attrs.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                // a function constant prints the function's own name
                if let Attr::Value(IValue::Function(q)) = a {
                    let short = q.rsplit('.').next().unwrap_or(q);
                    out.push_str("name=");
                    out.push_str(&quoted_string(short));
                    continue;
                }
                out.push_str(name);
                out.push('=');
                if crate::ir::graph::has_type_list_attr(&node.kind) && name == "types" {
                    out.push_str(&type_list_text(a));
                } else {
                    out.push_str(&attr_text(a));
                }
            }
            out.push(']');
        }
        out.push('(');
        out.push_str(&self.plain_values(&node.inputs));
        out.push(')');
        if opts.source_locations {
            if let Some(loc) = node.source.as_ref().and_then(|s| s.graph_location()) {
                out.push_str(" # ");
                out.push_str(&loc);
            }
        }
        out.push('\n');
        if is_fork {
            return;
        }
        for (i, &b) in node.blocks.iter().enumerate() {
            self.block(b, i, level + 1, out);
        }
    }

    fn block(&self, b: BlockId, index: usize, level: usize, out: &mut String) {
        let block = self.g.block(b);
        indent(out, level);
        let _ = writeln!(
            out,
            "block{index}({}):",
            self.typed_values(&block.params, ", ")
        );
        // PyTorch prints nested nodes with its default options: their source comments stay even
        // when the caller asked for none (`graph.str(False)`).
        for &n in &block.nodes {
            self.node(n, level + 1, PrintOptions::default(), out);
        }
        indent(out, level + 1);
        let _ = writeln!(out, "-> ({})", self.plain_values(&block.returns));
    }
}

/// A type-list attribute (`prim::isinstance[types=[list, tuple]]`) as `printTypeList` writes
/// it: the types unquoted. The list is held as one type, or as the types' spellings.
pub fn type_list_text(a: &Attr) -> String {
    match a {
        Attr::Type(t) => format!("[{t}]"),
        Attr::Strs(v) => format!("[{}]", v.join(", ")),
        Attr::Str(s) => format!("[{s}]"),
        other => attr_text(other),
    }
}

/// An attribute value as `Node::printAttrValue` writes it.
pub fn attr_text(a: &Attr) -> String {
    match a {
        Attr::Int(i) => i.to_string(),
        Attr::Float(f) => fmt_double(*f),
        Attr::Str(s) => quoted_string(s),
        Attr::Ints(v) => format!(
            "[{}]",
            v.iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Attr::Floats(v) => format!(
            "[{}]",
            v.iter()
                .map(|f| fmt_double(*f))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Attr::Strs(v) => format!(
            "[{}]",
            v.iter()
                .map(|s| quoted_string(s))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Attr::Type(t) => t.to_string(),
        // PyTorch stores bool constants as int attributes and devices as strings.
        Attr::Value(IValue::Bool(b)) => i64::from(*b).to_string(),
        Attr::Value(IValue::Device(d)) => quoted_string(&d.to_string()),
        Attr::Value(IValue::Tensor(t)) => tensor_attr_text(t),
        Attr::Value(v) => ivalue_text(v),
    }
}

/// `c10::printQuotedString`: double quotes, C escapes, other non-printables as octal.
pub fn quoted_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for b in s.bytes() {
        match b {
            b'\\' => out.push_str("\\\\"),
            b'\'' => out.push_str("\\'"),
            b'"' => out.push_str("\\\""),
            7 => out.push_str("\\a"),
            8 => out.push_str("\\b"),
            12 => out.push_str("\\f"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            11 => out.push_str("\\v"),
            0x20..=0x7e => out.push(b as char),
            other => out.push_str(&c10_octal_escape(other)),
        }
    }
    out.push('"');
    out
}

/// `printQuotedString`'s escape of an unprintable byte: three octal digits computed from the
/// byte as a C++ (signed) `char` with truncating `%` and `/`. A UTF-8 byte (0x80 and up) is
/// negative there, so its "digits" are not octal (`\0.0` for 0xF0); PyTorch prints them so.
fn c10_octal_escape(byte: u8) -> String {
    let mut s = byte as i8;
    let mut digits = [b'0'; 3];
    for d in digits.iter_mut().rev().take(2) {
        *d = (b'0' as i8).wrapping_add(s % 8) as u8;
        s /= 8;
    }
    digits[0] = (b'0' as i8).wrapping_add(s) as u8;
    format!("\\{}", String::from_utf8_lossy(&digits))
}

/// c10's `operator<<(ostream, IValue)`.
pub fn ivalue_text(v: &IValue) -> String {
    match v {
        IValue::None => "None".to_string(),
        IValue::Bool(b) => if *b { "True" } else { "False" }.to_string(),
        IValue::Int(i) => i.to_string(),
        IValue::Double(d) => fmt_double(*d),
        IValue::Complex(c) => {
            let sign = if c.im >= 0.0 { "+" } else { "-" };
            format!("{}{}{}j", fmt_double(c.re), sign, fmt_double(c.im.abs()))
        }
        IValue::String(s) => quoted_string(s),
        IValue::Tensor(t) => tensor_attr_text(t),
        IValue::List(l) => {
            let text = format!(
                "[{}]",
                l.items()
                    .iter()
                    .map(ivalue_text)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            // `printMaybeAnnotatedList`: empty lists, and lists whose element type the
            // members do not tell, carry their type
            let inferable = !matches!(
                l.elem_type(),
                Type::Union(_) | Type::Optional(_) | Type::Number | Type::Any
            );
            if l.items().is_empty() || !inferable {
                format!(
                    "annotate({}, {text})",
                    Type::list(l.elem_type().clone()).annotation_str()
                )
            } else {
                text
            }
        }
        IValue::Tuple(t) => {
            let items: Vec<String> = t.items().iter().map(ivalue_text).collect();
            if items.len() == 1 {
                format!("({},)", items.join(", "))
            } else {
                format!("({})", items.join(", "))
            }
        }
        IValue::Dict(d) => format!(
            "{{{}}}",
            d.items()
                .values()
                .map(|(k, v)| format!("{}: {}", ivalue_text(k), ivalue_text(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        // c10 prints an object by its address (a frozen graph's packed-weight constants)
        IValue::Object(o) => format!("object({:p})", std::sync::Arc::as_ptr(&o.0)),
        IValue::Device(d) => d.to_string(),
        // Graphs show enum constants by qualified member name (`__torch__.Color.RED`).
        IValue::Enum(e) => format!("{}.{}", e.class, e.name),
        IValue::Storage(_) => "<Storage>".to_string(),
        IValue::Function(n) => format!("<Function {n}>"),
        IValue::Generator(g) => generator_text(g),
        IValue::Await(_) => "<Await>".to_string(),
        IValue::Uninitialized => "<Uninitialized>".to_string(),
        IValue::Future(_) => "<Future>".to_string(),
    }
}

/// A generator constant as PyTorch prints it in graphs and code.
pub(crate) fn generator_text(g: &crate::values::SharedGenerator) -> String {
    format!("torch.Generator(device=\"cpu\", seed={})", g.lock().seed())
}

/// A tensor attribute as `Node::printAttrValue` writes it: one element as `{value}`, up to
/// ten (or none) through ATen's tensor formatter (see [`crate::values::aten_format`]), more as
/// `<Tensor>`.
pub fn tensor_attr_text(t: &Tensor) -> String {
    if t.numel() == 1 {
        let Ok(item) = t.item() else {
            return "<Tensor>".to_string();
        };
        let body = match (t.dtype(), item) {
            (DType::Complex64 | DType::Complex128, _) => return "<Tensor>".to_string(),
            (_, Scalar::Float(f)) => fmt_g(f, 6),
            (_, Scalar::Int(i)) => i.to_string(),
            (_, Scalar::Bool(b)) => i64::from(b).to_string(),
            _ => return "<Tensor>".to_string(),
        };
        return format!("{{{body}}}");
    }
    if t.numel() <= crate::values::aten_format::MAX_TENSOR_DISPLAY_SIZE {
        if let Some(text) = crate::values::aten_format::format_tensor(t) {
            return text;
        }
    }
    "<Tensor>".to_string()
}
