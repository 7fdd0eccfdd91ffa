//! `tsrun info`: the module tree, parameters and buffers (dtype, shape), method signatures and
//! extra files of an archive.

use crate::runtime::Module;
use crate::Result;
use serde_json::{json, Value};
use std::path::PathBuf;

/// Arguments of `tsrun info`.
#[derive(Debug, Clone, clap::Args)]
pub struct InfoArgs {
    /// The TorchScript archive (`torch.jit.save` output).
    #[arg(value_name = "MODEL")]
    pub model: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

fn tensor_entries(items: &[(String, crate::Tensor)]) -> Vec<Value> {
    items
        .iter()
        .map(|(name, t)| json!({"name": name, "dtype": t.dtype().name(), "shape": t.shape()}))
        .collect()
}

/// Methods of every class of modules in the tree, as `(module path, name, signature)`.
fn method_rows(module: &Module) -> Vec<(String, String, String)> {
    let mut rows = Vec::new();
    for (path, m) in module.named_modules("", true) {
        if let Some(decl) = m.class_decl() {
            for method in &decl.methods {
                rows.push((path.clone(), method.name.clone(), method.signature.clone()));
            }
        }
    }
    rows
}

/// The `info` report as JSON.
pub fn info_json(module: &Module) -> Value {
    let modules: Vec<Value> = module
        .named_modules("", true)
        .iter()
        .map(|(name, m)| json!({"name": name, "class": m.class_name()}))
        .collect();
    let methods: Vec<Value> = method_rows(module)
        .into_iter()
        .map(|(m, name, sig)| json!({"module": m, "name": name, "signature": sig}))
        .collect();
    let extra: Vec<Value> = module
        .extra_files()
        .iter()
        .map(|(name, bytes)| json!({"name": name, "bytes": bytes.len()}))
        .collect();
    json!({
        "class": module.class_name(),
        "version": module.shared().version,
        "modules": modules,
        "state_dict": tensor_entries(&module.state_dict()),
        "parameters": tensor_entries(&module.named_parameters("", true, true)),
        "buffers": tensor_entries(&module.named_buffers("", true, true)),
        "methods": methods,
        "constants": module.constants().len(),
        "extra_files": extra,
    })
}

/// The `info` report as text.
pub fn info_text(module: &Module) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} (format version {})",
        module.class_name(),
        module.shared().version
    );
    let _ = writeln!(out, "\nmodules:");
    for (name, m) in module.named_modules("", true) {
        let depth = if name.is_empty() {
            0
        } else {
            name.matches('.').count() + 1
        };
        let label = if name.is_empty() {
            "<root>"
        } else {
            name.rsplit('.').next().unwrap_or(&name)
        };
        let _ = writeln!(out, "  {}{label}: {}", "  ".repeat(depth), m.class_name());
    }
    let params = module.named_parameters("", true, true);
    let buffers = module.named_buffers("", true, true);
    let count = |v: &[(String, crate::Tensor)]| v.iter().map(|(_, t)| t.numel()).sum::<usize>();
    let _ = writeln!(
        out,
        "\nparameters ({} tensors, {} elements):",
        params.len(),
        count(&params)
    );
    for (name, t) in &params {
        let _ = writeln!(out, "  {name}: {}", tensor_desc(t));
    }
    let _ = writeln!(
        out,
        "\nbuffers ({} tensors, {} elements):",
        buffers.len(),
        count(&buffers)
    );
    for (name, t) in &buffers {
        let _ = writeln!(out, "  {name}: {}", tensor_desc(t));
    }
    let _ = writeln!(out, "\nmethods:");
    for (path, name, sig) in method_rows(module) {
        let owner = if path.is_empty() {
            String::new()
        } else {
            format!("{path}.")
        };
        let _ = writeln!(out, "  {owner}{name}{sig}");
    }
    if !module.constants().is_empty() {
        let _ = writeln!(out, "\nconstants: {}", module.constants().len());
    }
    if !module.extra_files().is_empty() {
        let _ = writeln!(out, "\nextra files:");
        for (name, bytes) in module.extra_files() {
            let _ = writeln!(out, "  {name} ({} bytes)", bytes.len());
        }
    }
    out
}

/// `float32 [6, 6]`, and for a sparse tensor its layout and number of specified elements.
fn tensor_desc(t: &crate::Tensor) -> String {
    if let Some(p) = t.nested_parts() {
        return format!("{} nested ({} components)", t.dtype(), p.len());
    }
    match t.sparse_parts() {
        None => format!("{} {:?}", t.dtype(), t.shape()),
        Some(p) => format!(
            "{} {:?} {} (nnz {})",
            t.dtype(),
            t.shape(),
            p.layout(),
            p.nnz()
        ),
    }
}

/// Run `tsrun info`.
pub fn run(args: &InfoArgs) -> Result<()> {
    let module = Module::load(&args.model)?;
    if args.json {
        let text = serde_json::to_string_pretty(&info_json(&module))
            .map_err(|e| crate::Error::Module(format!("cannot encode JSON: {e}")))?;
        println!("{text}");
    } else {
        print!("{}", info_text(&module));
    }
    Ok(())
}
