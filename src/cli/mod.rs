//! Subcommands of the `tsrun` command line. Each lives in its own module with a clap `Args`
//! struct and a `run` function; `src/bin/tsrun.rs` dispatches.

pub mod average;
pub mod bench;
pub mod code;
pub mod compare;
pub mod compare_dir;
pub mod convert;
pub mod error;
pub mod info;
pub mod inputs;
pub mod load_state_dict;
pub mod log;
pub mod ops;
pub mod output;
pub mod parse_graph;
pub mod repr;
pub mod run;
#[cfg(feature = "serve")]
pub mod serve;
pub mod state_dict;
pub mod summary;
