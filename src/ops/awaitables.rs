//! `torch.jit._awaitable_nowait` / `_awaitable_wait` in scripted code: an `Await[T]` made
//! complete from a value (`prim::awaitable_nowait`) and read back (`prim::awaitable_wait`).
//! Lazy awaitables (`prim::awaitable`, a function run on first wait) are not supported.

use super::kernels::invalid_argument;
use super::{Args, Registry};
use crate::values::IValue;
use std::sync::Arc;

type R = crate::Result<IValue>;

/// `prim::awaitable_nowait(t self) -> Await(t)`: an awaitable already holding `self`.
fn awaitable_nowait(args: &mut Args<'_>) -> R {
    Ok(IValue::Await(Arc::new(args.take(0)?)))
}

/// `prim::awaitable_wait(Await(t) self) -> t`: the awaitable's value.
fn awaitable_wait(args: &mut Args<'_>) -> R {
    match args.get(0)? {
        IValue::Await(v) => Ok((**v).clone()),
        other => Err(invalid_argument(
            args.op,
            "self",
            "must be an Await",
            format!("a {}", other.kind_name()),
        )),
    }
}

pub(crate) fn register(r: &mut Registry) {
    r.add("prim::awaitable_nowait", awaitable_nowait);
    r.add("prim::awaitable_wait", awaitable_wait);
}
