//! The served models: one per archive, named after its file stem, version "1", with the input
//! and output names, datatypes and shapes of an optional `model-config.json` beside it.
//!
//! `model-config.json` is either one configuration, applying to every archive of its
//! directory, or `{"models": {"<name>": <configuration>, ...}}`. A configuration is
//!
//! ```json
//! {"inputs":  [{"name": "x", "datatype": "FP32", "shape": [-1, 8]}],
//!  "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 4]}],
//!  "max_batch_size": 16}
//! ```
//!
//! Shapes include the batch dimension; -1 accepts any size. `max_batch_size` overrides
//! `--max-batch` for the model (0 or 1: never batch it, e.g. when rows are not independent).

use super::error::{InferError, ServeError};
use super::tensor::{DataType, WireTensor};
use crate::runtime::Module;
use crate::values::types::Type;
use crate::values::IValue;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Largest `model-config.json` read (it names tensors; megabytes would be a mistake).
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The declared form of one input or output.
#[derive(Clone, Debug, Deserialize)]
pub struct TensorConfig {
    pub name: String,
    #[serde(default)]
    pub datatype: Option<String>,
    /// `-1` for a dimension of any size; absent: any shape.
    #[serde(default)]
    pub shape: Option<Vec<i64>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    #[serde(default)]
    pub inputs: Option<Vec<TensorConfig>>,
    #[serde(default)]
    pub outputs: Option<Vec<TensorConfig>>,
    #[serde(default)]
    pub max_batch_size: Option<usize>,
}

/// What a `model-config.json` holds: one configuration or one per model name.
#[derive(Deserialize)]
#[serde(untagged)]
enum ConfigFile {
    PerModel {
        models: std::collections::HashMap<String, ModelConfig>,
    },
    Shared(ModelConfig),
}

/// One input or output as the server checks and reports it.
#[derive(Clone, Debug)]
pub struct TensorSpec {
    pub name: String,
    /// `None`: any datatype (an unconfigured tensor input).
    pub datatype: Option<DataType>,
    /// `None`: any shape.
    pub shape: Option<Vec<i64>>,
    /// The forward parameter's type, which says how the tensor is passed (tensor or number).
    pub param_type: Type,
    /// The parameter has a default, so the input may be left out.
    pub optional: bool,
}

impl TensorSpec {
    /// The datatype metadata reports: the configured one, or the natural one for the
    /// parameter type (`FP32` for an unconfigured tensor).
    pub fn reported_datatype(&self) -> &'static str {
        match (self.datatype, &self.param_type) {
            (Some(d), _) => d.name(),
            (None, Type::Int) => "INT64",
            (None, Type::Float) => "FP64",
            (None, Type::Bool) => "BOOL",
            (None, _) => "FP32",
        }
    }

    /// The shape metadata reports: `[-1]` (any) when not configured, `[]` for numbers.
    pub fn reported_shape(&self) -> Vec<i64> {
        match (&self.shape, &self.param_type) {
            (Some(s), _) => s.clone(),
            (None, Type::Int | Type::Float | Type::Bool) => vec![],
            (None, _) => vec![-1],
        }
    }
}

/// A loaded model and its interface.
pub struct ServedModel {
    pub name: String,
    pub version: String,
    pub path: PathBuf,
    pub module: Module,
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
    /// Output names come from `model-config.json` (otherwise from the result: `output__N`,
    /// or a returned dict's keys).
    pub outputs_configured: bool,
    /// Rows a dynamic batch may hold; 1 disables batching.
    pub max_batch: usize,
}

pub const MODEL_VERSION: &str = "1";

/// The archives named on the command line: files as given, directories expanded to the `.pt`
/// and `.pth` files directly inside them, sorted by name.
pub fn discover(paths: &[PathBuf]) -> Result<Vec<PathBuf>, ServeError> {
    let mut archives = Vec::new();
    for path in paths {
        let io = |source| ServeError::Io {
            path: path.clone(),
            source,
        };
        if path.is_dir() {
            let mut found = Vec::new();
            for entry in std::fs::read_dir(path).map_err(io)? {
                let p = entry.map_err(io)?.path();
                let is_archive = p
                    .extension()
                    .is_some_and(|e| e == "pt" || e == "pth" || e == "zip");
                if is_archive && p.is_file() {
                    found.push(p);
                }
            }
            found.sort();
            archives.extend(found);
        } else {
            std::fs::metadata(path).map_err(io)?;
            archives.push(path.clone());
        }
    }
    if archives.is_empty() {
        return Err(ServeError::NoModels);
    }
    Ok(archives)
}

/// The model's name: the archive's file stem.
pub fn model_name(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".into())
}

/// The configuration for the archive at `path`, from `model-config.json` beside it.
fn read_config(path: &Path, name: &str) -> Result<ModelConfig, ServeError> {
    let config_path = path
        .parent()
        .unwrap_or_else(|| Path::new("."))
        .join("model-config.json");
    let Ok(meta) = std::fs::metadata(&config_path) else {
        return Ok(ModelConfig::default());
    };
    let invalid = |message: String| ServeError::Config {
        path: config_path.clone(),
        message,
    };
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(invalid(format!("larger than {MAX_CONFIG_BYTES} bytes")));
    }
    let text = std::fs::read_to_string(&config_path).map_err(|source| ServeError::Io {
        path: config_path.clone(),
        source,
    })?;
    let file: ConfigFile = serde_json::from_str(&text).map_err(|e| invalid(e.to_string()))?;
    Ok(match file {
        ConfigFile::PerModel { mut models } => models.remove(name).unwrap_or_default(),
        ConfigFile::Shared(c) => c,
    })
}

/// Forward's parameters after `self` as (type, has a default), and its return type.
type ForwardSignature = (Vec<(Type, bool)>, Type);

fn forward_params(module: &Module) -> crate::Result<Option<ForwardSignature>> {
    let unit = module.compilation_unit()?;
    let Some(sig) = unit
        .class(module.class_name())
        .and_then(|c| c.method_signature("forward"))
    else {
        return Ok(None);
    };
    let params = sig
        .params
        .iter()
        .skip(1)
        .map(|p| (p.ty.clone(), p.default.is_some()))
        .collect();
    Ok(Some((params, sig.return_type.clone())))
}

/// Loads the archive at `path` (in eval mode, as a server runs it) with its configuration.
pub fn load_model(path: &Path, default_max_batch: usize) -> Result<ServedModel, ServeError> {
    let name = model_name(path);
    let config = read_config(path, &name)?;
    let load_err = |source| ServeError::Load {
        path: path.to_path_buf(),
        source: Box::new(source),
    };
    let module = Module::load(path).map_err(load_err)?;
    module.eval();
    let (params, return_type) = forward_params(&module)
        .map_err(load_err)?
        .unwrap_or((Vec::new(), Type::Any));
    let config_err = |message: String| ServeError::Config {
        path: path.to_path_buf(),
        message,
    };
    let parse_datatype = |t: &TensorConfig| -> Result<Option<DataType>, ServeError> {
        t.datatype
            .as_deref()
            .map(DataType::parse)
            .transpose()
            .map_err(|e| config_err(format!("{}: {e}", t.name)))
    };
    let inputs = match &config.inputs {
        Some(declared) => {
            if declared.len() > params.len() {
                return Err(config_err(format!(
                    "{} inputs configured, forward takes {}",
                    declared.len(),
                    params.len()
                )));
            }
            let mut specs = Vec::with_capacity(declared.len());
            for (i, t) in declared.iter().enumerate() {
                specs.push(TensorSpec {
                    name: t.name.clone(),
                    datatype: parse_datatype(t)?,
                    shape: t.shape.clone(),
                    param_type: params[i].0.clone(),
                    optional: params[i].1,
                });
            }
            if let Some((_, false)) = params.get(declared.len()) {
                return Err(config_err(format!(
                    "{} inputs configured, forward needs more",
                    declared.len()
                )));
            }
            specs
        }
        None => params
            .iter()
            .enumerate()
            .map(|(i, (ty, optional))| TensorSpec {
                name: format!("input__{i}"),
                datatype: None,
                shape: None,
                param_type: ty.clone(),
                optional: *optional,
            })
            .collect(),
    };
    let outputs = match &config.outputs {
        Some(declared) => declared
            .iter()
            .map(|t| {
                Ok(TensorSpec {
                    name: t.name.clone(),
                    datatype: parse_datatype(t)?,
                    shape: t.shape.clone(),
                    param_type: Type::Tensor,
                    optional: false,
                })
            })
            .collect::<Result<Vec<_>, ServeError>>()?,
        None => {
            let count = match &return_type {
                Type::Tuple(items) => items.len(),
                _ => 1,
            };
            (0..count)
                .map(|i| TensorSpec {
                    name: format!("output__{i}"),
                    datatype: None,
                    shape: None,
                    param_type: Type::Tensor,
                    optional: false,
                })
                .collect()
        }
    };
    Ok(ServedModel {
        name,
        version: MODEL_VERSION.into(),
        path: path.to_path_buf(),
        module,
        inputs,
        outputs_configured: config.outputs.is_some(),
        outputs,
        max_batch: config.max_batch_size.unwrap_or(default_max_batch).max(1),
    })
}

impl ServedModel {
    /// The configured output names (empty: names come from the result).
    pub fn output_names(&self) -> Vec<String> {
        if !self.outputs_configured {
            return Vec::new();
        }
        self.outputs.iter().map(|o| o.name.clone()).collect()
    }

    /// The request's tensors in forward's parameter order, checked against the declared
    /// names, datatypes and shapes; trailing inputs with defaults may be left out.
    pub fn order_inputs(&self, inputs: Vec<WireTensor>) -> Result<Vec<WireTensor>, InferError> {
        let mut slots: Vec<Option<WireTensor>> = vec![None; self.inputs.len()];
        for t in inputs {
            let Some(i) = self.inputs.iter().position(|s| s.name == t.name) else {
                let known: Vec<&str> = self.inputs.iter().map(|s| s.name.as_str()).collect();
                return Err(InferError::BadRequest(format!(
                    "model '{}' has no input '{}' (inputs: {})",
                    self.name,
                    t.name,
                    known.join(", ")
                )));
            };
            if slots[i].is_some() {
                return Err(InferError::BadRequest(format!(
                    "input '{}' given twice",
                    t.name
                )));
            }
            self.inputs[i].check(&t)?;
            slots[i] = Some(t);
        }
        // keep the given prefix: forward fills defaults only for trailing parameters
        let given = slots.iter().rposition(Option::is_some).map_or(0, |i| i + 1);
        let mut ordered = Vec::with_capacity(given);
        for (spec, slot) in self.inputs.iter().zip(slots) {
            match slot {
                Some(t) => ordered.push(t),
                None if spec.optional && ordered.len() >= given => break,
                None => {
                    return Err(InferError::BadRequest(format!(
                        "missing input '{}' of model '{}'",
                        spec.name, self.name
                    )))
                }
            }
        }
        Ok(ordered)
    }

    /// The forward arguments for checked, ordered inputs: tensors, or numbers for `int`,
    /// `float` and `bool` parameters (sent as one-element tensors).
    pub fn arguments(&self, inputs: &[WireTensor]) -> Result<Vec<IValue>, InferError> {
        inputs
            .iter()
            .zip(&self.inputs)
            .map(|(t, spec)| {
                let tensor = t.to_tensor()?;
                let number = || {
                    if tensor.numel() != 1 {
                        return Err(InferError::BadRequest(format!(
                            "input '{}' is a number: expected one element, got shape {:?}",
                            t.name, t.shape
                        )));
                    }
                    tensor
                        .item()
                        .map_err(|e| InferError::BadRequest(format!("input '{}': {e}", t.name)))
                };
                Ok(match spec.param_type {
                    Type::Int => IValue::Int(number()?.to_i64()),
                    Type::Float => IValue::Double(number()?.to_f64()),
                    Type::Bool => IValue::Bool(number()?.to_bool()),
                    _ => IValue::Tensor(tensor),
                })
            })
            .collect()
    }
}

impl TensorSpec {
    /// A 400 if `t` has another datatype or shape than declared.
    fn check(&self, t: &WireTensor) -> Result<(), InferError> {
        if let Some(want) = self.datatype {
            if want != t.datatype {
                return Err(InferError::BadRequest(format!(
                    "input '{}': datatype {}, expected {}",
                    t.name,
                    t.datatype.name(),
                    want.name()
                )));
            }
        }
        if let Some(want) = &self.shape {
            let fits = want.len() == t.shape.len()
                && want
                    .iter()
                    .zip(&t.shape)
                    .all(|(&w, &g)| w < 0 || usize::try_from(w).is_ok_and(|w| w == g));
            if !fits {
                return Err(InferError::BadRequest(format!(
                    "input '{}': shape {:?}, expected {want:?} (-1: any size)",
                    t.name, t.shape
                )));
            }
        }
        Ok(())
    }
}
