//! Dense convolutions with few output channels and a short reduction (a network's stem), which
//! the AVX-512 backend runs directly on the input (`conv_rows` in src/ops/conv.rs), against
//! PyTorch's outputs from fixtures/gen_conv_rows.py, on one thread and on three: a stem chain
//! (conv -> batch norm -> hardswish, folded and fused), 8/16/24/32 output channels, rows ending
//! in a partial register, strides 2, 3 and (1, 2), dilation, 'same' padding with an even
//! kernel, a batch of two without bias. Tolerance: the model goldens' (conv_fusion's
//! `assert_close`).

use crate::depthwise::match_pytorch_on_threads;

const CASES: &[&str] = &[
    "stem_3to16_s2_bn_hardswish",
    "conv3_s1_8ch_tail",
    "conv5_s2_24ch_batch_nobias",
    "conv3_dilated_32ch",
    "conv4_same_16ch",
    "conv_3x5_stride_1x2",
    "conv3_s3_16ch",
];

#[test]
fn small_dense_convolutions_match_pytorch() {
    match_pytorch_on_threads("conv_rows", CASES);
}
