//! Elementwise arithmetic, comparison, logical, bitwise and math ops with PyTorch's type
//! promotion and broadcasting. In-place variants (`add_`) cast back to self's dtype.

use super::kernels::map::{map_binary, map_ternary, map_unary, zip_inplace_f32};
use super::kernels::num::{scalar_as, Arith, IntOps, Real};
use super::kernels::operand::{
    common_dtype, float_dtype, float_unary_kernels, inplace_of, inplace_result, Operand,
};
use super::kernels::special::SpecialFn;
use super::kernels::vmath::{self, VecFn};
use super::kernels::{
    invalid_argument, not_implemented_for, rank_mismatch, value_err, wrong_dtype,
};
use super::{Args, Registry};
use crate::tensor::RankRequirement;
use crate::tensor::{DType, Element, Scalar, Tensor, TensorError};
use crate::values::IValue;
use crate::{
    dispatch_all, dispatch_int, dispatch_real, dispatch_standard, dispatch_standard_int,
    dispatch_standard_real, float_binary, float_unary,
};
use num_complex::{Complex32, Complex64};

type R = crate::Result<IValue>;

fn t(x: Tensor) -> R {
    Ok(IValue::Tensor(x))
}

/// Two operands from arguments 0 and 1.
fn operands(args: &Args<'_>) -> crate::Result<(Operand, Operand)> {
    Ok((Operand::arg(args, 0)?, Operand::arg(args, 1)?))
}

// ---------------------------------------------------------------- arithmetic

/// `a + alpha * b` (`negate`: `a - alpha * b`) with promotion.
pub(crate) fn add_sub(
    a: &Operand,
    b: &Operand,
    alpha: Scalar,
    negate: bool,
) -> crate::Result<Tensor> {
    let dt = common_dtype(&[a, b]);
    if negate && dt == DType::Bool {
        return Err(wrong_dtype(
            "sub",
            "self and other",
            "not both bool (use the `^` or `logical_xor()` operator instead)",
            dt,
        ));
    }
    if dt.is_integral(true) && matches!(alpha, Scalar::Float(_) | Scalar::Complex(_)) {
        return Err(invalid_argument(
            if negate { "sub" } else { "add" },
            "alpha",
            format!("must be integral for {dt} tensors"),
            format!("{alpha:?}"),
        ));
    }
    let (x, y) = (a.as_tensor_of(dt)?, b.as_tensor_of(dt)?);
    let unit = alpha.to_c64() == Complex64::new(1.0, 0.0);
    dispatch_standard!(dt, "add", |T| {
        let al: T = scalar_as::<T>(alpha);
        match (unit, negate) {
            (true, false) => map_binary::<T, T, T, _>(&x, &y, |p, q| p.add(q)),
            (true, true) => map_binary::<T, T, T, _>(&x, &y, |p, q| p.sub(q)),
            (false, false) => map_binary::<T, T, T, _>(&x, &y, |p, q| p.add(al.mul(q))),
            (false, true) => map_binary::<T, T, T, _>(&x, &y, |p, q| p.sub(al.mul(q))),
        }
    })
}

/// `diff(self, n=1, dim=-1, prepend=None, append=None)`: n-th forward difference along `dim`
/// (`!=` for bool tensors, as PyTorch), after concatenating `prepend` / `append`.
fn diff(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let n = args.int(1)?;
    let dim = args.int(2)?;
    if x.dim() == 0 {
        return Err(rank_mismatch(
            "diff",
            "input",
            RankRequirement::AtLeast(1),
            x.shape(),
        ));
    }
    if n < 0 {
        return Err(invalid_argument("diff", "n", "must be non-negative", n));
    }
    let d = crate::tensor::wrap_dim(dim, x.dim())?;
    let mut parts = Vec::new();
    if let Some(p) = args.opt_tensor(3)? {
        parts.push(p);
    }
    parts.push(x.clone());
    if let Some(p) = args.opt_tensor(4)? {
        parts.push(p);
    }
    let mut cur = if parts.len() == 1 {
        x
    } else {
        super::shape::cat(&parts, d as i64)?
    };
    for _ in 0..n {
        let len = cur.shape()[d] as i64;
        if len == 0 {
            break;
        }
        let hi = Operand::Tensor(super::shape::narrow(&cur, d as i64, 1, len - 1)?);
        let lo = Operand::Tensor(super::shape::narrow(&cur, d as i64, 0, len - 1)?);
        cur = if cur.dtype() == DType::Bool {
            let (h, l) = (hi.as_tensor_of(DType::Bool)?, lo.as_tensor_of(DType::Bool)?);
            map_binary::<bool, bool, bool, _>(&h, &l, |p, q| p != q)?
        } else {
            add_sub(&hi, &lo, Scalar::Int(1), true)?
        };
    }
    t(cur)
}

pub(crate) fn add(args: &mut Args<'_>) -> R {
    let (a, b) = operands(args)?;
    t(add_sub(&a, &b, args.scalar(2)?, false)?)
}
fn sub(args: &mut Args<'_>) -> R {
    let (a, b) = operands(args)?;
    t(add_sub(&a, &b, args.scalar(2)?, true)?)
}
fn rsub(args: &mut Args<'_>) -> R {
    let (a, b) = operands(args)?;
    t(add_sub(&b, &a, args.scalar(2)?, true)?)
}

/// `a * b` with promotion.
pub(crate) fn mul_op(a: &Operand, b: &Operand) -> crate::Result<Tensor> {
    let dt = common_dtype(&[a, b]);
    let (x, y) = (a.as_tensor_of(dt)?, b.as_tensor_of(dt)?);
    dispatch_all!(dt, "mul", |T| map_binary::<T, T, T, _>(&x, &y, |p, q| p
        .mul(q)))
}
fn mul(args: &mut Args<'_>) -> R {
    let (a, b) = operands(args)?;
    t(mul_op(&a, &b)?)
}

fn check_no_zero<T: Element>(y: &Tensor) -> crate::Result<()> {
    if y.read::<T>()?.view().iter().any(|v| !v.to_bool()) {
        return Err(value_err("ZeroDivisionError"));
    }
    Ok(())
}

/// Python's floor division for floats, as PyTorch's `div_floor_floating`.
#[inline]
fn div_floor_float<F: num_traits::Float>(a: F, b: F) -> F {
    let zero = F::zero();
    if b == zero {
        return a / b;
    }
    let m = a % b;
    let mut div = (a - m) / b;
    if m != zero && ((b < zero) != (m < zero)) {
        div = div - F::one();
    }
    if div != zero {
        let mut fl = div.floor();
        if div - fl > F::from(0.5).unwrap_or(F::one()) {
            fl = fl + F::one();
        }
        fl
    } else {
        zero.copysign(a / b)
    }
}

/// `a / b` with `rounding_mode` None, "trunc" or "floor".
pub(crate) fn div_op(a: &Operand, b: &Operand, mode: Option<&str>) -> crate::Result<Tensor> {
    let dt = common_dtype(&[a, b]);
    match mode {
        None => {
            let dt = float_dtype(dt);
            let (x, y) = (a.as_tensor_of(dt)?, b.as_tensor_of(dt)?);
            match dt {
                DType::Complex64 => {
                    map_binary::<Complex32, Complex32, Complex32, _>(&x, &y, |p, q| p / q)
                }
                DType::Complex128 => {
                    map_binary::<Complex64, Complex64, Complex64, _>(&x, &y, |p, q| p / q)
                }
                _ => float_binary!(&x, &y, "div", |p, q: F| p / q),
            }
        }
        Some(m @ ("trunc" | "floor")) => {
            let floor = m == "floor";
            let (x, y) = (a.as_tensor_of(dt)?, b.as_tensor_of(dt)?);
            if dt.is_integral(true) {
                if dt == DType::Bool {
                    check_no_zero::<bool>(&y)?;
                    return map_binary::<bool, bool, bool, _>(&x, &y, |p, q| {
                        p.div_trunc(q).unwrap_or(p)
                    });
                }
                dispatch_standard_int!(dt, "div", |T| {
                    check_no_zero::<T>(&y)?;
                    if floor {
                        map_binary::<T, T, T, _>(&x, &y, |p, q| p.floor_div(q).unwrap_or(p))
                    } else {
                        map_binary::<T, T, T, _>(&x, &y, |p, q| p.div_trunc(q).unwrap_or(p))
                    }
                })
            } else if floor {
                float_binary!(&x, &y, "div", |p, q: F| div_floor_float(p, q))
            } else {
                float_binary!(&x, &y, "div", |p, q: F| (p / q).trunc())
            }
        }
        Some(other) => Err(invalid_argument(
            "div",
            "rounding_mode",
            "must be None, 'trunc' or 'floor'",
            format!("'{other}'"),
        )),
    }
}

fn div(args: &mut Args<'_>) -> R {
    let (a, b) = operands(args)?;
    let mode = if args.len() > 2 {
        args.opt_str(2)?
    } else {
        None
    };
    t(div_op(&a, &b, mode.as_deref())?)
}
fn floor_divide(args: &mut Args<'_>) -> R {
    let (a, b) = operands(args)?;
    t(div_op(&a, &b, Some("floor"))?)
}

fn remainder_op(a: &Operand, b: &Operand, python: bool) -> crate::Result<Tensor> {
    let dt = common_dtype(&[a, b]);
    let (x, y) = (a.as_tensor_of(dt)?, b.as_tensor_of(dt)?);
    if dt.is_integral(false) {
        return dispatch_standard_int!(dt, "remainder", |T| {
            check_no_zero::<T>(&y)?;
            if python {
                map_binary::<T, T, T, _>(&x, &y, |p, q| p.rem_floor(q).unwrap_or(p))
            } else {
                map_binary::<T, T, T, _>(&x, &y, |p, q| p.rem_trunc(q).unwrap_or(p))
            }
        });
    }
    if python {
        float_binary!(&x, &y, "remainder", |p, q: F| {
            let m = p % q;
            if m != 0.0 && ((q < 0.0) != (m < 0.0)) {
                m + q
            } else {
                m
            }
        })
    } else {
        float_binary!(&x, &y, "fmod", |p, q: F| p % q)
    }
}
fn remainder(args: &mut Args<'_>) -> R {
    let (a, b) = operands(args)?;
    t(remainder_op(&a, &b, true)?)
}
fn fmod(args: &mut Args<'_>) -> R {
    let (a, b) = operands(args)?;
    t(remainder_op(&a, &b, false)?)
}

/// `base ** exponent` with promotion.
pub(crate) fn pow_op(a: &Operand, b: &Operand) -> crate::Result<Tensor> {
    let dt = common_dtype(&[a, b]);
    if dt.is_integral(true) {
        if let Operand::Scalar(Scalar::Int(e)) = b {
            if *e < 0 {
                return Err(invalid_argument(
                    "pow",
                    "exponent",
                    "must be non-negative for an integer base",
                    e,
                ));
            }
        }
    }
    let (x, y) = (a.as_tensor_of(dt)?, b.as_tensor_of(dt)?);
    match dt {
        DType::Bool => map_binary::<bool, bool, bool, _>(&x, &y, |p, q| p.pow_int(q)),
        DType::Complex64 => {
            map_binary::<Complex32, Complex32, Complex32, _>(&x, &y, |p, q| p.powc(q))
        }
        DType::Complex128 => {
            map_binary::<Complex64, Complex64, Complex64, _>(&x, &y, |p, q| p.powc(q))
        }
        d if d.is_integral(false) => {
            dispatch_standard_int!(d, "pow", |T| map_binary::<T, T, T, _>(&x, &y, |p, q| p
                .pow_int(q)))
        }
        _ => match b {
            Operand::Scalar(s) if s.to_f64() == 2.0 => float_unary!(&x, "pow", |v: F| v * v),
            Operand::Scalar(s) if s.to_f64() == 0.5 => float_unary!(&x, "pow", |v: F| v.sqrt()),
            Operand::Scalar(s) if s.to_f64() == 1.0 => x.deep_clone(),
            _ => float_binary!(&x, &y, "pow", |p, q: F| p.powf(q)),
        },
    }
}
/// `float_power_` computes in double (complex double): `self` must already have that dtype.
fn float_power_(args: &mut Args<'_>) -> R {
    let (a, b) = operands(args)?;
    let want = if common_dtype(&[&a, &b]).is_complex() {
        DType::Complex128
    } else {
        DType::Float64
    };
    let base = args.tensor(0)?.dtype();
    if base != want {
        return Err(TensorError::DTypeMismatch {
            expected: want,
            got: base,
        }
        .into());
    }
    let r = float_power(args)?;
    inplace_result(args, r)
}
fn pow(args: &mut Args<'_>) -> R {
    let (a, b) = operands(args)?;
    t(pow_op(&a, &b)?)
}
fn float_power(args: &mut Args<'_>) -> R {
    let (a, b) = operands(args)?;
    let dt = if common_dtype(&[&a, &b]).is_complex() {
        DType::Complex128
    } else {
        DType::Float64
    };
    let a = Operand::Tensor(a.as_tensor_of(dt)?);
    let b = match b {
        Operand::Tensor(x) => Operand::Tensor(x.to_dtype(dt)?),
        s => s,
    };
    t(pow_op(&a, &b)?)
}

/// Binary floating op (ints promote to float32).
fn float_pair(a: &Operand, b: &Operand) -> crate::Result<(Tensor, Tensor)> {
    let dt = float_dtype(common_dtype(&[a, b]));
    Ok((a.as_tensor_of(dt)?, b.as_tensor_of(dt)?))
}
fn atan2(args: &mut Args<'_>) -> R {
    let (a, b) = operands(args)?;
    let (x, y) = float_pair(&a, &b)?;
    t(float_binary!(&x, &y, "atan2", |p, q: F| p.atan2(q))?)
}
fn hypot(args: &mut Args<'_>) -> R {
    let (a, b) = operands(args)?;
    let (x, y) = float_pair(&a, &b)?;
    t(float_binary!(&x, &y, "hypot", |p, q: F| p.hypot(q))?)
}
fn copysign(args: &mut Args<'_>) -> R {
    let (a, b) = operands(args)?;
    let (x, y) = float_pair(&a, &b)?;
    t(float_binary!(&x, &y, "copysign", |p, q: F| p.copysign(q))?)
}

/// `maximum`/`minimum` (NaN-propagating) and `fmax`/`fmin` (NaN-ignoring).
fn minmax_op(a: &Operand, b: &Operand, max: bool, ignore_nan: bool) -> crate::Result<Tensor> {
    let dt = common_dtype(&[a, b]);
    let (x, y) = (a.as_tensor_of(dt)?, b.as_tensor_of(dt)?);
    dispatch_real!(dt, "maximum", |T| {
        match (max, ignore_nan) {
            (true, false) => map_binary::<T, T, T, _>(&x, &y, |p, q| p.max_nan(q)),
            (false, false) => map_binary::<T, T, T, _>(&x, &y, |p, q| p.min_nan(q)),
            (true, true) => map_binary::<T, T, T, _>(&x, &y, |p, q| {
                if p.is_nan_val() {
                    q
                } else if q.is_nan_val() {
                    p
                } else {
                    p.max_nan(q)
                }
            }),
            (false, true) => map_binary::<T, T, T, _>(&x, &y, |p, q| {
                if p.is_nan_val() {
                    q
                } else if q.is_nan_val() {
                    p
                } else {
                    p.min_nan(q)
                }
            }),
        }
    })
}
fn maximum(args: &mut Args<'_>) -> R {
    let (a, b) = operands(args)?;
    t(minmax_op(&a, &b, true, false)?)
}
fn minimum(args: &mut Args<'_>) -> R {
    let (a, b) = operands(args)?;
    t(minmax_op(&a, &b, false, false)?)
}
fn fmax(args: &mut Args<'_>) -> R {
    let (a, b) = operands(args)?;
    t(minmax_op(&a, &b, true, true)?)
}
fn fmin(args: &mut Args<'_>) -> R {
    let (a, b) = operands(args)?;
    t(minmax_op(&a, &b, false, true)?)
}

// ---------------------------------------------------------------- comparisons

#[derive(Clone, Copy)]
enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

fn compare_op(a: &Operand, b: &Operand, cmp: Cmp) -> crate::Result<Tensor> {
    let dt = common_dtype(&[a, b]);
    let (x, y) = (a.as_tensor_of(dt)?, b.as_tensor_of(dt)?);
    match cmp {
        Cmp::Eq => dispatch_all!(dt, "eq", |T| map_binary::<T, T, bool, _>(&x, &y, |p, q| p
            == q)),
        Cmp::Ne => dispatch_all!(dt, "ne", |T| map_binary::<T, T, bool, _>(&x, &y, |p, q| p
            != q)),
        Cmp::Lt => {
            dispatch_standard_real!(dt, "lt", |T| map_binary::<T, T, bool, _>(&x, &y, |p, q| p
                < q))
        }
        Cmp::Le => {
            dispatch_standard_real!(dt, "le", |T| map_binary::<T, T, bool, _>(&x, &y, |p, q| p
                <= q))
        }
        Cmp::Gt => {
            dispatch_standard_real!(dt, "gt", |T| map_binary::<T, T, bool, _>(&x, &y, |p, q| p
                > q))
        }
        Cmp::Ge => {
            dispatch_standard_real!(dt, "ge", |T| map_binary::<T, T, bool, _>(&x, &y, |p, q| p
                >= q))
        }
    }
}

macro_rules! comparison_kernels {
    ($($name:ident, $inplace:ident => $cmp:expr;)*) => {$(
        fn $name(args: &mut Args<'_>) -> R {
            let (a, b) = operands(args)?;
            t(compare_op(&a, &b, $cmp)?)
        }
        fn $inplace(args: &mut Args<'_>) -> R {
            let r = $name(args)?;
            inplace_result(args, r)
        }
    )*};
}
comparison_kernels! {
    eq, eq_ => Cmp::Eq;
    ne, ne_ => Cmp::Ne;
    lt, lt_ => Cmp::Lt;
    le, le_ => Cmp::Le;
    gt, gt_ => Cmp::Gt;
    ge, ge_ => Cmp::Ge;
}

// ---------------------------------------------------------------- logical and bitwise

fn logical_op(args: &Args<'_>, f: fn(bool, bool) -> bool) -> crate::Result<Tensor> {
    let (a, b) = operands(args)?;
    let (x, y) = (a.as_tensor_of(DType::Bool)?, b.as_tensor_of(DType::Bool)?);
    map_binary::<bool, bool, bool, _>(&x, &y, f)
}
fn logical_and(args: &mut Args<'_>) -> R {
    t(logical_op(args, |p, q| p & q)?)
}
fn logical_or(args: &mut Args<'_>) -> R {
    t(logical_op(args, |p, q| p | q)?)
}
fn logical_xor(args: &mut Args<'_>) -> R {
    t(logical_op(args, |p, q| p ^ q)?)
}
fn logical_not(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?.to_dtype(DType::Bool)?;
    t(map_unary::<bool, bool, _>(&x, |v| !v)?)
}

#[derive(Clone, Copy)]
enum Bit {
    And,
    Or,
    Xor,
    Shl,
    Shr,
}

fn bitwise_op(a: &Operand, b: &Operand, op: Bit) -> crate::Result<Tensor> {
    let dt = common_dtype(&[a, b]);
    let (x, y) = (a.as_tensor_of(dt)?, b.as_tensor_of(dt)?);
    fn apply<T: IntOps>(x: &Tensor, y: &Tensor, op: Bit) -> crate::Result<Tensor> {
        match op {
            Bit::And => map_binary::<T, T, T, _>(x, y, |p, q| p.bit_and(q)),
            Bit::Or => map_binary::<T, T, T, _>(x, y, |p, q| p.bit_or(q)),
            Bit::Xor => map_binary::<T, T, T, _>(x, y, |p, q| p.bit_xor(q)),
            Bit::Shl => map_binary::<T, T, T, _>(x, y, |p, q| p.shl(q)),
            Bit::Shr => map_binary::<T, T, T, _>(x, y, |p, q| p.shr(q)),
        }
    }
    match dt {
        DType::Bool if matches!(op, Bit::Shl | Bit::Shr) => Err(not_implemented_for(
            if matches!(op, Bit::Shl) {
                "lshift_cpu"
            } else {
                "rshift_cpu"
            },
            dt,
        )),
        DType::Bool => apply::<bool>(&x, &y, op),
        d if d.is_integral(false) => dispatch_int!(d, "bitwise op", |T| apply::<T>(&x, &y, op)),
        // PyTorch's shift kernels (lshift_cpu / rshift_cpu) are integral-only
        d if matches!(op, Bit::Shl | Bit::Shr) => Err(not_implemented_for(
            if matches!(op, Bit::Shl) {
                "lshift_cpu"
            } else {
                "rshift_cpu"
            },
            d,
        )),
        d => Err(not_implemented_for(
            match op {
                Bit::And => "bitwise_and_cpu",
                Bit::Or => "bitwise_or_cpu",
                _ => "bitwise_xor_cpu",
            },
            d,
        )),
    }
}

macro_rules! bitwise_kernels {
    ($($name:ident, $inplace:ident => $op:expr;)*) => {$(
        fn $name(args: &mut Args<'_>) -> R {
            let (a, b) = operands(args)?;
            t(bitwise_op(&a, &b, $op)?)
        }
        fn $inplace(args: &mut Args<'_>) -> R {
            let r = $name(args)?;
            inplace_result(args, r)
        }
    )*};
}
bitwise_kernels! {
    bitwise_and, bitwise_and_ => Bit::And;
    bitwise_or, bitwise_or_ => Bit::Or;
    bitwise_xor, bitwise_xor_ => Bit::Xor;
    lshift, lshift_ => Bit::Shl;
    rshift, rshift_ => Bit::Shr;
}

fn bitwise_not(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    match x.dtype() {
        DType::Bool => t(map_unary::<bool, bool, _>(&x, |v| !v)?),
        d => t(dispatch_standard_int!(d, "bitwise_not", |T| map_unary::<
            T,
            T,
            _,
        >(
            &x,
            |v| v.bit_not()
        ))?),
    }
}

// ---------------------------------------------------------------- unary (type-preserving)

/// `-x`.
pub(crate) fn neg_tensor(x: &Tensor) -> crate::Result<Tensor> {
    match x.dtype() {
        DType::Bool => Err(wrong_dtype(
            "neg",
            "self",
            "not bool (to invert a mask, use the `~` or `logical_not()` operator)",
            DType::Bool,
        )),
        DType::Complex64 => map_unary::<Complex32, Complex32, _>(x, |v| -v),
        DType::Complex128 => map_unary::<Complex64, Complex64, _>(x, |v| -v),
        d => dispatch_standard_real!(d, "neg", |T| map_unary::<T, T, _>(x, |v| v.neg_val())),
    }
}
fn neg(args: &mut Args<'_>) -> R {
    t(neg_tensor(&args.tensor(0)?)?)
}
pub(crate) fn abs(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    t(match x.dtype() {
        DType::Complex64 => map_unary::<Complex32, f32, _>(&x, |v| v.norm())?,
        DType::Complex128 => map_unary::<Complex64, f64, _>(&x, |v| v.norm())?,
        d => dispatch_standard_real!(d, "abs", |T| map_unary::<T, T, _>(&x, |v| v.abs_val()))?,
    })
}
fn sign(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    t(dispatch_standard_real!(
        x.dtype(),
        "sign",
        |T| map_unary::<T, T, _>(&x, |v| {
            let z = T::zero();
            if v > z {
                T::one()
            } else if v < z {
                T::one().neg_val()
            } else {
                // zero and NaN both give 0, as PyTorch's `(0 < v) - (v < 0)`
                T::zero()
            }
        })
    )?)
}
fn sgn(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    match x.dtype() {
        DType::Complex64 => t(map_unary::<Complex32, Complex32, _>(&x, |v| {
            let n = v.norm();
            if n == 0.0 {
                Complex32::new(0.0, 0.0)
            } else {
                v / n
            }
        })?),
        DType::Complex128 => t(map_unary::<Complex64, Complex64, _>(&x, |v| {
            let n = v.norm();
            if n == 0.0 {
                Complex64::new(0.0, 0.0)
            } else {
                v / n
            }
        })?),
        _ => sign(args),
    }
}
fn square(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    t(pow_op(
        &Operand::Tensor(x),
        &Operand::Scalar(Scalar::Int(2)),
    )?)
}

/// Rounding ops keep integer tensors unchanged (as a copy).
macro_rules! rounding_kernels {
    ($($name:ident, $inplace:ident, $op:literal => |$v:ident| $body:expr;)*) => {$(
        fn $name(args: &mut Args<'_>) -> R {
            let x = args.tensor(0)?;
            if x.dtype().is_integral(true) {
                return t(x.deep_clone()?);
            }
            t(float_unary!(&x, $op, |$v: F| $body)?)
        }
        fn $inplace(args: &mut Args<'_>) -> R {
            let r = $name(args)?;
            inplace_result(args, r)
        }
    )*};
}
rounding_kernels! {
    floor, floor_, "floor" => |v| v.floor();
    ceil, ceil_, "ceil" => |v| v.ceil();
    trunc, trunc_, "trunc" => |v| v.trunc();
    round, round_, "round" => |v| v.round_ties_even();
}
fn round_decimals(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let d = args.int(1)?;
    if x.dtype().is_integral(true) {
        return t(x.deep_clone()?);
    }
    let neg = d < 0;
    let p = 10f64.powi(d.unsigned_abs().min(400) as i32);
    t(float_unary!(&x, "round", |v: F| {
        let p = p as F;
        if neg {
            (v / p).round_ties_even() * p
        } else {
            (v * p).round_ties_even() / p
        }
    })?)
}
inplace_of! { round_decimals_ => round_decimals; }

fn frac(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    if !x.dtype().is_floating_point() {
        return Err(not_implemented_for("frac_cpu", x.dtype()));
    }
    t(float_unary!(&x, "frac", |v: F| v - v.trunc())?)
}

// ---------------------------------------------------------------- floating unary math

float_unary_kernels! {
    register_float_unary, add;
    exp2, exp2_, "exp2" => |v| v.exp2();
    expm1, expm1_, "expm1" => |v| v.exp_m1();
    log, log_, "log" => |v| v.ln();
    log2, log2_, "log2" => |v| v.log2();
    log10, log10_, "log10" => |v| v.log10();
    log1p, log1p_, "log1p" => |v| v.ln_1p();
    sqrt, sqrt_, "sqrt" => |v| v.sqrt();
    rsqrt, rsqrt_, "rsqrt" => |v| 1.0 / v.sqrt();
    sin, sin_, "sin" => |v| v.sin();
    cos, cos_, "cos" => |v| v.cos();
    tan, tan_, "tan" => |v| v.tan();
    asin, asin_, "asin" => |v| v.asin();
    acos, acos_, "acos" => |v| v.acos();
    atan, atan_, "atan" => |v| v.atan();
    sinh, sinh_, "sinh" => |v| v.sinh();
    cosh, cosh_, "cosh" => |v| v.cosh();
    asinh, asinh_, "asinh" => |v| v.asinh();
    acosh, acosh_, "acosh" => |v| v.acosh();
    atanh, atanh_, "atanh" => |v| v.atanh();
    arcsin, arcsin_, "arcsin" => |v| v.asin();
    arccos, arccos_, "arccos" => |v| v.acos();
    arctan, arctan_, "arctan" => |v| v.atan();
    arcsinh, arcsinh_, "arcsinh" => |v| v.asinh();
    arccosh, arccosh_, "arccosh" => |v| v.acosh();
    arctanh, arctanh_, "arctanh" => |v| v.atanh();
    erfc, erfc_, "erfc" => |v| v.erfc_();
    erfinv, erfinv_, "erfinv" => |v| v.erfinv_();
    reciprocal, reciprocal_, "reciprocal" => |v| 1.0 / v;
    deg2rad, deg2rad_, "deg2rad" => |v| v * (std::f64::consts::PI / 180.0) as F;
    rad2deg, rad2deg_, "rad2deg" => |v| v * (180.0 / std::f64::consts::PI) as F;
    sinc, sinc_, "sinc" => |v| if v == 0.0 { 1.0 } else { let p = v * std::f64::consts::PI as F; p.sin() / p };
    i0, i0_, "i0" => |v| bessel_i0(v as f64) as F;
}

/// Floating unary kernels with a vectorized float32 path (contiguous input); other dtypes and
/// strided inputs take the generic map.
macro_rules! vector_unary_kernels {
    ($($name:ident, $inplace:ident, $op:literal, $vf:expr => |$v:ident| $body:expr;)*) => {
        $(
            fn $name(args: &mut Args<'_>) -> R {
                let x = args.tensor(0)?;
                if let Some(out) = vmath::unary_f32($vf, &x)? {
                    return t(out);
                }
                t(float_unary!(&x, $op, |$v: F| $body)?)
            }
            fn $inplace(args: &mut Args<'_>) -> R {
                let r = $name(args)?;
                inplace_result(args, r)
            }
        )*
        fn register_vector_unary(r: &mut Registry) {
            $(
                r.add(concat!("aten::", $op), $name);
                r.add(concat!("aten::", $op, "_"), $inplace);
            )*
        }
    };
}
vector_unary_kernels! {
    exp, exp_, "exp", VecFn::Exp => |v| v.exp();
    tanh, tanh_, "tanh", VecFn::Tanh => |v| v.tanh();
    sigmoid, sigmoid_, "sigmoid", VecFn::Sigmoid => |v| 1.0 / (1.0 + (-v).exp());
    erf, erf_, "erf", VecFn::Erf => |v| v.erf_();
}

/// Modified Bessel function of the first kind, order 0 (power series; adequate for |x| < 700).
pub(crate) fn bessel_i0(x: f64) -> f64 {
    let q = x * x / 4.0;
    let (mut term, mut sum, mut k) = (1.0f64, 1.0f64, 1.0f64);
    while term > sum * 1e-17 && k < 500.0 {
        term *= q / (k * k);
        sum += term;
        k += 1.0;
    }
    sum
}

fn logit(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let eps = args.opt_double(1)?;
    t(match eps {
        Some(e) => float_unary!(&x, "logit", |v: F| {
            let (lo, hi) = (e as F, 1.0 - e as F);
            let z = if v < lo {
                lo
            } else if v > hi {
                hi
            } else {
                v
            };
            (z / (1.0 - z)).ln()
        })?,
        None => float_unary!(&x, "logit", |v: F| (v / (1.0 - v)).ln())?,
    })
}
inplace_of! { logit_ => logit; }

fn isnan(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    t(match x.dtype() {
        DType::Complex64 => {
            map_unary::<Complex32, bool, _>(&x, |v| v.re.is_nan() || v.im.is_nan())?
        }
        DType::Complex128 => {
            map_unary::<Complex64, bool, _>(&x, |v| v.re.is_nan() || v.im.is_nan())?
        }
        d => dispatch_real!(d, "isnan", |T| map_unary::<T, bool, _>(&x, |v| v
            .is_nan_val()))?,
    })
}
fn isinf(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    t(dispatch_real!(x.dtype(), "isinf", |T| map_unary::<
        T,
        bool,
        _,
    >(&x, |v| v
        .to_f64()
        .is_infinite()))?)
}
fn isposinf(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    t(dispatch_real!(x.dtype(), "isposinf", |T| map_unary::<
        T,
        bool,
        _,
    >(&x, |v| v
        .to_f64()
        == f64::INFINITY))?)
}
fn isneginf(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    t(dispatch_real!(x.dtype(), "isneginf", |T| map_unary::<
        T,
        bool,
        _,
    >(&x, |v| v
        .to_f64()
        == f64::NEG_INFINITY))?)
}
fn isfinite(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    t(match x.dtype() {
        DType::Complex64 => {
            map_unary::<Complex32, bool, _>(&x, |v| v.re.is_finite() && v.im.is_finite())?
        }
        DType::Complex128 => {
            map_unary::<Complex64, bool, _>(&x, |v| v.re.is_finite() && v.im.is_finite())?
        }
        d => dispatch_real!(d, "isfinite", |T| map_unary::<T, bool, _>(&x, |v| v
            .to_f64()
            .is_finite()))?,
    })
}

fn nan_to_num(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    if x.dtype().is_integral(true) {
        return t(x.deep_clone()?);
    }
    let nan = args.opt_double(1)?.unwrap_or(0.0);
    // Infinities become the largest finite value of the tensor's own dtype.
    let finite_max = match x.dtype() {
        DType::Float16 => half::f16::MAX.to_f64(),
        DType::BFloat16 => half::bf16::MAX.to_f64(),
        DType::Float32 => f32::MAX as f64,
        _ => f64::MAX,
    };
    let posinf = args.opt_double(2)?.unwrap_or(finite_max);
    let neginf = args.opt_double(3)?.unwrap_or(-finite_max);
    t(float_unary!(&x, "nan_to_num", |v: F| {
        if v.is_nan() {
            nan as F
        } else if v == F::INFINITY {
            posinf as F
        } else if v == F::NEG_INFINITY {
            neginf as F
        } else {
            v
        }
    })?)
}
inplace_of! { nan_to_num_ => nan_to_num; }

// ---------------------------------------------------------------- clamp, lerp, addcmul

/// `clamp(x, lo, hi)` with optional tensor or scalar bounds and promotion over all three.
pub(crate) fn clamp_op(
    x: &Tensor,
    lo: Option<Operand>,
    hi: Option<Operand>,
) -> crate::Result<Tensor> {
    if lo.is_none() && hi.is_none() {
        return Err(invalid_argument(
            "clamp",
            "min and max",
            "must not both be None",
            "None and None",
        ));
    }
    let xo = Operand::Tensor(x.clone());
    let mut ops = vec![&xo];
    ops.extend(lo.iter());
    ops.extend(hi.iter());
    let dt = common_dtype(&ops);
    let xv = x.to_dtype(dt)?;
    dispatch_real!(dt, "clamp", |T| {
        let bound = |o: &Option<Operand>, dflt: T| -> crate::Result<Tensor> {
            match o {
                Some(o) => o.as_tensor_of(dt),
                None => Ok(Tensor::scalar::<T>(dflt)),
            }
        };
        let l = bound(&lo, T::lowest())?;
        let h = bound(&hi, T::highest())?;
        map_ternary::<T, T, T, T, _>(&xv, &l, &h, |v, l, h| {
            if v.is_nan_val() {
                v
            } else if l.is_nan_val() || h.is_nan_val() {
                if l.is_nan_val() {
                    l
                } else {
                    h
                }
            } else {
                let v = if v < l { l } else { v };
                if v > h {
                    h
                } else {
                    v
                }
            }
        })
    })
}

fn opt_operand(args: &Args<'_>, i: usize) -> crate::Result<Option<Operand>> {
    if args.is_none(i) {
        Ok(None)
    } else {
        Operand::arg(args, i).map(Some)
    }
}
fn clamp(args: &mut Args<'_>) -> R {
    t(clamp_op(
        &args.tensor(0)?,
        opt_operand(args, 1)?,
        opt_operand(args, 2)?,
    )?)
}
fn clamp_min(args: &mut Args<'_>) -> R {
    t(clamp_op(&args.tensor(0)?, opt_operand(args, 1)?, None)?)
}
fn clamp_max(args: &mut Args<'_>) -> R {
    t(clamp_op(&args.tensor(0)?, None, opt_operand(args, 1)?)?)
}

fn lerp(args: &mut Args<'_>) -> R {
    let (a, b) = operands(args)?;
    let w = Operand::arg(args, 2)?;
    let dt = common_dtype(&[&a, &b]);
    if !dt.is_floating_point() {
        return Err(not_implemented_for("lerp_kernel_scalar", dt));
    }
    let (x, y, wt) = (
        a.as_tensor_of(dt)?,
        b.as_tensor_of(dt)?,
        w.as_tensor_of(dt)?,
    );
    fn go<F: num_traits::Float + Element>(
        x: &Tensor,
        y: &Tensor,
        w: &Tensor,
    ) -> crate::Result<Tensor> {
        let half = F::from(0.5).unwrap_or(F::one());
        map_ternary::<F, F, F, F, _>(x, y, w, |s, e, w| {
            if w.abs() < half {
                s + w * (e - s)
            } else {
                e - (e - s) * (F::one() - w)
            }
        })
    }
    t(match dt {
        DType::Float64 => go::<f64>(&x, &y, &wt)?,
        DType::Float32 => go::<f32>(&x, &y, &wt)?,
        _ => {
            let f = |v: &Tensor| v.to_dtype(DType::Float32);
            go::<f32>(&f(&x)?, &f(&y)?, &f(&wt)?)?.to_dtype(dt)?
        }
    })
}

/// `self + value * t1 * t2` (`divide`: `self + value * t1 / t2`).
fn addc(args: &Args<'_>, divide: bool) -> crate::Result<Tensor> {
    let s = Operand::Tensor(args.tensor(0)?);
    let a = Operand::Tensor(args.tensor(1)?);
    let b = Operand::Tensor(args.tensor(2)?);
    let value = args.scalar(3)?;
    let dt = common_dtype(&[&s, &a, &b]);
    if divide && dt.is_integral(true) {
        return Err(wrong_dtype(
            "addcdiv",
            "tensor1 and tensor2",
            "not integral (integer division with addcdiv is no longer supported)",
            dt,
        ));
    }
    let (x, p, q) = (
        s.as_tensor_of(dt)?,
        a.as_tensor_of(dt)?,
        b.as_tensor_of(dt)?,
    );
    if divide {
        return dispatch_standard!(dt, "addcdiv", |T| {
            let v = Tensor::scalar::<T>(scalar_as::<T>(value));
            let ratio = div_op(
                &Operand::Tensor(p.clone()),
                &Operand::Tensor(q.clone()),
                None,
            )?;
            let scaled = map_binary::<T, T, T, _>(&ratio, &v, |r, v| v.mul(r))?;
            map_binary::<T, T, T, _>(&x, &scaled, |x, s| x.add(s))
        });
    }
    dispatch_standard!(dt, "addcmul", |T| {
        let v: T = scalar_as::<T>(value);
        let prod = map_binary::<T, T, T, _>(&p, &q, |a, b| a.mul(b))?;
        map_binary::<T, T, T, _>(&x, &prod, |x, m| x.add(v.mul(m)))
    })
}
fn addcmul(args: &mut Args<'_>) -> R {
    t(addc(args, false)?)
}
fn addcdiv(args: &mut Args<'_>) -> R {
    t(addc(args, true)?)
}

// ---------------------------------------------------------------- complex parts

/// A view of the real (`part` 0) or imaginary (1) components of a complex tensor.
fn complex_part(x: &Tensor, part: usize) -> crate::Result<Tensor> {
    let real = x.dtype().to_real();
    let strides: Vec<isize> = x.strides().iter().map(|s| s * 2).collect();
    Ok(Tensor::from_parts(
        x.storage().clone(),
        x.storage_offset() * 2 + part,
        x.shape(),
        &strides,
        real,
    )?)
}
fn real(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    if x.dtype().is_complex() {
        t(complex_part(&x, 0)?)
    } else {
        t(x)
    }
}
fn imag(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    if x.dtype().is_complex() {
        t(complex_part(&x, 1)?)
    } else {
        Err(wrong_dtype("imag", "self", "a complex tensor", x.dtype()))
    }
}
fn conj(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    t(match x.dtype() {
        DType::Complex64 => map_unary::<Complex32, Complex32, _>(&x, |v| v.conj())?,
        DType::Complex128 => map_unary::<Complex64, Complex64, _>(&x, |v| v.conj())?,
        _ => x,
    })
}
/// `isreal(self)`: true everywhere for real dtypes, where the imaginary part is 0 for complex.
/// (One f64 pass, not a typed map per complex dtype: this query is rare and the maps are
/// large.)
fn isreal(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let v: Vec<bool> = if x.dtype().is_complex() {
        x.to_vec::<Complex64>()?
            .iter()
            .map(|c| c.im == 0.0)
            .collect()
    } else {
        vec![true; x.numel()]
    };
    t(Tensor::from_vec(v, x.shape())?)
}
/// `nextafter(self, other)`: the next representable value of `self` towards `other`, in the
/// promoted floating dtype (float32 or float64, as PyTorch's CPU kernel), computed on f64
/// copies of the broadcast operands (no typed map instantiated for this rare op).
fn nextafter(args: &mut Args<'_>) -> R {
    let (a, b) = operands(args)?;
    let dt = common_dtype(&[&a, &b]);
    if !matches!(dt, DType::Float32 | DType::Float64) {
        return Err(not_implemented_for("nextafter_cpu", dt));
    }
    let (x, y) = (a.as_tensor_of(dt)?, b.as_tensor_of(dt)?);
    let shape = crate::tensor::broadcast_shapes(x.shape(), y.shape())?;
    let xs = super::shape::expand_to(&x, &shape)?.to_vec::<f64>()?;
    let ys = super::shape::expand_to(&y, &shape)?.to_vec::<f64>()?;
    let out: Vec<f64> = xs
        .iter()
        .zip(&ys)
        .map(|(&p, &q)| {
            if dt == DType::Float32 {
                f64::from(libm::nextafterf(p as f32, q as f32))
            } else {
                libm::nextafter(p, q)
            }
        })
        .collect();
    t(Tensor::from_vec(out, &shape)?.to_dtype(dt)?)
}
inplace_of! { nextafter_ => nextafter; }
/// `conj_physical_(self)`: a real tensor is its own conjugate.
fn conj_physical_(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    if !x.dtype().is_complex() {
        return t(x);
    }
    let r = conj(args)?;
    inplace_result(args, r)
}
/// `_neg_view_copy(self)`: the negation (tsrun has no lazy negation bit), owning its storage.
fn neg_copy(args: &mut Args<'_>) -> R {
    t(neg(args)?
        .as_tensor()
        .ok_or_else(|| value_err("neg returned a non-tensor"))?
        .deep_clone()?)
}
/// `_conj(self)` / `_conj_copy(self)`: the conjugate of a complex tensor (a fresh one: tsrun
/// has no lazy conjugation bit); PyTorch asserts on real tensors, tsrun refuses them.
fn conj_complex(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    if !x.dtype().is_complex() {
        return Err(wrong_dtype(args.op, "self", "a complex tensor", x.dtype()));
    }
    conj(args)
}
fn angle(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    t(match x.dtype() {
        DType::Complex64 => map_unary::<Complex32, f32, _>(&x, |v| v.arg())?,
        DType::Complex128 => map_unary::<Complex64, f64, _>(&x, |v| v.arg())?,
        _ => float_unary!(&x, "angle", |v: F| if v.is_nan() {
            v
        } else if v < 0.0 {
            std::f64::consts::PI as F
        } else {
            0.0
        })?,
    })
}
fn polar(args: &mut Args<'_>) -> R {
    let (a, b) = (args.tensor(0)?, args.tensor(1)?);
    t(match a.dtype() {
        DType::Float32 => map_binary::<f32, f32, Complex32, _>(&a, &b, Complex32::from_polar)?,
        DType::Float64 => map_binary::<f64, f64, Complex64, _>(&a, &b, Complex64::from_polar)?,
        d => return Err(not_implemented_for("polar", d)),
    })
}
fn complex(args: &mut Args<'_>) -> R {
    let (a, b) = (args.tensor(0)?, args.tensor(1)?);
    t(match a.dtype() {
        DType::Float32 => map_binary::<f32, f32, Complex32, _>(&a, &b, Complex32::new)?,
        DType::Float64 => map_binary::<f64, f64, Complex64, _>(&a, &b, Complex64::new)?,
        d => return Err(not_implemented_for("complex", d)),
    })
}

// ---------------------------------------------------------------- registration

/// `add_` writes a contiguous float32 `self` directly when `other` is a float32 tensor of
/// its shape and `alpha` is 1 (a residual connection); else the general kernel and a copy back.
fn add_(args: &mut Args<'_>) -> R {
    if let (Some(IValue::Tensor(x)), Some(IValue::Tensor(y))) =
        (args.values.first(), args.values.get(1))
    {
        let unit = match args.scalar(2) {
            Ok(Scalar::Int(1)) => true,
            Ok(Scalar::Float(a)) => a == 1.0,
            _ => false,
        };
        if unit && zip_inplace_f32(x, y, |p, q| p + q)? {
            return Ok(IValue::Tensor(x.clone()));
        }
    }
    let r = add(args)?;
    inplace_result(args, r)
}
inplace_of! {
    sub_ => sub; mul_ => mul; div_ => div; floor_divide_ => floor_divide;
    remainder_ => remainder; fmod_ => fmod; pow_ => pow;
    atan2_ => atan2; hypot_ => hypot; copysign_ => copysign;
    logical_and_ => logical_and; logical_or_ => logical_or; logical_xor_ => logical_xor;
    logical_not_ => logical_not; bitwise_not_ => bitwise_not;
    neg_ => neg; abs_ => abs; sign_ => sign; sgn_ => sgn; square_ => square; frac_ => frac;
    clamp_ => clamp; clamp_min_ => clamp_min; clamp_max_ => clamp_max;
    lerp_ => lerp; addcmul_ => addcmul; addcdiv_ => addcdiv;
}

pub(crate) fn register(r: &mut Registry) {
    register_float_unary(r);
    register_vector_unary(r);
    r.add("aten::diff", diff);
    let both = |r: &mut Registry, base: &str, k: super::Kernel, kin: super::Kernel| {
        // `__and__` and friends have no `__and___` twin (theirs is `__iand__`)
        for ov in ["Tensor", "Scalar"] {
            r.add_if_defined(&format!("aten::{base}.{ov}"), k);
            r.add_if_defined(&format!("aten::{base}_.{ov}"), kin);
        }
    };
    both(r, "add", add, add_);
    both(r, "sub", sub, sub_);
    both(r, "subtract", sub, sub_);
    both(r, "mul", mul, mul_);
    both(r, "multiply", mul, mul_);
    both(r, "div", div, div_);
    both(r, "divide", div, div_);
    both(r, "true_divide", div, div_);
    for ov in ["Tensor_mode", "Scalar_mode"] {
        r.add(&format!("aten::div.{ov}"), div);
        r.add(&format!("aten::div_.{ov}"), div_);
        r.add(&format!("aten::divide.{ov}"), div);
        r.add(&format!("aten::divide_.{ov}"), div_);
    }
    // the out= twins whose names do not end in `out`
    r.add_all(&["aten::div.out_mode", "aten::divide.out_mode"], |a| {
        let r = div(a)?;
        a.write_outs(3, r)
    });
    r.add("aten::floor_divide", floor_divide);
    r.add("aten::floor_divide.Scalar", floor_divide);
    r.add("aten::floor_divide_.Tensor", floor_divide_);
    r.add("aten::floor_divide_.Scalar", floor_divide_);
    both(r, "remainder", remainder, remainder_);
    r.add("aten::remainder.Scalar_Tensor", remainder);
    both(r, "fmod", fmod, fmod_);
    r.add_all(
        &[
            "aten::pow.Tensor_Tensor",
            "aten::pow.Tensor_Scalar",
            "aten::pow.Scalar",
        ],
        pow,
    );
    r.add_all(&["aten::pow_.Tensor", "aten::pow_.Scalar"], pow_);
    r.add_all(
        &[
            "aten::float_power.Tensor_Tensor",
            "aten::float_power.Tensor_Scalar",
            "aten::float_power.Scalar",
        ],
        float_power,
    );
    r.add_all(
        &["aten::float_power_.Tensor", "aten::float_power_.Scalar"],
        float_power_,
    );
    r.add_all(&["aten::rsub.Tensor", "aten::rsub.Scalar"], rsub);
    r.add("aten::atan2", atan2);
    r.add_all(&["aten::atan2_", "aten::arctan2_"], atan2_);
    r.add("aten::arctan2", atan2);
    r.add("aten::hypot", hypot);
    r.add("aten::hypot_", hypot_);
    both(r, "copysign", copysign, copysign_);
    r.add("aten::maximum", maximum);
    r.add("aten::minimum", minimum);
    r.add("aten::max.other", maximum);
    r.add("aten::min.other", minimum);
    r.add("aten::fmax", fmax);
    r.add("aten::fmin", fmin);

    for (name, k, kin) in [
        ("eq", eq as super::Kernel, eq_ as super::Kernel),
        ("ne", ne, ne_),
        ("lt", lt, lt_),
        ("le", le, le_),
        ("gt", gt, gt_),
        ("ge", ge, ge_),
        ("not_equal", ne, ne_),
        ("less", lt, lt_),
        ("less_equal", le, le_),
        ("greater", gt, gt_),
        ("greater_equal", ge, ge_),
    ] {
        both(r, name, k, kin);
    }

    r.add("aten::logical_and", logical_and);
    r.add("aten::logical_or", logical_or);
    r.add("aten::logical_xor", logical_xor);
    r.add("aten::logical_not", logical_not);
    r.add("aten::logical_and_", logical_and_);
    r.add("aten::logical_or_", logical_or_);
    r.add("aten::logical_xor_", logical_xor_);
    r.add("aten::logical_not_", logical_not_);
    // `.Scalar_Tensor(Scalar self, Tensor other)`: the scalar promotes as a wrapped number
    r.add("aten::bitwise_and.Scalar_Tensor", bitwise_and);
    r.add("aten::bitwise_or.Scalar_Tensor", bitwise_or);
    r.add("aten::bitwise_xor.Scalar_Tensor", bitwise_xor);
    both(r, "bitwise_and", bitwise_and, bitwise_and_);
    both(r, "bitwise_or", bitwise_or, bitwise_or_);
    both(r, "bitwise_xor", bitwise_xor, bitwise_xor_);
    both(r, "__and__", bitwise_and, bitwise_and_);
    both(r, "__or__", bitwise_or, bitwise_or_);
    both(r, "__xor__", bitwise_xor, bitwise_xor_);
    both(r, "__iand__", bitwise_and_, bitwise_and_);
    both(r, "__ior__", bitwise_or_, bitwise_or_);
    both(r, "__ixor__", bitwise_xor_, bitwise_xor_);
    both(r, "__lshift__", lshift, lshift_);
    both(r, "__rshift__", rshift, rshift_);
    both(r, "__ilshift__", lshift_, lshift_);
    both(r, "__irshift__", rshift_, rshift_);
    both(r, "bitwise_left_shift", lshift, lshift_);
    both(r, "bitwise_right_shift", rshift, rshift_);
    r.add("aten::bitwise_left_shift.Scalar_Tensor", lshift);
    r.add("aten::bitwise_left_shift.Tensor_Scalar", lshift);
    r.add("aten::bitwise_left_shift_.Tensor_Scalar", lshift_);
    r.add("aten::bitwise_right_shift.Tensor_Scalar", rshift);
    r.add("aten::bitwise_right_shift_.Tensor_Scalar", rshift_);
    r.add("aten::bitwise_right_shift.Scalar_Tensor", rshift);
    r.add("aten::bitwise_not", bitwise_not);
    r.add("aten::bitwise_not_", bitwise_not_);

    r.add("aten::neg", neg);
    r.add("aten::negative", neg);
    r.add("aten::neg_", neg_);
    r.add("aten::negative_", neg_);
    r.add("aten::abs", abs);
    r.add("aten::absolute", abs);
    r.add_all(&["aten::abs_", "aten::absolute_"], abs_);
    // tsrun has no lazy negation bit: `_neg_view` is the negation
    r.add("aten::_neg_view", neg);
    r.add("aten::_neg_view_copy", neg_copy);
    r.add("aten::sign", sign);
    r.add("aten::sign_", sign_);
    r.add("aten::sgn", sgn);
    r.add("aten::sgn_", sgn_);
    r.add("aten::square", square);
    r.add("aten::square_", square_);
    r.add("aten::floor", floor);
    r.add("aten::floor_", floor_);
    r.add("aten::ceil", ceil);
    r.add("aten::ceil_", ceil_);
    r.add("aten::trunc", trunc);
    r.add("aten::trunc_", trunc_);
    r.add("aten::fix", trunc);
    r.add("aten::fix_", trunc_);
    r.add("aten::round", round);
    r.add("aten::round_", round_);
    r.add("aten::round.decimals", round_decimals);
    r.add("aten::round_.decimals", round_decimals_);
    r.add("aten::frac", frac);
    r.add("aten::frac_", frac_);
    r.add("aten::logit", logit);
    r.add("aten::logit_", logit_);
    r.add("aten::special_expit", sigmoid);
    r.add("aten::special_erf", erf);
    r.add("aten::special_erfc", erfc);
    r.add("aten::special_erfinv", erfinv);
    r.add("aten::isnan", isnan);
    r.add("aten::isinf", isinf);
    r.add("aten::isposinf", isposinf);
    r.add("aten::isneginf", isneginf);
    r.add("aten::isfinite", isfinite);
    r.add("aten::nan_to_num", nan_to_num);
    r.add("aten::nan_to_num_", nan_to_num_);

    r.add_all(
        &[
            "aten::clamp",
            "aten::clamp.Tensor",
            "aten::clip",
            "aten::clip.Tensor",
        ],
        clamp,
    );
    r.add_all(
        &[
            "aten::clamp_",
            "aten::clamp_.Tensor",
            "aten::clip_",
            "aten::clip_.Tensor",
        ],
        clamp_,
    );
    r.add_all(&["aten::clamp_min", "aten::clamp_min.Tensor"], clamp_min);
    r.add_all(&["aten::clamp_min_", "aten::clamp_min_.Tensor"], clamp_min_);
    r.add_all(&["aten::clamp_max", "aten::clamp_max.Tensor"], clamp_max);
    r.add_all(&["aten::clamp_max_", "aten::clamp_max_.Tensor"], clamp_max_);
    r.add_all(&["aten::lerp.Scalar", "aten::lerp.Tensor"], lerp);
    r.add_all(&["aten::lerp_.Scalar", "aten::lerp_.Tensor"], lerp_);
    r.add("aten::addcmul", addcmul);
    r.add("aten::addcmul_", addcmul_);
    r.add("aten::addcdiv", addcdiv);
    r.add("aten::addcdiv_", addcdiv_);

    r.add("aten::real", real);
    r.add("aten::imag", imag);
    r.add("aten::conj", conj);
    r.add("aten::conj_physical", conj);
    r.add("aten::_conj_physical", conj);
    r.add_all(&["aten::_conj", "aten::_conj_copy"], conj_complex);
    r.add("aten::conj_physical_", conj_physical_);
    r.add("aten::isreal", isreal);
    r.add("aten::nextafter", nextafter);
    r.add("aten::nextafter_", nextafter_);
    r.add("aten::resolve_conj", real_or_self);
    r.add("aten::resolve_neg", real_or_self);
    r.add("aten::angle", angle);
    r.add("aten::polar", polar);
    r.add("aten::complex", complex);
}

/// `resolve_conj`/`resolve_neg`: tsrun never sets lazy conj/neg bits, so these are identities.
fn real_or_self(args: &mut Args<'_>) -> R {
    t(args.tensor(0)?)
}

/// `a * b` for two tensors with promotion (for other op families).
pub(crate) fn mul_tensors(a: &Tensor, b: &Tensor) -> crate::Result<Tensor> {
    mul_op(&Operand::Tensor(a.clone()), &Operand::Tensor(b.clone()))
}
