//! `torch.quasirandom.SobolEngine`'s operators: every case of fixtures/ops/sobol.json (written
//! by fixtures/gen_ops_sobol.py from PyTorch, called as SobolEngine calls them) must match, and
//! the whole 21201-dimension direction state must have the digest of PyTorch's
//! (fixtures/sobol/state_digest.json, fixtures/gen_sobol_table.py).

use crate::common::{self, fixtures_dir};
use serde_json::Value;
use tsrun::internals::ops::{Args, OpContext, Registry};
use tsrun::internals::tensor::{DType, Tensor};
use tsrun::internals::values::IValue;

#[test]
fn sobol_engine_ops_match_pytorch() {
    common::assert_op_cases("sobol");
}

/// FNV-1a 64 over bytes, as the generator digests PyTorch's state.
fn fnv1a64(bytes: impl Iterator<Item = u8>) -> u64 {
    bytes.fold(0xcbf29ce484222325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    })
}

#[test]
fn the_full_direction_state_matches_pytorch() {
    let text = std::fs::read_to_string(fixtures_dir().join("sobol").join("state_digest.json"))
        .expect("digest");
    let want: Value = serde_json::from_str(&text).expect("json");
    let dimension = want["dimension"].as_u64().expect("dimension") as usize;
    let maxbit = want["maxbit"].as_u64().expect("maxbit") as usize;
    let state = Tensor::zeros(&[dimension, maxbit], DType::Int64).expect("state");
    let kernel = Registry::global()
        .lookup("aten::_sobol_engine_initialize_state_", "")
        .expect("kernel");
    let ctx = OpContext::default();
    let mut args = vec![IValue::Tensor(state.clone()), IValue::Int(dimension as i64)];
    kernel(&mut Args::new(
        "aten::_sobol_engine_initialize_state_",
        &mut args,
        &ctx,
    ))
    .expect("initializes");
    let values = state.to_vec::<i64>().expect("values");
    let digest = fnv1a64(values.iter().flat_map(|v| v.to_le_bytes()));
    assert_eq!(
        format!("{digest:016x}"),
        want["fnv1a64"].as_str().expect("digest")
    );
}
