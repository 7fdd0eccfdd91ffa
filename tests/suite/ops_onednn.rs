//! Golden cases for the `onednn::` int8 operators of x86 inductor's quantization lowering
//! (qlinear / qconv pointwise with post-ops, the weight prepacks, the fp16 dynamic linear),
//! written by fixtures/gen_ops_onednn.py.

use crate::common;

#[test]
fn onednn_quantized_ops() {
    common::assert_op_cases("onednn");
}
