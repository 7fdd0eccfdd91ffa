//! Fake quantization (quantization-aware training's forward): `x` quantized and dequantized in
//! one step, staying floating point, with ATen's CPU kernels' arithmetic:
//! `q = int64(zero_point + nearbyint(x * (1 / scale)))` (the sum in `x`'s float type; a float
//! zero point is added before rounding), `out = (clamp(q, qmin, qmax) - zero_point) * scale`
//! in double, stored in `x`'s dtype (through float for the per-tensor ops, as ATen's per-tensor
//! kernel does even for double input); the `_cachemask` variants also return
//! `qmin <= q <= qmax`.

use crate::ops::kernels::{
    invalid_argument, not_implemented_for, size_mismatch, unsupported_feature, wrong_dtype,
};
use crate::ops::{Args, Registry};
use crate::tensor::{DType, Tensor, TensorError};
use crate::values::{IValue, Tuple};
use crate::Result;

pub fn register(r: &mut Registry) {
    r.add("aten::fake_quantize_per_tensor_affine", |a| {
        per_tensor(a, false)
    });
    r.add("aten::fake_quantize_per_tensor_affine_cachemask", |a| {
        per_tensor(a, true)
    });
    r.add(
        "aten::fake_quantize_per_tensor_affine.tensor_qparams",
        per_tensor_tensor_qparams,
    );
    r.add(
        "aten::_fake_quantize_per_tensor_affine_cachemask_tensor_qparams",
        per_tensor_cachemask_tensor_qparams,
    );
    r.add(
        "aten::_fake_quantize_learnable_per_tensor_affine",
        learnable_per_tensor,
    );
    r.add("aten::fake_quantize_per_channel_affine", |a| {
        per_channel(a, false)
    });
    r.add("aten::fake_quantize_per_channel_affine_cachemask", |a| {
        per_channel(a, true)
    });
    r.add(
        "aten::_fake_quantize_learnable_per_channel_affine",
        learnable_per_channel,
    );
    r.add("aten::fused_moving_avg_obs_fake_quant", |a| {
        let (out, _, _) = fused_observer_fake_quant(a, false)?;
        Ok(IValue::Tensor(out))
    });
    r.add("aten::_fused_moving_avg_obs_fq_helper", |a| {
        let (out, mask, _) = fused_observer_fake_quant(a, false)?;
        Ok(IValue::Tuple(Tuple::new(vec![
            IValue::Tensor(out),
            IValue::Tensor(mask),
        ])))
    });
    r.add("aten::_fused_moving_avg_obs_fq_helper_functional", |a| {
        let (out, mask, state) = fused_observer_fake_quant(a, true)?;
        let mut items = vec![IValue::Tensor(out), IValue::Tensor(mask)];
        items.extend(state.into_iter().map(IValue::Tensor));
        Ok(IValue::Tuple(Tuple::new(items)))
    });
}

/// The moving-average min/max observer and fake quantization of quantization-aware training's
/// fused `FusedMovingAvgObsFakeQuantize` (ATen's `fused_moving_avg_obs_fake_quant_cpu`):
/// when `observer_on`, `running_min/max` move by `averaging_const` towards the input's min and
/// max (per row of the `ch_axis` = 0 view for `per_row_fake_quant`; an infinite running value
/// takes the current one); when `fake_quant_on`, `scale` and `zero_point` are chosen from them
/// (`ChooseQuantizationParams`, symmetric for `symmetric_quant`) and the input is fake
/// quantized, else returned unchanged with an all-true mask. The four state tensors (arguments
/// 3-6) are written in place; `functional` writes fresh copies instead: the result's state.
fn fused_observer_fake_quant(a: &mut Args<'_>, functional: bool) -> Result<ObserverResult> {
    let x = a.tensor(0)?;
    let flag = |i: usize| single(a, i).map(|v| v as i64 != 0);
    let (observe, fake_quant) = (flag(1)?, flag(2)?);
    let mut state = Vec::with_capacity(4);
    for i in 3..7 {
        let t = a.tensor(i)?;
        state.push(if functional { t.deep_clone()? } else { t });
    }
    let averaging = a.double(7)? as f32;
    let (qmin, qmax) = (a.int(8)?, a.int(9)?);
    let ch_axis = a.int(10)?;
    let (per_row, symmetric) = (a.bool(11)?, a.bool(12)?);
    if x.dtype() != DType::Float32 {
        return Err(wrong_dtype(a.op, "input", "float32", x.dtype()));
    }
    if ch_axis < 0 || ch_axis >= x.dim() as i64 {
        return Err(invalid_argument(
            a.op,
            "ch_axis",
            format!("must be in [0, {}) (self.dim())", x.dim()),
            ch_axis,
        ));
    }
    let (running_min, running_max, scale, zero_point) =
        (&state[0], &state[1], &state[2], &state[3]);
    let vals = x.contiguous()?.to_vec::<f32>()?;
    if per_row {
        if ch_axis != 0 {
            return Err(invalid_argument(
                a.op,
                "ch_axis",
                "must be 0 for per-channel fake quantization",
                ch_axis,
            ));
        }
        let rows = x.shape().first().copied().unwrap_or(1);
        if running_min.numel() != rows {
            return Err(unsupported_feature(
                a.op,
                format!(
                    "resizing the observer state (running_min holds {} values for {rows} rows)",
                    running_min.numel()
                ),
            ));
        }
    }
    let (qmin32, qmax32) = (
        i32::try_from(qmin)
            .map_err(|_| invalid_argument(a.op, "quant_min", "must fit int32", qmin))?,
        i32::try_from(qmax)
            .map_err(|_| invalid_argument(a.op, "quant_max", "must fit int32", qmax))?,
    );
    if observe {
        let groups = if per_row {
            x.shape().first().copied().unwrap_or(1)
        } else {
            1
        };
        let per = vals.len() / groups.max(1);
        if per == 0 {
            return Err(invalid_argument(
                a.op,
                "the elements per channel",
                "must be positive (aminmax over an empty dimension)",
                0,
            ));
        }
        let mut mins = running_min.to_vec::<f32>()?;
        let mut maxs = running_max.to_vec::<f32>()?;
        for (what, len) in [("running_min", mins.len()), ("running_max", maxs.len())] {
            if len != groups {
                return Err(size_mismatch(
                    a.op,
                    format!("the number of elements of {what}"),
                    groups as i64,
                    len as i64,
                ));
            }
        }
        for g in 0..groups {
            let row = &vals[g * per..(g + 1) * per];
            let (lo, hi) = row
                .iter()
                .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| {
                    if v.is_nan() || lo.is_nan() {
                        (f32::NAN, f32::NAN)
                    } else {
                        (lo.min(v), hi.max(v))
                    }
                });
            let step = |run: f32, cur: f32| {
                if run.is_infinite() {
                    cur
                } else {
                    run + averaging * (cur - run)
                }
            };
            mins[g] = step(mins[g], lo);
            maxs[g] = step(maxs[g], hi);
        }
        running_min.copy_from(&Tensor::from_vec(mins, running_min.shape())?)?;
        running_max.copy_from(&Tensor::from_vec(maxs, running_max.shape())?)?;
    }
    if !fake_quant {
        let mask = Tensor::from_vec(vec![true; x.numel()], x.shape())?;
        return Ok((x.deep_clone()?, mask, state));
    }
    let (mins, maxs) = (running_min.to_vec::<f32>()?, running_max.to_vec::<f32>()?);
    let n = if per_row { mins.len() } else { 1 };
    for (what, len) in [
        ("running_min", mins.len()),
        ("running_max", maxs.len()),
        ("scale", scale.numel()),
        ("zero_point", zero_point.numel()),
    ] {
        if len < n {
            return Err(invalid_argument(
                a.op,
                format!("the number of elements of {what}"),
                format!("must be at least {n}"),
                len,
            ));
        }
    }
    let mut scales = scale.to_vec::<f64>()?;
    let mut zps = zero_point.to_vec::<i64>()?;
    for i in 0..n {
        if !(mins[i] <= maxs[i]) {
            return Err(invalid_argument(
                a.op,
                "running_min",
                format!("must be at most running_max ({})", maxs[i]),
                mins[i],
            ));
        }
        let (s, z) = super::linear::choose_qparams_sparsity(
            mins[i], maxs[i], qmin32, qmax32, symmetric, false,
        );
        scales[i] = s;
        zps[i] = i64::from(z);
    }
    scale.copy_from(&Tensor::from_vec(scales, scale.shape())?.to_dtype(scale.dtype())?)?;
    zero_point
        .copy_from(&Tensor::from_vec(zps, zero_point.shape())?.to_dtype(zero_point.dtype())?)?;
    let (out, mask) = if per_row {
        per_channel_values(a, &x, scale, zero_point, ch_axis, qmin, qmax)?
    } else {
        let s = scale.to_vec::<f32>()?[0];
        let z = zero_point.to_vec::<i64>()?[0];
        per_tensor_values(a.op, &x, s, z, qmin, qmax)?
    };
    Ok((out, mask, state))
}

/// The fused observer's output, mask and (running_min, running_max, scale, zero_point).
type ObserverResult = (Tensor, Tensor, Vec<Tensor>);

/// One channel's quantization parameters.
#[derive(Clone, Copy)]
struct Params {
    scale: f32,
    zero_point: ZeroPoint,
}

#[derive(Clone, Copy)]
enum ZeroPoint {
    Int(i64),
    Float(f32),
}

/// The fake-quantized value of `x` and whether it was in range; `wide` when `x` is a double
/// (its product with the inverse scale is then a double).
fn fake_quant(x: f64, p: Params, qmin: i64, qmax: i64, wide: bool) -> (f64, bool) {
    let inv = 1.0f32 / p.scale;
    let clamp = |q: f64| q.max(qmin as f64).min(qmax as f64);
    match p.zero_point {
        ZeroPoint::Int(zp) => {
            let q = if wide {
                (zp as f64 + (x * inv as f64).round_ties_even()) as i64
            } else {
                (zp as f32 + (x as f32 * inv).round_ties_even()) as i64
            };
            let out = (clamp(q as f64) - zp as f64) * p.scale as f64;
            (out, qmin <= q && q <= qmax)
        }
        ZeroPoint::Float(zp) => {
            let r = if wide {
                (zp as f64 + x * inv as f64).round_ties_even()
            } else {
                (zp + x as f32 * inv).round_ties_even() as f64
            };
            let q = r as i64;
            let out = (clamp(r) - zp as f64) * p.scale as f64;
            (out, qmin <= q && q <= qmax)
        }
    }
}

/// Fake-quantize `x` (channel `c` of element `i` from `channel_of(i)`): the output in `x`'s
/// dtype, and the mask.
/// `per_tensor`: ATen's per-tensor kernel rounds its result to float even for double input.
fn apply(
    x: &Tensor,
    params: &[Params],
    channel_of: impl Fn(usize) -> usize,
    (qmin, qmax): (i64, i64),
    per_tensor: bool,
) -> Result<(Tensor, Tensor)> {
    let dtype = x.dtype();
    if !matches!(
        dtype,
        DType::Float32 | DType::Float64 | DType::Float16 | DType::BFloat16
    ) {
        let kernel = if per_tensor {
            "fake_quantize_tensor_cachemask_kernel_type_handling"
        } else {
            "fake_quantize_channel_cachemask_cpu_type_handling"
        };
        return Err(not_implemented_for(kernel, dtype));
    }
    let wide = dtype == DType::Float64;
    let values = x.to_vec::<f64>()?;
    let mut out = Vec::with_capacity(values.len());
    let mut mask = Vec::with_capacity(values.len());
    for (i, &v) in values.iter().enumerate() {
        let c = channel_of(i);
        let p = params
            .get(c)
            .copied()
            .ok_or(TensorError::IndexOutOfBounds {
                index: c as i64,
                dim: 0,
                size: params.len(),
            })?;
        let (o, m) = fake_quant(v, p, qmin, qmax, wide);
        out.push(if per_tensor { o as f32 as f64 } else { o });
        mask.push(m);
    }
    let out = if wide {
        Tensor::from_vec(out, x.shape())?
    } else {
        // ATen stores the double through float (c10::Half and BFloat16 convert from float)
        let narrow: Vec<f32> = out.iter().map(|&v| v as f32).collect();
        Tensor::from_vec(narrow, x.shape())?.to_dtype(dtype)?
    };
    Ok((out, Tensor::from_vec(mask, x.shape())?))
}

fn check_range(op: &str, qmin: i64, qmax: i64) -> Result<()> {
    if qmin > qmax {
        return Err(invalid_argument(
            op,
            "quant_min",
            format!("must be less than or equal to quant_max ({qmax})"),
            qmin,
        ));
    }
    Ok(())
}

fn check_zero_point(op: &str, zp: f64, qmin: i64, qmax: i64) -> Result<()> {
    if zp < qmin as f64 || zp > qmax as f64 {
        return Err(invalid_argument(
            op,
            "zero_point",
            format!("must be between quant_min ({qmin}) and quant_max ({qmax})"),
            zp,
        ));
    }
    Ok(())
}

fn result(out: Tensor, mask: Tensor, with_mask: bool) -> IValue {
    if with_mask {
        IValue::Tuple(Tuple::new(vec![IValue::Tensor(out), IValue::Tensor(mask)]))
    } else {
        IValue::Tensor(out)
    }
}

fn per_tensor_values(
    op: &str,
    x: &Tensor,
    scale: f32,
    zp: i64,
    qmin: i64,
    qmax: i64,
) -> Result<(Tensor, Tensor)> {
    check_range(op, qmin, qmax)?;
    check_zero_point(op, zp as f64, qmin, qmax)?;
    let p = Params {
        scale,
        zero_point: ZeroPoint::Int(zp),
    };
    apply(x, &[p], |_| 0, (qmin, qmax), true)
}

/// `fake_quantize_per_tensor_affine(_cachemask)(self, float scale, int zero_point, int quant_min,
/// int quant_max)`.
fn per_tensor(a: &mut Args<'_>, with_mask: bool) -> Result<IValue> {
    let x = a.tensor(0)?;
    let (scale, zp) = (a.double(1)? as f32, a.int(2)?);
    let (out, mask) = per_tensor_values(a.op, &x, scale, zp, a.int(3)?, a.int(4)?)?;
    Ok(result(out, mask, with_mask))
}

/// The single value of a one-element tensor argument.
pub(crate) fn single(a: &Args<'_>, i: usize) -> Result<f64> {
    let t = a.tensor(i)?;
    match t.to_vec::<f64>()?[..] {
        [v] => Ok(v),
        _ => Err(size_mismatch(
            a.op,
            format!("the number of elements of argument {i}"),
            1,
            t.numel() as i64,
        )),
    }
}

/// `fake_quantize_per_tensor_affine.tensor_qparams(self, Tensor scale, Tensor zero_point,
/// int quant_min, int quant_max)`.
fn per_tensor_tensor_qparams(a: &mut Args<'_>) -> Result<IValue> {
    let x = a.tensor(0)?;
    let (scale, zp) = (single(a, 1)? as f32, single(a, 2)? as i64);
    let (qmin, qmax) = (a.int(3)?, a.int(4)?);
    check_range(a.op, qmin, qmax)?;
    let p = Params {
        scale,
        zero_point: ZeroPoint::Int(zp),
    };
    Ok(IValue::Tensor(
        apply(&x, &[p], |_| 0, (qmin, qmax), true)?.0,
    ))
}

/// `_fake_quantize_per_tensor_affine_cachemask_tensor_qparams(self, scale, zero_point,
/// fake_quant_enabled, quant_min, quant_max)`: `(self, all true)` when disabled.
fn per_tensor_cachemask_tensor_qparams(a: &mut Args<'_>) -> Result<IValue> {
    let x = a.tensor(0)?;
    let (qmin, qmax) = (a.int(4)?, a.int(5)?);
    check_range(a.op, qmin, qmax)?;
    if a.tensor(3)?.to_vec::<f64>()?.first() == Some(&0.0) {
        let mask = Tensor::from_vec(vec![true; x.numel()], x.shape())?;
        return Ok(result(x.deep_clone()?, mask, true));
    }
    let (scale, zp) = (single(a, 1)? as f32, single(a, 2)? as i64);
    let p = Params {
        scale,
        zero_point: ZeroPoint::Int(zp),
    };
    let (out, mask) = apply(&x, &[p], |_| 0, (qmin, qmax), true)?;
    Ok(result(out, mask, true))
}

/// `_fake_quantize_learnable_per_tensor_affine(self, scale, zero_point, quant_min, quant_max,
/// grad_factor)`'s forward: the zero point rounded (in float) and clamped to the range.
fn learnable_per_tensor(a: &mut Args<'_>) -> Result<IValue> {
    let x = a.tensor(0)?;
    let scale = first(a, 1)? as f32;
    let (qmin, qmax) = (a.int(3)?, a.int(4)?);
    let zp = (first(a, 2)? as f32)
        .round_ties_even()
        .max(qmin as f32)
        .min(qmax as f32) as i64;
    let (out, _) = per_tensor_values(a.op, &x, scale, zp, qmin, qmax)?;
    Ok(IValue::Tensor(out))
}

/// Element 0 of tensor argument `i` (`scale[0].item()`).
fn first(a: &Args<'_>, i: usize) -> Result<f64> {
    a.tensor(i)?
        .to_vec::<f64>()?
        .first()
        .copied()
        .ok_or_else(|| {
            invalid_argument(
                a.op,
                format!("the number of elements of argument {i}"),
                "must be positive",
                0,
            )
        })
}

/// The channel of each element of `x` along `axis`.
fn channel_index(x: &Tensor, axis: usize) -> impl Fn(usize) -> usize {
    let channels = x.shape().get(axis).copied().unwrap_or(1).max(1);
    let inner: usize = x.shape()[(axis + 1).min(x.dim())..].iter().product();
    move |i| (i / inner.max(1)) % channels
}

fn per_channel_values(
    a: &Args<'_>,
    x: &Tensor,
    scale: &Tensor,
    zero_point: &Tensor,
    axis: i64,
    qmin: i64,
    qmax: i64,
) -> Result<(Tensor, Tensor)> {
    let op = a.op;
    if !matches!(scale.dtype(), DType::Float32 | DType::BFloat16) {
        return Err(wrong_dtype(
            op,
            "scale",
            "float32 or bfloat16",
            scale.dtype(),
        ));
    }
    let float_zp = match zero_point.dtype() {
        DType::Int32 => false,
        DType::Float32 | DType::Float16 => true,
        other => {
            return Err(wrong_dtype(
                op,
                "zero_point",
                "int32, float32 or float16",
                other,
            ))
        }
    };
    super::check_channel_qparams(op, scale, zero_point)?;
    check_range(op, qmin, qmax)?;
    let axis = usize::try_from(axis)
        .ok()
        .filter(|&d| d < x.dim())
        .ok_or_else(|| {
            invalid_argument(
                op,
                "axis",
                format!("must be in [0, {}) (the input's dimensions)", x.dim()),
                axis,
            )
        })?;
    if scale.numel() != x.shape()[axis] {
        return Err(size_mismatch(
            op,
            format!("the number of elements of scale (input.size({axis}))"),
            x.shape()[axis] as i64,
            scale.numel() as i64,
        ));
    }
    let scales = scale.to_vec::<f32>()?;
    let zps = zero_point.to_vec::<f64>()?;
    let (lo, hi) = zps
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &z| {
            (l.min(z), h.max(z))
        });
    // (ATen checks integer zero points only)
    if !zps.is_empty() && !float_zp {
        check_zero_point(op, lo, qmin, qmax)?;
        check_zero_point(op, hi, qmin, qmax)?;
    }
    let params: Vec<Params> = scales
        .iter()
        .zip(&zps)
        .map(|(&scale, &z)| Params {
            scale,
            zero_point: if float_zp {
                ZeroPoint::Float(z as f32)
            } else {
                ZeroPoint::Int(z as i64)
            },
        })
        .collect();
    apply(x, &params, channel_index(x, axis), (qmin, qmax), false)
}

/// `fake_quantize_per_channel_affine(_cachemask)(self, Tensor scale, Tensor zero_point,
/// int axis, int quant_min, int quant_max)`.
fn per_channel(a: &mut Args<'_>, with_mask: bool) -> Result<IValue> {
    let x = a.tensor(0)?;
    let (scale, zp) = (a.tensor(1)?, a.tensor(2)?);
    let (out, mask) = per_channel_values(a, &x, &scale, &zp, a.int(3)?, a.int(4)?, a.int(5)?)?;
    Ok(result(out, mask, with_mask))
}

/// `_fake_quantize_learnable_per_channel_affine(self, scale, zero_point, axis, quant_min,
/// quant_max, grad_factor)`'s forward: zero points rounded half to even, clamped, as int32.
fn learnable_per_channel(a: &mut Args<'_>) -> Result<IValue> {
    let x = a.tensor(0)?;
    let (qmin, qmax) = (a.int(4)?, a.int(5)?);
    let zp = a.tensor(2)?;
    let rounded: Vec<i32> = zp
        .to_vec::<f64>()?
        .iter()
        .map(|&z| z.round_ties_even().max(qmin as f64).min(qmax as f64) as i32)
        .collect();
    let zp = Tensor::from_vec(rounded, zp.shape())?;
    let scale = a.tensor(1)?;
    let (out, _) = per_channel_values(a, &x, &scale, &zp, a.int(3)?, qmin, qmax)?;
    Ok(IValue::Tensor(out))
}
