//! `out=` overloads (`aten::div.out`, `aten::sum.IntList_out`, `aten::max.dim_max`,
//! `aten::sort.values`) run through their functional sibling, once for all of them: the
//! overload of the same operator that takes the same arguments minus the out tensors and
//! returns as many tensors (`aten::div.Tensor`, `aten::max.dim`). Its kernel computes the
//! result, which is then written into the out tensors as PyTorch's `resize_output` and
//! `copy_` do, and the out tensors are returned (the same tensors: data written through a
//! view's strides reaches its base).
//!
//! Factory out overloads drop the functional's `TensorOptions` (`ones.out` has no `dtype`,
//! `layout`, `device`, `pin_memory`): the result is made in the out tensor's dtype, as
//! PyTorch's factories fill `out`. A `ScalarType? dtype` argument left `None` takes the out
//! tensor's dtype too, as PyTorch's reductions compute in `out`'s dtype (`sum`, `mean`,
//! `cumsum`).
//!
//! Shape: an out tensor of another shape is resized (PyTorch warns when it had elements);
//! the resized tensor is a new handle, which the plan threads to later reads
//! (`ir::passes::inplace_geometry`) where no other handle can see the old shape, and refuses
//! where one could ([`Resize::Refused`]). Dtype: the result is cast to the out tensor's dtype
//! where `canCast` allows (PyTorch's TensorIterator rule), else the call fails naming both.

use super::kernels::invalid_argument;
use super::kernels::operand::can_cast;
use super::schema::{Argument, FunctionSchema, SchemaRegistry};
use super::{Kernel, OpContext, Registry};
use crate::tensor::{Tensor, TensorError};
use crate::values::types::Type;
use crate::values::IValue;
use std::sync::Arc;

/// Where one argument of the functional sibling comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    /// Argument `i` of the out overload.
    Arg(usize),
    /// Argument `i` of the out overload, a `ScalarType? dtype`: `None` becomes the first out
    /// tensor's dtype.
    DTypeOr(usize),
    /// Absent from the out overload (a factory's `dtype`): the first out tensor's dtype.
    OutDType,
    /// Absent from the out overload (a factory's `layout`, `device`, `pin_memory`): `None`.
    Unset,
}

/// An out= overload and how it runs through its functional sibling.
#[derive(Debug)]
pub struct OutVariant {
    /// The functional sibling (`aten::div.Tensor`).
    pub functional: Arc<str>,
    kernel: Kernel,
    /// The functional's arguments, in its order.
    sources: Box<[Source]>,
    /// Positions of the out tensors among the out overload's arguments, in result order.
    outs: Box<[usize]>,
}

/// How a call may treat an out tensor whose shape differs from the result's.
#[derive(Clone, Debug)]
pub enum Resize {
    /// Resize it: later reads of the tensor read the call's result (a new handle).
    Allowed,
    /// Other handles of the tensor would keep the old shape: fail, saying why.
    Refused(Arc<str>),
}

/// An out tensor argument: `Tensor(a!)` after the `*`.
fn is_out_argument(a: &Argument) -> bool {
    a.is_write && a.kwarg_only && a.ty == Type::Tensor
}

/// The positions of `schema`'s out tensors, when it is an out= overload: every argument it
/// writes is an out tensor, and it returns exactly those, in order.
pub fn out_positions(schema: &FunctionSchema) -> Option<Vec<usize>> {
    let outs: Vec<usize> = (0..schema.arguments.len())
        .filter(|&i| schema.arguments[i].is_write)
        .collect();
    if outs.is_empty()
        || schema.is_vararg
        || schema.is_varret
        || outs.len() != schema.returns.len()
        || !outs.iter().all(|&i| is_out_argument(&schema.arguments[i]))
    {
        return None;
    }
    let returns_outs = outs
        .iter()
        .zip(&schema.returns)
        .all(|(&i, r)| r.is_write && r.alias.is_some() && r.alias == schema.arguments[i].alias);
    returns_outs.then_some(outs)
}

/// Optional `TensorOptions` parts a factory's out overload leaves out.
fn tensor_options_source(a: &Argument) -> Option<Source> {
    let optional = |t: Type| a.ty == Type::optional(t);
    // schemas type ScalarType and Layout as the ints TorchScript passes
    match a.name.as_str() {
        "dtype" if optional(Type::Int) => Some(Source::OutDType),
        "layout" if optional(Type::Int) => Some(Source::Unset),
        "device" if optional(Type::Device) => Some(Source::Unset),
        "pin_memory" if optional(Type::Bool) => Some(Source::Unset),
        _ => None,
    }
}

fn same_argument(a: &Argument, b: &Argument) -> bool {
    a.name == b.name
        && a.ty == b.ty
        && a.fixed_len == b.fixed_len
        && format!("{:?}", a.default) == format!("{:?}", b.default)
}

/// How `functional`'s arguments come from `out`'s (`outs`: its out positions), when it is
/// `out`'s functional sibling: the same arguments in order, besides factory options.
fn sources(
    functional: &FunctionSchema,
    out: &FunctionSchema,
    outs: &[usize],
) -> Option<Vec<Source>> {
    if functional.is_mutable()
        || functional.is_vararg
        || functional.is_varret
        || functional.returns.len() != outs.len()
        || functional.returns.iter().any(|r| r.ty != Type::Tensor)
    {
        return None;
    }
    let mut given = (0..out.arguments.len()).filter(|i| !outs.contains(i));
    let mut next = given.next();
    let mut sources = Vec::with_capacity(functional.arguments.len());
    for a in &functional.arguments {
        match next {
            Some(i) if same_argument(a, &out.arguments[i]) => {
                let dtype_arg = a.name == "dtype" && a.ty == Type::optional(Type::Int);
                sources.push(if dtype_arg {
                    Source::DTypeOr(i)
                } else {
                    Source::Arg(i)
                });
                next = given.next();
            }
            _ => sources.push(tensor_options_source(a)?),
        }
    }
    next.is_none().then_some(sources)
}

/// The out= overload `qualified` (`aten::div.out`) as its functional sibling runs it, when it
/// is an out= overload whose sibling has a kernel.
pub fn resolve(qualified: &str) -> Option<OutVariant> {
    let registry = SchemaRegistry::global();
    let schema = registry.find(qualified)?;
    let outs = out_positions(&schema)?;
    let overloads = registry.overloads(&schema.name);
    let mut found = overloads.iter().filter_map(|f| {
        let sources = sources(f, &schema, &outs)?;
        Some((f, sources))
    });
    let (functional, sources) = found.next()?;
    // two siblings would make the choice arbitrary
    if found.next().is_some() {
        return None;
    }
    let kernel = Registry::global().lookup(&functional.name, &functional.overload)?;
    Some(OutVariant {
        functional: functional.qualified_name().into(),
        kernel,
        sources: sources.into(),
        outs: outs.into(),
    })
}

impl OutVariant {
    /// The functional kernel's code address (`Module::prepare` maps the code plans call).
    pub fn kernel_address(&self) -> usize {
        self.kernel as usize
    }

    /// Run the out overload `name` on `args` (its arguments in schema order): the functional
    /// kernel, then the write into the out tensors; returns them (a tuple when several).
    /// `warned` is the call site's flag, so a resize warning prints once per site.
    pub fn run(
        &self,
        name: &str,
        args: &mut [IValue],
        ctx: &OpContext,
        resize: &Resize,
        warned: &std::sync::atomic::AtomicBool,
    ) -> crate::Result<IValue> {
        // moved out, so an out tensor nothing else holds can grow its storage in place
        let mut outs = Vec::with_capacity(self.outs.len());
        for &i in self.outs.iter() {
            match args.get_mut(i).map(std::mem::take) {
                Some(IValue::Tensor(t)) => outs.push(t),
                other => {
                    return Err(invalid_argument(
                        name,
                        "out",
                        "must be a Tensor",
                        other.as_ref().map_or("nothing", IValue::kind_name),
                    ))
                }
            }
        }
        let out_dtype = outs
            .first()
            .map(|t| IValue::Int(t.dtype().to_scalar_type()));
        let mut functional_args: Vec<IValue> = self
            .sources
            .iter()
            .map(|s| match *s {
                Source::Arg(i) => args.get(i).cloned().unwrap_or_default(),
                Source::DTypeOr(i) => match args.get(i) {
                    Some(IValue::None) | None => out_dtype.clone().unwrap_or_default(),
                    Some(v) => v.clone(),
                },
                Source::OutDType => out_dtype.clone().unwrap_or_default(),
                Source::Unset => IValue::None,
            })
            .collect();
        let result =
            super::storage_dtypes::call(self.kernel, &self.functional, &mut functional_args, ctx)?;
        let results = match result {
            IValue::Tensor(t) if outs.len() == 1 => vec![t],
            IValue::Tuple(t) if t.items().len() == outs.len() => t
                .items()
                .iter()
                .map(|v| v.as_tensor().cloned())
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| invalid_argument(name, "result", "must be tensors", "a tuple"))?,
            other => {
                return Err(invalid_argument(
                    name,
                    "result",
                    format!("must be {} tensor(s)", outs.len()),
                    other.kind_name(),
                ))
            }
        };
        let inputs: Vec<&Tensor> = args.iter().filter_map(IValue::as_tensor).collect();
        let mut written = Vec::with_capacity(outs.len());
        for (out, result) in outs.into_iter().zip(results) {
            written.push(IValue::Tensor(write_out(
                name, out, &result, &inputs, resize, warned,
            )?));
        }
        Ok(match written.len() {
            1 => written.pop().unwrap_or_default(),
            _ => IValue::Tuple(crate::values::Tuple::new(written)),
        })
    }
}

/// Write `result` into `out` as PyTorch's `resize_output` then `copy_` do, and return `out`
/// (resized: a new handle).
fn write_out(
    name: &str,
    out: Tensor,
    result: &Tensor,
    inputs: &[&Tensor],
    resize: &Resize,
    warned: &std::sync::atomic::AtomicBool,
) -> crate::Result<Tensor> {
    if !can_cast(result.dtype(), out.dtype()) {
        return Err(TensorError::OutDTypeCast {
            op: name.to_string(),
            result: result.dtype(),
            out: out.dtype(),
        }
        .into());
    }
    let out = if out.shape() == result.shape() {
        out
    } else {
        if let Resize::Refused(why) = resize {
            return Err(TensorError::UnsupportedFeature {
                op: name.to_string(),
                feature: format!(
                    "resizing its out tensor from {:?} to the result's shape {:?} here ({why})",
                    out.shape(),
                    result.shape()
                ),
            }
            .into());
        }
        if out.numel() != 0 && !warned.swap(true, std::sync::atomic::Ordering::Relaxed) {
            crate::error::warn(format!(
                "An output with one or more elements was resized since it had shape {:?}, \
                 which does not match the required output shape {:?}. This behavior is \
                 deprecated, and in a future PyTorch release outputs will not be resized \
                 unless they have zero elements. You can explicitly reuse an out tensor t by \
                 resizing it, inplace, to zero elements with t.resize_(0).",
                out.shape(),
                result.shape()
            ));
        }
        let size: Vec<i64> = result.shape().iter().map(|&d| d as i64).collect();
        super::shape::resize_handle(out, &size, None).map_err(|e| match e {
            // name the out= call, not the resize it runs
            crate::Error::Tensor(TensorError::UnsupportedFeature { feature, .. }) => {
                TensorError::UnsupportedFeature {
                    op: name.to_string(),
                    feature: format!("resizing its out tensor: {feature}"),
                }
                .into()
            }
            e => e,
        })?
    };
    // PyTorch refuses an out tensor that partially overlaps an input
    for input in inputs {
        out.check_no_partial_overlap(input)?;
    }
    out.copy_from(result)?;
    Ok(out)
}

/// Every out= overload of PyTorch's schema table, and whether it has a kernel path: a kernel
/// of its own, or a functional sibling with one.
pub fn coverage() -> Vec<(String, bool)> {
    SchemaRegistry::global()
        .all()
        .into_iter()
        .filter(|s| out_positions(s).is_some())
        .map(|s| {
            let q = s.qualified_name();
            let has =
                Registry::global().lookup(&s.name, &s.overload).is_some() || resolve(&q).is_some();
            (q, has)
        })
        .collect()
}
