//! `CanonicalizeOutputs`: the outputs of every `prim::If` and `prim::Loop` are put in the
//! order of their first use. PyTorch runs it last in `runCleanupPasses` so that a graph
//! re-compiled from its own printed code gets the same output order (the emitter adds merged
//! variables sorted by name, which printing and re-parsing would otherwise permute); the code
//! printer's `a, b = x, y` lines follow this order.

use std::collections::HashMap;

use crate::ir::graph::{BlockId, Def, Graph, NodeId, ValueId};

/// Where a use sits in the canonical node order (`isBefore` in canonicalize.cpp): the
/// position path from the root block down to the using node, then the input offset.
/// Lexicographic order on the path is PyTorch's order: nodes of one block by position, a
/// node before anything nested in it (a prefix sorts first), the then-block before the
/// else-block; a block's return comes after its nodes (position = number of nodes).
type UseKey = (Vec<usize>, usize);

struct Positions {
    /// Node -> its position in its block.
    node_pos: HashMap<NodeId, usize>,
}

impl Positions {
    fn new(g: &Graph) -> Positions {
        let mut node_pos = HashMap::new();
        let mut stack = vec![g.root];
        while let Some(b) = stack.pop() {
            for (i, &n) in g.block(b).nodes.iter().enumerate() {
                node_pos.insert(n, i);
                stack.extend(g.node(n).blocks.iter().copied());
            }
        }
        Positions { node_pos }
    }

    /// The path of position / block-index pairs leading to `pos` in block `b`.
    fn path(&self, g: &Graph, mut b: BlockId, pos: usize) -> Vec<usize> {
        let mut rev = vec![pos];
        while let Some(owner) = g.block(b).owner {
            let index = g
                .node(owner)
                .blocks
                .iter()
                .position(|&x| x == b)
                .unwrap_or(0);
            rev.push(index);
            rev.push(self.node_pos.get(&owner).copied().unwrap_or(0));
            b = g.node(owner).owner;
        }
        rev.reverse();
        rev
    }
}

/// The first use of every value, by the canonical order.
fn first_uses(g: &Graph, pos: &Positions) -> HashMap<ValueId, UseKey> {
    let mut first: HashMap<ValueId, UseKey> = HashMap::new();
    let mut record = |v: ValueId, key: UseKey| {
        first
            .entry(v)
            .and_modify(|k| {
                if key < *k {
                    *k = key.clone();
                }
            })
            .or_insert(key);
    };
    let mut stack = vec![g.root];
    while let Some(b) = stack.pop() {
        let block = g.block(b);
        for (i, &n) in block.nodes.iter().enumerate() {
            let path = pos.path(g, b, i);
            for (k, &v) in g.node(n).inputs.iter().enumerate() {
                record(v, (path.clone(), k));
            }
            stack.extend(g.node(n).blocks.iter().copied());
        }
        let path = pos.path(g, b, block.nodes.len());
        for (k, &v) in block.returns.iter().enumerate() {
            record(v, (path.clone(), k));
        }
    }
    first
}

/// The permutation ordering `values` by first use; unused values keep their order, last.
fn sorted_indexes(values: &[ValueId], first: &HashMap<ValueId, UseKey>) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..values.len()).collect();
    // A stable sort: unused values (no key) compare equal among themselves and after the rest.
    idx.sort_by(
        |&a, &b| match (first.get(&values[a]), first.get(&values[b])) {
            (Some(x), Some(y)) => x.cmp(y),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => std::cmp::Ordering::Equal,
        },
    );
    idx
}

fn permute<T: Copy>(items: &mut [T], order: &[usize]) {
    let old = items.to_vec();
    for (dst, &src) in items.iter_mut().zip(order) {
        if let Some(&x) = old.get(src) {
            *dst = x;
        }
    }
}

fn permute_outputs(g: &mut Graph, n: NodeId, order: &[usize]) {
    permute(&mut g.node_mut(n).outputs, order);
    for (i, v) in g.node(n).outputs.clone().into_iter().enumerate() {
        g.value_mut(v).def = Def::Node(n, i);
    }
}

/// `CanonicalizeIfOutputs` / `CanonicalizeLoopOutputs` (`IfView::permuteOutputs`,
/// `LoopView::permuteLoopCarried`): the outputs together with what feeds them.
/// `first` caches the first uses; it is cleared when a permutation moves uses.
fn canonicalize_node(
    g: &mut Graph,
    n: NodeId,
    pos: &Positions,
    first: &mut Option<HashMap<ValueId, UseKey>>,
) {
    let kind = g.node(n).kind.clone();
    if kind != "prim::If" && kind != "prim::Loop" {
        return;
    }
    let uses = first.get_or_insert_with(|| first_uses(g, pos));
    let order = sorted_indexes(&g.node(n).outputs, uses);
    if order.iter().enumerate().all(|(i, &j)| i == j) {
        return;
    }
    *first = None;
    let blocks = g.node(n).blocks.clone();
    if kind == "prim::If" {
        permute_outputs(g, n, &order);
        for b in blocks {
            permute(&mut g.block_mut(b).returns, &order);
        }
        return;
    }
    // A loop's carried values sit after the trip count and condition (node inputs), after
    // the iteration number (body parameters) and after the next condition (body returns).
    let carried = order.len();
    if g.node(n).inputs.len() != carried + 2 {
        return;
    }
    permute_outputs(g, n, &order);
    permute(&mut g.node_mut(n).inputs[2..], &order);
    if let Some(&body) = blocks.first() {
        let block = g.block_mut(body);
        if block.params.len() != carried + 1 || block.returns.len() != carried + 1 {
            return;
        }
        permute(&mut block.params[1..], &order);
        permute(&mut block.returns[1..], &order);
        for (i, v) in g.block(body).params.clone().into_iter().enumerate() {
            g.value_mut(v).def = Def::Param(body, i);
        }
    }
}

fn canonicalize_block(
    g: &mut Graph,
    b: BlockId,
    pos: &Positions,
    first: &mut Option<HashMap<ValueId, UseKey>>,
) {
    // Last node first: a node's output order depends on the uses after it, among them the
    // block returns of enclosing control flow, which are permuted before their inner nodes.
    for n in g.block(b).nodes.clone().into_iter().rev() {
        canonicalize_node(g, n, pos, first);
        for inner in g.node(n).blocks.clone() {
            canonicalize_block(g, inner, pos, first);
        }
    }
}

/// Order the outputs of every if and loop by first use (`CanonicalizeOutputs`).
pub fn canonicalize_outputs(g: &mut Graph) {
    // Permuting outputs moves no node, so positions are computed once.
    let pos = Positions::new(g);
    canonicalize_block(g, g.root, &pos, &mut None);
}
