//! Shared building blocks for tensor kernels (elementwise maps with broadcasting, PyTorch type
//! promotion of operands, in-place write-back, reductions over dims, numeric traits).
//!
//! Every op family reuses these instead of writing its own loops:
//! - [`map::map_unary`], [`map::map_binary`], [`map::map_ternary`]: apply a closure elementwise
//!   into a fresh contiguous output (contiguous fast paths, one strided fallback over merged
//!   rows; parallel above `PARALLEL_THRESHOLD`).
//! - [`parallel`]: the one parallel driver these kernels share (`for_each_chunk_mut` on the
//!   low-latency kernel team, `for_each_index`; the work per chunk is a `&dyn Fn`, so the driver
//!   is instantiated per element type, not per kernel closure) and the broadcast row walk
//!   (`Rows`) of the strided paths.
//! - [`operand::Operand`]: a tensor or a wrapped number, with [`operand::common_dtype`] and
//!   [`operand::Operand::as_tensor_of`] for PyTorch's type promotion.
//! - [`operand::write_inplace`]: PyTorch's `op_` semantics (cast back to self's dtype, error if
//!   the result type cannot be cast).
//! - [`reduce::ReducePlan`]: the `[outer, reduced]` layout of a reduction over any dims, with
//!   `keepdim` shapes; [`reduce::pairwise_sum`] for accurate float sums.
//! - [`num`]: `Arith`/`Real` traits (wrapping integer arithmetic, NaN-propagating min/max) and
//!   the [`float_unary!`](crate::float_unary) macro (half types computed in f32 as PyTorch does).
//! - [`vmath`]: vectorized float32 exp/tanh/sigmoid/erf/gelu/silu and a matrix-vector product;
//!   [`rowwise`]: vectorized float32 layer norm and softmax over the rows of a matrix.

pub(crate) mod map;
pub(crate) mod num;
pub(crate) mod operand;
pub(crate) mod parallel;
pub(crate) mod reduce;
pub(crate) mod rowwise;
pub(crate) mod special;
pub(crate) mod stl_sort;
pub(crate) mod via_f64;
pub(crate) mod vmath;

use crate::tensor::TensorError;

/// A `TensorError::Value` as a crate error.
pub(crate) fn value_err(msg: impl Into<String>) -> crate::Error {
    TensorError::Value(msg.into()).into()
}

/// A `TensorError::Shape` as a crate error.
pub(crate) fn shape_err(msg: impl Into<String>) -> crate::Error {
    TensorError::Shape(msg.into()).into()
}

/// A `TensorError::Index` as a crate error.
pub(crate) fn index_err(msg: impl Into<String>) -> crate::Error {
    TensorError::Index(msg.into()).into()
}

/// [`TensorError::NotImplementedForDType`]: PyTorch's kernel `kernel` has no instance for
/// `dtype`.
pub(crate) fn not_implemented_for(
    kernel: impl Into<String>,
    dtype: crate::tensor::DType,
) -> crate::Error {
    TensorError::NotImplementedForDType {
        kernel: kernel.into(),
        dtype,
    }
    .into()
}

/// [`TensorError::WrongDType`]: `op`'s `argument` must be `expected` (a phrase).
pub(crate) fn wrong_dtype(
    op: impl Into<String>,
    argument: impl Into<String>,
    expected: impl Into<String>,
    got: crate::tensor::DType,
) -> crate::Error {
    TensorError::WrongDType {
        op: op.into(),
        argument: argument.into(),
        expected: expected.into(),
        got,
    }
    .into()
}

/// [`TensorError::RankMismatch`], when `shape` does not meet `expected`.
pub(crate) fn rank_mismatch(
    op: impl Into<String>,
    argument: impl Into<String>,
    expected: crate::tensor::RankRequirement,
    shape: &[usize],
) -> crate::Error {
    TensorError::RankMismatch {
        op: op.into(),
        argument: argument.into(),
        expected,
        shape: shape.to_vec(),
    }
    .into()
}

/// `Ok` when `shape` has a rank `expected` accepts, else [`rank_mismatch`].
pub(crate) fn check_rank(
    op: &str,
    argument: &str,
    expected: crate::tensor::RankRequirement,
    shape: &[usize],
) -> crate::Result<()> {
    if expected.accepts(shape.len()) {
        Ok(())
    } else {
        Err(rank_mismatch(op, argument, expected, shape))
    }
}

/// [`TensorError::ShapeMismatch`]: `op`'s `argument` must have shape `expected`.
pub(crate) fn shape_mismatch(
    op: impl Into<String>,
    argument: impl Into<String>,
    expected: &[usize],
    got: &[usize],
) -> crate::Error {
    TensorError::ShapeMismatch {
        op: op.into(),
        argument: argument.into(),
        expected: expected.to_vec(),
        got: got.to_vec(),
    }
    .into()
}

/// [`TensorError::SizeMismatch`]: `what` must count `expected`.
pub(crate) fn size_mismatch(
    op: impl Into<String>,
    what: impl Into<String>,
    expected: i64,
    got: i64,
) -> crate::Error {
    TensorError::SizeMismatch {
        op: op.into(),
        what: what.into(),
        expected,
        got,
    }
    .into()
}

/// `Ok` when `got` equals `expected`, else [`size_mismatch`] (same arguments, `expected` first).
pub(crate) fn check_size(op: &str, what: &str, expected: i64, got: i64) -> crate::Result<()> {
    if got == expected {
        Ok(())
    } else {
        Err(size_mismatch(op, what, expected, got))
    }
}

/// [`TensorError::InvalidArgument`]: `op`'s `argument` (given as `value`) must satisfy
/// `requirement` (a phrase after the name: `must be non-negative`).
pub(crate) fn invalid_argument(
    op: impl Into<String>,
    argument: impl Into<String>,
    requirement: impl Into<String>,
    value: impl std::fmt::Display,
) -> crate::Error {
    TensorError::InvalidArgument {
        op: op.into(),
        argument: argument.into(),
        requirement: requirement.into(),
        value: value.to_string(),
    }
    .into()
}

/// `value` as a size or count: [`invalid_argument`] when it is negative.
pub(crate) fn non_negative(op: &str, argument: &str, value: i64) -> crate::Result<usize> {
    usize::try_from(value)
        .map_err(|_| invalid_argument(op, argument, "must be non-negative", value))
}

/// [`TensorError::UnsupportedFeature`]: tsrun does not implement `feature` of `op`.
pub(crate) fn unsupported_feature(
    op: impl Into<String>,
    feature: impl Into<String>,
) -> crate::Error {
    TensorError::UnsupportedFeature {
        op: op.into(),
        feature: feature.into(),
    }
    .into()
}

/// The name PyTorch's CPU dispatch gives an op's kernel: `aten::cauchy_` runs `"cauchy_cpu"`,
/// `aten::chebyshev_polynomial_t.Tensor` runs `"chebyshev_polynomial_t_cpu"`.
pub(crate) fn cpu_kernel_name(op: &str) -> String {
    let name = op.strip_prefix("aten::").unwrap_or(op);
    let name = name.split('.').next().unwrap_or(name);
    format!("{}_cpu", name.trim_end_matches('_'))
}

/// A `TensorError::Unsupported` as a crate error.
pub(crate) fn unsupported(msg: impl Into<String>) -> crate::Error {
    TensorError::Unsupported(msg.into()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_size_passes_equal_counts_and_reports_expected_then_got() {
        assert!(check_size("aten::rot90", "the number of rotation dims", 2, 2).is_ok());
        let err = check_size("aten::rot90", "the number of rotation dims", 2, 3);
        match err {
            Err(crate::Error::Tensor(TensorError::SizeMismatch {
                op,
                what,
                expected,
                got,
            })) => {
                assert_eq!(
                    (op.as_str(), what.as_str(), expected, got),
                    ("aten::rot90", "the number of rotation dims", 2, 3)
                );
            }
            other => panic!("expected a SizeMismatch, got {other:?}"),
        }
        let built = size_mismatch("aten::rot90", "the number of rotation dims", 2, 3);
        let checked = check_size("aten::rot90", "the number of rotation dims", 2, 3);
        assert_eq!(
            checked.err().map(|e| e.to_string()),
            Some(built.to_string())
        );
    }
}
