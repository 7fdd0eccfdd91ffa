//! Executing plans: a register file per call, instructions in order, nested blocks in place.

use super::module_chain::{run_fused, StepKind};
use super::plan::{Block, ChainKernel, ChainKernelArg, Instr, ModuleChainOp, Op, Operand, Plan};
use super::{Callee, Interpreter, MAX_CALL_DEPTH};
use crate::error::{RuntimeError, TracebackFrame};
use crate::frontend::source::SourceRange;
use crate::ops::call_limits::Stop;
use crate::ops::OpContext;
use crate::tensor::budget::LimitExceeded;
pub use crate::values::matches_type;
use crate::values::python_str;
use crate::values::{Dict, FutureValue, IValue, List, Object, Tuple};
use crate::Error;
use parking_lot::RwLock;
use smallvec::SmallVec;
use std::sync::atomic::Ordering;
use std::sync::Arc;

type Inputs = SmallVec<[IValue; 8]>;

struct Frame<'a> {
    interp: &'a Interpreter,
    plan: &'a Plan,
    ctx: &'a OpContext,
    depth: usize,
    regs: Vec<IValue>,
}

/// Run `plan` on `inputs` (its graph inputs, `self` first for methods).
pub(super) fn run_plan(
    interp: &Interpreter,
    plan: &Plan,
    inputs: Vec<IValue>,
    ctx: &OpContext,
    depth: usize,
) -> crate::Result<IValue> {
    let max_depth = ctx
        .limits
        .as_ref()
        .map_or(MAX_CALL_DEPTH, |l| l.max_call_depth);
    if depth >= max_depth {
        return Err(with_frame(
            Error::Limit(LimitExceeded {
                which: "max_call_depth",
                limit: max_depth as u64,
                requested: depth as u64 + 1,
                unit: "levels of call recursion",
            }),
            &plan.name,
            None,
            None,
        ));
    }
    // Nested TorchScript calls recurse on the native stack; grow it on the heap when it runs
    // low so the depth limit, not the caller's thread stack size, bounds recursion.
    stacker::maybe_grow(STACK_RED_ZONE, STACK_GROWTH, || {
        run_plan_here(interp, plan, inputs, ctx, depth)
    })
}

/// Native stack that must remain before a nested call runs without growing the stack.
const STACK_RED_ZONE: usize = 256 * 1024;
/// Size of each heap-allocated stack segment.
const STACK_GROWTH: usize = 4 * 1024 * 1024;

fn run_plan_here(
    interp: &Interpreter,
    plan: &Plan,
    inputs: Vec<IValue>,
    ctx: &OpContext,
    depth: usize,
) -> crate::Result<IValue> {
    if inputs.len() != plan.body.params.len() {
        return Err(RuntimeError::Other(format!(
            "{} expects {} arguments, got {}",
            plan.name,
            plan.body.params.len(),
            inputs.len()
        ))
        .into());
    }
    // `resize_with` writes each register's tag; `vec![None; n]` would clone (copy) a whole
    // value into each
    let mut regs = Vec::with_capacity(plan.n_regs);
    regs.resize_with(plan.n_regs, || IValue::None);
    let mut frame = Frame {
        interp,
        plan,
        ctx,
        depth,
        regs,
    };
    for (&r, v) in plan.body.params.iter().zip(inputs) {
        frame.regs[r as usize] = v;
    }
    frame.run_instrs(&plan.body)?;
    let mut outs: SmallVec<[IValue; 2]> =
        plan.body.returns.iter().map(|&o| frame.read(o)).collect();
    Ok(match (plan.n_outputs, outs.pop()) {
        (1, Some(v)) => v,
        (_, last) => {
            outs.extend(last);
            IValue::Tuple(Tuple::new(outs.into_vec()))
        }
    })
}

/// Add the frame of `func` at `src` to `e`'s TorchScript traceback.
fn with_frame(e: Error, func: &str, src: Option<&SourceRange>, op: Option<&str>) -> Error {
    let frame = TracebackFrame {
        function: func.to_string(),
        at: src.map(SourceRange::code_location),
        original: src.and_then(SourceRange::original_location),
        op: op.map(str::to_string),
    };
    match e {
        Error::Runtime(RuntimeError::Traceback { mut frames, cause }) => {
            frames.insert(0, frame);
            RuntimeError::Traceback { frames, cause }.into()
        }
        other => RuntimeError::Traceback {
            frames: vec![frame],
            cause: Box::new(other),
        }
        .into(),
    }
}

fn rt(msg: impl Into<String>) -> Error {
    RuntimeError::Other(msg.into()).into()
}

/// A failure the program's values cause (a tuple index past the end, a list unpacked into the
/// wrong number of names): PyTorch's interpreter reports it as a RuntimeError.
fn script_error(message: impl Into<String>) -> Error {
    RuntimeError::Exception {
        kind: "RuntimeError".to_string(),
        message: message.into(),
    }
    .into()
}

impl Frame<'_> {
    #[inline]
    fn read(&mut self, o: Operand) -> IValue {
        match o {
            Operand::Read(r) => self.regs[r as usize].clone(),
            Operand::Take(r) => std::mem::take(&mut self.regs[r as usize]),
            Operand::Const(c) => self.plan.consts[c as usize].clone(),
        }
    }

    /// One step of the call's budget (an instruction or a loop iteration).
    #[inline]
    fn step(&self) -> crate::Result<()> {
        match &self.ctx.limits {
            None => Ok(()),
            Some(l) => l.step().map_err(|stop| match stop {
                Stop::Limit(l) => Error::Limit(l),
                Stop::Cancelled => Error::Cancelled,
            }),
        }
    }

    fn run_instrs(&mut self, block: &Block) -> crate::Result<()> {
        for instr in block.instrs.iter() {
            self.step()?;
            let timer = super::profile::start(instr);
            let result = self.run_instr(instr);
            if let Some(timer) = timer {
                timer.finish(instr);
            }
            if let Err(e) = result {
                return Err(match instr.op {
                    // errors inside nested blocks (and fused operators) already carry this frame
                    Op::If { .. }
                    | Op::Loop { .. }
                    | Op::CachedRegion(_)
                    | Op::Wait
                    | Op::ElementwiseChain { .. }
                    | Op::ModuleChain(_) => e,
                    _ => with_frame(e, &self.plan.name, instr.source.as_ref(), instr.op_name()),
                });
            }
            for &r in instr.drops.iter() {
                self.regs[r as usize] = IValue::None;
            }
        }
        Ok(())
    }

    fn set_outputs(&mut self, instr: &Instr, value: IValue) -> crate::Result<()> {
        match instr.outputs.len() {
            0 => Ok(()),
            1 => {
                self.regs[instr.outputs[0] as usize] = value;
                Ok(())
            }
            n => match value {
                IValue::Tuple(t) if t.items().len() == n => {
                    let items = match Arc::try_unwrap(t.0) {
                        Ok(inner) => inner.items,
                        Err(shared) => shared.items.clone(),
                    };
                    for (&r, v) in instr.outputs.iter().zip(items) {
                        self.regs[r as usize] = v;
                    }
                    Ok(())
                }
                other => Err(rt(format!(
                    "expected {n} results, got {}",
                    other.kind_name()
                ))),
            },
        }
    }

    fn inputs(&mut self, instr: &Instr) -> Inputs {
        instr.inputs.iter().map(|&o| self.read(o)).collect()
    }

    fn run_instr(&mut self, instr: &Instr) -> crate::Result<()> {
        match &instr.op {
            Op::Kernel { kernel, name } => {
                let mut args = self.inputs(instr);
                let out = crate::ops::storage_dtypes::call(*kernel, name, &mut args, self.ctx)?;
                drop(args);
                self.set_outputs(instr, out)
            }
            Op::ElementwiseChain {
                chain,
                kernels,
                declined,
            } => {
                let mut args = self.inputs(instr);
                let fused = crate::ops::elementwise_chain::run(chain, &mut args).map_err(|e| {
                    let last = kernels.last();
                    let src = last.and_then(|k| k.source.as_ref());
                    with_frame(e, &self.plan.name, src, last.map(|k| &*k.name))
                })?;
                let out = match fused {
                    Some(t) => IValue::Tensor(t),
                    None => {
                        declined.fetch_add(1, Ordering::Relaxed);
                        self.run_chain_kernels(kernels, args)?
                    }
                };
                self.set_outputs(instr, out)
            }
            Op::ModuleChain(chain) => {
                let args = self.inputs(instr);
                let out = self.run_module_chain(chain, args)?;
                self.set_outputs(instr, out)
            }
            Op::NodePrim(prim) => {
                let mut args = self.inputs(instr);
                let out = prim.run(&mut args, instr.outputs.len(), self.ctx)?;
                drop(args);
                self.set_outputs(instr, out)
            }
            Op::OutVariant(o) => {
                let mut args = self.inputs(instr);
                let out = o
                    .variant
                    .run(&o.name, &mut args, self.ctx, &o.resize, &o.warned)?;
                drop(args);
                self.set_outputs(instr, out)
            }
            Op::Custom(op) => {
                let args = self.inputs(instr);
                let out = op.call(&args)?;
                drop(args);
                self.set_outputs(instr, out)
            }
            Op::Refused(refusal) => Err(Error::Compile((**refusal).clone())),
            Op::Missing { function, all } => Err(Error::UnsupportedOps {
                function: function.to_string(),
                ops: all.get().cloned().unwrap_or_default(),
            }),
            Op::If {
                then_block,
                else_block,
            } => {
                let cond = match instr.inputs.first().map(|&o| self.read(o)) {
                    Some(IValue::Bool(b)) => b,
                    Some(IValue::Int(i)) => i != 0,
                    other => {
                        return Err(with_frame(
                            rt(format!(
                                "prim::If condition must be bool, got {}",
                                other.map(|v| v.kind_name()).unwrap_or("nothing")
                            )),
                            &self.plan.name,
                            instr.source.as_ref(),
                            None,
                        ))
                    }
                };
                let block = if cond { then_block } else { else_block };
                self.run_instrs(block)?;
                for (k, &o) in block.returns.iter().enumerate() {
                    let v = self.read(o);
                    if let Some(&r) = instr.outputs.get(k) {
                        self.regs[r as usize] = v;
                    }
                }
                Ok(())
            }
            Op::CachedRegion(region) => {
                let args = self.inputs(instr);
                if let Some(kept) = region.cache.get(&args) {
                    for (&r, v) in instr.outputs.iter().zip(kept) {
                        self.regs[r as usize] = v;
                    }
                    return Ok(());
                }
                let body = &region.body;
                if args.len() != body.params.len() {
                    return Err(rt("a cached region's inputs do not match its body"));
                }
                // stamped before the body reads them: a write meanwhile leaves a newer version
                let stamps = super::region_cache::Stamps::of(&args);
                for (&r, v) in body.params.iter().zip(args) {
                    self.regs[r as usize] = v;
                }
                self.run_instrs(body)?;
                let results: Vec<IValue> = body.returns.iter().map(|&o| self.read(o)).collect();
                for &r in body.params.iter() {
                    self.regs[r as usize] = IValue::None;
                }
                if let Some(stamps) = stamps {
                    region.cache.put(stamps, &results);
                }
                for (&r, v) in instr.outputs.iter().zip(results) {
                    self.regs[r as usize] = v;
                }
                Ok(())
            }
            Op::Fork { body } => {
                let args = self.inputs(instr);
                if args.len() != body.params.len() {
                    return Err(rt("prim::fork inputs do not match its subgraph"));
                }
                for (&r, v) in body.params.iter().zip(args) {
                    self.regs[r as usize] = v;
                }
                // the forked function's error is the future's, raised by `wait` (PyTorch's
                // interpreter sets it on the future, not at the fork)
                let result = self
                    .run_instrs(body)
                    .and_then(|()| match body.returns.first() {
                        Some(&o) => Ok(self.read(o)),
                        None => Err(rt("prim::fork subgraph without a result")),
                    });
                let future = IValue::Future(Arc::new(FutureValue::completed(result)));
                self.set_outputs(instr, future)
            }
            Op::Wait => match self.inputs(instr).into_iter().next() {
                Some(IValue::Future(f)) => {
                    let v = f.wait()?;
                    self.set_outputs(instr, v)
                }
                other => Err(rt(format!(
                    "aten::wait needs a Future, got {}",
                    other.map(|v| v.kind_name()).unwrap_or("nothing")
                ))),
            },
            Op::Loop { body } => self.run_loop(instr, body).map_err(|e| match e {
                Error::Runtime(RuntimeError::Traceback { .. }) => e,
                e => with_frame(e, &self.plan.name, instr.source.as_ref(), None),
            }),
            Op::CallMethod { name, cache } => {
                let args = self.inputs(instr);
                let obj = match args.first() {
                    Some(IValue::Object(o)) => o.clone(),
                    other => {
                        return Err(rt(format!(
                            "cannot call method {name} on {}",
                            other.map(|v| v.kind_name()).unwrap_or("nothing")
                        )))
                    }
                };
                if obj.is_torchbind() {
                    let out = crate::ops::quantized::torchbind::call_method(&obj, name, &args[..])?;
                    return self.set_outputs(instr, out);
                }
                let class = obj.class_name();
                let plan = match cached(cache, class) {
                    Some(p) => p,
                    None => {
                        let p = self
                            .interp
                            .method_plan(class, name)?
                            .ok_or_else(|| rt(format!("class {class} has no method {name}")))?;
                        *cache.write() = Some((class.clone(), p.clone()));
                        p
                    }
                };
                let out = self.call(&plan, args.into_vec())?;
                self.set_outputs(instr, out)
            }
            Op::SortObjects {
                copy,
                kernel,
                name,
                cache,
            } => {
                let mut args = self.inputs(instr);
                let first_object = match args.first() {
                    Some(IValue::List(l)) => match l.to_vec().first() {
                        Some(IValue::Object(o)) if !o.is_torchbind() => {
                            Some(o.class_name().clone())
                        }
                        _ => None,
                    },
                    _ => None,
                };
                let Some(class) = first_object else {
                    let out = crate::ops::storage_dtypes::call(*kernel, name, &mut args, self.ctx)?;
                    drop(args);
                    return self.set_outputs(instr, out);
                };
                let plan = match cached(cache, &class) {
                    Some(p) => p,
                    None => {
                        let p = self.interp.method_plan(&class, "__lt__")?.ok_or_else(|| {
                            rt(format!(
                                "sorting a list of {class} needs a `__lt__` method, which the class does not define"
                            ))
                        })?;
                        *cache.write() = Some((class.clone(), p.clone()));
                        p
                    }
                };
                let reverse = match args.get(1) {
                    Some(IValue::Bool(b)) => *b,
                    _ => false,
                };
                let IValue::List(list) = &args[0] else {
                    return Err(rt("list sort without a list"));
                };
                let list = list.clone();
                drop(args);
                let mut items = list.to_vec();
                self.sort_by_lt(&plan, &mut items, reverse)?;
                if *copy {
                    let sorted = List::new(list.elem_type().clone(), items);
                    self.set_outputs(instr, IValue::List(sorted))
                } else {
                    *list.items_mut() = items;
                    self.set_outputs(instr, IValue::None)
                }
            }
            Op::CallFunction { cache } => {
                let mut args = self.inputs(instr).into_vec();
                if args.is_empty() {
                    return Err(rt("prim::CallFunction without a function"));
                }
                let qualname = match args.remove(0) {
                    IValue::Function(q) => q,
                    other => {
                        return Err(rt(format!("cannot call a {}", other.kind_name())));
                    }
                };
                let plan = match cached(cache, &qualname) {
                    Some(p) => p,
                    None => {
                        let p = self.interp.function_plan(&qualname)?;
                        *cache.write() = Some((qualname.clone(), p.clone()));
                        p
                    }
                };
                let out = self.call(&plan, args)?;
                self.set_outputs(instr, out)
            }
            Op::GetAttr { name, slot } => {
                let v = match instr.inputs.first().map(|&o| self.read(o)) {
                    Some(IValue::Object(o)) => o.get_at_slot(name, slot).ok_or_else(|| {
                        rt(format!(
                            "object of class {} has no attribute {name}",
                            o.class_name()
                        ))
                    })?,
                    other => {
                        return Err(rt(format!(
                            "cannot get attribute {name} of {}",
                            other.map(|v| v.kind_name()).unwrap_or("nothing")
                        )))
                    }
                };
                self.set_outputs(instr, v)
            }
            Op::SetAttr { name } => {
                let mut a = self.inputs(instr);
                let value = a.get_mut(1).map(std::mem::take);
                match (a.first(), value) {
                    (Some(IValue::Object(o)), Some(v)) => {
                        o.set(name, v);
                        Ok(())
                    }
                    _ => Err(rt(format!("cannot set attribute {name}"))),
                }
            }
            Op::TupleConstruct { class } => {
                let items = self.inputs(instr).into_vec();
                let t = match class {
                    Some(c) => Tuple::named(c.clone(), items),
                    None => Tuple::new(items),
                };
                self.set_outputs(instr, IValue::Tuple(t))
            }
            Op::TupleUnpack => {
                let v = self.inputs(instr).into_iter().next().unwrap_or_default();
                match v {
                    IValue::Tuple(t) if t.items().len() == instr.outputs.len() => {
                        // element by element: a one-element tuple unpacks to its element
                        for (&r, v) in instr.outputs.iter().zip(t.items()) {
                            self.regs[r as usize] = v.clone();
                        }
                        Ok(())
                    }
                    // wrong arity
                    IValue::Tuple(t) if instr.outputs.len() == 1 => Err(rt(format!(
                        "cannot unpack {} values into 1",
                        t.items().len()
                    ))),
                    other => Err(rt(format!(
                        "cannot unpack {} into {} values",
                        other.kind_name(),
                        instr.outputs.len()
                    ))),
                }
            }
            Op::TupleIndex => {
                let a = self.inputs(instr);
                let (Some(IValue::Tuple(t)), Some(i)) =
                    (a.first(), a.get(1).and_then(|v| v.as_int()))
                else {
                    return Err(rt("prim::TupleIndex expects a tuple and an int"));
                };
                let n = t.items().len() as i64;
                let idx = if i < 0 { i + n } else { i };
                let v = usize::try_from(idx)
                    .ok()
                    .and_then(|k| t.items().get(k))
                    .cloned()
                    // PyTorch's words for a run-time index past the end (`tupleIndex`)
                    .ok_or_else(|| script_error("Tuple list index out of range"))?;
                self.set_outputs(instr, v)
            }
            Op::TupleSlice { begin, end } => {
                let a = self.inputs(instr);
                let Some(IValue::Tuple(t)) = a.first() else {
                    return Err(rt("prim::TupleSlice expects a tuple"));
                };
                let n = t.items().len() as i64;
                let clamp = |x: i64| (if x < 0 { x + n } else { x }).clamp(0, n) as usize;
                let (b, e) = (clamp(*begin), clamp(end.unwrap_or(n)));
                let items = t.items().get(b..e.max(b)).unwrap_or(&[]).to_vec();
                self.set_outputs(instr, IValue::Tuple(Tuple::new(items)))
            }
            Op::ListConstruct { elem } => {
                let items = self.inputs(instr).into_vec();
                self.set_outputs(instr, IValue::List(List::new(elem.clone(), items)))
            }
            Op::ListUnpack => {
                let v = self.inputs(instr).into_iter().next().unwrap_or_default();
                let IValue::List(l) = v else {
                    return Err(rt(format!("cannot unpack {}", v.kind_name())));
                };
                let items = l.to_vec();
                if items.len() != instr.outputs.len() {
                    return Err(script_error(format!(
                        "Expected {} elements in a list but found {}",
                        instr.outputs.len(),
                        items.len()
                    )));
                }
                for (&r, v) in instr.outputs.iter().zip(items) {
                    self.regs[r as usize] = v;
                }
                Ok(())
            }
            Op::DictConstruct { key, value } => {
                let a = self.inputs(instr);
                let d = Dict::new(key.clone(), value.clone());
                for kv in a.chunks(2) {
                    if let [k, v] = kv {
                        d.insert(k.clone(), v.clone())
                            .ok_or_else(|| rt(format!("unhashable dict key {}", k.kind_name())))?;
                    }
                }
                self.set_outputs(instr, IValue::Dict(d))
            }
            Op::Raise => {
                let a = self.inputs(instr);
                let message = a.first().map(python_str).unwrap_or_default();
                let kind = a
                    .get(1)
                    .and_then(|v| v.as_str())
                    // `assert` and `torch._assert` raise without a class: PyTorch reports a
                    // RuntimeError
                    .unwrap_or("RuntimeError")
                    .to_string();
                Err(RuntimeError::Exception { kind, message }.into())
            }
            Op::Uninitialized => self.set_outputs(instr, IValue::Uninitialized),
            Op::Identity => {
                let v = self.inputs(instr).into_iter().next().unwrap_or_default();
                self.set_outputs(instr, v)
            }
            Op::IsInstance { types } => {
                let v = self.inputs(instr).into_iter().next().unwrap_or_default();
                let r = types.iter().any(|t| matches_type(&v, t));
                self.set_outputs(instr, IValue::Bool(r))
            }
            Op::CreateObject { class } => self.set_outputs(
                instr,
                IValue::Object(Object::new(class.clone(), Default::default())),
            ),
            Op::Enter | Op::Exit => {
                let v = self.inputs(instr).into_iter().next().unwrap_or_default();
                let method = if matches!(instr.op, Op::Enter) {
                    "__enter__"
                } else {
                    "__exit__"
                };
                let out = match &v {
                    IValue::Object(o) => match self.interp.method_plan(o.class_name(), method)? {
                        Some(plan) => {
                            let n = plan.body.params.len();
                            // `__exit__(self, type, value, tb)` gets Nones on a normal exit
                            let mut args = vec![v.clone()];
                            args.resize(n.max(1), IValue::None);
                            self.call(&plan, args)?
                        }
                        None => IValue::None,
                    },
                    _ => IValue::None,
                };
                self.set_outputs(instr, out)
            }
            Op::Print => {
                let a = self.inputs(instr);
                let text: Vec<String> = a.iter().map(python_str).collect();
                println!("{}", text.join(" "));
                Ok(())
            }
            Op::Warn { warned } => {
                let a = self.inputs(instr);
                if !warned.swap(true, Ordering::Relaxed) {
                    let msg = a.first().map(python_str).unwrap_or_default();
                    crate::error::warn(msg);
                }
                Ok(())
            }
        }
    }

    /// The operators of a fused chain one by one, as the unfused plan runs them; an error
    /// names the operator and the code that failed.
    fn run_chain_kernels(
        &mut self,
        kernels: &[ChainKernel],
        mut inputs: Inputs,
    ) -> crate::Result<IValue> {
        let mut prev = IValue::None;
        for k in kernels {
            let mut args: Inputs = SmallVec::with_capacity(k.args.len());
            for a in k.args.iter() {
                args.push(match *a {
                    ChainKernelArg::Prev => std::mem::take(&mut prev),
                    ChainKernelArg::Input { index, last } => {
                        let slot = inputs
                            .get_mut(index as usize)
                            .ok_or_else(|| rt(format!("{}: missing fused operand", k.name)))?;
                        if last {
                            std::mem::take(slot)
                        } else {
                            slot.clone()
                        }
                    }
                });
            }
            prev = crate::ops::storage_dtypes::call(k.kernel, &k.name, &mut args, self.ctx)
                .map_err(|e| with_frame(e, &self.plan.name, k.source.as_ref(), Some(&k.name)))?;
        }
        Ok(prev)
    }

    /// A fused module chain: the folded convolution when the receivers qualify, else the
    /// module calls (and the residual add) one by one, each failure with its call's frame.
    fn run_module_chain(&mut self, chain: &ModuleChainOp, args: Inputs) -> crate::Result<IValue> {
        let arg = |i: u32| args.get(i as usize);
        let mut objects: SmallVec<[&Object; 4]> = SmallVec::new();
        let mut residual = None;
        for step in chain.steps.iter() {
            match (step.kind, arg(step.operand)) {
                (StepKind::Residual, r) => residual = r,
                (_, Some(IValue::Object(o))) => objects.push(o),
                _ => {}
            }
        }
        let calls = chain
            .steps
            .iter()
            .filter(|s| s.kind != StepKind::Residual)
            .count();
        if objects.len() == calls {
            if let Some(facts) = chain.facts_for(&**self.interp.program(), &objects) {
                if let Some(x) = arg(chain.input) {
                    if let Some(out) = run_fused(&facts, &objects, x, residual) {
                        chain.fused_calls.fetch_add(1, Ordering::Relaxed);
                        return Ok(IValue::Tensor(out));
                    }
                }
            }
        }
        chain.declined_calls.fetch_add(1, Ordering::Relaxed);
        let mut value = arg(chain.input).cloned().unwrap_or(IValue::None);
        for step in chain.steps.iter() {
            let operand = arg(step.operand).cloned().unwrap_or(IValue::None);
            let result = match &step.add {
                Some((kernel, name, alpha)) => {
                    let mut a: Inputs = smallvec::smallvec![value, operand, alpha.clone()];
                    crate::ops::storage_dtypes::call(*kernel, name, &mut a, self.ctx).map_err(|e| {
                        with_frame(e, &self.plan.name, step.source.as_ref(), Some(name))
                    })
                }
                None => self
                    .call_forward(&step.call, operand, value)
                    .map_err(|e| with_frame(e, &self.plan.name, step.source.as_ref(), None)),
            };
            value = result?;
        }
        Ok(value)
    }

    /// `receiver.forward(input)`, its plan cached in `cache` as `prim::CallMethod` caches it.
    fn call_forward(
        &mut self,
        cache: &RwLock<Option<(Arc<str>, Callee)>>,
        receiver: IValue,
        input: IValue,
    ) -> crate::Result<IValue> {
        let IValue::Object(obj) = &receiver else {
            return Err(rt(format!(
                "cannot call method forward on {}",
                receiver.kind_name()
            )));
        };
        let class = obj.class_name();
        let plan = match cached(cache, class) {
            Some(p) => p,
            None => {
                let p = self
                    .interp
                    .method_plan(class, "forward")?
                    .ok_or_else(|| rt(format!("class {class} has no method forward")))?;
                *cache.write() = Some((class.clone(), p.clone()));
                p
            }
        };
        self.call(&plan, vec![receiver, input])
    }

    /// Sort `items` by the `__lt__` method `lt` (reversed: by `lt(b, a)`, PyTorch's
    /// `getGreaterThanComparator`); the first error a call raises is the result.
    fn sort_by_lt(
        &mut self,
        lt: &Callee,
        items: &mut [IValue],
        reverse: bool,
    ) -> crate::Result<()> {
        let mut failure = None;
        let mut less = |this: &mut Self, a: &IValue, b: &IValue| -> bool {
            if failure.is_some() {
                return false;
            }
            let (x, y) = if reverse { (b, a) } else { (a, b) };
            match this.call(lt, vec![x.clone(), y.clone()]) {
                Ok(IValue::Bool(v)) => v,
                Ok(other) => {
                    failure = Some(rt(format!(
                        "__lt__ returned {} where sorting needs a bool",
                        other.kind_name()
                    )));
                    false
                }
                Err(e) => {
                    failure = Some(e);
                    false
                }
            }
        };
        items.sort_by(|a, b| {
            if less(self, a, b) {
                std::cmp::Ordering::Less
            } else if less(self, b, a) {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        });
        failure.map_or(Ok(()), Err)
    }

    fn call(&mut self, plan: &Callee, args: Vec<IValue>) -> crate::Result<IValue> {
        if let Some(p) = &plan.reshaped_param {
            return Err(reshaped_param_error(plan, p));
        }
        run_plan(self.interp, plan, args, self.ctx, self.depth + 1)
    }

    fn run_loop(&mut self, instr: &Instr, body: &Block) -> crate::Result<()> {
        let mut a = self.inputs(instr).into_iter();
        let max_trip = match a.next() {
            Some(IValue::Int(n)) => n,
            Some(IValue::Bool(b)) => b as i64,
            other => {
                return Err(rt(format!(
                    "prim::Loop trip count must be int, got {}",
                    other.map(|v| v.kind_name()).unwrap_or("nothing")
                )))
            }
        };
        let mut cond = loop_condition(a.next())?;
        let mut carried: Vec<IValue> = a.collect();
        if carried.len() + 1 != body.params.len() || carried.len() + 1 != body.returns.len() {
            return Err(rt("prim::Loop carried values do not match its body"));
        }
        let mut i: i64 = 0;
        while cond && i < max_trip {
            self.step()?;
            self.regs[body.params[0] as usize] = IValue::Int(i);
            for (&r, v) in body.params[1..].iter().zip(carried.drain(..)) {
                self.regs[r as usize] = v;
            }
            self.run_instrs(body)?;
            cond = loop_condition(Some(self.read(body.returns[0])))?;
            for &o in body.returns[1..].iter() {
                let v = self.read(o);
                carried.push(v);
            }
            i += 1;
        }
        for (&r, v) in instr.outputs.iter().zip(carried) {
            self.regs[r as usize] = v;
        }
        Ok(())
    }
}

/// A call from TorchScript code of a function that changes a parameter's shape in place: the
/// caller's handle would keep the old shape, where PyTorch's shows the new one.
fn reshaped_param_error(
    plan: &super::Plan,
    p: &crate::ir::passes::inplace_geometry::ReshapedParam,
) -> Error {
    let message = format!(
        "{} changes the shape of parameter `{}` of {} in place; tsrun does this only in the top-level call (the calling code's handle of the tensor would keep the old shape)",
        p.op, p.name, plan.name
    );
    match &p.at {
        Some(at) => crate::ir::CompileError::At {
            location: format!("{}:{}:{}", at.file, at.line, at.col),
            message,
            at: Box::new(at.clone()),
        }
        .into(),
        None => crate::ir::CompileError::Other(message).into(),
    }
}

fn loop_condition(v: Option<IValue>) -> crate::Result<bool> {
    match v {
        Some(IValue::Bool(b)) => Ok(b),
        Some(IValue::Int(i)) => Ok(i != 0),
        other => Err(rt(format!(
            "prim::Loop condition must be bool, got {}",
            other.map(|v| v.kind_name()).unwrap_or("nothing")
        ))),
    }
}

fn cached(cache: &RwLock<Option<(Arc<str>, Callee)>>, key: &Arc<str>) -> Option<Callee> {
    match &*cache.read() {
        Some((k, p)) if Arc::ptr_eq(k, key) || **k == **key => Some(p.clone()),
        _ => None,
    }
}
