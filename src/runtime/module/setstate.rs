//! Objects pickled through `__getstate__`: PyTorch's unpickler calls the class's
//! `__setstate__(state)` as each such object is built (quantized modules re-pack their weights
//! there). tsrun runs the archive's own `__setstate__` code once the program is compiled,
//! innermost objects first, as PyTorch's BUILD order does. Torchbind objects (C++ classes such
//! as `__torch__.torch.classes.quantized.LinearPackedParamsBase`) keep their state as their
//! content; their methods are native (`ops::quantized::torchbind`).

use super::{module_err, Module};
use crate::values::{IValue, Object};
use crate::Result;
use std::collections::HashSet;
use std::sync::Arc;

impl Module {
    /// Run `__setstate__` on every object of the tree that was pickled with a state value.
    pub(super) fn apply_setstate(&self) -> Result<()> {
        let mut order = Vec::new();
        let mut seen = HashSet::new();
        collect_post_order(
            &IValue::Object(self.object().clone()),
            &mut seen,
            &mut order,
            0,
        );
        for obj in order {
            if obj.is_torchbind() {
                continue;
            }
            let Some(state) = obj.state() else { continue };
            let handle = self.with_object(obj.clone());
            if !handle.method_names().iter().any(|m| m == "__setstate__") {
                return Err(module_err(format!(
                    "object of class {} was pickled with a {} state but its class has no __setstate__",
                    obj.class_name(),
                    state.kind_name()
                )));
            }
            handle.run_method("__setstate__", &[state])?;
        }
        Ok(())
    }
}

/// Objects reachable from `v` (through fields and pickled states), children before parents.
fn collect_post_order(v: &IValue, seen: &mut HashSet<usize>, out: &mut Vec<Object>, depth: usize) {
    if depth > crate::pickle::MAX_NESTING {
        return;
    }
    match v {
        IValue::Object(o) => {
            if !seen.insert(Arc::as_ptr(&o.0) as usize) {
                return;
            }
            let fields: Vec<IValue> = o.fields().values().cloned().collect();
            for f in &fields {
                collect_post_order(f, seen, out, depth + 1);
            }
            if let Some(state) = o.state() {
                collect_post_order(&state, seen, out, depth + 1);
            }
            out.push(o.clone());
        }
        IValue::List(l) => {
            for x in l.to_vec() {
                collect_post_order(&x, seen, out, depth + 1);
            }
        }
        IValue::Tuple(t) => {
            for x in t.items() {
                collect_post_order(x, seen, out, depth + 1);
            }
        }
        IValue::Dict(d) => {
            for (_, x) in d.entries() {
                collect_post_order(&x, seen, out, depth + 1);
            }
        }
        _ => {}
    }
}
