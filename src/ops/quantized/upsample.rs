//! ATen's `upsample_bilinear2d_quantized_cpu`: the bilinear weights in float applied to the
//! integers themselves, the zero point subtracted, requantized into the input's parameters.

use super::{int_values, make_quantized, per_tensor_params, quantize_val};
use crate::ops::kernels::{check_rank, wrong_dtype};
use crate::tensor::{RankRequirement, Tensor};
use crate::Result;

/// `area_pixel_compute_scale<float>`: `scale` (when given and positive) as `float(1.0 /
/// scale)`, else `float(input) / output`.
fn area_scale(input: usize, output: usize, align_corners: bool, scale: Option<f64>) -> f32 {
    if align_corners {
        if output > 1 {
            (input as f32 - 1.0) / (output as f32 - 1.0)
        } else {
            0.0
        }
    } else {
        match scale {
            Some(s) if s > 0.0 => (1.0 / s) as f32,
            _ => input as f32 / output as f32,
        }
    }
}

/// One output index's source: (index, whether a next one exists, its weight, next weight),
/// as `area_pixel_compute_source_index<float>` and the kernel's lambdas.
fn source(scale: f32, dst: usize, align_corners: bool, input: usize) -> (usize, usize, f32, f32) {
    let r = if align_corners {
        scale * dst as f32
    } else {
        (scale * (dst as f32 + 0.5) - 0.5).max(0.0)
    };
    let i = (r as usize).min(input.saturating_sub(1));
    let next = usize::from(i + 1 < input);
    let l1 = r - i as f32;
    (i, next, 1.0 - l1, l1)
}

/// Bilinear upsampling of the quantized NCHW `x` to `out` (`[height, width]`).
pub(crate) fn bilinear2d(
    op: &str,
    x: &Tensor,
    out: &[usize],
    align_corners: bool,
    scales: &[Option<f64>],
) -> Result<Tensor> {
    let shape = x.shape().to_vec();
    check_rank(op, "input", RankRequirement::Exactly(4), &shape)?;
    let (_, zp) = per_tensor_params(op, x)?;
    let q = x
        .quantizer()
        .map(|q| (**q).clone())
        .ok_or_else(|| wrong_dtype(op, "input", "quantized", x.dtype()))?;
    let range = x
        .dtype()
        .quantized_range()
        .ok_or_else(|| wrong_dtype(op, "input", "quantized", x.dtype()))?;
    let (ih, iw) = (shape[2], shape[3]);
    let [oh, ow] = [out[0], out[1]];
    let out_shape = [shape[0], shape[1], oh, ow];
    let xv = int_values(x)?;
    if (ih, iw) == (oh, ow) {
        return make_quantized(&xv, &out_shape, x.dtype(), q);
    }
    let rh = area_scale(ih, oh, align_corners, scales.first().copied().flatten());
    let rw = area_scale(iw, ow, align_corners, scales.get(1).copied().flatten());
    let cols: Vec<_> = (0..ow).map(|w| source(rw, w, align_corners, iw)).collect();
    let planes = shape[0] * shape[1];
    let mut vals = Vec::with_capacity(planes * oh * ow);
    for plane in xv.chunks_exact((ih * iw).max(1)).take(planes) {
        for h2 in 0..oh {
            let (h1, h1p, h0l, h1l) = source(rh, h2, align_corners, ih);
            let row = &plane[h1 * iw..];
            for &(w1, w1p, w0l, w1l) in &cols {
                let p = |i: usize| row.get(i).copied().unwrap_or(0) as f32;
                let result = h0l * (w0l * p(w1) + w1l * p(w1 + w1p))
                    + h1l * (w0l * p(h1p * iw + w1) + w1l * p(h1p * iw + w1 + w1p))
                    - zp as f32;
                // the output scale over the input's is 1
                vals.push(quantize_val(result, 1.0, zp, range));
            }
        }
    }
    make_quantized(&vals, &out_shape, x.dtype(), q)
}
