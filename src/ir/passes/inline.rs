//! Inlining of `prim::CallMethod` / `prim::CallFunction` (PyTorch's `Inline` pass), used for
//! `inlined_graph`.

use crate::ir::graph::{BlockId, Graph, NodeId, ValueId};
use crate::ir::CompileError;
use std::collections::HashMap;
use std::sync::Arc;

/// Supplies the graph a call node invokes.
pub trait CalleeGraphs {
    /// The callee graph of a `prim::CallMethod` / `prim::CallFunction` node in `graph`;
    /// `None` when the call is not inlined (a method of an interface, resolved at run time).
    fn callee(&self, graph: &Graph, call: NodeId) -> Result<Option<Arc<Graph>>, CompileError>;
}

/// More inlined calls than this are reported instead of inlined (recursion is not allowed in
/// TorchScript, so only a malformed program gets here).
const MAX_INLINED_CALLS: usize = 1 << 20;

thread_local! {
    /// Calls left to inline in the outermost `inline_calls` running on this thread; callees'
    /// own inlining (through `CalleeGraphs`) draws on the same budget.
    static BUDGET: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// Ends the outermost inlining on this thread (also on unwinding).
struct BudgetScope;

impl Drop for BudgetScope {
    fn drop(&mut self) {
        BUDGET.with(|b| b.set(None));
    }
}

/// Inline every call in `graph`, recursively.
pub fn inline_calls(graph: &mut Graph, callees: &dyn CalleeGraphs) -> Result<(), CompileError> {
    let root = graph.root;
    let (mut budget, scope) = match BUDGET.with(|b| b.get()) {
        Some(left) => (left, None),
        None => (MAX_INLINED_CALLS, Some(BudgetScope)),
    };
    BUDGET.with(|b| b.set(Some(budget)));
    let r = inline_block(graph, root, callees, &mut budget);
    // the nested calls' spending, then ours
    let left = BUDGET.with(|b| b.get()).unwrap_or(0).min(budget);
    BUDGET.with(|b| b.set(Some(left)));
    drop(scope);
    r
}

fn inline_block(
    graph: &mut Graph,
    block: BlockId,
    callees: &dyn CalleeGraphs,
    budget: &mut usize,
) -> Result<(), CompileError> {
    let mut i = 0;
    while let Some(&n) = graph.block(block).nodes.get(i) {
        let kind = graph.node(n).kind.clone();
        if kind == "prim::CallMethod" || kind == "prim::CallFunction" {
            if *budget == 0 {
                return Err(CompileError::Other(
                    "too many calls to inline (recursive call?)".into(),
                ));
            }
            *budget -= 1;
            BUDGET.with(|b| b.set(Some(*budget)));
            let callee = callees.callee(graph, n)?;
            *budget = BUDGET.with(|b| b.get()).unwrap_or(0).min(*budget);
            let Some(callee) = callee else {
                i += 1;
                continue;
            };
            let mut args = graph.node(n).inputs.clone();
            if kind == "prim::CallFunction" && !args.is_empty() {
                // the first input is the function constant
                args.remove(0);
            }
            let returns = insert_graph_before(graph, block, i, &callee, &args)?;
            let outputs = graph.node(n).outputs.clone();
            for (o, r) in outputs.iter().zip(&returns) {
                // the call's output name passes to the value replacing it (`inlineCallTo`)
                if let Some(name) = graph.value(*o).debug_name.clone() {
                    graph.set_debug_name(*r, &name);
                }
                graph.replace_all_uses(*o, *r);
            }
            graph.remove_node(n);
            // as `inlineCalls`, the inserted nodes are not scanned again: a callee's
            // optimized graph is inlined already, and one left unoptimized keeps its calls
            i += callee.block(callee.root).nodes.len();
            continue;
        }
        // a fork's subgraph is a graph of its own: PyTorch's `Inline` leaves its calls
        let blocks = graph.node(n).blocks.clone();
        if kind != "prim::fork" {
            for b in blocks {
                inline_block(graph, b, callees, budget)?;
            }
        }
        i += 1;
    }
    Ok(())
}

/// Copy `callee`'s body into `block` at position `pos`, with its inputs bound to `args`;
/// returns the values standing for its outputs.
pub fn insert_graph_before(
    graph: &mut Graph,
    block: BlockId,
    pos: usize,
    callee: &Graph,
    args: &[ValueId],
) -> Result<Vec<ValueId>, CompileError> {
    if callee.inputs().len() != args.len() {
        return Err(CompileError::Other(format!(
            "call passes {} arguments to a graph taking {}",
            args.len(),
            callee.inputs().len()
        )));
    }
    for (class, spelling) in &callee.class_spellings {
        graph
            .class_spellings
            .entry(class.clone())
            .or_insert_with(|| spelling.clone());
    }
    let mut map: HashMap<ValueId, ValueId> = callee
        .inputs()
        .iter()
        .copied()
        .zip(args.iter().copied())
        .collect();
    for (at, &n) in (pos..).zip(&callee.block(callee.root).nodes) {
        let copy = clone_node(graph, callee, n, &mut map);
        graph.insert_at(block, at, copy);
    }
    Ok(callee
        .outputs()
        .iter()
        .map(|v| map.get(v).copied().unwrap_or(*v))
        .collect())
}

/// Clone node `n` of `src` (with nested blocks) into `dst`, not yet placed in a block.
fn clone_node(
    dst: &mut Graph,
    src: &Graph,
    n: NodeId,
    map: &mut HashMap<ValueId, ValueId>,
) -> NodeId {
    let data = src.node(n);
    let inputs = data
        .inputs
        .iter()
        .map(|v| map.get(v).copied().unwrap_or(*v))
        .collect();
    let types = data
        .outputs
        .iter()
        .map(|&o| src.value(o).ty.clone())
        .collect();
    let copy = dst.create_node(data.kind.clone(), inputs, types);
    {
        let c = dst.node_mut(copy);
        c.overload = data.overload.clone();
        c.attrs = data.attrs.clone();
        c.source = data.source.clone();
    }
    let outs = dst.node(copy).outputs.clone();
    for (&o, &new) in data.outputs.iter().zip(&outs) {
        if let Some(name) = &src.value(o).debug_name {
            dst.set_debug_name(new, name);
        }
        map.insert(o, new);
    }
    for &b in &data.blocks {
        let nb = dst.add_block(copy);
        for &p in &src.block(b).params {
            let v = src.value(p);
            let np = dst.add_param(nb, v.ty.clone(), v.debug_name.clone());
            map.insert(p, np);
        }
        for &inner in &src.block(b).nodes {
            let c = clone_node(dst, src, inner, map);
            dst.append(nb, c);
        }
        let rets = src
            .block(b)
            .returns
            .iter()
            .map(|v| map.get(v).copied().unwrap_or(*v))
            .collect();
        dst.block_mut(nb).returns = rets;
    }
    copy
}
