//! Elementwise chains fused at plan build (`ops/elementwise_chain.rs`): PyTorch's outputs from
//! fixtures/gen_elementwise_fusion.py, the same plans built without fusion giving bit-identical
//! results, inputs left unchanged (no dead-looking buffer that is still observed is
//! overwritten), and an error inside a chain reported as the unfused operator reports it.

use crate::common::{compare_tensors, fixtures_dir, Arrays};
use std::sync::Arc;
use tsrun::internals::runtime::interpreter::{set_elementwise_fusion, Plan};
use tsrun::internals::runtime::Module;
use tsrun::internals::tensor::{DType, Tensor};
use tsrun::internals::values::IValue;

/// The model goldens' tolerance (tests/suite/run_models.rs).
const RTOL: f64 = 1e-4;
const ATOL: f64 = 1e-5;

fn dir() -> std::path::PathBuf {
    fixtures_dir().join("elementwise_fusion")
}

/// Case, input dtypes ("f" float32, "d" float64, "i" int64, "s" a float, "k" an int), number
/// of outputs, fused chains in its forward plan, and whether the fused loop takes the inputs
/// (else the chain runs its operators one by one).
const CASES: &[(&str, &str, usize, usize, bool)] = &[
    ("add_relu", "ff", 1, 1, true),
    ("add_relu_large", "ff", 1, 1, true),
    ("mul_add_tanh", "ff", 1, 1, true),
    ("bias_gelu", "ff", 2, 2, true),
    ("scale_shift_hardswish", "f", 1, 1, true),
    ("in_place_steps", "ff", 1, 1, true),
    ("alpha", "ff", 2, 2, true),
    ("div_exp_erf", "ff", 1, 1, true),
    ("long_chain", "fff", 1, 1, true),
    ("leading_broadcast", "ff", 1, 1, false),
    ("generic_f64", "dd", 1, 1, false),
    ("generic_i64", "ii", 1, 1, false),
    ("observed", "fff", 2, 1, true),
    ("dead_intermediate", "fff", 1, 1, true),
    ("view_of_input", "ff", 2, 1, true),
    ("scalars", "fsk", 1, 1, true),
    ("bias_relu_large", "ff", 1, 1, true),
];

fn load(case: &str) -> Module {
    let m = Module::load(dir().join(format!("fuse_{case}.pt"))).expect("load");
    m.eval();
    m
}

fn inputs(arrays: &mut Arrays, case: &str, kinds: &str) -> Vec<IValue> {
    kinds
        .chars()
        .enumerate()
        .map(|(i, k)| {
            let key = format!("{case}.in{i}");
            match k {
                'f' => IValue::Tensor(arrays.tensor(&key, DType::Float32)),
                'd' => IValue::Tensor(arrays.tensor(&key, DType::Float64)),
                'i' => IValue::Tensor(arrays.tensor(&key, DType::Int64)),
                's' => IValue::Double(
                    arrays
                        .tensor(&key, DType::Float64)
                        .to_vec::<f64>()
                        .expect("s")[0],
                ),
                _ => IValue::Int(
                    arrays
                        .tensor(&key, DType::Int64)
                        .to_vec::<i64>()
                        .expect("k")[0],
                ),
            }
        })
        .collect()
}

fn outputs(v: IValue, n: usize) -> Vec<Tensor> {
    let items = match v {
        IValue::Tuple(t) => t.items().to_vec(),
        v => vec![v],
    };
    assert_eq!(items.len(), n, "outputs");
    items
        .into_iter()
        .map(|v| v.as_tensor().expect("tensor output").clone())
        .collect()
}

fn bits(t: &Tensor) -> Vec<u64> {
    match t.dtype() {
        DType::Float32 => t
            .to_vec::<f32>()
            .expect("f32")
            .iter()
            .map(|v| v.to_bits() as u64)
            .collect(),
        DType::Float64 => t
            .to_vec::<f64>()
            .expect("f64")
            .iter()
            .map(|v| v.to_bits())
            .collect(),
        _ => t
            .to_vec::<i64>()
            .expect("i64")
            .iter()
            .map(|&v| v as u64)
            .collect(),
    }
}

fn forward_plan(m: &Module) -> Arc<Plan> {
    m.interpreter()
        .expect("interpreter")
        .method_plan(&Arc::from(m.class_name()), "forward")
        .expect("plan")
        .expect("forward")
}

/// Run every case with fusion on, then off (one test: the switch is process-wide, and plans
/// built by other tests meanwhile are correct either way).
#[test]
fn fused_chains_match_pytorch_and_unfused_bits() {
    let mut arrays = Arrays::open(&dir().join("goldens.npz"));
    let mut fused_results = Vec::new();
    for &(case, kinds, n_out, n_chains, fused) in CASES {
        let m = load(case);
        let x = inputs(&mut arrays, case, kinds);
        let before: Vec<Vec<u64>> = x.iter().filter_map(|v| v.as_tensor().map(bits)).collect();
        let got = outputs(m.forward(&x).expect(case), n_out);
        let plan = forward_plan(&m);
        let declined = if fused { 0 } else { n_chains as u64 };
        assert_eq!(
            plan.elementwise_chains(),
            (n_chains, declined),
            "{case}: fused chains, calls declined"
        );
        for (j, g) in got.iter().enumerate() {
            let want = arrays.tensor(&format!("{case}.out{j}"), g.dtype());
            compare_tensors(g, &want, RTOL, ATOL, &format!("{case}.out{j}"))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let after: Vec<Vec<u64>> = x.iter().filter_map(|v| v.as_tensor().map(bits)).collect();
        assert_eq!(before, after, "{case}: an input changed");
        fused_results.push(got);
    }
    set_elementwise_fusion(false);
    let unfused: Vec<(Vec<Tensor>, usize)> = CASES
        .iter()
        .map(|&(case, kinds, n_out, ..)| {
            let m = load(case);
            let x = inputs(&mut arrays, case, kinds);
            let out = outputs(m.forward(&x).expect(case), n_out);
            (out, forward_plan(&m).elementwise_chains().0)
        })
        .collect();
    set_elementwise_fusion(true);
    for (((case, ..), fused), (plain, chains)) in CASES.iter().zip(&fused_results).zip(&unfused) {
        assert_eq!(*chains, 0, "{case}: built without fusion");
        for (j, (f, p)) in fused.iter().zip(plain).enumerate() {
            assert_eq!(f.shape(), p.shape(), "{case}.out{j}: shape");
            assert!(bits(f) == bits(p), "{case}.out{j}: fused bits differ");
        }
    }
}

/// An add whose operands do not broadcast fails inside the fused chain as it fails unfused:
/// PyTorch's message, at the add's line.
#[test]
fn error_in_a_chain_names_the_operator() {
    let want = std::fs::read_to_string(dir().join("mismatch_error.txt")).expect("message");
    let m = load("mismatch");
    let x = [
        IValue::Tensor(Tensor::zeros(&[3], DType::Float32).expect("x")),
        IValue::Tensor(Tensor::zeros(&[4], DType::Float32).expect("y")),
    ];
    assert_eq!(forward_plan(&m).elementwise_chains().0, 1);
    let e = m.forward(&x).expect_err("mismatched shapes").to_string();
    assert!(e.contains(want.trim()), "{e}");
    assert!(e.contains("x + y"), "the add's line: {e}");
}
