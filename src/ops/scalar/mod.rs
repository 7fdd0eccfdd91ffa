//! Builtins on non-tensor values that TorchScript code calls as operators, a file per concern:
//! `numbers.rs` (int/float/bool/complex arithmetic and math), `conversions.rs`, `lists.rs`,
//! `dicts.rs`, `strings.rs` and `prims.rs` (the `prim::` queries on tensors: `prim::dtype`,
//! `prim::device`, ...), each registering its own kernels; this file holds the shared helpers
//! and `register`, which calls theirs in turn. Semantics follow PyTorch's
//! `register_prim_ops.cpp` (Python semantics for `//`, `%`, indexing and slicing).
//!
//! Many kernels serve every overload of an operator by looking at the values they get (a list or
//! a dict, an int or a float), so they are registered under each overload name. Bare names that
//! also have tensor overloads are registered only when no other family has claimed them.

use super::{Args, Registry};
use crate::error::RuntimeError;
use crate::tensor::{DType, Scalar, Tensor};
use crate::values::types::Type;
use crate::values::{python_str, Device, Dict, IValue, List, Tuple};
use crate::Error;
use num_complex::Complex64;
use std::cmp::Ordering;

mod conversions;
mod dicts;
mod lists;
mod numbers;
mod prims;
mod strings;

pub use lists::slice_indices;
use lists::*;
pub use numbers::values_equal;
use numbers::*;
use prims::*;
use strings::*;

type R = crate::Result<IValue>;

fn err(msg: impl Into<String>) -> Error {
    RuntimeError::Other(msg.into()).into()
}

/// A failure of a TorchScript builtin (an index out of range, a missing key, a division by
/// zero): PyTorch's interpreter reports each as a `RuntimeError` whose message is its C++
/// text, naming a Python exception in some (`KeyError: b`, `ValueError: substring not found`).
fn script_error(message: impl Into<String>) -> Error {
    RuntimeError::Exception {
        kind: "RuntimeError".to_string(),
        message: message.into(),
    }
    .into()
}

// ---------------------------------------------------------------------------------------------

/// The generic number families below list every combination; PyTorch defines a subset per
/// function, and only those are registered.
fn add_overloads(r: &mut Registry, op: &str, overloads: &[&str], k: super::Kernel) {
    r.add_defined_overloads(op, overloads, k);
}

/// Register `name` unless another family already did (names shared with tensor ops), and only
/// if PyTorch defines it.
fn add_if_absent(r: &mut Registry, name: &str, k: super::Kernel) {
    if !r.contains(name) {
        r.add_if_defined(name, k);
    }
}

/// Every family's builtins, in an order that matters: names registered with
/// [`add_if_absent`] (`prim::abs`) depend on what came before.
pub(crate) fn register(r: &mut Registry) {
    numbers::register(r);
    conversions::register(r);
    lists::register(r);
    dicts::register(r);
    strings::register(r);
    prims::register(r);
}
