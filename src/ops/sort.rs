//! Kernels: sorting family — sort/argsort/msort (stable; NaN sorts as the largest value, as in
//! PyTorch), topk, kthvalue, unique (+ consecutive and per-dim variants), searchsorted,
//! bucketize, histc, bincount, cummax/cummin, isin.
//!
//! Row-wise ops move the reduced dim last and work on contiguous rows, then move it back.

use super::index::Numeric;
use super::kernels::operand::write_inplace;
use super::kernels::{
    check_rank, invalid_argument, not_implemented_for, rank_mismatch, shape_mismatch, stl_sort,
    wrong_dtype,
};
use super::shape::{movedim, reshape, shape_err, value_err, wdim};
use super::{Args, Registry};
use crate::tensor::{DType, RankRequirement, Scalar, Tensor, TensorError};
use crate::values::{IValue, Tuple};
use std::cmp::Ordering;

type R<T> = crate::Result<T>;

/// `t` with `dim` moved last, contiguous, plus the row length. 0-d tensors are one row of one.
fn rows(t: &Tensor, dim: i64) -> R<(Tensor, usize)> {
    if t.dim() == 0 {
        wdim(dim, 0)?;
        return Ok((reshape(t, &[1])?, 1));
    }
    let d = wdim(dim, t.dim())?;
    let moved = movedim(t, &[d as i64], &[-1])?.contiguous()?;
    Ok((moved, t.shape()[d]))
}

/// Undo [`rows`]: `out` has the row dim last with `k` entries; put it back at `dim` of `like`.
fn unrows(out: Vec<Tensor>, like: &Tensor, dim: i64, keep_row: bool) -> R<Vec<Tensor>> {
    out.into_iter()
        .map(|o| {
            if like.dim() == 0 {
                return reshape(&o, &[]);
            }
            let d = wdim(dim, like.dim())? as i64;
            if keep_row {
                movedim(&o, &[-1], &[d])?.contiguous()
            } else {
                Ok(o)
            }
        })
        .collect()
}

fn no_complex(t: &Tensor, op: &str) -> R<()> {
    if t.dtype().is_complex() {
        return Err(wrong_dtype(
            op,
            "input",
            "a real (not complex) tensor",
            t.dtype(),
        ));
    }
    Ok(())
}

/// How the rows are ordered before their first `k` entries are kept.
#[derive(Clone, Copy)]
enum RowOrder {
    /// A stable sort.
    Sort { descending: bool },
    /// PyTorch's CPU `topk` (TopKImpl.h): `std::partial_sort` when `k * 64 <= n`, otherwise
    /// `std::nth_element` then, if `sorted`, `std::sort` of the entries before the k-th. Neither
    /// is stable, so equal values come out in libstdc++'s order, as in PyTorch.
    TopK { largest: bool, sorted: bool },
}

/// Order each row, keeping the first `k` entries of every row: (values, int64 indices),
/// both shaped like the moved input with the last dim set to `k`.
fn sort_rows(t: &Tensor, dim: i64, order_by: RowOrder, k: usize, op: &str) -> R<(Tensor, Tensor)> {
    no_complex(t, op)?;
    let (m, n) = rows(t, dim)?;
    let mut shape: Vec<usize> = m.shape().to_vec();
    if let Some(last) = shape.last_mut() {
        *last = k;
    }
    let values = Tensor::zeros(&shape, t.dtype())?;
    let indices = Tensor::zeros(&shape, DType::Int64)?;
    if values.numel() == 0 {
        return Ok((values, indices));
    }
    crate::dispatch_real!(t.dtype(), op, |T| {
        let src_guard = m.read::<T>()?;
        let src = src_guard
            .as_slice()
            .ok_or_else(|| shape_err("contiguous rows"))?;
        let mut vals_guard = values.write::<T>()?;
        let vals = vals_guard
            .as_slice_mut()
            .ok_or_else(|| shape_err("fresh tensor"))?;
        let mut idxs_guard = indices.write::<i64>()?;
        let idxs = idxs_guard
            .as_slice_mut()
            .ok_or_else(|| shape_err("fresh tensor"))?;
        let mut order: Vec<usize> = Vec::with_capacity(n);
        for ((row, vrow), irow) in src
            .chunks(n.max(1))
            .zip(vals.chunks_mut(k.max(1)))
            .zip(idxs.chunks_mut(k.max(1)))
        {
            order.clear();
            order.extend(0..row.len());
            match order_by {
                RowOrder::Sort { descending } => order.sort_by(|&a, &b| {
                    let c = Numeric::total_cmp(&row[a], &row[b]);
                    if descending {
                        c.reverse()
                    } else {
                        c
                    }
                }),
                RowOrder::TopK { largest, sorted } => {
                    let first = if largest {
                        Ordering::Greater
                    } else {
                        Ordering::Less
                    };
                    let before =
                        |a: &usize, b: &usize| Numeric::total_cmp(&row[*a], &row[*b]) == first;
                    if k * 64 <= row.len() {
                        stl_sort::partial_sort(&mut order, k, &before);
                    } else if let Some(kth) = k.checked_sub(1) {
                        stl_sort::nth_element(&mut order, kth, &before);
                        if sorted {
                            stl_sort::sort(&mut order[..kth], &before);
                        }
                    }
                }
            }
            for ((v, i), &o) in vrow.iter_mut().zip(irow.iter_mut()).zip(&order) {
                *v = row[o];
                *i = o as i64;
            }
        }
        Ok::<(), crate::Error>(())
    })?;
    Ok((values, indices))
}

fn pair(a: Tensor, b: Tensor) -> IValue {
    IValue::Tuple(Tuple::new(vec![IValue::Tensor(a), IValue::Tensor(b)]))
}

fn sort(t: &Tensor, dim: i64, descending: bool) -> R<(Tensor, Tensor)> {
    let n = if t.dim() == 0 {
        1
    } else {
        t.shape()[wdim(dim, t.dim())?]
    };
    let (v, i) = sort_rows(t, dim, RowOrder::Sort { descending }, n, "sort")?;
    let mut out = unrows(vec![v, i], t, dim, true)?;
    let i = out.pop().ok_or_else(|| value_err("sort"))?;
    let v = out.pop().ok_or_else(|| value_err("sort"))?;
    Ok((v, i))
}

fn topk(t: &Tensor, k: i64, dim: i64, largest: bool, sorted: bool) -> R<(Tensor, Tensor)> {
    let n = if t.dim() == 0 {
        1
    } else {
        t.shape()[wdim(dim, t.dim())?]
    };
    if k < 0 || k as usize > n {
        return Err(invalid_argument(
            "topk",
            "k",
            format!("must be in [0, {n}] (the size of dim {dim})"),
            k,
        ));
    }
    let order = RowOrder::TopK { largest, sorted };
    let (v, i) = sort_rows(t, dim, order, k as usize, "topk")?;
    let mut out = unrows(vec![v, i], t, dim, true)?;
    let i = out.pop().ok_or_else(|| value_err("topk"))?;
    let v = out.pop().ok_or_else(|| value_err("topk"))?;
    Ok((v, i))
}

fn kthvalue(t: &Tensor, k: i64, dim: i64, keepdim: bool) -> R<(Tensor, Tensor)> {
    let n = if t.dim() == 0 {
        1
    } else {
        t.shape()[wdim(dim, t.dim())?]
    };
    if k < 1 || k as usize > n {
        return Err(invalid_argument(
            "kthvalue",
            "k",
            format!("must be in [1, {n}] (the size of dim {dim})"),
            k,
        ));
    }
    let (v, i) = sort(t, dim, false)?;
    if t.dim() == 0 {
        return Ok((v, i));
    }
    let d = wdim(dim, t.dim())? as i64;
    let pick = |x: &Tensor| -> R<Tensor> {
        let s = super::shape::narrow(x, d, k - 1, 1)?;
        let s = if keepdim {
            s
        } else {
            super::shape::squeeze_dims(&s, &[d as usize])?
        };
        s.contiguous()
    };
    Ok((pick(&v)?, pick(&i)?))
}

/// Groups of equal consecutive items: for items `0..n` ordered by `order`, returns
/// (representative item of each group, group id per position in order, group sizes).
fn group_sorted(
    order: &[usize],
    same: impl Fn(usize, usize) -> bool,
) -> (Vec<usize>, Vec<usize>, Vec<i64>) {
    let mut reps = Vec::new();
    let mut ids = Vec::with_capacity(order.len());
    let mut counts: Vec<i64> = Vec::new();
    for (p, &item) in order.iter().enumerate() {
        let new_group = p == 0 || !same(order[p - 1], item);
        if new_group {
            reps.push(item);
            counts.push(0);
        }
        if let Some(c) = counts.last_mut() {
            *c += 1;
        }
        ids.push(reps.len() - 1);
    }
    (reps, ids, counts)
}

fn long_tensor(v: Vec<i64>, shape: &[usize]) -> R<Tensor> {
    Ok(Tensor::from_vec(v, shape)?)
}

fn empty_long() -> R<Tensor> {
    long_tensor(vec![], &[0])
}

/// `torch.unique` over all elements: (sorted unique values, inverse shaped like the input,
/// counts). `consecutive` only merges neighbours (unique_consecutive).
fn unique_flat(
    t: &Tensor,
    consecutive: bool,
    return_inverse: bool,
    return_counts: bool,
) -> R<(Tensor, Tensor, Tensor)> {
    no_complex(t, "unique")?;
    let flat = reshape(t, &[-1])?.contiguous()?;
    let n = flat.numel();
    let (values, inverse, counts) = crate::dispatch_real!(t.dtype(), "unique", |T| {
        let data_guard = flat.read::<T>()?;
        let data = data_guard
            .as_slice()
            .ok_or_else(|| shape_err("contiguous"))?;
        let mut order: Vec<usize> = (0..n).collect();
        if !consecutive {
            order.sort_by(|&a, &b| Numeric::total_cmp(&data[a], &data[b]));
        }
        let (reps, ids, counts) = group_sorted(&order, |a, b| data[a] == data[b]);
        let vals: Vec<T> = reps.iter().map(|&i| data[i]).collect();
        let mut inverse = vec![0i64; n];
        for (&item, &g) in order.iter().zip(&ids) {
            inverse[item] = g as i64;
        }
        let u = vals.len();
        Ok::<_, crate::Error>((Tensor::from_vec(vals, &[u])?, inverse, counts))
    })?;
    let inv = if return_inverse {
        long_tensor(inverse, t.shape())?
    } else {
        empty_long()?
    };
    let cnt = if return_counts {
        let c = counts.len();
        long_tensor(counts, &[c])?
    } else {
        empty_long()?
    };
    Ok((values, inv, cnt))
}

/// `unique_dim` / `unique_dim_consecutive`: unique slices along `dim`.
fn unique_dim(t: &Tensor, dim: i64, consecutive: bool) -> R<(Tensor, Tensor, Tensor)> {
    no_complex(t, "unique_dim")?;
    let d = wdim(dim, t.dim())?;
    let moved = movedim(t, &[d as i64], &[0])?.contiguous()?;
    let rows_n = t.shape().get(d).copied().unwrap_or(1);
    let width = moved.numel().checked_div(rows_n).unwrap_or(0);
    let (reps, ids, counts, order) = crate::dispatch_real!(t.dtype(), "unique_dim", |T| {
        let data_guard = moved.read::<T>()?;
        let data = data_guard
            .as_slice()
            .ok_or_else(|| shape_err("contiguous"))?;
        let row = |i: usize| &data[i * width..(i + 1) * width];
        let mut order: Vec<usize> = (0..rows_n).collect();
        if !consecutive {
            order.sort_by(|&a, &b| {
                row(a)
                    .iter()
                    .zip(row(b))
                    .map(|(x, y)| Numeric::total_cmp(x, y))
                    .find(|c| *c != Ordering::Equal)
                    .unwrap_or(Ordering::Equal)
            });
        }
        let (reps, ids, counts) = group_sorted(&order, |a, b| row(a) == row(b));
        Ok::<_, crate::Error>((reps, ids, counts, order))
    })?;
    let picked = super::shape::gather_dim(&moved, 0, &reps)?;
    let values = movedim(&picked, &[0], &[d as i64])?.contiguous()?;
    let mut inverse = vec![0i64; rows_n];
    for (&item, &g) in order.iter().zip(&ids) {
        inverse[item] = g as i64;
    }
    let c = counts.len();
    Ok((
        values,
        long_tensor(inverse, &[rows_n])?,
        long_tensor(counts, &[c])?,
    ))
}

fn triple(a: Tensor, b: Tensor, c: Tensor) -> IValue {
    IValue::Tuple(Tuple::new(vec![
        IValue::Tensor(a),
        IValue::Tensor(b),
        IValue::Tensor(c),
    ]))
}

/// Comparison key for searchsorted: exact for integers, f64 otherwise.
#[derive(Clone, Copy, PartialEq, PartialOrd)]
enum Key {
    I(i64),
    F(f64),
}

fn keys(t: &Tensor, as_int: bool) -> R<Vec<Key>> {
    Ok(if as_int {
        t.to_vec::<i64>()?.into_iter().map(Key::I).collect()
    } else {
        t.to_vec::<f64>()?.into_iter().map(Key::F).collect()
    })
}

fn searchsorted(
    seq: &Tensor,
    input: &Tensor,
    out_int32: bool,
    right: bool,
    side: Option<&str>,
    sorter: Option<&Tensor>,
) -> R<Tensor> {
    let right = match side {
        Some("right") => true,
        Some("left") => {
            if right {
                return Err(invalid_argument(
                    "searchsorted",
                    "side",
                    "must not contradict right=True",
                    "'left'",
                ));
            }
            false
        }
        Some(other) => {
            return Err(invalid_argument(
                "searchsorted",
                "side",
                "must be 'left' or 'right'",
                format!("'{other}'"),
            ))
        }
        None => right,
    };
    no_complex(seq, "searchsorted")?;
    if seq.dim() == 0 {
        return Err(rank_mismatch(
            "searchsorted",
            "sorted_sequence",
            RankRequirement::AtLeast(1),
            seq.shape(),
        ));
    }
    let as_int = seq.dtype().is_integral(true) && input.dtype().is_integral(true);
    let n = seq.shape()[seq.dim() - 1];
    let mut s = keys(&seq.contiguous()?, as_int)?;
    if let Some(sorter) = sorter {
        if sorter.shape() != seq.shape() {
            return Err(shape_mismatch(
                "searchsorted",
                "sorter",
                seq.shape(),
                sorter.shape(),
            ));
        }
        let idx = sorter.to_vec::<i64>()?;
        let mut sorted = Vec::with_capacity(s.len());
        for (p, &i) in idx.iter().enumerate() {
            let row = p / n.max(1);
            if i < 0 || i as usize >= n {
                return Err(TensorError::IndexOutOfBounds {
                    index: i,
                    dim: seq.dim() - 1,
                    size: n,
                }
                .into());
            }
            sorted.push(s[row * n + i as usize]);
        }
        s = sorted;
    }
    let v = keys(&input.contiguous()?, as_int)?;
    let per_row = if seq.dim() == 1 {
        v.len()
    } else {
        if seq.shape()[..seq.dim() - 1] != input.shape()[..input.dim().saturating_sub(1)]
            || input.dim() != seq.dim()
        {
            return Err(invalid_argument(
                "searchsorted",
                "input's shape",
                format!(
                    "must match the first N-1 dimensions of sorted_sequence {:?} (or the sequence must be 1-D)",
                    seq.shape()
                ),
                format!("{:?}", input.shape()),
            ));
        }
        input.shape().last().copied().unwrap_or(1)
    };
    let out: Vec<i64> = v
        .iter()
        .enumerate()
        .map(|(p, x)| {
            let row = if seq.dim() == 1 {
                0
            } else {
                p / per_row.max(1)
            };
            let b = &s[row * n..(row + 1) * n];
            let pos = if right {
                b.partition_point(|y| !(y > x))
            } else {
                b.partition_point(|y| y < x)
            };
            pos as i64
        })
        .collect();
    let t = long_tensor(out, input.shape())?;
    if out_int32 {
        t.to_dtype(DType::Int32)
    } else {
        Ok(t)
    }
}

fn histc(t: &Tensor, bins: i64, min: f64, max: f64) -> R<Tensor> {
    if !t.dtype().is_floating_point() {
        return Err(not_implemented_for("histogram_cpu", t.dtype()));
    }
    if bins <= 0 {
        return Err(invalid_argument("histc", "bins", "must be > 0", bins));
    }
    let data = t.to_vec::<f64>()?;
    let (mut lo, mut hi) = (min, max);
    if lo == hi && !data.is_empty() {
        lo = data.iter().copied().fold(f64::INFINITY, f64::min);
        hi = data.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    }
    if lo == hi {
        lo -= 1.0;
        hi += 1.0;
    }
    if lo > hi || !lo.is_finite() || !hi.is_finite() {
        return Err(invalid_argument(
            "histc",
            "[min, max]",
            "must be finite with max larger than min",
            format!("[{lo}, {hi}]"),
        ));
    }
    let nb = bins as usize;
    let mut counts = vec![0f64; nb];
    let bin = |x: f64| -> usize {
        // ATen computes in the input dtype; float32 inputs are binned in float32.
        let pos = if t.dtype() == DType::Float64 {
            ((x - lo) / (hi - lo) * bins as f64) as i64
        } else {
            let (x, lo, hi) = (x as f32, lo as f32, hi as f32);
            ((x - lo) / (hi - lo) * bins as f32) as i64
        };
        (pos.max(0) as usize).min(nb - 1)
    };
    for &x in &data {
        if x >= lo && x <= hi {
            counts[bin(x)] += 1.0;
        }
    }
    Tensor::from_vec(counts, &[nb])?.to_dtype(t.dtype())
}

fn bincount(t: &Tensor, weights: Option<&Tensor>, minlength: i64) -> R<Tensor> {
    check_rank("bincount", "self", RankRequirement::Exactly(1), t.shape())?;
    if !t.dtype().is_integral(false) {
        return Err(wrong_dtype(
            "bincount",
            "self",
            "an integral tensor",
            t.dtype(),
        ));
    }
    if minlength < 0 {
        return Err(invalid_argument(
            "bincount",
            "minlength",
            "must be >= 0",
            minlength,
        ));
    }
    let v = t.to_vec::<i64>()?;
    if let Some(&x) = v.iter().find(|&&x| x < 0) {
        return Err(invalid_argument(
            "bincount",
            "self",
            "must hold non-negative values",
            x,
        ));
    }
    let n = (v.iter().copied().max().map_or(0, |m| m + 1)).max(minlength) as usize;
    match weights {
        None => {
            let mut c = vec![0i64; n];
            for &x in &v {
                c[x as usize] += 1;
            }
            long_tensor(c, &[n])
        }
        Some(w) => {
            if w.shape() != t.shape() {
                return Err(shape_mismatch("bincount", "weights", t.shape(), w.shape()));
            }
            let wv = w.to_vec::<f64>()?;
            let mut c = vec![0f64; n];
            for (&x, &wx) in v.iter().zip(&wv) {
                c[x as usize] += wx;
            }
            let dtype = if w.dtype() == DType::Float32 {
                DType::Float32
            } else {
                DType::Float64
            };
            Tensor::from_vec(c, &[n])?.to_dtype(dtype)
        }
    }
}

/// cummax (`max == true`) / cummin along `dim`: ties and NaNs take the latest index.
fn cum_extreme(t: &Tensor, dim: i64, max: bool) -> R<(Tensor, Tensor)> {
    no_complex(t, if max { "cummax" } else { "cummin" })?;
    let (m, n) = rows(t, dim)?;
    let values = Tensor::zeros(m.shape(), t.dtype())?;
    let indices = Tensor::zeros(m.shape(), DType::Int64)?;
    if m.numel() > 0 {
        crate::dispatch_standard_real!(t.dtype(), "cummax", |T| {
            let src_guard = m.read::<T>()?;
            let src = src_guard
                .as_slice()
                .ok_or_else(|| shape_err("contiguous"))?;
            let mut vals_guard = values.write::<T>()?;
            let vals = vals_guard
                .as_slice_mut()
                .ok_or_else(|| shape_err("fresh"))?;
            let mut idxs_guard = indices.write::<i64>()?;
            let idxs = idxs_guard
                .as_slice_mut()
                .ok_or_else(|| shape_err("fresh"))?;
            for ((row, vrow), irow) in src
                .chunks(n)
                .zip(vals.chunks_mut(n))
                .zip(idxs.chunks_mut(n))
            {
                let mut best: Option<(T, usize)> = None;
                for (j, &x) in row.iter().enumerate() {
                    let take = match best {
                        None => true,
                        Some((b, _)) => {
                            x.is_nan_value()
                                || (!b.is_nan_value() && {
                                    let c = Numeric::total_cmp(&x, &b);
                                    if max {
                                        c != Ordering::Less
                                    } else {
                                        c != Ordering::Greater
                                    }
                                })
                        }
                    };
                    if take {
                        best = Some((x, j));
                    }
                    if let Some((b, bi)) = best {
                        vrow[j] = b;
                        irow[j] = bi as i64;
                    }
                }
            }
            Ok::<(), crate::Error>(())
        })?;
    }
    let mut out = unrows(vec![values, indices], t, dim, true)?;
    let i = out.pop().ok_or_else(|| value_err("cummax"))?;
    let v = out.pop().ok_or_else(|| value_err("cummax"))?;
    Ok((v, i))
}

/// `_cummax_helper(self, values, indices, dim)` / `_cummin_helper`: cummax/cummin written into
/// the given tensors, which must have the input's shape (values its dtype, indices int64).
fn cum_extreme_helper<const MAX: bool>(a: &mut Args<'_>) -> R<IValue> {
    let (x, values, indices) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
    for (name, t) in [("values", &values), ("indices", &indices)] {
        if t.shape() != x.shape() {
            return Err(shape_mismatch(a.op, name, x.shape(), t.shape()));
        }
    }
    if values.dtype() != x.dtype() {
        return Err(TensorError::DTypeMismatch {
            expected: x.dtype(),
            got: values.dtype(),
        }
        .into());
    }
    if indices.dtype() != DType::Int64 {
        return Err(wrong_dtype(a.op, "indices", "int64", indices.dtype()));
    }
    let (v, i) = cum_extreme(&x, a.int(3)?, MAX)?;
    write_inplace(&values, &v, a.op)?;
    write_inplace(&indices, &i, a.op)?;
    Ok(IValue::None)
}

fn scalar_tensor(a: &Args<'_>, i: usize) -> R<Tensor> {
    let s: Scalar = a.scalar(i)?;
    Tensor::from_scalar(s, s.default_dtype())
}

/// `isin` in all three forms: whether each element equals some test element, both compared in
/// their promoted dtype (a Python number promotes as a wrapped scalar), as ATen's
/// `isin_default_kernel_cpu`. NaN is never a member. `assume_unique` only selects ATen's
/// algorithm, not the result.
fn isin(a: &mut Args<'_>) -> R<IValue> {
    use super::kernels::operand::{common_dtype, Operand};
    let (elements, tests) = (Operand::arg(a, 0)?, Operand::arg(a, 1)?);
    let invert = a.bool(3)?;
    let dtype = common_dtype(&[&elements, &tests]);
    if dtype.is_complex() {
        return Err(not_implemented_for("isin_default_cpu", dtype));
    }
    let as_int = !dtype.is_floating_point();
    let (et, tt) = (elements.as_tensor_of(dtype)?, tests.as_tensor_of(dtype)?);
    // sorted without NaNs (which equal nothing), so membership is a binary search
    let mut members: Vec<Key> = keys(&tt, as_int)?
        .into_iter()
        .filter(|k| k.partial_cmp(k).is_some())
        .collect();
    members.sort_by(|x, y| x.partial_cmp(y).unwrap_or(Ordering::Equal));
    let found: Vec<bool> = keys(&et, as_int)?
        .into_iter()
        .map(|k| {
            let member = members
                .binary_search_by(|m| m.partial_cmp(&k).unwrap_or(Ordering::Less))
                .is_ok();
            member != invert
        })
        .collect();
    Ok(IValue::Tensor(Tensor::from_vec(found, et.shape())?))
}

pub(crate) fn register(r: &mut Registry) {
    r.add_overloads(
        "aten::isin",
        &["Tensor_Tensor", "Tensor_Scalar", "Scalar_Tensor"],
        isin,
    );
    r.add("aten::sort", |a| {
        let (v, i) = sort(&a.tensor(0)?, a.int(1)?, a.bool(2)?)?;
        Ok(pair(v, i))
    });
    r.add("aten::sort.stable", |a| {
        let (v, i) = sort(&a.tensor(0)?, a.int(2)?, a.bool(3)?)?;
        Ok(pair(v, i))
    });
    r.add("aten::sort.values", |a| {
        let (v, i) = sort(&a.tensor(0)?, a.int(1)?, a.bool(2)?)?;
        a.write_outs(3, pair(v, i))
    });
    r.add("aten::sort.values_stable", |a| {
        let (v, i) = sort(&a.tensor(0)?, a.int(2)?, a.bool(3)?)?;
        a.write_outs(4, pair(v, i))
    });
    r.add("aten::argsort", |a| {
        Ok(sort(&a.tensor(0)?, a.int(1)?, a.bool(2)?)?.1.into())
    });
    r.add("aten::argsort.stable", |a| {
        Ok(sort(&a.tensor(0)?, a.int(2)?, a.bool(3)?)?.1.into())
    });
    r.add("aten::msort", |a| {
        Ok(sort(&a.tensor(0)?, 0, false)?.0.into())
    });
    r.add("aten::topk", |a| {
        let (v, i) = topk(&a.tensor(0)?, a.int(1)?, a.int(2)?, a.bool(3)?, a.bool(4)?)?;
        Ok(pair(v, i))
    });
    r.add("aten::topk.values", |a| {
        let (v, i) = topk(&a.tensor(0)?, a.int(1)?, a.int(2)?, a.bool(3)?, a.bool(4)?)?;
        a.write_outs(5, pair(v, i))
    });
    r.add("aten::kthvalue", |a| {
        let (v, i) = kthvalue(&a.tensor(0)?, a.int(1)?, a.int(2)?, a.bool(3)?)?;
        Ok(pair(v, i))
    });
    r.add("aten::kthvalue.values", |a| {
        let (v, i) = kthvalue(&a.tensor(0)?, a.int(1)?, a.int(2)?, a.bool(3)?)?;
        a.write_outs(4, pair(v, i))
    });
    r.add("aten::_unique2", |a| {
        let (v, i, c) = unique_flat(&a.tensor(0)?, false, a.bool(2)?, a.bool(3)?)?;
        Ok(triple(v, i, c))
    });
    r.add("aten::_unique", |a| {
        let (v, i, _) = unique_flat(&a.tensor(0)?, false, a.bool(2)?, false)?;
        Ok(pair(v, i))
    });
    r.add("aten::unique_consecutive", |a| {
        let t = a.tensor(0)?;
        let (ri, rc) = (a.bool(1)?, a.bool(2)?);
        let (v, i, c) = match a.opt_int(3)? {
            None => unique_flat(&t, true, ri, rc)?,
            Some(d) => unique_dim(&t, d, true)?,
        };
        Ok(triple(v, i, c))
    });
    r.add("aten::unique_dim", |a| {
        let (v, i, c) = unique_dim(&a.tensor(0)?, a.int(1)?, false)?;
        Ok(triple(v, i, c))
    });
    r.add("aten::unique_dim_consecutive", |a| {
        let (v, i, c) = unique_dim(&a.tensor(0)?, a.int(1)?, true)?;
        Ok(triple(v, i, c))
    });
    r.add("aten::searchsorted.Tensor", |a| {
        let side = a.opt_str(4)?;
        let sorter = a.opt_tensor(5)?;
        Ok(searchsorted(
            &a.tensor(0)?,
            &a.tensor(1)?,
            a.bool(2)?,
            a.bool(3)?,
            side.as_deref(),
            sorter.as_ref(),
        )?
        .into())
    });
    r.add("aten::searchsorted.Scalar", |a| {
        let side = a.opt_str(4)?;
        let sorter = a.opt_tensor(5)?;
        Ok(searchsorted(
            &a.tensor(0)?,
            &scalar_tensor(a, 1)?,
            a.bool(2)?,
            a.bool(3)?,
            side.as_deref(),
            sorter.as_ref(),
        )?
        .into())
    });
    r.add("aten::bucketize.Tensor", |a| {
        let b = a.tensor(1)?;
        check_rank(a.op, "boundaries", RankRequirement::Exactly(1), b.shape())?;
        Ok(searchsorted(&b, &a.tensor(0)?, a.bool(2)?, a.bool(3)?, None, None)?.into())
    });
    r.add("aten::bucketize.Scalar", |a| {
        let b = a.tensor(1)?;
        check_rank(a.op, "boundaries", RankRequirement::Exactly(1), b.shape())?;
        Ok(searchsorted(
            &b,
            &scalar_tensor(a, 0)?,
            a.bool(2)?,
            a.bool(3)?,
            None,
            None,
        )?
        .into())
    });
    r.add("aten::histc", |a| {
        Ok(histc(
            &a.tensor(0)?,
            a.int(1)?,
            a.scalar(2)?.to_f64(),
            a.scalar(3)?.to_f64(),
        )?
        .into())
    });
    r.add("aten::bincount", |a| {
        Ok(bincount(&a.tensor(0)?, a.opt_tensor(1)?.as_ref(), a.int(2)?)?.into())
    });
    r.add("aten::cummax", |a| {
        let (v, i) = cum_extreme(&a.tensor(0)?, a.int(1)?, true)?;
        Ok(pair(v, i))
    });
    r.add("aten::cummin", |a| {
        let (v, i) = cum_extreme(&a.tensor(0)?, a.int(1)?, false)?;
        Ok(pair(v, i))
    });
    r.add("aten::_cummax_helper", cum_extreme_helper::<true>);
    r.add("aten::_cummin_helper", cum_extreme_helper::<false>);
}
