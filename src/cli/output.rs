//! Writing a method's result for `tsrun run`: an npz (`-o out.npz`) or JSON (`--json`), with
//! nothing dropped.
//!
//! The npz holds one array per leaf, named by its path (`out`, `out.0`, `out.<dictkey>`):
//! tensors and numbers as numeric arrays, strings as numpy unicode (`<U`) arrays. A
//! `structure.json` entry (read it with `np.load(p)["structure.json"]`) records the whole result
//! in the encoding of fixtures/golden_io.py, every leaf carrying the `key` of its array: None
//! leaves, tuple / list / dict nesting, dict keys and NamedTuple class and field names are all
//! recoverable. `--json` prints the same encoding with each tensor's data inline (`"data"`: the
//! elements in row-major order, floats that are not finite as "nan" / "inf" / "-inf").

use crate::error::RuntimeError;
use crate::golden::{entry_leaf_name, item_leaf_name, RESULT_LEAF};
use crate::tensor::{DType, Tensor};
use crate::values::python_str;
use crate::values::IValue;
use crate::Error;
use ndarray_npy::WriteNpyExt;
use num_complex::{Complex32, Complex64};
use serde_json::{json, Value};
use std::io::Write;
use std::path::Path;

/// NamedTuple field names by class name (from the module's compilation unit).
pub type FieldNames<'a> = &'a dyn Fn(&str) -> Option<Vec<String>>;

fn out_err(msg: impl Into<String>) -> Error {
    RuntimeError::Other(msg.into()).into()
}

/// A float for JSON: non-finite values as golden_io.py writes them.
fn json_float(x: f64) -> Value {
    if x.is_nan() {
        json!("nan")
    } else if x.is_infinite() {
        json!(if x > 0.0 { "inf" } else { "-inf" })
    } else {
        json!(x)
    }
}

/// A leaf written as one array.
enum Leaf {
    Tensor(Tensor),
    /// The `.npy` bytes of a numpy unicode array.
    Str(Vec<u8>),
}

/// Arrays for the npz, keyed by leaf path, plus the structure that points at them.
struct Collected {
    arrays: Vec<(String, Leaf)>,
}

/// `.npy` bytes of a tensor (float16/bfloat16 widened to float32, as golden_io.py does).
fn tensor_npy(t: &Tensor, key: &str) -> crate::Result<Vec<u8>> {
    let mut buf = Vec::new();
    let e = |e: ndarray_npy::WriteNpyError| out_err(format!("writing {key}: {e}"));
    match t.dtype() {
        DType::Float32 => t.to_ndarray::<f32>()?.write_npy(&mut buf).map_err(e)?,
        DType::Float64 => t.to_ndarray::<f64>()?.write_npy(&mut buf).map_err(e)?,
        DType::Float16 | DType::BFloat16 => t
            .to_dtype(DType::Float32)?
            .to_ndarray::<f32>()?
            .write_npy(&mut buf)
            .map_err(e)?,
        DType::Int64 => t.to_ndarray::<i64>()?.write_npy(&mut buf).map_err(e)?,
        DType::Int32 => t.to_ndarray::<i32>()?.write_npy(&mut buf).map_err(e)?,
        DType::Int16 => t.to_ndarray::<i16>()?.write_npy(&mut buf).map_err(e)?,
        DType::Int8 => t.to_ndarray::<i8>()?.write_npy(&mut buf).map_err(e)?,
        DType::UInt8 => t.to_ndarray::<u8>()?.write_npy(&mut buf).map_err(e)?,
        DType::Bool => t.to_ndarray::<bool>()?.write_npy(&mut buf).map_err(e)?,
        DType::Complex64 => t
            .to_ndarray::<Complex32>()?
            .write_npy(&mut buf)
            .map_err(e)?,
        DType::Complex128 => t
            .to_ndarray::<Complex64>()?
            .write_npy(&mut buf)
            .map_err(e)?,
        other => return Err(out_err(format!("cannot write {other} tensors ({key})"))),
    }
    Ok(buf)
}

impl Collected {
    /// The structure of `v` (golden_io.py's encoding); leaves written to the npz carry `key`.
    fn encode(&mut self, v: &IValue, key: &str, fields: FieldNames) -> crate::Result<Value> {
        Ok(match v {
            IValue::None => json!({ "none": null }),
            IValue::Tensor(t) => {
                self.arrays.push((key.to_string(), Leaf::Tensor(t.clone())));
                json!({ "tensor": key, "key": key, "dtype": t.dtype().name(), "shape": t.shape() })
            }
            IValue::Bool(b) => {
                self.arrays
                    .push((key.to_string(), Leaf::Tensor(Tensor::scalar(*b))));
                json!({ "bool": b, "key": key })
            }
            IValue::Int(i) => {
                self.arrays
                    .push((key.to_string(), Leaf::Tensor(Tensor::scalar(*i))));
                json!({ "int": i, "key": key })
            }
            IValue::Double(d) => {
                self.arrays
                    .push((key.to_string(), Leaf::Tensor(Tensor::scalar(*d))));
                json!({ "float": json_float(*d), "key": key })
            }
            IValue::Complex(c) => {
                self.arrays
                    .push((key.to_string(), Leaf::Tensor(Tensor::scalar(*c))));
                json!({ "complex": [json_float(c.re), json_float(c.im)], "key": key })
            }
            IValue::String(s) => {
                self.arrays.push((
                    key.to_string(),
                    Leaf::Str(crate::tensor::npy::string_to_npy(s)),
                ));
                json!({ "str": s.as_ref(), "key": key })
            }
            IValue::Device(d) => json!({ "device": python_str(&IValue::Device(*d)) }),
            IValue::List(l) => {
                let items = l.to_vec();
                let mut enc = Vec::with_capacity(items.len());
                for (i, x) in items.iter().enumerate() {
                    enc.push(self.encode(x, &item_leaf_name(key, i), fields)?);
                }
                json!({ "list": enc })
            }
            IValue::Tuple(t) => {
                let mut enc = Vec::with_capacity(t.items().len());
                for (i, x) in t.items().iter().enumerate() {
                    enc.push(self.encode(x, &item_leaf_name(key, i), fields)?);
                }
                match t.class() {
                    Some(class) => {
                        let names = fields(class).unwrap_or_default();
                        json!({ "namedtuple": { "class": class.as_ref(), "fields": names,
                                                "values": enc } })
                    }
                    None => json!({ "tuple": enc }),
                }
            }
            IValue::Dict(d) => {
                let mut enc = Vec::new();
                for (k, x) in d.entries() {
                    let sub = entry_leaf_name(key, &k);
                    let kenc = match &k {
                        IValue::String(s) => json!({ "str": s.as_ref() }),
                        IValue::Int(i) => json!({ "int": i }),
                        IValue::Bool(b) => json!({ "bool": b }),
                        IValue::Double(f) => json!({ "float": json_float(*f) }),
                        other => json!({ "repr": python_str(other) }),
                    };
                    enc.push(json!([kenc, self.encode(&x, &sub, fields)?]));
                }
                json!({ "dict": enc })
            }
            other => {
                return Err(out_err(format!(
                    "cannot write a {} result (at {key})",
                    other.kind_name()
                )))
            }
        })
    }
}

/// Write `v` to `path` by its extension: `.npy` (a tensor result), `.safetensors` (every leaf
/// a tensor or number; the structure in the `structure.json` metadata entry) or `.npz`.
pub fn write_result(path: &Path, v: &IValue, fields: FieldNames) -> crate::Result<()> {
    let bytes = match path.extension().and_then(|e| e.to_str()) {
        Some("npy") => match v {
            IValue::Tensor(t) => {
                crate::tensor::npy::tensor_to_npy(&if t.dtype() == DType::BFloat16 {
                    t.to_dtype(DType::Float32)?
                } else {
                    t.clone()
                })?
            }
            other => {
                return Err(out_err(format!(
                    "{}: a .npy holds one tensor, the result is a {} (write an .npz)",
                    path.display(),
                    other.kind_name()
                )))
            }
        },
        Some("safetensors") => safetensors_result(v, fields)
            .map_err(|e| out_err(format!("{}: {e}", path.display())))?,
        _ => npz_result(v, fields)?,
    };
    crate::archive::write_atomically(path, |w| w.write_all(&bytes))?;
    Ok(())
}

/// Write `v` to the npz at `path`: one array per leaf and `structure.json`.
pub fn write_npz(path: &Path, v: &IValue, fields: FieldNames) -> crate::Result<()> {
    let bytes = npz_result(v, fields)?;
    crate::archive::write_atomically(path, |w| w.write_all(&bytes))?;
    Ok(())
}

fn safetensors_result(v: &IValue, fields: FieldNames) -> crate::Result<Vec<u8>> {
    let mut c = Collected { arrays: Vec::new() };
    let structure = c.encode(v, RESULT_LEAF, fields)?;
    let mut tensors = Vec::new();
    for (key, leaf) in c.arrays {
        match leaf {
            Leaf::Tensor(t) => tensors.push((key, t)),
            Leaf::Str(_) => {
                return Err(out_err(format!(
                    "safetensors cannot hold the string leaf {key} (write an .npz)"
                )))
            }
        }
    }
    let bytes = crate::runtime::module::safetensors_bytes(&tensors)?;
    // the metadata travels in the header: re-serialize with it
    let file = safetensors::SafeTensors::deserialize(&bytes)
        .map_err(|e| out_err(format!("safetensors: {e}")))?;
    let metadata =
        std::collections::HashMap::from([("structure.json".to_string(), structure.to_string())]);
    let views: Vec<(String, safetensors::tensor::TensorView)> = file.tensors();
    safetensors::serialize(views, &Some(metadata)).map_err(|e| out_err(format!("safetensors: {e}")))
}

fn npz_result(v: &IValue, fields: FieldNames) -> crate::Result<Vec<u8>> {
    let mut c = Collected { arrays: Vec::new() };
    let structure = c.encode(v, RESULT_LEAF, fields)?;
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .large_file(true);
    let zerr = |e: zip::result::ZipError| out_err(format!("writing the npz: {e}"));
    let mut seen = std::collections::HashSet::new();
    for (key, leaf) in &c.arrays {
        // dict keys may repeat a path another leaf already has (`{"0": a}` next to index 0)
        if !seen.insert(key.as_str()) {
            return Err(out_err(format!(
                "two result leaves share the npz name {key}"
            )));
        }
        zip.start_file(format!("{key}.npy"), opts).map_err(zerr)?;
        match leaf {
            Leaf::Tensor(t) => zip.write_all(&tensor_npy(t, key)?)?,
            Leaf::Str(bytes) => zip.write_all(bytes)?,
        }
    }
    zip.start_file("structure.json", opts).map_err(zerr)?;
    zip.write_all(structure.to_string().as_bytes())?;
    Ok(zip.finish().map_err(zerr)?.into_inner())
}

/// `value` as indented JSON text.
pub fn pretty_json(value: &Value) -> crate::Result<String> {
    serde_json::to_string_pretty(value)
        .map_err(|e| crate::Error::Module(format!("cannot encode JSON: {e}")))
}

/// The whole result as JSON (`tsrun run --json`): the structure encoding with every tensor's
/// elements inline under `data`.
pub fn to_json(v: &IValue, fields: FieldNames) -> crate::Result<Value> {
    Ok(match v {
        IValue::Tensor(t) => {
            let data: Vec<Value> = match t.dtype() {
                d if d.is_complex() => t
                    .to_vec::<Complex64>()?
                    .into_iter()
                    .map(|c| json!([json_float(c.re), json_float(c.im)]))
                    .collect(),
                d if d.is_floating_point() => {
                    t.to_vec::<f64>()?.into_iter().map(json_float).collect()
                }
                DType::Bool => t.to_vec::<bool>()?.into_iter().map(Value::from).collect(),
                _ => t.to_vec::<i64>()?.into_iter().map(Value::from).collect(),
            };
            json!({ "tensor": { "dtype": t.dtype().name(), "shape": t.shape(), "data": data } })
        }
        IValue::List(l) => json!({ "list": l.to_vec().iter().map(|x| to_json(x, fields))
            .collect::<crate::Result<Vec<_>>>()? }),
        IValue::Tuple(t) => {
            let items = t
                .items()
                .iter()
                .map(|x| to_json(x, fields))
                .collect::<crate::Result<Vec<_>>>()?;
            match t.class() {
                Some(class) => json!({ "namedtuple": { "class": class.as_ref(),
                    "fields": fields(class).unwrap_or_default(), "values": items } }),
                None => json!({ "tuple": items }),
            }
        }
        IValue::Dict(d) => {
            let mut enc = Vec::new();
            for (k, x) in d.entries() {
                enc.push(json!([to_json(&k, fields)?, to_json(&x, fields)?]));
            }
            json!({ "dict": enc })
        }
        // scalars, strings, None: the structure encoding without npz keys
        other => {
            let mut c = Collected { arrays: Vec::new() };
            let mut enc = c.encode(other, "", fields)?;
            if let Some(o) = enc.as_object_mut() {
                o.remove("key");
            }
            enc
        }
    })
}
