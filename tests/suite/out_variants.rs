//! out= overloads (`torch.add(a, b, out=buf)`, `torch.max(x, 1, max=v, max_values=i)`) run
//! through their functional sibling (src/ops/out_variants.rs): PyTorch's results, printed code
//! and graphs from fixtures/gen_out_variants.py, PyTorch's dtype refusals, IR text, the
//! resize tsrun refuses, and an out= overload left without a kernel.

use crate::common::{compare, fixtures_dir, Arrays};
use std::path::PathBuf;
use tsrun::golden::{Case, Tolerance};
use tsrun::internals::cli::parse_graph::run_graph;
use tsrun::internals::ir::parse_graph::parse_graph;
use tsrun::internals::ir::printer::{print_graph, PrintOptions};
use tsrun::internals::ir::python_print::function_code;
use tsrun::internals::ops::out_variants;
use tsrun::internals::runtime::Module;
use tsrun::internals::tensor::{DType, TensorError};
use tsrun::internals::values::IValue;
use tsrun::{Error, ErrorKind};

fn dir() -> PathBuf {
    fixtures_dir().join("out_variants")
}

fn cases() -> Vec<PathBuf> {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(dir())
        .expect("fixtures/out_variants")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.join("model.pt").exists())
        .collect();
    cases.sort();
    assert_eq!(cases.len(), 11, "{cases:?}");
    cases
}

#[test]
fn scripted_out_calls_match_pytorch() {
    tsrun::set_warnings_enabled(false);
    for case in cases() {
        let report = Case::load(&case)
            .expect("the golden case loads")
            .check(Tolerance::default())
            .unwrap_or_else(|e| panic!("{}: {e}", case.display()));
        assert!(report.passed(), "{}: {report}", case.display());
    }
}

#[test]
fn code_and_graph_print_like_pytorch() {
    for case in cases() {
        let printed: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(case.join("printed.json")).expect("printed.json"),
        )
        .expect("json");
        let m = Module::load(case.join("model.pt")).expect("loads");
        let unit = m.compilation_unit().expect("compiles");
        let f = unit.method(m.class_name(), "forward").expect("forward");
        let code = function_code(&f, true).expect("prints").code;
        assert_eq!(
            code,
            printed["code"].as_str().expect("code"),
            "{}",
            case.display()
        );
        let graph = print_graph(&f.graph, PrintOptions::default());
        assert_eq!(
            graph,
            printed["graph"].as_str().expect("graph"),
            "{}",
            case.display()
        );
    }
}

/// An error case's archive and inputs (`arr_0`, ... of its npz, of `dtypes`).
fn error_case(name: &str, dtypes: &[DType]) -> (Module, Vec<IValue>) {
    let m = Module::load(dir().join("errors").join(format!("{name}.pt"))).expect(name);
    let mut arrays = Arrays::open(&dir().join("errors").join(format!("{name}.npz")));
    let inputs = dtypes
        .iter()
        .enumerate()
        .map(|(i, &d)| IValue::Tensor(arrays.tensor(&format!("arr_{i}"), d)))
        .collect();
    (m, inputs)
}

/// A result dtype `canCast` refuses for the out tensor fails as PyTorch fails, with its
/// message and the op.
#[test]
fn uncastable_out_dtypes_fail_as_in_pytorch() {
    let errors: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir().join("errors").join("errors.json")).expect("json"),
    )
    .expect("json");
    let cases = [
        (
            "div_into_int",
            &[DType::Float32, DType::Float32][..],
            "aten::div.out",
            DType::Int64,
        ),
        (
            "sin_into_int",
            &[DType::Int64],
            "aten::sin.out",
            DType::Int64,
        ),
        (
            "float_sum_into_bool",
            &[DType::Float32],
            "aten::add.out",
            DType::Bool,
        ),
    ];
    for (name, dtypes, op, out_dtype) in cases {
        let (m, inputs) = error_case(name, dtypes);
        let err = m.forward(&inputs).expect_err(name);
        let pytorch = errors[name]["pytorch"].as_str().expect("message");
        let msg = err.to_string();
        assert!(
            msg.contains(pytorch.trim_start_matches("RuntimeError: ")),
            "{name}: {msg}\nvs PyTorch: {pytorch}"
        );
        assert_eq!(err.op(), Some(op), "{name}: {msg}");
        match err.root_cause() {
            Error::Tensor(TensorError::OutDTypeCast { op: o, result, out }) => {
                assert_eq!((o.as_str(), *result, *out), (op, DType::Float32, out_dtype));
            }
            other => panic!("{name}: {other:?}"),
        }
    }
}

/// A helper function writing into its caller's buffer cannot resize it (the caller's handle
/// would keep the old shape; PyTorch resizes the caller's tensor): tsrun says so, naming the
/// op and the parameter, instead of returning a wrong shape.
#[test]
fn resizing_a_callers_buffer_is_refused() {
    let (m, inputs) = error_case("helper_resizes", &[DType::Float32]);
    let err = m.forward(&inputs).expect_err("refused");
    let msg = err.root_cause().to_string();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{msg}");
    assert_eq!(err.op(), Some("aten::mul.Scalar_out"), "{msg}");
    assert!(
        msg.contains("from [0] to the result's shape [3, 4]") && msg.contains("`out`"),
        "{msg}"
    );
}

/// An out= overload whose functional sibling has no kernel is missing, named at compile time.
#[test]
fn out_overload_without_a_functional_kernel_is_reported() {
    let m = Module::load(dir().join("errors").join("masked_scale_into.pt")).expect("loads");
    let x = IValue::Tensor(tsrun::Tensor::from_vec(vec![0.5f32; 12], &[3, 4]).expect("x"));
    let err = m.forward(&[x]).expect_err("missing");
    match &err {
        Error::UnsupportedOps { ops, .. } => {
            let names: Vec<&str> = ops.iter().map(|o| o.op.as_str()).collect();
            assert_eq!(names, ["aten::_masked_scale.out"], "{err}");
        }
        other => panic!("{other}"),
    }
    assert!(!tsrun::internals::ops::has_kernel(
        "aten::_masked_scale",
        "out"
    ));
}

/// PyTorch's IR text with out= calls: overloads chosen by argument count and types, run.
#[test]
fn ir_text_with_out_calls_runs() {
    let text = std::fs::read_to_string(dir().join("graph_text.txt")).expect("graph text");
    let graph = parse_graph(&text).expect("parses");
    let mut arrays = Arrays::open(&dir().join("graph_text.npz"));
    let a = arrays.tensor("a", DType::Float32);
    let b = arrays.tensor("b", DType::Float32);
    let got = run_graph(graph, vec![IValue::Tensor(a), IValue::Tensor(b)], 0).expect("runs");
    let want = IValue::Tuple(tsrun::internals::values::Tuple::new(vec![
        IValue::Tensor(arrays.tensor("o", DType::Float32)),
        IValue::Tensor(arrays.tensor("v", DType::Float32)),
        IValue::Tensor(arrays.tensor("i", DType::Int64)),
    ]));
    compare(&got, &want, 1e-6, 1e-6, "out").expect("PyTorch's result");
}

/// How many of PyTorch's out= overloads have a kernel path (README's feature table), and the
/// families the brief names resolve to their functional siblings.
#[test]
fn out_overloads_with_a_kernel_path() {
    for (out, functional) in [
        ("aten::div.out", "aten::div.Tensor"),
        ("aten::div.out_mode", "aten::div.Tensor_mode"),
        ("aten::sum.IntList_out", "aten::sum.dim_IntList"),
        ("aten::cat.out", "aten::cat"),
        ("aten::max.dim_max", "aten::max.dim"),
        ("aten::sort.values", "aten::sort"),
        ("aten::topk.values", "aten::topk"),
        ("aten::ones.out", "aten::ones"),
    ] {
        let v = out_variants::resolve(out).unwrap_or_else(|| panic!("{out}"));
        assert_eq!(&*v.functional, functional);
    }
    let coverage = out_variants::coverage();
    let with_path = coverage.iter().filter(|(_, has)| *has).count();
    assert_eq!((with_path, coverage.len()), (853, 1013), "README's figure");
}
