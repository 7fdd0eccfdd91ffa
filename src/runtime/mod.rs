//! The interpreter and the module API (values and their types are in `crate::values`).

pub mod interpreter;
pub mod limits;
pub mod module;
pub mod swa;

pub use crate::error::{RuntimeError, TracebackFrame};
// Upper layers (cli, serve) and code written before the values layer existed name values
// through runtime; layers below runtime use `crate::values`.
pub use crate::values::ivalue;
pub use crate::values::{
    Device, DeviceKind, Dict, DictKey, EnumValue, IValue, List, Object, TorchType, Tuple,
};
pub use limits::{CancelHandle, LoadOptions, QuantizedEngine, RunOptions, DEFAULT_MAX_STEPS};
pub use module::{manual_seed, set_num_threads, set_num_threads_for_this_thread, Module};
