//! Golden tests: every case of fixtures/ops/quantized.json (written by
//! fixtures/gen_ops_quantized.py from PyTorch's fbgemm engine) must match PyTorch's result or
//! error; quantized results compare exactly (quantizer and integers).

use crate::common;

#[test]
fn quantized_ops_match_pytorch() {
    common::assert_op_cases("quantized");
}

/// The quantized overloads added for operator coverage (fixtures/gen_ops_quantized_coverage.py):
/// the `_quantized::` twins, `conv_prepack`, linear with given input qparams, fp16 linear with
/// an unpacked weight, and aten's quantization helpers.
#[test]
fn quantized_coverage_ops_match_pytorch() {
    common::assert_op_cases("quantized_coverage");
}

/// The legacy quantized overloads added for operator coverage
/// (fixtures/gen_ops_quantized_legacy.py): scalar add/mul out= forms, 4-bit embedding lookups
/// and the quantized RNN cell parameter constructors.
#[test]
fn quantized_legacy_ops_match_pytorch() {
    common::assert_op_cases("quantized_legacy");
}

/// The pre-torchbind fbgemm API (fixtures/gen_ops_quantized_fbgemm_legacy.py): packed-matrix
/// tensors made by tsrun's pack kernels and consumed by the int8 / fp16 linears, the wrapped
/// AOTInductor linears and the legacy quantized RNN cells.
#[test]
fn quantized_fbgemm_legacy_ops_match_pytorch() {
    common::assert_op_cases("quantized_fbgemm_legacy");
}

/// The block-sparse quantized linear (fixtures/gen_ops_quantized_sparse.py): prepack, unpack and
/// the int8 kernels with fbgemm's int16-saturating pair sums.
#[test]
fn quantized_sparse_linear_ops_match_pytorch() {
    common::assert_op_cases("quantized_sparse");
}

/// The oneDNN engine's fused `quantized::linear_tanh` / `linear_leaky_relu` / `conv2d_add`
/// (fixtures/gen_ops_quantized_onednn_engine.py), computed through tsrun's `onednn::` kernels.
#[test]
fn quantized_onednn_engine_ops_match_pytorch() {
    common::assert_op_cases("quantized_onednn_engine");
}

/// The rounding of quantize / dequantize (fixtures/gen_ops_quantize_rounding.py): products on
/// exact ties, NaN, infinities and out-of-range values, every zero-point extreme, vector steps
/// and tails.
#[test]
fn quantize_rounding_matches_pytorch() {
    common::assert_op_cases("quantize_rounding");
}
