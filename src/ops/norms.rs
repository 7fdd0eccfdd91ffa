//! Vector and matrix norms and the operators built on them: `linalg_norm` /
//! `linalg_matrix_norm` (the orders that need no SVD), `norm_except_dim` and `_weight_norm`
//! (`nn.utils.weight_norm`), `cdist`, `pdist`, `pairwise_distance` and `cosine_similarity`.
//! They compute in f64 and return the input's floating dtype, as PyTorch's results agree to
//! rounding.

use super::{Args, Registry};
use crate::tensor::{DType, Tensor};
use crate::values::{IValue, Tuple};

type R<T = IValue> = crate::Result<T>;

fn err(msg: impl Into<String>) -> crate::Error {
    crate::error::RuntimeError::Other(msg.into()).into()
}

fn float_dtype(op: &str, t: &Tensor) -> R<DType> {
    match t.dtype() {
        d if d.is_floating_point() => Ok(d),
        d => Err(err(format!(
            "{op}: expected a floating point tensor, got {}",
            d.name()
        ))),
    }
}

fn out(v: Vec<f64>, shape: &[usize], dtype: DType) -> R<Tensor> {
    Tensor::from_vec(v, shape)?.to_dtype(dtype)
}

fn wrap(op: &str, d: i64, n: usize) -> R<usize> {
    crate::tensor::wrap_dim(d, n.max(1)).map_err(|e| err(format!("{op}: {e}")))
}

/// The p-norm of `v` as PyTorch defines it (0: count of non-zeros, +-inf: max/min magnitude).
fn pnorm(v: impl Iterator<Item = f64>, p: f64) -> f64 {
    if p == 2.0 {
        v.map(|x| x * x).sum::<f64>().sqrt()
    } else if p == 1.0 {
        v.map(f64::abs).sum()
    } else if p == 0.0 {
        v.filter(|&x| x != 0.0).count() as f64
    } else if p == f64::INFINITY {
        v.map(f64::abs).fold(0.0, f64::max)
    } else if p == f64::NEG_INFINITY {
        v.map(f64::abs).fold(f64::INFINITY, f64::min)
    } else {
        v.map(|x| x.abs().powf(p)).sum::<f64>().powf(1.0 / p)
    }
}

/// Norms over `dims` of `x` (row-major values `xv`, shape `shape`), kept or squeezed.
fn reduce_norm(
    xv: &[f64],
    shape: &[usize],
    dims: &[usize],
    keepdim: bool,
    f: impl Fn(&mut dyn Iterator<Item = f64>) -> f64,
) -> (Vec<f64>, Vec<usize>) {
    let n = shape.len();
    let kept: Vec<usize> = (0..n).filter(|d| !dims.contains(d)).collect();
    let out_n: usize = kept.iter().map(|&d| shape[d]).product();
    let red_n: usize = dims.iter().map(|&d| shape[d]).product();
    let mut strides = vec![1usize; n];
    for d in (0..n.saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1];
    }
    let mut res = Vec::with_capacity(out_n);
    let mut oidx = vec![0usize; kept.len()];
    for _ in 0..out_n {
        let base: usize = kept.iter().zip(&oidx).map(|(&d, &i)| i * strides[d]).sum();
        let mut ridx = vec![0usize; dims.len()];
        let mut it = (0..red_n).map(|_| {
            let off: usize = dims.iter().zip(&ridx).map(|(&d, &i)| i * strides[d]).sum();
            for k in (0..dims.len()).rev() {
                ridx[k] += 1;
                if ridx[k] < shape[dims[k]] {
                    break;
                }
                ridx[k] = 0;
            }
            xv[base + off]
        });
        res.push(f(&mut it));
        for k in (0..kept.len()).rev() {
            oidx[k] += 1;
            if oidx[k] < shape[kept[k]] {
                break;
            }
            oidx[k] = 0;
        }
    }
    let oshape: Vec<usize> = if keepdim {
        (0..n)
            .map(|d| if dims.contains(&d) { 1 } else { shape[d] })
            .collect()
    } else {
        kept.iter().map(|&d| shape[d]).collect()
    };
    (res, oshape)
}

fn dims_arg(op: &str, dims: Option<Vec<i64>>, n: usize) -> R<Vec<usize>> {
    match dims {
        None => Ok((0..n).collect()),
        Some(d) if d.is_empty() => Ok((0..n).collect()),
        Some(d) => {
            let mut v = Vec::with_capacity(d.len());
            for x in d {
                let w = wrap(op, x, n)?;
                if v.contains(&w) {
                    return Err(err(format!("{op}: dim {x} appears multiple times")));
                }
                v.push(w);
            }
            Ok(v)
        }
    }
}

/// Matrix norm of order `ord` over the (row, col) dims.
fn matrix_norm(op: &str, x: &Tensor, ord: &str, dims: [usize; 2], keepdim: bool) -> R<Tensor> {
    let dtype = float_dtype(op, x)?;
    let xv = x.contiguous()?.to_vec::<f64>()?;
    let shape = x.shape().to_vec();
    let (r, c) = (dims[0], dims[1]);
    // (reduce first over `inner` with `f`, then over `outer` with `g`)
    let (inner, outer, max_after) = match ord {
        "fro" => {
            let (v, s) = reduce_norm(&xv, &shape, &[r, c], keepdim, |it| pnorm(it, 2.0));
            return out(v, &s, dtype);
        }
        // spectral norms: the largest / smallest singular value, or their sum
        "2" | "-2" | "nuc" => {
            let rest: Vec<usize> = (0..shape.len()).filter(|&d| d != r && d != c).collect();
            let perm: Vec<i64> = rest.iter().chain(&[r, c]).map(|&d| d as i64).collect();
            let xt = super::shape::permute(x, &perm)?
                .contiguous()?
                .to_vec::<f64>()?;
            let (m, n) = (shape[r], shape[c]);
            if m.min(n) == 0 && ord != "nuc" {
                return Err(err(format!(
                    "{op}: Expected a non-empty matrix to compute the norm of order {ord}"
                )));
            }
            let count = rest.iter().map(|&d| shape[d]).product::<usize>();
            let v: Vec<f64> = (0..count)
                .map(|b| {
                    // an empty matrix has no singular values: its nuclear norm is 0
                    if m * n == 0 {
                        return 0.0;
                    }
                    let mat = &xt[b * m * n..(b + 1) * m * n];
                    let s = super::linalg_decomp::matrix_singular_values(mat, m, n);
                    match ord {
                        "2" => s.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                        "-2" => s.iter().copied().fold(f64::INFINITY, f64::min),
                        _ => s.iter().sum(),
                    }
                })
                .collect();
            let s: Vec<usize> = if keepdim {
                (0..shape.len())
                    .map(|d| if d == r || d == c { 1 } else { shape[d] })
                    .collect()
            } else {
                rest.iter().map(|&d| shape[d]).collect()
            };
            return out(v, &s, dtype);
        }
        "1" => (r, c, true),
        "-1" => (r, c, false),
        "inf" => (c, r, true),
        "-inf" => (c, r, false),
        other => {
            return Err(err(format!(
                "{op}: matrix norm of order {other} needs singular values, which tsrun does not compute"
            )))
        }
    };
    let (v1, s1) = reduce_norm(&xv, &shape, &[inner], true, |it| pnorm(it, 1.0));
    let p = if max_after {
        f64::INFINITY
    } else {
        f64::NEG_INFINITY
    };
    let (v, mut s) = reduce_norm(&v1, &s1, &[outer], true, |it| pnorm(it, p));
    if !keepdim {
        let mut d = [r, c];
        d.sort_unstable();
        s.remove(d[1]);
        s.remove(d[0]);
    }
    out(v, &s, dtype)
}

fn ord_name(a: &Args, i: usize) -> R<Option<String>> {
    Ok(match a.get(i)? {
        IValue::None => None,
        IValue::String(s) => Some(s.to_string()),
        _ => {
            let p = a.double(i)?;
            Some(if p == f64::INFINITY {
                "inf".into()
            } else if p == f64::NEG_INFINITY {
                "-inf".into()
            } else {
                format!("{p}")
            })
        }
    })
}

fn with_dtype(a: &Args, i: usize, x: Tensor) -> R<Tensor> {
    match a.opt_dtype(i)? {
        Some(d) => x.to_dtype(d),
        None => Ok(x),
    }
}

/// linalg_norm(self, ord=None, dim=None, keepdim=False, *, dtype=None) and `.ord_str`.
fn linalg_norm(a: &mut Args) -> R {
    let x = with_dtype(a, 4, a.tensor(0)?)?;
    let dtype = float_dtype(a.op, &x)?;
    let n = x.dim();
    let dim = a.opt_int_list(2)?;
    let keepdim = a.bool(3)?;
    let ord = ord_name(a, 1)?;
    let dims = dims_arg(a.op, dim.clone(), n)?;
    let matrix = match (&ord, &dim) {
        (_, Some(d)) => d.len() == 2,
        (Some(_), None) => n == 2,
        (None, None) => false,
    };
    if matrix {
        let ord = ord.unwrap_or_else(|| "fro".into());
        let d = if dim.is_some() {
            [dims[0], dims[1]]
        } else {
            [0, 1]
        };
        return Ok(IValue::Tensor(matrix_norm(a.op, &x, &ord, d, keepdim)?));
    }
    if dim.as_ref().is_some_and(|d| d.len() > 2) {
        return Err(err(format!("{}: dim must be a 1- or 2-tuple", a.op)));
    }
    let p = match ord.as_deref() {
        None => 2.0,
        Some("inf") => f64::INFINITY,
        Some("-inf") => f64::NEG_INFINITY,
        Some(s) => s
            .parse::<f64>()
            .map_err(|_| err(format!("{}: invalid vector norm order {s}", a.op)))?,
    };
    let xv = x.contiguous()?.to_vec::<f64>()?;
    let (v, s) = reduce_norm(&xv, x.shape(), &dims, keepdim, |it| pnorm(it, p));
    Ok(IValue::Tensor(out(v, &s, dtype)?))
}

/// linalg_matrix_norm(self, ord='fro' | Scalar, dim=[-2, -1], keepdim=False, *, dtype=None).
fn linalg_matrix_norm(a: &mut Args) -> R {
    let x = with_dtype(a, 4, a.tensor(0)?)?;
    let ord = ord_name(a, 1)?.unwrap_or_else(|| "fro".into());
    let d = a.int_list(2)?;
    if d.len() != 2 || x.dim() < 2 {
        return Err(err(format!(
            "{}: dim must be a 2-tuple of a matrix's dims",
            a.op
        )));
    }
    let dims = [wrap(a.op, d[0], x.dim())?, wrap(a.op, d[1], x.dim())?];
    Ok(IValue::Tensor(matrix_norm(
        a.op,
        &x,
        &ord,
        dims,
        a.bool(3)?,
    )?))
}

/// `norm_except_dim(v, pow, dim)`: the pow-norm over every dim but `dim`, shaped to broadcast
/// against `v` (dim -1: the norm of everything).
fn norm_except_dim(op: &str, v: &Tensor, p: f64, dim: i64) -> R<Tensor> {
    let dtype = float_dtype(op, v)?;
    let xv = v.contiguous()?.to_vec::<f64>()?;
    if dim == -1 {
        return out(vec![pnorm(xv.into_iter(), p)], &[], dtype);
    }
    let n = v.dim();
    let d = wrap(op, dim, n)?;
    let dims: Vec<usize> = (0..n).filter(|&k| k != d).collect();
    let (r, s) = reduce_norm(&xv, v.shape(), &dims, true, |it| pnorm(it, p));
    out(r, &s, dtype)
}

/// `v * (g / norm_except_dim(v, 2, dim))` and that norm.
fn weight_norm_parts(op: &str, v: &Tensor, g: &Tensor, dim: i64) -> R<(Tensor, Tensor)> {
    let dtype = float_dtype(op, v)?;
    let norm = norm_except_dim(op, v, 2.0, dim)?;
    let vv = v.contiguous()?.to_vec::<f64>()?;
    let shape = v.shape().to_vec();
    let scale = super::shape::expand_to(&g.to_dtype(DType::Float64)?, &shape)?.to_vec::<f64>()?;
    let nv = super::shape::expand_to(&norm.to_dtype(DType::Float64)?, &shape)?.to_vec::<f64>()?;
    let res: Vec<f64> = vv
        .iter()
        .zip(scale.iter().zip(&nv))
        .map(|(x, (g, n))| x * (g / n))
        .collect();
    Ok((out(res, &shape, dtype)?, norm))
}

/// `_weight_norm(v, g, dim)`: `v * (g / norm_except_dim(v, 2, dim))`.
fn weight_norm(a: &mut Args) -> R {
    let (v, g) = (a.tensor(0)?, a.tensor(1)?);
    Ok(IValue::Tensor(
        weight_norm_parts(a.op, &v, &g, a.int(2)?)?.0,
    ))
}

/// `_weight_norm_interface(v, g, dim)` -> (w, norm): PyTorch's CPU kernel, which takes only
/// the first or the last dim.
fn weight_norm_interface(a: &mut Args) -> R {
    let (v, g) = (a.tensor(0)?, a.tensor(1)?);
    let dim = a.int(2)?;
    let nd = v.dim() as i64;
    if dim != 0 && dim != nd - 1 {
        return Err(err(format!(
            "{}: fused kernels can only be applied for first or last dim, got dim {dim} of a \
             {nd}-d tensor",
            a.op
        )));
    }
    let (w, norm) = weight_norm_parts(a.op, &v, &g, dim)?;
    Ok(IValue::Tuple(Tuple::new(vec![
        IValue::Tensor(w),
        IValue::Tensor(norm),
    ])))
}

/// Row distances between `x1` [.., P, M] and `x2` [.., R, M] -> [.., P, R] (batch dims
/// broadcast).
fn cdist(a: &mut Args) -> R {
    let (x1, x2) = (a.tensor(0)?, a.tensor(1)?);
    let p = a.double(2)?;
    let dtype = float_dtype(a.op, &x1)?;
    if x1.dim() < 2 || x2.dim() < 2 {
        return Err(err(format!(
            "{}: cdist only supports at least 2D tensors, X1 got: {}D",
            a.op,
            x1.dim()
        )));
    }
    if p < 0.0 {
        return Err(err(format!(
            "{}: cdist only supports non-negative p values",
            a.op
        )));
    }
    let (s1, s2) = (x1.shape(), x2.shape());
    let m = s1[s1.len() - 1];
    if s2[s2.len() - 1] != m {
        return Err(err(format!(
            "{}: X1 and X2 must have the same number of columns. X1: {m} X2: {}",
            a.op,
            s2[s2.len() - 1]
        )));
    }
    let (pr, rr) = (s1[s1.len() - 2], s2[s2.len() - 2]);
    let batch = crate::tensor::broadcast_shapes(&s1[..s1.len() - 2], &s2[..s2.len() - 2])?.to_vec();
    let mut b1 = batch.clone();
    b1.extend([pr, m]);
    let mut b2 = batch.clone();
    b2.extend([rr, m]);
    let v1 = super::shape::expand_to(&x1, &b1)?.to_vec::<f64>()?;
    let v2 = super::shape::expand_to(&x2, &b2)?.to_vec::<f64>()?;
    let nb: usize = batch.iter().product();
    let mut res = Vec::with_capacity(nb * pr * rr);
    for b in 0..nb {
        for i in 0..pr {
            let r1 = &v1[(b * pr + i) * m..][..m];
            for j in 0..rr {
                let r2 = &v2[(b * rr + j) * m..][..m];
                res.push(pnorm(r1.iter().zip(r2).map(|(x, y)| x - y), p));
            }
        }
    }
    let mut shape = batch;
    shape.extend([pr, rr]);
    Ok(IValue::Tensor(out(res, &shape, dtype)?))
}

/// `pdist(input [N, M], p)`: distances of every row pair i < j, row-major.
fn pdist(a: &mut Args) -> R {
    let x = a.tensor(0)?;
    let p = a.double(1)?;
    let dtype = float_dtype(a.op, &x)?;
    if x.dim() != 2 {
        return Err(err(format!(
            "{}: pdist only supports 2D tensors, got: {}D",
            a.op,
            x.dim()
        )));
    }
    let (n, m) = (x.shape()[0], x.shape()[1]);
    let v = x.contiguous()?.to_vec::<f64>()?;
    let mut res = Vec::with_capacity(n * n.saturating_sub(1) / 2);
    for i in 0..n {
        for j in i + 1..n {
            let (ri, rj) = (&v[i * m..][..m], &v[j * m..][..m]);
            res.push(pnorm(ri.iter().zip(rj).map(|(x, y)| x - y), p));
        }
    }
    let len = res.len();
    Ok(IValue::Tensor(out(res, &[len], dtype)?))
}

/// Both inputs broadcast to one shape, as f64 values; (values1, values2, shape).
fn broadcast_pair(x1: &Tensor, x2: &Tensor) -> R<(Vec<f64>, Vec<f64>, Vec<usize>)> {
    let shape = crate::tensor::broadcast_shapes(x1.shape(), x2.shape())?.to_vec();
    Ok((
        super::shape::expand_to(x1, &shape)?.to_vec::<f64>()?,
        super::shape::expand_to(x2, &shape)?.to_vec::<f64>()?,
        shape,
    ))
}

/// `cosine_similarity(x1, x2, dim, eps)` as ATen computes it: each input divided by its
/// 2-norm along `dim` clamped to `eps`, then the products summed.
fn cosine_similarity(a: &mut Args) -> R {
    let (x1, x2) = (a.tensor(0)?, a.tensor(1)?);
    let eps = a.double(3)?;
    let dtype = float_dtype(a.op, &x1)?;
    let (v1, v2, shape) = broadcast_pair(&x1, &x2)?;
    let d = wrap(a.op, a.int(2)?, shape.len())?;
    let (n1, _) = reduce_norm(&v1, &shape, &[d], true, |it| pnorm(it, 2.0));
    let (n2, ns) = reduce_norm(&v2, &shape, &[d], true, |it| pnorm(it, 2.0));
    let n1 = Tensor::from_vec(n1.into_iter().map(|x| x.max(eps)).collect(), &ns)?;
    let n2 = Tensor::from_vec(n2.into_iter().map(|x| x.max(eps)).collect(), &ns)?;
    let n1 = super::shape::expand_to(&n1, &shape)?.to_vec::<f64>()?;
    let n2 = super::shape::expand_to(&n2, &shape)?.to_vec::<f64>()?;
    let prod: Vec<f64> = (0..v1.len())
        .map(|i| (v1[i] / n1[i]) * (v2[i] / n2[i]))
        .collect();
    let (r, s) = reduce_norm(&prod, &shape, &[d], false, |it| it.sum());
    Ok(IValue::Tensor(out(r, &s, dtype)?))
}

/// `pairwise_distance(x1, x2, p, eps, keepdim)`: `norm(x1 - x2 + eps, p)` over the last dim.
fn pairwise_distance(a: &mut Args) -> R {
    let (x1, x2) = (a.tensor(0)?, a.tensor(1)?);
    let (p, eps, keepdim) = (a.double(2)?, a.double(3)?, a.bool(4)?);
    let dtype = float_dtype(a.op, &x1)?;
    let (v1, v2, shape) = broadcast_pair(&x1, &x2)?;
    if shape.is_empty() {
        return Err(err(format!("{}: inputs must have at least one dim", a.op)));
    }
    let diff: Vec<f64> = v1.iter().zip(&v2).map(|(a, b)| a - b + eps).collect();
    let last = shape.len() - 1;
    let (r, s) = reduce_norm(&diff, &shape, &[last], keepdim, |it| pnorm(it, p));
    Ok(IValue::Tensor(out(r, &s, dtype)?))
}

/// `dist(self, other, p)`: the p-norm of `self - other` (broadcast, promoted).
fn dist(a: &mut Args) -> R {
    use super::kernels::operand::Operand;
    let diff = super::elementwise::add_sub(
        &Operand::Tensor(a.tensor(0)?),
        &Operand::Tensor(a.tensor(1)?),
        crate::tensor::Scalar::Int(1),
        true,
    )?;
    let p = a.scalar(2)?;
    if matches!(p, crate::tensor::Scalar::Complex(_)) {
        return Err(err("dist: p must be a real number"));
    }
    Ok(IValue::Tensor(super::reduce::vector_norm(
        &diff,
        p.to_f64(),
        None,
        false,
        None,
    )?))
}

/// `nuclear_norm(self, keepdim)`: the nuclear norm of the matrices in the last two dims.
fn nuclear_norm(a: &mut Args) -> R {
    let x = a.tensor(0)?;
    if x.dim() < 2 {
        return Err(err(
            "linalg.matrix_norm: The input tensor A must have at least 2 dimensions.",
        ));
    }
    let dims = [x.dim() - 2, x.dim() - 1];
    Ok(IValue::Tensor(matrix_norm(
        a.op,
        &x,
        "nuc",
        dims,
        a.bool(1)?,
    )?))
}

/// `nuclear_norm.dim(self, int[2] dim, keepdim)`.
fn nuclear_norm_dim(a: &mut Args) -> R {
    let x = a.tensor(0)?;
    let d = a.int_list(1)?;
    if d.len() != 2 {
        return Err(err("nuclear norm requires a 'dim' argument of size 2"));
    }
    let dims = [wrap(a.op, d[0], x.dim())?, wrap(a.op, d[1], x.dim())?];
    if dims[0] == dims[1] {
        return Err(err(format!(
            "linalg.matrix_norm: dims must be different. Got ({}, {})",
            d[0], d[1]
        )));
    }
    Ok(IValue::Tensor(matrix_norm(
        a.op,
        &x,
        "nuc",
        dims,
        a.bool(2)?,
    )?))
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::nuclear_norm", nuclear_norm);
    r.add("aten::dist", dist);
    r.add("aten::nuclear_norm.dim", nuclear_norm_dim);
    r.add_overloads("aten::linalg_norm", &["", "ord_str"], linalg_norm);
    r.add_overloads(
        "aten::linalg_matrix_norm",
        &["", "str_ord"],
        linalg_matrix_norm,
    );
    r.add("aten::norm_except_dim", |a| {
        let v = a.tensor(0)?;
        Ok(IValue::Tensor(norm_except_dim(
            a.op,
            &v,
            a.int(1)? as f64,
            a.int(2)?,
        )?))
    });
    r.add("aten::_weight_norm", weight_norm);
    r.add("aten::_weight_norm_interface", weight_norm_interface);
    r.add_all(&["aten::cdist", "aten::_cdist_forward"], cdist);
    r.add_all(&["aten::pdist", "aten::_pdist_forward"], pdist);
    r.add("aten::cosine_similarity", cosine_similarity);
    r.add("aten::pairwise_distance", pairwise_distance);
}
