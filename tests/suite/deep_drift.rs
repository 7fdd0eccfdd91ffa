//! Numerical drift on a deep network (issue 12, part 5): a 16-block residual network with
//! batch norm (random running statistics), a strided stage, bilinear upsampling and a classifier
//! (`fixtures/gen_deep_drift.py`) must stay within 1e-5 x the output scale of PyTorch's float32
//! result, the fidelity ONNX Runtime keeps on torchvision models.

use crate::common::{fixtures_dir, Arrays};
use tsrun::internals::runtime::Module;
use tsrun::{DType, IValue};

#[test]
fn deep_resnet_stays_within_1e5_of_output_scale() {
    let dir = fixtures_dir().join("drift");
    let module = Module::load(dir.join("deep_resnet.pt")).expect("load deep_resnet.pt");
    let mut arrays = Arrays::open(&dir.join("deep_resnet.npz"));
    let x = arrays.tensor("input", DType::Float32);
    let out = module.forward(&[IValue::Tensor(x)]).expect("forward");
    let outs = out
        .as_tuple()
        .expect("a (seg, logits) tuple")
        .items()
        .to_vec();
    assert_eq!(outs.len(), 2);
    for (got, key) in outs.iter().zip(["seg", "logits"]) {
        let got = got
            .as_tensor()
            .expect("tensor")
            .to_vec::<f32>()
            .expect("f32");
        let want = arrays
            .tensor(key, DType::Float32)
            .to_vec::<f32>()
            .expect("f32");
        assert_eq!(got.len(), want.len(), "{key}: element count");
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        let err = got
            .iter()
            .zip(&want)
            .fold(0f32, |m, (g, w)| m.max((g - w).abs()));
        assert!(
            err <= 1e-5 * scale,
            "{key}: max abs error {err:e} exceeds 1e-5 x output scale {scale}"
        );
    }
}
