//! Kernels: batch / layer / group / instance / RMS normalization. Statistics accumulate in f64;
//! half and bfloat16 inputs compute in f32 and round once.

use super::kernels::rowwise;
use super::kernels::{check_rank, invalid_argument, shape_err, unsupported_feature, value_err};
use super::linalg::{
    compute_dtype, contiguous_as, dispatch_real_compute, slice_mut_of, slice_of, Real,
};
use super::{Args, Registry};
#[allow(unused_imports)]
use crate::tensor::Element as _;
use crate::tensor::RankRequirement;
use crate::tensor::{DType, Tensor};
use crate::values::{IValue, Tuple};
#[allow(unused_imports)]
use num_traits::{Float as _, One as _, Zero as _};
use rayon::prelude::*;

/// Mean and biased variance of a slice (two passes, f64).
fn moments<T: Real>(xs: &[T]) -> (f64, f64) {
    if xs.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let n = xs.len() as f64;
    let mean = xs.iter().map(|v| v.as_f64()).sum::<f64>() / n;
    let var = xs
        .iter()
        .map(|v| {
            let d = v.as_f64() - mean;
            d * d
        })
        .sum::<f64>()
        / n;
    (mean, var)
}

/// An optional per-channel parameter as compute-dtype values, checked to have `len` elements.
fn param_vec(
    op: &str,
    t: Option<&Tensor>,
    len: usize,
    what: &str,
) -> crate::Result<Option<Vec<f64>>> {
    match t {
        None => Ok(None),
        Some(t) => {
            if t.numel() != len {
                // PyTorch's text (the hostile-input goldens compare it)
                return Err(shape_err(format!(
                    "{op}: {what} should contain {len} elements not {}",
                    t.numel()
                )));
            }
            Ok(Some(t.to_vec::<f64>()?))
        }
    }
}

/// Normalize contiguous groups of `group_len` elements; `channel_of(group, j)` names the affine
/// parameter for element j of a group. Returns (out, mean, rstd) per group.
#[allow(clippy::type_complexity)]
fn normalize_groups(
    op: &str,
    x: &Tensor,
    group_len: usize,
    eps: f64,
    affine: &(dyn Fn(usize, usize) -> (f64, f64) + Sync),
    rms: bool,
) -> crate::Result<(Tensor, Vec<f64>, Vec<f64>)> {
    let dtype = x.dtype();
    let cd = compute_dtype(op, dtype)?;
    let xc = contiguous_as(x, cd)?;
    let out = Tensor::zeros(x.shape(), cd)?;
    let groups = x.numel().checked_div(group_len).unwrap_or(0);
    let mut stats = vec![(0.0f64, 0.0f64); groups];
    dispatch_real_compute!(cd, op, |T| {
        let xs_guard = xc.read::<T>()?;
        let xs = slice_of(&xs_guard)?;
        let mut os_guard = out.write::<T>()?;
        let os = slice_mut_of(&mut os_guard)?;
        if group_len > 0 {
            os.par_chunks_mut(group_len)
                .zip(xs.par_chunks(group_len))
                .zip(stats.par_iter_mut())
                .enumerate()
                .for_each(|(gi, ((o, src), st))| {
                    let (mean, var) = if rms {
                        let ms = src.iter().map(|v| v.as_f64() * v.as_f64()).sum::<f64>()
                            / src.len() as f64;
                        (0.0, ms)
                    } else {
                        moments(src)
                    };
                    let rstd = 1.0 / (var + eps).sqrt();
                    *st = (mean, rstd);
                    for (j, (d, &s)) in o.iter_mut().zip(src).enumerate() {
                        let (w, b) = affine(gi, j);
                        *d = T::from_f64((s.as_f64() - mean) * rstd * w + b);
                    }
                });
        }
        Ok::<(), crate::Error>(())
    })?;
    let (means, rstds) = stats.into_iter().unzip();
    Ok((out.to_dtype(dtype)?, means, rstds))
}

/// A stats tensor of `shape` in the dtype PyTorch returns it (the input's).
fn stats_tensor(v: Vec<f64>, shape: &[usize], dtype: DType) -> crate::Result<Tensor> {
    Tensor::from_vec(v, shape)?.to_dtype(dtype)
}

/// Layer norm of a contiguous float32 input with float32 (or no) weight and bias of `inner`
/// elements: the vectorized row kernel. `None` for any other form (the generic path).
#[allow(clippy::type_complexity)]
fn layer_norm_f32(
    x: &Tensor,
    inner: usize,
    w: Option<&Tensor>,
    b: Option<&Tensor>,
    eps: f64,
) -> crate::Result<Option<(Tensor, Vec<f64>, Vec<f64>)>> {
    let param_ok = |p: Option<&Tensor>| {
        p.is_none_or(|p| p.dtype() == DType::Float32 && p.numel() == inner && p.is_contiguous())
    };
    if x.dtype() != DType::Float32 || inner == 0 || !param_ok(w) || !param_ok(b) {
        return Ok(None);
    }
    let xg = x.read::<f32>()?;
    let Some(xs) = xg.as_slice() else {
        return Ok(None);
    };
    let wg = w.map(|w| w.read::<f32>()).transpose()?;
    let ws = wg.as_ref().map(slice_of).transpose()?;
    let bg = b.map(|b| b.read::<f32>()).transpose()?;
    let bs = bg.as_ref().map(slice_of).transpose()?;
    let out = Tensor::empty(x.shape(), DType::Float32)?;
    let mut stats = vec![(0.0f64, 0.0f64); xs.len() / inner];
    {
        let mut og = out.write::<f32>()?;
        let os = slice_mut_of(&mut og)?;
        rowwise::layer_norm_f32(xs, inner, ws, bs, eps, os, &mut stats);
    }
    let (means, rstds) = stats.into_iter().unzip();
    Ok(Some((out, means, rstds)))
}

fn layer_norm_impl(a: &Args, rms: bool) -> crate::Result<(Tensor, Vec<f64>, Vec<f64>, usize)> {
    let x = a.tensor(0)?;
    let shape = a.int_list(1)?;
    let nd = shape.len();
    if nd == 0
        || nd > x.dim()
        || x.shape()[x.dim() - nd..]
            .iter()
            .zip(&shape)
            .any(|(&s, &n)| s as i64 != n)
    {
        // PyTorch's text (the hostile-input goldens compare it)
        return Err(shape_err(format!(
            "{}: Given normalized_shape={shape:?}, expected input with shape [*, {}], but got input of size{:?}",
            a.op,
            shape.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", "),
            x.shape()
        )));
    }
    let inner: usize = x.shape()[x.dim() - nd..].iter().product();
    if !rms {
        if let Some((o, m, r)) = layer_norm_f32(
            &x,
            inner,
            a.opt_tensor(2)?.as_ref(),
            a.opt_tensor(3)?.as_ref(),
            a.double(4)?,
        )? {
            return Ok((o, m, r, nd));
        }
    }
    let w = param_vec(a.op, a.opt_tensor(2)?.as_ref(), inner, "weight")?;
    let (b, eps) = if rms {
        let eps = match a.opt_double(3)? {
            Some(e) => e,
            None => match x.dtype() {
                DType::Float64 => f64::EPSILON,
                DType::Float16 => 0.0009765625,
                DType::BFloat16 => 0.0078125,
                _ => f32::EPSILON as f64,
            },
        };
        (None, eps)
    } else {
        (
            param_vec(a.op, a.opt_tensor(3)?.as_ref(), inner, "bias")?,
            a.double(4)?,
        )
    };
    let affine = |_g: usize, j: usize| {
        (
            w.as_ref().map_or(1.0, |w| w[j]),
            b.as_ref().map_or(0.0, |b| b[j]),
        )
    };
    let (o, m, r) = normalize_groups(a.op, &x, inner, eps, &affine, rms)?;
    Ok((o, m, r, nd))
}

/// Layer norm over the last dim of `x` (used by fused transformer kernels).
pub(crate) fn layer_norm_last(
    op: &str,
    x: &Tensor,
    w: Option<&Tensor>,
    b: Option<&Tensor>,
    eps: f64,
) -> crate::Result<Tensor> {
    let inner = x.shape().last().copied().unwrap_or(1);
    let wv = param_vec(op, w, inner, "weight")?;
    let bv = param_vec(op, b, inner, "bias")?;
    let affine = |_g: usize, j: usize| {
        (
            wv.as_ref().map_or(1.0, |w| w[j]),
            bv.as_ref().map_or(0.0, |b| b[j]),
        )
    };
    Ok(normalize_groups(op, x, inner, eps, &affine, false)?.0)
}

fn layer_norm(a: &mut Args) -> crate::Result<IValue> {
    Ok(IValue::Tensor(layer_norm_impl(a, false)?.0))
}

fn native_layer_norm(a: &mut Args) -> crate::Result<IValue> {
    let x = a.tensor(0)?;
    let (o, m, r, nd) = layer_norm_impl(a, false)?;
    let mut shape = x.shape()[..x.dim() - nd].to_vec();
    shape.extend(std::iter::repeat_n(1, nd));
    let sd = if x.dtype() == DType::Float64 {
        DType::Float64
    } else {
        DType::Float32
    };
    let sd = if x.dtype() == DType::Float16 || x.dtype() == DType::BFloat16 {
        x.dtype()
    } else {
        sd
    };
    Ok(IValue::Tuple(Tuple::new(vec![
        IValue::Tensor(o),
        IValue::Tensor(stats_tensor(m, &shape, sd)?),
        IValue::Tensor(stats_tensor(r, &shape, sd)?),
    ])))
}

fn rms_norm(a: &mut Args) -> crate::Result<IValue> {
    Ok(IValue::Tensor(layer_norm_impl(a, true)?.0))
}

/// _fused_rms_norm(input, normalized_shape, weight?, eps?) -> (out, rstd): rms_norm and its
/// per-row reciprocal rms, shaped as native_layer_norm shapes its stats.
fn fused_rms_norm(a: &mut Args) -> crate::Result<IValue> {
    let x = a.tensor(0)?;
    let (o, _, r, nd) = layer_norm_impl(a, true)?;
    let mut shape = x.shape()[..x.dim() - nd].to_vec();
    shape.extend(std::iter::repeat_n(1, nd));
    Ok(IValue::Tuple(Tuple::new(vec![
        IValue::Tensor(o),
        IValue::Tensor(stats_tensor(r, &shape, x.dtype())?),
    ])))
}

/// group norm over `x [N, C, *]`; returns (out, mean [N, G], rstd [N, G]).
fn group_norm_impl(
    op: &str,
    x: &Tensor,
    groups: usize,
    w: Option<&Tensor>,
    b: Option<&Tensor>,
    eps: f64,
) -> crate::Result<(Tensor, Tensor, Tensor)> {
    check_rank(op, "input", RankRequirement::AtLeast(2), x.shape())?;
    let (n, c) = (x.shape()[0], x.shape()[1]);
    if groups == 0 || c % groups != 0 {
        // PyTorch's text (the hostile-input goldens compare it)
        return Err(value_err(format!(
            "{op}: Expected number of channels in input to be divisible by num_groups, but got input of shape {:?} and num_groups={groups}",
            x.shape()
        )));
    }
    let hw: usize = x.shape()[2..].iter().product();
    let cpg = c / groups;
    let wv = param_vec(op, w, c, "weight")?;
    let bv = param_vec(op, b, c, "bias")?;
    let affine = |g: usize, j: usize| {
        let ch = (g % groups) * cpg + j / hw.max(1);
        (
            wv.as_ref().map_or(1.0, |w| w[ch]),
            bv.as_ref().map_or(0.0, |b| b[ch]),
        )
    };
    let (o, m, r) = normalize_groups(op, x, cpg * hw, eps, &affine, false)?;
    let (m, r) = if cpg * hw == 0 {
        (vec![f64::NAN; n * groups], vec![f64::NAN; n * groups])
    } else {
        (m, r)
    };
    Ok((
        o,
        stats_tensor(m, &[n, groups], x.dtype())?,
        stats_tensor(r, &[n, groups], x.dtype())?,
    ))
}

fn group_norm(a: &mut Args) -> crate::Result<IValue> {
    let x = a.tensor(0)?;
    let g = a.int(1)?;
    let (w, b) = (a.opt_tensor(2)?, a.opt_tensor(3)?);
    let g = usize::try_from(g)
        .map_err(|_| invalid_argument(a.op, "num_groups", "must be positive", g))?;
    Ok(IValue::Tensor(
        group_norm_impl(a.op, &x, g, w.as_ref(), b.as_ref(), a.double(4)?)?.0,
    ))
}

/// native_group_norm(input, weight, bias, N, C, HxW, group, eps)
fn native_group_norm(a: &mut Args) -> crate::Result<IValue> {
    let x = a.tensor(0)?;
    let (w, b) = (a.opt_tensor(1)?, a.opt_tensor(2)?);
    let group = a.int(6)?;
    let g = usize::try_from(group)
        .map_err(|_| invalid_argument(a.op, "group", "must be positive", group))?;
    let (o, m, r) = group_norm_impl(a.op, &x, g, w.as_ref(), b.as_ref(), a.double(7)?)?;
    Ok(IValue::Tuple(Tuple::new(vec![
        IValue::Tensor(o),
        IValue::Tensor(m),
        IValue::Tensor(r),
    ])))
}

/// Batch norm over `x [N, C, *]`. In training (or without running stats) uses batch statistics
/// and updates running stats in place; returns (out, save_mean, save_invstd) — the saved stats
/// are empty in eval mode, as PyTorch's CPU kernel returns them.
#[allow(clippy::too_many_arguments)]
fn batch_norm_impl(
    op: &str,
    x: &Tensor,
    w: Option<&Tensor>,
    b: Option<&Tensor>,
    rm: Option<&Tensor>,
    rv: Option<&Tensor>,
    training: bool,
    momentum: f64,
    eps: f64,
) -> crate::Result<(Tensor, Tensor, Tensor)> {
    check_rank(op, "input", RankRequirement::AtLeast(2), x.shape())?;
    let (n, c) = (x.shape()[0], x.shape()[1]);
    let hw: usize = x.shape()[2..].iter().product();
    let wv = param_vec(op, w, c, "weight")?;
    let bv = param_vec(op, b, c, "bias")?;
    let use_batch = training || rm.is_none() || rv.is_none();
    let dtype = x.dtype();
    let cd = compute_dtype(op, dtype)?;
    let xc = contiguous_as(x, cd)?;
    let (mean, var): (Vec<f64>, Vec<f64>) = if use_batch {
        let count = n * hw;
        if count <= 1 && training {
            return Err(invalid_argument(
                op,
                "input",
                "must have more than 1 value per channel when training",
                format!("shape {:?}", x.shape()),
            ));
        }
        dispatch_real_compute!(cd, op, |T| {
            let xs_guard = xc.read::<T>()?;
            let xs = slice_of(&xs_guard)?;
            Ok::<_, crate::Error>(
                (0..c)
                    .into_par_iter()
                    .map(|ch| {
                        let mut s = 0.0;
                        for i in 0..n {
                            s += xs[(i * c + ch) * hw..][..hw]
                                .iter()
                                .map(|v| v.as_f64())
                                .sum::<f64>();
                        }
                        let mean = s / count as f64;
                        let mut v = 0.0;
                        for i in 0..n {
                            v += xs[(i * c + ch) * hw..][..hw]
                                .iter()
                                .map(|x| (x.as_f64() - mean).powi(2))
                                .sum::<f64>();
                        }
                        (mean, v / count as f64)
                    })
                    .unzip(),
            )
        })?
    } else {
        let (Some(rm), Some(rv)) = (rm, rv) else {
            return Err(invalid_argument(
                op,
                "running_mean and running_var",
                "must be given when training=False",
                "None",
            ));
        };
        (
            param_vec(op, Some(rm), c, "running_mean")?.unwrap_or_default(),
            param_vec(op, Some(rv), c, "running_var")?.unwrap_or_default(),
        )
    };
    let scale: Vec<f64> = (0..c)
        .map(|ch| wv.as_ref().map_or(1.0, |w| w[ch]) / (var[ch] + eps).sqrt())
        .collect();
    let shift: Vec<f64> = (0..c)
        .map(|ch| bv.as_ref().map_or(0.0, |b| b[ch]) - mean[ch] * scale[ch])
        .collect();
    let out = Tensor::empty(x.shape(), cd)?;
    // Inference on float/double input: PyTorch's arithmetic, in the input's precision and
    // order (alpha = 1/sqrt(var + eps) * w, beta = b - mean * alpha, x * alpha + beta), so
    // every normalization of a deep network rounds as PyTorch's does and adds no drift.
    let same_arithmetic = !use_batch && dtype == cd;
    dispatch_real_compute!(cd, op, |T| {
        let xs_guard = xc.read::<T>()?;
        let xs = slice_of(&xs_guard)?;
        let mut os_guard = out.write::<T>()?;
        let os = slice_mut_of(&mut os_guard)?;
        if same_arithmetic && hw > 0 {
            let (alpha, beta): (Vec<T>, Vec<T>) = (0..c)
                .map(|ch| {
                    let invstd = T::one() / (T::from_f64(var[ch]) + T::from_f64(eps)).sqrt();
                    let alpha = invstd * T::from_f64(wv.as_ref().map_or(1.0, |w| w[ch]));
                    let beta = T::from_f64(bv.as_ref().map_or(0.0, |b| b[ch]))
                        - T::from_f64(mean[ch]) * alpha;
                    (alpha, beta)
                })
                .unzip();
            let plane = |(i, (o, s)): (usize, (&mut [T], &[T]))| {
                let (a, b) = (alpha[i % c], beta[i % c]);
                for (d, &v) in o.iter_mut().zip(s) {
                    *d = v * a + b;
                }
            };
            if xs.len() >= crate::tensor::PARALLEL_THRESHOLD {
                os.par_chunks_mut(hw)
                    .zip(xs.par_chunks(hw))
                    .enumerate()
                    .for_each(plane);
            } else {
                os.chunks_mut(hw)
                    .zip(xs.chunks(hw))
                    .enumerate()
                    .for_each(plane);
            }
        } else if hw > 0 {
            os.par_chunks_mut(hw)
                .zip(xs.par_chunks(hw))
                .enumerate()
                .for_each(|(i, (o, s))| {
                    let ch = i % c;
                    let (sc, sh) = (scale[ch], shift[ch]);
                    for (d, &v) in o.iter_mut().zip(s) {
                        *d = T::from_f64(v.as_f64() * sc + sh);
                    }
                });
        }
        Ok::<(), crate::Error>(())
    })?;
    let stat_dtype = if cd == DType::Float64 {
        cd
    } else {
        DType::Float32
    };
    let (save_mean, save_invstd) = if use_batch {
        if training {
            let count = (n * hw) as f64;
            if let (Some(rm), Some(rv)) = (rm, rv) {
                let new_m: Vec<f64> = param_vec(op, Some(rm), c, "running_mean")?
                    .unwrap_or_default()
                    .iter()
                    .zip(&mean)
                    .map(|(r, m)| (1.0 - momentum) * r + momentum * m)
                    .collect();
                let new_v: Vec<f64> = param_vec(op, Some(rv), c, "running_var")?
                    .unwrap_or_default()
                    .iter()
                    .zip(&var)
                    .map(|(r, v)| (1.0 - momentum) * r + momentum * v * count / (count - 1.0))
                    .collect();
                rm.copy_from(&Tensor::from_vec(new_m, rm.shape())?)?;
                rv.copy_from(&Tensor::from_vec(new_v, rv.shape())?)?;
            }
        }
        let invstd: Vec<f64> = var.iter().map(|v| 1.0 / (v + eps).sqrt()).collect();
        (
            stats_tensor(mean, &[c], stat_dtype)?,
            stats_tensor(invstd, &[c], stat_dtype)?,
        )
    } else {
        (
            Tensor::zeros(&[0], stat_dtype)?,
            Tensor::zeros(&[0], stat_dtype)?,
        )
    };
    Ok((out.to_dtype(dtype)?, save_mean, save_invstd))
}

fn triple(t: (Tensor, Tensor, Tensor)) -> IValue {
    IValue::Tuple(Tuple::new(vec![
        IValue::Tensor(t.0),
        IValue::Tensor(t.1),
        IValue::Tensor(t.2),
    ]))
}

/// Batch norm of the argument layout batch_norm, native_batch_norm and _batch_norm_impl_index
/// share: (input, weight, bias, running_mean, running_var, training, momentum, eps, ...).
fn batch_norm_of_args(a: &Args) -> crate::Result<(Tensor, Tensor, Tensor)> {
    let (x, w, b) = (a.tensor(0)?, a.opt_tensor(1)?, a.opt_tensor(2)?);
    let (rm, rv) = (a.opt_tensor(3)?, a.opt_tensor(4)?);
    batch_norm_impl(
        a.op,
        &x,
        w.as_ref(),
        b.as_ref(),
        rm.as_ref(),
        rv.as_ref(),
        a.bool(5)?,
        a.double(6)?,
        a.double(7)?,
    )
}

/// batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn)
fn batch_norm(a: &mut Args) -> crate::Result<IValue> {
    Ok(IValue::Tensor(batch_norm_of_args(a)?.0))
}

/// native_batch_norm / _native_batch_norm_legit: same arguments without cudnn_enabled.
fn native_batch_norm(a: &mut Args) -> crate::Result<IValue> {
    if matches!(a.get(3)?, IValue::Bool(_)) {
        return batch_norm_no_stats(a);
    }
    Ok(triple(batch_norm_of_args(a)?))
}

/// _native_batch_norm_legit_no_training(input, weight, bias, running_mean, running_var,
/// momentum, eps)
fn batch_norm_no_training(a: &mut Args) -> crate::Result<IValue> {
    let (x, w, b) = (a.tensor(0)?, a.opt_tensor(1)?, a.opt_tensor(2)?);
    let (rm, rv) = (a.tensor(3)?, a.tensor(4)?);
    Ok(triple(batch_norm_impl(
        a.op,
        &x,
        w.as_ref(),
        b.as_ref(),
        Some(&rm),
        Some(&rv),
        false,
        a.double(5)?,
        a.double(6)?,
    )?))
}

/// _native_batch_norm_legit.no_stats(input, weight, bias, training, momentum, eps)
fn batch_norm_no_stats(a: &mut Args) -> crate::Result<IValue> {
    let (x, w, b) = (a.tensor(0)?, a.opt_tensor(1)?, a.opt_tensor(2)?);
    Ok(triple(batch_norm_impl(
        a.op,
        &x,
        w.as_ref(),
        b.as_ref(),
        None,
        None,
        a.bool(3)?,
        a.double(4)?,
        a.double(5)?,
    )?))
}

/// The empty byte tensor PyTorch's CPU batch norm returns as its (cudnn-only) reserve space.
fn empty_reserve() -> crate::Result<IValue> {
    Ok(IValue::Tensor(Tensor::zeros(&[0], DType::UInt8)?))
}

/// _native_batch_norm_legit_functional(input, weight, bias, running_mean, running_var,
/// training, momentum, eps) -> (out, save_mean, save_invstd, running_mean_out,
/// running_var_out): the running stats are updated in copies, the inputs stay as they were.
fn batch_norm_legit_functional(a: &mut Args) -> crate::Result<IValue> {
    let (x, w, b) = (a.tensor(0)?, a.opt_tensor(1)?, a.opt_tensor(2)?);
    let (rm, rv) = (a.tensor(3)?.deep_clone()?, a.tensor(4)?.deep_clone()?);
    let (o, m, r) = batch_norm_impl(
        a.op,
        &x,
        w.as_ref(),
        b.as_ref(),
        Some(&rm),
        Some(&rv),
        a.bool(5)?,
        a.double(6)?,
        a.double(7)?,
    )?;
    Ok(IValue::Tuple(Tuple::new(vec![
        IValue::Tensor(o),
        IValue::Tensor(m),
        IValue::Tensor(r),
        IValue::Tensor(rm),
        IValue::Tensor(rv),
    ])))
}

/// (out, save_mean, save_invstd, reserve) of native batch norm with the given running stats.
fn batch_norm_with_reserve(
    a: &Args,
    rm: Option<&Tensor>,
    rv: Option<&Tensor>,
    training: bool,
) -> crate::Result<Vec<IValue>> {
    let (x, w, b) = (a.tensor(0)?, a.opt_tensor(1)?, a.opt_tensor(2)?);
    let (o, m, r) = batch_norm_impl(
        a.op,
        &x,
        w.as_ref(),
        b.as_ref(),
        rm,
        rv,
        training,
        a.double(5)?,
        a.double(6)?,
    )?;
    Ok(vec![
        IValue::Tensor(o),
        IValue::Tensor(m),
        IValue::Tensor(r),
        empty_reserve()?,
    ])
}

/// _batch_norm_with_update(input, weight, bias, running_mean!, running_var!, momentum, eps):
/// training-mode batch norm updating the running stats in place.
fn batch_norm_with_update(a: &mut Args) -> crate::Result<IValue> {
    let (rm, rv) = (a.tensor(3)?, a.tensor(4)?);
    Ok(IValue::Tuple(Tuple::new(batch_norm_with_reserve(
        a,
        Some(&rm),
        Some(&rv),
        true,
    )?)))
}

/// _batch_norm_with_update_functional: as _batch_norm_with_update, returning the updated
/// running stats as copies after the reserve.
fn batch_norm_with_update_functional(a: &mut Args) -> crate::Result<IValue> {
    let (rm, rv) = (a.tensor(3)?.deep_clone()?, a.tensor(4)?.deep_clone()?);
    let mut outs = batch_norm_with_reserve(a, Some(&rm), Some(&rv), true)?;
    outs.push(IValue::Tensor(rm));
    outs.push(IValue::Tensor(rv));
    Ok(IValue::Tuple(Tuple::new(outs)))
}

/// _batch_norm_no_update(input, weight, bias, running_mean?, running_var?, momentum, eps):
/// eval-mode batch norm (batch statistics when the running stats are absent).
fn batch_norm_no_update(a: &mut Args) -> crate::Result<IValue> {
    let (rm, rv) = (a.opt_tensor(3)?, a.opt_tensor(4)?);
    Ok(IValue::Tuple(Tuple::new(batch_norm_with_reserve(
        a,
        rm.as_ref(),
        rv.as_ref(),
        false,
    )?)))
}

/// _batch_norm_impl_index(input, weight, bias, running_mean, running_var, training, momentum,
/// eps, cudnn_enabled) -> (out, save_mean, save_invstd, reserve, 0): index 0 names the native
/// backend, the one PyTorch's CPU build picks.
fn batch_norm_impl_index(a: &mut Args) -> crate::Result<IValue> {
    let (o, m, r) = batch_norm_of_args(a)?;
    Ok(IValue::Tuple(Tuple::new(vec![
        IValue::Tensor(o),
        IValue::Tensor(m),
        IValue::Tensor(r),
        empty_reserve()?,
        IValue::Int(0),
    ])))
}

/// batch_norm_update_stats(input, running_mean?, running_var?, momentum) -> (mean, var): the
/// per-channel batch mean and biased variance; the running stats (when given) move towards the
/// mean and the unbiased variance.
fn batch_norm_update_stats(a: &mut Args) -> crate::Result<IValue> {
    let x = a.tensor(0)?;
    let (rm, rv) = (a.opt_tensor(1)?, a.opt_tensor(2)?);
    let momentum = a.double(3)?;
    check_rank(a.op, "input", RankRequirement::AtLeast(2), x.shape())?;
    let (n, c) = (x.shape()[0], x.shape()[1]);
    let hw: usize = x.shape()[2..].iter().product();
    let count = n * hw;
    let cd = compute_dtype(a.op, x.dtype())?;
    let xv = contiguous_as(&x, DType::Float64)?.to_vec::<f64>()?;
    let (mean, var): (Vec<f64>, Vec<f64>) = (0..c)
        .map(|ch| {
            let plane = |i: usize| xv[(i * c + ch) * hw..][..hw].iter();
            let s: f64 = (0..n).flat_map(plane).sum();
            let mean = s / count as f64;
            let v: f64 = (0..n).flat_map(plane).map(|x| (x - mean).powi(2)).sum();
            (mean, v)
        })
        .unzip();
    if let Some(rm) = &rm {
        let old = param_vec(a.op, Some(rm), c, "running_mean")?.unwrap_or_default();
        let new: Vec<f64> = old
            .iter()
            .zip(&mean)
            .map(|(r, m)| momentum * m + (1.0 - momentum) * r)
            .collect();
        rm.copy_from(&Tensor::from_vec(new, rm.shape())?)?;
    }
    if let Some(rv) = &rv {
        let old = param_vec(a.op, Some(rv), c, "running_var")?.unwrap_or_default();
        let new: Vec<f64> = old
            .iter()
            .zip(&var)
            .map(|(r, v)| momentum * v / (count as f64 - 1.0) + (1.0 - momentum) * r)
            .collect();
        rv.copy_from(&Tensor::from_vec(new, rv.shape())?)?;
    }
    let biased: Vec<f64> = var.iter().map(|v| v / count as f64).collect();
    Ok(IValue::Tuple(Tuple::new(vec![
        IValue::Tensor(stats_tensor(mean, &[c], cd)?),
        IValue::Tensor(stats_tensor(biased, &[c], cd)?),
    ])))
}

/// instance_norm(input, weight, bias, running_mean, running_var, use_input_stats, momentum,
/// eps, cudnn_enabled)
fn instance_norm(a: &mut Args) -> crate::Result<IValue> {
    let x = a.tensor(0)?;
    let (w, b) = (a.opt_tensor(1)?, a.opt_tensor(2)?);
    let (rm, rv) = (a.opt_tensor(3)?, a.opt_tensor(4)?);
    let use_input_stats = a.bool(5)?;
    let eps = a.double(7)?;
    if !use_input_stats {
        return Ok(IValue::Tensor(
            batch_norm_impl(
                a.op,
                &x,
                w.as_ref(),
                b.as_ref(),
                rm.as_ref(),
                rv.as_ref(),
                false,
                a.double(6)?,
                eps,
            )?
            .0,
        ));
    }
    if rm.is_some() || rv.is_some() {
        return Err(unsupported_feature(
            a.op,
            "updating the running stats of instance_norm",
        ));
    }
    // Each (n, c) plane normalized by its own stats: group norm with one group per channel.
    let c = if x.dim() >= 2 { x.shape()[1] } else { 0 };
    Ok(IValue::Tensor(
        group_norm_impl(a.op, &x, c, w.as_ref(), b.as_ref(), eps)?.0,
    ))
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::layer_norm", layer_norm);
    r.add("aten::native_layer_norm", native_layer_norm);
    r.add("aten::rms_norm", rms_norm);
    r.add("aten::_fused_rms_norm", fused_rms_norm);
    r.add("aten::group_norm", group_norm);
    r.add("aten::native_group_norm", native_group_norm);
    r.add("aten::batch_norm", batch_norm);
    r.add_all(
        &["aten::native_batch_norm", "aten::_native_batch_norm_legit"],
        native_batch_norm,
    );
    r.add(
        "aten::_native_batch_norm_legit_no_training",
        batch_norm_no_training,
    );
    r.add(
        "aten::_native_batch_norm_legit.no_stats",
        batch_norm_no_stats,
    );
    r.add("aten::instance_norm", instance_norm);
    r.add(
        "aten::_native_batch_norm_legit_functional",
        batch_norm_legit_functional,
    );
    r.add("aten::_batch_norm_with_update", batch_norm_with_update);
    r.add(
        "aten::_batch_norm_with_update_functional",
        batch_norm_with_update_functional,
    );
    r.add("aten::_batch_norm_no_update", batch_norm_no_update);
    r.add("aten::_batch_norm_impl_index", batch_norm_impl_index);
    r.add("aten::batch_norm_update_stats", batch_norm_update_stats);
}
