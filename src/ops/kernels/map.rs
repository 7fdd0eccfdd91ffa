//! Elementwise maps into fresh contiguous outputs.

use super::parallel::{for_each_chunk_mut, Rows};
use crate::tensor::{
    broadcast_shapes, Element, Tensor, TensorError, TensorRead, TensorWrite, PARALLEL_THRESHOLD,
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
    let out = Tensor::empty(x.shape(), O::DTYPE)?;
    let mut og = out.write::<O>()?;
    let xg = x.read::<I>()?;
    let dst = fresh_slice(&mut og)?;
    let par = dst.len() >= PARALLEL_THRESHOLD;
    // The contiguous fast path only for float32 inputs; see `fast_paths`.
    let contiguous = if fast_paths::<I>() {
        xg.as_slice()
    } else {
        None
    };
    if let Some(src) = contiguous {
        for_each_chunk_mut(dst, CHUNK, par, &|k, d| {
            let s = &src[k * CHUNK..][..d.len()];
            d.iter_mut().zip(s).for_each(|(d, &s)| *d = f(s));
        });
    } else {
        let rows = Rows::new(x.shape(), [x])?;
        let (src, [sx]) = (xg.span(), rows.strides);
        let per = rows.rows_per_task(CHUNK);
        for_each_chunk_mut(dst, per * rows.len, par, &|k, d| {
            rows.walk(k * per, d.len() / rows.len, &mut |r, [ox]| {
                let d = &mut d[r * rows.len..][..rows.len];
                if sx == 1 {
                    d.iter_mut().zip(&src[ox..]).for_each(|(d, &s)| *d = f(s));
                } else {
                    for (i, d) in d.iter_mut().enumerate() {
                        *d = f(src[ox + i * sx]);
                    }
                }
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
    let shape = broadcast_shapes(a.shape(), b.shape())?;
    let out = Tensor::empty(&shape, O::DTYPE)?;
    let n = out.numel();
    let mut og = out.write::<O>()?;
    let ag = a.read::<A>()?;
    let bg = b.read::<B>()?;
    let dst = fresh_slice(&mut og)?;
    let par = n >= PARALLEL_THRESHOLD;
    if !(fast_paths::<A>() && fast_paths::<B>()) {
        binary_rows(dst, &shape, a, b, &ag, &bg, par, &f)?;
        return Ok(out);
    }
    let a_full = a.shape() == shape.as_slice();
    let b_full = b.shape() == shape.as_slice();
    // Fast paths: same-shape contiguous operands, or one side a single element.
    if let (true, Some(sa)) = (a_full, ag.as_slice()) {
        if let (true, Some(sb)) = (b_full, bg.as_slice()) {
            for_each_chunk_mut(dst, CHUNK, par, &|k, d| {
                let (x, y) = (&sa[k * CHUNK..], &sb[k * CHUNK..]);
                for ((d, &x), &y) in d.iter_mut().zip(x).zip(y) {
                    *d = f(x, y)
                }
            });
            return Ok(out);
        }
        if b.numel() == 1 {
            let y = first_of(&bg)?;
            for_each_chunk_mut(dst, CHUNK, par, &|k, d| {
                let x = &sa[k * CHUNK..];
                d.iter_mut().zip(x).for_each(|(d, &x)| *d = f(x, y));
            });
            return Ok(out);
        }
    }
    if let (true, Some(sb)) = (b_full, bg.as_slice()) {
        if a.numel() == 1 {
            let x = first_of(&ag)?;
            for_each_chunk_mut(dst, CHUNK, par, &|k, d| {
                let y = &sb[k * CHUNK..];
                d.iter_mut().zip(y).for_each(|(d, &y)| *d = f(x, y));
            });
            return Ok(out);
        }
    }
    // One side full and contiguous, the other constant along trailing dims (a per-channel
    // scale or bias: [C, 1, 1] against [N, C, H, W]): blocks of the full side against one value.
    if let (true, Some(sa)) = (a_full, ag.as_slice()) {
        if let (Some(sb), Some((inner, period))) = (bg.as_slice(), per_block(b.shape(), &shape)) {
            blocks_against_values(dst, sa, sb, inner, period, par, &f);
            return Ok(out);
        }
    }
    if let (true, Some(sb)) = (b_full, bg.as_slice()) {
        if let (Some(sa), Some((inner, period))) = (ag.as_slice(), per_block(a.shape(), &shape)) {
            blocks_against_values(dst, sb, sa, inner, period, par, |y, x| f(x, y));
            return Ok(out);
        }
    }
    binary_rows(dst, &shape, a, b, &ag, &bg, par, &f)?;
    Ok(out)
}

/// Whether maps over inputs of element type `T` get their own loops for contiguous,
/// single-element and per-channel operands (float32, what models compute in). Every other
/// dtype takes the general row walk alone, which covers those layouts too (merged into long
/// rows, stride 0 for a broadcast side): each closure is instantiated for each dtype an op
/// supports, and the extra loops of ~1,400 non-float32 instantiations were about a tenth of
/// the binary.
fn fast_paths<T: Element>() -> bool {
    matches!(T::DTYPE, crate::tensor::DType::Float32)
}

/// `dst = f(a, b)` over any strides: rows of the merged broadcast layout of `shape`.
#[allow(clippy::too_many_arguments)]
fn binary_rows<A: Element, B: Element, O: Element, F>(
    dst: &mut [O],
    shape: &[usize],
    a: &Tensor,
    b: &Tensor,
    ag: &TensorRead<A>,
    bg: &TensorRead<B>,
    par: bool,
    f: &F,
) -> crate::Result<()>
where
    F: Fn(A, B) -> O + Sync + Send,
{
    let rows = Rows::new(shape, [a, b])?;
    let (pa, pb) = (ag.span(), bg.span());
    let ([sa, sb], len) = (rows.strides, rows.len);
    let per = rows.rows_per_task(CHUNK);
    for_each_chunk_mut(dst, per * len, par, &|k, d| {
        rows.walk(k * per, d.len() / len, &mut |r, [oa, ob]| {
            let d = &mut d[r * len..][..len];
            if sa == 1 && sb == 1 {
                for ((d, &x), &y) in d.iter_mut().zip(&pa[oa..]).zip(&pb[ob..]) {
                    *d = f(x, y)
                }
            } else {
                for (i, d) in d.iter_mut().enumerate() {
                    *d = f(pa[oa + i * sa], pb[ob + i * sb]);
                }
            }
        });
    });
    Ok(())
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

/// `dst[i] = f(full[i], values[(i / inner) % period])` for `per_block`'s layout (with
/// `inner` 1, `values` is one row of `period` elements repeated).
fn blocks_against_values<X: Copy + Sync, Y: Copy + Sync, O: Send>(
    dst: &mut [O],
    full: &[X],
    values: &[Y],
    inner: usize,
    period: usize,
    par: bool,
    f: impl Fn(X, Y) -> O + Sync,
) {
    if inner == 1 {
        // rows of `period` elements, each against the whole of `values`
        let rows = (CHUNK / period.max(1)).max(1);
        zip_chunks(dst, full, rows * period, par, |_, d, x| {
            for (d, x) in d.chunks_mut(period).zip(x.chunks(period)) {
                for ((d, &x), &y) in d.iter_mut().zip(x).zip(values) {
                    *d = f(x, y);
                }
            }
        });
    } else {
        let blocks = (CHUNK / inner).max(1);
        zip_chunks(dst, full, blocks * inner, par, |k, d, x| {
            for (j, (d, x)) in d.chunks_mut(inner).zip(x.chunks(inner)).enumerate() {
                let y = values[(k * blocks + j) % period];
                d.iter_mut().zip(x).for_each(|(d, &x)| *d = f(x, y));
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

/// The first element of a borrowed non-empty tensor.
fn first_of<T: Element>(g: &TensorRead<T>) -> crate::Result<T> {
    g.view()
        .iter()
        .next()
        .copied()
        .ok_or_else(|| TensorError::Value("empty tensor has no element".into()).into())
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
