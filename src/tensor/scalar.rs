//! `Scalar`: a number as TorchScript passes it to `Scalar` schema arguments.

use super::DType;
use num_complex::Complex64;

/// A Python number: `bool`, `int`, `float` or `complex` (a `Scalar` in ATen).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    /// `bool`.
    Bool(bool),
    /// `int`.
    Int(i64),
    /// `float`.
    Float(f64),
    /// `complex`.
    Complex(Complex64),
}

impl Scalar {
    /// As a double (complex: the real part; bool: 0 or 1).
    pub fn to_f64(self) -> f64 {
        match self {
            Scalar::Bool(b) => b as i64 as f64,
            Scalar::Int(i) => i as f64,
            Scalar::Float(f) => f,
            Scalar::Complex(c) => c.re,
        }
    }

    /// As an int64 (floats truncate toward zero).
    pub fn to_i64(self) -> i64 {
        match self {
            Scalar::Bool(b) => b as i64,
            Scalar::Int(i) => i,
            Scalar::Float(f) => f as i64,
            Scalar::Complex(c) => c.re as i64,
        }
    }

    /// `!= 0`.
    pub fn to_bool(self) -> bool {
        match self {
            Scalar::Bool(b) => b,
            Scalar::Int(i) => i != 0,
            Scalar::Float(f) => f != 0.0,
            Scalar::Complex(c) => c.re != 0.0 || c.im != 0.0,
        }
    }

    /// As a complex number.
    pub fn to_c64(self) -> Complex64 {
        match self {
            Scalar::Complex(c) => c,
            s => Complex64::new(s.to_f64(), 0.0),
        }
    }

    /// The dtype a tensor made from this scalar gets (`torch.tensor(3)` is int64, etc.).
    pub fn default_dtype(self) -> DType {
        match self {
            Scalar::Bool(_) => DType::Bool,
            Scalar::Int(_) => DType::Int64,
            Scalar::Float(_) => DType::Float32,
            Scalar::Complex(_) => DType::Complex64,
        }
    }

    /// The "wrapped number" dtype used in type promotion: bool, int64, float64, complex128.
    pub fn wrapped_dtype(self) -> DType {
        match self {
            Scalar::Bool(_) => DType::Bool,
            Scalar::Int(_) => DType::Int64,
            Scalar::Float(_) => DType::Float64,
            Scalar::Complex(_) => DType::Complex128,
        }
    }

    /// Whether this is a `float` or `complex` (not a `bool` or `int`).
    pub fn is_floating_point(self) -> bool {
        matches!(self, Scalar::Float(_))
    }
}

impl From<f64> for Scalar {
    fn from(v: f64) -> Self {
        Scalar::Float(v)
    }
}
impl From<i64> for Scalar {
    fn from(v: i64) -> Self {
        Scalar::Int(v)
    }
}
impl From<bool> for Scalar {
    fn from(v: bool) -> Self {
        Scalar::Bool(v)
    }
}
