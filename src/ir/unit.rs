//! The compilation unit: every class (modules, script classes, NamedTuples, enums, interfaces)
//! and free function of a program, with their methods compiled to graphs.

/// All compiled code of one loaded archive.
#[derive(Default)]
pub struct CompilationUnit {}
