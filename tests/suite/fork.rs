//! `torch.jit.fork` / `torch.jit.wait` (fixtures/zoo_fork.py, fixture `lang_fork`): results,
//! code, graphs and inlined graphs are checked against PyTorch's goldens with every fixture
//! (run_models, cli_code, printer_graph); here, what those do not look at: an error raised in
//! a forked function surfaces at `wait` with its TorchScript traceback, and a saved copy runs
//! the forks as the original does.

use crate::common::fixtures_dir;
use tsrun::error::RuntimeError;
use tsrun::{Error, ErrorKind, IValue, Module, Tensor};

fn fork_module() -> Module {
    Module::load(fixtures_dir().join("models").join("lang_fork.pt")).expect("load lang_fork")
}

fn input(values: &[f32]) -> IValue {
    IValue::Tensor(Tensor::from_vec(values.to_vec(), &[2, 2]).expect("tensor"))
}

#[test]
fn error_in_a_forked_function_surfaces_at_wait_with_its_traceback() {
    let m = fork_module();
    let err = m
        .run_method("logs", &[input(&[1.0, -2.0, 3.0, 4.0])])
        .expect_err("checked_log raises on a non-positive input");
    assert_eq!(err.kind(), ErrorKind::Run);
    // the exception the forked function raised (kind and message as its code states them)
    match err.root_cause() {
        Error::Runtime(RuntimeError::Exception { kind, message }) => {
            assert_eq!(kind, "builtins.ValueError");
            assert_eq!(message, "checked_log needs positive inputs");
        }
        other => panic!("expected the forked function's exception, got {other:?}"),
    }
    // the traceback runs from the forking method into the forked function
    let frames = err.traceback().expect("a TorchScript traceback");
    let functions: Vec<&str> = frames.iter().map(|f| f.function.as_str()).collect();
    assert_eq!(
        functions,
        [
            "__torch__.zoo_fork.Forks.logs",
            "__torch__.zoo_fork.checked_log"
        ],
        "{err}"
    );
    // the same module still runs the happy path afterwards
    let ok = m
        .run_method("logs", &[input(&[1.0, 2.0, 3.0, 4.0])])
        .expect("positive inputs");
    assert!(matches!(ok, IValue::Tensor(_)));
}

#[test]
fn saved_fork_archive_runs_like_the_original() {
    let m = fork_module();
    let bytes = m.to_archive_bytes(&[]).expect("save");
    let again = Module::load_bytes(&bytes).expect("reload");
    let x = IValue::Tensor(
        Tensor::from_vec(vec![0.5f32, -1.5, 2.0, 0.25, 1.0, -0.75, 3.0, 0.0], &[2, 4])
            .expect("tensor"),
    );
    let (a, b) = (
        m.forward(std::slice::from_ref(&x)).expect("forward"),
        again
            .forward(std::slice::from_ref(&x))
            .expect("forward after reload"),
    );
    match (a, b) {
        (IValue::Tensor(a), IValue::Tensor(b)) => {
            assert_eq!(
                a.to_vec::<f32>().expect("f32"),
                b.to_vec::<f32>().expect("f32")
            )
        }
        other => panic!("expected tensors, got {other:?}"),
    }
}
