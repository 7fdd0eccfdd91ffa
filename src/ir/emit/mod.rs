//! The TorchScript compiler front end: AST to SSA graph, following PyTorch's `ir_emitter.cpp`
//! on the already-lowered code PyTorch's printer writes into archives.
//!
//! Variables live in a stack of frames (one per block). `if` branches merge the variables
//! both branches see into `prim::If` outputs (sorted by name, as `ConvertToSSA` does); loops
//! carry every outer variable their body assigns as `prim::Loop` block parameters.

pub mod builder;
mod expr;
pub mod matching;
mod stmt;

use crate::frontend::ast;
use crate::ir::graph::{Def, Graph, ValueId};
use crate::ir::passes;
use crate::ir::types::Type;
use crate::ir::unit::{ClassInfo, CompilationUnit, Signature};
use crate::ir::CompileError;
use builder::Builder;
use indexmap::IndexMap;
use std::sync::Arc;

/// Compile one function or method body to a graph (cleaned up as PyTorch does after emission).
pub fn emit_function(
    unit: &CompilationUnit,
    file: &ast::File,
    def: &ast::FunctionDef,
    signature: &Signature,
    class: Option<Arc<ClassInfo>>,
) -> Result<Graph, CompileError> {
    let mut e = Emitter {
        unit,
        file,
        b: Builder::new(Graph::new()),
        frames: vec![Frame::default()],
        class,
        fresh_from: 0,
    };
    for p in &signature.params {
        let v = e.b.graph.add_input(p.ty.clone(), Some(p.name.clone()));
        e.frames[0].vars.insert(p.name.clone(), v);
    }
    let body = &def.body;
    let (last, init) = match body.split_last() {
        Some((last, init)) if matches!(last.kind, ast::StmtKind::Return(_)) => (Some(last), init),
        _ => (None, body.as_slice()),
    };
    e.emit_stmts(init)?;
    let result = match last.map(|s| (&s.kind, s.span)) {
        Some((ast::StmtKind::Return(Some(value)), _)) => {
            let v = e.emit_value(value, Some(&signature.return_type))?;
            e.b.source = Some(e.file.range(value.span));
            matching::convert_to_type(&mut e.b, &signature.return_type, v, true)
        }
        _ => e.b.none(),
    };
    let root = e.b.graph.root;
    e.b.graph.block_mut(root).returns = vec![result];
    let mut graph = e.b.graph;
    passes::cleanup(&mut graph);
    Ok(graph)
}

/// Variables assigned in one block.
#[derive(Default)]
struct Frame {
    vars: IndexMap<String, ValueId>,
    /// Names bound to a global that is not a value (`_0 = __torch__.m.f`, a function or
    /// class): calls through them resolve like calls of the global itself.
    aliases: IndexMap<String, String>,
}

struct Emitter<'a> {
    unit: &'a CompilationUnit,
    file: &'a ast::File,
    b: Builder,
    frames: Vec<Frame>,
    /// The class whose method is being compiled.
    #[allow(dead_code)]
    class: Option<Arc<ClassInfo>>,
    /// Values numbered from here on were created by the statement being emitted. PyTorch's
    /// emitter reads a variable through a fresh `prim::Load`, so an assignment names only
    /// what its right-hand side computed: after `y = x` (or `y = (x, z)[0]`) the name `y`
    /// went to a load that SSA conversion erased, and `x`'s value stays as it was.
    fresh_from: usize,
}

/// Names PyTorch gives values (`_0`, `_1` are printer temporaries and stay unnamed).
fn meaningful_name(name: &str) -> bool {
    match name.strip_prefix('_') {
        None => !name.is_empty(),
        Some(rest) => rest.chars().any(|c| !c.is_ascii_digit()),
    }
}

impl Emitter<'_> {
    fn err(&self, span: ast::Span, message: impl Into<String>) -> CompileError {
        CompileError::At {
            location: self.file.range(span).location(),
            message: message.into(),
        }
    }

    fn lookup(&self, name: &str) -> Option<ValueId> {
        self.frames
            .iter()
            .rev()
            .find_map(|f| f.vars.get(name).copied())
    }

    /// Bind `name` in the innermost frame, naming the value after it when it is defined in
    /// the current block and still unnamed.
    fn set_var(&mut self, name: &str, v: ValueId) {
        let in_block = match self.b.graph.value(v).def {
            Def::Node(n, _) => self.b.graph.node(n).owner == self.b.block,
            Def::Param(b, _) => b == self.b.block,
        };
        let fresh = v.0 as usize >= self.fresh_from;
        if in_block && fresh && meaningful_name(name) && self.b.graph.value(v).debug_name.is_none()
        {
            self.b.graph.value_mut(v).debug_name = Some(name.to_string());
        }
        if let Some(f) = self.frames.last_mut() {
            f.vars.insert(name.to_string(), v);
        }
    }

    /// The global a name was bound to by `name = some.global.function`.
    fn lookup_alias(&self, name: &str) -> Option<String> {
        self.frames
            .iter()
            .rev()
            .find_map(|f| f.aliases.get(name).cloned())
    }

    fn push_frame(&mut self) {
        self.frames.push(Frame::default());
    }
    fn pop_frame(&mut self) -> Frame {
        self.frames.pop().unwrap_or_default()
    }

    /// The element types of a tuple or NamedTuple type.
    fn tuple_types(&self, ty: &Type) -> Option<Vec<Type>> {
        match ty {
            Type::Tuple(ts) => Some(ts.clone()),
            Type::Class(c) => {
                let class = self.unit.class(c)?;
                (class.kind == ast::ClassKind::NamedTuple)
                    .then(|| class.fields.iter().map(|(_, t, _)| t.clone()).collect())
            }
            _ => None,
        }
    }
}
