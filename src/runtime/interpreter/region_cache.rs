//! The cache of a parameter-only region (`ir::passes::invariant_regions`): the results the
//! region computed, kept with stamps of every value it read. A call whose reads match a kept
//! entry takes its results; `load_state_dict`, `set_attr`, in-place writes and another receiver
//! give other stamps, so the region runs again. Results are checked too: one written in place
//! since (by code the rewrite could not see, through a view) is computed again.

use crate::tensor::{Tensor, ViewStamp};
use crate::values::IValue;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Most entries a region keeps (one per receiver of the method and set of parameters; beyond
/// it the oldest is dropped).
const MAX_ENTRIES: usize = 512;

/// What a region read, as its cache compares it.
#[derive(Debug)]
enum Stamp {
    Tensor(ViewStamp),
    /// A number, string, device, dtype or `None`, compared by value (floats by bits).
    Value(IValue),
    /// A list of tensors (`None` for a missing optional) or numbers.
    List(Vec<Stamp>),
}

impl Stamp {
    fn of(v: &IValue) -> Option<Stamp> {
        Some(match v {
            IValue::Tensor(t) => Stamp::Tensor(ViewStamp::of(t)?),
            IValue::None
            | IValue::Int(_)
            | IValue::Double(_)
            | IValue::Bool(_)
            | IValue::String(_)
            | IValue::Device(_) => Stamp::Value(v.clone()),
            IValue::List(l) => Stamp::List(
                l.items()
                    .iter()
                    .map(Stamp::of)
                    .collect::<Option<Vec<_>>>()?,
            ),
            _ => return None,
        })
    }

    fn matches(&self, v: &IValue) -> bool {
        match (self, v) {
            (Stamp::Tensor(s), IValue::Tensor(t)) => s.matches(t),
            (Stamp::Value(IValue::Double(a)), IValue::Double(b)) => a.to_bits() == b.to_bits(),
            (Stamp::Value(IValue::None), IValue::None) => true,
            (Stamp::Value(IValue::Int(a)), IValue::Int(b)) => a == b,
            (Stamp::Value(IValue::Bool(a)), IValue::Bool(b)) => a == b,
            (Stamp::Value(IValue::String(a)), IValue::String(b)) => a == b,
            (Stamp::Value(IValue::Device(a)), IValue::Device(b)) => a == b,
            (Stamp::List(items), IValue::List(l)) => {
                let l = l.items();
                items.len() == l.len() && items.iter().zip(l.iter()).all(|(s, v)| s.matches(v))
            }
            _ => false,
        }
    }

    /// Whether no input can match again (see [`ViewStamp::is_stale`]).
    fn is_stale(&self) -> bool {
        match self {
            Stamp::Tensor(s) => s.is_stale(),
            Stamp::Value(_) => false,
            Stamp::List(items) => items.iter().any(Stamp::is_stale),
        }
    }
}

/// The stamps of a region's inputs, taken before the region reads them; `None` when one
/// cannot be stamped (an object, a sparse tensor), and then nothing is kept.
pub(crate) struct Stamps(Vec<Stamp>);

impl Stamps {
    pub(crate) fn of(inputs: &[IValue]) -> Option<Stamps> {
        inputs
            .iter()
            .map(Stamp::of)
            .collect::<Option<_>>()
            .map(Stamps)
    }

    fn matches(&self, inputs: &[IValue]) -> bool {
        self.0.len() == inputs.len() && self.0.iter().zip(inputs).all(|(s, v)| s.matches(v))
    }
}

struct Entry {
    inputs: Stamps,
    /// The results, each tensor with its storage's version when kept.
    outputs: Vec<(IValue, Option<u64>)>,
}

impl Entry {
    fn outputs_unwritten(&self) -> bool {
        self.outputs.iter().all(|(v, version)| match (v, version) {
            (IValue::Tensor(t), Some(ver)) => t.storage().version() == *ver,
            _ => true,
        })
    }
}

fn version(v: &IValue) -> Option<u64> {
    match v {
        IValue::Tensor(t) => Some(Tensor::storage(t).version()),
        _ => None,
    }
}

/// A region's kept results.
#[derive(Default)]
pub(crate) struct RegionCache {
    entries: Mutex<Vec<Entry>>,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl std::fmt::Debug for RegionCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RegionCache({} entries)", self.entries.lock().len())
    }
}

impl RegionCache {
    /// The kept results for `inputs`, if their stamps match an entry and its results are
    /// unwritten.
    pub(crate) fn get(&self, inputs: &[IValue]) -> Option<Vec<IValue>> {
        let entries = self.entries.lock();
        let hit = entries
            .iter()
            .find(|e| e.inputs.matches(inputs))
            .filter(|e| e.outputs_unwritten())
            .map(|e| e.outputs.iter().map(|(v, _)| v.clone()).collect());
        drop(entries);
        match hit {
            Some(_) => self.hits.fetch_add(1, Ordering::Relaxed),
            None => self.misses.fetch_add(1, Ordering::Relaxed),
        };
        hit
    }

    /// Keep `outputs`, computed from inputs stamped `stamps`, dropping the entries that can
    /// no longer match (a parameter freed or written since) or whose results were written.
    pub(crate) fn put(&self, stamps: Stamps, outputs: &[IValue]) {
        let mut entries = self.entries.lock();
        entries.retain(|e| !e.inputs.0.iter().any(Stamp::is_stale) && e.outputs_unwritten());
        if entries.len() >= MAX_ENTRIES {
            entries.remove(0);
        }
        entries.push(Entry {
            inputs: stamps,
            outputs: outputs.iter().map(|v| (v.clone(), version(v))).collect(),
        });
    }

    /// Calls that took kept results, and calls that ran the region.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }
}
