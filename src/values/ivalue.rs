//! `IValue`: every value TorchScript code can hold, with PyTorch's reference semantics.
//! Lists, dicts and objects are shared handles: a mutation through one alias is seen by all.
//! Tensors share storage. Tuples and strings are immutable.

#![deny(missing_docs)]

use crate::tensor::{Scalar, Storage, Tensor};
use crate::values::generator::SharedGenerator;
use crate::values::types::Type;
use indexmap::IndexMap;
use num_complex::Complex64;
use parking_lot::RwLock;
use std::fmt;
use std::sync::Arc;

/// A TorchScript value: what methods take and return, and what module attributes hold.
#[derive(Clone, Default)]
pub enum IValue {
    #[default]
    /// `None`.
    None,
    /// `bool`.
    Bool(bool),
    /// `int` (64-bit, as in TorchScript).
    Int(i64),
    /// `float` (64-bit, as in TorchScript).
    Double(f64),
    /// `complex`.
    Complex(Complex64),
    /// `str`.
    String(Arc<str>),
    /// `Tensor`.
    Tensor(Tensor),
    /// `List[T]`, shared and mutable.
    List(List),
    /// `Tuple[...]` or a NamedTuple.
    Tuple(Tuple),
    /// `Dict[K, V]`, shared, mutable, insertion-ordered.
    Dict(Dict),
    /// An instance of a module or script class.
    Object(Object),
    /// `torch.device`.
    Device(Device),
    /// A member of an `Enum` class.
    Enum(Arc<EnumValue>),
    /// A `torch.UntypedStorage`.
    Storage(Storage),
    /// A first-class function reference (qualified name).
    Function(Arc<str>),
    /// A `torch.Generator` (CPU), shared by reference.
    Generator(SharedGenerator),
    /// An `Await[T]` that is already complete (`torch.jit._awaitable_nowait`): its value.
    Await(Arc<IValue>),
    /// The value of `uninitialized(T)`: never read on a valid path.
    Uninitialized,
    /// A `Future[T]` made by `fork`, already completed (tsrun runs a forked function at the
    /// fork, the schedule PyTorch's interpreter also starts with).
    Future(Arc<FutureValue>),
}

/// The outcome of a forked function: its value, or the error `wait` raises.
pub struct FutureValue {
    value: Result<IValue, String>,
    /// The original error, handed to the first `wait` (later waits get its message).
    error: parking_lot::Mutex<Option<crate::Error>>,
}

impl FutureValue {
    /// A future completed with `result`.
    pub fn completed(result: crate::Result<IValue>) -> FutureValue {
        match result {
            Ok(v) => FutureValue {
                value: Ok(v),
                error: parking_lot::Mutex::new(None),
            },
            Err(e) => FutureValue {
                value: Err(e.to_string()),
                error: parking_lot::Mutex::new(Some(e)),
            },
        }
    }

    /// `torch.jit.wait`: the value, or the forked function's error.
    pub fn wait(&self) -> crate::Result<IValue> {
        match &self.value {
            Ok(v) => Ok(v.clone()),
            Err(message) => Err(self.error.lock().take().unwrap_or_else(|| {
                crate::error::RuntimeError::Exception {
                    kind: "builtins.RuntimeError".into(),
                    message: message.clone(),
                }
                .into()
            })),
        }
    }
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
            IValue::Generator(_) => "Generator",
            IValue::Await(_) => "Await",
            IValue::Uninitialized => "uninitialized",
            IValue::Future(_) => "Future",
        }
    }

    /// A `str` value.
    pub fn str(s: impl Into<Arc<str>>) -> IValue {
        IValue::String(s.into())
    }

    /// A tuple of `items`: what an operator with several outputs returns (a kernel registered
    /// with `tsrun::register_op` for `-> (Tensor, Tensor)` returns a tuple of two tensors).
    pub fn tuple(items: Vec<IValue>) -> IValue {
        IValue::Tuple(Tuple::new(items))
    }

    /// Whether this is `None`.
    pub fn is_none(&self) -> bool {
        matches!(self, IValue::None)
    }
    /// The tensor, if this is one.
    pub fn as_tensor(&self) -> Option<&Tensor> {
        match self {
            IValue::Tensor(t) => Some(t),
            _ => None,
        }
    }
    /// The integer, if this is an `int` (or a `bool`, as 0/1).
    pub fn as_int(&self) -> Option<i64> {
        match self {
            IValue::Int(i) => Some(*i),
            IValue::Bool(b) => Some(*b as i64),
            _ => None,
        }
    }
    /// The number, if this is a `float` (or an `int`, converted).
    pub fn as_double(&self) -> Option<f64> {
        match self {
            IValue::Double(d) => Some(*d),
            IValue::Int(i) => Some(*i as f64),
            _ => None,
        }
    }
    /// The boolean, if this is a `bool`.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            IValue::Bool(b) => Some(*b),
            _ => None,
        }
    }
    /// The string, if this is a `str`.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            IValue::String(s) => Some(s),
            _ => None,
        }
    }
    /// The list, if this is one.
    pub fn as_list(&self) -> Option<&List> {
        match self {
            IValue::List(l) => Some(l),
            _ => None,
        }
    }
    /// The tuple, if this is one.
    pub fn as_tuple(&self) -> Option<&Tuple> {
        match self {
            IValue::Tuple(t) => Some(t),
            _ => None,
        }
    }
    /// The dict, if this is one.
    pub fn as_dict(&self) -> Option<&Dict> {
        match self {
            IValue::Dict(d) => Some(d),
            _ => None,
        }
    }
    /// The object, if this is one.
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
            (IValue::Generator(a), IValue::Generator(b)) => Arc::ptr_eq(a, b),
            (IValue::Await(a), IValue::Await(b)) => Arc::ptr_eq(a, b),
            (IValue::Bool(a), IValue::Bool(b)) => a == b,
            (IValue::Int(a), IValue::Int(b)) => a == b,
            (IValue::Double(a), IValue::Double(b)) => a.to_bits() == b.to_bits(),
            (IValue::String(a), IValue::String(b)) => a == b,
            (IValue::Device(a), IValue::Device(b)) => a == b,
            // an enum value is an object: `is` is identity (PyTorch's `IValue::is` compares
            // the pointers), so equal members from different constants are not the same
            (IValue::Enum(a), IValue::Enum(b)) => Arc::ptr_eq(a, b),
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

/// The shared content of a [`List`].
pub struct ListInner {
    /// The element type `T` of `List[T]`.
    pub elem_type: Type,
    /// The elements.
    pub items: RwLock<Vec<IValue>>,
}

impl List {
    /// A new list of `elem_type` elements.
    pub fn new(elem_type: Type, items: Vec<IValue>) -> List {
        List(Arc::new(ListInner {
            elem_type,
            items: RwLock::new(items),
        }))
    }
    /// The element type `T` of `List[T]`.
    pub fn elem_type(&self) -> &Type {
        &self.0.elem_type
    }
    /// The number of elements.
    pub fn len(&self) -> usize {
        self.0.items.read().len()
    }
    /// Whether the list has no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The element at `i`, if there is one.
    pub fn get(&self, i: usize) -> Option<IValue> {
        self.0.items.read().get(i).cloned()
    }
    /// A snapshot of the elements.
    pub fn to_vec(&self) -> Vec<IValue> {
        self.0.items.read().clone()
    }
    /// Append an element (seen by every alias of the list).
    pub fn push(&self, v: IValue) {
        self.0.items.write().push(v)
    }
    /// The elements, read-locked for as long as the guard lives.
    pub fn items(&self) -> parking_lot::RwLockReadGuard<'_, Vec<IValue>> {
        self.0.items.read()
    }
    /// The elements, write-locked for as long as the guard lives.
    pub fn items_mut(&self) -> parking_lot::RwLockWriteGuard<'_, Vec<IValue>> {
        self.0.items.write()
    }
}

/// An immutable tuple; `class` names the NamedTuple type when it is one.
#[derive(Clone)]
pub struct Tuple(pub Arc<TupleInner>);

/// The content of a [`Tuple`].
pub struct TupleInner {
    /// The elements.
    pub items: Vec<IValue>,
    /// The NamedTuple class (qualified name), if it is one.
    pub class: Option<Arc<str>>,
}

impl Tuple {
    /// A plain tuple.
    pub fn new(items: Vec<IValue>) -> Tuple {
        Tuple(Arc::new(TupleInner { items, class: None }))
    }
    /// A NamedTuple of class `class` (qualified name).
    pub fn named(class: Arc<str>, items: Vec<IValue>) -> Tuple {
        Tuple(Arc::new(TupleInner {
            items,
            class: Some(class),
        }))
    }
    /// The elements.
    pub fn items(&self) -> &[IValue] {
        &self.0.items
    }
    /// The NamedTuple class, if this is one.
    pub fn class(&self) -> Option<&Arc<str>> {
        self.0.class.as_ref()
    }
}

/// A hashable dict key: TorchScript allows str, int, float, bool, Tensor (by identity), and
/// tuples/None/devices in some schemas.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DictKey {
    /// `None`.
    None,
    /// A `bool` key.
    Bool(bool),
    /// An `int` key.
    Int(i64),
    /// f64 bits
    Double(u64),
    /// real and imaginary f64 bits
    Complex(u64, u64),
    /// A `str` key.
    Str(Arc<str>),
    /// Tensors hash by identity (storage id, offset, shape) as in PyTorch.
    Tensor(usize, usize, Vec<usize>),
    /// A device key.
    Device(Device),
    /// A tuple of hashable values.
    Tuple(Vec<DictKey>),
}

/// An insertion-ordered, shared, mutable dict. Keys are kept as `IValue`s alongside the hash key
/// so that tensor keys come back as the same tensor.
#[derive(Clone)]
pub struct Dict(pub Arc<DictInner>);

/// The shared content of a [`Dict`].
pub struct DictInner {
    /// The key type `K`.
    pub key_type: Type,
    /// The value type `V`.
    pub value_type: Type,
    /// The entries by hash key: the original key value and the value.
    pub items: RwLock<IndexMap<DictKey, (IValue, IValue)>>,
}

impl Dict {
    /// A new empty `Dict[key_type, value_type]`.
    pub fn new(key_type: Type, value_type: Type) -> Dict {
        Dict(Arc::new(DictInner {
            key_type,
            value_type,
            items: RwLock::new(IndexMap::new()),
        }))
    }
    /// The key type `K` of `Dict[K, V]`.
    pub fn key_type(&self) -> &Type {
        &self.0.key_type
    }
    /// The value type `V` of `Dict[K, V]`.
    pub fn value_type(&self) -> &Type {
        &self.0.value_type
    }
    /// The number of entries.
    pub fn len(&self) -> usize {
        self.0.items.read().len()
    }
    /// Whether the dict has no entry.
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
    /// The value stored under `k`, if any.
    pub fn get(&self, k: &IValue) -> Option<IValue> {
        let hk = dict_key(k)?;
        self.0.items.read().get(&hk).map(|(_, v)| v.clone())
    }
    /// Entries in insertion order.
    pub fn entries(&self) -> Vec<(IValue, IValue)> {
        self.0.items.read().values().cloned().collect()
    }
    /// The entries by hash key, read-locked for as long as the guard lives.
    pub fn items(&self) -> parking_lot::RwLockReadGuard<'_, IndexMap<DictKey, (IValue, IValue)>> {
        self.0.items.read()
    }
    /// The entries by hash key, write-locked for as long as the guard lives.
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

/// The shared content of an [`Object`].
pub struct ObjectInner {
    /// Qualified class name, e.g. `__torch__.torch.nn.modules.linear.Linear`.
    pub class: Arc<str>,
    /// The attributes, in declaration order.
    pub fields: RwLock<IndexMap<Arc<str>, IValue>>,
    /// The state a class with `__getstate__`/`__setstate__` was pickled with (a torchbind
    /// object's whole content, e.g. packed quantized weights); `None` for dict-state objects.
    pub state: RwLock<Option<IValue>>,
}

impl Object {
    /// An object of class `class` (qualified name) with these attributes, in declaration order.
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
    /// Replace the `__setstate__` state.
    pub fn set_state(&self, state: IValue) {
        *self.0.state.write() = Some(state);
    }
    /// Whether the class is a C++ (torchbind) class, `__torch__.torch.classes.<ns>.<Name>`.
    pub fn is_torchbind(&self) -> bool {
        is_torchbind_class(&self.0.class)
    }
    /// The qualified class name (`__torch__.Net`).
    pub fn class_name(&self) -> &Arc<str> {
        &self.0.class
    }
    /// The attribute `name`, if the object has it.
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
    /// The attribute at position `i` of the declaration order.
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
    /// The attribute names, in declaration order.
    pub fn field_names(&self) -> Vec<Arc<str>> {
        self.0.fields.read().keys().cloned().collect()
    }
    /// The attributes, read-locked for as long as the guard lives.
    pub fn fields(&self) -> parking_lot::RwLockReadGuard<'_, IndexMap<Arc<str>, IValue>> {
        self.0.fields.read()
    }
    /// Whether both handles denote the same object (Python's `is`).
    pub fn ptr_eq(&self, other: &Object) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// The device type of a [`Device`] (tsrun computes on the CPU; other kinds are kept as archives name them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceKind {
    /// `cpu`.
    Cpu,
    /// `cuda`.
    Cuda,
    /// `mps`.
    Mps,
    /// `meta`.
    Meta,
    /// `xpu`.
    Xpu,
    /// `hip`.
    Hip,
}

/// `torch.device`; `index` -1 means "no index".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Device {
    /// The device type.
    pub kind: DeviceKind,
    /// The device index, -1 when none is given.
    pub index: i64,
}

impl Device {
    /// `torch.device('cpu')`.
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
    /// The Enum class (qualified name).
    pub class: Arc<str>,
    /// The member's name.
    pub name: Arc<str>,
    /// The member's value.
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
            IValue::Generator(g) => write!(f, "<Generator seed={}>", g.lock().seed()),
            IValue::Await(v) => write!(f, "<Await {v:?}>"),
            IValue::Uninitialized => f.write_str("<uninitialized>"),
            IValue::Future(_) => f.write_str("<Future>"),
        }
    }
}

/// Whether `v` is an instance of `t` (as `isinstance` checks at run time).
pub fn matches_type(v: &IValue, t: &Type) -> bool {
    match (t, v) {
        (Type::Any, _) => true,
        (Type::Optional(_), IValue::None) => true,
        (Type::Optional(inner), v) => matches_type(v, inner),
        (Type::Union(ts), v) => ts.iter().any(|t| matches_type(v, t)),
        (Type::Tensor, IValue::Tensor(_)) => true,
        (Type::Int, IValue::Int(_)) => true,
        (Type::Float, IValue::Double(_)) => true,
        (Type::Bool, IValue::Bool(_)) => true,
        (Type::Str, IValue::String(_)) => true,
        (Type::Complex, IValue::Complex(_)) => true,
        (Type::Number, IValue::Int(_) | IValue::Double(_) | IValue::Complex(_)) => true,
        (Type::NoneType, IValue::None) => true,
        (Type::Device, IValue::Device(_)) => true,
        (Type::Storage, IValue::Storage(_)) => true,
        (Type::Generator, IValue::Generator(_)) => true,
        (Type::Await(t), IValue::Await(v)) => matches_type(v, t),
        (Type::AnyList, IValue::List(_)) => true,
        (Type::AnyTuple, IValue::Tuple(_)) => true,
        (Type::AnyClass, IValue::Object(_)) => true,
        (Type::AnyEnum, IValue::Enum(_)) => true,
        (Type::List(elem), IValue::List(l)) => {
            l.elem_type() == &**elem || l.items().iter().all(|x| matches_type(x, elem))
        }
        (Type::Dict(k, val), IValue::Dict(d)) => {
            (d.key_type() == &**k && d.value_type() == &**val)
                || d.items()
                    .values()
                    .all(|(a, b)| matches_type(a, k) && matches_type(b, val))
        }
        (Type::Tuple(ts), IValue::Tuple(tu)) => {
            ts.len() == tu.items().len()
                && ts.iter().zip(tu.items()).all(|(t, x)| matches_type(x, t))
        }
        (Type::Class(c), IValue::Object(o)) => o.class_name() == c,
        (Type::Class(c), IValue::Tuple(tu)) => tu.class() == Some(c),
        (Type::Class(c), IValue::Enum(e)) => &e.class == c,
        (Type::Function(_), IValue::Function(_)) => true,
        (Type::Future(_), IValue::Future(_)) => true,
        _ => false,
    }
}
