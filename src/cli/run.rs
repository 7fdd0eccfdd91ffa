//! `tsrun run MODEL [-m METHOD] [-i INPUT]... [--random SHAPE[:DTYPE]]... [--cast-inputs]
//! [-o OUT.npz|.npy|.safetensors] [--json] [--seed N] [--threads N] [--train|--eval]
//! [--set PATH=VALUE]... [--timeout SECONDS] [--max-memory BYTES]`: call a method of a saved
//! module and print its result as Python's repr, or write it to a file.

use super::error::{usage, CliResult};
use super::inputs::parse_literal;
pub use super::inputs::read_npy;
use super::log;
use crate::values::IValue;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// The TorchScript archive (`torch.jit.save` output).
    pub model: PathBuf,
    /// The method to call (`forward` calls the module, running its forward hooks).
    #[arg(short = 'm', long = "method", default_value = "forward")]
    pub method: String,
    #[command(flatten)]
    pub inputs: super::inputs::InputArgs,
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

/// Limits and options of each call (`RunOptions`), shared by `run`, `compare` and `bench`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct LimitArgs {
    /// Whose arithmetic quantized convolutions follow, as `torch.backends.quantized.engine`
    /// when PyTorch loaded the model: `native` (PyTorch's default engine, `x86`, as it runs on
    /// this CPU), `fbgemm`, `x86` as on an AVX512-VNNI CPU (symmetric-weight convolutions
    /// through oneDNN, whose rounding differs in rare outputs), or `qnnpack`
    #[arg(long = "quantized-engine", value_enum, default_value = "native")]
    pub quantized_engine: EngineArg,
    /// Stop a call that runs longer than this many seconds.
    #[arg(long, value_name = "SECONDS")]
    pub timeout: Option<f64>,
    /// Stop a call that holds more than this many bytes of tensor storage at once (also the
    /// largest single allocation).
    #[arg(long = "max-memory", value_name = "BYTES")]
    pub max_memory: Option<usize>,
}

impl LimitArgs {
    /// Whether any limit (or a non-default option) was given.
    pub fn any(&self) -> bool {
        self.timeout.is_some()
            || self.max_memory.is_some()
            || self.quantized_engine != EngineArg::Native
    }

    /// The options of one call with these limits and `seed`.
    pub fn run_options(&self, seed: Option<u64>) -> CliResult<crate::runtime::RunOptions> {
        let mut o = crate::runtime::RunOptions {
            seed,
            quantized_engine: match self.quantized_engine {
                EngineArg::Native => crate::runtime::QuantizedEngine::Native,
                EngineArg::Fbgemm => crate::runtime::QuantizedEngine::Fbgemm,
                EngineArg::X86 => crate::runtime::QuantizedEngine::X86,
                EngineArg::Qnnpack => crate::runtime::QuantizedEngine::Qnnpack,
            },
            ..Default::default()
        };
        if let Some(t) = self.timeout {
            o.timeout = Some(std::time::Duration::try_from_secs_f64(t).map_err(|_| {
                usage(format!(
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

/// `--quantized-engine` values.
#[derive(clap::ValueEnum, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum EngineArg {
    /// PyTorch's default engine as it runs on this CPU
    #[default]
    Native,
    /// fbgemm's requantization
    Fbgemm,
    /// PyTorch's x86 engine on an AVX512-VNNI CPU (oneDNN for symmetric-weight convolutions)
    X86,
    /// PyTorch's qnnpack engine (as on x86: QNNPACK's SSE2 kernels)
    Qnnpack,
}

/// Run the command: load, call, then print the result or write it to the npz.
pub fn run(args: &RunArgs) -> CliResult {
    if let Some(n) = args.threads {
        crate::runtime::set_num_threads(n)?;
    }
    let root = load_module(&args.model)?;
    if args.train || args.eval {
        root.train(args.train);
    }
    for spec in &args.set {
        let (path, value) = spec
            .split_once('=')
            .ok_or_else(|| usage(format!("--set expects PATH=VALUE, got '{spec}'")))?;
        root.set_attr(path.trim(), parse_literal(value)?)?;
    }
    let module = match &args.submodule {
        Some(path) => root.get_submodule(path)?,
        None => root,
    };
    let seed = args.seed.unwrap_or(0);
    let result = call(&module, &args.method, &args.inputs, &args.limits, seed)?;
    let fields = field_names(&module)?;
    if let Some(path) = &args.output {
        super::output::write_result(path, &result, &fields)?;
    }
    if args.json {
        println!("{}", super::output::to_json(&result, &fields)?);
    } else if args.output.is_none() {
        println!("{}", super::repr::python_repr(&result, &fields));
    }
    Ok(())
}

/// Load the archive at `path`; with `-v`, say how long that took and how many threads kernels
/// use.
pub fn load_module(path: &std::path::Path) -> crate::Result<crate::runtime::Module> {
    let started = Instant::now();
    let module = crate::runtime::Module::load(path)?;
    log::info(|| {
        format!(
            "loaded {} in {}; kernels use {} threads",
            path.display(),
            log::elapsed(started.elapsed()),
            rayon::current_num_threads()
        )
    });
    Ok(module)
}

/// Call `method` of `module` on the inputs of `inputs` within `limits`; `seed` seeds the call's
/// generator and `--random`.
pub fn call(
    module: &crate::runtime::Module,
    method: &str,
    inputs: &super::inputs::InputArgs,
    limits: &LimitArgs,
    seed: u64,
) -> CliResult<IValue> {
    let resolved = inputs.resolve(module, method, seed)?;
    let positional = if resolved.named.is_empty() {
        resolved.positional
    } else {
        module.bind_arguments(method, resolved.positional, resolved.named)?
    };
    let options = limits.run_options(Some(seed))?;
    let started = Instant::now();
    let result = if method == "forward" {
        module.call_opts(positional, &options)
    } else {
        module.run_method_opts(method, positional, &options)
    };
    // the first call of a method compiles it (and what it calls) before running it
    log::info(|| {
        format!(
            "{method} {} in {} (compilation included)",
            if result.is_ok() { "ran" } else { "failed" },
            log::elapsed(started.elapsed())
        )
    });
    Ok(result?)
}

/// NamedTuple field names by class, from the module's compilation unit (for `--json`, `-o`).
pub fn field_names(
    module: &crate::runtime::Module,
) -> crate::Result<impl Fn(&str) -> Option<Vec<String>>> {
    let unit = module.compilation_unit()?;
    Ok(move |class: &str| {
        unit.class(class)
            .map(|c| c.fields.iter().map(|(n, _, _)| n.clone()).collect())
    })
}

/// The printed form of a result, as Python's `print(repr(result))` (NamedTuples without their
/// field names: `field_names` gives them).
pub fn describe(v: &IValue) -> String {
    super::repr::python_repr(v, &|_| None)
}
