//! Scalar types, numbered exactly as PyTorch's `c10::ScalarType` (TorchScript passes dtypes as ints).

use std::fmt;

/// A tensor element type. The discriminant is PyTorch's `ScalarType` number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum DType {
    /// `torch.uint8`.
    UInt8 = 0,
    /// `torch.int8`.
    Int8 = 1,
    /// `torch.int16`.
    Int16 = 2,
    /// `torch.int32`.
    Int32 = 3,
    /// `torch.int64`.
    Int64 = 4,
    /// `torch.float16`.
    Float16 = 5,
    /// `torch.float32`.
    Float32 = 6,
    /// `torch.float64`.
    Float64 = 7,
    /// `torch.complex32` (two float16).
    Complex32 = 8,
    /// `torch.complex64` (two float32).
    Complex64 = 9,
    /// `torch.complex128` (two float64).
    Complex128 = 10,
    /// `torch.bool`.
    Bool = 11,
    /// `torch.qint8`.
    QInt8 = 12,
    /// `torch.quint8`.
    QUInt8 = 13,
    /// `torch.qint32`.
    QInt32 = 14,
    /// `torch.bfloat16`.
    BFloat16 = 15,
    /// `torch.quint4x2`: unsigned 4-bit quantized values (quantized embedding weights). Archives
    /// pack two per byte, low nibble first, each row to whole bytes; tsrun holds one per byte.
    QUInt4x2 = 16,
    /// `torch.float8_e5m2`.
    Float8E5M2 = 23,
    /// `torch.float8_e4m3fn`.
    Float8E4M3FN = 24,
    /// `torch.float8_e5m2fnuz`.
    Float8E5M2FNUZ = 25,
    /// `torch.float8_e4m3fnuz`.
    Float8E4M3FNUZ = 26,
    /// `torch.uint16`.
    UInt16 = 27,
    /// `torch.uint32`.
    UInt32 = 28,
    /// `torch.uint64`.
    UInt64 = 29,
    /// `torch.float8_e8m0fnu`: a power of two (8 exponent bits, no sign, no mantissa), the
    /// block scales of MX formats.
    Float8E8M0FNU = 44,
}

impl DType {
    /// Every dtype, in `ScalarType` order.
    pub const ALL: [DType; 25] = [
        DType::UInt8,
        DType::Int8,
        DType::Int16,
        DType::Int32,
        DType::Int64,
        DType::Float16,
        DType::Float32,
        DType::Float64,
        DType::Complex32,
        DType::Complex64,
        DType::Complex128,
        DType::Bool,
        DType::QInt8,
        DType::QUInt8,
        DType::QInt32,
        DType::BFloat16,
        DType::QUInt4x2,
        DType::Float8E5M2,
        DType::Float8E4M3FN,
        DType::Float8E5M2FNUZ,
        DType::Float8E4M3FNUZ,
        DType::UInt16,
        DType::UInt32,
        DType::UInt64,
        DType::Float8E8M0FNU,
    ];

    /// PyTorch's ScalarType number, as TorchScript code passes it (`dtype=6`).
    pub fn to_scalar_type(self) -> i64 {
        self as u8 as i64
    }

    /// The dtype with PyTorch's `ScalarType` number `n` (how TorchScript passes dtypes).
    pub fn from_scalar_type(n: i64) -> Option<DType> {
        DType::ALL.iter().copied().find(|d| d.to_scalar_type() == n)
    }

    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        use DType::*;
        match self {
            UInt8 | Int8 | Bool | QInt8 | QUInt8 | QUInt4x2 | Float8E5M2 | Float8E4M3FN
            | Float8E5M2FNUZ | Float8E4M3FNUZ | Float8E8M0FNU => 1,
            Int16 | Float16 | BFloat16 | UInt16 => 2,
            Int32 | Float32 | QInt32 | Complex32 | UInt32 => 4,
            Int64 | Float64 | Complex64 | UInt64 => 8,
            Complex128 => 16,
        }
    }

    /// The name `torch.float32` etc. uses (without the `torch.` prefix).
    pub fn name(self) -> &'static str {
        use DType::*;
        match self {
            UInt8 => "uint8",
            Int8 => "int8",
            Int16 => "int16",
            Int32 => "int32",
            Int64 => "int64",
            Float16 => "float16",
            Float32 => "float32",
            Float64 => "float64",
            Complex32 => "complex32",
            Complex64 => "complex64",
            Complex128 => "complex128",
            Bool => "bool",
            QInt8 => "qint8",
            QUInt8 => "quint8",
            QInt32 => "qint32",
            BFloat16 => "bfloat16",
            QUInt4x2 => "quint4x2",
            Float8E5M2 => "float8_e5m2",
            Float8E4M3FN => "float8_e4m3fn",
            Float8E5M2FNUZ => "float8_e5m2fnuz",
            Float8E4M3FNUZ => "float8_e4m3fnuz",
            Float8E8M0FNU => "float8_e8m0fnu",
            UInt16 => "uint16",
            UInt32 => "uint32",
            UInt64 => "uint64",
        }
    }

    /// c10's `toString(ScalarType)`, the name kernel errors use ("not implemented for 'Float'").
    pub fn c10_name(self) -> &'static str {
        use DType::*;
        match self {
            UInt8 => "Byte",
            Int8 => "Char",
            Int16 => "Short",
            Int32 => "Int",
            Int64 => "Long",
            Float16 => "Half",
            Float32 => "Float",
            Float64 => "Double",
            Complex32 => "ComplexHalf",
            Complex64 => "ComplexFloat",
            Complex128 => "ComplexDouble",
            Bool => "Bool",
            QInt8 => "QInt8",
            QUInt8 => "QUInt8",
            QInt32 => "QInt32",
            BFloat16 => "BFloat16",
            QUInt4x2 => "QUInt4x2",
            Float8E5M2 => "Float8_e5m2",
            Float8E4M3FN => "Float8_e4m3fn",
            Float8E5M2FNUZ => "Float8_e5m2fnuz",
            Float8E4M3FNUZ => "Float8_e4m3fnuz",
            Float8E8M0FNU => "Float8_e8m0fnu",
            UInt16 => "UInt16",
            UInt32 => "UInt32",
            UInt64 => "UInt64",
        }
    }

    /// Parse `float32`, `torch.float32`, and PyTorch aliases (`float`, `half`, `long`, ...).
    pub fn from_name(s: &str) -> Option<DType> {
        let s = s.strip_prefix("torch.").unwrap_or(s);
        let alias = match s {
            "float" => Some(DType::Float32),
            "double" => Some(DType::Float64),
            "half" => Some(DType::Float16),
            "long" => Some(DType::Int64),
            "int" => Some(DType::Int32),
            "short" => Some(DType::Int16),
            "cfloat" => Some(DType::Complex64),
            "cdouble" => Some(DType::Complex128),
            "chalf" => Some(DType::Complex32),
            _ => None,
        };
        alias.or_else(|| DType::ALL.iter().copied().find(|d| d.name() == s))
    }

    /// The storage class name in archives (`torch.FloatStorage` -> `FloatStorage`).
    pub fn storage_class(self) -> &'static str {
        use DType::*;
        match self {
            UInt8 => "ByteStorage",
            Int8 => "CharStorage",
            Int16 => "ShortStorage",
            Int32 => "IntStorage",
            Int64 => "LongStorage",
            Float16 => "HalfStorage",
            Float32 => "FloatStorage",
            Float64 => "DoubleStorage",
            Complex32 => "ComplexHalfStorage",
            Complex64 => "ComplexFloatStorage",
            Complex128 => "ComplexDoubleStorage",
            Bool => "BoolStorage",
            QInt8 => "QInt8Storage",
            QUInt8 => "QUInt8Storage",
            QInt32 => "QInt32Storage",
            BFloat16 => "BFloat16Storage",
            QUInt4x2 => "QUInt4x2Storage",
            Float8E5M2 => "Float8_e5m2Storage",
            Float8E4M3FN => "Float8_e4m3fnStorage",
            Float8E5M2FNUZ => "Float8_e5m2fnuzStorage",
            Float8E4M3FNUZ => "Float8_e4m3fnuzStorage",
            Float8E8M0FNU => "Float8_e8m0fnuStorage",
            UInt16 => "UInt16Storage",
            UInt32 => "UInt32Storage",
            UInt64 => "UInt64Storage",
        }
    }

    /// The dtype of a pickled storage class (`FloatStorage`, `HalfStorage`, ...).
    pub fn from_storage_class(s: &str) -> Option<DType> {
        DType::ALL.iter().copied().find(|d| d.storage_class() == s)
    }

    /// `dtype.is_floating_point` (float8, half, bfloat16, float, double).
    pub fn is_floating_point(self) -> bool {
        use DType::*;
        matches!(
            self,
            Float16
                | Float32
                | Float64
                | BFloat16
                | Float8E5M2
                | Float8E4M3FN
                | Float8E5M2FNUZ
                | Float8E4M3FNUZ
                | Float8E8M0FNU
        )
    }

    /// `dtype.is_complex`.
    pub fn is_complex(self) -> bool {
        matches!(
            self,
            DType::Complex32 | DType::Complex64 | DType::Complex128
        )
    }

    /// Integral types; `include_bool` as in PyTorch's `isIntegralType(t, includeBool)`.
    pub fn is_integral(self, include_bool: bool) -> bool {
        use DType::*;
        match self {
            UInt8 | Int8 | Int16 | Int32 | Int64 | UInt16 | UInt32 | UInt64 => true,
            Bool => include_bool,
            _ => false,
        }
    }

    /// `dtype.is_signed`.
    pub fn is_signed(self) -> bool {
        !matches!(
            self,
            DType::UInt8
                | DType::UInt16
                | DType::UInt32
                | DType::UInt64
                | DType::Bool
                | DType::Float8E8M0FNU
        )
    }

    /// The real counterpart of a complex type (`complex64` -> `float32`), identity otherwise.
    pub fn to_real(self) -> DType {
        match self {
            DType::Complex32 => DType::Float16,
            DType::Complex64 => DType::Float32,
            DType::Complex128 => DType::Float64,
            d => d,
        }
    }

    /// The complex counterpart of a real floating type (`float32` -> `complex64`).
    pub fn to_complex(self) -> DType {
        match self {
            DType::Float16 => DType::Complex32,
            DType::Float64 => DType::Complex128,
            DType::Complex32 | DType::Complex64 | DType::Complex128 => self,
            _ => DType::Complex64,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
