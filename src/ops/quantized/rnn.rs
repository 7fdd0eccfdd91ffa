//! Dynamic quantized LSTM and GRU (`aten::quantized_lstm` with `use_dynamic=True` and
//! `aten::quantized_gru`, what `quantize_dynamic` makes of `nn.LSTM` / `nn.GRU`): ATen's CPU
//! `FullLayer` computes the input projection of the whole sequence with one dynamic linear
//! (one set of activation parameters), then per step the hidden projection, `sigmoid`/`tanh`
//! gates in float, in the order of ATen's `LSTMCell` / `GRUCell`.
//! The cell parameters are `__torch__.torch.classes.rnn.CellParamsBase` objects with the
//! state `("quantized_dynamic", [b_ih, b_hh], [], [reduce_range], [w_ih, w_hh])`, the packed
//! weights carrying their biases.

use super::linear::dynamic_matmul;
use super::torchbind::LinearParams;
use super::unsupported;
use crate::ops::{Args, Registry};
use crate::tensor::Tensor;
use crate::values::{IValue, Object, Tuple};
use crate::Result;

pub fn register(r: &mut Registry) {
    r.add("aten::quantized_lstm.input", quantized_lstm);
    r.add("aten::quantized_gru.input", quantized_gru);
}

#[derive(Clone, Copy, PartialEq)]
enum CellKind {
    Lstm,
    Gru,
}

impl CellKind {
    fn gates(self) -> usize {
        match self {
            CellKind::Lstm => 4,
            CellKind::Gru => 3,
        }
    }
}

struct Cell {
    w_ih: LinearParams,
    w_hh: LinearParams,
    reduce_range: bool,
}

fn cell_of(op: &str, v: &IValue) -> Result<Cell> {
    let bad = || {
        unsupported(
            op,
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
/// (`t` x `b` x `hsz`) and the final h (and c for an LSTM; `c0` is empty for a GRU).
fn run_direction(
    kind: CellKind,
    xs: &[f32],
    (t, b, f): (usize, usize, usize),
    cell: &Cell,
    h0: &[f32],
    c0: &[f32],
    reverse: bool,
) -> Result<(Vec<f32>, Vec<f32>, Vec<f32>)> {
    let hsz = h0.len() / b.max(1);
    let g = kind.gates() * hsz;
    let pre = dynamic_matmul(xs, t * b, f, g, &cell.w_ih, cell.reduce_range, false)?;
    let (mut h, mut c) = (h0.to_vec(), c0.to_vec());
    let mut out = vec![0f32; t * b * hsz];
    for step in 0..t {
        let ti = if reverse { t - 1 - step } else { step };
        let hh = dynamic_matmul(&h, b, hsz, g, &cell.w_hh, cell.reduce_range, false)?;
        for bi in 0..b {
            let hg = &hh[bi * g..(bi + 1) * g];
            let ig = &pre[(ti * b + bi) * g..(ti * b + bi + 1) * g];
            for j in 0..hsz {
                let k = bi * hsz + j;
                match kind {
                    CellKind::Lstm => {
                        let gate = |q: usize| hg[q * hsz + j] + ig[q * hsz + j];
                        let i_g = sigmoid(gate(0));
                        let f_g = sigmoid(gate(1));
                        let c_g = gate(2).tanh();
                        let o_g = sigmoid(gate(3));
                        let cy = f_g * c[k] + i_g * c_g;
                        c[k] = cy;
                        h[k] = o_g * cy.tanh();
                    }
                    CellKind::Gru => {
                        // reset = sigmoid(hh_r + ih_r), update = sigmoid(hh_z + ih_z),
                        // new = tanh(ih_n + hh_n * reset), h' = (h - new) * update + new
                        let r_g = sigmoid(hg[j] + ig[j]);
                        let z_g = sigmoid(hg[hsz + j] + ig[hsz + j]);
                        let n_g = (ig[2 * hsz + j] + hg[2 * hsz + j] * r_g).tanh();
                        h[k] = (h[k] - n_g) * z_g + n_g;
                    }
                }
            }
        }
        out[ti * b * hsz..(ti + 1) * b * hsz].copy_from_slice(&h);
    }
    Ok((out, h, c))
}

fn quantized_lstm(a: &mut Args<'_>) -> Result<IValue> {
    // (input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
    //  batch_first, dtype, use_dynamic)
    if !a.bool(10)? {
        return Err(unsupported(
            a.op,
            "only use_dynamic=True (dynamic quantization) is supported",
        ));
    }
    let hx = a.tensor_list(1)?;
    if hx.len() != 2 {
        return Err(unsupported(a.op, "hx = [h0, c0] expected"));
    }
    quantized_rnn(a, CellKind::Lstm, &hx)
}

fn quantized_gru(a: &mut Args<'_>) -> Result<IValue> {
    // (input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
    let hx = vec![a.tensor(1)?];
    quantized_rnn(a, CellKind::Gru, &hx)
}

/// The layers of a dynamic quantized LSTM (hx = [h0, c0]; returns (output, h_n, c_n)) or
/// GRU (hx = [h0]; returns (output, h_n)). Arguments 2..=8 are laid out alike in both ops.
fn quantized_rnn(a: &mut Args<'_>, kind: CellKind, hx: &[Tensor]) -> Result<IValue> {
    let input = a.tensor(0)?;
    let params = a.list(2)?.to_vec();
    let num_layers = usize::try_from(a.int(4)?).map_err(|_| unsupported(a.op, "num_layers"))?;
    let train = a.bool(6)?;
    let bidirectional = a.bool(7)?;
    let batch_first = a.bool(8)?;
    if train && a.double(5)? > 0.0 {
        return Err(unsupported(a.op, "dropout in training mode"));
    }
    let dirs = if bidirectional { 2 } else { 1 };
    if params.len() != num_layers * dirs {
        return Err(unsupported(
            a.op,
            "one cell per layer and direction expected",
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
    let c0 = match hx.get(1) {
        Some(c) => c.to_vec::<f32>()?,
        None => Vec::new(),
    };
    let hsz = *hx[0].shape().last().unwrap_or(&0);
    let state_len = b * hsz;
    if h0.len() != num_layers * dirs * state_len || (kind == CellKind::Lstm && c0.len() != h0.len())
    {
        return Err(unsupported(a.op, "hx shapes do not match the layers"));
    }
    let (mut hn, mut cn) = (Vec::new(), Vec::new());
    let mut layer_in = xs;
    let mut feat = f;
    for layer in 0..num_layers {
        let mut outs = Vec::new();
        for d in 0..dirs {
            let idx = layer * dirs + d;
            let cell = cell_of(a.op, &params[idx])?;
            let range = idx * state_len..(idx + 1) * state_len;
            let c_init = c0.get(range.clone()).unwrap_or(&[]);
            let (o, h, c) = run_direction(
                kind,
                &layer_in,
                (t, b, feat),
                &cell,
                &h0[range],
                c_init,
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
    let mut results = vec![
        IValue::Tensor(out),
        IValue::Tensor(Tensor::from_vec(hn, &hshape)?),
    ];
    if kind == CellKind::Lstm {
        results.push(IValue::Tensor(Tensor::from_vec(cn, &hshape)?));
    }
    Ok(IValue::Tuple(Tuple::new(results)))
}
