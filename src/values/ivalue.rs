//! `IValue`: every value TorchScript code can hold, with PyTorch's reference semantics.
//! Lists, dicts and objects are shared handles: a mutation through one alias is seen by all.
//! Tensors share storage. Tuples and strings are immutable.

use crate::tensor::{Scalar, Storage, Tensor};
use crate::values::types::Type;
use indexmap::IndexMap;
use num_complex::Complex64;
use parking_lot::RwLock;
use std::fmt;
use std::sync::Arc;

#[derive(Clone, Default)]
pub enum IValue {
    #[default]
    None,
    Bool(bool),
    Int(i64),
    Double(f64),
    Complex(Complex64),
    String(Arc<str>),
    Tensor(Tensor),
    List(List),
    Tuple(Tuple),
    Dict(Dict),
    Object(Object),
    Device(Device),
    Enum(Arc<EnumValue>),
    Storage(Storage),
    /// A first-class function reference (qualified name).
    Function(Arc<str>),
    /// The value of `uninitialized(T)`: never read on a valid path.
    Uninitialized,
}

impl IValue {
    /// Name of the value's kind, for error messages.
    pub fn kind_name(&self) -> &'static str {
        match self {
            IValue::None => "None",
            IValue::Bool(_) => "bool",
            IValue::Int(_) => "int",
            IValue::Double(_) => "float",
            IValue::Complex(_) => "complex",
            IValue::String(_) => "str",
            IValue::Tensor(_) => "Tensor",
            IValue::List(_) => "List",
            IValue::Tuple(_) => "Tuple",
            IValue::Dict(_) => "Dict",
            IValue::Object(_) => "Object",
            IValue::Device(_) => "Device",
            IValue::Enum(_) => "Enum",
            IValue::Storage(_) => "Storage",
            IValue::Function(_) => "Function",
            IValue::Uninitialized => "uninitialized",
        }
    }

    pub fn str(s: impl Into<Arc<str>>) -> IValue {
        IValue::String(s.into())
    }

    pub fn is_none(&self) -> bool {
        matches!(self, IValue::None)
    }
    pub fn as_tensor(&self) -> Option<&Tensor> {
        match self {
            IValue::Tensor(t) => Some(t),
            _ => None,
        }
    }
    pub fn as_int(&self) -> Option<i64> {
        match self {
            IValue::Int(i) => Some(*i),
            IValue::Bool(b) => Some(*b as i64),
            _ => None,
        }
    }
    pub fn as_double(&self) -> Option<f64> {
        match self {
            IValue::Double(d) => Some(*d),
            IValue::Int(i) => Some(*i as f64),
            _ => None,
        }
    }
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            IValue::Bool(b) => Some(*b),
            _ => None,
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            IValue::String(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_list(&self) -> Option<&List> {
        match self {
            IValue::List(l) => Some(l),
            _ => None,
        }
    }
    pub fn as_tuple(&self) -> Option<&Tuple> {
        match self {
            IValue::Tuple(t) => Some(t),
            _ => None,
        }
    }
    pub fn as_dict(&self) -> Option<&Dict> {
        match self {
            IValue::Dict(d) => Some(d),
            _ => None,
        }
    }
    pub fn as_object(&self) -> Option<&Object> {
        match self {
            IValue::Object(o) => Some(o),
            _ => None,
        }
    }
    /// A number as a `Scalar` (bool, int, float, complex).
    pub fn as_scalar(&self) -> Option<Scalar> {
        match self {
            IValue::Bool(b) => Some(Scalar::Bool(*b)),
            IValue::Int(i) => Some(Scalar::Int(*i)),
            IValue::Double(d) => Some(Scalar::Float(*d)),
            IValue::Complex(c) => Some(Scalar::Complex(*c)),
            _ => None,
        }
    }

    /// Python's `is`: identity for reference types, equality for immutable values.
    pub fn is_same(&self, other: &IValue) -> bool {
        match (self, other) {
            (IValue::None, IValue::None) => true,
            (IValue::Tensor(a), IValue::Tensor(b)) => {
                a.shares_storage(b)
                    && a.storage_offset() == b.storage_offset()
                    && a.shape() == b.shape()
                    && a.strides() == b.strides()
                    && a.dtype() == b.dtype()
            }
            (IValue::List(a), IValue::List(b)) => Arc::ptr_eq(&a.0, &b.0),
            (IValue::Dict(a), IValue::Dict(b)) => Arc::ptr_eq(&a.0, &b.0),
            (IValue::Object(a), IValue::Object(b)) => Arc::ptr_eq(&a.0, &b.0),
            (IValue::Tuple(a), IValue::Tuple(b)) => Arc::ptr_eq(&a.0, &b.0),
            (IValue::Bool(a), IValue::Bool(b)) => a == b,
            (IValue::Int(a), IValue::Int(b)) => a == b,
            (IValue::Double(a), IValue::Double(b)) => a.to_bits() == b.to_bits(),
            (IValue::String(a), IValue::String(b)) => a == b,
            (IValue::Device(a), IValue::Device(b)) => a == b,
            (IValue::Enum(a), IValue::Enum(b)) => Arc::ptr_eq(a, b) || a == b,
            _ => false,
        }
    }
}

impl From<Tensor> for IValue {
    fn from(t: Tensor) -> Self {
        IValue::Tensor(t)
    }
}
impl From<i64> for IValue {
    fn from(v: i64) -> Self {
        IValue::Int(v)
    }
}
impl From<f64> for IValue {
    fn from(v: f64) -> Self {
        IValue::Double(v)
    }
}
impl From<bool> for IValue {
    fn from(v: bool) -> Self {
        IValue::Bool(v)
    }
}
impl From<Scalar> for IValue {
    fn from(s: Scalar) -> Self {
        match s {
            Scalar::Bool(b) => IValue::Bool(b),
            Scalar::Int(i) => IValue::Int(i),
            Scalar::Float(f) => IValue::Double(f),
            Scalar::Complex(c) => IValue::Complex(c),
        }
    }
}

/// A shared, mutable, typed list (`List[T]`).
#[derive(Clone)]
pub struct List(pub Arc<ListInner>);

pub struct ListInner {
    pub elem_type: Type,
    pub items: RwLock<Vec<IValue>>,
}

impl List {
    pub fn new(elem_type: Type, items: Vec<IValue>) -> List {
        List(Arc::new(ListInner {
            elem_type,
            items: RwLock::new(items),
        }))
    }
    pub fn elem_type(&self) -> &Type {
        &self.0.elem_type
    }
    pub fn len(&self) -> usize {
        self.0.items.read().len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn get(&self, i: usize) -> Option<IValue> {
        self.0.items.read().get(i).cloned()
    }
    /// A snapshot of the elements.
    pub fn to_vec(&self) -> Vec<IValue> {
        self.0.items.read().clone()
    }
    pub fn push(&self, v: IValue) {
        self.0.items.write().push(v)
    }
    pub fn items(&self) -> parking_lot::RwLockReadGuard<'_, Vec<IValue>> {
        self.0.items.read()
    }
    pub fn items_mut(&self) -> parking_lot::RwLockWriteGuard<'_, Vec<IValue>> {
        self.0.items.write()
    }
}

/// An immutable tuple; `class` names the NamedTuple type when it is one.
#[derive(Clone)]
pub struct Tuple(pub Arc<TupleInner>);

pub struct TupleInner {
    pub items: Vec<IValue>,
    pub class: Option<Arc<str>>,
}

impl Tuple {
    pub fn new(items: Vec<IValue>) -> Tuple {
        Tuple(Arc::new(TupleInner { items, class: None }))
    }
    pub fn named(class: Arc<str>, items: Vec<IValue>) -> Tuple {
        Tuple(Arc::new(TupleInner {
            items,
            class: Some(class),
        }))
    }
    pub fn items(&self) -> &[IValue] {
        &self.0.items
    }
    pub fn class(&self) -> Option<&Arc<str>> {
        self.0.class.as_ref()
    }
}

/// A hashable dict key: TorchScript allows str, int, float, bool, Tensor (by identity), and
/// tuples/None/devices in some schemas.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DictKey {
    None,
    Bool(bool),
    Int(i64),
    /// f64 bits
    Double(u64),
    /// real and imaginary f64 bits
    Complex(u64, u64),
    Str(Arc<str>),
    /// Tensors hash by identity (storage id, offset, shape) as in PyTorch.
    Tensor(usize, usize, Vec<usize>),
    Device(Device),
    Tuple(Vec<DictKey>),
}

/// An insertion-ordered, shared, mutable dict. Keys are kept as `IValue`s alongside the hash key
/// so that tensor keys come back as the same tensor.
#[derive(Clone)]
pub struct Dict(pub Arc<DictInner>);

pub struct DictInner {
    pub key_type: Type,
    pub value_type: Type,
    pub items: RwLock<IndexMap<DictKey, (IValue, IValue)>>,
}

impl Dict {
    pub fn new(key_type: Type, value_type: Type) -> Dict {
        Dict(Arc::new(DictInner {
            key_type,
            value_type,
            items: RwLock::new(IndexMap::new()),
        }))
    }
    pub fn key_type(&self) -> &Type {
        &self.0.key_type
    }
    pub fn value_type(&self) -> &Type {
        &self.0.value_type
    }
    pub fn len(&self) -> usize {
        self.0.items.read().len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Insert or overwrite; `None` if the key is not hashable.
    pub fn insert(&self, k: IValue, v: IValue) -> Option<()> {
        let hk = dict_key(&k)?;
        let mut items = self.0.items.write();
        match items.get_mut(&hk) {
            Some(slot) => slot.1 = v,
            None => {
                items.insert(hk, (k, v));
            }
        }
        Some(())
    }
    pub fn get(&self, k: &IValue) -> Option<IValue> {
        let hk = dict_key(k)?;
        self.0.items.read().get(&hk).map(|(_, v)| v.clone())
    }
    /// Entries in insertion order.
    pub fn entries(&self) -> Vec<(IValue, IValue)> {
        self.0.items.read().values().cloned().collect()
    }
    pub fn items(&self) -> parking_lot::RwLockReadGuard<'_, IndexMap<DictKey, (IValue, IValue)>> {
        self.0.items.read()
    }
    pub fn items_mut(
        &self,
    ) -> parking_lot::RwLockWriteGuard<'_, IndexMap<DictKey, (IValue, IValue)>> {
        self.0.items.write()
    }
}

/// The hash key of a value, or `None` when it cannot be a dict key.
pub fn dict_key(v: &IValue) -> Option<DictKey> {
    Some(match v {
        IValue::None => DictKey::None,
        IValue::Bool(b) => DictKey::Bool(*b),
        IValue::Int(i) => DictKey::Int(*i),
        IValue::Double(d) => DictKey::Double(d.to_bits()),
        IValue::Complex(c) => DictKey::Complex(c.re.to_bits(), c.im.to_bits()),
        IValue::String(s) => DictKey::Str(s.clone()),
        IValue::Tensor(t) => {
            DictKey::Tensor(t.storage().id(), t.storage_offset(), t.shape().to_vec())
        }
        IValue::Device(d) => DictKey::Device(*d),
        IValue::Tuple(t) => DictKey::Tuple(t.items().iter().map(dict_key).collect::<Option<_>>()?),
        _ => return None,
    })
}

/// An instance of a TorchScript class (module or script class). Attribute order is the class's
/// declaration order (it is also pickling order).
#[derive(Clone)]
pub struct Object(pub Arc<ObjectInner>);

/// `__torch__.torch.classes.<ns>.<Name>`: a class implemented in C++ (torchbind), with no code
/// in the archive.
pub fn is_torchbind_class(qualname: &str) -> bool {
    qualname.starts_with("__torch__.torch.classes.")
}

pub struct ObjectInner {
    /// Qualified class name, e.g. `__torch__.torch.nn.modules.linear.Linear`.
    pub class: Arc<str>,
    pub fields: RwLock<IndexMap<Arc<str>, IValue>>,
    /// The state a class with `__getstate__`/`__setstate__` was pickled with (a torchbind
    /// object's whole content, e.g. packed quantized weights); `None` for dict-state objects.
    pub state: RwLock<Option<IValue>>,
}

impl Object {
    pub fn new(class: Arc<str>, fields: IndexMap<Arc<str>, IValue>) -> Object {
        Object(Arc::new(ObjectInner {
            class,
            fields: RwLock::new(fields),
            state: RwLock::new(None),
        }))
    }
    /// An object whose content is its pickled `__getstate__` state (torchbind classes).
    pub fn with_state(class: Arc<str>, state: IValue) -> Object {
        let o = Object::new(class, IndexMap::new());
        o.set_state(state);
        o
    }
    /// The `__setstate__` state this object was pickled with, if it has one.
    pub fn state(&self) -> Option<IValue> {
        self.0.state.read().clone()
    }
    pub fn set_state(&self, state: IValue) {
        *self.0.state.write() = Some(state);
    }
    /// Whether the class is a C++ (torchbind) class, `__torch__.torch.classes.<ns>.<Name>`.
    pub fn is_torchbind(&self) -> bool {
        is_torchbind_class(&self.0.class)
    }
    pub fn class_name(&self) -> &Arc<str> {
        &self.0.class
    }
    pub fn get(&self, name: &str) -> Option<IValue> {
        self.0.fields.read().get(name).cloned()
    }
    /// `get(name)` through a remembered position: objects of one class keep their attributes
    /// in one order, so a call site that saw `name` at position `slot` finds it there again
    /// without hashing (checked by comparing the name; a miss looks it up and updates `slot`).
    pub fn get_at_slot(&self, name: &str, slot: &std::sync::atomic::AtomicUsize) -> Option<IValue> {
        use std::sync::atomic::Ordering::Relaxed;
        let fields = self.0.fields.read();
        if let Some((k, v)) = fields.get_index(slot.load(Relaxed)) {
            if &**k == name {
                return Some(v.clone());
            }
        }
        let (i, _, v) = fields.get_full(name)?;
        slot.store(i, Relaxed);
        Some(v.clone())
    }
    pub fn get_index(&self, i: usize) -> Option<IValue> {
        self.0.fields.read().get_index(i).map(|(_, v)| v.clone())
    }
    /// Set an existing or new attribute (new ones are appended).
    pub fn set(&self, name: &str, v: IValue) {
        let mut f = self.0.fields.write();
        match f.get_mut(name) {
            Some(slot) => *slot = v,
            None => {
                f.insert(name.into(), v);
            }
        }
    }
    pub fn field_names(&self) -> Vec<Arc<str>> {
        self.0.fields.read().keys().cloned().collect()
    }
    pub fn fields(&self) -> parking_lot::RwLockReadGuard<'_, IndexMap<Arc<str>, IValue>> {
        self.0.fields.read()
    }
    pub fn ptr_eq(&self, other: &Object) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceKind {
    Cpu,
    Cuda,
    Mps,
    Meta,
    Xpu,
    Hip,
}

/// `torch.device`; `index` -1 means "no index".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Device {
    pub kind: DeviceKind,
    pub index: i64,
}

impl Device {
    pub const CPU: Device = Device {
        kind: DeviceKind::Cpu,
        index: -1,
    };

    /// Parse `cpu`, `cuda`, `cuda:1`, ...
    pub fn parse(s: &str) -> Option<Device> {
        let (k, idx) = match s.split_once(':') {
            Some((k, i)) => (k, i.parse::<i64>().ok()?),
            None => (s, -1),
        };
        let kind = match k {
            "cpu" => DeviceKind::Cpu,
            "cuda" => DeviceKind::Cuda,
            "mps" => DeviceKind::Mps,
            "meta" => DeviceKind::Meta,
            "xpu" => DeviceKind::Xpu,
            "hip" => DeviceKind::Hip,
            _ => return None,
        };
        Some(Device { kind, index: idx })
    }
}

impl Device {
    /// The device type without its index (`device.type` in Python).
    pub fn type_name(&self) -> &'static str {
        match self.kind {
            DeviceKind::Cpu => "cpu",
            DeviceKind::Cuda => "cuda",
            DeviceKind::Mps => "mps",
            DeviceKind::Meta => "meta",
            DeviceKind::Xpu => "xpu",
            DeviceKind::Hip => "hip",
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let k = self.type_name();
        if self.index >= 0 {
            write!(f, "{k}:{}", self.index)
        } else {
            f.write_str(k)
        }
    }
}

/// A member of a TorchScript Enum class.
#[derive(Clone)]
pub struct EnumValue {
    pub class: Arc<str>,
    pub name: Arc<str>,
    pub value: IValue,
}

impl PartialEq for EnumValue {
    fn eq(&self, other: &Self) -> bool {
        self.class == other.class && self.name == other.name
    }
}

impl fmt::Debug for IValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IValue::None => f.write_str("None"),
            IValue::Bool(b) => write!(f, "{}", if *b { "True" } else { "False" }),
            IValue::Int(i) => write!(f, "{i}"),
            IValue::Double(d) => write!(f, "{d:?}"),
            IValue::Complex(c) => write!(f, "({}+{}j)", c.re, c.im),
            IValue::String(s) => write!(f, "{s:?}"),
            IValue::Tensor(t) => write!(f, "{t:?}"),
            IValue::List(l) => f.debug_list().entries(l.items().iter()).finish(),
            IValue::Tuple(t) => {
                let mut d = f.debug_tuple(t.class().map(|c| &**c).unwrap_or(""));
                for x in t.items() {
                    d.field(x);
                }
                d.finish()
            }
            IValue::Dict(d) => f
                .debug_map()
                .entries(d.items().values().map(|(k, v)| (k.clone(), v.clone())))
                .finish(),
            IValue::Object(o) => write!(f, "<{} object>", o.class_name()),
            IValue::Device(d) => write!(f, "device(type='{d}')"),
            IValue::Enum(e) => write!(f, "{}.{}", e.class, e.name),
            IValue::Storage(s) => write!(f, "{s:?}"),
            IValue::Function(n) => write!(f, "<function {n}>"),
            IValue::Uninitialized => f.write_str("<uninitialized>"),
        }
    }
}
