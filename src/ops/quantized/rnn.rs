//! Quantized LSTM and GRU (`aten::quantized_lstm` and `aten::quantized_gru`, what
//! `quantize_dynamic` makes of `nn.LSTM` / `nn.GRU`), over a padded input (`.input`) or a
//! PackedSequence (`.data`).
//!
//! ATen's CPU layers compute the input projection of the whole sequence with one dynamic
//! linear (one set of activation parameters), then per step the hidden projection of the batch
//! entries still running and the `sigmoid`/`tanh` gates in float, in the order of ATen's
//! `LSTMCell` / `GRUCell`. The padded input is the packed case with every step as wide as
//! the batch, so both overloads share one recurrence (`PackedLayer` / `ReversedPackedLayer`).
//!
//! The cell parameters are `__torch__.torch.classes.rnn.CellParamsBase` objects whose state is
//! `("quantized_dynamic", [b_ih, b_hh], [], [reduce_range], [w_ih, w_hh])` for int8 weights or
//! `("quantized_fp16", [], [], [], [w_ih, w_hh])` for fp16 ones, the packed weights
//! (`LinearPackedParamsBase`) carrying their biases; `make_quantized_cell_params`' legacy
//! `("quantized", [w_ih, w_hh, b_ih, b_hh, col_offsets_ih, col_offsets_hh], [scales],
//! [zero_points], [])` runs its projections as `fbgemm_linear_int8_weight` does. The cells
//! alone decide the arithmetic (`use_dynamic` and `dtype` change nothing in ATen's result).
//! The single-step cells
//! (`quantized::quantized_*_cell_dynamic`, `nn.quantized.dynamic.LSTMCell` and friends) share
//! the gate arithmetic.

use super::fbgemm_legacy::Int8Linear;
use super::linear::{dynamic_matmul, Fp16Weights};
use super::torchbind::{packed_arg, LinearParams};
use super::unsupported;
use crate::ops::kernels::{
    check_rank, check_size, invalid_argument, shape_mismatch, size_mismatch, unsupported_feature,
};
use crate::ops::{Args, QuantizedEngine, Registry};
use crate::tensor::{RankRequirement, Tensor};
use crate::values::{IValue, Object, Tuple};
use crate::Result;

pub fn register(r: &mut Registry) {
    r.add("aten::quantized_lstm.input", |a| {
        quantized_rnn_op(a, CellKind::Lstm, Layout::Padded)
    });
    r.add("aten::quantized_lstm.data", |a| {
        quantized_rnn_op(a, CellKind::Lstm, Layout::Packed)
    });
    r.add("aten::quantized_gru.input", |a| {
        quantized_rnn_op(a, CellKind::Gru, Layout::Padded)
    });
    r.add("aten::quantized_gru.data", |a| {
        quantized_rnn_op(a, CellKind::Gru, Layout::Packed)
    });
    r.add("quantized::quantized_lstm_cell_dynamic", |a| {
        cell_dynamic(a, CellOp::Lstm)
    });
    r.add("quantized::quantized_gru_cell_dynamic", |a| {
        cell_dynamic(a, CellOp::Gru)
    });
    r.add("quantized::quantized_rnn_tanh_cell_dynamic", |a| {
        cell_dynamic(a, CellOp::Tanh)
    });
    r.add("quantized::quantized_rnn_relu_cell_dynamic", |a| {
        cell_dynamic(a, CellOp::Relu)
    });
}

/// The single-step cells `quantized::quantized_*_cell_dynamic` compute.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum CellOp {
    Lstm,
    Gru,
    Tanh,
    Relu,
}

/// `quantized::quantized_{lstm,gru,rnn_tanh,rnn_relu}_cell_dynamic(input, hx, w_ih, w_hh,
/// b_ih, b_hh)`: one step of ATen's cell over `QuantizedCellParamsDynamic` with
/// `reduce_range` true (or fp16 packed weights in float); the projections take their biases
/// from the packed weights (as PyTorch's do: `b_ih`/`b_hh` are only held).
fn cell_dynamic(a: &mut Args<'_>, op: CellOp) -> Result<IValue> {
    let x = a.tensor(0)?;
    check_rank(a.op, "input", RankRequirement::Exactly(2), x.shape())?;
    let (h, c) = cell_state_arg(a, op)?;
    let engine = a.ctx.quantized_engine;
    let w_ih = Projection::of_packed(LinearParams::from_object(&packed_arg(a, 2)?)?, engine)?;
    let w_hh = Projection::of_packed(LinearParams::from_object(&packed_arg(a, 3)?)?, engine)?;
    let (b, f) = (x.shape()[0], x.shape()[1]);
    let hsz = h.shape().last().copied().unwrap_or(0);
    for (what, t) in [("hx", Some(&h)), ("cx", c.as_ref())] {
        if let Some(t) = t.filter(|t| t.numel() != b * hsz) {
            return Err(size_mismatch(
                a.op,
                format!("the number of elements of {what} (batch x hidden)"),
                (b * hsz) as i64,
                t.numel() as i64,
            ));
        }
    }
    let gates = match op {
        CellOp::Lstm => 4,
        CellOp::Gru => 3,
        _ => 1,
    };
    let g = gates * hsz;
    let hs = h.to_vec::<f32>()?;
    let ig = w_ih.apply(&x.to_vec::<f32>()?, b, f, g)?;
    let hg = w_hh.apply(&hs, b, hsz, g)?;
    let c_in = match &c {
        Some(c) => Some(c.to_vec::<f32>()?),
        None => None,
    };
    let (h_out, c_out) = combine_cell_gates(op, b, hsz, &ig, &hg, &hs, c_in)?;
    let h_out = Tensor::from_vec(h_out, h.shape())?;
    match (c, c_out) {
        (Some(c), Some(c_out)) => Ok(IValue::Tuple(Tuple::new(vec![
            IValue::Tensor(h_out),
            IValue::Tensor(Tensor::from_vec(c_out, c.shape())?),
        ]))),
        _ => Ok(IValue::Tensor(h_out)),
    }
}

/// A cell's state argument (1): `[h, c]` for an LSTM, `h` otherwise.
pub(crate) fn cell_state_arg(a: &Args<'_>, op: CellOp) -> Result<(Tensor, Option<Tensor>)> {
    if op != CellOp::Lstm {
        return Ok((a.tensor(1)?, None));
    }
    let hx = a.tensor_list(1)?;
    let [h, c] = hx.as_slice() else {
        return Err(size_mismatch(
            a.op,
            "the length of hx ([h, c])",
            2,
            hx.len() as i64,
        ));
    };
    Ok((h.clone(), Some(c.clone())))
}

/// One step of cell `op` for `b` batch rows of `hsz` hidden units from the projections `ig`
/// (input) and `hg` (hidden), `gates * hsz` values a row, the old hidden state `hs` and, for
/// an LSTM, the old cell state `c`: the new hidden state and the new cell state.
pub(crate) fn combine_cell_gates(
    op: CellOp,
    b: usize,
    hsz: usize,
    ig: &[f32],
    hg: &[f32],
    hs: &[f32],
    mut c: Option<Vec<f32>>,
) -> Result<(Vec<f32>, Option<Vec<f32>>)> {
    let g = hg.len() / b.max(1);
    let mut h_out = vec![0f32; b * hsz];
    for bi in 0..b {
        let (hgr, igr) = (&hg[bi * g..(bi + 1) * g], &ig[bi * g..(bi + 1) * g]);
        for j in 0..hsz {
            let k = bi * hsz + j;
            h_out[k] = match (op, c.as_mut()) {
                (CellOp::Lstm, Some(c)) => {
                    let (hy, cy) = lstm_gates(hgr, igr, hsz, j, c[k]);
                    c[k] = cy;
                    hy
                }
                (CellOp::Gru, _) => gru_gates(hgr, igr, hsz, j, hs[k]),
                // SimpleCell: nonlinearity(linear_ih(x) + linear_hh(h))
                (CellOp::Tanh, _) => (igr[j] + hgr[j]).tanh(),
                (CellOp::Relu, _) => (igr[j] + hgr[j]).max(0.0),
                (CellOp::Lstm, None) => {
                    return Err(unsupported("quantized LSTM cell", "no cell state"))
                }
            };
        }
    }
    Ok((h_out, c))
}

/// ATen's `LSTMCell` for hidden unit `j`: `gates = linear_hh(h) + linear_ih(x)` chunked i, f,
/// g, o; the new (h, c) from the old `c`.
fn lstm_gates(hg: &[f32], ig: &[f32], hsz: usize, j: usize, c: f32) -> (f32, f32) {
    let gate = |q: usize| hg[q * hsz + j] + ig[q * hsz + j];
    let i_g = sigmoid(gate(0));
    let f_g = sigmoid(gate(1));
    let c_g = gate(2).tanh();
    let o_g = sigmoid(gate(3));
    let cy = f_g * c + i_g * c_g;
    (o_g * cy.tanh(), cy)
}

/// ATen's `GRUCell` for hidden unit `j`: reset = sigmoid(hh_r + ih_r), update =
/// sigmoid(hh_z + ih_z), new = tanh(ih_n + hh_n * reset), h' = (h - new) * update + new.
fn gru_gates(hg: &[f32], ig: &[f32], hsz: usize, j: usize, h: f32) -> f32 {
    let r_g = sigmoid(hg[j] + ig[j]);
    let z_g = sigmoid(hg[hsz + j] + ig[hsz + j]);
    let n_g = (ig[2 * hsz + j] + hg[2 * hsz + j] * r_g).tanh();
    (h - n_g) * z_g + n_g
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

/// How the sequence argument is laid out: `.input` takes `[T, B, F]` (or `[B, T, F]`),
/// `.data` a PackedSequence's `(data [N, F], batch_sizes [T])`.
#[derive(Clone, Copy, PartialEq)]
enum Layout {
    Padded,
    Packed,
}

/// One linear projection of a cell, as its `CellParamsBase` kind computes it.
enum Projection {
    /// `quantized_dynamic`: the input quantized to quint8 from its own min/max per call.
    Int8 {
        // boxed: a tensor's handle is large next to the fp16 variant
        params: Box<LinearParams>,
        reduce_range: bool,
        engine: QuantizedEngine,
    },
    /// `quantized_fp16`: half-rounded weights, float arithmetic.
    Fp16(Fp16Weights),
    /// `quantized` (`make_quantized_cell_params`, the pre-torchbind API): int8 weights with
    /// their column offsets, applied by `fbgemm_linear_int8_weight_fp32_activation`.
    Int8Legacy(Box<Int8Linear>),
}

impl Projection {
    /// A packed linear weight as the cells' `apply_dynamic` runs it: fp16 weights (quantize_dynamic
    /// with `dtype=torch.float16`) in float, qint8 ones with the input quantized per call
    /// (`reduce_range` true).
    fn of_packed(params: LinearParams, engine: QuantizedEngine) -> Result<Projection> {
        if params.is_fp16() {
            return Ok(Projection::Fp16(Fp16Weights::new(&params)?));
        }
        Ok(Projection::Int8 {
            params: Box::new(params),
            reduce_range: true,
            engine,
        })
    }

    /// `xs` (`m` rows of `k`) projected to `n` outputs, bias included.
    fn apply(&self, xs: &[f32], m: usize, k: usize, n: usize) -> Result<Vec<f32>> {
        match self {
            Projection::Int8 {
                params,
                reduce_range,
                engine,
            } => dynamic_matmul(xs, m, k, n, params, *reduce_range, false, *engine),
            Projection::Fp16(w) => w.matmul(xs, m, k, n),
            Projection::Int8Legacy(lin) if (lin.n, lin.k) == (n, k) => lin.apply(xs, m),
            Projection::Int8Legacy(lin) => Err(shape_mismatch(
                "quantized RNN",
                "cell weight",
                &[n, k],
                &[lin.n, lin.k],
            )),
        }
    }
}

struct Cell {
    ih: Projection,
    hh: Projection,
}

fn cell_of(op: &str, v: &IValue, engine: QuantizedEngine) -> Result<Cell> {
    let bad = || {
        unsupported(
            op,
            "cell parameters are not quantized_dynamic or quantized_fp16 CellParamsBase objects",
        )
    };
    let IValue::Object(o) = v else {
        return Err(bad());
    };
    let Some(IValue::Tuple(state)) = o.state() else {
        return Err(bad());
    };
    let items = state.items();
    let fp16 = match items.first() {
        Some(IValue::String(kind)) if &**kind == "quantized_dynamic" => false,
        Some(IValue::String(kind)) if &**kind == "quantized_fp16" => true,
        Some(IValue::String(kind)) if &**kind == "quantized" => return legacy_cell(op, items),
        _ => return Err(bad()),
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
    let (w_ih, w_hh) = (
        LinearParams::from_object(w_ih)?,
        LinearParams::from_object(w_hh)?,
    );
    if fp16 {
        return Ok(Cell {
            ih: Projection::Fp16(Fp16Weights::new(&w_ih)?),
            hh: Projection::Fp16(Fp16Weights::new(&w_hh)?),
        });
    }
    let reduce_range = match items.get(3) {
        Some(IValue::List(l)) => matches!(l.to_vec().first(), Some(IValue::Int(1))),
        _ => false,
    };
    Ok(Cell {
        ih: Projection::Int8 {
            params: Box::new(w_ih),
            reduce_range,
            engine,
        },
        hh: Projection::Int8 {
            params: Box::new(w_hh),
            reduce_range,
            engine,
        },
    })
}

/// A `quantized` cell's state `("quantized", [w_ih, w_hh, b_ih, b_hh, col_offsets_ih,
/// col_offsets_hh], [scale_ih, scale_hh], [zero_point_ih, zero_point_hh], [])`: ATen's
/// `QuantizedCellParams`, whose packed matrices are its int8 weights.
fn legacy_cell(op: &str, items: &[IValue]) -> Result<Cell> {
    let bad = || unsupported(op, "malformed quantized CellParamsBase state");
    let list = |i: usize| match items.get(i) {
        Some(IValue::List(l)) => Ok(l.to_vec()),
        _ => Err(bad()),
    };
    let (tensors, doubles, longs) = (list(1)?, list(2)?, list(3)?);
    let (
        [IValue::Tensor(w_ih), IValue::Tensor(w_hh), IValue::Tensor(b_ih), IValue::Tensor(b_hh), IValue::Tensor(col_ih), IValue::Tensor(col_hh)],
        [IValue::Double(scale_ih), IValue::Double(scale_hh)],
        [IValue::Int(zp_ih), IValue::Int(zp_hh)],
    ) = (&tensors[..], &doubles[..], &longs[..])
    else {
        return Err(bad());
    };
    let projection = |w: &Tensor, col: &Tensor, scale: f64, zp: i64, bias: &Tensor| {
        let [n, k] = *w.shape() else {
            return Err(bad());
        };
        if w.dtype() != crate::tensor::DType::Int8 {
            return Err(crate::ops::kernels::wrong_dtype(
                op,
                "cell weight",
                "int8",
                w.dtype(),
            ));
        }
        let values = w.contiguous()?.to_vec::<i8>()?;
        let lin = Int8Linear::new(op, values, (n, k), col, (scale, zp), bias)?;
        Ok(Projection::Int8Legacy(Box::new(lin)))
    };
    Ok(Cell {
        ih: projection(w_ih, col_ih, *scale_ih, *zp_ih, b_ih)?,
        hh: projection(w_hh, col_hh, *scale_hh, *zp_hh, b_hh)?,
    })
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// Packed rows: step `i` holds `sizes[i]` rows (the first `sizes[i]` batch entries, sorted
/// longest first), `feat` values each.
struct Packed<'a> {
    rows: &'a [f32],
    sizes: &'a [usize],
    feat: usize,
}

/// The recurrent state of one direction: `h` (and `c` for an LSTM, empty for a GRU), one
/// `hsz` row per batch entry.
struct State {
    h: Vec<f32>,
    c: Vec<f32>,
}

/// One direction of one layer over packed `input`; returns the output rows (`hsz` each) and
/// the final state.
///
/// Entry `k`'s row is updated only at the steps it runs, so the first `sizes[i]` rows of the
/// state are exactly ATen's sliced hidden: forwards the finished entries keep their last
/// state (`PackedLayer` saves them as the batch shrinks), backwards an entry starts from its
/// `h0` row when it joins (`ReversedPackedLayer` concatenates it as the batch grows).
fn run_direction(
    kind: CellKind,
    input: &Packed<'_>,
    cell: &Cell,
    mut state: State,
    hsz: usize,
    reverse: bool,
) -> Result<(Vec<f32>, State)> {
    let total_rows = input.sizes.iter().sum::<usize>();
    let g = kind.gates() * hsz;
    let pre = cell.ih.apply(input.rows, total_rows, input.feat, g)?;
    let mut offsets = Vec::with_capacity(input.sizes.len());
    let mut acc = 0;
    for &s in input.sizes {
        offsets.push(acc);
        acc += s;
    }
    let mut out = vec![0f32; total_rows * hsz];
    let steps: Box<dyn Iterator<Item = usize>> = if reverse {
        Box::new((0..input.sizes.len()).rev())
    } else {
        Box::new(0..input.sizes.len())
    };
    for step in steps {
        let (bs, off) = (input.sizes[step], offsets[step]);
        let hh = cell.hh.apply(&state.h[..bs * hsz], bs, hsz, g)?;
        for bi in 0..bs {
            let hg = &hh[bi * g..(bi + 1) * g];
            let ig = &pre[(off + bi) * g..(off + bi + 1) * g];
            for j in 0..hsz {
                let k = bi * hsz + j;
                match kind {
                    CellKind::Lstm => {
                        let (hy, cy) = lstm_gates(hg, ig, hsz, j, state.c[k]);
                        state.c[k] = cy;
                        state.h[k] = hy;
                    }
                    CellKind::Gru => state.h[k] = gru_gates(hg, ig, hsz, j, state.h[k]),
                }
            }
        }
        out[off * hsz..(off + bs) * hsz].copy_from_slice(&state.h[..bs * hsz]);
    }
    Ok((out, state))
}

/// Arguments both layouts share, from `num_layers` on: (num_layers, dropout, train,
/// bidirectional), at `first` (after `has_biases`).
struct LayerArgs {
    num_layers: usize,
    bidirectional: bool,
}

fn layer_args(a: &Args<'_>, first: usize) -> Result<LayerArgs> {
    let num_layers = a.int(first)?;
    let num_layers = usize::try_from(num_layers)
        .map_err(|_| invalid_argument(a.op, "num_layers", "must be non-negative", num_layers))?;
    if a.bool(first + 2)? && a.double(first + 1)? > 0.0 {
        return Err(unsupported_feature(a.op, "dropout in training mode"));
    }
    Ok(LayerArgs {
        num_layers,
        bidirectional: a.bool(first + 3)?,
    })
}

/// `aten::quantized_lstm.input(input, hx, params, has_biases, num_layers, dropout, train,
/// bidirectional, batch_first, *, dtype, use_dynamic)`, `.data(data, batch_sizes, hx, params,
/// has_biases, num_layers, dropout, train, bidirectional, *, dtype, use_dynamic)` and the GRU
/// overloads (same without `dtype` / `use_dynamic`, `hx` one tensor): returns (output, h_n)
/// and c_n for an LSTM.
fn quantized_rnn_op(a: &mut Args<'_>, kind: CellKind, layout: Layout) -> Result<IValue> {
    // the packed overloads insert batch_sizes after the sequence
    let shift = usize::from(layout == Layout::Packed);
    let hx_index = 1 + shift;
    let hx = match kind {
        CellKind::Lstm => {
            // `dtype` and `use_dynamic` change nothing in ATen's result: the cell objects
            // decide the arithmetic
            let hx = a.tensor_list(hx_index)?;
            check_size(a.op, "the length of hx ([h0, c0])", 2, hx.len() as i64)?;
            hx
        }
        CellKind::Gru => vec![a.tensor(hx_index)?],
    };
    let params = a.list(hx_index + 1)?.to_vec();
    let layers = layer_args(a, hx_index + 3)?;
    let cells = params
        .iter()
        .map(|p| cell_of(a.op, p, a.ctx.quantized_engine))
        .collect::<Result<Vec<_>>>()?;
    let input = a.tensor(0)?;
    match layout {
        Layout::Padded => {
            let batch_first = a.bool(8)?;
            padded_rnn(a.op, kind, &input, batch_first, &hx, &cells, &layers)
        }
        Layout::Packed => {
            let sizes = crate::ops::packed::batch_sizes(a.op, &a.tensor(1)?)?;
            packed_rnn(a.op, kind, &input, &sizes, &hx, &cells, &layers)
        }
    }
}

/// `.input`: a `[T, B, F]` (`[B, T, F]` batch first) sequence run as packed data with `T`
/// steps of `B` rows.
fn padded_rnn(
    op: &str,
    kind: CellKind,
    input: &Tensor,
    batch_first: bool,
    hx: &[Tensor],
    cells: &[Cell],
    layers: &LayerArgs,
) -> Result<IValue> {
    check_rank(op, "input", RankRequirement::Exactly(3), input.shape())?;
    let s = input.shape();
    let (t, b, f) = if batch_first {
        (s[1], s[0], s[2])
    } else {
        (s[0], s[1], s[2])
    };
    let raw = input.to_vec::<f32>()?;
    let rows = if batch_first {
        swap_time_batch(&raw, b, t, f)
    } else {
        raw
    };
    let sizes = vec![b; t];
    let (out, feat, finals) = run_layers(
        op,
        kind,
        Packed {
            rows: &rows,
            sizes: &sizes,
            feat: f,
        },
        b,
        hx,
        cells,
        layers,
    )?;
    let out = if batch_first {
        Tensor::from_vec(swap_time_batch(&out, t, b, feat), &[b, t, feat])?
    } else {
        Tensor::from_vec(out, &[t, b, feat])?
    };
    results(out, finals)
}

/// `.data`: packed rows `[N, F]` with their `batch_sizes`.
fn packed_rnn(
    op: &str,
    kind: CellKind,
    data: &Tensor,
    sizes: &[usize],
    hx: &[Tensor],
    cells: &[Cell],
    layers: &LayerArgs,
) -> Result<IValue> {
    check_rank(op, "data", RankRequirement::Exactly(2), data.shape())?;
    let (n, f) = (data.shape()[0], data.shape()[1]);
    check_size(
        op,
        "the sum of batch_sizes (data.size(0))",
        n as i64,
        sizes.iter().sum::<usize>() as i64,
    )?;
    let rows = data.to_vec::<f32>()?;
    let batch = sizes.first().copied().unwrap_or(0);
    let (out, feat, finals) = run_layers(
        op,
        kind,
        Packed {
            rows: &rows,
            sizes,
            feat: f,
        },
        batch,
        hx,
        cells,
        layers,
    )?;
    results(Tensor::from_vec(out, &[n, feat])?, finals)
}

/// `[outer, inner, f]` rows reordered as `[inner, outer, f]`.
fn swap_time_batch(xs: &[f32], outer: usize, inner: usize, f: usize) -> Vec<f32> {
    let mut out = vec![0f32; xs.len()];
    for o in 0..outer {
        for i in 0..inner {
            let src = (o * inner + i) * f;
            let dst = (i * outer + o) * f;
            out[dst..dst + f].copy_from_slice(&xs[src..src + f]);
        }
    }
    out
}

/// The final states: h_n (and c_n) with their `[L * D, B, H]` shape.
struct Finals {
    h: Vec<f32>,
    c: Vec<f32>,
    shape: Vec<usize>,
    lstm: bool,
}

fn results(out: Tensor, finals: Finals) -> Result<IValue> {
    let mut items = vec![
        IValue::Tensor(out),
        IValue::Tensor(Tensor::from_vec(finals.h, &finals.shape)?),
    ];
    if finals.lstm {
        items.push(IValue::Tensor(Tensor::from_vec(finals.c, &finals.shape)?));
    }
    Ok(IValue::Tuple(Tuple::new(items)))
}

/// The layer stack over packed `input` (`batch` entries); returns the last layer's output
/// rows, their width (`D * H`) and the final states.
fn run_layers(
    op: &str,
    kind: CellKind,
    input: Packed<'_>,
    batch: usize,
    hx: &[Tensor],
    cells: &[Cell],
    layers: &LayerArgs,
) -> Result<(Vec<f32>, usize, Finals)> {
    let dirs = if layers.bidirectional { 2 } else { 1 };
    check_size(
        op,
        "the number of cell parameters (layers x directions)",
        (layers.num_layers * dirs) as i64,
        cells.len() as i64,
    )?;
    let hshape = hx[0].shape().to_vec();
    let hsz = match hshape.as_slice() {
        [_, _, h] => *h,
        _ => {
            return Err(crate::ops::kernels::rank_mismatch(
                op,
                "hx",
                RankRequirement::Exactly(3),
                &hshape,
            ))
        }
    };
    let h0 = hx[0].to_vec::<f32>()?;
    let c0 = match hx.get(1) {
        Some(c) => c.to_vec::<f32>()?,
        None => Vec::new(),
    };
    let state_len = batch * hsz;
    let expected = [layers.num_layers * dirs, batch, hsz];
    if hshape != expected {
        return Err(shape_mismatch(op, "hx", &expected, &hshape));
    }
    if kind == CellKind::Lstm {
        let c_shape = hx.get(1).map_or(&[][..], |c| c.shape());
        if c_shape != expected {
            return Err(shape_mismatch(op, "cx", &expected, c_shape));
        }
    }
    let sizes = input.sizes;
    let mut finals = Finals {
        h: Vec::with_capacity(h0.len()),
        c: Vec::with_capacity(c0.len()),
        shape: hshape,
        lstm: kind == CellKind::Lstm,
    };
    let total_rows = sizes.iter().sum::<usize>();
    let mut layer_in = input.rows.to_vec();
    let mut feat = input.feat;
    for layer in 0..layers.num_layers {
        let mut outs = Vec::with_capacity(dirs);
        for d in 0..dirs {
            let idx = layer * dirs + d;
            let range = idx * state_len..(idx + 1) * state_len;
            let state = State {
                h: h0[range.clone()].to_vec(),
                c: c0.get(range).map(<[f32]>::to_vec).unwrap_or_default(),
            };
            let packed = Packed {
                rows: &layer_in,
                sizes,
                feat,
            };
            let (o, last) = run_direction(kind, &packed, &cells[idx], state, hsz, d == 1)?;
            outs.push(o);
            finals.h.extend(last.h);
            finals.c.extend(last.c);
        }
        // the directions side by side on the feature axis
        let width = hsz * dirs;
        let mut next = vec![0f32; total_rows * width];
        for (d, o) in outs.iter().enumerate() {
            for r in 0..total_rows {
                next[r * width + d * hsz..r * width + (d + 1) * hsz]
                    .copy_from_slice(&o[r * hsz..(r + 1) * hsz]);
            }
        }
        layer_in = next;
        feat = width;
    }
    Ok((layer_in, feat, finals))
}
