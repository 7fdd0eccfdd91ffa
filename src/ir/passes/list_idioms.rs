//! `PeepholeOptimizeListIdioms` and `PeepholeOptimizeDictIdioms`: on lists built by
//! `prim::ListConstruct` that nothing mutates, `len` is a constant, indexing with a constant
//! picks the element, unpacking picks the elements, slicing with constant bounds picks a new
//! literal list, two such lists added are one list; on an unmutated `prim::DictConstruct`,
//! `len` is a constant and indexing with a constant key picks the value.

use super::{insert_constant_before, producer};
use crate::ir::graph::{BlockId, Graph, NodeId, ValueId};
use crate::ops::scalar::slice_indices;
use crate::ops::schema::SchemaRegistry;
use crate::values::types::Type;
use crate::values::IValue;
use std::collections::{HashMap, HashSet};

/// Run the pass; returns whether it changed the graph (the caller eliminates dead code).
pub fn optimize_list_idioms(graph: &mut Graph) -> bool {
    let mut mutated = mutated_lists(graph);
    let mut changed = false;
    let root = graph.root;
    optimize_block(graph, root, &mut mutated, &mut changed);
    dict_block(graph, root, &mutated, &mut changed);
    changed
}

fn dict_block(g: &mut Graph, block: BlockId, mutated: &MutatedLists, changed: &mut bool) {
    for n in g.block(block).nodes.clone() {
        for b in g.node(n).blocks.clone() {
            dict_block(g, b, mutated, changed);
        }
        let node = g.node(n);
        let kind = node.kind.clone();
        if kind != "aten::len" && kind != "aten::__getitem__" {
            continue;
        }
        let (Some(&dict), Some(&out)) = (node.inputs.first(), node.outputs.first()) else {
            continue;
        };
        if mutated.contains(&dict) || !matches!(g.value(dict).ty, Type::Dict(..)) {
            continue;
        }
        let Some(p) = producer(g, dict).filter(|&p| g.node(p).kind == "prim::DictConstruct") else {
            continue;
        };
        let items = g.node(p).inputs.clone();
        if kind == "aten::len" {
            let pairs = (items.len() / 2) as i64;
            let c = insert_constant_before(g, n, IValue::Int(pairs), Type::Int);
            g.replace_all_uses(out, c);
            *changed = true;
            continue;
        }
        // a constant key found among constant keys picks its value
        let constant = |v: ValueId| producer(g, v).and_then(|k| g.constant_value(k));
        let Some(key) = g.node(n).inputs.get(1).and_then(|&k| constant(k)) else {
            continue;
        };
        let keys: Option<Vec<IValue>> = items.iter().step_by(2).map(|&k| constant(k)).collect();
        let Some(keys) = keys else {
            continue;
        };
        let same = |a: &IValue, b: &IValue| match (a, b) {
            (IValue::String(x), IValue::String(y)) => x == y,
            (IValue::Int(x), IValue::Int(y)) => x == y,
            _ => false,
        };
        if let Some(i) = keys.iter().position(|k| same(k, &key)) {
            if let Some(&value) = items.get(2 * i + 1) {
                g.replace_all_uses(out, value);
                *changed = true;
            }
        }
    }
}

/// List values some node may write to, as alias analysis (`AliasDb::hasWriters`) finds them:
/// calls and ops with mutable schemas write their inputs, and a write reaches every value of
/// the written value's alias class. A control-flow node's outputs alias what its blocks return
/// (a loop's carried values also its inputs and block parameters) and `prim::unchecked_cast`
/// aliases its input; returning a list from a block is no write (timm's
/// `resample_abs_pos_embed` indexes a list it also returns from an `if`).
fn mutated_lists(g: &Graph) -> MutatedLists {
    let mut aliases = AliasClasses::default();
    let mut written = Vec::new();
    g.walk(g.root, &mut |n| {
        let node = g.node(n);
        match node.kind.as_str() {
            "prim::If" => {
                for &b in &node.blocks {
                    for (&r, &o) in g.block(b).returns.iter().zip(&node.outputs) {
                        aliases.join(r, o);
                    }
                }
            }
            "prim::Loop" => {
                let carried = node.inputs.iter().skip(2);
                for (i, (&input, &o)) in carried.zip(&node.outputs).enumerate() {
                    aliases.join(input, o);
                    for &b in &node.blocks {
                        let block = g.block(b);
                        if let Some(&p) = block.params.get(i + 1) {
                            aliases.join(p, o);
                        }
                        if let Some(&r) = block.returns.get(i + 1) {
                            aliases.join(r, o);
                        }
                    }
                }
            }
            "prim::unchecked_cast" => {
                if let (Some(&i), Some(&o)) = (node.inputs.first(), node.outputs.first()) {
                    aliases.join(i, o);
                }
            }
            "prim::CallMethod" | "prim::CallFunction" => {
                written.extend(node.inputs.iter().copied())
            }
            k if k.starts_with("prim::") => {}
            _ => {
                let mutable = SchemaRegistry::global()
                    .find(&node.qualified_op())
                    .is_none_or(|s| s.is_mutable());
                if mutable {
                    written.extend(node.inputs.iter().copied());
                }
            }
        }
    });
    let written = written.iter().map(|&v| aliases.root(v)).collect();
    MutatedLists { aliases, written }
}

/// The alias classes some node writes to.
struct MutatedLists {
    aliases: AliasClasses,
    written: HashSet<ValueId>,
}

impl MutatedLists {
    fn contains(&self, v: &ValueId) -> bool {
        self.written.contains(&self.aliases.root(*v))
    }
}

/// Union-find over values: the classes of values that may share one list.
#[derive(Default)]
struct AliasClasses {
    parent: HashMap<ValueId, ValueId>,
}

impl AliasClasses {
    fn root(&self, mut v: ValueId) -> ValueId {
        while let Some(&p) = self.parent.get(&v) {
            v = p;
        }
        v
    }

    fn join(&mut self, a: ValueId, b: ValueId) {
        let (ra, rb) = (self.root(a), self.root(b));
        if ra != rb {
            self.parent.insert(ra, rb);
        }
    }
}

fn list_construct(g: &Graph, v: ValueId, mutated: &MutatedLists) -> Option<NodeId> {
    if mutated.contains(&v) || !matches!(g.value(v).ty, Type::List(_)) {
        return None;
    }
    producer(g, v).filter(|&p| g.node(p).kind == "prim::ListConstruct")
}

fn optimize_block(g: &mut Graph, block: BlockId, mutated: &mut MutatedLists, changed: &mut bool) {
    for n in g.block(block).nodes.clone() {
        for b in g.node(n).blocks.clone() {
            optimize_block(g, b, mutated, changed);
        }
        let node = g.node(n);
        let (Some(&first), kind) = (node.inputs.first(), node.kind.clone()) else {
            continue;
        };
        let Some(list) = list_construct(g, first, mutated) else {
            continue;
        };
        let items = g.node(list).inputs.clone();
        let outputs = g.node(n).outputs.clone();
        match kind.as_str() {
            "aten::len" => {
                let c = insert_constant_before(g, n, IValue::Int(items.len() as i64), Type::Int);
                g.replace_all_uses(outputs[0], c);
                *changed = true;
            }
            "aten::__getitem__" => {
                let index = g
                    .node(n)
                    .inputs
                    .get(1)
                    .and_then(|&i| producer(g, i))
                    .and_then(|p| g.constant_value(p))
                    .and_then(|v| v.as_int());
                let len = items.len() as i64;
                if let Some(i) = index {
                    let k = if i < 0 { i + len } else { i };
                    if let Some(&item) = usize::try_from(k).ok().and_then(|k| items.get(k)) {
                        g.replace_all_uses(outputs[0], item);
                        *changed = true;
                    }
                }
            }
            "aten::add" if g.node(n).inputs.len() == 2 => {
                // two literal lists concatenated are one literal list
                let second = g.node(n).inputs[1];
                let Some(other) = list_construct(g, second, mutated) else {
                    continue;
                };
                let mut all = items.clone();
                all.extend(g.node(other).inputs.iter().copied());
                let ty = g.value(outputs[0]).ty.clone();
                let joined = g.create_node("prim::ListConstruct", all, vec![ty]);
                g.insert_before(joined, n);
                let out = g.node(joined).outputs[0];
                g.replace_all_uses(outputs[0], out);
                *changed = true;
            }
            "aten::slice" if g.node(n).inputs.len() == 4 => {
                // `optimizeSlice`: constant bounds (None or an int) pick the elements
                let constant = |v: ValueId| producer(g, v).and_then(|p| g.constant_value(p));
                let bounds: Option<Vec<IValue>> =
                    g.node(n).inputs[1..].iter().map(|&v| constant(v)).collect();
                let Some([start, end, step]) = bounds.as_deref() else {
                    continue;
                };
                let step = step.as_int().unwrap_or(1);
                let Ok(picked) = slice_indices(items.len(), start.as_int(), end.as_int(), step)
                else {
                    continue;
                };
                let elements = picked
                    .iter()
                    .filter_map(|&i| items.get(i).copied())
                    .collect();
                let ty = g.value(outputs[0]).ty.clone();
                let sliced = g.create_node("prim::ListConstruct", elements, vec![ty]);
                g.insert_before(sliced, n);
                let out = g.node(sliced).outputs[0];
                mutated.aliases.join(out, outputs[0]);
                g.replace_all_uses(outputs[0], out);
                *changed = true;
            }
            "prim::ListUnpack" if outputs.len() == items.len() => {
                for (o, i) in outputs.iter().zip(&items) {
                    g.replace_all_uses(*o, *i);
                }
                *changed = true;
            }
            _ => {}
        }
    }
}
