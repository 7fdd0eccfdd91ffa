//! `-i` inputs (src/cli/inputs.rs): literals with negative numbers, lists, tuples and strings,
//! float16 `.npy`, npz by position, `--random` as torch.randn, and half models run on float32
//! inputs; expected values from PyTorch (fixtures/gen_cli.py).

use crate::cli_common::tsrun;
use crate::common::fixtures_dir;
use tsrun::internals::cli::inputs::parse_literal;
use tsrun::IValue;

#[test]
fn literals_parse_as_python_values() {
    let repr = |text: &str| tsrun::internals::cli::run::describe(&parse_literal(text).expect(text));
    assert_eq!(repr("-0.5"), "-0.5");
    assert_eq!(repr("-3"), "-3");
    assert_eq!(repr("1e-3"), "0.001");
    assert_eq!(repr("[1,2]"), "[1, 2]");
    assert_eq!(repr("[1, 2.5]"), "[1.0, 2.5]");
    assert_eq!(repr("(3,4)"), "(3, 4)");
    assert_eq!(repr("(3,)"), "(3,)");
    assert_eq!(repr("[[1,2],[3]]"), "[[1, 2], [3]]");
    assert_eq!(repr("['a', \"b\"]"), "['a', 'b']");
    // Python's escapes; the expected text is Python's repr of the same literal
    assert_eq!(repr(r#""a\"b\n\u00e9\\""#), r#"'a"b\né\\'"#);
    assert_eq!(repr("hello world"), "'hello world'");
    assert_eq!(repr("none"), "None");
    assert_eq!(repr("True"), "True");
    assert!(matches!(
        parse_literal("[1, 'a']"),
        Err(tsrun::internals::cli::error::CliError::Usage(_))
    ));
    assert!(matches!(
        parse_literal("[1, 2"),
        Err(tsrun::internals::cli::error::CliError::Usage(_))
    ));
    assert!(matches!(
        parse_literal("'open"),
        Err(tsrun::internals::cli::error::CliError::Usage(_))
    ));
}

#[test]
fn a_negative_number_is_an_input_not_a_flag() {
    // lang_functions-style scalar models are not needed: --set takes the same literal, and the
    // half model's forward refuses a float, proving the value reached the call
    let r = tsrun(&["run", "fixtures/models/mlp.pt", "-i", "-0.5"]);
    assert_ne!(r.code, Some(2), "taken as a flag: {}", r.stderr);
    assert!(!r.stderr.contains("unexpected argument"), "{}", r.stderr);
}

#[test]
fn random_inputs_match_torch_randn() {
    let cases: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures_dir().join("cli").join("randn.json")).expect("golden"),
    )
    .expect("json");
    for case in cases.as_array().expect("list") {
        let seed = case["seed"].as_u64().expect("seed");
        let shape: Vec<String> = case["shape"]
            .as_array()
            .expect("shape")
            .iter()
            .map(|d| d.to_string())
            .collect();
        let spec = shape.join("x");
        let values =
            tsrun::internals::cli::inputs::random_inputs(std::slice::from_ref(&spec), seed)
                .expect("random");
        let IValue::Tensor(t) = &values[0] else {
            panic!("a tensor")
        };
        let got = t.to_vec::<f32>().expect("f32");
        let want: Vec<f32> = case["values"]
            .as_array()
            .expect("values")
            .iter()
            .map(|v| v.as_f64().expect("number") as f32)
            .collect();
        // below 16 elements bit-exact; from 16 on PyTorch's vectorized Box-Muller runs in float32
        // and tsrun's in float64 (ops/random.rs), a rounding apart
        let tol = if got.len() < 16 { 0.0 } else { 2e-6 };
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (g - w).abs() <= tol * w.abs().max(1.0),
                "--random {spec} --seed {seed}: {got:?} vs {want:?}"
            );
        }
    }
    assert!(tsrun::internals::cli::inputs::random_inputs(&["2x3:int64".into()], 0).is_err());
    assert!(tsrun::internals::cli::inputs::random_inputs(&["2xq".into()], 0).is_err());
}

#[test]
fn a_half_model_runs_on_float32_inputs_with_one_warning() {
    let dir = "fixtures/cli";
    let expected = format!("{dir}/mlp_half_expected.npz");
    let r = tsrun(&[
        "compare",
        &format!("{dir}/mlp_half.pt"),
        "-i",
        &format!("{dir}/mlp_input.npy"),
        "--expected",
        &expected,
        "--rtol",
        "0",
        "--atol",
        "0",
    ]);
    assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
    assert_eq!(
        r.stderr
            .matches("warning: casting float32 inputs to float16")
            .count(),
        1,
        "{}",
        r.stderr
    );
    let quiet = tsrun(&[
        "compare",
        &format!("{dir}/mlp_half.pt"),
        "-i",
        &format!("{dir}/mlp_input.npy"),
        "--expected",
        &expected,
        "--cast-inputs",
    ]);
    assert_eq!(quiet.code, Some(0), "{}", quiet.stderr);
    assert!(quiet.stderr.is_empty(), "{}", quiet.stderr);
    // a float16 .npy needs no cast
    let half = tsrun(&[
        "compare",
        &format!("{dir}/mlp_half.pt"),
        "-i",
        &format!("{dir}/mlp_input_half.npy"),
        "--expected",
        &expected,
        "--rtol",
        "0",
        "--atol",
        "0",
    ]);
    assert_eq!(half.code, Some(0), "{}", half.stderr);
    assert!(half.stderr.is_empty(), "{}", half.stderr);
}

#[test]
fn npz_arrays_are_inputs_by_position() {
    let r = tsrun(&[
        "compare",
        "fixtures/models/mlp.pt",
        "-i",
        "fixtures/cli/mlp_inputs.npz",
        "--expected",
        "fixtures/cli/mlp_expected.npz",
    ]);
    assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
    let picked = tsrun(&[
        "compare",
        "fixtures/models/mlp.pt",
        "-i",
        "fixtures/cli/mlp_inputs.npz:arr_0",
        "--expected",
        "fixtures/cli/mlp_expected.npz",
    ]);
    assert_eq!(picked.code, Some(0), "{}", picked.stderr);
    let unknown = tsrun(&[
        "run",
        "fixtures/models/mlp.pt",
        "-i",
        "fixtures/cli/mlp_inputs.npz:x",
    ]);
    assert_eq!(unknown.code, Some(2));
    assert!(
        unknown
            .stderr
            .contains("has no array named \"x\" (it has: arr_0)"),
        "{}",
        unknown.stderr
    );
}

#[test]
fn safetensors_inputs_by_name() {
    // the state dict exported as safetensors, read back as the inputs of a second export's check
    let dir = crate::cli_common::temp_dir("safetensors-inputs");
    let x =
        tsrun::internals::cli::inputs::read_npy(&fixtures_dir().join("cli").join("mlp_input.npy"))
            .expect("npy");
    let path = dir.join("inputs.safetensors");
    let bytes = tsrun::internals::runtime::module::safetensors_bytes(&[("x".to_string(), x)])
        .expect("bytes");
    std::fs::write(&path, bytes).expect("write");
    let path = path.to_string_lossy().into_owned();
    let r = tsrun(&[
        "compare",
        "fixtures/models/mlp.pt",
        "-i",
        &path,
        "--expected",
        "fixtures/cli/mlp_expected.npz",
    ]);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
}

#[test]
fn a_bfloat16_npy_runs_a_bfloat16_model_bit_exactly() {
    // mlp_input_bf16.npy is ml_dtypes' bfloat16 ('<V2'); PyTorch's result is exact in bfloat16
    let r = tsrun(&[
        "compare",
        "fixtures/cli/mlp_bf16.pt",
        "-i",
        "fixtures/cli/mlp_input_bf16.npy",
        "--expected",
        "fixtures/cli/mlp_bf16_expected.npz",
        "--rtol",
        "0",
        "--atol",
        "0",
    ]);
    assert_eq!(r.code, Some(0), "{}\n{}", r.stdout, r.stderr);
    assert!(r.stderr.is_empty(), "{}", r.stderr);
}
