//! `tsrun bench MODEL [-m METHOD] [-i INPUT]... [-n N] [--warmup W] [--threads T]`: load time and
//! the latency of repeated calls, reported as median and minimum (the side-by-side script against
//! libtorch reads this line).

use super::run::parse_input;
use crate::ops::OpContext;
use crate::runtime::Module;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// The TorchScript archive.
    pub model: PathBuf,
    /// The method to call (`forward` calls the module, with its hooks).
    #[arg(short = 'm', long = "method", default_value = "forward")]
    pub method: String,
    /// An input: a `.npy` file or a literal, as for `tsrun run`.
    #[arg(short = 'i', long = "input")]
    pub inputs: Vec<String>,
    /// Timed calls.
    #[arg(short = 'n', default_value_t = 30)]
    pub iterations: usize,
    /// Untimed calls first (the first call compiles the methods it reaches).
    #[arg(long, default_value_t = 3)]
    pub warmup: usize,
    /// Number of worker threads (as `torch.set_num_threads`).
    #[arg(long)]
    pub threads: Option<usize>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Median of at least one duration.
fn median(mut times: Vec<Duration>) -> Duration {
    times.sort_unstable();
    times[times.len() / 2]
}

pub fn run(args: &BenchArgs) -> crate::Result<()> {
    if let Some(n) = args.threads {
        crate::runtime::set_num_threads(n)?;
    }
    let load_runs = 5;
    let mut load_times = Vec::with_capacity(load_runs);
    let mut module = None;
    for _ in 0..load_runs {
        let t0 = Instant::now();
        module = Some(Module::load(&args.model)?);
        load_times.push(t0.elapsed());
    }
    let Some(module) = module else {
        return Ok(());
    };
    let inputs = args
        .inputs
        .iter()
        .map(|i| parse_input(i))
        .collect::<crate::Result<Vec<_>>>()?;
    let ctx = OpContext::with_seed(0);
    let call = || {
        if args.method == "forward" {
            module.call_with(inputs.clone(), &ctx)
        } else {
            module.run_method_with(&args.method, inputs.clone(), &ctx)
        }
    };
    let t0 = Instant::now();
    call()?;
    let first = t0.elapsed();
    for _ in 1..args.warmup {
        call()?;
    }
    let n = args.iterations.max(1);
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t0 = Instant::now();
        std::hint::black_box(call()?);
        times.push(t0.elapsed());
    }
    let min = times.iter().copied().min().unwrap_or_default();
    println!(
        "load {:.2} ms | forward median {:.2} ms, min {:.2} ms (n={n}, first call {:.2} ms, {} threads)",
        ms(median(load_times)),
        ms(median(times)),
        ms(min),
        ms(first),
        rayon::current_num_threads()
    );
    Ok(())
}
