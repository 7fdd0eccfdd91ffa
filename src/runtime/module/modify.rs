//! Changing a loaded module in place, as `nn.Module` / `ScriptModule` do: `train`/`eval`,
//! dtype casts (`half`, `double`, ...), devices (`cpu`; every accelerator is an error),
//! `requires_grad_`, and typed attribute assignment (`set_attr("drop.mc_dropout_enabled", ..)`).
//! Every change is made to the module's objects, so `save` writes it and `torch.jit.load` of
//! the saved archive shows it.

use super::{module_err, replace_tensors, short_name, Module};
use crate::runtime::interpreter::matches_type;
use crate::tensor::{DType, Tensor, TensorIdentity};
use crate::values::types::Type;
use crate::values::IValue;
use crate::Result;
use std::collections::{HashMap, HashSet};

impl Module {
    /// `train(mode)`: sets `training` on this module and every submodule, so code reading
    /// `self.training` (dropout, batch norm) switches behaviour.
    pub fn train(&self, mode: bool) {
        for m in self.modules() {
            m.object().set("training", IValue::Bool(mode));
        }
    }

    /// `eval()`: `train(false)`.
    pub fn eval(&self) {
        self.train(false)
    }

    /// `half()`: floating-point parameters and buffers to float16.
    pub fn half(&self) -> Result<()> {
        self.to_dtype(DType::Float16)
    }

    /// `bfloat16()`.
    pub fn bfloat16(&self) -> Result<()> {
        self.to_dtype(DType::BFloat16)
    }

    /// `float()`.
    pub fn float(&self) -> Result<()> {
        self.to_dtype(DType::Float32)
    }

    /// `double()`.
    pub fn double(&self) -> Result<()> {
        self.to_dtype(DType::Float64)
    }

    /// `type(dst_type)`: unlike `to`, PyTorch's `Module.type` casts every parameter and buffer,
    /// integer ones included.
    pub fn type_(&self, dtype: DType) -> Result<()> {
        self.cast_tensors(dtype, |_| true)
    }

    /// `cpu()`: tensors already live on the CPU.
    pub fn cpu(&self) -> Result<()> {
        Ok(())
    }

    /// `cuda()`: an error, tsrun has no accelerator back end.
    pub fn cuda(&self) -> Result<()> {
        self.to_device("cuda")
    }

    /// `xpu()`: an error, tsrun has no accelerator back end.
    pub fn xpu(&self) -> Result<()> {
        self.to_device("xpu")
    }

    /// `ipu()`: an error, tsrun has no accelerator back end.
    pub fn ipu(&self) -> Result<()> {
        self.to_device("ipu")
    }

    /// `mtia()`: an error, tsrun has no accelerator back end.
    pub fn mtia(&self) -> Result<()> {
        self.to_device("mtia")
    }

    /// `to(device)`: `cpu` (optionally `cpu:0`) is accepted; any other device is an error.
    pub fn to_device(&self, device: &str) -> Result<()> {
        let kind = device.split(':').next().unwrap_or(device);
        if kind == "cpu" {
            return Ok(());
        }
        Err(module_err(format!(
            "no such device: '{device}' (tsrun runs on the CPU only; the module stays on cpu)"
        )))
    }

    /// `requires_grad_(flag)`: sets the flag on every parameter (and every reference to it).
    /// tsrun has no autograd: the flag is kept, saved and reported, but no gradient is ever
    /// computed.
    pub fn requires_grad_(&self, requires_grad: bool) {
        let mut map: HashMap<TensorIdentity, Tensor> = HashMap::new();
        for t in self.parameters() {
            if t.requires_grad() != requires_grad {
                let mut new = t.clone();
                new.set_requires_grad(requires_grad);
                map.insert(t.identity(), new);
            }
        }
        if !map.is_empty() {
            replace_tensors(
                &IValue::Object(self.object().clone()),
                &map,
                &mut HashSet::new(),
                0,
            );
        }
    }

    /// `zero_grad(set_to_none)`: with no autograd a parameter never has a `.grad`, so there is
    /// nothing to reset; it exists so code written against `nn.Module` runs unchanged.
    pub fn zero_grad(&self, _set_to_none: bool) {}

    /// Cast every parameter and buffer `which` selects to `dtype`, with `to_dtype`'s aliasing.
    pub(super) fn cast_tensors(&self, dtype: DType, which: impl Fn(&Tensor) -> bool) -> Result<()> {
        self.map_tensors(|t| {
            if !which(t) || t.dtype() == dtype {
                return Ok(None);
            }
            let mut new = t.to_dtype(dtype)?;
            new.set_requires_grad(t.requires_grad());
            Ok(Some(new))
        })
    }

    /// `to(memory_format=format)`: 4-D (channels_last) or 5-D (channels_last_3d) parameters and
    /// buffers get that layout (same values, new strides); `Contiguous` makes 4-D and 5-D ones
    /// contiguous again. Kernels read any strides, so the module runs as before.
    pub fn to_memory_format(&self, format: MemoryFormat) -> Result<()> {
        self.map_tensors(|t| {
            let rank = t.dim();
            if rank != 4 && rank != 5 {
                return Ok(None);
            }
            let strides = match (format, rank) {
                (MemoryFormat::Contiguous, _) => {
                    crate::tensor::contiguous_strides(t.shape()).to_vec()
                }
                (MemoryFormat::ChannelsLast, 4) | (MemoryFormat::ChannelsLast3d, 5) => {
                    channels_last_strides(t.shape())
                }
                (MemoryFormat::ChannelsLast, _) => {
                    return Err(module_err(
                        "required rank 4 tensor to use channels_last format",
                    ))
                }
                (MemoryFormat::ChannelsLast3d, _) => {
                    return Err(module_err(
                        "required rank 5 tensor to use channels_last_3d format",
                    ))
                }
            };
            if t.strides() == strides.as_slice() {
                return Ok(None);
            }
            let mut new =
                Tensor::zeros(t.shape(), t.dtype())?.as_strided(t.shape(), &strides, 0)?;
            new.copy_from(t)?;
            new.set_requires_grad(t.requires_grad());
            Ok(Some(new))
        })
    }

    /// Replace parameters and buffers by `f`'s result (`None`: keep), as `nn.Module._apply`: a
    /// parameter is swapped everywhere it is referenced (tied weights, an RNN's flat weight
    /// list), a buffer attribute only where it is.
    fn map_tensors(&self, f: impl Fn(&Tensor) -> Result<Option<Tensor>>) -> Result<()> {
        let mut swapped: HashMap<TensorIdentity, Tensor> = HashMap::new();
        for m in self.modules() {
            let Some(decl) = m.class_decl().cloned() else {
                continue;
            };
            for (name, v) in m.fields() {
                let IValue::Tensor(t) = v else {
                    continue;
                };
                if decl.is_parameter(&name) {
                    // A parameter met again (tied weights) was swapped already.
                    if let std::collections::hash_map::Entry::Vacant(slot) =
                        swapped.entry(t.identity())
                    {
                        if let Some(new) = f(&t)? {
                            slot.insert(new);
                        }
                    }
                } else if decl.is_buffer(&name) {
                    if let Some(new) = f(&t)? {
                        m.object().set(&name, IValue::Tensor(new));
                    }
                }
            }
        }
        if !swapped.is_empty() {
            let mut seen = HashSet::new();
            replace_tensors(
                &IValue::Object(self.object().clone()),
                &swapped,
                &mut seen,
                0,
            );
        }
        Ok(())
    }

    /// `setattr(module, "a.b.name", value)` on a script module: the attribute must be declared
    /// by the class of `a.b`, and `value` must have the declared type (an `int` is accepted for
    /// a `float`, as Python converts it). `Final` constants are compiled into the code and
    /// cannot be set. Submodules are replaced only by an object of the declared class.
    pub fn set_attr(&self, path: &str, value: IValue) -> Result<()> {
        let (owner, name) = self.split_target(path)?;
        let Some(decl) = owner.class_decl() else {
            return Err(module_err(format!(
                "class {} is not declared in the archive's code",
                owner.class_name()
            )));
        };
        if decl.constants.iter().any(|(n, _, _)| n == name) {
            return Err(module_err(format!(
                "'{name}' is a constant (Final) of {}: it is compiled into the code and cannot be set",
                short_name(owner.class_name())
            )));
        }
        let Some(ty) = decl.attribute_type(name).cloned() else {
            return Err(module_err(format!(
                "'{}' object has no attribute '{name}' (a script module's attributes are fixed by its class)",
                short_name(owner.class_name())
            )));
        };
        let value = coerce(value, &ty);
        if !matches_type(&value, &ty) {
            return Err(module_err(format!(
                "Could not cast attribute '{name}' to type {}: got a value of type {}",
                ty.annotation_str(),
                value.kind_name()
            )));
        }
        owner.object().set(name, value);
        Ok(())
    }
}

impl Module {
    /// `apply(fn)`: `fn` on every submodule (children first, recursively), then on this module.
    pub fn apply(&self, f: &mut dyn FnMut(&Module) -> Result<()>) -> Result<()> {
        self.apply_depth(f, 0)
    }

    fn apply_depth(&self, f: &mut dyn FnMut(&Module) -> Result<()>, depth: usize) -> Result<()> {
        if depth > crate::pickle::MAX_NESTING {
            return Err(module_err("module tree too deep for apply"));
        }
        for child in self.children() {
            child.apply_depth(f, depth + 1)?;
        }
        f(self)
    }

    /// `set_submodule("a.b", module)`: replaces a declared submodule by a module of the same
    /// class from the same loaded archive (the class's code must be the one this archive runs).
    pub fn set_submodule(&self, target: &str, module: &Module) -> Result<()> {
        if !std::sync::Arc::ptr_eq(self.shared(), module.shared()) {
            return Err(module_err(format!(
                "set_submodule('{target}'): the module comes from another loaded archive; its class code may differ from this archive's"
            )));
        }
        let (owner, name) = self.split_target(target)?;
        let is_child = owner.named_children().iter().any(|(n, _)| n == name);
        if !is_child {
            return Err(module_err(format!(
                "{} has no submodule `{name}`",
                short_name(owner.class_name())
            )));
        }
        owner.set_attr(name, IValue::Object(module.object().clone()))
    }

    /// `add_module(name, module)` / `register_module`: a script module's submodules are fixed by
    /// its class, so only a declared submodule can be (re)assigned; a new name is PyTorch's error.
    pub fn add_module(&self, name: &str, module: &Module) -> Result<()> {
        if self
            .class_decl()
            .and_then(|d| d.attribute_type(name))
            .is_none()
        {
            return Err(module_err(format!(
                "Can't add a new submodule after ScriptModule construction. Tried to add '{name}'"
            )));
        }
        self.set_submodule(name, module)
    }

    /// `get_extra_state()`: the class's own (scripted) `get_extra_state`; without one, PyTorch's
    /// error.
    pub fn get_extra_state(&self) -> Result<IValue> {
        if !self.defines_method("get_extra_state") {
            return Err(module_err(NO_EXTRA_STATE));
        }
        self.run_method("get_extra_state", &[])
    }

    /// `set_extra_state(state)`: the class's own (scripted) `set_extra_state`; without one, an
    /// error as PyTorch's (it raises for a state it has no way to apply).
    pub fn set_extra_state(&self, state: IValue) -> Result<()> {
        if !self.defines_method("set_extra_state") {
            return Err(module_err(format!(
                "{} defines no set_extra_state: {NO_EXTRA_STATE}",
                short_name(self.class_name())
            )));
        }
        self.run_method("set_extra_state", &[state]).map(|_| ())
    }

    fn defines_method(&self, name: &str) -> bool {
        self.class_decl()
            .is_some_and(|d| d.methods.iter().any(|m| m.name == name))
    }

    /// `to_empty(device="cpu")`: every parameter and buffer replaced by a new tensor of the same
    /// shape, dtype and `requires_grad` (PyTorch leaves it uninitialized; here it is zeroed),
    /// tied references kept tied.
    pub fn to_empty(&self, device: &str) -> Result<()> {
        self.to_device(device)?;
        let mut map: HashMap<TensorIdentity, Tensor> = HashMap::new();
        for t in self.parameters().into_iter().chain(self.buffers()) {
            if let std::collections::hash_map::Entry::Vacant(slot) = map.entry(t.identity()) {
                let mut new = Tensor::zeros(t.shape(), t.dtype())?;
                new.set_requires_grad(t.requires_grad());
                slot.insert(new);
            }
        }
        replace_tensors(
            &IValue::Object(self.object().clone()),
            &map,
            &mut HashSet::new(),
            0,
        );
        Ok(())
    }

    /// `share_memory()`: a loaded module's storages are already shared by every thread of the
    /// process (there are no worker processes to share them with), so nothing moves.
    pub fn share_memory(&self) {}

    /// `register_module(name, module)`: `add_module`.
    pub fn register_module(&self, name: &str, module: &Module) -> Result<()> {
        self.add_module(name, module)
    }

    /// `register_buffer(name, tensor, persistent)`: replaces a declared buffer. A new name,
    /// `None` and `persistent = false` are PyTorch's errors for a script module (its buffers are
    /// all persistent, typed `Tensor`, and fixed by the class).
    pub fn register_buffer(
        &self,
        name: &str,
        tensor: Option<Tensor>,
        persistent: bool,
    ) -> Result<()> {
        let declared = self.class_decl().is_some_and(|d| d.is_buffer(name));
        if !declared {
            return Err(module_err(format!(
                // PyTorch's message, verbatim (it has no closing quote)
                "Can't add a new parameter after ScriptModule construction. Tried to add '{name}"
            )));
        }
        if !persistent {
            // PyTorch's message, verbatim
            return Err(module_err(
                "ScriptModule does not support non-persistent buffers",
            ));
        }
        let Some(tensor) = tensor else {
            // PyTorch's message, verbatim: its setattr turns None into an undefined tensor,
            // which the Tensor-typed attribute refuses
            return Err(module_err(format!(
                "strides() called on an undefined Tensor (register_buffer('{name}', None): a script module's buffer is typed Tensor and cannot hold None)"
            )));
        };
        self.set_attr(name, IValue::Tensor(tensor))
    }

    /// `register_parameter(name, tensor)`: replaces a declared parameter; a new name is
    /// PyTorch's error.
    pub fn register_parameter(&self, name: &str, tensor: Option<Tensor>) -> Result<()> {
        let declared = self.class_decl().is_some_and(|d| d.is_parameter(name));
        if !declared {
            return Err(module_err(format!(
                // PyTorch's message, verbatim (it has no closing quote)
                "Can't add a new parameter after ScriptModule construction. Tried to add '{name}"
            )));
        }
        self.set_attr(name, tensor.map(IValue::Tensor).unwrap_or_default())
    }
}

/// The layouts `Module.to(memory_format=...)` takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryFormat {
    /// `torch.contiguous_format`.
    Contiguous,
    /// `torch.channels_last` (4-D tensors).
    ChannelsLast,
    /// `torch.channels_last_3d` (5-D tensors).
    ChannelsLast3d,
}

/// NHWC (NDHWC) strides for an NCHW (NCDHW) shape: channels vary fastest.
fn channels_last_strides(shape: &[usize]) -> Vec<isize> {
    let mut strides = vec![0isize; shape.len()];
    let mut step = 1isize;
    // C first, then the spatial dims from last to first, then N
    let mut order: Vec<usize> = vec![1];
    order.extend((2..shape.len()).rev());
    order.push(0);
    for d in order {
        strides[d] = step;
        step *= shape[d].max(1) as isize;
    }
    strides
}

/// PyTorch's `nn.Module.get_extra_state` error for a module that defines none.
const NO_EXTRA_STATE: &str = "Reached a code path in Module.get_extra_state() that should never be called. Please file an issue at https://github.com/pytorch/pytorch/issues/new?template=bug-report.yml to report this bug.";

/// Python's implicit conversions on assignment: an int to a float attribute.
fn coerce(value: IValue, ty: &Type) -> IValue {
    match (value, ty) {
        (IValue::Int(i), Type::Float) => IValue::Double(i as f64),
        (IValue::Int(i), Type::Optional(inner)) if **inner == Type::Float => {
            IValue::Double(i as f64)
        }
        (v, _) => v,
    }
}
