//! Fused optimizer steps (`_fused_sgd`, `_fused_adagrad`, `_fused_adam`, `_fused_adamw`) and
//! the mixed-precision loss-scale ops (`_amp_foreach_non_finite_check_and_unscale`,
//! `_amp_update_scale`): element-wise tensor-list math following PyTorch's CPU kernels
//! (aten/src/ATen/native/cpu/Fused*Kernel.cpp, AmpGradScalerKernels.cpp). Each in-place
//! overload updates the caller's tensors; its functional twin updates copies and returns them.

use super::kernels::{check_size, size_mismatch, wrong_dtype};
use super::shape::tensor_list;
use super::{Args, Registry};
use crate::tensor::{DType, Tensor};
use crate::values::{IValue, Tuple};

type R = crate::Result<IValue>;

/// The single value of a one-element tensor argument (a step count, a scale, a tensor lr).
fn single(op: &str, what: &str, t: &Tensor) -> crate::Result<f64> {
    if t.numel() != 1 {
        return Err(size_mismatch(
            op,
            format!("the number of elements of {what} (shape {:?})", t.shape()),
            1,
            t.numel() as i64,
        ));
    }
    Ok(t.item()?.to_f64())
}

fn values(t: &Tensor) -> crate::Result<Vec<f64>> {
    t.contiguous()?.to_vec::<f64>()
}

fn store(t: &Tensor, v: Vec<f64>) -> crate::Result<()> {
    t.copy_from(&Tensor::from_vec(v, t.shape())?)
}

/// Every list as long as the parameter list, every tensor shaped as its parameter.
fn check_lists(op: &str, params: &[Tensor], lists: &[(&str, &[Tensor])]) -> crate::Result<()> {
    for (name, list) in lists {
        if list.len() != params.len() {
            return Err(size_mismatch(
                op,
                format!("the number of tensors in {name} (parameters)"),
                params.len() as i64,
                list.len() as i64,
            ));
        }
        for (p, t) in params.iter().zip(list.iter()) {
            if t.numel() != p.numel() {
                return Err(size_mismatch(
                    op,
                    format!(
                        "the number of elements of a tensor of {name} of shape {:?} (its \
                         parameter's {:?})",
                        t.shape(),
                        p.shape()
                    ),
                    p.numel() as i64,
                    t.numel() as i64,
                ));
            }
        }
    }
    Ok(())
}

/// One step count per parameter.
fn check_steps(op: &str, params: &[Tensor], steps: &[Tensor]) -> crate::Result<()> {
    check_size(
        op,
        "the number of state_steps (parameters)",
        params.len() as i64,
        steps.len() as i64,
    )
}

/// `grad_scale` and `found_inf` (the last two arguments, at `at` and `at + 1`): the scale the
/// gradients are divided by, and whether the step is skipped (found_inf == 1).
fn scaling(a: &Args, at: usize) -> crate::Result<(Option<f64>, bool)> {
    let scale = match a.opt_tensor(at)? {
        Some(t) => Some(single(a.op, "grad_scale", &t)?),
        None => None,
    };
    let skip = match a.opt_tensor(at + 1)? {
        Some(t) => single(a.op, "found_inf", &t)? == 1.0,
        None => false,
    };
    Ok((scale, skip))
}

/// The learning rate: a float, or (`TENSOR_LR`) a one-element tensor.
fn learning_rate<const TENSOR_LR: bool>(a: &Args, i: usize) -> crate::Result<f64> {
    if TENSOR_LR {
        single(a.op, "lr", &a.tensor(i)?)
    } else {
        a.double(i)
    }
}

/// A gradient divided by `grad_scale` (written back, as PyTorch's kernel does) and negated
/// when maximizing.
fn unscaled_grad(grad: &Tensor, scale: Option<f64>, maximize: bool) -> crate::Result<Vec<f64>> {
    let mut g = values(grad)?;
    if let Some(s) = scale {
        g.iter_mut().for_each(|v| *v /= s);
        store(grad, g.clone())?;
    }
    if maximize {
        g.iter_mut().for_each(|v| *v = -*v);
    }
    Ok(g)
}

/// Deep copies of tensor lists (the functional overloads update these).
fn copies(lists: Vec<Vec<Tensor>>) -> crate::Result<Vec<Vec<Tensor>>> {
    lists
        .into_iter()
        .map(|l| l.iter().map(Tensor::deep_clone).collect())
        .collect()
}

fn lists_tuple(lists: Vec<Vec<Tensor>>) -> IValue {
    IValue::Tuple(Tuple::new(lists.into_iter().map(tensor_list).collect()))
}

// ---- SGD: (self, grads, momentum_buffer_list, *, weight_decay, momentum, lr, dampening,
// nesterov, maximize, is_first_step, grad_scale, found_inf)

fn sgd_step<const TENSOR_LR: bool>(a: &Args, lists: &[Vec<Tensor>]) -> crate::Result<()> {
    let [params, grads, bufs] = lists else {
        return Err(size_mismatch(
            a.op,
            "the number of tensor lists",
            3,
            lists.len() as i64,
        ));
    };
    let (weight_decay, momentum) = (a.double(3)?, a.double(4)?);
    let lr = learning_rate::<TENSOR_LR>(a, 5)?;
    let dampening = a.double(6)?;
    let (nesterov, maximize, first) = (a.bool(7)?, a.bool(8)?, a.bool(9)?);
    let (scale, skip) = scaling(a, 10)?;
    check_lists(a.op, params, &[("grads", grads)])?;
    if momentum != 0.0 {
        check_lists(a.op, params, &[("momentum_buffer_list", bufs)])?;
    }
    if skip {
        return Ok(());
    }
    for (i, (p, g)) in params.iter().zip(grads).enumerate() {
        let mut grad = unscaled_grad(g, scale, maximize)?;
        let mut pv = values(p)?;
        if weight_decay != 0.0 {
            grad.iter_mut()
                .zip(&pv)
                .for_each(|(g, p)| *g += p * weight_decay);
        }
        if let (true, Some(buf)) = (momentum != 0.0, bufs.get(i)) {
            let mut bv = values(buf)?;
            for (b, g) in bv.iter_mut().zip(grad.iter_mut()) {
                *b = if first {
                    *g
                } else {
                    *b * momentum + *g * (1.0 - dampening)
                };
                *g = if nesterov { *g + *b * momentum } else { *b };
            }
            store(buf, bv)?;
        }
        pv.iter_mut().zip(&grad).for_each(|(p, g)| *p -= g * lr);
        store(p, pv)?;
    }
    Ok(())
}

fn fused_sgd_<const TENSOR_LR: bool>(a: &mut Args) -> R {
    let lists = vec![a.tensor_list(0)?, a.tensor_list(1)?, a.tensor_list(2)?];
    sgd_step::<TENSOR_LR>(a, &lists)?;
    Ok(IValue::None)
}

fn fused_sgd<const TENSOR_LR: bool>(a: &mut Args) -> R {
    let lists = copies(vec![
        a.tensor_list(0)?,
        a.tensor_list(1)?,
        a.tensor_list(2)?,
    ])?;
    sgd_step::<TENSOR_LR>(a, &lists)?;
    Ok(lists_tuple(lists))
}

// ---- Adagrad: (self, grads, state_sums, state_steps, *, lr, lr_decay, weight_decay, eps,
// maximize, grad_scale, found_inf)

fn adagrad_step<const TENSOR_LR: bool>(a: &Args, lists: &[Vec<Tensor>]) -> crate::Result<()> {
    let [params, grads, sums, steps] = lists else {
        return Err(size_mismatch(
            a.op,
            "the number of tensor lists",
            4,
            lists.len() as i64,
        ));
    };
    let lr = learning_rate::<TENSOR_LR>(a, 4)?;
    let (lr_decay, weight_decay, eps) = (a.double(5)?, a.double(6)?, a.double(7)?);
    let maximize = a.bool(8)?;
    let (scale, skip) = scaling(a, 9)?;
    check_lists(a.op, params, &[("grads", grads), ("state_sums", sums)])?;
    check_steps(a.op, params, steps)?;
    if skip {
        return Ok(());
    }
    for (((p, g), s), step) in params.iter().zip(grads).zip(sums).zip(steps) {
        // (PyTorch reads the step as a float)
        let step = single(a.op, "state_step", step)? as f32 as f64;
        let clr = lr / (1.0 + (step - 1.0) * lr_decay);
        let mut grad = unscaled_grad(g, scale, maximize)?;
        let mut pv = values(p)?;
        let mut sv = values(s)?;
        if weight_decay != 0.0 {
            grad.iter_mut()
                .zip(&pv)
                .for_each(|(g, p)| *g += p * weight_decay);
        }
        for ((p, s), g) in pv.iter_mut().zip(sv.iter_mut()).zip(&grad) {
            *s += g * g;
            *p -= clr * g / (s.sqrt() + eps);
        }
        store(s, sv)?;
        store(p, pv)?;
    }
    Ok(())
}

fn fused_adagrad_<const TENSOR_LR: bool>(a: &mut Args) -> R {
    let lists: Vec<Vec<Tensor>> = (0..4).map(|i| a.tensor_list(i)).collect::<Result<_, _>>()?;
    adagrad_step::<TENSOR_LR>(a, &lists)?;
    Ok(IValue::None)
}

/// The functional Adagrad step; the float-lr overload also returns (copies of) the
/// state_steps, the tensor-lr one does not (their schemas differ so).
fn fused_adagrad<const TENSOR_LR: bool>(a: &mut Args) -> R {
    let mut lists = copies((0..4).map(|i| a.tensor_list(i)).collect::<Result<_, _>>()?)?;
    adagrad_step::<TENSOR_LR>(a, &lists)?;
    if TENSOR_LR {
        lists.truncate(3);
    }
    Ok(lists_tuple(lists))
}

// ---- Adam / AdamW: (self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr,
// beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf)

fn adam_step<const TENSOR_LR: bool, const DECOUPLED: bool>(
    a: &Args,
    lists: &[Vec<Tensor>],
) -> crate::Result<()> {
    let [params, grads, avgs, sqs, maxes, steps] = lists else {
        return Err(size_mismatch(
            a.op,
            "the number of tensor lists",
            6,
            lists.len() as i64,
        ));
    };
    let lr = learning_rate::<TENSOR_LR>(a, 6)?;
    let (beta1, beta2) = (a.double(7)?, a.double(8)?);
    let (weight_decay, eps) = (a.double(9)?, a.double(10)?);
    let (amsgrad, maximize) = (a.bool(11)?, a.bool(12)?);
    let (scale, skip) = scaling(a, 13)?;
    check_lists(
        a.op,
        params,
        &[("grads", grads), ("exp_avgs", avgs), ("exp_avg_sqs", sqs)],
    )?;
    if amsgrad {
        check_lists(a.op, params, &[("max_exp_avg_sqs", maxes)])?;
    } else if !maxes.is_empty() {
        return Err(size_mismatch(
            a.op,
            "the number of max_exp_avg_sqs without amsgrad",
            0,
            maxes.len() as i64,
        ));
    }
    check_steps(a.op, params, steps)?;
    if skip {
        return Ok(());
    }
    for (i, (p, g)) in params.iter().zip(grads).enumerate() {
        let step = single(a.op, "state_step", &steps[i])? as f32 as f64;
        let bias_correction1 = 1.0 - beta1.powf(step);
        let bias_correction2_sqrt = (1.0 - beta2.powf(step)).sqrt();
        let step_size = lr / bias_correction1;
        let mut grad = unscaled_grad(g, scale, maximize)?;
        let mut pv = values(p)?;
        let mut av = values(&avgs[i])?;
        let mut sv = values(&sqs[i])?;
        let mut mv = match (amsgrad, maxes.get(i)) {
            (true, Some(m)) => Some(values(m)?),
            _ => None,
        };
        if weight_decay != 0.0 {
            if DECOUPLED {
                pv.iter_mut().for_each(|p| *p *= 1.0 - lr * weight_decay);
            } else {
                grad.iter_mut()
                    .zip(&pv)
                    .for_each(|(g, p)| *g += p * weight_decay);
            }
        }
        for (k, ((p, g), (m1, m2))) in pv
            .iter_mut()
            .zip(&grad)
            .zip(av.iter_mut().zip(sv.iter_mut()))
            .enumerate()
        {
            *m1 += (1.0 - beta1) * (g - *m1);
            *m2 = *m2 * beta2 + (1.0 - beta2) * g * g;
            let second = match mv.as_mut().and_then(|m| m.get_mut(k)) {
                Some(max) => {
                    *max = max.max(*m2);
                    *max
                }
                None => *m2,
            };
            let denominator = second.sqrt() / bias_correction2_sqrt + eps;
            *p -= step_size * *m1 / denominator;
        }
        store(p, pv)?;
        store(&avgs[i], av)?;
        store(&sqs[i], sv)?;
        if let (Some(m), Some(mt)) = (mv, maxes.get(i)) {
            store(mt, m)?;
        }
    }
    Ok(())
}

fn fused_adam_<const TENSOR_LR: bool, const DECOUPLED: bool>(a: &mut Args) -> R {
    let lists: Vec<Vec<Tensor>> = (0..6).map(|i| a.tensor_list(i)).collect::<Result<_, _>>()?;
    adam_step::<TENSOR_LR, DECOUPLED>(a, &lists)?;
    Ok(IValue::None)
}

fn fused_adam<const TENSOR_LR: bool, const DECOUPLED: bool>(a: &mut Args) -> R {
    let mut lists = copies((0..6).map(|i| a.tensor_list(i)).collect::<Result<_, _>>()?)?;
    adam_step::<TENSOR_LR, DECOUPLED>(a, &lists)?;
    // (the state_steps are not among the results)
    lists.truncate(5);
    Ok(lists_tuple(lists))
}

// ---- Gradient scaling for mixed precision

/// Multiplies every tensor by `inv_scale` and sets `found_inf` to 1 when any element is
/// infinite or NaN.
fn non_finite_check_and_unscale(
    op: &str,
    tensors: &[Tensor],
    found_inf: &Tensor,
    inv_scale: &Tensor,
) -> crate::Result<()> {
    let inv = single(op, "inv_scale", inv_scale)?;
    single(op, "found_inf", found_inf)?;
    if found_inf.dtype() != DType::Float32 || inv_scale.dtype() != DType::Float32 {
        let (argument, got) = if found_inf.dtype() != DType::Float32 {
            ("found_inf", found_inf.dtype())
        } else {
            ("inv_scale", inv_scale.dtype())
        };
        return Err(wrong_dtype(op, argument, "float32", got));
    }
    for t in tensors {
        if !t.dtype().is_floating_point() {
            return Err(wrong_dtype(op, "self", "floating-point tensors", t.dtype()));
        }
        let mut v = values(t)?;
        if v.iter().any(|x| !x.is_finite()) {
            found_inf.fill(crate::tensor::Scalar::Float(1.0))?;
        }
        if inv != 1.0 {
            v.iter_mut().for_each(|x| *x *= inv);
            store(t, v)?;
        }
    }
    Ok(())
}

fn amp_unscale_(a: &mut Args) -> R {
    let (ts, found_inf, inv) = (a.tensor_list(0)?, a.tensor(1)?, a.tensor(2)?);
    non_finite_check_and_unscale(a.op, &ts, &found_inf, &inv)?;
    Ok(IValue::None)
}

fn amp_unscale(a: &mut Args) -> R {
    let ts = copies(vec![a.tensor_list(0)?])?.concat();
    let (found_inf, inv) = (a.tensor(1)?.deep_clone()?, a.tensor(2)?);
    non_finite_check_and_unscale(a.op, &ts, &found_inf, &inv)?;
    Ok(IValue::Tuple(Tuple::new(vec![
        tensor_list(ts),
        IValue::Tensor(found_inf),
    ])))
}

/// `_amp_update_scale_(self, growth_tracker, found_inf, growth_factor, backoff_factor,
/// growth_interval)`: backs the scale off after an overflow, grows it after `growth_interval`
/// clean steps in a row (when the grown scale stays finite).
fn update_scale(a: &Args, scale: &Tensor, tracker: &Tensor) -> crate::Result<()> {
    let found_inf = single(a.op, "found_inf", &a.tensor(2)?)?;
    let (growth, backoff) = (a.double(3)?, a.double(4)?);
    let interval = a.int(5)?;
    let current = single(a.op, "scale", scale)?;
    let successful = single(a.op, "growth_tracker", tracker)?;
    if scale.dtype() != DType::Float32 || tracker.dtype() != DType::Int32 {
        return Err(if scale.dtype() != DType::Float32 {
            wrong_dtype(a.op, "scale", "float32", scale.dtype())
        } else {
            wrong_dtype(a.op, "growth_tracker", "int32", tracker.dtype())
        });
    }
    let (new_scale, new_tracker) = if found_inf != 0.0 {
        (current * backoff, 0.0)
    } else if successful + 1.0 == interval as f64 {
        let grown = (current * growth) as f32;
        (
            if grown.is_finite() {
                grown as f64
            } else {
                current
            },
            0.0,
        )
    } else {
        (current, successful + 1.0)
    };
    store(scale, vec![new_scale])?;
    store(tracker, vec![new_tracker])
}

fn amp_update_scale_(a: &mut Args) -> R {
    let (scale, tracker) = (a.tensor(0)?, a.tensor(1)?);
    update_scale(a, &scale, &tracker)?;
    Ok(IValue::Tensor(scale))
}

fn amp_update_scale(a: &mut Args) -> R {
    let (scale, tracker) = (a.tensor(0)?.deep_clone()?, a.tensor(1)?.deep_clone()?);
    update_scale(a, &scale, &tracker)?;
    Ok(IValue::Tuple(Tuple::new(vec![
        IValue::Tensor(scale),
        IValue::Tensor(tracker),
    ])))
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::_fused_sgd_", fused_sgd_::<false>);
    r.add("aten::_fused_sgd_.tensor_lr", fused_sgd_::<true>);
    r.add("aten::_fused_sgd", fused_sgd::<false>);
    r.add("aten::_fused_sgd.tensor_lr", fused_sgd::<true>);
    r.add("aten::_fused_adagrad_", fused_adagrad_::<false>);
    r.add("aten::_fused_adagrad_.tensor_lr", fused_adagrad_::<true>);
    r.add("aten::_fused_adagrad", fused_adagrad::<false>);
    r.add("aten::_fused_adagrad.tensor_lr", fused_adagrad::<true>);
    r.add("aten::_fused_adam_", fused_adam_::<false, false>);
    r.add("aten::_fused_adam_.tensor_lr", fused_adam_::<true, false>);
    r.add("aten::_fused_adam", fused_adam::<false, false>);
    r.add("aten::_fused_adam.tensor_lr", fused_adam::<true, false>);
    r.add("aten::_fused_adamw_", fused_adam_::<false, true>);
    r.add("aten::_fused_adamw_.tensor_lr", fused_adam_::<true, true>);
    r.add("aten::_fused_adamw", fused_adam::<false, true>);
    r.add("aten::_fused_adamw.tensor_lr", fused_adam::<true, true>);
    r.add(
        "aten::_amp_foreach_non_finite_check_and_unscale_",
        amp_unscale_,
    );
    r.add(
        "aten::_amp_foreach_non_finite_check_and_unscale",
        amp_unscale,
    );
    r.add("aten::_amp_update_scale_", amp_update_scale_);
    r.add("aten::_amp_update_scale", amp_update_scale);
}
