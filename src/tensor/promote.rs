//! PyTorch's type promotion (`torch.result_type`, `c10::promoteTypes`).

use super::{DType, Scalar, Tensor};

/// Category order used by promotion: bool < integral < floating < complex.
fn category(d: DType) -> u8 {
    if d == DType::Bool {
        0
    } else if d.is_integral(false) {
        1
    } else if d.is_complex() {
        3
    } else {
        2
    }
}

/// `c10::promoteTypes(a, b)` for the types tsrun computes with.
pub fn promote_types(a: DType, b: DType) -> DType {
    use DType::*;
    if a == b {
        return a;
    }
    let (ca, cb) = (category(a), category(b));
    if ca != cb {
        let (hi, lo) = if ca > cb { (a, b) } else { (b, a) };
        // complex with a wider real float widens the complex type
        if hi.is_complex() && lo.is_floating_point() {
            let real = promote_types(hi.to_real(), lo);
            return real.to_complex();
        }
        return hi;
    }
    match ca {
        0 => Bool,
        1 => {
            // Unsigned and signed mix: uint8 with a signed type goes to the next wider signed.
            let signed_rank = |d: DType| match d {
                Int8 => 1,
                Int16 => 2,
                Int32 => 3,
                Int64 => 4,
                _ => 0,
            };
            let unsigned_rank = |d: DType| match d {
                UInt8 => 1,
                UInt16 => 2,
                UInt32 => 3,
                UInt64 => 4,
                _ => 0,
            };
            match (a.is_signed(), b.is_signed()) {
                (true, true) => {
                    if signed_rank(a) >= signed_rank(b) {
                        a
                    } else {
                        b
                    }
                }
                (false, false) => {
                    if unsigned_rank(a) >= unsigned_rank(b) {
                        a
                    } else {
                        b
                    }
                }
                _ => {
                    let (s, u) = if a.is_signed() { (a, b) } else { (b, a) };
                    if u == UInt8 {
                        if s == Int8 {
                            Int16
                        } else {
                            s
                        }
                    } else {
                        // PyTorch errors or picks int64 for wide unsigned + signed; int64 is the useful answer.
                        Int64
                    }
                }
            }
        }
        2 => {
            let rank = |d: DType| match d {
                Float16 | BFloat16 => 1,
                Float32 => 2,
                Float64 => 3,
                _ => 0,
            };
            if (a == Float16 && b == BFloat16) || (a == BFloat16 && b == Float16) {
                Float32
            } else if rank(a) >= rank(b) {
                a
            } else {
                b
            }
        }
        _ => {
            let rank = |d: DType| match d {
                Complex32 => 1,
                Complex64 => 2,
                _ => 3,
            };
            if rank(a) >= rank(b) {
                a
            } else {
                b
            }
        }
    }
}

/// An operand of a promoting operation: a tensor (0-d tensors are weaker than dimensioned ones)
/// or a Python number ("wrapped number", weakest of all).
#[derive(Clone, Copy)]
pub enum Operand<'a> {
    /// A tensor operand.
    Tensor(&'a Tensor),
    /// A Python number (a wrapped number).
    Scalar(Scalar),
}

/// `torch.result_type` over several operands, following PyTorch's three-tier rule:
/// dimensioned tensors, then zero-dim tensors, then wrapped numbers; a lower tier only matters
/// when it is of a higher category (e.g. a float scalar with an int tensor gives the default float).
pub fn result_type(operands: &[Operand<'_>]) -> DType {
    let mut dim_result: Option<DType> = None;
    let mut zero_result: Option<DType> = None;
    let mut wrapped_result: Option<DType> = None;
    let merge = |slot: &mut Option<DType>, d: DType| {
        *slot = Some(match *slot {
            None => d,
            Some(s) => promote_types(s, d),
        });
    };
    for op in operands {
        match op {
            Operand::Tensor(t) if t.dim() > 0 => merge(&mut dim_result, t.dtype()),
            Operand::Tensor(t) => merge(&mut zero_result, t.dtype()),
            Operand::Scalar(s) => {
                // wrapped numbers participate by category with the default dtype of that category
                let d = match s {
                    Scalar::Bool(_) => DType::Bool,
                    Scalar::Int(_) => DType::Int64,
                    Scalar::Float(_) => DType::Float32,
                    Scalar::Complex(_) => DType::Complex64,
                };
                merge(&mut wrapped_result, d)
            }
        }
    }
    let combine = |higher: Option<DType>, lower: Option<DType>| -> Option<DType> {
        match (higher, lower) {
            (None, l) => l,
            (h, None) => h,
            (Some(h), Some(l)) => {
                if category(l) > category(h) {
                    if l.is_complex() && h.is_floating_point() {
                        // e.g. float16 tensor * 1j -> complex32
                        Some(h.to_complex())
                    } else if l.is_complex() || l.is_floating_point() {
                        // lower tier of a higher category: its own dtype (already default-sized for wrapped)
                        Some(l)
                    } else {
                        Some(l)
                    }
                } else {
                    Some(h)
                }
            }
        }
    };
    let r = combine(dim_result, zero_result);
    combine(r, wrapped_result).unwrap_or(DType::Float32)
}
