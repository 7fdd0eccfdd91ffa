//! `tsrun code` and `tsrun graph`: print a method of a loaded module as `m.code` /
//! `m.graph` / `m.inlined_graph` show it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::ir::printer::{print_graph, PrintOptions};
use crate::ir::python_print::function_code;
use crate::ir::unit::{CompilationUnit, Function};
use crate::runtime::Module;

/// `tsrun code MODEL [--submodule PATH] [--method NAME]`
#[derive(clap::Args, Debug, Clone)]
pub struct CodeArgs {
    /// The TorchScript archive (`.pt`).
    pub model: PathBuf,
    /// Dotted path of a submodule (`layer1.0.conv1`); the root module if absent.
    #[arg(long)]
    pub submodule: Option<String>,
    /// The method to print.
    #[arg(long, default_value = "forward")]
    pub method: String,
    /// Print `{"method": ..., "code": ...}` instead of the text.
    #[arg(long)]
    pub json: bool,
}

/// `tsrun graph MODEL [--submodule PATH] [--method NAME] [--inlined]`
#[derive(clap::Args, Debug, Clone)]
pub struct GraphArgs {
    /// The TorchScript archive (`.pt`).
    pub model: PathBuf,
    /// Dotted path of a submodule (`layer1.0.conv1`); the root module if absent.
    #[arg(long)]
    pub submodule: Option<String>,
    /// The method to print.
    #[arg(long, default_value = "forward")]
    pub method: String,
    /// Print the graph with every method and function call inlined.
    #[arg(long)]
    pub inlined: bool,
    /// Omit the `# file:line:col` source comments.
    #[arg(long)]
    pub no_source_locations: bool,
    /// Print `{"method": ..., "graph": ...}` instead of the text.
    #[arg(long)]
    pub json: bool,
}

/// `text` as the JSON object `{"method": method, key: text}`.
fn json_text(method: &str, key: &str, text: &str) -> crate::Result<String> {
    let mut value = serde_json::json!({ "method": method });
    value[key] = serde_json::Value::from(text);
    super::output::pretty_json(&value)
}

/// The compiled method `method` of the module at `submodule` (dotted path) in `model`.
fn compiled_method(
    model: &Path,
    submodule: Option<&str>,
    method: &str,
) -> crate::Result<(Arc<CompilationUnit>, Arc<Function>)> {
    let root = Module::load(model)?;
    let module = root.get_submodule(submodule.unwrap_or(""))?;
    let unit = module.compilation_unit()?;
    let class = module.class_name();
    if !unit.class(class).is_some_and(|c| c.has_method(method)) {
        return Err(crate::Error::Module(format!(
            "{}: {class} has no method `{method}`",
            model.display()
        )));
    }
    let function = unit.method(class, method)?;
    Ok((unit, function))
}

/// Print the method's code as `m.code` does.
pub fn run_code(args: &CodeArgs) -> crate::Result<()> {
    let (_, function) = compiled_method(&args.model, args.submodule.as_deref(), &args.method)?;
    let printed = function_code(&function, true)
        .map_err(|e| crate::Error::Module(format!("{}: {e}", args.model.display())))?;
    if args.json {
        println!("{}", json_text(&args.method, "code", &printed.code)?);
    } else {
        // the text of `m.code`, which ends in a newline
        print!("{}", printed.code);
    }
    Ok(())
}

/// Print the method's graph as `str(m.graph)` (or `m.inlined_graph`) does.
pub fn run_graph(args: &GraphArgs) -> crate::Result<()> {
    let (unit, function) = compiled_method(&args.model, args.submodule.as_deref(), &args.method)?;
    let options = PrintOptions {
        source_locations: !args.no_source_locations,
    };
    let text = if args.inlined {
        print_graph(unit.inlined_graph(&function)?.as_ref(), options)
    } else {
        print_graph(&function.graph, options)
    };
    if args.json {
        println!("{}", json_text(&args.method, "graph", &text)?);
    } else {
        print!("{text}");
    }
    Ok(())
}
