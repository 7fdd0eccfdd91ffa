//! The crate's layers, public only so that tests, benchmarks, fuzz targets and the `tsrun`
//! binary can reach them. Nothing here is a stable API: use the items re-exported at the crate
//! root (see [`crate::prelude`]).

#[path = "archive/mod.rs"]
pub mod archive;
#[cfg(feature = "cli")]
#[path = "cli/mod.rs"]
pub mod cli;
#[path = "frontend/mod.rs"]
pub mod frontend;
#[path = "ir/mod.rs"]
pub mod ir;
#[path = "ops/mod.rs"]
pub mod ops;
#[path = "pickle/mod.rs"]
pub mod pickle;
#[path = "runtime/mod.rs"]
pub mod runtime;
#[cfg(feature = "serve")]
#[path = "serve/mod.rs"]
pub mod serve;
#[path = "tensor/mod.rs"]
pub mod tensor;
#[path = "values/mod.rs"]
pub mod values;
