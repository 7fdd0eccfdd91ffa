//! Dtype queries: `result_type` (every operand combination, with PyTorch's tiers of dimensioned
//! tensors, 0-d tensors and wrapped numbers), `promote_types` and `can_cast`. Dtypes travel as
//! their `ScalarType` numbers, as in TorchScript.

use super::kernels::operand::{can_cast, common_dtype, Operand};
use super::{Args, Registry};
use crate::ops::kernels::unsupported_feature;
use crate::tensor::promote::promote_types;
use crate::tensor::{DType, Scalar};
use crate::values::IValue;

type R = crate::Result<IValue>;

/// `result_type.Tensor`, `.Scalar`, `.Scalar_Tensor` and `.Scalar_Scalar`: each argument is a
/// tensor or a number, so one kernel reads all four.
fn result_type(args: &mut Args<'_>) -> R {
    let (a, b) = (Operand::arg(args, 0)?, Operand::arg(args, 1)?);
    let tensors: Vec<&Operand> = [&a, &b]
        .into_iter()
        .filter(|o| matches!(o, Operand::Tensor(_)))
        .collect();
    let complex_number = [&a, &b]
        .into_iter()
        .any(|o| matches!(o, Operand::Scalar(Scalar::Complex(_))));
    // PyTorch answers ComplexBFloat16 (`torch.bcomplex32`), a dtype tsrun does not have
    if complex_number && !tensors.is_empty() && common_dtype(&tensors) == DType::BFloat16 {
        return Err(unsupported_feature(
            args.op,
            "bfloat16 with a complex number (it promotes to ComplexBFloat16, a dtype tsrun \
             lacks)",
        ));
    }
    Ok(IValue::Int(common_dtype(&[&a, &b]).to_scalar_type()))
}

fn promote_types_op(args: &mut Args<'_>) -> R {
    Ok(IValue::Int(
        promote_types(args.dtype(0)?, args.dtype(1)?).to_scalar_type(),
    ))
}

fn can_cast_op(args: &mut Args<'_>) -> R {
    Ok(IValue::Bool(can_cast(args.dtype(0)?, args.dtype(1)?)))
}

pub fn register(r: &mut Registry) {
    r.add_overloads(
        "aten::result_type",
        &["Tensor", "Scalar", "Scalar_Tensor", "Scalar_Scalar"],
        result_type,
    );
    r.add("aten::promote_types", promote_types_op);
    r.add("aten::can_cast", can_cast_op);
}
