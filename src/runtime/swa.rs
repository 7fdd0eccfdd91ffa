//! `torch.optim.swa_utils` for loaded modules: [`AveragedModel`] (SWA, EMA or a user averaging
//! function over parameters, optionally buffers) and [`update_bn`].
//!
//! The averaged module is an independent copy of the first model (an archive round trip), so
//! it keeps the original architecture: `averaged.module().save(path)` writes an archive that
//! `torch.jit.load` loads, whose `state_dict()` holds the averages. Arithmetic follows
//! PyTorch's: `torch._foreach_lerp_` in the tensor's compute type (float for float32, half and
//! bfloat16; double for float64) for floating tensors, and its integer fallbacks otherwise.

#![deny(missing_docs)]

use crate::ops::grad_mode;
use crate::runtime::module::decls::parse_literal;
use crate::runtime::Module;
use crate::tensor::{DType, Scalar, Tensor};
use crate::values::IValue;
use crate::{Error, Result};
use rayon::prelude::*;
use std::sync::Arc;

/// `avg_fn(averaged, current, n_averaged) -> new average`, applied tensor by tensor.
pub type AvgFn = Arc<dyn Fn(&Tensor, &Tensor, i64) -> Result<Tensor> + Send + Sync>;

/// `multi_avg_fn(averaged, current, n_averaged)`: updates every averaged tensor in place.
pub type MultiAvgFn = Arc<dyn Fn(&[Tensor], &[Tensor], i64) -> Result<()> + Send + Sync>;

fn swa_err(msg: impl Into<String>) -> Error {
    Error::Module(msg.into())
}

/// How an [`AveragedModel`] combines a new model into its average.
#[derive(Clone)]
enum Averaging {
    Multi(MultiAvgFn),
    PerTensor(AvgFn),
}

/// `torch.optim.swa_utils.AveragedModel`: a copy of a module whose parameters (and, with
/// `use_buffers`, buffers) are the running average of the models passed to
/// [`update_parameters`](AveragedModel::update_parameters).
#[derive(Clone)]
pub struct AveragedModel {
    module: Module,
    n_averaged: i64,
    averaging: Averaging,
    use_buffers: bool,
}

impl AveragedModel {
    /// `AveragedModel(model)`: equal-weight averaging (SWA), parameters only.
    pub fn new(model: &Module) -> Result<AveragedModel> {
        let copy = Module::load_bytes(&model.to_archive_bytes(&[])?)?;
        Ok(AveragedModel {
            module: copy,
            n_averaged: 0,
            averaging: Averaging::Multi(get_swa_multi_avg_fn()),
            use_buffers: false,
        })
    }

    /// `multi_avg_fn=get_ema_multi_avg_fn(decay)`: exponential moving average.
    pub fn ema(self, decay: f64) -> Result<AveragedModel> {
        Ok(self.multi_avg_fn(get_ema_multi_avg_fn(decay)?))
    }

    /// `avg_fn=f`: `f(averaged, current, n_averaged)` per tensor.
    pub fn avg_fn(mut self, f: AvgFn) -> AveragedModel {
        self.averaging = Averaging::PerTensor(f);
        self
    }

    /// `multi_avg_fn=f`: `f(averaged tensors, current tensors, n_averaged)` over all tensors.
    pub fn multi_avg_fn(mut self, f: MultiAvgFn) -> AveragedModel {
        self.averaging = Averaging::Multi(f);
        self
    }

    /// `use_buffers=flag`: average buffers too (otherwise they are copied from the latest model).
    pub fn use_buffers(mut self, flag: bool) -> AveragedModel {
        self.use_buffers = flag;
        self
    }

    /// The averaged module (the original architecture).
    pub fn module(&self) -> &Module {
        &self.module
    }

    /// `n_averaged`: how many models have been averaged in.
    pub fn n_averaged(&self) -> i64 {
        self.n_averaged
    }

    /// `averaged(*inputs)`: calls the averaged module.
    pub fn call(&self, inputs: &[IValue]) -> Result<IValue> {
        self.module.call(inputs)
    }

    fn tensors(&self, m: &Module) -> Vec<Tensor> {
        let mut t = m.parameters();
        if self.use_buffers {
            t.extend(m.buffers());
        }
        t
    }

    /// `update_parameters(model)`: the first call copies `model`'s tensors; later calls average
    /// them in. Without `use_buffers`, buffers are copied from `model` every time.
    pub fn update_parameters(&mut self, model: &Module) -> Result<()> {
        let mine = self.tensors(&self.module);
        let theirs = self.tensors(model);
        check_pairs(&mine, &theirs, "parameters")?;
        if self.n_averaged == 0 {
            mine.par_iter()
                .zip(&theirs)
                .try_for_each(|(a, m)| a.copy_from(m))?;
        } else {
            match &self.averaging {
                Averaging::Multi(f) => f(&mine, &theirs, self.n_averaged)?,
                Averaging::PerTensor(f) => {
                    let n = self.n_averaged;
                    mine.par_iter()
                        .zip(&theirs)
                        .try_for_each(|(a, m)| a.copy_from(&f(a, m, n)?))?
                }
            }
        }
        if !self.use_buffers {
            let (mine, theirs) = (self.module.buffers(), model.buffers());
            check_pairs(&mine, &theirs, "buffers")?;
            mine.par_iter()
                .zip(&theirs)
                .try_for_each(|(a, m)| a.copy_from(m))?;
        }
        self.n_averaged += 1;
        Ok(())
    }
}

fn check_pairs(mine: &[Tensor], theirs: &[Tensor], what: &str) -> Result<()> {
    if mine.len() != theirs.len() {
        return Err(swa_err(format!(
            "AveragedModel.update_parameters: the model has {} {what}, the average {}",
            theirs.len(),
            mine.len()
        )));
    }
    for (i, (a, m)) in mine.iter().zip(theirs).enumerate() {
        if a.shape() != m.shape() {
            return Err(swa_err(format!(
                "AveragedModel.update_parameters: {what} #{i} has shape {:?} in the model, {:?} in the average",
                m.shape(),
                a.shape()
            )));
        }
    }
    Ok(())
}

/// `torch.lerp(a, b, w)` as ATen computes it (two formulas keep it exact at both ends).
fn lerp<T: num_traits::Float>(a: T, b: T, w: T) -> T {
    let half = T::from(0.5).unwrap_or(w);
    if w.abs() < half {
        a + w * (b - a)
    } else {
        b - (b - a) * (T::one() - w)
    }
}

/// `a.copy_(lerp(a, b, w))` for a floating tensor `a`.
fn lerp_into(a: &Tensor, b: &Tensor, w: f64) -> Result<()> {
    let values = if a.dtype() == DType::Float64 {
        let (x, y) = (a.to_vec::<f64>()?, b.to_vec::<f64>()?);
        let v: Vec<f64> = x.iter().zip(&y).map(|(&p, &q)| lerp(p, q, w)).collect();
        Tensor::from_vec(v, a.shape())?
    } else {
        let (x, y) = (a.to_vec::<f32>()?, b.to_vec::<f32>()?);
        let w = w as f32;
        let v: Vec<f32> = x.iter().zip(&y).map(|(&p, &q)| lerp(p, q, w)).collect();
        Tensor::from_vec(v, a.shape())?
    };
    a.copy_from(&values)
}

fn is_floating(t: &Tensor) -> bool {
    t.dtype().is_floating_point()
}

/// `get_swa_multi_avg_fn()`: `average += (current - average) / (n + 1)`; floating tensors by
/// `lerp` with weight `1 / (n + 1)` (computed in float, as the tensor PyTorch builds), integer
/// tensors by integer division of the difference.
pub fn get_swa_multi_avg_fn() -> MultiAvgFn {
    Arc::new(|averaged: &[Tensor], current: &[Tensor], n: i64| {
        averaged
            .par_iter()
            .zip(current)
            .try_for_each(|(a, c)| -> Result<()> {
                if is_floating(a) {
                    let w = 1.0f32 / (n as f32 + 1.0);
                    lerp_into(a, c, w as f64)
                } else {
                    let (x, y) = (a.to_vec::<i64>()?, c.to_vec::<i64>()?);
                    let v: Vec<i64> = x
                        .iter()
                        .zip(&y)
                        .map(|(&p, &q)| p + (q - p) / (n + 1))
                        .collect();
                    a.copy_from(&Tensor::from_vec(v, a.shape())?)
                }
            })
    })
}

/// `get_ema_multi_avg_fn(decay)`: `average = decay * average + (1 - decay) * current`
/// (`lerp` with weight `1 - decay` for floating tensors; float arithmetic truncated back for
/// integer ones). `decay` must lie in [0, 1].
pub fn get_ema_multi_avg_fn(decay: f64) -> Result<MultiAvgFn> {
    check_decay(decay)?;
    Ok(Arc::new(
        move |averaged: &[Tensor], current: &[Tensor], _n: i64| {
            averaged
                .par_iter()
                .zip(current)
                .try_for_each(|(a, c)| -> Result<()> {
                    if is_floating(a) {
                        lerp_into(a, c, 1.0 - decay)
                    } else {
                        let (x, y) = (a.to_vec::<f32>()?, c.to_vec::<f32>()?);
                        let (d, e) = (decay as f32, (1.0 - decay) as f32);
                        let v: Vec<f32> = x.iter().zip(&y).map(|(&p, &q)| p * d + q * e).collect();
                        a.copy_from(&Tensor::from_vec(v, a.shape())?)
                    }
                })
        },
    ))
}

/// `get_swa_avg_fn()`: per tensor, `average + (current - average) / (n + 1)`.
pub fn get_swa_avg_fn() -> AvgFn {
    Arc::new(|a: &Tensor, c: &Tensor, n: i64| {
        let out = a.deep_clone()?;
        get_swa_multi_avg_fn()(std::slice::from_ref(&out), std::slice::from_ref(c), n)?;
        Ok(out)
    })
}

/// `get_ema_avg_fn(decay)`: per tensor, `decay * average + (1 - decay) * current`.
pub fn get_ema_avg_fn(decay: f64) -> Result<AvgFn> {
    let multi = get_ema_multi_avg_fn(decay)?;
    Ok(Arc::new(move |a: &Tensor, c: &Tensor, n: i64| {
        let out = a.deep_clone()?;
        multi(std::slice::from_ref(&out), std::slice::from_ref(c), n)?;
        Ok(out)
    }))
}

fn check_decay(decay: f64) -> Result<()> {
    if !(0.0..=1.0).contains(&decay) {
        return Err(swa_err(format!(
            "Invalid decay value {decay} provided. Please provide a value in [0,1] range."
        )));
    }
    Ok(())
}

/// A batch-norm module of the tree and the momentum compiled into its code (`None` when it
/// averages cumulatively already).
struct BatchNorm {
    running_mean: Tensor,
    running_var: Tensor,
    num_batches_tracked: Option<Tensor>,
    momentum: Option<f64>,
}

/// `isinstance(m, nn.modules.batchnorm._BatchNorm)` with running statistics tracked.
fn batch_norm(m: &Module) -> Result<Option<BatchNorm>> {
    if !m.class_name().contains(".torch.nn.modules.batchnorm.") {
        return Ok(None);
    }
    let (Some(IValue::Tensor(rm)), Some(IValue::Tensor(rv))) =
        (m.attr("running_mean"), m.attr("running_var"))
    else {
        return Ok(None);
    };
    let constant = m
        .class_decl()
        .and_then(|d| d.constants.iter().find(|(n, _, _)| n == "momentum"))
        .and_then(|(_, _, v)| parse_literal(v));
    let momentum = match constant.or_else(|| m.attr("momentum")) {
        Some(IValue::None) => None,
        Some(v) => Some(v.as_double().ok_or_else(|| {
            swa_err(format!(
                "update_bn: momentum of {} is a {}, not a float",
                m.class_name(),
                v.kind_name()
            ))
        })?),
        None => {
            return Err(swa_err(format!(
                "update_bn: {} declares no momentum",
                m.class_name()
            )))
        }
    };
    if momentum == Some(0.0) {
        return Err(swa_err(format!(
            "update_bn: {} was compiled with momentum 0, so a batch leaves no statistics to recover",
            m.class_name()
        )));
    }
    let nbt = match m.attr("num_batches_tracked") {
        Some(IValue::Tensor(t)) => Some(t),
        _ => None,
    };
    Ok(Some(BatchNorm {
        running_mean: rm,
        running_var: rv,
        num_batches_tracked: nbt,
        momentum,
    }))
}

/// `torch.optim.swa_utils.update_bn(batches, model)`: resets every batch norm's running
/// statistics, runs `model` on each batch in train mode (a list or tuple batch passes its first
/// element) and leaves the cumulative average of the batch statistics (momentum None), then
/// restores `train(was_training)`.
///
/// A scripted batch norm's momentum is a constant in its code, so it cannot be switched to None
/// as PyTorch does for eager modules: before each batch the statistics are zeroed, the batch's
/// own mean and variance are read back as `running / momentum`, and their average is stored
/// at the end, which is what momentum None computes.
pub fn update_bn(batches: impl IntoIterator<Item = IValue>, model: &Module) -> Result<()> {
    let bns: Vec<BatchNorm> = model
        .modules()
        .iter()
        .map(batch_norm)
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .flatten()
        .collect();
    if bns.is_empty() {
        return Ok(());
    }
    for bn in &bns {
        bn.running_mean.fill(Scalar::Float(0.0))?;
        bn.running_var.fill(Scalar::Float(1.0))?;
        if let Some(n) = &bn.num_batches_tracked {
            n.fill(Scalar::Int(0))?;
        }
    }
    let was_training = model.training();
    model.train(true);
    let mut sums: Vec<(Vec<f64>, Vec<f64>)> = bns
        .iter()
        .map(|b| {
            (
                vec![0.0; b.running_mean.numel()],
                vec![0.0; b.running_var.numel()],
            )
        })
        .collect();
    let mut count = 0usize;
    let result = grad_mode::no_grad(|| -> Result<()> {
        for batch in batches {
            let input = match batch {
                IValue::List(l) => l.get(0).unwrap_or_default(),
                IValue::Tuple(t) => t.items().first().cloned().unwrap_or_default(),
                v => v,
            };
            for bn in bns.iter().filter(|b| b.momentum.is_some()) {
                bn.running_mean.fill(Scalar::Float(0.0))?;
                bn.running_var.fill(Scalar::Float(0.0))?;
            }
            model.call(&[input])?;
            count += 1;
            for (bn, (mean, var)) in bns.iter().zip(sums.iter_mut()) {
                let Some(m) = bn.momentum else { continue };
                for (s, v) in mean.iter_mut().zip(bn.running_mean.to_vec::<f64>()?) {
                    *s += v / m;
                }
                for (s, v) in var.iter_mut().zip(bn.running_var.to_vec::<f64>()?) {
                    *s += v / m;
                }
            }
        }
        Ok(())
    });
    let stored = result.and_then(|()| {
        for (bn, (mean, var)) in bns.iter().zip(sums) {
            if bn.momentum.is_none() {
                continue;
            }
            if count == 0 {
                // no batch: the reset statistics stay, as in PyTorch
                bn.running_mean.fill(Scalar::Float(0.0))?;
                bn.running_var.fill(Scalar::Float(1.0))?;
                continue;
            }
            let k = count as f64;
            let shape = bn.running_mean.shape().to_vec();
            let mean: Vec<f64> = mean.into_iter().map(|s| s / k).collect();
            let var: Vec<f64> = var.into_iter().map(|s| s / k).collect();
            bn.running_mean
                .copy_from(&Tensor::from_vec(mean, &shape)?)?;
            bn.running_var
                .copy_from(&Tensor::from_vec(var, bn.running_var.shape())?)?;
        }
        Ok(())
    });
    model.train(was_training);
    stored
}
