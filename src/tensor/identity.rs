//! Tensor identity. tsrun's tensors are values (a storage handle plus geometry), so "the same
//! tensor" referenced from several places (an LSTM's parameters and its `_flat_weights` list) is
//! recognised by storage, geometry, dtype and `requires_grad`. PyTorch keys the same questions on
//! the `TensorImpl`; two PyTorch tensors that agree on all of these are indistinguishable here.

use super::{DType, Tensor};

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
