//! Sparse tensors: PyTorch's COO layout (`torch.sparse_coo`: an int64 `[sparse_dim, nnz]`
//! index tensor and `[nnz, *dense]` values) and the compressed layouts (`torch.sparse_csr`,
//! `sparse_csc`, `sparse_bsr`, `sparse_bsc`: compressed and plain index tensors and values,
//! with optional leading batch dimensions).
//!
//! A sparse tensor is a [`Tensor`] whose `sparse` field holds these parts: its shape and dtype
//! are the sparse tensor's size and values' dtype, and it addresses no elements of its (empty)
//! storage. Element access ([`Tensor::read`] / [`Tensor::write`]) and views
//! ([`Tensor::as_strided`]) refuse it with [`TensorError::NotStrided`], so a dense kernel
//! handed a sparse tensor fails naming the layout instead of reading garbage.

use super::{checked_numel, DType, RankRequirement, Shape, Storage, Tensor, TensorError};
use smallvec::SmallVec;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

type TResult<T> = std::result::Result<T, TensorError>;

/// A tensor's memory layout (`torch.layout`), numbered as `c10::Layout`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// `torch.strided`: storage + offset + strides.
    Strided,
    /// `torch.sparse_coo`.
    SparseCoo,
    /// `torch.sparse_csr`: compressed rows.
    SparseCsr,
    /// `torch.sparse_csc`: compressed columns.
    SparseCsc,
    /// `torch.sparse_bsr`: compressed rows of dense blocks.
    SparseBsr,
    /// `torch.sparse_bsc`: compressed columns of dense blocks.
    SparseBsc,
}

impl Layout {
    /// `c10::Layout`'s number (TorchScript passes layouts as ints; `3` is `torch._mkldnn`).
    pub fn number(self) -> i64 {
        match self {
            Layout::Strided => 0,
            Layout::SparseCoo => 1,
            Layout::SparseCsr => 2,
            Layout::SparseCsc => 4,
            Layout::SparseBsr => 5,
            Layout::SparseBsc => 6,
        }
    }

    /// The layout numbered `n` by `c10::Layout`, if tsrun has it.
    pub fn from_number(n: i64) -> Option<Layout> {
        Some(match n {
            0 => Layout::Strided,
            1 => Layout::SparseCoo,
            2 => Layout::SparseCsr,
            4 => Layout::SparseCsc,
            5 => Layout::SparseBsr,
            6 => Layout::SparseBsc,
            _ => return None,
        })
    }

    /// Python's name (`torch.sparse_coo`).
    pub fn name(self) -> &'static str {
        match self {
            Layout::Strided => "torch.strided",
            Layout::SparseCoo => "torch.sparse_coo",
            Layout::SparseCsr => "torch.sparse_csr",
            Layout::SparseCsc => "torch.sparse_csc",
            Layout::SparseBsr => "torch.sparse_bsr",
            Layout::SparseBsc => "torch.sparse_bsc",
        }
    }

    /// The dispatch key PyTorch runs this layout's CPU kernels under.
    pub fn backend(self) -> &'static str {
        match self {
            Layout::Strided => "CPU",
            Layout::SparseCoo => "SparseCPU",
            _ => "SparseCsrCPU",
        }
    }

    /// Whether this is one of the four compressed layouts.
    pub fn is_compressed(self) -> bool {
        matches!(
            self,
            Layout::SparseCsr | Layout::SparseCsc | Layout::SparseBsr | Layout::SparseBsc
        )
    }

    /// Whether the compressed dimension is the rows (CSR, BSR) rather than the columns.
    pub fn compresses_rows(self) -> bool {
        matches!(self, Layout::SparseCsr | Layout::SparseBsr)
    }

    /// Whether values are dense blocks (BSR, BSC).
    pub fn is_blocked(self) -> bool {
        matches!(self, Layout::SparseBsr | Layout::SparseBsc)
    }

    /// PyTorch's names of the compressed and plain index tensors (`crow_indices`/`col_indices`).
    pub fn index_names(self) -> (&'static str, &'static str) {
        if self.compresses_rows() {
            ("crow_indices", "col_indices")
        } else {
            ("ccol_indices", "row_indices")
        }
    }
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The component tensors of a sparse tensor (all strided).
#[derive(Debug)]
pub enum SparseParts {
    /// `torch.sparse_coo`.
    Coo {
        /// int64 `[sparse_dim, nnz]`.
        indices: Tensor,
        /// `[nnz, *dense_sizes]`.
        values: Tensor,
        /// Whether the indices are known sorted and free of duplicates (`is_coalesced()`):
        /// shared by every handle of the tensor, as `_coalesced_` sets it in place.
        coalesced: AtomicBool,
    },
    /// The compressed layouts.
    Compressed {
        /// CSR, CSC, BSR or BSC.
        layout: Layout,
        /// `[*batch, compressed_size + 1]` (int32 or int64): where each row (column) starts.
        compressed_indices: Tensor,
        /// `[*batch, nnz]`: each element's column (row), same dtype.
        plain_indices: Tensor,
        /// `[*batch, nnz, *block, *dense_sizes]`.
        values: Tensor,
    },
}

impl SparseParts {
    /// The layout.
    pub fn layout(&self) -> Layout {
        match self {
            SparseParts::Coo { .. } => Layout::SparseCoo,
            SparseParts::Compressed { layout, .. } => *layout,
        }
    }

    /// The component tensors with PyTorch's names, in the order its `repr` shows them
    /// (`indices`, `values`; or `crow_indices`/`ccol_indices`, `col_indices`/`row_indices`,
    /// `values`).
    pub fn named_components(&self) -> Vec<(&'static str, &Tensor)> {
        match self {
            SparseParts::Coo {
                indices, values, ..
            } => vec![("indices", indices), ("values", values)],
            SparseParts::Compressed {
                layout,
                compressed_indices,
                plain_indices,
                values,
            } => {
                let (c, p) = layout.index_names();
                vec![
                    (c, compressed_indices),
                    (p, plain_indices),
                    ("values", values),
                ]
            }
        }
    }

    /// The values tensor.
    pub fn values(&self) -> &Tensor {
        match self {
            SparseParts::Coo { values, .. } | SparseParts::Compressed { values, .. } => values,
        }
    }

    /// The number of leading batch dimensions (compressed layouts; 0 for COO).
    pub fn batch_dim(&self) -> usize {
        match self {
            SparseParts::Coo { .. } => 0,
            SparseParts::Compressed {
                compressed_indices, ..
            } => compressed_indices.dim().saturating_sub(1),
        }
    }

    /// The number of sparse dimensions (`sparse_dim()`: COO's index rows; 2 when compressed).
    pub fn sparse_dim(&self) -> usize {
        match self {
            SparseParts::Coo { indices, .. } => indices.shape().first().copied().unwrap_or(0),
            SparseParts::Compressed { .. } => 2,
        }
    }

    /// The number of dense trailing dimensions of the values (`dense_dim()`).
    pub fn dense_dim(&self) -> usize {
        let block = if self.layout().is_blocked() { 2 } else { 0 };
        self.values()
            .dim()
            .saturating_sub(1 + self.batch_dim() + block)
    }

    /// The number of specified elements (`_nnz()`; per batch for compressed layouts).
    pub fn nnz(&self) -> usize {
        match self {
            SparseParts::Coo { values, .. } => values.shape().first().copied().unwrap_or(0),
            SparseParts::Compressed { plain_indices, .. } => {
                plain_indices.shape().last().copied().unwrap_or(0)
            }
        }
    }

    /// Whether a COO tensor is coalesced (compressed layouts are, by construction).
    pub fn is_coalesced(&self) -> bool {
        match self {
            SparseParts::Coo { coalesced, .. } => coalesced.load(Ordering::Relaxed),
            SparseParts::Compressed { .. } => true,
        }
    }

    /// `_coalesced_(flag)`: mark a COO tensor (every handle sees it); compressed layouts have
    /// no flag to set.
    pub fn set_coalesced(&self, flag: bool) -> bool {
        match self {
            SparseParts::Coo { coalesced, .. } => {
                coalesced.store(flag, Ordering::Relaxed);
                true
            }
            SparseParts::Compressed { .. } => false,
        }
    }

    /// BSR/BSC's block size (values' dims after nnz).
    pub fn blocksize(&self) -> Option<[usize; 2]> {
        let b = self.batch_dim();
        let s = self.values().shape();
        match (self.layout().is_blocked(), s.get(b + 1), s.get(b + 2)) {
            (true, Some(&h), Some(&w)) => Some([h, w]),
            _ => None,
        }
    }
}

/// [`TensorError::InvalidArgument`] of a sparse constructor.
fn invalid(
    op: &str,
    argument: &str,
    requirement: impl Into<String>,
    value: impl std::fmt::Display,
) -> TensorError {
    TensorError::InvalidArgument {
        op: op.into(),
        argument: argument.into(),
        requirement: requirement.into(),
        value: value.to_string(),
    }
}

/// [`TensorError::SizeMismatch`] of a sparse constructor.
fn size_mismatch(op: &str, what: impl Into<String>, expected: usize, got: usize) -> TensorError {
    TensorError::SizeMismatch {
        op: op.into(),
        what: what.into(),
        expected: expected as i64,
        got: got as i64,
    }
}

/// [`TensorError::RankMismatch`] of a sparse constructor's `argument`.
fn rank_mismatch(
    op: &str,
    argument: &str,
    expected: RankRequirement,
    shape: &[usize],
) -> TensorError {
    TensorError::RankMismatch {
        op: op.into(),
        argument: argument.into(),
        expected,
        shape: shape.to_vec(),
    }
}

/// [`TensorError::ShapeMismatch`] of a sparse constructor's `argument`.
fn shape_mismatch(op: &str, argument: &str, expected: &[usize], got: &[usize]) -> TensorError {
    TensorError::ShapeMismatch {
        op: op.into(),
        argument: argument.into(),
        expected: expected.to_vec(),
        got: got.to_vec(),
    }
}

const COO: &str = "sparse_coo_tensor";
const COMPRESSED: &str = "sparse_compressed_tensor";
const VALIDATE: &str = "_validate_compressed_sparse_indices";

/// A component tensor must be strided and not quantized.
fn check_component(what: &str, t: &Tensor) -> TResult<()> {
    if let Some(parts) = t.sparse_parts() {
        return Err(invalid(
            "sparse",
            what,
            "must be a strided tensor",
            format!("a {} tensor", parts.layout()),
        ));
    }
    if t.is_quantized() {
        return Err(TensorError::UnsupportedFeature {
            op: "sparse".into(),
            feature: format!("sparse tensors with quantized {what} ({})", t.dtype()),
        });
    }
    Ok(())
}

/// An index tensor's elements as i64, row-major.
pub(crate) fn index_values(t: &Tensor) -> TResult<Vec<i64>> {
    match t.dtype() {
        DType::Int64 => Ok(t.read::<i64>()?.view().iter().copied().collect()),
        DType::Int32 => Ok(t.read::<i32>()?.view().iter().map(|&v| v as i64).collect()),
        other => Err(TensorError::UnsupportedDType {
            what: "sparse index tensor".into(),
            dtype: other,
        }),
    }
}

impl Tensor {
    /// The layout (`tensor.layout`).
    pub fn layout(&self) -> Layout {
        match self.sparse_parts() {
            Some(parts) => parts.layout(),
            // nested tensors are strided too (`torch.nested.nested_tensor(...).layout`)
            None => Layout::Strided,
        }
    }

    /// The parts of a sparse tensor, `None` for a strided one.
    pub fn sparse_parts(&self) -> Option<&SparseParts> {
        match self.parts.as_deref() {
            Some(super::LayoutParts::Sparse(p)) => Some(p),
            _ => None,
        }
    }

    /// PyTorch's refusal of a sparse or nested tensor where a plain strided one is needed.
    pub fn check_strided(&self) -> TResult<()> {
        match self.parts.as_deref() {
            None => Ok(()),
            Some(super::LayoutParts::Sparse(parts)) => Err(TensorError::NotStrided {
                op: None,
                layout: parts.layout(),
            }),
            Some(super::LayoutParts::Nested(_)) => {
                Err(TensorError::NestedNotSupported { op: None })
            }
        }
    }

    /// A sparse tensor of `size` over `parts` (already validated).
    fn over_parts(parts: SparseParts, size: &[usize]) -> TResult<Tensor> {
        checked_numel(size)?;
        let dtype = parts.values().dtype();
        Ok(Tensor {
            // no elements: a fresh empty storage also gives the tensor its own identity
            storage: Storage::zeroed(0)?,
            offset: 0,
            shape: size.into(),
            strides: SmallVec::from_elem(0, size.len()),
            dtype,
            requires_grad: false,
            quantizer: None,
            parts: Some(Arc::new(super::LayoutParts::Sparse(parts))),
        })
    }

    /// `torch.sparse_coo_tensor(indices, values, size)` with PyTorch's checks (always on:
    /// an index outside `size` is an error, as under `check_invariants=True`). `coalesced`
    /// is the caller's promise that the indices are sorted and unique.
    pub fn sparse_coo(
        indices: Tensor,
        values: Tensor,
        size: &[usize],
        coalesced: bool,
    ) -> TResult<Tensor> {
        check_component("indices", &indices)?;
        check_component("values", &values)?;
        if indices.dtype() != DType::Int64 {
            return Err(TensorError::WrongDType {
                op: COO.into(),
                argument: "indices".into(),
                expected: "int64".into(),
                got: indices.dtype(),
            });
        }
        if indices.dim() != 2 {
            return Err(rank_mismatch(
                COO,
                "indices",
                RankRequirement::Exactly(2),
                indices.shape(),
            ));
        }
        if values.dim() == 0 {
            return Err(rank_mismatch(
                COO,
                "values",
                RankRequirement::AtLeast(1),
                values.shape(),
            ));
        }
        let (sparse_dim, nnz) = (indices.shape()[0], indices.shape()[1]);
        let dense_dim = values.dim() - 1;
        if sparse_dim + dense_dim != size.len() {
            return Err(size_mismatch(
                COO,
                format!(
                    "the number of dimensions (sparse_dim {sparse_dim} + dense_dim {dense_dim})"
                ),
                sparse_dim + dense_dim,
                size.len(),
            ));
        }
        if values.shape()[0] != nnz {
            return Err(size_mismatch(
                COO,
                "values.size(0) (nnz of indices)",
                nnz,
                values.shape()[0],
            ));
        }
        if values.shape()[1..] != size[sparse_dim..] {
            let mut want: Vec<usize> = vec![nnz];
            want.extend_from_slice(&size[sparse_dim..]);
            return Err(shape_mismatch(COO, "values", &want, values.shape()));
        }
        let idx = index_values(&indices)?;
        for d in 0..sparse_dim {
            for &i in &idx[d * nnz..(d + 1) * nnz] {
                if i < 0 {
                    return Err(invalid(
                        COO,
                        "indices",
                        format!("must be non-negative (dim {d})"),
                        i,
                    ));
                }
                if i as u64 >= size[d] as u64 {
                    // PyTorch's text (tests/suite/sparse.rs compares it)
                    return Err(TensorError::Index(format!(
                        "size is inconsistent with indices: for dim {d}, size is {} but found index {i}",
                        size[d]
                    )));
                }
            }
        }
        // a tensor with at most one element is coalesced whatever the caller says
        let coalesced = coalesced || nnz <= 1;
        Tensor::over_parts(
            SparseParts::Coo {
                indices,
                values,
                coalesced: AtomicBool::new(coalesced),
            },
            size,
        )
    }

    /// `torch.sparse_compressed_tensor(compressed_indices, plain_indices, values, size,
    /// layout=...)` with PyTorch's `_validate_sparse_compressed_tensor_args` checks, the
    /// index invariants included.
    pub fn sparse_compressed(
        layout: Layout,
        compressed_indices: Tensor,
        plain_indices: Tensor,
        values: Tensor,
        size: &[usize],
    ) -> TResult<Tensor> {
        if !layout.is_compressed() {
            return Err(invalid(
                COMPRESSED,
                "layout",
                "must be a compressed layout",
                layout,
            ));
        }
        let (cname, pname) = layout.index_names();
        check_component(cname, &compressed_indices)?;
        check_component(pname, &plain_indices)?;
        check_component("values", &values)?;
        let idx_dtype = compressed_indices.dtype();
        if !matches!(idx_dtype, DType::Int32 | DType::Int64) {
            return Err(TensorError::WrongDType {
                op: COMPRESSED.into(),
                argument: cname.into(),
                expected: "int32 or int64".into(),
                got: idx_dtype,
            });
        }
        if plain_indices.dtype() != idx_dtype {
            return Err(TensorError::DTypeMismatch {
                expected: idx_dtype,
                got: plain_indices.dtype(),
            });
        }
        if compressed_indices.dim() == 0 {
            return Err(rank_mismatch(
                COMPRESSED,
                cname,
                RankRequirement::AtLeast(1),
                compressed_indices.shape(),
            ));
        }
        if compressed_indices.dim() != plain_indices.dim() {
            return Err(rank_mismatch(
                COMPRESSED,
                pname,
                RankRequirement::Exactly(compressed_indices.dim()),
                plain_indices.shape(),
            ));
        }
        let batch = compressed_indices.dim() - 1;
        let block = if layout.is_blocked() { 2 } else { 0 };
        if values.dim() < batch + 1 + block {
            return Err(rank_mismatch(
                COMPRESSED,
                "values",
                RankRequirement::AtLeast(batch + 1 + block),
                values.shape(),
            ));
        }
        let dense = values.dim() - batch - 1 - block;
        if size.len() != batch + 2 + dense {
            return Err(size_mismatch(
                COMPRESSED,
                format!("the length of size (batch {batch} + base 2 + dense {dense} dims)"),
                batch + 2 + dense,
                size.len(),
            ));
        }
        let batch_shape = &size[..batch];
        for (name, t) in [
            (cname, &compressed_indices),
            (pname, &plain_indices),
            ("values", &values),
        ] {
            if t.shape()[..batch] != *batch_shape {
                return Err(shape_mismatch(
                    COMPRESSED,
                    &format!("{name}'s batch dims"),
                    batch_shape,
                    &t.shape()[..batch],
                ));
            }
        }
        let [bh, bw] = if layout.is_blocked() {
            [values.shape()[batch + 1], values.shape()[batch + 2]]
        } else {
            [1, 1]
        };
        let (rows, cols) = (size[batch], size[batch + 1]);
        if bh == 0 || bw == 0 || rows % bh != 0 || cols % bw != 0 {
            return Err(invalid(
                COMPRESSED,
                "blocksize",
                format!("must be nonzero and divide the base size ({rows}, {cols})"),
                format!("({bh}, {bw})"),
            ));
        }
        let (ncomp, nplain) = if layout.compresses_rows() {
            (rows / bh, cols / bw)
        } else {
            (cols / bw, rows / bh)
        };
        let nnz = plain_indices.shape()[batch];
        if compressed_indices.shape()[batch] != ncomp + 1 {
            return Err(size_mismatch(
                COMPRESSED,
                format!(
                    "{cname}.shape[-1] (the number of compressed {} plus 1)",
                    if layout.compresses_rows() {
                        "rows"
                    } else {
                        "columns"
                    }
                ),
                ncomp + 1,
                compressed_indices.shape()[batch],
            ));
        }
        if values.shape()[batch] != nnz {
            return Err(size_mismatch(
                COMPRESSED,
                format!(
                    "{pname}.shape[-1] (values.shape[{batch}], the number of specified elements)"
                ),
                values.shape()[batch],
                nnz,
            ));
        }
        if values.shape()[batch + 1 + block..] != size[batch + 2..] {
            return Err(shape_mismatch(
                COMPRESSED,
                "values' dense dims",
                &size[batch + 2..],
                &values.shape()[batch + 1 + block..],
            ));
        }
        let comp = index_values(&compressed_indices)?;
        let plain = index_values(&plain_indices)?;
        for (b, c) in comp.chunks(ncomp + 1).enumerate() {
            let p = plain.get(b * nnz..(b + 1) * nnz).unwrap_or(&[]);
            check_compressed_row(cname, pname, c, p, nnz, nplain)?;
        }
        Tensor::over_parts(
            SparseParts::Compressed {
                layout,
                compressed_indices,
                plain_indices,
                values,
            },
            size,
        )
    }
}

/// PyTorch's `_validate_compressed_sparse_indices(is_crow, compressed, plain, cdim, dim,
/// nnz)` for unbatched 1-d index tensors: `cdim` compressed rows (columns), plain indices below
/// `dim`.
pub fn validate_compressed_indices(
    compresses_rows: bool,
    compressed: &Tensor,
    plain: &Tensor,
    cdim: usize,
    dim: usize,
    nnz: usize,
) -> TResult<()> {
    let (cname, pname) = if compresses_rows {
        Layout::SparseCsr.index_names()
    } else {
        Layout::SparseCsc.index_names()
    };
    let comp = index_values(compressed)?;
    let plain_v = index_values(plain)?;
    if comp.len() != cdim + 1 {
        return Err(size_mismatch(
            VALIDATE,
            format!("{cname}.shape[-1] (the number of compressed dims plus 1)"),
            cdim + 1,
            comp.len(),
        ));
    }
    if plain_v.len() != nnz {
        return Err(size_mismatch(
            VALIDATE,
            format!("{pname}.numel() (nnz)"),
            nnz,
            plain_v.len(),
        ));
    }
    check_compressed_row(cname, pname, &comp, &plain_v, nnz, dim)
}

/// PyTorch's `_validate_compressed_sparse_indices` invariants for one batch.
fn check_compressed_row(
    cname: &str,
    pname: &str,
    comp: &[i64],
    plain: &[i64],
    nnz: usize,
    nplain: usize,
) -> TResult<()> {
    if comp.first() != Some(&0) {
        return Err(invalid(
            VALIDATE,
            cname,
            format!("must satisfy `{cname}[..., 0] == 0`"),
            format!("{:?}", comp.first()),
        ));
    }
    if comp.last().copied() != Some(nnz as i64) {
        return Err(invalid(
            VALIDATE,
            cname,
            format!("must satisfy `{cname}[..., -1] == nnz` ({nnz})"),
            format!("{:?}", comp.last()),
        ));
    }
    for w in comp.windows(2) {
        let (start, end) = (w[0], w[1]);
        if end < start {
            return Err(invalid(
                VALIDATE,
                cname,
                format!("must satisfy `0 <= {cname}[..., 1:] - {cname}[..., :-1] <= ncols`"),
                format!("{start} followed by {end}"),
            ));
        }
        let row = plain.get(start as usize..end as usize).ok_or_else(|| {
            invalid(
                VALIDATE,
                cname,
                format!("must satisfy `{cname}[..., -1] == nnz` ({nnz})"),
                end,
            )
        })?;
        if row.iter().any(|&p| p < 0 || p as u64 >= nplain as u64) {
            return Err(invalid(
                VALIDATE,
                pname,
                format!("must satisfy `0 <= {pname} < {nplain}`"),
                format!("{row:?}"),
            ));
        }
        if row.windows(2).any(|p| p[1] <= p[0]) {
            return Err(invalid(
                VALIDATE,
                pname,
                format!("must be sorted and distinct within each compressed row ({pname}[..., {cname}[..., i - 1]:{cname}[..., i]])"),
                format!("{row:?}"),
            ));
        }
    }
    Ok(())
}

/// The size of a sparse tensor given as i64s, checked non-negative.
pub fn sparse_size(size: &[i64]) -> TResult<Shape> {
    size.iter()
        .map(|&s| {
            usize::try_from(s).map_err(|_| invalid("sparse", "size", "must be non-negative", s))
        })
        .collect()
}

impl Tensor {
    /// A sparse tensor with this one's indices, size and coalesced flag over `values` (of the
    /// same shape as the current values; any dtype).
    pub fn with_sparse_values(&self, values: Tensor) -> TResult<Tensor> {
        let parts = self.sparse_parts().ok_or_else(|| {
            invalid(
                "with_sparse_values",
                "self",
                "must be sparse",
                self.layout(),
            )
        })?;
        check_component("values", &values)?;
        if values.shape() != parts.values().shape() {
            return Err(shape_mismatch(
                "with_sparse_values",
                "values",
                parts.values().shape(),
                values.shape(),
            ));
        }
        let parts = match parts {
            SparseParts::Coo {
                indices, coalesced, ..
            } => SparseParts::Coo {
                indices: indices.clone(),
                values,
                coalesced: AtomicBool::new(coalesced.load(Ordering::Relaxed)),
            },
            SparseParts::Compressed {
                layout,
                compressed_indices,
                plain_indices,
                ..
            } => SparseParts::Compressed {
                layout: *layout,
                compressed_indices: compressed_indices.clone(),
                plain_indices: plain_indices.clone(),
                values,
            },
        };
        let mut t = Tensor::over_parts(parts, &self.shape)?;
        t.requires_grad = self.requires_grad;
        Ok(t)
    }

    /// `clone()` of a sparse tensor: copies of its index and value tensors.
    pub(super) fn sparse_clone(&self) -> crate::Result<Tensor> {
        let parts = self
            .sparse_parts()
            .ok_or_else(|| invalid("sparse_clone", "self", "must be sparse", self.layout()))?;
        let parts = match parts {
            SparseParts::Coo {
                indices,
                values,
                coalesced,
            } => SparseParts::Coo {
                indices: indices.deep_clone()?,
                values: values.deep_clone()?,
                coalesced: AtomicBool::new(coalesced.load(Ordering::Relaxed)),
            },
            SparseParts::Compressed {
                layout,
                compressed_indices,
                plain_indices,
                values,
            } => SparseParts::Compressed {
                layout: *layout,
                compressed_indices: compressed_indices.deep_clone()?,
                plain_indices: plain_indices.deep_clone()?,
                values: values.deep_clone()?,
            },
        };
        let mut t = Tensor::over_parts(parts, &self.shape)?;
        t.requires_grad = self.requires_grad;
        Ok(t)
    }
}
