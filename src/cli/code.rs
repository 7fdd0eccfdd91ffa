//! `tsrun code` and `tsrun graph`: print a method of a loaded module as `m.code` /
//! `m.graph` / `m.inlined_graph` show it.

use std::path::PathBuf;

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
}

fn not_wired(what: &str, model: &std::path::Path) -> crate::Error {
    crate::Error::Module(format!(
        "tsrun {what} {}: printing needs the compiled module, which this build cannot load yet \
         (module loading and compilation are not wired into the CLI)",
        model.display()
    ))
}

/// Print the method's code as `m.code` does.
pub fn run_code(args: &CodeArgs) -> crate::Result<()> {
    Err(not_wired("code", &args.model))
}

/// Print the method's graph as `str(m.graph)` (or `m.inlined_graph`) does.
pub fn run_graph(args: &GraphArgs) -> crate::Result<()> {
    Err(not_wired("graph", &args.model))
}
