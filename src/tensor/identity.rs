//! Tensor identity. tsrun's tensors are values (a storage handle plus geometry), so "the same
//! tensor" referenced from several places (an LSTM's parameters and its `_flat_weights` list) is
//! recognised by storage, geometry, dtype and `requires_grad`. PyTorch keys the same questions on
//! the `TensorImpl`; two PyTorch tensors that agree on all of these are indistinguishable here.

use super::quantizer::Quantizer;
use super::{DType, Layout, Tensor, WeakStorage};
use std::sync::Arc;

/// The identity of a tensor: equal for every copy of the same tensor value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorIdentity {
    storage: usize,
    offset: usize,
    shape: Vec<usize>,
    strides: Vec<isize>,
    dtype: DType,
    requires_grad: bool,
}

impl Tensor {
    /// This tensor's identity (see [`TensorIdentity`]).
    pub fn identity(&self) -> TensorIdentity {
        TensorIdentity {
            storage: self.storage().id(),
            offset: self.storage_offset(),
            shape: self.shape().to_vec(),
            strides: self.strides().to_vec(),
            dtype: self.dtype(),
            requires_grad: self.requires_grad(),
        }
    }
}

/// What a cache of data derived from a tensor checks before reusing it: the tensor's storage
/// (held weakly, so a cache does not keep dropped parameters alive), the version of its bytes
/// when it was read (every write bumps it), its view and dtype, and for a quantized tensor its
/// quantizer. A matching tensor is the same view of the same bytes, unwritten since.
#[derive(Debug)]
pub struct ViewStamp {
    storage: WeakStorage,
    version: u64,
    offset: usize,
    shape: Box<[usize]>,
    strides: Box<[isize]>,
    dtype: DType,
    quantizer: Option<Arc<Quantizer>>,
}

impl ViewStamp {
    /// The stamp of `t`, taken before its bytes are read (a write meanwhile leaves a newer
    /// version, so what was derived is not reused). `None` for sparse and nested tensors,
    /// whose data is not in their storage.
    pub fn of(t: &Tensor) -> Option<ViewStamp> {
        if t.layout() != Layout::Strided || t.is_nested() {
            return None;
        }
        Some(ViewStamp {
            storage: t.storage().downgrade(),
            version: t.storage().version(),
            offset: t.storage_offset(),
            shape: t.shape().into(),
            strides: t.strides().into(),
            dtype: t.dtype(),
            quantizer: t.quantizer().cloned(),
        })
    }

    /// Whether `t` is the same view of the same storage, unwritten since.
    pub fn matches(&self, t: &Tensor) -> bool {
        self.storage.is(t.storage())
            && self.version == t.storage().version()
            && self.offset == t.storage_offset()
            && *self.shape == *t.shape()
            && *self.strides == *t.strides()
            && self.dtype == t.dtype()
            && match (&self.quantizer, t.quantizer()) {
                (None, None) => true,
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                _ => false,
            }
    }

    /// Whether nothing can match the stamp again: its storage is gone or was written since
    /// (versions only grow).
    pub fn is_stale(&self) -> bool {
        self.storage.version() != Some(self.version)
    }
}
