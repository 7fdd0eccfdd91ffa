//! Row-wise quantized embedding bags on fbgemm's fused layouts: each row of the uint8 weight
//! holds its quantized values followed by their scale and bias, 8-bit values with a float scale
//! and bias (`quantized::embedding_bag_byte_*`), 4-bit and 2-bit values packed low bits first
//! with a half scale and bias (`embedding_bag_4bit_*`, `embedding_bag_2bit_*`).
//! `*_rowwise_offsets` sums the dequantized rows of each bag as fbgemm's `EmbeddingSpMDM` does:
//! `out = fma(scale, q, out + bias)` per row, the per-sample weight folded into scale and bias.

use super::unsupported;
use crate::ops::{Args, Registry};
use crate::tensor::Tensor;
use crate::values::IValue;
use crate::Result;

pub fn register(r: &mut Registry) {
    r.add("quantized::embedding_bag_byte_prepack", byte_prepack);
    r.add("quantized::embedding_bag_byte_unpack", |a| unpack(a, 8));
    r.add("quantized::embedding_bag_byte_rowwise_offsets", |a| {
        rowwise_offsets(a, 8)
    });
    r.add("quantized::embedding_bag_4bit_prepack", |a| {
        nbit_prepack(a, 4)
    });
    r.add("quantized::embedding_bag_4bit_unpack", |a| unpack(a, 4));
    r.add("quantized::embedding_bag_4bit_rowwise_offsets", |a| {
        rowwise_offsets(a, 4)
    });
    r.add("quantized::embedding_bag_2bit_prepack", |a| {
        nbit_prepack(a, 2)
    });
    r.add("quantized::embedding_bag_2bit_unpack", |a| unpack(a, 2));
    r.add("quantized::embedding_bag_2bit_rowwise_offsets", |a| {
        rowwise_offsets(a, 2)
    });
}

/// The bytes after a row's values: float scale and bias for 8-bit rows, half ones otherwise.
fn scale_bias_bytes(bits: usize) -> usize {
    if bits == 8 {
        8
    } else {
        4
    }
}

/// fbgemm's `FloatToFusedNBitRowwiseQuantizedSBHalf` (`optimized_qparams` false): per row
/// the minimum rounded to half is the bias, `range / (2^bits - 1)` rounded to half the scale
/// (1 when that is zero or its inverse infinite), values
/// `clamp(lrint((x - min) * (1 / scale)), 0, 2^bits - 1)` packed low bits first.
fn nbit_prepack(a: &mut Args<'_>, bits: usize) -> Result<IValue> {
    let w = a.tensor(0)?;
    if a.bool(1)? {
        return Err(unsupported(a.op, "optimized_qparams is not supported"));
    }
    // (PyTorch reads the columns as size(1): a 3-d weight fails or packs the wrong rows)
    if w.dim() != 2 || !w.dtype().is_floating_point() {
        return Err(unsupported(a.op, "expects a 2-d float weight"));
    }
    let per_byte = 8 / bits;
    let cols = w.shape()[w.dim() - 1];
    if cols % per_byte != 0 {
        return Err(unsupported(
            a.op,
            format!("the number of columns must be a multiple of {per_byte}"),
        ));
    }
    let values = w.to_vec::<f32>()?;
    let rows = values.len().checked_div(cols).unwrap_or(0);
    let packed_cols = cols / per_byte;
    let width = packed_cols + 4;
    let max_q = ((1 << bits) - 1) as f32;
    let mut out = vec![0u8; rows * width];
    for (row, dst) in values.chunks(cols.max(1)).zip(out.chunks_mut(width)) {
        let (lo, hi) = row
            .iter()
            .fold((f32::INFINITY, f32::NEG_INFINITY), |(l, h), &x| {
                (l.min(x), h.max(x))
            });
        let lo = half::f16::from_f32(lo).to_f32();
        let range = hi - lo;
        let mut scale = if range == 0.0 { 1.0 } else { range / max_q };
        scale = half::f16::from_f32(scale).to_f32();
        if scale == 0.0 {
            scale = 1.0;
        }
        let mut inv = 1.0f32 / scale;
        if inv.is_infinite() {
            scale = 1.0;
            inv = 1.0;
        }
        for (c, &x) in row.iter().enumerate() {
            let q = ((x - lo) * inv).round_ties_even().clamp(0.0, max_q) as u8;
            dst[c / per_byte] |= q << ((c % per_byte) * bits);
        }
        dst[packed_cols..packed_cols + 2]
            .copy_from_slice(&half::f16::from_f32(scale).to_le_bytes());
        dst[packed_cols + 2..].copy_from_slice(&half::f16::from_f32(lo).to_le_bytes());
    }
    let mut shape = w.shape().to_vec();
    let last = shape.len() - 1;
    shape[last] = width;
    Ok(IValue::Tensor(Tensor::from_vec(out, &shape)?))
}

const SCALE_BIAS_BYTES: usize = 8;

/// fbgemm's `FloatToFused8BitRowwiseQuantizedSBFloat`: per row `scale = (max - min) / 255`,
/// `bias = min`, values `lrint((x - min) * (255 / (range + 1e-8)))`; leading dimensions kept.
fn byte_prepack(a: &mut Args<'_>) -> Result<IValue> {
    let w = a.tensor(0)?;
    if w.dim() < 1 || !w.dtype().is_floating_point() {
        return Err(unsupported(
            a.op,
            "expects a float weight of at least one dimension",
        ));
    }
    let cols = w.shape()[w.dim() - 1];
    let values = w.to_vec::<f32>()?;
    let rows = values.len().checked_div(cols).unwrap_or(0);
    let width = cols + SCALE_BIAS_BYTES;
    let mut out = vec![0u8; rows * width];
    for (row, dst) in values.chunks(cols.max(1)).zip(out.chunks_mut(width)) {
        let (lo, hi) = row
            .iter()
            .fold((f32::INFINITY, f32::NEG_INFINITY), |(l, h), &x| {
                (l.min(x), h.max(x))
            });
        let range = hi - lo;
        let inv = 255.0f32 / (range + 1e-8);
        for (d, &x) in dst.iter_mut().zip(row) {
            *d = ((x - lo) * inv).round_ties_even().clamp(0.0, 255.0) as u8;
        }
        dst[cols..cols + 4].copy_from_slice(&(range / 255.0).to_le_bytes());
        dst[cols + 4..].copy_from_slice(&lo.to_le_bytes());
    }
    let mut shape = w.shape().to_vec();
    let last = shape.len() - 1;
    shape[last] = width;
    Ok(IValue::Tensor(Tensor::from_vec(out, &shape)?))
}

/// One fused row of `bits`-bit values: its values and (scale, bias).
fn split_row(row: &[u8], bits: usize) -> (Vec<u8>, f32, f32) {
    let sb = row.len() - scale_bias_bytes(bits);
    if bits == 8 {
        let f = |i: usize| f32::from_le_bytes([row[i], row[i + 1], row[i + 2], row[i + 3]]);
        return (row[..sb].to_vec(), f(sb), f(sb + 4));
    }
    let h = |i: usize| half::f16::from_le_bytes([row[i], row[i + 1]]).to_f32();
    let per_byte = 8 / bits;
    let mask = (1u8 << bits) - 1;
    let vals = (0..sb * per_byte)
        .map(|c| (row[c / per_byte] >> ((c % per_byte) * bits)) & mask)
        .collect();
    (vals, h(sb), h(sb + 2))
}

/// The fused uint8 weight argument of `bits`-bit rows: its bytes, row width (bytes), shape,
/// and the number of values per row.
fn fused_weight(
    a: &Args<'_>,
    i: usize,
    bits: usize,
) -> Result<(Vec<u8>, usize, Vec<usize>, usize)> {
    let w = a.tensor(i)?;
    if w.dtype() != crate::tensor::DType::UInt8 || w.dim() < 1 {
        return Err(unsupported(a.op, "expects a fused uint8 weight"));
    }
    let width = w.shape()[w.dim() - 1];
    let sb = scale_bias_bytes(bits);
    if width < sb {
        return Err(unsupported(a.op, "rows too short for their scale and bias"));
    }
    let cols = (width - sb) * (8 / bits);
    Ok((w.to_vec::<u8>()?, width, w.shape().to_vec(), cols))
}

/// `Fused8BitRowwiseQuantizedSBFloatToFloat` / `FusedNBitRowwiseQuantizedSBHalfToFloat`:
/// `q * scale + bias`, fused.
fn unpack(a: &mut Args<'_>, bits: usize) -> Result<IValue> {
    let (bytes, width, mut shape, cols) = fused_weight(a, 0, bits)?;
    let mut out = Vec::with_capacity(bytes.len() / width.max(1) * cols);
    for row in bytes.chunks(width.max(1)) {
        let (vals, scale, bias) = split_row(row, bits);
        out.extend(vals.iter().map(|&q| (q as f32).mul_add(scale, bias)));
    }
    let last = shape.len() - 1;
    shape[last] = cols;
    Ok(IValue::Tensor(Tensor::from_vec(out, &shape)?))
}

/// `quantized::embedding_bag_{byte,4bit,2bit}_rowwise_offsets(weight, indices, offsets, scale_grad_by_freq,
/// mode, pruned_weights, per_sample_weights, compressed_indices_mapping, include_last_offset)`:
/// the sum of each bag.
fn rowwise_offsets(a: &mut Args<'_>, bits: usize) -> Result<IValue> {
    let (bytes, width, _, cols) = fused_weight(a, 0, bits)?;
    let rows = bytes.len() / width;
    let indices_t = a.tensor(1)?;
    let indices = indices_t.to_vec::<i64>()?;
    // PyTorch's `embedding_bag_byte_rowwise_offsets` passes mode 0 to its helper whatever
    // `mode` says (argument 4): bags are always summed
    if a.bool(5)? || a.opt_tensor(7)?.is_some() {
        return Err(unsupported(a.op, "pruned weights are not supported"));
    }
    let weights = match a.opt_tensor(6)? {
        Some(t) => {
            let v = t.to_vec::<f32>()?;
            if v.len() != indices.len() {
                return Err(unsupported(
                    a.op,
                    "per_sample_weights must have one weight per index",
                ));
            }
            Some(v)
        }
        None => None,
    };
    let include_last = a.bool(8)?;
    let mut offsets = match a.opt_tensor(2)? {
        Some(o) => o.to_vec::<i64>()?,
        None => {
            // 2-d indices: one bag per row
            if indices_t.dim() != 2 {
                return Err(unsupported(a.op, "offsets are required for 1-d indices"));
            }
            let step = indices_t.shape()[1].max(1);
            (0..indices.len()).step_by(step).map(|v| v as i64).collect()
        }
    };
    if !include_last || a.opt_tensor(2)?.is_none() {
        offsets.push(indices.len() as i64);
    }
    let bags = offsets.len().saturating_sub(1);
    let mut out = vec![0f32; bags * cols];
    for (b, dst) in out.chunks_mut(cols.max(1)).enumerate().take(bags) {
        let (start, end) = (offsets[b], offsets[b + 1]);
        if start < 0 || end < start || end as usize > indices.len() {
            return Err(unsupported(a.op, "offsets out of order or out of range"));
        }
        for k in start as usize..end as usize {
            let idx = usize::try_from(indices[k])
                .ok()
                .filter(|&i| i < rows)
                .ok_or_else(|| unsupported(a.op, format!("index {} out of range", indices[k])))?;
            let (vals, scale, bias) = split_row(&bytes[idx * width..(idx + 1) * width], bits);
            let w = weights.as_ref().map_or(1.0, |w| w[k]);
            let (scale, bias) = (w * scale, w * bias);
            for (d, &q) in dst.iter_mut().zip(&vals) {
                *d = scale.mul_add(q as f32, *d + bias);
            }
        }
    }
    let out = Tensor::from_vec(out, &[bags, cols])?;
    Ok(IValue::Tensor(out))
}
