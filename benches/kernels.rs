//! Kernel throughput through the registry, as a graph calls them: softmax and layer norm over
//! BERT-sized activations (GB/s: bytes read plus written), the LSTM cell of the reference tagger
//! and its whole sequence on one and two threads (GFLOP/s, shown by criterion as Gelem/s: one
//! element = one floating-point operation) and the vectorized activations (GB/s). Compare with the machine's peak: about 2 x 32 fp32 FMA lanes
//! per cycle per core with AVX-512 (~100-150 GFLOP/s per core at 2-3 GHz) and ~20-40 GB/s of
//! memory bandwidth per core; results that fit in L2 run above that bandwidth.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tsrun::internals::ops::{Args, OpContext, Registry};
use tsrun::internals::values::types::Type;
use tsrun::internals::values::{IValue, List};
use tsrun::{DType, Tensor};

fn randn(shape: &[usize], seed: u32) -> Tensor {
    // A cheap deterministic spread of values in [-2, 2).
    let n: usize = shape.iter().product();
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    let v: Vec<f32> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s as f32 / u32::MAX as f32) * 4.0 - 2.0
        })
        .collect();
    Tensor::from_vec(v, shape).expect("tensor")
}

fn call(op: &str, overload: &str, values: &[IValue], ctx: &OpContext) -> IValue {
    let kernel = Registry::global()
        .lookup(op, overload)
        .unwrap_or_else(|| panic!("{op} is registered"));
    let mut v = values.to_vec();
    kernel(&mut Args::new(op, &mut v, ctx)).expect("kernel runs")
}

fn kernels(c: &mut Criterion) {
    let ctx = OpContext::default();
    let f32_bytes = std::mem::size_of::<f32>() as u64;

    let mut g = c.benchmark_group("softmax");
    for &(rows, cols) in &[(4 * 128, 128), (128, 1024), (1, 30522)] {
        let x = randn(&[rows, cols], 1);
        let args = [IValue::Tensor(x), IValue::Int(-1), IValue::None];
        g.throughput(Throughput::Bytes(2 * (rows * cols) as u64 * f32_bytes));
        g.bench_with_input(
            BenchmarkId::from_parameter(format!("{rows}x{cols}")),
            &args,
            |b, a| b.iter(|| call("aten::softmax", "int", a, &ctx)),
        );
    }
    g.finish();

    let mut g = c.benchmark_group("layer_norm");
    for &(rows, hidden) in &[(128, 256), (128, 768), (1, 256)] {
        let x = randn(&[rows, hidden], 2);
        let w = randn(&[hidden], 3);
        let b = randn(&[hidden], 4);
        let args = [
            IValue::Tensor(x),
            IValue::List(List::new(Type::Int, vec![IValue::Int(hidden as i64)])),
            IValue::Tensor(w),
            IValue::Tensor(b),
            IValue::Double(1e-12),
            IValue::Bool(false),
        ];
        g.throughput(Throughput::Bytes(2 * (rows * hidden) as u64 * f32_bytes));
        g.bench_with_input(
            BenchmarkId::from_parameter(format!("{rows}x{hidden}")),
            &args,
            |b, a| b.iter(|| call("aten::layer_norm", "", a, &ctx)),
        );
    }
    g.finish();

    // The reference tagger's cell: input 64, hidden 128, batch 1; one step is
    // 2 * 4H * (I + H) flops in the projections plus ~10 per hidden unit in the gates.
    let mut g = c.benchmark_group("lstm_cell");
    for &(batch, input, hidden) in &[(1usize, 64usize, 128usize), (16, 64, 128), (1, 256, 512)] {
        let args = [
            IValue::Tensor(randn(&[batch, input], 5)),
            IValue::List(List::new(
                Type::Tensor,
                vec![
                    IValue::Tensor(randn(&[batch, hidden], 6)),
                    IValue::Tensor(randn(&[batch, hidden], 7)),
                ],
            )),
            IValue::Tensor(randn(&[4 * hidden, input], 8)),
            IValue::Tensor(randn(&[4 * hidden, hidden], 9)),
            IValue::Tensor(randn(&[4 * hidden], 10)),
            IValue::Tensor(randn(&[4 * hidden], 11)),
        ];
        let flops = batch * (2 * 4 * hidden * (input + hidden) + 10 * hidden);
        g.throughput(Throughput::Elements(flops as u64));
        g.bench_with_input(
            BenchmarkId::from_parameter(format!("b{batch}_i{input}_h{hidden}")),
            &args,
            |b, a| b.iter(|| call("aten::lstm_cell", "", a, &ctx)),
        );
    }
    g.finish();

    let mut g = c.benchmark_group("activation");
    let n = 1 << 16;
    let x = randn(&[n], 12);
    g.throughput(Throughput::Bytes(2 * n as u64 * f32_bytes));
    for (op, extra) in [
        ("aten::exp", None),
        ("aten::tanh", None),
        ("aten::sigmoid", None),
        ("aten::erf", None),
        ("aten::gelu", Some(IValue::str("none"))),
    ] {
        let mut args = vec![IValue::Tensor(x.clone())];
        args.extend(extra);
        g.bench_with_input(BenchmarkId::from_parameter(op), &args, |b, a| {
            b.iter(|| call(op, "", a, &ctx))
        });
    }
    g.finish();
    assert_eq!(x.dtype(), DType::Float32);

    // Where rayon starts to pay: the same elementwise add and exp inside a 1-thread and a
    // 2-thread pool, around tsrun::internals::tensor::PARALLEL_THRESHOLD.
    let pools = [1usize, 2].map(|n| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .expect("thread pool")
    });
    let mut g = c.benchmark_group("parallel_threshold");
    for n in [
        8usize << 10,
        16 << 10,
        32 << 10,
        64 << 10,
        128 << 10,
        256 << 10,
    ] {
        let a = randn(&[n], 13);
        let b = randn(&[n], 14);
        g.throughput(Throughput::Bytes(3 * n as u64 * f32_bytes));
        let add = [IValue::Tensor(a.clone()), IValue::Tensor(b), IValue::Int(1)];
        let exp = [IValue::Tensor(a)];
        for (pool, threads) in pools.iter().zip([1, 2]) {
            g.bench_with_input(
                BenchmarkId::new(format!("add_t{threads}"), n),
                &add,
                |bch, v| pool.install(|| bch.iter(|| call("aten::add", "Tensor", v, &ctx))),
            );
            g.bench_with_input(
                BenchmarkId::new(format!("exp_t{threads}"), n),
                &exp,
                |bch, v| pool.install(|| bch.iter(|| call("aten::exp", "", v, &ctx))),
            );
        }
    }
    g.finish();

    // A whole LSTM sequence at batch 1 (the reference tagger's: 64 steps, input 64, hidden
    // 128) on one and two threads: GFLOP/s of the recurrent products, 2 * 4H * H per step.
    let mut g = c.benchmark_group("lstm_sequence");
    let (steps, input) = (64usize, 64usize);
    for hidden in [64usize, 96, 128, 256] {
        let state =
            || IValue::Tensor(Tensor::zeros(&[1, 1, hidden], DType::Float32).expect("zeros"));
        let args = [
            IValue::Tensor(randn(&[1, steps, input], 18)),
            IValue::List(List::new(Type::Tensor, vec![state(), state()])),
            IValue::List(List::new(
                Type::Tensor,
                vec![
                    IValue::Tensor(randn(&[4 * hidden, input], 19)),
                    IValue::Tensor(randn(&[4 * hidden, hidden], 20)),
                    IValue::Tensor(randn(&[4 * hidden], 21)),
                    IValue::Tensor(randn(&[4 * hidden], 22)),
                ],
            )),
            IValue::Bool(true),
            IValue::Int(1),
            IValue::Double(0.0),
            IValue::Bool(false),
            IValue::Bool(false),
            IValue::Bool(true),
        ];
        g.throughput(Throughput::Elements((steps * 8 * hidden * hidden) as u64));
        for (pool, threads) in pools.iter().zip([1, 2]) {
            g.bench_with_input(
                BenchmarkId::new(format!("t{threads}"), format!("h{hidden}")),
                &args,
                |bch, v| pool.install(|| bch.iter(|| call("aten::lstm", "input", v, &ctx))),
            );
        }
    }
    g.finish();

    // batch-1 linear (mobilenet_v3_small's classifier): a matrix-vector product streaming 4 MB
    // of weights, its rows shared among the threads (GB/s of weight read)
    let mut g = c.benchmark_group("linear_batch1");
    let (k, n) = (1024usize, 1000usize);
    g.throughput(Throughput::Bytes((n * k) as u64 * f32_bytes));
    let args = [
        IValue::Tensor(randn(&[1, k], 15)),
        IValue::Tensor(randn(&[n, k], 16)),
        IValue::Tensor(randn(&[n], 17)),
    ];
    for (pool, threads) in pools.iter().zip([1, 2]) {
        g.bench_with_input(
            BenchmarkId::new(format!("t{threads}"), format!("{k}->{n}")),
            &args,
            |bch, v| pool.install(|| bch.iter(|| call("aten::linear", "", v, &ctx))),
        );
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = kernels
}
criterion_main!(benches);
