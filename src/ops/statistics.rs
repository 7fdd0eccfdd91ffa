//! Covariance and correlation of variables observed together: `cov` (with a correction and
//! optional frequency and importance weights) and `corrcoef`.
//!
//! Both are ATen's composites step for step over the crate's promoting arithmetic, so dtypes
//! are PyTorch's: integral observations average to float32, and float64 weights promote a
//! float32 input's result to float64.

use super::elementwise::{add_sub, clamp_op, div_op, mul_op};
use super::kernels::operand::Operand;
use super::kernels::{check_rank, invalid_argument, size_mismatch, wrong_dtype};
use super::linalg::matmul_nd;
use super::reduce::sum_op;
use super::shape::{diagonal, reshape, squeeze_all, transpose, unsqueeze};
use super::{Args, Registry};
use crate::tensor::{DType, RankRequirement, Scalar, Tensor};
use crate::values::IValue;

type R = crate::Result<IValue>;

fn op(t: &Tensor) -> Operand {
    Operand::Tensor(t.clone())
}

/// The weights' checks shared by `fweights` and `aweights`: at most 1-D, one per observation,
/// none negative.
fn check_weights(w: &Tensor, name: &str, observations: usize) -> crate::Result<()> {
    check_rank("cov", name, RankRequirement::AtMost(1), w.shape())?;
    if w.numel() != observations {
        return Err(size_mismatch(
            "cov",
            format!("{name}.numel() (the number of observations)"),
            observations as i64,
            w.numel() as i64,
        ));
    }
    if let Some(v) = w.to_vec::<f64>()?.into_iter().find(|&v| v < 0.0) {
        return Err(invalid_argument("cov", name, "must be non-negative", v));
    }
    Ok(())
}

/// ATen's `cov(input, correction, fweights, aweights)`.
fn covariance(
    x: &Tensor,
    correction: i64,
    fweights: Option<Tensor>,
    aweights: Option<Tensor>,
) -> crate::Result<Tensor> {
    check_rank("cov", "input", RankRequirement::AtMost(2), x.shape())?;
    if x.dtype() == DType::Bool {
        return Err(wrong_dtype(
            "cov",
            "input",
            "a numeric (not bool) tensor",
            x.dtype(),
        ));
    }
    // (variables, observations)
    let input = if x.dim() < 2 {
        reshape(x, &[1, -1])?
    } else {
        x.clone()
    };
    let observations = input.shape()[1];
    let mut weights: Option<Tensor> = None;
    if let Some(fw) = &fweights {
        if !fw.dtype().is_integral(false) {
            return Err(wrong_dtype(
                "cov",
                "fweights",
                "an integral tensor",
                fw.dtype(),
            ));
        }
        check_weights(fw, "fweights", observations)?;
        weights = Some(fw.clone());
    }
    if let Some(aw) = &aweights {
        if !aw.dtype().is_floating_point() {
            return Err(wrong_dtype(
                "cov",
                "aweights",
                "a floating point tensor",
                aw.dtype(),
            ));
        }
        check_weights(aw, "aweights", observations)?;
        weights = Some(match weights {
            Some(fw) => mul_op(&op(&fw), &op(aw))?,
            None => aw.clone(),
        });
    }
    let weight_sum = match &weights {
        Some(w) => sum_op(w, None, false, None, false)?,
        None => Tensor::from_scalar(Scalar::Int(observations as i64), DType::Int64)?,
    };
    if weights.is_some() && weight_sum.item()?.to_f64() == 0.0 {
        return Err(invalid_argument(
            "cov",
            "fweights * aweights",
            "must not sum to zero (they are normalized by their sum)",
            0,
        ));
    }
    let weighted = match &weights {
        Some(w) => mul_op(&op(&input), &op(w))?,
        None => input.clone(),
    };
    let average = div_op(
        &op(&sum_op(&weighted, Some(&[1]), false, None, false)?),
        &op(&weight_sum),
        None,
    )?;
    let correction_term = Operand::Scalar(Scalar::Int(correction));
    let mut norm_factor = match (&weights, &aweights) {
        (Some(w), Some(aw)) if correction != 0 => {
            let wa = sum_op(&mul_op(&op(w), &op(aw))?, None, false, None, false)?;
            let scaled = div_op(
                &Operand::Tensor(mul_op(&correction_term, &op(&wa))?),
                &op(&weight_sum),
                None,
            )?;
            add_sub(&op(&weight_sum), &op(&scaled), Scalar::Int(1), true)?
        }
        _ => add_sub(&op(&weight_sum), &correction_term, Scalar::Int(1), true)?,
    };
    // PyTorch warns "degrees of freedom is <= 0" and divides by zero
    if norm_factor.item()?.to_f64() <= 0.0 {
        norm_factor = Tensor::zeros(&[], norm_factor.dtype())?;
    }
    let centered = add_sub(
        &op(&input),
        &op(&unsqueeze(&average, 1)?),
        Scalar::Int(1),
        true,
    )?;
    let weighted_centered = match &weights {
        Some(w) => mul_op(&op(&centered), &op(w))?,
        None => centered.clone(),
    };
    let product = matmul_nd(
        "cov",
        &centered,
        &transpose(&weighted_centered, 0, 1)?,
        None,
        1.0,
    )?;
    squeeze_all(&div_op(&op(&product), &op(&norm_factor), None)?)
}

/// `cov(self, *, correction=1, fweights=None, aweights=None)`.
fn cov(args: &mut Args<'_>) -> R {
    Ok(IValue::Tensor(covariance(
        &args.tensor(0)?,
        args.int(1)?,
        args.opt_tensor(2)?,
        args.opt_tensor(3)?,
    )?))
}

/// `corrcoef(self)`: the covariance scaled by both standard deviations, clipped to [-1, 1]; a
/// single variable gives `c / c` (1, or NaN for a zero, infinite or NaN variance).
fn corrcoef(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    check_rank("corrcoef", "input", RankRequirement::AtMost(2), x.shape())?;
    let c = covariance(&x, 1, None, None)?;
    if c.dim() == 0 {
        return Ok(IValue::Tensor(div_op(&op(&c), &op(&c), None)?));
    }
    let variances = diagonal(&c, 0, 0, 1)?;
    let stddev = crate::float_unary!(&variances, "sqrt", |v: T| v.sqrt())?;
    let n = stddev.numel() as i64;
    let c = div_op(&op(&c), &op(&reshape(&stddev, &[-1, 1])?), None)?;
    let c = div_op(&op(&c), &op(&reshape(&stddev, &[1, n])?), None)?;
    let (lo, hi) = (
        Operand::Scalar(Scalar::Int(-1)),
        Operand::Scalar(Scalar::Int(1)),
    );
    Ok(IValue::Tensor(clamp_op(&c, Some(lo), Some(hi))?))
}

pub fn register(r: &mut Registry) {
    r.add("aten::cov", cov);
    r.add("aten::corrcoef", corrcoef);
}
