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
