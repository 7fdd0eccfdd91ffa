//! tsrun: load, inspect, run and save TorchScript archives in pure Rust.
//!
//! Pipeline: [`archive`] (zip records) -> [`pickle`] (module state) -> [`frontend`] (code to AST)
//! -> [`ir`] (SSA graphs, printers) -> [`runtime`] (interpreter, module API) -> [`ops`] (kernels)
//! over [`tensor`]; [`golden`] checks results against PyTorch's golden files. See ARCHITECTURE.md.

// Generic kernels are instantiated for every dtype by the `dispatch_*!` macros, bool included;
// for bool these lints flag comparisons that are right for every other element type.
#![allow(clippy::bool_comparison, clippy::neg_cmp_op_on_partial_ord)]

pub mod archive;
pub mod cli;
pub mod error;
pub mod frontend;
pub mod golden;
pub mod ir;
pub mod ops;
pub mod pickle;
pub mod runtime;
#[cfg(feature = "serve")]
pub mod serve;
pub mod tensor;

pub use error::{Error, Result};
pub use ops::grad_mode::{is_grad_enabled, no_grad, set_grad_enabled};
pub use runtime::swa;
pub use runtime::IValue;
pub use runtime::{manual_seed, Module};
pub use tensor::{DType, Scalar, Tensor};
