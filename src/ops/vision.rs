//! Kernels: torchvision detection ops (nms, roi_align, roi_pool), following torchvision's CPU
//! kernels step for step (same precision, same rounding) so kept boxes and pooled values match.

use super::linalg::{
    compute_dtype, contiguous_as, dispatch_real_compute, shape_err, slice_mut_of, slice_of,
    value_err, Real,
};
use super::{Args, Registry};
#[allow(unused_imports)]
use crate::tensor::Element as _;
use crate::tensor::{DType, Tensor};
use crate::values::{IValue, Tuple};
#[allow(unused_imports)]
use num_traits::{Float as _, One as _, Zero as _};
use rayon::prelude::*;

/// nms(dets [N, 4], scores [N], iou_threshold) -> kept indices (int64), by descending score.
fn nms(a: &mut Args) -> crate::Result<IValue> {
    let (dets, scores) = (a.tensor(0)?, a.tensor(1)?);
    let thr = a.double(2)?;
    if dets.dim() != 2 || dets.shape()[1] != 4 {
        return Err(shape_err(format!(
            "{}: boxes should have 2 dimensions and size 4 in dim 1, got {:?}",
            a.op,
            dets.shape()
        )));
    }
    if scores.dim() != 1 || scores.shape()[0] != dets.shape()[0] {
        return Err(shape_err(format!(
            "{}: boxes and scores should have the same number of elements in dimension 0, got {} and {:?}",
            a.op,
            dets.shape()[0],
            scores.shape()
        )));
    }
    if dets.dtype() != scores.dtype() {
        return Err(value_err(format!(
            "{}: boxes and scores should have the same type",
            a.op
        )));
    }
    let n = dets.shape()[0];
    let cd = compute_dtype(a.op, dets.dtype())?;
    let keep: Vec<i64> = dispatch_real_compute!(cd, a.op, |T| {
        let d = contiguous_as(&dets, cd)?;
        let b_guard = d.read::<T>()?;
        let b = slice_of(&b_guard)?;
        let s = scores.to_vec::<f64>()?;
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&i, &j| s[j].partial_cmp(&s[i]).unwrap_or(std::cmp::Ordering::Equal));
        let area = |i: usize| (b[i * 4 + 2] - b[i * 4]) * (b[i * 4 + 3] - b[i * 4 + 1]);
        let thr = T::from_f64(thr);
        let mut suppressed = vec![false; n];
        let mut keep = Vec::new();
        for (oi, &i) in order.iter().enumerate() {
            if suppressed[i] {
                continue;
            }
            keep.push(i as i64);
            let ai = area(i);
            for &j in &order[oi + 1..] {
                if suppressed[j] {
                    continue;
                }
                let xx1 = b[i * 4].max(b[j * 4]);
                let yy1 = b[i * 4 + 1].max(b[j * 4 + 1]);
                let xx2 = b[i * 4 + 2].min(b[j * 4 + 2]);
                let yy2 = b[i * 4 + 3].min(b[j * 4 + 3]);
                let w = (xx2 - xx1).max(T::zero());
                let h = (yy2 - yy1).max(T::zero());
                let inter = w * h;
                let ovr = inter / (ai + area(j) - inter);
                if ovr > thr {
                    suppressed[j] = true;
                }
            }
        }
        Ok::<_, crate::Error>(keep)
    })?;
    let len = keep.len();
    Ok(IValue::Tensor(Tensor::from_vec(keep, &[len])?))
}

/// Validated (input [N, C, H, W], rois [K, 5]) in the compute dtype.
fn roi_inputs(a: &Args) -> crate::Result<(Tensor, Tensor, DType, DType)> {
    let (x, rois) = (a.tensor(0)?, a.tensor(1)?);
    if x.dim() != 4 {
        return Err(shape_err(format!(
            "{}: input must be 4-D, got {:?}",
            a.op,
            x.shape()
        )));
    }
    if rois.dim() != 2 || rois.shape()[1] != 5 {
        return Err(shape_err(format!(
            "{}: rois must have shape [K, 5], got {:?}",
            a.op,
            rois.shape()
        )));
    }
    let dtype = x.dtype();
    let cd = compute_dtype(a.op, dtype)?;
    Ok((contiguous_as(&x, cd)?, contiguous_as(&rois, cd)?, dtype, cd))
}

fn pooled(a: &Args, i: usize) -> crate::Result<usize> {
    let v = a.int(i)?;
    usize::try_from(v)
        .ok()
        .filter(|&v| v > 0)
        .ok_or_else(|| value_err(format!("{}: pooled size must be positive, got {v}", a.op)))
}

fn bilinear<T: Real>(img: &[T], h: usize, w: usize, mut y: T, mut x: T) -> T {
    let (hf, wf) = (T::from_f64(h as f64), T::from_f64(w as f64));
    if y < -T::one() || y > hf || x < -T::one() || x > wf {
        return T::zero();
    }
    if y <= T::zero() {
        y = T::zero();
    }
    if x <= T::zero() {
        x = T::zero();
    }
    let mut yl = y.as_f64() as usize;
    let mut xl = x.as_f64() as usize;
    let (yh, xh);
    if yl >= h - 1 {
        yl = h - 1;
        yh = yl;
        y = T::from_f64(yl as f64);
    } else {
        yh = yl + 1;
    }
    if xl >= w - 1 {
        xl = w - 1;
        xh = xl;
        x = T::from_f64(xl as f64);
    } else {
        xh = xl + 1;
    }
    let ly = y - T::from_f64(yl as f64);
    let lx = x - T::from_f64(xl as f64);
    let (hy, hx) = (T::one() - ly, T::one() - lx);
    hy * hx * img[yl * w + xl]
        + hy * lx * img[yl * w + xh]
        + ly * hx * img[yh * w + xl]
        + ly * lx * img[yh * w + xh]
}

/// roi_align(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned)
fn roi_align(a: &mut Args) -> crate::Result<IValue> {
    let (x, rois, dtype, cd) = roi_inputs(a)?;
    let scale = a.double(2)?;
    let (ph, pw) = (pooled(a, 3)?, pooled(a, 4)?);
    let ratio = a.int(5)?;
    let aligned = a.bool(6)?;
    let (n, c, h, w) = (x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]);
    let k = rois.shape()[0];
    let out = Tensor::zeros(&[k, c, ph, pw], cd)?;
    if c * ph * pw == 0 || h == 0 || w == 0 {
        return Ok(IValue::Tensor(out.to_dtype(dtype)?));
    }
    dispatch_real_compute!(cd, a.op, |T| {
        let xs_guard = x.read::<T>()?;
        let xs = slice_of(&xs_guard)?;
        let rs_guard = rois.read::<T>()?;
        let rs = slice_of(&rs_guard)?;
        let mut os_guard = out.write::<T>()?;
        let os = slice_mut_of(&mut os_guard)?;
        for r in 0..k {
            let bi = rs[r * 5].as_f64() as i64;
            if bi < 0 || bi as usize >= n {
                return Err(value_err(format!(
                    "{}: roi batch index {bi} out of range",
                    a.op
                )));
            }
        }
        let sc = T::from_f64(scale);
        let off = if aligned { T::from_f64(0.5) } else { T::zero() };
        os.par_chunks_mut(c * ph * pw)
            .enumerate()
            .for_each(|(r, o)| {
                let roi = &rs[r * 5..r * 5 + 5];
                let bi = roi[0].as_f64() as usize;
                let sw = roi[1] * sc - off;
                let sh = roi[2] * sc - off;
                let ew = roi[3] * sc - off;
                let eh = roi[4] * sc - off;
                let (mut rw, mut rh) = (ew - sw, eh - sh);
                if !aligned {
                    rw = rw.max(T::one());
                    rh = rh.max(T::one());
                }
                let bh = rh / T::from_f64(ph as f64);
                let bw = rw / T::from_f64(pw as f64);
                let gh = if ratio > 0 {
                    ratio as usize
                } else {
                    (rh / T::from_f64(ph as f64)).ceil().as_f64().max(0.0) as usize
                };
                let gw = if ratio > 0 {
                    ratio as usize
                } else {
                    (rw / T::from_f64(pw as f64)).ceil().as_f64().max(0.0) as usize
                };
                let count = T::from_f64((gh * gw).max(1) as f64);
                for ch in 0..c {
                    let img = &xs[(bi * c + ch) * h * w..][..h * w];
                    for py in 0..ph {
                        for px in 0..pw {
                            let mut sum = T::zero();
                            for iy in 0..gh {
                                let y = sh
                                    + T::from_f64(py as f64) * bh
                                    + (T::from_f64(iy as f64) + T::from_f64(0.5)) * bh
                                        / T::from_f64(gh as f64);
                                for ix in 0..gw {
                                    let xx = sw
                                        + T::from_f64(px as f64) * bw
                                        + (T::from_f64(ix as f64) + T::from_f64(0.5)) * bw
                                            / T::from_f64(gw as f64);
                                    sum += bilinear(img, h, w, y, xx);
                                }
                            }
                            o[(ch * ph + py) * pw + px] = sum / count;
                        }
                    }
                }
            });
        Ok::<(), crate::Error>(())
    })?;
    Ok(IValue::Tensor(out.to_dtype(dtype)?))
}

/// roi_pool(input, rois, spatial_scale, pooled_height, pooled_width) -> (output, argmax)
fn roi_pool(a: &mut Args) -> crate::Result<IValue> {
    let (x, rois, dtype, cd) = roi_inputs(a)?;
    let scale = a.double(2)?;
    let (ph, pw) = (pooled(a, 3)?, pooled(a, 4)?);
    let (n, c, h, w) = (x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]);
    let k = rois.shape()[0];
    let out = Tensor::zeros(&[k, c, ph, pw], cd)?;
    let arg = Tensor::zeros(&[k, c, ph, pw], DType::Int32)?;
    dispatch_real_compute!(cd, a.op, |T| {
        let xs_guard = x.read::<T>()?;
        let xs = slice_of(&xs_guard)?;
        let rs_guard = rois.read::<T>()?;
        let rs = slice_of(&rs_guard)?;
        let mut os_guard = out.write::<T>()?;
        let os = slice_mut_of(&mut os_guard)?;
        let mut am_guard = arg.write::<i32>()?;
        let am = slice_mut_of(&mut am_guard)?;
        let sc = T::from_f64(scale);
        for r in 0..k {
            let roi = &rs[r * 5..r * 5 + 5];
            let bi = roi[0].as_f64() as i64;
            if bi < 0 || bi as usize >= n {
                return Err(value_err(format!(
                    "{}: roi batch index {bi} out of range",
                    a.op
                )));
            }
            let bi = bi as usize;
            let round = |v: T| (v * sc).round().as_f64() as i64;
            let (sw, sh, ew, eh) = (round(roi[1]), round(roi[2]), round(roi[3]), round(roi[4]));
            let rw = (ew - sw + 1).max(1);
            let rh = (eh - sh + 1).max(1);
            let bh = T::from_f64(rh as f64) / T::from_f64(ph as f64);
            let bw = T::from_f64(rw as f64) / T::from_f64(pw as f64);
            for py in 0..ph {
                let hs =
                    ((T::from_f64(py as f64) * bh).floor().as_f64() as i64 + sh).clamp(0, h as i64);
                let he = ((T::from_f64((py + 1) as f64) * bh).ceil().as_f64() as i64 + sh)
                    .clamp(0, h as i64);
                for px in 0..pw {
                    let ws = ((T::from_f64(px as f64) * bw).floor().as_f64() as i64 + sw)
                        .clamp(0, w as i64);
                    let we = ((T::from_f64((px + 1) as f64) * bw).ceil().as_f64() as i64 + sw)
                        .clamp(0, w as i64);
                    let empty = he <= hs || we <= ws;
                    for ch in 0..c {
                        let img = &xs[(bi * c + ch) * h * w..][..h * w];
                        let mut best = if empty { T::zero() } else { T::min_value() };
                        let mut best_i: i64 = -1;
                        for yy in hs..he {
                            for xx in ws..we {
                                let idx = yy as usize * w + xx as usize;
                                if img[idx] > best {
                                    best = img[idx];
                                    best_i = idx as i64;
                                }
                            }
                        }
                        let o = ((r * c + ch) * ph + py) * pw + px;
                        os[o] = best;
                        am[o] = best_i as i32;
                    }
                }
            }
        }
        Ok::<(), crate::Error>(())
    })?;
    Ok(IValue::Tuple(Tuple::new(vec![
        IValue::Tensor(out.to_dtype(dtype)?),
        IValue::Tensor(arg),
    ])))
}

pub(crate) fn register(r: &mut Registry) {
    r.add("torchvision::nms", nms);
    r.add("torchvision::roi_align", roi_align);
    r.add("torchvision::roi_pool", roi_pool);
}
