//! Golden tests: every case of fixtures/ops/torch_library_ops.json (written by
//! fixtures/gen_ops_torch_library.py from PyTorch) must match PyTorch's result, error, and the
//! tensors the op writes: the operators PyTorch's Python libraries define over aten (`fsdp::`,
//! `inductor::`, `onnx::`, `flex_lib::`, `flex_gemm::`, `_test::`, `_inductor_test::`, `debug_mode_ops::`) and
//! NNPACK's convolution entry points, and the `profiler::` record-function handles and the
//! futures they hand through.

use crate::common;

#[test]
fn torch_library_ops_match_pytorch() {
    common::assert_op_cases("torch_library_ops");
}

/// A saved scripted module that hands a forked call's future through
/// `record_function._call_end_callbacks_on_future`
/// (fixtures/record_function_future, from fixtures/gen_ops_torch_library.py) gives PyTorch's
/// results.
#[test]
fn record_function_future_module_matches_pytorch() {
    crate::ops_generator_values::assert_module_cases("record_function_future", None);
}
