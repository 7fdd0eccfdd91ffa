//! Activation functions, softmax / log_softmax and dropout.

use super::elementwise::clamp_op;
use super::kernels::map::{map_binary, map_inplace_f32, map_unary};
use super::kernels::not_implemented_for;
use super::kernels::num::{Arith, Real};
use super::kernels::operand::{inplace_of, inplace_result, Operand};
use super::kernels::reduce::along_dim;
use super::kernels::special::SpecialFn;
use super::kernels::value_err;
use super::kernels::vmath::{self, VecFn};
use super::{Args, Registry};
use crate::ops::kernels::{
    check_size, invalid_argument, shape_mismatch, size_mismatch, unsupported_feature, wrong_dtype,
};
use crate::tensor::{wrap_dim, DType, Scalar, Tensor};
use crate::values::IValue;
use crate::{dispatch_numeric, float_unary};
use half::{bf16, f16};

type R = crate::Result<IValue>;

fn t(x: Tensor) -> R {
    Ok(IValue::Tensor(x))
}

/// `relu` for every numeric dtype (NaN propagates).
pub(crate) fn relu_tensor(x: &Tensor) -> crate::Result<Tensor> {
    dispatch_numeric!(x.dtype(), "relu", |T| map_unary::<T, T, _>(x, |v| {
        if v.is_nan_val() || v > T::zero() {
            v
        } else {
            T::zero()
        }
    }))
}
/// `_add_relu(self, other, alpha)` (`.Tensor` and `.Scalar`): `relu(self + alpha * other)`
/// in the add's promoted dtype.
fn add_relu(args: &mut Args<'_>) -> R {
    let sum = super::elementwise::add(args)?;
    let sum = sum
        .as_tensor()
        .ok_or_else(|| value_err("_add_relu: add returned a non-tensor"))?;
    t(relu_tensor(sum)?)
}
inplace_of! { add_relu_ => add_relu; }

/// `log_sigmoid_forward(self)`: (log_sigmoid, buffer) where ATen's CPU kernel leaves
/// `exp(-|x|)` in the buffer.
fn log_sigmoid_forward(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    require_float(&x, "log_sigmoid_forward")?;
    let out = log_sigmoid(args)?;
    // (an f64 pass: no typed map per float dtype for this rarely used twin)
    let buffer: Vec<f64> = x
        .to_vec::<f64>()?
        .into_iter()
        .map(|v| (-v.abs()).exp())
        .collect();
    let buffer = Tensor::from_vec(buffer, x.shape())?.to_dtype(x.dtype())?;
    Ok(IValue::Tuple(crate::values::Tuple::new(vec![
        out,
        IValue::Tensor(buffer),
    ])))
}

/// `_safe_softmax(self, dim, dtype)`: softmax, with rows whose inputs are all -inf giving 0
/// instead of NaN (ATen's `where(all(self == -inf, dim), 0, softmax)`).
fn safe_softmax(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let out = softmax_op(&x, args.int(1)?, args.opt_dtype(2)?, false)?;
    if x.numel() == 0 {
        return t(out);
    }
    let nd = x.dim().max(1);
    let d = wrap_dim(args.int(1)?, nd)? as i64;
    let last = nd as i64 - 1;
    let to_last = |v: &Tensor| -> crate::Result<Tensor> {
        let v = if v.dim() == 0 {
            v.as_strided(&[1], &[1], v.storage_offset())?
        } else {
            v.clone()
        };
        super::shape::movedim(&v, &[d], &[last])
    };
    let xs = to_last(&x)?.to_dtype(DType::Float64)?.to_vec::<f64>()?;
    let moved = to_last(&out)?;
    let moved_shape = moved.shape().to_vec();
    let mut os = moved.to_dtype(DType::Float64)?.to_vec::<f64>()?;
    let n = moved_shape[moved_shape.len() - 1].max(1);
    for (xr, or) in xs.chunks(n).zip(os.chunks_mut(n)) {
        if xr.iter().all(|&v| v == f64::NEG_INFINITY) {
            or.fill(0.0);
        }
    }
    let back = Tensor::from_vec(os, &moved_shape)?.to_dtype(out.dtype())?;
    let back = super::shape::movedim(&back, &[last], &[d])?;
    t(super::shape::reshape(
        &back,
        &out.shape().iter().map(|&s| s as i64).collect::<Vec<_>>(),
    )?
    .contiguous()?)
}

fn relu(args: &mut Args<'_>) -> R {
    t(relu_tensor(&args.tensor(0)?)?)
}

fn hardtanh_op(x: &Tensor, lo: Scalar, hi: Scalar) -> crate::Result<Tensor> {
    clamp_op(x, Some(Operand::Scalar(lo)), Some(Operand::Scalar(hi)))
}
fn relu6(args: &mut Args<'_>) -> R {
    t(hardtanh_op(
        &args.tensor(0)?,
        Scalar::Int(0),
        Scalar::Int(6),
    )?)
}
fn hardtanh(args: &mut Args<'_>) -> R {
    t(hardtanh_op(
        &args.tensor(0)?,
        args.scalar(1)?,
        args.scalar(2)?,
    )?)
}

fn require_float(x: &Tensor, op: &str) -> crate::Result<()> {
    if x.dtype().is_floating_point() {
        Ok(())
    } else {
        Err(wrong_dtype(op, "input", "floating-point", x.dtype()))
    }
}

fn leaky_relu(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    require_float(&x, "leaky_relu")?;
    let s = args.scalar(1)?.to_f64();
    t(float_unary!(&x, "leaky_relu", |v: F| if v > 0.0 {
        v
    } else {
        v * s as F
    })?)
}

fn elu_op(x: &Tensor, alpha: f64, scale: f64, input_scale: f64) -> crate::Result<Tensor> {
    require_float(x, "elu")?;
    float_unary!(x, "elu", |v: F| {
        if v > 0.0 {
            v * scale as F
        } else {
            ((v * input_scale as F).exp_m1() * alpha as F) * scale as F
        }
    })
}
fn elu(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let (a, s, i) = (
        args.scalar(1)?.to_f64(),
        args.scalar(2)?.to_f64(),
        args.scalar(3)?.to_f64(),
    );
    t(elu_op(&x, a, s, i)?)
}
fn selu(args: &mut Args<'_>) -> R {
    const ALPHA: f64 = 1.6732632423543772;
    const SCALE: f64 = 1.0507009873554805;
    t(elu_op(&args.tensor(0)?, ALPHA, SCALE, 1.0)?)
}
fn celu(args: &mut Args<'_>) -> R {
    let a = args.scalar(1)?.to_f64();
    t(elu_op(&args.tensor(0)?, a, 1.0, 1.0 / a)?)
}

fn gelu(args: &mut Args<'_>) -> R {
    t(gelu_tensor(&args.tensor(0)?, &args.str(1)?)?)
}

/// gelu of `x`, `approx` "none" (erf) or "tanh".
fn gelu_tensor(x: &Tensor, approx: &str) -> crate::Result<Tensor> {
    let x = x.clone();
    require_float(&x, "gelu")?;
    let vf = match approx {
        "none" => VecFn::Gelu,
        "tanh" => VecFn::GeluTanh,
        other => {
            return Err(invalid_argument(
                "gelu",
                "approximate",
                "must be either 'none' or 'tanh'",
                format!("'{other}'"),
            ))
        }
    };
    if let Some(out) = vmath::unary_f32(vf, &x)? {
        return Ok(out);
    }
    Ok(if vf == VecFn::Gelu {
        float_unary!(&x, "gelu", |v: F| v
            * 0.5
            * (1.0 + (v * std::f64::consts::FRAC_1_SQRT_2 as F).erf_()))?
    } else {
        float_unary!(&x, "gelu", |v: F| {
            let k = (std::f64::consts::FRAC_2_SQRT_PI * std::f64::consts::FRAC_1_SQRT_2) as F;
            let inner = k * (v + 0.044715 * v * v * v);
            0.5 * v * (1.0 + inner.tanh())
        })?
    })
}

fn silu(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    require_float(&x, "silu")?;
    if let Some(out) = vmath::unary_f32(VecFn::Silu, &x)? {
        return t(out);
    }
    t(float_unary!(&x, "silu", |v: F| v / (1.0 + (-v).exp()))?)
}

macro_rules! float_activations {
    ($($name:ident, $op:literal => |$v:ident| $body:expr;)*) => {$(
        fn $name(args: &mut Args<'_>) -> R {
            let x = args.tensor(0)?;
            require_float(&x, $op)?;
            t(float_unary!(&x, $op, |$v: F| $body)?)
        }
    )*};
}
float_activations! {
    mish, "mish" => |v| v * softplus1(v).tanh();
    hardswish, "hardswish" => |v| v * (v + 3.0).clamp(0.0, 6.0) / 6.0;
    hardsigmoid, "hardsigmoid" => |v| (v + 3.0).clamp(0.0, 6.0) / 6.0;
    log_sigmoid, "log_sigmoid" => |v| v.min(0.0) - (-v.abs()).exp().ln_1p();
}

/// `softplus(x)` with beta 1 and threshold 20, generic over f32/f64.
#[inline]
fn softplus1<F: num_traits::Float>(v: F) -> F {
    if v > F::from(20.0).unwrap_or(F::max_value()) {
        v
    } else {
        v.exp().ln_1p()
    }
}

fn softplus(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    require_float(&x, "softplus")?;
    let (beta, th) = (args.scalar(1)?.to_f64(), args.scalar(2)?.to_f64());
    t(float_unary!(&x, "softplus", |v: F| {
        let b = beta as F;
        if v * b > th as F {
            v
        } else {
            (v * b).exp().ln_1p() / b
        }
    })?)
}
fn softshrink(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let l = args.scalar(1)?.to_f64();
    t(float_unary!(&x, "softshrink", |v: F| {
        let l = l as F;
        if v > l {
            v - l
        } else if v < -l {
            v + l
        } else {
            0.0
        }
    })?)
}
fn hardshrink(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let l = args.scalar(1)?.to_f64();
    t(float_unary!(
        &x,
        "hardshrink",
        |v: F| if (-(l as F)..=l as F).contains(&v) {
            0.0
        } else {
            v
        }
    )?)
}

fn threshold(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let (th, val) = (args.scalar(1)?, args.scalar(2)?);
    t(crate::dispatch_standard_numeric!(
        x.dtype(),
        "threshold",
        |T| {
            let th: T = super::kernels::num::scalar_as(th);
            let val: T = super::kernels::num::scalar_as(val);
            map_unary::<T, T, _>(&x, |v| if v <= th { val } else { v })
        }
    )?)
}

fn prelu(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let w = args.tensor(1)?;
    require_float(&x, "prelu")?;
    let w = w.to_dtype(x.dtype())?;
    let wn = w.numel();
    // A per-channel weight applies along dim 1.
    let wb = if wn == 1 || x.dim() < 2 {
        let wc = w.contiguous()?;
        wc.as_strided(&[], &[], wc.storage_offset())?
    } else {
        check_size(
            "prelu",
            "the number of weight elements (the input's channels, or 1)",
            x.shape()[1] as i64,
            wn as i64,
        )?;
        let wc = w.contiguous()?;
        let mut shape = vec![wn];
        shape.extend(std::iter::repeat_n(1, x.dim() - 2));
        let strides = crate::tensor::contiguous_strides(&shape);
        wc.as_strided(&shape, &strides, wc.storage_offset())?
    };
    t(match x.dtype() {
        DType::Float32 => {
            map_binary::<f32, f32, f32, _>(&x, &wb, |v, a| if v > 0.0 { v } else { a * v })?
        }
        DType::Float64 => {
            map_binary::<f64, f64, f64, _>(&x, &wb, |v, a| if v > 0.0 { v } else { a * v })?
        }
        DType::Float16 => {
            map_binary::<f16, f16, f16, _>(&x, &wb, |v, a| if v > f16::ZERO { v } else { a * v })?
        }
        DType::BFloat16 => {
            map_binary::<bf16, bf16, bf16, _>(
                &x,
                &wb,
                |v, a| if v > bf16::ZERO { v } else { a * v },
            )?
        }
        d => return Err(wrong_dtype("prelu", "input", "floating-point", d)),
    })
}

fn rrelu(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let (lo, hi) = (args.scalar(1)?.to_f64(), args.scalar(2)?.to_f64());
    if args.bool(3)? {
        return Err(unsupported_feature(
            "rrelu",
            "training mode (random slopes)",
        ));
    }
    let s = (lo + hi) / 2.0;
    t(float_unary!(&x, "rrelu", |v: F| if v >= 0.0 {
        v
    } else {
        v * s as F
    })?)
}

fn glu(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let dim = wrap_dim(args.int(1)?, x.dim())?;
    let n = x.shape().get(dim).copied().unwrap_or(0);
    if n % 2 != 0 {
        return Err(invalid_argument(
            "glu",
            format!("the size of the halved dimension {dim}"),
            "must be even",
            n,
        ));
    }
    let mut shape = x.shape().to_vec();
    shape[dim] = n / 2;
    let a = x.as_strided(&shape, x.strides(), x.storage_offset())?;
    let off = x.storage_offset() + (n / 2) * x.strides()[dim] as usize;
    let b = x.as_strided(&shape, x.strides(), off)?;
    let sb = float_unary!(&b, "glu", |v: F| 1.0 / (1.0 + (-v).exp()))?;
    t(super::elementwise::mul_tensors(&a, &sb)?)
}

/// glu_jvp(glu, x, dx, dim): the forward derivative of `glu(x) = a * sigmoid(b)` along dx,
/// `da * sigmoid(b) + glu * (db - sigmoid(b) * db)` as PyTorch's kernel writes it.
fn glu_jvp(args: &mut Args<'_>) -> R {
    let (glu, x, dx) = (args.tensor(0)?, args.tensor(1)?, args.tensor(2)?);
    require_float(&x, "glu_jvp")?;
    let dim = wrap_dim(args.int(3)?, x.dim())?;
    let half = glu.shape().get(dim).copied().unwrap_or(0);
    let (xn, dn) = (x.shape().get(dim), dx.shape().get(dim));
    for (what, n) in [("x", xn), ("dx", dn)] {
        if n != Some(&(2 * half)) {
            return Err(size_mismatch(
                "glu_jvp",
                format!("{what}.size({dim}) (twice glu's)"),
                (2 * half) as i64,
                n.map_or(-1, |&n| n as i64),
            ));
        }
    }
    let d = dim as i64;
    let h = half as i64;
    let part = |t: &Tensor, start: i64| -> crate::Result<Vec<f64>> {
        super::shape::narrow(t, d, start, h)?
            .contiguous()?
            .to_vec::<f64>()
    };
    let (b, da, db) = (part(&x, h)?, part(&dx, 0)?, part(&dx, h)?);
    let g = glu.contiguous()?.to_vec::<f64>()?;
    if g.len() != b.len() || da.len() != b.len() {
        return Err(shape_mismatch(
            "glu_jvp",
            "glu",
            &[&x.shape()[..dim], &[half], &x.shape()[dim + 1..]].concat(),
            glu.shape(),
        ));
    }
    let out: Vec<f64> = g
        .iter()
        .zip(&b)
        .zip(da.iter().zip(&db))
        .map(|((&res, &b), (&da, &db))| {
            let sig = 1.0 / (1.0 + (-b).exp());
            da * sig + res * (db - sig * db)
        })
        .collect();
    t(Tensor::from_vec(out, glu.shape())?.to_dtype(glu.dtype())?)
}

/// _masked_softmax(self, mask, dim, mask_type): softmax with the `true` mask positions left
/// out (a row with every position masked gives NaN). mask_type 0: an `[L, L]` attention
/// mask of a `[B, H, L, L]` input; 1: a `[B, L]` key-padding mask; 2 (or none): the input's
/// shape.
fn masked_softmax(args: &mut Args<'_>) -> R {
    let (x, mask) = (args.tensor(0)?, args.tensor(1)?);
    require_float(&x, "_masked_softmax")?;
    if mask.dtype() != DType::Bool {
        return Err(wrong_dtype("_masked_softmax", "mask", "bool", mask.dtype()));
    }
    let nd = x.dim();
    let dim = match args.opt_int(2)? {
        Some(d) => wrap_dim(d, nd)?,
        None => nd.saturating_sub(1),
    };
    let typed = mask.dim() == 2 && nd == 4;
    let full_mask = match (typed, args.opt_int(3)?) {
        (false, _) | (true, Some(2)) => {
            if mask.shape() != x.shape() {
                return Err(shape_mismatch(
                    "_masked_softmax",
                    "mask (mask_type 2)",
                    x.shape(),
                    mask.shape(),
                ));
            }
            mask
        }
        (true, Some(1)) => {
            let s = x.shape();
            if mask.shape() != [s[0], s[2]] {
                return Err(shape_mismatch(
                    "_masked_softmax",
                    "mask (mask_type 1: (B, L))",
                    &[s[0], s[2]],
                    mask.shape(),
                ));
            }
            let m = super::shape::reshape(&mask, &[s[0] as i64, 1, 1, s[2] as i64])?;
            super::shape::expand_to(&m, s)?
        }
        (true, Some(0)) => {
            let s = x.shape();
            if mask.shape() != [s[2], s[2]] {
                return Err(shape_mismatch(
                    "_masked_softmax",
                    "mask (mask_type 0: (L, L))",
                    &[s[2], s[2]],
                    mask.shape(),
                ));
            }
            super::shape::expand_to(&mask, s)?
        }
        (true, None) => {
            return Err(invalid_argument(
                "_masked_softmax",
                "mask_type",
                "must be given for a 2-D mask of a 4-D input",
                "None",
            ))
        }
        (true, Some(other)) => {
            return Err(invalid_argument(
                "_masked_softmax",
                "mask_type",
                "must be 0 (src_mask), 1 (src_key_padding_mask) or 2 (default_mask)",
                other,
            ))
        }
    };
    let xs = x.contiguous()?.to_vec::<f64>()?;
    let ms = full_mask.contiguous()?.to_vec::<bool>()?;
    let n = x.shape().get(dim).copied().unwrap_or(1);
    let inner: usize = x.shape().get(dim + 1..).map_or(1, |s| s.iter().product());
    let mut out = vec![0.0; xs.len()];
    let lanes = xs.len() / (n * inner).max(1);
    for o in 0..lanes {
        for i in 0..inner {
            let at = |k: usize| (o * n + k) * inner + i;
            let max = (0..n)
                .filter(|&k| !ms[at(k)])
                .map(|k| xs[at(k)])
                .fold(f64::NEG_INFINITY, f64::max);
            if max == f64::NEG_INFINITY {
                // every position masked: NaN, as PyTorch's kernel gives
                (0..n).for_each(|k| out[at(k)] = f64::NAN);
                continue;
            }
            let sum: f64 = (0..n)
                .filter(|&k| !ms[at(k)])
                .map(|k| (xs[at(k)] - max).exp())
                .sum();
            for k in (0..n).filter(|&k| !ms[at(k)]) {
                out[at(k)] = (xs[at(k)] - max).exp() / sum;
            }
        }
    }
    t(Tensor::from_vec(out, x.shape())?.to_dtype(x.dtype())?)
}

/// _addmm_activation(self, mat1, mat2, beta, alpha, use_gelu): addmm followed by relu, or by
/// (erf) gelu.
fn addmm_activation(args: &mut Args<'_>) -> R {
    let use_gelu = args.bool(5)?;
    let sum = super::linalg::addmm(args)?;
    let sum = sum
        .as_tensor()
        .ok_or_else(|| value_err("_addmm_activation: addmm returned a non-tensor"))?;
    t(if use_gelu {
        gelu_tensor(sum, "none")?
    } else {
        relu_tensor(sum)?
    })
}

/// rrelu_with_noise forward: in training, each non-positive element is scaled by its own
/// `uniform(lower, upper)` slope, drawn in order from the generator argument (else the default one) as PyTorch's serial
/// CPU kernel does, and the slopes (1 for positive elements) are written to `noise`; in eval,
/// leaky_relu with the mean slope, `noise` untouched.
fn rrelu_with_noise_forward(args: &Args<'_>, x: &Tensor, noise: &Tensor) -> crate::Result<Tensor> {
    require_float(x, "rrelu_with_noise")?;
    let (lower, upper) = (args.scalar(2)?.to_f64(), args.scalar(3)?.to_f64());
    let gen = args.generator(5)?;
    let xs = x.contiguous()?.to_vec::<f64>()?;
    // slopes in the input's precision (PyTorch casts each draw to its opmath type)
    let narrow = |v: f64| -> f64 {
        if x.dtype() == DType::Float64 {
            v
        } else {
            v as f32 as f64
        }
    };
    if !args.bool(4)? {
        let slope = narrow((lower + upper) / 2.0);
        let out: Vec<f64> = xs
            .iter()
            .map(|&v| if v > 0.0 { v } else { v * slope })
            .collect();
        return Tensor::from_vec(out, x.shape())?.to_dtype(x.dtype());
    }
    check_size(
        args.op,
        "the number of elements of noise (the input's)",
        x.numel() as i64,
        noise.numel() as i64,
    )?;
    let mut slopes = Vec::with_capacity(xs.len());
    {
        let mut g = gen.lock();
        for &v in &xs {
            slopes.push(if v <= 0.0 {
                narrow(g.uniform_f64() * (upper - lower) + lower)
            } else {
                1.0
            });
        }
    }
    let out: Vec<f64> = xs.iter().zip(&slopes).map(|(v, r)| v * r).collect();
    noise.copy_from(&Tensor::from_vec(slopes, noise.shape())?)?;
    Tensor::from_vec(out, x.shape())?.to_dtype(x.dtype())
}

/// rrelu_with_noise(self, noise!, lower, upper, training, generator)
fn rrelu_with_noise(args: &mut Args<'_>) -> R {
    let (x, noise) = (args.tensor(0)?, args.tensor(1)?);
    t(rrelu_with_noise_forward(args, &x, &noise)?)
}

/// rrelu_with_noise_: the result written into self.
fn rrelu_with_noise_(args: &mut Args<'_>) -> R {
    let (x, noise) = (args.tensor(0)?, args.tensor(1)?);
    let out = rrelu_with_noise_forward(args, &x, &noise)?;
    x.copy_from(&out)?;
    t(x)
}

/// rrelu_with_noise_functional: (result, the updated copy of noise).
fn rrelu_with_noise_functional(args: &mut Args<'_>) -> R {
    let (x, noise) = (args.tensor(0)?, args.tensor(1)?.deep_clone()?);
    let out = rrelu_with_noise_forward(args, &x, &noise)?;
    Ok(IValue::Tuple(crate::values::Tuple::new(vec![
        IValue::Tensor(out),
        IValue::Tensor(noise),
    ])))
}

/// native_dropout(input, p, train) -> (output, keep mask). Deterministic cases only: eval
/// (train false) and p 0 or 1 in training; other training draws go through PyTorch's
/// bernoulli_, whose CPU path uses MKL's generator, which tsrun does not reproduce.
fn native_dropout(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let p = args.double(1)?;
    let train = args.opt_bool(2)?.unwrap_or(true);
    if x.numel() == 0 {
        // (PyTorch returns the input and an empty mask of its dtype)
        let empty = Tensor::zeros(x.shape(), x.dtype())?;
        return Ok(IValue::Tuple(crate::values::Tuple::new(vec![
            IValue::Tensor(x),
            IValue::Tensor(empty),
        ])));
    }
    let keep_all = !train || p == 0.0;
    if !keep_all && p != 1.0 {
        return Err(unsupported_feature(
            args.op,
            format!(
                "training-mode dropout with p = {p} (PyTorch draws the mask with MKL's \
                 generator, which tsrun does not reproduce)"
            ),
        ));
    }
    let mask = Tensor::zeros(x.shape(), DType::Bool)?;
    let out = if keep_all {
        mask.fill(Scalar::Bool(true))?;
        x.deep_clone()?
    } else {
        // p == 1: input * mask(0) * scale(0), so NaN and inf inputs give NaN
        require_float(&x, "native_dropout")?;
        let zeroed: Vec<f64> = x
            .contiguous()?
            .to_vec::<f64>()?
            .iter()
            .map(|v| v * 0.0)
            .collect();
        Tensor::from_vec(zeroed, x.shape())?.to_dtype(x.dtype())?
    };
    Ok(IValue::Tuple(crate::values::Tuple::new(vec![
        IValue::Tensor(out),
        IValue::Tensor(mask),
    ])))
}

/// Softmax (`log`: log-softmax) along `dim`, computed in f32/f64 and stored as `out_dtype`.
pub(crate) fn softmax_op(
    x: &Tensor,
    dim: i64,
    out_dtype: Option<DType>,
    log: bool,
) -> crate::Result<Tensor> {
    let out_dtype = out_dtype.unwrap_or(x.dtype());
    if !out_dtype.is_floating_point() {
        // PyTorch's dispatcher refusal: its kernels are instantiated for floating dtypes only
        return Err(not_implemented_for(
            if log {
                "log_softmax_lastdim_kernel_impl"
            } else {
                "softmax_lastdim_kernel_impl"
            },
            out_dtype,
        ));
    }
    let dim = wrap_dim(dim, x.dim())?;
    /// Softmax along `dim`; `exp_inplace` is the exponential over a contiguous lane (the
    /// vector kernel for float32).
    fn lanes<F: num_traits::Float + crate::tensor::Element>(
        x: &Tensor,
        dim: usize,
        log: bool,
        exp_inplace: fn(&mut [F]),
    ) -> crate::Result<Tensor> {
        along_dim::<F, F, _>(x, dim, |s, d| {
            let m = s.iter().fold(
                F::neg_infinity(),
                |m, &v| if v > m || v.is_nan() { v } else { m },
            );
            let m = if m.is_infinite() { F::zero() } else { m };
            for (o, &v) in d.iter_mut().zip(s) {
                *o = v - m;
            }
            exp_inplace(d);
            let sum = d.iter().fold(F::zero(), |acc, &e| acc + e);
            if log {
                let l = sum.ln();
                for (o, &v) in d.iter_mut().zip(s) {
                    *o = v - m - l;
                }
            } else {
                let inv = F::one() / sum;
                d.iter_mut().for_each(|o| *o = *o * inv);
            }
        })
    }
    let r = if out_dtype == DType::Float64 || x.dtype() == DType::Float64 {
        lanes::<f64>(&x.to_dtype(DType::Float64)?, dim, log, |d| {
            d.iter_mut().for_each(|v| *v = v.exp())
        })?
    } else {
        lanes::<f32>(&x.to_dtype(DType::Float32)?, dim, log, |d| {
            vmath::apply(VecFn::Exp, d)
        })?
    };
    r.to_dtype(out_dtype)
}
fn softmax(args: &mut Args<'_>) -> R {
    t(softmax_op(
        &args.tensor(0)?,
        args.int(1)?,
        args.opt_dtype(2)?,
        false,
    )?)
}
fn log_softmax(args: &mut Args<'_>) -> R {
    t(softmax_op(
        &args.tensor(0)?,
        args.int(1)?,
        args.opt_dtype(2)?,
        true,
    )?)
}
fn underscore_softmax(args: &mut Args<'_>, log: bool) -> R {
    let x = args.tensor(0)?;
    if args.bool(2)? {
        return Err(invalid_argument(
            args.op,
            "half_to_float",
            "must be False on CPU",
            true,
        ));
    }
    t(softmax_op(&x, args.int(1)?, None, log)?)
}
fn softmax_(args: &mut Args<'_>) -> R {
    underscore_softmax(args, false)
}
fn log_softmax_(args: &mut Args<'_>) -> R {
    underscore_softmax(args, true)
}

/// Dropout family: identity in eval mode; in training mode, a seeded Bernoulli mask.
fn dropout_impl(args: &Args<'_>, feature: bool, alpha: bool) -> crate::Result<Tensor> {
    let x = args.tensor(0)?;
    let p = args.double(1)?;
    let train = args.bool(2)?;
    if !(0.0..=1.0).contains(&p) {
        return Err(invalid_argument(
            args.op,
            "p (the dropout probability)",
            "must be between 0 and 1",
            p,
        ));
    }
    if !train || p == 0.0 {
        return Ok(x);
    }
    super::random::dropout_train(args.ctx, &x, p, feature, alpha)
}
macro_rules! dropouts {
    ($($name:ident, $inplace:ident => ($f:expr, $a:expr);)*) => {$(
        fn $name(args: &mut Args<'_>) -> R {
            t(dropout_impl(args, $f, $a)?)
        }
        fn $inplace(args: &mut Args<'_>) -> R {
            let r = $name(args)?;
            inplace_result(args, r)
        }
    )*};
}
dropouts! {
    dropout, dropout_ => (false, false);
    feature_dropout, feature_dropout_ => (true, false);
    alpha_dropout, alpha_dropout_ => (false, true);
    feature_alpha_dropout, feature_alpha_dropout_ => (true, true);
}

inplace_of! {
    relu6_ => relu6; hardtanh_ => hardtanh; leaky_relu_ => leaky_relu; elu_ => elu;
    selu_ => selu; celu_ => celu; gelu_ => gelu; silu_ => silu; mish_ => mish;
    threshold_ => threshold; rrelu_ => rrelu;
}

/// In-place activations that write a contiguous float32 tensor directly (the same float
/// expression as the out-of-place kernel), else compute a result and copy it back.
macro_rules! inplace_direct {
    ($($inplace:ident => $op:ident, |$v:ident| $body:expr;)*) => {$(
        fn $inplace(args: &mut Args<'_>) -> R {
            let x = args.tensor(0)?;
            if map_inplace_f32(&x, |$v: f32| $body)? {
                return t(x);
            }
            let r = $op(args)?;
            inplace_result(args, r)
        }
    )*};
}
inplace_direct! {
    relu_ => relu, |v| if v.is_nan() || v > 0.0 { v } else { 0.0 };
    hardswish_ => hardswish, |v| v * (v + 3.0).clamp(0.0, 6.0) / 6.0;
    hardsigmoid_ => hardsigmoid, |v| (v + 3.0).clamp(0.0, 6.0) / 6.0;
}

pub(crate) fn register(r: &mut Registry) {
    let pairs: [(&str, super::Kernel, super::Kernel); 14] = [
        ("relu", relu, relu_),
        ("relu6", relu6, relu6_),
        ("hardtanh", hardtanh, hardtanh_),
        ("leaky_relu", leaky_relu, leaky_relu_),
        ("elu", elu, elu_),
        ("selu", selu, selu_),
        ("celu", celu, celu_),
        ("gelu", gelu, gelu_),
        ("silu", silu, silu_),
        ("mish", mish, mish_),
        ("hardswish", hardswish, hardswish_),
        ("hardsigmoid", hardsigmoid, hardsigmoid_),
        ("threshold", threshold, threshold_),
        ("rrelu", rrelu, rrelu_),
    ];
    for (name, k, kin) in pairs {
        r.add(&format!("aten::{name}"), k);
        r.add(&format!("aten::{name}_"), kin);
    }
    r.add("aten::log_sigmoid", log_sigmoid);
    r.add("aten::log_sigmoid_forward", log_sigmoid_forward);
    r.add("aten::log_sigmoid_forward.output", |a| {
        let r = log_sigmoid_forward(a)?;
        a.write_outs(1, r)
    });
    r.add("aten::_safe_softmax", safe_softmax);
    r.add("aten::_add_relu.Tensor", add_relu);
    r.add("aten::_add_relu.Scalar", add_relu);
    r.add("aten::_add_relu_.Tensor", add_relu_);
    r.add("aten::_add_relu_.Scalar", add_relu_);
    r.add("aten::softplus", softplus);
    r.add("aten::softshrink", softshrink);
    r.add("aten::hardshrink", hardshrink);
    r.add("aten::prelu", prelu);
    r.add("aten::_prelu_kernel", prelu);
    r.add("aten::glu", glu);
    r.add("aten::glu_jvp", glu_jvp);
    r.add("aten::rrelu_with_noise", rrelu_with_noise);
    r.add("aten::rrelu_with_noise_", rrelu_with_noise_);
    r.add(
        "aten::rrelu_with_noise_functional",
        rrelu_with_noise_functional,
    );
    r.add("aten::native_dropout", native_dropout);
    r.add("aten::_masked_softmax", masked_softmax);
    r.add("aten::_addmm_activation", addmm_activation);
    r.add("aten::softmax.int", softmax);
    r.add("aten::special_softmax", softmax);
    r.add("aten::log_softmax.int", log_softmax);
    r.add("aten::special_log_softmax", log_softmax);
    r.add("aten::_softmax", softmax_);
    r.add("aten::_log_softmax", log_softmax_);
    r.add("aten::dropout", dropout);
    r.add("aten::dropout_", dropout_);
    r.add("aten::feature_dropout", feature_dropout);
    r.add("aten::feature_dropout_", feature_dropout_);
    r.add("aten::alpha_dropout", alpha_dropout);
    r.add("aten::alpha_dropout_", alpha_dropout_);
    r.add("aten::feature_alpha_dropout", feature_alpha_dropout);
    r.add("aten::feature_alpha_dropout_", feature_alpha_dropout_);
}
