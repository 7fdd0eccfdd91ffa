//! `mkldnn_prepacked::conv2d_prepack` / `conv2d_run`: the oneDNN convolution contexts
//! TorchScript's MKLDNN freezing pass inserts (torch/csrc/jit/passes/mkldnn_rewrite.cpp). The
//! context is a `__torch__.torch.classes.mkldnn.ConvOpContext` torchbind object holding, as
//! PyTorch's `__getstate__` gives it, `(weight, bias, stride, padding, dilation, groups,
//! input_size, "")` (PyTorch's state leaves the fused post-op out: it is an empty string
//! whatever was packed). tsrun keeps the post-op (`none` or `relu`, the two PyTorch fuses) in
//! the object's `attr` field; `conv2d_run` is the convolution followed by that post-op.

use super::kernels::{check_rank, invalid_argument, value_err, wrong_dtype};
use super::prims::via_aten;
use super::{Args, Registry};
use crate::tensor::{DType, RankRequirement};
use crate::values::{IValue, List, Object, Tuple, Type};
use indexmap::IndexMap;

type R = crate::Result<IValue>;

const CONV_CONTEXT_CLASS: &str = "__torch__.torch.classes.mkldnn.ConvOpContext";

/// A 2-D convolution parameter list as oneDNN takes it (one value for both dims, or two),
/// kept as given.
fn pair(op: &str, name: &str, v: Vec<i64>) -> crate::Result<IValue> {
    if !matches!(v.len(), 1 | 2) {
        return Err(invalid_argument(
            op,
            name,
            "must be a single integer or a list of 2 (the convolution dims)",
            format!("{v:?}"),
        ));
    }
    Ok(ints(&v))
}

fn ints(v: &[i64]) -> IValue {
    IValue::List(List::new(
        Type::Int,
        v.iter().map(|&x| IValue::Int(x)).collect(),
    ))
}

/// conv2d_prepack(W, B, stride, padding, dilation, groups, input_size, attr) -> ConvOpContext
fn conv2d_prepack(a: &mut Args<'_>) -> R {
    let op = a.op;
    let (w, b) = (a.tensor(0)?, a.opt_tensor(1)?);
    let stride = pair(op, "stride", a.int_list(2)?)?;
    let padding = pair(op, "padding", a.int_list(3)?)?;
    let dilation = pair(op, "dilation", a.int_list(4)?)?;
    let groups = a.int(5)?;
    let input_size = a.int_list(6)?;
    let attr = a.str(7)?;
    if !matches!(&*attr, "none" | "relu") {
        return Err(invalid_argument(
            op,
            "attr",
            "must be none or relu (the post-ops PyTorch fuses)",
            format!("{attr:?}"),
        ));
    }
    if w.dtype() != DType::Float32 {
        return Err(wrong_dtype(op, "W", "float32", w.dtype()));
    }
    check_rank(op, "W", RankRequirement::Exactly(4), w.shape())?;
    if groups < 1 {
        return Err(invalid_argument(op, "groups", "must be >= 1", groups));
    }
    let state = Tuple::new(vec![
        IValue::Tensor(w),
        b.map_or(IValue::None, IValue::Tensor),
        stride,
        padding,
        dilation,
        IValue::Int(groups),
        ints(&input_size),
        IValue::str(""),
    ]);
    let mut fields = IndexMap::new();
    fields.insert("attr".into(), IValue::String(attr));
    let ctx = Object::new(CONV_CONTEXT_CLASS.into(), fields);
    ctx.set_state(IValue::Tuple(state));
    Ok(IValue::Object(ctx))
}

/// conv2d_run(input, ctx) -> the context's convolution of `input`, then its post-op.
fn conv2d_run(a: &mut Args<'_>) -> R {
    let op = a.op;
    let x = a.tensor(0)?;
    let ctx = match a.get(1)? {
        IValue::Object(o) if &**o.class_name() == CONV_CONTEXT_CLASS => o.clone(),
        other => {
            return Err(invalid_argument(
                op,
                "ctx",
                format!("must be a {CONV_CONTEXT_CLASS}"),
                format!("a {}", other.kind_name()),
            ))
        }
    };
    let Some(IValue::Tuple(state)) = ctx.state() else {
        return Err(value_err(format!("{op}: the context holds no state")));
    };
    let [w, b, stride, padding, dilation, groups, _input_size, _] = state.items() else {
        return Err(value_err(format!(
            "{op}: the context's state is not (weight, bias, stride, padding, dilation, groups, input_size, attr)"
        )));
    };
    let attr = match ctx.fields().get("attr") {
        Some(IValue::String(s)) => s.clone(),
        _ => {
            return Err(value_err(format!(
                "{op}: Fusion behavior undefined. (the context has no post-op)"
            )))
        }
    };
    check_rank(op, "input", RankRequirement::Exactly(4), x.shape())?;
    if x.dtype() != DType::Float32 {
        return Err(wrong_dtype(op, "input", "float32", x.dtype()));
    }
    let y = via_aten(
        a,
        "aten::conv2d",
        vec![
            IValue::Tensor(x),
            w.clone(),
            b.clone(),
            stride.clone(),
            padding.clone(),
            dilation.clone(),
            groups.clone(),
        ],
    )?;
    match &*attr {
        "relu" => via_aten(a, "aten::relu", vec![y]),
        _ => Ok(y),
    }
}

pub(crate) fn register(r: &mut Registry) {
    r.add("mkldnn_prepacked::conv2d_prepack", conv2d_prepack);
    r.add("mkldnn_prepacked::conv2d_run", conv2d_run);
}
