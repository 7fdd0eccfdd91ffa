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
    /// Threads calling the one shared module at once, each making the timed calls.
    #[arg(long, default_value_t = 1)]
    pub callers: usize,
    #[command(flatten)]
    pub limits: super::run::LimitArgs,
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
    let options = args.limits.run_options(Some(0))?;
    let call = || match (args.limits.any(), args.method == "forward") {
        (false, true) => module.call_with(inputs.clone(), &ctx),
        (false, false) => module.run_method_with(&args.method, inputs.clone(), &ctx),
        (true, true) => module.call_opts(inputs.clone(), &options),
        (true, false) => module.run_method_opts(&args.method, inputs.clone(), &options),
    };
    let t0 = Instant::now();
    call()?;
    let first = t0.elapsed();
    for _ in 1..args.warmup {
        call()?;
    }
    let n = args.iterations.max(1);
    if args.callers > 1 {
        return bench_callers(args.callers, n, &call);
    }
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

/// `callers` threads each make `n` calls of the one shared module at once; every result must
/// equal the first serial one (a shared module gives each call PyTorch's sequential result).
fn bench_callers(
    callers: usize,
    n: usize,
    call: &(dyn Fn() -> crate::Result<crate::runtime::IValue> + Sync),
) -> crate::Result<()> {
    let reference = fingerprint(&call()?);
    let t0 = Instant::now();
    let mismatches = std::thread::scope(|s| {
        let threads: Vec<_> = (0..callers)
            .map(|_| {
                s.spawn(|| -> crate::Result<usize> {
                    let mut bad = 0;
                    for _ in 0..n {
                        bad += usize::from(fingerprint(&call()?) != reference);
                    }
                    Ok(bad)
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| {
                t.join()
                    .map_err(|_| crate::Error::Module("a bench caller thread panicked".into()))?
            })
            .sum::<crate::Result<usize>>()
    })?;
    let total = t0.elapsed();
    let calls = callers * n;
    println!(
        "{callers} callers x {n} calls: {:.2} ms total, {:.1} calls/s, {mismatches} results differ from the serial one",
        ms(total),
        calls as f64 / total.as_secs_f64().max(1e-9)
    );
    if mismatches > 0 {
        return Err(crate::Error::Module(format!(
            "{mismatches} of {calls} concurrent results differ from the serial result"
        )));
    }
    Ok(())
}

/// A hash of a result's values, bit for bit (tensor elements as f64 bits, anything else as
/// Python prints it).
fn fingerprint(v: &crate::runtime::IValue) -> u64 {
    use crate::runtime::IValue;
    use std::hash::{Hash, Hasher};
    fn feed(v: &IValue, h: &mut std::collections::hash_map::DefaultHasher) {
        match v {
            IValue::Tensor(t) => {
                t.shape().hash(h);
                match t.to_vec::<f64>() {
                    Ok(xs) => xs.iter().for_each(|x| x.to_bits().hash(h)),
                    Err(_) => super::run::describe(v).hash(h),
                }
            }
            IValue::Tuple(t) => t.items().iter().for_each(|x| feed(x, h)),
            IValue::List(l) => l.items().iter().for_each(|x| feed(x, h)),
            other => crate::ops::scalar::python_str(other).hash(h),
        }
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    feed(v, &mut h);
    h.finish()
}
