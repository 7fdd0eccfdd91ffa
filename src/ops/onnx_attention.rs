//! `onnx::Attention.opset23`: ONNX's Attention operator as PyTorch implements it for export
//! (torch/onnx/ops/_impl.py, `attention_23`), composed from the aten kernels it calls in the
//! same order: 3-D `[B, S, heads * head]` operands split into heads, the past key and value
//! caches prepended, then either `scaled_dot_product_attention` (no softcap, no custom softmax
//! precision, QK output mode 0, no float mask) or the explicit path: `Q·√scale @ (K·√scale)^T`,
//! the causal or mask bias, the softcap `c·tanh(x/c)`, the softmax (in the ONNX precision given)
//! and the product with V. Returns (output, present_key, present_value, qk_output), qk_output
//! being the scores at the stage `qk_matmul_output_mode` names (0 raw, 1 biased, 2 softcapped,
//! 3 softmaxed).

use super::kernels::{check_rank, invalid_argument};
use super::mkldnn::tensor_of;
use super::prims::via_aten;
use super::{Args, Registry};
use crate::tensor::RankRequirement;
use crate::tensor::{DType, Tensor};
use crate::values::{IValue, List, Tuple, Type};

type R = crate::Result<IValue>;

fn t(x: &Tensor) -> IValue {
    IValue::Tensor(x.clone())
}

fn ints(v: &[i64]) -> IValue {
    IValue::List(List::new(
        Type::Int,
        v.iter().map(|&i| IValue::Int(i)).collect(),
    ))
}

/// Runs the aten kernel `name` on `values`, expecting a tensor.
fn call(a: &Args<'_>, name: &str, values: Vec<IValue>) -> crate::Result<Tensor> {
    tensor_of(a, via_aten(a, name, values)?)
}

fn dim(x: &Tensor, d: usize) -> i64 {
    x.shape().get(d).map_or(0, |&n| n as i64)
}

/// `_reshape_3d_to_4d`: `[B, S, heads * head]` -> `[B, heads, S, head]` (contiguous).
fn split_heads(a: &Args<'_>, x: &Tensor, heads: i64) -> crate::Result<Tensor> {
    let (b, s, hidden) = (dim(x, 0), dim(x, 1), dim(x, 2));
    if heads <= 0 || hidden % heads != 0 {
        return Err(invalid_argument(
            a.op,
            "the number of heads",
            format!("must be positive and divide the hidden size {hidden}"),
            heads,
        ));
    }
    let v = call(
        a,
        "aten::reshape",
        vec![t(x), ints(&[b, s, heads, hidden / heads])],
    )?;
    let v = call(
        a,
        "aten::transpose.int",
        vec![t(&v), IValue::Int(1), IValue::Int(2)],
    )?;
    v.contiguous()
}

/// `torch.cat([past, x], dim=2)`, or a copy of `x` without a cache.
fn with_past(a: &Args<'_>, past: Option<Tensor>, x: &Tensor) -> crate::Result<Tensor> {
    match past {
        Some(p) => call(
            a,
            "aten::cat",
            vec![
                IValue::List(List::new(Type::Tensor, vec![t(&p), t(x)])),
                IValue::Int(2),
            ],
        ),
        None => x.deep_clone(),
    }
}

/// Head `i` of the query reads head `i / (hq / hkv)` of the key: `repeat_interleave` on dim 1.
fn repeat_heads(a: &Args<'_>, x: &Tensor, rep: i64) -> crate::Result<Tensor> {
    if rep == 1 {
        return Ok(x.clone());
    }
    call(
        a,
        "aten::repeat_interleave.self_int",
        vec![t(x), IValue::Int(rep), IValue::Int(1), IValue::None],
    )
}

/// `matmul(q * √scale, (k * √scale)^T)`: PyTorch scales both operands (for range).
fn scaled_scores(a: &Args<'_>, q: &Tensor, k: &Tensor, scale: f64) -> crate::Result<Tensor> {
    if scale < 0.0 {
        return Err(invalid_argument(
            a.op,
            "scale",
            "must be non-negative",
            scale,
        ));
    }
    let root = scale.sqrt();
    let qs = call(a, "aten::mul.Scalar", vec![t(q), IValue::Double(root)])?;
    let ks = call(a, "aten::mul.Scalar", vec![t(k), IValue::Double(root)])?;
    let kt = call(
        a,
        "aten::transpose.int",
        vec![t(&ks), IValue::Int(-2), IValue::Int(-1)],
    )?;
    call(a, "aten::matmul", vec![t(&qs), t(&kt)])
}

/// The dtype `softmax_precision` (an ONNX `TensorProto.DataType` code) names, if it is one of
/// the intermediate precisions PyTorch honours (float, float16, double, bfloat16); any other
/// code leaves the softmax in the scores' dtype.
fn softmax_dtype(code: i64) -> Option<DType> {
    match super::onnx_symbolic::onnx_dtype(code) {
        Some(Ok(d)) if matches!(code, 1 | 10 | 11 | 16) => Some(d),
        _ => None,
    }
}

fn scalar_type(d: DType) -> IValue {
    IValue::Int(d as i64)
}

fn attention_23(a: &mut Args<'_>) -> R {
    let op = a.op;
    let (mut q, mut k, mut v) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
    let mask = a.opt_tensor(3)?;
    let (past_key, past_value) = (a.opt_tensor(4)?, a.opt_tensor(5)?);
    let causal = a.bool(6)?;
    let (kv_heads, q_heads, mode) = (a.int(7)?, a.int(8)?, a.int(9)?);
    let scale = a.opt_double(10)?;
    let softcap = a.double(11)?;
    let precision = a.opt_int(12)?;
    let three_d = q.dim() == 3;
    let (batch, q_len3) = (dim(&q, 0), dim(&q, 1));
    if three_d {
        if q_heads == 0 || kv_heads == 0 {
            return Err(invalid_argument(
                op,
                "q_num_heads and kv_num_heads",
                "must be provided (non-zero) for 3D inputs",
                format!("{q_heads} and {kv_heads}"),
            ));
        }
        check_rank(op, "K", RankRequirement::Exactly(3), k.shape())?;
        check_rank(op, "V", RankRequirement::Exactly(3), v.shape())?;
        q = split_heads(a, &q, q_heads)?;
        k = split_heads(a, &k, kv_heads)?;
        v = split_heads(a, &v, kv_heads)?;
    }
    for (argument, t) in [("Q", &q), ("K", &k), ("V", &v)] {
        check_rank(op, argument, RankRequirement::Exactly(4), t.shape())?;
    }
    let scale = scale.unwrap_or_else(|| 1.0 / (dim(&q, 3) as f64).sqrt());
    let present_key = with_past(a, past_key, &k)?;
    let present_value = with_past(a, past_value, &v)?;
    let (k, v) = (present_key.clone(), present_value.clone());
    let (hq, hkv) = (dim(&q, 1), dim(&k, 1));
    let (l, s) = (dim(&q, 2), dim(&k, 2));
    let can_use_sdpa = softcap == 0.0
        && mode == 0
        && precision.is_none()
        && mask.as_ref().is_none_or(|m| m.dtype() == DType::Bool);
    if hkv == 0 || hq % hkv != 0 {
        return Err(invalid_argument(
            op,
            "kv_num_heads",
            format!("must divide q_num_heads ({hq}) for GQA"),
            hkv,
        ));
    }
    let rep = hq / hkv;
    let (output, qk_output) = if can_use_sdpa {
        let out = call(
            a,
            "aten::scaled_dot_product_attention",
            vec![
                t(&q),
                t(&k),
                t(&v),
                mask.as_ref().map_or(IValue::None, t),
                IValue::Double(0.0),
                IValue::Bool(causal),
                IValue::Double(scale),
                IValue::Bool(hq != hkv),
            ],
        )?;
        let qk = scaled_scores(a, &q, &repeat_heads(a, &k, rep)?, scale)?;
        (out, qk)
    } else {
        let (k, v) = (repeat_heads(a, &k, rep)?, repeat_heads(a, &v, rep)?);
        let dtype = scalar_type(q.dtype());
        let none4 = || vec![IValue::None, IValue::None, IValue::None];
        let mut zeros_args = vec![ints(&[l, s]), dtype];
        zeros_args.extend(none4());
        let mut bias = call(a, "aten::zeros", zeros_args)?;
        if causal {
            if mask.is_some() {
                return Err(invalid_argument(
                    op,
                    "attn_mask",
                    "must not be given with is_causal",
                    "a tensor",
                ));
            }
            let mut ones_args = vec![ints(&[l, s]), scalar_type(DType::Bool)];
            ones_args.extend(none4());
            let ones = call(a, "aten::ones", ones_args)?;
            let keep = call(a, "aten::tril", vec![t(&ones), IValue::Int(0)])?;
            let drop = call(a, "aten::logical_not", vec![t(&keep)])?;
            bias = call(
                a,
                "aten::masked_fill.Scalar",
                vec![t(&bias), t(&drop), IValue::Double(f64::NEG_INFINITY)],
            )?;
        }
        if let Some(m) = &mask {
            bias = if m.dtype() == DType::Bool {
                let drop = call(a, "aten::logical_not", vec![t(m)])?;
                call(
                    a,
                    "aten::masked_fill.Scalar",
                    vec![t(&bias), t(&drop), IValue::Double(f64::NEG_INFINITY)],
                )?
            } else {
                call(a, "aten::add.Tensor", vec![t(&bias), t(m), IValue::Int(1)])?
            };
        }
        let raw = scaled_scores(a, &q, &k, scale)?;
        let mut qk_output = raw.clone();
        let mut scores = call(
            a,
            "aten::add.Tensor",
            vec![t(&raw), t(&bias), IValue::Int(1)],
        )?;
        if mode == 1 {
            qk_output = scores.clone();
        }
        if softcap > 0.0 {
            let x = call(
                a,
                "aten::div.Scalar",
                vec![t(&scores), IValue::Double(softcap)],
            )?;
            let x = call(a, "aten::tanh", vec![t(&x)])?;
            scores = call(a, "aten::mul.Scalar", vec![t(&x), IValue::Double(softcap)])?;
        }
        if mode == 2 {
            qk_output = scores.clone();
        }
        let softmax = |x: &Tensor| {
            call(
                a,
                "aten::softmax.int",
                vec![t(x), IValue::Int(-1), IValue::None],
            )
        };
        let weights = match precision.and_then(softmax_dtype) {
            Some(d) => {
                let original = scores.dtype();
                let x = scores.to_dtype(d)?;
                softmax(&x)?.to_dtype(original)?
            }
            None => softmax(&scores)?,
        };
        if mode == 3 {
            qk_output = weights.clone();
        }
        (
            call(a, "aten::matmul", vec![t(&weights), t(&v)])?,
            qk_output,
        )
    };
    let output = if three_d {
        let x = call(
            a,
            "aten::transpose.int",
            vec![t(&output), IValue::Int(1), IValue::Int(2)],
        )?;
        call(a, "aten::reshape", vec![t(&x), ints(&[batch, q_len3, -1])])?
    } else {
        output
    };
    Ok(IValue::Tuple(Tuple::new(vec![
        IValue::Tensor(output),
        IValue::Tensor(present_key),
        IValue::Tensor(present_value),
        IValue::Tensor(qk_output),
    ])))
}

pub(crate) fn register(r: &mut Registry) {
    r.add("onnx::Attention.opset23", attention_23);
}
