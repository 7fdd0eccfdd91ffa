//! `tsrun run` on a model whose forward fails three calls deep renders the call stack as rustc
//! renders errors: a snippet per frame with a caret where PyTorch marks the failing call (its
//! callee) and the original Python line under it; the global `--quiet` and `-v` flags; exit
//! codes unchanged.

use crate::cli_common::tsrun;

const MODEL: &str = "fixtures/traceback/deep_error.pt";
const SHAPE_MISMATCH: &str = "fixtures/traceback/shape_mismatch.npy";

#[test]
fn a_runtime_error_renders_every_frame_with_a_caret_and_its_python_line() {
    let r = tsrun(&["run", MODEL, "-i", SHAPE_MISMATCH]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert_eq!(r.stdout, "");
    let want = "\
error: shape error: mm: mat1 and mat2 shapes cannot be multiplied (2x5 and 4x3)
  --> code/__torch__/traceback_model.py:11:13
   |
11 |     return (block).project(h, )
   |             ^^^^^^^^^^^^^^ called in forward
  ::: fixtures/traceback_model.py:30:16
   |
30 |         return self.block.project(h)
   |                ^^^^^^^^^^^^^^^^^^ original Python
  --> code/__torch__/traceback_model.py:23:12
   |
23 |     return _0(y, w, )
   |            ^^ called in project
  ::: fixtures/traceback_model.py:20:16
   |
20 |         return check_and_project(y, self.w)
   |                ^^^^^^^^^^^^^^^^^ original Python
  --> code/__torch__/traceback_model.py:30:10
   |
30 |   return torch.matmul(x, w)
   |          ^^^^^^^^^^^^ failed in check_and_project
  ::: fixtures/traceback_model.py:10:12
   |
10 |     return torch.matmul(x, w)
   |            ^^^^^^^^^^^^ original Python
";
    assert_eq!(r.stderr, want);
}

#[test]
fn a_raised_exception_is_the_error_line() {
    let r = tsrun(&[MODEL, "-i", "fixtures/traceback/raise_value_error.npy"]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(
        r.stderr
            .starts_with("error: builtins.ValueError: the input sums to a negative number\n"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains(
            " ::: fixtures/traceback_model.py:9:9\n  |\n\
             9 |         raise ValueError(\"the input sums to a negative number\")\n"
        ),
        "{}",
        r.stderr
    );
}

#[test]
fn very_verbose_names_each_frames_function_in_full() {
    let r = tsrun(&["-vv", "run", MODEL, "-i", SHAPE_MISMATCH]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    for function in [
        "called in __torch__.traceback_model.Net.forward",
        "called in __torch__.traceback_model.Block.project",
        "failed in __torch__.traceback_model.check_and_project",
    ] {
        assert!(r.stderr.contains(function), "{function}: {}", r.stderr);
    }
}

/// mlp_half.pt is float16: a float32 input is cast with a warning.
const HALF: [&str; 4] = [
    "fixtures/cli/mlp_half.pt",
    "-i",
    "fixtures/cli/mlp_input.npy",
    "--json",
];

#[test]
fn quiet_hides_warnings_but_not_results_or_errors() {
    let loud = tsrun(&HALF);
    assert_eq!(loud.code, Some(0), "{}", loud.stderr);
    assert!(
        loud.stderr.contains("tsrun: warning: casting float32"),
        "{}",
        loud.stderr
    );
    for flag in ["--quiet", "-q"] {
        // before the model (`tsrun -q MODEL ...`) and after it
        for args in [
            [&[flag][..], &HALF[..]].concat(),
            [&HALF[..], &[flag][..]].concat(),
        ] {
            let quiet = tsrun(&args);
            assert_eq!(quiet.code, Some(0), "{args:?}: {}", quiet.stderr);
            assert_eq!(quiet.stderr, "", "{args:?}");
            assert_eq!(quiet.stdout, loud.stdout, "{args:?}");
        }
    }
    let failed = tsrun(&["--quiet", "run", MODEL, "-i", SHAPE_MISMATCH]);
    assert_eq!(failed.code, Some(1));
    assert!(
        failed.stderr.starts_with("error: shape error: mm:"),
        "{}",
        failed.stderr
    );
}

#[test]
fn verbose_reports_load_and_call_timings_and_threads() {
    let r = tsrun(&[
        "-v",
        "run",
        "fixtures/models/mlp.pt",
        "-i",
        "fixtures/cli/mlp_input.npy",
    ]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let lines: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{}", r.stderr);
    assert!(
        lines[0].starts_with("tsrun: loaded fixtures/models/mlp.pt in ")
            && lines[0].contains("; kernels use "),
        "{}",
        r.stderr
    );
    assert!(
        lines[1].starts_with("tsrun: forward ran in ")
            && lines[1].ends_with(" (compilation included)"),
        "{}",
        r.stderr
    );
    let plain = tsrun(&[
        "run",
        "fixtures/models/mlp.pt",
        "-i",
        "fixtures/cli/mlp_input.npy",
    ]);
    assert_eq!(plain.stderr, "");
    assert_eq!(plain.stdout, r.stdout);
    // with a failing call: the timing says so, the error follows
    let failed = tsrun(&[MODEL, "-i", SHAPE_MISMATCH, "--verbose"]);
    assert_eq!(failed.code, Some(1));
    assert!(
        failed.stderr.contains("tsrun: forward failed in "),
        "{}",
        failed.stderr
    );
    assert!(
        failed.stderr.contains("\nerror: shape error: mm:"),
        "{}",
        failed.stderr
    );
}

#[test]
fn quiet_and_verbose_together_are_a_usage_error() {
    let r = tsrun(&["--quiet", "-v", "run", "fixtures/models/mlp.pt"]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
}

/// The runtime's own warnings (here: an archive naming a CUDA device, run on the CPU) print as
/// PyTorch's `UserWarning`s by default; `--quiet` silences them and leaves the result.
#[test]
fn quiet_silences_runtime_warnings_too() {
    let dir = crate::common::fixtures_dir().join("device_remap");
    let golden = tsrun::read_state_dict(dir.join("golden.npz")).expect("golden");
    let scratch = crate::cli_common::temp_dir("quiet_runtime_warnings");
    let input = scratch.join("x.npy");
    tsrun::write_state_dict(
        &input.with_extension("npz"),
        &[("x".into(), golden["x"].clone())],
    )
    .expect("write");
    let model = dir.join("cuda_net.pt");
    let args = |quiet: bool| {
        let mut a = vec![];
        if quiet {
            a.push("--quiet".to_string());
        }
        a.extend([
            "run".to_string(),
            model.display().to_string(),
            "-i".to_string(),
            input.with_extension("npz").display().to_string(),
        ]);
        a
    };
    let loud = args(false);
    let loud = crate::cli_common::tsrun(&loud.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(loud.code, Some(0), "{}", loud.stderr);
    assert!(
        loud.stderr
            .contains("UserWarning: the archive's code asks for device 'cuda:0'"),
        "{}",
        loud.stderr
    );
    let quiet = args(true);
    let quiet = crate::cli_common::tsrun(&quiet.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(quiet.code, Some(0), "{}", quiet.stderr);
    assert!(!quiet.stderr.contains("UserWarning"), "{}", quiet.stderr);
    assert_eq!(quiet.stdout, loud.stdout);
}
