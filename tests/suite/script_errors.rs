//! A TorchScript builtin that fails (an index past the end, a missing key, an integer division
//! by zero, an `assert`) raises what PyTorch's interpreter raises: a RuntimeError with its
//! message, word for word (fixtures/zoo_programs.py `scalar_builtins`; the goldens are the last
//! line of PyTorch's error text).

use crate::common::{decode_all, fixtures_dir, Arrays};
use crate::load_common::load_fixture;
use serde_json::Value;

#[test]
fn failing_builtins_raise_pytorchs_runtime_errors() {
    let dir = fixtures_dir().join("golden").join("prog_scalar_builtins");
    let runs: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("runs.json")).expect("runs.json"))
            .expect("runs.json is JSON");
    let mut arrays = Arrays::open(&dir.join("runs.npz"));
    let module = load_fixture("prog_scalar_builtins").expect("load");
    let mut checked = 0;
    for call in runs["calls"].as_array().expect("calls") {
        let Some(want) = call["error"].as_str() else {
            continue;
        };
        let method = call["method"].as_str().expect("method");
        let inputs = decode_all(&call["inputs"], &mut arrays);
        let e = module
            .run_method(method, &inputs)
            .expect_err("PyTorch raised for these inputs");
        assert_eq!(e.root_cause().to_string(), want, "{method}");
        checked += 1;
    }
    assert_eq!(checked, 7);
}
