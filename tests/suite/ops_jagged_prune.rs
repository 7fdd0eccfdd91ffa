//! Golden tests: every case of fixtures/ops/jagged_prune.json (written by
//! fixtures/gen_ops_jagged_prune.py from PyTorch) must match PyTorch's result or error.

use crate::common;

#[test]
fn jagged_and_prune_ops_match_pytorch() {
    common::assert_op_cases("jagged_prune");
}
