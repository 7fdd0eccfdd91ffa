//! Golden tests: every case of fixtures/ops/reduce.json (written by fixtures/gen_ops_reduce.py from
//! PyTorch) runs through the registry and must match PyTorch's result or error.

use crate::common;

#[test]
fn reduce_ops_match_pytorch() {
    common::assert_op_cases("reduce");
}
