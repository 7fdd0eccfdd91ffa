//! Results printed as Python prints them: `repr` of strings, lists, tuples, dicts and
//! NamedTuples, and tensors as `torch/_tensor_str.py` formats them with its default print options
//! (precision 4, linewidth 80, summarization above 1000 elements with 3 edge items).
//!
//! This is the Python-side repr; `str(tensor)` inside TorchScript code (`ops::scalar`) is a
//! different format, libtorch's, and stays as it is.

use super::output::FieldNames;
use crate::tensor::{DType, Layout, SparseParts, Tensor};
use crate::values::python_str;
use crate::values::IValue;

/// `torch._tensor_str.PRINT_OPTS` defaults.
const PRECISION: usize = 4;
const THRESHOLD: usize = 1000;
const EDGE_ITEMS: usize = 3;
const LINEWIDTH: usize = 80;

/// `repr(v)` as Python shows a method's result.
pub fn python_repr(v: &IValue, fields: FieldNames) -> String {
    match v {
        IValue::None => "None".into(),
        IValue::Bool(b) => (if *b { "True" } else { "False" }).into(),
        IValue::Int(i) => i.to_string(),
        IValue::Double(d) => float_repr(*d),
        IValue::String(s) => str_repr(s),
        IValue::Tensor(t) => tensor_repr(t),
        IValue::List(l) => {
            let items: Vec<String> = l.to_vec().iter().map(|x| python_repr(x, fields)).collect();
            format!("[{}]", items.join(", "))
        }
        IValue::Tuple(t) => {
            let items: Vec<String> = t.items().iter().map(|x| python_repr(x, fields)).collect();
            match t.class() {
                Some(class) => {
                    let names = fields(class).unwrap_or_default();
                    let short = class.rsplit('.').next().unwrap_or(class);
                    let parts: Vec<String> = items
                        .iter()
                        .enumerate()
                        .map(|(i, item)| match names.get(i) {
                            Some(n) => format!("{n}={item}"),
                            None => item.clone(),
                        })
                        .collect();
                    format!("{short}({})", parts.join(", "))
                }
                None if items.len() == 1 => format!("({},)", items[0]),
                None => format!("({})", items.join(", ")),
            }
        }
        IValue::Dict(d) => {
            let items: Vec<String> = d
                .entries()
                .iter()
                .map(|(k, x)| format!("{}: {}", python_repr(k, fields), python_repr(x, fields)))
                .collect();
            format!("{{{}}}", items.join(", "))
        }
        IValue::Device(d) => format!("device(type='{d}')"),
        other => python_str(other),
    }
}

/// Python's `repr(float)`: the shortest text that reads back, in exponent form below 1e-4 and
/// from 1e16 on.
pub fn float_repr(d: f64) -> String {
    if d.is_nan() {
        return "nan".into();
    }
    if d.is_infinite() {
        return (if d > 0.0 { "inf" } else { "-inf" }).into();
    }
    // Rust's `{:e}` gives the shortest round-trip digits too, always in exponent form
    let e = format!("{d:e}");
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..16).contains(&exp) {
        let s = format!("{d}");
        if s.contains('.') {
            s
        } else {
            s + ".0"
        }
    } else {
        format!(
            "{mantissa}e{}{:02}",
            if exp < 0 { '-' } else { '+' },
            exp.abs()
        )
    }
}

/// Python's `repr(str)`: single quotes unless the text has one and no double quote.
pub fn str_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// The elements of a tensor in row-major order, as the formatter reads them.
enum Elements {
    Float(Vec<f64>),
    Int(Vec<i64>),
    Bool(Vec<bool>),
}

/// `torch._tensor_str._Formatter`: one width and one mode for every printed element.
struct Formatter {
    int_mode: bool,
    sci_mode: bool,
    max_width: usize,
}

/// `f"{v:.{p}e}"`: Rust writes `1.2346e0`, Python `1.2346e+00`.
fn sci(v: f64) -> String {
    crate::values::format::fmt_e(v, PRECISION)
}

/// `f"{v:.{p}f}"` (Python writes `inf` / `nan` for those).
fn fixed(v: f64, precision: usize) -> String {
    if v.is_finite() {
        format!("{v:.precision$}")
    } else {
        crate::values::format::fmt_nonfinite(v)
    }
}

impl Formatter {
    /// Built from the elements at `indices` (all, or the summarized edges), as `_Formatter`.
    fn new(elements: &Elements, indices: &[usize]) -> Formatter {
        let mut f = Formatter {
            int_mode: true,
            sci_mode: false,
            max_width: 1,
        };
        match elements {
            Elements::Int(v) => {
                for &i in indices {
                    f.max_width = f.max_width.max(v[i].to_string().len());
                }
            }
            Elements::Bool(v) => {
                for &i in indices {
                    f.max_width = f.max_width.max(if v[i] { 4 } else { 5 });
                }
            }
            Elements::Float(v) => {
                let vals: Vec<f64> = indices
                    .iter()
                    .map(|&i| v[i])
                    .filter(|x| x.is_finite() && *x != 0.0)
                    .collect();
                if vals.is_empty() {
                    return f;
                }
                let min = vals.iter().fold(f64::INFINITY, |m, x| m.min(x.abs()));
                let max = vals.iter().fold(0.0f64, |m, x| m.max(x.abs()));
                f.int_mode = vals.iter().all(|x| *x == x.ceil());
                let wide_range = max / min > 1000.0 || max > 1.0e8;
                if f.int_mode {
                    f.sci_mode = wide_range;
                    for &x in &vals {
                        // int mode appends a '.' to every number
                        let w = if f.sci_mode {
                            sci(x).len()
                        } else {
                            fixed(x, 0).len() + 1
                        };
                        f.max_width = f.max_width.max(w);
                    }
                } else {
                    f.sci_mode = wide_range || min < 1.0e-4;
                    for &x in &vals {
                        let w = if f.sci_mode {
                            sci(x).len()
                        } else {
                            fixed(x, PRECISION).len()
                        };
                        f.max_width = f.max_width.max(w);
                    }
                }
            }
        }
        f
    }

    /// `_Formatter.format`: the element right-aligned to the common width.
    fn format(&self, elements: &Elements, i: usize) -> String {
        let s = match elements {
            Elements::Int(v) => v[i].to_string(),
            Elements::Bool(v) => (if v[i] { "True" } else { "False" }).to_string(),
            Elements::Float(v) => {
                let x = v[i];
                if self.sci_mode {
                    sci(x)
                } else if self.int_mode {
                    let mut s = fixed(x, 0);
                    if x.is_finite() {
                        s.push('.');
                    }
                    s
                } else {
                    fixed(x, PRECISION)
                }
            }
        };
        format!("{s:>width$}", width = self.max_width)
    }
}

/// Flat indices `get_summarized_data` keeps: the first and last EDGE_ITEMS of every long
/// dimension.
fn summarized_indices(shape: &[usize], offset: usize, out: &mut Vec<usize>) {
    let Some((&n, rest)) = shape.split_first() else {
        out.push(offset);
        return;
    };
    let inner: usize = rest.iter().product();
    for i in edge_rows(n, true).into_iter().flatten() {
        summarized_indices(rest, offset + i * inner, out);
    }
}

/// The rows of a dimension of length `n` to print: `None` marks the `...` of a summarized one.
fn edge_rows(n: usize, summarize: bool) -> Vec<Option<usize>> {
    if summarize && n > 2 * EDGE_ITEMS {
        (0..EDGE_ITEMS)
            .map(Some)
            .chain([None])
            .chain((n - EDGE_ITEMS..n).map(Some))
            .collect()
    } else {
        (0..n).map(Some).collect()
    }
}

struct Printer<'a> {
    elements: &'a Elements,
    formatter: Formatter,
    shape: &'a [usize],
    summarize: bool,
}

impl Printer<'_> {
    /// `_tensor_str_with_formatter` for the sub-tensor at `dim`, `offset`.
    fn nested(&self, dim: usize, offset: usize, indent: usize) -> String {
        let rank = self.shape.len();
        let n = self.shape[dim];
        if dim + 1 == rank {
            return self.vector(offset, n, indent);
        }
        let inner: usize = self.shape[dim + 1..].iter().product();
        let slices: Vec<String> = edge_rows(n, self.summarize)
            .into_iter()
            .map(|row| match row {
                Some(i) => self.nested(dim + 1, offset + i * inner, indent + 1),
                None => "...".to_string(),
            })
            .collect();
        let sep = format!(",{}{}", "\n".repeat(rank - dim - 1), " ".repeat(indent + 1));
        format!("[{}]", slices.join(&sep))
    }

    /// `_vector_str`: as many elements a line as fit in the line width.
    fn vector(&self, offset: usize, n: usize, indent: usize) -> String {
        let element_length = self.formatter.max_width + 2;
        let per_line = (LINEWIDTH.saturating_sub(indent) / element_length).max(1);
        let data: Vec<String> = edge_rows(n, self.summarize)
            .into_iter()
            .map(|i| match i {
                Some(i) => self.formatter.format(self.elements, offset + i),
                None => " ...".to_string(),
            })
            .collect();
        let lines: Vec<String> = data.chunks(per_line).map(|c| c.join(", ")).collect();
        format!(
            "[{}]",
            lines.join(&format!(",\n{}", " ".repeat(indent + 1)))
        )
    }
}

fn elements_of(t: &Tensor) -> Option<Elements> {
    let d = t.dtype();
    if d == DType::Bool {
        t.to_vec::<bool>().ok().map(Elements::Bool)
    } else if d.is_floating_point() {
        t.to_vec::<f64>().ok().map(Elements::Float)
    } else if d.is_integral(false) {
        t.to_vec::<i64>().ok().map(Elements::Int)
    } else {
        None
    }
}

/// `repr(tensor)` as Python prints it (complex and quantized tensors: libtorch's form).
pub fn tensor_repr(t: &Tensor) -> String {
    if let Some(parts) = t.sparse_parts() {
        return sparse_repr(t, parts);
    }
    if let Some(parts) = t.nested_parts() {
        return crate::values::format::nested_repr(parts, tensor_repr);
    }
    let Some(elements) = elements_of(t) else {
        return crate::values::format::tensor_repr(t);
    };
    let prefix = "tensor(";
    let indent = prefix.len();
    let dtype = t.dtype();
    let default_dtype = matches!(dtype, DType::Float32 | DType::Int64 | DType::Bool);
    let mut suffixes = Vec::new();
    let shape = t.shape();
    if t.numel() == 0 {
        if shape.len() != 1 {
            suffixes.push(format!("size={}", size_tuple(shape)));
        }
        // an empty tensor shows any dtype but the default float one
        if dtype != DType::Float32 {
            suffixes.push(format!("dtype=torch.{}", dtype.name()));
        }
    } else if !default_dtype {
        suffixes.push(format!("dtype=torch.{}", dtype.name()));
    }
    let body = tensor_str(t, &elements, indent);
    add_suffixes(&format!("{prefix}{body}"), &suffixes, indent, false)
}

/// Python's `str(tuple(shape))`: `(3,)`, `(2, 3)`, `()`.
fn size_tuple(shape: &[usize]) -> String {
    let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
    if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    }
}

/// `_tensor_str(t, indent)`: the elements without prefix or suffixes.
fn tensor_str(t: &Tensor, elements: &Elements, indent: usize) -> String {
    let shape = t.shape();
    if t.numel() == 0 {
        return "[]".to_string();
    }
    let summarize = t.numel() > THRESHOLD;
    let indices: Vec<usize> = if summarize {
        let mut v = Vec::new();
        summarized_indices(shape, 0, &mut v);
        v
    } else {
        (0..t.numel()).collect()
    };
    let formatter = Formatter::new(elements, &indices);
    if shape.is_empty() {
        formatter.format(elements, 0)
    } else {
        let printer = Printer {
            elements,
            formatter,
            shape,
            summarize,
        };
        printer.nested(0, 0, indent)
    }
}

/// `repr` of a sparse tensor (`_str_intern`'s sparse branches): each component tensor as
/// `name=tensor(...)` on its own line, then `size=`, `nnz=`, `dtype=` and `layout=`.
fn sparse_repr(t: &Tensor, parts: &SparseParts) -> String {
    let indent = "tensor(".len();
    let component = |name: &str, c: &Tensor| -> String {
        let prefix = format!("{name}=tensor(");
        let body = match elements_of(c) {
            Some(e) => tensor_str(c, &e, indent + prefix.len()),
            None => crate::values::format::tensor_repr(c),
        };
        let size = if c.numel() == 0 {
            format!(", size={}", size_tuple(c.shape()))
        } else {
            String::new()
        };
        format!("{prefix}{body}{size})")
    };
    let texts: Vec<String> = parts
        .named_components()
        .into_iter()
        .map(|(name, c)| component(name, c))
        .collect();
    let mut suffixes = vec![
        format!("size={}", size_tuple(t.shape())),
        format!("nnz={}", parts.nnz()),
    ];
    if !matches!(t.dtype(), DType::Float32 | DType::Int64 | DType::Bool) {
        suffixes.push(format!("dtype=torch.{}", t.dtype().name()));
    }
    suffixes.push(format!("layout={}", parts.layout()));
    let body = texts.join(&format!(",\n{}", " ".repeat(indent)));
    // COO starts its suffixes on a new line (`force_newline=self.is_sparse`)
    add_suffixes(
        &format!("tensor({body}"),
        &suffixes,
        indent,
        parts.layout() == Layout::SparseCoo,
    )
}

/// `_add_suffixes`: each suffix on the last line if it fits the line width, else on its own
/// (the first one always on its own with `force_newline`).
fn add_suffixes(text: &str, suffixes: &[String], indent: usize, force_newline: bool) -> String {
    let mut force_newline = force_newline;
    let mut out = text.to_string();
    // Python computes len - rfind("\n") + 1, which is 2 more than the last line's length
    // when there is no newline (rfind gives -1): kept, since it decides the wrapping.
    let mut last_line_len = match text.rfind('\n') {
        Some(i) => text.len() - i + 1,
        None => text.len() + 2,
    };
    for suffix in suffixes {
        if force_newline || last_line_len + suffix.len() + 2 > LINEWIDTH {
            force_newline = false;
            out.push_str(&format!(",\n{}{suffix}", " ".repeat(indent)));
            last_line_len = indent + suffix.len();
        } else {
            out.push_str(", ");
            out.push_str(suffix);
            last_line_len += suffix.len() + 2;
        }
    }
    out.push(')');
    out
}
