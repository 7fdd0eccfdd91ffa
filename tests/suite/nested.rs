//! Nested tensors (PyTorch's strided NestedTensorImpl): the kernels that build and query them
//! against PyTorch's goldens (fixtures/gen_ops_nested.py).

use crate::common;

#[test]
fn nested_tensor_kernels_match_pytorch() {
    common::assert_op_cases("nested");
}
