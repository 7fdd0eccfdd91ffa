//! Sampling grids (`grid_sampler_2d`/`_3d`, `affine_grid_generator`) and patches
//! (`im2col`/`col2im`).

use super::kernels::via_f64::{build, t, vals};
use super::kernels::{
    check_rank, check_size, invalid_argument, rank_mismatch, shape_mismatch, unsupported_feature,
    wrong_dtype,
};
use super::{Args, Registry};
use crate::tensor::{RankRequirement, TensorError};

/// A grid of `coords + 2` dims (`[N, H, W, 2]` or `[N, D, H, W, 3]`): the input's batch size,
/// `coords` coordinates in its last dimension.
fn check_grid_sizes(op: &str, gs: &[usize], batch: usize, coords: usize) -> crate::Result<()> {
    check_rank(op, "grid", RankRequirement::Exactly(coords + 2), gs)?;
    check_size(
        op,
        "grid.size(0) (the input's batch size)",
        batch as i64,
        gs[0] as i64,
    )?;
    let last = gs[gs.len() - 1];
    check_size(op, "grid.size(-1)", coords as i64, last as i64)?;
    Ok(())
}

/// padding_mode 0 (zeros), 1 (border) or 2 (reflection); input and grid of one floating dtype.
fn check_padding_and_dtypes(
    op: &str,
    padding: i64,
    x: &crate::tensor::Tensor,
    grid: &crate::tensor::Tensor,
) -> crate::Result<()> {
    if !(0..=2).contains(&padding) {
        return Err(invalid_argument(
            op,
            "padding_mode",
            "must be 0, 1 or 2",
            padding,
        ));
    }
    if !x.dtype().is_floating_point() {
        return Err(wrong_dtype(
            op,
            "input",
            "a floating point tensor",
            x.dtype(),
        ));
    }
    if x.dtype() != grid.dtype() {
        return Err(TensorError::DTypeMismatch {
            expected: x.dtype(),
            got: grid.dtype(),
        }
        .into());
    }
    Ok(())
}

use crate::values::IValue;

type R = crate::Result<IValue>;

/// `affine_grid_generator(theta, size, align_corners)`: theta `[N, k, k+1]`, size `[N, C, *k]`,
/// output `[N, *k, k]` of (x, y[, z]) sampling coordinates.
pub(super) fn affine_grid_generator(args: &mut Args<'_>) -> R {
    let theta = args.tensor(0)?;
    let size = args.int_list(1)?;
    let align = args.bool(2)?;
    if !(size.len() == 4 || size.len() == 5) || size.iter().any(|&v| v < 0) {
        return Err(invalid_argument(
            "affine_grid",
            "size",
            "must have 4 or 5 non-negative entries (2-D or 3-D affine transforms)",
            format!("{size:?}"),
        ));
    }
    let k = size.len() - 2;
    let n = size[0] as usize;
    if theta.shape() != [n, k, k + 1] {
        return Err(shape_mismatch(
            "affine_grid",
            "theta",
            &[n, k, k + 1],
            theta.shape(),
        ));
    }
    if !theta.dtype().is_floating_point() {
        return Err(wrong_dtype(
            "affine_grid",
            "theta",
            "a floating point tensor",
            theta.dtype(),
        ));
    }
    let spatial: Vec<usize> = size[2..].iter().map(|&v| v as usize).collect();
    let lin = |steps: usize, i: usize| -> f64 {
        if steps <= 1 {
            return 0.0;
        }
        let v = -1.0 + 2.0 * i as f64 / (steps - 1) as f64;
        if align {
            v
        } else {
            v * (steps - 1) as f64 / steps as f64
        }
    };
    let th = vals(&theta)?;
    let npos: usize = spatial.iter().product();
    let mut out = Vec::with_capacity(n * npos * k);
    for b in 0..n {
        let m = &th[b * k * (k + 1)..(b + 1) * k * (k + 1)];
        for pos in 0..npos {
            // Base coordinates (x first: the last spatial dim), then the homogeneous 1.
            let mut idx = pos;
            let mut base = vec![0.0; k + 1];
            for (d, &len) in spatial.iter().enumerate().rev() {
                base[k - 1 - d] = lin(len, idx % len);
                idx /= len;
            }
            base[k] = 1.0;
            for r in 0..k {
                out.push((0..=k).map(|j| m[r * (k + 1) + j] * base[j]).sum());
            }
        }
    }
    let mut shape = vec![n];
    shape.extend_from_slice(&spatial);
    shape.push(k);
    t(build(out, &shape, theta.dtype())?)
}

/// A normalized grid coordinate as a pixel coordinate under PyTorch's padding modes.
pub(super) fn grid_coord(c: f64, size: usize, padding: i64, align: bool) -> f64 {
    let sz = size as f64;
    let mut x = if align {
        (c + 1.0) / 2.0 * (sz - 1.0)
    } else {
        ((c + 1.0) * sz - 1.0) / 2.0
    };
    let clip = |x: f64| x.clamp(0.0, sz - 1.0);
    match padding {
        1 => x = clip(x),
        2 => {
            x = if align {
                reflect(x, 0.0, 2.0 * (sz - 1.0))
            } else {
                reflect(x, -1.0, 2.0 * sz - 1.0)
            };
            x = clip(x);
        }
        _ => {}
    }
    x
}

pub(super) fn reflect(x: f64, twice_low: f64, twice_high: f64) -> f64 {
    if twice_low == twice_high {
        return 0.0;
    }
    let min = twice_low / 2.0;
    let span = (twice_high - twice_low) / 2.0;
    let x = (x - min).abs();
    let extra = x % span;
    let flips = (x / span).floor() as i64;
    if flips % 2 == 0 {
        extra + min
    } else {
        span - extra + min
    }
}

/// `grid_sampler_2d(input, grid, interpolation_mode, padding_mode, align_corners)`:
/// modes 0 bilinear / 1 nearest; padding 0 zeros / 1 border / 2 reflection.
pub(super) fn grid_sampler_2d(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let grid = args.tensor(1)?;
    let mode = args.int(2)?;
    let padding = args.int(3)?;
    let align = args.bool(4)?;
    check_rank(args.op, "input", RankRequirement::Exactly(4), x.shape())?;
    let (n, c, h, w) = (x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]);
    let gs = grid.shape();
    check_grid_sizes(args.op, gs, n, 2)?;
    if mode == 2 {
        return Err(unsupported_feature(
            args.op,
            "bicubic interpolation (mode 2)",
        ));
    }
    if !(0..=1).contains(&mode) {
        return Err(invalid_argument(
            args.op,
            "interpolation_mode",
            "must be 0, 1 or 2",
            mode,
        ));
    }
    check_padding_and_dtypes(args.op, padding, &x, &grid)?;
    let (oh, ow) = (gs[1], gs[2]);
    let xv = vals(&x)?;
    let gv = vals(&grid)?;
    let mut out = vec![0.0; n * c * oh * ow];
    for b in 0..n {
        for p in 0..oh * ow {
            let gx = grid_coord(gv[(b * oh * ow + p) * 2], w, padding, align);
            let gy = grid_coord(gv[(b * oh * ow + p) * 2 + 1], h, padding, align);
            let at = |ch: usize, yy: i64, xx: i64| -> f64 {
                if yy < 0 || xx < 0 || yy >= h as i64 || xx >= w as i64 {
                    0.0
                } else {
                    xv[((b * c + ch) * h + yy as usize) * w + xx as usize]
                }
            };
            for ch in 0..c {
                let v = if mode == 1 {
                    at(ch, gy.round_ties_even() as i64, gx.round_ties_even() as i64)
                } else {
                    let (x0, y0) = (gx.floor(), gy.floor());
                    let (tx, ty) = (gx - x0, gy - y0);
                    let (x0, y0) = (x0 as i64, y0 as i64);
                    at(ch, y0, x0) * (1.0 - tx) * (1.0 - ty)
                        + at(ch, y0, x0 + 1) * tx * (1.0 - ty)
                        + at(ch, y0 + 1, x0) * (1.0 - tx) * ty
                        + at(ch, y0 + 1, x0 + 1) * tx * ty
                };
                out[(b * c + ch) * oh * ow + p] = v;
            }
        }
    }
    t(build(out, &[n, c, oh, ow], x.dtype())?)
}

/// `grid_sampler_3d(input, grid, interpolation_mode, padding_mode, align_corners)`: input
/// `[N, C, D, H, W]`, grid `[N, D', H', W', 3]` holding (x, y, z) for (W, H, D); modes 0
/// trilinear / 1 nearest (PyTorch has no bicubic in 3-D); padding as in 2-D.
pub(super) fn grid_sampler_3d(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let grid = args.tensor(1)?;
    let mode = args.int(2)?;
    let padding = args.int(3)?;
    let align = args.bool(4)?;
    check_rank(args.op, "input", RankRequirement::Exactly(5), x.shape())?;
    let (n, c, d, h, w) = (
        x.shape()[0],
        x.shape()[1],
        x.shape()[2],
        x.shape()[3],
        x.shape()[4],
    );
    let gs = grid.shape();
    check_grid_sizes(args.op, gs, n, 3)?;
    if !(0..=1).contains(&mode) {
        return Err(invalid_argument(
            args.op,
            "interpolation_mode",
            "must be 0 (bilinear) or 1 (nearest) for 5-D input (bicubic needs 4-D)",
            mode,
        ));
    }
    check_padding_and_dtypes(args.op, padding, &x, &grid)?;
    let (od, oh, ow) = (gs[1], gs[2], gs[3]);
    let points = od * oh * ow;
    let xv = vals(&x)?;
    let gv = vals(&grid)?;
    let mut out = vec![0.0; n * c * points];
    for b in 0..n {
        for p in 0..points {
            let g = &gv[(b * points + p) * 3..(b * points + p) * 3 + 3];
            let gx = grid_coord(g[0], w, padding, align);
            let gy = grid_coord(g[1], h, padding, align);
            let gz = grid_coord(g[2], d, padding, align);
            let at = |ch: usize, zz: i64, yy: i64, xx: i64| -> f64 {
                if zz < 0 || yy < 0 || xx < 0 || zz >= d as i64 || yy >= h as i64 || xx >= w as i64
                {
                    0.0
                } else {
                    xv[(((b * c + ch) * d + zz as usize) * h + yy as usize) * w + xx as usize]
                }
            };
            for ch in 0..c {
                let v = if mode == 1 {
                    at(
                        ch,
                        gz.round_ties_even() as i64,
                        gy.round_ties_even() as i64,
                        gx.round_ties_even() as i64,
                    )
                } else {
                    let (x0, y0, z0) = (gx.floor(), gy.floor(), gz.floor());
                    let (tx, ty, tz) = (gx - x0, gy - y0, gz - z0);
                    let (x0, y0, z0) = (x0 as i64, y0 as i64, z0 as i64);
                    let mut acc = 0.0;
                    for (dz, wz) in [(0, 1.0 - tz), (1, tz)] {
                        for (dy, wy) in [(0, 1.0 - ty), (1, ty)] {
                            for (dx, wx) in [(0, 1.0 - tx), (1, tx)] {
                                acc += at(ch, z0 + dz, y0 + dy, x0 + dx) * wz * wy * wx;
                            }
                        }
                    }
                    acc
                };
                out[(b * c + ch) * points + p] = v;
            }
        }
    }
    t(build(out, &[n, c, od, oh, ow], x.dtype())?)
}

/// `grid_sampler`: the 2-D or 3-D sampler by the input's rank, as ATen's dispatcher does.
pub(super) fn grid_sampler(args: &mut Args<'_>) -> R {
    if args.tensor(0)?.dim() == 5 {
        grid_sampler_3d(args)
    } else {
        grid_sampler_2d(args)
    }
}

/// Two positive ints (kernel, dilation, stride) or non-negative (padding) from a 2-list.
pub(super) fn pair(args: &Args<'_>, i: usize, what: &str, min: i64) -> crate::Result<[usize; 2]> {
    let v = args.int_list(i)?;
    if v.len() != 2 || v.iter().any(|&e| e < min) {
        return Err(invalid_argument(
            args.op,
            what,
            format!("must be two integers >= {min}"),
            format!("{v:?}"),
        ));
    }
    Ok([v[0] as usize, v[1] as usize])
}

/// Output positions of a sliding window along one dim.
pub(super) fn blocks(len: usize, k: usize, d: usize, p: usize, s: usize) -> Option<usize> {
    let span = d * (k - 1) + 1;
    (len + 2 * p).checked_sub(span).map(|r| r / s + 1)
}

/// `im2col(self, kernel_size, dilation, padding, stride)` (nn.Unfold).
pub(super) fn im2col(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let k = pair(args, 1, "kernel_size", 1)?;
    let d = pair(args, 2, "dilation", 1)?;
    let p = pair(args, 3, "padding", 0)?;
    let s = pair(args, 4, "stride", 1)?;
    let batched = x.dim() == 4;
    if !(x.dim() == 3 || batched) {
        return Err(rank_mismatch(
            "im2col",
            "input",
            RankRequirement::OneOf(vec![3, 4]),
            x.shape(),
        ));
    }
    let sh = x.shape();
    let (n, c, h, w) = if batched {
        (sh[0], sh[1], sh[2], sh[3])
    } else {
        (1, sh[0], sh[1], sh[2])
    };
    let (Some(bh), Some(bw)) = (
        blocks(h, k[0], d[0], p[0], s[0]),
        blocks(w, k[1], d[1], p[1], s[1]),
    ) else {
        return Err(invalid_argument(
            "im2col",
            "kernel_size",
            format!("must fit the padded input {sh:?} with dilation {d:?} and padding {p:?}"),
            format!("{k:?}"),
        ));
    };
    let xv = vals(&x)?;
    let rows = c * k[0] * k[1];
    let l = bh * bw;
    let mut out = vec![0.0; n * rows * l];
    for b in 0..n {
        for ch in 0..c {
            for ki in 0..k[0] {
                for kj in 0..k[1] {
                    let row = (ch * k[0] + ki) * k[1] + kj;
                    for oi in 0..bh {
                        for oj in 0..bw {
                            let yy = (oi * s[0] + ki * d[0]) as i64 - p[0] as i64;
                            let xx = (oj * s[1] + kj * d[1]) as i64 - p[1] as i64;
                            if yy >= 0 && xx >= 0 && (yy as usize) < h && (xx as usize) < w {
                                out[(b * rows + row) * l + oi * bw + oj] =
                                    xv[((b * c + ch) * h + yy as usize) * w + xx as usize];
                            }
                        }
                    }
                }
            }
        }
    }
    let shape = if batched {
        vec![n, rows, l]
    } else {
        vec![rows, l]
    };
    t(build(out, &shape, x.dtype())?)
}

/// `col2im(self, output_size, kernel_size, dilation, padding, stride)` (nn.Fold): sums patches.
pub(super) fn col2im(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let o = pair(args, 1, "output_size", 1)?;
    let k = pair(args, 2, "kernel_size", 1)?;
    let d = pair(args, 3, "dilation", 1)?;
    let p = pair(args, 4, "padding", 0)?;
    let s = pair(args, 5, "stride", 1)?;
    let batched = x.dim() == 3;
    if !(x.dim() == 2 || batched) {
        return Err(rank_mismatch(
            "col2im",
            "input",
            RankRequirement::OneOf(vec![2, 3]),
            x.shape(),
        ));
    }
    let sh = x.shape();
    let (n, rows, l) = if batched {
        (sh[0], sh[1], sh[2])
    } else {
        (1, sh[0], sh[1])
    };
    let kk = k[0] * k[1];
    if rows % kk != 0 {
        return Err(invalid_argument(
            "col2im",
            "input.size(1)",
            format!("must be divisible by the product of kernel_size {k:?}"),
            rows,
        ));
    }
    let c = rows / kk;
    let (bh, bw) = match (blocks(o[0], k[0], d[0], p[0], s[0]), blocks(o[1], k[1], d[1], p[1], s[1])) {
        (Some(a), Some(b)) if a * b == l => (a, b),
        _ => {
            return Err(invalid_argument(
                "col2im",
                "input.size(2)",
                format!(
                    "must be the number of sliding blocks for output_size={o:?}, kernel_size={k:?}, dilation={d:?}, padding={p:?}, stride={s:?}"
                ),
                l,
            ))
        }
    };
    let xv = vals(&x)?;
    let (h, w) = (o[0], o[1]);
    let mut out = vec![0.0; n * c * h * w];
    for b in 0..n {
        for ch in 0..c {
            for ki in 0..k[0] {
                for kj in 0..k[1] {
                    let row = (ch * k[0] + ki) * k[1] + kj;
                    for oi in 0..bh {
                        for oj in 0..bw {
                            let yy = (oi * s[0] + ki * d[0]) as i64 - p[0] as i64;
                            let xx = (oj * s[1] + kj * d[1]) as i64 - p[1] as i64;
                            if yy >= 0 && xx >= 0 && (yy as usize) < h && (xx as usize) < w {
                                out[((b * c + ch) * h + yy as usize) * w + xx as usize] +=
                                    xv[(b * rows + row) * l + oi * bw + oj];
                            }
                        }
                    }
                }
            }
        }
    }
    let shape = if batched {
        vec![n, c, h, w]
    } else {
        vec![c, h, w]
    };
    t(build(out, &shape, x.dtype())?)
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::affine_grid_generator", affine_grid_generator);
    r.add("aten::grid_sampler", grid_sampler);
    r.add("aten::grid_sampler_3d", grid_sampler_3d);
    r.add("aten::grid_sampler_2d", grid_sampler_2d);
    r.add("aten::im2col", im2col);
    r.add("aten::col2im", col2im);

    // the CPU fallback computes what grid_sampler_2d does
    r.alias(
        "aten::_grid_sampler_2d_cpu_fallback",
        "aten::grid_sampler_2d",
    );
}
