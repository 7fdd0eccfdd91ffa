//! The Rust element types behind each [`DType`], with PyTorch's `static_cast` conversions,
//! and `dispatch_*!` macros that instantiate generic kernels per runtime dtype.

use super::DType;
use half::{bf16, f16};
use num_complex::{Complex32, Complex64};

/// A Rust type that stores one tensor element.
///
/// Conversions follow C++ `static_cast` as PyTorch uses it: float to int truncates toward zero,
/// int to narrower int wraps, anything to bool is `!= 0`, complex to real takes the real part,
/// double to half/bfloat16 rounds through float (as c10 does).
pub trait Element: Copy + Send + Sync + Default + PartialEq + std::fmt::Debug + 'static {
    /// The dtype this Rust type stores.
    const DTYPE: DType;
    /// `static_cast<double>`.
    fn to_f64(self) -> f64;
    /// `static_cast<T>` from a double.
    fn from_f64(v: f64) -> Self;
    /// `static_cast<int64_t>`.
    fn to_i64(self) -> i64;
    /// `static_cast<T>` from an int64.
    fn from_i64(v: i64) -> Self;
    /// As a complex number (real types have a zero imaginary part).
    fn to_c64(self) -> Complex64 {
        Complex64::new(self.to_f64(), 0.0)
    }
    /// From a complex number (real types take the real part).
    fn from_c64(v: Complex64) -> Self {
        Self::from_f64(v.re)
    }
    /// `!= 0`.
    fn to_bool(self) -> bool;
    /// `true` as 1, `false` as 0.
    fn from_bool(v: bool) -> Self {
        Self::from_i64(v as i64)
    }
    /// Convert from another element type with PyTorch's cast semantics.
    #[inline]
    fn cast_from<S: Element>(s: S) -> Self {
        if Self::DTYPE == DType::Bool {
            return Self::from_bool(s.to_bool());
        }
        if S::DTYPE.is_complex() {
            return Self::from_c64(s.to_c64());
        }
        if S::DTYPE.is_integral(true) {
            if Self::DTYPE.is_integral(false) {
                Self::from_i64(s.to_i64())
            } else if S::DTYPE == DType::UInt64 {
                Self::from_f64(s.to_f64())
            } else {
                Self::from_i64(s.to_i64())
            }
        } else {
            Self::from_f64(s.to_f64())
        }
    }
}

macro_rules! int_element {
    ($t:ty, $d:ident) => {
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            #[inline]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline]
            fn from_f64(v: f64) -> Self {
                // Out-of-range is UB in C++; truncation through i64 matches x86 for common cases.
                if v.is_nan() {
                    0 as $t
                } else {
                    (v as i64) as $t
                }
            }
            #[inline]
            fn to_i64(self) -> i64 {
                self as i64
            }
            #[inline]
            fn from_i64(v: i64) -> Self {
                v as $t
            }
            #[inline]
            fn to_bool(self) -> bool {
                self != 0
            }
        }
    };
}
int_element!(u8, UInt8);
int_element!(i8, Int8);
int_element!(i16, Int16);
int_element!(i32, Int32);
int_element!(i64, Int64);
int_element!(u16, UInt16);
int_element!(u32, UInt32);

impl Element for u64 {
    const DTYPE: DType = DType::UInt64;
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        if v < 0.0 {
            (v as i64) as u64
        } else {
            v as u64
        }
    }
    fn to_i64(self) -> i64 {
        self as i64
    }
    fn from_i64(v: i64) -> Self {
        v as u64
    }
    fn to_bool(self) -> bool {
        self != 0
    }
}

impl Element for bool {
    const DTYPE: DType = DType::Bool;
    fn to_f64(self) -> f64 {
        self as u8 as f64
    }
    fn from_f64(v: f64) -> Self {
        v != 0.0
    }
    fn to_i64(self) -> i64 {
        self as i64
    }
    fn from_i64(v: i64) -> Self {
        v != 0
    }
    fn from_c64(v: Complex64) -> Self {
        v.re != 0.0 || v.im != 0.0
    }
    fn to_bool(self) -> bool {
        self
    }
}

macro_rules! float_element {
    ($t:ty, $d:ident, $from:expr, $to:expr) => {
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            #[inline]
            fn to_f64(self) -> f64 {
                let f: fn($t) -> f64 = $to;
                f(self)
            }
            #[inline]
            fn from_f64(v: f64) -> Self {
                let f: fn(f64) -> $t = $from;
                f(v)
            }
            #[inline]
            fn to_i64(self) -> i64 {
                let v = self.to_f64();
                if v.is_nan() {
                    i64::MIN
                } else {
                    v as i64
                }
            }
            #[inline]
            fn from_i64(v: i64) -> Self {
                Self::from_f64(v as f64)
            }
            #[inline]
            fn to_bool(self) -> bool {
                self.to_f64() != 0.0
            }
        }
    };
}
float_element!(f32, Float32, |v| v as f32, |x| x as f64);
float_element!(f64, Float64, |v| v, |x| x);
float_element!(f16, Float16, |v| f16::from_f32(v as f32), |x| x.to_f64());
float_element!(bf16, BFloat16, |v| bf16::from_f32(v as f32), |x| x.to_f64());

impl Element for Complex32 {
    const DTYPE: DType = DType::Complex64;
    fn to_f64(self) -> f64 {
        self.re as f64
    }
    fn from_f64(v: f64) -> Self {
        Complex32::new(v as f32, 0.0)
    }
    fn to_i64(self) -> i64 {
        self.re as i64
    }
    fn from_i64(v: i64) -> Self {
        Complex32::new(v as f32, 0.0)
    }
    fn to_c64(self) -> Complex64 {
        Complex64::new(self.re as f64, self.im as f64)
    }
    fn from_c64(v: Complex64) -> Self {
        Complex32::new(v.re as f32, v.im as f32)
    }
    fn to_bool(self) -> bool {
        self.re != 0.0 || self.im != 0.0
    }
}

impl Element for Complex64 {
    const DTYPE: DType = DType::Complex128;
    fn to_f64(self) -> f64 {
        self.re
    }
    fn from_f64(v: f64) -> Self {
        Complex64::new(v, 0.0)
    }
    fn to_i64(self) -> i64 {
        self.re as i64
    }
    fn from_i64(v: i64) -> Self {
        Complex64::new(v as f64, 0.0)
    }
    fn to_c64(self) -> Complex64 {
        self
    }
    fn from_c64(v: Complex64) -> Self {
        v
    }
    fn to_bool(self) -> bool {
        self.re != 0.0 || self.im != 0.0
    }
}

/// Run `$body` with `$T` bound to the element type of `$dtype`, for every dtype with an element
/// type (all but quantized, float8 and complex32). Otherwise evaluates to an `Err` naming `$what`.
/// The enclosing expression must be a `crate::Result`.
#[macro_export]
macro_rules! dispatch_all {
    ($dtype:expr, $what:expr, |$T:ident| $body:expr) => {
        $crate::__dispatch!($dtype, $what, $T, $body,
            UInt8 => u8, Int8 => i8, Int16 => i16, Int32 => i32, Int64 => i64,
            UInt16 => u16, UInt32 => u32, UInt64 => u64, Bool => bool,
            Float16 => ::half::f16, BFloat16 => ::half::bf16, Float32 => f32, Float64 => f64,
            Complex64 => ::num_complex::Complex32, Complex128 => ::num_complex::Complex64)
    };
}

/// Like [`dispatch_all!`] without complex types.
#[macro_export]
macro_rules! dispatch_real {
    ($dtype:expr, $what:expr, |$T:ident| $body:expr) => {
        $crate::__dispatch!($dtype, $what, $T, $body,
            UInt8 => u8, Int8 => i8, Int16 => i16, Int32 => i32, Int64 => i64,
            UInt16 => u16, UInt32 => u32, UInt64 => u64, Bool => bool,
            Float16 => ::half::f16, BFloat16 => ::half::bf16, Float32 => f32, Float64 => f64)
    };
}

/// Like [`dispatch_all!`] without complex types and bool.
#[macro_export]
macro_rules! dispatch_numeric {
    ($dtype:expr, $what:expr, |$T:ident| $body:expr) => {
        $crate::__dispatch!($dtype, $what, $T, $body,
            UInt8 => u8, Int8 => i8, Int16 => i16, Int32 => i32, Int64 => i64,
            UInt16 => u16, UInt32 => u32, UInt64 => u64,
            Float16 => ::half::f16, BFloat16 => ::half::bf16, Float32 => f32, Float64 => f64)
    };
}

/// Floating-point types only (half, bfloat16, float, double).
#[macro_export]
macro_rules! dispatch_float {
    ($dtype:expr, $what:expr, |$T:ident| $body:expr) => {
        $crate::__dispatch!($dtype, $what, $T, $body,
            Float16 => ::half::f16, BFloat16 => ::half::bf16, Float32 => f32, Float64 => f64)
    };
}

/// Integral types only (no bool).
#[macro_export]
macro_rules! dispatch_int {
    ($dtype:expr, $what:expr, |$T:ident| $body:expr) => {
        $crate::__dispatch!($dtype, $what, $T, $body,
            UInt8 => u8, Int8 => i8, Int16 => i16, Int32 => i32, Int64 => i64,
            UInt16 => u16, UInt32 => u32, UInt64 => u64)
    };
}

// PyTorch's own kernels cover only some dtypes per op (the `AT_DISPATCH_*` macro of each
// kernel): most arithmetic, comparisons and reductions leave out the "barebones" unsigned
// types uint16/uint32/uint64 (`AT_BAREBONES_UNSIGNED_TYPES`), which only copies, `mul`, `div`,
// `eq`/`ne`, `maximum`/`minimum`, bitwise and/or/xor, `sum`/`prod`, sorting and a few more
// support. A generic kernel is instantiated once per dtype it dispatches over, so the narrower
// macros below keep the binary to the dtypes PyTorch accepts; any other dtype is PyTorch's
// "not implemented for" as a typed `UnsupportedDType` error
// (`fixtures/gen_ops_dtype_support.py` records which op accepts which).

/// Like [`dispatch_all!`] without uint16/uint32/uint64: PyTorch's
/// `AT_DISPATCH_ALL_TYPES_AND_COMPLEX_AND3(Bool, Half, BFloat16)` (`add`, `sub`, `addcmul`).
#[macro_export]
macro_rules! dispatch_standard {
    ($dtype:expr, $what:expr, |$T:ident| $body:expr) => {
        $crate::__dispatch!($dtype, $what, $T, $body,
            UInt8 => u8, Int8 => i8, Int16 => i16, Int32 => i32, Int64 => i64, Bool => bool,
            Float16 => ::half::f16, BFloat16 => ::half::bf16, Float32 => f32, Float64 => f64,
            Complex64 => ::num_complex::Complex32, Complex128 => ::num_complex::Complex64)
    };
}

/// Like [`dispatch_real!`] without uint16/uint32/uint64: PyTorch's
/// `AT_DISPATCH_ALL_TYPES_AND3(Bool, Half, BFloat16)` (comparisons, `max`, `argmax`, `neg`).
#[macro_export]
macro_rules! dispatch_standard_real {
    ($dtype:expr, $what:expr, |$T:ident| $body:expr) => {
        $crate::__dispatch!($dtype, $what, $T, $body,
            UInt8 => u8, Int8 => i8, Int16 => i16, Int32 => i32, Int64 => i64, Bool => bool,
            Float16 => ::half::f16, BFloat16 => ::half::bf16, Float32 => f32, Float64 => f64)
    };
}

/// Like [`dispatch_numeric!`] without uint16/uint32/uint64: PyTorch's
/// `AT_DISPATCH_ALL_TYPES_AND2(Half, BFloat16)` (`threshold`).
#[macro_export]
macro_rules! dispatch_standard_numeric {
    ($dtype:expr, $what:expr, |$T:ident| $body:expr) => {
        $crate::__dispatch!($dtype, $what, $T, $body,
            UInt8 => u8, Int8 => i8, Int16 => i16, Int32 => i32, Int64 => i64,
            Float16 => ::half::f16, BFloat16 => ::half::bf16, Float32 => f32, Float64 => f64)
    };
}

/// Like [`dispatch_int!`] without uint16/uint32/uint64: PyTorch's `AT_DISPATCH_INTEGRAL_TYPES`
/// (`remainder`, `pow`, floor and trunc division, shifts and `bitwise_not` of integers).
#[macro_export]
macro_rules! dispatch_standard_int {
    ($dtype:expr, $what:expr, |$T:ident| $body:expr) => {
        $crate::__dispatch!($dtype, $what, $T, $body,
            UInt8 => u8, Int8 => i8, Int16 => i16, Int32 => i32, Int64 => i64)
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __dispatch {
    ($dtype:expr, $what:expr, $T:ident, $body:expr, $($d:ident => $t:ty),*) => {
        match $dtype {
            $( $crate::tensor::DType::$d => { #[allow(dead_code)] type $T = $t; $body } )*
            #[allow(unreachable_patterns)]
            other => Err($crate::tensor::TensorError::NotImplementedForDType {
                kernel: ::std::string::ToString::to_string(&$what),
                dtype: other,
            }
            .into()),
        }
    };
}
