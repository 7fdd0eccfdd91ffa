//! Convolution and linear chains fused across module calls: `conv -> batch norm -> [+
//! residual] -> activation` and `linear -> [activation]`, where each step is its own submodule
//! (`prim::CallMethod[forward]` on `self.conv1`, `self.bn1`, ...), as scripted torchvision
//! models and `nn.Sequential` stacks are built. A lone `Linear` call is a chain too: its
//! instruction replaces the module call's frame (two attribute reads and the operator), most
//! of a small layer's cost.
//!
//! At plan build, a run of such calls (consecutive but for attribute reads and constants, each
//! consuming the previous result as its only use) whose receivers are typed
//! `torch.nn.Conv2d`, `BatchNorm2d` and an activation module becomes one instruction. What
//! each module computes is read once per combination of receiver classes from the classes'
//! inlined `forward` graphs: the convolution's constant stride / padding / dilation / groups
//! and weight and bias attributes, the batch norm's statistics attributes and `eps`, the
//! activation's operator and constant bounds. Every call then checks what may change at run
//! time (the receivers' classes, the batch norm's `training` flag, that the attributes hold
//! float32 tensors of the right sizes) and reads the weights and statistics afresh, so
//! `train()` / `eval()`, `set_attr`, `load_state_dict` and in-place writes are seen without
//! any invalidation. It then runs one convolution by the weight scaled by
//! `gamma / sqrt(var + eps)` (packed and cached in place of the plain weight, see
//! `ops::conv::convolution_scaled`) with the folded bias and the activation in the kernel's
//! output pass. A call that does not qualify, or whose fused convolution fails, runs the
//! original module calls in turn, which give PyTorch's results and errors.
//!
//! Why not a frozen, inlined copy of the whole method: the guards here are a handful of
//! attribute reads per chain (negligible beside a convolution), nothing is specialized that
//! could go stale, and printing and the generic plans are untouched.

use super::plan::ModuleChainOp;
use super::Program;
use crate::ir::graph::{Attr, Def, Graph, NodeId, ValueId};
use crate::ops::conv::{convolution_scaled, ConvParams};
use crate::ops::gemm::Activation;
use crate::tensor::{DType, Tensor, ViewStamp};
use crate::values::types::Type;
use crate::values::{IValue, Object};
use parking_lot::Mutex;
use std::sync::Arc;

/// What a step of a module chain is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StepKind {
    Conv,
    /// A `torch.nn.Linear` call.
    Linear,
    BatchNorm,
    /// `aten::add(_).Tensor(prev, residual, 1)`.
    Residual,
    Activation,
}

impl StepKind {
    /// The step as a profile names it.
    pub(super) fn label(&self) -> &'static str {
        match self {
            StepKind::Conv => "conv",
            StepKind::Linear => "linear",
            StepKind::BatchNorm => "batch_norm",
            StepKind::Residual => "add",
            StepKind::Activation => "activation",
        }
    }
}

const CONV2D: &str = "__torch__.torch.nn.modules.conv.Conv2d";
const LINEAR: &str = "__torch__.torch.nn.modules.linear.Linear";
const BATCH_NORM2D: &str = "__torch__.torch.nn.modules.batchnorm.BatchNorm2d";
const ACTIVATIONS: &[&str] = &[
    "__torch__.torch.nn.modules.activation.ReLU",
    "__torch__.torch.nn.modules.activation.ReLU6",
    "__torch__.torch.nn.modules.activation.Hardtanh",
    "__torch__.torch.nn.modules.activation.Hardswish",
    "__torch__.torch.nn.modules.activation.Hardsigmoid",
    "__torch__.torch.nn.modules.activation.SiLU",
];

/// `class` without the `___torch_mangle_N` segments TorchScript adds to tell apart classes
/// of one name (`...conv.___torch_mangle_3.Conv2d` is a `...conv.Conv2d`).
fn unmangled(class: &str) -> String {
    class
        .split('.')
        .filter(|s| !s.starts_with("___torch_mangle_"))
        .collect::<Vec<_>>()
        .join(".")
}

/// The chain step a module call on a receiver of type `ty` would be.
fn call_step(ty: &Type) -> Option<StepKind> {
    let Type::Class(c) = ty else { return None };
    let base = unmangled(c);
    if base == CONV2D {
        Some(StepKind::Conv)
    } else if base == LINEAR {
        Some(StepKind::Linear)
    } else if base == BATCH_NORM2D {
        Some(StepKind::BatchNorm)
    } else if ACTIVATIONS.contains(&base.as_str()) {
        Some(StepKind::Activation)
    } else {
        None
    }
}

/// The constant `v` is, if it is one.
fn constant(g: &Graph, v: ValueId) -> Option<IValue> {
    match g.value(v).def {
        Def::Node(n, 0) => g.constant_value(n),
        _ => None,
    }
}

/// The step node `n` of `g` would be after a chain ending in `prev`, if it can follow a step
/// of kind `after`. `uses` counts the uses of each value.
pub(crate) fn next_step(
    g: &Graph,
    n: NodeId,
    prev: ValueId,
    after: StepKind,
    uses: &[u32],
) -> Option<StepKind> {
    let node = g.node(n);
    if node.outputs.len() != 1 || !node.blocks.is_empty() {
        return None;
    }
    if uses.get(prev.0 as usize) != Some(&1) {
        return None;
    }
    let kind = if node.kind == "prim::CallMethod" {
        let forward = matches!(node.attr("name"), Some(Attr::Str(s)) if s == "forward");
        if !forward || node.inputs.len() != 2 || node.inputs.get(1) != Some(&prev) {
            return None;
        }
        call_step(&g.value(*node.inputs.first()?).ty)?
    } else if (node.kind == "aten::add" || node.kind == "aten::add_")
        && node.overload.as_deref() == Some("Tensor")
    {
        let [lhs, other, alpha] = node.inputs[..] else {
            return None;
        };
        let unit_alpha = matches!(constant(g, alpha), Some(IValue::Int(1)))
            || matches!(constant(g, alpha), Some(IValue::Double(a)) if a == 1.0);
        if lhs != prev || other == prev || !unit_alpha {
            return None;
        }
        StepKind::Residual
    } else {
        return None;
    };
    use StepKind::*;
    let follows = match kind {
        Conv | Linear => false,
        BatchNorm => after == Conv,
        Residual => matches!(after, Conv | BatchNorm),
        Activation => matches!(after, Conv | Linear | BatchNorm | Residual),
    };
    follows.then_some(kind)
}

/// Whether node `n` may sit between two steps of a chain (it neither reads the chain's values
/// nor has an effect the fused instruction, run at the last step, would reorder).
pub(crate) fn may_interleave(g: &Graph, n: NodeId) -> bool {
    matches!(g.node(n).kind.as_str(), "prim::Constant" | "prim::GetAttr")
}

/// The step that node `n` starts a chain with, if it does (a `Conv2d` or `Linear` module
/// call).
pub(crate) fn starts_chain(g: &Graph, n: NodeId) -> Option<StepKind> {
    let node = g.node(n);
    if node.kind != "prim::CallMethod"
        || node.outputs.len() != 1
        || node.inputs.len() != 2
        || !matches!(node.attr("name"), Some(Attr::Str(s)) if s == "forward")
    {
        return None;
    }
    let kind = call_step(&g.value(*node.inputs.first()?).ty)?;
    matches!(kind, StepKind::Conv | StepKind::Linear).then_some(kind)
}

/// Whether a chain of `kinds` is worth an instruction: a convolution chain of two steps or
/// more (a lone convolution call stays a call), any linear chain.
pub(crate) fn worth_fusing(kinds: &[StepKind]) -> bool {
    match kinds.first() {
        Some(StepKind::Linear) => true,
        Some(StepKind::Conv) => kinds.len() >= 2,
        _ => false,
    }
}

/// An attribute of a module, read through the position it had last time (each chain reads
/// its modules' tensors on every call: no hashing of the name while the position holds).
#[derive(Debug)]
struct AttrRef {
    name: Arc<str>,
    slot: std::sync::atomic::AtomicUsize,
}

impl AttrRef {
    fn new(name: &str) -> AttrRef {
        AttrRef {
            name: name.into(),
            slot: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    fn get(&self, o: &Object) -> Option<IValue> {
        o.get_at_slot(&self.name, &self.slot)
    }
}

/// Where an optional tensor of a module comes from.
#[derive(Debug)]
enum Source {
    Attr(AttrRef),
    None,
}

/// What a `Conv2d` class computes, from its `forward`.
#[derive(Debug)]
struct ConvFacts {
    weight: AttrRef,
    bias: Source,
    params: ConvParams,
}

/// What a `BatchNorm2d` class computes in eval mode, from its `forward`.
#[derive(Debug)]
struct BatchNormFacts {
    weight: Source,
    bias: Source,
    mean: AttrRef,
    var: AttrRef,
    /// `training` (eval mode folds; training mode normalizes by the batch).
    training: AttrRef,
    eps: f64,
}

/// What a `Linear` class computes, from its `forward`.
#[derive(Debug)]
struct LinearFacts {
    weight: AttrRef,
    bias: Source,
}

/// The module a chain starts with.
#[derive(Debug)]
enum Head {
    Conv(ConvFacts),
    Linear(LinearFacts),
}

/// What a chain computes, per combination of receiver classes.
#[derive(Debug)]
pub(crate) struct ChainFacts {
    head: Head,
    batch_norm: Option<BatchNormFacts>,
    activation: Activation,
    /// The folds made for receivers of these classes, reused while the tensors they were
    /// computed from are unchanged.
    folds: FoldCache,
}

/// The name of the attribute of `self` (`g`'s first input) that `v` is read from.
fn self_attr(g: &Graph, v: ValueId) -> Option<AttrRef> {
    let Def::Node(n, 0) = g.value(v).def else {
        return None;
    };
    let node = g.node(n);
    if node.kind != "prim::GetAttr" || node.inputs.first() != g.inputs().first() {
        return None;
    }
    match node.attr("name") {
        Some(Attr::Str(s)) => Some(AttrRef::new(s)),
        _ => None,
    }
}

fn source(g: &Graph, v: ValueId) -> Option<Source> {
    if let Some(a) = self_attr(g, v) {
        return Some(Source::Attr(a));
    }
    matches!(constant(g, v), Some(IValue::None)).then_some(Source::None)
}

/// The constant list of ints `v` is (a constant or a list of constants).
fn int_list(g: &Graph, v: ValueId) -> Option<Vec<i64>> {
    let Def::Node(n, 0) = g.value(v).def else {
        return None;
    };
    let node = g.node(n);
    match node.kind.as_str() {
        "prim::Constant" => match node.attr("value") {
            Some(Attr::Ints(xs)) => Some(xs.clone()),
            _ => match g.constant_value(n)? {
                IValue::List(l) => l.items().iter().map(|x| x.as_int()).collect(),
                _ => None,
            },
        },
        "prim::ListConstruct" => node
            .inputs
            .iter()
            .map(|&x| match constant(g, x)? {
                IValue::Int(i) => Some(i),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

/// Every node of `g`, nested blocks included.
fn all_nodes(g: &Graph) -> Vec<NodeId> {
    let mut out = Vec::new();
    g.walk(g.root, &mut |n| out.push(n));
    out
}

/// A `Conv2d.forward` that is exactly `aten::conv2d(input, self.<w>, self.<b>, <constant
/// stride, padding, dilation, groups>)` (zero padding mode), read from its inlined graph.
fn conv_facts(g: &Graph) -> Option<ConvFacts> {
    let input = *g.inputs().get(1)?;
    let mut conv = None;
    for n in all_nodes(g) {
        let node = g.node(n);
        match node.kind.as_str() {
            "prim::Constant" | "prim::GetAttr" | "prim::ListConstruct" => {}
            "aten::conv2d"
                if conv.is_none() && node.overload.as_deref().unwrap_or("").is_empty() =>
            {
                conv = Some(n)
            }
            _ => return None,
        }
    }
    let node = g.node(conv?);
    let [x, w, b, stride, padding, dilation, groups] = node.inputs[..] else {
        return None;
    };
    if x != input || g.outputs() != node.outputs.as_slice() {
        return None;
    }
    let pair = |v: ValueId, min: i64| -> Option<[usize; 3]> {
        let xs = int_list(g, v)?;
        let (a, b) = match xs[..] {
            [a] => (a, a),
            [a, b] => (a, b),
            _ => return None,
        };
        (a >= min && b >= min).then_some([1, a as usize, b as usize])
    };
    let groups = match constant(g, groups)? {
        IValue::Int(k) if k > 0 => k as usize,
        _ => return None,
    };
    let mut pad = pair(padding, 0)?;
    pad[0] = 0;
    Some(ConvFacts {
        weight: self_attr(g, w)?,
        bias: source(g, b)?,
        params: ConvParams {
            stride: pair(stride, 1)?,
            pad,
            pad_extra: [0; 3],
            dilation: pair(dilation, 1)?,
            output_padding: [0; 3],
            groups,
            transposed: false,
        },
    })
}

/// A `Linear.forward` that is exactly `aten::linear(input, self.<w>, self.<b>)`, read from its
/// inlined graph.
fn linear_facts(g: &Graph) -> Option<LinearFacts> {
    let input = *g.inputs().get(1)?;
    let mut linear = None;
    for n in all_nodes(g) {
        let node = g.node(n);
        match node.kind.as_str() {
            "prim::Constant" | "prim::GetAttr" => {}
            "aten::linear"
                if linear.is_none() && node.overload.as_deref().unwrap_or("").is_empty() =>
            {
                linear = Some(n)
            }
            _ => return None,
        }
    }
    let node = g.node(linear?);
    let [x, w, b] = node.inputs[..] else {
        return None;
    };
    if x != input || g.outputs() != node.outputs.as_slice() {
        return None;
    }
    Some(LinearFacts {
        weight: self_attr(g, w)?,
        bias: source(g, b)?,
    })
}

/// A `BatchNorm2d.forward` (torch.nn's: in eval mode with running statistics it normalizes by
/// them) whose `aten::batch_norm` reads attributes of `self` and a constant `eps`.
fn batch_norm_facts(g: &Graph) -> Option<BatchNormFacts> {
    let input = *g.inputs().get(1)?;
    let mut found = None;
    for n in all_nodes(g) {
        if g.node(n).kind == "aten::batch_norm" {
            if found.is_some() {
                return None;
            }
            found = Some(n);
        }
    }
    let node = g.node(found?);
    let [x, w, b, mean, var, _training, _momentum, eps, _cudnn] = node.inputs[..] else {
        return None;
    };
    if x != input || g.outputs() != node.outputs.as_slice() {
        return None;
    }
    let eps = match constant(g, eps)? {
        IValue::Double(e) if e >= 0.0 => e,
        _ => return None,
    };
    Some(BatchNormFacts {
        weight: source(g, w)?,
        bias: source(g, b)?,
        mean: self_attr(g, mean)?,
        var: self_attr(g, var)?,
        training: AttrRef::new("training"),
        eps,
    })
}

/// The activation an activation module's `forward` applies to its input: every operator in it
/// is that one activation (in place or not, as `inplace` picks) with constant bounds.
fn activation_facts(g: &Graph) -> Option<Activation> {
    let input = *g.inputs().get(1)?;
    let mut act = None;
    for n in all_nodes(g) {
        let node = g.node(n);
        let this = match node.kind.as_str() {
            "prim::Constant" | "prim::GetAttr" | "prim::If" => continue,
            "aten::relu" | "aten::relu_" => Activation::Relu,
            "aten::relu6" | "aten::relu6_" => Activation::Clamp(0.0, 6.0),
            "aten::hardswish" | "aten::hardswish_" => Activation::Hardswish,
            "aten::hardsigmoid" | "aten::hardsigmoid_" => Activation::Hardsigmoid,
            "aten::silu" | "aten::silu_" => Activation::Silu,
            "aten::hardtanh" | "aten::hardtanh_" => {
                let bound = |i: usize| match constant(g, *node.inputs.get(i)?)? {
                    IValue::Double(f) => Some(f as f32),
                    IValue::Int(k) => Some(k as f32),
                    _ => None,
                };
                let (lo, hi) = (bound(1)?, bound(2)?);
                if lo > hi {
                    return None;
                }
                Activation::Clamp(lo, hi)
            }
            _ => return None,
        };
        if node.inputs.first() != Some(&input) || act.is_some_and(|a| a != this) {
            return None;
        }
        act = Some(this);
    }
    act
}

/// What the chain of `steps` on receivers of `classes` (one per module call, in order)
/// computes, from the classes' `forward` graphs; `None` when a module is not what the fused
/// kernel implements.
pub(crate) fn chain_facts(
    program: &dyn Program,
    steps: &[StepKind],
    classes: &[Arc<str>],
) -> Option<ChainFacts> {
    let mut classes = classes.iter();
    // constants propagated: checks on constant arguments (hardtanh's `min_val > max_val`) and
    // branches on constant flags (`inplace`) fold away
    let mut graph = || {
        let mut g = (*program.inlined_method(classes.next()?, "forward")?).clone();
        crate::ir::passes::propagate_constants(&mut g);
        Some(g)
    };
    let mut head = None;
    let mut batch_norm = None;
    let mut activation = Activation::Identity;
    for step in steps {
        match step {
            StepKind::Conv => head = Some(Head::Conv(conv_facts(&graph()?)?)),
            StepKind::Linear => head = Some(Head::Linear(linear_facts(&graph()?)?)),
            StepKind::BatchNorm => batch_norm = Some(batch_norm_facts(&graph()?)?),
            StepKind::Activation => activation = activation_facts(&graph()?)?,
            StepKind::Residual => {}
        }
    }
    Some(ChainFacts {
        head: head?,
        batch_norm,
        activation,
        folds: FoldCache::default(),
    })
}

/// Attribute `name` of `o` as a float32 tensor (`Ok(None)` when it is `None`); `Err(())` for
/// anything else.
fn tensor_attr(o: &Object, name: &Source) -> Result<Option<Tensor>, ()> {
    match name {
        Source::None => Ok(None),
        Source::Attr(a) => attr_tensor(o, a),
    }
}

/// The float32 tensor (or `None`) attribute `a` of `o` holds; `Err` for anything else.
fn attr_tensor(o: &Object, a: &AttrRef) -> Result<Option<Tensor>, ()> {
    match a.get(o) {
        Some(IValue::Tensor(t)) if t.dtype() == DType::Float32 => Ok(Some(t)),
        Some(IValue::None) => Ok(None),
        _ => Err(()),
    }
}

/// The values of a float32 vector of `n` elements.
fn vector(t: &Tensor, n: usize) -> Option<Vec<f32>> {
    (t.dim() == 1 && t.numel() == n)
        .then(|| t.to_vec::<f32>().ok())
        .flatten()
}

/// The convolution of a chain with its batch norm folded in, from the modules' current state.
struct Folded {
    weight: Tensor,
    /// Per output channel (with a batch norm).
    scale: Option<Vec<f32>>,
    bias: Option<Vec<f32>>,
}

/// The tensors a fold reads from the chain's receivers: the convolution's weight and bias,
/// and the batch norm's running mean and variance, weight and bias.
struct FoldInputs {
    weight: Tensor,
    conv_bias: Option<Tensor>,
    batch_norm: Option<[Option<Tensor>; 4]>,
}

impl FoldInputs {
    /// The inputs of a fold on receivers `objects`; `None` when the modules do not qualify now
    /// (a batch norm in training mode or without running statistics, attributes that are not
    /// float32 tensors).
    fn read(facts: &ChainFacts, objects: &[&Object]) -> Option<FoldInputs> {
        let Head::Conv(conv_facts) = &facts.head else {
            return None;
        };
        let conv = objects.first()?;
        let weight = attr_tensor(conv, &conv_facts.weight).ok()??;
        let conv_bias = tensor_attr(conv, &conv_facts.bias).ok()?;
        let batch_norm = match &facts.batch_norm {
            None => None,
            Some(bn) => {
                let o = objects.get(1)?;
                // train mode normalizes by the batch and updates the running statistics
                if !matches!(bn.training.get(o), Some(IValue::Bool(false))) {
                    return None;
                }
                // running statistics are needed (without them it normalizes by the batch)
                let mean = attr_tensor(o, &bn.mean).ok()??;
                let var = attr_tensor(o, &bn.var).ok()??;
                Some([
                    Some(mean),
                    Some(var),
                    tensor_attr(o, &bn.weight).ok()?,
                    tensor_attr(o, &bn.bias).ok()?,
                ])
            }
        };
        Some(FoldInputs {
            weight,
            conv_bias,
            batch_norm,
        })
    }

    /// Every tensor read, in a fixed order (`None` for an absent bias or affine parameter).
    fn tensors(&self) -> impl Iterator<Item = Option<&Tensor>> {
        [Some(&self.weight), self.conv_bias.as_ref()]
            .into_iter()
            .chain(self.batch_norm.iter().flatten().map(Option::as_ref))
    }
}

/// Fold the batch norm of a chain into its convolution; `None` when the tensors do not have
/// the sizes the modules need (then the module calls report it).
fn fold(facts: &ChainFacts, inputs: &FoldInputs) -> Option<Folded> {
    let weight = inputs.weight.clone();
    if weight.dim() != 4 {
        return None;
    }
    let cout = weight.shape()[0];
    let conv_bias = match &inputs.conv_bias {
        Some(b) => Some(vector(b, cout)?),
        None => None,
    };
    let (Some(bn), Some(stats)) = (&facts.batch_norm, &inputs.batch_norm) else {
        return Some(Folded {
            weight,
            scale: None,
            bias: conv_bias,
        });
    };
    let field = |t: &Option<Tensor>| -> Option<Option<Vec<f32>>> {
        match t {
            Some(t) => Some(Some(vector(t, cout)?)),
            None => Some(None),
        }
    };
    let [mean, var, gamma, beta] = stats;
    let mean = field(mean)??;
    let var = field(var)??;
    let (gamma, beta) = (field(gamma)?, field(beta)?);
    let mut scale = Vec::with_capacity(cout);
    let mut shift = Vec::with_capacity(cout);
    for o in 0..cout {
        let s =
            gamma.as_ref().map_or(1.0, |g| f64::from(g[o])) / (f64::from(var[o]) + bn.eps).sqrt();
        let b = conv_bias.as_ref().map_or(0.0, |b| f64::from(b[o]));
        let beta = beta.as_ref().map_or(0.0, |b| f64::from(b[o]));
        scale.push(s as f32);
        shift.push((beta + (b - f64::from(mean[o])) * s) as f32);
    }
    Some(Folded {
        weight,
        scale: Some(scale),
        bias: Some(shift),
    })
}

/// A fold as the fused convolution takes it.
#[derive(Clone)]
struct ReadyFold {
    /// A depthwise weight with its scales multiplied in (which that kernel would otherwise do
    /// per call); `None`: the chain's own weight.
    weight: Option<Tensor>,
    scale: Option<Arc<[f32]>>,
    bias: Option<Tensor>,
}

impl ReadyFold {
    fn new(folded: Folded) -> Option<ReadyFold> {
        let bias = match folded.bias {
            Some(b) => {
                let n = b.len();
                Some(Tensor::from_vec(b, &[n]).ok()?)
            }
            None => None,
        };
        let w = &folded.weight;
        let kvol = w.shape()[2] * w.shape()[3];
        let packed = matches!(
            crate::ops::gemm::backend(),
            crate::ops::gemm::Backend::Packed(_)
        );
        let (weight, scale) = match folded.scale {
            // one input channel per group and a spatial kernel: the packed backend's
            // depthwise kernel, which multiplies each output channel's taps by its scale as
            // done here
            Some(sc) if packed && w.shape()[1] == 1 && kvol > 1 && w.dtype() == DType::Float32 => {
                let taps = w.contiguous().ok()?.to_vec::<f32>().ok()?;
                let scaled: Vec<f32> = taps
                    .chunks_exact(kvol)
                    .zip(&sc)
                    .flat_map(|(row, &s)| row.iter().map(move |&v| v * s))
                    .collect();
                (Some(Tensor::from_vec(scaled, w.shape()).ok()?), None)
            }
            sc => (None, sc.map(Arc::from)),
        };
        Some(ReadyFold {
            weight,
            scale,
            bias,
        })
    }
}

/// A fold kept with the stamps of the tensors it was computed from.
struct CachedFold {
    stamps: Vec<Option<ViewStamp>>,
    ready: ReadyFold,
}

impl CachedFold {
    fn matches(&self, inputs: &FoldInputs) -> bool {
        let mut tensors = inputs.tensors();
        self.stamps.iter().all(|s| match (s, tensors.next()) {
            (Some(s), Some(Some(t))) => s.matches(t),
            (None, Some(None)) => true,
            _ => false,
        }) && tensors.next().is_none()
    }
}

/// Most folds kept per chain facts (one per module instance sharing the classes; beyond it
/// the oldest is dropped).
const MAX_FOLDS: usize = 64;

/// The folds of a chain: the batch norm's statistics are read, converted and folded once,
/// not per call, while `load_state_dict`, `set_attr` and in-place writes still give a fresh
/// fold (the stamps no longer match).
#[derive(Default)]
struct FoldCache(Mutex<Vec<CachedFold>>);

impl std::fmt::Debug for FoldCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FoldCache({} folds)", self.0.lock().len())
    }
}

impl FoldCache {
    /// The fold of `inputs`, made now unless made before from the same tensors.
    fn get(&self, facts: &ChainFacts, inputs: &FoldInputs) -> Option<ReadyFold> {
        if let Some(hit) = self.0.lock().iter().find(|c| c.matches(inputs)) {
            return Some(hit.ready.clone());
        }
        // stamped before the data is read: a write meanwhile leaves a newer version, so the
        // entry is not reused
        let stamps = inputs
            .tensors()
            .map(|t| t.and_then(ViewStamp::of))
            .collect();
        let ready = ReadyFold::new(fold(facts, inputs)?)?;
        let mut folds = self.0.lock();
        folds.retain(|c| !c.stamps.iter().flatten().any(ViewStamp::is_stale));
        if folds.len() >= MAX_FOLDS {
            folds.remove(0);
        }
        folds.push(CachedFold {
            stamps,
            ready: ready.clone(),
        });
        Some(ready)
    }
}

/// Fold the chain on receivers `objects` and pack its folded weight ahead of its first call (a
/// module's `prepare`): the fold is kept in the chain's cache, where the first call finds it;
/// returns the weight when it was packed so.
pub(crate) fn prepack(facts: &ChainFacts, objects: &[&Object]) -> Option<Tensor> {
    let inputs = FoldInputs::read(facts, objects)?;
    let ready = facts.folds.get(facts, &inputs)?;
    let scale = ready.scale.as_deref()?;
    let Head::Conv(conv) = &facts.head else {
        return None;
    };
    let groups = conv.params.groups;
    crate::ops::conv::prepack_weight(&inputs.weight, groups, Some(scale))
        .ok()?
        .then_some(inputs.weight)
}

/// Run the chain fused: `objects` are the receivers of the module calls in order, `x` the
/// convolution's input and `residual` the tensor added after the batch norm. `None` when the
/// call does not qualify (then the module calls run one by one, which also reports any error).
pub(crate) fn run_fused(
    facts: &ChainFacts,
    objects: &[&Object],
    x: &IValue,
    residual: Option<&IValue>,
) -> Option<Tensor> {
    let IValue::Tensor(x) = x else { return None };
    let conv = match &facts.head {
        Head::Conv(conv) => conv,
        Head::Linear(linear) => return run_linear(linear, facts.activation, objects, x),
    };
    // batch norm 2-d takes 4-d inputs only; a 3-d (unbatched) one raises in the module
    if x.dtype() != DType::Float32 || x.dim() != 4 {
        return None;
    }
    let inputs = FoldInputs::read(facts, objects)?;
    let folded = facts.folds.get(facts, &inputs)?;
    let residual = match residual {
        None => None,
        Some(IValue::Tensor(r)) if r.dtype() == DType::Float32 && r.is_contiguous() => Some(r),
        Some(_) => return None,
    };
    // the activation runs after the residual add
    let act = if residual.is_some() {
        Activation::Identity
    } else {
        facts.activation
    };
    let out = convolution_scaled(
        "aten::conv2d",
        x,
        folded.weight.as_ref().unwrap_or(&inputs.weight),
        folded.scale.as_deref(),
        folded.bias.as_ref(),
        &conv.params,
        act,
    )
    .ok()?;
    if let Some(r) = residual {
        if r.shape() != out.shape() {
            return None;
        }
        add_then_activate(&out, r, facts.activation).ok()?;
    }
    Some(out)
}

/// A linear chain on float32 operands: `aten::linear`'s kernel, then the activation over its
/// fresh output (the same operations, in the same order, as the module calls).
fn run_linear(
    facts: &LinearFacts,
    activation: Activation,
    objects: &[&Object],
    x: &Tensor,
) -> Option<Tensor> {
    let module = objects.first()?;
    let weight = attr_tensor(module, &facts.weight).ok()??;
    let bias = tensor_attr(module, &facts.bias).ok()?;
    let k = weight.shape().get(1).copied();
    if x.dtype() != DType::Float32
        || weight.dim() != 2
        || x.dim() == 0
        || x.shape().last().copied() != k
        || bias
            .as_ref()
            .is_some_and(|b| b.dim() != 1 || b.numel() != weight.shape()[0])
    {
        return None;
    }
    let out = crate::ops::linalg::linear("aten::linear", x, &weight, bias.as_ref()).ok()?;
    if activation != Activation::Identity {
        let mut guard = out.write::<f32>().ok()?;
        activation.apply_slice(guard.as_slice_mut()?);
    }
    Some(out)
}

impl ModuleChainOp {
    /// What this chain computes on receivers `objects`, read once per combination of their
    /// classes.
    pub(crate) fn facts_for(
        &self,
        program: &dyn Program,
        objects: &[&Object],
    ) -> Option<Arc<ChainFacts>> {
        let same = |classes: &[Arc<str>]| {
            classes.len() == objects.len()
                && classes
                    .iter()
                    .zip(objects)
                    .all(|(c, o)| Arc::ptr_eq(c, o.class_name()) || **c == **o.class_name())
        };
        if let Some((classes, facts)) = &*self.facts.read() {
            if same(classes) {
                return facts.clone();
            }
        }
        let classes: Box<[Arc<str>]> = objects.iter().map(|o| o.class_name().clone()).collect();
        let kinds: Vec<StepKind> = self.steps.iter().map(|s| s.kind).collect();
        let facts = chain_facts(program, &kinds, &classes).map(Arc::new);
        *self.facts.write() = Some((classes, facts.clone()));
        facts
    }

    /// The receivers of this chain's module calls inside `module` (the object whose method
    /// holds the chain), when each is read from an attribute of it.
    pub(crate) fn receivers_in(&self, module: &Object) -> Option<Vec<Object>> {
        self.steps
            .iter()
            .filter(|s| s.kind != StepKind::Residual)
            .map(|s| match module.get(s.receiver_attr.as_deref()?)? {
                IValue::Object(o) => Some(o),
                _ => None,
            })
            .collect()
    }
}

/// `out = act(out + residual)`, a block at a time while it is in cache.
fn add_then_activate(out: &Tensor, residual: &Tensor, act: Activation) -> crate::Result<()> {
    let rg = residual.read::<f32>()?;
    let mut og = out.write::<f32>()?;
    let (Some(rs), Some(os)) = (rg.as_slice(), og.as_slice_mut()) else {
        return Err(crate::error::RuntimeError::Other(
            "fused residual add: non-contiguous operands".into(),
        )
        .into());
    };
    const BLOCK: usize = 4096;
    if rs.len() < os.len() {
        return Err(crate::error::RuntimeError::Other(
            "fused residual add: residual smaller than the output".into(),
        )
        .into());
    }
    // blocks on the kernel team: at two threads a serial pass between two parallel
    // convolutions is the layer's Amdahl term
    let par = crate::tensor::split_work(os.len(), crate::tensor::PARALLEL_THRESHOLD);
    crate::ops::kernels::parallel::for_each_chunk_mut(os, BLOCK, par, &|k, o| {
        let r = &rs[k * BLOCK..][..o.len()];
        o.iter_mut().zip(r).for_each(|(a, &b)| *a += b);
        act.apply_slice(o);
    });
    Ok(())
}
