//! `tsrun state-dict MODEL -o W.safetensors|W.npz [--json]`: export `module.state_dict()`
//! (every parameter and buffer, by PyTorch's dotted names) for other frameworks.

use super::error::CliResult;
use crate::runtime::Module;
use std::path::PathBuf;

/// Arguments of `tsrun state-dict`.
#[derive(Debug, Clone, clap::Args)]
pub struct StateDictArgs {
    /// The TorchScript archive.
    pub model: PathBuf,
    /// Where to write the tensors: `.safetensors` (dtypes kept) or `.npz` (bfloat16 widened to
    /// float32, which numpy lacks).
    #[arg(short = 'o', long = "output", value_name = "W.safetensors|W.npz")]
    pub output: PathBuf,
    /// Print what was written as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Run `tsrun state-dict`.
pub fn run(args: &StateDictArgs) -> CliResult {
    let module = Module::load(&args.model)?;
    let tensors = module.state_dict();
    crate::runtime::module::write_state_dict(&args.output, &tensors)?;
    let bytes: usize = tensors
        .iter()
        .map(|(_, t)| t.numel() * t.dtype().size())
        .sum();
    if args.json {
        let entries: Vec<serde_json::Value> = tensors
            .iter()
            .map(|(n, t)| serde_json::json!({"name": n, "dtype": t.dtype().name(), "shape": t.shape()}))
            .collect();
        let value = serde_json::json!({
            "path": args.output.display().to_string(), "bytes": bytes, "tensors": entries,
        });
        println!("{}", super::output::pretty_json(&value)?);
    } else {
        println!(
            "wrote {} tensors ({bytes} bytes of data) to {}",
            tensors.len(),
            args.output.display()
        );
    }
    Ok(())
}
