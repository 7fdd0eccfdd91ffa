//! Golden tests: every case of fixtures/ops/linalg_factor.json (written by
//! fixtures/gen_ops_linalg_factor.py from PyTorch) must match PyTorch's result or error.

use crate::common;

#[test]
fn linalg_factor_ops_match_pytorch() {
    common::assert_op_cases("linalg_factor");
}
