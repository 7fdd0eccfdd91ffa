//! Errors as data: where PyTorch raised a dimension-out-of-range error in an op golden
//! (fixtures/ops/*.json cases with an `error`), tsrun's kernel returns
//! `TensorError::DimOutOfRange` with the dimension asked for and the tensor's rank, and its text
//! is PyTorch's message.

use crate::common::{decode, fixtures_dir, Arrays};
use serde_json::Value;
use std::fs::File;
use tsrun::error::TensorError;
use tsrun::internals::ops::{Args, OpContext, Registry};
use tsrun::internals::values::IValue;
use tsrun::Error;

#[test]
fn dimension_errors_carry_the_dimension_and_rank() {
    let dir = fixtures_dir().join("ops");
    let ctx = OpContext::default();
    let mut checked = 0;
    let mut mismatches = Vec::new();
    let mut families: Vec<_> = std::fs::read_dir(&dir)
        .expect("fixtures/ops")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    families.sort();
    for json_path in families {
        let json: Value =
            serde_json::from_reader(File::open(&json_path).expect("open")).expect("json");
        let mut arrays: Option<Arrays> = None;
        for case in json["cases"].as_array().into_iter().flatten() {
            let Some(message) = case["error"].as_str() else {
                continue;
            };
            if !message.starts_with("Dimension out of range") {
                continue;
            }
            let arrays =
                arrays.get_or_insert_with(|| Arrays::open(&json_path.with_extension("npz")));
            let (op, overload) = (
                case["op"].as_str().expect("op"),
                case["overload"].as_str().unwrap_or(""),
            );
            let kernel = Registry::global().lookup(op, overload).expect("a kernel");
            let mut args: Vec<IValue> = case["args"]
                .as_array()
                .expect("args")
                .iter()
                .map(|a| decode(a, arrays))
                .collect();
            let got = kernel(&mut Args::new(op, &mut args, &ctx));
            checked += 1;
            match got {
                Err(e @ Error::Tensor(TensorError::DimOutOfRange { .. }))
                    if e.to_string().ends_with(message) => {}
                other => mismatches.push(format!("{op}.{overload}: {other:?} vs {message}")),
            }
        }
    }
    // 12 such goldens when this test was written; more may come
    assert!(
        checked >= 12,
        "only {checked} dimension-error goldens found"
    );
    assert!(mismatches.is_empty(), "{mismatches:#?}");
}
