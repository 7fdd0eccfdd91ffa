//! `aten::mkldnn_rnn_layer` (and `mkldnn::_reorder_mkldnn_rnn_layer_weight`, its weights in
//! oneDNN's layout): one LSTM layer and direction as PyTorch's CPU LSTM hands it to
//! oneDNN (aten/src/ATen/native/mkldnn/RNN.cpp), run through tsrun's LSTM kernel
//! (`aten::lstm.input` with one layer). oneDNN's primitive is an LSTM whatever `mode` says
//! (PyTorch's CPU wheel fails to build it for the other cell kinds), reads its operands'
//! memory as dense `[T, B, I]` / `[B, H]` blocks (so `batch_first`, `bidirectional`,
//! `num_layers`, `batch_sizes` and `train` change nothing), and in grad mode also fills an
//! opaque training workspace.

use super::kernels::value_err;
use super::linalg::reshape;
use super::mkldnn::tensor_of;
use super::prims::via_aten;
use super::{Args, Registry};
use crate::ops::grad_mode::is_grad_enabled;
use crate::ops::kernels::{
    invalid_argument, rank_mismatch, shape_mismatch, size_mismatch, unsupported_feature,
    wrong_dtype,
};
use crate::tensor::RankRequirement;
use crate::tensor::{DType, Tensor};
use crate::values::{IValue, List, Tuple, Type};

type R = crate::Result<IValue>;

/// `ideep::rnn_kind::LSTM`, the only `mode` oneDNN's LSTM primitive accepts.
const MODE_LSTM: i64 = 2;

fn tensors(ts: Vec<Tensor>) -> IValue {
    IValue::List(List::new(
        Type::Tensor,
        ts.into_iter().map(IValue::Tensor).collect(),
    ))
}

/// `hidden_size` as a size, and the weight rows of its four gates.
fn gate_rows(op: &str, hidden: i64) -> crate::Result<(usize, usize)> {
    usize::try_from(hidden)
        .ok()
        .and_then(|h| Some((h, h.checked_mul(4)?)))
        .ok_or_else(|| invalid_argument(op, "hidden_size", "must be a non-negative size", hidden))
}

/// `x` flipped along its first (time) dim.
fn flip_time(a: &Args<'_>, x: &Tensor) -> crate::Result<Tensor> {
    let flipped = via_aten(
        a,
        "aten::flip",
        vec![
            IValue::Tensor(x.clone()),
            IValue::List(List::new(Type::Int, vec![IValue::Int(0)])),
        ],
    )?;
    tensor_of(a, flipped)
}

/// mkldnn_rnn_layer(input, weight0, weight1, weight2, weight3, hx_, cx_, reverse, batch_sizes,
/// mode, hidden_size, num_layers, has_biases, bidirectional, batch_first, train)
/// -> (output [T, B, H], hy (hx_'s shape), cy (cx_'s shape), workspace)
fn mkldnn_rnn_layer(a: &mut Args<'_>) -> R {
    let op = a.op;
    let (x, w_ih, w_hh) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
    let (hx, cx) = (a.tensor(5)?, a.tensor(6)?);
    let reverse = a.bool(7)?;
    a.int_list(8)?;
    let (mode, hidden) = (a.int(9)?, a.int(10)?);
    a.int(11)?;
    let has_biases = a.bool(12)?;
    for i in [13, 14, 15] {
        a.bool(i)?;
    }
    if mode != MODE_LSTM {
        return Err(invalid_argument(
            op,
            "mode",
            format!("must be {MODE_LSTM} (oneDNN's layer is an LSTM)"),
            mode,
        ));
    }
    if is_grad_enabled() {
        return Err(unsupported_feature(
            op,
            "grad mode (oneDNN also returns its training workspace, whose layout is \
             oneDNN-internal; call it under torch.no_grad())",
        ));
    }
    // oneDNN's LSTM runs float32 or bfloat16 (bfloat16 products accumulated in float32, which
    // tsrun's LSTM matches to bfloat16 rounding); other mixes fail to build in PyTorch
    if !matches!(x.dtype(), DType::Float32 | DType::BFloat16) {
        return Err(wrong_dtype(op, "input", "float32 or bfloat16", x.dtype()));
    }
    for (t, name) in [
        (&w_ih, "weight0"),
        (&w_hh, "weight1"),
        (&hx, "hx_"),
        (&cx, "cx_"),
    ] {
        if t.dtype() != x.dtype() {
            return Err(unsupported_feature(
                op,
                format!(
                    "{name} of dtype {} with an input of {} (tsrun runs one dtype throughout)",
                    t.dtype(),
                    x.dtype()
                ),
            ));
        }
    }
    // oneDNN reads input, hx and cx through their data pointers as dense blocks
    for (t, name) in [(&x, "input"), (&hx, "hx_"), (&cx, "cx_")] {
        if !t.is_contiguous() {
            return Err(unsupported_feature(
                op,
                format!("a non-contiguous {name} (oneDNN reads its memory as a dense block)"),
            ));
        }
    }
    let [_, batch, input] = *x.shape() else {
        return Err(rank_mismatch(
            op,
            "input ([seq_len, batch, input_size])",
            RankRequirement::Exactly(3),
            x.shape(),
        ));
    };
    let (h, rows) = gate_rows(op, hidden)?;
    // oneDNN takes the weights' sizes from hidden_size and the input width: any other shape
    // would be read out of its bounds
    let want_ih = [rows, input];
    let want_hh = [rows, h];
    for (t, name, want) in [(&w_ih, "weight0", want_ih), (&w_hh, "weight1", want_hh)] {
        if t.shape() != want {
            return Err(shape_mismatch(op, name, &want, t.shape()));
        }
    }
    let state = [1, batch, h];
    for (t, name) in [(&hx, "hx_"), (&cx, "cx_")] {
        if Some(t.numel()) != batch.checked_mul(h) {
            return Err(size_mismatch(
                op,
                format!("the number of elements of {name} (batch x hidden_size)"),
                i64::try_from(batch.saturating_mul(h)).unwrap_or(i64::MAX),
                t.numel() as i64,
            ));
        }
    }
    let mut params = vec![w_ih, w_hh];
    if has_biases {
        for i in [3, 4] {
            let b = a.tensor(i)?;
            if b.shape() != [rows] {
                return Err(shape_mismatch(op, "bias", &[rows], b.shape()));
            }
            params.push(b);
        }
    }
    let xs = if reverse {
        flip_time(a, &x)?
    } else {
        x.clone()
    };
    let hx0 = reshape(&hx, &state)?;
    let cx0 = reshape(&cx, &state)?;
    let out = via_aten(
        a,
        "aten::lstm.input",
        vec![
            IValue::Tensor(xs),
            tensors(vec![hx0, cx0]),
            tensors(params),
            IValue::Bool(has_biases),
            IValue::Int(1),
            IValue::Double(0.0),
            IValue::Bool(false),
            IValue::Bool(false),
            IValue::Bool(false),
        ],
    )?;
    let IValue::Tuple(parts) = out else {
        return Err(value_err(format!("{op}: lstm returned no tuple")));
    };
    let [y, hy, cy] = parts.items() else {
        return Err(value_err(format!("{op}: lstm returned no (output, h, c)")));
    };
    let (y, hy, cy) = (
        tensor_of(a, y.clone())?,
        tensor_of(a, hy.clone())?,
        tensor_of(a, cy.clone())?,
    );
    let y = if reverse { flip_time(a, &y)? } else { y };
    Ok(IValue::Tuple(Tuple::new(vec![
        IValue::Tensor(y),
        IValue::Tensor(reshape(&hy, hx.shape())?),
        IValue::Tensor(reshape(&cy, cx.shape())?),
        IValue::None,
    ])))
}

/// `mkldnn::_reorder_mkldnn_rnn_layer_weight(weight0, weight1, hidden_size, reverse,
/// has_biases, batch_first, input_size)`: an LSTM layer's `[4H, I]` input and `[4H, H]`
/// recurrent weights in oneDNN's layout for `mkldnn_rnn_layer`. tsrun holds an MKLDNN tensor
/// as the dense tensor it stands for (src/ops/mkldnn.rs): oneDNN's logical `ldigo` view,
/// `[1, 1, I, 4, H]` with `[0, 0, i, g, h] = weight[g * H + h, i]`. The remaining arguments
/// only steer oneDNN's blocking.
fn reorder_rnn_layer_weight(a: &mut Args<'_>) -> R {
    let op = a.op;
    let (w_ih, w_hh, hidden) = (a.tensor(0)?, a.tensor(1)?, a.int(2)?);
    for i in [3, 4, 5] {
        a.bool(i)?;
    }
    if let Some(sizes) = a.opt_int_list(6)? {
        // PyTorch reads its time and batch entries (0 and 1) unchecked
        if sizes.len() < 2 {
            return Err(invalid_argument(
                op,
                "the length of input_size",
                "must be at least 2 (time and batch sizes)",
                sizes.len(),
            ));
        }
    }
    let (h, rows) = gate_rows(op, hidden)?;
    let mut out = Vec::with_capacity(2);
    for (w, name, width) in [
        (&w_ih, "weight0", w_ih.shape().get(1).copied().unwrap_or(0)),
        (&w_hh, "weight1", h),
    ] {
        if !matches!(w.dtype(), DType::Float32 | DType::BFloat16) {
            return Err(wrong_dtype(op, name, "float32 or bfloat16", w.dtype()));
        }
        if w.shape() != [rows, width] {
            return Err(shape_mismatch(op, name, &[rows, width], w.shape()));
        }
        if !w.is_contiguous() {
            return Err(unsupported_feature(
                op,
                format!("a non-contiguous {name} (oneDNN reads its memory as a dense block)"),
            ));
        }
        let gates = reshape(w, &[4, h, width])?;
        let ldigo = super::linalg::permute(&gates, &[2, 0, 1])?.contiguous()?;
        out.push(reshape(&ldigo, &[1, 1, width, 4, h])?);
    }
    Ok(tensors(out))
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::mkldnn_rnn_layer", mkldnn_rnn_layer);
    r.add(
        "mkldnn::_reorder_mkldnn_rnn_layer_weight",
        reorder_rnn_layer_weight,
    );
}
