//! Load time of torchvision resnet18 (fixtures/models/resnet18.pt).
//! Target: <= 24 ms, half of torch.jit.load's 48 ms on this machine kind.

use criterion::{criterion_group, criterion_main, Criterion};
use std::path::Path;
use tsrun::internals::runtime::Module;

fn load_resnet18(c: &mut Criterion) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/models/resnet18.pt");
    assert!(
        path.exists(),
        "{} is missing (written by fixtures/generate.py)",
        path.display()
    );
    c.bench_function("load resnet18", |b| {
        b.iter(|| {
            let m = Module::load(&path).expect("load resnet18");
            std::hint::black_box(m.state_dict().len())
        })
    });
}

criterion_group!(benches, load_resnet18);
criterion_main!(benches);
