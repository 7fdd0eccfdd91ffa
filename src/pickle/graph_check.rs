//! Checks on unpickled value graphs (nesting depth, cycles) and a drop that cannot overflow
//! the stack, for rejecting hostile pickles safely.

use crate::values::IValue;
use std::collections::{HashMap, HashSet};

/// Identity of a container value, `None` for leaves.
fn container_id(v: &IValue) -> Option<usize> {
    match v {
        IValue::List(l) => Some(std::sync::Arc::as_ptr(&l.0) as *const u8 as usize),
        IValue::Tuple(t) => Some(std::sync::Arc::as_ptr(&t.0) as *const u8 as usize),
        IValue::Dict(d) => Some(std::sync::Arc::as_ptr(&d.0) as *const u8 as usize),
        IValue::Object(o) => Some(std::sync::Arc::as_ptr(&o.0) as *const u8 as usize),
        _ => None,
    }
}

fn children(v: &IValue) -> Vec<IValue> {
    match v {
        IValue::List(l) => l.to_vec(),
        IValue::Tuple(t) => t.items().to_vec(),
        IValue::Dict(d) => d
            .items()
            .values()
            .flat_map(|(k, v)| [k.clone(), v.clone()])
            .collect(),
        // an object pickled through `__getstate__` holds its content as `state`
        IValue::Object(o) => o.fields().values().cloned().chain(o.state()).collect(),
        _ => Vec::new(),
    }
}

/// Why a value graph was rejected.
pub enum GraphProblem {
    TooDeep,
    Cycle,
}

/// Verify that no value reachable from `roots` nests deeper than `max_depth` or contains itself.
/// Iterative, linear in the number of distinct containers. A shared container is walked once;
/// its height (levels of containers from it down) is remembered, so the depth verdict does not
/// depend on which path reaches it first.
pub fn check(roots: &[IValue], max_depth: usize) -> Result<(), GraphProblem> {
    struct Frame {
        id: usize,
        children: Vec<IValue>,
        next: usize,
        /// Tallest container below this one, in levels.
        below: usize,
    }
    let mut height: HashMap<usize, usize> = HashMap::new();
    let mut on_path: HashSet<usize> = HashSet::new();
    for root in roots {
        let Some(id) = container_id(root) else {
            continue;
        };
        if height.contains_key(&id) {
            continue;
        }
        let mut frames = vec![Frame {
            id,
            children: children(root),
            next: 0,
            below: 0,
        }];
        on_path.insert(id);
        while let Some(top) = frames.last_mut() {
            if let Some(child) = top.children.get(top.next).cloned() {
                top.next += 1;
                let Some(cid) = container_id(&child) else {
                    continue;
                };
                if on_path.contains(&cid) {
                    return Err(GraphProblem::Cycle);
                }
                if let Some(&h) = height.get(&cid) {
                    top.below = top.below.max(h);
                    if frames.len() + h > max_depth {
                        return Err(GraphProblem::TooDeep);
                    }
                    continue;
                }
                if frames.len() >= max_depth {
                    return Err(GraphProblem::TooDeep);
                }
                on_path.insert(cid);
                frames.push(Frame {
                    id: cid,
                    children: children(&child),
                    next: 0,
                    below: 0,
                });
            } else {
                let h = top.below + 1;
                on_path.remove(&top.id);
                height.insert(top.id, h);
                frames.pop();
                if let Some(parent) = frames.last_mut() {
                    parent.below = parent.below.max(h);
                }
            }
        }
    }
    Ok(())
}

/// Drop values without recursion: containers are emptied one by one, which also breaks cycles.
pub fn dismantle(values: Vec<IValue>) {
    let mut work = values;
    let mut seen: HashMap<usize, ()> = HashMap::new();
    while let Some(v) = work.pop() {
        // Tuples are immutable: only their last handle can take the items out.
        if let (Some(id), false) = (container_id(&v), matches!(v, IValue::Tuple(_))) {
            if seen.insert(id, ()).is_some() {
                continue;
            }
        }
        match v {
            IValue::List(l) => work.append(&mut std::mem::take(&mut *l.items_mut())),
            IValue::Dict(d) => {
                let items = std::mem::take(&mut *d.items_mut());
                for (_, (k, v)) in items {
                    work.push(k);
                    work.push(v);
                }
            }
            IValue::Object(o) => {
                let fields = std::mem::take(&mut *o.0.fields.write());
                work.extend(fields.into_values());
                work.extend(o.0.state.write().take());
            }
            IValue::Tuple(t) => {
                if let Ok(inner) = std::sync::Arc::try_unwrap(t.0) {
                    work.extend(inner.items);
                }
            }
            _ => {}
        }
    }
}
