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

/// A squeeze (adaptive average pooling to one value a plane) of a map large enough to be
/// shared among threads gives on three threads the floats one thread gives: each plane is
/// summed alike whichever task holds it (the small maps of `pool_ops` run on one thread and
/// are checked against PyTorch).
#[test]
fn large_squeeze_is_the_same_on_any_thread_count() {
    use tsrun::internals::ops::{Args, OpContext, Registry};
    use tsrun::internals::tensor::Tensor;
    use tsrun::internals::values::{IValue, List, Type};
    let kernel = Registry::global()
        .lookup("aten::adaptive_avg_pool2d", "")
        .expect("kernel");
    // 2 x 40 planes of 28 x 28: above the threshold at which the planes are shared
    let n = 2 * 40 * 28 * 28;
    let data: Vec<f32> = (0..n)
        .map(|i| ((i * 7919) % 1013) as f32 / 97.0 - 5.0)
        .collect();
    let x = Tensor::from_vec(data, &[2, 40, 28, 28]).expect("x");
    let squeeze = |threads: usize| -> Vec<u32> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("pool");
        pool.install(|| {
            let size = IValue::List(List::new(Type::Int, vec![IValue::Int(1), IValue::Int(1)]));
            let mut args = vec![IValue::Tensor(x.clone()), size];
            let out = kernel(&mut Args::new(
                "aten::adaptive_avg_pool2d",
                &mut args,
                &OpContext::default(),
            ))
            .expect("adaptive_avg_pool2d");
            let t = out.as_tensor().expect("tensor").clone();
            assert_eq!(t.shape(), &[2, 40, 1, 1]);
            t.to_vec::<f32>()
                .expect("values")
                .iter()
                .map(|v| v.to_bits())
                .collect()
        })
    };
    assert_eq!(squeeze(1), squeeze(3));
}
