//! What the interpreter needs from compiled code: method and function graphs by name, and the
//! forward hooks a class declares.

use super::plan::Plan;
use crate::ir::passes::CalleeGraphs;
use crate::ir::Graph;
use std::sync::Arc;

/// Builds a plan from a graph; handed to [`Program`] so graphs need not outlive the call.
pub type PlanBuilder<'a> = &'a mut dyn FnMut(&Graph) -> crate::Result<Plan>;

/// The code of a loaded program (implemented over the compilation unit).
pub trait Program: Send + Sync {
    /// Build the plan of method `name` of class `class` (qualified name; the graph's first input
    /// is `self`). `Ok(None)` when the class has no such method.
    fn method(
        &self,
        class: &str,
        name: &str,
        build: PlanBuilder<'_>,
    ) -> crate::Result<Option<Plan>>;
    /// Build the plan of free function `qualname`; `Ok(None)` when there is none.
    fn function(&self, qualname: &str, build: PlanBuilder<'_>) -> crate::Result<Option<Plan>>;
    /// The graph of method `name` of `class` with its calls inlined, for reading what a module
    /// computes (fused module chains); `None` when there is none or it is not available.
    fn inlined_method(&self, _class: &str, _name: &str) -> Option<Arc<Graph>> {
        None
    }
    /// The graphs calls invoke, for inlining calls on parameters into a plan's graph (see
    /// `ir::passes::invariant_regions`); `None` when not available.
    fn callee_graphs(&self) -> Option<&dyn CalleeGraphs> {
        None
    }
    /// Methods of `class` to run before `forward` when the module is called
    /// (`__forward_pre_hooks__`), in order.
    fn forward_pre_hooks(&self, _class: &str) -> Vec<String> {
        Vec::new()
    }
    /// Methods of `class` to run after `forward` when the module is called (`__forward_hooks__`).
    fn forward_hooks(&self, _class: &str) -> Vec<String> {
        Vec::new()
    }
}
