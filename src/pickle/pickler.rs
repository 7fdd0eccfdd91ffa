//! The pickler: writes `data.pkl` / `constants.pkl` the way PyTorch's C++ pickler does
//! (protocol 2, `__torch__` objects via NEWOBJ + BUILD, typed containers via
//! `restore_type_tag`, tensors via `_rebuild_tensor_v2` and storage persistent ids).

use super::PickleError;
use crate::tensor::{
    DType, Element, Layout, Quantizer, SparseParts, Storage, Tensor, TensorIdentity,
};
use crate::values::types::Type;
use crate::values::IValue;
use std::collections::HashMap;
use std::sync::Arc;

type Result<T> = std::result::Result<T, PickleError>;

/// The pickle bytes and the storages it references, in persistent-id order.
pub type Pickled = (Vec<u8>, Vec<(Storage, DType)>);

/// One pickle being written. Storages met along the way are numbered in order of first
/// appearance; `Pickler::storages` lists them for the archive writer.
pub struct Pickler {
    out: Vec<u8>,
    next_memo: u32,
    strings: HashMap<Arc<str>, u32>,
    globals: HashMap<(String, String), u32>,
    /// Memo slots of shared containers/objects by identity, so aliasing survives a round trip.
    shared: HashMap<usize, u32>,
    /// Storage key and memo slot of the persistent id of each storage met, by storage id.
    storage_keys: HashMap<usize, (usize, u32)>,
    storages: Vec<(Storage, DType)>,
    /// Memo slots of tensors already written, by identity. PyTorch's pickler memoizes shared
    /// tensors too, so after `torch.jit.load` they are one tensor again and `Module.to(dtype)`
    /// (which swaps a parameter's data in place) reaches every reference to it.
    tensors: HashMap<TensorIdentity, u32>,
    /// Keys are offset by this (PyTorch numbers constants' storages separately from data's).
    key_base: usize,
    depth: usize,
}

impl Default for Pickler {
    fn default() -> Self {
        Self::new()
    }
}

impl Pickler {
    pub fn new() -> Pickler {
        Pickler {
            out: vec![0x80, 2],
            next_memo: 0,
            strings: HashMap::new(),
            globals: HashMap::new(),
            shared: HashMap::new(),
            storage_keys: HashMap::new(),
            storages: Vec::new(),
            tensors: HashMap::new(),
            key_base: 0,
            depth: 0,
        }
    }

    /// Pickle `v` as the whole content and return the bytes (with STOP).
    pub fn finish(mut self, v: &IValue) -> Result<Pickled> {
        self.push(v)?;
        self.out.push(b'.');
        Ok((self.out, self.storages))
    }

    fn memoize(&mut self) -> u32 {
        let idx = self.next_memo;
        self.next_memo += 1;
        if idx < 256 {
            self.out.push(b'q');
            self.out.push(idx as u8);
        } else {
            self.out.push(b'r');
            self.out.extend_from_slice(&idx.to_le_bytes());
        }
        idx
    }

    fn get(&mut self, idx: u32) {
        if idx < 256 {
            self.out.push(b'h');
            self.out.push(idx as u8);
        } else {
            self.out.push(b'j');
            self.out.extend_from_slice(&idx.to_le_bytes());
        }
    }

    fn global(&mut self, module: &str, name: &str) {
        let key = (module.to_string(), name.to_string());
        if let Some(&idx) = self.globals.get(&key) {
            self.get(idx);
            return;
        }
        self.out.push(b'c');
        self.out.extend_from_slice(module.as_bytes());
        self.out.push(b'\n');
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(b'\n');
        let idx = self.memoize();
        self.globals.insert(key, idx);
    }

    fn string(&mut self, s: &Arc<str>) {
        if let Some(&idx) = self.strings.get(s) {
            self.get(idx);
            return;
        }
        self.out.push(b'X');
        self.out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        self.out.extend_from_slice(s.as_bytes());
        let idx = self.memoize();
        self.strings.insert(s.clone(), idx);
    }

    fn int(&mut self, i: i64) {
        if (0..=0xff).contains(&i) {
            self.out.push(b'K');
            self.out.push(i as u8);
        } else if (0..=0xffff).contains(&i) {
            self.out.push(b'M');
            self.out.extend_from_slice(&(i as u16).to_le_bytes());
        } else if i32::try_from(i).is_ok() {
            self.out.push(b'J');
            self.out.extend_from_slice(&(i as i32).to_le_bytes());
        } else {
            self.out.push(0x8a);
            self.out.push(8);
            self.out.extend_from_slice(&i.to_le_bytes());
        }
    }

    fn float(&mut self, f: f64) {
        self.out.push(b'G');
        self.out.extend_from_slice(&f.to_be_bytes());
    }

    fn tuple(&mut self, items: &[IValue]) -> Result<()> {
        match items.len() {
            0 => self.out.push(b')'),
            1..=3 => {
                for x in items {
                    self.push(x)?;
                }
                self.out.push(0x85 + (items.len() as u8 - 1));
            }
            _ => {
                self.out.push(b'(');
                for x in items {
                    self.push(x)?;
                }
                self.out.push(b't');
            }
        }
        Ok(())
    }

    /// Reuse the memo slot of an already pickled shared value; `true` if done.
    fn reuse(&mut self, id: usize) -> bool {
        if let Some(&idx) = self.shared.get(&id) {
            self.get(idx);
            true
        } else {
            false
        }
    }

    fn remember(&mut self, id: usize) {
        let idx = self.memoize();
        self.shared.insert(id, idx);
    }

    fn push(&mut self, v: &IValue) -> Result<()> {
        self.depth += 1;
        if self.depth > super::MAX_NESTING {
            return Err(PickleError::Unpicklable(format!(
                "values nest deeper than {} levels",
                super::MAX_NESTING
            )));
        }
        let r = self.push_inner(v);
        self.depth -= 1;
        r
    }

    fn push_inner(&mut self, v: &IValue) -> Result<()> {
        match v {
            IValue::None => self.out.push(b'N'),
            IValue::Bool(b) => self.out.push(if *b { 0x88 } else { 0x89 }),
            IValue::Int(i) => self.int(*i),
            IValue::Double(f) => self.float(*f),
            IValue::Complex(c) => {
                self.global("builtins", "complex");
                self.float(c.re);
                self.float(c.im);
                self.out.push(0x86);
                self.out.push(b'R');
            }
            IValue::String(s) => self.string(s),
            IValue::Device(d) => {
                self.global("torch", "device");
                self.string(&Arc::from(d.to_string()));
                self.out.push(0x85);
                self.out.push(b'R');
            }
            IValue::Tuple(t) => self.tuple(t.items())?,
            IValue::List(l) => {
                let id = Arc::as_ptr(&l.0) as *const u8 as usize;
                if self.reuse(id) {
                    return Ok(());
                }
                let items = l.to_vec();
                let specialized = match l.elem_type() {
                    Type::Int => Some("build_intlist"),
                    Type::Float => Some("build_doublelist"),
                    Type::Bool => Some("build_boollist"),
                    Type::Tensor => Some("build_tensorlist"),
                    _ => None,
                };
                match specialized {
                    Some(builder) => {
                        self.global("torch.jit._pickle", builder);
                        self.out.push(b'(');
                        self.list_body(&items)?;
                        self.out.push(b't');
                        self.out.push(b'R');
                    }
                    None if *l.elem_type() == Type::Any => self.list_body(&items)?,
                    None => {
                        self.global("torch.jit._pickle", "restore_type_tag");
                        self.list_body(&items)?;
                        let tag = Type::list(l.elem_type().clone()).annotation_str();
                        self.string(&Arc::from(tag));
                        self.out.push(0x86);
                        self.out.push(b'R');
                    }
                }
                self.remember(id);
            }
            IValue::Dict(d) => {
                let id = Arc::as_ptr(&d.0) as *const u8 as usize;
                if self.reuse(id) {
                    return Ok(());
                }
                let typed = *d.key_type() != Type::Any || *d.value_type() != Type::Any;
                if typed {
                    self.global("torch.jit._pickle", "restore_type_tag");
                }
                self.out.push(b'}');
                let entries = d.entries();
                if !entries.is_empty() {
                    self.out.push(b'(');
                    for (k, v) in &entries {
                        self.push(k)?;
                        self.push(v)?;
                    }
                    self.out.push(b'u');
                }
                if typed {
                    let tag =
                        Type::dict(d.key_type().clone(), d.value_type().clone()).annotation_str();
                    self.string(&Arc::from(tag));
                    self.out.push(0x86);
                    self.out.push(b'R');
                }
                self.remember(id);
            }
            IValue::Object(o) => {
                let id = Arc::as_ptr(&o.0) as *const u8 as usize;
                if self.reuse(id) {
                    return Ok(());
                }
                let class = o.class_name().clone();
                let (module, name) = class.rsplit_once('.').ok_or_else(|| {
                    PickleError::Unpicklable(format!("class name '{class}' is not qualified"))
                })?;
                self.global(module, name);
                self.out.push(b')');
                self.out.push(0x81);
                if let Some(state) = o.state() {
                    // `__getstate__` classes and torchbind objects pickle their state value
                    self.push(&state)?;
                    self.out.push(b'b');
                    self.remember(id);
                    return Ok(());
                }
                let fields: Vec<(Arc<str>, IValue)> = o
                    .fields()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                self.out.push(b'}');
                if !fields.is_empty() {
                    self.out.push(b'(');
                    for (k, v) in &fields {
                        self.string(k);
                        self.push(v)?;
                    }
                    self.out.push(b'u');
                }
                self.out.push(b'b');
                self.remember(id);
            }
            IValue::Enum(e) => {
                let (module, name) = e.class.rsplit_once('.').ok_or_else(|| {
                    PickleError::Unpicklable(format!("enum class '{}' is not qualified", e.class))
                })?;
                self.global(module, name);
                self.push(&e.value)?;
                self.out.push(b'R');
            }
            IValue::Tensor(t) => self.tensor(t)?,
            other => {
                return Err(PickleError::Unpicklable(format!(
                    "values of kind {} cannot be saved",
                    other.kind_name()
                )))
            }
        }
        Ok(())
    }

    fn list_body(&mut self, items: &[IValue]) -> Result<()> {
        self.out.push(b']');
        if !items.is_empty() {
            self.out.push(b'(');
            for x in items {
                self.push(x)?;
            }
            self.out.push(b'e');
        }
        Ok(())
    }

    fn tensor(&mut self, t: &Tensor) -> Result<()> {
        let identity = t.identity();
        if let Some(&idx) = self.tensors.get(&identity) {
            self.get(idx);
            return Ok(());
        }
        if let Some(parts) = t.sparse_parts() {
            return self.sparse_tensor(t, parts, identity);
        }
        if t.is_nested() {
            return Err(PickleError::Unpicklable(
                "a nested tensor (tsrun does not save nested tensors)".into(),
            ));
        }
        let quantizer = t.quantizer().cloned();
        self.global(
            "torch._utils",
            if quantizer.is_some() {
                "_rebuild_qtensor"
            } else {
                "_rebuild_tensor_v2"
            },
        );
        self.out.push(b'(');
        self.storage_persistent_id(t)?;
        self.int(t.storage_offset() as i64);
        // Sizes and strides as MARK ... TUPLE, as PyTorch writes them.
        for dims in [
            t.shape().iter().map(|&s| s as i64).collect::<Vec<_>>(),
            t.strides().iter().map(|&s| s as i64).collect(),
        ] {
            self.out.push(b'(');
            for d in dims {
                self.int(d);
            }
            self.out.push(b't');
        }
        if let Some(q) = quantizer {
            self.quantizer_params(&q)?;
        }
        self.out.push(if t.requires_grad() { 0x88 } else { 0x89 });
        self.close_rebuild(identity);
        Ok(())
    }

    /// The end of a tensor's rebuild call: the empty `backward_hooks` (`OrderedDict()`), the
    /// argument tuple and the call, memoized for the tensor's identity.
    fn close_rebuild(&mut self, identity: TensorIdentity) {
        self.global("collections", "OrderedDict");
        self.out.push(b')');
        self.out.push(b'R');
        self.out.push(b't');
        self.out.push(b'R');
        let idx = self.memoize();
        self.tensors.insert(identity, idx);
    }

    /// A sparse tensor as TorchScript's pickler writes it: `_rebuild_sparse_tensor(layout,
    /// size, requires_grad, indices, values, OrderedDict())` for COO, with `crow_indices,
    /// col_indices, values` for CSR (PyTorch serializes no other sparse layout).
    fn sparse_tensor(
        &mut self,
        t: &Tensor,
        parts: &SparseParts,
        identity: TensorIdentity,
    ) -> Result<()> {
        let components: Vec<&Tensor> = match parts {
            SparseParts::Coo {
                indices, values, ..
            } => vec![indices, values],
            SparseParts::Compressed {
                layout: Layout::SparseCsr,
                compressed_indices,
                plain_indices,
                values,
            } => vec![compressed_indices, plain_indices, values],
            SparseParts::Compressed { layout, .. } => {
                return Err(PickleError::Unpicklable(format!(
                    "Unsupported sparse tensor layout type in serialization {layout}"
                )))
            }
        };
        self.global("torch._utils", "_rebuild_sparse_tensor");
        self.out.push(b'(');
        self.int(parts.layout().number());
        self.out.push(b'(');
        for &d in t.shape() {
            self.int(d as i64);
        }
        self.out.push(b't');
        self.out.push(if t.requires_grad() { 0x88 } else { 0x89 });
        for c in components {
            self.tensor(c)?;
        }
        self.close_rebuild(identity);
        Ok(())
    }

    /// `_rebuild_qtensor`'s quantizer tuple, as PyTorch writes it:
    /// `(torch.per_tensor_affine, scale, zero_point)` or
    /// `(torch.per_channel_affine, scales (float64), zero_points (int64), axis)` or
    /// `(torch.per_channel_affine_float_qparams, scales (float32), zero_points (float32), axis)`.
    fn quantizer_params(&mut self, q: &Quantizer) -> Result<()> {
        self.out.push(b'(');
        self.global("torch", q.qscheme_name());
        match q {
            Quantizer::PerTensorAffine { scale, zero_point } => {
                self.float(*scale);
                self.int(*zero_point);
            }
            Quantizer::PerChannelAffine {
                scales,
                zero_points,
                axis,
            } => self.channel_params(scales, zero_points, *axis)?,
            Quantizer::PerChannelAffineFloatQParams {
                scales,
                zero_points,
                axis,
            } => self.channel_params(scales, zero_points, *axis)?,
        }
        self.out.push(b't');
        Ok(())
    }

    /// A per-channel quantizer's `scales, zero_points, axis` (1-d tensors of their own types).
    fn channel_params<S: Element, Z: Element>(
        &mut self,
        scales: &[S],
        zero_points: &[Z],
        axis: usize,
    ) -> Result<()> {
        let s = Tensor::from_slice(scales, &[scales.len()])
            .map_err(|e| PickleError::Unpicklable(e.to_string()))?;
        let z = Tensor::from_slice(zero_points, &[zero_points.len()])
            .map_err(|e| PickleError::Unpicklable(e.to_string()))?;
        self.tensor(&s)?;
        self.tensor(&z)?;
        self.int(axis as i64);
        Ok(())
    }

    /// The storage's persistent id `('storage', torch.XStorage, key, 'cpu', numel)` the first
    /// time a storage is met (memoized), a BINGET of it afterwards.
    fn storage_persistent_id(&mut self, t: &Tensor) -> Result<()> {
        let dtype = t.dtype();
        let storage = t.storage();
        if let Some(&(key, idx)) = self.storage_keys.get(&storage.id()) {
            let (_, first) = &self.storages[key - self.key_base];
            if *first != dtype {
                return Err(PickleError::Unpicklable(format!(
                    "one storage is viewed as both {first} and {dtype}"
                )));
            }
            self.get(idx);
            return Ok(());
        }
        let key = self.key_base + self.storages.len();
        let numel = if dtype == DType::QUInt4x2 {
            // PyTorch's storage of a quint4x2 tensor holds its rows packed two values a byte
            let packed = nibble_storage(t)?;
            let n = packed.nbytes();
            self.storages.push((packed, dtype));
            n
        } else {
            self.storages.push((storage.clone(), dtype));
            storage.nbytes() / dtype.size()
        };
        self.out.push(b'(');
        self.string(&Arc::from("storage"));
        self.global("torch", dtype.storage_class());
        self.string(&Arc::from(key.to_string()));
        self.string(&Arc::from("cpu"));
        self.int(numel as i64);
        self.out.push(b't');
        self.out.push(b'Q');
        let idx = self.memoize();
        self.storage_keys.insert(storage.id(), (key, idx));
        Ok(())
    }
}

/// The packed storage PyTorch writes for quint4x2 tensor `t` (which PyTorch only has whole and
/// contiguous: `rebuild_qtensor` reads it back at offset 0 with contiguous strides).
fn nibble_storage(t: &Tensor) -> Result<Storage> {
    let whole = t.storage_offset() == 0 && t.is_contiguous() && t.storage().nbytes() == t.numel();
    if !whole {
        return Err(PickleError::Unpicklable(
            "a view of a quint4x2 tensor (PyTorch stores only whole contiguous ones)".into(),
        ));
    }
    let packed =
        crate::tensor::pack_nibbles(t).map_err(|e| PickleError::Unpicklable(e.to_string()))?;
    Storage::from_bytes(&packed).map_err(|e| PickleError::Unpicklable(e.to_string()))
}
