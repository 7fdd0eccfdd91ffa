//! One integration-test binary: each capability keeps its own file, but linking
//! a single executable keeps build time and disk use small.

mod alloc_meter;
mod atomic_save;
mod common;
mod load_common;

mod bad_input;
mod cli_bench;
mod cli_code;
mod cli_commands;
mod cli_common;
mod cli_errors;
mod cli_inputs;
mod cli_output;
mod cli_repr;
mod compile_fixtures;
mod concurrency;
mod deep_drift;
mod frontend_parse;
mod gemm_kernels;
mod golden_decode;
mod hostile_archives;
mod internals;
mod layering;
mod load_fixtures;
mod mc_dropout;
mod module_api;
mod ops_b_nn;
mod ops_coverage;
mod ops_creation;
mod ops_elementwise;
mod ops_index;
mod ops_linalg_fft;
mod ops_reduce;
mod ops_scalar;
mod ops_shape;
mod ops_vmath;
mod printer_code;
mod printer_comments;
mod printer_graph;
mod quantized;
mod run_interpreter;
mod run_models;
mod save_roundtrip;
#[cfg(feature = "serve")]
mod serve;
mod storage_soundness;
mod swa;
mod tensor_core;
