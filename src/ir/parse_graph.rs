//! Read the `str(graph)` text format back into a [`Graph`] (as `torch._C.parse_ir` does),
//! keeping value names, constants and `# file:line:col` source comments, so that printing the
//! result reproduces the text.
//!
//! Unnamed values (`%23`) keep their number as their debug name: PyTorch never gives a value a
//! purely numeric debug name, so such a name unambiguously means "printed as this number".

use std::collections::HashMap;
use std::sync::Arc;

use super::graph::{Attr, BlockId, Graph, NodeId, ValueId};
use crate::frontend::source::{Source, SourceRange};
use crate::tensor::Tensor;
use crate::values::ivalue::{Device, List, Tuple};
use crate::values::types::Type;
use crate::values::IValue;

/// A malformed graph text, with the byte offset where parsing stopped.
#[derive(Debug, thiserror::Error)]
#[error("graph text offset {offset}: {message}")]
pub struct GraphParseError {
    pub offset: usize,
    pub message: String,
}

type PResult<T> = Result<T, GraphParseError>;

/// Parse the text of `str(graph)`.
pub fn parse_graph(text: &str) -> PResult<Graph> {
    let mut p = IrParser {
        s: text.as_bytes(),
        text,
        i: 0,
        g: Graph::new(),
        values: HashMap::new(),
        sources: HashMap::new(),
        forks: Vec::new(),
        subgraph_depth: 0,
    };
    p.graph()?;
    Ok(p.g)
}

struct IrParser<'a> {
    s: &'a [u8],
    text: &'a str,
    i: usize,
    g: Graph,
    values: HashMap<String, ValueId>,
    sources: HashMap<(String, usize), Arc<Source>>,
    /// The `prim::fork_N` nodes of the (sub)graph being parsed, whose `with prim::fork_N =
    /// graph(...)` subgraphs follow its return.
    forks: Vec<NodeId>,
    /// How deep in fork subgraphs the parser is (their names are a table of their own).
    subgraph_depth: usize,
}

impl IrParser<'_> {
    fn err<T>(&self, message: impl Into<String>) -> PResult<T> {
        Err(GraphParseError {
            offset: self.i,
            message: message.into(),
        })
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn skip_ws(&mut self) {
        while let Some(c) = self.peek() {
            if c.is_ascii_whitespace() {
                self.i += 1;
            } else {
                break;
            }
        }
    }

    /// Skip spaces but not newlines.
    fn skip_spaces(&mut self) {
        while self.peek() == Some(b' ') || self.peek() == Some(b'\t') {
            self.i += 1;
        }
    }

    fn starts_with(&self, lit: &str) -> bool {
        self.s
            .get(self.i..)
            .is_some_and(|r| r.starts_with(lit.as_bytes()))
    }

    fn eat(&mut self, lit: &str) -> bool {
        self.skip_ws();
        if self.starts_with(lit) {
            self.i += lit.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, lit: &str) -> PResult<()> {
        if self.eat(lit) {
            Ok(())
        } else {
            // the cursor may sit inside a multi-byte character: show from that character on
            let start = (0..=self.i.min(self.text.len()))
                .rev()
                .find(|&k| self.text.is_char_boundary(k))
                .unwrap_or(0);
            let got: String = self.text[start..].chars().take(20).collect();
            self.err(format!("expected `{lit}`, found `{got}`"))
        }
    }

    fn word(&mut self, extra: &[u8]) -> String {
        self.skip_ws();
        let start = self.i;
        while let Some(c) = self.peek() {
            if c.is_ascii_alphanumeric() || c == b'_' || extra.contains(&c) {
                self.i += 1;
            } else {
                break;
            }
        }
        self.text[start..self.i].to_string()
    }

    fn value_ref(&mut self) -> PResult<String> {
        self.expect("%")?;
        // debug names keep the characters of Python attribute names (`%block1-0`)
        let name = self.word(b".-");
        if name.is_empty() {
            return self.err("expected a value name after `%`");
        }
        Ok(name)
    }

    fn use_value(&mut self) -> PResult<ValueId> {
        let start = self.i;
        let name = self.value_ref()?;
        match self.values.get(&name) {
            Some(v) => Ok(*v),
            None => Err(GraphParseError {
                offset: start,
                message: format!("use of undefined value %{name}"),
            }),
        }
    }

    fn define(&mut self, name: String, v: ValueId) {
        match name.parse::<usize>() {
            Ok(unique) => self.g.set_unique(v, unique),
            // a subgraph's names are its own: they may repeat the graph's
            Err(_) if self.subgraph_depth > 0 => {
                self.g.value_mut(v).debug_name = Some(name.clone())
            }
            Err(_) => self.g.set_debug_name(v, &name),
        }
        self.values.insert(name, v);
    }

    /// `%name : Type` list, comma separated, up to (not including) `close`.
    fn typed_defs(&mut self, close: &str) -> PResult<Vec<(String, Type)>> {
        let mut out = Vec::new();
        self.skip_ws();
        if self.starts_with(close) {
            return Ok(out);
        }
        loop {
            let name = self.value_ref()?;
            self.expect(":")?;
            let ty = self.ty()?;
            out.push((name, ty));
            if !self.eat(",") {
                return Ok(out);
            }
        }
    }

    fn value_uses(&mut self, close: &str) -> PResult<Vec<ValueId>> {
        let mut out = Vec::new();
        self.skip_ws();
        if self.starts_with(close) {
            return Ok(out);
        }
        loop {
            out.push(self.use_value()?);
            if !self.eat(",") {
                return Ok(out);
            }
        }
    }

    fn graph(&mut self) -> PResult<()> {
        self.expect("graph")?;
        self.expect("(")?;
        let params = self.typed_defs(")")?;
        self.expect(")")?;
        self.expect(":")?;
        for (name, ty) in params {
            let v = self.g.add_input(ty, None);
            self.define(name, v);
        }
        let root = self.g.root;
        self.body(root)?;
        self.skip_ws();
        if self.i != self.s.len() {
            return self.err("trailing text after `return`");
        }
        Ok(())
    }

    /// The nodes and return of a (sub)graph, then the subgraphs of its `prim::fork_N` nodes.
    fn body(&mut self, block: BlockId) -> PResult<()> {
        let outer_forks = std::mem::take(&mut self.forks);
        self.nodes(block, "return")?;
        self.expect("return")?;
        self.expect("(")?;
        let outs = self.value_uses(")")?;
        self.expect(")")?;
        self.g.block_mut(block).returns = outs;
        let forks = std::mem::replace(&mut self.forks, outer_forks);
        for (k, fork) in forks.into_iter().enumerate() {
            self.skip_ws();
            self.expect("with")?;
            let kind = self.word(b":.");
            if kind != format!("prim::fork_{k}") {
                return self.err(format!(
                    "expected the subgraph of prim::fork_{k}, found `{kind}`"
                ));
            }
            self.expect("=")?;
            self.expect("graph")?;
            self.expect("(")?;
            let params = self.typed_defs(")")?;
            self.expect(")")?;
            self.expect(":")?;
            let outer_values = std::mem::take(&mut self.values);
            self.subgraph_depth += 1;
            let b = self.g.add_block(fork);
            for (name, ty) in params {
                let v = self.g.add_param(b, ty, None);
                self.define(name, v);
            }
            let r = self.body(b);
            self.subgraph_depth -= 1;
            self.values = outer_values;
            r?;
        }
        Ok(())
    }

    /// Nodes until the `end` keyword (`return` or `->`).
    fn nodes(&mut self, block: BlockId, end: &str) -> PResult<()> {
        loop {
            self.skip_ws();
            if self.starts_with(end) || self.i >= self.s.len() {
                return Ok(());
            }
            self.node(block)?;
        }
    }

    fn node(&mut self, block: BlockId) -> PResult<()> {
        let outputs = self.typed_defs("=")?;
        self.expect("=")?;
        let kind = self.word(b":.");
        if !kind.contains("::") {
            return self.err(format!("expected an operator kind, found `{kind}`"));
        }
        let mut attrs = Vec::new();
        if self.eat("[") {
            loop {
                let name = self.word(b"");
                self.expect("=")?;
                let value = if super::graph::has_type_list_attr(&kind) && name == "types" {
                    self.type_list()?
                } else {
                    self.attr_value()?
                };
                attrs.push((name, value));
                if !self.eat(",") {
                    break;
                }
            }
            self.expect("]")?;
        }
        self.expect("(")?;
        let inputs = self.value_uses(")")?;
        self.expect(")")?;
        let types: Vec<Type> = outputs.iter().map(|(_, t)| t.clone()).collect();
        // `prim::fork_N`: the fork whose subgraph follows the graph as `with prim::fork_N`
        let is_fork = kind
            .strip_prefix("prim::fork_")
            .is_some_and(|k| k.parse::<usize>() == Ok(self.forks.len()));
        let kind = if is_fork {
            "prim::fork".to_string()
        } else {
            kind
        };
        let n = self.g.create_node(kind, inputs, types);
        if is_fork {
            self.forks.push(n);
        }
        // Bool constants print as ints and devices as strings; keep their real values.
        if let (Some((_, ty)), true) = (outputs.first(), self.g.node(n).kind == "prim::Constant") {
            for (name, a) in attrs.iter_mut() {
                if name != "value" {
                    continue;
                }
                match (ty, &*a) {
                    (Type::Bool, Attr::Int(i)) => *a = Attr::Value(IValue::Bool(*i != 0)),
                    (Type::Device, Attr::Str(s)) => {
                        if let Some(d) = Device::parse(s) {
                            *a = Attr::Value(IValue::Device(d));
                        }
                    }
                    _ => {}
                }
            }
        }
        self.g.node_mut(n).attrs = attrs;
        let outs = self.g.node(n).outputs.clone();
        for ((name, _), v) in outputs.into_iter().zip(outs) {
            self.define(name, v);
        }
        self.skip_spaces();
        if self.peek() == Some(b'#') {
            self.i += 1;
            let start = self.i;
            while self.peek().is_some_and(|c| c != b'\n') {
                self.i += 1;
            }
            let comment = self.text[start..self.i].trim().to_string();
            self.g.node_mut(n).source = Some(self.source_comment(&comment)?);
        }
        self.g.append(block, n);
        // Nested blocks.
        loop {
            self.skip_ws();
            if !self.starts_with("block") {
                break;
            }
            self.word(b"");
            self.expect("(")?;
            let params = self.typed_defs(")")?;
            self.expect(")")?;
            self.expect(":")?;
            let b = self.g.add_block(n);
            for (name, ty) in params {
                let v = self.g.add_param(b, ty, None);
                self.define(name, v);
            }
            self.nodes(b, "->")?;
            self.expect("->")?;
            self.expect("(")?;
            let rets = self.value_uses(")")?;
            self.expect(")")?;
            self.g.block_mut(b).returns = rets;
        }
        Ok(())
    }

    /// `file:line:col`: a range in a text-less source whose first line is `line`.
    fn source_comment(&mut self, comment: &str) -> PResult<SourceRange> {
        let mut parts = comment.rsplitn(3, ':');
        let col = parts.next().and_then(|c| c.parse::<usize>().ok());
        let line = parts.next().and_then(|l| l.parse::<usize>().ok());
        let file = parts.next();
        let (Some(col), Some(line), Some(file)) = (col, line, file) else {
            return self.err(format!("malformed source comment `# {comment}`"));
        };
        let source = self
            .sources
            .entry((file.to_string(), line))
            .or_insert_with(|| Source::new(file, "", line))
            .clone();
        Ok(SourceRange::new(source, col, col))
    }

    // ---------- types (graph spelling) ----------

    fn ty(&mut self) -> PResult<Type> {
        self.skip_ws();
        let t = if self.eat("(") {
            let mut items = Vec::new();
            if !self.eat(")") {
                loop {
                    items.push(self.ty()?);
                    if !self.eat(",") {
                        break;
                    }
                }
                self.expect(")")?;
            }
            Type::Tuple(items)
        } else {
            let mut name = self.word(b".");
            // `InterfaceType<Activation>`, `Enum<__torch__.Color>`: kept verbatim as a class
            // name so they print back the same (the graph spelling is all the text has).
            if name == "NamedTuple" && self.peek() == Some(b'(') {
                // `NamedTuple(a : Tensor, b : int)`: kept verbatim, like interfaces below.
                let start = self.i;
                let mut depth = 0usize;
                while let Some(c) = self.peek() {
                    self.i += 1;
                    match c {
                        b'(' => depth += 1,
                        b')' => {
                            depth = depth.saturating_sub(1);
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                name.push_str(&self.text[start..self.i]);
                return self.type_suffixes(Type::Class(name.into()));
            }
            if self.peek() == Some(b'<') {
                let start = self.i;
                while self.peek().is_some_and(|c| c != b'>') {
                    self.i += 1;
                }
                self.i += 1;
                name.push_str(&self.text[start..self.i.min(self.text.len())]);
                return self.type_suffixes(Type::Class(name.into()));
            }
            let args = |p: &mut Self| -> PResult<Vec<Type>> {
                p.expect("(")?;
                let mut items = Vec::new();
                loop {
                    items.push(p.ty()?);
                    if !p.eat(",") {
                        break;
                    }
                }
                p.expect(")")?;
                Ok(items)
            };
            match name.as_str() {
                "" => return self.err("expected a type"),
                "Dict" => {
                    let mut a = args(self)?;
                    if a.len() != 2 {
                        return self.err("Dict takes two types");
                    }
                    let v = a.remove(1);
                    Type::dict(a.remove(0), v)
                }
                "Union" => Type::Union(args(self)?),
                // `str(graph)` spells a future `Future[T]`
                "Future" if self.peek() == Some(b'[') => {
                    self.expect("[")?;
                    let inner = self.ty()?;
                    self.expect("]")?;
                    Type::Future(Box::new(inner))
                }
                "Future" | "Await" | "RRef" => {
                    let mut a = args(self)?;
                    if a.len() != 1 {
                        return self.err(format!("{name} takes one type"));
                    }
                    let inner = Box::new(a.remove(0));
                    match name.as_str() {
                        "Future" => Type::Future(inner),
                        "Await" => Type::Await(inner),
                        _ => Type::RRef(inner),
                    }
                }
                "NoneType" => Type::NoneType,
                "AnyClassType" => Type::AnyClass,
                "AnyEnumType" => Type::AnyEnum,
                "AnyList" => Type::AnyList,
                "AnyTuple" => Type::AnyTuple,
                other => match crate::values::types::parse_annotation(other) {
                    Some(t) => t,
                    None => return self.err(format!("unknown type `{other}`")),
                },
            }
        };
        self.type_suffixes(t)
    }

    /// `T[]` and `T?` suffixes.
    fn type_suffixes(&mut self, mut t: Type) -> PResult<Type> {
        loop {
            if self.starts_with("[]") {
                self.i += 2;
                t = Type::list(t);
            } else if self.starts_with("?") {
                self.i += 1;
                t = Type::optional(t);
            } else {
                return Ok(t);
            }
        }
    }

    // ---------- attribute values ----------

    /// `[list, tuple]`, `[Tensor]`: a type-list attribute, kept as the types' spellings.
    fn type_list(&mut self) -> PResult<Attr> {
        self.expect("[")?;
        let (mut items, mut cur, mut depth) = (Vec::new(), String::new(), 0usize);
        loop {
            let Some(c) = self.peek() else {
                return self.err("unterminated type list");
            };
            self.i += 1;
            match c {
                b'[' | b'(' => depth += 1,
                b']' if depth == 0 => break,
                b']' | b')' => depth = depth.saturating_sub(1),
                b',' if depth == 0 => {
                    items.push(cur.trim().to_string());
                    cur.clear();
                    continue;
                }
                _ => {}
            }
            cur.push(c as char);
        }
        if !cur.trim().is_empty() {
            items.push(cur.trim().to_string());
        }
        Ok(Attr::Strs(items))
    }

    fn attr_value(&mut self) -> PResult<Attr> {
        // A small tensor in ATen's format (` 1  2 [ CPULongType{2} ]`), leading spaces
        // included, so it is tried before anything skips them.
        if let Some(parsed) = crate::values::aten_format::parse_tensor(&self.text[self.i..]) {
            return match parsed {
                Ok((t, used)) => {
                    self.i += used;
                    Ok(Attr::Value(IValue::Tensor(t)))
                }
                Err(e) => self.err(e),
            };
        }
        let v = self.ivalue()?;
        Ok(match v {
            IValue::Int(i) => Attr::Int(i),
            IValue::Double(d) => Attr::Float(d),
            IValue::String(s) => Attr::Str(s.to_string()),
            other => Attr::Value(other),
        })
    }

    fn ivalue(&mut self) -> PResult<IValue> {
        self.skip_ws();
        if self.eat("annotate(") {
            // `annotate(List[int], [])`: a list with its type spelled out
            let start = self.i;
            let mut depth = 0usize;
            while let Some(c) = self.peek() {
                match c {
                    b'[' | b'(' => depth += 1,
                    b']' | b')' => depth = depth.saturating_sub(1),
                    b',' if depth == 0 => break,
                    _ => {}
                }
                self.i += 1;
            }
            let annotation = self.text[start..self.i].trim().to_string();
            self.expect(",")?;
            let value = self.ivalue()?;
            self.expect(")")?;
            return match (crate::values::types::parse_annotation(&annotation), value) {
                (Some(Type::List(elem)), IValue::List(l)) => {
                    Ok(IValue::List(List::new(*elem, l.items().to_vec())))
                }
                _ => self.err(format!("unsupported annotated value `{annotation}`")),
            };
        }
        match self.peek() {
            Some(b'"') => Ok(IValue::str(self.quoted()?)),
            Some(b'[') => {
                self.i += 1;
                let mut items = Vec::new();
                if !self.eat("]") {
                    loop {
                        items.push(self.ivalue()?);
                        if !self.eat(",") {
                            break;
                        }
                    }
                    self.expect("]")?;
                }
                let elem = items.first().map(ivalue_type).unwrap_or(Type::Any);
                Ok(IValue::List(List::new(elem, items)))
            }
            Some(b'(') => {
                self.i += 1;
                let mut items = Vec::new();
                if !self.eat(")") {
                    loop {
                        items.push(self.ivalue()?);
                        if !self.eat(",") {
                            break;
                        }
                        self.skip_ws();
                        if self.starts_with(")") {
                            break;
                        }
                    }
                    self.expect(")")?;
                }
                Ok(IValue::Tuple(Tuple::new(items)))
            }
            Some(b'{') => {
                // A one-element tensor printed as `{value}`.
                self.i += 1;
                let v = self.number()?;
                self.expect("}")?;
                Ok(IValue::Tensor(match v {
                    IValue::Int(i) => Tensor::scalar(i),
                    IValue::Double(d) => Tensor::scalar(d as f32),
                    _ => return self.err("unsupported tensor constant"),
                }))
            }
            Some(b'<') => {
                if self.eat("<Tensor>") {
                    // Only its elision survives printing: a placeholder just above the
                    // display size (zeros) prints as `<Tensor>` again.
                    let n = crate::values::aten_format::MAX_TENSOR_DISPLAY_SIZE + 1;
                    match Tensor::zeros(&[n], crate::tensor::DType::Float32) {
                        Ok(t) => Ok(IValue::Tensor(t)),
                        Err(e) => self.err(e.to_string()),
                    }
                } else {
                    self.err("unsupported attribute value")
                }
            }
            _ => {
                if self.eat("True") {
                    return Ok(IValue::Bool(true));
                }
                if self.eat("False") {
                    return Ok(IValue::Bool(false));
                }
                if self.eat("None") {
                    return Ok(IValue::None);
                }
                // An enum member: `__torch__.Color.RED` (its underlying value is not printed).
                if self
                    .peek()
                    .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
                    && !self.starts_with("inf")
                    && !self.starts_with("nan")
                {
                    let qualified = self.word(b".");
                    let Some((class, name)) = qualified.rsplit_once('.') else {
                        return self.err(format!("unsupported attribute value `{qualified}`"));
                    };
                    return Ok(IValue::Enum(std::sync::Arc::new(
                        crate::values::ivalue::EnumValue {
                            class: class.into(),
                            name: name.into(),
                            value: IValue::None,
                        },
                    )));
                }
                let start = self.i;
                let n = self.number()?;
                // Complex: `3.+4.j`
                if matches!(self.peek(), Some(b'+') | Some(b'-')) {
                    let sign = if self.peek() == Some(b'-') { -1.0 } else { 1.0 };
                    self.i += 1;
                    let im = self.number()?;
                    if !self.eat("j") {
                        self.i = start;
                        return self.err("malformed complex constant");
                    }
                    let re = match n {
                        IValue::Int(i) => i as f64,
                        IValue::Double(d) => d,
                        _ => 0.0,
                    };
                    let im = match im {
                        IValue::Int(i) => i as f64,
                        IValue::Double(d) => d,
                        _ => 0.0,
                    };
                    return Ok(IValue::Complex(num_complex::Complex64::new(re, sign * im)));
                }
                Ok(n)
            }
        }
    }

    fn number(&mut self) -> PResult<IValue> {
        self.skip_ws();
        let start = self.i;
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        let neg = self.i > start;
        if self.starts_with("inf") {
            self.i += 3;
            return Ok(IValue::Double(if neg {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            }));
        }
        if self.starts_with("nan") {
            self.i += 3;
            return Ok(IValue::Double(if neg { -f64::NAN } else { f64::NAN }));
        }
        let mut is_float = false;
        while let Some(c) = self.peek() {
            match c {
                b'0'..=b'9' => self.i += 1,
                b'.' => {
                    is_float = true;
                    self.i += 1;
                }
                b'e' | b'E' => {
                    is_float = true;
                    self.i += 1;
                    if matches!(self.peek(), Some(b'+') | Some(b'-')) {
                        self.i += 1;
                    }
                }
                _ => break,
            }
        }
        let lit = &self.text[start..self.i];
        if is_float {
            match lit.parse::<f64>() {
                Ok(d) => Ok(IValue::Double(d)),
                Err(_) => self.err(format!("malformed number `{lit}`")),
            }
        } else {
            match lit.parse::<i64>() {
                Ok(i) => Ok(IValue::Int(i)),
                Err(_) => self.err(format!("malformed number `{lit}`")),
            }
        }
    }

    /// A string as `c10::printQuotedString` writes it.
    fn quoted(&mut self) -> PResult<String> {
        self.i += 1;
        let mut out: Vec<u8> = Vec::new();
        loop {
            let Some(c) = self.peek() else {
                return self.err("unterminated string");
            };
            self.i += 1;
            match c {
                b'"' => break,
                b'\\' => {
                    let Some(e) = self.peek() else {
                        return self.err("unterminated string");
                    };
                    self.i += 1;
                    // three "digits" of a signed char (see `printer::c10_octal_escape`): each
                    // is '0' plus -7 to 7 (the first -2 to 1), so a UTF-8 byte reads back
                    let digits = match self.text.as_bytes().get(self.i..self.i + 2) {
                        Some(&[d1, d2])
                            if (b'.'..=b'1').contains(&e)
                                && [d1, d2].iter().all(|d| (b')'..=b'7').contains(d)) =>
                        {
                            Some([e, d1, d2])
                        }
                        _ => None,
                    };
                    if let Some(digits) = digits {
                        let v = digits
                            .iter()
                            .fold(0i32, |v, &d| v * 8 + i32::from(d) - i32::from(b'0'));
                        out.push(v as i8 as u8);
                        self.i += 2;
                        continue;
                    }
                    match e {
                        b'a' => out.push(7),
                        b'b' => out.push(8),
                        b'f' => out.push(12),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'v' => out.push(11),
                        b'0'..=b'7' => {
                            let mut v = u32::from(e - b'0');
                            for _ in 0..2 {
                                match self.peek() {
                                    Some(d @ b'0'..=b'7') => {
                                        v = v * 8 + u32::from(d - b'0');
                                        self.i += 1;
                                    }
                                    _ => break,
                                }
                            }
                            out.push((v & 0xff) as u8);
                        }
                        other => out.push(other),
                    }
                }
                other => out.push(other),
            }
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
    }
}

fn ivalue_type(v: &IValue) -> Type {
    match v {
        IValue::Int(_) => Type::Int,
        IValue::Double(_) => Type::Float,
        IValue::Bool(_) => Type::Bool,
        IValue::String(_) => Type::Str,
        IValue::Complex(_) => Type::Complex,
        IValue::Tensor(_) => Type::Tensor,
        IValue::Tuple(t) => Type::Tuple(t.items().iter().map(ivalue_type).collect()),
        IValue::List(l) => Type::list(l.elem_type().clone()),
        _ => Type::Any,
    }
}
