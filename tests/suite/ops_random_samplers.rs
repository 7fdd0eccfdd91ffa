//! Golden tests: every case of fixtures/ops/random_samplers.json (written by
//! fixtures/gen_ops_random_samplers.py from PyTorch) must match PyTorch's result or error: the
//! stateless Philox key and sampling ops of torch.func._random (single and batched keys, every
//! floating dtype, integer dtypes with and without bounds) and the seeded Gamma, Dirichlet and
//! Binomial samplers replayed on PyTorch's CPU generator.

use crate::common;

#[test]
fn random_sampler_ops_match_pytorch() {
    common::assert_op_cases("random_samplers");
}
