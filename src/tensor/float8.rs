//! The 8-bit float formats (`torch.float8_*`, `float8_e8m0fnu` included) and complex32 (`torch.complex32`, two float16),
//! as storage element types with c10's conversions to and from `float`.
//!
//! PyTorch's CPU kernels accept these dtypes only for copies, conversions, fills and a few
//! index/shape ops, so they are kept out of the `dispatch_*!` macros (which would instantiate
//! every generic kernel for them): a conversion goes through `float` (`complex<float>` for
//! complex32), the way c10's `static_cast` does, and every other kernel refuses them with its
//! usual unsupported-dtype error.

use super::element::Element;
use super::DType;
use half::f16;
use num_complex::Complex64;

/// How a float8 format spends its special codes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Specials {
    /// IEEE-like (`e5m2`): exponent all ones is inf (mantissa 0) or NaN; finite values past the
    /// largest round to inf.
    Ieee,
    /// "Finite" (`e4m3fn`): only `S.1111.111` is NaN, no inf; c10 saturates every value past
    /// the largest finite one, inf included, to the largest.
    Finite,
    /// "Finite, unsigned zero" (`e5m2fnuz`, `e4m3fnuz`): `0x80` (negative zero's code) is the one
    /// NaN, there is no inf or negative zero; values past the largest become NaN.
    FiniteUnsignedZero,
}

/// One float8 format: mantissa bits, exponent bias and special codes.
#[derive(Clone, Copy)]
struct Format {
    mantissa_bits: u32,
    bias: i32,
    specials: Specials,
}

const E5M2: Format = Format {
    mantissa_bits: 2,
    bias: 15,
    specials: Specials::Ieee,
};
const E4M3FN: Format = Format {
    mantissa_bits: 3,
    bias: 7,
    specials: Specials::Finite,
};
const E5M2FNUZ: Format = Format {
    mantissa_bits: 2,
    bias: 16,
    specials: Specials::FiniteUnsignedZero,
};
const E4M3FNUZ: Format = Format {
    mantissa_bits: 3,
    bias: 8,
    specials: Specials::FiniteUnsignedZero,
};

impl Format {
    /// The value of `code` (exact: every float8 value is a float).
    fn decode(self, code: u8) -> f32 {
        let m = self.mantissa_bits;
        let magnitude = code & 0x7F;
        let negative = code & 0x80 != 0;
        let exponent = i32::from(magnitude >> m);
        let mantissa = f32::from(magnitude & ((1 << m) - 1));
        let top: i32 = 0x7F >> m;
        let special = match self.specials {
            Specials::Ieee if exponent == top => Some(if mantissa == 0.0 {
                f32::INFINITY
            } else {
                f32::NAN
            }),
            Specials::Finite if magnitude == 0x7F => Some(f32::NAN),
            Specials::FiniteUnsignedZero if code == 0x80 => return f32::NAN,
            _ => None,
        };
        let value = special.unwrap_or_else(|| {
            let scale = |e: i32| f32::powi(2.0, e);
            if exponent == 0 {
                mantissa * scale(1 - self.bias - m as i32)
            } else {
                (1.0 + mantissa * scale(-(m as i32))) * scale(exponent - self.bias)
            }
        });
        if negative {
            -value
        } else {
            value
        }
    }

    /// The code of `value` rounded to nearest, ties to even, with the format's overflow rule
    /// (c10's `fp8*_from_fp32_value`).
    fn encode(self, value: f32) -> u8 {
        let m = self.mantissa_bits;
        let bits = value.to_bits();
        let sign = ((bits >> 24) & 0x80) as u8;
        let magnitude_bits = bits & 0x7FFF_FFFF;
        let nan = match self.specials {
            Specials::Ieee | Specials::Finite => 0x7F | sign,
            Specials::FiniteUnsignedZero => 0x80,
        };
        if value.is_nan() {
            return nan;
        }
        // the magnitude's code, before the overflow rule (u32: it may pass 0x7F)
        let min_normal_exponent = (128 - self.bias) as u32; // in float's bias
        let code = if magnitude_bits < min_normal_exponent << 23 {
            // subnormal: a multiple of the smallest step, rounded half to even (the division
            // by a power of two is exact)
            let step = f32::powi(2.0, 1 - self.bias - m as i32);
            (f32::from_bits(magnitude_bits) / step).round_ties_even() as u32
        } else {
            // normal: round float's 23 mantissa bits to `m`, half to even, then rebias
            let shift = 23 - m;
            let odd = (magnitude_bits >> shift) & 1;
            let rounded = magnitude_bits.saturating_add((1 << (shift - 1)) - 1 + odd) >> shift;
            rounded - (((127 - self.bias) as u32) << m)
        };
        match self.specials {
            Specials::Ieee if code >= 0x7C => 0x7C | sign,
            Specials::Finite if code >= 0x7F => 0x7E | sign,
            Specials::FiniteUnsignedZero if code > 0x7F => nan,
            Specials::FiniteUnsignedZero if code == 0 => 0,
            _ => code as u8 | sign,
        }
    }
}

/// `Element` for a float8 type with `to_f32`/`from_f32` (c10 converts through float, the
/// formats' only constructor).
macro_rules! float8_element_impl {
    ($name:ident, $dtype:ident) => {
        impl Element for $name {
            const DTYPE: DType = DType::$dtype;
            fn to_f64(self) -> f64 {
                f64::from(self.to_f32())
            }
            fn from_f64(v: f64) -> Self {
                Self::from_f32(v as f32)
            }
            fn to_i64(self) -> i64 {
                let v = self.to_f32();
                if v.is_nan() {
                    i64::MIN
                } else {
                    v as i64
                }
            }
            fn from_i64(v: i64) -> Self {
                Self::from_f32(v as f32)
            }
            fn to_bool(self) -> bool {
                self.to_f32() != 0.0
            }
        }
    };
}

macro_rules! float8_element {
    ($(#[$doc:meta])* $name:ident, $dtype:ident, $format:expr) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Default, PartialEq, Debug)]
        #[repr(transparent)]
        pub struct $name(pub u8);

        impl $name {
            /// The value as a float (exact).
            #[inline]
            pub fn to_f32(self) -> f32 {
                $format.decode(self.0)
            }
            /// `value` rounded to this format as c10 rounds it.
            #[inline]
            pub fn from_f32(value: f32) -> Self {
                $name($format.encode(value))
            }
        }

        float8_element_impl!($name, $dtype);
    };
}

float8_element!(
    /// One `torch.float8_e5m2` element (1 sign, 5 exponent, 2 mantissa bits; inf and NaN).
    Float8E5M2,
    Float8E5M2,
    E5M2
);
float8_element!(
    /// One `torch.float8_e4m3fn` element (1 sign, 4 exponent, 3 mantissa bits; NaN, no inf).
    Float8E4M3FN,
    Float8E4M3FN,
    E4M3FN
);
float8_element!(
    /// One `torch.float8_e5m2fnuz` element (NaN is `0x80`; no inf, no negative zero).
    Float8E5M2FNUZ,
    Float8E5M2FNUZ,
    E5M2FNUZ
);
float8_element!(
    /// One `torch.float8_e4m3fnuz` element (NaN is `0x80`; no inf, no negative zero).
    Float8E4M3FNUZ,
    Float8E4M3FNUZ,
    E4M3FNUZ
);

/// One `torch.float8_e8m0fnu` element: the code is a biased exponent (`2^(code - 127)`), `0xFF`
/// is NaN; there is no sign, zero or infinity.
#[derive(Clone, Copy, Default, PartialEq, Debug)]
#[repr(transparent)]
pub struct Float8E8M0FNU(pub u8);

impl Float8E8M0FNU {
    /// The value as a float (exact; code 0 is float's subnormal `2^-127`).
    pub fn to_f32(self) -> f32 {
        match self.0 {
            0xFF => f32::NAN,
            0 => f32::from_bits(0x0040_0000),
            e => f32::from_bits(u32::from(e) << 23),
        }
    }
    /// `value` as c10 converts it: the sign dropped, float's exponent rounded to nearest with
    /// the implied bit as the last kept one (a normal float's ties go up; a subnormal's, whose
    /// implied bit is 0, go down), NaN, inf and overflow to NaN.
    pub fn from_f32(value: f32) -> Self {
        if !value.is_finite() {
            return Float8E8M0FNU(0xFF);
        }
        let bits = value.to_bits();
        let exponent = (bits >> 23) & 0xFF;
        let guard = bits & 0x0040_0000 != 0;
        let round_up = guard && (exponent != 0 || bits & 0x003F_FFFF != 0);
        Float8E8M0FNU((exponent + u32::from(round_up)).min(0xFF) as u8)
    }
}

float8_element_impl!(Float8E8M0FNU, Float8E8M0FNU);

/// One `torch.complex32` element (`c10::complex<c10::Half>`): real and imaginary float16.
#[derive(Clone, Copy, Default, PartialEq, Debug)]
#[repr(C)]
pub struct ComplexHalf {
    /// The real part.
    pub re: f16,
    /// The imaginary part.
    pub im: f16,
}

impl Element for ComplexHalf {
    const DTYPE: DType = DType::Complex32;
    fn to_f64(self) -> f64 {
        self.re.to_f64()
    }
    fn from_f64(v: f64) -> Self {
        Self::from_c64(Complex64::new(v, 0.0))
    }
    fn to_i64(self) -> i64 {
        self.re.to_f32() as i64
    }
    fn from_i64(v: i64) -> Self {
        Self::from_f64(v as f64)
    }
    fn to_c64(self) -> Complex64 {
        Complex64::new(self.re.to_f64(), self.im.to_f64())
    }
    fn from_c64(v: Complex64) -> Self {
        // through complex<float>, as c10 narrows a complex<double>
        ComplexHalf {
            re: f16::from_f32(v.re as f32),
            im: f16::from_f32(v.im as f32),
        }
    }
    fn to_bool(self) -> bool {
        self.re.to_f32() != 0.0 || self.im.to_f32() != 0.0
    }
}

/// Whether filling a `dtype` tensor with `s` overflows, as c10's `checked_convert` decides for
/// `fill_`/`full` (tensor conversions saturate or round to inf/NaN instead): a finite value
/// outside `[lowest, max]` (`float8_e8m0fnu`'s lowest is `2^-127`: zero and negative floats
/// overflow), inf into a format without inf, or a complex value with an imaginary part; a
/// complex32 fill is not checked.
pub fn fill_overflows(dtype: DType, s: super::Scalar) -> bool {
    use super::Scalar;
    let (lowest, max, has_inf) = match dtype {
        DType::Float8E5M2 => (-57344.0, 57344.0, true),
        DType::Float8E4M3FN => (-448.0, 448.0, false),
        DType::Float8E5M2FNUZ => (-57344.0, 57344.0, false),
        DType::Float8E4M3FNUZ => (-240.0, 240.0, false),
        DType::Float8E8M0FNU => (f64::powi(2.0, -127), f64::powi(2.0, 127), false),
        // PyTorch does not check what fills a complex32 tensor
        _ => return false,
    };
    let out_of_range = |v: f64| {
        if v.is_infinite() {
            !has_inf
        } else {
            v < lowest || v > max
        }
    };
    match s {
        Scalar::Bool(_) => false,
        // an unsigned format lets negative integers wrap (c10's `overflows` for integers):
        // no int64 passes e8m0's largest value either way
        Scalar::Int(_) if dtype == DType::Float8E8M0FNU => false,
        Scalar::Int(i) => out_of_range(i as f64),
        Scalar::Float(f) => out_of_range(f),
        Scalar::Complex(c) => out_of_range(c.re) || c.im != 0.0,
    }
}

/// Whether `dtype` is one of the storage-only types of this module (float8, complex32), which
/// the generic dispatch leaves out.
#[inline]
pub fn is_storage_only(dtype: DType) -> bool {
    matches!(
        dtype,
        DType::Float8E5M2
            | DType::Float8E4M3FN
            | DType::Float8E5M2FNUZ
            | DType::Float8E4M3FNUZ
            | DType::Float8E8M0FNU
            | DType::Complex32
    )
}

/// The integer type of a storage-only dtype's size, which moves its elements bitwise.
pub fn bits_dtype(dtype: DType) -> Option<DType> {
    match dtype {
        DType::Complex32 => Some(DType::Int32),
        d if is_storage_only(d) => Some(DType::UInt8),
        _ => None,
    }
}

/// The dtype a storage-only dtype converts through (float for float8, complex64 for
/// complex32): every conversion from or to it is exact or rounds as c10's does.
pub fn conversion_dtype(dtype: DType) -> DType {
    if dtype == DType::Complex32 {
        DType::Complex64
    } else {
        DType::Float32
    }
}

/// Run `$body` with `$T` bound to the element type of a storage-only `$dtype`; other dtypes are
/// an unsupported-dtype error naming `$what`.
#[macro_export]
macro_rules! dispatch_storage_only {
    ($dtype:expr, $what:expr, |$T:ident| $body:expr) => {
        $crate::__dispatch!($dtype, $what, $T, $body,
            Float8E5M2 => $crate::tensor::float8::Float8E5M2,
            Float8E4M3FN => $crate::tensor::float8::Float8E4M3FN,
            Float8E5M2FNUZ => $crate::tensor::float8::Float8E5M2FNUZ,
            Float8E4M3FNUZ => $crate::tensor::float8::Float8E4M3FNUZ,
            Float8E8M0FNU => $crate::tensor::float8::Float8E8M0FNU,
            Complex32 => $crate::tensor::float8::ComplexHalf)
    };
}
