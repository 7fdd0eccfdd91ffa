//! Inserting nodes into a graph at an insertion point (the end of the current block), with the
//! source range of the statement being emitted.

use crate::frontend::source::SourceRange;
use crate::ir::graph::{constant_attr, constant_type, Attr, BlockId, Graph, NodeId, ValueId};
use crate::values::types::Type;
use crate::values::IValue;

/// A graph under construction plus its insertion point.
pub struct Builder {
    pub graph: Graph,
    /// Nodes are appended to the end of this block.
    pub block: BlockId,
    /// Source range given to inserted nodes.
    pub source: Option<SourceRange>,
}

impl Builder {
    pub fn new(graph: Graph) -> Builder {
        let block = graph.root;
        Builder {
            graph,
            block,
            source: None,
        }
    }

    pub fn ty(&self, v: ValueId) -> &Type {
        &self.graph.value(v).ty
    }

    /// Create and append a node; `overload` is `Some` for schema-backed operators.
    pub fn insert(
        &mut self,
        kind: &str,
        overload: Option<&str>,
        inputs: Vec<ValueId>,
        output_types: Vec<Type>,
    ) -> NodeId {
        let n = self.graph.create_node(kind, inputs, output_types);
        let data = self.graph.node_mut(n);
        data.overload = overload.map(str::to_string);
        data.source = if created_without_range(kind) {
            None
        } else {
            self.source.clone()
        };
        self.graph.append(self.block, n);
        n
    }

    /// Append a node with exactly one output and return that output.
    pub fn insert1(
        &mut self,
        kind: &str,
        overload: Option<&str>,
        inputs: Vec<ValueId>,
        output_type: Type,
    ) -> ValueId {
        let n = self.insert(kind, overload, inputs, vec![output_type]);
        self.graph.node(n).outputs[0]
    }

    /// Append `prim::Constant` holding `value`.
    pub fn constant(&mut self, value: IValue) -> ValueId {
        let ty = constant_type(&value);
        self.constant_typed(value, ty)
    }

    pub fn constant_typed(&mut self, value: IValue, ty: Type) -> ValueId {
        let attr = constant_attr(value);
        let n = self
            .graph
            .create_node("prim::Constant", Vec::new(), vec![ty]);
        let data = self.graph.node_mut(n);
        // A function value is a constant PyTorch creates without a range.
        let function = matches!(attr, Some(Attr::Value(IValue::Function(_))));
        if let Some(a) = attr {
            data.attrs.push(("value".to_string(), a));
        }
        data.source = if function { None } else { self.source.clone() };
        self.graph.append(self.block, n);
        self.graph.node(n).outputs[0]
    }

    /// A `prim::Constant` without a source range: what PyTorch's `graph->insertConstant(v)`
    /// (no location) creates, e.g. `tolist`'s dimension and element-kind operands.
    pub fn constant_without_range(&mut self, value: IValue) -> ValueId {
        let v = self.constant(value);
        if let crate::ir::graph::Def::Node(n, _) = self.graph.value(v).def {
            self.graph.node_mut(n).source = None;
        }
        v
    }

    /// A `prim::Constant` inserted before the first node of the graph (PyTorch's
    /// `materializeConstant`, used for number literals).
    pub fn constant_at_front(&mut self, value: IValue) -> ValueId {
        let ty = constant_type(&value);
        let attr = constant_attr(value);
        let n = self
            .graph
            .create_node("prim::Constant", Vec::new(), vec![ty]);
        let data = self.graph.node_mut(n);
        if let Some(a) = attr {
            data.attrs.push(("value".to_string(), a));
        }
        data.source = self.source.clone();
        let root = self.graph.root;
        self.graph.insert_at(root, 0, n);
        self.graph.node(n).outputs[0]
    }

    pub fn none(&mut self) -> ValueId {
        self.constant(IValue::None)
    }
}

/// Node kinds PyTorch's emitter creates through `Graph::create*` helpers (`createTuple`,
/// `createList`, `createGetAttr`, ...) and never gives a source range, so `str(graph)` prints
/// no comment for them. The one exception, a NamedTuple constructor call, sets its range
/// itself.
fn created_without_range(kind: &str) -> bool {
    matches!(
        kind,
        "prim::GetAttr"
            | "prim::SetAttr"
            | "prim::TupleConstruct"
            | "prim::TupleUnpack"
            | "prim::TupleIndex"
            | "prim::ListConstruct"
            | "prim::ListUnpack"
            | "prim::DictConstruct"
            | "prim::unchecked_cast"
            | "prim::isinstance"
            | "prim::EnumName"
            | "prim::EnumValue"
            | "prim::Enter"
            | "prim::Exit"
            | "prim::tolist"
    )
}
