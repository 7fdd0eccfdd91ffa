//! Special functions (gamma family, Bessel, erf variants, polygamma, ...) and their
//! `special_*` aliases, computed in f64.

use super::kernels::map::map_binary;
use super::kernels::operand::{inplace_result, Operand};
use super::kernels::special::SpecialFn;
use super::kernels::via_f64::{float_binary_op, t, vals};
use super::{Args, Registry};
use crate::float_unary;
use crate::ops::kernels::{invalid_argument, not_implemented_for, wrong_dtype};
use crate::tensor::TensorError;
use crate::tensor::{DType, Tensor};
use crate::values::IValue;

type R = crate::Result<IValue>;
use crate::ops::kernels::operand::{float_unary_kernels, inplace_of};

/// Digamma (psi) by recurrence up to x >= 6 and the asymptotic series; reflection for x < 0.
pub(super) fn digamma(mut x: f64) -> f64 {
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

/// ATen's `standard_gamma_grad_one` (Distributions.h, computed in double on CPU): the
/// reparameterized gradient `-(d/dalpha cdf(x; alpha)) / pdf(x; alpha)` of a Gamma(alpha) draw
/// `x`: a Taylor series for x < 0.8, Rice's saddle-point expansion for alpha > 8, else a
/// bivariate rational approximation. The float literals are C++ `float`s, as in ATen.
pub(super) fn standard_gamma_grad_one(alpha: f64, x: f64) -> f64 {
    let f = |v: f32| v as f64;
    if x < f(0.8) {
        let (mut numer, mut denom) = (1.0f64, alpha);
        let mut series1 = numer / denom;
        let mut series2 = numer / (denom * denom);
        for i in 1..=5 {
            numer *= -x / i as f64;
            denom += 1.0;
            series1 += numer / denom;
            series2 += numer / (denom * denom);
        }
        let pow_x_alpha = x.powf(alpha);
        let gamma_pdf = x.powf(alpha - 1.0) * (-x).exp();
        let gamma_cdf = pow_x_alpha * series1;
        let gamma_cdf_alpha = (x.ln() - digamma(alpha)) * gamma_cdf - pow_x_alpha * series2;
        let result = -gamma_cdf_alpha / gamma_pdf;
        return if result.is_nan() { 0.0 } else { result };
    }
    if alpha > 8.0 {
        if f(0.9) * alpha <= x && x <= f(1.1) * alpha {
            let numer_1 = 1.0 + 24.0 * alpha * (1.0 + 12.0 * alpha);
            let numer_2 = 1440.0 * (alpha * alpha) + 6.0 * x * (53.0 - 120.0 * x)
                - 65.0 * x * x / alpha
                + alpha * (107.0 + 3600.0 * x);
            let denom = 1244160.0 * (alpha * alpha) * (alpha * alpha);
            return numer_1 * numer_2 / denom;
        }
        let denom = (8.0 * alpha).sqrt();
        let term2 = denom / (alpha - x);
        let term3 = (x - alpha - alpha * (x / alpha).ln()).powf(-1.5);
        let term23 = if x < alpha {
            term2 - term3
        } else {
            term2 + term3
        };
        let term1 = (x / alpha).ln() * term23
            - (2.0 / alpha).sqrt() * (alpha + x) / ((alpha - x) * (alpha - x));
        let stirling = 1.0 + 1.0 / (12.0 * alpha) * (1.0 + 1.0 / (24.0 * alpha));
        let numer = x * term1;
        return -stirling * numer / denom;
    }
    let u = (x / alpha).ln();
    let v = alpha.ln();
    const COEF_UV: [[f64; 8]; 3] = [
        [
            0.16009398,
            -0.094634809,
            0.025146376,
            -0.0030648343,
            1.0,
            0.32668115,
            0.10406089,
            0.0014179084,
        ],
        [
            0.53487893,
            0.1298071,
            0.065735949,
            -0.0015649758,
            0.16639465,
            0.020070113,
            -0.0035938915,
            -0.00058392623,
        ],
        [
            0.040121004,
            -0.0065914022,
            -0.0026286047,
            -0.0013441777,
            0.017050642,
            -0.0021309326,
            0.00085092367,
            -1.5247877e-07,
        ],
    ];
    let c: Vec<f64> = (0..8)
        .map(|i| COEF_UV[0][i] + u * (COEF_UV[1][i] + u * COEF_UV[2][i]))
        .collect();
    let p = c[0] + v * (c[1] + v * (c[2] + v * c[3]));
    let q = c[4] + v * (c[5] + v * (c[6] + v * c[7]));
    (p / q).exp()
}

/// ATen's `_beta_grad_alpha_small`: the Beta(alpha, beta) gradient in alpha near x = 0.
fn beta_grad_alpha_small(x: f64, alpha: f64, beta: f64) -> f64 {
    let factor = digamma(alpha) - digamma(alpha + beta) - x.ln();
    let mut numer = 1.0;
    let mut series = numer / alpha * (factor + 1.0 / alpha);
    for i in 1..=10 {
        let i = i as f64;
        numer *= (i - beta) * x / i;
        let denom = alpha + i;
        series += numer / denom * (factor + 1.0 / denom);
    }
    let result = x * (1.0 - x).powf(-beta) * series;
    if result.is_nan() {
        0.0
    } else {
        result
    }
}

/// ATen's `_beta_grad_beta_small`: the Beta(alpha, beta) gradient in beta near x = 0.
fn beta_grad_beta_small(x: f64, alpha: f64, beta: f64) -> f64 {
    let factor = digamma(alpha + beta) - digamma(beta);
    let (mut numer, mut betas, mut dbetas, mut series) = (1.0, 1.0, 0.0, factor / alpha);
    for i in 1..=8 {
        let i = i as f64;
        numer *= -x / i;
        dbetas = dbetas * (beta - i) + betas;
        betas *= beta - i;
        series += numer / (alpha + i) * (dbetas + factor * betas);
    }
    let result = -(1.0 - x).powf(1.0 - beta) * series;
    if result.is_nan() {
        0.0
    } else {
        result
    }
}

/// ATen's `_beta_grad_alpha_mid`: Rice's saddle-point expansion for large alpha and beta.
fn beta_grad_alpha_mid(x: f64, alpha: f64, beta: f64) -> f64 {
    let total = alpha + beta;
    let mean = alpha / total;
    let std = (alpha * beta / (total + 1.0)).sqrt() / total;
    if mean - 0.1 * std <= x && x <= mean + 0.1 * std {
        // avoid the singularity at x = mean
        let poly = 47.0 * x * (beta * beta) * (beta * beta)
            + alpha
                * ((43.0 + 20.0 * (16.0 + 27.0 * beta) * x) * (beta * beta) * beta
                    + alpha
                        * (3.0 * (59.0 + 180.0 * beta - 90.0 * x) * (beta * beta)
                            + alpha
                                * ((453.0 + 1620.0 * beta * (1.0 - x) - 455.0 * x) * beta
                                    + alpha * (8.0 * (1.0 - x) * (135.0 * beta - 11.0)))));
        let prefactor_num = (1.0 + 12.0 * alpha) * (1.0 + 12.0 * beta) / (total * total);
        let prefactor_den = 12960.0 * alpha * alpha * alpha * beta * beta * (1.0 + 12.0 * total);
        return prefactor_num / (1.0 - x) * poly / prefactor_den;
    }
    let prefactor = -x / (2.0 * alpha * beta / total).sqrt();
    let stirling = (1.0 + 1.0 / (12.0 * alpha) + 1.0 / (288.0 * alpha * alpha))
        * (1.0 + 1.0 / (12.0 * beta) + 1.0 / (288.0 * beta * beta))
        / (1.0 + 1.0 / (12.0 * total) + 1.0 / (288.0 * total * total));
    let term1_num =
        2.0 * (alpha * alpha) * (x - 1.0) + alpha * beta * (x - 1.0) - x * (beta * beta);
    let axbx = alpha * (x - 1.0) + beta * x;
    let term1_den = (2.0 * alpha / beta).sqrt() * total.powf(1.5) * axbx * axbx;
    let term1 = term1_num / term1_den;
    let term2 = 0.5 * (alpha / (total * x)).ln();
    let term3_num = (8.0 * alpha * beta / total).sqrt();
    let term3_den = beta * x + alpha * (x - 1.0);
    let term3 = term3_num / term3_den;
    let term4_base = beta * (beta / (total * (1.0 - x))).ln() + alpha * (alpha / (total * x)).ln();
    let term4 = term4_base.powf(-1.5);
    let term1234 = term1 + term2 * (term3 + if x < mean { term4 } else { -term4 });
    stirling * prefactor * term1234
}

/// ATen's `dirichlet_grad_one(x, alpha, total)` (Distributions.h): the scaled reparameterized
/// gradient of a Beta(alpha, total - alpha) draw, by the same four approximations.
pub(super) fn dirichlet_grad_one(x: f64, alpha: f64, total: f64) -> f64 {
    let beta = total - alpha;
    let boundary = total * x * (1.0 - x);
    if x <= 0.5 && boundary < 2.5 {
        return beta_grad_alpha_small(x, alpha, beta);
    }
    if x >= 0.5 && boundary < 0.75 {
        return -beta_grad_beta_small(1.0 - x, beta, alpha);
    }
    if alpha > 6.0 && beta > 6.0 {
        return beta_grad_alpha_mid(x, alpha, beta);
    }
    // a rational correction to an analytic approximation: C[p or q][u power][a power][b power]
    const C: [[[[f64; 4]; 3]; 3]; 2] = [
        [
            [
                [1.003668233, -0.01061107488, -0.0657888334, 0.01201642863],
                [0.6336835991, -0.3557432599, 0.05486251648, -0.001465281033],
                [
                    -0.03276231906,
                    0.004474107445,
                    0.002429354597,
                    -0.0001557569013,
                ],
            ],
            [
                [0.221950385, -0.3187676331, 0.01799915743, 0.01074823814],
                [-0.2951249643, 0.06219954479, 0.01535556598, 0.001550077057],
                [
                    0.02155310298,
                    0.004170831599,
                    0.001292462449,
                    6.976601077e-05,
                ],
            ],
            [
                [
                    -0.05980841433,
                    0.008441916499,
                    0.01085618172,
                    0.002319392565,
                ],
                [
                    0.02911413504,
                    0.01400243777,
                    -0.002721828457,
                    0.000751041181,
                ],
                [
                    0.005900514878,
                    -0.001936558688,
                    -9.495446725e-06,
                    5.385558597e-05,
                ],
            ],
        ],
        [
            [
                [1.0, -0.02924021934, -0.04438342661, 0.007285809825],
                [0.6357567472, -0.3473456711, 0.05454656494, -0.002407477521],
                [
                    -0.03301322327,
                    0.004845219414,
                    0.00231480583,
                    -0.0002307248149,
                ],
            ],
            [
                [0.5925320577, -0.1757678135, 0.01505928619, 0.000564515273],
                [
                    0.1014815858,
                    -0.06589186703,
                    0.01272886114,
                    -0.0007316646956,
                ],
                [
                    -0.007258481865,
                    0.001096195486,
                    0.0003934994223,
                    -4.12701925e-05,
                ],
            ],
            [
                [
                    0.06469649321,
                    -0.0236701437,
                    0.002902096474,
                    -5.896963079e-05,
                ],
                [
                    0.001925008108,
                    -0.002869809258,
                    0.0008000589141,
                    -6.063713228e-05,
                ],
                [
                    -0.0003477407336,
                    6.959756487e-05,
                    1.097287507e-05,
                    -1.650964693e-06,
                ],
            ],
        ],
    ];
    let u = x.ln();
    let a = alpha.ln() - u;
    let b = total.ln() - a;
    let pow_u = [1.0, u, u * u];
    let pow_a = [1.0, a, a * a];
    let (mut p, mut q) = (0.0, 0.0);
    for i in 0..3 {
        for j in 0..3 {
            let ua = pow_u[i] * pow_a[j];
            let poly = |c: &[f64; 4]| c[0] + b * (c[1] + b * (c[2] + b * c[3]));
            p += ua * poly(&C[0][i][j]);
            q += ua * poly(&C[1][i][j]);
        }
    }
    let approx = x * (digamma(total) - digamma(alpha)) / beta;
    p / q * approx
}

/// `_dirichlet_grad(x, alpha, total)`: elementwise over x's shape (alpha and total broadcast
/// to it), one floating dtype for all three as ATen's kernel requires.
fn dirichlet_grad(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let dtype = x.dtype();
    if !matches!(dtype, DType::Float32 | DType::Float64) {
        return Err(not_implemented_for("_dirichlet_grad_cpu", dtype));
    }
    let mut operands = Vec::with_capacity(2);
    for i in [1, 2] {
        let t = args.tensor(i)?;
        if t.dtype() != dtype {
            return Err(TensorError::DTypeMismatch {
                expected: dtype,
                got: t.dtype(),
            }
            .into());
        }
        operands.push(
            super::shape::expand_to(&t, x.shape())?
                .contiguous()?
                .to_vec::<f64>()?,
        );
    }
    let xs = x.contiguous()?.to_vec::<f64>()?;
    let out: Vec<f64> = xs
        .iter()
        .zip(&operands[0])
        .zip(&operands[1])
        .map(|((&x, &alpha), &total)| dirichlet_grad_one(x, alpha, total))
        .collect();
    t(Tensor::from_vec(out, x.shape())?.to_dtype(dtype)?)
}

/// `_standard_gamma_grad(self = alpha, output = x)`.
fn standard_gamma_grad(args: &mut Args<'_>) -> R {
    t(binary_kernel(args, standard_gamma_grad_one)?)
}

/// Power series of the modified Bessel functions I0 (order 0) and I1 (order 1).
pub(super) fn bessel_i(order: u32, x: f64) -> f64 {
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
pub(super) fn bessel_ie(order: u32, x: f64) -> f64 {
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
pub(super) fn erfcx(x: f64) -> f64 {
    if x < 25.0 {
        return (x * x).exp() * libm::erfc(x);
    }
    // Asymptotic series: 1/(x sqrt(pi)) * (1 - 1/(2x^2) + 3/(4x^4) - 15/(8x^6)).
    let x2 = x * x;
    (1.0 - 0.5 / x2 + 0.75 / (x2 * x2) - 1.875 / (x2 * x2 * x2)) / (x * std::f64::consts::PI.sqrt())
}

pub(super) fn ndtr(x: f64) -> f64 {
    0.5 * libm::erfc(-x / std::f64::consts::SQRT_2)
}

pub(super) fn log_ndtr(x: f64) -> f64 {
    let t = x / std::f64::consts::SQRT_2;
    if x < -1.0 {
        // log(erfc(-t)/2) = log(erfcx(-t)/2) - t^2, stable in the far tail.
        (erfcx(-t) / 2.0).ln() - t * t
    } else {
        (-0.5 * libm::erfc(t)).ln_1p()
    }
}

pub(super) fn ndtri(p: f64) -> f64 {
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

pub(super) fn entr(x: f64) -> f64 {
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

// The `special_*` names have no in-place twin: their `_` registrations are skipped.
float_unary_kernels! {
    pub(super) register_unary, add_if_defined;
    pub(super) lgamma, lgamma_, "lgamma" => |v| libm::lgamma(v as f64) as F;
    pub(super) digamma_k, digamma_, "digamma" => |v| digamma(v as f64) as F;
    pub(super) i0e, i0e_, "special_i0e" => |v| bessel_ie(0, v as f64) as F;
    pub(super) i1, i1_, "special_i1" => |v| bessel_i(1, v as f64) as F;
    pub(super) i1e, i1e_, "special_i1e" => |v| bessel_ie(1, v as f64) as F;
    pub(super) erfcx_k, erfcx_, "special_erfcx" => |v| erfcx(v as f64) as F;
    pub(super) ndtr_k, ndtr_, "special_ndtr" => |v| ndtr(v as f64) as F;
    pub(super) log_ndtr_k, log_ndtr_, "special_log_ndtr" => |v| log_ndtr(v as f64) as F;
    pub(super) ndtri_k, ndtri_, "special_ndtri" => |v| ndtri(v as f64) as F;
    pub(super) entr_k, entr_, "special_entr" => |v| entr(v as f64) as F;
}

/// `polygamma(n, self)`: digamma for n = 0, otherwise `(-1)^(n+1) n! zeta(n+1, x)`.
pub(super) fn polygamma(args: &mut Args<'_>) -> R {
    let n = args.int(0)?;
    let x = args.tensor(1)?;
    polygamma_of(n, &x)
}
pub(super) fn polygamma_of(n: i64, x: &Tensor) -> R {
    if n < 0 {
        return Err(invalid_argument(
            "polygamma",
            "n",
            "must be non-negative",
            n,
        ));
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
        |v: F| (sign * fact * zeta(nf + 1.0, v as f64)) as F
    )?)
}
/// `polygamma_(self, n)`.
pub(super) fn polygamma_(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let n = args.int(1)?;
    let r = polygamma_of(n, &x)?;
    inplace_result(args, r)
}

/// The Hurwitz zeta function `sum_k (k + q)^-x`, ported from ATen's `zeta` (Math.h, after
/// Cephes): direct summation until the terms drop below machine epsilon, else an
/// Euler-Maclaurin tail. Infinite at x = 1 and at non-positive integral q; NaN for x < 1 and
/// for negative q with non-integral x. Computed in f64, as ATen's CPU kernels accumulate.
pub(super) fn zeta(x: f64, q: f64) -> f64 {
    const MACHEP: f64 = 1.110_223_024_625_156_5e-16;
    // (2k)! / B_2k
    const A: [f64; 12] = [
        12.0,
        -720.0,
        30240.0,
        -1209600.0,
        47900160.0,
        -1.892_437_580_318_379_2e9,
        7.472_424_96e10,
        -2.950_130_727_918_164e12,
        1.164_678_281_435_006_7e14,
        -4.597_978_722_407_473e15,
        1.815_210_540_194_354_7e17,
        -7.166_165_256_175_667e18,
    ];
    if x == 1.0 {
        return f64::INFINITY;
    }
    if x < 1.0 {
        return f64::NAN;
    }
    if q <= 0.0 {
        if q == q.floor() {
            return f64::INFINITY;
        }
        if x != x.floor() {
            return f64::NAN;
        }
    }
    let mut s = q.powf(-x);
    let mut a = q;
    let mut i = 0;
    let mut b = 0.0;
    while i < 9 || a <= 9.0 {
        i += 1;
        a += 1.0;
        b = a.powf(-x);
        s += b;
        if -MACHEP * s < b && b < MACHEP * s {
            return s;
        }
    }
    let w = a;
    s += b * w / (x - 1.0);
    s -= 0.5 * b;
    let mut a = 1.0;
    let mut k = 0.0;
    for div in A {
        a *= x + k;
        b /= w;
        let t = a * b / div;
        s += t;
        if (t / s).abs() < MACHEP {
            return s;
        }
        k += 1.0;
        a *= x + k;
        b /= w;
        k += 1.0;
    }
    s
}

/// `special_zeta(self, other)`: [`zeta`] of `x = self`, `q = other` (either may be a number).
pub(super) fn special_zeta(args: &mut Args<'_>) -> R {
    t(binary_kernel(args, zeta)?)
}

/// `mvlgamma(self, p)`: `sum_{i<p} lgamma(x - i/2) + p(p-1)/4 log(pi)` (no domain check, as PyTorch).
pub(super) fn mvlgamma(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let p = args.int(1)?;
    if p < 1 {
        return Err(invalid_argument(
            "mvlgamma",
            "p",
            "must be greater than or equal to 1",
            p,
        ));
    }
    if !x.dtype().is_floating_point() {
        return Err(wrong_dtype(
            "mvlgamma",
            "input",
            "floating-point",
            x.dtype(),
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
inplace_of! { pub(super) mvlgamma_ => mvlgamma; }

/// `positive(self)`: self, except that bool tensors are refused as in PyTorch.
pub(super) fn positive(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    if x.dtype() == DType::Bool {
        return Err(wrong_dtype(
            "positive (the + operator)",
            "input",
            "not bool",
            x.dtype(),
        ));
    }
    t(x)
}

pub(super) fn signbit(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    if x.dtype().is_complex() {
        return Err(wrong_dtype("signbit", "input", "real", x.dtype()));
    }
    let v: Vec<bool> = vals(&x)?.iter().map(|v| v.is_sign_negative()).collect();
    t(Tensor::from_vec(v, x.shape())?)
}

pub(super) fn binary_kernel(
    args: &Args<'_>,
    f: impl Fn(f64, f64) -> f64 + Sync + Send,
) -> crate::Result<Tensor> {
    let (a, b) = (Operand::arg(args, 0)?, Operand::arg(args, 1)?);
    float_binary_op(&a, &b, f)
}

pub(super) fn logaddexp_f(a: f64, b: f64) -> f64 {
    if a.is_infinite() && a == b {
        return a;
    }
    let m = a.max(b);
    m + (-(a - b).abs()).exp().ln_1p()
}
pub(super) fn logaddexp(args: &mut Args<'_>) -> R {
    t(binary_kernel(args, logaddexp_f)?)
}
pub(super) fn logaddexp2(args: &mut Args<'_>) -> R {
    let ln2 = std::f64::consts::LN_2;
    t(binary_kernel(args, |a, b| {
        logaddexp_f(a * ln2, b * ln2) / ln2
    })?)
}
pub(crate) fn xlogy_f(x: f64, y: f64) -> f64 {
    if y.is_nan() {
        f64::NAN
    } else if x == 0.0 {
        0.0
    } else {
        x * y.ln()
    }
}
pub(super) fn xlogy(args: &mut Args<'_>) -> R {
    t(binary_kernel(args, xlogy_f)?)
}
inplace_of! { pub(super) xlogy_ => xlogy; }
/// `special_xlog1py(self, other)`: `x * log1p(y)`, 0 where x == 0.
pub(super) fn xlog1py(args: &mut Args<'_>) -> R {
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
pub(super) fn heaviside(args: &mut Args<'_>) -> R {
    let (x, v) = (args.tensor(0)?, args.tensor(1)?);
    if x.dtype() != v.dtype() {
        return Err(wrong_dtype(
            "heaviside",
            "values",
            format!("{} (self's dtype)", x.dtype()),
            v.dtype(),
        ));
    }
    if x.dtype().is_complex() {
        return Err(wrong_dtype("heaviside", "input", "real", x.dtype()));
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
inplace_of! { pub(super) heaviside_ => heaviside; }

/// Registered after the elementwise families: the `special_*` aliases copy their kernels.
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
    r.add_all(
        &[
            "aten::special_zeta",
            "aten::special_zeta.self_scalar",
            "aten::special_zeta.other_scalar",
        ],
        special_zeta,
    );
    r.add_all(
        &[
            "aten::xlogy.OutTensor",
            "aten::xlogy.OutScalar_Self",
            "aten::xlogy.OutScalar_Other",
        ],
        |a| {
            let r = xlogy(a)?;
            a.write_outs(2, r)
        },
    );
    r.add("aten::_standard_gamma_grad", standard_gamma_grad);
    r.add("aten::_dirichlet_grad", dirichlet_grad);
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

    for (new, old) in [
        ("aten::special_expm1", "aten::expm1"),
        ("aten::special_log1p", "aten::log1p"),
        ("aten::special_exp2", "aten::exp2"),
        ("aten::special_logit", "aten::logit"),
        ("aten::special_round", "aten::round.decimals"),
        ("aten::special_sinc", "aten::sinc"),
        ("aten::special_i0", "aten::i0"),
    ] {
        r.alias(new, old);
    }
}
