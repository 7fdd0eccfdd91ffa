//! `state_dict(prefix, keep_vars)` and `load_state_dict(state, strict, assign)` with PyTorch's
//! key matching, return value and error messages, and reading a state dict from a safetensors
//! file, an npz, a `torch.save` file or another TorchScript archive.

use super::{module_err, unpickle_record, Module};
use crate::archive::Archive;
use crate::tensor::{DType, Storage, Tensor};
use crate::values::IValue;
use crate::{Error, Result};
use indexmap::IndexMap;
use std::io::Write;
use std::path::Path;

/// Named tensors in order, as `state_dict()` returns them.
pub type StateDict = IndexMap<String, Tensor>;

/// What `load_state_dict` returns (`_IncompatibleKeys`): keys the module has that the state
/// lacks, and keys of the state the module does not have.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IncompatibleKeys {
    /// Keys the module has and the state dict lacked.
    pub missing_keys: Vec<String>,
    /// Keys the state dict has and the module lacks.
    pub unexpected_keys: Vec<String>,
}

/// `torch.Size([8, 4])`, as PyTorch prints a shape in load errors.
fn torch_size(shape: &[usize]) -> String {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("torch.Size([{}])", dims.join(", "))
}

fn quoted_list(keys: &[String]) -> String {
    keys.iter()
        .map(|k| format!("\"{k}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Module {
    /// `state_dict(prefix=prefix, keep_vars=keep_vars)`: keys start with `prefix`. Tensors share
    /// storage with the module's; with `keep_vars` false they are detached (`requires_grad`
    /// false), as PyTorch returns them.
    /// State-dict pre hooks registered on this module run first; post hooks run on the result.
    pub fn state_dict_with(&self, prefix: &str, keep_vars: bool) -> Result<StateDict> {
        self.run_state_dict_pre_hooks(prefix, keep_vars)?;
        let mut state = self
            .state_dict()
            .into_iter()
            .map(|(k, mut t)| {
                if !keep_vars {
                    t.set_requires_grad(false);
                }
                (format!("{prefix}{k}"), t)
            })
            .collect();
        self.run_state_dict_hooks(&mut state, prefix)?;
        Ok(state)
    }

    /// `load_state_dict(state, strict, assign)`, walking the tree as `nn.Module.load_state_dict`
    /// does: each module's parameters and buffers are looked up as `prefix + name`; a present key
    /// with another shape is a size-mismatch error, otherwise the value is copied into the
    /// existing tensor (cast to its dtype; every reference sees it) or, with `assign`, the
    /// attribute is replaced by the given tensor (keeping a parameter's `requires_grad`).
    /// Mismatches do not stop the other keys from loading; with `strict`, missing or unexpected
    /// keys are an error with PyTorch's message. Load-state-dict pre hooks registered on this
    /// module may edit a copy of `state` first; post hooks may edit the returned keys.
    pub fn load_state_dict(
        &self,
        state: &StateDict,
        strict: bool,
        assign: bool,
    ) -> Result<IncompatibleKeys> {
        let mut edited;
        let state = if self.has_load_pre_hooks() {
            edited = state.clone();
            self.run_load_pre_hooks(&mut edited)?;
            &edited
        } else {
            state
        };
        let mut keys = IncompatibleKeys::default();
        let mut errors = Vec::new();
        self.load_into(state, "", assign, &mut keys, &mut errors, 0)?;
        // post hooks see (and may edit) the keys before strictness is judged, as in PyTorch
        self.run_load_post_hooks(&mut keys)?;
        if strict {
            if !keys.unexpected_keys.is_empty() {
                errors.insert(
                    0,
                    format!(
                        "Unexpected key(s) in state_dict: {}. ",
                        quoted_list(&keys.unexpected_keys)
                    ),
                );
            }
            if !keys.missing_keys.is_empty() {
                errors.insert(
                    0,
                    format!(
                        "Missing key(s) in state_dict: {}. ",
                        quoted_list(&keys.missing_keys)
                    ),
                );
            }
        }
        if !errors.is_empty() {
            return Err(module_err(format!(
                "Error(s) in loading state_dict for RecursiveScriptModule:\n\t{}",
                errors.join("\n\t")
            )));
        }
        Ok(keys)
    }

    /// `load_state_dict` from a file (see [`read_state_dict`] for the formats).
    pub fn load_state_dict_from(
        &self,
        path: impl AsRef<Path>,
        strict: bool,
        assign: bool,
    ) -> Result<IncompatibleKeys> {
        self.load_state_dict(&read_state_dict(path)?, strict, assign)
    }

    fn load_into(
        &self,
        state: &StateDict,
        prefix: &str,
        assign: bool,
        keys: &mut IncompatibleKeys,
        errors: &mut Vec<String>,
        depth: usize,
    ) -> Result<()> {
        if depth > crate::pickle::MAX_NESTING {
            return Err(module_err("module tree too deep to load a state dict into"));
        }
        let own: Vec<(String, Tensor, bool)> = self
            .own_tensors(true)
            .into_iter()
            .map(|(n, t)| (n, t, true))
            .chain(
                self.own_tensors(false)
                    .into_iter()
                    .map(|(n, t)| (n, t, false)),
            )
            .collect();
        for (name, current, is_parameter) in &own {
            let key = format!("{prefix}{name}");
            let Some(input) = state.get(&key) else {
                keys.missing_keys.push(key);
                continue;
            };
            if input.shape() != current.shape() {
                errors.push(format!(
                    "size mismatch for {key}: copying a param with shape {} from checkpoint, the shape in current model is {}.",
                    torch_size(input.shape()),
                    torch_size(current.shape())
                ));
                continue;
            }
            if assign {
                let mut new = input.clone();
                if *is_parameter {
                    new.set_requires_grad(current.requires_grad());
                }
                self.object().set(name, IValue::Tensor(new));
            } else {
                current.copy_from(input)?;
            }
        }
        // Keys under this prefix that name neither a child module nor a local tensor.
        let children = self.named_children();
        for key in state.keys() {
            let Some(rest) = key.strip_prefix(prefix) else {
                continue;
            };
            let head = rest.split('.').next().unwrap_or(rest);
            let local = own.iter().any(|(n, _, _)| n == rest);
            let child = children.iter().any(|(c, _)| c == head);
            if !local && !child && !keys.unexpected_keys.contains(key) {
                keys.unexpected_keys.push(key.clone());
            }
        }
        for (name, child) in children {
            child.load_into(
                state,
                &format!("{prefix}{name}."),
                assign,
                keys,
                errors,
                depth + 1,
            )?;
        }
        Ok(())
    }
}

/// Read named tensors from `path`: a `.safetensors` file, an `.npz`, a TorchScript archive (its
/// `state_dict()`) or a `torch.save` of a dict of tensors.
pub fn read_state_dict(path: impl AsRef<Path>) -> Result<StateDict> {
    let path = path.as_ref();
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    match ext {
        "safetensors" => read_safetensors(&std::fs::read(path)?, &path.display().to_string()),
        "npz" => read_npz(path),
        _ => read_torch_zip(path),
    }
}

fn weights_err(what: &str, msg: impl std::fmt::Display) -> Error {
    module_err(format!("{what}: {msg}"))
}

/// A safetensors file's tensors, in the order of their data.
pub fn read_safetensors(bytes: &[u8], what: &str) -> Result<StateDict> {
    use safetensors::Dtype as S;
    let file = safetensors::SafeTensors::deserialize(bytes).map_err(|e| weights_err(what, e))?;
    let mut items: Vec<(String, safetensors::tensor::TensorView<'_>)> =
        file.tensors().into_iter().collect();
    items.sort_by_key(|(_, v)| v.data().as_ptr() as usize);
    let mut out = StateDict::new();
    for (name, view) in items {
        let dtype = match view.dtype() {
            S::BOOL => DType::Bool,
            S::U8 => DType::UInt8,
            S::I8 => DType::Int8,
            S::I16 => DType::Int16,
            S::U16 => DType::UInt16,
            S::I32 => DType::Int32,
            S::U32 => DType::UInt32,
            S::I64 => DType::Int64,
            S::U64 => DType::UInt64,
            S::F16 => DType::Float16,
            S::BF16 => DType::BFloat16,
            S::F32 => DType::Float32,
            S::F64 => DType::Float64,
            // safetensors' float8 names (PyTorch's safetensors mapping)
            S::F8_E5M2 => DType::Float8E5M2,
            S::F8_E4M3 => DType::Float8E4M3FN,
            other => {
                return Err(weights_err(
                    what,
                    format!("tensor {name}: safetensors dtype {other:?} is not supported"),
                ))
            }
        };
        let shape = view.shape().to_vec();
        let strides = crate::tensor::contiguous_strides(&shape);
        let storage = Storage::from_bytes(view.data()).map_err(|e| weights_err(what, e))?;
        let t = Tensor::from_parts(storage, 0, &shape, &strides, dtype)
            .map_err(|e| weights_err(what, format!("tensor {name}: {e}")))?;
        out.insert(name, t);
    }
    Ok(out)
}

/// An npz's arrays in stored order (each `.npy` of any dtype `tensor::npy` reads: float16 and
/// ml_dtypes' bfloat16 included).
pub fn read_npz(path: &Path) -> Result<StateDict> {
    let (tensors, strings) = read_npz_with_strings(path)?;
    if let Some((name, _)) = strings.first() {
        return Err(weights_err(
            &path.display().to_string(),
            format!("array {name} holds strings, not numbers"),
        ));
    }
    Ok(tensors)
}

/// Named string arrays: each array's name and elements (row-major).
pub type StringArrays = Vec<(String, Vec<String>)>;

/// An `.npz`'s numeric arrays as tensors and its numpy unicode string arrays (`<U`, as
/// `np.savez` stores `str` values) as their elements, each in file order.
pub fn read_npz_with_strings(path: &Path) -> Result<(StateDict, StringArrays)> {
    use std::io::Read;
    let what = path.display().to_string();
    let file = std::fs::File::open(path)
        .map_err(|e| Error::Io(std::io::Error::new(e.kind(), format!("{what}: {e}"))))?;
    let mut npz = zip::ZipArchive::new(file).map_err(|e| weights_err(&what, e))?;
    let mut out = StateDict::new();
    let mut strings = Vec::new();
    for i in 0..npz.len() {
        let mut member = npz.by_index(i).map_err(|e| weights_err(&what, e))?;
        let Some(name) = member.name().strip_suffix(".npy").map(str::to_string) else {
            // tsrun's own npz outputs carry a structure.json next to the arrays
            continue;
        };
        let mut bytes = Vec::new();
        member
            .read_to_end(&mut bytes)
            .map_err(|e| weights_err(&what, format!("array {name}: {e}")))?;
        let array_err = |e| weights_err(&what, format!("array {name}: {e}"));
        if crate::tensor::npy::is_string_npy(&bytes) {
            let (_, values) = crate::tensor::npy::strings_from_npy(&bytes).map_err(array_err)?;
            strings.push((name, values));
            continue;
        }
        let t = crate::tensor::npy::tensor_from_npy(&bytes).map_err(array_err)?;
        out.insert(name, t);
    }
    Ok((out, strings))
}

/// Write named tensors to `path` by its extension: `.safetensors` (every dtype as is) or `.npz`
/// (bfloat16, which numpy lacks, widened to float32). The file is replaced atomically.
pub fn write_state_dict(path: &Path, tensors: &[(String, Tensor)]) -> Result<()> {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let what = path.display().to_string();
    let bytes = match ext {
        "safetensors" => safetensors_bytes(tensors).map_err(|e| weights_err(&what, e))?,
        "npz" => npz_bytes(tensors)?,
        _ => {
            return Err(weights_err(
                &what,
                "the extension must be .safetensors or .npz",
            ))
        }
    };
    crate::archive::write_atomically(path, |w| w.write_all(&bytes))?;
    Ok(())
}

/// The bytes of a safetensors file holding `tensors` in order.
pub fn safetensors_bytes(tensors: &[(String, Tensor)]) -> Result<Vec<u8>> {
    use safetensors::Dtype as S;
    let mut data = Vec::with_capacity(tensors.len());
    for (name, t) in tensors {
        let dtype = match t.dtype() {
            DType::Bool => S::BOOL,
            DType::UInt8 => S::U8,
            DType::Int8 => S::I8,
            DType::Int16 => S::I16,
            DType::UInt16 => S::U16,
            DType::Int32 => S::I32,
            DType::UInt32 => S::U32,
            DType::Int64 => S::I64,
            DType::UInt64 => S::U64,
            DType::Float16 => S::F16,
            DType::BFloat16 => S::BF16,
            DType::Float32 => S::F32,
            DType::Float64 => S::F64,
            DType::Float8E5M2 => S::F8_E5M2,
            DType::Float8E4M3FN => S::F8_E4M3,
            other => {
                return Err(module_err(format!(
                    "{name}: safetensors has no {other} dtype"
                )))
            }
        };
        data.push((
            name.clone(),
            dtype,
            t.shape().to_vec(),
            t.to_contiguous_bytes()?,
        ));
    }
    let views = data
        .iter()
        .map(|(name, dtype, shape, bytes)| {
            safetensors::tensor::TensorView::new(*dtype, shape.clone(), bytes)
                .map(|v| (name.as_str(), v))
                .map_err(|e| module_err(format!("{name}: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    safetensors::serialize(views, &None).map_err(|e| module_err(format!("safetensors: {e}")))
}

/// The bytes of an npz (stored, one `.npy` per tensor) holding `tensors` in order.
pub fn npz_bytes(tensors: &[(String, Tensor)]) -> Result<Vec<u8>> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .large_file(true);
    let zerr = |e: zip::result::ZipError| module_err(format!("npz: {e}"));
    for (name, t) in tensors {
        let t = if t.dtype() == DType::BFloat16 {
            t.to_dtype(DType::Float32)?
        } else {
            t.clone()
        };
        zip.start_file(format!("{name}.npy"), opts).map_err(zerr)?;
        zip.write_all(&crate::tensor::npy::tensor_to_npy(&t)?)?;
    }
    Ok(zip.finish().map_err(zerr)?.into_inner())
}

/// A TorchScript archive's `state_dict()`, or the dict of tensors a `torch.save` file holds.
fn read_torch_zip(path: &Path) -> Result<StateDict> {
    let archive = Archive::open_torch_save(path)?;
    if archive.record_names().any(|n| n.starts_with("code/")) {
        return Ok(Module::from_archive(&archive)?
            .state_dict()
            .into_iter()
            .collect());
    }
    let no_enums = |class: &str,
                    _: &IValue|
     -> std::result::Result<std::sync::Arc<crate::values::EnumValue>, String> {
        Err(format!("a state dict holds no enums, found {class}"))
    };
    let value = unpickle_record(
        &archive,
        "data.pkl",
        "data",
        &no_enums,
        crate::pickle::MAX_NESTING,
    )?;
    let IValue::Dict(d) = value else {
        return Err(weights_err(
            &path.display().to_string(),
            format!("holds a {}, not a dict of tensors", value.kind_name()),
        ));
    };
    let mut out = StateDict::new();
    for (k, v) in d.entries() {
        match (k, v) {
            (IValue::String(k), IValue::Tensor(t)) => {
                out.insert(k.to_string(), t);
            }
            (k, v) => {
                return Err(weights_err(
                    &path.display().to_string(),
                    format!("entry {k:?} is a {}, not a named tensor", v.kind_name()),
                ))
            }
        }
    }
    Ok(out)
}
