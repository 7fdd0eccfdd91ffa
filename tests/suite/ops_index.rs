//! Golden tests for the indexing (src/ops/index.rs) and sorting (src/ops/sort.rs) families,
//! from fixtures/ops/index.json and fixtures/ops/sort.json (fixtures/gen_ops_index.py).

use crate::common;

#[test]
fn index_op_cases() {
    common::assert_op_cases("index");
}

#[test]
fn sort_op_cases() {
    common::assert_op_cases("sort");
}
