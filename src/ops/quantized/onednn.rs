//! `onednn::` int8 operators that PyTorch's x86 inductor lowering (PT2E quantization) emits:
//! `qlinear_pointwise` / `qconv*_pointwise` with their fused unary and binary post-ops, the
//! weight prepacks, and the fp16-weight dynamic linear. Activations are plain uint8 / int8
//! tensors with their scale and zero point as arguments; an MKLDNN packed weight is
//! represented by the dense tensor it holds (what `.to_dense()` gives back: the linear weight
//! transposed to `[in, out]`, a conv1d weight as 2-d of unit height).
//!
//! Arithmetic is oneDNN's: an exact int32 accumulator of `(x - x_zp) * w` (weight zero points
//! are ignored: oneDNN weights are symmetric), then in float `(acc * x_scale) * w_scale[oc] +
//! bias`, the binary post-op (`sum`: `+ other_scale * (other - other_zp)`; `add`: `+ other`
//! as a float), the unary post-op, and for an integer output `nearbyint(y * (1 / out_scale) +
//! out_zp)` saturated. Integer outputs are bit-exact with PyTorch's; transcendental post-ops
//! (tanh, gelu, swish) agree to float rounding.

use crate::ops::kernels::vmath;
use crate::ops::kernels::{
    check_rank, check_size, invalid_argument, rank_mismatch, shape_mismatch, size_mismatch,
    wrong_dtype,
};
use crate::ops::prims::via_aten;
use crate::ops::{Args, Registry};
use crate::tensor::RankRequirement;
use crate::tensor::{DType, Tensor};
use crate::values::{IValue, List, Type};
use crate::Result;

pub fn register(r: &mut Registry) {
    r.add("onednn::qlinear_prepack", qlinear_prepack);
    r.add("onednn::qconv_prepack", qconv_prepack);
    r.add("onednn::linear_prepack_fp16", linear_prepack_fp16);
    r.add("onednn::linear_dynamic_fp16", |a| {
        linear_dynamic_fp16(a, false)
    });
    r.add("onednn::linear_relu_dynamic_fp16", |a| {
        linear_dynamic_fp16(a, true)
    });
    // (`tensor`: the activation's scale and zero point are one-element tensors)
    r.add("onednn::qlinear_pointwise", |a| qlinear_pointwise(a, false));
    r.add("onednn::qlinear_pointwise.tensor", |a| {
        qlinear_pointwise(a, true)
    });
    r.add("onednn::qlinear_pointwise.binary", |a| {
        qlinear_binary(a, false)
    });
    r.add("onednn::qlinear_pointwise.binary_tensor", |a| {
        qlinear_binary(a, true)
    });
    // one kernel for every spatial rank: PyTorch's dispatches on the input's rank too
    r.add_all(
        &[
            "onednn::qconv_pointwise",
            "onednn::qconv1d_pointwise",
            "onednn::qconv2d_pointwise",
            "onednn::qconv3d_pointwise",
        ],
        |a| qconv_pointwise(a, false),
    );
    r.add_all(
        &[
            "onednn::qconv_pointwise.tensor",
            "onednn::qconv2d_pointwise.tensor",
        ],
        |a| qconv_pointwise(a, true),
    );
    r.add("onednn::qconv2d_pointwise.binary", |a| {
        qconv_binary(a, false)
    });
    r.add("onednn::qconv2d_pointwise.binary_tensor", |a| {
        qconv_binary(a, true)
    });
    r.add("onednn::qbatch_norm2d", qbatch_norm2d);
}

/// A fused elementwise post-op in oneDNN's float32 form.
#[derive(Clone, Copy)]
enum Unary {
    Identity,
    Relu,
    LeakyRelu(f32),
    Tanh,
    Gelu,
    GeluTanh,
    Clamp(f32, f32),
    Hardswish,
    Swish,
}

impl Unary {
    fn apply(self, y: f32) -> f32 {
        match self {
            Unary::Identity => y,
            Unary::Relu => {
                if y > 0.0 {
                    y
                } else {
                    0.0
                }
            }
            Unary::LeakyRelu(alpha) => {
                if y > 0.0 {
                    y
                } else {
                    y * alpha
                }
            }
            Unary::Tanh => vmath::tanh(y),
            Unary::Gelu => vmath::gelu(y),
            Unary::GeluTanh => vmath::gelu_tanh(y),
            Unary::Clamp(lo, hi) => y.max(lo).min(hi),
            Unary::Hardswish => y * (y + 3.0).clamp(0.0, 6.0) / 6.0,
            Unary::Swish => vmath::silu(y),
        }
    }
}

/// The float value of a `Scalar?` post-op argument (`None` is refused).
fn post_op_scalar(op: &str, v: Option<&IValue>, what: &str) -> Result<f32> {
    v.and_then(|v| v.as_scalar())
        .map(|s| s.to_f64() as f32)
        .ok_or_else(|| {
            invalid_argument(
                op,
                format!("the scalar of post op {what}"),
                "must be a number",
                v.map_or("None", |v| v.kind_name()),
            )
        })
}

/// `create_attr_by_post_op`'s unary post-ops (qlinear accepts all of them).
fn parse_unary(op: &str, name: &str, scalars: &[IValue], algorithm: &str) -> Result<Unary> {
    Ok(match name {
        "none" | "" => Unary::Identity,
        "relu" => Unary::Relu,
        "leaky_relu" => {
            check_size(
                op,
                "the number of scalars of post op leaky_relu",
                1,
                scalars.len() as i64,
            )?;
            Unary::LeakyRelu(post_op_scalar(op, scalars.first(), "leaky_relu")?)
        }
        "tanh" => Unary::Tanh,
        "gelu" => match algorithm {
            "none" => Unary::Gelu,
            "tanh" => Unary::GeluTanh,
            other => {
                return Err(invalid_argument(
                    op,
                    "the algorithm of post op gelu",
                    "must be 'none' or 'tanh'",
                    format!("'{other}'"),
                ))
            }
        },
        "hardtanh" => {
            check_size(
                op,
                "the number of scalars (min_val, max_val) of post op hardtanh",
                2,
                scalars.len() as i64,
            )?;
            Unary::Clamp(
                post_op_scalar(op, scalars.first(), "hardtanh")?,
                post_op_scalar(op, scalars.get(1), "hardtanh")?,
            )
        }
        "hardswish" => Unary::Hardswish,
        "swish" => Unary::Swish,
        other => {
            return Err(invalid_argument(
                op,
                "unary post op",
                "must be one of none, relu, leaky_relu, tanh, gelu, hardtanh, hardswish, swish",
                format!("'{other}'"),
            ))
        }
    })
}

/// Where the float result goes: requantized to uint8 / int8, or stored as a float dtype.
#[derive(Clone, Copy)]
enum Output {
    Quantized {
        dtype: DType,
        inv_scale: f32,
        zero_point: f32,
        lo: f32,
        hi: f32,
    },
    Float(DType),
}

impl Output {
    /// `output_dtype` (default `default`) with `output_scale` / `output_zero_point`.
    fn new(op: &str, dtype: DType, scale: f64, zero_point: i64) -> Result<Output> {
        let range = match dtype {
            DType::UInt8 => (0.0, 255.0),
            DType::Int8 => (-128.0, 127.0),
            DType::Float32 | DType::BFloat16 | DType::Float16 => {
                if scale as f32 != 1.0 || zero_point != 0 {
                    return Err(invalid_argument(
                        op,
                        "(output_scale, output_zero_point)",
                        format!("must be (1, 0) for a {dtype} output"),
                        format!("({scale}, {zero_point})"),
                    ));
                }
                return Ok(Output::Float(dtype));
            }
            other => {
                return Err(wrong_dtype(
                    op,
                    "output_dtype",
                    "uint8, int8, float32, bfloat16 or float16",
                    other,
                ))
            }
        };
        Ok(Output::Quantized {
            dtype,
            inv_scale: 1.0 / scale as f32,
            zero_point: zero_point as f32,
            lo: range.0,
            hi: range.1,
        })
    }

    fn dtype(self) -> DType {
        match self {
            Output::Quantized { dtype, .. } | Output::Float(dtype) => dtype,
        }
    }

    /// The stored values (as float: integers for a quantized output) of float results `y`.
    fn finish(self, y: &mut [f32]) {
        if let Output::Quantized {
            inv_scale,
            zero_point,
            lo,
            hi,
            ..
        } = self
        {
            for v in y.iter_mut() {
                // oneDNN adds the zero point in float before rounding: `y / s` within
                // float rounding below a half-way point can sum to exactly .5 and round up
                let q = (*v * inv_scale + zero_point).round_ties_even();
                // a NaN has no integer: tsrun stores the zero point
                *v = if q.is_nan() {
                    zero_point
                } else {
                    q.clamp(lo, hi)
                };
            }
        }
    }

    fn tensor(self, y: Vec<f32>, shape: &[usize]) -> Result<Tensor> {
        Tensor::from_vec(y, shape)?.to_dtype(self.dtype())
    }
}

/// The binary post-op fused before the unary one.
enum Binary {
    None,
    /// `y += scale * (other - zero_point)`, elementwise in the output's layout.
    Sum {
        other: Vec<f32>,
        scale: f32,
        zero_point: f32,
    },
    /// `y += other` (its raw values as float), `other` repeating every `other.len()` elements.
    Add(Vec<f32>),
}

/// What turns an int32 accumulator of output channel `c` into float:
/// `(acc * x_scale) * w_scales[c] + bias[c]`.
struct Dequant {
    x_scale: f32,
    w_scales: Vec<f32>,
    bias: Option<Vec<f32>>,
}

/// The float epilogue shared by linear and convolution: `acc` (int32 accumulators, `channel`
/// of each) dequantized, through the binary and unary post-ops, then stored by `out`.
struct Epilogue {
    dequant: Dequant,
    binary: Binary,
    unary: Unary,
    out: Output,
}

impl Epilogue {
    fn run(&self, acc: &[f32], channel: impl Fn(usize) -> usize) -> Vec<f32> {
        let mut y: Vec<f32> = acc
            .iter()
            .enumerate()
            .map(|(i, &a)| {
                let c = channel(i);
                // a single weight scale is per tensor
                let d = &self.dequant;
                let ws = d.w_scales.get(c).or(d.w_scales.first());
                let mut v = (a * d.x_scale) * ws.copied().unwrap_or(1.0);
                if let Some(b) = &d.bias {
                    v += b.get(c).copied().unwrap_or(0.0);
                }
                v = match &self.binary {
                    Binary::None => v,
                    Binary::Sum {
                        other,
                        scale,
                        zero_point,
                    } => v + scale * (other.get(i).copied().unwrap_or(0.0) - zero_point),
                    Binary::Add(other) => {
                        v + other.get(i % other.len().max(1)).copied().unwrap_or(0.0)
                    }
                };
                self.unary.apply(v)
            })
            .collect();
        self.out.finish(&mut y);
        y
    }
}

/// Weight scales: float32, one per output channel or one for the tensor.
fn weight_scales(op: &str, t: &Tensor, channels: usize) -> Result<Vec<f32>> {
    if t.dtype() != DType::Float32 {
        return Err(wrong_dtype(op, "w_scale", "float32", t.dtype()));
    }
    let v = t.to_vec::<f32>()?;
    if v.len() != channels && v.len() != 1 {
        return Err(size_mismatch(
            op,
            "the number of weight scales (or 1)",
            channels as i64,
            v.len() as i64,
        ));
    }
    Ok(v)
}

/// The optional float bias (float32, bfloat16 or half, one per output channel).
fn bias_values(op: &str, b: Option<Tensor>, channels: usize) -> Result<Option<Vec<f32>>> {
    let Some(b) = b else { return Ok(None) };
    if !matches!(b.dtype(), DType::Float32 | DType::BFloat16 | DType::Float16) {
        return Err(wrong_dtype(
            op,
            "bias",
            "float32, bfloat16 or float16",
            b.dtype(),
        ));
    }
    check_size(
        op,
        "the number of bias elements",
        channels as i64,
        b.numel() as i64,
    )?;
    Ok(Some(b.to_vec::<f32>()?))
}

/// The activation scale and zero point: arguments `i`, `i + 1` as numbers or (`tensor`)
/// one-element tensors.
fn act_qparams(a: &Args<'_>, i: usize, tensor: bool) -> Result<(f64, i64)> {
    if !tensor {
        return Ok((a.double(i)?, a.int(i + 1)?));
    }
    let (s, z) = (a.tensor(i)?, a.tensor(i + 1)?);
    for (what, t) in [("x_scale", &s), ("x_zp", &z)] {
        if t.numel() != 1 {
            return Err(size_mismatch(
                a.op,
                format!("the number of elements of {what}"),
                1,
                t.numel() as i64,
            ));
        }
    }
    Ok((s.item()?.to_f64(), z.item()?.to_f64() as i64))
}

fn scalars(a: &Args<'_>, i: usize) -> Result<Vec<IValue>> {
    if a.is_none(i) {
        return Ok(Vec::new());
    }
    Ok(a.list(i)?.to_vec())
}

fn opt_string(a: &Args<'_>, i: usize) -> Result<String> {
    Ok(a.opt_str(i)?.map(|s| s.to_string()).unwrap_or_default())
}

/// `qlinear_prepack(weight, x_shape)`: the int8 `[out, in]` weight as oneDNN holds it,
/// transposed to `[in, out]`.
fn qlinear_prepack(a: &mut Args<'_>) -> Result<IValue> {
    let w = a.tensor(0)?;
    if w.dtype() != DType::Int8 {
        return Err(wrong_dtype(a.op, "weight", "int8", w.dtype()));
    }
    check_rank(a.op, "weight", RankRequirement::Exactly(2), w.shape())?;
    Ok(IValue::Tensor(transposed(&w)?))
}

/// A contiguous copy of 2-d `w` transposed.
fn transposed(w: &Tensor) -> Result<Tensor> {
    let (r, c) = (w.shape()[0], w.shape()[1]);
    let t = w.as_strided(
        &[c, r],
        &[w.strides()[1], w.strides()[0]],
        w.storage_offset(),
    )?;
    t.deep_clone()
}

/// `linear_prepack_fp16(weight, x_shape)`: the float `[out, in]` weight as half, transposed.
fn linear_prepack_fp16(a: &mut Args<'_>) -> Result<IValue> {
    let w = a.tensor(0)?;
    if !w.dtype().is_floating_point() {
        return Err(wrong_dtype(a.op, "weight", "floating-point", w.dtype()));
    }
    check_rank(a.op, "weight", RankRequirement::Exactly(2), w.shape())?;
    Ok(IValue::Tensor(transposed(&w.to_dtype(DType::Float16)?)?))
}

/// `linear_dynamic_fp16(x, w, bias)` (and its relu): the float input times the half weight
/// (packed `[in, out]`), in float.
fn linear_dynamic_fp16(a: &mut Args<'_>, relu: bool) -> Result<IValue> {
    let x = a.tensor(0)?;
    let w = a.tensor(1)?;
    if x.dtype() != DType::Float32 {
        return Err(wrong_dtype(a.op, "input", "float32", x.dtype()));
    }
    if w.dtype() != DType::Float16 {
        return Err(wrong_dtype(a.op, "packed weight", "float16", w.dtype()));
    }
    check_rank(
        a.op,
        "packed weight",
        RankRequirement::Exactly(2),
        w.shape(),
    )?;
    let weight = transposed(&w.to_dtype(DType::Float32)?)?;
    let bias = a.opt_tensor(2)?;
    let y = crate::ops::linalg::linear(a.op, &x, &weight, bias.as_ref())?;
    if relu {
        return via_aten(a, "aten::relu", vec![IValue::Tensor(y)]);
    }
    Ok(IValue::Tensor(y))
}

/// The int8 weight of a qlinear: `[in, out]`.
fn linear_weight(op: &str, w: &Tensor, k: usize) -> Result<(Vec<i32>, usize)> {
    if w.dtype() != DType::Int8 {
        return Err(wrong_dtype(op, "packed weight", "int8", w.dtype()));
    }
    check_rank(op, "packed weight", RankRequirement::Exactly(2), w.shape())?;
    check_size(
        op,
        "packed weight.size(0) (the input's features)",
        k as i64,
        w.shape()[0] as i64,
    )?;
    Ok((w.to_vec::<i32>()?, w.shape()[1]))
}

/// The int32 accumulators `(x - x_zp) @ w` of a `[m, k]` activation and `[k, n]` weight.
fn linear_accumulate(
    x: &[i32],
    x_zp: i32,
    w: &[i32],
    m: usize,
    k: usize,
    n: usize,
) -> Result<Vec<f32>> {
    let len = crate::tensor::checked_numel(&[m, n])?;
    crate::tensor::budget::check_alloc(len.saturating_mul(4))?;
    let mut acc = vec![0i32; len];
    if k == 0 || n == 0 {
        return Ok(vec![0.0; len]);
    }
    for (row, out) in x.chunks_exact(k).zip(acc.chunks_exact_mut(n)) {
        for (&xv, wrow) in row.iter().zip(w.chunks_exact(n)) {
            let xq = xv - x_zp;
            for (o, &wv) in out.iter_mut().zip(wrow) {
                *o = o.wrapping_add(xq * wv);
            }
        }
    }
    Ok(acc.into_iter().map(|v| v as f32).collect())
}

/// The activation of a qlinear: uint8 or int8, at least 1-d.
fn activation(op: &str, x: &Tensor) -> Result<usize> {
    if !matches!(x.dtype(), DType::UInt8 | DType::Int8) {
        return Err(wrong_dtype(op, "input", "uint8 or int8", x.dtype()));
    }
    check_rank(op, "input", RankRequirement::AtLeast(1), x.shape())?;
    Ok(x.shape()[x.dim() - 1])
}

/// Everything a qlinear computes from its arguments except the binary post-op: the input's
/// rows and the accumulators.
struct LinearRun {
    out_shape: Vec<usize>,
    acc: Vec<f32>,
    n: usize,
    dequant: Dequant,
    input_dtype: DType,
}

/// Arguments `qx, x_scale, x_zp, qw, w_scale, w_zp` then `bias` at `bias_at`.
fn linear_run(a: &Args<'_>, bias_at: usize, tensor: bool) -> Result<LinearRun> {
    let x = a.tensor(0)?;
    let k = activation(a.op, &x)?;
    let (x_scale, x_zp) = act_qparams(a, 1, tensor)?;
    let (w, n) = linear_weight(a.op, &a.tensor(3)?, k)?;
    let w_scales = weight_scales(a.op, &a.tensor(4)?, n)?;
    let bias = bias_values(a.op, a.opt_tensor(bias_at)?, n)?;
    let m = x.numel() / k.max(1);
    let acc = linear_accumulate(&x.to_vec::<i32>()?, x_zp as i32, &w, m, k, n)?;
    let mut out_shape = x.shape().to_vec();
    if let Some(last) = out_shape.last_mut() {
        *last = n;
    }
    Ok(LinearRun {
        out_shape,
        acc,
        n,
        dequant: Dequant {
            x_scale: x_scale as f32,
            w_scales,
            bias,
        },
        input_dtype: x.dtype(),
    })
}

/// `qlinear_pointwise(qx, x_scale, x_zp, qw, w_scale, w_zp, bias, output_scale,
/// output_zero_point, output_dtype, post_op_name, post_op_args, post_op_algorithm)`.
fn qlinear_pointwise(a: &mut Args<'_>, tensor: bool) -> Result<IValue> {
    let run = linear_run(a, 6, tensor)?;
    let dtype = a.opt_dtype(9)?.unwrap_or(run.input_dtype);
    let out = Output::new(a.op, dtype, a.double(7)?, a.int(8)?)?;
    let unary = parse_unary(a.op, &a.str(10)?, &scalars(a, 11)?, &a.str(12)?)?;
    let n = run.n;
    let ep = Epilogue {
        dequant: run.dequant,
        binary: Binary::None,
        unary,
        out,
    };
    let y = ep.run(&run.acc, |i| i % n);
    Ok(IValue::Tensor(out.tensor(y, &run.out_shape)?))
}

/// `qlinear_pointwise.binary(qx, x_scale, x_zp, qw, w_scale, w_zp, other, bias, output_scale,
/// output_zero_point, output_dtype, other_scale, other_zp, binary_post_op, binary_alpha,
/// unary_post_op, unary_post_op_args, unary_post_op_algorithm)`. With `sum` the result is
/// written into `other` and returned, as PyTorch's (which computes into it).
fn qlinear_binary(a: &mut Args<'_>, tensor: bool) -> Result<IValue> {
    let run = linear_run(a, 7, tensor)?;
    let requested = a.opt_dtype(10)?;
    let dtype = requested.unwrap_or(run.input_dtype);
    let out = Output::new(a.op, dtype, a.double(8)?, a.int(9)?)?;
    let (other_scale, other_zp) = (a.double(11)?, a.int(12)?);
    let binary_name = a.str(13)?;
    if a.double(14)? as f32 != 1.0 {
        return Err(invalid_argument(
            a.op,
            "binary_alpha",
            "must be 1 (oneDNN has no other)",
            a.double(14)?,
        ));
    }
    let unary_name = a.str(15)?;
    let other = a.opt_tensor(6)?;
    let float_out = matches!(out, Output::Float(_));
    let other = match (&*binary_name, other) {
        ("none", _) => None,
        ("sum" | "add", None) => {
            return Err(invalid_argument(
                a.op,
                "other",
                format!("must be a tensor for binary post op {binary_name}"),
                "None",
            ))
        }
        ("sum" | "add", Some(o)) => Some(o),
        (other, _) => {
            return Err(invalid_argument(
                a.op,
                "binary post op",
                "must be none, sum or add",
                format!("'{other}'"),
            ))
        }
    };
    if other.is_some() {
        if float_out && (other_scale as f32 != 1.0 || other_zp != 0) {
            return Err(invalid_argument(
                a.op,
                "(other_scale, other_zp)",
                "must be (1, 0) for a floating-point output",
                format!("({other_scale}, {other_zp})"),
            ));
        }
        if !matches!(&*unary_name, "none" | "relu") {
            return Err(invalid_argument(
                a.op,
                "unary post op",
                format!("must be none or relu with binary post op {binary_name}"),
                format!("'{unary_name}'"),
            ));
        }
    }
    let unary = parse_unary(a.op, &unary_name, &scalars(a, 16)?, &a.str(17)?)?;
    let total: usize = run.out_shape.iter().product();
    let binary = match (&*binary_name, &other) {
        ("sum", Some(o)) => {
            // the extra input is the output buffer: it has the output's dtype (uint8 unless
            // output_dtype says otherwise) and size
            let expected = requested.unwrap_or(DType::UInt8);
            if o.dtype() != expected {
                return Err(wrong_dtype(
                    a.op,
                    "other (the sum post op's output)",
                    expected.to_string(),
                    o.dtype(),
                ));
            }
            check_size(
                a.op,
                "the number of elements of other (the output's)",
                total as i64,
                o.numel() as i64,
            )?;
            Binary::Sum {
                other: o.to_vec::<f32>()?,
                scale: other_scale as f32,
                zero_point: other_zp as f32,
            }
        }
        ("add", Some(o)) => {
            if o.numel() != total && o.numel() != run.n {
                return Err(invalid_argument(
                    a.op,
                    "the number of elements of other",
                    format!(
                        "must be the output's ({total}) or its last dimension's ({})",
                        run.n
                    ),
                    o.numel(),
                ));
            }
            Binary::Add(o.to_vec::<f32>()?)
        }
        _ => Binary::None,
    };
    let n = run.n;
    let ep = Epilogue {
        dequant: run.dequant,
        binary,
        unary,
        out,
    };
    let y = out.tensor(ep.run(&run.acc, |i| i % n), &run.out_shape)?;
    if let ("sum", Some(o)) = (&*binary_name, other) {
        o.copy_from(&y)?;
        return Ok(IValue::Tensor(o));
    }
    Ok(IValue::Tensor(y))
}

/// `qconv_prepack(weight, w_scales, x_scale, x_zp, stride, padding, dilation, groups,
/// x_shape)`: the int8 weight as oneDNN holds it (a conv1d weight as 2-d of unit height).
fn qconv_prepack(a: &mut Args<'_>) -> Result<IValue> {
    let w = a.tensor(0)?;
    if w.dtype() != DType::Int8 {
        return Err(wrong_dtype(a.op, "weight", "int8", w.dtype()));
    }
    check_rank(
        a.op,
        "weight",
        RankRequirement::OneOf(vec![3, 4, 5]),
        w.shape(),
    )?;
    let spatial = w.dim() - 2;
    for (i, name) in [(4, "stride"), (5, "padding"), (6, "dilation")] {
        let v = a.int_list(i)?;
        if v.len() != spatial {
            return Err(size_mismatch(
                a.op,
                format!("the length of {name}"),
                spatial as i64,
                v.len() as i64,
            ));
        }
    }
    let w = w.contiguous()?.deep_clone()?;
    if spatial == 1 {
        let s = w.shape();
        let shape = [s[0], s[1], 1, s[2]];
        let strides = crate::tensor::contiguous_strides(&shape);
        return Ok(IValue::Tensor(w.as_strided(&shape, &strides, 0)?));
    }
    Ok(IValue::Tensor(w))
}

/// The exact int32 accumulators of `(x - x_zp) conv w` (NC* order), computed as a float64
/// convolution: products of 8-bit values and their sums are integers float64 holds exactly.
#[allow(clippy::too_many_arguments)]
fn conv_accumulate(
    a: &Args<'_>,
    x: &Tensor,
    x_zp: i64,
    w: &Tensor,
    stride: IValue,
    padding: IValue,
    dilation: IValue,
    groups: i64,
) -> Result<Tensor> {
    let xv: Vec<f64> = x
        .to_vec::<f64>()?
        .into_iter()
        .map(|v| v - x_zp as f64)
        .collect();
    let x64 = Tensor::from_vec(xv, x.shape())?;
    let spatial = x.dim() - 2;
    let zeros = IValue::List(List::new(
        Type::Int,
        std::iter::repeat_n(IValue::Int(0), spatial).collect(),
    ));
    let r = via_aten(
        a,
        "aten::convolution",
        vec![
            IValue::Tensor(x64),
            IValue::Tensor(w.to_dtype(DType::Float64)?),
            IValue::None,
            stride,
            padding,
            dilation,
            IValue::Bool(false),
            zeros,
            IValue::Int(groups),
        ],
    )?;
    match r {
        IValue::Tensor(t) => Ok(t),
        other => Err(crate::ops::kernels::unsupported(format!(
            "{}: aten::convolution gave {}",
            a.op,
            other.kind_name()
        ))),
    }
}

/// The geometry of a oneDNN convolution: the uint8 activation, its weight (a conv1d one
/// unpacked from unit height) and the accumulators.
struct ConvRun {
    acc: Vec<f32>,
    shape: Vec<usize>,
    dequant: Dequant,
}

/// Arguments `qx, x_scale, x_zp, qw, w_scale, w_zp`, then `bias, stride, padding, dilation,
/// groups` from `bias_at`.
fn conv_run(a: &Args<'_>, bias_at: usize, tensor: bool) -> Result<ConvRun> {
    let x = a.tensor(0)?;
    if x.dtype() != DType::UInt8 {
        return Err(wrong_dtype(a.op, "input", "uint8", x.dtype()));
    }
    check_rank(
        a.op,
        "input",
        RankRequirement::OneOf(vec![3, 4, 5]),
        x.shape(),
    )?;
    let (x_scale, x_zp) = act_qparams(a, 1, tensor)?;
    let mut w = a.tensor(3)?;
    if w.dtype() != DType::Int8 {
        return Err(wrong_dtype(a.op, "weight", "int8", w.dtype()));
    }
    if x.dim() == 3 && w.dim() == 4 && w.shape()[2] == 1 {
        let s = w.shape();
        let shape = [s[0], s[1], s[3]];
        let w3 = w.contiguous()?;
        w = w3.as_strided(
            &shape,
            &crate::tensor::contiguous_strides(&shape),
            w3.storage_offset(),
        )?;
    }
    if w.dim() != x.dim() {
        return Err(rank_mismatch(
            a.op,
            "weight",
            RankRequirement::Exactly(x.dim()),
            w.shape(),
        ));
    }
    let channels = w.shape()[0];
    let w_scales = weight_scales(a.op, &a.tensor(4)?, channels)?;
    let bias = bias_values(a.op, a.opt_tensor(bias_at)?, channels)?;
    let acc = conv_accumulate(
        a,
        &x,
        x_zp,
        &w,
        a.get(bias_at + 1)?.clone(),
        a.get(bias_at + 2)?.clone(),
        a.get(bias_at + 3)?.clone(),
        a.int(bias_at + 4)?,
    )?;
    Ok(ConvRun {
        shape: acc.shape().to_vec(),
        acc: acc.to_vec::<f32>()?,
        dequant: Dequant {
            x_scale: x_scale as f32,
            w_scales,
            bias,
        },
    })
}

impl ConvRun {
    fn plane(&self) -> usize {
        self.shape[2..].iter().product()
    }
    fn channels(&self) -> usize {
        self.shape[1]
    }
}

/// `values` (NC* order) as a tensor of `shape` in channels-last layout, as oneDNN writes
/// convolution outputs.
fn channels_last(values: Vec<f32>, shape: &[usize], dtype: DType) -> Result<Tensor> {
    let (n, c) = (shape[0], shape[1]);
    let plane: usize = shape[2..].iter().product();
    let mut nhwc = vec![0f32; values.len()];
    for (i, v) in values.into_iter().enumerate() {
        let (b, rest) = (i / (c * plane), i % (c * plane));
        let (ch, p) = (rest / plane, rest % plane);
        if let Some(slot) = nhwc.get_mut((b * plane + p) * c + ch) {
            *slot = v;
        }
    }
    let mut storage_shape = vec![n];
    storage_shape.extend_from_slice(&shape[2..]);
    storage_shape.push(c);
    let t = Tensor::from_vec(nhwc, &storage_shape)?.to_dtype(dtype)?;
    Ok(t.as_strided(shape, &channels_last_strides(shape), 0)?)
}

fn channels_last_strides(shape: &[usize]) -> Vec<isize> {
    let c = shape[1];
    let mut strides = vec![0isize; shape.len()];
    let mut s = c as isize;
    for d in (2..shape.len()).rev() {
        strides[d] = s;
        s *= shape[d] as isize;
    }
    strides[1] = 1;
    strides[0] = s;
    strides
}

/// The output dtype of a oneDNN convolution (`None`: uint8); half is refused as oneDNN has no
/// such int8 convolution primitive.
fn conv_output(op: &str, dtype: Option<DType>, scale: f64, zero_point: i64) -> Result<Output> {
    let dtype = dtype.unwrap_or(DType::UInt8);
    if dtype == DType::Float16 {
        return Err(wrong_dtype(
            op,
            "output_dtype",
            "not float16 (oneDNN has no int8 convolution primitive with a half output)",
            dtype,
        ));
    }
    Output::new(op, dtype, scale, zero_point)
}

/// `qconv*_pointwise(qx, x_scale, x_zp, qw, w_scale, w_zp, bias, stride, padding, dilation,
/// groups, output_scale, output_zero_point, output_dtype, attr, scalars, algorithm)`.
fn qconv_pointwise(a: &mut Args<'_>, tensor: bool) -> Result<IValue> {
    let run = conv_run(a, 6, tensor)?;
    let out = conv_output(a.op, a.opt_dtype(13)?, a.double(11)?, a.int(12)?)?;
    let attr = a.str(14)?;
    if !matches!(&*attr, "none" | "relu" | "hardtanh" | "hardswish" | "swish") {
        return Err(invalid_argument(
            a.op,
            "attr",
            "must be one of none, relu, hardtanh, hardswish, swish",
            format!("'{attr}'"),
        ));
    }
    let unary = parse_unary(a.op, &attr, &scalars(a, 15)?, &opt_string(a, 16)?)?;
    let (plane, channels) = (run.plane(), run.channels());
    let ep = Epilogue {
        dequant: run.dequant,
        binary: Binary::None,
        unary,
        out,
    };
    let y = ep.run(&run.acc, |i| (i / plane) % channels);
    Ok(IValue::Tensor(channels_last(y, &run.shape, out.dtype())?))
}

/// `qconv2d_pointwise.binary(qx, x_scale, x_zp, qw, w_scale, w_zp, qaccum, bias, stride,
/// padding, dilation, groups, output_scale, output_zero_point, output_dtype, accum_scale,
/// accum_zero_point, binary_attr, alpha, unary_attr, unary_scalars, unary_algorithm)`: the
/// convolution plus `accum_scale * (qaccum - accum_zero_point)`, optionally relu, written into
/// `qaccum`. oneDNN computes in place and so PyTorch requires a channels-last contiguous
/// accumulator; tsrun writes through any layout, so it also takes a row-major one.
fn qconv_binary(a: &mut Args<'_>, tensor: bool) -> Result<IValue> {
    let binary_attr = a.str(17)?;
    let unary_attr = opt_string(a, 19)?;
    if &*binary_attr != "sum" {
        return Err(invalid_argument(
            a.op,
            "binary_attr",
            "must be 'sum'",
            format!("'{binary_attr}'"),
        ));
    }
    if !matches!(unary_attr.as_str(), "none" | "relu" | "") {
        return Err(invalid_argument(
            a.op,
            "unary_attr",
            "must be none or relu with binary_attr 'sum'",
            format!("'{unary_attr}'"),
        ));
    }
    let accum = a.tensor(6)?;
    let run = conv_run(a, 7, tensor)?;
    let out = conv_output(a.op, a.opt_dtype(14)?, a.double(12)?, a.int(13)?)?;
    if accum.shape() != run.shape.as_slice() {
        return Err(shape_mismatch(a.op, "qaccum", &run.shape, accum.shape()));
    }
    if accum.dtype() != out.dtype() {
        return Err(wrong_dtype(
            a.op,
            "qaccum",
            format!("{} (the output's dtype)", out.dtype()),
            accum.dtype(),
        ));
    }
    let unary = if unary_attr == "relu" {
        Unary::Relu
    } else {
        Unary::Identity
    };
    let (plane, channels) = (run.plane(), run.channels());
    let ep = Epilogue {
        dequant: run.dequant,
        binary: Binary::Sum {
            other: accum.to_vec::<f32>()?,
            scale: a.double(15)? as f32,
            zero_point: a.int(16)? as f32,
        },
        unary,
        out,
    };
    let y = ep.run(&run.acc, |i| (i / plane) % channels);
    accum.copy_from(&channels_last(y, &run.shape, out.dtype())?)?;
    Ok(IValue::Tensor(accum))
}

/// `qbatch_norm2d(qx, qx_scale, qx_zero_point, weight, bias, mean, var, eps, output_scale,
/// output_zero_point, output_dtype)`: `quantized::batch_norm2d`'s folded arithmetic on a plain
/// uint8 `[N, C, H, W]` input, requantized to uint8 or (scale 1, zero point 0) stored as a
/// float dtype, in channels-last layout.
fn qbatch_norm2d(a: &mut Args<'_>) -> Result<IValue> {
    let x = a.tensor(0)?;
    if x.dtype() != DType::UInt8 {
        return Err(wrong_dtype(a.op, "input", "uint8", x.dtype()));
    }
    check_rank(a.op, "input", RankRequirement::Exactly(4), x.shape())?;
    let (x_scale, x_zp) = (a.double(1)?, a.int(2)?);
    let c = x.shape()[1];
    let mut params = Vec::with_capacity(4);
    for (i, what) in [(3, "weight"), (4, "bias"), (5, "mean"), (6, "var")] {
        let t = a.tensor(i)?;
        if t.dtype() != DType::Float32 {
            return Err(wrong_dtype(a.op, what, "float32", t.dtype()));
        }
        if t.numel() != c {
            return Err(size_mismatch(
                a.op,
                format!("the number of elements of {what} (the input's channels)"),
                c as i64,
                t.numel() as i64,
            ));
        }
        params.push(t.to_vec::<f32>()?);
    }
    let (eps, out_scale, out_zp) = (a.double(7)?, a.double(8)?, a.int(9)?);
    let dtype = a.dtype(10)?;
    if dtype != DType::UInt8 && (out_scale != 1.0 || out_zp != 0) {
        return Err(invalid_argument(
            a.op,
            "(output_scale, output_zero_point)",
            format!("must be (1, 0) for output_dtype {dtype}"),
            format!("({out_scale}, {out_zp})"),
        ));
    }
    let out = match dtype {
        DType::UInt8 => Output::new(a.op, dtype, 1.0, out_zp)?,
        DType::Float32 | DType::BFloat16 | DType::Float16 => Output::Float(dtype),
        other => {
            return Err(wrong_dtype(
                a.op,
                "output_dtype",
                "uint8, float32, bfloat16 or float16",
                other,
            ))
        }
    };
    let bn = super::norm::FusedBatchNorm::new(
        &params[0], &params[1], &params[2], &params[3], eps, x_scale, out_scale, x_zp,
    );
    let plane: usize = x.shape()[2..].iter().product();
    let mut y: Vec<f32> = x
        .to_vec::<i32>()?
        .into_iter()
        .enumerate()
        .map(|(i, q)| bn.value(q, (i / plane.max(1)) % c))
        .collect();
    // the values are already in units of the output scale
    out.finish(&mut y);
    Ok(IValue::Tensor(channels_last(y, x.shape(), out.dtype())?))
}
