//! Mobile archives `optimize_for_mobile` writes: XNNPACK contexts (`__torch__.torch.classes.
//! xnnpack.*OpContext`) as constants and the `prepacked::*_clamp_run` operators that use them.
//! This PyTorch build has no XNNPACK, so fixtures/gen_xnnpack.py takes the expected values from
//! PyTorch's `F.linear` / `F.conv2d` / `F.conv_transpose2d` and `torch.clamp`, which is what the
//! operators compute on the context's original weights.

use crate::common;

/// Each run operator on a context its prepack operator made (clamp bounds open, one-sided and
/// two-sided; strided, padded, dilated, grouped and transposed convolutions).
#[test]
fn xnnpack_prepacked_ops() {
    common::assert_op_cases("xnnpack");
}

/// An archive laid out as optimize_for_mobile writes one (contexts unpickled from constants.pkl,
/// one packed in code) runs and gives PyTorch's result of the same network.
#[test]
fn mobile_archive_with_xnnpack_contexts_runs() {
    let dir = common::fixtures_dir().join("xnnpack");
    let golden = tsrun::read_state_dict(dir.join("golden.npz")).expect("golden");
    let m = tsrun::Module::load(dir.join("mobile_net.pt")).expect("load");
    let out: tsrun::Tensor = m
        .forward(&[golden["x"].clone().into()])
        .expect("runs")
        .extract()
        .expect("a tensor");
    assert_eq!(out.shape(), golden["out"].shape());
    let want = golden["out"].to_vec::<f32>().unwrap();
    let got = out.to_vec::<f32>().unwrap();
    for (g, w) in got.iter().zip(&want) {
        assert!(
            (g - w).abs() <= 1e-5 + 1e-4 * w.abs(),
            "{got:?} vs {want:?}"
        );
    }
}
