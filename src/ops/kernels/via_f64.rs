//! Helpers for kernels that compute in f64 and cast the result back to the floating dtype PyTorch
//! would produce (integral inputs promote to float32): exact enough for every float type, and
//! simple where speed does not matter (special functions, losses, sampling grids, queries).

use super::map::map_binary;
use super::operand::{common_dtype, float_dtype, Operand};
use super::wrong_dtype;
use crate::tensor::{DType, Tensor};
use crate::values::IValue;

/// A kernel's tensor result.
pub(crate) fn t(x: Tensor) -> crate::Result<IValue> {
    Ok(IValue::Tensor(x))
}

/// A tensor's elements as f64, row-major.
pub(crate) fn vals(x: &Tensor) -> crate::Result<Vec<f64>> {
    x.to_vec::<f64>()
}

/// A tensor of `dt` from f64 values.
pub(crate) fn build(v: Vec<f64>, shape: &[usize], dt: DType) -> crate::Result<Tensor> {
    Tensor::from_vec(v, shape)?.to_dtype(dt)
}

/// Floating result dtype of two operands (ints -> float32).
pub(crate) fn float_common(a: &Operand, b: &Operand) -> crate::Result<DType> {
    let dt = float_dtype(common_dtype(&[a, b]));
    if dt.is_complex() {
        return Err(wrong_dtype(
            "float_common",
            "operands",
            "real (complex is not supported)",
            dt,
        ));
    }
    Ok(dt)
}

/// `f(a, b)` elementwise in f64 with broadcasting; the result has the floating common dtype.
pub(crate) fn float_binary_op(
    a: &Operand,
    b: &Operand,
    f: impl Fn(f64, f64) -> f64 + Sync + Send,
) -> crate::Result<Tensor> {
    let dt = float_common(a, b)?;
    let (x, y) = (
        a.as_tensor_of(DType::Float64)?,
        b.as_tensor_of(DType::Float64)?,
    );
    map_binary::<f64, f64, f64, _>(&x, &y, f)?.to_dtype(dt)
}
