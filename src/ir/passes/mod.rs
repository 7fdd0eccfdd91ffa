//! Graph passes run after emission and for `inlined_graph`: dead code elimination, constant
//! pooling and inlining of calls (PyTorch's `EliminateDeadCode`, `ConstantPooling`, `Inline`).

mod canonicalize;
mod constprop;
pub mod effects;
mod inline;
pub mod inplace_geometry;
pub mod invariant_regions;
mod list_idioms;
mod normalize;
mod peephole;

pub use canonicalize::canonicalize_outputs;
pub(crate) use constprop::evaluate_if_constant;
pub use constprop::{is_mutable_type, propagate_constants};
pub use inline::{inline_calls, insert_graph_before, CalleeGraphs};
pub use normalize::{canonical_alias, normalize_ops};
pub use peephole::peephole_optimize;

use crate::ir::graph::{Attr, BlockId, Def, Graph, NodeId, ValueId};
use crate::ops::schema::SchemaRegistry;
use crate::values::types::Type;
use crate::values::IValue;
use std::collections::HashSet;

/// Node kinds that act on the world (or on objects) and are kept even when their outputs are
/// unused.
const EFFECTFUL_KINDS: &[&str] = &[
    "prim::RaiseException",
    "prim::SetAttr",
    "prim::Print",
    "aten::warn",
    "prim::CallMethod",
    "prim::CallFunction",
    "prim::Enter",
    "prim::Exit",
    // a forked task runs whether or not its future is waited for
    "prim::fork",
    "prim::AddStatValue",
    "prim::TimePoint",
    "prim::Store",
    "prim::sleep",
    "aten::manual_seed",
];

/// Whether a node must be kept even when its outputs are unused.
pub fn has_side_effects(graph: &Graph, node: NodeId) -> bool {
    let n = graph.node(node);
    let kind = n.kind.as_str();
    if EFFECTFUL_KINDS.contains(&kind) {
        return true;
    }
    if kind == "prim::Loop" && may_not_terminate(graph, node) {
        return true;
    }
    if !n.blocks.is_empty() {
        return n.blocks.iter().any(|&b| {
            graph
                .block(b)
                .nodes
                .iter()
                .any(|&c| has_side_effects(graph, c))
        });
    }
    if kind.starts_with("prim::") {
        return false;
    }
    // operators that mutate an argument (or are unknown) are kept
    SchemaRegistry::global()
        .find(&n.qualified_op())
        .is_none_or(|s| s.is_mutable() || s.returns.is_empty())
}

/// Whether `loop` is a `while` loop whose condition is the constant `True`: running it forever
/// is its effect, so dead code elimination keeps it, as PyTorch's does.
fn may_not_terminate(graph: &Graph, lp: NodeId) -> bool {
    let is_const = |v: ValueId, want: i64| {
        producer(graph, v).is_some_and(|p| {
            let p = graph.node(p);
            p.kind == "prim::Constant"
                && match p.attr("value") {
                    Some(Attr::Int(i)) => *i == want,
                    Some(Attr::Value(IValue::Bool(b))) => i64::from(*b) == want,
                    Some(Attr::Value(IValue::Int(i))) => *i == want,
                    _ => false,
                }
        })
    };
    let n = graph.node(lp);
    let cond_true = n
        .blocks
        .first()
        .and_then(|&b| graph.block(b).returns.first());
    n.inputs.first().is_some_and(|&t| is_const(t, i64::MAX))
        && n.inputs.get(1).is_some_and(|&c| is_const(c, 1))
        && cond_true.is_some_and(|&c| is_const(c, 1))
}

/// Remove nodes whose outputs are unused and that have no side effects, innermost first.
pub fn eliminate_dead_code(graph: &mut Graph) {
    loop {
        let used = used_values(graph);
        let unobserved = unobserved_writes(graph, &used);
        let mut removed = false;
        let mut all = Vec::new();
        graph.walk(graph.root, &mut |n| all.push(n));
        for &n in all.iter().rev() {
            removed |= remove_dead_control_outputs(graph, n, &used);
            let node = graph.node(n);
            let live = node.outputs.iter().any(|o| used.contains(o));
            if !live && (unobserved.contains(&n) || !has_side_effects(graph, n)) {
                graph.remove_node(n);
                removed = true;
            }
        }
        if !removed {
            break;
        }
    }
}

/// In-place operator calls whose writes nobody can observe: every tensor they write is the
/// fresh result of a non-aliasing operator (`aten::empty`, ...) that nothing else reads. PyTorch's
/// dead code elimination asks its alias analysis whether a write reaches a live value
/// (`writesToAlias(node, liveValues)`), so `torch.empty(1).uniform_(0.0, n)` whose result is
/// unused disappears there (after inlining, say, when the caller ignores the drawn number).
/// Only this clear case is recognized; other writes are kept, the conservative direction.
fn unobserved_writes(graph: &Graph, used: &HashSet<ValueId>) -> HashSet<NodeId> {
    let schemas = SchemaRegistry::global();
    let mut users: std::collections::HashMap<ValueId, Vec<NodeId>> = Default::default();
    let mut returned = HashSet::new();
    let mut all = Vec::new();
    graph.walk(graph.root, &mut |n| all.push(n));
    for &n in &all {
        for &v in &graph.node(n).inputs {
            users.entry(v).or_default().push(n);
        }
        for &b in &graph.node(n).blocks {
            returned.extend(graph.block(b).returns.iter().copied());
        }
    }
    returned.extend(graph.block(graph.root).returns.iter().copied());
    let fresh = |v: ValueId| {
        producer(graph, v).is_some_and(|p| {
            let p = graph.node(p);
            p.kind.starts_with("aten::")
                && p.blocks.is_empty()
                && schemas.find(&p.qualified_op()).is_some_and(|s| {
                    !s.is_mutable() && !s.is_varret && s.returns.iter().all(|r| r.alias.is_none())
                })
        })
    };
    // Candidates: unused outputs, an aten schema that writes only fresh tensors.
    let mut writes: Vec<(NodeId, Vec<ValueId>)> = Vec::new();
    for &n in &all {
        let node = graph.node(n);
        if !node.kind.starts_with("aten::")
            || !node.blocks.is_empty()
            || EFFECTFUL_KINDS.contains(&node.kind.as_str())
            || node.outputs.iter().any(|o| used.contains(o))
        {
            continue;
        }
        let Some(schema) = schemas.find(&node.qualified_op()) else {
            continue;
        };
        if schema.is_vararg || !schema.is_mutable() {
            continue;
        }
        let written: Vec<ValueId> = schema
            .arguments
            .iter()
            .zip(&node.inputs)
            .filter(|(a, _)| a.is_write)
            .map(|(_, &v)| v)
            .collect();
        if written.iter().all(|&v| fresh(v) && !returned.contains(&v)) {
            writes.push((n, written));
        }
    }
    // A candidate stays only while every reader of what it writes is itself a candidate.
    let mut removable: HashSet<NodeId> = writes.iter().map(|(n, _)| *n).collect();
    loop {
        let before = removable.len();
        for (n, written) in &writes {
            let observed = written.iter().any(|v| {
                users
                    .get(v)
                    .is_some_and(|us| us.iter().any(|u| !removable.contains(u)))
            });
            if observed {
                removable.remove(n);
            }
        }
        if removable.len() == before {
            return removable;
        }
    }
}

/// `removeDeadBlockOutputs` / `removeDeadLoopOutputs`: drop the outputs of an if that
/// nothing uses, and the loop-carried values whose loop output and body parameter are both
/// unused (with the inputs, parameters and returns that carried them). Re-compiling printed
/// code creates such values: `while c: ... c = ...` carries `c` although only the loop
/// condition reads it. `used` may be stale in the safe direction (it only over-approximates).
fn remove_dead_control_outputs(graph: &mut Graph, n: NodeId, used: &HashSet<ValueId>) -> bool {
    let node = graph.node(n);
    let is_if = node.kind == "prim::If";
    let is_loop = node.kind == "prim::Loop";
    if !is_if && !is_loop {
        return false;
    }
    let outputs = node.outputs.clone();
    let blocks = node.blocks.clone();
    let n_inputs = node.inputs.len();
    let mut removed = false;
    for i in (0..outputs.len()).rev() {
        if used.contains(&outputs[i]) {
            continue;
        }
        if is_if {
            for &b in &blocks {
                if i < graph.block(b).returns.len() {
                    graph.block_mut(b).returns.remove(i);
                }
            }
        } else {
            // carried value i: node input 2 + i, body parameter and return 1 + i
            let Some(&body) = blocks.first() else {
                continue;
            };
            let consistent = n_inputs == outputs.len() + 2
                && graph.block(body).params.len() == outputs.len() + 1
                && graph.block(body).returns.len() == outputs.len() + 1;
            if !consistent || used.contains(&graph.block(body).params[i + 1]) {
                continue;
            }
            graph.node_mut(n).inputs.remove(i + 2);
            let param = graph.block_mut(body).params.remove(i + 1);
            graph.free_value_name(param);
            graph.block_mut(body).returns.remove(i + 1);
        }
        let output = graph.node_mut(n).outputs.remove(i);
        graph.free_value_name(output);
        removed = true;
    }
    if removed {
        for (k, v) in graph.node(n).outputs.clone().into_iter().enumerate() {
            graph.value_mut(v).def = Def::Node(n, k);
        }
        if is_loop {
            if let Some(&body) = blocks.first() {
                for (k, v) in graph.block(body).params.clone().into_iter().enumerate() {
                    graph.value_mut(v).def = Def::Param(body, k);
                }
            }
        }
    }
    removed
}

/// Values used as a node input or block return by any reachable node.
fn used_values(graph: &Graph) -> HashSet<ValueId> {
    let mut used = HashSet::new();
    collect_uses(graph, graph.root, &mut used);
    used
}

fn collect_uses(graph: &Graph, block: BlockId, used: &mut HashSet<ValueId>) {
    used.extend(graph.block(block).returns.iter().copied());
    for &n in &graph.block(block).nodes {
        used.extend(graph.node(n).inputs.iter().copied());
        for &b in &graph.node(n).blocks {
            collect_uses(graph, b, used);
        }
    }
}

/// A hashable identity for a constant: its output type and attribute.
fn constant_key(graph: &Graph, node: NodeId) -> Option<String> {
    let n = graph.node(node);
    let ty = graph.value(*n.outputs.first()?).ty.to_string();
    let attr = match n.attr("value") {
        None => "None".to_string(),
        Some(Attr::Int(i)) => format!("i{i}"),
        Some(Attr::Float(f)) => format!("f{}", f.to_bits()),
        Some(Attr::Str(s)) => format!("s{s:?}"),
        Some(Attr::Value(v)) => match v {
            // equal tensors (dtype, shape, values: `tensorEqual`) are pooled
            crate::values::IValue::Tensor(t) => {
                let values = t.to_vec::<f64>().ok()?;
                if values.iter().any(|x| x.is_nan()) {
                    return None;
                }
                let bits: Vec<u64> = values
                    .iter()
                    .map(|x| if *x == 0.0 { 0 } else { x.to_bits() })
                    .collect();
                format!("t{:?}{:?}{bits:?}", t.dtype(), t.shape())
            }
            // an enum member equals only itself: `ivaluesEqual` compares the holders' pointers,
            // so two `Format.NCHW` the compiler emitted stay apart, while the copies of one
            // that inlining made merge (the emitter makes a holder per occurrence)
            crate::values::IValue::Enum(e) => format!("e{:p}", std::sync::Arc::as_ptr(e)),
            crate::values::IValue::Object(_) => return None,
            other => format!("v{other:?}"),
        },
        Some(other) => format!("{other:?}"),
    };
    Some(format!("{ty}|{attr}"))
}

/// The values some node of `order` may write (AliasDb's `hasWriters`, for the tensors constant
/// pooling may merge): the arguments an operator's schema marks written (`Tensor(a!) self` of
/// `div_`, not its `other`), every argument of an operator without a schema and of a call
/// (PyTorch analyses `prim::CallMethod` / `prim::CallFunction` conservatively), and what a
/// written view (`-> Tensor(a)`) was taken from.
fn written_values(graph: &Graph, order: &[NodeId]) -> HashSet<ValueId> {
    let mut views: std::collections::HashMap<ValueId, Vec<ValueId>> = Default::default();
    let mut pending: Vec<ValueId> = Vec::new();
    for &n in order {
        let node = graph.node(n);
        if matches!(
            node.kind.as_str(),
            "prim::CallMethod" | "prim::CallFunction"
        ) {
            pending.extend(node.inputs.iter().copied());
            continue;
        }
        if node.kind.starts_with("prim::") {
            continue;
        }
        let Some(schema) = SchemaRegistry::global().find(&node.qualified_op()) else {
            pending.extend(node.inputs.iter().copied());
            continue;
        };
        let args = schema.arguments.iter().zip(&node.inputs);
        pending.extend(args.clone().filter(|(a, _)| a.is_write).map(|(_, &v)| v));
        for (ret, &out) in schema.returns.iter().zip(&node.outputs) {
            let sets: Vec<&str> = ret.alias_sets().collect();
            let bases = args
                .clone()
                .filter(|(a, _)| a.alias_sets().any(|x| sets.contains(&x)))
                .map(|(_, &v)| v);
            views.entry(out).or_default().extend(bases);
        }
    }
    let mut written = HashSet::new();
    while let Some(v) = pending.pop() {
        if written.insert(v) {
            pending.extend(views.get(&v).into_iter().flatten().copied());
        }
    }
    written
}

/// The value a `prim::Constant` output holds as an attribute, if it is one (tensors, lists).
fn constant_value(graph: &Graph, v: ValueId) -> Option<&IValue> {
    match graph.value(v).def {
        Def::Node(n, _) => match graph.node(n).attr("value") {
            Some(Attr::Value(value)) => Some(value),
            _ => None,
        },
        Def::Param(..) => None,
    }
}

/// Deduplicate constants and hoist every constant to the start of the graph, as PyTorch's
/// `ConstantPooling` does (each newly seen constant is moved before the current first node).
/// A fork's subgraph is a graph of its own, with its own pool at its start.
pub fn pool_constants(graph: &mut Graph) {
    let mut seen: std::collections::HashMap<(BlockId, String), ValueId> = Default::default();
    let mut order = Vec::new();
    graph.walk(graph.root, &mut |n| order.push(n));
    let written = written_values(graph, &order);
    for n in order {
        if graph.node(n).kind != "prim::Constant" {
            continue;
        }
        let Some(&out) = graph.node(n).outputs.first() else {
            continue;
        };
        // constants without a pooling key (objects) are hoisted but never merged. An equal
        // constant merges into the first one unless a tensor of the two may be written
        // (AliasDb's `safeToChangeAliasingRelationship`) and they are not the same tensor (one
        // `CONSTANTS.cN` read twice); one left unmerged also stays where it is.
        let root = subgraph_root(graph, n);
        if let Some(key) = constant_key(graph, n) {
            if let Some(&existing) = seen.get(&(root, key.clone())) {
                let writable =
                    |v: ValueId| graph.value(v).ty == Type::Tensor && written.contains(&v);
                let same_tensor =
                    match (constant_value(graph, existing), constant_value(graph, out)) {
                        (Some(a), Some(b)) => a.is_same(b),
                        _ => false,
                    };
                if same_tensor || !(writable(out) || writable(existing)) {
                    graph.replace_all_uses(out, existing);
                    graph.remove_node(n);
                }
                continue;
            }
            seen.insert((root, key), out);
        }
        graph.detach_node(n);
        graph.insert_at(root, 0, n);
    }
}

/// The root block of the (sub)graph `node` is in: the graph's, or its `prim::fork`'s block.
pub fn subgraph_root(graph: &Graph, node: NodeId) -> BlockId {
    let mut block = graph.node(node).owner;
    while let Some(owner) = graph.block(block).owner {
        if graph.node(owner).kind == "prim::fork" {
            return block;
        }
        block = graph.node(owner).owner;
    }
    graph.root
}

/// Insert a `prim::Constant` holding `value` (typed `ty`) just before node `before`, as
/// PyTorch's passes do under `WithInsertPoint guard(node)`.
pub(crate) fn insert_constant_before(
    g: &mut Graph,
    before: NodeId,
    value: IValue,
    ty: Type,
) -> ValueId {
    let c = g.create_node("prim::Constant", Vec::new(), vec![ty]);
    if let Some(attr) = crate::ir::graph::constant_attr(value) {
        g.node_mut(c).attrs.push(("value".to_string(), attr));
    }
    g.insert_before(c, before);
    g.node(c).outputs[0]
}

/// The node defining `v`, if it is a node output.
pub fn producer(graph: &Graph, v: ValueId) -> Option<NodeId> {
    match graph.value(v).def {
        Def::Node(n, _) => Some(n),
        Def::Param(..) => None,
    }
}

/// The cleanup PyTorch runs on every freshly emitted function (`runCleanupPasses`): dead code
/// elimination (`LowerSimpleTuples` ends with it), constant propagation on immutable types,
/// constant pooling, and last the if/loop outputs put in first-use order.
pub fn cleanup(graph: &mut Graph) {
    eliminate_dead_code(graph);
    propagate_constants(graph);
    pool_constants(graph);
    canonicalize_outputs(graph);
    annotate_warns(graph);
}

/// `AnnotateWarns`: every `aten::warn` gets a process-wide unique `warn_id`, so that a warning
/// is shown once however often (and from however many inlined copies) it runs.
pub fn annotate_warns(graph: &mut Graph) {
    static NEXT_WARN_ID: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);
    let mut warns = Vec::new();
    graph.walk(graph.root, &mut |n| {
        if graph.node(n).kind == "aten::warn" {
            warns.push(n);
        }
    });
    for n in warns {
        let id = NEXT_WARN_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        graph
            .node_mut(n)
            .attrs
            .retain(|(name, _)| name != "warn_id");
        graph
            .node_mut(n)
            .attrs
            .push(("warn_id".to_string(), Attr::Int(id)));
    }
}
