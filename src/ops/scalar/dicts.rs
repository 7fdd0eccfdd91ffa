//! Dicts: lookup, insertion and views, with Python's `KeyError`s.

use super::*;

const DICT_KEYS: &[&str] = &["str", "int", "float", "bool", "complex", "Tensor"];

pub(super) fn dict_of(a: &Args, i: usize) -> crate::Result<Dict> {
    match a.get(i)? {
        IValue::Dict(d) => Ok(d.clone()),
        other => Err(err(format!(
            "{}: expected a dict, got {}",
            a.op,
            other.kind_name()
        ))),
    }
}
pub(super) fn keys(a: &mut Args) -> R {
    let d = dict_of(a, 0)?;
    let items: Vec<IValue> = d.items().values().map(|(k, _)| k.clone()).collect();
    Ok(IValue::List(List::new(d.key_type().clone(), items)))
}
pub(super) fn values(a: &mut Args) -> R {
    let d = dict_of(a, 0)?;
    let items: Vec<IValue> = d.items().values().map(|(_, v)| v.clone()).collect();
    Ok(IValue::List(List::new(d.value_type().clone(), items)))
}
pub(super) fn items(a: &mut Args) -> R {
    let d = dict_of(a, 0)?;
    let items: Vec<IValue> = d
        .items()
        .values()
        .map(|(k, v)| IValue::Tuple(Tuple::new(vec![k.clone(), v.clone()])))
        .collect();
    Ok(IValue::List(List::new(
        Type::Tuple(vec![d.key_type().clone(), d.value_type().clone()]),
        items,
    )))
}
pub(super) fn get(a: &mut Args) -> R {
    let d = dict_of(a, 0)?;
    match d.get(a.get(1)?) {
        Some(v) => Ok(v),
        None if a.len() > 2 => Ok(a.get(2)?.clone()),
        None => Ok(IValue::None),
    }
}
pub(super) fn setdefault(a: &mut Args) -> R {
    let d = dict_of(a, 0)?;
    let k = a.get(1)?.clone();
    if let Some(v) = d.get(&k) {
        return Ok(v);
    }
    let v = a.get(2)?.clone();
    d.insert(k, v.clone())
        .ok_or_else(|| err("unhashable dict key"))?;
    Ok(v)
}
pub(super) fn update(a: &mut Args) -> R {
    let d = dict_of(a, 0)?;
    let other = dict_of(a, 1)?;
    for (k, v) in other.entries() {
        d.insert(k, v).ok_or_else(|| err("unhashable dict key"))?;
    }
    Ok(IValue::None)
}
pub(super) fn popitem(a: &mut Args) -> R {
    let d = dict_of(a, 0)?;
    // PyTorch's dictPopItem removes the first item (c10::Dict::begin), not the last
    let first = d.items_mut().shift_remove_index(0);
    match first {
        Some((_, (k, v))) => Ok(IValue::Tuple(Tuple::new(vec![k, v]))),
        None => Err(script_error("popitem(): dictionary is empty")),
    }
}
pub(super) fn dict(a: &mut Args) -> R {
    if a.is_empty() {
        return Ok(IValue::Dict(Dict::new(Type::Str, Type::Tensor)));
    }
    match a.get(0)? {
        IValue::Dict(d) => Ok(IValue::Dict(copy_dict(d))),
        IValue::List(l) => {
            let (kt, vt) = match l.elem_type() {
                Type::Tuple(ts) if ts.len() == 2 => (ts[0].clone(), ts[1].clone()),
                _ => (Type::Any, Type::Any),
            };
            let d = Dict::new(kt, vt);
            for item in l.items().iter() {
                match item {
                    IValue::Tuple(t) if t.items().len() == 2 => {
                        d.insert(t.items()[0].clone(), t.items()[1].clone())
                            .ok_or_else(|| err("unhashable dict key"))?;
                    }
                    _ => return Err(err("dict() needs a list of (key, value) pairs")),
                }
            }
            Ok(IValue::Dict(d))
        }
        other => Err(err(format!(
            "cannot build a dict from {}",
            other.kind_name()
        ))),
    }
}

/// Dict builtins, every key type.
pub(super) fn register(r: &mut Registry) {
    for key in DICT_KEYS {
        r.add(&format!("aten::__getitem__.Dict_{key}"), getitem);
        r.add(&format!("aten::_set_item.{key}"), set_item);
        r.add(&format!("aten::keys.{key}"), keys);
        r.add(&format!("aten::values.{key}"), values);
        r.add(&format!("aten::items.{key}"), items);
        r.add(&format!("aten::get.{key}"), get);
        r.add(&format!("aten::get.default_{key}"), get);
        r.add(&format!("aten::__contains__.{key}"), contains);
        r.add(&format!("aten::len.Dict_{key}"), len);
        r.add(&format!("aten::pop.Dict_{key}"), pop);
        r.add(&format!("aten::pop.Dict_default_{key}"), pop);
        r.add(&format!("aten::Delete.Dict_{key}"), delete);
        r.add(&format!("aten::setdefault.{key}"), setdefault);
        r.add(&format!("aten::update.{key}"), update);
        r.add(&format!("aten::popitem.{key}"), popitem);
        r.add(&format!("aten::clear.{key}"), clear);
        r.add(&format!("aten::copy.Dict_{key}"), copy);
        r.add(&format!("aten::dict.Dict_{key}"), dict);
        r.add(&format!("aten::dict.{key}"), dict);
    }
    r.add("aten::dict", dict);
}
