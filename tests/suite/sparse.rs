//! Sparse tensors: every case of fixtures/ops/sparse.json (fixtures/gen_ops_sparse.py, from
//! PyTorch) must match PyTorch's result or error, sparse results compared by layout, size,
//! coalesced flag and component tensors; dense kernels refuse sparse arguments naming the
//! operator and the layout.

use crate::common;
use tsrun::internals::ops::{Args, OpContext, Registry};
use tsrun::internals::tensor::{Layout, Tensor};
use tsrun::internals::values::IValue;

#[test]
fn sparse_ops_match_pytorch() {
    common::assert_op_cases("sparse");
}

fn coo_3x3() -> Tensor {
    let indices = Tensor::from_vec(vec![0i64, 1, 2, 1, 0, 2], &[2, 3]).expect("indices");
    let values = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).expect("values");
    Tensor::sparse_coo(indices, values, &[3, 3], false).expect("coo")
}

#[test]
fn dense_kernels_refuse_sparse_tensors_naming_op_and_layout() {
    let registry = Registry::global();
    let ctx = OpContext::default();
    let kernel = registry.lookup("aten::relu", "").expect("relu");
    let mut args = vec![IValue::Tensor(coo_3x3())];
    let err =
        kernel(&mut Args::new("aten::relu", &mut args, &ctx)).expect_err("relu of a sparse tensor");
    let text = err.to_string();
    assert!(
        text.contains("'aten::relu'")
            && text.contains("'SparseCPU'")
            && text.contains("sparse_coo"),
        "{text}"
    );
    // element access and views refuse too, whatever the caller
    let t = coo_3x3();
    assert_eq!(t.layout(), Layout::SparseCoo);
    let read = t
        .read::<f32>()
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(read.contains("SparseCPU"), "{read}");
    assert!(t.as_strided(&[9], &[1], 0).is_err());
    assert!(t.to_vec::<f32>().is_err());
}

#[test]
fn sparse_components_are_validated() {
    let indices = Tensor::from_vec(vec![0i64, 3], &[1, 2]).expect("indices");
    let values = Tensor::from_vec(vec![1.0f32, 2.0], &[2]).expect("values");
    let err = Tensor::sparse_coo(indices, values, &[3], false).expect_err("index 3 of size 3");
    assert!(err.to_string().contains("found index 3"), "{err}");
}
