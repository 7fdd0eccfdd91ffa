//! Golden tests: every case of fixtures/ops/calculus.json (written by
//! fixtures/gen_ops_calculus.py from PyTorch) must match PyTorch's result or error.

use crate::common;

#[test]
fn calculus_ops_match_pytorch() {
    common::assert_op_cases("calculus");
}
