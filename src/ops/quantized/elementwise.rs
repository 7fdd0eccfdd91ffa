//! Elementwise quantized ops (`quantized::add`, `add_relu`, `mul`, `cat`, `add_scalar`,
//! `hardswish`, ...) and the aten ops quantized models apply to quantized tensors (`relu`,
//! `max_pool2d`, `adaptive_avg_pool2d`, `cat`). The aten ones wrap the float kernel
//! registered before: a quantized input takes the quantized path, anything else the kernel
//! that was there.

use super::byte_pool::{max_pool2d_nhwc, max_pool2d_planes, Window2d};
use super::layout::{self, elementwise};
use super::tensors::{dequantize_tensor, quantize_tensor};
use super::{
    arg_qtensor, dequantize_val, dequantize_val_fma, int_values, make_quantized, map_byte_values,
    per_tensor_params, per_tensor_quantized, quantize_u8, quantize_val, tensor_result, unsupported,
    VEC_ELEMS_U8,
};
use crate::ops::kernels::reduce::{cascade_sum, outer_sum_blocked_columns, row_sum_ilp};
use crate::ops::kernels::{
    check_rank, check_size, invalid_argument, shape_mismatch, size_mismatch, wrong_dtype,
};
use crate::ops::linalg::permute;
use crate::ops::{Args, Kernel, Registry};
use crate::tensor::{DType, Quantizer, RankRequirement, Tensor, TensorError};
use crate::values::IValue;
use crate::Result;
use std::sync::OnceLock;

/// aten ops with a quantized path here, each with its wrapping kernel (one per overload, so a
/// call finds its float kernel by index, not by name).
const WRAPPED: [(&str, Kernel); 32] = [
    ("aten::relu", quantized_or_float::<RELU>),
    ("aten::relu_", quantized_or_float::<RELU_>),
    ("aten::max_pool2d", quantized_or_float::<MAX_POOL2D>),
    (
        "aten::adaptive_avg_pool2d",
        quantized_or_float::<ADAPTIVE_AVG_POOL2D>,
    ),
    ("aten::avg_pool2d", quantized_or_float::<AVG_POOL2D>),
    ("aten::hardsigmoid", quantized_or_float::<HARDSIGMOID>),
    ("aten::mean.dim", quantized_or_float::<MEAN_DIM>),
    // FX graph-mode quantization leaves `torch.cat` of quantized tensors as aten::cat
    ("aten::cat", quantized_or_float::<CAT>),
    // the ATen ops with a QuantizedCPU kernel (or a composite one reaching it) that FX
    // graph-mode quantization leaves on quantized tensors
    ("aten::clamp", quantized_or_float::<CLAMP>),
    ("aten::hardtanh", quantized_or_float::<HARDTANH>),
    ("aten::relu6", quantized_or_float::<RELU6>),
    ("aten::sigmoid", quantized_or_float::<SIGMOID>),
    ("aten::tanh", quantized_or_float::<TANH>),
    ("aten::max_pool1d", quantized_or_float::<MAX_POOL1D>),
    ("aten::max_pool3d", quantized_or_float::<MAX_POOL3D>),
    ("aten::avg_pool1d", quantized_or_float::<AVG_POOL1D>),
    (
        "aten::adaptive_avg_pool1d",
        quantized_or_float::<ADAPTIVE_AVG_POOL1D>,
    ),
    ("aten::avg_pool3d", quantized_or_float::<AVG_POOL3D>),
    (
        "aten::adaptive_avg_pool3d",
        quantized_or_float::<ADAPTIVE_AVG_POOL3D>,
    ),
    ("aten::stack", quantized_or_float::<STACK>),
    ("aten::eq.Scalar", quantized_or_float::<{ COMPARISONS }>),
    ("aten::ne.Scalar", quantized_or_float::<{ COMPARISONS + 1 }>),
    ("aten::ge.Scalar", quantized_or_float::<{ COMPARISONS + 2 }>),
    ("aten::le.Scalar", quantized_or_float::<{ COMPARISONS + 3 }>),
    ("aten::gt.Scalar", quantized_or_float::<{ COMPARISONS + 4 }>),
    ("aten::lt.Scalar", quantized_or_float::<{ COMPARISONS + 5 }>),
    ("aten::eq.Tensor", quantized_or_float::<{ COMPARISONS + 6 }>),
    ("aten::ne.Tensor", quantized_or_float::<{ COMPARISONS + 7 }>),
    ("aten::ge.Tensor", quantized_or_float::<{ COMPARISONS + 8 }>),
    ("aten::le.Tensor", quantized_or_float::<{ COMPARISONS + 9 }>),
    (
        "aten::gt.Tensor",
        quantized_or_float::<{ COMPARISONS + 10 }>,
    ),
    (
        "aten::lt.Tensor",
        quantized_or_float::<{ COMPARISONS + 11 }>,
    ),
];
const RELU: usize = 0;
const RELU_: usize = 1;
const MAX_POOL2D: usize = 2;
const ADAPTIVE_AVG_POOL2D: usize = 3;
const AVG_POOL2D: usize = 4;
const HARDSIGMOID: usize = 5;
const MEAN_DIM: usize = 6;
const CAT: usize = 7;
const CLAMP: usize = 8;
const HARDTANH: usize = 9;
const RELU6: usize = 10;
const SIGMOID: usize = 11;
const TANH: usize = 12;
const MAX_POOL1D: usize = 13;
const MAX_POOL3D: usize = 14;
const AVG_POOL1D: usize = 15;
const ADAPTIVE_AVG_POOL1D: usize = 16;
const AVG_POOL3D: usize = 17;
const ADAPTIVE_AVG_POOL3D: usize = 18;
const STACK: usize = 19;
/// The first of the comparisons (`eq ne ge le gt lt`, Scalar then Tensor overloads).
const COMPARISONS: usize = 20;

/// The float kernel each entry of [`WRAPPED`] replaced, by the same index.
static FLOAT_KERNELS: [OnceLock<Kernel>; WRAPPED.len()] =
    [const { OnceLock::new() }; WRAPPED.len()];

/// The code addresses of the float kernels behind the wrappers of [`WRAPPED`] (a plan names
/// only the wrapper): `Module::prepare` maps their pages, which `relu`'s first call otherwise
/// faulted in (13 of the 43 us of the MLP's first call).
pub(crate) fn wrapped_float_kernel_addresses() -> impl Iterator<Item = usize> {
    FLOAT_KERNELS
        .iter()
        .filter_map(|k| k.get().map(|&k| k as *const () as usize))
}

pub fn register(r: &mut Registry) {
    r.add_all(&["quantized::add", "_quantized::add"], |a| {
        elementwise(a, &[0, 1], |a| add(a, false))
    });
    r.add("quantized::add_relu", |a| {
        elementwise(a, &[0, 1], |a| add(a, true))
    });
    r.add("quantized::mul", |a| {
        elementwise(a, &[0, 1], |a| mul(a, false))
    });
    r.add("quantized::mul_relu", |a| {
        elementwise(a, &[0, 1], |a| mul(a, true))
    });
    r.add("quantized::cat", |a| cat(a, false));
    r.add("quantized::cat_relu", |a| cat(a, true));
    r.add_all(&["quantized::add.Scalar", "quantized::add_scalar"], |a| {
        elementwise(a, &[0], |a| add_scalar(a, 0, 1, false))
    });
    r.add_all(
        &["quantized::add_relu.Scalar", "quantized::add_scalar_relu"],
        |a| elementwise(a, &[0], |a| add_scalar(a, 0, 1, true)),
    );
    r.add("quantized::add.Scalar2", |a| add_scalar(a, 1, 0, false));
    r.add("quantized::add_relu.Scalar2", |a| add_scalar(a, 1, 0, true));
    r.add("quantized::add_scalar.Tensor", |a| {
        elementwise(a, &[0], |a| add_scalar(a, 0, 1, false))
    });
    // ATen's `qadd_scalar_tensor<true>` calls `qadd_scalar` without its ReLU flag: PyTorch's
    // result is the plain sum
    r.add("quantized::add_scalar_relu.Tensor", |a| {
        elementwise(a, &[0], |a| add_scalar(a, 0, 1, false))
    });
    r.add_all(&["quantized::mul.Scalar", "quantized::mul_scalar"], |a| {
        elementwise(a, &[0], |a| mul_scalar(a, 0, 1, false))
    });
    r.add_all(
        &["quantized::mul_relu.Scalar", "quantized::mul_scalar_relu"],
        |a| elementwise(a, &[0], |a| mul_scalar(a, 0, 1, true)),
    );
    r.add("quantized::mul.Scalar2", |a| mul_scalar(a, 1, 0, false));
    r.add("quantized::mul_relu.Scalar2", |a| mul_scalar(a, 1, 0, true));
    r.add("quantized::mul_scalar.Tensor", |a| {
        elementwise(a, &[0], |a| mul_scalar(a, 0, 1, false))
    });
    r.add("quantized::mul_scalar_relu.Tensor", |a| {
        elementwise(a, &[0], |a| mul_scalar(a, 0, 1, true))
    });
    r.add("quantized::add_scalar_out.Tensor", add_scalar_out);
    // (the ReLU flag is dropped on this path too: PyTorch writes the plain sum)
    r.add("quantized::add_scalar_relu_out.Tensor", add_scalar_out);
    r.add("quantized::mul_scalar_out.Tensor", |a| {
        mul_scalar_out(a, false)
    });
    r.add("quantized::mul_scalar_relu_out.Tensor", |a| {
        mul_scalar_out(a, true)
    });
    r.add("quantized::matmul", matmul);
    r.add("quantized::softmax", softmax);
    r.add_all(
        &["quantized::max_pool2d", "aten::quantized_max_pool2d"],
        |a| layout::like_first_input(a, qmax_pool2d),
    );
    r.add_all(
        &["quantized::max_pool1d", "aten::quantized_max_pool1d"],
        qmax_pool1d,
    );
    r.add("aten::quantized_max_pool3d", |a| {
        layout::like_first_input(a, qmax_pool3d)
    });
    for (i, (name, kernel)) in WRAPPED.into_iter().enumerate() {
        if let Some(k) = r.lookup(name, "") {
            // the registry is built once per process: a second build finds them set
            let _ = FLOAT_KERNELS[i].set(k);
        }
        r.add(name, kernel);
    }
}

/// The wrapped op `WRAPPED[OP]`: the quantized kernel on a quantized input, else the float
/// kernel registered before.
fn quantized_or_float<const OP: usize>(a: &mut Args<'_>) -> Result<IValue> {
    // the first tensor decides, as ATen's dispatch key of the first argument does
    let quantized = match a.get(0)? {
        IValue::Tensor(t) => t.is_quantized(),
        IValue::List(l) => matches!(l.items().first(), Some(IValue::Tensor(t)) if t.is_quantized()),
        _ => false,
    };
    let float_kernel = || {
        FLOAT_KERNELS[OP]
            .get()
            .copied()
            .ok_or_else(|| crate::Error::UnknownOp(a.op.to_string()))
    };
    if !quantized {
        return float_kernel()?(a);
    }
    if OP >= COMPARISONS {
        return dequantized_comparison(a, float_kernel()?);
    }
    // ATen's QNNPACK clamp (quint8, both bounds) keeps the bytes' memory order
    let qnnpack_clamp = a.ctx.quantized_engine.qnnpack()
        && matches!(a.get(0)?, IValue::Tensor(t) if t.dtype() == DType::QUInt8);
    match OP {
        RELU => elementwise(a, &[0], |a| qrelu(a, false)),
        RELU_ => elementwise(a, &[0], |a| qrelu(a, true)),
        MAX_POOL2D => layout::like_first_input(a, qmax_pool2d),
        ADAPTIVE_AVG_POOL2D => qadaptive_avg_pool2d(a),
        AVG_POOL2D => qavg_pool2d(a),
        HARDSIGMOID => elementwise(a, &[0], qhardsigmoid),
        CAT => qcat_aten(a),
        // `clamp_quantized_cpu` / `hardtanh_quantized_cpu`: `qclamp` of the bounds; `relu6`
        // is ATen's composite `hardtanh(0, 6)`
        CLAMP | HARDTANH => super::activation::clamp_in_layout(a),
        RELU6 if qnnpack_clamp => layout::qnnpack_clamp(a, super::activation::relu6_aten),
        RELU6 => elementwise(a, &[0], super::activation::relu6_aten),
        SIGMOID => elementwise(a, &[0], super::activation::sigmoid_fixed_qparams),
        TANH => elementwise(a, &[0], super::activation::tanh_fixed_qparams),
        // ATen's composite max_pool1d / max_pool3d call quantized_max_pool{1,3}d on a
        // quantized input (same arguments)
        MAX_POOL1D => qmax_pool1d(a),
        MAX_POOL3D => layout::like_first_input(a, qmax_pool3d),
        AVG_POOL1D => qavg_pool1d(a),
        ADAPTIVE_AVG_POOL1D => qadaptive_avg_pool1d(a),
        AVG_POOL3D => qavg_pool(a, 3),
        ADAPTIVE_AVG_POOL3D => qadaptive_avg_pool(a, 3),
        STACK => qstack(a),
        _ => qmean_dim(a),
    }
}

/// ATen's quantized comparisons (`DEFINE_COMPARATOR`, `gt_quantized_cpu`, ...): the float
/// comparison of the dequantized operands (a float `other` is used as it is), a bool tensor.
fn dequantized_comparison(a: &mut Args<'_>, float_kernel: Kernel) -> Result<IValue> {
    let x = a.tensor(0)?;
    let mut args = vec![IValue::Tensor(dequantize_tensor(&x)?), a.get(1)?.clone()];
    if let IValue::Tensor(other) = &args[1] {
        if other.is_quantized() {
            args[1] = IValue::Tensor(dequantize_tensor(other)?);
        }
    }
    float_kernel(&mut Args::new(a.op, &mut args, a.ctx))
}

/// Quantized `x` with its integers (row-major) read in `shape` (same element count).
fn reshaped(op: &str, x: &Tensor, shape: &[usize]) -> Result<Tensor> {
    let q = x
        .quantizer()
        .map(|q| (**q).clone())
        .ok_or_else(|| wrong_dtype(op, "input", "quantized", x.dtype()))?;
    make_quantized(&int_values(x)?, shape, x.dtype(), q)
}

/// The 1-d pooling composites as ATen writes them: the input unsqueezed at -2, the 2-d
/// quantized kernel with a height-1 window, the result squeezed at -2.
fn pool1d_via_2d(
    a: &mut Args<'_>,
    kernel: fn(&mut Args<'_>) -> Result<IValue>,
    mut args: Vec<IValue>,
) -> Result<IValue> {
    let x = arg_qtensor(a, 0)?;
    let (mut shape, mut strides) = (x.shape().to_vec(), x.strides().to_vec());
    check_rank(a.op, "input", RankRequirement::AtLeast(2), &shape)?;
    // `unsqueeze(-2)` and `squeeze(-2)` are views: a channels-last 1-d input (a conv1d's
    // output) reaches the 2-d kernel channels-last
    let last = shape.len() - 1;
    strides.insert(last, strides[last] * shape[last] as isize);
    shape.insert(last, 1);
    args.insert(
        0,
        IValue::Tensor(x.as_strided(&shape, &strides, x.storage_offset())?),
    );
    let y = match kernel(&mut Args::new(a.op, &mut args, a.ctx))? {
        IValue::Tensor(t) => t,
        _ => return Err(unsupported(a.op, "the 2-d pooling returned a non-tensor")),
    };
    let (mut out, mut out_strides) = (y.shape().to_vec(), y.strides().to_vec());
    out.remove(out.len() - 2);
    out_strides.remove(out_strides.len() - 2);
    tensor_result(y.as_strided(&out, &out_strides, y.storage_offset())?)
}

fn int_list(v: Vec<i64>) -> IValue {
    IValue::List(crate::values::List::new(
        crate::values::types::Type::Int,
        v.into_iter().map(IValue::Int).collect(),
    ))
}

/// One value of a 1-d pooling argument (`int[1]`), `default` when empty.
fn single(a: &Args<'_>, i: usize, what: &str, default: i64) -> Result<i64> {
    match a.int_list(i)?.as_slice() {
        [] => Ok(default),
        [v] => Ok(*v),
        v => Err(invalid_argument(
            a.op,
            format!("the length of {what}"),
            "must be 1",
            v.len(),
        )),
    }
}

/// ATen's `avg_pool1d(self, kernel_size, stride, padding, ceil_mode, count_include_pad)`.
fn qavg_pool1d(a: &mut Args<'_>) -> Result<IValue> {
    let k = single(a, 1, "kernel_size", 0)?;
    let s = single(a, 2, "stride", k)?;
    let p = single(a, 3, "padding", 0)?;
    let args = vec![
        int_list(vec![1, k]),
        int_list(vec![1, s]),
        int_list(vec![0, p]),
        IValue::Bool(a.bool(4)?),
        IValue::Bool(a.bool(5)?),
        IValue::None,
    ];
    pool1d_via_2d(a, qavg_pool2d_by_layout, args)
}

/// ATen's `adaptive_avg_pool1d(self, output_size)`.
fn qadaptive_avg_pool1d(a: &mut Args<'_>) -> Result<IValue> {
    let o = single(a, 1, "output_size", 0)?;
    pool1d_via_2d(
        a,
        |a| qadaptive_avg_pool2d_in(a, true),
        vec![int_list(vec![1, o])],
    )
}

fn same_params_as(x: &Tensor, vals: &[i32], shape: &[usize]) -> Result<Tensor> {
    let q = x
        .quantizer()
        .map(|q| (**q).clone())
        .ok_or_else(|| wrong_dtype("quantized op", "input", "quantized", x.dtype()))?;
    make_quantized(vals, shape, x.dtype(), q)
}

/// `qrelu`: `max(q, zero_point)` on the integers, parameters kept.
fn qrelu(a: &mut Args<'_>, inplace: bool) -> Result<IValue> {
    let x = arg_qtensor(a, 0)?;
    let (_, zp) = per_tensor_params(a.op, &x)?;
    let vals: Vec<i32> = int_values(&x)?.iter().map(|&v| v.max(zp as i32)).collect();
    let out = same_params_as(&x, &vals, x.shape())?;
    if inplace {
        x.int_repr_view()?.copy_from(&out.int_repr_view()?)?;
        return tensor_result(x);
    }
    tensor_result(out)
}

/// ATen's `qadd_kernel`: both inputs dequantized (FMA in the vectorized body, the scalar
/// formula in the tail past the last full pair of vectors), added, requantized.
/// `qadd_kernel` runs as ATen's AVX2 build even on AVX512 machines (PyTorch registers it
/// without an AVX512 variant): vector steps of `2 * 32` one-byte elements, measured against
/// PyTorch (tensors of 120 elements: the first 64 take the FMA dequantize, the rest the scalar
/// one).
const QADD_VEC_ELEMS_U8: usize = 32;

fn add(a: &mut Args<'_>, relu: bool) -> Result<IValue> {
    let x = arg_qtensor(a, 0)?;
    let y = arg_qtensor(a, 1)?;
    if x.dtype() != y.dtype() {
        return Err(TensorError::DTypeMismatch {
            expected: x.dtype(),
            got: y.dtype(),
        }
        .into());
    }
    let (scale, zp) = (a.double(2)?, a.int(3)?);
    // ATen's qadd takes QNNPACK's kernel for quint8 operands under that engine, which wants
    // equal shapes ("Add operands must be the same size!")
    if a.ctx.quantized_engine.qnnpack() && x.dtype() == DType::QUInt8 {
        if x.shape() != y.shape() {
            return Err(shape_mismatch(a.op, "other", x.shape(), y.shape()));
        }
        return tensor_result(super::qnnpack::add(a.op, &x, &y, scale, zp, relu)?);
    }
    // Otherwise its TensorIterator broadcasts `other` to the shape of the output, which has
    // `self`'s sizes (a layer scale, an attention bias, a batch-1 position embedding)
    if crate::tensor::broadcast_shapes(x.shape(), y.shape())?.as_slice() != x.shape() {
        return Err(shape_mismatch(a.op, "other", x.shape(), y.shape()));
    }
    let row = broadcast_inner_len(x.shape(), y.shape());
    let (xs, xz) = per_tensor_params(a.op, &x)?;
    let (ys, yz) = per_tensor_params(a.op, &y)?;
    let range = x
        .dtype()
        .quantized_range()
        .ok_or_else(|| wrong_dtype(a.op, "input", "quantized", x.dtype()))?;
    let (xs, ys) = (xs as f32, ys as f32);
    let (xpre, ypre) = (xs * -(xz as f32), ys * -(yz as f32));
    let inv = 1.0f32 / scale as f32;
    if x.dtype() == DType::QUInt8 && (0..=255).contains(&zp) {
        let params = AddQuint8 {
            x: (xs, xpre, xz),
            y: (ys, ypre, yz),
            inv,
            zp: zp as i32,
            relu,
        };
        let yi = crate::ops::shape::expand_to(&y.int_repr_view()?, x.shape())?.contiguous()?;
        let xi = x.int_repr_view()?.contiguous()?;
        let (xr, yr) = (xi.read::<u8>()?, yi.read::<u8>()?);
        let (xb, yb) = (xr.as_slice().unwrap_or(&[]), yr.as_slice().unwrap_or(&[]));
        if xb.len() == x.numel() && yb.len() == xb.len() {
            let out = params.run(xb, yb, row);
            let ints = Tensor::from_vec(out, x.shape())?;
            return tensor_result(Tensor::quantized_from_ints(
                &ints,
                Quantizer::PerTensorAffine {
                    scale,
                    zero_point: zp,
                },
            )?);
        }
    }
    let xv = int_values(&x)?;
    let yv = broadcast_int_values(&y, x.shape())?;
    let vec_end = row / (2 * QADD_VEC_ELEMS_U8) * (2 * QADD_VEC_ELEMS_U8);
    let vals: Vec<i32> = xv
        .iter()
        .zip(&yv)
        .enumerate()
        .map(|(i, (&p, &q))| {
            let (da, db) = if i % row.max(1) < vec_end {
                (
                    dequantize_val_fma(p, xs, xpre),
                    dequantize_val_fma(q, ys, ypre),
                )
            } else {
                (dequantize_val(p, xs, xz), dequantize_val(q, ys, yz))
            };
            let mut c = da + db;
            if relu {
                c = c.max(0.0);
            }
            quantize_val(c, inv, zp, range)
        })
        .collect();
    tensor_result(per_tensor_quantized(
        &vals,
        x.shape(),
        x.dtype(),
        scale,
        zp,
    )?)
}

/// `quantized::add` of two quint8 tensors into quint8: the generic path's arithmetic (ATen's
/// AVX-512 body: one FMA per dequantized value, over whole vector steps; the scalar formula
/// for the tail) on the bytes in place, compiled for AVX2 + FMA where the CPU has them so the
/// loop vectorizes.
struct AddQuint8 {
    /// scale, `scale * -zero_point`, zero point
    x: (f32, f32, i64),
    y: (f32, f32, i64),
    inv: f32,
    zp: i32,
    relu: bool,
}

impl AddQuint8 {
    /// `x + y` (equal lengths) in rows of `row` elements, each with its own vector body and
    /// scalar tail as ATen's inner loop.
    fn run(&self, x: &[u8], y: &[u8], row: usize) -> Vec<u8> {
        let mut out = vec![0u8; x.len()];
        let row = row.max(1);
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU has the features the function is compiled for.
            unsafe { self.fill_rows_avx512(x, y, &mut out, row) };
            return out;
        }
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has the features the function is compiled for.
            unsafe { self.fill_rows_fma(x, y, &mut out, row) };
            return out;
        }
        self.fill_rows(x, y, &mut out, row);
        out
    }

    /// [`Self::fill_rows`] with the vector body in explicit AVX-512 steps of 16 lanes (the
    /// compiler leaves the saturating float-to-byte steps of the plain loop scalar): the same
    /// FMA dequantization, sum, ReLU, round-half-even quantization and clamp, lane by lane as
    /// [`quantize_u8`] (a NaN lane gives the zero point).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,fma")]
    unsafe fn fill_rows_avx512(&self, x: &[u8], y: &[u8], out: &mut [u8], row: usize) {
        use std::arch::x86_64::*;
        let ((xs, xpre, _), (ys, ypre, _)) = (self.x, self.y);
        let (xs, xpre) = (_mm512_set1_ps(xs), _mm512_set1_ps(xpre));
        let (ys, ypre) = (_mm512_set1_ps(ys), _mm512_set1_ps(ypre));
        let (inv, zpf) = (_mm512_set1_ps(self.inv), _mm512_set1_ps(self.zp as f32));
        let (zero, top) = (_mm512_setzero_ps(), _mm512_set1_ps(255.0));
        let nan_byte = _mm512_set1_epi32(self.zp.clamp(0, 255));
        let lanes = |p: &[u8], at: usize| {
            // SAFETY: callers pass `at + 16 <= p.len()`; the load is unaligned.
            let bytes = unsafe { _mm_loadu_si128(p.as_ptr().add(at).cast()) };
            _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(bytes))
        };
        for ((o, p), q) in out.chunks_mut(row).zip(x.chunks(row)).zip(y.chunks(row)) {
            let n = o.len().min(p.len()).min(q.len());
            let vec_end = n / (2 * QADD_VEC_ELEMS_U8) * (2 * QADD_VEC_ELEMS_U8);
            for at in (0..vec_end).step_by(16) {
                let mut c = _mm512_add_ps(
                    _mm512_fmadd_ps(xs, lanes(p, at), xpre),
                    _mm512_fmadd_ps(ys, lanes(q, at), ypre),
                );
                if self.relu {
                    // (`f32::max` too gives 0 for a NaN sum)
                    c = _mm512_max_ps(c, zero);
                }
                let r = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                    _mm512_mul_ps(c, inv),
                );
                let t = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(r, zpf), zero), top);
                let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(r, r);
                let q8 = _mm512_mask_blend_epi32(nan, _mm512_cvttps_epi32(t), nan_byte);
                // SAFETY: `at + 16 <= vec_end <= o.len()`; the store is unaligned.
                unsafe {
                    _mm_storeu_si128(o.as_mut_ptr().add(at).cast(), _mm512_cvtepi32_epi8(q8))
                };
            }
            self.fill_tail(&p[vec_end..n], &q[vec_end..n], &mut o[vec_end..n]);
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn fill_rows_fma(&self, x: &[u8], y: &[u8], out: &mut [u8], row: usize) {
        self.fill_rows(x, y, out, row);
    }

    #[inline(always)]
    fn fill_rows(&self, x: &[u8], y: &[u8], out: &mut [u8], row: usize) {
        for ((o, p), q) in out.chunks_mut(row).zip(x.chunks(row)).zip(y.chunks(row)) {
            self.fill(p, q, o);
        }
    }

    #[inline(always)]
    fn fill(&self, x: &[u8], y: &[u8], out: &mut [u8]) {
        let vec_end = x.len() / (2 * QADD_VEC_ELEMS_U8) * (2 * QADD_VEC_ELEMS_U8);
        let ((xs, xpre, _), (ys, ypre, _)) = (self.x, self.y);
        let finish = |c: f32| {
            let c = if self.relu { c.max(0.0) } else { c };
            quantize_u8(c, self.inv, self.zp)
        };
        for ((o, &p), &q) in out[..vec_end]
            .iter_mut()
            .zip(&x[..vec_end])
            .zip(&y[..vec_end])
        {
            let c = dequantize_val_fma(i32::from(p), xs, xpre)
                + dequantize_val_fma(i32::from(q), ys, ypre);
            *o = finish(c);
        }
        self.fill_tail(&x[vec_end..], &y[vec_end..], &mut out[vec_end..]);
    }

    /// The scalar formula ATen's loop uses after its last whole pair of vectors.
    #[inline(always)]
    fn fill_tail(&self, x: &[u8], y: &[u8], out: &mut [u8]) {
        let ((xs, _, xz), (ys, _, yz)) = (self.x, self.y);
        for ((o, &p), &q) in out.iter_mut().zip(x).zip(y) {
            let c = dequantize_val(i32::from(p), xs, xz) + dequantize_val(i32::from(q), ys, yz);
            let c = if self.relu { c.max(0.0) } else { c };
            *o = quantize_u8(c, self.inv, self.zp);
        }
    }
}

/// The length of the inner loop ATen's TensorIterator runs when `y` (taken as contiguous) is
/// broadcast to the contiguous `shape`: the innermost dimensions of more than one element,
/// coalesced while `y`'s broadcast strides stay in step (`stride[outer] == stride[inner] *
/// size[inner]`). Each such row has its own vector body and scalar tail.
fn broadcast_inner_len(shape: &[usize], y_shape: &[usize]) -> usize {
    let lead = shape.len() - y_shape.len().min(shape.len());
    let mut y_strides = vec![0usize; shape.len()];
    let mut next = 1;
    for d in (lead..shape.len()).rev() {
        let size = y_shape[d - lead];
        if size == shape[d] && size != 1 {
            y_strides[d] = next;
            next *= size;
        }
    }
    let mut dims = (0..shape.len()).rev().filter(|&d| shape[d] != 1);
    let Some(inner) = dims.next() else {
        return 1;
    };
    let (mut len, block_stride) = (shape[inner], y_strides[inner]);
    for d in dims {
        if y_strides[d] != block_stride * len {
            break;
        }
        len *= shape[d];
    }
    len
}

/// The integers of quantized `t` broadcast to `shape` (row-major).
fn broadcast_int_values(t: &Tensor, shape: &[usize]) -> Result<Vec<i32>> {
    if t.shape() == shape {
        return int_values(t);
    }
    let ints = t.int_repr_view()?;
    let lead = shape.len() - t.dim();
    let strides: Vec<isize> = (0..shape.len())
        .map(|d| match d.checked_sub(lead) {
            Some(i) if t.shape()[i] == shape[d] => ints.strides()[i],
            _ => 0,
        })
        .collect();
    ints.as_strided(shape, &strides, ints.storage_offset())?
        .to_vec::<i32>()
}

/// ATen's `qmul_kernel`: the integer product requantized with `xs * ys / scale`, with
/// broadcasting (the squeeze-excitation scale of mobilenet_v3 is `[N, C, 1, 1]`).
fn mul(a: &mut Args<'_>, relu: bool) -> Result<IValue> {
    let x = arg_qtensor(a, 0)?;
    let y = arg_qtensor(a, 1)?;
    if x.dtype() != y.dtype() {
        return Err(TensorError::DTypeMismatch {
            expected: x.dtype(),
            got: y.dtype(),
        }
        .into());
    }
    let shape = crate::tensor::broadcast_shapes(x.shape(), y.shape())?.to_vec();
    let (scale, zp) = (a.double(2)?, a.int(3)?);
    let (xs, xz) = per_tensor_params(a.op, &x)?;
    let (ys, yz) = per_tensor_params(a.op, &y)?;
    let range = x
        .dtype()
        .quantized_range()
        .ok_or_else(|| wrong_dtype(a.op, "input", "quantized", x.dtype()))?;
    let multiplier = xs as f32 * ys as f32 * (1.0f32 / scale as f32);
    if let Some(params) = MulQuint8::new(&x, &y, (xz, yz, zp), multiplier, relu) {
        if let Some(out) = params.run(&x, &y, &shape)? {
            return tensor_result(Tensor::quantized_from_ints(
                &Tensor::from_vec(out, &shape)?,
                Quantizer::PerTensorAffine {
                    scale,
                    zero_point: zp,
                },
            )?);
        }
    }
    let xv = broadcast_int_values(&x, &shape)?;
    let yv = broadcast_int_values(&y, &shape)?;
    let vals: Vec<i32> = xv
        .iter()
        .zip(&yv)
        .map(|(&p, &q)| {
            let c = (p - xz as i32) * (q - yz as i32);
            let r = zp + (c as f32 * multiplier).round_ties_even() as i64;
            let r = r.clamp(range.0, range.1);
            if relu {
                r.max(zp) as i32
            } else {
                r as i32
            }
        })
        .collect();
    tensor_result(per_tensor_quantized(&vals, &shape, x.dtype(), scale, zp)?)
}

/// Products whose magnitude times the multiplier stays below this round inside i32.
const MUL_EXACT_BOUND: f32 = (1u32 << 30) as f32;

/// `quantized::mul` of two quint8 tensors on their bytes: the generic path's arithmetic, for
/// zero points in 0..=255 and a multiplier that keeps every rounded product `|c * m| <= 255 *
/// 255 * m` far inside i32 (so the i64 steps of the generic path change nothing), compiled
/// for AVX2 where the CPU has it so the loops vectorize.
struct MulQuint8 {
    xz: i32,
    yz: i32,
    multiplier: f32,
    zp: i32,
    /// The lowest output: the zero point with ReLU (`max(r, zp)`), else 0.
    floor: i32,
}

/// How a quint8 operand covers the broadcast output: every element, or one value per row of
/// `plane` elements (the squeeze-excitation scale `[N, C, 1, 1]` of `[N, C, H, W]`).
#[derive(Clone, Copy, PartialEq)]
enum Cover {
    Full,
    Rows(usize),
}

fn cover(operand: &[usize], out: &[usize]) -> Option<Cover> {
    let lead = out.len().checked_sub(operand.len())?;
    let padded = |d: usize| d.checked_sub(lead).map_or(1, |i| operand[i]);
    let k = (0..out.len())
        .find(|&d| padded(d) != out[d])
        .unwrap_or(out.len());
    if k == out.len() {
        return Some(Cover::Full);
    }
    (k..out.len())
        .all(|d| padded(d) == 1)
        .then(|| Cover::Rows(out[k..].iter().product()))
}

impl MulQuint8 {
    fn new(
        x: &Tensor,
        y: &Tensor,
        (xz, yz, zp): (i64, i64, i64),
        multiplier: f32,
        relu: bool,
    ) -> Option<MulQuint8> {
        let byte = |z: i64| u8::try_from(z).ok().map(i32::from);
        let (xz, yz, zp) = (byte(xz)?, byte(yz)?, byte(zp)?);
        let widest = 255.0 * 255.0 * multiplier.abs();
        if x.dtype() != DType::QUInt8 || y.dtype() != DType::QUInt8 || !(widest < MUL_EXACT_BOUND) {
            return None;
        }
        Some(MulQuint8 {
            xz,
            yz,
            multiplier,
            zp,
            floor: if relu { zp } else { 0 },
        })
    }

    /// The output bytes over `shape`, or `None` for a broadcast other than [`Cover`]'s.
    fn run(&self, x: &Tensor, y: &Tensor, shape: &[usize]) -> Result<Option<Vec<u8>>> {
        let (Some(cx), Some(cy)) = (cover(x.shape(), shape), cover(y.shape(), shape)) else {
            return Ok(None);
        };
        let (xi, yi) = (
            x.int_repr_view()?.contiguous()?,
            y.int_repr_view()?.contiguous()?,
        );
        let (xr, yr) = (xi.read::<u8>()?, yi.read::<u8>()?);
        let (xb, yb) = (xr.as_slice().unwrap_or(&[]), yr.as_slice().unwrap_or(&[]));
        let numel: usize = shape.iter().product();
        let mut out = vec![0u8; numel];
        // the integer product is symmetric: the broadcast operand is the per-row factor
        let (full, full_zp, rows, rows_zp, plane) = match (cx, cy) {
            (Cover::Full, Cover::Full) if xb.len() == numel && yb.len() == numel => {
                self.dispatch(|m| m.fill_same(xb, yb, &mut out));
                return Ok(Some(out));
            }
            (Cover::Full, Cover::Rows(plane)) => (xb, self.xz, yb, self.yz, plane),
            (Cover::Rows(plane), Cover::Full) => (yb, self.yz, xb, self.xz, plane),
            _ => return Ok(None),
        };
        if plane == 0 || full.len() != numel || rows.len() * plane != numel {
            return Ok(None);
        }
        self.dispatch(|m| m.fill_rows(full, full_zp, rows, rows_zp, plane, &mut out));
        Ok(Some(out))
    }

    /// `fill` compiled for AVX2 where the CPU has it.
    fn dispatch(&self, fill: impl FnOnce(&MulQuint8)) {
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has the feature the function is compiled for.
            unsafe { self.with_avx2(fill) };
            return;
        }
        fill(self);
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn with_avx2(&self, fill: impl FnOnce(&MulQuint8)) {
        fill(self);
    }

    /// The requantized byte of the integer product `c`.
    #[inline(always)]
    fn finish(&self, c: i32) -> u8 {
        let r = super::round_ties_even(c as f32 * self.multiplier) as i32;
        (r + self.zp).clamp(self.floor, 255) as u8
    }

    #[inline(always)]
    fn fill_same(&self, x: &[u8], y: &[u8], out: &mut [u8]) {
        for ((o, &p), &q) in out.iter_mut().zip(x).zip(y) {
            *o = self.finish((i32::from(p) - self.xz) * (i32::from(q) - self.yz));
        }
    }

    #[inline(always)]
    fn fill_rows(
        &self,
        full: &[u8],
        full_zp: i32,
        rows: &[u8],
        rows_zp: i32,
        plane: usize,
        out: &mut [u8],
    ) {
        for ((dst, src), &k) in out.chunks_mut(plane).zip(full.chunks(plane)).zip(rows) {
            let k = i32::from(k) - rows_zp;
            for (o, &p) in dst.iter_mut().zip(src) {
                *o = self.finish((i32::from(p) - full_zp) * k);
            }
        }
    }
}

/// `quantized::cat`: dequantize, concatenate, quantize (with the first input's parameters
/// when none are given).
fn cat(a: &mut Args<'_>, relu: bool) -> Result<IValue> {
    let xs = a.tensor_list(0)?;
    let first = xs
        .first()
        .ok_or_else(|| size_mismatch(a.op, "the number of tensors (at least)", 1, 0))?;
    let (s0, z0) = per_tensor_params(a.op, first)?;
    let dim = a.int(1)?;
    let scale = a.opt_double(2)?.unwrap_or(s0);
    let zp = a.opt_int(3)?.unwrap_or(z0);
    cat_requantized(a, &xs, dim, scale, zp, relu)
}

/// `aten::cat` of quantized tensors (ATen's `cat_quantized_cpu`): per-tensor inputs of one
/// dtype, joined and requantized with the first input's scale and zero point.
fn qcat_aten(a: &mut Args<'_>) -> Result<IValue> {
    let xs = a.tensor_list(0)?;
    let first = xs
        .first()
        .ok_or_else(|| size_mismatch(a.op, "the number of tensors (at least)", 1, 0))?;
    let (scale, zp) = per_tensor_params(a.op, first)?;
    for x in &xs {
        if x.dtype() != first.dtype() {
            return Err(TensorError::DTypeMismatch {
                expected: first.dtype(),
                got: x.dtype(),
            }
            .into());
        }
    }
    let dim = a.int(1)?;
    cat_requantized(a, &xs, dim, scale, zp, false)
}

/// Dequantize `xs`, concatenate along `dim` (optionally ReLU), quantize with `scale`, `zp`.
/// Inputs that are all channels-last give a channels-last result, as ATen's `qcat` (its
/// NHWC kernel) does: they are joined in memory order.
fn cat_requantized(
    a: &Args<'_>,
    xs: &[Tensor],
    dim: i64,
    scale: f64,
    zp: i64,
    relu: bool,
) -> Result<IValue> {
    let rank = xs.first().map_or(0, Tensor::dim);
    let orders: Option<(&[usize], &[usize])> = match rank {
        4 => Some((&[0, 2, 3, 1], &[0, 3, 1, 2])),
        5 => Some((&[0, 2, 3, 4, 1], &[0, 4, 1, 2, 3])),
        _ => None,
    };
    let all_channels_last = xs
        .iter()
        .all(|x| x.dim() == rank && layout::suggests_channels_last(x));
    let wrapped = if dim < 0 { dim + rank as i64 } else { dim };
    if let (Some((to, back)), true) = (orders, all_channels_last) {
        if let Some(at) = to.iter().position(|&d| d as i64 == wrapped) {
            let permuted = xs
                .iter()
                .map(|x| permute(x, to))
                .collect::<Result<Vec<_>>>()?;
            let out = cat_rows(a, &permuted, at as i64, scale, zp, relu)?;
            return tensor_result(permute(&out, back)?);
        }
    }
    tensor_result(cat_rows(a, xs, dim, scale, zp, relu)?)
}

/// [`cat_requantized`] in row-major order, into a contiguous tensor.
fn cat_rows(
    a: &Args<'_>,
    xs: &[Tensor],
    dim: i64,
    scale: f64,
    zp: i64,
    relu: bool,
) -> Result<Tensor> {
    let dtype = xs
        .first()
        .ok_or_else(|| size_mismatch(a.op, "the number of tensors (at least)", 1, 0))?
        .dtype();
    if let Some(out) = cat_bytes(xs, dim, (scale, zp), relu)? {
        return Ok(out);
    }
    let floats = xs
        .iter()
        .map(dequantize_tensor)
        .collect::<Result<Vec<_>>>()?;
    let joined = crate::ops::shape::cat(&floats, dim)?;
    let joined = if relu {
        let v: Vec<f32> = joined
            .to_vec::<f32>()?
            .iter()
            .map(|&x| x.max(0.0))
            .collect();
        Tensor::from_vec(v, joined.shape())?
    } else {
        joined
    };
    quantize_tensor(&joined.contiguous()?, scale, zp, dtype)
}

/// [`cat_rows`] of 8-bit per-tensor inputs of one dtype, on the bytes: each input's bytes map
/// through its requantization table (a copy where the table is the identity: same scale and
/// zero point, no ReLU) straight into their place in the output. `None` (the float route)
/// for other inputs, and for shapes that do not join (whose errors that route reports).
fn cat_bytes(
    xs: &[Tensor],
    dim: i64,
    out_qparams: (f64, i64),
    relu: bool,
) -> Result<Option<Tensor>> {
    let Some(first) = xs.first() else {
        return Ok(None);
    };
    let (dtype, rank) = (first.dtype(), first.dim());
    let wrapped = if dim < 0 { dim + rank as i64 } else { dim };
    if rank == 0 || !(0..rank as i64).contains(&wrapped) {
        return Ok(None);
    }
    let at = wrapped as usize;
    let mut out_shape = first.shape().to_vec();
    out_shape[at] = 0;
    let mut tables = Vec::with_capacity(xs.len());
    for x in xs {
        let joins = x.dtype() == dtype
            && x.dim() == rank
            && (0..rank).all(|d| d == at || x.shape()[d] == first.shape()[d]);
        let table = x
            .quantizer()
            .and_then(|q| super::tensors::requantize_byte_table(dtype, q, out_qparams, relu));
        let (true, Some(table)) = (joins, table) else {
            return Ok(None);
        };
        out_shape[at] += x.shape()[at];
        let identity = table.iter().enumerate().all(|(i, &b)| usize::from(b) == i);
        tables.push((!identity).then_some(table));
    }
    let outer: usize = out_shape[..at].iter().product();
    let out_inner: usize = out_shape[at..].iter().product();
    let mut out = vec![0u8; outer * out_inner];
    let mut offset = 0;
    for (x, table) in xs.iter().zip(&tables) {
        let ints = x.int_repr_view()?.contiguous()?;
        let inner: usize = x.shape()[at..].iter().product();
        let fill = |src: &[u8], out: &mut [u8]| {
            for (o, row) in src.chunks_exact(inner.max(1)).enumerate().take(outer) {
                let dst = &mut out[o * out_inner + offset..o * out_inner + offset + inner];
                match table {
                    None => dst.copy_from_slice(row),
                    Some(t) => {
                        for (d, &b) in dst.iter_mut().zip(row) {
                            *d = t[usize::from(b)];
                        }
                    }
                }
            }
        };
        match dtype {
            DType::QUInt8 => fill(ints.read::<u8>()?.as_slice().unwrap_or(&[]), &mut out),
            _ => fill(
                bytemuck::cast_slice(ints.read::<i8>()?.as_slice().unwrap_or(&[])),
                &mut out,
            ),
        }
        offset += inner;
    }
    let ints = match dtype {
        DType::QUInt8 => Tensor::from_vec(out, &out_shape)?,
        _ => Tensor::from_vec(
            out.into_iter().map(|b| b as i8).collect::<Vec<i8>>(),
            &out_shape,
        )?,
    };
    let (scale, zero_point) = out_qparams;
    Ok(Some(Tensor::quantized_from_ints(
        &ints,
        Quantizer::PerTensorAffine { scale, zero_point },
    )?))
}

/// The float kernel `name` (an exact overload) called on `args`, its tensor result.
fn float_kernel(a: &Args<'_>, name: &str, mut args: Vec<IValue>) -> Result<Tensor> {
    let (op, overload) = name.split_once('.').unwrap_or((name, ""));
    let kernel = crate::ops::Registry::global()
        .lookup(op, overload)
        .ok_or_else(|| crate::Error::UnknownOp(name.into()))?;
    match kernel(&mut Args::new(name, &mut args, a.ctx))? {
        IValue::Tensor(t) => Ok(t),
        _ => Err(unsupported(a.op, format!("{name} returned a non-tensor"))),
    }
}

/// `quantized::matmul` (ATen's `qmatmul` without ruy): both inputs dequantized, the float
/// matmul, quantized into (`scale`, `zero_point`) as the first input's dtype.
fn matmul(a: &mut Args<'_>) -> Result<IValue> {
    let x = arg_qtensor(a, 0)?;
    let y = arg_qtensor(a, 1)?;
    per_tensor_params(a.op, &x)?;
    per_tensor_params(a.op, &y)?;
    if x.dtype() != y.dtype() {
        return Err(TensorError::DTypeMismatch {
            expected: x.dtype(),
            got: y.dtype(),
        }
        .into());
    }
    let (scale, zp) = (a.double(2)?, a.int(3)?);
    let args = vec![
        IValue::Tensor(dequantize_tensor(&x)?),
        IValue::Tensor(dequantize_tensor(&y)?),
    ];
    let prod = float_kernel(a, "aten::matmul", args)?;
    tensor_result(quantize_tensor(&prod, scale, zp, x.dtype())?)
}

/// `quantized::softmax` (ATen's `qsoftmax` without QNNPACK): dequantize, the float softmax
/// over `dim`, quantize into (`output_scale`, `output_zero_point`).
fn softmax(a: &mut Args<'_>) -> Result<IValue> {
    let x = arg_qtensor(a, 0)?;
    per_tensor_params(a.op, &x)?;
    let dim = a.int(1)?;
    let (scale, zp) = (a.double(2)?, a.int(3)?);
    let args = vec![
        IValue::Tensor(dequantize_tensor(&x)?),
        IValue::Int(dim),
        IValue::None,
    ];
    let y = float_kernel(a, "aten::softmax.int", args)?;
    tensor_result(quantize_tensor(&y, scale, zp, x.dtype())?)
}

/// The scalar operand of the scalar add/mul overloads: argument `i`, a number or (the
/// `.Tensor` overloads traced code calls) a one-element tensor.
fn scalar_operand(a: &Args<'_>, i: usize) -> Result<f64> {
    match a.get(i)? {
        IValue::Tensor(t) => {
            check_size(
                a.op,
                "the number of elements of the scalar tensor",
                1,
                t.numel() as i64,
            )?;
            Ok(t.to_vec::<f64>()?[0])
        }
        _ => Ok(a.scalar(i)?.to_f64()),
    }
}

/// ATen's `_add_scalar_out` (`quantized::add.Scalar` and friends; the qtensor is argument
/// `xi`, the scalar `bi`): with `c_q = round(b / scale)`, the integers stay and the zero point
/// becomes `z - c_q` while that is in range; otherwise the output takes the range's end as zero
/// point and a widened scale, and `qadd_scalar_kernel` requantizes `q - z + c_q` into it.
fn add_scalar(a: &mut Args<'_>, xi: usize, bi: usize, relu: bool) -> Result<IValue> {
    let x = arg_qtensor(a, xi)?;
    let (s, z) = per_tensor_params(a.op, &x)?;
    let c = scalar_operand(a, bi)?;
    let (qmin, qmax) = x
        .dtype()
        .quantized_range()
        .ok_or_else(|| wrong_dtype(a.op, "input", "quantized", x.dtype()))?;
    let c_q = (c / s).round_ties_even() as i64;
    let shifted = z - c_q;
    let xv = int_values(&x)?;
    let (scale, zp, vals) = if qmin <= shifted && shifted <= qmax {
        let vals: Vec<i32> = if relu {
            xv.iter().map(|&v| v.max(shifted as i32)).collect()
        } else {
            xv
        };
        (s, shifted, vals)
    } else {
        let (s2, z2) = if qmin > shifted {
            (
                (qmax as f64 - shifted as f64) / (qmax as f64 - qmin as f64) * s,
                qmin,
            )
        } else {
            (
                (shifted as f64 - qmin as f64) / (qmax as f64 - qmin as f64) * s,
                qmax,
            )
        };
        let multiplier = s as f32 * (1.0f32 / s2 as f32);
        let vals = xv
            .iter()
            .map(|&v| {
                let cv = (v - z as i32).wrapping_add(c_q as i32);
                let r = (z2 + (cv as f32 * multiplier).round_ties_even() as i64).clamp(qmin, qmax);
                if relu {
                    r.max(z2) as i32
                } else {
                    r as i32
                }
            })
            .collect();
        (s2, z2, vals)
    };
    tensor_result(per_tensor_quantized(
        &vals,
        x.shape(),
        x.dtype(),
        scale,
        zp,
    )?)
}

/// The `out` argument (2) of the `*_scalar_out.Tensor` ops: ATen's `check_inputs(qa, out)`
/// wants the input's dtype. ATen then gives `out` the result's scale and zero point;
/// tsrun cannot change a caller's tensor parameters, so `write_outs` refuses an `out` whose
/// parameters differ from the result's.
fn check_scalar_out(a: &Args<'_>, what: &str) -> Result<()> {
    let (x, out) = (arg_qtensor(a, 0)?, arg_qtensor(a, 2)?);
    if x.dtype() != out.dtype() {
        return Err(wrong_dtype(
            a.op,
            "out",
            format!("{} (the dtype of {what}'s input)", x.dtype()),
            out.dtype(),
        ));
    }
    Ok(())
}

/// `quantized::add_scalar_out.Tensor(qa, b, out)`: ATen's `qadd_scalar_tensor_out`, the
/// sum of `add_scalar` written into `out`.
fn add_scalar_out(a: &mut Args<'_>) -> Result<IValue> {
    check_scalar_out(a, "Add")?;
    let r = elementwise(a, &[0], |a| add_scalar(a, 0, 1, false))?;
    a.write_outs(2, r)
}

/// `quantized::mul_scalar[_relu]_out.Tensor(qa, b, out)`: the product of `mul_scalar`
/// written into `out`, except that with ReLU and a positive `b` ATen's `qrelu` kernel
/// allocates a new output in place of `out`: that is returned and `out` stays as it was.
fn mul_scalar_out(a: &mut Args<'_>, relu: bool) -> Result<IValue> {
    check_scalar_out(a, "Mul")?;
    let positive = scalar_operand(a, 1)? > 0.0;
    let r = mul_scalar(a, 0, 1, relu)?;
    if relu && positive {
        return Ok(r);
    }
    a.write_outs(2, r)
}

/// ATen's `_mul_scalar_out`: a positive `b` keeps the integers (relu: clamped at the zero
/// point) and scales the scale; zero gives zeros with scale 1, zero point 0; a negative `b`
/// mirrors the integers (`qmax + qmin - q`) with zero point `qmax - (z - qmin)`.
fn mul_scalar(a: &mut Args<'_>, xi: usize, bi: usize, relu: bool) -> Result<IValue> {
    let x = arg_qtensor(a, xi)?;
    let (s, z) = per_tensor_params(a.op, &x)?;
    let b = scalar_operand(a, bi)?;
    let (qmin, qmax) = x
        .dtype()
        .quantized_range()
        .ok_or_else(|| wrong_dtype(a.op, "input", "quantized", x.dtype()))?;
    let xv = int_values(&x)?;
    let (scale, zp, vals): (f64, i64, Vec<i32>) = if b > 0.0 {
        let vals = if relu {
            xv.iter().map(|&v| v.max(z as i32)).collect()
        } else {
            xv
        };
        (b * s, z, vals)
    } else if b == 0.0 {
        (1.0, 0, vec![0; xv.len()])
    } else {
        let zp = qmax - (z - qmin);
        let vals = xv
            .iter()
            .map(|&v| {
                let m = (qmax + qmin - v as i64) as i32;
                if relu {
                    m.max(zp as i32)
                } else {
                    m
                }
            })
            .collect();
        (b.abs() * s, zp, vals)
    };
    tensor_result(per_tensor_quantized(
        &vals,
        x.shape(),
        x.dtype(),
        scale,
        zp,
    )?)
}

/// ATen's `qhardsigmoid_kernel`: dequantize, `min(max(x + 3, 0), 6) / 6`, quantize into fixed
/// output parameters that cover [0, 1] (`unit_interval_qparams`). Vector steps dequantize with FMA, the tail with the scalar formula.
fn qhardsigmoid(a: &mut Args<'_>) -> Result<IValue> {
    let x = arg_qtensor(a, 0)?;
    let (scale, zp) = per_tensor_params(a.op, &x)?;
    let dtype = x.dtype();
    let range = dtype
        .quantized_range()
        .ok_or_else(|| wrong_dtype(a.op, "input", "quantized", x.dtype()))?;
    let (out_scale, out_zp) = super::unit_interval_qparams(dtype);
    let inv = 1.0f32 / out_scale as f32;
    let xs = scale as f32;
    let pre = xs * -(zp as f32);
    let f = |v: f32| quantize_val((v + 3.0).clamp(0.0, 6.0) / 6.0, inv, out_zp, range);
    let vector = |q: i32| f(dequantize_val_fma(q, xs, pre));
    let scalar = |q: i32| f(dequantize_val(q, xs, zp));
    let vec_end = x.numel() / (2 * VEC_ELEMS_U8) * (2 * VEC_ELEMS_U8);
    let quantizer = Quantizer::PerTensorAffine {
        scale: out_scale,
        zero_point: out_zp,
    };
    if let Some(out) = map_byte_values(&x, vec_end, vector, scalar, quantizer)? {
        return tensor_result(out);
    }
    let vals: Vec<i32> = int_values(&x)?
        .iter()
        .enumerate()
        .map(|(i, &q)| if i < vec_end { vector(q) } else { scalar(q) })
        .collect();
    tensor_result(per_tensor_quantized(
        &vals,
        x.shape(),
        dtype,
        out_scale,
        out_zp,
    )?)
}

fn pair(v: &[i64], what: &str, op: &str) -> Result<[i64; 2]> {
    match v {
        [a] => Ok([*a, *a]),
        [a, b] => Ok([*a, *b]),
        _ => Err(invalid_argument(
            op,
            format!("the length of {what}"),
            "must be 1 or 2",
            v.len(),
        )),
    }
}

/// ATen's `pooling_output_shape` for one spatial dim; 0 (an empty output, refused by the
/// callers) when the stride is not positive.
fn pooling_output_len(n: i64, k: i64, s: i64, p: i64, d: i64, ceil: bool) -> i64 {
    if s <= 0 {
        return 0;
    }
    let num = n + 2 * p - (d * (k - 1) + 1);
    let mut o = if ceil {
        (num + s - 1).div_euclid(s) + 1
    } else {
        num.div_euclid(s) + 1
    };
    if ceil && (o - 1) * s >= n + p {
        o -= 1;
    }
    o
}

/// `max_pool2d` on the integers of an NCHW / CHW quantized tensor (parameters kept).
fn qmax_pool2d(a: &mut Args<'_>) -> Result<IValue> {
    let x = arg_qtensor(a, 0)?;
    let k = pair(&a.int_list(1)?, "kernel_size", a.op)?;
    let s = a.int_list(2)?;
    let s = if s.is_empty() {
        k
    } else {
        pair(&s, "stride", a.op)?
    };
    let p = pair(&a.int_list(3)?, "padding", a.op)?;
    let d = pair(&a.int_list(4)?, "dilation", a.op)?;
    let ceil = a.bool(5)?;
    let shape = x.shape().to_vec();
    check_rank(a.op, "input", RankRequirement::AtLeast(3), &shape)?;
    let (h, w) = (shape[shape.len() - 2] as i64, shape[shape.len() - 1] as i64);
    let planes: usize = shape[..shape.len() - 2].iter().product();
    let out_len = |n: i64, i: usize| pooling_output_len(n, k[i], s[i], p[i], d[i], ceil);
    let (oh, ow) = (out_len(h, 0), out_len(w, 1));
    if oh <= 0 || ow <= 0 {
        return Err(invalid_argument(
            a.op,
            "output size",
            "must be positive",
            format!("{oh}x{ow}"),
        ));
    }
    let mut oshape = shape.clone();
    let nd = oshape.len();
    oshape[nd - 2] = oh as usize;
    oshape[nd - 1] = ow as usize;
    let window = Window2d { k, s, p, d };
    let (hu, wu, ohu, owu) = (h as usize, w as usize, oh as usize, ow as usize);
    let q = x
        .quantizer()
        .map(|q| (**q).clone())
        .ok_or_else(|| wrong_dtype(a.op, "input", "quantized", x.dtype()))?;
    // a dense channels-last input (every quantized convolution's output): pool the NHWC bytes
    // in place into a channels-last output, as ATen's NHWC kernel
    if let Some(nhwc) = layout::channels_last_ints(&x)? {
        let (n, c) = (shape[0], shape[1]);
        let nhwc_shape = [n, ohu, owu, c];
        let pooled = |ints: Tensor| -> Result<IValue> {
            let y = Tensor::quantized_from_ints(&ints, q.clone())?;
            tensor_result(permute(&y, &[0, 3, 1, 2])?)
        };
        match nhwc.dtype() {
            DType::UInt8 => {
                let read = nhwc.read::<u8>()?;
                if let Some(src) = read.as_slice() {
                    let out = max_pool2d_nhwc(src, n, [hu, wu], c, window, [ohu, owu]);
                    drop(read);
                    return pooled(Tensor::from_vec(out, &nhwc_shape)?);
                }
            }
            DType::Int8 => {
                let read = nhwc.read::<i8>()?;
                if let Some(src) = read.as_slice() {
                    let out = max_pool2d_nhwc(src, n, [hu, wu], c, window, [ohu, owu]);
                    drop(read);
                    return pooled(Tensor::from_vec(out, &nhwc_shape)?);
                }
            }
            _ => {}
        }
    }
    if x.dtype() == DType::QUInt8 {
        let ints = x.int_repr_view()?.contiguous()?;
        let read = ints.read::<u8>()?;
        let src = read.as_slice().unwrap_or(&[]);
        if src.len() == planes * hu * wu {
            let out = max_pool2d_planes(src, planes, [hu, wu], window, [ohu, owu]);
            let ints = Tensor::from_vec(out, &oshape)?;
            return tensor_result(Tensor::quantized_from_ints(&ints, q)?);
        }
    }
    let xv = layout::planar_values(&x)?;
    let mut out = Vec::with_capacity(planes * (oh * ow) as usize);
    for pl in 0..planes {
        let base = pl * (h * w) as usize;
        for oy in 0..oh {
            for ox in 0..ow {
                let mut m = i32::MIN;
                for ky in 0..k[0] {
                    let iy = oy * s[0] - p[0] + ky * d[0];
                    if iy < 0 || iy >= h {
                        continue;
                    }
                    for kx in 0..k[1] {
                        let ix = ox * s[1] - p[1] + kx * d[1];
                        if ix < 0 || ix >= w {
                            continue;
                        }
                        m = m.max(xv[base + (iy * w + ix) as usize]);
                    }
                }
                out.push(m);
            }
        }
    }
    tensor_result(same_params_as(&x, &out, &oshape)?)
}

/// Three values of a 3-d pooling parameter (one value stands for all three).
fn triple(v: &[i64], what: &str, op: &str) -> Result<[i64; 3]> {
    match v {
        [a] => Ok([*a; 3]),
        [a, b, c] => Ok([*a, *b, *c]),
        _ => Err(invalid_argument(
            op,
            format!("the length of {what}"),
            "must be 1 or 3",
            v.len(),
        )),
    }
}

/// `aten::quantized_max_pool3d` on the integers of an NCDHW quantized tensor (parameters
/// kept).
fn qmax_pool3d(a: &mut Args<'_>) -> Result<IValue> {
    let x = arg_qtensor(a, 0)?;
    let k = triple(&a.int_list(1)?, "kernel_size", a.op)?;
    let s = a.int_list(2)?;
    let s = if s.is_empty() {
        k
    } else {
        triple(&s, "stride", a.op)?
    };
    let p = triple(&a.int_list(3)?, "padding", a.op)?;
    let d = triple(&a.int_list(4)?, "dilation", a.op)?;
    let ceil = a.bool(5)?;
    let shape = x.shape().to_vec();
    check_rank(a.op, "input", RankRequirement::Exactly(5), &shape)?;
    let nd = shape.len();
    let dims = [
        shape[nd - 3] as i64,
        shape[nd - 2] as i64,
        shape[nd - 1] as i64,
    ];
    let planes: usize = shape[..nd - 3].iter().product();
    let o: Vec<i64> = (0..3)
        .map(|i| pooling_output_len(dims[i], k[i], s[i], p[i], d[i], ceil))
        .collect();
    if o.iter().any(|&v| v <= 0) {
        return Err(invalid_argument(
            a.op,
            "output size",
            "must be positive",
            format!("{o:?}"),
        ));
    }
    let xv = layout::planar_values(&x)?;
    let plane_len = (dims[0] * dims[1] * dims[2]) as usize;
    let mut out = Vec::with_capacity(planes * (o[0] * o[1] * o[2]) as usize);
    // the input positions a window covers along dim i
    let taps = |i: usize, at: i64| {
        (0..k[i])
            .map(move |kk| at * s[i] - p[i] + kk * d[i])
            .filter(move |&v| v >= 0 && v < dims[i])
    };
    for pl in 0..planes {
        let base = pl * plane_len;
        for oz in 0..o[0] {
            for oy in 0..o[1] {
                for ox in 0..o[2] {
                    let mut m = i32::MIN;
                    for iz in taps(0, oz) {
                        for iy in taps(1, oy) {
                            for ix in taps(2, ox) {
                                let at = ((iz * dims[1] + iy) * dims[2] + ix) as usize;
                                m = m.max(xv[base + at]);
                            }
                        }
                    }
                    out.push(m);
                }
            }
        }
    }
    let mut oshape = shape.clone();
    for i in 0..3 {
        oshape[nd - 3 + i] = o[i] as usize;
    }
    tensor_result(same_params_as(&x, &out, &oshape)?)
}

/// `quantized::max_pool1d`: the 2-d pooling over a unit height.
fn qmax_pool1d(a: &mut Args<'_>) -> Result<IValue> {
    let x = arg_qtensor(a, 0)?;
    check_rank(a.op, "input", RankRequirement::OneOf(vec![2, 3]), x.shape())?;
    let one = |i: usize, a: &Args<'_>, fill: i64| -> Result<IValue> {
        let v = a.int_list(i)?;
        let mut out = vec![fill];
        out.extend(v);
        Ok(IValue::List(crate::values::List::new(
            crate::values::types::Type::Int,
            out.into_iter().map(IValue::Int).collect(),
        )))
    };
    let stride = if a.int_list(2)?.is_empty() {
        IValue::List(crate::values::List::new(
            crate::values::types::Type::Int,
            vec![],
        ))
    } else {
        one(2, a, 1)?
    };
    let mut shape = x.shape().to_vec();
    let mut strides = x.strides().to_vec();
    let nd = shape.len();
    shape.insert(nd - 1, 1);
    strides.insert(nd - 1, 0);
    let x4 = x.as_strided(&shape, &strides, x.storage_offset())?;
    let mut args = vec![
        IValue::Tensor(x4),
        one(1, a, 1)?,
        stride,
        one(3, a, 0)?,
        one(4, a, 1)?,
        IValue::Bool(a.bool(5)?),
    ];
    let IValue::Tensor(y) = qmax_pool2d(&mut Args::new(a.op, &mut args, a.ctx))? else {
        return Err(unsupported(a.op, "pooling returned a non-tensor"));
    };
    let mut shape = y.shape().to_vec();
    let mut strides = y.strides().to_vec();
    shape.remove(nd - 1);
    strides.remove(nd - 1);
    tensor_result(y.as_strided(&shape, &strides, y.storage_offset())?)
}

/// `adaptive_avg_pool2d` on quantized NCHW input (ATen's `qadaptive_avg_pool2d` scalar path:
/// the integer window sum minus `zp * size`, requantized with `1 / size`; parameters kept).
fn qadaptive_avg_pool2d(a: &mut Args<'_>) -> Result<IValue> {
    qadaptive_avg_pool2d_in(a, false)
}

/// [`qadaptive_avg_pool2d`], its kernel chosen by the input's layout when `by_layout` (see
/// [`qadaptive_avg_pool`]).
fn qadaptive_avg_pool2d_in(a: &mut Args<'_>, by_layout: bool) -> Result<IValue> {
    // ATen's `enable_qnnpack_for_ada_avgpool`: QNNPACK's average pooling when each output
    // cell covers a whole, equal window (and the size changes)
    let x = arg_qtensor(a, 0)?;
    if a.ctx.quantized_engine.qnnpack() && x.dtype() == DType::QUInt8 && x.dim() == 4 {
        let o = pair(&a.int_list(1)?, "output_size", a.op)?;
        let (h, w) = (x.shape()[2] as i64, x.shape()[3] as i64);
        if o[0] > 0 && o[1] > 0 && (h, w) != (o[0], o[1]) && h % o[0] == 0 && w % o[1] == 0 {
            let k = [h / o[0], w / o[1]];
            let out = super::qnnpack::avg_pool2d(a.op, &x, k, k, [0, 0])?;
            // (`output.contiguous(input.suggest_memory_format())`)
            return tensor_result(if layout::suggests_channels_last(&x) {
                layout::to_channels_last(&out)?
            } else {
                out
            });
        }
    }
    qadaptive_avg_pool_in(a, 2, by_layout)
}

/// `adaptive_avg_pool2d` / `adaptive_avg_pool3d` (`nsp` spatial dims, the last ones) of a
/// quantized tensor as ATen's `_adaptive_avg_pool` runs it: on a channels-last contiguous
/// input its NDHWC kernel (`_qadaptive_avg_pool_kernel`, 2-d as depth 1) into a channels-last
/// output, on any other `adaptive_avg_pool_single_out_frame`, which rounds the raw window sum
/// times the float `((1 / kD) / kH) / kW` (no zero point subtracted, no clamp).
/// As for [`qavg_pool2d`], 4-d and 5-d inputs take the channels-last kernel whatever tsrun's
/// view of their layout; the 1-d composite decides by the layout.
fn qadaptive_avg_pool(a: &mut Args<'_>, nsp: usize) -> Result<IValue> {
    qadaptive_avg_pool_in(a, nsp, false)
}

fn qadaptive_avg_pool_in(a: &mut Args<'_>, nsp: usize, by_layout: bool) -> Result<IValue> {
    let x = arg_qtensor(a, 0)?;
    if !by_layout || layout::is_channels_last_contiguous(&x) {
        layout::like_first_input(a, |a| qadaptive_avg_pool_with(a, nsp, false))
    } else {
        qadaptive_avg_pool_with(a, nsp, true)
    }
}

/// [`qadaptive_avg_pool`]'s kernels: the NDHWC one, or (`planar`) the NCHW one.
fn qadaptive_avg_pool_with(a: &mut Args<'_>, nsp: usize, planar: bool) -> Result<IValue> {
    let x = arg_qtensor(a, 0)?;
    let o = spatial3(&a.int_list(1)?, nsp, 1, "output_size", a.op)?;
    let (_, zp) = per_tensor_params(a.op, &x)?;
    let range = x
        .dtype()
        .quantized_range()
        .ok_or_else(|| wrong_dtype(a.op, "input", "quantized", x.dtype()))?;
    let shape = x.shape().to_vec();
    check_rank(a.op, "input", RankRequirement::AtLeast(nsp + 1), &shape)?;
    if o.iter().any(|&v| v <= 0) {
        return Err(invalid_argument(
            a.op,
            "output_size",
            "must be positive",
            format!("{o:?}"),
        ));
    }
    let nd = shape.len();
    let d = if nsp == 3 { shape[nd - 3] } else { 1 };
    let (h, w) = (shape[nd - 2], shape[nd - 1]);
    let (od, oh, ow) = (o[0] as usize, o[1] as usize, o[2] as usize);
    let planes: usize = shape[..nd - nsp].iter().product();
    let xv = layout::planar_values(&x)?;
    let window = |o: usize, n: usize, out: usize| (o * n / out, ((o + 1) * n).div_ceil(out));
    let mut out = Vec::with_capacity(planes * od * oh * ow);
    for pl in 0..planes {
        let base = pl * d * h * w;
        for oz in 0..od {
            let (z0, z1) = window(oz, d, od);
            for oy in 0..oh {
                let (y0, y1) = window(oy, h, oh);
                for ox in 0..ow {
                    let (x0, x1) = window(ox, w, ow);
                    let size = ((z1 - z0) * (y1 - y0) * (x1 - x0)) as i32;
                    if planar {
                        let mut sum = 0i64;
                        for iz in z0..z1 {
                            for iy in y0..y1 {
                                for ix in x0..x1 {
                                    sum += i64::from(xv[base + (iz * h + iy) * w + ix]);
                                }
                            }
                        }
                        let reciprocal = ((1.0f64 / (z1 - z0) as f64) as f32 / (y1 - y0) as f32)
                            / (x1 - x0) as f32;
                        out.push((sum as f32 * reciprocal).round_ties_even() as i32);
                        continue;
                    }
                    let mut acc = -(zp as i32) * size;
                    for iz in z0..z1 {
                        for iy in y0..y1 {
                            for ix in x0..x1 {
                                acc += xv[base + (iz * h + iy) * w + ix];
                            }
                        }
                    }
                    // quantize_val(1 / multiplier, zp, acc) with multiplier = 1 / size
                    let multiplier = 1.0f32 / size as f32;
                    let inv = 1.0f32 / (1.0f32 / multiplier);
                    out.push(quantize_val(acc as f32, inv, zp, range));
                }
            }
        }
    }
    let mut oshape = shape[..nd - nsp].to_vec();
    if nsp == 3 {
        oshape.push(od);
    }
    oshape.extend([oh, ow]);
    tensor_result(same_params_as(&x, &out, &oshape)?)
}

/// `aten::stack` of quantized tensors: ATen's composite `cat` of the inputs unsqueezed at
/// `dim`, so the first input's parameters.
fn qstack(a: &mut Args<'_>) -> Result<IValue> {
    let xs = a.tensor_list(0)?;
    let first = xs
        .first()
        .ok_or_else(|| size_mismatch(a.op, "the number of tensors (at least)", 1, 0))?;
    let rank = first.dim() as i64;
    let dim = a.int(1)?;
    let at = if dim < 0 { dim + rank + 1 } else { dim };
    if !(0..=rank).contains(&at) {
        return Err(invalid_argument(
            a.op,
            "dim",
            format!("must be in [{}, {rank}]", -rank - 1),
            dim,
        ));
    }
    let (scale, zp) = per_tensor_params(a.op, first)?;
    let unsqueezed = xs
        .iter()
        .map(|x| {
            if x.shape() != first.shape() {
                return Err(shape_mismatch(a.op, "tensors", first.shape(), x.shape()));
            }
            let mut shape = x.shape().to_vec();
            shape.insert(at as usize, 1);
            reshaped(a.op, x, &shape)
        })
        .collect::<Result<Vec<_>>>()?;
    cat_requantized(a, &unsqueezed, at, scale, zp, false)
}

/// `avg_pool2d` on a 4-d quantized tensor, output parameters those of the input. PyTorch's
/// quantized convolutions and `cat` leave channels-last tensors, so this follows ATen's
/// channels-last kernel (`_qavg_pool_nhwc_kernel`): per output pixel, the integer window sum
/// minus `zp * size`; whole groups of 8 channels are requantized as its AVX2 body does,
/// `round(acc * multiplier) + zp`, the remaining channels as its scalar tail,
/// `quantize_val(1 / multiplier, zp, acc)`.
///
/// A 4-d input always takes the channels-last kernel, whatever tsrun's view of its layout:
/// tsrun's float ops do not keep channels-last strides, so a tensor quantized after them looks
/// contiguous where PyTorch's is channels-last (the case of every quantized model seen);
/// [`qavg_pool2d_by_layout`] decides by the layout where it is known (the 1-d composite).
fn qavg_pool2d(a: &mut Args<'_>) -> Result<IValue> {
    qavg_pool2d_in(a, false)
}

/// `avg_pool2d` choosing ATen's kernel by the input's layout (`q_avg_pool2d`): the NHWC one,
/// into a channels-last output, on a channels-last contiguous input; the NCHW one
/// (`avg_pool2d_out_frame`) on any other.
fn qavg_pool2d_by_layout(a: &mut Args<'_>) -> Result<IValue> {
    qavg_pool2d_in(a, true)
}

fn qavg_pool2d_in(a: &mut Args<'_>, by_layout: bool) -> Result<IValue> {
    let x = arg_qtensor(a, 0)?;
    // ATen's avg_pool2d_quantized_cpu: QNNPACK's kernel for quint8 without ceil_mode
    if a.ctx.quantized_engine.qnnpack() && x.dtype() == DType::QUInt8 && !a.bool(4)? {
        check_rank(a.op, "input", RankRequirement::Exactly(4), x.shape())?;
        let k = pair(&a.int_list(1)?, "kernel_size", a.op)?;
        let s = a.int_list(2)?;
        let s = if s.is_empty() {
            k
        } else {
            pair(&s, "stride", a.op)?
        };
        let p = pair(&a.int_list(3)?, "padding", a.op)?;
        let out = super::qnnpack::avg_pool2d(a.op, &x, k, s, p)?;
        // (`output.contiguous(input.suggest_memory_format())`)
        return tensor_result(if layout::suggests_channels_last(&x) {
            layout::to_channels_last(&out)?
        } else {
            out
        });
    }
    if by_layout && !layout::is_channels_last_contiguous(&x) {
        qavg_pool_planar(a)
    } else {
        layout::like_first_input(a, |a| qavg_pool(a, 2))
    }
}

/// `avg_pool2d_out_frame`, ATen's NCHW kernel: per output pixel the integer window sum minus
/// `zp * size`, requantized as `nearbyint(sum * multiplier + zp)` with the float
/// `multiplier = (in_scale / out_scale) / divisor` (the scales being equal, `1 / divisor`
/// in double).
fn qavg_pool_planar(a: &mut Args<'_>) -> Result<IValue> {
    qavg_pool_with(a, 2, true)
}

/// A pooling argument of `nsp` spatial dims (one value repeats), as 3-d (depth, height,
/// width) with `fill` in front for 2-d.
fn spatial3(v: &[i64], nsp: usize, fill: i64, what: &str, op: &str) -> Result<[i64; 3]> {
    match (nsp, v) {
        (2, _) => {
            let [h, w] = pair(v, what, op)?;
            Ok([fill, h, w])
        }
        (_, [x]) => Ok([*x, *x, *x]),
        (_, [d, h, w]) => Ok([*d, *h, *w]),
        _ => Err(invalid_argument(
            op,
            format!("the length of {what}"),
            "must be 1 or 3",
            v.len(),
        )),
    }
}

/// `avg_pool2d` / `avg_pool3d` (`nsp` spatial dims) of a quantized tensor: ATen's
/// `_qavg_pool_nhwc_kernel`, which serves both (2-d as depth 1).
fn qavg_pool(a: &mut Args<'_>, nsp: usize) -> Result<IValue> {
    qavg_pool_with(a, nsp, false)
}

/// [`qavg_pool`] with the NHWC kernel's requantization, or (`planar`) the NCHW kernel's
/// ([`qavg_pool_planar`]).
fn qavg_pool_with(a: &mut Args<'_>, nsp: usize, planar: bool) -> Result<IValue> {
    let x = arg_qtensor(a, 0)?;
    let k = spatial3(&a.int_list(1)?, nsp, 1, "kernel_size", a.op)?;
    let s = a.int_list(2)?;
    let s = if s.is_empty() {
        k
    } else {
        spatial3(&s, nsp, 1, "stride", a.op)?
    };
    let p = spatial3(&a.int_list(3)?, nsp, 0, "padding", a.op)?;
    let ceil = a.bool(4)?;
    let count_include_pad = a.bool(5)?;
    let divisor_override = a.opt_int(6)?;
    let (_, zp) = per_tensor_params(a.op, &x)?;
    let range = x
        .dtype()
        .quantized_range()
        .ok_or_else(|| wrong_dtype(a.op, "input", "quantized", x.dtype()))?;
    let shape = x.shape().to_vec();
    check_rank(a.op, "input", RankRequirement::Exactly(nsp + 2), &shape)?;
    if k.iter().any(|&v| v <= 0) {
        return Err(invalid_argument(
            a.op,
            "kernel_size",
            "must be positive",
            format!("{k:?}"),
        ));
    }
    if s.iter().any(|&v| v <= 0) {
        return Err(invalid_argument(
            a.op,
            "stride",
            "must be positive",
            format!("{s:?}"),
        ));
    }
    if p.iter().any(|&v| v < 0) {
        return Err(invalid_argument(
            a.op,
            "padding",
            "must be non-negative",
            format!("{p:?}"),
        ));
    }
    if (0..3).any(|i| p[i] * 2 > k[i]) {
        return Err(invalid_argument(
            a.op,
            "padding",
            format!("must be at most half of kernel_size {k:?}"),
            format!("{p:?}"),
        ));
    }
    if divisor_override == Some(0) {
        return Err(invalid_argument(
            a.op,
            "divisor_override",
            "must be non-zero",
            0,
        ));
    }
    let (nb, c) = (shape[0], shape[1]);
    let dims: [i64; 3] = if nsp == 2 {
        [1, shape[2] as i64, shape[3] as i64]
    } else {
        [shape[2] as i64, shape[3] as i64, shape[4] as i64]
    };
    let [d, h, w] = dims;
    let o: Vec<i64> = (0..3)
        .map(|i| pooling_output_len(dims[i], k[i], s[i], p[i], 1, ceil))
        .collect();
    if o.iter().any(|&v| v <= 0) {
        return Err(invalid_argument(
            a.op,
            "output size",
            "must be positive",
            format!("{o:?}"),
        ));
    }
    let xv = layout::planar_values(&x)?;
    let (od, oh, ow) = (o[0], o[1], o[2]);
    let (odu, ohu, owu) = (od as usize, oh as usize, ow as usize);
    let mut out = vec![0i32; nb * c * odu * ohu * owu];
    let vec_channels = c / 8 * 8;
    for b in 0..nb {
        for oz in 0..od {
            for oy in 0..oh {
                for ox in 0..ow {
                    let start = [oz * s[0] - p[0], oy * s[1] - p[1], ox * s[2] - p[2]];
                    let end: Vec<i64> = (0..3)
                        .map(|i| (start[i] + k[i]).min(dims[i] + p[i]))
                        .collect();
                    let pool_size: i64 = (0..3).map(|i| end[i] - start[i]).product();
                    let lo: Vec<i64> = start.iter().map(|&v| v.max(0)).collect();
                    let hi: Vec<i64> = (0..3).map(|i| end[i].min(dims[i])).collect();
                    let size: i64 = (0..3).map(|i| hi[i] - lo[i]).product();
                    let divide = divisor_override.unwrap_or(if count_include_pad {
                        pool_size
                    } else {
                        size
                    });
                    // input_scale / output_scale / divide, the scales being equal
                    let multiplier = 1.0f32 / divide as i32 as f32;
                    let inv_tail = 1.0f32 / (1.0f32 / multiplier);
                    for ch in 0..c {
                        let plane = (b * c + ch) * (d * h * w) as usize;
                        let mut acc = -(zp as i32) * size as i32;
                        for iz in lo[0]..hi[0] {
                            for iy in lo[1]..hi[1] {
                                for ix in lo[2]..hi[2] {
                                    acc += xv[plane + ((iz * h + iy) * w + ix) as usize];
                                }
                            }
                        }
                        let q = if planar {
                            let multiplier = (1.0f64 / divide as f64) as f32;
                            let t = (acc as f32 * multiplier + zp as f32).round_ties_even();
                            (t as i64).clamp(range.0, range.1) as i32
                        } else if ch < vec_channels {
                            let t = (acc as f32 * multiplier).min((i32::MAX - 127) as f32);
                            (t.round_ties_even() as i64 + zp).clamp(range.0, range.1) as i32
                        } else {
                            quantize_val(acc as f32, inv_tail, zp, range)
                        };
                        let at = (((b * c + ch) * odu + oz as usize) * ohu + oy as usize) * owu
                            + ox as usize;
                        out[at] = q;
                    }
                }
            }
        }
    }
    let mut oshape = vec![nb, c];
    if nsp == 3 {
        oshape.push(odu);
    }
    oshape.extend([ohu, owu]);
    tensor_result(same_params_as(&x, &out, &oshape)?)
}

/// `mean.dim` over the spatial dims of a 4-d quantized tensor as PyTorch runs it on the
/// channels-last tensors quantized convolutions leave: dequantized, summed per channel over
/// the rows (h, w) in the order of `vectorized_outer_sum` (`aten_outer_sums`: channel blocks
/// with `cascade_sum`, the other channels with `row_sum_ilp`), divided by their count
/// (`sum_out(...).div_(n)`); `None` for other dims.
fn spatial_mean_channels_last(a: &Args<'_>, x: &Tensor) -> Result<Option<Tensor>> {
    if x.dim() != 4 || a.len() < 3 || !matches!(a.get(3), Ok(IValue::None) | Err(_)) {
        return Ok(None);
    }
    let Some(mut dims) = a.opt_int_list(1)? else {
        return Ok(None);
    };
    for d in &mut dims {
        if *d < 0 {
            *d += 4;
        }
    }
    dims.sort_unstable();
    if dims != [2, 3] {
        return Ok(None);
    }
    let keepdim = a.bool(2)?;
    let shape = x.shape();
    let (planes, rows) = (shape[0] * shape[1], shape[2] * shape[3]);
    let values = dequantize_tensor(x)?.to_vec::<f32>()?;
    let blocked = outer_sum_blocked_columns(shape[1]);
    let means: Vec<f32> = (0..planes)
        .map(|p| {
            let plane = values.get(p * rows..(p + 1) * rows).unwrap_or(&[]);
            let sum = if p % shape[1] < blocked {
                cascade_sum(plane.iter().copied())
            } else {
                row_sum_ilp(plane)
            };
            sum / rows as f32
        })
        .collect();
    let out_shape: Vec<usize> = if keepdim {
        vec![shape[0], shape[1], 1, 1]
    } else {
        vec![shape[0], shape[1]]
    };
    Ok(Some(Tensor::from_vec(means, &out_shape)?))
}

/// `mean.dim` of a quantized tensor as ATen's `mean_quantized_cpu` computes it for the
/// channels-last tensors quantized convolutions leave: dequantize, the float mean, quantize
/// with the input's parameters.
fn qmean_dim(a: &mut Args<'_>) -> Result<IValue> {
    let x = arg_qtensor(a, 0)?;
    let (scale, zp) = per_tensor_params(a.op, &x)?;
    // ATen's mean_quantized_cpu: QNNPACK's global average pooling for a 4-d quint8 input
    // and dims exactly [2, 3]
    if a.ctx.quantized_engine.qnnpack() && x.dtype() == DType::QUInt8 && x.dim() == 4 {
        if let Some([2, 3]) = a.opt_int_list(1)?.as_deref() {
            let keepdim = a.bool(2)?;
            return tensor_result(super::qnnpack::spatial_mean(a.op, &x, keepdim)?);
        }
    }
    if let Some(m) = spatial_mean_channels_last(a, &x)? {
        return tensor_result(quantize_tensor(&m, scale, zp, x.dtype())?);
    }
    let mut args: Vec<IValue> = (0..a.len())
        .map(|i| a.get(i).cloned())
        .collect::<Result<_>>()?;
    args[0] = IValue::Tensor(dequantize_tensor(&x)?);
    let float_mean = FLOAT_KERNELS[MEAN_DIM]
        .get()
        .copied()
        .ok_or_else(|| crate::Error::UnknownOp("aten::mean.dim".into()))?;
    let IValue::Tensor(m) = float_mean(&mut Args::new("aten::mean.dim", &mut args, a.ctx))? else {
        return Err(unsupported(a.op, "aten::mean.dim returned a non-tensor"));
    };
    tensor_result(quantize_tensor(&m, scale, zp, x.dtype())?)
}
