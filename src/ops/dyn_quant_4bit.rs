//! `aten::_dyn_quant_pack_4bit_weight` / `aten::_dyn_quant_matmul_4bit`: PyTorch's 4-bit
//! weight, dynamically 8-bit-quantized input linear as its x86 CPU fallback computes it
//! (aten/src/ATen/native/cpu/int4mm_kernel.cpp; KleidiAI's packed format is ARM-only). The
//! "packed" weight is a float32 concatenation of the uint8 weight bytes (two 4-bit values
//! each, low nibble first, stored with an offset of 8), the float scales (`[N]` per channel,
//! or `[N, K / block_size]` per group) and the optional bias. The product quantizes each input
//! row to int8 with its own scale and zero point, accumulates `x_q * (w - 8)` in int32 per
//! group, and scales back in float32.

use super::kernels::{invalid_argument, shape_err, unsupported_feature, wrong_dtype};
use super::{Args, Registry};
use crate::tensor::{DType, Tensor};
use crate::values::IValue;

type R = crate::Result<IValue>;

/// PyTorch's group-size rule: one group per row, or a multiple of 32 dividing the row.
fn check_block_size(op: &str, block_size: i64, in_features: i64) -> crate::Result<()> {
    if block_size == in_features
        || (block_size > 0 && block_size % 32 == 0 && in_features % block_size == 0)
    {
        Ok(())
    } else {
        Err(invalid_argument(
            op,
            "block_size",
            format!("must be in_features ({in_features}) or a multiple of 32 dividing it"),
            block_size,
        ))
    }
}

fn size(op: &str, v: i64, name: &str) -> crate::Result<usize> {
    usize::try_from(v).map_err(|_| invalid_argument(op, name, "must be non-negative", v))
}

fn flat_f32(t: &Tensor) -> crate::Result<Vec<f32>> {
    t.to_dtype(DType::Float32)?.contiguous()?.to_vec::<f32>()
}

/// _dyn_quant_pack_4bit_weight(weights, scales_zeros, bias, block_size, in_features,
/// out_features) -> float32 [weights.numel + scales.numel (+ bias.numel)]
fn pack_4bit_weight(a: &mut Args<'_>) -> R {
    let op = a.op;
    let (w, scales, bias) = (a.tensor(0)?, a.tensor(1)?, a.opt_tensor(2)?);
    let (block_size, in_features) = (a.int(3)?, a.int(4)?);
    a.int(5)?;
    if w.dtype() != DType::UInt8 {
        return Err(wrong_dtype(op, "weights", "uint8", w.dtype()));
    }
    check_block_size(op, block_size, in_features)?;
    let mut packed = flat_f32(&w)?;
    packed.extend(flat_f32(&scales)?);
    if let Some(b) = &bias {
        packed.extend(flat_f32(b)?);
    }
    let n = packed.len();
    Ok(IValue::Tensor(Tensor::from_vec(packed, &[n])?))
}

/// One input row quantized to int8 as the fallback kernel does it: `(1 / scale, -zero_point)`
/// and the values.
fn quantize_row(row: &[f32]) -> (f32, i32, Vec<i32>) {
    let (mut max0, mut min0) = (-f32::MAX, f32::MAX);
    for &v in row {
        // std::max(v, max0) / std::min(v, min0): `v` unless the comparison says otherwise,
        // so a NaN is kept
        max0 = if v < max0 { max0 } else { v };
        min0 = if min0 < v { min0 } else { v };
    }
    let (qmin, qmax) = (f32::from(i8::MIN), f32::from(i8::MAX));
    let rmin = if min0 < 0.0 { min0 } else { 0.0 };
    let rmax = if 0.0 < max0 { max0 } else { 0.0 };
    let scale = if rmin == rmax {
        1.0
    } else {
        (qmax - qmin) / (rmax - rmin)
    };
    let recip = if scale != 0.0 { 1.0 / scale } else { 0.0 };
    let (dmin, dmax) = (rmin * scale, rmax * scale);
    let zp = if qmin + dmin + qmax + dmax > 0.0 {
        qmin - dmin
    } else {
        qmax - dmax
    };
    let zp = zp.clamp(qmin, qmax).round_ties_even() as i32;
    let q = row
        .iter()
        .map(|&v| {
            let r = (v * scale).round() as i32;
            r.saturating_add(zp)
                .clamp(i32::from(i8::MIN), i32::from(i8::MAX))
        })
        .collect();
    (recip, -zp, q)
}

/// _dyn_quant_matmul_4bit(inp [M, K], packed_weights, block_size, in_features K,
/// out_features N) -> [M, N]
fn matmul_4bit(a: &mut Args<'_>) -> R {
    let op = a.op;
    let (x, packed) = (a.tensor(0)?, a.tensor(1)?);
    let (block_size, in_features, out_features) = (a.int(2)?, a.int(3)?, a.int(4)?);
    if x.dtype() == DType::BFloat16 && block_size == in_features {
        return Err(unsupported_feature(
            op,
            "bfloat16 input (tsrun runs the float32 fallback only)",
        ));
    }
    if x.dtype() != DType::Float32 {
        return Err(wrong_dtype(op, "input", "float32 or bfloat16", x.dtype()));
    }
    check_block_size(op, block_size, in_features)?;
    let (k, n) = (
        size(op, in_features, "in_features")?,
        size(op, out_features, "out_features")?,
    );
    let bl = size(op, block_size, "block_size")?;
    if k == 0 {
        // (PyTorch divides in_features by block_size unchecked)
        return Err(invalid_argument(op, "in_features", "must be positive", k));
    }
    // PyTorch reads the input's memory as M dense rows of K
    let [m, width] = *x.shape() else {
        return Err(unsupported_feature(
            op,
            format!(
                "an input of shape {:?} (tsrun takes [M, in_features])",
                x.shape()
            ),
        ));
    };
    if width != k || !x.is_contiguous() {
        return Err(unsupported_feature(
            op,
            format!(
                "an input of shape {:?} read as rows of {k} (tsrun takes a contiguous [M, in_features])",
                x.shape()
            ),
        ));
    }
    let weight_len = n
        .checked_mul(k)
        .map(|v| v / 2)
        .ok_or_else(|| shape_err(format!("{op}: out_features x in_features overflows")))?;
    let groups = k / bl;
    let scale_len = n * groups;
    let p = flat_f32(&packed)?;
    if packed.dim() != 1 {
        return Err(crate::ops::kernels::rank_mismatch(
            op,
            "packed_weights",
            crate::tensor::RankRequirement::Exactly(1),
            packed.shape(),
        ));
    }
    if p.len() < weight_len + scale_len {
        return Err(invalid_argument(
            op,
            "packed_weights.numel()",
            format!(
                "must be at least {} (weights and scales)",
                weight_len + scale_len
            ),
            p.len(),
        ));
    }
    let bias_len = p.len() - weight_len - scale_len;
    if bias_len != 0 && bias_len != n {
        return Err(crate::ops::kernels::size_mismatch(
            op,
            "the packed bias length (out_features)",
            n as i64,
            bias_len as i64,
        ));
    }
    // `.to(kByte)` of the stored weight bytes
    let weights: Vec<u8> = p[..weight_len].iter().map(|&v| v as u8).collect();
    let scales = &p[weight_len..weight_len + scale_len];
    let bias = (bias_len != 0).then(|| &p[weight_len + scale_len..]);
    let xs = x.to_vec::<f32>()?;
    let row_bytes = k.div_ceil(2);
    let nibble = |col: &[u8], kk: usize| -> i32 {
        let byte = col.get(kk / 2).copied().unwrap_or(0);
        i32::from(if kk.is_multiple_of(2) {
            byte & 0x0f
        } else {
            byte >> 4
        }) - 8
    };
    let len = m
        .checked_mul(n)
        .ok_or_else(|| shape_err(format!("{op}: the [{m}, {n}] result overflows")))?;
    let mut out = vec![0f32; len];
    for (r, row) in xs.chunks(k.max(1)).take(m).enumerate() {
        let (lhs_scale, lhs_offset, q) = quantize_row(row);
        for c in 0..n {
            let col = weights.get(c * row_bytes..).unwrap_or(&[]);
            let dot = |range: std::ops::Range<usize>| -> i32 {
                range.fold(0i32, |acc, kk| {
                    let rv = nibble(col, kk);
                    acc.wrapping_add(q[kk].wrapping_mul(rv))
                        .wrapping_add(lhs_offset.wrapping_mul(rv))
                })
            };
            let mut acc = if bl == k {
                dot(0..k) as f32 * scales[c]
            } else {
                let mut acc = 0f32;
                for g in 0..groups {
                    acc += dot(g * bl..(g + 1) * bl) as f32 * scales[c * groups + g];
                }
                acc
            };
            acc *= lhs_scale;
            if let Some(b) = bias {
                acc += b[c];
            }
            out[r * n + c] = acc.clamp(-f32::MAX, f32::MAX);
        }
    }
    Ok(IValue::Tensor(Tensor::from_vec(out, &[m, n])?))
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::_dyn_quant_pack_4bit_weight", pack_4bit_weight);
    r.add("aten::_dyn_quant_matmul_4bit", matmul_4bit);
}
