//! `tsrun MODEL` (or `tsrun summary MODEL [--json]`): what an archive is before running it — the
//! class, the top of the module tree, the parameter and buffer sizes by dtype, the root's method
//! signatures, the extra files and the file format version. `tsrun info` has the full tree.

use super::error::CliResult;
use crate::runtime::Module;
use crate::Tensor;
use indexmap::IndexMap;
use serde_json::{json, Value};
use std::fmt::Write;
use std::path::PathBuf;

/// Modules deeper than this are folded into a count on their ancestor at this depth.
pub const SUMMARY_DEPTH: usize = 2;

/// Arguments of `tsrun summary`.
#[derive(Debug, Clone, clap::Args)]
pub struct SummaryArgs {
    /// The TorchScript archive (`torch.jit.save` output).
    #[arg(value_name = "MODEL")]
    pub model: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Elements and bytes of a group of tensors of one dtype.
#[derive(Default, Clone, Copy)]
struct Size {
    tensors: usize,
    elements: usize,
    bytes: usize,
}

/// Sizes by dtype name, in first-seen order.
fn sizes_by_dtype(tensors: &[(String, Tensor)]) -> IndexMap<&'static str, Size> {
    let mut by = IndexMap::new();
    for (_, t) in tensors {
        let s: &mut Size = by.entry(t.dtype().name()).or_default();
        s.tensors += 1;
        s.elements += t.numel();
        s.bytes += t.numel() * t.dtype().size();
    }
    by
}

/// The class name without its `__torch__` module path and mangling (`Conv2d`).
fn short_class(name: &str) -> &str {
    name.rsplit('.').next().unwrap_or(name)
}

/// Depth of a `named_modules` path: 0 for the root.
fn depth(path: &str) -> usize {
    if path.is_empty() {
        0
    } else {
        path.matches('.').count() + 1
    }
}

/// `(path, class, descendants folded into it)` of the modules at depth 1..=SUMMARY_DEPTH.
fn folded_tree(module: &Module) -> Vec<(String, String, usize)> {
    let mut rows: Vec<(String, String, usize)> = Vec::new();
    for (path, m) in module.named_modules("", true) {
        let d = depth(&path);
        if d == 0 {
            continue;
        }
        if d <= SUMMARY_DEPTH {
            rows.push((path, short_class(m.class_name()).to_string(), 0));
        } else if let Some(row) = rows
            .iter_mut()
            .rev()
            .find(|(p, _, _)| depth(p) == SUMMARY_DEPTH && path.starts_with(&format!("{p}.")))
        {
            row.2 += 1;
        }
    }
    rows
}

/// `1234567` as `1,234,567`.
fn grouped(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Bytes in the largest binary unit that keeps the number at or above 1.
fn human_bytes(n: usize) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

fn size_lines(out: &mut String, what: &str, tensors: &[(String, Tensor)]) {
    if tensors.is_empty() {
        let _ = writeln!(out, "{what}: none");
        return;
    }
    let by = sizes_by_dtype(tensors);
    let elements: usize = by.values().map(|s| s.elements).sum();
    let bytes: usize = by.values().map(|s| s.bytes).sum();
    let _ = writeln!(
        out,
        "{what}: {} elements in {} tensors, {}",
        grouped(elements),
        tensors.len(),
        human_bytes(bytes)
    );
    if by.len() > 1 {
        for (dtype, s) in &by {
            let _ = writeln!(
                out,
                "  {dtype}: {} elements in {} tensors, {}",
                grouped(s.elements),
                s.tensors,
                human_bytes(s.bytes)
            );
        }
    } else if let Some((dtype, _)) = by.first() {
        let _ = writeln!(out, "  all {dtype}");
    }
}

/// A signature with `self`'s type (the module's own long class name) left out, as Python
/// writes methods: `(self, x: Tensor) -> Tensor`.
fn without_self_type(signature: &str) -> String {
    let Some(rest) = signature.strip_prefix("(self: ") else {
        return signature.to_string();
    };
    match rest.find([',', ')']) {
        Some(end) => format!("(self{}", &rest[end..]),
        None => signature.to_string(),
    }
}

/// The summary as text.
pub fn summary_text(module: &Module) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} (file format version {})",
        module.class_name(),
        module.shared().version
    );
    let tree = folded_tree(module);
    if tree.is_empty() {
        let _ = writeln!(out, "\nno submodules");
    } else {
        let _ = writeln!(
            out,
            "\nmodules (depth <= {SUMMARY_DEPTH}; `tsrun info` lists all):"
        );
        for (path, class, folded) in &tree {
            let label = path.rsplit('.').next().unwrap_or(path);
            let indent = "  ".repeat(depth(path));
            let more = match folded {
                0 => String::new(),
                1 => " (+1 submodule)".to_string(),
                n => format!(" (+{n} submodules)"),
            };
            let _ = writeln!(out, "{indent}{label}: {class}{more}");
        }
    }
    out.push('\n');
    size_lines(
        &mut out,
        "parameters",
        &module.named_parameters("", true, true),
    );
    size_lines(&mut out, "buffers", &module.named_buffers("", true, true));
    let _ = writeln!(out, "\nmethods:");
    if let Some(decl) = module.class_decl() {
        for method in &decl.methods {
            let _ = writeln!(
                out,
                "  {}{}",
                method.name,
                without_self_type(&method.signature)
            );
        }
    }
    if module.extra_files().is_empty() {
        let _ = writeln!(out, "\nextra files: none");
    } else {
        let _ = writeln!(out, "\nextra files:");
        for (name, bytes) in module.extra_files() {
            let _ = writeln!(out, "  {name} ({} bytes)", bytes.len());
        }
    }
    out
}

fn sizes_json(tensors: &[(String, Tensor)]) -> Value {
    let by: serde_json::Map<String, Value> = sizes_by_dtype(tensors)
        .into_iter()
        .map(|(dtype, s)| {
            (
                dtype.to_string(),
                json!({"tensors": s.tensors, "elements": s.elements, "bytes": s.bytes}),
            )
        })
        .collect();
    json!({
        "tensors": tensors.len(),
        "elements": tensors.iter().map(|(_, t)| t.numel()).sum::<usize>(),
        "by_dtype": by,
    })
}

/// The summary as JSON.
pub fn summary_json(module: &Module) -> Value {
    let modules: Vec<Value> = folded_tree(module)
        .into_iter()
        .map(|(path, class, folded)| json!({"name": path, "class": class, "folded_submodules": folded}))
        .collect();
    let methods: Vec<Value> = module
        .class_decl()
        .map(|d| {
            d.methods
                .iter()
                .map(|m| json!({"name": m.name, "signature": m.signature}))
                .collect()
        })
        .unwrap_or_default();
    let extra: Vec<Value> = module
        .extra_files()
        .iter()
        .map(|(name, bytes)| json!({"name": name, "bytes": bytes.len()}))
        .collect();
    json!({
        "class": module.class_name(),
        "version": module.shared().version,
        "modules": modules,
        "parameters": sizes_json(&module.named_parameters("", true, true)),
        "buffers": sizes_json(&module.named_buffers("", true, true)),
        "methods": methods,
        "extra_files": extra,
    })
}

/// Run `tsrun summary`.
pub fn run(args: &SummaryArgs) -> CliResult {
    let module = Module::load(&args.model)?;
    if args.json {
        println!("{}", super::output::pretty_json(&summary_json(&module))?);
    } else {
        print!("{}", summary_text(&module));
    }
    Ok(())
}
