//! The TorchScript compiler front end: AST to SSA graph, following PyTorch's `ir_emitter.cpp`
//! on the already-lowered code PyTorch's printer writes into archives.
//!
//! Variables live in a stack of frames (one per block). `if` branches merge the variables
//! both branches see into `prim::If` outputs (in name order, as PyTorch's SSA conversion); loops
//! carry every outer variable their body assigns as `prim::Loop` block parameters. A variable
//! keeps the type it was declared with (`x : Union[int, str] = "a"` is a `str` value of a
//! `Union[int, str]` variable): merges are checked and loop bodies emitted against declared
//! types, as PyTorch's `Environment` types a read by the variable's last store.

pub mod builder;
mod expr;
mod fork;
pub mod matching;
mod stmt;

use crate::frontend::ast;
use crate::ir::decls::{ClassInfo, Declarations, Signature};
use crate::ir::graph::{Def, Graph, NodeId, ValueId};
use crate::ir::passes;
use crate::ir::CompileError;
use crate::values::types::Type;
use crate::values::IValue;
use builder::Builder;
use indexmap::IndexMap;
use std::collections::HashMap;
use std::sync::Arc;

/// Compile one function or method body to a graph (cleaned up as PyTorch does after emission).
/// `op_version` is the file format version of the archive the code comes from, for class
/// methods (PyTorch's `operator_set_version`): calls of operators changed since that version
/// match their old schemas and are replaced by PyTorch's upgraders.
pub fn emit_function(
    unit: &dyn Declarations,
    file: &ast::File,
    def: &ast::FunctionDef,
    signature: &Signature,
    class: Option<Arc<ClassInfo>>,
    op_version: Option<u64>,
) -> Result<Graph, CompileError> {
    // an archive as recent as every operator change compiles as code without a version
    let op_version = match op_version {
        Some(v) if crate::ir::upgraders::Upgraders::global()?.applies_to(v) => Some(v),
        _ => None,
    };
    let mut e = Emitter {
        unit,
        file,
        op_version,
        b: Builder::new(Graph::new()),
        frames: vec![Frame::default()],
        class,
        number_literals: HashMap::new(),
        ssa_names: HashMap::new(),
        loop_conditions: HashMap::new(),
        stand_ins: Vec::new(),
    };
    for p in &signature.params {
        let v = e.b.graph.add_input(p.ty.clone(), Some(p.name.clone()));
        e.frames[0].vars.insert(p.name.clone(), v);
    }
    let folded = fold_early_returns(&def.body);
    let body = folded.as_deref().unwrap_or(&def.body);
    let (last, init) = match body.split_last() {
        Some((last, init)) if matches!(last.kind, ast::StmtKind::Return(_)) => (Some(last), init),
        _ => (None, body),
    };
    e.emit_stmts(init)?;
    let result = match last.map(|s| (&s.kind, s.span)) {
        Some((ast::StmtKind::Return(Some(value)), _)) => {
            let v = e.emit_value(value, Some(&signature.return_type))?;
            e.b.source = Some(e.file.range(value.span));
            matching::convert_to_type(&mut e.b, &signature.return_type, v, true)
        }
        _ => e.b.none(),
    };
    let root = e.b.graph.root;
    e.b.graph.block_mut(root).returns = vec![result];
    // PyTorch's `emitOutput` registers a placeholder return (an Uninitialized value)
    // before SSA conversion; `LoopContinuations` then inserts a `false` constant
    e.b.graph.transient_value(None);
    // between emission and SSA conversion (`to_ir`): old operator calls become upgraders
    if let Some(version) = op_version {
        replace_old_operators(&mut e.b.graph, version, unit)?;
    }
    let root = e.b.graph.root;
    number_ssa_values(&mut e.b.graph, root, &e.ssa_names);
    // `LoopContinuations` inserts a `false` constant into the graph, then one into each
    // closure's block (a forked body is still a `prim::Closure` block of this graph)
    e.b.graph.transient_value(None);
    for _ in forked_result_types(&e.b.graph, root) {
        e.b.graph.transient_value(None);
    }
    number_loop_conditions(&mut e.b.graph, root, &e.loop_conditions);
    // `TransformExits` runs two exit transformers, each inserting `true`, `false` and an
    // Uninitialized unit value: first the one lowering loop continuations
    for _ in 0..3 {
        e.b.graph.transient_value(None);
    }
    let root = e.b.graph.root;
    if let Some(at) = throwing_node(&e.b.graph, root) {
        // the body always throws: the loop-continuation transformer already deletes what
        // follows (the return statement among it) and returns a fresh unit value
        // (numbered before the return transformer's three values, which then has no final
        // return left to lower)
        let unit = e.b.graph.create_node(
            "prim::Uninitialized",
            vec![],
            vec![signature.return_type.clone()],
        );
        e.b.graph.block_mut(root).returns = vec![e.b.graph.node(unit).outputs[0]];
        delete_after(&mut e.b.graph, root, at);
        e.b.graph.insert_at(root, 0, unit);
        for _ in 0..3 {
            e.b.graph.transient_value(None);
        }
        let root = e.b.graph.root;
        let forked = forked_result_types(&e.b.graph, root);
        number_return_units(&mut e.b.graph, forked, None);
    } else {
        // then the return transformer, whose lowering of the final return replaces the
        // placeholder return with one more unit value (observed: constants folded afterwards
        // are numbered 7 higher)
        for _ in 0..3 {
            e.b.graph.transient_value(None);
        }
        let root = e.b.graph.root;
        let forked = forked_result_types(&e.b.graph, root);
        number_return_units(&mut e.b.graph, forked, Some(&signature.return_type));
    }
    let spellings = class_spellings(unit, &e.b.graph);
    let mut graph = e.b.graph;
    graph.class_spellings = spellings;
    graph.erase_transients();
    passes::normalize_ops(&mut graph);
    number_inlined_forks(&mut graph);
    passes::cleanup(&mut graph);
    Ok(graph)
}

/// The variable an early return's value is carried in once folded: a printer temporary's
/// name, so the merged `if` output stays unnamed, as PyTorch's exit transform leaves it.
const FOLDED_RETURN: &str = "_0";

/// A body whose `if` returns early (`if c: return a` followed by the rest of the function,
/// ending in `return b`, as PyTorch's upgraders are written; archives' code never does) as
/// the single-return form PyTorch's exit transform makes of it: the rest becomes the `else`
/// branch and both branches' results the `if`'s output (`if c: _0 = a else: ...; _0 = b`,
/// then `return _0`). `None` when the body has no such `if`.
fn fold_early_returns(body: &[ast::Stmt]) -> Option<Vec<ast::Stmt>> {
    let is_return = |s: &ast::Stmt| matches!(s.kind, ast::StmtKind::Return(Some(_)));
    let at = body.iter().position(|s| match &s.kind {
        ast::StmtKind::If { body, orelse, .. } => {
            body.last().is_some_and(is_return) && orelse.is_empty()
        }
        _ => false,
    })?;
    if !body.last().is_some_and(is_return) || at + 1 == body.len() {
        return None;
    }
    let ast::StmtKind::If {
        cond, body: then, ..
    } = &body[at].kind
    else {
        return None;
    };
    let span = body[at].span;
    let rest = &body[at + 1..];
    let rest = fold_early_returns(rest).unwrap_or_else(|| rest.to_vec());
    let carry = |branch: &[ast::Stmt]| -> Vec<ast::Stmt> {
        let mut out = branch.to_vec();
        if let Some(ast::Stmt {
            kind: ast::StmtKind::Return(Some(value)),
            span,
        }) = out.pop()
        {
            let target = ast::Expr {
                kind: ast::ExprKind::Name(FOLDED_RETURN.to_string()),
                span: value.span,
            };
            out.push(ast::Stmt {
                kind: ast::StmtKind::Assign {
                    targets: vec![target],
                    value,
                },
                span,
            });
        }
        out
    };
    let mut folded = body[..at].to_vec();
    folded.push(ast::Stmt {
        kind: ast::StmtKind::If {
            cond: cond.clone(),
            body: carry(then),
            orelse: carry(&rest),
        },
        span,
    });
    folded.push(ast::Stmt {
        kind: ast::StmtKind::Return(Some(ast::Expr {
            kind: ast::ExprKind::Name(FOLDED_RETURN.to_string()),
            span,
        })),
        span,
    });
    Some(folded)
}

/// PyTorch's `ReplaceOldOperatorsWithUpgraders`: every call (in any block, in program
/// order) of an operator overload changed after file format `version` is replaced by its
/// upgrader's graph, inserted before the call with the call's inputs as its inputs (new
/// values numbered and named as PyTorch's `insertGraph` clones them); the call's outputs'
/// uses move to the upgrader's results and the call is destroyed. The inserted nodes are not
/// visited again.
fn replace_old_operators(
    graph: &mut Graph,
    version: u64,
    unit: &dyn Declarations,
) -> Result<(), CompileError> {
    let table = crate::ir::upgraders::Upgraders::global()?;
    let mut nodes = Vec::new();
    graph.walk(graph.root, &mut |n| nodes.push(n));
    for n in nodes {
        let node = graph.node(n);
        if node.overload.is_none() {
            continue;
        }
        let Some(entry) = table.find(&node.qualified_op(), version) else {
            continue;
        };
        let upgrader = unit.upgrader_graph(entry.upgrader)?;
        let mismatch = |message: String| CompileError::Upgrader {
            upgrader: entry.upgrader.to_string(),
            message,
        };
        let block = node.owner;
        let inputs = node.inputs.clone();
        let outputs = node.outputs.clone();
        let pos = graph
            .block(block)
            .nodes
            .iter()
            .position(|&x| x == n)
            .ok_or_else(|| mismatch("the call is not in its block".into()))?;
        let results = passes::insert_graph_before(graph, block, pos, &upgrader, &inputs)
            .map_err(|e| mismatch(e.to_string()))?;
        if results.len() != outputs.len() {
            return Err(mismatch(format!(
                "returns {} values for a call with {} outputs",
                results.len(),
                outputs.len()
            )));
        }
        for (&old, &new) in outputs.iter().zip(&results) {
            if graph.value(old).ty != graph.value(new).ty {
                return Err(mismatch(format!(
                    "returns {} where the call returns {}",
                    graph.value(new).ty,
                    graph.value(old).ty
                )));
            }
            graph.replace_all_uses(old, new);
        }
        graph.remove_node(n);
    }
    Ok(())
}

/// What PyTorch's exit transformer caches a unit value by: a type object. Primitive types
/// are shared singletons; a composite type (list, tuple, dict, ...) is a fresh object per
/// schema or annotation that made it, told apart here by its producer (the node computing a
/// forked body's result, or the function's return annotation).
#[derive(PartialEq)]
struct UnitKey {
    ty: Type,
    producer: Option<String>,
}

impl UnitKey {
    fn new(ty: Type, producer: impl FnOnce() -> String) -> UnitKey {
        let composite = matches!(
            ty,
            Type::Optional(_)
                | Type::List(_)
                | Type::Dict(..)
                | Type::Tuple(_)
                | Type::Union(_)
                | Type::Future(_)
                | Type::Await(_)
                | Type::RRef(_)
        );
        let producer = composite.then(producer);
        UnitKey { ty, producer }
    }
}

/// The unit keys of the forked bodies' results in `block` and the blocks under it, in the
/// order PyTorch's exit transformer reaches their returns (a nested fork's return before the
/// body holding it).
fn forked_result_types(graph: &Graph, block: crate::ir::graph::BlockId) -> Vec<UnitKey> {
    let mut keys = Vec::new();
    for &n in &graph.block(block).nodes {
        let node = graph.node(n);
        for &b in &node.blocks {
            keys.extend(forked_result_types(graph, b));
        }
        if node.kind != "prim::fork" {
            continue;
        }
        let result = node
            .blocks
            .first()
            .and_then(|&b| graph.block(b).returns.first().copied());
        if let (Some(Type::Future(t)), Some(result)) = (
            node.outputs.first().map(|&v| graph.value(v).ty.clone()),
            result,
        ) {
            keys.push(UnitKey::new(*t, || producer_of(graph, result)));
        }
    }
    keys
}

/// The operator (and called function or method name) computing `v`.
fn producer_of(graph: &Graph, v: ValueId) -> String {
    let Def::Node(n, _) = graph.value(v).def else {
        return format!("param {v:?}");
    };
    let node = graph.node(n);
    let mut text = node.qualified_op();
    if matches!(
        node.kind.as_str(),
        "prim::TupleConstruct" | "prim::ListConstruct" | "prim::DictConstruct"
    ) {
        // each construction makes its type object anew
        text.push_str(&format!(" {v:?}"));
    }
    if let Some(crate::ir::graph::Attr::Str(method)) = node.attr("name") {
        text.push(' ');
        text.push_str(method);
    }
    // a called function is an input of `Function` type
    for &i in &node.inputs {
        if let Type::Function(name) = &graph.value(i).ty {
            text.push(' ');
            text.push_str(name);
        }
    }
    text
}

/// The unit values PyTorch's return transformer creates while lowering returns: it deletes
/// each closure's placeholder return (and the function's, `main`) and replaces it with an
/// Uninitialized value cached per type object, so a type takes a number the first time it is
/// seen.
fn number_return_units(graph: &mut Graph, forked: Vec<UnitKey>, main: Option<&Type>) {
    let main = main.map(|t| UnitKey::new(t.clone(), || "return annotation".to_string()));
    let mut seen: Vec<UnitKey> = Vec::new();
    for key in forked.into_iter().chain(main) {
        if !seen.contains(&key) {
            graph.transient_value(None);
            seen.push(key);
        }
    }
}

/// The start of PyTorch's `runCleanupPasses`: `liftClosures` packs each forked closure's
/// context into two new tuples (two numbers per closure, in graph order), then
/// `inlineForkedClosures` replaces each `prim::forkClosure` by a `prim::fork` whose output is
/// a fresh value taking the old one's name: an unnamed fork output prints with a number above
/// every other value of the graph. Forks inside a fork's body belong to its subgraph, which
/// is numbered on its own.
fn number_inlined_forks(graph: &mut Graph) {
    fn collect(graph: &Graph, block: crate::ir::graph::BlockId, forks: &mut Vec<NodeId>) {
        for &n in &graph.block(block).nodes {
            if graph.node(n).kind == "prim::fork" {
                forks.push(n);
            } else {
                for &b in &graph.node(n).blocks {
                    collect(graph, b, forks);
                }
            }
        }
    }
    let mut forks = Vec::new();
    collect(graph, graph.root, &mut forks);
    graph.skip_unique(2 * forks.len());
    for n in forks {
        let overload = graph.node(n).overload.clone();
        graph.replace_with_new_symbol(n, "prim::fork", overload);
    }
}

/// Number and name the control-flow values PyTorch's `ConvertToSSA` adds after emission, in
/// its order: blocks first (innermost control flow first), then per merged `if` variable a
/// load in each branch and the node output; per loop-carried variable a load before the loop,
/// the block parameter (named even when the name is a temporary), a load at the block end and
/// the loop output.
fn number_ssa_values(
    graph: &mut Graph,
    block: crate::ir::graph::BlockId,
    names: &HashMap<ValueId, String>,
) {
    for n in graph.block(block).nodes.clone() {
        let kind = graph.node(n).kind.clone();
        for b in graph.node(n).blocks.clone() {
            number_ssa_values(graph, b, names);
        }
        // outputs (and carried parameters) were created in name order, the order
        // `ControlFlowLoadStores` adds them in (a `std::set` / sorted `definedVariables`)
        if kind == "prim::If" {
            for out in graph.node(n).outputs.clone() {
                let Some(name) = names.get(&out) else {
                    continue;
                };
                graph.transient_value(None);
                graph.transient_value(None);
                graph.assign_unique(out);
                if meaningful_name(name) {
                    graph.set_debug_name(out, name);
                }
            }
        } else if kind == "prim::Loop" {
            let body = graph.node(n).blocks.first().copied();
            let outs = graph.node(n).outputs.clone();
            let params = body
                .map(|b| graph.block(b).params.clone())
                .unwrap_or_default();
            // block parameters after the iteration counter pair with the outputs
            for (&out, &param) in outs.iter().zip(params.iter().skip(1)) {
                let Some(name) = names.get(&out) else {
                    continue;
                };
                graph.transient_value(None);
                graph.assign_unique(param);
                graph.set_debug_name(param, name);
                graph.transient_value(None);
                graph.assign_unique(out);
                if meaningful_name(name) {
                    graph.set_debug_name(out, name);
                }
            }
        }
    }
}

/// The position of the first node of `block` that always throws, as `ExitTransformer`
/// classifies them: a `prim::RaiseException`, or a `prim::If` both of whose branches throw
/// (a loop may not run, so it never throws).
fn throwing_node(graph: &Graph, block: crate::ir::graph::BlockId) -> Option<usize> {
    graph.block(block).nodes.iter().position(|&n| {
        let node = graph.node(n);
        match node.kind.as_str() {
            "prim::RaiseException" => true,
            "prim::If" => {
                !node.blocks.is_empty()
                    && node
                        .blocks
                        .iter()
                        .all(|&b| throwing_node(graph, b).is_some())
            }
            _ => false,
        }
    })
}

/// `deleteAfterExitNodes`: remove the nodes of `block` after position `at`, last first (so
/// none is removed while a later node still uses it).
fn delete_after(graph: &mut Graph, block: crate::ir::graph::BlockId, at: usize) {
    let later: Vec<NodeId> = graph.block(block).nodes[at + 1..].to_vec();
    for n in later.into_iter().rev() {
        graph.remove_node(n);
    }
}

/// How the graph printer spells the enum, interface and NamedTuple classes the graph's values
/// mention (PyTorch's `EnumType::str`, `InterfaceType::str`, `TupleType::str`).
fn class_spellings(
    unit: &dyn Declarations,
    graph: &Graph,
) -> std::collections::BTreeMap<String, String> {
    let mut names = Vec::new();
    for v in &graph.values {
        v.ty.class_names(&mut names);
    }
    let mut out = std::collections::BTreeMap::new();
    let mut seen = std::collections::HashSet::new();
    while let Some(name) = names.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        let Some(class) = unit.class(&name) else {
            continue;
        };
        let spelling = match class.kind {
            ast::ClassKind::Enum => format!("Enum<{name}>"),
            ast::ClassKind::Interface | ast::ClassKind::ModuleInterface => {
                let short = name.rsplit('.').next().unwrap_or(&name);
                format!("InterfaceType<{short}>")
            }
            ast::ClassKind::NamedTuple => {
                for (_, t, _) in &class.fields {
                    t.class_names(&mut names);
                }
                let fields: Vec<String> = class
                    .fields
                    .iter()
                    .map(|(f, t, _)| format!("{f} : {t}"))
                    .collect();
                format!("NamedTuple({})", fields.join(", "))
            }
            _ => continue,
        };
        out.insert(name.to_string(), spelling);
    }
    out
}

/// A `while` loop's initial condition as PyTorch numbers it later: its values with their
/// offsets, and how many numbers it takes.
type DeferredCondition = (Vec<(ValueId, usize)>, usize);

/// `InlineLoopCondition`: each `while` loop's initial condition is a copy made now (inner
/// loops first).
fn number_loop_conditions(
    graph: &mut Graph,
    block: crate::ir::graph::BlockId,
    conditions: &HashMap<NodeId, DeferredCondition>,
) {
    for n in graph.block(block).nodes.clone() {
        for b in graph.node(n).blocks.clone() {
            number_loop_conditions(graph, b, conditions);
        }
        if let Some((values, count)) = conditions.get(&n) {
            graph.number_deferred(values, *count);
        }
    }
}

/// Variables assigned in one block.
#[derive(Default)]
struct Frame {
    vars: IndexMap<String, ValueId>,
    /// Names bound to a global that is not a value (`_0 = __torch__.m.f`, a function or
    /// class): calls through them resolve like calls of the global itself.
    aliases: IndexMap<String, String>,
    /// Nested `def`s (closures) not yet forked, by name.
    closures: HashMap<String, Arc<ast::FunctionDef>>,
    /// The type a variable of this block was declared with where it differs from its value's
    /// type: PyTorch's `Environment` reads a variable with the type of its last store
    /// (`padding : Union[int, str] = "same"` stores a `str` value as `Union[int, str]`).
    declared: HashMap<String, Type>,
}

struct Emitter<'a> {
    unit: &'a dyn Declarations,
    file: &'a ast::File,
    /// The archive's file format version when compiling a class method of an archive: calls
    /// match the schemas operators had then.
    op_version: Option<u64>,
    b: Builder,
    frames: Vec<Frame>,
    /// The class whose method is being compiled.
    #[allow(dead_code)]
    class: Option<Arc<ClassInfo>>,
    /// Number literals already materialized at the top of the graph, by kind and bits: PyTorch
    /// emits each distinct int/float/complex literal once per function, before the first node.
    number_literals: HashMap<(u8, u64, u64), ValueId>,
    /// Control-flow outputs (and loop-carried parameters) PyTorch creates only during SSA
    /// conversion, with the variable they carry.
    ssa_names: HashMap<ValueId, String>,
    /// Per `while` loop, the values of its initial condition (with their offsets) and how
    /// many numbers the condition takes: PyTorch numbers that copy when it inlines the
    /// condition, after SSA conversion.
    loop_conditions: HashMap<NodeId, DeferredCondition>,
    /// Values of the current statement that PyTorch holds as a different, later removed
    /// value (a variable read is a `prim::Load`, an element of a literal tuple a
    /// `prim::TupleIndex`): assigning them names that stand-in, not the value.
    stand_ins: Vec<(ValueId, usize)>,
}

/// The type of variable `name` as bound in `frame` (its declared type, else its value's).
fn frame_var_type(e: &Emitter<'_>, frame: &Frame, name: &str) -> Option<Type> {
    let v = frame.vars.get(name)?;
    Some(
        frame
            .declared
            .get(name)
            .cloned()
            .unwrap_or_else(|| e.b.ty(*v).clone()),
    )
}

/// Names PyTorch gives values (`_0`, `_1` are printer temporaries and stay unnamed).
fn meaningful_name(name: &str) -> bool {
    match name.strip_prefix('_') {
        None => !name.is_empty(),
        Some(rest) => rest.chars().any(|c| !c.is_ascii_digit()),
    }
}

impl Emitter<'_> {
    fn err(&self, span: ast::Span, message: impl Into<String>) -> CompileError {
        let range = self.file.range(span);
        CompileError::At {
            location: range.location(),
            message: message.into(),
            at: Box::new(range.code_location()),
        }
    }

    fn lookup(&self, name: &str) -> Option<ValueId> {
        self.frames
            .iter()
            .rev()
            .find_map(|f| f.vars.get(name).copied())
    }

    /// A number literal as PyTorch's `materializeConstant`: one constant per distinct value
    /// in the whole function, inserted before the graph's first node. `0.` and `-0.` (one
    /// literal in archive code, whose parser folds the sign in) are distinct: PyTorch gives
    /// each its own constant.
    fn number_literal(&mut self, value: IValue) -> ValueId {
        let key = match &value {
            IValue::Int(i) => (0, *i as u64, 0),
            IValue::Double(f) => (1, f.to_bits(), 0),
            IValue::Complex(c) => (2, c.re.to_bits(), c.im.to_bits()),
            _ => (3, 0, 0),
        };
        let is_nan = matches!(&value, IValue::Double(f) if f.is_nan())
            || matches!(&value, IValue::Complex(c) if c.re.is_nan() || c.im.is_nan());
        if let Some(&v) = self.number_literals.get(&key).filter(|_| !is_nan) {
            return v;
        }
        let v = self.b.constant_at_front(value);
        self.number_literals.insert(key, v);
        v
    }

    /// PyTorch's emitter reads a variable through a `prim::Load` whose output takes the
    /// variable's name until SSA conversion erases it; it still shifts the numbering and
    /// renames the value holding the name (`x` becomes `x.1`).
    fn load_var(&mut self, name: &str) -> usize {
        let named = meaningful_name(name).then_some(name);
        self.b.graph.transient_value(named)
    }

    /// Bind `name` in the innermost frame, naming the value after it when it is defined in
    /// the current block and still unnamed.
    fn set_var(&mut self, name: &str, v: ValueId) {
        // a value PyTorch holds as a stand-in (a load, a tuple index) names the stand-in
        if let Some(&(_, load)) = self.stand_ins.iter().rev().find(|(lv, _)| *lv == v) {
            if meaningful_name(name) && !self.b.graph.transient_named(load) {
                self.b.graph.set_transient_name(load, name);
            }
            self.bind(name, v);
            return;
        }
        let in_block = match self.b.graph.value(v).def {
            Def::Node(n, _) => self.b.graph.node(n).owner == self.b.block,
            Def::Param(b, _) => b == self.b.block,
        };
        if in_block && meaningful_name(name) && self.b.graph.value(v).debug_name.is_none() {
            self.b.graph.set_debug_name(v, name);
        }
        self.bind(name, v);
    }

    /// Record `name = v` in the innermost frame; re-assigning a variable of an enclosing
    /// block looks it up there first (a load).
    fn bind(&mut self, name: &str, v: ValueId) {
        let innermost = self.frames.len().saturating_sub(1);
        let in_parent = self.frames[..innermost]
            .iter()
            .any(|f| f.vars.contains_key(name));
        if in_parent {
            self.load_var(name);
        }
        if let Some(f) = self.frames.last_mut() {
            f.vars.insert(name.to_string(), v);
            // a plain store types the variable as its value
            f.declared.remove(name);
        }
    }

    /// The type PyTorch's emitter gives a read of variable `name`: its declared type in the
    /// innermost block binding it, else the type of its value.
    fn var_type(&self, name: &str) -> Option<Type> {
        let frame = self
            .frames
            .iter()
            .rev()
            .find(|f| f.vars.contains_key(name))?;
        frame_var_type(self, frame, name)
    }

    /// Bind `name` in the innermost frame to `v`, whose variable PyTorch types as `declared`.
    fn bind_declared(&mut self, name: &str, v: ValueId, declared: Type) {
        if let Some(f) = self.frames.last_mut() {
            f.vars.insert(name.to_string(), v);
            if declared == *self.b.ty(v) {
                f.declared.remove(name);
            } else {
                f.declared.insert(name.to_string(), declared);
            }
        }
    }

    /// The global a name was bound to by `name = some.global.function`.
    fn lookup_alias(&self, name: &str) -> Option<String> {
        self.frames
            .iter()
            .rev()
            .find_map(|f| f.aliases.get(name).cloned())
    }

    /// The closure a name is bound to by a nested `def`.
    fn lookup_closure(&self, name: &str) -> Option<Arc<ast::FunctionDef>> {
        self.frames
            .iter()
            .rev()
            .find_map(|f| f.closures.get(name).cloned())
    }

    fn push_frame(&mut self) {
        self.frames.push(Frame::default());
    }
    fn pop_frame(&mut self) -> Frame {
        self.frames.pop().unwrap_or_default()
    }

    /// The element types of a tuple or NamedTuple type.
    fn tuple_types(&self, ty: &Type) -> Option<Vec<Type>> {
        match ty {
            Type::Tuple(ts) => Some(ts.clone()),
            Type::Class(c) => {
                let class = self.unit.class(c)?;
                (class.kind == ast::ClassKind::NamedTuple)
                    .then(|| class.fields.iter().map(|(_, t, _)| t.clone()).collect())
            }
            _ => None,
        }
    }
}
