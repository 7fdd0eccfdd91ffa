//! Golden-file conformance checks: run a module on stored inputs and compare every leaf of its
//! result with the arrays PyTorch wrote for the same call, as `torch.allclose` compares them.
//!
//! A result is flattened into named leaves as `tsrun run -o` writes them: `out` for a tensor or
//! number result, `out.0`, `out.1` for the items of a tuple or list, `out.<key>` for the
//! entries of a dict, nested as deep as the result is (`out.0.logits`). Strings and None carry
//! no numbers and are left out of the numeric leaves; [`compare_result_with_strings`] checks
//! string leaves against numpy unicode (`<U`) arrays of the same name. Expected arrays pair with leaves by name; when no expected
//! array carries a leaf's name (`np.savez(p, logits)` writes `arr_0`), by position.
//!
//! # Golden-case folder
//!
//! ```text
//! CASE/
//!   model.pt       torch.jit.save of the scripted or traced module (in eval mode)
//!   inputs.npz     forward's tensor inputs: arr_0, arr_1, ... by position (np.savez(p, x, y)),
//!                  or named as forward's parameters (np.savez(p, x=x, mask=m));
//!   in_0.npy ...   or one .npy per positional input instead of inputs.npz
//!                  (neither: forward takes no input)
//!   expected.npz   PyTorch's result, one array per leaf (out, out.0, out.<key>, ...), or
//!                  arr_0, arr_1, ... in leaf order
//! ```
//!
//! A float16 or bfloat16 leaf may be expected as float32 (numpy has no bfloat16, and
//! golden writers widen both); any other dtype difference fails the leaf.

#![deny(missing_docs)]

use crate::runtime::{IValue, Module, RunOptions};
use crate::tensor::{DType, Tensor};
use crate::values::python_str;
use crate::Result;
use indexmap::IndexMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// The archive of a golden-case folder.
pub const MODEL_FILE: &str = "model.pt";
/// The inputs of a golden-case folder as one npz (positional `arr_N` or named arrays).
pub const INPUTS_FILE: &str = "inputs.npz";
/// The expected result of a golden-case folder.
pub const EXPECTED_FILE: &str = "expected.npz";
/// The name of the whole result, the root of every leaf name.
pub const RESULT_LEAF: &str = "out";

/// Errors of reading a golden-case folder or flattening a result into leaves.
#[derive(Debug, thiserror::Error)]
pub enum GoldenError {
    /// A file every case needs is absent.
    #[error("{}: the golden case has no {file}", dir.display())]
    MissingFile {
        /// The case folder.
        dir: PathBuf,
        /// The absent file's name.
        file: &'static str,
    },
    /// Both ways of giving inputs are present, so the case is ambiguous.
    #[error("{}: the golden case has both {INPUTS_FILE} and in_0.npy; keep one", dir.display())]
    AmbiguousInputs {
        /// The case folder.
        dir: PathBuf,
    },
    /// The `in_N.npy` files skip a number, so positions cannot be trusted.
    #[error("{}: the golden case has in_{present}.npy but no in_{absent}.npy", dir.display())]
    InputGap {
        /// The case folder.
        dir: PathBuf,
        /// The first missing position.
        absent: usize,
        /// A later position that is present.
        present: usize,
    },
    /// A result value that no array can hold (an object, a future, ...).
    #[error("cannot compare a {kind} in the result (at {leaf})")]
    UnsupportedLeaf {
        /// The leaf's name.
        leaf: String,
        /// What the value is.
        kind: &'static str,
    },
}

/// How close an actual element must be to its expected one: `|actual - expected| <= atol +
/// rtol * |expected|`, as `torch.allclose`.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "cli", derive(serde::Serialize))]
pub struct Tolerance {
    /// Relative tolerance.
    pub rtol: f64,
    /// Absolute tolerance.
    pub atol: f64,
    /// Whether a NaN matches a NaN.
    pub equal_nan: bool,
}

impl Default for Tolerance {
    /// `torch.allclose`'s rtol 1e-5 and atol 1e-8, with NaN equal to NaN (golden files of models
    /// that produce NaN on purpose should pass).
    fn default() -> Self {
        Tolerance {
            rtol: 1e-5,
            atol: 1e-8,
            equal_nan: true,
        }
    }
}

impl Tolerance {
    /// `rtol` and `atol` with NaN equal to NaN.
    pub fn new(rtol: f64, atol: f64) -> Tolerance {
        Tolerance {
            rtol,
            atol,
            equal_nan: true,
        }
    }
}

impl fmt::Display for Tolerance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rtol {:e} / atol {:e}", self.rtol, self.atol)?;
        if !self.equal_nan {
            f.write_str(" (NaN differs from NaN)")?;
        }
        Ok(())
    }
}

/// How one result leaf compares with its expected array.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "cli", derive(serde::Serialize))]
pub struct LeafReport {
    /// The result leaf (`out.0`).
    pub leaf: String,
    /// The expected array it was compared with (its own name, or `arr_N` by position).
    pub expected: String,
    /// Whether the leaf matches: same shape, an acceptable dtype, every element within the
    /// tolerance.
    pub ok: bool,
    /// The actual and expected shapes when they differ (then no element is compared).
    pub shape_mismatch: Option<(Vec<usize>, Vec<usize>)>,
    /// The leaf's dtype.
    pub actual_dtype: String,
    /// The expected array's dtype.
    pub expected_dtype: String,
    /// The dtypes differ beyond float16/bfloat16 expected as float32.
    pub dtype_mismatch: bool,
    /// The largest `|actual - expected|`.
    pub max_abs_error: f64,
    /// The largest `|actual - expected| / |expected|` over nonzero expected elements.
    pub max_rel_error: f64,
    /// Elements outside the tolerance.
    pub mismatched: usize,
    /// Elements compared.
    pub numel: usize,
    /// The index of the element furthest outside the tolerance (largest `|a - e| - tol`).
    pub worst_index: Option<Vec<usize>>,
    /// The actual value at `worst_index`.
    pub worst_actual: Option<f64>,
    /// The expected value at `worst_index`.
    pub worst_expected: Option<f64>,
    /// For a string leaf: its text and the expected array's (then no number is compared).
    pub strings: Option<(String, String)>,
}

impl fmt::Display for LeafReport {
    /// One line: `FAIL out.0: max abs 5.000e-1, max rel 1.728e0, 1 of 12 outside; worst at
    /// [1, 2]: -0.21 vs 0.29` (actual vs expected).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = if self.ok { "ok  " } else { "FAIL" };
        write!(f, "{status} {}", self.leaf)?;
        if self.leaf != self.expected {
            write!(f, " vs {}", self.expected)?;
        }
        if let Some((actual, expected)) = &self.shape_mismatch {
            return write!(f, ": shape {actual:?}, expected {expected:?}");
        }
        if let Some((actual, expected)) = &self.strings {
            return write!(f, ": {actual:?} vs {expected:?}");
        }
        write!(
            f,
            ": max abs {:.3e}, max rel {:.3e}, {} of {} outside",
            self.max_abs_error, self.max_rel_error, self.mismatched, self.numel
        )?;
        if let (Some(i), Some(a), Some(e)) =
            (&self.worst_index, self.worst_actual, self.worst_expected)
        {
            write!(f, "; worst at {i:?}: {a} vs {e}")?;
        }
        if self.dtype_mismatch {
            write!(
                f,
                "; dtype {}, expected {}",
                self.actual_dtype, self.expected_dtype
            )?;
        } else if self.actual_dtype != self.expected_dtype {
            write!(f, " ({} vs {})", self.actual_dtype, self.expected_dtype)?;
        }
        Ok(())
    }
}

/// How result leaves were paired with expected arrays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(
    feature = "cli",
    derive(serde::Serialize),
    serde(rename_all = "snake_case")
)]
pub enum Pairing {
    /// By leaf name (`out.0` with `out.0`).
    ByName,
    /// In order (no expected array carries a leaf name, e.g. `arr_0`, `arr_1`).
    ByPosition,
}

/// The comparison of a whole result with its expected arrays.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "cli", derive(serde::Serialize))]
pub struct Report {
    /// The tolerance the elements were held to.
    pub tolerance: Tolerance,
    /// How leaves were paired with expected arrays.
    pub pairing: Pairing,
    /// One report per paired leaf, in result order.
    pub leaves: Vec<LeafReport>,
    /// Expected arrays no result leaf paired with.
    pub missing: Vec<String>,
    /// Result leaves no expected array paired with.
    pub extra: Vec<String>,
}

impl Report {
    /// Whether every leaf matches and no leaf is missing or extra.
    pub fn passed(&self) -> bool {
        self.missing.is_empty() && self.extra.is_empty() && self.leaves.iter().all(|l| l.ok)
    }

    /// The leaves that do not match.
    pub fn failed_leaves(&self) -> impl Iterator<Item = &LeafReport> {
        self.leaves.iter().filter(|l| !l.ok)
    }

    /// The largest absolute error over all compared leaves (0 with none).
    pub fn max_abs_error(&self) -> f64 {
        self.leaves
            .iter()
            .map(|l| l.max_abs_error)
            .fold(0.0, f64::max)
    }

    /// The largest relative error over all compared leaves (0 with none).
    pub fn max_rel_error(&self) -> f64 {
        self.leaves
            .iter()
            .map(|l| l.max_rel_error)
            .fold(0.0, f64::max)
    }

    /// The report's body: one line per compared leaf (as [`LeafReport`] displays), then one per
    /// missing and per extra leaf.
    pub fn lines(&self) -> Vec<String> {
        let leaves = self.leaves.iter().map(LeafReport::to_string);
        let missing = self
            .missing
            .iter()
            .map(|name| format!("FAIL {name}: expected, but the result has no such leaf"));
        let extra = self
            .extra
            .iter()
            .map(|name| format!("FAIL {name}: in the result, but no array is expected for it"));
        leaves.chain(missing).chain(extra).collect()
    }

    /// Why the check failed, in one line (empty when it passed): the first failing leaf and
    /// how many others, then missing and extra leaves.
    pub fn failure_summary(&self) -> String {
        let mut parts = Vec::new();
        let failed: Vec<&LeafReport> = self.failed_leaves().collect();
        if let Some(first) = failed.first() {
            let mut part = first.short_reason();
            if failed.len() > 1 {
                part.push_str(&format!(" (+{} more leaves)", failed.len() - 1));
            }
            parts.push(part);
        }
        if !self.missing.is_empty() {
            parts.push(format!("no result leaf for {}", self.missing.join(", ")));
        }
        if !self.extra.is_empty() {
            parts.push(format!("unexpected result leaf {}", self.extra.join(", ")));
        }
        parts.join("; ")
    }
}

impl LeafReport {
    /// Why the leaf failed, briefly: `out.0: 3 of 12 outside, worst at [1, 2]`.
    fn short_reason(&self) -> String {
        if let Some((actual, expected)) = &self.shape_mismatch {
            return format!("{}: shape {actual:?}, expected {expected:?}", self.leaf);
        }
        if let Some((actual, expected)) = &self.strings {
            return format!("{}: {actual:?}, expected {expected:?}", self.leaf);
        }
        if self.mismatched == 0 && self.dtype_mismatch {
            return format!(
                "{}: dtype {}, expected {}",
                self.leaf, self.actual_dtype, self.expected_dtype
            );
        }
        let mut reason = format!(
            "{}: {} of {} outside",
            self.leaf, self.mismatched, self.numel
        );
        if let Some(i) = &self.worst_index {
            reason.push_str(&format!(", worst at {i:?}"));
        }
        reason
    }
}

impl fmt::Display for Report {
    /// A header saying passed or failed and why, then one line per leaf, missing and extra
    /// leaf: what `assert!(report.passed(), "{report}")` shows.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let failed = self.failed_leaves().count();
        if self.passed() {
            writeln!(
                f,
                "golden check passed: {} leaves within {}",
                self.leaves.len(),
                self.tolerance
            )?;
        } else {
            write!(
                f,
                "golden check failed: {failed} of {} leaves outside {}",
                self.leaves.len(),
                self.tolerance
            )?;
            if !self.missing.is_empty() {
                write!(f, ", {} expected arrays missing", self.missing.len())?;
            }
            if !self.extra.is_empty() {
                write!(f, ", {} extra result leaves", self.extra.len())?;
            }
            writeln!(f, " (values are actual vs expected)")?;
        }
        for line in self.lines() {
            writeln!(f, "{line}")?;
        }
        Ok(())
    }
}

/// The name of item `index` of the tuple or list named `parent` (`out.0`).
pub fn item_leaf_name(parent: &str, index: usize) -> String {
    format!("{parent}.{index}")
}

/// The name of the entry under `key` of the dict named `parent` (`out.logits`, `out.3`).
pub fn entry_leaf_name(parent: &str, key: &IValue) -> String {
    format!("{parent}.{}", python_str(key))
}

/// The numeric leaves of `result` as tensors, named from [`RESULT_LEAF`] (`out`, `out.0`,
/// `out.<key>`); numbers become 0-d tensors, strings, None and devices are left out.
pub fn result_leaves(result: &IValue) -> Result<Vec<(String, Tensor)>> {
    let mut leaves = Vec::new();
    collect_leaves(result, RESULT_LEAF, &mut leaves)?;
    Ok(leaves)
}

fn collect_leaves(value: &IValue, name: &str, leaves: &mut Vec<(String, Tensor)>) -> Result<()> {
    match value {
        IValue::Tensor(t) => leaves.push((name.to_string(), t.clone())),
        IValue::Bool(b) => leaves.push((name.to_string(), Tensor::scalar(*b))),
        IValue::Int(i) => leaves.push((name.to_string(), Tensor::scalar(*i))),
        IValue::Double(d) => leaves.push((name.to_string(), Tensor::scalar(*d))),
        IValue::Complex(c) => leaves.push((name.to_string(), Tensor::scalar(*c))),
        IValue::None | IValue::String(_) | IValue::Device(_) => {}
        IValue::List(list) => {
            for (i, item) in list.to_vec().iter().enumerate() {
                collect_leaves(item, &item_leaf_name(name, i), leaves)?;
            }
        }
        IValue::Tuple(tuple) => {
            for (i, item) in tuple.items().iter().enumerate() {
                collect_leaves(item, &item_leaf_name(name, i), leaves)?;
            }
        }
        IValue::Dict(dict) => {
            for (key, item) in dict.entries() {
                collect_leaves(&item, &entry_leaf_name(name, &key), leaves)?;
            }
        }
        other => {
            return Err(GoldenError::UnsupportedLeaf {
                leaf: name.to_string(),
                kind: other.kind_name(),
            }
            .into())
        }
    }
    Ok(())
}

/// The string leaves of a result, named as [`result_leaves`] names leaves (`out.1`, `out.label`).
pub fn string_leaves(result: &IValue) -> Vec<(String, String)> {
    fn collect(value: &IValue, name: &str, out: &mut Vec<(String, String)>) {
        match value {
            IValue::String(s) => out.push((name.to_string(), s.to_string())),
            IValue::List(list) => {
                for (i, item) in list.to_vec().iter().enumerate() {
                    collect(item, &item_leaf_name(name, i), out);
                }
            }
            IValue::Tuple(tuple) => {
                for (i, item) in tuple.items().iter().enumerate() {
                    collect(item, &item_leaf_name(name, i), out);
                }
            }
            IValue::Dict(dict) => {
                for (key, item) in dict.entries() {
                    collect(&item, &entry_leaf_name(name, &key), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    collect(result, RESULT_LEAF, &mut out);
    out
}

/// Compare a string leaf with an expected numpy unicode array (one element, as `np.savez`
/// stores a `str`): equal text passes.
pub fn compare_string_leaf(leaf: &str, actual: &str, expected: &[String]) -> LeafReport {
    let mut report = LeafReport {
        leaf: leaf.to_string(),
        expected: leaf.to_string(),
        ok: false,
        shape_mismatch: None,
        actual_dtype: "str".to_string(),
        expected_dtype: "str".to_string(),
        dtype_mismatch: false,
        max_abs_error: 0.0,
        max_rel_error: 0.0,
        mismatched: 1,
        numel: 1,
        worst_index: None,
        worst_actual: None,
        worst_expected: None,
        strings: None,
    };
    match expected {
        [one] => {
            report.ok = actual == one;
            report.mismatched = usize::from(!report.ok);
            report.strings = Some((actual.to_string(), one.clone()));
        }
        more => {
            report.numel = more.len();
            report.shape_mismatch = Some((Vec::new(), vec![more.len()]));
        }
    }
    report
}

/// The multi-dimensional index of row-major position `flat` in `shape`.
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

/// Whether an `actual` leaf may be checked against an `expected` array of another dtype: only
/// half-precision floats stored widened to float32, as numpy (no bfloat16) and golden writers
/// store them.
fn dtype_acceptable(actual: DType, expected: DType) -> bool {
    actual == expected
        || (matches!(actual, DType::Float16 | DType::BFloat16) && expected == DType::Float32)
}

/// Compare one leaf with its expected array, element by element as float64 (as
/// `torch.allclose` promotes).
pub fn compare_leaf(
    leaf: &str,
    actual: &Tensor,
    expected_name: &str,
    expected: &Tensor,
    tol: Tolerance,
) -> Result<LeafReport> {
    let mut report = LeafReport {
        leaf: leaf.to_string(),
        expected: expected_name.to_string(),
        ok: true,
        shape_mismatch: None,
        actual_dtype: actual.dtype().name().to_string(),
        expected_dtype: expected.dtype().name().to_string(),
        dtype_mismatch: !dtype_acceptable(actual.dtype(), expected.dtype()),
        max_abs_error: 0.0,
        max_rel_error: 0.0,
        mismatched: 0,
        numel: expected.numel(),
        worst_index: None,
        worst_actual: None,
        worst_expected: None,
        strings: None,
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
        let both_nan = x.is_nan() && y.is_nan();
        if both_nan && tol.equal_nan {
            continue;
        }
        // equal infinities have a NaN difference and match
        let diff = if x == y { 0.0 } else { (x - y).abs() };
        let excess = if diff.is_nan() {
            f64::INFINITY
        } else {
            diff - (tol.atol + tol.rtol * y.abs())
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
    report.ok = report.mismatched == 0 && !report.dtype_mismatch;
    if let Some((_, i)) = worst {
        report.worst_index = Some(unravel(i, expected.shape()));
        report.worst_actual = a.get(i).copied();
        report.worst_expected = e.get(i).copied();
    }
    Ok(report)
}

/// Pair named result leaves with expected arrays (by name when any expected array carries a
/// leaf's name, else by position) and compare each pair.
pub fn compare_leaves(
    leaves: &[(String, Tensor)],
    expected: &[(String, Tensor)],
    tol: Tolerance,
) -> Result<Report> {
    let by_name = leaves
        .iter()
        .any(|(leaf, _)| expected.iter().any(|(name, _)| name == leaf));
    let mut report = Report {
        tolerance: tol,
        pairing: if by_name {
            Pairing::ByName
        } else {
            Pairing::ByPosition
        },
        leaves: Vec::new(),
        missing: Vec::new(),
        extra: Vec::new(),
    };
    if by_name {
        let expected_by_name: IndexMap<&str, &Tensor> =
            expected.iter().map(|(k, t)| (k.as_str(), t)).collect();
        for (leaf, actual) in leaves {
            match expected_by_name.get(leaf.as_str()) {
                Some(e) => report
                    .leaves
                    .push(compare_leaf(leaf, actual, leaf, e, tol)?),
                None => report.extra.push(leaf.clone()),
            }
        }
        report.missing = expected
            .iter()
            .filter(|(name, _)| !leaves.iter().any(|(leaf, _)| leaf == name))
            .map(|(name, _)| name.clone())
            .collect();
    } else {
        for ((leaf, actual), (name, e)) in leaves.iter().zip(expected) {
            report
                .leaves
                .push(compare_leaf(leaf, actual, name, e, tol)?);
        }
        report.extra = leaves
            .iter()
            .skip(expected.len())
            .map(|(k, _)| k.clone())
            .collect();
        report.missing = expected
            .iter()
            .skip(leaves.len())
            .map(|(k, _)| k.clone())
            .collect();
    }
    Ok(report)
}

/// Compare a whole result with the expected arrays (see [`compare_leaves`]).
pub fn compare_result(
    result: &IValue,
    expected: &[(String, Tensor)],
    tol: Tolerance,
) -> Result<Report> {
    compare_leaves(&result_leaves(result)?, expected, tol)
}

/// [`compare_result`], and the expected string arrays (numpy `<U` arrays: name and elements,
/// as [`crate::runtime::module::read_npz_with_strings`] reads them) checked by name against the
/// result's string leaves; an expected string with no such leaf is missing.
pub fn compare_result_with_strings(
    result: &IValue,
    expected: &[(String, Tensor)],
    strings: &[(String, Vec<String>)],
    tol: Tolerance,
) -> Result<Report> {
    let mut report = compare_result(result, expected, tol)?;
    let actual = string_leaves(result);
    for (name, want) in strings {
        match actual.iter().find(|(leaf, _)| leaf == name) {
            Some((leaf, got)) => report.leaves.push(compare_string_leaf(leaf, got, want)),
            None => report.missing.push(name.clone()),
        }
    }
    Ok(report)
}

/// Run `module(*inputs)` (forward with its hooks, seeded as `torch.manual_seed(0)`) and compare
/// every leaf of the result with `expected`.
///
/// ```no_run
/// use tsrun::golden::{self, Tolerance};
/// let model = tsrun::Module::load("golden/mlp/model.pt")?;
/// let inputs: Vec<tsrun::IValue> = tsrun::read_state_dict("golden/mlp/inputs.npz")?
///     .into_values()
///     .map(Into::into)
///     .collect();
/// let expected: Vec<_> = tsrun::read_state_dict("golden/mlp/expected.npz")?.into_iter().collect();
/// let report = golden::check(&model, &inputs, &expected, Tolerance::default())?;
/// assert!(report.passed(), "{report}");
/// # Ok::<(), tsrun::Error>(())
/// ```
pub fn check(
    module: &Module,
    inputs: &[IValue],
    expected: &[(String, Tensor)],
    tol: Tolerance,
) -> Result<Report> {
    let options = RunOptions {
        seed: Some(0),
        ..Default::default()
    };
    let result = module.call_opts(inputs.to_vec(), &options)?;
    compare_result(&result, expected, tol)
}

/// A golden case read from its folder (layout in the module documentation).
pub struct Case {
    /// The case folder.
    pub dir: PathBuf,
    /// The loaded `model.pt`.
    pub model: Module,
    /// forward's inputs, bound to its parameters (declared defaults filled).
    pub inputs: Vec<IValue>,
    /// The expected arrays of `expected.npz`, in file order.
    pub expected: Vec<(String, Tensor)>,
}

impl Case {
    /// Read the case in `dir`: load the model, read and bind the inputs, read the expected
    /// arrays.
    pub fn load(dir: impl AsRef<Path>) -> Result<Case> {
        let dir = dir.as_ref().to_path_buf();
        let model_path = dir.join(MODEL_FILE);
        let expected_path = dir.join(EXPECTED_FILE);
        for (path, file) in [(&model_path, MODEL_FILE), (&expected_path, EXPECTED_FILE)] {
            if !path.is_file() {
                return Err(GoldenError::MissingFile { dir, file }.into());
            }
        }
        let model = Module::load(&model_path)?;
        let inputs = read_inputs(&dir, &model)?;
        let expected = crate::runtime::module::read_npz(&expected_path)?
            .into_iter()
            .collect();
        Ok(Case {
            dir,
            model,
            inputs,
            expected,
        })
    }

    /// The case's name: its folder's name.
    pub fn name(&self) -> String {
        case_name(&self.dir)
    }

    /// Run the model on the case's inputs and compare with its expected arrays.
    pub fn check(&self, tol: Tolerance) -> Result<Report> {
        check(&self.model, &self.inputs, &self.expected, tol)
    }
}

/// The name of the case in `dir`: the folder's last component.
pub fn case_name(dir: &Path) -> String {
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| dir.display().to_string())
}

/// The `in_N.npy` files of `dir` by position, checked to run from 0 without a gap.
fn positional_npy_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let io_err = |e: std::io::Error| {
        crate::Error::Io(std::io::Error::new(
            e.kind(),
            format!("{}: {e}", dir.display()),
        ))
    };
    let mut found: Vec<(usize, PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io_err)? {
        let path = entry.map_err(io_err)?.path();
        let position = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("in_"))
            .and_then(|n| n.strip_suffix(".npy"))
            .and_then(|n| n.parse::<usize>().ok());
        if let Some(position) = position {
            found.push((position, path));
        }
    }
    found.sort();
    for (expected_position, (position, _)) in found.iter().enumerate() {
        if *position != expected_position {
            return Err(GoldenError::InputGap {
                dir: dir.to_path_buf(),
                absent: expected_position,
                present: *position,
            }
            .into());
        }
    }
    Ok(found.into_iter().map(|(_, path)| path).collect())
}

/// forward's parameter names (without `self`).
fn forward_parameter_names(model: &Module) -> Result<Vec<String>> {
    let unit = model.compilation_unit()?;
    let forward = unit.method(model.class_name(), "forward")?;
    Ok(forward
        .signature
        .params
        .iter()
        .map(|p| p.name.clone())
        .filter(|n| n != "self")
        .collect())
}

/// The case's inputs: `inputs.npz` (arrays named as forward's parameters by name, the others
/// by position in file order) or `in_N.npy`, bound to forward's parameters.
fn read_inputs(dir: &Path, model: &Module) -> Result<Vec<IValue>> {
    let npz_path = dir.join(INPUTS_FILE);
    let npy_paths = positional_npy_files(dir)?;
    let mut positional = Vec::new();
    let mut named = crate::runtime::module::Kwargs::new();
    if npz_path.is_file() {
        if !npy_paths.is_empty() {
            return Err(GoldenError::AmbiguousInputs {
                dir: dir.to_path_buf(),
            }
            .into());
        }
        let parameters = forward_parameter_names(model)?;
        for (name, tensor) in crate::runtime::module::read_npz(&npz_path)? {
            if parameters.contains(&name) {
                named.insert(name, IValue::Tensor(tensor));
            } else {
                positional.push(IValue::Tensor(tensor));
            }
        }
    } else {
        for path in &npy_paths {
            positional.push(IValue::Tensor(crate::tensor::npy::read_npy_file(path)?));
        }
    }
    model.bind_arguments("forward", positional, named)
}
