//! Golden cases for the CPU aten / onnx / mkldnn / sparse overloads added for issue 12's
//! coverage by the `covaten` helper (ONNX Attention-23, `_fused_sdp_choice`,
//! `choose_qparams_optimized`, `_sparse_mm_reduce_impl`, `mkldnn_rnn_layer` and its weight
//! reorder, the 4-bit dynamic linear, the mkldnn prepacked convolution, `_remove_batch_dim`,
//! `retain_grad`), written
//! by fixtures/gen_ops_covaten.py.

use crate::common::{self, compare, decode, decode_all, fixtures_dir, Arrays};
use serde_json::Value;
use std::fs::File;
use tsrun::internals::ops::grad_mode;
use tsrun::internals::ops::{Args, OpContext, Registry};
use tsrun::internals::values::IValue;

#[test]
fn covaten_ops() {
    common::assert_op_cases("covaten");
}

/// `mkldnn_rnn_layer` as PyTorch runs it under `torch.no_grad()` (in grad mode oneDNN also
/// returns its opaque training workspace, which tsrun refuses to make up).
#[test]
fn mkldnn_rnn_layer_without_grad() {
    grad_mode::no_grad(|| common::assert_op_cases("covaten_no_grad"));
}

/// In grad mode every case fails loudly (the workspace), none gives a partial answer.
#[test]
fn mkldnn_rnn_layer_refuses_grad_mode() {
    let (passed, failures) =
        grad_mode::with_grad_enabled(true, || common::run_op_cases("covaten_no_grad"));
    assert!(
        !failures.is_empty() && failures.iter().all(|f| f.contains("training workspace")),
        "grad mode: {passed} passed (the expected errors), failures {failures:?}"
    );
}

/// Cases whose arguments listed in `requires_grad` require grad in PyTorch (the goldens'
/// tensors carry no flag: set here): `_sparse_mm_reduce_impl`'s argmax indices for `amax` /
/// `amin`, `retain_grad`.
#[test]
fn ops_with_arguments_requiring_grad() {
    let dir = fixtures_dir().join("ops");
    let json: Value =
        serde_json::from_reader(File::open(dir.join("covaten_requires_grad.json")).expect("json"))
            .expect("valid json");
    let mut arrays = Arrays::open(&dir.join("covaten_requires_grad.npz"));
    let ctx = OpContext::default();
    let cases = json["cases"].as_array().expect("cases");
    for (i, case) in cases.iter().enumerate() {
        let op = case["op"].as_str().expect("op");
        let kernel = Registry::global().lookup(op, "").expect("kernel");
        let mut args: Vec<IValue> = decode_all(&case["args"], &mut arrays);
        for j in case["requires_grad"].as_array().expect("requires_grad") {
            if let Some(IValue::Tensor(t)) = args.get_mut(j.as_u64().expect("index") as usize) {
                t.set_requires_grad(true);
            }
        }
        let got =
            grad_mode::with_grad_enabled(true, || kernel(&mut Args::new(op, &mut args, &ctx)))
                .unwrap_or_else(|e| panic!("case {i} {op}: {e}"));
        let want = decode(&case["out"], &mut arrays);
        let (rtol, atol) = (
            case["rtol"].as_f64().unwrap_or(1e-4),
            case["atol"].as_f64().unwrap_or(1e-5),
        );
        compare(&got, &want, rtol, atol, "out").unwrap_or_else(|e| panic!("case {i} {op}: {e}"));
    }
    assert_eq!(cases.len(), 7);
}
