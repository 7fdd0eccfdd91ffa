//! Corrupt, hostile and legacy inputs fail with a typed error saying what and where; never a
//! panic. Corrupt archives are built here from a real fixture.

use crate::load_common;

use std::io::{Cursor, Read, Write};
use tsrun::internals::archive::ArchiveError;
use tsrun::internals::pickle::{unpickle_data, PickleError};
use tsrun::internals::runtime::Module;
use tsrun::Error;

/// The records of the smallest fixture: (full name, bytes).
fn fixture_records() -> Vec<(String, Vec<u8>)> {
    let name = "mlp";
    let bytes = std::fs::read(load_common::model_path(name)).expect("fixture mlp");
    let mut zip = zip::ZipArchive::new(Cursor::new(bytes)).expect("zip");
    (0..zip.len())
        .map(|i| {
            let mut f = zip.by_index(i).expect("entry");
            let mut data = Vec::new();
            f.read_to_end(&mut data).expect("read");
            (f.name().to_string(), data)
        })
        .collect()
}

pub(crate) fn build_zip(records: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .with_alignment(64);
    for (name, data) in records {
        w.start_file(name.as_str(), opts).expect("start");
        w.write_all(data).expect("write");
    }
    w.finish().expect("finish").into_inner()
}

/// The fixture with record `suffix` replaced (or removed when `data` is None).
fn with_record(suffix: &str, data: Option<Vec<u8>>) -> Vec<u8> {
    let mut records = fixture_records();
    let pos = records
        .iter()
        .position(|(n, _)| n.ends_with(suffix))
        .unwrap_or_else(|| panic!("fixture has no {suffix}"));
    match data {
        Some(d) => records[pos].1 = d,
        None => {
            records.remove(pos);
        }
    }
    build_zip(&records)
}

fn load_err(bytes: &[u8]) -> Error {
    match Module::load_bytes(bytes) {
        Ok(_) => panic!("corrupt archive loaded"),
        Err(e) => e,
    }
}

fn data_pkl() -> Vec<u8> {
    fixture_records()
        .into_iter()
        .find(|(n, _)| n.ends_with("/data.pkl"))
        .expect("data.pkl")
        .1
}

/// Replace the first occurrence of `from` in `hay` by `to`.
fn replace(hay: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let pos = hay
        .windows(from.len())
        .position(|w| w == from)
        .expect("pattern present");
    [&hay[..pos], to, &hay[pos + from.len()..]].concat()
}

#[test]
fn the_unmodified_rebuilt_fixture_loads() {
    // Control: the rebuilding itself is sound, so failures below come from the corruption.
    Module::load_bytes(&build_zip(&fixture_records())).expect("rebuilt fixture loads");
}

#[test]
fn truncated_zip() {
    let bytes = build_zip(&fixture_records());
    for cut in [bytes.len() / 2, bytes.len() - 10, 30, 0] {
        let e = load_err(&bytes[..cut]);
        assert!(matches!(e, Error::Archive(_)), "cut {cut}: {e}");
    }
}

#[test]
fn corrupt_central_directory() {
    let mut bytes = build_zip(&fixture_records());
    // The end-of-central-directory record's directory offset (bytes 16..20 of the last 22).
    let n = bytes.len();
    bytes[n - 6..n - 2].copy_from_slice(&0xfff0_0000u32.to_le_bytes());
    let e = load_err(&bytes);
    assert!(matches!(e, Error::Archive(_)), "{e}");
}

#[test]
fn missing_data_pkl() {
    let e = load_err(&with_record("/data.pkl", None));
    assert!(
        matches!(&e, Error::Archive(ArchiveError::MissingRecord(r)) if r.ends_with("data.pkl")),
        "{e}"
    );
}

#[test]
fn missing_code_file() {
    let mut records = fixture_records();
    let pos = records
        .iter()
        .position(|(n, _)| n.contains("/code/") && n.ends_with(".py"))
        .expect("a code file");
    let (removed, _) = records.remove(pos);
    let e = load_err(&build_zip(&records));
    let msg = e.to_string();
    assert!(msg.contains("no code file declares"), "{msg}");
    let rel = removed.split_once('/').map(|(_, r)| r).unwrap_or("");
    assert!(msg.contains(rel), "{msg} (removed {rel})");
}

#[test]
fn storage_shorter_than_tensor_extent() {
    let e = load_err(&with_record("/data/0", Some(vec![0u8; 3])));
    let msg = e.to_string();
    assert!(
        matches!(e, Error::Pickle(PickleError::Storage { .. })),
        "{msg}"
    );
    assert!(msg.contains("data/0") && msg.contains("bytes"), "{msg}");
}

#[test]
fn numel_overflow_in_persistent_id() {
    // The first persistent id declares the storage's element count right before TUPLE 't'.
    let pkl = data_pkl();
    let pos = pkl
        .windows(2)
        .position(|w| w == b"tQ")
        .expect("persistent id");
    // Replace the count (BININT1/BININT2/BININT before `t`) by LONG1 2^62.
    let count_start = [pos - 2, pos - 3, pos - 5]
        .into_iter()
        .find(|&p| matches!(pkl[p], b'K' | b'M' | b'J'))
        .expect("count opcode");
    let huge = [&[0x8au8, 8][..], &(1u64 << 62).to_le_bytes()].concat();
    let bad = [&pkl[..count_start], &huge[..], &pkl[pos..]].concat();
    let e = load_err(&with_record("/data.pkl", Some(bad)));
    assert!(
        matches!(e, Error::Pickle(PickleError::Storage { .. })),
        "{e}"
    );
}

#[test]
fn negative_and_absurd_strides() {
    // A hand-written tensor pickle over a 4-element float storage.
    let tensor_pkl = |stride: &[u8]| -> Vec<u8> {
        let mut p = b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x04tQK\x00K\x02\x85".to_vec();
        p.extend_from_slice(stride);
        p.extend_from_slice(b"\x85\x89}tR.");
        p
    };
    let storage = tsrun::internals::tensor::Storage::zeroed(16).expect("alloc");
    for (stride, what) in [
        (&b"J\xff\xff\xff\xff"[..], "negative stride"),
        (&b"J\x00\x00\x00\x10"[..], "does not fit"),
    ] {
        let pkl = tensor_pkl(stride);
        let mut loader = |_: &str, _: tsrun::DType, _: usize| Ok(storage.clone());
        let loader: &mut tsrun::internals::pickle::StorageLoader<'_> = &mut loader;
        let e = tsrun::internals::pickle::Unpickler::new(&pkl, "t.pkl")
            .with_storages(loader)
            .load()
            .expect_err("bad stride accepted");
        assert!(e.to_string().contains(what), "{e}");
    }
}

#[test]
fn unknown_global_is_named() {
    let e = unpickle_data(
        b"\x80\x02cos\nsystem\nX\x02\x00\x00\x00lsq\x00\x85R.",
        "evil.pkl",
    )
    .expect_err("os.system accepted");
    match &e {
        PickleError::ForbiddenGlobal {
            module, name, pos, ..
        } => {
            assert_eq!((module.as_str(), name.as_str(), *pos), ("os", "system", 2));
        }
        other => panic!("wrong error: {other}"),
    }
    // The same inside a real archive.
    let bad = replace(
        &data_pkl(),
        b"collections\nOrderedDict\n",
        b"subprocess\nrun\n",
    );
    let e = load_err(&with_record("/data.pkl", Some(bad)));
    assert!(e.to_string().contains("subprocess.run"), "{e}");
}

#[test]
fn unknown_opcode_is_named() {
    let e = unpickle_data(b"\x80\x02K\x01\xff.", "x.pkl").expect_err("opcode accepted");
    assert!(
        matches!(
            e,
            PickleError::UnknownOpcode {
                opcode: 0xff,
                pos: 4,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn deeply_nested_pickle() {
    let depth = 200_000;
    let mut p = b"\x80\x02".to_vec();
    p.extend(std::iter::repeat_n(b']', depth));
    p.extend(std::iter::repeat_n(b'a', depth - 1));
    p.push(b'.');
    let e = unpickle_data(&p, "deep.pkl").expect_err("deep nesting accepted");
    assert!(matches!(e, PickleError::Structure { .. }), "{e}");
    assert!(e.to_string().contains("deeper"), "{e}");
}

#[test]
fn self_referencing_pickle() {
    // l = []; l.append(l)
    let e = unpickle_data(b"\x80\x02]q\x00h\x00a.", "cycle.pkl").expect_err("cycle accepted");
    assert!(e.to_string().contains("contains itself"), "{e}");
}

#[test]
fn absurd_declared_sizes() {
    let cases: [&[u8]; 4] = [
        b"\x80\x02X\xff\xff\xff\xffabc.",
        b"\x80\x02\x8d\xff\xff\xff\xff\xff\xff\xff\x7fabc.",
        b"\x80\x02\x8b\xff\xff\xff\x7f\x00.",
        b"\x80\x02B\xff\xff\xff\xff.",
    ];
    for p in cases {
        let e = unpickle_data(p, "big.pkl").expect_err("absurd size accepted");
        assert!(matches!(e, PickleError::Limit { .. }), "{e}");
    }
}

#[test]
fn truncated_pickles_never_panic() {
    let pkl = data_pkl();
    for cut in 0..pkl.len().min(400) {
        assert!(unpickle_data(&pkl[..cut], "data.pkl").is_err());
    }
}

#[test]
fn memo_and_stack_misuse() {
    for p in [
        &b"\x80\x02h\x05."[..],
        b"\x80\x02.",
        b"\x80\x02a.",
        b"\x80\x02(t(((.",
        b"\x80\x02K\x01K\x02s.",
    ] {
        assert!(unpickle_data(p, "m.pkl").is_err());
    }
}

#[test]
fn unsupported_version() {
    let e = load_err(&with_record("/version", Some(b"99\n".to_vec())));
    assert!(
        matches!(e, Error::Archive(ArchiveError::UnsupportedVersion { .. })),
        "{e}"
    );
    assert!(e.to_string().contains("99"), "{e}");
}

#[test]
fn legacy_formats_are_named() {
    // torch.save's legacy pickle format starts with its pickled magic number.
    let legacy = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.";
    let e = load_err(legacy);
    assert!(e.to_string().contains("legacy pickle format"), "{e}");
    let mut tar = vec![0u8; 1024];
    tar[257..262].copy_from_slice(b"ustar");
    assert!(load_err(&tar).to_string().contains("tar"));
    let model_json = build_zip(&[
        ("m/model.json".into(), b"{}".to_vec()),
        ("m/version".into(), b"1".to_vec()),
    ]);
    assert!(load_err(&model_json).to_string().contains("model.json"));
}

#[test]
fn unsafe_paths_are_rejected() {
    let mut records = fixture_records();
    records.push(("../evil".into(), b"x".to_vec()));
    let e = load_err(&build_zip(&records));
    assert!(matches!(e, Error::Archive(ArchiveError::BadPath(_))), "{e}");
}

#[test]
fn duplicate_record_names_are_rejected() {
    let mut records = fixture_records();
    let dup = records[0].clone();
    records.push(dup);
    // zip's writer refuses duplicates, so splice a second central entry by hand: write both
    // under distinct names of equal length, then rename the second in place.
    let n = records.len();
    let original = records[n - 1].0.clone();
    let stand_in: String = original
        .chars()
        .rev()
        .enumerate()
        .map(|(i, c)| {
            if i == 0 {
                if c == 'Z' {
                    'Y'
                } else {
                    'Z'
                }
            } else {
                c
            }
        })
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    records[n - 1].0 = stand_in.clone();
    let bytes = build_zip(&records);
    let mut patched = bytes.clone();
    let (from, to) = (stand_in.as_bytes(), original.as_bytes());
    let mut i = 0;
    while i + from.len() <= patched.len() {
        if &patched[i..i + from.len()] == from {
            patched[i..i + from.len()].copy_from_slice(to);
        }
        i += 1;
    }
    let e = load_err(&patched);
    assert!(matches!(e, Error::Archive(_)), "{e}");
}

/// A `debug_pkl` record file that is hostile: every prefix of a real one, string indices out
/// of range, negative offsets, and a source built from one long line repeated past the size
/// budget. Each decodes to a typed error (or, for a prefix, possibly fewer records), never a
/// panic.
#[test]
fn hostile_debug_pkl_never_panics() {
    use tsrun::internals::frontend::debug_pkl::{decode, DebugPklError};
    use tsrun::internals::pickle::Pickler;
    use tsrun::internals::values::Type;
    use tsrun::internals::values::{IValue, List, Tuple};

    let real = fixture_records()
        .into_iter()
        .find(|(n, _)| n.ends_with("zoo_lang.py.debug_pkl"))
        .expect("debug_pkl")
        .1;
    assert!(decode(&real, "real").is_ok_and(|r| !r.is_empty()));
    for cut in 0..real.len() {
        let _ = decode(&real[..cut], "prefix");
    }

    let pickle = |v: IValue| Pickler::new().finish(&v).expect("pickles").0;
    let tuple = |items: Vec<IValue>| IValue::Tuple(Tuple::new(items));
    let ints = |v: Vec<i64>| {
        IValue::List(List::new(
            Type::Int,
            v.into_iter().map(IValue::Int).collect(),
        ))
    };
    let file = |strings: Vec<&str>, lines: Vec<i64>, offset: i64| {
        let strings = strings.into_iter().map(IValue::str).collect();
        let source = tuple(vec![ints(lines), IValue::Int(1), IValue::Int(10)]);
        let range = tuple(vec![source, IValue::Int(0), IValue::Int(1)]);
        let record = tuple(vec![IValue::Int(offset), range, IValue::Int(-1)]);
        pickle(tuple(vec![
            IValue::str("FORMAT_WITH_STRING_TABLE"),
            tuple(strings),
            tuple(vec![record]),
        ]))
    };
    let malformed = |bytes: Vec<u8>| {
        let e = decode(&bytes, "hostile").expect_err("hostile debug_pkl decoded");
        assert!(matches!(e, DebugPklError::Malformed { .. }), "{e}");
    };
    assert!(decode(&file(vec!["", "f.py", "x\n"], vec![2], 0), "ok").is_ok());
    malformed(file(vec!["", "f.py", "x\n"], vec![7], 0));
    malformed(file(vec!["", "f.py", "x\n"], vec![2], -3));
    malformed(pickle(IValue::Int(3)));
    let long = "y".repeat(1 << 16);
    let e = decode(
        &file(vec!["", "f.py", long.as_str()], vec![2; 1 << 14], 0),
        "hostile",
    )
    .expect_err("a 1 GiB source was built");
    assert!(matches!(e, DebugPklError::TooLarge { .. }), "{e}");
}

/// An archive whose `debug_pkl` is garbage still loads, compiles and prints its graph, with the
/// archive-code locations PyTorch would print without debug records.
#[test]
fn garbage_debug_pkl_falls_back_to_code_locations() {
    use tsrun::internals::ir::printer::{print_graph, PrintOptions};
    let bytes = with_record("zoo_lang.py.debug_pkl", Some(b"\x80\x02garbage".to_vec()));
    let m = Module::load_bytes(&bytes).expect("loads");
    let unit = m.compilation_unit().expect("compiles");
    let f = unit.method(m.class_name(), "forward").expect("forward");
    let printed = print_graph(&f.graph, PrintOptions::default());
    assert!(
        printed.contains("# code/__torch__/zoo_lang.py:"),
        "{printed}"
    );
}

/// Nesting depth is a property of the value, not of the order in which the check meets shared
/// (memoized) containers: every container here is in the memo, so the check may start from the
/// innermost one, and the outer list must still count three levels.
#[test]
fn pickle_depth_counts_levels_through_memoized_containers() {
    // [[[]]] with every list memoized (BINPUT 0, 1, 2)
    let pkl = b"\x80\x02]q\x00]q\x01]q\x02aa.";
    for _ in 0..32 {
        let e = tsrun::internals::pickle::Unpickler::new(pkl, "nest.pkl")
            .with_max_depth(2)
            .load()
            .expect_err("three levels accepted under a bound of two");
        assert!(e.to_string().contains("deeper than 2 levels"), "{e}");
        tsrun::internals::pickle::Unpickler::new(pkl, "nest.pkl")
            .with_max_depth(3)
            .load()
            .expect("three levels under a bound of three");
    }
}
