//! Running a module's methods: the compiled program of an archive behind the interpreter, and
//! the calls a `ScriptModule` offers (`m.forward(x)`, `m.method(x)`, `m(x)` with hooks).

use super::{module_err, Kwargs, Module};
use crate::ir::passes::effects::{effects, Callee, Effects};
use crate::ir::unit::CompilationUnit;
use crate::ir::CompileError;
use crate::ops::OpContext;
use crate::runtime::interpreter::{default_context, Interpreter, Plan, PlanBuilder, Program};
use crate::runtime::RunOptions;
use crate::tensor::budget;
use crate::values::IValue;
use crate::Result;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

thread_local! {
    /// The archives (by `ModuleShared` address) whose state lock this thread holds: a call made
    /// from inside a call (a Rust hook calling the module again) must not lock again.
    static HELD_STATE_LOCKS: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// The state lock a top-level call holds for its duration.
enum StateGuard<'a> {
    Shared(#[allow(dead_code)] parking_lot::RwLockReadGuard<'a, ()>),
    Exclusive(#[allow(dead_code)] parking_lot::RwLockWriteGuard<'a, ()>),
    /// This thread already holds the lock (a nested call).
    Nested,
}

impl Drop for StateGuard<'_> {
    fn drop(&mut self) {
        if !matches!(self, StateGuard::Nested) {
            HELD_STATE_LOCKS.with(|h| {
                h.borrow_mut().pop();
            });
        }
    }
}

/// The summary of one callee, composed from the summaries of what it calls (recursive calls,
/// rejected by the compiler, and callees that do not compile are assumed to do anything), and
/// whether the summary is final: false when it counted a callee that did
/// not compile. Only final summaries are remembered, because such a callee may compile later
/// (an operator registered with `register_op` after this call) and then its real summary counts.
fn summarize_checked(
    unit: &CompilationUnit,
    memo: &mut HashMap<String, Effects>,
    visiting: &mut HashSet<String>,
    callee: Callee<'_>,
) -> (Effects, bool) {
    let key = match callee {
        Callee::Method { class, name } => format!("{class}::{name}"),
        Callee::Function(q) => q.to_string(),
    };
    if let Some(e) = memo.get(&key) {
        return (*e, true);
    }
    if !visiting.insert(key.clone()) {
        return (Effects::UNKNOWN, true);
    }
    let function = match callee {
        Callee::Method { class, name } => unit.method(class, name),
        Callee::Function(q) => unit.function(q),
    };
    let mut is_final = function.is_ok();
    let e = match function {
        Ok(f) => effects(&f.graph, &mut |c| {
            let (e, callee_final) = summarize_checked(unit, memo, visiting, c);
            is_final &= callee_final;
            Some(e)
        }),
        Err(_) => Effects::UNKNOWN,
    };
    visiting.remove(&key);
    if is_final {
        memo.insert(key, e);
    }
    (e, is_final)
}

/// The error of `function`'s failed compilation as its first call reports it. An operator the
/// compiler knows no schema for is reported as one without a kernel, with its source line, as
/// plan building reports a known operator without one: from the caller's side both are an
/// operator tsrun cannot run (often a custom operator not registered yet).
fn compile_failure(function: &str, e: CompileError) -> crate::Error {
    match e {
        CompileError::UnknownOperator { op, at, .. } => crate::Error::UnsupportedOps {
            function: function.to_string(),
            ops: vec![crate::error::MissingOp { op, at: Some(*at) }],
        },
        other => other.into(),
    }
}

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
        let function = self
            .unit
            .method(class, name)
            .map_err(|e| compile_failure(&format!("{class}.{name}"), e))?;
        build(&function.graph).map(Some)
    }

    fn callee_graphs(&self) -> Option<&dyn crate::ir::passes::CalleeGraphs> {
        Some(&*self.unit)
    }

    fn inlined_method(&self, class: &str, name: &str) -> Option<Arc<crate::ir::Graph>> {
        if !self.unit.class(class)?.has_method(name) {
            return None;
        }
        let function = self.unit.method(class, name).ok()?;
        self.unit.inlined_graph(&function).ok()
    }

    fn function(&self, qualname: &str, build: PlanBuilder<'_>) -> Result<Option<Plan>> {
        if self.unit.function_signature(qualname).is_none() {
            return Ok(None);
        }
        let function = self
            .unit
            .function(qualname)
            .map_err(|e| compile_failure(qualname, e))?;
        build(&function.graph).map(Some)
    }

    fn forward_pre_hooks(&self, class: &str) -> Vec<String> {
        // most archives have no hooks: no need to hash the class name on every call
        if self.hooks.is_empty() {
            return Vec::new();
        }
        self.hooks
            .get(class)
            .map(|h| h.0.clone())
            .unwrap_or_default()
    }

    fn forward_hooks(&self, class: &str) -> Vec<String> {
        if self.hooks.is_empty() {
            return Vec::new();
        }
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
                let files = self.program().map_err(|e| match e {
                    crate::Error::Parse(p) => super::CodeError::Parse(p),
                    other => super::CodeError::Other(other.to_string()),
                })?;
                let unit = CompilationUnit::from_files(&files, self.constants().to_vec())
                    .map_err(|e| super::CodeError::Other(e.to_string()))?
                    .with_op_version(self.shared().version);
                Ok(Arc::new(unit))
            })
            .clone()
            .map_err(crate::Error::from)
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

    /// Compile `methods` of this module and everything they can reach into their plans now
    /// rather than on the first call, pack convolution and linear weights for the GEMM, and
    /// take the gemm crate's one-time CPU probe, so the first call runs at full speed (serving
    /// and benchmarks load once and call many times). An error in a requested method is returned; one in a
    /// submodule's `forward` is left for the call that reaches it, as without `prepare`.
    pub fn prepare(&self, methods: &[&str]) -> Result<()> {
        let interpreter = self.interpreter()?;
        for name in methods {
            if interpreter
                .method_plan(self.object().class_name(), name)?
                .is_none()
            {
                return Err(module_err(format!(
                    "'{}' object has no attribute or method '{name}'",
                    super::short_name(self.class_name())
                )));
            }
        }
        self.state_effects(methods)?;
        let plans = self.compile_reachable(&interpreter, methods);
        // The first call's code: the pages of the call path and of every kernel the plans
        // call, which the first call would otherwise fault in (a few microseconds each, most
        // of a 10 us model's first call), read through the cache. Before the weights, which
        // the small-model pass below leaves in the cache last.
        let call_path = [
            Self::call_kwargs_with as *const () as usize,
            Self::bind_arguments as *const () as usize,
            Self::lock_state as *const () as usize,
        ];
        super::warm::map_code(
            plans
                .iter()
                .flat_map(|p| p.kernel_addresses())
                .chain(Interpreter::code_addresses())
                .chain(crate::ops::quantized::elementwise::wrapped_float_kernel_addresses())
                .chain(call_path),
        );
        super::prepack::prepack_weights(self, &*self.compilation_unit()?, &interpreter);
        crate::ops::linalg::warm_up_gemm_crate();
        // Start the kernel team's workers now: the first parallel kernel would otherwise spawn
        // them inside the first call (a thread creation and its stack's first faults each).
        crate::ops::kernels::parallel::for_each_index(rayon::current_num_threads(), &|_| {});
        // The state lock once (its thread-local and effects memo).
        drop(self.lock_state(methods)?);
        Ok(())
    }

    /// Compile every method and function the requested `methods` can reach: `forward` and the
    /// hooks of every class, each method name any compiled plan calls, on every class that
    /// declares it (the receiver's class is known only at run time: `lstm.forward__0`,
    /// `conv._conv_forward`, a method of a scripted class held in an attribute), and each free
    /// function called by name, so the first call compiles nothing. Unsupported code is left
    /// for the call that reaches it, as without `prepare`.
    /// Returns the plans compiled.
    fn compile_reachable(&self, interpreter: &Interpreter, methods: &[&str]) -> Vec<Arc<Plan>> {
        let classes = self.classes();
        let program = interpreter.program();
        let mut names: Vec<Arc<str>> = vec!["forward".into()];
        for class in classes.classes.keys() {
            names.extend(program.forward_pre_hooks(class).into_iter().map(Arc::from));
            names.extend(program.forward_hooks(class).into_iter().map(Arc::from));
        }
        names.extend(methods.iter().map(|&m| Arc::from(m)));
        let mut seen_names: HashSet<Arc<str>> = HashSet::new();
        let mut seen_functions: HashSet<Arc<str>> = HashSet::new();
        let mut plans: Vec<Arc<Plan>> = Vec::new();
        let mut compiled: Vec<Arc<Plan>> = Vec::new();
        loop {
            for name in names.drain(..) {
                if !seen_names.insert(name.clone()) {
                    continue;
                }
                for (class, decl) in &classes.classes {
                    if decl.methods.iter().any(|m| *m.name == *name) {
                        plans.extend(interpreter.method_plan(class, &name).ok().flatten());
                    }
                }
            }
            let Some(plan) = plans.pop() else {
                break;
            };
            compiled.push(plan.clone());
            let (called, functions) = plan.callees();
            names.extend(called);
            for f in functions {
                if seen_functions.insert(f.clone()) {
                    plans.extend(interpreter.function_plan(&f).ok());
                }
            }
        }
        compiled
    }

    /// `m.forward(*inputs)`: runs `forward` without hooks, with the process-wide generator,
    /// under the default [`RunOptions`] (a step budget bounds a runaway loop).
    pub fn forward(&self, inputs: &[IValue]) -> Result<IValue> {
        self.run_method("forward", inputs)
    }

    /// `m.<name>(*inputs)` for any method of the module's class.
    pub fn run_method(&self, name: &str, inputs: &[IValue]) -> Result<IValue> {
        self.run_method_opts(name, inputs.to_vec(), &RunOptions::default())
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
        let _state = self.lock_state(&[name])?;
        interpreter.call_method(self.object(), name, inputs, ctx)
    }

    /// Whether calling `method` now may write this module's state (an attribute set, an in-place
    /// write to a parameter, buffer or attribute container, batch norm's running statistics in
    /// training mode). Such calls run one at a time; calls that only read state run in parallel.
    /// The answer comes from an alias analysis of the compiled code, so it errs towards `true`.
    pub fn mutates_state(&self, method: &str) -> Result<bool> {
        self.calls_write_state(&[method])
    }

    fn calls_write_state(&self, methods: &[&str]) -> Result<bool> {
        Ok(self.writes_state(self.state_effects(methods)?))
    }

    /// Whether a call with effects `fx` on this module writes its state now (batch norm's
    /// running statistics only in training mode).
    fn writes_state(&self, fx: Effects) -> bool {
        let training = || !matches!(self.attr("training"), Some(IValue::Bool(false)));
        fx.writes & 1 != 0 || (fx.writes_if_training & 1 != 0 && training())
    }

    /// What a call of `methods` on this module may do to the module's state.
    fn state_effects(&self, methods: &[&str]) -> Result<Effects> {
        Ok(self.state_effects_checked(methods)?.0)
    }

    /// [`Module::state_effects`], and whether the summary is final (see `summarize_checked`).
    fn state_effects_checked(&self, methods: &[&str]) -> Result<(Effects, bool)> {
        let unit = self.compilation_unit()?;
        let class = self.object().class_name();
        let mut memo = self.shared().effects.lock();
        let mut visiting = HashSet::new();
        Ok(methods
            .iter()
            .fold((Effects::default(), true), |(acc, all_final), name| {
                let (e, is_final) = summarize_checked(
                    &unit,
                    &mut memo,
                    &mut visiting,
                    Callee::Method { class, name },
                );
                let fx = Effects {
                    writes: acc.writes | e.writes,
                    writes_if_training: acc.writes_if_training | e.writes_if_training,
                    returns: acc.returns | e.returns,
                };
                (fx, all_final && is_final)
            }))
    }

    /// What calling this module (`forward` with its class's TorchScript hooks) may do to its
    /// state: summarized once per class, then read from `call_effects` on every call.
    fn call_effects(&self) -> Result<Effects> {
        let class = self.object().class_name();
        if let Some(&fx) = self.shared().call_effects.read().get(&**class) {
            return Ok(fx);
        }
        let mut methods = vec!["forward".to_string()];
        if let Some(info) = self.classes().classes.get(class) {
            methods.extend(info.forward_pre_hooks.iter().cloned());
            methods.extend(info.forward_hooks.iter().cloned());
        }
        let methods: Vec<&str> = methods.iter().map(String::as_str).collect();
        let (fx, is_final) = self.state_effects_checked(&methods)?;
        if is_final {
            self.shared().call_effects.write().insert(class.clone(), fx);
        }
        Ok(fx)
    }

    /// Take the archive's state lock for a top-level call of `methods`: exclusively when the call
    /// may write module state (an attribute set, an in-place write to a parameter or buffer,
    /// batch norm's running statistics in training mode), shared otherwise. So concurrent calls
    /// that mutate the module lose no update and never observe a half-done one, while read-only
    /// calls run in parallel.
    fn lock_state(&self, methods: &[&str]) -> Result<StateGuard<'_>> {
        self.lock_state_for(|| self.state_effects(methods))
    }

    /// [`Module::lock_state`] for a call whose effects `effects` gives (asked only when this
    /// thread does not hold the lock already).
    fn lock_state_for(&self, effects: impl FnOnce() -> Result<Effects>) -> Result<StateGuard<'_>> {
        let shared = self.shared();
        let id = shared as *const _ as usize;
        if HELD_STATE_LOCKS.with(|h| h.borrow().contains(&id)) {
            return Ok(StateGuard::Nested);
        }
        let guard = if self.writes_state(effects()?) {
            StateGuard::Exclusive(shared.state_lock.write())
        } else {
            StateGuard::Shared(shared.state_lock.read())
        };
        HELD_STATE_LOCKS.with(|h| h.borrow_mut().push(id));
        Ok(guard)
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

    /// The arguments of method `name` bound as Python binds them: `inputs` by position, then
    /// `kwargs` by parameter name, then the declared defaults. A missing, unknown or doubly
    /// given argument is an error naming the parameter.
    pub fn bind_arguments(
        &self,
        name: &str,
        mut inputs: Vec<IValue>,
        mut kwargs: Kwargs,
    ) -> Result<Vec<IValue>> {
        let unit = self.compilation_unit()?;
        let Some(signature) = unit
            .class(self.object().class_name())
            .and_then(|c| c.method_signature(name))
        else {
            if let Some(key) = kwargs.keys().next() {
                return Err(module_err(format!(
                    "{name}() got an unexpected keyword argument '{key}'"
                )));
            }
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
        if let Some(p) = params[..inputs.len()]
            .iter()
            .find(|p| kwargs.contains_key(p.name.as_str()))
        {
            return Err(module_err(format!(
                "{name}() got multiple values for argument '{}'",
                p.name
            )));
        }
        for p in &params[inputs.len()..] {
            match (kwargs.shift_remove(p.name.as_str()), &p.default) {
                (Some(v), _) => inputs.push(v),
                (None, Some(v)) => inputs.push(v.clone()),
                (None, None) => {
                    return Err(module_err(format!(
                        "{name}() missing value for argument '{}'",
                        p.name
                    )))
                }
            }
        }
        if let Some(key) = kwargs.keys().next() {
            return Err(module_err(format!(
                "{name}() got an unexpected keyword argument '{key}'"
            )));
        }
        Ok(inputs)
    }

    /// `inputs` completed with the declared defaults of method `name`'s trailing parameters.
    fn with_defaults(&self, name: &str, inputs: Vec<IValue>) -> Result<Vec<IValue>> {
        self.bind_arguments(name, inputs, Kwargs::new())
    }

    /// `m(*inputs)`: forward pre-hooks, `forward`, then forward hooks, as `Module.__call__`.
    pub fn call(&self, inputs: &[IValue]) -> Result<IValue> {
        self.call_opts(inputs.to_vec(), &RunOptions::default())
    }

    /// `m(*inputs, **kwargs)`: keyword arguments bind to `forward`'s parameters by name;
    /// hooks registered `with_kwargs` see them.
    pub fn call_kwargs(&self, inputs: Vec<IValue>, kwargs: Kwargs) -> Result<IValue> {
        let options = RunOptions::default();
        let ctx = options.context();
        budget::with_budget(options.memory_budget(), || {
            self.call_kwargs_with(inputs, kwargs, &ctx)
        })
    }

    /// `call` with an explicit operator context.
    /// Hooks registered from Rust run around the call (see `hooks.rs`).
    pub fn call_with(&self, inputs: Vec<IValue>, ctx: &OpContext) -> Result<IValue> {
        self.call_kwargs_with(inputs, Kwargs::new(), ctx)
    }

    /// [`Module::call_kwargs`] with an explicit operator context.
    pub fn call_kwargs_with(
        &self,
        inputs: Vec<IValue>,
        kwargs: Kwargs,
        ctx: &OpContext,
    ) -> Result<IValue> {
        let _state = self.lock_state_for(|| self.call_effects())?;
        self.call_with_rust_hooks(inputs, kwargs, |inputs, kwargs| {
            let inputs = self.bind_arguments("forward", inputs, kwargs)?;
            self.interpreter()?.call_module(self.object(), inputs, ctx)
        })
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
    build_pool(n.max(1), false)
}

/// The size the global pool was built with by [`set_num_threads`] or
/// [`set_num_threads_for_this_thread`] (asking again for the same size is not an error).
static POOL_THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();

fn build_pool(n: usize, with_this_thread: bool) -> Result<()> {
    if POOL_THREADS.get() == Some(&n) {
        return Ok(());
    }
    let mut builder = rayon::ThreadPoolBuilder::new().num_threads(n);
    if with_this_thread {
        builder = builder.use_current_thread();
    }
    builder
        .build_global()
        .map_err(|e| module_err(format!("set_num_threads({n}): {e}")))?;
    let _ = POOL_THREADS.set(n);
    Ok(())
}

/// `set_num_threads(n)` for a program whose calls all come from this one thread (a CLI run, a
/// benchmark loop): this thread becomes one of the `n` workers, so a parallel kernel it starts
/// runs its share in place while the others help, instead of handing the whole kernel to the
/// pool and sleeping until it is done. That saves two thread switches per parallel kernel,
/// which dominate small convolutions (mobilenet). The other `n - 1` workers serve calls from
/// other threads; with `n = 1` there are none, so no other thread may run a model afterwards.
/// `n = None` takes the machine's available parallelism. Only the first pool setting in a
/// process takes effect; later calls report an error.
pub fn set_num_threads_for_this_thread(n: Option<usize>) -> Result<()> {
    let n = n.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    build_pool(n.max(1), true)
}
