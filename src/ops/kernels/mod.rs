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

/// A `TensorError::Unsupported` as a crate error.
pub(crate) fn unsupported(msg: impl Into<String>) -> crate::Error {
    TensorError::Unsupported(msg.into()).into()
}
