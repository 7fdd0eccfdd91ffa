//! `torch.autograd.profiler.record_function` in scripted code: its `__enter__` opens a
//! `RecordFunction` range (`profiler::_record_function_enter_new`, a
//! `__torch__.torch.classes.profiler._RecordFunction` handle) and its `__exit__` closes it
//! (`profiler::_record_function_exit._RecordFunction`); `_call_end_callbacks_on_future` hands
//! a forked call's future through `profiler::_call_end_callbacks_on_jit_fut`. tsrun has no profiler to report
//! ranges to, so the handle is an empty object and closing it does nothing; the code in the
//! range runs as it does under PyTorch without an active profiler.

use super::kernels::invalid_argument;
use super::{Args, Registry};
use crate::values::{IValue, Object};
use indexmap::IndexMap;

type R = crate::Result<IValue>;

/// The torchbind class of a record-function handle.
const RECORD_FUNCTION_CLASS: &str = "__torch__.torch.classes.profiler._RecordFunction";

/// `_record_function_enter_new(name, args)`: a fresh handle (the name is only checked to be a
/// string, as there is no profiler to record it).
fn enter_new(a: &mut Args<'_>) -> R {
    a.str(0)?;
    a.opt_str(1)?;
    Ok(IValue::Object(Object::new(
        RECORD_FUNCTION_CLASS.into(),
        IndexMap::new(),
    )))
}

/// Checks that argument `i` is a record-function handle.
fn check_handle(a: &Args<'_>, i: usize) -> crate::Result<()> {
    match a.get(i)? {
        IValue::Object(o) if &**o.class_name() == RECORD_FUNCTION_CLASS => Ok(()),
        other => Err(invalid_argument(
            a.op,
            "self",
            format!("must be a {RECORD_FUNCTION_CLASS}"),
            format!("a {}", other.kind_name()),
        )),
    }
}

/// `_record_function_exit._RecordFunction(record)`: closes the range of a handle.
fn exit(a: &mut Args<'_>) -> R {
    check_handle(a, 0)?;
    Ok(IValue::None)
}

/// `_call_end_callbacks_on_jit_fut._RecordFunction(record, fut)`: the future that completes
/// as `fut` does once the range is closed. tsrun's futures are complete when made and there is
/// no profiler range to close, so that is `fut` itself (waiting gives its value or its error).
fn call_end_callbacks_on_fut(a: &mut Args<'_>) -> R {
    check_handle(a, 0)?;
    match a.get(1)? {
        f @ IValue::Future(_) => Ok(f.clone()),
        other => Err(crate::Error::BadArgument {
            op: a.op.to_string(),
            index: 1,
            expected: "Future",
            got: other.kind_name().to_string(),
        }),
    }
}

pub(crate) fn register(r: &mut Registry) {
    r.add("profiler::_record_function_enter_new", enter_new);
    r.add("profiler::_record_function_exit._RecordFunction", exit);
    r.add(
        "profiler::_call_end_callbacks_on_jit_fut._RecordFunction",
        call_end_callbacks_on_fut,
    );
}
