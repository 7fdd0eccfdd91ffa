//! Golden tests: every case of fixtures/ops/prims.json (written by fixtures/gen_ops_prims.py
//! from PyTorch) must match PyTorch's result or error: the `prims::` aliases of aten kernels.

use crate::common;

#[test]
fn prims_ops_match_pytorch() {
    common::assert_op_cases("prims");
}
