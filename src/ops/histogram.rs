//! `histogram` / `histogramdd` in their bin-count and bin-edge forms and the `_histogramdd_*`
//! pieces PyTorch builds them from (aten/src/ATen/native/Histogram.cpp): an input of shape
//! `(..., N)` is M points in N dimensions; each dimension's edges are a linspace over the range
//! (given, or the data's min and max, widened by 0.5 each side when empty) or given tensors.
//! A point lands in the bin whose edges enclose it (the last bin includes its right edge);
//! points outside the edges or NaN are skipped.

use super::creation::linspace_tensor;
use super::kernels::not_implemented_for;
use super::kernels::{check_size, invalid_argument, rank_mismatch, shape_mismatch, value_err};
use super::shape::tensor_list;
use super::{Args, Registry};
use crate::tensor::RankRequirement;
use crate::tensor::{Tensor, TensorError};
use crate::values::{IValue, Tuple};

type R = crate::Result<IValue>;

/// The input as M points of N coordinates (f64, exact for every float dtype) and N.
fn points(op: &str, x: &Tensor, dd: bool) -> crate::Result<(Vec<f64>, usize)> {
    if !x.dtype().is_floating_point() {
        return Err(not_implemented_for("histogramdd", x.dtype()));
    }
    let n = if dd {
        if x.dim() < 2 {
            return Err(rank_mismatch(
                op,
                "input",
                RankRequirement::AtLeast(2),
                x.shape(),
            ));
        }
        x.shape().last().copied().unwrap_or(1)
    } else {
        1
    };
    Ok((x.contiguous()?.to_vec::<f64>()?, n))
}

/// The weight per point, checked against the input's dtype and point count.
fn weights(
    op: &str,
    x: &Tensor,
    weight: Option<Tensor>,
    dd: bool,
) -> crate::Result<Option<Vec<f64>>> {
    let Some(w) = weight else {
        return Ok(None);
    };
    if w.dtype() != x.dtype() {
        return Err(TensorError::DTypeMismatch {
            expected: x.dtype(),
            got: w.dtype(),
        }
        .into());
    }
    let expected = if dd {
        &x.shape()[..x.dim().saturating_sub(1)]
    } else {
        x.shape()
    };
    if w.shape() != expected {
        return Err(shape_mismatch(op, "weight", expected, w.shape()));
    }
    Ok(Some(w.contiguous()?.to_vec::<f64>()?))
}

/// Min and max of coordinate `d` (NaN if any is NaN, as `aminmax`); (0, 0) without points.
fn column_min_max(pts: &[f64], n: usize, d: usize) -> (f64, f64) {
    let mut column = pts.iter().skip(d).step_by(n.max(1)).copied();
    let Some(first) = column.next() else {
        return (0.0, 0.0);
    };
    column.fold((first, first), |(lo, hi), v| {
        if v.is_nan() || lo.is_nan() {
            (f64::NAN, f64::NAN)
        } else {
            (lo.min(v), hi.max(v))
        }
    })
}

/// Each dimension's (leftmost, rightmost) edge: `range` or the data's min and max.
fn outer_edges(
    op: &str,
    pts: &[f64],
    n: usize,
    range: Option<Vec<f64>>,
) -> crate::Result<Vec<(f64, f64)>> {
    let mut edges = match range {
        Some(r) => {
            check_size(op, "the length of range", 2 * n as i64, r.len() as i64)?;
            r.chunks(2).map(|c| (c[0], c[1])).collect::<Vec<_>>()
        }
        None => (0..n).map(|d| column_min_max(pts, n, d)).collect(),
    };
    for (d, e) in edges.iter_mut().enumerate() {
        if !e.0.is_finite() || !e.1.is_finite() {
            return Err(invalid_argument(
                op,
                format!("the range of dimension {d}"),
                "must be finite",
                format!("[{}, {}]", e.0, e.1),
            ));
        }
        if e.0 > e.1 {
            return Err(invalid_argument(
                op,
                format!("the range of dimension {d}"),
                "must have min <= max",
                format!("[{}, {}]", e.0, e.1),
            ));
        }
        if e.0 == e.1 {
            e.0 -= 0.5;
            e.1 += 0.5;
        }
    }
    Ok(edges)
}

/// Bin counts as usize, one per dimension.
fn bin_counts(op: &str, bins: &[i64], n: usize) -> crate::Result<Vec<usize>> {
    check_size(
        op,
        "the number of bin counts (input dimensions)",
        n as i64,
        bins.len() as i64,
    )?;
    bins.iter()
        .map(|&b| {
            usize::try_from(b)
                .ok()
                .filter(|&b| b > 0)
                .ok_or_else(|| invalid_argument(op, "bins", "must be > 0", b))
        })
        .collect()
}

/// The edges of each dimension: `bins + 1` points spaced over its outer edges, in the input's
/// dtype (PyTorch's `linspace`).
fn linspace_edges(
    op: &str,
    x: &Tensor,
    pts: &[f64],
    n: usize,
    bins: &[i64],
    range: Option<Vec<f64>>,
) -> crate::Result<Vec<Tensor>> {
    let counts = bin_counts(op, bins, n)?;
    let outer = outer_edges(op, pts, n, range)?;
    counts
        .iter()
        .zip(outer)
        .map(|(&b, (lo, hi))| {
            crate::tensor::budget::check_alloc(b.saturating_add(1).saturating_mul(8))?;
            linspace_tensor(lo, hi, b + 1, x.dtype())
        })
        .collect()
}

/// Given edge tensors: one-dimensional, the input's dtype, at least one edge each.
fn check_edge_tensors(op: &str, x: &Tensor, edges: &[Tensor], n: usize) -> crate::Result<()> {
    check_size(
        op,
        "the number of bin edge tensors (input dimensions)",
        n as i64,
        edges.len() as i64,
    )?;
    for (d, e) in edges.iter().enumerate() {
        if e.dtype() != x.dtype() {
            return Err(TensorError::DTypeMismatch {
                expected: x.dtype(),
                got: e.dtype(),
            }
            .into());
        }
        if e.dim() != 1 {
            return Err(rank_mismatch(
                op,
                format!("the bins tensor for dimension {d}"),
                RankRequirement::Exactly(1),
                e.shape(),
            ));
        }
        if e.numel() == 0 {
            return Err(invalid_argument(
                op,
                format!("the bins tensor for dimension {d}"),
                "must have at least 1 element",
                "an empty tensor",
            ));
        }
    }
    Ok(())
}

/// The histogram of the points over the given edges (input dtype), `density`-normalized:
/// divided by the total and by each bin's widths.
fn fill(
    x: &Tensor,
    pts: &[f64],
    n: usize,
    weight: Option<&[f64]>,
    edges: &[Tensor],
    density: bool,
) -> crate::Result<Tensor> {
    let edges: Vec<Vec<f64>> = edges
        .iter()
        .map(|e| e.contiguous()?.to_vec::<f64>())
        .collect::<crate::Result<_>>()?;
    let shape: Vec<usize> = edges.iter().map(|e| e.len().saturating_sub(1)).collect();
    let total: usize = shape.iter().product();
    crate::tensor::budget::check_alloc(total.saturating_mul(8))?;
    let mut hist = vec![0f64; total];
    let mut strides = vec![1usize; n];
    for d in (0..n.saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1];
    }
    if n > 0 {
        'points: for (i, p) in pts.chunks_exact(n).enumerate() {
            let mut at = 0usize;
            for (d, &v) in p.iter().enumerate() {
                let e = &edges[d];
                let (Some(&lo), Some(&hi)) = (e.first(), e.last()) else {
                    continue 'points;
                };
                if !(v >= lo && v <= hi) {
                    continue 'points;
                }
                // the last edge <= v; the rightmost bin includes its right edge
                let pos = e.partition_point(|&edge| edge <= v).saturating_sub(1);
                at += strides[d] * pos.min(shape[d].saturating_sub(1));
            }
            hist[at] += weight.map_or(1.0, |w| w[i]);
        }
    }
    if density {
        let sum: f64 = hist.iter().sum();
        for (k, h) in hist.iter_mut().enumerate() {
            let mut width = 1.0;
            for d in 0..n {
                let j = (k / strides[d]) % shape[d].max(1);
                width *= edges[d][j + 1] - edges[d][j];
            }
            *h = *h / sum / width;
        }
    }
    Tensor::from_vec(hist, &shape)?.to_dtype(x.dtype())
}

/// histogramdd's arguments after `bins`: range (bin counts only), weight, density.
struct Options {
    range: Option<Vec<f64>>,
    weight: Option<Tensor>,
    density: bool,
}

fn options(args: &Args<'_>, with_range: bool) -> crate::Result<Options> {
    let (range, next) = if with_range {
        (args.opt_double_list(2)?, 3)
    } else {
        (None, 2)
    };
    Ok(Options {
        range,
        weight: args.opt_tensor(next)?,
        density: args.bool(next + 1)?,
    })
}

/// `histogram.bin_ct(self, bins, *, range, weight, density)`: the flattened input.
fn histogram_bin_ct(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let o = options(args, true)?;
    let (pts, _) = points(args.op, &x, false)?;
    let w = weights(args.op, &x, o.weight, false)?;
    let edges = linspace_edges(args.op, &x, &pts, 1, &[args.int(1)?], o.range)?;
    let hist = fill(&x, &pts, 1, w.as_deref(), &edges, o.density)?;
    let edge = edges
        .into_iter()
        .next()
        .ok_or_else(|| value_err("histogram: no edges"))?;
    Ok(IValue::Tuple(Tuple::new(vec![hist.into(), edge.into()])))
}

/// `histogram.bins_tensor(self, bins, *, weight, density)`.
fn histogram_bins_tensor(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let edge = args.tensor(1)?;
    let o = options(args, false)?;
    let (pts, _) = points(args.op, &x, false)?;
    let w = weights(args.op, &x, o.weight, false)?;
    let edges = [edge];
    check_edge_tensors(args.op, &x, &edges, 1)?;
    let hist = fill(&x, &pts, 1, w.as_deref(), &edges, o.density)?;
    let [edge] = edges;
    Ok(IValue::Tuple(Tuple::new(vec![hist.into(), edge.into()])))
}

/// The bin counts of `histogramdd` (a list) or `histogramdd.int_bins` (one for every
/// dimension), with the edges they make.
fn dd_linspace<const SAME_FOR_ALL: bool>(
    args: &Args<'_>,
) -> crate::Result<(Tensor, Vec<Tensor>, Options)> {
    let x = args.tensor(0)?;
    let o = options(args, true)?;
    let (pts, n) = points(args.op, &x, true)?;
    let bins = if SAME_FOR_ALL {
        vec![args.int(1)?; n]
    } else {
        args.int_list(1)?
    };
    let edges = linspace_edges(args.op, &x, &pts, n, &bins, o.range.clone())?;
    let w = weights(args.op, &x, o.weight.clone(), true)?;
    let hist = fill(&x, &pts, n, w.as_deref(), &edges, o.density)?;
    Ok((hist, edges, o))
}

fn histogramdd_counts<const SAME_FOR_ALL: bool>(args: &mut Args<'_>) -> R {
    let (hist, edges, _) = dd_linspace::<SAME_FOR_ALL>(args)?;
    Ok(IValue::Tuple(Tuple::new(vec![
        hist.into(),
        tensor_list(edges),
    ])))
}

fn histogramdd_tensors(args: &Args<'_>) -> crate::Result<(Tensor, Vec<Tensor>)> {
    let x = args.tensor(0)?;
    let edges = args.tensor_list(1)?;
    // histogramdd.TensorList_bins takes a range it ignores: weight and density follow it
    let o = options(args, args.values.len() > 4)?;
    let (pts, n) = points(args.op, &x, true)?;
    check_edge_tensors(args.op, &x, &edges, n)?;
    let w = weights(args.op, &x, o.weight, true)?;
    let hist = fill(&x, &pts, n, w.as_deref(), &edges, o.density)?;
    Ok((hist, edges))
}

fn histogramdd_tensor_list(args: &mut Args<'_>) -> R {
    let (hist, edges) = histogramdd_tensors(args)?;
    Ok(IValue::Tuple(Tuple::new(vec![
        hist.into(),
        tensor_list(edges),
    ])))
}

/// `_histogramdd_bin_edges(self, bins, *, range, weight, density)`: the edges alone.
fn histogramdd_bin_edges(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let o = options(args, true)?;
    let (pts, n) = points(args.op, &x, true)?;
    weights(args.op, &x, o.weight, true)?;
    Ok(tensor_list(linspace_edges(
        args.op,
        &x,
        &pts,
        n,
        &args.int_list(1)?,
        o.range,
    )?))
}

/// `_histogramdd_from_bin_cts(self, bins, *, range, weight, density)`: the histogram alone.
fn histogramdd_from_bin_cts(args: &mut Args<'_>) -> R {
    Ok(dd_linspace::<false>(args)?.0.into())
}

/// `_histogramdd_from_bin_tensors(self, bins, *, weight, density)`: the histogram alone.
fn histogramdd_from_bin_tensors(args: &mut Args<'_>) -> R {
    Ok(histogramdd_tensors(args)?.0.into())
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::histogram.bin_ct", histogram_bin_ct);
    r.add("aten::histogram.bins_tensor", histogram_bins_tensor);
    r.add("aten::histogramdd", histogramdd_counts::<false>);
    r.add("aten::histogramdd.int_bins", histogramdd_counts::<true>);
    r.add("aten::histogramdd.TensorList_bins", histogramdd_tensor_list);
    r.add("aten::_histogramdd_bin_edges", histogramdd_bin_edges);
    r.add("aten::_histogramdd_from_bin_cts", histogramdd_from_bin_cts);
    r.add(
        "aten::_histogramdd_from_bin_tensors",
        histogramdd_from_bin_tensors,
    );
}
