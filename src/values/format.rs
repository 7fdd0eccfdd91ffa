//! Numbers and values as text, the way PyTorch prints them: C's `%g` ([`fmt_g`]), c10's
//! double printing in graphs and code ([`fmt_double`]), and TorchScript's `str(v)`
//! ([`python_str`], with tensors as [`tensor_repr`]).

use crate::tensor::{DType, Tensor};
use crate::values::IValue;

/// A double as c10's `IValue` printer writes it: integral values as `2.`, others with 17
/// significant digits (`0.10000000000000001`, `1e-08`), `inf`, `nan`, `-nan`.
pub fn fmt_double(d: f64) -> String {
    if d.is_finite() && d.abs() < 1e10 && d == d.trunc() {
        // -0.0 prints as `-0.`
        if d == 0.0 && d.is_sign_negative() {
            return "-0.".to_string();
        }
        return format!("{}.", d as i64);
    }
    fmt_g(d, 17)
}

/// C's `%.{precision}e` (Python's `f"{v:.{p}e}"`): `1.5000e+00`, at least two exponent digits;
/// `inf`, `-inf`, `nan`.
pub fn fmt_e(d: f64, precision: usize) -> String {
    if !d.is_finite() {
        return fmt_nonfinite(d);
    }
    let s = format!("{d:.precision$e}");
    match s.split_once('e') {
        Some((m, e)) => {
            let e: i32 = e.parse().unwrap_or(0);
            format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
        }
        None => s,
    }
}

/// `inf`, `-inf` or `nan`, as C and Python print a non-finite number.
pub fn fmt_nonfinite(d: f64) -> String {
    if d.is_nan() {
        "nan".into()
    } else if d > 0.0 {
        "inf".into()
    } else {
        "-inf".into()
    }
}

// C's `%g`: lives with ATen's formatter, which prints with it (one import direction)
pub use super::aten_format::fmt_g;

/// The text of `str(v)` in TorchScript (PyTorch's IValue printing: `1.` for integral floats,
/// 17 significant digits otherwise, strings unquoted inside containers).
pub fn python_str(v: &IValue) -> String {
    let mut s = String::new();
    write_value(&mut s, v);
    s
}

/// A float as TorchScript prints it.
pub fn format_double(d: f64) -> String {
    if d.is_nan() {
        return "nan".into();
    }
    if d.is_infinite() {
        return if d > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if d.abs() < 1e10 && d == d.trunc() {
        return format!("{}.", d as i64);
    }
    let s = fmt_g(d, 17);
    if s.bytes().all(|b| b.is_ascii_digit() || b == b'-') {
        s + "."
    } else {
        s
    }
}

fn write_value(out: &mut String, v: &IValue) {
    use std::fmt::Write;
    match v {
        IValue::None => out.push_str("None"),
        IValue::Bool(b) => out.push_str(if *b { "True" } else { "False" }),
        IValue::Int(i) => {
            let _ = write!(out, "{i}");
        }
        IValue::Double(d) => out.push_str(&format_double(*d)),
        IValue::Complex(c) => {
            let _ = write!(
                out,
                "{}{}{}j",
                format_double(c.re),
                if c.im < 0.0 { "-" } else { "+" },
                format_double(c.im.abs())
            );
        }
        IValue::String(s) => out.push_str(s),
        // ATen's stream format, as PyTorch's IValue printing writes a tensor
        IValue::Tensor(t) => match super::aten_format::aten_text(t) {
            Some(text) => out.push_str(&text),
            None => out.push_str(&tensor_repr(t)),
        },
        IValue::List(l) => {
            out.push('[');
            for (i, x) in l.items().iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_value(out, x);
            }
            out.push(']');
        }
        IValue::Tuple(t) => {
            out.push('(');
            for (i, x) in t.items().iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_value(out, x);
            }
            if t.items().len() == 1 {
                out.push(',');
            }
            out.push(')');
        }
        IValue::Dict(d) => {
            out.push('{');
            for (i, (k, x)) in d.items().values().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_value(out, k);
                out.push_str(": ");
                write_value(out, x);
            }
            out.push('}');
        }
        IValue::Device(d) => {
            let _ = write!(out, "{d}");
        }
        other => {
            let _ = write!(out, "{other:?}");
        }
    }
}

/// A tensor printed the way Python's `repr(tensor)` looks (values with 4 decimals for floats,
/// long dimensions summarized with `...` once the tensor has more than 1000 elements).
pub fn tensor_repr(t: &Tensor) -> String {
    if let Some(parts) = t.sparse_parts() {
        return sparse_repr(t, parts);
    }
    if let Some(parts) = t.nested_parts() {
        return nested_repr(parts, tensor_repr);
    }
    let summarize = t.numel() > 1000;
    let floating = t.dtype().is_floating_point();
    let Ok(vals) = t.to_vec::<f64>() else {
        return format!("tensor(<{} {:?}>)", t.dtype(), t.shape());
    };
    let finite: Vec<f64> = vals.iter().copied().filter(|v| v.is_finite()).collect();
    let all_int = finite.iter().all(|v| *v == v.trunc());
    let max_abs = finite.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let min_abs = finite
        .iter()
        .filter(|v| **v != 0.0)
        .fold(f64::INFINITY, |m, v| m.min(v.abs()));
    let sci = floating
        && !all_int
        && (max_abs >= 1e8
            || (min_abs.is_finite() && (max_abs / min_abs > 1000.0 || min_abs < 1e-4)));
    let fmt = |v: f64| -> String {
        if t.dtype() == DType::Bool {
            return if v != 0.0 {
                "True".into()
            } else {
                "False".into()
            };
        }
        if !floating {
            return format!("{}", v as i64);
        }
        if !v.is_finite() {
            fmt_nonfinite(v)
        } else if sci {
            fmt_e(v, 4)
        } else if all_int {
            format!("{}.", v as i64)
        } else {
            format!("{v:.4}")
        }
    };
    let strs: Vec<String> = vals.iter().map(|&v| fmt(v)).collect();
    let width = strs.iter().map(|s| s.len()).max().unwrap_or(0);
    let shape = t.shape().to_vec();
    let mut out = String::from("tensor(");
    if shape.is_empty() {
        out.push_str(strs.first().map(|s| s.as_str()).unwrap_or(""));
    } else {
        write_nested(&mut out, &strs, &shape, 0, 0, width, summarize, 8);
    }
    let default = matches!(t.dtype(), DType::Float32 | DType::Int64 | DType::Bool);
    if !default {
        out.push_str(&format!(", dtype=torch.{}", t.dtype().name()));
    }
    if t.numel() == 0 && shape.len() > 1 {
        out.push_str(
            &format!(", size={shape:?}")
                .replace('[', "(")
                .replace(']', ")"),
        );
    }
    out.push(')');
    out
}

/// A sparse tensor as its components: `tensor(indices=tensor(...), values=tensor(...),
/// size=(3, 3), nnz=4, layout=torch.sparse_coo)` (compressed layouts name their index
/// tensors `crow_indices`/`col_indices` or `ccol_indices`/`row_indices`).
fn sparse_repr(t: &Tensor, parts: &crate::tensor::SparseParts) -> String {
    let components = parts.named_components();
    let mut out = String::from("tensor(");
    for (name, c) in components {
        out.push_str(&format!("{name}={}, ", tensor_repr(c)));
    }
    let dims: Vec<String> = t.shape().iter().map(usize::to_string).collect();
    let size = if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    };
    out.push_str(&format!("size={size}, nnz={}", parts.nnz()));
    if !matches!(t.dtype(), DType::Float32 | DType::Int64 | DType::Bool) {
        out.push_str(&format!(", dtype=torch.{}", t.dtype().name()));
    }
    out.push_str(&format!(", layout={})", parts.layout()));
    out
}

#[allow(clippy::too_many_arguments)]
fn write_nested(
    out: &mut String,
    strs: &[String],
    shape: &[usize],
    dim: usize,
    offset: usize,
    width: usize,
    summarize: bool,
    indent: usize,
) {
    let n = shape.get(dim).copied().unwrap_or(0);
    let inner: usize = shape.iter().skip(dim + 1).product();
    let idx: Vec<Option<usize>> = if summarize && n > 6 {
        (0..3)
            .map(Some)
            .chain([None])
            .chain((n - 3..n).map(Some))
            .collect()
    } else {
        (0..n).map(Some).collect()
    };
    out.push('[');
    let last = dim + 1 == shape.len();
    for (k, i) in idx.iter().enumerate() {
        if k > 0 {
            if last {
                out.push_str(", ");
            } else {
                out.push(',');
                out.push_str(&"\n".repeat(shape.len() - dim - 1));
                out.push_str(&" ".repeat(indent + dim + 1));
            }
        }
        match i {
            None => out.push_str("..."),
            Some(i) if last => {
                let s = strs.get(offset + i).map(|s| s.as_str()).unwrap_or("");
                out.push_str(&format!("{s:>width$}"));
            }
            Some(i) => write_nested(
                out,
                strs,
                shape,
                dim + 1,
                offset + i * inner,
                width,
                summarize,
                indent,
            ),
        }
    }
    out.push(']');
}

/// Python's `repr` of a nested tensor: `nested_tensor([`, each component's own repr (made by
/// `component_repr`) with every line indented two spaces, joined by `,`, then `])`.
pub fn nested_repr(
    parts: &crate::tensor::NestedParts,
    component_repr: fn(&Tensor) -> String,
) -> String {
    let body: Vec<String> = match parts.components() {
        Ok(components) => components
            .iter()
            .map(|c| {
                component_repr(c)
                    .split('\n')
                    .map(|line| format!("  {line}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .collect(),
        Err(e) => vec![format!("  <{e}>")],
    };
    format!("nested_tensor([\n{}\n])", body.join(",\n"))
}
