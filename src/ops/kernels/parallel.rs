//! The parallel driver of the shared kernels, and the strided walk of the elementwise maps.
//!
//! Rayon's splitting machinery (`join_context`, `bridge_producer_consumer`, `StackJob`, ...) and
//! ndarray's `Zip` are instantiated once per closure type. The kernels' closures are generic over
//! the element types and the op, so calling rayon or `Zip` from inside a generic kernel
//! instantiated that machinery thousands of times (issue 9: over 40 MB of the release binary's
//! code, and most of its build time). Here the work per chunk is a `&dyn Fn`: rayon is
//! instantiated once per element type of the output, and the kernels keep only their own inner
//! loops.

use crate::tensor::{Tensor, TensorError};
use rayon::prelude::*;
use smallvec::SmallVec;

/// `f(k, piece_k)` over the `chunk`-sized pieces of `dst` (piece `k` starts at `k * chunk`; the
/// last may be shorter), on the kernel pool when `par`.
pub(crate) fn for_each_chunk_mut<T: Send>(
    dst: &mut [T],
    chunk: usize,
    par: bool,
    f: &(dyn Fn(usize, &mut [T]) + Sync),
) {
    let chunk = chunk.max(1);
    if par && dst.len() > chunk {
        dst.par_chunks_mut(chunk)
            .enumerate()
            .for_each(|(k, d)| f(k, d));
    } else {
        dst.chunks_mut(chunk).enumerate().for_each(|(k, d)| f(k, d));
    }
}

/// The work on piece `k` of two outputs, for [`for_each_chunk_mut2`].
type PairChunkFn<'a, T, U> = dyn Fn(usize, &mut [T], &mut [U]) + Sync + 'a;

/// [`for_each_chunk_mut`] over two outputs split alike: `f(k, a_k, b_k)` with `a_k` the
/// `chunk_a`-sized piece `k` of `a` and `b_k` the `chunk_b`-sized piece `k` of `b`, for as many
/// pieces as both have.
pub(crate) fn for_each_chunk_mut2<T: Send, U: Send>(
    a: &mut [T],
    b: &mut [U],
    (chunk_a, chunk_b): (usize, usize),
    par: bool,
    f: &PairChunkFn<'_, T, U>,
) {
    let (chunk_a, chunk_b) = (chunk_a.max(1), chunk_b.max(1));
    if par && a.len() > chunk_a {
        a.par_chunks_mut(chunk_a)
            .zip(b.par_chunks_mut(chunk_b))
            .enumerate()
            .for_each(|(k, (x, y))| f(k, x, y));
    } else {
        a.chunks_mut(chunk_a)
            .zip(b.chunks_mut(chunk_b))
            .enumerate()
            .for_each(|(k, (x, y))| f(k, x, y));
    }
}

/// `N` operands broadcast to a contiguous output, as rows: the output's dims with size-1 dims
/// dropped and adjacent dims merged wherever every operand allows (so the last dim, the row, is
/// as long as possible), and each operand's element strides (0 along broadcast dims). Operands
/// are read through [`TensorRead::span`](crate::tensor::TensorRead::span).
pub(crate) struct Rows<const N: usize> {
    /// The merged dims before the row.
    outer: SmallVec<[usize; 6]>,
    outer_strides: SmallVec<[[usize; N]; 6]>,
    /// The row length (the last merged dim; 1 for a single element).
    pub(crate) len: usize,
    /// Each operand's stride along the row.
    pub(crate) strides: [usize; N],
}

impl<const N: usize> Rows<N> {
    /// The layout of `operands` broadcast to `shape` (an error naming both shapes if one does
    /// not broadcast).
    pub(crate) fn new(shape: &[usize], operands: [&Tensor; N]) -> crate::Result<Self> {
        let nd = shape.len();
        let mut dims: SmallVec<[(usize, [usize; N]); 6]> = SmallVec::new();
        for d in 0..nd {
            if shape[d] == 1 {
                continue;
            }
            let mut st = [0usize; N];
            for (o, t) in operands.iter().enumerate() {
                let lead = nd
                    .checked_sub(t.dim())
                    .ok_or_else(|| bad(t.shape(), shape))?;
                if d < lead {
                    continue; // a missing leading dim: broadcast
                }
                let size = t.shape()[d - lead];
                if size == shape[d] {
                    st[o] = t.strides()[d - lead].unsigned_abs();
                } else if size != 1 {
                    return Err(bad(t.shape(), shape));
                }
            }
            if let Some((psize, pst)) = dims.last_mut() {
                if (0..N).all(|o| pst[o] == st[o] * shape[d]) {
                    *psize *= shape[d];
                    *pst = st;
                    continue;
                }
            }
            dims.push((shape[d], st));
        }
        let (len, strides) = dims.pop().unwrap_or((1, [0; N]));
        Ok(Rows {
            outer: dims.iter().map(|d| d.0).collect(),
            outer_strides: dims.iter().map(|d| d.1).collect(),
            len,
            strides,
        })
    }

    /// `f(r, offsets)` for rows `first .. first + count`, `r` counting from 0 and `offsets` each
    /// operand's element offset of the row's first element.
    pub(crate) fn walk(&self, first: usize, count: usize, f: &mut dyn FnMut(usize, [usize; N])) {
        let nd = self.outer.len();
        let mut idx: SmallVec<[usize; 6]> = SmallVec::from_elem(0, nd);
        let mut offs = [0usize; N];
        let mut rest = first;
        for d in (0..nd).rev() {
            idx[d] = rest % self.outer[d];
            rest /= self.outer[d];
            for (o, off) in offs.iter_mut().enumerate() {
                *off += idx[d] * self.outer_strides[d][o];
            }
        }
        for r in 0..count {
            f(r, offs);
            // advance the odometer
            for d in (0..nd).rev() {
                idx[d] += 1;
                if idx[d] < self.outer[d] {
                    for (o, off) in offs.iter_mut().enumerate() {
                        *off += self.outer_strides[d][o];
                    }
                    break;
                }
                idx[d] = 0;
                for (o, off) in offs.iter_mut().enumerate() {
                    *off -= (self.outer[d] - 1) * self.outer_strides[d][o];
                }
            }
        }
    }

    /// Rows per parallel task so that a task covers about `elements` output elements.
    pub(crate) fn rows_per_task(&self, elements: usize) -> usize {
        (elements / self.len.max(1)).max(1)
    }
}

fn bad(from: &[usize], to: &[usize]) -> crate::Error {
    TensorError::Shape(format!("cannot broadcast shape {from:?} to {to:?}")).into()
}
