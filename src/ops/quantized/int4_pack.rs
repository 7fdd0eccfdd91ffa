//! Weight-only int4 linear for CPU: `_convert_weight_to_int4pack_for_cpu` packs `[N, K]` int32
//! values 0..15 two to a byte in the layout PyTorch's CPU kernel reads (rows in blocks of 64,
//! row `n` and `n + 32` sharing a byte, one 32-byte run per `k`; the rows past the last full
//! block as `[K, rest / 2]` with rows `2i` and `2i + 1` sharing a byte; low nibble first), and
//! `_weight_int4pack_mm_for_cpu` multiplies by the packed weights dequantized per group of
//! `qGroupSize` columns: `w = (q - 8) * scale + zero`. The layout was read off PyTorch's
//! results (fixtures/gen_ops_quantized_coverage.py checks it); sums are in float, so results
//! agree with PyTorch's vectorized kernel to rounding.

use super::tensor_result;
use crate::ops::kernels::{
    check_rank, check_size, invalid_argument, shape_mismatch, size_mismatch, unsupported_feature,
    wrong_dtype,
};
use crate::ops::{Args, Registry};
use crate::tensor::RankRequirement;
use crate::tensor::{DType, Tensor};
use crate::values::IValue;
use crate::Result;

pub fn register(r: &mut Registry) {
    r.add(
        "aten::_convert_weight_to_int4pack_for_cpu",
        convert_weight_to_int4pack,
    );
    r.add("aten::_weight_int4pack_mm_for_cpu", weight_int4pack_mm);
    r.add(
        "quantized::int4mm_packed_weight_cpu",
        int4mm_packed_weight_cpu,
    );
}

/// `quantized::int4mm_packed_weight_cpu(self, mat2, qGroupSize, qScaleAndZeros)`: inductor's
/// wrapper of `_weight_int4pack_mm_for_cpu` with the group size as a one-element int64 tensor.
fn int4mm_packed_weight_cpu(a: &mut Args<'_>) -> Result<IValue> {
    let group = a.tensor(2)?;
    if group.dtype() != DType::Int64 {
        return Err(wrong_dtype(a.op, "q_group_size", "int64", group.dtype()));
    }
    check_size(
        a.op,
        "the number of elements of q_group_size",
        1,
        group.numel() as i64,
    )?;
    let group = group.to_vec::<i64>()?[0];
    let args = vec![
        a.get(0)?.clone(),
        a.get(1)?.clone(),
        IValue::Int(group),
        a.get(3)?.clone(),
    ];
    crate::ops::prims::via_aten(a, "aten::_weight_int4pack_mm_for_cpu", args)
}

const BLOCK_N: usize = 64;

/// The byte and bit shift of row `n`, column `k` of `[N, K]` int4 weights.
fn nibble_at(n: usize, k: usize, rows: usize, cols: usize) -> (usize, u32) {
    let full = rows / BLOCK_N * BLOCK_N;
    if n < full {
        let (block, r) = (n / BLOCK_N, n % BLOCK_N);
        (
            block * BLOCK_N * cols / 2 + k * (BLOCK_N / 2) + r % (BLOCK_N / 2),
            4 * (r / (BLOCK_N / 2)) as u32,
        )
    } else {
        let (rest, m) = (rows - full, n - full);
        (full * cols / 2 + k * (rest / 2) + m / 2, 4 * (m % 2) as u32)
    }
}

/// `_convert_weight_to_int4pack_for_cpu(self [N, K] int32, innerKTiles) -> [N, K / 2] uint8`.
fn convert_weight_to_int4pack(a: &mut Args<'_>) -> Result<IValue> {
    let w = a.tensor(0)?;
    if w.dtype() != DType::Int32 {
        return Err(wrong_dtype(a.op, "weight", "int32", w.dtype()));
    }
    check_rank(a.op, "weight", RankRequirement::Exactly(2), w.shape())?;
    let (n, k) = (w.shape()[0], w.shape()[1]);
    if k % 2 != 0 {
        return Err(invalid_argument(
            a.op,
            "K (weight.size(1))",
            "must be even",
            k,
        ));
    }
    if n % 16 != 0 {
        return Err(invalid_argument(
            a.op,
            "N (weight.size(0))",
            "must be a multiple of 16",
            n,
        ));
    }
    let vals = w.contiguous()?.to_vec::<i32>()?;
    if let Some(v) = vals.iter().find(|v| !(0..16).contains(*v)) {
        // PyTorch packs other values in a way of its vector code: refuse them
        return Err(unsupported_feature(
            a.op,
            format!("an int4 weight value outside 0..=15 ({v})"),
        ));
    }
    let mut out = vec![0u8; n * k / 2];
    for (i, row) in vals.chunks(k.max(1)).enumerate().take(n) {
        for (j, &v) in row.iter().enumerate() {
            let (byte, shift) = nibble_at(i, j, n, k);
            out[byte] |= (v as u8) << shift;
        }
    }
    tensor_result(Tensor::from_vec(out, &[n, k / 2])?)
}

/// `_weight_int4pack_mm_for_cpu(A [M, K], B packed [N, K / 2] uint8, qGroupSize,
/// qScaleAndZeros [K / qGroupSize, N, 2]) -> [M, N]` in A's dtype.
fn weight_int4pack_mm(a: &mut Args<'_>) -> Result<IValue> {
    let (x, b) = (a.tensor(0)?, a.tensor(1)?);
    let group = a.int(2)?;
    let sz = a.tensor(3)?;
    if !matches!(x.dtype(), DType::Float32 | DType::Float16 | DType::BFloat16) {
        return Err(wrong_dtype(
            a.op,
            "A",
            "float32, float16 or bfloat16",
            x.dtype(),
        ));
    }
    check_rank(a.op, "A", RankRequirement::Exactly(2), x.shape())?;
    let (m, k) = (x.shape()[0], x.shape()[1]);
    if b.dtype() != DType::UInt8 {
        return Err(wrong_dtype(a.op, "B", "uint8", b.dtype()));
    }
    check_rank(a.op, "B", RankRequirement::Exactly(2), b.shape())?;
    if b.shape()[1] * 2 != k {
        return Err(size_mismatch(
            a.op,
            "B.size(1) (A.size(1) / 2)",
            (k / 2) as i64,
            b.shape()[1] as i64,
        ));
    }
    if b.shape()[0] % 16 != 0 {
        return Err(invalid_argument(
            a.op,
            "N (B.size(0))",
            "must be a multiple of 16",
            b.shape()[0],
        ));
    }
    if ![32, 64, 128, 256].contains(&group) {
        return Err(invalid_argument(
            a.op,
            "qGroupSize",
            "must be 32, 64, 128 or 256",
            group,
        ));
    }
    let group = group as usize;
    let n = b.shape()[0];
    let groups = k.div_ceil(group);
    if sz.shape() != [groups, n, 2] {
        return Err(shape_mismatch(
            a.op,
            "qScaleAndZeros",
            &[groups, n, 2],
            sz.shape(),
        ));
    }
    let xs = x.contiguous()?.to_vec::<f32>()?;
    let packed = b.contiguous()?.to_vec::<u8>()?;
    let params = sz.contiguous()?.to_vec::<f32>()?;
    // dequantized weights, row-major [N, K]
    let mut w = vec![0f32; n * k];
    for row in 0..n {
        for col in 0..k {
            let (byte, shift) = nibble_at(row, col, n, k);
            let q = ((packed[byte] >> shift) & 0xF) as f32;
            let p = ((col / group) * n + row) * 2;
            w[row * k + col] = (q - 8.0) * params[p] + params[p + 1];
        }
    }
    let mut out = vec![0f32; m * n];
    for i in 0..m {
        let xr = &xs[i * k..(i + 1) * k];
        for j in 0..n {
            let wr = &w[j * k..(j + 1) * k];
            out[i * n + j] = xr
                .iter()
                .zip(wr)
                .fold(0f32, |acc, (&p, &q)| p.mul_add(q, acc));
        }
    }
    tensor_result(Tensor::from_vec(out, &[m, n])?.to_dtype(x.dtype())?)
}
