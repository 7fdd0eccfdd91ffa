//! The TorchScript interpreter: runs compiled graphs over `IValue`s.
//!
//! Each function is compiled once into a [`Plan`] (see `plan.rs`) and cached; running a plan
//! needs only a register file per call, so one [`Interpreter`] serves many threads at once.

mod exec;
mod module_chain;
mod plan;
mod profile;
mod program;
mod region_cache;

pub use exec::matches_type;
pub use plan::Callee;
pub use plan::{
    build_plan, build_plan_with, is_interpreter_op, set_elementwise_fusion, set_region_caching,
    Plan,
};
pub use profile::{profile_calls, OpTime};
pub use program::{PlanBuilder, Program};

use crate::error::RuntimeError;
use crate::ops::OpContext;
use crate::values::{IValue, Object, Tuple};
use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// Deepest TorchScript call nesting before a call fails (guards the native stack).
pub const MAX_CALL_DEPTH: usize = 200;

/// Plans of methods by class qualified name, then method name (two levels, so a lookup by
/// `&str` builds no key).
type MethodPlans = HashMap<Arc<str>, HashMap<Arc<str>, Callee>>;

/// Runs the methods and functions of one program, caching their plans.
pub struct Interpreter {
    program: Arc<dyn Program>,
    methods: RwLock<MethodPlans>,
    functions: RwLock<HashMap<Arc<str>, Callee>>,
}

/// The process-wide operator context (random generator) used when a caller gives none, like
/// PyTorch's default generator.
pub fn default_context() -> &'static OpContext {
    static CTX: OnceLock<OpContext> = OnceLock::new();
    CTX.get_or_init(OpContext::default)
}

impl Interpreter {
    pub fn new(program: Arc<dyn Program>) -> Interpreter {
        Interpreter {
            program,
            methods: RwLock::new(HashMap::new()),
            functions: RwLock::new(HashMap::new()),
        }
    }

    pub fn program(&self) -> &Arc<dyn Program> {
        &self.program
    }

    /// How many method and function plans are compiled so far.
    pub fn compiled_plans(&self) -> usize {
        self.methods
            .read()
            .values()
            .map(HashMap::len)
            .sum::<usize>()
            + self.functions.read().len()
    }

    /// Over every plan compiled so far: how many fused module chains they hold, and how many
    /// calls of those ran fused and how many ran the module calls one by one
    /// ([`Plan::module_chains`]).
    pub fn module_chains(&self) -> (usize, u64, u64) {
        self.count_over_plans(Plan::module_chains)
    }

    /// Over every plan compiled so far: how many parameter-only regions they keep results of,
    /// how many runs took kept results and how many computed them ([`Plan::cached_regions`]).
    pub fn cached_regions(&self) -> (usize, u64, u64) {
        self.count_over_plans(Plan::cached_regions)
    }

    /// The sum of `count` over every plan compiled so far.
    fn count_over_plans(&self, count: impl Fn(&Plan) -> (usize, u64, u64)) -> (usize, u64, u64) {
        let methods = self.methods.read();
        let functions = self.functions.read();
        methods
            .values()
            .flat_map(HashMap::values)
            .chain(functions.values())
            .map(|p| count(p))
            .fold((0, 0, 0), |(n, a, b), (c, d, e)| (n + c, a + d, b + e))
    }

    /// Pack the folded weights of the fused module chains in the compiled `forward` plans of
    /// `modules` (a module tree's objects), as their first call would; the storages of the
    /// weights so packed.
    pub fn prepack_module_chains(&self, modules: &[Object]) -> std::collections::HashSet<usize> {
        let mut packed = std::collections::HashSet::new();
        for module in modules {
            let plan = self
                .methods
                .read()
                .get(&**module.class_name())
                .and_then(|plans| plans.get("forward"))
                .cloned();
            let Some(plan) = plan else {
                continue;
            };
            plan.for_each_module_chain(|chain| {
                let Some(receivers) = chain.receivers_in(module) else {
                    return;
                };
                let refs: Vec<&Object> = receivers.iter().collect();
                let Some(facts) = chain.facts_for(&*self.program, &refs) else {
                    return;
                };
                if let Some(w) = module_chain::prepack(&facts, &refs) {
                    packed.insert(w.storage().id());
                }
            });
        }
        packed
    }

    /// The plan of `class.name`, compiled on first use; `None` if the class has no such method.
    pub fn method_plan(&self, class: &Arc<str>, name: &str) -> crate::Result<Option<Callee>> {
        if let Some(p) = self.methods.read().get(&**class).and_then(|m| m.get(name)) {
            return Ok(Some(p.clone()));
        }
        let fname = format!("{class}.{name}");
        let Some(plan) = self.program.method(class, name, &mut |g| {
            build_plan_with(&fname, g, self.program.callee_graphs())
        })?
        else {
            return Ok(None);
        };
        let plan = Arc::new(plan);
        Ok(Some(
            self.methods
                .write()
                .entry(class.clone())
                .or_default()
                .entry(name.into())
                .or_insert(plan)
                .clone(),
        ))
    }

    /// The plan of free function `qualname` (methods named `class.method` are found too, as
    /// hooks are called that way).
    pub fn function_plan(&self, qualname: &Arc<str>) -> crate::Result<Callee> {
        if let Some(p) = self.functions.read().get(qualname) {
            return Ok(p.clone());
        }
        let callees = self.program.callee_graphs();
        let mut build = |g: &crate::ir::Graph| build_plan_with(qualname, g, callees);
        let mut plan = self.program.function(qualname, &mut build)?;
        if plan.is_none() {
            if let Some((class, method)) = qualname.rsplit_once('.') {
                plan = self.program.method(class, method, &mut build)?;
            }
        }
        let plan =
            Arc::new(plan.ok_or_else(|| {
                RuntimeError::Other(format!("function {qualname} is not defined"))
            })?);
        Ok(self
            .functions
            .write()
            .entry(qualname.clone())
            .or_insert(plan)
            .clone())
    }

    /// The code addresses of the interpreter's own per-call functions (`Module::prepare` maps
    /// their pages before the first call).
    pub fn code_addresses() -> [usize; 6] {
        [
            Self::call_method as *const () as usize,
            // a call's arguments become a Vec here (its first run faulted this page in)
            smallvec::SmallVec::<[IValue; 8]>::into_vec as *const () as usize,
            Self::call_module as *const () as usize,
            exec::run_plan as *const () as usize,
            std::ptr::drop_in_place::<IValue> as *const () as usize,
            std::ptr::drop_in_place::<crate::tensor::Tensor> as *const () as usize,
        ]
    }

    /// Call method `name` of `object` with `inputs` (without `self`).
    pub fn call_method(
        &self,
        object: &Object,
        name: &str,
        inputs: Vec<IValue>,
        ctx: &OpContext,
    ) -> crate::Result<IValue> {
        let plan = self
            .method_plan(object.class_name(), name)?
            .ok_or_else(|| {
                RuntimeError::Other(format!(
                    "class {} has no method {name}",
                    object.class_name()
                ))
            })?;
        let mut all = Vec::with_capacity(inputs.len() + 1);
        all.push(IValue::Object(object.clone()));
        all.extend(inputs);
        exec::run_plan(self, &plan, all, ctx, 0)
    }

    /// Call free function `qualname`.
    pub fn call_function(
        &self,
        qualname: &str,
        inputs: Vec<IValue>,
        ctx: &OpContext,
    ) -> crate::Result<IValue> {
        let plan = self.function_plan(&qualname.into())?;
        exec::run_plan(self, &plan, inputs, ctx, 0)
    }

    /// Call a module as `module(*inputs)` does in PyTorch: forward pre-hooks, `forward`, then
    /// forward hooks (each hook may replace the input tuple or the output).
    pub fn call_module(
        &self,
        module: &Object,
        inputs: Vec<IValue>,
        ctx: &OpContext,
    ) -> crate::Result<IValue> {
        let class = module.class_name();
        let pre_hooks = self.program.forward_pre_hooks(class);
        let hooks = self.program.forward_hooks(class);
        if pre_hooks.is_empty() && hooks.is_empty() {
            return self.call_method(module, "forward", inputs, ctx);
        }
        let mut args = Tuple::new(inputs);
        for h in &pre_hooks {
            let r = self.call_method(module, h, vec![IValue::Tuple(args.clone())], ctx)?;
            match r {
                IValue::None => {}
                IValue::Tuple(t) => args = t,
                single => args = Tuple::new(vec![single]),
            }
        }
        let mut out = self.call_method(module, "forward", args.items().to_vec(), ctx)?;
        for h in &hooks {
            let r = self.call_method(
                module,
                h,
                vec![IValue::Tuple(args.clone()), out.clone()],
                ctx,
            )?;
            if !r.is_none() {
                out = r;
            }
        }
        Ok(out)
    }
}
