//! `fork(f)` of a closure (PyTorch's `emitForkExpr` on a `prim::Closure`, after the closure
//! lowering): a `prim::fork` node whose block is the closure's body, with the values the body
//! captures lifted into block parameters bound to the node's inputs.

use super::Emitter;
use crate::frontend::ast::{self, StmtKind};
use crate::ir::graph::ValueId;
use crate::ir::CompileError;
use crate::values::types::Type;

impl Emitter<'_> {
    /// Emit `fork(name)` where `name` is a nested `def` without parameters.
    pub(super) fn emit_fork_closure(
        &mut self,
        def: &ast::FunctionDef,
        span: ast::Span,
    ) -> Result<ValueId, CompileError> {
        let (value, init) = match def.body.split_last() {
            Some((last, init)) => match &last.kind {
                StmtKind::Return(Some(value)) => (value, init),
                _ => {
                    return Err(self.err(
                        span,
                        "a forked function must end with `return value` (archive code does)",
                    ))
                }
            },
            None => return Err(self.err(span, "a forked function has an empty body")),
        };
        let source = self.b.source.clone();
        let node = self.b.insert(
            "prim::fork",
            None,
            vec![],
            vec![Type::Future(Box::new(Type::Any))],
        );
        let saved = self.b.block;
        let body = self.b.graph.add_block(node);
        self.b.block = body;
        self.push_frame();
        let result = self
            .emit_stmts(init)
            .and_then(|()| self.emit_value(value, None));
        self.pop_frame();
        self.b.block = saved;
        self.b.source = source;
        let result = result?;
        // PyTorch's `prim::Closure` and `prim::forkClosure` take three numbers of the graph
        // per fork (observed), tsrun's `prim::fork` output one
        self.b.graph.transient_value(None);
        self.b.graph.transient_value(None);
        self.b.graph.block_mut(body).returns = vec![result];
        let captured = self.b.graph.lift_captures(body);
        self.b.graph.node_mut(node).inputs = captured;
        self.b.graph.number_lifted_subgraph(body);
        let out = self.b.graph.node(node).outputs[0];
        let ty = Type::Future(Box::new(self.b.ty(result).clone()));
        self.b.graph.value_mut(out).ty = ty;
        Ok(out)
    }
}
