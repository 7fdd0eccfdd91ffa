//! Golden tests: every case of fixtures/ops/quantized.json (written by
//! fixtures/gen_ops_quantized.py from PyTorch's fbgemm engine) must match PyTorch's result or
//! error; quantized results compare exactly (quantizer and integers).

use crate::common;

#[test]
fn quantized_ops_match_pytorch() {
    common::assert_op_cases("quantized");
}
