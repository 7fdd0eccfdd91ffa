//! Running the `tsrun` binary from CLI tests.

use std::process::{Command, Output};

/// What one `tsrun` run printed and how it exited.
pub struct Run {
    pub stdout: String,
    pub stderr: String,
    pub code: Option<i32>,
}

/// Run `tsrun` with `args` from the repository root (fixture paths are relative to it).
pub fn tsrun(args: &[&str]) -> Run {
    let out: Output = Command::new(env!("CARGO_BIN_EXE_tsrun"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("tsrun runs");
    Run {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        code: out.status.code(),
    }
}

/// A fresh temporary folder for one test, removed when the returned guard drops.
pub fn temp_dir(test: &str) -> crate::common::ScratchDir {
    crate::common::ScratchDir::new(test)
}
