//! Factory ops (zeros, ones, full, empty, *_like, new_*, arange, linspace, logspace, eye,
//! tensor literals) and dtype/copy ops (`to`, `type_as`, `clone`, `contiguous`, `copy_`, `fill_`).

use super::kernels::{
    invalid_argument, non_negative, rank_mismatch, size_mismatch, unsupported_feature,
};
use super::{Args, Registry};
use crate::dispatch_all;
use crate::tensor::RankRequirement;
use crate::tensor::{checked_numel, DType, Element, Scalar, Tensor};
use crate::values::{Device, DeviceKind, IValue};

type R = crate::Result<IValue>;

fn t(x: Tensor) -> R {
    Ok(IValue::Tensor(x))
}

/// Fail unless argument `i` (a `Device?`) is absent, the CPU, or an accelerator remapped to it.
pub(crate) fn check_device(args: &Args<'_>, i: usize) -> crate::Result<()> {
    let device = match args.get(i) {
        Err(_) | Ok(IValue::None) => return Ok(()),
        Ok(IValue::Device(d)) => *d,
        Ok(IValue::String(s)) => match Device::parse(s) {
            Some(d) => d,
            None => {
                return Err(invalid_argument(
                    args.op,
                    "device",
                    "must name a device",
                    format!("'{s}'"),
                ))
            }
        },
        Ok(other) => {
            return Err(unsupported_feature(
                args.op,
                format!("device {other:?} (tsrun runs on the CPU only)"),
            ))
        }
    };
    match device.kind {
        DeviceKind::Cpu => Ok(()),
        // meta tensors have no data: computing them on the CPU would invent values
        DeviceKind::Meta => Err(unsupported_feature(
            args.op,
            format!("device '{device}' (tsrun runs on the CPU only)"),
        )),
        DeviceKind::Cuda | DeviceKind::Mps | DeviceKind::Xpu | DeviceKind::Hip => {
            warn_accelerator_remapped(device);
            Ok(())
        }
    }
}

/// Archives traced or scripted on a GPU name its device in their code (`x.to(torch.device(
/// "cuda:0"))`, factories with `device=`). tsrun runs them on the CPU, as `torch.jit.load(f,
/// map_location="cpu")` would place the weights, and says so once per process.
fn warn_accelerator_remapped(device: Device) {
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        crate::error::warn(format!(
            "the archive's code asks for device '{device}'; tsrun runs on the CPU only, so \
             tensors are placed on the CPU instead (this warning is shown once)"
        ))
    });
}

/// Fail unless argument `i` (a `Layout?`) is absent or strided (0).
fn check_layout(args: &Args<'_>, i: usize) -> crate::Result<()> {
    match args.get(i) {
        Err(_) | Ok(IValue::None) | Ok(IValue::Int(0)) => Ok(()),
        Ok(other) => Err(unsupported_feature(
            args.op,
            format!("layout {other:?} (only torch.strided)"),
        )),
    }
}

/// The factory arguments starting at `first` (`dtype, layout, device, pin_memory`): checks the
/// layout and device and returns the dtype or `default`.
pub(crate) fn factory_dtype(args: &Args<'_>, first: usize, default: DType) -> crate::Result<DType> {
    let dtype = if first < args.len() {
        args.opt_dtype(first)?
    } else {
        None
    };
    check_layout(args, first + 1)?;
    check_device(args, first + 2)?;
    Ok(dtype.unwrap_or(default))
}

/// A `SymInt[]` size argument with every entry non-negative.
pub(crate) fn size_arg(args: &Args<'_>, i: usize) -> crate::Result<Vec<usize>> {
    let v = args.int_list(i)?;
    let size = v
        .iter()
        .map(|&d| {
            usize::try_from(d).map_err(|_| {
                invalid_argument(
                    args.op,
                    "size",
                    "must have non-negative dimensions",
                    format!("{v:?}"),
                )
            })
        })
        .collect::<crate::Result<Vec<usize>>>()?;
    // at least a byte per element: refuse absurd sizes before any kernel builds a buffer
    crate::tensor::budget::check_alloc(checked_numel(&size)?)?;
    Ok(size)
}

/// A contiguous tensor of `shape` filled with `value`.
pub(crate) fn full_tensor(shape: &[usize], value: Scalar, dtype: DType) -> crate::Result<Tensor> {
    let out = Tensor::zeros(shape, dtype)?;
    let zero = match value {
        Scalar::Bool(b) => !b,
        Scalar::Int(i) => i == 0,
        Scalar::Float(f) => f == 0.0 && f.is_sign_positive(),
        Scalar::Complex(c) => c.re == 0.0 && c.im == 0.0 && c.re.is_sign_positive(),
    };
    if !zero {
        out.fill(value)?;
    }
    Ok(out)
}

fn zeros(args: &mut Args<'_>) -> R {
    let size = size_arg(args, 0)?;
    t(Tensor::zeros(
        &size,
        factory_dtype(args, 1, DType::Float32)?,
    )?)
}
fn ones(args: &mut Args<'_>) -> R {
    let size = size_arg(args, 0)?;
    t(full_tensor(
        &size,
        Scalar::Int(1),
        factory_dtype(args, 1, DType::Float32)?,
    )?)
}
fn full(args: &mut Args<'_>) -> R {
    let size = size_arg(args, 0)?;
    let v = args.scalar(1)?;
    t(full_tensor(
        &size,
        v,
        factory_dtype(args, 2, v.default_dtype())?,
    )?)
}
fn empty_strided(args: &mut Args<'_>) -> R {
    let size = size_arg(args, 0)?;
    t(Tensor::zeros(
        &size,
        factory_dtype(args, 2, DType::Float32)?,
    )?)
}
fn zeros_like(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    t(Tensor::zeros(
        x.shape(),
        factory_dtype(args, 1, x.dtype())?,
    )?)
}
fn ones_like(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    t(full_tensor(
        x.shape(),
        Scalar::Int(1),
        factory_dtype(args, 1, x.dtype())?,
    )?)
}
fn full_like(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let v = args.scalar(1)?;
    t(full_tensor(
        x.shape(),
        v,
        factory_dtype(args, 2, x.dtype())?,
    )?)
}
fn new_zeros(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let size = size_arg(args, 1)?;
    t(Tensor::zeros(&size, factory_dtype(args, 2, x.dtype())?)?)
}
fn new_ones(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let size = size_arg(args, 1)?;
    t(full_tensor(
        &size,
        Scalar::Int(1),
        factory_dtype(args, 2, x.dtype())?,
    )?)
}
fn new_full(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let size = size_arg(args, 1)?;
    let v = args.scalar(2)?;
    t(full_tensor(&size, v, factory_dtype(args, 3, x.dtype())?)?)
}
fn new_empty_strided(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let size = size_arg(args, 1)?;
    t(Tensor::zeros(&size, factory_dtype(args, 3, x.dtype())?)?)
}

/// The overloads of `arange`, told apart when the kernel is registered.
const ARANGE_END: u8 = 0;
const ARANGE_START: u8 = 1;
const ARANGE_START_STEP: u8 = 2;

/// `arange`: float if any bound is a float (default dtype), else int64; values are computed
/// as `start + i * step` in double precision like PyTorch's CPU kernel.
fn arange<const FORM: u8>(args: &mut Args<'_>) -> R {
    arange_as(args, FORM)
}

fn arange_as(args: &mut Args<'_>, form: u8) -> R {
    let (start, end, step, first) = match form {
        ARANGE_START_STEP => (args.scalar(0)?, args.scalar(1)?, args.scalar(2)?, 3),
        ARANGE_START => (args.scalar(0)?, args.scalar(1)?, Scalar::Int(1), 2),
        _ => (Scalar::Int(0), args.scalar(0)?, Scalar::Int(1), 1),
    };
    let any_float = [start, end, step]
        .iter()
        .any(|s| matches!(s, Scalar::Float(_)));
    let dtype = factory_dtype(
        args,
        first,
        if any_float {
            DType::Float32
        } else {
            DType::Int64
        },
    )?;
    let (s, e, st) = (start.to_f64(), end.to_f64(), step.to_f64());
    check_range("arange", s, e, st)?;
    let n = if dtype.is_integral(false) && !any_float {
        let (si, ei, sti) = (start.to_i64(), end.to_i64(), step.to_i64());
        let span = ei as i128 - si as i128;
        let q = span / sti as i128;
        let r = span % sti as i128;
        (q + i128::from(r != 0)).max(0) as f64
    } else {
        ((e - s) / st).ceil()
    };
    if !(0.0..=(isize::MAX as f64)).contains(&n) {
        return Err(invalid_argument(
            "arange",
            "start, end and step",
            "must give a number of elements in [0, isize::MAX]",
            n,
        ));
    }
    let n = n as usize;
    // the values are built as 8-byte elements first
    crate::tensor::budget::check_alloc(checked_numel(&[n, 8])?)?;
    if !any_float {
        let (si, sti) = (start.to_i64(), step.to_i64());
        let v: Vec<i64> = (0..n as i64)
            .map(|i| si.wrapping_add(i.wrapping_mul(sti)))
            .collect();
        return t(Tensor::from_vec(v, &[n])?.to_dtype(dtype)?);
    }
    let v: Vec<f64> = (0..n).map(|i| s + st * i as f64).collect();
    t(Tensor::from_vec(v, &[n])?.to_dtype(dtype)?)
}

/// PyTorch's checks of an `arange` / `range` span: a nonzero step, finite bounds, and a step
/// whose sign goes from `s` towards `e`.
fn check_range(op: &str, s: f64, e: f64, st: f64) -> crate::Result<()> {
    if st == 0.0 {
        return Err(invalid_argument(op, "step", "must be nonzero", st));
    }
    if !(s.is_finite() && e.is_finite()) {
        return Err(invalid_argument(
            op,
            "start and end",
            "must be finite",
            format!("{s} -> {e}"),
        ));
    }
    if (st > 0.0 && e < s) || (st < 0.0 && e > s) {
        return Err(invalid_argument(
            op,
            "step",
            format!("must have the sign of end - start ({s} -> {e})"),
            st,
        ));
    }
    Ok(())
}

/// The deprecated `range(start, end, step)` (`range` has step 1): `end` included, the default
/// dtype float32 whatever the scalars, `floor((end - start) / step) + 1` values `start + i * step`
/// computed in double.
fn range<const STEP: bool>(args: &mut Args<'_>) -> R {
    let (s, e) = (args.scalar(0)?.to_f64(), args.scalar(1)?.to_f64());
    let (st, first) = if STEP {
        (args.scalar(2)?.to_f64(), 3)
    } else {
        (1.0, 2)
    };
    let dtype = factory_dtype(args, first, DType::Float32)?;
    check_range("range", s, e, st)?;
    let n = ((e - s) / st).floor() + 1.0;
    if !(0.0..=(isize::MAX as f64)).contains(&n) {
        return Err(invalid_argument(
            "range",
            "start, end and step",
            "must give a number of elements in [0, isize::MAX]",
            n,
        ));
    }
    let n = n as usize;
    crate::tensor::budget::check_alloc(checked_numel(&[n, 8])?)?;
    let v: Vec<f64> = (0..n).map(|i| s + st * i as f64).collect();
    t(Tensor::from_vec(v, &[n])?.to_dtype(dtype)?)
}

/// `_cast_<Type>(self, non_blocking)`: a converted copy, or `self` when the dtype matches.
fn cast_to<const DT: i64>(args: &mut Args<'_>) -> R {
    let dtype = DType::from_scalar_type(DT)
        .ok_or_else(|| invalid_argument(args.op, "dtype", "must be a ScalarType code", DT))?;
    t(args.tensor(0)?.to_dtype(dtype)?)
}

/// `copy(self, src, non_blocking)`: the functional `copy_`, a fresh tensor of `self`'s shape
/// and dtype holding `src` broadcast.
fn copy(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let out = Tensor::zeros(x.shape(), x.dtype())?;
    args.values[0] = IValue::Tensor(out);
    copy_(args)
}

fn scalar_or_tensor(args: &Args<'_>, i: usize) -> crate::Result<f64> {
    match args.get(i)? {
        IValue::Tensor(x) => Ok(x.item()?.to_f64()),
        _ => Ok(args.scalar(i)?.to_f64()),
    }
}

/// linspace values as PyTorch computes them: the first half from `start`, the second from `end`.
fn linspace_values(start: f64, end: f64, steps: usize) -> Vec<f64> {
    if steps == 1 {
        return vec![start];
    }
    let step = (end - start) / (steps - 1) as f64;
    let half = steps / 2;
    (0..steps)
        .map(|i| {
            if i < half {
                start + step * i as f64
            } else {
                end - step * (steps - i - 1) as f64
            }
        })
        .collect()
}
fn linspace(args: &mut Args<'_>) -> R {
    let (s, e) = (scalar_or_tensor(args, 0)?, scalar_or_tensor(args, 1)?);
    let steps = non_negative(args.op, "steps", args.int(2)?)?;
    let dtype = factory_dtype(args, 3, DType::Float32)?;
    crate::tensor::budget::check_alloc(checked_numel(&[steps, 8])?)?;
    t(linspace_tensor(s, e, steps, dtype)?)
}

/// `linspace(start, end, steps)` of `dtype`, computed as PyTorch does (float32 in float32).
pub(crate) fn linspace_tensor(s: f64, e: f64, steps: usize, dtype: DType) -> crate::Result<Tensor> {
    if dtype == DType::Float32 {
        let (s32, e32) = (s as f32, e as f32);
        let st = if steps > 1 {
            (e32 - s32) / (steps - 1) as f32
        } else {
            0.0
        };
        let half = steps / 2;
        let v: Vec<f32> = (0..steps)
            .map(|i| {
                if i < half {
                    s32 + st * i as f32
                } else {
                    e32 - st * (steps - i - 1) as f32
                }
            })
            .collect();
        Ok(Tensor::from_vec(v, &[steps])?)
    } else {
        Tensor::from_vec(linspace_values(s, e, steps), &[steps])?.to_dtype(dtype)
    }
}
fn logspace(args: &mut Args<'_>) -> R {
    let (s, e) = (scalar_or_tensor(args, 0)?, scalar_or_tensor(args, 1)?);
    let steps = non_negative(args.op, "steps", args.int(2)?)?;
    let base = args.double(3)?;
    let dtype = factory_dtype(args, 4, DType::Float32)?;
    crate::tensor::budget::check_alloc(checked_numel(&[steps, 8])?)?;
    let v: Vec<f64> = linspace_values(s, e, steps)
        .into_iter()
        .map(|x| base.powf(x))
        .collect();
    t(Tensor::from_vec(v, &[steps])?.to_dtype(dtype)?)
}

/// `eye` (`WITH_M = false`) and `eye.m`.
fn eye<const WITH_M: bool>(args: &mut Args<'_>) -> R {
    let n = non_negative("eye", "n", args.int(0)?)?;
    let (m, first) = if WITH_M {
        (non_negative("eye", "m", args.int(1)?)?, 2)
    } else {
        (n, 1)
    };
    let dtype = factory_dtype(args, first, DType::Float32)?;
    let out = Tensor::zeros(&[n, m], dtype)?;
    dispatch_all!(dtype, "eye", |T| {
        let mut v_guard = out.write::<T>()?;
        let mut v = v_guard.view_mut();
        for i in 0..n.min(m) {
            if let Some(x) = v.get_mut(ndarray::IxDyn(&[i, i])) {
                *x = T::from_i64(1);
            }
        }
        Ok::<(), crate::Error>(())
    })?;
    t(out)
}

/// Flatten a nested list literal into scalars, recording its shape.
fn flatten_literal(
    v: &IValue,
    depth: usize,
    shape: &mut Vec<usize>,
    out: &mut Vec<Scalar>,
) -> crate::Result<()> {
    match v {
        IValue::List(l) => {
            let items = l.items();
            if shape.len() == depth {
                shape.push(items.len());
            } else if shape.get(depth) != Some(&items.len()) {
                return Err(size_mismatch(
                    "tensor",
                    format!("the length of a sequence at dim {depth}"),
                    shape.get(depth).map_or(-1, |&s| s as i64),
                    items.len() as i64,
                ));
            }
            for x in items.iter() {
                flatten_literal(x, depth + 1, shape, out)?;
            }
            Ok(())
        }
        IValue::Tensor(x) if x.numel() == 1 && x.dim() == 0 => {
            out.push(x.item()?);
            Ok(())
        }
        other => {
            if shape.len() > depth {
                return Err(invalid_argument(
                    "tensor",
                    "data",
                    format!("must not be ragged (a scalar at depth {depth} of shape {shape:?})"),
                    other.kind_name(),
                ));
            }
            out.push(other.as_scalar().ok_or_else(|| {
                invalid_argument(
                    "tensor",
                    "data",
                    "must hold numbers, bools or nested lists of them",
                    other.kind_name(),
                )
            })?);
            Ok(())
        }
    }
}

/// `torch.tensor(data)`: dtype inferred like PyTorch (any float -> float32, ints -> int64, ...).
fn tensor_literal(args: &mut Args<'_>) -> R {
    let data = args.get(0)?.clone();
    let dtype = args.opt_dtype(1)?;
    check_device(args, 2)?;
    if let IValue::Tensor(x) = &data {
        return t(x.to_dtype(dtype.unwrap_or(x.dtype()))?.deep_clone()?);
    }
    let mut shape = Vec::new();
    let mut vals = Vec::new();
    flatten_literal(&data, 0, &mut shape, &mut vals)?;
    let inferred = vals.iter().fold(None::<DType>, |acc, s| {
        let d = s.default_dtype();
        Some(match acc {
            None => d,
            Some(a) => crate::tensor::promote::promote_types(a, d),
        })
    });
    // PyTorch builds the tensor in the literal's own dtype (floats in the default float32,
    // complex numbers in complex64) and casts it to `dtype` afterwards, so
    // `torch.tensor(0.1, dtype=torch.float64)` holds float32's 0.1
    let built = inferred.unwrap_or(DType::Float32);
    let out = Tensor::zeros(&shape, built)?;
    dispatch_all!(built, "tensor", |T| {
        if let Some(dst) = out.write::<T>()?.as_slice_mut() {
            for (d, s) in dst.iter_mut().zip(&vals) {
                *d = super::kernels::num::scalar_as::<T>(*s);
            }
        }
        Ok::<(), crate::Error>(())
    })?;
    match dtype {
        Some(d) if d != built => t(out.to_dtype(d)?),
        _ => t(out),
    }
}
fn as_tensor(args: &mut Args<'_>) -> R {
    if let IValue::Tensor(x) = args.get(0)? {
        let x = x.clone();
        let dtype = args.opt_dtype(1)?;
        check_device(args, 2)?;
        return t(x.to_dtype(dtype.unwrap_or(x.dtype()))?);
    }
    tensor_literal(args)
}
fn scalar_tensor(args: &mut Args<'_>) -> R {
    let s = args.scalar(0)?;
    t(Tensor::from_scalar(
        s,
        factory_dtype(args, 1, DType::Float32)?,
    )?)
}

/// `to`: convert dtype (a copy only when needed, or when `copy=True`).
fn to_impl(x: &Tensor, dtype: Option<DType>, copy: bool) -> crate::Result<Tensor> {
    let dtype = dtype.unwrap_or(x.dtype());
    if dtype == x.dtype() {
        return if copy { x.deep_clone() } else { Ok(x.clone()) };
    }
    x.to_dtype(dtype)
}
/// The overloads of `aten::to`, told apart when the kernel is registered.
const TO_DTYPE: u8 = 0;
const TO_DEVICE: u8 = 1;
const TO_OTHER: u8 = 2;
const TO_DTYPE_LAYOUT: u8 = 3;
const TO_PRIM_DEVICE: u8 = 4;
const TO_PRIM_DTYPE: u8 = 5;
const TO_PRIM_OTHER: u8 = 6;

fn to<const FORM: u8>(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let (dtype, copy) = match FORM {
        TO_DTYPE_LAYOUT => {
            check_layout(args, 2)?;
            check_device(args, 3)?;
            (args.opt_dtype(1)?, args.bool(6)?)
        }
        TO_DTYPE => (Some(args.dtype(1)?), args.bool(3)?),
        TO_DEVICE => {
            check_device(args, 1)?;
            (Some(args.dtype(2)?), args.bool(4)?)
        }
        TO_OTHER => (Some(args.tensor(1)?.dtype()), args.bool(3)?),
        TO_PRIM_DEVICE => {
            check_device(args, 1)?;
            (args.opt_dtype(2)?, args.bool(4)?)
        }
        TO_PRIM_DTYPE => (args.opt_dtype(1)?, args.bool(3)?),
        _ => (None, args.bool(2)?),
    };
    t(to_impl(&x, dtype, copy)?)
}
fn to_copy(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let dtype = args.opt_dtype(1)?;
    check_layout(args, 2)?;
    check_device(args, 3)?;
    t(to_impl(&x, dtype, true)?)
}
/// `chalf(memory_format)`: `to(complex32)`, laid out per the memory format (the tensor itself
/// when it is complex32 already).
fn chalf(args: &mut Args<'_>) -> R {
    let x = to_impl(&args.tensor(0)?, Some(DType::Complex32), false)?;
    match args.opt_int(1)? {
        None | Some(1) => t(x),
        Some(0) => t(x.contiguous()?),
        Some(format) => t(super::shape::contiguous_in_format(&x, format)?),
    }
}
fn type_as(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    t(x.to_dtype(args.tensor(1)?.dtype())?)
}
fn clone(args: &mut Args<'_>) -> R {
    t(args.any_layout_tensor(0)?.deep_clone()?)
}
fn identity(args: &mut Args<'_>) -> R {
    t(args.any_layout_tensor(0)?)
}
fn detach(args: &mut Args<'_>) -> R {
    let mut x = args.any_layout_tensor(0)?;
    x.set_requires_grad(false);
    t(x)
}
/// `contiguous(memory_format=...)`: row-major (0), or channels-last strides (2 for 4-d, 3 for
/// 5-d); the tensor itself when it already has that layout.
fn contiguous(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    match args.opt_int(1)?.unwrap_or(0) {
        0 => t(x.contiguous()?),
        // a row-major tensor is returned as is before the format is looked at
        1 if x.is_contiguous() => t(x),
        1 => Err(invalid_argument(
            "contiguous",
            "memory_format",
            "must not be preserve",
            "preserve",
        )),
        format => t(super::shape::contiguous_in_format(&x, format)?),
    }
}
fn copy_(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    match args.get(1)? {
        IValue::Tensor(src) => {
            let src = src.clone();
            let b = crate::tensor::broadcast_shapes(x.shape(), src.shape())?;
            if b.as_slice() != x.shape() {
                return Err(invalid_argument(
                    "copy_",
                    "src",
                    format!("must broadcast to self's shape {:?}", x.shape()),
                    format!("{:?}", src.shape()),
                ));
            }
            x.check_no_partial_overlap(&src)?;
            x.copy_from(&src)?
        }
        _ => x.fill(args.scalar(1)?)?,
    }
    t(x)
}
/// The value of `fill_` / `fill`: a number, or a 0-d tensor's element (PyTorch's check).
fn fill_value(args: &Args<'_>) -> crate::Result<Scalar> {
    Ok(match args.get(1)? {
        IValue::Tensor(v) => {
            if v.dim() != 0 {
                return Err(rank_mismatch(
                    "fill_",
                    "value",
                    RankRequirement::Exactly(0),
                    v.shape(),
                ));
            }
            v.item()?
        }
        _ => args.scalar(1)?,
    })
}
fn fill_(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let v = fill_value(args)?;
    x.fill(v)?;
    t(x)
}
/// `fill.Scalar(self, value)` / `fill.Tensor(self, value)`: the functional `fill_`, a new tensor
/// of `self`'s shape and dtype holding `value` (a tensor value must be 0-d).
fn fill(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let v = fill_value(args)?;
    t(full_tensor(x.shape(), v, x.dtype())?)
}
/// `zero(self)`: the functional `zero_`.
fn zero(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    t(Tensor::zeros(x.shape(), x.dtype())?)
}
fn zero_(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    x.fill(Scalar::Int(0))?;
    t(x)
}

/// `empty_permuted(size, physical_layout, ...)`: a new tensor of `size` whose memory holds the
/// dims in `physical_layout` order (zeroed: PyTorch leaves the values unspecified).
fn empty_permuted(args: &mut Args<'_>) -> R {
    let size = size_arg(args, 0)?;
    let layout = args.int_list(1)?;
    let dtype = factory_dtype(args, 2, DType::Float32)?;
    let mut seen = vec![false; size.len()];
    let mut physical = Vec::with_capacity(size.len());
    for &d in &layout {
        match usize::try_from(d).ok().filter(|&d| d < size.len()) {
            Some(d) if !seen[d] => {
                seen[d] = true;
                physical.push(d);
            }
            _ => {
                return Err(invalid_argument(
                    args.op,
                    "physical_layout",
                    format!("must be a permutation of the {} dims", size.len()),
                    format!("{layout:?}"),
                ))
            }
        }
    }
    if physical.len() != size.len() {
        return Err(invalid_argument(
            args.op,
            "physical_layout",
            format!("must be a permutation of the {} dims", size.len()),
            format!("{layout:?}"),
        ));
    }
    let memory = Tensor::zeros(
        &physical.iter().map(|&d| size[d]).collect::<Vec<_>>(),
        dtype,
    )?;
    // dim d of the result is memory dim `position of d in physical`
    let mut strides = vec![0isize; size.len()];
    for (m, &d) in physical.iter().enumerate() {
        strides[d] = memory.strides()[m];
    }
    t(memory.as_strided(&size, &strides, 0)?)
}

/// `range.out_(start, end, *, out)`: `range(start, end)` (step 1, end included) written to `out`.
fn range_out(args: &mut Args<'_>) -> R {
    let out = args.tensor(2)?;
    let mut values = vec![
        args.get(0)?.clone(),
        args.get(1)?.clone(),
        IValue::Int(DType::Float64.to_scalar_type()),
        IValue::None,
        IValue::None,
        IValue::None,
    ];
    let r = range::<false>(&mut Args::new(args.op, &mut values, args.ctx))?;
    let r = match r {
        IValue::Tensor(x) => x.to_dtype(out.dtype())?,
        other => return Ok(other),
    };
    args.write_outs(2, r.into())
}

/// `_new_zeros_with_same_feature_meta(self, other, *, self_num_batch_dims)`: zeros of `other`'s
/// dtype, shaped as `self`'s first `self_num_batch_dims` dims followed by `other`'s.
fn new_zeros_with_same_feature_meta(args: &mut Args<'_>) -> R {
    let (x, other) = (args.tensor(0)?, args.tensor(1)?);
    let batch = usize::try_from(args.int(2)?)
        .ok()
        .filter(|&n| n <= x.dim())
        .ok_or_else(|| {
            invalid_argument(
                args.op,
                "self_num_batch_dims",
                format!("must be in [0, {}]", x.dim()),
                args.int(2).unwrap_or(-1),
            )
        })?;
    let shape: Vec<usize> = x.shape()[..batch]
        .iter()
        .chain(other.shape())
        .copied()
        .collect();
    t(Tensor::zeros(&shape, other.dtype())?)
}

/// `_list_to_tensor(ints)`: an int32 tensor of the list.
fn list_to_tensor(args: &mut Args<'_>) -> R {
    let v = args.int_list(0)?;
    let n = v.len();
    let ints = v
        .into_iter()
        .map(|x| {
            i32::try_from(x).map_err(|_| invalid_argument(args.op, "ints", "must fit in int32", x))
        })
        .collect::<crate::Result<Vec<i32>>>()?;
    t(Tensor::from_vec(ints, &[n])?)
}

/// `resize(self, size, *, memory_format)`: `self.clone().resize_(size)`: the first elements of
/// `self` in row-major order, reshaped; elements past `self`'s are unspecified in PyTorch (zero
/// here).
fn resize_to(args: &Args<'_>, x: &Tensor, size: &[usize]) -> R {
    match args.opt_int(2)? {
        // MemoryFormat: Contiguous 0, Preserve 1
        None | Some(0) | Some(1) => {}
        Some(f) => {
            return Err(unsupported_feature(
                args.op,
                format!("memory_format {f} (only contiguous)"),
            ))
        }
    }
    crate::tensor::budget::check_alloc(checked_numel(size)?)?;
    let out = Tensor::zeros(size, x.dtype())?;
    let n = out.numel().min(x.numel());
    if n > 0 {
        // both contiguous: their first n elements as flat views
        let x = x.contiguous()?;
        let src = x.as_strided(&[n], &[1], x.storage_offset())?;
        out.as_strided(&[n], &[1], out.storage_offset())?
            .copy_from(&src)?;
    }
    t(out)
}
fn resize(args: &mut Args<'_>) -> R {
    let size = size_arg(args, 1)?;
    resize_to(args, &args.tensor(0)?, &size)
}
/// `resize_as(self, the_template, *, memory_format)`: `resize` to the template's shape.
fn resize_as(args: &mut Args<'_>) -> R {
    let size = args.tensor(1)?.shape().to_vec();
    resize_to(args, &args.tensor(0)?, &size)
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::zeros", zeros);
    // a ZeroTensor in PyTorch (immutable, no storage): its values are zeros like `zeros`'
    r.add("aten::_efficientzerotensor", zeros);
    r.add("aten::ones", ones);
    r.add("aten::full", full);
    r.add("aten::empty.memory_format", zeros);
    r.add("aten::empty_strided", empty_strided);
    r.add("aten::empty_permuted", empty_permuted);
    r.add("aten::range.out_", range_out);
    r.add(
        "aten::_new_zeros_with_same_feature_meta",
        new_zeros_with_same_feature_meta,
    );
    r.add("aten::_list_to_tensor", list_to_tensor);
    r.add("aten::resize", resize);
    r.add("aten::resize_as", resize_as);
    r.add("aten::zeros_like", zeros_like);
    r.add("aten::ones_like", ones_like);
    r.add("aten::empty_like", zeros_like);
    r.add("aten::full_like", full_like);
    r.add("aten::new_zeros", new_zeros);
    r.add("aten::new_ones", new_ones);
    r.add("aten::new_empty", new_zeros);
    r.add("aten::new_full", new_full);
    r.add("aten::new_empty_strided", new_empty_strided);
    r.add("aten::arange", arange::<ARANGE_END>);
    r.add("aten::arange.start", arange::<ARANGE_START>);
    r.add("aten::arange.start_step", arange::<ARANGE_START_STEP>);
    r.add("aten::range", range::<false>);
    r.add("aten::range.step", range::<true>);
    // c10's ScalarType codes: Byte 0, Char 1, Short 2, Int 3, Long 4, Half 5, Float 6, Double 7
    r.add("aten::_cast_Byte", cast_to::<0>);
    r.add("aten::_cast_Char", cast_to::<1>);
    r.add("aten::_cast_Short", cast_to::<2>);
    r.add("aten::_cast_Int", cast_to::<3>);
    r.add("aten::_cast_Long", cast_to::<4>);
    r.add("aten::_cast_Half", cast_to::<5>);
    r.add("aten::_cast_Float", cast_to::<6>);
    r.add("aten::_cast_Double", cast_to::<7>);
    r.add("aten::copy", copy);
    r.add("aten::_lazy_clone", clone);
    // `requires_grad_(self, requires_grad)`: the flag set on self (there is no autograd)
    r.add("aten::requires_grad_", |a| {
        let mut x = a.any_layout_tensor(0)?;
        x.set_requires_grad(a.bool(1)?);
        t(x)
    });
    // `_to_cpu(tensors)`: every tensor already lives on the CPU
    r.add("aten::_to_cpu", |a| {
        Ok(crate::ops::shape::tensor_list(a.tensor_list(0)?))
    });
    r.add_all(
        &[
            "aten::linspace",
            "aten::linspace.Scalar_Tensor",
            "aten::linspace.Tensor_Scalar",
            "aten::linspace.Tensor_Tensor",
        ],
        linspace,
    );
    r.add_all(
        &[
            "aten::logspace",
            "aten::logspace.Scalar_Tensor",
            "aten::logspace.Tensor_Scalar",
            "aten::logspace.Tensor_Tensor",
        ],
        logspace,
    );
    r.add("aten::eye", eye::<false>);
    r.add("aten::eye.m", eye::<true>);
    r.add_all(
        &[
            "aten::tensor",
            "aten::tensor.bool",
            "aten::tensor.int",
            "aten::tensor.float",
            "aten::tensor.complex",
        ],
        tensor_literal,
    );
    r.add_all(
        &[
            "aten::as_tensor",
            "aten::as_tensor.list",
            "aten::as_tensor.bool",
            "aten::as_tensor.int",
            "aten::as_tensor.float",
            "aten::as_tensor.complex",
        ],
        as_tensor,
    );
    r.add("aten::scalar_tensor", scalar_tensor);
    r.add("aten::to.dtype", to::<TO_DTYPE>);
    r.add("aten::to.device", to::<TO_DEVICE>);
    r.add("aten::to.other", to::<TO_OTHER>);
    r.add("aten::to.dtype_layout", to::<TO_DTYPE_LAYOUT>);
    r.add("aten::to.prim_Device", to::<TO_PRIM_DEVICE>);
    r.add("aten::to.prim_dtype", to::<TO_PRIM_DTYPE>);
    r.add("aten::to.prim_other", to::<TO_PRIM_OTHER>);
    r.add("aten::_to_copy", to_copy);
    r.add("aten::chalf", chalf);
    r.add("aten::type_as", type_as);
    r.add_all(
        &[
            "aten::clone",
            "aten::alias_copy",
            "aten::detach_copy",
            "aten::lift_fresh_copy",
            "aten::lift",
        ],
        clone,
    );
    // tensors live on the CPU: `.cpu()` is the tensor itself, as in PyTorch
    r.add_all(&["aten::alias", "aten::lift_fresh", "aten::cpu"], identity);
    // `data` is the detached tensor itself
    r.add_all(&["aten::detach", "aten::detach_", "aten::data"], detach);
    r.add("aten::contiguous", contiguous);
    r.add_all(
        &[
            "aten::copy_",
            "aten::copy_.Tensor",
            "aten::copy_.int",
            "aten::copy_.float",
        ],
        copy_,
    );
    r.add_all(&["aten::fill_.Scalar", "aten::fill_.Tensor"], fill_);
    r.add("aten::zero_", zero_);
    r.add_all(&["aten::fill.Scalar", "aten::fill.Tensor"], fill);
    r.add("aten::zero", zero);
    r.add("aten::fill_diagonal_", fill_diagonal_);
}

/// `fill_diagonal_(self, value, wrap)` as ATen: the main diagonal through every dim (all of
/// equal length beyond 2-D), and with `wrap` on a tall matrix the diagonal restarting every
/// `width + 1` rows.
fn fill_diagonal_(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let v = args.scalar(1)?;
    let wrap = args.bool(2)?;
    let nd = x.dim();
    if nd < 2 {
        return Err(rank_mismatch(
            "fill_diagonal_",
            "self",
            RankRequirement::AtLeast(2),
            x.shape(),
        ));
    }
    let (h, w) = (x.shape()[0], x.shape()[1]);
    if nd > 2 && x.shape().iter().any(|&s| s != h) {
        return Err(invalid_argument(
            "fill_diagonal_",
            "self",
            "must have dimensions of equal length (beyond 2-D)",
            format!("a tensor of shape {:?}", x.shape()),
        ));
    }

    let stride: isize = x.strides().iter().sum();
    let size = h.min(w);
    x.as_strided(&[size], &[stride], x.storage_offset())?
        .fill(v)?;
    if wrap && nd == 2 && h > w + 1 {
        let step = w + 1;
        let wrap_size = x.numel().div_ceil(step) - size;
        let offset = x.storage_offset() as isize + x.strides()[0] * step as isize;
        x.as_strided(&[wrap_size], &[stride], offset.max(0) as usize)?
            .fill(v)?;
    }
    t(x)
}
