//! Nested tensors (PyTorch's strided NestedTensorImpl): the kernels that build and query them
//! and their repr against PyTorch's goldens (fixtures/gen_ops_nested.py), and a scripted
//! TransformerEncoder whose padding mask sends PyTorch's code down the nested fast path
//! (fixtures/zoo_nn.py `fx_transformer_encoder_nested`).

use crate::common::{self, compare, decode, Arrays};
use serde_json::Value;
use tsrun::internals::cli::repr::tensor_repr;
use tsrun::internals::ops::OpContext;
use tsrun::IValue;

#[test]
fn nested_tensor_kernels_match_pytorch() {
    common::assert_op_cases("nested");
}

#[test]
fn nested_tensors_print_as_python_does() {
    let dir = common::fixtures_dir().join("nested");
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("reprs.json")).expect("reprs"))
            .expect("json");
    let mut arrays = Arrays::open(&dir.join("reprs.npz"));
    for case in json["cases"].as_array().expect("cases") {
        let IValue::Tensor(t) = decode(&case["value"], &mut arrays) else {
            panic!("not a tensor")
        };
        assert!(t.is_nested());
        assert_eq!(tensor_repr(&t), case["repr"].as_str().expect("repr"));
    }
}

/// The golden calls of the fixture, in order: (method, inputs, PyTorch's output, rtol, atol).
fn encoder_calls() -> Vec<(String, Vec<IValue>, IValue, f64, f64)> {
    let dir = common::fixtures_dir().join("golden/transformer_encoder_nested");
    let runs: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("runs.json")).expect("runs"))
            .expect("json");
    let mut arrays = Arrays::open(&dir.join("runs.npz"));
    runs["calls"]
        .as_array()
        .expect("calls")
        .iter()
        .map(|c| {
            let inputs = c["inputs"]
                .as_array()
                .expect("inputs")
                .iter()
                .map(|v| decode(v, &mut arrays))
                .collect();
            (
                c["method"].as_str().expect("method").to_string(),
                inputs,
                decode(&c["output"], &mut arrays),
                c["rtol"].as_f64().expect("rtol"),
                c["atol"].as_f64().expect("atol"),
            )
        })
        .collect()
}

#[test]
fn transformer_encoder_takes_the_nested_fast_path_like_pytorch() {
    let m = crate::load_common::load_fixture("transformer_encoder_nested").expect("load");
    // the archive's code builds the nested tensor and pads the result back
    let code: String = m.code_files().values().map(|c| c.to_string()).collect();
    assert!(
        code.contains("torch._nested_tensor_from_mask(src"),
        "{code}"
    );
    assert!(code.contains("torch.to_padded_tensor(output"), "{code}");
    let calls = encoder_calls();
    assert_eq!(calls.len(), 4);
    for (i, (method, inputs, want, rtol, atol)) in calls.into_iter().enumerate() {
        let ctx = OpContext::with_seed(0);
        let got = if method == "forward" {
            m.call_with(inputs.clone(), &ctx)
        } else {
            m.run_method_with(&method, inputs.clone(), &ctx)
        }
        .unwrap_or_else(|e| panic!("call {i} ({method}): {e}"));
        compare(&got, &want, rtol, atol, &format!("call {i} ({method})")).expect("matches");
        let IValue::Tensor(out) = got else {
            panic!("call {i} gave {got:?}")
        };
        match (i, method.as_str()) {
            // with the mask: the padded positions are to_padded_tensor's exact zeros (the
            // dense path would have computed them)
            (0, "forward") => {
                let v = out.to_vec::<f32>().expect("values");
                let row = |b: usize, s: usize| &v[(b * 5 + s) * 8..][..8];
                assert!((3..5).all(|s| row(1, s).iter().all(|&x| x == 0.0)));
                assert!((1..5).all(|s| row(2, s).iter().all(|&x| x == 0.0)));
                assert!(row(2, 0).iter().any(|&x| x != 0.0));
            }
            // without it: the dense result everywhere
            (1, "forward") => assert!(!out.is_nested()),
            (_, "nested") | (_, "layer_nested") => {
                let parts = out.nested_parts().expect("a nested result");
                let lengths: Vec<usize> = parts.sizes().iter().map(|s| s[0]).collect();
                assert_eq!(lengths, [5, 3, 1]);
            }
            other => panic!("unexpected call {other:?}"),
        }
    }
}
