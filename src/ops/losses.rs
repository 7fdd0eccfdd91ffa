//! Loss functions (`aten::*_loss` and their backward-free forms), computed in f64.

use super::kernels::map::map_binary;
use super::kernels::operand::{common_dtype, float_dtype, Operand};
use super::kernels::via_f64::{build, float_common, t, vals};
use super::kernels::{
    check_rank, check_size, invalid_argument, rank_mismatch, shape_mismatch, size_mismatch,
    value_err, wrong_dtype,
};
use super::special::xlogy_f;
use super::{Args, Registry};
use crate::tensor::{broadcast_shapes, DType, RankRequirement, Tensor, TensorError};
use crate::values::IValue;

type R = crate::Result<IValue>;

/// Reduce an f64 loss tensor: 0 none, 1 mean, 2 sum; cast to `dt`.
pub(super) fn reduce_loss(loss: Tensor, reduction: i64, dt: DType) -> crate::Result<Tensor> {
    match reduction {
        0 => loss.to_dtype(dt),
        1 | 2 => {
            let v = vals(&loss)?;
            let s: f64 = v.iter().sum();
            let r = if reduction == 1 {
                s / v.len() as f64
            } else {
                s
            };
            build(vec![r], &[], dt)
        }
        other => Err(bad_reduction(other)),
    }
}

/// A pointwise loss `f(input, target)` with broadcasting and reduction argument `red_idx`.
pub(super) fn pointwise_loss(
    args: &Args<'_>,
    red_idx: usize,
    f: impl Fn(f64, f64) -> f64 + Sync + Send,
) -> R {
    let (a, b) = (Operand::arg(args, 0)?, Operand::arg(args, 1)?);
    let dt = float_common(&a, &b)?;
    let (x, y) = (
        a.as_tensor_of(DType::Float64)?,
        b.as_tensor_of(DType::Float64)?,
    );
    let loss = map_binary::<f64, f64, f64, _>(&x, &y, f)?;
    t(reduce_loss(loss, args.int(red_idx)?, dt)?)
}

pub(super) fn mse_loss(args: &mut Args<'_>) -> R {
    pointwise_loss(args, 2, |x, y| (x - y) * (x - y))
}
pub(super) fn l1_loss(args: &mut Args<'_>) -> R {
    pointwise_loss(args, 2, |x, y| (x - y).abs())
}
pub(super) fn smooth_l1_loss(args: &mut Args<'_>) -> R {
    let beta = args.double(3)?;
    if beta < 0.0 {
        return Err(invalid_argument(
            "smooth_l1_loss",
            "beta",
            "must be non-negative",
            beta,
        ));
    }
    pointwise_loss(args, 2, move |x, y| {
        let d = (x - y).abs();
        if d < beta {
            0.5 * d * d / beta
        } else {
            d - 0.5 * beta
        }
    })
}
pub(super) fn huber_loss(args: &mut Args<'_>) -> R {
    let delta = args.double(3)?;
    if delta <= 0.0 {
        return Err(invalid_argument(
            "huber_loss",
            "delta",
            "must be positive",
            delta,
        ));
    }
    pointwise_loss(args, 2, move |x, y| {
        let d = (x - y).abs();
        if d < delta {
            0.5 * d * d
        } else {
            delta * (d - 0.5 * delta)
        }
    })
}
pub(super) fn soft_margin_loss(args: &mut Args<'_>) -> R {
    pointwise_loss(args, 2, |x, y| (-x * y).exp().ln_1p())
}
pub(super) fn kl_div(args: &mut Args<'_>) -> R {
    let log_target = args.bool(3)?;
    let red = args.int(2)?;
    let (a, b) = (Operand::arg(args, 0)?, Operand::arg(args, 1)?);
    let dt = float_common(&a, &b)?;
    let (x, y) = (
        a.as_tensor_of(DType::Float64)?,
        b.as_tensor_of(DType::Float64)?,
    );
    let loss = if log_target {
        map_binary::<f64, f64, f64, _>(&x, &y, |x, y| y.exp() * (y - x))?
    } else {
        map_binary::<f64, f64, f64, _>(&x, &y, |x, y| xlogy_f(y, y) - y * x)?
    };
    t(reduce_loss(loss, red, dt)?)
}

/// A `reduction` outside none (0), mean (1), sum (2).
fn bad_reduction(reduction: i64) -> crate::Error {
    invalid_argument(
        "loss",
        "reduction",
        "must be 0 (none), 1 (mean) or 2 (sum)",
        reduction,
    )
}

/// Same-shape check of input and target (losses that do not broadcast).
pub(super) fn same_shape(op: &str, a: &Tensor, b: &Tensor) -> crate::Result<()> {
    if a.shape() != b.shape() {
        return Err(shape_mismatch(op, "target", a.shape(), b.shape()));
    }
    Ok(())
}

/// Broadcast `w` (optional) to `shape` as f64 values.
pub(super) fn weights_to(w: Option<Tensor>, shape: &[usize]) -> crate::Result<Option<Vec<f64>>> {
    match w {
        None => Ok(None),
        Some(w) => {
            let b = broadcast_shapes(w.shape(), shape)?;
            if b.as_slice() != shape {
                return Err(shape_mismatch(
                    "loss",
                    "weight (broadcast)",
                    shape,
                    w.shape(),
                ));
            }
            Ok(Some(vals(&crate::ops::shape::expand_to(&w, shape)?)?))
        }
    }
}

pub(super) fn binary_cross_entropy(args: &mut Args<'_>) -> R {
    let (x, y) = (args.tensor(0)?, args.tensor(1)?);
    same_shape("binary_cross_entropy", &x, &y)?;
    let w = weights_to(args.opt_tensor(2)?, x.shape())?;
    let red = args.int(3)?;
    let (xv, yv) = (vals(&x)?, vals(&y)?);
    if let Some(p) = xv.iter().find(|&&p| !(0.0..=1.0).contains(&p)) {
        return Err(invalid_argument(
            "binary_cross_entropy",
            "input",
            "must hold values in [0, 1]",
            p,
        ));
    }
    let loss: Vec<f64> = xv
        .iter()
        .zip(&yv)
        .enumerate()
        .map(|(i, (&p, &t))| {
            let l = -(t * p.ln().max(-100.0) + (1.0 - t) * (1.0 - p).ln().max(-100.0));
            w.as_ref().map_or(l, |w| l * w[i])
        })
        .collect();
    let dt = float_dtype(x.dtype());
    t(reduce_loss(Tensor::from_vec(loss, x.shape())?, red, dt)?)
}

pub(super) fn bce_with_logits(args: &mut Args<'_>) -> R {
    let (x, y) = (args.tensor(0)?, args.tensor(1)?);
    same_shape("binary_cross_entropy_with_logits", &x, &y)?;
    let w = weights_to(args.opt_tensor(2)?, x.shape())?;
    let pw = weights_to(args.opt_tensor(3)?, x.shape())?;
    let red = args.int(4)?;
    let (xv, yv) = (vals(&x)?, vals(&y)?);
    let loss: Vec<f64> = xv
        .iter()
        .zip(&yv)
        .enumerate()
        .map(|(i, (&x, &t))| {
            // (1 - t) x + (1 + (pw - 1) t) * log(1 + exp(-x)), with a stable log1p(exp(-x)).
            let log_sig_neg = (-x).max(0.0) + (-x.abs()).exp().ln_1p();
            let l = match &pw {
                Some(pw) => (1.0 - t) * x + (1.0 + (pw[i] - 1.0) * t) * log_sig_neg,
                None => (1.0 - t) * x + log_sig_neg,
            };
            w.as_ref().map_or(l, |w| l * w[i])
        })
        .collect();
    let dt = float_dtype(common_dtype(&[
        &Operand::Tensor(x.clone()),
        &Operand::Tensor(y),
    ]));
    t(reduce_loss(Tensor::from_vec(loss, x.shape())?, red, dt)?)
}

pub(super) fn margin_ranking_loss(args: &mut Args<'_>) -> R {
    let (a, b, y) = (args.tensor(0)?, args.tensor(1)?, args.tensor(2)?);
    let margin = args.double(3)?;
    let red = args.int(4)?;
    let dt = float_dtype(a.dtype());
    let d = map_binary::<f64, f64, f64, _>(
        &a.to_dtype(DType::Float64)?,
        &b.to_dtype(DType::Float64)?,
        |a, b| a - b,
    )?;
    let loss = map_binary::<f64, f64, f64, _>(&d, &y.to_dtype(DType::Float64)?, move |d, y| {
        (-y * d + margin).max(0.0)
    })?;
    t(reduce_loss(loss, red, dt)?)
}

pub(super) fn hinge_embedding_loss(args: &mut Args<'_>) -> R {
    let margin = args.double(2)?;
    pointwise_loss(args, 3, move |x, y| {
        // ATen: where(y != 1, clamp_min(margin - x, 0), 0) + where(y != -1, x, 0)
        let pos = if y != -1.0 { x } else { 0.0 };
        let neg = if y != 1.0 { (margin - x).max(0.0) } else { 0.0 };
        pos + neg
    })
}

pub(super) fn poisson_nll_loss(args: &mut Args<'_>) -> R {
    let log_input = args.bool(2)?;
    let full = args.bool(3)?;
    let eps = args.double(4)?;
    pointwise_loss(args, 5, move |x, y| {
        let mut l = if log_input {
            x.exp() - y * x
        } else {
            x - y * (x + eps).ln()
        };
        if full && y > 1.0 {
            l += y * y.ln() - y + 0.5 * (2.0 * std::f64::consts::PI * y).ln();
        }
        l
    })
}

/// Rows of a tensor viewed as `[rows, last]` (a 1-d tensor is one row).
pub(super) fn rows(x: &Tensor) -> crate::Result<(Vec<f64>, usize)> {
    let d = x.shape().last().copied().unwrap_or(1);
    Ok((vals(x)?, d.max(1)))
}

pub(super) fn cosine_embedding_loss(args: &mut Args<'_>) -> R {
    let (a, b, y) = (args.tensor(0)?, args.tensor(1)?, args.tensor(2)?);
    let margin = args.double(3)?;
    let red = args.int(4)?;
    same_shape("cosine_embedding_loss", &a, &b)?;
    check_rank(
        "cosine_embedding_loss",
        "input1",
        RankRequirement::OneOf(vec![1, 2]),
        a.shape(),
    )?;
    if y.dim() + 1 != a.dim() {
        return Err(rank_mismatch(
            "cosine_embedding_loss",
            "target",
            RankRequirement::Exactly(a.dim() - 1),
            y.shape(),
        ));
    }
    let (av, d) = rows(&a)?;
    let bv = vals(&b)?;
    let yv = vals(&y)?;
    const EPS: f64 = 1e-12;
    let n = yv.len();
    let mut loss = Vec::with_capacity(n);
    for (i, &yi) in yv.iter().enumerate() {
        let (ra, rb) = (&av[i * d..(i + 1) * d], &bv[i * d..(i + 1) * d]);
        let prod: f64 = ra.iter().zip(rb).map(|(p, q)| p * q).sum();
        let m1: f64 = ra.iter().map(|p| p * p).sum::<f64>() + EPS;
        let m2: f64 = rb.iter().map(|p| p * p).sum::<f64>() + EPS;
        let cos = prod / (m1 * m2).sqrt();
        loss.push(if yi == 1.0 {
            1.0 - cos
        } else if yi == -1.0 {
            (cos - margin).max(0.0)
        } else {
            0.0
        });
    }
    t(reduce_loss(
        Tensor::from_vec(loss, y.shape())?,
        red,
        float_dtype(a.dtype()),
    )?)
}

/// `||a - b + eps||_p` over the last dim, per row.
pub(super) fn row_dist(a: &[f64], b: &[f64], p: f64, eps: f64) -> f64 {
    let it = a.iter().zip(b).map(|(x, y)| (x - y + eps).abs());
    if p == f64::INFINITY {
        it.fold(0.0, f64::max)
    } else if p == 0.0 {
        it.filter(|v| *v != 0.0).count() as f64
    } else {
        it.map(|v| v.powf(p)).sum::<f64>().powf(1.0 / p)
    }
}

pub(super) fn triplet_margin_loss(args: &mut Args<'_>) -> R {
    let (a, p, n) = (args.tensor(0)?, args.tensor(1)?, args.tensor(2)?);
    let margin = args.double(3)?;
    let pn = args.double(4)?;
    let eps = args.double(5)?;
    let swap = args.bool(6)?;
    let red = args.int(7)?;
    same_shape("triplet_margin_loss", &a, &p)?;
    same_shape("triplet_margin_loss", &a, &n)?;
    check_rank(
        "triplet_margin_loss",
        "anchor",
        RankRequirement::OneOf(vec![1, 2]),
        a.shape(),
    )?;
    let (av, d) = rows(&a)?;
    let (pv, nv) = (vals(&p)?, vals(&n)?);
    let count = av.len() / d;
    let loss: Vec<f64> = (0..count)
        .map(|i| {
            let r = i * d..(i + 1) * d;
            let dp = row_dist(&av[r.clone()], &pv[r.clone()], pn, eps);
            let mut dn = row_dist(&av[r.clone()], &nv[r.clone()], pn, eps);
            if swap {
                dn = dn.min(row_dist(&pv[r.clone()], &nv[r], pn, eps));
            }
            (margin + dp - dn).max(0.0)
        })
        .collect();
    let shape = &a.shape()[..a.dim() - 1];
    t(reduce_loss(
        Tensor::from_vec(loss, shape)?,
        red,
        float_dtype(a.dtype()),
    )?)
}

/// Input `[N, C, S...]` (or `[C]`) as (N, C, S) with the target's expected shape.
pub(super) fn nll_layout(x: &Tensor, target: &Tensor) -> crate::Result<(usize, usize, usize)> {
    let s = x.shape();
    let (n, c, sp, tshape): (usize, usize, usize, Vec<usize>) = match s.len() {
        0 => {
            return Err(rank_mismatch(
                "nll_loss",
                "input",
                RankRequirement::AtLeast(1),
                s,
            ))
        }
        1 => (1, s[0], 1, vec![]),
        _ => {
            let mut ts = vec![s[0]];
            ts.extend_from_slice(&s[2..]);
            (s[0], s[1], s[2..].iter().product(), ts)
        }
    };
    if target.shape() != tshape.as_slice() {
        return Err(shape_mismatch(
            "nll_loss",
            "target",
            &tshape,
            target.shape(),
        ));
    }
    Ok((n, c, sp))
}

/// The shared core of nll_loss and cross_entropy: `logp` is `[N, C, S]` row-major. Returns
/// (per-element losses shaped like the target, sum of weights of non-ignored targets).
pub(super) fn nll_core(
    logp: &[f64],
    target: &Tensor,
    weight: Option<&[f64]>,
    ignore_index: i64,
    (n, c, sp): (usize, usize, usize),
) -> crate::Result<(Vec<f64>, f64)> {
    if target.dtype().is_floating_point() || target.dtype().is_complex() {
        return Err(wrong_dtype(
            "nll_loss",
            "target",
            "an integer tensor",
            target.dtype(),
        ));
    }
    let tv = target.to_vec::<i64>()?;
    let mut loss = vec![0.0; n * sp];
    let mut wsum = 0.0;
    for i in 0..n {
        for s in 0..sp {
            let k = tv[i * sp + s];
            if k == ignore_index {
                continue;
            }
            if k < 0 || k as usize >= c {
                // PyTorch's text (the hostile-input goldens compare it)
                return Err(value_err(format!("Target {k} is out of bounds.")));
            }
            let w = weight.map_or(1.0, |w| w[k as usize]);
            loss[i * sp + s] = -w * logp[(i * c + k as usize) * sp + s];
            wsum += w;
        }
    }
    Ok((loss, wsum))
}

pub(super) fn class_weights(w: Option<Tensor>, c: usize) -> crate::Result<Option<Vec<f64>>> {
    match w {
        None => Ok(None),
        Some(w) => {
            check_size(
                "loss",
                "weight.numel() (one per class)",
                c as i64,
                w.numel() as i64,
            )?;
            Ok(Some(vals(&w)?))
        }
    }
}

/// Reduce nll losses: mean divides by the weight sum of counted targets.
pub(super) fn nll_reduce(
    loss: Vec<f64>,
    wsum: f64,
    tshape: &[usize],
    red: i64,
    dt: DType,
) -> crate::Result<Tensor> {
    match red {
        0 => build(loss, tshape, dt),
        1 => build(vec![loss.iter().sum::<f64>() / wsum], &[], dt),
        2 => build(vec![loss.iter().sum::<f64>()], &[], dt),
        other => Err(bad_reduction(other)),
    }
}

/// `nll_loss` and its spellings; `with_total_weight`: the `_forward` overloads, which return
/// `(loss, total_weight)`.
pub(super) fn nll_loss(args: &mut Args<'_>, with_total_weight: bool) -> R {
    let (x, target) = (args.tensor(0)?, args.tensor(1)?);
    let layout = nll_layout(&x, &target)?;
    let w = class_weights(args.opt_tensor(2)?, layout.1)?;
    let red = args.int(3)?;
    let ignore = args.int(4)?;
    let (loss, wsum) = nll_core(&vals(&x)?, &target, w.as_deref(), ignore, layout)?;
    let dt = float_dtype(x.dtype());
    let out = nll_reduce(loss, wsum, target.shape(), red, dt)?;
    if with_total_weight {
        return Ok(IValue::Tuple(crate::values::Tuple::new(vec![
            IValue::Tensor(out),
            // PyTorch leaves total_weight at 0 when nothing is reduced
            IValue::Tensor(build(vec![if red == 0 { 0.0 } else { wsum }], &[], dt)?),
        ])));
    }
    t(out)
}

/// log_softmax over the class axis of a `[N, C, S]` buffer.
pub(super) fn log_softmax_classes(v: &mut [f64], (n, c, sp): (usize, usize, usize)) {
    for i in 0..n {
        for s in 0..sp {
            let idx = |k: usize| (i * c + k) * sp + s;
            let m = (0..c).map(|k| v[idx(k)]).fold(f64::NEG_INFINITY, f64::max);
            let lse = m + (0..c).map(|k| (v[idx(k)] - m).exp()).sum::<f64>().ln();
            for k in 0..c {
                v[idx(k)] -= lse;
            }
        }
    }
}

pub(super) fn cross_entropy_loss(args: &mut Args<'_>) -> R {
    let (x, target) = (args.tensor(0)?, args.tensor(1)?);
    let wt = args.opt_tensor(2)?;
    let red = args.int(3)?;
    let ignore = args.int(4)?;
    let ls = args.double(5)?;
    if !(0.0..=1.0).contains(&ls) {
        return Err(invalid_argument(
            "cross_entropy",
            "label_smoothing",
            "must be in [0, 1]",
            ls,
        ));
    }
    let dt = float_dtype(x.dtype());
    let s = x.shape();
    let layout = match s.len() {
        0 => {
            return Err(rank_mismatch(
                "cross_entropy",
                "input",
                RankRequirement::AtLeast(1),
                s,
            ))
        }
        1 => (1, s[0], 1),
        _ => (s[0], s[1], s[2..].iter().product()),
    };
    let (n, c, sp) = layout;
    let w = class_weights(wt, c)?;
    let mut logp = vals(&x)?;
    log_softmax_classes(&mut logp, layout);
    let wk = |k: usize| w.as_ref().map_or(1.0, |w| w[k]);

    if target.dtype().is_floating_point() {
        // Class probabilities: loss = -sum_c w_c t_c logp_c; mean divides by the sample count.
        same_shape("cross_entropy", &x, &target)?;
        let tv = vals(&target)?;
        let mut loss = vec![0.0; n * sp];
        for i in 0..n {
            for si in 0..sp {
                let mut acc = 0.0;
                for k in 0..c {
                    let j = (i * c + k) * sp + si;
                    let tk = tv[j] * (1.0 - ls) + ls / c as f64;
                    acc -= wk(k) * tk * logp[j];
                }
                loss[i * sp + si] = acc;
            }
        }
        let mut tshape = vec![];
        if s.len() > 1 {
            tshape.push(s[0]);
            tshape.extend_from_slice(&s[2..]);
        }
        return t(nll_reduce(loss, (n * sp) as f64, &tshape, red, dt)?);
    }

    nll_layout(&x, &target)?;
    let (nll, wsum) = nll_core(&logp, &target, w.as_deref(), ignore, layout)?;
    let nll_t = nll_reduce(nll, wsum, target.shape(), red, DType::Float64)?;
    if ls == 0.0 {
        return t(nll_t.to_dtype(dt)?);
    }
    // Label smoothing: add ls/C * (-sum_c w_c logp_c), zero at ignored targets.
    let tv = target.to_vec::<i64>()?;
    let mut smooth = vec![0.0; n * sp];
    let mut counted = 0.0;
    for i in 0..n {
        for si in 0..sp {
            if tv[i * sp + si] == ignore {
                continue;
            }
            counted += 1.0;
            smooth[i * sp + si] = -(0..c)
                .map(|k| wk(k) * logp[(i * c + k) * sp + si])
                .sum::<f64>();
        }
    }
    let smooth_denom = if w.is_some() { wsum } else { counted };
    let smooth_t = nll_reduce(smooth, smooth_denom, target.shape(), red, DType::Float64)?;
    let scale = ls / c as f64;
    let out =
        map_binary::<f64, f64, f64, _>(&nll_t, &smooth_t, move |a, b| (1.0 - ls) * a + scale * b)?;
    t(out.to_dtype(dt)?)
}

fn require_float(op: &str, x: &Tensor) -> crate::Result<()> {
    if x.dtype().is_floating_point() {
        Ok(())
    } else {
        Err(wrong_dtype(
            op,
            "input",
            "a floating-point tensor",
            x.dtype(),
        ))
    }
}

/// `[N, C]` (or `[C]`: one sample) input and its per-sample target of `target_per_sample`
/// entries: (values, n, c).
fn margin_rows(
    op: &str,
    x: &Tensor,
    target: &Tensor,
    target_per_sample: bool,
) -> crate::Result<(Vec<f64>, usize, usize)> {
    let (n, c) = match x.shape() {
        [c] => (1, *c),
        [n, c] => (*n, *c),
        [] => (1, 1),
        s => return Err(rank_mismatch(op, "input", RankRequirement::AtMost(2), s)),
    };
    let want = if target_per_sample { n * c } else { n };
    check_size(op, "target.numel()", want as i64, target.numel() as i64)?;
    Ok((vals(x)?, n, c))
}

/// Per-sample losses: `[N]`, a scalar for a 1-d input; then the reduction.
fn sample_losses(losses: Vec<f64>, x: &Tensor, reduction: i64) -> crate::Result<Tensor> {
    let shape: &[usize] = if x.dim() == 2 { &[losses.len()] } else { &[] };
    let shape = shape.to_vec();
    reduce_loss(Tensor::from_vec(losses, &shape)?, reduction, x.dtype())
}

/// multi_margin_loss(self, target, p, margin, weight, reduction): per sample
/// `sum_{j != y} w[y] * max(0, margin - x[y] + x[j])^p / C`, p 1 or 2.
fn multi_margin_loss(a: &mut Args<'_>) -> R {
    let (x, target) = (a.tensor(0)?, a.tensor(1)?);
    let p = a.scalar(2)?.to_f64();
    let margin = a.scalar(3)?.to_f64();
    if p != 1.0 && p != 2.0 {
        return Err(invalid_argument(a.op, "p", "must be 1 or 2", p));
    }
    require_float(a.op, &x)?;
    let (xs, n, c) = margin_rows(a.op, &x, &target, false)?;
    let weight = class_weights(a.opt_tensor(4)?, c)?;
    let ys = target.to_vec::<i64>()?;
    let mut losses = Vec::with_capacity(n);
    for (row, &y) in xs.chunks(c.max(1)).zip(&ys) {
        let Some(&xy) = usize::try_from(y).ok().and_then(|y| row.get(y)) else {
            return Err(TensorError::IndexOutOfBounds {
                index: y,
                dim: 1,
                size: c,
            }
            .into());
        };
        let w = weight.as_ref().map_or(1.0, |w| w[y as usize]);
        let sum: f64 = row
            .iter()
            .enumerate()
            .filter(|&(j, _)| j as i64 != y)
            .map(|(_, &xj)| {
                let z = margin - xy + xj;
                if z > 0.0 {
                    w * if p == 1.0 { z } else { z * z }
                } else {
                    0.0
                }
            })
            .sum();
        losses.push(sum / c as f64);
    }
    t(sample_losses(losses, &x, a.int(5)?)?)
}

/// (losses, is_target) of multilabel_margin_loss: each sample's target lists class indices
/// up to the first -1; the loss sums `max(0, 1 - (x[y] - x[i]))` over its targets y and the
/// non-target classes i, divided by C.
fn multilabel_margin(a: &Args<'_>) -> crate::Result<(Tensor, Tensor)> {
    let (x, target) = (a.tensor(0)?, a.tensor(1)?);
    require_float(a.op, &x)?;
    let (xs, n, c) = margin_rows(a.op, &x, &target, true)?;
    let ys = target.to_vec::<i64>()?;
    let c1 = c.max(1);
    let mut is_target = vec![0.0; n * c];
    let mut losses = Vec::with_capacity(n);
    for i in 0..n {
        let (row, trow) = (&xs[i * c..][..c], &ys[i * c..][..c]);
        let labels: Vec<usize> = trow
            .iter()
            .take_while(|&&y| y >= 0)
            .map(|&y| {
                usize::try_from(y).ok().filter(|&y| y < c).ok_or_else(|| {
                    TensorError::IndexOutOfBounds {
                        index: y,
                        dim: 1,
                        size: c,
                    }
                    .into()
                })
            })
            .collect::<crate::Result<_>>()?;
        for &y in &labels {
            is_target[i * c + y] = 1.0;
        }
        let flags = &is_target[i * c..][..c];
        let sum: f64 = labels
            .iter()
            .map(|&y| {
                row.iter()
                    .zip(flags)
                    .filter(|(_, &f)| f == 0.0)
                    .map(|(&xi, _)| (1.0 - (row[y] - xi)).max(0.0))
                    .sum::<f64>()
            })
            .sum();
        losses.push(sum / c1 as f64);
    }
    let is_target = build(is_target, x.shape(), x.dtype())?;
    Ok((sample_losses(losses, &x, a.int(2)?)?, is_target))
}

fn multilabel_margin_loss(a: &mut Args<'_>) -> R {
    t(multilabel_margin(a)?.0)
}

fn multilabel_margin_loss_forward(a: &mut Args<'_>) -> R {
    let (l, is_target) = multilabel_margin(a)?;
    Ok(IValue::Tuple(crate::values::Tuple::new(vec![
        IValue::Tensor(l),
        IValue::Tensor(is_target),
    ])))
}

fn multilabel_margin_loss_forward_output(a: &mut Args<'_>) -> R {
    let r = multilabel_margin_loss_forward(a)?;
    a.write_outs(3, r)
}

/// Lengths given as an int list or (the `.Tensor` overloads, `TENSORS`) an integer tensor.
fn lengths<const TENSORS: bool>(a: &Args<'_>, i: usize) -> crate::Result<Vec<i64>> {
    if TENSORS {
        let t = a.tensor(i)?;
        if t.dtype().is_floating_point() {
            return Err(wrong_dtype(a.op, "lengths", "an integer tensor", t.dtype()));
        }
        t.contiguous()?.to_vec::<i64>()
    } else {
        a.int_list(i)
    }
}

/// CTC forward (PyTorch's CPU `ctc_loss_cpu_template`): per batch entry the negative log
/// likelihood of its target over all alignments, and the `[N, T, 2 * max_target + 1]` log
/// alphas (entries PyTorch leaves unwritten, past an input or target length, are -inf here).
/// `log_probs` `[T, N, C]`; targets `[N, S]` padded or 1-d concatenated.
fn ctc_forward(
    op: &str,
    log_probs: &Tensor,
    targets: &Tensor,
    input_lengths: &[i64],
    target_lengths: &[i64],
    blank: i64,
) -> crate::Result<(Tensor, Tensor)> {
    require_float(op, log_probs)?;
    let [t_max, n, c] = *log_probs.shape() else {
        return Err(rank_mismatch(
            op,
            "log_probs",
            RankRequirement::Exactly(3),
            log_probs.shape(),
        ));
    };
    if blank < 0 || blank as usize >= c {
        return Err(invalid_argument(
            op,
            "blank",
            format!("must be in [0, {c}) (the label range)"),
            blank,
        ));
    }
    if input_lengths.len() != n || target_lengths.len() != n {
        let (what, got) = if input_lengths.len() != n {
            (
                "the length of input_lengths (batch size)",
                input_lengths.len(),
            )
        } else {
            (
                "the length of target_lengths (batch size)",
                target_lengths.len(),
            )
        };
        return Err(size_mismatch(op, what, n as i64, got as i64));
    }
    let tg = targets.contiguous()?.to_vec::<i64>()?;
    let mut offsets = Vec::with_capacity(n);
    let mut max_target = 0usize;
    let mut pos = 0usize;
    for (b, &len) in target_lengths.iter().enumerate() {
        let len = usize::try_from(len)
            .map_err(|_| invalid_argument(op, "target_lengths", "must be non-negative", len))?;
        max_target = max_target.max(len);
        match targets.dim() {
            1 => {
                offsets.push(pos);
                pos += len;
            }
            2 => offsets.push(b * targets.shape()[1]),
            _ => {
                return Err(rank_mismatch(
                    op,
                    "targets",
                    RankRequirement::OneOf(vec![1, 2]),
                    targets.shape(),
                ))
            }
        }
    }
    let fits = match targets.dim() {
        1 => pos <= tg.len(),
        _ => targets.shape()[0] == n && targets.shape()[1] >= max_target,
    };
    if !fits {
        return Err(invalid_argument(
            op,
            "targets",
            format!("must hold target_lengths {target_lengths:?}"),
            format!("shape {:?}", targets.shape()),
        ));
    }
    let lp = log_probs.contiguous()?.to_vec::<f64>()?;
    let width = 2 * max_target + 1;
    let mut alpha = vec![f64::NEG_INFINITY; n * t_max * width];
    let mut nll = vec![0.0; n];
    for b in 0..n {
        let input_len = usize::try_from(input_lengths[b])
            .ok()
            .filter(|&l| l <= t_max)
            .ok_or_else(|| {
                invalid_argument(
                    op,
                    "input_lengths",
                    format!("must be in [0, {t_max}]"),
                    input_lengths[b],
                )
            })?;
        let target_len = target_lengths[b] as usize;
        let prime = |s: usize| -> crate::Result<usize> {
            if s.is_multiple_of(2) {
                return Ok(blank as usize);
            }
            let label = tg[offsets[b] + s / 2];
            usize::try_from(label)
                .ok()
                .filter(|&l| l < c)
                .ok_or_else(|| {
                    TensorError::IndexOutOfBounds {
                        index: label,
                        dim: 2,
                        size: c,
                    }
                    .into()
                })
        };
        let logp = |t: usize, k: usize| lp[(t * n + b) * c + k];
        if input_len == 0 {
            nll[b] = if target_len == 0 { 0.0 } else { f64::INFINITY };
            continue;
        }
        let la = &mut alpha[b * t_max * width..][..t_max * width];
        la[0] = logp(0, blank as usize);
        if target_len > 0 {
            la[1] = logp(0, prime(1)?);
        }
        for t in 1..input_len {
            for s in 0..2 * target_len + 1 {
                let current = prime(s)?;
                let prev = &la[(t - 1) * width..][..width];
                let la1 = prev[s];
                let la2 = if s > 0 {
                    prev[s - 1]
                } else {
                    f64::NEG_INFINITY
                };
                let la3 = if s > 1 && prime(s - 2)? != current {
                    prev[s - 2]
                } else {
                    f64::NEG_INFINITY
                };
                let mut m = la1.max(la2).max(la3);
                if m == f64::NEG_INFINITY {
                    m = 0.0;
                }
                la[t * width + s] = ((la1 - m).exp() + (la2 - m).exp() + (la3 - m).exp()).ln()
                    + m
                    + logp(t, current);
            }
        }
        let last = &la[(input_len - 1) * width..][..width];
        nll[b] = if target_len == 0 {
            -last[0]
        } else {
            let (l1, l2) = (last[2 * target_len], last[2 * target_len - 1]);
            let m = l1.max(l2);
            let m = if m == f64::NEG_INFINITY { 0.0 } else { m };
            -(((l1 - m).exp() + (l2 - m).exp()).ln() + m)
        };
    }
    let dt = log_probs.dtype();
    Ok((build(nll, &[n], dt)?, build(alpha, &[n, t_max, width], dt)?))
}

/// _ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity) ->
/// (neg_log_likelihood, log_alpha); zero_infinity only matters to the backward.
fn underscore_ctc_loss<const TENSORS: bool>(a: &mut Args<'_>) -> R {
    let (nll, alpha) = ctc_forward(
        a.op,
        &a.tensor(0)?,
        &a.tensor(1)?,
        &lengths::<TENSORS>(a, 2)?,
        &lengths::<TENSORS>(a, 3)?,
        a.int(4)?,
    )?;
    Ok(IValue::Tuple(crate::values::Tuple::new(vec![
        IValue::Tensor(nll),
        IValue::Tensor(alpha),
    ])))
}

/// ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, reduction,
/// zero_infinity): unbatched `[T, C]` input allowed; infinite losses zeroed on request; mean
/// divides each loss by its target length (at least 1) before averaging.
fn ctc_loss<const TENSORS: bool>(a: &mut Args<'_>) -> R {
    let (lp, targets) = (a.tensor(0)?, a.tensor(1)?);
    let batched = lp.dim() == 3;
    let (lp, targets) = if batched {
        (lp, targets)
    } else {
        (
            super::shape::unsqueeze(&lp, 1)?,
            super::shape::unsqueeze(&targets, 0)?,
        )
    };
    let target_lengths = lengths::<TENSORS>(a, 3)?;
    let (nll, _) = ctc_forward(
        a.op,
        &lp,
        &targets,
        &lengths::<TENSORS>(a, 2)?,
        &target_lengths,
        a.int(4)?,
    )?;
    let mut losses = vals(&nll)?;
    if a.bool(6)? {
        losses
            .iter_mut()
            .filter(|l| **l == f64::INFINITY)
            .for_each(|l| *l = 0.0);
    }
    let dt = lp.dtype();
    let out = match a.int(5)? {
        0 => {
            let shape: &[usize] = if batched { &[losses.len()] } else { &[] };
            build(losses, shape, dt)?
        }
        1 => {
            let k = losses.len().max(1) as f64;
            let mean = losses
                .iter()
                .zip(&target_lengths)
                .map(|(l, &tl)| l / tl.max(1) as f64)
                .sum::<f64>()
                / k;
            build(vec![mean], &[], dt)?
        }
        2 => build(vec![losses.iter().sum()], &[], dt)?,
        other => return Err(bad_reduction(other)),
    };
    t(out)
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::mse_loss", mse_loss);
    r.add("aten::l1_loss", l1_loss);
    r.add("aten::smooth_l1_loss", smooth_l1_loss);
    r.add("aten::huber_loss", huber_loss);
    r.add("aten::soft_margin_loss", soft_margin_loss);
    r.add("aten::kl_div", kl_div);
    r.add("aten::binary_cross_entropy", binary_cross_entropy);
    r.add("aten::binary_cross_entropy_with_logits", bce_with_logits);
    r.add("aten::margin_ranking_loss", margin_ranking_loss);
    r.add("aten::hinge_embedding_loss", hinge_embedding_loss);
    r.add("aten::poisson_nll_loss", poisson_nll_loss);
    r.add("aten::cosine_embedding_loss", cosine_embedding_loss);
    r.add("aten::triplet_margin_loss", triplet_margin_loss);
    r.add_all(
        &["aten::nll_loss", "aten::nll_loss_nd", "aten::nll_loss2d"],
        |a| nll_loss(a, false),
    );
    // the `_forward` twins also return the total weight
    r.add_all(
        &["aten::nll_loss_forward", "aten::nll_loss2d_forward"],
        |a| nll_loss(a, true),
    );
    r.add_all(
        &[
            "aten::nll_loss_forward.output",
            "aten::nll_loss2d_forward.output",
        ],
        |a| {
            let r = nll_loss(a, true)?;
            a.write_outs(5, r)
        },
    );
    r.add("aten::cross_entropy_loss", cross_entropy_loss);
    r.add("aten::multi_margin_loss", multi_margin_loss);
    r.add("aten::_ctc_loss", underscore_ctc_loss::<false>);
    r.add("aten::_ctc_loss.Tensor", underscore_ctc_loss::<true>);
    r.add("aten::ctc_loss.IntList", ctc_loss::<false>);
    r.add("aten::ctc_loss.Tensor", ctc_loss::<true>);
    r.add("aten::multilabel_margin_loss", multilabel_margin_loss);
    r.add(
        "aten::multilabel_margin_loss_forward",
        multilabel_margin_loss_forward,
    );
    r.add(
        "aten::multilabel_margin_loss_forward.output",
        multilabel_margin_loss_forward_output,
    );
}
