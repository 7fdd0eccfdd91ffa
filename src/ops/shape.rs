//! Kernels: shape family — views (which alias their input's storage exactly as PyTorch's do:
//! same storage, PyTorch's strides and storage offset), geometry queries, and copying shape ops
//! (cat, stack, repeat, flip, roll, pad, tril/triu, diag, ...).
//!
//! In-place geometry ops (`unsqueeze_`, `t_`, `resize_`, `set_`, ...) return the tensor with its
//! new geometry as a new handle: an `IValue::Tensor` holds its own geometry, so a kernel cannot
//! change the shape other handles see. Plan building makes graphs read that handle wherever
//! PyTorch's code would see the changed tensor, and refuses graphs where another handle could
//! observe it (`ir::passes::inplace_geometry`).

use super::{Args, Registry};
use crate::tensor::{
    broadcast_shapes, checked_numel, contiguous_strides, promote::promote_types, wrap_dim, DType,
    Scalar, Shape, Strides, Tensor, TensorError,
};
use crate::values::Type;
use crate::values::{IValue, List};
use ndarray::Axis;

type R<T> = crate::Result<T>;

// one definition each, in kernels; re-exported for the many kernels that import them from here
use super::kernels::{
    check_rank, check_size, invalid_argument, non_negative, rank_mismatch, shape_mismatch,
    size_mismatch, unsupported_feature,
};
pub(crate) use super::kernels::{index_err, shape_err, value_err};
use crate::tensor::RankRequirement;

/// A `Tensor[]` result.
pub(crate) fn tensor_list(items: Vec<Tensor>) -> IValue {
    IValue::List(List::new(
        Type::Tensor,
        items.into_iter().map(IValue::Tensor).collect(),
    ))
}

fn int_list_value(v: impl IntoIterator<Item = i64>) -> IValue {
    IValue::List(List::new(
        Type::Int,
        v.into_iter().map(IValue::Int).collect(),
    ))
}

/// Wrap `dim` against `ndim` dims (PyTorch's `maybe_wrap_dim`).
pub(crate) fn wdim(dim: i64, ndim: usize) -> R<usize> {
    Ok(wrap_dim(dim, ndim)?)
}

// ---------------------------------------------------------------------------------------------
// View helpers (shared with index.rs and sort.rs)
// ---------------------------------------------------------------------------------------------

/// Resolve a size list with at most one `-1` against `numel` (PyTorch's `infer_size`).
pub(crate) fn infer_size(size: &[i64], numel: usize) -> R<Shape> {
    let mut out: Shape = Shape::new();
    let mut infer: Option<usize> = None;
    let mut known: usize = 1;
    for (i, &s) in size.iter().enumerate() {
        if s == -1 {
            if infer.is_some() {
                return Err(invalid_argument(
                    "infer_size",
                    "shape",
                    "may infer only one dimension (-1)",
                    format!("{size:?}"),
                ));
            }
            infer = Some(i);
            out.push(1);
        } else if s >= 0 {
            known = known.checked_mul(s as usize).ok_or_else(|| {
                invalid_argument(
                    "infer_size",
                    "shape",
                    "must have a product that fits in memory",
                    format!("{size:?}"),
                )
            })?;
            out.push(s as usize);
        } else {
            return Err(invalid_argument(
                "infer_size",
                "shape",
                "must have sizes of at least -1",
                format!("{size:?}"),
            ));
        }
    }
    match infer {
        Some(i) => {
            if known == 0 || !numel.is_multiple_of(known) {
                return Err(TensorError::InvalidShape {
                    shape: size.to_vec(),
                    numel,
                }
                .into());
            }
            out[i] = numel / known;
        }
        None => {
            if known != numel {
                return Err(TensorError::InvalidShape {
                    shape: size.to_vec(),
                    numel,
                }
                .into());
            }
        }
    }
    Ok(out)
}

/// Strides that let a tensor of (`old_shape`, `old_strides`) be viewed as `new_shape` without
/// copying, or `None` when PyTorch would refuse `view` (ATen's `computeStride`).
pub(crate) fn view_strides(
    old_shape: &[usize],
    old_strides: &[isize],
    new_shape: &[usize],
) -> Option<Strides> {
    if old_shape.contains(&0) || old_shape.is_empty() {
        if old_shape == new_shape {
            return Some(old_strides.into());
        }
        return Some(contiguous_strides(new_shape));
    }
    let mut new_strides: Strides = Strides::from_elem(0, new_shape.len());
    let mut view_d = new_shape.len() as isize - 1;
    let mut chunk_base_stride = *old_strides.last()?;
    let mut tensor_numel: isize = 1;
    let mut view_numel: isize = 1;
    for tensor_d in (0..old_shape.len()).rev() {
        tensor_numel *= old_shape[tensor_d] as isize;
        let boundary = tensor_d == 0
            || (old_shape[tensor_d - 1] != 1
                && old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride);
        if boundary {
            while view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d as usize] == 1) {
                new_strides[view_d as usize] = view_numel * chunk_base_stride;
                view_numel *= new_shape[view_d as usize] as isize;
                view_d -= 1;
            }
            if view_numel != tensor_numel {
                return None;
            }
            if tensor_d > 0 {
                chunk_base_stride = old_strides[tensor_d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    if view_d != -1 {
        return None;
    }
    Some(new_strides)
}

pub(crate) fn view(t: &Tensor, size: &[i64]) -> R<Tensor> {
    let shape = infer_size(size, t.numel())?;
    let strides = view_strides(t.shape(), t.strides(), &shape).ok_or_else(|| {
        shape_err(
            "view size is not compatible with input tensor's size and stride (at least one \
             dimension spans across two contiguous subspaces). Use .reshape(...) instead.",
        )
    })?;
    Ok(t.as_strided(&shape, &strides, t.storage_offset())?)
}

/// `reshape`: a view when the geometry allows, else a contiguous copy (exactly PyTorch's rule).
pub(crate) fn reshape(t: &Tensor, size: &[i64]) -> R<Tensor> {
    let shape = infer_size(size, t.numel())?;
    match view_strides(t.shape(), t.strides(), &shape) {
        Some(strides) => Ok(t.as_strided(&shape, &strides, t.storage_offset())?),
        None => {
            let c = t.deep_clone()?;
            Ok(c.as_strided(&shape, &contiguous_strides(&shape), 0)?)
        }
    }
}

fn usize_shape(shape: &[usize]) -> Vec<i64> {
    shape.iter().map(|&s| s as i64).collect()
}

pub(crate) fn permute(t: &Tensor, dims: &[i64]) -> R<Tensor> {
    let n = t.dim();
    check_size(
        "permute",
        "len(dims) (input.dim())",
        n as i64,
        dims.len() as i64,
    )?;
    let mut seen = vec![false; n];
    let mut shape = Shape::new();
    let mut strides = Strides::new();
    for &d in dims {
        let d = wdim(d, n)?;
        if seen[d] {
            return Err(invalid_argument(
                "permute",
                "dims",
                "must not repeat a dimension",
                format!("{dims:?}"),
            ));
        }
        seen[d] = true;
        shape.push(t.shape()[d]);
        strides.push(t.strides()[d]);
    }
    Ok(t.as_strided(&shape, &strides, t.storage_offset())?)
}

pub(crate) fn transpose(t: &Tensor, d0: i64, d1: i64) -> R<Tensor> {
    let n = t.dim();
    if n == 0 {
        wdim(d0, n)?;
        wdim(d1, n)?;
        return Ok(t.clone());
    }
    let (a, b) = (wdim(d0, n)?, wdim(d1, n)?);
    let mut shape: Shape = t.shape().into();
    let mut strides: Strides = t.strides().into();
    shape.swap(a, b);
    strides.swap(a, b);
    Ok(t.as_strided(&shape, &strides, t.storage_offset())?)
}

pub(crate) fn t_op(t: &Tensor) -> R<Tensor> {
    if t.dim() > 2 {
        return Err(rank_mismatch(
            "t",
            "self",
            RankRequirement::AtMost(2),
            t.shape(),
        ));
    }
    if t.dim() < 2 {
        return Ok(t.clone());
    }
    transpose(t, 0, 1)
}

pub(crate) fn unsqueeze(t: &Tensor, dim: i64) -> R<Tensor> {
    let n = t.dim();
    let d = wdim(dim, n + 1)?;
    let mut shape: Shape = t.shape().into();
    let mut strides: Strides = t.strides().into();
    let stride = if d >= n {
        1
    } else {
        shape[d] as isize * strides[d]
    };
    shape.insert(d, 1);
    strides.insert(d, stride);
    Ok(t.as_strided(&shape, &strides, t.storage_offset())?)
}

/// Remove the size-1 dims among `dims` (others are left alone, as PyTorch does).
pub(crate) fn squeeze_dims(t: &Tensor, dims: &[usize]) -> R<Tensor> {
    let mut shape = Shape::new();
    let mut strides = Strides::new();
    for (i, (&s, &st)) in t.shape().iter().zip(t.strides()).enumerate() {
        if s == 1 && dims.contains(&i) {
            continue;
        }
        shape.push(s);
        strides.push(st);
    }
    Ok(t.as_strided(&shape, &strides, t.storage_offset())?)
}

pub(crate) fn squeeze_all(t: &Tensor) -> R<Tensor> {
    let all: Vec<usize> = (0..t.dim()).collect();
    squeeze_dims(t, &all)
}

pub(crate) fn squeeze_list(t: &Tensor, dims: &[i64]) -> R<Tensor> {
    let n = t.dim();
    let ds = dims.iter().map(|&d| wdim(d, n)).collect::<R<Vec<_>>>()?;
    squeeze_dims(t, &ds)
}

pub(crate) fn expand(t: &Tensor, size: &[i64]) -> R<Tensor> {
    let n = t.dim();
    if size.len() < n {
        return Err(invalid_argument(
            "expand",
            "size",
            format!("must have at least {n} entries (the tensor's dimensions)"),
            format!("{size:?}"),
        ));
    }
    let lead = size.len() - n;
    let mut shape = Shape::new();
    let mut strides = Strides::new();
    for (i, &s) in size.iter().enumerate() {
        if i < lead {
            if s < 0 {
                return Err(invalid_argument(
                    "expand",
                    format!("size[{i}]"),
                    "must be non-negative in a leading, new dimension",
                    s,
                ));
            }
            shape.push(s as usize);
            strides.push(0);
            continue;
        }
        let (cur, st) = (t.shape()[i - lead], t.strides()[i - lead]);
        if s == -1 || s as usize == cur && s >= 0 {
            shape.push(cur);
            strides.push(st);
        } else if cur == 1 && s >= 0 {
            shape.push(s as usize);
            strides.push(0);
        } else {
            return Err(size_mismatch(
                "expand",
                format!(
                    "size[{i}] of {size:?} (the size of non-singleton dimension {} of {:?})",
                    i - lead,
                    t.shape()
                ),
                cur as i64,
                s,
            ));
        }
    }
    Ok(t.as_strided(&shape, &strides, t.storage_offset())?)
}

pub(crate) fn expand_to(t: &Tensor, shape: &[usize]) -> R<Tensor> {
    if t.shape() == shape {
        return Ok(t.clone());
    }
    expand(t, &usize_shape(shape))
}

pub(crate) fn narrow(t: &Tensor, dim: i64, start: i64, length: i64) -> R<Tensor> {
    if t.dim() == 0 {
        return Err(rank_mismatch(
            "narrow",
            "self",
            RankRequirement::AtLeast(1),
            t.shape(),
        ));
    }
    let d = wdim(dim, t.dim())?;
    let size = t.shape()[d] as i64;
    let start = if start < 0 { start + size } else { start };
    if start < 0 || start > size || length < 0 || start + length > size {
        return Err(TensorError::NarrowOutOfRange {
            start,
            length,
            size,
        }
        .into());
    }
    slice(t, d as i64, Some(start), Some(start + length), 1)
}

pub(crate) fn select(t: &Tensor, dim: i64, index: i64) -> R<Tensor> {
    if t.dim() == 0 {
        return Err(rank_mismatch(
            "select",
            "self",
            RankRequirement::AtLeast(1),
            t.shape(),
        ));
    }
    let d = wdim(dim, t.dim())?;
    let size = t.shape()[d] as i64;
    if index < -size || index >= size {
        return Err(TensorError::SelectOutOfRange {
            index,
            dim: d,
            shape: t.shape().to_vec(),
        }
        .into());
    }
    let i = if index < 0 { index + size } else { index } as usize;
    let mut shape: Shape = t.shape().into();
    let mut strides: Strides = t.strides().into();
    let offset = t.storage_offset() as isize + i as isize * strides[d];
    shape.remove(d);
    strides.remove(d);
    Ok(t.as_strided(&shape, &strides, offset as usize)?)
}

/// `aten::slice.Tensor`: Python slicing semantics with clamping of out-of-range bounds.
pub(crate) fn slice(
    t: &Tensor,
    dim: i64,
    start: Option<i64>,
    end: Option<i64>,
    step: i64,
) -> R<Tensor> {
    if t.dim() == 0 {
        return Err(rank_mismatch(
            "slice",
            "self",
            RankRequirement::AtLeast(1),
            t.shape(),
        ));
    }
    if step <= 0 {
        return Err(invalid_argument("slice", "step", "must be positive", step));
    }
    let d = wdim(dim, t.dim())?;
    let (begin, stop) = clamp_slice(t.shape()[d], start, end);
    let len = if stop > begin {
        (stop - begin).div_ceil(step as usize)
    } else {
        0
    };
    let mut shape: Shape = t.shape().into();
    let mut strides: Strides = t.strides().into();
    let offset = t.storage_offset() as isize + begin as isize * strides[d];
    shape[d] = len;
    strides[d] *= step as isize;
    Ok(t.as_strided(&shape, &strides, offset as usize)?)
}

/// Start/end of a slice over a dim of `size`, clamped as PyTorch does.
fn clamp_slice(size: usize, start: Option<i64>, end: Option<i64>) -> (usize, usize) {
    let size = size as i64;
    let norm = |v: i64| -> i64 {
        let v = if v < 0 { v.saturating_add(size) } else { v };
        v.clamp(0, size)
    };
    let s = norm(start.unwrap_or(0));
    let e = norm(end.unwrap_or(i64::MAX)).max(s);
    (s as usize, e as usize)
}

pub(crate) fn diagonal(t: &Tensor, offset: i64, dim1: i64, dim2: i64) -> R<Tensor> {
    let n = t.dim();
    let (d1, d2) = (wdim(dim1, n)?, wdim(dim2, n)?);
    if d1 == d2 {
        return Err(invalid_argument(
            "diagonal",
            "dim2",
            format!("must differ from dim1 ({dim1})"),
            dim2,
        ));
    }
    let (s1, s2) = (t.shape()[d1] as i64, t.shape()[d2] as i64);
    let (st1, st2) = (t.strides()[d1], t.strides()[d2]);
    let mut storage_offset = t.storage_offset() as isize;
    let diag = if offset >= 0 {
        (s1.min(s2 - offset)).max(0)
    } else {
        ((s1 + offset).min(s2)).max(0)
    };
    if diag > 0 {
        if offset >= 0 {
            storage_offset += offset as isize * st2;
        } else {
            storage_offset -= offset as isize * st1;
        }
    }
    let mut shape = Shape::new();
    let mut strides = Strides::new();
    for i in 0..n {
        if i != d1 && i != d2 {
            shape.push(t.shape()[i]);
            strides.push(t.strides()[i]);
        }
    }
    shape.push(diag as usize);
    strides.push(st1 + st2);
    Ok(t.as_strided(&shape, &strides, storage_offset as usize)?)
}

pub(crate) fn movedim(t: &Tensor, src: &[i64], dst: &[i64]) -> R<Tensor> {
    let n = t.dim();
    if src.len() != dst.len() {
        return Err(size_mismatch(
            "movedim",
            format!("the number of destination dims {dst:?} (source {src:?})"),
            src.len() as i64,
            dst.len() as i64,
        ));
    }
    let src = src.iter().map(|&d| wdim(d, n)).collect::<R<Vec<_>>>()?;
    let dst = dst.iter().map(|&d| wdim(d, n)).collect::<R<Vec<_>>>()?;
    let mut order: Vec<Option<usize>> = vec![None; n];
    let mut used = vec![false; n];
    for (&s, &d) in src.iter().zip(&dst) {
        if order[d].is_some() || used[s] {
            return Err(invalid_argument(
                "movedim",
                "source and destination",
                "must not repeat a dim",
                format!("{src:?} and {dst:?}"),
            ));
        }
        order[d] = Some(s);
        used[s] = true;
    }
    let mut rest = (0..n).filter(|i| !used[*i]);
    let mut perm = Vec::with_capacity(n);
    for o in order {
        match o {
            Some(s) => perm.push(s as i64),
            None => perm.push(rest.next().ok_or_else(|| shape_err("movedim"))? as i64),
        }
    }
    permute(t, &perm)
}

pub(crate) fn flatten(t: &Tensor, start: i64, end: i64) -> R<Tensor> {
    let n = t.dim();
    if n == 0 {
        return reshape(t, &[1]);
    }
    let (s, e) = (wdim(start, n)?, wdim(end, n)?);
    if s > e {
        return Err(invalid_argument(
            "flatten",
            "start_dim",
            format!("must not come after end_dim ({end})"),
            start,
        ));
    }
    if s == e {
        return Ok(t.clone());
    }
    let shape = t.shape();
    let mut size: Vec<i64> = shape[..s].iter().map(|&x| x as i64).collect();
    size.push(checked_numel(&shape[s..=e])? as i64);
    size.extend(shape[e + 1..].iter().map(|&x| x as i64));
    reshape(t, &size)
}

fn unflatten(t: &Tensor, dim: i64, sizes: &[i64]) -> R<Tensor> {
    let d = wdim(dim, t.dim())?;
    if sizes.is_empty() {
        return Err(invalid_argument(
            "unflatten",
            "sizes",
            "must be non-empty",
            "[]",
        ));
    }
    let inner = infer_size(sizes, t.shape()[d])?;
    let mut size: Vec<i64> = usize_shape(&t.shape()[..d]);
    size.extend(inner.iter().map(|&x| x as i64));
    size.extend(usize_shape(&t.shape()[d + 1..]));
    view(t, &size)
}

pub(crate) fn unfold(t: &Tensor, dim: i64, size: i64, step: i64) -> R<Tensor> {
    let n = t.dim();
    let d = wdim(dim, n)?;
    let dim_size = if n == 0 { 1 } else { t.shape()[d] } as i64;
    if size < 0 || size > dim_size {
        return Err(invalid_argument(
            "unfold",
            "size",
            format!("must be in [0, {dim_size}] (the size of dimension {d})"),
            size,
        ));
    }
    if step <= 0 {
        return Err(invalid_argument("unfold", "step", "must be > 0", step));
    }
    let mut shape: Shape = t.shape().into();
    let mut strides: Strides = t.strides().into();
    if n == 0 {
        shape.push(size as usize);
        strides.push(1);
    } else {
        let st = strides[d];
        shape[d] = ((dim_size - size) / step + 1) as usize;
        strides[d] = st * step as isize;
        shape.push(size as usize);
        strides.push(st);
    }
    Ok(t.as_strided(&shape, &strides, t.storage_offset())?)
}

pub(crate) fn as_strided_op(
    t: &Tensor,
    size: &[i64],
    stride: &[i64],
    offset: Option<i64>,
) -> R<Tensor> {
    let shape = size
        .iter()
        .map(|&s| non_negative("as_strided", "size", s))
        .collect::<R<Vec<_>>>()?;
    let strides = stride
        .iter()
        .map(|&s| non_negative("as_strided", "stride", s).map(|s| s as isize))
        .collect::<R<Vec<_>>>()?;
    let offset = match offset {
        Some(o) => non_negative("as_strided", "storage_offset", o)?,
        None => t.storage_offset(),
    };
    Ok(t.as_strided(&shape, &strides, offset)?)
}

/// `view.dtype`: reinterpret the bytes as another dtype (same storage).
pub(crate) fn view_dtype(t: &Tensor, dtype: DType) -> R<Tensor> {
    let (old, new) = (t.dtype().size(), dtype.size());
    if old == new {
        return Ok(Tensor::from_parts(
            t.storage().clone(),
            t.storage_offset(),
            t.shape(),
            t.strides(),
            dtype,
        )?);
    }
    let n = t.dim();
    let bad = || {
        invalid_argument(
            "view",
            "dtype",
            format!(
                "may change the element size only when self.stride(-1) is 1 and the last dimension \
                 is divisible (self is {} of shape {:?}, strides {:?})",
                t.dtype(),
                t.shape(),
                t.strides()
            ),
            dtype,
        )
    };
    if n == 0 || t.strides()[n - 1] != 1 {
        return Err(bad());
    }
    let mut shape: Shape = t.shape().into();
    let mut strides: Strides = t.strides().into();
    let byte_offset = t.storage_offset() * old;
    if new > old {
        let ratio = new / old;
        if !shape[n - 1].is_multiple_of(ratio) || !byte_offset.is_multiple_of(new) {
            return Err(bad());
        }
        shape[n - 1] /= ratio;
        for s in strides[..n - 1].iter_mut() {
            if *s % ratio as isize != 0 {
                return Err(bad());
            }
            *s /= ratio as isize;
        }
    } else {
        let ratio = old / new;
        shape[n - 1] *= ratio;
        for s in strides[..n - 1].iter_mut() {
            *s *= ratio as isize;
        }
    }
    Ok(Tensor::from_parts(
        t.storage().clone(),
        byte_offset / new,
        &shape,
        &strides,
        dtype,
    )?)
}

/// Split `t` along `dim` into pieces of the given sizes (views).
pub(crate) fn split_with_sizes(t: &Tensor, sizes: &[i64], dim: i64) -> R<Vec<Tensor>> {
    let d = wdim(dim, t.dim())?;
    let total: i64 = sizes.iter().sum();
    if t.dim() == 0 || total != t.shape()[d] as i64 || sizes.iter().any(|&s| s < 0) {
        return Err(invalid_argument(
            "split_with_sizes",
            "split_sizes",
            format!(
                "must be non-negative and sum to {} (the size of dimension {d})",
                t.shape().get(d).copied().unwrap_or(0)
            ),
            format!("{sizes:?}"),
        ));
    }
    let mut start = 0;
    let mut out = Vec::with_capacity(sizes.len());
    for &s in sizes {
        out.push(narrow(t, d as i64, start, s)?);
        start += s;
    }
    Ok(out)
}

pub(crate) fn split(t: &Tensor, split_size: i64, dim: i64) -> R<Vec<Tensor>> {
    if t.dim() == 0 {
        return Err(rank_mismatch(
            "split",
            "self",
            RankRequirement::AtLeast(1),
            t.shape(),
        ));
    }
    let d = wdim(dim, t.dim())?;
    let dim_size = t.shape()[d] as i64;
    if split_size < 0 || (split_size == 0 && dim_size != 0) {
        return Err(invalid_argument(
            "split",
            "split_size",
            format!("must be positive, or 0 when dimension {d} is empty (its size is {dim_size})"),
            split_size,
        ));
    }
    let num = if split_size == 0 {
        1
    } else {
        ((dim_size + split_size - 1) / split_size).max(1)
    };
    let sizes: Vec<i64> = (0..num)
        .map(|i| split_size.min(dim_size - i * split_size))
        .collect();
    split_with_sizes(t, &sizes, d as i64)
}

fn chunk(t: &Tensor, chunks: i64, dim: i64) -> R<Vec<Tensor>> {
    if t.dim() == 0 {
        return Err(rank_mismatch(
            "chunk",
            "self",
            RankRequirement::AtLeast(1),
            t.shape(),
        ));
    }
    if chunks <= 0 {
        return Err(invalid_argument(
            "chunk",
            "chunks",
            "must be greater than 0",
            chunks,
        ));
    }
    let d = wdim(dim, t.dim())?;
    let dim_size = t.shape()[d] as i64;
    let split_size = (dim_size + chunks - 1) / chunks;
    if split_size == 0 && dim_size == 0 {
        return split_with_sizes(t, &vec![0; chunks as usize], d as i64);
    }
    split(t, split_size, d as i64)
}

pub(crate) fn unbind(t: &Tensor, dim: i64) -> R<Vec<Tensor>> {
    if t.dim() == 0 {
        return Err(rank_mismatch(
            "unbind",
            "self",
            RankRequirement::AtLeast(1),
            t.shape(),
        ));
    }
    let d = wdim(dim, t.dim())?;
    (0..t.shape()[d] as i64)
        .map(|i| select(t, d as i64, i))
        .collect()
}

fn tensor_split_sections(t: &Tensor, sections: i64, dim: i64) -> R<Vec<Tensor>> {
    if t.dim() == 0 {
        return Err(rank_mismatch(
            "tensor_split",
            "self",
            RankRequirement::AtLeast(1),
            t.shape(),
        ));
    }
    if sections <= 0 {
        return Err(invalid_argument(
            "tensor_split",
            "sections",
            "must be larger than 0",
            sections,
        ));
    }
    let d = wdim(dim, t.dim())?;
    let n = t.shape()[d] as i64;
    let (base, extra) = (n / sections, n % sections);
    let mut start = 0;
    let mut out = Vec::with_capacity(sections as usize);
    for i in 0..sections {
        let len = base + i64::from(i < extra);
        out.push(slice(t, d as i64, Some(start), Some(start + len), 1)?);
        start += len;
    }
    Ok(out)
}

fn tensor_split_indices(t: &Tensor, indices: &[i64], dim: i64) -> R<Vec<Tensor>> {
    if t.dim() == 0 {
        return Err(rank_mismatch(
            "tensor_split",
            "self",
            RankRequirement::AtLeast(1),
            t.shape(),
        ));
    }
    let d = wdim(dim, t.dim())? as i64;
    let mut out = Vec::with_capacity(indices.len() + 1);
    let mut start = 0;
    for &end in indices {
        out.push(slice(t, d, Some(start), Some(end), 1)?);
        start = end;
    }
    out.push(slice(t, d, Some(start), None, 1)?);
    Ok(out)
}

fn tensor_split_tensor(t: &Tensor, spec: &Tensor, dim: i64) -> R<Vec<Tensor>> {
    if spec.dtype() != DType::Int64 {
        return Err(super::kernels::wrong_dtype(
            "tensor_split",
            "tensor_indices_or_sections",
            "int64",
            spec.dtype(),
        ));
    }
    check_rank(
        "tensor_split",
        "tensor_indices_or_sections",
        RankRequirement::AtMost(1),
        spec.shape(),
    )?;
    let v = spec.to_vec::<i64>()?;
    if spec.dim() == 0 {
        tensor_split_sections(t, v.first().copied().unwrap_or(0), dim)
    } else {
        tensor_split_indices(t, &v, dim)
    }
}

/// hsplit/vsplit/dsplit with an int: the dim must divide evenly.
fn split_axis_sections(t: &Tensor, sections: i64, dim: usize, name: &str) -> R<Vec<Tensor>> {
    let size = t.shape().get(dim).copied().unwrap_or(0) as i64;
    if sections == 0 || size % sections != 0 {
        return Err(invalid_argument(
            name,
            "sections",
            format!("must divide the size {size} of dimension {dim}"),
            sections,
        ));
    }
    tensor_split_sections(t, sections, dim as i64)
}

/// `hsplit`/`vsplit`/`dsplit` (`name`) into equal sections.
fn split_axis_int(a: &mut Args, name: &str) -> R<IValue> {
    let t = a.tensor(0)?;
    let d = hsv_dim(&t, name)?;
    Ok(tensor_list(split_axis_sections(&t, a.int(1)?, d, name)?))
}

/// `hsplit`/`vsplit`/`dsplit` (`name`) at indices.
fn split_axis_array(a: &mut Args, name: &str) -> R<IValue> {
    let t = a.tensor(0)?;
    let d = hsv_dim(&t, name)?;
    Ok(tensor_list(tensor_split_indices(
        &t,
        &a.int_list(1)?,
        d as i64,
    )?))
}

fn hsv_dim(t: &Tensor, name: &str) -> R<usize> {
    let (min, dim) = match name {
        "hsplit" => (1, if t.dim() == 1 { 0 } else { 1 }),
        "vsplit" => (2, 0),
        _ => (3, 2),
    };
    if t.dim() < min {
        return Err(rank_mismatch(
            name,
            "self",
            RankRequirement::AtLeast(min),
            t.shape(),
        ));
    }
    Ok(dim)
}

fn atleast(t: &Tensor, n: usize) -> R<Tensor> {
    match (t.dim(), n) {
        (0, 1) => reshape(t, &[1]),
        (0, 2) => reshape(t, &[1, 1]),
        (0, 3) => reshape(t, &[1, 1, 1]),
        (1, 2) => unsqueeze(t, 0),
        (1, 3) => reshape(t, &[1, t.shape()[0] as i64, 1]),
        (2, 3) => unsqueeze(t, -1),
        _ => Ok(t.clone()),
    }
}

pub(crate) fn broadcast_all(ts: &[Tensor]) -> R<Vec<Tensor>> {
    let mut shape: Shape = Shape::new();
    for t in ts {
        shape = broadcast_shapes(&shape, t.shape())?;
    }
    ts.iter().map(|t| expand_to(t, &shape)).collect()
}

fn meshgrid(ts: &[Tensor], indexing: &str) -> R<Vec<Tensor>> {
    if ts.is_empty() {
        return Err(invalid_argument(
            "meshgrid",
            "tensors",
            "must be a non-empty list",
            "[]",
        ));
    }
    for t in ts {
        if t.dim() > 1 {
            return Err(rank_mismatch(
                "meshgrid",
                "each tensor",
                RankRequirement::AtMost(1),
                t.shape(),
            ));
        }
    }
    let swap = match indexing {
        "ij" => false,
        "xy" => ts.len() >= 2,
        other => {
            return Err(invalid_argument(
                "meshgrid",
                "indexing",
                "must be one of \"xy\" or \"ij\"",
                format!("'{other}'"),
            ))
        }
    };
    let mut order: Vec<&Tensor> = ts.iter().collect();
    if swap {
        order.swap(0, 1);
    }
    let shape: Vec<i64> = order.iter().map(|t| t.numel() as i64).collect();
    let mut out = Vec::with_capacity(ts.len());
    for (i, t) in order.iter().enumerate() {
        let mut vshape = vec![1i64; shape.len()];
        vshape[i] = -1;
        out.push(expand(&view(t, &vshape)?, &shape)?);
    }
    if swap {
        // the grids already have the xy shape; only their order is restored
        out.swap(0, 1);
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Copying ops
// ---------------------------------------------------------------------------------------------

/// Gather `indices` (validated by the caller to be < size) along `dim` into a new contiguous
/// tensor. The building block of index_select, flip-like and padding ops.
pub(crate) fn gather_dim(t: &Tensor, dim: usize, indices: &[usize]) -> R<Tensor> {
    let mut shape: Shape = t.shape().into();
    let size = *shape.get(dim).ok_or_else(|| TensorError::DimOutOfRange {
        dim: dim as i64,
        ndim: t.dim(),
    })?;
    if let Some(&bad) = indices.iter().find(|&&i| i >= size) {
        return Err(TensorError::IndexOutOfBounds {
            index: bad as i64,
            dim,
            size,
        }
        .into());
    }
    if let Some(bits) = t.as_bits()? {
        // float8/complex32: their bits, gathered as integers
        return view_dtype(&gather_dim(&bits, dim, indices)?, t.dtype());
    }
    shape[dim] = indices.len();
    let out = Tensor::zeros(&shape, t.dtype())?;
    if out.numel() == 0 {
        return Ok(out);
    }
    crate::dispatch_all!(t.dtype(), "index_select", |T| {
        let src_guard = t.read::<T>()?;
        let src = src_guard.view();
        let mut dst_guard = out.write::<T>()?;
        let mut dst = dst_guard.view_mut();
        if dim + 1 == shape.len() {
            ndarray::Zip::from(dst.lanes_mut(Axis(dim)))
                .and(src.lanes(Axis(dim)))
                .for_each(|mut d, s| {
                    for (o, &i) in d.iter_mut().zip(indices) {
                        *o = s[i];
                    }
                });
        } else {
            for (j, &i) in indices.iter().enumerate() {
                dst.index_axis_mut(Axis(dim), j)
                    .assign(&src.index_axis(Axis(dim), i));
            }
        }
        Ok::<(), crate::Error>(())
    })?;
    Ok(out)
}

/// `torch.cat`, including the legacy rule that skips 1-D empty tensors.
pub(crate) fn cat(ts: &[Tensor], dim: i64) -> R<Tensor> {
    let first = ts
        .first()
        .ok_or_else(|| invalid_argument("cat", "tensors", "must be a non-empty list", "[]"))?;
    let dtype = ts
        .iter()
        .skip(1)
        .fold(first.dtype(), |acc, t| promote_types(acc, t.dtype()));
    let skip = |t: &Tensor| t.dim() == 1 && t.shape()[0] == 0;
    let kept: Vec<&Tensor> = ts.iter().filter(|t| !skip(t)).collect();
    let Some(reference) = kept.first() else {
        return Ok(Tensor::zeros(&[0], dtype)?);
    };
    if reference.dim() == 0 {
        return Err(rank_mismatch(
            "cat",
            "each tensor",
            RankRequirement::AtLeast(1),
            reference.shape(),
        ));
    }
    let n = reference.dim();
    let d = wdim(dim, n)?;
    let mut out_shape: Shape = reference.shape().into();
    let mut total = 0usize;
    for (i, t) in kept.iter().enumerate() {
        if t.dim() != n {
            return Err(size_mismatch(
                "cat",
                format!("the number of dimensions of tensor {i}"),
                n as i64,
                t.dim() as i64,
            ));
        }
        for k in 0..n {
            if k != d && t.shape()[k] != out_shape[k] {
                return Err(size_mismatch(
                    "cat",
                    format!("the size of tensor {i} at dimension {k} (not the cat dimension {d})"),
                    out_shape[k] as i64,
                    t.shape()[k] as i64,
                ));
            }
        }
        total += t.shape()[d];
    }
    out_shape[d] = total;
    let out = Tensor::zeros(&out_shape, dtype)?;
    let mut start = 0i64;
    for t in kept {
        let len = t.shape()[d] as i64;
        if len > 0 {
            narrow(&out, d as i64, start, len)?.copy_from(t)?;
        }
        start += len;
    }
    Ok(out)
}

fn stack(ts: &[Tensor], dim: i64) -> R<Tensor> {
    let first = ts
        .first()
        .ok_or_else(|| invalid_argument("stack", "tensors", "must be a non-empty list", "[]"))?;
    let d = wdim(dim, first.dim() + 1)? as i64;
    for (i, t) in ts.iter().enumerate() {
        if t.shape() != first.shape() {
            return Err(shape_mismatch(
                "stack",
                format!("tensor {i} (as tensor 0)"),
                first.shape(),
                t.shape(),
            ));
        }
    }
    let us = ts.iter().map(|t| unsqueeze(t, d)).collect::<R<Vec<_>>>()?;
    cat(&us, d)
}

fn repeat(t: &Tensor, repeats: &[i64]) -> R<Tensor> {
    if repeats.len() < t.dim() {
        return Err(invalid_argument(
            "repeat",
            "repeats",
            format!(
                "must have at least {} entries (the tensor's dimensions)",
                t.dim()
            ),
            format!("{repeats:?}"),
        ));
    }
    let lead = repeats.len() - t.dim();
    // View the input as [1, s0, 1, s1, ...] expanded to [r0, s0, r1, s1, ...], then copy.
    let mut shape = Shape::new();
    let mut strides = Strides::new();
    let mut final_shape: Vec<i64> = Vec::with_capacity(repeats.len());
    for (i, &r) in repeats.iter().enumerate() {
        let r = non_negative("repeat", "repeats", r)?;
        let (s, st) = if i < lead {
            (1, 0)
        } else {
            (t.shape()[i - lead], t.strides()[i - lead])
        };
        shape.push(r);
        strides.push(0);
        shape.push(s);
        strides.push(st);
        final_shape.push(r.checked_mul(s).ok_or_else(|| {
            invalid_argument(
                "repeat",
                "repeats",
                "must give sizes that fit in memory",
                format!("{repeats:?}"),
            )
        })? as i64);
    }
    checked_numel(&shape)?;
    let expanded = t.as_strided(&shape, &strides, t.storage_offset())?;
    let out = expanded.deep_clone()?;
    view(&out, &final_shape)
}

fn tile(t: &Tensor, dims: &[i64]) -> R<Tensor> {
    let mut reps: Vec<i64> = vec![1; t.dim().saturating_sub(dims.len())];
    reps.extend_from_slice(dims);
    repeat(t, &reps)
}

/// The `output_size` check of repeat_interleave.
fn check_output_size(total: usize, output_size: Option<i64>) -> R<()> {
    match output_size {
        Some(o) if o != total as i64 => Err(size_mismatch(
            "repeat_interleave",
            "output_size (the sum of repeats)",
            total as i64,
            o,
        )),
        _ => Ok(()),
    }
}

/// `Ok` when `op`'s `argument` is a 1-D integer tensor.
fn check_integer_vector(op: &str, argument: &str, t: &Tensor) -> R<()> {
    check_rank(op, argument, RankRequirement::Exactly(1), t.shape())?;
    if !t.dtype().is_integral(false) {
        return Err(super::kernels::wrong_dtype(
            op,
            argument,
            "an integer tensor",
            t.dtype(),
        ));
    }
    Ok(())
}

/// `repeat_interleave(repeats)` on a 1-D repeats tensor: [0]*r0 + [1]*r1 + ...
fn repeat_indices(repeats: &Tensor, output_size: Option<i64>) -> R<Vec<usize>> {
    check_integer_vector("repeat_interleave", "repeats", repeats)?;
    let reps = repeats.to_vec::<i64>()?;
    if reps.iter().any(|&r| r < 0) {
        return Err(invalid_argument(
            "repeat_interleave",
            "repeats",
            "must be non-negative",
            format!("{reps:?}"),
        ));
    }
    let total: usize = reps.iter().map(|&r| r as usize).sum();
    check_output_size(total, output_size)?;
    let mut out = Vec::with_capacity(total);
    for (i, &r) in reps.iter().enumerate() {
        out.extend(std::iter::repeat_n(i, r as usize));
    }
    Ok(out)
}

fn repeat_interleave_self(
    t: &Tensor,
    repeats: &Tensor,
    dim: Option<i64>,
    output_size: Option<i64>,
) -> R<Tensor> {
    let (input, d) = match dim {
        None => (reshape(t, &[-1])?, 0usize),
        Some(d) => (t.clone(), wdim(d, t.dim())?),
    };
    let size = input.shape().get(d).copied().unwrap_or(1);
    let reps = if repeats.dim() == 0 || repeats.numel() == 1 && size != 1 {
        let r = repeats.to_vec::<i64>()?.first().copied().unwrap_or(0);
        Tensor::from_vec(vec![r; size], &[size])?
    } else {
        if repeats.numel() != size {
            return Err(size_mismatch(
                "repeat_interleave",
                format!("repeats.size(0) (input.size({d}))"),
                size as i64,
                repeats.numel() as i64,
            ));
        }
        reshape(repeats, &[-1])?
    };
    let idx = repeat_indices(&reps, output_size)?;
    if input.dim() == 0 {
        let flat = reshape(&input, &[1])?;
        return gather_dim(&flat, 0, &idx);
    }
    gather_dim(&input, d, &idx)
}

pub(crate) fn flip(t: &Tensor, dims: &[i64]) -> R<Tensor> {
    let n = t.dim();
    let mut ds = Vec::with_capacity(dims.len());
    for &d in dims {
        let d = wdim(d, n)?;
        if ds.contains(&d) {
            return Err(invalid_argument(
                "flip",
                "dims",
                format!("must not repeat dim {d}"),
                format!("{dims:?}"),
            ));
        }
        ds.push(d);
    }
    let out = Tensor::zeros(t.shape(), t.dtype())?;
    crate::dispatch_all!(t.dtype(), "flip", |T| {
        let v_guard = t.read::<T>()?;
        let mut v = v_guard.view();
        for &d in &ds {
            if d < v.ndim() {
                v.invert_axis(Axis(d));
            }
        }
        out.write::<T>()?.view_mut().assign(&v);
        Ok::<(), crate::Error>(())
    })?;
    Ok(out)
}

pub(crate) fn roll(t: &Tensor, shifts: &[i64], dims: &[i64]) -> R<Tensor> {
    if dims.is_empty() {
        check_size(
            "roll",
            "the number of shifts (without dims)",
            1,
            shifts.len() as i64,
        )?;
        let flat = reshape(t, &[-1])?;
        let rolled = roll(&flat, shifts, &[0])?;
        return view(&rolled, &usize_shape(t.shape()));
    }
    check_size(
        "roll",
        "the number of shifts (the number of dims)",
        dims.len() as i64,
        shifts.len() as i64,
    )?;
    let mut cur = t.clone();
    for (&s, &d) in shifts.iter().zip(dims) {
        let d = wdim(d, t.dim())?;
        let n = cur.shape()[d];
        if n == 0 {
            continue;
        }
        let shift = s.rem_euclid(n as i64) as usize;
        let idx: Vec<usize> = (0..n).map(|i| (i + n - shift) % n).collect();
        cur = gather_dim(&cur, d, &idx)?;
    }
    if cur.shares_storage(t) {
        cur = cur.deep_clone()?;
    }
    Ok(cur)
}

fn rot90(t: &Tensor, k: i64, dims: &[i64]) -> R<Tensor> {
    check_size("rot90", "the number of rotation dims", 2, dims.len() as i64)?;
    if t.dim() < 2 {
        return Err(rank_mismatch(
            "rot90",
            "self",
            RankRequirement::AtLeast(2),
            t.shape(),
        ));
    }
    let (d0, d1) = (wdim(dims[0], t.dim())?, wdim(dims[1], t.dim())?);
    if d0 == d1 {
        return Err(invalid_argument(
            "rot90",
            "dims",
            "must be two different dims",
            format!("[{d0}, {d1}]"),
        ));
    }
    let (d0, d1) = (d0 as i64, d1 as i64);
    match k.rem_euclid(4) {
        1 => transpose(&flip(t, &[d1])?, d0, d1),
        2 => flip(t, &[d0, d1]),
        3 => transpose(&flip(t, &[d0])?, d0, d1),
        _ => t.deep_clone(),
    }
}

/// The padded dims and their (before, after) amounts: `pad` lists the last dim first.
fn pad_pairs(t: &Tensor, pad: &[i64]) -> R<Vec<(usize, i64, i64)>> {
    if !pad.len().is_multiple_of(2) {
        return Err(invalid_argument(
            "pad",
            "pad",
            "must have an even length",
            format!("{pad:?}"),
        ));
    }
    let k = pad.len() / 2;
    if k > t.dim() {
        return Err(invalid_argument(
            "pad",
            "pad",
            format!(
                "must have at most {} entries (two per input dimension)",
                2 * t.dim()
            ),
            format!("{pad:?}"),
        ));
    }
    Ok((0..k)
        .map(|i| (t.dim() - 1 - i, pad[2 * i], pad[2 * i + 1]))
        .collect())
}

pub(crate) fn constant_pad(t: &Tensor, pad: &[i64], value: Scalar) -> R<Tensor> {
    let pairs = pad_pairs(t, pad)?;
    let mut out_shape: Shape = t.shape().into();
    for &(d, b, a) in &pairs {
        let s = t.shape()[d] as i64 + b + a;
        if s < 0 {
            return Err(invalid_argument(
                "pad",
                format!("padding of dimension {d}"),
                format!(
                    "must leave a non-negative size (the input size is {})",
                    t.shape()[d]
                ),
                format!("({b}, {a})"),
            ));
        }
        out_shape[d] = s as usize;
    }
    let out = Tensor::zeros(&out_shape, t.dtype())?;
    out.fill(value)?;
    // The overlap of input and output along each padded dim.
    let mut src = t.clone();
    let mut dst = out.clone();
    for &(d, b, a) in &pairs {
        let size = t.shape()[d] as i64;
        let src_start = (-b).max(0);
        let src_end = size - (-a).max(0);
        let len = src_end - src_start;
        if len <= 0 {
            return Ok(out);
        }
        src = narrow(&src, d as i64, src_start, len)?;
        dst = narrow(&dst, d as i64, b.max(0), len)?;
    }
    dst.copy_from(&src)?;
    Ok(out)
}

#[derive(Clone, Copy, PartialEq)]
enum PadMode {
    Reflect,
    Replicate,
    Circular,
}

fn index_pad(t: &Tensor, pad: &[i64], mode: PadMode) -> R<Tensor> {
    let pairs = pad_pairs(t, pad)?;
    let mut cur = t.clone();
    for &(d, b, a) in &pairs {
        let n = t.shape()[d] as i64;
        match mode {
            PadMode::Reflect if b >= n || a >= n => {
                return Err(invalid_argument(
                    "pad",
                    format!("padding of dimension {d}"),
                    format!(
                        "must be less than its size in input {:?} (reflect)",
                        t.shape()
                    ),
                    format!("({b}, {a})"),
                ))
            }
            PadMode::Circular if b > n || a > n => {
                return Err(invalid_argument(
                    "pad",
                    format!("padding of dimension {d}"),
                    format!("must be at most its size {n} (circular: no wrapping more than once)"),
                    format!("({b}, {a})"),
                ))
            }
            _ if n == 0 && (b > 0 || a > 0) => {
                return Err(invalid_argument(
                    "pad",
                    format!("padding of dimension {d}"),
                    "must be zero on an empty dimension",
                    format!("({b}, {a})"),
                ))
            }
            _ => {}
        }
        if n + b + a < 0 {
            return Err(invalid_argument(
                "pad",
                format!("padding of dimension {d}"),
                format!("must leave a non-negative size (the input size is {n})"),
                format!("({b}, {a})"),
            ));
        }
        let idx: Vec<usize> = (-b..n + a)
            .map(|i| {
                (match mode {
                    PadMode::Reflect => {
                        let r = if i < 0 { -i } else { i };
                        if r >= n {
                            2 * (n - 1) - r
                        } else {
                            r
                        }
                    }
                    PadMode::Replicate => i.clamp(0, n - 1),
                    PadMode::Circular => i.rem_euclid(n),
                }) as usize
            })
            .collect();
        cur = gather_dim(&cur, d, &idx)?;
    }
    if cur.shares_storage(t) {
        cur = cur.deep_clone()?;
    }
    Ok(cur)
}

fn pad_op(t: &Tensor, pad: &[i64], mode: &str, value: Option<f64>) -> R<Tensor> {
    let m = match mode {
        "constant" => {
            return constant_pad(t, pad, Scalar::Float(value.unwrap_or(0.0)));
        }
        "reflect" => PadMode::Reflect,
        "replicate" => PadMode::Replicate,
        "circular" => PadMode::Circular,
        other => {
            return Err(invalid_argument(
                "pad",
                "mode",
                "must be constant, reflect, replicate or circular",
                format!("'{other}'"),
            ))
        }
    };
    if value.is_some_and(|v| v != 0.0) {
        return Err(invalid_argument(
            "pad",
            "value",
            format!("must not be given with mode \"{mode}\""),
            value.unwrap_or(0.0),
        ));
    }
    index_pad(t, pad, m)
}

/// `tril` (`lower`) / `triu` over the last two dims.
fn tri(t: &Tensor, k: i64, lower: bool) -> R<Tensor> {
    if t.dim() < 2 {
        return Err(rank_mismatch(
            if lower { "tril" } else { "triu" },
            "self",
            RankRequirement::AtLeast(2),
            t.shape(),
        ));
    }
    let out = t.deep_clone()?;
    let n = t.dim();
    let (rows, cols) = (t.shape()[n - 2], t.shape()[n - 1]);
    if out.numel() == 0 {
        return Ok(out);
    }
    crate::dispatch_standard!(t.dtype(), "tril/triu", |T| {
        let mut data_guard = out.write::<T>()?;
        let data = data_guard
            .as_slice_mut()
            .ok_or_else(|| shape_err("fresh tensor is contiguous"))?;
        for mat in data.chunks_mut(rows * cols) {
            for (i, row) in mat.chunks_mut(cols).enumerate() {
                for (j, v) in row.iter_mut().enumerate() {
                    let above = j as i64 - i as i64 > k;
                    let below = (j as i64 - i as i64) < k;
                    if (lower && above) || (!lower && below) {
                        *v = T::default();
                    }
                }
            }
        }
        Ok::<(), crate::Error>(())
    })?;
    Ok(out)
}

pub(crate) fn diag(t: &Tensor, k: i64) -> R<Tensor> {
    match t.dim() {
        1 => {
            let n = t.shape()[0] + k.unsigned_abs() as usize;
            let out = Tensor::zeros(&[n, n], t.dtype())?;
            diagonal(&out, k, 0, 1)?.copy_from(t)?;
            Ok(out)
        }
        2 => diagonal(t, k, 0, 1)?.deep_clone(),
        _ => Err(rank_mismatch(
            "diag",
            "self",
            RankRequirement::OneOf(vec![1, 2]),
            t.shape(),
        )),
    }
}

fn diag_embed(t: &Tensor, offset: i64, dim1: i64, dim2: i64) -> R<Tensor> {
    let n = t.dim() + 1;
    let (d1, d2) = (wdim(dim1, n)?, wdim(dim2, n)?);
    if d1 == d2 {
        return Err(invalid_argument(
            "diagonal",
            "dim2",
            format!("must differ from dim1 ({dim1})"),
            dim2,
        ));
    }
    let last = *t.shape().last().ok_or_else(|| {
        rank_mismatch("diag_embed", "self", RankRequirement::AtLeast(1), t.shape())
    })?;
    let m = last + offset.unsigned_abs() as usize;
    let mut shape: Vec<usize> = t.shape()[..t.dim() - 1].to_vec();
    let (lo, hi) = if d1 < d2 { (d1, d2) } else { (d2, d1) };
    shape.insert(lo, m);
    shape.insert(hi, m);
    let out = Tensor::zeros(&shape, t.dtype())?;
    diagonal(&out, offset, d1 as i64, d2 as i64)?.copy_from(t)?;
    Ok(out)
}

fn cartesian_prod(ts: &[Tensor]) -> R<Tensor> {
    for t in ts {
        if t.dim() != 1 {
            return Err(rank_mismatch(
                "cartesian_prod",
                "each tensor",
                RankRequirement::Exactly(1),
                t.shape(),
            ));
        }
    }
    if ts.len() == 1 {
        return Ok(ts[0].clone());
    }
    let grids = meshgrid(ts, "ij")?;
    let flat = grids
        .iter()
        .map(|g| reshape(g, &[-1]))
        .collect::<R<Vec<_>>>()?;
    stack(&flat, 1)
}

// ---------------------------------------------------------------------------------------------
// In-place geometry: resize_ and set_ (the handle they return is the tensor after the change)
// ---------------------------------------------------------------------------------------------

/// c10's `MemoryFormat` codes for `resize_`'s restride: 0 contiguous, 2 channels_last (4-d),
/// 3 channels_last_3d (5-d); `preserve` (1) is refused as PyTorch refuses it.
fn restride(shape: &[usize], memory_format: i64) -> R<Strides> {
    let order: Vec<usize> = match (memory_format, shape.len()) {
        (0, _) => return Ok(contiguous_strides(shape)),
        (2, 4) => vec![1, 3, 2, 0],
        (3, 5) => vec![1, 4, 3, 2, 0],
        // channels_last needs 4 dims, channels_last_3d 5
        (f @ (2 | 3), _) => {
            let format = if f == 2 {
                "channels_last"
            } else {
                "channels_last_3d"
            };
            return Err(rank_mismatch(
                "resize_",
                format!("size ({format})"),
                RankRequirement::Exactly(f as usize + 2),
                shape,
            ));
        }
        (1, _) => {
            return Err(invalid_argument(
                "resize_",
                "memory_format",
                "must not be preserve",
                "preserve",
            ))
        }
        (f, _) => {
            return Err(invalid_argument(
                "resize_",
                "memory_format",
                "must be a memory format code (0 to 3)",
                f,
            ))
        }
    };
    let mut strides: Strides = shape.iter().map(|_| 0).collect();
    let mut step = 1isize;
    for d in order {
        strides[d] = step;
        step = step.saturating_mul(shape[d].max(1) as isize);
    }
    Ok(strides)
}

/// `self.resize_(size, memory_format=...)`: the same geometry when `size` is the current shape
/// and no memory format is given, else `size` with contiguous (or the format's) strides at the
/// same storage offset. A storage too small is grown, its elements kept and the new ones zero
/// (uninitialized in PyTorch); PyTorch grows the storage every view of it shares, so a storage
/// another tensor holds is refused rather than silently copied.
pub(crate) fn resize_handle(x: Tensor, size: &[i64], memory_format: Option<i64>) -> R<Tensor> {
    if x.sparse_parts().is_some() {
        return Err(unsupported_feature("resize_", "a sparse tensor"));
    }
    let shape = size
        .iter()
        .map(|&d| non_negative("resize_", "size", d))
        .collect::<R<Vec<usize>>>()?;
    if memory_format.is_none() && x.shape() == shape.as_slice() {
        return Ok(x);
    }
    let strides = restride(&shape, memory_format.unwrap_or(0))?;
    let numel = checked_numel(&shape)?;
    let item = x.dtype().size();
    let need = x
        .storage_offset()
        .checked_add(numel)
        .and_then(|n| n.checked_mul(item))
        .ok_or_else(|| {
            invalid_argument(
                "resize_",
                "size",
                "must give a storage size that fits in memory",
                format!("{size:?}"),
            )
        })?;
    if numel == 0 || need <= x.storage().nbytes() {
        return Ok(x.as_strided(&shape, &strides, x.storage_offset())?);
    }
    if x.is_quantized() {
        return Err(unsupported_feature(
            "resize_",
            "growing a quantized tensor's storage",
        ));
    }
    if !x.storage().is_exclusive() {
        return Err(unsupported_feature(
            "resize_",
            format!(
                "growing to {size:?} a storage other tensors share (PyTorch grows it for all of them)"
            ),
        ));
    }
    crate::tensor::budget::check_alloc(need)?;
    let mut bytes = x
        .storage()
        .read()
        .map_err(crate::tensor::TensorError::from)?
        .to_vec();
    bytes.resize(need, 0);
    let grown =
        crate::tensor::Storage::from_bytes(&bytes).map_err(crate::tensor::TensorError::from)?;
    let mut out = Tensor::from_parts(grown, x.storage_offset(), &shape, &strides, x.dtype())?;
    out.set_requires_grad(x.requires_grad());
    Ok(out)
}

/// `self`, moved out of the arguments: no clone holds its storage, so `resize_` can tell
/// whether other tensors share it.
fn owned_self(a: &mut Args<'_>) -> R<Tensor> {
    a.tensor(0)?;
    match a.take(0)? {
        IValue::Tensor(t) => Ok(t),
        other => Err(invalid_argument(
            "resize_",
            "self",
            "must be a Tensor",
            other.kind_name(),
        )),
    }
}

/// The result of an in-place geometry op: also left in argument `self`'s slot, which holds
/// what PyTorch's `self` is after the call. (The interpreter's registers keep their handles:
/// plan building makes later code read the result, see `ir::passes::inplace_geometry`.)
pub(crate) fn reshaped_self(a: &mut Args<'_>, result: IValue) -> R<IValue> {
    match a.values.first_mut() {
        Some(slot) => *slot = result.clone(),
        None => return Err(value_err("an in-place op without its self argument")),
    }
    Ok(result)
}

/// The kernel of an in-place geometry op from `f`, which computes `self` after the op.
macro_rules! in_place {
    ($f:expr) => {
        |a| {
            let out = ($f)(a)?;
            $crate::ops::shape::reshaped_self(a, out.into())
        }
    };
}
pub(crate) use in_place;

fn resize_(a: &mut Args<'_>) -> R<IValue> {
    let size = a.int_list(1)?;
    let format = a.opt_int(2)?;
    let out = resize_handle(owned_self(a)?, &size, format)?;
    reshaped_self(a, out.into())
}

/// `resize_as_(self, the_template, memory_format=...)`: `resize_` to the template's shape;
/// `preserve` takes the template's suggested format.
fn resize_as_(a: &mut Args<'_>) -> R<IValue> {
    let template = a.tensor(1)?;
    let size = usize_shape(template.shape());
    let format = match a.opt_int(2)? {
        Some(1) => Some(suggest_memory_format(&template)),
        other => other,
    };
    let out = resize_handle(owned_self(a)?, &size, format)?;
    reshaped_self(a, out.into())
}

/// c10's `suggest_memory_format`: channels_last (2) or channels_last_3d (3) when the strides
/// are like it, else contiguous (0).
fn suggest_memory_format(t: &Tensor) -> i64 {
    use super::tensor_queries::strides_like_channels_last as like;
    match t.dim() {
        4 if like(t.shape(), t.strides(), &[1, 3, 2, 0]) => 2,
        5 if like(t.shape(), t.strides(), &[1, 4, 3, 2, 0]) => 3,
        _ => 0,
    }
}

/// The tensor `set_` makes of `self` over `storage`: `self`'s dtype, the given geometry
/// (contiguous strides for an empty `stride`), `self`'s requires_grad.
fn set_storage(
    x: &Tensor,
    storage: crate::tensor::Storage,
    offset: i64,
    size: &[i64],
    stride: &[i64],
) -> R<Tensor> {
    if x.sparse_parts().is_some() || x.is_quantized() {
        return Err(unsupported_feature("set_", "a sparse or quantized tensor"));
    }
    let shape = size
        .iter()
        .map(|&d| non_negative("set_", "size", d))
        .collect::<R<Vec<usize>>>()?;
    let strides: Strides = if stride.is_empty() {
        contiguous_strides(&shape)
    } else if stride.len() == shape.len() {
        stride
            .iter()
            .map(|&s| non_negative("set_", "stride", s).map(|s| s as isize))
            .collect::<R<Strides>>()?
    } else {
        return Err(size_mismatch(
            "set_",
            "the length of stride (the length of size)",
            shape.len() as i64,
            stride.len() as i64,
        ));
    };
    let offset = non_negative("set_", "storage_offset", offset)?;
    let mut out = Tensor::from_parts(storage, offset, &shape, &strides, x.dtype())?;
    out.set_requires_grad(x.requires_grad());
    Ok(out)
}

/// `set_(self)` / `set(self)`: an empty tensor of `self`'s dtype (shape `[0]`) over a new
/// empty storage.
fn set_empty(a: &mut Args<'_>) -> R<Tensor> {
    let x = a.tensor(0)?;
    let empty = crate::tensor::Storage::zeroed(0).map_err(crate::tensor::TensorError::from)?;
    set_storage(&x, empty, 0, &[0], &[])
}

/// `set_(self, source)` / `set(self, source)`: `source`'s storage, offset, shape and strides,
/// read as `self`'s dtype (the operator does not check that the dtypes agree: the Python
/// method does).
fn set_source_tensor(a: &mut Args<'_>) -> R<Tensor> {
    let (x, source) = (a.tensor(0)?, a.tensor(1)?);
    let size = usize_shape(source.shape());
    let stride: Vec<i64> = source.strides().iter().map(|&s| s as i64).collect();
    let offset = source.storage_offset() as i64;
    set_storage(&x, source.storage().clone(), offset, &size, &stride)
}

/// `set_(self, source, storage_offset, size, stride)`: `source`'s storage, the offset counted
/// from `source`'s own; `source` must be contiguous.
fn set_source_tensor_offset(a: &mut Args<'_>) -> R<Tensor> {
    let (x, source) = (a.tensor(0)?, a.tensor(1)?);
    if !source.is_contiguous() {
        return Err(invalid_argument(
            "set_",
            "source",
            "must be contiguous",
            format!(
                "a tensor of shape {:?} and strides {:?}",
                source.shape(),
                source.strides()
            ),
        ));
    }
    let offset = a
        .int(2)?
        .checked_add(source.storage_offset() as i64)
        .ok_or_else(|| {
            invalid_argument(
                "set_",
                "storage_offset",
                "must fit in int64 after adding source's offset",
                format!("{} + {}", a.int(2).unwrap_or(0), source.storage_offset()),
            )
        })?;
    let out = set_storage(
        &x,
        source.storage().clone(),
        offset,
        &a.int_list(3)?,
        &a.int_list(4)?,
    )?;
    Ok(out)
}

fn storage_arg(a: &Args<'_>, i: usize) -> R<crate::tensor::Storage> {
    match a.get(i)? {
        IValue::Storage(s) => Ok(s.clone()),
        other => Err(invalid_argument(
            "set_",
            format!("argument {i}"),
            "must be a Storage",
            other.kind_name(),
        )),
    }
}

/// `set_(self, storage)`: the whole storage as a 1-d tensor of `self`'s dtype.
fn set_source_storage(a: &mut Args<'_>) -> R<Tensor> {
    let x = a.tensor(0)?;
    let storage = storage_arg(a, 1)?;
    let n = (storage.nbytes() / x.dtype().size().max(1)) as i64;
    set_storage(&x, storage, 0, &[n], &[])
}

/// `set_(self, storage, storage_offset, size, stride)`.
fn set_source_storage_offset(a: &mut Args<'_>) -> R<Tensor> {
    let x = a.tensor(0)?;
    let storage = storage_arg(a, 1)?;
    let out = set_storage(&x, storage, a.int(2)?, &a.int_list(3)?, &a.int_list(4)?)?;
    Ok(out)
}

/// `self` made `source`'s storage, geometry and dtype, keeping its requires_grad.
fn shallow_copy_data(a: &mut Args<'_>) -> R<Tensor> {
    let (x, source) = (a.tensor(0)?, a.tensor(1)?);
    let mut out = source.as_strided(source.shape(), source.strides(), source.storage_offset())?;
    out.set_requires_grad(x.requires_grad());
    Ok(out)
}

fn register_inplace_geometry(r: &mut Registry) {
    r.add(
        "aten::unsqueeze_",
        in_place!(|a: &mut Args<'_>| unsqueeze(&a.tensor(0)?, a.int(1)?)),
    );
    r.add(
        "aten::squeeze_",
        in_place!(|a: &mut Args<'_>| squeeze_all(&a.tensor(0)?)),
    );
    r.add(
        "aten::squeeze_.dim",
        in_place!(|a: &mut Args<'_>| squeeze_list(&a.tensor(0)?, &[a.int(1)?])),
    );
    r.add(
        "aten::squeeze_.dims",
        in_place!(|a: &mut Args<'_>| squeeze_list(&a.tensor(0)?, &a.int_list(1)?)),
    );
    r.add(
        "aten::t_",
        in_place!(|a: &mut Args<'_>| t_op(&a.tensor(0)?)),
    );
    r.add_all(
        &["aten::transpose_", "aten::swapaxes_", "aten::swapdims_"],
        in_place!(|a: &mut Args<'_>| transpose(&a.tensor(0)?, a.int(1)?, a.int(2)?)),
    );
    r.add(
        "aten::as_strided_",
        in_place!(|a: &mut Args<'_>| as_strided_op(
            &a.tensor(0)?,
            &a.int_list(1)?,
            &a.int_list(2)?,
            a.opt_int(3)?
        )),
    );
    r.add("aten::resize_", resize_);
    // the primitive `resize_` decomposes to (no memory format)
    r.add(
        "prims::resize",
        in_place!(|a: &mut Args<'_>| {
            let size = a.int_list(1)?;
            resize_handle(owned_self(a)?, &size, None)
        }),
    );
    r.add("aten::resize_as_", resize_as_);
    r.add("aten::shallow_copy_data_", in_place!(shallow_copy_data));
    // the same without a result (plan building calls `shallow_copy_data_` in its place)
    r.add("aten::set_data", |a| {
        let out = shallow_copy_data(a)?;
        reshaped_self(a, out.into())?;
        Ok(IValue::None)
    });
    r.add("aten::set_", in_place!(set_empty));
    r.add("aten::set", |a| Ok(set_empty(a)?.into()));
    r.add("aten::set_.source_Tensor", in_place!(set_source_tensor));
    r.add("aten::set.source_Tensor", |a| {
        Ok(set_source_tensor(a)?.into())
    });
    r.add(
        "aten::set_.source_Tensor_storage_offset",
        in_place!(set_source_tensor_offset),
    );
    r.add("aten::set_.source_Storage", in_place!(set_source_storage));
    r.add("aten::set.source_Storage", |a| {
        Ok(set_source_storage(a)?.into())
    });
    r.add(
        "aten::set_.source_Storage_storage_offset",
        in_place!(set_source_storage_offset),
    );
    r.add("aten::set.source_Storage_storage_offset", |a| {
        Ok(set_source_storage_offset(a)?.into())
    });
}

// ---------------------------------------------------------------------------------------------
// Registration
// ---------------------------------------------------------------------------------------------

/// A copy of `t` laid out in `format` (c10's codes: 0 contiguous, 2 channels_last, 3
/// channels_last_3d), or `t` itself when it already is.
pub(crate) fn contiguous_in_format(t: &Tensor, format: i64) -> R<Tensor> {
    if contiguous_as(t, format)? {
        return Ok(t.clone());
    }
    if format == 0 {
        return t.contiguous();
    }
    // refuses a rank the format does not fit, with PyTorch's message
    restride(t.shape(), format)?;
    // the channels-last order is row-major in (N, spatial..., C): copy in that order, view back
    let nd = t.dim() as i64;
    let last: Vec<i64> = std::iter::once(0)
        .chain(2..nd)
        .chain(std::iter::once(1))
        .collect();
    let back: Vec<i64> = std::iter::once(0)
        .chain(std::iter::once(nd - 1))
        .chain(1..nd - 1)
        .collect();
    permute(&permute(t, &last)?.contiguous()?, &back)
}

/// `is_contiguous(memory_format=...)`: c10's `MemoryFormat` codes 0 (contiguous), 2
/// (channels_last, 4-d: strides dense in N, H, W, C order) and 3 (channels_last_3d, 5-d);
/// `preserve` (1) is refused as PyTorch refuses it.
fn contiguous_as(t: &Tensor, format: i64) -> R<bool> {
    let order: &[usize] = match format {
        0 => return Ok(t.is_contiguous()),
        2 if t.dim() == 4 => &[1, 3, 2, 0],
        3 if t.dim() == 5 => &[1, 4, 3, 2, 0],
        2 | 3 => return Ok(false),
        1 => {
            return Err(invalid_argument(
                "is_contiguous",
                "memory_format",
                "must be a contiguity layout, not preserve",
                "preserve",
            ))
        }
        f => {
            return Err(invalid_argument(
                "is_contiguous",
                "memory_format",
                "must be a memory format code (0 to 3)",
                f,
            ))
        }
    };
    let mut expected: isize = 1;
    for &d in order {
        let size = t.shape()[d];
        if size != 1 {
            if t.strides()[d] != expected {
                return Ok(false);
            }
            expected *= size as isize;
        }
    }
    Ok(true)
}

/// `sum_to_size(size)`: sums over the leading dims `size` lacks and the dims it has as 1,
/// so the result has `size` (which `self` must broadcast to).
fn sum_to_size(t: &Tensor, size: &[i64]) -> crate::Result<Tensor> {
    let nd = t.dim();
    let shape: Vec<usize> = size
        .iter()
        .map(|&s| non_negative("sum_to_size", "size", s))
        .collect::<R<_>>()?;
    let expandable = shape.len() <= nd
        && shape
            .iter()
            .zip(&t.shape()[nd - shape.len()..])
            .all(|(&want, &have)| want == have || want == 1);
    if !expandable {
        return Err(invalid_argument(
            "sum_to_size",
            "size",
            format!("must be a shape that expands to {:?}", t.shape()),
            format!("{size:?}"),
        ));
    }
    if t.shape() == shape.as_slice() {
        return Ok(t.clone());
    }
    let lead = nd - shape.len();
    let dims: Vec<i64> = (0..nd)
        .filter(|&d| d < lead || (shape[d - lead] == 1 && t.shape()[d] != 1))
        .map(|d| d as i64)
        .collect();
    let summed = crate::ops::reduce::sum_op(t, Some(&dims), true, None, false)?;
    reshape(&summed, size)
}

fn tlist(a: &Args<'_>, i: usize) -> R<Vec<Tensor>> {
    a.tensor_list(i)
}

/// `mT` (and, with `conjugate`, `mH` / `adjoint`): the last two dims swapped.
fn matrix_transpose(a: &mut Args, conjugate: bool) -> crate::Result<IValue> {
    let t = a.tensor(0)?;
    if t.dim() < 2 {
        return Err(rank_mismatch(
            "mT",
            "self",
            RankRequirement::AtLeast(2),
            t.shape(),
        ));
    }
    if t.dtype().is_complex() && conjugate {
        return Err(unsupported_feature(a.op, "conjugation of complex tensors"));
    }
    Ok(transpose(&t, -2, -1)?.into())
}

pub(crate) fn register(r: &mut Registry) {
    register_inplace_geometry(r);
    // views
    r.add("aten::view", |a| {
        Ok(view(&a.tensor(0)?, &a.int_list(1)?)?.into())
    });
    r.add("aten::view.dtype", |a| {
        Ok(view_dtype(&a.tensor(0)?, a.dtype(1)?)?.into())
    });
    r.add_all(&["aten::reshape", "aten::_reshape_alias"], |a| {
        Ok(reshape(&a.tensor(0)?, &a.int_list(1)?)?.into())
    });
    // the `_copy` twins own their storage
    r.add("aten::_reshape_copy", |a| {
        Ok(reshape(&a.tensor(0)?, &a.int_list(1)?)?
            .deep_clone()?
            .into())
    });
    r.add("aten::_reshape_alias_copy", |a| {
        Ok(
            as_strided_op(&a.tensor(0)?, &a.int_list(1)?, &a.int_list(2)?, None)?
                .deep_clone()?
                .into(),
        )
    });
    // `_reshape_from_tensor(self, shape)`: the sizes read from a 1-d integer tensor
    r.add("aten::_reshape_from_tensor", |a| {
        let shape = a.tensor(1)?;
        check_integer_vector("_reshape_from_tensor", "shape", &shape)?;
        Ok(reshape(&a.tensor(0)?, &shape.to_vec::<i64>()?)?.into())
    });
    r.add("aten::_unsafe_view", |a| {
        Ok(reshape(&a.tensor(0)?, &a.int_list(1)?)?.into())
    });
    r.add("aten::view_as", |a| {
        let other = a.tensor(1)?;
        Ok(view(&a.tensor(0)?, &usize_shape(other.shape()))?.into())
    });
    r.add("aten::reshape_as", |a| {
        let other = a.tensor(1)?;
        Ok(reshape(&a.tensor(0)?, &usize_shape(other.shape()))?.into())
    });
    r.add("aten::ravel", |a| Ok(reshape(&a.tensor(0)?, &[-1])?.into()));
    r.add("aten::permute", |a| {
        Ok(permute(&a.tensor(0)?, &a.int_list(1)?)?.into())
    });
    r.add_all(
        &["aten::transpose.int", "aten::swapaxes", "aten::swapdims"],
        |a| Ok(transpose(&a.tensor(0)?, a.int(1)?, a.int(2)?)?.into()),
    );
    r.add("aten::t", |a| Ok(t_op(&a.tensor(0)?)?.into()));
    r.add_overloads("aten::numpy_T", &["", "a"], |a| {
        let t = a.tensor(0)?;
        let dims: Vec<i64> = (0..t.dim() as i64).rev().collect();
        Ok(permute(&t, &dims)?.into())
    });
    // `.a` overloads: the attribute spellings (`x.mT`), same arguments; `mH` / `adjoint`
    // conjugate, which tsrun does not do for complex tensors
    r.add_all(&["aten::mT", "aten::mT.a"], |a| matrix_transpose(a, false));
    r.add_all(
        &[
            "aten::adjoint",
            "aten::mH",
            "aten::mH.a",
            "aten::matrix_H",
            "aten::matrix_H.a",
        ],
        |a| matrix_transpose(a, true),
    );
    r.add("aten::expand", |a| {
        Ok(expand(&a.tensor(0)?, &a.int_list(1)?)?.into())
    });
    r.add("aten::broadcast_to", |a| {
        Ok(expand(&a.tensor(0)?, &a.int_list(1)?)?.into())
    });
    r.add("aten::expand_as", |a| {
        let other = a.tensor(1)?;
        Ok(expand(&a.tensor(0)?, &usize_shape(other.shape()))?.into())
    });
    r.add("aten::squeeze", |a| Ok(squeeze_all(&a.tensor(0)?)?.into()));
    r.add("aten::squeeze.dim", |a| {
        Ok(squeeze_list(&a.tensor(0)?, &[a.int(1)?])?.into())
    });
    r.add("aten::squeeze.dims", |a| {
        Ok(squeeze_list(&a.tensor(0)?, &a.int_list(1)?)?.into())
    });
    r.add("aten::unsqueeze", |a| {
        Ok(unsqueeze(&a.tensor(0)?, a.int(1)?)?.into())
    });
    r.add("aten::flatten.using_ints", |a| {
        Ok(flatten(&a.tensor(0)?, a.int(1)?, a.int(2)?)?.into())
    });
    r.add("aten::unflatten.int", |a| {
        Ok(unflatten(&a.tensor(0)?, a.int(1)?, &a.int_list(2)?)?.into())
    });
    r.add("aten::narrow", |a| {
        Ok(narrow(&a.tensor(0)?, a.int(1)?, a.int(2)?, a.int(3)?)?.into())
    });
    r.add("aten::narrow.Tensor", |a| {
        let start = a.tensor(2)?.item()?.to_i64();
        Ok(narrow(&a.tensor(0)?, a.int(1)?, start, a.int(3)?)?.into())
    });
    r.add("aten::select.int", |a| {
        Ok(select(&a.tensor(0)?, a.int(1)?, a.int(2)?)?.into())
    });
    r.add("aten::slice.Tensor", |a| {
        Ok(slice(
            &a.tensor(0)?,
            a.int(1)?,
            a.opt_int(2)?,
            a.opt_int(3)?,
            a.int(4)?,
        )?
        .into())
    });
    // `linalg_diagonal(A, *, offset, dim1=-2, dim2=-1)`: the same view, other defaults
    r.add_all(&["aten::diagonal", "aten::linalg_diagonal"], |a| {
        Ok(diagonal(&a.tensor(0)?, a.int(1)?, a.int(2)?, a.int(3)?)?.into())
    });
    r.add_all(&["aten::movedim.int", "aten::moveaxis.int"], |a| {
        Ok(movedim(&a.tensor(0)?, &[a.int(1)?], &[a.int(2)?])?.into())
    });
    r.add_all(&["aten::movedim.intlist", "aten::moveaxis.intlist"], |a| {
        Ok(movedim(&a.tensor(0)?, &a.int_list(1)?, &a.int_list(2)?)?.into())
    });
    r.add("aten::as_strided", |a| {
        Ok(as_strided_op(
            &a.tensor(0)?,
            &a.int_list(1)?,
            &a.int_list(2)?,
            a.opt_int(3)?,
        )?
        .into())
    });
    r.add("aten::unfold", |a| {
        Ok(unfold(&a.tensor(0)?, a.int(1)?, a.int(2)?, a.int(3)?)?.into())
    });
    r.add_all(
        &[
            "aten::split.Tensor",
            "aten::split",
            "aten::unsafe_split.Tensor",
        ],
        |a| match a.get(1)? {
            IValue::List(_) => Ok(tensor_list(split_with_sizes(
                &a.tensor(0)?,
                &a.int_list(1)?,
                a.int(2)?,
            )?)),
            _ => Ok(tensor_list(split(&a.tensor(0)?, a.int(1)?, a.int(2)?)?)),
        },
    );
    r.add_all(
        &[
            "aten::split_with_sizes",
            "aten::split.sizes",
            "aten::unsafe_split_with_sizes",
        ],
        |a| {
            Ok(tensor_list(split_with_sizes(
                &a.tensor(0)?,
                &a.int_list(1)?,
                a.int(2)?,
            )?))
        },
    );
    r.add_all(&["aten::chunk", "aten::unsafe_chunk"], |a| {
        Ok(tensor_list(chunk(&a.tensor(0)?, a.int(1)?, a.int(2)?)?))
    });
    r.add("aten::unbind.int", |a| {
        Ok(tensor_list(unbind(&a.tensor(0)?, a.int(1)?)?))
    });
    r.add("aten::tensor_split.sections", |a| {
        Ok(tensor_list(tensor_split_sections(
            &a.tensor(0)?,
            a.int(1)?,
            a.int(2)?,
        )?))
    });
    r.add("aten::tensor_split.indices", |a| {
        Ok(tensor_list(tensor_split_indices(
            &a.tensor(0)?,
            &a.int_list(1)?,
            a.int(2)?,
        )?))
    });
    r.add("aten::tensor_split.tensor_indices_or_sections", |a| {
        Ok(tensor_list(tensor_split_tensor(
            &a.tensor(0)?,
            &a.tensor(1)?,
            a.int(2)?,
        )?))
    });
    // one kernel per overload: which split (the dim and the error's name) is fixed here
    r.add("aten::hsplit.int", |a| split_axis_int(a, "hsplit"));
    r.add("aten::vsplit.int", |a| split_axis_int(a, "vsplit"));
    r.add("aten::dsplit.int", |a| split_axis_int(a, "dsplit"));
    r.add("aten::hsplit.array", |a| split_axis_array(a, "hsplit"));
    r.add("aten::vsplit.array", |a| split_axis_array(a, "vsplit"));
    r.add("aten::dsplit.array", |a| split_axis_array(a, "dsplit"));
    r.add(
        "aten::atleast_1d",
        |a| Ok(atleast(&a.tensor(0)?, 1)?.into()),
    );
    r.add(
        "aten::atleast_2d",
        |a| Ok(atleast(&a.tensor(0)?, 2)?.into()),
    );
    r.add(
        "aten::atleast_3d",
        |a| Ok(atleast(&a.tensor(0)?, 3)?.into()),
    );
    r.add("aten::atleast_1d.Sequence", |a| {
        Ok(tensor_list(
            tlist(a, 0)?
                .iter()
                .map(|t| atleast(t, 1))
                .collect::<R<_>>()?,
        ))
    });
    r.add("aten::atleast_2d.Sequence", |a| {
        Ok(tensor_list(
            tlist(a, 0)?
                .iter()
                .map(|t| atleast(t, 2))
                .collect::<R<_>>()?,
        ))
    });
    r.add("aten::atleast_3d.Sequence", |a| {
        Ok(tensor_list(
            tlist(a, 0)?
                .iter()
                .map(|t| atleast(t, 3))
                .collect::<R<_>>()?,
        ))
    });
    r.add("aten::broadcast_tensors", |a| {
        Ok(tensor_list(broadcast_all(&tlist(a, 0)?)?))
    });
    r.add("aten::meshgrid", |a| {
        Ok(tensor_list(meshgrid(&tlist(a, 0)?, "ij")?))
    });
    r.add("aten::meshgrid.indexing", |a| {
        Ok(tensor_list(meshgrid(&tlist(a, 0)?, &a.str(1)?)?))
    });

    // queries
    r.add("aten::size", |a| {
        let t = a.any_layout_tensor(0)?;
        if t.is_nested() {
            return Err(value_err(
                "Internal error: NestedTensorImpl doesn't support sizes. Please file an issue.",
            ));
        }
        Ok(int_list_value(t.shape().iter().map(|&s| s as i64)))
    });
    r.add("aten::size.int", |a| {
        let t = a.any_layout_tensor(0)?;
        Ok(IValue::Int(t.size(a.int(1)?)? as i64))
    });
    r.add("aten::stride", |a| {
        Ok(int_list_value(
            a.tensor(0)?.strides().iter().map(|&s| s as i64),
        ))
    });
    r.add("aten::stride.int", |a| {
        let t = a.tensor(0)?;
        let d = wdim(a.int(1)?, t.dim())?;
        Ok(IValue::Int(t.strides().get(d).copied().unwrap_or(1) as i64))
    });
    r.add("aten::storage_offset", |a| {
        Ok(IValue::Int(a.tensor(0)?.storage_offset() as i64))
    });
    r.add("aten::dim", |a| {
        Ok(IValue::Int(a.any_layout_tensor(0)?.dim() as i64))
    });
    r.add("aten::numel", |a| {
        let t = a.any_layout_tensor(0)?;
        let n = t.nested_parts().map_or(t.numel(), |p| p.numel());
        Ok(IValue::Int(n as i64))
    });
    r.add("aten::is_contiguous", |a| {
        Ok(IValue::Bool(a.tensor(0)?.is_contiguous()))
    });
    r.add_all(
        &[
            "aten::is_contiguous.memory_format",
            "aten::sym_is_contiguous",
        ],
        |a| Ok(IValue::Bool(contiguous_as(&a.tensor(0)?, a.int(1)?)?)),
    );
    r.add("aten::is_non_overlapping_and_dense", |a| {
        Ok(IValue::Bool(a.tensor(0)?.is_non_overlapping_and_dense()))
    });
    r.add("aten::sym_storage_offset", |a| {
        Ok(IValue::Int(a.tensor(0)?.storage_offset() as i64))
    });
    r.add("aten::sym_stride", |a| {
        Ok(int_list_value(
            a.tensor(0)?.strides().iter().map(|&s| s as i64),
        ))
    });
    r.add("aten::sym_stride.int", |a| {
        let t = a.tensor(0)?;
        let d = wdim(a.int(1)?, t.dim())?;
        Ok(IValue::Int(t.strides().get(d).copied().unwrap_or(1) as i64))
    });
    // `_shape_as_tensor(self)`: the sizes as an int64 vector
    r.add("aten::_shape_as_tensor", |a| {
        let t = a.tensor(0)?;
        let dims: Vec<i64> = t.shape().iter().map(|&d| d as i64).collect();
        Ok(Tensor::from_vec(dims, &[t.dim()])?.into())
    });
    // `_dim_arange(like, dim)`: arange(like.size(dim)) as int64
    r.add("aten::_dim_arange", |a| {
        let t = a.tensor(0)?;
        let n = t.size(a.int(1)?)?;
        Ok(Tensor::from_vec((0..n as i64).collect::<Vec<_>>(), &[n])?.into())
    });
    // `_infer_size(a, b)`: the broadcast shape of two size lists
    r.add("aten::_infer_size", |a| {
        let (x, y) = (a.int_list(0)?, a.int_list(1)?);
        let to_sizes = |v: &[i64]| -> R<Vec<usize>> {
            v.iter()
                .map(|&d| non_negative("_infer_size", "size", d))
                .collect()
        };
        let shape = crate::tensor::broadcast_shapes(&to_sizes(&x)?, &to_sizes(&y)?)?;
        Ok(int_list_value(shape.iter().map(|&d| d as i64)))
    });
    r.add("aten::sum_to_size", |a| {
        Ok(sum_to_size(&a.tensor(0)?, &a.int_list(1)?)?.into())
    });
    r.add("aten::is_floating_point", |a| {
        Ok(IValue::Bool(
            a.any_layout_tensor(0)?.dtype().is_floating_point(),
        ))
    });
    r.add("aten::is_complex", |a| {
        Ok(IValue::Bool(a.any_layout_tensor(0)?.dtype().is_complex()))
    });
    r.add("aten::is_signed", |a| {
        Ok(IValue::Bool(a.any_layout_tensor(0)?.dtype().is_signed()))
    });
    // tsrun tensors are never lazily conjugated/negated and never track gradients
    r.add_all(
        &["aten::is_conj", "aten::is_neg", "aten::is_inference"],
        |a| {
            a.any_layout_tensor(0)?;
            Ok(IValue::Bool(false))
        },
    );
    r.add("aten::is_leaf", |a| {
        a.any_layout_tensor(0)?;
        Ok(IValue::Bool(true))
    });

    // copies
    r.add_all(&["aten::cat", "aten::concat", "aten::concatenate"], |a| {
        Ok(cat(&tlist(a, 0)?, a.int(1)?)?.into())
    });
    r.add_all(&["aten::stack", "aten::_stack"], |a| {
        Ok(stack(&tlist(a, 0)?, a.int(1)?)?.into())
    });
    r.add("aten::hstack", |a| {
        let ts = tlist(a, 0)?
            .iter()
            .map(|t| atleast(t, 1))
            .collect::<R<Vec<_>>>()?;
        let d = if ts.first().is_some_and(|t| t.dim() == 1) {
            0
        } else {
            1
        };
        Ok(cat(&ts, d)?.into())
    });
    r.add_all(&["aten::vstack", "aten::row_stack"], |a| {
        let ts = tlist(a, 0)?
            .iter()
            .map(|t| atleast(t, 2))
            .collect::<R<Vec<_>>>()?;
        Ok(cat(&ts, 0)?.into())
    });
    r.add("aten::dstack", |a| {
        let ts = tlist(a, 0)?
            .iter()
            .map(|t| atleast(t, 3))
            .collect::<R<Vec<_>>>()?;
        Ok(cat(&ts, 2)?.into())
    });
    r.add("aten::column_stack", |a| {
        let ts = tlist(a, 0)?
            .iter()
            .map(|t| {
                if t.dim() <= 1 {
                    reshape(t, &[t.numel() as i64, 1])
                } else {
                    Ok(t.clone())
                }
            })
            .collect::<R<Vec<_>>>()?;
        Ok(cat(&ts, 1)?.into())
    });
    r.add("aten::repeat", |a| {
        Ok(repeat(&a.tensor(0)?, &a.int_list(1)?)?.into())
    });
    r.add("aten::tile", |a| {
        Ok(tile(&a.tensor(0)?, &a.int_list(1)?)?.into())
    });
    r.add("aten::repeat_interleave.Tensor", |a| {
        let idx = repeat_indices(&a.tensor(0)?, a.opt_int(1)?)?;
        let v: Vec<i64> = idx.iter().map(|&i| i as i64).collect();
        let n = v.len();
        Ok(Tensor::from_vec(v, &[n])?.into())
    });
    r.add("aten::repeat_interleave.self_Tensor", |a| {
        Ok(
            repeat_interleave_self(&a.tensor(0)?, &a.tensor(1)?, a.opt_int(2)?, a.opt_int(3)?)?
                .into(),
        )
    });
    r.add("aten::repeat_interleave.self_int", |a| {
        let reps = Tensor::scalar(a.int(1)?);
        Ok(repeat_interleave_self(&a.tensor(0)?, &reps, a.opt_int(2)?, a.opt_int(3)?)?.into())
    });
    r.add("aten::flip", |a| {
        Ok(flip(&a.tensor(0)?, &a.int_list(1)?)?.into())
    });
    r.add("aten::fliplr", |a| {
        let t = a.tensor(0)?;
        if t.dim() < 2 {
            return Err(rank_mismatch(
                "fliplr",
                "self",
                RankRequirement::AtLeast(2),
                t.shape(),
            ));
        }
        Ok(flip(&t, &[1])?.into())
    });
    r.add("aten::flipud", |a| {
        let t = a.tensor(0)?;
        if t.dim() < 1 {
            return Err(rank_mismatch(
                "flipud",
                "self",
                RankRequirement::AtLeast(1),
                t.shape(),
            ));
        }
        Ok(flip(&t, &[0])?.into())
    });
    r.add("aten::roll", |a| {
        Ok(roll(&a.tensor(0)?, &a.int_list(1)?, &a.int_list(2)?)?.into())
    });
    r.add("aten::rot90", |a| {
        Ok(rot90(&a.tensor(0)?, a.int(1)?, &a.int_list(2)?)?.into())
    });
    r.add("aten::constant_pad_nd", |a| {
        Ok(constant_pad(&a.tensor(0)?, &a.int_list(1)?, a.scalar(2)?)?.into())
    });
    r.add("aten::pad", |a| {
        Ok(pad_op(&a.tensor(0)?, &a.int_list(1)?, &a.str(2)?, a.opt_double(3)?)?.into())
    });
    r.add_all(
        &[
            "aten::reflection_pad1d",
            "aten::reflection_pad2d",
            "aten::reflection_pad3d",
        ],
        |a| Ok(index_pad(&a.tensor(0)?, &a.int_list(1)?, PadMode::Reflect)?.into()),
    );
    r.add_all(
        &[
            "aten::replication_pad1d",
            "aten::replication_pad2d",
            "aten::replication_pad3d",
        ],
        |a| Ok(index_pad(&a.tensor(0)?, &a.int_list(1)?, PadMode::Replicate)?.into()),
    );
    // `_pad_enum(self, pad, mode, value)`: `pad` with at::padding_mode's codes (PadNd.h's order)
    r.add("aten::_pad_enum", |a| {
        let mode = match a.int(2)? {
            0 => "reflect",
            1 => "replicate",
            2 => "circular",
            3 => "constant",
            m => {
                return Err(invalid_argument(
                    "_pad_enum",
                    "mode",
                    "must be a padding mode code (0 to 3)",
                    m,
                ))
            }
        };
        Ok(pad_op(&a.tensor(0)?, &a.int_list(1)?, mode, a.opt_double(3)?)?.into())
    });
    r.add("aten::_pad_circular", |a| {
        Ok(index_pad(&a.tensor(0)?, &a.int_list(1)?, PadMode::Circular)?.into())
    });
    r.add("aten::tril", |a| {
        Ok(tri(&a.tensor(0)?, a.int(1)?, true)?.into())
    });
    r.add("aten::triu", |a| {
        Ok(tri(&a.tensor(0)?, a.int(1)?, false)?.into())
    });
    r.add("aten::tril_", |a| {
        let t = a.tensor(0)?;
        t.copy_from(&tri(&t, a.int(1)?, true)?)?;
        Ok(t.into())
    });
    r.add("aten::triu_", |a| {
        let t = a.tensor(0)?;
        t.copy_from(&tri(&t, a.int(1)?, false)?)?;
        Ok(t.into())
    });
    r.add("aten::diag", |a| Ok(diag(&a.tensor(0)?, a.int(1)?)?.into()));
    // `diagflat(self, offset)`: the flattened input on a diagonal
    r.add("aten::diagflat", |a| {
        let flat = reshape(&a.tensor(0)?, &[-1])?;
        Ok(diag(&flat, a.int(1)?)?.into())
    });
    r.add("aten::diag_embed", |a| {
        Ok(diag_embed(&a.tensor(0)?, a.int(1)?, a.int(2)?, a.int(3)?)?.into())
    });
    r.add("aten::cartesian_prod", |a| {
        Ok(cartesian_prod(&tlist(a, 0)?)?.into())
    });
}
