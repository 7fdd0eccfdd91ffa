//! `torch.Generator` values: every case of fixtures/ops/generator_values.json (written by
//! fixtures/gen_ops_generator_values.py from PyTorch) must match PyTorch: the generator ops
//! (`aten::Generator`, `manual_seed.generator`, `initial_seed`, and `seed`'s reseeding property)
//! and the random ops drawing from an explicit generator. And the scripted module of
//! fixtures/generator_values/ (generators made, reseeded and drawn from in TorchScript code, the
//! default generator drawn from in between) must give PyTorch's results.

use crate::common::{self, compare, decode, decode_all, fixtures_dir, Arrays};
use serde_json::Value;
use std::fs::File;
use tsrun::internals::runtime::Module;
use tsrun::RunOptions;

#[test]
fn generator_ops_and_explicit_generators_match_pytorch() {
    common::assert_op_cases("generator_values");
}

#[test]
fn scripted_generators_match_pytorch() {
    // PyTorch's default generator was seeded with 0 before each call
    assert_module_cases("generator_values", Some(0));
}

/// Run fixtures/<dir>/module.pt on every case of its cases.json/.npz (inputs and PyTorch's
/// result) with the default generator seeded with `seed`.
pub fn assert_module_cases(dir: &str, seed: Option<u64>) {
    let dir = fixtures_dir().join(dir);
    let module = Module::load(dir.join("module.pt")).expect("loads");
    let json: Value =
        serde_json::from_reader(File::open(dir.join("cases.json")).expect("cases")).expect("json");
    let mut arrays = Arrays::open(&dir.join("cases.npz"));
    let cases = json["cases"].as_array().expect("cases");
    assert!(!cases.is_empty());
    for (i, case) in cases.iter().enumerate() {
        let inputs = decode_all(&case["inputs"], &mut arrays);
        let options = RunOptions {
            seed,
            ..RunOptions::default()
        };
        let got = module.call_opts(inputs, &options).expect("runs");
        let want = decode(&case["out"], &mut arrays);
        if let Err(e) = compare(&got, &want, 1e-6, 1e-6, "out") {
            panic!("case {i}: {e}");
        }
    }
}
