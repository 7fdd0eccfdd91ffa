//! Every fixture survives load -> save -> load unchanged (values, dtypes, geometry, aliasing,
//! attributes, code and debug records, extra files); saving is deterministic and storages are
//! stored uncompressed and 64-byte aligned.

use crate::load_common::{attributes_json, fixture_names, load_fixture, state_entry, structure};
use serde_json::{json, Value};
use std::io::Cursor;
use tsrun::internals::runtime::Module;
use tsrun::DType;

fn snapshot(m: &Module) -> Value {
    let sd = m.state_dict();
    let sharing: Vec<Vec<usize>> = sd
        .iter()
        .map(|(_, t)| {
            sd.iter()
                .enumerate()
                .filter(|(_, (_, u))| u.shares_storage(t))
                .map(|(i, _)| i)
                .collect()
        })
        .collect();
    let debug: Vec<String> = m
        .code_files()
        .keys()
        .map(|p| match m.debug_pkl(p) {
            Some(Ok(v)) => format!("{v:?}"),
            Some(Err(e)) => format!("error {e}"),
            None => "absent".into(),
        })
        .collect();
    json!({
        "state_dict": sd.iter().map(|(n, t)| state_entry(n, t)).collect::<Vec<_>>(),
        "requires_grad": sd.iter().map(|(_, t)| t.requires_grad()).collect::<Vec<_>>(),
        "sharing": sharing,
        "attributes": attributes_json(m),
        "modules": m.named_modules("", false).iter().map(|(n, s)| json!([n, s.class_name()])).collect::<Vec<_>>(),
        "code": m.code_files().iter().map(|(k, v)| json!([k, &**v])).collect::<Vec<_>>(),
        "debug": debug,
        "constants": m.constants().iter().map(|c| match c {
            tsrun::IValue::Tensor(t) => state_entry("", t),
            other => json!(format!("{other:?}")),
        }).collect::<Vec<_>>(),
        "extra": m.extra_files().iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>(),
        "version": m.shared().version,
    })
}

#[test]
fn every_fixture_round_trips() {
    let mut failures = Vec::new();
    for name in fixture_names() {
        let m = load_fixture(&name).expect("load");
        let bytes = m.to_archive_bytes(&[]).expect("save");
        let again = Module::load_bytes(&bytes).expect("reload");
        if snapshot(&m) != snapshot(&again) {
            failures.push(name.clone());
        }
        // The reloaded module still matches PyTorch's golden state_dict.
        let want = structure(&name);
        let got: Vec<Value> = again
            .state_dict()
            .iter()
            .map(|(n, t)| state_entry(n, t))
            .collect();
        let want_sd: Vec<Value> = want["state_dict"]
            .as_array()
            .expect("state_dict")
            .iter()
            .map(|w| {
                json!({"name": w["name"], "dtype": w["dtype"], "shape": w["shape"],
                "stride": w["stride"], "storage_offset": w["storage_offset"],
                "numel": w["numel"], "fnv1a64": w["fnv1a64"]})
            })
            .collect();
        assert_eq!(
            got, want_sd,
            "{name}: reloaded state_dict differs from PyTorch's"
        );
    }
    assert!(failures.is_empty(), "round trip changed: {failures:?}");
}

#[test]
fn saving_twice_gives_identical_bytes() {
    for name in fixture_names() {
        let m = load_fixture(&name).expect("load");
        let a = m.to_archive_bytes(&[]).expect("save");
        let b = m.to_archive_bytes(&[]).expect("save");
        assert!(a == b, "{name}: saves differ");
        let again = Module::load_bytes(&a).expect("reload");
        let c = again.to_archive_bytes(&[]).expect("save reloaded");
        assert!(a == c, "{name}: save of the reloaded module differs");
    }
}

#[test]
fn storages_are_stored_and_64_byte_aligned() {
    for name in fixture_names() {
        let m = load_fixture(&name).expect("load");
        let bytes = m.to_archive_bytes(&[]).expect("save");
        let mut zip = zip::ZipArchive::new(Cursor::new(bytes)).expect("zip");
        let mut storages = 0;
        for i in 0..zip.len() {
            let f = zip.by_index_raw(i).expect("entry");
            let rel = f.name().split_once('/').map(|(_, r)| r).unwrap_or("");
            if rel.starts_with("data/") || rel.starts_with("constants/") {
                storages += 1;
                assert_eq!(
                    f.compression(),
                    zip::CompressionMethod::Stored,
                    "{name}: {rel}"
                );
                assert_eq!(f.data_start() % 64, 0, "{name}: {rel} not aligned");
            }
        }
        let distinct_storages = {
            let sd = m.state_dict();
            let mut ids: Vec<usize> = sd.iter().map(|(_, t)| t.storage().id()).collect();
            ids.sort();
            ids.dedup();
            ids.len()
        };
        assert!(
            storages >= distinct_storages.min(1),
            "{name}: no storage records"
        );
    }
}

#[test]
fn shared_storages_stay_shared_after_saving() {
    for name in fixture_names() {
        let groups = structure(&name)["shared_storage_groups"].clone();
        let m = load_fixture(&name).expect("load");
        let again = Module::load_bytes(&m.to_archive_bytes(&[]).expect("save")).expect("reload");
        let sd = again.state_dict();
        for group in groups.as_array().expect("groups") {
            let names: Vec<&str> = group
                .as_array()
                .expect("group")
                .iter()
                .filter_map(|n| n.as_str())
                .collect();
            let tensors: Vec<_> = names
                .iter()
                .map(|n| {
                    &sd.iter()
                        .find(|(k, _)| k == n)
                        .expect("name in state_dict")
                        .1
                })
                .collect();
            assert!(
                tensors.windows(2).all(|w| w[0].shares_storage(w[1])),
                "{name}: {names:?} no longer share a storage"
            );
        }
    }
}

#[test]
fn extra_files_can_be_added() {
    let name = &fixture_names()[0];
    let m = load_fixture(name).expect("load");
    let bytes = m
        .to_archive_bytes(&[("notes.txt".into(), b"hello".to_vec())])
        .expect("save");
    let again = Module::load_bytes(&bytes).expect("reload");
    assert_eq!(
        again.extra_files().get("notes.txt").map(|v| v.as_slice()),
        Some(&b"hello"[..])
    );
}

#[test]
fn to_dtype_casts_floating_parameters_and_buffers() {
    for name in fixture_names() {
        let m = load_fixture(&name).expect("load");
        let before = m.state_dict();
        m.to_dtype(DType::Float64).expect("to float64");
        let after = m.state_dict();
        assert_eq!(before.len(), after.len());
        for ((n, b), (_, a)) in before.iter().zip(&after) {
            // nn.Module.to(dtype) casts floating and complex tensors (complex loses its imaginary part).
            let want = if b.dtype().is_floating_point() || b.dtype().is_complex() {
                DType::Float64
            } else {
                b.dtype()
            };
            assert_eq!(a.dtype(), want, "{name}: {n}");
            assert_eq!(a.shape(), b.shape(), "{name}: {n}");
        }
        // Survives saving.
        let again = Module::load_bytes(&m.to_archive_bytes(&[]).expect("save")).expect("reload");
        let dtypes =
            |sd: &[(String, tsrun::Tensor)]| sd.iter().map(|(_, t)| t.dtype()).collect::<Vec<_>>();
        assert_eq!(dtypes(&again.state_dict()), dtypes(&after), "{name}");
    }
}

/// PyTorch's `Module.to(dtype)` swaps a parameter's data in place, so every reference to the
/// parameter follows (an LSTM reads its weights through `_flat_weights`); after saving, the
/// references are still one tensor (the pickler memoizes it), so `torch.jit.load` keeps them tied.
#[test]
fn to_dtype_reaches_every_reference_to_a_parameter() {
    for name in ["lstm_tagger", "gru_rnn"] {
        let m = load_fixture(name).expect("load");
        m.to_dtype(DType::Float16).expect("to float16");
        let bytes = m.to_archive_bytes(&[]).expect("save");
        for module in [m.clone(), Module::load_bytes(&bytes).expect("reload")] {
            let mut checked = 0;
            for (path, sub) in module.named_modules("", true) {
                let Some(flat) = sub.attr("_flat_weights") else {
                    continue;
                };
                let flat = flat.as_list().expect("_flat_weights is a list").to_vec();
                let names = sub.attr("_flat_weights_names").expect("names");
                let names = names.as_list().expect("list").to_vec();
                assert_eq!(flat.len(), names.len(), "{name}: {path}");
                for (n, w) in names.iter().zip(&flat) {
                    let n = n.as_str().expect("name");
                    let param = sub.get_parameter(n).expect("parameter");
                    assert_eq!(param.dtype(), DType::Float16, "{name}: {path}.{n}");
                    assert!(
                        w.is_same(&tsrun::IValue::Tensor(param)),
                        "{name}: {path}._flat_weights entry for {n} is not the parameter"
                    );
                    checked += 1;
                }
            }
            assert!(checked > 0, "{name}: no _flat_weights checked");
        }
    }
}
