//! Sparse tensors (`torch.sparse_coo` and the compressed layouts CSR/CSC/BSR/BSC): building
//! them, their queries, conversions to and from strided tensors, `coalesce`, and the products
//! and reductions PyTorch's SparseCPU / SparseCsrCPU kernels compute, in their summation
//! order. The layout itself lives in `tensor/sparse.rs`; every other kernel refuses sparse
//! arguments (`Args::tensor`).

use super::kernels::num::Arith;
use super::kernels::{
    check_rank, check_size, invalid_argument, rank_mismatch, shape_err, shape_mismatch,
    size_mismatch, unsupported, unsupported_feature, wrong_dtype,
};
use super::shape::in_place;
use super::{Args, Registry};
use crate::tensor::{
    contiguous_strides, sparse_size, DType, Element, Layout, RankRequirement, Scalar, SparseParts,
    Tensor, TensorError,
};
use crate::values::IValue;

type R = crate::Result<IValue>;

/// PyTorch's dispatcher error for a layout an operator has no kernel for.
fn no_kernel(op: &str, t: &Tensor) -> crate::Error {
    unsupported(format!(
        "Could not run '{op}' with arguments from the '{}' backend",
        t.layout().backend()
    ))
}

/// The parts of a sparse argument, or the dispatcher's error for a strided one.
fn parts<'t>(op: &str, t: &'t Tensor) -> crate::Result<&'t SparseParts> {
    t.sparse_parts().ok_or_else(|| no_kernel(op, t))
}

/// A COO argument's indices, values and coalesced flag.
fn coo<'t>(op: &str, t: &'t Tensor) -> crate::Result<(&'t Tensor, &'t Tensor, bool)> {
    match parts(op, t)? {
        p @ SparseParts::Coo {
            indices, values, ..
        } => Ok((indices, values, p.is_coalesced())),
        SparseParts::Compressed { .. } => Err(no_kernel(op, t)),
    }
}

/// A sparse tensor's size may be far larger than its entries: results sized by it (dense
/// tensors, products, broadcasts) are checked against the allocation limit first.
fn check_result_size(elems: usize, dtype: DType) -> crate::Result<()> {
    let bytes = elems
        .checked_mul(dtype.size().max(1))
        .ok_or_else(|| shape_err(format!("a result of {elems} elements overflows")))?;
    crate::tensor::budget::check_alloc(bytes)?;
    Ok(())
}

fn to_usize(v: i64, what: &str) -> crate::Result<usize> {
    usize::try_from(v).map_err(|_| invalid_argument("sparse", what, "must be non-negative", v))
}

fn index_vec(t: &Tensor) -> crate::Result<Vec<i64>> {
    match t.dtype() {
        DType::Int64 => t.to_vec::<i64>(),
        DType::Int32 => Ok(t.to_vec::<i32>()?.into_iter().map(i64::from).collect()),
        other => Err(wrong_dtype("sparse", "indices", "int32 or int64", other)),
    }
}

/// An index tensor of `dtype` (int32 or int64) from i64s.
fn index_tensor(v: Vec<i64>, shape: &[usize], dtype: DType) -> crate::Result<Tensor> {
    let t = Tensor::from_vec(v, shape)?;
    if dtype == DType::Int64 {
        Ok(t)
    } else {
        t.to_dtype(dtype)
    }
}

/// The dtype/layout/device/pin_memory keyword group of a factory: the dtype (when given)
/// converts the values; a layout other than the one built is refused.
fn factory_options(a: &Args, first: usize, built: Layout) -> crate::Result<Option<DType>> {
    let dtype = a.opt_dtype(first)?;
    if let Some(l) = a.opt_int(first + 1)? {
        if Layout::from_number(l) != Some(built) {
            return Err(invalid_argument(
                a.op,
                "layout",
                format!("must be the {built} it builds"),
                l,
            ));
        }
    }
    Ok(dtype)
}

/// A factory's `dtype` must be the given values' (PyTorch does not convert them).
fn check_values_dtype(values: &Tensor, dtype: Option<DType>) -> crate::Result<()> {
    match dtype {
        Some(d) if d != values.dtype() => Err(TensorError::DTypeMismatch {
            expected: d,
            got: values.dtype(),
        }
        .into()),
        _ => Ok(()),
    }
}

fn converted(t: Tensor, dtype: Option<DType>) -> crate::Result<Tensor> {
    match dtype {
        Some(d) => t.to_dtype(d),
        None => Ok(t),
    }
}

// ---------------------------------------------------------------- construction

/// The size `sparse_coo_tensor(indices, values)` infers: one past the largest index of each
/// sparse dim, then the values' dense sizes.
fn inferred_coo_size(indices: &Tensor, values: &Tensor) -> crate::Result<Vec<usize>> {
    check_rank(
        "sparse_coo_tensor",
        "indices",
        RankRequirement::Exactly(2),
        indices.shape(),
    )?;
    let (sd, nnz) = (indices.shape()[0], indices.shape()[1]);
    let idx = index_vec(indices)?;
    let mut size = Vec::with_capacity(sd + values.dim().saturating_sub(1));
    for d in 0..sd {
        let row = idx.get(d * nnz..(d + 1) * nnz).unwrap_or(&[]);
        let max = row.iter().copied().max().map_or(0, |m| m + 1);
        size.push(to_usize(max, "index")?);
    }
    size.extend(values.shape().iter().skip(1));
    Ok(size)
}

/// `sparse_coo_tensor.indices(indices, values, *, dtype, layout, device, pin_memory,
/// is_coalesced)`: the values keep their dtype whatever `dtype` says (as ATen's op does; the
/// Python wrapper converts them first).
fn coo_from_indices(a: &mut Args) -> R {
    let (indices, values) = (a.tensor(0)?, a.tensor(1)?);
    factory_options(a, 2, Layout::SparseCoo)?;
    let coalesced = a.opt_bool(6)?.unwrap_or(false);
    let size = inferred_coo_size(&indices, &values)?;
    Ok(Tensor::sparse_coo(indices, values, &size, coalesced)?.into())
}

/// `sparse_coo_tensor.indices_size(indices, values, size, *, dtype, layout, device,
/// pin_memory, is_coalesced)`, and `_sparse_coo_tensor_unsafe` (the same arguments; tsrun
/// checks the invariants either way).
fn coo_from_indices_size(a: &mut Args) -> R {
    let (indices, values) = (a.tensor(0)?, a.tensor(1)?);
    let size = sparse_size(&a.int_list(2)?)?;
    factory_options(a, 3, Layout::SparseCoo)?;
    let coalesced = a.opt_bool(7)?.unwrap_or(false);
    Ok(Tensor::sparse_coo(indices, values, &size, coalesced)?.into())
}

/// An empty (nnz 0) COO tensor with `sparse_dim` sparse and `dense_dim` dense dims.
fn empty_coo(
    sparse_dim: usize,
    dense_dim: usize,
    size: &[usize],
    dtype: DType,
) -> crate::Result<Tensor> {
    if sparse_dim + dense_dim != size.len() {
        return Err(size_mismatch(
            "sparse_coo_tensor",
            format!("the number of dimensions (sparse_dim {sparse_dim} + dense_dim {dense_dim})"),
            (sparse_dim + dense_dim) as i64,
            size.len() as i64,
        ));
    }
    let mut vshape = vec![0];
    vshape.extend_from_slice(&size[sparse_dim..]);
    Ok(Tensor::sparse_coo(
        Tensor::zeros(&[sparse_dim, 0], DType::Int64)?,
        Tensor::zeros(&vshape, dtype)?,
        size,
        true,
    )?)
}

/// `sparse_coo_tensor.size(size, *, dtype, layout, device, pin_memory)`: all dims sparse.
fn coo_empty_of_size(a: &mut Args) -> R {
    let size = sparse_size(&a.int_list(0)?)?;
    let dtype = factory_options(a, 1, Layout::SparseCoo)?.unwrap_or(DType::Float32);
    Ok(empty_coo(size.len(), 0, &size, dtype)?.into())
}

/// `_sparse_coo_tensor_with_dims(sparse_dim, dense_dim, size, *, dtype, layout, device,
/// pin_memory)`.
fn coo_with_dims(a: &mut Args) -> R {
    let (sd, dd) = (
        to_usize(a.int(0)?, "sparse_dim")?,
        to_usize(a.int(1)?, "dense_dim")?,
    );
    let size = sparse_size(&a.int_list(2)?)?;
    let dtype = factory_options(a, 3, Layout::SparseCoo)?.unwrap_or(DType::Float32);
    Ok(empty_coo(sd, dd, &size, dtype)?.into())
}

/// `_sparse_coo_tensor_with_dims_and_tensors(sparse_dim, dense_dim, size, indices, values,
/// *, dtype, layout, device, pin_memory, is_coalesced)`.
fn coo_with_dims_and_tensors(a: &mut Args) -> R {
    let (sd, dd) = (
        to_usize(a.int(0)?, "sparse_dim")?,
        to_usize(a.int(1)?, "dense_dim")?,
    );
    let size = sparse_size(&a.int_list(2)?)?;
    let (indices, values) = (a.tensor(3)?, a.tensor(4)?);
    let dtype = factory_options(a, 5, Layout::SparseCoo)?;
    let coalesced = a.opt_bool(9)?.unwrap_or(false);
    check_values_dtype(&values, dtype)?;
    check_rank(
        a.op,
        "indices",
        RankRequirement::Exactly(2),
        indices.shape(),
    )?;
    check_rank(
        a.op,
        "values",
        RankRequirement::Exactly(dd + 1),
        values.shape(),
    )?;
    check_size(
        a.op,
        "indices.size(0) (sparse_dim)",
        sd as i64,
        indices.shape()[0] as i64,
    )?;
    Ok(Tensor::sparse_coo(indices, values, &size, coalesced)?.into())
}

/// `_validate_sparse_coo_tensor_args(indices, values, size, is_coalesced, check_pinning)`.
fn validate_coo(a: &mut Args) -> R {
    let (indices, values) = (a.tensor(0)?, a.tensor(1)?);
    let size = sparse_size(&a.int_list(2)?)?;
    Tensor::sparse_coo(indices, values, &size, false)?;
    Ok(IValue::None)
}

/// The size a compressed factory infers without one: the compressed dim from the compressed
/// indices' length, the plain dim one past the largest plain index, times the blocksize.
fn inferred_compressed_size(
    layout: Layout,
    compressed: &Tensor,
    plain: &Tensor,
    values: &Tensor,
) -> crate::Result<Vec<usize>> {
    check_rank(
        "sparse_compressed_tensor",
        "compressed_indices",
        RankRequirement::AtLeast(1),
        compressed.shape(),
    )?;
    let batch = compressed.dim() - 1;
    let block = if layout.is_blocked() { 2 } else { 0 };
    let [bh, bw] = if layout.is_blocked() {
        match (values.shape().get(batch + 1), values.shape().get(batch + 2)) {
            (Some(&h), Some(&w)) => [h, w],
            _ => {
                return Err(rank_mismatch(
                    "sparse_compressed_tensor",
                    "values",
                    RankRequirement::AtLeast(batch + 3),
                    values.shape(),
                ))
            }
        }
    } else {
        [1, 1]
    };
    let ncomp = compressed.shape()[batch].saturating_sub(1);
    let nplain = index_vec(plain)?
        .into_iter()
        .max()
        .map_or(Ok(0), |m| to_usize(m + 1, "plain index"))?;
    let (rows, cols) = if layout.compresses_rows() {
        (ncomp * bh, nplain * bw)
    } else {
        (nplain * bh, ncomp * bw)
    };
    let mut size: Vec<usize> = compressed.shape()[..batch].to_vec();
    size.extend([rows, cols]);
    size.extend(values.shape().iter().skip(batch + 1 + block));
    Ok(size)
}

/// The factories `sparse_{csr,csc,bsr,bsc}_tensor` and `sparse_compressed_tensor`, with or
/// without a size (`SIZED`), the layout fixed (`L` = `c10::Layout` number) or, for
/// `sparse_compressed_tensor` (`L` = 0), taken from the `layout` argument.
fn compressed_factory<const L: i64, const SIZED: bool>(a: &mut Args) -> R {
    let (compressed, plain, values) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
    let first_opt = if SIZED { 4 } else { 3 };
    let layout = if L == 0 {
        let n = a
            .opt_int(first_opt + 1)?
            .ok_or_else(|| invalid_argument(a.op, "layout", "must be specified", "None"))?;
        Layout::from_number(n)
            .filter(|l| l.is_compressed())
            .ok_or_else(|| {
                invalid_argument(a.op, "layout", "must be a compressed sparse layout", n)
            })?
    } else {
        Layout::from_number(L)
            .ok_or_else(|| invalid_argument(a.op, "layout", "must be a known layout", L))?
    };
    let dtype = factory_options(a, first_opt, layout)?;
    let size = if SIZED {
        sparse_size(&a.int_list(3)?)?.to_vec()
    } else {
        inferred_compressed_size(layout, &compressed, &plain, &values)?
    };
    check_values_dtype(&values, dtype)?;
    Ok(Tensor::sparse_compressed(layout, compressed, plain, values, &size)?.into())
}

/// `_validate_sparse_{csr,csc,bsr,bsc}_tensor_args(compressed, plain, values, size)` and
/// `_validate_sparse_compressed_tensor_args(..., layout)` (`L` = 0).
fn validate_compressed<const L: i64>(a: &mut Args) -> R {
    let n = if L == 0 { a.int(4)? } else { L };
    let layout = Layout::from_number(n)
        .filter(|l| l.is_compressed())
        .ok_or_else(|| invalid_argument(a.op, "layout", "must be a compressed sparse layout", n))?;
    let size = sparse_size(&a.int_list(3)?)?;
    Tensor::sparse_compressed(layout, a.tensor(0)?, a.tensor(1)?, a.tensor(2)?, &size)?;
    Ok(IValue::None)
}

// ---------------------------------------------------------------- queries

fn nnz(a: &mut Args) -> R {
    let t = a.any_layout_tensor(0)?;
    Ok(IValue::Int(parts(a.op, &t)?.nnz() as i64))
}

/// `sparse_dim` / `dense_dim`: a strided tensor has `dim()` dense dims (as PyTorch answers).
fn sparse_dim(a: &mut Args) -> R {
    let t = a.any_layout_tensor(0)?;
    Ok(IValue::Int(
        t.sparse_parts().map_or(0, |p| p.sparse_dim()) as i64
    ))
}
fn dense_dim(a: &mut Args) -> R {
    let t = a.any_layout_tensor(0)?;
    Ok(IValue::Int(
        t.sparse_parts().map_or(t.dim(), |p| p.dense_dim()) as i64,
    ))
}
/// `_dimI` / `_dimV`: COO only.
fn coo_sparse_dim(a: &mut Args) -> R {
    let t = a.any_layout_tensor(0)?;
    let (indices, ..) = coo(a.op, &t)?;
    Ok(IValue::Int(indices.shape()[0] as i64))
}
fn coo_dense_dim(a: &mut Args) -> R {
    let t = a.any_layout_tensor(0)?;
    let (_, values, _) = coo(a.op, &t)?;
    Ok(IValue::Int(values.dim() as i64 - 1))
}

fn is_coalesced(a: &mut Args) -> R {
    let t = a.any_layout_tensor(0)?;
    Ok(IValue::Bool(coo(a.op, &t)?.2))
}

/// `_indices` / `_values`: the stored tensors as they are. (Their `_copy` twins, like
/// `indices_copy` and `_sparse_broadcast_to_copy`, have no kernel for any sparse layout in
/// PyTorch, so tsrun registers none either.)
fn raw_indices(a: &mut Args) -> R {
    let t = a.any_layout_tensor(0)?;
    let (indices, ..) = coo(a.op, &t)?;
    Ok(indices.clone().into())
}
fn raw_values(a: &mut Args) -> R {
    let t = a.any_layout_tensor(0)?;
    let (_, values, _) = coo(a.op, &t)?;
    Ok(values.clone().into())
}

fn copy_if<const COPY: bool>(t: &Tensor) -> R {
    Ok(if COPY { t.deep_clone()? } else { t.clone() }.into())
}

/// The `_copy` twins have no SparseCPU kernel in PyTorch (only the compressed layouts'
/// SparseCsrCPU one): a COO argument is refused as PyTorch's dispatcher refuses it.
fn check_copy_twin<const COPY: bool>(op: &str, t: &Tensor) -> crate::Result<()> {
    if COPY && t.layout() == Layout::SparseCoo {
        return Err(no_kernel(op, t));
    }
    Ok(())
}

/// `indices()`: only of a coalesced tensor, as in PyTorch.
fn indices(a: &mut Args) -> R {
    let t = a.any_layout_tensor(0)?;
    let (indices, _, coalesced) = coo(a.op, &t)?;
    if !coalesced {
        return Err(invalid_argument(
            "indices",
            "self",
            "must be coalesced (call .coalesce() first)",
            "an uncoalesced tensor",
        ));
    }
    Ok(indices.clone().into())
}

/// `values()`: of a coalesced COO tensor, or of a compressed one.
fn values<const COPY: bool>(a: &mut Args) -> R {
    let t = a.any_layout_tensor(0)?;
    check_copy_twin::<COPY>(a.op, &t)?;
    let p = parts(a.op, &t)?;
    if !p.is_coalesced() {
        return Err(invalid_argument(
            "values",
            "self",
            "must be coalesced (call .coalesce() first)",
            "an uncoalesced tensor",
        ));
    }
    copy_if::<COPY>(p.values())
}

/// `crow_indices`/`ccol_indices` (`COMPRESSED`) and `col_indices`/`row_indices` (the plain
/// ones) of the layouts that compress rows (`ROWS`) or columns.
fn compressed_component<const COMPRESSED: bool, const ROWS: bool, const COPY: bool>(
    a: &mut Args,
) -> R {
    let t = a.any_layout_tensor(0)?;
    match parts(a.op, &t)? {
        SparseParts::Compressed {
            layout,
            compressed_indices,
            plain_indices,
            ..
        } if layout.compresses_rows() == ROWS => copy_if::<COPY>(if COMPRESSED {
            compressed_indices
        } else {
            plain_indices
        }),
        p => Err(invalid_argument(
            a.op,
            "self's layout",
            if ROWS {
                "must be SparseCsr or SparseBsr"
            } else {
                "must be SparseCsc or SparseBsc"
            },
            p.layout(),
        )),
    }
}

// ---------------------------------------------------------------- coalesce

/// PyTorch's `_coalesce_sparse_cpu`: indices sorted by their row-major linear index (stably),
/// duplicates' values summed in their stored order.
pub(crate) fn coalesce(op: &str, t: &Tensor) -> crate::Result<Tensor> {
    let (indices, values, coalesced) = coo(op, t)?;
    if coalesced {
        return Ok(t.clone());
    }
    let (sd, nnz) = (indices.shape()[0], indices.shape()[1]);
    let idx = index_vec(indices)?;
    let mult = contiguous_strides(&t.shape()[..sd]);
    let keys: Vec<i64> = (0..nnz)
        .map(|i| (0..sd).map(|d| idx[d * nnz + i] * mult[d] as i64).sum())
        .collect();
    let mut perm: Vec<usize> = (0..nnz).collect();
    perm.sort_by_key(|&i| keys[i]);
    // the groups of equal keys, in sorted order
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut prev = None;
    for &p in &perm {
        match groups.last_mut() {
            Some(g) if prev == Some(keys[p]) => g.push(p),
            _ => groups.push(vec![p]),
        }
        prev = Some(keys[p]);
    }
    let mut new_idx = vec![0i64; sd * groups.len()];
    for (j, g) in groups.iter().enumerate() {
        for d in 0..sd {
            new_idx[d * groups.len() + j] = idx[d * nnz + g[0]];
        }
    }
    let row: usize = values.shape()[1..].iter().product();
    let mut vshape = values.shape().to_vec();
    vshape[0] = groups.len();
    let new_values = crate::dispatch_standard!(values.dtype(), "coalesce", |T| {
        let v = values.contiguous()?.to_vec::<T>()?;
        let mut out: Vec<T> = Vec::with_capacity(groups.len() * row);
        for g in &groups {
            let start = out.len();
            out.extend_from_slice(&v[g[0] * row..(g[0] + 1) * row]);
            for &p in &g[1..] {
                for (o, &x) in out[start..].iter_mut().zip(&v[p * row..(p + 1) * row]) {
                    *o = o.add(x);
                }
            }
        }
        Tensor::from_vec(out, &vshape)
    })?;
    let new_indices = Tensor::from_vec(new_idx, &[sd, groups.len()])?;
    let mut out = Tensor::sparse_coo(new_indices, new_values, t.shape(), true)?;
    out.set_requires_grad(t.requires_grad());
    Ok(out)
}

fn coalesce_op(a: &mut Args) -> R {
    let t = a.any_layout_tensor(0)?;
    Ok(coalesce(a.op, &t)?.into())
}

/// `_coalesce(self)`: the kernel behind `coalesce()`, which asserts its argument is not
/// coalesced yet.
fn coalesce_uncoalesced(a: &mut Args) -> R {
    let t = a.any_layout_tensor(0)?;
    if coo(a.op, &t)?.2 {
        return Err(invalid_argument(
            a.op,
            "self",
            "must not be coalesced yet",
            "a coalesced tensor",
        ));
    }
    Ok(coalesce(a.op, &t)?.into())
}

/// `_coalesced_(self, coalesced)`: the flag set on the tensor itself (every handle).
fn mark_coalesced_in_place(a: &mut Args) -> R {
    let t = a.any_layout_tensor(0)?;
    coo(a.op, &t)?;
    let flag = a.bool(1)?;
    if let Some(p) = t.sparse_parts() {
        p.set_coalesced(flag);
    }
    Ok(t.into())
}

/// `_coalesced(self, coalesced)`: the same indices and values, marked.
fn mark_coalesced(a: &mut Args) -> R {
    let t = a.any_layout_tensor(0)?;
    let (indices, values, _) = coo(a.op, &t)?;
    let flag = a.bool(1)?;
    let mut out = Tensor::sparse_coo(indices.clone(), values.clone(), t.shape(), flag)?;
    out.set_requires_grad(t.requires_grad());
    Ok(out.into())
}

// ---------------------------------------------------------------- conversions

/// A sparse tensor as a strided one: COO entries accumulated in stored order (duplicates
/// add up), compressed entries written.
pub(crate) fn to_dense(op: &str, t: &Tensor) -> crate::Result<Tensor> {
    let p = parts(op, t)?;
    let size = t.shape();
    check_result_size(crate::tensor::checked_numel(size)?, t.dtype())?;
    crate::dispatch_standard!(t.dtype(), "to_dense", |T| {
        let mut out = vec![T::zero(); crate::tensor::checked_numel(size)?];
        let strides = contiguous_strides(size);
        match p {
            SparseParts::Coo {
                indices, values, ..
            } => {
                let (sd, nnz) = (indices.shape()[0], indices.shape()[1]);
                let idx = index_vec(indices)?;
                let v = values.contiguous()?.to_vec::<T>()?;
                let row: usize = size[sd..].iter().product();
                for i in 0..nnz {
                    let base: usize = (0..sd)
                        .map(|d| idx[d * nnz + i] as usize * strides[d] as usize)
                        .sum();
                    for (o, &x) in out[base..base + row].iter_mut().zip(&v[i * row..]) {
                        *o = o.add(x);
                    }
                }
            }
            SparseParts::Compressed {
                layout,
                compressed_indices,
                plain_indices,
                values,
            } => {
                let batch = p.batch_dim();
                let [bh, bw] = p.blocksize().unwrap_or([1, 1]);
                let comp = index_vec(compressed_indices)?;
                let plain = index_vec(plain_indices)?;
                let v = values.contiguous()?.to_vec::<T>()?;
                let nbatch: usize = size[..batch].iter().product();
                let ncomp = compressed_indices.shape()[batch] - 1;
                let nnz = p.nnz();
                let dense: usize = size[batch + 2..].iter().product();
                let (rs, cs) = (strides[batch] as usize, strides[batch + 1] as usize);
                let per_batch: usize = size[batch..].iter().product();
                for b in 0..nbatch {
                    for i in 0..ncomp {
                        let (s, e) = (comp[b * (ncomp + 1) + i], comp[b * (ncomp + 1) + i + 1]);
                        for k in s as usize..e as usize {
                            let j = plain[b * nnz + k] as usize;
                            let (r0, c0) = if layout.compresses_rows() {
                                (i * bh, j * bw)
                            } else {
                                (j * bh, i * bw)
                            };
                            let vk = (b * nnz + k) * bh * bw * dense;
                            for bi in 0..bh {
                                for bj in 0..bw {
                                    let o = b * per_batch + (r0 + bi) * rs + (c0 + bj) * cs;
                                    let src = vk + (bi * bw + bj) * dense;
                                    out[o..o + dense].copy_from_slice(&v[src..src + dense]);
                                }
                            }
                        }
                    }
                }
            }
        }
        Ok(Tensor::from_vec(out, size)?)
    })
}

/// `to_dense(self, dtype, *, masked_grad)`: a strided tensor is returned as it is (converted
/// to `dtype`); a sparse one densified (PyTorch refuses a `dtype` for it).
fn to_dense_op(a: &mut Args) -> R {
    let t = a.any_layout_tensor(0)?;
    let dtype = a.opt_dtype(1)?;
    if t.sparse_parts().is_none() {
        return Ok(converted(t, dtype)?.into());
    }
    sparse_to_dense(a.op, &t, dtype)
}

/// `_to_dense(self, dtype, masked_grad)`: the sparse kernel behind `to_dense` (no strided one).
fn to_dense_sparse_only(a: &mut Args) -> R {
    let t = a.any_layout_tensor(0)?;
    parts(a.op, &t)?;
    sparse_to_dense(a.op, &t, a.opt_dtype(1)?)
}

fn sparse_to_dense(op: &str, t: &Tensor, dtype: Option<DType>) -> R {
    if dtype.is_some() {
        return Err(unsupported_feature(
            if t.layout() == Layout::SparseCoo {
                "sparse_to_dense"
            } else {
                "sparse_csr_to_dense"
            },
            "the dtype argument",
        ));
    }
    Ok(to_dense(op, t)?.into())
}

/// A strided tensor as COO with `sparse_dim` sparse dims (PyTorch's `dense_to_sparse`): the
/// positions whose dense block has a nonzero, in row-major order; coalesced.
fn dense_to_coo(t: &Tensor, sparse_dim: usize) -> crate::Result<Tensor> {
    if sparse_dim > t.dim() {
        return Err(invalid_argument(
            "to_sparse",
            "sparse_dim",
            format!("must be between 0 and {}", t.dim()),
            sparse_dim,
        ));
    }
    let size = t.shape();
    let row: usize = size[sparse_dim..].iter().product();
    let n: usize = size[..sparse_dim].iter().product();
    let (positions, values) = crate::dispatch_standard!(t.dtype(), "to_sparse", |T| {
        let v = t.contiguous()?.to_vec::<T>()?;
        let mut pos = Vec::new();
        let mut vals: Vec<T> = Vec::new();
        for lin in 0..n {
            let block = &v[lin * row..(lin + 1) * row];
            if block.iter().any(|&x| x != T::zero()) {
                pos.push(lin);
                vals.extend_from_slice(block);
            }
        }
        let mut vshape = vec![pos.len()];
        vshape.extend_from_slice(&size[sparse_dim..]);
        Ok::<_, crate::Error>((pos, Tensor::from_vec(vals, &vshape)?))
    })?;
    let nnz = positions.len();
    let strides = contiguous_strides(&size[..sparse_dim]);
    let mut idx = vec![0i64; sparse_dim * nnz];
    for (i, &lin) in positions.iter().enumerate() {
        for d in 0..sparse_dim {
            idx[d * nnz + i] = ((lin / strides[d] as usize) % size[d]) as i64;
        }
    }
    Ok(Tensor::sparse_coo(
        Tensor::from_vec(idx, &[sparse_dim, nnz])?,
        values,
        size,
        true,
    )?)
}

/// A compressed tensor as COO (2 sparse dims, no batch dims): indices in the compressed
/// order, which is row-major (coalesced) for CSR and column-major (not coalesced) for CSC.
fn compressed_to_coo(op: &str, t: &Tensor) -> crate::Result<Tensor> {
    let p = parts(op, t)?;
    let SparseParts::Compressed {
        layout,
        compressed_indices,
        plain_indices,
        values,
    } = p
    else {
        return Ok(t.clone());
    };
    if p.batch_dim() != 0 || layout.is_blocked() {
        return Err(unsupported_feature(
            op,
            format!("conversion of a batched or blocked {layout} tensor to sparse_coo"),
        ));
    }
    let comp = index_vec(compressed_indices)?;
    let plain = index_vec(plain_indices)?;
    let nnz = p.nnz();
    let mut idx = vec![0i64; 2 * nnz];
    for i in 0..comp.len().saturating_sub(1) {
        for k in comp[i] as usize..comp[i + 1] as usize {
            let (r, c) = if layout.compresses_rows() {
                (i as i64, plain[k])
            } else {
                (plain[k], i as i64)
            };
            idx[k] = r;
            idx[nnz + k] = c;
        }
    }
    Ok(Tensor::sparse_coo(
        Tensor::from_vec(idx, &[2, nnz])?,
        values.clone(),
        t.shape(),
        layout.compresses_rows(),
    )?)
}

/// A strided or COO tensor (2 sparse dims, `dense_dim` dense ones) in a compressed layout
/// (`blocksize` for BSR/BSC): the entries (blocks with a nonzero) ordered by compressed then
/// plain index, int64 indices.
fn to_compressed(
    op: &str,
    t: &Tensor,
    layout: Layout,
    blocksize: Option<[usize; 2]>,
    dense_dim: Option<usize>,
) -> crate::Result<Tensor> {
    if let Some(p) = t.sparse_parts() {
        if p.layout() == layout {
            return Ok(t.clone());
        }
        if p.layout() != Layout::SparseCoo {
            return Err(unsupported_feature(
                op,
                format!("conversion from {} to {layout}", p.layout()),
            ));
        }
        if p.sparse_dim() != 2 {
            return Err(size_mismatch(
                op,
                format!("sparse_dim (to convert to {layout})"),
                2,
                p.sparse_dim() as i64,
            ));
        }
    }
    let dense_dim = match (t.sparse_parts(), dense_dim) {
        (Some(p), _) => p.dense_dim(),
        (None, Some(d)) => d,
        (None, None) => 0,
    };
    if t.dim() != 2 + dense_dim {
        return Err(unsupported_feature(
            op,
            format!(
                "a {}-d tensor with {dense_dim} dense dims (batched compressed layouts)",
                t.dim()
            ),
        ));
    }
    let [bh, bw] = match (layout.is_blocked(), blocksize) {
        (true, Some(b)) => b,
        (true, None) => {
            return Err(invalid_argument(
                op,
                "blocksize",
                format!("is required for {layout}"),
                "None",
            ))
        }
        (false, _) => [1, 1],
    };
    let dense = if t.sparse_parts().is_some() {
        to_dense(op, t)?
    } else {
        t.clone()
    };
    let size = t.shape().to_vec();
    let (rows, cols) = (size[0], size[1]);
    if bh == 0 || bw == 0 || rows % bh != 0 || cols % bw != 0 {
        return Err(invalid_argument(
            op,
            "blocksize",
            format!("must be nonzero and divide the tensor's shape ({rows}, {cols})"),
            format!("({bh}, {bw})"),
        ));
    }
    let inner: usize = size[2..].iter().product();
    let by_rows = layout.compresses_rows();
    let (ncomp, nplain) = if by_rows {
        (rows / bh, cols / bw)
    } else {
        (cols / bw, rows / bh)
    };
    let (comp, plain, values) =
        crate::dispatch_standard!(t.dtype(), "to_sparse_compressed", |T| {
            let v = dense.contiguous()?.to_vec::<T>()?;
            let at = |r: usize, c: usize| (r * cols + c) * inner;
            let mut comp = vec![0i64];
            let mut plain = Vec::new();
            let mut vals: Vec<T> = Vec::new();
            for i in 0..ncomp {
                for j in 0..nplain {
                    let (br, bc) = if by_rows { (i, j) } else { (j, i) };
                    let mut block: Vec<T> = Vec::with_capacity(bh * bw * inner);
                    for bi in 0..bh {
                        for bj in 0..bw {
                            let o = at(br * bh + bi, bc * bw + bj);
                            block.extend_from_slice(&v[o..o + inner]);
                        }
                    }
                    if block.iter().any(|&x| x != T::zero()) {
                        plain.push(j as i64);
                        vals.extend(block);
                    }
                }
                comp.push(plain.len() as i64);
            }
            let mut vshape = vec![plain.len()];
            if layout.is_blocked() {
                vshape.extend([bh, bw]);
            }
            vshape.extend_from_slice(&size[2..]);
            let values = Tensor::from_vec(vals, &vshape)?;
            Ok::<_, crate::Error>((comp, plain, values))
        })?;
    let nnz = plain.len();
    Ok(Tensor::sparse_compressed(
        layout,
        index_tensor(comp, &[ncomp + 1], DType::Int64)?,
        index_tensor(plain, &[nnz], DType::Int64)?,
        values,
        &size,
    )?)
}

/// Any tensor in `layout` (`to_sparse(layout=...)`).
fn to_layout(
    op: &str,
    t: &Tensor,
    layout: Layout,
    blocksize: Option<[usize; 2]>,
    dense_dim: Option<usize>,
) -> crate::Result<Tensor> {
    match layout {
        Layout::Strided => {
            if t.sparse_parts().is_some() {
                to_dense(op, t)
            } else {
                Ok(t.clone())
            }
        }
        Layout::SparseCoo => match t.sparse_parts() {
            Some(p) if p.layout() == Layout::SparseCoo => Ok(t.clone()),
            Some(_) => compressed_to_coo(op, t),
            None => {
                let dd = dense_dim.unwrap_or(0);
                let sd = t.dim().checked_sub(dd).ok_or_else(|| {
                    invalid_argument(
                        op,
                        "dense_dim",
                        format!("must be at most the tensor's {} dims", t.dim()),
                        dd,
                    )
                })?;
                dense_to_coo(t, sd)
            }
        },
        _ => to_compressed(op, t, layout, blocksize, dense_dim),
    }
}

fn blocksize_arg(a: &Args, i: usize) -> crate::Result<Option<[usize; 2]>> {
    match a.opt_int_list(i)? {
        None => Ok(None),
        Some(b) if b.len() == 2 => Ok(Some([
            to_usize(b[0], "blocksize")?,
            to_usize(b[1], "blocksize")?,
        ])),
        Some(b) => Err(invalid_argument(
            "to_sparse",
            "blocksize",
            "must be a tuple of two ints",
            format!("{b:?}"),
        )),
    }
}

fn opt_usize(a: &Args, i: usize, what: &str) -> crate::Result<Option<usize>> {
    a.opt_int(i)?.map(|v| to_usize(v, what)).transpose()
}

/// `to_sparse(self, *, layout, blocksize, dense_dim)` and `_to_sparse` (same arguments).
fn to_sparse(a: &mut Args) -> R {
    let t = a.any_layout_tensor(0)?;
    let layout = match a.opt_int(1)? {
        None => Layout::SparseCoo,
        Some(n) => Layout::from_number(n)
            .ok_or_else(|| invalid_argument(a.op, "layout", "must be a known layout", n))?,
    };
    let blocksize = blocksize_arg(a, 2)?;
    let dense_dim = opt_usize(a, 3, "dense_dim")?;
    Ok(to_layout(a.op, &t, layout, blocksize, dense_dim)?.into())
}

/// `to_sparse.sparse_dim(self, sparse_dim)` / `_to_sparse.sparse_dim`.
fn to_sparse_dim(a: &mut Args) -> R {
    let t = a.any_layout_tensor(0)?;
    let sd = to_usize(a.int(1)?, "sparse_dim")?;
    match t.sparse_parts() {
        None => Ok(dense_to_coo(&t, sd)?.into()),
        Some(p) if p.layout() == Layout::SparseCoo && p.sparse_dim() == sd => Ok(t.into()),
        Some(p) => Err(unsupported_feature(
            a.op,
            format!(
                "{} with sparse_dim {} to sparse_coo with sparse_dim {sd}",
                p.layout(),
                p.sparse_dim()
            ),
        )),
    }
}

/// `to_sparse_csr(self, dense_dim)` / `to_sparse_csc` (and the `_` forms), `L` the layout.
fn to_sparse_compressed<const L: i64>(a: &mut Args) -> R {
    let t = a.any_layout_tensor(0)?;
    let layout = Layout::from_number(L)
        .ok_or_else(|| invalid_argument(a.op, "layout", "must be a known layout", L))?;
    let dense_dim = opt_usize(a, 1, "dense_dim")?;
    Ok(to_layout(a.op, &t, layout, None, dense_dim)?.into())
}

/// `to_sparse_bsr(self, blocksize, dense_dim)` / `to_sparse_bsc` (and the `_` forms).
fn to_sparse_blocked<const L: i64>(a: &mut Args) -> R {
    let t = a.any_layout_tensor(0)?;
    let layout = Layout::from_number(L)
        .ok_or_else(|| invalid_argument(a.op, "layout", "must be a known layout", L))?;
    let blocksize = blocksize_arg(a, 1)?;
    let dense_dim = opt_usize(a, 2, "dense_dim")?;
    Ok(to_layout(a.op, &t, layout, blocksize, dense_dim)?.into())
}

// ---------------------------------------------------------------- products

/// `beta * input + alpha * (sparse @ dense)` for a 2-D sparse matrix (COO without dense
/// dims, or CSR/CSC) and a strided matrix, as PyTorch's CPU worker computes it: the result
/// starts as `input * beta` (zeros when beta is 0), then every stored entry `(r, c, v)`, in
/// stored order, adds `(alpha * v) * dense[c, :]` to row `r`.
pub(crate) fn sparse_addmm(
    op: &str,
    input: Option<&Tensor>,
    sparse: &Tensor,
    dense: &Tensor,
    beta: Scalar,
    alpha: Scalar,
) -> crate::Result<Tensor> {
    let p = parts(op, sparse)?;
    check_rank(op, "sparse", RankRequirement::Exactly(2), sparse.shape())?;
    check_rank(op, "dense", RankRequirement::Exactly(2), dense.shape())?;
    if p.dense_dim() != 0 || p.batch_dim() != 0 {
        return Err(unsupported_feature(
            op,
            format!("a {} operand with dense or batch dims", p.layout()),
        ));
    }
    if p.layout().is_blocked() {
        return Err(unsupported_feature(
            op,
            format!("products of {} tensors", p.layout()),
        ));
    }
    let (n, k, m) = (sparse.shape()[0], sparse.shape()[1], dense.shape()[1]);
    if dense.shape()[0] != k {
        return Err(crate::tensor::TensorError::MatmulShapes {
            op: op.trim_start_matches("aten::").to_string(),
            mat1: [n, k],
            mat2: [dense.shape()[0], m],
        }
        .into());
    }
    if sparse.dtype() != dense.dtype() {
        return Err(TensorError::OperandDTypes {
            op: op.into(),
            left: sparse.dtype(),
            right: dense.dtype(),
        }
        .into());
    }
    // the stored entries (row, col, position in values), in stored order
    let entries: Vec<(usize, usize)> = match p {
        SparseParts::Coo { indices, .. } => {
            let idx = index_vec(indices)?;
            let nnz = p.nnz();
            (0..nnz)
                .map(|i| (idx[i] as usize, idx[nnz + i] as usize))
                .collect()
        }
        SparseParts::Compressed {
            layout,
            compressed_indices,
            plain_indices,
            ..
        } => {
            let comp = index_vec(compressed_indices)?;
            let plain = index_vec(plain_indices)?;
            let mut e = vec![(0, 0); p.nnz()];
            for i in 0..comp.len().saturating_sub(1) {
                for kk in comp[i] as usize..comp[i + 1] as usize {
                    let j = plain[kk] as usize;
                    e[kk] = if layout.compresses_rows() {
                        (i, j)
                    } else {
                        (j, i)
                    };
                }
            }
            e
        }
    };
    check_result_size(crate::tensor::checked_numel(&[n, m])?, dense.dtype())?;
    crate::dispatch_standard_numeric!(dense.dtype(), "addmm (sparse)", |T| {
        let beta_t = scalar_as::<T>(beta);
        let alpha_t = scalar_as::<T>(alpha);
        let mut out: Vec<T> = match input {
            Some(inp) if !is_zero(beta) => {
                let base = inp.to_dtype(T::DTYPE)?;
                let shape = crate::tensor::broadcast_shapes(base.shape(), &[n, m])?;
                if shape.as_slice() != [n, m] {
                    return Err(shape_mismatch(op, "input", &[n, m], inp.shape()));
                }
                let g = base.read::<T>()?;
                let view = g.view();
                let b = view
                    .broadcast(ndarray::IxDyn(&[n, m]))
                    .ok_or_else(|| shape_mismatch(op, "input", &[n, m], inp.shape()))?;
                if is_one(beta) {
                    b.iter().copied().collect()
                } else {
                    b.iter().map(|&x| x.mul(beta_t)).collect()
                }
            }
            _ => vec![T::zero(); n * m],
        };
        let v = p.values().contiguous()?.to_vec::<T>()?;
        let d = dense.contiguous()?.to_vec::<T>()?;
        for (&(r, c), &val) in entries.iter().zip(&v) {
            let s = alpha_t.mul(val);
            for (o, &x) in out[r * m..(r + 1) * m]
                .iter_mut()
                .zip(&d[c * m..(c + 1) * m])
            {
                *o = o.add(s.mul(x));
            }
        }
        Ok(Tensor::from_vec(out, &[n, m])?)
    })
}

fn scalar_as<T: Element>(s: Scalar) -> T {
    match s {
        Scalar::Bool(b) => T::from_bool(b),
        Scalar::Int(i) => T::from_i64(i),
        Scalar::Float(f) => T::from_f64(f),
        Scalar::Complex(c) => T::from_c64(c),
    }
}

fn is_zero(s: Scalar) -> bool {
    match s {
        Scalar::Bool(b) => !b,
        Scalar::Int(i) => i == 0,
        Scalar::Float(f) => f == 0.0,
        Scalar::Complex(c) => c.re == 0.0 && c.im == 0.0,
    }
}

fn is_one(s: Scalar) -> bool {
    match s {
        Scalar::Bool(b) => b,
        Scalar::Int(i) => i == 1,
        Scalar::Float(f) => f == 1.0,
        Scalar::Complex(c) => c.re == 1.0 && c.im == 0.0,
    }
}

/// `sparse @ dense`, `dense @ sparse` (through the transposes, as `_sparse_mm` does) or
/// `sparse @ sparse` (`_sparse_sparse_matmul`).
pub(crate) fn sparse_mm(op: &str, x: &Tensor, y: &Tensor) -> crate::Result<Tensor> {
    match (x.sparse_parts().is_some(), y.sparse_parts().is_some()) {
        (true, true) => sparse_sparse_matmul(op, x, y),
        (true, false) => sparse_addmm(op, None, x, y, Scalar::Int(0), Scalar::Int(1)),
        (false, true) => {
            // (y^T @ x^T)^T with y^T sparse: transpose the COO indices
            let yt = transpose_coo(op, y)?;
            let xt = transpose2(x)?;
            let r = sparse_addmm(op, None, &yt, &xt, Scalar::Int(0), Scalar::Int(1))?;
            transpose2(&r)?.contiguous()
        }
        (false, false) => Err(invalid_argument(
            op,
            "self or mat2",
            "must be sparse",
            "two strided tensors",
        )),
    }
}

fn transpose2(t: &Tensor) -> crate::Result<Tensor> {
    check_rank("t", "self", RankRequirement::Exactly(2), t.shape())?;
    let s = t.strides();
    Ok(t.as_strided(
        &[t.shape()[1], t.shape()[0]],
        &[s[1], s[0]],
        t.storage_offset(),
    )?)
}

/// The transpose of a 2-D COO matrix (rows and columns of the indices swapped, uncoalesced).
fn transpose_coo(op: &str, t: &Tensor) -> crate::Result<Tensor> {
    let coo_t = if t.layout() == Layout::SparseCoo {
        t.clone()
    } else {
        compressed_to_coo(op, t)?
    };
    let (indices, values, _) = coo(op, &coo_t)?;
    check_size(op, "sparse_dim", 2, indices.shape()[0] as i64)?;
    let nnz = indices.shape()[1];
    let idx = index_vec(indices)?;
    let mut swapped = idx[nnz..].to_vec();
    swapped.extend_from_slice(&idx[..nnz]);
    Ok(Tensor::sparse_coo(
        Tensor::from_vec(swapped, &[2, nnz])?,
        values.clone(),
        &[t.shape()[1], t.shape()[0]],
        false,
    )?)
}

/// `_sparse_sparse_matmul(a, b)` of 2-D COO matrices: for each row of `a` (coalesced), the
/// products `a[i, k] * b[k, j]` summed per column `j` in `a`'s order of `k`; the result is
/// coalesced.
fn sparse_sparse_matmul(op: &str, x: &Tensor, y: &Tensor) -> crate::Result<Tensor> {
    let x = coalesce(op, x)?;
    let y = coalesce(op, y)?;
    let (xi, xv, _) = coo(op, &x)?;
    let (yi, yv, _) = coo(op, &y)?;
    check_rank(op, "self", RankRequirement::Exactly(2), x.shape())?;
    check_rank(op, "mat2", RankRequirement::Exactly(2), y.shape())?;
    if xv.dim() != 1 || yv.dim() != 1 {
        return Err(unsupported_feature(op, "sparse operands with dense dims"));
    }
    let (n, k, m) = (x.shape()[0], x.shape()[1], y.shape()[1]);
    if y.shape()[0] != k {
        return Err(crate::tensor::TensorError::MatmulShapes {
            op: "mm".into(),
            mat1: [n, k],
            mat2: [y.shape()[0], m],
        }
        .into());
    }
    if x.dtype() != y.dtype() {
        return Err(TensorError::OperandDTypes {
            op: op.into(),
            left: x.dtype(),
            right: y.dtype(),
        }
        .into());
    }
    check_result_size(m.max(k).saturating_add(1), DType::Int64)?;
    let (xidx, yidx) = (index_vec(xi)?, index_vec(yi)?);
    let (xn, yn) = (xv.shape()[0], yv.shape()[0]);
    // b's row starts
    let mut ystart = vec![0usize; k + 1];
    for i in 0..yn {
        ystart[yidx[i] as usize + 1] += 1;
    }
    for r in 0..k {
        ystart[r + 1] += ystart[r];
    }
    crate::dispatch_standard_numeric!(x.dtype(), "_sparse_sparse_matmul", |T| {
        let xvals = xv.to_vec::<T>()?;
        let yvals = yv.to_vec::<T>()?;
        let mut rows = Vec::new();
        let mut cols = Vec::new();
        let mut vals: Vec<T> = Vec::new();
        let mut acc: Vec<Option<T>> = vec![None; m];
        let mut e = 0;
        while e < xn {
            let r = xidx[e];
            let mut touched = Vec::new();
            while e < xn && xidx[e] == r {
                let kk = xidx[xn + e] as usize;
                for q in ystart[kk]..ystart[kk + 1] {
                    let j = yidx[yn + q] as usize;
                    let prod = xvals[e].mul(yvals[q]);
                    acc[j] = Some(match acc[j] {
                        Some(s) => s.add(prod),
                        None => {
                            touched.push(j);
                            T::zero().add(prod)
                        }
                    });
                }
                e += 1;
            }
            touched.sort_unstable();
            for j in touched {
                if let Some(s) = acc[j].take() {
                    rows.push(r);
                    cols.push(j as i64);
                    vals.push(s);
                }
            }
        }
        let nnz = vals.len();
        rows.extend(cols);
        Ok(Tensor::sparse_coo(
            Tensor::from_vec(rows, &[2, nnz])?,
            Tensor::from_vec(vals, &[nnz])?,
            &[n, m],
            true,
        )?)
    })
}

/// `_sparse_mm(sparse, dense)` (either operand may be the sparse one).
fn sparse_mm_op(a: &mut Args) -> R {
    let (x, y) = (a.any_layout_tensor(0)?, a.any_layout_tensor(1)?);
    Ok(sparse_mm(a.op, &x, &y)?.into())
}

/// `_sparse_sparse_matmul(self, other)`.
fn sparse_sparse_matmul_op(a: &mut Args) -> R {
    let (x, y) = (a.any_layout_tensor(0)?, a.any_layout_tensor(1)?);
    for t in [&x, &y] {
        if t.layout() != Layout::SparseCoo {
            return Err(no_kernel(a.op, t));
        }
    }
    Ok(sparse_sparse_matmul(a.op, &x, &y)?.into())
}

/// `_sparse_addmm(self, mat1, mat2, *, beta, alpha)`: `mat1` sparse.
fn sparse_addmm_op(a: &mut Args) -> R {
    let input = a.tensor(0)?;
    let (mat1, mat2) = (a.any_layout_tensor(1)?, a.tensor(2)?);
    let (beta, alpha) = (a.scalar(3)?, a.scalar(4)?);
    Ok(sparse_addmm(a.op, Some(&input), &mat1, &mat2, beta, alpha)?.into())
}

/// `hspmm(mat1, mat2)`: `mat1 @ mat2` as a COO tensor with one sparse dim, the rows of
/// `mat1` (coalesced) that hold an entry.
fn hspmm(a: &mut Args) -> R {
    let (x, y) = (a.any_layout_tensor(0)?, a.tensor(1)?);
    let x = coalesce(a.op, &x)?;
    let (xi, xv, _) = coo(a.op, &x)?;
    check_rank(a.op, "self", RankRequirement::Exactly(2), x.shape())?;
    check_size(a.op, "sparse_dim", 2, xi.shape()[0] as i64)?;
    let nnz = xi.shape()[1];
    let idx = index_vec(xi)?;
    // the distinct rows in order, and each entry re-addressed to its row's position
    let mut rows: Vec<i64> = Vec::new();
    let mut compact = vec![0i64; 2 * nnz];
    for e in 0..nnz {
        if rows.last() != Some(&idx[e]) {
            rows.push(idx[e]);
        }
        compact[e] = rows.len() as i64 - 1;
        compact[nnz + e] = idx[nnz + e];
    }
    let k = x.shape()[1];
    let compacted = Tensor::sparse_coo(
        Tensor::from_vec(compact, &[2, nnz])?,
        xv.clone(),
        &[rows.len(), k],
        true,
    )?;
    let vals = sparse_addmm(a.op, None, &compacted, &y, Scalar::Int(0), Scalar::Int(1))?;
    let nrows = rows.len();
    // PyTorch leaves the result unmarked, though its rows are sorted
    Ok(Tensor::sparse_coo(
        Tensor::from_vec(rows, &[1, nrows])?,
        vals,
        &[x.shape()[0], y.shape()[1]],
        false,
    )?
    .into())
}

// ---------------------------------------------------------------- reductions

/// `_sparse_sum(self)` / `.dtype`: the coalesced values summed (as the dense `sum`).
fn sparse_sum_all<const DTYPE: bool>(a: &mut Args) -> R {
    let t = a.any_layout_tensor(0)?;
    let t = if DTYPE { t.to_dtype(a.dtype(1)?)? } else { t };
    let c = coalesce(a.op, &t)?;
    let (_, values, _) = coo(a.op, &c)?;
    Ok(super::reduce::sum_op(values, None, false, None, false)?.into())
}

/// `_sparse_sum.dim(self, dim)` / `.dim_dtype`: summing every sparse dim gives a strided
/// tensor (the values summed over nnz and the listed dense dims); otherwise a coalesced COO
/// tensor over the remaining sparse dims.
fn sparse_sum_dims<const DTYPE: bool>(a: &mut Args) -> R {
    let t = a.any_layout_tensor(0)?;
    let t = if DTYPE { t.to_dtype(a.dtype(2)?)? } else { t };
    let c = coalesce(a.op, &t)?;
    let (indices, values, _) = coo(a.op, &c)?;
    let sd = indices.shape()[0];
    let mut dims = Vec::new();
    for d in a.int_list(1)? {
        let w = crate::tensor::wrap_dim(d, t.dim())?;
        if dims.contains(&w) {
            return Err(invalid_argument(
                a.op,
                "dim",
                "must not repeat a dim",
                format!("{w} twice"),
            ));
        }
        dims.push(w);
    }
    let dense_dims: Vec<i64> = dims
        .iter()
        .filter(|&&d| d >= sd)
        .map(|&d| (d - sd + 1) as i64)
        .collect();
    let summed_sparse: Vec<usize> = dims.iter().copied().filter(|&d| d < sd).collect();
    let new_values = if dense_dims.is_empty() {
        values.clone()
    } else {
        super::reduce::sum_op(values, Some(&dense_dims), false, None, false)?
    };
    if summed_sparse.len() == sd {
        return Ok(super::reduce::sum_op(&new_values, Some(&[0]), false, None, false)?.into());
    }
    let keep: Vec<usize> = (0..sd).filter(|d| !summed_sparse.contains(d)).collect();
    let nnz = indices.shape()[1];
    let idx = index_vec(indices)?;
    let mut new_idx = Vec::with_capacity(keep.len() * nnz);
    for &d in &keep {
        new_idx.extend_from_slice(&idx[d * nnz..(d + 1) * nnz]);
    }
    let new_size: Vec<usize> = (0..t.dim())
        .filter(|d| !dims.contains(d))
        .map(|d| t.shape()[d])
        .collect();
    let uncoalesced = Tensor::sparse_coo(
        Tensor::from_vec(new_idx, &[keep.len(), nnz])?,
        new_values,
        &new_size,
        false,
    )?;
    Ok(coalesce(a.op, &uncoalesced)?.into())
}

/// Softmax (`LOG`: log-softmax) of a COO tensor along `dim` over the specified elements only
/// (PyTorch's `cpu_sparse_coo_softmax`): entries sharing every sparse index but `dim` form a
/// pool; along a dense `dim` the lanes of each entry's values.
fn sparse_softmax(op: &str, t: &Tensor, dim: i64, log: bool) -> crate::Result<Tensor> {
    let c = coalesce(op, t)?;
    let (indices, values, _) = coo(op, &c)?;
    let dim = crate::tensor::wrap_dim(dim, t.dim())?;
    let sd = indices.shape()[0];
    let nnz = indices.shape()[1];
    let row: usize = values.shape()[1..].iter().product();
    // the groups of flat value positions normalized together, each in order
    let mut groups: Vec<Vec<usize>> = Vec::new();
    if dim >= sd {
        let vdim = dim - sd + 1;
        let len = values.shape()[vdim];
        let inner: usize = values.shape()[vdim + 1..].iter().product();
        let outer = values.numel() / (len * inner).max(1);
        for o in 0..outer {
            for i in 0..inner {
                groups.push((0..len).map(|l| (o * len + l) * inner + i).collect());
            }
        }
    } else {
        let idx = index_vec(indices)?;
        let strides = contiguous_strides(&t.shape()[..sd]);
        // pools: entries with equal indices outside `dim`, in first-seen order
        let mut pool_of = std::collections::HashMap::new();
        let mut pools: Vec<Vec<usize>> = Vec::new();
        for e in 0..nnz {
            let key: i64 = (0..sd)
                .filter(|&d| d != dim)
                .map(|d| idx[d * nnz + e] * strides[d] as i64)
                .sum();
            let p = *pool_of.entry(key).or_insert_with(|| {
                pools.push(Vec::new());
                pools.len() - 1
            });
            pools[p].push(e);
        }
        for pool in &pools {
            for j in 0..row {
                groups.push(pool.iter().map(|&e| e * row + j).collect());
            }
        }
    }
    let out = crate::dispatch_float!(values.dtype(), op, |T| {
        let v: Vec<T> = values.contiguous()?.to_vec::<T>()?;
        let mut out = vec![T::zero(); v.len()];
        for g in &groups {
            let mx = g
                .iter()
                .map(|&q| v[q].to_f64())
                .fold(
                    f64::NEG_INFINITY,
                    |m, x| {
                        if x > m || x.is_nan() {
                            x
                        } else {
                            m
                        }
                    },
                );
            let mut sum = T::zero();
            for &q in g {
                let ex = T::from_f64((v[q].to_f64() - mx).exp());
                out[q] = ex;
                sum = sum.add(ex);
            }
            for &q in g {
                out[q] = if log {
                    T::from_f64(v[q].to_f64() - mx - sum.to_f64().ln())
                } else {
                    T::from_f64(out[q].to_f64() / sum.to_f64())
                };
            }
        }
        Tensor::from_vec(out, values.shape())
    })?;
    Ok(c.with_sparse_values(out)?)
}

/// `_sparse_softmax(self, dim, half_to_float)` / `_sparse_log_softmax` (`LOG`).
fn sparse_softmax_op<const LOG: bool>(a: &mut Args) -> R {
    let t = a.any_layout_tensor(0)?;
    if a.bool(2)? {
        return Err(unsupported_feature(
            a.op,
            "half_to_float=True (a CUDA-only option)",
        ));
    }
    Ok(sparse_softmax(a.op, &t, a.int(1)?, LOG)?.into())
}

/// `_sparse_softmax.int(self, dim, dtype)` / `_sparse_log_softmax.int`: the values converted
/// to `dtype` first.
fn sparse_softmax_int<const LOG: bool>(a: &mut Args) -> R {
    let t = a.any_layout_tensor(0)?;
    let t = converted(t, a.opt_dtype(2)?)?;
    Ok(sparse_softmax(a.op, &t, a.int(1)?, LOG)?.into())
}

/// `sparse_mask(self, mask)`: `self` (strided) at the indices of the COO `mask`, as a COO
/// tensor with the mask's indices and coalesced flag.
fn sparse_mask(a: &mut Args) -> R {
    let (x, mask) = (a.tensor(0)?, a.any_layout_tensor(1)?);
    let (indices, mvalues, coalesced) = coo(a.op, &mask)?;
    if x.shape() != mask.shape() {
        return Err(shape_mismatch(a.op, "mask", x.shape(), mask.shape()));
    }
    let sd = indices.shape()[0];
    let nnz = indices.shape()[1];
    let idx = index_vec(indices)?;
    let strides = contiguous_strides(x.shape());
    let row: usize = x.shape()[sd..].iter().product();
    let values = crate::dispatch_standard!(x.dtype(), "sparse_mask", |T| {
        let v = x.contiguous()?.to_vec::<T>()?;
        let mut out: Vec<T> = Vec::with_capacity(nnz * row);
        for e in 0..nnz {
            let base: usize = (0..sd)
                .map(|d| idx[d * nnz + e] as usize * strides[d] as usize)
                .sum();
            out.extend_from_slice(&v[base..base + row]);
        }
        Tensor::from_vec(out, mvalues.shape())
    })?;
    Ok(Tensor::sparse_coo(indices.clone(), values, mask.shape(), coalesced)?.into())
}

/// `_validate_compressed_sparse_indices(is_crow, compressed_idx, plain_idx, cdim, dim, nnz)`.
fn validate_compressed_indices(a: &mut Args) -> R {
    let is_crow = a.bool(0)?;
    let (comp, plain) = (a.tensor(1)?, a.tensor(2)?);
    let cdim = to_usize(a.int(3)?, "cdim")?;
    let dim = to_usize(a.int(4)?, "dim")?;
    let nnz = to_usize(a.int(5)?, "nnz")?;
    if comp.dim() != 1 || plain.dim() != 1 {
        return Err(unsupported_feature(
            a.op,
            format!(
                "batched index tensors ({:?} and {:?})",
                comp.shape(),
                plain.shape()
            ),
        ));
    }
    crate::tensor::validate_compressed_indices(is_crow, &comp, &plain, cdim, dim, nnz)?;
    Ok(IValue::None)
}

/// `_spdiags(diagonals, offsets, shape, layout)`: diagonal `d` (offset `k`) puts
/// `diagonals[d, j]` at `(j - k, j)` for every column `j` inside both the matrix and the row of
/// diagonals; a COO tensor in diagonal order (uncoalesced), or converted to `layout`.
fn spdiags(a: &mut Args) -> R {
    let (diagonals, offsets) = (a.tensor(0)?, a.tensor(1)?);
    let shape = sparse_size(&a.int_list(2)?)?;
    check_rank(
        a.op,
        "diagonals",
        RankRequirement::Exactly(2),
        diagonals.shape(),
    )?;
    check_rank(
        a.op,
        "offsets",
        RankRequirement::Exactly(1),
        offsets.shape(),
    )?;
    check_size(a.op, "the length of shape", 2, shape.len() as i64)?;
    check_size(
        a.op,
        "the number of offsets (one per diagonal)",
        diagonals.shape()[0] as i64,
        offsets.shape()[0] as i64,
    )?;
    let offs = index_vec(&offsets)?;
    let mut seen = std::collections::HashSet::new();
    if offs.iter().any(|o| !seen.insert(*o)) {
        return Err(invalid_argument(
            a.op,
            "offsets",
            "must not contain duplicate values",
            format!("{offs:?}"),
        ));
    }
    let (m, n) = (shape[0] as i64, shape[1] as i64);
    let len = diagonals.shape()[1] as i64;
    let mut rows = Vec::new();
    let mut cols = Vec::new();
    let mut take = Vec::new();
    for (d, &k) in offs.iter().enumerate() {
        let first = k.max(0);
        let last = (m + k).min(n).min(len);
        for j in first..last {
            rows.push(j - k);
            cols.push(j);
            take.push(d * len as usize + j as usize);
        }
    }
    let nnz = rows.len();
    let values = crate::dispatch_standard!(diagonals.dtype(), "_spdiags", |T| {
        let v = diagonals.contiguous()?.to_vec::<T>()?;
        let picked: Vec<T> = take.iter().map(|&i| v[i]).collect();
        Tensor::from_vec(picked, &[nnz])
    })?;
    rows.extend(cols);
    let coo = Tensor::sparse_coo(Tensor::from_vec(rows, &[2, nnz])?, values, &shape, false)?;
    let layout = match a.opt_int(3)? {
        None => Layout::SparseCoo,
        Some(l) => Layout::from_number(l)
            .filter(|l| matches!(l, Layout::SparseCoo | Layout::SparseCsr | Layout::SparseCsc))
            .ok_or_else(|| {
                invalid_argument(
                    a.op,
                    "layout",
                    "must be torch.sparse_coo, torch.sparse_csc or torch.sparse_csr",
                    l,
                )
            })?,
    };
    Ok(to_layout(a.op, &coo, layout, None, None)?.into())
}

/// `_sparse_broadcast_to(self, size)` of a COO tensor: new leading dims and size-1 sparse dims
/// that grow become sparse dims, every entry repeated over their index combinations
/// (row-major); size-1 dense dims are expanded in the values.
fn sparse_broadcast_to(a: &mut Args) -> R {
    let t = a.any_layout_tensor(0)?;
    let (indices, values, _) = coo(a.op, &t)?;
    let size = sparse_size(&a.int_list(1)?)?;
    let (dim, sd) = (t.dim(), indices.shape()[0]);
    if size.len() < dim {
        return Err(invalid_argument(
            a.op,
            "the number of sizes",
            format!("must be at least the number of dimensions in the tensor ({dim})"),
            size.len(),
        ));
    }
    let lead = size.len() - dim;
    for d in 0..dim {
        let (have, want) = (t.shape()[d], size[lead + d]);
        if have != want && have != 1 {
            return Err(size_mismatch(
                a.op,
                format!("the size at non-singleton dimension {}", lead + d),
                have as i64,
                want as i64,
            ));
        }
    }
    // the sparse dims of the result whose index is enumerated
    let grown: Vec<usize> = (0..lead)
        .chain(
            (0..sd)
                .filter(|&d| t.shape()[d] == 1 && size[lead + d] != 1)
                .map(|d| d + lead),
        )
        .collect();
    let combos = crate::tensor::checked_numel(&grown.iter().map(|&d| size[d]).collect::<Vec<_>>())?;
    let nnz = indices.shape()[1];
    let new_sd = lead + sd;
    let new_nnz = nnz
        .checked_mul(combos)
        .ok_or_else(|| shape_err(format!("{}: too many entries", a.op)))?;
    let dense_elems = crate::tensor::checked_numel(&size[lead + sd..])?;
    check_result_size(
        new_nnz.saturating_mul(new_sd.max(1) + dense_elems),
        DType::Int64,
    )?;
    let idx = index_vec(indices)?;
    let mut new_idx = vec![0i64; new_sd * new_nnz];
    let strides = contiguous_strides(&grown.iter().map(|&d| size[d]).collect::<Vec<_>>());
    for e in 0..nnz {
        for c in 0..combos {
            let col = e * combos + c;
            for d in lead..new_sd {
                new_idx[d * new_nnz + col] = idx[(d - lead) * nnz + e];
            }
            for (g, &d) in grown.iter().enumerate() {
                new_idx[d * new_nnz + col] = ((c / strides[g] as usize) % size[d]) as i64;
            }
        }
    }
    let row: usize = values.shape()[1..].iter().product();
    let mut dense_shape = vec![nnz];
    dense_shape.extend_from_slice(&size[lead + sd..]);
    let expanded = {
        let g = crate::tensor::broadcast_shapes(values.shape(), &dense_shape)?;
        if g.as_slice() != dense_shape.as_slice() {
            return Err(shape_mismatch(a.op, "values", &dense_shape, values.shape()));
        }
        let mut strides: Vec<isize> = values.strides().to_vec();
        for (k, s) in strides.iter_mut().enumerate() {
            if values.shape()[k] != dense_shape[k] {
                *s = 0;
            }
        }
        values.as_strided(&dense_shape, &strides, values.storage_offset())?
    };
    let dense_row: usize = dense_shape[1..].iter().product();
    let _ = row;
    let new_values = crate::dispatch_standard!(values.dtype(), "_sparse_broadcast_to", |T| {
        let v = expanded.to_vec::<T>()?;
        let mut out: Vec<T> = Vec::with_capacity(new_nnz * dense_row);
        for e in 0..nnz {
            for _ in 0..combos {
                out.extend_from_slice(&v[e * dense_row..(e + 1) * dense_row]);
            }
        }
        let mut vshape = vec![new_nnz];
        vshape.extend_from_slice(&dense_shape[1..]);
        Tensor::from_vec(out, &vshape)
    })?;
    Ok(Tensor::sparse_coo(
        Tensor::from_vec(new_idx, &[new_sd, new_nnz])?,
        new_values,
        &size,
        false,
    )?
    .into())
}

/// `_sparse_csr_sum.dim_dtype` / `_sparse_csr_prod.dim_dtype` (`PROD`): a CSR matrix reduced
/// over dim 0, 1 or both with keepdim (PyTorch supports no other case); one entry per
/// nonempty row (column), accumulated in stored order.
fn sparse_csr_reduce<const PROD: bool>(a: &mut Args) -> R {
    let t = a.any_layout_tensor(0)?;
    let p = parts(a.op, &t)?;
    let SparseParts::Compressed {
        layout: Layout::SparseCsr,
        compressed_indices,
        plain_indices,
        values,
    } = p
    else {
        return Err(no_kernel(a.op, &t));
    };
    if t.dim() != 2 || values.dim() != 1 {
        return Err(unsupported_feature(
            a.op,
            "reductions of batched or hybrid CSR tensors",
        ));
    }
    let mut dims = Vec::new();
    for d in a.int_list(1)? {
        let w = crate::tensor::wrap_dim(d, 2)?;
        if !dims.contains(&w) {
            dims.push(w);
        }
    }
    if !a.bool(2)? {
        return Err(unsupported_feature(
            a.op,
            "keepdim=False on a CSR tensor (PyTorch supports only keepdim=True)",
        ));
    }
    let out_dtype = a
        .opt_dtype(3)?
        .unwrap_or(if values.dtype().is_integral(true) {
            DType::Int64
        } else {
            values.dtype()
        });
    let values = values.to_dtype(out_dtype)?;
    let comp = index_vec(compressed_indices)?;
    let plain = index_vec(plain_indices)?;
    let (rows, cols) = (t.shape()[0], t.shape()[1]);
    // the groups: (result row, result col) -> entries, in stored order
    let mut keys: Vec<(usize, usize)> = Vec::new();
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut at = std::collections::HashMap::new();
    for r in 0..rows {
        let (start, end) = (comp[r] as usize, comp[r + 1] as usize);
        for (k, &c) in plain.iter().enumerate().take(end).skip(start) {
            let c = c as usize;
            let key = (
                if dims.contains(&0) { 0 } else { r },
                if dims.contains(&1) { 0 } else { c },
            );
            let g = *at.entry(key).or_insert_with(|| {
                keys.push(key);
                groups.push(Vec::new());
                groups.len() - 1
            });
            groups[g].push(k);
        }
    }
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by_key(|&g| keys[g]);
    let out_rows = if dims.contains(&0) { 1 } else { rows };
    let out_cols = if dims.contains(&1) { 1 } else { cols };
    let mut crow = vec![0i64; out_rows + 1];
    let mut ocol = Vec::with_capacity(order.len());
    for &g in &order {
        crow[keys[g].0 + 1] += 1;
        ocol.push(keys[g].1 as i64);
    }
    for r in 0..out_rows {
        crow[r + 1] += crow[r];
    }
    let nnz = order.len();
    let out_values =
        crate::dispatch_standard_numeric!(out_dtype, "_sparse_csr_reduce", |T| {
            let v = values.to_vec::<T>()?;
            let reduced: Vec<T> =
                order
                    .iter()
                    .map(|&g| {
                        let start = if PROD { T::one() } else { T::zero() };
                        groups[g].iter().fold(start, |acc, &k| {
                            if PROD {
                                acc.mul(v[k])
                            } else {
                                acc.add(v[k])
                            }
                        })
                    })
                    .collect();
            Tensor::from_vec(reduced, &[nnz])
        })?;
    Ok(Tensor::sparse_compressed(
        Layout::SparseCsr,
        index_tensor(crow, &[out_rows + 1], compressed_indices.dtype())?,
        index_tensor(ocol, &[nnz], plain_indices.dtype())?,
        out_values,
        &[out_rows, out_cols],
    )?
    .into())
}

/// `native_norm(self, p)` of a COO tensor: the p-norm of its coalesced values.
fn native_norm(a: &mut Args) -> R {
    let t = a.any_layout_tensor(0)?;
    let p = a.scalar(1)?.to_f64();
    let c = coalesce(a.op, &t)?;
    let (_, values, _) = coo(a.op, &c)?;
    Ok(super::reduce::vector_norm(values, p, None, false, None)?.into())
}

/// `native_norm.ScalarOpt_dim_dtype(self, p, dim, keepdim, dtype)`: only full reductions
/// (`dim` empty or every dim), as PyTorch's `norm_sparse`.
fn native_norm_dims(a: &mut Args) -> R {
    let t = a.any_layout_tensor(0)?;
    let p = a.opt_scalar(1)?.map_or(2.0, |s| s.to_f64());
    let dims = a.int_list(2)?;
    let mut all: Vec<usize> = dims
        .iter()
        .map(|&d| crate::tensor::wrap_dim(d, t.dim()))
        .collect::<Result<_, _>>()?;
    all.sort_unstable();
    all.dedup();
    if !dims.is_empty() && all.len() != t.dim() {
        return Err(invalid_argument(
            "norm_sparse",
            "dim",
            "must be empty or contain all dimensions of the input (only full reductions)",
            format!("{dims:?}"),
        ));
    }
    if a.bool(3)? {
        return Err(unsupported_feature(
            "norm_sparse",
            "keepdim=True (PyTorch supports only keepdim=False)",
        ));
    }
    if a.opt_dtype(4)?.is_some() {
        return Err(unsupported_feature(
            "norm_sparse",
            "the dtype argument (PyTorch does not support it)",
        ));
    }
    let c = coalesce(a.op, &t)?;
    let (_, values, _) = coo(a.op, &c)?;
    let r = super::reduce::vector_norm(values, p, None, false, None)?;
    Ok(r.into())
}

/// `sspaddmm(self, mat1, mat2, *, beta, alpha)`: a COO result holding `beta * self`'s entries
/// (as stored), then for each row of `mat1` (coalesced) that has entries, one entry per column
/// of `mat2` with `alpha * (mat1 @ mat2)` of that row.
fn sspaddmm_of(
    op: &str,
    input: &Tensor,
    mat1: &Tensor,
    dense: &Tensor,
    beta: Scalar,
    alpha: Scalar,
) -> crate::Result<Tensor> {
    let (ti, tv, _) = coo(op, input)?;
    let s = coalesce(op, mat1)?;
    let (si, _, _) = coo(op, &s)?;
    check_rank(op, "self", RankRequirement::Exactly(2), input.shape())?;
    check_rank(op, "mat1", RankRequirement::Exactly(2), s.shape())?;
    check_rank(op, "mat2", RankRequirement::Exactly(2), dense.shape())?;
    check_size(op, "mat1's sparse_dim", 2, si.shape()[0] as i64)?;
    let (n, k, m) = (s.shape()[0], s.shape()[1], dense.shape()[1]);
    if input.shape() != [n, m] {
        return Err(shape_mismatch(op, "self", &[n, m], input.shape()));
    }
    let product = sparse_addmm(op, None, &s, dense, Scalar::Int(0), alpha)?;
    let sidx = index_vec(si)?;
    let snnz = si.shape()[1];
    let mut nonempty = vec![false; n];
    for e in 0..snnz {
        nonempty[sidx[e] as usize] = true;
    }
    let _ = k;
    let tnnz = ti.shape()[1];
    let tidx = index_vec(ti)?;
    let (mut rows, mut cols) = (tidx[..tnnz].to_vec(), tidx[tnnz..].to_vec());
    let out_values = crate::dispatch_standard_numeric!(dense.dtype(), "sspaddmm", |T| {
        let beta_t = scalar_as::<T>(beta);
        let mut vals: Vec<T> = tv
            .to_dtype(T::DTYPE)?
            .to_vec::<T>()?
            .into_iter()
            .map(|x| x.mul(beta_t))
            .collect();
        let pv = product.to_vec::<T>()?;
        for r in 0..n {
            if nonempty[r] {
                for c in 0..m {
                    rows.push(r as i64);
                    cols.push(c as i64);
                    vals.push(pv[r * m + c]);
                }
            }
        }
        let len = vals.len();
        Tensor::from_vec(vals, &[len])
    })?;
    let nnz = rows.len();
    rows.extend(cols);
    Ok(Tensor::sparse_coo(
        Tensor::from_vec(rows, &[2, nnz])?,
        out_values,
        &[n, m],
        false,
    )?)
}

fn sspaddmm(a: &mut Args) -> R {
    let (input, mat1) = (a.any_layout_tensor(0)?, a.any_layout_tensor(1)?);
    let dense = a.tensor(2)?;
    let (beta, alpha) = (a.scalar(3)?, a.scalar(4)?);
    Ok(sspaddmm_of(a.op, &input, &mat1, &dense, beta, alpha)?.into())
}

/// `smm(self, mat2)`: `sspaddmm` into an empty result.
fn smm(a: &mut Args) -> R {
    let (s, dense) = (a.any_layout_tensor(0)?, a.tensor(1)?);
    let n = s.shape().first().copied().unwrap_or(0);
    let m = dense.shape().get(1).copied().unwrap_or(0);
    let empty = empty_coo(2, 0, &[n, m], s.dtype())?;
    Ok(sspaddmm_of(a.op, &empty, &s, &dense, Scalar::Int(0), Scalar::Int(1))?.into())
}

/// `sparse_sampled_addmm(self, mat1, mat2, *, beta, alpha)`: at each entry `(r, c)` of the
/// CSR `self`, `beta * self[r, c] + alpha * dot(mat1[r, :], mat2[:, c])`.
fn sparse_sampled_addmm(a: &mut Args) -> R {
    let t = a.any_layout_tensor(0)?;
    let (x, y) = (a.tensor(1)?, a.tensor(2)?);
    let (beta, alpha) = (a.scalar(3)?, a.scalar(4)?);
    let p = parts(a.op, &t)?;
    let SparseParts::Compressed {
        layout: Layout::SparseCsr,
        compressed_indices,
        plain_indices,
        values,
    } = p
    else {
        return Err(no_kernel(a.op, &t));
    };
    check_rank(a.op, "self", RankRequirement::Exactly(2), t.shape())?;
    check_rank(a.op, "mat1", RankRequirement::Exactly(2), x.shape())?;
    check_rank(a.op, "mat2", RankRequirement::Exactly(2), y.shape())?;
    if values.dim() != 1 {
        return Err(unsupported_feature(
            a.op,
            "a hybrid sparse self with dense dims",
        ));
    }
    let (n, k, m) = (x.shape()[0], x.shape()[1], y.shape()[1]);
    if y.shape()[0] != k {
        return Err(TensorError::MatmulShapes {
            op: a.op.into(),
            mat1: [n, k],
            mat2: [y.shape()[0], m],
        }
        .into());
    }
    if t.shape() != [n, m] {
        return Err(shape_mismatch(a.op, "self", &[n, m], t.shape()));
    }
    let comp = index_vec(compressed_indices)?;
    let plain = index_vec(plain_indices)?;
    let out = crate::dispatch_float!(values.dtype(), "sparse_sampled_addmm", |T| {
        let (bt, at) = (scalar_as::<T>(beta), scalar_as::<T>(alpha));
        let v = values.to_vec::<T>()?;
        let xv = x.to_dtype(T::DTYPE)?.contiguous()?.to_vec::<T>()?;
        let yv = y.to_dtype(T::DTYPE)?.contiguous()?.to_vec::<T>()?;
        let mut out = v.clone();
        for r in 0..n {
            for e in comp[r] as usize..comp[r + 1] as usize {
                let c = plain[e] as usize;
                let dot = (0..k).fold(T::zero(), |s, q| s.add(xv[r * k + q].mul(yv[q * m + c])));
                out[e] = bt.mul(v[e]).add(at.mul(dot));
            }
        }
        let len = out.len();
        Tensor::from_vec(out, &[len])
    })?;
    Ok(t.with_sparse_values(out)?.into())
}

/// `_sparse_mm.reduce(sparse, dense, reduce)` of a CSR matrix: each result row reduces
/// `value * dense[col, :]` over the row's entries with `sum`, `mean`, `amax` or `amin` (rows
/// without entries are 0; PyTorch has not enabled `prod`).
fn sparse_mm_reduce(a: &mut Args) -> R {
    let t = a.any_layout_tensor(0)?;
    let dense = a.tensor(1)?;
    let how = a.str(2)?;
    let p = parts(a.op, &t)?;
    let SparseParts::Compressed {
        layout: Layout::SparseCsr,
        compressed_indices,
        plain_indices,
        values,
    } = p
    else {
        return Err(unsupported(format!(
            "Could not run 'aten::_sparse_mm_reduce_impl' with arguments from the '{}' backend",
            t.layout().backend()
        )));
    };
    if &*how == "prod" {
        return Err(unsupported_feature(
            "sparse_mm_reduce",
            "reduce='prod' (PyTorch has not enabled it)",
        ));
    }
    if !matches!(&*how, "sum" | "mean" | "amax" | "amin") {
        return Err(invalid_argument(
            a.op,
            "reduce",
            "must be one of sum, prod, mean, amax, amin",
            how,
        ));
    }
    check_rank(a.op, "self", RankRequirement::Exactly(2), t.shape())?;
    check_rank(a.op, "other", RankRequirement::Exactly(2), dense.shape())?;
    if values.dim() != 1 {
        return Err(unsupported_feature(
            a.op,
            "a hybrid sparse self with dense dims",
        ));
    }
    if dense.shape()[0] != t.shape()[1] {
        return Err(TensorError::MatmulShapes {
            op: a.op.into(),
            mat1: [t.shape()[0], t.shape()[1]],
            mat2: [dense.shape()[0], dense.shape()[1]],
        }
        .into());
    }
    let (n, m) = (t.shape()[0], dense.shape()[1]);
    check_result_size(crate::tensor::checked_numel(&[n, m])?, values.dtype())?;
    let comp = index_vec(compressed_indices)?;
    let plain = index_vec(plain_indices)?;
    let out = crate::dispatch_float!(values.dtype(), "_sparse_mm.reduce", |T| {
        let v = values.to_vec::<T>()?;
        let d = dense.to_dtype(T::DTYPE)?.contiguous()?.to_vec::<T>()?;
        let mut out = vec![T::zero(); n * m];
        for r in 0..n {
            let (s, e) = (comp[r] as usize, comp[r + 1] as usize);
            if s == e {
                continue;
            }
            for j in 0..m {
                let mut acc: Option<f64> = None;
                for q in s..e {
                    let x = v[q].mul(d[plain[q] as usize * m + j]).to_f64();
                    acc = Some(match (acc, &*how) {
                        (None, _) => x,
                        (Some(a), "sum" | "mean") => T::from_f64(a).add(T::from_f64(x)).to_f64(),
                        (Some(a), "amax") => {
                            if x > a || x.is_nan() {
                                x
                            } else {
                                a
                            }
                        }
                        (Some(a), _) => {
                            if x < a || x.is_nan() {
                                x
                            } else {
                                a
                            }
                        }
                    });
                }
                let total = acc.unwrap_or(0.0);
                out[r * m + j] = if &*how == "mean" {
                    T::from_f64(T::from_f64(total).to_f64() / (e - s) as f64)
                } else {
                    T::from_f64(total)
                };
            }
        }
        Tensor::from_vec(out, &[n, m])
    })?;
    Ok(out.into())
}

/// `_sparse_mm_reduce_impl(self, other, reduce) -> (out, arg_out)`: `_sparse_mm.reduce`'s
/// result, and for `amax` / `amin` in grad mode with an argument requiring grad (what the
/// backward needs) `arg_out [rows, cols]`: the index into `values` of the entry each result
/// came from (a later entry wins only when strictly larger / smaller or NaN), `nnz` where a
/// row has no entry. Otherwise `arg_out` is empty. Both in the column indices' dtype.
fn sparse_mm_reduce_impl(a: &mut Args) -> R {
    let out = sparse_mm_reduce(a)?;
    let t = a.any_layout_tensor(0)?;
    let other = a.tensor(1)?;
    let how = a.str(2)?;
    let Some(SparseParts::Compressed {
        compressed_indices,
        plain_indices,
        values,
        ..
    }) = t.sparse_parts()
    else {
        return Err(no_kernel(a.op, &t));
    };
    let index_dtype = plain_indices.dtype();
    let nnz = values.numel();
    let is_max = &*how == "amax";
    let need_arg = crate::ops::grad_mode::is_grad_enabled()
        && (t.requires_grad() || other.requires_grad())
        && (is_max || &*how == "amin")
        && nnz > 0;
    if !need_arg {
        let empty = Tensor::from_vec(Vec::<i64>::new(), &[0])?.to_dtype(index_dtype)?;
        return Ok(IValue::Tuple(crate::values::Tuple::new(vec![
            out,
            IValue::Tensor(empty),
        ])));
    }
    let (n, m) = (t.shape()[0], other.shape()[1]);
    let comp = index_vec(compressed_indices)?;
    let plain = index_vec(plain_indices)?;
    // the products as PyTorch's kernel compares them: in float32 for float32 and the reduced
    // floats (whose products float32 holds exactly), in float64 for float64
    let single = values.dtype() != DType::Float64;
    let as_f64 = |t: &Tensor| t.to_dtype(DType::Float64)?.contiguous()?.to_vec::<f64>();
    let (v, d) = (as_f64(values)?, as_f64(&other.to_dtype(values.dtype())?)?);
    let mut arg = vec![nnz as i64; n * m];
    for r in 0..n {
        let (s, e) = (comp[r] as usize, comp[r + 1] as usize);
        for j in 0..m {
            let mut best = if is_max {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            };
            for q in s..e {
                let mut x = v[q] * d[plain[q] as usize * m + j];
                if single {
                    x = f64::from(x as f32);
                }
                if (is_max && x > best) || (!is_max && x < best) || x.is_nan() {
                    best = x;
                    arg[r * m + j] = q as i64;
                }
            }
        }
    }
    let arg = Tensor::from_vec(arg, &[n, m])?.to_dtype(index_dtype)?;
    Ok(IValue::Tuple(crate::values::Tuple::new(vec![
        out,
        IValue::Tensor(arg),
    ])))
}

/// `sparse_resize(self, size, sparse_dim, dense_dim)` of a COO tensor, as `sparse_resize_`
/// returns it: an empty tensor takes any dims; a non-empty one keeps its dims and dense sizes
/// and may only grow its sparse sizes.
fn sparse_resized(
    op: &str,
    t: &Tensor,
    size: &[usize],
    sd: usize,
    dd: usize,
) -> crate::Result<Tensor> {
    let (indices, values, _) = coo(op, t)?;
    if sd + dd != size.len() {
        return Err(size_mismatch(
            op,
            format!("the number of dimensions (sparse_dim {sd} + dense_dim {dd})"),
            (sd + dd) as i64,
            size.len() as i64,
        ));
    }
    let nnz = indices.shape()[1];
    if nnz == 0 {
        return empty_coo(sd, dd, size, t.dtype());
    }
    let (cur_sd, cur_dd) = (indices.shape()[0], values.dim() - 1);
    check_size(
        op,
        "sparse_dim of a non-empty sparse tensor (it cannot change)",
        cur_sd as i64,
        sd as i64,
    )?;
    check_size(
        op,
        "dense_dim of a non-empty sparse tensor (it cannot change)",
        cur_dd as i64,
        dd as i64,
    )?;
    if size[sd..] != t.shape()[sd..] {
        return Err(shape_mismatch(
            format!("{op} (the dense sizes of a non-empty sparse tensor cannot change)"),
            "size[sparse_dim:]",
            &t.shape()[sd..],
            &size[sd..],
        ));
    }
    if (0..sd).any(|d| size[d] < t.shape()[d]) {
        return Err(invalid_argument(
            op,
            "size[:sparse_dim]",
            format!(
                "must not shrink the sparse dims {:?} of a non-empty sparse tensor",
                &t.shape()[..sd]
            ),
            format!("{:?}", &size[..sd]),
        ));
    }
    let p = parts(op, t)?;
    let mut out = Tensor::sparse_coo(indices.clone(), values.clone(), size, p.is_coalesced())?;
    out.set_requires_grad(t.requires_grad());
    Ok(out)
}

fn sparse_resize(a: &mut Args) -> R {
    let t = a.any_layout_tensor(0)?;
    let size = sparse_size(&a.int_list(1)?)?;
    let (sd, dd) = (
        to_usize(a.int(2)?, "sparse_dim")?,
        to_usize(a.int(3)?, "dense_dim")?,
    );
    Ok(sparse_resized(a.op, &t, &size, sd, dd)?.into())
}

/// `sparse_resize_and_clear(self, size, sparse_dim, dense_dim)`: an empty COO tensor.
fn sparse_resize_and_clear(a: &mut Args) -> R {
    let t = a.any_layout_tensor(0)?;
    coo(a.op, &t)?;
    let size = sparse_size(&a.int_list(1)?)?;
    let (sd, dd) = (
        to_usize(a.int(2)?, "sparse_dim")?,
        to_usize(a.int(3)?, "dense_dim")?,
    );
    Ok(empty_coo(sd, dd, &size, t.dtype())?.into())
}

/// `resize_as_sparse(self, the_template)`: `sparse_resize` to the template's size and dims.
fn resize_as_sparse(a: &mut Args) -> R {
    let (t, template) = (a.any_layout_tensor(0)?, a.any_layout_tensor(1)?);
    let tp = parts(a.op, &template)?;
    Ok(sparse_resized(a.op, &t, template.shape(), tp.sparse_dim(), tp.dense_dim())?.into())
}

/// `copy_sparse_to_sparse(self, src, non_blocking)`: a copy of `src`'s indices and values
/// (in `self`'s dtype), with its size and coalesced flag.
fn copy_sparse_to_sparse(a: &mut Args) -> R {
    let (t, src) = (a.any_layout_tensor(0)?, a.any_layout_tensor(1)?);
    coo(a.op, &t)?;
    let (indices, values, coalesced) = coo(a.op, &src)?;
    Ok(Tensor::sparse_coo(
        indices.deep_clone()?,
        values.to_dtype(t.dtype())?.deep_clone()?,
        src.shape(),
        coalesced,
    )?
    .into())
}

/// `_sparse_mask_projection(self, mask, accumulate_matches)` of COO tensors: `self`'s entries
/// (indices, order and flag kept) whose index the mask holds keep their value (added once per
/// matching mask entry with `accumulate_matches`); the others become 0.
fn sparse_mask_projection(a: &mut Args) -> R {
    let (t, mask) = (a.any_layout_tensor(0)?, a.any_layout_tensor(1)?);
    let (indices, values, _) = coo(a.op, &t)?;
    let (mindices, ..) = coo(a.op, &mask)?;
    let accumulate = a.bool(2)?;
    if t.shape() != mask.shape() {
        return Err(shape_mismatch(a.op, "mask", t.shape(), mask.shape()));
    }
    check_size(
        a.op,
        "mask's sparse_dim",
        indices.shape()[0] as i64,
        mindices.shape()[0] as i64,
    )?;
    let sd = indices.shape()[0];
    let strides = contiguous_strides(&t.shape()[..sd]);
    let keys = |ind: &Tensor| -> crate::Result<Vec<i64>> {
        let n = ind.shape()[1];
        let idx = index_vec(ind)?;
        Ok((0..n)
            .map(|e| (0..sd).map(|d| idx[d * n + e] * strides[d] as i64).sum())
            .collect())
    };
    let mut matches: std::collections::HashMap<i64, usize> = std::collections::HashMap::new();
    for k in keys(mindices)? {
        *matches.entry(k).or_default() += 1;
    }
    let counts: Vec<usize> = keys(indices)?
        .into_iter()
        .map(|k| matches.get(&k).copied().unwrap_or(0))
        .collect();
    let row: usize = values.shape()[1..].iter().product();
    let out = crate::dispatch_standard!(values.dtype(), "_sparse_mask_projection", |T| {
        let v = values.contiguous()?.to_vec::<T>()?;
        let mut out = vec![T::zero(); v.len()];
        for (e, &n) in counts.iter().enumerate() {
            let times = if accumulate { n } else { n.min(1) };
            for j in e * row..(e + 1) * row {
                out[j] = (0..times).fold(T::zero(), |acc, _| acc.add(v[j]));
            }
        }
        Tensor::from_vec(out, values.shape())
    })?;
    Ok(t.with_sparse_values(out)?.into())
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::sparse_coo_tensor.indices", coo_from_indices);
    r.add(
        "aten::sparse_coo_tensor.indices_size",
        coo_from_indices_size,
    );
    r.add("aten::_sparse_coo_tensor_unsafe", coo_from_indices_size);
    r.add("aten::sparse_coo_tensor.size", coo_empty_of_size);
    r.add("aten::_sparse_coo_tensor_with_dims", coo_with_dims);
    r.add(
        "aten::_sparse_coo_tensor_with_dims_and_tensors",
        coo_with_dims_and_tensors,
    );
    r.add("aten::_validate_sparse_coo_tensor_args", validate_coo);
    r.add(
        "aten::sparse_csr_tensor.crow_col_value_size",
        compressed_factory::<2, true>,
    );
    r.add(
        "aten::sparse_csr_tensor.crow_col_value",
        compressed_factory::<2, false>,
    );
    r.add(
        "aten::sparse_csc_tensor.ccol_row_value_size",
        compressed_factory::<4, true>,
    );
    r.add(
        "aten::sparse_csc_tensor.ccol_row_value",
        compressed_factory::<4, false>,
    );
    r.add(
        "aten::sparse_bsr_tensor.crow_col_value_size",
        compressed_factory::<5, true>,
    );
    r.add(
        "aten::sparse_bsr_tensor.crow_col_value",
        compressed_factory::<5, false>,
    );
    r.add(
        "aten::sparse_bsc_tensor.ccol_row_value_size",
        compressed_factory::<6, true>,
    );
    r.add(
        "aten::sparse_bsc_tensor.ccol_row_value",
        compressed_factory::<6, false>,
    );
    r.add(
        "aten::sparse_compressed_tensor.comp_plain_value_size",
        compressed_factory::<0, true>,
    );
    r.add(
        "aten::sparse_compressed_tensor.comp_plain_value",
        compressed_factory::<0, false>,
    );
    r.add(
        "aten::_sparse_csr_tensor_unsafe",
        compressed_factory::<2, true>,
    );
    r.add(
        "aten::_sparse_csc_tensor_unsafe",
        compressed_factory::<4, true>,
    );
    r.add(
        "aten::_sparse_bsr_tensor_unsafe",
        compressed_factory::<5, true>,
    );
    r.add(
        "aten::_sparse_bsc_tensor_unsafe",
        compressed_factory::<6, true>,
    );
    r.add(
        "aten::_sparse_compressed_tensor_unsafe",
        compressed_factory::<0, true>,
    );
    r.add(
        "aten::_validate_sparse_csr_tensor_args",
        validate_compressed::<2>,
    );
    r.add(
        "aten::_validate_sparse_csc_tensor_args",
        validate_compressed::<4>,
    );
    r.add(
        "aten::_validate_sparse_bsr_tensor_args",
        validate_compressed::<5>,
    );
    r.add(
        "aten::_validate_sparse_bsc_tensor_args",
        validate_compressed::<6>,
    );
    r.add(
        "aten::_validate_sparse_compressed_tensor_args",
        validate_compressed::<0>,
    );

    r.add("aten::_nnz", nnz);
    r.add("aten::sparse_dim", sparse_dim);
    r.add("aten::dense_dim", dense_dim);
    r.add("aten::_dimI", coo_sparse_dim);
    r.add("aten::_dimV", coo_dense_dim);
    r.add("aten::is_coalesced", is_coalesced);
    r.add("aten::_indices", raw_indices);
    r.add("aten::_values", raw_values);
    r.add("aten::indices", indices);
    r.add("aten::values", values::<false>);
    r.add("aten::values_copy", values::<true>);
    r.add(
        "aten::crow_indices",
        compressed_component::<true, true, false>,
    );
    r.add(
        "aten::crow_indices_copy",
        compressed_component::<true, true, true>,
    );
    r.add(
        "aten::col_indices",
        compressed_component::<false, true, false>,
    );
    r.add(
        "aten::col_indices_copy",
        compressed_component::<false, true, true>,
    );
    r.add(
        "aten::ccol_indices",
        compressed_component::<true, false, false>,
    );
    r.add(
        "aten::ccol_indices_copy",
        compressed_component::<true, false, true>,
    );
    r.add(
        "aten::row_indices",
        compressed_component::<false, false, false>,
    );
    r.add(
        "aten::row_indices_copy",
        compressed_component::<false, false, true>,
    );

    r.add("aten::coalesce", coalesce_op);
    r.add("aten::_coalesce", coalesce_uncoalesced);
    r.add("aten::_coalesced", mark_coalesced);
    r.add("aten::_coalesced_", mark_coalesced_in_place);

    r.add("aten::to_dense", to_dense_op);
    r.add("aten::_to_dense", to_dense_sparse_only);
    r.add_all(&["aten::to_sparse", "aten::_to_sparse"], to_sparse);
    r.add_all(
        &["aten::to_sparse.sparse_dim", "aten::_to_sparse.sparse_dim"],
        to_sparse_dim,
    );
    r.add_all(
        &["aten::to_sparse_csr", "aten::_to_sparse_csr"],
        to_sparse_compressed::<2>,
    );
    r.add_all(
        &["aten::to_sparse_csc", "aten::_to_sparse_csc"],
        to_sparse_compressed::<4>,
    );
    r.add_all(
        &["aten::to_sparse_bsr", "aten::_to_sparse_bsr"],
        to_sparse_blocked::<5>,
    );
    r.add_all(
        &["aten::to_sparse_bsc", "aten::_to_sparse_bsc"],
        to_sparse_blocked::<6>,
    );

    r.add("aten::_sparse_mm", sparse_mm_op);
    r.add("aten::_sparse_sparse_matmul", sparse_sparse_matmul_op);
    r.add("aten::_sparse_addmm", sparse_addmm_op);
    r.add("aten::hspmm", hspmm);
    r.add("aten::_sparse_sum", sparse_sum_all::<false>);
    r.add("aten::_sparse_sum.dtype", sparse_sum_all::<true>);
    r.add("aten::_sparse_sum.dim", sparse_sum_dims::<false>);
    r.add("aten::_sparse_sum.dim_dtype", sparse_sum_dims::<true>);
    r.add("aten::_sparse_softmax", sparse_softmax_op::<false>);
    r.add("aten::_sparse_log_softmax", sparse_softmax_op::<true>);
    r.add("aten::_sparse_softmax.int", sparse_softmax_int::<false>);
    r.add("aten::_sparse_log_softmax.int", sparse_softmax_int::<true>);
    r.add("aten::sparse_mask", sparse_mask);
    r.add(
        "aten::_validate_compressed_sparse_indices",
        validate_compressed_indices,
    );
    r.add("aten::_spdiags", spdiags);
    r.add("aten::_sparse_broadcast_to", sparse_broadcast_to);
    r.add(
        "aten::_sparse_csr_sum.dim_dtype",
        sparse_csr_reduce::<false>,
    );
    r.add(
        "aten::_sparse_csr_prod.dim_dtype",
        sparse_csr_reduce::<true>,
    );
    r.add("aten::native_norm", native_norm);
    r.add("aten::native_norm.ScalarOpt_dim_dtype", native_norm_dims);
    r.add("aten::sspaddmm", sspaddmm);
    r.add("aten::smm", smm);
    r.add("aten::sparse_sampled_addmm", sparse_sampled_addmm);
    r.add("aten::_sparse_mm.reduce", sparse_mm_reduce);
    r.add("aten::_sparse_mm_reduce_impl", sparse_mm_reduce_impl);
    r.add("aten::sparse_resize", sparse_resize);
    r.add("aten::sparse_resize_and_clear", sparse_resize_and_clear);
    r.add("aten::resize_as_sparse", resize_as_sparse);
    r.add("aten::copy_sparse_to_sparse", copy_sparse_to_sparse);
    // in place: the changed tensor, left in `self`'s slot too
    r.add("aten::sparse_resize_", in_place!(sparse_resize));
    r.add(
        "aten::sparse_resize_and_clear_",
        in_place!(sparse_resize_and_clear),
    );
    r.add("aten::resize_as_sparse_", in_place!(resize_as_sparse));
    r.add(
        "aten::copy_sparse_to_sparse_",
        in_place!(copy_sparse_to_sparse),
    );
    r.add("aten::_sparse_mask_projection", sparse_mask_projection);
}
