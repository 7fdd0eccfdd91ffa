//! `prim::` queries on tensors and devices (`prim::dtype`, `prim::device`, sizes, `tolist`)
//! and the remaining small prims.

use super::*;

pub(super) fn tensor_size(a: &mut Args) -> R {
    let t = a.any_layout_tensor(0)?;
    if a.len() > 1 {
        return Ok(IValue::Int(t.size(a.int(1)?)? as i64));
    }
    Ok(IValue::List(List::new(
        Type::Int,
        t.shape().iter().map(|&d| IValue::Int(d as i64)).collect(),
    )))
}
pub(super) fn tensor_dim(a: &mut Args) -> R {
    Ok(IValue::Int(a.any_layout_tensor(0)?.dim() as i64))
}
pub(super) fn tensor_numel(a: &mut Args) -> R {
    Ok(IValue::Int(a.any_layout_tensor(0)?.numel() as i64))
}
pub(super) fn tensor_dtype(a: &mut Args) -> R {
    Ok(IValue::Int(
        a.any_layout_tensor(0)?.dtype().to_scalar_type(),
    ))
}
/// `prim::tolist(tensor, dim, elem)`: nested lists of `dim` levels; elem 0 int, 1 float,
/// 2 bool, 3 complex (the annotation the compiler saw; it must match the tensor).
pub(super) fn tolist(a: &mut Args) -> R {
    let t = a.tensor(0)?;
    let dim = a.int(1)?;
    let code = a.int(2)?;
    if dim != t.dim() as i64 {
        return Err(err(format!(
            "Output annotation list dimension and runtime tensor dimension must match for tolist() ({dim} vs {})",
            t.dim()
        )));
    }
    let (elem_type, dtype_ok) = match code {
        0 => (Type::Int, t.dtype().is_integral(false)),
        1 => (Type::Float, t.dtype().is_floating_point()),
        2 => (Type::Bool, t.dtype() == DType::Bool),
        3 => (Type::Complex, t.dtype().is_complex()),
        other => return Err(err(format!("prim::tolist: unknown element code {other}"))),
    };
    if !dtype_ok {
        return Err(err(format!(
            "Output annotation element type and runtime tensor element type must match for tolist(): {elem_type} vs {}",
            t.dtype()
        )));
    }
    let flat: Vec<IValue> = match code {
        0 => t.to_vec::<i64>()?.into_iter().map(IValue::Int).collect(),
        1 => t.to_vec::<f64>()?.into_iter().map(IValue::Double).collect(),
        2 => t.to_vec::<bool>()?.into_iter().map(IValue::Bool).collect(),
        _ => t
            .to_vec::<num_complex::Complex64>()?
            .into_iter()
            .map(IValue::Complex)
            .collect(),
    };
    Ok(nest_list(&flat, t.shape(), elem_type))
}

/// `flat` (row-major) as nested lists of `shape`.
pub(super) fn nest_list(flat: &[IValue], shape: &[usize], elem_type: Type) -> IValue {
    match shape {
        [] => flat.first().cloned().unwrap_or_default(),
        [_] => IValue::List(List::new(elem_type, flat.to_vec())),
        [n, rest @ ..] => {
            let inner_type = rest.iter().fold(elem_type.clone(), |t, _| Type::list(t));
            let chunk = rest.iter().product::<usize>();
            let items = (0..*n)
                .map(|i| nest_list(&flat[i * chunk..(i + 1) * chunk], rest, elem_type.clone()))
                .collect();
            IValue::List(List::new(inner_type, items))
        }
    }
}

/// `device.type`: `cpu`, `cuda`, ...
pub(super) fn device_type(a: &mut Args) -> R {
    match a.get(0)? {
        IValue::Device(d) => Ok(IValue::str(d.type_name())),
        other => Err(err(format!("prim::type of {}", other.kind_name()))),
    }
}

/// `device.index`: None when the device has no index.
pub(super) fn device_index(a: &mut Args) -> R {
    match a.get(0)? {
        IValue::Device(d) if d.index >= 0 => Ok(IValue::Int(d.index)),
        IValue::Device(_) => Ok(IValue::None),
        other => Err(err(format!("prim::index of {}", other.kind_name()))),
    }
}

/// `cuda::device_index(device)`: the device's index, -1 when it has none (any device type, as
/// PyTorch's `torch.cuda` helper reads it).
pub(super) fn cuda_device_index(a: &mut Args) -> R {
    match a.get(0)? {
        IValue::Device(d) => Ok(IValue::Int(d.index)),
        other => Err(Error::BadArgument {
            op: a.op.to_string(),
            index: 0,
            expected: "Device",
            got: other.kind_name().to_string(),
        }),
    }
}

pub(super) fn tensor_device(a: &mut Args) -> R {
    match a.get(0)? {
        IValue::Tensor(_) => Ok(IValue::Device(Device::CPU)),
        IValue::String(s) => Device::parse(s).map(IValue::Device).ok_or_else(|| {
            err(format!(
                "Expected one of cpu, cuda, ... device type at start of device string: {s}"
            ))
        }),
        other => Err(err(format!("device() of {}", other.kind_name()))),
    }
}
pub(super) fn device_with_index(a: &mut Args) -> R {
    let kind = a.str(0)?;
    let idx = a.int(1)?;
    Device::parse(&kind)
        .map(|d| {
            IValue::Device(Device {
                kind: d.kind,
                index: idx,
            })
        })
        .ok_or_else(|| err(format!("unknown device type {kind}")))
}
pub(super) fn tensor_layout(a: &mut Args) -> R {
    Ok(IValue::Int(a.any_layout_tensor(0)?.layout().number()))
}
/// `is_sparse`: the COO layout (PyTorch's `is_sparse` is false for the compressed ones).
pub(super) fn is_sparse(a: &mut Args) -> R {
    Ok(IValue::Bool(
        a.any_layout_tensor(0)?.layout() == crate::tensor::Layout::SparseCoo,
    ))
}
pub(super) fn is_sparse_csr(a: &mut Args) -> R {
    Ok(IValue::Bool(
        a.any_layout_tensor(0)?.layout() == crate::tensor::Layout::SparseCsr,
    ))
}
pub(super) fn is_false(a: &mut Args) -> R {
    a.any_layout_tensor(0)?;
    Ok(IValue::Bool(false))
}
pub(super) fn is_true(a: &mut Args) -> R {
    a.any_layout_tensor(0)?;
    Ok(IValue::Bool(true))
}
pub(super) fn requires_grad(a: &mut Args) -> R {
    Ok(IValue::Bool(a.any_layout_tensor(0)?.requires_grad()))
}
pub(super) fn itemsize(a: &mut Args) -> R {
    Ok(IValue::Int(a.any_layout_tensor(0)?.dtype().size() as i64))
}
pub(super) fn nbytes(a: &mut Args) -> R {
    let t = a.tensor(0)?;
    Ok(IValue::Int((t.numel() * t.dtype().size()) as i64))
}
pub(super) fn prim_name(_a: &mut Args) -> R {
    Ok(IValue::None)
}
pub(super) fn constant_true(_a: &mut Args) -> R {
    Ok(IValue::Bool(true))
}
pub(super) fn constant_false(_a: &mut Args) -> R {
    Ok(IValue::Bool(false))
}
pub(super) fn is_grad_enabled(_a: &mut Args) -> R {
    Ok(IValue::Bool(crate::ops::grad_mode::is_grad_enabled()))
}
pub(super) fn set_grad_enabled(a: &mut Args) -> R {
    crate::ops::grad_mode::set_grad_enabled(a.bool(0)?);
    Ok(IValue::None)
}
pub(super) fn unwrap_optional(a: &mut Args) -> R {
    match a.take(0)? {
        IValue::None => Err(script_error("Unwrapping null optional")),
        v => Ok(v),
    }
}
pub(super) fn enum_name(a: &mut Args) -> R {
    match a.get(0)? {
        IValue::Enum(e) => Ok(IValue::String(e.name.clone())),
        other => Err(err(format!("prim::EnumName of {}", other.kind_name()))),
    }
}
pub(super) fn enum_value(a: &mut Args) -> R {
    match a.get(0)? {
        IValue::Enum(e) => Ok(e.value.clone()),
        other => Err(err(format!("prim::EnumValue of {}", other.kind_name()))),
    }
}
pub(super) fn hash(a: &mut Args) -> R {
    use std::hash::{Hash, Hasher};
    let k = crate::values::ivalue::dict_key(a.get(0)?).ok_or_else(|| err("unhashable value"))?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    k.hash(&mut h);
    Ok(IValue::Int(h.finish() as i64))
}
pub(super) fn assert_scalar(a: &mut Args) -> R {
    if num(a, 0)?.f() == 0.0 {
        return Err(err(python_str(a.get(1)?).to_string()));
    }
    Ok(IValue::None)
}
pub(super) fn tuple_index_kernel(a: &mut Args) -> R {
    getitem(a)
}
pub(super) fn string_index(a: &mut Args) -> R {
    getitem(a)
}
pub(super) fn bin_hex_oct(a: &Args, radix: u32) -> R {
    let i = a.int(0)?;
    let (sign, v) = if i < 0 {
        ("-", i.unsigned_abs())
    } else {
        ("", i as u64)
    };
    Ok(IValue::str(match radix {
        2 => format!("{sign}0b{v:b}"),
        8 => format!("{sign}0o{v:o}"),
        _ => format!("{sign}0x{v:x}"),
    }))
}
pub(super) fn bin(a: &mut Args) -> R {
    bin_hex_oct(a, 2)
}
pub(super) fn oct(a: &mut Args) -> R {
    bin_hex_oct(a, 8)
}
pub(super) fn hex(a: &mut Args) -> R {
    bin_hex_oct(a, 16)
}
pub(super) fn rangelist(a: &mut Args) -> R {
    let n = a.int(0)?;
    if n > (1 << 28) {
        return Err(err("range is too large"));
    }
    Ok(IValue::List(List::new(
        Type::Int,
        (0..n.max(0)).map(IValue::Int).collect(),
    )))
}

/// Tensor queries (the shape family may already provide the tensor ones), device and dtype prims, and the scripting/tracing/grad-mode constants.
pub(super) fn register(r: &mut Registry) {
    for (name, k) in [
        ("aten::size", tensor_size as crate::ops::Kernel),
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
    r.add("cuda::device_index", cuda_device_index);
    for name in [
        "prim::is_cuda",
        "prim::is_xpu",
        "prim::is_mps",
        "prim::is_meta",
        "prim::is_mkldnn",
        "prim::is_vulkan",
        "prim::is_ipu",
        "prim::is_maia",
        "prim::is_mtia",
        "prim::is_xla",
    ] {
        r.add(name, is_false);
    }
    r.add("prim::is_cpu", is_true);
    r.add("prim::is_nested", |a| {
        Ok(IValue::Bool(a.any_layout_tensor(0)?.is_nested()))
    });
    r.add("prim::is_sparse", is_sparse);
    r.add("prim::is_sparse_csr", is_sparse_csr);
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
    // shape-guard hints for symbolic sizes: nothing to check on concrete numbers
    r.add_all(
        &[
            "aten::sym_constrain_range",
            "aten::sym_constrain_range_for_size",
        ],
        |a| {
            a.scalar(0)?;
            Ok(IValue::None)
        },
    );
    // every tensor here is the first output of its node as far as autograd would know
    r.add("aten::output_nr", |a| {
        a.tensor(0)?;
        Ok(IValue::Int(0))
    });
}
