//! The `prim::` nodes PyTorch's graph passes insert with attributes (`ConstantChunk`,
//! `ChunkSizes`, `FusedConcat`, `MMBatchSide`, `MKLDNNClamp(_)`, `MKLDNNHardTanh(_)`, the guards
//! `TypeCheck` and `RequiresGradCheck`): every case of fixtures/ir_prims/cases.json
//! (fixtures/gen_ir_prims.py: IR text PyTorch ran through `parse_ir`) run as `tsrun parse-graph`
//! runs IR text must give PyTorch's result, leave the inputs as PyTorch left them, or fail where
//! PyTorch fails.

use crate::common::{compare, decode, decode_all, fixtures_dir, Arrays};
use serde_json::Value;
use std::fs::File;
use tsrun::internals::cli::parse_graph::run_graph;
use tsrun::internals::ir::parse_graph::parse_graph;

#[test]
fn attribute_prims_match_pytorch_on_ir_text() {
    let dir = fixtures_dir().join("ir_prims");
    let json: Value =
        serde_json::from_reader(File::open(dir.join("cases.json")).expect("cases")).expect("json");
    let mut arrays = Arrays::open(&dir.join("cases.npz"));
    let cases = json["cases"].as_array().expect("cases");
    let mut failures = Vec::new();
    for case in cases {
        let name = case["name"].as_str().expect("name");
        let graph = parse_graph(case["graph"].as_str().expect("graph")).expect("parses");
        let inputs = decode_all(&case["inputs"], &mut arrays);
        let result = run_graph(graph, inputs.clone(), 0);
        let outcome = match (result, case.get("error")) {
            (Err(_), Some(_)) => Ok(()),
            (Ok(v), Some(e)) => Err(format!("expected error {e}, got {v:?}")),
            (Err(e), None) => Err(format!("error: {e}")),
            (Ok(v), None) => compare(&v, &decode(&case["out"], &mut arrays), 1e-5, 1e-6, "out")
                .and_then(|()| {
                    case["after"]
                        .as_array()
                        .expect("after")
                        .iter()
                        .enumerate()
                        .try_for_each(|(j, want)| {
                            let want = decode(want, &mut arrays);
                            compare(&inputs[j], &want, 0.0, 0.0, &format!("input {j} after"))
                        })
                }),
        };
        if let Err(e) = outcome {
            failures.push(format!("{name}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    assert_eq!(cases.len(), 36);
}
