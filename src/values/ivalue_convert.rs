//! Conversions between [`IValue`] and Rust values: numbers, strings, tensors, ndarray arrays,
//! `Vec`s (TorchScript lists), tuples and `HashMap`s (dicts), both ways.
//!
//! Into `IValue` a conversion cannot fail except from an ndarray (the tensor allocation can
//! hit a memory limit). Out of `IValue` it fails with [`Error::Conversion`] naming what was
//! expected and what the value was. Lists and dicts carry their TorchScript element types, so
//! the Rust types that convert into them name one: [`TorchType`].

#![deny(missing_docs)]

use super::ivalue::{Dict, IValue, List, Tuple};
use super::types::Type;
use crate::error::Error;
use crate::tensor::{Element, Tensor};
use num_complex::Complex64;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

/// A Rust type with a fixed TorchScript type, so that a `Vec` or `HashMap` of it converts into a
/// typed list or dict (`Vec<f64>` is `List[float]`, `HashMap<String, Tensor>` is
/// `Dict[str, Tensor]`).
pub trait TorchType {
    /// The TorchScript type of every value of this Rust type.
    fn torch_type() -> Type;
}

macro_rules! torch_type {
    ($($rust:ty => $ts:expr),* $(,)?) => {
        $(impl TorchType for $rust {
            fn torch_type() -> Type {
                $ts
            }
        })*
    };
}

torch_type! {
    bool => Type::Bool,
    i64 => Type::Int,
    i32 => Type::Int,
    f64 => Type::Float,
    f32 => Type::Float,
    Complex64 => Type::Complex,
    String => Type::Str,
    &str => Type::Str,
    Tensor => Type::Tensor,
    IValue => Type::Any,
}

impl<T: TorchType> TorchType for Vec<T> {
    fn torch_type() -> Type {
        Type::List(Box::new(T::torch_type()))
    }
}

impl<T: TorchType> TorchType for Option<T> {
    fn torch_type() -> Type {
        Type::Optional(Box::new(T::torch_type()))
    }
}

impl<K: TorchType, V: TorchType, S> TorchType for HashMap<K, V, S> {
    fn torch_type() -> Type {
        Type::Dict(Box::new(K::torch_type()), Box::new(V::torch_type()))
    }
}

impl From<i32> for IValue {
    fn from(v: i32) -> Self {
        IValue::Int(v.into())
    }
}

impl From<f32> for IValue {
    fn from(v: f32) -> Self {
        IValue::Double(v.into())
    }
}

impl From<Complex64> for IValue {
    fn from(v: Complex64) -> Self {
        IValue::Complex(v)
    }
}

impl From<&str> for IValue {
    fn from(v: &str) -> Self {
        IValue::String(v.into())
    }
}

impl From<String> for IValue {
    fn from(v: String) -> Self {
        IValue::String(v.into())
    }
}

impl<T: Into<IValue>> From<Option<T>> for IValue {
    /// `None` or the value.
    fn from(v: Option<T>) -> Self {
        v.map_or(IValue::None, Into::into)
    }
}

impl<T: Into<IValue> + TorchType> From<Vec<T>> for IValue {
    /// A `List[T]`.
    fn from(items: Vec<T>) -> Self {
        IValue::List(List::new(
            T::torch_type(),
            items.into_iter().map(Into::into).collect(),
        ))
    }
}

impl<K, V, S> From<HashMap<K, V, S>> for IValue
where
    K: Into<IValue> + TorchType,
    V: Into<IValue> + TorchType,
{
    /// A `Dict[K, V]`. A `HashMap` has no order; the dict takes the map's iteration order.
    fn from(map: HashMap<K, V, S>) -> Self {
        let dict = Dict::new(K::torch_type(), V::torch_type());
        for (k, v) in map {
            // Every TorchType key (numbers, strings, tensors) is hashable, so insert cannot fail.
            let _ = dict.insert(k.into(), v.into());
        }
        IValue::Dict(dict)
    }
}

macro_rules! tuple_conversions {
    ($(($($name:ident: $index:tt),+)),* $(,)?) => {
        $(
            impl<$($name: Into<IValue>),+> From<($($name,)+)> for IValue {
                /// A TorchScript tuple.
                fn from(t: ($($name,)+)) -> Self {
                    IValue::Tuple(Tuple::new(vec![$(t.$index.into()),+]))
                }
            }

            impl<$($name: TryFrom<IValue, Error = Error>),+> TryFrom<IValue> for ($($name,)+) {
                type Error = Error;
                /// The elements of a tuple of exactly this length.
                fn try_from(v: IValue) -> Result<Self, Error> {
                    const LEN: usize = [$($index),+].len();
                    let items = match &v {
                        IValue::Tuple(t) if t.items().len() == LEN => t.items().to_vec(),
                        _ => return Err(mismatch(&format!("a tuple of {LEN} elements"), &v)),
                    };
                    // the length was checked: every `next` has an element
                    let mut items = items.into_iter();
                    Ok(($($name::try_from(items.next().unwrap_or_default())?,)+))
                }
            }
        )*
    };
}

tuple_conversions! {
    (A: 0),
    (A: 0, B: 1),
    (A: 0, B: 1, C: 2),
    (A: 0, B: 1, C: 2, D: 3),
    (A: 0, B: 1, C: 2, D: 3, E: 4),
}

impl<T: Element, D: ndarray::Dimension> TryFrom<ndarray::Array<T, D>> for IValue {
    type Error = Error;
    /// A tensor holding a row-major copy of the array.
    fn try_from(a: ndarray::Array<T, D>) -> Result<Self, Error> {
        Ok(IValue::Tensor(Tensor::from_ndarray(a)?))
    }
}

fn mismatch(expected: &str, got: &IValue) -> Error {
    Error::Conversion {
        expected: expected.to_string(),
        got: got.kind_name(),
    }
}

impl TryFrom<IValue> for Tensor {
    type Error = Error;
    fn try_from(v: IValue) -> Result<Self, Error> {
        match v {
            IValue::Tensor(t) => Ok(t),
            other => Err(mismatch("a Tensor", &other)),
        }
    }
}

impl TryFrom<IValue> for i64 {
    type Error = Error;
    /// An `int` (or a `bool` as 0/1).
    fn try_from(v: IValue) -> Result<Self, Error> {
        v.as_int().ok_or_else(|| mismatch("an int", &v))
    }
}

impl TryFrom<IValue> for f64 {
    type Error = Error;
    /// A `float` (or an `int`, converted).
    fn try_from(v: IValue) -> Result<Self, Error> {
        v.as_double().ok_or_else(|| mismatch("a float", &v))
    }
}

impl TryFrom<IValue> for bool {
    type Error = Error;
    fn try_from(v: IValue) -> Result<Self, Error> {
        v.as_bool().ok_or_else(|| mismatch("a bool", &v))
    }
}

impl TryFrom<IValue> for String {
    type Error = Error;
    fn try_from(v: IValue) -> Result<Self, Error> {
        v.as_str()
            .map(str::to_string)
            .ok_or_else(|| mismatch("a str", &v))
    }
}

impl TryFrom<IValue> for Arc<str> {
    type Error = Error;
    fn try_from(v: IValue) -> Result<Self, Error> {
        match v {
            IValue::String(s) => Ok(s),
            other => Err(mismatch("a str", &other)),
        }
    }
}

impl<T: TryFrom<IValue, Error = Error>> TryFrom<IValue> for Option<T> {
    type Error = Error;
    /// `None`, or the converted value.
    fn try_from(v: IValue) -> Result<Self, Error> {
        match v {
            IValue::None => Ok(None),
            other => T::try_from(other).map(Some),
        }
    }
}

impl<T: TryFrom<IValue, Error = Error>> TryFrom<IValue> for Vec<T> {
    type Error = Error;
    /// The elements of a list, or of a tuple.
    fn try_from(v: IValue) -> Result<Self, Error> {
        let items = match &v {
            IValue::List(l) => l.to_vec(),
            IValue::Tuple(t) => t.items().to_vec(),
            _ => return Err(mismatch("a list", &v)),
        };
        items.into_iter().map(T::try_from).collect()
    }
}

impl<K, V> TryFrom<IValue> for HashMap<K, V>
where
    K: TryFrom<IValue, Error = Error> + Eq + Hash,
    V: TryFrom<IValue, Error = Error>,
{
    type Error = Error;
    /// The entries of a dict.
    fn try_from(v: IValue) -> Result<Self, Error> {
        match v {
            IValue::Dict(d) => d
                .entries()
                .into_iter()
                .map(|(k, v)| Ok((K::try_from(k)?, V::try_from(v)?)))
                .collect(),
            other => Err(mismatch("a dict", &other)),
        }
    }
}

impl IValue {
    /// Convert into any Rust type this value converts to: `let (logits, hidden): (Tensor,
    /// Tensor) = out.extract()?;`.
    pub fn extract<T: TryFrom<IValue, Error = Error>>(self) -> Result<T, Error> {
        T::try_from(self)
    }
}
