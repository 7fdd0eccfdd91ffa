//! The SSA graph: `Graph` owns arenas of nodes, values and blocks addressed by ids, like
//! `torch::jit::Graph`. A node has inputs, outputs, attributes and nested blocks (`prim::If`,
//! `prim::Loop`); a block has parameters, an ordered node list and returns.

use super::source::SourceRange;
use super::types::Type;
use crate::runtime::IValue;

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
    /// Source-level name (`x`, `h1`); the printer makes it unique (`x.1`).
    pub debug_name: Option<String>,
    pub def: Def,
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

#[derive(Clone, Debug)]
pub struct Graph {
    pub values: Vec<ValueData>,
    pub nodes: Vec<NodeData>,
    pub blocks: Vec<BlockData>,
    pub root: BlockId,
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
        }
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
        self.values.push(ValueData {
            ty,
            debug_name,
            def,
        });
        id
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

    /// Remove a node from its block (its id stays valid but is no longer reachable).
    pub fn remove_node(&mut self, node: NodeId) {
        let b = self.node(node).owner;
        self.block_mut(b).nodes.retain(|&n| n != node);
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
