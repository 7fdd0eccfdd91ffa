//! Row-wise quantized embedding bags on fbgemm's fused layouts: each row of the uint8 weight
//! holds its quantized values followed by their scale and bias, 8-bit values with a float scale
//! and bias (`quantized::embedding_bag_byte_*`), 4-bit and 2-bit values packed low bits first
//! with a half scale and bias (`embedding_bag_4bit_*`, `embedding_bag_2bit_*`).
//! `*_rowwise_offsets` sums the dequantized rows of each bag as fbgemm's `EmbeddingSpMDM` does:
//! `out = fma(scale, q, out + bias)` per row, the per-sample weight folded into scale and bias.
//! The quantized `Embedding` / `EmbeddingBag` modules hold their weight packed
//! (`EmbeddingPackedParamsBase`, made by `embedding_bag_prepack` from a quint8 or quint4x2
//! weight with float qparams); `embedding_{byte,4bit}` / `embedding_bag_{byte,4bit}` look up
//! its fused rows the same way.

use super::torchbind::{packed_arg, EmbeddingParams};
use crate::ops::kernels::{
    check_rank, check_size, invalid_argument, rank_mismatch, shape_mismatch, unsupported_feature,
    wrong_dtype,
};
use crate::ops::{Args, Registry};
use crate::tensor::{Quantizer, RankRequirement, Tensor, TensorError};
use crate::values::IValue;
use crate::Result;

pub fn register(r: &mut Registry) {
    r.add("quantized::embedding_bag_byte_prepack", |a| {
        byte_prepack(a, None)
    });
    r.add(
        "quantized::embedding_bag_byte_prepack_with_rowwise_min_max",
        |a| byte_prepack(a, Some(1)),
    );
    r.add(
        "quantized::embedding_bag_4bit_prepack_with_rowwise_min_max",
        |a| nbit_prepack(a, 4, Some(1)),
    );
    r.add(
        "quantized::embedding_bag_2bit_prepack_with_rowwise_min_max",
        |a| nbit_prepack(a, 2, Some(1)),
    );
    r.add("quantized::embedding_bag_prepack", embedding_bag_prepack);
    r.add("quantized::embedding_bag_unpack", embedding_bag_unpack);
    r.add("quantized::embedding_byte", |a| embedding_packed(a, 8));
    r.add("quantized::embedding_bag_byte", |a| {
        embedding_bag_packed(a, 8)
    });
    r.add("quantized::embedding_4bit", |a| embedding_packed(a, 4));
    r.add("quantized::embedding_bag_4bit", |a| {
        embedding_bag_packed(a, 4)
    });
    r.add("quantized::embedding_bag_byte_unpack", |a| unpack(a, 8));
    r.add("quantized::embedding_bag_byte_rowwise_offsets", |a| {
        rowwise_offsets(a, 8)
    });
    r.add("quantized::embedding_bag_4bit_prepack", |a| {
        nbit_prepack(a, 4, None)
    });
    r.add("quantized::embedding_bag_4bit_unpack", |a| unpack(a, 4));
    r.add("quantized::embedding_bag_4bit_rowwise_offsets", |a| {
        rowwise_offsets(a, 4)
    });
    r.add("quantized::embedding_bag_2bit_prepack", |a| {
        nbit_prepack(a, 2, None)
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

/// Each row's (min, max): computed, or `rowwise_min_max` argument `arg` (`[rows, 2]`, the
/// `*_prepack_with_rowwise_min_max` variants).
fn row_ranges(
    a: &Args<'_>,
    arg: Option<usize>,
    values: &[f32],
    cols: usize,
) -> Result<Vec<(f32, f32)>> {
    let rows = values.len().checked_div(cols).unwrap_or(0);
    let Some(i) = arg else {
        return Ok(values
            .chunks(cols.max(1))
            .take(rows)
            .map(|row| {
                row.iter()
                    .fold((f32::INFINITY, f32::NEG_INFINITY), |(l, h), &x| {
                        (l.min(x), h.max(x))
                    })
            })
            .collect());
    };
    let mm = a.tensor(i)?;
    if mm.shape() != [rows, 2] {
        return Err(shape_mismatch(
            a.op,
            "rowwise_min_max",
            &[rows, 2],
            mm.shape(),
        ));
    }
    Ok(mm
        .to_vec::<f32>()?
        .chunks(2)
        .map(|p| (p[0], p[1]))
        .collect())
}

/// fbgemm's `FloatToFusedNBitRowwiseQuantizedSBHalf` (`optimized_qparams` false): per row
/// the minimum rounded to half is the bias, `range / (2^bits - 1)` rounded to half the scale
/// (1 when that is zero or its inverse infinite), values
/// `clamp(lrint((x - min) * (1 / scale)), 0, 2^bits - 1)` packed low bits first. The row
/// minimum and maximum are the row's own, or argument `min_max_arg`'s.
fn nbit_prepack(a: &mut Args<'_>, bits: usize, min_max_arg: Option<usize>) -> Result<IValue> {
    let w = a.tensor(0)?;
    if a.bool(min_max_arg.map_or(1, |i| i + 1))? {
        return Err(unsupported_feature(a.op, "optimized_qparams=True"));
    }
    // (PyTorch reads the columns as size(1): a 3-d weight fails or packs the wrong rows)
    check_rank(a.op, "weight", RankRequirement::Exactly(2), w.shape())?;
    if !w.dtype().is_floating_point() {
        return Err(wrong_dtype(a.op, "weight", "floating-point", w.dtype()));
    }
    let per_byte = 8 / bits;
    let cols = w.shape()[w.dim() - 1];
    if cols % per_byte != 0 {
        return Err(invalid_argument(
            a.op,
            "the number of weight columns",
            format!("must be a multiple of {per_byte}"),
            cols,
        ));
    }
    let values = w.to_vec::<f32>()?;
    let ranges = row_ranges(a, min_max_arg, &values, cols)?;
    let rows = ranges.len();
    let packed_cols = cols / per_byte;
    let width = packed_cols + 4;
    let max_q = ((1 << bits) - 1) as f32;
    let mut out = vec![0u8; rows * width];
    for ((row, dst), &(lo, hi)) in values
        .chunks(cols.max(1))
        .zip(out.chunks_mut(width))
        .zip(&ranges)
    {
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

/// The columns fbgemm's vectorized 8-bit row quantizer handles per step.
const AVX2_BLOCK: usize = 32;

/// fbgemm's `FloatToFused8BitRowwiseQuantizedSBFloat`: per row `scale = (max - min) / 255`,
/// `bias = min`, values `lrint((x - min) * (255 / (range + 1e-8)))`; leading dimensions kept.
/// The row minimum and maximum are the row's own, or argument `min_max_arg`'s.
fn byte_prepack(a: &mut Args<'_>, min_max_arg: Option<usize>) -> Result<IValue> {
    let w = a.tensor(0)?;
    check_rank(a.op, "weight", RankRequirement::AtLeast(1), w.shape())?;
    if !w.dtype().is_floating_point() {
        return Err(wrong_dtype(a.op, "weight", "floating-point", w.dtype()));
    }
    let cols = w.shape()[w.dim() - 1];
    let values = w.to_vec::<f32>()?;
    let ranges = row_ranges(a, min_max_arg, &values, cols)?;
    let rows = ranges.len();
    let width = cols + SCALE_BIAS_BYTES;
    let mut out = vec![0u8; rows * width];
    for ((row, dst), &(lo, hi)) in values
        .chunks(cols.max(1))
        .zip(out.chunks_mut(width))
        .zip(&ranges)
    {
        let range = hi - lo;
        let inv = 255.0f32 / (range + 1e-8);
        // values outside a given (min, max): fbgemm's AVX2 blocks of 32 columns saturate, its
        // scalar tail stores `lrintf(..)` into a uint8 (wrapping modulo 256)
        let blocked = cols - cols % AVX2_BLOCK;
        for (c, (d, &x)) in dst.iter_mut().zip(row).enumerate() {
            let q = ((x - lo) * inv).round_ties_even();
            *d = if c < blocked {
                q.clamp(0.0, 255.0) as u8
            } else {
                (q as i64).rem_euclid(256) as u8
            };
        }
        dst[cols..cols + 4].copy_from_slice(&(range / 255.0).to_le_bytes());
        dst[cols + 4..].copy_from_slice(&lo.to_le_bytes());
    }
    let mut shape = w.shape().to_vec();
    let last = shape.len() - 1;
    shape[last] = width;
    Ok(IValue::Tensor(Tensor::from_vec(out, &shape)?))
}

/// `quantized::embedding_bag_prepack(weight)`: the packed parameters of a quint8 weight with
/// per-row float qparams.
fn embedding_bag_prepack(a: &mut Args<'_>) -> Result<IValue> {
    let p = EmbeddingParams::new(a.op, a.tensor(0)?)?;
    Ok(IValue::Object(p.to_object()))
}

/// `quantized::embedding_bag_unpack(packed)`: the quantized weight.
fn embedding_bag_unpack(a: &mut Args<'_>) -> Result<IValue> {
    let p = EmbeddingParams::from_object(&packed_arg(a, 0)?)?;
    Ok(IValue::Tensor(p.weight))
}

/// `PackedEmbeddingBagWeight::prepack`'s fused rows of a packed weight, which the lookups
/// `op` (of `bits`-bit rows) read: each row's values (quint4x2 ones two a byte, low nibble
/// first), then its scale and bias `zero_point * scale * -1`, float for 8-bit rows, half for
/// 4-bit ones.
fn fused_rows(op: &str, p: &EmbeddingParams, bits: usize) -> Result<FusedRows> {
    check_size(
        op,
        "the packed weight's bit rate",
        bits as i64,
        p.bit_rate(),
    )?;
    let Some(Quantizer::PerChannelAffineFloatQParams {
        scales,
        zero_points,
        ..
    }) = p.weight.quantizer().map(|q| &**q)
    else {
        return Err(wrong_dtype(
            op,
            "packed weight",
            "quantized per channel with float qparams",
            p.weight.dtype(),
        ));
    };
    let cols = p.weight.shape()[1];
    let (values, packed_cols) = if bits == 8 {
        (p.weight.int_repr_view()?.to_vec::<u8>()?, cols)
    } else {
        (crate::tensor::pack_nibbles(&p.weight)?, cols.div_ceil(2))
    };
    let width = packed_cols + scale_bias_bytes(bits);
    let mut bytes = Vec::with_capacity(values.len() / packed_cols.max(1) * width);
    for ((row, &scale), &zp) in values
        .chunks(packed_cols.max(1))
        .zip(scales.iter())
        .zip(zero_points.iter())
    {
        bytes.extend_from_slice(row);
        let bias = -(zp * scale);
        if bits == 8 {
            bytes.extend_from_slice(&scale.to_le_bytes());
            bytes.extend_from_slice(&bias.to_le_bytes());
        } else {
            bytes.extend_from_slice(&half::f16::from_f32(scale).to_le_bytes());
            bytes.extend_from_slice(&half::f16::from_f32(bias).to_le_bytes());
        }
    }
    Ok(FusedRows {
        bytes,
        width,
        bits,
        cols: packed_cols * 8 / bits,
    })
}

/// The fused `bits`-bit rows of the packed weight, argument 0.
fn packed_rows(a: &Args<'_>, bits: usize) -> Result<FusedRows> {
    fused_rows(
        a.op,
        &EmbeddingParams::from_object(&packed_arg(a, 0)?)?,
        bits,
    )
}

/// `quantized::embedding_{byte,4bit}(packed, indices, pruned_weights)`: each index's row (1-d
/// indices give `[n, dim]`, 2-d ones `[rows, cols, dim]`).
fn embedding_packed(a: &mut Args<'_>, bits: usize) -> Result<IValue> {
    let rows = packed_rows(a, bits)?;
    let indices = a.tensor(1)?;
    let n = indices.numel() as i64;
    let bag = BagArgs {
        indices,
        offsets: Some(Tensor::from_vec(
            (0..n).collect::<Vec<i64>>(),
            &[n as usize],
        )?),
        pruned_weights: a.bool(2)?,
        per_sample_weights: None,
        compressed_indices_mapping: None,
        include_last_offset: false,
        is_embedding_op: true,
    };
    Ok(IValue::Tensor(bag_sums(a.op, &rows, bag)?))
}

/// `quantized::embedding_bag_{byte,4bit}(packed, indices, offsets, scale_grad_by_freq, mode,
/// pruned_weights, per_sample_weights, compressed_indices_mapping, include_last_offset)`: the
/// sum of each bag (like PyTorch, whatever `mode` says).
fn embedding_bag_packed(a: &mut Args<'_>, bits: usize) -> Result<IValue> {
    let rows = packed_rows(a, bits)?;
    let bag = bag_args(a)?;
    Ok(IValue::Tensor(bag_sums(a.op, &rows, bag)?))
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

/// Fused rows of `bits`-bit values: `width` bytes each, `cols` values per row.
struct FusedRows {
    bytes: Vec<u8>,
    width: usize,
    bits: usize,
    cols: usize,
}

/// The fused uint8 weight argument `i` of `bits`-bit rows, and its shape.
fn fused_weight(a: &Args<'_>, i: usize, bits: usize) -> Result<(FusedRows, Vec<usize>)> {
    let w = a.tensor(i)?;
    if w.dtype() != crate::tensor::DType::UInt8 {
        return Err(wrong_dtype(a.op, "weight", "uint8", w.dtype()));
    }
    check_rank(a.op, "weight", RankRequirement::AtLeast(1), w.shape())?;
    let width = w.shape()[w.dim() - 1];
    let sb = scale_bias_bytes(bits);
    if width < sb {
        return Err(invalid_argument(
            a.op,
            "the fused weight's row width",
            format!("must hold its scale and bias ({sb} bytes)"),
            width,
        ));
    }
    let cols = (width - sb) * (8 / bits);
    let rows = FusedRows {
        bytes: w.to_vec::<u8>()?,
        width,
        bits,
        cols,
    };
    Ok((rows, w.shape().to_vec()))
}

/// `Fused8BitRowwiseQuantizedSBFloatToFloat` / `FusedNBitRowwiseQuantizedSBHalfToFloat`:
/// `q * scale + bias`, fused.
fn unpack(a: &mut Args<'_>, bits: usize) -> Result<IValue> {
    let (w, mut shape) = fused_weight(a, 0, bits)?;
    let mut out = Vec::with_capacity(w.bytes.len() / w.width.max(1) * w.cols);
    for row in w.bytes.chunks(w.width.max(1)) {
        let (vals, scale, bias) = split_row(row, bits);
        out.extend(vals.iter().map(|&q| (q as f32).mul_add(scale, bias)));
    }
    let last = shape.len() - 1;
    shape[last] = w.cols;
    Ok(IValue::Tensor(Tensor::from_vec(out, &shape)?))
}

/// The lookup arguments of PyTorch's `embedding_bag_{byte,nbit}_helper`.
struct BagArgs {
    indices: Tensor,
    offsets: Option<Tensor>,
    pruned_weights: bool,
    per_sample_weights: Option<Tensor>,
    compressed_indices_mapping: Option<Tensor>,
    include_last_offset: bool,
    /// `embedding_*` (not `_bag`): one index per bag, 2-d indices keep their shape.
    is_embedding_op: bool,
}

/// Arguments 1.. of the `embedding_bag_*` ops: `(indices, offsets, scale_grad_by_freq, mode,
/// pruned_weights, per_sample_weights, compressed_indices_mapping, include_last_offset)`.
/// (`scale_grad_by_freq` only matters to gradients; `mode` is ignored by PyTorch.)
fn bag_args(a: &Args<'_>) -> Result<BagArgs> {
    Ok(BagArgs {
        indices: a.tensor(1)?,
        offsets: a.opt_tensor(2)?,
        pruned_weights: a.bool(5)?,
        per_sample_weights: a.opt_tensor(6)?,
        compressed_indices_mapping: a.opt_tensor(7)?,
        include_last_offset: a.bool(8)?,
        is_embedding_op: false,
    })
}

/// `quantized::embedding_bag_{byte,4bit,2bit}_rowwise_offsets(weight, indices, offsets, ...)`
/// on a fused uint8 weight.
fn rowwise_offsets(a: &mut Args<'_>, bits: usize) -> Result<IValue> {
    let (rows, _) = fused_weight(a, 0, bits)?;
    let bag = bag_args(a)?;
    Ok(IValue::Tensor(bag_sums(a.op, &rows, bag)?))
}

/// PyTorch's `embedding_bag_byte_helper` / `_nbit_helper` with fbgemm's `EmbeddingSpMDM`: the
/// sum of each bag's dequantized rows. 2-d indices of a bag op are bags of one row each
/// (offsets must then be absent); offsets without the last one get `indices.numel()` appended.
fn bag_sums(op: &str, w: &FusedRows, bag: BagArgs) -> Result<Tensor> {
    let rows = w.bytes.len() / w.width.max(1);
    let indices_t = &bag.indices;
    if !matches!(indices_t.dim(), 1 | 2) {
        return Err(rank_mismatch(
            op,
            "indices",
            RankRequirement::OneOf(vec![1, 2]),
            indices_t.shape(),
        ));
    }
    // pruned weights: each index goes through the mapping to a kept row, -1 dropping it (the
    // mapping is ignored otherwise)
    let mapping = if bag.pruned_weights {
        let m = bag.compressed_indices_mapping.as_ref().ok_or_else(|| {
            invalid_argument(
                op,
                "compressed_indices_mapping",
                "must be a tensor with pruned_weights=True",
                "None",
            )
        })?;
        Some(m.to_vec::<i64>()?)
    } else {
        None
    };
    let indices = indices_t.to_vec::<i64>()?;
    let mut offsets = if indices_t.dim() == 2 && !bag.is_embedding_op {
        if bag.offsets.is_some() {
            return Err(invalid_argument(
                op,
                "offsets",
                "must be None with 2-D indices (a mini-batch of fixed-length sequences)",
                "a tensor",
            ));
        }
        let step = indices_t.shape()[1];
        if step == 0 {
            Vec::new()
        } else {
            (0..indices.len()).step_by(step).map(|v| v as i64).collect()
        }
    } else {
        bag.offsets
            .as_ref()
            .ok_or_else(|| {
                invalid_argument(op, "offsets", "must be a tensor with 1-D indices", "None")
            })?
            .to_vec::<i64>()?
    };
    if !bag.include_last_offset {
        offsets.push(indices.len() as i64);
    }
    let bags = offsets.len().checked_sub(1).ok_or_else(|| {
        invalid_argument(
            op,
            "the number of offsets",
            "must be positive with include_last_offset=True",
            0,
        )
    })?;
    let weights = match &bag.per_sample_weights {
        Some(t) => {
            let v = t.to_vec::<f32>()?;
            check_size(
                op,
                "the number of per_sample_weights (one per index)",
                indices.len() as i64,
                v.len() as i64,
            )?;
            Some(v)
        }
        None => None,
    };
    let cols = w.cols;
    let mut out = vec![0f32; bags * cols];
    for (b, dst) in out.chunks_mut(cols.max(1)).enumerate().take(bags) {
        let (start, end) = (offsets[b], offsets[b + 1]);
        if start < 0 || end < start || end as usize > indices.len() {
            return Err(invalid_argument(
                op,
                format!("offsets[{b}..={}]", b + 1),
                format!(
                    "must be non-decreasing and within the {} indices",
                    indices.len()
                ),
                format!("[{start}, {end}]"),
            ));
        }
        for k in start as usize..end as usize {
            let mut idx = indices[k];
            if let Some(m) = &mapping {
                idx = *usize::try_from(idx).ok().and_then(|i| m.get(i)).ok_or(
                    TensorError::IndexOutOfBounds {
                        index: idx,
                        dim: 0,
                        size: m.len(),
                    },
                )?;
                if idx == -1 {
                    continue;
                }
            }
            let idx = usize::try_from(idx)
                .ok()
                .filter(|&i| i < rows)
                .ok_or_else(|| TensorError::LookupOutOfRange {
                    op: op.to_string(),
                    index: idx,
                    size: rows,
                })?;
            let (vals, scale, bias) =
                split_row(&w.bytes[idx * w.width..(idx + 1) * w.width], w.bits);
            let pw = weights.as_ref().map_or(1.0, |v| v[k]);
            let (scale, bias) = (pw * scale, pw * bias);
            for (d, &q) in dst.iter_mut().zip(&vals) {
                *d = scale.mul_add(q as f32, *d + bias);
            }
        }
    }
    let shape = if indices_t.dim() == 2 && bag.is_embedding_op {
        vec![indices_t.shape()[0], indices_t.shape()[1], cols]
    } else {
        vec![bags, cols]
    };
    Ok(Tensor::from_vec(out, &shape)?)
}
