//! Golden operator cases for the nn families, written by fixtures/gen_ops_nn.py.

use crate::common;

#[test]
fn linalg_ops() {
    common::assert_op_cases("linalg");
}

#[test]
fn conv_ops() {
    common::assert_op_cases("conv");
}

#[test]
fn pool_ops() {
    common::assert_op_cases("pool");
}

#[test]
fn norm_ops() {
    common::assert_op_cases("norm");
}

#[test]
fn nn_ops() {
    common::assert_op_cases("nn");
}

#[test]
fn rnn_ops() {
    common::assert_op_cases("rnn");
}

#[test]
fn vision_ops() {
    common::assert_op_cases("vision");
}

/// ps_roi_align / ps_roi_pool, deform_conv2d, box_iou_rotated and the quantized qnms /
/// qroi_align (fixtures/gen_ops_torchvision.py).
#[test]
fn torchvision_detection_ops() {
    common::assert_op_cases("torchvision");
}

/// MKLDNN (oneDNN) CPU ops over dense representations of MKLDNN tensors, and the fused
/// mkldnn::_linear_pointwise / _convolution_pointwise ops (fixtures/gen_ops_mkldnn.py).
#[test]
fn mkldnn_ops() {
    common::assert_op_cases("mkldnn");
}

/// Losses, grid sampling, im2col/col2im, special functions and tensor queries
/// (fixtures/gen_ops_special_losses.py).
#[test]
fn special_function_loss_grid_and_query_ops() {
    common::assert_op_cases("special_losses");
}
