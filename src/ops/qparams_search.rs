//! `aten::choose_qparams_optimized`: the greedy range search PyTorch's 4-bit and 2-bit
//! embedding prepacking uses to pick a row's quantization range
//! (aten/src/ATen/native/quantized/QTensor.cpp). Starting from the row's min and max, each
//! step tries moving the min up or the max down by `(max - min) / n_bins` and keeps the move
//! with the smaller L2 error of the uniform `bit_width`-bit fake-quantization (scale and min
//! rounded through float16, as the packed rows store them); the range at the last local
//! optimum wins. Computed in float32 in PyTorch's operation order, so the result is
//! bit-exact.

use super::kernels::shape_err;
use super::{Args, Registry};
use crate::ops::kernels::{invalid_argument, unsupported_feature};
use crate::tensor::TensorError;
use crate::tensor::{DType, Tensor};
use crate::values::{IValue, Tuple};
use half::f16;

/// Loss evaluations (times the row length) the search may run: PyTorch's loop runs about
/// `n_bins * ratio` steps of two evaluations each; beyond this it is refused.
const MAX_SEARCH_WORK: u128 = 1 << 34;

fn through_half(x: f32) -> f32 {
    f16::from_f32(x).to_f32()
}

/// `std::min(a, b)` / `std::max(a, b)` as C++ defines them (the first argument unless the
/// comparison holds), which fixes where a NaN goes.
fn cpp_min(a: f32, b: f32) -> f32 {
    if b < a {
        b
    } else {
        a
    }
}
fn cpp_max(a: f32, b: f32) -> f32 {
    if a < b {
        b
    } else {
        a
    }
}

/// `calculate_quant_loss`: the L2 norm of `x - fake_quant(x)` for the range `[xmin, xmax]`.
fn quant_loss(x: &[f32], xmin: f32, xmax: f32, qmax: f32) -> f32 {
    let xmin = through_half(xmin);
    let range = xmax - xmin;
    let scale = if range == 0.0 {
        1.0
    } else {
        through_half(range / qmax)
    };
    let inverse = if scale == 0.0 { 1.0 } else { 1.0 / scale };
    let mut norm = 0.0f32;
    for &v in x {
        let q = cpp_max(0.0, cpp_min(((v - xmin) * inverse).round_ties_even(), qmax));
        let q = q * scale + xmin;
        norm += (v - q) * (v - q);
    }
    norm.sqrt()
}

/// `std::min_element` / `std::max_element`: the first extreme element by `<`.
fn first_extremes(x: &[f32]) -> Option<(f32, f32)> {
    let (&first, rest) = x.split_first()?;
    Some(rest.iter().fold((first, first), |(lo, hi), &v| {
        (if v < lo { v } else { lo }, if hi < v { v } else { hi })
    }))
}

/// The first `numel` elements of `t`'s memory from its storage offset, as PyTorch reads them
/// through `data_ptr` (the logical order only for a contiguous tensor).
fn memory_prefix(op: &str, t: &Tensor, numel: usize) -> crate::Result<Vec<f32>> {
    let flat = if t.is_contiguous() {
        t.clone()
    } else {
        t.as_strided(&[numel], &[1], t.storage_offset())
            .map_err(|e| shape_err(format!("{op}: reading the input's memory: {e}")))?
    };
    let mut v = flat.contiguous()?.to_vec::<f32>()?;
    v.truncate(numel);
    Ok(v)
}

/// choose_qparams_optimized(input, numel, n_bins, ratio, bit_width) -> (xmax [1], xmin [1])
fn choose_qparams_optimized(a: &mut Args<'_>) -> crate::Result<IValue> {
    let op = a.op;
    let x = a.tensor(0)?;
    let (numel, n_bins, ratio, bit_width) = (a.int(1)?, a.int(2)?, a.double(3)?, a.int(4)?);
    if x.dtype() != DType::Float32 {
        return Err(TensorError::DTypeMismatch {
            expected: DType::Float32,
            got: x.dtype(),
        }
        .into());
    }
    if x.numel() == 0 {
        return Err(invalid_argument(op, "input.numel()", "must be positive", 0));
    }
    let numel = usize::try_from(numel)
        .ok()
        .filter(|&n| n <= x.numel())
        .ok_or_else(|| {
            invalid_argument(
                op,
                "numel",
                format!("must be in [0, {}] (the input's size)", x.numel()),
                numel,
            )
        })?;
    if !(0..=30).contains(&bit_width) {
        return Err(unsupported_feature(
            op,
            format!("bit_width {bit_width} (PyTorch computes (1 << bit_width) in a 32-bit int)"),
        ));
    }
    let raw = memory_prefix(op, &x, numel.max(1))?;
    // an empty range's min_element is its end: the first element
    let (mut xmin, mut xmax) = match first_extremes(&raw[..numel]) {
        Some(e) => e,
        None => (raw[0], raw[0]),
    };
    let data = x.contiguous()?.to_vec::<f32>()?;
    let input = &data[..numel];
    let qmax = ((1i64 << bit_width) - 1) as f32;
    let bins = n_bins as f32;
    let stepsize = (xmax - xmin) / bins;
    let min_bins = (f64::from(bins) * (1.0 - ratio)) as f32;
    let mut best = quant_loss(input, xmin, xmax, qmax);
    let (mut cur_min, mut cur_max, mut cur_loss) = (xmin, xmax, best);
    let thr = min_bins * stepsize;
    let mut work: u128 = 0;
    while cur_min + thr < cur_max {
        work += 2 * numel.max(1) as u128;
        if work > MAX_SEARCH_WORK {
            return Err(unsupported_feature(
                op,
                format!(
                    "a search over {n_bins} bins of {numel} values (beyond tsrun's work bound)"
                ),
            ));
        }
        let loss_up = quant_loss(input, cur_min + stepsize, cur_max, qmax);
        let loss_down = quant_loss(input, cur_min, cur_max - stepsize, qmax);
        if cur_loss < loss_up && cur_loss < loss_down && cur_loss < best {
            // a local optimum
            best = cur_loss;
            xmin = cur_min;
            xmax = cur_max;
        }
        let (before_min, before_max) = (cur_min, cur_max);
        if loss_up < loss_down {
            cur_min += stepsize;
            cur_loss = loss_up;
        } else {
            cur_max -= stepsize;
            cur_loss = loss_down;
        }
        if cur_min == before_min && cur_max == before_max {
            return Err(unsupported_feature(
                op,
                format!(
                    "a step ({stepsize}) that no longer moves the range [{cur_min}, {cur_max}] \
                     (PyTorch loops forever here)"
                ),
            ));
        }
    }
    let one = |v: f32| Tensor::from_vec(vec![v], &[1]).map(IValue::Tensor);
    Ok(IValue::Tuple(Tuple::new(vec![one(xmax)?, one(xmin)?])))
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::choose_qparams_optimized", choose_qparams_optimized);
}
