//! The `special_*_polynomial_*` operators: Chebyshev (T, U, V, W and their shifted forms on
//! [0, 1]), Hermite (physicists' H, probabilists' He), Laguerre L and Legendre P, evaluated at `x`
//! for the integer degree `n`.
//!
//! Each operator has three overloads — `(Tensor x, Tensor n)`, `.x_scalar` and `.n_scalar` —
//! that broadcast and promote as a binary floating op (integral and bool inputs compute in
//! float32). Every formula follows ATen's `native/Math.h` branch for branch (the closed forms it
//! switches to for large `n` inside the domain, the endpoint values, the early stop once the
//! recurrence turns NaN, Hermite's NaN above degree 128 in float32 and 512 in float64) and runs
//! in the result's own precision, so float32 results round as PyTorch's do.

use super::kernels::map::map_binary;
use super::kernels::operand::{common_dtype, float_dtype, Operand};
use super::kernels::{cpu_kernel_name, not_implemented_for};
use super::{Args, Registry};
use crate::tensor::{DType, Element};
use crate::values::IValue;
use num_traits::Float;

/// The float types the polynomials are defined for (ATen dispatches float and double only).
trait PolyFloat: Float + Element {}
impl PolyFloat for f32 {}
impl PolyFloat for f64 {}

/// `static_cast<int64_t>(n)` as x86 evaluates it: NaN, infinities and out-of-range values give
/// `i64::MIN`, which every polynomial maps to 0 (its `n < 0` branch).
fn degree<T: PolyFloat>(n: T) -> i64 {
    let limit = T::from_f64(9.223_372_036_854_776e18);
    if n.is_finite() && n < limit && n >= -limit {
        Element::to_i64(n.trunc())
    } else {
        i64::MIN
    }
}

fn int<T: PolyFloat>(k: i64) -> T {
    T::from_i64(k)
}

fn two<T: PolyFloat>() -> T {
    T::one() + T::one()
}

fn half<T: PolyFloat>() -> T {
    T::from_f64(0.5)
}

/// The three-term recurrence `r = c * q - p` the Chebyshev kinds share, from `T_1`-like `q`.
fn chebyshev_recurrence<T: PolyFloat>(c: T, first: T, n: i64) -> T {
    let (mut p, mut q, mut r) = (T::one(), first, first);
    let mut k = 2;
    while k <= n && !q.is_nan() {
        r = c * q - p;
        p = q;
        q = r;
        k += 1;
    }
    r
}

fn chebyshev_t<T: PolyFloat>(x: T, n: i64) -> T {
    if n < 0 {
        return T::zero();
    }
    if x.abs() == T::one() {
        return if x > T::zero() || n % 2 == 0 {
            T::one()
        } else {
            -T::one()
        };
    }
    if n > 6 && x.abs() < T::one() {
        return (int::<T>(n) * x.acos()).cos();
    }
    match n {
        0 => T::one(),
        1 => x,
        _ => chebyshev_recurrence(x + x, x, n),
    }
}

fn chebyshev_u<T: PolyFloat>(x: T, n: i64) -> T {
    if n < 0 {
        return T::zero();
    }
    if x.abs() == T::one() {
        return if x > T::zero() || n % 2 == 0 {
            int(n + 1)
        } else {
            int(-(n + 1))
        };
    }
    if n > 8 && x.abs() < T::one() {
        let theta = x.acos();
        if theta.sin() != T::zero() {
            return (int::<T>(n + 1) * theta).sin() / theta.sin();
        }
        return int::<T>(n + 1) * (int::<T>(n + 1) * theta).cos() / x;
    }
    match n {
        0 => T::one(),
        1 => x + x,
        _ => chebyshev_recurrence(x + x, x + x, n),
    }
}

fn chebyshev_v<T: PolyFloat>(x: T, n: i64) -> T {
    if n < 0 {
        return T::zero();
    }
    let odd_signed = |n: i64| {
        if n % 2 == 0 {
            int(n + n + 1)
        } else {
            int(-(n + n + 1))
        }
    };
    if x.abs() == T::one() {
        if x > T::zero() {
            return T::one();
        }
        return odd_signed(n);
    }
    if n > 8 && x.abs() < T::one() {
        let theta = x.acos();
        if (theta / two()).sin() != T::one() {
            return ((int::<T>(n) + half()) * theta).cos() / (theta / two()).cos();
        }
        return odd_signed(n);
    }
    match n {
        0 => T::one(),
        1 => x + x - T::one(),
        _ => chebyshev_recurrence(x + x, x + x - T::one(), n),
    }
}

fn chebyshev_w<T: PolyFloat>(x: T, n: i64) -> T {
    if n < 0 {
        return T::zero();
    }
    let at_minus_one = |n: i64| if n % 2 == 0 { T::one() } else { -T::one() };
    if x.abs() == T::one() {
        if x > T::zero() {
            return int(n + n + 1);
        }
        return at_minus_one(n);
    }
    if n > 8 && x.abs() < T::one() {
        let theta = x.acos();
        if (theta / two()).cos() != T::one() {
            return ((int::<T>(n) + half()) * theta).sin() / (theta / two()).sin();
        }
        if x > T::zero() {
            return int(n + n + 1);
        }
        return at_minus_one(n);
    }
    match n {
        0 => T::one(),
        1 => x + x + T::one(),
        _ => chebyshev_recurrence(x + x, x + x + T::one(), n),
    }
}

fn shifted_chebyshev_t<T: PolyFloat>(x: T, n: i64) -> T {
    if n < 0 {
        return T::zero();
    }
    if x == T::one() {
        return T::one();
    }
    if x == T::zero() {
        return if n % 2 == 0 { T::one() } else { -T::one() };
    }
    let y = x + x - T::one();
    if n > 6 && y.abs() < T::one() {
        return (int::<T>(n) * y.acos()).cos();
    }
    match n {
        0 => T::one(),
        1 => y,
        _ => chebyshev_recurrence(y + y, y, n),
    }
}

fn shifted_chebyshev_u<T: PolyFloat>(x: T, n: i64) -> T {
    if n < 0 {
        return T::zero();
    }
    if x == T::one() {
        return int(n + 1);
    }
    if x == T::zero() {
        return if n % 2 == 0 {
            int(n + 1)
        } else {
            int(-(n + 1))
        };
    }
    let y = x + x - T::one();
    if n > 6 && y.abs() < T::one() {
        let theta = y.acos();
        if theta.sin() != T::zero() {
            return (int::<T>(n + 1) * theta).sin() / theta.sin();
        }
        return int::<T>(n + 1) * (int::<T>(n + 1) * theta).cos() / y;
    }
    match n {
        0 => T::one(),
        1 => y + y,
        _ => chebyshev_recurrence(y + y, y + y, n),
    }
}

fn shifted_chebyshev_v<T: PolyFloat>(x: T, n: i64) -> T {
    if n < 0 {
        return T::zero();
    }
    let odd_signed = |n: i64| {
        if n % 2 == 0 {
            int(n + n + 1)
        } else {
            int(-(n + n + 1))
        }
    };
    if x == T::one() {
        return T::one();
    }
    if x == T::zero() {
        return odd_signed(n);
    }
    let y = x + x - T::one();
    if n > 6 && y.abs() < T::one() {
        let theta = y.acos();
        if (theta / two()).sin() != T::one() {
            return ((int::<T>(n) + half()) * theta).cos() / (theta / two()).cos();
        }
        return odd_signed(n);
    }
    match n {
        0 => T::one(),
        1 => y + y - T::one(),
        _ => chebyshev_recurrence(y + y, y + y - T::one(), n),
    }
}

fn shifted_chebyshev_w<T: PolyFloat>(x: T, n: i64) -> T {
    if n < 0 {
        return T::zero();
    }
    let at_zero = |n: i64| if n % 2 == 0 { T::one() } else { -T::one() };
    if x == T::one() {
        return int(n + n + 1);
    }
    if x == T::zero() {
        return at_zero(n);
    }
    let y = x + x - T::one();
    // ATen switches to the closed form from degree 5 here (6 for V), not 9 as unshifted W does.
    if n > 4 && y.abs() < T::one() {
        let theta = y.acos();
        if (theta / two()).cos() != T::one() {
            return ((int::<T>(n) + half()) * theta).sin() / (theta / two()).sin();
        }
        return at_zero(n);
    }
    match n {
        0 => T::one(),
        1 => y + y + T::one(),
        _ => chebyshev_recurrence(y + y, y + y + T::one(), n),
    }
}

/// ATen's `getHermitianLimit`: the recurrence overflows past these degrees, so it returns NaN.
fn hermite_limit<T: PolyFloat>() -> i64 {
    if T::DTYPE == DType::Float32 {
        128
    } else {
        512
    }
}

fn hermite_h<T: PolyFloat>(x: T, n: i64) -> T {
    match n {
        n if n < 0 => return T::zero(),
        0 => return T::one(),
        1 => return x + x,
        n if n > hermite_limit::<T>() => return T::nan(),
        _ => {}
    }
    let (mut p, mut q, mut r) = (T::one(), x + x, T::zero());
    let mut k = 2;
    while k < n + n {
        r = (x + x) * q - int::<T>(k) * p;
        p = q;
        q = r;
        k += 2;
    }
    r
}

fn hermite_he<T: PolyFloat>(x: T, n: i64) -> T {
    match n {
        n if n < 0 => return T::zero(),
        0 => return T::one(),
        1 => return x,
        n if n > hermite_limit::<T>() => return T::nan(),
        _ => {}
    }
    let (mut p, mut q, mut r) = (T::one(), x, x);
    for k in 1..n {
        r = x * q - int::<T>(k) * p;
        p = q;
        q = r;
    }
    r
}

fn laguerre_l<T: PolyFloat>(x: T, n: i64) -> T {
    if n < 0 {
        return T::zero();
    }
    if x.abs() == T::zero() {
        return T::one();
    }
    match n {
        0 => return T::one(),
        1 => return T::one() - x,
        _ => {}
    }
    let (mut p, mut q, mut r) = (T::one(), T::one() - x, T::one() - x);
    let mut k = 1;
    while k < n && !q.is_nan() {
        r = ((int::<T>(k + k) + (T::one() - x)) * q - int::<T>(k) * p) / int::<T>(k + 1);
        p = q;
        q = r;
        k += 1;
    }
    r
}

fn legendre_p<T: PolyFloat>(x: T, n: i64) -> T {
    if n < 0 {
        return T::zero();
    }
    if x.abs() == T::one() {
        return if x > T::zero() || n % 2 == 0 {
            T::one()
        } else {
            -T::one()
        };
    }
    match n {
        0 => return T::one(),
        1 => return x,
        _ => {}
    }
    let (mut p, mut q, mut r) = (T::one(), x, x);
    let mut k = 1;
    while k < n && !q.is_nan() {
        r = (int::<T>(k + k + 1) * x * q - int::<T>(k) * p) / int::<T>(k + 1);
        p = q;
        q = r;
        k += 1;
    }
    r
}

/// Evaluate a polynomial elementwise: arguments 0 (`x`) and 1 (`n`) are tensors or scalars,
/// broadcast, and cast to their floating common dtype before `n` is truncated to a degree.
fn evaluate(
    args: &Args<'_>,
    single: fn(f32, i64) -> f32,
    double: fn(f64, i64) -> f64,
) -> crate::Result<IValue> {
    let (x, n) = (Operand::arg(args, 0)?, Operand::arg(args, 1)?);
    let dtype = float_dtype(common_dtype(&[&x, &n]));
    let out = match dtype {
        DType::Float32 => {
            let (x, n) = (x.as_tensor_of(dtype)?, n.as_tensor_of(dtype)?);
            map_binary::<f32, f32, f32, _>(&x, &n, |x, n| single(x, degree(n)))?
        }
        DType::Float64 => {
            let (x, n) = (x.as_tensor_of(dtype)?, n.as_tensor_of(dtype)?);
            map_binary::<f64, f64, f64, _>(&x, &n, |x, n| double(x, degree(n)))?
        }
        other => {
            // PyTorch's message: `"chebyshev_polynomial_t_cpu" not implemented for 'Half'`
            return Err(not_implemented_for(cpu_kernel_name(args.op), other));
        }
    };
    Ok(IValue::Tensor(out))
}

const OVERLOADS: &[&str] = &["", "x_scalar", "n_scalar"];

pub fn register(r: &mut Registry) {
    r.add_overloads("aten::special_chebyshev_polynomial_t", OVERLOADS, |a| {
        evaluate(a, chebyshev_t, chebyshev_t)
    });
    r.add_overloads("aten::special_chebyshev_polynomial_u", OVERLOADS, |a| {
        evaluate(a, chebyshev_u, chebyshev_u)
    });
    r.add_overloads("aten::special_chebyshev_polynomial_v", OVERLOADS, |a| {
        evaluate(a, chebyshev_v, chebyshev_v)
    });
    r.add_overloads("aten::special_chebyshev_polynomial_w", OVERLOADS, |a| {
        evaluate(a, chebyshev_w, chebyshev_w)
    });
    r.add_overloads(
        "aten::special_shifted_chebyshev_polynomial_t",
        OVERLOADS,
        |a| evaluate(a, shifted_chebyshev_t, shifted_chebyshev_t),
    );
    r.add_overloads(
        "aten::special_shifted_chebyshev_polynomial_u",
        OVERLOADS,
        |a| evaluate(a, shifted_chebyshev_u, shifted_chebyshev_u),
    );
    r.add_overloads(
        "aten::special_shifted_chebyshev_polynomial_v",
        OVERLOADS,
        |a| evaluate(a, shifted_chebyshev_v, shifted_chebyshev_v),
    );
    r.add_overloads(
        "aten::special_shifted_chebyshev_polynomial_w",
        OVERLOADS,
        |a| evaluate(a, shifted_chebyshev_w, shifted_chebyshev_w),
    );
    r.add_overloads("aten::special_hermite_polynomial_h", OVERLOADS, |a| {
        evaluate(a, hermite_h, hermite_h)
    });
    r.add_overloads("aten::special_hermite_polynomial_he", OVERLOADS, |a| {
        evaluate(a, hermite_he, hermite_he)
    });
    r.add_overloads("aten::special_laguerre_polynomial_l", OVERLOADS, |a| {
        evaluate(a, laguerre_l, laguerre_l)
    });
    r.add_overloads("aten::special_legendre_polynomial_p", OVERLOADS, |a| {
        evaluate(a, legendre_p, legendre_p)
    });
}
