//! Kernels: torchvision detection ops (nms, roi_align, roi_pool, their position-sensitive
//! ps_roi_align / ps_roi_pool, and the quantized qnms / qroi_align that take integer
//! representations), following torchvision's CPU kernels step for step (same precision, same
//! rounding) so kept boxes and pooled values match.

use super::kernels::{
    check_rank, check_size, invalid_argument, not_implemented_for, unsupported_feature,
};
use super::linalg::{
    compute_dtype, contiguous_as, dispatch_real_compute, slice_mut_of, slice_of, Real,
};
use super::{Args, Registry};
#[allow(unused_imports)]
use crate::tensor::Element as _;
use crate::tensor::{DType, Tensor};
use crate::tensor::{RankRequirement, TensorError};
use crate::values::{IValue, Tuple};
#[allow(unused_imports)]
use num_traits::{Float as _, One as _, Zero as _};
use rayon::prelude::*;

/// nms's and qnms's arguments: boxes `[N, 4]` and scores `[N]` of one dtype.
/// An ROI's batch index (its first column) outside the input's batch.
fn roi_batch_index(index: i64, batch: usize) -> crate::Error {
    TensorError::IndexOutOfBounds {
        index,
        dim: 0,
        size: batch,
    }
    .into()
}

/// A 4-D input and `[K, 5]` rois.
fn check_input_and_rois(op: &str, x: &Tensor, rois: &Tensor) -> crate::Result<()> {
    check_rank(op, "input", RankRequirement::Exactly(4), x.shape())?;
    check_rank(op, "rois", RankRequirement::Exactly(2), rois.shape())?;
    check_size(op, "rois.size(1)", 5, rois.shape()[1] as i64)?;
    Ok(())
}

fn check_boxes_scores(op: &str, dets: &Tensor, scores: &Tensor) -> crate::Result<()> {
    check_rank(op, "boxes", RankRequirement::Exactly(2), dets.shape())?;
    check_size(op, "boxes.size(1)", 4, dets.shape()[1] as i64)?;
    check_rank(op, "scores", RankRequirement::Exactly(1), scores.shape())?;
    check_size(
        op,
        "scores.size(0) (boxes.size(0))",
        dets.shape()[0] as i64,
        scores.shape()[0] as i64,
    )?;
    if dets.dtype() != scores.dtype() {
        return Err(TensorError::DTypeMismatch {
            expected: dets.dtype(),
            got: scores.dtype(),
        }
        .into());
    }
    Ok(())
}

/// nms(dets [N, 4], scores [N], iou_threshold) -> kept indices (int64), by descending score.
fn nms(a: &mut Args) -> crate::Result<IValue> {
    let (dets, scores) = (a.tensor(0)?, a.tensor(1)?);
    let thr = a.double(2)?;
    check_boxes_scores(a.op, &dets, &scores)?;
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
    check_input_and_rois(a.op, &x, &rois)?;
    let dtype = x.dtype();
    let cd = compute_dtype(a.op, dtype)?;
    Ok((contiguous_as(&x, cd)?, contiguous_as(&rois, cd)?, dtype, cd))
}

fn pooled(a: &Args, i: usize) -> crate::Result<usize> {
    let v = a.int(i)?;
    usize::try_from(v)
        .ok()
        .filter(|&v| v > 0)
        .ok_or_else(|| invalid_argument(a.op, "pooled size", "must be positive", v))
}

fn bilinear<T: Real>(img: &[T], h: usize, w: usize, mut y: T, mut x: T) -> T {
    let (hf, wf) = (T::from_f64(h as f64), T::from_f64(w as f64));
    // written as "not in range" so NaN coordinates (every comparison false) sample nothing
    if !(y >= -T::one() && y <= hf && x >= -T::one() && x <= wf) {
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
                return Err(roi_batch_index(bi, n));
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
                return Err(roi_batch_index(bi, n));
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

/// A 4-d input and `[K, 5]` rois of the input's dtype (the torchvision ops added for coverage
/// check the dtypes agree).
fn check_roi_pair(op: &str, x: &Tensor, rois: &Tensor) -> crate::Result<()> {
    check_input_and_rois(op, x, rois)?;
    if x.dtype() != rois.dtype() {
        return Err(TensorError::DTypeMismatch {
            expected: x.dtype(),
            got: rois.dtype(),
        }
        .into());
    }
    Ok(())
}

/// The float dtype of a position-sensitive pooling's input and rois (torchvision's kernels take
/// float and double; its half path rounds every step to half, which tsrun does not replay).
fn ps_inputs(a: &Args) -> crate::Result<(Tensor, Tensor, usize, usize, usize)> {
    let (x, rois) = (a.tensor(0)?, a.tensor(1)?);
    check_roi_pair(a.op, &x, &rois)?;
    if !matches!(x.dtype(), DType::Float32 | DType::Float64) {
        return Err(not_implemented_for(a.op, x.dtype()));
    }
    let (ph, pw) = (pooled(a, 3)?, pooled(a, 4)?);
    let c = x.shape()[1];
    if c % (ph * pw) != 0 {
        return Err(invalid_argument(
            a.op,
            "input.size(1)",
            format!("must be a multiple of pooled_height * pooled_width ({ph}x{pw})"),
            c,
        ));
    }
    Ok((x.contiguous()?, rois.contiguous()?, ph, pw, c / (ph * pw)))
}

/// The batch index a roi row names, checked against the input's batch size.
fn roi_batch<T: Real>(v: T, n: usize) -> crate::Result<usize> {
    let bi = v.as_f64() as i64;
    usize::try_from(bi)
        .ok()
        .filter(|&b| b < n)
        .ok_or_else(|| roi_batch_index(bi, n))
}

/// ps_roi_align(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio) ->
/// (output [K, C / (ph * pw), ph, pw], channel_mapping int32): output bin (c, py, px) averages
/// bilinear samples of input channel `(c * ph + py) * pw + px` (boxes shifted by -0.5, no
/// minimum size).
fn ps_roi_align(a: &mut Args) -> crate::Result<IValue> {
    let (x, rois, ph, pw, c_out) = ps_inputs(a)?;
    let scale = a.double(2)?;
    let ratio = a.int(5)?;
    let (n, c, h, w) = (x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]);
    let k = rois.shape()[0];
    let out = Tensor::zeros(&[k, c_out, ph, pw], x.dtype())?;
    let mapping = Tensor::zeros(&[k, c_out, ph, pw], DType::Int32)?;
    if k * c_out * ph * pw == 0 {
        return Ok(IValue::Tuple(Tuple::new(vec![
            IValue::Tensor(out),
            IValue::Tensor(mapping),
        ])));
    }
    if h == 0 || w == 0 {
        // torchvision would sample outside an empty map
        return Err(unsupported_feature(
            a.op,
            format!("an empty spatial size {h}x{w} (torchvision would sample outside the map)"),
        ));
    }
    dispatch_real_compute!(x.dtype(), a.op, |T| {
        let xs_guard = x.read::<T>()?;
        let xs = slice_of(&xs_guard)?;
        let rs_guard = rois.read::<T>()?;
        let rs = slice_of(&rs_guard)?;
        let mut os_guard = out.write::<T>()?;
        let os = slice_mut_of(&mut os_guard)?;
        let mut map_guard = mapping.write::<i32>()?;
        let map = slice_mut_of(&mut map_guard)?;
        let sc = T::from_f64(scale);
        let half = T::from_f64(0.5);
        for r in 0..k {
            let roi = &rs[r * 5..r * 5 + 5];
            let bi = roi_batch(roi[0], n)?;
            let sw = roi[1] * sc - half;
            let sh = roi[2] * sc - half;
            let rw = (roi[3] * sc - half) - sw;
            let rh = (roi[4] * sc - half) - sh;
            let bh = rh / T::from_f64(ph as f64);
            let bw = rw / T::from_f64(pw as f64);
            // C's int conversion of the ceiling: a negative box makes an empty (negative) grid
            let grid = |ext: T, bins: usize| {
                if ratio > 0 {
                    ratio
                } else {
                    (ext / T::from_f64(bins as f64)).ceil().as_f64() as i64
                }
            };
            let (gh, gw) = (grid(rh, ph), grid(rw, pw));
            let count = T::from_f64((gh * gw) as f64);
            let mut c_in = 0usize;
            for co in 0..c_out {
                for py in 0..ph {
                    for px in 0..pw {
                        let hs = T::from_f64(py as f64) * bh + sh;
                        let ws = T::from_f64(px as f64) * bw + sw;
                        let img = &xs[(bi * c + c_in) * h * w..][..h * w];
                        let mut sum = T::zero();
                        for iy in 0..gh.max(0) {
                            let y = hs + T::from_f64(iy as f64 + 0.5) * bh / T::from_f64(gh as f64);
                            for ix in 0..gw.max(0) {
                                let xx =
                                    ws + T::from_f64(ix as f64 + 0.5) * bw / T::from_f64(gw as f64);
                                sum += bilinear(img, h, w, y, xx);
                            }
                        }
                        let o = ((r * c_out + co) * ph + py) * pw + px;
                        os[o] = sum / count;
                        map[o] = c_in as i32;
                        c_in += 1;
                    }
                }
            }
        }
        Ok::<(), crate::Error>(())
    })?;
    Ok(IValue::Tuple(Tuple::new(vec![
        IValue::Tensor(out),
        IValue::Tensor(mapping),
    ])))
}

/// ps_roi_pool(input, rois, spatial_scale, pooled_height, pooled_width) -> (output,
/// channel_mapping int32): bin (c, py, px) averages input channel `(c * ph + py) * pw + px`
/// over the bin's pixels (rounded box, bins clipped to `[0, size - 1]` as torchvision does).
fn ps_roi_pool(a: &mut Args) -> crate::Result<IValue> {
    let (x, rois, ph, pw, c_out) = ps_inputs(a)?;
    let scale = a.double(2)?;
    let (n, c, h, w) = (x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]);
    let k = rois.shape()[0];
    let out = Tensor::zeros(&[k, c_out, ph, pw], x.dtype())?;
    let mapping = Tensor::zeros(&[k, c_out, ph, pw], DType::Int32)?;
    if k * c_out * ph * pw == 0 {
        return Ok(IValue::Tuple(Tuple::new(vec![
            IValue::Tensor(out),
            IValue::Tensor(mapping),
        ])));
    }
    dispatch_real_compute!(x.dtype(), a.op, |T| {
        let xs_guard = x.read::<T>()?;
        let xs = slice_of(&xs_guard)?;
        let rs_guard = rois.read::<T>()?;
        let rs = slice_of(&rs_guard)?;
        let mut os_guard = out.write::<T>()?;
        let os = slice_mut_of(&mut os_guard)?;
        let mut map_guard = mapping.write::<i32>()?;
        let map = slice_mut_of(&mut map_guard)?;
        let sc = T::from_f64(scale);
        let (hi, wi) = (h as i64, w as i64);
        for r in 0..k {
            let roi = &rs[r * 5..r * 5 + 5];
            let bi = roi_batch(roi[0], n)?;
            let round = |v: T| (v * sc).round().as_f64() as i64;
            let (sw, sh, ew, eh) = (round(roi[1]), round(roi[2]), round(roi[3]), round(roi[4]));
            let rw = (ew - sw).max(1);
            let rh = (eh - sh).max(1);
            let bh = T::from_f64(rh as f64) / T::from_f64(ph as f64);
            let bw = T::from_f64(rw as f64) / T::from_f64(pw as f64);
            let mut c_in = 0usize;
            for co in 0..c_out {
                for py in 0..ph {
                    for px in 0..pw {
                        let edge = |i: usize, bin: T, up: bool| {
                            let v = T::from_f64(i as f64) * bin;
                            (if up { v.ceil() } else { v.floor() }).as_f64() as i64
                        };
                        let hs = (edge(py, bh, false) + sh).clamp(0, (hi - 1).max(0));
                        let he = (edge(py + 1, bh, true) + sh).clamp(0, (hi - 1).max(0));
                        let ws = (edge(px, bw, false) + sw).clamp(0, (wi - 1).max(0));
                        let we = (edge(px + 1, bw, true) + sw).clamp(0, (wi - 1).max(0));
                        let empty = he <= hs || we <= ws;
                        let img = &xs[(bi * c + c_in) * h * w..][..h * w];
                        let mut sum = T::zero();
                        for yy in hs..he {
                            for xx in ws..we {
                                sum += img[yy as usize * w + xx as usize];
                            }
                        }
                        let o = ((r * c_out + co) * ph + py) * pw + px;
                        let area = T::from_f64(((he - hs) * (we - ws)) as f64);
                        os[o] = if empty { T::zero() } else { sum / area };
                        map[o] = c_in as i32;
                        c_in += 1;
                    }
                }
            }
        }
        Ok::<(), crate::Error>(())
    })?;
    Ok(IValue::Tuple(Tuple::new(vec![
        IValue::Tensor(out),
        IValue::Tensor(mapping),
    ])))
}

/// Integer representations (the quantized ops take `int_repr()`): values as i64 and the
/// dtype's range.
fn integer_values(op: &str, t: &Tensor) -> crate::Result<(Vec<i64>, (i64, i64))> {
    let range = match t.dtype() {
        DType::UInt8 => (0, 255),
        DType::Int8 => (-128, 127),
        DType::Int16 => (i16::MIN as i64, i16::MAX as i64),
        DType::Int32 => (i32::MIN as i64, i32::MAX as i64),
        DType::Int64 => (i64::MIN, i64::MAX),
        other => return Err(not_implemented_for(op, other)),
    };
    Ok((t.contiguous()?.to_vec::<i64>()?, range))
}

/// qnms(dets [N, 4], scores [N]) over integer representations (a quantized model's
/// `boxes.int_repr()`): torchvision's quantized nms, areas as the integer products (C's
/// promotion: 32-bit for types up to int32) converted to float, overlaps in float.
fn qnms(a: &mut Args) -> crate::Result<IValue> {
    let (dets, scores) = (a.tensor(0)?, a.tensor(1)?);
    let thr = a.double(2)?;
    check_boxes_scores(a.op, &dets, &scores)?;
    let (b, _) = integer_values(a.op, &dets)?;
    let (s, _) = integer_values(a.op, &scores)?;
    let n = dets.shape()[0];
    let wide = dets.dtype() == DType::Int64;
    let area = |i: usize| -> f32 {
        let (dx, dy) = (b[i * 4 + 2] - b[i * 4], b[i * 4 + 3] - b[i * 4 + 1]);
        if wide {
            dx.wrapping_mul(dy) as f32
        } else {
            (dx as i32).wrapping_mul(dy as i32) as f32
        }
    };
    let areas: Vec<f32> = (0..n).map(area).collect();
    // PyTorch's CPU sort is stable: equal scores keep their index order
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&i, &j| s[j].cmp(&s[i]));
    let mut suppressed = vec![false; n];
    let mut keep = Vec::new();
    for (oi, &i) in order.iter().enumerate() {
        if suppressed[i] {
            continue;
        }
        keep.push(i as i64);
        let c = |j: usize, k: usize| b[j * 4 + k] as f32;
        for &j in &order[oi + 1..] {
            if suppressed[j] {
                continue;
            }
            let xx1 = c(i, 0).max(c(j, 0));
            let yy1 = c(i, 1).max(c(j, 1));
            let xx2 = c(i, 2).min(c(j, 2));
            let yy2 = c(i, 3).min(c(j, 3));
            let inter = (xx2 - xx1).max(0.0) * (yy2 - yy1).max(0.0);
            let ovr = inter / (areas[i] + areas[j] - inter);
            if f64::from(ovr) > thr {
                suppressed[j] = true;
            }
        }
    }
    let len = keep.len();
    Ok(IValue::Tensor(Tensor::from_vec(keep, &[len])?))
}

/// qroi_align(input, rois, input_scale, input_zero_point, rois_scale, rois_zero_point,
/// spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned) over integer
/// representations: rois dequantized in float, samples weighted on the raw integers and
/// dequantized once per bin, the average requantized with the input's parameters. Like
/// torchvision, only one image (batch index 0) is allowed.
fn qroi_align(a: &mut Args) -> crate::Result<IValue> {
    let (x, rois) = (a.tensor(0)?, a.tensor(1)?);
    let (in_scale, in_zp) = (a.double(2)?, a.int(3)?);
    let (rois_scale, rois_zp) = (a.double(4)?, a.int(5)?);
    let spatial = a.double(6)? as f32;
    let (ph, pw) = (pooled(a, 7)?, pooled(a, 8)?);
    let ratio = a.int(9)?;
    let aligned = a.bool(10)?;
    check_roi_pair(a.op, &x, &rois)?;
    check_size(
        a.op,
        "input.size(0) (one image per batch)",
        1,
        x.shape()[0] as i64,
    )?;
    let (c, h, w) = (x.shape()[1], x.shape()[2], x.shape()[3]);
    let k = rois.shape()[0];
    let (xs, range) = integer_values(a.op, &x)?;
    let (rs, _) = integer_values(a.op, &rois)?;
    let xs: Vec<f32> = xs.iter().map(|&v| v as f32).collect();
    let mut out = vec![0i64; k * c * ph * pw];
    let (rscale, scale_f) = (rois_scale as f32, in_scale as f32);
    let inv_scale = 1.0f32 / scale_f;
    let off = if aligned { 0.5f32 } else { 0.0 };
    for r in 0..k {
        let roi = |i: usize| rscale * ((rs[r * 5 + i] - rois_zp) as f32);
        let sw = roi(1) * spatial - off;
        let sh = roi(2) * spatial - off;
        let (mut rw, mut rh) = ((roi(3) * spatial - off) - sw, (roi(4) * spatial - off) - sh);
        if !aligned {
            rw = rw.max(1.0);
            rh = rh.max(1.0);
        }
        let bh = rh / ph as f32;
        let bw = rw / pw as f32;
        let grid = |ext: f32, bins: usize| {
            if ratio > 0 {
                ratio
            } else {
                (ext / bins as f32).ceil() as i64
            }
        };
        let (gh, gw) = (grid(rh, ph), grid(rw, pw));
        let count = (gh * gw).max(1) as f32;
        for ch in 0..c {
            let img = &xs[ch * h * w..][..h * w];
            for py in 0..ph {
                for px in 0..pw {
                    let (mut acc, mut sum_w) = (0f32, 0f32);
                    for iy in 0..gh.max(0) {
                        let y = sh + py as f32 * bh + (iy as f32 + 0.5) * bh / gh as f32;
                        for ix in 0..gw.max(0) {
                            let xx = sw + px as f32 * bw + (ix as f32 + 0.5) * bw / gw as f32;
                            if let Some((pos, wts)) = bilinear_taps(h, w, y, xx) {
                                acc += wts[0] * img[pos[0]]
                                    + wts[1] * img[pos[1]]
                                    + wts[2] * img[pos[2]]
                                    + wts[3] * img[pos[3]];
                                sum_w += wts[0] + wts[1] + wts[2] + wts[3];
                            }
                        }
                    }
                    let v = scale_f * (acc - in_zp as f32 * sum_w) / count;
                    let q = (in_zp as f64 + f64::from((v * inv_scale).round_ties_even()))
                        .clamp(range.0 as f64, range.1 as f64) as i64;
                    out[((r * c + ch) * ph + py) * pw + px] = q;
                }
            }
        }
    }
    let t = Tensor::from_vec(out, &[k, c, ph, pw])?;
    Ok(IValue::Tensor(t.to_dtype(x.dtype())?))
}

/// The four taps (row-major positions) and weights of a bilinear sample at (y, x) as
/// torchvision's roi_align precomputes them; None outside the map (weights all zero).
fn bilinear_taps(h: usize, w: usize, mut y: f32, mut x: f32) -> Option<([usize; 4], [f32; 4])> {
    if !(y >= -1.0 && y <= h as f32 && x >= -1.0 && x <= w as f32) || h == 0 || w == 0 {
        return None;
    }
    y = y.max(0.0);
    x = x.max(0.0);
    let (mut yl, mut xl) = (y as usize, x as usize);
    let (yh, xh);
    if yl >= h - 1 {
        yl = h - 1;
        yh = yl;
        y = yl as f32;
    } else {
        yh = yl + 1;
    }
    if xl >= w - 1 {
        xl = w - 1;
        xh = xl;
        x = xl as f32;
    } else {
        xh = xl + 1;
    }
    let (ly, lx) = (y - yl as f32, x - xl as f32);
    let (hy, hx) = (1.0 - ly, 1.0 - lx);
    Some((
        [yl * w + xl, yl * w + xh, yh * w + xl, yh * w + xh],
        [hy * hx, hy * lx, ly * hx, ly * lx],
    ))
}

pub(crate) fn register(r: &mut Registry) {
    r.add("torchvision::ps_roi_align", ps_roi_align);
    r.add("torchvision::ps_roi_pool", ps_roi_pool);
    r.add("torchvision::qnms", qnms);
    r.add("torchvision::qroi_align", qroi_align);
    r.add("torchvision::nms", nms);
    r.add("torchvision::roi_align", roi_align);
    r.add("torchvision::roi_pool", roi_pool);
}
