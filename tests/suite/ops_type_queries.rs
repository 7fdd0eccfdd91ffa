//! Golden tests: every case of fixtures/ops/type_queries.json (written by
//! fixtures/gen_ops_type_queries.py from PyTorch) must match PyTorch's result.

use crate::common;

#[test]
fn type_query_ops_match_pytorch() {
    common::assert_op_cases("type_queries");
}
