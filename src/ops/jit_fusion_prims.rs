//! `prim::` nodes that PyTorch's graph passes (the fuser's chunk and concat rewrites, the
//! batch-matmul pass, the MKLDNN conversion of frozen modules) insert with their parameters in
//! node attributes (`chunks=`, `dim=`, `side=`, `min_val=`), so they have no kernel taking
//! arguments: the plan builder reads the attributes into a [`NodePrim`] and the interpreter runs
//! it on the node's inputs. Each computes what its registration in PyTorch's
//! torch/csrc/jit/runtime/register_prim_ops_fulljit.cpp, passes/batch_mm.cpp or
//! passes/frozen_ops_to_mkldnn.cpp computes. MKLDNN tensors are dense tensors in tsrun. The
//! profiling executor's guards (`TypeCheck`, `RequiresGradCheck`) check the inputs as PyTorch's
//! would for tensors on the CPU that do not require grad, the only kind tsrun has.

use super::kernels::{check_size, invalid_argument, size_mismatch, value_err};
use super::prims::via_aten;
use super::{Args, OpContext};
use crate::tensor::{DType, Tensor};
use crate::values::{IValue, List, Type};

type R = crate::Result<IValue>;

/// The node kinds run as a [`NodePrim`].
pub const NODE_PRIM_KINDS: &[&str] = &[
    "prim::ConstantChunk",
    "prim::ChunkSizes",
    "prim::FusedConcat",
    "prim::MMBatchSide",
    "prim::MKLDNNClamp",
    "prim::MKLDNNClamp_",
    "prim::MKLDNNHardTanh",
    "prim::MKLDNNHardTanh_",
    "prim::TypeCheck",
    "prim::RequiresGradCheck",
];

/// A node of one of [`NODE_PRIM_KINDS`] with its attributes read.
#[derive(Clone, Debug)]
pub enum NodePrim {
    /// `prim::ConstantChunk[chunks=, dim=](x)`: `x.chunk(chunks, dim)`, one output a chunk;
    /// fewer chunks than outputs fail (as PyTorch's interpreter fails them when it runs IR
    /// text, used outputs or not).
    ConstantChunk { chunks: i64, dim: i64 },
    /// `prim::ChunkSizes[chunks=, dim=](sizes)`: the sizes of the regular chunks and of the
    /// last one of `chunk(chunks, dim)` on a tensor of those sizes.
    ChunkSizes { chunks: i64, dim: i64 },
    /// `prim::FusedConcat[dim=](x...)`: `cat([x...], dim)`.
    FusedConcat { dim: i64 },
    /// `prim::MMBatchSide[side=](s, o...)`: `mm(s, o)` for every `o` (side 0, the shared
    /// matrix on the left) or `mm(o, s)` (side 1).
    MMBatchSide { shared_on_left: bool },
    /// `prim::TypeCheck[types=[...]](x...)`: the inputs, then whether every input tensor
    /// matches its type (PyTorch's `TensorType::matchTensor`).
    TypeCheck { types: Vec<TensorSpec> },
    /// `prim::RequiresGradCheck[types=[...]](x...)`: the inputs, then whether every input's
    /// `requires_grad` is its type's (tsrun's tensors never require grad).
    RequiresGradCheck { requires_grad: Vec<bool> },
    /// `prim::MKLDNNClamp[min_val=, max_val=](x)` and `prim::MKLDNNHardTanh` (both
    /// `clamp(x, min_val, max_val)`), in place for the `_` kinds.
    Clamp {
        kind: &'static str,
        min: f64,
        max: f64,
        inplace: bool,
    },
}

/// A node attribute reader the plan builder provides.
pub trait NodeAttrs {
    fn int(&self, name: &str) -> Option<i64>;
    fn float(&self, name: &str) -> Option<f64>;
    /// A list attribute of type spellings (`types=[Float(2, 3, strides=[3, 1], ...)]`).
    fn type_spellings(&self, name: &str) -> Option<Vec<String>>;
}

/// A tensor type of a `types=` attribute as PyTorch prints one: `Tensor` (nothing known) or
/// `Float(2, *, strides=[3, 1], requires_grad=0, device=cpu)` (dtype, sizes with `*` for
/// unknown ones, strides, requires_grad, device).
#[derive(Clone, Debug)]
pub struct TensorSpec {
    /// Plain `Tensor`: any tensor matches.
    any: bool,
    dtype: Option<DType>,
    sizes: Vec<Option<i64>>,
    strides: Option<Vec<Option<i64>>>,
    requires_grad: Option<bool>,
    device: Option<String>,
}

impl TensorSpec {
    fn parse(text: &str) -> crate::Result<TensorSpec> {
        let bad = || {
            value_err(format!(
                "unsupported tensor type `{text}` in a types attribute"
            ))
        };
        let text = text.trim();
        let (head, body) = match text.split_once('(') {
            Some((h, rest)) => (h, Some(rest.strip_suffix(')').ok_or_else(bad)?)),
            None => (text, None),
        };
        let dtype = match head {
            "Tensor" => None,
            name => Some(
                DType::ALL
                    .iter()
                    .copied()
                    .find(|d| d.c10_name() == name)
                    .ok_or_else(bad)?,
            ),
        };
        let Some(body) = body else {
            return if dtype.is_none() {
                Ok(TensorSpec {
                    any: true,
                    dtype,
                    sizes: Vec::new(),
                    strides: None,
                    requires_grad: None,
                    device: None,
                })
            } else {
                Err(bad())
            };
        };
        let dim = |s: &str| -> crate::Result<Option<i64>> {
            match s.trim() {
                "*" => Ok(None),
                n => n.parse().map(Some).map_err(|_| bad()),
            }
        };
        let mut spec = TensorSpec {
            any: false,
            dtype,
            sizes: Vec::new(),
            strides: None,
            requires_grad: None,
            device: None,
        };
        for item in split_top_level(body) {
            match item.split_once('=') {
                None => spec.sizes.push(dim(item)?),
                Some(("strides", list)) => {
                    let inner = list
                        .trim()
                        .strip_prefix('[')
                        .and_then(|l| l.strip_suffix(']'))
                        .ok_or_else(bad)?;
                    let strides = if inner.trim().is_empty() {
                        Vec::new()
                    } else {
                        inner.split(',').map(dim).collect::<crate::Result<_>>()?
                    };
                    spec.strides = Some(strides);
                }
                Some(("requires_grad", v)) => {
                    spec.requires_grad = Some(match v.trim() {
                        "0" => false,
                        "1" => true,
                        _ => return Err(bad()),
                    })
                }
                Some(("device", v)) => spec.device = Some(v.trim().to_string()),
                Some(_) => return Err(bad()),
            }
        }
        Ok(spec)
    }

    /// `TensorType::matchTensor` for a tsrun tensor (on the CPU, never requiring grad).
    fn matches(&self, t: &Tensor) -> bool {
        if self.any {
            return true;
        }
        let known = |v: &[Option<i64>], want: &[i64]| {
            v.len() == want.len() && v.iter().zip(want).all(|(a, b)| *a == Some(*b))
        };
        let sizes: Vec<i64> = t.shape().iter().map(|&s| s as i64).collect();
        let strides: Vec<i64> = t.strides().iter().map(|&s| s as i64).collect();
        // the stride properties must be complete and equal: a type of known rank without
        // strides (or with unknown sizes) matches no tensor, as in PyTorch
        let strides_match = match &self.strides {
            Some(s) => known(s, &strides),
            None => sizes.is_empty(),
        };
        self.dtype.is_none_or(|d| d == t.dtype())
            && self.device.as_deref().is_none_or(|d| d == "cpu")
            && self.requires_grad != Some(true)
            && known(&self.sizes, &sizes)
            && strides_match
    }
}

/// The comma-separated items of `body` outside brackets.
fn split_top_level(body: &str) -> Vec<&str> {
    let (mut items, mut depth, mut start) = (Vec::new(), 0usize, 0usize);
    for (i, c) in body.char_indices() {
        match c {
            '[' | '(' => depth += 1,
            ']' | ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                items.push(body[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    let last = body[start..].trim();
    if !last.is_empty() {
        items.push(last);
    }
    items
}

impl NodePrim {
    /// The prim of node `kind` with attributes `attrs`.
    pub fn from_node(kind: &str, attrs: &dyn NodeAttrs) -> crate::Result<Self> {
        let int = |name: &str| {
            attrs
                .int(name)
                .ok_or_else(|| value_err(format!("{kind} without an int attribute `{name}`")))
        };
        let float = |name: &str| {
            attrs
                .float(name)
                .ok_or_else(|| value_err(format!("{kind} without a float attribute `{name}`")))
        };
        let clamp = |kind: &'static str, inplace: bool| -> crate::Result<NodePrim> {
            Ok(NodePrim::Clamp {
                kind,
                min: float("min_val")?,
                max: float("max_val")?,
                inplace,
            })
        };
        Ok(match kind {
            "prim::ConstantChunk" => NodePrim::ConstantChunk {
                chunks: int("chunks")?,
                dim: int("dim")?,
            },
            "prim::ChunkSizes" => NodePrim::ChunkSizes {
                chunks: int("chunks")?,
                dim: int("dim")?,
            },
            "prim::FusedConcat" => NodePrim::FusedConcat { dim: int("dim")? },
            // PyTorch's `Side` enum: LHS = 0, RHS = 1
            "prim::MMBatchSide" => match int("side")? {
                0 => NodePrim::MMBatchSide {
                    shared_on_left: true,
                },
                1 => NodePrim::MMBatchSide {
                    shared_on_left: false,
                },
                s => {
                    return Err(invalid_argument(
                        "prim::MMBatchSide",
                        "side",
                        "must be 0 or 1",
                        s,
                    ))
                }
            },
            "prim::TypeCheck" | "prim::RequiresGradCheck" => {
                let spellings = attrs
                    .type_spellings("types")
                    .ok_or_else(|| value_err(format!("{kind} without a `types` attribute")))?;
                let types = spellings
                    .iter()
                    .map(|s| TensorSpec::parse(s))
                    .collect::<crate::Result<Vec<_>>>()?;
                if kind == "prim::TypeCheck" {
                    NodePrim::TypeCheck { types }
                } else {
                    let requires_grad = types
                        .iter()
                        .map(|t| {
                            t.requires_grad.ok_or_else(|| {
                                value_err("prim::RequiresGradCheck: a type without requires_grad")
                            })
                        })
                        .collect::<crate::Result<Vec<_>>>()?;
                    NodePrim::RequiresGradCheck { requires_grad }
                }
            }
            "prim::MKLDNNClamp" => clamp("prim::MKLDNNClamp", false)?,
            "prim::MKLDNNClamp_" => clamp("prim::MKLDNNClamp_", true)?,
            "prim::MKLDNNHardTanh" => clamp("prim::MKLDNNHardTanh", false)?,
            "prim::MKLDNNHardTanh_" => clamp("prim::MKLDNNHardTanh_", true)?,
            other => {
                return Err(invalid_argument(
                    "fusion prim",
                    "kind",
                    "must be an attribute prim",
                    other,
                ))
            }
        })
    }

    pub(crate) fn kind(&self) -> &'static str {
        match self {
            NodePrim::ConstantChunk { .. } => "prim::ConstantChunk",
            NodePrim::ChunkSizes { .. } => "prim::ChunkSizes",
            NodePrim::FusedConcat { .. } => "prim::FusedConcat",
            NodePrim::MMBatchSide { .. } => "prim::MMBatchSide",
            NodePrim::TypeCheck { .. } => "prim::TypeCheck",
            NodePrim::RequiresGradCheck { .. } => "prim::RequiresGradCheck",
            NodePrim::Clamp { kind, .. } => kind,
        }
    }

    /// Run on the node's inputs; `outputs` results (a tuple of them when more than one).
    pub fn run(&self, inputs: &mut [IValue], outputs: usize, ctx: &OpContext) -> R {
        let a = Args::new(self.kind(), inputs, ctx);
        let results = match self {
            NodePrim::ConstantChunk { chunks, dim } => {
                let IValue::List(parts) = via_aten(
                    &a,
                    "aten::chunk",
                    vec![a.get(0)?.clone(), (*chunks).into(), (*dim).into()],
                )?
                else {
                    return Err(value_err("prim::ConstantChunk: chunk returned no list"));
                };
                check_size(
                    "prim::ConstantChunk",
                    "the number of chunks",
                    outputs as i64,
                    parts.len() as i64,
                )?;
                parts.to_vec()
            }
            NodePrim::ChunkSizes { chunks, dim } => {
                let (regular, last) = chunk_sizes(&a.int_list(0)?, *chunks, *dim)?;
                let ints = |v: Vec<i64>| {
                    IValue::List(List::new(
                        Type::Int,
                        v.into_iter().map(IValue::Int).collect(),
                    ))
                };
                vec![ints(regular), ints(last)]
            }
            NodePrim::FusedConcat { dim } => {
                let list = List::new(Type::Tensor, a.values.to_vec());
                vec![via_aten(
                    &a,
                    "aten::cat",
                    vec![IValue::List(list), (*dim).into()],
                )?]
            }
            NodePrim::MMBatchSide { shared_on_left } => {
                let shared = a.get(0)?.clone();
                let mut out = Vec::with_capacity(a.len().saturating_sub(1));
                for other in a.values.iter().skip(1) {
                    let operands = if *shared_on_left {
                        vec![shared.clone(), other.clone()]
                    } else {
                        vec![other.clone(), shared.clone()]
                    };
                    out.push(via_aten(&a, "aten::mm", operands)?);
                }
                out
            }
            NodePrim::TypeCheck { types } => {
                let all_match = checked_inputs(&a, types.len())?
                    .iter()
                    .zip(types)
                    .all(|(t, ty)| t.as_ref().is_none_or(|t| ty.matches(t)));
                let mut out = a.values.to_vec();
                out.push(IValue::Bool(all_match));
                out
            }
            NodePrim::RequiresGradCheck { requires_grad } => {
                checked_inputs(&a, requires_grad.len())?;
                let mut out = a.values.to_vec();
                out.push(IValue::Bool(requires_grad.iter().all(|&rg| !rg)));
                out
            }
            NodePrim::Clamp {
                min, max, inplace, ..
            } => {
                let op = if *inplace {
                    "aten::clamp_"
                } else {
                    "aten::clamp"
                };
                let bounds = vec![
                    a.get(0)?.clone(),
                    IValue::Double(*min),
                    IValue::Double(*max),
                ];
                vec![via_aten(&a, op, bounds)?]
            }
        };
        match (outputs, results.len()) {
            (1, 1) => Ok(results.into_iter().next().unwrap_or_default()),
            (n, k) if n == k => Ok(IValue::Tuple(crate::values::Tuple::new(results))),
            (n, k) => Err(size_mismatch(
                self.kind(),
                "the number of results (the node's outputs)",
                n as i64,
                k as i64,
            )),
        }
    }
}

/// The node's tensor inputs (`None`, an undefined tensor, matches any type), one per type.
fn checked_inputs(a: &Args<'_>, types: usize) -> crate::Result<Vec<Option<Tensor>>> {
    check_size(
        a.op,
        "the number of inputs (types)",
        types as i64,
        a.len() as i64,
    )?;
    (0..types).map(|i| a.opt_tensor(i)).collect()
}

/// PyTorch's `prim::ChunkSizes`: (the regular chunk's sizes, the last chunk's sizes).
fn chunk_sizes(shape: &[i64], chunks: i64, dim: i64) -> crate::Result<(Vec<i64>, Vec<i64>)> {
    let rank = shape.len() as i64;
    let d = if dim < 0 { dim + rank } else { dim };
    if d < 0 || d >= rank {
        return Err(crate::tensor::TensorError::DimOutOfRange {
            dim,
            ndim: shape.len(),
        }
        .into());
    }
    if chunks <= 0 {
        return Err(invalid_argument(
            "prim::ChunkSizes",
            "chunks",
            "must be greater than 0",
            chunks,
        ));
    }
    let d = d as usize;
    let size = shape[d];
    if size < 0 {
        return Err(invalid_argument(
            "prim::ChunkSizes",
            format!("size[{d}]"),
            "must be non-negative",
            size,
        ));
    }
    let split = size.checked_add(chunks - 1).ok_or_else(|| {
        invalid_argument(
            "prim::ChunkSizes",
            format!("size[{d}]"),
            "must fit in int64 when rounded up to chunks",
            size,
        )
    })? / chunks;
    let mut regular = shape.to_vec();
    let mut last = shape.to_vec();
    regular[d] = split;
    last[d] = if size % chunks == 0 {
        split
    } else {
        // split > 0 here: size % chunks != 0 means size > 0
        let num_splits = ((size + split - 1) / split).max(1);
        split - (split * num_splits - size)
    };
    Ok((regular, last))
}
