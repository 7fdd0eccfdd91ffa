//! Autograd and forward-AD operators that graphs call on plain tensors: tsrun has no autograd,
//! so a tensor is never a dual number and carries no gradient, and each of these computes what
//! PyTorch computes for such a tensor (`_fw_primal` of a non-dual tensor is the tensor,
//! `_unpack_dual` gives no tangent, the `_no_grad_*` initializers are the plain in-place ops).

use super::prims::via_aten;
use super::{Args, Registry};
use crate::values::IValue;

type R = crate::Result<IValue>;

/// `_fw_primal(self, level)`: `self` (it has no tangent at any level).
fn fw_primal(a: &mut Args<'_>) -> R {
    a.int(1)?;
    Ok(a.tensor(0)?.into())
}

/// `_unpack_dual(dual, level)`: `(dual, None)`.
fn unpack_dual(a: &mut Args<'_>) -> R {
    a.int(1)?;
    Ok(IValue::tuple(vec![a.tensor(0)?.into(), IValue::None]))
}

/// `_grad_sum_to_size(self, size)`: `self` for None, else `sum_to_size(self, size)`.
fn grad_sum_to_size(a: &mut Args<'_>) -> R {
    if a.is_none(1) {
        return Ok(a.tensor(0)?.into());
    }
    let args = vec![a.get(0)?.clone(), a.get(1)?.clone()];
    via_aten(a, "aten::sum_to_size", args)
}

/// `_no_grad_fill_(tensor, val)`: `fill_`.
fn no_grad_fill_(a: &mut Args<'_>) -> R {
    let args = vec![a.get(0)?.clone(), IValue::Double(a.double(1)?)];
    via_aten(a, "aten::fill_.Scalar", args)
}

/// `_no_grad_zero_(tensor)`: `zero_`.
fn no_grad_zero_(a: &mut Args<'_>) -> R {
    let args = vec![a.get(0)?.clone()];
    via_aten(a, "aten::zero_", args)
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::_fw_primal", fw_primal);
    r.add("aten::_unpack_dual", unpack_dual);
    r.add("aten::_grad_sum_to_size", grad_sum_to_size);
    r.add("aten::_no_grad_fill_", no_grad_fill_);
    r.add("aten::_no_grad_zero_", no_grad_zero_);
}
