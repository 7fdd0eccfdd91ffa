//! Depthwise convolutions (`nn.Conv2d` with one input channel per group) against PyTorch's
//! outputs from fixtures/gen_depthwise.py, on one thread and on three: channel counts that are
//! not whole 16-channel registers, stride 2 and a non-square stride, dilation, 'same' padding
//! with an even kernel, a batch of two without bias, wide and narrow rows, and a 16-channel
//! plane too narrow in channels for three threads' channel blocks. Tolerance: the model
//! goldens' (conv_fusion's `assert_close`).

use crate::common::{fixtures_dir, Arrays};
use crate::conv_fusion::assert_close;
use tsrun::internals::runtime::Module;
use tsrun::internals::tensor::{DType, Tensor};
use tsrun::internals::values::IValue;

const CASES: &[&str] = &[
    "dw3_s2_72ch",
    "dw3_s1_88ch_wide",
    "dw3_dilated_24ch",
    "dw5_s2_batch_nobias",
    "dw4_same_32ch",
    "dw_3x5_stride_1x2",
    "dw5_s1_120ch_narrow",
    "dw3_s2_16ch_plane",
];

#[test]
fn depthwise_convolutions_match_pytorch() {
    match_pytorch_on_threads("depthwise", CASES);
}

/// Each case's module (`fixtures/<fixture>/<case>.pt`) run on one thread and on three against
/// PyTorch's output (`goldens.npz`: `<case>.x` in, `<case>.y` out).
pub(crate) fn match_pytorch_on_threads(fixture: &str, cases: &[&str]) {
    let dir = fixtures_dir().join(fixture);
    let mut g = Arrays::open(&dir.join("goldens.npz"));
    for case in cases {
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
