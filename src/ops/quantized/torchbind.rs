//! The packed-weight classes quantized modules hold, as torchbind objects whose content is
//! exactly the state PyTorch's `__getstate__` gives (so archives re-save in PyTorch's form):
//! - `Conv2dPackedParamsBase` / `Conv3dPackedParamsBase` (conv_serialization.h, version 2):
//!   `("2", [params: int16 [spatial_dim, stride.., padding.., dilation.., output_padding..,
//!   groups, transpose], weight], [bias?])`; conv1d packs as 2-d with a unit height.
//! - `LinearPackedParamsBase`: `(weight, bias?)`; an int8 weight for `linear_prepack`, a float
//!   weight for `linear_prepack_fp16`.
//! - `EmbeddingPackedParamsBase` (version 1): `(1, [weight], [], [bit_rate])`, the weight a
//!   `per_channel_affine_float_qparams` quint8 tensor (rows along axis 0).

use super::unsupported;
use crate::ops::kernels::{
    check_rank, invalid_argument, size_mismatch, unsupported_feature, wrong_dtype,
};
use crate::tensor::{DType, RankRequirement, Tensor};
use crate::values::types::Type;
use crate::values::{IValue, List, Object, Tuple};
use crate::Result;

pub const CONV2D_CLASS: &str = "__torch__.torch.classes.quantized.Conv2dPackedParamsBase";
pub const CONV3D_CLASS: &str = "__torch__.torch.classes.quantized.Conv3dPackedParamsBase";
pub const LINEAR_CLASS: &str = "__torch__.torch.classes.quantized.LinearPackedParamsBase";
pub const EMBEDDING_CLASS: &str = "__torch__.torch.classes.quantized.EmbeddingPackedParamsBase";

/// A convolution's prepacked parameters (weights as PyTorch stores them: `[out, in/groups,
/// k...]`, transposed convolutions `[in, out/groups, k...]`).
#[derive(Clone, Debug)]
pub struct ConvParams {
    pub stride: Vec<i64>,
    pub padding: Vec<i64>,
    pub dilation: Vec<i64>,
    pub output_padding: Vec<i64>,
    pub groups: i64,
    pub transpose: bool,
    pub weight: Tensor,
    pub bias: Option<Tensor>,
}

impl ConvParams {
    pub fn spatial_dims(&self) -> usize {
        self.stride.len()
    }

    /// The packed object (`spatial` 3 gives a `Conv3dPackedParamsBase`).
    pub fn to_object(&self) -> Result<Object> {
        let mut params: Vec<i16> = vec![self.spatial_dims() as i16];
        for v in [
            &self.stride,
            &self.padding,
            &self.dilation,
            &self.output_padding,
        ] {
            params.extend(v.iter().map(|&x| x as i16));
        }
        params.push(self.groups as i16);
        params.push(i16::from(self.transpose));
        let n = params.len();
        let params = Tensor::from_vec(params, &[n])?;
        let tensors = List::new(
            Type::Tensor,
            vec![IValue::Tensor(params), IValue::Tensor(self.weight.clone())],
        );
        let bias = List::new(
            Type::Optional(Box::new(Type::Tensor)),
            vec![self
                .bias
                .clone()
                .map(IValue::Tensor)
                .unwrap_or(IValue::None)],
        );
        let class = if self.spatial_dims() == 3 {
            CONV3D_CLASS
        } else {
            CONV2D_CLASS
        };
        Ok(Object::with_state(
            class.into(),
            IValue::Tuple(Tuple::new(vec![
                IValue::str("2"),
                IValue::List(tensors),
                IValue::List(bias),
            ])),
        ))
    }

    /// Read a packed object (version-2 state).
    pub fn from_object(obj: &Object) -> Result<ConvParams> {
        let bad = |what: &str| {
            unsupported(
                obj.class_name(),
                format!("packed convolution state {what} (tsrun reads version 2)"),
            )
        };
        let Some(IValue::Tuple(state)) = obj.state() else {
            return Err(bad("is not a tuple"));
        };
        let items = state.items();
        match items.first() {
            Some(IValue::String(v)) if &**v == "2" => {}
            _ => return Err(bad("has an unknown version")),
        }
        let tensors = match items.get(1) {
            Some(IValue::List(l)) => l.to_vec(),
            _ => return Err(bad("has no tensor list")),
        };
        let (Some(IValue::Tensor(params)), Some(IValue::Tensor(weight))) =
            (tensors.first(), tensors.get(1))
        else {
            return Err(bad("lacks the parameter or weight tensor"));
        };
        let bias = match items.get(2) {
            Some(IValue::List(l)) => match l.to_vec().first() {
                Some(IValue::Tensor(b)) => Some(b.clone()),
                _ => None,
            },
            _ => None,
        };
        let p = params.to_vec::<i64>()?;
        let k = usize::try_from(*p.first().ok_or_else(|| bad("has empty parameters"))?)
            .map_err(|_| bad("has a negative spatial rank"))?;
        if !(1..=3).contains(&k) || p.len() != 3 + 4 * k {
            return Err(bad("has parameters of the wrong length"));
        }
        let part = |i: usize| p[1 + i * k..1 + (i + 1) * k].to_vec();
        Ok(ConvParams {
            stride: part(0),
            padding: part(1),
            dilation: part(2),
            output_padding: part(3),
            groups: p[1 + 4 * k],
            transpose: p[2 + 4 * k] != 0,
            weight: weight.clone(),
            bias,
        })
    }
}

/// A linear layer's prepacked parameters.
#[derive(Clone, Debug)]
pub struct LinearParams {
    /// `qint8` (int8 GEMM) or `float32` (the fp16 variant, which rounds it to half).
    pub weight: Tensor,
    pub bias: Option<Tensor>,
}

impl LinearParams {
    pub fn to_object(&self) -> Object {
        Object::with_state(
            LINEAR_CLASS.into(),
            IValue::Tuple(Tuple::new(vec![
                IValue::Tensor(self.weight.clone()),
                self.bias
                    .clone()
                    .map(IValue::Tensor)
                    .unwrap_or(IValue::None),
            ])),
        )
    }

    pub fn from_object(obj: &Object) -> Result<LinearParams> {
        let Some(IValue::Tuple(state)) = obj.state() else {
            return Err(unsupported(
                obj.class_name(),
                "packed linear state is not a (weight, bias) tuple",
            ));
        };
        match state.items() {
            [IValue::Tensor(w), b] => Ok(LinearParams {
                weight: w.clone(),
                bias: match b {
                    IValue::Tensor(b) => Some(b.clone()),
                    _ => None,
                },
            }),
            _ => Err(unsupported(
                obj.class_name(),
                "packed linear state is not a (weight, bias) tuple",
            )),
        }
    }

    pub fn is_fp16(&self) -> bool {
        self.weight.dtype() == DType::Float32
    }
}

/// A quantized embedding's packed weight: quint8 (8-bit rows) or quint4x2 (4-bit rows) with
/// per-row float scales and zero points.
#[derive(Clone, Debug)]
pub struct EmbeddingParams {
    pub weight: Tensor,
}

/// The serialization version `PackedEmbeddingBagWeight` writes and reads.
const EMBEDDING_VERSION: i64 = 1;

impl EmbeddingParams {
    /// `PackedEmbeddingBagWeight::prepack`'s checks: a 2-d quint8 weight quantized per row with
    /// float qparams.
    pub fn new(op: &str, weight: Tensor) -> Result<EmbeddingParams> {
        check_rank(op, "weight", RankRequirement::Exactly(2), weight.shape())?;
        if !matches!(weight.dtype(), DType::QUInt8 | DType::QUInt4x2) {
            return Err(wrong_dtype(
                op,
                "weight",
                "quint8 or quint4x2",
                weight.dtype(),
            ));
        }
        match weight.quantizer().map(|q| &**q) {
            Some(crate::tensor::Quantizer::PerChannelAffineFloatQParams { axis: 0, .. }) => {
                // (PyTorch packs the values in one sequence, then copies rows of
                // ceil(cols / 2) bytes: with odd columns the rows straddle bytes and the last
                // reads past the values, into uninitialized memory)
                if weight.dtype() == DType::QUInt4x2 && !weight.shape()[1].is_multiple_of(2) {
                    return Err(unsupported_feature(
                        op,
                        format!(
                            "a quint4x2 weight with an odd number of columns ({}; PyTorch's \
                             packed rows of such weights straddle bytes)",
                            weight.shape()[1]
                        ),
                    ));
                }
                Ok(EmbeddingParams { weight })
            }
            _ => Err(invalid_argument(
                op,
                "the weight's qscheme",
                "must be per_channel_affine_float_qparams along axis 0",
                "another quantization",
            )),
        }
    }

    /// The bits per value (`bit_rate()`).
    pub fn bit_rate(&self) -> i64 {
        if self.weight.dtype() == DType::QUInt4x2 {
            4
        } else {
            8
        }
    }

    pub fn to_object(&self) -> Object {
        Object::with_state(
            EMBEDDING_CLASS.into(),
            IValue::Tuple(Tuple::new(vec![
                IValue::Int(EMBEDDING_VERSION),
                IValue::List(List::new(
                    Type::Tensor,
                    vec![IValue::Tensor(self.weight.clone())],
                )),
                IValue::List(List::new(Type::Float, Vec::new())),
                IValue::List(List::new(Type::Int, vec![IValue::Int(self.bit_rate())])),
            ])),
        )
    }

    /// Read a packed object (`__setstate__`'s checks: version 1, one weight, one bit rate).
    pub fn from_object(obj: &Object) -> Result<EmbeddingParams> {
        let bad = |what: &str| {
            unsupported(
                obj.class_name(),
                format!("packed embedding state {what} (tsrun reads version 1)"),
            )
        };
        let Some(IValue::Tuple(state)) = obj.state() else {
            return Err(bad("is not a tuple"));
        };
        let [IValue::Int(version), IValue::List(tensors), _, IValue::List(longs)] = state.items()
        else {
            return Err(bad("is not (version, tensors, doubles, longs)"));
        };
        if *version != EMBEDDING_VERSION {
            return Err(bad("has an unknown version"));
        }
        let (tensors, longs) = (tensors.to_vec(), longs.to_vec());
        let ([IValue::Tensor(weight)], [IValue::Int(_bit_rate)]) = (&tensors[..], &longs[..])
        else {
            return Err(bad("lacks its weight or bit rate"));
        };
        EmbeddingParams::new(obj.class_name(), weight.clone())
    }
}

/// The packed object passed as argument `i`.
pub(crate) fn packed_arg(a: &crate::ops::Args<'_>, i: usize) -> Result<Object> {
    match a.get(i)? {
        IValue::Object(o) if o.is_torchbind() => Ok(o.clone()),
        other => Err(invalid_argument(
            a.op,
            format!("argument {i}"),
            "must be packed quantized parameters",
            other.kind_name(),
        )),
    }
}

fn weight_bias(w: Tensor, b: Option<Tensor>) -> IValue {
    IValue::Tuple(Tuple::new(vec![
        IValue::Tensor(w),
        b.map(IValue::Tensor).unwrap_or(IValue::None),
    ]))
}

fn int_list(v: &[i64]) -> IValue {
    IValue::List(List::new(
        Type::Int,
        v.iter().map(|&x| IValue::Int(x)).collect(),
    ))
}

/// A method of a torchbind object (signatures in `ir::torchbind`).
pub fn call_method(obj: &Object, name: &str, args: &[IValue]) -> Result<IValue> {
    if args.len() != 1 {
        return Err(size_mismatch(
            &**obj.class_name(),
            format!("the number of arguments of method {name} (self only)"),
            1,
            args.len() as i64,
        ));
    }
    let class = &**obj.class_name();
    if class == LINEAR_CLASS {
        let p = LinearParams::from_object(obj)?;
        return match name {
            "unpack" => Ok(weight_bias(p.weight, p.bias)),
            "bias" => Ok(p.bias.map(IValue::Tensor).unwrap_or(IValue::None)),
            _ => Err(unsupported_feature(class, format!("method {name}"))),
        };
    }
    if class == EMBEDDING_CLASS {
        let p = EmbeddingParams::from_object(obj)?;
        return match name {
            "unpack" => Ok(IValue::Tensor(p.weight)),
            "bit_rate" => Ok(IValue::Int(p.bit_rate())),
            "version" => Ok(IValue::Int(EMBEDDING_VERSION)),
            _ => Err(unsupported_feature(class, format!("method {name}"))),
        };
    }
    if class == CONV2D_CLASS || class == CONV3D_CLASS {
        let p = ConvParams::from_object(obj)?;
        return match name {
            "unpack" => Ok(weight_bias(p.weight, p.bias)),
            "weight" => Ok(IValue::Tensor(p.weight)),
            "bias" => Ok(p.bias.map(IValue::Tensor).unwrap_or(IValue::None)),
            "stride" => Ok(int_list(&p.stride)),
            "padding" => Ok(int_list(&p.padding)),
            "dilation" => Ok(int_list(&p.dilation)),
            "output_padding" => Ok(int_list(&p.output_padding)),
            "groups" => Ok(IValue::Int(p.groups)),
            "transpose" => Ok(IValue::Bool(p.transpose)),
            _ => Err(unsupported_feature(class, format!("method {name}"))),
        };
    }
    Err(unsupported_feature(
        class,
        format!("the torchbind class (method {name})"),
    ))
}
