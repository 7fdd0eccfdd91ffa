//! Autograd and forward-AD operators that graphs call on plain tensors: tsrun has no autograd,
//! so a tensor is never a dual number and carries no gradient, and each of these computes what
//! PyTorch computes for such a tensor (`_fw_primal` of a non-dual tensor is the tensor,
//! `_unpack_dual` gives no tangent, `_make_dual` attaches none as under inference mode, the
//! `_no_grad_*` initializers are the plain in-place ops, `retain_grad` only checks the tensor
//! requires grad, `prim::grad` is None). Likewise a tensor is never batched by functorch's
//! vmap: `_remove_batch_dim` expands it to the batch.

use super::kernels::invalid_argument;
use super::prims::via_aten;
use super::{Args, Registry};
use crate::values::{IValue, List, Type};

type R = crate::Result<IValue>;

/// `_fw_primal(self, level)`: `self` (it has no tangent at any level).
fn fw_primal(a: &mut Args<'_>) -> R {
    a.int(1)?;
    Ok(a.tensor(0)?.into())
}

/// `_make_dual(primal, tangent, level)`: `primal` (an alias of it), as PyTorch's kernel under
/// inference mode, which is how tsrun runs: no tensor carries a tangent, so none is attached.
/// (Outside inference mode PyTorch needs a forward-AD level, which scripted code cannot open.)
fn make_dual(a: &mut Args<'_>) -> R {
    a.tensor(1)?;
    a.int(2)?;
    Ok(a.tensor(0)?.into())
}

/// `_make_dual_copy(primal, tangent, level)`: a copy of `primal` (`_make_dual`, cloned).
fn make_dual_copy(a: &mut Args<'_>) -> R {
    a.tensor(1)?;
    a.int(2)?;
    Ok(a.tensor(0)?.deep_clone()?.into())
}

/// `_fw_primal_copy(self, level)`: a copy of `self` (`_fw_primal`, cloned).
fn fw_primal_copy(a: &mut Args<'_>) -> R {
    a.int(1)?;
    Ok(a.tensor(0)?.deep_clone()?.into())
}

/// `_unpack_dual(dual, level)`: `(dual, None)`.
fn unpack_dual(a: &mut Args<'_>) -> R {
    a.int(1)?;
    Ok(IValue::tuple(vec![a.tensor(0)?.into(), IValue::None]))
}

/// `prim::grad(a)` (`a.grad`): None, as for a tensor no backward pass has run through in
/// PyTorch; tsrun runs no backward pass and archives save no gradients.
fn grad(a: &mut Args<'_>) -> R {
    a.any_layout_tensor(0)?;
    Ok(IValue::None)
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

/// `retain_grad(self)`: nothing to retain without autograd; PyTorch's check that the tensor
/// requires grad.
fn retain_grad(a: &mut Args<'_>) -> R {
    if !a.tensor(0)?.requires_grad() {
        return Err(invalid_argument(
            a.op,
            "self",
            "must require grad",
            "a tensor with requires_grad=False",
        ));
    }
    Ok(IValue::None)
}

/// `_remove_batch_dim(self, level, batch_size, out_dim)` of a tensor that is not batched at
/// `level` (no tensor is in tsrun): `self.expand(sizes with batch_size inserted at out_dim)`.
fn remove_batch_dim(a: &mut Args<'_>) -> R {
    let x = a.tensor(0)?;
    a.int(1)?;
    let (batch, out_dim) = (a.int(2)?, a.int(3)?);
    let at = usize::try_from(out_dim)
        .ok()
        .filter(|&d| d <= x.dim())
        .ok_or_else(|| {
            invalid_argument(
                a.op,
                "out_dim",
                format!(
                    "must be in [0, {}] (PyTorch inserts the batch there unchecked)",
                    x.dim()
                ),
                out_dim,
            )
        })?;
    let mut sizes: Vec<IValue> = x.shape().iter().map(|&n| IValue::Int(n as i64)).collect();
    sizes.insert(at, IValue::Int(batch));
    let args = vec![
        IValue::Tensor(x),
        IValue::List(List::new(Type::Int, sizes)),
        IValue::Bool(false),
    ];
    via_aten(a, "aten::expand", args)
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::retain_grad", retain_grad);
    r.add("aten::_remove_batch_dim", remove_batch_dim);
    r.add("aten::_fw_primal", fw_primal);
    r.add("aten::_unpack_dual", unpack_dual);
    r.add("aten::_make_dual", make_dual);
    r.add("aten::_make_dual_copy", make_dual_copy);
    r.add("aten::_fw_primal_copy", fw_primal_copy);
    r.add("prim::grad", grad);
    r.add("aten::_grad_sum_to_size", grad_sum_to_size);
    r.add("aten::_no_grad_fill_", no_grad_fill_);
    r.add("aten::_no_grad_zero_", no_grad_zero_);
}
