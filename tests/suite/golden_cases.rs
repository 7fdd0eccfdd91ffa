//! `tsrun::golden` (golden-case folders, per-leaf reports) and `tsrun compare-dir`, on the cases
//! fixtures/gen_golden_cases.py wrote from PyTorch: mlp, named_inputs and two_inputs_dict pass;
//! perturbed_mlp's expected.npz is PyTorch's result for weights that differ from its model.pt.

use crate::cli_common::{temp_dir, tsrun};
use std::path::{Path, PathBuf};
use tsrun::golden::{self, Case, GoldenError, Pairing, Tolerance};
use tsrun::{DType, Tensor};

const CASES: &str = "fixtures/golden_cases";
const PASSING: [&str; 3] = ["mlp", "named_inputs", "two_inputs_dict"];

fn case_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(CASES).join(name)
}

fn load(name: &str) -> Case {
    Case::load(case_dir(name)).expect("the golden case loads")
}

/// Copy the files of the golden case `name` into `to/<as_name>`.
fn copy_case(name: &str, to: &Path, as_name: &str) -> PathBuf {
    let target = to.join(as_name);
    std::fs::create_dir_all(&target).expect("case dir");
    for entry in std::fs::read_dir(case_dir(name)).expect("fixture case") {
        let path = entry.expect("entry").path();
        let file_name = path.file_name().expect("file name");
        std::fs::copy(&path, target.join(file_name)).expect("copy");
    }
    target
}

#[test]
fn the_mlp_case_passes_with_small_errors() {
    let report = load("mlp").check(Tolerance::default()).expect("runs");
    assert!(report.passed(), "{report}");
    assert_eq!(report.pairing, Pairing::ByName);
    assert_eq!(report.leaves.len(), 1);
    let leaf = &report.leaves[0];
    assert_eq!(
        (leaf.leaf.as_str(), leaf.numel, leaf.mismatched),
        ("out", 12, 0)
    );
    assert_eq!(leaf.actual_dtype, "float32");
    assert!(leaf.max_abs_error < 1e-6, "{report}");
    assert!(leaf.max_rel_error < 1e-4, "{report}");
    assert!(report
        .to_string()
        .starts_with("golden check passed: 1 leaves within rtol 1e-5 / atol 1e-8"));
}

#[test]
fn named_inputs_bind_by_parameter_name_not_file_order() {
    // inputs.npz holds mask before x; by position the (2, 4) mask would be x and fail
    let case = load("named_inputs");
    assert_eq!(case.inputs.len(), 2);
    let report = case.check(Tolerance::default()).expect("runs");
    assert!(report.passed(), "{report}");
    assert_eq!(report.leaves[0].numel, 24);
}

#[test]
fn two_npy_inputs_and_a_dict_of_tuples_pass_leaf_by_leaf() {
    let case = load("two_inputs_dict");
    assert_eq!(case.inputs.len(), 2);
    let report = case.check(Tolerance::default()).expect("runs");
    assert!(report.passed(), "{report}");
    let names: Vec<&str> = report.leaves.iter().map(|l| l.leaf.as_str()).collect();
    assert_eq!(
        names,
        ["out.mix.0", "out.mix.1", "out.scaled.0", "out.scaled.1"]
    );
    assert!(
        report.leaves.iter().all(|l| l.max_abs_error < 1e-5),
        "{report}"
    );
}

#[test]
fn perturbed_weights_fail_in_the_perturbed_output_column() {
    // head.weight[2, 5] was raised in PyTorch: only output column 2 can differ
    let report = load("perturbed_mlp")
        .check(Tolerance::default())
        .expect("runs");
    assert!(!report.passed());
    let leaf = &report.leaves[0];
    assert!(!leaf.ok);
    assert!((1..=3).contains(&leaf.mismatched), "{report}");
    let worst = leaf.worst_index.as_ref().expect("a worst element");
    assert_eq!(worst[1], 2, "{report}");
    let (actual, expected) = (
        leaf.worst_actual.expect("actual"),
        leaf.worst_expected.expect("expected"),
    );
    assert!((actual - expected).abs() > 1e-3, "{report}");
    assert!((leaf.max_abs_error - (actual - expected).abs()).abs() < 1e-12);
    let text = report.to_string();
    assert!(
        text.starts_with("golden check failed: 1 of 1 leaves outside"),
        "{text}"
    );
    assert!(text.contains("FAIL out: max abs"), "{text}");
    assert!(text.contains(&format!("worst at {worst:?}")), "{text}");
    assert!(
        report.failure_summary().starts_with("out: "),
        "{}",
        report.failure_summary()
    );
    // a loose enough tolerance accepts it
    let loose = load("perturbed_mlp")
        .check(Tolerance::new(0.0, 1.0))
        .expect("runs");
    assert!(loose.passed(), "{loose}");
}

/// Named leaves or expected arrays.
type Leaves = Vec<(String, Tensor)>;

/// The mlp case's actual result and its expected arrays, to alter the expectation.
fn mlp_leaves() -> (Leaves, Leaves) {
    let case = load("mlp");
    let result = case.model.call(&case.inputs).expect("runs");
    (
        golden::result_leaves(&result).expect("leaves"),
        case.expected,
    )
}

#[test]
fn shape_and_dtype_mismatches_are_reported() {
    let (actual, expected) = mlp_leaves();
    let values = expected[0].1.to_vec::<f32>().expect("values");
    let flat = Tensor::from_vec(values.clone(), &[12]).expect("tensor");
    let report =
        golden::compare_leaves(&actual, &[("out".to_string(), flat)], Tolerance::default())
            .expect("compares");
    assert!(!report.passed());
    assert_eq!(
        report.leaves[0].shape_mismatch,
        Some((vec![3, 4], vec![12]))
    );
    assert!(
        report
            .to_string()
            .contains("FAIL out: shape [3, 4], expected [12]"),
        "{report}"
    );

    let wider = expected[0].1.to_dtype(DType::Float64).expect("cast");
    let report =
        golden::compare_leaves(&actual, &[("out".to_string(), wider)], Tolerance::default())
            .expect("compares");
    let leaf = &report.leaves[0];
    assert!(
        leaf.dtype_mismatch && !leaf.ok && leaf.mismatched == 0,
        "{report}"
    );
    assert!(
        report
            .to_string()
            .contains("dtype float32, expected float64"),
        "{report}"
    );

    // float16 results stored widened to float32 are accepted
    let half = actual[0].1.to_dtype(DType::Float16).expect("cast");
    let report = golden::compare_leaves(
        &[("out".to_string(), half)],
        &expected,
        Tolerance::new(1e-2, 1e-3),
    )
    .expect("compares");
    assert!(report.passed(), "{report}");
}

#[test]
fn missing_and_extra_leaves_fail_the_check() {
    let (actual, expected) = mlp_leaves();
    let mut more = expected.clone();
    more.push(("out.1".to_string(), expected[0].1.clone()));
    let report = golden::compare_leaves(&actual, &more, Tolerance::default()).expect("compares");
    assert!(report.leaves[0].ok);
    assert_eq!(report.missing, ["out.1"]);
    assert!(!report.passed());
    assert!(
        report
            .to_string()
            .contains("FAIL out.1: expected, but the result has no such leaf"),
        "{report}"
    );
    assert_eq!(report.failure_summary(), "no result leaf for out.1");

    let report = golden::compare_leaves(&actual, &[], Tolerance::default()).expect("compares");
    assert_eq!(report.extra, ["out"]);
    assert!(!report.passed(), "{report}");
}

#[test]
fn unnamed_expected_arrays_pair_by_position() {
    let (actual, expected) = mlp_leaves();
    let positional = vec![("arr_0".to_string(), expected[0].1.clone())];
    let report =
        golden::compare_leaves(&actual, &positional, Tolerance::default()).expect("compares");
    assert_eq!(report.pairing, Pairing::ByPosition);
    assert!(report.passed(), "{report}");
    assert_eq!(report.leaves[0].expected, "arr_0");
    assert!(
        report.to_string().contains("ok   out vs arr_0: max abs"),
        "{report}"
    );
}

#[test]
fn nan_matches_nan_unless_asked_otherwise() {
    let actual = vec![(
        "out".to_string(),
        Tensor::from_vec(vec![f32::NAN, 1.0], &[2]).expect("tensor"),
    )];
    let report = golden::compare_leaves(&actual, &actual, Tolerance::default()).expect("compares");
    assert!(report.passed(), "{report}");
    let strict = Tolerance {
        equal_nan: false,
        ..Tolerance::default()
    };
    let report = golden::compare_leaves(&actual, &actual, strict).expect("compares");
    assert_eq!(report.leaves[0].mismatched, 1, "{report}");
    assert_eq!(report.leaves[0].worst_index, Some(vec![0]));
}

#[test]
fn malformed_case_folders_are_typed_errors() {
    let dir = temp_dir("golden-malformed");
    let case = copy_case("mlp", &dir, "no_expected");
    std::fs::remove_file(case.join("expected.npz")).expect("remove");
    let err = Case::load(&case).err().expect("fails");
    assert!(
        matches!(
            err,
            tsrun::Error::Golden(GoldenError::MissingFile {
                file: "expected.npz",
                ..
            })
        ),
        "{err}"
    );

    let case = copy_case("mlp", &dir, "both_inputs");
    std::fs::copy(
        case_dir("two_inputs_dict").join("in_0.npy"),
        case.join("in_0.npy"),
    )
    .expect("copy");
    let err = Case::load(&case).err().expect("fails");
    assert!(
        matches!(
            err,
            tsrun::Error::Golden(GoldenError::AmbiguousInputs { .. })
        ),
        "{err}"
    );

    let case = copy_case("two_inputs_dict", &dir, "gap");
    std::fs::rename(case.join("in_1.npy"), case.join("in_2.npy")).expect("rename");
    let err = Case::load(&case).err().expect("fails");
    assert!(
        matches!(
            err,
            tsrun::Error::Golden(GoldenError::InputGap {
                absent: 1,
                present: 2,
                ..
            })
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("has in_2.npy but no in_1.npy"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn compare_dir_tables_every_case_and_fails_on_the_perturbed_one() {
    let dir = temp_dir("compare-dir-fixtures");
    let junit = dir.join("report.xml");
    let r = tsrun(&["compare-dir", CASES, "--junit", &junit.to_string_lossy()]);
    assert_eq!(r.code, Some(1), "{}\n{}", r.stdout, r.stderr);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines.len(), 5, "{}", r.stdout);
    assert!(lines[0].starts_with("case"), "{}", r.stdout);
    for (line, name) in
        lines[1..]
            .iter()
            .zip(["mlp", "named_inputs", "perturbed_mlp", "two_inputs_dict"])
    {
        assert!(line.starts_with(name), "{}", r.stdout);
        let status = if name == "perturbed_mlp" {
            "FAIL"
        } else {
            "PASS"
        };
        assert!(line.contains(status), "{}", r.stdout);
    }
    assert!(lines[4].contains(" 4 "), "four leaves: {}", r.stdout);
    // the reason: the failing leaf, how many elements are off, and where the worst one is
    let reason = lines[3]
        .split("FAIL")
        .nth(1)
        .unwrap_or_default()
        .trim_start();
    assert!(reason.starts_with("out: "), "{}", r.stdout);
    assert!(
        reason.contains(" of 12 outside, worst at [") && reason.ends_with(", 2]"),
        "{}",
        r.stdout
    );
    assert!(
        r.stderr
            .contains("1 of 4 golden cases failed, 0 could not be checked"),
        "{}",
        r.stderr
    );

    let xml = std::fs::read_to_string(&junit).expect("junit written");
    assert!(xml.starts_with("<?xml"), "{xml}");
    assert!(
        xml.contains(
            "<testsuite name=\"tsrun compare-dir\" tests=\"4\" failures=\"1\" errors=\"0\""
        ),
        "{xml}"
    );
    assert_eq!(xml.matches("<testcase ").count(), 4, "{xml}");
    assert_eq!(xml.matches("<failure").count(), 1, "{xml}");
    for name in PASSING {
        assert!(
            xml.contains(&format!(
                "<testcase name=\"{name}\" classname=\"golden_cases\""
            )),
            "{xml}"
        );
    }
    // the one failure sits in perturbed_mlp's testcase; passing cases are empty elements
    let failing = xml
        .split("<testcase ")
        .find(|t| t.starts_with("name=\"perturbed_mlp\""))
        .expect("perturbed_mlp testcase");
    assert!(failing.contains("<failure message=\"out: "), "{xml}");
    assert!(failing.contains("golden check failed"), "{xml}");
    for name in PASSING {
        let case = xml
            .split("<testcase ")
            .find(|t| t.starts_with(&format!("name=\"{name}\"")))
            .expect("testcase");
        assert!(
            case.trim_end().ends_with("/>") || !case.contains("<failure"),
            "{xml}"
        );
        assert!(!case.contains("<failure"), "{xml}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn compare_dir_passes_on_passing_cases_and_reports_errors_per_case() {
    let dir = temp_dir("compare-dir-passing");
    for name in PASSING {
        copy_case(name, &dir, name);
    }
    // not a case: no model.pt
    std::fs::create_dir_all(dir.join("notes")).expect("dir");
    let path = dir.to_string_lossy().into_owned();
    let ok = tsrun(&["compare-dir", &path, "--json"]);
    assert_eq!(ok.code, Some(0), "{}\n{}", ok.stdout, ok.stderr);
    let v: serde_json::Value = serde_json::from_str(&ok.stdout).expect("json");
    assert_eq!(v["ok"], true);
    assert_eq!(
        v["cases"].as_array().map(Vec::len),
        Some(3),
        "{}",
        ok.stdout
    );
    assert_eq!(
        v["cases"][2]["checked"]["leaves"].as_array().map(Vec::len),
        Some(4)
    );

    // a case that cannot load is an ERROR row, and the others still run
    let broken = copy_case("mlp", &dir, "broken & <odd>");
    std::fs::write(broken.join("model.pt"), b"not a zip").expect("write");
    let junit = dir.join("out.xml");
    let r = tsrun(&["compare-dir", &path, "--junit", &junit.to_string_lossy()]);
    assert_eq!(r.code, Some(1), "{}\n{}", r.stdout, r.stderr);
    assert_eq!(r.stdout.matches("PASS").count(), 3, "{}", r.stdout);
    assert!(r.stdout.contains("broken & <odd>  "), "{}", r.stdout);
    assert!(r.stdout.contains("ERROR"), "{}", r.stdout);
    let xml = std::fs::read_to_string(&junit).expect("junit");
    assert!(
        xml.contains("<testcase name=\"broken &amp; &lt;odd&gt;\""),
        "{xml}"
    );
    assert_eq!(xml.matches("<error message=").count(), 1, "{xml}");
    assert!(xml.contains("errors=\"1\""), "{xml}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn compare_dir_without_its_folder_is_a_usage_error_naming_it() {
    let r = tsrun(&["compare-dir", "fixtures/no_such_cases"]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("fixtures/no_such_cases"), "{}", r.stderr);
    let empty = temp_dir("compare-dir-empty");
    let r = tsrun(&["compare-dir", &empty.to_string_lossy()]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("no golden cases"), "{}", r.stderr);
    std::fs::remove_dir_all(&empty).ok();
}
