//! The `torch.distributed` (c10d) operators that need no process group: waiting on a
//! functional collective's result (`_c10d_functional::wait_tensor(s)` and the legacy
//! `c10d_functional::wait_tensor`, which graphs traced from distributed code call after each
//! collective) and `c10d::check_for_nan`. tsrun runs no collectives, so no tensor has work
//! pending and a wait gives its tensors back, as PyTorch does for a tensor without pending
//! work. The collectives themselves (all_reduce, ...) need a process group and are not
//! provided.

use super::kernels::invalid_argument;
use super::mkldnn::tensor_of;
use super::prims::via_aten;
use super::{Args, Registry};
use crate::values::{IValue, List, Type};

type R = crate::Result<IValue>;

/// `wait_tensor(tensor)`: `tensor` itself (no collective is pending on it).
fn wait_tensor(a: &mut Args<'_>) -> R {
    Ok(IValue::Tensor(a.any_layout_tensor(0)?))
}

/// `wait_tensors(tensors)`: the same tensors (none has a collective pending); PyTorch
/// refuses an empty list.
fn wait_tensors(a: &mut Args<'_>) -> R {
    let tensors = a.tensor_list(0)?;
    if tensors.is_empty() {
        return Err(invalid_argument(
            a.op,
            "tensors",
            "must hold at least one tensor",
            "an empty list",
        ));
    }
    Ok(IValue::List(List::new(
        Type::Tensor,
        tensors.into_iter().map(IValue::Tensor).collect(),
    )))
}

/// `check_for_nan(tensor)`: PyTorch's error when a floating-point tensor holds a NaN
/// (integer, bool and complex tensors are not checked).
fn check_for_nan(a: &mut Args<'_>) -> R {
    let x = a.tensor(0)?;
    if !x.dtype().is_floating_point() || x.numel() == 0 {
        return Ok(IValue::None);
    }
    let nan = via_aten(a, "aten::isnan", vec![IValue::Tensor(x)])?;
    let any = via_aten(a, "aten::any", vec![nan])?;
    if tensor_of(a, any)?.item()?.to_bool() {
        // (PyTorch: "NaN found in input tensor.")
        return Err(invalid_argument(
            a.op,
            "tensor",
            "must not contain NaN",
            "a NaN",
        ));
    }
    Ok(IValue::None)
}

pub(crate) fn register(r: &mut Registry) {
    r.add("_c10d_functional::wait_tensor", wait_tensor);
    r.add("c10d_functional::wait_tensor", wait_tensor);
    r.add("_c10d_functional::wait_tensors", wait_tensors);
    r.add("c10d::check_for_nan", check_for_nan);
}
