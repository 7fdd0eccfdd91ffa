//! `aten::` operators that TorchScript's runtime registers itself rather than ATen
//! (torch/csrc/jit/runtime/register_prim_ops*.cpp, register_special_ops.cpp): the batch-norm
//! reshapes `_ncf_unsqueeze` / `_ncf_view`, `_pack_sequence`, the sublist form of `einsum`,
//! `_tensor_to_list` (`flatten_dense_tensors` and its inverse are in `flat_buffers.rs`;
//! `to_dense` is in `sparse.rs`).

use super::kernels::{check_rank, invalid_argument};
use super::prims::via_aten;
use super::{Args, Registry};
use crate::tensor::{DType, RankRequirement, TensorError};
use crate::values::{IValue, List, Type};

type R = crate::Result<IValue>;

/// An `int[]` value.
pub(super) fn int_list(v: impl IntoIterator<Item = i64>) -> IValue {
    IValue::List(List::new(
        Type::Int,
        v.into_iter().map(IValue::Int).collect(),
    ))
}

/// `_ncf_unsqueeze(self, ndim)`: a 1-d tensor of C values reshaped to `[1, C, 1, ...]` (`ndim`
/// dims), to broadcast per-channel statistics.
fn ncf_unsqueeze(a: &mut Args<'_>) -> R {
    let x = a.tensor(0)?;
    let ndim_arg = a.int(1)?;
    let ndim = usize::try_from(ndim_arg)
        .ok()
        .filter(|&n| n >= 2)
        .ok_or_else(|| invalid_argument(a.op, "ndim", "must be at least 2", ndim_arg))?;
    check_rank(a.op, "self", RankRequirement::Exactly(1), x.shape())?;
    let mut sizes = vec![1i64; ndim];
    sizes[1] = x.shape()[0] as i64;
    via_aten(a, "aten::reshape", vec![x.into(), int_list(sizes)])
}

/// `_ncf_view(self, input_shape, normalized_ndim)`: `self` reshaped to `input_shape`'s leading
/// dims followed by `normalized_ndim` ones.
fn ncf_view(a: &mut Args<'_>) -> R {
    let input_shape = a.int_list(1)?;
    let normalized_arg = a.int(2)?;
    let normalized = usize::try_from(normalized_arg)
        .ok()
        .filter(|&n| n <= input_shape.len())
        .ok_or_else(|| {
            invalid_argument(
                a.op,
                "normalized_ndim",
                format!(
                    "must be in [0, {}] (the length of input_shape)",
                    input_shape.len()
                ),
                normalized_arg,
            )
        })?;
    let kept = input_shape.len() - normalized;
    let sizes = input_shape[..kept]
        .iter()
        .copied()
        .chain(std::iter::repeat_n(1, normalized));
    via_aten(a, "aten::reshape", vec![a.get(0)?.clone(), int_list(sizes)])
}

/// `_pack_sequence(output, batch_sizes, sorted_indices, unsorted_indices)`: the PackedSequence
/// fields, as given.
fn pack_sequence(a: &mut Args<'_>) -> R {
    let fields = vec![
        a.tensor(0)?.into(),
        a.tensor(1)?.into(),
        a.opt_tensor(2)?.map_or(IValue::None, IValue::Tensor),
        a.opt_tensor(3)?.map_or(IValue::None, IValue::Tensor),
    ];
    Ok(IValue::tuple(fields))
}

/// `einsum.sublist(a, sublist_a, b, sublist_b, ..., [sublist_out])`: `einsum` of the equation
/// the sublists spell (subscripts 0-25 are `A`-`Z`, 26-51 `a`-`z`).
fn einsum_sublist(a: &mut Args<'_>) -> R {
    let n = a.len();
    if n < 2 {
        return Err(invalid_argument(
            "einsum",
            "the arguments",
            "must give at least one operand and its subscripts list",
            format!("{n} arguments"),
        ));
    }
    let spell = |i: usize| -> crate::Result<String> {
        a.int_list(i)?
            .iter()
            .enumerate()
            .map(|(k, &s)| match s {
                0..=25 => Ok(char::from(b'A' + s as u8)),
                26..=51 => Ok(char::from(b'a' + (s - 26) as u8)),
                _ => Err(invalid_argument(
                    "einsum",
                    format!("subscript {k} of argument {i}"),
                    "must be in [0, 52)",
                    s,
                )),
            })
            .collect()
    };
    let mut inputs = Vec::new();
    let mut operands = Vec::new();
    let mut i = 0;
    while i + 1 < n {
        operands.push(IValue::Tensor(a.tensor(i)?));
        inputs.push(spell(i + 1)?);
        i += 2;
    }
    let mut equation = inputs.join(",");
    if n % 2 == 1 {
        equation.push_str("->");
        equation.push_str(&spell(n - 1)?);
    }
    via_aten(
        a,
        "aten::einsum",
        vec![
            IValue::String(equation.into()),
            IValue::List(List::new(Type::Tensor, operands)),
            IValue::None,
        ],
    )
}

/// `_tensor_to_list(self)`: the int32 elements of a 1-d tensor as ints.
fn tensor_to_list(a: &mut Args<'_>) -> R {
    let x = a.tensor(0)?;
    if x.dtype() != DType::Int32 {
        return Err(TensorError::DTypeMismatch {
            expected: DType::Int32,
            got: x.dtype(),
        }
        .into());
    }
    check_rank(a.op, "self", RankRequirement::Exactly(1), x.shape())?;
    Ok(int_list(x.to_vec::<i32>()?.into_iter().map(i64::from)))
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::_ncf_unsqueeze", ncf_unsqueeze);
    r.add("aten::_ncf_view", ncf_view);
    r.add("aten::_pack_sequence", pack_sequence);
    r.add("aten::einsum.sublist", einsum_sublist);
    r.add("aten::_tensor_to_list", tensor_to_list);
}
