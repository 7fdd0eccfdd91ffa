//! The safe unpickler: a pickle VM for protocols 0-5 that builds `IValue`s directly.

use super::graph_check::{self, GraphProblem};
use super::{PickleError, MAX_NESTING};
use crate::tensor::{DType, Quantizer, Storage, Tensor};
use crate::values::types::{parse_annotation, Type};
use crate::values::{Device, Dict, EnumValue, IValue, List, Object, Tuple};
use indexmap::IndexMap;
use num_complex::Complex64;
use std::collections::HashMap;
use std::sync::Arc;

type Result<T> = std::result::Result<T, PickleError>;

/// Loads storage `key` holding `numel` elements of `dtype` (the archive's `data/<key>` record).
pub type StorageLoader<'a> =
    dyn FnMut(&str, DType, usize) -> std::result::Result<Storage, String> + 'a;
/// Finds the member of enum class `class` whose value is `value`.
pub type EnumResolver<'a> =
    dyn Fn(&str, &IValue) -> std::result::Result<Arc<EnumValue>, String> + 'a;

/// The callables an archive may name (everything else is rejected).
#[derive(Clone, Debug)]
enum Global {
    RebuildTensorV2,
    RebuildTensor,
    RebuildParameter,
    RebuildParameterWithState,
    RebuildQTensor,
    /// `_rebuild_sparse_tensor`, in TorchScript's form or Python's (`torch.save`).
    RebuildSparseTensor,
    /// `torch.serialization._get_layout(name)`: a layout as its `c10::Layout` number.
    GetLayout,
    /// `torch.Size(tuple)`: the tuple.
    TorchSize,
    /// `torch.per_tensor_affine` / `torch.per_channel_affine` (a quantized tensor's scheme).
    QScheme(&'static str),
    RestoreTypeTag,
    BuildList(Type),
    OrderedDict,
    StorageClass(DType),
    Device,
    Complex,
    TorchClass(Arc<str>),
}

#[derive(Clone)]
enum Item {
    Val(IValue),
    Global(Global),
    StorageRef(Storage, DType),
    /// A tuple holding something that is not a value (persistent ids, rebuild arguments).
    Args(Vec<Item>),
    /// Raw bytes: no TorchScript value is bytes, so they can only be rejected later.
    Bytes,
}

/// Unpickles one pickle. Configure storages and enum classes, then call [`Unpickler::load`].
pub struct Unpickler<'a> {
    data: &'a [u8],
    pos: usize,
    record: String,
    stack: Vec<Item>,
    marks: Vec<usize>,
    memo: HashMap<u32, Item>,
    storages: Option<&'a mut StorageLoader<'a>>,
    storage_cache: HashMap<String, (Storage, DType)>,
    enums: Option<&'a EnumResolver<'a>>,
    op_pos: usize,
    max_depth: usize,
}

/// Unpickle plain data (no storages, no enums), e.g. a `debug_pkl` record.
pub fn unpickle_data(data: &[u8], record: &str) -> Result<IValue> {
    Unpickler::new(data, record).load()
}

impl<'a> Unpickler<'a> {
    pub fn new(data: &'a [u8], record: &str) -> Unpickler<'a> {
        Unpickler {
            data,
            pos: 0,
            record: record.to_string(),
            stack: Vec::new(),
            marks: Vec::new(),
            memo: HashMap::new(),
            storages: None,
            storage_cache: HashMap::new(),
            enums: None,
            op_pos: 0,
            max_depth: MAX_NESTING,
        }
    }

    /// Accept containers nested at most `depth` levels (`LoadOptions::max_pickle_depth`; never
    /// more than [`MAX_NESTING`], which the module tree walks rely on).
    pub fn with_max_depth(mut self, depth: usize) -> Self {
        self.max_depth = depth.min(MAX_NESTING);
        self
    }

    /// Resolve persistent ids `('storage', cls, key, location, numel)` with `loader`.
    pub fn with_storages(mut self, loader: &'a mut StorageLoader<'a>) -> Self {
        self.storages = Some(loader);
        self
    }

    /// Decode `__torch__` enum values with `resolver`.
    pub fn with_enums(mut self, resolver: &'a EnumResolver<'a>) -> Self {
        self.enums = Some(resolver);
        self
    }

    /// Run the pickle and return its value.
    pub fn load(mut self) -> Result<IValue> {
        let result = self.run();
        let all: Vec<IValue> = self
            .stack
            .drain(..)
            .chain(self.memo.drain().map(|(_, v)| v))
            .filter_map(|i| match i {
                Item::Val(v) => Some(v),
                _ => None,
            })
            .collect();
        match result {
            Ok(v) => {
                let mut roots = all;
                roots.push(v.clone());
                let max_depth = self.max_depth;
                match graph_check::check(&roots, max_depth) {
                    Ok(()) => Ok(v),
                    Err(problem) => {
                        graph_check::dismantle(roots);
                        Err(PickleError::Structure {
                            record: self.record.clone(),
                            message: match problem {
                                GraphProblem::TooDeep => {
                                    format!("containers nest deeper than {max_depth} levels (max_pickle_depth)")
                                }
                                GraphProblem::Cycle => "a container contains itself".into(),
                            },
                        })
                    }
                }
            }
            Err(e) => {
                graph_check::dismantle(all);
                Err(e)
            }
        }
    }

    // ---- errors -------------------------------------------------------------------------

    fn malformed(&self, message: impl Into<String>) -> PickleError {
        PickleError::Malformed {
            record: self.record.clone(),
            pos: self.op_pos,
            message: message.into(),
        }
    }

    fn truncated(&self, what: &'static str) -> PickleError {
        PickleError::Truncated {
            record: self.record.clone(),
            pos: self.op_pos,
            what,
        }
    }

    fn unsupported(&self, name: &'static str) -> PickleError {
        PickleError::UnsupportedOpcode {
            record: self.record.clone(),
            pos: self.op_pos,
            name,
        }
    }

    // ---- input --------------------------------------------------------------------------

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .ok_or_else(|| self.truncated(what))?;
        let s = self
            .data
            .get(self.pos..end)
            .ok_or_else(|| self.truncated(what))?;
        self.pos = end;
        Ok(s)
    }

    fn byte(&mut self, what: &'static str) -> Result<u8> {
        Ok(self.take(1, what)?[0])
    }

    fn u16(&mut self) -> Result<u16> {
        let b = self.take(2, "a 2-byte argument")?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32> {
        let b = self.take(4, "a 4-byte argument")?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64> {
        let b = self.take(8, "an 8-byte argument")?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    /// A length read from the pickle, checked against the remaining input before any allocation.
    fn len_arg(&mut self, n: u64, what: &'static str) -> Result<&'a [u8]> {
        let remaining = self.data.len() - self.pos;
        if n > remaining as u64 {
            return Err(PickleError::Limit {
                record: self.record.clone(),
                pos: self.op_pos,
                what: format!("{what} of {n} bytes but only {remaining} bytes remain"),
            });
        }
        self.take(n as usize, what)
    }

    fn line(&mut self) -> Result<&'a str> {
        let rest = &self.data[self.pos..];
        let end = rest
            .iter()
            .position(|&b| b == b'\n')
            .ok_or_else(|| self.truncated("a text argument"))?;
        let line = &rest[..end];
        self.pos += end + 1;
        std::str::from_utf8(line).map_err(|_| self.malformed("text argument is not UTF-8"))
    }

    fn utf8(&self, b: &[u8]) -> Result<Arc<str>> {
        std::str::from_utf8(b)
            .map(Arc::from)
            .map_err(|_| self.malformed("string is not valid UTF-8"))
    }

    // ---- stack --------------------------------------------------------------------------

    fn push(&mut self, v: IValue) {
        self.stack.push(Item::Val(v));
    }

    fn pop(&mut self) -> Result<Item> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(self.malformed("stack underflow"));
        }
        self.stack
            .pop()
            .ok_or_else(|| self.malformed("stack underflow"))
    }

    fn pop_val(&mut self, what: &str) -> Result<IValue> {
        match self.pop()? {
            Item::Val(v) => Ok(v),
            _ => Err(self.malformed(format!("expected a value for {what}"))),
        }
    }

    fn pop_mark(&mut self) -> Result<Vec<Item>> {
        let m = self
            .marks
            .pop()
            .ok_or_else(|| self.malformed("no MARK on the stack"))?;
        if m > self.stack.len() {
            return Err(self.malformed("MARK above the stack top"));
        }
        Ok(self.stack.split_off(m))
    }

    fn top_mut(&mut self) -> Result<&mut Item> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(self.malformed("stack underflow"));
        }
        let e = self.malformed("stack underflow");
        self.stack.last_mut().ok_or(e)
    }

    fn memo_put(&mut self, idx: u32) -> Result<()> {
        let top = self.top_mut()?.clone();
        self.memo.insert(idx, top);
        Ok(())
    }

    fn memo_get(&mut self, idx: u32) -> Result<()> {
        let v = self
            .memo
            .get(&idx)
            .cloned()
            .ok_or_else(|| self.malformed(format!("memo entry {idx} is not defined")))?;
        self.stack.push(v);
        Ok(())
    }

    fn make_tuple(&self, items: Vec<Item>) -> Item {
        if items.iter().all(|i| matches!(i, Item::Val(_))) {
            let vals = items
                .into_iter()
                .filter_map(|i| match i {
                    Item::Val(v) => Some(v),
                    _ => None,
                })
                .collect();
            Item::Val(IValue::Tuple(Tuple::new(vals)))
        } else {
            Item::Args(items)
        }
    }

    fn vals(&self, items: Vec<Item>, what: &str) -> Result<Vec<IValue>> {
        items
            .into_iter()
            .map(|i| match i {
                Item::Val(v) => Ok(v),
                _ => Err(self.malformed(format!("{what} holds a non-value"))),
            })
            .collect()
    }

    // ---- the VM -------------------------------------------------------------------------

    fn run(&mut self) -> Result<IValue> {
        loop {
            self.op_pos = self.pos;
            let op = self.byte("an opcode")?;
            match op {
                b'\x80' => {
                    let proto = self.byte("PROTO")?;
                    if proto > 5 {
                        return Err(self.malformed(format!("pickle protocol {proto} is unknown")));
                    }
                }
                b'\x95' => {
                    self.u64()?;
                }
                b'.' => {
                    let v = self.pop()?;
                    return match v {
                        Item::Val(v) => Ok(v),
                        _ => Err(self.malformed("the pickle's result is not a value")),
                    };
                }
                b'(' => {
                    if self.marks.len() > self.data.len() {
                        return Err(self.malformed("too many MARKs"));
                    }
                    self.marks.push(self.stack.len());
                }
                b'0' => {
                    self.pop()?;
                }
                b'1' => {
                    self.pop_mark()?;
                }
                b'2' => {
                    let top = self.top_mut()?.clone();
                    self.stack.push(top);
                }
                // integers
                b'J' => {
                    let v = self.u32()? as i32;
                    self.push(IValue::Int(v as i64));
                }
                b'K' => {
                    let v = self.byte("BININT1")?;
                    self.push(IValue::Int(v as i64));
                }
                b'M' => {
                    let v = self.u16()?;
                    self.push(IValue::Int(v as i64));
                }
                b'\x8a' => {
                    let n = self.byte("LONG1")? as u64;
                    let b = self.len_arg(n, "LONG1")?;
                    let v = self.long_bytes(b)?;
                    self.push(IValue::Int(v));
                }
                b'\x8b' => {
                    let n = self.u32()? as u64;
                    let b = self.len_arg(n, "LONG4")?;
                    let v = self.long_bytes(b)?;
                    self.push(IValue::Int(v));
                }
                b'I' => {
                    let line = self.line()?;
                    let v = match line {
                        "01" => IValue::Bool(true),
                        "00" => IValue::Bool(false),
                        s => IValue::Int(
                            s.trim()
                                .parse()
                                .map_err(|_| self.malformed(format!("bad INT '{s}'")))?,
                        ),
                    };
                    self.push(v);
                }
                b'L' => {
                    let line = self.line()?;
                    let s = line.trim().trim_end_matches('L');
                    let v: i64 = s.parse().map_err(|_| {
                        self.malformed(format!("integer '{s}' does not fit in 64 bits"))
                    })?;
                    self.push(IValue::Int(v));
                }
                // floats
                b'G' => {
                    let b = self.take(8, "BINFLOAT")?;
                    let mut a = [0u8; 8];
                    a.copy_from_slice(b);
                    self.push(IValue::Double(f64::from_be_bytes(a)));
                }
                b'F' => {
                    let line = self.line()?;
                    let v: f64 = line
                        .trim()
                        .parse()
                        .map_err(|_| self.malformed(format!("bad FLOAT '{line}'")))?;
                    self.push(IValue::Double(v));
                }
                // strings
                b'X' => {
                    let n = self.u32()? as u64;
                    let b = self.len_arg(n, "BINUNICODE")?;
                    let s = self.utf8(b)?;
                    self.push(IValue::String(s));
                }
                b'\x8c' => {
                    let n = self.byte("SHORT_BINUNICODE")? as u64;
                    let b = self.len_arg(n, "SHORT_BINUNICODE")?;
                    let s = self.utf8(b)?;
                    self.push(IValue::String(s));
                }
                b'\x8d' => {
                    let n = self.u64()?;
                    let b = self.len_arg(n, "BINUNICODE8")?;
                    let s = self.utf8(b)?;
                    self.push(IValue::String(s));
                }
                b'T' | b'U' => {
                    let n = if op == b'T' {
                        self.u32()? as u64
                    } else {
                        self.byte("SHORT_BINSTRING")? as u64
                    };
                    let b = self.len_arg(n, "BINSTRING")?;
                    // Python 2 byte strings: decoded as Latin-1, as `encoding='latin1'` would.
                    let s: String = b.iter().map(|&c| c as char).collect();
                    self.push(IValue::str(s));
                }
                b'S' => {
                    let line = self.line()?;
                    let s = unquote(line).ok_or_else(|| self.malformed("bad STRING literal"))?;
                    self.push(IValue::str(s));
                }
                b'V' => {
                    let line = self.line()?;
                    let s = raw_unicode_unescape(line)
                        .ok_or_else(|| self.malformed("bad UNICODE literal"))?;
                    self.push(IValue::str(s));
                }
                b'B' | b'C' | b'\x8e' | b'\x96' => {
                    let n = match op {
                        b'B' => self.u32()? as u64,
                        b'C' => self.byte("SHORT_BINBYTES")? as u64,
                        _ => self.u64()?,
                    };
                    self.len_arg(n, "bytes")?;
                    self.stack.push(Item::Bytes);
                }
                b'N' => self.push(IValue::None),
                b'\x88' => self.push(IValue::Bool(true)),
                b'\x89' => self.push(IValue::Bool(false)),
                // tuples
                b')' => self.push(IValue::Tuple(Tuple::new(Vec::new()))),
                b't' => {
                    let items = self.pop_mark()?;
                    let t = self.make_tuple(items);
                    self.stack.push(t);
                }
                b'\x85' | b'\x86' | b'\x87' => {
                    let n = (op - b'\x85' + 1) as usize;
                    let mut items = Vec::with_capacity(n);
                    for _ in 0..n {
                        items.push(self.pop()?);
                    }
                    items.reverse();
                    let t = self.make_tuple(items);
                    self.stack.push(t);
                }
                // lists
                b']' => self.push(IValue::List(List::new(Type::Any, Vec::new()))),
                b'l' => {
                    let items = self.pop_mark()?;
                    let vals = self.vals(items, "LIST")?;
                    self.push(IValue::List(List::new(Type::Any, vals)));
                }
                b'a' => {
                    let v = self.pop_val("APPEND")?;
                    self.append(vec![v])?;
                }
                b'e' => {
                    let items = self.pop_mark()?;
                    let vals = self.vals(items, "APPENDS")?;
                    self.append(vals)?;
                }
                // dicts
                b'}' => self.push(IValue::Dict(Dict::new(Type::Any, Type::Any))),
                b'd' => {
                    let items = self.pop_mark()?;
                    let vals = self.vals(items, "DICT")?;
                    let d = Dict::new(Type::Any, Type::Any);
                    self.set_items(&d, vals)?;
                    self.push(IValue::Dict(d));
                }
                b's' => {
                    let v = self.pop_val("SETITEM")?;
                    let k = self.pop_val("SETITEM")?;
                    let d = self.top_dict()?;
                    self.set_items(&d, vec![k, v])?;
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    let vals = self.vals(items, "SETITEMS")?;
                    let d = self.top_dict()?;
                    self.set_items(&d, vals)?;
                }
                b'\x8f' => return Err(self.unsupported("EMPTY_SET")),
                b'\x90' => return Err(self.unsupported("ADDITEMS")),
                b'\x91' => return Err(self.unsupported("FROZENSET")),
                // memo
                b'p' => {
                    let line = self.line()?;
                    let idx = line
                        .trim()
                        .parse()
                        .map_err(|_| self.malformed("bad PUT index"))?;
                    self.memo_put(idx)?;
                }
                b'q' => {
                    let idx = self.byte("BINPUT")? as u32;
                    self.memo_put(idx)?;
                }
                b'r' => {
                    let idx = self.u32()?;
                    self.memo_put(idx)?;
                }
                b'\x94' => {
                    let idx = u32::try_from(self.memo.len())
                        .map_err(|_| self.malformed("memo overflow"))?;
                    self.memo_put(idx)?;
                }
                b'g' => {
                    let line = self.line()?;
                    let idx = line
                        .trim()
                        .parse()
                        .map_err(|_| self.malformed("bad GET index"))?;
                    self.memo_get(idx)?;
                }
                b'h' => {
                    let idx = self.byte("BINGET")? as u32;
                    self.memo_get(idx)?;
                }
                b'j' => {
                    let idx = self.u32()?;
                    self.memo_get(idx)?;
                }
                // globals and calls
                b'c' => {
                    let module = self.line()?;
                    let name = self.line()?;
                    let g = self.global(module, name)?;
                    self.stack.push(Item::Global(g));
                }
                b'\x93' => {
                    let name = self.pop_val("STACK_GLOBAL")?;
                    let module = self.pop_val("STACK_GLOBAL")?;
                    let (Some(module), Some(name)) = (module.as_str(), name.as_str()) else {
                        return Err(self.malformed("STACK_GLOBAL needs two strings"));
                    };
                    let g = self.global(module, name)?;
                    self.stack.push(Item::Global(g));
                }
                b'R' => {
                    let args = self.pop()?;
                    let callable = self.pop()?;
                    let r = self.call(callable, args)?;
                    self.stack.push(r);
                }
                b'\x81' => {
                    let args = self.pop()?;
                    let cls = self.pop()?;
                    let r = self.new_object(cls, args)?;
                    self.stack.push(r);
                }
                b'\x92' => {
                    let _kwargs = self.pop()?;
                    let args = self.pop()?;
                    let cls = self.pop()?;
                    let r = self.new_object(cls, args)?;
                    self.stack.push(r);
                }
                b'o' => {
                    let mut items = self.pop_mark()?;
                    if items.is_empty() {
                        return Err(self.malformed("OBJ without a class"));
                    }
                    let cls = items.remove(0);
                    let r = self.new_object(cls, Item::Args(items))?;
                    self.stack.push(r);
                }
                b'i' => {
                    let module = self.line()?;
                    let name = self.line()?;
                    let g = self.global(module, name)?;
                    let items = self.pop_mark()?;
                    let r = self.new_object(Item::Global(g), Item::Args(items))?;
                    self.stack.push(r);
                }
                b'b' => {
                    let state = self.pop_val("BUILD")?;
                    let target = self.top_mut()?.clone();
                    self.build(target, state)?;
                }
                b'Q' => {
                    let pid = self.pop()?;
                    let r = self.persistent_load(pid)?;
                    self.stack.push(r);
                }
                b'P' => return Err(self.unsupported("PERSID (text persistent id)")),
                b'\x82' | b'\x83' | b'\x84' => {
                    return Err(self.unsupported("EXT (extension registry)"))
                }
                b'\x97' => return Err(self.unsupported("NEXT_BUFFER")),
                b'\x98' => return Err(self.unsupported("READONLY_BUFFER")),
                other => {
                    return Err(PickleError::UnknownOpcode {
                        record: self.record.clone(),
                        pos: self.op_pos,
                        opcode: other,
                    })
                }
            }
        }
    }

    fn long_bytes(&self, b: &[u8]) -> Result<i64> {
        if b.is_empty() {
            return Ok(0);
        }
        if b.len() > 8 {
            // Accept wider encodings of values that still fit (sign extension only).
            let (low, high) = b.split_at(8);
            let negative = low[7] & 0x80 != 0;
            let fill = if negative { 0xff } else { 0 };
            if high.iter().any(|&x| x != fill) {
                return Err(self.malformed("integer does not fit in 64 bits"));
            }
            return self.long_bytes(low);
        }
        let negative = b[b.len() - 1] & 0x80 != 0;
        let mut a = if negative { [0xffu8; 8] } else { [0u8; 8] };
        a[..b.len()].copy_from_slice(b);
        Ok(i64::from_le_bytes(a))
    }

    fn global(&self, module: &str, name: &str) -> Result<Global> {
        let g = match (module, name) {
            ("torch._utils", "_rebuild_tensor_v2") => Global::RebuildTensorV2,
            ("torch._utils", "_rebuild_tensor") => Global::RebuildTensor,
            ("torch._utils", "_rebuild_parameter") => Global::RebuildParameter,
            ("torch._utils", "_rebuild_parameter_with_state") => Global::RebuildParameterWithState,
            ("torch._utils", "_rebuild_qtensor") => Global::RebuildQTensor,
            ("torch._utils", "_rebuild_sparse_tensor") => Global::RebuildSparseTensor,
            ("torch.serialization", "_get_layout") => Global::GetLayout,
            ("torch", "Size") => Global::TorchSize,
            ("torch", "per_tensor_affine") => Global::QScheme("per_tensor_affine"),
            ("torch", "per_channel_affine") => Global::QScheme("per_channel_affine"),
            ("torch", "per_channel_affine_float_qparams") => {
                Global::QScheme("per_channel_affine_float_qparams")
            }
            ("torch.jit._pickle", "restore_type_tag") => Global::RestoreTypeTag,
            ("torch.jit._pickle", "build_intlist") => Global::BuildList(Type::Int),
            ("torch.jit._pickle", "build_doublelist") => Global::BuildList(Type::Float),
            ("torch.jit._pickle", "build_boollist") => Global::BuildList(Type::Bool),
            ("torch.jit._pickle", "build_tensorlist") => Global::BuildList(Type::Tensor),
            ("collections", "OrderedDict") => Global::OrderedDict,
            ("torch", "device") => Global::Device,
            ("builtins" | "__builtin__", "complex") => Global::Complex,
            ("torch", storage) if DType::from_storage_class(storage).is_some() => {
                Global::StorageClass(DType::from_storage_class(storage).unwrap_or(DType::UInt8))
            }
            (m, n) if m == "__torch__" || m.starts_with("__torch__.") => {
                Global::TorchClass(Arc::from(format!("{m}.{n}")))
            }
            _ => {
                return Err(PickleError::ForbiddenGlobal {
                    record: self.record.clone(),
                    pos: self.op_pos,
                    module: module.to_string(),
                    name: name.to_string(),
                })
            }
        };
        Ok(g)
    }

    fn args_of(&self, args: Item, what: &str) -> Result<Vec<Item>> {
        match args {
            Item::Args(items) => Ok(items),
            Item::Val(IValue::Tuple(t)) => Ok(t.items().iter().cloned().map(Item::Val).collect()),
            _ => Err(self.malformed(format!("{what}: arguments are not a tuple"))),
        }
    }

    fn int_arg(&self, item: Option<&Item>, what: &str) -> Result<i64> {
        match item {
            Some(Item::Val(IValue::Int(i))) => Ok(*i),
            _ => Err(self.malformed(format!("{what} must be an int"))),
        }
    }

    fn int_seq(&self, item: Option<&Item>, what: &str) -> Result<Vec<i64>> {
        let items: Vec<IValue> = match item {
            Some(Item::Val(IValue::Tuple(t))) => t.items().to_vec(),
            Some(Item::Val(IValue::List(l))) => l.to_vec(),
            _ => return Err(self.malformed(format!("{what} must be a tuple of ints"))),
        };
        items
            .iter()
            .map(|v| match v {
                IValue::Int(i) => Ok(*i),
                _ => Err(self.malformed(format!("{what} must be a tuple of ints"))),
            })
            .collect()
    }

    fn call(&mut self, callable: Item, args: Item) -> Result<Item> {
        let Item::Global(g) = callable else {
            return Err(self.malformed("REDUCE on something that is not an allowed global"));
        };
        match g {
            Global::RebuildTensorV2 | Global::RebuildTensor => {
                let a = self.args_of(args, "_rebuild_tensor_v2")?;
                let t = self.rebuild_tensor(&a)?;
                Ok(Item::Val(IValue::Tensor(t)))
            }
            Global::RebuildParameter | Global::RebuildParameterWithState => {
                let a = self.args_of(args, "_rebuild_parameter")?;
                let (Some(Item::Val(IValue::Tensor(t))), Some(Item::Val(rg))) =
                    (a.first(), a.get(1))
                else {
                    return Err(
                        self.malformed("_rebuild_parameter needs (tensor, requires_grad, ...)")
                    );
                };
                let mut t = t.clone();
                t.set_requires_grad(rg.as_bool().unwrap_or(false));
                Ok(Item::Val(IValue::Tensor(t)))
            }
            Global::RebuildQTensor => {
                let a = self.args_of(args, "_rebuild_qtensor")?;
                let t = self.rebuild_qtensor(&a)?;
                Ok(Item::Val(IValue::Tensor(t)))
            }
            Global::RebuildSparseTensor => {
                let a = self.args_of(args, "_rebuild_sparse_tensor")?;
                let t = self.rebuild_sparse_tensor(&a)?;
                Ok(Item::Val(IValue::Tensor(t)))
            }
            Global::GetLayout => {
                let a = self.args_of(args, "_get_layout")?;
                let Some(Item::Val(IValue::String(name))) = a.first() else {
                    return Err(self.malformed("_get_layout needs a layout name"));
                };
                let layout = [
                    crate::tensor::Layout::Strided,
                    crate::tensor::Layout::SparseCoo,
                    crate::tensor::Layout::SparseCsr,
                    crate::tensor::Layout::SparseCsc,
                    crate::tensor::Layout::SparseBsr,
                    crate::tensor::Layout::SparseBsc,
                ]
                .into_iter()
                .find(|l| l.name() == &**name)
                .ok_or_else(|| self.malformed(format!("unknown layout {name}")))?;
                Ok(Item::Val(IValue::Int(layout.number())))
            }
            Global::TorchSize => {
                let a = self.args_of(args, "torch.Size")?;
                match a.into_iter().next() {
                    Some(item @ Item::Val(IValue::Tuple(_) | IValue::List(_))) => Ok(item),
                    None => Ok(Item::Val(IValue::Tuple(crate::values::Tuple::new(vec![])))),
                    Some(_) => Err(self.malformed("torch.Size needs a tuple of ints")),
                }
            }
            Global::QScheme(name) => {
                Err(self.malformed(format!("calling torch.{name} is not supported")))
            }
            Global::RestoreTypeTag => {
                let a = self.args_of(args, "restore_type_tag")?;
                let (Some(Item::Val(v)), Some(Item::Val(IValue::String(tag)))) =
                    (a.first(), a.get(1))
                else {
                    return Err(self.malformed("restore_type_tag needs (value, type string)"));
                };
                let ty = parse_annotation(tag)
                    .ok_or_else(|| self.malformed(format!("cannot parse type tag '{tag}'")))?;
                Ok(Item::Val(self.retag(v, &ty)?))
            }
            Global::BuildList(elem) => {
                let a = self.args_of(args, "build_list")?;
                let Some(Item::Val(IValue::List(l))) = a.first() else {
                    return Err(self.malformed("build_*list needs a list"));
                };
                Ok(Item::Val(IValue::List(List::new(elem, l.to_vec()))))
            }
            Global::OrderedDict => Ok(Item::Val(IValue::Dict(Dict::new(Type::Any, Type::Any)))),
            Global::Device => {
                let a = self.args_of(args, "torch.device")?;
                let dev = match (a.first(), a.get(1)) {
                    (Some(Item::Val(IValue::String(s))), None) => Device::parse(s),
                    (Some(Item::Val(IValue::String(s))), Some(Item::Val(IValue::Int(i)))) => {
                        Device::parse(s).map(|d| Device { index: *i, ..d })
                    }
                    _ => None,
                };
                dev.map(|d| Item::Val(IValue::Device(d)))
                    .ok_or_else(|| self.malformed("torch.device with an unknown device"))
            }
            Global::Complex => {
                let a = self.args_of(args, "complex")?;
                let num = |i: Option<&Item>| match i {
                    Some(Item::Val(v)) => v.as_double(),
                    None => Some(0.0),
                    _ => None,
                };
                match (num(a.first()), num(a.get(1))) {
                    (Some(re), Some(im)) => Ok(Item::Val(IValue::Complex(Complex64::new(re, im)))),
                    _ => Err(self.malformed("complex() needs numbers")),
                }
            }
            Global::TorchClass(class) => {
                // PyTorch pickles an enum member as `GLOBAL cls; value; REDUCE`.
                let value = match args {
                    Item::Val(IValue::Tuple(t)) if t.items().len() == 1 => t.items()[0].clone(),
                    Item::Val(v) => v,
                    _ => return Err(self.malformed(format!("bad enum value for {class}"))),
                };
                let resolver = self.enums.ok_or_else(|| {
                    self.malformed(format!(
                        "enum {class} cannot be decoded here (no class information)"
                    ))
                })?;
                let e = resolver(&class, &value).map_err(|m| self.malformed(m))?;
                Ok(Item::Val(IValue::Enum(e)))
            }
            Global::StorageClass(d) => Err(self.malformed(format!(
                "calling storage class {} is not supported",
                d.storage_class()
            ))),
        }
    }

    fn rebuild_tensor(&self, a: &[Item]) -> Result<Tensor> {
        let Some(Item::StorageRef(storage, dtype)) = a.first() else {
            return Err(self.malformed("_rebuild_tensor_v2: first argument is not a storage"));
        };
        let offset = self.int_arg(a.get(1), "storage_offset")?;
        let size = self.int_seq(a.get(2), "size")?;
        let stride = self.int_seq(a.get(3), "stride")?;
        let offset = usize::try_from(offset)
            .map_err(|_| self.malformed(format!("negative storage offset {offset}")))?;
        let shape = size
            .iter()
            .map(|&s| usize::try_from(s).map_err(|_| self.malformed(format!("negative size {s}"))))
            .collect::<Result<Vec<usize>>>()?;
        let strides = stride
            .iter()
            .map(|&s| {
                if s < 0 {
                    Err(self.malformed(format!("negative stride {s}")))
                } else {
                    isize::try_from(s).map_err(|_| self.malformed(format!("stride {s} too large")))
                }
            })
            .collect::<Result<Vec<isize>>>()?;
        let mut t = Tensor::from_parts(storage.clone(), offset, &shape, &strides, *dtype)
            .map_err(|e| self.malformed(format!("tensor does not fit its storage: {e}")))?;
        if let Some(Item::Val(IValue::Bool(rg))) = a.get(4) {
            t.set_requires_grad(*rg);
        }
        Ok(t)
    }

    /// `_rebuild_sparse_tensor(layout, size, requires_grad, indices, values, backward_hooks)`
    /// for COO and `(layout, size, requires_grad, crow_indices, col_indices, values,
    /// backward_hooks)` for CSR, as TorchScript's pickler writes them (`layout` is
    /// `c10::Layout`'s number). The indices are checked as `check_invariants=True` does.
    fn rebuild_sparse_tensor(&self, a: &[Item]) -> Result<Tensor> {
        if let [layout, data] = a {
            return self.rebuild_sparse_tensor_python(layout, data);
        }
        let layout = self.int_arg(a.first(), "_rebuild_sparse_tensor layout")?;
        let size = self.int_seq(a.get(1), "_rebuild_sparse_tensor size")?;
        let size = crate::tensor::sparse_size(&size)
            .map_err(|e| self.malformed(format!("_rebuild_sparse_tensor: {e}")))?;
        let tensor_at = |i: usize| match a.get(i) {
            Some(Item::Val(IValue::Tensor(t))) => Ok(t.clone()),
            _ => Err(self.malformed(format!(
                "_rebuild_sparse_tensor: argument {i} is not a tensor"
            ))),
        };
        let built = match crate::tensor::Layout::from_number(layout) {
            Some(crate::tensor::Layout::SparseCoo) => {
                Tensor::sparse_coo(tensor_at(3)?, tensor_at(4)?, &size, false)
            }
            Some(l) if l.is_compressed() => {
                Tensor::sparse_compressed(l, tensor_at(3)?, tensor_at(4)?, tensor_at(5)?, &size)
            }
            _ => {
                return Err(
                    self.malformed(format!("_rebuild_sparse_tensor: unknown layout {layout}"))
                )
            }
        };
        let mut t = built.map_err(|e| self.malformed(format!("_rebuild_sparse_tensor: {e}")))?;
        if let Some(Item::Val(IValue::Bool(rg))) = a.get(2) {
            t.set_requires_grad(*rg);
        }
        Ok(t)
    }

    /// Python's `_rebuild_sparse_tensor(layout, data)` (`torch.save`): `data` is `(indices,
    /// values, size[, is_coalesced])` for COO and `(compressed_indices, plain_indices, values,
    /// size)` for the compressed layouts.
    fn rebuild_sparse_tensor_python(&self, layout: &Item, data: &Item) -> Result<Tensor> {
        let layout = self.int_arg(Some(layout), "_rebuild_sparse_tensor layout")?;
        let d = self.args_of(data.clone(), "_rebuild_sparse_tensor data")?;
        let tensor_at = |i: usize| match d.get(i) {
            Some(Item::Val(IValue::Tensor(t))) => Ok(t.clone()),
            _ => Err(self.malformed(format!(
                "_rebuild_sparse_tensor: data item {i} is not a tensor"
            ))),
        };
        let size_at = |i: usize| {
            let size = self.int_seq(d.get(i), "_rebuild_sparse_tensor size")?;
            crate::tensor::sparse_size(&size)
                .map_err(|e| self.malformed(format!("_rebuild_sparse_tensor: {e}")))
        };
        let built = match crate::tensor::Layout::from_number(layout) {
            Some(crate::tensor::Layout::SparseCoo) => {
                let coalesced = matches!(d.get(3), Some(Item::Val(IValue::Bool(true))));
                Tensor::sparse_coo(tensor_at(0)?, tensor_at(1)?, &size_at(2)?, coalesced)
            }
            Some(l) if l.is_compressed() => Tensor::sparse_compressed(
                l,
                tensor_at(0)?,
                tensor_at(1)?,
                tensor_at(2)?,
                &size_at(3)?,
            ),
            _ => {
                return Err(
                    self.malformed(format!("_rebuild_sparse_tensor: unknown layout {layout}"))
                )
            }
        };
        built.map_err(|e| self.malformed(format!("_rebuild_sparse_tensor: {e}")))
    }

    /// `_rebuild_qtensor(storage, offset, size, stride, quantizer_params, requires_grad,
    /// backward_hooks)` with `quantizer_params` `(torch.per_tensor_affine, scale, zero_point)`
    /// or `(torch.per_channel_affine(_float_qparams), scales, zero_points, axis)`.
    fn rebuild_qtensor(&self, a: &[Item]) -> Result<Tensor> {
        let Some(Item::Args(params)) = a.get(4) else {
            return Err(self.malformed("_rebuild_qtensor: quantizer parameters are not a tuple"));
        };
        let quantizer = match (params.first(), params.get(1), params.get(2), params.get(3)) {
            (
                Some(Item::Global(Global::QScheme("per_tensor_affine"))),
                Some(Item::Val(scale)),
                Some(Item::Val(IValue::Int(zero_point))),
                None,
            ) => Quantizer::PerTensorAffine {
                scale: scale
                    .as_double()
                    .ok_or_else(|| self.malformed("per-tensor scale is not a number"))?,
                zero_point: *zero_point,
            },
            (
                Some(Item::Global(Global::QScheme("per_channel_affine"))),
                Some(Item::Val(IValue::Tensor(scales))),
                Some(Item::Val(IValue::Tensor(zero_points))),
                Some(Item::Val(IValue::Int(axis))),
            ) => {
                let scales: Vec<f64> = scales
                    .to_vec::<f64>()
                    .map_err(|e| self.malformed(format!("per-channel scales: {e}")))?;
                let zero_points: Vec<i64> = zero_points
                    .to_vec::<i64>()
                    .map_err(|e| self.malformed(format!("per-channel zero points: {e}")))?;
                let axis = usize::try_from(*axis)
                    .map_err(|_| self.malformed(format!("negative per-channel axis {axis}")))?;
                Quantizer::PerChannelAffine {
                    scales: scales.into(),
                    zero_points: zero_points.into(),
                    axis,
                }
            }
            (
                Some(Item::Global(Global::QScheme("per_channel_affine_float_qparams"))),
                Some(Item::Val(IValue::Tensor(scales))),
                Some(Item::Val(IValue::Tensor(zero_points))),
                Some(Item::Val(IValue::Int(axis))),
            ) => {
                let scales: Vec<f32> = scales
                    .to_vec::<f32>()
                    .map_err(|e| self.malformed(format!("per-channel scales: {e}")))?;
                let zero_points: Vec<f32> = zero_points
                    .to_vec::<f32>()
                    .map_err(|e| self.malformed(format!("per-channel zero points: {e}")))?;
                let axis = usize::try_from(*axis)
                    .map_err(|_| self.malformed(format!("negative per-channel axis {axis}")))?;
                Quantizer::PerChannelAffineFloatQParams {
                    scales: scales.into(),
                    zero_points: zero_points.into(),
                    axis,
                }
            }
            _ => {
                return Err(self.malformed(
                    "_rebuild_qtensor: quantizer parameters are neither per_tensor_affine \
                     (scheme, scale, zero_point) nor per_channel_affine(_float_qparams) \
                     (scheme, scales, zero_points, axis)",
                ))
            }
        };
        let stored = match a.first() {
            Some(Item::StorageRef(storage, DType::QUInt4x2)) => {
                self.rebuild_nibble_tensor(storage, a)?
            }
            _ => self.rebuild_tensor(a)?,
        };
        if !stored.dtype().is_quantized() {
            return Err(self.malformed(format!("_rebuild_qtensor on a {} storage", stored.dtype())));
        }
        let ints = stored
            .int_repr_view()
            .map_err(|e| self.malformed(e.to_string()))?;
        let mut t = Tensor::quantized_from_ints_as(&ints, quantizer, stored.dtype())
            .map_err(|e| self.malformed(format!("quantized tensor: {e}")))?;
        t.set_requires_grad(stored.requires_grad());
        Ok(t)
    }

    /// The storage of a `quint4x2` tensor holds its values two a byte (PyTorch refuses views
    /// of such tensors: offset 0, contiguous strides); tsrun's tensor holds them one a byte,
    /// with the dtype kept.
    fn rebuild_nibble_tensor(&self, storage: &Storage, a: &[Item]) -> Result<Tensor> {
        let offset = self.int_arg(a.get(1), "storage_offset")?;
        let size = self.int_seq(a.get(2), "size")?;
        let stride = self.int_seq(a.get(3), "stride")?;
        let shape = size
            .iter()
            .map(|&s| usize::try_from(s).map_err(|_| self.malformed(format!("negative size {s}"))))
            .collect::<Result<Vec<usize>>>()?;
        let contiguous = crate::tensor::contiguous_strides(&shape);
        let strides_ok = stride.len() == shape.len()
            && shape
                .iter()
                .zip(&stride)
                .zip(contiguous.iter())
                .all(|((&n, &s), &c)| n <= 1 || s == c as i64);
        if offset != 0 || !strides_ok {
            return Err(self.malformed(
                "_rebuild_qtensor: a quint4x2 tensor must be contiguous at storage offset 0",
            ));
        }
        let bytes = Tensor::from_parts(storage.clone(), 0, &[storage.nbytes()], &[1], DType::UInt8)
            .and_then(|t| {
                t.read::<u8>()
                    .map(|g| g.view().iter().copied().collect::<Vec<u8>>())
            })
            .map_err(|e| self.malformed(format!("quint4x2 storage: {e}")))?;
        let values = crate::tensor::unpack_nibbles(&bytes, &shape)
            .map_err(|e| self.malformed(format!("quint4x2 tensor: {e}")))?;
        let ints = Tensor::from_vec(values, &shape)
            .map_err(|e| self.malformed(format!("quint4x2 tensor: {e}")))?;
        Tensor::from_parts(
            ints.storage().clone(),
            0,
            &shape,
            ints.strides(),
            DType::QUInt4x2,
        )
        .map_err(|e| self.malformed(format!("quint4x2 tensor: {e}")))
    }

    /// Apply a `restore_type_tag` type to a freshly unpickled list or dict.
    fn retag(&self, v: &IValue, ty: &Type) -> Result<IValue> {
        Ok(match (v, ty) {
            (IValue::List(l), Type::List(elem)) => {
                IValue::List(List::new((**elem).clone(), l.to_vec()))
            }
            (IValue::Dict(d), Type::Dict(k, val)) => {
                let out = Dict::new((**k).clone(), (**val).clone());
                for (key, value) in d.entries() {
                    out.insert(key, value)
                        .ok_or_else(|| self.malformed("unhashable dict key"))?;
                }
                IValue::Dict(out)
            }
            _ => v.clone(),
        })
    }

    fn new_object(&self, cls: Item, args: Item) -> Result<Item> {
        let Item::Global(Global::TorchClass(class)) = cls else {
            return Err(self.malformed("NEWOBJ on something that is not a __torch__ class"));
        };
        let a = self.args_of(args, "NEWOBJ")?;
        if !a.is_empty() {
            return Err(self.malformed(format!("NEWOBJ of {class} with constructor arguments")));
        }
        Ok(Item::Val(IValue::Object(Object::new(
            class,
            IndexMap::new(),
        ))))
    }

    fn build(&self, target: Item, state: IValue) -> Result<()> {
        let Item::Val(IValue::Object(obj)) = target else {
            return Err(self.malformed("BUILD on something that is not an object"));
        };
        let IValue::Dict(d) = state else {
            // A class with `__getstate__`/`__setstate__` (quantized modules) or a torchbind
            // class (packed weights): the loader applies the state once the code is compiled.
            obj.set_state(state);
            return Ok(());
        };
        for (k, v) in d.entries() {
            let IValue::String(name) = k else {
                return Err(self.malformed("object attribute name is not a string"));
            };
            obj.set(&name, v);
        }
        Ok(())
    }

    fn append(&mut self, vals: Vec<IValue>) -> Result<()> {
        let e = self.malformed("APPEND on something that is not a list");
        match self.top_mut()? {
            Item::Val(IValue::List(l)) => {
                l.items_mut().extend(vals);
                Ok(())
            }
            _ => Err(e),
        }
    }

    fn top_dict(&mut self) -> Result<Dict> {
        let e = self.malformed("SETITEM on something that is not a dict");
        match self.top_mut()? {
            Item::Val(IValue::Dict(d)) => Ok(d.clone()),
            _ => Err(e),
        }
    }

    fn set_items(&self, d: &Dict, vals: Vec<IValue>) -> Result<()> {
        if !vals.len().is_multiple_of(2) {
            return Err(self.malformed("odd number of items for a dict"));
        }
        let mut it = vals.into_iter();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            let kind = k.kind_name();
            d.insert(k, v)
                .ok_or_else(|| self.malformed(format!("unhashable dict key of kind {kind}")))?;
        }
        Ok(())
    }

    fn persistent_load(&mut self, pid: Item) -> Result<Item> {
        let a = self.args_of(pid, "persistent id")?;
        let (
            Some(Item::Val(IValue::String(tag))),
            Some(Item::Global(Global::StorageClass(dtype))),
            Some(Item::Val(key)),
            Some(Item::Val(_location)),
            Some(Item::Val(IValue::Int(numel))),
        ) = (a.first(), a.get(1), a.get(2), a.get(3), a.get(4))
        else {
            return Err(self.malformed(
                "persistent id is not ('storage', StorageClass, key, location, numel)",
            ));
        };
        if &**tag != "storage" {
            return Err(self.malformed(format!("unknown persistent id kind '{tag}'")));
        }
        let key = match key {
            IValue::String(s) => s.to_string(),
            IValue::Int(i) => i.to_string(),
            _ => return Err(self.malformed("storage key is not a string")),
        };
        let numel = usize::try_from(*numel)
            .map_err(|_| self.malformed(format!("negative storage size {numel}")))?;
        let dtype = *dtype;
        if let Some((s, d)) = self.storage_cache.get(&key) {
            if *d != dtype {
                return Err(
                    self.malformed(format!("storage '{key}' is used as both {d} and {dtype}"))
                );
            }
            if s.nbytes() < numel.saturating_mul(dtype.size()) {
                return Err(
                    self.malformed(format!("storage '{key}' is declared with different sizes"))
                );
            }
            return Ok(Item::StorageRef(s.clone(), dtype));
        }
        let record = self.record.clone();
        let pos = self.op_pos;
        let loader = self.storages.as_mut().ok_or_else(|| PickleError::Storage {
            record: record.clone(),
            pos,
            key: key.clone(),
            message: "this pickle may not reference storages".into(),
        })?;
        let storage = loader(&key, dtype, numel).map_err(|message| PickleError::Storage {
            record,
            pos,
            key: key.clone(),
            message,
        })?;
        self.storage_cache.insert(key, (storage.clone(), dtype));
        Ok(Item::StorageRef(storage, dtype))
    }
}

/// Undo Python's `repr` quoting of a protocol-0 STRING argument.
fn unquote(s: &str) -> Option<String> {
    let s = s.trim_end();
    let inner = s
        .strip_prefix('\'')
        .and_then(|r| r.strip_suffix('\''))
        .or_else(|| s.strip_prefix('"').and_then(|r| r.strip_suffix('"')))?;
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next()? {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            '\\' => out.push('\\'),
            '\'' => out.push('\''),
            '"' => out.push('"'),
            'x' => {
                let h: String = chars.by_ref().take(2).collect();
                out.push(u8::from_str_radix(&h, 16).ok()? as char);
            }
            _ => return None,
        }
    }
    Some(out)
}

/// Decode Python's raw-unicode-escape (`\uXXXX`, `\UXXXXXXXX`).
fn raw_unicode_unescape(s: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' && matches!(chars.peek(), Some('u') | Some('U')) {
            let n = if chars.next()? == 'u' { 4 } else { 8 };
            let h: String = chars.by_ref().take(n).collect();
            out.push(char::from_u32(u32::from_str_radix(&h, 16).ok()?)?);
        } else {
            out.push(c);
        }
    }
    Some(out)
}
