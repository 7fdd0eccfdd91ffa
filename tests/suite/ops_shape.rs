//! Golden tests for the shape family (src/ops/shape.rs): values from fixtures/ops/shape.json and
//! view geometry (strides, storage offset, aliasing) from fixtures/ops/shape_views.json, both
//! written by fixtures/gen_ops_shape.py with PyTorch.

use crate::common;

use crate::common::{compare, decode, fixtures_dir, Arrays};
use serde_json::Value;
use std::fs::File;
use tsrun::internals::ops::{Args, OpContext, Registry};
use tsrun::internals::tensor::Tensor;
use tsrun::internals::values::IValue;

#[test]
fn shape_op_cases() {
    common::assert_op_cases("shape");
}

fn call(op: &str, overload: &str, args: Vec<IValue>, ctx: &OpContext) -> Result<IValue, String> {
    let name = if overload.is_empty() {
        op.to_string()
    } else {
        format!("{op}.{overload}")
    };
    let kernel = Registry::global()
        .lookup(op, overload)
        .ok_or_else(|| format!("no kernel for {name}"))?;
    let mut args = args;
    kernel(&mut Args::new(&name, &mut args, ctx)).map_err(|e| format!("{name}: {e}"))
}

fn tensors_of(v: &IValue) -> Vec<Tensor> {
    match v {
        IValue::Tensor(t) => vec![t.clone()],
        IValue::List(l) => l.to_vec().iter().flat_map(tensors_of).collect(),
        IValue::Tuple(t) => t.items().iter().flat_map(tensors_of).collect(),
        _ => vec![],
    }
}

#[test]
fn views_alias_like_pytorch() {
    assert_view_cases("shape_views");
}

/// Runs fixtures/ops/<family>.json as written by `ops_c_common.ViewCases`: each case's input is
/// built by applying its `prep` view chain to a contiguous base (so it can be non-contiguous),
/// and the result must match PyTorch's values, strides, storage offset and aliasing of the base.
pub(crate) fn assert_view_cases(family: &str) {
    let dir = fixtures_dir().join("ops");
    let json: Value =
        serde_json::from_reader(File::open(dir.join(format!("{family}.json"))).expect("json"))
            .expect("valid");
    let mut arrays = Arrays::open(&dir.join(format!("{family}.npz")));
    let ctx = OpContext::default();
    let mut failures = Vec::new();
    let cases = json["cases"].as_array().expect("cases");
    for (i, case) in cases.iter().enumerate() {
        let base = decode(&case["base"], &mut arrays);
        let base_t = base.as_tensor().expect("base tensor").clone();
        let mut x = base;
        let mut failed = None;
        for p in case["prep"].as_array().expect("prep") {
            let mut args = vec![x.clone()];
            args.extend(
                p[2].as_array()
                    .expect("prep args")
                    .iter()
                    .map(|a| decode(a, &mut arrays)),
            );
            match call(
                p[0].as_str().expect("op"),
                p[1].as_str().expect("overload"),
                args,
                &ctx,
            ) {
                Ok(v) => x = v,
                Err(e) => failed = Some(e),
            }
        }
        let op = case["op"].as_str().expect("op");
        let outcome = failed.map(Err).unwrap_or_else(|| {
            let mut args = vec![x];
            args.extend(
                case["args"]
                    .as_array()
                    .expect("args")
                    .iter()
                    .map(|a| decode(a, &mut arrays)),
            );
            call(op, case["overload"].as_str().expect("overload"), args, &ctx)
        });
        let got = match outcome {
            Ok(v) => v,
            Err(e) => {
                failures.push(format!("case {i} {op}: {e}"));
                continue;
            }
        };
        let want = decode(&case["out"], &mut arrays);
        let want = match (&got, want) {
            // tuple results are recorded as lists
            (IValue::Tuple(_), IValue::List(l)) => {
                IValue::Tuple(tsrun::internals::values::Tuple::new(l.to_vec()))
            }
            (_, w) => w,
        };
        if let Err(e) = compare(&got, &want, 0.0, 0.0, "out") {
            failures.push(format!("case {i} {op}: {e}"));
            continue;
        }
        let outs = tensors_of(&got);
        let geo = case["geometry"].as_array().expect("geometry");
        if outs.len() != geo.len() {
            failures.push(format!(
                "case {i} {op}: {} outputs, want {}",
                outs.len(),
                geo.len()
            ));
            continue;
        }
        for (k, (t, g)) in outs.iter().zip(geo).enumerate() {
            let strides: Vec<i64> = g["strides"]
                .as_array()
                .expect("strides")
                .iter()
                .map(|s| s.as_i64().expect("int"))
                .collect();
            let got_strides: Vec<i64> = t.strides().iter().map(|&s| s as i64).collect();
            let offset = g["offset"].as_u64().expect("offset") as usize;
            let aliases = g["aliases"].as_bool().expect("aliases");
            let shape_ok = t.shape().iter().all(|&s| s > 1) || t.numel() == 0;
            // strides of size-1 dims are free in PyTorch only where it says so; compare all
            // strides when every dim is larger than 1, otherwise the non-trivial ones.
            let strides_ok = if shape_ok {
                got_strides == strides
            } else {
                t.shape()
                    .iter()
                    .zip(got_strides.iter().zip(&strides))
                    .all(|(&s, (a, b))| s <= 1 || a == b)
            };
            if !strides_ok || t.storage_offset() != offset || t.shares_storage(&base_t) != aliases {
                failures.push(format!(
                    "case {i} {op} output {k}: strides {got_strides:?} offset {} aliases {}, want {strides:?} {offset} {aliases}",
                    t.storage_offset(),
                    t.shares_storage(&base_t)
                ));
            }
        }
    }
    println!(
        "{family}: {} passed, {} failed",
        cases.len() - failures.len(),
        failures.len()
    );
    for f in &failures {
        println!("  {f}");
    }
    assert!(failures.is_empty(), "{} view cases failed", failures.len());
}
