//! The `prims::` operators (PyTorch's primitive set, `torch/_prims`) that take the same
//! arguments as an aten overload and compute the same values: each is registered as an alias
//! of that overload's kernel. Primitives whose semantics differ (`prims::div` truncates
//! integers, `prims::add`/`sub` have no `alpha`, `prims::bessel_i0`/`bessel_i1` are NaN at
//! infinity where `aten::i0`/`special_i1` are infinite) are left out rather than aliased.

use super::Registry;

/// `prims::` name, the aten overload with the same arguments and results.
const SAME_AS_ATEN: &[(&str, &str)] = &[
    // unary
    ("prims::abs", "aten::abs"),
    ("prims::acos", "aten::acos"),
    ("prims::acosh", "aten::acosh"),
    ("prims::asin", "aten::asin"),
    ("prims::asinh", "aten::asinh"),
    ("prims::atan", "aten::atan"),
    ("prims::atanh", "aten::atanh"),
    ("prims::bessel_i0e", "aten::special_i0e"),
    ("prims::bessel_i1e", "aten::special_i1e"),
    ("prims::bitwise_not", "aten::bitwise_not"),
    ("prims::ceil", "aten::ceil"),
    ("prims::cos", "aten::cos"),
    ("prims::cosh", "aten::cosh"),
    ("prims::digamma", "aten::digamma"),
    ("prims::erf", "aten::erf"),
    ("prims::erf_inv", "aten::erfinv"),
    ("prims::erfc", "aten::erfc"),
    ("prims::erfcx", "aten::special_erfcx"),
    ("prims::exp", "aten::exp"),
    ("prims::exp2", "aten::exp2"),
    ("prims::expm1", "aten::expm1"),
    ("prims::floor", "aten::floor"),
    ("prims::isfinite", "aten::isfinite"),
    ("prims::lgamma", "aten::lgamma"),
    ("prims::log", "aten::log"),
    ("prims::log10", "aten::log10"),
    ("prims::log1p", "aten::log1p"),
    ("prims::log2", "aten::log2"),
    ("prims::ndtri", "aten::special_ndtri"),
    ("prims::neg", "aten::neg"),
    ("prims::reciprocal", "aten::reciprocal"),
    ("prims::round", "aten::round"),
    ("prims::rsqrt", "aten::rsqrt"),
    ("prims::sign", "aten::sign"),
    ("prims::signbit", "aten::signbit"),
    ("prims::sin", "aten::sin"),
    ("prims::sinh", "aten::sinh"),
    ("prims::sqrt", "aten::sqrt"),
    ("prims::tan", "aten::tan"),
    ("prims::tanh", "aten::tanh"),
    ("prims::trunc", "aten::trunc"),
    // binary
    ("prims::atan2", "aten::atan2"),
    ("prims::bitwise_and", "aten::bitwise_and.Tensor"),
    ("prims::bitwise_or", "aten::bitwise_or.Tensor"),
    ("prims::bitwise_xor", "aten::bitwise_xor.Tensor"),
    ("prims::eq", "aten::eq.Tensor"),
    ("prims::fmax", "aten::fmax"),
    ("prims::fmin", "aten::fmin"),
    ("prims::fmod", "aten::fmod.Tensor"),
    ("prims::gcd", "aten::gcd"),
    ("prims::ge", "aten::ge.Tensor"),
    ("prims::gt", "aten::gt.Tensor"),
    ("prims::hypot", "aten::hypot"),
    ("prims::le", "aten::le.Tensor"),
    ("prims::lt", "aten::lt.Tensor"),
    ("prims::maximum", "aten::maximum"),
    ("prims::minimum", "aten::minimum"),
    ("prims::mul", "aten::mul.Tensor"),
    ("prims::ne", "aten::ne.Tensor"),
    ("prims::pow", "aten::pow.Tensor_Tensor"),
    ("prims::remainder", "aten::remainder.Tensor"),
    ("prims::shift_left", "aten::bitwise_left_shift.Tensor"),
    ("prims::zeta", "aten::special_zeta"),
    (
        "prims::shift_right_arithmetic",
        "aten::bitwise_right_shift.Tensor",
    ),
    // ternary
    ("prims::where", "aten::where.self"),
];

/// Register every alias; runs after the families that register the aten kernels.
pub(crate) fn register(r: &mut Registry) {
    for &(prim, aten) in SAME_AS_ATEN {
        r.alias(prim, aten);
    }
}
