//! Tensors: a dtype, a shape, strides and an offset over a shared [`Storage`], as in PyTorch.
//!
//! Views (`as_strided`, and every shape op built on it) share the storage, so in-place writes
//! through a view change the base. Kernels read and write through ndarray views borrowed from
//! the guards of [`Tensor::read`] and [`Tensor::write`].

#![deny(missing_docs)]

pub mod budget;
mod dtype;
pub mod element;
pub mod float8;
mod identity;
mod nested;
pub mod npy;
mod pool;
pub mod promote;
mod quantizer;
mod scalar;
mod sparse;
mod storage;

pub use dtype::DType;
pub use element::Element;
pub use identity::{TensorIdentity, ViewStamp};
pub use nested::{nested_contiguous_geometry, NestedParts};
pub use quantizer::{pack_nibbles, unpack_nibbles, Quantizer};
pub use scalar::Scalar;
pub use sparse::{sparse_size, validate_compressed_indices, Layout, SparseParts};
pub use storage::{
    AllocError, BorrowError, Storage, StorageRead, StorageWrite, WeakStorage, STORAGE_ALIGN,
};

use ndarray::{ArrayD, ArrayViewD, ArrayViewMutD, IxDyn, ShapeBuilder};
use smallvec::SmallVec;

/// A tensor's sizes (inline up to 4 dimensions). Four, not more: with smallvec's `union`
/// layout a `Tensor` stays small enough that an `IValue` (which holds one by value and is
/// moved at every interpreter instruction) is at most 128 bytes, moved by a few vector
/// stores instead of a `memcpy` call (a third of a batch-1 MLP's time before).
pub type Shape = SmallVec<[usize; 4]>;
/// A tensor's strides in elements (inline up to 4 dimensions, as [`Shape`]).
pub type Strides = SmallVec<[isize; 4]>;

/// Errors from tensor construction and kernels.
#[derive(Debug, thiserror::Error)]
pub enum TensorError {
    /// An operation does not support this dtype.
    #[error("{what}: unsupported dtype {dtype}")]
    UnsupportedDType {
        /// The operation.
        what: String,
        /// The dtype it got.
        dtype: DType,
    },
    /// A convolution whose input and weight dtypes differ (a half model fed float32 input),
    /// with PyTorch's message.
    #[error("{op}: input type ({input}) and weight type ({weight}) should be the same")]
    InputWeightDTypes {
        /// The operation.
        op: String,
        /// The input's dtype.
        input: DType,
        /// The weight's dtype.
        weight: DType,
    },
    /// A convolution input of the wrong rank (an image without its batch or channel
    /// dimension), with PyTorch's message.
    #[error(
        "shape error: {op}: expected {}D (unbatched) or {batched_rank}D (batched) input to conv \
         with weight {weight:?}, but got input of size {input:?}",
        batched_rank - 1
    )]
    ConvInputRank {
        /// The operation.
        op: String,
        /// The rank of a batched input (4 for conv2d).
        batched_rank: usize,
        /// The weight's shape.
        weight: Vec<usize>,
        /// The input's shape.
        input: Vec<usize>,
    },
    /// A convolution input whose channel count does not match the weight, with PyTorch's
    /// message.
    #[error(
        "shape error: {op}: Given groups={groups}, weight of size {weight:?}, expected \
         input{input:?} to have {expected} channels, but got {} channels instead",
        input.get(1).copied().unwrap_or(0)
    )]
    ConvInputChannels {
        /// The operation.
        op: String,
        /// The number of groups.
        groups: usize,
        /// The weight's shape.
        weight: Vec<usize>,
        /// The input's shape (batched).
        input: Vec<usize>,
        /// The channel count the weight expects.
        expected: usize,
    },
    /// A matrix product of operands of two dtypes (no type promotion there, as in PyTorch).
    #[error("{op}: expected both operands to have the same dtype, but got {left} and {right}")]
    OperandDTypes {
        /// The operation.
        op: String,
        /// The left operand's dtype.
        left: DType,
        /// The right operand's dtype.
        right: DType,
    },
    /// A tensor of another dtype was required (PyTorch's message, with c10's dtype names).
    #[error("expected scalar type {} but found {}", expected.c10_name(), got.c10_name())]
    DTypeMismatch {
        /// The dtype required.
        expected: DType,
        /// The dtype given.
        got: DType,
    },
    /// A check of PyTorch's uint8 add and mul kernels (`onednn::qadd.tensor`,
    /// `onednn::qadd_relu.tensor`, `onednn::qmul.tensor`), with PyTorch's message.
    #[error("Quantized {op} {check}")]
    Int8Binary {
        /// `add` or `mul`, as PyTorch's message names the op.
        op: &'static str,
        /// The check that failed.
        check: Int8BinaryCheck,
    },
    /// Incompatible or invalid shapes.
    #[error("shape error: {0}")]
    Shape(String),
    /// Two shapes that do not broadcast: `a` and `b` are their sizes at dimension `dim` of the
    /// broadcast result (PyTorch's message).
    #[error(
        "shape error: The size of tensor a ({a}) must match the size of tensor b ({b}) at \
         non-singleton dimension {dim}"
    )]
    Broadcast {
        /// The first operand's size at `dim`.
        a: usize,
        /// The second operand's size at `dim`.
        b: usize,
        /// The dimension of the broadcast shape.
        dim: usize,
    },
    /// A matrix product whose inner sizes differ (`mat1` is rows x cols of the left operand,
    /// `mat2` of the right), as PyTorch's mm/addmm report it.
    #[error(
        "shape error: {op}: mat1 and mat2 shapes cannot be multiplied ({}x{} and {}x{})",
        mat1[0],
        mat1[1],
        mat2[0],
        mat2[1]
    )]
    MatmulShapes {
        /// The operation PyTorch names (`mm`, `addmm`).
        op: String,
        /// The left operand's rows and columns.
        mat1: [usize; 2],
        /// The right operand's rows and columns.
        mat2: [usize; 2],
    },
    /// An index out of range.
    #[error("index error: {0}")]
    Index(String),
    /// A dimension index outside `[-ndim, ndim)` (a 0-d tensor takes -1 and 0), with PyTorch's
    /// message.
    #[error(
        "index error: Dimension out of range (expected to be in range of [{}, {}], but got {dim})",
        -(ndim.max(&1).to_owned() as i64),
        ndim.max(&1).to_owned() as i64 - 1
    )]
    DimOutOfRange {
        /// The dimension asked for, as given (negative counts from the end).
        dim: i64,
        /// The tensor's number of dimensions.
        ndim: usize,
    },
    /// An index outside `[-size, size)` of a dimension (`index_select`, `gather`, advanced
    /// indexing, ...), with PyTorch's message.
    #[error("index error: index {index} is out of bounds for dimension {dim} with size {size}")]
    IndexOutOfBounds {
        /// The index as given (negative counts from the end where the op allows it).
        index: i64,
        /// The dimension indexed.
        dim: usize,
        /// The dimension's size.
        size: usize,
    },
    /// `select` of an index outside its dimension, with PyTorch's message.
    #[error(
        "index error: select(): index {index} out of range for tensor of size {shape:?} at \
         dimension {dim}"
    )]
    SelectOutOfRange {
        /// The index as given.
        index: i64,
        /// The dimension (after wrapping a negative one).
        dim: usize,
        /// The tensor's shape.
        shape: Vec<usize>,
    },
    /// `narrow` past a dimension's end, with PyTorch's message (`start` after wrapping).
    #[error("index error: start ({start}) + length ({length}) exceeds dimension size ({size}).")]
    NarrowOutOfRange {
        /// The first position.
        start: i64,
        /// The number of positions.
        length: i64,
        /// The dimension's size.
        size: i64,
    },
    /// A lookup outside its table (an embedding's rows, `index_select`'s dimension). PyTorch's
    /// message ("index out of range in self") names neither; tsrun appends both.
    #[error("index error: {op}: index out of range in self (index {index}, size {size})")]
    LookupOutOfRange {
        /// The operation.
        op: String,
        /// The first index out of range.
        index: i64,
        /// The table's size (rows of an embedding, the indexed dimension's size).
        size: usize,
    },
    /// A `view`/`reshape` target shape whose element count differs from the tensor's, with
    /// PyTorch's message.
    #[error("shape error: shape '{shape:?}' is invalid for input of size {numel}")]
    InvalidShape {
        /// The requested shape as given (`-1` for an inferred dimension).
        shape: Vec<i64>,
        /// The tensor's number of elements.
        numel: usize,
    },
    /// A kernel for strided tensors got a sparse one (PyTorch: "Could not run 'aten::foo'
    /// with arguments from the 'SparseCPU' backend").
    #[error("unsupported: {}", not_strided_message(op.as_deref(), *layout))]
    NotStrided {
        /// The operator, when the refusal knows it (the traceback frame names it otherwise).
        op: Option<String>,
        /// The argument's layout.
        layout: Layout,
    },
    /// A kernel without a nested-tensor implementation got a nested tensor (PyTorch: "Could
    /// not run 'aten::foo' with arguments from the 'NestedTensorCPU' backend").
    #[error("unsupported: {}", nested_message(op.as_deref()))]
    NestedNotSupported {
        /// The operator, when the refusal knows it.
        op: Option<String>,
    },
    /// A kernel PyTorch does not instantiate for this dtype, with its dispatcher's message
    /// (`"add_stub" not implemented for 'Bool'`); the operator is in the traceback's frame.
    #[error("\"{kernel}\" not implemented for '{}'", dtype.c10_name())]
    NotImplementedForDType {
        /// The kernel PyTorch names (`add_stub`, `lt_cpu`).
        kernel: String,
        /// The dtype it got.
        dtype: DType,
    },
    /// A tensor argument of a dtype the operator does not take (an integer tensor where a
    /// floating-point one is needed).
    #[error("{op}: expected {argument} to be {expected}, but got {got}")]
    WrongDType {
        /// The operation.
        op: String,
        /// The argument (`input`, `weight`, `index`).
        argument: String,
        /// What it must be (`a floating-point tensor`, `int64`).
        expected: String,
        /// The dtype given.
        got: DType,
    },
    /// An out= call whose result's dtype cannot be cast to its out tensor's (PyTorch's
    /// `canCast`: no complex to real, floating to integral, or non-bool to bool).
    #[error(
        "{op}: result type {} can't be cast to the desired output type {}",
        result.c10_name(),
        out.c10_name()
    )]
    OutDTypeCast {
        /// The out= overload (`aten::div.out`).
        op: String,
        /// The dtype of the result.
        result: DType,
        /// The out tensor's dtype.
        out: DType,
    },
    /// A tensor argument with the wrong number of dimensions.
    #[error(
        "shape error: {op}: expected {argument} to be {expected}, but got a {}-D tensor of \
         shape {shape:?}",
        shape.len()
    )]
    RankMismatch {
        /// The operation.
        op: String,
        /// The argument (`input`, `weight`).
        argument: String,
        /// The ranks it may have.
        expected: RankRequirement,
        /// Its shape.
        shape: Vec<usize>,
    },
    /// A tensor argument whose shape is not the one the operator or its other arguments
    /// require.
    #[error("shape error: {op}: expected {argument} of shape {expected:?}, but got {got:?}")]
    ShapeMismatch {
        /// The operation.
        op: String,
        /// The argument (`weight`, `bias`, `out`).
        argument: String,
        /// The shape required.
        expected: Vec<usize>,
        /// The shape given.
        got: Vec<usize>,
    },
    /// A count that must equal another: a dimension's size, a list's length, a number of
    /// channels or of elements.
    #[error("shape error: {op}: expected {what} to be {expected}, but got {got}")]
    SizeMismatch {
        /// The operation.
        op: String,
        /// What is counted (`the length of output_size`, `input.size(1)`).
        what: String,
        /// The count required.
        expected: i64,
        /// The count given.
        got: i64,
    },
    /// An argument value outside what the operator accepts (a negative size, a probability
    /// above 1, an unknown mode string).
    #[error("value error: {op}: {argument} {requirement}, but got {value}")]
    InvalidArgument {
        /// The operation.
        op: String,
        /// The argument (`p`, `size`, `reduction`).
        argument: String,
        /// What it must satisfy, as a phrase after the argument's name (`must be in [0, 1]`).
        requirement: String,
        /// The value given, as text (`1.5`, `[2, -1]`, `'bogus'`).
        value: String,
    },
    /// A feature of an operator that PyTorch supports and tsrun does not implement (a mode,
    /// an argument combination, a layout).
    #[error("unsupported: {op}: {feature} is not supported by tsrun")]
    UnsupportedFeature {
        /// The operation.
        op: String,
        /// The feature (`padding_mode='circular' on 3-D input`).
        feature: String,
    },
    /// An invalid argument value.
    #[error("value error: {0}")]
    Value(String),
    /// A view whose elements would lie outside its storage.
    #[error("tensor view out of bounds: {0}")]
    OutOfBounds(String),
    /// An operation tsrun does not implement for these arguments.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A write to a tensor whose elements overlap, or that partially overlaps an input.
    #[error("{0}")]
    InternalOverlap(String),
    /// The storage is borrowed in a conflicting mode.
    #[error(transparent)]
    Borrow(#[from] BorrowError),
    /// The storage could not be allocated.
    #[error(transparent)]
    Alloc(#[from] AllocError),
}

type TResult<T> = std::result::Result<T, TensorError>;

/// The checks of PyTorch's uint8 add and mul kernels ([`TensorError::Int8Binary`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Int8BinaryCheck {
    /// The operands' shapes differ (no broadcasting).
    SameSize,
    /// An operand is not uint8.
    OperandDTypes {
        /// The first operand's dtype.
        left: DType,
        /// The second operand's dtype.
        right: DType,
    },
    /// The output dtype is not uint8, float32, bfloat16 or float16.
    OutputDType(DType),
    /// A float output was asked for with an output scale other than 1 or zero point other
    /// than 0.
    FloatOutputParams {
        /// The output dtype.
        dtype: DType,
        /// The scale as C++ streams a double (`%g`).
        scale: String,
        /// The zero point.
        zero_point: i64,
    },
}

impl std::fmt::Display for Int8BinaryCheck {
    /// PyTorch's message after `Quantized add `, with c10's dtype names.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Int8BinaryCheck::SameSize => f.write_str("operands should have the same size."),
            Int8BinaryCheck::OperandDTypes { left, right } => write!(
                f,
                "operands should be of type uint8, but got {} and {}",
                left.c10_name(),
                right.c10_name()
            ),
            Int8BinaryCheck::OutputDType(got) => write!(
                f,
                "output should be of type uint8, float, bfloat16 or float16, but got {}",
                got.c10_name()
            ),
            Int8BinaryCheck::FloatOutputParams {
                dtype,
                scale,
                zero_point,
            } => write!(
                f,
                "output scale and zero point should be 1 and 0 for output_dtype {}, but got \
                 scale = {scale} and zero point = {zero_point}",
                dtype.c10_name()
            ),
        }
    }
}

/// The numbers of dimensions a tensor argument may have ([`TensorError::RankMismatch`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RankRequirement {
    /// Exactly this many.
    Exactly(usize),
    /// One of these (`[3, 4]`: unbatched or batched).
    OneOf(Vec<usize>),
    /// At least this many.
    AtLeast(usize),
    /// At most this many.
    AtMost(usize),
}

impl std::fmt::Display for RankRequirement {
    /// `2-D`, `3-D or 4-D`, `at least 1-D`, `at most 2-D`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RankRequirement::Exactly(n) => write!(f, "{n}-D"),
            RankRequirement::OneOf(ns) => {
                for (i, n) in ns.iter().enumerate() {
                    let sep = match i {
                        0 => "",
                        _ if i + 1 == ns.len() => " or ",
                        _ => ", ",
                    };
                    write!(f, "{sep}{n}-D")?;
                }
                Ok(())
            }
            RankRequirement::AtLeast(n) => write!(f, "at least {n}-D"),
            RankRequirement::AtMost(n) => write!(f, "at most {n}-D"),
        }
    }
}

impl RankRequirement {
    /// Whether a tensor of `ndim` dimensions meets it.
    pub fn accepts(&self, ndim: usize) -> bool {
        match self {
            RankRequirement::Exactly(n) => ndim == *n,
            RankRequirement::OneOf(ns) => ns.contains(&ndim),
            RankRequirement::AtLeast(n) => ndim >= *n,
            RankRequirement::AtMost(n) => ndim <= *n,
        }
    }
}

/// [`TensorError::NotStrided`]'s text: PyTorch's dispatcher message when the operator is known.
fn not_strided_message(op: Option<&str>, layout: Layout) -> String {
    match op {
        Some(op) => format!(
            "Could not run '{op}' with arguments from the '{}' backend: tsrun implements it for strided tensors only, got a {layout} tensor",
            layout.backend()
        ),
        None => format!(
            "a {layout} tensor where a strided one is needed (its elements are in its indices and values; to_dense() makes a strided copy)"
        ),
    }
}

/// [`TensorError::NestedNotSupported`]'s text: PyTorch's dispatcher message when the operator
/// is known.
fn nested_message(op: Option<&str>) -> String {
    match op {
        Some(op) => format!(
            "Could not run '{op}' with arguments from the 'NestedTensorCPU' backend: tsrun has no nested-tensor kernel for it"
        ),
        None => "a nested tensor where a strided one is needed (its elements are in its components; to_padded_tensor() makes a strided copy)".into(),
    }
}

/// The parts of a tensor that is not a plain strided one.
#[derive(Debug)]
enum LayoutParts {
    /// A sparse layout's index and value tensors.
    Sparse(SparseParts),
    /// A nested tensor's buffer and component geometry.
    Nested(NestedParts),
}

/// Row-major (C-contiguous) strides for `shape`.
pub fn contiguous_strides(shape: &[usize]) -> Strides {
    let mut strides: Strides = SmallVec::from_elem(0, shape.len());
    let mut acc: isize = 1;
    for i in (0..shape.len()).rev() {
        strides[i] = acc;
        acc = acc.saturating_mul(shape[i].max(1) as isize);
    }
    strides
}

/// Wrap a possibly negative dimension index as PyTorch does (`dim=-1` is the last).
/// A 0-d tensor accepts dims -1 and 0.
pub fn wrap_dim(dim: i64, ndim: usize) -> TResult<usize> {
    let n = ndim.max(1) as i64;
    let d = if dim < 0 { dim + n } else { dim };
    if d < 0 || d >= n {
        return Err(TensorError::DimOutOfRange { dim, ndim });
    }
    Ok(d as usize)
}

/// Checked product of a shape.
pub fn checked_numel(shape: &[usize]) -> TResult<usize> {
    shape.iter().try_fold(1usize, |acc, &s| {
        acc.checked_mul(s)
            .ok_or_else(|| TensorError::Shape(format!("numel of shape {shape:?} overflows")))
    })
}

/// How the memory of two tensors relates (PyTorch's `MemOverlapStatus`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemOverlap {
    /// Disjoint memory (or different storages).
    No,
    /// The same elements in the same layout.
    Full,
    /// Some, but not all, elements shared.
    Partial,
    /// A layout with gaps or repeats, which PyTorch does not analyse.
    TooHard,
}

/// A strided view over a shared storage.
#[derive(Clone)]
pub struct Tensor {
    storage: Storage,
    /// Offset of element 0, in elements of `dtype`.
    offset: usize,
    shape: Shape,
    strides: Strides,
    dtype: DType,
    requires_grad: bool,
    /// Set for quantized dtypes (`qint8`, ...): how the integers map to reals.
    quantizer: Option<std::sync::Arc<Quantizer>>,
    /// Set for sparse layouts and nested tensors: the component tensors (the tensor then
    /// addresses no elements). One pointer for both keeps an `IValue` within 128 bytes.
    parts: Option<std::sync::Arc<LayoutParts>>,
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Tensor(dtype={}, shape={:?}, strides={:?}, offset={})",
            self.dtype,
            self.shape.as_slice(),
            self.strides.as_slice(),
            self.offset
        )
    }
}

impl Tensor {
    /// A view of `storage`; checks that every addressed element lies inside it.
    pub fn from_parts(
        storage: Storage,
        offset: usize,
        shape: &[usize],
        strides: &[isize],
        dtype: DType,
    ) -> TResult<Tensor> {
        if shape.len() != strides.len() {
            return Err(TensorError::SizeMismatch {
                op: "as_strided".into(),
                what: format!("the length of strides {strides:?} (of shape {shape:?})"),
                expected: shape.len() as i64,
                got: strides.len() as i64,
            });
        }
        let extent = storage_extent(offset, shape, strides)?;
        let need = extent
            .checked_mul(dtype.size())
            .ok_or_else(|| TensorError::OutOfBounds("byte extent overflows".into()))?;
        if need > storage.nbytes() {
            return Err(TensorError::OutOfBounds(format!(
                "a {dtype} tensor of shape {shape:?}, strides {strides:?}, offset {offset} needs {need} bytes, storage has {}",
                storage.nbytes()
            )));
        }
        if storage.alignment() < dtype.size().min(8) && storage.nbytes() > 0 {
            return Err(TensorError::OutOfBounds(format!(
                "storage is not aligned for {dtype}"
            )));
        }
        Ok(Tensor {
            storage,
            offset,
            shape: shape.into(),
            strides: strides.into(),
            dtype,
            requires_grad: false,
            quantizer: None,
            parts: None,
        })
    }

    /// A zero-filled contiguous tensor.
    pub fn zeros(shape: &[usize], dtype: DType) -> TResult<Tensor> {
        Tensor::contiguous_over(shape, dtype, Storage::zeroed)
    }

    /// A contiguous tensor whose elements are unspecified (`torch.empty`): for a kernel that
    /// writes every element of its result, so zero-filling first would be wasted work. The
    /// bytes are always initialized (a reused buffer keeps its old values).
    pub fn empty(shape: &[usize], dtype: DType) -> TResult<Tensor> {
        if dtype == DType::Bool {
            // bool access checks every byte is 0 or 1, so reused bytes must be cleared
            return Tensor::zeros(shape, dtype);
        }
        Tensor::contiguous_over(shape, dtype, Storage::for_overwrite)
    }

    fn contiguous_over(
        shape: &[usize],
        dtype: DType,
        alloc: fn(usize) -> Result<Storage, AllocError>,
    ) -> TResult<Tensor> {
        let n = checked_numel(shape)?;
        let nbytes = n
            .checked_mul(dtype.size())
            .ok_or_else(|| TensorError::InvalidArgument {
                op: "zeros".into(),
                argument: "size".into(),
                requirement: format!("must have a byte size ({dtype}) that fits in memory"),
                value: format!("{shape:?}"),
            })?;
        let storage = alloc(nbytes)?;
        Ok(Tensor {
            storage,
            offset: 0,
            shape: shape.into(),
            strides: contiguous_strides(shape),
            dtype,
            requires_grad: false,
            quantizer: None,
            parts: None,
        })
    }

    /// A contiguous tensor that takes `data` (row-major) as its elements.
    pub fn from_vec<T: Element>(data: Vec<T>, shape: &[usize]) -> TResult<Tensor> {
        let n = checked_numel(shape)?;
        if n != data.len() {
            return Err(fill_mismatch(shape, n, data.len()));
        }
        Tensor::from_slice(&data, shape)
    }

    /// A contiguous tensor holding a copy of `data`.
    pub fn from_slice<T: Element>(data: &[T], shape: &[usize]) -> TResult<Tensor> {
        let n = checked_numel(shape)?;
        if n != data.len() {
            return Err(fill_mismatch(shape, n, data.len()));
        }
        let storage = Storage::from_bytes(bytemuck_bytes(data))?;
        Ok(Tensor {
            storage,
            offset: 0,
            shape: shape.into(),
            strides: contiguous_strides(shape),
            dtype: T::DTYPE,
            requires_grad: false,
            quantizer: None,
            parts: None,
        })
    }

    /// A contiguous tensor from an ndarray of any dimension (copied into row-major order).
    pub fn from_ndarray<T: Element, D: ndarray::Dimension>(
        a: ndarray::Array<T, D>,
    ) -> TResult<Tensor> {
        let shape: Vec<usize> = a.shape().to_vec();
        match a.as_slice() {
            Some(s) => Tensor::from_slice(s, &shape),
            None => {
                let v: Vec<T> = a.iter().copied().collect();
                Tensor::from_vec(v, &shape)
            }
        }
    }

    /// A 0-d tensor.
    pub fn scalar<T: Element>(v: T) -> Tensor {
        // A single element always fits; fall back to an empty-shape error only on OOM.
        Tensor::from_slice(&[v], &[]).unwrap_or_else(|_| std::process::abort())
    }

    /// A 0-d tensor holding `s` converted to `dtype`.
    pub fn from_scalar(s: Scalar, dtype: DType) -> crate::Result<Tensor> {
        let t = Tensor::zeros(&[], dtype)?;
        t.fill(s)?;
        Ok(t)
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// The sizes (`tensor.shape`).
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    /// The strides, in elements (`tensor.stride()`).
    pub fn strides(&self) -> &[isize] {
        &self.strides
    }
    /// The offset of the first element in the storage, in elements.
    pub fn storage_offset(&self) -> usize {
        self.offset
    }
    /// The storage the tensor views.
    pub fn storage(&self) -> &Storage {
        &self.storage
    }
    /// The number of dimensions.
    pub fn dim(&self) -> usize {
        self.shape.len()
    }
    /// The number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
    /// Whether the tensor is marked as requiring grad (tsrun keeps the flag; it has no autograd).
    pub fn requires_grad(&self) -> bool {
        self.requires_grad
    }
    /// Mark or unmark the tensor as requiring grad.
    pub fn set_requires_grad(&mut self, r: bool) {
        self.requires_grad = r;
    }
    /// `size(dim)` with negative dims wrapped.
    pub fn size(&self, dim: i64) -> TResult<usize> {
        let d = wrap_dim(dim, self.dim())?;
        match self.nested_parts() {
            // a nested tensor has a size only where its components agree
            Some(p) if d > 0 => p
                .regular_size(d - 1)
                .ok_or_else(|| TensorError::InvalidArgument {
                    op: "size".into(),
                    argument: "dim".into(),
                    requirement: "must be a regular dimension of the nested tensor".into(),
                    value: d.to_string(),
                }),
            _ => Ok(self.shape[d]),
        }
    }

    /// Whether two tensors view the same storage.
    pub fn shares_storage(&self, other: &Tensor) -> bool {
        self.storage.same(&other.storage)
    }

    /// PyTorch's `is_non_overlapping_and_dense()`: some permutation of the dims is contiguous,
    /// so the elements fill `numel` consecutive slots with no gaps or repeats.
    pub fn is_non_overlapping_and_dense(&self) -> bool {
        let mut dims: SmallVec<[(isize, usize); 6]> = self
            .shape
            .iter()
            .zip(&self.strides)
            .filter(|(&size, _)| size >= 2)
            .map(|(&size, &stride)| (stride, size))
            .collect();
        dims.sort_unstable();
        let mut required: isize = 1;
        for (stride, size) in dims {
            if stride != required {
                return false;
            }
            required = required.saturating_mul(size as isize);
        }
        true
    }

    /// How this tensor's memory relates to `other`'s (PyTorch's `get_overlap_status`).
    pub fn overlap_with(&self, other: &Tensor) -> MemOverlap {
        if self.numel() == 0 || other.numel() == 0 || !self.shares_storage(other) {
            return MemOverlap::No;
        }
        if !self.is_non_overlapping_and_dense() || !other.is_non_overlapping_and_dense() {
            return MemOverlap::TooHard;
        }
        // Dense layouts cover [start, start + numel) elements from their lowest address.
        let span = |t: &Tensor| {
            let low = t
                .shape
                .iter()
                .zip(&t.strides)
                .filter(|(&n, &s)| n > 1 && s < 0)
                .map(|(&n, &s)| s.unsigned_abs() * (n - 1))
                .sum::<usize>();
            let start = (t.offset.saturating_sub(low)) * t.dtype.size();
            (start, start + t.numel() * t.dtype.size())
        };
        let (a_start, a_end) = span(self);
        let (b_start, b_end) = span(other);
        if a_start == b_start && a_end == b_end {
            if self.strides == other.strides {
                MemOverlap::Full
            } else {
                MemOverlap::Partial
            }
        } else if a_start < b_end && b_start < a_end {
            MemOverlap::Partial
        } else {
            MemOverlap::No
        }
    }

    /// PyTorch's `assert_no_partial_overlap(self, input)` before writing `self`: an input that
    /// shares some but not all of the written memory would be read while it is overwritten.
    pub fn check_no_partial_overlap(&self, input: &Tensor) -> TResult<()> {
        if self.overlap_with(input) == MemOverlap::Partial {
            return Err(TensorError::InternalOverlap(
                "unsupported operation: some elements of the input tensor and the written-to tensor refer to a single memory location. Please clone() the tensor before performing the operation.".into(),
            ));
        }
        Ok(())
    }

    /// PyTorch's `is_contiguous()`: strides of size-1 dims are ignored.
    pub fn is_contiguous(&self) -> bool {
        let mut expected: isize = 1;
        for i in (0..self.dim()).rev() {
            let s = self.shape[i];
            if s == 0 {
                return true;
            }
            if s != 1 {
                if self.strides[i] != expected {
                    return false;
                }
                expected *= s as isize;
            }
        }
        true
    }

    /// A view with new geometry over the same storage (bounds-checked).
    pub fn as_strided(&self, shape: &[usize], strides: &[isize], offset: usize) -> TResult<Tensor> {
        self.check_strided()?;
        let mut t = Tensor::from_parts(self.storage.clone(), offset, shape, strides, self.dtype)?;
        t.requires_grad = self.requires_grad;
        t.quantizer = self.quantizer.clone();
        Ok(t)
    }

    /// Replace geometry in place without copying (used by `as_strided_`, `resize_`-like ops).
    pub fn set_geometry(
        &mut self,
        shape: &[usize],
        strides: &[isize],
        offset: usize,
    ) -> TResult<()> {
        let t = self.as_strided(shape, strides, offset)?;
        *self = t;
        Ok(())
    }

    /// Shared, typed access to the elements (fails if `T` is not this tensor's element type, or if
    /// a write to the storage is in progress). Views and slices borrow the returned guard, so none
    /// can outlive it.
    pub fn read<T: Element>(&self) -> TResult<TensorRead<T>> {
        self.check_strided()?;
        self.check_dtype::<T>()?;
        let borrow = self.storage.read()?;
        check_bool_bytes::<T>(&self.storage, &borrow)?;
        let ptr = if self.numel() == 0 {
            // An empty tensor addresses no memory (its offset may lie past the storage's end).
            std::ptr::NonNull::<T>::dangling().as_ptr() as *const T
        } else {
            // SAFETY: from_parts checked that the offset lies inside the storage for non-empty views.
            unsafe { (borrow.as_ptr() as *const T).add(self.offset) }
        };
        Ok(TensorRead {
            tensor: self.clone(),
            _borrow: borrow,
            ptr,
        })
    }

    /// Exclusive, typed write access to the elements, for in-place kernels and for filling fresh
    /// outputs. The write is visible through every tensor sharing the storage (PyTorch's aliasing
    /// model). Fails with PyTorch's error when several elements share one memory location
    /// (`expand`ed views), and while any other guard on the storage is live — so a kernel must copy
    /// an input that shares the output's storage before it writes.
    pub fn write<T: Element>(&self) -> TResult<TensorWrite<T>> {
        self.check_strided()?;
        self.check_dtype::<T>()?;
        self.check_no_internal_overlap()?;
        let mut borrow = self.storage.write()?;
        check_bool_bytes::<T>(&self.storage, &borrow)?;
        let ptr = if self.numel() == 0 {
            std::ptr::NonNull::<T>::dangling().as_ptr()
        } else {
            // SAFETY: as in `read`.
            unsafe { (borrow.as_mut_ptr() as *mut T).add(self.offset) }
        };
        Ok(TensorWrite {
            tensor: self.clone(),
            _borrow: borrow,
            ptr,
        })
    }

    /// PyTorch's `assert_no_internal_overlap`, made exact: writing through a view whose elements
    /// share memory is refused (ndarray forbids such mutable views). A stride-0 dimension of more
    /// than one element gets PyTorch's message; other overlapping `as_strided` layouts, which
    /// PyTorch writes element by element in an unspecified order, are refused as unsupported.
    fn check_no_internal_overlap(&self) -> TResult<()> {
        let mut dims: SmallVec<[(usize, usize); 6]> = self
            .shape
            .iter()
            .zip(&self.strides)
            .filter(|(&size, _)| size > 1)
            .map(|(&size, &stride)| (stride.unsigned_abs(), size))
            .collect();
        if self.numel() == 0 {
            return Ok(());
        }
        if dims.iter().any(|&(stride, _)| stride == 0) {
            return Err(TensorError::InternalOverlap(
                "unsupported operation: more than one element of the written-to tensor refers to a single memory location. Please clone() the tensor before performing the operation.".into(),
            ));
        }
        dims.sort_unstable();
        let mut extent = 1usize;
        for (stride, size) in dims {
            if stride < extent {
                return Err(TensorError::InternalOverlap(format!(
                    "unsupported operation: the written-to tensor (shape {:?}, strides {:?}) has elements that overlap in memory. Please clone() the tensor before performing the operation.",
                    self.shape.as_slice(),
                    self.strides.as_slice()
                )));
            }
            extent = stride.saturating_mul(size - 1).saturating_add(extent);
        }
        Ok(())
    }

    /// The shape and strides of an ndarray view. An empty tensor gets ndarray's default
    /// layout: PyTorch leaves its strides arbitrary, and ndarray rejects some when copying.
    fn ndarray_layout(&self) -> ndarray::StrideShape<IxDyn> {
        if self.numel() == 0 {
            return IxDyn(&self.shape).into();
        }
        let strides: Vec<usize> = self.strides.iter().map(|&s| s as usize).collect();
        IxDyn(&self.shape).strides(IxDyn(&strides))
    }

    fn check_dtype<T: Element>(&self) -> TResult<()> {
        if T::DTYPE != self.dtype {
            return Err(TensorError::DTypeMismatch {
                expected: self.dtype,
                got: T::DTYPE,
            });
        }
        Ok(())
    }

    /// An owned row-major copy of the elements; `T` must be the tensor's element type (see
    /// [`Tensor::to_vec`] for a converting copy, and [`Tensor::read`] for a zero-copy view).
    pub fn to_ndarray<T: Element>(&self) -> TResult<ArrayD<T>> {
        Ok(self.read::<T>()?.view().to_owned())
    }

    /// Elements in row-major order, converted to `T` with PyTorch's cast rules.
    pub fn to_vec<T: Element>(&self) -> crate::Result<Vec<T>> {
        // a contiguous copy first: the loop below is instantiated for every pair of dtypes
        let mut c = self.contiguous()?;
        if float8::is_storage_only(c.dtype) {
            c = c.to_dtype(float8::conversion_dtype(c.dtype))?;
        }
        crate::dispatch_all!(c.dtype, "to_vec", |S| {
            let g = c.read::<S>()?;
            let s = g
                .as_slice()
                .ok_or_else(|| TensorError::Value("to_vec: copy is not contiguous".into()))?;
            Ok(s.iter().map(|&x| T::cast_from(x)).collect())
        })
    }

    /// This tensor if already contiguous, otherwise a contiguous copy.
    pub fn contiguous(&self) -> crate::Result<Tensor> {
        if self.is_contiguous() {
            return Ok(self.clone());
        }
        self.deep_clone()
    }

    /// The elements' bytes in row-major order (native little-endian), for writers of raw
    /// formats (npy, safetensors).
    pub fn to_contiguous_bytes(&self) -> crate::Result<Vec<u8>> {
        self.check_strided()?;
        let c = self.contiguous()?;
        let size = c.dtype.size();
        let start = c.offset * size;
        let len = c.numel() * size;
        let bytes = c.storage.read().map_err(TensorError::from)?;
        Ok(bytes
            .get(start..start + len)
            .ok_or_else(|| TensorError::OutOfBounds("contiguous view past its storage".into()))?
            .to_vec())
    }

    /// A contiguous copy with its own storage (`clone()` in PyTorch).
    pub fn deep_clone(&self) -> crate::Result<Tensor> {
        if self.sparse_parts().is_some() {
            return self.sparse_clone();
        }
        if self.is_nested() {
            return self.nested_copy(self.dtype);
        }
        if let Some(q) = self.quantizer() {
            // the integers, copied row-major, under the same parameters
            let ints = self.int_repr_view()?.deep_clone()?;
            return Ok(Tensor::quantized_from_ints(&ints, (**q).clone())?);
        }
        let out = Tensor::zeros(&self.shape, self.dtype)?;
        out.copy_from(self)?;
        let mut out = out;
        out.requires_grad = self.requires_grad;
        Ok(out)
    }

    /// `self.to(dtype)`: the same tensor when the dtype matches, else a converted copy.
    pub fn to_dtype(&self, dtype: DType) -> crate::Result<Tensor> {
        if dtype == self.dtype {
            return Ok(self.clone());
        }
        if let Some(parts) = self.sparse_parts() {
            return Ok(self.with_sparse_values(parts.values().to_dtype(dtype)?)?);
        }
        if self.is_nested() {
            return self.nested_copy(dtype);
        }
        let out = Tensor::zeros(&self.shape, dtype)?;
        out.copy_from(self)?;
        Ok(out)
    }

    /// `self.copy_(src)`: broadcast `src` to this shape and write it, converting the dtype.
    pub fn copy_from(&self, src: &Tensor) -> crate::Result<()> {
        if self.is_quantized() || src.is_quantized() {
            return self.copy_quantized_from(src);
        }
        let src = if src.shares_storage(self) {
            src.deep_clone()?
        } else {
            src.clone()
        };
        if src.dtype == self.dtype {
            if let (Some(dst_bits), Some(src_bits)) = (self.as_bits()?, src.as_bits()?) {
                return dst_bits.copy_from(&src_bits);
            }
            return crate::dispatch_all!(self.dtype, "copy_", |T| self.copy_same_dtype::<T>(&src));
        }
        // A conversion is instantiated for every pair of dtypes (225), so only a loop over two
        // contiguous slices is per pair (`cast_contiguous`); strides and broadcasting go
        // through a same-dtype copy, of a converted contiguous copy when they are needed.
        let src = src.contiguous()?;
        if self.shape == src.shape && self.is_contiguous() {
            return cast_contiguous(self, &src);
        }
        let converted = Tensor::zeros(&src.shape, self.dtype)?;
        cast_contiguous(&converted, &src)?;
        self.copy_from(&converted)
    }

    /// [`Tensor::copy_from`] of a source of this tensor's dtype `T`, broadcast to this shape.
    fn copy_same_dtype<T: Element>(&self, src: &Tensor) -> crate::Result<()> {
        let sg = src.read::<T>()?;
        let mut dg = self.write::<T>()?;
        if self.shape == src.shape {
            if let (Some(s), Some(d)) = (sg.as_slice(), dg.as_slice_mut()) {
                d.copy_from_slice(s);
                return Ok(());
            }
        }
        let sv = sg.view();
        let sv = sv
            .broadcast(IxDyn(&self.shape))
            .ok_or_else(|| TensorError::InvalidArgument {
                op: "copy_".into(),
                argument: "src".into(),
                requirement: format!("must broadcast to self's shape {:?}", self.shape()),
                value: format!("{:?}", src.shape()),
            })?;
        dg.view_mut().assign(&sv);
        Ok(())
    }

    /// `copy_` where either side is quantized: the integers are copied when both sides are
    /// quantized alike. PyTorch would also replace the destination's parameters with the
    /// source's; a tensor's parameters here are fixed, so differing ones are refused.
    fn copy_quantized_from(&self, src: &Tensor) -> crate::Result<()> {
        match (self.quantizer(), src.quantizer()) {
            (Some(d), Some(s)) if self.dtype == src.dtype && d == s => {
                self.int_repr_view()?.copy_from(&src.int_repr_view()?)
            }
            (Some(_), Some(_)) => Err(TensorError::UnsupportedFeature {
                op: "copy_".into(),
                feature: format!(
                    "copying between quantized tensors of different dtypes or parameters ({} \
                     into {})",
                    src.dtype, self.dtype
                ),
            }
            .into()),
            (None, Some(_)) => Err(TensorError::WrongDType {
                op: "copy_".into(),
                argument: "src".into(),
                expected: "not quantized when self is not (dequantize it first)".into(),
                got: src.dtype,
            }
            .into()),
            _ => Err(TensorError::WrongDType {
                op: "copy_".into(),
                argument: "src".into(),
                expected: "quantized like self (quantize it first)".into(),
                got: src.dtype,
            }
            .into()),
        }
    }

    /// A float8 or complex32 tensor's elements viewed as the integers of their size (`uint8`,
    /// `int32`), for kernels that only move elements (copies, gathers), as PyTorch's do
    /// bitwise; `None` for other dtypes.
    pub fn as_bits(&self) -> TResult<Option<Tensor>> {
        let Some(bits) = float8::bits_dtype(self.dtype) else {
            return Ok(None);
        };
        let mut view = Tensor::from_parts(
            self.storage.clone(),
            self.offset,
            &self.shape,
            &self.strides,
            bits,
        )?;
        view.requires_grad = self.requires_grad;
        Ok(Some(view))
    }

    /// Set every element to `s` (converted to this dtype).
    pub fn fill(&self, s: Scalar) -> crate::Result<()> {
        if float8::is_storage_only(self.dtype) {
            if float8::fill_overflows(self.dtype, s) {
                return Err(TensorError::Value(format!(
                    "value cannot be converted to type c10::{} without overflow",
                    self.dtype.c10_name()
                ))
                .into());
            }
            return crate::dispatch_storage_only!(self.dtype, "fill_", |T| self.fill_as::<T>(s));
        }
        crate::dispatch_all!(self.dtype, "fill_", |T| self.fill_as::<T>(s))
    }

    /// [`Tensor::fill`] for this tensor's element type `T`.
    fn fill_as<T: Element>(&self, s: Scalar) -> crate::Result<()> {
        let v: T = match s {
            Scalar::Bool(b) => T::from_bool(b),
            Scalar::Int(i) => T::from_i64(i),
            Scalar::Float(f) => T::from_f64(f),
            Scalar::Complex(c) => T::from_c64(c),
        };
        self.write::<T>()?.view_mut().fill(v);
        Ok(())
    }

    /// The single element of a one-element tensor (`item()`).
    pub fn item(&self) -> crate::Result<Scalar> {
        if self.numel() != 1 {
            return Err(TensorError::SizeMismatch {
                op: "item".into(),
                what: "the number of elements".into(),
                expected: 1,
                got: self.numel() as i64,
            }
            .into());
        }
        if float8::is_storage_only(self.dtype) {
            return crate::dispatch_storage_only!(self.dtype, "item", |T| self.item_as::<T>());
        }
        crate::dispatch_all!(self.dtype, "item", |T| self.item_as::<T>())
    }

    /// [`Tensor::item`] for this tensor's element type `T`.
    fn item_as<T: Element>(&self) -> crate::Result<Scalar> {
        let v = *self
            .read::<T>()?
            .view()
            .iter()
            .next()
            .ok_or_else(|| TensorError::Value("empty tensor".into()))?;
        Ok(if T::DTYPE == DType::Bool {
            Scalar::Bool(v.to_bool())
        } else if T::DTYPE.is_complex() {
            Scalar::Complex(v.to_c64())
        } else if T::DTYPE.is_floating_point() {
            Scalar::Float(v.to_f64())
        } else {
            Scalar::Int(v.to_i64())
        })
    }
}

/// A shared borrow of a tensor's elements as `T` ([`Tensor::read`]). The guard holds its own
/// handle to the tensor, so the tensor may be moved while the guard lives; views and slices
/// borrow the guard.
pub struct TensorRead<T> {
    tensor: Tensor,
    _borrow: StorageRead,
    ptr: *const T,
}

impl<T: Element> TensorRead<T> {
    /// A strided ndarray view of the elements.
    pub fn view(&self) -> ArrayViewD<'_, T> {
        // SAFETY: from_parts checked that every element addressed by (offset, shape, strides) lies
        // inside the storage with non-negative strides; the read borrow keeps writers out, and the
        // view borrows `self`, so it cannot outlive the borrow.
        unsafe { ArrayViewD::from_shape_ptr(self.tensor.ndarray_layout(), self.ptr) }
    }

    /// The elements as a slice, in row-major order, when the tensor is contiguous.
    pub fn as_slice(&self) -> Option<&[T]> {
        if !self.tensor.is_contiguous() {
            return None;
        }
        // SAFETY: contiguous and in bounds (checked at construction), element type checked, and
        // the slice borrows the guard.
        Some(unsafe { std::slice::from_raw_parts(self.ptr, self.tensor.numel()) })
    }

    /// The first element's address, valid for reads while the guard lives.
    pub fn as_ptr(&self) -> *const T {
        self.ptr
    }

    /// Every element from the first addressed one to the last, as one slice, for kernels that
    /// walk strides themselves: element `(i0, i1, ...)` is `span()[i0 * strides[0] + i1 *
    /// strides[1] + ...]`. Elements in between that the view does not address are included.
    /// Empty for an empty tensor.
    pub fn span(&self) -> &[T] {
        let t = &self.tensor;
        let len = if t.numel() == 0 {
            0
        } else {
            1 + t
                .shape
                .iter()
                .zip(&t.strides)
                .map(|(&s, &st)| (s - 1) * st.unsigned_abs())
                .sum::<usize>()
        };
        // SAFETY: `from_parts` checked that the offset plus this extent (strides are
        // non-negative) lies inside the storage; the read borrow covers the whole storage, whose
        // bool bytes `read` checked, so every element of the span is valid; the slice borrows the
        // guard. An empty tensor gives a dangling pointer with length 0.
        unsafe { std::slice::from_raw_parts(self.ptr, len) }
    }
}

/// An exclusive borrow of a tensor's elements as `T` ([`Tensor::write`]); see [`TensorRead`].
pub struct TensorWrite<T> {
    tensor: Tensor,
    _borrow: StorageWrite,
    ptr: *mut T,
}

impl<T: Element> TensorWrite<T> {
    /// A read-only view of the elements.
    pub fn view(&self) -> ArrayViewD<'_, T> {
        // SAFETY: as in `TensorRead::view`; the exclusive borrow is held.
        unsafe { ArrayViewD::from_shape_ptr(self.tensor.ndarray_layout(), self.ptr) }
    }

    /// A writable strided ndarray view of the elements.
    pub fn view_mut(&mut self) -> ArrayViewMutD<'_, T> {
        // SAFETY: in bounds as in `view`; `Tensor::write` checked that no two elements share a
        // location, the exclusive borrow keeps every other access out, and `&mut self` makes this
        // the guard's only live view.
        unsafe { ArrayViewMutD::from_shape_ptr(self.tensor.ndarray_layout(), self.ptr) }
    }

    /// The elements as a mutable slice when the tensor is contiguous.
    pub fn as_slice_mut(&mut self) -> Option<&mut [T]> {
        if !self.tensor.is_contiguous() {
            return None;
        }
        // SAFETY: as in `TensorRead::as_slice`, with the exclusive borrow and `&mut self`.
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr, self.tensor.numel()) })
    }

    /// The first element's address, valid for reads and writes of the addressed elements while
    /// the guard lives.
    pub fn as_mut_ptr(&mut self) -> *mut T {
        self.ptr
    }
}

/// `dst[i] = src[i]` converted to `dst`'s dtype, for contiguous tensors of one shape (what
/// [`Tensor::copy_from`] instantiates for each pair of dtypes).
fn cast_contiguous(dst: &Tensor, src: &Tensor) -> crate::Result<()> {
    if float8::is_storage_only(src.dtype) || float8::is_storage_only(dst.dtype) {
        return cast_storage_only(dst, src);
    }
    // the destination borrowed once per destination dtype, only the loop per pair
    crate::dispatch_all!(dst.dtype, "copy_", |D| {
        let mut dg = dst.write::<D>()?;
        let d = dg
            .as_slice_mut()
            .ok_or_else(|| TensorError::Value("copy_: destination is not contiguous".into()))?;
        crate::dispatch_all!(src.dtype, "copy_", |S| cast_into::<D, S>(d, src))
    })
}

/// [`cast_contiguous`] where either side is float8 or complex32: through float (complex64 for
/// complex32), as c10's `static_cast` converts them, so only the conversions to and from that
/// type are instantiated for them.
fn cast_storage_only(dst: &Tensor, src: &Tensor) -> crate::Result<()> {
    use float8::{conversion_dtype, is_storage_only};
    if is_storage_only(src.dtype) {
        let wide = Tensor::zeros(&src.shape, conversion_dtype(src.dtype))?;
        if src.dtype == DType::Complex32 {
            convert_contiguous::<num_complex::Complex32, float8::ComplexHalf>(&wide, src)?;
        } else {
            crate::dispatch_storage_only!(src.dtype, "copy_", |S| {
                convert_contiguous::<f32, S>(&wide, src)
            })?;
        }
        return if wide.dtype == dst.dtype {
            dst.copy_from(&wide)
        } else {
            cast_contiguous(dst, &wide)
        };
    }
    let through = conversion_dtype(dst.dtype);
    let wide = if src.dtype == through {
        src.clone()
    } else {
        let wide = Tensor::zeros(&src.shape, through)?;
        cast_contiguous(&wide, src)?;
        wide
    };
    if dst.dtype == DType::Complex32 {
        convert_contiguous::<float8::ComplexHalf, num_complex::Complex32>(dst, &wide)
    } else {
        crate::dispatch_storage_only!(dst.dtype, "copy_", |D| {
            convert_contiguous::<D, f32>(dst, &wide)
        })
    }
}

/// `dst[i] = src[i]` cast from `S` to `D`, both contiguous and of one size.
fn convert_contiguous<D: Element, S: Element>(dst: &Tensor, src: &Tensor) -> crate::Result<()> {
    let mut dg = dst.write::<D>()?;
    let d = dg
        .as_slice_mut()
        .ok_or_else(|| TensorError::Value("copy_: destination is not contiguous".into()))?;
    cast_into::<D, S>(d, src)
}

/// `d[i] = src[i]` cast from `S`, `src` contiguous with `d.len()` elements.
fn cast_into<D: Element, S: Element>(d: &mut [D], src: &Tensor) -> crate::Result<()> {
    let sg = src.read::<S>()?;
    let s = sg
        .as_slice()
        .filter(|s| s.len() == d.len())
        .ok_or_else(|| TensorError::Value("copy_: source is not contiguous".into()))?;
    d.iter_mut().zip(s).for_each(|(d, &s)| *d = D::cast_from(s));
    Ok(())
}

/// The bytes of a slice of elements.
fn bytemuck_bytes<T: Element>(data: &[T]) -> &[u8] {
    // SAFETY: every `Element` type (numbers, `bool`, half floats, `Complex` of floats) is plain data
    // without padding, so each of its bytes is initialized; u8 has no alignment requirement.
    unsafe { std::slice::from_raw_parts(data.as_ptr() as *const u8, std::mem::size_of_val(data)) }
}

/// A `bool` may only hold 0 or 1: bytes from an archive or written through a `uint8` view of the
/// same storage are checked before they are seen as `bool`s (anything else would be undefined
/// behaviour).
/// [`TensorError::SizeMismatch`] of data that does not fill `shape` (`n` elements).
fn fill_mismatch(shape: &[usize], n: usize, got: usize) -> TensorError {
    TensorError::SizeMismatch {
        op: "from_vec".into(),
        what: format!("the number of elements to fill shape {shape:?}"),
        expected: n as i64,
        got: got as i64,
    }
}

/// `bytes` are `storage`'s, under a guard the caller holds.
fn check_bool_bytes<T: Element>(storage: &Storage, bytes: &[u8]) -> TResult<()> {
    if T::DTYPE == DType::Bool && !storage.bytes_are_bools(bytes) {
        return Err(TensorError::Value(
            "a bool tensor's storage holds a byte that is neither 0 nor 1".into(),
        ));
    }
    Ok(())
}

/// Number of elements from storage start needed to hold every element of the view.
fn storage_extent(offset: usize, shape: &[usize], strides: &[isize]) -> TResult<usize> {
    if shape.contains(&0) {
        // addresses nothing (see `Tensor::read`)
        return Ok(0);
    }
    let mut max_index: usize = 0;
    for (&s, &st) in shape.iter().zip(strides) {
        if st < 0 {
            return Err(TensorError::OutOfBounds(format!(
                "negative stride {st} is not supported"
            )));
        }
        let span = (s - 1)
            .checked_mul(st as usize)
            .ok_or_else(|| TensorError::OutOfBounds("stride span overflows".into()))?;
        max_index = max_index
            .checked_add(span)
            .ok_or_else(|| TensorError::OutOfBounds("stride span overflows".into()))?;
    }
    offset
        .checked_add(max_index)
        .and_then(|v| v.checked_add(1))
        .ok_or_else(|| TensorError::OutOfBounds("offset overflows".into()))
}

/// Element count above which kernels split work across rayon threads.
pub const PARALLEL_THRESHOLD: usize = 32 * 1024;

/// Multiply-adds below which a matrix product (the packed GEMM, the gemm crate's) stays on the
/// calling thread: handing part of it to a pool thread (a wake-up, a join) costs more than
/// the work saved. A batch-1 `linear` or a recurrent step is far below; a 224-pixel
/// convolution far above.
pub const PARALLEL_MACS: usize = 64 * 64 * 64;

/// The parallelism policy, in one place: whether `work` (elements for a map or reduction,
/// multiply-adds for a product) at or above `min` ([`PARALLEL_THRESHOLD`], [`PARALLEL_MACS`])
/// is split across the rayon pool. Never with one thread, where a split only adds overhead.
pub fn split_work(work: usize, min: usize) -> bool {
    work >= min && rayon::current_num_threads() > 1
}

/// The broadcast shape of two shapes (NumPy/PyTorch rules), or a shape error.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> TResult<Shape> {
    let n = a.len().max(b.len());
    let mut out: Shape = SmallVec::from_elem(1, n);
    for i in 0..n {
        let da = if i < n - a.len() {
            1
        } else {
            a[i - (n - a.len())]
        };
        let db = if i < n - b.len() {
            1
        } else {
            b[i - (n - b.len())]
        };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(TensorError::Broadcast {
                a: da,
                b: db,
                dim: i,
            });
        };
    }
    Ok(out)
}
