//! Golden tests: every case of fixtures/ops/no_autograd.json (written by
//! fixtures/gen_ops_no_autograd.py from PyTorch) must match PyTorch: `_make_dual`,
//! `_make_dual_copy` and `_fw_primal_copy` give the primal (as in inference mode), and
//! `prim::grad` of a tensor no backward pass has run through is None.

use crate::common;

#[test]
fn no_autograd_ops_match_pytorch() {
    common::assert_op_cases("no_autograd");
}
