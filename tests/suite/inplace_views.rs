//! In-place geometry ops (`unsqueeze_`, `t_`, `resize_`, `set_`, ...) in scripted models:
//! PyTorch's results from fixtures/gen_inplace_views.py, run through the plan-build rewrite
//! that threads each op's new handle through the code (src/ir/passes/inplace_geometry.rs), and
//! the code it must refuse (another handle would see the old shape), named with op and line.

use std::path::{Path, PathBuf};
use tsrun::golden::{Case, Tolerance};
use tsrun::internals::runtime::Module;
use tsrun::internals::tensor::Tensor;
use tsrun::internals::values::IValue;
use tsrun::ErrorKind;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/inplace_views")
}

#[test]
fn scripted_models_match_pytorch() {
    let mut cases: Vec<PathBuf> = std::fs::read_dir(dir())
        .expect("fixtures/inplace_views")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.join("model.pt").exists())
        .collect();
    cases.sort();
    assert_eq!(cases.len(), 14, "{cases:?}");
    for case in cases {
        let report = Case::load(&case)
            .expect("the golden case loads")
            .check(Tolerance::default())
            .unwrap_or_else(|e| panic!("{}: {e}", case.display()));
        assert!(report.passed(), "{}: {report}", case.display());
    }
}

fn float_input(shape: &[usize]) -> IValue {
    let n: usize = shape.iter().product();
    let data: Vec<f32> = (0..n).map(|i| i as f32).collect();
    IValue::Tensor(Tensor::from_vec(data, shape).expect("tensor"))
}

/// Each refused model, its inputs, the op the error names, and what the error says about why.
#[test]
fn code_where_another_handle_sees_the_old_shape_is_refused() {
    let cases: [(&str, Vec<IValue>, &str, &str); 5] = [
        (
            "stored_in_list",
            vec![float_input(&[3])],
            "aten::unsqueeze_",
            "prim::ListConstruct",
        ),
        (
            "attribute",
            vec![float_input(&[3])],
            "aten::unsqueeze_",
            "prim::GetAttr",
        ),
        (
            "outer_in_loop",
            vec![float_input(&[3]), IValue::Int(2)],
            "aten::unsqueeze_",
            "loop body",
        ),
        (
            "changes_argument",
            vec![float_input(&[2, 3])],
            "aten::unsqueeze_",
            "top-level call",
        ),
        (
            "maybe_same",
            vec![float_input(&[2, 3])],
            "aten::t_",
            "aten::contiguous",
        ),
    ];
    for (name, inputs, op, why) in cases {
        let m = Module::load(dir().join("refused").join(format!("{name}.pt"))).expect(name);
        let err = m.forward(&inputs).expect_err(name);
        let msg = err.to_string();
        assert_eq!(err.kind(), ErrorKind::Compile, "{name}: {msg}");
        assert!(msg.contains(op) && msg.contains(why), "{name}: {msg}");
        // the location of the op in the archive's code: `code/__torch__.py:LINE:COL`
        assert!(msg.contains(".py:"), "{name}: no source line in {msg}");
    }
}

/// The caller's handle of a top-level input keeps its shape (it handed the tensor over), while
/// data writes through the new handle reach it, as they share the storage.
#[test]
fn a_top_level_input_changed_in_place_shares_its_data() {
    let m = Module::load(dir().join("set_buffers/model.pt")).expect("load");
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[6]).expect("x");
    m.forward(&[IValue::Tensor(x.clone())]).expect("runs");
    assert_eq!(x.shape(), &[6]);
    assert_eq!(
        x.to_vec::<f32>().expect("f32"),
        vec![2.0, 4.0, 6.0, 8.0, 10.0, 12.0]
    );
}

/// The op cases fixtures/gen_ops_inplace_views.py chose (storages, offsets, memory formats,
/// PyTorch's refusals): PyTorch's values.
#[test]
fn op_cases_match_pytorch() {
    crate::common::assert_op_cases("inplace_views");
}

/// The results' strides, storage offsets and sharing of the input's storage, as PyTorch's.
#[test]
fn op_results_have_pytorchs_geometry() {
    crate::ops_shape::assert_view_cases("inplace_views_geometry");
}
