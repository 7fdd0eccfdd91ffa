//! tsrun: load, inspect, run and save TorchScript archives in pure Rust.
//!
//! Pipeline: [`archive`] (zip records) -> [`pickle`] (module state) -> [`frontend`] (code to AST)
//! -> [`ir`] (SSA graphs, printers) -> [`runtime`] (interpreter, module API) -> [`ops`] (kernels)
//! over [`tensor`]. See ARCHITECTURE.md.

pub mod archive;
pub mod cli;
pub mod error;
pub mod frontend;
pub mod ir;
pub mod ops;
pub mod pickle;
pub mod runtime;
pub mod tensor;

pub use error::{Error, Result};
pub use runtime::IValue;
pub use tensor::{DType, Scalar, Tensor};
