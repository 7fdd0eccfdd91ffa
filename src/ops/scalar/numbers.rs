//! Numbers: int/float/complex/bool arithmetic, comparisons and equality of values
//! (`values_equal`), and the `math` functions on numbers.

use super::*;

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

#[derive(Clone, Copy, Debug)]
pub(super) enum Num {
    I(i64),
    F(f64),
    C(Complex64),
}

impl Num {
    pub(super) fn f(self) -> f64 {
        match self {
            Num::I(i) => i as f64,
            Num::F(f) => f,
            Num::C(c) => c.re,
        }
    }
    pub(super) fn c(self) -> Complex64 {
        match self {
            Num::C(c) => c,
            n => Complex64::new(n.f(), 0.0),
        }
    }
    pub(super) fn value(self) -> IValue {
        match self {
            Num::I(i) => IValue::Int(i),
            Num::F(f) => IValue::Double(f),
            Num::C(c) => IValue::Complex(c),
        }
    }
}

pub(super) fn num_of(v: &IValue) -> Option<Num> {
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

pub(super) fn num(a: &Args, i: usize) -> crate::Result<Num> {
    let v = a.get(i)?;
    num_of(v).ok_or_else(|| Error::BadArgument {
        op: a.op.to_string(),
        index: i,
        expected: "a number",
        got: v.kind_name().to_string(),
    })
}

pub(super) fn binary(
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

pub(super) fn no_complex(
    op: &'static str,
) -> impl Fn(Complex64, Complex64) -> crate::Result<Complex64> {
    move |_, _| Err(err(format!("{op} is not defined for complex numbers")))
}

pub(super) fn add(a: &mut Args) -> R {
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
pub(super) fn sub(a: &mut Args) -> R {
    binary(
        a,
        |p, q| Ok(Num::I(p.wrapping_sub(q))),
        |p, q| Ok(p - q),
        |p, q| Ok(p - q),
    )
}
pub(super) fn mul(a: &mut Args) -> R {
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
pub(super) fn div(a: &mut Args) -> R {
    binary(
        a,
        |p, q| Ok(Num::F(p as f64 / q as f64)),
        |p, q| Ok(p / q),
        |p, q| Ok(complex_div(p, q)),
    )
}

/// Complex division with Smith's scaling, as `c10::complex` does (rounds like PyTorch).
pub(super) fn complex_div(x: Complex64, y: Complex64) -> Complex64 {
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

pub(super) fn floordiv_int(p: i64, q: i64) -> crate::Result<i64> {
    if q == 0 {
        return Err(script_error("division by 0"));
    }
    let d = p.wrapping_div(q);
    Ok(if (p % q != 0) && ((p < 0) != (q < 0)) {
        d - 1
    } else {
        d
    })
}
pub(super) fn mod_int(p: i64, q: i64) -> crate::Result<i64> {
    if q == 0 {
        return Err(script_error(
            "ZeroDivisionError: integer division or modulo by zero",
        ));
    }
    let r = p.wrapping_rem(q);
    Ok(if r != 0 && ((r < 0) != (q < 0)) {
        r + q
    } else {
        r
    })
}
/// Python's `%` on floats, as PyTorch computes it (`fmod`, then the divisor's sign): a zero
/// divisor gives NaN, not an error.
pub(super) fn mod_float(p: f64, q: f64) -> f64 {
    let r = p % q;
    if r != 0.0 && ((r < 0.0) != (q < 0.0)) {
        r + q
    } else {
        r
    }
}
pub(super) fn floordiv(a: &mut Args) -> R {
    binary(
        a,
        |p, q| floordiv_int(p, q).map(Num::I),
        // `floor(a / b)`: a zero divisor gives an infinity or NaN, as in PyTorch
        |p, q| Ok((p / q).floor()),
        no_complex("//"),
    )
}
pub(super) fn remainder(a: &mut Args) -> R {
    binary(
        a,
        |p, q| mod_int(p, q).map(Num::I),
        |p, q| Ok(mod_float(p, q)),
        no_complex("%"),
    )
}
/// `math.remainder`: IEEE 754 remainder (quotient rounded half to even), always a float.
pub(super) fn math_remainder(a: &mut Args) -> R {
    let (x, y) = (num(a, 0)?.f(), num(a, 1)?.f());
    // a zero divisor gives NaN, as C's `remainder` (and PyTorch) do
    Ok(IValue::Double(libm::remainder(x, y)))
}
pub(super) fn fmod(a: &mut Args) -> R {
    let (x, y) = (num(a, 0)?.f(), num(a, 1)?.f());
    Ok(IValue::Double(x % y))
}
pub(super) fn divmod(a: &mut Args) -> R {
    let (x, y) = (num(a, 0)?, num(a, 1)?);
    Ok(IValue::Tuple(Tuple::new(match (x, y) {
        (Num::I(_), Num::I(0)) => {
            return Err(script_error(
                "ZeroDivisionError: integer division or modulo by zero",
            ))
        }
        (Num::I(p), Num::I(q)) => vec![
            IValue::Int(floordiv_int(p, q)?),
            IValue::Int(mod_int(p, q)?),
        ],
        _ => {
            let (p, q) = (x.f(), y.f());
            if q == 0.0 {
                return Err(script_error("ZeroDivisionError: float divmod()"));
            }
            let m = mod_float(p, q);
            vec![IValue::Double(((p - m) / q).round()), IValue::Double(m)]
        }
    })))
}
pub(super) fn pow(a: &mut Args) -> R {
    pow_as(a, false)
}
/// `pow.int_to_int`: integer operands, a float result.
pub(super) fn pow_int_to_int(a: &mut Args) -> R {
    pow_as(a, true)
}
fn pow_as(a: &mut Args, int_result: bool) -> R {
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
pub(super) fn neg(a: &mut Args) -> R {
    Ok(match num(a, 0)? {
        Num::I(i) => IValue::Int(i.wrapping_neg()),
        Num::F(f) => IValue::Double(-f),
        Num::C(c) => IValue::Complex(-c),
    })
}
pub(super) fn abs(a: &mut Args) -> R {
    Ok(match num(a, 0)? {
        Num::I(i) => IValue::Int(i.wrapping_abs()),
        Num::F(f) => IValue::Double(f.abs()),
        Num::C(c) => IValue::Double(c.norm()),
    })
}

pub(super) fn compare_nums(x: Num, y: Num) -> Option<Ordering> {
    match (x, y) {
        (Num::I(p), Num::I(q)) => Some(p.cmp(&q)),
        _ => x.f().partial_cmp(&y.f()),
    }
}

/// Deep equality as `==` on TorchScript values.
/// Equality of tensors inside containers (`list.index`, `count`, `remove`, `in`, `==` of
/// lists): as c10's `_fastEqualsForContainer`, the same tensor is equal to itself, otherwise
/// `bool(a == b)`: the broadcast comparison must have exactly one element.
pub(super) fn tensors_equal(p: &crate::Tensor, q: &crate::Tensor) -> crate::Result<bool> {
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
        0 => Err(script_error(
            "Boolean value of Tensor with no values is ambiguous",
        )),
        1 => Ok(p.item()?.to_c64() == q.item()?.to_c64()),
        _ => Err(script_error(
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

pub(super) fn seq_equal(a: &[IValue], b: &[IValue]) -> crate::Result<bool> {
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

pub(super) fn num_of_plain(v: &IValue) -> Option<Num> {
    match v {
        IValue::Tensor(_) => None,
        v => num_of(v),
    }
}

/// Python ordering of two values (numbers, strings, lists, tuples), for `<` and sorting.
pub(super) fn order(x: &IValue, y: &IValue) -> crate::Result<Ordering> {
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

pub(super) fn order_seq(a: &[IValue], b: &[IValue]) -> crate::Result<Ordering> {
    for (x, y) in a.iter().zip(b) {
        let o = order(x, y)?;
        if o != Ordering::Equal {
            return Ok(o);
        }
    }
    Ok(a.len().cmp(&b.len()))
}

pub(super) fn has_nan(a: &IValue, b: &IValue) -> bool {
    matches!(a, IValue::Double(x) if x.is_nan()) || matches!(b, IValue::Double(x) if x.is_nan())
}

pub(super) fn eq(a: &mut Args) -> R {
    Ok(IValue::Bool(values_equal(a.get(0)?, a.get(1)?)?))
}
pub(super) fn ne(a: &mut Args) -> R {
    Ok(IValue::Bool(!values_equal(a.get(0)?, a.get(1)?)?))
}
pub(super) fn cmp_op(a: &Args, f: fn(Ordering) -> bool) -> R {
    let (x, y) = (a.get(0)?, a.get(1)?);
    if has_nan(x, y) {
        return Ok(IValue::Bool(false));
    }
    Ok(IValue::Bool(f(order(x, y)?)))
}
pub(super) fn lt(a: &mut Args) -> R {
    cmp_op(a, |o| o == Ordering::Less)
}
pub(super) fn le(a: &mut Args) -> R {
    cmp_op(a, |o| o != Ordering::Greater)
}
pub(super) fn gt(a: &mut Args) -> R {
    cmp_op(a, |o| o == Ordering::Greater)
}
pub(super) fn ge(a: &mut Args) -> R {
    cmp_op(a, |o| o != Ordering::Less)
}

pub(super) fn is(a: &mut Args) -> R {
    Ok(IValue::Bool(a.get(0)?.is_same(a.get(1)?)))
}
pub(super) fn isnot(a: &mut Args) -> R {
    Ok(IValue::Bool(!a.get(0)?.is_same(a.get(1)?)))
}
pub(super) fn not(a: &mut Args) -> R {
    Ok(IValue::Bool(!a.bool(0)?))
}
pub(super) fn bitwise(a: &Args, f: fn(i64, i64) -> i64) -> R {
    match (a.get(0)?, a.get(1)?) {
        (IValue::Bool(x), IValue::Bool(y)) => Ok(IValue::Bool(f(*x as i64, *y as i64) != 0)),
        _ => Ok(IValue::Int(f(a.int(0)?, a.int(1)?))),
    }
}
pub(super) fn and(a: &mut Args) -> R {
    bitwise(a, |x, y| x & y)
}
pub(super) fn or(a: &mut Args) -> R {
    bitwise(a, |x, y| x | y)
}
pub(super) fn xor(a: &mut Args) -> R {
    bitwise(a, |x, y| x ^ y)
}
pub(super) fn lshift(a: &mut Args) -> R {
    Ok(IValue::Int(
        a.int(0)?.wrapping_shl(a.int(1)?.clamp(0, 63) as u32),
    ))
}
pub(super) fn rshift(a: &mut Args) -> R {
    Ok(IValue::Int(
        a.int(0)?.wrapping_shr(a.int(1)?.clamp(0, 63) as u32),
    ))
}

pub(super) fn min_max(a: &mut Args, want: Ordering) -> R {
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
pub(super) fn min(a: &mut Args) -> R {
    min_max(a, Ordering::Less)
}
pub(super) fn max(a: &mut Args) -> R {
    min_max(a, Ordering::Greater)
}

pub(super) fn unary_float(a: &Args, f: fn(f64) -> f64, c: Option<fn(Complex64) -> Complex64>) -> R {
    match (num(a, 0)?, c) {
        (Num::C(z), Some(cf)) => Ok(IValue::Complex(cf(z))),
        (Num::C(_), None) => Err(err(format!("{} is not defined for complex numbers", a.op))),
        (n, _) => Ok(IValue::Double(f(n.f()))),
    }
}

macro_rules! math_fns {
    ($($name:ident => $f:expr, $c:expr;)*) => {
        $(pub(super) fn $name(a: &mut Args) -> R { unary_float(a, $f, $c) })*
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
    // PyTorch's math builtins call the C library's; libm is a port of musl's, so large
    // arguments keep their precision (erfc(10) is 2e-45, not 1 - erf(10) = 0; lgamma(200) is
    // finite where the gamma function itself overflows).
    erf => libm::erf, None;
    erfc => libm::erfc, None;
    gamma => libm::tgamma, None;
    lgamma => libm::lgamma, None;
}

pub(super) fn log(a: &mut Args) -> R {
    if a.len() == 2 {
        let (x, b) = (num(a, 0)?, num(a, 1)?);
        return Ok(match (x, b) {
            (Num::C(_), _) | (_, Num::C(_)) => IValue::Complex(x.c().ln() / b.c().ln()),
            _ => IValue::Double(x.f().ln() / b.f().ln()),
        });
    }
    unary_float(a, f64::ln, Some(Complex64::ln))
}
pub(super) fn atan2(a: &mut Args) -> R {
    Ok(IValue::Double(num(a, 0)?.f().atan2(num(a, 1)?.f())))
}
pub(super) fn copysign(a: &mut Args) -> R {
    Ok(IValue::Double(num(a, 0)?.f().copysign(num(a, 1)?.f())))
}
pub(super) fn float_to_int(f: f64) -> crate::Result<i64> {
    if !f.is_finite() {
        return Err(err(format!("cannot convert float {f} to integer")));
    }
    Ok(f as i64)
}
pub(super) fn floor(a: &mut Args) -> R {
    match num(a, 0)? {
        Num::I(i) => Ok(IValue::Int(i)),
        n => Ok(IValue::Int(float_to_int(n.f().floor())?)),
    }
}
pub(super) fn ceil(a: &mut Args) -> R {
    match num(a, 0)? {
        Num::I(i) => Ok(IValue::Int(i)),
        n => Ok(IValue::Int(float_to_int(n.f().ceil())?)),
    }
}
pub(super) fn round(a: &mut Args) -> R {
    // every overload returns a float (`round.Scalar(2)` is 2.0 in PyTorch)
    Ok(IValue::Double(num(a, 0)?.f().round_ties_even()))
}
pub(super) fn isnan(a: &mut Args) -> R {
    Ok(IValue::Bool(match num(a, 0)? {
        Num::C(c) => c.is_nan(),
        n => n.f().is_nan(),
    }))
}
pub(super) fn isinf(a: &mut Args) -> R {
    Ok(IValue::Bool(match num(a, 0)? {
        Num::C(c) => c.is_infinite(),
        n => n.f().is_infinite(),
    }))
}
pub(super) fn isfinite(a: &mut Args) -> R {
    Ok(IValue::Bool(match num(a, 0)? {
        Num::C(c) => c.is_finite(),
        n => n.f().is_finite(),
    }))
}
pub(super) fn gcd(a: &mut Args) -> R {
    let (mut x, mut y) = (a.int(0)?.unsigned_abs(), a.int(1)?.unsigned_abs());
    while y != 0 {
        (x, y) = (y, x % y);
    }
    Ok(IValue::Int(x as i64))
}
/// `math.ldexp(x, i)`: `x * 2**i` as C's `ldexp` (PyTorch passes `i` as a C `int`).
pub(super) fn ldexp(a: &mut Args) -> R {
    Ok(IValue::Double(libm::ldexp(a.double(0)?, a.int(1)? as i32)))
}
/// `math.frexp(x)`: the mantissa in [0.5, 1) and the exponent, as C's `frexp`.
pub(super) fn frexp(a: &mut Args) -> R {
    let (m, e) = libm::frexp(a.double(0)?);
    Ok(IValue::Tuple(Tuple::new(vec![
        IValue::Double(m),
        IValue::Int(i64::from(e)),
    ])))
}
/// `angle` of a number as TorchScript computes it: pi for a negative real, else 0 (NaN
/// included), the argument of a complex; a float in every case.
fn angle_of(n: Num) -> f64 {
    match n {
        Num::C(c) => c.arg(),
        n if n.f() < 0.0 => std::f64::consts::PI,
        _ => 0.0,
    }
}
pub(super) fn angle(a: &mut Args) -> R {
    Ok(IValue::Double(angle_of(num(a, 0)?)))
}
/// `angle.Scalar`: the same angle rounded through float32, as PyTorch returns it.
pub(super) fn angle_scalar(a: &mut Args) -> R {
    Ok(IValue::Double(angle_of(num(a, 0)?) as f32 as f64))
}
/// `polar(abs, angle)`: the complex `abs * (cos angle + i sin angle)`.
pub(super) fn polar(a: &mut Args) -> R {
    let (r, theta) = (num(a, 0)?.f(), num(a, 1)?.f());
    Ok(IValue::Complex(Complex64::from_polar(r, theta)))
}
/// `math.modf(x)`: (fractional part, integral part), both with the sign of `x`.
pub(super) fn modf(a: &mut Args) -> R {
    let x = a.double(0)?;
    let integral = x.trunc();
    let frac = if x.is_infinite() {
        0.0f64.copysign(x)
    } else {
        x - integral
    };
    Ok(IValue::Tuple(Tuple::new(vec![
        IValue::Double(frac),
        IValue::Double(integral),
    ])))
}
pub(super) fn factorial(a: &mut Args) -> R {
    let n = a.int(0)?;
    if n < 0 {
        return Err(script_error("factorial() not defined for negative values"));
    }
    Ok(IValue::Int(
        (1..=n).fold(1i64, |acc, k| acc.wrapping_mul(k)),
    ))
}

/// Number arithmetic, comparisons and math (and str/list concatenation and repetition, which share the operator names).
pub(super) fn register(r: &mut Registry) {
    for (op, k) in [
        ("aten::add", add as crate::ops::Kernel),
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
    r.add("aten::pow.int_to_int", pow_int_to_int);
    add_overloads(
        r,
        "aten::log",
        &["Scalar", "int_int", "float_float", "complex_complex"],
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
        ("aten::neg", neg as crate::ops::Kernel),
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
    r.add("prim::abs", crate::ops::elementwise::abs);
    r.add("aten::gcd.int", gcd);
    r.add("aten::factorial.int", factorial);
    r.add("aten::ldexp", ldexp);
    r.add("aten::frexp", frexp);
    r.add("aten::modf", modf);
    add_overloads(r, "aten::angle", &["int", "float", "complex"], angle);
    r.add("aten::angle.Scalar", angle_scalar);
    add_overloads(
        r,
        "aten::polar",
        &["int", "float", "int_float", "float_int", "Scalar_Scalar"],
        polar,
    );
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
            return Err(script_error("division by 0"));
        }
        Ok(IValue::Int(p.wrapping_div(q)))
    });
}
