//! What the emitter needs to know of the program around the function it compiles: declared
//! classes (attributes, constants, method signatures), function signatures and the archive's
//! tensor constants, behind the [`Declarations`] trait the compilation unit implements. Split
//! from `unit.rs` so that the emitter does not depend on the unit that drives it.

use crate::frontend::ast::{self, ClassKind};
use crate::ir::graph::Graph;
use crate::ir::CompileError;
use crate::values::{IValue, Type};
use indexmap::IndexMap;
use std::sync::Arc;

/// The declarations of a program the emitter looks up (implemented by the compilation unit).
pub trait Declarations {
    /// The class named `qualname`.
    fn class(&self, qualname: &str) -> Option<&Arc<ClassInfo>>;
    /// The signature of free function `qualname`.
    fn function_signature(&self, qualname: &str) -> Option<&Signature>;
    /// Entry `index` of the archive's `constants.pkl` tuple (`CONSTANTS.c<index>`).
    fn tensor_constant(&self, index: usize) -> Option<IValue>;
    /// The compiled graph of operator upgrader `upgrader` (`div_Tensor_0_3`), which replaces
    /// calls of an operator whose schema or meaning changed after the archive was written.
    fn upgrader_graph(&self, upgrader: &str) -> Result<Arc<Graph>, CompileError>;
}

/// One declared parameter of a function or method.
#[derive(Clone, Debug)]
pub struct Param {
    pub name: String,
    pub ty: Type,
    pub default: Option<IValue>,
    pub kwarg_only: bool,
}

/// A function's signature, from its fully typed `def`.
#[derive(Clone, Debug)]
pub struct Signature {
    pub params: Vec<Param>,
    pub return_type: Type,
}

/// A method's definition: where its source is.
pub(crate) struct MethodDecl {
    pub(crate) def: ast::FunctionDef,
    pub(crate) file: Arc<ast::File>,
    pub(crate) signature: Signature,
}

/// A class of the program.
pub struct ClassInfo {
    pub qualname: Arc<str>,
    pub kind: ClassKind,
    /// Declared attributes with their types, in declaration order (parameters and buffers
    /// included).
    pub attributes: Vec<(String, Type)>,
    pub parameters: Vec<String>,
    pub buffers: Vec<String>,
    /// `Final` constants with their values.
    pub constants: Vec<(String, IValue)>,
    /// NamedTuple fields with their defaults.
    pub fields: Vec<(String, Type, Option<IValue>)>,
    /// Enum members and their values.
    pub enum_values: Vec<(String, IValue)>,
    pub(crate) methods: IndexMap<String, MethodDecl>,
}

impl ClassInfo {
    pub fn attribute_type(&self, name: &str) -> Option<&Type> {
        self.attributes
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t)
    }
    pub fn constant(&self, name: &str) -> Option<&IValue> {
        self.constants
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
    }
    pub fn method_names(&self) -> Vec<String> {
        self.methods.keys().cloned().collect()
    }
    pub fn method_signature(&self, name: &str) -> Option<&Signature> {
        self.methods.get(name).map(|m| &m.signature)
    }
    pub fn has_method(&self, name: &str) -> bool {
        self.methods.contains_key(name)
    }
}
