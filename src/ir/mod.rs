//! The intermediate representation: SSA graphs, schemas, printers and passes.

pub mod decls;
pub mod emit;
pub mod graph;
pub mod parse_graph;
pub mod passes;
pub mod printer;
pub mod python_print;
pub mod torchbind;
pub mod unit;
pub mod upgraders;

pub use graph::{Attr, BlockId, Graph, NodeId, ValueId};

/// An error compiling TorchScript source to IR, naming the construct and its source line.
#[derive(Clone, Debug, thiserror::Error)]
pub enum CompileError {
    /// A construct the compiler rejects, at the code it is in (for a call, its callee, as
    /// PyTorch's `ErrorReport` marks it).
    #[error("{location}: {message}")]
    At {
        location: String,
        message: String,
        /// The code the error points at, for a caret under it.
        at: Box<crate::error::CodeLocation>,
    },
    #[error("{0}")]
    Other(String),
    /// A call of an operator no schema is known for: a custom operator not registered (yet)
    /// with `tsrun::register_op`, or one PyTorch's operator table lacks. The run path reports it
    /// as an operator without a kernel (`Error::UnsupportedOps`).
    #[error("{location}: unknown operator {op}")]
    UnknownOperator {
        location: String,
        /// `myops::fused_gelu`.
        op: String,
        at: Box<crate::error::CodeLocation>,
    },
    /// A method or function that calls itself, directly or through others (TorchScript
    /// rejects recursion when it compiles).
    #[error("{location}: {message}")]
    Recursion { location: String, message: String },
    /// An operator upgrader (PyTorch's replacement of an operator call in an old archive)
    /// that does not compile or does not fit the call it replaces.
    #[error("upgrader {upgrader}: {message}")]
    Upgrader { upgrader: String, message: String },
}
