//! Operands of promoting ops (tensors or wrapped numbers) and in-place write-back.

use crate::ops::Args;
use crate::tensor::promote::{self, result_type};
use crate::tensor::{broadcast_shapes, DType, Scalar, Tensor};
use crate::values::IValue;

/// An argument that may be a tensor or a Python number (a "wrapped number" in promotion).
#[derive(Clone)]
pub(crate) enum Operand {
    Tensor(Tensor),
    Scalar(Scalar),
}

impl Operand {
    /// Argument `i` as a tensor or a scalar.
    pub(crate) fn arg(args: &Args<'_>, i: usize) -> crate::Result<Operand> {
        match args.get(i)? {
            IValue::Tensor(t) => Ok(Operand::Tensor(t.clone())),
            _ => Ok(Operand::Scalar(args.scalar(i)?)),
        }
    }

    fn promote(&self) -> promote::Operand<'_> {
        match self {
            Operand::Tensor(t) => promote::Operand::Tensor(t),
            Operand::Scalar(s) => promote::Operand::Scalar(*s),
        }
    }

    /// The operand as a tensor of `dtype` (a 0-d tensor for a scalar).
    pub(crate) fn as_tensor_of(&self, dtype: DType) -> crate::Result<Tensor> {
        match self {
            Operand::Tensor(t) => t.to_dtype(dtype),
            Operand::Scalar(s) => Tensor::from_scalar(*s, dtype),
        }
    }
}

/// `torch.result_type` over the operands.
pub(crate) fn common_dtype(ops: &[&Operand]) -> DType {
    let p: Vec<promote::Operand<'_>> = ops.iter().map(|o| o.promote()).collect();
    result_type(&p)
}

/// Integral and bool tensors as float32 (what floating unary ops compute in); others unchanged.
pub(crate) fn float_input(x: &Tensor) -> crate::Result<Tensor> {
    if x.dtype().is_integral(true) {
        x.to_dtype(DType::Float32)
    } else {
        Ok(x.clone())
    }
}

/// The floating dtype an op computes in for inputs of `dtype` (ints -> float32).
pub(crate) fn float_dtype(dtype: DType) -> DType {
    if dtype.is_integral(true) {
        DType::Float32
    } else {
        dtype
    }
}

/// PyTorch's `canCast(from, to)`: no complex -> real, float -> integral, or non-bool -> bool.
pub(crate) fn can_cast(from: DType, to: DType) -> bool {
    if from.is_complex() && !to.is_complex() {
        return false;
    }
    if from.is_floating_point() && to.is_integral(true) {
        return false;
    }
    !(from != DType::Bool && to == DType::Bool)
}

/// Write `result` into `target` as an in-place op does (`add_`): the result is cast to
/// `target`'s dtype (an error if PyTorch would refuse the cast) and must not broadcast `target`.
pub(crate) fn write_inplace(target: &Tensor, result: &Tensor, op: &str) -> crate::Result<()> {
    if !can_cast(result.dtype(), target.dtype()) {
        return Err(super::wrong_dtype(
            op,
            "self (the output)",
            format!("a dtype the result type {} can be cast to", result.dtype()),
            target.dtype(),
        ));
    }
    let b = broadcast_shapes(target.shape(), result.shape())?;
    if b.as_slice() != target.shape() {
        return Err(super::shape_mismatch(
            op,
            "self (the output, the broadcast shape)",
            b.as_slice(),
            target.shape(),
        ));
    }
    target.copy_from(result)
}

/// For in-place kernels: write `result` into argument 0 and return argument 0.
pub(crate) fn inplace_result(args: &Args<'_>, result: IValue) -> crate::Result<IValue> {
    let target = args.tensor(0)?;
    let result = match result {
        IValue::Tensor(t) => t,
        other => {
            return Err(super::invalid_argument(
                args.op,
                "the in-place result",
                "must be a tensor",
                other.kind_name(),
            ))
        }
    };
    check_inputs_overlap(args, &target, 1)?;
    write_inplace(&target, &result, args.op)?;
    Ok(IValue::Tensor(target))
}

/// PyTorch refuses a write whose target partially overlaps one of the op's inputs
/// (`assert_no_partial_overlap`): the inputs at `first_input..` that are tensors, or lists of them.
pub(crate) fn check_inputs_overlap(
    args: &Args<'_>,
    target: &Tensor,
    first_input: usize,
) -> crate::Result<()> {
    for value in args.values.iter().skip(first_input) {
        match value {
            IValue::Tensor(t) => target.check_no_partial_overlap(t)?,
            IValue::List(list) => {
                for item in list.items().iter() {
                    if let IValue::Tensor(t) = item {
                        target.check_no_partial_overlap(t)?;
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// In-place twins of out-of-place kernels: `name_ => name;` defines
/// `fn name_(args) -> Result<IValue>` that runs `name` and writes its result into argument 0
/// ([`inplace_result`]). An optional visibility goes before each in-place name.
macro_rules! inplace_of {
    ($($vis:vis $inplace:ident => $op:ident;)*) => {$(
        $vis fn $inplace(
            args: &mut $crate::ops::Args<'_>,
        ) -> $crate::Result<$crate::values::IValue> {
            let r = $op(args)?;
            $crate::ops::kernels::operand::inplace_result(args, r)
        }
    )*};
}
pub(crate) use inplace_of;

/// Floating unary kernels over [`float_unary!`](crate::float_unary), their in-place twins and
/// one registration function: `vis register_fn, add_inplace;` then
/// `vis name, name_, "op" => |v| body;` (`F` is the compute float type in `body`). Each
/// `aten::op` is registered with `Registry::add`, each `aten::op_` with `add_inplace`
/// (`add`, or `add_if_defined` where some names have no in-place schema).
macro_rules! float_unary_kernels {
    (
        $rvis:vis $register:ident, $add_inplace:ident;
        $($vis:vis $name:ident, $inplace:ident, $op:literal => |$v:ident| $body:expr;)*
    ) => {
        $(
            $vis fn $name(
                args: &mut $crate::ops::Args<'_>,
            ) -> $crate::Result<$crate::values::IValue> {
                let x = args.tensor(0)?;
                Ok($crate::values::IValue::Tensor($crate::float_unary!(&x, $op, |$v: F| $body)?))
            }
            $crate::ops::kernels::operand::inplace_of! { $vis $inplace => $name; }
        )*
        $rvis fn $register(r: &mut $crate::ops::Registry) {
            $(
                r.add(concat!("aten::", $op), $name);
                r.$add_inplace(concat!("aten::", $op, "_"), $inplace);
            )*
        }
    };
}
pub(crate) use float_unary_kernels;
