//! `tsrun MODEL` (summary), `compare`, `state-dict`, `ops MODEL` and `parse-graph`, with their
//! failure paths; expected values from PyTorch (fixtures/gen_cli.py).

use crate::cli_common::{temp_dir, tsrun};
use crate::common::fixtures_dir;

#[test]
fn a_model_alone_prints_its_summary() {
    let r = tsrun(&["fixtures/models/resnet18.pt"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let out = &r.stdout;
    assert!(
        out.starts_with("__torch__.torchvision.models.resnet.ResNet (file format version 3)"),
        "{out}"
    );
    // depth 2 shown, deeper folded into counts
    assert!(
        out.contains("  layer1: Sequential\n    0: BasicBlock (+5 submodules)\n"),
        "{out}"
    );
    assert!(!out.contains("conv1: Conv2d\n      "), "{out}");
    // sum(p.numel() for p in resnet18().parameters()) == 11689512, all float32
    assert!(
        out.contains("parameters: 11,689,512 elements in 62 tensors, 44.6 MiB\n  all float32"),
        "{out}"
    );
    assert!(
        out.contains("  forward(self, x: Tensor) -> Tensor"),
        "{out}"
    );
    assert!(out.contains("extra files: none"), "{out}");
    let json = tsrun(&["fixtures/models/resnet18.pt", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json.stdout).expect("json");
    assert_eq!(
        v["parameters"]["by_dtype"]["float32"]["bytes"],
        11_689_512 * 4
    );
}

#[test]
fn a_model_with_an_input_runs_forward() {
    let r = tsrun(&[
        "fixtures/models/mlp.pt",
        "-i",
        "fixtures/cli/mlp_input.npy",
        "--json",
    ]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("json");
    assert_eq!(v["tensor"]["shape"], serde_json::json!([3, 4]));
}

#[test]
fn compare_passes_and_fails_with_the_worst_element() {
    let ok = tsrun(&[
        "compare",
        "fixtures/models/mlp.pt",
        "-i",
        "fixtures/cli/mlp_input.npy",
        "--expected",
        "fixtures/cli/mlp_expected.npz",
        "--rtol",
        "1e-5",
        "--atol",
        "1e-6",
    ]);
    assert_eq!(ok.code, Some(0), "{}\n{}", ok.stdout, ok.stderr);
    assert!(ok.stdout.starts_with("ok   out: max abs"), "{}", ok.stdout);
    // mlp_wrong.npz is the PyTorch result with 0.5 added at [1, 2]
    let bad = tsrun(&[
        "compare",
        "fixtures/models/mlp.pt",
        "-i",
        "fixtures/cli/mlp_input.npy",
        "--expected",
        "fixtures/cli/mlp_wrong.npz",
        "--json",
    ]);
    assert_eq!(bad.code, Some(1), "{}", bad.stderr);
    let v: serde_json::Value = serde_json::from_str(&bad.stdout).expect("json");
    let leaf = &v["leaves"][0];
    assert_eq!(leaf["worst_index"], serde_json::json!([1, 2]));
    assert_eq!(leaf["mismatched"], 1);
    assert!((leaf["max_abs_error"].as_f64().expect("number") - 0.5).abs() < 1e-5);
    assert!(
        bad.stderr.contains("1 of 1 leaves differ"),
        "{}",
        bad.stderr
    );
    let shape = tsrun(&[
        "compare",
        "fixtures/models/mlp.pt",
        "-i",
        "fixtures/cli/mlp_input.npy",
        "--expected",
        "fixtures/cli/mlp_state_dict.npz",
    ]);
    assert_eq!(shape.code, Some(1));
    let missing = tsrun(&[
        "compare",
        "fixtures/models/mlp.pt",
        "-i",
        "fixtures/cli/mlp_input.npy",
        "--expected",
        "fixtures/cli/nothing.npz",
    ]);
    assert_eq!(missing.code, Some(1));
    assert!(
        missing.stderr.contains("fixtures/cli/nothing.npz"),
        "{}",
        missing.stderr
    );
}

#[test]
fn state_dict_exports_pytorch_weights() {
    let dir = temp_dir("state-dict");
    let expected = tsrun::internals::runtime::module::read_npz(
        &fixtures_dir().join("cli").join("mlp_state_dict.npz"),
    )
    .expect("PyTorch's state dict");
    for ext in ["safetensors", "npz"] {
        let path = dir.join(format!("w.{ext}"));
        let path_text = path.to_string_lossy().into_owned();
        let r = tsrun(&["state-dict", "fixtures/models/mlp.pt", "-o", &path_text]);
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        let got = tsrun::internals::runtime::module::read_state_dict(&path).expect("read back");
        // safetensors stores its tensors sorted by name, npz in state_dict order
        let mut got_keys: Vec<&String> = got.keys().collect();
        let mut want_keys: Vec<&String> = expected.keys().collect();
        if ext == "safetensors" {
            got_keys.sort();
            want_keys.sort();
        }
        assert_eq!(got_keys, want_keys, "{ext}");
        for (k, t) in &expected {
            assert_eq!(
                got[k].to_vec::<f32>().expect("f32"),
                t.to_vec::<f32>().expect("f32"),
                "{ext} {k}"
            );
        }
    }
    let bad = tsrun(&[
        "state-dict",
        "fixtures/models/mlp.pt",
        "-o",
        &dir.join("w.txt").to_string_lossy(),
    ]);
    assert_eq!(bad.code, Some(1));
    assert!(
        bad.stderr.contains("must be .safetensors or .npz"),
        "{}",
        bad.stderr
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn ops_lists_every_operator_a_model_uses() {
    let r = tsrun(&["ops", "fixtures/models/unsupported_ops.pt"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let missing: Vec<&str> = r.stdout.lines().filter(|l| l.starts_with("no ")).collect();
    assert!(
        missing.len() >= 2,
        "all missing operators at once:\n{}",
        r.stdout
    );
    assert!(
        missing.iter().all(|l| l.contains("first used at code/")),
        "{}",
        r.stdout
    );
    let mlp = tsrun(&["ops", "fixtures/models/mlp.pt", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&mlp.stdout).expect("json");
    let names: Vec<&str> = v["operators"]
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|o| o["name"].as_str())
        .collect();
    // the aten ops of PyTorch's own mlp.graph / linear's and relu's code
    assert!(
        names.contains(&"aten::linear") && names.contains(&"aten::relu"),
        "{names:?}"
    );
}

/// `torch.jit.fork` / `torch.jit.wait` run in the interpreter (no registry kernel): a model
/// using them (which tests/suite/fork.rs runs) lists no operator without a kernel.
#[test]
fn ops_counts_fork_and_wait_as_supported() {
    let r = tsrun(&["ops", "fixtures/models/lang_fork.pt"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(
        !r.stdout.lines().any(|l| l.starts_with("no ")),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.ends_with("without a kernel\n") && r.stdout.contains(", 0 without a kernel"),
        "{}",
        r.stdout
    );
}

#[test]
fn parse_graph_prints_back_and_runs_pytorch_ir() {
    let text =
        std::fs::read_to_string(fixtures_dir().join("cli").join("graph.txt")).expect("graph");
    let r = tsrun(&["parse-graph", "fixtures/cli/graph.txt"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(r.stdout, text);
    let expected: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures_dir().join("cli").join("graph_expected.json"))
            .expect("golden"),
    )
    .expect("json");
    let run = tsrun(&[
        "parse-graph",
        "fixtures/cli/graph.txt",
        "-i",
        "fixtures/cli/graph_x.npy",
        "-i",
        "fixtures/cli/graph_y.npy",
        "-i",
        "-0.5",
        "--json",
    ]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let v: serde_json::Value = serde_json::from_str(&run.stdout).expect("json");
    let got: Vec<f64> = v["tensor"]["data"]
        .as_array()
        .expect("data")
        .iter()
        .filter_map(|x| x.as_f64())
        .collect();
    let want: Vec<f64> = expected["out"]
        .as_array()
        .expect("out")
        .iter()
        .filter_map(|x| x.as_f64())
        .collect();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert!(
            (g - w).abs() <= 1e-6 * w.abs().max(1.0),
            "{got:?} vs {want:?}"
        );
    }
    // an exponent is a number too, not a flag
    let exponent = tsrun(&[
        "parse-graph",
        "fixtures/cli/graph.txt",
        "-i",
        "fixtures/cli/graph_x.npy",
        "-i",
        "fixtures/cli/graph_y.npy",
        "-i",
        "-1e-3",
    ]);
    assert_eq!(exponent.code, Some(0), "{}", exponent.stderr);
    let dir = temp_dir("parse-graph");
    let broken = dir.join("broken.txt");
    std::fs::write(
        &broken,
        "graph(%x : Tensor):\n  %1 : Tensor = aten::relu(%y)\n  return (%1)\n",
    )
    .expect("write");
    let bad = tsrun(&["parse-graph", &broken.to_string_lossy()]);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(bad.code, Some(1));
    assert!(bad.stderr.contains("broken.txt:2:"), "{}", bad.stderr);
}

#[test]
fn results_write_to_npy_and_safetensors() {
    let dir = temp_dir("outputs");
    let expected = tsrun::internals::runtime::module::read_npz(
        &fixtures_dir().join("cli").join("mlp_expected.npz"),
    )
    .expect("PyTorch's result");
    let want = expected["out"].to_vec::<f32>().expect("f32");
    for ext in ["npy", "safetensors", "npz"] {
        let path = dir.join(format!("out.{ext}"));
        let r = tsrun(&[
            "run",
            "fixtures/models/mlp.pt",
            "-i",
            "fixtures/cli/mlp_input.npy",
            "-o",
            &path.to_string_lossy(),
        ]);
        assert_eq!(r.code, Some(0), "{ext}: {}", r.stderr);
        let got = match ext {
            "npy" => tsrun::internals::cli::inputs::read_npy(&path).expect("npy"),
            _ => tsrun::internals::runtime::module::read_state_dict(&path).expect("read back")
                ["out"]
                .clone(),
        };
        let got = got.to_vec::<f32>().expect("f32");
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-6, "{ext}: {got:?} vs {want:?}");
        }
    }
    // a tuple result has no single array to put in a .npy
    let tuple = tsrun(&[
        "run",
        "fixtures/cli/strings.pt",
        "-i",
        "a b",
        "-o",
        &dir.join("t.npy").to_string_lossy(),
    ]);
    assert_eq!(tuple.code, Some(1));
    assert!(
        tuple.stderr.contains("a .npy holds one tensor"),
        "{}",
        tuple.stderr
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn code_and_graph_print_json() {
    let code = tsrun(&["code", "fixtures/models/mlp.pt", "--json"]);
    let text = tsrun(&["code", "fixtures/models/mlp.pt"]);
    let v: serde_json::Value = serde_json::from_str(&code.stdout).expect("json");
    assert_eq!(v["code"].as_str(), Some(text.stdout.as_str()));
    let graph = tsrun(&["graph", "fixtures/models/mlp.pt", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&graph.stdout).expect("json");
    assert!(
        v["graph"]
            .as_str()
            .is_some_and(|g| g.starts_with("graph(%self")),
        "{v}"
    );
}
