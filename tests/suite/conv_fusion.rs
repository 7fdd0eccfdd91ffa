//! Convolution chains (conv -> batch norm -> activation modules: depthwise 3x3/5x5 at stride 1
//! and 2, grouped, dilated, 1x1 wide, squeeze-excitation, BasicBlock, 1x1 convolutions of 1x1
//! maps, a resnet18-like network) against PyTorch's outputs from fixtures/gen_conv_fusion.py,
//! including modules changed after their first call. The module calls are fused into one
//! convolution with the batch norm folded into its packed weight (`module_chain` in the
//! interpreter); the tests also count which chains ran fused. (An earlier plan-time fusion
//! kept a second copy of the weights, raising resnet18's peak memory from +48 to +180 MiB;
//! the fold now replaces the packed copy.)

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

pub(crate) fn run(m: &Module, x: &Tensor) -> Tensor {
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

/// (fused chains, calls that ran fused, calls that declined) over the module's plans.
pub(crate) fn chains(m: &Module) -> (usize, u64, u64) {
    m.interpreter().expect("interpreter").module_chains()
}

/// Module chains each case fuses: every conv -> [batch norm] -> [activation] run of module
/// calls on torch.nn's Conv2d (the 1-d convolution and a lone convolution are left alone).
fn expected_chains(case: &str) -> usize {
    match case {
        "wide_1d" | "pointwise_1x1_map_pad" => 0,
        "squeeze_excitation" | "se_batch2_odd" | "se_192" | "basic_block" => 2,
        _ => 1,
    }
}

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
        let n = expected_chains(case);
        assert_eq!(
            chains(&m),
            (n, 2 * n as u64, 0),
            "{case}: chains, fused, declined"
        );
    }
}

#[test]
fn resnet_like_blocks_fuse() {
    let mut g = goldens();
    let m = load("resnet_like");
    let x = g.tensor("resnet_like.x", DType::Float32);
    let want = g.tensor("resnet_like.y", DType::Float32);
    assert_close("resnet_like", &run(&m, &x), &want);
    // the stem; per block conv1 -> bn1 -> relu and conv2 -> bn2 (-> += identity -> relu when
    // no downsample call comes between); the downsample's conv -> bn
    assert_eq!(chains(&m), (6, 6, 0), "chains, fused calls, declined calls");
    assert_close("resnet_like again", &run(&m, &x), &want);
    assert_eq!(chains(&m), (6, 12, 0));
    // `prepare` packs the folded weights ahead (and no plain copies): the same results
    let m = load("resnet_like");
    m.prepare(&["forward"]).expect("prepare");
    assert_close("resnet_like prepared", &run(&m, &x), &want);
    assert_eq!(chains(&m), (6, 6, 0));
}

#[test]
fn fused_chains_follow_load_state_dict_and_replaced_parameters() {
    let mut g = goldens();
    let m = load("state_change");
    let x = g.tensor("state_change.x", DType::Float32);
    let want = g.tensor("state_change.y", DType::Float32);
    assert_close("before", &run(&m, &x), &want);
    let mut state = tsrun::internals::runtime::module::StateDict::new();
    for key in ["0.weight", "1.weight", "1.running_mean", "1.running_var"] {
        state.insert(
            key.to_string(),
            g.tensor(&format!("state_change.sd.{key}"), DType::Float32),
        );
    }
    // copied into the existing tensors
    m.load_state_dict(&state, false, false)
        .expect("load_state_dict");
    let want = g.tensor("state_change.after_load", DType::Float32);
    assert_close("after load_state_dict", &run(&m, &x), &want);
    let bias = g.tensor("state_change.new_bias", DType::Float32);
    m.set_attr("1.bias", IValue::Tensor(bias))
        .expect("set bias");
    let want = g.tensor("state_change.after_set", DType::Float32);
    assert_close("bias replaced", &run(&m, &x), &want);
    assert_eq!(chains(&m), (1, 3, 0));
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

    assert_eq!(chains(&m), (1, 3, 0));

    // training mode normalizes by the batch and updates the running statistics: not fused
    m.train(true);
    let want = g.tensor("mutate.train", DType::Float32);
    assert_close("training mode", &run(&m, &x), &want);
    assert_eq!(chains(&m), (1, 3, 1));
    m.eval();
    let want = g.tensor("mutate.eval_again", DType::Float32);
    assert_close("eval after training", &run(&m, &x), &want);
    assert_eq!(chains(&m), (1, 4, 1));
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
    // the failure ran the module calls: the frame names the convolution module's call
    assert!(err.contains("conv2d"), "{err}");
    // float64 inputs run unfused, in float64 (PyTorch: the weights must match the input)
    let x = Tensor::zeros(&[1, 8, 6, 6], DType::Float64).expect("x");
    assert!(m.forward(&[IValue::Tensor(x)]).is_err());
}
