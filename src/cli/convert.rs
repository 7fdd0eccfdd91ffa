//! `tsrun convert IN OUT [--dtype D] [--extra NAME=FILE]...`: re-save an archive, optionally
//! casting floating-point parameters and buffers (as `Module.to(dtype)`) and adding extra files.

use crate::runtime::Module;
use crate::tensor::DType;
use crate::{Error, Result};
use std::path::PathBuf;

/// Arguments of `tsrun convert`.
#[derive(Debug, Clone, clap::Args)]
pub struct ConvertArgs {
    /// The input archive.
    #[arg(value_name = "IN")]
    pub input: PathBuf,
    /// Where to write the converted archive.
    #[arg(value_name = "OUT")]
    pub output: PathBuf,
    /// Cast floating-point parameters and buffers: float16, bfloat16, float32 or float64.
    #[arg(long, value_parser = ["float16", "bfloat16", "float32", "float64"])]
    pub dtype: Option<String>,
    /// Add an extra file `extra/NAME` with the contents of FILE (repeatable).
    #[arg(long = "extra", value_name = "NAME=FILE")]
    pub extra: Vec<String>,
}

/// Run `tsrun convert`.
pub fn run(args: &ConvertArgs) -> Result<()> {
    let module = Module::load(&args.input)?;
    if let Some(name) = &args.dtype {
        let dtype = DType::from_name(name)
            .ok_or_else(|| Error::Module(format!("unknown dtype '{name}'")))?;
        module.to_dtype(dtype)?;
    }
    let mut extra = Vec::new();
    for spec in &args.extra {
        let (name, file) = spec
            .split_once('=')
            .ok_or_else(|| Error::Module(format!("--extra expects NAME=FILE, got '{spec}'")))?;
        if name.is_empty() || name.contains("..") || name.starts_with('/') {
            return Err(Error::Module(format!("invalid extra file name '{name}'")));
        }
        let bytes = std::fs::read(file)
            .map_err(|e| Error::Io(std::io::Error::new(e.kind(), format!("{file}: {e}"))))?;
        extra.push((name.to_string(), bytes));
    }
    module.save_with_extra_files(&args.output, &extra)
}
