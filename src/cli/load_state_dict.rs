//! `tsrun load-state-dict IN.pt WEIGHTS.{safetensors,npz,pt} OUT.pt [--strict] [--assign]`:
//! `module.load_state_dict(weights)` and save; prints the missing and unexpected keys.

use crate::runtime::Module;
use crate::Result;
use std::path::PathBuf;

/// Arguments of `tsrun load-state-dict`.
#[derive(Debug, Clone, clap::Args)]
pub struct LoadStateDictArgs {
    /// The archive to load the weights into.
    #[arg(value_name = "IN")]
    pub input: PathBuf,
    /// The weights: safetensors, npz, a TorchScript archive or a `torch.save` state dict.
    #[arg(value_name = "WEIGHTS")]
    pub weights: PathBuf,
    /// Where to write the archive with the loaded weights.
    #[arg(value_name = "OUT")]
    pub output: PathBuf,
    /// Missing or unexpected keys are an error (PyTorch's `strict=True`).
    #[arg(long)]
    pub strict: bool,
    /// Replace the tensors instead of copying into them (keeps the weights' dtypes).
    #[arg(long)]
    pub assign: bool,
}

/// Run `tsrun load-state-dict`.
pub fn run(args: &LoadStateDictArgs) -> Result<()> {
    let module = Module::load(&args.input)?;
    let keys = module.load_state_dict_from(&args.weights, args.strict, args.assign)?;
    module.save(&args.output)?;
    println!("missing keys: {:?}", keys.missing_keys);
    println!("unexpected keys: {:?}", keys.unexpected_keys);
    Ok(())
}
