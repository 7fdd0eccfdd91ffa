//! The vectorized float32 row kernels (layer norm, the softmax of attention) against PyTorch
//! (fixtures/ops/rowwise.npz, written by fixtures/gen_rowwise.py) at sizes that leave a tail in
//! every vector loop, through the registry as a graph calls them, and a traced transformer
//! block (fixtures/models/attention_block.pt) that runs them end to end.

use crate::common::{compare_tensors, fixtures_dir, Arrays};
use tsrun::internals::ops::{Args, OpContext, Registry};
use tsrun::internals::tensor::{DType, Tensor};
use tsrun::internals::values::IValue;

fn arrays() -> Arrays {
    Arrays::open(&fixtures_dir().join("ops").join("rowwise.npz"))
}

fn call(op: &str, overload: &str, mut values: Vec<IValue>) -> IValue {
    let kernel = Registry::global()
        .lookup(op, overload)
        .unwrap_or_else(|| panic!("{op}.{overload} is registered"));
    let ctx = OpContext::default();
    kernel(&mut Args::new(op, &mut values, &ctx)).unwrap_or_else(|e| panic!("{op}: {e}"))
}

fn tensors(v: IValue) -> Vec<Tensor> {
    match v {
        IValue::Tensor(t) => vec![t],
        IValue::Tuple(t) => t
            .items()
            .iter()
            .map(|v| match v {
                IValue::Tensor(t) => t.clone(),
                other => panic!("not a tensor: {other:?}"),
            })
            .collect(),
        other => panic!("not a tensor: {other:?}"),
    }
}

#[test]
fn layer_norm_matches_pytorch_over_odd_row_lengths() {
    let mut a = arrays();
    for (name, norm, affine) in [
        ("rows37", vec![37i64], true),
        ("rows300", vec![300], true),
        ("two_dims", vec![5, 12], true),
        ("plain", vec![21], false),
    ] {
        let x = a.tensor(&format!("ln_{name}_x"), DType::Float32);
        let param = |a: &mut Arrays, p: &str| {
            if affine {
                IValue::Tensor(a.tensor(&format!("ln_{name}_{p}"), DType::Float32))
            } else {
                IValue::None
            }
        };
        let (w, b) = (param(&mut a, "w"), param(&mut a, "b"));
        let norm_list = IValue::from(norm.clone());
        let out = call(
            "aten::native_layer_norm",
            "",
            vec![
                IValue::Tensor(x.clone()),
                norm_list.clone(),
                w.clone(),
                b.clone(),
                IValue::Double(1e-5),
            ],
        );
        let got = tensors(out);
        for (t, key) in got.iter().zip(["out", "mean", "rstd"]) {
            let want = a.tensor(&format!("ln_{name}_{key}"), DType::Float32);
            compare_tensors(t, &want, 1e-5, 1e-5, &format!("{name} {key}"))
                .unwrap_or_else(|e| panic!("native_layer_norm {e}"));
        }
        let plain = call(
            "aten::layer_norm",
            "",
            vec![
                IValue::Tensor(x.clone()),
                norm_list,
                w,
                b,
                IValue::Double(1e-5),
                IValue::Bool(true),
            ],
        );
        let want = a.tensor(&format!("ln_{name}_out"), DType::Float32);
        compare_tensors(&tensors(plain)[0], &want, 1e-5, 1e-5, name)
            .unwrap_or_else(|e| panic!("layer_norm {e}"));
    }
}

#[test]
fn attention_softmax_matches_pytorch_over_odd_key_counts() {
    let mut a = arrays();
    for (name, scale) in [("odd", IValue::None), ("scaled", IValue::Double(0.3))] {
        let t = |a: &mut Arrays, p: &str| {
            IValue::Tensor(a.tensor(&format!("sdpa_{name}_{p}"), DType::Float32))
        };
        let (q, k, v) = (t(&mut a, "q"), t(&mut a, "k"), t(&mut a, "v"));
        let out = call(
            "aten::scaled_dot_product_attention",
            "",
            vec![
                q,
                k,
                v,
                IValue::None,
                IValue::Double(0.0),
                IValue::Bool(false),
                scale,
                IValue::Bool(false),
            ],
        );
        let want = a.tensor(&format!("sdpa_{name}_out"), DType::Float32);
        compare_tensors(&tensors(out)[0], &want, 1e-5, 1e-5, name)
            .unwrap_or_else(|e| panic!("sdpa {e}"));
    }
}

#[test]
fn traced_transformer_block_matches_pytorch() {
    let mut a = arrays();
    let m = tsrun::Module::load(fixtures_dir().join("models").join("attention_block.pt"))
        .expect("the block loads");
    let (x, mask) = (
        a.tensor("block_x", DType::Float32),
        a.tensor("block_mask", DType::Float32),
    );
    let out = m
        .forward(&[IValue::Tensor(x), IValue::Tensor(mask)])
        .expect("the block runs");
    let want = a.tensor("block_out", DType::Float32);
    compare_tensors(&tensors(out)[0], &want, 1e-5, 1e-5, "block")
        .unwrap_or_else(|e| panic!("attention block {e}"));
}
