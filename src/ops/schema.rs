//! Operator schemas (`aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor`):
//! parsing, the registry of every operator PyTorch knows (`fixtures/schemas.txt`, from
//! `torch._C._jit_get_all_schemas()`), and type-variable matching used by overload resolution.

use crate::values::types::Type;
use crate::values::{IValue, List};
use parking_lot::RwLock;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// One formal argument or return of a schema.
#[derive(Clone, Debug)]
pub struct Argument {
    pub name: String,
    pub ty: Type,
    /// Fixed list length (`int[2]`): a single int may be passed and is repeated.
    pub fixed_len: Option<usize>,
    pub default: Option<IValue>,
    pub kwarg_only: bool,
    /// The argument is written in place (`Tensor(a!)`).
    pub is_write: bool,
    /// The alias annotation without `!` and spaces (`a`, `*`, `c->*`, `a|b`), if any.
    pub alias: Option<String>,
}

impl Argument {
    /// The alias sets the value belongs to when the call starts (`a` of `a -> *`).
    pub fn alias_sets(&self) -> impl Iterator<Item = &str> {
        let before = self
            .alias
            .as_deref()
            .map(|a| a.split("->").next().unwrap_or(a))
            .unwrap_or("");
        before.split('|').filter(|s| !s.is_empty())
    }
    /// Whether the value may alias anything (`*`), or enters the wildcard set (`c -> *`).
    pub fn is_wildcard(&self) -> bool {
        self.alias.as_deref().is_some_and(|a| a.contains('*'))
    }
}

/// A parsed operator schema.
#[derive(Clone, Debug)]
pub struct FunctionSchema {
    /// Qualified operator name: `aten::add`.
    pub name: String,
    /// Overload name (`Tensor`), empty for the default overload.
    pub overload: String,
    pub arguments: Vec<Argument>,
    pub returns: Vec<Argument>,
    /// Takes any number of extra positional arguments (`...`).
    pub is_vararg: bool,
    /// Returns any number of values (`-> ...`).
    pub is_varret: bool,
}

impl FunctionSchema {
    /// `aten::add.Tensor`, or `aten::relu` for the default overload.
    pub fn qualified_name(&self) -> String {
        if self.overload.is_empty() {
            self.name.clone()
        } else {
            format!("{}.{}", self.name, self.overload)
        }
    }
    /// Whether any argument is mutated in place.
    pub fn is_mutable(&self) -> bool {
        self.arguments.iter().any(|a| a.is_write)
    }

    /// Whether `self` and `other` declare the same operator overload with the same arguments
    /// (names, types, defaults, keyword-only marks, alias annotations) and return types:
    /// spelling and spacing of the schema text aside.
    pub fn same_signature(&self, other: &FunctionSchema) -> bool {
        fn same_args(a: &[Argument], b: &[Argument], with_names: bool) -> bool {
            a.len() == b.len()
                && a.iter().zip(b).all(|(x, y)| {
                    (!with_names || x.name == y.name)
                        && x.ty == y.ty
                        && x.fixed_len == y.fixed_len
                        && x.kwarg_only == y.kwarg_only
                        && x.is_write == y.is_write
                        && x.alias == y.alias
                        // defaults are plain values (numbers, lists, strings): their debug text
                        // is their identity
                        && format!("{:?}", x.default) == format!("{:?}", y.default)
                })
        }
        self.name == other.name
            && self.overload == other.overload
            && self.is_vararg == other.is_vararg
            && self.is_varret == other.is_varret
            && same_args(&self.arguments, &other.arguments, true)
            && same_args(&self.returns, &other.returns, false)
    }
}

/// A schema string that could not be parsed.
#[derive(Debug, thiserror::Error)]
#[error("bad schema `{schema}` at byte {pos}: {message}")]
pub struct SchemaError {
    pub schema: String,
    pub pos: usize,
    pub message: String,
}

/// Parse one schema string.
pub fn parse_schema(text: &str) -> Result<FunctionSchema, SchemaError> {
    let mut p = SchemaParser {
        s: text.as_bytes(),
        text,
        i: 0,
    };
    p.schema()
}

struct SchemaParser<'a> {
    s: &'a [u8],
    text: &'a str,
    i: usize,
}

impl SchemaParser<'_> {
    fn err<T>(&self, message: impl Into<String>) -> Result<T, SchemaError> {
        Err(SchemaError {
            schema: self.text.to_string(),
            pos: self.i,
            message: message.into(),
        })
    }
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }
    fn skip_ws(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_whitespace()) {
            self.i += 1;
        }
    }
    fn eat(&mut self, tok: &str) -> bool {
        self.skip_ws();
        if self.s[self.i..].starts_with(tok.as_bytes()) {
            self.i += tok.len();
            true
        } else {
            false
        }
    }
    fn expect(&mut self, tok: &str) -> Result<(), SchemaError> {
        if self.eat(tok) {
            Ok(())
        } else {
            self.err(format!("expected `{tok}`"))
        }
    }
    /// An identifier, possibly dotted (`__torch__.torch.classes.x.Y`).
    fn ident(&mut self) -> Result<String, SchemaError> {
        self.skip_ws();
        let start = self.i;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'.')
        {
            self.i += 1;
        }
        if start == self.i {
            return self.err("expected an identifier");
        }
        Ok(self.text[start..self.i].to_string())
    }

    fn schema(&mut self) -> Result<FunctionSchema, SchemaError> {
        let ns = self.ident()?;
        self.expect("::")?;
        let full = self.ident()?;
        let (base, overload) = match full.split_once('.') {
            Some((b, o)) => (b.to_string(), o.to_string()),
            None => (full, String::new()),
        };
        self.expect("(")?;
        let mut arguments = Vec::new();
        let mut kwarg_only = false;
        let mut is_vararg = false;
        if !self.eat(")") {
            loop {
                if self.eat("*") {
                    kwarg_only = true;
                } else if self.eat("...") {
                    is_vararg = true;
                } else {
                    let mut a = self.argument(true)?;
                    a.kwarg_only = kwarg_only;
                    arguments.push(a);
                }
                if self.eat(")") {
                    break;
                }
                self.expect(",")?;
            }
        }
        self.expect("->")?;
        let mut returns = Vec::new();
        let mut is_varret = false;
        self.skip_ws();
        if self.eat("...") {
            is_varret = true;
        } else if self.peek() == Some(b'(') && !self.tuple_type_ahead() {
            self.expect("(")?;
            if !self.eat(")") {
                loop {
                    if self.eat("...") {
                        is_varret = true;
                    } else {
                        returns.push(self.argument(false)?);
                    }
                    if self.eat(")") {
                        break;
                    }
                    self.expect(",")?;
                }
            }
        } else {
            returns.push(self.argument(false)?);
        }
        self.skip_ws();
        if self.i != self.s.len() {
            return self.err("trailing text");
        }
        Ok(FunctionSchema {
            name: format!("{ns}::{base}"),
            overload,
            arguments,
            returns,
            is_vararg,
            is_varret,
        })
    }

    /// Whether a `(` after `->` starts a tuple *type* used as a single return followed by a
    /// list suffix (`(str, t)[]`), rather than a list of returns.
    fn tuple_type_ahead(&self) -> bool {
        let mut depth = 0usize;
        for (k, &c) in self.s[self.i..].iter().enumerate() {
            match c {
                b'(' => depth += 1,
                b')' => {
                    depth -= 1;
                    if depth == 0 {
                        return self.s.get(self.i + k + 1) == Some(&b'[');
                    }
                }
                _ => {}
            }
        }
        false
    }

    fn argument(&mut self, is_input: bool) -> Result<Argument, SchemaError> {
        let (ty, fixed_len, is_write, alias) = self.type_()?;
        self.skip_ws();
        let mut name = String::new();
        if self
            .peek()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
        {
            name = self.ident()?;
        }
        let mut default = None;
        if is_input && self.eat("=") {
            default = Some(self.default_value(&ty, fixed_len)?);
        }
        Ok(Argument {
            name,
            ty,
            fixed_len,
            default,
            kwarg_only: false,
            is_write,
            alias,
        })
    }

    /// A type with its suffixes: `Tensor(a!)[]`, `int[2]?`, `Dict(str, t)(a!)`, `(str, t)[]`.
    #[allow(clippy::type_complexity)]
    fn type_(&mut self) -> Result<(Type, Option<usize>, bool, Option<String>), SchemaError> {
        self.skip_ws();
        let mut ty = if self.peek() == Some(b'(') {
            self.i += 1;
            let mut elems = Vec::new();
            if !self.eat(")") {
                loop {
                    elems.push(self.type_()?.0);
                    if self.eat(")") {
                        break;
                    }
                    self.expect(",")?;
                }
            }
            Type::Tuple(elems)
        } else {
            let name = self.ident()?;
            match name.as_str() {
                "Dict" => {
                    self.expect("(")?;
                    let k = self.type_()?.0;
                    self.expect(",")?;
                    let v = self.type_()?.0;
                    self.expect(")")?;
                    Type::dict(k, v)
                }
                "Future" | "RRef" | "Await" => {
                    self.expect("(")?;
                    let t = Box::new(self.type_()?.0);
                    self.expect(")")?;
                    match name.as_str() {
                        "Future" => Type::Future(t),
                        "RRef" => Type::RRef(t),
                        _ => Type::Await(t),
                    }
                }
                other => base_type(other),
            }
        };
        let mut fixed_len = None;
        let mut is_write = false;
        let mut alias = None;
        loop {
            // suffixes bind tightly: no whitespace before them
            match self.peek() {
                Some(b'(') => {
                    let start = self.i + 1;
                    while self.peek().is_some_and(|c| c != b')') {
                        self.i += 1;
                    }
                    let text = &self.text[start..self.i];
                    if text.contains('!') {
                        is_write = true;
                    }
                    let set: String = text
                        .chars()
                        .filter(|c| *c != '!' && !c.is_whitespace())
                        .collect();
                    if !set.is_empty() {
                        alias = Some(set);
                    }
                    self.expect(")")?;
                }
                Some(b'[') => {
                    self.i += 1;
                    let start = self.i;
                    while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                        self.i += 1;
                    }
                    if start != self.i {
                        fixed_len = self.text[start..self.i].parse().ok();
                    }
                    self.expect("]")?;
                    ty = Type::list(ty);
                }
                Some(b'?') => {
                    self.i += 1;
                    ty = Type::optional(ty);
                }
                _ => break,
            }
        }
        Ok((ty, fixed_len, is_write, alias))
    }

    fn default_value(
        &mut self,
        ty: &Type,
        fixed_len: Option<usize>,
    ) -> Result<IValue, SchemaError> {
        self.skip_ws();
        let elem = match ty {
            Type::List(e) => Some((**e).clone()),
            Type::Optional(inner) => match &**inner {
                Type::List(e) => Some((**e).clone()),
                _ => None,
            },
            _ => None,
        };
        if self.peek() == Some(b'[') {
            self.i += 1;
            let elem = elem.unwrap_or(Type::Any);
            let mut items = Vec::new();
            if !self.eat("]") {
                loop {
                    items.push(self.scalar_value(&elem)?);
                    if self.eat("]") {
                        break;
                    }
                    self.expect(",")?;
                }
            }
            return Ok(IValue::List(List::new(elem, items)));
        }
        let v = self.scalar_value(elem.as_ref().unwrap_or(ty))?;
        // `int[2] padding=0` means `[0, 0]`
        match (elem, fixed_len, &v) {
            (Some(e), Some(n), v) if !v.is_none() => {
                Ok(IValue::List(List::new(e, vec![v.clone(); n])))
            }
            _ => Ok(v),
        }
    }

    fn scalar_value(&mut self, ty: &Type) -> Result<IValue, SchemaError> {
        self.skip_ws();
        if self.peek() == Some(b'"') || self.peek() == Some(b'\'') {
            return self.string_literal();
        }
        let start = self.i;
        while self
            .peek()
            .is_some_and(|c| !matches!(c, b',' | b')' | b']') && !c.is_ascii_whitespace())
        {
            self.i += 1;
        }
        let tok = &self.text[start..self.i];
        let wants_float =
            matches!(ty, Type::Float) || matches!(ty, Type::Optional(t) if **t == Type::Float);
        Ok(match tok {
            "None" => IValue::None,
            "True" => IValue::Bool(true),
            "False" => IValue::Bool(false),
            "inf" => IValue::Double(f64::INFINITY),
            "-inf" => IValue::Double(f64::NEG_INFINITY),
            "nan" => IValue::Double(f64::NAN),
            // memory formats, layouts and reductions spelled by name
            "contiguous_format" => IValue::Int(0),
            "preserve_format" => IValue::Int(1),
            "channels_last" => IValue::Int(2),
            "strided" => IValue::Int(0),
            "Mean" => IValue::Int(1),
            "Sum" => IValue::Int(2),
            _ => {
                let is_float_text = tok.contains(['.', 'e', 'E']) && !tok.starts_with("0x");
                if !is_float_text && !wants_float {
                    match tok.parse::<i64>() {
                        Ok(i) => IValue::Int(i),
                        Err(_) => return self.err(format!("bad default `{tok}`")),
                    }
                } else {
                    match tok.parse::<f64>() {
                        Ok(f) => IValue::Double(f),
                        Err(_) => return self.err(format!("bad default `{tok}`")),
                    }
                }
            }
        })
    }

    fn string_literal(&mut self) -> Result<IValue, SchemaError> {
        let quote = self.peek();
        self.i += 1;
        let mut out = String::new();
        loop {
            let Some(c) = self.peek() else {
                return self.err("unterminated string");
            };
            self.i += 1;
            if Some(c) == quote {
                break;
            }
            if c == b'\\' {
                let Some(e) = self.peek() else {
                    return self.err("unterminated escape");
                };
                self.i += 1;
                out.push(match e {
                    b'n' => '\n',
                    b't' => '\t',
                    b'r' => '\r',
                    b'f' => '\x0c',
                    b'v' => '\x0b',
                    b'0' => '\0',
                    other => other as char,
                });
                continue;
            }
            // copy a whole UTF-8 sequence
            let start = self.i - 1;
            let mut end = self.i;
            while end < self.s.len() && !self.text.is_char_boundary(end) {
                end += 1;
            }
            out.push_str(&self.text[start..end]);
            self.i = end;
        }
        Ok(IValue::str(out))
    }
}

/// The type named by a schema base-type identifier.
fn base_type(name: &str) -> Type {
    match name {
        "Tensor" => Type::Tensor,
        // TorchScript represents these enums and symbolic ints as plain ints
        "int" | "SymInt" | "int64_t" | "ScalarType" | "Layout" | "MemoryFormat" | "Dimname"
        | "QScheme" | "SymBool" => {
            if name == "SymBool" {
                Type::Bool
            } else {
                Type::Int
            }
        }
        "float" | "SymFloat" => Type::Float,
        "bool" => Type::Bool,
        "str" => Type::Str,
        "complex" => Type::Complex,
        "Scalar" | "number" => Type::Number,
        "Device" => Type::Device,
        "Generator" => Type::Generator,
        "Stream" => Type::Stream,
        "Storage" => Type::Storage,
        "Any" | "PyObject" => Type::Any,
        "NoneType" => Type::NoneType,
        "Capsule" => Type::Capsule,
        "AnyClassType" => Type::AnyClass,
        "AnyEnumType" => Type::AnyEnum,
        "AnyListType" => Type::AnyList,
        "AnyTupleType" => Type::AnyTuple,
        _ if name.contains('.') => Type::Class(name.into()),
        // single lower-case identifiers (`t`, `t1`, `tVal`) are type variables
        _ => Type::Var(name.into()),
    }
}

/// Every known operator schema, by qualified name (`aten::add`), overloads in registration order.
///
/// PyTorch's table holds thousands of schemas and a program uses a few dozen, so the global
/// table keeps each line as text and parses an operator's overloads the first time that
/// operator is looked up: the first call of a model no longer pays for parsing all of them.
///
/// Besides PyTorch's table, the global registry holds the schemas of custom operators defined at
/// run time ([`crate::ops::custom::register_op`]), each operator's after PyTorch's overloads of
/// the same name, so overload resolution tries them in the order PyTorch would have registered
/// them.
#[derive(Default)]
pub struct SchemaRegistry {
    by_name: HashMap<String, SchemaFamily>,
    /// Schemas defined at run time, by operator name, in definition order. Behind a lock
    /// because the table itself is a process-wide static shared by every compiling thread.
    defined: RwLock<HashMap<String, Vec<Arc<FunctionSchema>>>>,
}

/// The overloads of one operator name: lines not parsed yet, parsed on first use.
#[derive(Default)]
struct SchemaFamily {
    /// `(overload name, schema line)` of the global table, in file order.
    unparsed: Vec<(&'static str, &'static str)>,
    parsed: OnceLock<Vec<Arc<FunctionSchema>>>,
}

impl SchemaFamily {
    fn schemas(&self) -> &Vec<Arc<FunctionSchema>> {
        // The file is generated by PyTorch; a line we cannot parse is skipped rather than
        // failing every compilation (its operator then reports as unknown when used).
        self.parsed.get_or_init(|| {
            self.unparsed
                .iter()
                .filter_map(|(_, line)| parse_schema(line).ok().map(Arc::new))
                .collect()
        })
    }
}

static ALL_SCHEMAS: &str = include_str!("../../fixtures/schemas.txt");
/// Operators PyTorch registers only in builds with XNNPACK, which the oracle's build lacks
/// (`prepacked::*`, from aten/src/ATen/native/xnnpack/RegisterOpContextClass.cpp): mobile
/// archives call them.
static XNNPACK_SCHEMAS: &str = include_str!("../../fixtures/schemas_xnnpack.txt");

/// `aten::add.Tensor` -> (`aten::add`, `Tensor`); `aten::relu` -> (`aten::relu`, ``).
fn split_qualified(qualified: &str) -> Option<(String, &str)> {
    let (ns, rest) = qualified.split_once("::")?;
    let (base, overload) = rest.split_once('.').unwrap_or((rest, ""));
    Some((format!("{ns}::{base}"), overload))
}

/// `aten::add.Tensor(Tensor self, ...) -> Tensor` -> (`aten::add`, `Tensor`), without parsing.
fn schema_line_name(line: &str) -> Option<(&str, &str)> {
    let qualified = &line[..line.find('(')?];
    let (ns, rest) = qualified.split_once("::")?;
    let base_len = ns.len() + 2 + rest.find('.').unwrap_or(rest.len());
    let overload = qualified.get(base_len + 1..).unwrap_or("");
    Some((&qualified[..base_len], overload))
}

impl SchemaRegistry {
    /// Parse a newline-separated list of schemas; unparsable lines are reported.
    pub fn from_text(text: &str) -> Result<SchemaRegistry, SchemaError> {
        let mut reg = SchemaRegistry::default();
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            reg.add(parse_schema(line)?);
        }
        Ok(reg)
    }

    /// The registry of PyTorch's operators; each operator's schemas are parsed on first use.
    pub fn global() -> &'static SchemaRegistry {
        static REG: OnceLock<SchemaRegistry> = OnceLock::new();
        REG.get_or_init(|| {
            let mut reg = SchemaRegistry::default();
            let lines = ALL_SCHEMAS.lines().chain(XNNPACK_SCHEMAS.lines());
            for line in lines.map(str::trim).filter(|l| !l.is_empty()) {
                if let Some((name, overload)) = schema_line_name(line) {
                    reg.by_name
                        .entry(name.to_string())
                        .or_default()
                        .unparsed
                        .push((overload, line));
                }
            }
            reg
        })
    }

    pub fn add(&mut self, schema: FunctionSchema) {
        let family = self.by_name.entry(schema.name.clone()).or_default();
        family.schemas();
        if let Some(parsed) = family.parsed.get_mut() {
            parsed.push(Arc::new(schema));
        }
    }

    /// Every schema of PyTorch's table (operators defined at run time are not included),
    /// grouped by operator name (sorted) in registration order.
    pub fn all(&self) -> Vec<&Arc<FunctionSchema>> {
        let mut names: Vec<&String> = self.by_name.keys().collect();
        names.sort();
        names
            .into_iter()
            .flat_map(|n| self.by_name[n].schemas().iter())
            .collect()
    }

    /// All overloads of `name` (`aten::add`): PyTorch's, then those defined at run time.
    pub fn overloads(&self, name: &str) -> Cow<'_, [Arc<FunctionSchema>]> {
        let known: &[Arc<FunctionSchema>] = self
            .by_name
            .get(name)
            .map(|f| f.schemas().as_slice())
            .unwrap_or(&[]);
        match self.defined.read().get(name) {
            Some(defined) if !defined.is_empty() => {
                Cow::Owned(known.iter().chain(defined).cloned().collect())
            }
            _ => Cow::Borrowed(known),
        }
    }

    /// The schema of one exact overload (`aten::add.Tensor`, or `aten::relu`).
    pub fn find(&self, qualified: &str) -> Option<Arc<FunctionSchema>> {
        let (name, overload) = split_qualified(qualified)?;
        self.overloads(&name)
            .iter()
            .find(|s| s.overload == overload)
            .cloned()
    }

    /// Whether the exact overload `qualified` is defined (by PyTorch, or at run time), without
    /// parsing its schema: registration asks this for every member of generic kernel families.
    pub fn contains(&self, qualified: &str) -> bool {
        let Some((name, overload)) = split_qualified(qualified) else {
            return false;
        };
        let known = self
            .by_name
            .get(&name)
            .is_some_and(|family| match family.parsed.get() {
                Some(parsed) => parsed.iter().any(|s| s.overload == overload),
                None => family.unparsed.iter().any(|(o, _)| *o == overload),
            });
        known
            || self
                .defined
                .read()
                .get(&name)
                .is_some_and(|d| d.iter().any(|s| s.overload == overload))
    }

    /// The line of PyTorch's table declaring the exact overload `qualified`, as PyTorch wrote it.
    pub fn schema_line(&self, qualified: &str) -> Option<&'static str> {
        let (name, overload) = split_qualified(qualified)?;
        self.by_name
            .get(&name)?
            .unparsed
            .iter()
            .find(|(o, _)| *o == overload)
            .map(|(_, line)| *line)
    }

    /// Define `schema` at run time, after every overload already known; the caller checked
    /// that its exact overload is not defined yet (`ops::custom` does, under its lock).
    pub(crate) fn define(&self, schema: Arc<FunctionSchema>) {
        self.defined
            .write()
            .entry(schema.name.clone())
            .or_default()
            .push(schema);
    }

    /// How many schemas PyTorch's table holds (operators defined at run time not counted).
    pub fn len(&self) -> usize {
        self.by_name.values().map(|f| f.schemas().len()).sum()
    }
    /// Whether PyTorch's table is empty.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

/// Bindings of type variables (`t` -> `int`) made while matching one schema.
pub type TypeEnv = HashMap<Arc<str>, Type>;

/// `sub` may be used where `sup` is expected (`c10::Type::isSubtypeOf`).
pub fn is_subtype(sub: &Type, sup: &Type) -> bool {
    if sub == sup {
        return true;
    }
    match (sub, sup) {
        (_, Type::Any) => true,
        (Type::Int | Type::Float | Type::Complex, Type::Number) => true,
        (Type::NoneType, Type::Optional(_)) => true,
        (Type::Optional(a), Type::Optional(b)) => is_subtype(a, b),
        (_, Type::Optional(b)) => is_subtype(sub, b),
        (Type::List(_), Type::AnyList) => true,
        (Type::Tuple(_), Type::AnyTuple) => true,
        // enums are classes here; the class kind is not part of the type
        (Type::Class(_), Type::AnyClass | Type::AnyEnum) => true,
        (Type::Tuple(a), Type::Tuple(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| is_subtype(x, y))
        }
        (Type::Union(members), _) => members.iter().all(|m| is_subtype(m, sup)),
        (_, Type::Union(members)) => members.iter().any(|m| is_subtype(sub, m)),
        (Type::Future(a), Type::Future(b)) => is_subtype(a, b),
        _ => false,
    }
}

/// The least common supertype of two types, as `c10::unifyTypes` (used by `if` branches and
/// loop-carried values); `None` when they do not unify.
pub fn unify_types(a: &Type, b: &Type) -> Option<Type> {
    if is_subtype(a, b) {
        return Some(b.clone());
    }
    if is_subtype(b, a) {
        return Some(a.clone());
    }
    match (a, b) {
        (Type::NoneType, t) | (t, Type::NoneType) => Some(Type::optional(t.clone())),
        (Type::Optional(x), t) | (t, Type::Optional(x)) => unify_types(x, t).map(|u| match u {
            Type::Optional(_) => u,
            u => Type::optional(u),
        }),
        (Type::Tuple(x), Type::Tuple(y)) if x.len() == y.len() => Some(Type::Tuple(
            x.iter()
                .zip(y)
                .map(|(p, q)| unify_types(p, q))
                .collect::<Option<Vec<_>>>()?,
        )),
        _ => None,
    }
}

/// `c10::unifyTypes(a, b, /*default_to_union=*/true)`: the unified type, or else the union
/// of both (PyTorch's SSA conversion types an `if` output this way, so branches assigning
/// members of a declared `Union` merge into that union).
pub fn unify_types_to_union(a: &Type, b: &Type) -> Type {
    unify_types(a, b).unwrap_or_else(|| union_of(&[a.clone(), b.clone()]))
}

/// `c10::UnionType::create`: the members flattened, those that unify with an earlier one
/// coalesced (`filterDuplicateSubtypes`, never folding `None` into an `Optional`) and sorted
/// by type kind, then spelling (`sortUnion`); a single remaining member is the type itself.
pub fn union_of(types: &[Type]) -> Type {
    fn flatten(t: &Type, out: &mut Vec<Type>) {
        match t {
            Type::Union(ts) => ts.iter().for_each(|m| flatten(m, out)),
            Type::Optional(inner) => {
                flatten(inner, out);
                out.push(Type::NoneType);
            }
            t => out.push(t.clone()),
        }
    }
    let mut flat = Vec::new();
    types.iter().for_each(|t| flatten(t, &mut flat));
    let mut members: Vec<Type> = Vec::new();
    for t in flat {
        let is_none = t == Type::NoneType;
        let merged = members.iter_mut().find_map(|m| {
            if (*m == Type::NoneType) != is_none {
                return None;
            }
            unify_types(m, &t).map(|u| *m = u)
        });
        if merged.is_none() {
            members.push(t);
        }
    }
    members.sort_by(|a, b| {
        type_kind_rank(a)
            .cmp(&type_kind_rank(b))
            .then_with(|| a.to_string().cmp(&b.to_string()))
    });
    match members.len() {
        1 => members.remove(0),
        _ => Type::Union(members),
    }
}

/// The position of a type's kind in c10's `C10_FORALL_TYPES` (the order unions sort by).
fn type_kind_rank(t: &Type) -> u8 {
    match t {
        Type::Any => 0,
        Type::AnyEnum => 2,
        Type::Tensor => 3,
        Type::Storage => 4,
        Type::Tuple(_) => 5,
        Type::List(_) => 6,
        Type::Dict(..) => 7,
        Type::Number => 8,
        Type::Float => 9,
        Type::Complex => 10,
        Type::Future(_) => 11,
        Type::Await(_) => 12,
        Type::RRef(_) => 13,
        Type::Int => 14,
        Type::NoneType => 15,
        Type::Str => 16,
        Type::Generator => 17,
        Type::Bool => 19,
        Type::Optional(_) => 20,
        Type::Var(_) => 21,
        Type::Device => 22,
        Type::Stream => 23,
        Type::Function(_) => 24,
        // enums, interfaces and classes are all `Class` here
        Type::Class(_) => 25,
        Type::Capsule => 27,
        Type::QScheme => 29,
        Type::ScalarType => 30,
        Type::Layout => 31,
        Type::MemoryFormat => 32,
        Type::AnyList => 33,
        Type::AnyTuple => 34,
        Type::AnyClass => 35,
        Type::Union(_) => 39,
    }
}

/// Bind the type variables of `formal` against `actual`; `false` when they conflict.
pub fn match_type_vars(formal: &Type, actual: &Type, env: &mut TypeEnv) -> bool {
    match formal {
        Type::Var(name) => match env.get(name) {
            Some(bound) => match unify_types(bound, actual) {
                Some(u) => {
                    env.insert(name.clone(), u);
                    true
                }
                None => false,
            },
            None => {
                env.insert(name.clone(), actual.clone());
                true
            }
        },
        Type::List(f) => match actual {
            Type::List(a) => match_type_vars(f, a, env),
            _ => !has_type_vars(formal),
        },
        Type::Optional(f) => match actual {
            Type::Optional(a) => match_type_vars(f, a, env),
            // None matches Optional[t] without binding t
            Type::NoneType => true,
            a => match_type_vars(f, a, env),
        },
        Type::Tuple(fs) => match actual {
            Type::Tuple(xs) if xs.len() == fs.len() => {
                fs.iter().zip(xs).all(|(f, a)| match_type_vars(f, a, env))
            }
            _ => !has_type_vars(formal),
        },
        Type::Dict(fk, fv) => match actual {
            Type::Dict(k, v) => match_type_vars(fk, k, env) && match_type_vars(fv, v, env),
            _ => !has_type_vars(formal),
        },
        Type::Future(f) | Type::RRef(f) | Type::Await(f) => match actual {
            Type::Future(a) | Type::RRef(a) | Type::Await(a) => match_type_vars(f, a, env),
            _ => !has_type_vars(formal),
        },
        _ => true,
    }
}

/// `ty` with bound type variables substituted; `None` if a variable is unbound.
pub fn eval_type_vars(ty: &Type, env: &TypeEnv) -> Option<Type> {
    Some(match ty {
        Type::Var(n) => env.get(n)?.clone(),
        Type::List(t) => Type::list(eval_type_vars(t, env)?),
        Type::Optional(t) => Type::optional(eval_type_vars(t, env)?),
        Type::Future(t) => Type::Future(Box::new(eval_type_vars(t, env)?)),
        Type::RRef(t) => Type::RRef(Box::new(eval_type_vars(t, env)?)),
        Type::Await(t) => Type::Await(Box::new(eval_type_vars(t, env)?)),
        Type::Dict(k, v) => Type::dict(eval_type_vars(k, env)?, eval_type_vars(v, env)?),
        Type::Tuple(ts) => Type::Tuple(
            ts.iter()
                .map(|t| eval_type_vars(t, env))
                .collect::<Option<Vec<_>>>()?,
        ),
        other => other.clone(),
    })
}

pub fn has_type_vars(ty: &Type) -> bool {
    match ty {
        Type::Var(_) => true,
        Type::List(t) | Type::Optional(t) | Type::Future(t) | Type::RRef(t) | Type::Await(t) => {
            has_type_vars(t)
        }
        Type::Dict(k, v) => has_type_vars(k) || has_type_vars(v),
        Type::Tuple(ts) | Type::Union(ts) => ts.iter().any(has_type_vars),
        _ => false,
    }
}
