//! `ConstantPropagationImmutableTypes`: evaluate at compile time every node whose inputs are
//! all constants and whose inputs and outputs are of immutable types (numbers, strings,
//! booleans, `None`, devices, tuples of those), inline `if`s with a constant condition, drop
//! loops that never run, and remove `if`/loop outputs that do not depend on the branch taken.
//! PyTorch runs it on every freshly compiled function and on callee bodies before inlining
//! them; the printed graphs show its results (and the numbers of the constants it creates).

use super::{eliminate_dead_code, has_side_effects, insert_constant_before};
use crate::ir::graph::{constant_attr, constant_type};
use crate::ir::graph::{Attr, BlockId, Def, Graph, NodeId, ValueId};
use crate::ops::schema::SchemaRegistry;
use crate::ops::{Args, OpContext, Registry};
use crate::values::types::Type;
use crate::values::{IValue, Tuple};

/// Run the pass; dead code is eliminated when anything changed. Returns whether it did.
pub fn propagate_constants(graph: &mut Graph) -> bool {
    let mut changed = false;
    let root = graph.root;
    propagate_block(graph, root, &mut changed);
    if changed {
        eliminate_dead_code(graph);
    }
    changed
}

/// Node kinds never evaluated (PyTorch's `skip_list`).
const SKIPPED: &[&str] = &[
    "prim::If",
    "prim::Loop",
    "prim::Closure",
    "prim::Constant",
    "prim::AutogradZero",
    "prim::Uninitialized",
    "prim::Guard",
    "prim::profile",
    "prim::profile_ivalue",
    "prim::unchecked_unwrap_optional",
    "aten::dequantize",
];

/// Whether values of this type can be mutated in place (`AliasDb::isMutableType`).
pub fn is_mutable_type(ty: &Type) -> bool {
    match ty {
        Type::Tensor
        | Type::List(_)
        | Type::Dict(..)
        | Type::Class(_)
        | Type::Any
        | Type::AnyList
        | Type::AnyClass
        | Type::AnyTuple
        | Type::Future(_)
        | Type::Await(_)
        | Type::RRef(_)
        | Type::Storage
        | Type::Generator
        | Type::Capsule
        | Type::Var(_) => true,
        Type::Optional(t) => is_mutable_type(t),
        Type::Tuple(ts) | Type::Union(ts) => ts.iter().any(is_mutable_type),
        _ => false,
    }
}

fn propagate_block(g: &mut Graph, block: BlockId, changed: &mut bool) {
    for n in g.block(block).nodes.clone() {
        // an earlier step may have removed the node (nothing else moves nodes forward)
        if g.node(n).owner == block && g.block(block).nodes.contains(&n) {
            propagate_node(g, n, changed);
        }
    }
}

fn producer_constant(g: &Graph, v: ValueId) -> Option<IValue> {
    match g.value(v).def {
        Def::Node(p, _) => g.constant_value(p),
        Def::Param(..) => None,
    }
}

/// The values of a node's inputs when every one is a constant.
fn constant_inputs(g: &Graph, n: NodeId) -> Option<Vec<IValue>> {
    g.node(n)
        .inputs
        .iter()
        .map(|&v| producer_constant(g, v))
        .collect()
}

fn propagate_node(g: &mut Graph, n: NodeId, changed: &mut bool) {
    let inputs = constant_inputs(g, n);
    let kind = g.node(n).kind.clone();
    let blocks = g.node(n).blocks.clone();
    match kind.as_str() {
        "prim::If" => match inputs.as_deref() {
            Some([IValue::Bool(cond)]) => {
                let chosen = if *cond { blocks[0] } else { blocks[1] };
                propagate_block(g, chosen, changed);
                inline_if_body(g, n, chosen);
                *changed = true;
            }
            _ => {
                for b in blocks {
                    propagate_block(g, b, changed);
                }
                remove_extra_if_outputs(g, n, changed);
            }
        },
        "prim::Loop" => {
            if loop_will_not_run(g, n) {
                remove_loop_node(g, n);
                *changed = true;
            } else {
                for b in blocks {
                    propagate_block(g, b, changed);
                }
                remove_extra_loop_outputs(g, n, changed);
            }
        }
        _ => match inputs {
            Some(values) if supported(g, n) => propagate(g, n, values, changed),
            _ => {
                for b in blocks {
                    propagate_block(g, b, changed);
                }
            }
        },
    }
}

/// Operators registered with conservative alias analysis (so with side effects) whose
/// results would otherwise look foldable: they read global state.
const GLOBAL_STATE_READERS: &[&str] = &[
    "aten::is_autocast_enabled",
    "aten::is_autocast_cpu_enabled",
    "aten::get_autocast_dtype",
    "aten::is_grad_enabled",
    "aten::_get_tracing_state",
    "aten::get_gradients",
    "aten::get_num_threads",
    "aten::get_num_interop_threads",
];

fn supported(g: &Graph, n: NodeId) -> bool {
    let node = g.node(n);
    // PyTorch does not run vararg schemas (`aten::format`) at compile time
    let vararg = SchemaRegistry::global()
        .find(&node.qualified_op())
        .is_some_and(|s| s.is_vararg);
    if vararg || GLOBAL_STATE_READERS.contains(&node.kind.as_str()) {
        return false;
    }
    let immutable = |vs: &[ValueId]| vs.iter().all(|&v| !is_mutable_type(&g.value(v).ty));
    immutable(&node.inputs)
        && immutable(&node.outputs)
        && !SKIPPED.contains(&node.kind.as_str())
        && node.blocks.is_empty()
        && !has_side_effects(g, n)
}

/// Evaluate a node whose inputs are all constants (`runNodeIfInputsAreConstant`).
pub(crate) fn evaluate_if_constant(g: &Graph, n: NodeId) -> Option<Vec<IValue>> {
    evaluate(g, n, constant_inputs(g, n)?)
}

/// Evaluate a node on constant inputs; `None` when it cannot run (no kernel, an error).
fn evaluate(g: &Graph, n: NodeId, mut values: Vec<IValue>) -> Option<Vec<IValue>> {
    let node = g.node(n);
    let out_count = node.outputs.len();
    let result = match node.kind.as_str() {
        "prim::TupleConstruct" => {
            let ty = &g.value(*node.outputs.first()?).ty;
            IValue::Tuple(match ty {
                Type::Class(c) => Tuple::named(c.clone(), values),
                _ => Tuple::new(values),
            })
        }
        "prim::TupleUnpack" => match values.first()? {
            IValue::Tuple(t) if t.items().len() == out_count => {
                return Some(t.items().to_vec());
            }
            _ => return None,
        },
        "prim::TupleIndex" => match (values.first()?, values.get(1)?.as_int()) {
            (IValue::Tuple(t), Some(i)) => {
                let len = t.items().len() as i64;
                let k = if i < 0 { i + len } else { i };
                t.items().get(usize::try_from(k).ok()?)?.clone()
            }
            _ => return None,
        },
        "prim::unchecked_cast" => values.first()?.clone(),
        "prim::isinstance" => {
            let types = crate::ir::graph::isinstance_types(node.attr("types"));
            let v = values.first()?;
            IValue::Bool(
                types
                    .iter()
                    .any(|t| crate::values::ivalue::matches_type(v, t)),
            )
        }
        kind => {
            if kind.starts_with("prim::") && !Registry::global().contains(kind) {
                return None;
            }
            let overload = node.overload.as_deref().unwrap_or("");
            let kernel = Registry::global().lookup(kind, overload)?;
            let name = node.qualified_op();
            let ctx = OpContext::default();
            // compile-time folding must never take the load down: a kernel bug on a path the
            // program may never run is left for run time
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                kernel(&mut Args::new(&name, &mut values, &ctx))
            }))
            .ok()?
            .ok()?
        }
    };
    match out_count {
        1 => Some(vec![result]),
        k => match result {
            IValue::Tuple(t) if t.items().len() == k => Some(t.items().to_vec()),
            _ => None,
        },
    }
}

/// Whether a value can be a `prim::Constant` (`tryInsertConstant`).
fn insertable(v: &IValue) -> bool {
    match v {
        IValue::None
        | IValue::Bool(_)
        | IValue::Int(_)
        | IValue::Double(_)
        | IValue::Complex(_)
        | IValue::String(_)
        | IValue::Device(_)
        | IValue::Enum(_) => true,
        IValue::Tuple(t) => t.items().iter().all(insertable),
        _ => false,
    }
}

fn propagate(g: &mut Graph, n: NodeId, values: Vec<IValue>, changed: &mut bool) {
    let Some(results) = evaluate(g, n, values) else {
        return;
    };
    let outputs = g.node(n).outputs.clone();
    for (out, value) in outputs.into_iter().zip(results) {
        if !insertable(&value) {
            // left for dead code elimination to keep
            continue;
        }
        // a `None` result keeps the output's (optional) type
        let ty = if matches!(value, IValue::None) {
            g.value(out).ty.clone()
        } else {
            constant_type(&value)
        };
        let c = insert_constant_before(g, n, value, ty);
        g.replace_all_uses(out, c);
        *changed = true;
    }
}

/// Move the chosen branch's nodes before the `if`, which its outputs then stand for.
fn inline_if_body(g: &mut Graph, n: NodeId, body: BlockId) {
    for inner in g.block(body).nodes.clone() {
        g.detach_node(inner);
        g.insert_before(inner, n);
    }
    let outputs = g.node(n).outputs.clone();
    let returns = g.block(body).returns.clone();
    for (o, r) in outputs.iter().zip(returns) {
        g.replace_all_uses(*o, r);
    }
    g.block_mut(body).returns.clear();
    g.remove_node(n);
}

fn loop_will_not_run(g: &Graph, n: NodeId) -> bool {
    let node = g.node(n);
    let trips = node
        .inputs
        .first()
        .and_then(|&v| producer_constant(g, v))
        .and_then(|v| v.as_int())
        .unwrap_or(1);
    let start = match node.inputs.get(1).and_then(|&v| producer_constant(g, v)) {
        Some(IValue::Bool(b)) => b,
        _ => true,
    };
    !(start && trips > 0)
}

fn remove_loop_node(g: &mut Graph, n: NodeId) {
    let outputs = g.node(n).outputs.clone();
    let inputs = g.node(n).inputs.clone();
    for (i, o) in outputs.iter().enumerate() {
        if let Some(&init) = inputs.get(i + 2) {
            g.replace_all_uses(*o, init);
        }
    }
    g.remove_node(n);
}

fn remove_extra_if_outputs(g: &mut Graph, n: NodeId, changed: &mut bool) {
    let (then_b, else_b) = match g.node(n).blocks.as_slice() {
        [t, e] => (*t, *e),
        _ => return,
    };
    let mut i = 0;
    while i < g.block(then_b).returns.len() && i < g.block(else_b).returns.len() {
        let (t, f) = (g.block(then_b).returns[i], g.block(else_b).returns[i]);
        let replacement = if t == f {
            Some(t)
        } else {
            match (producer_constant(g, t), producer_constant(g, f)) {
                (Some(a), Some(b)) if same_constant(&a, &b) && g.value(t).ty == g.value(f).ty => {
                    let ty = g.value(t).ty.clone();
                    Some(insert_constant_before(g, n, a, ty))
                }
                _ => None,
            }
        };
        match replacement {
            Some(r) => {
                let out = g.node(n).outputs[i];
                g.replace_all_uses(out, r);
                g.erase_node_output(n, i);
                g.block_mut(then_b).returns.remove(i);
                g.block_mut(else_b).returns.remove(i);
                *changed = true;
            }
            None => i += 1,
        }
    }
}

/// Constants equal as `EqualNode` compares them (same attribute value).
fn same_constant(a: &IValue, b: &IValue) -> bool {
    match (constant_attr(a.clone()), constant_attr(b.clone())) {
        (None, None) => true,
        (Some(Attr::Int(x)), Some(Attr::Int(y))) => x == y,
        (Some(Attr::Float(x)), Some(Attr::Float(y))) => x.to_bits() == y.to_bits(),
        (Some(Attr::Str(x)), Some(Attr::Str(y))) => x == y,
        (Some(Attr::Value(x)), Some(Attr::Value(y))) => format!("{x:?}") == format!("{y:?}"),
        _ => false,
    }
}

fn remove_extra_loop_outputs(g: &mut Graph, n: NodeId, changed: &mut bool) {
    let Some(&body) = g.node(n).blocks.first() else {
        return;
    };
    for i in (0..g.node(n).outputs.len()).rev() {
        let (Some(&param), Some(&ret)) = (
            g.block(body).params.get(i + 1),
            g.block(body).returns.get(i + 1),
        ) else {
            continue;
        };
        if param != ret {
            continue;
        }
        let Some(&init) = g.node(n).inputs.get(i + 2) else {
            continue;
        };
        let out = g.node(n).outputs[i];
        g.replace_all_uses(out, init);
        g.replace_all_uses(param, init);
        g.erase_node_output(n, i);
        g.node_mut(n).inputs.remove(i + 2);
        g.erase_block_param(body, i + 1);
        g.block_mut(body).returns.remove(i + 1);
        *changed = true;
    }
}
