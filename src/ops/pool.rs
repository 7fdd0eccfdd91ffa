//! Kernels: max / average / adaptive pooling over 1, 2 or 3 spatial dims. Leading dims (batch,
//! channels) are flattened into independent planes; spatial dims are lifted to 3.

use super::kernels::parallel::{for_each_chunk_mut, for_each_chunk_mut2};
use super::kernels::reduce::pairwise_sum;
use super::kernels::{
    check_rank, invalid_argument, rank_mismatch, shape_mismatch, size_mismatch, wrong_dtype,
};
use super::linalg::{
    compute_dtype, contiguous_as, dispatch_real_compute, slice_mut_of, slice_of, value_err, Real,
};
use super::{Args, Registry};
#[allow(unused_imports)]
use crate::tensor::Element as _;
use crate::tensor::{DType, RankRequirement, Tensor};
use crate::values::{IValue, Tuple};
#[allow(unused_imports)]
use num_traits::{Float as _, One as _, Zero as _};

/// Lift `n` values to 3 slots (leading slots get `fill`).
fn lift(v: &[usize], fill: usize) -> [usize; 3] {
    let mut out = [fill; 3];
    out[3 - v.len()..].copy_from_slice(v);
    out
}

/// An `int[N]` pooling argument: one value broadcasts; `empty_default` for `stride=[]`.
fn pool_arg(
    op: &str,
    what: &str,
    v: &[i64],
    n: usize,
    empty_default: Option<&[usize]>,
    min: i64,
) -> crate::Result<Vec<usize>> {
    if v.is_empty() {
        if let Some(d) = empty_default {
            return Ok(d.to_vec());
        }
    }
    let v: Vec<i64> = if v.len() == 1 {
        vec![v[0]; n]
    } else {
        v.to_vec()
    };
    if v.len() != n {
        return Err(invalid_argument(
            op,
            what,
            format!("must be a single int or a tuple of {n} ints"),
            format!("{v:?}"),
        ));
    }
    v.iter()
        .map(|&x| {
            if x < min {
                Err(invalid_argument(
                    op,
                    what,
                    format!("must be >= {min}"),
                    format!("{v:?}"),
                ))
            } else {
                Ok(x as usize)
            }
        })
        .collect()
}

/// Input split into (planes, spatial dims), validated for `nsp` spatial dims.
fn planes(op: &str, x: &Tensor, nsp: usize) -> crate::Result<(usize, Vec<usize>)> {
    check_rank(
        op,
        "input",
        RankRequirement::OneOf(vec![nsp + 1, nsp + 2]),
        x.shape(),
    )?;
    let lead = x.dim() - nsp;
    let p: usize = x.shape()[..lead].iter().product();
    Ok((p, x.shape()[lead..].to_vec()))
}

fn out_shape(x: &Tensor, nsp: usize, osp: &[usize; 3]) -> Vec<usize> {
    let lead = x.dim() - nsp;
    let mut s = x.shape()[..lead].to_vec();
    s.extend_from_slice(&osp[3 - nsp..]);
    s
}

/// Pooling output size along one dim (PyTorch's `pooling_output_shape`).
fn pooled_size(
    op: &str,
    input: usize,
    k: usize,
    s: usize,
    p: usize,
    d: usize,
    ceil: bool,
) -> crate::Result<usize> {
    let span = (d * (k - 1) + 1) as i64;
    let num = input as i64 + 2 * p as i64 - span + if ceil { s as i64 - 1 } else { 0 };
    let mut out = num.div_euclid(s as i64) + 1;
    if ceil && (out - 1) * s as i64 >= input as i64 + p as i64 {
        out -= 1;
    }
    if out < 1 {
        return Err(invalid_argument(
            op,
            "the output size",
            format!("must be positive (input {input}, kernel {k}, stride {s}, padding {p}, dilation {d})"),
            out,
        ));
    }
    Ok(out as usize)
}

struct PoolGeo {
    isp: [usize; 3],
    osp: [usize; 3],
    k: [usize; 3],
    s: [usize; 3],
    p: [usize; 3],
    d: [usize; 3],
}

fn pool_geo(
    a: &Args,
    nsp: usize,
    dilation_i: Option<usize>,
    ceil_i: usize,
) -> crate::Result<(Tensor, usize, PoolGeo)> {
    let x = a.tensor(0)?;
    let (np, sp) = planes(a.op, &x, nsp)?;
    let k = pool_arg(a.op, "kernel_size", &a.int_list(1)?, nsp, None, 1)?;
    let s = pool_arg(a.op, "stride", &a.int_list(2)?, nsp, Some(&k), 1)?;
    let p = pool_arg(a.op, "padding", &a.int_list(3)?, nsp, None, 0)?;
    let d = match dilation_i {
        Some(i) => pool_arg(a.op, "dilation", &a.int_list(i)?, nsp, None, 1)?,
        None => vec![1; nsp],
    };
    let ceil = a.bool(ceil_i)?;
    for i in 0..nsp {
        if p[i] > k[i] / 2 {
            return Err(invalid_argument(
                a.op,
                "padding",
                format!(
                    "must be at most half of the kernel size {} (dilation {})",
                    k[i], d[i]
                ),
                p[i],
            ));
        }
    }
    let mut osp = vec![0; nsp];
    for i in 0..nsp {
        osp[i] = pooled_size(a.op, sp[i], k[i], s[i], p[i], d[i], ceil)?;
    }
    Ok((
        x,
        np,
        PoolGeo {
            isp: lift(&sp, 1),
            osp: lift(&osp, 1),
            k: lift(&k, 1),
            s: lift(&s, 1),
            p: lift(&p, 0),
            d: lift(&d, 1),
        },
    ))
}

fn max_pool_t<T: Real>(
    x: &Tensor,
    np: usize,
    g: &PoolGeo,
    out: &Tensor,
    idx: &Tensor,
) -> crate::Result<()> {
    let xs_guard = x.read::<T>()?;
    let xs = slice_of(&xs_guard)?;
    let mut os_guard = out.write::<T>()?;
    let os = slice_mut_of(&mut os_guard)?;
    let mut is_guard = idx.write::<i64>()?;
    let is = slice_mut_of(&mut is_guard)?;
    let (il, ol) = (
        g.isp.iter().product::<usize>(),
        g.osp.iter().product::<usize>(),
    );
    if ol == 0 || np == 0 {
        return Ok(());
    }
    let [ih, iw] = [g.isp[1], g.isp[2]];
    let par = crate::tensor::split_work(np * il, crate::tensor::PARALLEL_THRESHOLD);
    for_each_chunk_mut2(os, is, (ol, ol), par, &|pl, o, ix| {
        let src = &xs[pl * il..][..il];
        let mut n = 0;
        for z in 0..g.osp[0] {
            for y in 0..g.osp[1] {
                for x in 0..g.osp[2] {
                    let mut best = T::neg_infinity();
                    let mut best_i: i64 = -1;
                    for a in 0..g.k[0] {
                        let iz = (z * g.s[0] + a * g.d[0]) as isize - g.p[0] as isize;
                        if iz < 0 || iz as usize >= g.isp[0] {
                            continue;
                        }
                        for b in 0..g.k[1] {
                            let iy = (y * g.s[1] + b * g.d[1]) as isize - g.p[1] as isize;
                            if iy < 0 || iy as usize >= ih {
                                continue;
                            }
                            for c in 0..g.k[2] {
                                let ixx = (x * g.s[2] + c * g.d[2]) as isize - g.p[2] as isize;
                                if ixx < 0 || ixx as usize >= iw {
                                    continue;
                                }
                                let flat = (iz as usize * ih + iy as usize) * iw + ixx as usize;
                                let v = src[flat];
                                if best_i < 0 || v > best || v.is_nan() {
                                    best = v;
                                    best_i = flat as i64;
                                }
                            }
                        }
                    }
                    o[n] = best;
                    ix[n] = best_i.max(0);
                    n += 1;
                }
            }
        }
    });
    Ok(())
}

fn max_pool_impl(a: &Args, nsp: usize) -> crate::Result<(Tensor, Tensor)> {
    let (x, np, g) = pool_geo(a, nsp, Some(4), 5)?;
    let dtype = x.dtype();
    let cd = compute_dtype(a.op, dtype)?;
    let xc = contiguous_as(&x, cd)?;
    let shape = out_shape(&x, nsp, &g.osp);
    let out = Tensor::zeros(&shape, cd)?;
    let idx = Tensor::zeros(&shape, DType::Int64)?;
    dispatch_real_compute!(cd, a.op, |T| max_pool_t::<T>(&xc, np, &g, &out, &idx))?;
    Ok((out.to_dtype(dtype)?, idx))
}

fn max_pool_op(a: &mut Args, nsp: usize) -> crate::Result<IValue> {
    let (x, np, g) = pool_geo(a, nsp, Some(4), 5)?;
    if x.dtype() == DType::Float32 && g.d == [1, 1, 1] {
        // no indices wanted: reduce whole rows at a time
        let xc = contiguous_as(&x, DType::Float32)?;
        let out = Tensor::empty(&out_shape(&x, nsp, &g.osp), DType::Float32)?;
        {
            let xs_guard = xc.read::<f32>()?;
            let mut os_guard = out.write::<f32>()?;
            max_pool_rows_f32(slice_of(&xs_guard)?, slice_mut_of(&mut os_guard)?, np, &g);
        }
        return Ok(IValue::Tensor(out));
    }
    Ok(IValue::Tensor(max_pool_impl(a, nsp)?.0))
}

/// `a` unless `b` is larger or NaN: PyTorch's max-pool step (`val > max || isnan(val)`).
#[inline(always)]
fn nan_max(a: f32, b: f32) -> f32 {
    if b > a || b.is_nan() {
        b
    } else {
        a
    }
}

/// Max pooling of float32 planes (dilation 1, no indices), a row of the output at a time: the
/// valid input rows of its window are reduced elementwise into one row (a loop the compiler
/// vectorizes), then each output takes the maximum of its columns of that row (the columns
/// whose window lies inside the row by a loop over a fixed window, the edges clipped). A
/// window with a NaN gives NaN, as PyTorch's kernel does; among equal values only the sign of
/// a zero can differ from PyTorch's first-found choice. Planes are shared among the kernel
/// team's threads.
fn max_pool_rows_f32(xs: &[f32], os: &mut [f32], np: usize, g: &PoolGeo) {
    let il: usize = g.isp.iter().product();
    let ol: usize = g.osp.iter().product();
    if ol == 0 || np == 0 || il == 0 {
        return;
    }
    let [id, ih, iw] = g.isp;
    let window = |o: usize, k: usize, s: usize, p: usize, len: usize| {
        let start = (o * s) as isize - p as isize;
        let lo = start.max(0) as usize;
        let hi = ((start + k as isize).min(len as isize)).max(0) as usize;
        (lo, hi.max(lo))
    };
    let (kw, sw, pw) = (g.k[2], g.s[2], g.p[2]);
    // output columns whose window `[x * sw - pw, + kw)` lies inside the row
    let inner_lo = pw.div_ceil(sw).min(g.osp[2]);
    let inner_hi = if iw + pw >= kw {
        ((iw + pw - kw) / sw + 1).clamp(inner_lo, g.osp[2])
    } else {
        inner_lo
    };
    let plane = |row: &mut Vec<f32>, src: &[f32], dst: &mut [f32]| {
        row.resize(iw, 0.0);
        let mut out_rows = dst.chunks_exact_mut(g.osp[2]);
        for z in 0..g.osp[0] {
            let (z0, z1) = window(z, g.k[0], g.s[0], g.p[0], id);
            for y in 0..g.osp[1] {
                let (y0, y1) = window(y, g.k[1], g.s[1], g.p[1], ih);
                let mut first = true;
                for iz in z0..z1 {
                    for iy in y0..y1 {
                        let r = &src[(iz * ih + iy) * iw..][..iw];
                        if first {
                            row.copy_from_slice(r);
                            first = false;
                        } else {
                            for (m, &v) in row.iter_mut().zip(r) {
                                *m = nan_max(*m, v);
                            }
                        }
                    }
                }
                let Some(out) = out_rows.next() else { return };
                if first {
                    // an empty window (PyTorch's shape checks rule it out)
                    out.fill(f32::NEG_INFINITY);
                    continue;
                }
                let clipped = |x: usize| {
                    let (x0, x1) = window(x, kw, sw, pw, iw);
                    if x0 == x1 {
                        f32::NEG_INFINITY
                    } else {
                        row[x0 + 1..x1].iter().fold(row[x0], |m, &v| nan_max(m, v))
                    }
                };
                for (x, o) in out.iter_mut().enumerate().take(inner_lo) {
                    *o = clipped(x);
                }
                match (kw, sw) {
                    (3, 2) => {
                        inner_cols::<3, 2>(row, &mut out[inner_lo..inner_hi], inner_lo * 2 - pw)
                    }
                    (3, 1) => inner_cols::<3, 1>(row, &mut out[inner_lo..inner_hi], inner_lo - pw),
                    (2, 2) => {
                        inner_cols::<2, 2>(row, &mut out[inner_lo..inner_hi], inner_lo * 2 - pw)
                    }
                    _ => {
                        for (x, o) in out.iter_mut().enumerate().take(inner_hi).skip(inner_lo) {
                            let r = &row[x * sw - pw..][..kw];
                            *o = r[1..].iter().fold(r[0], |m, &v| nan_max(m, v));
                        }
                    }
                }
                for (x, o) in out.iter_mut().enumerate().skip(inner_hi) {
                    *o = clipped(x);
                }
            }
        }
    };
    let (Some(xs), Some(os)) = (xs.get(..np * il), os.get_mut(..np * ol)) else {
        return;
    };
    let par = crate::tensor::split_work(
        np * ol * g.k.iter().product::<usize>(),
        crate::tensor::PARALLEL_THRESHOLD,
    );
    for_each_chunk_mut(os, ol, par, &|pl, dst| {
        let src = &xs[pl * il..][..il];
        ROW.with(|row| match row.try_borrow_mut() {
            Ok(mut row) => plane(&mut row, src, dst),
            Err(_) => plane(&mut Vec::new(), src, dst),
        });
    });
}

thread_local! {
    /// [`max_pool_rows_f32`]'s reduced input row, reused across planes and calls.
    static ROW: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `out[x] = max(row[base + x * S ..][..K])` (folded left to right by [`nan_max`]) for every
/// `x`: a fixed window and stride the compiler unrolls. `row` holds every element read.
#[inline(always)]
fn inner_cols<const K: usize, const S: usize>(row: &[f32], out: &mut [f32], base: usize) {
    let Some(row) = row.get(base..) else { return };
    for (x, o) in out.iter_mut().enumerate() {
        let Some(r) = row.get(x * S..x * S + K) else {
            return;
        };
        *o = r[1..].iter().fold(r[0], |m, &v| nan_max(m, v));
    }
}

fn max_pool_with_indices(a: &mut Args, nsp: usize) -> crate::Result<IValue> {
    let (o, i) = max_pool_impl(a, nsp)?;
    Ok(IValue::Tuple(Tuple::new(vec![
        IValue::Tensor(o),
        IValue::Tensor(i),
    ])))
}

fn avg_pool_t<T: Real>(
    x: &Tensor,
    np: usize,
    g: &PoolGeo,
    include_pad: bool,
    divisor: Option<usize>,
    out: &Tensor,
) -> crate::Result<()> {
    let xs_guard = x.read::<T>()?;
    let xs = slice_of(&xs_guard)?;
    let mut os_guard = out.write::<T>()?;
    let os = slice_mut_of(&mut os_guard)?;
    let (il, ol) = (
        g.isp.iter().product::<usize>(),
        g.osp.iter().product::<usize>(),
    );
    if ol == 0 || np == 0 {
        return Ok(());
    }
    // Window [start, end) along one dim: (clamped start, clamped end, padded length).
    let range = |d: usize, o: usize| -> (usize, usize, usize) {
        let start = (o * g.s[d]) as isize - g.p[d] as isize;
        let end = (start + g.k[d] as isize).min((g.isp[d] + g.p[d]) as isize);
        let padded = (end - start) as usize;
        let s = start.max(0) as usize;
        let e = (end.min(g.isp[d] as isize)).max(0) as usize;
        (s, e.max(s), padded)
    };
    let par = crate::tensor::split_work(np * il, crate::tensor::PARALLEL_THRESHOLD);
    for_each_chunk_mut(os, ol, par, &|pl, o| {
        let src = &xs[pl * il..][..il];
        let mut n = 0;
        for z in 0..g.osp[0] {
            let (z0, z1, zp) = range(0, z);
            for y in 0..g.osp[1] {
                let (y0, y1, yp) = range(1, y);
                for x in 0..g.osp[2] {
                    let (x0, x1, xp) = range(2, x);
                    let mut sum = T::zero();
                    for iz in z0..z1 {
                        for iy in y0..y1 {
                            let base = (iz * g.isp[1] + iy) * g.isp[2];
                            for ix in x0..x1 {
                                sum += src[base + ix];
                            }
                        }
                    }
                    let count = match divisor {
                        Some(d) => d,
                        None if include_pad => zp * yp * xp,
                        None => (z1 - z0) * (y1 - y0) * (x1 - x0),
                    };
                    o[n] = sum / T::from_f64(count as f64);
                    n += 1;
                }
            }
        }
    });
    Ok(())
}

/// avg_pool1d: (self, kernel, stride, padding, ceil_mode, count_include_pad);
/// avg_pool2d/3d add divisor_override.
fn avg_pool_op(a: &mut Args, nsp: usize) -> crate::Result<IValue> {
    let (x, np, g) = pool_geo(a, nsp, None, 4)?;
    let include_pad = a.bool(5)?;
    let divisor = if nsp > 1 { a.opt_int(6)? } else { None };
    if let Some(d) = divisor {
        if d == 0 {
            return Err(invalid_argument(
                a.op,
                "divisor_override",
                "must not be zero",
                d,
            ));
        }
    }
    let dtype = x.dtype();
    let cd = compute_dtype(a.op, dtype)?;
    let xc = contiguous_as(&x, cd)?;
    let out = Tensor::zeros(&out_shape(&x, nsp, &g.osp), cd)?;
    dispatch_real_compute!(cd, a.op, |T| avg_pool_t::<T>(
        &xc,
        np,
        &g,
        include_pad,
        divisor.map(|d| d.unsigned_abs() as usize),
        &out
    ))?;
    Ok(IValue::Tensor(out.to_dtype(dtype)?))
}

/// Adaptive window of output `o` of `out` over `input`: [floor(o*in/out), ceil((o+1)*in/out)).
fn adaptive_range(o: usize, input: usize, out: usize) -> (usize, usize) {
    let start = (o * input) / out;
    let end = ((o + 1) * input).div_ceil(out);
    (start, end)
}

fn adaptive_t<T: Real>(
    x: &Tensor,
    np: usize,
    isp: [usize; 3],
    osp: [usize; 3],
    out: &Tensor,
    idx: Option<&Tensor>,
) -> crate::Result<()> {
    let xs_guard = x.read::<T>()?;
    let xs = slice_of(&xs_guard)?;
    let mut os_guard = out.write::<T>()?;
    let os = slice_mut_of(&mut os_guard)?;
    let (il, ol) = (isp.iter().product::<usize>(), osp.iter().product::<usize>());
    if ol == 0 || np == 0 {
        return Ok(());
    }
    let mut dummy: Vec<i64> = Vec::new();
    let mut idx_guard = idx.map(|t| t.write::<i64>()).transpose()?;
    let is: &mut [i64] = match idx_guard.as_mut() {
        Some(g) => slice_mut_of(g)?,
        None => {
            dummy.resize(ol * np, 0);
            &mut dummy
        }
    };
    let want_max = idx.is_some();
    let par = crate::tensor::split_work(np * il, crate::tensor::PARALLEL_THRESHOLD);
    for_each_chunk_mut2(os, is, (ol, ol), par, &|pl, o, ix| {
        let src = &xs[pl * il..][..il];
        let mut n = 0;
        for z in 0..osp[0] {
            let (z0, z1) = adaptive_range(z, isp[0], osp[0]);
            for y in 0..osp[1] {
                let (y0, y1) = adaptive_range(y, isp[1], osp[1]);
                for x in 0..osp[2] {
                    let (x0, x1) = adaptive_range(x, isp[2], osp[2]);
                    let mut sum = T::zero();
                    let mut best = T::neg_infinity();
                    let mut best_i: i64 = -1;
                    for iz in z0..z1 {
                        for iy in y0..y1 {
                            let base = (iz * isp[1] + iy) * isp[2];
                            for i in x0..x1 {
                                let v = src[base + i];
                                if want_max {
                                    if best_i < 0 || v > best || v.is_nan() {
                                        best = v;
                                        best_i = (base + i) as i64;
                                    }
                                } else {
                                    sum += v;
                                }
                            }
                        }
                    }
                    if want_max {
                        o[n] = best;
                        ix[n] = best_i.max(0);
                    } else {
                        let cnt = (z1 - z0) * (y1 - y0) * (x1 - x0);
                        o[n] = sum / T::from_f64(cnt as f64);
                    }
                    n += 1;
                }
            }
        }
    });
    Ok(())
}

fn adaptive_impl(a: &Args, nsp: usize, want_max: bool) -> crate::Result<(Tensor, Option<Tensor>)> {
    let x = a.tensor(0)?;
    let (np, sp) = planes(a.op, &x, nsp)?;
    let size = a.int_list(1)?;
    let size: Vec<i64> = if size.len() == 1 {
        vec![size[0]; nsp]
    } else {
        size
    };
    if size.len() != nsp || size.iter().any(|&s| s < 0) {
        return Err(invalid_argument(
            a.op,
            "output_size",
            format!("must be {nsp} non-negative values"),
            format!("{size:?}"),
        ));
    }
    if sp.contains(&0) {
        return Err(invalid_argument(
            a.op,
            "input",
            "must have non-zero size for non-batch dimensions",
            format!("shape {:?}", x.shape()),
        ));
    }
    let osp: Vec<usize> = size.iter().map(|&s| s as usize).collect();
    let osp3 = lift(&osp, 1);
    let dtype = x.dtype();
    let cd = compute_dtype(a.op, dtype)?;
    let xc = contiguous_as(&x, cd)?;
    let shape = out_shape(&x, nsp, &osp3);
    if !want_max && nsp <= 2 && cd == DType::Float32 && osp.iter().all(|&s| s == 1) {
        return Ok((
            plane_means_f32(&xc, &shape, sp.iter().product())?.to_dtype(dtype)?,
            None,
        ));
    }
    let out = Tensor::zeros(&shape, cd)?;
    let idx = if want_max {
        Some(Tensor::zeros(&shape, DType::Int64)?)
    } else {
        None
    };
    dispatch_real_compute!(cd, a.op, |T| adaptive_t::<T>(
        &xc,
        np,
        lift(&sp, 1),
        osp3,
        &out,
        idx.as_ref()
    ))?;
    Ok((out.to_dtype(dtype)?, idx))
}

/// Adaptive average pooling of contiguous float32 planes of `il` elements to one value each
/// (the squeeze of a squeeze-excitation block), as PyTorch computes it: `mean` over the
/// spatial dims, a cascade sum divided by the count.
fn plane_means_f32(x: &Tensor, shape: &[usize], il: usize) -> crate::Result<Tensor> {
    let out = Tensor::empty(shape, DType::Float32)?;
    {
        let xg = x.read::<f32>()?;
        let xs = slice_of(&xg)?;
        let mut og = out.write::<f32>()?;
        let os = slice_mut_of(&mut og)?;
        let il = il.max(1);
        let mean = |(o, plane): (&mut f32, &[f32])| {
            *o = pairwise_sum(plane, &|v: f32| v) / il as f32;
        };
        // on the calling thread: a squeeze reads a few thousand elements
        os.iter_mut().zip(xs.chunks(il)).for_each(mean);
    }
    Ok(out)
}

fn adaptive_avg_op(a: &mut Args, nsp: usize) -> crate::Result<IValue> {
    Ok(IValue::Tensor(adaptive_impl(a, nsp, false)?.0))
}

fn adaptive_max_op(a: &mut Args, nsp: usize) -> crate::Result<IValue> {
    let (o, i) = adaptive_impl(a, nsp, true)?;
    let i = i.ok_or_else(|| value_err("adaptive_max_pool: indices missing"))?;
    Ok(IValue::Tuple(Tuple::new(vec![
        IValue::Tensor(o),
        IValue::Tensor(i),
    ])))
}

/// One kernel per operator: the spatial rank is fixed at registration, not read from the name.
/// max_unpool2d/3d(self, indices, output_size, ...): each value written to its index in a
/// zero `output_size` plane (`[N, C, *output_size]` or `[C, *output_size]`), the inverse of
/// max_pool's `return_indices`.
fn max_unpool<const D: usize>(a: &mut Args) -> crate::Result<IValue> {
    let (x, idx) = (a.tensor(0)?, a.tensor(1)?);
    let size = a.int_list(2)?;
    let op = if D == 2 {
        "max_unpooling2d"
    } else {
        "max_unpooling3d"
    };
    if size.len() != D || size.iter().any(|&s| s < 0) {
        return Err(invalid_argument(
            op,
            "output_size",
            format!("must be exactly {D} non-negative elements"),
            format!("{size:?}"),
        ));
    }
    if idx.dtype() != DType::Int64 {
        return Err(wrong_dtype(op, "indices", "int64", idx.dtype()));
    }
    check_rank(
        op,
        "input",
        RankRequirement::OneOf(vec![D + 1, D + 2]),
        x.shape(),
    )?;
    if x.shape() != idx.shape() {
        return Err(shape_mismatch(op, "indices", x.shape(), idx.shape()));
    }
    let lead = &x.shape()[..x.dim() - D];
    let plane_in: usize = x.shape()[x.dim() - D..].iter().product();
    let plane_out: usize = size.iter().map(|&s| s as usize).product();
    let xs = x.contiguous()?.to_vec::<f64>()?;
    let is = idx.contiguous()?.to_vec::<i64>()?;
    let planes: usize = lead.iter().product();
    let mut out = vec![0.0; planes * plane_out];
    for p in 0..planes {
        for k in 0..plane_in {
            let at = p * plane_in + k;
            let i = is[at];
            let slot = usize::try_from(i)
                .ok()
                .filter(|&i| i < plane_out)
                .ok_or_else(|| {
                    crate::Error::from(crate::tensor::TensorError::IndexOutOfBounds {
                        index: i,
                        dim: x.dim() - 1,
                        size: plane_out,
                    })
                })?;
            out[p * plane_out + slot] = xs[at];
        }
    }
    let mut shape = lead.to_vec();
    shape.extend(size.iter().map(|&s| s as usize));
    Ok(IValue::Tensor(
        Tensor::from_vec(out, &shape)?.to_dtype(x.dtype())?,
    ))
}

/// PyTorch's `generate_intervals`: the start of each of `output` pooling windows of `pool`
/// over `input`, placed by `sample` in [0, 1); computed in the input's precision (`F`).
fn fractional_starts<F: num_traits::Float>(
    sample: F,
    input: usize,
    output: usize,
    pool: usize,
) -> Vec<usize> {
    let mut starts = vec![0usize; output];
    if output > 1 {
        let alpha =
            F::from(input - pool).unwrap_or(F::zero()) / F::from(output - 1).unwrap_or(F::one());
        let trunc = |v: F| v.to_i64().unwrap_or(0);
        for (i, st) in starts.iter_mut().enumerate().take(output - 1) {
            let i = F::from(i).unwrap_or(F::zero());
            *st = (trunc((i + sample) * alpha) - trunc(sample * alpha)).max(0) as usize;
        }
    }
    if let Some(last) = starts.last_mut() {
        *last = input - pool;
    }
    starts
}

/// fractional_max_pool2d/3d(self, kernel_size, output_size, random_samples) -> (output,
/// indices): max pooling over windows placed by the given samples (`[N, C, D]`, one per
/// spatial dim in PyTorch's order: W, H for 2-d; T, H, W for 3-d).
fn fractional_max_pool<const D: usize>(a: &mut Args) -> crate::Result<IValue> {
    let (x, samples) = (a.tensor(0)?, a.tensor(3)?);
    let (kernel, size) = (a.int_list(1)?, a.int_list(2)?);
    let op = if D == 2 {
        "fractional_max_pool2d"
    } else {
        "fractional_max_pool3d"
    };
    if kernel.len() != D || size.len() != D || kernel.iter().chain(&size).any(|&v| v < 1) {
        return Err(invalid_argument(
            op,
            "kernel_size and output_size",
            format!("must be {D} positive sizes each"),
            format!("{kernel:?} and {size:?}"),
        ));
    }
    if x.dim() != D + 1 && x.dim() != D + 2 {
        return Err(rank_mismatch(
            op,
            "input",
            RankRequirement::OneOf(vec![D + 1, D + 2]),
            x.shape(),
        ));
    }
    let in_sp = x.shape()[x.dim() - D..].to_vec();
    let (kernel, size): (Vec<usize>, Vec<usize>) = (
        kernel.iter().map(|&v| v as usize).collect(),
        size.iter().map(|&v| v as usize).collect(),
    );
    for d in 0..D {
        if size[d] + kernel[d] - 1 > in_sp[d] {
            return Err(invalid_argument(
                op,
                "kernel_size",
                format!(
                    "must leave output_size {} windows in the input size {} (kernel + output - 1 <= input)",
                    size[d], in_sp[d]
                ),
                kernel[d],
            ));
        }
    }
    let planes: usize = x.shape()[..x.dim() - D].iter().product();
    if samples.numel() != planes * D {
        return Err(size_mismatch(
            op,
            format!("random_samples.numel() ({planes} planes of {D} samples)"),
            (planes * D) as i64,
            samples.numel() as i64,
        ));
    }
    let ss = samples.contiguous()?.to_vec::<f64>()?;
    let xs = x.contiguous()?.to_vec::<f64>()?;
    let single = x.dtype() != DType::Float64;
    // PyTorch's sample order: (W, H) for 2-d, (T, H, W) for 3-d
    let sample_dim = |d: usize| if D == 2 { 1 - d } else { d };
    let plane_in: usize = in_sp.iter().product();
    let plane_out: usize = size.iter().product();
    let mut out = vec![0.0; planes * plane_out];
    let mut idx = vec![0i64; planes * plane_out];
    let mut in_strides = [1usize; D];
    for d in (0..D.saturating_sub(1)).rev() {
        in_strides[d] = in_strides[d + 1] * in_sp[d + 1];
    }
    for p in 0..planes {
        let starts: Vec<Vec<usize>> = (0..D)
            .map(|d| {
                let sample = ss[p * D + sample_dim(d)];
                if single {
                    fractional_starts(sample as f32, in_sp[d], size[d], kernel[d])
                } else {
                    fractional_starts(sample, in_sp[d], size[d], kernel[d])
                }
            })
            .collect();
        let plane = &xs[p * plane_in..][..plane_in];
        for o in 0..plane_out {
            // the output position, the window start and the first window element
            let mut rem = o;
            let mut pos = [0usize; D];
            for d in (0..D).rev() {
                pos[d] = rem % size[d];
                rem /= size[d];
            }
            let origin: Vec<usize> = (0..D).map(|d| starts[d][pos[d]]).collect();
            let mut best = f64::NEG_INFINITY;
            let mut best_at: usize = (0..D).map(|d| origin[d] * in_strides[d]).sum();
            let window: usize = kernel.iter().product();
            for w in 0..window {
                let mut rem = w;
                let mut at = 0;
                for d in (0..D).rev() {
                    at += (origin[d] + rem % kernel[d]) * in_strides[d];
                    rem /= kernel[d];
                }
                let v = plane[at];
                if v > best || v.is_nan() {
                    best = v;
                    best_at = at;
                }
            }
            out[p * plane_out + o] = best;
            idx[p * plane_out + o] = best_at as i64;
        }
    }
    let mut shape = x.shape()[..x.dim() - D].to_vec();
    shape.extend(&size);
    Ok(IValue::Tuple(Tuple::new(vec![
        IValue::Tensor(Tensor::from_vec(out, &shape)?.to_dtype(x.dtype())?),
        IValue::Tensor(Tensor::from_vec(idx, &shape)?),
    ])))
}

fn fractional_max_pool_output<const D: usize>(a: &mut Args) -> crate::Result<IValue> {
    let r = fractional_max_pool::<D>(a)?;
    a.write_outs(4, r)
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::max_pool1d", |a| max_pool_op(a, 1));
    r.add("aten::max_pool2d", |a| max_pool_op(a, 2));
    r.add("aten::max_pool3d", |a| max_pool_op(a, 3));
    r.add("aten::max_unpool2d", max_unpool::<2>);
    r.add("aten::max_unpool3d", max_unpool::<3>);
    r.add("aten::fractional_max_pool2d", fractional_max_pool::<2>);
    r.add(
        "aten::fractional_max_pool2d.output",
        fractional_max_pool_output::<2>,
    );
    r.add("aten::fractional_max_pool3d", fractional_max_pool::<3>);
    r.add(
        "aten::fractional_max_pool3d.output",
        fractional_max_pool_output::<3>,
    );
    r.add("aten::max_pool1d_with_indices", |a| {
        max_pool_with_indices(a, 1)
    });
    r.add("aten::max_pool2d_with_indices", |a| {
        max_pool_with_indices(a, 2)
    });
    r.add("aten::max_pool3d_with_indices", |a| {
        max_pool_with_indices(a, 3)
    });
    r.add("aten::avg_pool1d", |a| avg_pool_op(a, 1));
    r.add("aten::avg_pool2d", |a| avg_pool_op(a, 2));
    r.add("aten::avg_pool3d", |a| avg_pool_op(a, 3));
    r.add("aten::adaptive_avg_pool1d", |a| adaptive_avg_op(a, 1));
    r.add_all(
        &["aten::adaptive_avg_pool2d", "aten::_adaptive_avg_pool2d"],
        |a| adaptive_avg_op(a, 2),
    );
    r.add_all(
        &["aten::adaptive_avg_pool3d", "aten::_adaptive_avg_pool3d"],
        |a| adaptive_avg_op(a, 3),
    );
    r.add("aten::adaptive_max_pool1d", |a| adaptive_max_op(a, 1));
    r.add("aten::adaptive_max_pool2d", |a| adaptive_max_op(a, 2));
    r.add("aten::adaptive_max_pool3d", |a| adaptive_max_op(a, 3));
}
