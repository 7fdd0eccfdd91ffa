//! Fusing chains of module calls when a plan is built: `conv.forward(x)` of a `torch.nn.Conv2d`
//! followed by the `forward` of a `BatchNorm2d` and/or of an activation module (`ReLU`,
//! `ReLU6`, `Hardtanh`, `Hardswish`, `Hardsigmoid`, `SiLU`) becomes one instruction. In eval
//! mode it runs one float32 convolution whose weights have the batch norm folded in (computed
//! once, cached on the identity and write version of every tensor it reads, so a weight changed
//! through the module API or a switch to training mode is seen on the next call) and whose
//! output pass applies the activation. When the modules are not what the fused kernel computes
//! (training mode, another dtype, an unbatched input, code that is not torch's), or the fused
//! kernel fails, the instruction calls the `forward` methods one after the other, exactly as
//! the unfused plan does.
//!
//! The classes are recognised by their qualified names (mangling removed), and the constants the
//! fused kernel needs (stride, padding, dilation, groups, eps, clamp bounds) are read from the
//! callees' own plans, which must have the shape torch's code compiles to; anything else runs
//! unfused.

use super::plan::{Instr, Op, Operand, Plan, Reg};
use super::Interpreter;
use crate::ops::conv::{convolution_act, ConvParams};
use crate::ops::gemm::Activation;
use crate::tensor::{DType, Tensor};
use crate::values::{IValue, Object};
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::Arc;

/// What a stage of a chain is, from its receiver's class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StageKind {
    Conv,
    BatchNorm,
    Act,
}

/// The kind of a `torch.nn` module class by its qualified name (`___torch_mangle_N` removed).
pub(crate) fn stage_kind(class: &str) -> Option<StageKind> {
    let name = demangle(class);
    Some(match name.as_str() {
        "__torch__.torch.nn.modules.conv.Conv2d" => StageKind::Conv,
        "__torch__.torch.nn.modules.batchnorm.BatchNorm2d" => StageKind::BatchNorm,
        "__torch__.torch.nn.modules.activation.ReLU"
        | "__torch__.torch.nn.modules.activation.ReLU6"
        | "__torch__.torch.nn.modules.activation.Hardtanh"
        | "__torch__.torch.nn.modules.activation.Hardswish"
        | "__torch__.torch.nn.modules.activation.Hardsigmoid"
        | "__torch__.torch.nn.modules.activation.SiLU" => StageKind::Act,
        _ => return None,
    })
}

/// A qualified name without its `___torch_mangle_N.` components.
fn demangle(q: &str) -> String {
    q.split('.')
        .filter(|part| !part.starts_with("___torch_mangle_"))
        .collect::<Vec<_>>()
        .join(".")
}

/// A fused chain: the original `prim::CallMethod` instructions (run one by one when the fused
/// kernel does not apply) and what the fused kernel needs, resolved on first use.
pub(crate) struct ConvChain {
    pub(crate) stages: Box<[Instr]>,
    /// The receivers' classes this chain's constants were read for, and those constants
    /// (`None`: the callees are not torch's code; always run unfused).
    spec: RwLock<Option<SpecFor>>,
    /// Folded weights, one entry per conv weight seen here (a class's plan serves every
    /// instance of the class).
    folded: Mutex<Vec<Folded>>,
}

/// The receivers' classes a spec was read for, and the spec (`None`: not fusable).
type SpecFor = (Vec<Arc<str>>, Option<Arc<Spec>>);

/// Instances of one class sharing a chain keep at most this many folded weights.
const MAX_FOLDED: usize = 64;

/// The constants of the fused kernel.
#[derive(Debug)]
struct Spec {
    params: ConvParams,
    /// The batch norm's eps, when the chain has one.
    eps: Option<f64>,
    act: Activation,
}

/// Folded weight and bias, with the tensors they were computed from.
struct Folded {
    sources: Vec<Option<(Tensor, u64)>>,
    weight: Tensor,
    bias: Option<Tensor>,
}

impl Folded {
    fn matches(&self, sources: &[Option<Tensor>]) -> bool {
        self.sources.len() == sources.len()
            && self
                .sources
                .iter()
                .zip(sources)
                .all(|(have, now)| match (have, now) {
                    (None, None) => true,
                    (Some((t, version)), Some(u)) => {
                        t.storage().same(u.storage())
                            && t.storage_offset() == u.storage_offset()
                            && t.shape() == u.shape()
                            && t.strides() == u.strides()
                            && t.dtype() == u.dtype()
                            && *version == u.storage().version()
                    }
                    _ => false,
                })
    }
}

/// Merge chains in one block's instructions. `receivers[i]` is the class of instruction `i`'s
/// receiver when it is a `prim::CallMethod` of `forward` with one argument.
pub(crate) fn fuse_block(instrs: Vec<Instr>, receivers: &[Option<Arc<str>>]) -> Vec<Instr> {
    let kinds: Vec<Option<StageKind>> = receivers
        .iter()
        .map(|c| c.as_deref().and_then(stage_kind))
        .collect();
    if !kinds.contains(&Some(StageKind::Conv)) {
        return instrs;
    }
    let mut slots: Vec<Option<Instr>> = instrs.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(slots.len());
    let mut i = 0;
    while i < slots.len() {
        if kinds[i] != Some(StageKind::Conv) {
            if let Some(instr) = slots[i].take() {
                out.push(instr);
            }
            i += 1;
            continue;
        }
        // stage indices, and the getattrs between them that move ahead of the chain
        let mut stages = vec![i];
        let mut hoisted = Vec::new();
        let mut j = i + 1;
        let mut want = [StageKind::BatchNorm, StageKind::Act].as_slice();
        while j < slots.len() && !want.is_empty() {
            let Some(prev_out) = slots[*stages.last().unwrap_or(&i)]
                .as_ref()
                .and_then(|s| s.outputs.first().copied())
            else {
                break;
            };
            // registers the chain reads or writes: a getattr reading one cannot move ahead
            let chain_regs: Vec<Reg> = stages
                .iter()
                .filter_map(|&s| slots[s].as_ref())
                .flat_map(|s| {
                    let ins = s.inputs.iter().filter_map(|o| match o {
                        Operand::Read(r) | Operand::Take(r) => Some(*r),
                        Operand::Const(_) => None,
                    });
                    ins.chain(s.outputs.iter().copied()).collect::<Vec<_>>()
                })
                .collect();
            let Some(next) = slots[j].as_ref() else { break };
            if matches!(next.op, Op::GetAttr { .. })
                && next.inputs.iter().all(|o| match o {
                    Operand::Read(r) | Operand::Take(r) => !chain_regs.contains(r),
                    Operand::Const(_) => true,
                })
            {
                hoisted.push(j);
                j += 1;
                continue;
            }
            let Some(kind) = kinds[j] else { break };
            let Some(pos) = want.iter().position(|&k| k == kind) else {
                break;
            };
            // the previous stage's result must be this call's argument, used nowhere else
            if next.inputs.len() != 2
                || !matches!(next.inputs[1], Operand::Take(r) if r == prev_out)
            {
                break;
            }
            stages.push(j);
            want = &want[pos + 1..];
            j += 1;
        }
        if stages.len() < 2 {
            if let Some(instr) = slots[i].take() {
                out.push(instr);
            }
            i += 1;
            continue;
        }
        // only getattrs before the last stage move
        let last = *stages.last().unwrap_or(&i);
        for &h in hoisted.iter().filter(|&&h| h < last) {
            if let Some(instr) = slots[h].take() {
                out.push(instr);
            }
        }
        let stage_instrs: Vec<Instr> = stages.iter().filter_map(|&s| slots[s].take()).collect();
        let mut inputs: Vec<Operand> = stage_instrs
            .iter()
            .filter_map(|s| s.inputs.first().copied())
            .collect();
        if let Some(x) = stage_instrs.first().and_then(|s| s.inputs.get(1)) {
            inputs.push(*x);
        }
        let mut drops: Vec<Reg> = Vec::new();
        for s in &stage_instrs {
            for &r in s.drops.iter() {
                if !drops.contains(&r) {
                    drops.push(r);
                }
            }
        }
        let outputs = stage_instrs
            .last()
            .map(|s| s.outputs.clone())
            .unwrap_or_default();
        let source = stage_instrs.first().and_then(|s| s.source.clone());
        out.push(Instr {
            op: Op::ConvChain(Box::new(ConvChain {
                stages: stage_instrs.into(),
                spec: RwLock::new(None),
                folded: Mutex::new(Vec::new()),
            })),
            inputs: inputs.into(),
            outputs,
            drops: drops.into(),
            source,
        });
        i += 1;
    }
    out
}

impl ConvChain {
    /// Run the fused kernel on `x` with the chain's receivers, or `Ok(None)` when it does not
    /// apply to them (the caller then runs the stages one by one).
    pub(crate) fn run_fused(
        &self,
        interp: &Interpreter,
        receivers: &[IValue],
        x: &IValue,
    ) -> crate::Result<Option<IValue>> {
        let IValue::Tensor(x) = x else {
            return Ok(None);
        };
        if x.dtype() != DType::Float32 || x.dim() != 4 || receivers.len() != self.stages.len() {
            return Ok(None);
        }
        let mut objs: Vec<&Object> = Vec::with_capacity(receivers.len());
        for r in receivers {
            match r {
                IValue::Object(o) if !o.is_torchbind() => objs.push(o),
                _ => return Ok(None),
            }
        }
        let Some(spec) = self.spec_for(interp, &objs)? else {
            return Ok(None);
        };
        let conv = objs[0];
        let bn = objs
            .get(1)
            .copied()
            .filter(|o| stage_kind(o.class_name()) == Some(StageKind::BatchNorm));
        let tensor = |o: &Object, name: &str| -> Option<Option<Tensor>> {
            match o.get(name)? {
                IValue::Tensor(t) => Some(Some(t)),
                IValue::None => Some(None),
                _ => None,
            }
        };
        let (Some(Some(w)), Some(b)) = (tensor(conv, "weight"), tensor(conv, "bias")) else {
            return Ok(None);
        };
        if w.dtype() != DType::Float32 || b.as_ref().is_some_and(|b| b.dtype() != DType::Float32) {
            return Ok(None);
        }
        let mut sources = vec![Some(w), b];
        if let Some(bn) = bn {
            if bn.get("training").and_then(|t| t.as_bool()) != Some(false) {
                return Ok(None);
            }
            for name in ["running_mean", "running_var", "weight", "bias"] {
                let Some(t) = tensor(bn, name) else {
                    return Ok(None);
                };
                if t.as_ref().is_some_and(|t| t.dtype() != DType::Float32) {
                    return Ok(None);
                }
                sources.push(t);
            }
            if sources[2].is_none() || sources[3].is_none() {
                return Ok(None);
            }
        }
        let (weight, bias) = match self.folded_weights(&sources, spec.eps) {
            Ok(Some(wb)) => wb,
            Ok(None) | Err(_) => return Ok(None),
        };
        match convolution_act(
            "aten::conv2d",
            x,
            &weight,
            bias.as_ref(),
            &spec.params,
            spec.act,
        ) {
            Ok(y) => Ok(Some(IValue::Tensor(y))),
            // the stages run one by one and raise the error where the unfused code would
            Err(_) => Ok(None),
        }
    }

    /// The constants for these receivers' classes, read from their plans once.
    fn spec_for(&self, interp: &Interpreter, objs: &[&Object]) -> crate::Result<Option<Arc<Spec>>> {
        let same = |classes: &[Arc<str>]| {
            classes.len() == objs.len()
                && classes
                    .iter()
                    .zip(objs)
                    .all(|(c, o)| Arc::ptr_eq(c, o.class_name()) || **c == **o.class_name())
        };
        if let Some((classes, spec)) = &*self.spec.read() {
            if same(classes) {
                return Ok(spec.clone());
            }
        }
        let spec = read_spec(interp, objs)?.map(Arc::new);
        let classes = objs.iter().map(|o| o.class_name().clone()).collect();
        *self.spec.write() = Some((classes, spec.clone()));
        Ok(spec)
    }

    /// The folded weight and bias for `sources` (conv weight, conv bias, then the batch norm's
    /// running mean, running var, weight and bias when there is one), computed once per
    /// version of the sources.
    fn folded_weights(
        &self,
        sources: &[Option<Tensor>],
        eps: Option<f64>,
    ) -> crate::Result<Option<(Tensor, Option<Tensor>)>> {
        let mut cache = self.folded.lock();
        if let Some(f) = cache.iter().find(|f| f.matches(sources)) {
            return Ok(Some((f.weight.clone(), f.bias.clone())));
        }
        let Some((weight, bias)) = fold(sources, eps)? else {
            return Ok(None);
        };
        let entry = Folded {
            sources: sources
                .iter()
                .map(|t| t.as_ref().map(|t| (t.clone(), t.storage().version())))
                .collect(),
            weight: weight.clone(),
            bias: bias.clone(),
        };
        // an entry for the same weight tensor is out of date: replace it
        let stale = cache
            .iter()
            .position(|f| match (&f.sources[0], &sources[0]) {
                (Some((t, _)), Some(u)) => t.storage().same(u.storage()),
                _ => false,
            });
        match stale {
            Some(k) => cache[k] = entry,
            None if cache.len() >= MAX_FOLDED => cache[0] = entry,
            None => cache.push(entry),
        }
        Ok(Some((weight, bias)))
    }
}

/// `W * gamma / sqrt(var + eps)` and `(b - mean) * gamma / sqrt(var + eps) + beta` per output
/// channel (torch's `fuse_conv_bn_weights`), in float64 rounded once to float32; without a
/// batch norm, the weight and bias as they are.
#[allow(clippy::type_complexity)]
fn fold(
    sources: &[Option<Tensor>],
    eps: Option<f64>,
) -> crate::Result<Option<(Tensor, Option<Tensor>)>> {
    let Some(Some(w)) = sources.first() else {
        return Ok(None);
    };
    let b = sources.get(1).cloned().flatten();
    let Some(eps) = eps else {
        return Ok(Some((w.clone(), b)));
    };
    let cout = w.shape().first().copied().unwrap_or(0);
    let vec_of = |t: &Option<Tensor>, default: f32| -> crate::Result<Option<Vec<f32>>> {
        Ok(match t {
            Some(t) if t.dim() == 1 && t.numel() == cout => Some(t.to_vec::<f32>()?),
            Some(_) => None,
            None => Some(vec![default; cout]),
        })
    };
    let (Some(mean), Some(var), Some(gamma), Some(beta), Some(bias)) = (
        vec_of(&sources[2], 0.0)?,
        vec_of(&sources[3], 1.0)?,
        vec_of(&sources[4], 1.0)?,
        vec_of(&sources[5], 0.0)?,
        vec_of(&b, 0.0)?,
    ) else {
        return Ok(None);
    };
    let wv = w.to_vec::<f32>()?;
    let per = wv.len().checked_div(cout).unwrap_or(0);
    let scale: Vec<f64> = (0..cout)
        .map(|c| gamma[c] as f64 / (var[c] as f64 + eps).sqrt())
        .collect();
    let folded_w: Vec<f32> = wv
        .iter()
        .enumerate()
        .map(|(i, &v)| (v as f64 * scale[i / per.max(1)]) as f32)
        .collect();
    let folded_b: Vec<f32> = (0..cout)
        .map(|c| ((bias[c] as f64 - mean[c] as f64) * scale[c] + beta[c] as f64) as f32)
        .collect();
    Ok(Some((
        Tensor::from_vec(folded_w, w.shape())?,
        Some(Tensor::from_vec(folded_b, &[cout])?),
    )))
}

/// A value of a callee's plan, as far as the checks below follow it.
#[derive(Clone, Debug, PartialEq)]
enum Sym {
    /// Parameter `i` of the plan (0 is `self`).
    Param(usize),
    /// `self.<name>`.
    Attr(Arc<str>),
    Int(i64),
    Double(f64),
    /// A function constant (`prim::CallFunction`'s callee).
    Function(Arc<str>),
    /// Another constant.
    Const,
    /// A list of constant ints (`prim::ListConstruct`).
    Ints(Vec<i64>),
    /// The result of the instruction at this index.
    Result(usize),
}

/// Follow a straight-line plan: the symbolic value of every register its instructions define.
fn symbols(plan: &Plan) -> HashMap<Reg, Sym> {
    let mut regs: HashMap<Reg, Sym> = HashMap::new();
    for (i, &r) in plan.body.params.iter().enumerate() {
        regs.insert(r, Sym::Param(i));
    }
    for (k, instr) in plan.body.instrs.iter().enumerate() {
        let ins: Vec<Option<Sym>> = instr.inputs.iter().map(|&o| sym(plan, &regs, o)).collect();
        let value = match &instr.op {
            Op::GetAttr { name, .. } if ins.first() == Some(&Some(Sym::Param(0))) => {
                Sym::Attr(name.clone())
            }
            Op::ListConstruct { .. } => {
                let ints: Option<Vec<i64>> = ins
                    .iter()
                    .map(|s| match s {
                        Some(Sym::Int(i)) => Some(*i),
                        _ => None,
                    })
                    .collect();
                match ints {
                    Some(v) => Sym::Ints(v),
                    None => Sym::Result(k),
                }
            }
            _ => Sym::Result(k),
        };
        for &r in instr.outputs.iter() {
            regs.insert(r, value.clone());
        }
    }
    regs
}

fn sym(plan: &Plan, regs: &HashMap<Reg, Sym>, o: Operand) -> Option<Sym> {
    match o {
        Operand::Read(r) | Operand::Take(r) => regs.get(&r).cloned(),
        Operand::Const(c) => plan.consts.get(c as usize).map(|v| match v {
            IValue::List(l) => {
                let ints: Option<Vec<i64>> = l.items().iter().map(|v| v.as_int()).collect();
                ints.map_or(Sym::Const, Sym::Ints)
            }
            IValue::Int(i) => Sym::Int(*i),
            IValue::Double(d) => Sym::Double(*d),
            IValue::Function(q) => Sym::Function(q.clone()),
            _ => Sym::Const,
        }),
    }
}

/// The symbolic inputs of `instr`, and whether the plan returns its (single) result.
fn call_inputs(plan: &Plan, regs: &HashMap<Reg, Sym>, k: usize) -> (Vec<Option<Sym>>, bool) {
    let instr = &plan.body.instrs[k];
    let ins = instr.inputs.iter().map(|&o| sym(plan, regs, o)).collect();
    let returned = plan.body.returns.len() == 1
        && sym(plan, regs, plan.body.returns[0]) == Some(Sym::Result(k));
    (ins, returned)
}

/// The fused kernel's constants for receivers `objs` (conv, then batch norm and/or activation),
/// or `None` when a callee is not the code torch compiles for its class.
fn read_spec(interp: &Interpreter, objs: &[&Object]) -> crate::Result<Option<Spec>> {
    let mut params = None;
    let mut eps = None;
    let mut act = Activation::Identity;
    for (i, o) in objs.iter().enumerate() {
        let class = o.class_name();
        let found = match (i, stage_kind(class)) {
            (0, Some(StageKind::Conv)) => {
                params = conv_spec(interp, class)?;
                params.is_some()
            }
            (1, Some(StageKind::BatchNorm)) => {
                eps = bn_eps(interp, class)?;
                eps.is_some()
            }
            (1 | 2, Some(StageKind::Act)) => match act_spec(interp, class)? {
                Some(a) => {
                    act = a;
                    true
                }
                None => false,
            },
            _ => false,
        };
        if !found {
            return Ok(None);
        }
    }
    Ok(params.map(|params| Spec { params, eps, act }))
}

fn method(interp: &Interpreter, class: &Arc<str>, name: &str) -> crate::Result<Option<Arc<Plan>>> {
    interp.method_plan(class, name)
}

/// A plan whose instructions are all `kinds` but one call; that call's index.
fn only_call(plan: &Plan, is_call: impl Fn(&Op) -> bool) -> Option<usize> {
    let mut call = None;
    for (k, instr) in plan.body.instrs.iter().enumerate() {
        match &instr.op {
            Op::GetAttr { .. } | Op::ListConstruct { .. } => {}
            op if is_call(op) && call.is_none() => call = Some(k),
            _ => return None,
        }
    }
    call
}

/// `Conv2d.forward` is `self._conv_forward(input, self.weight, self.bias)` and `_conv_forward`
/// is `aten::conv2d(input, weight, bias, [..], [..], [..], groups)` (padding mode zeros).
fn conv_spec(interp: &Interpreter, class: &Arc<str>) -> crate::Result<Option<ConvParams>> {
    let Some(fwd) = method(interp, class, "forward")? else {
        return Ok(None);
    };
    let regs = symbols(&fwd);
    let Some(k) = only_call(
        &fwd,
        |op| matches!(op, Op::CallMethod { name, .. } if &**name == "_conv_forward"),
    ) else {
        return Ok(None);
    };
    let (ins, returned) = call_inputs(&fwd, &regs, k);
    let expect = [
        Some(Sym::Param(0)),
        Some(Sym::Param(1)),
        Some(Sym::Attr("weight".into())),
        Some(Sym::Attr("bias".into())),
    ];
    if !returned || ins != expect {
        return Ok(None);
    }
    let Some(inner) = method(interp, class, "_conv_forward")? else {
        return Ok(None);
    };
    let regs = symbols(&inner);
    let Some(k) = only_call(
        &inner,
        |op| matches!(op, Op::Kernel { name, .. } if &**name == "aten::conv2d"),
    ) else {
        return Ok(None);
    };
    let (ins, returned) = call_inputs(&inner, &regs, k);
    if !returned || ins.len() != 7 {
        return Ok(None);
    }
    if ins[..3]
        != [
            Some(Sym::Param(1)),
            Some(Sym::Param(2)),
            Some(Sym::Param(3)),
        ]
    {
        return Ok(None);
    }
    let (
        Some(Sym::Ints(stride)),
        Some(Sym::Ints(pad)),
        Some(Sym::Ints(dil)),
        Some(Sym::Int(groups)),
    ) = (&ins[3], &ins[4], &ins[5], &ins[6])
    else {
        return Ok(None);
    };
    Ok(ConvParams::conv2d(stride, pad, dil, *groups).ok())
}

/// `BatchNorm2d.forward` calls `F.batch_norm(input, self.running_mean, self.running_var,
/// self.weight, self.bias, training, momentum, eps)`: its eps.
fn bn_eps(interp: &Interpreter, class: &Arc<str>) -> crate::Result<Option<f64>> {
    let Some(fwd) = method(interp, class, "forward")? else {
        return Ok(None);
    };
    let regs = symbols(&fwd);
    for (k, instr) in fwd.body.instrs.iter().enumerate() {
        if !matches!(instr.op, Op::CallFunction { .. }) {
            continue;
        }
        let (ins, returned) = call_inputs(&fwd, &regs, k);
        let is_bn = matches!(&ins.first(), Some(Some(Sym::Function(q)))
            if demangle(q) == "__torch__.torch.nn.functional.batch_norm");
        if !is_bn || !returned || ins.len() != 9 {
            continue;
        }
        let attrs =
            ["running_mean", "running_var", "weight", "bias"].map(|a| Some(Sym::Attr(a.into())));
        if ins[1] != Some(Sym::Param(1)) || ins[2..6] != attrs {
            return Ok(None);
        }
        return Ok(match &ins[8] {
            Some(Sym::Double(eps)) => Some(*eps),
            _ => None,
        });
    }
    Ok(None)
}

/// An activation module's `forward` is one call of its functional form on the input with
/// constant arguments.
fn act_spec(interp: &Interpreter, class: &Arc<str>) -> crate::Result<Option<Activation>> {
    let Some(fwd) = method(interp, class, "forward")? else {
        return Ok(None);
    };
    let regs = symbols(&fwd);
    let Some(k) = only_call(&fwd, |op| matches!(op, Op::CallFunction { .. })) else {
        return Ok(None);
    };
    let (ins, returned) = call_inputs(&fwd, &regs, k);
    if !returned || ins.get(1) != Some(&Some(Sym::Param(1))) {
        return Ok(None);
    }
    let Some(Some(Sym::Function(q))) = ins.first() else {
        return Ok(None);
    };
    let num = |i: usize| match ins.get(i) {
        Some(Some(Sym::Double(v))) => Some(*v),
        Some(Some(Sym::Int(v))) => Some(*v as f64),
        _ => None,
    };
    let consts_only = ins[2..]
        .iter()
        .all(|s| matches!(s, Some(Sym::Int(_) | Sym::Double(_) | Sym::Const)));
    if !consts_only {
        return Ok(None);
    }
    let name = demangle(q);
    Ok(match name.strip_prefix("__torch__.torch.nn.functional.") {
        Some("relu") if ins.len() == 3 => Some(Activation::Relu),
        Some("relu6") if ins.len() == 3 => Some(Activation::Clamp(0.0, 6.0)),
        Some("hardtanh") if ins.len() == 5 => match (num(2), num(3)) {
            (Some(lo), Some(hi)) => Some(Activation::Clamp(lo as f32, hi as f32)),
            _ => None,
        },
        Some("hardswish") if ins.len() == 3 => Some(Activation::Hardswish),
        Some("hardsigmoid") if ins.len() == 3 => Some(Activation::Hardsigmoid),
        Some("silu") if ins.len() == 3 => Some(Activation::Silu),
        _ => None,
    })
}
