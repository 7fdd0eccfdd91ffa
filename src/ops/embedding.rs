//! Kernels: embedding lookup, embedding_bag (sum / mean / max) and one_hot.

use super::kernels::{check_rank, invalid_argument, rank_mismatch, shape_mismatch, wrong_dtype};
use super::{Args, Registry};
#[allow(unused_imports)]
use crate::tensor::Element as _;
use crate::tensor::{DType, Tensor};
use crate::tensor::{RankRequirement, TensorError};
use crate::values::{IValue, Tuple};
#[allow(unused_imports)]
use num_traits::{Float as _, One as _, Zero as _};

/// Indices as i64, validated against `rows`.
fn indices(op: &str, idx: &Tensor, rows: usize) -> crate::Result<Vec<i64>> {
    if !matches!(idx.dtype(), DType::Int64 | DType::Int32) {
        return Err(wrong_dtype(op, "indices", "Long or Int", idx.dtype()));
    }
    let v = idx.to_vec::<i64>()?;
    if let Some(&bad) = v.iter().find(|&&i| i < 0 || i as usize >= rows) {
        // PyTorch's message names neither the index nor the size
        return Err(crate::tensor::TensorError::LookupOutOfRange {
            op: op.to_string(),
            index: bad,
            size: rows,
        }
        .into());
    }
    Ok(v)
}

/// Gather rows of a 2-d `weight` (any dtype) by `idx`; result shape `lead + [dim]`.
fn gather_rows(op: &str, weight: &Tensor, idx: &[i64], lead: &[usize]) -> crate::Result<Tensor> {
    if weight.dim() != 2 {
        return Err(rank_mismatch(
            op,
            "weight",
            RankRequirement::Exactly(2),
            weight.shape(),
        ));
    }
    let d = weight.shape()[1];
    let mut shape = lead.to_vec();
    shape.push(d);
    let out = Tensor::zeros(&shape, weight.dtype())?;
    crate::dispatch_all!(weight.dtype(), op, |T| {
        let w_guard = weight.read::<T>()?;
        let w = w_guard.view();
        let mut o_guard = out.write::<T>()?;
        let o = super::linalg::slice_mut_of(&mut o_guard)?;
        if d > 0 {
            for (row, &i) in o.chunks_mut(d).zip(idx) {
                let src = w.index_axis(ndarray::Axis(0), i as usize);
                // a row of a contiguous table is one copy; the element iterator was 3% of
                // BERT's call (three tables, 128 tokens)
                match src.as_slice() {
                    Some(s) => row.copy_from_slice(s),
                    None => row
                        .iter_mut()
                        .zip(src.iter())
                        .for_each(|(dst, &v)| *dst = v),
                }
            }
        }
        Ok::<(), crate::Error>(())
    })?;
    Ok(out)
}

/// embedding(weight, indices, padding_idx, scale_grad_by_freq, sparse)
fn embedding(a: &mut Args) -> crate::Result<IValue> {
    let (w, idx) = (a.tensor(0)?, a.tensor(1)?);
    let rows = w.shape().first().copied().unwrap_or(0);
    let iv = indices(a.op, &idx, rows)?;
    Ok(IValue::Tensor(gather_rows(a.op, &w, &iv, idx.shape())?))
}

/// embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse,
/// per_sample_weights, include_last_offset[, padding_idx]) -> (out, offset2bag, bag_size,
/// max_indices), the bookkeeping outputs as PyTorch's CPU kernel gives them.
fn embedding_bag(a: &mut Args) -> crate::Result<IValue> {
    let (w, idx) = (a.tensor(0)?, a.tensor(1)?);
    let mode = a.int(4)?;
    let psw = a.opt_tensor(6)?;
    let include_last = a.bool(7)?;
    let padding_idx = if a.len() > 8 { a.opt_int(8)? } else { None };
    if w.dim() != 2 {
        return Err(rank_mismatch(
            a.op,
            "weight",
            RankRequirement::Exactly(2),
            w.shape(),
        ));
    }
    let (rows, d) = (w.shape()[0], w.shape()[1]);
    if matches!(idx.dtype(), DType::Int64 | DType::Int32) {
        let v = idx.to_vec::<i64>()?;
        if let Some((k, bad)) = v
            .iter()
            .enumerate()
            .find(|(_, &i)| i < 0 || i as usize >= rows)
        {
            // PyTorch's message, kept: tests compare it
            return Err(TensorError::Index(format!(
                "Index {k} of input takes value {bad} which is not in the valid range [0, {rows})"
            ))
            .into());
        }
    }
    let iv = indices(a.op, &idx, rows)?;
    // PyTorch's CPU sum path (fbgemm) skips the bookkeeping outputs when no padding index is
    // given; it is also the one path where `include_last_offset` ends the last bag at the last
    // offset rather than at the end of the input
    let padding_idx = padding_idx.filter(|&p| p >= 0);
    let fast_sum = mode == 0 && padding_idx.is_none();
    let n = iv.len();
    // bag b covers flat[starts[b]..ends[b]]
    let (flat, starts, ends): (Vec<i64>, Vec<usize>, Vec<usize>) = if idx.dim() == 2 {
        let (b, m) = (idx.shape()[0], idx.shape()[1]);
        (
            iv,
            (0..b).map(|i| i * m).collect(),
            (0..b).map(|i| (i + 1) * m).collect(),
        )
    } else {
        let offs = a.tensor(2)?.to_vec::<i64>()?;
        if let Some(&first) = offs.first() {
            if first != 0 {
                return Err(invalid_argument(
                    "embedding_bag",
                    "offsets[0]",
                    "must be 0 (the first bag starts at position 0)",
                    first,
                ));
            }
        }
        if let Some(&last) = offs.last() {
            if last > n as i64 {
                return Err(invalid_argument(
                    "embedding_bag",
                    "offsets[-1]",
                    format!("must be at most input's length {n}"),
                    last,
                ));
            }
        }
        let offs: Vec<usize> = offs.iter().map(|&o| (o.max(0) as usize).min(n)).collect();
        let nb = if include_last {
            offs.len().saturating_sub(1)
        } else {
            offs.len()
        };
        let ends = (0..nb)
            .map(|b| {
                if b + 1 < nb || (include_last && fast_sum) {
                    offs[b + 1].max(offs[b])
                } else {
                    n
                }
            })
            .collect();
        (iv, offs[..nb].to_vec(), ends)
    };
    let nb = starts.len();
    let weights = match &psw {
        Some(p) => {
            if p.shape() != idx.shape() {
                return Err(shape_mismatch(
                    "embedding_bag",
                    "per_sample_weights (input's shape)",
                    idx.shape(),
                    p.shape(),
                ));
            }
            if mode != 0 {
                return Err(invalid_argument(
                    a.op,
                    "mode",
                    "must be 0 ('sum') with per_sample_weights",
                    mode,
                ));
            }
            Some(p.to_vec::<f64>()?)
        }
        None => None,
    };
    let wv = w.to_vec::<f64>()?;
    let mut out = vec![0f64; nb * d];
    let mut bag_size = vec![0i64; nb];
    let mut offset2bag = vec![0i64; if fast_sum { 0 } else { n }];
    // an empty bag's max index is 0, as PyTorch's
    let mut max_idx = vec![0i64; if mode == 2 { nb * d } else { 0 }];
    for b in 0..nb {
        let (s, e) = (starts[b], ends[b]);
        let row = &mut out[b * d..(b + 1) * d];
        let mut count = 0;
        for p in s..e {
            if !fast_sum {
                offset2bag[p] = b as i64;
            }
            let i = flat[p];
            if Some(i) == padding_idx {
                continue;
            }
            let src = &wv[i as usize * d..(i as usize + 1) * d];
            let scale = weights.as_ref().map_or(1.0, |w| w[p]);
            for (j, (r, &v)) in row.iter_mut().zip(src).enumerate() {
                if mode == 2 {
                    if count == 0 || v > *r {
                        *r = v;
                        max_idx[b * d + j] = i;
                    }
                } else {
                    *r += v * scale;
                }
            }
            count += 1;
        }
        if mode == 1 && count > 0 {
            row.iter_mut().for_each(|r| *r /= count as f64);
        }
        // the sum mode reports no bag sizes
        bag_size[b] = if mode == 0 { 0 } else { count };
    }
    let out = Tensor::from_vec(out, &[nb, d])?.to_dtype(w.dtype())?;
    let offset2bag_len = offset2bag.len();
    // aten::embedding_bag's sum path sizes its (zero) bag sizes by the offsets, counting the
    // last one that include_last_offset adds
    if fast_sum && a.len() <= 8 && idx.dim() == 1 && include_last {
        bag_size.push(0);
    }
    let bag_size_len = bag_size.len();
    let bag_size = Tensor::from_vec(bag_size, &[bag_size_len])?;
    Ok(IValue::Tuple(Tuple::new(vec![
        IValue::Tensor(out),
        IValue::Tensor(Tensor::from_vec(offset2bag, &[offset2bag_len])?),
        IValue::Tensor(bag_size.clone()),
        // PyTorch returns the bag sizes as max_indices outside the max mode
        IValue::Tensor(if mode == 2 {
            Tensor::from_vec(max_idx, &[nb, d])?
        } else {
            bag_size.deep_clone()?
        }),
    ])))
}

/// one_hot(self, num_classes=-1)
fn one_hot(a: &mut Args) -> crate::Result<IValue> {
    let x = a.tensor(0)?;
    if x.dtype() != DType::Int64 {
        return Err(wrong_dtype(a.op, "self", "int64", x.dtype()));
    }
    let v = x.to_vec::<i64>()?;
    if v.iter().any(|&i| i < 0) {
        return Err(invalid_argument(
            a.op,
            "class values",
            "must be non-negative",
            v.iter().copied().min().unwrap_or(0),
        ));
    }
    let n = a.int(1)?;
    let classes = if n == -1 {
        if v.is_empty() {
            return Err(invalid_argument(
                a.op,
                "num_classes",
                "must be given (not -1) for an empty tensor",
                n,
            ));
        }
        v.iter().copied().max().unwrap_or(0) + 1
    } else {
        if v.iter().any(|&i| i >= n) {
            // PyTorch's message, kept: tests compare it
            return Err(super::kernels::value_err(format!(
                "{}: Class values must be smaller than num_classes.",
                a.op
            )));
        }
        n
    };
    let classes = usize::try_from(classes)
        .map_err(|_| invalid_argument(a.op, "num_classes", "must be -1 or non-negative", n))?;
    let mut shape = x.shape().to_vec();
    shape.push(classes);
    let mut data = vec![0i64; v.len() * classes];
    for (k, &i) in v.iter().enumerate() {
        data[k * classes + i as usize] = 1;
    }
    Ok(IValue::Tensor(Tensor::from_vec(data, &shape)?))
}

/// Rescales the rows of `weight` named by `idx` (each once) whose `norm_type`-norm exceeds
/// `max_norm` to norm `max_norm` (PyTorch's `max_norm / (norm + 1e-7)` factor).
fn renorm_rows(
    op: &str,
    weight: &Tensor,
    idx: &Tensor,
    max_norm: f64,
    norm_type: f64,
) -> crate::Result<()> {
    if weight.dim() != 2 {
        return Err(rank_mismatch(
            op,
            "weight",
            RankRequirement::Exactly(2),
            weight.shape(),
        ));
    }
    let (rows, dim) = (weight.shape()[0], weight.shape()[1]);
    let mut ids = indices(op, idx, rows)?;
    ids.sort_unstable();
    ids.dedup();
    let mut w = weight.contiguous()?.to_vec::<f64>()?;
    for i in ids {
        let row = &mut w[i as usize * dim..][..dim];
        let norm = if norm_type == f64::INFINITY {
            row.iter().fold(0.0, |m: f64, v| m.max(v.abs()))
        } else if norm_type == 0.0 {
            row.iter().filter(|v| **v != 0.0).count() as f64
        } else {
            row.iter()
                .map(|v| v.abs().powf(norm_type))
                .sum::<f64>()
                .powf(1.0 / norm_type)
        };
        if norm > max_norm {
            let scale = max_norm / (norm + 1e-7);
            row.iter_mut().for_each(|v| *v *= scale);
        }
    }
    weight.copy_from(&Tensor::from_vec(w, weight.shape())?)
}

/// embedding_renorm_(self, indices, max_norm, norm_type): in place, returns self.
fn embedding_renorm_(a: &mut Args) -> crate::Result<IValue> {
    let w = a.tensor(0)?;
    renorm_rows(a.op, &w, &a.tensor(1)?, a.double(2)?, a.double(3)?)?;
    Ok(IValue::Tensor(w))
}

/// embedding_renorm: the renormalized copy.
fn embedding_renorm(a: &mut Args) -> crate::Result<IValue> {
    let w = a.tensor(0)?.deep_clone()?;
    renorm_rows(a.op, &w, &a.tensor(1)?, a.double(2)?, a.double(3)?)?;
    Ok(IValue::Tensor(w))
}

/// `_rowwise_prune(weight, mask, compressed_indices_dtype)`: the rows of a 2-d `weight` where
/// `mask` is true, and per original row its index among the kept rows (-1 for a pruned row).
fn rowwise_prune(a: &mut Args) -> crate::Result<IValue> {
    let weight = a.tensor(0)?;
    let mask = a.tensor(1)?;
    let dtype = a.dtype(2)?;
    if !matches!(dtype, DType::Int32 | DType::Int64) {
        return Err(invalid_argument(
            a.op,
            "compressed_indices_dtype",
            "must be int32 or int64",
            dtype,
        ));
    }
    check_rank(a.op, "weights", RankRequirement::Exactly(2), weight.shape())?;
    if mask.dtype() != DType::Bool {
        return Err(TensorError::DTypeMismatch {
            expected: DType::Bool,
            got: mask.dtype(),
        }
        .into());
    }
    if mask.dim() != 1 || mask.shape()[0] != weight.shape()[0] {
        return Err(shape_mismatch(
            a.op,
            "mask (one entry per row of weights)",
            &[weight.shape()[0]],
            mask.shape(),
        ));
    }

    let keep: Vec<bool> = mask
        .contiguous()?
        .to_vec::<f64>()?
        .iter()
        .map(|&m| m != 0.0)
        .collect();
    let mut next = 0i64;
    let compressed: Vec<i64> = keep
        .iter()
        .map(|&k| {
            if k {
                next += 1;
                next - 1
            } else {
                -1
            }
        })
        .collect();
    let rows: Vec<i64> = (0..keep.len() as i64)
        .filter(|&i| keep[i as usize])
        .collect();
    let kept =
        crate::ops::index::index_select(&weight, 0, &Tensor::from_vec(rows, &[next as usize])?)?;
    let compressed = Tensor::from_vec(compressed, &[keep.len()])?.to_dtype(dtype)?;
    Ok(IValue::Tuple(Tuple::new(vec![
        kept.into(),
        compressed.into(),
    ])))
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::_rowwise_prune", rowwise_prune);
    // the same in-place renorm, for the functional embedding's max_norm path
    r.add("aten::_no_grad_embedding_renorm_", embedding_renorm_);
    r.add("aten::embedding", embedding);
    r.add_all(
        &[
            "aten::embedding_bag",
            "aten::embedding_bag.padding_idx",
            "aten::_embedding_bag",
            "aten::_embedding_bag_forward_only",
        ],
        embedding_bag,
    );
    r.add("aten::one_hot", one_hot);
    r.add("aten::embedding_renorm_", embedding_renorm_);
    r.add("aten::embedding_renorm", embedding_renorm);
}
