//! Kernels: PyTorch's MKLDNN (oneDNN) CPU operators. tsrun has no MKLDNN layout: an MKLDNN
//! tensor is represented by the dense tensor it holds (what `.to_dense()` gives back), so
//! `to_mkldnn` and the weight reorders are copies, the `mkldnn_*` ops are their dense
//! counterparts, and the fused `mkldnn::_linear_pointwise` / `_convolution_pointwise` ops that
//! inductor's CPU freezing emits run tsrun's linear / convolution followed by the fused
//! elementwise op. oneDNN sums products and evaluates transcendentals in its own order: float
//! results agree to rounding, not bit for bit.

use super::kernels::{
    check_rank, check_size, invalid_argument, shape_mismatch, size_mismatch, value_err, wrong_dtype,
};
use super::prims::via_aten;
use super::{Args, Registry};
use crate::tensor::{DType, RankRequirement, Tensor};
use crate::values::{IValue, List, Type};

type R = crate::Result<IValue>;

/// The tensor a kernel called through `via_aten` returned.
pub(crate) fn tensor_of(a: &Args<'_>, r: IValue) -> crate::Result<Tensor> {
    match r {
        IValue::Tensor(t) => Ok(t),
        other => Err(value_err(format!(
            "{}: expected a tensor result, got {}",
            a.op,
            other.kind_name()
        ))),
    }
}

fn int_list(v: &[i64]) -> IValue {
    IValue::List(List::new(
        Type::Int,
        v.iter().map(|&x| IValue::Int(x)).collect(),
    ))
}

/// `to_mkldnn(self, dtype=None)`: a copy (in `dtype`: float, bfloat16 or half) of a float,
/// bfloat16, half, uint8 or int8 tensor.
fn to_mkldnn(a: &mut Args<'_>) -> R {
    let x = a.tensor(0)?;
    if !matches!(
        x.dtype(),
        DType::Float32 | DType::BFloat16 | DType::Float16 | DType::UInt8 | DType::Int8
    ) {
        return Err(wrong_dtype(
            a.op,
            "input",
            "float, bfloat16, half, uint8 or int8",
            x.dtype(),
        ));
    }
    let dtype = match a.opt_dtype(1)? {
        None => x.dtype(),
        Some(d @ (DType::Float32 | DType::BFloat16 | DType::Float16)) => d,
        Some(d) => return Err(wrong_dtype(a.op, "dtype", "float, bfloat16 or half", d)),
    };
    Ok(IValue::Tensor(x.to_dtype(dtype)?.deep_clone()?))
}

/// `_mkldnn_reshape(self, shape)`: a reshaped copy.
fn mkldnn_reshape(a: &mut Args<'_>) -> R {
    let x = a.tensor(0)?;
    let r = via_aten(
        a,
        "aten::reshape",
        vec![IValue::Tensor(x), a.get(1)?.clone()],
    )?;
    Ok(IValue::Tensor(tensor_of(a, r)?.deep_clone()?))
}

/// `_mkldnn_transpose(self, dim0, dim1)`: a transposed copy.
fn mkldnn_transpose(a: &mut Args<'_>) -> R {
    let x = a.tensor(0)?;
    let r = via_aten(
        a,
        "aten::transpose.int",
        vec![
            IValue::Tensor(x),
            IValue::Int(a.int(1)?),
            IValue::Int(a.int(2)?),
        ],
    )?;
    Ok(IValue::Tensor(tensor_of(a, r)?.contiguous()?.deep_clone()?))
}

/// `mkldnn_max_pool2d` / `mkldnn_max_pool3d(self, kernel_size, stride, padding, dilation,
/// ceil_mode)`: the dense max pooling; oneDNN has no dilated pooling.
fn mkldnn_max_pool<const DIMS: usize>(a: &mut Args<'_>) -> R {
    let dilation = a.int_list(4)?;
    if dilation.iter().any(|&d| d != 1) {
        return Err(invalid_argument(
            a.op,
            "dilation",
            "must be all 1 (mkldnn pooling has no dilation)",
            format!("{dilation:?}"),
        ));
    }
    let name = if DIMS == 2 {
        "aten::max_pool2d"
    } else {
        "aten::max_pool3d"
    };
    let args = (0..6)
        .map(|i| a.get(i).cloned())
        .collect::<crate::Result<_>>()?;
    via_aten(a, name, args)
}

/// `mkldnn_adaptive_avg_pool2d(self, output_size)`: oneDNN pools only sizes the output divides.
fn mkldnn_adaptive_avg_pool2d(a: &mut Args<'_>) -> R {
    let x = a.tensor(0)?;
    let out = a.int_list(1)?;
    check_rank(a.op, "input", RankRequirement::Exactly(4), x.shape())?;
    check_size(a.op, "the length of output_size", 2, out.len() as i64)?;
    for (i, &o) in out.iter().enumerate() {
        let size = x.shape()[2 + i] as i64;
        if o <= 0 || size % o != 0 {
            return Err(invalid_argument(
                a.op,
                "output_size",
                format!("must divide the input size {size} (mkldnn adaptive pooling)"),
                o,
            ));
        }
    }
    via_aten(
        a,
        "aten::adaptive_avg_pool2d",
        vec![IValue::Tensor(x), int_list(&out)],
    )
}

/// `mkldnn_linear(self, weight, bias=None)`: a 2-d or 3-d input's linear layer.
fn mkldnn_linear(a: &mut Args<'_>) -> R {
    let x = a.tensor(0)?;
    check_rank(a.op, "input", RankRequirement::OneOf(vec![2, 3]), x.shape())?;
    dense_linear(a, x, 1, 2)
}

/// `linear(x, weight, bias)` of the weight and optional bias at arguments `w_at` and `b_at`.
fn dense_linear(a: &Args<'_>, x: Tensor, w_at: usize, b_at: usize) -> R {
    let (w, b) = (a.tensor(w_at)?, a.opt_tensor(b_at)?);
    Ok(IValue::Tensor(super::linalg::linear(
        a.op,
        &x,
        &w,
        b.as_ref(),
    )?))
}

/// The weight reorders (`mkldnn_reorder_conv2d_weight`, `_reorder_convolution_weight`,
/// `_reorder_linear_weight`, ...): oneDNN's blocked layout holds the same logical weight, so
/// the dense representation is a copy.
fn reorder_weight(a: &mut Args<'_>) -> R {
    Ok(IValue::Tensor(a.tensor(0)?.deep_clone()?))
}

/// A fused unary post-op (`attr`, its `scalars` and `algorithm`), as PyTorch's
/// `fusion_unary_attr_map` names them.
fn unary_post_op(a: &Args<'_>, y: Tensor, attr: &str, scalars: &[IValue], alg: &str) -> R {
    let t = IValue::Tensor(y.clone());
    let scalar = |i: usize| {
        scalars.get(i).cloned().ok_or_else(|| {
            size_mismatch(
                a.op,
                format!("the number of scalars of post-op {attr} (at least)"),
                (i + 1) as i64,
                scalars.len() as i64,
            )
        })
    };
    match attr {
        "none" => Ok(IValue::Tensor(y)),
        "relu" => via_aten(a, "aten::relu", vec![t]),
        "tanh" => via_aten(a, "aten::tanh", vec![t]),
        "sigmoid" => via_aten(a, "aten::sigmoid", vec![t]),
        "hardswish" => via_aten(a, "aten::hardswish", vec![t]),
        "hardsigmoid" => via_aten(a, "aten::hardsigmoid", vec![t]),
        "swish" => via_aten(a, "aten::silu", vec![t]),
        "gelu" => {
            let approximate = match alg {
                "" | "none" => "none",
                "tanh" => "tanh",
                other => {
                    return Err(invalid_argument(
                        a.op,
                        "algorithm",
                        "must be none or tanh (gelu)",
                        format!("{other:?}"),
                    ))
                }
            };
            via_aten(a, "aten::gelu", vec![t, IValue::String(approximate.into())])
        }
        "leaky_relu" => via_aten(a, "aten::leaky_relu", vec![t, scalar(0)?]),
        "hardtanh" => via_aten(a, "aten::hardtanh", vec![t, scalar(0)?, scalar(1)?]),
        other => Err(invalid_argument(
            a.op,
            "attr",
            "must be a post-op with defined fusion behavior",
            format!("{other:?}"),
        )),
    }
}

/// A fused binary post-op: `y <attr> other` for add, sub, mul and div (same shapes).
fn binary_post_op(a: &Args<'_>, y: Tensor, other: &Tensor, attr: &str) -> crate::Result<Tensor> {
    if y.shape() != other.shape() {
        return Err(shape_mismatch(a.op, "other", y.shape(), other.shape()));
    }
    let (y, o) = (IValue::Tensor(y), IValue::Tensor(other.clone()));
    let r = match attr {
        "add" => via_aten(a, "aten::add.Tensor", vec![y, o, IValue::Int(1)])?,
        "sub" => via_aten(a, "aten::sub.Tensor", vec![y, o, IValue::Int(1)])?,
        "mul" => via_aten(a, "aten::mul.Tensor", vec![y, o])?,
        "div" => via_aten(a, "aten::div.Tensor", vec![y, o])?,
        other => {
            return Err(invalid_argument(
                a.op,
                "binary_attr",
                "must be a binary post-op with defined fusion behavior",
                format!("{other:?}"),
            ))
        }
    };
    tensor_of(a, r)
}

fn scalars_arg(a: &Args<'_>, i: usize) -> crate::Result<Vec<IValue>> {
    Ok(a.list(i)?.to_vec())
}

fn opt_str(a: &Args<'_>, i: usize) -> crate::Result<String> {
    Ok(a.opt_str(i)?.map(|s| s.to_string()).unwrap_or_default())
}

/// `mkldnn::_linear_pointwise(X, W, B, attr, scalars, algorithm)`: linear, then the unary
/// post-op.
fn linear_pointwise(a: &mut Args<'_>) -> R {
    let (x, w, b) = (a.tensor(0)?, a.tensor(1)?, a.opt_tensor(2)?);
    let y = super::linalg::linear(a.op, &x, &w, b.as_ref())?;
    let (attr, scalars, alg) = (a.str(3)?, scalars_arg(a, 4)?, opt_str(a, 5)?);
    unary_post_op(a, y, &attr, &scalars, &alg)
}

/// `mkldnn::_linear_pointwise.binary(X, other, W, B, attr)`: `linear(X) <attr> other`.
fn linear_pointwise_binary(a: &mut Args<'_>) -> R {
    let (x, other, w, b) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?, a.opt_tensor(3)?);
    let y = super::linalg::linear(a.op, &x, &w, b.as_ref())?;
    let attr = a.str(4)?;
    Ok(IValue::Tensor(binary_post_op(a, y, &other, &attr)?))
}

/// `aten::convolution` of X by W (bias B) with the given geometry.
#[allow(clippy::too_many_arguments)]
fn convolution(
    a: &Args<'_>,
    x: Tensor,
    w: IValue,
    b: IValue,
    stride: IValue,
    padding: IValue,
    dilation: IValue,
    transposed: bool,
    output_padding: IValue,
    groups: IValue,
) -> crate::Result<Tensor> {
    let r = via_aten(
        a,
        "aten::convolution",
        vec![
            IValue::Tensor(x),
            w,
            b,
            stride,
            padding,
            dilation,
            IValue::Bool(transposed),
            output_padding,
            groups,
        ],
    )?;
    tensor_of(a, r)
}

fn zeros_like_list(v: &IValue) -> crate::Result<IValue> {
    match v {
        IValue::List(l) => Ok(int_list(&vec![0; l.len()])),
        other => Err(value_err(format!(
            "expected an int list, got {}",
            other.kind_name()
        ))),
    }
}

/// `mkldnn::_convolution_pointwise(X, W, B, padding, stride, dilation, groups, attr, scalars,
/// algorithm)`: convolution, then the unary post-op.
fn convolution_pointwise(a: &mut Args<'_>) -> R {
    let x = a.tensor(0)?;
    let padding = a.get(3)?.clone();
    let output_padding = zeros_like_list(&padding)?;
    let y = convolution(
        a,
        x,
        a.get(1)?.clone(),
        a.get(2)?.clone(),
        a.get(4)?.clone(),
        padding,
        a.get(5)?.clone(),
        false,
        output_padding,
        a.get(6)?.clone(),
    )?;
    let (attr, scalars, alg) = (a.str(7)?, scalars_arg(a, 8)?, opt_str(a, 9)?);
    unary_post_op(a, y, &attr, &scalars, &alg)
}

/// `mkldnn::_convolution_transpose_pointwise(X, W, B, padding, output_padding, stride,
/// dilation, groups, attr, scalars, algorithm)` with a dense `[in, out / groups, *k]` weight.
fn convolution_transpose_pointwise(a: &mut Args<'_>) -> R {
    let x = a.tensor(0)?;
    let y = convolution(
        a,
        x,
        a.get(1)?.clone(),
        a.get(2)?.clone(),
        a.get(5)?.clone(),
        a.get(3)?.clone(),
        a.get(6)?.clone(),
        true,
        a.get(4)?.clone(),
        a.get(7)?.clone(),
    )?;
    let (attr, scalars, alg) = (a.str(8)?, scalars_arg(a, 9)?, opt_str(a, 10)?);
    unary_post_op(a, y, &attr, &scalars, &alg)
}

/// The binary convolution's `conv(X) <binary_attr> other`, then relu when `unary_attr` says
/// so (the only unary post-op PyTorch fuses after a binary one); `alpha` must be None or 1.
/// Arguments from `first`: X, W, B, padding, stride, dilation, groups, binary_attr, alpha,
/// unary_attr (`other` is argument `other_at`).
fn convolution_binary(a: &Args<'_>, first: usize, other_at: usize) -> crate::Result<Tensor> {
    let x = a.tensor(first)?;
    let other = a.tensor(other_at)?;
    if let Some(alpha) = a.opt_scalar(first + 8)? {
        if alpha.to_f64() != 1.0 {
            return Err(invalid_argument(
                a.op,
                "alpha",
                "must be None or 1.0",
                alpha.to_f64(),
            ));
        }
    }
    let unary = opt_str(a, first + 9)?;
    if !matches!(unary.as_str(), "" | "none" | "relu") {
        return Err(invalid_argument(
            a.op,
            "unary_attr",
            "must be none or relu after a binary post-op",
            format!("{unary:?}"),
        ));
    }
    let padding = a.get(first + 3)?.clone();
    let output_padding = zeros_like_list(&padding)?;
    let y = convolution(
        a,
        x,
        a.get(first + 1)?.clone(),
        a.get(first + 2)?.clone(),
        a.get(first + 4)?.clone(),
        padding,
        a.get(first + 5)?.clone(),
        false,
        output_padding,
        a.get(first + 6)?.clone(),
    )?;
    let attr = a.str(first + 7)?;
    let y = binary_post_op(a, y, &other, &attr)?;
    if unary == "relu" {
        return tensor_of(a, via_aten(a, "aten::relu", vec![IValue::Tensor(y)])?);
    }
    Ok(y)
}

/// `mkldnn::_convolution_pointwise.binary(X, other, W, B, padding, stride, dilation, groups,
/// binary_attr, alpha, unary_attr, unary_scalars, unary_algorithm)`.
fn convolution_pointwise_binary(a: &mut Args<'_>) -> R {
    // X is argument 0, other 1, the rest from W on: shift the view by one
    let x = a.get(0)?.clone();
    let mut values: Vec<IValue> = (1..a.len())
        .map(|i| a.get(i).cloned())
        .collect::<crate::Result<_>>()?;
    // values: other, W, B, ...; reorder to X, W, B, ..., other last
    let other = values.remove(0);
    values.insert(0, x);
    values.push(other);
    let other_at = values.len() - 1;
    let shifted = Args::new(a.op, &mut values, a.ctx);
    Ok(IValue::Tensor(convolution_binary(&shifted, 0, other_at)?))
}

/// `mkldnn::_convolution_pointwise_.binary(other, X, W, B, ...)`: the binary convolution
/// written into `other`, which is returned.
fn convolution_pointwise_binary_(a: &mut Args<'_>) -> R {
    let y = convolution_binary(a, 1, 0)?;
    let other = a.tensor(0)?;
    other.copy_from(&y)?;
    Ok(IValue::Tensor(other))
}

/// `mkl::_mkl_linear(X, MKL_W, ORI_W, B, batch_size)`: PyTorch multiplies by MKL's packed
/// `MKL_W` when X has `batch_size` rows and by `ORI_W` otherwise, the same product; tsrun
/// holds no MKL packing and always uses `ORI_W`.
fn mkl_linear(a: &mut Args<'_>) -> R {
    dense_linear(a, a.tensor(0)?, 2, 3)
}

/// tsrun's MKLDNN ops never run on the Arm Compute Library.
fn is_mkldnn_acl_supported(_: &mut Args<'_>) -> R {
    Ok(IValue::Bool(false))
}

pub(crate) fn register(r: &mut Registry) {
    r.add("mkl::_mkl_linear", mkl_linear);
    r.add("mkldnn::_is_mkldnn_acl_supported", is_mkldnn_acl_supported);
    r.add("aten::to_mkldnn", to_mkldnn);
    r.add("aten::_mkldnn_reshape", mkldnn_reshape);
    r.add("aten::_mkldnn_transpose", mkldnn_transpose);
    r.add("aten::mkldnn_max_pool2d", mkldnn_max_pool::<2>);
    r.add("aten::mkldnn_max_pool3d", mkldnn_max_pool::<3>);
    r.add(
        "aten::mkldnn_adaptive_avg_pool2d",
        mkldnn_adaptive_avg_pool2d,
    );
    r.add("aten::mkldnn_linear", mkldnn_linear);
    r.add_all(
        &[
            "aten::mkldnn_reorder_conv2d_weight",
            "aten::mkldnn_reorder_conv3d_weight",
            "mkldnn::_reorder_convolution_weight",
            "mkldnn::_reorder_linear_weight",
        ],
        reorder_weight,
    );
    r.add("mkldnn::_linear_pointwise", linear_pointwise);
    r.add("mkldnn::_linear_pointwise.binary", linear_pointwise_binary);
    r.add("mkldnn::_convolution_pointwise", convolution_pointwise);
    r.add(
        "mkldnn::_convolution_pointwise.binary",
        convolution_pointwise_binary,
    );
    r.add(
        "mkldnn::_convolution_pointwise_.binary",
        convolution_pointwise_binary_,
    );
    r.add(
        "mkldnn::_convolution_transpose_pointwise",
        convolution_transpose_pointwise,
    );
}
