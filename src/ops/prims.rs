//! The `prims::` operators (PyTorch's primitive set, `torch/_prims`) that take the same
//! arguments as an aten overload and compute the same values: each is registered as an alias
//! of that overload's kernel. Primitives whose semantics differ (`prims::div` truncates
//! integers, `prims::add`/`sub` have no `alpha`, `prims::bessel_i0`/`bessel_i1` are NaN at
//! infinity where `aten::i0`/`special_i1` are infinite) are left out rather than aliased; the
//! primitives whose arguments are an aten overload's rearranged (`prims::add` without `alpha`,
//! `prims::sum(inp, dims, output_dtype)`, `prims::iota`, ...) call that overload's kernel
//! with the arguments it takes.

use super::kernels::{
    check_size, invalid_argument, not_implemented_for, unsupported, unsupported_feature,
    wrong_dtype,
};
use super::{Args, Registry};
use crate::tensor::{DType, Tensor};
use crate::values::IValue;

type R = crate::Result<IValue>;

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
    // complex parts, copies and views with aten's arguments
    ("prims::real", "aten::real"),
    ("prims::imag", "aten::imag"),
    ("prims::conj", "aten::conj"),
    ("prims::conj_physical", "aten::conj_physical"),
    ("prims::clone", "aten::clone"),
    ("prims::reshape", "aten::reshape"),
    ("prims::squeeze", "aten::squeeze.dims"),
    ("prims::transpose", "aten::permute"),
    ("prims::rev", "aten::flip"),
    ("prims::cat", "aten::cat"),
    ("prims::as_strided", "aten::as_strided"),
    ("prims::view_of", "aten::alias"),
    ("prims::view_of_dtype", "aten::view.dtype"),
    ("prims::fill", "aten::fill.Scalar"),
    ("prims::frexp", "aten::frexp.Tensor"),
    ("prims::nextafter", "aten::nextafter"),
    ("prims::item", "aten::item"),
];

/// Run the aten overload `name` (`aten::add.Tensor`) on `values`: a primitive's arguments in
/// that overload's schema order.
pub(crate) fn via_aten(a: &Args<'_>, name: &str, mut values: Vec<IValue>) -> R {
    let (op, overload) = name.split_once('.').unwrap_or((name, ""));
    let kernel = Registry::global()
        .lookup(op, overload)
        .ok_or_else(|| unsupported(format!("{}: no kernel for {name}", a.op)))?;
    kernel(&mut Args::new(a.op, &mut values, a.ctx))
}

/// The tensor result of a kernel, converted to `dtype` when given (`output_dtype=`).
fn with_dtype(r: IValue, dtype: Option<DType>) -> R {
    match (r, dtype) {
        (IValue::Tensor(t), Some(d)) => Ok(IValue::Tensor(t.to_dtype(d)?)),
        (r, _) => Ok(r),
    }
}

/// A reduction primitive's `dims` (None: every dim) as an aten `int[]`.
fn all_dims(a: &Args<'_>, x: &Tensor) -> crate::Result<IValue> {
    let dims = match a.opt_int_list(1)? {
        Some(d) => d,
        None => (0..x.dim() as i64).collect(),
    };
    Ok(IValue::List(crate::values::List::new(
        crate::values::Type::Int,
        dims.into_iter().map(IValue::Int).collect(),
    )))
}

/// `prims::add` / `prims::sub`: aten's with `alpha` 1.
fn add(a: &mut Args<'_>) -> R {
    via_aten(
        a,
        "aten::add.Tensor",
        vec![a.get(0)?.clone(), a.get(1)?.clone(), IValue::Int(1)],
    )
}
fn sub(a: &mut Args<'_>) -> R {
    via_aten(
        a,
        "aten::sub.Tensor",
        vec![a.get(0)?.clone(), a.get(1)?.clone(), IValue::Int(1)],
    )
}

/// `prims::div`: true division of floats, truncating division of integers (C's `/`).
fn div(a: &mut Args<'_>) -> R {
    let x = a.tensor(0)?;
    let mode = if x.dtype().is_integral(true) {
        IValue::str("trunc".to_string())
    } else {
        IValue::None
    };
    via_aten(
        a,
        "aten::div.Tensor_mode",
        vec![a.get(0)?.clone(), a.get(1)?.clone(), mode],
    )
}

/// `prims::amax` / `amin` / `sum` (inp, dims, *, output_dtype): aten's over `dims`, no
/// keepdim.
fn amax(a: &mut Args<'_>) -> R {
    extremum(a, "aten::amax")
}
fn amin(a: &mut Args<'_>) -> R {
    extremum(a, "aten::amin")
}
fn extremum(a: &mut Args<'_>, aten: &str) -> R {
    let x = a.tensor(0)?;
    let r = via_aten(
        a,
        aten,
        vec![
            IValue::Tensor(x.clone()),
            all_dims(a, &x)?,
            IValue::Bool(false),
        ],
    )?;
    with_dtype(r, a.opt_dtype(2)?)
}
fn sum(a: &mut Args<'_>) -> R {
    let x = a.tensor(0)?;
    let dtype = a.get(2)?.clone();
    via_aten(
        a,
        "aten::sum.dim_IntList",
        vec![
            IValue::Tensor(x.clone()),
            all_dims(a, &x)?,
            IValue::Bool(false),
            dtype,
        ],
    )
}

/// `prims::prod(inp, dims, *, output_dtype)`: the product over `dims`, one dim at a time from
/// the last.
fn prod(a: &mut Args<'_>) -> R {
    let x = a.tensor(0)?;
    let dtype = a.get(2)?.clone();
    let Some(mut dims) = a.opt_int_list(1)? else {
        return via_aten(a, "aten::prod", vec![IValue::Tensor(x), dtype]);
    };
    let nd = x.dim();
    let mut wrapped = dims
        .iter()
        .map(|&d| crate::tensor::wrap_dim(d, nd))
        .collect::<Result<Vec<_>, _>>()?;
    wrapped.sort_unstable();
    wrapped.dedup();
    dims = wrapped.iter().rev().map(|&d| d as i64).collect();
    let mut cur = IValue::Tensor(x);
    for (i, d) in dims.iter().enumerate() {
        // the output dtype applies once, at the first step
        let dt = if i == 0 { dtype.clone() } else { IValue::None };
        cur = via_aten(
            a,
            "aten::prod.dim_int",
            vec![cur, IValue::Int(*d), IValue::Bool(false), dt],
        )?;
    }
    Ok(cur)
}

/// `prims::var(inp, dims, correction, *, output_dtype)`.
fn var(a: &mut Args<'_>) -> R {
    let x = a.tensor(0)?;
    let correction = match a.opt_double(2)? {
        Some(c) => IValue::Double(c),
        None => IValue::None,
    };
    let r = via_aten(
        a,
        "aten::var.correction",
        vec![
            IValue::Tensor(x.clone()),
            all_dims(a, &x)?,
            correction,
            IValue::Bool(false),
        ],
    )?;
    with_dtype(r, a.opt_dtype(3)?)
}

/// `prims::broadcast_in_dim(a, shape, broadcast_dimensions)`: `a`'s dim `i` becomes output dim
/// `broadcast_dimensions[i]`, the others are new (size-1, then expanded to `shape`).
fn broadcast_in_dim(a: &mut Args<'_>) -> R {
    let x = a.tensor(0)?;
    let shape = a.int_list(1)?;
    let dims = a.int_list(2)?;
    check_size(
        a.op,
        "the length of broadcast_dimensions (one per input dim)",
        x.dim() as i64,
        dims.len() as i64,
    )?;
    if dims.windows(2).any(|w| w[0] >= w[1]) {
        return Err(invalid_argument(
            a.op,
            "broadcast_dimensions",
            "must be increasing",
            format!("{dims:?}"),
        ));
    }
    let mut v = x;
    for d in 0..shape.len() as i64 {
        if !dims.contains(&d) {
            v = super::shape::unsqueeze(&v, d)?;
        }
    }
    Ok(IValue::Tensor(super::shape::expand(&v, &shape)?))
}

/// `prims::collapse(a, start, end)` (a copy) and `collapse_view`: dims `start..=end` merged
/// into one.
fn collapse(a: &mut Args<'_>, copy: bool) -> R {
    let x = a.tensor(0)?;
    let (start, end) = (a.int(1)?, a.int(2)?);
    let nd = x.dim() as i64;
    if !(0 <= start && start <= end && end < nd.max(1)) {
        return Err(invalid_argument(
            a.op,
            "[start, end]",
            format!(
                "must satisfy 0 <= start <= end < {} (the input's dims)",
                nd.max(1)
            ),
            format!("[{start}, {end}]"),
        ));
    }
    let (s, e) = (start as usize, (end as usize + 1).min(x.dim()));
    let mut shape: Vec<i64> = x.shape()[..s].iter().map(|&d| d as i64).collect();
    shape.push(x.shape()[s..e].iter().product::<usize>() as i64);
    shape.extend(x.shape()[e..].iter().map(|&d| d as i64));
    Ok(IValue::Tensor(if copy {
        super::shape::reshape(&x, &shape)?.deep_clone()?
    } else {
        super::shape::view(&x, &shape)?
    }))
}

/// `prims::split_dim(a, dim, outer_length)`: `dim` split into (outer_length, rest).
fn split_dim(a: &mut Args<'_>) -> R {
    let x = a.tensor(0)?;
    let d = crate::tensor::wrap_dim(a.int(1)?, x.dim())?;
    let outer = a.int(2)?;
    let size = x.shape()[d] as i64;
    if outer <= 0 || size % outer != 0 {
        return Err(invalid_argument(
            a.op,
            "outer_length",
            format!("must be positive and divide dim {d} of size {size}"),
            outer,
        ));
    }
    let mut shape: Vec<i64> = x.shape().iter().map(|&s| s as i64).collect();
    shape.splice(d..=d, [outer, size / outer]);
    Ok(IValue::Tensor(super::shape::view(&x, &shape)?))
}

/// `prims::convert_element_type(a, dtype)`: a converted copy.
fn convert_element_type(a: &mut Args<'_>) -> R {
    let x = a.tensor(0)?;
    let dtype = a.dtype(1)?;
    Ok(IValue::Tensor(if x.dtype() == dtype {
        x.deep_clone()?
    } else {
        x.to_dtype(dtype)?
    }))
}

/// `prims::full(shape, fill_value, *, dtype, device, requires_grad)`.
fn full(a: &mut Args<'_>) -> R {
    via_aten(
        a,
        "aten::full",
        vec![
            a.get(0)?.clone(),
            a.get(1)?.clone(),
            a.get(2)?.clone(),
            IValue::None,
            a.get(3)?.clone(),
            IValue::None,
        ],
    )
}

/// `prims::full_like(a, fill_value, *, dtype, device, requires_grad)`.
fn full_like(a: &mut Args<'_>) -> R {
    via_aten(
        a,
        "aten::full_like",
        vec![
            a.get(0)?.clone(),
            a.get(1)?.clone(),
            a.get(2)?.clone(),
            IValue::None,
            a.get(3)?.clone(),
            IValue::None,
            IValue::None,
        ],
    )
}

/// `prims::scalar_tensor(s, *, dtype, device)`.
fn scalar_tensor(a: &mut Args<'_>) -> R {
    factory_via_aten(a, "aten::scalar_tensor", 1)
}

/// `prims::iota(length, *, start, step, dtype, device, requires_grad)`: `start + i * step`.
fn iota(a: &mut Args<'_>) -> R {
    let (length, start, step) = (a.int(0)?, a.int(1)?, a.int(2)?);
    let dtype = a.dtype(3)?;
    if length < 0 {
        return Err(invalid_argument(
            a.op,
            "length",
            "must be non-negative",
            length,
        ));
    }
    crate::tensor::budget::check_alloc((length as usize).saturating_mul(8))?;
    let v: Vec<i64> = (0..length)
        .map(|i| start.wrapping_add(i.wrapping_mul(step)))
        .collect();
    Ok(IValue::Tensor(
        Tensor::from_vec(v, &[length as usize])?.to_dtype(dtype)?,
    ))
}

/// `prims::maximum_value(dtype)` / `minimum_value`: the dtype's largest (smallest) finite
/// value (`torch.finfo(dtype).max` for floating types).
fn extreme_value(a: &mut Args<'_>, max: bool) -> R {
    let dtype = a.dtype(0)?;
    let sign = if max { 1.0 } else { -1.0 };
    Ok(match dtype {
        DType::Bool => IValue::Bool(max),
        DType::Float64 => IValue::Double(sign * f64::MAX),
        DType::Float32 => IValue::Double(sign * f64::from(f32::MAX)),
        DType::Float16 => IValue::Double(sign * half::f16::MAX.to_f64()),
        DType::BFloat16 => IValue::Double(sign * half::bf16::MAX.to_f64()),
        DType::Int64 => IValue::Int(if max { i64::MAX } else { i64::MIN }),
        DType::Int32 => IValue::Int(if max {
            i32::MAX.into()
        } else {
            i32::MIN.into()
        }),
        DType::Int16 => IValue::Int(if max {
            i16::MAX.into()
        } else {
            i16::MIN.into()
        }),
        DType::Int8 => IValue::Int(if max { i8::MAX.into() } else { i8::MIN.into() }),
        DType::UInt8 => IValue::Int(if max { u8::MAX.into() } else { 0 }),
        d => return Err(not_implemented_for(a.op, d)),
    })
}

/// `prims::copy_to(a, b)`: `b` written into `a`.
fn copy_to(a: &mut Args<'_>) -> R {
    via_aten(
        a,
        "aten::copy_",
        vec![a.get(0)?.clone(), a.get(1)?.clone(), IValue::Bool(false)],
    )
}

/// `prims::device_put(a, device, non_blocking)`: every tensor lives on the CPU.
fn device_put(a: &mut Args<'_>) -> R {
    let x = a.tensor(0)?;
    match a.get(1)? {
        IValue::Device(d) if d.kind == crate::values::DeviceKind::Cpu => Ok(IValue::Tensor(x)),
        IValue::String(s) if s.starts_with("cpu") => Ok(IValue::Tensor(x)),
        other => Err(unsupported_feature(
            a.op,
            format!("device {other:?} (tsrun tensors live on the CPU)"),
        )),
    }
}

/// `prims::cbrt(self)`: the real cube root of a floating tensor.
fn cbrt(a: &mut Args<'_>) -> R {
    let x = a.tensor(0)?;
    if !x.dtype().is_floating_point() {
        return Err(wrong_dtype(
            a.op,
            "self",
            "a floating point tensor",
            x.dtype(),
        ));
    }
    let v: Vec<f64> = x.to_vec::<f64>()?.into_iter().map(f64::cbrt).collect();
    Ok(IValue::Tensor(
        Tensor::from_vec(v, x.shape())?.to_dtype(x.dtype())?,
    ))
}

/// Register every alias; runs after the families that register the aten kernels.
/// A factory primitive (`leading` arguments, then `dtype`, `device`[, `requires_grad`]) run as
/// the aten factory `name` (same leading arguments, then `dtype, layout, device, pin_memory`).
fn factory_via_aten(a: &Args<'_>, name: &str, leading: usize) -> R {
    let mut values = (0..leading)
        .map(|i| a.get(i).cloned())
        .collect::<crate::Result<Vec<_>>>()?;
    values.extend([
        a.get(leading)?.clone(),
        IValue::None,
        a.get(leading + 1)?.clone(),
        IValue::None,
    ]);
    via_aten(a, name, values)
}

/// `prims::empty(shape, *, dtype, device, requires_grad)`: a new tensor (zeroed: PyTorch leaves
/// its values unspecified).
fn empty(a: &mut Args<'_>) -> R {
    factory_via_aten(a, "aten::zeros", 1)
}

/// `prims::empty_strided(shape, strides, *, dtype, device, requires_grad)`.
fn empty_strided(a: &mut Args<'_>) -> R {
    factory_via_aten(a, "aten::empty_strided", 2)
}

/// `prims::empty_permuted(shape, physical_layout, *, dtype, device, requires_grad)`.
fn empty_permuted(a: &mut Args<'_>) -> R {
    factory_via_aten(a, "aten::empty_permuted", 2)
}

/// `prims::copy_strided(a, stride)`: a copy of `a` in new storage laid out with `stride`.
fn copy_strided(a: &mut Args<'_>) -> R {
    let x = a.tensor(0)?;
    let stride = a.int_list(1)?;
    check_size(
        a.op,
        "the length of stride (one per dim)",
        x.dim() as i64,
        stride.len() as i64,
    )?;
    let strides = stride
        .iter()
        .map(|&s| {
            isize::try_from(s)
                .ok()
                .filter(|&s| s >= 0)
                .ok_or_else(|| invalid_argument(a.op, "stride", "must be non-negative", s))
        })
        .collect::<crate::Result<Vec<isize>>>()?;
    // the storage a strided view of this shape reaches: 1 + sum((size - 1) * stride)
    let extent = if x.numel() == 0 {
        0
    } else {
        x.shape()
            .iter()
            .zip(&strides)
            .try_fold(1usize, |acc, (&n, &s)| {
                (n - 1)
                    .checked_mul(s as usize)
                    .and_then(|v| acc.checked_add(v))
            })
            .ok_or_else(|| {
                invalid_argument(
                    a.op,
                    "stride",
                    "must keep the storage extent within 64 bits",
                    format!("{stride:?}"),
                )
            })?
    };
    let out = Tensor::zeros(&[extent], x.dtype())?.as_strided(x.shape(), &strides, 0)?;
    out.copy_from(&x)?;
    Ok(out.into())
}

/// `prims::_make_token()`: the empty float tensor effectful ops thread through a graph.
fn make_token(_: &mut Args<'_>) -> R {
    Ok(Tensor::zeros(&[0], DType::Float32)?.into())
}

/// `prims::_sink_tokens(tokens)`: consumes the tokens.
fn sink_tokens(a: &mut Args<'_>) -> R {
    a.tensor_list(0)?;
    Ok(IValue::None)
}

pub(crate) fn register(r: &mut Registry) {
    for &(prim, aten) in SAME_AS_ATEN {
        r.alias(prim, aten);
    }
    r.add("prims::add", add);
    r.add("prims::sub", sub);
    r.add("prims::div", div);
    r.add("prims::amax", amax);
    r.add("prims::amin", amin);
    r.add("prims::sum", sum);
    r.add("prims::prod", prod);
    r.add("prims::var", var);
    r.add("prims::broadcast_in_dim", broadcast_in_dim);
    r.add("prims::collapse", |a| collapse(a, true));
    r.add("prims::collapse_view", |a| collapse(a, false));
    r.add("prims::split_dim", split_dim);
    r.add("prims::convert_element_type", convert_element_type);
    r.add("prims::full", full);
    r.add("prims::full_like", full_like);
    r.add("prims::scalar_tensor", scalar_tensor);
    r.add("prims::iota", iota);
    r.add("prims::maximum_value", |a| extreme_value(a, true));
    r.add("prims::minimum_value", |a| extreme_value(a, false));
    r.add("prims::copy_to", copy_to);
    r.add("prims::device_put", device_put);
    r.add("prims::cbrt", cbrt);
    r.add("prims::empty", empty);
    r.add("prims::empty_strided", empty_strided);
    r.add("prims::empty_permuted", empty_permuted);
    r.add("prims::copy_strided", copy_strided);
    r.add("prims::_make_token", make_token);
    r.add("prims::_sink_tokens", sink_tokens);
}
