//! `repr(script_module)`: `RecursiveScriptModule(original_name=Net ...)` with one line per child,
//! as `nn.Module.__repr__` prints a loaded module.

use super::{short_name, Module};
use std::fmt;

impl Module {
    /// `extra_repr()` of a script module: `original_name=<class name>`.
    pub fn extra_repr(&self) -> String {
        format!("original_name={}", short_name(self.class_name()))
    }

    fn repr_depth(&self, depth: usize) -> String {
        let extra = self.extra_repr();
        let children: Vec<String> = if depth > crate::pickle::MAX_NESTING {
            Vec::new()
        } else {
            self.named_children()
                .into_iter()
                // `_addindent(repr(child), 2)`: every line after the first indented by two
                .map(|(name, m)| {
                    format!(
                        "({name}): {}",
                        m.repr_depth(depth + 1).replace('\n', "\n  ")
                    )
                })
                .collect()
        };
        if children.is_empty() {
            return format!("RecursiveScriptModule({extra})");
        }
        let mut lines = vec![extra];
        lines.extend(children);
        format!("RecursiveScriptModule(\n  {}\n)", lines.join("\n  "))
    }
}

impl fmt::Display for Module {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.repr_depth(0))
    }
}
