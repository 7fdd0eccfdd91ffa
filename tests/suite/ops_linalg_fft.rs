//! Golden tests: every case of fixtures/ops/linalg_fft.json (written by
//! fixtures/gen_ops_linalg_fft.py from PyTorch) runs through the registry and must match
//! PyTorch's result or error.

use crate::common;

#[test]
fn linalg_fft_ops_match_pytorch() {
    common::assert_op_cases("linalg_fft");
}

/// `linalg_inv_ex` without `check_errors` on a singular matrix: PyTorch returns LAPACK's
/// partial result with a nonzero info, which tsrun refuses with a typed error instead of
/// returning different numbers.
#[test]
fn inverse_ex_of_a_singular_matrix_without_check_errors_is_refused() {
    use tsrun::internals::ops::{Args, OpContext, Registry};
    use tsrun::internals::runtime::IValue;
    let ones = tsrun::Tensor::from_vec(vec![1.0f32; 4], &[2, 2]).expect("tensor");
    let kernel = Registry::global()
        .lookup("aten::linalg_inv_ex", "")
        .expect("registered");
    let ctx = OpContext::default();
    let mut args = vec![IValue::Tensor(ones), IValue::Bool(false)];
    let e = kernel(&mut Args::new("aten::linalg_inv_ex", &mut args, &ctx))
        .expect_err("singular")
        .to_string();
    assert!(e.contains("check_errors"), "{e}");
}
