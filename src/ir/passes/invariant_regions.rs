//! Parameter-only regions, a rewrite of the graph a plan is built from (the printed graphs never
//! see it). Code often derives tensors from a module's parameters alone on every call: weight
//! standardization (timm's `StdConv2d` and NFNets run `batch_norm` over the weight), weight
//! normalization (`_weight_norm`), a relative position bias gathered from its table (Swin),
//! a scaled or merged weight (`self.weight * self.scale`, LoRA's `W + B @ A`). Their results
//! change only when the parameters do, so the plan keeps them (`prim::CachedRegion`, run by the
//! interpreter with a cache keyed on the stamps of what the region reads) instead of computing
//! them again on every call.
//!
//! A value is invariant when it is a constant, the method's `self`, an attribute read from an
//! invariant object, or the result of a deterministic operator without effects whose inputs
//! are all invariant. A region is a run of such operators in one block, closed before the first
//! node that reads one of its results or has an effect, so moving the run to that point
//! reorders it only past pure nodes that do not depend on it. Its results must not be written
//! or escape (returned, passed to a call, stored) where a later call's shared result would be
//! observed: those results, and what depends on them, stay outside the region, after it.

use super::effects::{effects, Effects, RUNNING_STATS_OPS};
use super::{has_side_effects, insert_graph_before, producer, CalleeGraphs};
use crate::ir::graph::{BlockId, Graph, NodeId, ValueId};
use crate::ops::schema::SchemaRegistry;
use crate::ops::{is_interpreter_op, Registry};
use crate::values::types::Type;
use crate::values::IValue;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};

/// The node kind of a region: its one block holds the operators, its inputs are the values the
/// block reads from outside (its parameters), its outputs the block's returns.
pub const CACHED_REGION: &str = "prim::CachedRegion";

/// Operators whose results are random (PyTorch's `Node::isNondeterministic` list, plus the
/// dropout variants without a generator argument); any operator with a `Generator` argument
/// is random too.
const NONDETERMINISTIC: &[&str] = &[
    "aten::_fused_dropout",
    "aten::_standard_gamma",
    "aten::bernoulli",
    "aten::binomial",
    "aten::multinomial",
    "aten::native_dropout",
    "aten::normal",
    "aten::poisson",
    "aten::rand",
    "aten::rand_like",
    "aten::randint",
    "aten::randint_like",
    "aten::randn",
    "aten::randn_like",
    "aten::randperm",
    "aten::rrelu",
    "aten::rrelu_with_noise",
];

/// Dropouts: deterministic only when `train` (their third argument) is the constant `False`.
const DROPOUTS: &[&str] = &[
    "aten::dropout",
    "aten::feature_dropout",
    "aten::alpha_dropout",
    "aten::feature_alpha_dropout",
];

/// Longest alias chain followed when asking whether a result escapes.
const MAX_ALIAS_DEPTH: usize = 32;

/// Types a region may return: tensors and immutable scalars (a list would be shared between
/// calls and could be changed in place).
fn returnable(ty: &Type) -> bool {
    match ty {
        Type::Tensor
        | Type::Int
        | Type::Float
        | Type::Bool
        | Type::NoneType
        | Type::Str
        | Type::Device
        | Type::ScalarType
        | Type::Layout
        | Type::MemoryFormat => true,
        Type::Optional(t) => returnable(t),
        _ => false,
    }
}

/// Types whose values a region's cache can stamp: what it may return, and lists of tensors
/// and numbers (compared element by element).
fn stampable(ty: &Type) -> bool {
    match ty {
        Type::List(t) => {
            matches!(**t, Type::Tensor | Type::Int | Type::Float | Type::Bool)
                || matches!(&**t, Type::Optional(e) if **e == Type::Tensor)
        }
        _ => returnable(ty),
    }
}

fn is_tensor(ty: &Type) -> bool {
    match ty {
        Type::Tensor => true,
        Type::Optional(t) => **t == Type::Tensor,
        _ => false,
    }
}

fn constant(g: &Graph, v: ValueId) -> Option<IValue> {
    let p = producer(g, v)?;
    (g.node(p).kind == "prim::Constant").then(|| g.constant_value(p))?
}

/// Whether node `n` may join a region once its inputs are invariant: a list of values, or an
/// operator with a kernel and a schema, deterministic, without effects, returning values a
/// region can hold.
fn may_cache(g: &Graph, n: NodeId) -> bool {
    let node = g.node(n);
    // without inputs, an operator reads global state (`get_num_threads`, grad mode)
    if !node.blocks.is_empty() || node.outputs.is_empty() || node.inputs.is_empty() {
        return false;
    }
    if !node.outputs.iter().all(|&o| stampable(&g.value(o).ty)) {
        return false;
    }
    if node.kind == "prim::ListConstruct" {
        return true;
    }
    if is_interpreter_op(&node.kind) || has_side_effects(g, n) {
        return false;
    }
    let overload = node.overload.as_deref().unwrap_or("");
    if Registry::global().lookup(&node.kind, overload).is_none() {
        return false;
    }
    let schemas = SchemaRegistry::global();
    let Some(schema) = schemas.find(&node.qualified_op()) else {
        return false;
    };
    if schema.is_vararg || schema.is_varret || schema.returns.iter().any(|r| r.is_wildcard()) {
        return false;
    }
    let kind = node.kind.as_str();
    let random_overload = schemas.overloads(kind).iter().any(|s| {
        s.arguments.iter().any(|a| {
            matches!(&a.ty, Type::Generator)
                || matches!(&a.ty, Type::Optional(t) if **t == Type::Generator)
        })
    });
    if NONDETERMINISTIC.contains(&kind) || random_overload {
        return false;
    }
    let input_constant = |i: usize| node.inputs.get(i).and_then(|&v| constant(g, v));
    if DROPOUTS.contains(&kind) && !matches!(input_constant(2), Some(IValue::Bool(false))) {
        return false;
    }
    // their running statistics (fourth argument) are updated in training mode (sixth)
    if RUNNING_STATS_OPS.contains(&kind)
        && !matches!(input_constant(3), Some(IValue::None))
        && !matches!(input_constant(5), Some(IValue::Bool(false)))
    {
        return false;
    }
    true
}

/// A use of a value: input `i` of a node, or a block's return.
#[derive(Clone, Copy)]
enum Use {
    Input(NodeId, usize),
    Returned,
}

struct Analysis<'g> {
    g: &'g Graph,
    callees: Option<&'g dyn CalleeGraphs>,
    /// Summaries of the callees of call nodes reading a region's result.
    callee_effects: RefCell<HashMap<NodeId, Effects>>,
    uses: HashMap<ValueId, Vec<Use>>,
    /// Invariant operators that may join a region.
    cacheable: HashSet<NodeId>,
    invariant: HashSet<ValueId>,
}

impl<'g> Analysis<'g> {
    fn new(g: &'g Graph, callees: Option<&'g dyn CalleeGraphs>) -> Analysis<'g> {
        let mut all = Vec::new();
        g.walk(g.root, &mut |n| all.push(n));
        let mut uses: HashMap<ValueId, Vec<Use>> = HashMap::new();
        for &n in &all {
            let node = g.node(n);
            for (i, &v) in node.inputs.iter().enumerate() {
                uses.entry(v).or_default().push(Use::Input(n, i));
            }
            for &b in &node.blocks {
                for &v in &g.block(b).returns {
                    uses.entry(v).or_default().push(Use::Returned);
                }
            }
        }
        for &v in &g.block(g.root).returns {
            uses.entry(v).or_default().push(Use::Returned);
        }
        let mut invariant = HashSet::new();
        if let Some(&s) = g.inputs().first() {
            if matches!(g.value(s).ty, Type::Class(_)) {
                invariant.insert(s);
            }
        }
        let mut cacheable = HashSet::new();
        for &n in &all {
            let node = g.node(n);
            let inputs_invariant = node.inputs.iter().all(|v| invariant.contains(v));
            let is_invariant = match node.kind.as_str() {
                "prim::Constant" => true,
                "prim::GetAttr" => inputs_invariant,
                _ => {
                    let ok = inputs_invariant && may_cache(g, n);
                    if ok {
                        cacheable.insert(n);
                    }
                    ok
                }
            };
            if is_invariant {
                invariant.extend(node.outputs.iter().copied());
            }
        }
        Analysis {
            g,
            callees,
            callee_effects: RefCell::new(HashMap::new()),
            uses,
            cacheable,
            invariant,
        }
    }

    /// Whether tensor `v` may be written or seen outside the nodes in `inside` (directly, or
    /// through a view, list or tuple holding it).
    fn escapes(&self, v: ValueId, inside: &HashSet<NodeId>, depth: usize) -> bool {
        if depth > MAX_ALIAS_DEPTH {
            return true;
        }
        let schemas = SchemaRegistry::global();
        self.uses.get(&v).into_iter().flatten().any(|u| {
            let Use::Input(m, i) = *u else {
                return true;
            };
            if inside.contains(&m) {
                return false;
            }
            let node = self.g.node(m);
            if matches!(
                node.kind.as_str(),
                "prim::ListConstruct" | "prim::TupleConstruct"
            ) {
                return node
                    .outputs
                    .iter()
                    .any(|&o| self.escapes(o, inside, depth + 1));
            }
            if matches!(
                node.kind.as_str(),
                "prim::CallMethod" | "prim::CallFunction"
            ) {
                return self.call_may_keep(m, i);
            }
            if !node.blocks.is_empty() || is_interpreter_op(&node.kind) {
                return true;
            }
            let Some(schema) = schemas.find(&node.qualified_op()) else {
                return true;
            };
            let Some(arg) = schema.arguments.get(i) else {
                return true;
            };
            if schema.is_vararg || schema.is_varret || arg.is_write || arg.is_wildcard() {
                return true;
            }
            let sets: Vec<&str> = arg.alias_sets().collect();
            if sets.is_empty() {
                return false;
            }
            schema.returns.iter().enumerate().any(|(k, r)| {
                (r.is_wildcard() || r.alias_sets().any(|s| sets.contains(&s)))
                    && node
                        .outputs
                        .get(k)
                        .is_none_or(|&o| self.escapes(o, inside, depth + 1))
            })
        })
    }

    /// Whether call node `m` may write or return its input `i` (else it only reads it).
    fn call_may_keep(&self, m: NodeId, i: usize) -> bool {
        let param = if self.g.node(m).kind == "prim::CallFunction" {
            // input 0 is the function constant
            match i.checked_sub(1) {
                Some(p) => p,
                None => return true,
            }
        } else {
            i
        };
        let fx = *self
            .callee_effects
            .borrow_mut()
            .entry(m)
            .or_insert_with(|| match self.callees.map(|c| c.callee(self.g, m)) {
                Some(Ok(Some(callee))) => effects(&callee, &mut |_| None),
                _ => Effects::UNKNOWN,
            });
        let bit = 1u64 << param.min(63);
        (fx.writes | fx.writes_if_training | fx.returns) & bit != 0
    }

    /// Whether `v` is read anywhere but by the nodes in `inside`.
    fn used_outside(&self, v: ValueId, inside: &HashSet<NodeId>) -> bool {
        self.uses.get(&v).into_iter().flatten().any(|u| match *u {
            Use::Input(m, _) => !inside.contains(&m),
            Use::Returned => true,
        })
    }

    /// The runs of cacheable operators of `block`, each with the node it runs before (`None`:
    /// the block's end).
    fn runs(&self, block: BlockId) -> Vec<(Vec<NodeId>, Option<NodeId>)> {
        let g = self.g;
        let mut runs = Vec::new();
        let mut cur: Vec<NodeId> = Vec::new();
        let mut results: HashSet<ValueId> = HashSet::new();
        for &n in &g.block(block).nodes {
            let node = g.node(n);
            if self.cacheable.contains(&n) {
                cur.push(n);
                results.extend(node.outputs.iter().copied());
                continue;
            }
            let attribute_read = node.kind == "prim::GetAttr"
                && node.outputs.iter().all(|o| self.invariant.contains(o));
            if node.kind == "prim::Constant" || attribute_read {
                continue;
            }
            let mut reads = Vec::new();
            deep_inputs(g, n, &mut reads);
            let closes = reads.iter().any(|v| results.contains(v))
                || !node.blocks.is_empty()
                || has_side_effects(g, n);
            if closes && !cur.is_empty() {
                runs.push((std::mem::take(&mut cur), Some(n)));
                results.clear();
            }
        }
        if !cur.is_empty() {
            runs.push((cur, None));
        }
        runs
    }

    /// Split a run into the region (operators whose results may be shared between calls) and
    /// the operators that must run after it every call: those returning a value a region
    /// cannot hold or whose result escapes, those reading what the cache cannot stamp, and
    /// everything depending on them.
    fn split(&self, run: &[NodeId]) -> (Vec<NodeId>, Vec<NodeId>) {
        let g = self.g;
        let mut region: Vec<NodeId> = run.to_vec();
        let mut after: HashSet<NodeId> = HashSet::new();
        loop {
            let inside: HashSet<NodeId> = region.iter().copied().collect();
            let defined: HashSet<ValueId> = region
                .iter()
                .flat_map(|&n| g.node(n).outputs.iter().copied())
                .collect();
            let mut moved: HashSet<NodeId> = HashSet::new();
            for &n in &region {
                let node = g.node(n);
                let unstampable_input = node.inputs.iter().any(|&v| {
                    !defined.contains(&v) && constant(g, v).is_none() && !stampable(&g.value(v).ty)
                });
                let bad_output = node.outputs.iter().any(|&o| {
                    let ty = &g.value(o).ty;
                    self.used_outside(o, &inside)
                        && (!returnable(ty) || (is_tensor(ty) && self.escapes(o, &inside, 0)))
                });
                if unstampable_input
                    || bad_output
                    || moved_input(g, n, &moved)
                    || moved_input(g, n, &after)
                {
                    moved.insert(n);
                }
            }
            if moved.is_empty() {
                break;
            }
            region.retain(|n| !moved.contains(n));
            after.extend(moved);
        }
        let after: Vec<NodeId> = run.iter().copied().filter(|n| after.contains(n)).collect();
        (region, after)
    }
}

/// Whether node `n` reads a result of a node in `moved`.
fn moved_input(g: &Graph, n: NodeId, moved: &HashSet<NodeId>) -> bool {
    g.node(n)
        .inputs
        .iter()
        .any(|&v| producer(g, v).is_some_and(|p| moved.contains(&p)))
}

/// Every value node `n` reads, its nested blocks' reads included.
fn deep_inputs(g: &Graph, n: NodeId, out: &mut Vec<ValueId>) {
    let node = g.node(n);
    out.extend(node.inputs.iter().copied());
    for &b in &node.blocks {
        for &m in &g.block(b).nodes {
            deep_inputs(g, m, out);
        }
        out.extend(g.block(b).returns.iter().copied());
    }
}

/// Whether node `n` makes a fresh tensor from a tensor (the work a region is kept for: views,
/// lists and factories alone cost less than checking the stamps).
fn makes_tensor_from_tensor(g: &Graph, n: NodeId) -> bool {
    let node = g.node(n);
    node.kind != "prim::ListConstruct"
        && node.inputs.iter().any(|&v| is_tensor(&g.value(v).ty))
        && node
            .outputs
            .first()
            .is_some_and(|&o| g.value(o).ty == Type::Tensor)
        && SchemaRegistry::global()
            .find(&node.qualified_op())
            .is_some_and(|s| s.returns.first().is_some_and(|r| r.alias.is_none()))
}

/// Whether a region does enough work to be worth a cache.
fn worth_caching(g: &Graph, region: &[NodeId]) -> bool {
    region.iter().any(|&n| makes_tensor_from_tensor(g, n))
}

/// Inline the calls whose arguments are all invariant and whose callee makes tensors from
/// tensors (`F.batch_norm(self.weight ...)`, torchvision's `_get_relative_position_bias`), so
/// their work can join a region; returns whether any was.
fn inline_invariant_calls(g: &mut Graph, callees: &dyn CalleeGraphs) -> bool {
    let analysis = Analysis::new(g, None);
    let mut calls = Vec::new();
    g.walk(g.root, &mut |n| {
        let node = g.node(n);
        let args = match node.kind.as_str() {
            "prim::CallFunction" => node.inputs.get(1..).unwrap_or(&[]),
            "prim::CallMethod" => &node.inputs[..],
            _ => return,
        };
        if args.iter().all(|v| analysis.invariant.contains(v)) {
            calls.push(n);
        }
    });
    let mut inlined = false;
    for n in calls {
        let Ok(Some(callee)) = callees.callee(g, n) else {
            continue;
        };
        let mut work = false;
        callee.walk(callee.root, &mut |m| {
            work |= makes_tensor_from_tensor(&callee, m)
        });
        if !work {
            continue;
        }
        let node = g.node(n);
        let block = node.owner;
        let mut args = node.inputs.clone();
        if node.kind == "prim::CallFunction" && !args.is_empty() {
            args.remove(0);
        }
        let Some(pos) = g.block(block).nodes.iter().position(|&m| m == n) else {
            continue;
        };
        let Ok(returns) = insert_graph_before(g, block, pos, &callee, &args) else {
            continue;
        };
        for (o, r) in g.node(n).outputs.clone().into_iter().zip(returns) {
            g.replace_all_uses(o, r);
        }
        g.detach_node(n);
        inlined = true;
    }
    inlined
}

/// `graph` with its parameter-only regions wrapped in `prim::CachedRegion` nodes, or `None`
/// when it has none worth a cache. With `callees`, calls whose arguments are all invariant
/// are inlined first (see `inline_invariant_calls`).
pub fn wrap_invariant_regions(graph: &Graph, callees: Option<&dyn CalleeGraphs>) -> Option<Graph> {
    let mut inlined = None;
    if let Some(callees) = callees {
        let mut copy = graph.clone();
        if inline_invariant_calls(&mut copy, callees) {
            inlined = Some(copy);
        }
    }
    let graph = inlined.as_ref().unwrap_or(graph);
    let analysis = Analysis::new(graph, callees);
    let mut blocks = vec![graph.root];
    graph.walk(graph.root, &mut |n| {
        blocks.extend(graph.node(n).blocks.iter().copied())
    });
    let mut plans = Vec::new();
    for b in blocks {
        for (run, before) in analysis.runs(b) {
            let (region, after) = analysis.split(&run);
            if worth_caching(graph, &region) {
                plans.push((b, region, after, before));
            }
        }
    }
    if plans.is_empty() {
        return None;
    }
    let mut wrapped = graph.clone();
    for (block, region, after, before) in plans {
        wrap(&mut wrapped, block, &region, &after, before);
    }
    Some(wrapped)
}

/// Move `region` into a new `prim::CachedRegion` node placed before `before` (or at the end
/// of `block`), followed by the operators of `after`.
fn wrap(
    g: &mut Graph,
    block: BlockId,
    region: &[NodeId],
    after: &[NodeId],
    before: Option<NodeId>,
) {
    let inside: HashSet<NodeId> = region.iter().copied().collect();
    let mut frontier = Vec::new();
    {
        let mut used_outside = HashSet::new();
        let mut all = Vec::new();
        g.walk(g.root, &mut |n| all.push(n));
        for &n in all.iter().filter(|n| !inside.contains(n)) {
            used_outside.extend(g.node(n).inputs.iter().copied());
            for &b in &g.node(n).blocks {
                used_outside.extend(g.block(b).returns.iter().copied());
            }
        }
        used_outside.extend(g.block(g.root).returns.iter().copied());
        for &n in region {
            for &o in &g.node(n).outputs {
                if used_outside.contains(&o) {
                    frontier.push(o);
                }
            }
        }
    }
    let node = g.create_node(CACHED_REGION, Vec::new(), Vec::new());
    let body = g.add_block(node);
    g.node_mut(node).source = region.last().and_then(|&n| g.node(n).source.clone());
    for &n in region {
        g.detach_node(n);
        g.append(body, n);
    }
    for &f in &frontier {
        let ty = g.value(f).ty.clone();
        let out = g.add_node_output(node, ty);
        for (i, data) in g.nodes.iter_mut().enumerate() {
            if !inside.contains(&NodeId(i as u32)) {
                data.inputs
                    .iter_mut()
                    .filter(|v| **v == f)
                    .for_each(|v| *v = out);
            }
        }
        for (i, data) in g.blocks.iter_mut().enumerate() {
            if BlockId(i as u32) != body {
                data.returns
                    .iter_mut()
                    .filter(|v| **v == f)
                    .for_each(|v| *v = out);
            }
        }
    }
    g.block_mut(body).returns = frontier;
    for &n in std::iter::once(&node).chain(after) {
        if n != node {
            g.detach_node(n);
        }
        match before {
            Some(x) => g.insert_before(n, x),
            None => g.append(block, n),
        }
    }
    let leaves = g.lift_captures(body);
    g.node_mut(node).inputs = leaves;
}
