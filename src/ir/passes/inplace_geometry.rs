//! In-place geometry ops (`x.unsqueeze_(0)`, `x.t_()`, `x.resize_(n)`, `x.set_(y)`, `set_data`,
//! the sparse `sparse_resize_` family, ...) made functional at plan build, as PyTorch's
//! `RemoveMutation` does for data mutations: the op's output is a new handle with the new
//! shape (storage, sparse parts), and every later read of the tensor reads it. Data stays
//! shared through the storage, so data writes need nothing of this.
//!
//! A tsrun tensor handle (`IValue::Tensor`) owns its shape, strides and offset; PyTorch's
//! `TensorImpl` is shared by every handle of the tensor, so an in-place shape change is seen
//! through all of them. The rewrite is exact when the only handles are this function's SSA values
//! for the tensor: the value itself and the outputs of ops that return their argument
//! (`Tensor(a!)`, as `add_`). It threads the newest handle through straight code and `if`
//! branches (an `if` gains an output), and refuses, naming the op and its source line, when
//! another handle could see the tensor's old shape: the tensor was stored (list, tuple, dict,
//! attribute, another function's argument, an `if`/loop result) before the shape change, comes
//! from storage others reach (a module attribute, a list element, a constant), may be the same
//! tensor as one read later (`y = x.contiguous()` returns `x` itself when it is contiguous), or
//! changes shape inside a loop body while defined outside it.
//!
//! A refused op inside a branch or loop body is left to fail when it runs
//! ([`InplaceGeometry::deferred`]), as PyTorch models keep branches they never take
//! (`if self.batch_first: result.transpose_(0, 1)`); the rest of the function is threaded as
//! if it did not change the tensor, which is exact since reaching it stops the call. One on the
//! function's straight path fails the rewrite.
//!
//! out= calls (`torch.add(x, y, out=buf)`) resize their out tensor when its shape differs from
//! the result's, so their out results are sites too; one that cannot be threaded is not an
//! error: the call keeps its input's handle and refuses at run time only if it must resize
//! ([`InplaceGeometry::out_unthreaded`]).
//!
//! A function parameter is another handle, its caller's: the rewrite is reported for the
//! parameter, and the interpreter runs such a function only as the top-level call, whose
//! inputs the caller handed over (it refuses to call it from TorchScript code).

use crate::error::CodeLocation;
use crate::ir::graph::{BlockId, Def, Graph, NodeId, ValueId};
use crate::ir::CompileError;
use crate::ops::schema::{FunctionSchema, SchemaRegistry};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Operators that change their first argument's geometry (or storage) in place and return it.
pub const INPLACE_GEOMETRY_OPS: &[&str] = &[
    "aten::unsqueeze_",
    "aten::squeeze_",
    "aten::t_",
    "aten::transpose_",
    "aten::swapaxes_",
    "aten::swapdims_",
    "aten::as_strided_",
    "aten::resize_",
    "aten::resize_as_",
    "aten::_resize_output_",
    "aten::set_",
    "aten::shallow_copy_data_",
    "prims::resize",
    "aten::sparse_resize_",
    "aten::sparse_resize_and_clear_",
    "aten::resize_as_sparse_",
    "aten::copy_sparse_to_sparse_",
];

/// Views that always make a new tensor (a new `TensorImpl` in PyTorch), so they keep their
/// shape when the tensor they view changes shape. Other `Tensor(a)` results (`contiguous`,
/// `to`, `flatten`, ...) may be the input itself.
const NEW_HANDLE_VIEWS: &[&str] = &[
    "aten::select",
    "aten::slice",
    "aten::view",
    "aten::view_as",
    "aten::reshape",
    "aten::reshape_as",
    "aten::permute",
    "aten::transpose",
    "aten::swapaxes",
    "aten::swapdims",
    "aten::t",
    "aten::unsqueeze",
    "aten::squeeze",
    "aten::expand",
    "aten::expand_as",
    "aten::broadcast_to",
    "aten::narrow",
    "aten::diagonal",
    "aten::unflatten",
    "aten::unfold",
    "aten::as_strided",
    "aten::detach",
    "aten::alias",
    "aten::split",
    "aten::chunk",
    "aten::unbind",
    "aten::split_with_sizes",
    "aten::tensor_split",
    "aten::movedim",
    "aten::moveaxis",
    "aten::real",
    "aten::imag",
];

/// A function parameter whose shape the function changes in place: its caller would see it.
#[derive(Clone, Debug)]
pub struct ReshapedParam {
    /// Index among the graph inputs.
    pub param: usize,
    /// Its name in the code.
    pub name: String,
    /// The in-place op (`aten::unsqueeze_`).
    pub op: String,
    pub at: Option<CodeLocation>,
}

/// `set_data(self, new_data) -> ()` is `shallow_copy_data_` without a result: it is rewritten
/// to that op, whose result the rewrite threads.
const SET_DATA: &str = "aten::set_data";

/// Whether operator `op` (no overload) changes its `self` argument's handle: geometry,
/// storage or sparse parts.
pub fn changes_handle(op: &str) -> bool {
    INPLACE_GEOMETRY_OPS.contains(&op) || op == SET_DATA
}

/// Whether `graph` calls an in-place geometry op or an out= overload (a cheap test before
/// cloning it to rewrite).
pub fn has_inplace_geometry(graph: &Graph) -> bool {
    let mut found = false;
    graph.walk(graph.root, &mut |n| {
        found |= changes_handle(&graph.node(n).kind) || !out_sites(graph, n).is_empty();
    });
    found
}

/// The outputs of node `n` that are out= tensors it may resize (`aten::add.out`'s result,
/// which returns its `out` argument); empty for other nodes.
fn out_sites(graph: &Graph, n: NodeId) -> Vec<usize> {
    let node = graph.node(n);
    let Some(s) = schema(graph, n) else {
        return Vec::new();
    };
    let Some(outs) = crate::ops::out_variants::out_positions(&s) else {
        return Vec::new();
    };
    (0..node.outputs.len())
        .filter(|&o| returned_input(graph, n, o).is_some_and(|i| outs.contains(&i)))
        .collect()
}

/// A place where a tensor's handle may change: output `.1` of node `.0` (an in-place geometry
/// op's result, or an out= call's out tensor).
type Site = (NodeId, usize);

/// The sites of node `n`.
fn sites(graph: &Graph, n: NodeId) -> Vec<Site> {
    if is_geometry_op(graph, n) {
        return vec![(n, 0)];
    }
    out_sites(graph, n).into_iter().map(|o| (n, o)).collect()
}

/// Whether a site is an out= call's (which may stay unthreaded: it then refuses to resize).
fn is_out_site(graph: &Graph, (n, _): Site) -> bool {
    !is_geometry_op(graph, n)
}

/// The input a site changes: the geometry op's `self`, the out tensor an output returns.
fn site_input(graph: &Graph, (n, o): Site) -> Option<ValueId> {
    let i = returned_input(graph, n, o)?;
    graph.node(n).inputs.get(i).copied()
}

fn rewrite_set_data(graph: &mut Graph) {
    let mut found = Vec::new();
    graph.walk(graph.root, &mut |n| {
        let node = graph.node(n);
        if node.kind == SET_DATA && node.outputs.is_empty() && node.inputs.len() == 2 {
            found.push(n);
        }
    });
    for n in found {
        let node = graph.node_mut(n);
        node.kind = "aten::shallow_copy_data_".into();
        node.overload = Some(String::new());
        graph.add_node_output(n, crate::values::types::Type::Tensor);
    }
}

/// What [`thread_inplace_geometry`] made of a graph's in-place geometry ops.
#[derive(Debug, Default)]
pub struct InplaceGeometry {
    /// The parameters whose shape the function changes.
    pub reshaped: Vec<ReshapedParam>,
    /// Ops refused inside a branch or loop body, each with its refusal: the op is left in the
    /// graph with no users (later reads take its input), to fail when it runs.
    pub deferred: Vec<(NodeId, CompileError)>,
    /// out= calls (`torch.add(x, y, out=buf)`) whose out tensor could not be threaded, and
    /// why: later reads take the tensor they were given, so they may write it but not resize
    /// it (they fail if they must).
    pub out_unthreaded: Vec<(NodeId, String)>,
    /// out= calls whose every out tensor was threaded: they may resize them.
    pub out_threaded: Vec<NodeId>,
}

/// Make every in-place geometry op of `graph` functional (see the module comment).
pub fn thread_inplace_geometry(graph: &mut Graph) -> Result<InplaceGeometry, CompileError> {
    rewrite_set_data(graph);
    let mut done: HashSet<Site> = HashSet::new();
    let mut reshaped = Vec::new();
    let mut deferred = Vec::new();
    let mut out_unthreaded: Vec<(NodeId, String)> = Vec::new();
    let mut threaded_out_sites: HashSet<Site> = HashSet::new();
    loop {
        let facts = Facts::new(graph);
        let Some(site) = facts
            .order
            .iter()
            .flat_map(|&n| sites(graph, n))
            .find(|site| !done.contains(site))
        else {
            break;
        };
        let first = site.0;
        let analyzed = facts.analyze(graph, site).and_then(|plan| match plan.param {
            // the caller's handle of a parameter would keep the old shape; an out= call
            // that need not resize runs unthreaded
            Some(param) if is_out_site(graph, site) => {
                let debug_name = graph
                    .inputs()
                    .get(param)
                    .and_then(|&v| graph.value(v).debug_name.clone())
                    .unwrap_or_else(|| format!("#{param}"));
                // `out.1` is the code's `out`
                let name = match debug_name.rsplit_once('.') {
                    Some((base, n)) if n.bytes().all(|b| b.is_ascii_digit()) => base,
                    _ => &debug_name,
                };
                Err((
                    first,
                    format!("the out tensor is the function's parameter `{name}`, which its caller holds"),
                ))
            }
            _ => Ok(plan),
        });
        let plan = match analyzed {
            Ok(plan) => plan,
            Err((at, why)) if is_out_site(graph, site) || graph.node(first).owner != graph.root => {
                done.insert(site);
                let out = graph.node(first).outputs.get(site.1).copied();
                if let (Some(out), Some(input)) = (out, site_input(graph, site)) {
                    graph.replace_all_uses(out, input);
                }
                if is_out_site(graph, site) {
                    out_unthreaded.push((first, why));
                } else {
                    deferred.push((first, refusal(graph, at, why)));
                }
                continue;
            }
            Err((at, why)) => return Err(refusal(graph, at, why)),
        };
        done.extend(plan.geometry.iter().copied());
        threaded_out_sites.extend(
            plan.geometry
                .iter()
                .copied()
                .filter(|&site| is_out_site(graph, site)),
        );
        if let Some(param) = plan.param {
            let name = graph
                .inputs()
                .get(param)
                .and_then(|&v| graph.value(v).debug_name.clone())
                .unwrap_or_else(|| format!("#{param}"));
            reshaped.push(ReshapedParam {
                param,
                name,
                op: graph.node(first).qualified_op(),
                at: graph.node(first).source.as_ref().map(|s| s.code_location()),
            });
        }
        let mut rw = Rewrite {
            class: &plan.class,
            geometry: plan.geometry.iter().copied().collect(),
            root: plan.root,
            root_block: facts.def_block(graph, plan.root),
        };
        rw.block(graph, graph.root, None);
    }
    // a call resizes only if all its out tensors were threaded
    let mut out_threaded: Vec<NodeId> = threaded_out_sites
        .iter()
        .map(|&(n, _)| n)
        .filter(|&n| {
            !out_unthreaded.iter().any(|(m, _)| *m == n)
                && out_sites(graph, n)
                    .iter()
                    .all(|&o| threaded_out_sites.contains(&(n, o)))
        })
        .collect();
    out_threaded.sort_by_key(|n| n.0);
    out_threaded.dedup();
    Ok(InplaceGeometry {
        reshaped,
        deferred,
        out_unthreaded,
        out_threaded,
    })
}

fn is_geometry_op(graph: &Graph, n: NodeId) -> bool {
    let node = graph.node(n);
    INPLACE_GEOMETRY_OPS.contains(&node.kind.as_str())
        && !node.inputs.is_empty()
        && !node.outputs.is_empty()
}

/// Who reads a value.
#[derive(Clone, Copy)]
enum User {
    /// Input `i` of a node.
    Node(NodeId, usize),
    /// A return of a block (an `if`/loop result, or the function's result for the root).
    Return(BlockId),
}

/// Program-order positions and uses of one state of the graph.
struct Facts {
    order: Vec<NodeId>,
    pos: HashMap<NodeId, usize>,
    /// Position of each block's returns (after its last node).
    end: HashMap<BlockId, usize>,
    uses: HashMap<ValueId, Vec<(User, usize)>>,
}

/// One tensor whose shape changes in place, and how to rewrite it.
struct ClassPlan {
    /// Its SSA handles.
    class: HashSet<ValueId>,
    /// The in-place geometry ops and out= calls acting on it.
    geometry: HashSet<Site>,
    /// The handle no other handle of the class was made from.
    root: ValueId,
    /// Set when the root is (or may be) a parameter of the function.
    param: Option<usize>,
}

fn schema(graph: &Graph, n: NodeId) -> Option<Arc<FunctionSchema>> {
    let node = graph.node(n);
    if !node.kind.starts_with("aten::") {
        return None;
    }
    SchemaRegistry::global().find(&node.qualified_op())
}

/// For output `out` of `n`: the input it returns itself (`Tensor(a!)` on both), if any.
fn returned_input(graph: &Graph, n: NodeId, out: usize) -> Option<usize> {
    if is_geometry_op(graph, n) {
        return (out == 0).then_some(0);
    }
    let node = graph.node(n);
    if matches!(
        node.kind.as_str(),
        "prim::unchecked_cast" | "prim::unchecked_unwrap_optional"
    ) {
        return (out == 0).then_some(0);
    }
    let s = schema(graph, n)?;
    let r = s.returns.get(out)?;
    if !r.is_write || r.is_wildcard() {
        return None;
    }
    let sets: Vec<&str> = r.alias_sets().collect();
    s.arguments
        .iter()
        .position(|a| a.is_write && a.alias_sets().any(|x| sets.contains(&x)))
        .filter(|&i| i < node.inputs.len())
}

/// How a node's read of a tensor relates to the tensor's handles.
#[derive(PartialEq)]
enum Read {
    /// Reads it, keeps no handle (or returns a new one: a view).
    Plain,
    /// Returns it (`Tensor(a!)`): the output joins its handles.
    Returned,
    /// Its result may be the tensor itself (`Tensor(a)` that is not a new-handle view).
    MaybeSame,
    /// Keeps or passes a handle somewhere (containers, attributes, calls, unknown ops).
    Escapes,
}

fn classify_read(graph: &Graph, n: NodeId, input: usize) -> Read {
    let node = graph.node(n);
    if node
        .outputs
        .iter()
        .enumerate()
        .any(|(o, _)| returned_input(graph, n, o) == Some(input))
    {
        return Read::Returned;
    }
    if is_geometry_op(graph, n) {
        // the other tensor arguments (`resize_as_`'s template, `set_`'s source) are read
        return Read::Plain;
    }
    let Some(s) = schema(graph, n) else {
        return Read::Escapes;
    };
    let Some(arg) = s.arguments.get(input) else {
        return Read::Escapes;
    };
    if arg.is_wildcard() {
        return Read::Escapes;
    }
    let sets: Vec<&str> = arg.alias_sets().collect();
    if sets.is_empty() || arg.is_write {
        return Read::Plain;
    }
    let aliased = s
        .returns
        .iter()
        .any(|r| r.alias_sets().any(|x| sets.contains(&x)));
    if aliased && !NEW_HANDLE_VIEWS.contains(&node.kind.as_str()) {
        Read::MaybeSame
    } else {
        Read::Plain
    }
}

impl Facts {
    fn new(graph: &Graph) -> Facts {
        let mut f = Facts {
            order: Vec::new(),
            pos: HashMap::new(),
            end: HashMap::new(),
            uses: HashMap::new(),
        };
        let mut next = 0;
        f.visit(graph, graph.root, &mut next);
        f
    }

    fn visit(&mut self, graph: &Graph, block: BlockId, next: &mut usize) {
        for &n in &graph.block(block).nodes {
            *next += 1;
            let p = *next;
            self.order.push(n);
            self.pos.insert(n, p);
            for (i, &v) in graph.node(n).inputs.iter().enumerate() {
                self.uses.entry(v).or_default().push((User::Node(n, i), p));
            }
            for &b in &graph.node(n).blocks {
                self.visit(graph, b, next);
            }
        }
        *next += 1;
        self.end.insert(block, *next);
        for &v in &graph.block(block).returns {
            self.uses
                .entry(v)
                .or_default()
                .push((User::Return(block), *next));
        }
    }

    fn def_block(&self, graph: &Graph, v: ValueId) -> BlockId {
        match graph.value(v).def {
            Def::Node(n, _) => graph.node(n).owner,
            Def::Param(b, _) => b,
        }
    }

    /// The handles of the tensor `v` is one of: `v` and what ops returning their argument
    /// (or in-place geometry ops) made from it, both ways.
    fn class_of(&self, graph: &Graph, v: ValueId) -> HashSet<ValueId> {
        let mut class = HashSet::from([v]);
        let mut pending = vec![v];
        while let Some(v) = pending.pop() {
            // backwards: v is an output returning an input
            if let Def::Node(n, o) = graph.value(v).def {
                if let Some(i) = returned_input(graph, n, o) {
                    let src = graph.node(n).inputs[i];
                    if class.insert(src) {
                        pending.push(src);
                    }
                }
            }
            // forwards: outputs returning v
            for &(u, _) in self.uses.get(&v).map(Vec::as_slice).unwrap_or(&[]) {
                let User::Node(n, i) = u else { continue };
                for (o, &out) in graph.node(n).outputs.iter().enumerate() {
                    if returned_input(graph, n, o) == Some(i) && class.insert(out) {
                        pending.push(out);
                    }
                }
            }
        }
        class
    }

    fn root_of(&self, graph: &Graph, class: &HashSet<ValueId>) -> Option<ValueId> {
        let mut roots = class.iter().copied().filter(|&v| match graph.value(v).def {
            Def::Node(n, o) => returned_input(graph, n, o).is_none(),
            Def::Param(..) => true,
        });
        let root = roots.next()?;
        roots.next().is_none().then_some(root)
    }

    fn analyze(&self, graph: &Graph, site: Site) -> Result<ClassPlan, Refusal> {
        let first = site.0;
        let refuse = |why: String| (first, why);
        let input = site_input(graph, site)
            .ok_or_else(|| refuse("the op has no input it returns".into()))?;
        let class = self.class_of(graph, input);
        let geometry: HashSet<Site> = class
            .iter()
            .filter_map(|&v| match graph.value(v).def {
                Def::Node(n, o) if sites(graph, n).contains(&(n, o)) => Some((n, o)),
                _ => None,
            })
            .collect();
        let root = self
            .root_of(graph, &class)
            .ok_or_else(|| refuse("the tensor has no single origin in this function".into()))?;
        let last_change = geometry
            .iter()
            .filter_map(|(n, _)| self.pos.get(n))
            .max()
            .copied()
            .unwrap_or(0);
        let first_change = geometry
            .iter()
            .filter_map(|(n, _)| self.pos.get(n))
            .min()
            .copied()
            .unwrap_or(0);
        // a shape change in a loop body repeats: the tensor must be the body's own
        let root_block = self.def_block(graph, root);
        for &(n, _) in &geometry {
            let mut b = graph.node(n).owner;
            while b != root_block {
                let Some(owner) = graph.block(b).owner else {
                    break;
                };
                if graph.node(owner).kind != "prim::If" {
                    return Err((
                        n,
                        "it changes the shape inside a loop body of a tensor defined outside it"
                            .into(),
                    ));
                }
                b = graph.node(owner).owner;
            }
        }
        // every handle read before the last shape change must not be kept anywhere
        for &v in &class {
            for &(u, p) in self.uses.get(&v).map(Vec::as_slice).unwrap_or(&[]) {
                if p > last_change {
                    continue;
                }
                let read = match u {
                    User::Node(n, i) => classify_read(graph, n, i),
                    User::Return(_) => Read::Escapes,
                };
                if read == Read::Escapes || read == Read::MaybeSame {
                    return Err(refuse(format!(
                        "the tensor is also held by {} before its shape changes, and PyTorch would change that handle too",
                        describe_user(graph, u)
                    )));
                }
            }
        }
        let param = self.check_origin(graph, first, root, first_change, 0)?;
        Ok(ClassPlan {
            class,
            geometry,
            root,
            param,
        })
    }

    /// Check that no other code can hold the tensor `root` came from; returns the function
    /// parameter it may be.
    fn check_origin(
        &self,
        graph: &Graph,
        first: NodeId,
        root: ValueId,
        first_change: usize,
        depth: usize,
    ) -> Result<Option<usize>, Refusal> {
        let refuse = |why: String| (first, why);
        let (n, o) = match graph.value(root).def {
            Def::Param(b, i) if b == graph.root => return Ok(Some(i)),
            Def::Param(..) => {
                return Err(refuse(
                    "the tensor is a loop-carried value (its previous handle is still in use)"
                        .into(),
                ))
            }
            Def::Node(n, o) => (n, o),
        };
        let node = graph.node(n);
        let Some(s) = schema(graph, n) else {
            return Err(refuse(format!(
                "the tensor comes from {}, which other code may hold",
                node.kind
            )));
        };
        let Some(ret) = s.returns.get(o) else {
            return Err(refuse(format!("{} has no output {o}", node.kind)));
        };
        if ret.alias.is_none() || NEW_HANDLE_VIEWS.contains(&node.kind.as_str()) {
            return Ok(None);
        }
        let sets: Vec<&str> = ret.alias_sets().collect();
        let source = s
            .arguments
            .iter()
            .position(|a| !a.is_wildcard() && a.alias_sets().any(|x| sets.contains(&x)));
        let (Some(i), false, true) = (source, ret.is_wildcard(), depth < 16) else {
            return Err(refuse(format!(
                "the tensor comes from {}, which other code may hold",
                node.kind
            )));
        };
        // `y = x.contiguous()` may return `x` itself: `x`'s other handles must be done
        let Some(&input) = node.inputs.get(i) else {
            return Err(refuse(format!("{} lacks input {i}", node.kind)));
        };
        let inner = self.class_of(graph, input);
        for &v in &inner {
            for &(u, p) in self.uses.get(&v).map(Vec::as_slice).unwrap_or(&[]) {
                let plain = match u {
                    User::Node(m, j) => m == n || classify_read(graph, m, j) == Read::Plain,
                    User::Return(_) => false,
                };
                if p >= first_change || !plain {
                    return Err(refuse(format!(
                        "the tensor may be the very tensor {} returned (its input), which is also held by {}",
                        node.kind,
                        describe_user(graph, u)
                    )));
                }
            }
        }
        let inner_root = self.root_of(graph, &inner).ok_or_else(|| {
            refuse(format!(
                "the tensor may be {}'s input, which has no single origin",
                node.kind
            ))
        })?;
        self.check_origin(graph, first, inner_root, first_change, depth + 1)
    }
}

/// Why the handles of a tensor cannot be threaded: the op concerned and the reason.
type Refusal = (NodeId, String);

/// Whether `inner` is `outer` or nested in it.
fn encloses(graph: &Graph, outer: BlockId, mut inner: BlockId) -> bool {
    loop {
        if inner == outer {
            return true;
        }
        match graph.block(inner).owner {
            Some(n) => inner = graph.node(n).owner,
            None => return false,
        }
    }
}

fn describe_user(graph: &Graph, u: User) -> String {
    match u {
        User::Node(n, _) => {
            let node = graph.node(n);
            match &node.source {
                Some(s) => format!("{} (line {})", node.kind, s.code_location().line),
                None => node.kind.clone(),
            }
        }
        User::Return(b) => match graph.block(b).owner {
            Some(n) => format!("the result of a {}", graph.node(n).kind),
            None => "the function's result".into(),
        },
    }
}

fn refusal(graph: &Graph, n: NodeId, why: String) -> CompileError {
    let node = graph.node(n);
    let message = format!(
        "{} changes a tensor's shape in place, which tsrun cannot do here: {why}",
        node.qualified_op()
    );
    match &node.source {
        Some(s) => CompileError::At {
            location: s.location(),
            message,
            at: Box::new(s.code_location()),
        },
        None => CompileError::Other(message),
    }
}

struct Rewrite<'a> {
    class: &'a HashSet<ValueId>,
    /// The sites changing the tensor, by node: the output that is its new handle.
    geometry: HashMap<NodeId, usize>,
    root: ValueId,
    /// The block defining the root: an `if` in it or in a block it encloses, whose branches
    /// change the shape, gains an output.
    root_block: BlockId,
}

impl Rewrite<'_> {
    /// Rewrite `block` given the newest handle `cur` (`None`: no change yet); returns the
    /// newest handle at its end.
    fn block(
        &mut self,
        graph: &mut Graph,
        block: BlockId,
        mut cur: Option<ValueId>,
    ) -> Option<ValueId> {
        for n in graph.block(block).nodes.clone() {
            if let Some(c) = cur {
                for i in graph.node_mut(n).inputs.iter_mut() {
                    if self.class.contains(i) {
                        *i = c;
                    }
                }
            }
            let blocks = graph.node(n).blocks.clone();
            if let Some(&o) = self.geometry.get(&n) {
                cur = graph.node(n).outputs.get(o).copied();
            } else if !blocks.is_empty() {
                let ends: Vec<Option<ValueId>> =
                    blocks.iter().map(|&b| self.block(graph, b, cur)).collect();
                let changed = ends.iter().any(|&e| e != cur);
                let owner = graph.node(n).owner;
                if changed
                    && graph.node(n).kind == "prim::If"
                    && encloses(graph, self.root_block, owner)
                {
                    let base = cur.unwrap_or(self.root);
                    let ty = graph.value(self.root).ty.clone();
                    let out = graph.add_node_output(n, ty);
                    for (&b, e) in blocks.iter().zip(ends) {
                        graph.block_mut(b).returns.push(e.unwrap_or(base));
                    }
                    cur = Some(out);
                }
            }
        }
        if let Some(c) = cur {
            for r in graph.block_mut(block).returns.iter_mut() {
                if self.class.contains(r) {
                    *r = c;
                }
            }
        }
        cur
    }
}
