//! Golden tests: every case of fixtures/ops/orthogonal_polynomials.json (written by
//! fixtures/gen_ops_orthogonal_polynomials.py from PyTorch) must match PyTorch's result or error.

use crate::common;

#[test]
fn orthogonal_polynomial_ops_match_pytorch() {
    common::assert_op_cases("orthogonal_polynomials");
}
