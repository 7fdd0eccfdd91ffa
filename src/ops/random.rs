//! Random number generation reproducing PyTorch's CPU generator: an mt19937 seeded like
//! `torch.manual_seed`, with PyTorch's transforms for uniform, normal (including the 16-wide
//! Box-Muller fill for contiguous tensors of 16+ elements), integer ranges and permutations,
//! the serial distribution kernels (exponential, Cauchy, log-normal, geometric, Poisson) and
//! multinomial.

use super::creation::{factory_dtype, size_arg};
use super::kernels::map::map_unary;
use super::kernels::{
    cpu_kernel_name, invalid_argument, not_implemented_for, rank_mismatch, size_mismatch,
    unsupported_feature, wrong_dtype,
};
use super::{Args, OpContext, Registry};
use crate::tensor::RankRequirement;
use crate::tensor::{DType, Tensor};
use crate::values::IValue;
use crate::values::{Generator, SharedGenerator};
use half::{bf16, f16};
use parking_lot::Mutex;
use std::sync::Arc;

/// Mantissa digits of PyTorch's `opmath_type` for `dtype`, which its uniform transform draws
/// in: double for float64, float for float32, float16 and bfloat16.
fn opmath_digits(dtype: DType) -> u32 {
    match dtype {
        DType::Float64 => 53,
        _ => 24,
    }
}

/// One `uniform_real_distribution<opmath_t>(0, 1)` draw for `dtype`.
fn uniform_opmath(g: &mut Generator, dtype: DType) -> f64 {
    match opmath_digits(dtype) {
        53 => g.uniform_f64(),
        d => g.uniform_bits(d),
    }
}

/// Fill `out` (fresh, contiguous, floating) with uniform samples in `[from, to)` as PyTorch's
/// CPU `uniform_kernel`: `u * (to - from) + from` in opmath (float below float64), cast to the
/// storage dtype, and a cast that rounded up to `to` replaced by `from`.
fn fill_uniform(g: &mut Generator, out: &Tensor, from: f64, to: f64) -> crate::Result<()> {
    macro_rules! fill {
        ($T:ty, $M:ty, $to_t:expr) => {{
            let (from_m, to_m) = (from as $M, to as $M);
            let cast: fn($M) -> $T = $to_t;
            let (from_s, to_s) = (cast(from_m), cast(to_m));
            let mut v_guard = out.write::<$T>()?;
            let mut v = v_guard.view_mut();
            for x in v.iter_mut() {
                let u = uniform_opmath(g, out.dtype()) as $M;
                let value = cast(u * (to_m - from_m) + from_m);
                *x = if value == to_s { from_s } else { value };
            }
        }};
    }
    match out.dtype() {
        DType::Float32 => fill!(f32, f32, |v| v),
        DType::Float64 => fill!(f64, f64, |v| v),
        DType::Float16 => fill!(f16, f32, f16::from_f32),
        DType::BFloat16 => fill!(bf16, f32, bf16::from_f32),
        d => return Err(not_implemented_for("check_uniform_bounds", d)),
    }
    Ok(())
}

/// PyTorch's `normal_fill_16`: Box-Muller over 16 uniforms in place (first 8 are u1 lanes).
fn normal_fill_16(data: &mut [f64], mean: f64, std: f64) {
    for j in 0..8 {
        let u1 = 1.0 - data[j];
        let u2 = data[j + 8];
        let radius = (-2.0 * u1.ln()).sqrt();
        let theta = 2.0 * std::f64::consts::PI * u2;
        data[j] = radius * theta.cos() * std + mean;
        data[j + 8] = radius * theta.sin() * std + mean;
    }
}

/// PyTorch's normal fill for float16 / bfloat16 (16+ contiguous elements): float uniforms
/// drawn for the whole blocks of 16 only (not for the tail, unlike float32's fill), each
/// block through `normal_fill_16`, then 16 fresh uniforms for the last 16 elements when the
/// count is not a multiple of 16.
fn fill_normal_half(g: &mut Generator, dt: DType, n: usize, mean: f64, std: f64) -> Vec<f64> {
    let whole = n - n % 16;
    let mut data: Vec<f64> = (0..whole).map(|_| uniform_opmath(g, dt)).collect();
    data.resize(n, 0.0);
    for block in data[..whole].chunks_exact_mut(16) {
        normal_fill_16(block, mean, std);
    }
    if whole != n {
        let tail = &mut data[n - 16..];
        for x in tail.iter_mut() {
            *x = uniform_opmath(g, dt);
        }
        normal_fill_16(tail, mean, std);
    }
    data
}

/// `torch.manual_seed(seed); torch.randn(shape, dtype=dtype)`: standard normal samples drawn as
/// PyTorch's CPU generator draws them (`tsrun run --random`).
pub fn seeded_randn(shape: &[usize], dtype: DType, seed: u64) -> crate::Result<Tensor> {
    let out = Tensor::zeros(shape, dtype)?;
    fill_normal(&mut Generator::new(seed), &out, 0.0, 1.0)?;
    Ok(out)
}

/// Fill `out` with normal samples as PyTorch's CPU `normal_` does.
fn fill_normal(g: &mut Generator, out: &Tensor, mean: f64, std: f64) -> crate::Result<()> {
    let dt = out.dtype();
    if !dt.is_floating_point() {
        return Err(not_implemented_for("normal_kernel_cpu", dt));
    }
    let n = out.numel();
    let half_width = matches!(dt, DType::Float16 | DType::BFloat16);
    let vals: Vec<f64> = if n >= 16 && out.is_contiguous() && half_width {
        fill_normal_half(g, dt, n, mean, std)
    } else if n >= 16 && out.is_contiguous() {
        // the uniforms are drawn and kept in opmath (float below float64)
        let mut data: Vec<f64> = (0..n).map(|_| uniform_opmath(g, dt)).collect();
        let mut i = 0;
        while i + 16 <= n {
            normal_fill_16(&mut data[i..i + 16], mean, std);
            i += 16;
        }
        if !n.is_multiple_of(16) {
            let tail = &mut data[n - 16..];
            for x in tail.iter_mut() {
                *x = uniform_opmath(g, dt);
            }
            normal_fill_16(tail, mean, std);
        }
        data
    } else {
        (0..n).map(|_| g.normal_f64() * std + mean).collect()
    };
    let src = Tensor::from_vec(vals, out.shape())?;
    out.copy_from(&src)
}

/// `v` cast to floating `dtype` and back to an integer, as C++'s `static_cast` pair does.
fn through_dtype(v: i64, dtype: DType) -> i64 {
    match dtype {
        DType::Float32 => v as f32 as i64,
        DType::Float16 => f16::from_f32(v as f32).to_f64() as i64,
        DType::BFloat16 => bf16::from_f32(v as f32).to_f64() as i64,
        _ => v as f64 as i64,
    }
}

/// `std::numeric_limits<scalar_t>::digits` of a floating dtype.
fn mantissa_digits(dtype: DType) -> u32 {
    match dtype {
        DType::Float64 => 53,
        DType::Float16 => 11,
        DType::BFloat16 => 8,
        _ => 24,
    }
}

/// PyTorch's `update_from`/`update_to`: for a floating output, move `[from, to)` inwards to the
/// nearest bounds whose casts to the dtype stay inside the range.
fn float_bounds(from: i64, to: i64, dtype: DType) -> (i64, i64) {
    let digits = mantissa_digits(dtype) as i64;
    let step = |v: i64| {
        let n = 63 - (v.unsigned_abs().max(1)).leading_zeros() as i64;
        1i64.checked_shl((n - digits + 1).max(0) as u32)
            .unwrap_or(0)
    };
    let mut from = from;
    let from_plus_1 = through_dtype(from.wrapping_add(1), dtype);
    if from_plus_1 < from {
        from = from_plus_1.wrapping_add(step(from.wrapping_add(1)));
    }
    let mut to = to;
    let to_minus_1 = through_dtype(to.wrapping_sub(1), dtype);
    if to_minus_1 >= to {
        to = to_minus_1.wrapping_sub(step(to.wrapping_sub(1)));
    }
    (from, to)
}

/// PyTorch's `random_from_to` into a tensor of `dtype`: `base + bits % range`, with 64-bit draws
/// for ranges of 2^28 or more (the open-source build's threshold) and, for floating dtypes, the
/// bounds first narrowed so the cast result stays in `[low, high)`.
fn fill_randint(
    g: &mut Generator,
    out: &Tensor,
    dtype: DType,
    low: i64,
    high: i64,
) -> crate::Result<()> {
    if high <= low {
        return Err(invalid_argument(
            "random_",
            "from",
            format!("must be less than to ({high})"),
            low,
        ));
    }
    let (low, high) = if dtype.is_floating_point() {
        let (l, h) = float_bounds(low, high, dtype);
        if h <= l {
            return Err(invalid_argument(
                "random_",
                format!("from cast to {dtype}"),
                format!("must be less than to cast to {dtype} ({h})"),
                l,
            ));
        }
        (l, h)
    } else {
        (low, high)
    };
    let range = high.wrapping_sub(low) as u64;
    let n = out.numel();
    let vals: Vec<i64> = (0..n)
        .map(|_| {
            let bits = if range >= 1u64 << 28 {
                g.random_u64()
            } else {
                g.random_u32() as u64
            };
            (bits % range).wrapping_add(low as u64) as i64
        })
        .collect();
    out.copy_from(&Tensor::from_vec(vals, out.shape())?)
}

/// Training-mode dropout: keep each element with probability `1 - p` and scale by `1/(1-p)`
/// (`feature`: one draw per channel; `alpha`: alpha dropout's affine correction).
///
/// PyTorch draws dropout masks through `bernoulli_`, whose CPU path uses MKL's own generator;
/// tsrun's masks come from the same seeded mt19937 but are not bit-identical to PyTorch's.
pub(crate) fn dropout_train(
    ctx: &OpContext,
    x: &Tensor,
    p: f64,
    feature: bool,
    alpha: bool,
) -> crate::Result<Tensor> {
    if !x.dtype().is_floating_point() {
        return Err(wrong_dtype(
            "dropout",
            "input",
            "a floating-point tensor",
            x.dtype(),
        ));
    }
    let mask_shape: Vec<usize> = if feature {
        x.shape()
            .iter()
            .enumerate()
            .map(|(i, &s)| if i < 2 { s } else { 1 })
            .collect()
    } else {
        x.shape().to_vec()
    };
    let n: usize = mask_shape.iter().product();
    let keep: Vec<f64> = {
        let mut g = ctx.generator.lock();
        (0..n)
            .map(|_| if g.uniform_f64() < 1.0 - p { 1.0 } else { 0.0 })
            .collect()
    };
    let mask = Tensor::from_vec(keep, &mask_shape)?;
    let xf = x.to_dtype(DType::Float64)?;
    let out = if alpha {
        let alpha_p = -1.7580993408473766 * 1.0507009873554805;
        let a = 1.0 / ((alpha_p * alpha_p * p + 1.0) * (1.0 - p)).sqrt();
        let b = -a * alpha_p * p;
        super::kernels::map::map_binary::<f64, f64, f64, _>(&xf, &mask, |v, m| {
            (if m > 0.0 { v } else { alpha_p }) * a + b
        })?
    } else {
        let scale = if p >= 1.0 { 0.0 } else { 1.0 / (1.0 - p) };
        super::kernels::map::map_binary::<f64, f64, f64, _>(&xf, &mask, |v, m| v * m * scale)?
    };
    out.to_dtype(x.dtype())
}

type R = crate::Result<IValue>;

/// `rand`/`randn` and their `.generator` overloads: `size` at 0, factory args after.
fn rand_impl(args: &Args<'_>, normal: bool, gen_overload: bool) -> crate::Result<Tensor> {
    let size = size_arg(args, 0)?;
    let (gen, first) = if gen_overload {
        (args.generator(1)?, 2)
    } else {
        (args.ctx.generator.clone(), 1)
    };
    let dtype = factory_dtype(args, first, DType::Float32)?;
    if !dtype.is_floating_point() {
        let kernel = if normal {
            "normal_kernel_cpu"
        } else {
            "check_uniform_bounds"
        };
        return Err(not_implemented_for(kernel, dtype));
    }
    let out = Tensor::zeros(&size, dtype)?;
    let mut g = gen.lock();
    if normal {
        fill_normal(&mut g, &out, 0.0, 1.0)?;
    } else {
        fill_uniform(&mut g, &out, 0.0, 1.0)?;
    }
    Ok(out)
}
// One kernel per overload: `GEN` is the `.generator` overload (a Generator argument after the
// size), fixed at registration rather than read from the name.
fn rand<const GEN: bool>(args: &mut Args<'_>) -> R {
    Ok(IValue::Tensor(rand_impl(args, false, GEN)?))
}
fn randn<const GEN: bool>(args: &mut Args<'_>) -> R {
    Ok(IValue::Tensor(rand_impl(args, true, GEN)?))
}
fn like_impl(args: &Args<'_>, normal: bool, gen_overload: bool) -> crate::Result<Tensor> {
    let x = args.tensor(0)?;
    let (gen, first) = if gen_overload {
        (args.generator(1)?, 2)
    } else {
        (args.ctx.generator.clone(), 1)
    };
    let dtype = factory_dtype(args, first, x.dtype())?;
    let out = Tensor::zeros(x.shape(), dtype)?;
    let mut g = gen.lock();
    if normal {
        fill_normal(&mut g, &out, 0.0, 1.0)?;
    } else {
        fill_uniform(&mut g, &out, 0.0, 1.0)?;
    }
    Ok(out)
}
fn rand_like<const GEN: bool>(args: &mut Args<'_>) -> R {
    Ok(IValue::Tensor(like_impl(args, false, GEN)?))
}
fn randn_like<const GEN: bool>(args: &mut Args<'_>) -> R {
    Ok(IValue::Tensor(like_impl(args, true, GEN)?))
}

/// `randint` (`LOW`: the `.low` overloads with a lower bound; `GEN`: with a Generator).
fn randint<const LOW: bool, const GEN: bool>(args: &mut Args<'_>) -> R {
    randint_as(args, LOW, GEN)
}

fn randint_as(args: &mut Args<'_>, low_form: bool, gen_overload: bool) -> R {
    let (low, high, size_at) = if low_form {
        (args.int(0)?, args.int(1)?, 2)
    } else {
        (0, args.int(0)?, 1)
    };
    let size = size_arg(args, size_at)?;
    let (gen, first) = if gen_overload {
        (args.generator(size_at + 1)?, size_at + 2)
    } else {
        (args.ctx.generator.clone(), size_at + 1)
    };
    // An explicit `dtype=None` means the default float dtype (the schema default is int64).
    let dtype = factory_dtype(args, first, DType::Float32)?;
    let out = Tensor::zeros(&size, dtype)?;
    fill_randint(&mut gen.lock(), &out, dtype, low, high)?;
    Ok(IValue::Tensor(out))
}

/// `randint_like` (`LOW`: the `.low_*` overloads; `GEN`: with a Generator).
fn randint_like<const LOW: bool, const GEN: bool>(args: &mut Args<'_>) -> R {
    randint_like_as(args, LOW, GEN)
}

fn randint_like_as(args: &mut Args<'_>, low_form: bool, gen_overload: bool) -> R {
    let x = args.tensor(0)?;
    let (low, high, first) = if low_form {
        (args.int(1)?, args.int(2)?, 3)
    } else {
        (0, args.int(1)?, 2)
    };
    let (gen, first) = if gen_overload {
        (args.generator(first)?, first + 1)
    } else {
        (args.ctx.generator.clone(), first)
    };
    let dtype = factory_dtype(args, first, x.dtype())?;
    let out = Tensor::zeros(x.shape(), dtype)?;
    fill_randint(&mut gen.lock(), &out, dtype, low, high)?;
    Ok(IValue::Tensor(out))
}

fn randperm<const GEN: bool>(args: &mut Args<'_>) -> R {
    randperm_as(args, GEN)
}

fn randperm_as(args: &mut Args<'_>, gen_overload: bool) -> R {
    let n = args.int(0)?;
    if n < 0 {
        return Err(invalid_argument("randperm", "n", "must be non-negative", n));
    }
    let (gen, first) = if gen_overload {
        (args.generator(1)?, 2)
    } else {
        (args.ctx.generator.clone(), 1)
    };
    let dtype = factory_dtype(args, first, DType::Int64)?;
    let n = n as usize;
    let mut perm: Vec<i64> = (0..n as i64).collect();
    {
        let mut g = gen.lock();
        for i in 0..n.saturating_sub(1) {
            let span = (n - i) as u64;
            let z = if n < (u32::MAX as usize) / 20 {
                g.random_u32() as u64 % span
            } else {
                g.random_u64() % span
            };
            perm.swap(i, i + z as usize);
        }
    }
    Ok(IValue::Tensor(
        Tensor::from_vec(perm, &[n])?.to_dtype(dtype)?,
    ))
}

fn uniform_(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let (from, to) = (args.double(1)?, args.double(2)?);
    let gen = args.generator(3)?;
    let tmp = Tensor::zeros(x.shape(), x.dtype())?;
    fill_uniform(&mut gen.lock(), &tmp, from, to)?;
    x.copy_from(&tmp)?;
    Ok(IValue::Tensor(x))
}

fn normal_(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let (mean, std) = (args.double(1)?, args.double(2)?);
    let gen = args.generator(3)?;
    if std < 0.0 {
        return Err(invalid_argument("normal", "std", "must be >= 0.0", std));
    }
    let tmp = Tensor::zeros(x.shape(), x.dtype())?;
    fill_normal(&mut gen.lock(), &tmp, mean, std)?;
    x.copy_from(&tmp)?;
    Ok(IValue::Tensor(x))
}

/// `prims::normal(shape, mean=, std=, dtype=, device=, requires_grad=, generator=)`: a fresh
/// tensor filled by `normal_(mean, std)`.
fn prims_normal(args: &mut Args<'_>) -> R {
    let shape = size_arg(args, 0)?;
    let dtype = args.dtype(3)?;
    fill_fresh(args, &shape, dtype, normal_)
}

/// A fresh `shape` tensor of `dtype` filled by the in-place draw `fill(x, args[1], args[2],
/// generator=args[6])` (the random prims' two distribution parameters and their generator).
fn fill_fresh(args: &Args<'_>, shape: &[usize], dtype: DType, fill: fn(&mut Args<'_>) -> R) -> R {
    let mut values = vec![
        IValue::Tensor(Tensor::zeros(shape, dtype)?),
        args.get(1)?.clone(),
        args.get(2)?.clone(),
        args.values.get(6).cloned().unwrap_or(IValue::None),
    ];
    fill(&mut Args::new(args.op, &mut values, args.ctx))
}

/// `prims::uniform(shape, low=, high=, dtype=, device=, stride=, generator=)`: a fresh
/// tensor filled by `uniform_(low, high)`. Only contiguous strides: `uniform_` fills a
/// strided tensor in memory order.
fn prims_uniform(args: &mut Args<'_>) -> R {
    let shape = size_arg(args, 0)?;
    let dtype = args.dtype(3)?;
    let stride = args.int_list(5)?;
    let contiguous = crate::tensor::contiguous_strides(&shape);
    let dense = stride.len() == shape.len()
        && shape
            .iter()
            .zip(stride.iter().zip(contiguous.iter()))
            .all(|(&n, (&s, &c))| n <= 1 || s == c as i64);
    if !dense {
        return Err(unsupported_feature(
            "prims::uniform",
            format!("strides {stride:?} for shape {shape:?} (only contiguous ones)"),
        ));
    }
    fill_fresh(args, &shape, dtype, uniform_)
}

fn normal_float_float(args: &mut Args<'_>) -> R {
    let (mean, std) = (args.double(0)?, args.double(1)?);
    let size = size_arg(args, 2)?;
    let gen = args.generator(3)?;
    let dtype = factory_dtype(args, 4, DType::Float32)?;
    let out = Tensor::zeros(&size, dtype)?;
    fill_normal(&mut gen.lock(), &out, mean, std)?;
    Ok(IValue::Tensor(out))
}

/// normal.Tensor_Tensor / Tensor_float / float_Tensor: as ATen's normal_out_impl, standard
/// normal samples (`normal(0, std)` when std is a float) in the result dtype, then `* std` and
/// `+ mean`, each step rounded to that dtype.
/// `FLOAT_STD` is the `Tensor_float` overload.
fn normal_tensors<const FLOAT_STD: bool>(args: &mut Args<'_>) -> R {
    normal_tensors_as(args, FLOAT_STD)
}

fn normal_tensors_as(args: &mut Args<'_>, float_std: bool) -> R {
    let (mean, std) = (args.get(0)?.clone(), args.get(1)?.clone());
    let gen = args.generator(2)?;
    let as_tensor = |v: &IValue| -> crate::Result<Option<Tensor>> {
        Ok(match v {
            IValue::Tensor(t) => Some(t.clone()),
            _ => None,
        })
    };
    let (mt, st) = (as_tensor(&mean)?, as_tensor(&std)?);
    let shape = match (&mt, &st) {
        (Some(m), Some(s)) => crate::tensor::broadcast_shapes(m.shape(), s.shape())?.to_vec(),
        (Some(m), None) => m.shape().to_vec(),
        (None, Some(s)) => s.shape().to_vec(),
        (None, None) => {
            return Err(invalid_argument(
                args.op,
                "mean and std",
                "must include a tensor",
                format!("{mean:?} and {std:?}"),
            ))
        }
    };
    let dtype = mt
        .as_ref()
        .or(st.as_ref())
        .map(|t| t.dtype())
        .unwrap_or(DType::Float32);
    if !dtype.is_floating_point() {
        return Err(wrong_dtype(
            "normal",
            "mean and std",
            "floating-point tensors",
            dtype,
        ));
    }
    let values = |t: &Option<Tensor>, v: &IValue| -> crate::Result<Vec<f64>> {
        match t {
            Some(t) => super::shape::expand_to(t, &shape)?.to_vec::<f64>(),
            None => Ok(vec![v.as_double().unwrap_or(0.0); shape.iter().product()]),
        }
    };
    let sv = values(&st, &std)?;
    if sv.iter().any(|&s| s < 0.0) {
        return Err(invalid_argument(
            "normal",
            "std",
            "must be >= 0.0 everywhere",
            sv.iter().copied().fold(f64::INFINITY, f64::min),
        ));
    }
    let mv = values(&mt, &mean)?;
    let out = Tensor::zeros(&shape, dtype)?;
    let base_std = if float_std {
        sv.first().copied().unwrap_or(1.0)
    } else {
        1.0
    };
    fill_normal(&mut gen.lock(), &out, 0.0, base_std)?;
    let round = |x: f64| -> f64 {
        match dtype {
            DType::Float64 => x,
            DType::Float32 => x as f32 as f64,
            DType::Float16 => half::f16::from_f64(x).to_f64(),
            _ => half::bf16::from_f64(x).to_f64(),
        }
    };
    let nv = out.to_vec::<f64>()?;
    let res: Vec<f64> = nv
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let scaled = if float_std { n } else { round(n * sv[i]) };
            round(scaled + mv[i])
        })
        .collect();
    Ok(IValue::Tensor(
        Tensor::from_vec(res, &shape)?.to_dtype(dtype)?,
    ))
}

/// `exponential_(self, lambd)`: per element (row-major) a double uniform `u` and
/// `-1 / lambd * log1p(-u)`, as ATen's CPU exponential kernel.
fn exponential_(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let lambd = args.double(1)?;
    let gen = args.generator(2)?;
    if lambd <= 0.0 || lambd.is_nan() {
        return Err(invalid_argument(
            "exponential_",
            "lambda",
            "must be > 0.0",
            lambd,
        ));
    }
    if !x.dtype().is_floating_point() {
        return Err(not_implemented_for("exponential_cpu", x.dtype()));
    }
    let n = x.numel();
    let mut g = gen.lock();
    let v: Vec<f64> = (0..n)
        .map(|_| (-1.0 / lambd) * (-g.uniform_f64()).ln_1p())
        .collect();
    drop(g);
    x.copy_from(&Tensor::from_vec(v, x.shape())?)?;
    Ok(IValue::Tensor(x))
}

/// Fill floating `x` in place with one draw per element (row-major), each computed in double
/// and cast to the dtype, as ATen's serial CPU distribution kernels (`cauchy_`, `log_normal_`,
/// `geometric_`) do, drawing from the generator argument at `gen_at`.
fn fill_serial(
    args: &Args<'_>,
    gen_at: usize,
    x: &Tensor,
    mut draw: impl FnMut(&mut Generator) -> f64,
) -> R {
    if !x.dtype().is_floating_point() {
        return Err(not_implemented_for(cpu_kernel_name(args.op), x.dtype()));
    }
    let gen = args.generator(gen_at)?;
    let mut g = gen.lock();
    let v: Vec<f64> = (0..x.numel()).map(|_| draw(&mut g)).collect();
    drop(g);
    x.copy_from(&Tensor::from_vec(v, x.shape())?)?;
    Ok(IValue::Tensor(x.clone()))
}

/// `cauchy_(median, sigma)`: `median + sigma * tan(pi * (u - 0.5))`.
fn cauchy_(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let (median, sigma) = (args.double(1)?, args.double(2)?);
    if sigma <= 0.0 {
        return Err(invalid_argument("cauchy_", "sigma", "must be > 0.0", sigma));
    }
    fill_serial(args, 3, &x, |g| {
        median + sigma * (std::f64::consts::PI * (g.uniform_f64() - 0.5)).tan()
    })
}

/// `log_normal_(mean, std)`: `exp` of a double normal draw (Box-Muller, second sample cached).
fn log_normal_(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let (mean, std) = (args.double(1)?, args.double(2)?);
    if std <= 0.0 {
        return Err(invalid_argument("log_normal_", "std", "must be > 0.0", std));
    }
    fill_serial(args, 3, &x, |g| (g.normal_f64() * std + mean).exp())
}

/// `geometric_(p)`: trials to the first success, `ceil(log(u) / log1p(-p))`.
fn geometric_(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let p = args.double(1)?;
    if !(p > 0.0 && p < 1.0) {
        return Err(invalid_argument("geometric_", "p", "must be in (0, 1)", p));
    }
    let x_dtype = x.dtype();
    if x_dtype.is_floating_point() {
        return fill_serial(args, 2, &x, |g| {
            (g.uniform_f64().ln() / (-p).ln_1p()).ceil()
        });
    }
    // integer tensors hold the same draws
    let tmp = Tensor::zeros(x.shape(), DType::Float64)?;
    fill_serial(args, 2, &tmp, |g| {
        (g.uniform_f64().ln() / (-p).ln_1p()).ceil()
    })?;
    x.copy_from(&tmp)?;
    Ok(IValue::Tensor(x))
}

/// One Poisson draw as ATen's `sample_poisson`: Hoermann's transformed rejection (PTRS) for
/// rates of 10 or more, multiplication of uniforms below.
fn sample_poisson(lambda: f64, g: &mut Generator) -> f64 {
    if lambda >= 10.0 {
        let slam = lambda.sqrt();
        let loglam = lambda.ln();
        let b = 0.931 + 2.53 * slam;
        let a = -0.059 + 0.02483 * b;
        let invalpha = 1.1239 + 1.1328 / (b - 3.4);
        let vr = 0.9277 - 3.6224 / (b - 2.0);
        loop {
            let u = g.uniform_f64() - 0.5;
            let v = g.uniform_f64();
            let us = 0.5 - u.abs();
            let k = ((2.0 * a / us + b) * u + lambda + 0.43).floor();
            if us >= 0.07 && v <= vr {
                return k;
            }
            if k < 0.0 || (us < 0.013 && v > us) {
                continue;
            }
            if v.ln() + invalpha.ln() - (a / (us * us) + b).ln()
                <= -lambda + k * loglam - libm::lgamma(k + 1.0)
            {
                return k;
            }
        }
    } else if lambda == 0.0 {
        0.0
    } else {
        let enlam = (-lambda).exp();
        let mut x = 0.0;
        let mut prod = 1.0;
        loop {
            prod *= g.uniform_f64();
            if prod > enlam {
                x += 1.0;
            } else {
                return x;
            }
        }
    }
}

/// `poisson(rates)`: one draw per element, row-major, in the rates' dtype.
fn poisson(args: &mut Args<'_>) -> R {
    let rates = args.tensor(0)?;
    let gen = args.generator(1)?;
    if !rates.dtype().is_floating_point() {
        return Err(not_implemented_for("poisson_cpu", rates.dtype()));
    }
    let lambdas = rates.contiguous()?.to_vec::<f64>()?;
    if lambdas.iter().any(|l| !(*l >= 0.0)) {
        return Err(invalid_argument(
            "poisson",
            "rates",
            "must be non-negative",
            lambdas.iter().copied().fold(f64::INFINITY, f64::min),
        ));
    }
    let mut g = gen.lock();
    let draws: Vec<f64> = lambdas.iter().map(|&l| sample_poisson(l, &mut g)).collect();
    drop(g);
    Ok(IValue::Tensor(
        Tensor::from_vec(draws, rates.shape())?.to_dtype(rates.dtype())?,
    ))
}

/// `multinomial(probs, num_samples, replacement)` on 1-d or 2-d (one distribution per row)
/// non-negative weights, as ATen's CPU kernel. Without replacement, or for one sample, the
/// Gumbel trick: `q ~ Exp(1)` drawn like `exponential_` into a tensor of the weights' dtype,
/// then the indices of the `num_samples` largest `p / q`. With replacement: per row, the
/// cumulative sums in the weights' dtype normalized to end at 1, and per sample a double
/// uniform located by binary search.
fn multinomial(args: &mut Args<'_>) -> R {
    let probs = args.tensor(0)?;
    let num_samples = args.int(1)?;
    let replacement = args.bool(2)?;
    let gen = args.generator(3)?;
    if probs.dim() == 0 || probs.dim() > 2 {
        return Err(rank_mismatch(
            "multinomial",
            "input",
            RankRequirement::OneOf(vec![1, 2]),
            probs.shape(),
        ));
    }
    let dtype = probs.dtype();
    if !dtype.is_floating_point() {
        return Err(wrong_dtype(
            "multinomial",
            "input",
            "a floating-point tensor",
            dtype,
        ));
    }
    if num_samples <= 0 {
        return Err(invalid_argument(
            "multinomial",
            "num_samples",
            "must be positive",
            num_samples,
        ));
    }
    let categories = probs.shape()[probs.dim() - 1];
    let samples = num_samples as usize;
    if !replacement && samples > categories {
        return Err(invalid_argument(
            "multinomial",
            "num_samples",
            format!("must be at most input.size(-1) ({categories}) without replacement"),
            num_samples,
        ));
    }
    let rows = if probs.dim() == 2 {
        probs.shape()[0]
    } else {
        1
    };
    let weights = probs.contiguous()?.to_vec::<f64>()?;
    if weights.iter().any(|w| !(*w >= 0.0 && w.is_finite())) {
        return Err(invalid_argument(
            "multinomial",
            "input",
            "must hold finite, non-negative probabilities",
            weights
                .iter()
                .find(|w| !(**w >= 0.0 && w.is_finite()))
                .copied()
                .unwrap_or(f64::NAN),
        ));
    }
    // PyTorch sums in the weights' dtype; the per-row sums here only test for zero rows
    if weights
        .chunks(categories.max(1))
        .any(|r| r.iter().sum::<f64>() <= 0.0)
    {
        return Err(invalid_argument(
            "multinomial",
            "input",
            "must have rows whose probabilities sum to more than 0",
            "a row summing to 0",
        ));
    }
    let round = |v: f64| -> f64 {
        match dtype {
            DType::Float64 => v,
            DType::Float32 => v as f32 as f64,
            DType::Float16 => f16::from_f64(v).to_f64(),
            _ => bf16::from_f64(v).to_f64(),
        }
    };
    let mut g = gen.lock();
    let mut out: Vec<i64> = Vec::with_capacity(rows * samples);
    if !replacement || samples == 1 {
        let keys: Vec<f64> = weights
            .iter()
            .map(|&p| {
                let q = round(-(-g.uniform_f64()).ln_1p());
                round(p / q)
            })
            .collect();
        for row in keys.chunks(categories) {
            let mut order: Vec<usize> = (0..categories).collect();
            order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
            out.extend(order[..samples].iter().map(|&i| i as i64));
        }
    } else {
        for row in weights.chunks(categories) {
            let mut cumulative = Vec::with_capacity(categories);
            let mut sum = 0.0;
            for &w in row {
                sum = round(sum + w);
                cumulative.push(sum);
            }
            cumulative.iter_mut().for_each(|c| *c = round(*c / sum));
            if let Some(last) = cumulative.last_mut() {
                *last = 1.0;
            }
            for _ in 0..samples {
                let u = g.uniform_f64();
                out.push(cumulative.partition_point(|&c| c < u) as i64);
            }
        }
    }
    drop(g);
    let shape: Vec<usize> = if probs.dim() == 2 {
        vec![rows, samples]
    } else {
        vec![samples]
    };
    Ok(IValue::Tensor(Tensor::from_vec(out, &shape)?))
}

/// `random_.from` (`FROM`) and `random_.to`.
fn random_<const FROM: bool>(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let (low, high, gen) = if FROM {
        let to = args
            .opt_int(2)?
            .ok_or_else(|| unsupported_feature("random_", "to=None"))?;
        (args.int(1)?, to, args.generator(3)?)
    } else {
        (0, args.int(1)?, args.generator(2)?)
    };
    let tmp = Tensor::zeros(x.shape(), DType::Int64)?;
    fill_randint(&mut gen.lock(), &tmp, x.dtype(), low, high)?;
    x.copy_from(&tmp)?;
    Ok(IValue::Tensor(x))
}

/// `random_(self)` without bounds: PyTorch's `uniform_int_distribution<T>` of the dtype, one
/// 64-bit draw for int64 and double, one 32-bit draw otherwise, reduced modulo the dtype's range
/// (`[0, max]` for integers, `[0, 2^digits]` for floats, the low bit for bool).
fn random_default_(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let gen = args.generator(1)?;
    let dtype = x.dtype();
    // (draws 64 bits, modulus)
    let (wide, modulus): (bool, u64) = match dtype {
        DType::Bool => (false, 2),
        DType::UInt8 => (false, 1 << 8),
        DType::Int8 => (false, 1 << 7),
        DType::Int16 => (false, 1 << 15),
        DType::Int32 => (false, 1 << 31),
        DType::Int64 => (true, 1 << 63),
        DType::BFloat16 => (false, (1 << 8) + 1),
        DType::Float16 => (false, (1 << 11) + 1),
        DType::Float32 => (false, (1 << 24) + 1),
        DType::Float64 => (true, (1 << 53) + 1),
        other => {
            return Err(wrong_dtype(
                "random_",
                "self",
                "a real or bool tensor",
                other,
            ))
        }
    };
    let mut g = gen.lock();
    let vals: Vec<i64> = (0..x.numel())
        .map(|_| {
            let bits = if wide {
                g.random_u64()
            } else {
                g.random_u32() as u64
            };
            // (bool takes the low bit: `val & 1`, the same as modulo 2)
            (bits % modulus) as i64
        })
        .collect();
    drop(g);
    x.copy_from(&Tensor::from_vec(vals, x.shape())?)?;
    Ok(IValue::Tensor(x))
}

/// `bernoulli(p)` draws: not bit-identical to PyTorch (its CPU path uses MKL's generator).
/// Where `bernoulli` reads its probabilities: the input itself, a float, a tensor.
const PROBS_SELF: u8 = 0;
const PROBS_FLOAT: u8 = 1;
const PROBS_TENSOR: u8 = 2;

/// `bernoulli` / `bernoulli.p` / `bernoulli.Tensor`, and in place (`INPLACE`) `bernoulli_.float`
/// / `bernoulli_.Tensor`.
fn bernoulli_p<const PROBS: u8, const INPLACE: bool>(args: &mut Args<'_>) -> R {
    bernoulli_as(args, PROBS, INPLACE)
}

fn bernoulli_as(args: &mut Args<'_>, probs_from: u8, inplace: bool) -> R {
    let x = args.tensor(0)?;
    let out = Tensor::zeros(x.shape(), x.dtype())?;
    let probs = match probs_from {
        PROBS_FLOAT => {
            let p = args.double(1)?;
            Tensor::from_vec(vec![p; x.numel()], x.shape())?
        }
        PROBS_TENSOR => args.tensor(1)?.to_dtype(DType::Float64)?.contiguous()?,
        _ => x.to_dtype(DType::Float64)?,
    };
    let gen = args.generator(if probs_from == PROBS_SELF { 1 } else { 2 })?;
    let mut g = gen.lock();
    let probs = probs.to_dtype(DType::Float64)?;
    let draws = map_unary::<f64, f64, _>(&probs, |_| 0.0)?;
    if let Some(d) = draws.write::<f64>()?.as_slice_mut() {
        let pv = probs.to_vec::<f64>()?;
        for (o, p) in d.iter_mut().zip(pv) {
            *o = if g.uniform_f64() < p { 1.0 } else { 0.0 };
        }
    }
    drop(g);
    out.copy_from(&draws)?;
    if inplace {
        x.copy_from(&out)?;
        return Ok(IValue::Tensor(x));
    }
    Ok(IValue::Tensor(out))
}

/// The functional twin of an in-place draw (`uniform` of `uniform_`, `random.from` of
/// `random_.from`, ...): the same arguments, drawn into a fresh copy of `self` (same shape and
/// dtype, the same stream of draws).
pub(super) fn on_fresh_copy(args: &mut Args<'_>, inplace: fn(&mut Args<'_>) -> R) -> R {
    let fresh = args.tensor(0)?.deep_clone()?;
    args.values[0] = IValue::Tensor(fresh);
    inplace(args)
}

/// `randint_like.Tensor` / `.Tensor_generator`: `high` given as a one-element tensor.
fn randint_like_tensor<const GEN: bool>(args: &mut Args<'_>) -> R {
    let high = args.tensor(1)?;
    if high.numel() != 1 {
        return Err(size_mismatch(
            "randint_like",
            format!("the number of elements of high (shape {:?})", high.shape()),
            1,
            high.numel() as i64,
        ));
    }
    args.values[1] = IValue::Int(high.item()?.to_i64());
    randint_like_as(args, false, GEN)
}

fn manual_seed(args: &mut Args<'_>) -> R {
    let seed = args.int(0)?;
    args.ctx.generator.lock().manual_seed(seed as u64);
    Ok(IValue::None)
}

/// `torch.Generator(device=, seed=)`: a new CPU generator, seeded with `seed` when given, else
/// with PyTorch's default seed (as `at::detail::createCPUGenerator`).
fn new_generator(args: &mut Args<'_>) -> R {
    super::creation::check_device(args, 0)?;
    // the seed is stored as an unsigned 64-bit value, as `set_current_seed(uint64_t)` takes it
    let seed = args
        .opt_int(1)?
        .map_or(Generator::DEFAULT_SEED, |s| s as u64);
    Ok(IValue::Generator(Arc::new(Mutex::new(Generator::new(
        seed,
    )))))
}

/// `manual_seed.generator(self, seed)`: reseed that generator (fresh state, no cached normal
/// sample) and return it.
fn manual_seed_generator(args: &mut Args<'_>) -> R {
    let gen = explicit_generator(args, 0)?;
    let seed = args.int(1)?;
    gen.lock().manual_seed(seed as u64);
    Ok(IValue::Generator(gen))
}

/// `initial_seed(self)`: the generator's seed, the unsigned value read back as a signed int.
fn initial_seed(args: &mut Args<'_>) -> R {
    let seed = explicit_generator(args, 0)?.lock().seed();
    Ok(IValue::Int(seed as i64))
}

/// `seed(self)`: reseed the generator nondeterministically and return the new seed.
fn seed(args: &mut Args<'_>) -> R {
    let seed = explicit_generator(args, 0)?
        .lock()
        .reseed_nondeterministic();
    Ok(IValue::Int(seed as i64))
}

/// A `Generator` argument that may not be `None` (the methods of `torch.Generator`).
fn explicit_generator(args: &Args<'_>, i: usize) -> crate::Result<SharedGenerator> {
    match args.get(i)? {
        IValue::Generator(g) => Ok(g.clone()),
        other => Err(invalid_argument(
            args.op,
            format!("argument {i}"),
            "must be a Generator",
            other.kind_name(),
        )),
    }
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::rand", rand::<false>);
    r.add("aten::rand.generator", rand::<true>);
    r.add("aten::randn", randn::<false>);
    r.add("aten::randn.generator", randn::<true>);
    r.add("aten::rand_like", rand_like::<false>);
    r.add("aten::rand_like.generator", rand_like::<true>);
    r.add("aten::randn_like", randn_like::<false>);
    r.add("aten::randn_like.generator", randn_like::<true>);
    r.add("aten::randint", randint::<false, false>);
    r.add("aten::randint.generator", randint::<false, true>);
    r.add("aten::randint.low", randint::<true, false>);
    r.add("aten::randint.low_generator", randint::<true, true>);
    r.add("aten::randint_like", randint_like::<false, false>);
    r.add("aten::randint_like.generator", randint_like::<false, true>);
    r.add("aten::randint_like.low_dtype", randint_like::<true, false>);
    r.add(
        "aten::randint_like.low_generator_dtype",
        randint_like::<true, true>,
    );
    r.add("aten::randperm", randperm::<false>);
    r.add("aten::randperm.generator", randperm::<true>);
    r.add("aten::uniform_", uniform_);
    r.add("aten::normal_", normal_);
    r.add("aten::normal.float_float", normal_float_float);
    r.add("aten::normal.Tensor_Tensor", normal_tensors::<false>);
    r.add("aten::normal.Tensor_float", normal_tensors::<true>);
    r.add("aten::normal.float_Tensor", normal_tensors::<false>);
    r.add("aten::exponential_", exponential_);
    r.add("aten::cauchy_", cauchy_);
    r.add("aten::log_normal_", log_normal_);
    r.add("aten::geometric_", geometric_);
    r.add("aten::poisson", poisson);
    r.add("aten::multinomial", multinomial);
    r.add("aten::random_.from", random_::<true>);
    r.add("aten::random_.to", random_::<false>);
    r.add("aten::bernoulli", bernoulli_p::<PROBS_SELF, false>);
    r.add("aten::bernoulli.p", bernoulli_p::<PROBS_FLOAT, false>);
    r.add("aten::bernoulli.Tensor", bernoulli_p::<PROBS_TENSOR, false>);
    r.add("aten::bernoulli_.float", bernoulli_p::<PROBS_FLOAT, true>);
    r.add("aten::bernoulli_.Tensor", bernoulli_p::<PROBS_TENSOR, true>);
    r.add("aten::manual_seed", manual_seed);
    r.add("aten::manual_seed.generator", manual_seed_generator);
    r.add("aten::Generator", new_generator);
    r.add("aten::initial_seed", initial_seed);
    r.add("aten::seed", seed);
    r.add("prims::normal", prims_normal);
    r.add("prims::uniform", prims_uniform);
    r.add("aten::randint_like.Tensor", randint_like_tensor::<false>);
    r.add(
        "aten::randint_like.Tensor_generator",
        randint_like_tensor::<true>,
    );
    r.add("aten::uniform", |a| on_fresh_copy(a, uniform_));
    r.add("aten::normal_functional", |a| on_fresh_copy(a, normal_));
    r.add("aten::exponential", |a| on_fresh_copy(a, exponential_));
    r.add("aten::cauchy", |a| on_fresh_copy(a, cauchy_));
    r.add("aten::log_normal", |a| on_fresh_copy(a, log_normal_));
    r.add("aten::geometric", |a| on_fresh_copy(a, geometric_));
    r.add("aten::random.from", |a| on_fresh_copy(a, random_::<true>));
    r.add("aten::random.to", |a| on_fresh_copy(a, random_::<false>));
    r.add("aten::random_", random_default_);
    r.add("aten::random", |a| on_fresh_copy(a, random_default_));
    // the initializers torch.nn.init runs under no_grad: the in-place draws themselves
    r.add("aten::_no_grad_uniform_", uniform_);
    r.add("aten::_no_grad_normal_", normal_);
}
