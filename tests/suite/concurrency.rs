//! One module shared by many threads gives every call the result a serial call gives (issue 11):
//! 8 threads x 200 calls on the fixtures' golden inputs, compared bit for bit with serial runs
//! (which the run_models tests compare with PyTorch), and `tsrun bench --callers N`. A wide
//! LSTM gives the same bits on pools of one and two threads, and its fused batch-1 steps the
//! bits of the batched ones.

use crate::common::{decode, fixtures_dir, Arrays};
use crate::load_common::model_path;
use serde_json::Value;
use std::fs::File;
use tsrun::internals::runtime::Module;
use tsrun::internals::tensor::Tensor;
use tsrun::internals::values::IValue;

/// Every value's bits: tensors as (shape, element bits), containers flattened.
fn bits(v: &IValue, out: &mut Vec<u64>) {
    match v {
        IValue::Tensor(t) => {
            out.extend(t.shape().iter().map(|&s| s as u64));
            out.extend(t.to_vec::<f64>().unwrap().iter().map(|x| x.to_bits()));
        }
        IValue::Tuple(t) => t.items().iter().for_each(|x| bits(x, out)),
        IValue::List(l) => l.items().iter().for_each(|x| bits(x, out)),
        IValue::Double(d) => out.push(d.to_bits()),
        IValue::Int(i) => out.push(*i as u64),
        IValue::Bool(b) => out.push(u64::from(*b)),
        other => panic!("unexpected result {}", other.kind_name()),
    }
}

/// The root-forward golden inputs of fixture `name`.
fn golden_inputs(name: &str) -> Vec<Vec<IValue>> {
    let dir = fixtures_dir().join("golden").join(name);
    let runs: Value = serde_json::from_reader(File::open(dir.join("runs.json")).unwrap()).unwrap();
    let mut arrays = Arrays::open(&dir.join("runs.npz"));
    runs["calls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["module"] == "" && c["method"] == "forward")
        .map(|c| {
            c["inputs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| decode(i, &mut arrays))
                .collect()
        })
        .collect()
}

fn shared_module_matches_serial(name: &str, threads: usize, calls: usize) {
    let m = Module::load(model_path(name)).unwrap();
    let inputs = golden_inputs(name);
    assert!(!inputs.is_empty(), "{name} has no forward calls");
    let serial: Vec<Vec<u64>> = inputs
        .iter()
        .map(|i| {
            let mut b = Vec::new();
            bits(&m.call(i).unwrap(), &mut b);
            b
        })
        .collect();
    let mismatches: usize = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (m, inputs, serial) = (&m, &inputs, &serial);
                s.spawn(move || {
                    let mut bad = 0;
                    for k in 0..calls {
                        let which = (t + k) % inputs.len();
                        let mut b = Vec::new();
                        bits(&m.call(&inputs[which]).unwrap(), &mut b);
                        bad += usize::from(b != serial[which]);
                    }
                    bad
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(
        mismatches,
        0,
        "{name}: {mismatches} of {} concurrent calls differ",
        threads * calls
    );
}

#[test]
fn eight_threads_share_one_mlp() {
    shared_module_matches_serial("mlp", 8, 200);
}

#[test]
fn eight_threads_share_one_lstm_tagger() {
    shared_module_matches_serial("lstm_tagger", 8, 200);
}

/// `lstm_wide`'s batch-1 sequences share their steps with a second pool thread when one is
/// free: eight callers from outside the pool contend for it.
#[test]
fn eight_threads_share_one_wide_lstm() {
    shared_module_matches_serial("lstm_wide", 8, 25);
}

#[test]
fn eight_threads_share_one_convnet() {
    shared_module_matches_serial("convnet", 8, 25);
}

#[test]
fn bench_with_concurrent_callers_from_the_cli() {
    let dir = std::env::temp_dir().join(format!("tsrun-callers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let npy = dir.join("x.npy");
    let x = ndarray::Array2::<f32>::from_shape_fn((2, 8), |(i, j)| (i * 8 + j) as f32 / 10.0);
    ndarray_npy::write_npy(&npy, &x).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tsrun"))
        .arg("bench")
        .arg(model_path("mlp"))
        .arg("-i")
        .arg(&npy)
        .args(["-n", "100", "--callers", "8"])
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("8 callers x 100 calls") && stdout.contains(" 0 results differ"),
        "{stdout}"
    );
}

/// A rayon pool of `threads` workers.
fn pool_of(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
}

/// The bits of `m`'s result for each of `inputs`, every call run inside `pool`.
fn outputs_in(pool: &rayon::ThreadPool, m: &Module, inputs: &[Vec<IValue>]) -> Vec<Vec<u64>> {
    inputs
        .iter()
        .map(|i| {
            let mut b = Vec::new();
            bits(&pool.install(|| m.call(i)).unwrap(), &mut b);
            b
        })
        .collect()
}

/// `lstm_wide` (hidden 128, bidirectional, two layers; batches 1 and 3 take the matrix-vector
/// steps, batch 5 the GEMM steps) gives the same bits on a pool of two threads as on one
/// (run_models compares those with PyTorch): the thread count does not change an LSTM's result.
#[test]
fn lstm_wide_on_two_threads_matches_one_thread_bit_for_bit() {
    let m = Module::load(model_path("lstm_wide")).unwrap();
    let inputs = golden_inputs("lstm_wide");
    assert_eq!(inputs.len(), 3);
    let one = outputs_in(&pool_of(1), &m, &inputs);
    let two = pool_of(2);
    for _ in 0..4 {
        assert!(outputs_in(&two, &m, &inputs) == one, "two threads differ");
    }
    // four callers inside the same pool of two: each sequence's helper job may be taken by the
    // other worker while it leads a sequence of its own, or by nobody
    std::thread::scope(|s| {
        let runs: Vec<_> = (0..4)
            .map(|_| s.spawn(|| outputs_in(&two, &m, &inputs)))
            .collect();
        for r in runs {
            assert!(
                r.join().unwrap() == one,
                "concurrent two-thread calls differ"
            );
        }
    });
}

/// `lstm_wide`'s batch-1 sequences take the fused step (gates computed on the recurrent
/// product's registers, the input projection in pieces beside the steps) and batches of 2 to 4
/// the matrix-vector step with separate gate passes: a batch of three copies of the batch-1
/// sequence gives each copy the batch-1 result bit for bit (run_models compares both batches
/// with PyTorch), on one thread and on two.
#[test]
fn lstm_wide_fused_batch_one_matches_the_batched_step_bit_for_bit() {
    let m = Module::load(model_path("lstm_wide")).unwrap();
    let inputs = golden_inputs("lstm_wide");
    let IValue::Tensor(x) = &inputs[0][0] else {
        panic!("lstm_wide's first input is not a tensor")
    };
    assert_eq!(x.shape(), [1, 12, 8]);
    let one: Vec<f32> = x.to_vec::<f32>().unwrap();
    let three = Tensor::from_vec(one.repeat(3), &[3, 12, 8]).unwrap();
    for threads in [1, 2] {
        let pool = pool_of(threads);
        let single = pool.install(|| m.call(&inputs[0])).unwrap();
        let batched = pool
            .install(|| m.call(&[IValue::Tensor(three.clone())]))
            .unwrap();
        let (IValue::Tuple(single), IValue::Tuple(batched)) = (single, batched) else {
            panic!("lstm_wide returns a tuple")
        };
        // (output [B, T, 2H], h_n [4, B, H], c_n [4, B, H]): the batch dim is 0, then 1
        for (i, (s, b)) in single.items().iter().zip(batched.items()).enumerate() {
            let (IValue::Tensor(s), IValue::Tensor(b)) = (s, b) else {
                panic!("result {i} is not a tensor")
            };
            let batch_dim = usize::from(i > 0);
            let shape = s.shape().to_vec();
            assert_eq!(shape[batch_dim], 1);
            let (s, b) = (s.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
            let (outer, inner) = (
                shape[..batch_dim].iter().product::<usize>(),
                shape[batch_dim + 1..].iter().product::<usize>(),
            );
            assert_eq!(s.len(), outer * inner);
            for o in 0..outer {
                for copy in 0..3 {
                    let got = &b[(o * 3 + copy) * inner..][..inner];
                    let want = &s[o * inner..][..inner];
                    assert!(
                        got.iter()
                            .zip(want)
                            .all(|(g, w)| g.to_bits() == w.to_bits()),
                        "result {i}, copy {copy}, {threads} thread(s): batched differs"
                    );
                }
            }
        }
    }
}
