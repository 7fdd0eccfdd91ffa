//! Elementwise maps into fresh contiguous outputs.

use super::parallel::{for_each_chunk_mut, Rows};
use crate::tensor::{
    broadcast_shapes, Element, Tensor, TensorError, TensorWrite, PARALLEL_THRESHOLD,
};

/// Elements per rayon task for contiguous maps.
const CHUNK: usize = 8 * 1024;

fn fresh_slice<O: Element>(out: &mut TensorWrite<O>) -> crate::Result<&mut [O]> {
    out.as_slice_mut()
        .ok_or_else(|| TensorError::Value("fresh output is not contiguous".into()).into())
}

/// `out[i] = f(x[i])` over a tensor of any strides; the output is contiguous with `x`'s shape.
pub(crate) fn map_unary<I: Element, O: Element, F>(x: &Tensor, f: F) -> crate::Result<Tensor>
where
    F: Fn(I) -> O + Sync + Send,
{
    unary_rows(x, &|d: &mut [O], s: &[I], stride: usize| {
        if stride == 1 {
            d.iter_mut().zip(s).for_each(|(d, &s)| *d = f(s));
        } else {
            for (i, d) in d.iter_mut().enumerate() {
                *d = f(s[i * stride]);
            }
        }
    })
}

// The maps are instantiated once per closure (each op over each dtype it supports: ~900
// instantiations). Only the loop over one row is per closure: `row(dst, x, stride)` (and the
// binary form) is a `&dyn Fn`, called once per chunk or row by a driver instantiated once per
// combination of element types. The drivers were most of each instantiation (issue 9: the
// maps' code went from 4.8 MB to 0.8 MB of the release binary).

/// `row(dst, src, stride)`: `dst[i] = f(src[i * stride])` for one row.
type UnaryRow<'a, I, O> = dyn Fn(&mut [O], &[I], usize) + Sync + 'a;

/// [`map_unary`]'s driver: the fresh output, cut into contiguous chunks or strided rows of `x`.
fn unary_rows<I: Element, O: Element>(
    x: &Tensor,
    row: &UnaryRow<'_, I, O>,
) -> crate::Result<Tensor> {
    let out = Tensor::empty(x.shape(), O::DTYPE)?;
    let mut og = out.write::<O>()?;
    let xg = x.read::<I>()?;
    let dst = fresh_slice(&mut og)?;
    let par = dst.len() >= PARALLEL_THRESHOLD;
    if let Some(src) = xg.as_slice() {
        for_each_chunk_mut(dst, CHUNK, par, &|k, d| {
            row(d, &src[k * CHUNK..][..d.len()], 1)
        });
    } else {
        let rows = Rows::new(x.shape(), [x])?;
        let (src, [sx]) = (xg.span(), rows.strides);
        let per = rows.rows_per_task(CHUNK);
        for_each_chunk_mut(dst, per * rows.len, par, &|k, d| {
            rows.walk(k * per, d.len() / rows.len, &mut |r, [ox]| {
                row(&mut d[r * rows.len..][..rows.len], &src[ox..], sx)
            });
        });
    }
    Ok(out)
}

/// `out = f(a, b)` with NumPy broadcasting. Both inputs must already have element types `A`, `B`.
pub(crate) fn map_binary<A: Element, B: Element, O: Element, F>(
    a: &Tensor,
    b: &Tensor,
    f: F,
) -> crate::Result<Tensor>
where
    F: Fn(A, B) -> O + Sync + Send,
{
    binary_rows(a, b, &|d: &mut [O],
                        (x, sx): (&[A], usize),
                        (y, sy): (&[B], usize)| {
        // float32 rows get their own loops for a single-element side (stride 0); see `fast_paths`
        let fast = fast_paths::<A>() && fast_paths::<B>();
        match (sx, sy) {
            (1, 1) => {
                for ((d, &x), &y) in d.iter_mut().zip(x).zip(y) {
                    *d = f(x, y)
                }
            }
            (1, 0) if fast => {
                if let Some(&y) = y.first() {
                    d.iter_mut().zip(x).for_each(|(d, &x)| *d = f(x, y));
                }
            }
            (0, 1) if fast => {
                if let Some(&x) = x.first() {
                    d.iter_mut().zip(y).for_each(|(d, &y)| *d = f(x, y));
                }
            }
            _ => {
                for (i, d) in d.iter_mut().enumerate() {
                    *d = f(x[i * sx], y[i * sy]);
                }
            }
        }
    })
}

/// `row(dst, (a, a_stride), (b, b_stride))`: `dst[i] = f(a[i * a_stride], b[i * b_stride])` for
/// one row (a stride 0 repeats the side's first element).
type BinaryRow<'a, A, B, O> = dyn Fn(&mut [O], (&[A], usize), (&[B], usize)) + Sync + 'a;

/// [`map_binary`]'s driver: the fresh broadcast output, as contiguous chunks, blocks against a
/// per-channel operand, or rows of the merged broadcast layout.
fn binary_rows<A: Element, B: Element, O: Element>(
    a: &Tensor,
    b: &Tensor,
    row: &BinaryRow<'_, A, B, O>,
) -> crate::Result<Tensor> {
    let shape = broadcast_shapes(a.shape(), b.shape())?;
    let out = Tensor::empty(&shape, O::DTYPE)?;
    let n = out.numel();
    let mut og = out.write::<O>()?;
    let ag = a.read::<A>()?;
    let bg = b.read::<B>()?;
    let dst = fresh_slice(&mut og)?;
    let par = n >= PARALLEL_THRESHOLD;
    let (a_full, b_full) = (a.shape() == shape.as_slice(), b.shape() == shape.as_slice());
    if fast_paths::<A>() && fast_paths::<B>() {
        // Fast paths: same-shape contiguous operands, or one side a single element.
        if let (true, Some(sa)) = (a_full, ag.as_slice()) {
            if let (true, Some(sb)) = (b_full, bg.as_slice()) {
                for_each_chunk_mut(dst, CHUNK, par, &|k, d| {
                    row(d, (&sa[k * CHUNK..], 1), (&sb[k * CHUNK..], 1))
                });
                return Ok(out);
            }
            if b.numel() == 1 {
                let y = bg.span();
                for_each_chunk_mut(dst, CHUNK, par, &|k, d| {
                    row(d, (&sa[k * CHUNK..], 1), (y, 0))
                });
                return Ok(out);
            }
        }
        if let (true, Some(sb)) = (b_full, bg.as_slice()) {
            if a.numel() == 1 {
                let x = ag.span();
                for_each_chunk_mut(dst, CHUNK, par, &|k, d| {
                    row(d, (x, 0), (&sb[k * CHUNK..], 1))
                });
                return Ok(out);
            }
        }
        // One side full and contiguous, the other constant along trailing dims (a per-channel
        // scale or bias: [C, 1, 1] against [N, C, H, W]): blocks of the full side against one
        // value.
        if let (true, Some(sa)) = (a_full, ag.as_slice()) {
            if let (Some(sb), Some(layout)) = (bg.as_slice(), per_block(b.shape(), &shape)) {
                blocks_against_values(dst, sa, sb, layout, par, &|d, full, values| {
                    row(d, full, values)
                });
                return Ok(out);
            }
        }
        if let (true, Some(sb)) = (b_full, bg.as_slice()) {
            if let (Some(sa), Some(layout)) = (ag.as_slice(), per_block(a.shape(), &shape)) {
                blocks_against_values(dst, sb, sa, layout, par, &|d, full, values| {
                    row(d, values, full)
                });
                return Ok(out);
            }
        }
    }
    // Every layout (other dtypes take only this walk: contiguous operands merge into long rows,
    // a broadcast side has stride 0).
    let rows = Rows::new(&shape, [a, b])?;
    let (pa, pb) = (ag.span(), bg.span());
    let ([sa, sb], len) = (rows.strides, rows.len);
    let per = rows.rows_per_task(CHUNK);
    for_each_chunk_mut(dst, per * len, par, &|k, d| {
        rows.walk(k * per, d.len() / len, &mut |r, [oa, ob]| {
            row(&mut d[r * len..][..len], (&pa[oa..], sa), (&pb[ob..], sb))
        });
    });
    Ok(out)
}

/// Whether maps over inputs of element type `T` get their own loops for contiguous,
/// single-element and per-channel operands (float32, what models compute in). Every other
/// dtype takes the general row walk alone, which covers those layouts too (merged into long
/// rows, stride 0 for a broadcast side): the row loops are instantiated for each dtype an op
/// supports, and the extra loops of ~1,400 non-float32 instantiations were about a tenth of
/// the binary.
fn fast_paths<T: Element>() -> bool {
    matches!(T::DTYPE, crate::tensor::DType::Float32)
}

/// When a contiguous operand of shape `small` broadcast to `full` is constant over blocks of
/// `inner` consecutive output elements and block `k` takes its element `k % period`, returns
/// `(inner, period)`: `small` (right-aligned) is ones over the trailing dims, equal to `full`
/// over the dims just before them, and ones (or missing) over the leading ones.
fn per_block(small: &[usize], full: &[usize]) -> Option<(usize, usize)> {
    if small.len() > full.len() {
        return None;
    }
    let padded: Vec<usize> = std::iter::repeat_n(1, full.len() - small.len())
        .chain(small.iter().copied())
        .collect();
    // trailing ones: the block
    let mut end = full.len();
    while end > 0 && padded[end - 1] == 1 {
        end -= 1;
    }
    // then dims equal to the output's: the period
    let mut start = end;
    while start > 0 && padded[start - 1] == full[start - 1] && padded[start - 1] != 1 {
        start -= 1;
    }
    // then only ones
    if padded[..start].iter().any(|&d| d != 1) {
        return None;
    }
    let inner: usize = full[end..].iter().product();
    let period: usize = full[start..end].iter().product();
    // inner 1: the small operand is a whole row repeated along the leading dims (a bias over
    // the last dim, an attention mask over the heads)
    (inner > 1 || period > 1).then_some((inner, period))
}

/// `row(dst, (full, 1), (value, 0))` per block for `per_block`'s layout `(inner, period)`:
/// `dst[i]` from `full[i]` and `values[(i / inner) % period]` (with `inner` 1, `values` is one
/// row of `period` elements repeated, `row(dst, (full, 1), (values, 1))` per row).
fn blocks_against_values<X: Sync, Y: Sync, O: Send>(
    dst: &mut [O],
    full: &[X],
    values: &[Y],
    (inner, period): (usize, usize),
    par: bool,
    row: &BinaryRow<'_, X, Y, O>,
) {
    if inner == 1 {
        // rows of `period` elements, each against the whole of `values`
        let rows = (CHUNK / period.max(1)).max(1);
        zip_chunks(dst, full, rows * period, par, |_, d, x| {
            for (d, x) in d.chunks_mut(period).zip(x.chunks(period)) {
                row(d, (x, 1), (values, 1));
            }
        });
    } else {
        let blocks = (CHUNK / inner).max(1);
        zip_chunks(dst, full, blocks * inner, par, |k, d, x| {
            for (j, (d, x)) in d.chunks_mut(inner).zip(x.chunks(inner)).enumerate() {
                let y = (k * blocks + j) % period;
                if let Some(value) = values.get(y..=y) {
                    row(d, (x, 1), (value, 0));
                }
            }
        });
    }
}

/// `f(k, dst_k, src_k)` over the matching `chunk`-sized pieces of `dst` and `src` (piece `k`
/// of each), on the kernel pool when `par`.
pub(crate) fn zip_chunks<D: Send, S: Sync>(
    dst: &mut [D],
    src: &[S],
    chunk: usize,
    par: bool,
    f: impl Fn(usize, &mut [D], &[S]) + Sync + Send,
) {
    let chunk = chunk.max(1);
    for_each_chunk_mut(dst, chunk, par, &|k, d| {
        if let Some(s) = src.get(k * chunk..) {
            f(k, d, &s[..d.len().min(s.len())]);
        }
    });
}

/// `out = f(a, b, c)` with broadcasting over all three.
pub(crate) fn map_ternary<A: Element, B: Element, C: Element, O: Element, F>(
    a: &Tensor,
    b: &Tensor,
    c: &Tensor,
    f: F,
) -> crate::Result<Tensor>
where
    F: Fn(A, B, C) -> O + Sync + Send,
{
    let shape = broadcast_shapes(&broadcast_shapes(a.shape(), b.shape())?, c.shape())?;
    let out = Tensor::empty(&shape, O::DTYPE)?;
    let (ag, bg, cg) = (a.read::<A>()?, b.read::<B>()?, c.read::<C>()?);
    let par = out.numel() >= PARALLEL_THRESHOLD;
    let mut og = out.write::<O>()?;
    let dst = fresh_slice(&mut og)?;
    let rows = Rows::new(&shape, [a, b, c])?;
    let (pa, pb, pc) = (ag.span(), bg.span(), cg.span());
    let ([sa, sb, sc], len) = (rows.strides, rows.len);
    let per = rows.rows_per_task(CHUNK);
    for_each_chunk_mut(dst, per * len, par, &|k, d| {
        rows.walk(k * per, d.len() / len, &mut |r, [oa, ob, oc]| {
            let d = &mut d[r * len..][..len];
            if sa == 1 && sb == 1 && sc == 1 {
                let abc = pa[oa..].iter().zip(&pb[ob..]).zip(&pc[oc..]);
                for (d, ((&x, &y), &w)) in d.iter_mut().zip(abc) {
                    *d = f(x, y, w);
                }
            } else {
                for (i, d) in d.iter_mut().enumerate() {
                    *d = f(pa[oa + i * sa], pb[ob + i * sb], pc[oc + i * sc]);
                }
            }
        });
    });
    Ok(out)
}

/// `x[i] = f(x[i])` written in place, for a contiguous float32 tensor: the in-place
/// activations (`relu_`, `hardswish_` ...) without a fresh result copied back. `Ok(false)`
/// (nothing done) for any other tensor, which the caller computes the general way.
pub(crate) fn map_inplace_f32<F>(x: &Tensor, f: F) -> crate::Result<bool>
where
    F: Fn(f32) -> f32 + Sync + Send,
{
    if x.dtype() != crate::tensor::DType::Float32 || !x.is_contiguous() {
        return Ok(false);
    }
    let mut g = x.write::<f32>()?;
    let Some(d) = g.as_slice_mut() else {
        return Ok(false);
    };
    let par = d.len() >= PARALLEL_THRESHOLD;
    for_each_chunk_mut(d, CHUNK, par, &|_, c| c.iter_mut().for_each(|v| *v = f(*v)));
    Ok(true)
}

/// `x[i] = f(x[i], y[i])` written in place, for contiguous float32 tensors of one shape in
/// different storages (`add_` of a residual). `Ok(false)` otherwise.
pub(crate) fn zip_inplace_f32<F>(x: &Tensor, y: &Tensor, f: F) -> crate::Result<bool>
where
    F: Fn(f32, f32) -> f32 + Sync + Send,
{
    use crate::tensor::DType;
    if x.dtype() != DType::Float32
        || y.dtype() != DType::Float32
        || x.shape() != y.shape()
        || !x.is_contiguous()
        || !y.is_contiguous()
        || x.storage().same(y.storage())
    {
        return Ok(false);
    }
    let yg = y.read::<f32>()?;
    let mut xg = x.write::<f32>()?;
    let (Some(d), Some(s)) = (xg.as_slice_mut(), yg.as_slice()) else {
        return Ok(false);
    };
    let par = d.len() >= PARALLEL_THRESHOLD;
    zip_chunks(d, s, CHUNK, par, |_, d, s| {
        d.iter_mut().zip(s).for_each(|(d, &s)| *d = f(*d, s))
    });
    Ok(true)
}
