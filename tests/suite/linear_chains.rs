//! Linear chains (`nn.Linear` -> [activation] module calls, scripted and traced) against
//! PyTorch's outputs from fixtures/gen_linear_chains.py, including a module changed after its
//! first call. The interpreter runs each chain as one `linear` with the activation over its
//! output (`module_chain`); the tests also count which chains ran fused.

use crate::common::{fixtures_dir, Arrays};
use crate::conv_fusion::{assert_close, chains, run};
use tsrun::internals::runtime::Module;
use tsrun::internals::tensor::{DType, Tensor};
use tsrun::internals::values::IValue;

fn dir() -> std::path::PathBuf {
    fixtures_dir().join("linear_chains")
}

fn goldens() -> Arrays {
    Arrays::open(&dir().join("goldens.npz"))
}

fn load(case: &str) -> Module {
    let m = Module::load(dir().join(format!("{case}.pt"))).expect("load");
    m.eval();
    m
}

#[test]
fn linear_chains_match_pytorch() {
    let mut g = goldens();
    // case, chains: each torch.nn.Linear call with the activation module after it, if any
    // (a subclass with its own forward is not fused)
    let cases = [
        ("mlp_64_128_128_10", 3),
        ("activations", 5),
        ("vector_input", 2),
        ("batch_rows", 2),
        ("traced", 2),
        ("subclass", 0),
    ];
    for (case, n) in cases {
        let m = load(case);
        let x = g.tensor(&format!("{case}.x"), DType::Float32);
        let want = g.tensor(&format!("{case}.y"), DType::Float32);
        assert_close(case, &run(&m, &x), &want);
        m.prepare(&["forward"]).expect("prepare");
        assert_close(case, &run(&m, &x), &want);
        assert_eq!(
            chains(&m),
            (n, 2 * n as u64, 0),
            "{case}: chains, fused, declined"
        );
    }
}

#[test]
fn linear_chains_follow_changes_to_the_module() {
    let mut g = goldens();
    let m = load("mutate");
    let x = g.tensor("mutate.x", DType::Float32);
    assert_close(
        "before",
        &run(&m, &x),
        &g.tensor("mutate.y", DType::Float32),
    );

    // the first weight doubled in place
    let w = m
        .attr("0")
        .and_then(|c| c.as_object().and_then(|o| o.get("weight")))
        .and_then(|w| w.as_tensor().cloned())
        .expect("weight");
    w.write::<f32>()
        .expect("write")
        .view_mut()
        .mapv_inplace(|v| v * 2.0);
    let want = g.tensor("mutate.after_scale", DType::Float32);
    assert_close("weight doubled", &run(&m, &x), &want);

    // the last bias replaced through the module API
    let bias = g.tensor("mutate.new_bias", DType::Float32);
    m.set_attr("2.bias", IValue::Tensor(bias))
        .expect("set bias");
    let want = g.tensor("mutate.after_bias", DType::Float32);
    assert_close("bias replaced", &run(&m, &x), &want);

    let mut state = tsrun::internals::runtime::module::StateDict::new();
    for key in ["0.weight", "2.weight"] {
        state.insert(
            key.to_string(),
            g.tensor(&format!("mutate.sd.{key}"), DType::Float32),
        );
    }
    m.load_state_dict(&state, false, false)
        .expect("load_state_dict");
    let want = g.tensor("mutate.after_load", DType::Float32);
    assert_close("after load_state_dict", &run(&m, &x), &want);
    assert_eq!(chains(&m), (2, 8, 0));
}

#[test]
fn linear_chains_reject_what_the_unfused_code_rejects() {
    let m = load("mlp_64_128_128_10");
    // the wrong feature count fails as `linear` fails, in the Linear module's frame
    let x = Tensor::zeros(&[1, 63], DType::Float32).expect("x");
    let err = m
        .forward(&[IValue::Tensor(x)])
        .expect_err("wrong features")
        .to_string();
    assert!(err.contains("linear"), "{err}");
    assert!(err.contains("63"), "{err}");
    // float64 inputs run unfused, where PyTorch raises for the float32 weights
    let x = Tensor::zeros(&[1, 64], DType::Float64).expect("x");
    assert!(m.forward(&[IValue::Tensor(x)]).is_err());
    assert_eq!(chains(&m), (3, 0, 2));
}
