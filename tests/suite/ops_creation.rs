//! Golden tests: every case of fixtures/ops/creation.json (written by fixtures/gen_ops_creation.py from
//! PyTorch) runs through the registry and must match PyTorch's result or error.

use crate::common;

#[test]
fn creation_ops_match_pytorch() {
    common::assert_op_cases("creation");
}
