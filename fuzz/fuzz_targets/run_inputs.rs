//! Small valid fixtures run on fuzzed input shapes, dtypes and values, under tight limits.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use std::time::Duration;
use tsrun::internals::values::IValue;
use tsrun::internals::runtime::{Module, RunOptions};
use tsrun::{DType, Tensor};

const FIXTURES: [&str; 4] = ["mlp", "convnet", "lstm_tagger", "lang_control_flow"];

fn modules() -> &'static Vec<Module> {
    static M: OnceLock<Vec<Module>> = OnceLock::new();
    M.get_or_init(|| {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/models");
        FIXTURES
            .iter()
            .filter_map(|n| Module::load(dir.join(format!("{n}.pt"))).ok())
            .collect()
    })
}

const DTYPES: [DType; 6] = [
    DType::Float32,
    DType::Float64,
    DType::Int64,
    DType::Int32,
    DType::Bool,
    DType::Float16,
];

fuzz_target!(|data: &[u8]| {
    let [pick, dtype, rank, rest @ ..] = data else {
        return;
    };
    let ms = modules();
    let Some(m) = ms.get(*pick as usize % ms.len().max(1)) else {
        return;
    };
    let rank = (*rank % 5) as usize;
    let shape: Vec<usize> = rest.iter().take(rank).map(|&d| (d % 9) as usize).collect();
    let numel: usize = shape.iter().product();
    let values: Vec<f32> = (0..numel)
        .map(|i| {
            let b = rest.get(rank + i).copied().unwrap_or(0);
            (b as i8) as f32 / 4.0
        })
        .collect();
    let Ok(x) = Tensor::from_vec(values, &shape) else {
        return;
    };
    let Ok(x) = x.to_dtype(DTYPES[*dtype as usize % DTYPES.len()]) else {
        return;
    };
    let options = RunOptions {
        timeout: Some(Duration::from_secs(2)),
        max_alloc_bytes: 64 << 20,
        max_live_bytes: Some(256 << 20),
        ..Default::default()
    };
    let inputs = match rest.get(rank + numel) {
        Some(&k) if k % 4 == 0 => vec![IValue::Tensor(x.clone()), IValue::Tensor(x)],
        _ => vec![IValue::Tensor(x)],
    };
    let _ = m.call_opts(inputs, &options);
});
