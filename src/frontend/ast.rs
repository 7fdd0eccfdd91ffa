//! The TorchScript syntax tree. Every statement and expression carries a [`Span`]: byte offsets
//! into the file's shared [`Source`] (use [`File::range`] to get a `SourceRange`).

use std::sync::Arc;

use crate::frontend::source::{Source, SourceRange};
use crate::values::types::Type;

/// A byte range in the file's source text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Span {
        Span { start, end }
    }
    /// The smallest span covering both.
    pub fn to(self, other: Span) -> Span {
        Span::new(self.start.min(other.start), self.end.max(other.end))
    }
}

/// One parsed code file.
#[derive(Clone, Debug)]
pub struct File {
    pub items: Vec<Item>,
    pub source: Arc<Source>,
}

impl File {
    pub fn range(&self, span: Span) -> SourceRange {
        SourceRange::new(self.source.clone(), span.start, span.end)
    }
    pub fn classes(&self) -> impl Iterator<Item = &ClassDef> {
        self.items.iter().filter_map(|i| match i {
            Item::Class(c) => Some(c),
            _ => None,
        })
    }
    pub fn functions(&self) -> impl Iterator<Item = &FunctionDef> {
        self.items.iter().filter_map(|i| match i {
            Item::Function(f) => Some(f),
            _ => None,
        })
    }
}

/// A top-level definition.
#[derive(Clone, Debug)]
pub enum Item {
    Class(ClassDef),
    Function(FunctionDef),
    /// A module-level assignment (`op_version_set = 1` in archives from older PyTorch).
    Assign {
        name: Ident,
        value: Expr,
        span: Span,
    },
    /// `import x` / `from x import y` (older archives); carries the dotted module name.
    Import {
        module: String,
        span: Span,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ident {
    pub name: String,
    pub span: Span,
}

/// What a class is, from its base list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClassKind {
    /// `class X(Module):`
    Module,
    /// A TorchScript class (`class X:`).
    Class,
    /// `class X(NamedTuple):`
    NamedTuple,
    /// `class X(Enum):`
    Enum,
    /// `class X(Interface):`
    Interface,
    /// `class X(ModuleInterface):`
    ModuleInterface,
}

impl ClassKind {
    /// The kind a base class name (its last dotted segment: `Module`, `NamedTuple`, `Enum`,
    /// `Interface`, `ModuleInterface`) declares; `None` for any other base.
    pub fn from_base(name: &str) -> Option<ClassKind> {
        match name.rsplit('.').next().unwrap_or(name) {
            "Module" => Some(ClassKind::Module),
            "NamedTuple" => Some(ClassKind::NamedTuple),
            "Enum" => Some(ClassKind::Enum),
            "Interface" => Some(ClassKind::Interface),
            "ModuleInterface" => Some(ClassKind::ModuleInterface),
            _ => None,
        }
    }
}

/// `name : Type` in a class body (module attributes, NamedTuple fields with optional default).
#[derive(Clone, Debug)]
pub struct AttributeDecl {
    pub name: Ident,
    pub ty: TypeExpr,
    pub default: Option<Expr>,
    pub span: Span,
}

/// `name : Final[T] = value` in a class body; `ty` is `T`.
#[derive(Clone, Debug)]
pub struct ConstantDecl {
    pub name: Ident,
    pub ty: TypeExpr,
    pub value: Expr,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct ClassDef {
    pub name: Ident,
    pub bases: Vec<Expr>,
    pub kind: ClassKind,
    /// `__parameters__ = ["weight", "bias", ]`
    pub parameters: Vec<String>,
    /// `__buffers__ = [...]`
    pub buffers: Vec<String>,
    pub attributes: Vec<AttributeDecl>,
    pub constants: Vec<ConstantDecl>,
    /// Other `name = value` lines in the body (enum members: `RED = 1`), in order.
    pub assignments: Vec<(Ident, Expr)>,
    pub methods: Vec<FunctionDef>,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct Param {
    pub name: Ident,
    pub ty: Option<TypeExpr>,
    pub default: Option<Expr>,
    /// Declared after a bare `*`.
    pub kwarg_only: bool,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct FunctionDef {
    pub name: Ident,
    pub decorators: Vec<Expr>,
    pub params: Vec<Param>,
    pub return_type: Option<TypeExpr>,
    pub body: Vec<Stmt>,
    pub span: Span,
}

/// A type annotation, structurally (`Optional[List[int]]`), plus its source span.
#[derive(Clone, Debug, PartialEq)]
pub struct TypeExpr {
    pub kind: TypeExprKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum TypeExprKind {
    /// A (possibly dotted) name: `Tensor`, `int`, `__torch__.foo.Bar`.
    Name(String),
    /// `None` used as a type.
    None,
    /// `Name[args]`: `List[int]`, `Dict[str, Tensor]`, `Tuple[()]` (no args), `Final[int]`.
    Generic { name: String, args: Vec<TypeExpr> },
}

impl TypeExpr {
    /// The type this annotation names. Class names are kept as written (printed code always
    /// uses qualified `__torch__.` names). `Final[T]` is `T`.
    pub fn to_type(&self) -> Result<Type, String> {
        match &self.kind {
            TypeExprKind::None => Ok(Type::NoneType),
            TypeExprKind::Name(n) => {
                let n = n.strip_prefix("typing.").unwrap_or(n);
                Ok(match n {
                    "Tensor" | "torch.Tensor" => Type::Tensor,
                    "int" => Type::Int,
                    "float" => Type::Float,
                    "bool" => Type::Bool,
                    "str" => Type::Str,
                    "complex" => Type::Complex,
                    "number" | "Scalar" => Type::Number,
                    "NoneType" => Type::NoneType,
                    "Device" | "torch.device" => Type::Device,
                    "Generator" | "torch.Generator" => Type::Generator,
                    "Stream" | "torch.Stream" => Type::Stream,
                    "Storage" => Type::Storage,
                    "Any" => Type::Any,
                    "ScalarType" | "torch.dtype" => Type::ScalarType,
                    "Layout" | "torch.layout" => Type::Layout,
                    "MemoryFormat" | "torch.memory_format" => Type::MemoryFormat,
                    "QScheme" => Type::QScheme,
                    "Capsule" => Type::Capsule,
                    "List" | "list" => Type::AnyList,
                    "Tuple" | "tuple" => Type::AnyTuple,
                    other => Type::Class(other.into()),
                })
            }
            TypeExprKind::Generic { name, args } => {
                let name = name.strip_prefix("typing.").unwrap_or(name);
                let mut ts = args
                    .iter()
                    .map(|a| a.to_type())
                    .collect::<Result<Vec<_>, _>>()?;
                let arity = |n: usize| -> Result<(), String> {
                    if ts.len() == n {
                        Ok(())
                    } else {
                        Err(format!(
                            "{name}[...] takes {n} type argument(s), got {}",
                            ts.len()
                        ))
                    }
                };
                Ok(match name {
                    "List" | "list" => {
                        arity(1)?;
                        Type::list(ts.remove(0))
                    }
                    "Optional" => {
                        arity(1)?;
                        Type::optional(ts.remove(0))
                    }
                    "Final" => {
                        arity(1)?;
                        ts.remove(0)
                    }
                    "Future" => {
                        arity(1)?;
                        Type::Future(Box::new(ts.remove(0)))
                    }
                    "Await" => {
                        arity(1)?;
                        Type::Await(Box::new(ts.remove(0)))
                    }
                    "RRef" => {
                        arity(1)?;
                        Type::RRef(Box::new(ts.remove(0)))
                    }
                    "Dict" | "dict" => {
                        arity(2)?;
                        let v = ts.remove(1);
                        Type::dict(ts.remove(0), v)
                    }
                    "Tuple" | "tuple" => Type::Tuple(ts),
                    "Union" => Type::Union(ts),
                    other => return Err(format!("unknown generic type `{other}`")),
                })
            }
        }
    }

    /// Whether this is `Final[...]`.
    pub fn is_final(&self) -> bool {
        matches!(&self.kind, TypeExprKind::Generic { name, .. } if name == "Final" || name == "typing.Final")
    }
}

#[derive(Clone, Debug)]
pub struct Stmt {
    pub kind: StmtKind,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct WithItem {
    pub expr: Expr,
    pub target: Option<Expr>,
}

#[derive(Clone, Debug)]
pub enum StmtKind {
    Expr(Expr),
    /// `a = b = value`: one or more targets (each may be a tuple/list of targets).
    Assign {
        targets: Vec<Expr>,
        value: Expr,
    },
    /// `target : ty = value`
    AnnAssign {
        target: Expr,
        ty: TypeExpr,
        value: Option<Expr>,
    },
    /// `target op= value`
    AugAssign {
        target: Expr,
        op: BinOp,
        value: Expr,
    },
    /// `elif` chains are nested `If`s in `orelse`.
    If {
        cond: Expr,
        body: Vec<Stmt>,
        orelse: Vec<Stmt>,
    },
    While {
        cond: Expr,
        body: Vec<Stmt>,
    },
    For {
        target: Expr,
        iter: Expr,
        body: Vec<Stmt>,
    },
    With {
        items: Vec<WithItem>,
        body: Vec<Stmt>,
    },
    Return(Option<Expr>),
    Raise(Option<Expr>),
    Assert {
        test: Expr,
        msg: Option<Expr>,
    },
    Del(Vec<Expr>),
    Global(Vec<Ident>),
    Pass,
    Break,
    Continue,
    /// A nested `def`.
    FunctionDef(Box<FunctionDef>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnaryOp {
    Neg,
    Pos,
    Invert,
    Not,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    FloorDiv,
    Mod,
    Pow,
    MatMul,
    LShift,
    RShift,
    BitAnd,
    BitOr,
    BitXor,
    /// Short-circuiting `and` / `or`.
    And,
    Or,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Is,
    IsNot,
    In,
    NotIn,
}

impl BinOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::FloorDiv => "//",
            BinOp::Mod => "%",
            BinOp::Pow => "**",
            BinOp::MatMul => "@",
            BinOp::LShift => "<<",
            BinOp::RShift => ">>",
            BinOp::BitAnd => "&",
            BinOp::BitOr => "|",
            BinOp::BitXor => "^",
            BinOp::And => "and",
            BinOp::Or => "or",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Is => "is",
            BinOp::IsNot => "is not",
            BinOp::In => "in",
            BinOp::NotIn => "not in",
        }
    }
}

/// One `for target in iter` clause of a comprehension (with its `if` filters).
#[derive(Clone, Debug)]
pub struct Comprehension {
    pub target: Expr,
    pub iter: Expr,
    pub conds: Vec<Expr>,
}

#[derive(Clone, Debug)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub enum ExprKind {
    Name(String),
    Int(i64),
    Float(f64),
    /// Imaginary literal `2.5j`.
    Imag(f64),
    /// String literal (adjacent literals concatenated).
    Str(String),
    Bool(bool),
    None,
    /// `...`
    Ellipsis,
    Attribute {
        value: Box<Expr>,
        attr: Ident,
    },
    Call {
        func: Box<Expr>,
        args: Vec<Expr>,
        kwargs: Vec<(Ident, Expr)>,
    },
    /// `value[i]`, `value[i, j]` (several indices), slices appear as [`ExprKind::Slice`].
    Subscript {
        value: Box<Expr>,
        indices: Vec<Expr>,
    },
    /// `lower:upper:step` inside a subscript.
    Slice {
        lower: Option<Box<Expr>>,
        upper: Option<Box<Expr>>,
        step: Option<Box<Expr>>,
    },
    List(Vec<Expr>),
    Tuple(Vec<Expr>),
    Dict(Vec<(Expr, Expr)>),
    ListComp {
        elt: Box<Expr>,
        clauses: Vec<Comprehension>,
    },
    DictComp {
        key: Box<Expr>,
        value: Box<Expr>,
        clauses: Vec<Comprehension>,
    },
    Unary {
        op: UnaryOp,
        operand: Box<Expr>,
    },
    Binary {
        op: BinOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
    /// `then if cond else orelse`
    Ternary {
        cond: Box<Expr>,
        then: Box<Expr>,
        orelse: Box<Expr>,
    },
    /// `*value` (call arguments and assignment targets)
    Starred(Box<Expr>),
}

impl Expr {
    pub fn new(kind: ExprKind, span: Span) -> Expr {
        Expr { kind, span }
    }

    /// The dotted name this expression spells (`torch.nn.functional`), if it is one.
    pub fn dotted_name(&self) -> Option<String> {
        match &self.kind {
            ExprKind::Name(n) => Some(n.clone()),
            ExprKind::Attribute { value, attr } => {
                let mut base = value.dotted_name()?;
                base.push('.');
                base.push_str(&attr.name);
                Some(base)
            }
            _ => None,
        }
    }

    /// Read this expression as a type (`annotate(List[int], x)`, `isinstance(x, Tensor)`).
    pub fn to_type_expr(&self) -> Result<TypeExpr, String> {
        let kind = match &self.kind {
            ExprKind::None => TypeExprKind::None,
            ExprKind::Name(_) | ExprKind::Attribute { .. } => {
                TypeExprKind::Name(self.dotted_name().ok_or("not a type")?)
            }
            ExprKind::Subscript { value, indices } => {
                let name = value
                    .dotted_name()
                    .ok_or_else(|| "a type name must be a dotted name".to_string())?;
                let mut args = Vec::new();
                for ix in indices {
                    match &ix.kind {
                        // `Tuple[()]`
                        ExprKind::Tuple(items) if items.is_empty() => {}
                        _ => args.push(ix.to_type_expr()?),
                    }
                }
                TypeExprKind::Generic { name, args }
            }
            _ => return Err("expected a type".to_string()),
        };
        Ok(TypeExpr {
            kind,
            span: self.span,
        })
    }
}
