//! Hooks registered from Rust on a loaded module, as `register_forward_pre_hook` /
//! `register_forward_hook` (with `prepend`, `with_kwargs` and `always_call`) and the state-dict
//! hooks of `nn.Module`, each returning a removable [`HookHandle`].
//!
//! They run when the module they are registered on is called through [`Module::call`] /
//! [`Module::call_with`] (pre-hooks before the archive's own scripted pre-hooks, forward hooks
//! after its scripted hooks), not when compiled code calls the module as a submodule: that
//! call is inside the TorchScript program. They live with the loaded archive, not in it: `save`
//! does not write them (PyTorch cannot serialize Python hooks either). Backward hooks are an
//! error: there is no autograd.

use super::state_dict::{IncompatibleKeys, StateDict};
use super::{module_err, Module};
use crate::values::IValue;
use crate::Result;
use indexmap::IndexMap;
use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::{Arc, Weak};

/// `hook(module, args) -> None | new args`.
pub type ForwardPreHook =
    Arc<dyn Fn(&Module, &[IValue]) -> Result<Option<Vec<IValue>>> + Send + Sync>;
/// `hook(module, args, output) -> None | new output`.
pub type ForwardHook =
    Arc<dyn Fn(&Module, &[IValue], &IValue) -> Result<Option<IValue>> + Send + Sync>;
/// Keyword arguments of a call, in the order given ([`Module::call_kwargs`]).
pub type Kwargs = IndexMap<String, IValue>;
/// `hook(module, args, kwargs) -> None | (new args, new kwargs)` (`with_kwargs=True`).
pub type ForwardPreHookWithKwargs =
    Arc<dyn Fn(&Module, &[IValue], &Kwargs) -> Result<Option<(Vec<IValue>, Kwargs)>> + Send + Sync>;
/// `hook(module, args, kwargs, output) -> None | new output` (`with_kwargs=True`).
pub type ForwardHookWithKwargs =
    Arc<dyn Fn(&Module, &[IValue], &Kwargs, &IValue) -> Result<Option<IValue>> + Send + Sync>;
/// `hook(module, prefix, keep_vars)` before `state_dict` collects anything.
pub type StateDictPreHook = Arc<dyn Fn(&Module, &str, bool) -> Result<()> + Send + Sync>;
/// `hook(module, state_dict, prefix)` after `state_dict` (may edit it).
pub type StateDictHook = Arc<dyn Fn(&Module, &mut StateDict, &str) -> Result<()> + Send + Sync>;
/// `hook(module, state_dict)` before `load_state_dict` (may edit what is loaded).
pub type LoadStateDictPreHook = Arc<dyn Fn(&Module, &mut StateDict) -> Result<()> + Send + Sync>;
/// `hook(module, incompatible_keys)` after `load_state_dict` (may clear keys it accepts).
pub type LoadStateDictPostHook =
    Arc<dyn Fn(&Module, &mut IncompatibleKeys) -> Result<()> + Send + Sync>;

#[derive(Clone)]
enum Hook {
    Pre(ForwardPreHook),
    PreWithKwargs(ForwardPreHookWithKwargs),
    Forward {
        hook: ForwardHook,
        always_call: bool,
    },
    ForwardWithKwargs {
        hook: ForwardHookWithKwargs,
        always_call: bool,
    },
    StateDictPre(StateDictPreHook),
    StateDict(StateDictHook),
    LoadPre(LoadStateDictPreHook),
    LoadPost(LoadStateDictPostHook),
}

/// The Rust hooks of every module object of one loaded archive, by object address, each list in
/// call order.
#[derive(Default)]
pub struct HookTable {
    next_id: RwLock<u64>,
    hooks: RwLock<HashMap<usize, Vec<(u64, Hook)>>>,
}

/// Removes its hook on [`remove`](HookHandle::remove) (dropping the handle keeps the hook, as in
/// PyTorch).
#[derive(Debug)]
pub struct HookHandle {
    table: Weak<HookTable>,
    object: usize,
    id: u64,
}

impl HookHandle {
    /// `handle.remove()`.
    pub fn remove(self) {
        if let Some(table) = self.table.upgrade() {
            if let Some(list) = table.hooks.write().get_mut(&self.object) {
                list.retain(|(id, _)| *id != self.id);
            }
        }
    }
}

impl Module {
    fn object_key(&self) -> usize {
        Arc::as_ptr(&self.object().0) as *const u8 as usize
    }

    fn add_hook(&self, hook: Hook, prepend: bool) -> HookHandle {
        let table = &self.shared().hooks;
        let id = {
            let mut next = table.next_id.write();
            *next += 1;
            *next
        };
        let mut hooks = table.hooks.write();
        let list = hooks.entry(self.object_key()).or_default();
        if prepend {
            list.insert(0, (id, hook));
        } else {
            list.push((id, hook));
        }
        HookHandle {
            table: Arc::downgrade(table),
            object: self.object_key(),
            id,
        }
    }

    fn hooks(&self) -> Vec<Hook> {
        self.shared()
            .hooks
            .hooks
            .read()
            .get(&self.object_key())
            .map(|l| l.iter().map(|(_, h)| h.clone()).collect())
            .unwrap_or_default()
    }

    /// `register_forward_pre_hook(hook, prepend=prepend)`.
    pub fn register_forward_pre_hook(&self, hook: ForwardPreHook, prepend: bool) -> HookHandle {
        self.add_hook(Hook::Pre(hook), prepend)
    }

    /// `register_forward_hook(hook, prepend=prepend, always_call=always_call)`: with
    /// `always_call` the hook also runs when forward fails (with output None; the error stands).
    pub fn register_forward_hook(
        &self,
        hook: ForwardHook,
        prepend: bool,
        always_call: bool,
    ) -> HookHandle {
        self.add_hook(Hook::Forward { hook, always_call }, prepend)
    }

    /// `register_forward_pre_hook(hook, prepend=prepend, with_kwargs=True)`: the hook sees the
    /// keyword arguments of [`Module::call_kwargs`] too and may replace both.
    pub fn register_forward_pre_hook_with_kwargs(
        &self,
        hook: ForwardPreHookWithKwargs,
        prepend: bool,
    ) -> HookHandle {
        self.add_hook(Hook::PreWithKwargs(hook), prepend)
    }

    /// `register_forward_hook(hook, prepend=prepend, with_kwargs=True, always_call=always_call)`.
    pub fn register_forward_hook_with_kwargs(
        &self,
        hook: ForwardHookWithKwargs,
        prepend: bool,
        always_call: bool,
    ) -> HookHandle {
        self.add_hook(Hook::ForwardWithKwargs { hook, always_call }, prepend)
    }

    /// `register_state_dict_pre_hook(hook)`: runs before `state_dict_with` on this module, with
    /// its prefix and `keep_vars`.
    pub fn register_state_dict_pre_hook(&self, hook: StateDictPreHook) -> HookHandle {
        self.add_hook(Hook::StateDictPre(hook), false)
    }

    /// `register_state_dict_post_hook(hook)`: runs after `state_dict_with` on this module.
    pub fn register_state_dict_post_hook(&self, hook: StateDictHook) -> HookHandle {
        self.add_hook(Hook::StateDict(hook), false)
    }

    /// `register_load_state_dict_pre_hook(hook)`: runs before `load_state_dict` on this module.
    pub fn register_load_state_dict_pre_hook(&self, hook: LoadStateDictPreHook) -> HookHandle {
        self.add_hook(Hook::LoadPre(hook), false)
    }

    /// `register_load_state_dict_post_hook(hook)`: runs after `load_state_dict` on this module.
    pub fn register_load_state_dict_post_hook(&self, hook: LoadStateDictPostHook) -> HookHandle {
        self.add_hook(Hook::LoadPost(hook), false)
    }

    /// `register_full_backward_hook`: an error, there is no autograd.
    pub fn register_full_backward_hook(&self) -> Result<HookHandle> {
        Err(no_autograd("register_full_backward_hook"))
    }

    /// `register_full_backward_pre_hook`: an error, there is no autograd.
    pub fn register_full_backward_pre_hook(&self) -> Result<HookHandle> {
        Err(no_autograd("register_full_backward_pre_hook"))
    }

    /// `register_backward_hook`: an error, there is no autograd.
    pub fn register_backward_hook(&self) -> Result<HookHandle> {
        Err(no_autograd("register_backward_hook"))
    }

    /// Forward pre-hooks, the call, then forward hooks (see the module docs). Hooks without
    /// `with_kwargs` see and replace the positional arguments only, as in PyTorch.
    pub(super) fn call_with_rust_hooks(
        &self,
        inputs: Vec<IValue>,
        kwargs: Kwargs,
        call: impl FnOnce(Vec<IValue>, Kwargs) -> Result<IValue>,
    ) -> Result<IValue> {
        let hooks = self.hooks();
        if hooks.is_empty() {
            return call(inputs, kwargs);
        }
        let (mut args, mut kwargs) = (inputs, kwargs);
        for h in &hooks {
            match h {
                Hook::Pre(pre) => {
                    if let Some(new) = pre(self, &args)? {
                        args = new;
                    }
                }
                Hook::PreWithKwargs(pre) => {
                    if let Some((new_args, new_kwargs)) = pre(self, &args, &kwargs)? {
                        args = new_args;
                        kwargs = new_kwargs;
                    }
                }
                _ => {}
            }
        }
        let mut out = match call(args.clone(), kwargs.clone()) {
            Ok(out) => out,
            Err(e) => {
                // the forward error is what the caller sees; a hook's own error is not
                for h in &hooks {
                    match h {
                        Hook::Forward {
                            hook,
                            always_call: true,
                        } => {
                            let _ = hook(self, &args, &IValue::None);
                        }
                        Hook::ForwardWithKwargs {
                            hook,
                            always_call: true,
                        } => {
                            let _ = hook(self, &args, &kwargs, &IValue::None);
                        }
                        _ => {}
                    }
                }
                return Err(e);
            }
        };
        for h in &hooks {
            let new = match h {
                Hook::Forward { hook, .. } => hook(self, &args, &out)?,
                Hook::ForwardWithKwargs { hook, .. } => hook(self, &args, &kwargs, &out)?,
                _ => None,
            };
            if let Some(new) = new {
                out = new;
            }
        }
        Ok(out)
    }

    pub(super) fn run_state_dict_pre_hooks(&self, prefix: &str, keep_vars: bool) -> Result<()> {
        for h in self.hooks() {
            if let Hook::StateDictPre(f) = h {
                f(self, prefix, keep_vars)?;
            }
        }
        Ok(())
    }

    pub(super) fn run_state_dict_hooks(&self, state: &mut StateDict, prefix: &str) -> Result<()> {
        for h in self.hooks() {
            if let Hook::StateDict(f) = h {
                f(self, state, prefix)?;
            }
        }
        Ok(())
    }

    pub(super) fn has_load_pre_hooks(&self) -> bool {
        self.hooks().iter().any(|h| matches!(h, Hook::LoadPre(_)))
    }

    pub(super) fn run_load_pre_hooks(&self, state: &mut StateDict) -> Result<()> {
        for h in self.hooks() {
            if let Hook::LoadPre(f) = h {
                f(self, state)?;
            }
        }
        Ok(())
    }

    pub(super) fn run_load_post_hooks(&self, keys: &mut IncompatibleKeys) -> Result<()> {
        for h in self.hooks() {
            if let Hook::LoadPost(f) = h {
                f(self, keys)?;
            }
        }
        Ok(())
    }
}

fn no_autograd(method: &str) -> crate::Error {
    module_err(format!(
        "{method} is not supported on ScriptModules: tsrun has no autograd, so backward hooks would never run"
    ))
}
