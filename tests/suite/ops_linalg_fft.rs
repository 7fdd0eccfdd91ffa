//! Golden tests: every case of fixtures/ops/linalg_fft.json (written by
//! fixtures/gen_ops_linalg_fft.py from PyTorch) runs through the registry and must match
//! PyTorch's result or error.

use crate::common;

#[test]
fn linalg_fft_ops_match_pytorch() {
    common::assert_op_cases("linalg_fft");
}
