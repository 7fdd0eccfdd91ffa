//! Expressions: literals, names, attributes, calls (operators through their schemas, methods,
//! functions, builtins), subscripts and operators.

use super::matching::match_schemas;
use super::Emitter;
use crate::frontend::ast::{self, BinOp, ClassKind, Expr, ExprKind, UnaryOp};
use crate::ir::decls::Signature;
use crate::ir::graph::{Attr, Def, ValueId};
use crate::ir::CompileError;
use crate::ops::schema::{is_subtype, unify_types, Argument, FunctionSchema, SchemaRegistry};
use crate::values::types::Type;
use crate::values::{EnumValue, IValue};
use num_complex::Complex64;
use std::sync::Arc;

/// Positional and keyword argument values of a call.
type CallArgs = (Vec<ValueId>, Vec<(String, ValueId)>);

/// The result of emitting an expression: a graph value or something only usable in a call or
/// attribute access.
pub(super) enum Sugared {
    Value(ValueId),
    /// A dotted global name not yet resolved (`torch`, `ops.aten`, `__torch__.foo.Bar`,
    /// `len`).
    Global(String),
    /// `obj.name` where `name` is a method (or builtin operator taking `obj` as self).
    Method {
        obj: ValueId,
        name: String,
    },
}

/// The operator implementing a binary operator.
/// Native stack that must remain before emitting a nested expression or block.
pub(super) const EMIT_RED_ZONE: usize = 128 * 1024;
/// Size of each heap-allocated stack segment of the emitter.
pub(super) const EMIT_STACK_GROWTH: usize = 2 * 1024 * 1024;

pub(super) fn binary_op_name(op: BinOp) -> Option<&'static str> {
    Some(match op {
        BinOp::Add => "aten::add",
        BinOp::Sub => "aten::sub",
        BinOp::Mul => "aten::mul",
        BinOp::Div => "aten::div",
        BinOp::FloorDiv => "aten::floordiv",
        BinOp::Mod => "aten::remainder",
        BinOp::Pow => "aten::pow",
        BinOp::MatMul => "aten::matmul",
        BinOp::LShift => "aten::__lshift__",
        BinOp::RShift => "aten::__rshift__",
        BinOp::BitAnd => "aten::__and__",
        BinOp::BitOr => "aten::__or__",
        BinOp::BitXor => "aten::__xor__",
        BinOp::Eq => "aten::eq",
        BinOp::Ne => "aten::ne",
        BinOp::Lt => "aten::lt",
        BinOp::Le => "aten::le",
        BinOp::Gt => "aten::gt",
        BinOp::Ge => "aten::ge",
        BinOp::Is => "aten::__is__",
        BinOp::IsNot => "aten::__isnot__",
        BinOp::And | BinOp::Or | BinOp::In | BinOp::NotIn => return None,
    })
}

/// The type a builtin cast (`int(x)`, `bool(x)`, ...) converts to.
fn cast_target(name: &str) -> Option<Type> {
    Some(match name {
        "int" => Type::Int,
        "float" => Type::Float,
        "bool" => Type::Bool,
        "complex" => Type::Complex,
        "str" => Type::Str,
        _ => return None,
    })
}

/// Builtin functions that are names of operators.
fn builtin_operator(name: &str) -> Option<&'static str> {
    Some(match name {
        "len" => "aten::len",
        "int" => "aten::Int",
        "float" => "aten::Float",
        "bool" => "aten::Bool",
        "complex" => "aten::Complex",
        "str" => "aten::str",
        "min" => "prim::min",
        "max" => "prim::max",
        "abs" => "prim::abs",
        "print" => "prim::Print",
        "divmod" => "aten::divmod",
        "round" => "aten::round",
        "sum" => "aten::sum",
        "any" => "aten::any",
        "all" => "aten::all",
        "list" => "aten::list",
        "sorted" => "aten::sorted",
        "ord" => "aten::ord",
        "chr" => "aten::chr",
        "hash" => "aten::hash",
        "hex" => "aten::hex",
        "oct" => "aten::oct",
        "bin" => "aten::bin",
        "dict" => "aten::dict",
        _ => return None,
    })
}

/// Names that are not operators but handled by the emitter.
const SPECIAL_BUILTINS: &[&str] = &[
    "annotate",
    "uninitialized",
    "unchecked_cast",
    "isinstance",
    "getattr",
    "hasattr",
    "range",
    "enumerate",
    "zip",
    "torch",
    "ops",
    "math",
    "CONSTANTS",
    "__torch__",
    "tuple",
    "Exception",
];

impl Emitter<'_> {
    /// A one-argument cast as PyTorch's `CastValue::call`: it first inserts a `0` constant
    /// (without source range; dead unless a length test uses it), returns a value that already
    /// has the type, tests lists, strings and dicts by `len(v) > 0`, else calls the operator.
    pub(super) fn emit_cast(
        &mut self,
        op: &str,
        target: Type,
        v: ValueId,
        span: ast::Span,
    ) -> Result<ValueId, CompileError> {
        let saved = self.b.source.take();
        let zero = self.b.constant(IValue::Int(0));
        self.b.source = saved;
        let ty = self.b.ty(v).clone();
        if crate::ops::schema::is_subtype(&ty, &target) {
            return Ok(v);
        }
        if target == Type::Bool && matches!(ty, Type::List(_) | Type::Str | Type::Dict(..)) {
            let len = self.call_op("aten::len", None, &[v], &[], span)?;
            return self.call_op("aten::gt", None, &[len, zero], &[], span);
        }
        self.call_op(op, None, &[v], &[], span)
    }

    /// `emitUnaryOp`: a unary operator applied to a constant is evaluated now and replaced by
    /// a constant (the operator node is left for dead code elimination).
    fn fold_unary(&mut self, out: ValueId, op: &str) -> ValueId {
        let crate::ir::graph::Def::Node(n, 0) = self.b.graph.value(out).def else {
            return out;
        };
        if self.b.graph.node(n).kind != op {
            return out;
        }
        match crate::ir::passes::evaluate_if_constant(&self.b.graph, n).as_deref() {
            Some([value]) => self.b.constant(value.clone()),
            _ => out,
        }
    }

    pub(super) fn is_builtin_name(&self, e: &Expr) -> bool {
        match &e.kind {
            ExprKind::Name(n) => self.lookup(n).is_none(),
            _ => false,
        }
    }

    pub(super) fn emit_value(
        &mut self,
        e: &Expr,
        hint: Option<&Type>,
    ) -> Result<ValueId, CompileError> {
        let s = self.emit_sugared(e, hint)?;
        self.as_value(s, e.span)
    }

    pub(super) fn as_value(
        &mut self,
        s: Sugared,
        span: ast::Span,
    ) -> Result<ValueId, CompileError> {
        match s {
            Sugared::Value(v) => Ok(v),
            Sugared::Global(name) => {
                // The value (an enum member, `CONSTANTS.c0`, ...) gets the range of the
                // dotted name itself, as in PyTorch, not that of the enclosing expression.
                let saved = self.b.source.replace(self.file.range(span));
                let v = self.global_value(&name, span);
                self.b.source = saved;
                v
            }
            Sugared::Method { name, .. } => Err(self.err(
                span,
                format!("method `{name}` used as a value (first-class methods are not supported)"),
            )),
        }
    }

    pub(super) fn emit_sugared(
        &mut self,
        e: &Expr,
        hint: Option<&Type>,
    ) -> Result<Sugared, CompileError> {
        let saved = self.b.source.replace(self.file.range(e.span));
        // Expressions recurse on the AST (its depth is bounded by the parser's
        // `max_code_depth`); grow the stack on the heap rather than overflow it.
        let r = stacker::maybe_grow(EMIT_RED_ZONE, EMIT_STACK_GROWTH, || {
            self.emit_sugared_inner(e, hint)
        });
        self.b.source = saved;
        r
    }

    fn emit_sugared_inner(
        &mut self,
        e: &Expr,
        hint: Option<&Type>,
    ) -> Result<Sugared, CompileError> {
        let v = match &e.kind {
            ExprKind::Name(n) => match self.lookup(n) {
                Some(v) => {
                    let load = self.load_var(n);
                    self.stand_ins.push((v, load));
                    v
                }
                None => {
                    return Ok(Sugared::Global(
                        self.lookup_alias(n).unwrap_or_else(|| n.clone()),
                    ))
                }
            },
            ExprKind::Int(i) => self.number_literal(IValue::Int(*i)),
            // `inf` / `nan` are names the importer resolves to a constant where they are read
            ExprKind::Float(f) if !f.is_finite() => self.b.constant(IValue::Double(*f)),
            ExprKind::Float(f) => self.number_literal(IValue::Double(*f)),
            ExprKind::Imag(f) => self.number_literal(IValue::Complex(Complex64::new(0.0, *f))),
            ExprKind::Str(s) => self.b.constant(IValue::str(s.as_str())),
            ExprKind::Bool(b) => self.b.constant(IValue::Bool(*b)),
            ExprKind::None => self.b.none(),
            ExprKind::Attribute { value, attr } => {
                let base = self.emit_sugared(value, None)?;
                return self.emit_attribute(base, &attr.name, e.span);
            }
            ExprKind::Call { func, args, kwargs } => {
                // PyTorch's emitApplyExpr locates a call's nodes and errors at its callee
                // (`apply.callee().range()`): tracebacks mark `torch.matmul`, not the whole call
                // (`emit_sugared` restores the enclosing range afterwards)
                self.b.source = Some(self.file.range(func.span));
                return self
                    .emit_call(func, args, kwargs, func.span, hint)
                    .map(Sugared::Value);
            }
            ExprKind::List(items) => self.emit_list(items, hint, e.span)?,
            ExprKind::Tuple(items) => {
                let hints: Option<Vec<Type>> = match hint {
                    Some(Type::Tuple(ts)) if ts.len() == items.len() => Some(ts.clone()),
                    _ => None,
                };
                let mut vals = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    let h = hints.as_ref().and_then(|h| h.get(i));
                    vals.push(self.emit_value(item, h)?);
                }
                let types = vals.iter().map(|v| self.b.ty(*v).clone()).collect();
                self.b
                    .insert1("prim::TupleConstruct", None, vals, Type::Tuple(types))
            }
            ExprKind::Dict(pairs) => self.emit_dict(pairs, hint, e.span)?,
            ExprKind::Subscript { value, indices } => {
                self.emit_subscript(value, indices, e.span, hint)?
            }
            // `not x` is a condition (`emitCondExpr`)
            ExprKind::Unary {
                op: UnaryOp::Not, ..
            } => self.emit_cond(e)?,
            ExprKind::Unary { op, operand } => {
                let v = self.emit_value(operand, None)?;
                match op {
                    UnaryOp::Neg => {
                        let out = self.call_op("aten::neg", None, &[v], &[], e.span)?;
                        self.fold_unary(out, "aten::neg")
                    }
                    UnaryOp::Invert => {
                        let out = self.call_op("aten::bitwise_not", None, &[v], &[], e.span)?;
                        self.fold_unary(out, "aten::bitwise_not")
                    }
                    // unary plus is the value; `not` took the arm above
                    UnaryOp::Pos | UnaryOp::Not => v,
                }
            }
            ExprKind::Binary { op, lhs, rhs } => self.emit_binary(*op, lhs, rhs, e.span)?,
            ExprKind::Ternary { cond, then, orelse } => {
                let c = self.emit_cond(cond)?;
                self.emit_if_expr(c, then, orelse, hint)?
            }
            ExprKind::Ellipsis => {
                return Err(self.err(e.span, "`...` is only supported in tensor subscripts"))
            }
            ExprKind::Slice { .. } => return Err(self.err(e.span, "slice outside a subscript")),
            ExprKind::ListComp { .. } | ExprKind::DictComp { .. } => {
                return Err(self.err(e.span, "comprehensions are not supported"))
            }
            ExprKind::Starred(_) => {
                return Err(self.err(e.span, "starred expressions are not supported"))
            }
        };
        Ok(Sugared::Value(v))
    }

    fn emit_list(
        &mut self,
        items: &[Expr],
        hint: Option<&Type>,
        span: ast::Span,
    ) -> Result<ValueId, CompileError> {
        // a union hint (`Optional[List[T]]`) is refined to its list member, and the literal is
        // then cast to the annotated union (`emitListLiteral`'s `annotated_union_type`)
        let union_members: &[Type] = match hint {
            Some(Type::Optional(o)) => std::slice::from_ref(&**o),
            Some(Type::Union(members)) => members,
            _ => &[],
        };
        let union_list = union_members.iter().find_map(|t| match t {
            Type::List(e) => Some((**e).clone()),
            _ => None,
        });
        let elem_hint = match hint {
            Some(Type::List(e)) => Some((**e).clone()),
            _ => union_list.clone(),
        };
        let mut vals = Vec::new();
        for item in items {
            vals.push(self.emit_value(item, elem_hint.as_ref())?);
        }
        let elem = match elem_hint {
            Some(e) => e,
            None => {
                let mut t: Option<Type> = None;
                for v in &vals {
                    let vt = self.b.ty(*v).clone();
                    t = Some(match t {
                        None => vt,
                        Some(prev) => unify_types(&prev, &vt).ok_or_else(|| {
                            self.err(span, format!("list elements of types {prev} and {vt}"))
                        })?,
                    });
                }
                t.unwrap_or(Type::Tensor)
            }
        };
        let list = self
            .b
            .insert1("prim::ListConstruct", None, vals, Type::list(elem));
        match (union_list, hint) {
            (Some(_), Some(union)) => {
                Ok(self
                    .b
                    .insert1("prim::unchecked_cast", None, vec![list], union.clone()))
            }
            _ => Ok(list),
        }
    }

    fn emit_dict(
        &mut self,
        pairs: &[(Expr, Expr)],
        hint: Option<&Type>,
        span: ast::Span,
    ) -> Result<ValueId, CompileError> {
        // as for lists: a union hint is refined to its dict member and the literal cast to
        // the union (`emitDictLiteral`)
        let union_members: &[Type] = match hint {
            Some(Type::Optional(o)) => std::slice::from_ref(&**o),
            Some(Type::Union(members)) => members,
            _ => &[],
        };
        let union_dict = union_members
            .iter()
            .find(|t| matches!(t, Type::Dict(..)))
            .cloned();
        let (kh, vh) = match hint
            .filter(|_| union_dict.is_none())
            .or(union_dict.as_ref())
        {
            Some(Type::Dict(k, v)) => (Some((**k).clone()), Some((**v).clone())),
            _ => (None, None),
        };
        let mut vals = Vec::new();
        for (k, v) in pairs {
            vals.push(self.emit_value(k, kh.as_ref())?);
            vals.push(self.emit_value(v, vh.as_ref())?);
        }
        let key_ty = kh
            .or_else(|| vals.first().map(|v| self.b.ty(*v).clone()))
            .unwrap_or(Type::Str);
        let val_ty = vh
            .or_else(|| vals.get(1).map(|v| self.b.ty(*v).clone()))
            .unwrap_or(Type::Tensor);
        let _ = span;
        let dict = self.b.insert1(
            "prim::DictConstruct",
            None,
            vals,
            Type::dict(key_ty, val_ty),
        );
        match (union_dict, hint) {
            (Some(_), Some(union)) => {
                Ok(self
                    .b
                    .insert1("prim::unchecked_cast", None, vec![dict], union.clone()))
            }
            _ => Ok(dict),
        }
    }

    /// `cond ? then : orelse` as a one-output `prim::If`.
    fn emit_if_expr(
        &mut self,
        cond: ValueId,
        then: &Expr,
        orelse: &Expr,
        hint: Option<&Type>,
    ) -> Result<ValueId, CompileError> {
        let node = self.b.insert("prim::If", None, vec![cond], vec![]);
        let saved = self.b.block;
        let tb = self.b.graph.add_block(node);
        let fb = self.b.graph.add_block(node);
        self.b.block = tb;
        let t = self.emit_value(then, hint);
        self.b.block = fb;
        let f = t.and_then(|t| Ok((t, self.emit_value(orelse, hint)?)));
        self.b.block = saved;
        let (t, f) = f?;
        let (tt, ft) = (self.b.ty(t).clone(), self.b.ty(f).clone());
        let ty = unify_types(&tt, &ft)
            .ok_or_else(|| self.err(then.span, format!("branches have types {tt} and {ft}")))?;
        self.b.graph.block_mut(tb).returns.push(t);
        self.b.graph.block_mut(fb).returns.push(f);
        Ok(self.b.graph.add_node_output(node, ty))
    }

    fn emit_binary(
        &mut self,
        op: BinOp,
        lhs: &Expr,
        rhs: &Expr,
        span: ast::Span,
    ) -> Result<ValueId, CompileError> {
        match op {
            BinOp::And | BinOp::Or => {
                let l = self.emit_cond(lhs)?;
                let node = self.b.insert("prim::If", None, vec![l], vec![]);
                let saved = self.b.block;
                let tb = self.b.graph.add_block(node);
                let fb = self.b.graph.add_block(node);
                let (rhs_block, const_block, constant) = if op == BinOp::And {
                    (tb, fb, false)
                } else {
                    (fb, tb, true)
                };
                self.b.block = rhs_block;
                let r = self.emit_cond(rhs);
                self.b.block = saved;
                let r = r?;
                self.b.block = const_block;
                let c = self.b.constant(IValue::Bool(constant));
                self.b.block = saved;
                self.b.graph.block_mut(rhs_block).returns.push(r);
                self.b.graph.block_mut(const_block).returns.push(c);
                Ok(self.b.graph.add_node_output(node, Type::Bool))
            }
            BinOp::In | BinOp::NotIn => {
                let l = self.emit_value(lhs, None)?;
                let r = self.emit_value(rhs, None)?;
                let contains = self.call_op("aten::__contains__", None, &[r, l], &[], span)?;
                if op == BinOp::In {
                    Ok(contains)
                } else {
                    self.call_op("aten::__not__", None, &[contains], &[], span)
                }
            }
            _ => {
                let l = self.emit_value(lhs, None)?;
                let r = self.emit_value(rhs, None)?;
                self.emit_binary_values(op, l, r, span)
            }
        }
    }

    pub(super) fn emit_binary_values(
        &mut self,
        op: BinOp,
        l: ValueId,
        r: ValueId,
        span: ast::Span,
    ) -> Result<ValueId, CompileError> {
        let name = binary_op_name(op)
            .ok_or_else(|| self.err(span, format!("unsupported operator `{}`", op.symbol())))?;
        self.call_op(name, None, &[l, r], &[], span)
    }

    /// Call an operator by name (`aten::add`) through its schemas; multiple returns are packed
    /// into a tuple, no return gives `None`.
    pub(super) fn call_op(
        &mut self,
        name: &str,
        self_value: Option<ValueId>,
        args: &[ValueId],
        kwargs: &[(String, ValueId)],
        span: ast::Span,
    ) -> Result<ValueId, CompileError> {
        let mut schemas = SchemaRegistry::global().overloads(name);
        if let Some(version) = self.op_version {
            let table = crate::ir::upgraders::Upgraders::global()?;
            schemas = std::borrow::Cow::Owned(table.overloads_at(name, &schemas, version));
        }
        if schemas.is_empty() {
            let range = self.file.range(span);
            return Err(CompileError::UnknownOperator {
                location: range.location(),
                op: name.to_string(),
                at: Box::new(range.code_location()),
            });
        }
        let m = match_schemas(&mut self.b, &schemas, self_value, args, kwargs)
            .map_err(|e| self.err(span, e))?;
        let n = self.b.insert(
            &m.schema.name,
            Some(&m.schema.overload),
            m.inputs,
            m.return_types.clone(),
        );
        let outs = self.b.graph.node(n).outputs.clone();
        Ok(match outs.as_slice() {
            [one] => *one,
            _ => self.b.insert1(
                "prim::TupleConstruct",
                None,
                outs.clone(),
                Type::Tuple(m.return_types),
            ),
        })
    }

    fn emit_args(
        &mut self,
        args: &[Expr],
        kwargs: &[(ast::Ident, Expr)],
    ) -> Result<CallArgs, CompileError> {
        let mut a = Vec::new();
        for e in args {
            if let ExprKind::Starred(_) = e.kind {
                return Err(self.err(e.span, "starred arguments are not supported"));
            }
            a.push(self.emit_value(e, None)?);
        }
        let mut k = Vec::new();
        for (name, e) in kwargs {
            k.push((name.name.clone(), self.emit_value(e, None)?));
        }
        Ok((a, k))
    }

    fn emit_call(
        &mut self,
        func: &Expr,
        args: &[Expr],
        kwargs: &[(ast::Ident, Expr)],
        span: ast::Span,
        hint: Option<&Type>,
    ) -> Result<ValueId, CompileError> {
        if let (ExprKind::Name(f), [arg]) = (&func.kind, args) {
            if let ExprKind::Name(name) = &arg.kind {
                if f == "fork" && kwargs.is_empty() && self.lookup(f).is_none() {
                    if let Some(def) = self.lookup_closure(name) {
                        return self.emit_fork_closure(&def, span);
                    }
                }
            }
        }
        let callee = self.emit_sugared(func, None)?;
        match callee {
            Sugared::Global(name) => self.call_global(&name, args, kwargs, span, hint),
            Sugared::Method { obj, name }
                if name == "tolist" && args.is_empty() && *self.b.ty(obj) == Type::Tensor =>
            {
                // PyTorch's `tolist` special form emits its receiver a second time (the
                // first emission, for the callee, is left dead)
                let obj = match &func.kind {
                    ExprKind::Attribute { value, .. } => self.emit_value(value, None)?,
                    _ => obj,
                };
                self.emit_tolist(obj, hint, span)
            }
            Sugared::Method { obj, name } => {
                let (a, k) = self.emit_args(args, kwargs)?;
                self.call_method(obj, &name, &a, &k, span)
            }
            Sugared::Value(v) => Err(self.err(
                span,
                format!("calling a value of type {} is not supported", self.b.ty(v)),
            )),
        }
    }

    /// `tensor.tolist()` under a type hint (`annotate(List[List[float]], x.tolist())`):
    /// `prim::tolist(x, dim, elem)` with elem 0 int, 1 float, 2 bool, 3 complex, as PyTorch.
    fn emit_tolist(
        &mut self,
        tensor: ValueId,
        hint: Option<&Type>,
        span: ast::Span,
    ) -> Result<ValueId, CompileError> {
        let Some(list_type @ Type::List(_)) = hint else {
            return Err(self.err(span, "Expected a List type hint for the result of tolist()"));
        };
        let mut elem = list_type;
        let mut dim = 0;
        while let Type::List(inner) = elem {
            elem = inner;
            dim += 1;
        }
        let code = match elem {
            Type::Int => 0,
            Type::Float => 1,
            Type::Bool => 2,
            Type::Complex => 3,
            other => {
                return Err(self.err(
                    span,
                    format!(
                        "tolist() cannot produce lists of {other}: int, float, bool or complex"
                    ),
                ))
            }
        };
        let dim = self.b.constant_without_range(IValue::Int(dim));
        let code = self.b.constant_without_range(IValue::Int(code));
        Ok(self.b.insert1(
            "prim::tolist",
            None,
            vec![tensor, dim, code],
            list_type.clone(),
        ))
    }

    /// `obj.name(args)`: a class method (`prim::CallMethod`) or a builtin operator on `obj`.
    fn call_method(
        &mut self,
        obj: ValueId,
        name: &str,
        args: &[ValueId],
        kwargs: &[(String, ValueId)],
        span: ast::Span,
    ) -> Result<ValueId, CompileError> {
        if let Type::Class(c) = self.b.ty(obj).clone() {
            let torchbind;
            let class;
            let sig = if self.unit.class(&c).is_none()
                && crate::values::ivalue::is_torchbind_class(&c)
            {
                torchbind = crate::ir::torchbind::method_signature(&c, name).ok_or_else(|| {
                    self.err(
                        span,
                        format!("torchbind class {c} has no method `{name}` tsrun knows"),
                    )
                })?;
                &torchbind
            } else {
                class = self
                    .unit
                    .class(&c)
                    .ok_or_else(|| self.err(span, format!("unknown class {c}")))?
                    .clone();
                class
                    .method_signature(name)
                    .ok_or_else(|| self.err(span, format!("class {c} has no method `{name}`")))?
            };
            let mut inputs = vec![obj];
            inputs.extend(self.match_signature(sig, true, args, kwargs, name, span)?);
            let n = self.b.insert(
                "prim::CallMethod",
                None,
                inputs,
                vec![sig.return_type.clone()],
            );
            self.b
                .graph
                .node_mut(n)
                .attrs
                .push(("name".into(), Attr::Str(name.to_string())));
            return Ok(self.b.graph.node(n).outputs[0]);
        }
        self.call_op(&format!("aten::{name}"), Some(obj), args, kwargs, span)
    }

    /// Match call arguments against a user function's signature (defaults become constants).
    fn match_signature(
        &mut self,
        sig: &Signature,
        skip_self: bool,
        args: &[ValueId],
        kwargs: &[(String, ValueId)],
        name: &str,
        span: ast::Span,
    ) -> Result<Vec<ValueId>, CompileError> {
        let schema = Arc::new(FunctionSchema {
            name: name.to_string(),
            overload: String::new(),
            arguments: sig
                .params
                .iter()
                .skip(usize::from(skip_self))
                .map(|p| Argument {
                    name: p.name.clone(),
                    ty: p.ty.clone(),
                    fixed_len: None,
                    default: p.default.clone(),
                    kwarg_only: p.kwarg_only,
                    is_write: false,
                    alias: None,
                })
                .collect(),
            returns: Vec::new(),
            is_vararg: false,
            is_varret: false,
        });
        let m = match_schemas(&mut self.b, &[schema], None, args, kwargs)
            .map_err(|e| self.err(span, e))?;
        Ok(m.inputs)
    }

    pub(super) fn type_arg(&self, e: &Expr) -> Result<Type, CompileError> {
        let te = e.to_type_expr().map_err(|m| self.err(e.span, m))?;
        te.to_type().map_err(|m| self.err(e.span, m))
    }

    fn call_global(
        &mut self,
        name: &str,
        args: &[Expr],
        kwargs: &[(ast::Ident, Expr)],
        span: ast::Span,
        hint: Option<&Type>,
    ) -> Result<ValueId, CompileError> {
        match name {
            "annotate" if args.len() == 2 => {
                let ty = self.type_arg(&args[0])?;
                let v = self.emit_value(&args[1], Some(&ty))?;
                // as PyTorch: implicit conversions apply (`annotate(number, tensor)`)
                let v = super::matching::convert_to_type(&mut self.b, &ty, v, true);
                let vt = self.b.ty(v).clone();
                if !is_subtype(&vt, &ty) {
                    return Err(self.err(span, format!("annotate: {vt} is not a {ty}")));
                }
                if matches!(ty, Type::Optional(_)) && vt == Type::NoneType {
                    // a None annotated Optional[T] remembers T
                    return Ok(self.b.insert1("prim::Constant", None, vec![], ty));
                }
                return Ok(v);
            }
            "uninitialized" if args.len() == 1 => {
                let ty = self.type_arg(&args[0])?;
                return Ok(self.b.insert1("prim::Uninitialized", None, vec![], ty));
            }
            "unchecked_cast" if args.len() == 2 => {
                let ty = self.type_arg(&args[0])?;
                let v = self.emit_value(&args[1], None)?;
                return Ok(self.b.insert1("prim::unchecked_cast", None, vec![v], ty));
            }
            "isinstance" if args.len() == 2 => {
                let v = self.emit_value(&args[0], None)?;
                let vt = self.b.ty(v).clone();
                let types: Vec<Type> = match &args[1].kind {
                    ExprKind::Tuple(items) => items
                        .iter()
                        .map(|t| self.type_arg(t))
                        .collect::<Result<_, _>>()?,
                    _ => vec![self.type_arg(&args[1])?],
                };
                // a union (or optional) is decided member by member (`emitIsInstance`)
                let members: Vec<Type> = match &vt {
                    Type::Union(ts) => ts.clone(),
                    Type::Optional(t) => vec![(**t).clone(), Type::NoneType],
                    t => vec![t.clone()],
                };
                let matches = |m: &Type| types.iter().any(|t| is_subtype(m, t));
                let may_match = |m: &Type| {
                    *m == Type::Any || types.iter().any(|t| is_subtype(m, t) || is_subtype(t, m))
                };
                if members.iter().all(matches) {
                    return Ok(self.b.constant(IValue::Bool(true)));
                }
                if !members.iter().any(may_match) {
                    return Ok(self.b.constant(IValue::Bool(false)));
                }
                // decided at run time: `prim::isinstance[types=[...]](%v)`
                let n = self
                    .b
                    .insert("prim::isinstance", None, vec![v], vec![Type::Bool]);
                let attr = match types.as_slice() {
                    [one] => Attr::Type(one.clone()),
                    many => Attr::Strs(many.iter().map(|t| t.annotation_str()).collect()),
                };
                self.b.graph.node_mut(n).attrs.push(("types".into(), attr));
                return Ok(self.b.graph.node(n).outputs[0]);
            }
            "getattr" if args.len() == 2 => {
                let ExprKind::Str(attr) = &args[1].kind else {
                    return Err(self.err(span, "getattr() needs a string literal"));
                };
                let base = self.emit_sugared(&args[0], None)?;
                let s = self.emit_attribute(base, attr, span)?;
                return self.as_value(s, span);
            }
            "hasattr" if args.len() == 2 => {
                let ExprKind::Str(attr) = &args[1].kind else {
                    return Err(self.err(span, "hasattr() needs a string literal"));
                };
                let v = self.emit_value(&args[0], None)?;
                let has = match self.b.ty(v) {
                    Type::Class(c) => self.unit.class(c).is_some_and(|cl| {
                        cl.attribute_type(attr).is_some()
                            || cl.constant(attr).is_some()
                            || cl.has_method(attr)
                    }),
                    _ => false,
                };
                return Ok(self.b.constant(IValue::Bool(has)));
            }
            "range" | "enumerate" | "zip" => {
                return Err(self.err(
                    span,
                    format!("{name}() is only supported as a for-loop iterable"),
                ))
            }
            _ => {}
        }
        let _ = hint;
        if let Some(op) = builtin_operator(name) {
            let (a, k) = self.emit_args(args, kwargs)?;
            if let (Some(target), [v], []) = (cast_target(name), a.as_slice(), k.as_slice()) {
                return self.emit_cast(op, target, *v, span);
            }
            return self.call_op(op, None, &a, &k, span);
        }
        if let Some(rest) = name.strip_prefix("torch.") {
            let (a, k) = self.emit_args(args, kwargs)?;
            let op = match rest {
                "jit._unwrap_optional" => "aten::_unwrap_optional".to_string(),
                r if r.contains('.') => {
                    return Err(self.err(span, format!("unsupported function torch.{r}")))
                }
                r => format!("aten::{r}"),
            };
            return self.call_op(&op, None, &a, &k, span);
        }
        if let Some(rest) = name.strip_prefix("ops.") {
            let Some((ns, op)) = rest.split_once('.') else {
                return Err(self.err(span, format!("`{name}` is not an operator")));
            };
            let (a, k) = self.emit_args(args, kwargs)?;
            return self.call_op(&format!("{ns}::{op}"), None, &a, &k, span);
        }
        if let Some(rest) = name.strip_prefix("math.") {
            let (a, k) = self.emit_args(args, kwargs)?;
            return self.call_op(&format!("aten::{rest}"), None, &a, &k, span);
        }
        if name.starts_with("__torch__.") {
            // `__torch__.C.__new__(__torch__.C)` allocates an object; `__init__` follows
            if let Some(class_name) = name.strip_suffix(".__new__") {
                if let Some(class) = self.unit.class(class_name) {
                    let ty = Type::Class(class.qualname.clone());
                    return Ok(self.b.insert1("prim::CreateObject", None, vec![], ty));
                }
            }
            if let Some(sig) = self.unit.function_signature(name) {
                let sig = sig.clone();
                let (a, k) = self.emit_args(args, kwargs)?;
                let f = self
                    .b
                    .constant_typed(IValue::Function(name.into()), Type::Function(name.into()));
                let mut inputs = vec![f];
                inputs.extend(self.match_signature(&sig, false, &a, &k, name, span)?);
                return Ok(self.b.insert1(
                    "prim::CallFunction",
                    None,
                    inputs,
                    sig.return_type.clone(),
                ));
            }
            if let Some(class) = self.unit.class(name).cloned() {
                let (a, k) = self.emit_args(args, kwargs)?;
                return self.construct(&class, &a, &k, span);
            }
            return Err(self.err(span, format!("unknown function or class {name}")));
        }
        Err(self.err(span, format!("unsupported call to `{name}`")))
    }

    /// `Class(args)`: a NamedTuple, or an object (`prim::CreateObject` + `__init__`).
    fn construct(
        &mut self,
        class: &Arc<crate::ir::decls::ClassInfo>,
        args: &[ValueId],
        kwargs: &[(String, ValueId)],
        span: ast::Span,
    ) -> Result<ValueId, CompileError> {
        let ty = Type::Class(class.qualname.clone());
        match class.kind {
            ClassKind::NamedTuple => {
                let sig = Signature {
                    params: class
                        .fields
                        .iter()
                        .map(|(n, t, d)| crate::ir::decls::Param {
                            name: n.clone(),
                            ty: t.clone(),
                            default: d.clone(),
                            kwarg_only: false,
                        })
                        .collect(),
                    return_type: ty.clone(),
                };
                let inputs =
                    self.match_signature(&sig, false, args, kwargs, &class.qualname, span)?;
                let n = self
                    .b
                    .insert("prim::TupleConstruct", None, inputs, vec![ty]);
                // Unlike other tuples, PyTorch's NamedTuple constructor gives the node the
                // call's range.
                let data = self.b.graph.node_mut(n);
                data.source = self.b.source.clone();
                Ok(data.outputs[0])
            }
            ClassKind::Class => {
                let obj = self.b.insert1("prim::CreateObject", None, vec![], ty);
                self.call_method(obj, "__init__", args, kwargs, span)?;
                Ok(obj)
            }
            _ => Err(self.err(span, format!("cannot construct {}", class.qualname))),
        }
    }

    /// The value a global name stands for (`CONSTANTS.c0`, enum members, `math.pi`).
    fn global_value(&mut self, name: &str, span: ast::Span) -> Result<ValueId, CompileError> {
        if let Some(key) = name.strip_prefix("CONSTANTS.") {
            let value = key
                .strip_prefix('c')
                .and_then(|i| i.parse::<usize>().ok())
                .and_then(|i| self.unit.tensor_constant(i))
                .ok_or_else(|| self.err(span, format!("unknown tensor constant {name}")))?;
            return Ok(self.b.constant(value));
        }
        match name {
            "math.pi" => return Ok(self.b.constant(IValue::Double(std::f64::consts::PI))),
            "math.e" => return Ok(self.b.constant(IValue::Double(std::f64::consts::E))),
            "math.inf" => return Ok(self.b.constant(IValue::Double(f64::INFINITY))),
            "math.nan" => return Ok(self.b.constant(IValue::Double(f64::NAN))),
            _ => {}
        }
        if let Some((class_name, member)) = name.rsplit_once('.') {
            if let Some(class) = self.unit.class(class_name) {
                if class.kind == ClassKind::Enum {
                    if let Some((_, v)) = class.enum_values.iter().find(|(n, _)| n == member) {
                        let value = IValue::Enum(Arc::new(EnumValue {
                            class: class.qualname.clone(),
                            name: member.into(),
                            value: v.clone(),
                        }));
                        return Ok(self.b.constant(value));
                    }
                }
            }
        }
        if SPECIAL_BUILTINS.contains(&name) || builtin_operator(name).is_some() {
            return Err(self.err(span, format!("`{name}` is not a value")));
        }
        Err(self.err(span, format!("undefined name `{name}`")))
    }

    /// `base.name`.
    pub(super) fn emit_attribute(
        &mut self,
        base: Sugared,
        name: &str,
        span: ast::Span,
    ) -> Result<Sugared, CompileError> {
        let obj = match base {
            Sugared::Global(prefix) => return Ok(Sugared::Global(format!("{prefix}.{name}"))),
            Sugared::Method { .. } => {
                return Err(self.err(span, format!("attribute `{name}` of a method")))
            }
            Sugared::Value(v) => v,
        };
        let ty = self.b.ty(obj).clone();
        if let Type::Class(c) = &ty {
            if self.unit.class(c).is_none()
                && crate::values::ivalue::is_torchbind_class(c)
                && crate::ir::torchbind::method_signature(c, name).is_some()
            {
                return Ok(Sugared::Method {
                    obj,
                    name: name.to_string(),
                });
            }
            let class = self
                .unit
                .class(c)
                .ok_or_else(|| self.err(span, format!("unknown class {c}")))?
                .clone();
            if let Some(v) = class.constant(name) {
                return Ok(Sugared::Value(self.b.constant(v.clone())));
            }
            if class.kind == ClassKind::NamedTuple {
                if let Some(i) = class.fields.iter().position(|(n, _, _)| n == name) {
                    let elems = self.tuple_types(&ty).unwrap_or_default();
                    let idx = self.b.constant(IValue::Int(i as i64));
                    let out = elems.get(i).cloned().unwrap_or(Type::Any);
                    return Ok(Sugared::Value(self.b.insert1(
                        "prim::TupleIndex",
                        None,
                        vec![obj, idx],
                        out,
                    )));
                }
            }
            if class.kind == ClassKind::Enum {
                return match name {
                    "name" => Ok(Sugared::Value(self.call_op(
                        "prim::EnumName",
                        None,
                        &[obj],
                        &[],
                        span,
                    )?)),
                    "value" => {
                        // every member of an enum has the same value type (`EnumType::
                        // getValueType`); the overload (int, float or str) follows from it
                        let value_type = class
                            .enum_values
                            .first()
                            .map(|(_, v)| crate::ir::graph::constant_type(v));
                        let out = self.call_op("prim::EnumValue", None, &[obj], &[], span)?;
                        if let (Some(ty), Def::Node(n, 0)) =
                            (value_type, self.b.graph.value(out).def)
                        {
                            let overload = match ty {
                                Type::Float => "float",
                                Type::Str => "str",
                                _ => "int",
                            };
                            self.b.graph.node_mut(n).overload = Some(overload.to_string());
                            self.b.graph.value_mut(out).ty = ty;
                        }
                        Ok(Sugared::Value(out))
                    }
                    _ => Err(self.err(span, format!("enum has no attribute `{name}`"))),
                };
            }
            if let Some(t) = class.attribute_type(name) {
                let n = self
                    .b
                    .insert("prim::GetAttr", None, vec![obj], vec![t.clone()]);
                self.b
                    .graph
                    .node_mut(n)
                    .attrs
                    .push(("name".into(), Attr::Str(name.to_string())));
                let out = self.b.graph.node(n).outputs[0];
                // `Graph::createGetAttr` names the output after the field (`_0` for `0`)
                let field_name = if name.bytes().all(|c| c.is_ascii_digit()) {
                    format!("_{name}")
                } else {
                    name.to_string()
                };
                self.b.graph.set_debug_name(out, &field_name);
                return Ok(Sugared::Value(out));
            }
            if class.has_method(name) {
                return Ok(Sugared::Method {
                    obj,
                    name: name.to_string(),
                });
            }
            return Err(self.err(span, format!("class {c} has no attribute `{name}`")));
        }
        if ty == Type::Tensor {
            let prop = match name {
                "shape" => Some(("aten::size", Type::list(Type::Int))),
                "dtype" => Some(("prim::dtype", Type::Int)),
                "device" => Some(("prim::device", Type::Device)),
                "is_cuda" => Some(("prim::is_cuda", Type::Bool)),
                "requires_grad" => Some(("prim::requires_grad", Type::Bool)),
                "data" => Some(("prim::data", Type::Tensor)),
                "ndim" => Some(("aten::dim", Type::Int)),
                "T" => Some(("aten::numpy_T", Type::Tensor)),
                "layout" => Some(("prim::layout", Type::Int)),
                "is_quantized" => Some(("prim::is_quantized", Type::Bool)),
                "is_meta" => Some(("prim::is_meta", Type::Bool)),
                _ => None,
            };
            if let Some((op, _)) = prop {
                return Ok(Sugared::Value(self.call_op(op, None, &[obj], &[], span)?));
            }
        }
        if let Some(types) = self.tuple_types(&ty) {
            let _ = types;
            return Err(self.err(span, format!("tuple has no attribute `{name}`")));
        }
        Ok(Sugared::Method {
            obj,
            name: name.to_string(),
        })
    }

    fn emit_subscript(
        &mut self,
        value: &Expr,
        indices: &[Expr],
        span: ast::Span,
        hint: Option<&Type>,
    ) -> Result<ValueId, CompileError> {
        let base = self.emit_value(value, None)?;
        let ty = self.b.ty(base).clone();
        // `m: SomeInterface = self.dict[key]`: a module container indexed with a run-time key
        // is `prim::ModuleContainerIndex`, typed by the annotation (PyTorch requires one)
        if let (Type::Class(c), [index]) = (&ty, indices) {
            let container = match c.as_ref() {
                "__torch__.torch.nn.modules.container.ModuleDict" => Some("dict"),
                "__torch__.torch.nn.modules.container.ModuleList" => Some("list"),
                _ => None,
            };
            if let Some(overload) = container {
                let Some(out) = hint.cloned() else {
                    return Err(self.err(
                        span,
                        "indexing a module container with a run-time key needs a type annotation",
                    ));
                };
                let idx = self.emit_value(index, None)?;
                return Ok(self.b.insert1(
                    "prim::ModuleContainerIndex",
                    Some(overload),
                    vec![base, idx],
                    out,
                ));
            }
        }
        if let Some(types) = self.tuple_types(&ty) {
            let [index] = indices else {
                return Err(self.err(span, "tuple subscript takes one index"));
            };
            if let ExprKind::Slice { .. } = index.kind {
                return Err(self.err(span, "tuple slicing is not supported"));
            }
            let idx = self.emit_value(index, None)?;
            let constant = match self.b.graph.value(idx).def {
                crate::ir::graph::Def::Node(n, _) => self.b.graph.constant_value(n),
                _ => None,
            };
            let Some(IValue::Int(i)) = constant else {
                // a run-time index (`self.names[i]` on a `__constants__` list, which becomes a
                // tuple): PyTorch allows it when every element converts to the first one's type
                // (`convertibleToList`), and types the element as that first type
                let dynamic_type = match types.split_first() {
                    Some((first, rest))
                        if self.b.ty(idx) == &Type::Int && rest.iter().all(|t| is_subtype(t, first)) =>
                    {
                        first.clone()
                    }
                    _ => {
                        return Err(self.err(
                            span,
                            format!(
                                "cannot index into a {ty} with a non-integer literal because its output type cannot be resolved"
                            ),
                        ))
                    }
                };
                return Ok(self
                    .b
                    .insert1("prim::TupleIndex", None, vec![base, idx], dynamic_type));
            };
            let len = types.len() as i64;
            let k = if i < 0 { i + len } else { i };
            let out = usize::try_from(k)
                .ok()
                .and_then(|k| types.get(k).cloned())
                .ok_or_else(|| self.err(span, format!("tuple index {i} out of range")))?;
            // indexing a literal tuple picks the element directly (`LowerSimpleTuples`);
            // any other tuple is indexed with `prim::TupleIndex`
            if let Some(n) = crate::ir::passes::producer(&self.b.graph, base) {
                let node = self.b.graph.node(n);
                if node.kind == "prim::TupleConstruct" {
                    if let Some(&e) = usize::try_from(k).ok().and_then(|k| node.inputs.get(k)) {
                        // PyTorch's TupleIndex output stands for the element until tuple
                        // lowering removes it: it takes the number and an assigned name
                        let index_output = self.b.graph.transient_value(None);
                        self.stand_ins.push((e, index_output));
                        return Ok(e);
                    }
                }
            }
            return Ok(self
                .b
                .insert1("prim::TupleIndex", None, vec![base, idx], out));
        }
        match ty {
            Type::List(_) | Type::Str | Type::Dict(..) => {
                let [index] = indices else {
                    return Err(self.err(span, "subscript takes one index"));
                };
                if let ExprKind::Slice { lower, upper, step } = &index.kind {
                    let mut a = vec![base];
                    for part in [lower, upper, step] {
                        a.push(match part {
                            Some(e) => self.emit_value(e, None)?,
                            None => self.b.none(),
                        });
                    }
                    return self.call_op("aten::slice", None, &a, &[], span);
                }
                let idx = self.emit_value(index, None)?;
                self.call_op("aten::__getitem__", None, &[base, idx], &[], span)
            }
            Type::Tensor => self.emit_tensor_subscript(base, indices, span),
            t => Err(self.err(
                span,
                format!("subscript on a value of type {t} is not supported"),
            )),
        }
    }

    /// `x[i, a:b, None]` on a tensor: select/slice/unsqueeze per dimension.
    fn emit_tensor_subscript(
        &mut self,
        base: ValueId,
        indices: &[Expr],
        span: ast::Span,
    ) -> Result<ValueId, CompileError> {
        let mut v = base;
        let mut dim: i64 = 0;
        for index in indices {
            match &index.kind {
                ExprKind::Slice { lower, upper, step } => {
                    let d = self.b.constant(IValue::Int(dim));
                    let mut a = vec![v, d];
                    for part in [lower, upper, step] {
                        a.push(match part {
                            Some(e) => self.emit_value(e, None)?,
                            None => self.b.none(),
                        });
                    }
                    if step.is_none() {
                        a.pop();
                        a.push(self.b.constant(IValue::Int(1)));
                    }
                    v = self.call_op("aten::slice", None, &a, &[], span)?;
                    dim += 1;
                }
                ExprKind::None => {
                    let d = self.b.constant(IValue::Int(dim));
                    v = self.call_op("aten::unsqueeze", None, &[v, d], &[], span)?;
                    dim += 1;
                }
                _ => {
                    let i = self.emit_value(index, None)?;
                    if *self.b.ty(i) != Type::Int {
                        return Err(self.err(
                            index.span,
                            "advanced (tensor/list) indexing is not supported",
                        ));
                    }
                    let d = self.b.constant(IValue::Int(dim));
                    v = self.call_op("aten::select", None, &[v, d, i], &[], span)?;
                }
            }
        }
        Ok(v)
    }
}
