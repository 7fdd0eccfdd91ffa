//! Automatic mixed precision's loss-scale update (`torch.amp.GradScaler.update`):
//! `_amp_update_scale_` and its functional twin, as PyTorch's CPU kernel computes them.

use super::kernels::value_err;
use super::{Args, Registry};
use crate::tensor::Tensor;
use crate::values::IValue;

type R = crate::Result<IValue>;

/// The new (scale, growth tracker): backed off when an inf was found, else grown after
/// `growth_interval` clean steps (kept when growing would overflow).
fn updated_scale(a: &Args<'_>) -> crate::Result<(Tensor, Tensor, f32, i32)> {
    let (scale, tracker, found_inf) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
    for (t, what) in [
        (&scale, "scale"),
        (&tracker, "growth_tracker"),
        (&found_inf, "found_inf"),
    ] {
        if t.numel() != 1 {
            return Err(value_err(format!(
                "{}: {what} must be a one-element tensor",
                a.op
            )));
        }
    }
    let (growth, backoff, interval) = (a.double(3)?, a.double(4)?, a.int(5)?);
    let mut s = scale.item()?.to_f64() as f32;
    let mut g = tracker.item()?.to_f64() as i32;
    if found_inf.item()?.to_f64() != 0.0 {
        s = (s as f64 * backoff) as f32;
        g = 0;
    } else {
        let successful = g + 1;
        if i64::from(successful) == interval {
            let grown = (s as f64 * growth) as f32;
            if grown.is_finite() {
                s = grown;
            }
            g = 0;
        } else {
            g = successful;
        }
    }
    Ok((scale, tracker, s, g))
}

/// `_amp_update_scale_(self, growth_tracker, found_inf, growth, backoff, interval)`: updates the
/// scale and the tracker in place, returns the scale.
fn amp_update_scale_(a: &mut Args<'_>) -> R {
    let (scale, tracker, s, g) = updated_scale(a)?;
    scale.fill(crate::tensor::Scalar::Float(f64::from(s)))?;
    tracker.fill(crate::tensor::Scalar::Int(i64::from(g)))?;
    Ok(scale.into())
}

/// `_amp_update_scale(...)`: the updated (scale, growth_tracker) as new tensors.
fn amp_update_scale(a: &mut Args<'_>) -> R {
    let (scale, tracker, s, g) = updated_scale(a)?;
    let new_scale = Tensor::zeros(scale.shape(), scale.dtype())?;
    new_scale.fill(crate::tensor::Scalar::Float(f64::from(s)))?;
    let new_tracker = Tensor::zeros(tracker.shape(), tracker.dtype())?;
    new_tracker.fill(crate::tensor::Scalar::Int(i64::from(g)))?;
    Ok(IValue::tuple(vec![new_scale.into(), new_tracker.into()]))
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::_amp_update_scale_", amp_update_scale_);
    r.add("aten::_amp_update_scale", amp_update_scale);
}
