//! Golden tests: every case of fixtures/ops/nn_coverage.json (written by
//! fixtures/gen_ops_nn_cases.py from PyTorch) must match PyTorch's result or error: the
//! branches of the nn overloads added for issue 12's coverage that their one synthesized case
//! (coverage_nn) cannot reach (segment_reduce's reductions, CTC's unbatched and empty cases,
//! _masked_softmax's mask types, native_dropout's deterministic cases, skipped fused steps).

use crate::common;

#[test]
fn nn_coverage_ops_match_pytorch() {
    common::assert_op_cases("nn_coverage");
}
