//! `tsrun average OUT.pt IN1.pt IN2.pt ... [--ema DECAY] [--use-buffers] [--update-bn DATA.npz]`:
//! average snapshots of one architecture as `torch.optim.swa_utils.AveragedModel` does (SWA by
//! default) and save the average as an archive of that architecture.

use crate::runtime::module::read_npz;
use crate::runtime::Module;
use crate::swa::{update_bn, AveragedModel};
use crate::values::IValue;
use crate::{Error, Result};
use std::path::PathBuf;

/// Arguments of `tsrun average`.
#[derive(Debug, Clone, clap::Args)]
pub struct AverageArgs {
    /// Where to write the averaged archive.
    #[arg(value_name = "OUT")]
    pub output: PathBuf,
    /// The snapshots, in update order (the first is copied, the others averaged in).
    #[arg(value_name = "IN", required = true)]
    pub inputs: Vec<PathBuf>,
    /// Exponential moving average with this decay instead of equal weights.
    #[arg(long)]
    pub ema: Option<f64>,
    /// Average buffers too (otherwise they are those of the last snapshot).
    #[arg(long)]
    pub use_buffers: bool,
    /// Then recompute batch-norm statistics (`update_bn`) over the arrays of this npz, one
    /// batch per array, in stored order.
    #[arg(long, value_name = "DATA.npz")]
    pub update_bn: Option<PathBuf>,
}

/// Run `tsrun average`; prints how many snapshots were averaged.
pub fn run(args: &AverageArgs) -> Result<()> {
    let first = args
        .inputs
        .first()
        .ok_or_else(|| Error::Module("tsrun average needs at least one snapshot".into()))?;
    let mut avg = AveragedModel::new(&Module::load(first)?)?.use_buffers(args.use_buffers);
    if let Some(decay) = args.ema {
        avg = avg.ema(decay)?;
    }
    for path in &args.inputs {
        avg.update_parameters(&Module::load(path)?)?;
    }
    if let Some(data) = &args.update_bn {
        let batches = read_npz(data)?;
        update_bn(batches.into_values().map(IValue::Tensor), avg.module())?;
    }
    avg.module().save(&args.output)?;
    println!(
        "averaged {} snapshots into {}",
        avg.n_averaged(),
        args.output.display()
    );
    Ok(())
}
