//! Honest operator coverage: kernels are registered under exact schema overloads, every
//! registered runtime overload has a PyTorch golden, and fixtures/ops/coverage.json (one
//! synthesized golden per registered overload, fixtures/gen_ops_coverage.py) matches PyTorch,
//! including the tensors in-place and out= overloads must write.

use crate::common::{compare, decode, decode_all, fixtures_dir, Arrays};
use serde_json::Value;
use std::collections::BTreeSet;
use std::fs::File;
use tsrun::internals::ops::schema::SchemaRegistry;
use tsrun::internals::ops::{Args, OpContext, Registry};
use tsrun::internals::values::IValue;

fn schema_names() -> BTreeSet<String> {
    SchemaRegistry::global()
        .all()
        .iter()
        .map(|s| s.qualified_name())
        .collect()
}

#[test]
fn every_registered_name_is_an_exact_schema_overload() {
    let schemas = schema_names();
    let unknown: Vec<&str> = Registry::global()
        .names()
        .into_iter()
        .filter(|n| !schemas.contains(*n))
        .collect();
    assert!(
        unknown.is_empty(),
        "{} registered names are not overloads in fixtures/schemas.txt: {unknown:?}",
        unknown.len()
    );
}

/// Every `op.overload` some fixtures/ops/*.json case calls (directly or as a view-chain step).
fn golden_overloads() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let dir = fixtures_dir().join("ops");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("fixtures/ops")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let name = |op: &str, ov: &str| {
        if ov.is_empty() {
            op.to_string()
        } else {
            format!("{op}.{ov}")
        }
    };
    for f in files {
        let json: Value = serde_json::from_reader(File::open(&f).expect("open")).expect("json");
        for case in json["cases"].as_array().expect("cases") {
            if let Some(op) = case["op"].as_str() {
                out.insert(name(op, case["overload"].as_str().unwrap_or("")));
            }
            for step in case["prep"].as_array().into_iter().flatten() {
                if let (Some(op), Some(ov)) = (step[0].as_str(), step[1].as_str()) {
                    out.insert(name(op, ov));
                }
            }
            packing_overloads(&case["args"], &mut out);
        }
    }
    out
}

/// The packing overloads of the `packed` arguments inside `v` (tsrun runs them to make the
/// argument: their opaque results are checked through what the case computes from them).
fn packing_overloads(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(map) => {
            if let Some(op) = map.get("packed").and_then(|p| p["op"].as_str()) {
                out.insert(op.to_string());
            }
            map.values().for_each(|x| packing_overloads(x, out));
        }
        Value::Array(items) => items.iter().for_each(|x| packing_overloads(x, out)),
        _ => {}
    }
}

/// Registered runtime overloads that have no golden yet: fixtures/ops/coverage_without_golden.txt
/// lists them exactly (one a line), so the list can only shrink: a new kernel must come with a
/// golden, and an overload that gains one must leave the list.
#[test]
fn every_registered_runtime_overload_has_a_pytorch_golden() {
    let goldens = golden_overloads();
    let registered: Vec<&str> = Registry::global()
        .names()
        .into_iter()
        .filter(|n| tsrun::internals::cli::ops::is_runtime_relevant(n))
        .collect();
    let without: BTreeSet<String> = registered
        .iter()
        .filter(|n| !goldens.contains(**n))
        .map(|n| n.to_string())
        .collect();
    let (covered, total) = tsrun::internals::cli::ops::exact_coverage(None, |_, _| {});
    let with_golden = registered.len() - without.len();
    println!(
        "exact kernels: {covered} of {total} runtime overloads; {} registered runtime names, \
         {with_golden} with a PyTorch golden, {} without",
        registered.len(),
        without.len()
    );
    let listed: BTreeSet<String> = std::fs::read_to_string(
        fixtures_dir()
            .join("ops")
            .join("coverage_without_golden.txt"),
    )
    .expect("coverage_without_golden.txt")
    .lines()
    .map(str::trim)
    .filter(|l| !l.is_empty() && !l.starts_with('#'))
    .map(str::to_string)
    .collect();
    let new: Vec<&String> = without.difference(&listed).collect();
    let gained: Vec<&String> = listed.difference(&without).collect();
    assert!(
        new.is_empty() && gained.is_empty(),
        "registered overloads without a golden that are not listed: {new:?}; listed ones that \
         now have a golden or no kernel (remove them): {gained:?}"
    );
}

/// The synthesized golden families: fixtures/ops/coverage.json (as first generated) and every
/// `coverage_<family>.json` written by `gen_ops_coverage.py LIST coverage_<family>` for the
/// overloads a later change added.
fn synthesized_families() -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(fixtures_dir().join("ops"))
        .expect("fixtures/ops")
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let stem = name.strip_suffix(".json")?;
            (stem == "coverage" || stem.starts_with("coverage_")).then(|| stem.to_string())
        })
        .collect();
    out.sort();
    out
}

/// Runs every synthesized family: results, and the arguments the schema marks as written.
#[test]
fn synthesized_goldens_match_pytorch() {
    let families = synthesized_families();
    assert!(
        families.iter().any(|f| f == "coverage"),
        "fixtures/ops/coverage.json is missing"
    );
    let mut failed = 0;
    for family in &families {
        let (cases, failures) = run_coverage_cases(family, |name| name.to_string());
        println!("{family}: {cases} cases, {} failed", failures.len());
        for f in &failures {
            println!("  {f}");
        }
        failed += failures.len();
    }
    assert_eq!(failed, 0, "{failed} synthesized coverage cases failed");
}

/// A kernel is chosen for its exact overload when the plan is built; it never re-reads the
/// operator name to tell its overloads apart (the name reaches it for error messages only).
/// So every coverage case gives PyTorch's result with the name replaced by a neutral one.
#[test]
fn kernels_do_not_choose_their_overload_by_name() {
    let (mut cases, mut failures) = (0, Vec::new());
    for family in synthesized_families() {
        let (more, more_failures) = run_coverage_cases(&family, |_| "aten::_renamed".to_string());
        cases += more;
        failures.extend(more_failures);
    }
    for f in &failures {
        println!("  {f}");
    }
    assert!(
        failures.is_empty(),
        "{} of {cases} coverage cases depend on the operator name",
        failures.len()
    );
}

/// Every case of a synthesized family (`coverage`, `coverage_aten`, ...), the kernel called with
/// `op_name(name)` as its operator name: the number of cases and the failures.
fn run_coverage_cases(family: &str, op_name: impl Fn(&str) -> String) -> (usize, Vec<String>) {
    let dir = fixtures_dir().join("ops");
    let json: Value = serde_json::from_reader(
        File::open(dir.join(format!("{family}.json"))).expect("synthesized family json"),
    )
    .expect("json");
    let mut arrays = Arrays::open(&dir.join(format!("{family}.npz")));
    let registry = Registry::global();
    let ctx = OpContext::default();
    let mut failures = Vec::new();
    let cases = json["cases"].as_array().expect("cases");
    for (i, case) in cases.iter().enumerate() {
        let op = case["op"].as_str().expect("op");
        let overload = case["overload"].as_str().unwrap_or("");
        let name = if overload.is_empty() {
            op.to_string()
        } else {
            format!("{op}.{overload}")
        };
        let Some(kernel) = registry.lookup(op, overload) else {
            failures.push(format!("case {i} {name}: no kernel"));
            continue;
        };
        let mut args: Vec<IValue> = decode_all(&case["args"], &mut arrays);
        let (rtol, atol) = (
            case["rtol"].as_f64().unwrap_or(1e-4),
            case["atol"].as_f64().unwrap_or(1e-5),
        );
        let before: Vec<IValue> = args.clone();
        let called = op_name(&name);
        let got = match kernel(&mut Args::new(&called, &mut args, &ctx)) {
            Ok(v) => v,
            Err(e) => {
                failures.push(format!("case {i} {name}: error: {e}"));
                continue;
            }
        };
        let want = decode(&case["out"], &mut arrays);
        let outcome = if case["shape_only"].as_bool() == Some(true) {
            match (&got, &want) {
                // (a quantized factory's quantizer is deterministic: compared too)
                (IValue::Tensor(g), IValue::Tensor(w))
                    if g.shape() == w.shape()
                        && g.dtype() == w.dtype()
                        && g.quantizer() == w.quantizer() =>
                {
                    Ok(())
                }
                _ => Err(format!("got {got:?}, want a tensor like {want:?}")),
            }
        } else {
            compare(&got, &want, rtol, atol, "out")
        };
        // `Tensor(a!)` arguments: the caller's tensor (`before`, sharing storage) must hold
        // PyTorch's value after the call; for an in-place geometry op, the argument slot (see
        // `common::run_op_cases`).
        let geometry = tsrun::internals::ir::passes::inplace_geometry::changes_handle(op);
        let written = case["written"].as_array().cloned().unwrap_or_default();
        let outcome = outcome.and_then(|()| {
            written.iter().try_for_each(|w| {
                let j = w[0].as_u64().expect("index") as usize;
                let want = decode(&w[1], &mut arrays);
                compare(
                    if geometry { &args[j] } else { &before[j] },
                    &want,
                    rtol,
                    atol,
                    &format!("argument {j} after"),
                )
            })
        });
        if let Err(e) = outcome {
            failures.push(format!("case {i} {name}: {e}"));
        }
    }
    (cases.len(), failures)
}

/// fixtures/zoo_failures.py `unsupported_ops`: the first call fails before running anything,
/// naming every overload without a kernel (the one inside a branch too) with its source line.
#[test]
fn unsupported_overloads_are_listed_at_compile_time() {
    let m = tsrun::internals::runtime::Module::load(
        fixtures_dir().join("models").join("unsupported_ops.pt"),
    )
    .expect("load");
    let x = tsrun::Tensor::from_vec(vec![0.5f32, 1.5], &[2]).expect("tensor");
    let e = m
        .forward(&[IValue::Tensor(x)])
        .expect_err("no kernels for these ops")
        .to_string();
    for (op, code) in [
        ("aten::_cslt_sparse_mm", "torch._cslt_sparse_mm(x, x)"),
        (
            "aten::_sparse_semi_structured_apply_dense",
            "torch._sparse_semi_structured_apply_dense(x, x)",
        ),
        (
            "aten::_sparse_semi_structured_linear",
            "torch._sparse_semi_structured_linear(x, x, x)",
        ),
    ] {
        let line = e
            .lines()
            .find(|l| l.trim_start().starts_with(op))
            .unwrap_or_else(|| panic!("{op} not listed: {e}"));
        assert!(
            line.contains("zoo_failures.py\", line ") && line.contains(code),
            "{line}"
        );
    }
}

/// `Module::prepare` compiles ahead of the first call: preparing reports the same missing
/// overloads, an unknown method is named, and a supported model prepares.
#[test]
fn prepare_compiles_before_the_first_call() {
    let models = fixtures_dir().join("models");
    let m =
        tsrun::internals::runtime::Module::load(models.join("unsupported_ops.pt")).expect("load");
    let e = m
        .prepare(&["forward"])
        .expect_err("no kernels for these ops")
        .to_string();
    assert!(e.contains("aten::_cslt_sparse_mm"), "{e}");
    let m = tsrun::internals::runtime::Module::load(models.join("mlp.pt")).expect("load");
    m.prepare(&["forward"]).expect("mlp prepares");
    let e = m
        .prepare(&["no_such_method"])
        .expect_err("unknown method")
        .to_string();
    assert!(e.contains("no_such_method"), "{e}");
}

/// `Registry::add` replaces a kernel registered earlier under the same name, which is how the
/// quantized-aware wrappers take over the float kernels they fall back to. Any other repeat is
/// two families claiming one overload, where only the later kernel would ever run.
#[test]
fn only_the_quantized_and_nested_wrappers_replace_registered_kernels() {
    // `ops/quantized/elementwise.rs`: these take quantized inputs and call the float kernels
    // for everything else
    let wrappers = [
        "aten::relu",
        "aten::relu_",
        "aten::max_pool2d",
        "aten::adaptive_avg_pool2d",
        "aten::avg_pool2d",
        "aten::hardsigmoid",
        "aten::mean.dim",
        "aten::cat",
        "aten::clamp",
        "aten::hardtanh",
        "aten::relu6",
        "aten::sigmoid",
        "aten::tanh",
        "aten::max_pool1d",
        "aten::max_pool3d",
        "aten::avg_pool1d",
        "aten::adaptive_avg_pool1d",
        "aten::avg_pool3d",
        "aten::adaptive_avg_pool3d",
        "aten::stack",
        "aten::eq.Scalar",
        "aten::ne.Scalar",
        "aten::ge.Scalar",
        "aten::le.Scalar",
        "aten::gt.Scalar",
        "aten::lt.Scalar",
        "aten::eq.Tensor",
        "aten::ne.Tensor",
        "aten::ge.Tensor",
        "aten::le.Tensor",
        "aten::gt.Tensor",
        "aten::lt.Tensor",
    ];
    // `ops/nested.rs`: these take nested tensors and call the dense kernels for everything
    // else (`aten::relu` is then wrapped again by the quantized wrapper)
    let nested_wrappers = tsrun::internals::ops::nested::nested_wrapped_names().collect::<Vec<_>>();
    let mut replaced: Vec<&str> = Registry::global()
        .replaced()
        .iter()
        .map(String::as_str)
        .collect();
    replaced.sort_unstable();
    let mut expected = wrappers.to_vec();
    expected.extend(nested_wrappers);
    expected.sort_unstable();
    assert_eq!(replaced, expected);
}
