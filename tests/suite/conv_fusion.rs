//! Convolution chains (conv -> batch norm -> activation modules: depthwise 3x3/5x5 at stride 1
//! and 2, grouped, dilated, 1x1 wide, squeeze-excitation, BasicBlock, 1x1 convolutions of 1x1
//! maps) against PyTorch's outputs from fixtures/gen_conv_fusion.py, including a module changed
//! after its first call. They guard the depthwise, matrix-vector and epilogue kernels, and any
//! future folding of batch norm into the convolution (a plan-time fusion was tried and taken
//! out: it folded on the first call and kept a second copy of the weights, raising resnet18's
//! peak memory from +48 to +180 MiB).

use crate::common::{fixtures_dir, Arrays};
use tsrun::internals::runtime::Module;
use tsrun::internals::tensor::{DType, Tensor};
use tsrun::internals::values::IValue;

/// The model goldens' tolerance (tests/suite/run_models.rs).
const RTOL: f64 = 1e-4;
const ATOL: f64 = 1e-5;

fn dir() -> std::path::PathBuf {
    fixtures_dir().join("conv_fusion")
}

fn goldens() -> Arrays {
    Arrays::open(&dir().join("goldens.npz"))
}

fn load(case: &str) -> Module {
    let m = Module::load(dir().join(format!("{case}.pt"))).expect("load");
    m.eval();
    m
}

fn run(m: &Module, x: &Tensor) -> Tensor {
    m.forward(&[IValue::Tensor(x.clone())])
        .expect("forward")
        .as_tensor()
        .expect("tensor result")
        .clone()
}

pub(crate) fn assert_close(what: &str, got: &Tensor, want: &Tensor) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    let (g, w) = (
        got.to_vec::<f64>().expect("got"),
        want.to_vec::<f64>().expect("want"),
    );
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        assert!(
            (a - b).abs() <= ATOL + RTOL * b.abs(),
            "{what}: element {i}: {a} vs PyTorch {b}"
        );
    }
}

const CASES: &[&str] = &[
    "cbr_3x3",
    "hardswish_s2_dilated",
    "relu6_bias",
    "grouped_hardsigmoid",
    "hardtanh",
    "silu_1x1_wide",
    "dw3_s1",
    "dw3_s2",
    "dw5_s1_narrow",
    "dw5_s2",
    "dw3_s2_narrow_nopad",
    "conv_bn_no_act",
    "conv_act_no_bn",
    "no_affine_silu",
    "squeeze_excitation",
    "basic_block",
    // the wide tile's direct image path (and its packed fallback)
    "wide_3x3_s1",
    "wide_3x3_s2_batch",
    "wide_stem_7x7_s2",
    "wide_1x1_s2",
    "wide_dilated",
    "wide_1x1_partial_tile",
    "wide_1d",
    "wide_rows_not_tiles",
    // 1x1 convolutions of 1x1 maps: the matrix-vector path, and a padded one that is not
    "se_batch2_odd",
    "se_192",
    "pointwise_1x1_map_s2",
    "pointwise_1x1_map_pad",
    // mobilenet_v3_small's stride-2 row kernel on an odd-width plane
    "mbv3_dw3_s2_odd_wide",
];

#[test]
fn fused_chains_match_pytorch() {
    let mut g = goldens();
    for case in CASES {
        let m = load(case);
        let x = g.tensor(&format!("{case}.x"), DType::Float32);
        let want = g.tensor(&format!("{case}.y"), DType::Float32);
        // twice: the first call folds, the second reads the folded weights from the cache
        assert_close(case, &run(&m, &x), &want);
        assert_close(case, &run(&m, &x), &want);
    }
}

#[test]
fn fused_chains_follow_changes_to_the_module() {
    let mut g = goldens();
    let m = load("mutate");
    let x = g.tensor("mutate.x", DType::Float32);
    assert_close(
        "before",
        &run(&m, &x),
        &g.tensor("mutate.y", DType::Float32),
    );

    // the conv weight doubled in place (bumps its storage's version)
    let w = m
        .attr("0")
        .and_then(|c| c.as_object().and_then(|o| o.get("weight")))
        .and_then(|w| w.as_tensor().cloned())
        .expect("conv weight");
    w.write::<f32>()
        .expect("write")
        .view_mut()
        .mapv_inplace(|v| v * 2.0);
    let want = g.tensor("mutate.after_scale", DType::Float32);
    assert_close("weight doubled", &run(&m, &x), &want);

    // the running variance replaced through the module API
    let var = g.tensor("mutate.new_var", DType::Float32);
    m.set_attr("1.running_var", IValue::Tensor(var))
        .expect("set running_var");
    let want = g.tensor("mutate.after_var", DType::Float32);
    assert_close("running_var replaced", &run(&m, &x), &want);

    // training mode normalizes by the batch and updates the running statistics
    m.train(true);
    let want = g.tensor("mutate.train", DType::Float32);
    assert_close("training mode", &run(&m, &x), &want);
    m.eval();
    let want = g.tensor("mutate.eval_again", DType::Float32);
    assert_close("eval after training", &run(&m, &x), &want);
}

#[test]
fn fused_chains_reject_what_the_unfused_code_rejects() {
    // an input with the wrong channel count fails as the conv fails, with the conv's frame
    let m = load("cbr_3x3");
    let x = Tensor::zeros(&[1, 5, 6, 6], DType::Float32).expect("x");
    let err = m
        .forward(&[IValue::Tensor(x)])
        .expect_err("wrong channels")
        .to_string();
    assert!(err.contains("channels"), "{err}");
    // float64 inputs run unfused, in float64 (PyTorch: the weights must match the input)
    let x = Tensor::zeros(&[1, 8, 6, 6], DType::Float64).expect("x");
    assert!(m.forward(&[IValue::Tensor(x)]).is_err());
}
