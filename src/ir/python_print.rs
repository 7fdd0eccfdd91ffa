//! `m.code`: TorchScript source regenerated from a method's graph, following PyTorch's
//! python_print.cpp (single-use values are inlined into their use, constants are printed in
//! place, loops and ifs become Python statements with explicit loop-carried assignments).

use std::collections::{HashMap, HashSet};

use super::graph::{Attr, BlockId, Def, Graph, NodeId, ValueId};
use super::printer::quoted_string;
use super::unit::Function;
use crate::ops::schema::{FunctionSchema, SchemaRegistry};
use crate::values::format::fmt_double;
use crate::values::types::Type;
use crate::values::IValue;

/// Why a graph could not be printed as code.
#[derive(Debug, thiserror::Error)]
#[error("code printer: {0}")]
pub struct PrintError(pub String);

type PResult<T> = Result<T, PrintError>;

/// One formal argument of an operator, as the printer needs it.
#[derive(Clone, Debug)]
pub struct OpArg {
    pub name: String,
    pub kwarg_only: bool,
    pub default: Option<IValue>,
    /// An `out=` argument (`Tensor(a!) out` after the `*`).
    pub is_out: bool,
}

/// The schema facts the printer needs for an operator call node.
#[derive(Clone, Debug)]
pub struct OpArgs {
    pub args: Vec<OpArg>,
    pub is_vararg: bool,
}

/// Where the printer finds an operator node's schema (argument names, defaults, kwarg-only).
pub trait SchemaSource {
    fn op_args(&self, g: &Graph, node: NodeId) -> Option<OpArgs>;
}

impl From<&FunctionSchema> for OpArgs {
    fn from(schema: &FunctionSchema) -> OpArgs {
        OpArgs {
            args: schema
                .arguments
                .iter()
                .map(|a| OpArg {
                    name: a.name.clone(),
                    kwarg_only: a.kwarg_only,
                    default: a.default.clone(),
                    is_out: a.kwarg_only && a.is_write,
                })
                .collect(),
            is_vararg: schema.is_vararg,
        }
    }
}

/// Schemas of compiled graphs: each operator node names the overload it resolved to, whose
/// schema is looked up in PyTorch's registry.
pub struct RegistrySchemas;

impl SchemaSource for RegistrySchemas {
    fn op_args(&self, g: &Graph, node: NodeId) -> Option<OpArgs> {
        let schema = SchemaRegistry::global().find(&g.node(node).qualified_op())?;
        Some(OpArgs::from(schema.as_ref()))
    }
}

/// A function's signature: the schema PyTorch prints in the `def` line.
#[derive(Clone, Debug)]
pub struct Signature {
    pub name: String,
    /// (name, type, default)
    pub args: Vec<(String, Type, Option<IValue>)>,
    pub returns: Type,
    /// Methods print `self` without its type.
    pub is_method: bool,
}

/// The printed code plus the tensor (and other non-literal) constants it references as
/// `CONSTANTS.c0`, `CONSTANTS.c1`, ... (`code_with_constants`).
#[derive(Clone, Debug)]
pub struct PrintedCode {
    pub code: String,
    pub constants: Vec<IValue>,
}

/// Print one function or method as `m.code` shows it.
pub fn print_code(g: &Graph, sig: &Signature, schemas: &dyn SchemaSource) -> PResult<PrintedCode> {
    let mut p = CodePrinter::new(g, schemas);
    p.function(sig)?;
    Ok(PrintedCode {
        code: p.out,
        constants: p.constants,
    })
}

/// Print a compiled function or method (`is_method`: its first argument is `self`) as
/// `m.code` / `m.<method>.code` shows it.
pub fn function_code(f: &Function, is_method: bool) -> PResult<PrintedCode> {
    let sig = Signature {
        name: f.name.clone(),
        args: f
            .signature
            .params
            .iter()
            .map(|p| (p.name.clone(), p.ty.clone(), p.default.clone()))
            .collect(),
        returns: f.signature.return_type.clone(),
        is_method,
    };
    print_code(&f.graph, &sig, &RegistrySchemas)
}

/// A use of a value: by a node input, or by a block's return list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum User {
    Node(NodeId),
    Return(BlockId),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Point {
    Node(NodeId),
    /// The block's parameter node (before its first node).
    Params(BlockId),
}

/// Names the printer may never generate (python_print.cpp's `reserved_names`).
const RESERVED_NAMES: &[&str] = &[
    "_",
    "aten",
    "attribute",
    "CONSTANTS",
    "fork",
    "getattr",
    "inf",
    "nan",
    "infj",
    "nanj",
    "ops",
    "__torch__",
    "and",
    "as",
    "assert",
    "async",
    "await",
    "break",
    "class",
    "continue",
    "def",
    "del",
    "elif",
    "else",
    "except",
    "False",
    "finally",
    "for",
    "from",
    "global",
    "if",
    "import",
    "in",
    "is",
    "lambda",
    "None",
    "nonlocal",
    "not",
    "or",
    "pass",
    "raise",
    "return",
    "True",
    "try",
    "while",
    "with",
    "yield",
    "uninitialized",
    "unchecked_cast",
];

struct CodePrinter<'a> {
    g: &'a Graph,
    schemas: &'a dyn SchemaSource,
    uses: HashMap<ValueId, Vec<(User, usize)>>,
    /// Node position within its block.
    position: HashMap<NodeId, usize>,
    inline: HashSet<NodeId>,
    expr: HashMap<ValueId, String>,
    used_names: HashSet<String>,
    next_id: HashMap<String, usize>,
    /// Values whose Optional/Union type an assignment has already annotated
    /// (`annotated_unions_`: keyed by value, so each variable is annotated once).
    annotated: HashSet<ValueId>,
    /// Values printed through another value's expression (`expr_table_` rather than
    /// `ident_refs_`): loop-carried block inputs aliasing the loop's outputs. An assignment to
    /// them never carries an annotation.
    aliases: HashSet<ValueId>,
    split_visited: HashMap<User, i64>,
    constants: Vec<IValue>,
    level: usize,
    out: String,
}

/// The base of the debug name PyTorch's graph would give `v` (`Value::debugNameBase`), if any.
///
/// `Graph::createGetAttr` names a `prim::GetAttr` output after the attribute
/// (`normalizeAttrName`: a numeric submodule name `0` becomes `_0`), and an assignment never
/// renames a value that already has a name; so `training0 = self.training` is a value named
/// `training` and `getattr(self, "0")` one named `_0`. tsrun's emitter leaves GetAttr outputs
/// unnamed, so the printer derives the name from the node.
fn name_base(g: &Graph, v: ValueId) -> Option<String> {
    if let Def::Node(n, _) = g.value(v).def {
        let node = g.node(n);
        if node.kind == "prim::GetAttr" {
            if let Some(Attr::Str(field)) = node.attr("name") {
                return Some(if field.bytes().all(|b| b.is_ascii_digit()) {
                    format!("_{field}")
                } else {
                    field.clone()
                });
            }
        }
    }
    // A purely numeric name is how the IR text parser keeps an unnamed value's number.
    let name = g.value(v).debug_name.as_deref()?;
    if name.is_empty() || name.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(debug_name_base(name).to_string())
}

/// `Value::debugNameBase`: the name without a numeric `.N` suffix.
fn debug_name_base(name: &str) -> &str {
    match name.rsplit_once('.') {
        Some((base, suffix))
            if !suffix.is_empty() && suffix.bytes().all(|b| b.is_ascii_digit()) =>
        {
            base
        }
        _ => name,
    }
}

fn make_valid_identifier(candidate: &str) -> String {
    let mut s = String::new();
    if candidate.is_empty() || candidate.as_bytes()[0].is_ascii_digit() {
        s.push('_');
    }
    for c in candidate.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            s.push(c);
        } else {
            s.push('_');
        }
    }
    s
}

fn is_valid_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A type as python_print writes annotations: like [`Type::annotation_str`], but `NoneType`
/// keeps that spelling (`-> NoneType`, `Tuple[int, NoneType]`).
fn annotation(t: &Type) -> String {
    let join = |ts: &[Type]| ts.iter().map(annotation).collect::<Vec<_>>().join(", ");
    match t {
        Type::NoneType => "NoneType".to_string(),
        Type::Optional(i) => format!("Optional[{}]", annotation(i)),
        Type::List(i) => format!("List[{}]", annotation(i)),
        Type::Dict(k, v) => format!("Dict[{}, {}]", annotation(k), annotation(v)),
        Type::Tuple(ts) if ts.is_empty() => "Tuple[()]".to_string(),
        Type::Tuple(ts) => format!("Tuple[{}]", join(ts)),
        Type::Union(ts) => format!("Union[{}]", join(ts)),
        Type::Future(i) => format!("Future[{}]", annotation(i)),
        Type::Await(i) => format!("Await[{}]", annotation(i)),
        Type::RRef(i) => format!("RRef[{}]", annotation(i)),
        other => other.annotation_str(),
    }
}

/// Types whose assignments python_print annotates (`UnionType` and `OptionalType` kinds).
fn is_union_like(t: &Type) -> bool {
    matches!(t, Type::Union(_) | Type::Optional(_))
}

/// `elementTypeCanBeInferredFromMembers`.
fn element_type_inferable(t: &Type) -> bool {
    !matches!(
        t,
        Type::Union(_) | Type::Optional(_) | Type::Number | Type::Any
    )
}

impl<'a> CodePrinter<'a> {
    fn new(g: &'a Graph, schemas: &'a dyn SchemaSource) -> Self {
        let mut uses: HashMap<ValueId, Vec<(User, usize)>> = HashMap::new();
        let mut position = HashMap::new();
        let mut stack = vec![g.root];
        while let Some(b) = stack.pop() {
            let block = g.block(b);
            for (i, &n) in block.nodes.iter().enumerate() {
                position.insert(n, i);
                for (k, &v) in g.node(n).inputs.iter().enumerate() {
                    uses.entry(v).or_default().push((User::Node(n), k));
                }
                stack.extend(g.node(n).blocks.iter().copied());
            }
            for (k, &v) in block.returns.iter().enumerate() {
                uses.entry(v).or_default().push((User::Return(b), k));
            }
        }
        CodePrinter {
            g,
            schemas,
            uses,
            position,
            inline: HashSet::new(),
            expr: HashMap::new(),
            used_names: HashSet::new(),
            next_id: HashMap::new(),
            annotated: HashSet::new(),
            aliases: HashSet::new(),
            split_visited: HashMap::new(),
            constants: Vec::new(),
            level: 0,
            out: String::new(),
        }
    }

    fn uses_of(&self, v: ValueId) -> &[(User, usize)] {
        self.uses.get(&v).map(Vec::as_slice).unwrap_or(&[])
    }

    fn kind(&self, n: NodeId) -> &str {
        &self.g.node(n).kind
    }

    fn user_kind(&self, u: User) -> &str {
        match u {
            User::Node(n) => self.kind(n),
            User::Return(_) => "prim::Return",
        }
    }

    fn user_inputs(&self, u: User) -> &[ValueId] {
        match u {
            User::Node(n) => &self.g.node(n).inputs,
            User::Return(b) => &self.g.block(b).returns,
        }
    }

    fn def_node(&self, v: ValueId) -> Option<NodeId> {
        match self.g.value(v).def {
            Def::Node(n, _) => Some(n),
            Def::Param(..) => None,
        }
    }

    // ---------- naming ----------

    fn gen_name(&mut self, candidate: &str) -> String {
        let mut name = candidate.to_string();
        while self.used_names.contains(&name) || RESERVED_NAMES.contains(&name.as_str()) {
            let id = self.next_id.entry(name.clone()).or_insert(0);
            let n = *id;
            *id += 1;
            name = format!("{candidate}{n}");
        }
        self.used_names.insert(name.clone());
        name
    }

    fn gen_unique_name_for(&mut self, v: ValueId) -> String {
        let candidate = match name_base(self.g, v) {
            Some(base) => make_valid_identifier(&base),
            None => "_".to_string(),
        };
        self.gen_name(&candidate)
    }

    fn assign_unique_names(&mut self, vs: &[ValueId]) {
        for &v in vs {
            let name = self.gen_unique_name_for(v);
            self.expr.insert(v, name);
        }
    }

    fn use_of(&self, v: ValueId) -> PResult<String> {
        self.expr.get(&v).cloned().ok_or_else(|| {
            PrintError(format!(
                "value %{} used before it was printed",
                super::printer::value_name(self.g, v)
            ))
        })
    }

    fn value_list(&self, vs: &[ValueId]) -> PResult<String> {
        Ok(vs
            .iter()
            .map(|&v| self.use_of(v))
            .collect::<PResult<Vec<_>>>()?
            .join(", "))
    }

    // ---------- inlining analysis (scanBlock / scanNode / scanValue) ----------

    fn prev_non_constant(&self, p: User) -> Point {
        let (block, mut pos) = match p {
            User::Node(n) => (
                self.g.node(n).owner,
                self.position.get(&n).copied().unwrap_or(0),
            ),
            User::Return(b) => (b, self.g.block(b).nodes.len()),
        };
        let nodes = &self.g.block(block).nodes;
        while pos > 0 {
            pos -= 1;
            let n = nodes[pos];
            if self.kind(n) != "prim::Constant" {
                return Point::Node(n);
            }
        }
        Point::Params(block)
    }

    fn can_inline(&self, v: ValueId) -> bool {
        let Some(n) = self.def_node(v) else {
            return false;
        };
        let node = self.g.node(n);
        if node.outputs.len() != 1 {
            return false;
        }
        let uses = self.uses_of(v);
        if uses.len() != 1 {
            return false;
        }
        let (user, offset) = uses[0];
        let user_kind = self.user_kind(user);
        if name_base(self.g, v).is_some() && user_kind != "prim::Return" {
            return false;
        }
        if !node.blocks.is_empty() {
            return false;
        }
        if user_kind == "prim::Loop" && offset >= 2 {
            return false;
        }
        if matches!(
            user_kind,
            "prim::fork" | "prim::rpc_async" | "prim::rpc_sync" | "prim::rpc_remote"
        ) {
            return false;
        }
        node.kind != "prim::isinstance"
    }

    fn scan_value(&mut self, block_point: Point, v: ValueId) -> Point {
        let Some(n) = self.def_node(v) else {
            return block_point;
        };
        if block_point == Point::Node(n) && self.can_inline(v) {
            let bp = self.scan_node(User::Node(n));
            self.inline.insert(n);
            bp
        } else {
            if self.kind(n) == "prim::Constant" {
                self.inline.insert(n);
            }
            block_point
        }
    }

    fn scan_node(&mut self, n: User) -> Point {
        if let User::Node(id) = n {
            if self.inline.contains(&id) {
                return Point::Node(id);
            }
            // a fork's subgraph is scanned where it prints, as a function body of its own
            if self.kind(id) != "prim::fork" {
                for b in self.g.node(id).blocks.clone() {
                    self.scan_block(b);
                }
            }
        }
        let mut bp = self.prev_non_constant(n);
        let inputs = self.user_inputs(n).to_vec();
        for &v in inputs.iter().rev() {
            bp = self.scan_value(bp, v);
        }
        bp
    }

    fn scan_block(&mut self, b: BlockId) {
        self.scan_node(User::Return(b));
        for n in self.g.block(b).nodes.clone().into_iter().rev() {
            self.scan_node(User::Node(n));
        }
    }

    /// Only `prim::Constant`s go to the top of the body: a `prim::Uninitialized` prints where
    /// the graph has it (the emitter puts it first in the function, in source order).
    fn is_constant(&self, n: NodeId) -> bool {
        self.kind(n) == "prim::Constant"
    }

    fn build_constant_list(&self, b: BlockId, out: &mut Vec<NodeId>) {
        let visit_inputs = |inputs: &[ValueId], out: &mut Vec<NodeId>| {
            for &v in inputs {
                if let Some(n) = self.def_node(v) {
                    if self.is_constant(n) && !out.contains(&n) {
                        out.push(n);
                    }
                }
            }
        };
        for &n in &self.g.block(b).nodes {
            visit_inputs(&self.g.node(n).inputs, out);
            // a fork's subgraph prints its constants at the top of its own body
            if self.kind(n) == "prim::fork" {
                continue;
            }
            for &nb in &self.g.node(n).blocks {
                self.build_constant_list(nb, out);
            }
        }
        visit_inputs(&self.g.block(b).returns, out);
    }

    // ---------- statements ----------

    fn indent(&mut self) {
        for _ in 0..self.level {
            self.out.push_str("  ");
        }
    }

    fn function(&mut self, sig: &Signature) -> PResult<()> {
        self.used_names.clear();
        let inputs = self.g.inputs().to_vec();
        if inputs.len() != sig.args.len() {
            return Err(PrintError(format!(
                "{} has {} arguments but its graph has {} inputs",
                sig.name,
                sig.args.len(),
                inputs.len()
            )));
        }
        self.indent();
        self.out.push_str(&format!("def {}(", sig.name));
        for (i, ((name, ty, default), &v)) in sig.args.iter().zip(&inputs).enumerate() {
            let arg_name = self.gen_name(name);
            if i == 0 {
                self.out.push_str(&arg_name);
                if !sig.is_method {
                    self.out.push_str(&format!(": {}", annotation(ty)));
                    self.annotated.insert(v);
                }
            } else {
                self.out
                    .push_str(&format!(",\n    {arg_name}: {}", annotation(ty)));
                self.annotated.insert(v);
            }
            if let Some(d) = default {
                let text = self.constant_text(d);
                self.out.push('=');
                self.out.push_str(&text);
            }
            self.expr.insert(v, arg_name);
        }
        self.out
            .push_str(&format!(") -> {}:\n", annotation(&sig.returns)));
        self.body(self.g.root)
    }

    fn body(&mut self, b: BlockId) -> PResult<()> {
        let mut constants = Vec::new();
        self.build_constant_list(b, &mut constants);
        self.scan_block(b);
        self.level += 1;
        for n in constants {
            self.node(n, true)?;
        }
        let returns = self.g.block(b).returns.clone();
        self.block(b, !returns.is_empty())?;
        if !returns.is_empty() {
            self.indent();
            let vals = self.value_list(&returns)?;
            self.out.push_str(&format!("return {vals}\n"));
        }
        self.level -= 1;
        Ok(())
    }

    fn block(&mut self, b: BlockId, has_other_statements: bool) -> PResult<()> {
        let nodes = self.g.block(b).nodes.clone();
        if !has_other_statements && nodes.is_empty() {
            self.indent();
            self.out.push_str("pass\n");
        }
        for n in nodes {
            self.node(n, false)?;
        }
        Ok(())
    }

    fn assignment(&mut self, lhs: &[ValueId], rhs: &[ValueId]) -> PResult<()> {
        if lhs.is_empty() {
            return Ok(());
        }
        self.indent();
        let mut line = self.value_list(lhs)?;
        // An if output (or while condition) keeps its Optional/Union type when re-parsed only
        // if annotated; Python allows no annotation on a multiple assignment.
        if let [v] = lhs {
            let ty = &self.g.value(*v).ty;
            if is_union_like(ty) && !self.aliases.contains(v) && self.annotated.insert(*v) {
                line.push_str(&format!(" : {}", annotation(ty)));
            }
        }
        line.push_str(" = ");
        line.push_str(&self.value_list(rhs)?);
        self.out.push_str(&line);
        self.out.push('\n');
        Ok(())
    }

    /// `printAnnotatedAssignment`: the assignments of a loop's initial carried values, one per
    /// line, annotated where re-parsing would otherwise give the variable a narrower type.
    fn annotated_assignment(&mut self, lhs: &[ValueId], rhs: &[ValueId]) -> PResult<()> {
        for (&l, &r) in lhs.iter().zip(rhs) {
            let ty = self.g.value(l).ty.clone();
            let annotate = if is_union_like(&ty) {
                self.annotated.insert(l)
            } else {
                ty != self.g.value(r).ty
            };
            let mut line = self.use_of(l)?;
            if annotate {
                line.push_str(&format!(": {}", annotation(&ty)));
            }
            line.push_str(&format!(" = {}\n", self.use_of(r)?));
            self.indent();
            self.out.push_str(&line);
        }
        Ok(())
    }

    fn output_definition(&mut self, n: NodeId, rhs: &str) {
        let outs = self.g.node(n).outputs.clone();
        self.assign_unique_names(&outs);
        self.indent();
        if !outs.is_empty() {
            let names: Vec<String> = outs
                .iter()
                .map(|v| self.expr.get(v).cloned().unwrap_or_default())
                .collect();
            self.out.push_str(&names.join(", "));
            self.out.push_str(" = ");
        }
        self.out.push_str(rhs);
        self.out.push('\n');
    }

    fn node(&mut self, n: NodeId, print_const: bool) -> PResult<()> {
        if !print_const && self.is_constant(n) {
            return Ok(());
        }
        let node = self.g.node(n);
        match node.kind.as_str() {
            "prim::Loop" => self.print_loop(n),
            "prim::If" => self.print_if(n),
            "prim::TupleUnpack" | "prim::ListUnpack" => {
                let outs = node.outputs.clone();
                let input = node.inputs.first().copied();
                self.assign_unique_names(&outs);
                self.indent();
                if !outs.is_empty() {
                    let l = self.value_list(&outs)?;
                    self.out.push_str(&format!("{l}, = "));
                }
                let src = match input {
                    Some(v) => self.use_of(v)?,
                    None => return Err(PrintError("unpack without input".into())),
                };
                self.out.push_str(&format!("{src}\n"));
                Ok(())
            }
            "prim::SetAttr" => {
                let name = attr_str(node, "name")?;
                let (obj, val) = match node.inputs.as_slice() {
                    [o, v] => (*o, *v),
                    _ => return Err(PrintError("prim::SetAttr takes two inputs".into())),
                };
                let line = format!("{}.{} = {}\n", self.use_of(obj)?, name, self.use_of(val)?);
                self.indent();
                self.out.push_str(&line);
                Ok(())
            }
            "prim::Enter" => {
                let input = node.inputs.first().copied();
                let out = node.outputs.first().copied();
                let Some(input) = input else {
                    return Err(PrintError("prim::Enter without input".into()));
                };
                let mut line = format!("with {}", self.use_of(input)?);
                if let Some(o) = out {
                    if !self.uses_of(o).is_empty() {
                        let name = self.gen_unique_name_for(o);
                        self.expr.insert(o, name.clone());
                        line.push_str(&format!(" as {name}"));
                    }
                }
                self.indent();
                self.out.push_str(&line);
                self.out.push_str(":\n");
                self.level += 1;
                Ok(())
            }
            "prim::Exit" => {
                let owner = node.owner;
                let pos = self.position.get(&n).copied().unwrap_or(0);
                let prev_is_enter = pos > 0
                    && self
                        .g
                        .block(owner)
                        .nodes
                        .get(pos - 1)
                        .is_some_and(|&p| self.kind(p) == "prim::Enter");
                if prev_is_enter {
                    self.indent();
                    self.out.push_str("pass\n");
                }
                self.level = self.level.saturating_sub(1);
                Ok(())
            }
            // always a statement, annotated with the interface type (PyTorch's printNode)
            "prim::ModuleContainerIndex" => {
                let outs = node.outputs.clone();
                let Some(&out) = outs.first() else {
                    return Err(PrintError(
                        "prim::ModuleContainerIndex without output".into(),
                    ));
                };
                self.assign_unique_names(&outs);
                let line = format!(
                    "{} : {} = {}[{}]\n",
                    self.use_of(out)?,
                    annotation(&self.g.value(out).ty),
                    self.input(n, 0)?,
                    self.input(n, 1)?
                );
                self.indent();
                self.out.push_str(&line);
                Ok(())
            }
            "prim::fork" => self.print_fork(n),
            "prim::Closure" | "prim::awaitable" => Err(PrintError(format!(
                "{} (a subgraph) cannot be printed yet",
                node.kind
            ))),
            _ => {
                let rhs = self.rhs(n)?;
                let long = rhs.len() + self.level * 2 >= 40;
                let is_constant = node.kind == "prim::Constant";
                if !self.inline.contains(&n) || (is_constant && long) {
                    self.output_definition(n, &rhs);
                } else {
                    let Some(&out) = node.outputs.first() else {
                        return Err(PrintError(format!("{} inlined without output", node.kind)));
                    };
                    self.expr.insert(out, rhs);
                    if long {
                        self.split_long_inlines(out)?;
                    }
                }
                Ok(())
            }
        }
    }

    fn is_non_constant_inline(&self, v: ValueId) -> bool {
        self.def_node(v)
            .is_some_and(|n| self.kind(n) != "prim::Constant" && self.inline.contains(&n))
    }

    fn split_long_inlines(&mut self, v: ValueId) -> PResult<()> {
        let Some(&(user, offset)) = self.uses_of(v).first() else {
            return Ok(());
        };
        let mut to_split = Vec::new();
        self.scan_long_inlines(user, offset as i64, &mut to_split);
        for &sv in to_split.iter().rev() {
            let Some(n) = self.def_node(sv) else { continue };
            let rhs = self.use_of(sv)?;
            self.output_definition(n, &rhs);
        }
        Ok(())
    }

    fn scan_long_inlines(&mut self, user: User, offset: i64, out: &mut Vec<ValueId>) {
        let present = self.split_visited.get(&user).copied();
        let lo = present.map(|p| p + 1).unwrap_or(0);
        let inputs = self.user_inputs(user).to_vec();
        let mut i = offset;
        while i >= lo {
            if let Some(&v) = inputs.get(i as usize) {
                if self.is_non_constant_inline(v) {
                    out.push(v);
                }
            }
            i -= 1;
        }
        self.split_visited.insert(user, offset);
        if present.is_none() {
            if let User::Node(un) = user {
                if self.inline.contains(&un) {
                    if let Some(&o) = self.g.node(un).outputs.first() {
                        if let Some(&(u2, off2)) = self.uses_of(o).first() {
                            self.scan_long_inlines(u2, off2 as i64 - 1, out);
                        }
                    }
                }
            }
        }
    }

    /// `prim::fork` as PyTorch prints it: the subgraph as a nested `def __forked_function():`
    /// reading the captured values by their names, then `f = fork(__forked_function)`.
    fn print_fork(&mut self, n: NodeId) -> PResult<()> {
        let Some(&body) = self.g.node(n).blocks.first() else {
            return Err(PrintError("prim::fork without a subgraph".into()));
        };
        let name = self.gen_name("__forked_function");
        self.indent();
        self.out.push_str(&format!("def {name}():\n"));
        let inputs = self.g.node(n).inputs.clone();
        let params = self.g.block(body).params.clone();
        for (&param, &captured) in params.iter().zip(&inputs) {
            let text = self.use_of(captured)?;
            self.expr.insert(param, text);
        }
        self.body(body)?;
        self.output_definition(n, &format!("fork({name})"));
        Ok(())
    }

    fn print_if(&mut self, n: NodeId) -> PResult<()> {
        let node = self.g.node(n);
        let outs = node.outputs.clone();
        let (then_b, else_b) = match node.blocks.as_slice() {
            [t, e] => (*t, *e),
            _ => return Err(PrintError("prim::If needs two blocks".into())),
        };
        let Some(&cond) = node.inputs.first() else {
            return Err(PrintError("prim::If without condition".into()));
        };
        self.assign_unique_names(&outs);
        self.indent();
        let c = self.use_of(cond)?;
        self.out.push_str(&format!("if {c}:\n"));
        for (b, header) in [(then_b, None), (else_b, Some("else:\n"))] {
            if let Some(h) = header {
                self.indent();
                self.out.push_str(h);
            }
            self.level += 1;
            let rets = self.g.block(b).returns.clone();
            self.block(b, !rets.is_empty())?;
            self.assignment(&outs, &rets)?;
            self.level -= 1;
        }
        Ok(())
    }

    fn print_loop(&mut self, n: NodeId) -> PResult<()> {
        let node = self.g.node(n);
        let (max_trip, input_cond) = match node.inputs.as_slice() {
            [m, c, ..] => (*m, *c),
            _ => {
                return Err(PrintError(
                    "prim::Loop needs a trip count and condition".into(),
                ))
            }
        };
        let carried_inputs = node.inputs[2..].to_vec();
        let carried_outputs = node.outputs.clone();
        let Some(&body) = node.blocks.first() else {
            return Err(PrintError("prim::Loop without body".into()));
        };
        let body_params = self.g.block(body).params.clone();
        let body_returns = self.g.block(body).returns.clone();
        let (Some(&trip), Some(&next_cond)) = (body_params.first(), body_returns.first()) else {
            return Err(PrintError(
                "prim::Loop body lacks trip count or condition".into(),
            ));
        };

        let const_bool = |v: ValueId| -> Option<bool> {
            let n = self.def_node(v)?;
            match self.g.constant_value(n)? {
                IValue::Bool(b) => Some(b),
                IValue::Int(i) => Some(i != 0),
                _ => None,
            }
        };
        let trip_const = self
            .def_node(max_trip)
            .and_then(|n| self.g.constant_value(n))
            .and_then(|v| v.as_int());
        let always_true =
            const_bool(input_cond) == Some(true) && const_bool(next_cond) == Some(true);
        let trip_specified = trip_const != Some(i64::MAX) || !self.uses_of(trip).is_empty();
        let as_for = if always_true {
            trip_specified
        } else if trip_specified {
            return Err(PrintError(
                "loop combines a trip count and a condition and cannot be printed as Python".into(),
            ));
        } else {
            false
        };

        self.assign_unique_names(&carried_outputs);
        for (bi, out) in body_params.iter().skip(1).zip(&carried_outputs) {
            let name = self.use_of(*out)?;
            self.expr.insert(*bi, name);
            self.aliases.insert(*bi);
        }
        self.annotated_assignment(&carried_outputs, &carried_inputs)?;
        self.assign_unique_names(&[trip]);
        if as_for {
            self.indent();
            let line = format!(
                "for {} in range({}):\n",
                self.use_of(trip)?,
                self.use_of(max_trip)?
            );
            self.out.push_str(&line);
        } else {
            self.assignment(&[trip], &[input_cond])?;
            self.indent();
            let line = format!("while {}:\n", self.use_of(trip)?);
            self.out.push_str(&line);
        }
        self.level += 1;
        let offset = usize::from(as_for);
        let carried_params = body_params[offset..].to_vec();
        self.block(body, !carried_params.is_empty())?;
        self.assignment(&carried_params, &body_returns[offset..])?;
        self.level -= 1;
        Ok(())
    }

    // ---------- expressions ----------

    fn output_type(&self, n: NodeId) -> PResult<&Type> {
        self.g
            .node(n)
            .outputs
            .first()
            .map(|&v| &self.g.value(v).ty)
            .ok_or_else(|| PrintError(format!("{} has no output", self.kind(n))))
    }

    fn single_input(&self, n: NodeId) -> PResult<String> {
        match self.g.node(n).inputs.first() {
            Some(&v) => self.use_of(v),
            None => Err(PrintError(format!("{} needs an input", self.kind(n)))),
        }
    }

    fn input(&self, n: NodeId, i: usize) -> PResult<String> {
        match self.g.node(n).inputs.get(i) {
            Some(&v) => self.use_of(v),
            None => Err(PrintError(format!("{} needs input {i}", self.kind(n)))),
        }
    }

    fn rhs(&mut self, n: NodeId) -> PResult<String> {
        let node = self.g.node(n);
        let inputs = node.inputs.clone();
        Ok(match node.kind.as_str() {
            "prim::Uninitialized" => {
                format!("uninitialized({})", annotation(self.output_type(n)?))
            }
            "prim::Constant" => self.constant_node_text(n)?,
            "aten::ScalarImplicit" => format!("annotate(number, {})", self.single_input(n)?),
            "aten::IntImplicit" => format!("annotate(int, {})", self.single_input(n)?),
            "aten::FloatImplicit" => format!("annotate(float, {})", self.single_input(n)?),
            "aten::ComplexImplicit" => format!("annotate(complex, {})", self.single_input(n)?),
            "aten::Int" => format!("int({})", self.value_list(&inputs)?),
            "aten::Float" => format!("float({})", self.value_list(&inputs)?),
            "aten::Bool" => format!("bool({})", self.value_list(&inputs)?),
            "aten::str" => format!("str({})", self.value_list(&inputs)?),
            "aten::sorted" => format!("sorted({})", self.value_list(&inputs)?),
            "prim::Print" => format!("print({})", self.value_list(&inputs)?),
            "prim::isinstance" => {
                let types = match node.attr("types") {
                    Some(Attr::Type(t)) => annotation(t),
                    // the emitter keeps several types as their annotation spellings
                    Some(Attr::Strs(ts)) if ts.len() == 1 => ts[0].clone(),
                    Some(Attr::Strs(ts)) => format!("({})", ts.join(", ")),
                    _ => {
                        return Err(PrintError(
                            "prim::isinstance lacks its `types` attribute".into(),
                        ))
                    }
                };
                format!("isinstance({}, {types})", self.single_input(n)?)
            }
            "prim::TupleConstruct" => {
                let ty = self.output_type(n)?.clone();
                let mut s = String::new();
                if let Type::Class(name) = &ty {
                    s.push_str(name);
                }
                let close = if inputs.len() == 1 { ",)" } else { ")" };
                s.push_str(&format!("({}{close}", self.value_list(&inputs)?));
                s
            }
            "prim::TupleIndex" => format!("({})[{}]", self.input(n, 0)?, self.input(n, 1)?),
            "prim::TupleSlice" => {
                let beg = attr_int(node, "beg")?;
                let end = attr_int(node, "end")?;
                format!("({})[{beg}:{end}]", self.single_input(n)?)
            }
            "prim::ListConstruct" => {
                let ty = self.output_type(n)?.clone();
                let elem_ok = match &ty {
                    Type::List(e) => element_type_inferable(e),
                    _ => true,
                };
                let items = format!("[{}]", self.value_list(&inputs)?);
                if inputs.is_empty() {
                    format!("annotate({}, [])", annotation(&ty))
                } else if !elem_ok {
                    format!("annotate({}, {items})", annotation(&ty))
                } else {
                    items
                }
            }
            "prim::DictConstruct" => {
                let ty = self.output_type(n)?.clone();
                let mut pairs = Vec::new();
                for kv in inputs.chunks(2) {
                    if let [k, v] = kv {
                        pairs.push(format!("{}: {}", self.use_of(*k)?, self.use_of(*v)?));
                    }
                }
                let dict = format!("{{{}}}", pairs.join(", "));
                let inferable = match &ty {
                    Type::Dict(k, v) => element_type_inferable(k) && element_type_inferable(v),
                    _ => true,
                };
                if inputs.is_empty() || !inferable {
                    format!("annotate({}, {dict})", annotation(&ty))
                } else {
                    dict
                }
            }
            "prim::CreateObject" => {
                let t = annotation(self.output_type(n)?);
                format!("{t}.__new__({t})")
            }
            "prim::GetAttr" => {
                let field = attr_str(node, "name")?;
                let obj = self.single_input(n)?;
                if is_valid_identifier(&field) {
                    format!("{obj}.{field}")
                } else {
                    format!("getattr({obj}, {})", quoted_string(&field))
                }
            }
            "prim::CallFunction" => {
                let mut s = format!("{}(", self.input(n, 0)?);
                for &v in inputs.iter().skip(1) {
                    s.push_str(&format!("{}, ", self.use_of(v)?));
                }
                s.push(')');
                s
            }
            "prim::CallMethod" => {
                let name = attr_str(node, "name")?;
                let mut s = format!("({}).{name}(", self.input(n, 0)?);
                for &v in inputs.iter().skip(1) {
                    s.push_str(&format!("{}, ", self.use_of(v)?));
                }
                s.push(')');
                s
            }
            "prim::unchecked_unwrap_optional" | "prim::unchecked_cast" => format!(
                "unchecked_cast({}, {})",
                annotation(self.output_type(n)?),
                self.single_input(n)?
            ),
            "prim::tolist" => format!(
                "annotate({}, {}.tolist())",
                annotation(self.output_type(n)?),
                self.input(n, 0)?
            ),
            "prim::EnumValue" => format!("({}).value", self.single_input(n)?),
            "prim::EnumName" => format!("({}).name", self.single_input(n)?),
            "aten::__getitem__" if inputs.len() == 2 => {
                let base = self.input(n, 0)?;
                let idx = self.input(n, 1)?;
                if is_valid_identifier(&base) {
                    format!("{base}[{idx}]")
                } else {
                    format!("({base})[{idx}]")
                }
            }
            _ => self.op_call(n)?,
        })
    }

    fn op_call(&mut self, n: NodeId) -> PResult<String> {
        let node = self.g.node(n);
        let kind = node.kind.as_str();
        let inputs = node.inputs.clone();
        let mut s = match kind {
            "aten::backward" => "torch.autograd.backward".to_string(),
            "aten::grad" => "torch.autograd.grad".to_string(),
            _ => match kind.split_once("::") {
                Some(("aten", name)) => format!("torch.{name}"),
                Some((ns, name)) => format!("ops.{ns}.{name}"),
                None => return Err(PrintError(format!("malformed operator kind `{kind}`"))),
            },
        };
        let schema = self
            .schemas
            .op_args(self.g, n)
            .ok_or_else(|| PrintError(format!("no schema known for {}", node.qualified_op())))?;
        s.push('(');
        let (necessary, num_out) = self.necessary_args(&schema, &inputs);
        for (i, &v) in inputs.iter().take(necessary).enumerate() {
            if i > 0 {
                s.push_str(", ");
            }
            if let Some(arg) = schema.args.get(i) {
                if arg.kwarg_only {
                    s.push_str(&arg.name);
                    s.push('=');
                }
            }
            s.push_str(&self.use_of(v)?);
        }
        let offset = schema.args.len().saturating_sub(num_out);
        for i in 0..num_out {
            if let (Some(arg), Some(&v)) = (schema.args.get(offset + i), inputs.get(offset + i)) {
                s.push_str(&format!(", {}={}", arg.name, self.use_of(v)?));
            }
        }
        s.push(')');
        Ok(s)
    }

    /// `CalculateNecessaryArgs`: trailing inputs equal to their schema default are dropped.
    fn necessary_args(&self, schema: &OpArgs, inputs: &[ValueId]) -> (usize, usize) {
        let args = &schema.args;
        if args.is_empty() {
            return (0, 0);
        }
        let mut idx = args.len() as i64 - 1;
        while idx >= 0 && args[idx as usize].is_out {
            idx -= 1;
        }
        let num_out = args.len() - (idx + 1) as usize;
        if args.len() < inputs.len() {
            return (inputs.len(), num_out);
        }
        while idx >= 0 {
            let Some(default) = &args[idx as usize].default else {
                break;
            };
            let Some(actual) = inputs
                .get(idx as usize)
                .and_then(|&v| self.def_node(v))
                .and_then(|n| self.typed_constant(n))
            else {
                break;
            };
            if !ivalue_equal(default, &actual) {
                break;
            }
            idx -= 1;
        }
        ((idx + 1) as usize, num_out)
    }

    /// A constant node's value with bool/device typing restored.
    fn typed_constant(&self, n: NodeId) -> Option<IValue> {
        let v = self.g.constant_value(n)?;
        let ty = self.g.node(n).outputs.first().map(|&o| &self.g.value(o).ty);
        Some(match (ty, v) {
            (Some(Type::Bool), IValue::Int(i)) => IValue::Bool(i != 0),
            (Some(Type::Device), IValue::String(s)) => {
                match crate::values::ivalue::Device::parse(&s) {
                    Some(d) => IValue::Device(d),
                    None => IValue::String(s),
                }
            }
            (_, v) => v,
        })
    }

    fn constant_node_text(&mut self, n: NodeId) -> PResult<String> {
        let node = self.g.node(n);
        let ty = self.output_type(n)?.clone();
        if let Type::Function(name) = &ty {
            return Ok(name.to_string());
        }
        if node.attrs.is_empty() {
            return Ok("None".to_string());
        }
        if let Some(Attr::Str(s)) = node.attr("name") {
            if node.attr("value").is_none() {
                return Ok(s.clone());
            }
        }
        let v = self
            .typed_constant(n)
            .ok_or_else(|| PrintError("constant without a printable value".into()))?;
        Ok(self.constant_text(&v))
    }

    fn constant_index(&mut self, v: &IValue) -> usize {
        if let Some(i) = self.constants.iter().position(|c| c.is_same(v)) {
            return i;
        }
        self.constants.push(v.clone());
        self.constants.len() - 1
    }

    /// `IValue::repr` with python_print's formatter: tensors, objects and non-ASCII strings
    /// become `CONSTANTS.cN`.
    fn constant_text(&mut self, v: &IValue) -> String {
        match v {
            IValue::Tensor(_) | IValue::Object(_) => {
                format!("CONSTANTS.c{}", self.constant_index(v))
            }
            // `containsNonASCIIString` looks inside containers too
            _ if contains_non_ascii(v) => format!("CONSTANTS.c{}", self.constant_index(v)),
            IValue::None => "None".to_string(),
            IValue::Bool(b) => if *b { "True" } else { "False" }.to_string(),
            IValue::Int(i) => i.to_string(),
            IValue::Double(d) => fmt_double(*d),
            IValue::Complex(c) => {
                let sign = if c.im >= 0.0 { "+" } else { "-" };
                format!("{}{}{}j", fmt_double(c.re), sign, fmt_double(c.im.abs()))
            }
            IValue::String(s) => quoted_string(s),
            IValue::Device(d) => format!("torch.device({})", quoted_string(&d.to_string())),
            IValue::List(l) => {
                let items: Vec<IValue> = l.to_vec();
                let body = format!(
                    "[{}]",
                    items
                        .iter()
                        .map(|x| self.constant_text(x))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                if items.is_empty() || !element_type_inferable(l.elem_type()) {
                    format!(
                        "annotate({}, {body})",
                        annotation(&Type::list(l.elem_type().clone()))
                    )
                } else {
                    body
                }
            }
            IValue::Tuple(t) => {
                let items: Vec<String> = t.items().iter().map(|x| self.constant_text(x)).collect();
                let prefix = t.class().map(|c| c.to_string()).unwrap_or_default();
                if items.len() == 1 {
                    format!("{prefix}({},)", items.join(", "))
                } else {
                    format!("{prefix}({})", items.join(", "))
                }
            }
            IValue::Dict(d) => {
                let entries = d.entries();
                let body = format!(
                    "{{{}}}",
                    entries
                        .iter()
                        .map(|(k, v)| format!(
                            "{}: {}",
                            self.constant_text(k),
                            self.constant_text(v)
                        ))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                if entries.is_empty()
                    || !element_type_inferable(d.key_type())
                    || !element_type_inferable(d.value_type())
                {
                    format!(
                        "annotate({}, {body})",
                        annotation(&Type::dict(d.key_type().clone(), d.value_type().clone()))
                    )
                } else {
                    body
                }
            }
            IValue::Enum(e) => format!("{}.{}", e.class, e.name),
            IValue::Function(n) => n.to_string(),
            IValue::Generator(g) => crate::ir::printer::generator_text(g),
            IValue::Storage(_) | IValue::Await(_) | IValue::Uninitialized | IValue::Future(_) => {
                format!("CONSTANTS.c{}", self.constant_index(v))
            }
        }
    }
}

/// Whether a constant holds a non-ASCII string anywhere (`IValue::visit` over its members).
fn contains_non_ascii(v: &IValue) -> bool {
    match v {
        IValue::String(s) => !s.is_ascii(),
        IValue::List(l) => l.to_vec().iter().any(contains_non_ascii),
        IValue::Tuple(t) => t.items().iter().any(contains_non_ascii),
        IValue::Dict(d) => d
            .entries()
            .iter()
            .any(|(k, v)| contains_non_ascii(k) || contains_non_ascii(v)),
        _ => false,
    }
}

fn attr_str(node: &super::graph::NodeData, name: &str) -> PResult<String> {
    match node.attr(name) {
        Some(Attr::Str(s)) => Ok(s.clone()),
        _ => Err(PrintError(format!(
            "{} lacks string attribute `{name}`",
            node.kind
        ))),
    }
}

fn attr_int(node: &super::graph::NodeData, name: &str) -> PResult<i64> {
    match node.attr(name) {
        Some(Attr::Int(i)) => Ok(*i),
        _ => Err(PrintError(format!(
            "{} lacks int attribute `{name}`",
            node.kind
        ))),
    }
}

/// IValue equality as `CalculateNecessaryArgs` compares a default with an actual constant.
fn ivalue_equal(a: &IValue, b: &IValue) -> bool {
    match (a, b) {
        (IValue::None, IValue::None) => true,
        (IValue::Bool(x), IValue::Bool(y)) => x == y,
        (IValue::Int(x), IValue::Int(y)) => x == y,
        (IValue::Double(x), IValue::Double(y)) => x == y,
        (IValue::String(x), IValue::String(y)) => x == y,
        (IValue::Device(x), IValue::Device(y)) => x == y,
        (IValue::List(x), IValue::List(y)) => {
            let (x, y) = (x.to_vec(), y.to_vec());
            x.len() == y.len() && x.iter().zip(&y).all(|(a, b)| ivalue_equal(a, b))
        }
        (IValue::Tuple(x), IValue::Tuple(y)) => {
            x.items().len() == y.items().len()
                && x.items()
                    .iter()
                    .zip(y.items())
                    .all(|(a, b)| ivalue_equal(a, b))
        }
        _ => false,
    }
}
