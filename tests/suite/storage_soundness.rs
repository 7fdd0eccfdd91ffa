//! The storage ownership model: every access to a tensor's memory goes through a guard, writes are
//! exclusive, writes through self-overlapping views are refused with PyTorch's error, mapped
//! storages are copied on their first write (the archive stays untouched), and concurrent calls
//! of a module that mutates its state lose no update. Expected values come from PyTorch
//! (fixtures/gen_storage_soundness.py).

use crate::common::fixtures_dir;
use serde_json::Value;
use std::sync::Arc;
use tsrun::internals::runtime::Module;
use tsrun::internals::tensor::{BorrowError, DType, Tensor, TensorError};
use tsrun::internals::values::IValue;

fn golden() -> Value {
    let text = std::fs::read_to_string(fixtures_dir().join("soundness/storage_soundness.json"))
        .expect("soundness golden");
    serde_json::from_str(&text).expect("JSON")
}

fn model(name: &str) -> Module {
    Module::load(fixtures_dir().join("models").join(format!("{name}.pt"))).expect("load fixture")
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .expect("list")
        .iter()
        .map(|x| x.as_f64().expect("number") as f32)
        .collect()
}

#[test]
fn inplace_write_through_expanded_view_is_refused_as_pytorch_does() {
    let g = golden();
    let expected = g["inplace_expand"]["message"].as_str().expect("message");
    let m = model("inplace_expand");
    let x = Tensor::zeros(&[1, 4], DType::Float32).expect("zeros");
    let err = m
        .forward(&[IValue::Tensor(x.clone())])
        .expect_err("PyTorch refuses this write");
    assert!(
        err.to_string().contains(expected),
        "error {err} lacks PyTorch's message {expected}"
    );
    // the input was not written
    assert_eq!(x.to_vec::<f32>().expect("read"), vec![0.0; 4]);

    // the same through the tensor API
    let expanded = x.as_strided(&[3, 4], &[0, 1], 0).expect("expand");
    let err = expanded.write::<f32>().err().expect("refused");
    assert_eq!(err.to_string(), g["inplace_expand"]["eager_message"]);
    // overlapping non-zero strides are refused too; disjoint views may be written
    let overlap = Tensor::zeros(&[8], DType::Float32)
        .expect("zeros")
        .as_strided(&[3, 4], &[1, 1], 0)
        .expect("view");
    assert!(matches!(
        overlap.write::<f32>(),
        Err(TensorError::InternalOverlap(_))
    ));
    let transposed = Tensor::zeros(&[3, 4], DType::Float32)
        .expect("zeros")
        .as_strided(&[4, 3], &[1, 4], 0)
        .expect("view");
    assert!(transposed.write::<f32>().is_ok());
}

#[test]
fn guards_exclude_writers_while_anyone_reads() {
    let t = Tensor::zeros(&[16], DType::Float32).expect("zeros");
    let alias = t.as_strided(&[4], &[1], 4).expect("view");
    {
        let r1 = t.read::<f32>().expect("read");
        let r2 = alias.read::<f32>().expect("reads share");
        assert_eq!(r1.view().len() + r2.view().len(), 20);
        assert!(matches!(
            alias.write::<f32>(),
            Err(TensorError::Borrow(BorrowError::WriteWhileRead))
        ));
        // another thread is refused too, rather than racing
        let other = alias.clone();
        let refused = std::thread::spawn(move || other.write::<f32>().is_err())
            .join()
            .expect("thread");
        assert!(refused);
    }
    let before = t.storage().version();
    {
        let mut w = alias.write::<f32>().expect("write once readers are gone");
        w.view_mut().fill(2.0);
        assert!(matches!(
            t.read::<f32>(),
            Err(TensorError::Borrow(BorrowError::AlreadyWriting))
        ));
    }
    assert_eq!(t.storage().version(), before + 1);
    let v = t.to_vec::<f32>().expect("read");
    assert_eq!(&v[4..8], &[2.0; 4]);
    assert_eq!(v.iter().filter(|&&x| x == 0.0).count(), 12);
}

#[test]
fn a_bool_view_never_sees_a_byte_other_than_0_or_1() {
    let bytes = Tensor::zeros(&[4], DType::UInt8).expect("zeros");
    bytes
        .fill(tsrun::internals::tensor::Scalar::Int(2))
        .expect("fill");
    let as_bool = Tensor::from_parts(bytes.storage().clone(), 0, &[4], &[1], DType::Bool)
        .expect("bool view of the same storage");
    assert!(as_bool.read::<bool>().is_err());
    bytes
        .fill(tsrun::internals::tensor::Scalar::Int(1))
        .expect("fill");
    assert_eq!(as_bool.to_vec::<bool>().expect("valid now"), vec![true; 4]);
}

/// A bool storage's bytes are checked once per version (a causal mask sliced from a large
/// table is read on every call): a write through another view afterwards must be seen again.
#[test]
fn a_bool_view_checked_once_sees_a_later_invalid_byte() {
    let bytes = Tensor::zeros(&[10_000], DType::UInt8).expect("zeros");
    let mask = Tensor::from_parts(bytes.storage().clone(), 16, &[4, 4], &[100, 1], DType::Bool)
        .expect("a small bool view of a large storage");
    for _ in 0..3 {
        assert_eq!(mask.to_vec::<bool>().expect("all zero"), vec![false; 16]);
    }
    // a byte outside the view also breaks the storage's bool invariant
    let tail = Tensor::from_parts(bytes.storage().clone(), 9_999, &[1], &[1], DType::UInt8)
        .expect("last byte");
    tail.fill(tsrun::internals::tensor::Scalar::Int(7))
        .expect("fill");
    assert!(mask.read::<bool>().is_err());
    tail.fill(tsrun::internals::tensor::Scalar::Int(1))
        .expect("fill");
    assert_eq!(mask.to_vec::<bool>().expect("valid again"), vec![false; 16]);
}

#[test]
fn writes_to_mapped_parameters_copy_them_and_leave_the_archive_untouched() {
    let path = fixtures_dir().join("models/mlp.pt");
    let original = std::fs::read(&path).expect("archive bytes");
    let m = Module::load(&path).expect("load");
    let (name, p) = m.state_dict().into_iter().next().expect("a parameter");
    assert!(p.storage().is_mapped(), "{name} is loaded zero-copy");
    let first = p.to_vec::<f32>().expect("read")[0];
    p.fill(tsrun::internals::tensor::Scalar::Float(7.0))
        .expect("write");
    assert!(!p.storage().is_mapped(), "the write copied the storage");
    assert_eq!(p.to_vec::<f32>().expect("read")[0], 7.0);
    assert_eq!(std::fs::read(&path).expect("archive bytes"), original);
    let again = Module::load(&path).expect("reload");
    let (_, q) = again.state_dict().into_iter().next().expect("a parameter");
    assert_eq!(q.to_vec::<f32>().expect("read")[0], first);
}

#[test]
fn concurrent_calls_that_update_batch_norm_statistics_lose_no_update() {
    let g = golden();
    let bn = &g["batchnorm_training"];
    let calls = bn["calls"].as_u64().expect("calls") as usize;
    let shape: Vec<usize> = bn["input_shape"]
        .as_array()
        .expect("shape")
        .iter()
        .map(|d| d.as_u64().expect("dim") as usize)
        .collect();
    let x = Tensor::from_vec(floats(&bn["input"]), &shape).expect("input");
    let m = Arc::new(model("batchnorm_training"));
    let threads = 8;
    std::thread::scope(|s| {
        for _ in 0..threads {
            let (m, x) = (m.clone(), x.clone());
            s.spawn(move || {
                for _ in 0..calls / threads {
                    m.call(&[IValue::Tensor(x.clone())]).expect("call");
                }
            });
        }
    });
    let state: std::collections::HashMap<String, Tensor> = m.state_dict().into_iter().collect();
    for (key, want) in bn["state"].as_object().expect("state") {
        let got = &state[key.as_str()];
        let want_values = floats(&want["values"]);
        let got_values = got.to_vec::<f32>().expect("values");
        assert_eq!(got_values.len(), want_values.len(), "{key}");
        for (a, b) in got_values.iter().zip(&want_values) {
            assert!(
                (a - b).abs() <= 1e-5 + 1e-5 * b.abs(),
                "{key}: {got_values:?} != PyTorch's {want_values:?}"
            );
        }
    }
}

#[test]
fn only_calls_that_may_write_module_state_run_exclusively() {
    // eval-mode inference only reads state (resnet's `out += identity` writes a fresh tensor)
    for name in [
        "mlp",
        "resnet18",
        "mobilenet_v3_small",
        "lstm_tagger",
        "bert_bench",
    ] {
        let m = model(name);
        assert!(!m.mutates_state("forward").expect("analysis"), "{name}");
    }
    // batch norm in training mode updates its running statistics
    assert!(model("batchnorm_training")
        .mutates_state("forward")
        .expect("analysis"));
}

#[test]
fn inplace_writes_from_partially_overlapping_inputs_are_refused_as_pytorch_does() {
    let g = golden();
    let case = &g["partial_overlap"];
    let shape: Vec<usize> = case["input_shape"]
        .as_array()
        .expect("shape")
        .iter()
        .map(|d| d.as_u64().expect("dim") as usize)
        .collect();
    let x = Tensor::from_vec(floats(&case["input"]), &shape).expect("input");
    let m = model("partial_overlap");
    let refused = case["refused"].as_object().expect("refused cases");
    assert_eq!(refused.len(), 2);
    for (which, message) in refused {
        let which: i64 = which.parse().expect("case number");
        let err = m
            .forward(&[IValue::Tensor(x.clone()), IValue::Int(which)])
            .expect_err("PyTorch refuses this write");
        let message = message.as_str().expect("message");
        assert!(
            err.to_string().contains(message),
            "case {which}: error {err} lacks PyTorch's message {message}"
        );
    }
    let accepted = case["accepted"].as_object().expect("accepted cases");
    assert_eq!(accepted.len(), 2);
    for (which, expected) in accepted {
        let which: i64 = which.parse().expect("case number");
        let out = m
            .forward(&[IValue::Tensor(x.clone()), IValue::Int(which)])
            .expect("PyTorch accepts this write");
        let out = out
            .as_tensor()
            .expect("tensor")
            .to_vec::<f32>()
            .expect("read");
        assert_eq!(out, floats(expected), "case {which}");
    }
}
