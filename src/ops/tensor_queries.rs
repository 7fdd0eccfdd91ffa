//! Tensor and backend queries (`element_size`, `is_nonzero`, `equal`, `isclose`, storage and
//! autocast queries) and the runtime assertions (`_assert_async`, `_assert_tensor_metadata`).

use super::kernels::map::map_binary;
use super::kernels::operand::{common_dtype, Operand};
use super::kernels::reduce::ReducePlan;
use super::kernels::via_f64::{t, vals};
use super::kernels::{
    check_size, invalid_argument, shape_mismatch, size_mismatch, unsupported_feature, wrong_dtype,
};
use super::{Args, Registry};
use crate::tensor::TensorError;
use crate::tensor::{DType, Tensor};
use crate::values::IValue;

type R = crate::Result<IValue>;

pub(super) fn element_size(args: &mut Args<'_>) -> R {
    Ok(IValue::Int(args.tensor(0)?.dtype().size() as i64))
}
pub(super) fn get_device(args: &mut Args<'_>) -> R {
    args.tensor(0)?;
    Ok(IValue::Int(-1))
}
pub(super) fn is_nonzero(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    match x.numel() {
        0 => Err(size_mismatch(
            "is_nonzero",
            "the number of elements (a Boolean value of more or fewer is ambiguous)",
            1,
            0,
        )),
        1 => Ok(IValue::Bool(
            x.item()?.to_c64() != num_complex::Complex64::new(0.0, 0.0),
        )),
        n => Err(size_mismatch(
            "is_nonzero",
            "the number of elements (a Boolean value of more or fewer is ambiguous)",
            1,
            n as i64,
        )),
    }
}
pub(super) fn is_same_size(args: &mut Args<'_>) -> R {
    Ok(IValue::Bool(
        args.tensor(0)?.shape() == args.tensor(1)?.shape(),
    ))
}
pub(super) fn equal(args: &mut Args<'_>) -> R {
    let (a, b) = (args.tensor(0)?, args.tensor(1)?);
    if a.shape() != b.shape() {
        return Ok(IValue::Bool(false));
    }
    let dt = common_dtype(&[&Operand::Tensor(a.clone()), &Operand::Tensor(b.clone())]);
    if dt.is_complex() {
        let (x, y) = (
            a.to_vec::<num_complex::Complex64>()?,
            b.to_vec::<num_complex::Complex64>()?,
        );
        return Ok(IValue::Bool(x == y));
    }
    Ok(IValue::Bool(vals(&a)? == vals(&b)?))
}

pub(super) fn isclose_tensor(args: &Args<'_>) -> crate::Result<Tensor> {
    let (a, b) = (args.tensor(0)?, args.tensor(1)?);
    let rtol = args.double(2)?;
    let atol = args.double(3)?;
    let equal_nan = args.bool(4)?;
    if a.dtype() != b.dtype() {
        return Err(TensorError::DTypeMismatch {
            expected: a.dtype(),
            got: b.dtype(),
        }
        .into());
    }
    if rtol < 0.0 || atol < 0.0 {
        let (argument, value) = if rtol < 0.0 {
            ("rtol", rtol)
        } else {
            ("atol", atol)
        };
        return Err(invalid_argument(
            "isclose",
            argument,
            "must be non-negative",
            value,
        ));
    }
    if a.dtype().is_complex() {
        return Err(unsupported_feature("isclose", "complex tensors"));
    }
    let (x, y) = (a.to_dtype(DType::Float64)?, b.to_dtype(DType::Float64)?);
    map_binary::<f64, f64, bool, _>(&x, &y, move |p, q| {
        if p == q {
            return true;
        }
        if p.is_nan() || q.is_nan() {
            return equal_nan && p.is_nan() && q.is_nan();
        }
        if !p.is_finite() || !q.is_finite() {
            return false;
        }
        (p - q).abs() <= atol + rtol * q.abs()
    })
}
pub(super) fn isclose(args: &mut Args<'_>) -> R {
    t(isclose_tensor(args)?)
}
pub(super) fn allclose(args: &mut Args<'_>) -> R {
    let c = isclose_tensor(args)?;
    Ok(IValue::Bool(c.to_vec::<bool>()?.iter().all(|&v| v)))
}

/// Backend and layout queries with a fixed answer on tsrun's CPU tensors (no zero tensors, no
/// pinned memory, no cuDNN or Vulkan), each still checking its tensor argument.
pub(super) fn no_tensor_feature(args: &mut Args<'_>) -> R {
    args.tensor(0)?;
    Ok(IValue::Bool(false))
}
pub(super) fn no_backend(_args: &mut Args<'_>) -> R {
    Ok(IValue::Bool(false))
}
/// `_has_same_storage_numel(self, other)`: whether both storages hold as many elements of
/// `self`'s dtype.
pub(super) fn has_same_storage_numel(args: &mut Args<'_>) -> R {
    let (x, y) = (args.tensor(0)?, args.tensor(1)?);
    let size = x.dtype().size().max(1);
    Ok(IValue::Bool(
        x.storage().nbytes() / size == y.storage().nbytes() / y.dtype().size().max(1),
    ))
}
/// `_has_compatible_shallow_copy_type(self, from)`: dense CPU tensors always are.
pub(super) fn compatible_shallow_copy(args: &mut Args<'_>) -> R {
    args.tensor(0)?;
    args.tensor(1)?;
    Ok(IValue::Bool(true))
}
/// `is_set_to(self, tensor)`: the same storage, offset, sizes and strides.
pub(super) fn is_set_to(args: &mut Args<'_>) -> R {
    let (x, y) = (args.tensor(0)?, args.tensor(1)?);
    Ok(IValue::Bool(
        x.storage().same(y.storage())
            && x.storage_offset() == y.storage_offset()
            && x.shape() == y.shape()
            && x.strides() == y.strides(),
    ))
}
/// `_debug_has_internal_overlap(self)`: ATen's MemOverlap code (0 no, 1 yes, 2 too hard to
/// tell), by its rule: dense tensors do not overlap, a zero stride on a dim of size > 1 does.
pub(super) fn debug_has_internal_overlap(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let code = if x.is_non_overlapping_and_dense() {
        0
    } else if x
        .shape()
        .iter()
        .zip(x.strides())
        .any(|(&d, &s)| d > 1 && s == 0)
    {
        1
    } else {
        2
    };
    Ok(IValue::Int(code))
}
/// `get_autocast_dtype(device_type)`: PyTorch's defaults, bfloat16 on the CPU and float16
/// elsewhere.
pub(super) fn get_autocast_dtype(args: &mut Args<'_>) -> R {
    let device = args.str(0)?;
    let dtype = if &*device == "cpu" {
        DType::BFloat16
    } else {
        DType::Float16
    };
    Ok(IValue::Int(dtype.to_scalar_type()))
}
/// `_autocast_to_reduced_precision(self, cuda_enabled, cpu_enabled, cuda_dtype, cpu_dtype)`:
/// a floating tensor other than float64 cast to `cpu_dtype` when CPU autocast is enabled.
pub(super) fn autocast_to_reduced(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let cpu_enabled = args.bool(2)?;
    let dtype = args.dtype(4)?;
    if cpu_enabled && x.dtype().is_floating_point() && x.dtype() != DType::Float64 {
        return t(x.to_dtype(dtype)?);
    }
    t(x)
}
/// `_autocast_to_full_precision(self, cuda_enabled, cpu_enabled)`: a float16 or bfloat16
/// tensor widened to float32 when CPU autocast is enabled.
pub(super) fn autocast_to_full(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    if args.bool(2)? && matches!(x.dtype(), DType::Float16 | DType::BFloat16) {
        return t(x.to_dtype(DType::Float32)?);
    }
    t(x)
}
/// `_assert_async(self)` / `.msg`: fails unless the one-element tensor is nonzero.
pub(super) fn assert_async(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    check_size(
        "_assert_async",
        "the number of elements (a Boolean value of more or fewer is ambiguous)",
        1,
        x.numel() as i64,
    )?;
    if x.item()?.to_c64() == num_complex::Complex64::new(0.0, 0.0) {
        let msg = if args.len() > 1 {
            args.str(1)?.to_string()
        } else {
            "Expected Tensor with single nonzero value, but got zero".to_string()
        };
        return Err(crate::error::RuntimeError::Exception {
            kind: "RuntimeError".into(),
            message: msg,
        }
        .into());
    }
    Ok(IValue::None)
}
/// `_functional_assert_async.msg(self, msg, dep_token)`: the assertion, then the token.
pub(super) fn functional_assert_async(args: &mut Args<'_>) -> R {
    assert_async(args)?;
    t(args.tensor(2)?)
}
/// `_functional_assert_scalar(self, assert_msg, dep_token)`: `self` must be true (nonzero),
/// then a copy of the token.
pub(super) fn functional_assert_scalar(args: &mut Args<'_>) -> R {
    if args.scalar(0)?.to_c64() == num_complex::Complex64::new(0.0, 0.0) {
        return Err(crate::error::RuntimeError::Exception {
            kind: "RuntimeError".into(),
            message: args.str(1)?.to_string(),
        }
        .into());
    }
    t(args.tensor(2)?.deep_clone()?)
}
/// `_make_dep_token(...)`: a 0-d tensor that orders functionalized assertions.
pub(super) fn make_dep_token(_args: &mut Args<'_>) -> R {
    t(Tensor::zeros(&[], DType::Float32)?)
}
/// `_functional_sym_constrain_range(_for_size)(size, min, max, dep_token)`: the token (there
/// are no symbolic sizes to constrain).
pub(super) fn functional_constrain_range(args: &mut Args<'_>) -> R {
    args.scalar(0)?;
    t(args.tensor(3)?)
}
/// `_assert_tensor_metadata(a, size, stride, dtype, *, device, layout)`: the given properties
/// must be the tensor's.
pub(super) fn assert_tensor_metadata(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    if let Some(size) = args.opt_int_list(1)? {
        if size
            .iter()
            .map(|&d| d as usize)
            .ne(x.shape().iter().copied())
        {
            let size: Vec<usize> = size.iter().map(|&d| d as usize).collect();
            return Err(shape_mismatch(args.op, "self", &size, x.shape()));
        }
    }
    if let Some(stride) = args.opt_int_list(2)? {
        if stride
            .iter()
            .map(|&d| d as isize)
            .ne(x.strides().iter().copied())
        {
            return Err(invalid_argument(
                args.op,
                "self's strides",
                format!("must be {stride:?}"),
                format!("{:?}", x.strides()),
            ));
        }
    }
    if let Some(dtype) = args.opt_dtype(3)? {
        if dtype != x.dtype() {
            return Err(TensorError::DTypeMismatch {
                expected: dtype,
                got: x.dtype(),
            }
            .into());
        }
    }
    Ok(IValue::None)
}

/// `hash_tensor(self, dim, *, keepdim, mode)`: mode 0 XORs the 64-bit patterns of the elements
/// over `dim` (all dims for `[]`), floats widened to double and integers sign-extended to int64
/// first, into a uint64 tensor.
pub(super) fn hash_tensor(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let dims = args.int_list(1)?;
    let keepdim = args.bool(2)?;
    let mode = args.int(3)?;
    if mode != 0 {
        return Err(invalid_argument(args.op, "mode", "must be 0", mode));
    }
    if dims.is_empty() && x.numel() == 0 {
        return Err(invalid_argument(
            "hash_tensor",
            "dim",
            "must be given for an input of no elements",
            "[]",
        ));
    }
    let dims = (!dims.is_empty()).then_some(dims.as_slice());
    let reduced = super::kernels::reduce::reduce_dims(dims, x.dim())?;
    if let Some(d) = (0..x.dim()).find(|&d| reduced[d] && x.shape()[d] == 0) {
        return Err(invalid_argument(
            "hash_tensor",
            "dim",
            format!(
                "must reduce only non-empty dims (dim {d} of {:?} is empty)",
                x.shape()
            ),
            format!("{dims:?}"),
        ));
    }
    let dtype = x.dtype();
    if dtype.is_floating_point() {
        let plan = ReducePlan::new(&x.to_dtype(DType::Float64)?, dims, keepdim)?;
        t(plan.rows::<f64, u64, _>(|row| row.iter().fold(0u64, |h, v| h ^ v.to_bits()))?)
    } else if dtype.is_integral(true) {
        let plan = ReducePlan::new(&x.to_dtype(DType::Int64)?, dims, keepdim)?;
        t(plan.rows::<i64, u64, _>(|row| row.iter().fold(0u64, |h, &v| h ^ v as u64))?)
    } else {
        Err(wrong_dtype(args.op, "self", "a real or bool tensor", dtype))
    }
}

/// c10's `is_channels_last_strides_2d` / `_3d` test: walking the dims in channels-last order
/// (C, then the spatial dims innermost-first, then N), each stride is at least the extent of the
/// previous dim; ambiguous layouts (a zero channel stride, N equal to C's stride) count as
/// contiguous.
pub(super) fn strides_like_channels_last(
    sizes: &[usize],
    strides: &[isize],
    order: &[usize],
) -> bool {
    if strides[1] == 0 {
        return false;
    }
    let mut min = 0isize;
    for &d in order {
        if sizes[d] == 0 || strides[d] < min || (d == 0 && min == strides[1]) {
            return false;
        }
        min = strides[d];
        if sizes[d] > 1 {
            min = min.saturating_mul(sizes[d] as isize);
        }
    }
    true
}
/// `is_strides_like_format(self, memory_format)`: whether the strides are channels-last (2 for
/// 4-d tensors, 3 for 5-d ones); false for every other format, as c10's default answers.
pub(super) fn is_strides_like_format(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    // MemoryFormat codes: Contiguous 0, Preserve 1, ChannelsLast 2, ChannelsLast3d 3
    let like = match (args.int(1)?, x.dim()) {
        (2, 4) => strides_like_channels_last(x.shape(), x.strides(), &[1, 3, 2, 0]),
        (3, 5) => strides_like_channels_last(x.shape(), x.strides(), &[1, 4, 3, 2, 0]),
        _ => false,
    };
    Ok(IValue::Bool(like))
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::element_size", element_size);
    r.add_all(
        &[
            "aten::_is_zerotensor",
            "aten::cudnn_is_acceptable",
            "aten::is_pinned",
            // tensors are never distributed, and there is no autograd to retain gradients
            "aten::is_distributed",
            "aten::retains_grad",
        ],
        no_tensor_feature,
    );
    r.add_all(
        // (`_nnpack_available` and `_use_cudnn_rnn_flatten_weight` answer for PyTorch's build,
        // true on its CPU wheels: a graph branching on them would then call kernels tsrun
        // lacks, so they stay unsupported)
        &["aten::is_vulkan_available"],
        no_backend,
    );
    r.add("aten::_has_same_storage_numel", has_same_storage_numel);
    r.add(
        "aten::_has_compatible_shallow_copy_type",
        compatible_shallow_copy,
    );
    r.add("aten::is_set_to", is_set_to);
    r.add(
        "aten::_debug_has_internal_overlap",
        debug_has_internal_overlap,
    );
    r.add("aten::get_autocast_dtype", get_autocast_dtype);
    r.add("aten::_autocast_to_reduced_precision", autocast_to_reduced);
    r.add("aten::_autocast_to_full_precision", autocast_to_full);
    r.add_all(
        &["aten::_assert_async", "aten::_assert_async.msg"],
        assert_async,
    );
    r.add(
        "aten::_functional_assert_async.msg",
        functional_assert_async,
    );
    r.add("aten::_make_dep_token", make_dep_token);
    r.add("aten::hash_tensor", hash_tensor);
    r.add("aten::is_strides_like_format", is_strides_like_format);
    r.add("aten::_functional_assert_scalar", functional_assert_scalar);
    r.add_all(
        &[
            "aten::_functional_sym_constrain_range",
            "aten::_functional_sym_constrain_range_for_size",
        ],
        functional_constrain_range,
    );
    r.add("aten::_assert_tensor_metadata", assert_tensor_metadata);
    r.add("aten::get_device", get_device);
    r.add("aten::is_nonzero", is_nonzero);
    r.add("aten::is_same_size", is_same_size);
    r.add("aten::equal", equal);
    r.add("aten::isclose", isclose);
    r.add("aten::allclose", allclose);
}
