//! Every fixture archive loads with the structure PyTorch reports for it
//! (fixtures/golden/<name>/structure.json): module tree, parameter/buffer/state_dict orders,
//! dtypes, geometry, bit-exact values, shared storages, methods, attributes and extra files.

use crate::load_common;

use crate::load_common::{attributes_json, fixture_names, load_fixture, state_entry, structure};
use serde_json::{json, Value};
use tsrun::internals::runtime::Module;

fn names_of(v: &[(String, Module)]) -> Value {
    json!(v.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>())
}

fn tensor_list(v: &[(String, tsrun::Tensor)]) -> Value {
    json!(v
        .iter()
        .map(|(n, t)| json!({"name": n, "dtype": t.dtype().name(), "shape": t.shape()}))
        .collect::<Vec<_>>())
}

fn check_fixture(name: &str) -> Result<(), String> {
    let want = structure(name);
    let m = load_fixture(name).map_err(|e| format!("load: {e}"))?;
    let eq = |what: &str, got: Value, want: &Value| {
        if &got == want {
            Ok(())
        } else {
            Err(format!("{what}:\n got  {got}\n want {want}"))
        }
    };
    eq("training", json!(m.training()), &want["training"])?;
    eq(
        "named_modules",
        names_of(&m.named_modules("", true)),
        &want["named_modules"],
    )?;
    eq(
        "named_children",
        names_of(&m.named_children()),
        &want["named_children"],
    )?;
    eq(
        "named_parameters",
        tensor_list(&m.named_parameters("", true, true)),
        &want["named_parameters"],
    )?;
    eq(
        "named_buffers",
        tensor_list(&m.named_buffers("", true, true)),
        &want["named_buffers"],
    )?;
    let sd = m.state_dict();
    let want_sd = want["state_dict"].as_array().ok_or("state_dict")?;
    if sd.len() != want_sd.len() {
        return Err(format!(
            "state_dict has {} entries, want {}",
            sd.len(),
            want_sd.len()
        ));
    }
    for ((n, t), w) in sd.iter().zip(want_sd) {
        eq(
            &format!("state_dict[{n}]"),
            state_entry(n, t),
            &strip_summary(w),
        )?;
    }
    // Storage sharing: exactly the golden groups (non-empty tensors) share storages.
    let mut groups: Vec<Vec<String>> = Vec::new();
    for (n, t) in sd.iter().filter(|(_, t)| t.numel() > 0) {
        match groups.iter_mut().find(|g| {
            sd.iter()
                .any(|(gn, gt)| gn == &g[0] && gt.shares_storage(t))
        }) {
            Some(g) => g.push(n.clone()),
            None => groups.push(vec![n.clone()]),
        }
    }
    groups.retain(|g| g.len() > 1);
    eq(
        "shared_storage_groups",
        json!(groups),
        &want["shared_storage_groups"],
    )?;
    let methods: serde_json::Map<String, Value> = m
        .named_modules("", true)
        .iter()
        .map(|(p, sm)| {
            let mut names = sm.method_names();
            names.sort();
            (p.clone(), json!(names))
        })
        .collect();
    let want_methods: serde_json::Map<String, Value> = want["methods"]
        .as_object()
        .ok_or("methods")?
        .iter()
        .map(|(p, v)| {
            let mut names: Vec<String> = serde_json::from_value(v.clone()).unwrap_or_default();
            names.sort();
            (p.clone(), json!(names))
        })
        .collect();
    eq(
        "methods",
        Value::Object(methods),
        &Value::Object(want_methods),
    )?;
    for (key, hooks) in [
        (
            "forward_hooks",
            Module::forward_hooks as fn(&Module) -> Vec<String>,
        ),
        ("forward_pre_hooks", Module::forward_pre_hooks),
    ] {
        let got: serde_json::Map<String, Value> = m
            .named_modules("", true)
            .iter()
            .filter(|(_, sm)| !hooks(sm).is_empty())
            .map(|(p, sm)| (p.clone(), json!(hooks(sm))))
            .collect();
        eq(key, Value::Object(got), &want[key])?;
    }
    eq("attributes", attributes_json(&m), &want["attributes"])?;
    let extra: serde_json::Map<String, Value> = m
        .extra_files()
        .iter()
        .map(|(k, v)| (k.clone(), json!(String::from_utf8_lossy(v))))
        .collect();
    eq("extra_files", Value::Object(extra), &want["extra_files"])?;
    Ok(())
}

/// The golden summary fields compared bit-exactly (sum/first are implied by fnv1a64).
fn strip_summary(w: &Value) -> Value {
    json!({
        "name": w["name"], "dtype": w["dtype"], "shape": w["shape"], "stride": w["stride"],
        "storage_offset": w["storage_offset"], "numel": w["numel"], "fnv1a64": w["fnv1a64"],
    })
}

#[test]
fn every_fixture_matches_pytorch_structure() {
    let names = fixture_names();
    assert!(!names.is_empty(), "no fixtures found");
    let failures: Vec<String> = names
        .iter()
        .filter_map(|n| check_fixture(n).err().map(|e| format!("{n}: {e}")))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn load_bytes_and_reader_match_load_from_path() {
    let name = &fixture_names()[0];
    let path = load_common::model_path(name);
    let bytes = std::fs::read(&path).expect("read fixture");
    let a = Module::load(&path).expect("load path");
    let b = Module::load_bytes(&bytes).expect("load bytes");
    let c = Module::load_reader(std::io::Cursor::new(bytes)).expect("load reader");
    let sd = |m: &Module| {
        m.state_dict()
            .iter()
            .map(|(n, t)| state_entry(n, t))
            .collect::<Vec<_>>()
    };
    assert_eq!(sd(&a), sd(&b));
    assert_eq!(sd(&a), sd(&c));
}

#[test]
fn storages_are_memory_mapped_when_loading_from_a_file() {
    let name = &fixture_names()[0];
    let m = Module::load(load_common::model_path(name)).expect("load");
    let sd = m.state_dict();
    assert!(!sd.is_empty());
    assert!(sd.iter().all(|(_, t)| t.storage().is_mapped()));
}

#[test]
fn submodules_share_the_loaded_state() {
    for name in fixture_names() {
        let m = load_fixture(&name).expect("load");
        for (path, sub) in m.named_modules("", true) {
            let got = m.get_submodule(&path).expect("get_submodule");
            assert!(got.object().ptr_eq(sub.object()), "{name}: {path}");
            assert!(std::sync::Arc::ptr_eq(got.shared(), m.shared()));
        }
        for (pname, t) in m.named_parameters("", true, true) {
            let p = m.get_parameter(&pname).expect("get_parameter");
            assert!(p.shares_storage(&t), "{name}: {pname}");
        }
        for (bname, t) in m.named_buffers("", true, true) {
            let b = m.get_buffer(&bname).expect("get_buffer");
            assert!(b.shares_storage(&t), "{name}: {bname}");
        }
    }
}

/// The loader reads class declarations with a line scan (runtime/module/decls.rs, cheaper than
/// parsing); the frontend's AST must agree with it on every fixture: kind, parameters, buffers,
/// hooks, typed attributes, constants, methods and enum members, in order.
#[test]
fn declaration_scan_agrees_with_the_ast() {
    use tsrun::internals::frontend::ast::ExprKind;
    let mut classes = 0;
    for name in fixture_names() {
        let m = load_fixture(&name).expect("load");
        let program = m.program().expect("parse");
        for (file, (path, _)) in program.iter().zip(m.code_files()) {
            let module = tsrun::internals::frontend::module_qualname(path).expect("code path");
            for c in file.classes() {
                let qualified = format!("{module}.{}", c.name.name);
                let decl = m
                    .classes()
                    .get(&qualified)
                    .unwrap_or_else(|| panic!("{name}: {qualified} not scanned"));
                assert_eq!(decl.kind, c.kind, "{name}: {qualified} kind");
                assert_eq!(decl.parameters, c.parameters, "{name}: {qualified}");
                assert_eq!(decl.buffers, c.buffers, "{name}: {qualified}");
                let strings = |target: &str| -> Vec<String> {
                    c.assignments
                        .iter()
                        .filter(|(n, _)| n.name == target)
                        .flat_map(|(_, v)| match &v.kind {
                            ExprKind::List(items) => items
                                .iter()
                                .map(|i| match &i.kind {
                                    ExprKind::Str(s) => s.clone(),
                                    other => panic!("{name}: {target} holds {other:?}"),
                                })
                                .collect::<Vec<String>>(),
                            other => panic!("{name}: {target} = {other:?}"),
                        })
                        .collect()
                };
                assert_eq!(decl.forward_hooks, strings("__forward_hooks__"), "{name}");
                assert_eq!(
                    decl.forward_pre_hooks,
                    strings("__forward_pre_hooks__"),
                    "{name}"
                );
                let attributes: Vec<(String, tsrun::internals::values::types::Type)> = c
                    .attributes
                    .iter()
                    .map(|a| (a.name.name.clone(), a.ty.to_type().expect("type")))
                    .collect();
                assert_eq!(
                    decl.attributes, attributes,
                    "{name}: {qualified} attributes"
                );
                let constants: Vec<&str> = c.constants.iter().map(|k| &*k.name.name).collect();
                let scanned: Vec<&str> = decl.constants.iter().map(|k| &*k.0).collect();
                assert_eq!(scanned, constants, "{name}: {qualified} constants");
                let methods: Vec<&str> = c.methods.iter().map(|f| &*f.name.name).collect();
                let scanned: Vec<&str> = decl.methods.iter().map(|f| &*f.name).collect();
                assert_eq!(scanned, methods, "{name}: {qualified} methods");
                if c.kind == tsrun::internals::frontend::ast::ClassKind::Enum {
                    let members: Vec<&str> = c.assignments.iter().map(|(n, _)| &*n.name).collect();
                    let scanned: Vec<&str> = decl.enum_members.iter().map(|(n, _)| &**n).collect();
                    assert_eq!(scanned, members, "{name}: {qualified} enum members");
                }
                classes += 1;
            }
        }
    }
    assert!(classes > 100, "only {classes} classes compared");
}
