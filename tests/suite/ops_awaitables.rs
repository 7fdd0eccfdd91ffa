//! Complete awaitables (`torch.jit._awaitable_nowait` / `_awaitable_wait`): every case of
//! fixtures/ops/awaitables.json (fixtures/gen_ops_awaitables.py, from PyTorch) must match, and
//! the scripted module of fixtures/awaitables/ must give PyTorch's results.

use crate::common;

#[test]
fn awaitable_ops_match_pytorch() {
    common::assert_op_cases("awaitables");
}

#[test]
fn scripted_awaitables_match_pytorch() {
    crate::ops_generator_values::assert_module_cases("awaitables", None);
}
