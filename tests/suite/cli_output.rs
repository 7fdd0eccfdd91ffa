//! `tsrun run -o out.npz` / `--json` (src/cli/output.rs) against fixtures/output (written by
//! fixtures/gen_output.py): every leaf of a result holding tensors, a string, None, numbers, a
//! dict, a list and a NamedTuple is in the npz as numpy writes it (strings as `<U` arrays), and
//! structure.json describes the result as PyTorch returned it.

use crate::common::fixtures_dir;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::Read;
use tsrun::internals::runtime::Module;
use tsrun::IValue;

/// `.npy` members of an npz: name -> (header dict text, data bytes).
fn npz_members(bytes: &[u8]) -> BTreeMap<String, (String, Vec<u8>)> {
    let mut z = zip::ZipArchive::new(std::io::Cursor::new(bytes)).expect("zip");
    let mut out = BTreeMap::new();
    for i in 0..z.len() {
        let mut f = z.by_index(i).expect("member");
        let name = f.name().to_string();
        let mut b = Vec::new();
        f.read_to_end(&mut b).expect("read");
        if let Some(stem) = name.strip_suffix(".npy") {
            assert_eq!(&b[..6], b"\x93NUMPY", "{name}: npy magic");
            let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
            let header = String::from_utf8(b[10..10 + hlen].to_vec()).expect("header");
            // the same dict however it is spaced (numpy writes a trailing comma, ndarray-npy not)
            let header: String = header
                .split_whitespace()
                .collect::<String>()
                .replace(",}", "}");
            out.insert(stem.to_string(), (header, b[10 + hlen..].to_vec()));
        } else {
            out.insert(name, (String::new(), b));
        }
    }
    out
}

fn result_and_fields() -> (IValue, Module) {
    let dir = fixtures_dir().join("output");
    let m = Module::load(dir.join("structure.pt")).expect("load");
    let x = tsrun::internals::cli::run::read_npy(&dir.join("input.npy")).expect("input");
    let r = m.forward(&[IValue::Tensor(x)]).expect("forward");
    (r, m)
}

#[test]
fn npz_keeps_every_leaf_and_the_structure() {
    let (result, m) = result_and_fields();
    let unit = m.compilation_unit().expect("unit");
    let fields = |c: &str| {
        unit.class(c)
            .map(|c| c.fields.iter().map(|(n, _, _)| n.clone()).collect())
    };
    let path = std::env::temp_dir().join(format!("tsrun-output-{}.npz", std::process::id()));
    tsrun::internals::cli::output::write_npz(&path, &result, &fields).expect("write npz");
    let ours = npz_members(&std::fs::read(&path).expect("read npz"));
    let _ = std::fs::remove_file(&path);
    let dir = fixtures_dir().join("output");
    let numpy = npz_members(&std::fs::read(dir.join("expected.npz")).expect("expected.npz"));
    let mut ours_arrays = ours.clone();
    let structure = ours_arrays
        .remove("structure.json")
        .expect("structure.json entry");
    assert_eq!(
        ours_arrays.keys().collect::<Vec<_>>(),
        numpy.keys().collect::<Vec<_>>(),
        "leaf names"
    );
    for (k, (header, data)) in &numpy {
        let (h, d) = &ours_arrays[k];
        assert_eq!(h, header, "{k}: npy header");
        assert_eq!(d, data, "{k}: data");
    }
    let got: Value = serde_json::from_slice(&structure.1).expect("structure json");
    let want: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("expected_structure.json")).expect("expected json"),
    )
    .expect("json");
    assert_eq!(got, want);
}

#[test]
fn json_output_holds_the_whole_result() {
    let (result, m) = result_and_fields();
    let unit = m.compilation_unit().expect("unit");
    let fields = |c: &str| {
        unit.class(c)
            .map(|c| c.fields.iter().map(|(n, _, _)| n.clone()).collect())
    };
    let j = tsrun::internals::cli::output::to_json(&result, &fields).expect("json");
    let items = j["tuple"].as_array().expect("a tuple");
    assert_eq!(items.len(), 7);
    // out.0 is x * 2 for x = arange(6).reshape(2, 3), as PyTorch's expected.npz holds it
    let numpy = npz_members(
        &std::fs::read(fixtures_dir().join("output").join("expected.npz")).expect("npz"),
    );
    let want: Vec<f64> = numpy["out.0"]
        .1
        .chunks(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
        .collect();
    let got: Vec<f64> = items[0]["tensor"]["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|v| v.as_f64().expect("number"))
        .collect();
    assert_eq!(got, want);
    assert_eq!(items[0]["tensor"]["shape"], serde_json::json!([2, 3]));
    assert_eq!(items[1], serde_json::json!({ "str": "héllo" }));
    assert_eq!(items[2], serde_json::json!({ "none": null }));
    assert_eq!(
        items[5]["namedtuple"]["fields"],
        serde_json::json!(["score", "label"])
    );
    assert_eq!(items[6], serde_json::json!({ "bool": true }));
}

/// `tsrun compare` reads expected npz files whose string leaves numpy stored as `<U` arrays
/// (fixtures/output/expected.npz, numpy's `np.savez` of PyTorch's result): the string leaves
/// pair by name and match; a differing string fails its leaf and names both texts.
#[test]
fn compare_reads_numpy_string_arrays() {
    let run = |expected: &str| {
        crate::cli_common::tsrun(&[
            "compare",
            "fixtures/output/structure.pt",
            "-i",
            "fixtures/output/input.npy",
            "--expected",
            expected,
        ])
    };
    let ok = run("fixtures/output/expected.npz");
    assert_eq!(ok.code, Some(0), "{}\n{}", ok.stdout, ok.stderr);
    assert!(
        ok.stdout.contains("ok   out.1: \"héllo\" vs \"héllo\""),
        "{}",
        ok.stdout
    );
    assert!(
        ok.stdout.contains("ok   out.5.1: \"cat\" vs \"cat\""),
        "{}",
        ok.stdout
    );
    // PyTorch's result with out.1 stored as "hello"
    let bad = run("fixtures/output/expected_other_label.npz");
    assert_eq!(bad.code, Some(1), "{}\n{}", bad.stdout, bad.stderr);
    assert!(
        bad.stdout.contains("FAIL out.1: \"héllo\" vs \"hello\""),
        "{}",
        bad.stdout
    );
    assert!(bad.stderr.contains("1 of "), "{}", bad.stderr);
}

/// The npz reader keeps numpy's string arrays apart from the numeric ones, and a state-dict
/// read refuses them by name rather than misreading them.
#[test]
fn npz_string_arrays_read_as_text() {
    let path = fixtures_dir().join("output").join("expected.npz");
    let (tensors, strings) =
        tsrun::internals::runtime::module::read_npz_with_strings(&path).expect("read");
    assert_eq!(
        strings,
        vec![
            ("out.1".to_string(), vec!["héllo".to_string()]),
            ("out.5.1".to_string(), vec!["cat".to_string()]),
        ]
    );
    assert!(tensors.contains_key("out.0"));
    let e = tsrun::internals::runtime::module::read_npz(&path).expect_err("strings");
    assert!(e.to_string().contains("out.1 holds strings"), "{e}");
}
