//! What a call of a graph may do to the values passed to it: which parameters it may write, and
//! which parameters its results may alias. A small, conservative alias analysis over PyTorch's
//! schema annotations (`Tensor(a!)` is written, `-> Tensor(a)` aliases the input in set `a`, `*`
//! may alias anything), summarized per method so that callers compose callee summaries.
//!
//! The runtime uses it to decide whether a top-level call may mutate module state (then it runs
//! alone, in PyTorch's sequential semantics) or only reads it (then calls run concurrently).

use crate::ir::graph::{Attr, BlockId, Def, Graph, NodeId, ValueId};
use crate::ops::schema::SchemaRegistry;
use crate::values::types::Type;
use crate::values::IValue;

/// A set of a graph's parameters, one bit each (`self` is bit 0). Parameters past 63 share bit 63,
/// which only makes the analysis more conservative.
pub type ParamSet = u64;

/// Every parameter.
pub const ALL_PARAMS: ParamSet = u64::MAX;

/// The summary of one method or function.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Effects {
    /// Parameters whose memory a call may write (in place, or through `prim::SetAttr`).
    pub writes: ParamSet,
    /// Parameters written only by batch norm's running statistics, i.e. only in training mode.
    pub writes_if_training: ParamSet,
    /// Parameters the results may alias.
    pub returns: ParamSet,
}

impl Effects {
    /// What an unknown callee may do: anything.
    pub const UNKNOWN: Effects = Effects {
        writes: ALL_PARAMS,
        writes_if_training: ALL_PARAMS,
        returns: ALL_PARAMS,
    };
}

/// A call target the analysis needs a summary of.
#[derive(Clone, Copy, Debug)]
pub enum Callee<'a> {
    Method { class: &'a str, name: &'a str },
    Function(&'a str),
}

fn bit(i: usize) -> ParamSet {
    1u64 << i.min(63)
}

/// Operators that update running statistics without saying so in their schemas.
pub(crate) const RUNNING_STATS_OPS: &[&str] = &[
    "aten::batch_norm",
    "aten::instance_norm",
    "aten::_batch_norm_impl_index",
    "aten::native_batch_norm",
    "aten::_native_batch_norm_legit",
    "aten::_batch_norm_with_update",
];

/// The summary of `graph`; `resolve` gives callee summaries (`None`: unknown, assume anything).
pub fn effects(graph: &Graph, resolve: &mut dyn FnMut(Callee<'_>) -> Option<Effects>) -> Effects {
    let n = value_count(graph);
    let mut a = Analysis {
        graph,
        alias: vec![0; n],
        implies_training: vec![false; n],
        in_training_branch: false,
        fx: Effects::default(),
        changed: false,
    };
    for (i, &v) in graph.inputs().iter().enumerate() {
        a.alias[v.0 as usize] = bit(i);
    }
    // Loop-carried values make this a fixpoint; alias sets only grow, so it converges quickly.
    for _ in 0..8 {
        a.changed = false;
        a.block(graph.root, resolve);
        if !a.changed {
            break;
        }
    }
    for &r in graph.outputs() {
        a.fx.returns |= a.get(r);
    }
    a.fx
}

fn value_count(graph: &Graph) -> usize {
    let mut max = 0usize;
    let mut note = |v: ValueId| max = max.max(v.0 as usize + 1);
    for &v in graph.inputs() {
        note(v);
    }
    graph.walk(graph.root, &mut |n| {
        let node = graph.node(n);
        node.inputs
            .iter()
            .chain(&node.outputs)
            .for_each(|&v| note(v));
        for &b in &node.blocks {
            let block = graph.block(b);
            block
                .params
                .iter()
                .chain(&block.returns)
                .for_each(|&v| note(v));
        }
    });
    for &v in &graph.block(graph.root).returns {
        note(v);
    }
    max
}

struct Analysis<'g> {
    graph: &'g Graph,
    /// Per value: the parameters it may alias.
    alias: Vec<ParamSet>,
    /// Per boolean value: true only if some module's `training` is true (`self.training`, and
    /// `self.training and ...`), so a branch it guards runs only in training mode.
    implies_training: Vec<bool>,
    /// Inside such a branch: writes there happen only in training mode.
    in_training_branch: bool,
    fx: Effects,
    changed: bool,
}

impl Analysis<'_> {
    fn get(&self, v: ValueId) -> ParamSet {
        self.alias.get(v.0 as usize).copied().unwrap_or(ALL_PARAMS)
    }

    fn add(&mut self, v: ValueId, set: ParamSet) {
        if is_immutable(&self.graph.value(v).ty) {
            return;
        }
        if let Some(slot) = self.alias.get_mut(v.0 as usize) {
            if *slot | set != *slot {
                *slot |= set;
                self.changed = true;
            }
        }
    }

    /// Record a write to memory aliasing `set`.
    fn write(&mut self, set: ParamSet) {
        if self.in_training_branch {
            self.fx.writes_if_training |= set;
        } else {
            self.fx.writes |= set;
        }
    }

    fn implies(&self, v: ValueId) -> bool {
        self.implies_training
            .get(v.0 as usize)
            .copied()
            .unwrap_or(false)
    }

    fn is_false(&self, v: ValueId) -> bool {
        match self.graph.value(v).def {
            Def::Node(c, _) => matches!(self.graph.constant_value(c), Some(IValue::Bool(false))),
            Def::Param(..) => false,
        }
    }

    fn union(&self, vs: &[ValueId]) -> ParamSet {
        vs.iter().fold(0, |acc, &v| acc | self.get(v))
    }

    fn block(&mut self, b: BlockId, resolve: &mut dyn FnMut(Callee<'_>) -> Option<Effects>) {
        let nodes = self.graph.block(b).nodes.clone();
        for n in nodes {
            self.node(n, resolve);
        }
    }

    fn node(&mut self, n: NodeId, resolve: &mut dyn FnMut(Callee<'_>) -> Option<Effects>) {
        let g = self.graph;
        let node = g.node(n);
        let inputs = node.inputs.clone();
        let outputs = node.outputs.clone();
        match node.kind.as_str() {
            "prim::Constant" | "prim::CreateObject" | "prim::Uninitialized" => {}
            "prim::GetAttr" => {
                let training = matches!(node.attr("name"), Some(Attr::Str(s)) if s == "training");
                if let (Some(&obj), Some(&out)) = (inputs.first(), outputs.first()) {
                    let s = self.get(obj);
                    self.add(out, s);
                    if training {
                        if let Some(slot) = self.implies_training.get_mut(out.0 as usize) {
                            *slot = true;
                        }
                    }
                }
            }
            "prim::SetAttr" => {
                if let Some(&obj) = inputs.first() {
                    let s = self.get(obj);
                    self.write(s);
                    // the object now holds the value: later reads of it alias the value too
                    let v = inputs.get(1).map_or(0, |&v| self.get(v));
                    self.add(obj, v);
                }
            }
            "prim::If" => {
                let guarded = inputs.first().is_some_and(|&c| self.implies(c));
                for (k, &blk) in node.blocks.iter().enumerate() {
                    let outer = self.in_training_branch;
                    self.in_training_branch |= guarded && k == 0;
                    self.block(blk, resolve);
                    self.in_training_branch = outer;
                    let rets = g.block(blk).returns.clone();
                    for (o, r) in outputs.iter().zip(rets) {
                        let s = self.get(r);
                        self.add(*o, s);
                    }
                }
                // `a and b` is `If(a) { b } else { False }`: true only if a and b are
                if let [then_b, else_b] = node.blocks[..] {
                    let (tr, er) = (&g.block(then_b).returns, &g.block(else_b).returns);
                    for (k, &o) in outputs.iter().enumerate() {
                        let (Some(&t), Some(&e)) = (tr.get(k), er.get(k)) else {
                            continue;
                        };
                        if self.is_false(e) && (guarded || self.implies(t)) {
                            if let Some(slot) = self.implies_training.get_mut(o.0 as usize) {
                                *slot = true;
                            }
                        }
                    }
                }
            }
            "prim::Loop" => {
                // inputs: max trip count, condition, carried...; body params: iteration, carried...
                // body returns: condition, carried...
                let Some(&body) = node.blocks.first() else {
                    return;
                };
                let params = g.block(body).params.clone();
                for (k, &p) in params.iter().enumerate().skip(1) {
                    let init = inputs.get(k + 1).map_or(ALL_PARAMS, |&v| self.get(v));
                    self.add(p, init);
                }
                self.block(body, resolve);
                let rets = g.block(body).returns.clone();
                for (k, &r) in rets.iter().enumerate().skip(1) {
                    let s = self.get(r);
                    if let Some(&p) = params.get(k) {
                        self.add(p, s);
                    }
                    if let Some(&o) = outputs.get(k - 1) {
                        self.add(o, s);
                    }
                }
                for (k, &o) in outputs.iter().enumerate() {
                    let init = inputs.get(k + 2).map_or(ALL_PARAMS, |&v| self.get(v));
                    self.add(o, init);
                }
            }
            "prim::CallMethod" => {
                let name = match node.attr("name") {
                    Some(Attr::Str(s)) => Some(s.as_str()),
                    _ => None,
                };
                let class = inputs.first().and_then(|&r| match &g.value(r).ty {
                    Type::Class(c) => Some(c.clone()),
                    _ => None,
                });
                let fx = match (class.as_deref(), name) {
                    (Some(class), Some(name)) => resolve(Callee::Method { class, name }),
                    _ => None,
                };
                self.call(&inputs, &outputs, fx.unwrap_or(Effects::UNKNOWN));
            }
            "prim::CallFunction" => {
                let fx = inputs.first().and_then(|&f| match &g.value(f).ty {
                    Type::Function(q) => resolve(Callee::Function(q)),
                    _ => None,
                });
                self.call(
                    inputs.get(1..).unwrap_or_default(),
                    &outputs,
                    fx.unwrap_or(Effects::UNKNOWN),
                );
            }
            _ => self.operator(n, &inputs, &outputs),
        }
    }

    /// A call: the callee's summary over its parameters, mapped onto the actual arguments.
    fn call(&mut self, args: &[ValueId], outputs: &[ValueId], fx: Effects) {
        let over = |set: ParamSet, this: &Self| {
            args.iter()
                .enumerate()
                .filter(|(i, _)| set & bit(*i) != 0)
                .fold(0, |acc, (_, &v)| acc | this.get(v))
        };
        let (w, wt) = (over(fx.writes, self), over(fx.writes_if_training, self));
        self.write(w);
        self.fx.writes_if_training |= wt;
        let ret = over(fx.returns, self);
        for &o in outputs {
            self.add(o, ret);
        }
    }

    fn operator(&mut self, n: NodeId, inputs: &[ValueId], outputs: &[ValueId]) {
        let node = self.graph.node(n);
        let schema = node
            .overload
            .as_ref()
            .and_then(|_| SchemaRegistry::global().find(&node.qualified_op()));
        let Some(schema) = schema else {
            // Interpreter-level constructs (list/tuple construction and unpacking, casts): the
            // results hold or are their inputs.
            let all = self.union(inputs);
            for &o in outputs {
                self.add(o, all);
            }
            return;
        };
        let all = self.union(inputs);
        let mut written = 0;
        for (arg, &v) in schema.arguments.iter().zip(inputs) {
            if arg.is_write {
                written |= self.get(v);
            }
        }
        if written != 0 {
            self.write(written);
            // a container written with an element (`append`) now holds what the element aliases
            for (arg, &v) in schema.arguments.iter().zip(inputs) {
                if arg.is_write {
                    self.add(v, all);
                }
            }
        }
        if RUNNING_STATS_OPS.contains(&node.kind.as_str()) && !self.constant_false(&schema, inputs)
        {
            for (arg, &v) in schema.arguments.iter().zip(inputs) {
                if arg.name == "running_mean" || arg.name == "running_var" {
                    self.fx.writes_if_training |= self.get(v);
                }
            }
        }
        for (k, &o) in outputs.iter().enumerate() {
            let ret = match schema.returns.get(k) {
                Some(r) if r.is_wildcard() => all,
                Some(r) => {
                    let sets: Vec<&str> = r.alias_sets().collect();
                    schema
                        .arguments
                        .iter()
                        .zip(inputs)
                        .filter(|(a, _)| {
                            a.is_wildcard() || a.alias_sets().any(|s| sets.contains(&s))
                        })
                        .fold(0, |acc, (_, &v)| acc | self.get(v))
                }
                // `-> ...` and the like: be conservative
                None => all,
            };
            self.add(o, ret);
        }
    }

    /// Whether batch norm's `training` (instance norm's `use_input_stats`) is a constant false.
    fn constant_false(
        &self,
        schema: &crate::ops::schema::FunctionSchema,
        inputs: &[ValueId],
    ) -> bool {
        schema
            .arguments
            .iter()
            .zip(inputs)
            .find(|(a, _)| a.name == "training" || a.name == "use_input_stats")
            .is_some_and(|(_, &v)| self.is_false(v))
    }
}

/// Values of these types cannot carry an alias to mutable memory.
fn is_immutable(ty: &Type) -> bool {
    matches!(
        ty,
        Type::Int
            | Type::Float
            | Type::Bool
            | Type::Str
            | Type::Complex
            | Type::Number
            | Type::NoneType
            | Type::Device
            | Type::Layout
            | Type::ScalarType
            | Type::MemoryFormat
            | Type::QScheme
    )
}
