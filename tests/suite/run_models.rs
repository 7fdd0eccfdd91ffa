//! Every golden call of every fixture (`fixtures/golden/<name>/runs.json`, recorded in PyTorch
//! with `torch.manual_seed(0)` before each call) run through `Module::call` / `run_method`.
//! Calls run in order on one loaded module, as in PyTorch, so state changes carry over.
//!
//! Fixtures listed in `KNOWN_FAILING` are allowed to fail (the tally shows why); any other
//! failure fails the test, and a listed fixture that passes is reported so the list shrinks.

use crate::common::{compare, compiled_method, decode, Arrays};
use crate::load_common::{fixture_names, fixtures_dir, load_fixture};
use serde_json::Value;
use tsrun::internals::ir::printer::{print_graph, PrintOptions};
use tsrun::internals::ir::python_print::function_code;
use tsrun::internals::ops::OpContext;
use tsrun::IValue;

/// Fixtures whose calls do not all match PyTorch yet.
const KNOWN_FAILING: &[&str] = &[];

/// Run every golden call of fixture `name` (on the archive as tsrun re-saves it when
/// `resaved`); `Err` names the first call that differs.
fn run_fixture(name: &str, resaved: bool) -> Result<usize, String> {
    let dir = fixtures_dir().join("golden").join(name);
    let runs: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("runs.json")).map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    let mut arrays = Arrays::open(&dir.join("runs.npz"));
    let mut root = load_fixture(name).map_err(|e| format!("load: {e}"))?;
    if resaved {
        let bytes = root
            .to_archive_bytes(&[])
            .map_err(|e| format!("save: {e}"))?;
        root = tsrun::internals::runtime::Module::load_bytes(&bytes)
            .map_err(|e| format!("reload: {e}"))?;
    }
    let calls = runs["calls"].as_array().ok_or("runs.json without calls")?;
    for (i, call) in calls.iter().enumerate() {
        let path = call["module"].as_str().unwrap_or_default();
        let method = call["method"].as_str().unwrap_or("forward");
        let what = format!("call {i} ({path}.{method})");
        let target = if path.is_empty() {
            root.clone()
        } else {
            root.get_submodule(path)
                .map_err(|e| format!("{what}: {e}"))?
        };
        let inputs: Vec<IValue> = call["inputs"]
            .as_array()
            .ok_or("call without inputs")?
            .iter()
            .map(|v| decode(v, &mut arrays))
            .collect();
        let ctx = OpContext::with_seed(0);
        let result = if method == "forward" {
            target.call_with(inputs, &ctx)
        } else {
            target.run_method_with(method, inputs, &ctx)
        };
        match (result, call.get("error")) {
            (Ok(got), None) => {
                let want = decode(&call["output"], &mut arrays);
                let rtol = call["rtol"].as_f64().unwrap_or(1e-4);
                let atol = call["atol"].as_f64().unwrap_or(1e-5);
                compare(&got, &want, rtol, atol, "out").map_err(|e| format!("{what}: {e}"))?;
            }
            (Ok(got), Some(err)) => {
                return Err(format!(
                    "{what}: PyTorch raised {err}, tsrun returned {got:?}"
                ))
            }
            (Err(e), None) => return Err(format!("{what}: {e}")),
            (Err(e), Some(err)) => {
                // PyTorch's message without its exception-class prefix must be in ours.
                let err = err.as_str().unwrap_or_default();
                let message = err.rsplit(": ").next().unwrap_or(err);
                let ours = e.to_string();
                if !ours.contains(message) {
                    return Err(format!("{what}: error {ours:?} does not say {message:?}"));
                }
            }
        }
    }
    Ok(calls.len())
}

#[test]
fn fixture_outputs_match_pytorch() {
    check_all_fixtures(false);
}

/// load -> save -> load keeps every output (issue: save round trip).
/// Issue 12 (an archive failing with "undefined name `padding1`"): the printer annotates a
/// Union-typed `if` output on its first branch only (`padding2 : Union[int, str] = ...`, then
/// `padding2 = "same"`), and PyTorch merges the branches by the variables' declared types.
/// The fixture's methods compile, give PyTorch's outputs and print PyTorch's code and graph.
#[test]
fn union_typed_branch_merges_run_and_print_like_pytorch() {
    let calls = run_fixture("lang_union_merges", false).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(calls, 20);
    let text = std::fs::read_to_string(
        fixtures_dir()
            .join("golden")
            .join("lang_union_merges")
            .join("printed.json"),
    )
    .expect("printed.json");
    let printed: Value = serde_json::from_str(&text).expect("printed.json is JSON");
    let root = load_fixture("lang_union_merges").expect("load");
    for method in [
        "forward",
        "pick",
        "alternate",
        "optional_member",
        "container_members",
        "while_carried",
    ] {
        let (_, f) = compiled_method(&root, "", method).unwrap_or_else(|e| panic!("{e}"));
        let want = &printed[""][method];
        let code = function_code(&f, true).expect("code").code;
        assert_eq!(Some(code.as_str()), want["code"].as_str(), "{method} code");
        let graph = print_graph(&f.graph, PrintOptions::default());
        assert_eq!(
            Some(graph.as_str()),
            want["graph"].as_str(),
            "{method} graph"
        );
    }
}

#[test]
fn resaved_fixtures_give_the_same_outputs() {
    check_all_fixtures(true);
}

fn check_all_fixtures(resaved: bool) {
    let mut passed = Vec::new();
    let mut unexpected = Vec::new();
    let mut known = Vec::new();
    let mut calls = 0;
    for name in fixture_names() {
        if !fixtures_dir()
            .join("golden")
            .join(&name)
            .join("runs.json")
            .exists()
        {
            continue;
        }
        match run_fixture(&name, resaved) {
            Ok(n) => {
                calls += n;
                if KNOWN_FAILING.contains(&name.as_str()) {
                    eprintln!("now passing, remove from KNOWN_FAILING: {name}");
                }
                passed.push(name);
            }
            Err(e) => {
                // the failing call and the innermost cause
                let call = e.split(": ").next().unwrap_or_default();
                let line = format!("{name}: {call}: {}", e.lines().last().unwrap_or_default());
                if KNOWN_FAILING.contains(&name.as_str()) {
                    known.push(line);
                } else {
                    unexpected.push(format!("{name}: {e}"));
                }
            }
        }
    }
    eprintln!(
        "fixtures matching PyTorch: {} ({calls} calls); known failing: {}; unexpected: {}",
        passed.len(),
        known.len(),
        unexpected.len()
    );
    for k in &known {
        eprintln!("  known: {k}");
    }
    assert!(
        unexpected.is_empty(),
        "fixtures that differ from PyTorch:\n{}",
        unexpected.join("\n\n")
    );
}

/// One loaded module called from several threads at once gives every thread PyTorch's answer
/// (plans and the compiled program are shared; per-call state is not).
#[test]
fn concurrent_calls_share_one_module() {
    let name = "convnet";
    let dir = fixtures_dir().join("golden").join(name);
    let runs: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("runs.json")).expect("runs.json"))
            .expect("runs.json is JSON");
    let call = &runs["calls"][0];
    let mut arrays = Arrays::open(&dir.join("runs.npz"));
    let inputs: Vec<IValue> = call["inputs"]
        .as_array()
        .expect("inputs")
        .iter()
        .map(|v| decode(v, &mut arrays))
        .collect();
    let want = decode(&call["output"], &mut arrays);
    let module = load_fixture(name).expect("load");
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let ctx = OpContext::with_seed(0);
                    (0..3)
                        .map(|_| module.call_with(inputs.clone(), &ctx))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in handles {
            for got in h.join().expect("thread") {
                let got = got.expect("call");
                compare(&got, &want, 1e-4, 1e-5, "out").expect("matches PyTorch");
            }
        }
    });
}

/// After `Module::prepare(["forward"])`, the first call compiles nothing: every method and
/// function a fixture's golden forward calls reach was compiled ahead (the LSTM tagger's
/// `lstm.forward__0` and its helpers, `_conv_forward`, free functions of `torch.nn.functional`).
#[test]
fn prepare_compiles_everything_the_first_call_runs() {
    let mut late = Vec::new();
    for name in fixture_names() {
        let dir = fixtures_dir().join("golden").join(&name);
        let Ok(text) = std::fs::read_to_string(dir.join("runs.json")) else {
            continue;
        };
        let runs: Value = serde_json::from_str(&text).expect("runs.json");
        let mut arrays = Arrays::open(&dir.join("runs.npz"));
        let root = load_fixture(&name).expect("load");
        let Some(first) = runs["calls"].as_array().and_then(|c| {
            c.iter()
                .find(|c| c["module"].as_str().unwrap_or_default().is_empty())
        }) else {
            continue;
        };
        let method = first["method"].as_str().unwrap_or("forward");
        if root.prepare(&[method]).is_err() {
            continue;
        }
        let interpreter = root.interpreter().expect("interpreter");
        let before = interpreter.compiled_plans();
        let inputs: Vec<IValue> = first["inputs"]
            .as_array()
            .expect("inputs")
            .iter()
            .map(|v| decode(v, &mut arrays))
            .collect();
        let ctx = OpContext::with_seed(0);
        let _ = if method == "forward" {
            root.call_with(inputs, &ctx)
        } else {
            root.run_method_with(method, inputs, &ctx)
        };
        let after = interpreter.compiled_plans();
        if after != before {
            late.push(format!(
                "{name}.{method}: {} plans compiled late",
                after - before
            ));
        }
    }
    assert!(late.is_empty(), "{late:#?}");
}

/// An archive whose code names CUDA devices (as one scripted or traced on a GPU does) runs on
/// the CPU with the devices remapped, and gives what PyTorch computes with the CPU named instead.
#[test]
fn accelerator_devices_in_archive_code_are_remapped_to_the_cpu() {
    let dir = crate::common::fixtures_dir().join("device_remap");
    let golden = tsrun::read_state_dict(dir.join("golden.npz")).expect("golden");
    let m = tsrun::Module::load(dir.join("cuda_net.pt")).expect("load");
    let out: tsrun::Tensor = m
        .forward(&[golden["x"].clone().into()])
        .expect("runs on the CPU")
        .extract()
        .expect("a tensor");
    let want = golden["out"].to_vec::<f32>().unwrap();
    let got = out.to_vec::<f32>().unwrap();
    assert_eq!(out.shape(), golden["out"].shape());
    for (g, w) in got.iter().zip(&want) {
        assert!(
            (g - w).abs() <= 1e-6 * (1.0 + w.abs()),
            "{got:?} vs {want:?}"
        );
    }
}
