//! Quantized tensors (`torch.qint8` / `quint8` / `qint32`): the integer values live in the
//! storage as for `int8` / `uint8` / `int32`; a [`Quantizer`] maps them to reals,
//! `real = (q - zero_point) * scale`, per tensor or per channel along `axis`.

use super::{DType, Tensor, TensorError};
use std::sync::Arc;

/// How a quantized tensor's integers map to reals (PyTorch's `Quantizer`).
#[derive(Clone, Debug, PartialEq)]
pub enum Quantizer {
    /// `torch.per_tensor_affine`: one scale and zero point.
    PerTensorAffine {
        /// The step between representable reals.
        scale: f64,
        /// The integer that represents 0.0.
        zero_point: i64,
    },
    /// `torch.per_channel_affine`: a scale and zero point per index of dimension `axis`.
    PerChannelAffine {
        /// The scale of each channel.
        scales: Arc<[f64]>,
        /// The zero point of each channel.
        zero_points: Arc<[i64]>,
        /// The channel dimension.
        axis: usize,
    },
    /// `torch.per_channel_affine_float_qparams` (quantized embedding weights): a float32 scale
    /// and a float32 zero point per index of `axis`, `real = (q - zero_point) * scale`.
    PerChannelAffineFloatQParams {
        /// The scale of each channel.
        scales: Arc<[f32]>,
        /// The (fractional) zero point of each channel.
        zero_points: Arc<[f32]>,
        /// The channel dimension.
        axis: usize,
    },
}

impl Quantizer {
    /// PyTorch's `QScheme` name (`torch.per_tensor_affine`, ...).
    pub fn qscheme_name(&self) -> &'static str {
        match self {
            Quantizer::PerTensorAffine { .. } => "per_tensor_affine",
            Quantizer::PerChannelAffine { .. } => "per_channel_affine",
            Quantizer::PerChannelAffineFloatQParams { .. } => "per_channel_affine_float_qparams",
        }
    }

    /// PyTorch's `QScheme` number (`at::kPerTensorAffine` = 0, `kPerChannelAffine` = 1,
    /// `kPerChannelAffineFloatQParams` = 4).
    pub fn qscheme_number(&self) -> i64 {
        match self {
            Quantizer::PerTensorAffine { .. } => 0,
            Quantizer::PerChannelAffine { .. } => 1,
            Quantizer::PerChannelAffineFloatQParams { .. } => 4,
        }
    }
}

impl DType {
    /// `qint8` / `quint8` / `qint32` / `quint4x2`.
    pub fn is_quantized(self) -> bool {
        matches!(
            self,
            DType::QInt8 | DType::QUInt8 | DType::QInt32 | DType::QUInt4x2
        )
    }

    /// The plain integer type holding a quantized type's values (`int_repr()`'s dtype).
    pub fn underlying_int(self) -> Option<DType> {
        match self {
            DType::QInt8 => Some(DType::Int8),
            DType::QUInt8 | DType::QUInt4x2 => Some(DType::UInt8),
            DType::QInt32 => Some(DType::Int32),
            _ => None,
        }
    }

    /// The quantized type whose values a plain integer type holds.
    pub fn quantized_of(self) -> Option<DType> {
        match self {
            DType::Int8 => Some(DType::QInt8),
            DType::UInt8 => Some(DType::QUInt8),
            DType::Int32 => Some(DType::QInt32),
            _ => None,
        }
    }

    /// The integer range of a quantized type (`quant_min`, `quant_max`).
    pub fn quantized_range(self) -> Option<(i64, i64)> {
        match self {
            DType::QInt8 => Some((-128, 127)),
            DType::QUInt8 => Some((0, 255)),
            DType::QUInt4x2 => Some((0, 15)),
            DType::QInt32 => Some((i32::MIN as i64, i32::MAX as i64)),
            _ => None,
        }
    }
}

impl Tensor {
    /// The quantizer of a quantized tensor.
    pub fn quantizer(&self) -> Option<&Arc<Quantizer>> {
        self.quantizer.as_ref()
    }

    /// Whether this dtype holds quantized integers.
    pub fn is_quantized(&self) -> bool {
        self.quantizer.is_some()
    }

    /// A quantized tensor viewing the integers of `ints` (`int8` / `uint8` / `int32`, shared
    /// storage) with `quantizer`.
    pub fn quantized_from_ints(ints: &Tensor, quantizer: Quantizer) -> Result<Tensor, TensorError> {
        let qdtype = ints
            .dtype()
            .quantized_of()
            .ok_or_else(|| TensorError::WrongDType {
                op: "quantized_from_ints".into(),
                argument: "ints".into(),
                expected: "int8, uint8 or int32".into(),
                got: ints.dtype(),
            })?;
        Tensor::quantized_from_ints_as(ints, quantizer, qdtype)
    }

    /// [`Tensor::quantized_from_ints`] as quantized type `qdtype` (`quint4x2` from uint8 values,
    /// which must be in its range).
    pub fn quantized_from_ints_as(
        ints: &Tensor,
        quantizer: Quantizer,
        qdtype: DType,
    ) -> Result<Tensor, TensorError> {
        if qdtype.underlying_int() != Some(ints.dtype()) {
            return Err(TensorError::WrongDType {
                op: "quantized_from_ints".into(),
                argument: "ints".into(),
                expected: match qdtype.underlying_int() {
                    Some(d) => format!("{d} (the values of {qdtype})"),
                    None => format!("the values of a quantized dtype, not {qdtype}"),
                },
                got: ints.dtype(),
            });
        }
        if qdtype == DType::QUInt4x2 {
            if let Some(&v) = ints.read::<u8>()?.view().iter().find(|&&v| v > 15) {
                return Err(TensorError::InvalidArgument {
                    op: "quantized_from_ints".into(),
                    argument: "a quint4x2 value".into(),
                    requirement: "must be in 0..=15".into(),
                    value: v.to_string(),
                });
            }
        }
        let channel_params = match &quantizer {
            Quantizer::PerTensorAffine { .. } => None,
            Quantizer::PerChannelAffine {
                scales,
                zero_points,
                axis,
            } => Some((scales.len(), zero_points.len(), *axis)),
            Quantizer::PerChannelAffineFloatQParams {
                scales,
                zero_points,
                axis,
            } => Some((scales.len(), zero_points.len(), *axis)),
        };
        if let Some((n_scales, n_zero_points, axis)) = channel_params {
            let n = ints
                .shape()
                .get(axis)
                .copied()
                .ok_or(TensorError::DimOutOfRange {
                    dim: axis as i64,
                    ndim: ints.dim(),
                })?;
            for (what, got) in [("scales", n_scales), ("zero points", n_zero_points)] {
                if got != n {
                    return Err(TensorError::SizeMismatch {
                        op: "quantized_from_ints".into(),
                        what: format!("the number of {what} (channels along axis {axis})"),
                        expected: n as i64,
                        got: got as i64,
                    });
                }
            }
        }
        let mut t = Tensor::from_parts(
            ints.storage().clone(),
            ints.storage_offset(),
            ints.shape(),
            ints.strides(),
            qdtype,
        )?;
        t.quantizer = Some(Arc::new(quantizer));
        Ok(t)
    }

    /// `int_repr()` without a copy: the integers of a quantized tensor as `int8` / `uint8` /
    /// `int32`, sharing its storage.
    pub fn int_repr_view(&self) -> Result<Tensor, TensorError> {
        let dtype = self
            .dtype()
            .underlying_int()
            .ok_or_else(|| TensorError::WrongDType {
                op: "int_repr".into(),
                argument: "self".into(),
                expected: "quantized".into(),
                got: self.dtype(),
            })?;
        Tensor::from_parts(
            self.storage().clone(),
            self.storage_offset(),
            self.shape(),
            self.strides(),
            dtype,
        )
    }
}

/// `(rows, bytes per row)` of the storage PyTorch allocates for a quint4x2 tensor of `shape`
/// (`get_sub_byte_tensor_size`): the last dimension two values a byte, rounded up; a 0-d
/// tensor takes one byte. (The values fill it in order, not row by row: with an odd last
/// dimension its final bytes are unused.)
fn nibble_layout(shape: &[usize]) -> (usize, usize) {
    match shape.split_last() {
        None => (1, 1),
        Some((&cols, lead)) => (lead.iter().product(), cols.div_ceil(2)),
    }
}

/// The storage bytes PyTorch holds for quint4x2 tensor `t`: its values in order, two a byte,
/// the first in the low nibble, then zeros up to the storage's size.
pub fn pack_nibbles(t: &Tensor) -> Result<Vec<u8>, TensorError> {
    if t.dtype() != DType::QUInt4x2 {
        return Err(TensorError::WrongDType {
            op: "pack_nibbles".into(),
            argument: "t".into(),
            expected: "quint4x2".into(),
            got: t.dtype(),
        });
    }
    let ints = t.int_repr_view()?;
    let guard = ints.read::<u8>()?;
    let (rows, row_bytes) = nibble_layout(t.shape());
    let mut out = vec![0u8; (rows * row_bytes).max(t.numel().div_ceil(2))];
    for (c, &v) in guard.view().iter().enumerate() {
        out[c / 2] |= (v & 0xf) << ((c % 2) * 4);
    }
    Ok(out)
}

/// The values (one a byte) of a quint4x2 tensor of `shape` from the storage bytes PyTorch
/// holds ([`pack_nibbles`]'s layout).
pub fn unpack_nibbles(bytes: &[u8], shape: &[usize]) -> Result<Vec<u8>, TensorError> {
    let (rows, row_bytes) = nibble_layout(shape);
    let need = rows
        .checked_mul(row_bytes)
        .ok_or_else(|| TensorError::InvalidArgument {
            op: "unpack_nibbles".into(),
            argument: "the shape of a quint4x2 tensor".into(),
            requirement: "must have a byte size within usize".into(),
            value: format!("{shape:?}"),
        })?;
    if bytes.len() < need {
        return Err(TensorError::InvalidArgument {
            op: "unpack_nibbles".into(),
            argument: "the storage bytes".into(),
            requirement: format!(
                "must be at least {need} for a quint4x2 tensor of shape {shape:?}"
            ),
            value: bytes.len().to_string(),
        });
    }
    let numel: usize = shape.iter().product();
    Ok((0..numel)
        .map(|c| (bytes[c / 2] >> ((c % 2) * 4)) & 0xf)
        .collect())
}
