//! Kernels of PyTorch's strided nested tensors (`NestedTensorCPU`, and the CPU kernels that
//! build nested tensors from dense ones): building them from a padded tensor and a mask, a
//! tensor list or a buffer and geometry; their geometry queries; `to_padded_tensor`; and the
//! masked softmax the fused attention uses. The nested value itself lives in
//! `tensor/nested.rs`; every kernel not listed here refuses a nested argument (`Args::tensor`)
//! with the dispatcher's `NestedTensorCPU` message. The transformer fast path
//! (`_transformer_encoder_layer_fwd`, `_native_multi_head_attention` on a nested input) maps
//! its dense kernel over the components with `map_components`.

use super::activation::softmax_op;
use super::kernels::{
    check_rank, check_size, invalid_argument, non_negative, rank_mismatch, shape_mismatch,
    size_mismatch, unsupported, unsupported_feature, wrong_dtype,
};
use super::shape::narrow;
use super::{Args, Registry};
use crate::tensor::RankRequirement;
use crate::tensor::{
    nested_contiguous_geometry, promote::promote_types, DType, Layout, NestedParts, Scalar, Shape,
    Strides, Tensor, TensorError,
};
use crate::values::{IValue, Tuple};

type R = crate::Result<IValue>;

fn t(x: Tensor) -> R {
    Ok(IValue::Tensor(x))
}

/// A nested argument's parts, or the dispatcher's error for a strided one (these kernels are
/// registered for `NestedTensorCPU` only).
fn nested_arg<'t>(op: &str, x: &'t Tensor) -> crate::Result<&'t NestedParts> {
    x.nested_parts().ok_or_else(|| {
        unsupported(format!(
            "Could not run '{op}' with arguments from the '{}' backend",
            x.layout().backend()
        ))
    })
}

/// A strided int64 geometry tensor's rows (`[n, d]` -> n rows of d), PyTorch's checks on its
/// dtype ("expected scalar type Long") included.
fn long_rows(x: &Tensor, what: &str) -> crate::Result<Vec<Vec<i64>>> {
    if x.dtype() != DType::Int64 {
        return Err(TensorError::DTypeMismatch {
            expected: DType::Int64,
            got: x.dtype(),
        }
        .into());
    }
    // PyTorch reads the width as `size(1)`: a rank below 2 fails there
    if x.dim() < 2 {
        return Err(TensorError::DimOutOfRange {
            dim: 1,
            ndim: x.dim(),
        }
        .into());
    }
    if x.dim() > 2 {
        return Err(rank_mismatch(
            what,
            "the sizes tensor",
            RankRequirement::Exactly(2),
            x.shape(),
        ));
    }
    let d = x.shape()[1];
    let v = x.contiguous()?.to_vec::<i64>()?;
    Ok(if d == 0 {
        vec![Vec::new(); x.shape()[0]]
    } else {
        v.chunks(d).map(<[i64]>::to_vec).collect()
    })
}

fn shape_rows(rows: &[Vec<i64>], what: &str) -> crate::Result<Vec<Shape>> {
    rows.iter()
        .map(|r| r.iter().map(|&s| non_negative("nested", what, s)).collect())
        .collect()
}

/// An int64 `[n, d]` tensor of per-component rows (`d` given: a 0-component tensor keeps it).
fn rows_tensor<T>(rows: &[T], d: usize, f: impl Fn(&T) -> Vec<i64>) -> crate::Result<Tensor> {
    let flat: Vec<i64> = rows.iter().flat_map(f).collect();
    Ok(Tensor::from_vec(flat, &[rows.len(), d])?)
}

/// Apply `f` to every component of the nested `x` (a component without elements is kept as
/// it is) and gather the results as a contiguous nested tensor.
pub(crate) fn map_components(
    x: &Tensor,
    op: &str,
    mut f: impl FnMut(&Tensor) -> crate::Result<Tensor>,
) -> crate::Result<Tensor> {
    let parts = nested_arg(op, x)?;
    let out = parts
        .components()?
        .iter()
        .map(|c| if c.numel() == 0 { Ok(c.clone()) } else { f(c) })
        .collect::<crate::Result<Vec<_>>>()?;
    if out.is_empty() {
        return Ok(x.clone());
    }
    Tensor::nested_from_components(&out)
}

/// Whether two nested tensors have the same dtype, component sizes and elements.
pub(crate) fn same_elements(x: &Tensor, y: &Tensor) -> crate::Result<bool> {
    let (Some(px), Some(py)) = (x.nested_parts(), y.nested_parts()) else {
        return Ok(false);
    };
    if x.dtype() != y.dtype() || px.sizes() != py.sizes() {
        return Ok(false);
    }
    for (cx, cy) in px.components()?.iter().zip(&py.components()?) {
        if cx.to_contiguous_bytes()? != cy.to_contiguous_bytes()? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The checks `_nested_tensor_from_mask` and `_left_aligned` share; returns each row's
/// number of true entries and whether every row's trues come first.
fn mask_lengths(t: &Tensor, mask: &Tensor) -> crate::Result<(Vec<usize>, bool)> {
    if mask.dtype() != DType::Bool {
        return Err(wrong_dtype(
            "_nested_tensor_from_mask",
            "mask",
            "bool",
            mask.dtype(),
        ));
    }
    check_rank(
        "_nested_tensor_from_mask",
        "mask",
        RankRequirement::Exactly(2),
        mask.shape(),
    )?;
    check_rank(
        "_nested_tensor_from_mask",
        "input",
        RankRequirement::Exactly(3),
        t.shape(),
    )?;
    let (n, l) = (t.shape()[0], t.shape()[1]);
    if mask.shape() != [n, l] {
        return Err(shape_mismatch(
            "_nested_tensor_from_mask",
            "mask",
            &[n, l],
            mask.shape(),
        ));
    }
    if l == 0 {
        // PyTorch reads the count from `cumsum(1).select(1, L - 1)`
        return Err(TensorError::SelectOutOfRange {
            index: -1,
            dim: 1,
            shape: vec![n, 0],
        }
        .into());
    }
    let m = mask.contiguous()?.to_vec::<bool>()?;
    let mut aligned = true;
    let lengths = m
        .chunks(l)
        .map(|row| {
            let count = row.iter().filter(|&&b| b).count();
            let leading = row.iter().take_while(|&&b| b).count();
            aligned &= count == leading;
            count
        })
        .collect();
    Ok((lengths, aligned))
}

/// `_nested_tensor_from_mask(t, mask, mask_check=True)`: row i keeps its first
/// `mask[i].sum()` positions.
fn from_mask(a: &mut Args) -> R {
    let (x, mask) = (a.tensor(0)?, a.tensor(1)?);
    let check = a.bool(2)?;
    let (lengths, aligned) = mask_lengths(&x, &mask)?;
    if check && !aligned {
        return Err(invalid_argument(
            "_nested_tensor_from_mask",
            "mask",
            "must be left-aligned without gaps",
            format!("a mask with true counts {lengths:?}"),
        ));
    }
    let d = x.shape()[2];
    let sizes: Vec<Shape> = lengths
        .iter()
        .map(|&len| Shape::from_slice(&[len, d]))
        .collect();
    t(from_padded_sizes(&x, &sizes)?)
}

/// `_nested_tensor_from_mask_left_aligned(t, mask)`: whether each row's trues come first.
fn from_mask_left_aligned(a: &mut Args) -> R {
    let (_, aligned) = mask_lengths(&a.tensor(0)?, &a.tensor(1)?)?;
    Ok(IValue::Bool(aligned))
}

/// The nested tensor whose component i is `padded[i]` cut to `sizes[i]` (PyTorch's
/// `nested_from_padded_generic` without the 0213 transform).
fn from_padded_sizes(padded: &Tensor, sizes: &[Shape]) -> crate::Result<Tensor> {
    let component_dim = padded.dim().saturating_sub(1);
    if padded.dim() == 0 {
        return Err(rank_mismatch(
            "_nested_from_padded",
            "padded",
            RankRequirement::AtLeast(1),
            padded.shape(),
        ));
    }
    if sizes.iter().any(|s| s.len() != component_dim) {
        let d = sizes.first().map_or(0, |s| s.len());
        return Err(size_mismatch(
            "_nested_from_padded",
            "the length of each component size (padded.dim() - 1)",
            component_dim as i64,
            d as i64,
        ));
    }
    check_size(
        "_nested_from_padded",
        "padded.size(0) (the number of components)",
        sizes.len() as i64,
        padded.shape()[0] as i64,
    )?;
    let mut comps = Vec::with_capacity(sizes.len());
    for (i, s) in sizes.iter().enumerate() {
        let mut c = super::shape::select(padded, 0, i as i64)?;
        for (d, (&want, &have)) in s.iter().zip(&padded.shape()[1..]).enumerate() {
            if want > have {
                return Err(TensorError::Broadcast {
                    a: have,
                    b: want,
                    dim: d + 1,
                }
                .into());
            }
            c = narrow(&c, d as i64, 0, want as i64)?;
        }
        comps.push(c);
    }
    if comps.is_empty() {
        return Ok(Tensor::nested_view(
            &Tensor::zeros(&[0], padded.dtype())?,
            component_dim,
            Vec::new(),
            Vec::new(),
            Vec::new(),
        )?);
    }
    Tensor::nested_from_components(&comps)
}

/// `_nested_from_padded(padded, cpu_nested_shape_example, fuse_transform_0213=False)`: the
/// sizes come as an int64 `[n, d]` tensor; with the transform a `[B, H, T, dh]` padded tensor
/// is first read as `[B, T, H * dh]`.
fn from_padded(a: &mut Args) -> R {
    let padded = a.tensor(0)?;
    let rows = long_rows(&a.tensor(1)?, "cpu_nested_shape_example")?;
    let padded = if a.bool(2)? {
        if padded.dim() != 4 {
            return Err(rank_mismatch(
                a.op,
                "padded (fuse_transform_0213)",
                RankRequirement::Exactly(4),
                padded.shape(),
            ));
        }
        let s = padded.shape().to_vec();
        let p = super::shape::permute(&padded, &[0, 2, 1, 3])?.contiguous()?;
        super::shape::reshape(&p, &[s[0] as i64, s[2] as i64, (s[1] * s[3]) as i64])?
    } else {
        padded
    };
    t(from_padded_sizes(
        &padded,
        &shape_rows(&rows, "nested size")?,
    )?)
}

/// `_nested_from_padded_and_nested_example(padded, nt_example)`: the example's sizes.
fn from_padded_and_nested_example(a: &mut Args) -> R {
    let padded = a.tensor(0)?;
    let example = a.any_layout_tensor(1)?;
    let parts = nested_arg(a.op, &example)?;
    t(from_padded_sizes(&padded, parts.sizes())?)
}

/// `_nested_tensor_from_tensor_list(list, dtype=None, layout=None, device=None,
/// pin_memory=None)`: copies of the tensors, promoted to one dtype as `cat` does (or `dtype`).
fn from_tensor_list(a: &mut Args) -> R {
    let list = a.tensor_list(0)?;
    let dtype = a.opt_dtype(1)?;
    if let Some(layout) = a.opt_int(2)? {
        if layout != Layout::Strided.number() {
            return Err(unsupported_feature(
                a.op,
                format!("nested tensors of layout {layout} (only torch.strided)"),
            ));
        }
    }
    // device and pin_memory: tsrun computes every tensor on the CPU, as its creation ops do
    for (i, pair) in list.windows(2).enumerate() {
        if pair[1].dim() != pair[0].dim() {
            return Err(size_mismatch(
                "nested_tensor",
                format!("the dimension of tensor {} (of tensor {i})", i + 1),
                pair[0].dim() as i64,
                pair[1].dim() as i64,
            ));
        }
    }
    let common = list
        .iter()
        .map(Tensor::dtype)
        .reduce(promote_types)
        .unwrap_or(DType::Float32);
    let target = dtype.unwrap_or(common);
    let comps = list
        .iter()
        .map(|c| c.to_dtype(target))
        .collect::<crate::Result<Vec<_>>>()?;
    if comps.is_empty() {
        return t(Tensor::nested_view(
            &Tensor::zeros(&[0], target)?,
            0,
            Vec::new(),
            Vec::new(),
            Vec::new(),
        )?);
    }
    t(Tensor::nested_from_components(&comps)?)
}

/// The int64 `[n, d]` geometry queries refuse a nested tensor without components, whose
/// geometry tensor PyTorch leaves undefined.
fn geometry_of<'t>(op: &str, x: &'t Tensor) -> crate::Result<&'t NestedParts> {
    let parts = nested_arg(op, x)?;
    if parts.is_empty() {
        return Err(unsupported_feature(
            op,
            "a nested tensor without components (PyTorch returns an undefined tensor)",
        ));
    }
    Ok(parts)
}

/// `_nested_tensor_size(self)`: int64 `[n, d]`, each component's sizes.
fn nested_size(a: &mut Args) -> R {
    let x = a.any_layout_tensor(0)?;
    let p = geometry_of(a.op, &x)?;
    t(rows_tensor(p.sizes(), p.component_dim(), |s| {
        s.iter().map(|&v| v as i64).collect()
    })?)
}

/// `_nested_tensor_strides(self)`: int64 `[n, d]`, each component's strides.
fn nested_strides(a: &mut Args) -> R {
    let x = a.any_layout_tensor(0)?;
    let p = geometry_of(a.op, &x)?;
    t(rows_tensor(p.strides(), p.component_dim(), |s| {
        s.iter().map(|&v| v as i64).collect()
    })?)
}

/// `_nested_tensor_storage_offsets(self)`: int64 `[n]`, each component's offset.
fn nested_storage_offsets(a: &mut Args) -> R {
    let x = a.any_layout_tensor(0)?;
    let p = geometry_of(a.op, &x)?;
    let v: Vec<i64> = p.offsets().iter().map(|&o| o as i64).collect();
    t(Tensor::from_vec(v, &[p.len()])?)
}

/// `_nested_compute_contiguous_strides_offsets(nested_size)`: the strides and offsets of
/// components of these sizes packed one after another.
fn contiguous_strides_offsets(a: &mut Args) -> R {
    let size = a.tensor(0)?;
    let rows = long_rows(&size, "nested_size")?;
    let sizes = shape_rows(&rows, "nested size")?;
    let (strides, offsets) = nested_contiguous_geometry(&sizes)?;
    let d = size.shape()[1];
    let strides = rows_tensor(&strides, d, |s: &Strides| {
        s.iter().map(|&v| v as i64).collect()
    })?;
    let offsets = Tensor::from_vec(
        offsets.iter().map(|&o| o as i64).collect::<Vec<_>>(),
        &[sizes.len()],
    )?;
    Ok(IValue::Tuple(Tuple::new(vec![
        IValue::Tensor(strides),
        IValue::Tensor(offsets),
    ])))
}

/// The nested view `_nested_view_from_buffer` makes over `buffer`.
fn view_from_buffer_of(a: &Args, buffer: &Tensor) -> crate::Result<Tensor> {
    if buffer.dim() != 1 {
        return Err(rank_mismatch(
            "_nested_view_from_buffer",
            "buffer",
            RankRequirement::Exactly(1),
            buffer.shape(),
        ));
    }
    let (size, strides, offsets) = (a.tensor(1)?, a.tensor(2)?, a.tensor(3)?);
    let size_rows = long_rows(&size, "nested_size")?;
    let stride_rows = long_rows(&strides, "nested_strides")?;
    if offsets.dtype() != DType::Int64 {
        return Err(TensorError::DTypeMismatch {
            expected: DType::Int64,
            got: offsets.dtype(),
        }
        .into());
    }
    check_size(
        "_nested_view_from_buffer",
        "nested_strides.size(0) (nested_size.size(0))",
        size_rows.len() as i64,
        stride_rows.len() as i64,
    )?;
    check_size(
        "_nested_view_from_buffer",
        "nested_strides.size(1) (nested_size.size(1))",
        size.shape()[1] as i64,
        strides.shape()[1] as i64,
    )?;
    let offsets = offsets.contiguous()?.to_vec::<i64>()?;
    check_size(
        "_nested_view_from_buffer",
        "the number of offsets (nested_size.size(0))",
        size_rows.len() as i64,
        offsets.len() as i64,
    )?;
    let strides = stride_rows
        .iter()
        .map(|r| {
            r.iter()
                .map(|&s| {
                    isize::try_from(s).map_err(|_| {
                        invalid_argument(
                            "_nested_view_from_buffer",
                            "nested_strides",
                            "must fit in isize",
                            s,
                        )
                    })
                })
                .collect::<crate::Result<Strides>>()
        })
        .collect::<crate::Result<Vec<_>>>()?;
    let offsets = offsets
        .iter()
        .map(|&o| non_negative("nested", "storage offset", o))
        .collect::<crate::Result<Vec<_>>>()?;
    Ok(Tensor::nested_view(
        buffer,
        size.shape()[1],
        shape_rows(&size_rows, "nested size")?,
        strides,
        offsets,
    )?)
}

/// `_nested_view_from_buffer(self, nested_size, nested_strides, offsets)`: a nested view of
/// the flat buffer `self`.
fn view_from_buffer(a: &mut Args) -> R {
    let buffer = a.tensor(0)?;
    t(view_from_buffer_of(a, &buffer)?)
}

/// `_nested_view_from_buffer_copy`: a contiguous copy of that view (components packed in
/// order).
fn view_from_buffer_copy(a: &mut Args) -> R {
    let buffer = a.tensor(0)?;
    t(view_from_buffer_of(a, &buffer)?.deep_clone()?)
}

/// `to_padded_tensor(self, padding, output_size=None)` (and `nested_to_padded_tensor`): the
/// components stacked into `[n, *max sizes]` (or `output_size`, at least as large), the rest
/// filled with `padding` converted to the dtype.
fn to_padded(a: &mut Args) -> R {
    let x = a.any_layout_tensor(0)?;
    let parts = nested_arg("aten::to_padded_tensor", &x)?;
    let padding = a.double(1)?;
    let output_size = a.opt_int_list(2)?;
    if parts.is_empty() {
        return t(parts.buffer().deep_clone()?);
    }
    if parts.numel() == 0 {
        return Err(invalid_argument(
            "to_padded_tensor",
            "self",
            "must have a component with elements",
            format!("components of sizes {:?}", parts.sizes()),
        ));
    }
    if !parts.is_contiguous() {
        return Err(unsupported_feature(
            "to_padded_tensor",
            "a non-contiguous nested tensor",
        ));
    }
    let numels: Vec<usize> = parts.sizes().iter().map(|s| s.iter().product()).collect();
    let total = parts.buffer().numel();
    if numels.iter().sum::<usize>() != total {
        return Err(size_mismatch(
            "to_padded_tensor",
            format!("the sum of the components' element counts {numels:?} (the buffer's)"),
            total as i64,
            numels.iter().sum::<usize>() as i64,
        ));
    }
    if parts.component_dim() == 0 {
        return Err(invalid_argument(
            "to_padded_tensor",
            "self",
            "must have components of at least one dimension (PyTorch: sizes_size_1 > 0 INTERNAL ASSERT FAILED)",
            "0-d components",
        ));
    }
    let padded_shape: Vec<usize> = x.shape().to_vec();
    let out_shape: Vec<usize> = match output_size {
        None => padded_shape,
        Some(want) => {
            check_size(
                "to_padded_tensor",
                "the length of output_size (the nested tensor's dims)",
                padded_shape.len() as i64,
                want.len() as i64,
            )?;
            if want
                .iter()
                .zip(&padded_shape)
                .any(|(&w, &p)| w < 0 || (w as u64) < p as u64)
            {
                return Err(invalid_argument(
                    "to_padded_tensor",
                    "output_size",
                    format!("must be at least the padded size {padded_shape:?}"),
                    format!("{want:?}"),
                ));
            }
            want.iter().map(|&w| w as usize).collect()
        }
    };
    let out = Tensor::empty(&out_shape, x.dtype())?;
    out.fill(Scalar::Float(padding))?;
    for (i, c) in parts.components()?.iter().enumerate() {
        let mut dst = super::shape::select(&out, 0, i as i64)?;
        for (d, &s) in c.shape().iter().enumerate() {
            dst = narrow(&dst, d as i64, 0, s as i64)?;
        }
        dst.copy_from(c)?;
    }
    t(out)
}

/// `_nested_tensor_softmax_with_shape(self, query)`: for batch entry i of the dense
/// `[n, H, T, T]` scores, softmax over the last dim in the top-left `len x len` block (`len`
/// the i-th component's first size of the nested `query`), zeros elsewhere.
fn softmax_with_shape(a: &mut Args) -> R {
    let scores = a.tensor(0)?;
    let query = a.any_layout_tensor(1)?;
    let parts = nested_arg(a.op, &query)?;
    if !parts.is_contiguous() {
        return Err(unsupported_feature(
            "_nested_tensor_softmax_with_shape",
            "a non-contiguous nested query",
        ));
    }
    if scores.dim() != 4 {
        return Err(rank_mismatch(
            "_nested_tensor_softmax_with_shape",
            "scores",
            RankRequirement::Exactly(4),
            scores.shape(),
        ));
    }
    let s = scores.shape().to_vec();
    if s[0] != parts.len() || s[2] != s[3] {
        // PyTorch leaves the rest of its `empty_like` result uninitialized
        return Err(unsupported_feature(
            a.op,
            format!(
                "scores of shape {s:?} for {} query components (tsrun needs [n, H, T, T])",
                parts.len()
            ),
        ));
    }
    let out = Tensor::zeros(&s, scores.dtype())?;
    for (i, size) in parts.sizes().iter().enumerate() {
        let len = *size.first().ok_or(TensorError::IndexOutOfBounds {
            index: 0,
            dim: 1,
            size: 0,
        })?;
        let len = len.min(s[2]) as i64;
        let block = |t: &Tensor| -> crate::Result<Tensor> {
            let row = super::shape::select(t, 0, i as i64)?;
            narrow(&narrow(&row, 1, 0, len)?, 2, 0, len)
        };
        let sm = softmax_op(&block(&scores)?, -1, None, false)?;
        block(&out)?.copy_from(&sm)?;
    }
    t(out)
}

/// Dense ops PyTorch also runs on nested tensors (`NestedTensorCPU` kernels), each of which
/// is the dense op on every component: the wrapper runs the kernel registered before on each
/// component, and the kernel itself on strided arguments.
const NESTED_WRAPPED: [(&str, super::Kernel); 10] = [
    ("aten::relu", nested_or_dense::<UNARY, 0>),
    ("aten::gelu", nested_or_dense::<UNARY, 1>),
    ("aten::clone", nested_or_dense::<UNARY, 2>),
    ("aten::linear", nested_or_dense::<LINEAR, 3>),
    ("aten::layer_norm", nested_or_dense::<UNARY, 4>),
    ("aten::add.Tensor", nested_or_dense::<BINARY, 5>),
    ("aten::mul.Tensor", nested_or_dense::<BINARY, 6>),
    ("aten::softmax.int", nested_or_dense::<SOFTMAX, 7>),
    ("aten::to.dtype", nested_or_dense::<UNARY, 8>),
    ("aten::unbind.int", nested_or_dense::<UNBIND, 9>),
];
/// The first argument nested, the others as they are.
const UNARY: u8 = 0;
/// `linear`: a 3-d nested input.
const LINEAR: u8 = 1;
/// Two nested tensors of equal component sizes, or a nested one and a 0-d dense one.
const BINARY: u8 = 2;
/// `softmax(dim)`: the component's dimension `dim - 1`.
const SOFTMAX: u8 = 3;
/// `unbind(0)`: the components themselves.
const UNBIND: u8 = 4;

/// The dense kernel each entry of [`NESTED_WRAPPED`] replaced, by the same index.
static DENSE_KERNELS: [std::sync::OnceLock<super::Kernel>; NESTED_WRAPPED.len()] =
    [const { std::sync::OnceLock::new() }; NESTED_WRAPPED.len()];

fn is_nested_value(v: &IValue) -> bool {
    matches!(v, IValue::Tensor(x) if x.is_nested())
}

/// `NESTED_WRAPPED[OP]`: on strided arguments the dense kernel; with a nested one, that
/// kernel on each component (with `KIND`'s argument rules). A shim: one body serves all.
fn nested_or_dense<const KIND: u8, const OP: usize>(a: &mut Args) -> R {
    nested_or_dense_with(a, KIND, OP)
}

#[inline(never)]
fn nested_or_dense_with(a: &mut Args, kind: u8, op: usize) -> R {
    let dense = *DENSE_KERNELS
        .get(op)
        .and_then(|k| k.get())
        .ok_or_else(|| crate::Error::UnknownOp(a.op.to_string()))?;
    if !a.values.iter().any(is_nested_value) {
        return dense(a);
    }
    let x = a.any_layout_tensor(0)?;
    let parts = nested_arg(a.op, &x)?;
    if kind == UNBIND {
        let dim = a.int(1)?;
        if dim != 0 {
            return Err(invalid_argument("unbind (nested)", "dim", "must be 0", dim));
        }
        return Ok(super::shape::tensor_list(parts.components()?));
    }
    // the other arguments: a nested second operand's components, or the value itself
    let other: Option<Vec<Tensor>> = match a.values.get(1) {
        Some(IValue::Tensor(y)) if kind == BINARY && y.is_nested() => {
            let py = nested_arg(a.op, y)?;
            if py.sizes() != parts.sizes() {
                return Err(invalid_argument(
                    a.op,
                    "other",
                    format!("must have self's component sizes {:?}", parts.sizes()),
                    format!("{:?}", py.sizes()),
                ));
            }
            Some(py.components()?)
        }
        Some(IValue::Tensor(y)) if kind == BINARY && y.dim() != 0 => {
            return Err(unsupported_feature(
                a.op,
                format!(
                    "a nested tensor with a {}-d dense tensor (tsrun: nested or 0-d operands)",
                    y.dim()
                ),
            ))
        }
        _ => None,
    };
    if a.values.iter().skip(1).any(is_nested_value) && other.is_none() {
        return Err(unsupported_feature(
            a.op,
            "a nested tensor in an argument after the first",
        ));
    }
    if kind == LINEAR && x.dim() != 3 {
        return Err(rank_mismatch(
            "linear (nested)",
            "input",
            RankRequirement::Exactly(3),
            x.shape(),
        ));
    }
    let dim_arg = if kind == SOFTMAX {
        let d = crate::tensor::wrap_dim(a.int(1)?, x.dim())?;
        if d == 0 {
            return Err(invalid_argument(
                "softmax (nested)",
                "dim",
                "must not be 0 (the component dimension)",
                a.int(1)?,
            ));
        }
        Some(d as i64 - 1)
    } else {
        None
    };
    let components = parts.components()?;
    let mut out = Vec::with_capacity(components.len());
    for (i, c) in components.into_iter().enumerate() {
        let mut vals: Vec<IValue> = a.values.to_vec();
        if let Some(first) = vals.first_mut() {
            *first = IValue::Tensor(c);
        }
        if let (Some(o), Some(slot)) = (&other, vals.get_mut(1)) {
            *slot = IValue::Tensor(o[i].clone());
        }
        if let (Some(d), Some(slot)) = (dim_arg, vals.get_mut(1)) {
            *slot = IValue::Int(d);
        }
        match dense(&mut Args::new(a.op, &mut vals, a.ctx))? {
            IValue::Tensor(r) => out.push(r),
            other => {
                return Err(invalid_argument(
                    a.op,
                    "a component's result",
                    "must be a tensor",
                    other.kind_name(),
                ))
            }
        }
    }
    if out.is_empty() {
        return t(x.clone());
    }
    t(Tensor::nested_from_components(&out)?)
}

/// The names the nested wrappers take over from earlier families (their kernels run on
/// strided arguments).
pub fn nested_wrapped_names() -> impl Iterator<Item = &'static str> {
    NESTED_WRAPPED.iter().map(|(name, _)| *name)
}

pub(crate) fn register(r: &mut Registry) {
    for (i, (name, kernel)) in NESTED_WRAPPED.into_iter().enumerate() {
        if let Some(k) = r.lookup(name, "") {
            // the registry is built once per process: a second build finds them set
            let _ = DENSE_KERNELS[i].set(k);
            r.add(name, kernel);
        }
    }
    r.add("aten::_nested_tensor_from_mask", from_mask);
    r.add(
        "aten::_nested_tensor_from_mask_left_aligned",
        from_mask_left_aligned,
    );
    r.add("aten::_nested_from_padded", from_padded);
    r.add(
        "aten::_nested_from_padded_and_nested_example",
        from_padded_and_nested_example,
    );
    r.add("aten::_nested_tensor_from_tensor_list", from_tensor_list);
    r.add("aten::_nested_tensor_size", nested_size);
    r.add("aten::_nested_tensor_strides", nested_strides);
    r.add(
        "aten::_nested_tensor_storage_offsets",
        nested_storage_offsets,
    );
    r.add(
        "aten::_nested_compute_contiguous_strides_offsets",
        contiguous_strides_offsets,
    );
    r.add("aten::_nested_view_from_buffer", view_from_buffer);
    r.add("aten::_nested_view_from_buffer_copy", view_from_buffer_copy);
    r.add_all(
        &["aten::to_padded_tensor", "aten::nested_to_padded_tensor"],
        to_padded,
    );
    r.add(
        "aten::_nested_tensor_softmax_with_shape",
        softmax_with_shape,
    );
}
