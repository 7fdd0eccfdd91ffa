//! What `tsrun` writes to stderr besides its errors, set by the global `--quiet` / `-v` flags:
//! warnings unless `--quiet`, details (load and call timings, the thread count) with `-v`,
//! debugging details (qualified function names in tracebacks) with `-vv`. Errors always print.

use std::fmt::Display;
use std::sync::atomic::{AtomicU8, Ordering};

/// How much `tsrun` says on stderr besides errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verbosity {
    /// `--quiet`: errors only.
    Quiet = 0,
    /// The default: errors and warnings.
    Normal = 1,
    /// `-v`: also what was loaded and run, how long it took, the thread count.
    Verbose = 2,
    /// `-vv`: also debugging details.
    Debug = 3,
}

impl Verbosity {
    /// The level of `--quiet` and the number of `-v`s (`--quiet` wins: clap keeps them apart).
    pub fn from_flags(quiet: bool, verbose: u8) -> Verbosity {
        match (quiet, verbose) {
            (true, _) => Verbosity::Quiet,
            (false, 0) => Verbosity::Normal,
            (false, 1) => Verbosity::Verbose,
            (false, _) => Verbosity::Debug,
        }
    }
}

// A process-wide setting, as the flags are: every subcommand reads it without threading it
// through each one's arguments.
static LEVEL: AtomicU8 = AtomicU8::new(Verbosity::Normal as u8);

/// Set the level for the rest of the process (`main`, from the flags).
pub fn set_verbosity(level: Verbosity) {
    LEVEL.store(level as u8, Ordering::Relaxed);
}

/// The level set by [`set_verbosity`] (`Normal` until then).
pub fn verbosity() -> Verbosity {
    match LEVEL.load(Ordering::Relaxed) {
        0 => Verbosity::Quiet,
        1 => Verbosity::Normal,
        2 => Verbosity::Verbose,
        _ => Verbosity::Debug,
    }
}

/// `tsrun: warning: {message}`, unless `--quiet`.
pub fn warn(message: impl Display) {
    if verbosity() >= Verbosity::Normal {
        eprintln!("tsrun: warning: {message}");
    }
}

/// `tsrun: {message}` with `-v`; `message` is built only then.
pub fn info<M: Display>(message: impl FnOnce() -> M) {
    if verbosity() >= Verbosity::Verbose {
        eprintln!("tsrun: {}", message());
    }
}

/// A duration as `-v` prints it: `12.3 ms`, `1.25 s`.
pub fn elapsed(d: std::time::Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms < 1000.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{:.2} s", ms / 1e3)
    }
}
