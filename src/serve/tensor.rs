//! Tensors as the Open Inference Protocol carries them: a datatype name, a shape and row-major
//! little-endian bytes (the binary tensor extension's and gRPC's raw layout). JSON and gRPC
//! typed contents are converted to and from these bytes, so batching and model calls see one
//! form whatever the transport.

use super::error::InferError;
use crate::tensor::{contiguous_strides, DType, Tensor};
use crate::values::IValue;
use half::{bf16, f16};

/// Dimensions a tensor from the network may have (PyTorch's own limit is 64).
pub const MAX_RANK: usize = 16;

/// The protocol's tensor datatypes that map onto a tsrun dtype (`BYTES` has no tensor form).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataType {
    Bool,
    UInt8,
    UInt16,
    UInt32,
    UInt64,
    Int8,
    Int16,
    Int32,
    Int64,
    Fp16,
    Bf16,
    Fp32,
    Fp64,
}

impl DataType {
    /// Parses the protocol's name (`FP32`, `INT64`, ...).
    pub fn parse(name: &str) -> Result<DataType, InferError> {
        Ok(match name {
            "BOOL" => DataType::Bool,
            "UINT8" => DataType::UInt8,
            "UINT16" => DataType::UInt16,
            "UINT32" => DataType::UInt32,
            "UINT64" => DataType::UInt64,
            "INT8" => DataType::Int8,
            "INT16" => DataType::Int16,
            "INT32" => DataType::Int32,
            "INT64" => DataType::Int64,
            "FP16" => DataType::Fp16,
            "BF16" => DataType::Bf16,
            "FP32" => DataType::Fp32,
            "FP64" => DataType::Fp64,
            "BYTES" => {
                return Err(InferError::BadRequest(
                    "datatype BYTES is not supported: tsrun serves tensor inputs only".into(),
                ))
            }
            other => {
                return Err(InferError::BadRequest(format!(
                    "unknown datatype '{other}'"
                )))
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            DataType::Bool => "BOOL",
            DataType::UInt8 => "UINT8",
            DataType::UInt16 => "UINT16",
            DataType::UInt32 => "UINT32",
            DataType::UInt64 => "UINT64",
            DataType::Int8 => "INT8",
            DataType::Int16 => "INT16",
            DataType::Int32 => "INT32",
            DataType::Int64 => "INT64",
            DataType::Fp16 => "FP16",
            DataType::Bf16 => "BF16",
            DataType::Fp32 => "FP32",
            DataType::Fp64 => "FP64",
        }
    }

    pub fn dtype(self) -> DType {
        match self {
            DataType::Bool => DType::Bool,
            DataType::UInt8 => DType::UInt8,
            DataType::UInt16 => DType::UInt16,
            DataType::UInt32 => DType::UInt32,
            DataType::UInt64 => DType::UInt64,
            DataType::Int8 => DType::Int8,
            DataType::Int16 => DType::Int16,
            DataType::Int32 => DType::Int32,
            DataType::Int64 => DType::Int64,
            DataType::Fp16 => DType::Float16,
            DataType::Bf16 => DType::BFloat16,
            DataType::Fp32 => DType::Float32,
            DataType::Fp64 => DType::Float64,
        }
    }

    /// The protocol datatype of a tsrun dtype; complex and quantized tensors have none.
    pub fn from_dtype(dtype: DType) -> Option<DataType> {
        Some(match dtype {
            DType::Bool => DataType::Bool,
            DType::UInt8 => DataType::UInt8,
            DType::UInt16 => DataType::UInt16,
            DType::UInt32 => DataType::UInt32,
            DType::UInt64 => DataType::UInt64,
            DType::Int8 => DataType::Int8,
            DType::Int16 => DataType::Int16,
            DType::Int32 => DataType::Int32,
            DType::Int64 => DataType::Int64,
            DType::Float16 => DataType::Fp16,
            DType::BFloat16 => DataType::Bf16,
            DType::Float32 => DataType::Fp32,
            DType::Float64 => DataType::Fp64,
            _ => return None,
        })
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        self.dtype().size()
    }
}

/// One named tensor of a request or response.
#[derive(Clone, Debug)]
pub struct WireTensor {
    pub name: String,
    pub datatype: DataType,
    pub shape: Vec<usize>,
    /// Row-major, little-endian elements: exactly `numel * size` bytes.
    pub data: Vec<u8>,
}

/// The element count of `shape`, refusing negative dimensions, too many dimensions and
/// overflow (shapes come from the network).
pub fn checked_shape(shape: &[i64]) -> Result<Vec<usize>, InferError> {
    if shape.len() > MAX_RANK {
        return Err(InferError::BadRequest(format!(
            "shape {shape:?} has more than {MAX_RANK} dimensions"
        )));
    }
    let dims = shape
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<Result<Vec<usize>, _>>()
        .map_err(|_| InferError::BadRequest(format!("shape {shape:?} has a negative dimension")))?;
    numel(&dims)?;
    Ok(dims)
}

/// Elements of `shape`, or a 400 if the product overflows.
pub fn numel(shape: &[usize]) -> Result<usize, InferError> {
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| InferError::BadRequest(format!("shape {shape:?} overflows")))
}

impl WireTensor {
    /// A tensor from raw bytes, checking their length against the shape and, for `BOOL`, that
    /// every byte is 0 or 1 (tsrun's bool tensors refuse other bytes).
    pub fn from_raw(
        name: String,
        datatype: DataType,
        shape: Vec<usize>,
        data: Vec<u8>,
    ) -> Result<WireTensor, InferError> {
        let want = numel(&shape)?
            .checked_mul(datatype.size())
            .ok_or_else(|| InferError::BadRequest(format!("input '{name}': size overflows")))?;
        if data.len() != want {
            return Err(InferError::BadRequest(format!(
                "input '{name}': {} bytes of {} data for shape {shape:?}, expected {want}",
                data.len(),
                datatype.name()
            )));
        }
        if datatype == DataType::Bool && data.iter().any(|&b| b > 1) {
            return Err(InferError::BadRequest(format!(
                "input '{name}': BOOL elements must be 0 or 1"
            )));
        }
        Ok(WireTensor {
            name,
            datatype,
            shape,
            data,
        })
    }

    /// A tensor from JSON `data`: a flat or nested array of numbers (booleans for `BOOL`),
    /// in row-major order.
    pub fn from_json(
        name: String,
        datatype: DataType,
        shape: Vec<usize>,
        data: &serde_json::Value,
    ) -> Result<WireTensor, InferError> {
        let count = numel(&shape)?;
        let mut leaves = Vec::new();
        flatten_json(data, &mut leaves, count, 0).map_err(|e| e.context(&name))?;
        if leaves.len() != count {
            return Err(InferError::BadRequest(format!(
                "input '{name}': {} elements for shape {shape:?}, expected {count}",
                leaves.len()
            )));
        }
        let mut bytes = Vec::with_capacity(count.saturating_mul(datatype.size()));
        for v in leaves {
            push_json_element(datatype, v, &mut bytes).map_err(|e| e.context(&name))?;
        }
        Ok(WireTensor {
            name,
            datatype,
            shape,
            data: bytes,
        })
    }

    /// The tsrun tensor holding a copy of these bytes.
    pub fn to_tensor(&self) -> Result<Tensor, InferError> {
        let storage = crate::tensor::Storage::from_bytes(&self.data)
            .map_err(|e| InferError::BadRequest(format!("input '{}': {e}", self.name)))?;
        Tensor::from_parts(
            storage,
            0,
            &self.shape,
            &contiguous_strides(&self.shape),
            self.datatype.dtype(),
        )
        .map_err(|e| InferError::BadRequest(format!("input '{}': {e}", self.name)))
    }

    /// A named output from a tensor the model returned.
    pub fn from_tensor(name: String, tensor: &Tensor) -> Result<WireTensor, InferError> {
        let datatype = DataType::from_dtype(tensor.dtype()).ok_or_else(|| {
            InferError::Model(format!(
                "output '{name}' has dtype {}, which the protocol cannot carry",
                tensor.dtype()
            ))
        })?;
        let contiguous = tensor
            .contiguous()
            .map_err(|e| InferError::Model(format!("output '{name}': {e}")))?;
        let size = datatype.size();
        let start = contiguous.storage_offset() * size;
        let len = contiguous.numel() * size;
        let storage = contiguous
            .storage()
            .read()
            .map_err(|e| InferError::Model(format!("output '{name}': {e}")))?;
        let data = storage
            .get(start..start + len)
            .ok_or_else(|| InferError::Model(format!("output '{name}': storage too short")))?
            .to_vec();
        Ok(WireTensor {
            name,
            datatype,
            shape: tensor.shape().to_vec(),
            data,
        })
    }

    /// The elements as JSON values (numbers, or booleans for `BOOL`; NaN and infinities,
    /// which JSON cannot write, become null).
    pub fn json_data(&self) -> Vec<serde_json::Value> {
        use serde_json::Value;
        let float = |x: f64| serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number);
        let chunks = self.data.chunks_exact(self.datatype.size());
        macro_rules! each {
            ($t:ty, $conv:expr) => {
                chunks
                    .map(|c| {
                        let mut b = [0u8; std::mem::size_of::<$t>()];
                        b.copy_from_slice(c);
                        #[allow(clippy::redundant_closure_call)]
                        ($conv)(<$t>::from_le_bytes(b))
                    })
                    .collect()
            };
        }
        match self.datatype {
            DataType::Bool => self.data.iter().map(|&b| Value::Bool(b != 0)).collect(),
            DataType::UInt8 => each!(u8, |x: u8| Value::from(x)),
            DataType::UInt16 => each!(u16, |x: u16| Value::from(x)),
            DataType::UInt32 => each!(u32, |x: u32| Value::from(x)),
            DataType::UInt64 => each!(u64, |x: u64| Value::from(x)),
            DataType::Int8 => each!(i8, |x: i8| Value::from(x)),
            DataType::Int16 => each!(i16, |x: i16| Value::from(x)),
            DataType::Int32 => each!(i32, |x: i32| Value::from(x)),
            DataType::Int64 => each!(i64, |x: i64| Value::from(x)),
            DataType::Fp16 => each!(u16, |x: u16| float(f16::from_bits(x).to_f64())),
            DataType::Bf16 => each!(u16, |x: u16| float(bf16::from_bits(x).to_f64())),
            DataType::Fp32 => each!(f32, |x: f32| float(f64::from(x))),
            DataType::Fp64 => each!(f64, float),
        }
    }
}

/// Collects the leaves of a (possibly nested) JSON array, stopping once more than `limit`
/// leaves or 64 levels are seen so a hostile body costs no more than its shape allows.
fn flatten_json<'a>(
    v: &'a serde_json::Value,
    out: &mut Vec<&'a serde_json::Value>,
    limit: usize,
    depth: usize,
) -> Result<(), InferError> {
    match v {
        serde_json::Value::Array(items) => {
            if depth > 64 {
                return Err(InferError::BadRequest("data nested too deeply".into()));
            }
            for item in items {
                flatten_json(item, out, limit, depth + 1)?;
            }
            Ok(())
        }
        leaf => {
            if out.len() >= limit {
                return Err(InferError::BadRequest(
                    "more data elements than the shape holds".into(),
                ));
            }
            out.push(leaf);
            Ok(())
        }
    }
}

/// Appends one JSON element as `datatype`'s little-endian bytes; integers must fit exactly.
fn push_json_element(
    datatype: DataType,
    v: &serde_json::Value,
    out: &mut Vec<u8>,
) -> Result<(), InferError> {
    let bad = || {
        InferError::BadRequest(format!(
            "data element {v} is not a {} value",
            datatype.name()
        ))
    };
    let float = || v.as_f64().ok_or_else(bad);
    macro_rules! int {
        ($t:ty) => {{
            let x: $t = match (v.as_i64(), v.as_u64()) {
                (Some(i), _) => <$t>::try_from(i).map_err(|_| bad())?,
                (None, Some(u)) => <$t>::try_from(u).map_err(|_| bad())?,
                _ => return Err(bad()),
            };
            out.extend_from_slice(&x.to_le_bytes());
        }};
    }
    match datatype {
        DataType::Bool => out.push(u8::from(v.as_bool().ok_or_else(bad)?)),
        DataType::UInt8 => int!(u8),
        DataType::UInt16 => int!(u16),
        DataType::UInt32 => int!(u32),
        DataType::UInt64 => int!(u64),
        DataType::Int8 => int!(i8),
        DataType::Int16 => int!(i16),
        DataType::Int32 => int!(i32),
        DataType::Int64 => int!(i64),
        DataType::Fp16 => out.extend_from_slice(&f16::from_f64(float()?).to_bits().to_le_bytes()),
        DataType::Bf16 => out.extend_from_slice(&bf16::from_f64(float()?).to_bits().to_le_bytes()),
        DataType::Fp32 => out.extend_from_slice(&(float()? as f32).to_le_bytes()),
        DataType::Fp64 => out.extend_from_slice(&float()?.to_le_bytes()),
    }
    Ok(())
}

/// The named outputs of a model's result: a tensor is `names[0]`, a tuple or list of tensors
/// one output per element, a `Dict[str, Tensor]` one per key (keys are the names when the
/// model has no configured output names); numbers and booleans become 0-d tensors.
pub fn outputs_of(result: &IValue, names: &[String]) -> Result<Vec<WireTensor>, InferError> {
    let name_at = |i: usize| {
        names
            .get(i)
            .cloned()
            .unwrap_or_else(|| format!("output__{i}"))
    };
    match result {
        IValue::Tuple(t) => leaves(t.items().iter().cloned(), name_at),
        IValue::List(l) => leaves(l.to_vec().into_iter(), name_at),
        IValue::Dict(d) => {
            let items = d.items();
            let mut out = Vec::with_capacity(items.len());
            for (i, (k, v)) in items.values().enumerate() {
                let name = match (names.get(i), k) {
                    (Some(n), _) => n.clone(),
                    (None, IValue::String(s)) => s.to_string(),
                    (None, _) => name_at(i),
                };
                out.push(leaf(name, v)?);
            }
            Ok(out)
        }
        single => Ok(vec![leaf(name_at(0), single)?]),
    }
}

fn leaves(
    items: impl Iterator<Item = IValue>,
    name_at: impl Fn(usize) -> String,
) -> Result<Vec<WireTensor>, InferError> {
    items
        .enumerate()
        .map(|(i, v)| leaf(name_at(i), &v))
        .collect()
}

fn leaf(name: String, v: &IValue) -> Result<WireTensor, InferError> {
    let tensor = match v {
        IValue::Tensor(t) => t.clone(),
        IValue::Int(i) => Tensor::scalar(*i),
        IValue::Double(d) => Tensor::scalar(*d),
        IValue::Bool(b) => Tensor::scalar(*b),
        other => {
            return Err(InferError::Model(format!(
                "output '{name}' is a {}, not a tensor",
                other.kind_name()
            )))
        }
    };
    WireTensor::from_tensor(name, &tensor)
}
