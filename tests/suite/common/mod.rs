//! Shared helpers for golden tests: decode values written by fixtures/golden_io.py, compare
//! results with PyTorch's tolerances, and run operator cases from fixtures/ops/.
#![allow(dead_code)]

use ndarray::{ArrayD, IxDyn, OwnedRepr};
use ndarray_npy::NpzReader;
use num_complex::{Complex32, Complex64};
use serde_json::Value;
use std::fs::File;
use std::path::{Path, PathBuf};
use tsrun::internals::ops::{Args, OpContext, Registry};
use tsrun::internals::tensor::{DType, Tensor};
use tsrun::internals::values::{Device, Dict, EnumValue, IValue, List, Object, Tuple};

/// The repository's fixtures directory.
pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// A fresh folder under the system's temporary directory, named after the test, the process
/// and a per-process count (tests run in parallel threads), removed with everything in it when
/// dropped: test runs leave nothing behind.
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    pub fn new(tag: &str) -> ScratchDir {
        static COUNT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let pid = std::process::id();
        let dir = std::env::temp_dir().join(format!("tsrun-{tag}-{pid}-{n}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        ScratchDir(dir)
    }
}

impl std::ops::Deref for ScratchDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for ScratchDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An open npz of golden tensors. A key decoded again gives the same tensor (golden_io.py
/// encodes one tensor object met twice in a case's arguments as one key: identity matters for
/// tensors used as dict keys).
pub struct Arrays(NpzReader<File>, std::collections::HashMap<String, Tensor>);

impl Arrays {
    pub fn open(path: &Path) -> Arrays {
        let f = File::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
        Arrays(
            NpzReader::new(f).unwrap_or_else(|e| panic!("npz {}: {e}", path.display())),
            Default::default(),
        )
    }

    fn read<T: ndarray_npy::ReadableElement>(&mut self, key: &str) -> ArrayD<T> {
        self.0
            .by_name::<OwnedRepr<T>, IxDyn>(key)
            .or_else(|_| self.0.by_name::<OwnedRepr<T>, IxDyn>(&format!("{key}.npy")))
            .unwrap_or_else(|e| panic!("npz key {key}: {e}"))
    }

    /// The tensor stored under `key`, as `dtype` (float16/bfloat16 are stored as float32,
    /// complex32 as complex64, float8 as their uint8 codes).
    pub fn tensor(&mut self, key: &str, dtype: DType) -> Tensor {
        if let Some(t) = self.1.get(key) {
            return t.clone();
        }
        let t = match dtype {
            DType::Float32 | DType::Float16 | DType::BFloat16 => {
                Tensor::from_ndarray(self.read::<f32>(key))
            }
            DType::Float64 => Tensor::from_ndarray(self.read::<f64>(key)),
            DType::Int64 => Tensor::from_ndarray(self.read::<i64>(key)),
            DType::Int32 => Tensor::from_ndarray(self.read::<i32>(key)),
            DType::Int16 => Tensor::from_ndarray(self.read::<i16>(key)),
            DType::Int8 => Tensor::from_ndarray(self.read::<i8>(key)),
            DType::UInt8 => Tensor::from_ndarray(self.read::<u8>(key)),
            DType::UInt16 => Tensor::from_ndarray(self.read::<u16>(key)),
            DType::UInt32 => Tensor::from_ndarray(self.read::<u32>(key)),
            DType::UInt64 => Tensor::from_ndarray(self.read::<u64>(key)),
            DType::Bool => Tensor::from_ndarray(self.read::<bool>(key)),
            DType::Complex64 => Tensor::from_ndarray(self.read::<Complex32>(key)),
            DType::Complex128 => Tensor::from_ndarray(self.read::<Complex64>(key)),
            // complex32 is stored as complex64 (exact); float8 as its codes
            DType::Complex32 => Tensor::from_ndarray(self.read::<Complex32>(key)),
            DType::Float8E5M2
            | DType::Float8E4M3FN
            | DType::Float8E5M2FNUZ
            | DType::Float8E4M3FNUZ
            | DType::Float8E8M0FNU => {
                let codes = Tensor::from_ndarray(self.read::<u8>(key)).expect("float8 codes");
                Tensor::from_parts(
                    codes.storage().clone(),
                    0,
                    codes.shape(),
                    codes.strides(),
                    dtype,
                )
            }
            other => panic!("golden tensor dtype {other} not decodable"),
        }
        .expect("golden tensor");
        let t = t.to_dtype(dtype).expect("golden dtype conversion");
        self.1.insert(key.to_string(), t.clone());
        t
    }
}

fn json_f64(v: &Value) -> f64 {
    match v {
        Value::String(s) if s == "nan" => f64::NAN,
        Value::String(s) if s == "inf" => f64::INFINITY,
        Value::String(s) if s == "-inf" => f64::NEG_INFINITY,
        v => v.as_f64().expect("float"),
    }
}

/// Decode one encoded value (see fixtures/golden_io.py).
pub fn decode(v: &Value, arrays: &mut Arrays) -> IValue {
    let obj = v.as_object().expect("encoded value is an object");
    if obj.contains_key("qtensor") {
        return IValue::Tensor(decode_qtensor(obj, arrays));
    }
    if obj.contains_key("nested") {
        return IValue::Tensor(decode_nested(obj, arrays));
    }
    if obj.contains_key("sparse") {
        return IValue::Tensor(decode_sparse(obj, arrays));
    }
    // serde_json maps are sorted: a tensor's "dtype"/"shape" keys sort before its "tensor" tag.
    let (tag, body) = obj
        .iter()
        .find(|(k, _)| k.as_str() != "dtype" && k.as_str() != "shape")
        .expect("encoded value has a tag");
    match tag.as_str() {
        "tensor" => {
            let dtype =
                DType::from_name(obj["dtype"].as_str().expect("dtype")).expect("known dtype");
            let t = arrays.tensor(body.as_str().expect("key"), dtype);
            // numpy stores 0-d arrays as shape [1]: restore the shape recorded in the JSON.
            let shape: Vec<usize> = obj["shape"]
                .as_array()
                .expect("shape")
                .iter()
                .map(|d| d.as_u64().expect("dim") as usize)
                .collect();
            let t = if t.shape() != shape.as_slice() && t.numel() == shape.iter().product::<usize>()
            {
                let t = t.contiguous().expect("contiguous golden");
                t.as_strided(
                    &shape,
                    &tsrun::internals::tensor::contiguous_strides(&shape),
                    t.storage_offset(),
                )
                .expect("golden reshape")
            } else {
                t
            };
            IValue::Tensor(t)
        }
        "storage" => IValue::Storage(
            arrays
                .tensor(body.as_str().expect("key"), DType::UInt8)
                .contiguous()
                .expect("contiguous storage bytes")
                .storage()
                .clone(),
        ),
        "none" => IValue::None,
        "bool" => IValue::Bool(body.as_bool().expect("bool")),
        "int" => IValue::Int(body.as_i64().expect("int")),
        "float" => IValue::Double(json_f64(body)),
        "complex" => IValue::Complex(Complex64::new(json_f64(&body[0]), json_f64(&body[1]))),
        "str" => IValue::str(body.as_str().expect("str")),
        "device" => IValue::Device(Device::parse(body.as_str().expect("device")).expect("device")),
        "await" => IValue::Await(std::sync::Arc::new(decode(body, arrays))),
        "future" => IValue::Future(std::sync::Arc::new(
            tsrun::internals::values::FutureValue::completed(Ok(decode(body, arrays))),
        )),
        // a generator as seeding leaves it
        "generator" => IValue::Generator(std::sync::Arc::new(parking_lot::Mutex::new(
            tsrun::internals::values::Generator::new(body.as_u64().expect("generator seed")),
        ))),
        "list" => {
            let items: Vec<IValue> = body
                .as_array()
                .expect("list")
                .iter()
                .map(|x| decode(x, arrays))
                .collect();
            IValue::List(List::new(tsrun::internals::values::Type::Any, items))
        }
        "tuple" => IValue::Tuple(Tuple::new(
            body.as_array()
                .expect("tuple")
                .iter()
                .map(|x| decode(x, arrays))
                .collect(),
        )),
        "dict" => {
            let d = Dict::new(
                tsrun::internals::values::Type::Any,
                tsrun::internals::values::Type::Any,
            );
            for kv in body.as_array().expect("dict") {
                d.insert(decode(&kv[0], arrays), decode(&kv[1], arrays))
                    .expect("hashable key");
            }
            IValue::Dict(d)
        }
        "object" => {
            let class = body["class"].as_str().expect("object class");
            let fields: indexmap::IndexMap<std::sync::Arc<str>, IValue> = body["fields"]
                .as_array()
                .expect("object fields")
                .iter()
                .map(|kv| {
                    (
                        kv[0].as_str().expect("field name").into(),
                        decode(&kv[1], arrays),
                    )
                })
                .collect();
            IValue::Object(Object::new(class.into(), fields))
        }
        "enum" => IValue::Enum(std::sync::Arc::new(EnumValue {
            class: body["class"].as_str().expect("enum class").into(),
            name: body["name"].as_str().expect("enum member name").into(),
            value: decode(&body["value"], arrays),
        })),
        "packed" => {
            // a packed-parameters argument: the prepack call that makes it, run by tsrun
            let op = body["op"].as_str().expect("prepack op");
            let (name, overload) = op.split_once('.').unwrap_or((op, ""));
            let kernel = Registry::global()
                .lookup(name, overload)
                .unwrap_or_else(|| panic!("no kernel {op} for a packed argument"));
            let mut args: Vec<IValue> = body["args"]
                .as_array()
                .expect("prepack args")
                .iter()
                .map(|a| decode(a, arrays))
                .collect();
            let ctx = OpContext::default();
            kernel(&mut Args::new(op, &mut args, &ctx))
                .unwrap_or_else(|e| panic!("{op} for a packed argument: {e}"))
        }
        "tensor_meta" => {
            panic!("tensor_meta (attribute goldens) carries no data: compare dtype/shape")
        }
        other => panic!("unknown golden tag {other}"),
    }
}

/// A nested tensor (golden_io.py `_encode_nested`): its components, dtype and dim.
fn decode_nested(obj: &serde_json::Map<String, Value>, arrays: &mut Arrays) -> Tensor {
    let components: Vec<Tensor> = obj["nested"]
        .as_array()
        .expect("nested components")
        .iter()
        .map(|c| match decode(c, arrays) {
            IValue::Tensor(t) => t,
            other => panic!("nested component is {other:?}"),
        })
        .collect();
    let dim = obj["dim"].as_u64().expect("dim") as usize;
    if components.is_empty() {
        let dtype = DType::from_name(obj["dtype"].as_str().expect("dtype")).expect("dtype");
        let buffer = Tensor::zeros(&[0], dtype).expect("buffer");
        return Tensor::nested_view(&buffer, dim - 1, vec![], vec![], vec![]).expect("nested");
    }
    let IValue::Tensor(buffer) = decode(&obj["buffer"], arrays) else {
        panic!("nested buffer is not a tensor")
    };
    let rows = |key: &str| -> Vec<Vec<i64>> {
        obj[key]
            .as_array()
            .expect("geometry rows")
            .iter()
            .map(|r| {
                r.as_array()
                    .expect("row")
                    .iter()
                    .map(|v| v.as_i64().expect("int"))
                    .collect()
            })
            .collect()
    };
    let sizes = rows("sizes")
        .iter()
        .map(|r| r.iter().map(|&v| v as usize).collect())
        .collect();
    let strides = rows("strides")
        .iter()
        .map(|r| r.iter().map(|&v| v as isize).collect())
        .collect();
    let offsets = obj["offsets"]
        .as_array()
        .expect("offsets")
        .iter()
        .map(|v| v.as_u64().expect("offset") as usize)
        .collect();
    let t = Tensor::nested_view(&buffer, dim - 1, sizes, strides, offsets).expect("nested golden");
    let parts = t.nested_parts().expect("nested");
    assert_eq!(parts.len(), components.len(), "nested golden components");
    t
}

/// Nested tensors against PyTorch's: the same geometry over the buffer, each component equal.
fn compare_nested(g: &Tensor, w: &Tensor, rtol: f64, atol: f64, path: &str) -> Result<(), String> {
    let (Some(gp), Some(wp)) = (g.nested_parts(), w.nested_parts()) else {
        return Err(format!(
            "{path}: nested {}, want nested {}",
            g.is_nested(),
            w.is_nested()
        ));
    };
    if gp.len() != wp.len() || gp.component_dim() != wp.component_dim() {
        return Err(format!(
            "{path}: {} components of {} dims, want {} of {}",
            gp.len(),
            gp.component_dim(),
            wp.len(),
            wp.component_dim()
        ));
    }
    if gp.sizes() != wp.sizes() || gp.strides() != wp.strides() || gp.offsets() != wp.offsets() {
        return Err(format!(
            "{path}: geometry (sizes, strides, offsets) {:?} {:?} {:?}, want {:?} {:?} {:?}",
            gp.sizes(),
            gp.strides(),
            gp.offsets(),
            wp.sizes(),
            wp.strides(),
            wp.offsets()
        ));
    }
    let (gc, wc) = (
        gp.components().map_err(|e| e.to_string())?,
        wp.components().map_err(|e| e.to_string())?,
    );
    for (i, (a, b)) in gc.iter().zip(&wc).enumerate() {
        compare_tensors(a, b, rtol, atol, &format!("{path}.component{i}"))?;
    }
    Ok(())
}

/// A sparse tensor (golden_io.py `_encode_sparse`): its layout, size and components.
fn decode_sparse(obj: &serde_json::Map<String, Value>, arrays: &mut Arrays) -> Tensor {
    use tsrun::internals::tensor::Layout;
    let size: Vec<usize> = obj["size"]
        .as_array()
        .expect("size")
        .iter()
        .map(|d| d.as_u64().expect("dim") as usize)
        .collect();
    let mut part = |key: &str| match decode(&obj[key], arrays) {
        IValue::Tensor(t) => t,
        other => panic!("sparse component {key} is {other:?}"),
    };
    let layout = match obj["sparse"].as_str().expect("layout") {
        "sparse_coo" => Layout::SparseCoo,
        "sparse_csr" => Layout::SparseCsr,
        "sparse_csc" => Layout::SparseCsc,
        "sparse_bsr" => Layout::SparseBsr,
        "sparse_bsc" => Layout::SparseBsc,
        other => panic!("unknown sparse layout {other}"),
    };
    if layout == Layout::SparseCoo {
        let (indices, values) = (part("indices"), part("values"));
        let coalesced = obj["coalesced"].as_bool().expect("coalesced");
        Tensor::sparse_coo(indices, values, &size, coalesced).expect("sparse golden")
    } else {
        let (c, p, v) = (
            part("compressed_indices"),
            part("plain_indices"),
            part("values"),
        );
        Tensor::sparse_compressed(layout, c, p, v, &size).expect("sparse golden")
    }
}

/// Sparse tensors against PyTorch's: the same layout, size and coalesced flag, indices
/// equal and values within the tolerance.
fn compare_sparse(g: &Tensor, w: &Tensor, rtol: f64, atol: f64, path: &str) -> Result<(), String> {
    use tsrun::internals::tensor::SparseParts;
    let (Some(gp), Some(wp)) = (g.sparse_parts(), w.sparse_parts()) else {
        return Err(format!(
            "{path}: layout {}, want {}",
            g.layout(),
            w.layout()
        ));
    };
    if gp.layout() != wp.layout() {
        return Err(format!(
            "{path}: layout {}, want {}",
            gp.layout(),
            wp.layout()
        ));
    }
    match (gp, wp) {
        (
            SparseParts::Coo {
                indices: gi,
                values: gv,
                ..
            },
            SparseParts::Coo {
                indices: wi,
                values: wv,
                ..
            },
        ) => {
            let (gc, wc) = (gp.is_coalesced(), wp.is_coalesced());
            if gc != wc {
                return Err(format!("{path}: is_coalesced {gc}, want {wc}"));
            }
            compare_tensors(gi, wi, 0.0, 0.0, &format!("{path}.indices"))?;
            compare_tensors(gv, wv, rtol, atol, &format!("{path}.values"))
        }
        (
            SparseParts::Compressed {
                compressed_indices: gc,
                plain_indices: gpl,
                values: gv,
                ..
            },
            SparseParts::Compressed {
                compressed_indices: wc,
                plain_indices: wpl,
                values: wv,
                ..
            },
        ) => {
            compare_tensors(gc, wc, 0.0, 0.0, &format!("{path}.compressed_indices"))?;
            compare_tensors(gpl, wpl, 0.0, 0.0, &format!("{path}.plain_indices"))?;
            compare_tensors(gv, wv, rtol, atol, &format!("{path}.values"))
        }
        _ => Err(format!("{path}: sparse parts differ in kind")),
    }
}

/// A quantized tensor (golden_io.py `_encode_quantized`): its integers and quantizer.
fn decode_qtensor(obj: &serde_json::Map<String, Value>, arrays: &mut Arrays) -> Tensor {
    use tsrun::internals::tensor::Quantizer;
    let qdtype = DType::from_name(obj["dtype"].as_str().expect("dtype")).expect("known dtype");
    let int_dtype = qdtype.underlying_int().expect("a quantized dtype");
    let key = obj["qtensor"].as_str().expect("key");
    let shape: Vec<usize> = obj["shape"]
        .as_array()
        .expect("shape")
        .iter()
        .map(|d| d.as_u64().expect("dim") as usize)
        .collect();
    let ints = arrays
        .tensor(key, int_dtype)
        .contiguous()
        .expect("contiguous");
    // numpy stores 0-d arrays as shape [1]: the JSON's shape
    let ints = ints
        .as_strided(
            &shape,
            &tsrun::internals::tensor::contiguous_strides(&shape),
            ints.storage_offset(),
        )
        .expect("golden reshape");
    // a layout the case pins (channels-last): the integers laid out densely with its strides
    let ints = match obj.get("strides").and_then(Value::as_array) {
        Some(strides) => {
            let strides: Vec<isize> = strides
                .iter()
                .map(|s| s.as_i64().expect("stride") as isize)
                .collect();
            let numel: usize = shape.iter().product();
            let laid = Tensor::zeros(&[numel], int_dtype)
                .expect("golden storage")
                .as_strided(&shape, &strides, 0)
                .expect("golden strides");
            laid.copy_from(&ints).expect("golden layout");
            laid
        }
        None => ints,
    };
    let quantizer = if let Some(scale) = obj.get("scale") {
        Quantizer::PerTensorAffine {
            scale: json_f64(scale),
            zero_point: obj["zero_point"].as_i64().expect("zero point"),
        }
    } else if obj.get("float_qparams").is_some() {
        let float32s = |key: &str, arrays: &mut Arrays| {
            arrays
                .tensor(obj[key].as_str().expect(key), DType::Float32)
                .to_vec::<f32>()
                .expect(key)
        };
        Quantizer::PerChannelAffineFloatQParams {
            scales: float32s("scales", arrays).into(),
            zero_points: float32s("zero_points", arrays).into(),
            axis: obj["axis"].as_u64().expect("axis") as usize,
        }
    } else {
        let scales = arrays
            .tensor(obj["scales"].as_str().expect("scales"), DType::Float64)
            .to_vec::<f64>()
            .expect("scales");
        let zero_points = arrays
            .tensor(
                obj["zero_points"].as_str().expect("zero points"),
                DType::Int64,
            )
            .to_vec::<i64>()
            .expect("zero points");
        Quantizer::PerChannelAffine {
            scales: scales.into(),
            zero_points: zero_points.into(),
            axis: obj["axis"].as_u64().expect("axis") as usize,
        }
    };
    Tensor::quantized_from_ints_as(&ints, quantizer, qdtype).expect("quantized golden")
}

/// A quantized result against PyTorch's: the same quantizer (scales exactly) and integers.
fn compare_quantized(g: &Tensor, w: &Tensor, path: &str) -> Result<(), String> {
    if g.dtype() != w.dtype() {
        return Err(format!("{path}: dtype {}, want {}", g.dtype(), w.dtype()));
    }
    if g.quantizer() != w.quantizer() {
        return Err(format!(
            "{path}: quantizer {:?}, want {:?}",
            g.quantizer(),
            w.quantizer()
        ));
    }
    // a result PyTorch leaves non-contiguous (channels-last: a case with `strides`) must have
    // its layout, size-1 dims aside
    if !w.is_contiguous() && layout(g) != layout(w) {
        return Err(format!(
            "{path}: strides {:?}, want {:?}",
            g.strides(),
            w.strides()
        ));
    }
    let gi = g.int_repr_view().map_err(|e| e.to_string())?;
    let wi = w.int_repr_view().map_err(|e| e.to_string())?;
    compare_tensors(&gi, &wi, 0.0, 0.0, &format!("{path}.int_repr"))
}

/// The strides of the dims of more than one element (those that place elements).
fn layout(t: &Tensor) -> Vec<(usize, isize)> {
    t.shape()
        .iter()
        .zip(t.strides())
        .enumerate()
        .filter(|(_, (&n, _))| n > 1)
        .map(|(d, (_, &s))| (d, s))
        .collect()
}

/// Compare `got` with PyTorch's `want`; `Err` describes the first difference. Floating tensors
/// use `|got - want| <= atol + rtol * max|want|` (tolerance relative to the output's scale);
/// integer and bool tensors must be equal, dtypes and shapes identical.
pub fn compare(
    got: &IValue,
    want: &IValue,
    rtol: f64,
    atol: f64,
    path: &str,
) -> Result<(), String> {
    match (got, want) {
        (IValue::Tensor(g), IValue::Tensor(w)) => compare_tensors(g, w, rtol, atol, path),
        (IValue::List(g), IValue::List(w)) => {
            compare_seq(&g.to_vec(), &w.to_vec(), rtol, atol, path)
        }
        (IValue::Tuple(g), IValue::Tuple(w)) => compare_seq(g.items(), w.items(), rtol, atol, path),
        (IValue::Dict(g), IValue::Dict(w)) => {
            let (ge, we) = (g.entries(), w.entries());
            if ge.len() != we.len() {
                return Err(format!(
                    "{path}: dict has {} entries, want {}",
                    ge.len(),
                    we.len()
                ));
            }
            for ((gk, gv), (wk, wv)) in ge.iter().zip(&we) {
                compare(gk, wk, rtol, atol, &format!("{path}.key"))?;
                compare(gv, wv, rtol, atol, &format!("{path}[{wk:?}]"))?;
            }
            Ok(())
        }
        (IValue::Complex(g), IValue::Complex(w)) => {
            if (g - w).norm() <= atol + rtol * w.norm() || (g.is_nan() && w.is_nan()) {
                Ok(())
            } else {
                Err(format!("{path}: got {g}, want {w}"))
            }
        }
        (IValue::Double(g), IValue::Double(w)) => {
            if g == w || (g.is_nan() && w.is_nan()) || (g - w).abs() <= atol + rtol * w.abs() {
                Ok(())
            } else {
                Err(format!("{path}: got {g}, want {w}"))
            }
        }
        (IValue::Await(g), IValue::Await(w)) => compare(g, w, rtol, atol, &format!("{path}.await")),
        (IValue::Future(g), IValue::Future(w)) => match (g.wait(), w.wait()) {
            (Ok(g), Ok(w)) => compare(&g, &w, rtol, atol, &format!("{path}.future")),
            (g, w) => Err(format!("{path}: future got {g:?}, want {w:?}")),
        },
        (IValue::Generator(g), IValue::Generator(w)) => {
            if std::sync::Arc::ptr_eq(g, w) || *g.lock() == *w.lock() {
                Ok(())
            } else {
                Err(format!(
                    "{path}: got {got:?}, want {want:?} (seed or state differ)"
                ))
            }
        }
        (g, w) => {
            if g.is_same(w) || format!("{g:?}") == format!("{w:?}") {
                Ok(())
            } else {
                Err(format!("{path}: got {g:?}, want {w:?}"))
            }
        }
    }
}

fn compare_seq(g: &[IValue], w: &[IValue], rtol: f64, atol: f64, path: &str) -> Result<(), String> {
    if g.len() != w.len() {
        return Err(format!("{path}: {} items, want {}", g.len(), w.len()));
    }
    for (i, (a, b)) in g.iter().zip(w).enumerate() {
        compare(a, b, rtol, atol, &format!("{path}.{i}"))?;
    }
    Ok(())
}

pub fn compare_tensors(
    g: &Tensor,
    w: &Tensor,
    rtol: f64,
    atol: f64,
    path: &str,
) -> Result<(), String> {
    if g.dtype() != w.dtype() {
        return Err(format!("{path}: dtype {}, want {}", g.dtype(), w.dtype()));
    }
    if g.is_nested() || w.is_nested() {
        return compare_nested(g, w, rtol, atol, path);
    }
    if g.shape() != w.shape() {
        return Err(format!(
            "{path}: shape {:?}, want {:?}",
            g.shape(),
            w.shape()
        ));
    }
    if w.is_quantized() || g.is_quantized() {
        return compare_quantized(g, w, path);
    }
    if w.sparse_parts().is_some() || g.sparse_parts().is_some() {
        return compare_sparse(g, w, rtol, atol, path);
    }
    if w.dtype().is_complex() {
        let gv = g.to_vec::<Complex64>().map_err(|e| e.to_string())?;
        let wv = w.to_vec::<Complex64>().map_err(|e| e.to_string())?;
        let scale = wv.iter().map(|c| c.norm()).fold(0.0, f64::max);
        for (i, (a, b)) in gv.iter().zip(&wv).enumerate() {
            if (a - b).norm() > atol + rtol * scale && !(a.re.is_nan() && b.re.is_nan()) {
                return Err(format!("{path}[{i}]: got {a}, want {b}"));
            }
        }
        return Ok(());
    }
    if w.dtype().is_floating_point() {
        let gv = g.to_vec::<f64>().map_err(|e| e.to_string())?;
        let wv = w.to_vec::<f64>().map_err(|e| e.to_string())?;
        let scale = wv
            .iter()
            .filter(|x| x.is_finite())
            .map(|x| x.abs())
            .fold(0.0, f64::max);
        for (i, (a, b)) in gv.iter().zip(&wv).enumerate() {
            let ok = if b.is_nan() {
                a.is_nan()
            } else if b.is_infinite() {
                a == b
            } else {
                (a - b).abs() <= atol + rtol * scale
            };
            if !ok {
                return Err(format!("{path}[{i}]: got {a}, want {b} (scale {scale})"));
            }
        }
        return Ok(());
    }
    let gv = g.to_vec::<i64>().map_err(|e| e.to_string())?;
    let wv = w.to_vec::<i64>().map_err(|e| e.to_string())?;
    match gv.iter().zip(&wv).position(|(a, b)| a != b) {
        Some(i) => Err(format!("{path}[{i}]: got {}, want {}", gv[i], wv[i])),
        None => Ok(()),
    }
}

/// Run every case of `fixtures/ops/<family>.json` through the registry. Returns (passed, failures).
pub fn run_op_cases(family: &str) -> (usize, Vec<String>) {
    let dir = fixtures_dir().join("ops");
    let json: Value = serde_json::from_reader(
        File::open(dir.join(format!("{family}.json"))).expect("op cases json"),
    )
    .expect("valid json");
    let mut arrays = Arrays::open(&dir.join(format!("{family}.npz")));
    let registry = Registry::global();
    let mut ctx = OpContext::default();
    let mut passed = 0;
    let mut failures = Vec::new();
    for (i, case) in json["cases"].as_array().expect("cases").iter().enumerate() {
        let op = case["op"].as_str().expect("op");
        let overload = case["overload"].as_str().unwrap_or("");
        let name = if overload.is_empty() {
            op.to_string()
        } else {
            format!("{op}.{overload}")
        };
        // the quantized engine PyTorch ran the case under, where the generator named one
        ctx.quantized_engine = match case.get("engine").and_then(Value::as_str) {
            None => tsrun::QuantizedEngine::Native,
            Some("fbgemm") => tsrun::QuantizedEngine::Fbgemm,
            Some("x86") => tsrun::QuantizedEngine::X86,
            Some("qnnpack") => tsrun::QuantizedEngine::Qnnpack,
            Some(other) => {
                failures.push(format!("case {i} {name}: unknown engine {other}"));
                continue;
            }
        };
        let Some(kernel) = registry.lookup(op, overload) else {
            failures.push(format!("case {i} {name}: no kernel"));
            continue;
        };
        let mut args: Vec<IValue> = decode_all(&case["args"], &mut arrays);
        // the caller's handles: tensors, lists and dicts the kernel writes are shared with them
        let before = args.clone();
        // as the interpreter calls it (float8/complex32 arguments go through the same gate)
        let result = tsrun::internals::ops::storage_dtypes::call(kernel, &name, &mut args, &ctx);
        let (rtol, atol) = (
            case["rtol"].as_f64().unwrap_or(1e-4),
            case["atol"].as_f64().unwrap_or(1e-5),
        );
        let outcome = match (result, case.get("error")) {
            (Ok(v), None) if case.get("reseeds").is_some() => {
                check_reseeded(&v, &before, &case["reseeds"])
            }
            (Err(_), Some(_)) => Ok(()),
            (Ok(v), Some(e)) => Err(format!("expected error {e}, got {v:?}")),
            (Err(e), None) => Err(format!("error: {e}")),
            (Ok(v), None) => {
                let (v, want) = unpack_if_packed(v, &case["out"], &mut arrays);
                let v = match case.get("sign_groups") {
                    Some(groups) => align_signs(&v, &want, groups),
                    None => v,
                };
                let v = if case.get("eigen_pairs").is_some() {
                    match_eigenpairs(&v, &want)
                } else {
                    v
                };
                compare(&v, &want, rtol, atol, "out")
            }
        };
        // `written`: what PyTorch left in the arguments the overload writes (out= and in-place
        // tensors, mutated lists and dicts). An in-place geometry op cannot change the caller's
        // handle (a tsrun tensor handle owns its geometry): its kernel leaves the changed tensor
        // in the argument slot, and plan building makes code read it.
        let geometry = tsrun::internals::ir::passes::inplace_geometry::changes_handle(op);
        let outcome = outcome.and_then(|()| {
            case["written"]
                .as_array()
                .into_iter()
                .flatten()
                .try_for_each(|w| {
                    let j = w[0].as_u64().expect("argument index") as usize;
                    let want = decode(&w[1], &mut arrays);
                    compare(
                        if geometry { &args[j] } else { &before[j] },
                        &want,
                        rtol,
                        atol,
                        &format!("argument {j} after"),
                    )
                })
        });
        match outcome {
            Ok(()) => passed += 1,
            Err(e) => failures.push(format!("case {i} {name}: {e}")),
        }
    }
    (passed, failures)
}

/// Decode a JSON array of encoded values (a case's inputs).
pub fn decode_all(values: &Value, arrays: &mut Arrays) -> Vec<IValue> {
    values
        .as_array()
        .expect("an array of encoded values")
        .iter()
        .map(|v| decode(v, arrays))
        .collect()
}

/// A nondeterministic reseed (`Generator.seed()`): the case records, from PyTorch, which argument
/// is the generator; the result must be the new seed (a 64-bit seed read back as a signed int),
/// the generator (shared with the caller) as seeding with it leaves it.
fn check_reseeded(got: &IValue, args: &[IValue], spec: &Value) -> Result<(), String> {
    let index = spec["argument"].as_u64().expect("argument index") as usize;
    let IValue::Int(seed) = got else {
        return Err(format!("got {got:?}, want a seed"));
    };
    match &args[index] {
        IValue::Generator(g)
            if *g.lock() == tsrun::internals::values::Generator::new(*seed as u64) =>
        {
            Ok(())
        }
        other => Err(format!(
            "argument {index} after: {other:?}, not seeded with {seed}"
        )),
    }
}

/// A packed-parameters result (golden_io.py's "unpacked" encoding: PyTorch's object went
/// through an unpack op): `got` through tsrun's kernel of that op, and PyTorch's unpacked value;
/// anything else as it is, with `want` decoded.
pub fn unpack_if_packed(got: IValue, want: &Value, arrays: &mut Arrays) -> (IValue, IValue) {
    let Some(body) = want.get("unpacked") else {
        return (got, decode(want, arrays));
    };
    let op = body["op"].as_str().expect("unpack op");
    if op == "__getstate__" {
        return (cell_params_state(got), decode(&body["value"], arrays));
    }
    let kernel = Registry::global()
        .lookup(op, "")
        .unwrap_or_else(|| panic!("no kernel {op}"));
    let ctx = OpContext::default();
    let mut args = vec![got];
    let got = match kernel(&mut Args::new(op, &mut args, &ctx)) {
        Ok(v) => v,
        Err(e) => IValue::str(format!("{op} failed: {e}")),
    };
    (got, decode(&body["value"], arrays))
}

/// A quantized RNN cell's parameters (`rnn.CellParamsBase`) as golden_io.py encodes them: the
/// object's state `(kind, tensors, doubles, longs, packed)` with each packed linear weight
/// through tsrun's unpack kernel; any other state-holding object's state as it is.
fn cell_params_state(got: IValue) -> IValue {
    let state = match &got {
        IValue::Object(o) => o.state(),
        _ => None,
    };
    let Some(IValue::Tuple(state)) = state else {
        return IValue::str(format!("not cell parameters: {}", got.kind_name()));
    };
    let mut items = state.items().to_vec();
    let unpack_op = match items.first() {
        Some(IValue::String(k)) if &**k == "quantized_fp16" => "quantized::linear_unpack_fp16",
        _ => "quantized::linear_unpack",
    };
    // (a cell's state starts with its kind; other objects, e.g. a mkldnn ConvOpContext, are
    // compared by their state as it is)
    let is_cell = matches!(items.first(), Some(IValue::String(_)));
    if let (true, Some(IValue::List(packed))) = (is_cell, items.get(4)) {
        let kernel = Registry::global()
            .lookup(unpack_op, "")
            .unwrap_or_else(|| panic!("no kernel {unpack_op}"));
        let ctx = OpContext::default();
        let unpacked = packed
            .to_vec()
            .into_iter()
            .map(|p| {
                let mut args = vec![p];
                kernel(&mut Args::new(unpack_op, &mut args, &ctx))
                    .unwrap_or_else(|e| IValue::str(format!("{unpack_op} failed: {e}")))
            })
            .collect();
        items[4] = IValue::List(tsrun::internals::values::List::new(
            tsrun::internals::values::types::Type::Any,
            unpacked,
        ));
    }
    IValue::Tuple(tsrun::internals::values::Tuple::new(items))
}

/// General eigendecompositions (`linalg_eig`, `linalg_eigvals`): LAPACK's `geev` returns the
/// eigenvalues in the order its deflation finds them, which tsrun does not reproduce. A case
/// marked `eigen_pairs` pairs each of PyTorch's eigenvalues with the nearest unused one of
/// tsrun's (per matrix of the batch), reorders tsrun's eigenvalues (a tensor result) or
/// eigenvalues and eigenvector columns (a (values, vectors) tuple) to PyTorch's order and gives
/// each vector the unit phase that best agrees with PyTorch's (both are normalized as `geev`
/// normalizes: unit norm, largest component real, which leaves a sign, or a phase when two
/// components tie for largest). Everything is then compared as usual.
pub fn match_eigenpairs(got: &IValue, want: &IValue) -> IValue {
    let complex = |v: &IValue| match v {
        IValue::Tensor(t) => t
            .to_vec::<Complex64>()
            .ok()
            .map(|d| (d, t.shape().to_vec(), t.dtype())),
        _ => None,
    };
    let (gv, wv, gvec, wvec) = match (got, want) {
        (IValue::Tensor(_), IValue::Tensor(_)) => (complex(got), complex(want), None, None),
        (IValue::Tuple(g), IValue::Tuple(w)) if g.items().len() == 2 && w.items().len() == 2 => (
            complex(&g.items()[0]),
            complex(&w.items()[0]),
            complex(&g.items()[1]),
            complex(&w.items()[1]),
        ),
        _ => return got.clone(),
    };
    let (Some((gv, vshape, vdtype)), Some((wv, wshape, _))) = (gv, wv) else {
        return got.clone();
    };
    let n = vshape.last().copied().unwrap_or(0);
    if vshape != wshape || n == 0 {
        return got.clone();
    }
    let batch = gv.len() / n;
    let mut order = vec![0usize; gv.len()];
    for b in 0..batch {
        let mut used = vec![false; n];
        for j in 0..n {
            let w = wv[b * n + j];
            let best = (0..n)
                .filter(|&i| !used[i])
                .min_by(|&x, &y| {
                    (gv[b * n + x] - w)
                        .norm()
                        .total_cmp(&(gv[b * n + y] - w).norm())
                })
                .unwrap_or(j);
            used[best] = true;
            order[b * n + j] = b * n + best;
        }
    }
    let values: Vec<Complex64> = order.iter().map(|&i| gv[i]).collect();
    let values = Tensor::from_vec(values, &vshape)
        .expect("eigenvalues")
        .to_dtype(vdtype)
        .expect("eigenvalue dtype");
    let (Some((gvec, mshape, mdtype)), Some((wvec, _, _))) = (gvec, wvec) else {
        return IValue::Tensor(values);
    };
    if gvec.len() != batch * n * n || wvec.len() != gvec.len() {
        return got.clone();
    }
    let mut vectors = vec![Complex64::new(0.0, 0.0); gvec.len()];
    for b in 0..batch {
        for j in 0..n {
            let src = order[b * n + j] - b * n;
            let at = |col: usize, r: usize| b * n * n + r * n + col;
            let dot: Complex64 = (0..n)
                .map(|r| gvec[at(src, r)].conj() * wvec[at(j, r)])
                .sum();
            let phase = if dot.norm() > 0.0 {
                dot / dot.norm()
            } else {
                Complex64::new(1.0, 0.0)
            };
            for r in 0..n {
                vectors[at(j, r)] = gvec[at(src, r)] * phase;
            }
        }
    }
    let vectors = Tensor::from_vec(vectors, &mshape)
        .expect("eigenvectors")
        .to_dtype(mdtype)
        .expect("eigenvector dtype");
    IValue::Tuple(Tuple::new(vec![values.into(), vectors.into()]))
}

/// Singular vectors and eigenvectors are defined up to sign (PyTorch documents the signs as
/// implementation-defined). `groups` (a case's `sign_groups`) lists, per group, tuple outputs as
/// `[index, axis]`: axis -1 when the vectors are the matrix columns, -2 when they are its rows.
/// Vector `j` of every member of a group gets one sign: the one that makes the first member
/// having a vector `j` agree with PyTorch's (a non-negative dot product). Everything else about
/// the result is then compared exactly as usual.
pub fn align_signs(got: &IValue, want: &IValue, groups: &Value) -> IValue {
    let (IValue::Tuple(g), IValue::Tuple(w)) = (got, want) else {
        return got.clone();
    };
    let mut items: Vec<IValue> = g.items().to_vec();
    for group in groups.as_array().into_iter().flatten() {
        let members: Vec<(usize, i64)> = group
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| Some((m[0].as_u64()? as usize, m[1].as_i64()?)))
            .collect();
        // (data, rows, cols, batch) per member, or None when shapes differ from PyTorch's
        let mut mats = Vec::new();
        for &(i, _) in &members {
            match (&items[i], &w.items()[i]) {
                (IValue::Tensor(gt), IValue::Tensor(wt))
                    if gt.shape() == wt.shape() && gt.dim() >= 2 =>
                {
                    let nd = gt.dim();
                    let (r, c) = (gt.shape()[nd - 2], gt.shape()[nd - 1]);
                    let batch = gt.numel() / (r * c).max(1);
                    mats.push(Some((
                        gt.to_vec::<f64>().expect("got"),
                        wt.to_vec::<f64>().expect("want"),
                        r,
                        c,
                        batch,
                    )));
                }
                _ => mats.push(None),
            }
        }
        if mats.iter().any(Option::is_none) {
            continue;
        }
        let mut mats: Vec<_> = mats.into_iter().flatten().collect();
        let batch = mats.first().map(|m| m.4).unwrap_or(0);
        let vectors = |axis: i64, r: usize, c: usize| if axis == -1 { c } else { r };
        let longest = members
            .iter()
            .zip(&mats)
            .map(|(&(_, axis), m)| vectors(axis, m.2, m.3))
            .max()
            .unwrap_or(0);
        for b in 0..batch {
            for j in 0..longest {
                let mut sign = None;
                for (&(_, axis), m) in members.iter().zip(mats.iter_mut()) {
                    let (r, c) = (m.2, m.3);
                    if j >= vectors(axis, r, c) {
                        continue;
                    }
                    let len = if axis == -1 { r } else { c };
                    let at = |k: usize| {
                        let (row, col) = if axis == -1 { (k, j) } else { (j, k) };
                        b * r * c + row * c + col
                    };
                    let s = *sign.get_or_insert_with(|| {
                        let dot: f64 = (0..len).map(|k| m.0[at(k)] * m.1[at(k)]).sum();
                        if dot < 0.0 {
                            -1.0
                        } else {
                            1.0
                        }
                    });
                    for k in 0..len {
                        let idx = at(k);
                        m.0[idx] *= s;
                    }
                }
            }
        }
        for (&(i, _), m) in members.iter().zip(mats.iter_mut()) {
            let IValue::Tensor(gt) = &items[i] else {
                continue;
            };
            let flipped = Tensor::from_vec(std::mem::take(&mut m.0), gt.shape())
                .expect("tensor")
                .to_dtype(gt.dtype())
                .expect("dtype");
            items[i] = IValue::Tensor(flipped);
        }
    }
    IValue::Tuple(Tuple::new(items))
}

/// Assert every case of a family passes, printing the tally.
pub fn assert_op_cases(family: &str) {
    let (passed, failures) = run_op_cases(family);
    println!("{family}: {passed} passed, {} failed", failures.len());
    for f in &failures {
        println!("  {f}");
    }
    assert!(
        failures.is_empty(),
        "{} {family} op cases failed",
        failures.len()
    );
}

/// `aten::warn[warn_id=N]` carries a process-wide counter: compare with N as a wildcard.
pub fn mask_warn_ids(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find("warn_id=") {
        out.push_str(&rest[..i + 8]);
        rest = rest[i + 8..].trim_start_matches(|c: char| c.is_ascii_digit());
        out.push('N');
    }
    out.push_str(rest);
    out
}

/// Every fixture with printed goldens (`fixtures/golden/<name>/printed.json`), sorted: its
/// name, its loaded archive and the JSON (submodule path -> method -> printed forms).
pub fn printed_goldens() -> Vec<(String, tsrun::internals::runtime::Module, Value)> {
    let golden_root = fixtures_dir().join("golden");
    let mut names: Vec<String> = std::fs::read_dir(&golden_root)
        .expect("fixtures/golden")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| golden_root.join(n).join("printed.json").exists())
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let archive = fixtures_dir().join("models").join(format!("{name}.pt"));
            let module = tsrun::internals::runtime::Module::load(&archive).expect("load fixture");
            let text = std::fs::read_to_string(golden_root.join(&name).join("printed.json"))
                .expect("printed.json");
            let json: Value = serde_json::from_str(&text).expect("printed.json is JSON");
            (name, module, json)
        })
        .collect()
}

/// A method of a submodule compiled by tsrun, with its compilation unit.
pub fn compiled_method(
    root: &tsrun::internals::runtime::Module,
    path: &str,
    method: &str,
) -> Result<
    (
        std::sync::Arc<tsrun::internals::ir::unit::CompilationUnit>,
        std::sync::Arc<tsrun::internals::ir::unit::Function>,
    ),
    String,
> {
    root.get_submodule(path)
        .and_then(|m| {
            let unit = m.compilation_unit()?;
            let f = unit.method(m.class_name(), method)?;
            Ok((unit, f))
        })
        .map_err(|e| e.to_string())
}
