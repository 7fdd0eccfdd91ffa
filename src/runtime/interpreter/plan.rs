//! Compiling a `Graph` into an execution plan: a flat instruction list over numbered registers,
//! kernels resolved once, constants materialized once, nested blocks as nested instruction lists,
//! and last-use information so values are moved into their last consumer or dropped as soon as
//! they are dead.

use super::module_chain::{self, ChainFacts, StepKind};
use crate::error::RuntimeError;
use crate::frontend::source::SourceRange;
use crate::ir::graph::{Attr, BlockId, Def, Graph, NodeId, ValueId};
use crate::ir::passes::inplace_geometry::{
    has_inplace_geometry, thread_inplace_geometry, ReshapedParam,
};
use crate::ir::passes::invariant_regions::{wrap_invariant_regions, CACHED_REGION};
use crate::ir::passes::CalleeGraphs;
use crate::ir::CompileError;
use crate::ops::elementwise_chain::{chain_operator, ChainArg, ChainOperator, ChainStep};
use crate::ops::out_variants::{OutVariant, Resize};
use crate::ops::{Kernel, Registry};
use crate::values::types::Type;
use crate::values::{IValue, List};
use parking_lot::RwLock;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub(crate) type Reg = u32;

/// Where an instruction reads an input from.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Operand {
    /// Clone the register (it is read again later).
    Read(Reg),
    /// Move out of the register: this is the value's last use.
    Take(Reg),
    /// A constant of the plan.
    Const(u32),
}

pub(crate) struct Block {
    pub params: Box<[Reg]>,
    pub instrs: Box<[Instr]>,
    pub returns: Box<[Operand]>,
}

pub(crate) struct Instr {
    pub op: Op,
    pub inputs: Box<[Operand]>,
    pub outputs: Box<[Reg]>,
    /// Registers dead after this instruction that it did not consume itself.
    pub drops: Box<[Reg]>,
    pub source: Option<SourceRange>,
}

impl Instr {
    /// The operator overload this instruction calls, for error reports.
    pub fn op_name(&self) -> Option<&str> {
        match &self.op {
            Op::Kernel { name, .. } => Some(name),
            Op::OutVariant(o) => Some(&o.name),
            _ => None,
        }
    }
}

pub(crate) enum Op {
    Kernel {
        kernel: Kernel,
        name: Arc<str>,
    },
    /// A `prim::` node that takes its parameters from attributes (`ops::jit_fusion_prims`).
    NodePrim(crate::ops::jit_fusion_prims::NodePrim),
    /// A run of elementwise operators fused at plan build (see `ops::elementwise_chain`): one
    /// pass over memory for float32 operands, else `kernels`, the original operators, in turn.
    ElementwiseChain {
        chain: Box<[ChainStep]>,
        kernels: Box<[ChainKernel]>,
        /// Calls the fused loop declined (inputs it does not take), for diagnostics and tests.
        declined: std::sync::atomic::AtomicU64,
    },
    /// Module calls `conv -> batch norm -> [+ residual] -> activation` fused at plan build
    /// (see `module_chain`): one folded convolution when the modules qualify at run time, else
    /// the calls in turn.
    ModuleChain(Box<ModuleChainOp>),
    /// Operators that read only a module's parameters and constants
    /// (`ir::passes::invariant_regions`): their results are kept and reused while what they
    /// read is unchanged. The inputs are bound to the body's parameters.
    CachedRegion(Box<CachedRegionOp>),
    /// An out= overload run through its functional sibling's kernel (`ops::out_variants`).
    OutVariant(Box<OutVariantOp>),
    /// An operator whose kernel was registered at run time (`tsrun::register_op`).
    Custom(crate::ops::custom::CustomOp),
    /// An in-place geometry op inside a branch or loop body that tsrun cannot make functional
    /// (see `ir::passes::inplace_geometry`): reached, it reports why.
    Refused(Box<CompileError>),
    /// An operator with no kernel inside a branch or loop body (one on the function's straight
    /// path fails `build_plan`): reached, it reports every missing operator of the function.
    Missing {
        function: Arc<str>,
        all: Arc<std::sync::OnceLock<Vec<crate::error::MissingOp>>>,
    },
    If {
        then_block: Block,
        else_block: Block,
    },
    /// Inputs: max trip count, initial condition, initial carried values.
    Loop {
        body: Block,
    },
    /// `prim::fork`: runs `body` (its parameters bound to the inputs) to a completed future.
    Fork {
        body: Block,
    },
    /// `aten::wait`: the future's value, or the forked function's error.
    Wait,
    /// `list.sort()` / `sorted(list)` (`aten::sort.any` / `aten::sorted.any`) of a list of a
    /// script class: ordered by calling the class's `__lt__`, as PyTorch's
    /// `getLessThanComparator` does; lists of other values go to `kernel`.
    SortObjects {
        /// `sorted` (a sorted copy) rather than `sort` (in place).
        copy: bool,
        kernel: Kernel,
        name: Arc<str>,
        cache: RwLock<Option<(Arc<str>, Callee)>>,
    },
    CallMethod {
        name: Arc<str>,
        cache: RwLock<Option<(Arc<str>, Callee)>>,
    },
    CallFunction {
        cache: RwLock<Option<(Arc<str>, Callee)>>,
    },
    GetAttr {
        name: Arc<str>,
        /// Where the attribute was found last time (see `Object::get_at_slot`).
        slot: std::sync::atomic::AtomicUsize,
    },
    SetAttr {
        name: Arc<str>,
    },
    TupleConstruct {
        class: Option<Arc<str>>,
    },
    TupleUnpack,
    TupleIndex,
    TupleSlice {
        begin: i64,
        end: Option<i64>,
    },
    ListConstruct {
        elem: Type,
    },
    ListUnpack,
    DictConstruct {
        key: Type,
        value: Type,
    },
    Raise,
    Uninitialized,
    /// `prim::unchecked_cast`, `prim::unchecked_unwrap_optional`, `aten::detach` ... on values
    /// that need no change at run time.
    Identity,
    IsInstance {
        types: Vec<Type>,
    },
    CreateObject {
        class: Arc<str>,
    },
    Enter,
    Exit,
    Print,
    Warn {
        warned: AtomicBool,
    },
}

/// An out= call (`torch.add(x, y, out=buf)`) and whether it may resize its out tensors.
pub(crate) struct OutVariantOp {
    pub variant: OutVariant,
    /// The out overload (`aten::add.out`).
    pub name: Arc<str>,
    pub resize: Resize,
    /// Whether this call site has printed PyTorch's resize warning.
    pub warned: AtomicBool,
}

/// A fused module chain: its steps in order, the original calls and operator run when the
/// fused kernel declines.
pub(crate) struct ModuleChainOp {
    pub steps: Box<[ModuleStep]>,
    /// The instruction input the chain starts from (the convolution's input).
    pub input: u32,
    /// What the chain computes, read for the last combination of receiver classes seen
    /// (`None` beside them: those modules are not what the fused kernel implements).
    pub facts: RwLock<Option<ChainFactsFor>>,
    pub fused_calls: std::sync::atomic::AtomicU64,
    pub declined_calls: std::sync::atomic::AtomicU64,
}

/// A parameter-only region and its kept results.
pub(crate) struct CachedRegionOp {
    pub body: Block,
    pub cache: super::region_cache::RegionCache,
    /// What the region runs, for profiles: `cached region (aten::batch_norm + ...)`.
    pub label: Arc<str>,
}

/// Receiver classes and what a chain of modules of those classes computes.
pub(crate) type ChainFactsFor = (Box<[Arc<str>]>, Option<Arc<ChainFacts>>);

/// One step of a fused module chain.
pub(crate) struct ModuleStep {
    pub kind: StepKind,
    /// The instruction input holding the receiver (module calls) or the tensor added (the
    /// residual step).
    pub operand: u32,
    /// The attribute of `self` the receiver is read from (module calls), when it is one:
    /// lets `prepare` find the modules of a chain.
    pub receiver_attr: Option<Arc<str>>,
    /// The receiver's `forward` (module calls), as `prim::CallMethod` caches it.
    pub call: RwLock<Option<(Arc<str>, Callee)>>,
    /// The residual step's operator and its `alpha`.
    pub add: Option<(Kernel, Arc<str>, IValue)>,
    pub source: Option<SourceRange>,
}

/// One original operator of a fused elementwise chain.
pub(crate) struct ChainKernel {
    pub kernel: Kernel,
    pub name: Arc<str>,
    /// Its arguments, from the fused instruction's inputs or the previous operator's result.
    pub args: Box<[ChainKernelArg]>,
    pub source: Option<SourceRange>,
}

#[derive(Clone, Copy)]
pub(crate) enum ChainKernelArg {
    /// The previous operator's result.
    Prev,
    /// Input `index` of the fused instruction, moved out at its `last` read.
    Input { index: u32, last: bool },
}

/// Whether plans fuse elementwise chains (on unless turned off, to compare the fused results
/// with the operators run one by one).
static ELEMENTWISE_FUSION: AtomicBool = AtomicBool::new(true);

/// Turn elementwise-chain fusion on or off for plans built from now on (plans already built
/// keep theirs).
pub fn set_elementwise_fusion(on: bool) {
    ELEMENTWISE_FUSION.store(on, Ordering::Relaxed);
}

/// Whether plans keep the results of parameter-only regions (on unless turned off, to compare
/// with computing them on every call).
static REGION_CACHING: AtomicBool = AtomicBool::new(true);

/// Turn the caching of parameter-only regions on or off for plans built from now on.
pub fn set_region_caching(on: bool) {
    REGION_CACHING.store(on, Ordering::Relaxed);
}

pub use crate::ops::is_interpreter_op;

/// A compiled function ready to run.
pub type Callee = Arc<Plan>;

/// A compiled function.
pub struct Plan {
    pub(crate) name: Arc<str>,
    pub(crate) n_regs: usize,
    pub(crate) consts: Vec<IValue>,
    pub(crate) body: Block,
    pub(crate) n_outputs: usize,
    /// A parameter whose shape the function changes in place (`x.unsqueeze_(0)`): its caller
    /// would see the change, which only the top-level call's caller cannot (it handed the
    /// inputs over), so calls from TorchScript code refuse it.
    pub(crate) reshaped_param: Option<ReshapedParam>,
}

impl Plan {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `f` on every instruction of the plan, nested blocks included.
    fn for_each_instr(&self, mut f: impl FnMut(&Instr)) {
        let mut blocks = vec![&self.body];
        while let Some(block) = blocks.pop() {
            for instr in block.instrs.iter() {
                match &instr.op {
                    Op::If {
                        then_block,
                        else_block,
                    } => blocks.extend([then_block, else_block]),
                    Op::Loop { body } | Op::Fork { body } => blocks.push(body),
                    Op::CachedRegion(region) => blocks.push(&region.body),
                    _ => {}
                }
                f(instr);
            }
        }
    }

    /// What this plan calls, for compiling it before the first call: the method names of its
    /// `prim::CallMethod`s (the receiver's class is known only at run time), `__enter__` and
    /// `__exit__` for its `with` blocks (`prim::Enter` / `prim::Exit`), `__lt__` for its sorts
    /// of script-class lists, and the free functions
    /// its `prim::CallFunction`s name through a constant.
    pub fn callees(&self) -> (Vec<Arc<str>>, Vec<Arc<str>>) {
        let (mut methods, mut functions) = (Vec::new(), Vec::new());
        self.for_each_instr(|instr| match &instr.op {
            Op::CallMethod { name, .. } => methods.push(name.clone()),
            Op::ModuleChain(_) => methods.push("forward".into()),
            Op::Enter => methods.push("__enter__".into()),
            Op::Exit => methods.push("__exit__".into()),
            Op::SortObjects { .. } => methods.push("__lt__".into()),
            Op::CallFunction { .. } => {
                if let Some(Operand::Const(i)) = instr.inputs.first() {
                    if let Some(IValue::Function(q)) = self.consts.get(*i as usize) {
                        functions.push(q.clone());
                    }
                }
            }
            _ => {}
        });
        (methods, functions)
    }

    /// How many fused elementwise chains this plan runs (nested blocks included), and how many
    /// of their calls so far ran the operators one by one because the fused loop declined
    /// the inputs.
    pub fn elementwise_chains(&self) -> (usize, u64) {
        let (mut n, mut declined_calls) = (0, 0);
        self.for_each_instr(|instr| {
            if let Op::ElementwiseChain { declined, .. } = &instr.op {
                n += 1;
                declined_calls += declined.load(Ordering::Relaxed);
            }
        });
        (n, declined_calls)
    }

    /// How many fused module chains this plan runs (nested blocks included), how many of their
    /// calls so far ran fused, and how many ran the module calls one by one.
    pub fn module_chains(&self) -> (usize, u64, u64) {
        let (mut n, mut fused, mut declined) = (0, 0, 0);
        self.for_each_instr(|instr| {
            if let Op::ModuleChain(c) = &instr.op {
                n += 1;
                fused += c.fused_calls.load(Ordering::Relaxed);
                declined += c.declined_calls.load(Ordering::Relaxed);
            }
        });
        (n, fused, declined)
    }

    /// How many parameter-only regions this plan keeps results of (nested blocks included),
    /// how many of their runs so far took kept results, and how many computed them.
    pub fn cached_regions(&self) -> (usize, u64, u64) {
        let (mut n, mut hits, mut misses) = (0, 0, 0);
        self.for_each_instr(|instr| {
            if let Op::CachedRegion(region) = &instr.op {
                let (h, m) = region.cache.counts();
                n += 1;
                hits += h;
                misses += m;
            }
        });
        (n, hits, misses)
    }

    /// `f` on every fused module chain of the plan.
    pub(crate) fn for_each_module_chain(&self, mut f: impl FnMut(&ModuleChainOp)) {
        self.for_each_instr(|instr| {
            if let Op::ModuleChain(c) = &instr.op {
                f(c)
            }
        });
    }

    /// The code addresses of the kernels this plan calls (nested blocks included), for
    /// mapping their code before the first call (`Module::prepare`).
    pub fn kernel_addresses(&self) -> Vec<usize> {
        let mut out = Vec::new();
        self.for_each_instr(|instr| match &instr.op {
            Op::Kernel { kernel, .. } => out.push(*kernel as usize),
            Op::OutVariant(o) => out.push(o.variant.kernel_address()),
            Op::ElementwiseChain { kernels, .. } => {
                out.push(crate::ops::elementwise_chain::run as *const () as usize);
                out.extend(kernels.iter().map(|k| k.kernel as usize));
            }
            _ => {}
        });
        out
    }
}

struct Builder<'g> {
    graph: &'g Graph,
    regs: HashMap<ValueId, Reg>,
    consts: Vec<IValue>,
    const_of: HashMap<ValueId, u32>,
    /// Block in which each value is defined.
    def_block: Vec<BlockId>,
    /// Parent block of each block (via its owner node).
    parent: HashMap<BlockId, BlockId>,
    /// Number of uses of each value anywhere (inputs and block returns).
    use_count: Vec<u32>,
    /// Operators without a kernel, with their TorchScript source lines: reported together;
    /// whether any lies on the straight path (outside every if / loop).
    missing: Vec<crate::error::MissingOp>,
    missing_unconditional: bool,
    missing_all: Arc<std::sync::OnceLock<Vec<crate::error::MissingOp>>>,
    /// Nesting depth of the block being planned (1: the function body).
    depth: usize,
    /// In-place geometry ops the rewrite refused inside branches: they fail when run.
    refused: HashMap<NodeId, CompileError>,
    /// out= calls whose out tensors the rewrite could not thread, and why: they may not
    /// resize them.
    out_unthreaded: HashMap<NodeId, Arc<str>>,
    /// out= calls whose out tensors the rewrite threaded: the only ones that may resize them.
    out_threaded: HashSet<NodeId>,
}

fn plan_error(name: &str, msg: impl std::fmt::Display) -> crate::Error {
    RuntimeError::Other(format!("cannot run {name}: {msg}")).into()
}

/// Compile `graph` (the code of `name`) into a plan.
pub fn build_plan(name: &str, graph: &Graph) -> crate::Result<Plan> {
    build_plan_with(name, graph, None)
}

/// [`build_plan`], with the graphs of the functions and methods `graph` calls: calls on
/// parameters alone are inlined so their work can be kept between calls.
pub fn build_plan_with(
    name: &str,
    graph: &Graph,
    callees: Option<&dyn CalleeGraphs>,
) -> crate::Result<Plan> {
    let mut rewritten: Option<Graph> = None;
    let mut refused = HashMap::new();
    let mut out_calls = Default::default();
    let mut reshaped_param = None;
    if has_inplace_geometry(graph) {
        let mut threaded = graph.clone();
        let geometry = thread_inplace_geometry(&mut threaded)?;
        refused = geometry.deferred.into_iter().collect();
        out_calls = (
            geometry
                .out_unthreaded
                .into_iter()
                .map(|(n, why)| (n, Arc::from(why)))
                .collect(),
            geometry.out_threaded.into_iter().collect(),
        );
        reshaped_param = geometry.reshaped.into_iter().next();
        rewritten = Some(threaded);
    }
    if REGION_CACHING.load(Ordering::Relaxed) {
        if let Some(wrapped) = wrap_invariant_regions(rewritten.as_ref().unwrap_or(graph), callees)
        {
            rewritten = Some(wrapped);
        }
    }
    let mut plan = build_threaded_plan(
        name,
        rewritten.as_ref().unwrap_or(graph),
        refused,
        out_calls,
    )?;
    plan.reshaped_param = reshaped_param;
    Ok(plan)
}

/// [`build_plan`] for a graph whose in-place geometry ops are threaded; `refused`: those left
/// to fail when they run; `out_calls`: the out= calls that may not resize their out tensors
/// (and why), and those that may.
fn build_threaded_plan(
    name: &str,
    graph: &Graph,
    refused: HashMap<NodeId, CompileError>,
    out_calls: (HashMap<NodeId, Arc<str>>, HashSet<NodeId>),
) -> crate::Result<Plan> {
    let (out_unthreaded, out_threaded) = out_calls;
    let mut b = Builder {
        refused,
        out_unthreaded,
        out_threaded,
        graph,
        regs: HashMap::new(),
        consts: Vec::new(),
        const_of: HashMap::new(),
        def_block: Vec::with_capacity(graph.values.len()),
        parent: HashMap::new(),
        use_count: vec![0; graph.values.len()],
        missing: Vec::new(),
        missing_unconditional: false,
        missing_all: Arc::new(std::sync::OnceLock::new()),
        depth: 0,
    };
    for v in &graph.values {
        b.def_block.push(match v.def {
            Def::Node(n, _) => graph
                .nodes
                .get(n.0 as usize)
                .map(|n| n.owner)
                .unwrap_or(graph.root),
            Def::Param(bl, _) => bl,
        });
    }
    for (i, bl) in graph.blocks.iter().enumerate() {
        if let Some(owner) = bl.owner {
            if let Some(n) = graph.nodes.get(owner.0 as usize) {
                b.parent.insert(BlockId(i as u32), n.owner);
            }
        }
    }
    let mut reachable_nodes = Vec::new();
    graph.walk(graph.root, &mut |n| reachable_nodes.push(n));
    for &n in &reachable_nodes {
        let node = graph.node(n);
        for &v in &node.inputs {
            b.count_use(v);
        }
        for &bl in &node.blocks {
            for &v in &graph.block(bl).returns {
                b.count_use(v);
            }
        }
    }
    for &v in graph.outputs() {
        b.count_use(v);
    }
    let body = b.block(name, graph.root)?;
    // PyTorch fails only when an operator is reached; models keep branches they never take
    // (interpolate's antialias modes, transformer fast paths). A missing operator on the straight
    // path is certain to be reached: report at compile time. Either way, all are listed at once.
    if b.missing_unconditional {
        return Err(crate::Error::UnsupportedOps {
            function: name.to_string(),
            ops: b.missing,
        });
    }
    let _ = b.missing_all.set(std::mem::take(&mut b.missing));
    Ok(Plan {
        name: name.into(),
        n_regs: b.regs.len(),
        consts: b.consts,
        n_outputs: graph.outputs().len(),
        body,
        reshaped_param: None,
    })
}

impl Builder<'_> {
    fn count_use(&mut self, v: ValueId) {
        if let Some(c) = self.use_count.get_mut(v.0 as usize) {
            *c += 1;
        }
    }

    fn reg(&mut self, v: ValueId) -> Reg {
        let n = self.regs.len() as Reg;
        *self.regs.entry(v).or_insert(n)
    }

    fn def_block_of(&self, v: ValueId) -> BlockId {
        self.def_block
            .get(v.0 as usize)
            .copied()
            .unwrap_or(self.graph.root)
    }

    /// Every value a node reads, including reads by its nested blocks.
    fn deep_uses(&self, n: NodeId, out: &mut Vec<(ValueId, BlockId)>) {
        let node = self.graph.node(n);
        for &v in &node.inputs {
            out.push((v, node.owner));
        }
        for &bl in &node.blocks {
            for &m in &self.graph.block(bl).nodes {
                self.deep_uses(m, out);
            }
            for &v in &self.graph.block(bl).returns {
                out.push((v, bl));
            }
        }
    }

    fn operand(&mut self, v: ValueId, take: bool) -> Operand {
        if let Some(&c) = self.const_of.get(&v) {
            return Operand::Const(c);
        }
        let r = self.reg(v);
        if take {
            Operand::Take(r)
        } else {
            Operand::Read(r)
        }
    }

    fn block(&mut self, fname: &str, block: BlockId) -> crate::Result<Block> {
        self.depth += 1;
        let r = self.block_body(fname, block);
        self.depth -= 1;
        r
    }

    fn block_body(&mut self, fname: &str, block: BlockId) -> crate::Result<Block> {
        let graph = self.graph;
        let data = graph.block(block);
        let nodes = &data.nodes;
        // Last position (node index; `nodes.len()` for the returns) at which each value defined in
        // this block is used, counting uses inside nested blocks at their enclosing node.
        let mut last_use: HashMap<ValueId, usize> = HashMap::new();
        let mut uses = Vec::new();
        for (p, &n) in nodes.iter().enumerate() {
            uses.clear();
            self.deep_uses(n, &mut uses);
            for &(v, _) in &uses {
                if self.def_block_of(v) == block {
                    last_use.insert(v, p);
                }
            }
        }
        for &v in &data.returns {
            if self.def_block_of(v) == block {
                last_use.insert(v, nodes.len());
            }
        }
        let params: Box<[Reg]> = data.params.iter().map(|&v| self.reg(v)).collect();
        let module_chains = self.module_chains(nodes);
        let in_module_chain: HashSet<usize> = module_chains
            .iter()
            .flat_map(|c| c.0.iter().copied())
            .collect();
        let module_chain_at: HashMap<usize, usize> = module_chains
            .iter()
            .enumerate()
            .filter_map(|(c, (ps, _))| Some((*ps.last()?, c)))
            .collect();
        let chains = if ELEMENTWISE_FUSION.load(Ordering::Relaxed) {
            let mut chains = self.elementwise_chains(nodes);
            chains.retain(|c| !c.iter().any(|p| in_module_chain.contains(p)));
            chains
        } else {
            Vec::new()
        };
        // a chain runs as one instruction at its last operator
        let chain_at: HashMap<usize, usize> = chains
            .iter()
            .enumerate()
            .filter_map(|(c, ps)| Some((*ps.last()?, c)))
            .collect();
        let fused: HashSet<usize> = chains.iter().flatten().copied().collect();
        let mut instrs = Vec::with_capacity(nodes.len());
        for (p, &n) in nodes.iter().enumerate() {
            let node = graph.node(n);
            if node.kind == "prim::Constant" {
                let Some(&out) = node.outputs.first() else {
                    continue;
                };
                let value = constant_value(graph, n).ok_or_else(|| {
                    plan_error(fname, format!("unsupported constant {:?}", node.attrs))
                })?;
                let idx = self.consts.len() as u32;
                self.consts.push(value);
                self.const_of.insert(out, idx);
                continue;
            }
            if let Some(ps) = chain_at.get(&p).and_then(|&c| chains.get(c)) {
                instrs.push(self.chain_instr(fname, block, nodes, ps, &last_use)?);
                continue;
            }
            if let Some((ps, kinds)) = module_chain_at.get(&p).and_then(|&c| module_chains.get(c)) {
                instrs.push(self.module_chain_instr(fname, block, nodes, ps, kinds, &last_use)?);
                continue;
            }
            if fused.contains(&p) || in_module_chain.contains(&p) {
                continue;
            }
            // inputs: take on the last use when used once by this node and not by its blocks
            let mut nested = Vec::new();
            for &bl in &node.blocks {
                for &m in &graph.block(bl).nodes {
                    self.deep_uses(m, &mut nested);
                }
                for &v in &graph.block(bl).returns {
                    nested.push((v, bl));
                }
            }
            let mut inputs = Vec::with_capacity(node.inputs.len());
            let mut drops = Vec::new();
            for &v in &node.inputs {
                let last_here = self.def_block_of(v) == block && last_use.get(&v) == Some(&p);
                let once = node.inputs.iter().filter(|&&w| w == v).count() == 1
                    && !nested.iter().any(|&(w, _)| w == v);
                inputs.push(self.operand(v, last_here && once));
                if last_here && !once && !self.const_of.contains_key(&v) {
                    let r = self.reg(v);
                    if !drops.contains(&r) {
                        drops.push(r);
                    }
                }
            }
            for &(v, _) in &nested {
                let last_here = self.def_block_of(v) == block && last_use.get(&v) == Some(&p);
                if last_here && !self.const_of.contains_key(&v) {
                    let r = self.reg(v);
                    if !drops.contains(&r) {
                        drops.push(r);
                    }
                }
            }
            let outputs: Box<[Reg]> = node.outputs.iter().map(|&v| self.reg(v)).collect();
            for &v in &node.outputs {
                if self.use_count.get(v.0 as usize) == Some(&0) {
                    drops.push(self.reg(v));
                }
            }
            let op = self.op(fname, n)?;
            instrs.push(Instr {
                op,
                inputs: inputs.into(),
                outputs,
                drops: drops.into(),
                source: node.source.clone(),
            });
        }
        let returns: Box<[Operand]> = data
            .returns
            .iter()
            .map(|&v| {
                let take = self.def_block_of(v) == block
                    && data.returns.iter().filter(|&&w| w == v).count() == 1;
                self.operand(v, take)
            })
            .collect();
        Ok(Block {
            params,
            instrs: instrs.into(),
            returns,
        })
    }

    /// A plan constant's value, if `v` is the output of a `prim::Constant`.
    fn graph_constant(&self, v: ValueId) -> Option<IValue> {
        match self.graph.value(v).def {
            Def::Node(n, _) if self.graph.node(n).kind == "prim::Constant" => {
                constant_value(self.graph, n)
            }
            _ => None,
        }
    }

    /// What node `n` is as a step of an elementwise chain, if it can be one.
    fn chain_operator(&self, n: NodeId) -> Option<ChainOperator> {
        let node = self.graph.node(n);
        if node.outputs.len() != 1 || !node.blocks.is_empty() {
            return None;
        }
        // the fallback runs the kernel `op` resolves
        Registry::global().lookup(&node.kind, node.overload.as_deref().unwrap_or(""))?;
        let constant = |i: usize| self.graph_constant(*node.inputs.get(i)?);
        chain_operator(&node.qualified_op(), node.inputs.len(), &constant)
    }

    /// The elementwise chains of a block, as positions in `nodes`: runs of two or more fusible
    /// operators, consecutive but for constants, each consuming the previous one's result as
    /// that result's only use. A chain does not start with an in-place operator (it would
    /// write a tensor from outside the chain).
    fn elementwise_chains(&self, nodes: &[NodeId]) -> Vec<Vec<usize>> {
        let graph = self.graph;
        let mut chains = Vec::new();
        let mut cur: Vec<usize> = Vec::new();
        let flush = |cur: &mut Vec<usize>, chains: &mut Vec<Vec<usize>>| {
            if cur.len() >= 2 {
                chains.push(std::mem::take(cur));
            } else {
                cur.clear();
            }
        };
        for (p, &n) in nodes.iter().enumerate() {
            let node = graph.node(n);
            if node.kind == "prim::Constant" {
                continue;
            }
            let Some(spec) = self.chain_operator(n) else {
                flush(&mut cur, &mut chains);
                continue;
            };
            let prev_out = cur
                .last()
                .and_then(|&q| nodes.get(q))
                .and_then(|&m| graph.node(m).outputs.first().copied());
            let continues = prev_out.is_some_and(|v| {
                let operands = node.inputs.get(..spec.operands).unwrap_or(&[]);
                self.use_count.get(v.0 as usize) == Some(&1)
                    && operands.iter().filter(|&&w| w == v).count() == 1
                    && (!spec.in_place || node.inputs.first() == Some(&v))
            });
            if !continues {
                flush(&mut cur, &mut chains);
                if spec.in_place {
                    continue;
                }
            }
            cur.push(p);
        }
        flush(&mut cur, &mut chains);
        chains
    }

    /// The instruction of the chain at `positions` of `nodes`: its inputs are the distinct
    /// values its operators read from outside it, each moved in when the chain holds its last
    /// use; the intermediate results live only inside the instruction.
    fn chain_instr(
        &mut self,
        fname: &str,
        block: BlockId,
        nodes: &[NodeId],
        positions: &[usize],
        last_use: &HashMap<ValueId, usize>,
    ) -> crate::Result<Instr> {
        let graph = self.graph;
        let mut values: Vec<ValueId> = Vec::new();
        let mut chain = Vec::with_capacity(positions.len());
        let mut kernels = Vec::with_capacity(positions.len());
        let mut prev: Option<ValueId> = None;
        let mut last_node = None;
        for &p in positions {
            let n = *nodes
                .get(p)
                .ok_or_else(|| plan_error(fname, "elementwise chain out of its block"))?;
            let node = graph.node(n);
            let spec = self
                .chain_operator(n)
                .ok_or_else(|| plan_error(fname, format!("{} is not fusible", node.kind)))?;
            let mut args = Vec::with_capacity(node.inputs.len());
            for &v in &node.inputs {
                if Some(v) == prev {
                    args.push(ChainArg::Prev);
                    continue;
                }
                let i = match values.iter().position(|&w| w == v) {
                    Some(i) => i,
                    None => {
                        values.push(v);
                        values.len() - 1
                    }
                };
                args.push(ChainArg::Input(i));
            }
            let (Some(&lhs), rhs) = (args.first(), args.get(1).copied()) else {
                return Err(plan_error(fname, format!("{} without operands", node.kind)));
            };
            chain.push(ChainStep {
                op: spec.op,
                lhs,
                rhs: if spec.operands == 2 { rhs } else { None },
            });
            let Op::Kernel { kernel, name } = self.op(fname, n)? else {
                return Err(plan_error(fname, format!("{} has no kernel", node.kind)));
            };
            kernels.push(ChainKernel {
                kernel,
                name,
                args: args
                    .iter()
                    .map(|a| match *a {
                        ChainArg::Prev => ChainKernelArg::Prev,
                        ChainArg::Input(i) => ChainKernelArg::Input {
                            index: i as u32,
                            last: false,
                        },
                    })
                    .collect(),
                source: node.source.clone(),
            });
            prev = node.outputs.first().copied();
            last_node = Some(node);
        }
        // the fallback moves each input out at its last read
        let mut seen = vec![false; values.len()];
        for k in kernels.iter_mut().rev() {
            for a in k.args.iter_mut().rev() {
                if let ChainKernelArg::Input { index, last } = a {
                    if let Some(s) = seen.get_mut(*index as usize) {
                        *last = !*s;
                        *s = true;
                    }
                }
            }
        }
        let inputs: Box<[Operand]> = values
            .iter()
            .map(|&v| {
                let last_here = self.def_block_of(v) == block
                    && last_use.get(&v).is_some_and(|u| positions.contains(u));
                self.operand(v, last_here)
            })
            .collect();
        let out = prev.ok_or_else(|| plan_error(fname, "empty elementwise chain"))?;
        let reg = self.reg(out);
        let drops: Box<[Reg]> = if self.use_count.get(out.0 as usize) == Some(&0) {
            Box::new([reg])
        } else {
            Box::new([])
        };
        Ok(Instr {
            op: Op::ElementwiseChain {
                chain: chain.into(),
                kernels: kernels.into(),
                declined: std::sync::atomic::AtomicU64::new(0),
            },
            inputs,
            outputs: Box::new([reg]),
            drops,
            source: last_node.and_then(|n| n.source.clone()),
        })
    }

    /// The module chains of a block (see `module_chain`): positions in `nodes` of their steps
    /// and the steps' kinds, those [`module_chain::worth_fusing`] keeps.
    fn module_chains(&self, nodes: &[NodeId]) -> Vec<(Vec<usize>, Vec<StepKind>)> {
        let g = self.graph;
        let mut out = Vec::new();
        let mut p = 0;
        while p < nodes.len() {
            let Some((start, first)) = nodes
                .get(p)
                .and_then(|&n| Some((n, module_chain::starts_chain(g, n)?)))
            else {
                p += 1;
                continue;
            };
            let (mut positions, mut kinds) = (vec![p], vec![first]);
            let mut prev = g.node(start).outputs.first().copied();
            let mut q = p + 1;
            while let Some(v) = prev {
                while nodes
                    .get(q)
                    .is_some_and(|&n| module_chain::may_interleave(g, n))
                {
                    q += 1;
                }
                let Some(&n) = nodes.get(q) else { break };
                let after = kinds.last().copied().unwrap_or(first);
                let Some(kind) = module_chain::next_step(g, n, v, after, &self.use_count) else {
                    break;
                };
                positions.push(q);
                kinds.push(kind);
                prev = g.node(n).outputs.first().copied();
                q += 1;
            }
            if module_chain::worth_fusing(&kinds) {
                p = positions.last().map_or(p, |&l| l + 1);
                out.push((positions, kinds));
            } else {
                p += 1;
            }
        }
        out
    }

    /// The instruction of the module chain whose steps sit at `positions` of `nodes`: its
    /// inputs are the chain's input, the receivers and the residual (each distinct value once).
    fn module_chain_instr(
        &mut self,
        fname: &str,
        block: BlockId,
        nodes: &[NodeId],
        positions: &[usize],
        kinds: &[StepKind],
        last_use: &HashMap<ValueId, usize>,
    ) -> crate::Result<Instr> {
        let graph = self.graph;
        let mut values: Vec<ValueId> = Vec::new();
        let mut index_of = |v: ValueId| match values.iter().position(|&w| w == v) {
            Some(i) => i as u32,
            None => {
                values.push(v);
                (values.len() - 1) as u32
            }
        };
        let mut steps = Vec::with_capacity(positions.len());
        let mut input = None;
        let mut out = None;
        for (&p, &kind) in positions.iter().zip(kinds) {
            let n = *nodes
                .get(p)
                .ok_or_else(|| plan_error(fname, "module chain out of its block"))?;
            let node = graph.node(n);
            let (first, second) = match node.inputs[..] {
                [a, b, ..] => (a, b),
                _ => return Err(plan_error(fname, format!("{} without operands", node.kind))),
            };
            let mut add = None;
            let operand = if kind == StepKind::Residual {
                let Op::Kernel { kernel, name } = self.op(fname, n)? else {
                    return Err(plan_error(fname, format!("{} has no kernel", node.kind)));
                };
                let alpha = node
                    .inputs
                    .get(2)
                    .and_then(|&a| self.graph_constant(a))
                    .ok_or_else(|| plan_error(fname, "residual add without a constant alpha"))?;
                add = Some((kernel, name, alpha));
                index_of(second)
            } else {
                if matches!(kind, StepKind::Conv | StepKind::Linear) {
                    input = Some(index_of(second));
                }
                index_of(first)
            };
            let receiver_attr = match graph.value(first).def {
                Def::Node(get, 0) if kind != StepKind::Residual => {
                    let get = graph.node(get);
                    match get.attr("name") {
                        Some(Attr::Str(name))
                            if get.kind == "prim::GetAttr"
                                && get.inputs.first() == graph.inputs().first() =>
                        {
                            Some(Arc::<str>::from(name.as_str()))
                        }
                        _ => None,
                    }
                }
                _ => None,
            };
            steps.push(ModuleStep {
                kind,
                operand,
                receiver_attr,
                call: RwLock::new(None),
                add,
                source: node.source.clone(),
            });
            out = node
                .outputs
                .first()
                .copied()
                .map(|v| (v, node.source.clone()));
        }
        let (out, source) = out.ok_or_else(|| plan_error(fname, "empty module chain"))?;
        let input = input
            .ok_or_else(|| plan_error(fname, "module chain without a convolution or linear"))?;
        let inputs: Box<[Operand]> = values
            .iter()
            .map(|&v| {
                let last_here = self.def_block_of(v) == block
                    && last_use.get(&v).is_some_and(|u| positions.contains(u));
                self.operand(v, last_here)
            })
            .collect();
        let reg = self.reg(out);
        let drops: Box<[Reg]> = if self.use_count.get(out.0 as usize) == Some(&0) {
            Box::new([reg])
        } else {
            Box::new([])
        };
        Ok(Instr {
            op: Op::ModuleChain(Box::new(ModuleChainOp {
                steps: steps.into(),
                input,
                facts: RwLock::new(None),
                fused_calls: std::sync::atomic::AtomicU64::new(0),
                declined_calls: std::sync::atomic::AtomicU64::new(0),
            })),
            inputs,
            outputs: Box::new([reg]),
            drops,
            source,
        })
    }

    fn op(&mut self, fname: &str, n: NodeId) -> crate::Result<Op> {
        let graph = self.graph;
        let node = graph.node(n);
        let out_type = node.outputs.first().map(|&v| &graph.value(v).ty);
        let str_attr = |name: &str| match node.attr(name) {
            Some(Attr::Str(s)) => Some(Arc::<str>::from(s.as_str())),
            _ => None,
        };
        let block_at = |b: &mut Self, i: usize| -> crate::Result<Block> {
            let bl = node
                .blocks
                .get(i)
                .copied()
                .ok_or_else(|| plan_error(fname, format!("{} without block {i}", node.kind)))?;
            b.block(fname, bl)
        };
        if let Some(refusal) = self.refused.get(&n) {
            return Ok(Op::Refused(Box::new(refusal.clone())));
        }
        Ok(match node.kind.as_str() {
            "prim::If" => Op::If {
                then_block: block_at(self, 0)?,
                else_block: block_at(self, 1)?,
            },
            "prim::Loop" => Op::Loop {
                body: block_at(self, 0)?,
            },
            "prim::fork" => Op::Fork {
                body: block_at(self, 0)?,
            },
            CACHED_REGION => {
                let body = block_at(self, 0)?;
                let names: Vec<&str> = body.instrs.iter().filter_map(Instr::op_name).collect();
                Op::CachedRegion(Box::new(CachedRegionOp {
                    label: format!("cached region ({})", names.join(" + ")).into(),
                    body,
                    cache: Default::default(),
                }))
            }
            "aten::wait" => Op::Wait,
            "aten::sort" | "aten::sorted"
                if node.overload.as_deref() == Some("any")
                    && matches!(node.inputs.first().map(|&v| &graph.value(v).ty),
                                Some(Type::List(t)) if matches!(**t, Type::Class(_))) =>
            {
                let overload = node.overload.as_deref().unwrap_or("");
                Op::SortObjects {
                    copy: node.kind == "aten::sorted",
                    kernel: Registry::global()
                        .lookup(&node.kind, overload)
                        .ok_or_else(|| {
                            plan_error(fname, format!("no kernel for {}", node.qualified_op()))
                        })?,
                    name: node.qualified_op().into(),
                    cache: RwLock::new(None),
                }
            }
            "prim::CallMethod" => Op::CallMethod {
                name: str_attr("name")
                    .ok_or_else(|| plan_error(fname, "prim::CallMethod without a name"))?,
                cache: RwLock::new(None),
            },
            "prim::CallFunction" => Op::CallFunction {
                cache: RwLock::new(None),
            },
            "prim::GetAttr" => Op::GetAttr {
                name: str_attr("name")
                    .ok_or_else(|| plan_error(fname, "prim::GetAttr without a name"))?,
                slot: std::sync::atomic::AtomicUsize::new(0),
            },
            "prim::SetAttr" => Op::SetAttr {
                name: str_attr("name")
                    .ok_or_else(|| plan_error(fname, "prim::SetAttr without a name"))?,
            },
            "prim::TupleConstruct" => Op::TupleConstruct {
                class: match out_type {
                    Some(Type::Class(c)) => Some(c.clone()),
                    _ => None,
                },
            },
            "prim::TupleUnpack" => Op::TupleUnpack,
            "prim::TupleIndex" => Op::TupleIndex,
            "prim::TupleSlice" => Op::TupleSlice {
                begin: match node.attr("beg") {
                    Some(Attr::Int(i)) => *i,
                    _ => 0,
                },
                end: match node.attr("end") {
                    Some(Attr::Int(i)) => Some(*i),
                    _ => None,
                },
            },
            "prim::ListConstruct" => Op::ListConstruct {
                elem: match out_type {
                    Some(Type::List(t)) => (**t).clone(),
                    _ => Type::Any,
                },
            },
            "prim::ListUnpack" => Op::ListUnpack,
            "prim::DictConstruct" => {
                let (key, value) = match out_type {
                    Some(Type::Dict(k, v)) => ((**k).clone(), (**v).clone()),
                    _ => (Type::Any, Type::Any),
                };
                Op::DictConstruct { key, value }
            }
            "prim::RaiseException" => Op::Raise,
            "prim::Uninitialized" => Op::Uninitialized,
            "prim::unchecked_cast" | "prim::unchecked_unwrap_optional" | "prim::data"
                if node.inputs.len() == 1 =>
            {
                Op::Identity
            }
            "prim::isinstance" => Op::IsInstance {
                types: crate::ir::graph::isinstance_types(node.attr("types")),
            },
            "prim::CreateObject" => match out_type {
                Some(Type::Class(c)) => Op::CreateObject { class: c.clone() },
                other => {
                    return Err(plan_error(
                        fname,
                        format!("prim::CreateObject of non-class type {other:?}"),
                    ))
                }
            },
            "prim::Enter" => Op::Enter,
            "prim::Exit" => Op::Exit,
            "prim::Print" => Op::Print,
            "aten::warn" => Op::Warn {
                warned: AtomicBool::new(false),
            },
            kind if crate::ops::jit_fusion_prims::NODE_PRIM_KINDS.contains(&kind) => Op::NodePrim(
                crate::ops::jit_fusion_prims::NodePrim::from_node(kind, node)
                    .map_err(|e| plan_error(fname, e.to_string()))?,
            ),
            kind => {
                let overload = node.overload.as_deref().unwrap_or("");
                let name: Arc<str> = node.qualified_op().into();
                // Resolved here, once: a call runs the kernel the plan holds, without a lookup
                // (a custom operator's table is read under its lock only now). An out= overload
                // runs through its functional sibling where it has one, which resizes and casts
                // into `out` as PyTorch does.
                if let Some(variant) = crate::ops::out_variants::resolve(&name) {
                    let resize = match self.out_unthreaded.get(&n) {
                        Some(why) => Resize::Refused(why.clone()),
                        None if self.out_threaded.contains(&n) => Resize::Allowed,
                        None => Resize::Refused(
                            "the plan could not follow its out tensor's other handles".into(),
                        ),
                    };
                    Op::OutVariant(Box::new(OutVariantOp {
                        variant,
                        name,
                        resize,
                        warned: AtomicBool::new(false),
                    }))
                } else if let Some(kernel) = Registry::global().lookup(kind, overload) {
                    Op::Kernel { kernel, name }
                } else if let Some(custom) = crate::ops::custom::lookup(&name) {
                    Op::Custom(custom)
                } else {
                    self.missing.push(missing_op(&name, node.source.as_ref()));
                    self.missing_unconditional |= self.depth <= 1;
                    Op::Missing {
                        function: fname.into(),
                        all: self.missing_all.clone(),
                    }
                }
            }
        })
    }
}

impl crate::ops::jit_fusion_prims::NodeAttrs for crate::ir::graph::NodeData {
    fn int(&self, name: &str) -> Option<i64> {
        match self.attr(name)? {
            Attr::Int(i) | Attr::Value(IValue::Int(i)) => Some(*i),
            _ => None,
        }
    }
    fn float(&self, name: &str) -> Option<f64> {
        match self.attr(name)? {
            Attr::Float(f) | Attr::Value(IValue::Double(f)) => Some(*f),
            _ => None,
        }
    }
    fn type_spellings(&self, name: &str) -> Option<Vec<String>> {
        match self.attr(name)? {
            Attr::Strs(s) => Some(s.clone()),
            _ => None,
        }
    }
}

/// The missing operator `name` and the code calling it (printed as `aten::foo.bar at
/// "code/__torch__.py", line 12: y = torch.foo(x)`, rendered with a caret by the CLI).
fn missing_op(name: &str, src: Option<&SourceRange>) -> crate::error::MissingOp {
    crate::error::MissingOp {
        op: name.to_string(),
        at: src.map(SourceRange::code_location),
    }
}

/// The value of a `prim::Constant` node, including list attributes and function references.
fn constant_value(graph: &Graph, n: NodeId) -> Option<IValue> {
    let node = graph.node(n);
    let ty = node.outputs.first().map(|&v| &graph.value(v).ty);
    if let Some(Type::Function(q)) = ty {
        return Some(IValue::Function(q.clone()));
    }
    match node.attr("value") {
        Some(Attr::Ints(v)) => Some(IValue::List(List::new(
            Type::Int,
            v.iter().map(|&i| IValue::Int(i)).collect(),
        ))),
        Some(Attr::Floats(v)) => Some(IValue::List(List::new(
            Type::Float,
            v.iter().map(|&f| IValue::Double(f)).collect(),
        ))),
        Some(Attr::Strs(v)) => Some(IValue::List(List::new(
            Type::Str,
            v.iter().map(|s| IValue::str(s.as_str())).collect(),
        ))),
        Some(Attr::Type(t)) => Some(IValue::str(t.annotation_str())),
        None => match (node.attr("name"), ty) {
            (Some(Attr::Str(s)), _) => Some(IValue::Function(s.as_str().into())),
            (_, Some(Type::Bool)) => None,
            _ => Some(IValue::None),
        },
        _ => {
            let v = graph.constant_value(n)?;
            // bool constants are stored as ints in the attribute
            Some(match (v, ty) {
                (IValue::Int(i), Some(Type::Bool)) => IValue::Bool(i != 0),
                (v, _) => v,
            })
        }
    }
}
