//! Operators that build matrices from others or enumerate their positions: `kron`,
//! `block_diag`, `tril_indices` / `triu_indices`, the Vandermonde matrices `vander` /
//! `linalg_vander`; and elementwise integer and exponent
//! functions PyTorch groups with them in real archives: `gcd` / `lcm`, `ldexp`, `frexp`,
//! `logcumsumexp`.

use super::{Args, Registry};
use crate::ops::kernels::{check_rank, invalid_argument, wrong_dtype};
use crate::tensor::promote::promote_types;
use crate::tensor::RankRequirement;
use crate::tensor::{DType, Tensor};
use crate::values::{IValue, Tuple};

type R<T = IValue> = crate::Result<T>;

fn err(msg: impl Into<String>) -> crate::Error {
    crate::error::RuntimeError::Other(msg.into()).into()
}

fn is_integral(d: DType) -> bool {
    matches!(
        d,
        DType::UInt8 | DType::Int8 | DType::Int16 | DType::Int32 | DType::Int64 | DType::Bool
    )
}

/// Both operands broadcast, as f64 values (exact for every integer a model uses) and i64.
fn pair(a: &Tensor, b: &Tensor) -> R<(Vec<usize>, Tensor, Tensor)> {
    let shape = crate::tensor::broadcast_shapes(a.shape(), b.shape())?.to_vec();
    Ok((
        shape.clone(),
        super::shape::expand_to(a, &shape)?,
        super::shape::expand_to(b, &shape)?,
    ))
}

fn gcd_i(mut a: i64, mut b: i64) -> i64 {
    while b != 0 {
        (a, b) = (b, a.wrapping_rem(b));
    }
    a.wrapping_abs()
}

/// gcd / lcm of integer tensors (broadcast), in the promoted dtype; `_` forms write `self`.
/// `gcd`/`lcm`, written back into `self` when `inplace` (`gcd_`, `lcm_`).
fn gcd_lcm(a: &mut Args, lcm: bool, inplace: bool) -> R {
    let (x, y) = (a.tensor(0)?, a.tensor(1)?);
    let dtype = promote_types(x.dtype(), y.dtype());
    if !is_integral(dtype) || dtype == DType::Bool {
        return Err(err(format!(
            "{}: \"{}_cpu\" not implemented for '{}'",
            a.op,
            if lcm { "lcm" } else { "gcd" },
            dtype.name()
        )));
    }
    let (shape, xb, yb) = pair(&x, &y)?;
    let (xv, yv) = (xb.to_vec::<i64>()?, yb.to_vec::<i64>()?);
    let v: Vec<i64> = xv
        .iter()
        .zip(&yv)
        .map(|(&p, &q)| {
            if !lcm {
                return gcd_i(p, q);
            }
            let g = gcd_i(p, q);
            if g == 0 {
                0
            } else {
                (p / g).wrapping_mul(q).wrapping_abs()
            }
        })
        .collect();
    let r = Tensor::from_vec(v, &shape)?.to_dtype(dtype)?;
    if inplace {
        return a.write_outs(0, IValue::Tensor(r));
    }
    Ok(IValue::Tensor(r))
}

/// `ldexp(self, other)` = `self * 2 ** other` (ATen: `mul(self, pow(2.0, other))`).
fn ldexp(a: &mut Args, inplace: bool) -> R {
    let (x, e) = (a.tensor(0)?, a.tensor(1)?);
    let pow_dtype = if e.dtype().is_floating_point() {
        e.dtype()
    } else {
        DType::Float32
    };
    let dtype = promote_types(x.dtype(), pow_dtype);
    let (shape, xb, eb) = pair(&x, &e)?;
    let (xv, ev) = (xb.to_vec::<f64>()?, eb.to_vec::<f64>()?);
    let v: Vec<f64> = xv
        .iter()
        .zip(&ev)
        .map(|(&m, &p)| m * 2f64.powf(p))
        .collect();
    let r = Tensor::from_vec(v, &shape)?.to_dtype(dtype)?;
    if inplace {
        return a.write_outs(0, IValue::Tensor(r));
    }
    Ok(IValue::Tensor(r))
}

/// `frexp(self) -> (mantissa, exponent)`: `self = mantissa * 2 ** exponent`, |mantissa| in
/// [0.5, 1) (0 for 0), exponent int32.
fn frexp(a: &mut Args) -> R {
    let x = a.tensor(0)?;
    if !x.dtype().is_floating_point() {
        return Err(err(format!(
            "{}: torch.frexp() only supports floating-point dtypes",
            a.op
        )));
    }
    let xv = x.contiguous()?.to_vec::<f64>()?;
    let (m, e): (Vec<f64>, Vec<i32>) = xv.iter().map(|&v| libm::frexp(v)).unzip();
    Ok(IValue::Tuple(Tuple::new(vec![
        IValue::Tensor(Tensor::from_vec(m, x.shape())?.to_dtype(x.dtype())?),
        IValue::Tensor(Tensor::from_vec(e, x.shape())?),
    ])))
}

/// `logcumsumexp(self, dim)`: running `log(sum(exp))`, kept stable by tracking the maximum.
fn logcumsumexp(a: &mut Args) -> R {
    let x = a.tensor(0)?;
    if !x.dtype().is_floating_point() {
        return Err(err(format!(
            "{}: logcumsumexp(): Expected floating point type",
            a.op
        )));
    }
    let shape = x.shape().to_vec();
    let nd = shape.len();
    let d = crate::tensor::wrap_dim(a.int(1)?, nd.max(1))?;
    let xv = x.contiguous()?.to_vec::<f64>()?;
    if nd == 0 {
        return Ok(IValue::Tensor(x.deep_clone()?));
    }
    let len = shape[d];
    let inner: usize = shape[d + 1..].iter().product();
    let outer: usize = shape[..d].iter().product();
    let mut out = vec![0.0; xv.len()];
    for o in 0..outer {
        for i in 0..inner {
            let mut acc = f64::NEG_INFINITY;
            for k in 0..len {
                let idx = (o * len + k) * inner + i;
                let v = xv[idx];
                let (hi, lo) = if acc > v { (acc, v) } else { (v, acc) };
                acc = if hi == f64::NEG_INFINITY {
                    hi
                } else {
                    hi + (lo - hi).exp().ln_1p()
                };
                out[idx] = acc;
            }
        }
    }
    Ok(IValue::Tensor(
        Tensor::from_vec(out, &shape)?.to_dtype(x.dtype())?,
    ))
}

/// `kron(a, b)`: shapes right-aligned, result dim i = a_i * b_i, element a[i] * b[j].
fn kron(a: &mut Args) -> R {
    let (x, y) = (a.tensor(0)?, a.tensor(1)?);
    let dtype = promote_types(x.dtype(), y.dtype());
    let nd = x.dim().max(y.dim());
    let pad = |t: &Tensor| -> Vec<usize> {
        let mut s = vec![1; nd - t.dim()];
        s.extend_from_slice(t.shape());
        s
    };
    let (sa, sb) = (pad(&x), pad(&y));
    let xv = x.contiguous()?.to_dtype(DType::Float64)?.to_vec::<f64>()?;
    let yv = y.contiguous()?.to_dtype(DType::Float64)?.to_vec::<f64>()?;
    let shape: Vec<usize> = sa.iter().zip(&sb).map(|(p, q)| p * q).collect();
    let n: usize = shape.iter().product();
    let mut out = vec![0.0; n];
    for (flat, o) in out.iter_mut().enumerate() {
        let (mut rem, mut ia, mut ib, mut sta, mut stb) = (flat, 0, 0, 1, 1);
        for d in (0..nd).rev() {
            let c = rem % shape[d];
            rem /= shape[d];
            ia += (c / sb[d]) * sta;
            ib += (c % sb[d]) * stb;
            sta *= sa[d];
            stb *= sb[d];
        }
        *o = xv[ia] * yv[ib];
    }
    Ok(IValue::Tensor(
        Tensor::from_vec(out, &shape)?.to_dtype(dtype)?,
    ))
}

/// `block_diag(tensors)`: 0-d as 1x1, 1-d as a row, 2-d as is, along the diagonal.
fn block_diag(a: &mut Args) -> R {
    let ts = a.tensor_list(0)?;
    let mut dtype: Option<DType> = None;
    let mut blocks = Vec::with_capacity(ts.len());
    for (i, t) in ts.iter().enumerate() {
        let (r, c) = match t.dim() {
            0 => (1, 1),
            1 => (1, t.shape()[0]),
            2 => (t.shape()[0], t.shape()[1]),
            d => {
                return Err(err(format!(
                "{}: Input tensors must have 2 or fewer dimensions. Input {i} has {d} dimensions",
                a.op
            )))
            }
        };
        dtype = Some(dtype.map_or(t.dtype(), |d| promote_types(d, t.dtype())));
        blocks.push((
            r,
            c,
            t.contiguous()?.to_dtype(DType::Float64)?.to_vec::<f64>()?,
        ));
    }
    let dtype = dtype.unwrap_or(DType::Float32);
    let rows: usize = blocks.iter().map(|b| b.0).sum();
    let cols: usize = blocks.iter().map(|b| b.1).sum();
    let mut out = vec![0.0; rows * cols];
    let (mut r0, mut c0) = (0, 0);
    for (r, c, v) in &blocks {
        for i in 0..*r {
            out[(r0 + i) * cols + c0..][..*c].copy_from_slice(&v[i * c..][..*c]);
        }
        r0 += r;
        c0 += c;
    }
    Ok(IValue::Tensor(
        Tensor::from_vec(out, &[rows, cols])?.to_dtype(dtype)?,
    ))
}

/// `tril_indices` / `triu_indices(row, col, offset, dtype, ...)`: [2, N] coordinates in
/// row-major order.
fn tri_indices(a: &mut Args, upper: bool) -> R {
    let (rows, cols, offset) = (a.int(0)?, a.int(1)?, a.int(2)?);
    if rows < 0 || cols < 0 {
        return Err(err(format!("{}: row and col must be non-negative", a.op)));
    }
    if rows.saturating_mul(cols) > 1 << 26 {
        return Err(err(format!("{}: {rows} x {cols} is too large", a.op)));
    }
    let dtype = a.opt_dtype(3)?.unwrap_or(DType::Int64);
    let (mut rs, mut cs) = (Vec::new(), Vec::new());
    for i in 0..rows {
        for j in 0..cols {
            let keep = if upper {
                j - i >= offset
            } else {
                j - i <= offset
            };
            if keep {
                rs.push(i);
                cs.push(j);
            }
        }
    }
    let n = rs.len();
    rs.extend(cs);
    Ok(IValue::Tensor(
        Tensor::from_vec(rs, &[2, n])?.to_dtype(dtype)?,
    ))
}

/// The powers `x^1 .. x^(count)` of every element along a new last dim: ATen's `cumprod` of
/// `x` repeated (integral inputs multiply in int64, as `cumprod` promotes them).
fn powers(x: &Tensor, count: usize) -> R<Tensor> {
    let mut shape: Vec<i64> = x.shape().iter().map(|&s| s as i64).collect();
    shape.push(count as i64);
    let repeated = super::shape::expand(&super::shape::unsqueeze(x, -1)?, &shape)?;
    super::reduce::cumulative(&repeated, -1, None, true)
}

/// `x^0` followed by `powers` up to `x^(n-1)`, along a new last dim, as `dtype`.
fn with_ones(x: &Tensor, n: usize, dtype: DType) -> R<Tensor> {
    let mut ones_shape = x.shape().to_vec();
    ones_shape.push(n.min(1));
    let ones = super::creation::full_tensor(&ones_shape, crate::tensor::Scalar::Int(1), dtype)?;
    if n <= 1 {
        return Ok(ones);
    }
    super::shape::cat(&[ones, powers(x, n - 1)?.to_dtype(dtype)?], -1)
}

/// `vander(x, N=None, increasing=False)`: columns `x^(N-1) .. x^0` (or increasing) of a 1-D `x`.
fn vander(a: &mut Args) -> R {
    let x = a.tensor(0)?;
    if x.dim() != 1 {
        return Err(err("x must be a one-dimensional tensor."));
    }
    let n = match a.opt_int(1)? {
        Some(n) if n < 0 => return Err(err("N must be non-negative.")),
        Some(n) => n as usize,
        None => x.shape()[0],
    };
    // integral (and bool) inputs give int64, as the cumprod PyTorch builds it with
    let dtype = promote_types(x.dtype(), DType::Int64);
    let increasing = with_ones(&x.to_dtype(dtype)?, n, dtype)?;
    if a.bool(2)? {
        return Ok(IValue::Tensor(increasing));
    }
    Ok(IValue::Tensor(super::shape::flip(&increasing, &[1])?))
}

/// `linalg_vander(x, *, N=None)`: increasing powers along a new last dim, `N > 1`.
fn linalg_vander(a: &mut Args) -> R {
    let x = a.tensor(0)?;
    let dtype = x.dtype();
    let supported = matches!(dtype, DType::Float32 | DType::Float64)
        || (is_integral(dtype) && dtype != DType::Bool);
    if !supported {
        return Err(err(format!(
            "linalg.vander supports floating point, complex, and integer tensors, but got {}",
            dtype.c10_name()
        )));
    }
    let x = if x.dim() == 0 {
        super::shape::unsqueeze(&x, -1)?
    } else {
        x
    };
    let n = a.opt_int(1)?.unwrap_or(x.shape()[x.dim() - 1] as i64);
    if n <= 1 {
        return Err(err("N must be greater than 1."));
    }
    let result_dtype = if is_integral(dtype) {
        DType::Int64
    } else {
        dtype
    };
    Ok(IValue::Tensor(with_ones(&x, n as usize, result_dtype)?))
}

/// `combinations(self, r, with_replacement)`: the `r`-element combinations of a 1-d tensor's
/// elements in `itertools.combinations` (or `combinations_with_replacement`) order, one per
/// row; empty for `r == 0`.
fn combinations(a: &mut Args) -> R {
    let x = a.tensor(0)?;
    let (r, with_replacement) = (a.int(1)?, a.bool(2)?);
    check_rank(a.op, "input", RankRequirement::Exactly(1), x.shape())?;
    if r < 0 {
        return Err(invalid_argument(a.op, "r", "must be non-negative", r));
    }
    let (n, r) = (x.shape()[0], r as usize);
    if r == 0 {
        return Ok(IValue::Tensor(Tensor::zeros(&[0], x.dtype())?));
    }
    let mut rows: Vec<i64> = Vec::new();
    let mut idx: Vec<usize> = if with_replacement {
        vec![0; r]
    } else {
        (0..r).collect()
    };
    let valid = |idx: &[usize]| idx.iter().all(|&i| i < n);
    if valid(&idx) {
        loop {
            crate::tensor::budget::check_alloc((rows.len() + r) * 8)?;
            rows.extend(idx.iter().map(|&i| i as i64));
            // the rightmost index that can still advance
            let limit = |k: usize| if with_replacement { n - 1 } else { n - r + k };
            let Some(k) = (0..r).rev().find(|&k| idx[k] < limit(k)) else {
                break;
            };
            idx[k] += 1;
            for j in k + 1..r {
                idx[j] = if with_replacement {
                    idx[k]
                } else {
                    idx[j - 1] + 1
                };
            }
        }
    }
    let count = rows.len() / r;
    let index = Tensor::from_vec(rows, &[count * r])?;
    let picked = super::shape::gather_dim(
        &x,
        0,
        &index
            .to_vec::<i64>()?
            .iter()
            .map(|&i| i as usize)
            .collect::<Vec<_>>(),
    )?;
    Ok(IValue::Tensor(super::shape::reshape(
        &picked,
        &[count as i64, r as i64],
    )?))
}

/// `renorm(self, p, dim, maxnorm)`: each slice along `dim` whose p-norm exceeds `maxnorm`
/// scaled by `maxnorm / (norm + 1e-7)`, as ATen's renorm; the others kept.
fn renorm(a: &mut Args) -> R {
    let x = a.tensor(0)?;
    let p = a.scalar(1)?.to_f64();
    let maxnorm = a.scalar(3)?.to_f64();
    if !x.dtype().is_floating_point() {
        return Err(wrong_dtype("renorm", "input", "floating-point", x.dtype()));
    }
    if p <= 0.0 {
        return Err(invalid_argument("renorm", "p", "must be positive", p));
    }
    if maxnorm < 0.0 {
        return Err(invalid_argument(
            "renorm",
            "maxnorm",
            "must be >= 0",
            maxnorm,
        ));
    }
    check_rank("renorm", "input", RankRequirement::AtLeast(2), x.shape())?;
    let d = crate::tensor::wrap_dim(a.int(2)?, x.dim())?;
    let moved = super::shape::movedim(&x, &[d as i64], &[0])?.contiguous()?;
    let shape = moved.shape().to_vec();
    let mut v = moved.to_dtype(DType::Float64)?.to_vec::<f64>()?;
    let per = v.len() / shape[0].max(1);
    if per > 0 {
        for slice in v.chunks_mut(per) {
            let norm = if p.is_infinite() {
                slice.iter().fold(0.0f64, |m, e| m.max(e.abs()))
            } else {
                slice
                    .iter()
                    .map(|e| e.abs().powf(p))
                    .sum::<f64>()
                    .powf(1.0 / p)
            };
            if norm > maxnorm {
                let factor = maxnorm / (norm + 1e-7);
                slice.iter_mut().for_each(|e| *e *= factor);
            }
        }
    }
    let back = Tensor::from_vec(v, &shape)?.to_dtype(x.dtype())?;
    Ok(IValue::Tensor(
        super::shape::movedim(&back, &[0], &[d as i64])?.contiguous()?,
    ))
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::combinations", combinations);
    r.add("aten::renorm", renorm);
    r.add("aten::renorm_", |a| {
        let r = renorm(a)?;
        a.write_outs(0, r)
    });
    r.add("aten::vander", vander);
    r.add("aten::linalg_vander", linalg_vander);
    r.add("aten::gcd", |a| gcd_lcm(a, false, false));
    r.add("aten::gcd_", |a| gcd_lcm(a, false, true));
    r.add("aten::lcm", |a| gcd_lcm(a, true, false));
    r.add("aten::lcm_", |a| gcd_lcm(a, true, true));
    r.add("aten::ldexp.Tensor", |a| ldexp(a, false));
    r.add("aten::ldexp_", |a| ldexp(a, true));
    r.add("aten::frexp.Tensor", frexp);
    r.add_all(&["aten::logcumsumexp", "aten::_logcumsumexp"], logcumsumexp);
    r.add("aten::kron", kron);
    r.add("aten::block_diag", block_diag);
    r.add("aten::tril_indices", |a| tri_indices(a, false));
    r.add("aten::triu_indices", |a| tri_indices(a, true));
}
