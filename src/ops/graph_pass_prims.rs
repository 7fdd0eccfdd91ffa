//! `prim::` operators that PyTorch's graph passes insert (the autograd and fusion passes, the
//! MKLDNN conversion of frozen modules, the variadic-op rewrites) and that keep a meaning in a
//! plain interpreter: each computes what its registration in torch/csrc/jit/runtime/
//! register_prim_ops*.cpp or passes/frozen_ops_to_mkldnn.cpp computes. A tensor "undefined" in
//! PyTorch's graphs (`prim::AutogradZero`) is `None` here. The ones that read node attributes
//! (`ConstantChunk`, `MKLDNNClamp`, `TypeCheck`, ...) or run subgraphs have no kernel.

use super::kernels::value_err;
use super::prims::via_aten;
use super::{Args, Registry};
use crate::ops::kernels::invalid_argument;
use crate::tensor::TensorError;
use crate::values::{IValue, List, Type};

type R = crate::Result<IValue>;

fn arg(a: &Args<'_>, i: usize) -> crate::Result<IValue> {
    a.get(i).cloned()
}

/// Whether a graph value is a defined tensor (`None` is the undefined one).
fn defined(v: &IValue, op: &str) -> crate::Result<bool> {
    match v {
        IValue::None => Ok(false),
        IValue::Tensor(_) => Ok(true),
        other => Err(invalid_argument(
            op,
            "the value",
            "must be a tensor or None",
            other.kind_name(),
        )),
    }
}

/// `prim::AutogradZero()`: the undefined tensor.
fn autograd_zero(_: &mut Args<'_>) -> R {
    Ok(IValue::None)
}

/// `prim::AutogradAdd(a, b)`: `a + b`, an undefined operand being zero.
fn autograd_add(a: &mut Args<'_>) -> R {
    let (x, y) = (arg(a, 0)?, arg(a, 1)?);
    match (
        defined(&x, "prim::AutogradAdd")?,
        defined(&y, "prim::AutogradAdd")?,
    ) {
        (false, _) => Ok(y),
        (true, false) => Ok(x),
        (true, true) => via_aten(a, "aten::add.Tensor", vec![x, y, IValue::Int(1)]),
    }
}

/// `prim::AutogradAnyNonZero(...)`: whether any input tensor (or tensor in an input list) is
/// defined.
fn autograd_any_non_zero(a: &mut Args<'_>) -> R {
    for i in 0..a.len() {
        let any = match a.get(i)? {
            IValue::List(l) => l
                .to_vec()
                .iter()
                .map(|v| defined(v, "prim::AutogradAnyNonZero"))
                .collect::<crate::Result<Vec<bool>>>()?
                .contains(&true),
            v => defined(v, "prim::AutogradAnyNonZero")?,
        };
        if any {
            return Ok(IValue::Bool(true));
        }
    }
    Ok(IValue::Bool(false))
}

/// `prim::AutogradAllZero(...)` (`WANT_DEFINED` false) / `AutogradAllNonZero(...)` (true):
/// whether every input tensor is undefined / defined.
fn autograd_all<const WANT_DEFINED: bool>(a: &mut Args<'_>) -> R {
    for i in 0..a.len() {
        if defined(a.get(i)?, "prim::AutogradAll")? != WANT_DEFINED {
            return Ok(IValue::Bool(false));
        }
    }
    Ok(IValue::Bool(true))
}

/// `prim::BroadcastSizes(*sizes)`: the broadcast of every input shape.
fn broadcast_sizes(a: &mut Args<'_>) -> R {
    let mut shape: Vec<usize> = Vec::new();
    for i in 0..a.len() {
        let next = a
            .int_list(i)?
            .into_iter()
            .map(|d| {
                usize::try_from(d)
                    .map_err(|_| invalid_argument(a.op, "a size", "must be non-negative", d))
            })
            .collect::<crate::Result<Vec<usize>>>()?;
        shape = crate::tensor::broadcast_shapes(&shape, &next)?.to_vec();
    }
    Ok(int_list(shape.into_iter().map(|d| d as i64)))
}

fn int_list(v: impl IntoIterator<Item = i64>) -> IValue {
    IValue::List(List::new(
        Type::Int,
        v.into_iter().map(IValue::Int).collect(),
    ))
}

/// `prim::ReductionSizes(size, red_axes, keepdim)`: the shape a reduction over `red_axes`
/// leaves (the axes are not wrapped: the pass that inserts it writes them non-negative).
fn reduction_sizes(a: &mut Args<'_>) -> R {
    let mut size = a.int_list(0)?;
    let mut axes = a.int_list(1)?;
    let keepdim = a.bool(2)?;
    let index = |axis: i64, len: usize| {
        usize::try_from(axis)
            .ok()
            .filter(|&i| i < len)
            .ok_or(TensorError::DimOutOfRange {
                dim: axis,
                ndim: len,
            })
    };
    if keepdim {
        for &axis in &axes {
            let i = index(axis, size.len())?;
            size[i] = 1;
        }
        return Ok(int_list(size));
    }
    axes.sort_unstable();
    axes.dedup();
    for &axis in axes.iter().rev() {
        let i = index(axis, size.len())?;
        size.remove(i);
    }
    Ok(int_list(size))
}

/// `prim::VarConcat(*tensors, dim)`: `cat(tensors, dim)`.
fn var_concat(a: &mut Args<'_>) -> R {
    variadic_join(a, "aten::cat")
}

/// `prim::VarStack(*tensors, dim)`: `stack(tensors, dim)`.
fn var_stack(a: &mut Args<'_>) -> R {
    variadic_join(a, "aten::stack")
}

fn variadic_join(a: &Args<'_>, aten: &str) -> R {
    let n = a.len();
    if n < 2 {
        return Err(invalid_argument(
            a.op,
            "the number of arguments (tensors and a dim)",
            "must be at least 2",
            n,
        ));
    }
    let tensors = (0..n - 1)
        .map(|i| a.tensor(i).map(IValue::Tensor))
        .collect::<crate::Result<Vec<_>>>()?;
    let list = IValue::List(List::new(Type::Tensor, tensors));
    via_aten(a, aten, vec![list, arg(a, n - 1)?])
}

/// `prim::id(x)`: 0 for None, else the object's identity (its address, as in PyTorch).
fn id(a: &mut Args<'_>) -> R {
    match a.get(0)? {
        IValue::None => Ok(IValue::Int(0)),
        IValue::Object(o) => Ok(IValue::Int(std::sync::Arc::as_ptr(&o.0) as usize as i64)),
        other => Err(invalid_argument(
            "prim::id",
            "the value",
            "must be an object or None",
            other.kind_name(),
        )),
    }
}

/// `prim::AddStatValue(key, val)`: records a statistic with the JIT's logger, which by default
/// discards it; tsrun has no logger, so nothing is recorded.
fn add_stat_value(a: &mut Args<'_>) -> R {
    a.str(0)?;
    a.int(1)?;
    Ok(IValue::None)
}

/// `prim::IgnoredPythonOp`: a call of a `@torch.jit.ignore`d function, which PyTorch refuses to run
/// outside Python.
fn ignored_python_op(_: &mut Args<'_>) -> R {
    Err(value_err(
        "This Python function is annotated to be ignored and cannot be and has not been \
         included in the exported binary, meaning that it cannot be executed now. Make sure \
         that ignored operations are never executed after import",
    ))
}

// The MKLDNN ops of a frozen module converted by ConvertFrozenOpsToMKLDNN compute the aten op
// they replace (on MKLDNN tensors there; tsrun has one layout).

fn mkldnn_hardswish(a: &mut Args<'_>) -> R {
    via_aten(a, "aten::hardswish", vec![arg(a, 0)?])
}
fn mkldnn_hardswish_(a: &mut Args<'_>) -> R {
    via_aten(a, "aten::hardswish_", vec![arg(a, 0)?])
}
fn mkldnn_hardsigmoid(a: &mut Args<'_>) -> R {
    via_aten(a, "aten::hardsigmoid", vec![arg(a, 0)?])
}
fn mkldnn_hardsigmoid_(a: &mut Args<'_>) -> R {
    via_aten(a, "aten::hardsigmoid_", vec![arg(a, 0)?])
}
fn mkldnn_scalar_mul(a: &mut Args<'_>) -> R {
    via_aten(a, "aten::mul.Scalar", vec![arg(a, 0)?, arg(a, 1)?])
}
fn mkldnn_scalar_mul_(a: &mut Args<'_>) -> R {
    via_aten(a, "aten::mul_.Scalar", vec![arg(a, 0)?, arg(a, 1)?])
}

/// `prim::MKLDNNLayerNorm`: `layer_norm`; PyTorch's requires the weight and bias.
fn mkldnn_layer_norm(a: &mut Args<'_>) -> R {
    for (i, name) in [(2, "weight"), (3, "bias")] {
        if a.is_none(i) {
            return Err(invalid_argument(a.op, name, "must be a tensor", "None"));
        }
    }
    let args = (0..6)
        .map(|i| arg(a, i))
        .collect::<crate::Result<Vec<_>>>()?;
    via_aten(a, "aten::layer_norm", args)
}

/// `prim::MKLDNNLayerNorm_`: the layer norm written into the input.
fn mkldnn_layer_norm_(a: &mut Args<'_>) -> R {
    let x = a.tensor(0)?;
    let normed = mkldnn_layer_norm(a)?;
    let normed = normed
        .as_tensor()
        .ok_or_else(|| value_err("prim::MKLDNNLayerNorm_: tensor result"))?;
    x.copy_from(normed)?;
    Ok(x.into())
}

/// `prim::BroadcastMKLDNNTensors(a, b)`: both inputs expanded to their broadcast shape.
fn broadcast_mkldnn_tensors(a: &mut Args<'_>) -> R {
    let list = IValue::List(List::new(
        Type::Tensor,
        vec![IValue::Tensor(a.tensor(0)?), IValue::Tensor(a.tensor(1)?)],
    ));
    match via_aten(a, "aten::broadcast_tensors", vec![list])? {
        IValue::List(l) => Ok(IValue::tuple(
            l.to_vec()
                .into_iter()
                .map(|v| match v {
                    IValue::Tensor(t) => Ok(IValue::Tensor(t.contiguous()?)),
                    other => Ok(other),
                })
                .collect::<crate::Result<Vec<_>>>()?,
        )),
        other => Ok(other),
    }
}

/// `prim::mkldnn_convolution(input, weight, bias, stride, padding, dilation, groups)`: a
/// non-transposed `convolution`.
fn mkldnn_convolution(a: &mut Args<'_>) -> R {
    let spatial = a.int_list(3)?.len();
    let args = vec![
        arg(a, 0)?,
        arg(a, 1)?,
        arg(a, 2)?,
        arg(a, 3)?,
        arg(a, 4)?,
        arg(a, 5)?,
        IValue::Bool(false),
        int_list(std::iter::repeat_n(0, spatial)),
        arg(a, 6)?,
    ];
    via_aten(a, "aten::convolution", args)
}

/// `prim::IfThenElse(cond, x, y)`: `x` when `cond`, else `y` (a branch-free `prim::If`).
fn if_then_else(a: &mut Args<'_>) -> R {
    let pick = if a.bool(0)? { 1 } else { 2 };
    arg(a, pick)
}

/// `prim::MMTreeReduce(lhs_0, .., lhs_n-1, rhs_0, .., rhs_n-1)` (the batch-matmul pass's
/// reduction of a sum of products): `sum_i mm(lhs_i, rhs_i)`.
fn mm_tree_reduce(a: &mut Args<'_>) -> R {
    let n = a.len();
    if n == 0 || !n.is_multiple_of(2) {
        return Err(invalid_argument(
            "prim::MMTreeReduce",
            "the number of matrices",
            "must be even and non-zero",
            n,
        ));
    }
    let side = n / 2;
    let mut acc = via_aten(a, "aten::mm", vec![arg(a, 0)?, arg(a, side)?])?;
    for i in 1..side {
        let product = via_aten(a, "aten::mm", vec![arg(a, i)?, arg(a, side + i)?])?;
        acc = via_aten(a, "aten::add.Tensor", vec![acc, product, IValue::Int(1)])?;
    }
    Ok(acc)
}

pub(crate) fn register(r: &mut Registry) {
    r.add("prim::IfThenElse", if_then_else);
    r.add("prim::MMTreeReduce", mm_tree_reduce);
    r.add("prim::AutogradZero", autograd_zero);
    r.add("prim::AutogradAdd", autograd_add);
    r.add("prim::AutogradAnyNonZero", autograd_any_non_zero);
    r.add("prim::AutogradAllZero", autograd_all::<false>);
    r.add("prim::AutogradAllNonZero", autograd_all::<true>);
    r.add("prim::BroadcastSizes", broadcast_sizes);
    r.add("prim::ReductionSizes", reduction_sizes);
    r.add("prim::VarConcat", var_concat);
    r.add("prim::VarStack", var_stack);
    r.add("prim::id", id);
    r.add("prim::AddStatValue", add_stat_value);
    r.add("prim::IgnoredPythonOp", ignored_python_op);
    r.add("prim::MKLDNNHardSwish", mkldnn_hardswish);
    r.add("prim::MKLDNNHardSwish_", mkldnn_hardswish_);
    r.add("prim::MKLDNNHardSigmoid", mkldnn_hardsigmoid);
    r.add("prim::MKLDNNHardSigmoid_", mkldnn_hardsigmoid_);
    r.add("prim::MKLDNNScalarMul", mkldnn_scalar_mul);
    r.add("prim::MKLDNNScalarMul_", mkldnn_scalar_mul_);
    r.add("prim::MKLDNNLayerNorm", mkldnn_layer_norm);
    r.add("prim::MKLDNNLayerNorm_", mkldnn_layer_norm_);
    r.add("prim::BroadcastMKLDNNTensors", broadcast_mkldnn_tensors);
    r.add("prim::mkldnn_convolution", mkldnn_convolution);
}
