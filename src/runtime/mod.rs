//! Values, objects and (in later modules) the interpreter and the module API.

pub mod ivalue;
pub mod module;

pub use ivalue::{Device, DeviceKind, Dict, DictKey, EnumValue, IValue, List, Object, Tuple};
pub use module::Module;

/// An error raised while running TorchScript code.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("{0}")]
    Other(String),
}
