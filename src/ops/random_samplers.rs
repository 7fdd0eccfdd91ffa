//! The rejection samplers behind `torch.distributions`' Gamma, Dirichlet and Binomial:
//! `_standard_gamma` (Marsaglia-Tsang), `_sample_dirichlet` (normalized double gammas) and
//! `binomial` (BTRS above a mean of 10, geometric inversion below), drawing from PyTorch's CPU
//! generator in ATen's order (one element after another, row-major) with ATen's mix of float
//! and double arithmetic, so seeded draws match PyTorch's.

use super::kernels::{invalid_argument, not_implemented_for, wrong_dtype};
use super::shape::expand_to;
use super::{Args, Registry};
use crate::tensor::TensorError;
use crate::tensor::{DType, Tensor};
use crate::values::Generator;
use crate::values::IValue;

type R = crate::Result<IValue>;

/// `v` rounded to the kernel's `scalar_t` (float for float32, double for float64).
fn to_scalar(v: f64, single: bool) -> f64 {
    if single {
        v as f32 as f64
    } else {
        v
    }
}

/// ATen's `sample_gamma<scalar_t, double>`: alpha below 1 boosted by one with a `u^(1/alpha)`
/// scale, then Marsaglia and Tsang's acceptance-rejection. `single`: `scalar_t` is float, so
/// the arithmetic on alpha is float; ATen's float literals (`1.0f / 3.0f`, `0.0331f`) are
/// floats even in the double kernel.
fn sample_gamma(alpha: f64, single: bool, g: &mut Generator) -> f64 {
    let mut alpha = alpha;
    let mut scale = 1.0f64;
    if alpha < 1.0 {
        if alpha == 0.0 {
            return 0.0;
        }
        let exponent = if single {
            (1.0f32 / alpha as f32) as f64
        } else {
            1.0 / alpha
        };
        scale *= (1.0 - g.uniform_f64()).powf(exponent);
        alpha = to_scalar(alpha + 1.0, single);
    }
    let third = (1.0f32 / 3.0f32) as f64;
    let d = to_scalar(alpha - third, single);
    let c = 1.0 / (9.0 * d).sqrt();
    let coef = 0.0331f32 as f64;
    loop {
        let (mut x, mut y);
        loop {
            x = g.normal_f64();
            y = 1.0 + c * x;
            if y > 0.0 {
                break;
            }
        }
        let v = y * y * y;
        let u = 1.0 - g.uniform_f64();
        let xx = x * x;
        if u < 1.0 - coef * xx * xx || u.ln() < 0.5 * xx + d * (1.0 - v + v.ln()) {
            return scale * d * v;
        }
    }
}

/// The floating dtypes ATen's gamma/binomial kernels dispatch (float and double only).
fn check_float_or_double(op: &str, dtype: DType) -> crate::Result<bool> {
    match dtype {
        DType::Float32 => Ok(true),
        DType::Float64 => Ok(false),
        d => Err(not_implemented_for(op, d)),
    }
}

/// Gamma shapes ATen's sampler terminates on: NaN or negative ones make its rejection loop
/// spin forever in PyTorch, so they are refused here.
fn check_alphas(alphas: &[f64]) -> crate::Result<()> {
    match alphas.iter().find(|a| !(**a >= 0.0)) {
        Some(a) => Err(invalid_argument(
            "_standard_gamma",
            "concentration",
            "must be non-negative (PyTorch's sampler never returns for it)",
            a,
        )),
        None => Ok(()),
    }
}

/// `_standard_gamma(alpha)`: one Gamma(alpha, 1) draw per element, at least the dtype's
/// smallest normal number.
fn standard_gamma(args: &mut Args<'_>) -> R {
    let alpha = args.tensor(0)?;
    let gen = args.generator(1)?;
    let single = check_float_or_double("gamma_cpu", alpha.dtype())?;
    let alphas = alpha.contiguous()?.to_vec::<f64>()?;
    check_alphas(&alphas)?;
    let tiny = if single {
        f32::MIN_POSITIVE as f64
    } else {
        f64::MIN_POSITIVE
    };
    let mut g = gen.lock();
    let draws: Vec<f64> = alphas
        .iter()
        .map(|&a| to_scalar(sample_gamma(a, single, &mut g), single).max(tiny))
        .collect();
    drop(g);
    Ok(IValue::Tensor(
        Tensor::from_vec(draws, alpha.shape())?.to_dtype(alpha.dtype())?,
    ))
}

/// `_sample_dirichlet(alpha)`: double gamma draws (at least `f64::MIN_POSITIVE`) normalized
/// along the last dim, cast to the dtype and clamped to `[smallest normal, 1)`.
fn sample_dirichlet(args: &mut Args<'_>) -> R {
    let alpha = args.tensor(0)?;
    let gen = args.generator(1)?;
    let single = check_float_or_double("dirichlet", alpha.dtype())?;
    let alphas = alpha.contiguous()?.to_vec::<f64>()?;
    check_alphas(&alphas)?;
    let mut g = gen.lock();
    let gammas: Vec<f64> = alphas
        .iter()
        .map(|&a| sample_gamma(a, false, &mut g).max(f64::MIN_POSITIVE))
        .collect();
    drop(g);
    let row = alpha.shape().last().copied().unwrap_or(1).max(1);
    let (tiny, below_one) = if single {
        (
            f32::MIN_POSITIVE as f64,
            (1.0f32 - f32::EPSILON / 2.0) as f64,
        )
    } else {
        (f64::MIN_POSITIVE, 1.0 - f64::EPSILON / 2.0)
    };
    let mut out = Vec::with_capacity(gammas.len());
    for r in gammas.chunks(row) {
        let sum: f64 = r.iter().sum();
        out.extend(
            r.iter()
                .map(|v| to_scalar(v / sum, single).max(tiny).min(below_one)),
        );
    }
    Ok(IValue::Tensor(
        Tensor::from_vec(out, alpha.shape())?.to_dtype(alpha.dtype())?,
    ))
}

/// ATen's `stirling_approx_tail`: `lgamma(k + 1)` minus its Stirling approximation.
fn stirling_approx_tail(k: f64) -> f64 {
    const TAIL: [f64; 10] = [
        0.0810614667953272,
        0.0413406959554092,
        0.0276779256849983,
        0.02079067210376509,
        0.0166446911898211,
        0.0138761288230707,
        0.0118967099458917,
        0.0104112652619720,
        0.00925546218271273,
        0.00833056343336287,
    ];
    if k < TAIL.len() as f64 {
        // (k is a non-negative count here)
        return TAIL.get(k as usize).copied().unwrap_or(0.0);
    }
    let kp1sq = (k + 1.0) * (k + 1.0);
    (1.0 / 12.0 - (1.0 / 360.0 - 1.0 / 1260.0 / kp1sq) / kp1sq) / (k + 1.0)
}

/// Geometric inversion: how many geometric gaps fit into `count` trials.
fn binomial_inversion(count: f64, prob: f64, single: bool, g: &mut Generator) -> f64 {
    let logprob = to_scalar((-prob).ln_1p(), single);
    let mut geom_sum = 0.0;
    let mut num_geom = 0.0;
    loop {
        let u = g.uniform_f64();
        geom_sum += (u.ln() / logprob).ceil();
        if geom_sum > count {
            return num_geom;
        }
        num_geom += 1.0;
    }
}

/// Hormann's BTRS transformed rejection (ATen's variant, from TensorFlow's).
fn btrs(count: f64, prob: f64, single: bool, g: &mut Generator) -> f64 {
    let s = |v: f64| to_scalar(v, single);
    let stddev = s(s(s(count * prob) * s(1.0 - prob)).sqrt());
    let b = 1.15 + 2.53 * stddev;
    let a = -0.0873 + 0.0248 * b + 0.01 * prob;
    let c = s(count * prob) + 0.5;
    let v_r = 0.92 - 4.2 / b;
    let r = s(prob / s(1.0 - prob));
    let alpha = (2.83 + 5.1 / b) * stddev;
    let m = s(s(s(count + 1.0) * prob).floor());
    loop {
        let u = g.uniform_f64() - 0.5;
        let mut v = g.uniform_f64();
        let us = 0.5 - u.abs();
        let k = s(((2.0 * a / us + b) * u + c).floor());
        if k < 0.0 || k > count {
            continue;
        }
        if us >= 0.07 && v <= v_r {
            return k;
        }
        v = (v * alpha / (a / (us * us) + b)).ln();
        let upperbound = (m + 0.5) * ((m + 1.0) / (r * (count - m + 1.0))).ln()
            + (count + 1.0) * ((count - m + 1.0) / (count - k + 1.0)).ln()
            + (k + 0.5) * (r * (count - k + 1.0) / (k + 1.0)).ln()
            + stirling_approx_tail(m)
            + stirling_approx_tail(count - m)
            - stirling_approx_tail(k)
            - stirling_approx_tail(count - k);
        if v <= upperbound {
            return k;
        }
    }
}

/// ATen's `sample_binomial`: BTRS when the mean (of the rarer outcome) is 10 or more, else
/// inversion; NaN for a NaN probability.
fn sample_binomial(count: f64, prob: f64, single: bool, g: &mut Generator) -> f64 {
    if count <= 0.0 || prob <= 0.0 {
        0.0
    } else if prob >= 1.0 {
        count
    } else if prob <= 0.5 {
        if to_scalar(count * prob, single) >= 10.0 {
            btrs(count, prob, single, g)
        } else {
            binomial_inversion(count, prob, single, g)
        }
    } else if prob > 0.5 {
        let q = to_scalar(1.0 - prob, single);
        if to_scalar(count * q, single) >= 10.0 {
            count - btrs(count, q, single, g)
        } else {
            count - binomial_inversion(count, q, single, g)
        }
    } else {
        f64::NAN
    }
}

/// `binomial(count, prob)`: one draw per element of `count` (`prob` broadcast to its shape,
/// both of one floating dtype).
fn binomial(args: &mut Args<'_>) -> R {
    let count = args.tensor(0)?;
    let prob = args.tensor(1)?;
    let gen = args.generator(2)?;
    if !count.dtype().is_floating_point() || !prob.dtype().is_floating_point() {
        let (argument, got) = if count.dtype().is_floating_point() {
            ("prob", prob.dtype())
        } else {
            ("count", count.dtype())
        };
        return Err(wrong_dtype(
            "binomial",
            argument,
            "a floating-point tensor",
            got,
        ));
    }
    if count.dtype() != prob.dtype() {
        return Err(TensorError::DTypeMismatch {
            expected: count.dtype(),
            got: prob.dtype(),
        }
        .into());
    }
    let single = check_float_or_double("binomial_cpu", count.dtype())?;
    let probs = expand_to(&prob, count.shape())?
        .contiguous()?
        .to_vec::<f64>()?;
    let counts = count.contiguous()?.to_vec::<f64>()?;
    if let Some(n) = counts.iter().find(|n| n.is_nan() || n.is_infinite()) {
        return Err(invalid_argument(
            "binomial",
            "count",
            "must be finite (PyTorch's sampler never returns for it)",
            n,
        ));
    }
    let mut g = gen.lock();
    let draws: Vec<f64> = counts
        .iter()
        .zip(&probs)
        .map(|(&n, &p)| to_scalar(sample_binomial(n, p, single, &mut g), single))
        .collect();
    drop(g);
    Ok(IValue::Tensor(
        Tensor::from_vec(draws, count.shape())?.to_dtype(count.dtype())?,
    ))
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::_standard_gamma", standard_gamma);
    r.add("aten::_sample_dirichlet", sample_dirichlet);
    r.add("aten::binomial", binomial);
}
