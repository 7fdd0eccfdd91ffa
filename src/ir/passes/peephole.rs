//! `PeepholeOptimize` as PyTorch runs it on a callee body before inlining it (shape peepholes
//! off, and tsrun's tensor types carry no shapes anyway): `None`-typed outputs become `None`
//! constants, `if` outputs that just restate the condition become the condition, `is None`
//! tests decided by the types fold, and unwraps/casts that change nothing disappear (casts after
//! the list idioms, in `PeepholeOptimizeNonTensor`).

use super::{eliminate_dead_code, insert_constant_before};
use crate::ir::graph::{BlockId, Def, Graph, NodeId, ValueId};
use crate::ops::schema::{is_subtype, unify_types, SchemaRegistry};
use crate::values::types::Type;
use crate::values::IValue;
use std::collections::HashSet;

/// Run the pass; dead code is eliminated when anything changed. Returns whether it did.
pub fn peephole_optimize(graph: &mut Graph) -> bool {
    let mut changed = false;
    let root = graph.root;
    let writes = Writes::of(graph);
    optimize_block(graph, root, &writes, &mut changed);
    changed |= super::list_idioms::optimize_list_idioms(graph);
    non_tensor_block(graph, root, &mut changed);
    changed |= combine_concats(graph);
    if changed {
        eliminate_dead_code(graph);
    }
    changed
}

fn constant_of(g: &Graph, v: ValueId) -> Option<IValue> {
    match g.value(v).def {
        Def::Node(n, _) => g.constant_value(n),
        Def::Param(..) => None,
    }
}

/// `Value::mustBeNone`: typed `None`, or the `None` constant.
fn must_be_none(g: &Graph, v: ValueId) -> bool {
    g.value(v).ty == Type::NoneType || matches!(constant_of(g, v), Some(IValue::None))
}

/// `Value::mustNotBeNone`: a type that cannot hold `None`.
fn must_not_be_none(g: &Graph, v: ValueId) -> bool {
    match &g.value(v).ty {
        Type::NoneType | Type::Optional(_) | Type::Any => false,
        Type::Union(ts) => !ts.contains(&Type::NoneType),
        _ => true,
    }
}

fn optimize_block(g: &mut Graph, block: BlockId, writes: &Writes, changed: &mut bool) {
    for n in g.block(block).nodes.clone() {
        for b in g.node(n).blocks.clone() {
            optimize_block(g, b, writes, changed);
        }
        let kind = g.node(n).kind.clone();
        if kind != "prim::Constant" {
            // a value of type None is the None constant
            for out in g.node(n).outputs.clone() {
                if g.value(out).ty == Type::NoneType {
                    let c = insert_constant_before(g, n, IValue::None, Type::NoneType);
                    g.replace_all_uses(out, c);
                    *changed = true;
                }
            }
        }
        let node = g.node(n);
        let inputs = node.inputs.clone();
        let outputs = node.outputs.clone();
        match kind.as_str() {
            "aten::Float"
            | "aten::Int"
            | "aten::FloatImplicit"
            | "aten::IntImplicit"
            | "aten::ScalarImplicit" => {
                // a number converted to a tensor and back is the number
                if let Some(Def::Node(p, _)) = inputs.first().map(|&i| g.value(i).def) {
                    if g.node(p).kind == "prim::NumToTensor" {
                        if let (Some(&num), Some(&out)) =
                            (g.node(p).inputs.first(), outputs.first())
                        {
                            g.replace_all_uses(out, num);
                            *changed = true;
                        }
                    }
                }
            }
            "aten::dim" => {
                // convolutions return batched tensors of a known rank
                let rank = match inputs.first().map(|&i| g.value(i).def) {
                    Some(Def::Node(p, _)) => match g.node(p).kind.as_str() {
                        "aten::conv1d" => Some(3),
                        "aten::conv2d" => Some(4),
                        "aten::conv3d" => Some(5),
                        _ => None,
                    },
                    _ => None,
                };
                let written = inputs.first().is_some_and(|&x| writes.may_be_written(x));
                if let (Some(rank), Some(&out), false) = (rank, outputs.first(), written) {
                    let c = insert_constant_before(g, n, IValue::Int(rank), Type::Int);
                    g.replace_all_uses(out, c);
                    *changed = true;
                }
            }
            "aten::t" => {
                if let Some(Def::Node(p, _)) = inputs.first().map(|&i| g.value(i).def) {
                    if g.node(p).kind == "aten::t" {
                        if let (Some(&x), Some(&out)) = (g.node(p).inputs.first(), outputs.first())
                        {
                            g.replace_all_uses(out, x);
                            *changed = true;
                        }
                    }
                }
            }
            "prim::If" => {
                // `x and True`, `x or False`: an output true exactly when the condition is
                let blocks = g.node(n).blocks.clone();
                if let ([then_b, else_b], Some(&cond)) = (blocks.as_slice(), inputs.first()) {
                    for (i, &out) in outputs.iter().enumerate() {
                        if g.value(out).ty != Type::Bool {
                            continue;
                        }
                        let t = g
                            .block(*then_b)
                            .returns
                            .get(i)
                            .and_then(|&v| constant_of(g, v));
                        let f = g
                            .block(*else_b)
                            .returns
                            .get(i)
                            .and_then(|&v| constant_of(g, v));
                        if matches!(t, Some(IValue::Bool(true)))
                            && matches!(f, Some(IValue::Bool(false)))
                        {
                            g.replace_all_uses(out, cond);
                            *changed = true;
                        }
                    }
                    // an optional output both of whose branches give non-optional values
                    // takes their unified type
                    for (i, &out) in outputs.iter().enumerate() {
                        let (Some(&t), Some(&f)) = (
                            g.block(*then_b).returns.get(i),
                            g.block(*else_b).returns.get(i),
                        ) else {
                            continue;
                        };
                        let (tt, ft) = (g.value(t).ty.clone(), g.value(f).ty.clone());
                        if matches!(tt, Type::Optional(_))
                            || matches!(ft, Type::Optional(_))
                            || !matches!(g.value(out).ty, Type::Optional(_))
                        {
                            continue;
                        }
                        // counted as a change even when the type stays (as PyTorch does)
                        if let Some(unified) = unify_types(&tt, &ft) {
                            g.value_mut(out).ty = unified;
                            *changed = true;
                        }
                    }
                }
            }
            "aten::__is__" | "aten::__isnot__" if inputs.len() == 2 => {
                for k in [0, 1] {
                    if must_be_none(g, inputs[k]) && must_not_be_none(g, inputs[1 - k]) {
                        let value = IValue::Bool(kind == "aten::__isnot__");
                        let c = insert_constant_before(g, n, value, Type::Bool);
                        if let Some(&out) = outputs.first() {
                            g.replace_all_uses(out, c);
                        }
                        *changed = true;
                    }
                }
            }
            "prim::unchecked_unwrap_optional" | "aten::_unwrap_optional" => {
                if let (Some(&x), Some(&out)) = (inputs.first(), outputs.first()) {
                    if must_not_be_none(g, x) {
                        g.replace_all_uses(out, x);
                        *changed = true;
                    }
                }
            }
            _ => {}
        }
    }
}

fn int_constant(g: &Graph, v: ValueId) -> Option<i64> {
    constant_of(g, v).and_then(|c| match c {
        IValue::Int(i) => Some(i),
        _ => None,
    })
}

/// `checkArithNode`: for an integer binary operation, its constant operand (an `add`/`mul`
/// with the constant first has its operands swapped so that it comes second).
fn check_arith_node(g: &mut Graph, n: NodeId) -> Option<i64> {
    let node = g.node(n);
    if node.inputs.len() != 2 || node.inputs.iter().any(|&v| g.value(v).ty != Type::Int) {
        return None;
    }
    if matches!(node.kind.as_str(), "aten::mul" | "aten::add") {
        if let Some(c) = int_constant(g, node.inputs[0]) {
            g.node_mut(n).inputs.swap(0, 1);
            return Some(c);
        }
    }
    int_constant(g, g.node(n).inputs[1])
}

/// `PeepholeOptimizeNonTensor`'s arithmetic and comparisons: `x * 1`, `x // 1`, `x / 1`,
/// `x + 0`, `x - 0` are `x`; `(x ± a) ± b` is `x ± c`; `int(x)` / `ceil(x)` of an int is `x`;
/// `x == x` / `x != x` of simple immutable values are constants.
fn non_tensor_block(g: &mut Graph, block: BlockId, changed: &mut bool) {
    for n in g.block(block).nodes.clone() {
        for b in g.node(n).blocks.clone() {
            non_tensor_block(g, b, changed);
        }
        let kind = g.node(n).kind.clone();
        let Some(&out) = g.node(n).outputs.first() else {
            continue;
        };
        match kind.as_str() {
            "prim::unchecked_cast" => {
                // after the list idioms, as PyTorch's `PeepholeOptimizeNonTensor`: a list
                // reached through a cast is folded by the next caller's peephole only
                if let [x] = g.node(n).inputs[..] {
                    if is_subtype(&g.value(x).ty, &g.value(out).ty) {
                        g.replace_all_uses(out, x);
                        *changed = true;
                    }
                }
            }
            "aten::Int" | "aten::ceil" => {
                if let [x] = g.node(n).inputs[..] {
                    if g.value(x).ty == Type::Int {
                        g.replace_all_uses(out, x);
                        *changed = true;
                    }
                }
            }
            "aten::eq" | "aten::ne" => {
                let inputs = g.node(n).inputs.clone();
                let [a, b] = inputs[..] else {
                    continue;
                };
                let simple =
                    |t: &Type| matches!(t, Type::Bool | Type::Int | Type::Float | Type::NoneType);
                let non_throwing = match &g.value(a).ty {
                    Type::List(e) => simple(e),
                    Type::Dict(k, v) => simple(k) && simple(v),
                    t => simple(t),
                };
                if a == b && non_throwing {
                    let value = IValue::Bool(kind == "aten::eq");
                    let c = insert_constant_before(g, n, value, Type::Bool);
                    g.replace_all_uses(out, c);
                    *changed = true;
                }
            }
            "aten::mul" | "aten::floordiv" | "aten::div" => {
                // (checking may swap the operands, which is no change by itself)
                let constant = check_arith_node(g, n);
                if constant != Some(1) {
                    continue;
                }
                let x = g.node(n).inputs[0];
                g.replace_all_uses(out, x);
                *changed = true;
            }
            "aten::add" | "aten::sub" => {
                let Some(constant) = check_arith_node(g, n) else {
                    continue;
                };
                let x = g.node(n).inputs[0];
                if constant == 0 {
                    g.replace_all_uses(out, x);
                    *changed = true;
                    continue;
                }
                let Def::Node(dep, _) = g.value(x).def else {
                    continue;
                };
                let dep_kind = g.node(dep).kind.clone();
                if dep_kind != "aten::add" && dep_kind != "aten::sub" {
                    continue;
                }
                let Some(delta) = check_arith_node(g, dep) else {
                    continue;
                };
                let merged = if dep_kind == kind {
                    constant.wrapping_add(delta)
                } else {
                    constant.wrapping_sub(delta)
                };
                let base = g.node(dep).inputs[0];
                if merged == 0 {
                    g.replace_all_uses(out, base);
                } else {
                    let c = insert_constant_before(g, n, IValue::Int(merged), Type::Int);
                    g.node_mut(n).inputs = vec![base, c];
                }
                *changed = true;
            }
            _ => {}
        }
    }
}

/// Whether an operator writes its first (`self`) argument.
fn writes_self(g: &Graph, n: NodeId) -> bool {
    let node = g.node(n);
    !node.kind.starts_with("prim::")
        && SchemaRegistry::global()
            .find(&node.qualified_op())
            .is_some_and(|s| s.is_mutable())
}

/// Alias analysis' `hasWriters`, approximated once per run: a value is written when an
/// in-place operator takes it as `self`, or when it was stored in a container (after which it
/// may alias anything) and some in-place operator writes a tensor that is not freshly computed
/// (an input, an attribute, an element read from a container).
struct Writes {
    written: HashSet<ValueId>,
    escaped: HashSet<ValueId>,
    wildcard_write: bool,
}

impl Writes {
    fn of(g: &Graph) -> Writes {
        let mut w = Writes {
            written: HashSet::new(),
            escaped: HashSet::new(),
            wildcard_write: false,
        };
        g.walk(g.root, &mut |n| {
            let node = g.node(n);
            if writes_self(g, n) {
                if let Some(&x) = node.inputs.first() {
                    w.written.insert(x);
                    let fresh = match g.value(x).def {
                        Def::Node(p, _) => !matches!(
                            g.node(p).kind.as_str(),
                            "prim::GetAttr"
                                | "aten::__getitem__"
                                | "prim::ListUnpack"
                                | "prim::TupleUnpack"
                                | "prim::TupleIndex"
                                | "prim::unchecked_cast"
                        ),
                        Def::Param(..) => false,
                    };
                    w.wildcard_write |= !fresh;
                }
            }
            if matches!(
                node.kind.as_str(),
                "aten::_set_item" | "aten::append" | "aten::insert"
            ) {
                w.escaped.extend(node.inputs.iter().skip(1).copied());
            }
        });
        w
    }

    fn may_be_written(&self, v: ValueId) -> bool {
        self.written.contains(&v) || (self.escaped.contains(&v) && self.wildcard_write)
    }
}

/// `CombineConcats`: `cat([a, cat([b, c], d), e], d)` is `cat([a, b, c, e], d)` when the inner
/// result is used only there and the dimension is the same constant.
fn combine_concats(g: &mut Graph) -> bool {
    let mut cats = Vec::new();
    g.walk(g.root, &mut |n| {
        if g.node(n).kind == "aten::cat" {
            cats.push(n);
        }
    });
    if cats.is_empty() {
        return false;
    }
    // every value's users, computed once (a block return counts as a user that is no node)
    let mut users: std::collections::HashMap<ValueId, Vec<NodeId>> = Default::default();
    g.walk(g.root, &mut |n| {
        for &i in &g.node(n).inputs {
            users.entry(i).or_default().push(n);
        }
    });
    for b in &g.blocks {
        for &r in &b.returns {
            users.entry(r).or_default().push(NodeId(u32::MAX));
        }
    }
    let uses =
        |_: &Graph, v: ValueId| -> Vec<NodeId> { users.get(&v).cloned().unwrap_or_default() };
    let list_of = |g: &Graph, cat: NodeId| -> Option<NodeId> {
        let list = *g.node(cat).inputs.first()?;
        match g.value(list).def {
            Def::Node(p, _) if g.node(p).kind == "prim::ListConstruct" => Some(p),
            _ => None,
        }
    };
    let dim_of =
        |g: &Graph, cat: NodeId| g.node(cat).inputs.get(1).and_then(|&d| int_constant(g, d));
    // (first, second, index of first's result in second's list)
    let mut pairs: Vec<(NodeId, NodeId, usize)> = Vec::new();
    for &cat in &cats {
        let (Some(dim), Some(list)) = (dim_of(g, cat), list_of(g, cat)) else {
            continue;
        };
        let list_out = g.node(list).outputs[0];
        if uses(g, list_out).len() != 1 {
            continue;
        }
        let out = g.node(cat).outputs[0];
        let [next_list] = uses(g, out)[..] else {
            continue;
        };
        if next_list.0 == u32::MAX || g.node(next_list).kind != "prim::ListConstruct" {
            continue;
        }
        let [next_cat] = uses(g, g.node(next_list).outputs[0])[..] else {
            continue;
        };
        if next_cat.0 == u32::MAX
            || g.node(next_cat).kind != "aten::cat"
            || dim_of(g, next_cat) != Some(dim)
        {
            continue;
        }
        if let Some(idx) = g.node(next_list).inputs.iter().position(|&v| v == out) {
            pairs.push((cat, next_cat, idx));
        }
    }
    if pairs.is_empty() {
        return false;
    }
    // the combined inputs of each outermost cat, built inside out
    let mut combined: Vec<(NodeId, std::collections::VecDeque<ValueId>)> = Vec::new();
    for (first, second, idx) in pairs {
        let Some(second_list) = list_of(g, second) else {
            continue;
        };
        let to_add = g.node(second_list).inputs.clone();
        let mut current = match combined.iter().position(|(n, _)| *n == first) {
            Some(i) => combined.remove(i).1,
            None => match list_of(g, first) {
                Some(l) => g.node(l).inputs.iter().copied().collect(),
                None => continue,
            },
        };
        for &v in to_add[..idx].iter().rev() {
            current.push_front(v);
        }
        current.extend(to_add[idx + 1..].iter().copied());
        // PyTorch files the list with `emplace`, which keeps an existing entry: of two inner
        // cats feeding one outer cat, only the first is combined in one run
        if !combined.iter().any(|(n, _)| *n == second) {
            combined.push((second, current));
        }
    }
    for (cat, inputs) in combined {
        let Some(old) = list_of(g, cat) else {
            continue;
        };
        let ty = g.value(g.node(old).outputs[0]).ty.clone();
        let list = g.create_node(
            "prim::ListConstruct",
            inputs.into_iter().collect(),
            vec![ty],
        );
        g.insert_before(list, cat);
        let (old_out, new_out) = (g.node(old).outputs[0], g.node(list).outputs[0]);
        g.replace_all_uses(old_out, new_out);
    }
    true
}
