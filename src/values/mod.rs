//! The values every layer passes around: [`IValue`] (TorchScript's values with PyTorch's
//! reference semantics) and its companion types, the TorchScript [`Type`], and the text of
//! numbers and values as PyTorch prints them. Only `tensor` sits below.

pub mod aten_format;
pub mod format;
pub mod generator;
pub mod ivalue;
pub mod ivalue_convert;
pub mod types;

pub use format::python_str;
pub use generator::{Generator, SharedGenerator};
pub use ivalue::{
    matches_type, Device, DeviceKind, Dict, DictKey, EnumValue, FutureValue, IValue, List, Object,
    Tuple,
};
pub use ivalue_convert::TorchType;
pub use types::Type;
