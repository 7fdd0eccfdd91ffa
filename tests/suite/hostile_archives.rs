//! Hostile archives (issue 11): each is crafted here from a committed fixture and must end in a
//! typed error (or PyTorch's result where PyTorch has one): no panic, no signal, no hang, and
//! bounded memory. Kernel-boundary errors are compared with PyTorch's messages
//! (fixtures/gen_hostile.py writes them).

use crate::common::{decode, fixtures_dir, Arrays};
use crate::load_common::model_path;

use std::io::{Cursor, Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tsrun::internals::archive::ArchiveError;
use tsrun::internals::frontend::ParseError;
use tsrun::internals::ir::CompileError;
use tsrun::internals::ops::{Args, OpContext, Registry};
use tsrun::internals::runtime::{CancelHandle, LoadOptions, Module, RunOptions};
use tsrun::internals::tensor::budget::{with_budget, MemoryBudget};
use tsrun::internals::values::IValue;
use tsrun::{Error, Tensor};

// ---- crafting --------------------------------------------------------------------------

/// The records of fixture `name`: (full name, bytes), in zip order.
fn records_of(name: &str) -> Vec<(String, Vec<u8>)> {
    let bytes = std::fs::read(model_path(name)).expect("fixture");
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

fn build_zip(records: &[(String, Vec<u8>)]) -> Vec<u8> {
    crate::bad_input::build_zip(records)
}

fn mlp() -> Vec<(String, Vec<u8>)> {
    records_of("mlp")
}

fn record<'a>(records: &'a mut [(String, Vec<u8>)], suffix: &str) -> &'a mut Vec<u8> {
    &mut records
        .iter_mut()
        .find(|(n, _)| n.ends_with(suffix))
        .unwrap_or_else(|| panic!("no record {suffix}"))
        .1
}

const MLP_CODE: &str = "code/__torch__/zoo_lang.py";
/// MLP.forward's body in mlp.pt (fixtures/gen_hostile.py makes the same edit).
const MLP_FORWARD: &str = "    _0 = (head).forward((net).forward(x, ), )\n    return _0";

/// mlp.pt with MLP.forward's body replaced by `body` (4-space indented lines).
fn mlp_with_forward(body: &str) -> Vec<u8> {
    let mut records = mlp();
    let code = record(&mut records, MLP_CODE);
    let text = String::from_utf8(code.clone()).expect("utf8");
    assert!(text.contains(MLP_FORWARD), "{text}");
    *code = text.replace(MLP_FORWARD, body).into_bytes();
    build_zip(&records)
}

fn x_input() -> Vec<IValue> {
    let x = Tensor::from_vec((0..16).map(|i| i as f32 / 8.0 - 1.0).collect(), &[2, 8]).unwrap();
    vec![IValue::Tensor(x)]
}

/// The outcome of loading `bytes`, compiling and running `forward` on `inputs`, under a
/// memory budget: every step must end in Ok or a typed error.
fn load_and_run(bytes: &[u8], options: &RunOptions) -> Result<IValue, Error> {
    let m = Module::load_bytes(bytes)?;
    m.call_opts(x_input(), options)
}

fn small_run() -> RunOptions {
    RunOptions {
        timeout: Some(Duration::from_secs(20)),
        max_alloc_bytes: 16 << 20,
        max_live_bytes: Some(48 << 20),
        ..Default::default()
    }
}

/// Run `f` and return its result with the peak bytes this thread allocated meanwhile.
fn metered<R>(f: impl FnOnce() -> R) -> (R, usize) {
    crate::alloc_meter::metered(f)
}

/// Memory a hostile case may use on its thread (the archives here are kilobytes).
const MEMORY_BOUND: usize = 96 << 20;

fn assert_bounded<R>(what: &str, f: impl FnOnce() -> R) -> R {
    let (r, peak) = metered(f);
    assert!(
        peak < MEMORY_BOUND,
        "{what}: peak {peak} bytes allocated (bound {MEMORY_BOUND})"
    );
    r
}

// ---- the reproductions of issue 11 -----------------------------------------------------

#[test]
fn lstm_projection_with_wrong_weight_hr_raises_pytorchs_error() {
    let golden: serde_json::Value = serde_json::from_reader(
        std::fs::File::open(fixtures_dir().join("hostile/lstm_proj_error.json")).unwrap(),
    )
    .unwrap();
    let shape: Vec<usize> = golden["input_shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as usize)
        .collect();
    let want = golden["error"].as_str().unwrap();
    let m = Module::load(model_path("hostile_lstm_proj")).expect("loads");
    let n: usize = shape.iter().product();
    let x = Tensor::from_vec(vec![0.5f32; n], &shape).unwrap();
    let e = m.call(&[IValue::Tensor(x)]).expect_err("ran a broken LSTM");
    assert!(e.to_string().contains(want), "{e}\nwant: {want}");
}

#[test]
fn a_method_calling_itself_is_rejected_at_compile_time() {
    let golden: serde_json::Value = serde_json::from_reader(
        std::fs::File::open(fixtures_dir().join("hostile/recursion.json")).unwrap(),
    )
    .unwrap();
    let want = golden["error"].as_str().unwrap().trim_end_matches(':');
    let bytes = mlp_with_forward(
        "    if bool(torch.gt(torch.sum(x), 0.)):\n      _0 = (self).forward(x, )\n    else:\n      _0 = (head).forward((net).forward(x, ), )\n    return _0",
    );
    let m = Module::load_bytes(&bytes).expect("loads (compiling is lazy)");
    let unit = m.compilation_unit().expect("registers");
    let e = match unit.method(m.class_name(), "forward") {
        Ok(_) => panic!("recursive method compiled"),
        Err(e) => e,
    };
    assert!(matches!(e, CompileError::Recursion { .. }), "{e}");
    assert!(e.to_string().contains(want), "{e}\nwant: {want}");
    assert!(e.to_string().contains("zoo_lang.py:"), "{e}");
    let e = m.call(&x_input()).expect_err("recursive method ran");
    assert!(e.to_string().contains(want), "{e}");
}

#[test]
fn mutual_recursion_through_a_submodule_is_rejected() {
    // Sequential.forward calls MLP.forward back: the cycle spans two classes.
    let mut records = mlp();
    let code = record(&mut records, "code/__torch__/torch/nn/modules/container.py");
    let text = String::from_utf8(code.clone()).unwrap();
    let (head, _) = text.split_once("  def forward(").expect("forward");
    *code = format!(
        "{head}  def forward(self: __torch__.torch.nn.modules.container.Sequential,\n    input: Tensor) -> Tensor:\n    return (self).forward(input, )\n"
    )
    .into_bytes();
    let m = Module::load_bytes(&build_zip(&records)).expect("loads");
    let e = m.call(&x_input()).expect_err("recursion ran");
    assert!(e.to_string().contains("is called recursively"), "{e}");
}

#[test]
fn graph_inlined_of_a_recursive_method_exits_with_an_error_not_a_signal() {
    let bytes = mlp_with_forward("    _0 = (self).forward(x, )\n    return _0");
    let dir = std::env::temp_dir().join(format!("tsrun-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("recursive.pt");
    std::fs::write(&path, bytes).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tsrun"))
        .args(["graph", "--inlined"])
        .arg(&path)
        .output()
        .expect("runs tsrun");
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.code().is_some(), "killed by a signal: {stderr}");
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("is called recursively"), "{stderr}");
}

const WHILE_TRUE: &str = "    _0 = x\n    while True:\n      _0 = torch.add(_0, 1)\n    return _0";

#[test]
fn while_true_stops_at_the_deadline() {
    let m = Module::load_bytes(&mlp_with_forward(WHILE_TRUE)).unwrap();
    let options = RunOptions {
        timeout: Some(Duration::from_millis(300)),
        ..Default::default()
    };
    let t0 = Instant::now();
    let e = m.call_opts(x_input(), &options).expect_err("ran forever");
    let limit = e.limit().unwrap_or_else(|| panic!("not a limit: {e}"));
    assert_eq!((limit.which, limit.limit), ("timeout", 300), "{e}");
    assert!(e.to_string().contains("timeout limit exceeded"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(10));
}

#[test]
fn while_true_stops_at_the_step_budget() {
    let m = Module::load_bytes(&mlp_with_forward(WHILE_TRUE)).unwrap();
    let options = RunOptions {
        max_steps: Some(10_000),
        ..Default::default()
    };
    let e = m.call_opts(x_input(), &options).expect_err("ran forever");
    let limit = e.limit().unwrap_or_else(|| panic!("not a limit: {e}"));
    assert_eq!(
        (limit.which, limit.limit, limit.requested),
        ("max_steps", 10_000, 10_001)
    );
}

/// With no options at all a call still has a step budget: `forward`, `call` and `run_method`
/// run under `RunOptions::default()`, whose budget bounds a runaway loop (checked here on the
/// defaults, since a billion interpreter steps take too long for a debug-build test).
#[test]
fn default_options_bound_every_call_with_a_step_budget() {
    assert_eq!(
        RunOptions::default().max_steps,
        Some(tsrun::internals::runtime::DEFAULT_MAX_STEPS)
    );
    // a real model's call takes a few hundred steps: far below the default
    let m = Module::load_bytes(&mlp_with_forward("    return torch.neg(x)")).unwrap();
    m.forward(&x_input())
        .expect("a bounded call runs under the defaults");
}

#[test]
fn an_empty_infinite_loop_counts_steps_too() {
    // the loop's only effect is to never end, so nothing may remove it
    let body = "    _0 = x\n    while True:\n      pass\n    return torch.neg(_0)";
    let m = Module::load_bytes(&mlp_with_forward(body)).unwrap();
    let options = RunOptions {
        max_steps: Some(1000),
        ..Default::default()
    };
    let e = m.call_opts(x_input(), &options).expect_err("ran forever");
    assert_eq!(e.limit().map(|l| l.which), Some("max_steps"), "{e}");
}

#[test]
fn while_true_is_cancelled_from_another_thread() {
    let m = Module::load_bytes(&mlp_with_forward(WHILE_TRUE)).unwrap();
    let cancel = CancelHandle::new();
    let options = RunOptions {
        cancel: Some(cancel.clone()),
        ..Default::default()
    };
    let canceller = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        cancel.cancel();
    });
    let t0 = Instant::now();
    let e = m.call_opts(x_input(), &options).expect_err("ran forever");
    canceller.join().unwrap();
    assert!(e.is_cancelled(), "{e}");
    assert!(t0.elapsed() >= Duration::from_millis(150));
    assert!(e.to_string().contains("cancelled"), "{e}");
}

#[test]
fn limits_do_not_change_a_normal_result() {
    let m = Module::load(model_path("mlp")).unwrap();
    let plain = m.call(&x_input()).unwrap();
    let limited = m
        .call_opts(
            x_input(),
            &RunOptions {
                timeout: Some(Duration::from_secs(60)),
                max_steps: Some(1_000_000),
                max_live_bytes: Some(64 << 20),
                cancel: Some(CancelHandle::new()),
                ..Default::default()
            },
        )
        .unwrap();
    let (IValue::Tensor(a), IValue::Tensor(b)) = (plain, limited) else {
        panic!("tensors expected")
    };
    assert_eq!(a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
}

#[test]
fn the_call_depth_limit_is_configurable() {
    // mlp's forward nests three calls deep: MLP -> Sequential -> Linear.
    let m = Module::load(model_path("mlp")).unwrap();
    let e = m
        .call_opts(
            x_input(),
            &RunOptions {
                max_call_depth: 2,
                ..Default::default()
            },
        )
        .expect_err("depth 2 is too shallow for mlp");
    let l = e.limit().unwrap_or_else(|| panic!("not a limit: {e}"));
    assert_eq!(
        (l.which, l.limit, l.requested),
        ("max_call_depth", 2, 3),
        "{e}"
    );
}

/// `depth` nested calls of `torch.neg` around `x`.
fn nested_calls(depth: usize) -> String {
    format!(
        "    _0 = {}x{}\n    return _0",
        "torch.neg(".repeat(depth),
        ")".repeat(depth)
    )
}

fn parse_error(bytes: &[u8], options: &LoadOptions) -> Error {
    let m = Module::load_bytes_with(bytes, options).expect("loads");
    match m.program() {
        Ok(_) => panic!("deep code parsed"),
        Err(e) => e,
    }
}

#[test]
fn deeply_nested_expressions_are_a_typed_error() {
    for body in [
        nested_calls(20_000),
        format!("    _0 = {}x\n    return _0", "- ".repeat(50_000)),
        format!("    _0 = x{}\n    return _0", " + x".repeat(50_000)),
        format!(
            "    _0 = {}x{}\n    return _0",
            "[".repeat(5_000),
            "]".repeat(5_000)
        ),
    ] {
        let e = parse_error(&mlp_with_forward(&body), &LoadOptions::default());
        assert!(
            e.to_string()
                .contains("code nests deeper than 1000 levels (max_code_depth)"),
            "{e}"
        );
        assert!(e.to_string().contains("zoo_lang.py:"), "{e}");
    }
}

#[test]
fn deeply_nested_blocks_are_a_typed_error() {
    let mut body = String::from("    _0 = x\n");
    for level in 0..1500 {
        body.push_str(&" ".repeat(4 + 2 * level));
        body.push_str("if True:\n");
    }
    body.push_str(&" ".repeat(4 + 2 * 1500));
    body.push_str("_0 = x\n    return _0");
    let e = parse_error(&mlp_with_forward(&body), &LoadOptions::default());
    assert!(e.to_string().contains("max_code_depth"), "{e}");
}

#[test]
fn code_within_the_depth_limit_compiles_and_runs() {
    // 200 nested calls: deep, but within the default limit; the emitter must not overflow
    // the test thread's 2 MiB stack.
    let m = Module::load_bytes(&mlp_with_forward(&nested_calls(200))).unwrap();
    let out = m.call(&x_input()).expect("runs");
    let (IValue::Tensor(out), IValue::Tensor(x)) = (out, x_input().remove(0)) else {
        panic!()
    };
    assert_eq!(out.to_vec::<f32>().unwrap(), x.to_vec::<f32>().unwrap());
    // and a small max_code_depth rejects even the fixture's own code
    let tight = LoadOptions {
        max_code_depth: 4,
        ..Default::default()
    };
    let e = parse_error(&build_zip(&mlp()), &tight);
    assert!(
        matches!(e.to_string(), s if s.contains("deeper than 4 levels")),
        "{e}"
    );
}

// ---- LoadOptions ------------------------------------------------------------------------

#[test]
fn load_options_bound_archive_bytes_records_and_pickle_depth() {
    let bytes = build_zip(&mlp());
    let small = LoadOptions {
        max_archive_bytes: 1000,
        ..Default::default()
    };
    let e = Module::load_bytes_with(&bytes, &small).expect_err("too big");
    assert_eq!(e.limit().map(|l| l.which), Some("max_archive_bytes"), "{e}");
    let few = LoadOptions {
        max_records: 5,
        ..Default::default()
    };
    let e = Module::load_bytes_with(&bytes, &few).expect_err("too many records");
    let l = e.limit().unwrap_or_else(|| panic!("{e}"));
    assert_eq!((l.which, l.limit, l.requested), ("max_records", 5, 25));
    let shallow = LoadOptions {
        max_pickle_depth: 1,
        ..Default::default()
    };
    let e = Module::load_bytes_with(&bytes, &shallow).expect_err("too deep");
    assert!(e.to_string().contains("max_pickle_depth"), "{e}");
    Module::load_bytes_with(&bytes, &LoadOptions::default()).expect("defaults load it");
}

// ---- crafted archives: each must end in a typed error -----------------------------------

/// A crafted archive and the check its error must pass.
struct Case {
    name: String,
    bytes: Vec<u8>,
    /// `None`: loading must fail with an error this accepts. Running is tried when it loads.
    check: fn(&Error) -> bool,
}

fn archive_err(e: &Error) -> bool {
    matches!(e, Error::Archive(_))
}
fn pickle_err(e: &Error) -> bool {
    matches!(e, Error::Pickle(_)) || e.to_string().contains("data.pkl")
}
fn pickle_err_saying(e: &Error, what: &str) -> bool {
    matches!(e, Error::Pickle(_)) && e.to_string().contains(what)
}
fn storage_count_overflow(e: &Error) -> bool {
    pickle_err_saying(e, "elements of float32 overflow")
}
fn view_extent_overflow(e: &Error) -> bool {
    pickle_err_saying(
        e,
        "tensor does not fit its storage: tensor view out of bounds: byte extent overflows",
    )
}
fn view_out_of_bounds(e: &Error) -> bool {
    pickle_err_saying(e, "tensor does not fit its storage")
        && e.to_string().contains("storage has 16")
}
fn storage_beyond_record(e: &Error) -> bool {
    pickle_err_saying(e, "has 16 bytes but the pickle declares 4096 elements")
}
fn forbidden_storage_class(e: &Error) -> bool {
    pickle_err_saying(e, "global 'torch.QuadFloatStorage' is not allowed")
}
fn undeclared_class(e: &Error) -> bool {
    matches!(e, Error::Module(_)) && e.to_string().contains("no code file declares it")
}
fn shape_numel_overflow(e: &Error) -> bool {
    e.to_string()
        .contains("numel of shape [4611686018427387904, 4611686018427387904] overflows")
}
fn limit_err(e: &Error) -> bool {
    e.limit().is_some()
}
fn path_err(e: &Error) -> bool {
    matches!(e, Error::Archive(ArchiveError::BadPath(_)))
}

/// Byte offsets of every local file header (`PK\x03\x04`) in a zip.
fn local_headers(zip: &[u8]) -> Vec<usize> {
    zip.windows(4)
        .enumerate()
        .filter(|(_, w)| *w == b"PK\x03\x04")
        .map(|(i, _)| i)
        .collect()
}

fn data_pkl_with(edit: impl FnOnce(&[u8]) -> Vec<u8>) -> Vec<u8> {
    let mut records = mlp();
    let pkl = record(&mut records, "/data.pkl");
    *pkl = edit(pkl);
    build_zip(&records)
}

fn replace_once(hay: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let pos = hay
        .windows(from.len())
        .position(|w| w == from)
        .unwrap_or_else(|| panic!("{:?} not found", String::from_utf8_lossy(from)));
    [&hay[..pos], to, &hay[pos + from.len()..]].concat()
}

/// A zip whose data.pkl is deflated and declares `declared` uncompressed bytes.
fn zip_bomb(declared: u32) -> Vec<u8> {
    let mut records = mlp();
    let pkl_name = records
        .iter()
        .find(|(n, _)| n.ends_with("/data.pkl"))
        .unwrap()
        .0
        .clone();
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    for (name, data) in records.drain(..) {
        let method = if name == pkl_name {
            zip::CompressionMethod::Deflated
        } else {
            zip::CompressionMethod::Stored
        };
        let opts = zip::write::SimpleFileOptions::default().compression_method(method);
        w.start_file(name.as_str(), opts).unwrap();
        w.write_all(&data).unwrap();
    }
    let mut bytes = w.finish().unwrap().into_inner();
    // patch the uncompressed size of data.pkl in its local header and central entry
    let name = pkl_name.as_bytes();
    let mut i = 0;
    while let Some(p) = bytes[i..].windows(name.len()).position(|w| w == name) {
        let at = i + p;
        if bytes.get(at - 30..at - 26) == Some(b"PK\x03\x04") {
            bytes[at - 8..at - 4].copy_from_slice(&declared.to_le_bytes());
        } else if bytes.get(at - 46..at - 42) == Some(b"PK\x01\x02") {
            bytes[at - 22..at - 18].copy_from_slice(&declared.to_le_bytes());
        }
        i = at + 1;
    }
    bytes
}

/// A hand-made tensor pickle over data/0 with the given size, stride and offset opcodes.
fn tensor_pkl(
    storage_class: &str,
    numel: &[u8],
    offset: &[u8],
    size: &[u8],
    stride: &[u8],
) -> Vec<u8> {
    let mut p =
        b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\n".to_vec();
    p.extend_from_slice(storage_class.as_bytes());
    p.extend_from_slice(b"\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpu");
    p.extend_from_slice(numel);
    p.extend_from_slice(b"tQ");
    p.extend_from_slice(offset);
    p.extend_from_slice(size);
    p.extend_from_slice(stride);
    p.extend_from_slice(b"\x89}tR.");
    p
}

/// mlp.pt whose constants.pkl is the tuple (tensor,) built from `tensor_pkl` parts.
fn with_tensor_constant(pkl: Vec<u8>) -> Vec<u8> {
    // wrap the tensor in a 1-tuple: drop the final STOP, add TUPLE1 and STOP
    let mut p = pkl;
    p.pop();
    p.extend_from_slice(b"\x85.");
    let mut records = mlp();
    *record(&mut records, "/constants.pkl") = p;
    // the storage record the tensor names (16 bytes: four floats), so the case reaches the
    // tensor's own geometry rather than stopping at a missing record
    let prefix = records
        .iter()
        .find_map(|(n, _)| n.strip_suffix("constants.pkl"))
        .expect("constants.pkl")
        .to_string();
    records.push((format!("{prefix}constants/0"), vec![0u8; 16]));
    build_zip(&records)
}

fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let mut add = |name: &str, bytes: Vec<u8>, check: fn(&Error) -> bool| {
        cases.push(Case {
            name: name.to_string(),
            bytes,
            check,
        })
    };
    let base = build_zip(&mlp());
    // truncation at every record boundary (and just after each header)
    for (k, &h) in local_headers(&base).iter().enumerate() {
        add(
            &format!("truncated at record {k}"),
            base[..h].to_vec(),
            archive_err,
        );
        add(
            &format!("truncated inside header {k}"),
            base[..h + 20].to_vec(),
            archive_err,
        );
    }
    let cd = base
        .windows(4)
        .position(|w| w == b"PK\x01\x02")
        .expect("central directory");
    add(
        "truncated at the central directory",
        base[..cd].to_vec(),
        archive_err,
    );
    add(
        "truncated inside the end record",
        base[..base.len() - 5].to_vec(),
        archive_err,
    );
    // zip header corruption
    let mut b = base.clone();
    b[cd + 42..cd + 46].copy_from_slice(&u32::MAX.to_le_bytes());
    add("central entry points past the end", b, archive_err);
    let mut b = base.clone();
    b[cd + 10] = 99;
    add("unknown compression method", b, archive_err);
    let mut b = base.clone();
    b[cd + 8] |= 1;
    add("encrypted record", b, archive_err);
    let mut b = base.clone();
    let n = b.len();
    b[n - 12..n - 10].copy_from_slice(&3u16.to_le_bytes());
    b[n - 14..n - 12].copy_from_slice(&3u16.to_le_bytes());
    add("end record declares fewer entries", b, archive_err);
    // zip bombs: huge declared sizes
    add(
        "zip bomb: 4 GiB declared data.pkl",
        zip_bomb(u32::MAX),
        archive_err,
    );
    add(
        "zip bomb: declared size beyond the deflate ratio",
        zip_bomb(1 << 28),
        archive_err,
    );
    // storages: numel and stride overflow, out of bounds, unknown dtype
    let size1 = b"K\x04\x85";
    let stride1 = b"K\x01\x85";
    add(
        "numel overflow",
        with_tensor_constant(tensor_pkl(
            "FloatStorage",
            b"\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x40",
            b"K\x00",
            size1,
            stride1,
        )),
        storage_count_overflow,
    );
    add(
        "size overflow",
        with_tensor_constant(tensor_pkl(
            "FloatStorage",
            b"K\x04",
            b"K\x00",
            b"\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x40\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x40\x86",
            b"K\x01K\x01\x86",
        )),
        view_extent_overflow,
    );
    add(
        "stride overflow",
        with_tensor_constant(tensor_pkl(
            "FloatStorage",
            b"K\x04",
            b"K\x00",
            b"K\x02\x85",
            b"\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x7f\x85",
        )),
        view_extent_overflow,
    );
    add(
        "storage offset out of bounds",
        with_tensor_constant(tensor_pkl(
            "FloatStorage",
            b"K\x04",
            b"J\x00\x00\x00\x10",
            size1,
            stride1,
        )),
        view_out_of_bounds,
    );
    add(
        "storage larger than its record",
        with_tensor_constant(tensor_pkl(
            "FloatStorage",
            b"M\x00\x10",
            b"K\x00",
            size1,
            stride1,
        )),
        storage_beyond_record,
    );
    add(
        "unknown dtype (storage class)",
        with_tensor_constant(tensor_pkl(
            "QuadFloatStorage",
            b"K\x04",
            b"K\x00",
            size1,
            stride1,
        )),
        forbidden_storage_class,
    );
    // pickle: unknown class, opcode and global; deep nesting; cycles
    add(
        "unknown __torch__ class",
        data_pkl_with(|p| {
            replace_once(
                p,
                b"c__torch__.zoo_lang\nMLP\n",
                b"c__torch__.zoo_lang\nXYZ\n",
            )
        }),
        undeclared_class,
    );
    add(
        "unknown opcode",
        data_pkl_with(|p| {
            let mut p = p.to_vec();
            p[2] = 0xfe;
            p
        }),
        pickle_err,
    );
    add(
        "unknown global builtins.eval",
        data_pkl_with(|p| replace_once(p, b"collections\nOrderedDict\n", b"builtins\neval\n")),
        pickle_err,
    );
    add(
        "deeply nested data.pkl",
        data_pkl_with(|_| {
            let mut p = b"\x80\x02".to_vec();
            p.extend(std::iter::repeat_n(b']', 100_000));
            p.extend(std::iter::repeat_n(b'a', 99_999));
            p.push(b'.');
            p
        }),
        pickle_err,
    );
    add(
        "self-referencing data.pkl",
        data_pkl_with(|_| b"\x80\x02]q\x00h\x00a.".to_vec()),
        pickle_err,
    );
    add(
        "dict containing itself",
        data_pkl_with(|_| b"\x80\x02}q\x00K\x01h\x00s.".to_vec()),
        pickle_err,
    );
    add(
        "memo reference to nothing",
        data_pkl_with(|_| b"\x80\x02h\x09.".to_vec()),
        pickle_err,
    );
    add("empty data.pkl", data_pkl_with(|_| Vec::new()), pickle_err);
    // paths: traversal, absolute, drive letters, duplicates
    for (what, evil) in [
        ("parent traversal", "mlp/../../etc/passwd"),
        ("absolute path", "/etc/passwd"),
        ("drive letter", "C:/windows/evil"),
        ("backslash", "mlp\\code\\x.py"),
        ("dot component", "mlp/./data.pkl2"),
        ("NUL in name", "mlp/data\0.pkl"),
    ] {
        let mut r = mlp();
        r.push((evil.into(), b"x".to_vec()));
        add(&format!("path: {what}"), build_zip(&r), path_err);
    }
    add(
        "duplicate data.pkl",
        duplicate_record("/data.pkl"),
        archive_err,
    );
    add(
        "duplicate storage",
        duplicate_record("/data/0"),
        archive_err,
    );
    // programs that ask for too much
    add(
        "gigantic torch.zeros",
        mlp_with_forward(
            "    _0 = torch.zeros([1099511627776, 1024], dtype=None, layout=None, device=None, pin_memory=None)\n    return _0",
        ),
        limit_err,
    );
    add(
        "torch.zeros numel overflow",
        mlp_with_forward(
            "    _0 = torch.zeros([4611686018427387904, 4611686018427387904], dtype=None, layout=None, device=None, pin_memory=None)\n    return _0",
        ),
        shape_numel_overflow,
    );
    add(
        "gigantic torch.arange",
        mlp_with_forward("    _0 = torch.arange(1000000000000, dtype=None, layout=None, device=None, pin_memory=None)\n    return _0"),
        limit_err,
    );
    add(
        "list multiplication bomb",
        mlp_with_forward(
            "    _1 = torch.len(torch.mul([1, 2], 1000000000000))\n    return torch.add(x, _1)",
        ),
        limit_err,
    );
    add(
        "list doubling bomb",
        mlp_with_forward(
            "    l = [1]\n    for _1 in range(64):\n      l = torch.add(l, l)\n    return torch.add(x, torch.len(l))",
        ),
        limit_err,
    );
    add(
        "string doubling bomb",
        mlp_with_forward(
            "    s = \"ab\"\n    for _1 in range(64):\n      s = torch.add(s, s)\n    return torch.add(x, torch.len(s))",
        ),
        limit_err,
    );
    add(
        "live memory bomb",
        mlp_with_forward(
            "    l = annotate(List[Tensor], [])\n    for _1 in range(1000):\n      _2 = torch.append(l, torch.zeros([1048576], dtype=None, layout=None, device=None, pin_memory=None))\n    return torch.add(x, torch.len(l))",
        ),
        limit_err,
    );
    add(
        "syntax error in code",
        mlp_with_forward("    _0 = ((x\n    return _0"),
        |e| matches!(e, Error::Module(_) | Error::Parse(_)),
    );
    add(
        "code that is not UTF-8",
        {
            let mut r = mlp();
            record(&mut r, MLP_CODE).extend_from_slice(b"\xff\xfe");
            build_zip(&r)
        },
        archive_err,
    );
    add(
        "unsupported version",
        {
            let mut r = mlp();
            *record(&mut r, "/version") = b"4294967296".to_vec();
            build_zip(&r)
        },
        archive_err,
    );
    add(
        "bad byteorder",
        {
            let mut r = mlp();
            *record(&mut r, "/byteorder") = b"middle".to_vec();
            build_zip(&r)
        },
        archive_err,
    );
    cases
}

fn duplicate_record(suffix: &str) -> Vec<u8> {
    let mut r = mlp();
    let (name, data) = r.iter().find(|(n, _)| n.ends_with(suffix)).unwrap().clone();
    // same-length stand-in name, renamed to the duplicate after writing
    let stand_in = format!("{}#", &name[..name.len() - 1]);
    r.push((stand_in.clone(), data));
    let bytes = build_zip(&r);
    let mut out = bytes.clone();
    let (from, to) = (stand_in.as_bytes(), name.as_bytes());
    let mut i = 0;
    while i + from.len() <= out.len() {
        if &out[i..i + from.len()] == from {
            out[i..i + from.len()].copy_from_slice(to);
        }
        i += 1;
    }
    out
}

#[test]
fn at_least_forty_crafted_archives_each_end_in_a_typed_error_within_bounded_memory() {
    let cases = cases();
    assert!(cases.len() >= 40, "{} cases", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        let options = small_run();
        let budget = Arc::new(MemoryBudget::new(64 << 20, Some(256 << 20)));
        let (outcome, peak) = metered(|| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                with_budget(budget.clone(), || load_and_run(&case.bytes, &options))
            }))
        });
        match outcome {
            Err(_) => failures.push(format!("{}: panicked", case.name)),
            Ok(Ok(v)) => failures.push(format!("{}: succeeded with {}", case.name, v.kind_name())),
            Ok(Err(e)) if !(case.check)(&e) => {
                failures.push(format!("{}: wrong error: {e}", case.name))
            }
            Ok(Err(_)) => {}
        }
        if peak >= MEMORY_BOUND {
            failures.push(format!("{}: peak {peak} bytes", case.name));
        }
        assert_eq!(
            budget.live_bytes(),
            0,
            "{}: storage still charged",
            case.name
        );
    }
    println!("{} crafted archives", cases.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every single-bit flip of data.pkl, of the code file and of every zip header byte loads (and
/// runs) or fails with a typed error, never a panic.
#[test]
fn bit_flips_never_panic() {
    let records = mlp();
    let base = build_zip(&records);
    let mut variants: Vec<(String, Vec<u8>)> = Vec::new();
    let pkl = records
        .iter()
        .find(|(n, _)| n.ends_with("/data.pkl"))
        .unwrap()
        .1
        .clone();
    for i in 0..pkl.len() {
        let bit = 1u8 << (i % 8);
        let mut r = records.clone();
        record(&mut r, "/data.pkl")[i] ^= bit;
        variants.push((format!("data.pkl byte {i}"), build_zip(&r)));
    }
    let code_len = records
        .iter()
        .find(|(n, _)| n.ends_with(MLP_CODE))
        .unwrap()
        .1
        .len();
    for i in (0..code_len).step_by(3) {
        let mut r = records.clone();
        record(&mut r, MLP_CODE)[i] ^= 1 << (i % 7);
        variants.push((format!("code byte {i}"), build_zip(&r)));
    }
    let cd = base.windows(4).position(|w| w == b"PK\x01\x02").unwrap();
    let mut header_bytes: Vec<usize> = local_headers(&base)
        .into_iter()
        .flat_map(|h| h..h + 30)
        .collect();
    header_bytes.extend(cd..base.len());
    for i in header_bytes {
        let mut b = base.clone();
        b[i] ^= 1 << (i % 8);
        variants.push((format!("zip byte {i}"), b));
    }
    let options = small_run();
    let mut panics = Vec::new();
    let mut loaded = 0;
    for (name, bytes) in &variants {
        let budget = Arc::new(MemoryBudget::new(64 << 20, Some(256 << 20)));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            with_budget(budget, || load_and_run(bytes, &options))
        }));
        match r {
            Err(_) => panics.push(name.clone()),
            Ok(Ok(_)) => loaded += 1,
            Ok(Err(_)) => {}
        }
    }
    println!("{} bit flips, {loaded} still ran", variants.len());
    assert!(variants.len() > 1000);
    assert!(panics.is_empty(), "panicked: {panics:?}");
}

#[test]
fn a_hostile_archive_under_the_default_options_is_refused_within_the_bound() {
    // The same bombs without a caller-given budget: the default single-allocation cap.
    for body in [
        "    _0 = torch.zeros([1099511627776, 1024], dtype=None, layout=None, device=None, pin_memory=None)\n    return _0",
        "    _1 = torch.len(torch.mul([1, 2], 1000000000000))\n    return torch.add(x, _1)",
    ] {
        let bytes = mlp_with_forward(body);
        let e = assert_bounded(body, || load_and_run(&bytes, &RunOptions::default()))
            .expect_err("bomb ran");
        let l = e.limit().unwrap_or_else(|| panic!("{e}"));
        assert_eq!(l.which, "max_alloc_bytes", "{e}");
    }
}

// ---- kernel boundary: PyTorch's errors --------------------------------------------------

#[test]
fn kernels_validate_shapes_and_indices_with_pytorchs_errors() {
    let dir = fixtures_dir().join("ops");
    let json: serde_json::Value =
        serde_json::from_reader(std::fs::File::open(dir.join("hostile.json")).unwrap()).unwrap();
    let mut arrays = Arrays::open(&dir.join("hostile.npz"));
    let ctx = OpContext::default();
    let mut failures = Vec::new();
    let cases = json["cases"].as_array().unwrap();
    for (i, case) in cases.iter().enumerate() {
        let op = case["op"].as_str().unwrap();
        let overload = case["overload"].as_str().unwrap_or("");
        let want = case["error"].as_str().expect("an error case");
        let name = if overload.is_empty() {
            op.to_string()
        } else {
            format!("{op}.{overload}")
        };
        let Some(kernel) = Registry::global().lookup(op, overload) else {
            failures.push(format!("case {i} {name}: no kernel"));
            continue;
        };
        let mut args: Vec<IValue> = case["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| decode(a, &mut arrays))
            .collect();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            kernel(&mut Args::new(&name, &mut args, &ctx))
        }));
        match r {
            Err(_) => failures.push(format!("case {i} {name}: panicked (want {want})")),
            Ok(Ok(v)) => failures.push(format!("case {i} {name}: returned {v:?} (want {want})")),
            Ok(Err(e)) if !e.to_string().contains(want) => {
                failures.push(format!("case {i} {name}: {e}\n    want: {want}"))
            }
            Ok(Err(_)) => {}
        }
    }
    println!("{} kernel cases, {} failed", cases.len(), failures.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn short_rnn_parameter_lists_never_panic() {
    let ctx = OpContext::default();
    let t = |shape: &[usize]| {
        IValue::Tensor(Tensor::from_vec(vec![0.1f32; shape.iter().product()], shape).unwrap())
    };
    let list = |items: Vec<IValue>| {
        IValue::List(tsrun::internals::values::List::new(
            tsrun::internals::values::Type::Tensor,
            items,
        ))
    };
    for n in 0..6 {
        for layers in [1i64, 2] {
            let params: Vec<IValue> = (0..n).map(|_| t(&[16, 3])).collect();
            let mut args = vec![
                t(&[5, 2, 3]),
                list(vec![
                    t(&[layers as usize, 2, 4]),
                    t(&[layers as usize, 2, 4]),
                ]),
                list(params),
                IValue::Bool(true),
                IValue::Int(layers),
                IValue::Double(0.0),
                IValue::Bool(false),
                IValue::Bool(false),
                IValue::Bool(false),
            ];
            let kernel = Registry::global().lookup("aten::lstm", "input").unwrap();
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                kernel(&mut Args::new("aten::lstm.input", &mut args, &ctx))
            }));
            assert!(
                matches!(r, Ok(Err(_))),
                "{n} params, {layers} layers: {r:?}"
            );
        }
    }
}

// ---- compile errors are typed ------------------------------------------------------------

#[test]
fn parse_errors_of_hostile_code_are_typed() {
    let bytes = mlp_with_forward(&nested_calls(5000));
    let m = Module::load_bytes(&bytes).unwrap();
    // the module's parse cache keeps the frontend's typed error
    let Err(Error::Parse(e @ ParseError::TooDeep { .. })) = m.program() else {
        panic!("deep code parsed")
    };
    assert!(e.to_string().contains("max_code_depth"), "{e}");
    let direct = tsrun::internals::frontend::parse_file("deep.py", &"(".repeat(3000));
    assert!(
        matches!(direct, Err(ParseError::TooDeep { limit: 1000, .. })),
        "{direct:?}"
    );
}

/// Inputs cargo-fuzz found (`fuzz/run.sh`): error messages sliced source text inside a
/// multi-byte character and panicked. Each now ends in a typed error, or parses.
#[test]
fn fuzz_found_inputs_end_in_typed_errors() {
    fuzz_found_pickle_frees_everything_it_built();
    let dir = crate::common::fixtures_dir().join("hostile");
    let read = |name: &str| {
        let bytes = std::fs::read(dir.join(name)).expect("fuzz case");
        String::from_utf8_lossy(&bytes).into_owned()
    };
    let graph = read("fuzz_graph_text_char_boundary.bin");
    let _ = tsrun::internals::ir::parse_graph::parse_graph(&graph);
    for name in [
        "fuzz_parse_char_boundary.bin",
        "fuzz_compile_char_boundary.bin",
    ] {
        let text = read(name);
        if let Ok(file) = tsrun::internals::frontend::parse_file("code/__torch__/fuzz.py", &text) {
            let _ = tsrun::internals::ir::unit::CompilationUnit::from_files(&[file], Vec::new());
        }
    }
}

/// A pickle the fuzzer mutated so that an object's `__getstate__` state contains the object
/// itself: unpickling it must end in an error that frees everything it built (a cycle through
/// `state` was neither detected nor broken, so each load leaked it).
fn fuzz_found_pickle_frees_everything_it_built() {
    use tsrun::internals::pickle::{StorageLoader, Unpickler};
    let path = crate::common::fixtures_dir()
        .join("hostile")
        .join("fuzz_unpickle_state_cycle_leak.bin");
    let data = std::fs::read(path).expect("fuzz case");
    let unpickle = || {
        let mut load = |_: &str, dtype: tsrun::DType, numel: usize| {
            tsrun::internals::tensor::Storage::zeroed(numel * dtype.size())
                .map_err(|e| e.to_string())
        };
        let loader: &mut StorageLoader<'_> = &mut load;
        Unpickler::new(&data, "data.pkl")
            .with_storages(loader)
            .load()
    };
    // the first load may fill lazily built tables; later ones must leave nothing behind
    let _ = unpickle();
    let before = crate::alloc_meter::live_bytes();
    for _ in 0..4 {
        let _ = unpickle();
    }
    let left = crate::alloc_meter::live_bytes() - before;
    assert!(
        left <= 0,
        "4 loads of the fuzz pickle left {left} bytes allocated"
    );
}
