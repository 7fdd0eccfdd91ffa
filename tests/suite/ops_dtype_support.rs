//! Golden tests: every case of fixtures/ops/dtype_support.json (written by
//! fixtures/gen_ops_dtype_support.py from PyTorch) must give PyTorch's result or fail as PyTorch
//! does. Kernels are instantiated only for the dtypes PyTorch's own kernels accept, so the
//! barebones unsigned dtypes (uint16/32/64) are refused exactly where PyTorch refuses them
//! (`add`, comparisons, `max`, ...) and still computed where PyTorch computes them (`mul`, `eq`,
//! `maximum`, bitwise and/or/xor, `sum`, `sort`, ...).

use crate::common;

#[test]
fn barebones_unsigned_dtypes_supported_where_pytorch_supports_them() {
    common::assert_op_cases("dtype_support");
}
