//! How `tsrun` fails: every I/O error names its path, a subcommand typo gets a suggestion,
//! documented exit codes (0 ok, 1 model error, 2 usage), `--help` shows the `tsrun MODEL` form,
//! and a syntax error in an archive's code is rendered as rustc renders one; compile errors
//! point where PyTorch's own compile errors point.

use crate::cli_common::{temp_dir, tsrun};
use crate::common::fixtures_dir;
use std::io::{Read, Write};

#[test]
fn io_errors_name_their_paths() {
    let missing = tsrun(&["run", "fixtures/models/mlp.pt", "-i", "no/such/input.npy"]);
    assert_eq!(missing.code, Some(1));
    assert!(
        missing.stderr.contains("no/such/input.npy: No such file"),
        "{}",
        missing.stderr
    );
    let out = tsrun(&[
        "run",
        "fixtures/models/mlp.pt",
        "-i",
        "fixtures/cli/mlp_input.npy",
        "-o",
        "no/such/dir/out.npz",
    ]);
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr
            .contains("writing no/such/dir/out.npz: No such file"),
        "{}",
        out.stderr
    );
    let folder = tsrun(&["info", "fixtures/models"]);
    assert_eq!(folder.code, Some(1));
    assert!(
        folder
            .stderr
            .contains("fixtures/models is a folder, not a TorchScript archive"),
        "{}",
        folder.stderr
    );
    let model = tsrun(&["no-such-model.pt", "-i", "1"]);
    assert_eq!(model.code, Some(1));
    assert!(
        model.stderr.contains("no-such-model.pt: No such file"),
        "{}",
        model.stderr
    );
}

#[test]
fn a_subcommand_typo_gets_a_suggestion() {
    let r = tsrun(&["inof", "fixtures/models/mlp.pt"]);
    assert_eq!(r.code, Some(2));
    assert!(r.stderr.contains("did you mean `info`?"), "{}", r.stderr);
    let r = tsrun(&["compre", "x.pt"]);
    assert!(r.stderr.contains("did you mean `compare`?"), "{}", r.stderr);
}

#[test]
fn help_shows_the_model_form_and_exit_codes() {
    let r = tsrun(&["--help"]);
    assert_eq!(r.code, Some(0));
    assert!(r.stdout.contains("tsrun MODEL "), "{}", r.stdout);
    assert!(r.stdout.contains("Exit codes: 0"), "{}", r.stdout);
    let usage = tsrun(&["run", "fixtures/models/mlp.pt", "--set", "nonsense"]);
    assert_eq!(usage.code, Some(2), "{}", usage.stderr);
    let bad_flag = tsrun(&["run", "fixtures/models/mlp.pt", "--no-such-flag"]);
    assert_eq!(bad_flag.code, Some(2));
}

/// mlp.pt with one line of its code replaced.
fn archive_with_code_line(
    dir: &std::path::Path,
    file_suffix: &str,
    from: &str,
    to: &str,
) -> std::path::PathBuf {
    let bytes = std::fs::read(fixtures_dir().join("models").join("mlp.pt")).expect("mlp.pt");
    let mut zin = zip::ZipArchive::new(std::io::Cursor::new(bytes)).expect("zip");
    let path = dir.join("broken.pt");
    let mut zout = zip::ZipWriter::new(std::fs::File::create(&path).expect("create"));
    let opts =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for i in 0..zin.len() {
        let mut f = zin.by_index(i).expect("member");
        let name = f.name().to_string();
        let mut data = Vec::new();
        f.read_to_end(&mut data).expect("read");
        if name.ends_with(file_suffix) {
            let text = String::from_utf8(data).expect("code");
            assert!(text.contains(from), "{text}");
            data = text.replacen(from, to, 1).into_bytes();
        }
        zout.start_file(name, opts).expect("start");
        zout.write_all(&data).expect("write");
    }
    zout.finish().expect("finish");
    path
}

#[test]
fn a_syntax_error_is_shown_with_its_line_and_a_caret() {
    let dir = temp_dir("caret");
    let path = archive_with_code_line(
        &dir,
        "code/__torch__/zoo_lang.py",
        "_0 = (head).forward(",
        "_0 = (head) bogus .forward(",
    );
    let r = tsrun(&[
        "run",
        &path.to_string_lossy(),
        "-i",
        "fixtures/cli/mlp_input.npy",
    ]);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    let lines: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(
        lines[0], "error: unexpected identifier `bogus`",
        "{}",
        r.stderr
    );
    assert!(
        lines[1].ends_with("--> code/__torch__/zoo_lang.py:12:17"),
        "{}",
        r.stderr
    );
    assert_eq!(
        lines[3], "12 |     _0 = (head) bogus .forward((net).forward(x, ), )",
        "{}",
        r.stderr
    );
    assert!(
        lines[4].starts_with("   |                 ^^^^^ expected one of "),
        "{}",
        r.stderr
    );
    // at most 6 alternatives, the rest counted
    let listed = lines[4]
        .split(" and ")
        .next()
        .unwrap_or("")
        .matches(", ")
        .count()
        + 1;
    assert!(listed <= 6, "{}", lines[4]);
}

#[test]
fn operators_without_a_kernel_are_shown_with_carets() {
    let r = tsrun(&[
        "fixtures/models/unsupported_ops.pt",
        "-i",
        "fixtures/cli/mlp_input.npy",
    ]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    let lines: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(
        lines[0],
        "error: __torch__.zoo_failures.Unsupported.forward uses operator overloads tsrun has no kernel for"
    );
    assert_eq!(lines[1], " --> code/__torch__/zoo_failures.py:8:9");
    assert_eq!(lines[3], "8 |     y = torch._cslt_sparse_mm(x, x)");
    assert_eq!(
        lines[4],
        "  |         ^^^^^^^^^^^^^^^^^^^^^ aten::_cslt_sparse_mm has no kernel"
    );
    // every missing operator at once, each under its own call
    assert_eq!(
        r.stderr.matches("has no kernel\n").count()
            + usize::from(r.stderr.ends_with("has no kernel")),
        3,
        "{}",
        r.stderr
    );
}

/// fixtures/gen_compile_errors.py patches a module's code once per error class and records
/// where PyTorch's compile error marks it (the callee of a call, a name, `receiver.method`):
/// tsrun's caret goes on the same line, at the same column, as wide.
#[test]
fn compile_errors_are_marked_where_pytorch_marks_them() {
    let dir = fixtures_dir().join("compile_errors");
    let expected: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("expected.json")).expect("expected.json"),
    )
    .expect("json");
    let input = dir.join("x.npy");
    let cases = expected.as_object().expect("cases");
    assert_eq!(cases.len(), 6);
    for (name, golden) in cases {
        let model = dir.join(format!("{name}.pt"));
        let r = tsrun(&[
            "run",
            model.to_str().expect("path"),
            "-i",
            input.to_str().expect("path"),
        ]);
        assert_eq!(r.code, Some(1), "{name}: {}", r.stderr);
        let lines: Vec<&str> = r.stderr.lines().collect();
        assert!(lines[0].starts_with("error: "), "{name}: {}", r.stderr);
        // The overloads tried, each listed once in PyTorch's order (PyTorch also lists Python
        // builtin functions of the same name, which are not `aten::` schemas).
        if let Some(variants) = golden.get("variants").and_then(|v| v.as_array()) {
            let pytorch: Vec<&str> = variants
                .iter()
                .filter_map(|v| v.as_str())
                .filter(|v| v.starts_with("aten::"))
                .collect();
            let listed: Vec<&str> = lines
                .iter()
                .filter_map(|l| l.strip_prefix("  aten::"))
                .filter_map(|l| l.split_once(':'))
                .map(|(name, _)| name)
                .collect();
            let pytorch: Vec<&str> = pytorch
                .iter()
                .map(|v| v.trim_start_matches("aten::"))
                .collect();
            assert_eq!(listed, pytorch, "{name}: {}", r.stderr);
        }
        let line = golden["line"].as_u64().expect("line");
        let col = golden["col"].as_u64().expect("col");
        // a message may take several lines (the overloads a call matched none of)
        let at = lines
            .iter()
            .position(|l| l.trim_start().starts_with("--> "))
            .unwrap_or_else(|| panic!("{name}: {}", r.stderr));
        let file = golden["file"].as_str().expect("file");
        assert_eq!(
            lines[at].trim_start(),
            format!("--> {file}:{line}:{}", col + 1),
            "{name}: {}",
            r.stderr
        );
        let gutter = format!("{line} | ");
        assert_eq!(
            lines[at + 2],
            format!(
                "{gutter}{}",
                golden["source_line"].as_str().expect("source line")
            ),
            "{name}"
        );
        let caret = lines[at + 3]
            .split_once(" | ")
            .map(|(_, c)| c)
            .unwrap_or_else(|| panic!("{name}: {}", r.stderr));
        let pad = caret.len() - caret.trim_start().len();
        let width = caret.trim_start().chars().take_while(|&c| c == '^').count();
        assert_eq!(
            (pad as u64, width as u64),
            (col, golden["width"].as_u64().expect("width")),
            "{name}: {}",
            r.stderr
        );
    }
}
