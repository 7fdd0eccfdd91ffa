//! Reductions over any set of dims, and row-wise operations along one dim.
//!
//! A reduction permutes the reduced dims to the end and makes the input contiguous, so every
//! output element reduces one contiguous row of `reduced` elements; rows run in parallel.

use super::parallel::{for_each_chunk_mut, for_each_chunk_mut2};
use crate::tensor::{wrap_dim, Element, Tensor, TensorError, PARALLEL_THRESHOLD};
use std::ops::Add;

/// The layout of a reduction: `input` is contiguous `[outer, reduced]` in row-major order.
pub(crate) struct ReducePlan {
    pub input: Tensor,
    pub outer: usize,
    pub reduced: usize,
    /// The result's shape (reduced dims kept as 1 with `keepdim`, dropped otherwise).
    pub out_shape: Vec<usize>,
}

/// `chunk(dst, src, reduced)`: the work of [`ReducePlan::rows`] on a chunk of rows.
type RowsChunk<'a, T, O> = dyn Fn(&mut [O], &[T], usize) + Sync + 'a;

/// `chunk(values, indices, src, reduced)`: the work of [`ReducePlan::rows2`] on a chunk of rows.
type Rows2Chunk<'a, T, O1, O2> = dyn Fn(&mut [O1], &mut [O2], &[T], usize) + Sync + 'a;

/// Wrap and deduplicate-check `dims` for a tensor of `ndim` dims. `None` or an empty list means
/// every dim (as PyTorch's `dim=None` / `dim=[]` for sum-like ops).
pub(crate) fn reduce_dims(dims: Option<&[i64]>, ndim: usize) -> crate::Result<Vec<bool>> {
    let mut mask = vec![false; ndim];
    match dims {
        None | Some([]) => mask.iter_mut().for_each(|m| *m = true),
        Some(ds) => {
            for &d in ds {
                let w = wrap_dim(d, ndim)?;
                if ndim == 0 {
                    continue;
                }
                if mask[w] {
                    return Err(super::invalid_argument(
                        "reduce",
                        "dim",
                        format!("must not repeat dim {w}"),
                        format!("{ds:?}"),
                    ));
                }
                mask[w] = true;
            }
        }
    }
    Ok(mask)
}

impl ReducePlan {
    pub(crate) fn new(x: &Tensor, dims: Option<&[i64]>, keepdim: bool) -> crate::Result<Self> {
        let mask = reduce_dims(dims, x.dim())?;
        Self::from_mask(x, &mask, keepdim)
    }

    pub(crate) fn from_mask(x: &Tensor, mask: &[bool], keepdim: bool) -> crate::Result<Self> {
        let shape = x.shape();
        let strides = x.strides();
        let mut order: Vec<usize> = (0..x.dim()).filter(|&d| !mask[d]).collect();
        order.extend((0..x.dim()).filter(|&d| mask[d]));
        let pshape: Vec<usize> = order.iter().map(|&d| shape[d]).collect();
        let pstrides: Vec<isize> = order.iter().map(|&d| strides[d]).collect();
        let input = x
            .as_strided(&pshape, &pstrides, x.storage_offset())?
            .contiguous()?;
        let outer: usize = (0..x.dim())
            .filter(|&d| !mask[d])
            .map(|d| shape[d])
            .product();
        let reduced: usize = (0..x.dim())
            .filter(|&d| mask[d])
            .map(|d| shape[d])
            .product();
        let out_shape = (0..x.dim())
            .filter_map(|d| {
                if !mask[d] {
                    Some(shape[d])
                } else if keepdim {
                    Some(1)
                } else {
                    None
                }
            })
            .collect();
        Ok(ReducePlan {
            input,
            outer,
            reduced,
            out_shape,
        })
    }

    /// `out[i] = f(row_i)` for each of the `outer` rows (each `reduced` long).
    pub(crate) fn rows<T: Element, O: Element, F>(&self, f: F) -> crate::Result<Tensor>
    where
        F: Fn(&[T]) -> O + Sync + Send,
    {
        self.rows_with(&|d: &mut [O], src: &[T], red: usize| {
            if red == 0 {
                let v = f(&[]);
                d.iter_mut().for_each(|d| *d = v);
            } else {
                d.iter_mut()
                    .zip(src.chunks(red))
                    .for_each(|(d, row)| *d = f(row));
            }
        })
    }

    // `rows` and `rows2` are instantiated per reduction closure and dtype; only the loop over
    // a chunk of rows is (`chunk(dst, src, reduced)`), the drivers are per element types.

    /// [`ReducePlan::rows`]'s driver: `chunk(dst_k, src_k, reduced)` over chunks of rows
    /// (`src_k` from the first row of `dst_k`'s; with `reduced` 0 the rows are empty).
    fn rows_with<T: Element, O: Element>(
        &self,
        chunk: &RowsChunk<'_, T, O>,
    ) -> crate::Result<Tensor> {
        let src_guard = self.input.read::<T>()?;
        let src = src_guard
            .as_slice()
            .ok_or_else(|| TensorError::Value("reduction input is not contiguous".into()))?;
        let out = Tensor::zeros(&self.out_shape, O::DTYPE)?;
        let mut dst_guard = out.write::<O>()?;
        let dst = dst_guard
            .as_slice_mut()
            .ok_or_else(|| TensorError::Value("fresh output is not contiguous".into()))?;
        let red = self.reduced;
        if red == 0 {
            chunk(dst, &[], 0);
            return Ok(out);
        }
        let par = self.outer > 1 && self.outer * red >= PARALLEL_THRESHOLD;
        let per = (PARALLEL_THRESHOLD / 4 / red).max(1);
        for_each_chunk_mut(dst, per, par, &|k, d| chunk(d, &src[k * per * red..], red));
        Ok(out)
    }

    /// Like [`ReducePlan::rows`] for reductions with two results (values and indices).
    pub(crate) fn rows2<T: Element, O1: Element, O2: Element, F>(
        &self,
        f: F,
    ) -> crate::Result<(Tensor, Tensor)>
    where
        F: Fn(&[T]) -> (O1, O2) + Sync + Send,
    {
        self.rows2_with(&|d1: &mut [O1], d2: &mut [O2], src: &[T], red: usize| {
            for ((a, b), row) in d1.iter_mut().zip(d2.iter_mut()).zip(src.chunks(red)) {
                let (x, y) = f(row);
                *a = x;
                *b = y;
            }
        })
    }

    /// [`ReducePlan::rows2`]'s driver, as [`ReducePlan::rows_with`] (`reduced` at least 1).
    fn rows2_with<T: Element, O1: Element, O2: Element>(
        &self,
        chunk: &Rows2Chunk<'_, T, O1, O2>,
    ) -> crate::Result<(Tensor, Tensor)> {
        let src_guard = self.input.read::<T>()?;
        let src = src_guard
            .as_slice()
            .ok_or_else(|| TensorError::Value("reduction input is not contiguous".into()))?;
        let o1 = Tensor::zeros(&self.out_shape, O1::DTYPE)?;
        let o2 = Tensor::zeros(&self.out_shape, O2::DTYPE)?;
        let mut d1_guard = o1.write::<O1>()?;
        let d1 = d1_guard
            .as_slice_mut()
            .ok_or_else(|| TensorError::Value("fresh output is not contiguous".into()))?;
        let mut d2_guard = o2.write::<O2>()?;
        let d2 = d2_guard
            .as_slice_mut()
            .ok_or_else(|| TensorError::Value("fresh output is not contiguous".into()))?;
        let red = self.reduced.max(1);
        let per = (PARALLEL_THRESHOLD / red).max(1);
        for_each_chunk_mut2(d1, d2, (per, per), true, &|k, d1, d2| {
            chunk(d1, d2, &src[(k * per * red).min(src.len())..], red)
        });
        Ok((o1, o2))
    }
}

/// Apply `f(row_in, row_out)` to every 1-d lane of `x` along `dim`; the result has `x`'s shape
/// and element type `O` (softmax, cumsum, ...). Lanes run in parallel.
pub(crate) fn along_dim<T: Element, O: Element, F>(
    x: &Tensor,
    dim: usize,
    f: F,
) -> crate::Result<Tensor>
where
    F: Fn(&[T], &mut [O]) + Sync + Send,
{
    let nd = x.dim();
    if nd == 0 {
        let src = x.contiguous()?;
        let s_guard = src.read::<T>()?;
        let s = s_guard
            .as_slice()
            .ok_or_else(|| TensorError::Value("not contiguous".into()))?;
        let out = Tensor::zeros(&[], O::DTYPE)?;
        if let Some(d) = out.write::<O>()?.as_slice_mut() {
            f(s, d);
        }
        return Ok(out);
    }
    // Move `dim` last, make contiguous, work on rows, move it back.
    let mut order: Vec<usize> = (0..nd).filter(|&d| d != dim).collect();
    order.push(dim);
    let pshape: Vec<usize> = order.iter().map(|&d| x.shape()[d]).collect();
    let pstrides: Vec<isize> = order.iter().map(|&d| x.strides()[d]).collect();
    let input = x
        .as_strided(&pshape, &pstrides, x.storage_offset())?
        .contiguous()?;
    let src_guard = input.read::<T>()?;
    let src = src_guard
        .as_slice()
        .ok_or_else(|| TensorError::Value("lane input is not contiguous".into()))?;
    let out = Tensor::zeros(&pshape, O::DTYPE)?;
    // the write guard ends before `restore_order` reads `out`
    {
        let mut dst_guard = out.write::<O>()?;
        let dst = dst_guard
            .as_slice_mut()
            .ok_or_else(|| TensorError::Value("fresh output is not contiguous".into()))?;
        let n = x.shape()[dim];
        if n > 0 && !src.is_empty() {
            let par = src.len() >= PARALLEL_THRESHOLD;
            super::map::zip_chunks(dst, src, n, par, |_, d, s| f(s, d));
        }
    }
    restore_order(out, &order)
}

/// Undo the permutation `order` (out's dim i is original dim order[i]) and make contiguous.
fn restore_order(out: Tensor, order: &[usize]) -> crate::Result<Tensor> {
    if order.iter().enumerate().all(|(i, &d)| i == d) {
        return Ok(out);
    }
    let nd = order.len();
    let mut shape = vec![0usize; nd];
    let mut strides = vec![0isize; nd];
    for (i, &d) in order.iter().enumerate() {
        shape[d] = out.shape()[i];
        strides[d] = out.strides()[i];
    }
    out.as_strided(&shape, &strides, out.storage_offset())?
        .contiguous()
}

/// Accurate sum of `f(x)` over a slice: 8 running lanes over blocks, combined pairwise
/// (close to PyTorch's cascade summation).
pub(crate) fn pairwise_sum<T: Copy, A, F>(s: &[T], f: &F) -> A
where
    A: Copy + Default + Add<Output = A>,
    F: Fn(T) -> A,
{
    const BLOCK: usize = 256;
    if s.len() <= BLOCK {
        let mut lanes = [A::default(); 8];
        let mut chunks = s.chunks_exact(8);
        for c in &mut chunks {
            for (l, &x) in lanes.iter_mut().zip(c) {
                *l = *l + f(x);
            }
        }
        for (l, &x) in lanes.iter_mut().zip(chunks.remainder()) {
            *l = *l + f(x);
        }
        let a = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
        let b = (lanes[4] + lanes[5]) + (lanes[6] + lanes[7]);
        return a + b;
    }
    let mid = (s.len() / 2).div_ceil(8) * 8;
    let (l, r) = s.split_at(mid.min(s.len()));
    pairwise_sum(l, f) + pairwise_sum(r, f)
}

/// ATen's `multi_row_sum` (SumKernel.cpp) of one column: blocks of `2^level_power` values
/// summed in order, carried up through 4 levels of partial sums, the tail and the levels
/// added last.
pub(crate) fn cascade_sum(values: impl ExactSizeIterator<Item = f32>) -> f32 {
    const LEVELS: usize = 4;
    let size = values.len();
    let ceil_log2 = usize::BITS - size.saturating_sub(1).leading_zeros();
    let level_power = 4.max(ceil_log2 as usize / LEVELS);
    let level_step = 1usize << level_power;
    let level_mask = level_step - 1;
    let mut acc = [0.0f32; LEVELS];
    let mut i = 0;
    for v in values {
        acc[0] += v;
        i += 1;
        if i % level_step == 0 {
            for j in 1..LEVELS {
                acc[j] += acc[j - 1];
                acc[j - 1] = 0.0;
                if i & (level_mask << (j * level_power)) != 0 {
                    break;
                }
            }
        }
    }
    let mut total = acc[0];
    for level in &acc[1..] {
        total += level;
    }
    total
}

/// ATen's `row_sum`: the rows read as (-1, 4), each of the 4 columns summed by
/// `multi_row_sum`, the leftover rows added to the first, then the 4 partial sums in order.
pub(crate) fn row_sum_ilp(rows: &[f32]) -> f32 {
    row_sum_strided(rows, 0, 1, rows.len())
}

/// [`row_sum_ilp`] of the `count` values `values[start + i * stride]`.
fn row_sum_strided(values: &[f32], start: usize, stride: usize, count: usize) -> f32 {
    const ILP: usize = 4;
    let at = |i: usize| values.get(start + i * stride).copied().unwrap_or(0.0);
    let size_ilp = count / ILP;
    let mut partial: [f32; ILP] =
        std::array::from_fn(|k| cascade_sum((0..size_ilp).map(|i| at(i * ILP + k))));
    for i in size_ilp * ILP..count {
        partial[0] += at(i);
    }
    partial[0] + partial[1] + partial[2] + partial[3]
}

/// The lanes of the vectors ATen's float sum runs on x86: `sum_stub` is registered without an
/// AVX-512 build, so an AVX-512 machine runs its AVX2 kernel (and the default build's
/// `Vectorized<float>` is 8 wide too).
const SUM_LANES: usize = 8;

/// ATen's float32 sum of one contiguous row, as `cascade_sum` reduces the innermost
/// contiguous dim: rows shorter than a vector by `row_sum` (`scalar_inner_sum`), longer ones
/// by `vectorized_inner_sum`: `row_sum` over whole vectors lane by lane, then the leftover
/// values in order, then the lanes in order.
///
/// The lanes run together as ATen's vectors do (`[f32; 8]` values, so the loop vectorizes):
/// each of the 4 interleaved `row_sum` columns is `cascade_sum` over every 4th vector, and
/// the columns share one carry schedule (they have the same length).
pub(crate) fn aten_inner_sum(row: &[f32]) -> f32 {
    if row.len() < SUM_LANES {
        return row_sum_ilp(row);
    }
    const ILP: usize = 4;
    const LEVELS: usize = 4;
    type Lanes = [f32; SUM_LANES];
    let add = |a: &mut Lanes, b: &Lanes| {
        for (x, y) in a.iter_mut().zip(b) {
            *x += y;
        }
    };
    let vectors = row.len() / SUM_LANES;
    let size_ilp = vectors / ILP;
    let ceil_log2 = usize::BITS - size_ilp.saturating_sub(1).leading_zeros();
    let level_power = 4.max(ceil_log2 as usize / LEVELS);
    let level_step = 1usize << level_power;
    let level_mask = level_step - 1;
    let mut acc = [[[0.0f32; SUM_LANES]; LEVELS]; ILP];
    for (i, block) in row.chunks_exact(SUM_LANES * ILP).take(size_ilp).enumerate() {
        for (column, lanes) in acc.iter_mut().zip(block.chunks_exact(SUM_LANES)) {
            for (x, y) in column[0].iter_mut().zip(lanes) {
                *x += y;
            }
        }
        let done = i + 1;
        if done % level_step == 0 {
            for column in acc.iter_mut() {
                for j in 1..LEVELS {
                    let lower = column[j - 1];
                    add(&mut column[j], &lower);
                    column[j - 1] = [0.0; SUM_LANES];
                    if done & (level_mask << (j * level_power)) != 0 {
                        break;
                    }
                }
            }
        }
    }
    let mut partial = [[0.0f32; SUM_LANES]; ILP];
    for (p, column) in partial.iter_mut().zip(&acc) {
        *p = column[0];
        for level in &column[1..] {
            add(p, level);
        }
    }
    // the vectors past the last whole group of 4 go to the first column
    for lanes in row[size_ilp * ILP * SUM_LANES..vectors * SUM_LANES].chunks_exact(SUM_LANES) {
        for (x, y) in partial[0].iter_mut().zip(lanes) {
            *x += y;
        }
    }
    let mut lanes = partial[0];
    for p in &partial[1..] {
        add(&mut lanes, p);
    }
    let mut total = 0.0f32;
    for v in &row[vectors * SUM_LANES..] {
        total += v;
    }
    for lane in lanes {
        total += lane;
    }
    total
}

/// ATen's float32 sums of the `columns` columns of a contiguous `[rows, columns]` block, the
/// contiguous outer reduction of `cascade_sum` (SumKernel.cpp): with at least a vector of
/// columns (`vectorized_outer_sum`), blocks of 4 vectors by `multi_row_sum` and the other
/// columns by `row_sum`; narrower (`scalar_outer_sum`), blocks of 4 columns by
/// `multi_row_sum`, the rest by `row_sum`.
pub(crate) fn aten_outer_sums(block: &[f32], rows: usize, columns: usize) -> Vec<f32> {
    let blocked = outer_sum_blocked_columns(columns);
    (0..columns)
        .map(|j| {
            if j < blocked {
                cascade_sum((0..rows).map(|i| block.get(i * columns + j).copied().unwrap_or(0.0)))
            } else {
                row_sum_strided(block, j, columns, rows)
            }
        })
        .collect()
}

/// How many of `columns` columns [`aten_outer_sums`] sums by `multi_row_sum` (the others by
/// `row_sum`).
pub(crate) fn outer_sum_blocked_columns(columns: usize) -> usize {
    let block_columns = if columns >= SUM_LANES {
        4 * SUM_LANES
    } else {
        4
    };
    columns / block_columns * block_columns
}

/// Whether ATen reduces `x` over the dims of `mask` with [`aten_outer_sums`]: one run of
/// reduced dims followed by kept ones, each run one block of memory (a slice of the kept
/// dims too), the kept trailing ones unit-stride, strides not increasing (so TensorIterator
/// keeps the dims in this order). Returns `(outer, rows, columns)`: the kept leading
/// elements, the reduced and the kept trailing ones.
pub(crate) fn outer_sum_shape(x: &Tensor, mask: &[bool]) -> Option<(usize, usize, usize)> {
    let first = mask.iter().position(|&m| m)?;
    let end = first + mask[first..].iter().take_while(|&&m| m).count();
    if end == mask.len() || mask[end..].iter().any(|&m| m) {
        return None;
    }
    let (shape, strides) = (x.shape(), x.strides());
    let one_block = |dims: std::ops::Range<usize>| {
        let live: Vec<usize> = dims.filter(|&d| shape[d] != 1).collect();
        live.windows(2)
            .all(|w| strides[w[0]] == strides[w[1]] * shape[w[1]] as isize)
    };
    let live: Vec<isize> = (0..shape.len())
        .filter(|&d| shape[d] != 1)
        .map(|d| strides[d])
        .collect();
    let inner_unit = (end..shape.len())
        .rev()
        .find(|&d| shape[d] != 1)
        .is_none_or(|d| strides[d] == 1);
    if !(one_block(first..end)
        && one_block(end..shape.len())
        && inner_unit
        && live.windows(2).all(|w| w[0] >= w[1]))
    {
        return None;
    }
    let product = |dims: &[usize]| dims.iter().product::<usize>();
    if shape.contains(&0) {
        return None;
    }
    Some((
        product(&shape[..first]),
        product(&shape[first..end]),
        product(&shape[end..]),
    ))
}

/// Whether ATen reduces `x` over the dims of `mask` with [`aten_inner_sum`] per output: a
/// contiguous tensor reduced over trailing dims, in one thread per output (ATen splits one
/// output's reduction between threads only from `GRAIN_SIZE` (32768) elements).
pub(crate) fn inner_sum_applies(x: &Tensor, mask: &[bool]) -> bool {
    const GRAIN_SIZE: usize = 32768;
    let first_reduced = mask.iter().position(|&m| m).unwrap_or(mask.len());
    let suffix = mask[first_reduced..].iter().all(|&m| m);
    let outputs: usize = x.shape()[..first_reduced].iter().product();
    suffix && x.is_contiguous() && (x.numel() < GRAIN_SIZE || outputs > 1)
}
