//! Kernels: ATen's test-only operators that PyTorch's CPU build registers (`_foobar`,
//! `_test_optional_intlist`, `_test_check_tensor`, ...; aten/src/ATen/native/TestOps.cpp). They
//! appear in graphs exported from PyTorch's own dispatcher tests; each computes exactly what the
//! ATen function does, including its argument checks.

use super::kernels::{check_rank, invalid_argument, wrong_dtype};
use super::{Args, Registry};
use crate::tensor::{DType, RankRequirement, Tensor, TensorError};
use crate::values::IValue;

type R = crate::Result<IValue>;

/// The input itself (`_foobar`, `_test_parallel_materialize`: ATen returns `self`).
fn same_tensor(args: &mut Args<'_>) -> R {
    Ok(IValue::Tensor(args.tensor(0)?))
}

/// A fresh copy of the input (`_test_warn_in_autograd`, `_test_functorch_fallback`, ...).
fn cloned(args: &mut Args<'_>) -> R {
    Ok(IValue::Tensor(args.tensor(0)?.deep_clone()?))
}

/// `values` when `addends` is None; else `values[i] + addends[i]` for a 1-d tensor of `dtype`
/// (ATen reads it through an accessor of that type: int32 for the int lists, float32 for the
/// float list).
fn add_optional_list(args: &Args<'_>, dtype: DType, addends: Option<Vec<f64>>) -> R {
    let values = args.tensor(0)?;
    let Some(addends) = addends else {
        return Ok(IValue::Tensor(values));
    };
    check_rank(
        args.op,
        "values",
        RankRequirement::Exactly(1),
        values.shape(),
    )?;
    if values.dtype() != dtype {
        return Err(TensorError::DTypeMismatch {
            expected: dtype,
            got: values.dtype(),
        }
        .into());
    }
    let n = values.shape()[0];
    if addends.len() < n {
        // PyTorch's ArrayRef check fails at the first index past the list
        return Err(TensorError::IndexOutOfBounds {
            index: addends.len() as i64,
            dim: 0,
            size: addends.len(),
        }
        .into());
    }
    let out = match dtype {
        DType::Int32 => {
            let v = values.contiguous()?.to_vec::<i64>()?;
            // int + int64_t stored back into an int: wraps like the C++ conversion
            let sums: Vec<i32> = v
                .iter()
                .zip(&addends)
                .map(|(&x, &a)| x.wrapping_add(a as i64) as i32)
                .collect();
            Tensor::from_vec(sums, &[n])?
        }
        _ => {
            let v = values.contiguous()?.to_vec::<f64>()?;
            let sums: Vec<f32> = v
                .iter()
                .zip(&addends)
                .map(|(&x, &a)| (x + a) as f32)
                .collect();
            Tensor::from_vec(sums, &[n])?
        }
    };
    Ok(IValue::Tensor(out))
}

fn test_optional_intlist(args: &mut Args<'_>) -> R {
    let addends = args
        .opt_int_list(1)?
        .map(|v| v.into_iter().map(|x| x as f64).collect());
    add_optional_list(args, DType::Int32, addends)
}

fn test_optional_floatlist(args: &mut Args<'_>) -> R {
    let addends = args.opt_double_list(1)?;
    add_optional_list(args, DType::Float32, addends)
}

/// `_test_serialization_subcmul(self, other, alpha)`: `self - other * alpha`.
fn test_serialization_subcmul(args: &mut Args<'_>) -> R {
    let values = vec![
        args.get(0)?.clone(),
        args.get(1)?.clone(),
        args.get(2)?.clone(),
    ];
    super::prims::via_aten(args, "aten::sub.Tensor", values)
}

/// The escaped default `"'\` both string arguments must hold.
const STRING_DEFAULT: &str = "\"'\\";

fn test_string_default(args: &mut Args<'_>) -> R {
    for (i, name) in [(1, "A"), (2, "B")] {
        if &*args.str(i)? != STRING_DEFAULT {
            return Err(invalid_argument(
                args.op,
                name,
                format!("must be its default {STRING_DEFAULT:?}"),
                format!("{:?}", args.str(i)?),
            ));
        }
    }
    Ok(IValue::Tensor(args.tensor(0)?))
}

fn require_int(args: &Args<'_>, i: usize, want: i64, name: &str) -> crate::Result<()> {
    if args.int(i)? == want {
        Ok(())
    } else {
        Err(invalid_argument(
            args.op,
            name,
            format!("must be {want}"),
            args.int(i)?,
        ))
    }
}

/// `_test_ambiguous_defaults.a(dummy, a=1, b=1)`: int64 scalar tensor 1 for the defaults.
fn test_ambiguous_defaults_a(args: &mut Args<'_>) -> R {
    require_int(args, 1, 1, "a")?;
    require_int(args, 2, 1, "b")?;
    Ok(IValue::Tensor(Tensor::from_vec(vec![1i64], &[])?))
}

/// `_test_ambiguous_defaults.b(dummy, a=2, b="2")`: int64 scalar tensor 2 for the defaults.
fn test_ambiguous_defaults_b(args: &mut Args<'_>) -> R {
    require_int(args, 1, 2, "a")?;
    if &*args.str(2)? != "2" {
        return Err(invalid_argument(
            args.op,
            "b",
            "must be \"2\"",
            format!("{:?}", args.str(2)?),
        ));
    }
    Ok(IValue::Tensor(Tensor::from_vec(vec![2i64], &[])?))
}

/// `self.view(-1)`: a flat view sharing storage.
fn test_autograd_multiple_dispatch_view(args: &mut Args<'_>) -> R {
    Ok(IValue::Tensor(super::shape::view(&args.tensor(0)?, &[-1])?))
}

fn test_autograd_multiple_dispatch_view_copy(args: &mut Args<'_>) -> R {
    let t = args.tensor(0)?;
    Ok(IValue::Tensor(super::shape::view(&t, &[-1])?.deep_clone()?))
}

/// `_test_check_tensor(self)`: a bool tensor whose elements are all true, cloned; a false
/// element fails with ATen's test message, a non-bool tensor with its internal assert.
fn test_check_tensor(args: &mut Args<'_>) -> R {
    let t = args.tensor(0)?;
    if t.dtype() != DType::Bool {
        return Err(wrong_dtype(args.op, "self", "bool", t.dtype()));
    }
    if t.contiguous()?.to_vec::<f64>()?.contains(&0.0) {
        return Err(invalid_argument(
            args.op,
            "self",
            "must be all true (TORCH_CHECK_TENSOR_ALL's test)",
            "a false element",
        ));
    }
    Ok(IValue::Tensor(t.deep_clone()?))
}

pub(crate) fn register(r: &mut Registry) {
    r.add_all(
        &["aten::_foobar", "aten::_test_parallel_materialize"],
        same_tensor,
    );
    r.add_all(
        &[
            "aten::_test_warn_in_autograd",
            "aten::_test_functorch_fallback",
            "aten::_test_autograd_multiple_dispatch.fullcoverage",
            "aten::_test_autograd_multiple_dispatch.ntonly",
        ],
        cloned,
    );
    r.add_all(
        &[
            "aten::_test_optional_intlist",
            "aten::_test_optional_filled_intlist",
        ],
        test_optional_intlist,
    );
    r.add("aten::_test_optional_floatlist", test_optional_floatlist);
    r.add(
        "aten::_test_serialization_subcmul",
        test_serialization_subcmul,
    );
    r.add("aten::_test_string_default", test_string_default);
    r.add(
        "aten::_test_ambiguous_defaults.a",
        test_ambiguous_defaults_a,
    );
    r.add(
        "aten::_test_ambiguous_defaults.b",
        test_ambiguous_defaults_b,
    );
    r.add(
        "aten::_test_autograd_multiple_dispatch_view",
        test_autograd_multiple_dispatch_view,
    );
    r.add(
        "aten::_test_autograd_multiple_dispatch_view_copy",
        test_autograd_multiple_dispatch_view_copy,
    );
    r.add("aten::_test_check_tensor", test_check_tensor);
}
