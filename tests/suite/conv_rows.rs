//! Dense convolutions with few output channels and a short reduction (a network's stem), which
//! the AVX-512 backend runs directly on the input (`conv_rows` in src/ops/conv.rs), against
//! PyTorch's outputs from fixtures/gen_conv_rows.py, on one thread and on three: a stem chain
//! (conv -> batch norm -> hardswish, folded and fused), 8/16/24/32 output channels, rows ending
//! in a partial register, strides 2, 3 and (1, 2), dilation, 'same' padding with an even
//! kernel, a batch of two without bias. Tolerance: the model goldens' (conv_fusion's
//! `assert_close`).

use crate::common::{fixtures_dir, Arrays};
use crate::conv_fusion::assert_close;
use tsrun::internals::runtime::Module;
use tsrun::internals::tensor::{DType, Tensor};
use tsrun::internals::values::IValue;

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
    let dir = fixtures_dir().join("conv_rows");
    let mut g = Arrays::open(&dir.join("goldens.npz"));
    for case in CASES {
        let m = Module::load(dir.join(format!("{case}.pt"))).expect("load");
        m.eval();
        let x = g.tensor(&format!("{case}.x"), DType::Float32);
        let want = g.tensor(&format!("{case}.y"), DType::Float32);
        for threads in [1, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("pool");
            let got: Tensor = pool.install(|| {
                m.forward(&[IValue::Tensor(x.clone())])
                    .expect("forward")
                    .as_tensor()
                    .expect("tensor result")
                    .clone()
            });
            assert_close(&format!("{case} on {threads} threads"), &got, &want);
        }
    }
}
