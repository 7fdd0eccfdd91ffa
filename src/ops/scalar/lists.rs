//! Lists: indexing and slicing with Python semantics, mutation, sorting, search and the
//! list idioms TorchScript code calls as operators.

use super::*;

/// Normalize a Python index for a sequence of `len`; `None` when out of range.
pub(super) fn py_index(i: i64, len: usize) -> Option<usize> {
    let n = len as i64;
    let k = if i < 0 { i + n } else { i };
    (0..n).contains(&k).then_some(k as usize)
}

/// Python slice bounds → the selected indices (also the list peephole's slice folding).
pub fn slice_indices(
    len: usize,
    start: Option<i64>,
    end: Option<i64>,
    step: i64,
) -> crate::Result<Vec<usize>> {
    if step == 0 {
        return Err(script_error("List slice should have non-zero step"));
    }
    let n = len as i64;
    let norm = |x: i64, lo: i64, hi: i64| {
        let x = if x < 0 { x + n } else { x };
        x.clamp(lo, hi)
    };
    let mut out = Vec::new();
    if step > 0 {
        let s = start.map(|x| norm(x, 0, n)).unwrap_or(0);
        let e = end.map(|x| norm(x, 0, n)).unwrap_or(n);
        let mut i = s;
        while i < e {
            out.push(i as usize);
            i += step;
        }
    } else {
        let s = start.map(|x| norm(x, -1, n - 1)).unwrap_or(n - 1);
        let e = end.map(|x| norm(x, -1, n - 1)).unwrap_or(-1);
        let mut i = s;
        while i > e {
            out.push(i as usize);
            i += step;
        }
    }
    Ok(out)
}

pub(super) fn len(a: &mut Args) -> R {
    Ok(IValue::Int(match a.get(0)? {
        IValue::List(l) => l.len() as i64,
        IValue::Dict(d) => d.len() as i64,
        // TorchScript strings are byte strings: len() counts UTF-8 bytes
        IValue::String(s) => s.len() as i64,
        IValue::Tuple(t) => t.items().len() as i64,
        IValue::Tensor(t) => match t.shape().first() {
            Some(&n) => n as i64,
            None => return Err(err("len() of a 0-d tensor")),
        },
        other => {
            return Err(err(format!(
                "object of type {} has no len()",
                other.kind_name()
            )))
        }
    }))
}

pub(super) fn getitem(a: &mut Args) -> R {
    match a.get(0)? {
        IValue::List(l) => {
            let i = a.int(1)?;
            let items = l.items();
            py_index(i, items.len())
                .and_then(|k| items.get(k))
                .cloned()
                .ok_or_else(|| script_error("list index out of range"))
        }
        IValue::Dict(d) => {
            let k = a.get(1)?;
            d.get(k)
                .ok_or_else(|| script_error(format!("KeyError: {}", python_str(k))))
        }
        IValue::String(s) => {
            let i = a.int(1)?;
            let chars: Vec<char> = s.chars().collect();
            py_index(i, chars.len())
                .and_then(|k| chars.get(k))
                .map(|c| IValue::str(c.to_string()))
                .ok_or_else(|| {
                    // PyTorch's `std::string::at` fails with libstdc++'s text, the index
                    // (after adding the length to a negative one) as an unsigned number
                    let n = chars.len() as i64;
                    let at = if i < 0 { i.wrapping_add(n) } else { i };
                    script_error(format!(
                        "basic_string::at: __n (which is {}) >= this->size() (which is {n})",
                        at as u64
                    ))
                })
        }
        IValue::Tuple(t) => {
            let i = a.int(1)?;
            py_index(i, t.items().len())
                .and_then(|k| t.items().get(k))
                .cloned()
                .ok_or_else(|| script_error("Tuple list index out of range"))
        }
        other => Err(err(format!("{} is not subscriptable", other.kind_name()))),
    }
}

pub(super) fn set_item(a: &mut Args) -> R {
    let v = a.take(2)?;
    match a.get(0)? {
        IValue::List(l) => {
            let i = a.int(1)?;
            let mut items = l.items_mut();
            let n = items.len();
            let slot = py_index(i, n)
                .and_then(|k| items.get_mut(k))
                .ok_or_else(|| script_error("list index out of range"))?;
            *slot = v;
            Ok(IValue::List(l.clone()))
        }
        IValue::Dict(d) => {
            d.insert(a.get(1)?.clone(), v)
                .ok_or_else(|| err("unhashable dict key"))?;
            Ok(IValue::None)
        }
        other => Err(err(format!("cannot assign items of {}", other.kind_name()))),
    }
}

pub(super) fn append(a: &mut Args) -> R {
    let l = a.list(0)?;
    let v = a.take(1)?;
    l.push(v);
    Ok(IValue::List(l))
}
pub(super) fn insert(a: &mut Args) -> R {
    let l = a.list(0)?;
    let i = a.int(1)?;
    let v = a.take(2)?;
    let mut items = l.items_mut();
    let n = items.len() as i64;
    let k = if i < 0 { (i + n).max(0) } else { i.min(n) };
    items.insert(k as usize, v);
    Ok(IValue::None)
}
pub(super) fn pop(a: &mut Args) -> R {
    match a.get(0)? {
        IValue::List(l) => {
            let i = if a.len() > 1 { a.int(1)? } else { -1 };
            let mut items = l.items_mut();
            let k = py_index(i, items.len()).ok_or_else(|| {
                script_error(if items.is_empty() {
                    "pop from empty list"
                } else {
                    "list index out of range"
                })
            })?;
            Ok(items.remove(k))
        }
        IValue::Dict(d) => {
            let key = a.get(1)?;
            let hk = crate::values::ivalue::dict_key(key).ok_or_else(|| err("unhashable key"))?;
            match d.items_mut().shift_remove(&hk) {
                Some((_, v)) => Ok(v),
                None if a.len() > 2 => Ok(a.get(2)?.clone()),
                None => Err(script_error(format!("KeyError: {}", python_str(key)))),
            }
        }
        other => Err(err(format!("cannot pop from {}", other.kind_name()))),
    }
}
pub(super) fn delete(a: &mut Args) -> R {
    match a.get(0)? {
        IValue::List(l) => {
            let i = a.int(1)?;
            let mut items = l.items_mut();
            let k =
                py_index(i, items.len()).ok_or_else(|| script_error("list index out of range"))?;
            items.remove(k);
            Ok(IValue::None)
        }
        IValue::Dict(d) => {
            let key = a.get(1)?;
            let hk = crate::values::ivalue::dict_key(key).ok_or_else(|| err("unhashable key"))?;
            d.items_mut()
                .shift_remove(&hk)
                .map(|_| IValue::None)
                .ok_or_else(|| script_error(format!("KeyError: {}", python_str(key))))
        }
        other => Err(err(format!("cannot delete from {}", other.kind_name()))),
    }
}
pub(super) fn extend(a: &mut Args) -> R {
    let l = a.list(0)?;
    let other = a.list(1)?.to_vec();
    l.items_mut().extend(other);
    Ok(IValue::None)
}
pub(super) fn clear(a: &mut Args) -> R {
    match a.get(0)? {
        IValue::List(l) => l.items_mut().clear(),
        IValue::Dict(d) => d.items_mut().clear(),
        other => return Err(err(format!("cannot clear {}", other.kind_name()))),
    }
    Ok(IValue::None)
}
pub(super) fn copy(a: &mut Args) -> R {
    match a.get(0)? {
        IValue::List(l) => Ok(IValue::List(List::new(l.elem_type().clone(), l.to_vec()))),
        IValue::Dict(d) => Ok(IValue::Dict(copy_dict(d))),
        IValue::String(s) => Ok(IValue::List(List::new(
            Type::Str,
            s.chars().map(|c| IValue::str(c.to_string())).collect(),
        ))),
        other => Err(err(format!("cannot copy {}", other.kind_name()))),
    }
}
pub(super) fn copy_dict(d: &Dict) -> Dict {
    let out = Dict::new(d.key_type().clone(), d.value_type().clone());
    *out.items_mut() = d.items().clone();
    out
}
pub(super) fn list_slice(a: &mut Args) -> R {
    let (start, end, step) = (a.opt_int(1)?, a.opt_int(2)?, a.opt_int(3)?.unwrap_or(1));
    match a.get(0)? {
        IValue::List(l) => {
            let items = l.items();
            let idx = slice_indices(items.len(), start, end, step)?;
            let out = idx.iter().filter_map(|&i| items.get(i).cloned()).collect();
            Ok(IValue::List(List::new(l.elem_type().clone(), out)))
        }
        IValue::String(s) => {
            let chars: Vec<char> = s.chars().collect();
            let idx = slice_indices(chars.len(), start, end, step)?;
            Ok(IValue::str(
                idx.iter().filter_map(|&i| chars.get(i)).collect::<String>(),
            ))
        }
        other => Err(err(format!("cannot slice {}", other.kind_name()))),
    }
}
/// `l += m` returns the extended list (`extend` returns nothing).
pub(super) fn add_inplace(a: &mut Args) -> R {
    extend(a)?;
    Ok(IValue::List(a.list(0)?))
}
pub(super) fn list_index(a: &mut Args) -> R {
    let l = a.list(0)?;
    let x = a.get(1)?;
    for (i, y) in l.items().iter().enumerate() {
        if values_equal(y, x)? {
            return Ok(IValue::Int(i as i64));
        }
    }
    Err(script_error(format!(
        "'{}' is not in list",
        python_str(a.get(1)?)
    )))
}
pub(super) fn count(a: &mut Args) -> R {
    match a.get(0)? {
        IValue::List(l) => {
            let x = a.get(1)?;
            let mut n = 0;
            for y in l.items().iter() {
                if values_equal(y, x)? {
                    n += 1;
                }
            }
            Ok(IValue::Int(n))
        }
        IValue::String(_) => {
            let (s, sub) = str_range(a)?;
            Ok(IValue::Int(if sub.is_empty() {
                s.chars().count() as i64 + 1
            } else {
                s.matches(sub.as_str()).count() as i64
            }))
        }
        other => Err(err(format!("cannot count in {}", other.kind_name()))),
    }
}
pub(super) fn remove(a: &mut Args) -> R {
    let l = a.list(0)?;
    let x = a.get(1)?;
    let mut items = l.items_mut();
    let mut pos = None;
    for (i, y) in items.iter().enumerate() {
        if values_equal(y, x)? {
            pos = Some(i);
            break;
        }
    }
    match pos {
        Some(i) => {
            items.remove(i);
            Ok(IValue::None)
        }
        None => Err(script_error("list.remove(x): x not in list")),
    }
}
pub(super) fn reverse(a: &mut Args) -> R {
    a.list(0)?.items_mut().reverse();
    Ok(IValue::None)
}
pub(super) fn sort_values(items: &mut [IValue], reverse: bool) -> crate::Result<()> {
    sort_by_order(items, reverse, order)
}
/// Sorts by `order` (reversed for `reverse`); the first comparison error is the result.
fn sort_by_order(
    items: &mut [IValue],
    reverse: bool,
    order: impl Fn(&IValue, &IValue) -> crate::Result<Ordering>,
) -> crate::Result<()> {
    let mut failure = None;
    items.sort_by(|x, y| match order(x, y) {
        Ok(o) if reverse => o.reverse(),
        Ok(o) => o,
        Err(e) => {
            failure.get_or_insert(e);
            Ordering::Equal
        }
    });
    failure.map_or(Ok(()), Err)
}
pub(super) fn sort(a: &mut Args) -> R {
    let l = a.list(0)?;
    let reverse = if a.len() > 1 { a.bool(1)? } else { false };
    sort_values(&mut l.items_mut(), reverse)?;
    Ok(IValue::None)
}
pub(super) fn sorted(a: &mut Args) -> R {
    let l = a.list(0)?;
    let mut items = l.to_vec();
    sort_values(&mut items, false)?;
    Ok(IValue::List(List::new(l.elem_type().clone(), items)))
}
/// The order of two one-element tensors by value (`a.lt(b)` in PyTorch's list sort, which
/// needs the comparison to be a single bool).
fn tensor_order(x: &IValue, y: &IValue) -> crate::Result<Ordering> {
    let value = |v: &IValue| -> crate::Result<f64> {
        match v {
            IValue::Tensor(t) => match t.item()? {
                Scalar::Complex(_) => Err(err("sort: complex tensors have no order")),
                s => Ok(s.to_f64()),
            },
            other => Err(err(format!(
                "sort: expected a tensor, got {}",
                other.kind_name()
            ))),
        }
    };
    Ok(value(x)?.partial_cmp(&value(y)?).unwrap_or(Ordering::Equal))
}
fn sort_tensors(items: &mut [IValue], reverse: bool) -> crate::Result<()> {
    sort_by_order(items, reverse, tensor_order)
}
/// `sort.Tensor(Tensor[] self, bool reverse)`: in place.
pub(super) fn sort_tensor_list(a: &mut Args) -> R {
    let l = a.list(0)?;
    sort_tensors(&mut l.items_mut(), a.bool(1)?)?;
    Ok(IValue::None)
}
/// `sorted.Tensor(Tensor[] input)`: a sorted copy.
pub(super) fn sorted_tensor_list(a: &mut Args) -> R {
    let l = a.list(0)?;
    let mut items = l.to_vec();
    sort_tensors(&mut items, false)?;
    Ok(IValue::List(List::new(l.elem_type().clone(), items)))
}
/// `mul_.t(l, n)`: the list repeated `n` times, in place (`l *= n`; empty for `n <= 0`).
pub(super) fn repeat_list_inplace(a: &mut Args) -> R {
    let l = a.list(0)?;
    let n = usize::try_from(a.int(1)?).unwrap_or(0);
    {
        let mut items = l.items_mut();
        let len = items.len();
        let total = len.saturating_mul(n);
        crate::tensor::budget::check_alloc(total.saturating_mul(std::mem::size_of::<IValue>()))?;
        let copy = items.clone();
        items.clear();
        items.reserve(total);
        for _ in 0..n {
            items.extend(copy.iter().cloned());
        }
    }
    Ok(IValue::List(l))
}
/// `_size_if_not_equal(self_size, other_size)`: None when equal, else `self_size`.
pub(super) fn size_if_not_equal(a: &mut Args) -> R {
    let (s, o) = (a.int_list(0)?, a.int_list(1)?);
    if s == o {
        Ok(IValue::None)
    } else {
        Ok(int_list(s))
    }
}
fn int_list(v: Vec<i64>) -> IValue {
    IValue::List(List::new(
        Type::Int,
        v.into_iter().map(IValue::Int).collect(),
    ))
}
/// `broadcast_shapes(a, b)`: the shape both broadcast to.
pub(super) fn broadcast_two_shapes(a: &mut Args) -> R {
    let dims = |i: usize| -> crate::Result<Vec<usize>> {
        a.int_list(i)?
            .into_iter()
            .map(|d| usize::try_from(d).map_err(|_| err(format!("negative size {d}"))))
            .collect()
    };
    let shape = crate::tensor::broadcast_shapes(&dims(0)?, &dims(1)?)?;
    Ok(int_list(shape.into_iter().map(|d| d as i64).collect()))
}
pub(super) fn contains(a: &mut Args) -> R {
    match a.get(0)? {
        IValue::List(l) => {
            let x = a.get(1)?;
            for y in l.items().iter() {
                if values_equal(y, x)? {
                    return Ok(IValue::Bool(true));
                }
            }
            Ok(IValue::Bool(false))
        }
        IValue::Dict(d) => Ok(IValue::Bool(d.get(a.get(1)?).is_some())),
        IValue::String(s) => Ok(IValue::Bool(s.contains(&*a.str(1)?))),
        other => Err(err(format!(
            "'in' is not supported on {}",
            other.kind_name()
        ))),
    }
}
pub(super) fn sum(a: &mut Args) -> R {
    sum_as(a, false)
}
/// `sum.float`: the sum as a float whatever the items are.
pub(super) fn sum_float(a: &mut Args) -> R {
    sum_as(a, true)
}
fn sum_as(a: &mut Args, float: bool) -> R {
    let l = a.list(0)?;
    let mut acc = Num::I(0);
    for v in l.items().iter() {
        let n = num_of(v).ok_or_else(|| err("sum() of non-numbers"))?;
        acc = match (acc, n) {
            (Num::I(p), Num::I(q)) => Num::I(p.wrapping_add(q)),
            (Num::C(_), _) | (_, Num::C(_)) => Num::C(acc.c() + n.c()),
            _ => Num::F(acc.f() + n.f()),
        };
    }
    if float {
        return Ok(IValue::Double(acc.f()));
    }
    Ok(acc.value())
}
pub(super) fn any_all(a: &Args, want: bool) -> R {
    let l = a.list(0)?;
    for v in l.items().iter() {
        let truthy = match v {
            IValue::String(s) => !s.is_empty(),
            v => num_of(v)
                .map(|n| n.f() != 0.0 || n.c().im != 0.0)
                .unwrap_or(false),
        };
        if truthy == want {
            return Ok(IValue::Bool(want));
        }
    }
    Ok(IValue::Bool(!want))
}
pub(super) fn any(a: &mut Args) -> R {
    any_all(a, true)
}
pub(super) fn all(a: &mut Args) -> R {
    any_all(a, false)
}
pub(super) fn range_length(a: &mut Args) -> R {
    let (lo, hi, step) = (a.int(0)?, a.int(1)?, a.int(2)?);
    if step == 0 {
        return Err(script_error("range() arg 3 must not be zero"));
    }
    Ok(IValue::Int(if step > 0 && lo < hi {
        1 + (hi - 1 - lo) / step
    } else if step < 0 && lo > hi {
        1 + (lo - 1 - hi) / (-step)
    } else {
        0
    }))
}
pub(super) fn derive_index(a: &mut Args) -> R {
    Ok(IValue::Int(a.int(1)? + a.int(0)? * a.int(2)?))
}

/// List builtins (kernels dispatch on list / dict / str / tuple at run time).
pub(super) fn register(r: &mut Registry) {
    add_overloads(r, "aten::len", &["t", "any", "str", "Tensor"], len);
    add_overloads(r, "aten::__getitem__", &["t", "str"], getitem);
    r.add("aten::select.t", getitem);
    r.add("prim::TupleIndex", tuple_index_kernel);
    r.add("prim::StringIndex", string_index);
    r.add("aten::_set_item.t", set_item);
    r.add("aten::append.t", append);
    r.add("aten::insert.t", insert);
    r.add("aten::pop.t", pop);
    r.add("aten::Delete.t", delete);
    r.add("aten::extend.t", extend);
    r.add("aten::add_.t", add_inplace);
    r.add("aten::clear.t", clear);
    r.add("aten::copy.t", copy);
    r.add("aten::list.t", copy);
    r.add("aten::list", copy);
    r.add("aten::slice.t", list_slice);
    r.add("aten::slice.str", list_slice);
    add_overloads(
        r,
        "aten::index",
        &[
            "list_int",
            "list_float",
            "list_bool",
            "list_str",
            "list_Tensor",
        ],
        list_index,
    );
    r.add("aten::index.str", str_index);
    r.add("aten::count", count);
    add_overloads(
        r,
        "aten::count",
        &["int", "float", "bool", "str", "Tensor"],
        count,
    );
    add_overloads(
        r,
        "aten::remove",
        &["int", "float", "bool", "str", "Tensor"],
        remove,
    );
    r.add("aten::reverse.t", reverse);
    add_overloads(
        r,
        "aten::sort",
        &["int", "float", "bool", "str", "any"],
        sort,
    );
    add_overloads(
        r,
        "aten::sorted",
        &["int", "float", "bool", "str", "any"],
        sorted,
    );
    add_overloads(
        r,
        "aten::__contains__",
        &["int_list", "float_list", "str_list"],
        contains,
    );
    add_overloads(r, "aten::sum", &["int", "bool", "complex"], sum);
    add_overloads(r, "aten::sum", &["float"], sum_float);
    add_overloads(r, "aten::any", &["int", "float", "bool", "str"], any);
    add_overloads(r, "aten::all", &["int", "float", "bool"], all);
    r.add("aten::__range_length", range_length);
    r.add("aten::__derive_index", derive_index);
    r.add("prim::rangelist", rangelist);
    r.add("aten::sort.Tensor", sort_tensor_list);
    r.add("aten::sorted.Tensor", sorted_tensor_list);
    r.add("aten::mul_.t", repeat_list_inplace);
    r.add("aten::_size_if_not_equal", size_if_not_equal);
    r.add("aten::broadcast_shapes", broadcast_two_shapes);
    // `Size(sizes)`: torch.Size of a list is the list
    r.add("aten::Size", copy);
}
