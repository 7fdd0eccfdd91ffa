//! Statements: assignment, `if`, loops, attribute stores.

use super::expr::Sugared;
use super::matching::tuple_elements;
use super::Emitter;
use crate::frontend::ast::{self, Expr, ExprKind, Stmt, StmtKind};
use crate::ir::graph::{Attr, NodeId, ValueId};
use crate::ir::CompileError;
use crate::ops::schema::{is_subtype, unify_types, unify_types_to_union, union_of};

/// Variables an `if` condition narrows in its true and its false branch, with their types.
type Refinements = (Vec<(String, Type)>, Vec<(String, Type)>);
use crate::values::types::Type;
use crate::values::IValue;

/// An attribute or item assignment target whose object (and index) is already emitted.
enum StoreTarget {
    Attr(ValueId, String),
    Item(ValueId, ValueId),
}

/// What a `for` loop iterates over.
enum Iterable {
    /// `range(...)`: the trip count and, for `range(start, end, step)`, start and step.
    Range {
        trip: ValueId,
        start_step: Option<(ValueId, ValueId)>,
    },
    /// A list, string, tensor (indexed with `aten::__getitem__`/`aten::select`).
    Indexed {
        value: ValueId,
        trip: ValueId,
    },
    /// `enumerate(x)` / `zip(a, b, ...)`.
    Enumerate(Box<Iterable>),
    Zip {
        parts: Vec<Iterable>,
        trip: ValueId,
    },
}

impl Emitter<'_> {
    pub(super) fn emit_stmts(&mut self, stmts: &[Stmt]) -> Result<(), CompileError> {
        stacker::maybe_grow(
            super::expr::EMIT_RED_ZONE,
            super::expr::EMIT_STACK_GROWTH,
            || {
                for s in stmts {
                    self.emit_stmt(s)?;
                }
                Ok(())
            },
        )
    }

    fn emit_stmt(&mut self, s: &Stmt) -> Result<(), CompileError> {
        self.b.source = Some(self.file.range(s.span));
        self.stand_ins.clear();
        match &s.kind {
            StmtKind::Expr(e) => {
                self.emit_sugared(e, None)?;
            }
            StmtKind::Pass => {}
            StmtKind::Assign { targets, value } => {
                if let ([target], true) = (targets.as_slice(), is_dotted_name(value)) {
                    if let ExprKind::Name(alias) = &target.kind {
                        // `_0 = __torch__.m.f`: functions are not values; remember the name
                        match self.emit_sugared(value, None)? {
                            Sugared::Global(g)
                                if self.unit.function_signature(&g).is_some()
                                    || self.unit.class(&g).is_some() =>
                            {
                                if let Some(f) = self.frames.last_mut() {
                                    f.aliases.insert(alias.clone(), g);
                                }
                            }
                            other => {
                                let v = self.as_value(other, value.span)?;
                                self.assign(target, v)?;
                            }
                        }
                        return Ok(());
                    }
                }
                // `emitSelectAssign` / `emitSubscriptAssign`: a single attribute or item
                // target emits its object (and index) before the value
                if let [target] = targets.as_slice() {
                    if let Some(pending) = self.emit_store_target(target)? {
                        let v = self.emit_value(value, None)?;
                        return self.store(pending, v, target.span);
                    }
                }
                let hint = match targets.as_slice() {
                    [t] => self.target_type_hint(t),
                    _ => None,
                };
                let v = self.emit_value(value, hint.as_ref())?;
                for t in targets {
                    self.assign(t, v)?;
                }
            }
            StmtKind::AnnAssign { target, ty, value } => {
                let ty = ty.to_type().map_err(|e| self.err(s.span, e))?;
                let Some(value) = value else {
                    return Err(self.err(s.span, "annotated declaration without a value"));
                };
                let v = self.emit_value(value, Some(&ty))?;
                let v = super::matching::convert_to_type(&mut self.b, &ty, v, true);
                self.assign(target, v)?;
                // the variable keeps the annotated type (`insertStore` records it), which an
                // `if` merge and a loop's carried value are typed by
                if let ExprKind::Name(name) = &target.kind {
                    self.bind_declared(name, v, ty);
                }
            }
            StmtKind::AugAssign { target, op, value } => {
                self.emit_aug_assign(target, *op, value)?
            }
            StmtKind::If { cond, body, orelse } => self.emit_if(cond, body, orelse)?,
            StmtKind::While { cond, body } => self.emit_while(cond, body)?,
            StmtKind::For { target, iter, body } => self.emit_for(target, iter, body, s.span)?,
            StmtKind::Return(_) => {
                return Err(self.err(
                    s.span,
                    "`return` before the end of a function is not supported (archives \
                     hold code with a single final return)",
                ))
            }
            StmtKind::Raise(_) => return Err(self.err(
                s.span,
                "`raise` statements are not supported (archive code uses ops.prim.RaiseException)",
            )),
            StmtKind::Assert { .. } => {
                return Err(self.err(s.span, "`assert` statements are not supported"))
            }
            StmtKind::With { items, body } => self.emit_with(items, body)?,
            StmtKind::Del(targets) => {
                for t in targets {
                    match &t.kind {
                        ExprKind::Name(n) => {
                            for f in self.frames.iter_mut().rev() {
                                if f.vars.shift_remove(n).is_some() {
                                    break;
                                }
                            }
                        }
                        _ => return Err(self.err(t.span, "`del` of this target is not supported")),
                    }
                }
            }
            StmtKind::Global(_) => return Err(self.err(s.span, "`global` is not supported")),
            StmtKind::Break | StmtKind::Continue => {
                return Err(self.err(s.span, "`break`/`continue` are not supported"))
            }
            // a closure (PyTorch's `emitClosure`): archives hold them only as the function a
            // following `fork(name)` runs, emitted there as the `prim::fork` subgraph
            StmtKind::FunctionDef(def) => {
                if !def.params.is_empty() {
                    return Err(self.err(
                        s.span,
                        "nested function definitions with parameters are not supported",
                    ));
                }
                if let Some(f) = self.frames.last_mut() {
                    f.closures
                        .insert(def.name.name.clone(), std::sync::Arc::new((**def).clone()));
                }
            }
        }
        Ok(())
    }

    /// The type of an existing variable being re-assigned, used to type empty literals.
    fn target_type_hint(&self, target: &Expr) -> Option<Type> {
        match &target.kind {
            ExprKind::Name(n) => self.lookup(n).map(|v| self.b.ty(v).clone()),
            _ => None,
        }
    }

    /// `with a as x, b: body` (`emitWith`): `prim::Enter` of each object (typed as its
    /// `__enter__` returns), the body, then `prim::Exit` of each object in reverse order. The
    /// enter and exit nodes carry no source location, as in PyTorch.
    fn emit_with(&mut self, items: &[ast::WithItem], body: &[Stmt]) -> Result<(), CompileError> {
        let mut entered = Vec::new();
        for item in items {
            let obj = self.emit_value(&item.expr, None)?;
            let Type::Class(class) = self.b.ty(obj).clone() else {
                return Err(self.err(item.expr.span, "With item expression must return an object"));
            };
            let info = self.unit.class(&class).cloned();
            let (enter, exit) = match &info {
                Some(c) => (
                    c.method_signature("__enter__"),
                    c.method_signature("__exit__"),
                ),
                None => (None, None),
            };
            let (Some(enter), Some(exit)) = (enter, exit) else {
                return Err(self.err(
                    item.expr.span,
                    format!("object of type {class} used in a `with` needs __enter__ and __exit__"),
                ));
            };
            if enter.params.len() != 1 || exit.params.len() != 4 {
                return Err(self.err(
                    item.expr.span,
                    format!("__enter__ / __exit__ of {class} have the wrong number of arguments"),
                ));
            }
            let source = self.b.source.take();
            let out = self
                .b
                .insert1("prim::Enter", None, vec![obj], enter.return_type.clone());
            self.b.source = source;
            entered.push(obj);
            if let Some(target) = &item.target {
                self.assign(target, out)?;
            }
        }
        self.emit_stmts(body)?;
        while let Some(obj) = entered.pop() {
            self.b.source = None;
            self.b.insert1("prim::Exit", None, vec![obj], Type::Tensor);
        }
        Ok(())
    }

    /// Assign `v` to a target: a name, a tuple/list of targets, an attribute or an item.
    pub(super) fn assign(&mut self, target: &Expr, v: ValueId) -> Result<(), CompileError> {
        match &target.kind {
            ExprKind::Name(n) => {
                self.set_var(n, v);
                Ok(())
            }
            ExprKind::Tuple(items) | ExprKind::List(items) => {
                let elems = self.unpack(v, items.len(), target.span)?;
                for (t, e) in items.iter().zip(elems) {
                    self.assign(t, e)?;
                }
                Ok(())
            }
            ExprKind::Attribute { .. } | ExprKind::Subscript { .. } => {
                match self.emit_store_target(target)? {
                    Some(pending) => self.store(pending, v, target.span),
                    None => Err(self.err(target.span, "unsupported assignment target")),
                }
            }
            _ => Err(self.err(target.span, "unsupported assignment target")),
        }
    }

    /// The object (and index) of an attribute or item assignment target, emitted now; `None`
    /// for other targets.
    fn emit_store_target(&mut self, target: &Expr) -> Result<Option<StoreTarget>, CompileError> {
        match &target.kind {
            ExprKind::Attribute { value, attr } => {
                let obj = self.emit_value(value, None)?;
                Ok(Some(StoreTarget::Attr(obj, attr.name.clone())))
            }
            ExprKind::Subscript { value, indices } if indices.len() == 1 => {
                let container = self.emit_value(value, None)?;
                let index = self.emit_value(&indices[0], None)?;
                Ok(Some(StoreTarget::Item(container, index)))
            }
            _ => Ok(None),
        }
    }

    /// Store `v` into a target whose object was emitted by `emit_store_target`.
    fn store(
        &mut self,
        target: StoreTarget,
        v: ValueId,
        span: ast::Span,
    ) -> Result<(), CompileError> {
        match target {
            StoreTarget::Attr(obj, name) => {
                let n = self.b.insert("prim::SetAttr", None, vec![obj, v], vec![]);
                self.b
                    .graph
                    .node_mut(n)
                    .attrs
                    .push(("name".into(), Attr::Str(name)));
                Ok(())
            }
            StoreTarget::Item(container, index) => match self.b.ty(container) {
                Type::List(_) | Type::Dict(..) => {
                    self.call_op("aten::_set_item", None, &[container, index, v], &[], span)?;
                    Ok(())
                }
                t => Err(self.err(span, format!("item assignment on {t} is not supported"))),
            },
        }
    }

    /// Split a tuple or list value into `n` values.
    pub(super) fn unpack(
        &mut self,
        v: ValueId,
        n: usize,
        span: ast::Span,
    ) -> Result<Vec<ValueId>, CompileError> {
        let ty = self.b.ty(v).clone();
        if let Some(types) = self.tuple_types(&ty) {
            if types.len() != n {
                return Err(self.err(
                    span,
                    format!("cannot unpack a tuple of {} values into {n}", types.len()),
                ));
            }
            if matches!(ty, Type::Class(_)) {
                let node = self.b.insert("prim::TupleUnpack", None, vec![v], types);
                return Ok(self.b.graph.node(node).outputs.clone());
            }
            return Ok(tuple_elements(&mut self.b, v));
        }
        if let Type::List(elem) = ty {
            let node = self
                .b
                .insert("prim::ListUnpack", None, vec![v], vec![(*elem).clone(); n]);
            return Ok(self.b.graph.node(node).outputs.clone());
        }
        Err(self.err(span, format!("cannot unpack a value of type {ty}")))
    }

    fn emit_aug_assign(
        &mut self,
        target: &Expr,
        op: ast::BinOp,
        value: &Expr,
    ) -> Result<(), CompileError> {
        let current = self.emit_value(target, None)?;
        let rhs = self.emit_value(value, None)?;
        let result = if *self.b.ty(current) == Type::Tensor {
            // `x += y` on a tensor is the in-place operator
            let name = super::expr::binary_op_name(op)
                .ok_or_else(|| self.err(target.span, "unsupported augmented assignment"))?;
            let inplace = format!(
                "{}_",
                name.trim_end_matches("__").trim_start_matches("aten::")
            );
            self.call_op(
                &format!("aten::{inplace}"),
                None,
                &[current, rhs],
                &[],
                target.span,
            )?
        } else {
            self.emit_binary_values(op, current, rhs, target.span)?
        };
        self.assign(target, result)
    }

    /// A condition as PyTorch's `emitCondExpr` emits it: `and`/`or`/`is` results are already
    /// booleans, `not` negates its operand's condition, and for a call the callee is emitted
    /// once more (PyTorch looks for the `isinstance` special form) before the whole condition
    /// is emitted and cast with `bool()`.
    pub(super) fn emit_cond(&mut self, cond: &Expr) -> Result<ValueId, CompileError> {
        match &cond.kind {
            ExprKind::Binary {
                op: ast::BinOp::And | ast::BinOp::Or | ast::BinOp::Is | ast::BinOp::IsNot,
                ..
            } => self.emit_value(cond, None),
            ExprKind::Unary {
                op: ast::UnaryOp::Not,
                operand,
            } => {
                let v = self.emit_cond(operand)?;
                self.call_op("aten::__not__", None, &[v], &[], cond.span)
            }
            ExprKind::Call { func, .. } => {
                let special = matches!(&func.kind, ExprKind::Name(n)
                    if (n == "isinstance" || n == "hasattr") && self.is_builtin_name(func));
                if special {
                    return self.emit_value(cond, None);
                }
                self.emit_sugared(func, None)?;
                self.emit_bool(cond)
            }
            _ => self.emit_bool(cond),
        }
    }

    /// `emitToBool(emitExpr(e))`: an expression cast to `bool` (a `while` condition).
    pub(super) fn emit_bool(&mut self, cond: &Expr) -> Result<ValueId, CompileError> {
        let v = self.emit_value(cond, None)?;
        self.as_bool(v, cond.span)
    }

    /// `emitToBool`: the `bool` cast of a condition.
    pub(super) fn as_bool(&mut self, v: ValueId, span: ast::Span) -> Result<ValueId, CompileError> {
        self.emit_cast("aten::Bool", Type::Bool, v, span)
    }

    fn emit_if(&mut self, cond: &Expr, body: &[Stmt], orelse: &[Stmt]) -> Result<(), CompileError> {
        // PyTorch gives the `prim::If` the whole statement's range (set by `emit_stmt`).
        let stmt_source = self.b.source.clone();
        let (refine_true, refine_false) = self.refinements(cond);
        let c = self.emit_cond(cond)?;
        self.b.source = stmt_source;
        let node = self.b.insert("prim::If", None, vec![c], vec![]);
        let saved = self.b.block;
        let then_block = self.b.graph.add_block(node);
        let else_block = self.b.graph.add_block(node);

        self.b.block = then_block;
        self.push_frame();
        for (name, ty) in &refine_true {
            self.refine(name, ty);
        }
        let r = self.emit_stmts(body);
        let then_frame = self.pop_frame();
        r?;
        self.b.block = else_block;
        self.push_frame();
        for (name, ty) in &refine_false {
            self.refine(name, ty);
        }
        let r = self.emit_stmts(orelse);
        let else_frame = self.pop_frame();
        r?;
        self.b.block = saved;

        let lookup_in = |this: &Self, frame: &super::Frame, name: &str| {
            frame.vars.get(name).copied().or_else(|| this.lookup(name))
        };
        let type_in = |this: &Self, frame: &super::Frame, name: &str| {
            super::frame_var_type(this, frame, name).or_else(|| this.var_type(name))
        };
        // `emitIfElseBlocks` looks each variable of one branch up from the other (a load
        // wherever it is found), then loads every merged variable in both branches
        // merged variables become outputs in name order (`ControlFlowLoadStores` uses a
        // `std::set`); `CanonicalizeOutputs` later orders them by first use
        let mut merged = std::collections::BTreeSet::new();
        for name in then_frame.vars.keys() {
            if lookup_in(self, &else_frame, name).is_some() {
                self.load_var(name);
                merged.insert(name.clone());
            }
        }
        for name in else_frame.vars.keys() {
            if lookup_in(self, &then_frame, name).is_some() {
                self.load_var(name);
                merged.insert(name.clone());
            }
        }
        for name in merged {
            let (Some(t), Some(f)) = (
                lookup_in(self, &then_frame, &name),
                lookup_in(self, &else_frame, &name),
            ) else {
                continue;
            };
            self.load_var(&name);
            self.load_var(&name);
            // `emitIfElseBlocks` merges the variable's declared types (defaulting to their
            // union when the variable already is a Union, Optional or number); not a merge:
            // the variable is unusable after the `if`
            let (dt, df) = (
                type_in(self, &then_frame, &name),
                type_in(self, &else_frame, &name),
            );
            let (Some(dt), Some(df)) = (dt, df) else {
                continue;
            };
            let to_union = matches!(
                self.var_type(&name),
                Some(Type::Union(_) | Type::Optional(_) | Type::Number)
            );
            let declared = match unify_types(&dt, &df) {
                Some(u) => u,
                None if to_union => union_of(&[dt, df]),
                None => continue,
            };
            // SSA conversion then types the output from the values (`unifyTypes` with
            // `default_to_union`): `"same"` and `3` merge into `Union(int, str)`
            let (tt, ft) = (self.b.ty(t).clone(), self.b.ty(f).clone());
            let unified = unify_types_to_union(&tt, &ft);
            self.b.graph.block_mut(then_block).returns.push(t);
            self.b.graph.block_mut(else_block).returns.push(f);
            // numbered and named by SSA conversion, after the whole body is emitted
            let out = self.b.graph.add_node_output_deferred(node, unified);
            self.ssa_names.insert(out, name.clone());
            self.bind_declared(&name, out, declared);
        }
        Ok(())
    }

    /// The refinements an `if` condition makes (PyTorch's `RefinementSet`): the variables
    /// narrowed in the true branch and in the false branch, with their narrowed types.
    /// `x is None` / `x is not None` narrow an Optional variable; `isinstance(x, T)` narrows
    /// a variable of a union type (Optional, Union, `number`) to its members that are (or
    /// are not) `T`; `and`, `or` and `not` combine them.
    fn refinements(&self, cond: &Expr) -> Refinements {
        fn union(mut a: Vec<(String, Type)>, b: Vec<(String, Type)>) -> Vec<(String, Type)> {
            for r in b {
                if !a.iter().any(|(n, _)| *n == r.0) {
                    a.push(r);
                }
            }
            a
        }
        fn intersect(a: Vec<(String, Type)>, b: &[(String, Type)]) -> Vec<(String, Type)> {
            a.into_iter().filter(|r| b.contains(r)).collect()
        }
        match &cond.kind {
            ExprKind::Binary { op, lhs, rhs } => match op {
                ast::BinOp::And => {
                    let (a, b) = (self.refinements(lhs), self.refinements(rhs));
                    (union(a.0, b.0), intersect(a.1, &b.1))
                }
                ast::BinOp::Or => {
                    let (a, b) = (self.refinements(lhs), self.refinements(rhs));
                    (intersect(a.0, &b.0), union(a.1, b.1))
                }
                ast::BinOp::Is | ast::BinOp::IsNot => {
                    let name = match (&lhs.kind, &rhs.kind) {
                        (ExprKind::Name(n), ExprKind::None)
                        | (ExprKind::None, ExprKind::Name(n)) => n,
                        _ => return Refinements::default(),
                    };
                    let Some(Type::Optional(inner)) = self.var_type(name) else {
                        return Refinements::default();
                    };
                    let narrowed = vec![(name.clone(), *inner)];
                    if *op == ast::BinOp::Is {
                        (Vec::new(), narrowed)
                    } else {
                        (narrowed, Vec::new())
                    }
                }
                _ => Refinements::default(),
            },
            ExprKind::Unary {
                op: ast::UnaryOp::Not,
                operand,
            } => {
                let (t, f) = self.refinements(operand);
                (f, t)
            }
            ExprKind::Call { func, args, kwargs }
                if kwargs.is_empty()
                    && args.len() == 2
                    && matches!(&func.kind, ExprKind::Name(n) if n == "isinstance")
                    && self.is_builtin_name(func) =>
            {
                let ExprKind::Name(name) = &args[0].kind else {
                    return Refinements::default();
                };
                let Ok(target) = self.type_arg(&args[1]) else {
                    return Refinements::default();
                };
                let members = match self.var_type(name) {
                    Some(Type::Optional(inner)) => vec![*inner, Type::NoneType],
                    Some(Type::Union(ts)) => ts,
                    Some(Type::Number) => vec![Type::Int, Type::Float, Type::Complex],
                    _ => return Refinements::default(),
                };
                let targets = match target {
                    Type::Tuple(ts) => ts,
                    t => vec![t],
                };
                let (yes, no): (Vec<Type>, Vec<Type>) = members
                    .into_iter()
                    .partition(|m| targets.iter().any(|t| is_subtype(m, t)));
                let narrowed = |ts: Vec<Type>| match ts.is_empty() {
                    true => Vec::new(),
                    false => vec![(name.clone(), union_of(&ts))],
                };
                (narrowed(yes), narrowed(no))
            }
            _ => Refinements::default(),
        }
    }

    /// PyTorch's `insertRefinements` at the start of a branch: the variable is read (a load)
    /// and rebound to a `prim::unchecked_cast` of it to the refined type.
    fn refine(&mut self, name: &str, ty: &Type) {
        let Some(v) = self.lookup(name) else {
            return;
        };
        self.load_var(name);
        let cast = self
            .b
            .insert1("prim::unchecked_cast", None, vec![v], ty.clone());
        self.set_var(name, cast);
    }

    /// `while cond:` as PyTorch numbers it: the condition is emitted once into the loop's
    /// condition block (numbered before the body) and cloned before the loop when SSA
    /// conversion inlines it (numbered after the body), so the initial condition tsrun emits
    /// here is numbered later and the one at the body's end takes the earlier numbers.
    fn emit_while(&mut self, cond: &Expr, body: &[Stmt]) -> Result<(), CompileError> {
        let max_trip = self.number_literal(IValue::Int(i64::MAX));
        let (mark, from) = (self.b.graph.values.len(), self.b.graph.next_unique());
        let initial = self.emit_bool(cond)?;
        let count = self.b.graph.next_unique() - from;
        let deferred = self.b.graph.renumber_since(mark, from, None);
        let node = self.emit_loop(
            max_trip,
            initial,
            body,
            &mut |_, _| Ok(()),
            Some((cond, count)),
            &[],
        )?;
        self.loop_conditions.insert(node, (deferred, count));
        Ok(())
    }

    fn emit_for(
        &mut self,
        target: &Expr,
        iter: &Expr,
        body: &[Stmt],
        span: ast::Span,
    ) -> Result<(), CompileError> {
        // iterating a tuple unrolls the loop
        if let ExprKind::Tuple(items) = &iter.kind {
            for item in items {
                let v = self.emit_value(item, None)?;
                self.assign(target, v)?;
                self.emit_stmts(body)?;
            }
            return Ok(());
        }
        let iterable = self.emit_iterable(iter)?;
        if let Iterable::Indexed { value, .. } = &iterable {
            let ty = self.b.ty(*value).clone();
            if let Some(types) = self.tuple_types(&ty) {
                let elems = if matches!(ty, Type::Class(_)) {
                    let n = self
                        .b
                        .insert("prim::TupleUnpack", None, vec![*value], types);
                    self.b.graph.node(n).outputs.clone()
                } else {
                    tuple_elements(&mut self.b, *value)
                };
                for e in elems {
                    self.assign(target, e)?;
                    self.emit_stmts(body)?;
                }
                return Ok(());
            }
        }
        let trip = iterable_trip(&iterable);
        let cond = self.b.constant(IValue::Bool(true));
        let mut targets = Vec::new();
        collect_assigned_target(target, &mut targets);
        self.b.source = Some(self.file.range(span));
        self.emit_loop(
            trip,
            cond,
            body,
            &mut |e, index| {
                let v = e.iterable_item(&iterable, index, iter.span)?;
                e.assign(target, v)
            },
            None,
            &targets,
        )
        .map(|_| ())
    }

    fn emit_iterable(&mut self, iter: &Expr) -> Result<Iterable, CompileError> {
        if let ExprKind::Call { func, args, kwargs } = &iter.kind {
            let name = func.dotted_name();
            if kwargs.is_empty() && self.is_builtin_name(func) {
                match name.as_deref() {
                    Some("range") => return self.emit_range(args, iter.span),
                    Some("enumerate") if args.len() == 1 => {
                        let inner = self.emit_iterable(&args[0])?;
                        return Ok(Iterable::Enumerate(Box::new(inner)));
                    }
                    Some("zip") if !args.is_empty() => {
                        let parts = args
                            .iter()
                            .map(|a| self.emit_iterable(a))
                            .collect::<Result<Vec<_>, _>>()?;
                        let lens: Vec<ValueId> = parts.iter().map(iterable_trip).collect();
                        let trip = if lens.len() == 1 {
                            lens[0]
                        } else {
                            let list = self.b.insert1(
                                "prim::ListConstruct",
                                None,
                                lens,
                                Type::list(Type::Int),
                            );
                            self.call_op("prim::min", None, &[list], &[], iter.span)?
                        };
                        return Ok(Iterable::Zip { parts, trip });
                    }
                    _ => {}
                }
            }
        }
        let value = self.emit_value(iter, None)?;
        let ty = self.b.ty(value).clone();
        let value = match ty {
            Type::Dict(..) => self.call_op("aten::keys", None, &[value], &[], iter.span)?,
            _ => value,
        };
        if self.tuple_types(self.b.ty(value)).is_some() {
            // unrolled by the caller
            let trip = value;
            return Ok(Iterable::Indexed { value, trip });
        }
        let trip = match self.b.ty(value) {
            Type::List(_) | Type::Str | Type::Tensor => {
                self.call_op("aten::len", None, &[value], &[], iter.span)?
            }
            t => {
                return Err(self.err(
                    iter.span,
                    format!("cannot iterate over a value of type {t}"),
                ))
            }
        };
        Ok(Iterable::Indexed { value, trip })
    }

    fn emit_range(&mut self, args: &[Expr], span: ast::Span) -> Result<Iterable, CompileError> {
        let vals = args
            .iter()
            .map(|a| self.emit_value(a, None))
            .collect::<Result<Vec<_>, _>>()?;
        for (v, a) in vals.iter().zip(args) {
            if *self.b.ty(*v) != Type::Int {
                return Err(self.err(
                    a.span,
                    format!("range() expects int, found {}", self.b.ty(*v)),
                ));
            }
        }
        match vals.as_slice() {
            [n] => {
                // `RangeValue` makes its start and step constants even when unused
                self.b.constant(IValue::Int(0));
                self.b.constant(IValue::Int(1));
                Ok(Iterable::Range {
                    trip: *n,
                    start_step: None,
                })
            }
            [start, end] | [start, end, _] => {
                let step = match vals.get(2) {
                    Some(s) => *s,
                    None => self.b.constant(IValue::Int(1)),
                };
                let trip = self.call_op(
                    "aten::__range_length",
                    None,
                    &[*start, *end, step],
                    &[],
                    span,
                )?;
                Ok(Iterable::Range {
                    trip,
                    start_step: Some((*start, step)),
                })
            }
            _ => Err(self.err(span, "range() takes 1 to 3 arguments")),
        }
    }

    /// The element of `iterable` at loop index `index`.
    fn iterable_item(
        &mut self,
        iterable: &Iterable,
        index: ValueId,
        span: ast::Span,
    ) -> Result<ValueId, CompileError> {
        match iterable {
            Iterable::Range { start_step, .. } => match start_step {
                None => Ok(index),
                Some((start, step)) => self.call_op(
                    "aten::__derive_index",
                    None,
                    &[index, *start, *step],
                    &[],
                    span,
                ),
            },
            Iterable::Indexed { value, .. } => {
                if *self.b.ty(*value) == Type::Tensor {
                    let zero = self.b.constant(IValue::Int(0));
                    self.call_op("aten::select", None, &[*value, zero, index], &[], span)
                } else {
                    self.call_op("aten::__getitem__", None, &[*value, index], &[], span)
                }
            }
            Iterable::Enumerate(inner) => {
                let item = self.iterable_item(inner, index, span)?;
                let types = vec![Type::Int, self.b.ty(item).clone()];
                Ok(self.b.insert1(
                    "prim::TupleConstruct",
                    None,
                    vec![index, item],
                    Type::Tuple(types),
                ))
            }
            Iterable::Zip { parts, .. } => {
                let items = parts
                    .iter()
                    .map(|p| self.iterable_item(p, index, span))
                    .collect::<Result<Vec<_>, _>>()?;
                let types = items.iter().map(|v| self.b.ty(*v).clone()).collect();
                Ok(self
                    .b
                    .insert1("prim::TupleConstruct", None, items, Type::Tuple(types)))
            }
        }
    }

    /// Emit a `prim::Loop`: every variable visible outside that the body (or the loop target)
    /// assigns becomes a loop-carried value.
    fn emit_loop(
        &mut self,
        trip: ValueId,
        cond: ValueId,
        body: &[Stmt],
        bind_target: &mut dyn FnMut(&mut Self, ValueId) -> Result<(), CompileError>,
        while_cond: Option<(&Expr, usize)>,
        target_names: &[String],
    ) -> Result<NodeId, CompileError> {
        let mut assigned: Vec<String> = target_names.to_vec();
        collect_assigned(body, &mut assigned);
        // carried in name order, as SSA conversion adds them (`definedVariables` sorts);
        // `CanonicalizeOutputs` later orders them by first use
        let mut carried: Vec<(String, ValueId)> = assigned
            .iter()
            .filter_map(|n| self.lookup(n).map(|v| (n.clone(), v)))
            .collect();
        // the body reads each carried variable with its declared type
        let declared: std::collections::HashMap<String, Type> = carried
            .iter()
            .map(|(n, v)| {
                let ty = self.var_type(n).unwrap_or_else(|| self.b.ty(*v).clone());
                (n.clone(), ty)
            })
            .collect();
        carried.sort_by(|a, b| a.0.cmp(&b.0));
        let mut inputs = vec![trip, cond];
        inputs.extend(carried.iter().map(|(_, v)| *v));
        let node = self.b.insert("prim::Loop", None, inputs, vec![]);
        // the condition block's numbers come before the body's
        let cond_numbers = self.b.graph.next_unique();
        self.b.graph.skip_unique(while_cond.map_or(0, |(_, n)| n));
        let saved = self.b.block;
        let block = self.b.graph.add_block(node);
        let index = self.b.graph.add_param(block, Type::Int, None);
        self.b.block = block;
        self.push_frame();
        let mut params = Vec::new();
        for (name, v) in &carried {
            // added (numbered and named) by SSA conversion
            let ty = declared
                .get(name)
                .cloned()
                .unwrap_or_else(|| self.b.ty(*v).clone());
            let p = self.b.graph.add_param_deferred(block, ty);
            params.push(p);
            self.ssa_names.insert(p, name.clone());
            if let Some(f) = self.frames.last_mut() {
                f.vars.insert(name.clone(), p);
            }
        }
        let result = (|| -> Result<ValueId, CompileError> {
            bind_target(self, index)?;
            self.emit_stmts(body)?;
            match while_cond {
                Some((c, _)) => {
                    let (mark, from) = (self.b.graph.values.len(), self.b.graph.next_unique());
                    let v = self.emit_bool(c)?;
                    self.b.graph.renumber_since(mark, from, Some(cond_numbers));
                    Ok(v)
                }
                None => Ok(cond),
            }
        })();
        let frame = self.pop_frame();
        self.b.block = saved;
        let next_cond = result?;
        let mut returns = vec![next_cond];
        for ((name, outer), p) in carried.iter().zip(&params) {
            let v = frame.vars.get(name).copied().unwrap_or(*p);
            // SSA conversion types the carried value from the value before the loop and the
            // body's (not the declared type the body was emitted against)
            let (ot, vt) = (self.b.ty(*outer).clone(), self.b.ty(v).clone());
            if let Some(u) = unify_types(&ot, &vt) {
                self.b.graph.value_mut(*p).ty = u;
            }
            returns.push(v);
        }
        self.b.graph.block_mut(block).returns = returns;
        for ((name, _), p) in carried.iter().zip(&params) {
            let ty = self.b.ty(*p).clone();
            let out = self.b.graph.add_node_output_deferred(node, ty.clone());
            self.ssa_names.insert(out, name.clone());
            let declared = declared.get(name).cloned().unwrap_or(ty);
            self.bind_declared(name, out, declared);
        }
        Ok(node)
    }
}

fn iterable_trip(it: &Iterable) -> ValueId {
    match it {
        Iterable::Range { trip, .. }
        | Iterable::Indexed { trip, .. }
        | Iterable::Zip { trip, .. } => *trip,
        Iterable::Enumerate(inner) => iterable_trip(inner),
    }
}

fn collect_assigned_target(t: &Expr, out: &mut Vec<String>) {
    match &t.kind {
        ExprKind::Name(n) if !out.contains(n) => out.push(n.clone()),
        ExprKind::Tuple(items) | ExprKind::List(items) => {
            for i in items {
                collect_assigned_target(i, out);
            }
        }
        ExprKind::Starred(inner) => collect_assigned_target(inner, out),
        _ => {}
    }
}

/// Names a block of statements assigns, in order of first assignment.
fn collect_assigned(stmts: &[Stmt], out: &mut Vec<String>) {
    for s in stmts {
        match &s.kind {
            StmtKind::Assign { targets, .. } => {
                for t in targets {
                    collect_assigned_target(t, out);
                }
            }
            StmtKind::AnnAssign { target, .. } | StmtKind::AugAssign { target, .. } => {
                collect_assigned_target(target, out)
            }
            StmtKind::If { body, orelse, .. } => {
                collect_assigned(body, out);
                collect_assigned(orelse, out);
            }
            StmtKind::While { body, .. } => collect_assigned(body, out),
            StmtKind::For { target, body, .. } => {
                collect_assigned_target(target, out);
                collect_assigned(body, out);
            }
            StmtKind::With { items, body } => {
                for i in items {
                    if let Some(t) = &i.target {
                        collect_assigned_target(t, out);
                    }
                }
                collect_assigned(body, out);
            }
            _ => {}
        }
    }
}

/// `a` or `a.b.c`: an expression that may name a global.
fn is_dotted_name(e: &Expr) -> bool {
    match &e.kind {
        ExprKind::Name(_) => true,
        ExprKind::Attribute { value, .. } => is_dotted_name(value),
        _ => false,
    }
}
