//! `Module`: a loaded TorchScript module, as a cheap handle (shared loaded state + the object it
//! denotes), with PyTorch's tree API (`named_parameters`, `state_dict`, `get_submodule`, ...).

#![deny(missing_docs)]

pub mod decls;
mod hooks;
mod modify;
mod prepack;
mod repr;
mod run;
mod sampling;
mod save;
mod setstate;
mod state_dict;
mod warm;

pub use hooks::{
    ForwardHook, ForwardHookWithKwargs, ForwardPreHook, ForwardPreHookWithKwargs, HookHandle,
    HookTable, Kwargs, LoadStateDictPostHook, LoadStateDictPreHook, StateDictHook,
    StateDictPreHook,
};
pub use modify::MemoryFormat;
pub use run::{manual_seed, set_num_threads, set_num_threads_for_this_thread};
pub use sampling::{McSamples, MAX_MC_SAMPLES};
pub use state_dict::{
    npz_bytes, read_npz, read_npz_with_strings, read_safetensors, read_state_dict,
    safetensors_bytes, write_state_dict, IncompatibleKeys, StateDict,
};

use crate::archive::Archive;
use crate::pickle::{EnumResolver, StorageLoader, Unpickler};
use crate::runtime::LoadOptions;
use crate::tensor::{DType, Tensor, TensorIdentity};
use crate::values::types::Type;
use crate::values::{EnumValue, IValue, Object, Tuple};
use crate::{Error, Result};
pub use decls::{ClassDecl, ClassKind, ClassTable, MethodDecl};
use indexmap::IndexMap;
use std::collections::{HashMap, HashSet};
use std::io::{Read, Seek};
use std::path::Path;
use std::sync::{Arc, OnceLock};

/// Everything loaded from one archive, shared by every `Module` handle into it.
pub struct ModuleShared {
    /// The archive's top folder name (`net` for `net/data.pkl`).
    pub folder: String,
    /// The archive's file format version.
    pub version: u64,
    /// Code records (`code/...py`) in archive order, as text.
    code: IndexMap<String, Arc<str>>,
    /// Records kept verbatim for re-saving (debug_pkl and anything tsrun does not interpret).
    raw_records: IndexMap<String, Arc<[u8]>>,
    extra: IndexMap<String, Vec<u8>>,
    constants: Vec<IValue>,
    classes: ClassTable,
    /// `LoadOptions::max_code_depth`, applied when the code is parsed (on first use).
    max_code_depth: usize,
    /// The parsed code files, filled on first use by [`Module::program`].
    program: OnceLock<std::result::Result<Arc<Vec<crate::frontend::ast::File>>, ParseError>>,
    /// The compiled program, filled on first use by the compiler (see `crate::ir::unit`).
    compiled: OnceLock<std::result::Result<Arc<crate::ir::unit::CompilationUnit>, CodeError>>,
    /// The interpreter over the compiled program, built on first call (see `run.rs`).
    interpreter:
        OnceLock<std::result::Result<Arc<crate::runtime::interpreter::Interpreter>, String>>,
    /// Held shared by calls that only read module state and exclusively by calls that may write
    /// it, so that calls from many threads behave as if they ran one after another wherever
    /// that matters (see `run.rs`).
    pub(crate) state_lock: parking_lot::RwLock<()>,
    /// What each method and function may write, by `class::method` or function name.
    pub(crate) effects: parking_lot::Mutex<HashMap<String, crate::ir::passes::effects::Effects>>,
    /// What a call of a module of each class (`forward` and the class's hooks) may write,
    /// once final (see `run.rs`).
    pub(crate) call_effects:
        parking_lot::RwLock<HashMap<Arc<str>, crate::ir::passes::effects::Effects>>,
    /// Hooks registered from Rust (`register_forward_hook`, ...), by module object.
    hooks: Arc<HookTable>,
}

/// A TorchScript module: the root of a loaded archive or one of its submodules.
#[derive(Clone)]
pub struct Module {
    shared: Arc<ModuleShared>,
    object: Object,
}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Module({})", self.object.class_name())
    }
}

use crate::frontend::ParseError;

/// A cached failure to parse or compile an archive's code, replayed to every caller; a syntax
/// error stays typed so it can be rendered with its source line.
#[derive(Clone, Debug)]
enum CodeError {
    Parse(ParseError),
    Other(String),
}

impl From<CodeError> for Error {
    fn from(e: CodeError) -> Error {
        match e {
            CodeError::Parse(p) => Error::Parse(p),
            CodeError::Other(msg) => module_err(msg),
        }
    }
}

fn module_err(msg: impl Into<String>) -> Error {
    Error::Module(msg.into())
}

/// The last component of a qualified class name.
fn short_name(qualified: &str) -> &str {
    qualified.rsplit('.').next().unwrap_or(qualified)
}

impl Module {
    /// Load a `torch.jit.save` archive from a file (storages are memory-mapped).
    pub fn load(path: impl AsRef<Path>) -> Result<Module> {
        Module::load_with(path, &LoadOptions::default())
    }

    /// [`Module::load`] within `options`.
    pub fn load_with(path: impl AsRef<Path>, options: &LoadOptions) -> Result<Module> {
        let archive = Archive::open_with(path, &options.archive_limits())?;
        Module::from_archive_with(&archive, options)
    }

    /// Load an archive held in memory.
    pub fn load_bytes(data: &[u8]) -> Result<Module> {
        Module::load_bytes_with(data, &LoadOptions::default())
    }

    /// [`Module::load_bytes`] within `options`.
    pub fn load_bytes_with(data: &[u8], options: &LoadOptions) -> Result<Module> {
        let archive = Archive::from_bytes_with(data, &options.archive_limits())?;
        Module::from_archive_with(&archive, options)
    }

    /// Load an archive from any seekable reader.
    pub fn load_reader<R: Read + Seek>(reader: R) -> Result<Module> {
        let options = LoadOptions::default();
        let archive = Archive::from_reader_with(reader, &options.archive_limits())?;
        Module::from_archive_with(&archive, &options)
    }

    /// Build a module from an opened archive.
    pub fn from_archive(archive: &Archive) -> Result<Module> {
        Module::from_archive_with(archive, &LoadOptions::default())
    }

    /// [`Module::from_archive`] within `options` (pickle and code depth).
    pub fn from_archive_with(archive: &Archive, options: &LoadOptions) -> Result<Module> {
        let mut code = IndexMap::new();
        let mut raw_records = IndexMap::new();
        for name in archive.record_names() {
            if name.starts_with("code/") && name.ends_with(".py") {
                code.insert(name.to_string(), Arc::from(archive.record_text(name)?));
            } else if !is_regenerated_record(name) {
                raw_records.insert(name.to_string(), Arc::from(archive.record(name)?.as_ref()));
            }
        }
        let classes = ClassTable::from_code(code.iter().map(|(k, v)| (k.as_str(), &**v)))
            .map_err(module_err)?;
        let enums = |class: &str, value: &IValue| resolve_enum(&classes, class, value);
        let depth = options.max_pickle_depth;
        let root = unpickle_record(archive, "data.pkl", "data", &enums, depth)?;
        let IValue::Object(object) = root else {
            return Err(module_err(format!(
                "data.pkl holds a {}, not a module object",
                root.kind_name()
            )));
        };
        let constants = if archive.has_record("constants.pkl") {
            match unpickle_record(archive, "constants.pkl", "constants", &enums, depth)? {
                IValue::Tuple(t) => t.items().to_vec(),
                other => {
                    return Err(module_err(format!(
                        "constants.pkl holds a {}, not a tuple",
                        other.kind_name()
                    )))
                }
            }
        } else {
            Vec::new()
        };
        check_classes(&classes, &object)?;
        apply_declared_types(&classes, &object);
        let shared = ModuleShared {
            folder: archive.folder().to_string(),
            version: archive.version(),
            code,
            raw_records,
            extra: archive.extra_files()?,
            constants,
            classes,
            max_code_depth: options.max_code_depth,
            program: OnceLock::new(),
            compiled: OnceLock::new(),
            interpreter: OnceLock::new(),
            state_lock: parking_lot::RwLock::new(()),
            effects: parking_lot::Mutex::new(HashMap::new()),
            call_effects: parking_lot::RwLock::new(HashMap::new()),
            hooks: Arc::default(),
        };
        let module = Module {
            shared: Arc::new(shared),
            object,
        };
        module.apply_setstate()?;
        Ok(module)
    }

    /// The shared loaded state (classes, code, constants, the compiled-program slot).
    pub fn shared(&self) -> &Arc<ModuleShared> {
        &self.shared
    }

    /// Every code file parsed by the frontend (parsed once, on first use), in archive order.
    pub fn program(&self) -> Result<Arc<Vec<crate::frontend::ast::File>>> {
        self.shared
            .program
            .get_or_init(|| {
                self.shared
                    .code
                    .iter()
                    .map(|(path, text)| {
                        // Each code file carries its debug records (decoded only if a graph
                        // is printed), as PyTorch's importer attaches them to the Source.
                        let debug = format!("{path}.debug_pkl");
                        let source = match self.shared.raw_records.get(&debug) {
                            Some(raw) => crate::frontend::source::Source::with_debug_records(
                                path.as_str(),
                                text.as_ref(),
                                crate::frontend::debug_pkl::DebugRecords::new(debug, raw.clone()),
                            ),
                            None => crate::frontend::source::Source::new(
                                path.as_str(),
                                text.as_ref(),
                                1,
                            ),
                        };
                        crate::frontend::parse_source_with(source, self.shared.max_code_depth)
                    })
                    .collect::<std::result::Result<Vec<_>, ParseError>>()
                    .map(Arc::new)
            })
            .clone()
            .map_err(Error::Parse)
    }

    /// The object this module denotes.
    pub fn object(&self) -> &Object {
        &self.object
    }

    /// A handle to another object of the same archive.
    pub fn with_object(&self, object: Object) -> Module {
        Module {
            shared: self.shared.clone(),
            object,
        }
    }

    /// Qualified class name (`__torch__.torch.nn.modules.linear.Linear`).
    pub fn class_name(&self) -> &str {
        self.object.class_name()
    }

    /// The class declarations of the whole program.
    pub fn classes(&self) -> &ClassTable {
        &self.shared.classes
    }

    /// This module's class declaration.
    pub fn class_decl(&self) -> Option<&ClassDecl> {
        self.shared.classes.get(self.class_name())
    }

    /// An attribute's current value.
    pub fn attr(&self, name: &str) -> Option<IValue> {
        self.object.get(name)
    }

    /// `self.training`.
    pub fn training(&self) -> bool {
        self.attr("training")
            .and_then(|v| v.as_bool())
            .unwrap_or(true)
    }

    /// Names of the methods of this module's class in source order, without hooks (as
    /// `_method_names()`).
    pub fn method_names(&self) -> Vec<String> {
        self.class_decl()
            .map(|c| {
                c.methods
                    .iter()
                    .filter(|m| {
                        !c.forward_hooks.contains(&m.name) && !c.forward_pre_hooks.contains(&m.name)
                    })
                    .map(|m| m.name.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Names of the forward hooks, in call order.
    pub fn forward_hooks(&self) -> Vec<String> {
        self.class_decl()
            .map(|c| c.forward_hooks.clone())
            .unwrap_or_default()
    }

    /// Names of the forward pre-hooks, in call order.
    pub fn forward_pre_hooks(&self) -> Vec<String> {
        self.class_decl()
            .map(|c| c.forward_pre_hooks.clone())
            .unwrap_or_default()
    }

    /// Extra files saved with the archive (`extra/NAME`).
    pub fn extra_files(&self) -> &IndexMap<String, Vec<u8>> {
        &self.shared.extra
    }

    /// Tensor constants (`constants.pkl`), referenced from code as `CONSTANTS.cN`.
    pub fn constants(&self) -> &[IValue] {
        &self.shared.constants
    }

    /// Code records by path (`code/__torch__.py`), in archive order.
    pub fn code_files(&self) -> &IndexMap<String, Arc<str>> {
        &self.shared.code
    }

    /// The decoded `debug_pkl` of a code file (`code/__torch__.py`), if the archive has one.
    pub fn debug_pkl(&self, code_path: &str) -> Option<Result<IValue>> {
        let name = format!("{code_path}.debug_pkl");
        let raw = self.shared.raw_records.get(&name)?;
        Some(crate::pickle::unpickle_data(raw, &name).map_err(Error::from))
    }

    /// Attribute names and values in declaration order.
    fn fields(&self) -> Vec<(Arc<str>, IValue)> {
        self.object
            .fields()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    fn is_submodule_value(&self, v: &IValue) -> Option<Object> {
        match v {
            IValue::Object(o) if self.shared.classes.is_module(o.class_name()) => Some(o.clone()),
            _ => None,
        }
    }

    /// Direct parameters (`__parameters__`, skipping None), in declaration order.
    fn own_tensors(&self, parameters: bool) -> Vec<(String, Tensor)> {
        let Some(decl) = self.class_decl() else {
            return Vec::new();
        };
        self.fields()
            .into_iter()
            .filter(|(k, _)| {
                if parameters {
                    decl.is_parameter(k)
                } else {
                    decl.is_buffer(k)
                }
            })
            .filter_map(|(k, v)| match v {
                IValue::Tensor(t) => Some((k.to_string(), t)),
                _ => None,
            })
            .collect()
    }

    /// `named_children()`: direct submodules in declaration order.
    pub fn named_children(&self) -> Vec<(String, Module)> {
        self.fields()
            .into_iter()
            .filter_map(|(k, v)| {
                self.is_submodule_value(&v)
                    .map(|o| (k.to_string(), self.with_object(o)))
            })
            .collect()
    }

    /// `children()`: the direct submodules, in registration order.
    pub fn children(&self) -> Vec<Module> {
        self.named_children().into_iter().map(|(_, m)| m).collect()
    }

    /// `named_modules(prefix, remove_duplicate)`: pre-order, this module first.
    pub fn named_modules(&self, prefix: &str, remove_duplicate: bool) -> Vec<(String, Module)> {
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let mut stack = vec![(prefix.to_string(), self.clone())];
        while let Some((name, m)) = stack.pop() {
            let id = Arc::as_ptr(&m.object.0) as usize;
            if remove_duplicate && !seen.insert(id) {
                continue;
            }
            let children = m.named_children();
            for (child, cm) in children.into_iter().rev() {
                let full = if name.is_empty() {
                    child
                } else {
                    format!("{name}.{child}")
                };
                stack.push((full, cm));
            }
            out.push((name, m));
            if out.len() > 1_000_000 {
                break;
            }
        }
        out
    }

    /// `modules()`: this module and every submodule, pre-order, each once.
    pub fn modules(&self) -> Vec<Module> {
        self.named_modules("", true)
            .into_iter()
            .map(|(_, m)| m)
            .collect()
    }

    fn named_tensors(
        &self,
        parameters: bool,
        prefix: &str,
        recurse: bool,
        remove_duplicate: bool,
    ) -> Vec<(String, Tensor)> {
        let modules = if recurse {
            self.named_modules(prefix, remove_duplicate)
        } else {
            vec![(prefix.to_string(), self.clone())]
        };
        let mut seen: Vec<Tensor> = Vec::new();
        let mut out = Vec::new();
        for (mname, m) in modules {
            for (n, t) in m.own_tensors(parameters) {
                if remove_duplicate {
                    let tv = IValue::Tensor(t.clone());
                    if seen.iter().any(|s| IValue::Tensor(s.clone()).is_same(&tv)) {
                        continue;
                    }
                    seen.push(t.clone());
                }
                let full = if mname.is_empty() {
                    n
                } else {
                    format!("{mname}.{n}")
                };
                out.push((full, t));
            }
        }
        out
    }

    /// `named_parameters(prefix, recurse, remove_duplicate)` in PyTorch's order.
    pub fn named_parameters(
        &self,
        prefix: &str,
        recurse: bool,
        remove_duplicate: bool,
    ) -> Vec<(String, Tensor)> {
        self.named_tensors(true, prefix, recurse, remove_duplicate)
    }

    /// `named_buffers(prefix, recurse, remove_duplicate)` in PyTorch's order.
    pub fn named_buffers(
        &self,
        prefix: &str,
        recurse: bool,
        remove_duplicate: bool,
    ) -> Vec<(String, Tensor)> {
        self.named_tensors(false, prefix, recurse, remove_duplicate)
    }

    /// `parameters()`: every parameter of the tree, each shared tensor once.
    pub fn parameters(&self) -> Vec<Tensor> {
        self.named_parameters("", true, true)
            .into_iter()
            .map(|(_, t)| t)
            .collect()
    }

    /// `buffers()`: every buffer of the tree, each shared tensor once.
    pub fn buffers(&self) -> Vec<Tensor> {
        self.named_buffers("", true, true)
            .into_iter()
            .map(|(_, t)| t)
            .collect()
    }

    /// `state_dict()`: module by module (no de-duplication), parameters then buffers.
    pub fn state_dict(&self) -> Vec<(String, Tensor)> {
        let mut out = Vec::new();
        self.state_dict_into("", &mut out, 0);
        out
    }

    fn state_dict_into(&self, prefix: &str, out: &mut Vec<(String, Tensor)>, depth: usize) {
        if depth > crate::pickle::MAX_NESTING {
            return;
        }
        for (n, t) in self
            .own_tensors(true)
            .into_iter()
            .chain(self.own_tensors(false))
        {
            out.push((format!("{prefix}{n}"), t));
        }
        for (n, m) in self.named_children() {
            m.state_dict_into(&format!("{prefix}{n}."), out, depth + 1);
        }
    }

    /// `get_submodule("a.b")`, with PyTorch's errors.
    pub fn get_submodule(&self, target: &str) -> Result<Module> {
        if target.is_empty() {
            return Ok(self.clone());
        }
        let mut m = self.clone();
        for item in target.split('.') {
            let Some(v) = m.attr(item) else {
                return Err(module_err(format!(
                    "{} has no attribute `{item}`",
                    short_name(m.class_name())
                )));
            };
            let Some(o) = m.is_submodule_value(&v) else {
                return Err(module_err(format!("`{item}` is not an nn.Module")));
            };
            m = m.with_object(o);
        }
        Ok(m)
    }

    fn split_target<'t>(&self, target: &'t str) -> Result<(Module, &'t str)> {
        match target.rsplit_once('.') {
            Some((path, name)) => Ok((self.get_submodule(path)?, name)),
            None => Ok((self.clone(), target)),
        }
    }

    /// `get_parameter("a.b.weight")`, with PyTorch's errors.
    pub fn get_parameter(&self, target: &str) -> Result<Tensor> {
        let (m, name) = self.split_target(target)?;
        let Some(v) = m.attr(name) else {
            return Err(module_err(format!(
                "{} has no attribute `{name}`",
                short_name(m.class_name())
            )));
        };
        match (v, m.class_decl().is_some_and(|d| d.is_parameter(name))) {
            (IValue::Tensor(t), true) => Ok(t),
            _ => Err(module_err(format!("`{name}` is not an nn.Parameter"))),
        }
    }

    /// `get_buffer("a.b.running_mean")`, with PyTorch's errors.
    pub fn get_buffer(&self, target: &str) -> Result<Tensor> {
        let (m, name) = self.split_target(target)?;
        let Some(v) = m.attr(name) else {
            return Err(module_err(format!(
                "{} has no attribute `{name}`",
                short_name(m.class_name())
            )));
        };
        match (v, m.class_decl().is_some_and(|d| d.is_buffer(name))) {
            (IValue::Tensor(t), true) => Ok(t),
            _ => Err(module_err(format!("`{name}` is not a buffer"))),
        }
    }

    /// `Module.to(dtype)`: cast floating-point (and complex) parameters and buffers of every
    /// module in place, as PyTorch's `nn.Module._apply` does: a parameter's data is swapped in
    /// place (`param.data = param.to(dtype)`), so every reference to the parameter (tied weights,
    /// an RNN's `_flat_weights` list) sees the new tensor; a buffer attribute is replaced by its
    /// cast (`self._buffers[k] = buf.to(dtype)`), so only that attribute changes. References are
    /// followed within this module's object graph.
    pub fn to_dtype(&self, dtype: DType) -> Result<()> {
        if !dtype.is_floating_point() && !dtype.is_complex() {
            return Err(module_err(format!(
                "nn.Module.to only accepts floating point or complex dtypes, but got desired dtype={dtype}"
            )));
        }
        self.cast_tensors(dtype, |t| {
            t.dtype().is_floating_point() || t.dtype().is_complex()
        })
    }
}

/// Replace every reference to a tensor in `map` (by identity) inside `v`'s object graph.
/// Objects, lists and dicts are updated in place; the new value is returned for a tensor or a
/// tuple (tuples are immutable: the caller stores the rebuilt one).
fn replace_tensors(
    v: &IValue,
    map: &HashMap<TensorIdentity, Tensor>,
    seen: &mut HashSet<usize>,
    depth: usize,
) -> Option<IValue> {
    if depth > crate::pickle::MAX_NESTING {
        return None;
    }
    match v {
        IValue::Tensor(t) => map.get(&t.identity()).map(|n| IValue::Tensor(n.clone())),
        IValue::Object(o) => {
            if seen.insert(Arc::as_ptr(&o.0) as *const u8 as usize) {
                let fields: Vec<(Arc<str>, IValue)> = o
                    .fields()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                for (k, x) in fields {
                    if let Some(new) = replace_tensors(&x, map, seen, depth + 1) {
                        o.set(&k, new);
                    }
                }
            }
            None
        }
        IValue::List(l) => {
            if seen.insert(Arc::as_ptr(&l.0) as *const u8 as usize) {
                let items = l.to_vec();
                for (i, x) in items.iter().enumerate() {
                    if let Some(new) = replace_tensors(x, map, seen, depth + 1) {
                        if let Some(slot) = l.items_mut().get_mut(i) {
                            *slot = new;
                        }
                    }
                }
            }
            None
        }
        IValue::Dict(d) => {
            if seen.insert(Arc::as_ptr(&d.0) as *const u8 as usize) {
                let values: Vec<IValue> = d.entries().into_iter().map(|(_, v)| v).collect();
                for (i, x) in values.iter().enumerate() {
                    if let Some(new) = replace_tensors(x, map, seen, depth + 1) {
                        if let Some((_, (_, slot))) = d.items_mut().get_index_mut(i) {
                            *slot = new;
                        }
                    }
                }
            }
            None
        }
        IValue::Tuple(t) => {
            let mut changed = false;
            let items: Vec<IValue> = t
                .items()
                .iter()
                .map(|x| match replace_tensors(x, map, seen, depth + 1) {
                    Some(new) => {
                        changed = true;
                        new
                    }
                    None => x.clone(),
                })
                .collect();
            changed.then(|| {
                IValue::Tuple(match t.class() {
                    Some(class) => Tuple::named(class.clone(), items),
                    None => Tuple::new(items),
                })
            })
        }
        _ => None,
    }
}

// Compile-time check: modules are shared across threads.
const _: fn() = || {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Module>();
};

/// Records rewritten on save rather than copied.
fn is_regenerated_record(name: &str) -> bool {
    name == "data.pkl"
        || name == "constants.pkl"
        || name == "version"
        || name == "byteorder"
        || name == ".data/serialization_id"
        || name.starts_with("data/")
        || name.starts_with("constants/")
        || name.starts_with("extra/")
}

fn unpickle_record(
    archive: &Archive,
    record: &str,
    storage_dir: &str,
    enums: &EnumResolver<'_>,
    max_depth: usize,
) -> Result<IValue> {
    let data = archive.record(record)?;
    let mut load = |key: &str, dtype: DType, numel: usize| {
        archive
            .storage(&format!("{storage_dir}/{key}"), dtype, numel)
            .map_err(|e| e.to_string())
    };
    let loader: &mut StorageLoader<'_> = &mut load;
    Ok(Unpickler::new(&data, record)
        .with_storages(loader)
        .with_enums(enums)
        .with_max_depth(max_depth)
        .load()?)
}

fn resolve_enum(
    classes: &ClassTable,
    class: &str,
    value: &IValue,
) -> std::result::Result<Arc<EnumValue>, String> {
    let decl = classes
        .get(class)
        .ok_or_else(|| format!("class {class} is not defined in the archive's code"))?;
    if decl.kind != ClassKind::Enum {
        return Err(format!(
            "class {class} is applied to a value but is not an Enum"
        ));
    }
    decl.enum_members
        .iter()
        .find(|(_, v)| v.is_same(value) || format!("{v:?}") == format!("{value:?}"))
        .map(|(name, v)| {
            Arc::new(EnumValue {
                class: decl.name.clone(),
                name: name.clone(),
                value: v.clone(),
            })
        })
        .ok_or_else(|| format!("{value:?} is not a member of enum {class}"))
}

/// Every object's class must be declared in the code (a missing code file is an error here,
/// not a surprise at run time).
fn check_classes(classes: &ClassTable, root: &Object) -> Result<()> {
    let mut seen = HashSet::new();
    let mut stack = vec![IValue::Object(root.clone())];
    while let Some(v) = stack.pop() {
        match v {
            IValue::Object(o) => {
                if !seen.insert(Arc::as_ptr(&o.0) as usize) {
                    continue;
                }
                if classes.get(o.class_name()).is_none() && !o.is_torchbind() {
                    return Err(module_err(format!(
                        "class {} is used in data.pkl but no code file declares it (expected in {})",
                        o.class_name(),
                        class_code_path(o.class_name())
                    )));
                }
                stack.extend(o.fields().values().cloned());
            }
            IValue::List(l) => stack.extend(l.to_vec()),
            IValue::Tuple(t) => stack.extend(t.items().iter().cloned()),
            IValue::Dict(d) => stack.extend(d.entries().into_iter().map(|(_, v)| v)),
            _ => {}
        }
    }
    Ok(())
}

/// `__torch__.a.b.C` -> `code/__torch__/a/b.py`.
fn class_code_path(class: &str) -> String {
    let module = class.rsplit_once('.').map(|(m, _)| m).unwrap_or(class);
    format!("code/{}.py", module.replace('.', "/"))
}

/// Give values the types their declarations state: NamedTuples are pickled as plain tuples.
fn apply_declared_types(classes: &ClassTable, root: &Object) {
    if !classes
        .classes
        .values()
        .any(|c| c.kind == ClassKind::NamedTuple)
    {
        return;
    }
    let mut seen = HashSet::new();
    retype_object(classes, root, &mut seen, 0);
}

fn retype_object(classes: &ClassTable, o: &Object, seen: &mut HashSet<usize>, depth: usize) {
    if depth > crate::pickle::MAX_NESTING || !seen.insert(Arc::as_ptr(&o.0) as usize) {
        return;
    }
    let Some(decl) = classes.get(o.class_name()) else {
        return;
    };
    for (name, ty) in &decl.attributes {
        if let Some(v) = o.get(name) {
            let nv = retype(classes, v, ty, seen, depth + 1);
            o.set(name, nv);
        }
    }
}

fn retype(
    classes: &ClassTable,
    v: IValue,
    ty: &Type,
    seen: &mut HashSet<usize>,
    depth: usize,
) -> IValue {
    if depth > crate::pickle::MAX_NESTING {
        return v;
    }
    match (v, ty) {
        (v, Type::Optional(inner)) => retype(classes, v, inner, seen, depth + 1),
        (IValue::Tuple(t), Type::Class(name)) => match classes.get(name) {
            Some(decl) if decl.kind == ClassKind::NamedTuple && t.class().is_none() => {
                let items = t
                    .items()
                    .iter()
                    .enumerate()
                    .map(|(i, x)| match decl.attributes.get(i) {
                        Some((_, fty)) => retype(classes, x.clone(), fty, seen, depth + 1),
                        None => x.clone(),
                    })
                    .collect();
                IValue::Tuple(Tuple::named(decl.name.clone(), items))
            }
            _ => IValue::Tuple(t),
        },
        (IValue::Tuple(t), Type::Tuple(tys)) if tys.len() == t.items().len() => {
            let items = t
                .items()
                .iter()
                .zip(tys)
                .map(|(x, ty)| retype(classes, x.clone(), ty, seen, depth + 1))
                .collect();
            IValue::Tuple(Tuple::new(items))
        }
        (IValue::List(l), Type::List(elem)) => {
            let items: Vec<IValue> = l
                .to_vec()
                .into_iter()
                .map(|x| retype(classes, x, elem, seen, depth + 1))
                .collect();
            *l.items_mut() = items;
            IValue::List(l)
        }
        (IValue::Dict(d), Type::Dict(_, vt)) => {
            let mut items = d.items_mut();
            for (_, (_, val)) in items.iter_mut() {
                let old = std::mem::take(val);
                *val = retype(classes, old, vt, seen, depth + 1);
            }
            drop(items);
            IValue::Dict(d)
        }
        (IValue::Object(o), _) => {
            retype_object(classes, &o, seen, depth + 1);
            IValue::Object(o)
        }
        (v, _) => v,
    }
}
