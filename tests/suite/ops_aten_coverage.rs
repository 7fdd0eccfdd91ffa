//! Golden tests: every case of fixtures/ops/aten_coverage.json (written by
//! fixtures/gen_ops_aten_coverage.py from PyTorch) must match PyTorch's result or error: the
//! aten overloads added for issue 12's coverage whose synthesized goldens cannot reach their
//! corner cases (legacy interpolate builtins, `_pad_enum`, `_unsafe_index*`, `_safe_softmax`,
//! `range`, memory-format queries, string and number builtins, ...).

use crate::common;

#[test]
fn aten_coverage_ops_match_pytorch() {
    common::assert_op_cases("aten_coverage");
}

/// Layout queries (`is_contiguous.memory_format`, `sym_stride`, ...) on channels-last and
/// sliced views (fixtures/ops/aten_coverage_views.json): PyTorch's answers.
#[test]
fn layout_queries_of_strided_views_match_pytorch() {
    crate::ops_shape::assert_view_cases("aten_coverage_views");
}
