//! The TorchScript type system (`c10::Type`), with both spellings PyTorch prints:
//! [`Type::annotation_str`] as in code (`Optional[List[int]]`) and `Display` as in graphs (`int[]?`).

use std::fmt;
use std::sync::Arc;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Type {
    Any,
    Tensor,
    Int,
    Float,
    Bool,
    Str,
    Complex,
    /// `Scalar` / `number`: int, float or complex
    Number,
    NoneType,
    Device,
    Generator,
    Stream,
    Storage,
    Layout,
    ScalarType,
    MemoryFormat,
    QScheme,
    Capsule,
    AnyList,
    AnyTuple,
    AnyClass,
    AnyEnum,
    Optional(Box<Type>),
    List(Box<Type>),
    Dict(Box<Type>, Box<Type>),
    Tuple(Vec<Type>),
    Union(Vec<Type>),
    Future(Box<Type>),
    Await(Box<Type>),
    RRef(Box<Type>),
    /// A named class: module, script class, NamedTuple, Enum or interface, by qualified name
    /// (`__torch__.torch.nn.modules.linear.Linear`). Its definition lives in the compilation unit.
    Class(Arc<str>),
    /// A first-class function value (`Function`), by qualified name.
    Function(Arc<str>),
    /// A type variable in a schema (`t`, `t1`).
    Var(Arc<str>),
}

impl Type {
    pub fn optional(t: Type) -> Type {
        Type::Optional(Box::new(t))
    }
    pub fn list(t: Type) -> Type {
        Type::List(Box::new(t))
    }
    pub fn dict(k: Type, v: Type) -> Type {
        Type::Dict(Box::new(k), Box::new(v))
    }

    /// Python-annotation spelling, as in `code` and in `restore_type_tag` strings.
    pub fn annotation_str(&self) -> String {
        match self {
            Type::Optional(t) => format!("Optional[{}]", t.annotation_str()),
            Type::List(t) => format!("List[{}]", t.annotation_str()),
            Type::Dict(k, v) => format!("Dict[{}, {}]", k.annotation_str(), v.annotation_str()),
            Type::Tuple(ts) if ts.is_empty() => "Tuple[()]".to_string(),
            Type::Tuple(ts) => format!(
                "Tuple[{}]",
                ts.iter()
                    .map(|t| t.annotation_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Type::Union(ts) => union_text(ts, "[", "]", "number", &Type::annotation_str),
            Type::Future(t) => format!("Future[{}]", t.annotation_str()),
            Type::Await(t) => format!("Await[{}]", t.annotation_str()),
            Type::RRef(t) => format!("RRef[{}]", t.annotation_str()),
            Type::NoneType => "None".to_string(),
            other => other.to_string(),
        }
    }
}

/// A Union as PyTorch's `UnionType::unionStr` spells it: a union holding `int`, `float` and
/// `complex` shows them as one `Scalar` (`number` in annotations) after its other members,
/// with c10's separator quirk (a member after a skipped first one is preceded by `, `).
fn union_text(
    ts: &[Type],
    open: &str,
    close: &str,
    number: &str,
    spell: &dyn Fn(&Type) -> String,
) -> String {
    let is_number = |t: &Type| matches!(t, Type::Int | Type::Float | Type::Complex);
    let holds_number = [Type::Int, Type::Float, Type::Complex]
        .iter()
        .all(|n| ts.contains(n));
    let mut out = format!("Union{open}");
    let mut printed = false;
    for (i, t) in ts.iter().enumerate() {
        if holds_number && is_number(t) {
            continue;
        }
        if i > 0 {
            out.push_str(", ");
            printed = true;
        }
        out.push_str(&spell(t));
    }
    if holds_number {
        if printed {
            out.push_str(", ");
        }
        out.push_str(number);
    }
    out.push_str(close);
    out
}

impl fmt::Display for Type {
    /// Graph spelling (`c10::Type::str()`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::Any => f.write_str("Any"),
            Type::Tensor => f.write_str("Tensor"),
            Type::Int => f.write_str("int"),
            Type::Float => f.write_str("float"),
            Type::Bool => f.write_str("bool"),
            Type::Str => f.write_str("str"),
            Type::Complex => f.write_str("complex"),
            Type::Number => f.write_str("Scalar"),
            Type::NoneType => f.write_str("NoneType"),
            Type::Device => f.write_str("Device"),
            Type::Generator => f.write_str("Generator"),
            Type::Stream => f.write_str("Stream"),
            Type::Storage => f.write_str("Storage"),
            Type::Layout => f.write_str("Layout"),
            Type::ScalarType => f.write_str("ScalarType"),
            Type::MemoryFormat => f.write_str("MemoryFormat"),
            Type::QScheme => f.write_str("QScheme"),
            Type::Capsule => f.write_str("Capsule"),
            Type::AnyList => f.write_str("list"),
            Type::AnyTuple => f.write_str("tuple"),
            Type::AnyClass => f.write_str("AnyClassType"),
            Type::AnyEnum => f.write_str("AnyEnumType"),
            Type::Optional(t) => write!(f, "{t}?"),
            Type::List(t) => write!(f, "{t}[]"),
            Type::Dict(k, v) => write!(f, "Dict({k}, {v})"),
            Type::Tuple(ts) => {
                f.write_str("(")?;
                for (i, t) in ts.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{t}")?;
                }
                f.write_str(")")
            }
            Type::Union(ts) => f.write_str(&union_text(ts, "(", ")", "Scalar", &Type::to_string)),
            // `str(graph)` spells futures with brackets
            Type::Future(t) => write!(f, "Future[{t}]"),
            Type::Await(t) => write!(f, "Await({t})"),
            Type::RRef(t) => write!(f, "RRef({t})"),
            Type::Class(n) => f.write_str(n),
            // PyTorch's `FunctionType::str()`; annotations spell the qualified name
            Type::Function(_) => f.write_str("Function"),
            Type::Var(n) => f.write_str(n),
        }
    }
}

impl Type {
    /// Every class named inside this type (`Optional[List[C]]` names `C`).
    pub fn class_names(&self, out: &mut Vec<Arc<str>>) {
        match self {
            Type::Class(c) => out.push(c.clone()),
            Type::Optional(t)
            | Type::List(t)
            | Type::Future(t)
            | Type::Await(t)
            | Type::RRef(t) => t.class_names(out),
            Type::Dict(k, v) => {
                k.class_names(out);
                v.class_names(out);
            }
            Type::Tuple(ts) | Type::Union(ts) => ts.iter().for_each(|t| t.class_names(out)),
            _ => {}
        }
    }
}

/// Parse a Python-annotation type string as found in `restore_type_tag` and class declarations
/// (`List[str]`, `Dict[str, Tensor]`, `Optional[Tuple[int, int]]`, `__torch__.foo.Bar`).
/// Returns `None` for malformed input.
pub fn parse_annotation(s: &str) -> Option<Type> {
    let mut p = AnnotParser {
        s: s.as_bytes(),
        i: 0,
    };
    let t = p.parse()?;
    p.skip_ws();
    if p.i == p.s.len() {
        Some(t)
    } else {
        None
    }
}

struct AnnotParser<'a> {
    s: &'a [u8],
    i: usize,
}

impl AnnotParser<'_> {
    fn skip_ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }
    fn eat(&mut self, c: u8) -> bool {
        self.skip_ws();
        if self.i < self.s.len() && self.s[self.i] == c {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn ident(&mut self) -> Option<String> {
        self.skip_ws();
        let start = self.i;
        while self.i < self.s.len()
            && (self.s[self.i].is_ascii_alphanumeric()
                || self.s[self.i] == b'_'
                || self.s[self.i] == b'.')
        {
            self.i += 1;
        }
        if start == self.i {
            return None;
        }
        Some(String::from_utf8_lossy(&self.s[start..self.i]).into_owned())
    }
    fn args(&mut self) -> Option<Vec<Type>> {
        let mut out = Vec::new();
        if !self.eat(b'[') {
            return None;
        }
        if self.eat(b']') {
            return Some(out);
        }
        loop {
            if self.eat(b'(') {
                // `Tuple[()]`
                if !self.eat(b')') {
                    return None;
                }
            } else {
                out.push(self.parse()?);
            }
            if self.eat(b']') {
                return Some(out);
            }
            if !self.eat(b',') {
                return None;
            }
        }
    }
    fn parse(&mut self) -> Option<Type> {
        let name = self.ident()?;
        let name = name.strip_prefix("typing.").unwrap_or(&name).to_string();
        let simple = match name.as_str() {
            "Tensor" => Some(Type::Tensor),
            "int" => Some(Type::Int),
            "float" => Some(Type::Float),
            "bool" => Some(Type::Bool),
            "str" => Some(Type::Str),
            "complex" => Some(Type::Complex),
            "number" | "Scalar" => Some(Type::Number),
            "None" | "NoneType" => Some(Type::NoneType),
            "Device" | "torch.device" => Some(Type::Device),
            "Generator" | "torch.Generator" => Some(Type::Generator),
            "Stream" => Some(Type::Stream),
            "Storage" => Some(Type::Storage),
            "Any" => Some(Type::Any),
            "ScalarType" => Some(Type::ScalarType),
            "Layout" => Some(Type::Layout),
            "MemoryFormat" => Some(Type::MemoryFormat),
            "Capsule" => Some(Type::Capsule),
            _ => None,
        };
        if let Some(t) = simple {
            return Some(t);
        }
        let generic = matches!(
            name.as_str(),
            "List" | "Dict" | "Tuple" | "Optional" | "Union" | "Future" | "Await" | "RRef"
        );
        if !generic {
            return Some(Type::Class(name.into()));
        }
        let mut a = self.args()?;
        Some(match (name.as_str(), a.len()) {
            ("List", 1) => Type::list(a.remove(0)),
            ("Optional", 1) => Type::optional(a.remove(0)),
            ("Future", 1) => Type::Future(Box::new(a.remove(0))),
            ("Await", 1) => Type::Await(Box::new(a.remove(0))),
            ("RRef", 1) => Type::RRef(Box::new(a.remove(0))),
            ("Dict", 2) => {
                let v = a.remove(1);
                Type::dict(a.remove(0), v)
            }
            ("Tuple", _) => Type::Tuple(a),
            ("Union", _) => Type::Union(a),
            _ => return None,
        })
    }
}
