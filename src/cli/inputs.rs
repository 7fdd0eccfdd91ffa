//! The inputs of `run`, `bench` and `compare`: `-i` files and literals, `--random` tensors, and
//! the cast of floating-point inputs to a half or bfloat16 model's dtype.
//!
//! An `-i` value is a file when it names one or ends in `.npy`, `.npz` or `.safetensors`
//! (`FILE.npz:NAME` picks one array); otherwise a literal: `3`, `-0.5`, `1e-3`, `true`, `none`,
//! `"text"` or `'text'` (with Python's backslash escapes), lists `[1,2]` and tuples `(3,4)`
//! (nested, `(3,)` for one item), and any other bare word as a string (`-i hello`). The arrays
//! of an npz or safetensors file whose names are parameters of the method are passed by name;
//! the others by position, in file order.

use super::error::{usage, CliResult};
use crate::runtime::Module;
use crate::tensor::DType;
use crate::values::ivalue::{List, Tuple};
use crate::values::types::Type;
use crate::values::IValue;
use crate::Error;
use indexmap::IndexMap;
use std::path::Path;

/// The input flags shared by `run`, `bench` and `compare`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct InputArgs {
    /// An input (repeatable, in argument order): a `.npy`, `.npz` (`FILE.npz:NAME` for one
    /// array) or `.safetensors` file, or a literal: `3`, `-0.5`, `true`, `none`, `"text"`,
    /// `[1,2]`, `(3,4)`, or a bare word as a string.
    #[arg(
        short = 'i',
        long = "input",
        value_name = "INPUT",
        // the value after -i is always an input: clap's negative-number test misses `-1e-3`
        allow_hyphen_values = true
    )]
    pub inputs: Vec<String>,
    /// A standard-normal tensor input after the `-i` ones (`1x3x224x224`, `2,8:float16`), as
    /// `torch.manual_seed(SEED); torch.randn(...)` with the --seed of the command (default 0).
    #[arg(long = "random", value_name = "SHAPE[:DTYPE]")]
    pub random: Vec<String>,
    /// Cast floating-point tensor inputs to the dtype of the model's floating-point parameters
    /// (done with a warning anyway when the model is float16 or bfloat16 and an input is not).
    #[arg(long = "cast-inputs")]
    pub cast_inputs: bool,
}

/// Inputs ready for a call: by position, then by parameter name.
#[derive(Debug, Default)]
pub struct Inputs {
    pub positional: Vec<IValue>,
    pub named: IndexMap<String, IValue>,
}

impl InputArgs {
    /// Read and parse every input for a call of `method` of `module`; `seed` seeds `--random`.
    pub fn resolve(&self, module: &Module, method: &str, seed: u64) -> CliResult<Inputs> {
        let mut inputs = Inputs::default();
        let parameter_names = method_parameter_names(module, method);
        for text in &self.inputs {
            match InputFile::classify(text) {
                Some(file) => file.read_into(&mut inputs, &parameter_names)?,
                None => inputs.positional.push(parse_literal(text)?),
            }
        }
        inputs.positional.extend(random_inputs(&self.random, seed)?);
        self.cast(module, &mut inputs)?;
        Ok(inputs)
    }

    /// Cast floating-point tensor inputs to the model's floating-point dtype: always with
    /// `--cast-inputs`, otherwise (with one warning) when the model is float16/bfloat16, since a
    /// model `tsrun convert --dtype float16` wrote cannot take the float32 inputs it had before.
    fn cast(&self, module: &Module, inputs: &mut Inputs) -> CliResult<()> {
        let Some(model_dtype) = model_float_dtype(module) else {
            return Ok(());
        };
        let half_model = matches!(model_dtype, DType::Float16 | DType::BFloat16);
        if !self.cast_inputs && !half_model {
            return Ok(());
        }
        let mut cast_from = Vec::new();
        for v in inputs
            .positional
            .iter_mut()
            .chain(inputs.named.values_mut())
        {
            if let IValue::Tensor(t) = v {
                if t.dtype().is_floating_point() && t.dtype() != model_dtype {
                    if !cast_from.contains(&t.dtype()) {
                        cast_from.push(t.dtype());
                    }
                    *t = t.to_dtype(model_dtype)?;
                }
            }
        }
        if !self.cast_inputs && !cast_from.is_empty() {
            let from: Vec<&str> = cast_from.iter().map(|d| d.name()).collect();
            super::log::warn(format_args!(
                "casting {} inputs to {}, the dtype of the model's parameters \
                 (--cast-inputs does this silently)",
                from.join(" and "),
                model_dtype.name()
            ));
        }
        Ok(())
    }
}

/// The tensors of `--random` specs: input `k` is `torch.manual_seed(seed + k); torch.randn(..)`,
/// its own stream, so adding one input does not change the others.
pub fn random_inputs(specs: &[String], seed: u64) -> CliResult<Vec<IValue>> {
    let mut out = Vec::with_capacity(specs.len());
    for (k, spec) in specs.iter().enumerate() {
        let (shape, dtype) = parse_random_spec(spec)?;
        let t = crate::ops::random::seeded_randn(&shape, dtype, seed.wrapping_add(k as u64))?;
        out.push(IValue::Tensor(t));
    }
    Ok(out)
}

/// One `-i` value without a model to bind names against: a `.npy` file or a literal.
pub fn parse_input_value(text: &str) -> CliResult<IValue> {
    match InputFile::classify(text) {
        Some(file) => {
            let mut inputs = Inputs::default();
            file.read_into(&mut inputs, &[])?;
            match (inputs.positional.len(), inputs.named.is_empty()) {
                (1, true) => Ok(inputs.positional.remove(0)),
                _ => Err(usage(format!(
                    "{text}: holds {} arrays where one input is expected (pick one: {text}:NAME)",
                    inputs.positional.len()
                ))),
            }
        }
        None => parse_literal(text),
    }
}

/// The one floating-point dtype of the model's parameters and buffers, if they have just one.
fn model_float_dtype(module: &Module) -> Option<DType> {
    let mut found: Option<DType> = None;
    for (_, t) in module.state_dict() {
        let d = t.dtype();
        if d.is_floating_point() {
            match found {
                None => found = Some(d),
                Some(f) if f != d => return None,
                Some(_) => {}
            }
        }
    }
    found
}

/// The parameter names of `method` (without `self`), or none if it does not compile: the call
/// then reports the real error.
fn method_parameter_names(module: &Module, method: &str) -> Vec<String> {
    let Ok(unit) = module.compilation_unit() else {
        return Vec::new();
    };
    match unit.method(module.class_name(), method) {
        Ok(f) => f
            .signature
            .params
            .iter()
            .map(|p| p.name.clone())
            .filter(|n| n != "self")
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// An `-i` value naming a file.
struct InputFile<'a> {
    path: &'a Path,
    /// `FILE.npz:NAME`: only that array.
    member: Option<&'a str>,
}

const FILE_EXTENSIONS: [&str; 3] = [".npy", ".npz", ".safetensors"];

impl<'a> InputFile<'a> {
    fn classify(text: &'a str) -> Option<InputFile<'a>> {
        for ext in [".npz:", ".safetensors:"] {
            if let Some(i) = text.find(ext) {
                let split = i + ext.len() - 1;
                return Some(InputFile {
                    path: Path::new(&text[..split]),
                    member: Some(&text[split + 1..]),
                });
            }
        }
        let path = Path::new(text);
        (FILE_EXTENSIONS.iter().any(|e| text.ends_with(e)) || path.is_file())
            .then_some(InputFile { path, member: None })
    }

    fn read_into(&self, inputs: &mut Inputs, parameter_names: &[String]) -> CliResult<()> {
        let ext = self.path.extension().and_then(|e| e.to_str()).unwrap_or("");
        let arrays = match ext {
            "npz" => crate::runtime::module::read_npz(self.path)?,
            "safetensors" => crate::runtime::module::read_safetensors(
                &read_file(self.path)?,
                &self.path.display().to_string(),
            )?,
            _ => {
                inputs.positional.push(IValue::Tensor(read_npy(self.path)?));
                return Ok(());
            }
        };
        if let Some(member) = self.member {
            let t = arrays.get(member).ok_or_else(|| {
                let names: Vec<&str> = arrays.keys().map(String::as_str).collect();
                usage(format!(
                    "{} has no array named {member:?} (it has: {})",
                    self.path.display(),
                    names.join(", ")
                ))
            })?;
            inputs.positional.push(IValue::Tensor(t.clone()));
            return Ok(());
        }
        for (name, t) in arrays {
            if parameter_names.contains(&name) {
                inputs.named.insert(name, IValue::Tensor(t));
            } else {
                inputs.positional.push(IValue::Tensor(t));
            }
        }
        Ok(())
    }
}

/// The bytes of `path`; the error names it.
pub fn read_file(path: &Path) -> crate::Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| io_at(path, e))
}

/// An I/O error that names its path.
pub fn io_at(path: &Path, e: std::io::Error) -> Error {
    Error::Io(std::io::Error::new(
        e.kind(),
        format!("{}: {e}", path.display()),
    ))
}

/// Read a `.npy` file as a tensor of its own dtype (float16 and ml_dtypes' bfloat16 included).
pub use crate::tensor::npy::read_npy_file as read_npy;

/// `1x3x224x224`, `2,8` or `[]` (a 0-d tensor), optionally followed by `:DTYPE`.
fn parse_random_spec(spec: &str) -> CliResult<(Vec<usize>, DType)> {
    let (shape_text, dtype) = match spec.split_once(':') {
        Some((s, d)) => {
            let dtype = DType::from_name(d.trim()).filter(|d| d.is_floating_point());
            let dtype = dtype.ok_or_else(|| {
                usage(format!(
                    "--random {spec}: {d:?} is not a floating-point dtype (float32, float64, float16, bfloat16)"
                ))
            })?;
            (s, dtype)
        }
        None => (spec, DType::Float32),
    };
    let inner = shape_text
        .trim()
        .trim_start_matches(['[', '('])
        .trim_end_matches([']', ')']);
    let shape = inner
        .split(['x', ','])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|d| {
            d.parse::<usize>().map_err(|_| {
                usage(format!(
                    "--random {spec}: expected a shape such as 1x3x224x224, got {d:?}"
                ))
            })
        })
        .collect::<CliResult<Vec<usize>>>()?;
    Ok((shape, dtype))
}

/// Parse a literal input (the module doc lists the forms).
pub fn parse_literal(text: &str) -> CliResult<IValue> {
    let mut p = LiteralParser {
        text,
        pos: 0,
        top_level: true,
    };
    let value = p.value()?;
    p.skip_spaces();
    if p.pos != text.len() {
        return Err(p.error("unexpected text after the value"));
    }
    Ok(value)
}

struct LiteralParser<'a> {
    text: &'a str,
    pos: usize,
    /// A bare word at the top level runs to the end (`-i hello world` needs no quotes inside).
    top_level: bool,
}

impl LiteralParser<'_> {
    fn error(&self, what: &str) -> super::error::CliError {
        usage(format!(
            "input {:?}: {what} at column {} (literals: 3, -0.5, true, none, \"text\", [1,2], (3,4))",
            self.text,
            self.pos + 1
        ))
    }

    fn rest(&self) -> &str {
        &self.text[self.pos..]
    }

    fn skip_spaces(&mut self) {
        let trimmed = self.rest().trim_start();
        self.pos = self.text.len() - trimmed.len();
    }

    fn value(&mut self) -> CliResult<IValue> {
        self.skip_spaces();
        let top_level = std::mem::replace(&mut self.top_level, false);
        match self.rest().chars().next() {
            Some('[') => {
                let items = self.sequence(']')?;
                list_of(items).map_err(|msg| self.error(&msg))
            }
            Some('(') => {
                let items = self.sequence(')')?;
                Ok(IValue::Tuple(Tuple::new(items)))
            }
            Some('"' | '\'') => {
                // Python's escapes (`\n`, `\t`, `\"`, `\\`, `\u00e9`), as TorchScript reads them
                let (s, len) = crate::frontend::lexer::leading_string_literal(self.rest())
                    .ok_or_else(|| self.error("unterminated string"))?;
                self.pos += len;
                Ok(IValue::str(s))
            }
            Some(_) => {
                let word = if top_level {
                    self.rest().trim_end()
                } else {
                    let end = self
                        .rest()
                        .find([',', ']', ')'])
                        .unwrap_or(self.rest().len());
                    self.rest()[..end].trim_end()
                };
                let value = scalar(word);
                self.pos += word.len();
                Ok(value)
            }
            None => Err(self.error("expected a value")),
        }
    }

    /// Items up to `close`, the opening bracket at `pos`; a trailing comma is allowed.
    fn sequence(&mut self, close: char) -> CliResult<Vec<IValue>> {
        self.pos += 1;
        let mut items = Vec::new();
        loop {
            self.skip_spaces();
            if self.rest().starts_with(close) {
                self.pos += 1;
                return Ok(items);
            }
            items.push(self.value()?);
            self.skip_spaces();
            match self.rest().chars().next() {
                Some(',') => self.pos += 1,
                Some(c) if c == close => {}
                _ => return Err(self.error(&format!("expected ',' or '{close}'"))),
            }
        }
    }
}

/// A word as a bool, None, int, float or, failing those, a string.
fn scalar(word: &str) -> IValue {
    match word {
        "true" | "True" => return IValue::Bool(true),
        "false" | "False" => return IValue::Bool(false),
        "none" | "None" => return IValue::None,
        _ => {}
    }
    if let Ok(i) = word.parse::<i64>() {
        return IValue::Int(i);
    }
    // Rust also parses "inf" and "nan", as Python's float() does
    if let Ok(f) = word.parse::<f64>() {
        return IValue::Double(f);
    }
    IValue::str(word)
}

/// A typed list: TorchScript lists are homogeneous; ints among floats become floats, as
/// `List[float]` accepts them in Python.
fn list_of(items: Vec<IValue>) -> Result<IValue, String> {
    let has_float = items.iter().any(|v| matches!(v, IValue::Double(_)));
    let items: Vec<IValue> = if has_float {
        items
            .into_iter()
            .map(|v| match v {
                IValue::Int(i) => IValue::Double(i as f64),
                other => other,
            })
            .collect()
    } else {
        items
    };
    let elem = match items.first() {
        None => Type::Tensor,
        Some(first) => literal_type(first),
    };
    if let Some(other) = items.iter().find(|v| literal_type(v) != elem) {
        return Err(format!(
            "a list holds one type: {} and {} are mixed",
            elem,
            literal_type(other)
        ));
    }
    Ok(IValue::List(List::new(elem, items)))
}

fn literal_type(v: &IValue) -> Type {
    match v {
        IValue::Int(_) => Type::Int,
        IValue::Double(_) => Type::Float,
        IValue::Bool(_) => Type::Bool,
        IValue::String(_) => Type::Str,
        IValue::None => Type::NoneType,
        IValue::Tensor(_) => Type::Tensor,
        IValue::Tuple(t) => Type::Tuple(t.items().iter().map(literal_type).collect()),
        IValue::List(l) => Type::list(l.elem_type().clone()),
        _ => Type::Any,
    }
}
