//! Golden tests: every case of fixtures/ops/elementwise.json (written by fixtures/gen_ops_elementwise.py from
//! PyTorch) runs through the registry and must match PyTorch's result or error.

use crate::common;

#[test]
fn elementwise_ops_match_pytorch() {
    common::assert_op_cases("elementwise");
}
