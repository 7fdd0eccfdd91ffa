//! Forward latency of the benchmark fixtures: torchvision resnet18 (1x3x224x224) and the 4-layer
//! BERT (`bert_bench`, sequence 128). libtorch's figures on this machine kind (shared notes):
//! resnet18 20.1 ms, BERT 4.75 ms; `benches/libtorch_side_by_side.py` measures both in one run.

use criterion::{criterion_group, criterion_main, Criterion};
use std::path::{Path, PathBuf};
use tsrun::internals::runtime::Module;
use tsrun::{IValue, Tensor};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(rel)
}

fn bench_forward(c: &mut Criterion, name: &str, inputs: Vec<IValue>) {
    let module = Module::load(fixture(&format!("models/{name}.pt"))).expect("load fixture");
    module.forward(&inputs).expect("first call");
    c.bench_function(&format!("{name} forward"), |b| {
        b.iter(|| std::hint::black_box(module.forward(&inputs).expect("forward")))
    });
}

fn models(c: &mut Criterion) {
    let image = tsrun::internals::cli::run::read_npy(&fixture("inputs/image_1x3x224x224.npy"))
        .expect("fixtures/inputs/image_1x3x224x224.npy");
    bench_forward(c, "resnet18", vec![IValue::Tensor(image)]);

    let ids: Vec<i64> = (0..128).map(|i| (i * 37 + 11) % 512).collect();
    let ids = Tensor::from_slice(&ids, &[1, 128]).expect("ids");
    let mask = Tensor::from_slice(&[1i64; 128], &[1, 128]).expect("mask");
    bench_forward(
        c,
        "bert_bench",
        vec![IValue::Tensor(ids), IValue::Tensor(mask)],
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = models
}
criterion_main!(benches);
