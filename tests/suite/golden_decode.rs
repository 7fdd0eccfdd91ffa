//! The golden decoder (tests/common) reads what fixtures/generate.py wrote.

use crate::common::{decode, fixtures_dir, Arrays};
use serde_json::Value;
use std::fs::File;

#[test]
fn decodes_every_fixture_call() {
    let golden = fixtures_dir().join("golden");
    let mut decoded = 0;
    for entry in std::fs::read_dir(&golden).expect("fixtures/golden") {
        let dir = entry.expect("dir entry").path();
        let runs: Value =
            serde_json::from_reader(File::open(dir.join("runs.json")).expect("runs.json"))
                .expect("json");
        let mut arrays = Arrays::open(&dir.join("runs.npz"));
        for call in runs["calls"].as_array().expect("calls") {
            for input in call["inputs"].as_array().expect("inputs") {
                decode(input, &mut arrays);
            }
            if let Some(out) = call.get("output") {
                decode(out, &mut arrays);
            }
            decoded += 1;
        }
    }
    assert!(decoded > 0, "no golden calls found");
}
