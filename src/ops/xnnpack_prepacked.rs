//! `prepacked::*_clamp_prepack` / `*_clamp_run`: the XNNPACK contexts `optimize_for_mobile`
//! inserts for linear layers and 2-D (transposed) convolutions, with the following `relu` /
//! `hardtanh` folded into a clamp (torch/csrc/jit/passes/xnnpack_rewrite.cpp). Mobile archives
//! (`.ptl` and `.pt` files Android apps ship) hold the contexts as constants: torchbind objects
//! `__torch__.torch.classes.xnnpack.{LinearOpContext, Conv2dOpContext,
//! TransposeConv2dOpContext}` whose pickled state is what `__setstate__` reads
//! (aten/src/ATen/native/xnnpack/RegisterOpContextClass.cpp):
//! - linear: `(weight, bias, output_min, output_max)`;
//! - conv2d: `(weight, bias, stride, padding, dilation, groups, output_min, output_max)`;
//! - transposed: `(weight, bias, stride, padding, output_padding, dilation, groups, output_min,
//!   output_max)`.
//!
//! The weights are the original (unpacked) ones, so a run is the ATen operation on them followed
//! by the clamp. PyTorch builds without XNNPACK (the oracle tsrun is tested against is one) do
//! not register these operators: their schemas come from fixtures/schemas_xnnpack.txt.

use super::kernels::{check_rank, invalid_argument, value_err, wrong_dtype};
use super::prims::via_aten;
use super::{Args, Registry};
use crate::tensor::{DType, RankRequirement};
use crate::values::{IValue, List, Object, Tuple, Type};
use indexmap::IndexMap;

type R = crate::Result<IValue>;

const LINEAR_CLASS: &str = "__torch__.torch.classes.xnnpack.LinearOpContext";
const CONV2D_CLASS: &str = "__torch__.torch.classes.xnnpack.Conv2dOpContext";
const TRANSPOSE_CONV2D_CLASS: &str = "__torch__.torch.classes.xnnpack.TransposeConv2dOpContext";

fn ints(v: &[i64]) -> IValue {
    IValue::List(List::new(
        Type::Int,
        v.iter().map(|&x| IValue::Int(x)).collect(),
    ))
}

/// An `int[2]` parameter as XNNPACK expands it: one value for both dims, or two.
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

/// A clamp bound (`Scalar?`) as the context stores it: None, or the number.
fn bound(a: &Args<'_>, i: usize) -> crate::Result<IValue> {
    Ok(match a.opt_double(i)? {
        Some(v) => IValue::Double(v),
        None => IValue::None,
    })
}

fn float_weight(op: &str, w: &crate::tensor::Tensor, rank: usize) -> crate::Result<()> {
    if w.dtype() != DType::Float32 {
        return Err(wrong_dtype(op, "W", "float32", w.dtype()));
    }
    check_rank(op, "W", RankRequirement::Exactly(rank), w.shape())
}

fn context(class: &str, state: Vec<IValue>) -> IValue {
    let ctx = Object::new(class.into(), IndexMap::new());
    ctx.set_state(IValue::Tuple(Tuple::new(state)));
    IValue::Object(ctx)
}

/// linear_clamp_prepack(W, B=None, output_min=None, output_max=None) -> LinearOpContext
fn linear_clamp_prepack(a: &mut Args<'_>) -> R {
    let op = a.op;
    let (w, b) = (a.tensor(0)?, a.opt_tensor(1)?);
    float_weight(op, &w, 2)?;
    let state = vec![
        IValue::Tensor(w),
        b.map_or(IValue::None, IValue::Tensor),
        bound(a, 2)?,
        bound(a, 3)?,
    ];
    Ok(context(LINEAR_CLASS, state))
}

/// conv2d_clamp_prepack(W, B, stride, padding, dilation, groups, output_min, output_max)
fn conv2d_clamp_prepack(a: &mut Args<'_>) -> R {
    conv_clamp_prepack(a, CONV2D_CLASS, &["stride", "padding", "dilation"])
}

/// conv2d_transpose_clamp_prepack(W, B, stride, padding, output_padding, dilation, groups,
/// output_min, output_max)
fn conv2d_transpose_clamp_prepack(a: &mut Args<'_>) -> R {
    let geometry = ["stride", "padding", "output_padding", "dilation"];
    conv_clamp_prepack(a, TRANSPOSE_CONV2D_CLASS, &geometry)
}

/// A convolution context of `class`: `(W, B, <geometry pairs in order>, groups, output_min,
/// output_max)`, its state in the same order.
fn conv_clamp_prepack(a: &mut Args<'_>, class: &str, geometry: &[&str]) -> R {
    let op = a.op;
    let (w, b) = (a.tensor(0)?, a.opt_tensor(1)?);
    float_weight(op, &w, 4)?;
    let groups_at = 2 + geometry.len();
    let groups = a.int(groups_at)?;
    if groups < 1 {
        return Err(invalid_argument(op, "groups", "must be >= 1", groups));
    }
    let mut state = vec![IValue::Tensor(w), b.map_or(IValue::None, IValue::Tensor)];
    for (i, name) in geometry.iter().enumerate() {
        state.push(pair(op, name, a.int_list(2 + i)?)?);
    }
    state.push(IValue::Int(groups));
    state.push(bound(a, groups_at + 1)?);
    state.push(bound(a, groups_at + 2)?);
    Ok(context(class, state))
}

/// The state of the context argument `W_prepack`, checked to be a `class` object holding
/// `len` values.
fn context_state(a: &Args<'_>, class: &str, len: usize, layout: &str) -> crate::Result<Tuple> {
    let op = a.op;
    let ctx = match a.get(1)? {
        IValue::Object(o) if &**o.class_name() == class => o.clone(),
        other => {
            return Err(invalid_argument(
                op,
                "W_prepack",
                format!("must be a {class}"),
                format!("a {}", other.kind_name()),
            ))
        }
    };
    match ctx.state() {
        Some(IValue::Tuple(state)) if state.items().len() == len => Ok(state),
        _ => Err(value_err(format!(
            "{op}: the context's state is not {layout}"
        ))),
    }
}

/// A float32 input of `rank` dims (XNNPACK's kernels take nothing else).
fn float_input(a: &Args<'_>, rank: Option<usize>) -> crate::Result<crate::tensor::Tensor> {
    let x = a.tensor(0)?;
    if x.dtype() != DType::Float32 {
        return Err(wrong_dtype(a.op, "X", "float32", x.dtype()));
    }
    if let Some(rank) = rank {
        check_rank(a.op, "X", RankRequirement::Exactly(rank), x.shape())?;
    }
    Ok(x)
}

/// `y` clamped to the context's bounds (an absent bound leaves that side open).
fn clamped(a: &Args<'_>, y: IValue, min: &IValue, max: &IValue) -> R {
    let number = |v: &IValue| match v {
        IValue::Int(i) => Ok(IValue::Double(*i as f64)),
        IValue::Double(_) | IValue::None => Ok(v.clone()),
        other => Err(value_err(format!(
            "{}: the context's clamp bound is a {}, not a number",
            a.op,
            other.kind_name()
        ))),
    };
    let (min, max) = (number(min)?, number(max)?);
    if matches!((&min, &max), (IValue::None, IValue::None)) {
        return Ok(y);
    }
    via_aten(a, "aten::clamp", vec![y, min, max])
}

/// What a `*_clamp_run` op computes from its context: the ATen op its XNNPACK kernel stands
/// for, called on `X` and the state's values at `args` (the state ends with the two clamp
/// bounds).
struct ClampRun {
    class: &'static str,
    /// The state's fields, for the error on a malformed context.
    layout: &'static str,
    len: usize,
    aten: &'static str,
    /// The state positions passed after `X`, in the ATen op's order.
    args: &'static [usize],
    /// The input's rank, where the kernel takes only one.
    rank: Option<usize>,
}

/// linear_clamp_run(X, W_prepack) -> clamp(linear(X, W, B), output_min, output_max)
const LINEAR_RUN: ClampRun = ClampRun {
    class: LINEAR_CLASS,
    layout: "(weight, bias, output_min, output_max)",
    len: 4,
    aten: "aten::linear",
    args: &[0, 1],
    rank: None,
};

/// conv2d_clamp_run(X, W_prepack) -> clamp(conv2d(X, ...), output_min, output_max)
const CONV2D_RUN: ClampRun = ClampRun {
    class: CONV2D_CLASS,
    layout: "(weight, bias, stride, padding, dilation, groups, output_min, output_max)",
    len: 8,
    aten: "aten::conv2d",
    args: &[0, 1, 2, 3, 4, 5],
    rank: Some(4),
};

/// conv2d_transpose_clamp_run(X, W_prepack) -> clamp(conv_transpose2d(X, ...), min, max):
/// the context holds dilation before groups, ATen takes groups first.
const TRANSPOSE_CONV2D_RUN: ClampRun = ClampRun {
    class: TRANSPOSE_CONV2D_CLASS,
    layout:
        "(weight, bias, stride, padding, output_padding, dilation, groups, output_min, output_max)",
    len: 9,
    aten: "aten::conv_transpose2d.input",
    args: &[0, 1, 2, 3, 4, 6, 5],
    rank: Some(4),
};

fn clamp_run(a: &mut Args<'_>, run: &ClampRun) -> R {
    let state = context_state(a, run.class, run.len, run.layout)?;
    let items = state.items();
    let (Some(min), Some(max)) = (items.get(run.len - 2), items.get(run.len - 1)) else {
        return Err(value_err(format!("{}: malformed context", a.op)));
    };
    let x = float_input(a, run.rank)?;
    let mut args = vec![IValue::Tensor(x)];
    for &i in run.args {
        let Some(v) = items.get(i) else {
            return Err(value_err(format!("{}: malformed context", a.op)));
        };
        args.push(v.clone());
    }
    let y = via_aten(a, run.aten, args)?;
    clamped(a, y, min, max)
}

pub(crate) fn register(r: &mut Registry) {
    r.add("prepacked::linear_clamp_prepack", linear_clamp_prepack);
    r.add("prepacked::linear_clamp_run", |a| clamp_run(a, &LINEAR_RUN));
    r.add("prepacked::conv2d_clamp_prepack", conv2d_clamp_prepack);
    r.add("prepacked::conv2d_clamp_run", |a| clamp_run(a, &CONV2D_RUN));
    r.add(
        "prepacked::conv2d_transpose_clamp_prepack",
        conv2d_transpose_clamp_prepack,
    );
    r.add("prepacked::conv2d_transpose_clamp_run", |a| {
        clamp_run(a, &TRANSPOSE_CONV2D_RUN)
    });
}
