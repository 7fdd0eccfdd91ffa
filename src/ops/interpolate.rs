//! Kernels: resampling (`upsample_*` nearest / linear / bilinear / bicubic / trilinear, the
//! `.vec` overloads `F.interpolate` emits) and pixel/channel shuffles.
//!
//! Interpolation is separable: one 1-d pass per spatial dim, each output index reading a few
//! weighted taps chosen exactly as PyTorch's `area_pixel_compute_source_index` does.

use super::linalg::{
    compute_dtype, contiguous_as, dispatch_real_compute, permute, reshape, slice_mut_of, Real,
};
use super::{Args, Registry};
use crate::ops::kernels::{
    check_rank, check_size, invalid_argument, rank_mismatch, size_mismatch, unsupported_feature,
};
#[allow(unused_imports)]
use crate::tensor::Element as _;
use crate::tensor::RankRequirement;
use crate::tensor::Tensor;
use crate::values::IValue;
#[allow(unused_imports)]
use num_traits::{Float as _, One as _, Zero as _};
use rayon::prelude::*;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Mode {
    Nearest,
    NearestExact,
    Linear,
    Cubic,
    /// antialias=True: the filter widened by the downscale factor (bilinear, bicubic, lanczos)
    AntialiasLinear,
    AntialiasCubic,
    AntialiasLanczos,
}

/// One output index's taps: (input index, weight).
type Taps = Vec<(usize, f64)>;

/// PyTorch's `area_pixel_compute_scale`, in the compute precision `T`.
fn area_scale<T: Real>(input: usize, output: usize, align_corners: bool, scale: Option<f64>) -> T {
    if align_corners {
        if output > 1 {
            T::from_f64((input as f64 - 1.0) / (output as f64 - 1.0))
        } else {
            T::zero()
        }
    } else {
        match scale {
            Some(s) if s > 0.0 => T::one() / T::from_f64(s),
            _ => T::from_f64(input as f64) / T::from_f64(output as f64),
        }
    }
}

fn cubic_weights(t: f64) -> [f64; 4] {
    const A: f64 = -0.75;
    let c1 = |x: f64| ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0;
    let c2 = |x: f64| ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A;
    [c2(t + 1.0), c1(t), c1(1.0 - t), c2(2.0 - t)]
}

/// The antialiasing filters of PyTorch's separable CPU kernel (`aa_filter`): triangle,
/// Keys cubic with a = -0.5, lanczos-3.
fn aa_filter(mode: Mode, x: f64) -> f64 {
    let x = x.abs();
    match mode {
        Mode::AntialiasCubic => {
            const A: f64 = -0.5;
            if x < 1.0 {
                ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
            } else if x < 2.0 {
                ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A
            } else {
                0.0
            }
        }
        Mode::AntialiasLanczos => {
            let sinc = |v: f64| {
                if v == 0.0 {
                    1.0
                } else {
                    let pv = std::f64::consts::PI * v;
                    pv.sin() / pv
                }
            };
            if x < 3.0 {
                sinc(x) * sinc(x / 3.0)
            } else {
                0.0
            }
        }
        _ => (1.0 - x).max(0.0),
    }
}

/// Antialiased taps of output index `o` (PyTorch's `_compute_weights_aa`): the filter is
/// stretched by the scale when downsampling, and the weights normalized to sum to 1.
fn aa_taps(mode: Mode, input: usize, scale: f64, o: usize) -> Taps {
    let half_width = match mode {
        Mode::AntialiasCubic => 2.0,
        Mode::AntialiasLanczos => 3.0,
        _ => 1.0,
    };
    let support = if scale >= 1.0 {
        half_width * scale
    } else {
        half_width
    };
    let center = scale * (o as f64 + 0.5);
    let invscale = if scale >= 1.0 { 1.0 / scale } else { 1.0 };
    let xmin = ((center - support + 0.5) as i64).max(0) as usize;
    let xmax = ((center + support + 0.5) as i64).clamp(0, input as i64) as usize;
    let mut taps: Taps = (xmin..xmax.max(xmin))
        .map(|j| (j, aa_filter(mode, (j as f64 - center + 0.5) * invscale)))
        .collect();
    let total: f64 = taps.iter().map(|t| t.1).sum();
    if total != 0.0 {
        taps.iter_mut().for_each(|t| t.1 /= total);
    }
    taps
}

fn taps_for<T: Real>(
    mode: Mode,
    input: usize,
    output: usize,
    align_corners: bool,
    scale: Option<f64>,
) -> Vec<Taps> {
    let last = input.saturating_sub(1);
    (0..output)
        .map(|o| match mode {
            Mode::AntialiasLinear | Mode::AntialiasCubic | Mode::AntialiasLanczos => {
                let sc: T = area_scale::<T>(input, output, align_corners, scale);
                aa_taps(mode, input, sc.as_f64(), o)
            }
            Mode::Nearest | Mode::NearestExact => {
                let i = if output == input {
                    o
                } else {
                    // PyTorch computes the nearest source in float (`nearest_idx`).
                    let s: f32 = match scale {
                        Some(s) if s > 0.0 => (1.0 / s) as f32,
                        _ => input as f32 / output as f32,
                    };
                    let src = if mode == Mode::Nearest {
                        (o as f32 * s).floor()
                    } else {
                        ((o as f32 + 0.5) * s).floor()
                    };
                    (src.max(0.0) as usize).min(last)
                };
                vec![(i, 1.0)]
            }
            Mode::Linear => {
                let sc: T = area_scale::<T>(input, output, align_corners, scale);
                let src = if align_corners {
                    sc * T::from_f64(o as f64)
                } else {
                    let v = sc * (T::from_f64(o as f64) + T::from_f64(0.5)) - T::from_f64(0.5);
                    if v < T::zero() {
                        T::zero()
                    } else {
                        v
                    }
                };
                let i0 = (src.as_f64().floor() as usize).min(last);
                let i1 = if i0 < last { i0 + 1 } else { i0 };
                let l1 = (src - T::from_f64(i0 as f64)).as_f64();
                vec![(i0, 1.0 - l1), (i1, l1)]
            }
            Mode::Cubic => {
                let sc: T = area_scale::<T>(input, output, align_corners, scale);
                let src = if align_corners {
                    sc * T::from_f64(o as f64)
                } else {
                    sc * (T::from_f64(o as f64) + T::from_f64(0.5)) - T::from_f64(0.5)
                };
                let fl = src.as_f64().floor();
                let t = (src - T::from_f64(fl)).as_f64();
                let w = cubic_weights(t);
                (0..4)
                    .map(|k| {
                        let idx = (fl as i64 - 1 + k as i64).clamp(0, last as i64) as usize;
                        (idx, w[k])
                    })
                    .collect()
            }
        })
        .collect()
}

/// Resample dim `d` of a contiguous `[outer, in, inner]` buffer to `[outer, out, inner]`.
fn resample_dim<T: Real>(
    src: &[T],
    outer: usize,
    input: usize,
    inner: usize,
    taps: &[Taps],
) -> Vec<T> {
    let output = taps.len();
    let mut dst = vec![T::zero(); outer * output * inner];
    if dst.is_empty() || input == 0 {
        return dst;
    }
    dst.par_chunks_mut(output * inner)
        .zip(src.par_chunks(input * inner))
        .for_each(|(d, s)| {
            for (o, tp) in taps.iter().enumerate() {
                let row = &mut d[o * inner..][..inner];
                for (k, &(i, w)) in tp.iter().enumerate() {
                    let srow = &s[i * inner..][..inner];
                    let w = T::from_f64(w);
                    if k == 0 {
                        for (r, &v) in row.iter_mut().zip(srow) {
                            *r = v * w;
                        }
                    } else {
                        for (r, &v) in row.iter_mut().zip(srow) {
                            *r += v * w;
                        }
                    }
                }
            }
        });
    dst
}

fn interpolate(
    op: &str,
    x: &Tensor,
    mode: Mode,
    out_sp: &[usize],
    align_corners: bool,
    scales: &[Option<f64>],
) -> crate::Result<Tensor> {
    let nsp = out_sp.len();
    check_rank(op, "input", RankRequirement::Exactly(nsp + 2), x.shape())?;
    if x.is_quantized() {
        return interpolate_quantized(op, x, mode, out_sp, align_corners, scales);
    }
    if x.shape()[2..].contains(&0) {
        return Err(invalid_argument(
            op,
            "the input's spatial sizes",
            "must be greater than 0",
            format!("{:?}", &x.shape()[2..]),
        ));
    }
    if out_sp.contains(&0) {
        return Err(invalid_argument(
            op,
            "the output sizes",
            "must be greater than 0",
            format!("{out_sp:?}"),
        ));
    }
    let dtype = x.dtype();
    let cd = compute_dtype(op, dtype)?;
    let xc = contiguous_as(x, cd)?;
    let mut shape = x.shape().to_vec();
    let out = dispatch_real_compute!(cd, op, |T| {
        let mut buf: Vec<T> = xc.to_vec::<T>()?;
        for d in 0..nsp {
            let axis = 2 + d;
            let outer: usize = shape[..axis].iter().product();
            let inner: usize = shape[axis + 1..].iter().product();
            let taps = taps_for::<T>(mode, shape[axis], out_sp[d], align_corners, scales[d]);
            buf = resample_dim(&buf, outer, shape[axis], inner, &taps);
            shape[axis] = out_sp[d];
        }
        let t = Tensor::zeros(&shape, cd)?;
        slice_mut_of(&mut t.write::<T>()?)?.copy_from_slice(&buf);
        Ok::<Tensor, crate::Error>(t)
    })?;
    out.to_dtype(dtype)
}

/// ATen's quantized upsampling: the nearest modes copy integers (the float kernel run on the
/// integer values, exact in f64) in 2-d and 3-d, bilinear 2-d has its own integer-domain
/// arithmetic; PyTorch has no quantized kernel for the other modes and ranks.
fn interpolate_quantized(
    op: &str,
    x: &Tensor,
    mode: Mode,
    out_sp: &[usize],
    align_corners: bool,
    scales: &[Option<f64>],
) -> crate::Result<Tensor> {
    match mode {
        Mode::Nearest | Mode::NearestExact if out_sp.len() >= 2 => {
            let quantizer = x.quantizer().map(|q| (**q).clone()).ok_or_else(|| {
                crate::ops::kernels::wrong_dtype(op, "input", "quantized", x.dtype())
            })?;
            let ints = x.int_repr_view()?;
            let y = interpolate(
                op,
                &ints.to_dtype(crate::tensor::DType::Float64)?,
                mode,
                out_sp,
                align_corners,
                scales,
            )?;
            Ok(Tensor::quantized_from_ints(
                &y.to_dtype(ints.dtype())?,
                quantizer,
            )?)
        }
        Mode::Linear if out_sp.len() == 2 => {
            super::quantized::upsample::bilinear2d(op, x, out_sp, align_corners, scales)
        }
        _ => Err(crate::ops::kernels::not_implemented_for(op, x.dtype())),
    }
}

/// The modes of the `upsample_*` kernels as const parameters (one kernel per overload).
const NEAREST: u8 = 0;
const NEAREST_EXACT: u8 = 1;
const LINEAR: u8 = 2;
const CUBIC: u8 = 3;
const AA_LINEAR: u8 = 4;
const AA_CUBIC: u8 = 5;
const AA_LANCZOS: u8 = 6;

fn mode_of(mode: u8) -> Mode {
    match mode {
        NEAREST => Mode::Nearest,
        NEAREST_EXACT => Mode::NearestExact,
        CUBIC => Mode::Cubic,
        AA_LINEAR => Mode::AntialiasLinear,
        AA_CUBIC => Mode::AntialiasCubic,
        AA_LANCZOS => Mode::AntialiasLanczos,
        _ => Mode::Linear,
    }
}

/// Output sizes and per-dim scales of a `.vec` overload (output_size? , scale_factors?).
fn vec_sizes(
    op: &str,
    x: &Tensor,
    nsp: usize,
    size: Option<Vec<i64>>,
    factors: Option<Vec<f64>>,
) -> crate::Result<(Vec<usize>, Vec<Option<f64>>)> {
    check_rank(op, "input", RankRequirement::Exactly(nsp + 2), x.shape())?;
    match (size, factors) {
        (Some(s), None) => {
            output_size_check(op, "output_size", &s, nsp)?;
            Ok((s.iter().map(|&v| v as usize).collect(), vec![None; nsp]))
        }
        (None, Some(f)) => {
            check_size(
                op,
                "the length of scale_factors",
                nsp as i64,
                f.len() as i64,
            )?;
            let sizes = (0..nsp)
                .map(|d| (x.shape()[2 + d] as f64 * f[d]).floor().max(0.0) as usize)
                .collect();
            Ok((sizes, f.into_iter().map(Some).collect()))
        }
        (s, f) => Err(invalid_argument(
            op,
            "(output_size, scale_factors)",
            "must have exactly one given",
            format!("({s:?}, {f:?})"),
        )),
    }
}

/// `Ok` when `size` (argument `name`: ints, or the legacy builtin's floats) holds `nsp`
/// non-negative output sizes.
fn output_size_check<T: PartialOrd + Default + std::fmt::Debug>(
    op: &str,
    name: &str,
    size: &[T],
    nsp: usize,
) -> crate::Result<()> {
    if size.len() != nsp {
        return Err(size_mismatch(
            op,
            format!("the length of {name}"),
            nsp as i64,
            size.len() as i64,
        ));
    }
    if size.iter().any(|v| *v < T::default()) {
        return Err(invalid_argument(
            op,
            name,
            "must be non-negative",
            format!("{size:?}"),
        ));
    }
    Ok(())
}

/// `upsample_<mode><n>d(self, output_size, [align_corners,] scales...)`, and its `.vec`
/// overload when `VEC`.
fn upsample<const MODE: u8, const NSP: usize, const VEC: bool>(
    a: &mut Args,
) -> crate::Result<IValue> {
    upsample_as(a, mode_of(MODE), NSP, VEC)
}

fn upsample_as(a: &mut Args, mode: Mode, nsp: usize, vec: bool) -> crate::Result<IValue> {
    let x = a.tensor(0)?;
    let has_align = !matches!(mode, Mode::Nearest | Mode::NearestExact);
    // The `.vec` overload (input, output_size?, [align_corners,] scale_factors?) is told apart
    // by its arity and its last argument (a list or None), in case the overload name is absent.
    let vec_len = if has_align { 4 } else { 3 };
    let is_vec = vec
        || (a.len() == vec_len && matches!(a.get(vec_len - 1)?, IValue::List(_) | IValue::None));
    if is_vec {
        let size = a.opt_int_list(1)?;
        let (align, fi) = if has_align {
            (a.bool(2)?, 3)
        } else {
            (false, 2)
        };
        let factors = a.opt_double_list(fi)?;
        let (sizes, scales) = vec_sizes(a.op, &x, nsp, size, factors)?;
        return Ok(IValue::Tensor(interpolate(
            a.op, &x, mode, &sizes, align, &scales,
        )?));
    }
    let size = a.int_list(1)?;
    output_size_check(a.op, "output_size", &size, nsp)?;
    let (align, first) = if has_align {
        (a.bool(2)?, 3)
    } else {
        (false, 2)
    };
    let scales = (0..nsp)
        .map(|d| a.opt_double(first + d))
        .collect::<crate::Result<Vec<_>>>()?;
    let sizes: Vec<usize> = size.iter().map(|&v| v as usize).collect();
    Ok(IValue::Tensor(interpolate(
        a.op, &x, mode, &sizes, align, &scales,
    )?))
}

/// A legacy size or scale argument (`int?`, `int[]?`, `float?`, `float[]?`): one value per
/// spatial dim (a single number repeated), or None.
fn per_dim(a: &Args, i: usize, nsp: usize) -> crate::Result<Option<Vec<f64>>> {
    Ok(match a.get(i)? {
        IValue::None => None,
        IValue::Int(v) => Some(vec![*v as f64; nsp]),
        IValue::Double(v) => Some(vec![*v; nsp]),
        _ => Some(a.double_list(i)?),
    })
}

/// TorchScript's builtin `interpolate` (`aten::__interpolate` and the legacy `__upsample*`
/// builtins, torch/csrc/jit/runtime/register_prim_ops_fulljit.cpp): the `upsample_*` kernel of
/// `mode` for the input's dimensionality, the output size given or `floor(in * scale)`; the
/// kernel gets no scale (it recomputes it from the sizes, as `recompute_scale_factor=True`).
fn legacy_interpolate(a: &Args, mode: &str, align_corners: Option<bool>) -> crate::Result<IValue> {
    let x = a.tensor(0)?;
    let op = a.op;
    let nsp = x.dim().saturating_sub(2);
    if !(1..=3).contains(&nsp) {
        return Err(rank_mismatch(
            op,
            "input",
            RankRequirement::OneOf(vec![3, 4, 5]),
            x.shape(),
        ));
    }
    let m = match (mode, nsp) {
        ("nearest", _) => Mode::Nearest,
        ("linear", 1) | ("bilinear", 2) | ("trilinear", 3) => Mode::Linear,
        ("bicubic", 2) => Mode::Cubic,
        ("area", _) | ("nearest-exact", _) => {
            return Err(unsupported_feature(
                op,
                format!("mode '{mode}' of the legacy interpolate builtin"),
            ))
        }
        _ => {
            return Err(invalid_argument(
                op,
                "mode",
                format!(
                    "must be nearest, or the linear mode of a {}-D input (linear | bilinear | \
                     bicubic | trilinear)",
                    x.dim()
                ),
                format!("'{mode}'"),
            ))
        }
    };
    if m == Mode::Nearest && align_corners.is_some() {
        return Err(invalid_argument(
            op,
            "align_corners",
            "can only be set with the interpolating modes: linear | bilinear | bicubic | trilinear",
            format!("{align_corners:?}"),
        ));
    }
    let size = per_dim(a, 1, nsp)?;
    let factors = per_dim(a, 2, nsp)?;
    // a size, when given, wins over a scale factor (which then reaches no kernel)
    let (sizes, scales) = match (size, factors) {
        (Some(s), _) => {
            output_size_check(op, "size", &s, nsp)?;
            (s.iter().map(|&v| v as usize).collect(), vec![None; nsp])
        }
        (None, Some(f)) => {
            check_size(
                op,
                "the length of scale_factor (the input's spatial dimensions)",
                nsp as i64,
                f.len() as i64,
            )?;
            let sizes: Vec<usize> = (0..nsp)
                .map(|d| (x.shape()[2 + d] as f64 * f[d]).floor().max(0.0) as usize)
                .collect();
            (sizes, vec![None; nsp])
        }
        (None, None) => {
            return Err(invalid_argument(
                op,
                "(size, scale_factor)",
                "must have one defined",
                "(None, None)",
            ))
        }
    };
    Ok(IValue::Tensor(interpolate(
        op,
        &x,
        m,
        &sizes,
        align_corners.unwrap_or(false),
        &scales,
    )?))
}

/// `__interpolate(input, size, scale_factor, mode, align_corners, recompute_scale_factor,
/// antialias)` in its four size/scale spellings (`recompute_scale_factor` changes nothing: the
/// builtin always recomputes).
fn dunder_interpolate(a: &mut Args) -> crate::Result<IValue> {
    if a.bool(6)? {
        return Err(unsupported_feature(a.op, "antialias=True"));
    }
    let mode = a.str(3)?;
    legacy_interpolate(a, &mode, a.opt_bool(4)?)
}

/// `__upsample(input, size, scale_factor, mode, align_corners)`.
fn dunder_upsample(a: &mut Args) -> crate::Result<IValue> {
    let mode = a.str(3)?;
    legacy_interpolate(a, &mode, a.opt_bool(4)?)
}

/// `__upsample_nearest(input, size, scale_factor)`.
fn dunder_upsample_nearest(a: &mut Args) -> crate::Result<IValue> {
    legacy_interpolate(a, "nearest", None)
}

/// `__upsample_bilinear(input, size, scale_factor)`: bilinear with corners aligned, as the
/// deprecated `F.upsample_bilinear`.
fn dunder_upsample_bilinear(a: &mut Args) -> crate::Result<IValue> {
    legacy_interpolate(a, "bilinear", Some(true))
}

fn shuffle_factor(a: &Args, i: usize) -> crate::Result<usize> {
    let r = a.int(i)?;
    usize::try_from(r)
        .ok()
        .filter(|&r| r > 0)
        .ok_or_else(|| invalid_argument(a.op, "the factor", "must be positive", r))
}

fn pixel_shuffle(a: &mut Args) -> crate::Result<IValue> {
    let x = a.tensor(0)?;
    let r = shuffle_factor(a, 1)?;
    let n = x.dim();
    check_rank(a.op, "input", RankRequirement::AtLeast(3), x.shape())?;
    if x.shape()[n - 3] % (r * r) != 0 {
        return Err(invalid_argument(
            a.op,
            "the input's channels",
            format!("must be divisible by upscale_factor^2 ({})", r * r),
            x.shape()[n - 3],
        ));
    }
    let lead = &x.shape()[..n - 3];
    let (c, h, w) = (
        x.shape()[n - 3] / (r * r),
        x.shape()[n - 2],
        x.shape()[n - 1],
    );
    let v = reshape(&x, &[lead, &[c, r, r, h, w]].concat())?;
    let b = lead.len();
    let mut perm: Vec<usize> = (0..b).collect();
    perm.extend([b, b + 3, b + 1, b + 4, b + 2]);
    let p = permute(&v, &perm)?;
    Ok(IValue::Tensor(reshape(
        &p,
        &[lead, &[c, h * r, w * r]].concat(),
    )?))
}

fn pixel_unshuffle(a: &mut Args) -> crate::Result<IValue> {
    let x = a.tensor(0)?;
    let r = shuffle_factor(a, 1)?;
    let n = x.dim();
    check_rank(a.op, "input", RankRequirement::AtLeast(3), x.shape())?;
    if x.shape()[n - 2] % r != 0 || x.shape()[n - 1] % r != 0 {
        return Err(invalid_argument(
            a.op,
            "the input's height and width",
            format!("must be divisible by downscale_factor ({r})"),
            format!("{:?}", &x.shape()[n - 2..]),
        ));
    }
    let lead = &x.shape()[..n - 3];
    let (c, h, w) = (x.shape()[n - 3], x.shape()[n - 2] / r, x.shape()[n - 1] / r);
    let v = reshape(&x, &[lead, &[c, h, r, w, r]].concat())?;
    let b = lead.len();
    let mut perm: Vec<usize> = (0..b).collect();
    perm.extend([b, b + 2, b + 4, b + 1, b + 3]);
    let p = permute(&v, &perm)?;
    Ok(IValue::Tensor(reshape(
        &p,
        &[lead, &[c * r * r, h, w]].concat(),
    )?))
}

fn channel_shuffle(a: &mut Args) -> crate::Result<IValue> {
    let x = a.tensor(0)?;
    let g = shuffle_factor(a, 1)?;
    check_rank(a.op, "input", RankRequirement::AtLeast(3), x.shape())?;
    if x.shape()[1] % g != 0 {
        return Err(invalid_argument(
            a.op,
            "the input's channels",
            format!("must be divisible by groups ({g})"),
            x.shape()[1],
        ));
    }
    let mut shape = vec![x.shape()[0], g, x.shape()[1] / g];
    shape.extend_from_slice(&x.shape()[2..]);
    let v = reshape(&x, &shape)?;
    let mut perm: Vec<usize> = (0..shape.len()).collect();
    perm.swap(1, 2);
    Ok(IValue::Tensor(reshape(&permute(&v, &perm)?, x.shape())?))
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::upsample_nearest1d", upsample::<NEAREST, 1, false>);
    r.add("aten::upsample_nearest1d.vec", upsample::<NEAREST, 1, true>);
    r.add("aten::upsample_nearest2d", upsample::<NEAREST, 2, false>);
    r.add("aten::upsample_nearest2d.vec", upsample::<NEAREST, 2, true>);
    r.add("aten::upsample_nearest3d", upsample::<NEAREST, 3, false>);
    r.add("aten::upsample_nearest3d.vec", upsample::<NEAREST, 3, true>);
    r.add(
        "aten::_upsample_nearest_exact1d",
        upsample::<NEAREST_EXACT, 1, false>,
    );
    r.add(
        "aten::_upsample_nearest_exact1d.vec",
        upsample::<NEAREST_EXACT, 1, true>,
    );
    r.add(
        "aten::_upsample_nearest_exact2d",
        upsample::<NEAREST_EXACT, 2, false>,
    );
    r.add(
        "aten::_upsample_nearest_exact2d.vec",
        upsample::<NEAREST_EXACT, 2, true>,
    );
    r.add(
        "aten::_upsample_nearest_exact3d",
        upsample::<NEAREST_EXACT, 3, false>,
    );
    r.add(
        "aten::_upsample_nearest_exact3d.vec",
        upsample::<NEAREST_EXACT, 3, true>,
    );
    r.add("aten::upsample_linear1d", upsample::<LINEAR, 1, false>);
    r.add("aten::upsample_linear1d.vec", upsample::<LINEAR, 1, true>);
    r.add("aten::upsample_bilinear2d", upsample::<LINEAR, 2, false>);
    r.add("aten::upsample_bilinear2d.vec", upsample::<LINEAR, 2, true>);
    r.add("aten::upsample_trilinear3d", upsample::<LINEAR, 3, false>);
    r.add(
        "aten::upsample_trilinear3d.vec",
        upsample::<LINEAR, 3, true>,
    );
    r.add("aten::upsample_bicubic2d", upsample::<CUBIC, 2, false>);
    r.add("aten::upsample_bicubic2d.vec", upsample::<CUBIC, 2, true>);
    r.add(
        "aten::_upsample_bilinear2d_aa",
        upsample::<AA_LINEAR, 2, false>,
    );
    r.add(
        "aten::_upsample_bilinear2d_aa.vec",
        upsample::<AA_LINEAR, 2, true>,
    );
    r.add(
        "aten::_upsample_bicubic2d_aa",
        upsample::<AA_CUBIC, 2, false>,
    );
    r.add(
        "aten::_upsample_bicubic2d_aa.vec",
        upsample::<AA_CUBIC, 2, true>,
    );
    r.add(
        "aten::_upsample_lanczos2d_aa",
        upsample::<AA_LANCZOS, 2, false>,
    );
    r.add(
        "aten::_upsample_lanczos2d_aa.vec",
        upsample::<AA_LANCZOS, 2, true>,
    );
    r.add_overloads(
        "aten::__interpolate",
        &["", "size_list", "scale_list", "size_list_scale_list"],
        dunder_interpolate,
    );
    r.add_overloads("aten::__upsample", &["", "size_list"], dunder_upsample);
    r.add_overloads(
        "aten::__upsample_nearest",
        &["", "size_list"],
        dunder_upsample_nearest,
    );
    r.add_overloads(
        "aten::__upsample_bilinear",
        &["", "size_list", "scale_list", "size_list_scale_list"],
        dunder_upsample_bilinear,
    );
    r.add("aten::pixel_shuffle", pixel_shuffle);
    r.add("aten::pixel_unshuffle", pixel_unshuffle);
    r.add_all(
        &["aten::channel_shuffle", "aten::native_channel_shuffle"],
        channel_shuffle,
    );
}
