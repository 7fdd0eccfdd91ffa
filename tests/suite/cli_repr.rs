//! Results printed as Python prints them (src/cli/repr.rs) against `repr` from PyTorch
//! (fixtures/gen_cli.py): tensors wrapped at 80 columns and summarized above 1000 elements, and
//! strings, lists and dicts quoted.

use crate::cli_common::tsrun;
use crate::common::fixtures_dir;

#[test]
fn tensors_print_as_pytorch_repr() {
    let dir = fixtures_dir().join("cli").join("repr");
    let expected: serde_json::Map<String, serde_json::Value> = serde_json::from_str(
        &std::fs::read_to_string(dir.join("expected.json")).expect("expected.json"),
    )
    .expect("json");
    let mut failures = Vec::new();
    for (name, want) in &expected {
        let t =
            tsrun::internals::cli::inputs::read_npy(&dir.join(format!("{name}.npy"))).expect("npy");
        let got = tsrun::internals::cli::repr::tensor_repr(&t);
        if got != want.as_str().expect("a string") {
            failures.push(format!(
                "{name}:\n--- tsrun\n{got}\n--- PyTorch\n{}",
                want.as_str().unwrap_or("")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_thousand_logits_wrap_at_eighty_columns() {
    let r = tsrun(&[
        "run",
        "fixtures/models/resnet18.pt",
        "-i",
        "fixtures/inputs/image_1x3x224x224.npy",
    ]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let longest = r.stdout.lines().map(str::len).max().unwrap_or(0);
    assert!(longest <= 80, "a line of {longest} columns");
}

#[test]
fn strings_lists_and_dicts_are_quoted_as_python_repr() {
    let r = tsrun(&["run", "fixtures/cli/strings.pt", "-i", "the quick it's the"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let want = std::fs::read_to_string(fixtures_dir().join("cli").join("strings_expected.txt"))
        .expect("golden");
    assert_eq!(r.stdout, want);
}
