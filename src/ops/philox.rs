//! PyTorch's stateless, counter-based random ops (`torch.func._random`): a key is a uint64
//! tensor of shape `(*batch, 2)` holding `(seed, offset)` pairs, and every draw is one
//! Philox4x32-10 block of `(seed, offset + i)`, so results depend on the key alone (no generator
//! state). Reproduces ATen's CPU kernels (`_philox_key_split`, `_philox_key_fold_in`,
//! `_philox_uniform_`, `_philox_normal_`, `_philox_randint_`) bit for bit up to libm rounding.

use super::random::on_fresh_copy;
use super::{Args, Registry};
use crate::ops::kernels::{
    check_rank, invalid_argument, not_implemented_for, rank_mismatch, size_mismatch, wrong_dtype,
};
use crate::tensor::{DType, Tensor};
use crate::tensor::{RankRequirement, TensorError};
use crate::values::IValue;
use half::{bf16, f16};

type R = crate::Result<IValue>;

/// One Philox4x32-10 block: the key is the seed's two 32-bit halves, the counter
/// `(offset_lo, offset_hi, 0, 0)` (ATen's `at::cpu::philox_4x32`).
fn philox_4x32(seed: u64, offset: u64) -> [u32; 4] {
    const M0: u64 = 0xD251_1F53;
    const M1: u64 = 0xCD9E_8D57;
    const W0: u32 = 0x9E37_79B9;
    const W1: u32 = 0xBB67_AE85;
    let mut c = [offset as u32, (offset >> 32) as u32, 0, 0];
    let mut k = [seed as u32, (seed >> 32) as u32];
    for _ in 0..10 {
        let p0 = M0 * c[0] as u64;
        let p1 = M1 * c[2] as u64;
        c = [
            ((p1 >> 32) as u32) ^ c[1] ^ k[0],
            p1 as u32,
            ((p0 >> 32) as u32) ^ c[3] ^ k[1],
            p0 as u32,
        ];
        k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
    }
    c
}

/// One block as two 64-bit words, each joined high word first (the 64-bit draws).
fn philox_words64(seed: u64, offset: u64) -> [u64; 2] {
    let r = philox_4x32(seed, offset);
    [
        (r[0] as u64) << 32 | r[1] as u64,
        (r[2] as u64) << 32 | r[3] as u64,
    ]
}

/// A new `(seed, offset)` key from one block's four words (`philox_derive_key`).
fn derive_key(r: [u32; 4]) -> [u64; 2] {
    [
        r[0] as u64 | (r[1] as u64) << 32,
        r[2] as u64 | (r[3] as u64) << 32,
    ]
}

/// The key's `(seed, offset)` pairs, row-major, after ATen's shape and dtype checks.
fn key_pairs(op: &str, key: &Tensor) -> crate::Result<Vec<[u64; 2]>> {
    check_rank(op, "key", RankRequirement::AtLeast(1), key.shape())?;
    if key.shape().last() != Some(&2) {
        return Err(size_mismatch(
            op,
            "key.size(-1) (a key is (seed, offset))",
            2,
            key.shape().last().map_or(-1, |&d| d as i64),
        ));
    }
    if key.dtype() != DType::UInt64 {
        return Err(wrong_dtype(op, "key", "uint64", key.dtype()));
    }
    let flat = key.contiguous()?.to_vec::<u64>()?;
    Ok(flat.chunks_exact(2).map(|p| [p[0], p[1]]).collect())
}

/// `_philox_key_split(key, num_splits)`: `num_splits` keys per key, shape
/// `(num_splits, *key.shape)`; split `s` of a key is derived from its block `offset + s`.
fn key_split(args: &mut Args<'_>) -> R {
    let key = args.tensor(0)?;
    let num_splits = args.int(1)?;
    let keys = key_pairs("_philox_key_split", &key)?;
    if num_splits <= 0 {
        return Err(invalid_argument(
            "_philox_key_split",
            "num_splits",
            "must be positive",
            num_splits,
        ));
    }
    let splits = num_splits as usize;
    let total = splits.checked_mul(key.numel()).ok_or_else(|| {
        invalid_argument(
            "_philox_key_split",
            "num_splits",
            "must keep the result's size within usize",
            num_splits,
        )
    })?;
    let mut out = Vec::with_capacity(total);
    for s in 0..splits as u64 {
        for [seed, offset] in &keys {
            out.extend(derive_key(philox_4x32(*seed, offset.wrapping_add(s))));
        }
    }
    let mut shape = vec![splits];
    shape.extend_from_slice(key.shape());
    Ok(IValue::Tensor(Tensor::from_vec(out, &shape)?))
}

/// Each key replaced by the key derived from its block `offset + data` (`data` as uint64).
fn fold_in_impl(key: &Tensor, data: u64) -> R {
    let keys = key_pairs("_philox_key_fold_in", key)?;
    let out: Vec<u64> = keys
        .iter()
        .flat_map(|[seed, offset]| derive_key(philox_4x32(*seed, offset.wrapping_add(data))))
        .collect();
    Ok(IValue::Tensor(Tensor::from_vec(out, key.shape())?))
}

/// `_philox_key_fold_in(key, data)`: the int reinterpreted as uint64.
fn key_fold_in(args: &mut Args<'_>) -> R {
    let key = args.tensor(0)?;
    fold_in_impl(&key, args.int(1)? as u64)
}

/// `_philox_key_fold_in.Tensor(key, data)`: `data` a one-element uint64 tensor.
fn key_fold_in_tensor(args: &mut Args<'_>) -> R {
    let key = args.tensor(0)?;
    let data = args.tensor(1)?;
    if data.dtype() != DType::UInt64 {
        return Err(wrong_dtype(
            "_philox_key_fold_in",
            "data",
            "uint64",
            data.dtype(),
        ));
    }
    let v = data.contiguous()?.to_vec::<u64>()?;
    match v.as_slice() {
        [d] => fold_in_impl(&key, *d),
        _ => Err(size_mismatch(
            "_philox_key_fold_in",
            "the number of elements of data",
            1,
            v.len() as i64,
        )),
    }
}

/// For each of `out`'s elements (row-major), the `(seed, offset)` of its key and its index
/// within that key's stream. A 1-d key drives the whole tensor; a batched key (`key.dim() ==
/// out.dim() + 1`, batch dims broadcastable to `out`'s leading dims) drives one slice each:
/// its trailing batch dims of size 1 span a contiguous run of elements.
fn streams(op: &str, out_shape: &[usize], key: &Tensor) -> crate::Result<Vec<([u64; 2], usize)>> {
    let keys = key_pairs(op, key)?;
    let numel: usize = out_shape.iter().product();
    if key.dim() == 1 {
        let k = keys.first().copied().unwrap_or([0, 0]);
        return Ok((0..numel).map(|i| (k, i)).collect());
    }
    let kshape = &key.shape()[..key.dim() - 1];
    if kshape.len() != out_shape.len() {
        return Err(rank_mismatch(
            op,
            "batched key",
            RankRequirement::Exactly(out_shape.len() + 1),
            key.shape(),
        ));
    }
    if let Some((dim, (k, s))) = kshape
        .iter()
        .zip(out_shape)
        .enumerate()
        .find(|(_, (k, s))| **k != 1 && k != s)
    {
        return Err(TensorError::Broadcast { a: *k, b: *s, dim }.into());
    }
    // the trailing run of size-1 key dims shares one key
    let mut key_dims = out_shape.len();
    while key_dims > 0 && kshape[key_dims - 1] == 1 {
        key_dims -= 1;
    }
    let per_key: usize = out_shape[key_dims..].iter().product();
    let mut res = Vec::with_capacity(numel);
    let mut idx = vec![0usize; key_dims];
    for _ in 0..numel.checked_div(per_key).unwrap_or(0) {
        // the key of this leading index (broadcast over size-1 key dims)
        let mut flat = 0usize;
        for (d, &i) in idx.iter().enumerate() {
            flat = flat * kshape[d] + if kshape[d] == 1 { 0 } else { i };
        }
        let k = keys
            .get(flat)
            .copied()
            .ok_or(TensorError::IndexOutOfBounds {
                index: flat as i64,
                dim: 0,
                size: keys.len(),
            })?;
        res.extend((0..per_key).map(|j| (k, j)));
        for d in (0..key_dims).rev() {
            idx[d] += 1;
            if idx[d] < out_shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    Ok(res)
}

/// Fill `out` with one value per element: element `j` of a key's stream is entry `j % per`
/// of `block(seed, offset + j / per)` (the block cached while consecutive elements share it).
/// (`block` and `pick` are not generic: one instance per block and value type.)
fn fill_from_blocks<T: crate::tensor::Element, B: Copy>(
    op: &str,
    out: &Tensor,
    key: &Tensor,
    per: usize,
    block: fn(u64, u64) -> B,
    pick: &dyn Fn(&B, usize) -> T,
) -> crate::Result<()> {
    let elems = streams(op, out.shape(), key)?;
    let mut cached: Option<([u64; 2], u64, B)> = None;
    let mut vals = Vec::with_capacity(elems.len());
    for ([seed, offset], j) in elems {
        let chunk = (j / per) as u64;
        let b = match cached {
            Some((k, c, b)) if k == [seed, offset] && c == chunk => b,
            _ => {
                let b = block(seed, offset.wrapping_add(chunk));
                cached = Some(([seed, offset], chunk, b));
                b
            }
        };
        vals.push(pick(&b, j % per));
    }
    out.copy_from(&Tensor::from_vec(vals, out.shape())?)
}

fn check_floating(op: &str, t: &Tensor) -> crate::Result<()> {
    if t.dtype().is_floating_point() {
        Ok(())
    } else {
        // PyTorch's dispatcher refusal: its kernel is instantiated for floating dtypes only
        Err(not_implemented_for(op, t.dtype()))
    }
}

/// `uniform_real(bits, lo, hi)` for a half-width dtype: `digits` mantissa bits of the word
/// scaled to [0, 1) in float, times `hi - lo` rounded to the dtype, plus `lo`.
fn uniform_half(word: u32, digits: u32, lo: f32, range: f32) -> f32 {
    let x = (word & ((1u32 << digits) - 1)) as f32 / (1u32 << digits) as f32;
    x * range + lo
}

/// `_philox_uniform_(self, key, low, high)`: ATen's `uniform_real` transform of one word per
/// element (4 per block), or of two words joined high-first for float64 (2 per block).
fn uniform_(args: &mut Args<'_>) -> R {
    const OP: &str = "_philox_uniform_";
    let out = args.tensor(0)?;
    let key = args.tensor(1)?;
    let (low, high) = (args.double(2)?, args.double(3)?);
    check_floating(OP, &out)?;
    match out.dtype() {
        DType::Float64 => fill_from_blocks(OP, &out, &key, 2, philox_words64, &|b, j| {
            let x = (b[j] & ((1u64 << 53) - 1)) as f64 / (1u64 << 53) as f64;
            x * (high - low) + low
        })?,
        DType::Float32 => {
            let (lo, hi) = (low as f32, high as f32);
            fill_from_blocks(OP, &out, &key, 4, philox_4x32, &|b, j| {
                let x = (b[j] & ((1u32 << 24) - 1)) as f32 / (1u32 << 24) as f32;
                x * (hi - lo) + lo
            })?
        }
        DType::Float16 => {
            let (lo, hi) = (f16::from_f32(low as f32), f16::from_f32(high as f32));
            let range = f16::from_f32(hi.to_f32() - lo.to_f32()).to_f32();
            fill_from_blocks(OP, &out, &key, 4, philox_4x32, &|b, j| {
                f16::from_f32(uniform_half(b[j], 11, lo.to_f32(), range))
            })?
        }
        DType::BFloat16 => {
            let (lo, hi) = (bf16::from_f32(low as f32), bf16::from_f32(high as f32));
            let range = bf16::from_f32(hi.to_f32() - lo.to_f32()).to_f32();
            fill_from_blocks(OP, &out, &key, 4, philox_4x32, &|b, j| {
                bf16::from_f32(uniform_half(b[j], 8, lo.to_f32(), range))
            })?
        }
        d => return Err(not_implemented_for(OP, d)),
    }
    Ok(IValue::Tensor(out))
}

/// Box-Muller in float on one block: four normals from the four words mapped to (0, 1].
fn box_muller_f32(r: [u32; 4]) -> [f32; 4] {
    const M: f32 = 2.328_306_4e-10; // 2^-32
    const TWO_PI: f32 = std::f32::consts::TAU;
    let u = r.map(|x| (x as f32).mul_add(M, M * 0.5));
    let radius1 = (-2.0f32 * u[0].ln()).sqrt();
    let radius2 = (-2.0f32 * u[2].ln()).sqrt();
    let (s1, c1) = (TWO_PI * u[1]).sin_cos();
    let (s2, c2) = (TWO_PI * u[3]).sin_cos();
    [radius1 * c1, radius1 * s1, radius2 * c2, radius2 * s2]
}

/// Box-Muller in double on one block: two normals, each uniform from two words.
fn box_muller_f64(r: [u32; 4]) -> [f64; 2] {
    const M: f64 = 2.328_306_436_538_696_3e-10; // 2^-32
    let u1 = (r[0] as f64).mul_add(M, r[1] as f64 * M * M + M * M * 0.5);
    let u2 = (r[2] as f64).mul_add(M, r[3] as f64 * M * M + M * M * 0.5);
    let radius = (-2.0 * u1.ln()).sqrt();
    let (s, c) = (std::f64::consts::TAU * u2).sin_cos();
    [radius * c, radius * s]
}

/// `_philox_normal_(self, key, mean, std)`: `normal * std + mean` in float (double for
/// float64), cast to the dtype.
fn normal_(args: &mut Args<'_>) -> R {
    const OP: &str = "_philox_normal_";
    let out = args.tensor(0)?;
    let key = args.tensor(1)?;
    let (mean, std) = (args.double(2)?, args.double(3)?);
    check_floating(OP, &out)?;
    let block32: fn(u64, u64) -> [f32; 4] = |s, o| box_muller_f32(philox_4x32(s, o));
    let (mu, sigma) = (mean as f32, std as f32);
    match out.dtype() {
        DType::Float64 => fill_from_blocks(
            OP,
            &out,
            &key,
            2,
            |s, o| box_muller_f64(philox_4x32(s, o)),
            &|b: &[f64; 2], j| b[j] * std + mean,
        )?,
        DType::Float32 => fill_from_blocks(OP, &out, &key, 4, block32, &|b, j| b[j] * sigma + mu)?,
        DType::Float16 => fill_from_blocks(OP, &out, &key, 4, block32, &|b, j| {
            f16::from_f32(b[j] * sigma + mu)
        })?,
        DType::BFloat16 => fill_from_blocks(OP, &out, &key, 4, block32, &|b, j| {
            bf16::from_f32(b[j] * sigma + mu)
        })?,
        d => return Err(not_implemented_for(OP, d)),
    }
    Ok(IValue::Tensor(out))
}

/// `(min, max + 1)` of an integer dtype `_philox_randint_` fills, and its width in bits.
fn int_range(dtype: DType) -> Option<(i128, i128, u32)> {
    let (lo, hi, bits): (i128, i128, u32) = match dtype {
        DType::UInt8 => (0, 1 << 8, 8),
        DType::UInt16 => (0, 1 << 16, 16),
        DType::UInt32 => (0, 1 << 32, 32),
        DType::UInt64 => (0, 1 << 64, 64),
        DType::Int8 => (-(1 << 7), 1 << 7, 8),
        DType::Int16 => (-(1 << 15), 1 << 15, 16),
        DType::Int32 => (-(1 << 31), 1 << 31, 32),
        DType::Int64 => (-(1 << 63), 1 << 63, 64),
        _ => return None,
    };
    Some((lo, hi, bits))
}

/// `_philox_randint_(self, key, low, high)`: one 32-bit word per element (4 per block) for
/// dtypes up to 32 bits, two words joined high-first for 64-bit dtypes (2 per block). Without
/// bounds the word's low bits are the value; with bounds, `low + word % (high - low)`, a
/// missing bound the dtype's own. (uint64 bounds arrive as int64 and are read as uint64.)
fn randint_(args: &mut Args<'_>) -> R {
    const OP: &str = "_philox_randint_";
    let out = args.tensor(0)?;
    let key = args.tensor(1)?;
    let (low, high) = (args.opt_int(2)?, args.opt_int(3)?);
    let dtype = out.dtype();
    let (dmin, dend, bits) =
        int_range(dtype).ok_or_else(|| wrong_dtype(OP, "self", "an integer dtype", dtype))?;
    let as_bound = |v: i64| -> i128 {
        if dtype == DType::UInt64 {
            v as u64 as i128
        } else {
            v as i128
        }
    };
    // None: the raw word; Some((lo, range)): lo + word % range (range 0: the full 2^bits)
    let bounds = match (low, high) {
        (None, None) => None,
        _ => {
            let lo = low.map_or(dmin, as_bound);
            let hi = high.map_or(dend, as_bound);
            if lo >= hi || lo < dmin || hi > dend {
                return Err(invalid_argument(
                    OP,
                    "[low, high)",
                    format!("must be non-empty and within the range of {dtype}"),
                    format!("[{lo}, {hi})"),
                ));
            }
            let range = (hi - lo) as u128;
            if bits <= 32 {
                let r32 = (range % (1u128 << 32)) as u64;
                if !(r32 == 0 || (1u64 << 32).is_multiple_of(r32) || r32 < (1 << 28)) {
                    return Err(invalid_argument(
                        OP,
                        "high - low",
                        format!(
                            "must divide 2^32 evenly or be below 2^28 for the output dtype {dtype}"
                        ),
                        r32,
                    ));
                }
            }
            Some((lo, (range % (1u128 << 64)) as u64))
        }
    };
    // the drawn value, wrapped to the dtype's width (two's complement for signed dtypes)
    let value = move |word: u64| -> i128 {
        match bounds {
            None => word as i128,
            Some((lo, 0)) => lo + word as i128,
            Some((lo, range)) => lo + (word % range) as i128,
        }
    };
    macro_rules! fill32 {
        ($T:ty) => {
            fill_from_blocks(OP, &out, &key, 4, philox_4x32, &|b, j| {
                value(b[j] as u64) as $T
            })?
        };
    }
    macro_rules! fill64 {
        ($T:ty) => {
            fill_from_blocks(OP, &out, &key, 2, philox_words64, &|b, j| value(b[j]) as $T)?
        };
    }
    match dtype {
        DType::UInt8 => fill32!(u8),
        DType::UInt16 => fill32!(u16),
        DType::UInt32 => fill32!(u32),
        DType::UInt64 => fill64!(u64),
        DType::Int8 => fill32!(i8),
        DType::Int16 => fill32!(i16),
        DType::Int32 => fill32!(i32),
        _ => fill64!(i64),
    }
    Ok(IValue::Tensor(out))
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::_philox_key_split", key_split);
    r.add("aten::_philox_key_fold_in", key_fold_in);
    r.add("aten::_philox_key_fold_in.Tensor", key_fold_in_tensor);
    r.add("aten::_philox_uniform_", uniform_);
    r.add("aten::_philox_normal_", normal_);
    r.add("aten::_philox_randint_", randint_);
    r.add("aten::_philox_uniform", |a| on_fresh_copy(a, uniform_));
    r.add("aten::_philox_normal", |a| on_fresh_copy(a, normal_));
    r.add("aten::_philox_randint", |a| on_fresh_copy(a, randint_));
}
