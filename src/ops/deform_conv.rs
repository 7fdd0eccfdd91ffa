//! Kernel: `torchvision::deform_conv2d` (deformable convolution v1, and v2 with a modulation
//! mask), as torchvision's CPU kernel computes it: every kernel tap samples its input channel
//! bilinearly at the output position plus the tap's learned offset (zero outside the map),
//! times the mask value; the sampled columns are multiplied with the grouped weights and the
//! bias is added. Sampling follows torchvision step for step in the input's precision; the
//! products are summed by tsrun's GEMM (PyTorch's BLAS sums in another order: float results
//! agree to rounding).

use super::linalg::{dispatch_real_compute, matmul, reshape, slice_mut_of, slice_of, Real};
use super::{Args, Registry};
use crate::ops::kernels::{
    check_rank, check_size, invalid_argument, shape_mismatch, size_mismatch, wrong_dtype,
};
#[allow(unused_imports)]
use crate::tensor::Element as _;
use crate::tensor::RankRequirement;
use crate::tensor::{checked_numel, DType, Tensor};
use crate::values::IValue;
#[allow(unused_imports)]
use num_traits::{Float as _, One as _, Zero as _};

/// The convolution's geometry, validated as torchvision's kernel checks it.
struct Geometry {
    batch: usize,
    channels: usize,
    in_h: usize,
    in_w: usize,
    out_channels: usize,
    kh: usize,
    kw: usize,
    out_h: usize,
    out_w: usize,
    stride: (i64, i64),
    pad: (i64, i64),
    dilation: (i64, i64),
    groups: usize,
    offset_groups: usize,
}

fn positive(op: &str, what: &str, v: i64) -> crate::Result<usize> {
    usize::try_from(v)
        .ok()
        .filter(|&v| v > 0)
        .ok_or_else(|| invalid_argument(op, what, "must be positive", v))
}

fn geometry(
    a: &Args,
    x: &Tensor,
    w: &Tensor,
    offset: &Tensor,
    mask: &Tensor,
    use_mask: bool,
) -> crate::Result<Geometry> {
    let op = a.op;
    for (name, t) in [("input", x), ("weight", w), ("offset", offset)] {
        check_rank(op, name, RankRequirement::Exactly(4), t.shape())?;
    }
    if use_mask {
        check_rank(op, "mask", RankRequirement::Exactly(4), mask.shape())?;
    }
    let stride = (a.int(5)?, a.int(6)?);
    let pad = (a.int(7)?, a.int(8)?);
    let dilation = (a.int(9)?, a.int(10)?);
    positive(op, "stride", stride.0.min(stride.1))?;
    positive(op, "dilation", dilation.0.min(dilation.1))?;
    if pad.0 < 0 || pad.1 < 0 {
        return Err(invalid_argument(
            op,
            "(pad_h, pad_w)",
            "must not be negative",
            format!("{pad:?}"),
        ));
    }
    let groups = positive(op, "groups", a.int(11)?)?;
    let offset_groups = positive(op, "offset_groups", a.int(12)?)?;
    let (batch, channels, in_h, in_w) = (x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]);
    let (out_channels, kh, kw) = (w.shape()[0], w.shape()[2], w.shape()[3]);
    if kh == 0 || kw == 0 {
        return Err(invalid_argument(
            op,
            "(weight_h, weight_w)",
            "must be positive",
            format!("({kh}, {kw})"),
        ));
    }
    if w.shape()[1] * groups != channels {
        return Err(size_mismatch(
            op,
            format!("input.size(1) (weight.size(1) x {groups} groups)"),
            (w.shape()[1] * groups) as i64,
            channels as i64,
        ));
    }
    if out_channels % groups != 0 {
        return Err(invalid_argument(
            op,
            "weight.size(0)",
            format!("must be divisible by groups ({groups})"),
            out_channels,
        ));
    }
    if channels % offset_groups != 0 {
        return Err(invalid_argument(
            op,
            "offset_groups",
            format!("must divide the input channels ({channels})"),
            offset_groups,
        ));
    }
    let out_size = |size: usize, k: usize, s: i64, p: i64, d: i64| -> i64 {
        let ker = d * (k as i64 - 1) + 1;
        (size as i64 + 2 * p - ker).div_euclid(s) + 1
    };
    let oh = out_size(in_h, kh, stride.0, pad.0, dilation.0);
    let ow = out_size(in_w, kw, stride.1, pad.1, dilation.1);
    if oh <= 0 || ow <= 0 {
        return Err(invalid_argument(
            op,
            "the output size (out_h, out_w)",
            "must be positive",
            format!("({oh}, {ow})"),
        ));
    }
    let (out_h, out_w) = (oh as usize, ow as usize);
    let taps = kh * kw;
    let expected = [batch, offset_groups * 2 * taps, out_h, out_w];
    if offset.shape() != expected {
        return Err(shape_mismatch(op, "offset", &expected, offset.shape()));
    }
    if mask.dim() == 0 || mask.shape()[0] != batch {
        return Err(size_mismatch(
            op,
            "mask.size(0) (the batch size)",
            batch as i64,
            mask.shape().first().map_or(-1, |&b| b as i64),
        ));
    }
    if use_mask {
        let expected = [batch, offset_groups * taps, out_h, out_w];
        if mask.shape() != expected {
            return Err(shape_mismatch(op, "mask", &expected, mask.shape()));
        }
    }
    Ok(Geometry {
        batch,
        channels,
        in_h,
        in_w,
        out_channels,
        kh,
        kw,
        out_h,
        out_w,
        stride,
        pad,
        dilation,
        groups,
        offset_groups,
    })
}

/// torchvision's deformable bilinear sample: zero outside `(-1, size)`, missing corners zero.
fn sample<T: Real>(img: &[T], h: usize, w: usize, y: T, x: T) -> T {
    let (hf, wf) = (T::from_f64(h as f64), T::from_f64(w as f64));
    if !(y > -T::one() && y < hf && x > -T::one() && x < wf) {
        return T::zero();
    }
    let (yl, xl) = (y.floor().as_f64() as i64, x.floor().as_f64() as i64);
    let (yh, xh) = (yl + 1, xl + 1);
    let ly = y - T::from_f64(yl as f64);
    let lx = x - T::from_f64(xl as f64);
    let (hy, hx) = (T::one() - ly, T::one() - lx);
    let at = |r: i64, c: i64| {
        if r >= 0 && c >= 0 && r < h as i64 && c < w as i64 {
            img[r as usize * w + c as usize]
        } else {
            T::zero()
        }
    };
    hy * hx * at(yl, xl) + hy * lx * at(yl, xh) + ly * hx * at(yh, xl) + ly * lx * at(yh, xh)
}

/// deform_conv2d(input, weight, offset, mask, bias, stride_h, stride_w, pad_h, pad_w,
/// dilation_h, dilation_w, groups, offset_groups, use_mask)
fn deform_conv2d(a: &mut Args) -> crate::Result<IValue> {
    let (x, w, offset, mask, bias) = (
        a.tensor(0)?,
        a.tensor(1)?,
        a.tensor(2)?,
        a.tensor(3)?,
        a.tensor(4)?,
    );
    let use_mask = a.bool(13)?;
    let g = geometry(a, &x, &w, &offset, &mask, use_mask)?;
    let dtype = x.dtype();
    if !matches!(dtype, DType::Float32 | DType::Float64) {
        return Err(wrong_dtype(a.op, "input", "float32 or float64", dtype));
    }
    for (name, t) in [("weight", &w), ("offset", &offset), ("bias", &bias)] {
        if t.dtype() != dtype {
            return Err(wrong_dtype(
                a.op,
                name,
                format!("{dtype} (the input's dtype)"),
                t.dtype(),
            ));
        }
    }
    if use_mask && mask.dtype() != dtype {
        return Err(wrong_dtype(
            a.op,
            "mask",
            format!("{dtype} (the input's dtype)"),
            mask.dtype(),
        ));
    }
    check_size(
        a.op,
        "the number of bias elements (output channels)",
        g.out_channels as i64,
        bias.numel() as i64,
    )?;
    let taps = g.kh * g.kw;
    let plane = g.out_h * g.out_w;
    let rows = g.channels * taps;
    let cols_len = checked_numel(&[rows, plane])?;
    let out = Tensor::zeros(&[g.batch, g.out_channels, g.out_h, g.out_w], dtype)?;
    if g.batch == 0 || g.out_channels == 0 {
        return Ok(IValue::Tensor(out));
    }
    let (x, offset, bias) = (x.contiguous()?, offset.contiguous()?, bias.contiguous()?);
    let mask = if use_mask {
        Some(mask.contiguous()?)
    } else {
        None
    };
    // weight as [groups, out_channels / groups, channels / groups * taps]
    let (ocg, kdim) = (g.out_channels / g.groups, rows / g.groups);
    let wg = reshape(&w.contiguous()?, &[g.groups, ocg, kdim])?;
    let cpg = g.channels / g.offset_groups;
    dispatch_real_compute!(dtype, a.op, |T| {
        let xs_guard = x.read::<T>()?;
        let xs = slice_of(&xs_guard)?;
        let off_guard = offset.read::<T>()?;
        let offs = slice_of(&off_guard)?;
        let mask_guard = mask.as_ref().map(|m| m.read::<T>()).transpose()?;
        let masks = mask_guard.as_ref().map(slice_of).transpose()?;
        let bias_v = bias.to_vec::<T>()?;
        let mut out_guard = out.write::<T>()?;
        let os = slice_mut_of(&mut out_guard)?;
        let image = g.channels * g.in_h * g.in_w;
        for b in 0..g.batch {
            let mut cols = vec![T::zero(); cols_len];
            for ci in 0..g.channels {
                let grp = ci / cpg;
                let img = &xs[b * image + ci * g.in_h * g.in_w..][..g.in_h * g.in_w];
                let off =
                    &offs[(b * g.offset_groups + grp) * 2 * taps * plane..][..2 * taps * plane];
                let msk =
                    masks.map(|m| &m[(b * g.offset_groups + grp) * taps * plane..][..taps * plane]);
                for i in 0..g.kh {
                    for j in 0..g.kw {
                        let t = i * g.kw + j;
                        let row = &mut cols[(ci * taps + t) * plane..][..plane];
                        for oy in 0..g.out_h {
                            for ox in 0..g.out_w {
                                let p = oy * g.out_w + ox;
                                let base_y =
                                    oy as i64 * g.stride.0 - g.pad.0 + i as i64 * g.dilation.0;
                                let base_x =
                                    ox as i64 * g.stride.1 - g.pad.1 + j as i64 * g.dilation.1;
                                let y = T::from_f64(base_y as f64) + off[2 * t * plane + p];
                                let xx = T::from_f64(base_x as f64) + off[(2 * t + 1) * plane + p];
                                let m = msk.map_or(T::one(), |m| m[t * plane + p]);
                                row[p] = m * sample(img, g.in_h, g.in_w, y, xx);
                            }
                        }
                    }
                }
            }
            let cols_t = Tensor::from_vec(cols, &[g.groups, kdim, plane])?;
            let prod = matmul(a.op, &wg, &cols_t)?.contiguous()?;
            let pg = prod.read::<T>()?;
            let ps = slice_of(&pg)?;
            let dst = &mut os[b * g.out_channels * plane..][..g.out_channels * plane];
            for (oc, (d, s)) in dst.chunks_mut(plane).zip(ps.chunks(plane)).enumerate() {
                for (dv, &sv) in d.iter_mut().zip(s) {
                    *dv = sv + bias_v[oc];
                }
            }
        }
        Ok::<(), crate::Error>(())
    })?;
    Ok(IValue::Tensor(out))
}

pub(crate) fn register(r: &mut Registry) {
    r.add("torchvision::deform_conv2d", deform_conv2d);
}
