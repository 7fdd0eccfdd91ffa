//! Monte Carlo sampling: N stochastic passes of a module (dropout active through `train()` or a
//! flag such as darts' `mc_dropout_enabled`), run in parallel, each with its own generator so
//! the result depends only on the seed, not on scheduling or on other threads.

use super::{module_err, Module};
use crate::ops::{grad_mode, OpContext};
use crate::tensor::Tensor;
use crate::values::IValue;
use crate::Result;
use rayon::prelude::*;

/// The passes of [`Module::mc_samples`]: `samples` stacks them on a new first dimension;
/// `mean` and `variance` (unbiased, as `torch.var`) reduce over it. All in the output's dtype.
#[derive(Clone, Debug)]
pub struct McSamples {
    /// Every pass's output, stacked on a new first dimension.
    pub samples: Tensor,
    /// The mean over the passes.
    pub mean: Tensor,
    /// The unbiased variance over the passes.
    pub variance: Tensor,
}

/// Upper bound on the number of passes (each keeps a whole output alive until stacked).
pub const MAX_MC_SAMPLES: usize = 1 << 20;

impl Module {
    /// `n` calls `m(*inputs)` (hooks included); pass `i` draws from a generator seeded
    /// `seed + i` (`torch.manual_seed(seed + i)`), so the same seed gives the same samples and
    /// different seeds differ. The passes run in parallel. The result must be a tensor of one
    /// shape in every pass.
    pub fn mc_samples(&self, inputs: &[IValue], n: usize, seed: u64) -> Result<McSamples> {
        if n == 0 || n > MAX_MC_SAMPLES {
            return Err(module_err(format!(
                "mc_samples needs between 1 and {MAX_MC_SAMPLES} passes, got {n}"
            )));
        }
        let grad = grad_mode::is_grad_enabled();
        let outputs: Vec<Tensor> = (0..n)
            .into_par_iter()
            .map(|i| {
                let ctx = OpContext::with_seed(seed.wrapping_add(i as u64));
                let out =
                    grad_mode::with_grad_enabled(grad, || self.call_with(inputs.to_vec(), &ctx))?;
                match out {
                    IValue::Tensor(t) => Ok(t),
                    other => Err(module_err(format!(
                        "mc_samples needs a module returning a Tensor, got a {}",
                        other.kind_name()
                    ))),
                }
            })
            .collect::<Result<_>>()?;
        let first = &outputs[0];
        let (shape, dtype) = (first.shape().to_vec(), first.dtype());
        if !dtype.is_floating_point() {
            return Err(module_err(format!(
                "mc_samples averages floating-point outputs, got {dtype}"
            )));
        }
        let numel = first.numel();
        let mut stacked = Vec::with_capacity(numel.saturating_mul(n));
        for t in &outputs {
            if t.shape() != shape.as_slice() {
                return Err(module_err(format!(
                    "mc_samples: passes returned shapes {:?} and {:?}",
                    shape,
                    t.shape()
                )));
            }
            stacked.extend(t.to_vec::<f64>()?);
        }
        let mut mean = vec![0.0f64; numel];
        for pass in stacked.chunks(numel.max(1)) {
            for (m, v) in mean.iter_mut().zip(pass) {
                *m += v;
            }
        }
        mean.iter_mut().for_each(|m| *m /= n as f64);
        let mut variance = vec![0.0f64; numel];
        for pass in stacked.chunks(numel.max(1)) {
            for ((s, v), m) in variance.iter_mut().zip(pass).zip(&mean) {
                *s += (v - m) * (v - m);
            }
        }
        // torch.var's default correction=1: one pass has no variance (NaN, as PyTorch)
        variance.iter_mut().for_each(|s| *s /= (n as f64) - 1.0);
        let mut stacked_shape = vec![n];
        stacked_shape.extend(&shape);
        let cast = |v: Vec<f64>, shape: &[usize]| -> Result<Tensor> {
            Tensor::from_vec(v, shape)?.to_dtype(dtype)
        };
        Ok(McSamples {
            samples: cast(stacked, &stacked_shape)?,
            mean: cast(mean, &shape)?,
            variance: cast(variance, &shape)?,
        })
    }
}
