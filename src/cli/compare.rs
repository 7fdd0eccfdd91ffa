//! `tsrun compare MODEL [-i INPUT]... --expected OUT.npz [--rtol R] [--atol A] [--json]`: run
//! the model and check every leaf of its result against arrays PyTorch wrote, reporting the
//! worst element of each leaf; exit code 1 when any leaf is outside the tolerance.
//!
//! Leaves pair by name (`out`, `out.0`, `out.<key>`, as `tsrun run -o` writes them); when no
//! expected array carries such a name (`np.savez(p, logits)` writes `arr_0`), by position. An
//! element matches as `torch.allclose` checks it: `|actual - expected| <= atol + rtol *
//! |expected|`, with NaN matching NaN (`equal_nan=True`).

use super::error::{usage, CliError, CliResult};
use super::inputs::InputArgs;
use crate::runtime::Module;
use crate::tensor::Tensor;
use serde::Serialize;
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
    #[command(flatten)]
    pub limits: super::run::LimitArgs,
}

/// How one leaf compares.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LeafReport {
    /// The result leaf (`out.0`).
    pub leaf: String,
    /// The expected array it was compared with.
    pub expected: String,
    pub ok: bool,
    /// A shape mismatch (then no element is compared).
    pub shape_mismatch: Option<(Vec<usize>, Vec<usize>)>,
    pub actual_dtype: String,
    pub expected_dtype: String,
    pub max_abs_error: f64,
    pub max_rel_error: f64,
    /// Elements outside the tolerance.
    pub mismatched: usize,
    pub numel: usize,
    /// The index of the element furthest outside the tolerance (largest `|a - e| - tol`).
    pub worst_index: Option<Vec<usize>>,
    pub worst_actual: Option<f64>,
    pub worst_expected: Option<f64>,
}

fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut index = vec![0; shape.len()];
    for (i, &d) in shape.iter().enumerate().rev() {
        if d > 0 {
            index[i] = flat % d;
            flat /= d;
        }
    }
    index
}

/// Compare one leaf (values as float64, as torch.allclose promotes).
pub fn compare_leaf(
    leaf: &str,
    actual: &Tensor,
    expected_name: &str,
    expected: &Tensor,
    rtol: f64,
    atol: f64,
) -> crate::Result<LeafReport> {
    let mut report = LeafReport {
        leaf: leaf.to_string(),
        expected: expected_name.to_string(),
        ok: true,
        shape_mismatch: None,
        actual_dtype: actual.dtype().name().to_string(),
        expected_dtype: expected.dtype().name().to_string(),
        max_abs_error: 0.0,
        max_rel_error: 0.0,
        mismatched: 0,
        numel: expected.numel(),
        worst_index: None,
        worst_actual: None,
        worst_expected: None,
    };
    if actual.shape() != expected.shape() {
        report.ok = false;
        report.shape_mismatch = Some((actual.shape().to_vec(), expected.shape().to_vec()));
        return Ok(report);
    }
    let a = actual.to_vec::<f64>()?;
    let e = expected.to_vec::<f64>()?;
    let mut worst: Option<(f64, usize)> = None;
    for (i, (&x, &y)) in a.iter().zip(&e).enumerate() {
        if x.is_nan() && y.is_nan() {
            continue;
        }
        let diff = (x - y).abs();
        // equal infinities have a NaN difference and match
        let diff = if x == y { 0.0 } else { diff };
        let excess = if diff.is_nan() {
            f64::INFINITY
        } else {
            diff - (atol + rtol * y.abs())
        };
        report.max_abs_error = report.max_abs_error.max(diff);
        if y != 0.0 {
            report.max_rel_error = report.max_rel_error.max(diff / y.abs());
        }
        if excess > 0.0 {
            report.mismatched += 1;
        }
        if worst.is_none_or(|(w, _)| excess > w) {
            worst = Some((excess, i));
        }
    }
    report.ok = report.mismatched == 0;
    if let Some((_, i)) = worst {
        report.worst_index = Some(unravel(i, expected.shape()));
        report.worst_actual = Some(a[i]);
        report.worst_expected = Some(e[i]);
    }
    Ok(report)
}

/// Pair result leaves with expected arrays (by name, else by position) and compare them.
pub fn compare_all(
    leaves: &[(String, Tensor)],
    expected: &crate::runtime::module::StateDict,
    rtol: f64,
    atol: f64,
) -> CliResult<Vec<LeafReport>> {
    let by_name = leaves.iter().any(|(k, _)| expected.contains_key(k));
    let mut reports = Vec::new();
    if by_name {
        for (key, t) in leaves {
            if let Some(e) = expected.get(key) {
                reports.push(compare_leaf(key, t, key, e, rtol, atol)?);
            }
        }
        let missing: Vec<&str> = expected
            .keys()
            .filter(|k| !leaves.iter().any(|(l, _)| l == *k))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            return Err(CliError::Mismatch(format!(
                "the result has no leaf for expected arrays {}",
                missing.join(", ")
            )));
        }
    } else {
        if leaves.len() != expected.len() {
            return Err(CliError::Mismatch(format!(
                "the result has {} leaves ({}), the expected file {} arrays ({})",
                leaves.len(),
                leaves
                    .iter()
                    .map(|(k, _)| k.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                expected.len(),
                expected
                    .keys()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        for ((key, t), (name, e)) in leaves.iter().zip(expected) {
            reports.push(compare_leaf(key, t, name, e, rtol, atol)?);
        }
    }
    Ok(reports)
}

fn report_line(r: &LeafReport) -> String {
    let status = if r.ok { "ok  " } else { "FAIL" };
    let name = if r.leaf == r.expected {
        r.leaf.clone()
    } else {
        format!("{} vs {}", r.leaf, r.expected)
    };
    if let Some((a, e)) = &r.shape_mismatch {
        return format!("{status} {name}: shape {a:?}, expected {e:?}");
    }
    let mut line = format!(
        "{status} {name}: max abs {:.3e}, max rel {:.3e}, {} of {} outside",
        r.max_abs_error, r.max_rel_error, r.mismatched, r.numel
    );
    if let (Some(i), Some(a), Some(e)) = (&r.worst_index, r.worst_actual, r.worst_expected) {
        line.push_str(&format!("; worst at {i:?}: {a} vs {e}"));
    }
    if r.actual_dtype != r.expected_dtype {
        line.push_str(&format!(" ({} vs {})", r.actual_dtype, r.expected_dtype));
    }
    line
}

/// Run `tsrun compare`.
pub fn run(args: &CompareArgs) -> CliResult {
    if !(args.rtol >= 0.0 && args.atol >= 0.0) {
        return Err(usage("--rtol and --atol must be non-negative"));
    }
    let module = Module::load(&args.model)?;
    let expected = crate::runtime::module::read_state_dict(&args.expected)?;
    let result = super::run::call(&module, &args.method, &args.inputs, &args.limits, args.seed)?;
    let fields = super::run::field_names(&module)?;
    let leaves = super::output::leaf_tensors(&result, &fields)?;
    let reports = compare_all(&leaves, &expected, args.rtol, args.atol)?;
    let failed = reports.iter().filter(|r| !r.ok).count();
    if args.json {
        let value = serde_json::json!({
            "ok": failed == 0, "rtol": args.rtol, "atol": args.atol, "leaves": reports,
        });
        println!("{}", super::output::pretty_json(&value)?);
    } else {
        for r in &reports {
            println!("{}", report_line(r));
        }
    }
    if failed > 0 {
        return Err(CliError::Mismatch(format!(
            "{failed} of {} leaves differ beyond rtol {} / atol {}",
            reports.len(),
            args.rtol,
            args.atol
        )));
    }
    Ok(())
}
