//! `tsrun run MODEL [-m METHOD] [-i INPUT]... [-o OUT.npz] [--seed N] [--threads N]
//! [--train|--eval] [--set PATH=VALUE]... [--timeout SECONDS] [--max-memory BYTES]`: call a
//! method of a saved module and print its result or write it to an npz.

use crate::ops::scalar::python_str;
use crate::runtime::{IValue, RuntimeError};
use crate::tensor::Tensor;
use crate::Error;
use ndarray::ArrayD;
use ndarray_npy::{ReadNpyExt, ReadableElement};
use num_complex::{Complex32, Complex64};
use std::fs::File;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// The TorchScript archive (`torch.jit.save` output).
    pub model: PathBuf,
    /// The method to call (`forward` calls the module, running its forward hooks).
    #[arg(short = 'm', long = "method", default_value = "forward")]
    pub method: String,
    /// An input: a `.npy` file, or a literal (`3`, `2.5`, `true`, `false`, `none`, `"text"`).
    #[arg(short = 'i', long = "input")]
    pub inputs: Vec<String>,
    /// Write every leaf of the result to this `.npz` (`out`, `out.0`, `out.<key>`, ...; strings
    /// as `<U` arrays) with a `structure.json` entry describing the whole result (src/cli/output.rs).
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// Print the whole result as JSON (tensors with their data inline; src/cli/output.rs).
    #[arg(long)]
    pub json: bool,
    /// Seed of the random generator (as `torch.manual_seed`).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Number of worker threads (as `torch.set_num_threads`).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Call a submodule instead of the root (dotted path, as `get_submodule`).
    #[arg(long)]
    pub submodule: Option<String>,
    /// `module.train()` before the call (dropout and batch norm in training mode).
    #[arg(long, conflicts_with = "eval")]
    pub train: bool,
    /// `module.eval()` before the call.
    #[arg(long)]
    pub eval: bool,
    /// Set a typed attribute before the call, e.g. `drop.mc_dropout_enabled=false` (the value
    /// is a literal as for `-i`; repeatable; applied after --train/--eval).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub set: Vec<String>,
    #[command(flatten)]
    pub limits: LimitArgs,
}

/// Limits of each call (`RunOptions`), shared by `run` and `bench`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct LimitArgs {
    /// Stop a call that runs longer than this many seconds.
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<f64>,
    /// Stop a call that holds more than this many bytes of tensor storage at once (also the
    /// largest single allocation).
    #[arg(long = "max-memory", value_name = "BYTES")]
    pub max_memory: Option<usize>,
}

impl LimitArgs {
    /// Whether any limit was given.
    pub fn any(&self) -> bool {
        self.timeout.is_some() || self.max_memory.is_some()
    }

    /// The options of one call with these limits and `seed`.
    pub fn run_options(&self, seed: Option<u64>) -> crate::Result<crate::runtime::RunOptions> {
        let mut o = crate::runtime::RunOptions {
            seed,
            ..Default::default()
        };
        if let Some(t) = self.timeout {
            o.timeout = Some(std::time::Duration::try_from_secs_f64(t).map_err(|_| {
                cli_err(format!(
                    "--timeout {t}: expected a non-negative number of seconds"
                ))
            })?);
        }
        if let Some(m) = self.max_memory {
            o.max_live_bytes = Some(m);
            o.max_alloc_bytes = o.max_alloc_bytes.min(m);
        }
        Ok(o)
    }
}

/// Run the command: load, call, then print the result or write it to the npz.
pub fn run(args: &RunArgs) -> crate::Result<()> {
    if let Some(n) = args.threads {
        crate::runtime::set_num_threads(n)?;
    }
    let root = crate::runtime::Module::load(&args.model)?;
    if args.train || args.eval {
        root.train(args.train);
    }
    for spec in &args.set {
        let (path, value) = spec
            .split_once('=')
            .ok_or_else(|| cli_err(format!("--set expects PATH=VALUE, got '{spec}'")))?;
        root.set_attr(path.trim(), parse_input(value)?)?;
    }
    let module = match &args.submodule {
        Some(path) => root.get_submodule(path)?,
        None => root,
    };
    let inputs = args
        .inputs
        .iter()
        .map(|i| parse_input(i))
        .collect::<crate::Result<Vec<_>>>()?;
    let options = args.limits.run_options(Some(args.seed.unwrap_or(0)))?;
    let result = if args.method == "forward" {
        module.call_opts(inputs, &options)?
    } else {
        module.run_method_opts(&args.method, inputs, &options)?
    };
    let unit = module.compilation_unit()?;
    let fields = |class: &str| {
        unit.class(class)
            .map(|c| c.fields.iter().map(|(n, _, _)| n.clone()).collect())
    };
    if let Some(path) = &args.output {
        super::output::write_npz(path, &result, &fields)?;
    }
    if args.json {
        println!("{}", super::output::to_json(&result, &fields)?);
    } else if args.output.is_none() {
        println!("{}", describe(&result));
    }
    Ok(())
}

fn cli_err(msg: impl Into<String>) -> Error {
    RuntimeError::Other(msg.into()).into()
}

/// Parse one `-i` argument.
pub fn parse_input(text: &str) -> crate::Result<IValue> {
    let t = text.trim();
    if t.ends_with(".npy") || Path::new(t).is_file() {
        return read_npy(Path::new(t)).map(IValue::Tensor);
    }
    match t {
        "true" | "True" => return Ok(IValue::Bool(true)),
        "false" | "False" => return Ok(IValue::Bool(false)),
        "none" | "None" => return Ok(IValue::None),
        _ => {}
    }
    if let Ok(i) = t.parse::<i64>() {
        return Ok(IValue::Int(i));
    }
    if let Ok(f) = t.parse::<f64>() {
        return Ok(IValue::Double(f));
    }
    for q in ['"', '\''] {
        if let Some(inner) = t.strip_prefix(q).and_then(|s| s.strip_suffix(q)) {
            return Ok(IValue::str(inner));
        }
    }
    Err(cli_err(format!(
        "input {text:?} is neither a .npy file nor a literal (int, float, true, false, none, \"string\")"
    )))
}

fn try_read<T: ReadableElement + crate::tensor::Element>(path: &Path) -> Option<Tensor> {
    let f = File::open(path).ok()?;
    let a = ArrayD::<T>::read_npy(f).ok()?;
    Tensor::from_array(a).ok()
}

/// Read a `.npy` file as a tensor of its own dtype.
pub fn read_npy(path: &Path) -> crate::Result<Tensor> {
    File::open(path)?;
    try_read::<f32>(path)
        .or_else(|| try_read::<f64>(path))
        .or_else(|| try_read::<i64>(path))
        .or_else(|| try_read::<i32>(path))
        .or_else(|| try_read::<bool>(path))
        .or_else(|| try_read::<u8>(path))
        .or_else(|| try_read::<i8>(path))
        .or_else(|| try_read::<i16>(path))
        .or_else(|| try_read::<Complex32>(path))
        .or_else(|| try_read::<Complex64>(path))
        .ok_or_else(|| {
            cli_err(format!(
                "{}: not a .npy of a supported dtype (float32/64, int8/16/32/64, uint8, bool, complex)",
                path.display()
            ))
        })
}

/// The printed form of a result: tensors as PyTorch's repr (with their shape), containers
/// element by element.
pub fn describe(v: &IValue) -> String {
    match v {
        IValue::Tensor(t) => format!(
            "{} (shape {:?}, {})",
            crate::ops::scalar::tensor_repr(t),
            t.shape(),
            t.dtype()
        ),
        IValue::Tuple(t) => {
            let items: Vec<String> = t.items().iter().map(describe).collect();
            if items.len() == 1 {
                format!("({},)", items.join(", "))
            } else {
                format!("({})", items.join(",\n "))
            }
        }
        IValue::List(l) if l.items().iter().any(|x| matches!(x, IValue::Tensor(_))) => {
            let items: Vec<String> = l.items().iter().map(describe).collect();
            format!("[{}]", items.join(",\n "))
        }
        IValue::Dict(d) => {
            let items: Vec<String> = d
                .entries()
                .iter()
                .map(|(k, x)| format!("{}: {}", python_str(k), describe(x)))
                .collect();
            format!("{{{}}}", items.join(",\n "))
        }
        IValue::String(s) => format!("{s:?}"),
        other => python_str(other),
    }
}
