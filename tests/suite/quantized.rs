//! Quantized archives (issue 12): quantized tensors and packed weights load and re-save in
//! PyTorch's form, and the quantized fixtures' outputs match PyTorch's fbgemm results. The
//! fixtures (fixtures/gen_quantized.py) also run through the shared load, printing, run and
//! save suites; here each output is counted bit-exact or not.

use crate::common::{decode, Arrays};
use crate::load_common::{fixtures_dir, load_fixture};
use serde_json::Value;
use tsrun::internals::ops::OpContext;
use tsrun::internals::runtime::Module;
use tsrun::IValue;

const QUANTIZED_FIXTURES: &[&str] = &[
    "q_convnet_scripted",
    "q_convnet_traced",
    "q_dynamic_mlp",
    "q_mobilenet_v2",
    "q_resnet18",
    "q_dynamic_bert",
    "q_ops_scripted",
    "q_dynamic_lstm_tagger",
    "q_dynamic_gru_tagger",
    "q_dynamic_packed_gru",
    "q_dynamic_packed_lstm",
    "q_fp16_lstm_tagger",
    "q_fp16_packed_gru",
    "q_fp16_mlp",
];

/// Every tensor in a (nested) result, in order.
fn tensors_of(v: &IValue, out: &mut Vec<tsrun::Tensor>) {
    match v {
        IValue::Tensor(t) => out.push(t.clone()),
        IValue::Tuple(t) => t.items().iter().for_each(|x| tensors_of(x, out)),
        IValue::List(l) => l.to_vec().iter().for_each(|x| tensors_of(x, out)),
        IValue::Dict(d) => d.entries().iter().for_each(|(_, x)| tensors_of(x, out)),
        _ => {}
    }
}

/// (bit-exact elements, elements, max |diff| / atol) of every golden call of `name`.
fn exact_count(module: &Module, name: &str) -> (usize, usize, f64) {
    let dir = fixtures_dir().join("golden").join(name);
    let runs: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("runs.json")).expect("runs.json"))
            .expect("JSON");
    let mut arrays = Arrays::open(&dir.join("runs.npz"));
    let (mut exact, mut total, mut worst) = (0, 0, 0.0f64);
    for call in runs["calls"].as_array().expect("calls") {
        let inputs: Vec<IValue> = call["inputs"]
            .as_array()
            .expect("inputs")
            .iter()
            .map(|v| decode(v, &mut arrays))
            .collect();
        let got = module
            .call_with(inputs, &OpContext::with_seed(0))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let want = decode(&call["output"], &mut arrays);
        let (mut gs, mut ws) = (Vec::new(), Vec::new());
        tensors_of(&got, &mut gs);
        tensors_of(&want, &mut ws);
        assert!(!ws.is_empty(), "{name}: no tensor output");
        assert_eq!(gs.len(), ws.len(), "{name}: number of output tensors");
        let mut gv = Vec::new();
        let mut wv = Vec::new();
        for (g, w) in gs.iter().zip(&ws) {
            assert_eq!(g.shape(), w.shape(), "{name}: output shape");
            gv.extend(g.to_vec::<f32>().expect("floats"));
            wv.extend(w.to_vec::<f32>().expect("floats"));
        }
        let atol = call["atol"].as_f64().unwrap_or(1e-5).max(f64::MIN_POSITIVE);
        for (a, b) in gv.iter().zip(&wv) {
            total += 1;
            if a.to_bits() == b.to_bits() {
                exact += 1;
            }
            worst = worst.max(((a - b).abs() as f64) / atol);
        }
    }
    (exact, total, worst)
}

/// Every output within the golden's tolerance (one quantization step for static models);
/// the bit-exact share is printed.
#[test]
fn quantized_fixtures_match_fbgemm() {
    let mut lines = Vec::new();
    for name in QUANTIZED_FIXTURES {
        let m = load_fixture(name).unwrap_or_else(|e| panic!("{name}: load: {e}"));
        let (exact, total, worst) = exact_count(&m, name);
        lines.push(format!(
            "{name}: {exact}/{total} outputs bit-exact, worst |diff| = {worst:.3} x tolerance"
        ));
        assert!(worst <= 1.0, "{name}: outside tolerance ({worst} x atol)");
    }
    for l in &lines {
        eprintln!("{l}");
    }
}

/// Quantized tensors and packed parameters survive tsrun's save: the re-saved archive has the
/// same qint8 weights (integers, scales, zero points) and gives the same outputs.
#[test]
fn quantized_archives_resave_with_their_weights() {
    for name in QUANTIZED_FIXTURES {
        let m = load_fixture(name).expect("load");
        let bytes = m.to_archive_bytes(&[]).expect("save");
        let again = Module::load_from_bytes(&bytes).expect("reload");
        let (e1, t1, _) = exact_count(&m, name);
        let (e2, t2, _) = exact_count(&again, name);
        assert_eq!((e1, t1), (e2, t2), "{name}: outputs change after a save");
    }
}
