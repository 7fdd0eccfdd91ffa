//! Elementwise chains fused at plan build (`add -> relu`, `mul -> add -> tanh`, `x * s + b ->
//! hardswish`): the plan replaces a run of elementwise operators, each consuming the previous
//! one's result as that result's only use, by one instruction. For float32 operands it makes one
//! pass over memory: the chain is evaluated chunk by chunk, each step in float32 and in the
//! original order with the same expression as the operator's own float32 kernel (the vectorized
//! functions of `kernels/vmath.rs` where the kernel uses them), so results are bit-identical to
//! running the operators one by one. Any other input (other dtypes, strided or non-broadcastable
//! layouts, complex scalars) makes `run` decline, and the interpreter runs the original kernels.

use super::kernels::num::scalar_as;
use super::kernels::parallel::for_each_chunk_mut;
use super::kernels::vmath::{self, VecFn};
use crate::tensor::{broadcast_shapes, DType, Scalar, Tensor, PARALLEL_THRESHOLD};
use crate::values::IValue;
use num_complex::Complex64;
use smallvec::SmallVec;

/// One elementwise operation of a chain, evaluated in float32.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum ChainOp {
    /// `a + b`, or `a + alpha * b` with `Some(alpha)` (a non-unit alpha, as `add_sub` computes).
    Add(Option<f32>),
    /// `a - b`, or `a - alpha * b`.
    Sub(Option<f32>),
    Mul,
    /// True division (no rounding mode).
    Div,
    Relu,
    Hardswish,
    Hardsigmoid,
    /// A vectorized function (`exp`, `tanh`, `sigmoid`, `erf`, `gelu`, `silu`).
    Vector(VecFn),
}

/// Where a step reads an operand: the previous step's result, or input `i` of the fused
/// instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ChainArg {
    Prev,
    Input(usize),
}

/// One step: `op(lhs)` or `op(lhs, rhs)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct ChainStep {
    pub(crate) op: ChainOp,
    pub(crate) lhs: ChainArg,
    pub(crate) rhs: Option<ChainArg>,
}

/// What an operator is as a chain step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct ChainOperator {
    pub(crate) op: ChainOp,
    /// How many leading arguments are operands (tensors or numbers); the rest must be constants.
    pub(crate) operands: usize,
    /// Whether the operator writes its first operand (`add_`, `relu_`): fusible only when that
    /// operand is the previous step's result, which nothing else sees.
    pub(crate) in_place: bool,
}

/// The chain step of operator `name` (`aten::add.Tensor`), whose argument `i` is the plan
/// constant `constant(i)` (`None` when it is not a constant); `None` for an operator that is not
/// fusible, or whose non-operand arguments (alpha, approximate) are not constants it supports.
pub(crate) fn chain_operator(
    name: &str,
    n_inputs: usize,
    constant: &dyn Fn(usize) -> Option<IValue>,
) -> Option<ChainOperator> {
    let (base, overload) = name.split_once('.').unwrap_or((name, ""));
    let (base, in_place) = match base.strip_suffix('_') {
        Some(b) => (b, true),
        None => (base, false),
    };
    let binary = matches!(overload, "Tensor" | "Scalar");
    let unary = overload.is_empty();
    let alpha = || -> Option<Option<f32>> {
        let a = constant(2)?.as_scalar()?;
        match a {
            Scalar::Complex(_) => None,
            a if a.to_c64() == Complex64::new(1.0, 0.0) => Some(None),
            a => Some(Some(scalar_as::<f32>(a))),
        }
    };
    let (op, operands, args) = match base {
        "aten::add" if binary => (ChainOp::Add(alpha()?), 2, 3),
        "aten::sub" if binary => (ChainOp::Sub(alpha()?), 2, 3),
        "aten::mul" if binary => (ChainOp::Mul, 2, 2),
        "aten::div" if binary => (ChainOp::Div, 2, 2),
        "aten::relu" if unary => (ChainOp::Relu, 1, 1),
        "aten::hardswish" if unary => (ChainOp::Hardswish, 1, 1),
        "aten::hardsigmoid" if unary => (ChainOp::Hardsigmoid, 1, 1),
        "aten::exp" if unary => (ChainOp::Vector(VecFn::Exp), 1, 1),
        "aten::tanh" if unary => (ChainOp::Vector(VecFn::Tanh), 1, 1),
        "aten::sigmoid" if unary => (ChainOp::Vector(VecFn::Sigmoid), 1, 1),
        "aten::erf" if unary => (ChainOp::Vector(VecFn::Erf), 1, 1),
        "aten::silu" if unary => (ChainOp::Vector(VecFn::Silu), 1, 1),
        "aten::gelu" if unary => {
            let f = match constant(1)?.as_str()? {
                "none" => VecFn::Gelu,
                "tanh" => VecFn::GeluTanh,
                _ => return None,
            };
            (ChainOp::Vector(f), 1, 2)
        }
        _ => return None,
    };
    (n_inputs == args).then_some(ChainOperator {
        op,
        operands,
        in_place,
    })
}

/// Elements per chunk: each step's pass over a chunk stays in the L1/L2 cache.
const CHUNK: usize = 4 * 1024;

/// An operand resolved for the fused loop.
enum Source<'a> {
    /// The accumulator: the output chunk's current values.
    Acc,
    Number(f32),
    /// A contiguous float32 tensor whose elements repeat every `len` output elements (a
    /// trailing-dims broadcast; `len` is the output's size when it is not broadcast).
    Slice(&'a [f32]),
}

impl Source<'_> {
    /// Element `offset + j` of this operand for each `j` of `dst` (for a non-accumulator).
    fn copy_into(&self, dst: &mut [f32], offset: usize) {
        match self {
            Source::Acc => {}
            Source::Number(v) => dst.fill(*v),
            Source::Slice(s) => for_runs(s, offset, dst, |d, o| d.copy_from_slice(o)),
        }
    }
}

/// `f(dst_run, operand_run)` over the runs of `dst` that read a contiguous run of `s`, an
/// operand repeating every `s.len()` elements (output element `offset + j` reads
/// `s[(offset + j) % s.len()]`): a broadcast bias costs one division per run, not per element.
#[inline(always)]
fn for_runs(s: &[f32], offset: usize, dst: &mut [f32], mut f: impl FnMut(&mut [f32], &[f32])) {
    let n = s.len();
    if n == 0 {
        return;
    }
    let mut j = 0;
    while j < dst.len() {
        let p = (offset + j) % n;
        let run = (n - p).min(dst.len() - j);
        match (dst.get_mut(j..j + run), s.get(p..p + run)) {
            (Some(d), Some(o)) => f(d, o),
            _ => return,
        }
        j += run;
    }
}

/// `acc[j] = g(acc[j], other[offset + j])`, the loop monomorphized for `g` so it vectorizes.
#[inline(always)]
fn zip_with(acc: &mut [f32], other: &Source<'_>, offset: usize, g: impl Fn(f32, f32) -> f32) {
    match other {
        Source::Acc => acc.iter_mut().for_each(|a| *a = g(*a, *a)),
        Source::Number(v) => acc.iter_mut().for_each(|a| *a = g(*a, *v)),
        Source::Slice(s) => for_runs(s, offset, acc, |d, o| {
            d.iter_mut().zip(o).for_each(|(a, &o)| *a = g(*a, o))
        }),
    }
}

/// `acc[j] = f(acc[j], other[offset + j])` (`acc_left`) or `f(other[..], acc[j])`.
#[inline(always)]
fn combine(
    acc: &mut [f32],
    other: &Source<'_>,
    offset: usize,
    acc_left: bool,
    f: impl Fn(f32, f32) -> f32,
) {
    if acc_left {
        zip_with(acc, other, offset, f)
    } else {
        zip_with(acc, other, offset, |a, o| f(o, a))
    }
}

/// Binary `op` between the accumulator and `other`, in the float32 expression the unfused
/// kernel uses (`add_sub`, `mul_op`, `div_op`); each arm is its own loop.
fn binary(op: ChainOp, acc: &mut [f32], other: &Source<'_>, offset: usize, acc_left: bool) {
    match op {
        ChainOp::Add(None) => combine(acc, other, offset, acc_left, |p, q| p + q),
        ChainOp::Add(Some(al)) => combine(acc, other, offset, acc_left, |p, q| p + al * q),
        ChainOp::Sub(None) => combine(acc, other, offset, acc_left, |p, q| p - q),
        ChainOp::Sub(Some(al)) => combine(acc, other, offset, acc_left, |p, q| p - al * q),
        ChainOp::Mul => combine(acc, other, offset, acc_left, |p, q| p * q),
        ChainOp::Div => combine(acc, other, offset, acc_left, |p, q| p / q),
        _ => {}
    }
}

/// Whether `op` takes two operands.
fn is_binary(op: ChainOp) -> bool {
    matches!(
        op,
        ChainOp::Add(_) | ChainOp::Sub(_) | ChainOp::Mul | ChainOp::Div
    )
}

/// Apply unary `op` to the accumulator in place.
fn unary(op: ChainOp, acc: &mut [f32]) {
    match op {
        // `relu_tensor`: NaN propagates
        ChainOp::Relu => acc
            .iter_mut()
            .for_each(|v| *v = if v.is_nan() || *v > 0.0 { *v } else { 0.0 }),
        // the expressions of `activation.rs`'s float32 kernels
        ChainOp::Hardswish => acc
            .iter_mut()
            .for_each(|v| *v = *v * (*v + 3.0).clamp(0.0, 6.0) / 6.0),
        ChainOp::Hardsigmoid => acc
            .iter_mut()
            .for_each(|v| *v = (*v + 3.0).clamp(0.0, 6.0) / 6.0),
        ChainOp::Vector(f) => vmath::apply(f, acc),
        ChainOp::Add(_) | ChainOp::Sub(_) | ChainOp::Mul | ChainOp::Div => {}
    }
}

/// Whether `shape` (leading 1s aside) is a suffix of `out`: its contiguous elements then repeat
/// every `numel` output elements.
fn trailing_broadcast(shape: &[usize], out: &[usize]) -> bool {
    let lead = shape.iter().take_while(|&&d| d == 1).count();
    let core = &shape[lead..];
    core.len() <= out.len() && out[out.len() - core.len()..] == *core
}

/// Run `steps` over `inputs` in one pass when every operand is a contiguous float32 tensor
/// (broadcast only over leading dims) or a real number and the first step reads a tensor;
/// `Ok(None)` otherwise, for the caller to run the original kernels. The result overwrites a
/// dead input when one is exclusively owned, has the result's shape and is read by the first
/// step only; else it is a fresh tensor.
pub(crate) fn run(steps: &[ChainStep], inputs: &mut [IValue]) -> crate::Result<Option<Tensor>> {
    let Some(first) = steps.first() else {
        return Ok(None);
    };
    if steps.iter().any(|s| is_binary(s.op) != s.rhs.is_some()) {
        return Ok(None);
    }
    // How each input is used: by which steps, and whether it is a tensor.
    let mut shape: SmallVec<[usize; 6]> = SmallVec::new();
    let mut any_tensor = false;
    for (i, v) in inputs.iter().enumerate() {
        let used = steps
            .iter()
            .any(|s| s.lhs == ChainArg::Input(i) || s.rhs == Some(ChainArg::Input(i)));
        if !used {
            continue;
        }
        match v {
            IValue::Tensor(t) => {
                if t.dtype() != DType::Float32 || !t.is_contiguous() {
                    return Ok(None);
                }
                shape = match broadcast_shapes(&shape, t.shape()) {
                    Ok(s) => s.into_iter().collect(),
                    Err(_) => return Ok(None),
                };
                any_tensor = true;
            }
            v => match v.as_scalar() {
                Some(Scalar::Complex(_)) | None => return Ok(None),
                Some(_) => {}
            },
        }
    }
    // the first step's own operand must be a tensor (an operator's `self`)
    let lhs_tensor = |a: ChainArg| match a {
        ChainArg::Input(i) => matches!(inputs.get(i), Some(IValue::Tensor(_))),
        ChainArg::Prev => false,
    };
    if !any_tensor || !lhs_tensor(first.lhs) {
        return Ok(None);
    }
    for v in inputs.iter() {
        if let IValue::Tensor(t) = v {
            if !trailing_broadcast(t.shape(), &shape) {
                return Ok(None);
            }
        }
    }
    // An input read only by the first step, once, exclusively owned and of the output's shape
    // becomes the output: nothing else can observe its old values.
    let reuse = (0..inputs.len()).find(|&i| {
        let uses: usize = steps
            .iter()
            .map(|s| {
                usize::from(s.lhs == ChainArg::Input(i))
                    + usize::from(s.rhs == Some(ChainArg::Input(i)))
            })
            .sum();
        let first_uses = usize::from(first.lhs == ChainArg::Input(i))
            + usize::from(first.rhs == Some(ChainArg::Input(i)));
        matches!(&inputs[i], IValue::Tensor(t) if uses == 1 && first_uses == 1
            && t.shape() == shape.as_slice() && t.storage_offset() == 0
            && t.storage().is_exclusive())
    });
    let out = match reuse {
        Some(i) => match std::mem::take(&mut inputs[i]) {
            IValue::Tensor(t) => t,
            _ => return Ok(None),
        },
        None => Tensor::empty(&shape, DType::Float32)?,
    };
    match evaluate(steps, inputs, reuse, &out) {
        Ok(true) => Ok(Some(out)),
        declined => {
            // give the reused input back to the caller's fallback
            if let Some(slot) = reuse.and_then(|i| inputs.get_mut(i)) {
                *slot = IValue::Tensor(out);
            }
            declined.map(|_| None)
        }
    }
}

/// The fused loop of [`run`] into `out` (which holds input `reuse`'s values when given);
/// `Ok(false)` when an operand cannot be read as checked.
fn evaluate(
    steps: &[ChainStep],
    inputs: &[IValue],
    reuse: Option<usize>,
    out: &Tensor,
) -> crate::Result<bool> {
    // read guards on every tensor input but the reused one (taken out of `inputs`)
    let mut guards = Vec::with_capacity(inputs.len());
    for v in inputs.iter() {
        guards.push(match v {
            IValue::Tensor(t) => Some(t.read::<f32>()?),
            _ => None,
        });
    }
    let resolve = |a: ChainArg| -> Option<Source<'_>> {
        match a {
            ChainArg::Prev => Some(Source::Acc),
            ChainArg::Input(i) if reuse == Some(i) => Some(Source::Acc),
            ChainArg::Input(i) => match (guards.get(i)?, inputs.get(i)?) {
                (Some(g), _) => g.as_slice().map(|s| match s {
                    // a one-element tensor reads as a number (no runs of one)
                    [v] => Source::Number(*v),
                    s => Source::Slice(s),
                }),
                (None, v) => v.as_scalar().map(|s| Source::Number(scalar_as::<f32>(s))),
            },
        }
    };
    let mut plan: Vec<(ChainOp, Source<'_>, Option<Source<'_>>)> = Vec::with_capacity(steps.len());
    for s in steps {
        let Some(lhs) = resolve(s.lhs) else {
            return Ok(false);
        };
        let rhs = match s.rhs.map(resolve) {
            Some(None) => return Ok(false),
            Some(Some(r)) => Some(r),
            None => None,
        };
        plan.push((s.op, lhs, rhs));
    }
    let mut og = out.write::<f32>()?;
    let Some(dst) = og.as_slice_mut() else {
        return Ok(false);
    };
    let par = dst.len() >= PARALLEL_THRESHOLD;
    for_each_chunk_mut(dst, CHUNK, par, &|k, acc| {
        let offset = k * CHUNK;
        for (op, lhs, rhs) in &plan {
            match rhs {
                Some(rhs) => match (lhs, rhs) {
                    (Source::Acc, other) => binary(*op, acc, other, offset, true),
                    (other, Source::Acc) => binary(*op, acc, other, offset, false),
                    (l, r) => {
                        l.copy_into(acc, offset);
                        binary(*op, acc, r, offset, true);
                    }
                },
                None => {
                    lhs.copy_into(acc, offset);
                    unary(*op, acc);
                }
            }
        }
    });
    Ok(true)
}
