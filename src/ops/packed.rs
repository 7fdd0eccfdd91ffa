//! Packed sequences (`nn.utils.rnn.PackedSequence`): `_pack_padded_sequence`,
//! `_pad_packed_sequence`, and the RNN `.data` overloads that run on packed data.
//!
//! Packed data holds time step after time step, each with the batch entries still running
//! (`batch_sizes[t]` of them, non-increasing: sequences are sorted longest first). The `.data`
//! overloads run each sequence on its own through the padded (`.input`) kernel, so every
//! sequence starts and ends its recurrence (both directions) at its own length.

use super::{Args, Kernel, Registry};
use crate::tensor::Tensor;
use crate::values::{IValue, List, Tuple};

type R<T = IValue> = crate::Result<T>;

fn err(msg: impl Into<String>) -> crate::Error {
    crate::error::RuntimeError::Other(msg.into()).into()
}

/// A PackedSequence's `batch_sizes`, checked positive and non-increasing.
pub(crate) fn batch_sizes(op: &str, t: &Tensor) -> R<Vec<usize>> {
    if t.dim() != 1 {
        return Err(err(format!("{op}: batch_sizes must be 1-D")));
    }
    let v = t.to_vec::<i64>()?;
    let mut out = Vec::with_capacity(v.len());
    for (i, &b) in v.iter().enumerate() {
        if b <= 0 || (i > 0 && b > v[i - 1]) {
            return Err(err(format!(
                "{op}: batch_sizes must be positive and non-increasing, got {v:?}"
            )));
        }
        out.push(b as usize);
    }
    Ok(out)
}

/// Row of packed data holding time step `t` of batch entry `b`.
fn offsets(sizes: &[usize]) -> Vec<usize> {
    let mut o = Vec::with_capacity(sizes.len());
    let mut acc = 0;
    for &s in sizes {
        o.push(acc);
        acc += s;
    }
    o
}

/// `[T, B, *]` rows of `x` (contiguous) as (rows, row length).
fn rows_of(x: &Tensor) -> R<(Tensor, usize)> {
    let x = x.contiguous()?;
    let row: usize = x.shape()[2..].iter().product();
    Ok((x, row))
}

/// Gather rows `idx` of a contiguous tensor viewed as [n, row] into a [idx.len(), *tail] one.
fn gather_rows(x: &Tensor, row: usize, idx: &[usize], tail: &[usize]) -> R<Tensor> {
    let flat = super::linalg::reshape(x, &[x.numel() / row.max(1), row])?;
    let index = Tensor::from_vec(
        idx.iter().map(|&i| i as i64).collect::<Vec<_>>(),
        &[idx.len()],
    )?;
    let picked = super::index::index_select(&flat, 0, &index)?;
    let mut shape = vec![idx.len()];
    shape.extend_from_slice(tail);
    super::linalg::reshape(&picked, &shape)
}

/// `_pack_padded_sequence(input, lengths, batch_first) -> (data, batch_sizes)`.
fn pack(a: &mut Args) -> R {
    let input = a.tensor(0)?;
    let lengths = a.tensor(1)?;
    if input.dim() < 2 {
        return Err(err(format!("{}: input must have at least 2 dims", a.op)));
    }
    let input = if a.bool(2)? {
        super::shape::transpose(&input, 0, 1)?
    } else {
        input
    };
    let (t_max, b) = (input.shape()[0], input.shape()[1]);
    let lv = lengths.to_vec::<i64>()?;
    if lengths.dim() != 1 || lv.len() != b {
        return Err(err(format!(
            "{}: Expected `len(lengths)` to be equal to batch_size, but got {} (batch_size={b})",
            a.op,
            lv.len()
        )));
    }
    if lv.last().is_some_and(|&l| l <= 0) {
        return Err(err(format!(
            "{}: Length of all samples has to be greater than 0, but found an element in 'lengths' that is <= 0",
            a.op
        )));
    }
    if lv.windows(2).any(|w| w[0] < w[1]) {
        return Err(err(format!(
            "{}: `lengths` array must be sorted in decreasing order when `enforce_sorted` is True",
            a.op
        )));
    }
    let longest = lv.first().copied().unwrap_or(0) as usize;
    if longest > t_max {
        return Err(err(format!(
            "{}: a length ({longest}) exceeds the padded length {t_max}",
            a.op
        )));
    }
    let mut sizes = Vec::with_capacity(longest);
    let mut idx = Vec::new();
    for t in 0..longest {
        let n = lv.iter().filter(|&&l| l as usize > t).count();
        sizes.push(n as i64);
        idx.extend((0..n).map(|k| t * b + k));
    }
    let (x, row) = rows_of(&input)?;
    let data = gather_rows(&x, row, &idx, &input.shape()[2..])?;
    let sizes = Tensor::from_vec(sizes.clone(), &[sizes.len()])?;
    Ok(IValue::Tuple(Tuple::new(vec![
        IValue::Tensor(data),
        IValue::Tensor(sizes),
    ])))
}

/// `_pad_packed_sequence(data, batch_sizes, batch_first, padding_value, total_length)
/// -> (padded, lengths)`.
fn pad(a: &mut Args) -> R {
    let data = a.tensor(0)?;
    let sizes = batch_sizes(a.op, &a.tensor(1)?)?;
    let batch_first = a.bool(2)?;
    let value = a.scalar(3)?;
    let total = a.int(4)?;
    let t_max = sizes.len();
    let t_out = if total > 0 {
        if (total as usize) < t_max {
            return Err(err(format!(
                "{}: Expected total_length to be at least the length of the longest sequence \
                 ({t_max}), but got total_length={total}",
                a.op
            )));
        }
        total as usize
    } else {
        t_max
    };
    let b = sizes.first().copied().unwrap_or(0);
    let tail = data.shape()[1..].to_vec();
    let mut shape = vec![t_out, b];
    shape.extend_from_slice(&tail);
    let out = Tensor::zeros(&shape, data.dtype())?;
    out.fill(value)?;
    let offs = offsets(&sizes);
    for (t, (&n, &o)) in sizes.iter().zip(&offs).enumerate() {
        let src = super::shape::narrow(&data, 0, o as i64, n as i64)?;
        let dst = super::shape::narrow(&super::shape::select(&out, 0, t as i64)?, 0, 0, n as i64)?;
        dst.copy_from(&src)?;
    }
    let lengths: Vec<i64> = (0..b)
        .map(|k| sizes.iter().filter(|&&n| n > k).count() as i64)
        .collect();
    let out = if batch_first {
        super::shape::transpose(&out, 0, 1)?.contiguous()?
    } else {
        out
    };
    Ok(IValue::Tuple(Tuple::new(vec![
        IValue::Tensor(out),
        IValue::Tensor(Tensor::from_vec(lengths, &[b])?),
    ])))
}

/// Entry `b` of a [L*D, B, H] state as [L*D, 1, H].
fn state_of(h: &Tensor, b: usize) -> R<Tensor> {
    super::shape::narrow(h, 1, b as i64, 1)?.contiguous()
}

/// lstm.data / gru.data / rnn_tanh.data / rnn_relu.data: (data, batch_sizes, hx, params,
/// has_biases, num_layers, dropout, train, bidirectional).
fn rnn_data(a: &mut Args, name: &str, input_kernel: Kernel, lstm: bool) -> R {
    let data = a.tensor(0)?;
    let sizes = batch_sizes(a.op, &a.tensor(1)?)?;
    let states: Vec<Tensor> = if lstm {
        a.tensor_list(2)?
    } else {
        vec![a.tensor(2)?]
    };
    let params = a.get(3)?.clone();
    let rest: Vec<IValue> = (4..9).map(|i| a.get(i).cloned()).collect::<R<_>>()?;
    if data.dim() != 2 {
        return Err(err(format!("{}: packed data must be 2-D", a.op)));
    }
    let offs = offsets(&sizes);
    let b = sizes.first().copied().unwrap_or(0);
    let mut outs: Vec<Option<Tensor>> = vec![None; data.shape()[0]];
    let mut finals: Vec<Vec<Tensor>> = vec![Vec::new(); states.len()];
    let (x, row) = rows_of(&super::linalg::reshape(
        &data,
        &[data.shape()[0], 1, data.shape()[1]],
    )?)?;
    for k in 0..b {
        let len = sizes.iter().filter(|&&n| n > k).count();
        let rows: Vec<usize> = (0..len).map(|t| offs[t] + k).collect();
        let xk = gather_rows(&x, row, &rows, &[1, data.shape()[1]])?;
        let hk: Vec<IValue> = states
            .iter()
            .map(|h| state_of(h, k).map(IValue::Tensor))
            .collect::<R<_>>()?;
        let mut args = vec![IValue::Tensor(xk)];
        if lstm {
            args.push(IValue::List(List::new(
                crate::values::types::Type::Tensor,
                hk,
            )));
        } else {
            args.extend(hk);
        }
        args.push(params.clone());
        args.extend(rest.iter().cloned());
        args.push(IValue::Bool(false));
        let res = input_kernel(&mut Args::new(a.op, &mut args, a.ctx))?;
        let IValue::Tuple(res) = res else {
            return Err(err(format!("{}: {name}.input returned no tuple", a.op)));
        };
        let items = res.items();
        let o = items
            .first()
            .and_then(|v| v.as_tensor())
            .ok_or_else(|| err(format!("{}: no output", a.op)))?;
        for (t, &r) in rows.iter().enumerate() {
            // output row t of the [len, 1, H*D] result, as [1, H*D]
            outs[r] = Some(super::shape::select(o, 0, t as i64)?);
        }
        for (s, v) in finals.iter_mut().zip(&items[1..]) {
            s.push(
                v.as_tensor()
                    .cloned()
                    .ok_or_else(|| err(format!("{}: no final state", a.op)))?,
            );
        }
    }
    let outs: Vec<Tensor> = outs
        .into_iter()
        .map(|o| o.ok_or_else(|| err(format!("{}: batch_sizes do not cover the data", a.op))))
        .collect::<R<_>>()?;
    let mut result = vec![IValue::Tensor(super::shape::cat(&outs, 0)?)];
    for s in finals {
        result.push(IValue::Tensor(super::shape::cat(&s, 1)?));
    }
    Ok(IValue::Tuple(Tuple::new(result)))
}

// One kernel per overload: the `.input` kernel each runs is fixed at registration.
fn lstm_data(a: &mut Args) -> R {
    rnn_data(a, "aten::lstm", super::rnn::lstm, true)
}
fn gru_data(a: &mut Args) -> R {
    rnn_data(a, "aten::gru", super::rnn::gru, false)
}
fn rnn_tanh_data(a: &mut Args) -> R {
    rnn_data(a, "aten::rnn_tanh", super::rnn::rnn_tanh, false)
}
fn rnn_relu_data(a: &mut Args) -> R {
    rnn_data(a, "aten::rnn_relu", super::rnn::rnn_relu, false)
}

/// pad_sequence(sequences, batch_first, padding_value, padding_side): the sequences (each
/// `[L_i, *]`) stacked into `[L_max, B, *]` (`[B, L_max, *]` batch first), filled with
/// `padding_value` after each sequence ("right") or before it ("left").
fn pad_sequence(a: &mut Args) -> R {
    let seqs = a.tensor_list(0)?;
    let batch_first = a.bool(1)?;
    let value = a.double(2)?;
    let left = match &*a.str(3)? {
        "right" => false,
        "left" => true,
        other => {
            return Err(err(format!(
                "pad_sequence: Expected padding_side to be one of left or right, but got {other}."
            )))
        }
    };
    let first = seqs
        .first()
        .ok_or_else(|| err("pad_sequence: received an empty list of sequences"))?;
    if first.dim() == 0 {
        return Err(err("pad_sequence: sequences must have at least one dim"));
    }
    let tail = first.shape()[1..].to_vec();
    let longest = seqs
        .iter()
        .map(|s| s.shape().first().copied().unwrap_or(0))
        .max();
    let longest = longest.unwrap_or(0);
    let mut shape = if batch_first {
        vec![seqs.len(), longest]
    } else {
        vec![longest, seqs.len()]
    };
    shape.extend(&tail);
    let out = Tensor::zeros(&shape, first.dtype())?;
    out.fill(crate::tensor::Scalar::Float(value))?;
    for (i, s) in seqs.iter().enumerate() {
        if s.dim() == 0 || s.shape()[1..] != tail[..] || s.dtype() != first.dtype() {
            return Err(err(format!(
                "pad_sequence: sequence {i} is {:?} {}, the first {:?} {}",
                s.shape(),
                s.dtype(),
                first.shape(),
                first.dtype()
            )));
        }
        let len = s.shape()[0] as i64;
        let start = if left { longest as i64 - len } else { 0 };
        // (this sequence's slot is [L_max, *] in either layout)
        let slot = super::shape::select(&out, if batch_first { 0 } else { 1 }, i as i64)?;
        super::shape::narrow(&slot, 0, start, len)?.copy_from(s)?;
    }
    Ok(IValue::Tensor(out))
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::_pack_padded_sequence", pack);
    r.add("aten::_pad_packed_sequence", pad);
    r.add("aten::lstm.data", lstm_data);
    r.add("aten::gru.data", gru_data);
    r.add("aten::rnn_tanh.data", rnn_tanh_data);
    r.add("aten::rnn_relu.data", rnn_relu_data);
    r.add("aten::pad_sequence", pad_sequence);
}
