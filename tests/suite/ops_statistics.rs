//! Golden tests: every case of fixtures/ops/statistics.json (written by
//! fixtures/gen_ops_statistics.py from PyTorch) must match PyTorch's result or error.

use crate::common;

#[test]
fn statistics_ops_match_pytorch() {
    common::assert_op_cases("statistics");
}
