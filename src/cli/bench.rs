//! `tsrun bench MODEL [-m METHOD] [-i INPUT]... [-n N] [--warmup W] [--threads T] [--json]`: load
//! time and the latency of repeated calls. The text line keeps three significant digits at every
//! scale; `--json` prints one object (the side-by-side script against libtorch and ONNX Runtime
//! reads it).

use crate::ops::OpContext;
use crate::runtime::Module;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// The TorchScript archive.
    pub model: PathBuf,
    /// The method to call (`forward` calls the module, with its hooks).
    #[arg(short = 'm', long = "method", default_value = "forward")]
    pub method: String,
    #[command(flatten)]
    pub inputs: super::inputs::InputArgs,
    /// Timed calls.
    #[arg(short = 'n', default_value_t = 30)]
    pub iterations: usize,
    /// Untimed calls first (the first call compiles the methods it reaches).
    #[arg(long, default_value_t = 3)]
    pub warmup: usize,
    /// Number of worker threads (as `torch.set_num_threads`).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Print one JSON object (seconds, bytes) instead of the text line.
    #[arg(long)]
    pub json: bool,
    /// Threads calling the one shared module at once, each making the timed calls.
    #[arg(long, default_value_t = 1)]
    pub callers: usize,
    /// After the timed calls, make as many again timing each operator, and print where a
    /// call's time goes (timing every operator slows these calls, so they are kept out of the
    /// median).
    #[arg(long)]
    pub profile: bool,
    #[command(flatten)]
    pub limits: super::run::LimitArgs,
}

/// What one `tsrun bench` run measured; times in seconds.
#[derive(serde::Serialize, Debug, Clone, PartialEq)]
pub struct BenchReport {
    pub median_s: f64,
    pub min_s: f64,
    pub max_s: f64,
    /// The first call (it builds the plans of the methods it reaches).
    pub first_call_s: f64,
    /// Median of several loads of the archive.
    pub load_s: f64,
    /// The process's peak resident set (`VmHWM`); `None` where the OS does not report it.
    pub peak_rss_bytes: Option<u64>,
    /// Minor page faults (all threads) during the first call; `None` where the OS does not
    /// report them.
    pub first_call_minor_faults: Option<u64>,
    /// Minor page faults per timed call (their mean); `None` as above.
    pub minor_faults_per_call: Option<f64>,
    /// CPU time (user + system, all threads) of the first call, and of a timed call (their
    /// mean): on a shared machine, what the calls cost regardless of how long others held
    /// the cores; `None` where the OS does not report it.
    pub first_call_cpu_s: Option<f64>,
    pub cpu_s_per_call: Option<f64>,
    pub threads: usize,
    pub iterations: usize,
    /// Threads calling the shared module at once (each made `iterations` timed calls).
    pub callers: usize,
    /// Calls completed per second over all callers (`callers` > 1 only).
    pub calls_per_s: Option<f64>,
    /// Where a call's time goes (`--profile` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<CallProfile>,
}

/// The time of the profiled calls by operator, per call (their mean).
#[derive(serde::Serialize, Debug, Clone, PartialEq)]
pub struct CallProfile {
    /// Profiled calls.
    pub calls: usize,
    /// Wall time of a profiled call.
    pub call_s: f64,
    /// The operators, the most expensive first.
    pub ops: Vec<OpShare>,
    /// The call's time outside every operator: the interpreter's calls, branches and loops.
    pub between_ops_s: f64,
}

/// One operator's part of a profiled call.
#[derive(serde::Serialize, Debug, Clone, PartialEq)]
pub struct OpShare {
    pub op: String,
    /// Times it ran per call.
    pub runs: f64,
    /// Its wall time per call.
    pub time_s: f64,
}

impl CallProfile {
    fn new(calls: usize, wall: Duration, ops: Vec<crate::runtime::interpreter::OpTime>) -> Self {
        let n = calls.max(1) as f64;
        let ops: Vec<OpShare> = ops
            .into_iter()
            .map(|o| OpShare {
                op: o.op,
                runs: o.calls as f64 / n,
                time_s: o.total.as_secs_f64() / n,
            })
            .collect();
        let call_s = wall.as_secs_f64() / n;
        let in_ops: f64 = ops.iter().map(|o| o.time_s).sum();
        CallProfile {
            calls,
            call_s,
            ops,
            between_ops_s: (call_s - in_ops).max(0.0),
        }
    }

    /// Rows shown in the text table; the JSON has them all.
    const ROWS: usize = 25;

    fn print(&self) {
        println!(
            "profile of {} more calls ({} each, timing included):",
            self.calls,
            format_seconds(self.call_s)
        );
        println!("  time/call   share  runs/call  operator");
        let share = |t: f64| 100.0 * t / self.call_s.max(1e-12);
        for o in self.ops.iter().take(Self::ROWS) {
            println!(
                "  {:>9}  {:5.1}%  {:>9}  {}",
                format_seconds(o.time_s),
                share(o.time_s),
                format_runs(o.runs),
                o.op
            );
        }
        if self.ops.len() > Self::ROWS {
            let rest: f64 = self.ops[Self::ROWS..].iter().map(|o| o.time_s).sum();
            println!(
                "  {:>9}  {:5.1}%  {:>9}  ({} more operators)",
                format_seconds(rest),
                share(rest),
                "",
                self.ops.len() - Self::ROWS
            );
        }
        println!(
            "  {:>9}  {:5.1}%  {:>9}  (between operators: calls, branches, loops)",
            format_seconds(self.between_ops_s),
            share(self.between_ops_s),
            ""
        );
    }
}

/// Runs per call: a whole number as one, else two decimals.
fn format_runs(runs: f64) -> String {
    if (runs - runs.round()).abs() < 1e-9 {
        format!("{runs:.0}")
    } else {
        format!("{runs:.2}")
    }
}

/// `secs` with three significant digits in the unit that keeps the number in [1, 1000)
/// (`10.2 us`, `1.50 ms`, `45.9 ms`, `2.31 s`).
pub fn format_seconds(secs: f64) -> String {
    if !secs.is_finite() || secs <= 0.0 {
        return format!("{secs} s");
    }
    let (value, unit) = [(1.0, "s"), (1e-3, "ms"), (1e-6, "us")]
        .into_iter()
        .find(|&(scale, _)| secs >= scale * 0.9995)
        .map_or((secs * 1e9, "ns"), |(scale, unit)| (secs / scale, unit));
    // Rounding may carry into a fourth digit (999.96 -> 1000): keep three significant digits.
    let digits = if value >= 99.95 {
        0
    } else if value >= 9.995 {
        1
    } else {
        2
    };
    format!("{value:.digits$} {unit}")
}

/// Median of at least one duration.
fn median(times: &mut [Duration]) -> Duration {
    times.sort_unstable();
    times.get(times.len() / 2).copied().unwrap_or_default()
}

/// Peak resident set size of this process, from `/proc/self/status` (Linux).
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line
        .trim_start_matches("VmHWM:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

/// What the process has used so far (all its threads): minor page faults, and CPU time
/// (user + system) in seconds.
#[derive(Clone, Copy)]
struct Usage {
    minor_faults: u64,
    cpu_s: f64,
}

impl Usage {
    /// Faults and CPU seconds from `self` to `later`, per one of `calls`.
    fn per_call(self, later: Usage, calls: usize) -> (f64, f64) {
        let n = calls.max(1) as f64;
        (
            later.minor_faults.saturating_sub(self.minor_faults) as f64 / n,
            (later.cpu_s - self.cpu_s).max(0.0) / n,
        )
    }
}

/// `getrusage` rather than `/proc/self/stat`: reading the proc file right before the first
/// call would evict part of the caches the call is measured with.
#[cfg(unix)]
fn usage() -> Option<Usage> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `usage` is a valid, writable `rusage`; getrusage fills it and returns 0 on success.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    // SAFETY: zero-initialized (all its fields are integers) and filled by getrusage on success.
    let usage = unsafe { usage.assume_init() };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    (rc == 0)
        .then(|| {
            Some(Usage {
                minor_faults: u64::try_from(usage.ru_minflt).ok()?,
                cpu_s: seconds(usage.ru_utime) + seconds(usage.ru_stime),
            })
        })
        .flatten()
}

#[cfg(not(unix))]
fn usage() -> Option<Usage> {
    None
}

/// Runs longer than this get a progress bar on a terminal (not with `--quiet`).
const PROGRESS_AFTER: Duration = Duration::from_secs(2);

/// `None` when no bar is shown: even a hidden bar's tick computes a rate estimate (and its
/// first one faults in the math library's pages) inside the timed loop.
fn progress_bar(expected: Duration, n: usize) -> Option<indicatif::ProgressBar> {
    let quiet = super::log::verbosity() == super::log::Verbosity::Quiet;
    if quiet || expected < PROGRESS_AFTER || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(n as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} calls, eta {eta}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    Some(bar)
}

pub fn measure(args: &BenchArgs) -> super::error::CliResult<BenchReport> {
    if let Some(n) = args.threads {
        crate::runtime::set_num_threads(n)?;
    }
    let load_runs = 5;
    let mut load_times = Vec::with_capacity(load_runs);
    let mut module = None;
    for _ in 0..load_runs {
        // The previous load is dropped first, so peak RSS counts one module.
        drop(module.take());
        let t0 = Instant::now();
        let loaded = Module::load(&args.model)?;
        // Compiling the method is part of getting ready to serve calls, as a session's
        // construction is in ONNX Runtime: it counts in the load time, not the first call.
        loaded.prepare(&[args.method.as_str()])?;
        module = Some(loaded);
        load_times.push(t0.elapsed());
    }
    let Some(module) = module else {
        return Err(crate::Error::from(crate::error::RuntimeError::Other(
            "bench: nothing loaded".into(),
        ))
        .into());
    };
    let resolved = args.inputs.resolve(&module, &args.method, 0)?;
    let inputs = if resolved.named.is_empty() {
        resolved.positional
    } else {
        module.bind_arguments(&args.method, resolved.positional, resolved.named)?
    };
    let ctx = OpContext::with_seed(0);
    let options = args.limits.run_options(Some(0))?;
    let call = || match (args.limits.any(), args.method == "forward") {
        (false, true) => module.call_with(inputs.clone(), &ctx),
        (false, false) => module.run_method_with(&args.method, inputs.clone(), &ctx),
        (true, true) => module.call_opts(inputs.clone(), &options),
        (true, false) => module.run_method_opts(&args.method, inputs.clone(), &options),
    };
    let before = usage();
    let t0 = Instant::now();
    call()?;
    let first = t0.elapsed();
    let first_call = before.zip(usage()).map(|(a, b)| a.per_call(b, 1));
    for _ in 1..args.warmup {
        call()?;
    }
    let n = args.iterations.max(1);
    let bar = progress_bar(first.saturating_mul(n as u32), n);
    let mut calls_per_s = None;
    let before = usage();
    let mut times = if args.callers > 1 {
        let (times, total) = bench_callers(args.callers, n, &call)?;
        calls_per_s = Some(times.len() as f64 / total.as_secs_f64().max(1e-9));
        times
    } else {
        let mut times = Vec::with_capacity(n);
        for _ in 0..n {
            let t0 = Instant::now();
            std::hint::black_box(call()?);
            times.push(t0.elapsed());
            if let Some(bar) = &bar {
                bar.inc(1);
            }
        }
        if let Some(bar) = &bar {
            bar.finish_and_clear();
        }
        times
    };
    let per_call = before.zip(usage()).map(|(a, b)| a.per_call(b, times.len()));
    let profile = if args.profile {
        let t0 = Instant::now();
        let (done, ops) = crate::runtime::interpreter::profile_calls(|| {
            (0..n).try_for_each(|_| call().map(drop))
        });
        done?;
        Some(CallProfile::new(n, t0.elapsed(), ops))
    } else {
        None
    };
    let min = times.iter().copied().min().unwrap_or_default();
    let max = times.iter().copied().max().unwrap_or_default();
    Ok(BenchReport {
        median_s: median(&mut times).as_secs_f64(),
        min_s: min.as_secs_f64(),
        max_s: max.as_secs_f64(),
        first_call_s: first.as_secs_f64(),
        load_s: median(&mut load_times).as_secs_f64(),
        peak_rss_bytes: peak_rss_bytes(),
        first_call_minor_faults: first_call.map(|(faults, _)| faults as u64),
        minor_faults_per_call: per_call.map(|(faults, _)| faults),
        first_call_cpu_s: first_call.map(|(_, cpu)| cpu),
        cpu_s_per_call: per_call.map(|(_, cpu)| cpu),
        threads: rayon::current_num_threads(),
        iterations: n,
        callers: args.callers.max(1),
        calls_per_s,
        profile,
    })
}

pub fn run(args: &BenchArgs) -> super::error::CliResult {
    let r = measure(args)?;
    if args.json {
        let text = serde_json::to_string(&r).map_err(|e| {
            crate::Error::from(crate::error::RuntimeError::Other(format!("bench: {e}")))
        })?;
        println!("{text}");
        return Ok(());
    }
    let rss = r.peak_rss_bytes.map_or_else(
        || "unknown".to_string(),
        |b| format!("{:.1} MiB", b as f64 / 1048576.0),
    );
    println!(
        "load {} | {} median {}, min {}, max {} (n={}, first call {}, {} threads, peak RSS {rss})",
        format_seconds(r.load_s),
        args.method,
        format_seconds(r.median_s),
        format_seconds(r.min_s),
        format_seconds(r.max_s),
        r.iterations,
        format_seconds(r.first_call_s),
        r.threads,
    );
    if let Some(rate) = r.calls_per_s {
        println!(
            "{} callers x {} calls: {rate:.1} calls/s, 0 results differ from the serial one",
            r.callers, r.iterations
        );
    }
    if let Some(profile) = &r.profile {
        profile.print();
    }
    Ok(())
}

/// `callers` threads each make `n` calls of the one shared module at once; every result must
/// equal the first serial one (a shared module gives each call PyTorch's sequential result).
/// Returns every call's latency and the wall time of the whole run.
fn bench_callers(
    callers: usize,
    n: usize,
    call: &(dyn Fn() -> crate::Result<crate::values::IValue> + Sync),
) -> crate::Result<(Vec<Duration>, Duration)> {
    let reference = fingerprint(&call()?);
    let t0 = Instant::now();
    let per_thread = std::thread::scope(|s| {
        let threads: Vec<_> = (0..callers)
            .map(|_| {
                s.spawn(|| -> crate::Result<(Vec<Duration>, usize)> {
                    let mut bad = 0;
                    let mut times = Vec::with_capacity(n);
                    for _ in 0..n {
                        let t = Instant::now();
                        let v = call()?;
                        times.push(t.elapsed());
                        bad += usize::from(fingerprint(&v) != reference);
                    }
                    Ok((times, bad))
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| {
                t.join()
                    .map_err(|_| crate::Error::Module("a bench caller thread panicked".into()))?
            })
            .collect::<crate::Result<Vec<_>>>()
    })?;
    let total = t0.elapsed();
    let mismatches: usize = per_thread.iter().map(|(_, bad)| bad).sum();
    let calls = callers * n;
    if mismatches > 0 {
        return Err(crate::Error::Module(format!(
            "{mismatches} of {calls} concurrent results differ from the serial result"
        )));
    }
    let times = per_thread.into_iter().flat_map(|(t, _)| t).collect();
    Ok((times, total))
}

/// A hash of a result's values, bit for bit (tensor elements as f64 bits, anything else as
/// Python prints it).
fn fingerprint(v: &crate::values::IValue) -> u64 {
    use crate::values::IValue;
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
            other => crate::values::python_str(other).hash(h),
        }
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    feed(v, &mut h);
    h.finish()
}
