//! The SSA graph: `Graph` owns arenas of nodes, values and blocks addressed by ids, like
//! `torch::jit::Graph`. A node has inputs, outputs, attributes and nested blocks (`prim::If`,
//! `prim::Loop`); a block has parameters, an ordered node list and returns.

use crate::frontend::source::SourceRange;
use crate::values::types::Type;
use crate::values::IValue;
use std::collections::HashMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub u32);
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u32);
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockId(pub u32);

/// Where a value is defined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Def {
    /// Output `index` of a node.
    Node(NodeId, usize),
    /// Parameter `index` of a block (graph inputs are the root block's parameters).
    Param(BlockId, usize),
}

#[derive(Clone, Debug)]
pub struct ValueData {
    pub ty: Type,
    /// Unique name (`x`, `x.1`), kept unique within the graph as PyTorch's
    /// `Value::setDebugName` does; set it through [`Graph::set_debug_name`].
    pub debug_name: Option<String>,
    pub def: Def,
    /// PyTorch's `Value::unique()`: creation number, printed for unnamed values (`%4`).
    pub unique: usize,
}

/// A node attribute value (`prim::Constant[value=...]`, `prim::GetAttr[name="fc"]`, ...).
#[derive(Clone, Debug)]
pub enum Attr {
    Int(i64),
    Float(f64),
    Str(String),
    Ints(Vec<i64>),
    Floats(Vec<f64>),
    Strs(Vec<String>),
    Type(Type),
    /// Any constant value (tensors, tuples, devices, ...).
    Value(IValue),
}

/// Whether node `kind`'s `types` attribute is a list of types, printed unquoted
/// (`prim::isinstance[types=[list]]`, `prim::TypeCheck[types=[Float(2, strides=[1])]]`).
pub fn has_type_list_attr(kind: &str) -> bool {
    matches!(
        kind,
        "prim::isinstance" | "prim::TypeCheck" | "prim::RequiresGradCheck"
    )
}

#[derive(Clone, Debug)]
pub struct NodeData {
    /// `aten::add`, `prim::If`, `prim::CallMethod`, ...
    pub kind: String,
    /// The resolved schema overload name (`Tensor` in `aten::add.Tensor`), empty for the
    /// default overload; `None` for nodes that are not schema-backed operator calls.
    pub overload: Option<String>,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
    pub blocks: Vec<BlockId>,
    pub attrs: Vec<(String, Attr)>,
    pub source: Option<SourceRange>,
    /// The block this node belongs to.
    pub owner: BlockId,
}

impl NodeData {
    pub fn attr(&self, name: &str) -> Option<&Attr> {
        self.attrs.iter().find(|(n, _)| n == name).map(|(_, a)| a)
    }
    /// `kind` plus overload: `aten::add.Tensor`, or `aten::relu` for the default overload.
    pub fn qualified_op(&self) -> String {
        match &self.overload {
            Some(o) if !o.is_empty() => format!("{}.{}", self.kind, o),
            _ => self.kind.clone(),
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct BlockData {
    pub params: Vec<ValueId>,
    pub nodes: Vec<NodeId>,
    pub returns: Vec<ValueId>,
    /// The node that owns this block; `None` for the graph's root block.
    pub owner: Option<NodeId>,
}

/// Who holds a debug name: a value of the graph, or a transient value PyTorch's emitter
/// creates and later erases (the output of a `prim::Load`), which still takes part in naming.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NameHolder {
    Value(ValueId),
    Transient(usize),
}

/// PyTorch's per-graph naming state (`Graph::unique_names_`, `name_base_suffix_`,
/// `next_unique_`): printed value names and numbers depend on every value ever created, so
/// the emitter reproduces PyTorch's creation order, including transient values.
#[derive(Clone, Debug, Default)]
struct Naming {
    next_unique: usize,
    owners: HashMap<String, NameHolder>,
    base_suffix: HashMap<String, usize>,
    /// Names of live transient values, by transient index.
    transient_names: Vec<Option<String>>,
}

#[derive(Clone, Debug)]
pub struct Graph {
    pub values: Vec<ValueData>,
    pub nodes: Vec<NodeData>,
    pub blocks: Vec<BlockData>,
    pub root: BlockId,
    naming: Naming,
    /// How `str(graph)` spells the classes that are not plain classes, by qualified name:
    /// `Enum<q>`, `InterfaceType<Name>`, `NamedTuple(field : T, ...)` (filled by the emitter,
    /// which knows the class kinds).
    pub class_spellings: std::collections::BTreeMap<String, String>,
}

impl Default for Graph {
    fn default() -> Self {
        Graph::new()
    }
}

impl Graph {
    pub fn new() -> Graph {
        Graph {
            values: Vec::new(),
            nodes: Vec::new(),
            blocks: vec![BlockData::default()],
            root: BlockId(0),
            naming: Naming::default(),
            class_spellings: Default::default(),
        }
    }

    /// The unique number the next created value gets.
    pub fn next_unique(&self) -> usize {
        self.naming.next_unique
    }

    /// Name `v` as PyTorch's `Value::setDebugName`: if another value holds the name, that one
    /// is renamed to `base.N` (N above every suffix handed out for `base` so far); an empty
    /// name clears it. Names that are plain numbers are not names (PyTorch rejects them).
    pub fn set_debug_name(&mut self, v: ValueId, name: &str) {
        self.set_name_of(NameHolder::Value(v), name);
    }

    /// Create a value PyTorch's emitter creates and erases later (a `prim::Load` output):
    /// it takes a unique number and, while alive, the name. Returns its handle for
    /// [`Graph::erase_transient`].
    pub fn transient_value(&mut self, name: Option<&str>) -> usize {
        self.naming.next_unique += 1;
        let t = self.naming.transient_names.len();
        self.naming.transient_names.push(None);
        if let Some(name) = name {
            self.set_name_of(NameHolder::Transient(t), name);
        }
        t
    }

    /// Whether a transient value holds a name.
    pub fn transient_named(&self, t: usize) -> bool {
        self.naming
            .transient_names
            .get(t)
            .is_some_and(|n| n.is_some())
    }

    /// Name a transient value (the load an assignment `a = b` binds).
    pub fn set_transient_name(&mut self, t: usize, name: &str) {
        self.set_name_of(NameHolder::Transient(t), name);
    }

    /// Erase a transient value, freeing its name.
    pub fn erase_transient(&mut self, t: usize) {
        self.set_name_of(NameHolder::Transient(t), "");
    }

    /// Erase every transient value still alive (PyTorch's `EraseLoadStores`).
    pub fn erase_transients(&mut self) {
        for t in 0..self.naming.transient_names.len() {
            self.erase_transient(t);
        }
    }

    /// Free the name of a value that left the graph (PyTorch's `Graph::freeValue`).
    pub fn free_value_name(&mut self, v: ValueId) {
        self.set_name_of(NameHolder::Value(v), "");
    }

    fn holder_name(&mut self, h: NameHolder) -> &mut Option<String> {
        match h {
            NameHolder::Value(v) => &mut self.values[v.0 as usize].debug_name,
            NameHolder::Transient(t) => &mut self.naming.transient_names[t],
        }
    }

    fn set_name_of(&mut self, holder: NameHolder, name: &str) {
        if let Some(old) = self.holder_name(holder).take() {
            if self.naming.owners.get(&old) == Some(&holder) {
                self.naming.owners.remove(&old);
            }
        }
        if name.is_empty() || name.bytes().all(|c| c.is_ascii_digit()) {
            return;
        }
        if let Some(&previous) = self.naming.owners.get(name) {
            let (base, mut suffix) = match name.rsplit_once('.') {
                Some((b, s)) if !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit()) => {
                    (b.to_string(), s.parse::<usize>().unwrap_or(1))
                }
                _ => (name.to_string(), 1),
            };
            if let Some(&last) = self.naming.base_suffix.get(&base) {
                suffix = suffix.max(last + 1);
            }
            let replacement = loop {
                let candidate = format!("{base}.{suffix}");
                suffix += 1;
                if !self.naming.owners.contains_key(&candidate) {
                    break candidate;
                }
            };
            self.naming.base_suffix.insert(base, suffix);
            self.set_name_of(previous, &replacement);
        }
        self.naming.owners.insert(name.to_string(), holder);
        *self.holder_name(holder) = Some(name.to_string());
    }

    pub fn value(&self, v: ValueId) -> &ValueData {
        &self.values[v.0 as usize]
    }
    pub fn value_mut(&mut self, v: ValueId) -> &mut ValueData {
        &mut self.values[v.0 as usize]
    }
    pub fn node(&self, n: NodeId) -> &NodeData {
        &self.nodes[n.0 as usize]
    }
    pub fn node_mut(&mut self, n: NodeId) -> &mut NodeData {
        &mut self.nodes[n.0 as usize]
    }
    pub fn block(&self, b: BlockId) -> &BlockData {
        &self.blocks[b.0 as usize]
    }
    pub fn block_mut(&mut self, b: BlockId) -> &mut BlockData {
        &mut self.blocks[b.0 as usize]
    }

    /// Graph inputs (the root block's parameters).
    pub fn inputs(&self) -> &[ValueId] {
        &self.block(self.root).params
    }
    /// Graph outputs (the root block's returns).
    pub fn outputs(&self) -> &[ValueId] {
        &self.block(self.root).returns
    }

    /// Add a parameter to `block`.
    pub fn add_param(&mut self, block: BlockId, ty: Type, name: Option<String>) -> ValueId {
        let idx = self.block(block).params.len();
        let v = self.new_value(ty, name, Def::Param(block, idx));
        self.block_mut(block).params.push(v);
        v
    }

    /// Add a graph input.
    pub fn add_input(&mut self, ty: Type, name: Option<String>) -> ValueId {
        self.add_param(self.root, ty, name)
    }

    fn new_value(&mut self, ty: Type, debug_name: Option<String>, def: Def) -> ValueId {
        let id = ValueId(self.values.len() as u32);
        let unique = self.naming.next_unique;
        self.naming.next_unique += 1;
        self.values.push(ValueData {
            ty,
            debug_name: None,
            def,
            unique,
        });
        if let Some(name) = debug_name {
            self.set_debug_name(id, &name);
        }
        id
    }

    /// PyTorch's `Node::replaceWithNewSymbol` followed by destroying the old node: `node`
    /// becomes a `kind` node whose outputs are fresh values (new unique numbers) carrying the
    /// old outputs' types, names and uses; the old outputs' names are freed.
    pub fn replace_with_new_symbol(&mut self, node: NodeId, kind: &str, overload: Option<String>) {
        for (i, old) in self.node(node).outputs.clone().into_iter().enumerate() {
            let ty = self.value(old).ty.clone();
            let name = self.value(old).debug_name.clone();
            let new = self.new_value(ty, None, Def::Node(node, i));
            if let Some(name) = name {
                // takes the name over: the old value is renamed `name.N` first, as in PyTorch
                self.set_debug_name(new, &name);
            }
            self.replace_all_uses(old, new);
            self.free_value_name(old);
            self.node_mut(node).outputs[i] = new;
        }
        let n = self.node_mut(node);
        n.kind = kind.to_string();
        n.overload = overload;
    }

    /// Give `v` a specific unique number (the IR text parser keeps printed numbers).
    pub fn set_unique(&mut self, v: ValueId, unique: usize) {
        self.values[v.0 as usize].unique = unique;
        self.naming.next_unique = self.naming.next_unique.max(unique + 1);
    }

    /// Create a node (not yet placed in a block) with `n_outputs` outputs of the given types.
    pub fn create_node(
        &mut self,
        kind: impl Into<String>,
        inputs: Vec<ValueId>,
        output_types: Vec<Type>,
    ) -> NodeId {
        let id = NodeId(self.nodes.len() as u32);
        self.nodes.push(NodeData {
            kind: kind.into(),
            overload: None,
            inputs,
            outputs: Vec::new(),
            blocks: Vec::new(),
            attrs: Vec::new(),
            source: None,
            owner: self.root,
        });
        for (i, ty) in output_types.into_iter().enumerate() {
            let v = self.new_value(ty, None, Def::Node(id, i));
            self.node_mut(id).outputs.push(v);
        }
        id
    }

    /// Add an output to an existing node (used when loop-carried values are discovered).
    pub fn add_node_output(&mut self, node: NodeId, ty: Type) -> ValueId {
        let idx = self.node(node).outputs.len();
        let v = self.new_value(ty, None, Def::Node(node, idx));
        self.node_mut(node).outputs.push(v);
        v
    }

    /// Add an output whose unique number is given later by [`Graph::assign_unique`]
    /// (PyTorch adds control-flow outputs during SSA conversion, after the whole body).
    pub fn add_node_output_deferred(&mut self, node: NodeId, ty: Type) -> ValueId {
        let v = self.add_node_output(node, ty);
        self.naming.next_unique -= 1;
        self.values[v.0 as usize].unique = usize::MAX;
        v
    }

    /// Add a block parameter numbered later by [`Graph::assign_unique`].
    pub fn add_param_deferred(&mut self, block: BlockId, ty: Type) -> ValueId {
        let v = self.add_param(block, ty, None);
        self.naming.next_unique -= 1;
        self.values[v.0 as usize].unique = usize::MAX;
        v
    }

    /// Take `n` unique numbers without creating values (numbers PyTorch spends on values
    /// that tsrun creates at another time).
    pub fn skip_unique(&mut self, n: usize) {
        self.naming.next_unique += n;
    }

    /// Renumber the values created since arena length `mark` whose numbers are `from` or
    /// above: the one numbered `from + k` becomes `to + k` (`None`: deferred, numbered later).
    /// Returns the renumbered values with their offsets `k`, and rewinds the counter to
    /// `from`.
    pub fn renumber_since(
        &mut self,
        mark: usize,
        from: usize,
        to: Option<usize>,
    ) -> Vec<(ValueId, usize)> {
        let mut moved = Vec::new();
        for (i, v) in self.values.iter_mut().enumerate().skip(mark) {
            if v.unique != usize::MAX && v.unique >= from {
                let offset = v.unique - from;
                v.unique = to.map_or(usize::MAX, |t| t + offset);
                moved.push((ValueId(i as u32), offset));
            }
        }
        self.naming.next_unique = from;
        moved
    }

    /// Number deferred values by offset from the next unique number, taking `count` numbers.
    pub fn number_deferred(&mut self, values: &[(ValueId, usize)], count: usize) {
        let base = self.naming.next_unique;
        for &(v, offset) in values {
            self.values[v.0 as usize].unique = base + offset;
        }
        self.naming.next_unique += count;
    }

    /// Number and name the values afresh as PyTorch's `Graph::copy` does: inputs first, then
    /// each node's outputs followed by its blocks (parameters, then their nodes), names set in
    /// that order on an empty name table. Values no longer in the graph lose their names.
    pub fn renumber_as_copy(&mut self) {
        let mut order = self.inputs().to_vec();
        let mut forks = Vec::new();
        fn visit(g: &Graph, block: BlockId, order: &mut Vec<ValueId>, forks: &mut Vec<BlockId>) {
            for &n in &g.block(block).nodes {
                order.extend(g.node(n).outputs.iter().copied());
                // a fork's block is a subgraph, a graph of its own in PyTorch
                if g.node(n).kind == "prim::fork" {
                    forks.extend(g.node(n).blocks.iter().copied());
                    continue;
                }
                for &b in &g.node(n).blocks {
                    order.extend(g.block(b).params.iter().copied());
                    visit(g, b, order, forks);
                }
            }
        }
        visit(self, self.root, &mut order, &mut forks);
        let in_main: std::collections::HashSet<ValueId> = order.iter().copied().collect();
        let mut names: Vec<Option<String>> = Vec::with_capacity(self.values.len());
        for (i, v) in self.values.iter_mut().enumerate() {
            // subgraph values keep their names: they live in the subgraph's name table
            if in_main.contains(&ValueId(i as u32)) {
                names.push(v.debug_name.take());
            } else {
                names.push(None);
            }
        }
        self.naming = Naming::default();
        for v in order {
            self.assign_unique(v);
            if let Some(name) = &names[v.0 as usize] {
                self.set_debug_name(v, name);
            }
        }
        for b in forks {
            self.number_subgraph_as_copy(b);
        }
    }

    /// Remove output `i` of a node (its name is freed; later outputs move down).
    pub fn erase_node_output(&mut self, node: NodeId, i: usize) {
        let v = self.node_mut(node).outputs.remove(i);
        self.free_value_name(v);
        for (k, o) in self.node(node).outputs.clone().into_iter().enumerate() {
            self.value_mut(o).def = Def::Node(node, k);
        }
    }

    /// Remove parameter `i` of a block (its name is freed; later parameters move down).
    pub fn erase_block_param(&mut self, block: BlockId, i: usize) {
        let v = self.block_mut(block).params.remove(i);
        self.free_value_name(v);
        for (k, p) in self.block(block).params.clone().into_iter().enumerate() {
            self.value_mut(p).def = Def::Param(block, k);
        }
    }

    /// Give a deferred value the next unique number.
    pub fn assign_unique(&mut self, v: ValueId) {
        self.values[v.0 as usize].unique = self.naming.next_unique;
        self.naming.next_unique += 1;
    }

    /// Add a nested block to `node`.
    pub fn add_block(&mut self, node: NodeId) -> BlockId {
        let id = BlockId(self.blocks.len() as u32);
        self.blocks.push(BlockData {
            owner: Some(node),
            ..Default::default()
        });
        self.node_mut(node).blocks.push(id);
        id
    }

    /// Append a created node to the end of `block`.
    pub fn append(&mut self, block: BlockId, node: NodeId) {
        self.node_mut(node).owner = block;
        self.block_mut(block).nodes.push(node);
    }

    /// Insert a created node into `block` at position `pos`.
    pub fn insert_at(&mut self, block: BlockId, pos: usize, node: NodeId) {
        self.node_mut(node).owner = block;
        self.block_mut(block).nodes.insert(pos, node);
    }

    /// Place a created (or detached) node just before `before`, in `before`'s block
    /// (PyTorch's `insertBefore` / `WithInsertPoint guard(node)`).
    pub fn insert_before(&mut self, node: NodeId, before: NodeId) {
        let block = self.node(before).owner;
        let pos = self
            .block(block)
            .nodes
            .iter()
            .position(|&x| x == before)
            .unwrap_or(0);
        self.insert_at(block, pos, node);
    }

    /// Remove a node from its block (its id stays valid but is no longer reachable); the
    /// names of its outputs (and of values inside its blocks) are freed, as when PyTorch
    /// destroys a node.
    pub fn remove_node(&mut self, node: NodeId) {
        let b = self.node(node).owner;
        self.block_mut(b).nodes.retain(|&n| n != node);
        self.free_names_within(node);
    }

    /// Take a node out of its block to place it elsewhere (names and values stay).
    pub fn detach_node(&mut self, node: NodeId) {
        let b = self.node(node).owner;
        self.block_mut(b).nodes.retain(|&n| n != node);
    }

    fn free_names_within(&mut self, node: NodeId) {
        for v in self.node(node).outputs.clone() {
            self.free_value_name(v);
        }
        for b in self.node(node).blocks.clone() {
            for v in self.block(b).params.clone() {
                self.free_value_name(v);
            }
            for n in self.block(b).nodes.clone() {
                self.free_names_within(n);
            }
        }
    }

    /// Detach the nodes of `block` from position `from` on, freeing their names (a failed
    /// overload match drops what it inserted; PyTorch leaves such nodes for dead code
    /// elimination, which also frees them before anything is printed).
    pub fn truncate_block(&mut self, block: BlockId, from: usize) {
        let dropped: Vec<NodeId> = self.block(block).nodes.get(from..).unwrap_or(&[]).to_vec();
        self.block_mut(block).nodes.truncate(from);
        for n in dropped {
            self.free_names_within(n);
        }
    }

    /// Replace every use of `old` with `new` in all nodes and block returns.
    pub fn replace_all_uses(&mut self, old: ValueId, new: ValueId) {
        for n in &mut self.nodes {
            for i in &mut n.inputs {
                if *i == old {
                    *i = new;
                }
            }
        }
        for b in &mut self.blocks {
            for r in &mut b.returns {
                if *r == old {
                    *r = new;
                }
            }
        }
    }

    /// Turn the values `block` (a subgraph body, as `prim::fork`'s) reads from outside it into
    /// parameters of the block, in first-use order, and return those outer values: they become
    /// the owning node's inputs, as PyTorch's lowering of a closure's captures.
    pub fn lift_captures(&mut self, block: BlockId) -> Vec<ValueId> {
        let mut inner_nodes = Vec::new();
        self.walk(block, &mut |n| inner_nodes.push(n));
        let mut inner_blocks = vec![block];
        for &n in &inner_nodes {
            inner_blocks.extend(self.node(n).blocks.iter().copied());
        }
        let mut defined = std::collections::HashSet::new();
        for &b in &inner_blocks {
            defined.extend(self.block(b).params.iter().copied());
        }
        for &n in &inner_nodes {
            defined.extend(self.node(n).outputs.iter().copied());
        }
        let mut captured: Vec<ValueId> = Vec::new();
        let mut note = |v: ValueId| {
            if !defined.contains(&v) && !captured.contains(&v) {
                captured.push(v);
            }
        };
        for &n in &inner_nodes {
            self.node(n).inputs.iter().for_each(|&v| note(v));
            // a nested block's returns are read where its node runs
            for &b in &self.node(n).blocks {
                self.block(b).returns.iter().for_each(|&v| note(v));
            }
        }
        self.block(block).returns.iter().for_each(|&v| note(v));
        for &outer in &captured {
            let ty = self.value(outer).ty.clone();
            // numbered with the subgraph (`number_lifted_subgraph`), not the graph
            let param = self.add_param_deferred(block, ty);
            for &n in &inner_nodes {
                for i in &mut self.node_mut(n).inputs {
                    if *i == outer {
                        *i = param;
                    }
                }
            }
            for &b in &inner_blocks {
                for r in &mut self.block_mut(b).returns {
                    if *r == outer {
                        *r = param;
                    }
                }
            }
        }
        captured
    }

    /// Values of a fork's subgraph `block` in `Graph::copy` order (node outputs, then nested
    /// blocks' parameters and nodes), each with the captured parameters a node reads first.
    fn subgraph_copy_order(&self, block: BlockId) -> Vec<(Vec<ValueId>, Vec<ValueId>)> {
        fn visit(
            g: &Graph,
            params: &[ValueId],
            b: BlockId,
            out: &mut Vec<(Vec<ValueId>, Vec<ValueId>)>,
        ) {
            let captured = |vs: &[ValueId]| -> Vec<ValueId> {
                vs.iter().copied().filter(|v| params.contains(v)).collect()
            };
            for &n in &g.block(b).nodes {
                let node = g.node(n);
                out.push((captured(&node.inputs), node.outputs.clone()));
                if node.kind == "prim::fork" {
                    continue;
                }
                for &nb in &node.blocks {
                    out.push((Vec::new(), g.block(nb).params.clone()));
                    visit(g, params, nb, out);
                    out.push((captured(&g.block(nb).returns), Vec::new()));
                }
            }
        }
        let params = self.block(block).params.clone();
        let mut out = Vec::new();
        visit(self, &params, block, &mut out);
        out.push((
            self.block(block)
                .returns
                .iter()
                .copied()
                .filter(|v| params.contains(v))
                .collect(),
            Vec::new(),
        ));
        out
    }

    /// Number a fork's subgraph as PyTorch's closure lifting leaves it (`liftClosure`, then
    /// `inlineForkedClosures`): 0 is the context input, each captured value takes the next
    /// number where the copy first reads it, the body's values theirs in copy order, and the
    /// subgraph's inputs, added last, the numbers after.
    pub fn number_lifted_subgraph(&mut self, block: BlockId) {
        let mut next = 1;
        let mut seen = std::collections::HashSet::new();
        for (reads, defs) in self.subgraph_copy_order(block) {
            next += reads.iter().filter(|&&v| seen.insert(v)).count();
            for v in defs {
                self.values[v.0 as usize].unique = next;
                next += 1;
            }
        }
        for v in self.block(block).params.clone() {
            self.values[v.0 as usize].unique = next;
            next += 1;
        }
    }

    /// Number a fork's subgraph as `Graph::copy` does: inputs, then values in copy order.
    fn number_subgraph_as_copy(&mut self, block: BlockId) {
        let mut order = self.block(block).params.clone();
        for (_, defs) in self.subgraph_copy_order(block) {
            order.extend(defs);
        }
        for (k, v) in order.into_iter().enumerate() {
            self.values[v.0 as usize].unique = k;
        }
    }

    /// Nodes of `block` and, recursively, of its nested blocks, in program order.
    pub fn walk(&self, block: BlockId, f: &mut dyn FnMut(NodeId)) {
        for &n in &self.block(block).nodes {
            f(n);
            for &b in &self.node(n).blocks {
                self.walk(b, f);
            }
        }
    }

    /// A constant's value (`prim::Constant[value=...]`); `IValue::None` for `prim::Constant()`.
    pub fn constant_value(&self, node: NodeId) -> Option<IValue> {
        let n = self.node(node);
        if n.kind != "prim::Constant" {
            return None;
        }
        Some(match n.attr("value") {
            None => IValue::None,
            Some(Attr::Int(i)) => IValue::Int(*i),
            Some(Attr::Float(f)) => IValue::Double(*f),
            Some(Attr::Str(s)) => IValue::str(s.as_str()),
            Some(Attr::Value(v)) => v.clone(),
            Some(_) => return None,
        })
    }
}

/// The types a `prim::isinstance` node's `types` attribute names.
pub fn isinstance_types(attr: Option<&Attr>) -> Vec<Type> {
    use crate::values::types::parse_annotation;
    match attr {
        Some(Attr::Type(t)) => vec![t.clone()],
        Some(Attr::Strs(s)) => s.iter().filter_map(|s| parse_annotation(s)).collect(),
        Some(Attr::Str(s)) => parse_annotation(s).into_iter().collect(),
        Some(Attr::Value(IValue::List(l))) => l
            .items()
            .iter()
            .filter_map(|v| v.as_str().and_then(parse_annotation))
            .collect(),
        _ => Vec::new(),
    }
}

/// The attribute a `prim::Constant` carries for `value` (`None` for the None constant).
pub fn constant_attr(value: IValue) -> Option<Attr> {
    match value {
        IValue::None => None,
        IValue::Int(i) => Some(Attr::Int(i)),
        IValue::Double(f) => Some(Attr::Float(f)),
        IValue::String(s) => Some(Attr::Str(s.to_string())),
        other => Some(Attr::Value(other)),
    }
}

/// The type PyTorch gives a constant of this value (`insertConstant`).
pub fn constant_type(value: &IValue) -> Type {
    match value {
        IValue::None => Type::NoneType,
        IValue::Bool(_) => Type::Bool,
        IValue::Int(_) => Type::Int,
        IValue::Double(_) => Type::Float,
        IValue::Complex(_) => Type::Complex,
        IValue::String(_) => Type::Str,
        IValue::Tensor(_) => Type::Tensor,
        IValue::Device(_) => Type::Device,
        IValue::List(l) => Type::list(l.elem_type().clone()),
        IValue::Tuple(t) => match t.class() {
            Some(c) => Type::Class(c.clone()),
            None => Type::Tuple(t.items().iter().map(constant_type).collect()),
        },
        IValue::Dict(d) => Type::dict(d.key_type().clone(), d.value_type().clone()),
        IValue::Object(o) => Type::Class(o.class_name().clone()),
        IValue::Enum(e) => Type::Class(e.class.clone()),
        IValue::Function(f) => Type::Function(f.clone()),
        IValue::Storage(_) => Type::Storage,
        IValue::Generator(_) => Type::Generator,
        IValue::Await(v) => Type::Await(Box::new(constant_type(v))),
        IValue::Uninitialized | IValue::Future(_) => Type::Any,
    }
}
