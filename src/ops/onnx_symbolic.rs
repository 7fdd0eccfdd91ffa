//! `onnx_symbolic::_symbolic`: the placeholder PyTorch's ONNX exporter traces for an ONNX
//! operator it emits as is (torch/onnx/ops/_symbolic_impl.py): eagerly, zeros of the declared
//! shape and ONNX element type; the operator's inputs and attributes only go into the exported
//! graph.

use super::prims::via_aten;
use super::{Args, Registry};
use crate::ops::kernels::{invalid_argument, unsupported_feature};
use crate::tensor::DType;
use crate::values::IValue;

/// `torch.onnx.ops._dtype_mappings.ONNX_DTYPE_TO_TORCH_DTYPE` for the element types tsrun
/// has (`Err(code)` for the float8 / float4 ones it has no arithmetic for, `None` for codes
/// ONNX does not define).
pub(crate) fn onnx_dtype(code: i64) -> Option<Result<DType, i64>> {
    Some(Ok(match code {
        1 => DType::Float32,
        2 | 21 | 22 => DType::UInt8,
        3 => DType::Int8,
        4 => DType::UInt16,
        5 => DType::Int16,
        6 => DType::Int32,
        7 => DType::Int64,
        9 => DType::Bool,
        10 => DType::Float16,
        11 => DType::Float64,
        12 => DType::UInt32,
        13 => DType::UInt64,
        14 => DType::Complex64,
        15 => DType::Complex128,
        16 => DType::BFloat16,
        17..=20 | 23 => return Some(Err(code)),
        _ => return None,
    }))
}

/// _symbolic(inputs, op_type, onnx_dtype, *, shape, attr_keys, attr_types, attr_pos,
/// attr_ints, attr_floats, attr_strs, metadata_props_keys, metadata_props_values, domain,
/// version) -> zeros(shape, dtype of onnx_dtype)
fn symbolic(a: &mut Args<'_>) -> crate::Result<IValue> {
    let op = a.op;
    a.opt_tensor_list(0)?;
    a.str(1)?;
    let code = a.int(2)?;
    let dtype = match onnx_dtype(code) {
        Some(Ok(d)) => d,
        Some(Err(code)) => {
            return Err(unsupported_feature(
                op,
                format!(
                    "ONNX element type {code} (a float8 / float4 type tsrun has no tensors of)"
                ),
            ))
        }
        None => {
            return Err(invalid_argument(
                op,
                "dtype",
                "must be an ONNX data type",
                code,
            ))
        }
    };
    let shape = a.get(3)?.clone();
    via_aten(
        a,
        "aten::zeros",
        vec![
            shape,
            IValue::Int(dtype as i64),
            IValue::None,
            IValue::None,
            IValue::None,
        ],
    )
}

pub(crate) fn register(r: &mut Registry) {
    r.add("onnx_symbolic::_symbolic", symbolic);
}
