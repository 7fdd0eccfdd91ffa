//! Golden tests: every case of fixtures/ops/runtime_coverage.json (written by
//! fixtures/gen_ops_runtime_coverage.py from PyTorch) must match PyTorch's result or error: the
//! `static_runtime::` operators, the `prim::` operators graph passes insert (variadic ones run by
//! PyTorch's interpreter on parsed graphs, the MKLDNN ones on MKLDNN tensors) and the list
//! builtins with type variables, which the synthesized goldens cannot call.

use crate::common;

#[test]
fn runtime_coverage_ops_match_pytorch() {
    common::assert_op_cases("runtime_coverage");
}

/// `is_strides_like_format` on channels-last, ambiguous and sliced layouts made by view ops
/// (fixtures/ops/runtime_coverage_views.json): PyTorch's answers.
#[test]
fn strides_like_format_of_strided_views_matches_pytorch() {
    crate::ops_shape::assert_view_cases("runtime_coverage_views");
}
