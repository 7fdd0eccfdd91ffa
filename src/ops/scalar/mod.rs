//! Builtins on non-tensor values that TorchScript code calls as operators, a file per concern:
//! `numbers.rs` (int/float/bool/complex arithmetic and math), `conversions.rs`, `lists.rs`,
//! `dicts.rs`, `strings.rs` and `prims.rs` (the `prim::` queries on tensors: `prim::dtype`,
//! `prim::device`, ...); this file holds the shared helpers and `register`. Semantics follow PyTorch's `register_prim_ops.cpp`
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

mod conversions;
mod dicts;
mod lists;
mod numbers;
mod prims;
mod strings;

use conversions::*;
use dicts::*;
use lists::*;
pub use numbers::values_equal;
use numbers::*;
use prims::*;
use strings::*;

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
    r.add("aten::pow.int_to_int", pow_int_to_int);
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
    add_overloads(r, "aten::sum", &["int", "bool", "complex"], sum);
    add_overloads(r, "aten::sum", &["float"], sum_float);
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
