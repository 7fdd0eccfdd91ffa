//! Math operator families added for issue 12's coverage (fixtures/gen_ops_math_functions.py):
//! each case is PyTorch's answer over the ranges and special values the synthesized coverage
//! goldens do not reach.

use crate::common;

/// Bessel, Airy and incomplete gamma functions (every branch of PyTorch's formulas, the
/// boundary values, float32/float64/integer inputs, the in-place forms); Hermitian FFTs and
/// the `_fft_*` / `prims::fft_*` primitives (sizes, dims, norms, dtypes, refused inputs);
/// histograms (ranges, weights, density, edge tensors, points on and outside the edges) and
/// the cummax/cummin helpers.
#[test]
fn special_functions_ffts_and_histograms() {
    common::assert_op_cases("math_functions");
}
