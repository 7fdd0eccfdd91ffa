//! `tsrun compare MODEL [-i INPUT]... --expected OUT.npz [--rtol R] [--atol A] [--calls N] [--json]`: run
//! the model and check every leaf of its result against arrays PyTorch wrote, reporting the
//! worst element of each leaf; exit code 1 when any leaf is outside the tolerance.
//!
//! The comparison is `tsrun::golden`'s: leaves pair by name (`out`, `out.0`, `out.<key>`, as
//! `tsrun run -o` writes them), else by position; an element matches as `torch.allclose`
//! checks it, with NaN matching NaN; a string leaf matches a numpy unicode (`<U`) array of the
//! same name holding its text; a missing or extra leaf fails.

use super::error::{usage, CliError, CliResult};
use super::inputs::InputArgs;
use crate::golden::{Report, Tolerance};
use std::path::PathBuf;

/// Arguments of `tsrun compare`.
#[derive(Debug, Clone, clap::Args)]
pub struct CompareArgs {
    /// The TorchScript archive.
    pub model: PathBuf,
    /// The method to call (`forward` calls the module, with its hooks).
    #[arg(short = 'm', long = "method", default_value = "forward")]
    pub method: String,
    #[command(flatten)]
    pub inputs: InputArgs,
    /// The expected result: an `.npz` (or `.safetensors`) of one array per leaf.
    #[arg(long, value_name = "OUT.npz")]
    pub expected: PathBuf,
    /// Relative tolerance (torch.allclose's default).
    #[arg(long, default_value_t = 1e-5)]
    pub rtol: f64,
    /// Absolute tolerance (torch.allclose's default).
    #[arg(long, default_value_t = 1e-8)]
    pub atol: f64,
    /// Seed of the call's generator (and of --random).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Call the method this many times with the same inputs and check every result (a model
    /// whose results drift from call to call, through its state or a cache, fails on the first
    /// call that differs; the report is that call's).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub calls: u32,
    #[command(flatten)]
    pub limits: super::run::LimitArgs,
}

/// Run `tsrun compare`.
pub fn run(args: &CompareArgs) -> CliResult {
    if !(args.rtol >= 0.0 && args.atol >= 0.0) {
        return Err(usage("--rtol and --atol must be non-negative"));
    }
    let module = super::run::load_module(&args.model)?;
    // an npz may hold string leaves too (numpy `<U` arrays, as `np.savez` stores a `str`)
    let (expected, strings) = if args.expected.extension().is_some_and(|e| e == "npz") {
        crate::runtime::module::read_npz_with_strings(&args.expected)?
    } else {
        (
            crate::runtime::module::read_state_dict(&args.expected)?,
            Vec::new(),
        )
    };
    let expected: Vec<_> = expected.into_iter().collect();
    let mut call = 0;
    let report = loop {
        call += 1;
        let result =
            super::run::call(&module, &args.method, &args.inputs, &args.limits, args.seed)?;
        let report = crate::golden::compare_result_with_strings(
            &result,
            &expected,
            &strings,
            Tolerance::new(args.rtol, args.atol),
        )?;
        if !report.passed() || call >= args.calls {
            break report;
        }
    };
    if args.json {
        let value = serde_json::json!({
            "ok": report.passed(), "call": call, "rtol": args.rtol, "atol": args.atol, "pairing": report.pairing,
            "leaves": report.leaves, "missing": report.missing, "extra": report.extra,
        });
        println!("{}", super::output::pretty_json(&value)?);
    } else {
        for line in report.lines() {
            println!("{line}");
        }
    }
    if report.passed() {
        return Ok(());
    }
    let mut message = mismatch_message(&report);
    if call > 1 {
        message.push_str(&format!(" (call {call}; the earlier calls matched)"));
    }
    Err(CliError::Mismatch(message))
}

/// `1 of 1 leaves differ beyond rtol 0.00001 / atol 0.00000001`, then missing and extra leaves.
fn mismatch_message(report: &Report) -> String {
    let tol = report.tolerance;
    let mut message = format!(
        "{} of {} leaves differ beyond rtol {} / atol {}",
        report.failed_leaves().count(),
        report.leaves.len(),
        tol.rtol,
        tol.atol
    );
    if !report.missing.is_empty() {
        message.push_str(&format!(
            "; the result has no leaf for expected arrays {}",
            report.missing.join(", ")
        ));
    }
    if !report.extra.is_empty() {
        message.push_str(&format!(
            "; no expected array for result leaves {}",
            report.extra.join(", ")
        ));
    }
    message
}
