//! Running a module's methods: the compiled program of an archive behind the interpreter, and
//! the calls a `ScriptModule` offers (`m.forward(x)`, `m.method(x)`, `m(x)` with hooks).

use super::{module_err, Module};
use crate::ir::unit::CompilationUnit;
use crate::ops::OpContext;
use crate::runtime::interpreter::{default_context, Interpreter, Plan, PlanBuilder, Program};
use crate::runtime::{IValue, RunOptions};
use crate::tensor::budget;
use crate::Result;
use std::collections::HashMap;
use std::sync::Arc;

/// The compilation unit of an archive as the interpreter sees it. Hook lists are copied out of
/// the class table so the program does not hold the module's shared state (no `Arc` cycle).
struct UnitProgram {
    unit: Arc<CompilationUnit>,
    /// Per module class: (forward pre-hooks, forward hooks).
    hooks: HashMap<Arc<str>, (Vec<String>, Vec<String>)>,
}

impl Program for UnitProgram {
    fn method(&self, class: &str, name: &str, build: PlanBuilder<'_>) -> Result<Option<Plan>> {
        match self.unit.class(class) {
            Some(info) if info.has_method(name) => {}
            _ => return Ok(None),
        }
        let function = self.unit.method(class, name)?;
        build(&function.graph).map(Some)
    }

    fn function(&self, qualname: &str, build: PlanBuilder<'_>) -> Result<Option<Plan>> {
        if self.unit.function_signature(qualname).is_none() {
            return Ok(None);
        }
        let function = self.unit.function(qualname)?;
        build(&function.graph).map(Some)
    }

    fn forward_pre_hooks(&self, class: &str) -> Vec<String> {
        self.hooks
            .get(class)
            .map(|h| h.0.clone())
            .unwrap_or_default()
    }

    fn forward_hooks(&self, class: &str) -> Vec<String> {
        self.hooks
            .get(class)
            .map(|h| h.1.clone())
            .unwrap_or_default()
    }
}

impl Module {
    /// The archive's code compiled into IR (parsed and registered once; each method is compiled
    /// on first use). Tensor constants (`CONSTANTS.cN`) are bound.
    pub fn compilation_unit(&self) -> Result<Arc<CompilationUnit>> {
        self.shared()
            .compiled
            .get_or_init(|| {
                let files = self.program().map_err(|e| e.to_string())?;
                let mut unit = CompilationUnit::from_files(&files).map_err(|e| e.to_string())?;
                unit.set_tensor_constants(self.constants().to_vec());
                Ok(Arc::new(unit))
            })
            .clone()
            .map_err(module_err)
    }

    /// The interpreter that runs this archive's code; built once and shared by every handle
    /// and thread (plans are cached inside it).
    pub fn interpreter(&self) -> Result<Arc<Interpreter>> {
        self.shared()
            .interpreter
            .get_or_init(|| {
                let unit = self.compilation_unit().map_err(|e| e.to_string())?;
                let hooks = self
                    .classes()
                    .classes
                    .iter()
                    .filter(|(_, c)| !c.forward_hooks.is_empty() || !c.forward_pre_hooks.is_empty())
                    .map(|(name, c)| {
                        (
                            name.clone(),
                            (c.forward_pre_hooks.clone(), c.forward_hooks.clone()),
                        )
                    })
                    .collect();
                let program = UnitProgram { unit, hooks };
                Ok(Arc::new(Interpreter::new(Arc::new(program))))
            })
            .clone()
            .map_err(module_err)
    }

    /// `m.forward(*inputs)`: runs `forward` without hooks, with the process-wide generator.
    pub fn forward(&self, inputs: &[IValue]) -> Result<IValue> {
        self.run_method("forward", inputs)
    }

    /// `m.<name>(*inputs)` for any method of the module's class.
    pub fn run_method(&self, name: &str, inputs: &[IValue]) -> Result<IValue> {
        self.run_method_with(name, inputs.to_vec(), default_context())
    }

    /// `run_method` with an explicit operator context (its own random generator).
    pub fn run_method_with(
        &self,
        name: &str,
        inputs: Vec<IValue>,
        ctx: &OpContext,
    ) -> Result<IValue> {
        let interpreter = self.interpreter()?;
        if interpreter
            .method_plan(self.object().class_name(), name)?
            .is_none()
        {
            return Err(module_err(format!(
                "'{}' object has no attribute or method '{name}'",
                super::short_name(self.class_name())
            )));
        }
        let inputs = self.with_defaults(name, inputs)?;
        interpreter.call_method(self.object(), name, inputs, ctx)
    }

    /// `run_method` within `options`: deadline, step budget, recursion depth, memory limits,
    /// cancellation and an optional seed of the call's own generator. The error of a call a
    /// limit stopped names the limit (`Error::limit`, `Error::is_cancelled`).
    pub fn run_method_opts(
        &self,
        name: &str,
        inputs: Vec<IValue>,
        options: &RunOptions,
    ) -> Result<IValue> {
        let ctx = options.context();
        budget::with_budget(options.memory_budget(), || {
            self.run_method_with(name, inputs, &ctx)
        })
    }

    /// `call` within `options` (see [`Module::run_method_opts`]).
    pub fn call_opts(&self, inputs: Vec<IValue>, options: &RunOptions) -> Result<IValue> {
        let ctx = options.context();
        budget::with_budget(options.memory_budget(), || self.call_with(inputs, &ctx))
    }

    /// `inputs` completed with the declared defaults of method `name`'s trailing parameters,
    /// as Python fills them in; too few or too many inputs is an error naming the parameter.
    fn with_defaults(&self, name: &str, mut inputs: Vec<IValue>) -> Result<Vec<IValue>> {
        let unit = self.compilation_unit()?;
        let Some(signature) = unit
            .class(self.object().class_name())
            .and_then(|c| c.method_signature(name))
        else {
            return Ok(inputs);
        };
        // the first parameter is `self`
        let params = signature.params.get(1..).unwrap_or_default();
        if inputs.len() > params.len() {
            return Err(module_err(format!(
                "{name}() takes {} positional arguments but {} were given",
                params.len(),
                inputs.len()
            )));
        }
        for p in &params[inputs.len()..] {
            match &p.default {
                Some(v) => inputs.push(v.clone()),
                None => {
                    return Err(module_err(format!(
                        "{name}() missing value for argument '{}'",
                        p.name
                    )))
                }
            }
        }
        Ok(inputs)
    }

    /// `m(*inputs)`: forward pre-hooks, `forward`, then forward hooks, as `Module.__call__`.
    pub fn call(&self, inputs: &[IValue]) -> Result<IValue> {
        self.call_with(inputs.to_vec(), default_context())
    }

    /// `call` with an explicit operator context.
    pub fn call_with(&self, inputs: Vec<IValue>, ctx: &OpContext) -> Result<IValue> {
        let inputs = self.with_defaults("forward", inputs)?;
        self.interpreter()?.call_module(self.object(), inputs, ctx)
    }
}

/// `torch.manual_seed(seed)`: reseeds the process-wide generator used by calls without an
/// explicit context.
pub fn manual_seed(seed: u64) {
    default_context().generator.lock().manual_seed(seed);
}

/// `torch.set_num_threads(n)`: the size of the pool kernels run on. Only the first call in a
/// process takes effect (rayon's global pool is built once); later calls report an error.
pub fn set_num_threads(n: usize) -> Result<()> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(n.max(1))
        .build_global()
        .map_err(|e| module_err(format!("set_num_threads({n}): {e}")))
}
