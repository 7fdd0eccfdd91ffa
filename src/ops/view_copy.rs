//! The `*_copy` operators: functional twins of the view ops (`permute_copy`, `view_copy`,
//! `split_copy`, ...) that functionalization and `torch.export` emit. Each takes its view op's
//! arguments and returns what the view would show, copied into fresh contiguous storage, so the
//! result never aliases its input.
//!
//! `view_copy` with a size the input's strides cannot view falls back to `reshape`, as ATen's
//! `view_copy` does; every other op raises the view op's own errors.

use super::shape::{
    as_strided_op, diagonal, expand, narrow, permute, reshape, select, slice, split,
    split_with_sizes, squeeze_all, squeeze_list, t_op, tensor_list, transpose, unbind, unfold,
    unsqueeze, view_dtype,
};
use super::{Args, Registry};
use crate::tensor::Tensor;
use crate::values::IValue;

type R = crate::Result<IValue>;

/// A view's elements in storage of their own.
fn copied(view: Tensor) -> R {
    Ok(IValue::Tensor(view.deep_clone()?))
}

/// Each view of a list (`split`, `unbind`) copied.
fn copied_list(views: Vec<Tensor>) -> R {
    let copies = views
        .iter()
        .map(Tensor::deep_clone)
        .collect::<crate::Result<Vec<_>>>()?;
    Ok(tensor_list(copies))
}

fn view_copy(a: &mut Args<'_>) -> R {
    copied(reshape(&a.tensor(0)?, &a.int_list(1)?)?)
}

fn view_copy_dtype(a: &mut Args<'_>) -> R {
    copied(view_dtype(&a.tensor(0)?, a.dtype(1)?)?)
}

fn permute_copy(a: &mut Args<'_>) -> R {
    copied(permute(&a.tensor(0)?, &a.int_list(1)?)?)
}

/// `expand_copy(self, size, *, implicit)`: `implicit` only matters to autograd's tracing.
fn expand_copy(a: &mut Args<'_>) -> R {
    copied(expand(&a.tensor(0)?, &a.int_list(1)?)?)
}

fn squeeze_copy(a: &mut Args<'_>) -> R {
    copied(squeeze_all(&a.tensor(0)?)?)
}

fn squeeze_copy_dim(a: &mut Args<'_>) -> R {
    copied(squeeze_list(&a.tensor(0)?, &[a.int(1)?])?)
}

fn squeeze_copy_dims(a: &mut Args<'_>) -> R {
    copied(squeeze_list(&a.tensor(0)?, &a.int_list(1)?)?)
}

fn unsqueeze_copy(a: &mut Args<'_>) -> R {
    copied(unsqueeze(&a.tensor(0)?, a.int(1)?)?)
}

fn transpose_copy(a: &mut Args<'_>) -> R {
    copied(transpose(&a.tensor(0)?, a.int(1)?, a.int(2)?)?)
}

fn t_copy(a: &mut Args<'_>) -> R {
    copied(t_op(&a.tensor(0)?)?)
}

fn unfold_copy(a: &mut Args<'_>) -> R {
    copied(unfold(&a.tensor(0)?, a.int(1)?, a.int(2)?, a.int(3)?)?)
}

fn select_copy(a: &mut Args<'_>) -> R {
    copied(select(&a.tensor(0)?, a.int(1)?, a.int(2)?)?)
}

fn slice_copy(a: &mut Args<'_>) -> R {
    copied(slice(
        &a.tensor(0)?,
        a.int(1)?,
        a.opt_int(2)?,
        a.opt_int(3)?,
        a.int(4)?,
    )?)
}

fn narrow_copy(a: &mut Args<'_>) -> R {
    copied(narrow(&a.tensor(0)?, a.int(1)?, a.int(2)?, a.int(3)?)?)
}

fn diagonal_copy(a: &mut Args<'_>) -> R {
    copied(diagonal(&a.tensor(0)?, a.int(1)?, a.int(2)?, a.int(3)?)?)
}

fn as_strided_copy(a: &mut Args<'_>) -> R {
    copied(as_strided_op(
        &a.tensor(0)?,
        &a.int_list(1)?,
        &a.int_list(2)?,
        a.opt_int(3)?,
    )?)
}

fn split_copy(a: &mut Args<'_>) -> R {
    copied_list(split(&a.tensor(0)?, a.int(1)?, a.int(2)?)?)
}

fn split_with_sizes_copy(a: &mut Args<'_>) -> R {
    copied_list(split_with_sizes(&a.tensor(0)?, &a.int_list(1)?, a.int(2)?)?)
}

fn unbind_copy(a: &mut Args<'_>) -> R {
    copied_list(unbind(&a.tensor(0)?, a.int(1)?)?)
}

pub fn register(r: &mut Registry) {
    r.add("aten::view_copy", view_copy);
    r.add("aten::view_copy.dtype", view_copy_dtype);
    r.add("aten::permute_copy", permute_copy);
    r.add("aten::expand_copy", expand_copy);
    r.add("aten::squeeze_copy", squeeze_copy);
    r.add("aten::squeeze_copy.dim", squeeze_copy_dim);
    r.add("aten::squeeze_copy.dims", squeeze_copy_dims);
    r.add("aten::unsqueeze_copy", unsqueeze_copy);
    r.add("aten::transpose_copy.int", transpose_copy);
    r.add("aten::t_copy", t_copy);
    r.add("aten::unfold_copy", unfold_copy);
    r.add("aten::select_copy.int", select_copy);
    r.add("aten::slice_copy.Tensor", slice_copy);
    r.add("aten::narrow_copy", narrow_copy);
    r.add("aten::diagonal_copy", diagonal_copy);
    r.add("aten::as_strided_copy", as_strided_copy);
    r.add("aten::split_copy.Tensor", split_copy);
    r.add("aten::split_with_sizes_copy", split_with_sizes_copy);
    r.add("aten::unbind_copy.int", unbind_copy);
}
