//! No data loss (issue 11): `save` and `convert` write a temporary file next to the target,
//! fsync it and rename it; a save that fails mid-write leaves the original intact, also when
//! saving over the archive the module was loaded (and memory-mapped) from.

use crate::load_common::model_path;
use std::io::{self, Write};
use std::path::Path;
use tsrun::internals::runtime::Module;
use tsrun::internals::values::IValue;
use tsrun::Tensor;

/// A writer that fails after `left` bytes, as a full disk or a killed process would.
struct FailAfter<'a> {
    inner: &'a mut dyn Write,
    left: usize,
}

impl Write for FailAfter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Err(io::Error::other("injected failure"));
        }
        let n = buf.len().min(self.left);
        self.left -= n;
        self.inner.write(&buf[..n])
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn scratch(tag: &str) -> crate::common::ScratchDir {
    crate::common::ScratchDir::new(&format!("save-{tag}"))
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn forward(m: &Module) -> Vec<f32> {
    let x = Tensor::from_vec((0..16).map(|i| i as f32 / 7.0).collect(), &[2, 8]).unwrap();
    match m.call(&[IValue::Tensor(x)]).unwrap() {
        IValue::Tensor(t) => t.to_vec::<f32>().unwrap(),
        other => panic!("{}", other.kind_name()),
    }
}

#[test]
fn a_failed_save_over_the_input_path_keeps_the_original() {
    let dir = scratch("fail");
    let path = dir.join("mlp.pt");
    std::fs::copy(model_path("mlp"), &path).unwrap();
    let original = std::fs::read(&path).unwrap();
    let m = Module::load(&path).unwrap();
    let before = forward(&m);
    let saved_len = m.to_archive_bytes(&[]).unwrap().len();
    for cut in [0, 1, 100, saved_len / 2, saved_len - 1] {
        let e = m
            .save_through(&path, &[], |w, bytes| {
                FailAfter {
                    inner: w,
                    left: cut,
                }
                .write_all(bytes)
            })
            .expect_err("the injected failure is reported");
        assert!(e.to_string().contains("injected failure"), "{e}");
        assert_eq!(
            std::fs::read(&path).unwrap(),
            original,
            "cut {cut}: original changed"
        );
        assert_eq!(
            files_in(&dir),
            ["mlp.pt"],
            "cut {cut}: temporary file left behind"
        );
    }
    // the module still reads its (mapped) storages
    assert_eq!(forward(&m), before);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_save_over_the_input_path_replaces_it_and_the_loaded_module_keeps_working() {
    let dir = scratch("replace");
    let path = dir.join("mlp.pt");
    std::fs::copy(model_path("mlp"), &path).unwrap();
    let m = Module::load(&path).unwrap();
    let before = forward(&m);
    m.save_with_extra_files(&path, &[("note.txt".into(), b"saved over".to_vec())])
        .unwrap();
    assert_eq!(files_in(&dir), ["mlp.pt"]);
    let reloaded = Module::load(&path).unwrap();
    assert_eq!(reloaded.extra_files()["note.txt"], b"saved over");
    assert_eq!(forward(&reloaded), before);
    assert_eq!(forward(&m), before, "the old mapping must stay valid");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn convert_in_place_and_into_a_missing_directory() {
    let dir = scratch("convert");
    let path = dir.join("mlp.pt");
    std::fs::copy(model_path("mlp"), &path).unwrap();
    let tsrun = env!("CARGO_BIN_EXE_tsrun");
    let out = std::process::Command::new(tsrun)
        .arg("convert")
        .arg(&path)
        .arg(&path)
        .args(["--dtype", "float64"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(files_in(&dir), ["mlp.pt"]);
    let m = Module::load(&path).unwrap();
    assert_eq!(m.parameters()[0].dtype(), tsrun::DType::Float64);
    let converted = std::fs::read(&path).unwrap();
    let out = std::process::Command::new(tsrun)
        .arg("convert")
        .arg(&path)
        .arg(dir.join("missing").join("out.pt"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert_eq!(std::fs::read(&path).unwrap(), converted);
    assert_eq!(files_in(&dir), ["mlp.pt"]);
    let _ = std::fs::remove_dir_all(&dir);
}
