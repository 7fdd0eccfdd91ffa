//! `onednn::qadd.tensor`, `onednn::qadd_relu.tensor` and `onednn::qmul.tensor`: x86
//! inductor's elementwise add and mul of plain uint8 tensors, each with its scale and zero point
//! as arguments, to a requantized uint8 or a float32 / bfloat16 / float16 result.
//!
//! Despite the namespace, PyTorch runs them with ATen's own kernels (`qadd_tensor_cpu_kernel`,
//! `qmul_tensor_cpu_kernel` in QuantizedOpKernels.cpp), whose result depends on the CPU
//! capability PyTorch dispatches to (`ops::cpu_capability`, which tsrun follows too):
//! - AVX-512 (a CPU with `avx512vl`, `avx512bw`, `avx512dq` and `fma`, or
//!   `ATEN_CPU_CAPABILITY=avx512`): the leading `numel / 16 * 16` elements in memory order go
//!   through a 16-lane vector body, the rest through the scalar formula. The vector body widens
//!   the bytes with a *signed* extension (`_mm512_cvtepi8_epi32`), so a value of 128 or more
//!   counts as `value - 256` there; it multiplies by the scales rounded to float, and the
//!   compiler fuses the add's second product into the sum (`fma(x, x_scale, y * y_scale)`); a
//!   uint8 result rounds half to even (`_mm512_cvtps_epi32`); a bfloat16 NaN is `0xffff`.
//! - anything else (AVX2, default, not x86-64): the scalar formula for every element: bytes as
//!   unsigned, each product `float(v) * scale` in double rounded to float, a uint8 result
//!   rounded half away from zero (`std::round`), a bfloat16 NaN `0x7fc0`.
//!
//! tsrun reproduces both; the goldens of fixtures/gen_ops_onednn_int8_binary.py were generated
//! with PyTorch's AVX-512 dispatch and with `ATEN_CPU_CAPABILITY=avx2`. Like PyTorch's kernel,
//! this one walks both operands in memory order (the result has the first operand's layout);
//! operands that are not non-overlapping and dense are refused (PyTorch would read memory
//! outside their elements).

use crate::ops::cpu_capability::{cpu_capability, CpuCapability};
use crate::ops::kernels::unsupported_feature;
use crate::ops::{Args, Registry};
use crate::tensor::{DType, Int8BinaryCheck, Tensor, TensorError};
use crate::values::format::fmt_g;
use crate::values::IValue;
use crate::Result;
use half::{bf16, f16};

pub fn register(r: &mut Registry) {
    r.add("onednn::qadd.tensor", |a| int8_binary(a, Int8Op::Add));
    r.add("onednn::qadd_relu.tensor", |a| {
        int8_binary(a, Int8Op::AddRelu)
    });
    r.add("onednn::qmul.tensor", |a| int8_binary(a, Int8Op::Mul));
}

#[derive(Clone, Copy, PartialEq)]
enum Int8Op {
    Add,
    AddRelu,
    Mul,
}

/// The lanes of ATen's vector body: 16 where PyTorch runs its AVX-512 kernels, else 0 (its
/// AVX2 and default builds of these kernels, and every non-x86 one, are scalar only).
fn vector_lanes() -> usize {
    match cpu_capability() {
        Some(CpuCapability::Avx512) => 16,
        _ => 0,
    }
}

/// An operand's integer minus its zero point, as the vector body (`vector`, signed bytes) or
/// the scalar formula (unsigned bytes) reads it; the zero point is truncated to 32 bits and
/// the difference wraps, as in both.
fn centered(q: u8, zero_point: i64, vector: bool) -> i32 {
    let v = if vector { q as i8 as i32 } else { q as i32 };
    v.wrapping_sub(zero_point as i32)
}

/// A float to int32 as x86's conversions do: NaN and out-of-range values become `i32::MIN`.
fn x86_to_i32(v: f32) -> i32 {
    if v.is_nan() || !(-2_147_483_648.0..2_147_483_648.0).contains(&v) {
        i32::MIN
    } else {
        v as i32
    }
}

/// The scales, zero points and derived constants of one call.
struct Params {
    x_scale: f64,
    x_zp: i64,
    y_scale: f64,
    y_zp: i64,
    out_zp: i64,
    /// `1 / output_scale` (add) or `x_scale * y_scale / output_scale` (mul), in double
    /// rounded to float as ATen computes it.
    factor: f32,
}

impl Params {
    /// The float result of one element (before any requantization for add; mul's already
    /// carries the output scale).
    fn value(&self, op: Int8Op, x: u8, y: u8, vector: bool) -> f32 {
        let xv = centered(x, self.x_zp, vector);
        let yv = centered(y, self.y_zp, vector);
        if op == Int8Op::Mul {
            return xv.wrapping_mul(yv) as f32 * self.factor;
        }
        let sum = if vector {
            (xv as f32).mul_add(self.x_scale as f32, yv as f32 * self.y_scale as f32)
        } else {
            let xf = (xv as f32 as f64 * self.x_scale) as f32;
            let yf = (yv as f32 as f64 * self.y_scale) as f32;
            xf + yf
        };
        match (op, vector) {
            // `_mm512_max_ps(v, 0)`: 0 unless v > 0 (-0 and NaN become 0)
            (Int8Op::AddRelu, true) if !(sum > 0.0) => 0.0,
            // `std::max(v, 0.f)`: v unless v < 0 (-0 and NaN stay)
            (Int8Op::AddRelu, false) if sum < 0.0 => 0.0,
            _ => sum,
        }
    }

    /// The requantized uint8 of float result `v`.
    fn requantize(&self, op: Int8Op, v: f32, vector: bool) -> u8 {
        let v = if op == Int8Op::Mul {
            v
        } else {
            v * self.factor
        };
        let r = if vector {
            x86_to_i32(v.round_ties_even())
        } else {
            x86_to_i32(v.round())
        };
        r.wrapping_add(self.out_zp as i32).clamp(0, 255) as u8
    }
}

/// The bfloat16 of `v`, rounded to nearest even; a NaN as the vector body (`0xffff`) or c10's
/// conversion (`0x7fc0`) writes it.
fn to_bf16(v: f32, vector: bool) -> bf16 {
    match (v.is_nan(), vector) {
        (true, true) => bf16::from_bits(0xffff),
        (true, false) => bf16::from_bits(0x7fc0),
        (false, _) => bf16::from_f32(v),
    }
}

/// The float16 of `v`, rounded to nearest even; c10's scalar conversion writes a NaN as the
/// quiet NaN of its sign.
fn to_f16(v: f32, vector: bool) -> f16 {
    if v.is_nan() && !vector {
        f16::from_bits(if v.is_sign_negative() { 0xfe00 } else { 0x7e00 })
    } else {
        f16::from_f32(v)
    }
}

/// The elements of a non-overlapping and dense `t` in the order they lie in memory, with the
/// shape that row-major order of them has (the dims ordered by stride); `None` for any other
/// layout.
fn memory_order(t: &Tensor) -> Result<Option<(Vec<u8>, Vec<usize>)>> {
    if t.is_contiguous() {
        return Ok(Some((t.to_vec::<u8>()?, t.shape().to_vec())));
    }
    if !t.is_non_overlapping_and_dense() {
        return Ok(None);
    }
    let mut dims: Vec<usize> = (0..t.dim()).collect();
    dims.sort_by_key(|&d| std::cmp::Reverse(t.strides()[d]));
    let shape: Vec<usize> = dims.iter().map(|&d| t.shape()[d]).collect();
    let strides: Vec<isize> = dims.iter().map(|&d| t.strides()[d]).collect();
    let view = t.as_strided(&shape, &strides, t.storage_offset())?;
    Ok(Some((view.to_vec::<u8>()?, shape)))
}

fn int8_binary(a: &mut Args<'_>, op: Int8Op) -> Result<IValue> {
    let word = if op == Int8Op::Mul { "mul" } else { "add" };
    let refuse = |check| TensorError::Int8Binary { op: word, check };
    let (x, y) = (a.tensor(0)?, a.tensor(3)?);
    if x.shape() != y.shape() {
        return Err(refuse(Int8BinaryCheck::SameSize).into());
    }
    if x.dtype() != DType::UInt8 || y.dtype() != DType::UInt8 {
        let (left, right) = (x.dtype(), y.dtype());
        return Err(refuse(Int8BinaryCheck::OperandDTypes { left, right }).into());
    }
    let dtype = a.dtype(8)?;
    if !matches!(
        dtype,
        DType::UInt8 | DType::Float32 | DType::BFloat16 | DType::Float16
    ) {
        return Err(refuse(Int8BinaryCheck::OutputDType(dtype)).into());
    }
    let (out_scale, out_zp) = (a.double(6)?, a.int(7)?);
    if dtype != DType::UInt8 && (out_scale != 1.0 || out_zp != 0) {
        return Err(refuse(Int8BinaryCheck::FloatOutputParams {
            dtype,
            scale: fmt_g(out_scale, 6),
            zero_point: out_zp,
        })
        .into());
    }
    let (x_scale, y_scale) = (a.double(1)?, a.double(4)?);
    let p = Params {
        x_scale,
        x_zp: a.int(2)?,
        y_scale,
        y_zp: a.int(5)?,
        out_zp,
        factor: if op == Int8Op::Mul {
            (x_scale * y_scale / out_scale) as f32
        } else {
            (1.0 / out_scale) as f32
        },
    };
    let layout_refused = || {
        unsupported_feature(
            a.op,
            "an operand that is not non-overlapping and dense (PyTorch's kernel reads \
             numel() elements of memory from its first one)",
        )
    };
    let (xm, mem_shape) = memory_order(&x)?.ok_or_else(layout_refused)?;
    let (ym, _) = memory_order(&y)?.ok_or_else(layout_refused)?;
    let vector_end = xm.len() / vector_lanes().max(1) * vector_lanes();
    let values = xm
        .iter()
        .zip(&ym)
        .enumerate()
        .map(|(i, (&xq, &yq))| (i < vector_end, p.value(op, xq, yq, i < vector_end)));
    let out = match dtype {
        DType::UInt8 => {
            let q: Vec<u8> = values.map(|(vec, v)| p.requantize(op, v, vec)).collect();
            Tensor::from_vec(q, &mem_shape)?
        }
        DType::BFloat16 => {
            Tensor::from_vec(values.map(|(vec, v)| to_bf16(v, vec)).collect(), &mem_shape)?
        }
        DType::Float16 => {
            Tensor::from_vec(values.map(|(vec, v)| to_f16(v, vec)).collect(), &mem_shape)?
        }
        _ => Tensor::from_vec(values.map(|(_, v)| v).collect::<Vec<f32>>(), &mem_shape)?,
    };
    // PyTorch's result is `empty_like(self)`: the first operand's layout, filled in memory
    // order
    let out = if x.is_contiguous() {
        out
    } else {
        out.as_strided(x.shape(), x.strides(), 0)?
    };
    Ok(IValue::Tensor(out))
}
