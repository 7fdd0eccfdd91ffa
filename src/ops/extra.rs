//! Losses, sampling grids (`grid_sampler_2d`/`_3d`, `affine_grid_generator`), `im2col`/`col2im`,
//! special functions and their `special_*` aliases, and small tensor queries.
//!
//! Kernels here compute in f64 and cast the result back to the floating dtype PyTorch would
//! produce (integral inputs promote to float32), which is exact enough for every float type.

use super::kernels::map::map_binary;
use super::kernels::operand::{common_dtype, float_dtype, inplace_result, Operand};
use super::kernels::special::SpecialFn;
use super::kernels::value_err;
use super::{Args, Registry};
use crate::float_unary;
use crate::tensor::{broadcast_shapes, DType, Tensor};
use crate::values::IValue;

type R = crate::Result<IValue>;

fn t(x: Tensor) -> R {
    Ok(IValue::Tensor(x))
}

/// A tensor's elements as f64, row-major.
fn vals(x: &Tensor) -> crate::Result<Vec<f64>> {
    x.to_vec::<f64>()
}

/// A tensor of `dt` from f64 values.
fn build(v: Vec<f64>, shape: &[usize], dt: DType) -> crate::Result<Tensor> {
    Tensor::from_vec(v, shape)?.to_dtype(dt)
}

/// Floating result dtype of two operands (ints -> float32).
fn float_common(a: &Operand, b: &Operand) -> crate::Result<DType> {
    let dt = float_dtype(common_dtype(&[a, b]));
    if dt.is_complex() {
        return Err(value_err(format!("complex dtype {dt} is not supported")));
    }
    Ok(dt)
}

/// `f(a, b)` elementwise in f64 with broadcasting; the result has the floating common dtype.
fn float_binary_op(
    a: &Operand,
    b: &Operand,
    f: impl Fn(f64, f64) -> f64 + Sync + Send,
) -> crate::Result<Tensor> {
    let dt = float_common(a, b)?;
    let (x, y) = (
        a.as_tensor_of(DType::Float64)?,
        b.as_tensor_of(DType::Float64)?,
    );
    map_binary::<f64, f64, f64, _>(&x, &y, f)?.to_dtype(dt)
}

// ---------------------------------------------------------------- special functions

/// Digamma (psi) by recurrence up to x >= 6 and the asymptotic series; reflection for x < 0.
fn digamma(mut x: f64) -> f64 {
    if x == 0.0 {
        return if x.is_sign_negative() {
            f64::INFINITY
        } else {
            f64::NEG_INFINITY
        };
    }
    if x < 0.0 {
        if x == x.floor() {
            return f64::NAN;
        }
        let pi = std::f64::consts::PI;
        return digamma(1.0 - x) - pi / (pi * x).tan();
    }
    let mut r = 0.0;
    while x < 6.0 {
        r -= 1.0 / x;
        x += 1.0;
    }
    let f = 1.0 / (x * x);
    let t = f
        * (-1.0 / 12.0
            + f * (1.0 / 120.0 + f * (-1.0 / 252.0 + f * (1.0 / 240.0 + f * (-1.0 / 132.0)))));
    r + x.ln() - 0.5 / x + t
}

/// Power series of the modified Bessel functions I0 (order 0) and I1 (order 1).
fn bessel_i(order: u32, x: f64) -> f64 {
    let q = x * x / 4.0;
    let mut term = if order == 0 { 1.0 } else { x / 2.0 };
    let mut sum = term;
    let mut k = 1.0f64;
    while term.abs() > sum.abs() * 1e-17 && k < 1000.0 {
        term *= q / (k * (k + order as f64));
        sum += term;
        k += 1.0;
    }
    sum
}

/// Scaled Bessel `exp(-|x|) I_n(x)`; the asymptotic expansion for large |x|.
fn bessel_ie(order: u32, x: f64) -> f64 {
    let a = x.abs();
    if a < 30.0 {
        return (-a).exp() * bessel_i(order, x);
    }
    let mu = 4.0 * (order * order) as f64;
    let (mut term, mut sum) = (1.0f64, 1.0f64);
    for k in 1..30 {
        let kk = (2 * k - 1) as f64;
        term *= -(mu - kk * kk) / (k as f64 * 8.0 * a);
        sum += term;
    }
    let v = sum / (2.0 * std::f64::consts::PI * a).sqrt();
    if order == 1 && x < 0.0 {
        -v
    } else {
        v
    }
}

/// `exp(x^2) erfc(x)`, with the continued-fraction tail for large x.
fn erfcx(x: f64) -> f64 {
    if x < 25.0 {
        return (x * x).exp() * libm::erfc(x);
    }
    // Asymptotic series: 1/(x sqrt(pi)) * (1 - 1/(2x^2) + 3/(4x^4) - 15/(8x^6)).
    let x2 = x * x;
    (1.0 - 0.5 / x2 + 0.75 / (x2 * x2) - 1.875 / (x2 * x2 * x2)) / (x * std::f64::consts::PI.sqrt())
}

fn ndtr(x: f64) -> f64 {
    0.5 * libm::erfc(-x / std::f64::consts::SQRT_2)
}

fn log_ndtr(x: f64) -> f64 {
    let t = x / std::f64::consts::SQRT_2;
    if x < -1.0 {
        // log(erfc(-t)/2) = log(erfcx(-t)/2) - t^2, stable in the far tail.
        (erfcx(-t) / 2.0).ln() - t * t
    } else {
        (-0.5 * libm::erfc(t)).ln_1p()
    }
}

fn ndtri(p: f64) -> f64 {
    if p == 0.0 {
        return f64::NEG_INFINITY;
    }
    if p == 1.0 {
        return f64::INFINITY;
    }
    if !(0.0..=1.0).contains(&p) {
        return f64::NAN;
    }
    // Initial guess from erfinv, then Newton steps on ndtr for full precision in the tails.
    let mut x = std::f64::consts::SQRT_2 * (2.0 * p - 1.0).erfinv_();
    for _ in 0..3 {
        let pdf = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
        if pdf == 0.0 || !x.is_finite() {
            break;
        }
        x -= (ndtr(x) - p) / pdf;
    }
    x
}

fn entr(x: f64) -> f64 {
    if x.is_nan() {
        x
    } else if x > 0.0 {
        -x * x.ln()
    } else if x == 0.0 {
        0.0
    } else {
        f64::NEG_INFINITY
    }
}

macro_rules! unary_f64_kernels {
    ($($name:ident, $inplace:ident, $op:literal => $f:expr;)*) => {
        $(
            fn $name(args: &mut Args<'_>) -> R {
                let x = args.tensor(0)?;
                let f: fn(f64) -> f64 = $f;
                t(float_unary!(&x, $op, |v: F| f(v as f64) as F)?)
            }
            fn $inplace(args: &mut Args<'_>) -> R {
                let r = $name(args)?;
                inplace_result(args, r)
            }
        )*
        fn register_unary(r: &mut Registry) {
            $(
                r.add(concat!("aten::", $op), $name);
                // the `special_*` names have no in-place twin
                r.add_if_defined(concat!("aten::", $op, "_"), $inplace);
            )*
        }
    };
}
unary_f64_kernels! {
    lgamma, lgamma_, "lgamma" => libm::lgamma;
    digamma_k, digamma_, "digamma" => digamma;
    i0e, i0e_, "special_i0e" => |v| bessel_ie(0, v);
    i1, i1_, "special_i1" => |v| bessel_i(1, v);
    i1e, i1e_, "special_i1e" => |v| bessel_ie(1, v);
    erfcx_k, erfcx_, "special_erfcx" => erfcx;
    ndtr_k, ndtr_, "special_ndtr" => ndtr;
    log_ndtr_k, log_ndtr_, "special_log_ndtr" => log_ndtr;
    ndtri_k, ndtri_, "special_ndtri" => ndtri;
    entr_k, entr_, "special_entr" => entr;
}

/// `polygamma(n, self)`: digamma for n = 0, otherwise `(-1)^(n+1) n! zeta(n+1, x)`.
fn polygamma(args: &mut Args<'_>) -> R {
    let n = args.int(0)?;
    let x = args.tensor(1)?;
    polygamma_of(n, &x)
}
fn polygamma_of(n: i64, x: &Tensor) -> R {
    if n < 0 {
        return Err(value_err("polygamma(n, x) does not support negative n."));
    }
    if n == 0 {
        return t(float_unary!(x, "polygamma", |v: F| digamma(v as f64) as F)?);
    }
    let nf = n as f64;
    let fact = libm::tgamma(nf + 1.0);
    let sign = if n % 2 == 1 { 1.0 } else { -1.0 };
    t(float_unary!(
        x,
        "polygamma",
        |v: F| (sign * fact * hurwitz_zeta(nf + 1.0, v as f64)) as F
    )?)
}
/// `polygamma_(self, n)`.
fn polygamma_(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let n = args.int(1)?;
    let r = polygamma_of(n, &x)?;
    inplace_result(args, r)
}

/// Hurwitz zeta `sum_k (k + q)^-s` by direct summation plus Euler-Maclaurin tail (s > 1).
fn hurwitz_zeta(s: f64, q: f64) -> f64 {
    if q <= 0.0 && q == q.floor() {
        return f64::INFINITY;
    }
    if q < 0.0 {
        // Shift q positive: zeta(s, q) = sum_{k<m} (q+k)^-s + zeta(s, q+m).
        let m = (-q).ceil() as i64 + 1;
        let head: f64 = (0..m).map(|k| (q + k as f64).powf(-s)).sum();
        return head + hurwitz_zeta(s, q + m as f64);
    }
    const N: usize = 12;
    let mut sum = 0.0;
    for k in 0..N {
        sum += (q + k as f64).powf(-s);
    }
    let a = q + N as f64;
    sum += a.powf(1.0 - s) / (s - 1.0) + 0.5 * a.powf(-s);
    // Bernoulli terms B2k/(2k)! * s(s+1)...(s+2k-2) a^(-s-2k+1).
    const B: [f64; 6] = [
        1.0 / 6.0,
        -1.0 / 30.0,
        1.0 / 42.0,
        -1.0 / 30.0,
        5.0 / 66.0,
        -691.0 / 2730.0,
    ];
    let mut fac = 1.0; // (2k)!
    let mut poch = s; // s(s+1)...(s+2k-2)
    let mut apow = a.powf(-s - 1.0);
    for (k, b) in B.iter().enumerate() {
        let k2 = 2 * (k + 1);
        fac *= ((k2 - 1) * k2) as f64;
        sum += b / fac * poch * apow;
        poch *= (s + k2 as f64 - 1.0) * (s + k2 as f64);
        apow /= a * a;
    }
    sum
}

/// `mvlgamma(self, p)`: `sum_{i<p} lgamma(x - i/2) + p(p-1)/4 log(pi)` (no domain check, as PyTorch).
fn mvlgamma(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let p = args.int(1)?;
    if p < 1 {
        return Err(value_err("p has to be greater than or equal to 1"));
    }
    if !x.dtype().is_floating_point() {
        return Err(value_err(
            "mvlgamma is not implemented for integral tensors",
        ));
    }
    let c = (p * (p - 1)) as f64 / 4.0 * std::f64::consts::PI.ln();
    t(float_unary!(&x, "mvlgamma", |v: F| {
        let v = v as f64;
        (c + (0..p)
            .map(|i| libm::lgamma(v - i as f64 / 2.0))
            .sum::<f64>()) as F
    })?)
}
fn mvlgamma_(args: &mut Args<'_>) -> R {
    let r = mvlgamma(args)?;
    inplace_result(args, r)
}

/// `positive(self)`: self, except that bool tensors are refused as in PyTorch.
fn positive(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    if x.dtype() == DType::Bool {
        return Err(value_err(
            "The `+` operator, on a bool tensor is not supported.",
        ));
    }
    t(x)
}

fn signbit(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    if x.dtype().is_complex() {
        return Err(value_err("signbit is not implemented for complex tensors."));
    }
    let v: Vec<bool> = vals(&x)?.iter().map(|v| v.is_sign_negative()).collect();
    t(Tensor::from_vec(v, x.shape())?)
}

fn binary_kernel(
    args: &Args<'_>,
    f: impl Fn(f64, f64) -> f64 + Sync + Send,
) -> crate::Result<Tensor> {
    let (a, b) = (Operand::arg(args, 0)?, Operand::arg(args, 1)?);
    float_binary_op(&a, &b, f)
}

fn logaddexp_f(a: f64, b: f64) -> f64 {
    if a.is_infinite() && a == b {
        return a;
    }
    let m = a.max(b);
    m + (-(a - b).abs()).exp().ln_1p()
}
fn logaddexp(args: &mut Args<'_>) -> R {
    t(binary_kernel(args, logaddexp_f)?)
}
fn logaddexp2(args: &mut Args<'_>) -> R {
    let ln2 = std::f64::consts::LN_2;
    t(binary_kernel(args, |a, b| {
        logaddexp_f(a * ln2, b * ln2) / ln2
    })?)
}
fn xlogy_f(x: f64, y: f64) -> f64 {
    if y.is_nan() {
        f64::NAN
    } else if x == 0.0 {
        0.0
    } else {
        x * y.ln()
    }
}
fn xlogy(args: &mut Args<'_>) -> R {
    t(binary_kernel(args, xlogy_f)?)
}
fn xlogy_(args: &mut Args<'_>) -> R {
    let r = xlogy(args)?;
    inplace_result(args, r)
}
/// `special_xlog1py(self, other)`: `x * log1p(y)`, 0 where x == 0.
fn xlog1py(args: &mut Args<'_>) -> R {
    t(binary_kernel(args, |x, y| {
        if y.is_nan() {
            f64::NAN
        } else if x == 0.0 {
            0.0
        } else {
            x * y.ln_1p()
        }
    })?)
}

/// `heaviside(self, values)`: both operands must have the same dtype (PyTorch refuses mixing).
fn heaviside(args: &mut Args<'_>) -> R {
    let (x, v) = (args.tensor(0)?, args.tensor(1)?);
    if x.dtype() != v.dtype() {
        return Err(value_err(
            "heaviside is not yet implemented for tensors with different dtypes",
        ));
    }
    if x.dtype().is_complex() {
        return Err(value_err(
            "heaviside is not yet implemented for complex tensors.",
        ));
    }
    let (a, b) = (x.to_dtype(DType::Float64)?, v.to_dtype(DType::Float64)?);
    let out = map_binary::<f64, f64, f64, _>(&a, &b, |x, v| {
        if x == 0.0 {
            v
        } else if x > 0.0 {
            1.0
        } else if x.is_nan() {
            x
        } else {
            0.0
        }
    })?;
    t(out.to_dtype(x.dtype())?)
}
fn heaviside_(args: &mut Args<'_>) -> R {
    let r = heaviside(args)?;
    inplace_result(args, r)
}

// ---------------------------------------------------------------- losses

/// Reduce an f64 loss tensor: 0 none, 1 mean, 2 sum; cast to `dt`.
fn reduce_loss(loss: Tensor, reduction: i64, dt: DType) -> crate::Result<Tensor> {
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
        other => Err(value_err(format!(
            "{other} is not a valid value for reduction"
        ))),
    }
}

/// A pointwise loss `f(input, target)` with broadcasting and reduction argument `red_idx`.
fn pointwise_loss(args: &Args<'_>, red_idx: usize, f: impl Fn(f64, f64) -> f64 + Sync + Send) -> R {
    let (a, b) = (Operand::arg(args, 0)?, Operand::arg(args, 1)?);
    let dt = float_common(&a, &b)?;
    let (x, y) = (
        a.as_tensor_of(DType::Float64)?,
        b.as_tensor_of(DType::Float64)?,
    );
    let loss = map_binary::<f64, f64, f64, _>(&x, &y, f)?;
    t(reduce_loss(loss, args.int(red_idx)?, dt)?)
}

fn mse_loss(args: &mut Args<'_>) -> R {
    pointwise_loss(args, 2, |x, y| (x - y) * (x - y))
}
fn l1_loss(args: &mut Args<'_>) -> R {
    pointwise_loss(args, 2, |x, y| (x - y).abs())
}
fn smooth_l1_loss(args: &mut Args<'_>) -> R {
    let beta = args.double(3)?;
    if beta < 0.0 {
        return Err(value_err(
            "smooth_l1_loss does not support negative values for beta.",
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
fn huber_loss(args: &mut Args<'_>) -> R {
    let delta = args.double(3)?;
    if delta <= 0.0 {
        return Err(value_err(
            "huber_loss does not support non-positive values for delta.",
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
fn soft_margin_loss(args: &mut Args<'_>) -> R {
    pointwise_loss(args, 2, |x, y| (-x * y).exp().ln_1p())
}
fn kl_div(args: &mut Args<'_>) -> R {
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

/// Same-shape check of input and target (losses that do not broadcast).
fn same_shape(op: &str, a: &Tensor, b: &Tensor) -> crate::Result<()> {
    if a.shape() != b.shape() {
        return Err(value_err(format!(
            "{op}: Using a target size ({:?}) that is different to the input size ({:?}) is deprecated. Please ensure they have the same size.",
            b.shape(),
            a.shape()
        )));
    }
    Ok(())
}

/// Broadcast `w` (optional) to `shape` as f64 values.
fn weights_to(w: Option<Tensor>, shape: &[usize]) -> crate::Result<Option<Vec<f64>>> {
    match w {
        None => Ok(None),
        Some(w) => {
            let b = broadcast_shapes(w.shape(), shape)?;
            if b.as_slice() != shape {
                return Err(value_err(format!(
                    "weight of shape {:?} cannot broadcast to {shape:?}",
                    w.shape()
                )));
            }
            Ok(Some(vals(&super::shape::expand_to(&w, shape)?)?))
        }
    }
}

fn binary_cross_entropy(args: &mut Args<'_>) -> R {
    let (x, y) = (args.tensor(0)?, args.tensor(1)?);
    same_shape("binary_cross_entropy", &x, &y)?;
    let w = weights_to(args.opt_tensor(2)?, x.shape())?;
    let red = args.int(3)?;
    let (xv, yv) = (vals(&x)?, vals(&y)?);
    if xv.iter().any(|&p| !(0.0..=1.0).contains(&p)) {
        return Err(value_err("all elements of input should be between 0 and 1"));
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

fn bce_with_logits(args: &mut Args<'_>) -> R {
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

fn margin_ranking_loss(args: &mut Args<'_>) -> R {
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

fn hinge_embedding_loss(args: &mut Args<'_>) -> R {
    let margin = args.double(2)?;
    pointwise_loss(args, 3, move |x, y| {
        // ATen: where(y != 1, clamp_min(margin - x, 0), 0) + where(y != -1, x, 0)
        let pos = if y != -1.0 { x } else { 0.0 };
        let neg = if y != 1.0 { (margin - x).max(0.0) } else { 0.0 };
        pos + neg
    })
}

fn poisson_nll_loss(args: &mut Args<'_>) -> R {
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
fn rows(x: &Tensor) -> crate::Result<(Vec<f64>, usize)> {
    let d = x.shape().last().copied().unwrap_or(1);
    Ok((vals(x)?, d.max(1)))
}

fn cosine_embedding_loss(args: &mut Args<'_>) -> R {
    let (a, b, y) = (args.tensor(0)?, args.tensor(1)?, args.tensor(2)?);
    let margin = args.double(3)?;
    let red = args.int(4)?;
    same_shape("cosine_embedding_loss", &a, &b)?;
    if a.dim() == 0 || a.dim() > 2 || y.dim() + 1 != a.dim() {
        return Err(value_err(format!(
            "cosine_embedding_loss: expected 1D or 2D input and a target of one dimension less, got {:?} and {:?}",
            a.shape(),
            y.shape()
        )));
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
fn row_dist(a: &[f64], b: &[f64], p: f64, eps: f64) -> f64 {
    let it = a.iter().zip(b).map(|(x, y)| (x - y + eps).abs());
    if p == f64::INFINITY {
        it.fold(0.0, f64::max)
    } else if p == 0.0 {
        it.filter(|v| *v != 0.0).count() as f64
    } else {
        it.map(|v| v.powf(p)).sum::<f64>().powf(1.0 / p)
    }
}

fn triplet_margin_loss(args: &mut Args<'_>) -> R {
    let (a, p, n) = (args.tensor(0)?, args.tensor(1)?, args.tensor(2)?);
    let margin = args.double(3)?;
    let pn = args.double(4)?;
    let eps = args.double(5)?;
    let swap = args.bool(6)?;
    let red = args.int(7)?;
    same_shape("triplet_margin_loss", &a, &p)?;
    same_shape("triplet_margin_loss", &a, &n)?;
    if a.dim() == 0 || a.dim() > 2 {
        return Err(value_err(format!(
            "triplet_margin_loss: expected 1D or 2D inputs, got {:?}",
            a.shape()
        )));
    }
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
fn nll_layout(x: &Tensor, target: &Tensor) -> crate::Result<(usize, usize, usize)> {
    let s = x.shape();
    let (n, c, sp, tshape): (usize, usize, usize, Vec<usize>) = match s.len() {
        0 => return Err(value_err("nll_loss: input tensor should be 1D or more")),
        1 => (1, s[0], 1, vec![]),
        _ => {
            let mut ts = vec![s[0]];
            ts.extend_from_slice(&s[2..]);
            (s[0], s[1], s[2..].iter().product(), ts)
        }
    };
    if target.shape() != tshape.as_slice() {
        return Err(value_err(format!(
            "nll_loss: expected target of shape {tshape:?} for input of shape {s:?}, got {:?}",
            target.shape()
        )));
    }
    Ok((n, c, sp))
}

/// The shared core of nll_loss and cross_entropy: `logp` is `[N, C, S]` row-major. Returns
/// (per-element losses shaped like the target, sum of weights of non-ignored targets).
fn nll_core(
    logp: &[f64],
    target: &Tensor,
    weight: Option<&[f64]>,
    ignore_index: i64,
    (n, c, sp): (usize, usize, usize),
) -> crate::Result<(Vec<f64>, f64)> {
    if target.dtype().is_floating_point() || target.dtype().is_complex() {
        return Err(value_err(format!(
            "nll_loss: expected target of an integer dtype, got {}",
            target.dtype()
        )));
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
                return Err(value_err(format!("Target {k} is out of bounds.")));
            }
            let w = weight.map_or(1.0, |w| w[k as usize]);
            loss[i * sp + s] = -w * logp[(i * c + k as usize) * sp + s];
            wsum += w;
        }
    }
    Ok((loss, wsum))
}

fn class_weights(w: Option<Tensor>, c: usize) -> crate::Result<Option<Vec<f64>>> {
    match w {
        None => Ok(None),
        Some(w) => {
            if w.numel() != c {
                return Err(value_err(format!(
                    "weight tensor should be defined either for all {c} classes or no classes but got weight tensor of shape: {:?}",
                    w.shape()
                )));
            }
            Ok(Some(vals(&w)?))
        }
    }
}

/// Reduce nll losses: mean divides by the weight sum of counted targets.
fn nll_reduce(
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
        other => Err(value_err(format!(
            "{other} is not a valid value for reduction"
        ))),
    }
}

fn nll_loss(args: &mut Args<'_>) -> R {
    let (x, target) = (args.tensor(0)?, args.tensor(1)?);
    let layout = nll_layout(&x, &target)?;
    let w = class_weights(args.opt_tensor(2)?, layout.1)?;
    let red = args.int(3)?;
    let ignore = args.int(4)?;
    let (loss, wsum) = nll_core(&vals(&x)?, &target, w.as_deref(), ignore, layout)?;
    let dt = float_dtype(x.dtype());
    let out = nll_reduce(loss, wsum, target.shape(), red, dt)?;
    if args.op.contains("forward") {
        return Ok(IValue::Tuple(crate::values::Tuple::new(vec![
            IValue::Tensor(out),
            // PyTorch leaves total_weight at 0 when nothing is reduced
            IValue::Tensor(build(vec![if red == 0 { 0.0 } else { wsum }], &[], dt)?),
        ])));
    }
    t(out)
}

/// log_softmax over the class axis of a `[N, C, S]` buffer.
fn log_softmax_classes(v: &mut [f64], (n, c, sp): (usize, usize, usize)) {
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

fn cross_entropy_loss(args: &mut Args<'_>) -> R {
    let (x, target) = (args.tensor(0)?, args.tensor(1)?);
    let wt = args.opt_tensor(2)?;
    let red = args.int(3)?;
    let ignore = args.int(4)?;
    let ls = args.double(5)?;
    if !(0.0..=1.0).contains(&ls) {
        return Err(value_err(format!(
            "label_smoothing must be between 0.0 and 1.0. Got: {ls}"
        )));
    }
    let dt = float_dtype(x.dtype());
    let s = x.shape();
    let layout = match s.len() {
        0 => {
            return Err(value_err(
                "cross_entropy: input tensor should be 1D or more",
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

// ---------------------------------------------------------------- grids and patches

/// `affine_grid_generator(theta, size, align_corners)`: theta `[N, k, k+1]`, size `[N, C, *k]`,
/// output `[N, *k, k]` of (x, y[, z]) sampling coordinates.
fn affine_grid_generator(args: &mut Args<'_>) -> R {
    let theta = args.tensor(0)?;
    let size = args.int_list(1)?;
    let align = args.bool(2)?;
    if !(size.len() == 4 || size.len() == 5) || size.iter().any(|&v| v < 0) {
        return Err(value_err(format!(
            "affine_grid only supports 4D and 5D sizes, for 2D and 3D affine transforms, respectively. Got size {size:?}."
        )));
    }
    let k = size.len() - 2;
    let n = size[0] as usize;
    if theta.shape() != [n, k, k + 1] {
        return Err(value_err(format!(
            "Expected a batch of {}D affine matrices of shape Nx{k}x{} for size {size:?}. Got {:?}.",
            k,
            k + 1,
            theta.shape()
        )));
    }
    if !theta.dtype().is_floating_point() {
        return Err(value_err("affine_grid: expected a floating theta"));
    }
    let spatial: Vec<usize> = size[2..].iter().map(|&v| v as usize).collect();
    let lin = |steps: usize, i: usize| -> f64 {
        if steps <= 1 {
            return 0.0;
        }
        let v = -1.0 + 2.0 * i as f64 / (steps - 1) as f64;
        if align {
            v
        } else {
            v * (steps - 1) as f64 / steps as f64
        }
    };
    let th = vals(&theta)?;
    let npos: usize = spatial.iter().product();
    let mut out = Vec::with_capacity(n * npos * k);
    for b in 0..n {
        let m = &th[b * k * (k + 1)..(b + 1) * k * (k + 1)];
        for pos in 0..npos {
            // Base coordinates (x first: the last spatial dim), then the homogeneous 1.
            let mut idx = pos;
            let mut base = vec![0.0; k + 1];
            for (d, &len) in spatial.iter().enumerate().rev() {
                base[k - 1 - d] = lin(len, idx % len);
                idx /= len;
            }
            base[k] = 1.0;
            for r in 0..k {
                out.push((0..=k).map(|j| m[r * (k + 1) + j] * base[j]).sum());
            }
        }
    }
    let mut shape = vec![n];
    shape.extend_from_slice(&spatial);
    shape.push(k);
    t(build(out, &shape, theta.dtype())?)
}

/// A normalized grid coordinate as a pixel coordinate under PyTorch's padding modes.
fn grid_coord(c: f64, size: usize, padding: i64, align: bool) -> f64 {
    let sz = size as f64;
    let mut x = if align {
        (c + 1.0) / 2.0 * (sz - 1.0)
    } else {
        ((c + 1.0) * sz - 1.0) / 2.0
    };
    let clip = |x: f64| x.clamp(0.0, sz - 1.0);
    match padding {
        1 => x = clip(x),
        2 => {
            x = if align {
                reflect(x, 0.0, 2.0 * (sz - 1.0))
            } else {
                reflect(x, -1.0, 2.0 * sz - 1.0)
            };
            x = clip(x);
        }
        _ => {}
    }
    x
}

fn reflect(x: f64, twice_low: f64, twice_high: f64) -> f64 {
    if twice_low == twice_high {
        return 0.0;
    }
    let min = twice_low / 2.0;
    let span = (twice_high - twice_low) / 2.0;
    let x = (x - min).abs();
    let extra = x % span;
    let flips = (x / span).floor() as i64;
    if flips % 2 == 0 {
        extra + min
    } else {
        span - extra + min
    }
}

/// `grid_sampler_2d(input, grid, interpolation_mode, padding_mode, align_corners)`:
/// modes 0 bilinear / 1 nearest; padding 0 zeros / 1 border / 2 reflection.
fn grid_sampler_2d(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let grid = args.tensor(1)?;
    let mode = args.int(2)?;
    let padding = args.int(3)?;
    let align = args.bool(4)?;
    if x.dim() != 4 {
        return Err(value_err(format!(
            "{}: only 4-D input (2-D sampling) is supported, got input of shape {:?}",
            args.op,
            x.shape()
        )));
    }
    let (n, c, h, w) = (x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]);
    let gs = grid.shape();
    if gs.len() != 4 || gs[0] != n || gs[3] != 2 {
        return Err(value_err(format!(
            "grid_sampler(): expected grid of shape [{n}, H, W, 2] for input of shape {:?}, got {gs:?}",
            x.shape()
        )));
    }
    if !(0..=1).contains(&mode) {
        return Err(value_err(format!(
            "grid_sampler: interpolation mode {mode} is not supported (0 bilinear, 1 nearest)"
        )));
    }
    if !(0..=2).contains(&padding) {
        return Err(value_err(format!(
            "grid_sampler: bad padding mode {padding}"
        )));
    }
    if !x.dtype().is_floating_point() || x.dtype() != grid.dtype() {
        return Err(value_err(format!(
            "grid_sampler(): expected input and grid of the same floating dtype, got {} and {}",
            x.dtype(),
            grid.dtype()
        )));
    }
    let (oh, ow) = (gs[1], gs[2]);
    let xv = vals(&x)?;
    let gv = vals(&grid)?;
    let mut out = vec![0.0; n * c * oh * ow];
    for b in 0..n {
        for p in 0..oh * ow {
            let gx = grid_coord(gv[(b * oh * ow + p) * 2], w, padding, align);
            let gy = grid_coord(gv[(b * oh * ow + p) * 2 + 1], h, padding, align);
            let at = |ch: usize, yy: i64, xx: i64| -> f64 {
                if yy < 0 || xx < 0 || yy >= h as i64 || xx >= w as i64 {
                    0.0
                } else {
                    xv[((b * c + ch) * h + yy as usize) * w + xx as usize]
                }
            };
            for ch in 0..c {
                let v = if mode == 1 {
                    at(ch, gy.round_ties_even() as i64, gx.round_ties_even() as i64)
                } else {
                    let (x0, y0) = (gx.floor(), gy.floor());
                    let (tx, ty) = (gx - x0, gy - y0);
                    let (x0, y0) = (x0 as i64, y0 as i64);
                    at(ch, y0, x0) * (1.0 - tx) * (1.0 - ty)
                        + at(ch, y0, x0 + 1) * tx * (1.0 - ty)
                        + at(ch, y0 + 1, x0) * (1.0 - tx) * ty
                        + at(ch, y0 + 1, x0 + 1) * tx * ty
                };
                out[(b * c + ch) * oh * ow + p] = v;
            }
        }
    }
    t(build(out, &[n, c, oh, ow], x.dtype())?)
}

/// `grid_sampler_3d(input, grid, interpolation_mode, padding_mode, align_corners)`: input
/// `[N, C, D, H, W]`, grid `[N, D', H', W', 3]` holding (x, y, z) for (W, H, D); modes 0
/// trilinear / 1 nearest (PyTorch has no bicubic in 3-D); padding as in 2-D.
fn grid_sampler_3d(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let grid = args.tensor(1)?;
    let mode = args.int(2)?;
    let padding = args.int(3)?;
    let align = args.bool(4)?;
    if x.dim() != 5 {
        return Err(value_err(format!(
            "grid_sampler(): expected 5D input when grid is 5D, but got input of shape {:?}",
            x.shape()
        )));
    }
    let (n, c, d, h, w) = (
        x.shape()[0],
        x.shape()[1],
        x.shape()[2],
        x.shape()[3],
        x.shape()[4],
    );
    let gs = grid.shape();
    if gs.len() != 5 || gs[0] != n || gs[4] != 3 {
        return Err(value_err(format!(
            "grid_sampler(): expected grid to have size 3 in last dimension and the batch size \
             of input, but got grid with sizes {gs:?} for input of shape {:?}",
            x.shape()
        )));
    }
    if !(0..=1).contains(&mode) {
        return Err(value_err(format!(
            "grid_sampler(): bicubic interpolation only supports 4D input (mode {mode})"
        )));
    }
    if !(0..=2).contains(&padding) {
        return Err(value_err(format!(
            "grid_sampler: bad padding mode {padding}"
        )));
    }
    if !x.dtype().is_floating_point() || x.dtype() != grid.dtype() {
        return Err(value_err(format!(
            "grid_sampler(): expected input and grid of the same floating dtype, got {} and {}",
            x.dtype(),
            grid.dtype()
        )));
    }
    let (od, oh, ow) = (gs[1], gs[2], gs[3]);
    let points = od * oh * ow;
    let xv = vals(&x)?;
    let gv = vals(&grid)?;
    let mut out = vec![0.0; n * c * points];
    for b in 0..n {
        for p in 0..points {
            let g = &gv[(b * points + p) * 3..(b * points + p) * 3 + 3];
            let gx = grid_coord(g[0], w, padding, align);
            let gy = grid_coord(g[1], h, padding, align);
            let gz = grid_coord(g[2], d, padding, align);
            let at = |ch: usize, zz: i64, yy: i64, xx: i64| -> f64 {
                if zz < 0 || yy < 0 || xx < 0 || zz >= d as i64 || yy >= h as i64 || xx >= w as i64
                {
                    0.0
                } else {
                    xv[(((b * c + ch) * d + zz as usize) * h + yy as usize) * w + xx as usize]
                }
            };
            for ch in 0..c {
                let v = if mode == 1 {
                    at(
                        ch,
                        gz.round_ties_even() as i64,
                        gy.round_ties_even() as i64,
                        gx.round_ties_even() as i64,
                    )
                } else {
                    let (x0, y0, z0) = (gx.floor(), gy.floor(), gz.floor());
                    let (tx, ty, tz) = (gx - x0, gy - y0, gz - z0);
                    let (x0, y0, z0) = (x0 as i64, y0 as i64, z0 as i64);
                    let mut acc = 0.0;
                    for (dz, wz) in [(0, 1.0 - tz), (1, tz)] {
                        for (dy, wy) in [(0, 1.0 - ty), (1, ty)] {
                            for (dx, wx) in [(0, 1.0 - tx), (1, tx)] {
                                acc += at(ch, z0 + dz, y0 + dy, x0 + dx) * wz * wy * wx;
                            }
                        }
                    }
                    acc
                };
                out[(b * c + ch) * points + p] = v;
            }
        }
    }
    t(build(out, &[n, c, od, oh, ow], x.dtype())?)
}

/// `grid_sampler`: the 2-D or 3-D sampler by the input's rank, as ATen's dispatcher does.
fn grid_sampler(args: &mut Args<'_>) -> R {
    if args.tensor(0)?.dim() == 5 {
        grid_sampler_3d(args)
    } else {
        grid_sampler_2d(args)
    }
}

/// Two positive ints (kernel, dilation, stride) or non-negative (padding) from a 2-list.
fn pair(args: &Args<'_>, i: usize, what: &str, min: i64) -> crate::Result<[usize; 2]> {
    let v = args.int_list(i)?;
    if v.len() != 2 || v.iter().any(|&e| e < min) {
        return Err(value_err(format!(
            "{}: {what} must be two integers >= {min}, got {v:?}",
            args.op
        )));
    }
    Ok([v[0] as usize, v[1] as usize])
}

/// Output positions of a sliding window along one dim.
fn blocks(len: usize, k: usize, d: usize, p: usize, s: usize) -> Option<usize> {
    let span = d * (k - 1) + 1;
    (len + 2 * p).checked_sub(span).map(|r| r / s + 1)
}

/// `im2col(self, kernel_size, dilation, padding, stride)` (nn.Unfold).
fn im2col(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let k = pair(args, 1, "kernel_size", 1)?;
    let d = pair(args, 2, "dilation", 1)?;
    let p = pair(args, 3, "padding", 0)?;
    let s = pair(args, 4, "stride", 1)?;
    let batched = x.dim() == 4;
    if !(x.dim() == 3 || batched) {
        return Err(value_err(format!(
            "im2col: expected 3D or 4D input, got {:?}",
            x.shape()
        )));
    }
    let sh = x.shape();
    let (n, c, h, w) = if batched {
        (sh[0], sh[1], sh[2], sh[3])
    } else {
        (1, sh[0], sh[1], sh[2])
    };
    let (Some(bh), Some(bw)) = (
        blocks(h, k[0], d[0], p[0], s[0]),
        blocks(w, k[1], d[1], p[1], s[1]),
    ) else {
        return Err(value_err(format!(
            "im2col: the kernel {k:?} with dilation {d:?} does not fit the padded input {:?}",
            sh
        )));
    };
    let xv = vals(&x)?;
    let rows = c * k[0] * k[1];
    let l = bh * bw;
    let mut out = vec![0.0; n * rows * l];
    for b in 0..n {
        for ch in 0..c {
            for ki in 0..k[0] {
                for kj in 0..k[1] {
                    let row = (ch * k[0] + ki) * k[1] + kj;
                    for oi in 0..bh {
                        for oj in 0..bw {
                            let yy = (oi * s[0] + ki * d[0]) as i64 - p[0] as i64;
                            let xx = (oj * s[1] + kj * d[1]) as i64 - p[1] as i64;
                            if yy >= 0 && xx >= 0 && (yy as usize) < h && (xx as usize) < w {
                                out[(b * rows + row) * l + oi * bw + oj] =
                                    xv[((b * c + ch) * h + yy as usize) * w + xx as usize];
                            }
                        }
                    }
                }
            }
        }
    }
    let shape = if batched {
        vec![n, rows, l]
    } else {
        vec![rows, l]
    };
    t(build(out, &shape, x.dtype())?)
}

/// `col2im(self, output_size, kernel_size, dilation, padding, stride)` (nn.Fold): sums patches.
fn col2im(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let o = pair(args, 1, "output_size", 1)?;
    let k = pair(args, 2, "kernel_size", 1)?;
    let d = pair(args, 3, "dilation", 1)?;
    let p = pair(args, 4, "padding", 0)?;
    let s = pair(args, 5, "stride", 1)?;
    let batched = x.dim() == 3;
    if !(x.dim() == 2 || batched) {
        return Err(value_err(format!(
            "col2im: expected 2D or 3D input, got {:?}",
            x.shape()
        )));
    }
    let sh = x.shape();
    let (n, rows, l) = if batched {
        (sh[0], sh[1], sh[2])
    } else {
        (1, sh[0], sh[1])
    };
    let kk = k[0] * k[1];
    if rows % kk != 0 {
        return Err(value_err(format!(
            "Expected size of input's dimension 1 to be divisible by the product of kernel_size, but got input.size(1)={rows} and kernel_size={k:?}"
        )));
    }
    let c = rows / kk;
    let (bh, bw) = match (blocks(o[0], k[0], d[0], p[0], s[0]), blocks(o[1], k[1], d[1], p[1], s[1])) {
        (Some(a), Some(b)) if a * b == l => (a, b),
        _ => {
            return Err(value_err(format!(
                "Given output_size={o:?}, kernel_size={k:?}, dilation={d:?}, padding={p:?}, stride={s:?}, expected size of input's dimension 2 to match the calculated number of sliding blocks, but got input.size(2)={l}."
            )))
        }
    };
    let xv = vals(&x)?;
    let (h, w) = (o[0], o[1]);
    let mut out = vec![0.0; n * c * h * w];
    for b in 0..n {
        for ch in 0..c {
            for ki in 0..k[0] {
                for kj in 0..k[1] {
                    let row = (ch * k[0] + ki) * k[1] + kj;
                    for oi in 0..bh {
                        for oj in 0..bw {
                            let yy = (oi * s[0] + ki * d[0]) as i64 - p[0] as i64;
                            let xx = (oj * s[1] + kj * d[1]) as i64 - p[1] as i64;
                            if yy >= 0 && xx >= 0 && (yy as usize) < h && (xx as usize) < w {
                                out[((b * c + ch) * h + yy as usize) * w + xx as usize] +=
                                    xv[(b * rows + row) * l + oi * bw + oj];
                            }
                        }
                    }
                }
            }
        }
    }
    let shape = if batched {
        vec![n, c, h, w]
    } else {
        vec![c, h, w]
    };
    t(build(out, &shape, x.dtype())?)
}

// ---------------------------------------------------------------- tensor queries

fn element_size(args: &mut Args<'_>) -> R {
    Ok(IValue::Int(args.tensor(0)?.dtype().size() as i64))
}
fn get_device(args: &mut Args<'_>) -> R {
    args.tensor(0)?;
    Ok(IValue::Int(-1))
}
fn is_nonzero(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    match x.numel() {
        0 => Err(value_err(
            "Boolean value of Tensor with no values is ambiguous",
        )),
        1 => Ok(IValue::Bool(
            x.item()?.to_c64() != num_complex::Complex64::new(0.0, 0.0),
        )),
        _ => Err(value_err(
            "Boolean value of Tensor with more than one value is ambiguous",
        )),
    }
}
fn is_same_size(args: &mut Args<'_>) -> R {
    Ok(IValue::Bool(
        args.tensor(0)?.shape() == args.tensor(1)?.shape(),
    ))
}
fn equal(args: &mut Args<'_>) -> R {
    let (a, b) = (args.tensor(0)?, args.tensor(1)?);
    if a.shape() != b.shape() {
        return Ok(IValue::Bool(false));
    }
    let dt = common_dtype(&[&Operand::Tensor(a.clone()), &Operand::Tensor(b.clone())]);
    if dt.is_complex() {
        let (x, y) = (
            a.to_vec::<num_complex::Complex64>()?,
            b.to_vec::<num_complex::Complex64>()?,
        );
        return Ok(IValue::Bool(x == y));
    }
    Ok(IValue::Bool(vals(&a)? == vals(&b)?))
}

fn isclose_tensor(args: &Args<'_>) -> crate::Result<Tensor> {
    let (a, b) = (args.tensor(0)?, args.tensor(1)?);
    let rtol = args.double(2)?;
    let atol = args.double(3)?;
    let equal_nan = args.bool(4)?;
    if a.dtype() != b.dtype() {
        return Err(value_err(format!(
            "{} should be same dtype as {}",
            a.dtype(),
            b.dtype()
        )));
    }
    if rtol < 0.0 || atol < 0.0 {
        return Err(value_err("rtol and atol must be non-negative"));
    }
    if a.dtype().is_complex() {
        return Err(value_err("isclose is not implemented for complex tensors"));
    }
    let (x, y) = (a.to_dtype(DType::Float64)?, b.to_dtype(DType::Float64)?);
    map_binary::<f64, f64, bool, _>(&x, &y, move |p, q| {
        if p == q {
            return true;
        }
        if p.is_nan() || q.is_nan() {
            return equal_nan && p.is_nan() && q.is_nan();
        }
        if !p.is_finite() || !q.is_finite() {
            return false;
        }
        (p - q).abs() <= atol + rtol * q.abs()
    })
}
fn isclose(args: &mut Args<'_>) -> R {
    t(isclose_tensor(args)?)
}
fn allclose(args: &mut Args<'_>) -> R {
    let c = isclose_tensor(args)?;
    Ok(IValue::Bool(c.to_vec::<bool>()?.iter().all(|&v| v)))
}

/// `trace(self)`: the sum of a matrix's diagonal (integral inputs sum to int64).
fn trace(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    if x.dim() != 2 {
        return Err(value_err(format!(
            "trace: expected a matrix, but got tensor with dim {}",
            x.dim()
        )));
    }
    let d = super::shape::diagonal(&x, 0, 0, 1)?;
    let dt = if x.dtype().is_integral(true) {
        DType::Int64
    } else {
        x.dtype()
    };
    super::reduce::sum_op(&d, None, false, Some(dt), false).map(IValue::Tensor)
}

/// `cross(self, other, dim)` / `linalg_cross`: 3-vectors along `dim` (default: first of size 3).
fn cross(args: &mut Args<'_>) -> R {
    let (a, b) = (args.tensor(0)?, args.tensor(1)?);
    let shape = broadcast_shapes(a.shape(), b.shape())?;
    let dim = match args.opt_int(2)? {
        Some(d) => super::shape::wdim(d, shape.len())?,
        None => shape.iter().position(|&s| s == 3).ok_or_else(|| {
            value_err(format!(
                "no dimension of size 3 in input of shape {shape:?}"
            ))
        })?,
    };
    if shape.get(dim) != Some(&3) || a.dim() != b.dim() {
        return Err(value_err(format!(
            "linalg.cross: inputs must have the same number of dimensions and size 3 at dim {dim}, got {:?} and {:?}",
            a.shape(),
            b.shape()
        )));
    }
    let dt = common_dtype(&[&Operand::Tensor(a.clone()), &Operand::Tensor(b.clone())]);
    if dt.is_complex() || dt == DType::Bool {
        return Err(value_err(format!("cross is not implemented for {dt}")));
    }
    let av = vals(&super::shape::expand_to(&a, &shape)?)?;
    let bv = vals(&super::shape::expand_to(&b, &shape)?)?;
    let inner: usize = shape[dim + 1..].iter().product();
    let outer: usize = shape[..dim].iter().product();
    let mut out = vec![0.0; av.len()];
    for o in 0..outer {
        for i in 0..inner {
            let at = |v: &[f64], k: usize| v[(o * 3 + k) * inner + i];
            for k in 0..3 {
                let (k1, k2) = ((k + 1) % 3, (k + 2) % 3);
                out[(o * 3 + k) * inner + i] =
                    at(&av, k1) * at(&bv, k2) - at(&av, k2) * at(&bv, k1);
            }
        }
    }
    t(build(out, &shape, dt)?)
}

/// Register `new` as another name of an already registered kernel.
fn alias(r: &mut Registry, new: &str, old: &str) {
    if let Some(k) = r.lookup(old, "") {
        r.add(new, k);
    }
}

/// Registered after every other family (aliases look up kernels registered elsewhere).
pub(crate) fn register(r: &mut Registry) {
    register_unary(r);
    r.add("aten::special_psi", digamma_k);
    r.add("aten::special_digamma", digamma_k);
    r.add("aten::special_gammaln", lgamma);
    r.add("aten::polygamma", polygamma);
    r.add("aten::special_polygamma", polygamma);
    r.add("aten::polygamma_", polygamma_);
    r.add("aten::mvlgamma", mvlgamma);
    r.add("aten::mvlgamma_", mvlgamma_);
    r.add("aten::special_multigammaln", mvlgamma);
    r.add("aten::positive", positive);
    r.add("aten::signbit", signbit);
    r.add("aten::logaddexp", logaddexp);
    r.add("aten::logaddexp2", logaddexp2);
    for n in [
        "aten::xlogy.Tensor",
        "aten::xlogy.Scalar_Self",
        "aten::xlogy.Scalar_Other",
        "aten::special_xlogy",
        "aten::special_xlogy.self_scalar",
        "aten::special_xlogy.other_scalar",
    ] {
        r.add(n, xlogy);
    }
    r.add("aten::xlogy_.Tensor", xlogy_);
    r.add("aten::xlogy_.Scalar_Other", xlogy_);
    for n in [
        "aten::special_xlog1py",
        "aten::special_xlog1py.self_scalar",
        "aten::special_xlog1py.other_scalar",
    ] {
        r.add(n, xlog1py);
    }
    r.add("aten::heaviside", heaviside);
    r.add("aten::heaviside_", heaviside_);

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
        &[
            "aten::nll_loss",
            "aten::nll_loss_nd",
            "aten::nll_loss2d",
            "aten::nll_loss_forward",
            "aten::nll_loss2d_forward",
        ],
        nll_loss,
    );
    r.add("aten::cross_entropy_loss", cross_entropy_loss);

    r.add("aten::affine_grid_generator", affine_grid_generator);
    r.add("aten::grid_sampler", grid_sampler);
    r.add("aten::grid_sampler_3d", grid_sampler_3d);
    r.add("aten::grid_sampler_2d", grid_sampler_2d);
    r.add("aten::im2col", im2col);
    r.add("aten::col2im", col2im);

    r.add("aten::element_size", element_size);
    r.add("aten::get_device", get_device);
    r.add("aten::is_nonzero", is_nonzero);
    r.add("aten::is_same_size", is_same_size);
    r.add("aten::equal", equal);
    r.add("aten::isclose", isclose);
    r.add("aten::allclose", allclose);
    r.add("aten::trace", trace);
    r.add("aten::cross", cross);
    r.add("aten::linalg_cross", cross);

    for (new, old) in [
        ("aten::special_expm1", "aten::expm1"),
        ("aten::special_log1p", "aten::log1p"),
        ("aten::special_exp2", "aten::exp2"),
        ("aten::special_logit", "aten::logit"),
        ("aten::special_round", "aten::round.decimals"),
        ("aten::special_sinc", "aten::sinc"),
        ("aten::special_i0", "aten::i0"),
        ("aten::special_log_softmax", "aten::log_softmax.int"),
        ("aten::special_softmax", "aten::softmax.int"),
    ] {
        alias(r, new, old);
    }
}
