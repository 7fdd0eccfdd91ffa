//! A safe unpickler (allowlisted globals, persistent ids to storages) and a pickler.
//!
//! Archives never execute anything: the unpickler knows the handful of callables PyTorch's
//! pickler emits (tensor rebuilders, typed-container tags, storage classes, `torch.device`,
//! `complex`, `__torch__` classes) and rejects every other global by name.

mod graph_check;
mod pickler;
mod unpickler;

pub use pickler::Pickler;
pub use unpickler::{unpickle_data, EnumResolver, StorageLoader, Unpickler};

/// Deepest container nesting accepted in a pickle.
pub const MAX_NESTING: usize = 512;

/// Errors decoding or encoding a pickle. `record` names the pickle (e.g. `data.pkl`) and
/// `pos` the byte offset of the opcode at fault.
#[derive(Debug, thiserror::Error)]
pub enum PickleError {
    #[error("pickle: {0}")]
    Invalid(String),
    #[error("{record} byte {pos}: unknown pickle opcode 0x{opcode:02x}")]
    UnknownOpcode {
        record: String,
        pos: usize,
        opcode: u8,
    },
    #[error("{record} byte {pos}: pickle opcode {name} is not supported in TorchScript archives")]
    UnsupportedOpcode {
        record: String,
        pos: usize,
        name: &'static str,
    },
    #[error("{record} byte {pos}: global '{module}.{name}' is not allowed (archives never execute code)")]
    ForbiddenGlobal {
        record: String,
        pos: usize,
        module: String,
        name: String,
    },
    #[error("{record} byte {pos}: the pickle ends inside {what}")]
    Truncated {
        record: String,
        pos: usize,
        what: &'static str,
    },
    #[error("{record} byte {pos}: limit exceeded: {what}")]
    Limit {
        record: String,
        pos: usize,
        what: String,
    },
    #[error("{record} byte {pos}: {message}")]
    Malformed {
        record: String,
        pos: usize,
        message: String,
    },
    #[error("{record} byte {pos}: storage '{key}': {message}")]
    Storage {
        record: String,
        pos: usize,
        key: String,
        message: String,
    },
    #[error("{record}: {message}")]
    Structure { record: String, message: String },
    #[error("pickling: {0}")]
    Unpicklable(String),
}
