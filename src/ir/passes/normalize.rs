//! PyTorch's `NormalizeOps`, run on every compiled graph between SSA conversion and cleanup:
//! operator aliases become their canonical operator (`swapaxes` -> `transpose`, `clip` ->
//! `clamp`, ...), `rsub(Tensor, Tensor)` becomes `sub` with swapped operands, and `is` /
//! `is not` between bools become `eq` / `ne`. Graphs then print as PyTorch's do, and the
//! interpreter sees one spelling per operation.

use crate::ir::graph::{BlockId, Graph, NodeId};
use crate::ops::schema::SchemaRegistry;
use crate::values::types::Type;

/// `getOperatorAliasMap`: alias -> canonical operator.
const ALIASES: &[(&str, &str)] = &[
    ("absolute", "abs"),
    ("absolute_", "abs_"),
    ("clip", "clamp"),
    ("clip_", "clamp_"),
    ("det", "linalg_det"),
    ("matrix_power", "linalg_matrix_power"),
    ("matrix_exp", "linalg_matrix_exp"),
    ("ger", "outer"),
    ("arccos", "acos"),
    ("arccos_", "acos_"),
    ("arcsin", "asin"),
    ("arcsin_", "asin_"),
    ("arctan", "atan"),
    ("arctan_", "atan_"),
    ("arctan2", "atan2"),
    ("arctan2_", "atan2_"),
    ("arccosh", "acosh"),
    ("arccosh_", "acosh_"),
    ("arcsinh", "asinh"),
    ("arcsinh_", "asinh_"),
    ("arctanh", "atanh"),
    ("arctanh_", "atanh_"),
    ("fix", "trunc"),
    ("fix_", "trunc_"),
    ("negative", "neg"),
    ("negative_", "neg_"),
    ("subtract", "sub"),
    ("subtract_", "sub_"),
    ("greater_equal", "ge"),
    ("greater_equal_", "ge_"),
    ("greater", "gt"),
    ("greater_", "gt_"),
    ("less_equal", "le"),
    ("less_equal_", "le_"),
    ("less", "lt"),
    ("less_", "lt_"),
    ("not_equal", "ne"),
    ("not_equal_", "ne_"),
    ("divide", "div"),
    ("divide_", "div_"),
    ("multiply", "mul"),
    ("multiply_", "mul_"),
    ("linalg_matmul", "matmul"),
    ("inverse", "linalg_inv"),
    ("true_divide", "div"),
    ("true_divide_", "div_"),
    ("concat", "cat"),
    ("concatenate", "cat"),
    ("row_stack", "vstack"),
    ("swapdims", "transpose"),
    ("swapdims_", "transpose_"),
    ("swapaxes", "transpose"),
    ("swapaxes_", "transpose_"),
    ("moveaxis", "movedim"),
    ("special_erf", "erf"),
    ("special_erfc", "erfc"),
    ("special_erfinv", "erfinv"),
    ("special_expit", "sigmoid"),
    ("special_exp2", "exp2"),
    ("special_expm1", "expm1"),
    ("special_logit", "logit"),
    ("special_logsumexp", "logsumexp"),
    ("special_round", "round"),
    ("special_log1p", "log1p"),
    ("special_sinc", "sinc"),
    ("special_digamma", "digamma"),
    ("special_psi", "digamma"),
    ("special_i0", "i0"),
    ("special_xlogy", "xlogy"),
    ("special_log_softmax", "log_softmax"),
    ("orgqr", "linalg_householder_product"),
    ("adjoint", "mH"),
    ("special_multigammaln", "mvlgamma"),
    ("special_polygamma", "polygamma"),
    ("special_softmax", "softmax"),
    ("special_gammainc", "igamma"),
    ("special_gammaincc", "igammac"),
    ("special_gammaln", "lgamma"),
];

/// The canonical operator `aten::<alias>` stands for, if it is an alias.
pub fn canonical_alias(kind: &str) -> Option<&'static str> {
    let name = kind.strip_prefix("aten::")?;
    ALIASES.iter().find(|(a, _)| *a == name).map(|(_, c)| *c)
}

/// `NormalizeOps` over the whole graph, in PyTorch's order (a node's blocks before the node),
/// which fixes the unique numbers the replacement outputs take.
pub fn normalize_ops(graph: &mut Graph) {
    normalize_block(graph, graph.root);
}

fn normalize_block(graph: &mut Graph, block: BlockId) {
    for node in graph.block(block).nodes.clone() {
        for b in graph.node(node).blocks.clone() {
            normalize_block(graph, b);
        }
        let _ = normalize_rsub(graph, node)
            || normalize_alias(graph, node)
            || normalize_is_bool(graph, node);
    }
}

/// `rsub.Tensor(self, other, alpha)` -> `sub.Tensor(other, self, alpha)`.
fn normalize_rsub(graph: &mut Graph, node: NodeId) -> bool {
    let n = graph.node(node);
    if n.kind != "aten::rsub" || n.overload.as_deref() != Some("Tensor") || n.inputs.len() < 2 {
        return false;
    }
    graph.replace_with_new_symbol(node, "aten::sub", Some("Tensor".into()));
    graph.node_mut(node).inputs.swap(0, 1);
    true
}

fn normalize_alias(graph: &mut Graph, node: NodeId) -> bool {
    let n = graph.node(node);
    let Some(canonical) = canonical_alias(&n.kind) else {
        return false;
    };
    let target = format!("aten::{canonical}");
    // The node keeps its inputs, so it takes the canonical overload with the same argument
    // and return types; without one (an alias our schemas do not list) it is left alone.
    let Some(overload) = matching_overload(&n.qualified_op(), &target) else {
        return false;
    };
    graph.replace_with_new_symbol(node, &target, Some(overload));
    true
}

/// `__is__` / `__isnot__` on two bools -> `eq` / `ne`.
fn normalize_is_bool(graph: &mut Graph, node: NodeId) -> bool {
    let n = graph.node(node);
    let kind = match n.kind.as_str() {
        "aten::__is__" => "aten::eq",
        "aten::__isnot__" => "aten::ne",
        _ => return false,
    };
    if n.inputs.len() != 2 || n.inputs.iter().any(|&v| graph.value(v).ty != Type::Bool) {
        return false;
    }
    graph.replace_with_new_symbol(node, kind, Some("bool".into()));
    true
}

/// The overload of `target` whose arguments and returns have the types of `alias`'s schema.
fn matching_overload(alias: &str, target: &str) -> Option<String> {
    let reg = SchemaRegistry::global();
    let from = reg.find(alias)?;
    let types = |args: &[crate::ops::schema::Argument]| {
        args.iter()
            .map(|a| (a.ty.clone(), a.kwarg_only))
            .collect::<Vec<_>>()
    };
    let same_types = |s: &&std::sync::Arc<crate::ops::schema::FunctionSchema>| {
        types(&s.arguments) == types(&from.arguments) && types(&s.returns) == types(&from.returns)
    };
    let candidates = reg.overloads(target);
    // the overload of the same name when it fits (`clip.Tensor` -> `clamp.Tensor`)
    candidates
        .iter()
        .filter(same_types)
        .find(|s| s.overload == from.overload)
        .or_else(|| candidates.iter().find(same_types))
        .map(|s| s.overload.clone())
}
