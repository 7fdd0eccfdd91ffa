//! Golden tests: every case of fixtures/ops/view_copy.json (written by
//! fixtures/gen_ops_view_copy.py from PyTorch) must match PyTorch's result or error, on
//! contiguous and strided inputs; and the `*_copy` results own their storage.

use crate::common;
use tsrun::internals::ops::{Args, OpContext, Registry};
use tsrun::internals::runtime::{IValue, Tuple};
use tsrun::Tensor;

#[test]
fn view_copy_ops_match_pytorch() {
    common::assert_op_cases("view_copy");
}

/// Non-contiguous inputs (fixtures/ops/view_copy_views.json): values as PyTorch's, contiguous
/// strides, no aliasing of the input's storage.
#[test]
fn view_copies_of_strided_inputs_match_pytorch() {
    crate::ops_shape::assert_view_cases("view_copy_views");
}

/// An `int[]` argument.
fn ints(v: &[i64]) -> IValue {
    IValue::Tuple(Tuple::new(v.iter().map(|&i| IValue::Int(i)).collect()))
}

/// A copy twin never aliases its input, even where the view would be the input itself.
#[test]
fn view_copies_own_their_storage() {
    let x = Tensor::from_vec((0..6).map(|v| v as f32).collect(), &[2, 3]).expect("tensor");
    let ctx = OpContext::default();
    for (name, extra) in [
        ("aten::permute_copy", ints(&[0, 1])),
        ("aten::view_copy", ints(&[2, 3])),
        ("aten::expand_copy", ints(&[2, 3])),
    ] {
        let kernel = Registry::global()
            .lookup(name, "")
            .expect("registered kernel");
        let mut args = vec![IValue::Tensor(x.clone()), extra, IValue::Bool(false)];
        let out = kernel(&mut Args::new(name, &mut args, &ctx)).expect("runs");
        let out = out.as_tensor().expect("a tensor").clone();
        assert!(!out.shares_storage(&x), "{name} aliases its input");
        assert!(out.is_contiguous(), "{name} is not contiguous");
    }
}
