//! Weights packed when a module is prepared, so its first call runs as fast as later ones:
//! each module class's methods (inlined) are searched for convolutions (with a constant group
//! count), `linear`s and recurrent layers (their `W_ih` and `W_hh`) whose weight is an attribute of the
//! module itself, and those weights are packed into the cache their float32 kernels read
//! (keyed on storage and write version, so a weight changed later is simply packed again on
//! its next use).

use super::Module;
use crate::ir::graph::{BlockId, Def, Graph, ValueId};
use crate::ir::unit::CompilationUnit;
use crate::values::IValue;
use rayon::prelude::*;
use std::collections::HashSet;

/// Position of `groups` among each convolution overload's arguments, and of `transposed`
/// where the overload has one.
fn conv_layout(kind: &str) -> Option<(usize, Option<usize>)> {
    match kind {
        "aten::conv1d" | "aten::conv2d" | "aten::conv3d" | "aten::_convolution_mode" => {
            Some((6, None))
        }
        "aten::_convolution" | "aten::convolution" => Some((8, Some(6))),
        _ => None,
    }
}

/// Recurrent layers whose input projection (`W_ih^T`) and step (`W_hh^T`) multiply by a weight
/// packed as `linear` packs its weight.
const RECURRENT: &[&str] = &[
    "aten::lstm",
    "aten::gru",
    "aten::rnn_tanh",
    "aten::rnn_relu",
];

/// Stands for every `weight_ih_l<k>[_reverse]` and `weight_hh_l<k>[_reverse]` attribute of a
/// recurrent module.
const RECURRENT_WEIGHTS: &str = "weight_?h_l*";

/// The constant a value is, if it is one.
fn constant_of(g: &Graph, v: ValueId) -> Option<IValue> {
    match g.value(v).def {
        Def::Node(n, 0) if g.node(n).kind == "prim::Constant" => g.constant_value(n),
        _ => None,
    }
}

/// How a weight is used, which decides its packed layout.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum WeightUse {
    Conv { groups: usize },
    Linear,
}

/// `(attribute, use)` of every convolution and `linear` in `g` whose weight is
/// `self.<attribute>`, and [`RECURRENT_WEIGHTS`] where `g` runs a recurrent layer.
fn weight_attributes(g: &Graph) -> Vec<(String, WeightUse)> {
    let Some(&this) = g.inputs().first() else {
        return Vec::new();
    };
    let mut found = Vec::new();
    let mut blocks: Vec<BlockId> = vec![g.root];
    while let Some(b) = blocks.pop() {
        for &n in &g.block(b).nodes {
            let node = g.node(n);
            blocks.extend(node.blocks.iter().copied());
            if RECURRENT.contains(&node.kind.as_str()) {
                // the recurrent weights reach the kernel in a list (`_flat_weights`): take
                // them by their parameter names, as nn.LSTM / GRU / RNN register them
                found.push((RECURRENT_WEIGHTS.to_string(), WeightUse::Linear));
                continue;
            }
            let how = if node.kind == "aten::linear" {
                WeightUse::Linear
            } else {
                let Some((groups_at, transposed_at)) = conv_layout(&node.kind) else {
                    continue;
                };
                if let Some(t) = transposed_at {
                    match node.inputs.get(t).and_then(|&v| constant_of(g, v)) {
                        Some(IValue::Bool(false)) => {}
                        _ => continue,
                    }
                }
                match node.inputs.get(groups_at).and_then(|&v| constant_of(g, v)) {
                    Some(IValue::Int(k)) if k > 0 => WeightUse::Conv { groups: k as usize },
                    _ => continue,
                }
            };
            let Some(&w) = node.inputs.get(1) else {
                continue;
            };
            if let Def::Node(get, 0) = g.value(w).def {
                let get = g.node(get);
                if get.kind == "prim::GetAttr" && get.inputs.first() == Some(&this) {
                    if let Some(crate::ir::Attr::Str(name)) = get.attr("name") {
                        found.push((name.clone(), how));
                    }
                }
            }
        }
    }
    found
}

/// Pack the convolution and `linear` weights of `module` and all its submodules (in
/// parallel). Failures are left for the call that reaches the operator, which reports them.
pub(super) fn prepack_weights(
    module: &Module,
    unit: &CompilationUnit,
    interpreter: &crate::runtime::interpreter::Interpreter,
) {
    // convolutions whose batch norm is folded in at run time get their folded packing now,
    // and no plain one
    let objects: Vec<_> = module
        .modules()
        .iter()
        .map(|m| m.object().clone())
        .collect();
    let folded = interpreter.prepack_module_chains(&objects);
    let mut per_class = std::collections::HashMap::new();
    let mut weights = Vec::new();
    let mut seen = HashSet::new();
    for sub in module.modules() {
        let class = sub.object().class_name().clone();
        let attrs = per_class.entry(class.clone()).or_insert_with(|| {
            // every method: a parent may call an overload such as nn.LSTM's `forward__0`
            let methods = unit
                .class(&class)
                .map(|c| c.method_names())
                .unwrap_or_default();
            let mut found: Vec<_> = methods
                .iter()
                .filter_map(|name| unit.method(&class, name).ok())
                .filter_map(|f| unit.inlined_graph(&f).ok())
                .flat_map(|g| weight_attributes(&g))
                .collect();
            found.sort_by(|a, b| a.0.cmp(&b.0));
            found.dedup();
            found
        });
        for (name, how) in attrs.iter() {
            let tensors = if name == RECURRENT_WEIGHTS {
                let fields = sub.object().fields();
                fields
                    .iter()
                    .filter(|(k, _)| k.starts_with("weight_hh_l") || k.starts_with("weight_ih_l"))
                    .map(|(_, v)| v.clone())
                    .collect()
            } else {
                sub.object().get(name).into_iter().collect::<Vec<_>>()
            };
            for w in tensors {
                let IValue::Tensor(w) = w else { continue };
                // a weight shared by several modules is packed once per use
                if !folded.contains(&w.storage().id())
                    && seen.insert((w.storage().id(), w.storage_offset(), *how))
                {
                    weights.push((w, *how));
                }
            }
        }
    }
    let mut released: HashSet<usize> = weights
        .par_iter()
        .filter_map(|(w, how)| match how {
            WeightUse::Conv { groups } => {
                // the float32 kernel reads only the packed copy: the archive's pages of this
                // weight need not stay resident (RSS counts them)
                let packed = crate::ops::conv::prepack_weight(w, *groups, None).unwrap_or(false);
                (packed && w.storage().release_mapped_pages()).then(|| w.storage().id())
            }
            WeightUse::Linear => {
                let _ = crate::ops::linalg::prepack_linear_weight(w);
                None
            }
        })
        .collect();
    released.extend(folded);
    // Every other parameter and buffer the kernels read in place gets its archive pages mapped
    // now rather than by page faults on the first call; a very large one (an embedding table,
    // of which a call reads a few rows) is left to fault in as it is read.
    const POPULATE_AT_MOST: usize = 16 << 20;
    let mut populated = HashSet::new();
    for t in module.parameters().into_iter().chain(module.buffers()) {
        let storage = t.storage();
        if storage.nbytes() <= POPULATE_AT_MOST
            && !released.contains(&storage.id())
            && populated.insert(storage.id())
        {
            storage.populate_mapped_pages();
        }
    }
    warm_small_parameters(module, &released);
}

/// Parameters and buffers, in total at most this many bytes (an L2 cache), are read at the end
/// of `prepare`: see [`warm_small_parameters`].
const WARM_AT_MOST: usize = 1 << 20;

/// Read every float32 parameter and buffer of a small model once through the vector code its
/// kernels run (a dot product), so that the first call finds them in the cache and the vector
/// units busy, as every later call does. On the 64-128-128-10 MLP the first call's excess over
/// later calls (no page fault or system call in it; faulting in the whole program text before
/// it changed nothing) sat in the first matrix-vector product; with this pass the first call
/// went from 55-207 us to 33-47 us (6 alternated runs, 9-12 us median calls). Weights whose
/// archive pages were released are not touched.
fn warm_small_parameters(module: &Module, released: &HashSet<usize>) {
    let mut seen = HashSet::new();
    let tensors: Vec<_> = module
        .parameters()
        .into_iter()
        .chain(module.buffers())
        .filter(|t| {
            t.dtype() == crate::tensor::DType::Float32
                && !released.contains(&t.storage().id())
                && seen.insert((t.storage().id(), t.storage_offset(), t.numel()))
        })
        .collect();
    if tensors.iter().map(|t| t.numel() * 4).sum::<usize>() > WARM_AT_MOST {
        return;
    }
    for t in tensors {
        let Ok(guard) = t.read::<f32>() else { continue };
        if let Some(xs) = guard.as_slice() {
            let mut out = [0.0f32];
            crate::ops::kernels::vmath::matvec(xs, 1, xs.len(), xs, &mut out, false);
            std::hint::black_box(out);
        }
    }
}
