//! Nested tensors: PyTorch's strided `NestedTensorImpl` (`torch.nested.nested_tensor([...])`,
//! layout `torch.strided`, dispatch key `NestedTensorCPU`): a list of component tensors of equal
//! dimension and dtype but possibly different sizes, stored as one flat contiguous buffer and,
//! per component, its sizes, strides and offset into the buffer.
//!
//! A nested tensor is a [`Tensor`] whose parts hold a [`NestedParts`]: its dtype is the
//! buffer's, its `dim()` is one more than the components' and its shape is `[n, *padded]`,
//! where each component dimension holds the largest size any component has there (the size of
//! `to_padded_tensor`'s result; PyTorch's `size(d)` answers only where all components agree,
//! see [`NestedParts::regular_size`]). It addresses no elements of its own (empty) storage:
//! element access and views refuse it with [`TensorError::NestedNotSupported`], so a kernel
//! without a nested implementation fails naming the `NestedTensorCPU` backend, as PyTorch's
//! dispatcher does.

use super::{checked_numel, Shape, Storage, Strides, Tensor, TensorError};
use smallvec::SmallVec;
use std::sync::Arc;

type TResult<T> = std::result::Result<T, TensorError>;

/// Largest number of components a nested tensor may have (each carries its own geometry).
const MAX_COMPONENTS: usize = 1 << 24;

/// The parts of a strided nested tensor (PyTorch's `NestedTensorImpl`).
#[derive(Debug)]
pub struct NestedParts {
    /// The flat buffer the components view: 1-d and contiguous.
    buffer: Tensor,
    /// The components' number of dimensions.
    component_dim: usize,
    /// Per component: its sizes (`_nested_tensor_size` rows).
    sizes: Vec<Shape>,
    /// Per component: its strides (`_nested_tensor_strides` rows).
    strides: Vec<Strides>,
    /// Per component: its offset into the buffer (`_nested_tensor_storage_offsets`).
    offsets: Vec<usize>,
}

impl NestedParts {
    /// The flat buffer (PyTorch's `get_buffer()`).
    pub fn buffer(&self) -> &Tensor {
        &self.buffer
    }

    /// The number of components (`size(0)`).
    pub fn len(&self) -> usize {
        self.sizes.len()
    }

    /// Whether there are no components.
    pub fn is_empty(&self) -> bool {
        self.sizes.is_empty()
    }

    /// The components' number of dimensions (the nested tensor's `dim() - 1`).
    pub fn component_dim(&self) -> usize {
        self.component_dim
    }

    /// Each component's sizes.
    pub fn sizes(&self) -> &[Shape] {
        &self.sizes
    }

    /// Each component's strides.
    pub fn strides(&self) -> &[Strides] {
        &self.strides
    }

    /// Each component's offset into the buffer.
    pub fn offsets(&self) -> &[usize] {
        &self.offsets
    }

    /// Component `i`: a strided view of the buffer (`unbind(0)[i]`).
    pub fn component(&self, i: usize) -> TResult<Tensor> {
        let (size, stride, offset) = match (self.sizes.get(i), self.strides.get(i)) {
            (Some(s), Some(st)) => (s, st, self.offsets.get(i).copied().unwrap_or(0)),
            _ => {
                return Err(TensorError::IndexOutOfBounds {
                    index: i as i64,
                    dim: 0,
                    size: self.len(),
                })
            }
        };
        let start = self
            .buffer
            .storage_offset()
            .checked_add(offset)
            .ok_or_else(|| TensorError::OutOfBounds("nested component offset overflows".into()))?;
        self.buffer.as_strided(size, stride, start)
    }

    /// Every component, in order.
    pub fn components(&self) -> TResult<Vec<Tensor>> {
        (0..self.len()).map(|i| self.component(i)).collect()
    }

    /// The number of elements of all components (`numel()` of a nested tensor).
    pub fn numel(&self) -> usize {
        self.sizes.iter().map(|s| s.iter().product::<usize>()).sum()
    }

    /// Component dimension `d`'s size when every component has the same one (PyTorch's
    /// `size(d + 1)`; `None`: "irregular").
    pub fn regular_size(&self, d: usize) -> Option<usize> {
        let mut it = self.sizes.iter().map(|s| s.get(d).copied());
        let first = it.next()??;
        it.all(|s| s == Some(first)).then_some(first)
    }

    /// PyTorch's `nested_tensor_impl_is_contiguous`: every component has contiguous strides
    /// and starts where the previous one ends, the first at the buffer's start.
    pub fn is_contiguous(&self) -> bool {
        let mut next = 0usize;
        for ((size, stride), &offset) in self.sizes.iter().zip(&self.strides).zip(&self.offsets) {
            if offset != next || packed_strides(size).as_slice() != stride.as_slice() {
                return false;
            }
            next += size.iter().product::<usize>();
        }
        true
    }
}

/// Row-major strides and packed offsets for components of `sizes` (PyTorch's
/// `_nested_compute_contiguous_strides_offsets`).
pub fn nested_contiguous_geometry(sizes: &[Shape]) -> TResult<(Vec<Strides>, Vec<usize>)> {
    let mut offsets = Vec::with_capacity(sizes.len());
    let mut next = 0usize;
    for s in sizes {
        offsets.push(next);
        next = next
            .checked_add(checked_numel(s)?)
            .ok_or_else(|| TensorError::InvalidArgument {
                op: "nested_tensor".into(),
                argument: "sizes".into(),
                requirement: "must have a total number of elements that fits in memory".into(),
                value: format!("{sizes:?}"),
            })?;
    }
    Ok((sizes.iter().map(|s| packed_strides(s)).collect(), offsets))
}

/// Row-major strides as the nested geometry computes them: the plain product of the later
/// sizes (a size-0 dimension gives the earlier ones stride 0, unlike a dense tensor's).
fn packed_strides(size: &[usize]) -> Strides {
    let mut strides: Strides = SmallVec::from_elem(0, size.len());
    let mut acc: isize = 1;
    for (st, &s) in strides.iter_mut().zip(size).rev() {
        *st = acc;
        acc = acc.saturating_mul(s as isize);
    }
    strides
}

impl Tensor {
    /// The parts of a nested tensor, `None` for any other.
    pub fn nested_parts(&self) -> Option<&NestedParts> {
        match self.parts.as_deref() {
            Some(super::LayoutParts::Nested(p)) => Some(p),
            _ => None,
        }
    }

    /// Whether this is a nested tensor (`is_nested`).
    pub fn is_nested(&self) -> bool {
        self.nested_parts().is_some()
    }

    /// A nested tensor viewing `buffer` (`_nested_view_from_buffer`): component `i` has
    /// `sizes[i]` and `strides[i]` and starts `offsets[i]` elements into the buffer. The
    /// buffer must be a 1-d contiguous strided tensor holding every component's elements.
    pub fn nested_view(
        buffer: &Tensor,
        component_dim: usize,
        sizes: Vec<Shape>,
        strides: Vec<Strides>,
        offsets: Vec<usize>,
    ) -> TResult<Tensor> {
        buffer.check_strided()?;
        if buffer.is_quantized() {
            return Err(TensorError::UnsupportedFeature {
                op: "nested_tensor".into(),
                feature: format!("a quantized buffer ({})", buffer.dtype()),
            });
        }
        if buffer.dim() != 1 {
            return Err(TensorError::RankMismatch {
                op: "nested_tensor".into(),
                argument: "buffer".into(),
                expected: super::RankRequirement::Exactly(1),
                shape: buffer.shape().to_vec(),
            });
        }
        if sizes.len() > MAX_COMPONENTS {
            return Err(TensorError::InvalidArgument {
                op: "nested_tensor".into(),
                argument: "the number of components".into(),
                requirement: format!("must be at most {MAX_COMPONENTS}"),
                value: sizes.len().to_string(),
            });
        }
        if strides.len() != sizes.len() || offsets.len() != sizes.len() {
            let (what, got) = if strides.len() != sizes.len() {
                ("the number of strides (of sizes)", strides.len())
            } else {
                ("the number of offsets (of sizes)", offsets.len())
            };
            return Err(TensorError::SizeMismatch {
                op: "nested_tensor".into(),
                what: what.into(),
                expected: sizes.len() as i64,
                got: got as i64,
            });
        }
        if !buffer.is_contiguous() || buffer.storage_offset() != 0 {
            // PyTorch reads such a buffer's storage from its start, ignoring the view
            return Err(TensorError::UnsupportedFeature {
                op: "nested_tensor".into(),
                feature: "a buffer that is not a contiguous view of its whole storage".into(),
            });
        }
        let buffer = buffer.clone();
        let mut padded: Shape = SmallVec::from_elem(0, component_dim);
        for (size, stride) in sizes.iter().zip(&strides) {
            if size.len() != component_dim || stride.len() != component_dim {
                let got = if size.len() != component_dim {
                    size.len()
                } else {
                    stride.len()
                };
                return Err(TensorError::SizeMismatch {
                    op: "nested_tensor".into(),
                    what: format!("the rank of a component (sizes {size:?}, strides {stride:?})"),
                    expected: component_dim as i64,
                    got: got as i64,
                });
            }
            for (p, &s) in padded.iter_mut().zip(size) {
                *p = (*p).max(s);
            }
        }
        let parts = NestedParts {
            buffer,
            component_dim,
            sizes,
            strides,
            offsets,
        };
        // every component must lie inside the buffer (as_strided checks the bounds)
        for i in 0..parts.len() {
            parts.component(i)?;
        }
        let mut shape: Shape = SmallVec::with_capacity(component_dim + 1);
        shape.push(parts.len());
        shape.extend_from_slice(&padded);
        checked_numel(&shape)?;
        let dtype = parts.buffer.dtype();
        Ok(Tensor {
            // no elements of its own: a fresh empty storage gives the tensor its own identity
            storage: Storage::zeroed(0)?,
            offset: 0,
            strides: SmallVec::from_elem(0, shape.len()),
            shape,
            dtype,
            requires_grad: false,
            quantizer: None,
            parts: Some(Arc::new(super::LayoutParts::Nested(parts))),
        })
    }

    /// A contiguous nested tensor holding copies of `components` (all strided, of one dtype
    /// and dimension): `torch.nested.nested_tensor(components)`.
    pub fn nested_from_components(components: &[Tensor]) -> crate::Result<Tensor> {
        let Some(first) = components.first() else {
            return Ok(Tensor::nested_view(
                &Tensor::zeros(&[0], super::DType::Float32)?,
                0,
                Vec::new(),
                Vec::new(),
                Vec::new(),
            )?);
        };
        let dtype = first.dtype();
        let component_dim = first.dim();
        for (i, c) in components.iter().enumerate() {
            c.check_strided()?;
            if c.dim() != component_dim {
                return Err(TensorError::RankMismatch {
                    op: "nested_tensor".into(),
                    argument: format!("tensor {i} (as tensor 0)"),
                    expected: super::RankRequirement::Exactly(component_dim),
                    shape: c.shape().to_vec(),
                }
                .into());
            }
            if c.dtype() != dtype {
                return Err(TensorError::DTypeMismatch {
                    expected: dtype,
                    got: c.dtype(),
                }
                .into());
            }
        }
        let sizes: Vec<Shape> = components.iter().map(|c| c.shape().into()).collect();
        let (strides, offsets) = nested_contiguous_geometry(&sizes)?;
        let total = sizes
            .iter()
            .map(|s| s.iter().product::<usize>())
            .sum::<usize>();
        let buffer = Tensor::empty(&[total], dtype)?;
        for (c, &off) in components.iter().zip(&offsets) {
            let n = c.numel();
            let c = c.contiguous()?;
            let flat = c.as_strided(&[n], &[1], c.storage_offset())?;
            buffer.as_strided(&[n], &[1], off)?.copy_from(&flat)?;
        }
        Ok(Tensor::nested_view(
            &buffer,
            component_dim,
            sizes,
            strides,
            offsets,
        )?)
    }

    /// `clone()` / `to(dtype)` of a nested tensor: a contiguous nested copy, converted.
    pub(super) fn nested_copy(&self, dtype: super::DType) -> crate::Result<Tensor> {
        let parts = self
            .nested_parts()
            .ok_or_else(|| TensorError::Value("nested_copy: not a nested tensor".into()))?;
        let comps = parts
            .components()?
            .iter()
            .map(|c| c.to_dtype(dtype))
            .collect::<crate::Result<Vec<_>>>()?;
        if comps.is_empty() {
            return Ok(Tensor::nested_view(
                &Tensor::zeros(&[0], dtype)?,
                parts.component_dim(),
                Vec::new(),
                Vec::new(),
                Vec::new(),
            )?);
        }
        let mut t = Tensor::nested_from_components(&comps)?;
        t.requires_grad = self.requires_grad;
        Ok(t)
    }
}
