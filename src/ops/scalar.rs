//! Builtins on non-tensor values that TorchScript code calls as operators: int/float/bool/complex
//! arithmetic and math, lists, dicts, strings, tuples, and the `prim::` queries on tensors
//! (`prim::dtype`, `prim::device`, ...). Semantics follow PyTorch's `register_prim_ops.cpp`
//! (Python semantics for `//`, `%`, indexing and slicing).
//!
//! Many kernels serve every overload of an operator by looking at the values they get (a list or
//! a dict, an int or a float), so they are registered under each overload name. Bare names that
//! also have tensor overloads are registered only when no other family has claimed them.

use super::{Args, Registry};
use crate::error::RuntimeError;
use crate::tensor::{DType, Scalar, Tensor};
use crate::values::types::Type;
use crate::values::{python_str, Device, Dict, IValue, List, Tuple};
use crate::Error;
use num_complex::Complex64;
use std::cmp::Ordering;

type R = crate::Result<IValue>;

fn err(msg: impl Into<String>) -> Error {
    RuntimeError::Other(msg.into()).into()
}

fn exception(kind: &str, msg: impl Into<String>) -> Error {
    RuntimeError::Exception {
        kind: format!("builtins.{kind}"),
        message: msg.into(),
    }
    .into()
}

// ---------------------------------------------------------------------------------------------
// numbers

#[derive(Clone, Copy, Debug)]
enum Num {
    I(i64),
    F(f64),
    C(Complex64),
}

impl Num {
    fn f(self) -> f64 {
        match self {
            Num::I(i) => i as f64,
            Num::F(f) => f,
            Num::C(c) => c.re,
        }
    }
    fn c(self) -> Complex64 {
        match self {
            Num::C(c) => c,
            n => Complex64::new(n.f(), 0.0),
        }
    }
    fn value(self) -> IValue {
        match self {
            Num::I(i) => IValue::Int(i),
            Num::F(f) => IValue::Double(f),
            Num::C(c) => IValue::Complex(c),
        }
    }
}

fn num_of(v: &IValue) -> Option<Num> {
    Some(match v {
        IValue::Bool(b) => Num::I(*b as i64),
        IValue::Int(i) => Num::I(*i),
        IValue::Double(f) => Num::F(*f),
        IValue::Complex(c) => Num::C(*c),
        IValue::Tensor(t) if t.numel() == 1 => match t.item().ok()? {
            Scalar::Bool(b) => Num::I(b as i64),
            Scalar::Int(i) => Num::I(i),
            Scalar::Float(f) => Num::F(f),
            Scalar::Complex(c) => Num::C(c),
        },
        _ => return None,
    })
}

fn num(a: &Args, i: usize) -> crate::Result<Num> {
    let v = a.get(i)?;
    num_of(v).ok_or_else(|| Error::BadArgument {
        op: a.op.to_string(),
        index: i,
        expected: "a number",
        got: v.kind_name().to_string(),
    })
}

fn binary(
    a: &Args,
    int: impl Fn(i64, i64) -> crate::Result<Num>,
    float: impl Fn(f64, f64) -> crate::Result<f64>,
    complex: impl Fn(Complex64, Complex64) -> crate::Result<Complex64>,
) -> R {
    let (x, y) = (num(a, 0)?, num(a, 1)?);
    Ok(match (x, y) {
        (Num::I(p), Num::I(q)) => int(p, q)?.value(),
        (Num::C(_), _) | (_, Num::C(_)) => IValue::Complex(complex(x.c(), y.c())?),
        _ => IValue::Double(float(x.f(), y.f())?),
    })
}

fn no_complex(op: &'static str) -> impl Fn(Complex64, Complex64) -> crate::Result<Complex64> {
    move |_, _| Err(err(format!("{op} is not defined for complex numbers")))
}

fn add(a: &mut Args) -> R {
    match (a.get(0)?, a.get(1)?) {
        (IValue::String(x), IValue::String(y)) => {
            // a program doubling a string in a loop must hit a limit, not exhaust memory
            crate::tensor::budget::check_alloc(x.len().saturating_add(y.len()))?;
            Ok(IValue::str(format!("{x}{y}")))
        }
        (IValue::List(x), IValue::List(y)) => {
            crate::tensor::budget::check_alloc(
                (x.len().saturating_add(y.len())).saturating_mul(std::mem::size_of::<IValue>()),
            )?;
            let mut items = x.to_vec();
            items.extend(y.to_vec());
            Ok(IValue::List(List::new(x.elem_type().clone(), items)))
        }
        _ => binary(
            a,
            |p, q| Ok(Num::I(p.wrapping_add(q))),
            |p, q| Ok(p + q),
            |p, q| Ok(p + q),
        ),
    }
}
fn sub(a: &mut Args) -> R {
    binary(
        a,
        |p, q| Ok(Num::I(p.wrapping_sub(q))),
        |p, q| Ok(p - q),
        |p, q| Ok(p - q),
    )
}
fn mul(a: &mut Args) -> R {
    match (a.get(0)?, a.get(1)?) {
        (IValue::List(l), n) | (n, IValue::List(l)) => {
            let n = n
                .as_int()
                .ok_or_else(|| err("can only multiply a list by an int"))?;
            let items = l.to_vec();
            let total = items.len().saturating_mul(n.max(0) as usize);
            crate::tensor::budget::check_alloc(
                total.saturating_mul(std::mem::size_of::<IValue>()),
            )?;
            let mut out = Vec::with_capacity(total);
            for _ in 0..n.max(0) {
                out.extend(items.iter().cloned());
            }
            Ok(IValue::List(List::new(l.elem_type().clone(), out)))
        }
        _ => binary(
            a,
            |p, q| Ok(Num::I(p.wrapping_mul(q))),
            |p, q| Ok(p * q),
            |p, q| Ok(p * q),
        ),
    }
}
fn div(a: &mut Args) -> R {
    binary(
        a,
        |p, q| Ok(Num::F(p as f64 / q as f64)),
        |p, q| Ok(p / q),
        |p, q| Ok(complex_div(p, q)),
    )
}

/// Complex division with Smith's scaling, as `c10::complex` does (rounds like PyTorch).
fn complex_div(x: Complex64, y: Complex64) -> Complex64 {
    let (a, b, c, d) = (x.re, x.im, y.re, y.im);
    if c.abs() >= d.abs() {
        if c == 0.0 && d == 0.0 {
            return Complex64::new(a / c.abs(), b / d.abs());
        }
        let rat = d / c;
        let scl = 1.0 / (c + d * rat);
        Complex64::new((a + b * rat) * scl, (b - a * rat) * scl)
    } else {
        let rat = c / d;
        let scl = 1.0 / (d + c * rat);
        Complex64::new((a * rat + b) * scl, (b * rat - a) * scl)
    }
}

fn floordiv_int(p: i64, q: i64) -> crate::Result<i64> {
    if q == 0 {
        return Err(exception(
            "ZeroDivisionError",
            "integer division or modulo by zero",
        ));
    }
    let d = p.wrapping_div(q);
    Ok(if (p % q != 0) && ((p < 0) != (q < 0)) {
        d - 1
    } else {
        d
    })
}
fn mod_int(p: i64, q: i64) -> crate::Result<i64> {
    if q == 0 {
        return Err(exception(
            "ZeroDivisionError",
            "integer division or modulo by zero",
        ));
    }
    let r = p.wrapping_rem(q);
    Ok(if r != 0 && ((r < 0) != (q < 0)) {
        r + q
    } else {
        r
    })
}
fn mod_float(p: f64, q: f64) -> crate::Result<f64> {
    if q == 0.0 {
        return Err(exception("ZeroDivisionError", "float modulo"));
    }
    let r = p % q;
    Ok(if r != 0.0 && ((r < 0.0) != (q < 0.0)) {
        r + q
    } else {
        r
    })
}
fn floordiv(a: &mut Args) -> R {
    binary(
        a,
        |p, q| floordiv_int(p, q).map(Num::I),
        |p, q| {
            if q == 0.0 {
                return Err(exception("ZeroDivisionError", "float divmod()"));
            }
            Ok((p / q).floor())
        },
        no_complex("//"),
    )
}
fn remainder(a: &mut Args) -> R {
    binary(
        a,
        |p, q| mod_int(p, q).map(Num::I),
        mod_float,
        no_complex("%"),
    )
}
/// `math.remainder`: IEEE 754 remainder (quotient rounded half to even), always a float.
fn math_remainder(a: &mut Args) -> R {
    let (x, y) = (num(a, 0)?.f(), num(a, 1)?.f());
    if y == 0.0 {
        return Err(exception("ValueError", "math domain error"));
    }
    Ok(IValue::Double(libm::remainder(x, y)))
}
fn fmod(a: &mut Args) -> R {
    let (x, y) = (num(a, 0)?.f(), num(a, 1)?.f());
    Ok(IValue::Double(x % y))
}
fn divmod(a: &mut Args) -> R {
    let (x, y) = (num(a, 0)?, num(a, 1)?);
    Ok(IValue::Tuple(Tuple::new(match (x, y) {
        (Num::I(p), Num::I(q)) => vec![
            IValue::Int(floordiv_int(p, q)?),
            IValue::Int(mod_int(p, q)?),
        ],
        _ => {
            let (p, q) = (x.f(), y.f());
            let m = mod_float(p, q)?;
            vec![IValue::Double(((p - m) / q).round()), IValue::Double(m)]
        }
    })))
}
fn pow(a: &mut Args) -> R {
    let int_result = a.op.ends_with("int_to_int");
    binary(
        a,
        |p, q| {
            if int_result {
                if q < 0 {
                    return Err(err("Integers to negative integer powers are not allowed"));
                }
                // PyTorch returns the integer power as a float
                Ok(Num::F(p.wrapping_pow(q.min(u32::MAX as i64) as u32) as f64))
            } else {
                Ok(Num::F((p as f64).powf(q as f64)))
            }
        },
        |p, q| Ok(p.powf(q)),
        |p, q| Ok(p.powc(q)),
    )
}
fn neg(a: &mut Args) -> R {
    Ok(match num(a, 0)? {
        Num::I(i) => IValue::Int(i.wrapping_neg()),
        Num::F(f) => IValue::Double(-f),
        Num::C(c) => IValue::Complex(-c),
    })
}
fn abs(a: &mut Args) -> R {
    Ok(match num(a, 0)? {
        Num::I(i) => IValue::Int(i.wrapping_abs()),
        Num::F(f) => IValue::Double(f.abs()),
        Num::C(c) => IValue::Double(c.norm()),
    })
}

fn compare_nums(x: Num, y: Num) -> Option<Ordering> {
    match (x, y) {
        (Num::I(p), Num::I(q)) => Some(p.cmp(&q)),
        _ => x.f().partial_cmp(&y.f()),
    }
}

/// Deep equality as `==` on TorchScript values.
/// Equality of tensors inside containers (`list.index`, `count`, `remove`, `in`, `==` of
/// lists): as c10's `_fastEqualsForContainer`, the same tensor is equal to itself, otherwise
/// `bool(a == b)`: the broadcast comparison must have exactly one element.
fn tensors_equal(p: &crate::Tensor, q: &crate::Tensor) -> crate::Result<bool> {
    if p.storage().id() == q.storage().id()
        && p.storage_offset() == q.storage_offset()
        && p.shape() == q.shape()
        && p.strides() == q.strides()
        && p.dtype() == q.dtype()
    {
        return Ok(true);
    }
    let shape = crate::tensor::broadcast_shapes(p.shape(), q.shape())?;
    match shape.iter().product::<usize>() {
        0 => Err(exception(
            "RuntimeError",
            "Boolean value of Tensor with no values is ambiguous",
        )),
        1 => Ok(p.item()?.to_c64() == q.item()?.to_c64()),
        _ => Err(exception(
            "RuntimeError",
            "Boolean value of Tensor with more than one value is ambiguous",
        )),
    }
}

pub fn values_equal(x: &IValue, y: &IValue) -> crate::Result<bool> {
    Ok(match (x, y) {
        (IValue::None, IValue::None) => true,
        (IValue::String(p), IValue::String(q)) => p == q,
        (IValue::Device(p), IValue::Device(q)) => p == q,
        (IValue::Enum(p), IValue::Enum(q)) => p == q,
        (IValue::List(p), IValue::List(q)) => seq_equal(&p.to_vec(), &q.to_vec())?,
        (IValue::Tuple(p), IValue::Tuple(q)) => seq_equal(p.items(), q.items())?,
        (IValue::Dict(p), IValue::Dict(q)) => {
            p.len() == q.len()
                && p.entries().iter().try_fold(true, |acc, (k, v)| {
                    Ok::<bool, Error>(
                        acc && match q.get(k) {
                            Some(w) => values_equal(v, &w)?,
                            None => false,
                        },
                    )
                })?
        }
        (IValue::Tensor(p), IValue::Tensor(q)) => tensors_equal(p, q)?,
        (IValue::Object(p), IValue::Object(q)) => p.ptr_eq(q),
        (p, q) => match (num_of_plain(p), num_of_plain(q)) {
            (Some(Num::C(c)), Some(n)) | (Some(n), Some(Num::C(c))) => c == n.c(),
            (Some(m), Some(n)) => compare_nums(m, n) == Some(Ordering::Equal),
            _ => false,
        },
    })
}

fn seq_equal(a: &[IValue], b: &[IValue]) -> crate::Result<bool> {
    if a.len() != b.len() {
        return Ok(false);
    }
    for (x, y) in a.iter().zip(b) {
        if !values_equal(x, y)? {
            return Ok(false);
        }
    }
    Ok(true)
}

fn num_of_plain(v: &IValue) -> Option<Num> {
    match v {
        IValue::Tensor(_) => None,
        v => num_of(v),
    }
}

/// Python ordering of two values (numbers, strings, lists, tuples), for `<` and sorting.
fn order(x: &IValue, y: &IValue) -> crate::Result<Ordering> {
    match (x, y) {
        (IValue::String(p), IValue::String(q)) => Ok(p.cmp(q)),
        (IValue::List(p), IValue::List(q)) => order_seq(&p.to_vec(), &q.to_vec()),
        (IValue::Tuple(p), IValue::Tuple(q)) => order_seq(p.items(), q.items()),
        (p, q) => match (num_of_plain(p), num_of_plain(q)) {
            (Some(m), Some(n)) => Ok(compare_nums(m, n).unwrap_or(Ordering::Equal)),
            _ => Err(err(format!(
                "'<' not supported between {} and {}",
                p.kind_name(),
                q.kind_name()
            ))),
        },
    }
}

fn order_seq(a: &[IValue], b: &[IValue]) -> crate::Result<Ordering> {
    for (x, y) in a.iter().zip(b) {
        let o = order(x, y)?;
        if o != Ordering::Equal {
            return Ok(o);
        }
    }
    Ok(a.len().cmp(&b.len()))
}

fn has_nan(a: &IValue, b: &IValue) -> bool {
    matches!(a, IValue::Double(x) if x.is_nan()) || matches!(b, IValue::Double(x) if x.is_nan())
}

fn eq(a: &mut Args) -> R {
    Ok(IValue::Bool(values_equal(a.get(0)?, a.get(1)?)?))
}
fn ne(a: &mut Args) -> R {
    Ok(IValue::Bool(!values_equal(a.get(0)?, a.get(1)?)?))
}
fn cmp_op(a: &Args, f: fn(Ordering) -> bool) -> R {
    let (x, y) = (a.get(0)?, a.get(1)?);
    if has_nan(x, y) {
        return Ok(IValue::Bool(false));
    }
    Ok(IValue::Bool(f(order(x, y)?)))
}
fn lt(a: &mut Args) -> R {
    cmp_op(a, |o| o == Ordering::Less)
}
fn le(a: &mut Args) -> R {
    cmp_op(a, |o| o != Ordering::Greater)
}
fn gt(a: &mut Args) -> R {
    cmp_op(a, |o| o == Ordering::Greater)
}
fn ge(a: &mut Args) -> R {
    cmp_op(a, |o| o != Ordering::Less)
}

fn is(a: &mut Args) -> R {
    Ok(IValue::Bool(a.get(0)?.is_same(a.get(1)?)))
}
fn isnot(a: &mut Args) -> R {
    Ok(IValue::Bool(!a.get(0)?.is_same(a.get(1)?)))
}
fn not(a: &mut Args) -> R {
    Ok(IValue::Bool(!a.bool(0)?))
}
fn bitwise(a: &Args, f: fn(i64, i64) -> i64) -> R {
    match (a.get(0)?, a.get(1)?) {
        (IValue::Bool(x), IValue::Bool(y)) => Ok(IValue::Bool(f(*x as i64, *y as i64) != 0)),
        _ => Ok(IValue::Int(f(a.int(0)?, a.int(1)?))),
    }
}
fn and(a: &mut Args) -> R {
    bitwise(a, |x, y| x & y)
}
fn or(a: &mut Args) -> R {
    bitwise(a, |x, y| x | y)
}
fn xor(a: &mut Args) -> R {
    bitwise(a, |x, y| x ^ y)
}
fn lshift(a: &mut Args) -> R {
    Ok(IValue::Int(
        a.int(0)?.wrapping_shl(a.int(1)?.clamp(0, 63) as u32),
    ))
}
fn rshift(a: &mut Args) -> R {
    Ok(IValue::Int(
        a.int(0)?.wrapping_shr(a.int(1)?.clamp(0, 63) as u32),
    ))
}

fn min_max(a: &mut Args, want: Ordering) -> R {
    let pick = |x: &IValue, y: &IValue| -> crate::Result<bool> {
        if has_nan(x, y) {
            return Ok(matches!(y, IValue::Double(v) if v.is_nan()));
        }
        Ok(order(y, x)? == want)
    };
    if a.len() == 1 {
        let l = a.list(0)?;
        let items = l.items();
        let mut best = items
            .first()
            .ok_or_else(|| err(format!("{}: empty list", a.op)))?;
        for x in items.iter().skip(1) {
            if pick(best, x)? {
                best = x;
            }
        }
        return Ok(best.clone());
    }
    let (x, y) = (a.get(0)?, a.get(1)?);
    if let (IValue::List(_), IValue::List(_)) = (x, y) {
        return Ok(if order(y, x)? == want {
            y.clone()
        } else {
            x.clone()
        });
    }
    let (p, q) = (num(a, 0)?, num(a, 1)?);
    let r = if pick(x, y)? { q } else { p };
    // mixed int/float results are float
    Ok(match (p, q, r) {
        (Num::I(_), Num::I(_), r) => r.value(),
        (_, _, r) => IValue::Double(r.f()),
    })
}
fn min(a: &mut Args) -> R {
    min_max(a, Ordering::Less)
}
fn max(a: &mut Args) -> R {
    min_max(a, Ordering::Greater)
}

fn unary_float(a: &Args, f: fn(f64) -> f64, c: Option<fn(Complex64) -> Complex64>) -> R {
    match (num(a, 0)?, c) {
        (Num::C(z), Some(cf)) => Ok(IValue::Complex(cf(z))),
        (Num::C(_), None) => Err(err(format!("{} is not defined for complex numbers", a.op))),
        (n, _) => Ok(IValue::Double(f(n.f()))),
    }
}

macro_rules! math_fns {
    ($($name:ident => $f:expr, $c:expr;)*) => {
        $(fn $name(a: &mut Args) -> R { unary_float(a, $f, $c) })*
    };
}
math_fns! {
    sqrt => f64::sqrt, Some(Complex64::sqrt);
    exp => f64::exp, Some(Complex64::exp);
    log1p => f64::ln_1p, None;
    expm1 => f64::exp_m1, None;
    log10 => f64::log10, Some(Complex64::log10);
    sin => f64::sin, Some(Complex64::sin);
    cos => f64::cos, Some(Complex64::cos);
    tan => f64::tan, Some(Complex64::tan);
    asin => f64::asin, Some(Complex64::asin);
    acos => f64::acos, Some(Complex64::acos);
    atan => f64::atan, Some(Complex64::atan);
    sinh => f64::sinh, Some(Complex64::sinh);
    cosh => f64::cosh, Some(Complex64::cosh);
    tanh => f64::tanh, Some(Complex64::tanh);
    asinh => f64::asinh, Some(Complex64::asinh);
    acosh => f64::acosh, Some(Complex64::acosh);
    atanh => f64::atanh, Some(Complex64::atanh);
    fabs => f64::abs, None;
    degrees => f64::to_degrees, None;
    radians => f64::to_radians, None;
    erf => erf_f64, None;
    erfc => |x| 1.0 - erf_f64(x), None;
    gamma => gamma_f64, None;
    lgamma => |x| gamma_f64(x).abs().ln(), None;
}

/// erf with about 1e-15 relative accuracy (Abramowitz-Stegun 7.1.26 is too coarse for goldens).
fn erf_f64(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x.abs() < 2.0 {
        // Maclaurin series
        let mut sum = x;
        let mut term = x;
        let x2 = x * x;
        let mut n = 0.0;
        loop {
            n += 1.0;
            term *= -x2 / n;
            let add = term / (2.0 * n + 1.0);
            sum += add;
            if add.abs() < 1e-17 * sum.abs() {
                break;
            }
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        // continued fraction for erfc
        let ax = x.abs();
        let mut f = 0.0;
        for k in (1..60).rev() {
            f = (k as f64 / 2.0) / (ax + f);
        }
        let erfc = (-ax * ax).exp() / (std::f64::consts::PI.sqrt() * (ax + f));
        (1.0 - erfc).copysign(x)
    }
}

/// Gamma via the Lanczos approximation (g = 7, n = 9).
fn gamma_f64(x: f64) -> f64 {
    const G: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        std::f64::consts::PI / ((std::f64::consts::PI * x).sin() * gamma_f64(1.0 - x))
    } else {
        let x = x - 1.0;
        let mut s = G[0];
        for (i, g) in G.iter().enumerate().skip(1) {
            s += g / (x + i as f64);
        }
        let t = x + 7.5;
        (2.0 * std::f64::consts::PI).sqrt() * t.powf(x + 0.5) * (-t).exp() * s
    }
}

fn log(a: &mut Args) -> R {
    if a.len() == 2 {
        let (x, b) = (num(a, 0)?, num(a, 1)?);
        return Ok(match (x, b) {
            (Num::C(_), _) | (_, Num::C(_)) => IValue::Complex(x.c().ln() / b.c().ln()),
            _ => IValue::Double(x.f().ln() / b.f().ln()),
        });
    }
    unary_float(a, f64::ln, Some(Complex64::ln))
}
fn atan2(a: &mut Args) -> R {
    Ok(IValue::Double(num(a, 0)?.f().atan2(num(a, 1)?.f())))
}
fn copysign(a: &mut Args) -> R {
    Ok(IValue::Double(num(a, 0)?.f().copysign(num(a, 1)?.f())))
}
fn float_to_int(f: f64) -> crate::Result<i64> {
    if !f.is_finite() {
        return Err(err(format!("cannot convert float {f} to integer")));
    }
    Ok(f as i64)
}
fn floor(a: &mut Args) -> R {
    match num(a, 0)? {
        Num::I(i) => Ok(IValue::Int(i)),
        n => Ok(IValue::Int(float_to_int(n.f().floor())?)),
    }
}
fn ceil(a: &mut Args) -> R {
    match num(a, 0)? {
        Num::I(i) => Ok(IValue::Int(i)),
        n => Ok(IValue::Int(float_to_int(n.f().ceil())?)),
    }
}
fn round(a: &mut Args) -> R {
    // every overload returns a float (`round.Scalar(2)` is 2.0 in PyTorch)
    Ok(IValue::Double(num(a, 0)?.f().round_ties_even()))
}
fn isnan(a: &mut Args) -> R {
    Ok(IValue::Bool(match num(a, 0)? {
        Num::C(c) => c.is_nan(),
        n => n.f().is_nan(),
    }))
}
fn isinf(a: &mut Args) -> R {
    Ok(IValue::Bool(match num(a, 0)? {
        Num::C(c) => c.is_infinite(),
        n => n.f().is_infinite(),
    }))
}
fn isfinite(a: &mut Args) -> R {
    Ok(IValue::Bool(match num(a, 0)? {
        Num::C(c) => c.is_finite(),
        n => n.f().is_finite(),
    }))
}
fn gcd(a: &mut Args) -> R {
    let (mut x, mut y) = (a.int(0)?.unsigned_abs(), a.int(1)?.unsigned_abs());
    while y != 0 {
        (x, y) = (y, x % y);
    }
    Ok(IValue::Int(x as i64))
}
fn factorial(a: &mut Args) -> R {
    let n = a.int(0)?;
    if n < 0 {
        return Err(exception(
            "ValueError",
            "factorial() not defined for negative values",
        ));
    }
    Ok(IValue::Int(
        (1..=n).fold(1i64, |acc, k| acc.wrapping_mul(k)),
    ))
}

// conversions

fn to_int(a: &mut Args) -> R {
    match a.get(0)? {
        IValue::String(s) => s
            .trim()
            .parse::<i64>()
            .map(IValue::Int)
            .map_err(|_| err(format!("invalid literal for int() with base 10: '{s}'"))),
        IValue::Tensor(t) => {
            if t.numel() != 1 {
                return Err(err(format!(
                    "a Tensor with {} elements cannot be converted to Scalar",
                    t.numel()
                )));
            }
            Ok(IValue::Int(match t.item()? {
                Scalar::Float(f) => float_to_int(f)?,
                s => s.to_i64(),
            }))
        }
        _ => match num(a, 0)? {
            Num::I(i) => Ok(IValue::Int(i)),
            n => Ok(IValue::Int(float_to_int(n.f())?)),
        },
    }
}
fn to_float(a: &mut Args) -> R {
    match a.get(0)? {
        IValue::String(s) => parse_python_float(s)
            .map(IValue::Double)
            .ok_or_else(|| err(format!("could not convert string to float: '{s}'"))),
        _ => Ok(IValue::Double(num(a, 0)?.f())),
    }
}
fn parse_python_float(s: &str) -> Option<f64> {
    let t = s.trim().to_ascii_lowercase();
    match t.as_str() {
        "inf" | "+inf" | "infinity" => Some(f64::INFINITY),
        "-inf" | "-infinity" => Some(f64::NEG_INFINITY),
        "nan" | "+nan" | "-nan" => Some(f64::NAN),
        _ => t.parse().ok(),
    }
}
fn to_bool(a: &mut Args) -> R {
    Ok(IValue::Bool(match num(a, 0)? {
        Num::I(i) => i != 0,
        Num::F(f) => f != 0.0,
        Num::C(c) => c.re != 0.0 || c.im != 0.0,
    }))
}
fn to_complex(a: &mut Args) -> R {
    let re = num(a, 0)?.c();
    if a.len() > 1 {
        let im = num(a, 1)?.c();
        return Ok(IValue::Complex(re + Complex64::i() * im));
    }
    Ok(IValue::Complex(re))
}
/// `aten::ScalarImplicit` / `prim::ImplicitTensorToNum`: the number in a 0-dim tensor.
fn scalar_implicit(a: &mut Args) -> R {
    let t = a.tensor(0)?;
    if t.dim() != 0 {
        return Err(err(format!(
            "{}: expected a 0-dim tensor, got one of shape {:?}",
            a.op,
            t.shape()
        )));
    }
    Ok(IValue::from(t.item()?))
}
/// `prim::ModuleContainerIndex`: the submodule of a ModuleDict (by key) or ModuleList (by
/// index; its children are named `0`, `1`, ...).
fn module_container_index(a: &mut Args) -> R {
    let IValue::Object(o) = a.get(0)? else {
        return Err(err(format!("{}: not a module container", a.op)));
    };
    let key = match a.get(1)? {
        IValue::String(s) => s.to_string(),
        IValue::Int(i) => {
            let n = o
                .field_names()
                .iter()
                .filter(|f| f.bytes().all(|b| b.is_ascii_digit()))
                .count() as i64;
            (if *i < 0 { i + n } else { *i }).to_string()
        }
        other => return Err(err(format!("{}: bad key {}", a.op, other.kind_name()))),
    };
    o.get(&key)
        .filter(|v| matches!(v, IValue::Object(_)))
        .ok_or_else(|| exception("KeyError", key))
}

/// c10's `toString(ScalarType)` for the floating and complex dtypes (`Float`, `Double`).
fn scalar_type_name(d: DType) -> &'static str {
    match d {
        DType::Float16 => "Half",
        DType::Float32 => "Float",
        DType::Float64 => "Double",
        DType::BFloat16 => "BFloat16",
        DType::Complex32 => "ComplexHalf",
        DType::Complex64 => "ComplexFloat",
        DType::Complex128 => "ComplexDouble",
        other => other.name(),
    }
}

/// `aten::IntImplicit` / `FloatImplicit` / `ComplexImplicit`: a 0-dim tensor passed where a
/// number is expected, as PyTorch's checkImplicitTensorToNum (integral dtype for int).
fn implicit_number(a: &Args, kind: char) -> R {
    let t = a.tensor(0)?;
    if t.dim() != 0 {
        return Err(err(
            "Cannot input a tensor of dimension other than 0 as a scalar argument",
        ));
    }
    if kind == 'i' && (t.dtype().is_floating_point() || t.dtype().is_complex()) {
        return Err(err(format!(
            "Cannot input a tensor of type {} as an integral argument",
            scalar_type_name(t.dtype())
        )));
    }
    let s = t.item()?;
    Ok(match kind {
        'i' => IValue::Int(s.to_i64()),
        'f' => IValue::Double(s.to_f64()),
        _ => IValue::Complex(s.to_c64()),
    })
}
fn num_to_tensor(a: &mut Args) -> R {
    let s = a.scalar(0)?;
    Ok(IValue::Tensor(Tensor::from_scalar(s, s.wrapped_dtype())?))
}

// ---------------------------------------------------------------------------------------------
// lists

/// Normalize a Python index for a sequence of `len`; `None` when out of range.
fn py_index(i: i64, len: usize) -> Option<usize> {
    let n = len as i64;
    let k = if i < 0 { i + n } else { i };
    (0..n).contains(&k).then_some(k as usize)
}

/// Python slice bounds → the selected indices.
fn slice_indices(
    len: usize,
    start: Option<i64>,
    end: Option<i64>,
    step: i64,
) -> crate::Result<Vec<usize>> {
    if step == 0 {
        return Err(exception("ValueError", "slice step cannot be zero"));
    }
    let n = len as i64;
    let norm = |x: i64, lo: i64, hi: i64| {
        let x = if x < 0 { x + n } else { x };
        x.clamp(lo, hi)
    };
    let mut out = Vec::new();
    if step > 0 {
        let s = start.map(|x| norm(x, 0, n)).unwrap_or(0);
        let e = end.map(|x| norm(x, 0, n)).unwrap_or(n);
        let mut i = s;
        while i < e {
            out.push(i as usize);
            i += step;
        }
    } else {
        let s = start.map(|x| norm(x, -1, n - 1)).unwrap_or(n - 1);
        let e = end.map(|x| norm(x, -1, n - 1)).unwrap_or(-1);
        let mut i = s;
        while i > e {
            out.push(i as usize);
            i += step;
        }
    }
    Ok(out)
}

fn len(a: &mut Args) -> R {
    Ok(IValue::Int(match a.get(0)? {
        IValue::List(l) => l.len() as i64,
        IValue::Dict(d) => d.len() as i64,
        // TorchScript strings are byte strings: len() counts UTF-8 bytes
        IValue::String(s) => s.len() as i64,
        IValue::Tuple(t) => t.items().len() as i64,
        IValue::Tensor(t) => match t.shape().first() {
            Some(&n) => n as i64,
            None => return Err(err("len() of a 0-d tensor")),
        },
        other => {
            return Err(err(format!(
                "object of type {} has no len()",
                other.kind_name()
            )))
        }
    }))
}

fn getitem(a: &mut Args) -> R {
    match a.get(0)? {
        IValue::List(l) => {
            let i = a.int(1)?;
            let items = l.items();
            py_index(i, items.len())
                .and_then(|k| items.get(k))
                .cloned()
                .ok_or_else(|| exception("IndexError", "list index out of range"))
        }
        IValue::Dict(d) => {
            let k = a.get(1)?;
            d.get(k).ok_or_else(|| exception("KeyError", python_str(k)))
        }
        IValue::String(s) => {
            let i = a.int(1)?;
            let chars: Vec<char> = s.chars().collect();
            py_index(i, chars.len())
                .and_then(|k| chars.get(k))
                .map(|c| IValue::str(c.to_string()))
                .ok_or_else(|| exception("IndexError", "string index out of range"))
        }
        IValue::Tuple(t) => {
            let i = a.int(1)?;
            py_index(i, t.items().len())
                .and_then(|k| t.items().get(k))
                .cloned()
                .ok_or_else(|| exception("IndexError", "tuple index out of range"))
        }
        other => Err(err(format!("{} is not subscriptable", other.kind_name()))),
    }
}

fn set_item(a: &mut Args) -> R {
    let v = a.take(2)?;
    match a.get(0)? {
        IValue::List(l) => {
            let i = a.int(1)?;
            let mut items = l.items_mut();
            let n = items.len();
            let slot = py_index(i, n)
                .and_then(|k| items.get_mut(k))
                .ok_or_else(|| exception("IndexError", "list assignment index out of range"))?;
            *slot = v;
            Ok(IValue::List(l.clone()))
        }
        IValue::Dict(d) => {
            d.insert(a.get(1)?.clone(), v)
                .ok_or_else(|| err("unhashable dict key"))?;
            Ok(IValue::None)
        }
        other => Err(err(format!("cannot assign items of {}", other.kind_name()))),
    }
}

fn append(a: &mut Args) -> R {
    let l = a.list(0)?;
    let v = a.take(1)?;
    l.push(v);
    Ok(IValue::List(l))
}
fn insert(a: &mut Args) -> R {
    let l = a.list(0)?;
    let i = a.int(1)?;
    let v = a.take(2)?;
    let mut items = l.items_mut();
    let n = items.len() as i64;
    let k = if i < 0 { (i + n).max(0) } else { i.min(n) };
    items.insert(k as usize, v);
    Ok(IValue::None)
}
fn pop(a: &mut Args) -> R {
    match a.get(0)? {
        IValue::List(l) => {
            let i = if a.len() > 1 { a.int(1)? } else { -1 };
            let mut items = l.items_mut();
            let k = py_index(i, items.len()).ok_or_else(|| {
                exception(
                    "IndexError",
                    if items.is_empty() {
                        "pop from empty list"
                    } else {
                        "pop index out of range"
                    },
                )
            })?;
            Ok(items.remove(k))
        }
        IValue::Dict(d) => {
            let key = a.get(1)?;
            let hk = crate::values::ivalue::dict_key(key).ok_or_else(|| err("unhashable key"))?;
            match d.items_mut().shift_remove(&hk) {
                Some((_, v)) => Ok(v),
                None if a.len() > 2 => Ok(a.get(2)?.clone()),
                None => Err(exception("KeyError", python_str(key))),
            }
        }
        other => Err(err(format!("cannot pop from {}", other.kind_name()))),
    }
}
fn delete(a: &mut Args) -> R {
    match a.get(0)? {
        IValue::List(l) => {
            let i = a.int(1)?;
            let mut items = l.items_mut();
            let k = py_index(i, items.len())
                .ok_or_else(|| exception("IndexError", "list assignment index out of range"))?;
            items.remove(k);
            Ok(IValue::None)
        }
        IValue::Dict(d) => {
            let key = a.get(1)?;
            let hk = crate::values::ivalue::dict_key(key).ok_or_else(|| err("unhashable key"))?;
            d.items_mut()
                .shift_remove(&hk)
                .map(|_| IValue::None)
                .ok_or_else(|| exception("KeyError", python_str(key)))
        }
        other => Err(err(format!("cannot delete from {}", other.kind_name()))),
    }
}
fn extend(a: &mut Args) -> R {
    let l = a.list(0)?;
    let other = a.list(1)?.to_vec();
    l.items_mut().extend(other);
    Ok(IValue::None)
}
fn clear(a: &mut Args) -> R {
    match a.get(0)? {
        IValue::List(l) => l.items_mut().clear(),
        IValue::Dict(d) => d.items_mut().clear(),
        other => return Err(err(format!("cannot clear {}", other.kind_name()))),
    }
    Ok(IValue::None)
}
fn copy(a: &mut Args) -> R {
    match a.get(0)? {
        IValue::List(l) => Ok(IValue::List(List::new(l.elem_type().clone(), l.to_vec()))),
        IValue::Dict(d) => Ok(IValue::Dict(copy_dict(d))),
        IValue::String(s) => Ok(IValue::List(List::new(
            Type::Str,
            s.chars().map(|c| IValue::str(c.to_string())).collect(),
        ))),
        other => Err(err(format!("cannot copy {}", other.kind_name()))),
    }
}
fn copy_dict(d: &Dict) -> Dict {
    let out = Dict::new(d.key_type().clone(), d.value_type().clone());
    *out.items_mut() = d.items().clone();
    out
}
fn list_slice(a: &mut Args) -> R {
    let (start, end, step) = (a.opt_int(1)?, a.opt_int(2)?, a.opt_int(3)?.unwrap_or(1));
    match a.get(0)? {
        IValue::List(l) => {
            let items = l.items();
            let idx = slice_indices(items.len(), start, end, step)?;
            let out = idx.iter().filter_map(|&i| items.get(i).cloned()).collect();
            Ok(IValue::List(List::new(l.elem_type().clone(), out)))
        }
        IValue::String(s) => {
            let chars: Vec<char> = s.chars().collect();
            let idx = slice_indices(chars.len(), start, end, step)?;
            Ok(IValue::str(
                idx.iter().filter_map(|&i| chars.get(i)).collect::<String>(),
            ))
        }
        other => Err(err(format!("cannot slice {}", other.kind_name()))),
    }
}
/// `l += m` returns the extended list (`extend` returns nothing).
fn add_inplace(a: &mut Args) -> R {
    extend(a)?;
    Ok(IValue::List(a.list(0)?))
}
fn list_index(a: &mut Args) -> R {
    let l = a.list(0)?;
    let x = a.get(1)?;
    for (i, y) in l.items().iter().enumerate() {
        if values_equal(y, x)? {
            return Ok(IValue::Int(i as i64));
        }
    }
    Err(exception("ValueError", "'list.index(x)': x not in list"))
}
fn count(a: &mut Args) -> R {
    match a.get(0)? {
        IValue::List(l) => {
            let x = a.get(1)?;
            let mut n = 0;
            for y in l.items().iter() {
                if values_equal(y, x)? {
                    n += 1;
                }
            }
            Ok(IValue::Int(n))
        }
        IValue::String(_) => {
            let (s, sub) = str_range(a)?;
            Ok(IValue::Int(if sub.is_empty() {
                s.chars().count() as i64 + 1
            } else {
                s.matches(sub.as_str()).count() as i64
            }))
        }
        other => Err(err(format!("cannot count in {}", other.kind_name()))),
    }
}
fn remove(a: &mut Args) -> R {
    let l = a.list(0)?;
    let x = a.get(1)?;
    let mut items = l.items_mut();
    let mut pos = None;
    for (i, y) in items.iter().enumerate() {
        if values_equal(y, x)? {
            pos = Some(i);
            break;
        }
    }
    match pos {
        Some(i) => {
            items.remove(i);
            Ok(IValue::None)
        }
        None => Err(exception("ValueError", "list.remove(x): x not in list")),
    }
}
fn reverse(a: &mut Args) -> R {
    a.list(0)?.items_mut().reverse();
    Ok(IValue::None)
}
fn sort_values(items: &mut [IValue], reverse: bool) -> crate::Result<()> {
    let mut failure = None;
    items.sort_by(|x, y| match order(x, y) {
        Ok(o) => {
            if reverse {
                o.reverse()
            } else {
                o
            }
        }
        Err(e) => {
            failure.get_or_insert(e);
            Ordering::Equal
        }
    });
    failure.map_or(Ok(()), Err)
}
fn sort(a: &mut Args) -> R {
    let l = a.list(0)?;
    let reverse = if a.len() > 1 { a.bool(1)? } else { false };
    sort_values(&mut l.items_mut(), reverse)?;
    Ok(IValue::None)
}
fn sorted(a: &mut Args) -> R {
    let l = a.list(0)?;
    let mut items = l.to_vec();
    sort_values(&mut items, false)?;
    Ok(IValue::List(List::new(l.elem_type().clone(), items)))
}
fn contains(a: &mut Args) -> R {
    match a.get(0)? {
        IValue::List(l) => {
            let x = a.get(1)?;
            for y in l.items().iter() {
                if values_equal(y, x)? {
                    return Ok(IValue::Bool(true));
                }
            }
            Ok(IValue::Bool(false))
        }
        IValue::Dict(d) => Ok(IValue::Bool(d.get(a.get(1)?).is_some())),
        IValue::String(s) => Ok(IValue::Bool(s.contains(&*a.str(1)?))),
        other => Err(err(format!(
            "'in' is not supported on {}",
            other.kind_name()
        ))),
    }
}
fn sum(a: &mut Args) -> R {
    let l = a.list(0)?;
    let mut acc = Num::I(0);
    for v in l.items().iter() {
        let n = num_of(v).ok_or_else(|| err("sum() of non-numbers"))?;
        acc = match (acc, n) {
            (Num::I(p), Num::I(q)) => Num::I(p.wrapping_add(q)),
            (Num::C(_), _) | (_, Num::C(_)) => Num::C(acc.c() + n.c()),
            _ => Num::F(acc.f() + n.f()),
        };
    }
    if a.op.ends_with(".float") {
        return Ok(IValue::Double(acc.f()));
    }
    Ok(acc.value())
}
fn any_all(a: &Args, want: bool) -> R {
    let l = a.list(0)?;
    for v in l.items().iter() {
        let truthy = match v {
            IValue::String(s) => !s.is_empty(),
            v => num_of(v)
                .map(|n| n.f() != 0.0 || n.c().im != 0.0)
                .unwrap_or(false),
        };
        if truthy == want {
            return Ok(IValue::Bool(want));
        }
    }
    Ok(IValue::Bool(!want))
}
fn any(a: &mut Args) -> R {
    any_all(a, true)
}
fn all(a: &mut Args) -> R {
    any_all(a, false)
}
fn range_length(a: &mut Args) -> R {
    let (lo, hi, step) = (a.int(0)?, a.int(1)?, a.int(2)?);
    if step == 0 {
        return Err(exception("ValueError", "range() arg 3 must not be zero"));
    }
    Ok(IValue::Int(if step > 0 && lo < hi {
        1 + (hi - 1 - lo) / step
    } else if step < 0 && lo > hi {
        1 + (lo - 1 - hi) / (-step)
    } else {
        0
    }))
}
fn derive_index(a: &mut Args) -> R {
    Ok(IValue::Int(a.int(1)? + a.int(0)? * a.int(2)?))
}

// ---------------------------------------------------------------------------------------------
// dicts

fn dict_of(a: &Args, i: usize) -> crate::Result<Dict> {
    match a.get(i)? {
        IValue::Dict(d) => Ok(d.clone()),
        other => Err(err(format!(
            "{}: expected a dict, got {}",
            a.op,
            other.kind_name()
        ))),
    }
}
fn keys(a: &mut Args) -> R {
    let d = dict_of(a, 0)?;
    let items: Vec<IValue> = d.items().values().map(|(k, _)| k.clone()).collect();
    Ok(IValue::List(List::new(d.key_type().clone(), items)))
}
fn values(a: &mut Args) -> R {
    let d = dict_of(a, 0)?;
    let items: Vec<IValue> = d.items().values().map(|(_, v)| v.clone()).collect();
    Ok(IValue::List(List::new(d.value_type().clone(), items)))
}
fn items(a: &mut Args) -> R {
    let d = dict_of(a, 0)?;
    let items: Vec<IValue> = d
        .items()
        .values()
        .map(|(k, v)| IValue::Tuple(Tuple::new(vec![k.clone(), v.clone()])))
        .collect();
    Ok(IValue::List(List::new(
        Type::Tuple(vec![d.key_type().clone(), d.value_type().clone()]),
        items,
    )))
}
fn get(a: &mut Args) -> R {
    let d = dict_of(a, 0)?;
    match d.get(a.get(1)?) {
        Some(v) => Ok(v),
        None if a.len() > 2 => Ok(a.get(2)?.clone()),
        None => Ok(IValue::None),
    }
}
fn setdefault(a: &mut Args) -> R {
    let d = dict_of(a, 0)?;
    let k = a.get(1)?.clone();
    if let Some(v) = d.get(&k) {
        return Ok(v);
    }
    let v = a.get(2)?.clone();
    d.insert(k, v.clone())
        .ok_or_else(|| err("unhashable dict key"))?;
    Ok(v)
}
fn update(a: &mut Args) -> R {
    let d = dict_of(a, 0)?;
    let other = dict_of(a, 1)?;
    for (k, v) in other.entries() {
        d.insert(k, v).ok_or_else(|| err("unhashable dict key"))?;
    }
    Ok(IValue::None)
}
fn popitem(a: &mut Args) -> R {
    let d = dict_of(a, 0)?;
    // PyTorch's dictPopItem removes the first item (c10::Dict::begin), not the last
    let first = d.items_mut().shift_remove_index(0);
    match first {
        Some((_, (k, v))) => Ok(IValue::Tuple(Tuple::new(vec![k, v]))),
        None => Err(exception("KeyError", "popitem(): dictionary is empty")),
    }
}
fn dict(a: &mut Args) -> R {
    if a.is_empty() {
        return Ok(IValue::Dict(Dict::new(Type::Str, Type::Tensor)));
    }
    match a.get(0)? {
        IValue::Dict(d) => Ok(IValue::Dict(copy_dict(d))),
        IValue::List(l) => {
            let (kt, vt) = match l.elem_type() {
                Type::Tuple(ts) if ts.len() == 2 => (ts[0].clone(), ts[1].clone()),
                _ => (Type::Any, Type::Any),
            };
            let d = Dict::new(kt, vt);
            for item in l.items().iter() {
                match item {
                    IValue::Tuple(t) if t.items().len() == 2 => {
                        d.insert(t.items()[0].clone(), t.items()[1].clone())
                            .ok_or_else(|| err("unhashable dict key"))?;
                    }
                    _ => return Err(err("dict() needs a list of (key, value) pairs")),
                }
            }
            Ok(IValue::Dict(d))
        }
        other => Err(err(format!(
            "cannot build a dict from {}",
            other.kind_name()
        ))),
    }
}

// ---------------------------------------------------------------------------------------------
// strings

/// `(self[start:end], substr)` for the `str` methods taking `substr, start=0, end=-1`.
fn str_range(a: &Args) -> crate::Result<(String, String)> {
    let s = a.str(0)?;
    let sub = a.str(1)?.to_string();
    let chars: Vec<char> = s.chars().collect();
    let n = chars.len() as i64;
    let start = if a.len() > 2 { a.int(2)? } else { 0 };
    let end = if a.len() > 3 { a.int(3)? } else { -1 };
    let norm = |x: i64| (if x < 0 { x + n } else { x }).clamp(0, n) as usize;
    let (b, e) = (norm(start), if end == -1 { n as usize } else { norm(end) });
    let text: String = chars.get(b..e.max(b)).unwrap_or(&[]).iter().collect();
    Ok((text, sub))
}
fn str_start(a: &Args) -> crate::Result<usize> {
    let s = a.str(0)?;
    let n = s.chars().count() as i64;
    let start = if a.len() > 2 { a.int(2)? } else { 0 };
    Ok((if start < 0 { start + n } else { start }).clamp(0, n) as usize)
}
fn startswith(a: &mut Args) -> R {
    let (s, sub) = str_range(a)?;
    Ok(IValue::Bool(s.starts_with(&sub)))
}
fn endswith(a: &mut Args) -> R {
    let (s, sub) = str_range(a)?;
    Ok(IValue::Bool(s.ends_with(&sub)))
}
fn char_index(s: &str, byte: usize) -> i64 {
    s.get(..byte).map(|p| p.chars().count() as i64).unwrap_or(0)
}
fn find(a: &mut Args) -> R {
    let (s, sub) = str_range(a)?;
    let off = str_start(a)? as i64;
    Ok(IValue::Int(
        s.find(&sub).map(|b| char_index(&s, b) + off).unwrap_or(-1),
    ))
}
fn rfind(a: &mut Args) -> R {
    let (s, sub) = str_range(a)?;
    let off = str_start(a)? as i64;
    Ok(IValue::Int(
        s.rfind(&sub).map(|b| char_index(&s, b) + off).unwrap_or(-1),
    ))
}
fn str_index(a: &mut Args) -> R {
    match find(a)? {
        IValue::Int(-1) => Err(exception("ValueError", "substring not found")),
        v => Ok(v),
    }
}
fn rindex(a: &mut Args) -> R {
    match rfind(a)? {
        IValue::Int(-1) => Err(exception("ValueError", "substring not found")),
        v => Ok(v),
    }
}
fn join(a: &mut Args) -> R {
    let sep = a.str(0)?;
    let l = a.list(1)?;
    let parts: Vec<String> = l.items().iter().map(python_str).collect();
    Ok(IValue::str(parts.join(&sep)))
}
fn str_list(items: Vec<String>) -> IValue {
    IValue::List(List::new(
        Type::Str,
        items.into_iter().map(IValue::str).collect(),
    ))
}
fn split(a: &mut Args) -> R {
    let s = a.str(0)?;
    let sep = a.opt_str(1)?;
    let max = if a.len() > 2 { a.int(2)? } else { -1 };
    let parts: Vec<String> = match sep {
        None => {
            let mut out = Vec::new();
            let mut rest = s.trim_start();
            while !rest.is_empty() {
                if max >= 0 && out.len() as i64 == max {
                    out.push(rest.to_string());
                    break;
                }
                let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
                out.push(rest[..end].to_string());
                rest = rest[end..].trim_start();
            }
            out
        }
        Some(sep) if sep.is_empty() => return Err(exception("ValueError", "empty separator")),
        Some(sep) => {
            if max < 0 {
                s.split(&*sep).map(str::to_string).collect()
            } else {
                s.splitn(max as usize + 1, &*sep)
                    .map(str::to_string)
                    .collect()
            }
        }
    };
    Ok(str_list(parts))
}
fn rsplit(a: &mut Args) -> R {
    let s = a.str(0)?;
    let sep = a.str(1)?;
    let max = if a.len() > 2 { a.int(2)? } else { -1 };
    let mut parts: Vec<String> = if max < 0 {
        s.rsplit(&*sep).map(str::to_string).collect()
    } else {
        s.rsplitn(max as usize + 1, &*sep)
            .map(str::to_string)
            .collect()
    };
    parts.reverse();
    Ok(str_list(parts))
}
fn strip_chars(a: &Args) -> crate::Result<Vec<char>> {
    Ok(if a.len() > 1 {
        a.str(1)?.chars().collect()
    } else {
        vec![' ', '\n', '\t', '\x0c', '\x0b']
    })
}
fn strip(a: &mut Args) -> R {
    let cs = strip_chars(a)?;
    Ok(IValue::str(a.str(0)?.trim_matches(|c| cs.contains(&c))))
}
fn lstrip(a: &mut Args) -> R {
    let cs = strip_chars(a)?;
    Ok(IValue::str(
        a.str(0)?.trim_start_matches(|c| cs.contains(&c)),
    ))
}
fn rstrip(a: &mut Args) -> R {
    let cs = strip_chars(a)?;
    Ok(IValue::str(a.str(0)?.trim_end_matches(|c| cs.contains(&c))))
}
fn lower(a: &mut Args) -> R {
    Ok(IValue::str(a.str(0)?.to_lowercase()))
}
fn upper(a: &mut Args) -> R {
    Ok(IValue::str(a.str(0)?.to_uppercase()))
}
fn swapcase(a: &mut Args) -> R {
    Ok(IValue::str(
        a.str(0)?
            .chars()
            .map(|c| {
                if c.is_uppercase() {
                    c.to_lowercase().collect::<String>()
                } else {
                    c.to_uppercase().collect()
                }
            })
            .collect::<String>(),
    ))
}
fn capitalize(a: &mut Args) -> R {
    let s = a.str(0)?;
    let mut cs = s.chars();
    Ok(IValue::str(match cs.next() {
        Some(c) => c.to_uppercase().collect::<String>() + &cs.as_str().to_lowercase(),
        None => String::new(),
    }))
}
fn title(a: &mut Args) -> R {
    let mut out = String::new();
    let mut prev_cased = false;
    for c in a.str(0)?.chars() {
        if c.is_alphabetic() {
            if prev_cased {
                out.extend(c.to_lowercase());
            } else {
                out.extend(c.to_uppercase());
            }
            prev_cased = true;
        } else {
            out.push(c);
            prev_cased = false;
        }
    }
    Ok(IValue::str(out))
}
fn replace(a: &mut Args) -> R {
    let s = a.str(0)?;
    let (old, new) = (a.str(1)?, a.str(2)?);
    let max = if a.len() > 3 { a.int(3)? } else { -1 };
    Ok(IValue::str(if max < 0 {
        s.replace(&*old, &new)
    } else {
        s.replacen(&*old, &new, max as usize)
    }))
}
fn char_pred(a: &Args, f: fn(char) -> bool) -> R {
    let s = a.str(0)?;
    Ok(IValue::Bool(!s.is_empty() && s.chars().all(f)))
}
fn isdigit(a: &mut Args) -> R {
    char_pred(a, |c| c.is_ascii_digit())
}
fn isalpha(a: &mut Args) -> R {
    char_pred(a, char::is_alphabetic)
}
fn isalnum(a: &mut Args) -> R {
    char_pred(a, char::is_alphanumeric)
}
fn isspace(a: &mut Args) -> R {
    char_pred(a, char::is_whitespace)
}
fn islower(a: &mut Args) -> R {
    let s = a.str(0)?;
    Ok(IValue::Bool(
        s.chars().any(char::is_lowercase) && !s.chars().any(char::is_uppercase),
    ))
}
fn isupper(a: &mut Args) -> R {
    let s = a.str(0)?;
    Ok(IValue::Bool(
        s.chars().any(char::is_uppercase) && !s.chars().any(char::is_lowercase),
    ))
}
/// Longest string a padding method builds (a hostile width must not exhaust memory).
const MAX_PADDED_LEN: usize = 1 << 28;

fn zfill(a: &mut Args) -> R {
    let s = a.str(0)?;
    let width = a.int(1)?.max(0) as usize;
    if width > MAX_PADDED_LEN {
        return Err(err("zfill width is too large"));
    }
    let n = s.chars().count();
    if n >= width {
        return Ok(IValue::String(s));
    }
    // unlike CPython, TorchScript pads in front of a sign too
    Ok(IValue::str(format!("{}{s}", "0".repeat(width - n))))
}
fn justify(a: &Args, left: f64) -> R {
    let s = a.str(0)?;
    let width = a.int(1)?.max(0) as usize;
    if width > MAX_PADDED_LEN {
        return Err(err("padding width is too large"));
    }
    let fill = if a.len() > 2 {
        a.str(2)?.chars().next().unwrap_or(' ')
    } else {
        ' '
    };
    let n = s.chars().count();
    if n >= width {
        return Ok(IValue::String(s));
    }
    let total = width - n;
    // center puts the extra pad on the right unless the width is odd (CPython's rule)
    let l = if left == 0.5 {
        total / 2 + (total & width & 1)
    } else {
        (total as f64 * left) as usize
    };
    let r = total - l;
    Ok(IValue::str(format!(
        "{}{s}{}",
        fill.to_string().repeat(l),
        fill.to_string().repeat(r)
    )))
}
fn ljust(a: &mut Args) -> R {
    justify(a, 0.0)
}
fn rjust(a: &mut Args) -> R {
    justify(a, 1.0)
}
fn center(a: &mut Args) -> R {
    justify(a, 0.5)
}
fn ord(a: &mut Args) -> R {
    let s = a.str(0)?;
    let mut cs = s.chars();
    match (cs.next(), cs.next()) {
        (Some(c), None) => Ok(IValue::Int(c as i64)),
        _ => Err(err("ord() expected a character")),
    }
}
fn chr(a: &mut Args) -> R {
    let i = a.int(0)?;
    u32::try_from(i)
        .ok()
        .and_then(char::from_u32)
        .map(|c| IValue::str(c.to_string()))
        .ok_or_else(|| exception("ValueError", "chr() arg not in range"))
}
fn splitlines(a: &mut Args) -> R {
    let s = a.str(0)?;
    let keep = if a.len() > 1 { a.bool(1)? } else { false };
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in s.chars() {
        if c == '\n' || c == '\r' {
            if keep {
                cur.push(c);
            }
            out.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    Ok(str_list(out))
}
fn to_str(a: &mut Args) -> R {
    Ok(IValue::str(python_str(a.get(0)?)))
}
fn format(a: &mut Args) -> R {
    let fmt = a.str(0)?;
    let mut out = String::new();
    let mut next = 1;
    let mut rest = &*fmt;
    while let Some(p) = rest.find("{}") {
        out.push_str(&rest[..p]);
        match a.values.get(next) {
            Some(v) => out.push_str(&python_str(v)),
            None => return Err(err("format(): too few arguments for the format string")),
        }
        next += 1;
        rest = &rest[p + 2..];
    }
    out.push_str(rest);
    Ok(IValue::str(out))
}

// ---------------------------------------------------------------------------------------------
// tensor queries and misc prims

fn tensor_size(a: &mut Args) -> R {
    let t = a.tensor(0)?;
    if a.len() > 1 {
        return Ok(IValue::Int(t.size(a.int(1)?)? as i64));
    }
    Ok(IValue::List(List::new(
        Type::Int,
        t.shape().iter().map(|&d| IValue::Int(d as i64)).collect(),
    )))
}
fn tensor_dim(a: &mut Args) -> R {
    Ok(IValue::Int(a.tensor(0)?.dim() as i64))
}
fn tensor_numel(a: &mut Args) -> R {
    Ok(IValue::Int(a.tensor(0)?.numel() as i64))
}
fn tensor_dtype(a: &mut Args) -> R {
    Ok(IValue::Int(a.tensor(0)?.dtype().to_scalar_type()))
}
/// `prim::tolist(tensor, dim, elem)`: nested lists of `dim` levels; elem 0 int, 1 float,
/// 2 bool, 3 complex (the annotation the compiler saw; it must match the tensor).
fn tolist(a: &mut Args) -> R {
    let t = a.tensor(0)?;
    let dim = a.int(1)?;
    let code = a.int(2)?;
    if dim != t.dim() as i64 {
        return Err(err(format!(
            "Output annotation list dimension and runtime tensor dimension must match for tolist() ({dim} vs {})",
            t.dim()
        )));
    }
    let (elem_type, dtype_ok) = match code {
        0 => (Type::Int, t.dtype().is_integral(false)),
        1 => (Type::Float, t.dtype().is_floating_point()),
        2 => (Type::Bool, t.dtype() == DType::Bool),
        3 => (Type::Complex, t.dtype().is_complex()),
        other => return Err(err(format!("prim::tolist: unknown element code {other}"))),
    };
    if !dtype_ok {
        return Err(err(format!(
            "Output annotation element type and runtime tensor element type must match for tolist(): {elem_type} vs {}",
            t.dtype()
        )));
    }
    let flat: Vec<IValue> = match code {
        0 => t.to_vec::<i64>()?.into_iter().map(IValue::Int).collect(),
        1 => t.to_vec::<f64>()?.into_iter().map(IValue::Double).collect(),
        2 => t.to_vec::<bool>()?.into_iter().map(IValue::Bool).collect(),
        _ => t
            .to_vec::<num_complex::Complex64>()?
            .into_iter()
            .map(IValue::Complex)
            .collect(),
    };
    Ok(nest_list(&flat, t.shape(), elem_type))
}

/// `flat` (row-major) as nested lists of `shape`.
fn nest_list(flat: &[IValue], shape: &[usize], elem_type: Type) -> IValue {
    match shape {
        [] => flat.first().cloned().unwrap_or_default(),
        [_] => IValue::List(List::new(elem_type, flat.to_vec())),
        [n, rest @ ..] => {
            let inner_type = rest.iter().fold(elem_type.clone(), |t, _| Type::list(t));
            let chunk = rest.iter().product::<usize>();
            let items = (0..*n)
                .map(|i| nest_list(&flat[i * chunk..(i + 1) * chunk], rest, elem_type.clone()))
                .collect();
            IValue::List(List::new(inner_type, items))
        }
    }
}

/// `device.type`: `cpu`, `cuda`, ...
fn device_type(a: &mut Args) -> R {
    match a.get(0)? {
        IValue::Device(d) => Ok(IValue::str(d.type_name())),
        other => Err(err(format!("prim::type of {}", other.kind_name()))),
    }
}

/// `device.index`: None when the device has no index.
fn device_index(a: &mut Args) -> R {
    match a.get(0)? {
        IValue::Device(d) if d.index >= 0 => Ok(IValue::Int(d.index)),
        IValue::Device(_) => Ok(IValue::None),
        other => Err(err(format!("prim::index of {}", other.kind_name()))),
    }
}

fn tensor_device(a: &mut Args) -> R {
    match a.get(0)? {
        IValue::Tensor(_) => Ok(IValue::Device(Device::CPU)),
        IValue::String(s) => Device::parse(s).map(IValue::Device).ok_or_else(|| {
            err(format!(
                "Expected one of cpu, cuda, ... device type at start of device string: {s}"
            ))
        }),
        other => Err(err(format!("device() of {}", other.kind_name()))),
    }
}
fn device_with_index(a: &mut Args) -> R {
    let kind = a.str(0)?;
    let idx = a.int(1)?;
    Device::parse(&kind)
        .map(|d| {
            IValue::Device(Device {
                kind: d.kind,
                index: idx,
            })
        })
        .ok_or_else(|| err(format!("unknown device type {kind}")))
}
fn tensor_layout(a: &mut Args) -> R {
    a.tensor(0)?;
    Ok(IValue::Int(0))
}
fn is_false(a: &mut Args) -> R {
    a.tensor(0)?;
    Ok(IValue::Bool(false))
}
fn is_true(a: &mut Args) -> R {
    a.tensor(0)?;
    Ok(IValue::Bool(true))
}
fn requires_grad(a: &mut Args) -> R {
    Ok(IValue::Bool(a.tensor(0)?.requires_grad()))
}
fn itemsize(a: &mut Args) -> R {
    Ok(IValue::Int(a.tensor(0)?.dtype().size() as i64))
}
fn nbytes(a: &mut Args) -> R {
    let t = a.tensor(0)?;
    Ok(IValue::Int((t.numel() * t.dtype().size()) as i64))
}
fn prim_name(_a: &mut Args) -> R {
    Ok(IValue::None)
}
fn constant_true(_a: &mut Args) -> R {
    Ok(IValue::Bool(true))
}
fn constant_false(_a: &mut Args) -> R {
    Ok(IValue::Bool(false))
}
fn is_grad_enabled(_a: &mut Args) -> R {
    Ok(IValue::Bool(super::grad_mode::is_grad_enabled()))
}
fn set_grad_enabled(a: &mut Args) -> R {
    super::grad_mode::set_grad_enabled(a.bool(0)?);
    Ok(IValue::None)
}
fn unwrap_optional(a: &mut Args) -> R {
    match a.take(0)? {
        IValue::None => Err(err("Unwrapping null optional")),
        v => Ok(v),
    }
}
fn enum_name(a: &mut Args) -> R {
    match a.get(0)? {
        IValue::Enum(e) => Ok(IValue::String(e.name.clone())),
        other => Err(err(format!("prim::EnumName of {}", other.kind_name()))),
    }
}
fn enum_value(a: &mut Args) -> R {
    match a.get(0)? {
        IValue::Enum(e) => Ok(e.value.clone()),
        other => Err(err(format!("prim::EnumValue of {}", other.kind_name()))),
    }
}
fn hash(a: &mut Args) -> R {
    use std::hash::{Hash, Hasher};
    let k = crate::values::ivalue::dict_key(a.get(0)?).ok_or_else(|| err("unhashable value"))?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    k.hash(&mut h);
    Ok(IValue::Int(h.finish() as i64))
}
fn assert_scalar(a: &mut Args) -> R {
    if num(a, 0)?.f() == 0.0 {
        return Err(err(python_str(a.get(1)?).to_string()));
    }
    Ok(IValue::None)
}
fn tuple_index_kernel(a: &mut Args) -> R {
    getitem(a)
}
fn string_index(a: &mut Args) -> R {
    getitem(a)
}
fn bin_hex_oct(a: &Args, radix: u32) -> R {
    let i = a.int(0)?;
    let (sign, v) = if i < 0 {
        ("-", i.unsigned_abs())
    } else {
        ("", i as u64)
    };
    Ok(IValue::str(match radix {
        2 => format!("{sign}0b{v:b}"),
        8 => format!("{sign}0o{v:o}"),
        _ => format!("{sign}0x{v:x}"),
    }))
}
fn bin(a: &mut Args) -> R {
    bin_hex_oct(a, 2)
}
fn oct(a: &mut Args) -> R {
    bin_hex_oct(a, 8)
}
fn hex(a: &mut Args) -> R {
    bin_hex_oct(a, 16)
}
fn rangelist(a: &mut Args) -> R {
    let n = a.int(0)?;
    if n > (1 << 28) {
        return Err(err("range is too large"));
    }
    Ok(IValue::List(List::new(
        Type::Int,
        (0..n.max(0)).map(IValue::Int).collect(),
    )))
}

// ---------------------------------------------------------------------------------------------

const NUM2: &[&str] = &[
    "int",
    "float",
    "int_float",
    "float_int",
    "complex",
    "complex_float",
    "complex_int",
    "float_complex",
    "int_complex",
    // `.Scalar` is not listed: for these names it is the tensor overload
    // (`aten::add.Scalar(Tensor self, Scalar other, ...)`), registered by the tensor families.
    "Scalar_Scalar",
];
const DICT_KEYS: &[&str] = &["str", "int", "float", "bool", "complex", "Tensor"];

/// The generic number families below list every combination; PyTorch defines a subset per
/// function, and only those are registered.
fn add_overloads(r: &mut Registry, op: &str, overloads: &[&str], k: super::Kernel) {
    r.add_defined_overloads(op, overloads, k);
}

/// Register `name` unless another family already did (names shared with tensor ops), and only
/// if PyTorch defines it.
fn add_if_absent(r: &mut Registry, name: &str, k: super::Kernel) {
    if !r.contains(name) {
        r.add_if_defined(name, k);
    }
}

pub(crate) fn register(r: &mut Registry) {
    // arithmetic on numbers (and str/list concatenation / repetition)
    for (op, k) in [
        ("aten::add", add as super::Kernel),
        ("aten::sub", sub),
        ("aten::mul", mul),
        ("aten::div", div),
        ("aten::floordiv", floordiv),
        ("aten::remainder", remainder),
        ("aten::fmod", fmod),
        ("aten::pow", pow),
        ("aten::eq", eq),
        ("aten::ne", ne),
        ("aten::lt", lt),
        ("aten::le", le),
        ("aten::gt", gt),
        ("aten::ge", ge),
        ("aten::atan2", atan2),
        ("aten::copysign", copysign),
        ("aten::log", log),
        ("prim::min", min),
        ("prim::max", max),
        ("aten::mathremainder", math_remainder),
        ("aten::divmod", divmod),
    ] {
        add_overloads(r, op, NUM2, k);
        add_if_absent(r, op, k);
    }
    r.add_all(&["aten::add.str", "aten::add.t"], add);
    r.add_all(&["aten::mul.left_t", "aten::mul.right_"], mul);
    r.add("aten::pow.int_to_int", pow);
    add_overloads(
        r,
        "aten::log",
        &[
            "Scalar",
            "int_int",
            "float_float",
            "int_float",
            "float_int",
            "complex_complex",
        ],
        log,
    );
    for suffix in [
        "bool",
        "str",
        "device",
        "enum",
        "int_list",
        "float_list",
        "bool_list",
        "str_list",
        "Tensor_list",
    ] {
        r.add(&format!("aten::eq.{suffix}"), eq);
        r.add(&format!("aten::ne.{suffix}"), ne);
    }
    r.add("aten::lt.str", lt);
    r.add("aten::le.str", le);
    r.add("aten::gt.str", gt);
    r.add("aten::ge.str", ge);
    for suffix in [
        "int_list",
        "float_list",
        "bool_list",
        "self_int",
        "self_float",
        "self_bool",
    ] {
        r.add(&format!("prim::min.{suffix}"), min);
        r.add(&format!("prim::max.{suffix}"), max);
    }
    for (op, k) in [
        ("aten::neg", neg as super::Kernel),
        ("prim::abs", abs),
        ("aten::sqrt", sqrt),
        ("aten::exp", exp),
        ("aten::log1p", log1p),
        ("aten::expm1", expm1),
        ("aten::log10", log10),
        ("aten::sin", sin),
        ("aten::cos", cos),
        ("aten::tan", tan),
        ("aten::asin", asin),
        ("aten::acos", acos),
        ("aten::atan", atan),
        ("aten::sinh", sinh),
        ("aten::cosh", cosh),
        ("aten::tanh", tanh),
        ("aten::asinh", asinh),
        ("aten::acosh", acosh),
        ("aten::atanh", atanh),
        ("aten::fabs", fabs),
        ("aten::degrees", degrees),
        ("aten::radians", radians),
        ("aten::erf", erf),
        ("aten::erfc", erfc),
        ("aten::gamma", gamma),
        ("aten::lgamma", lgamma),
        ("aten::floor", floor),
        ("aten::ceil", ceil),
        ("aten::round", round),
        ("aten::isnan", isnan),
        ("aten::isinf", isinf),
        ("aten::isfinite", isfinite),
    ] {
        add_overloads(r, op, &["int", "float", "Scalar", "complex", "bool"], k);
    }
    // `prim::abs(Tensor x)` (Python's `abs()` on a tensor) is the tensor kernel
    r.add("prim::abs", super::elementwise::abs);
    r.add("aten::gcd.int", gcd);
    r.add("aten::factorial.int", factorial);
    r.add_all(&["aten::__and__.bool", "aten::__and__.int"], and);
    r.add_all(&["aten::__or__.bool", "aten::__or__.int"], or);
    r.add_all(&["aten::__xor__.bool", "aten::__xor__.int"], xor);
    r.add("aten::__lshift__.int", lshift);
    r.add("aten::__rshift__.int", rshift);
    r.add("aten::__not__", not);
    r.add("aten::__is__", is);
    r.add("aten::__isnot__", isnot);
    r.add("aten::__round_to_zero_floordiv.int", |a| {
        let (p, q) = (a.int(0)?, a.int(1)?);
        if q == 0 {
            return Err(exception("ZeroDivisionError", "integer division by zero"));
        }
        Ok(IValue::Int(p.wrapping_div(q)))
    });

    // conversions
    add_overloads(
        r,
        "aten::Int",
        &["Tensor", "Scalar", "bool", "float", "str", "int"],
        to_int,
    );
    add_overloads(
        r,
        "aten::Float",
        &["Tensor", "Scalar", "bool", "int", "str", "float"],
        to_float,
    );
    add_overloads(
        r,
        "aten::Bool",
        &["Tensor", "int", "float", "Scalar", "bool"],
        to_bool,
    );
    add_overloads(
        r,
        "aten::Complex",
        &[
            "Scalar",
            "Tensor_bool",
            "Tensor_float",
            "Tensor_int",
            "bool_Tensor",
            "bool_bool",
            "bool_float",
            "bool_int",
            "float_Tensor",
            "float_bool",
            "float_float",
            "float_int",
            "int_Tensor",
            "int_bool",
            "int_float",
            "int_int",
        ],
        to_complex,
    );
    r.add_overloads(
        "prim::ModuleContainerIndex",
        &["dict", "list"],
        module_container_index,
    );
    r.add("aten::ScalarImplicit", scalar_implicit);
    r.add("aten::IntImplicit", |a| implicit_number(a, 'i'));
    r.add("aten::FloatImplicit", |a| implicit_number(a, 'f'));
    r.add("aten::ComplexImplicit", |a| implicit_number(a, 'c'));
    add_if_absent(r, "aten::item", scalar_implicit_any);
    r.add_all(
        &["prim::NumToTensor.Scalar", "prim::NumToTensor.bool"],
        num_to_tensor,
    );

    // lists (kernels dispatch on list / dict / str / tuple at run time)
    add_overloads(r, "aten::len", &["t", "any", "str", "Tensor"], len);
    add_overloads(r, "aten::__getitem__", &["t", "str"], getitem);
    r.add("aten::select.t", getitem);
    r.add("prim::TupleIndex", tuple_index_kernel);
    r.add("prim::StringIndex", string_index);
    r.add("aten::_set_item.t", set_item);
    r.add("aten::append.t", append);
    r.add("aten::insert.t", insert);
    r.add("aten::pop.t", pop);
    r.add("aten::Delete.t", delete);
    r.add("aten::extend.t", extend);
    r.add("aten::add_.t", add_inplace);
    r.add("aten::clear.t", clear);
    r.add("aten::copy.t", copy);
    r.add("aten::list.t", copy);
    r.add("aten::list", copy);
    r.add("aten::slice.t", list_slice);
    r.add("aten::slice.str", list_slice);
    add_overloads(
        r,
        "aten::index",
        &[
            "list_int",
            "list_float",
            "list_bool",
            "list_str",
            "list_Tensor",
        ],
        list_index,
    );
    r.add("aten::index.str", str_index);
    r.add("aten::count", count);
    add_overloads(
        r,
        "aten::count",
        &["int", "float", "bool", "str", "Tensor"],
        count,
    );
    add_overloads(
        r,
        "aten::remove",
        &["int", "float", "bool", "str", "Tensor"],
        remove,
    );
    r.add("aten::reverse.t", reverse);
    add_overloads(
        r,
        "aten::sort",
        &["int", "float", "bool", "str", "any"],
        sort,
    );
    add_overloads(
        r,
        "aten::sorted",
        &["int", "float", "bool", "str", "any"],
        sorted,
    );
    add_overloads(
        r,
        "aten::__contains__",
        &["int_list", "float_list", "str_list"],
        contains,
    );
    add_overloads(r, "aten::sum", &["int", "float", "bool", "complex"], sum);
    add_overloads(r, "aten::any", &["int", "float", "bool", "str"], any);
    add_overloads(r, "aten::all", &["int", "float", "bool"], all);
    r.add("aten::__range_length", range_length);
    r.add("aten::__derive_index", derive_index);
    r.add("prim::rangelist", rangelist);

    // dicts, every key type
    for key in DICT_KEYS {
        r.add(&format!("aten::__getitem__.Dict_{key}"), getitem);
        r.add(&format!("aten::_set_item.{key}"), set_item);
        r.add(&format!("aten::keys.{key}"), keys);
        r.add(&format!("aten::values.{key}"), values);
        r.add(&format!("aten::items.{key}"), items);
        r.add(&format!("aten::get.{key}"), get);
        r.add(&format!("aten::get.default_{key}"), get);
        r.add(&format!("aten::__contains__.{key}"), contains);
        r.add(&format!("aten::len.Dict_{key}"), len);
        r.add(&format!("aten::pop.Dict_{key}"), pop);
        r.add(&format!("aten::pop.Dict_default_{key}"), pop);
        r.add(&format!("aten::Delete.Dict_{key}"), delete);
        r.add(&format!("aten::setdefault.{key}"), setdefault);
        r.add(&format!("aten::update.{key}"), update);
        r.add(&format!("aten::popitem.{key}"), popitem);
        r.add(&format!("aten::clear.{key}"), clear);
        r.add(&format!("aten::copy.Dict_{key}"), copy);
        r.add(&format!("aten::dict.Dict_{key}"), dict);
        r.add(&format!("aten::dict.{key}"), dict);
    }
    r.add("aten::dict", dict);

    // strings
    r.add("aten::str", to_str);
    r.add("aten::format", format);
    r.add("aten::join", join);
    r.add("aten::split.str", split);
    r.add("aten::rsplit", rsplit);
    r.add("aten::strip", strip);
    r.add("aten::lstrip", lstrip);
    r.add("aten::rstrip", rstrip);
    r.add("aten::lower", lower);
    r.add("aten::upper", upper);
    r.add("aten::swapcase", swapcase);
    r.add("aten::capitalize", capitalize);
    r.add("aten::title", title);
    r.add("aten::replace", replace);
    r.add("aten::startswith", startswith);
    r.add("aten::endswith", endswith);
    r.add("aten::find", find);
    r.add("aten::rfind", rfind);
    r.add("aten::rindex", rindex);
    r.add("aten::isdigit", isdigit);
    r.add("aten::isdecimal", isdigit);
    r.add("aten::isnumeric", isdigit);
    r.add("aten::isalpha", isalpha);
    r.add("aten::isalnum", isalnum);
    r.add("aten::isspace", isspace);
    r.add("aten::islower", islower);
    r.add("aten::isupper", isupper);
    r.add("aten::zfill", zfill);
    r.add("aten::ljust", ljust);
    r.add("aten::rjust", rjust);
    r.add("aten::center", center);
    r.add("aten::ord", ord);
    r.add("aten::chr", chr);
    r.add("aten::bin", bin);
    r.add("aten::oct", oct);
    r.add("aten::hex", hex);
    r.add("aten::splitlines", splitlines);
    r.add("aten::__contains__.str", contains);
    r.add("aten::hash.generic", hash);

    // tensor queries (the shape family may already provide the tensor ones)
    for (name, k) in [
        ("aten::size", tensor_size as super::Kernel),
        ("aten::size.int", tensor_size),
        ("aten::dim", tensor_dim),
        ("aten::numel", tensor_numel),
        ("aten::sym_size", tensor_size),
        ("aten::sym_size.int", tensor_size),
        ("aten::sym_numel", tensor_numel),
    ] {
        add_if_absent(r, name, k);
    }
    r.add("prim::dtype", tensor_dtype);
    r.add("prim::device", tensor_device);
    r.add("aten::device", tensor_device);
    r.add("aten::device.with_index", device_with_index);
    r.add("prim::layout", tensor_layout);
    r.add("prim::type", device_type);
    r.add("prim::tolist", tolist);
    r.add("prim::index", device_index);
    for name in [
        "prim::is_cuda",
        "prim::is_xpu",
        "prim::is_mps",
        "prim::is_meta",
        "prim::is_sparse",
        "prim::is_sparse_csr",
        "prim::is_quantized",
        "prim::is_mkldnn",
        "prim::is_vulkan",
        "prim::is_ipu",
        "prim::is_maia",
        "prim::is_mtia",
        "prim::is_nested",
        "prim::is_xla",
    ] {
        r.add(name, is_false);
    }
    r.add("prim::is_cpu", is_true);
    r.add("prim::requires_grad", requires_grad);
    r.add("prim::itemsize", itemsize);
    r.add("prim::nbytes", nbytes);
    r.add("prim::name", prim_name);
    r.add("prim::EnumName", enum_name);
    add_overloads(r, "prim::EnumValue", &["int", "float", "str"], enum_value);
    r.add("aten::_unwrap_optional", unwrap_optional);
    r.add("aten::is_scripting", constant_true);
    r.add("aten::_get_tracing_state", constant_false);
    r.add("aten::_is_tracing", constant_false);
    r.add("aten::is_grad_enabled", is_grad_enabled);
    r.add("aten::has_torch_function", constant_false);
    r.add("aten::is_autocast_enabled", constant_false);
    r.add("aten::is_autocast_cpu_enabled", constant_false);
    r.add("aten::set_grad_enabled", set_grad_enabled);
    r.add("aten::_assert_scalar", assert_scalar);
}

fn scalar_implicit_any(a: &mut Args) -> R {
    let t = a.tensor(0)?;
    if t.numel() != 1 {
        return Err(err(format!(
            "a Tensor with {} elements cannot be converted to Scalar",
            t.numel()
        )));
    }
    Ok(IValue::from(t.item()?))
}
