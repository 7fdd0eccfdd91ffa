//! Golden tests: every case of fixtures/ops/c10d.json (written by fixtures/gen_ops_c10d.py from
//! PyTorch) must match PyTorch's result or error: the waits on functional collectives' results
//! and `c10d::check_for_nan`.

use crate::common;

#[test]
fn c10d_ops_match_pytorch() {
    common::assert_op_cases("c10d");
}
