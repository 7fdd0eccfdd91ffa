//! Golden tests: every case of fixtures/ops/forward_ad.json (written by
//! fixtures/gen_ops_forward_ad.py from PyTorch in inference mode) must match PyTorch:
//! `_make_dual`, `_make_dual_copy` and `_fw_primal_copy` give the primal.

use crate::common;

#[test]
fn forward_ad_ops_match_pytorch_inference_mode() {
    common::assert_op_cases("forward_ad");
}
