//! Class declarations of a program: what the module tree needs to know about each class
//! (parameters, buffers, typed attributes, constants, methods, enum members, NamedTuple fields).
//!
//! Filled by a declaration-level scan of the code records (class headers and the declaration
//! lines PyTorch's printer emits at the top of each class body). Method bodies are not looked
//! at: compiling them is the frontend's and the IR's job.
//!
//! Why a line scanner and not the frontend's AST (`crate::frontend::parse_file`): loading needs
//! only these declarations, and parsing every code file costs more than the whole rest of a load
//! (measured in a debug build, session 3: resnet18 load 25 ms vs parsing its 33 code files 41 ms;
//! mobilenet_v3_small 65 ms vs 133 ms; hf_t5_tiny 35 ms vs 118 ms). The AST is built lazily, on
//! the first run ([`super::Module::program`]), so loading to read, convert or save a module does
//! not pay for it. tests/suite/load_fixtures.rs checks that this scan and the AST agree on every
//! fixture's class declarations.

pub use crate::frontend::ast::ClassKind;
use crate::values::types::{parse_annotation, Type};
use crate::values::IValue;
use indexmap::IndexMap;
use std::sync::Arc;

/// A method's name and its signature as printed (`(self, x: Tensor) -> Tensor`).
#[derive(Clone, Debug)]
pub struct MethodDecl {
    /// The method's name.
    pub name: String,
    /// Its signature as printed.
    pub signature: String,
}

/// The declarations of one class.
#[derive(Clone, Debug)]
pub struct ClassDecl {
    /// Qualified name, e.g. `__torch__.torch.nn.modules.linear.Linear`.
    pub name: Arc<str>,
    /// What kind of class it is.
    pub kind: ClassKind,
    /// Attribute names that are parameters, in declaration order.
    pub parameters: Vec<String>,
    /// Attribute names that are buffers, in declaration order.
    pub buffers: Vec<String>,
    /// Methods registered as forward hooks / pre-hooks (`__forward_hooks__`), in call order.
    pub forward_hooks: Vec<String>,
    /// Methods registered as forward pre-hooks, in call order.
    pub forward_pre_hooks: Vec<String>,
    /// Typed attributes in declaration order (NamedTuple fields for NamedTuples).
    pub attributes: Vec<(String, Type)>,
    /// `Final` constants: name, type, value text.
    pub constants: Vec<(String, String, String)>,
    /// The methods the class defines, in source order.
    pub methods: Vec<MethodDecl>,
    /// Enum members: name and value.
    pub enum_members: Vec<(Arc<str>, IValue)>,
    /// The code record that declares the class (`code/__torch__/foo.py`).
    pub file: String,
}

impl ClassDecl {
    /// The declared type of attribute `name`.
    pub fn attribute_type(&self, name: &str) -> Option<&Type> {
        self.attributes
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t)
    }
    /// Whether `name` is a parameter.
    pub fn is_parameter(&self, name: &str) -> bool {
        self.parameters.iter().any(|p| p == name)
    }
    /// Whether `name` is a buffer.
    pub fn is_buffer(&self, name: &str) -> bool {
        self.buffers.iter().any(|p| p == name)
    }
}

/// Every class declared in a program, by qualified name.
#[derive(Clone, Debug, Default)]
pub struct ClassTable {
    /// Every class by qualified name.
    pub classes: IndexMap<Arc<str>, ClassDecl>,
}

impl ClassTable {
    /// The class with qualified name `name`.
    pub fn get(&self, name: &str) -> Option<&ClassDecl> {
        self.classes.get(name)
    }

    /// Whether `name` is a module class.
    pub fn is_module(&self, name: &str) -> bool {
        self.get(name).is_some_and(|c| c.kind == ClassKind::Module)
    }

    /// Scan code records (`code/__torch__/a/b.py` -> module `__torch__.a.b`).
    pub fn from_code<'a>(
        files: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<ClassTable, String> {
        let mut table = ClassTable::default();
        for (path, text) in files {
            let Some(module) = code_module_name(path) else {
                continue;
            };
            scan_file(&mut table, &module, path, text)?;
        }
        Ok(table)
    }
}

/// `code/__torch__/torch/nn/modules/linear.py` -> `__torch__.torch.nn.modules.linear`.
pub fn code_module_name(path: &str) -> Option<String> {
    let rel = path.strip_prefix("code/")?.strip_suffix(".py")?;
    Some(rel.replace('/', "."))
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

/// The names in `["a", "b", ]`.
fn string_list(text: &str) -> Option<Vec<String>> {
    let inner = text.trim().strip_prefix('[')?.strip_suffix(']')?;
    Some(
        inner
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| s.trim_matches('"').trim_matches('\'').to_string())
            .collect(),
    )
}

/// A literal as printed for enum values and constants.
pub fn parse_literal(text: &str) -> Option<IValue> {
    let t = text.trim();
    if let Some(s) = t
        .strip_prefix('"')
        .and_then(|r| r.strip_suffix('"'))
        .or_else(|| t.strip_prefix('\'').and_then(|r| r.strip_suffix('\'')))
    {
        return Some(IValue::str(unescape(s)));
    }
    match t {
        "True" => return Some(IValue::Bool(true)),
        "False" => return Some(IValue::Bool(false)),
        "None" => return Some(IValue::None),
        _ => {}
    }
    if let Ok(i) = t.parse::<i64>() {
        return Some(IValue::Int(i));
    }
    t.parse::<f64>().ok().map(IValue::Double)
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some('r') => out.push('\r'),
                Some(o) => out.push(o),
                None => {}
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn scan_file(table: &mut ClassTable, module: &str, path: &str, text: &str) -> Result<(), String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut current: Option<ClassDecl> = None;
    let mut i = 0;
    while let Some(&line) = lines.get(i) {
        i += 1;
        if line.trim().is_empty() {
            continue;
        }
        let indent = indent_of(line);
        let body = line.trim();
        if indent == 0 {
            if let Some(c) = current.take() {
                table.classes.insert(c.name.clone(), c);
            }
            if let Some(rest) = body.strip_prefix("class ") {
                let rest = rest.trim_end_matches(':');
                let (name, base) = match rest.split_once('(') {
                    Some((n, b)) => (n.trim(), b.trim_end_matches(')').trim()),
                    None => (rest.trim(), ""),
                };
                let kind = ClassKind::from_base(base).unwrap_or(ClassKind::Class);
                current = Some(ClassDecl {
                    name: Arc::from(format!("{module}.{name}")),
                    kind,
                    parameters: Vec::new(),
                    buffers: Vec::new(),
                    forward_hooks: Vec::new(),
                    forward_pre_hooks: Vec::new(),
                    attributes: Vec::new(),
                    constants: Vec::new(),
                    methods: Vec::new(),
                    enum_members: Vec::new(),
                    file: path.to_string(),
                });
            }
            continue;
        }
        let Some(class) = current.as_mut() else {
            continue;
        };
        if indent != 2 {
            continue;
        }
        if let Some(rest) = body.strip_prefix("def ") {
            // The signature may span several lines; it ends at the line ending with ':'.
            let mut sig = rest.to_string();
            while !sig.trim_end().ends_with(':') {
                match lines.get(i) {
                    Some(next) => {
                        sig.push(' ');
                        sig.push_str(next.trim());
                        i += 1;
                    }
                    None => break,
                }
            }
            let sig = sig.trim_end().trim_end_matches(':').to_string();
            let (name, signature) = match sig.split_once('(') {
                Some((n, s)) => (n.trim().to_string(), format!("({s}")),
                None => (sig.clone(), String::new()),
            };
            class.methods.push(MethodDecl { name, signature });
            continue;
        }
        if let Some(rest) = body.strip_prefix("__parameters__ = ") {
            class.parameters = string_list(rest)
                .ok_or_else(|| format!("{path}: cannot read __parameters__ of {}", class.name))?;
            continue;
        }
        if let Some(rest) = body.strip_prefix("__buffers__ = ") {
            class.buffers = string_list(rest)
                .ok_or_else(|| format!("{path}: cannot read __buffers__ of {}", class.name))?;
            continue;
        }
        if let Some(rest) = body.strip_prefix("__forward_hooks__ = ") {
            class.forward_hooks = string_list(rest).ok_or_else(|| {
                format!("{path}: cannot read __forward_hooks__ of {}", class.name)
            })?;
            continue;
        }
        if let Some(rest) = body.strip_prefix("__forward_pre_hooks__ = ") {
            class.forward_pre_hooks = string_list(rest).ok_or_else(|| {
                format!(
                    "{path}: cannot read __forward_pre_hooks__ of {}",
                    class.name
                )
            })?;
            continue;
        }
        // `__annotations__["0"] = T` declares an attribute whose name is not an identifier
        // (a Sequential's children); `__annotations__ = []` declares nothing.
        if let Some(rest) = body.strip_prefix("__annotations__[") {
            let parsed = rest.split_once("] = ").and_then(|(key, ty)| {
                let name = key.trim().strip_prefix('"')?.strip_suffix('"')?;
                Some((name.to_string(), parse_annotation(ty.trim())?))
            });
            let (name, ty) = parsed.ok_or_else(|| {
                format!(
                    "{path}: cannot read the annotation '{body}' of {}",
                    class.name
                )
            })?;
            class.attributes.push((name, ty));
            continue;
        }
        if body.starts_with('@') || body.starts_with("__annotations__") {
            continue;
        }
        // `name : Type` or `name : Final[T] = value`
        if let Some((name, rest)) = body.split_once(" : ") {
            let name = name.trim().to_string();
            if let Some((ty, value)) = rest.split_once(" = ") {
                class
                    .constants
                    .push((name, ty.trim().to_string(), value.trim().to_string()));
            } else {
                let ty = parse_annotation(rest.trim()).ok_or_else(|| {
                    format!(
                        "{path}: cannot read the type '{}' of {}.{name}",
                        rest.trim(),
                        class.name
                    )
                })?;
                class.attributes.push((name, ty));
            }
            continue;
        }
        if class.kind == ClassKind::Enum {
            if let Some((name, value)) = body.split_once(" = ") {
                let v = parse_literal(value).ok_or_else(|| {
                    format!(
                        "{path}: cannot read the value of enum member {}.{name}",
                        class.name
                    )
                })?;
                class.enum_members.push((Arc::from(name.trim()), v));
            }
        }
    }
    if let Some(c) = current.take() {
        table.classes.insert(c.name.clone(), c);
    }
    Ok(())
}
