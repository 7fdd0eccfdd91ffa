//! Golden tests: every case of fixtures/ops/distribution_grads.json (written by
//! fixtures/gen_ops_distribution_grads.py from PyTorch) must match PyTorch's result or error.

use crate::common;

#[test]
fn distribution_gradient_ops_match_pytorch() {
    common::assert_op_cases("distribution_grads");
}
