//! Builtins on ints, floats, strings and lists against PyTorch (fixtures/gen_ops_scalar.py).

use crate::common;

#[test]
fn scalar_builtins_match_pytorch() {
    common::assert_op_cases("scalar");
}
