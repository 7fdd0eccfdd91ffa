//! tsrun: load, inspect, run and save TorchScript archives in pure Rust.
//!
//! ```no_run
//! use tsrun::prelude::*;
//!
//! # fn main() -> tsrun::Result<()> {
//! let model = Module::load("model.pt")?;
//! let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[1, 4])?;
//! let y = model.forward(&[IValue::Tensor(x)])?;
//! println!("{y:?}");
//! # Ok(())
//! # }
//! ```
//!
//! The crate root holds the whole supported surface: [`Module`] (load, inspect, change, save
//! and run an archive), [`Tensor`], [`IValue`] (TorchScript values), [`DType`], [`Error`] and
//! [`Result`], the load and call limits ([`LoadOptions`], [`RunOptions`]), weight averaging
//! ([`swa`]), grad-mode switches, custom operators ([`register_op`]) and golden-file checks
//! against PyTorch's outputs ([`golden`]). Layers inside, lowest first (imports only go down): error,
//! tensor, values (TorchScript values and types), archive (zip records), pickle (module state),
//! frontend (code to AST), ops (schemas, kernels), ir (SSA graphs, passes, printers), runtime
//! (interpreter, module API), then cli and serve; see ARCHITECTURE.md. Those layers are
//! reachable under [`internals`] for tests and the binary, with no stability promise.

#![deny(missing_docs)]
// Generic kernels are instantiated for every dtype by the `dispatch_*!` macros, bool included;
// for bool these lints flag comparisons that are right for every other element type.
#![allow(clippy::bool_comparison, clippy::neg_cmp_op_on_partial_ord)]

pub mod error;
pub mod golden;

// The README's Rust snippets compile as doc tests, so the documented API cannot drift.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
#[doc(hidden)]
pub mod internals;
pub mod prelude;

// The layers keep their crate paths (`crate::ops::...`) inside the crate.
#[cfg(feature = "serve")]
pub(crate) use internals::serve;
pub(crate) use internals::{archive, frontend, ir, ops, pickle, runtime, tensor, values};

pub use error::{set_warnings_enabled, Error, ErrorKind, Result};
pub use ops::custom::{register_op, CustomKernel};
pub use ops::grad_mode::{is_grad_enabled, no_grad, set_grad_enabled};
pub use runtime::module::{
    read_state_dict, write_state_dict, HookHandle, IncompatibleKeys, McSamples, MemoryFormat,
    StateDict,
};
pub use runtime::swa;
pub use runtime::{
    manual_seed, set_num_threads, CancelHandle, LoadOptions, Module, QuantizedEngine, RunOptions,
};
pub use tensor::{DType, Scalar, Tensor};
pub use values::{Device, Dict, DictKey, IValue, List, Object, TorchType, Tuple};
