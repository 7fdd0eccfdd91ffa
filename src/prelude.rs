//! `use tsrun::prelude::*;` brings the types almost every program needs.

pub use crate::{DType, Error, IValue, Module, Result, Tensor};
