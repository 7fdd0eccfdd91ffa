//! Elementwise maps into fresh contiguous outputs.

use crate::tensor::{
    broadcast_shapes, Element, Tensor, TensorError, TensorRead, TensorWrite, PARALLEL_THRESHOLD,
};
use ndarray::{IxDyn, Zip};
use rayon::prelude::*;

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
    if let Some(src) = xg.as_slice() {
        let dst = fresh_slice(&mut og)?;
        if src.len() >= PARALLEL_THRESHOLD {
            dst.par_chunks_mut(CHUNK)
                .zip(src.par_chunks(CHUNK))
                .for_each(|(d, s)| d.iter_mut().zip(s).for_each(|(d, &s)| *d = f(s)));
        } else {
            dst.iter_mut().zip(src).for_each(|(d, &s)| *d = f(s));
        }
    } else {
        let src = xg.view();
        let mut dv = og.view_mut();
        if src.len() >= PARALLEL_THRESHOLD {
            Zip::from(&mut dv).and(&src).par_for_each(|d, &s| *d = f(s));
        } else {
            Zip::from(&mut dv).and(&src).for_each(|d, &s| *d = f(s));
        }
    }
    Ok(out)
}

fn broadcast_err(a: &[usize], b: &[usize]) -> crate::Error {
    TensorError::Shape(format!("cannot broadcast shape {a:?} to {b:?}")).into()
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
    let a_full = a.shape() == shape.as_slice();
    let b_full = b.shape() == shape.as_slice();
    // Fast paths: same-shape contiguous operands, or one side a single element.
    if let (true, Some(sa)) = (a_full, ag.as_slice()) {
        if let (true, Some(sb)) = (b_full, bg.as_slice()) {
            if par {
                dst.par_chunks_mut(CHUNK)
                    .zip(sa.par_chunks(CHUNK).zip(sb.par_chunks(CHUNK)))
                    .for_each(|(d, (x, y))| {
                        for ((d, &x), &y) in d.iter_mut().zip(x).zip(y) {
                            *d = f(x, y)
                        }
                    });
            } else {
                for ((d, &x), &y) in dst.iter_mut().zip(sa).zip(sb) {
                    *d = f(x, y)
                }
            }
            return Ok(out);
        }
        if b.numel() == 1 {
            let y = first_of(&bg)?;
            if par {
                dst.par_chunks_mut(CHUNK)
                    .zip(sa.par_chunks(CHUNK))
                    .for_each(|(d, x)| d.iter_mut().zip(x).for_each(|(d, &x)| *d = f(x, y)));
            } else {
                dst.iter_mut().zip(sa).for_each(|(d, &x)| *d = f(x, y));
            }
            return Ok(out);
        }
    }
    if let (true, Some(sb)) = (b_full, bg.as_slice()) {
        if a.numel() == 1 {
            let x = first_of(&ag)?;
            if par {
                dst.par_chunks_mut(CHUNK)
                    .zip(sb.par_chunks(CHUNK))
                    .for_each(|(d, y)| d.iter_mut().zip(y).for_each(|(d, &y)| *d = f(x, y)));
            } else {
                dst.iter_mut().zip(sb).for_each(|(d, &y)| *d = f(x, y));
            }
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
    let av = ag.view();
    let av = av
        .broadcast(IxDyn(&shape))
        .ok_or_else(|| broadcast_err(a.shape(), &shape))?;
    let bv = bg.view();
    let bv = bv
        .broadcast(IxDyn(&shape))
        .ok_or_else(|| broadcast_err(b.shape(), &shape))?;
    let mut dv = og.view_mut();
    let z = Zip::from(&mut dv).and(&av).and(&bv);
    if par {
        z.par_for_each(|d, &x, &y| *d = f(x, y));
    } else {
        z.for_each(|d, &x, &y| *d = f(x, y));
    }
    Ok(out)
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
        zip_chunks(dst, full, period, par, |_, d, x| {
            for ((d, &x), &y) in d.iter_mut().zip(x).zip(values) {
                *d = f(x, y);
            }
        });
    } else {
        zip_chunks(dst, full, inner, par, |k, d, x| {
            let y = values[k % period];
            d.iter_mut().zip(x).for_each(|(d, &x)| *d = f(x, y));
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
    if par {
        dst.par_chunks_mut(chunk)
            .zip(src.par_chunks(chunk))
            .enumerate()
            .for_each(|(k, (d, s))| f(k, d, s));
    } else {
        dst.chunks_mut(chunk)
            .zip(src.chunks(chunk))
            .enumerate()
            .for_each(|(k, (d, s))| f(k, d, s));
    }
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
    let av = ag.view();
    let av = av
        .broadcast(IxDyn(&shape))
        .ok_or_else(|| broadcast_err(a.shape(), &shape))?;
    let bv = bg.view();
    let bv = bv
        .broadcast(IxDyn(&shape))
        .ok_or_else(|| broadcast_err(b.shape(), &shape))?;
    let cv = cg.view();
    let cv = cv
        .broadcast(IxDyn(&shape))
        .ok_or_else(|| broadcast_err(c.shape(), &shape))?;
    let par = out.numel() >= PARALLEL_THRESHOLD;
    let mut og = out.write::<O>()?;
    let mut dv = og.view_mut();
    let z = Zip::from(&mut dv).and(&av).and(&bv).and(&cv);
    if par {
        z.par_for_each(|d, &x, &y, &w| *d = f(x, y, w));
    } else {
        z.for_each(|d, &x, &y, &w| *d = f(x, y, w));
    }
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
    if d.len() >= PARALLEL_THRESHOLD {
        d.par_chunks_mut(CHUNK)
            .for_each(|c| c.iter_mut().for_each(|v| *v = f(*v)));
    } else {
        d.iter_mut().for_each(|v| *v = f(*v));
    }
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
    if d.len() >= PARALLEL_THRESHOLD {
        d.par_chunks_mut(CHUNK)
            .zip(s.par_chunks(CHUNK))
            .for_each(|(d, s)| d.iter_mut().zip(s).for_each(|(d, &s)| *d = f(*d, s)));
    } else {
        d.iter_mut().zip(s).for_each(|(d, &s)| *d = f(*d, s));
    }
    Ok(true)
}
