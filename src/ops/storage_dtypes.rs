//! Which operators take float8 and complex32 tensors, as PyTorch's CPU kernels do.
//!
//! tsrun's generic kernels are not instantiated for these dtypes (binary size; PyTorch's CPU
//! kernels cover them only for copies and a few ops), but helpers such as `Tensor::to_dtype`
//! convert them, so a kernel that widens any floating input to float would silently compute
//! where PyTorch refuses. The interpreter therefore calls every kernel through [`call`], which
//! lets a float8/complex32 tensor argument through only to
//! - operators that only move or describe elements (views, copies, conversions, `cat`,
//!   `index_select`, container and `prim::` operators): `moves_elements`;
//! - the functional operators PyTorch computes for them (`mul`, `abs`, comparisons, `where`,
//!   indexing, `matmul`; complex32 `add`/`sub`/`neg`/`conj_physical`/`tril`): `computed`,
//!   run on float (complex64) copies, with scalar operands first rounded to the tensor's dtype
//!   (PyTorch's common dtype) and float results rounded back, which is how c10 evaluates them
//!   (in float, rounded once);
//!
//! and refuses every other operator with PyTorch's "not implemented for" error. Only top-level
//! tensor arguments are checked; tensors inside lists reach container operators and `cat`/`stack`.

use super::kernels::not_implemented_for;
use super::{Args, Kernel, OpContext};
use crate::tensor::float8::{conversion_dtype, is_storage_only};
use crate::tensor::{DType, Tensor};
use crate::values::{IValue, Tuple};

/// Operators (base names, every overload) that handle float8/complex32 tensors by moving or
/// describing their elements, never reading their values as numbers.
const MOVES_ELEMENTS: &[&str] = &[
    "aten::Bool",
    "aten::Float",
    "aten::Int",
    "aten::ScalarImplicit",
    "aten::__is__",
    "aten::__isnot__",
    "aten::_reshape_alias",
    "aten::_scaled_mm",
    "aten::_scaled_mm_v2",
    "aten::_set_item",
    "aten::_to_copy",
    "aten::_unsafe_view",
    "aten::_unwrap_optional",
    "aten::alias",
    "aten::append",
    "aten::as_strided",
    "aten::broadcast_to",
    "aten::cat",
    "aten::chalf",
    "aten::chunk",
    "aten::clone",
    "aten::concat",
    "aten::constant_pad_nd",
    "aten::contiguous",
    "aten::copy_",
    "aten::detach",
    "aten::dim",
    "aten::element_size",
    "aten::empty_like",
    "aten::expand",
    "aten::expand_as",
    "aten::fill_",
    "aten::flatten",
    "aten::format",
    "aten::full_like",
    "aten::get_device",
    "aten::index_select",
    "aten::insert",
    "aten::is_complex",
    "aten::is_contiguous",
    "aten::is_floating_point",
    "aten::is_leaf",
    "aten::is_same_size",
    "aten::item",
    "aten::len",
    "aten::lift_fresh",
    "aten::movedim",
    "aten::narrow",
    "aten::narrow_copy",
    "aten::new_empty",
    "aten::new_full",
    "aten::new_ones",
    "aten::new_zeros",
    "aten::numel",
    "aten::ones_like",
    "aten::permute",
    "aten::real",
    "aten::repeat",
    "aten::requires_grad_",
    "aten::reshape",
    "aten::reshape_as",
    "aten::roll",
    "aten::select",
    "aten::size",
    "aten::slice",
    "aten::split",
    "aten::split_with_sizes",
    "aten::squeeze",
    "aten::stack",
    "aten::str",
    "aten::stride",
    "aten::swapaxes",
    "aten::swapdims",
    "aten::sym_numel",
    "aten::sym_size",
    "aten::sym_stride",
    "aten::t",
    "aten::tensor_split",
    "aten::to",
    "aten::transpose",
    "aten::type_as",
    "aten::unbind",
    "aten::unflatten",
    "aten::unfold",
    "aten::unsqueeze",
    "aten::view",
    "aten::view_as",
    "aten::view_as_real",
    "aten::zero_",
    "aten::zeros_like",
];

/// Which of the two families an operator of [`COMPUTED`] takes.
const FLOAT8: u8 = 1;
const COMPLEX32: u8 = 2;
/// `float8_e8m0fnu`, which PyTorch computes for fewer ops than the other float8 formats.
const E8M0: u8 = 4;

/// Functional overloads PyTorch's CPU kernels compute for float8 and/or complex32: the name,
/// the dtype families, and the argument that is a scalar operand (converted to the tensor's
/// dtype first, as PyTorch's common dtype makes it).
const COMPUTED: &[(&str, u8, Option<usize>)] = &[
    ("aten::abs", FLOAT8 | COMPLEX32, None),
    ("aten::add.Tensor", COMPLEX32, None),
    ("aten::all", FLOAT8 | COMPLEX32 | E8M0, None),
    ("aten::any", FLOAT8 | COMPLEX32 | E8M0, None),
    ("aten::conj_physical", FLOAT8 | COMPLEX32 | E8M0, None),
    ("aten::eq.Scalar", FLOAT8 | COMPLEX32 | E8M0, Some(1)),
    ("aten::eq.Tensor", FLOAT8 | COMPLEX32 | E8M0, None),
    ("aten::flip", FLOAT8 | COMPLEX32 | E8M0, None),
    ("aten::index.Tensor", FLOAT8 | COMPLEX32 | E8M0, None),
    ("aten::index_put", FLOAT8 | COMPLEX32, None),
    ("aten::isfinite", FLOAT8 | COMPLEX32 | E8M0, None),
    ("aten::isnan", FLOAT8 | COMPLEX32 | E8M0, None),
    ("aten::linear", FLOAT8, None),
    ("aten::masked_fill.Scalar", COMPLEX32, Some(2)),
    ("aten::masked_select", FLOAT8 | COMPLEX32 | E8M0, None),
    ("aten::matmul", FLOAT8, None),
    ("aten::mul.Scalar", COMPLEX32, Some(1)),
    ("aten::mul.Tensor", FLOAT8 | COMPLEX32 | E8M0, None),
    ("aten::ne.Scalar", FLOAT8 | COMPLEX32 | E8M0, Some(1)),
    ("aten::ne.Tensor", FLOAT8 | COMPLEX32 | E8M0, None),
    ("aten::neg", COMPLEX32, None),
    ("aten::nonzero", COMPLEX32, None),
    ("aten::sub.Tensor", COMPLEX32, None),
    ("aten::tril", COMPLEX32, None),
    ("aten::where.self", FLOAT8 | COMPLEX32 | E8M0, None),
];

/// Whether operator `name` (`aten::view.dtype`) only moves or describes elements.
fn moves_elements(name: &str) -> bool {
    if name.starts_with("prim::") {
        return true;
    }
    let base = name.split_once('.').map_or(name, |(b, _)| b);
    MOVES_ELEMENTS.binary_search(&base).is_ok()
}

/// The [`COMPUTED`] entry of `name` for `dtype`, if PyTorch computes it.
fn computed(name: &str, dtype: DType) -> Option<Option<usize>> {
    let family = match dtype {
        DType::Complex32 => COMPLEX32,
        DType::Float8E8M0FNU => E8M0,
        _ => FLOAT8,
    };
    COMPUTED
        .iter()
        .find(|(n, families, _)| *n == name && families & family != 0)
        .map(|&(_, _, scalar)| scalar)
}

/// Shape conditions of PyTorch's kernels for these dtypes: `flip` takes them only through its
/// row-copy path, when the last dimension is not flipped (its element-wise `flip_cpu` kernel
/// has no instance for them).
fn shape_supported(name: &str, args: &[IValue]) -> bool {
    if name != "aten::flip" {
        return true;
    }
    let (Some(IValue::Tensor(t)), Some(IValue::List(dims))) = (args.first(), args.get(1)) else {
        return false;
    };
    let n = t.dim() as i64;
    let last_flipped = dims.items().iter().any(|d| match d {
        IValue::Int(d) => *d == n - 1 || *d == -1,
        _ => true,
    });
    !last_flipped
}

/// The float8/complex32 dtype of the first such top-level tensor argument, if any.
#[inline]
fn storage_only_argument(args: &[IValue]) -> Option<DType> {
    args.iter().find_map(|a| match a {
        IValue::Tensor(t) if is_storage_only(t.dtype()) => Some(t.dtype()),
        _ => None,
    })
}

/// Call `kernel` for operator `name` on `args`, refusing or widening float8/complex32 tensor
/// arguments as the module documentation says.
#[inline]
pub fn call(
    kernel: Kernel,
    name: &str,
    args: &mut [IValue],
    ctx: &OpContext,
) -> crate::Result<IValue> {
    match storage_only_argument(args) {
        None => kernel(&mut Args::new(name, args, ctx)),
        Some(dtype) => call_with_storage_only(kernel, name, args, ctx, dtype),
    }
}

/// [`call`] when an argument is a float8/complex32 tensor (rare: kept out of the hot path).
#[cold]
#[inline(never)]
fn call_with_storage_only(
    kernel: Kernel,
    name: &str,
    args: &mut [IValue],
    ctx: &OpContext,
    dtype: DType,
) -> crate::Result<IValue> {
    if moves_elements(name) {
        return kernel(&mut Args::new(name, args, ctx));
    }
    let Some(scalar) = computed(name, dtype).filter(|_| shape_supported(name, args)) else {
        return Err(not_implemented_for(name, dtype));
    };
    let wide = conversion_dtype(dtype);
    let mut widened = Vec::with_capacity(args.len());
    for (i, a) in args.iter().enumerate() {
        widened.push(match a {
            IValue::Tensor(t) if t.dtype() == dtype => IValue::Tensor(t.to_dtype(wide)?),
            // another floating dtype beside this one: PyTorch refuses to promote float8, and
            // the widened result could not be rounded back to one dtype
            IValue::Tensor(t) if t.dtype().is_floating_point() || t.dtype().is_complex() => {
                return Err(not_implemented_for(name, t.dtype()));
            }
            v if scalar == Some(i) => rounded_scalar(v, dtype)?,
            v => v.clone(),
        });
    }
    let out = kernel(&mut Args::new(name, &mut widened, ctx))?;
    narrowed(out, dtype)
}

/// A scalar operand as PyTorch uses it against a `dtype` tensor: converted to `dtype` first.
fn rounded_scalar(v: &IValue, dtype: DType) -> crate::Result<IValue> {
    let Some(s) = v.as_scalar() else {
        return Ok(v.clone());
    };
    let t = Tensor::from_scalar(s, dtype)?.to_dtype(conversion_dtype(dtype))?;
    Ok(t.item()?.into())
}

/// A result computed on widened copies, rounded back: float results to `dtype` (its real
/// counterpart `float16` for complex32, as `abs` gives), complex ones to complex32.
fn narrowed(out: IValue, dtype: DType) -> crate::Result<IValue> {
    Ok(match out {
        IValue::Tensor(t) => IValue::Tensor(match t.dtype() {
            DType::Float32 => t.to_dtype(dtype.to_real())?,
            DType::Complex64 => t.to_dtype(DType::Complex32)?,
            _ => t,
        }),
        IValue::Tuple(items) => IValue::Tuple(Tuple::new(
            items
                .items()
                .iter()
                .map(|v| narrowed(v.clone(), dtype))
                .collect::<crate::Result<Vec<_>>>()?,
        )),
        other => other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_moving_operators_are_sorted_for_binary_search() {
        assert!(MOVES_ELEMENTS.windows(2).all(|w| w[0] < w[1]));
    }
}
