//! Quantized archives (issue 12): quantized tensors and packed weights load and re-save in
//! PyTorch's form, and the quantized fixtures' outputs match PyTorch's fbgemm results. The
//! fixtures (fixtures/gen_quantized.py) also run through the shared load, printing, run and
//! save suites; here each output is counted bit-exact or not.

use crate::common::{decode, Arrays};
use crate::load_common::{fixtures_dir, load_fixture};
use serde_json::Value;
use tsrun::internals::ops::{Args, OpContext, Registry};
use tsrun::internals::runtime::Module;
use tsrun::internals::values::types::Type;
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
    "q_norm_act_scripted",
    "q_norm_act_traced",
    "q_embeddings",
    "q_embeddings_4bit",
    "q_legacy_fbgemm",
    "q_fx_graph_mode_cat",
    "q_fx_aten_ops",
    "q_fp16_cells",
    "q_zoo_ops",
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
        let again = Module::load_bytes(&bytes).expect("reload");
        let (e1, t1, _) = exact_count(&m, name);
        let (e2, t2, _) = exact_count(&again, name);
        assert_eq!((e1, t1), (e2, t2), "{name}: outputs change after a save");
    }
}

/// Runs the built-in kernel `op.overload` on `args`.
fn call_kernel(op: &str, overload: &str, mut args: Vec<IValue>) -> tsrun::Result<IValue> {
    let kernel = Registry::global()
        .lookup(op, overload)
        .unwrap_or_else(|| panic!("{op}.{overload} is registered"));
    let ctx = OpContext::default();
    kernel(&mut Args::new(op, &mut args, &ctx))
}

fn tensor(values: Vec<f32>, shape: &[usize]) -> IValue {
    IValue::Tensor(tsrun::Tensor::from_vec(values, shape).expect("tensor"))
}

fn floats(v: &IValue) -> Vec<f32> {
    v.as_tensor()
        .expect("tensor")
        .to_vec::<f32>()
        .expect("floats")
}

/// fp16 packed weights are saturated to the half range before rounding, as fbgemm's prepack
/// does (a weight of 1e6 acts as 65504, not infinity), and the fused ReLU variant clamps.
#[test]
fn fp16_linear_saturates_and_rounds_weights_to_half() {
    let weight = tensor(vec![1e6, 0.1, -3.0, -1e6], &[2, 2]);
    let bias = tensor(vec![0.5, 0.0], &[2]);
    let packed =
        call_kernel("quantized::linear_prepack_fp16", "", vec![weight, bias]).expect("prepack");
    let x = tensor(vec![1.0, 1.0], &[1, 2]);
    let out = call_kernel(
        "quantized::linear_dynamic_fp16",
        "",
        vec![x.clone(), packed.clone()],
    )
    .expect("linear_dynamic_fp16");
    let half_tenth = half::f16::from_f32(0.1).to_f32();
    assert_eq!(
        floats(&out),
        vec![(65504.0f32 + half_tenth) + 0.5, -3.0 - 65504.0]
    );
    let relu = call_kernel("quantized::linear_relu_dynamic_fp16", "", vec![x, packed])
        .expect("linear_relu_dynamic_fp16");
    assert_eq!(floats(&relu), vec![(65504.0f32 + half_tenth) + 0.5, 0.0]);
}

/// The cells of `q_dynamic_packed_gru` (2 layers x 2 directions, input 6, hidden 8).
fn packed_gru_cells() -> IValue {
    let m = load_fixture("q_dynamic_packed_gru").expect("load");
    let Some(IValue::Object(gru)) = m.attr("gru") else {
        panic!("no gru submodule")
    };
    let Some(IValue::Object(weights)) = gru.get("_all_weight_values") else {
        panic!("no _all_weight_values")
    };
    let cells: Vec<IValue> = (0..4)
        .map(|i| match weights.get(&i.to_string()) {
            Some(IValue::Object(p)) => p.get("param").expect("param"),
            _ => panic!("no packed parameter {i}"),
        })
        .collect();
    let class = Type::Class("__torch__.torch.classes.rnn.CellParamsBase".into());
    IValue::List(tsrun::List::new(class, cells))
}

fn gru_data_args(data: IValue, sizes: &[i64], hx: IValue, cells: &IValue) -> Vec<IValue> {
    let sizes = tsrun::Tensor::from_vec(sizes.to_vec(), &[sizes.len()]).expect("sizes");
    vec![
        data,
        IValue::Tensor(sizes),
        hx,
        cells.clone(),
        IValue::Bool(true),
        IValue::Int(2),
        IValue::Double(0.0),
        IValue::Bool(false),
        IValue::Bool(true),
    ]
}

/// One sequence packed (every step one row wide) runs exactly as the padded overload, and
/// inconsistent packed arguments are errors, not panics.
#[test]
fn quantized_gru_data_matches_input_and_checks_its_arguments() {
    let cells = packed_gru_cells();
    let (t, f, h) = (5usize, 6usize, 8usize);
    let xs: Vec<f32> = (0..t * f)
        .map(|i| ((i * 7 % 11) as f32 - 5.0) / 4.0)
        .collect();
    let hx = tensor(vec![0.0; 4 * h], &[4, 1, h]);
    let packed = call_kernel(
        "aten::quantized_gru",
        "data",
        gru_data_args(tensor(xs.clone(), &[t, f]), &[1; 5], hx.clone(), &cells),
    )
    .expect("quantized_gru.data");
    let padded = call_kernel(
        "aten::quantized_gru",
        "input",
        vec![
            tensor(xs.clone(), &[t, 1, f]),
            hx.clone(),
            cells.clone(),
            IValue::Bool(true),
            IValue::Int(2),
            IValue::Double(0.0),
            IValue::Bool(false),
            IValue::Bool(true),
            IValue::Bool(false),
        ],
    )
    .expect("quantized_gru.input");
    let (IValue::Tuple(p), IValue::Tuple(q)) = (&packed, &padded) else {
        panic!("tuples expected")
    };
    assert_eq!(floats(&p.items()[0]), floats(&q.items()[0]), "outputs");
    assert_eq!(floats(&p.items()[1]), floats(&q.items()[1]), "h_n");
    assert_eq!(p.items()[0].as_tensor().expect("out").shape(), [t, 2 * h]);

    let data = tensor(xs, &[t, f]);
    for (sizes, hx, what) in [
        (
            &[2i64, 2][..],
            hx.clone(),
            "batch sizes not covering the rows",
        ),
        (
            &[1, 2, 2][..],
            tensor(vec![0.0; 8 * h], &[4, 2, h]),
            "increasing batch sizes",
        ),
        (&[2, 2, 1][..], hx, "hx batch not the first batch size"),
    ] {
        let r = call_kernel(
            "aten::quantized_gru",
            "data",
            gru_data_args(data.clone(), sizes, hx, &cells),
        );
        assert!(r.is_err(), "{what} accepted");
    }
}

/// fixtures/gen_quantized_engine.py: an FX-quantized convnet PyTorch runs differently under
/// its `x86` engine (oneDNN convolutions on AVX512-VNNI: the zero point added before
/// rounding) and under `fbgemm`; each `RunOptions::quantized_engine` reproduces its engine
/// bit for bit, the two really differ on this model, and the default follows the engine
/// PyTorch uses by default on this CPU.
#[test]
fn quantized_engine_option_follows_x86_and_fbgemm_bit_exactly() {
    use tsrun::{QuantizedEngine, RunOptions};
    let dir = fixtures_dir().join("quantized_engine");
    let read = |name: &str| tsrun::internals::cli::inputs::read_npy(&dir.join(name)).expect("npy");
    let m = Module::load(dir.join("model.pt")).expect("load");
    let x = read("input.npy");
    let run = |engine| {
        let options = RunOptions {
            quantized_engine: engine,
            ..Default::default()
        };
        let out = m
            .call_opts(vec![IValue::Tensor(x.clone())], &options)
            .expect("call");
        out.as_tensor()
            .expect("tensor")
            .to_vec::<f32>()
            .expect("floats")
    };
    let x86 = run(QuantizedEngine::X86);
    let fbgemm = run(QuantizedEngine::Fbgemm);
    let want_x86 = read("expected_x86.npy").to_vec::<f32>().expect("floats");
    let want_fbgemm = read("expected_fbgemm.npy").to_vec::<f32>().expect("floats");
    assert_eq!(x86, want_x86, "x86 engine");
    assert_eq!(fbgemm, want_fbgemm, "fbgemm engine");
    let apart = want_x86
        .iter()
        .zip(&want_fbgemm)
        .filter(|(a, b)| a != b)
        .count();
    assert!(apart > 0, "the fixture must tell the engines apart");
    // the default is PyTorch's default engine as it runs on this CPU: x86's oneDNN rounding
    // where the CPU has AVX512-VNNI (PyTorch's `cpuinfo_has_x86_avx512vnni`), else fbgemm's
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    let vnni = std::arch::is_x86_feature_detected!("avx512vnni");
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    let vnni = false;
    let default = m.call(&[IValue::Tensor(x.clone())]).expect("call");
    assert_eq!(
        default
            .as_tensor()
            .expect("tensor")
            .to_vec::<f32>()
            .expect("floats"),
        if vnni { want_x86 } else { want_fbgemm }
    );
}

/// fixtures/gen_frozen_quantized.py: `torch.jit.freeze` folds packed weights into the graph as
/// object constants, which PyTorch prints by address (`object(0x55fb19d208a0)`): tsrun prints
/// its own addresses in that form, the rest of the graph as PyTorch, and the outputs match.
#[test]
fn frozen_quantized_graph_prints_object_constants_by_address() {
    use tsrun::internals::ir::printer::{print_graph, PrintOptions};
    let dir = fixtures_dir().join("frozen_quantized");
    let m = Module::load(dir.join("model.pt")).expect("load");
    let unit = m.compilation_unit().expect("unit");
    let f = unit.method(m.class_name(), "forward").expect("forward");
    let ours = print_graph(&f.graph, PrintOptions::default());
    let theirs = std::fs::read_to_string(dir.join("graph.txt")).expect("graph.txt");
    // every object constant as `object(0x<hex>)`, the addresses masked for the comparison
    let mask = |text: &str| -> (String, usize) {
        let mut out = String::new();
        let mut count = 0;
        let mut rest = text;
        while let Some(i) = rest.find("object(0x") {
            let after = &rest[i + "object(0x".len()..];
            let hex = after.chars().take_while(char::is_ascii_hexdigit).count();
            assert!(
                hex > 0 && after[hex..].starts_with(')'),
                "object constant: {rest}"
            );
            out.push_str(&rest[..i]);
            out.push_str("object(0xADDRESS)");
            rest = &after[hex + 1..];
            count += 1;
        }
        out.push_str(rest);
        (out, count)
    };
    let (ours_masked, ours_count) = mask(&ours);
    let (theirs_masked, theirs_count) = mask(&theirs);
    assert_eq!(theirs_count, 2, "the fixture's two packed weights");
    assert_eq!(ours_count, theirs_count);
    assert_eq!(ours_masked.trim_end(), theirs_masked.trim_end());
    let read = |name: &str| tsrun::internals::cli::inputs::read_npy(&dir.join(name)).expect("npy");
    let out = m.call(&[IValue::Tensor(read("input.npy"))]).expect("call");
    assert_eq!(
        out.as_tensor()
            .expect("tensor")
            .to_vec::<f32>()
            .expect("floats"),
        read("expected.npy").to_vec::<f32>().expect("floats")
    );
}

/// The float outputs of `m` called with `inputs` under `engine`, flattened per output.
fn outputs_under(
    m: &Module,
    inputs: &[tsrun::Tensor],
    engine: tsrun::QuantizedEngine,
) -> Vec<Vec<f32>> {
    let options = tsrun::RunOptions {
        quantized_engine: engine,
        ..Default::default()
    };
    let args = inputs.iter().cloned().map(IValue::Tensor).collect();
    let out = m.call_opts(args, &options).expect("call");
    let mut tensors = Vec::new();
    tensors_of(&out, &mut tensors);
    tensors
        .iter()
        .map(|t| t.to_vec::<f32>().expect("floats"))
        .collect()
}

/// fixtures/gen_quantized_qnnpack.py: models PyTorch's `qnnpack` engine runs (on x86) with
/// QNNPACK's own arithmetic: convolutions and linear layers with an int32 bias and one float
/// multiply, the fixed-point `add`, average pooling, whole-window adaptive pooling and the
/// spatial `mean`, and the dynamic linear and LSTM (reduce_range ignored, bias added after).
/// `QuantizedEngine::Qnnpack` reproduces them bit for bit, and the fixture's fbgemm runs show
/// the engines really differ on them.
#[test]
fn qnnpack_engine_matches_pytorch_bit_exactly() {
    use tsrun::QuantizedEngine;
    let dir = fixtures_dir().join("quantized_qnnpack");
    let read = |name: &str| tsrun::internals::cli::inputs::read_npy(&dir.join(name)).expect("npy");
    for (model, n_outputs) in [("static", 2), ("dynamic", 2)] {
        let m = Module::load(dir.join(format!("{model}.pt"))).expect("load");
        let x = read(&format!("{model}_input.npy"));
        let got = outputs_under(&m, std::slice::from_ref(&x), QuantizedEngine::Qnnpack);
        assert_eq!(got.len(), n_outputs, "{model}");
        let mut apart = 0;
        for (i, g) in got.iter().enumerate() {
            let want = read(&format!("{model}_expected_{i}.npy"))
                .to_vec::<f32>()
                .expect("floats");
            let fbgemm = read(&format!("{model}_fbgemm_{i}.npy"))
                .to_vec::<f32>()
                .expect("floats");
            assert_eq!(g, &want, "{model} output {i} under qnnpack");
            apart += want.iter().zip(&fbgemm).filter(|(a, b)| a != b).count();
        }
        assert!(
            apart > 0,
            "{model}: the fixture must tell qnnpack from fbgemm"
        );
    }
}

/// fixtures/gen_quantizable_lstm.py: the quantizable LSTM custom module, scripted: its layer's
/// `result.transpose_(0, 1)` (on a tuple-unpacked call result, which tsrun cannot make
/// functional) sits in a `batch_first` branch the model never takes, so the model runs and
/// matches PyTorch bit for bit.
#[test]
fn quantizable_lstm_runs_past_an_untaken_inplace_transpose() {
    let dir = fixtures_dir().join("quantizable_lstm");
    let read = |name: &str| tsrun::internals::cli::inputs::read_npy(&dir.join(name)).expect("npy");
    let m = Module::load(dir.join("model.pt")).expect("load");
    let inputs = [read("x.npy"), read("h0.npy"), read("c0.npy")];
    let got = outputs_under(&m, &inputs, tsrun::QuantizedEngine::Native);
    assert_eq!(got.len(), 2);
    for (i, g) in got.iter().enumerate() {
        let want = read(&format!("expected_{i}.npy"))
            .to_vec::<f32>()
            .expect("floats");
        assert_eq!(g, &want, "output {i}");
    }
}
