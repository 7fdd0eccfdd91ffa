//! Legacy quantized entry points: the RNN cell-parameter constructors TorchScript code of the
//! quantized dynamic RNN modules calls (`quantized::make_quantized_cell_params*`). The
//! pre-torchbind packing overloads (`linear_prepack_legacy`, ...) have no kernel: PyTorch keeps
//! them registered only to refuse them, so tsrun's compile-time "no kernel" error stands.

use super::linear::fbgemm_quantize_weight;
use super::torchbind::{packed_arg, LinearParams};
use crate::ops::{Args, Registry};
use crate::values::types::Type;
use crate::values::{IValue, List, Object, Tuple};
use crate::Result;

/// The torchbind class of a quantized RNN cell's parameters.
const CELL_PARAMS_CLASS: &str = "__torch__.torch.classes.rnn.CellParamsBase";

pub fn register(r: &mut Registry) {
    r.add(
        "quantized::make_quantized_cell_params_dynamic",
        make_cell_params_dynamic,
    );
    r.add(
        "quantized::make_quantized_cell_params_fp16",
        make_cell_params_fp16,
    );
    r.add("quantized::make_quantized_cell_params", make_cell_params);
}

/// A `CellParamsBase` object with ATen's serialized state `(kind, tensors, doubles, longs,
/// packed weights)`, which the quantized RNN kernels (`rnn.rs`) read.
fn cell_params(
    kind: &str,
    tensors: Vec<IValue>,
    doubles: Vec<IValue>,
    longs: Vec<IValue>,
    packed: Vec<Object>,
) -> IValue {
    IValue::Object(Object::with_state(
        CELL_PARAMS_CLASS.into(),
        IValue::Tuple(Tuple::new(vec![
            IValue::str(kind),
            IValue::List(List::new(Type::Tensor, tensors)),
            IValue::List(List::new(Type::Float, doubles)),
            IValue::List(List::new(Type::Int, longs)),
            IValue::List(List::new(
                Type::Any,
                packed.into_iter().map(IValue::Object).collect(),
            )),
        ])),
    ))
}

/// The packed linear weights of arguments 0 and 1 (ATen takes int8 and fp16 ones for either
/// cell kind; a cell whose kind does not match its weights fails when it runs).
fn packed_pair(a: &Args<'_>) -> Result<[Object; 2]> {
    let pair = [packed_arg(a, 0)?, packed_arg(a, 1)?];
    for p in &pair {
        LinearParams::from_object(p)?;
    }
    Ok(pair)
}

/// `make_quantized_cell_params_dynamic(w_ih, w_hh, bias_ih, bias_hh, reduce_range)`:
/// ATen's `QuantizedCellParamsDynamic` (the packed weights apply their own biases; the bias
/// tensors are kept for serialization).
fn make_cell_params_dynamic(a: &mut Args<'_>) -> Result<IValue> {
    let packed = packed_pair(a)?;
    let biases = vec![IValue::Tensor(a.tensor(2)?), IValue::Tensor(a.tensor(3)?)];
    let reduce_range = IValue::Int(a.bool(4)? as i64);
    Ok(cell_params(
        "quantized_dynamic",
        biases,
        Vec::new(),
        vec![reduce_range],
        packed.into(),
    ))
}

/// `make_quantized_cell_params_fp16(w_ih, w_hh)`: ATen's `QuantizedCellParamsFP16`.
fn make_cell_params_fp16(a: &mut Args<'_>) -> Result<IValue> {
    let packed = packed_pair(a)?;
    Ok(cell_params(
        "quantized_fp16",
        Vec::new(),
        Vec::new(),
        Vec::new(),
        packed.into(),
    ))
}

/// `make_quantized_cell_params(w_ih, w_hh, b_ih, b_hh)`: ATen's `QuantizedCellParams`, the
/// float weights quantized by `fbgemm_linear_quantize_weight`, in its serialized state
/// `("quantized", [w_ih, w_hh, b_ih, b_hh, col_offsets_ih, col_offsets_hh], [scale_ih,
/// scale_hh], [zero_point_ih, zero_point_hh], [])`, which `quantized_lstm` / `quantized_gru`
/// run with `fbgemm_linear_int8_weight`'s arithmetic (`rnn.rs`).
fn make_cell_params(a: &mut Args<'_>) -> Result<IValue> {
    let (w_ih, col_ih, scale_ih, zp_ih) = fbgemm_quantize_weight(a.op, &a.tensor(0)?)?;
    let (w_hh, col_hh, scale_hh, zp_hh) = fbgemm_quantize_weight(a.op, &a.tensor(1)?)?;
    let tensors = [w_ih, w_hh, a.tensor(2)?, a.tensor(3)?, col_ih, col_hh]
        .into_iter()
        .map(IValue::Tensor)
        .collect();
    Ok(cell_params(
        "quantized",
        tensors,
        vec![IValue::Double(scale_ih), IValue::Double(scale_hh)],
        vec![IValue::Int(zp_ih), IValue::Int(zp_hh)],
        Vec::new(),
    ))
}
