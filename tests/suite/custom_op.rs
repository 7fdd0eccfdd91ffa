//! Custom operators registered from Rust (issue 14, `tsrun::register_op`) against PyTorch's
//! goldens (fixtures/gen_custom_op.py defines the same operators with `torch.library`): the
//! archive compiles, prints and runs as in PyTorch once the kernels are registered; without a
//! registration its first call names the operator and the source line; bad schemas, duplicate
//! registrations and failing kernels are typed errors.
//!
//! The registry is process-wide and tests run in parallel in one binary: the fixture's own
//! operators are registered once by `register_fixture_ops` (and stay registered), and every test
//! that needs an operator in another state uses an operator name of its own, written into a copy
//! of the archive's code. The fixture's operators unregistered are seen through the `tsrun`
//! binary, a process of its own.

use crate::cli_common::tsrun;
use crate::common::{compare, decode, fixtures_dir, Arrays};
use serde_json::Value;
use std::io::{Cursor, Read};
use std::path::PathBuf;
use std::sync::OnceLock;
use tsrun::internals::ir::printer::{print_graph, PrintOptions};
use tsrun::internals::ir::python_print::function_code;
use tsrun::internals::runtime::RuntimeError;
use tsrun::{Error, IValue, Module, Tensor};

const ARCHIVE: &str = "fixtures/custom_op/custom_op.pt";
/// The archive's code file, whose text tests copy with other operator names.
const CODE_RECORD: &str = "custom_op/code/__torch__/gen_custom_op.py";
/// PyTorch's result at float32: `gelu` is computed in float64 here and in float32 (within an
/// ulp) there.
const TOLERANCE: f64 = 1e-6;

fn archive_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(ARCHIVE)
}

/// golden.json and its tensors.
struct Golden {
    json: Value,
    arrays: Arrays,
}

impl Golden {
    fn load() -> Golden {
        let dir = fixtures_dir().join("custom_op");
        let text = std::fs::read_to_string(dir.join("golden.json")).expect("golden.json");
        Golden {
            json: serde_json::from_str(&text).expect("golden.json is JSON"),
            arrays: Arrays::open(&dir.join("golden.npz")),
        }
    }
    fn value(&mut self, key: &str) -> IValue {
        let v = self.json[key].clone();
        decode(&v, &mut self.arrays)
    }
    fn text(&self, key: &str) -> String {
        self.json[key].as_str().expect("golden text").to_string()
    }
    /// The schema string the generator defined `op` with (`myops::fused_gelu(...) -> Tensor`).
    fn schema(&self, op: &str) -> String {
        self.json["schemas"]
            .as_array()
            .expect("schemas")
            .iter()
            .filter_map(Value::as_str)
            .find(|s| s.starts_with(&format!("{op}(")))
            .unwrap_or_else(|| panic!("no schema of {op}"))
            .to_string()
    }
}

fn tensor_arg(args: &[IValue], i: usize) -> tsrun::Result<Tensor> {
    match args.get(i) {
        Some(IValue::Tensor(t)) => Ok(t.clone()),
        other => Err(Error::Kernel(format!(
            "argument {i} must be a Tensor, got {}",
            other.map_or("nothing", IValue::kind_name)
        ))),
    }
}

fn float_arg(args: &[IValue], i: usize) -> tsrun::Result<f64> {
    match args.get(i) {
        Some(IValue::Double(v)) => Ok(*v),
        other => Err(Error::Kernel(format!(
            "argument {i} must be a float, got {}",
            other.map_or("nothing", IValue::kind_name)
        ))),
    }
}

/// `myops::fused_gelu(Tensor x, float a=1.0) -> Tensor`: `a * gelu(x)` on float32, as the
/// generator's CPU implementation (`a * F.gelu(x)`): gelu rounded to float32, then the product.
fn fused_gelu(args: &[IValue]) -> tsrun::Result<IValue> {
    let x = tensor_arg(args, 0)?;
    let a = float_arg(args, 1)? as f32;
    let values: Vec<f32> = x
        .to_vec::<f32>()?
        .into_iter()
        .map(|v| {
            let v = f64::from(v);
            let gelu = 0.5 * v * (1.0 + libm::erf(v / std::f64::consts::SQRT_2));
            a * gelu as f32
        })
        .collect();
    Ok(IValue::Tensor(Tensor::from_vec(values, x.shape())?))
}

/// `myops::scale_shift(Tensor x, float scale, *, float shift=0.0) -> (Tensor, Tensor)`:
/// `(x * scale + shift, x * scale)`.
fn scale_shift(args: &[IValue]) -> tsrun::Result<IValue> {
    let x = tensor_arg(args, 0)?;
    let scale = float_arg(args, 1)? as f32;
    let shift = float_arg(args, 2)? as f32;
    let scaled: Vec<f32> = x.to_vec::<f32>()?.iter().map(|v| v * scale).collect();
    let shifted: Vec<f32> = scaled.iter().map(|v| v + shift).collect();
    Ok(IValue::tuple(vec![
        IValue::Tensor(Tensor::from_vec(shifted, x.shape())?),
        IValue::Tensor(Tensor::from_vec(scaled, x.shape())?),
    ]))
}

/// Register the fixture's operators once for the whole test binary.
fn register_fixture_ops() {
    static REGISTERED: OnceLock<()> = OnceLock::new();
    REGISTERED.get_or_init(|| {
        let golden = Golden::load();
        tsrun::register_op(&golden.schema("myops::fused_gelu"), fused_gelu)
            .expect("register fused_gelu");
        tsrun::register_op(&golden.schema("myops::scale_shift"), scale_shift)
            .expect("register scale_shift");
    });
}

/// The fixture archive with `myops::fused_gelu` renamed `myops::<name>` (ten characters, as
/// `fused_gelu`, so the code keeps its length and its debug records still line up).
fn archive_calling(name: &str) -> Vec<u8> {
    assert_eq!(name.len(), "fused_gelu".len(), "{name}");
    let bytes = std::fs::read(archive_path()).expect("fixture archive");
    let mut zip = zip::ZipArchive::new(Cursor::new(bytes)).expect("zip");
    let records: Vec<(String, Vec<u8>)> = (0..zip.len())
        .map(|i| {
            let mut f = zip.by_index(i).expect("entry");
            let mut data = Vec::new();
            f.read_to_end(&mut data).expect("read");
            let name_in_zip = f.name().to_string();
            if name_in_zip == CODE_RECORD {
                let text = String::from_utf8(data).expect("utf8 code");
                assert!(text.contains("ops.myops.fused_gelu("), "{text}");
                data = text
                    .replace("ops.myops.fused_gelu(", &format!("ops.myops.{name}("))
                    .into_bytes();
            }
            (name_in_zip, data)
        })
        .collect();
    assert!(records.iter().any(|(n, _)| n == CODE_RECORD));
    crate::bad_input::build_zip(&records)
}

fn assert_matches_pytorch(module: &Module, golden: &mut Golden) {
    let x = golden.value("x");
    let want = golden.value("out");
    let got = module.forward(&[x]).expect("forward runs");
    compare(&got, &want, TOLERANCE, TOLERANCE, "out").expect("PyTorch's output");
}

/// The `MissingOp`s of an `UnsupportedOps` error, wherever a traceback wraps it.
fn missing_ops(e: &Error) -> Option<&[tsrun::error::MissingOp]> {
    match e {
        Error::UnsupportedOps { ops, .. } => Some(ops),
        Error::Runtime(RuntimeError::Traceback { cause, .. }) => missing_ops(cause),
        _ => None,
    }
}

#[test]
fn registered_ops_run_as_pytorch() {
    register_fixture_ops();
    let mut golden = Golden::load();
    let module = Module::load(archive_path()).expect("load");
    assert_matches_pytorch(&module, &mut golden);
    // a second call runs the plan compiled by the first
    assert_matches_pytorch(&module, &mut golden);
}

#[test]
fn graph_and_code_print_as_pytorch() {
    register_fixture_ops();
    let golden = Golden::load();
    let module = Module::load(archive_path()).expect("load");
    let unit = module.compilation_unit().expect("unit");
    let forward = unit
        .method(module.class_name(), "forward")
        .expect("forward compiles");
    let graph = print_graph(
        &forward.graph,
        PrintOptions {
            source_locations: true,
        },
    );
    assert_eq!(graph, golden.text("graph"));
    let code = function_code(&forward, true).expect("code prints").code;
    assert_eq!(code, golden.text("code"));
}

#[test]
fn ops_lists_registered_ops_as_supported() {
    register_fixture_ops();
    let module = Module::load(archive_path()).expect("load");
    let (ops, failures) = tsrun::internals::cli::ops::used_ops(&module).expect("used ops");
    assert!(failures.is_empty(), "{failures:?}");
    let find = |name: &str| {
        ops.iter()
            .find(|o| o.name == name)
            .unwrap_or_else(|| panic!("{name} not listed: {ops:?}"))
    };
    assert!(find("myops::fused_gelu").supported);
    assert_eq!(find("myops::fused_gelu").uses, 2);
    assert!(find("myops::scale_shift").supported);
}

#[test]
fn unregistered_op_fails_the_first_call_naming_it_and_its_line() {
    // The `tsrun` binary registers nothing: the fixture's operator is unknown there.
    let run = tsrun(&[ARCHIVE, "--random", "3x5"]);
    assert_eq!(run.code, Some(1), "{}{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("myops::fused_gelu has no kernel"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("y = ops.myops.fused_gelu(x)"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("code/__torch__/gen_custom_op.py:"),
        "{}",
        run.stderr
    );

    let listed = tsrun(&["ops", ARCHIVE]);
    assert_eq!(listed.code, Some(0), "{}", listed.stderr);
    assert!(
        listed
            .stdout
            .contains("no  myops::fused_gelu x1  (first used at code/__torch__/gen_custom_op.py:"),
        "{}",
        listed.stdout
    );
}

#[test]
fn registering_after_load_and_a_failed_call_works() {
    let mut golden = Golden::load();
    let module = Module::load_bytes(&archive_calling("gelu_later")).expect("load");
    let e = module
        .forward(&[golden.value("x")])
        .expect_err("myops::gelu_later is not registered yet");
    let missing = missing_ops(&e).unwrap_or_else(|| panic!("not UnsupportedOps: {e}"));
    assert_eq!(missing.len(), 1, "{e}");
    assert_eq!(missing[0].op, "myops::gelu_later");
    let at = missing[0].at.as_ref().expect("a source location");
    assert_eq!(at.file, "code/__torch__/gen_custom_op.py");
    assert_eq!(at.source_line.trim(), "y = ops.myops.gelu_later(x)");
    assert!(e.to_string().contains("myops::gelu_later at"), "{e}");

    register_fixture_ops();
    tsrun::register_op(
        "myops::gelu_later(Tensor x, float a=1.0) -> Tensor",
        fused_gelu,
    )
    .expect("register");
    assert_matches_pytorch(&module, &mut golden);
}

#[test]
fn closures_are_kernels() {
    register_fixture_ops();
    let mut golden = Golden::load();
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = calls.clone();
    tsrun::register_op(
        "myops::gelu_count(Tensor x, float a=1.0) -> Tensor",
        move |args: &[IValue]| {
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            fused_gelu(args)
        },
    )
    .expect("register");
    let module = Module::load_bytes(&archive_calling("gelu_count")).expect("load");
    assert_matches_pytorch(&module, &mut golden);
    assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 2);
}

#[test]
fn bad_schema_strings_are_refused() {
    let kernel = |_: &[IValue]| Ok(IValue::None);
    for (schema, problem) in [
        ("myops::unclosed(Tensor x -> Tensor", "expected `,`"),
        ("no_namespace(Tensor x) -> Tensor", "expected `::`"),
        ("myops::no_return(Tensor x)", "expected `->`"),
        (
            "myops::bad_default(float a=fast) -> Tensor",
            "bad default `fast`",
        ),
        ("myops::trailing(Tensor x) -> Tensor y z", "trailing text"),
    ] {
        match tsrun::register_op(schema, kernel) {
            Err(e @ Error::InvalidSchema(_)) => {
                let text = e.to_string();
                assert!(text.contains(problem), "{schema}: {text}");
                assert!(text.contains(schema), "{schema}: {text}");
            }
            other => panic!("{schema}: {other:?}"),
        }
    }
}

#[test]
fn registrations_are_never_replaced() {
    let first = |_: &[IValue]| Ok(IValue::Int(1));
    tsrun::register_op("myops::dup_check(Tensor x) -> int", first).expect("first");
    match tsrun::register_op("myops::dup_check(Tensor x) -> int", first) {
        Err(Error::OpAlreadyRegistered { op, builtin: false }) => {
            assert_eq!(op, "myops::dup_check")
        }
        other => panic!("{other:?}"),
    }
    // another overload of the same name is another operator
    tsrun::register_op("myops::dup_check.twice(Tensor x, int n) -> int", first)
        .expect("an overload");
    // a built-in kernel is not replaced either
    match tsrun::register_op("aten::relu(Tensor self) -> Tensor", first) {
        Err(e @ Error::OpAlreadyRegistered { builtin: true, .. }) => {
            assert!(
                e.to_string()
                    .contains("aten::relu already has a built-in kernel"),
                "{e}"
            )
        }
        other => panic!("{other:?}"),
    }
    // an operator PyTorch declares (torchvision's, no kernel in tsrun) takes its declared schema
    match tsrun::register_op(
        "torchvision::_deform_conv2d_backward(Tensor input, Tensor weight) -> Tensor",
        first,
    ) {
        Err(e @ Error::SchemaMismatch { .. }) => {
            let text = e.to_string();
            assert!(text.contains("SymInt stride_h"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    // ... and takes it spelled differently (`int` for `SymInt`, other spacing)
    tsrun::register_op(
        "torchvision::_ps_roi_align_backward( Tensor grad, Tensor rois, Tensor channel_mapping, \
         float spatial_scale, int pooled_height, int pooled_width, int sampling_ratio, \
         int batch_size, int channels, int height, int width ) -> Tensor",
        first,
    )
    .expect("the declared schema, spelled otherwise");
    assert!(tsrun::internals::ops::custom::is_registered(
        "torchvision::_ps_roi_align_backward"
    ));
}

#[test]
fn a_failing_kernel_is_a_runtime_error_with_the_traceback() {
    tsrun::register_op(
        "myops::gelu_fails(Tensor x, float a=1.0) -> Tensor",
        |_: &[IValue]| Err(Error::Kernel("the kernel refuses this input".into())),
    )
    .expect("register");
    register_fixture_ops();
    let mut golden = Golden::load();
    let module = Module::load_bytes(&archive_calling("gelu_fails")).expect("load");
    let e = module
        .forward(&[golden.value("x")])
        .expect_err("the kernel fails");
    let Error::Runtime(RuntimeError::Traceback { frames, cause }) = &e else {
        panic!("no traceback: {e:?}");
    };
    assert!(
        frames.iter().any(|f| f
            .at
            .as_ref()
            .is_some_and(|at| at.source_line.contains("ops.myops.gelu_fails(x)"))),
        "{frames:?}"
    );
    assert!(
        matches!(&**cause, Error::CustomKernelFailed { op, source }
            if op == "myops::gelu_fails" && matches!(&**source, Error::Kernel(_))),
        "{cause:?}"
    );
    assert!(
        e.to_string()
            .contains("myops::gelu_fails: the kernel refuses this input"),
        "{e}"
    );
}

#[test]
fn a_result_of_the_wrong_type_is_an_error_naming_the_op() {
    tsrun::register_op(
        "myops::gelu_wrong(Tensor x, float a=1.0) -> Tensor",
        |_: &[IValue]| Ok(IValue::Int(3)),
    )
    .expect("register");
    register_fixture_ops();
    let mut golden = Golden::load();
    let module = Module::load_bytes(&archive_calling("gelu_wrong")).expect("load");
    let e = module
        .forward(&[golden.value("x")])
        .expect_err("an int is not a Tensor");
    assert!(
        e.to_string().contains(
            "myops::gelu_wrong: the kernel returned int where the schema declares (Tensor)"
        ),
        "{e}"
    );
}
