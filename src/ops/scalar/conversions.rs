//! Conversions between numbers, strings and tensors (`int(x)`, `float(x)`, `aten::Int`, ...).

use super::*;

pub(super) fn to_int(a: &mut Args) -> R {
    match a.get(0)? {
        IValue::String(s) => s
            .trim()
            .parse::<i64>()
            .map(IValue::Int)
            .map_err(|_| script_error(format!("invalid literal for int() with base 10: '{s}'"))),
        IValue::Tensor(t) => {
            if t.numel() != 1 {
                return Err(err(format!(
                    "a Tensor with {} elements cannot be converted to Scalar",
                    t.numel()
                )));
            }
            Ok(IValue::Int(match t.item()? {
                Scalar::Float(f) => float_to_int(f)?,
                s => s.to_i64(),
            }))
        }
        _ => match num(a, 0)? {
            Num::I(i) => Ok(IValue::Int(i)),
            n => Ok(IValue::Int(float_to_int(n.f())?)),
        },
    }
}
pub(super) fn to_float(a: &mut Args) -> R {
    match a.get(0)? {
        IValue::String(s) => parse_python_float(s)
            .map(IValue::Double)
            .ok_or_else(|| script_error(format!("could not convert string to float: '{s}'"))),
        _ => Ok(IValue::Double(num(a, 0)?.f())),
    }
}
pub(super) fn parse_python_float(s: &str) -> Option<f64> {
    let t = s.trim().to_ascii_lowercase();
    match t.as_str() {
        "inf" | "+inf" | "infinity" => Some(f64::INFINITY),
        "-inf" | "-infinity" => Some(f64::NEG_INFINITY),
        "nan" | "+nan" | "-nan" => Some(f64::NAN),
        _ => t.parse().ok(),
    }
}
pub(super) fn to_bool(a: &mut Args) -> R {
    Ok(IValue::Bool(match num(a, 0)? {
        Num::I(i) => i != 0,
        Num::F(f) => f != 0.0,
        Num::C(c) => c.re != 0.0 || c.im != 0.0,
    }))
}
pub(super) fn to_complex(a: &mut Args) -> R {
    let re = num(a, 0)?.c();
    if a.len() > 1 {
        let im = num(a, 1)?.c();
        return Ok(IValue::Complex(re + Complex64::i() * im));
    }
    Ok(IValue::Complex(re))
}
/// `aten::ScalarImplicit` / `prim::ImplicitTensorToNum`: the number in a 0-dim tensor.
pub(super) fn scalar_implicit(a: &mut Args) -> R {
    let t = a.tensor(0)?;
    if t.dim() != 0 {
        return Err(err(format!(
            "{}: expected a 0-dim tensor, got one of shape {:?}",
            a.op,
            t.shape()
        )));
    }
    Ok(IValue::from(t.item()?))
}
/// `prim::ModuleContainerIndex`: the submodule of a ModuleDict (by key) or ModuleList (by
/// index; its children are named `0`, `1`, ...).
pub(super) fn module_container_index(a: &mut Args) -> R {
    let IValue::Object(o) = a.get(0)? else {
        return Err(err(format!("{}: not a module container", a.op)));
    };
    let key = match a.get(1)? {
        IValue::String(s) => s.to_string(),
        IValue::Int(i) => {
            let n = o
                .field_names()
                .iter()
                .filter(|f| f.bytes().all(|b| b.is_ascii_digit()))
                .count() as i64;
            (if *i < 0 { i + n } else { *i }).to_string()
        }
        other => return Err(err(format!("{}: bad key {}", a.op, other.kind_name()))),
    };
    o.get(&key)
        .filter(|v| matches!(v, IValue::Object(_)))
        .ok_or_else(|| script_error(format!("KeyError: {key}")))
}

/// c10's `toString(ScalarType)` for the floating and complex dtypes (`Float`, `Double`).
pub(super) fn scalar_type_name(d: DType) -> &'static str {
    match d {
        DType::Float16 => "Half",
        DType::Float32 => "Float",
        DType::Float64 => "Double",
        DType::BFloat16 => "BFloat16",
        DType::Complex32 => "ComplexHalf",
        DType::Complex64 => "ComplexFloat",
        DType::Complex128 => "ComplexDouble",
        other => other.name(),
    }
}

/// `aten::IntImplicit` / `FloatImplicit` / `ComplexImplicit`: a 0-dim tensor passed where a
/// number is expected, as PyTorch's checkImplicitTensorToNum (integral dtype for int).
pub(super) fn implicit_number(a: &Args, kind: char) -> R {
    let t = a.tensor(0)?;
    if t.dim() != 0 {
        return Err(err(
            "Cannot input a tensor of dimension other than 0 as a scalar argument",
        ));
    }
    if kind == 'i' && (t.dtype().is_floating_point() || t.dtype().is_complex()) {
        return Err(err(format!(
            "Cannot input a tensor of type {} as an integral argument",
            scalar_type_name(t.dtype())
        )));
    }
    let s = t.item()?;
    Ok(match kind {
        'i' => IValue::Int(s.to_i64()),
        'f' => IValue::Double(s.to_f64()),
        _ => IValue::Complex(s.to_c64()),
    })
}
pub(super) fn num_to_tensor(a: &mut Args) -> R {
    let s = a.scalar(0)?;
    Ok(IValue::Tensor(Tensor::from_scalar(s, s.wrapped_dtype())?))
}

/// Conversions between numbers, strings and tensors (`int()`, `float()`, `aten::ScalarImplicit`, ...).
pub(super) fn register(r: &mut Registry) {
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
            "Tensor_Tensor",
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
    // `_local_scalar_dense(self)`: the element at the storage offset (the first one), whatever
    // the tensor's size
    r.add("aten::_local_scalar_dense", |a| {
        let t = a.tensor(0)?;
        if t.numel() == 0 {
            return Err(err(
                "_local_scalar_dense: cannot read an element of an empty tensor",
            ));
        }
        let first = t.as_strided(&[], &[], t.storage_offset())?;
        Ok(match first.item()? {
            Scalar::Bool(b) => IValue::Bool(b),
            Scalar::Int(i) => IValue::Int(i),
            Scalar::Float(f) => IValue::Double(f),
            Scalar::Complex(c) => IValue::Complex(c),
        })
    });
    r.add_all(
        &["prim::NumToTensor.Scalar", "prim::NumToTensor.bool"],
        num_to_tensor,
    );
}

pub(super) fn scalar_implicit_any(a: &mut Args) -> R {
    let t = a.tensor(0)?;
    if t.numel() != 1 {
        return Err(err(format!(
            "a Tensor with {} elements cannot be converted to Scalar",
            t.numel()
        )));
    }
    Ok(IValue::from(t.item()?))
}
