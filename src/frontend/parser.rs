//! The generated lalrpop parser plus the helpers its actions call.

use super::ast::*;
use super::lexer::{LexError, LexErrorKind, Tok};

lalrpop_util::lalrpop_mod!(
    #[allow(clippy::all, clippy::pedantic, unused_parens, dead_code)]
    pub grammar,
    "/torchscript.rs"
);

pub type GrammarError = lalrpop_util::ParseError<usize, Tok, LexError>;

/// A call argument before positional and keyword arguments are separated.
pub enum ArgItem {
    Positional(Expr),
    Keyword(Ident, Expr),
}

fn invalid(message: impl Into<String>, span: Span) -> GrammarError {
    lalrpop_util::ParseError::User {
        error: LexError {
            kind: LexErrorKind::Invalid(message.into()),
            start: span.start,
            end: span.end,
        },
    }
}

pub fn binary(op: BinOp, lhs: Expr, rhs: Expr, l: usize, r: usize) -> Expr {
    Expr::new(
        ExprKind::Binary {
            op,
            lhs: Box::new(lhs),
            rhs: Box::new(rhs),
        },
        Span::new(l, r),
    )
}

/// Unary minus on a numeric literal is folded into the literal, as TorchScript's parser does
/// (so `-9223372036854775808` is representable).
pub fn unary(op: UnaryOp, operand: Expr, l: usize, r: usize) -> Expr {
    let span = Span::new(l, r);
    match (op, &operand.kind) {
        // PyTorch's parser folds `-` into a number literal, keeping the number's range
        (UnaryOp::Neg, ExprKind::Int(i)) => {
            Expr::new(ExprKind::Int(i.wrapping_neg()), operand.span)
        }
        // `inf` / `nan` are names in PyTorch's grammar: `-inf` stays a negation
        (UnaryOp::Neg, ExprKind::Float(f)) if f.is_finite() => {
            Expr::new(ExprKind::Float(-f), operand.span)
        }
        _ => Expr::new(
            ExprKind::Unary {
                op,
                operand: Box::new(operand),
            },
            span,
        ),
    }
}

/// `2**63` only appears as the operand of a folded unary minus; it is kept as `i64::MIN`.
pub fn int_literal(v: u64, l: usize, r: usize) -> Result<Expr, GrammarError> {
    let span = Span::new(l, r);
    match i64::try_from(v) {
        Ok(i) => Ok(Expr::new(ExprKind::Int(i), span)),
        Err(_) if v == 1u64 << 63 => Ok(Expr::new(ExprKind::Int(i64::MIN), span)),
        Err(_) => Err(invalid(
            format!("integer literal {v} does not fit in int64"),
            span,
        )),
    }
}

pub fn call(func: Expr, args: Vec<ArgItem>, l: usize, r: usize) -> Result<Expr, GrammarError> {
    let mut positional = Vec::new();
    let mut kwargs: Vec<(Ident, Expr)> = Vec::new();
    for a in args {
        match a {
            ArgItem::Positional(e) => {
                if !kwargs.is_empty() {
                    return Err(invalid(
                        "positional argument follows keyword argument",
                        e.span,
                    ));
                }
                positional.push(e);
            }
            ArgItem::Keyword(name, e) => {
                if kwargs.iter().any(|(n, _)| n.name == name.name) {
                    return Err(invalid(
                        format!("keyword argument `{}` repeated", name.name),
                        name.span,
                    ));
                }
                kwargs.push((name, e));
            }
        }
    }
    Ok(Expr::new(
        ExprKind::Call {
            func: Box::new(func),
            args: positional,
            kwargs,
        },
        Span::new(l, r),
    ))
}

pub fn assign(first: Expr, rest: Vec<Expr>, l: usize, r: usize) -> Stmt {
    let mut targets = vec![first];
    targets.extend(rest);
    // The grammar guarantees at least one `= value`, so the last element is the value.
    let value = match targets.pop() {
        Some(v) => v,
        None => Expr::new(ExprKind::None, Span::new(l, r)),
    };
    Stmt {
        kind: StmtKind::Assign { targets, value },
        span: Span::new(l, r),
    }
}

pub fn function_def(
    name: Ident,
    decorators: Vec<Expr>,
    params: Vec<Option<Param>>,
    return_type: Option<TypeExpr>,
    body: Vec<Stmt>,
    span: Span,
) -> Result<FunctionDef, GrammarError> {
    let mut out = Vec::new();
    let mut kwarg_only = false;
    for p in params {
        match p {
            None if kwarg_only => return Err(invalid("`*` appears twice in parameters", span)),
            None => kwarg_only = true,
            Some(mut p) => {
                p.kwarg_only = kwarg_only;
                out.push(p);
            }
        }
    }
    Ok(FunctionDef {
        name,
        decorators,
        params: out,
        return_type,
        body,
        span,
    })
}

fn string_list(e: &Expr) -> Option<Vec<String>> {
    match &e.kind {
        ExprKind::List(items) | ExprKind::Tuple(items) => items
            .iter()
            .map(|i| match &i.kind {
                ExprKind::Str(s) => Some(s.clone()),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

fn class_kind(bases: &[Expr]) -> ClassKind {
    bases
        .iter()
        .find_map(|b| ClassKind::from_base(&b.dotted_name().unwrap_or_default()))
        .unwrap_or(ClassKind::Class)
}

pub fn class_def(
    name: Ident,
    bases: Vec<Expr>,
    body: Vec<Stmt>,
    span: Span,
) -> Result<ClassDef, GrammarError> {
    let mut class = ClassDef {
        kind: class_kind(&bases),
        name,
        bases,
        parameters: Vec::new(),
        buffers: Vec::new(),
        attributes: Vec::new(),
        constants: Vec::new(),
        assignments: Vec::new(),
        methods: Vec::new(),
        span,
    };
    for stmt in body {
        match stmt.kind {
            StmtKind::Pass => {}
            // Docstrings.
            StmtKind::Expr(Expr {
                kind: ExprKind::Str(_),
                ..
            }) => {}
            StmtKind::FunctionDef(f) => class.methods.push(*f),
            // `__annotations__["0"] = T` declares an attribute whose name is not an identifier.
            StmtKind::Assign { targets, value }
                if matches!(
                    targets.as_slice(),
                    [Expr {
                        kind: ExprKind::Subscript { .. },
                        ..
                    }]
                ) =>
            {
                let Some(Expr {
                    kind:
                        ExprKind::Subscript {
                            value: base,
                            indices,
                        },
                    span: target_span,
                }) = targets.first()
                else {
                    return Err(invalid("malformed attribute annotation", stmt.span));
                };
                let name = match (&base.kind, indices.as_slice()) {
                    (ExprKind::Name(b), [Expr { kind: ExprKind::Str(n), .. }]) if b == "__annotations__" => n.clone(),
                    _ => {
                        return Err(invalid(
                            "only `__annotations__[\"name\"] = Type` may assign to a subscript in a class body",
                            stmt.span,
                        ))
                    }
                };
                let ty = value.to_type_expr().map_err(|m| invalid(m, value.span))?;
                class.attributes.push(AttributeDecl {
                    name: Ident {
                        name,
                        span: *target_span,
                    },
                    ty,
                    default: None,
                    span: stmt.span,
                });
            }
            StmtKind::Assign { targets, value } => {
                let [Expr {
                    kind: ExprKind::Name(target),
                    span: target_span,
                }] = targets.as_slice()
                else {
                    return Err(invalid(
                        "a class body assignment must bind a single name",
                        stmt.span,
                    ));
                };
                match target.as_str() {
                    "__parameters__" | "__buffers__" => {
                        let names = string_list(&value).ok_or_else(|| {
                            invalid(format!("{target} must be a list of strings"), value.span)
                        })?;
                        if target == "__parameters__" {
                            class.parameters = names;
                        } else {
                            class.buffers = names;
                        }
                    }
                    _ => class.assignments.push((
                        Ident {
                            name: target.clone(),
                            span: *target_span,
                        },
                        value,
                    )),
                }
            }
            StmtKind::AnnAssign { target, ty, value } => {
                let ExprKind::Name(n) = target.kind else {
                    return Err(invalid(
                        "a class attribute declaration must name a single attribute",
                        stmt.span,
                    ));
                };
                let name = Ident {
                    name: n,
                    span: target.span,
                };
                if ty.is_final() {
                    let inner = match ty.kind {
                        TypeExprKind::Generic { mut args, .. } if args.len() == 1 => args.remove(0),
                        _ => return Err(invalid("Final takes exactly one type", ty.span)),
                    };
                    let value = value.ok_or_else(|| {
                        invalid(format!("constant `{}` has no value", name.name), stmt.span)
                    })?;
                    class.constants.push(ConstantDecl {
                        name,
                        ty: inner,
                        value,
                        span: stmt.span,
                    });
                } else {
                    class.attributes.push(AttributeDecl {
                        name,
                        ty,
                        default: value,
                        span: stmt.span,
                    });
                }
            }
            _ => return Err(invalid("unsupported statement in a class body", stmt.span)),
        }
    }
    Ok(class)
}
