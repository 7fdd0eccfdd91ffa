//! Helpers shared by the load/save tests: fixture discovery, golden structure files, the
//! golden encodings of tensors (FNV-1a 64 of contiguous little-endian bytes) and attributes.
#![allow(dead_code)]

use serde_json::{json, Value};
use std::path::PathBuf;
use tsrun::internals::runtime::Module;
use tsrun::internals::values::IValue;
use tsrun::Tensor;

pub use crate::common::fixtures_dir;

pub fn model_path(name: &str) -> PathBuf {
    fixtures_dir().join("models").join(format!("{name}.pt"))
}

/// Fixtures that have an archive and a structure golden, in index order.
pub fn fixture_names() -> Vec<String> {
    let index =
        std::fs::read_to_string(fixtures_dir().join("index.json")).expect("fixtures/index.json");
    let index: Value = serde_json::from_str(&index).expect("index.json is JSON");
    index
        .as_array()
        .expect("index.json is a list")
        .iter()
        .filter_map(|e| e["name"].as_str().map(str::to_string))
        .filter(|n| {
            model_path(n).exists()
                && fixtures_dir()
                    .join("golden")
                    .join(n)
                    .join("structure.json")
                    .exists()
        })
        .collect()
}

pub fn structure(name: &str) -> Value {
    let p = fixtures_dir()
        .join("golden")
        .join(name)
        .join("structure.json");
    serde_json::from_str(&std::fs::read_to_string(&p).expect("structure.json")).expect("JSON")
}

pub fn load_fixture(name: &str) -> tsrun::Result<Module> {
    Module::load(model_path(name))
}

pub fn fnv1a64(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf29ce484222325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    format!("{h:016x}")
}

/// The values' contiguous little-endian bytes (this crate stores tensors little-endian).
pub fn tensor_bytes(t: &Tensor) -> Vec<u8> {
    let c = t.contiguous().expect("contiguous");
    let size = c.dtype().size();
    let start = c.storage_offset() * size;
    c.storage().read().expect("readable")[start..start + c.numel() * size].to_vec()
}

/// A state_dict entry as the golden summarises it (without sum/first, implied by the hash).
pub fn state_entry(name: &str, t: &Tensor) -> Value {
    json!({
        "name": name, "dtype": t.dtype().name(), "shape": t.shape(), "stride": t.strides(),
        "storage_offset": t.storage_offset(), "numel": t.numel(),
        "fnv1a64": fnv1a64(&tensor_bytes(t)),
    })
}

fn float(x: f64) -> Value {
    if x.is_nan() {
        json!("nan")
    } else if x.is_infinite() {
        json!(if x > 0.0 { "inf" } else { "-inf" })
    } else {
        json!(x)
    }
}

/// An attribute value in the golden encoding (fixtures/generate.py `encode_attr`).
pub fn encode_attr(v: &IValue) -> Value {
    match v {
        IValue::None => json!({"none": null}),
        IValue::Bool(b) => json!({"bool": b}),
        IValue::Int(i) => json!({"int": i}),
        IValue::Double(d) => json!({"float": float(*d)}),
        IValue::Complex(c) => json!({"complex": [float(c.re), float(c.im)]}),
        IValue::String(s) => json!({"str": &**s}),
        IValue::Device(d) => json!({"device": d.to_string()}),
        IValue::Tensor(t) => {
            json!({"tensor_meta": {"dtype": t.dtype().name(), "shape": t.shape()}})
        }
        IValue::List(l) => json!({"list": l.to_vec().iter().map(encode_attr).collect::<Vec<_>>()}),
        IValue::Tuple(t) => json!({"tuple": t.items().iter().map(encode_attr).collect::<Vec<_>>()}),
        IValue::Dict(d) => json!({"dict": d
            .entries()
            .iter()
            .map(|(k, v)| json!([encode_attr(k), encode_attr(v)]))
            .collect::<Vec<_>>()}),
        IValue::Object(o) if o.state().is_some() => json!({"object": {
            "class": &**o.class_name(),
            "state": encode_attr(&o.state().unwrap_or_default()),
        }}),
        IValue::Object(o) => json!({"object": {
            "class": &**o.class_name(),
            "fields": o.fields().iter().map(|(k, v)| json!([&**k, encode_attr(v)])).collect::<Vec<_>>(),
        }}),
        IValue::Enum(e) => {
            json!({"enum": {"class": &*e.class, "name": &*e.name, "value": encode_attr(&e.value)}})
        }
        other => json!({"unencodable": other.kind_name()}),
    }
}

/// `{module path: {attr: value}}` for attributes that are not submodules, parameters or buffers.
pub fn attributes_json(m: &Module) -> Value {
    let mut out = serde_json::Map::new();
    for (path, sub) in m.named_modules("", false) {
        if let Some(state) = sub.object().state() {
            // pickled through __getstate__: the golden holds the state as pickled
            out.insert(path, json!({"__getstate__": encode_attr(&state)}));
            continue;
        }
        let params: Vec<String> = sub
            .named_parameters("", false, true)
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        let buffers: Vec<String> = sub
            .named_buffers("", false, true)
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        let children: Vec<String> = sub.named_children().into_iter().map(|(n, _)| n).collect();
        let mut attrs = serde_json::Map::new();
        for name in sub.object().field_names() {
            let name = name.to_string();
            if params.contains(&name) || buffers.contains(&name) || children.contains(&name) {
                continue;
            }
            if let Some(v) = sub.attr(&name) {
                attrs.insert(name, encode_attr(&v));
            }
        }
        out.insert(path, Value::Object(attrs));
    }
    Value::Object(out)
}
