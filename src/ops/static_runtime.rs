//! The `static_runtime::` operators: PyTorch's Static Runtime rewrites graphs to use them (out-
//! variant copies of views, fused patterns, variadic unpacks; torch/csrc/jit/runtime/static/
//! passes.cpp), and a graph saved after those passes carries them. Each is defined there as the
//! aten computation it replaces, so each kernel here runs that computation through the aten
//! kernels. `fused_equally_split` and `expand_dims_copy` replace internal (fbcode) operators whose
//! definitions are not public: they have no kernel.

use super::kernels::{invalid_argument, value_err};
use super::prims::via_aten;
use super::{Args, Registry};
use crate::tensor::{DType, Tensor};
use crate::values::{IValue, List, Type};

type R = crate::Result<IValue>;

/// The argument `i` as passed (for handing it on to an aten kernel).
fn arg(a: &Args<'_>, i: usize) -> crate::Result<IValue> {
    a.get(i).cloned()
}

/// A view operator's result copied into storage of its own (`permute_copy` and friends are the
/// out variants of views: same values, never aliasing the input).
fn copied(r: IValue) -> R {
    match r {
        IValue::Tensor(t) => Ok(t.deep_clone()?.into()),
        other => Ok(other),
    }
}

/// Several results of a variadic operator: one value for one result (the interpreter assigns a
/// single-output node's value as is), else a tuple spread over the node's outputs.
fn results(mut items: Vec<IValue>) -> IValue {
    if items.len() == 1 {
        items.pop().unwrap_or_default()
    } else {
        IValue::tuple(items)
    }
}

fn permute_copy(a: &mut Args<'_>) -> R {
    copied(via_aten(a, "aten::permute", vec![arg(a, 0)?, arg(a, 1)?])?)
}

fn reshape_copy(a: &mut Args<'_>) -> R {
    copied(via_aten(a, "aten::reshape", vec![arg(a, 0)?, arg(a, 1)?])?)
}

fn flatten_copy(a: &mut Args<'_>) -> R {
    let args = vec![arg(a, 0)?, arg(a, 1)?, arg(a, 2)?];
    copied(via_aten(a, "aten::flatten.using_ints", args)?)
}

/// `sign(x) * log1p(abs(x))`: the pattern FuseSignLog1P replaces, computed the same way.
fn signed_log1p(a: &mut Args<'_>) -> R {
    let x = arg(a, 0)?;
    let sign = via_aten(a, "aten::sign", vec![x.clone()])?;
    let abs = via_aten(a, "aten::abs", vec![x])?;
    let log = via_aten(a, "aten::log1p", vec![abs])?;
    via_aten(a, "aten::mul.Tensor", vec![sign, log])
}

/// `nan_to_num(clamp(input, min, max), nan)`: Static Runtime requires both bounds (constants in
/// the graph) and leaves infinities to the clamp.
fn clamp_nan_to_num(a: &mut Args<'_>) -> R {
    if a.is_none(1) || a.is_none(2) {
        return Err(invalid_argument(
            "static_runtime::clamp_nan_to_num",
            "min and max",
            "must both be given",
            format!("{:?} and {:?}", a.get(1)?, a.get(2)?),
        ));
    }
    // Static Runtime reads the bounds as float
    let (lo, hi) = (a.scalar(1)?.to_f64() as f32, a.scalar(2)?.to_f64() as f32);
    let clamped = via_aten(
        a,
        "aten::clamp",
        vec![
            arg(a, 0)?,
            IValue::Double(lo as f64),
            IValue::Double(hi as f64),
        ],
    )?;
    via_aten(
        a,
        "aten::nan_to_num",
        vec![clamped, arg(a, 3)?, IValue::None, IValue::None],
    )
}

/// `native_layer_norm` with the mean and reciprocal standard deviation flattened to one value
/// per normalized row, as Static Runtime's layer_norm_cpu_out writes them.
fn layer_norm(a: &mut Args<'_>) -> R {
    let args = (0..5)
        .map(|i| arg(a, i))
        .collect::<crate::Result<Vec<_>>>()?;
    let r = via_aten(a, "aten::native_layer_norm", args)?;
    let IValue::Tuple(parts) = r else {
        return Err(value_err(
            "static_runtime::layer_norm: expected three results",
        ));
    };
    let [out, mean, rstd] = parts.items() else {
        return Err(value_err(
            "static_runtime::layer_norm: expected three results",
        ));
    };
    let flat = |v: &IValue| -> R {
        let t = v
            .as_tensor()
            .ok_or_else(|| value_err("static_runtime::layer_norm: tensor results"))?;
        let rows = IValue::List(List::new(Type::Int, vec![IValue::Int(t.numel() as i64)]));
        via_aten(a, "aten::reshape", vec![v.clone(), rows])
    };
    Ok(IValue::tuple(vec![out.clone(), flat(mean)?, flat(rstd)?]))
}

/// `aten::embedding_bag` without its last result (max_indices), which RemoveUnnecessaryOutputs
/// drops when nothing reads it.
fn embedding_bag<const PADDING_IDX: bool>(a: &mut Args<'_>) -> R {
    let n = if PADDING_IDX { 9 } else { 8 };
    let args = (0..n)
        .map(|i| arg(a, i))
        .collect::<crate::Result<Vec<_>>>()?;
    let name = if PADDING_IDX {
        "aten::embedding_bag.padding_idx"
    } else {
        "aten::embedding_bag"
    };
    match via_aten(a, name, args)? {
        IValue::Tuple(t) if t.items().len() == 4 => Ok(IValue::tuple(t.items()[..3].to_vec())),
        other => Err(invalid_argument(
            "static_runtime::embedding_bag",
            "the result of aten::embedding_bag",
            "must be a tuple of four",
            other.kind_name(),
        )),
    }
}

// The three argument forms of to_copy / to_maybe_copy_out (`aten::to` overloads of these names).
const TO_PRIM_DTYPE: u8 = 0;
const TO_DTYPE: u8 = 1;
const TO_OTHER: u8 = 2;

/// The dtype `to` converts to: the argument's or `other`'s; None for prim_dtype given None.
fn to_target(a: &Args<'_>, form: u8) -> crate::Result<Option<DType>> {
    Ok(match form {
        TO_OTHER => Some(a.tensor(1)?.dtype()),
        TO_DTYPE => Some(a.dtype(1)?),
        _ => a.opt_dtype(1)?,
    })
}

/// The dtype of the copy: Static Runtime allocates it with `empty_cpu(sizes, dtype)`, so a
/// prim_dtype `None` is the default dtype (float), not self's.
fn copy_dtype(a: &Args<'_>, form: u8) -> crate::Result<DType> {
    Ok(to_target(a, form)?.unwrap_or(DType::Float32))
}

/// Whether `to` must copy: `copy=True`, another dtype, or a memory format the tensor's strides
/// do not already have (Static Runtime's to_will_alias).
fn to_copies(a: &mut Args<'_>, form: u8, x: &Tensor) -> crate::Result<bool> {
    // a None dtype keeps self's
    if a.bool(3)? || to_target(a, form)?.is_some_and(|d| d != x.dtype()) {
        return Ok(true);
    }
    // MemoryFormat codes: Contiguous 0, Preserve 1, ChannelsLast 2, ChannelsLast3d 3
    match (form, a.len() > 4) {
        (TO_PRIM_DTYPE, _) | (_, false) => Ok(false),
        _ => match a.opt_int(4)? {
            None | Some(1) => Ok(false),
            Some(fmt) => {
                let r = via_aten(
                    a,
                    "aten::is_contiguous.memory_format",
                    vec![IValue::Tensor(x.clone()), IValue::Int(fmt)],
                )?;
                Ok(!matches!(r, IValue::Bool(true)))
            }
        },
    }
}

/// `to` that always copies (Static Runtime's out variant of `aten::to`).
fn to_copy<const FORM: u8>(a: &mut Args<'_>) -> R {
    let x = a.tensor(0)?;
    Ok(x.to_dtype(copy_dtype(a, FORM)?)?.deep_clone()?.into())
}

/// `(result, copied)`: `self` and false where `to` would return `self` itself, else the
/// converted copy and true.
fn to_maybe_copy_out<const FORM: u8>(a: &mut Args<'_>) -> R {
    let x = a.tensor(0)?;
    if !to_copies(a, FORM, &x)? {
        return Ok(IValue::tuple(vec![x.into(), IValue::Bool(false)]));
    }
    let out = x.to_dtype(copy_dtype(a, FORM)?)?.deep_clone()?;
    Ok(IValue::tuple(vec![out.into(), IValue::Bool(true)]))
}

fn dequantize_copy(a: &mut Args<'_>) -> R {
    copied(via_aten(a, "aten::dequantize.self", vec![arg(a, 0)?])?)
}

/// `use_b ? b : a`.
fn select_tensor(a: &mut Args<'_>) -> R {
    let pick = if a.bool(2)? { 1 } else { 0 };
    Ok(a.tensor(pick)?.into())
}

/// Its inputs, unchanged (Static Runtime inserts it so that a graph output it does not own gets
/// a value it does).
fn create_owned_ref(a: &mut Args<'_>) -> R {
    let items = (0..a.len())
        .map(|i| arg(a, i))
        .collect::<crate::Result<Vec<_>>>()?;
    Ok(results(items))
}

/// The elements of every input tuple, in order.
fn var_tuple_unpack(a: &mut Args<'_>) -> R {
    let mut items = Vec::new();
    for i in 0..a.len() {
        match a.get(i)? {
            IValue::Tuple(t) => items.extend(t.items().iter().cloned()),
            other => {
                return Err(invalid_argument(
                    "static_runtime::VarTupleUnpack",
                    format!("input {i}"),
                    "must be a tuple",
                    other.kind_name(),
                ))
            }
        }
    }
    Ok(results(items))
}

/// `dict_unpack(dict, *keys)`: the value of each key.
fn dict_unpack(a: &mut Args<'_>) -> R {
    let IValue::Dict(d) = a.get(0)? else {
        return Err(invalid_argument(
            "static_runtime::dict_unpack",
            "input 0",
            "must be a dict",
            a.get(0)?.kind_name(),
        ));
    };
    let d = d.clone();
    let mut items = Vec::with_capacity(a.len().saturating_sub(1));
    for i in 1..a.len() {
        let key = a.get(i)?;
        let v = d.get(key).ok_or_else(|| {
            invalid_argument(
                "static_runtime::dict_unpack",
                format!("key {i}"),
                "must be in the dict",
                format!("{key:?}"),
            )
        })?;

        items.push(v);
    }
    Ok(results(items))
}

pub(crate) fn register(r: &mut Registry) {
    r.add("static_runtime::permute_copy", permute_copy);
    r.add("static_runtime::reshape_copy", reshape_copy);
    r.add("static_runtime::flatten_copy.using_ints", flatten_copy);
    r.add("static_runtime::signed_log1p", signed_log1p);
    r.add("static_runtime::clamp_nan_to_num", clamp_nan_to_num);
    r.add("static_runtime::layer_norm", layer_norm);
    r.add("static_runtime::embedding_bag", embedding_bag::<false>);
    r.add(
        "static_runtime::embedding_bag.padding_idx",
        embedding_bag::<true>,
    );
    r.add(
        "static_runtime::to_copy.prim_dtype",
        to_copy::<TO_PRIM_DTYPE>,
    );
    r.add("static_runtime::to_copy.dtype", to_copy::<TO_DTYPE>);
    r.add("static_runtime::to_copy.other", to_copy::<TO_OTHER>);
    r.add(
        "static_runtime::to_maybe_copy_out.prim_dtype",
        to_maybe_copy_out::<TO_PRIM_DTYPE>,
    );
    r.add(
        "static_runtime::to_maybe_copy_out.dtype",
        to_maybe_copy_out::<TO_DTYPE>,
    );
    r.add(
        "static_runtime::to_maybe_copy_out.other",
        to_maybe_copy_out::<TO_OTHER>,
    );
    r.add("static_runtime::dequantize_copy.self", dequantize_copy);
    r.add("static_runtime::select_tensor", select_tensor);
    r.add("static_runtime::create_owned_ref", create_owned_ref);
    r.add("static_runtime::VarTupleUnpack", var_tuple_unpack);
    r.add("static_runtime::dict_unpack", dict_unpack);
}
