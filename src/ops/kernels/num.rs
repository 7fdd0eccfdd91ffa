#![allow(unused_comparisons, clippy::absurd_extreme_comparisons)]
//! Numeric traits over element types: arithmetic that never panics (integers wrap, as in C++),
//! NaN-propagating min/max, and the `float_unary!`/`float_binary!` macros.

use crate::tensor::Element;
use half::{bf16, f16};
use num_complex::{Complex32, Complex64};

/// Ring arithmetic with PyTorch's CPU semantics: integers wrap, half types round through f32,
/// bool `+` is `or` and `*` is `and`.
pub(crate) trait Arith: Element {
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn zero() -> Self {
        Self::from_i64(0)
    }
    fn one() -> Self {
        Self::from_i64(1)
    }
}

/// Ordered (non-complex) element types.
pub(crate) trait Real: Arith + PartialOrd {
    /// NaN test that works for every element type (integers are never NaN).
    #[inline]
    #[allow(clippy::eq_op)]
    fn is_nan_val(self) -> bool {
        self != self
    }
    /// `max` that propagates NaN, as `torch.maximum`/`max` do.
    #[inline]
    fn max_nan(self, o: Self) -> Self {
        if self.is_nan_val() || o.is_nan_val() {
            if self.is_nan_val() {
                self
            } else {
                o
            }
        } else if o > self {
            o
        } else {
            self
        }
    }
    /// `min` that propagates NaN.
    #[inline]
    fn min_nan(self, o: Self) -> Self {
        if self.is_nan_val() || o.is_nan_val() {
            if self.is_nan_val() {
                self
            } else {
                o
            }
        } else if o < self {
            o
        } else {
            self
        }
    }
    fn neg_val(self) -> Self;
    fn abs_val(self) -> Self;
    /// The smallest value (-inf for floats), the identity of `max`.
    fn lowest() -> Self;
    /// The largest value (+inf for floats), the identity of `min`.
    fn highest() -> Self;
}

macro_rules! int_arith {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            #[inline] fn add(self, o: Self) -> Self { self.wrapping_add(o) }
            #[inline] fn sub(self, o: Self) -> Self { self.wrapping_sub(o) }
            #[inline] fn mul(self, o: Self) -> Self { self.wrapping_mul(o) }
        }
        impl Real for $t {
            #[inline] fn neg_val(self) -> Self { self.wrapping_neg() }
            #[inline] fn abs_val(self) -> Self {
                if self < 0 { self.wrapping_neg() } else { self }
            }
            fn lowest() -> Self { <$t>::MIN }
            fn highest() -> Self { <$t>::MAX }
        }
    )*};
}
int_arith!(u8, i8, i16, i32, i64, u16, u32, u64);

macro_rules! float_arith {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            #[inline] fn add(self, o: Self) -> Self { self + o }
            #[inline] fn sub(self, o: Self) -> Self { self - o }
            #[inline] fn mul(self, o: Self) -> Self { self * o }
        }
        impl Real for $t {
            #[inline] fn neg_val(self) -> Self { -self }
            #[inline] fn abs_val(self) -> Self { if self < Self::zero() { -self } else if self == Self::zero() { Self::zero() } else { self } }
            fn lowest() -> Self { <$t>::NEG_INFINITY }
            fn highest() -> Self { <$t>::INFINITY }
        }
    )*};
}
float_arith!(f32, f64, f16, bf16);

impl Arith for bool {
    #[inline]
    fn add(self, o: Self) -> Self {
        self | o
    }
    #[inline]
    fn sub(self, o: Self) -> Self {
        self ^ o
    }
    #[inline]
    fn mul(self, o: Self) -> Self {
        self & o
    }
}
impl Real for bool {
    fn neg_val(self) -> Self {
        self
    }
    fn abs_val(self) -> Self {
        self
    }
    fn lowest() -> Self {
        false
    }
    fn highest() -> Self {
        true
    }
}

macro_rules! complex_arith {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            #[inline] fn add(self, o: Self) -> Self { self + o }
            #[inline] fn sub(self, o: Self) -> Self { self - o }
            #[inline] fn mul(self, o: Self) -> Self { self * o }
        }
    )*};
}
complex_arith!(Complex32, Complex64);

/// Apply a floating-point expression elementwise. Integer and bool inputs are computed as
/// float32 (PyTorch's default dtype); float16/bfloat16 are computed in f32 and rounded once.
/// In `|v: T| body`, `T` is `f32` or `f64`. Complex inputs fail with an error naming the op.
#[macro_export]
#[doc(hidden)]
macro_rules! float_unary {
    ($x:expr, $what:expr, |$v:ident: $T:ident| $body:expr) => {{
        let x = $crate::ops::kernels::operand::float_input($x)?;
        match x.dtype() {
            $crate::tensor::DType::Float32 => {
                #[allow(dead_code)]
                type $T = f32;
                $crate::ops::kernels::map::map_unary::<f32, f32, _>(&x, |$v: f32| $body)
            }
            $crate::tensor::DType::Float64 => {
                #[allow(dead_code)]
                type $T = f64;
                $crate::ops::kernels::map::map_unary::<f64, f64, _>(&x, |$v: f64| $body)
            }
            $crate::tensor::DType::Float16 => {
                #[allow(dead_code)]
                type $T = f32;
                $crate::ops::kernels::map::map_unary::<::half::f16, ::half::f16, _>(
                    &x,
                    |h: ::half::f16| {
                        let $v = h.to_f32();
                        ::half::f16::from_f32($body)
                    },
                )
            }
            $crate::tensor::DType::BFloat16 => {
                #[allow(dead_code)]
                type $T = f32;
                $crate::ops::kernels::map::map_unary::<::half::bf16, ::half::bf16, _>(
                    &x,
                    |h: ::half::bf16| {
                        let $v = h.to_f32();
                        ::half::bf16::from_f32($body)
                    },
                )
            }
            other => Err($crate::tensor::TensorError::NotImplementedForDType {
                kernel: ::std::string::ToString::to_string(&$what),
                dtype: other,
            }
            .into()),
        }
    }};
}

/// Like [`float_unary!`] for two tensors already converted to the same floating dtype `dt`:
/// `|x, y: T| body` with broadcasting.
#[macro_export]
#[doc(hidden)]
macro_rules! float_binary {
    ($a:expr, $b:expr, $what:expr, |$x:ident, $y:ident: $T:ident| $body:expr) => {{
        let (a, b): (&$crate::tensor::Tensor, &$crate::tensor::Tensor) = ($a, $b);
        match a.dtype() {
            $crate::tensor::DType::Float32 => {
                #[allow(dead_code)]
                type $T = f32;
                $crate::ops::kernels::map::map_binary::<f32, f32, f32, _>(a, b, |$x: f32, $y: f32| $body)
            }
            $crate::tensor::DType::Float64 => {
                #[allow(dead_code)]
                type $T = f64;
                $crate::ops::kernels::map::map_binary::<f64, f64, f64, _>(a, b, |$x: f64, $y: f64| $body)
            }
            $crate::tensor::DType::Float16 => {
                #[allow(dead_code)]
                type $T = f32;
                $crate::ops::kernels::map::map_binary::<::half::f16, ::half::f16, ::half::f16, _>(
                    a,
                    b,
                    |p: ::half::f16, q: ::half::f16| {
                        let ($x, $y) = (p.to_f32(), q.to_f32());
                        ::half::f16::from_f32($body)
                    },
                )
            }
            $crate::tensor::DType::BFloat16 => {
                #[allow(dead_code)]
                type $T = f32;
                $crate::ops::kernels::map::map_binary::<::half::bf16, ::half::bf16, ::half::bf16, _>(
                    a,
                    b,
                    |p: ::half::bf16, q: ::half::bf16| {
                        let ($x, $y) = (p.to_f32(), q.to_f32());
                        ::half::bf16::from_f32($body)
                    },
                )
            }
            other => Err($crate::tensor::TensorError::NotImplementedForDType {
                kernel: ::std::string::ToString::to_string(&$what),
                dtype: other,
            }
            .into()),
        }
    }};
}

/// Integer-only operations (bool included where PyTorch allows it), all non-panicking.
pub(crate) trait IntOps: Real {
    /// Truncating division; `None` when dividing by zero.
    fn div_trunc(self, o: Self) -> Option<Self>;
    /// Floor division (Python `//`); `None` when dividing by zero.
    fn floor_div(self, o: Self) -> Option<Self>;
    /// Remainder with the divisor's sign (Python `%`); `None` for zero.
    fn rem_floor(self, o: Self) -> Option<Self>;
    /// Remainder with the dividend's sign (C `%`, `torch.fmod`); `None` for zero.
    fn rem_trunc(self, o: Self) -> Option<Self>;
    fn bit_and(self, o: Self) -> Self;
    fn bit_or(self, o: Self) -> Self;
    fn bit_xor(self, o: Self) -> Self;
    fn bit_not(self) -> Self;
    /// `self << o`; shifts past the width give 0, as PyTorch does.
    fn shl(self, o: Self) -> Self;
    /// `self >> o` (arithmetic for signed); shifts past the width give 0 or -1.
    fn shr(self, o: Self) -> Self;
    /// Integer power by squaring, wrapping; negative exponents give 1, ±1 or 0 like PyTorch.
    fn pow_int(self, e: Self) -> Self;
}

macro_rules! int_ops {
    ($($t:ty),*) => {$(
        impl IntOps for $t {
            #[inline] fn div_trunc(self, o: Self) -> Option<Self> {
                if o == 0 { None } else { Some(self.wrapping_div(o)) }
            }
            #[inline] fn floor_div(self, o: Self) -> Option<Self> {
                if o == 0 { return None; }
                let q = self.wrapping_div(o);
                let r = self.wrapping_rem(o);
                let adjust = r != 0 && ((r < 0) != (o < 0));
                Some(if adjust { q.wrapping_sub(1) } else { q })
            }
            #[inline] fn rem_floor(self, o: Self) -> Option<Self> {
                if o == 0 { return None; }
                let r = self.wrapping_rem(o);
                let adjust = r != 0 && ((r < 0) != (o < 0));
                Some(if adjust { r.wrapping_add(o) } else { r })
            }
            #[inline] fn rem_trunc(self, o: Self) -> Option<Self> {
                if o == 0 { None } else { Some(self.wrapping_rem(o)) }
            }
            #[inline] fn bit_and(self, o: Self) -> Self { self & o }
            #[inline] fn bit_or(self, o: Self) -> Self { self | o }
            #[inline] fn bit_xor(self, o: Self) -> Self { self ^ o }
            #[inline] fn bit_not(self) -> Self { !self }
            #[inline] fn shl(self, o: Self) -> Self {
                let out_of_range = o < 0 || (o as u64) >= <$t>::BITS as u64;
                if out_of_range { 0 } else { self.wrapping_shl(o as u32) }
            }
            #[inline] fn shr(self, o: Self) -> Self {
                let out_of_range = o < 0 || (o as u64) >= <$t>::BITS as u64;
                if out_of_range { if self < 0 { (0 as $t).wrapping_sub(1) } else { 0 } }
                else { self.wrapping_shr(o as u32) }
            }
            fn pow_int(self, e: Self) -> Self {
                if e < 0 {
                    // only 1 and -1 have integral reciprocals
                    if self == 1 { return 1; }
                    if self < 0 && self.wrapping_add(1) == 0 {
                        return if e.wrapping_rem(2) == 0 { 1 } else { self };
                    }
                    return 0;
                }
                let (mut base, mut e, mut acc): (Self, Self, Self) = (self, e, 1);
                while e != 0 {
                    if e & 1 == 1 { acc = acc.wrapping_mul(base); }
                    base = base.wrapping_mul(base);
                    e >>= 1;
                }
                acc
            }
        }
    )*};
}
int_ops!(u8, i8, i16, i32, i64, u16, u32, u64);

impl IntOps for bool {
    fn div_trunc(self, o: Self) -> Option<Self> {
        if o {
            Some(self)
        } else {
            None
        }
    }
    fn floor_div(self, o: Self) -> Option<Self> {
        self.div_trunc(o)
    }
    fn rem_floor(self, o: Self) -> Option<Self> {
        if o {
            Some(false)
        } else {
            None
        }
    }
    fn rem_trunc(self, o: Self) -> Option<Self> {
        self.rem_floor(o)
    }
    fn bit_and(self, o: Self) -> Self {
        self & o
    }
    fn bit_or(self, o: Self) -> Self {
        self | o
    }
    fn bit_xor(self, o: Self) -> Self {
        self ^ o
    }
    fn bit_not(self) -> Self {
        !self
    }
    fn shl(self, o: Self) -> Self {
        self && !o
    }
    fn shr(self, o: Self) -> Self {
        self && !o
    }
    fn pow_int(self, e: Self) -> Self {
        self || !e
    }
}

/// Convert a `Scalar` to element type `T` with PyTorch's cast rules.
pub(crate) fn scalar_as<T: Element>(s: crate::tensor::Scalar) -> T {
    use crate::tensor::Scalar;
    match s {
        Scalar::Bool(b) => T::from_bool(b),
        Scalar::Int(i) => T::from_i64(i),
        Scalar::Float(f) => T::from_f64(f),
        Scalar::Complex(c) => T::from_c64(c),
    }
}
