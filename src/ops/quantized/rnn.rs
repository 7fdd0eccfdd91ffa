//! Dynamic quantized LSTM (`aten::quantized_lstm` with `use_dynamic=True`, what
//! `quantize_dynamic` makes of `nn.LSTM`): ATen's CPU `FullLayer` computes the input
//! projection of the whole sequence with one dynamic linear (one set of activation
//! parameters), then per step the hidden projection, `sigmoid`/`tanh` gates in float.
//! The cell parameters are `__torch__.torch.classes.rnn.CellParamsBase` objects with the
//! state `("quantized_dynamic", [b_ih, b_hh], [], [reduce_range], [w_ih, w_hh])`, the packed
//! weights carrying their biases.

use super::linear::dynamic_matmul;
use super::torchbind::LinearParams;
use super::unsupported;
use crate::ops::{Args, Registry};
use crate::runtime::{IValue, Object, Tuple};
use crate::tensor::Tensor;
use crate::Result;

pub fn register(r: &mut Registry) {
    r.add("aten::quantized_lstm.input", quantized_lstm);
}

struct Cell {
    w_ih: LinearParams,
    w_hh: LinearParams,
    reduce_range: bool,
}

fn cell_of(v: &IValue) -> Result<Cell> {
    let bad = || {
        unsupported(
            "aten::quantized_lstm",
            "cell parameters are not quantized_dynamic CellParamsBase objects",
        )
    };
    let IValue::Object(o) = v else {
        return Err(bad());
    };
    let Some(IValue::Tuple(state)) = o.state() else {
        return Err(bad());
    };
    let items = state.items();
    match items.first() {
        Some(IValue::String(kind)) if &**kind == "quantized_dynamic" => {}
        _ => return Err(bad()),
    }
    let reduce_range = match items.get(3) {
        Some(IValue::List(l)) => matches!(l.to_vec().first(), Some(IValue::Int(1))),
        _ => false,
    };
    let packed: Vec<Object> = match items.get(4) {
        Some(IValue::List(l)) => l
            .to_vec()
            .into_iter()
            .filter_map(|v| match v {
                IValue::Object(o) => Some(o),
                _ => None,
            })
            .collect(),
        _ => return Err(bad()),
    };
    let [w_ih, w_hh] = packed.as_slice() else {
        return Err(bad());
    };
    Ok(Cell {
        w_ih: LinearParams::from_object(w_ih)?,
        w_hh: LinearParams::from_object(w_hh)?,
        reduce_range,
    })
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// One direction of one layer over `xs` (`t` steps of `b` x `f`); returns the outputs
/// (`t` x `b` x `hsz`) and the final (h, c).
fn run_direction(
    xs: &[f32],
    (t, b, f): (usize, usize, usize),
    cell: &Cell,
    h0: &[f32],
    c0: &[f32],
    reverse: bool,
) -> Result<(Vec<f32>, Vec<f32>, Vec<f32>)> {
    let hsz = h0.len() / b.max(1);
    let g = 4 * hsz;
    let pre = dynamic_matmul(xs, t * b, f, g, &cell.w_ih, cell.reduce_range, false)?;
    let (mut h, mut c) = (h0.to_vec(), c0.to_vec());
    let mut out = vec![0f32; t * b * hsz];
    for step in 0..t {
        let ti = if reverse { t - 1 - step } else { step };
        let hh = dynamic_matmul(&h, b, hsz, g, &cell.w_hh, cell.reduce_range, false)?;
        for bi in 0..b {
            let gates: Vec<f32> = (0..g)
                .map(|j| hh[bi * g + j] + pre[(ti * b + bi) * g + j])
                .collect();
            for j in 0..hsz {
                let i_g = sigmoid(gates[j]);
                let f_g = sigmoid(gates[hsz + j]);
                let c_g = gates[2 * hsz + j].tanh();
                let o_g = sigmoid(gates[3 * hsz + j]);
                let cy = f_g * c[bi * hsz + j] + i_g * c_g;
                c[bi * hsz + j] = cy;
                h[bi * hsz + j] = o_g * cy.tanh();
            }
        }
        out[ti * b * hsz..(ti + 1) * b * hsz].copy_from_slice(&h);
    }
    Ok((out, h, c))
}

fn quantized_lstm(a: &mut Args<'_>) -> Result<IValue> {
    let input = a.tensor(0)?;
    let hx = a.tensor_list(1)?;
    let params = a.list(2)?.to_vec();
    let num_layers = usize::try_from(a.int(4)?).map_err(|_| unsupported(a.op, "num_layers"))?;
    let train = a.bool(6)?;
    let bidirectional = a.bool(7)?;
    let batch_first = a.bool(8)?;
    if !a.bool(10)? {
        return Err(unsupported(
            a.op,
            "only use_dynamic=True (dynamic quantization) is supported",
        ));
    }
    if train && a.double(5)? > 0.0 {
        return Err(unsupported(a.op, "dropout in training mode"));
    }
    let dirs = if bidirectional { 2 } else { 1 };
    if params.len() != num_layers * dirs || hx.len() != 2 {
        return Err(unsupported(
            a.op,
            "one cell per layer and direction, hx = [h0, c0] expected",
        ));
    }
    if input.dim() != 3 {
        return Err(unsupported(a.op, "expects a 3-d input"));
    }
    let s = input.shape();
    let (t, b, f) = if batch_first {
        (s[1], s[0], s[2])
    } else {
        (s[0], s[1], s[2])
    };
    // time-major copy of the input
    let raw = input.to_vec::<f32>()?;
    let mut xs = vec![0f32; t * b * f];
    for ti in 0..t {
        for bi in 0..b {
            let src = if batch_first {
                (bi * t + ti) * f
            } else {
                (ti * b + bi) * f
            };
            xs[(ti * b + bi) * f..(ti * b + bi + 1) * f].copy_from_slice(&raw[src..src + f]);
        }
    }
    let h0 = hx[0].to_vec::<f32>()?;
    let c0 = hx[1].to_vec::<f32>()?;
    let hsz = *hx[0].shape().last().unwrap_or(&0);
    let state_len = b * hsz;
    if h0.len() != num_layers * dirs * state_len || c0.len() != h0.len() {
        return Err(unsupported(a.op, "hx shapes do not match the layers"));
    }
    let (mut hn, mut cn) = (Vec::new(), Vec::new());
    let mut layer_in = xs;
    let mut feat = f;
    for layer in 0..num_layers {
        let mut outs = Vec::new();
        for d in 0..dirs {
            let idx = layer * dirs + d;
            let cell = cell_of(&params[idx])?;
            let range = idx * state_len..(idx + 1) * state_len;
            let (o, h, c) = run_direction(
                &layer_in,
                (t, b, feat),
                &cell,
                &h0[range.clone()],
                &c0[range],
                d == 1,
            )?;
            outs.push(o);
            hn.extend(h);
            cn.extend(c);
        }
        // concatenate directions on the feature axis
        let mut next = vec![0f32; t * b * hsz * dirs];
        for (d, o) in outs.iter().enumerate() {
            for r in 0..t * b {
                next[r * hsz * dirs + d * hsz..r * hsz * dirs + (d + 1) * hsz]
                    .copy_from_slice(&o[r * hsz..(r + 1) * hsz]);
            }
        }
        layer_in = next;
        feat = hsz * dirs;
    }
    let out = if batch_first {
        let mut o = vec![0f32; t * b * feat];
        for ti in 0..t {
            for bi in 0..b {
                o[(bi * t + ti) * feat..(bi * t + ti + 1) * feat]
                    .copy_from_slice(&layer_in[(ti * b + bi) * feat..(ti * b + bi + 1) * feat]);
            }
        }
        Tensor::from_vec(o, &[b, t, feat])?
    } else {
        Tensor::from_vec(layer_in, &[t, b, feat])?
    };
    let hshape = hx[0].shape().to_vec();
    Ok(IValue::Tuple(Tuple::new(vec![
        IValue::Tensor(out),
        IValue::Tensor(Tensor::from_vec(hn, &hshape)?),
        IValue::Tensor(Tensor::from_vec(cn, &hshape)?),
    ])))
}
