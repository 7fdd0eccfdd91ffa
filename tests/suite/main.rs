//! One integration-test binary: each capability keeps its own file, but linking
//! a single executable keeps build time and disk use small.

mod common;
mod load_common;

mod bad_input;
mod cli_code;
mod compile_fixtures;
mod deep_drift;
mod frontend_parse;
mod gemm_kernels;
mod golden_decode;
mod internals;
mod load_fixtures;
mod ops_b_nn;
mod ops_creation;
mod ops_elementwise;
mod ops_index;
mod ops_linalg_fft;
mod ops_reduce;
mod ops_scalar;
mod ops_shape;
mod printer_code;
mod printer_comments;
mod printer_graph;
mod run_interpreter;
mod run_models;
mod save_roundtrip;
mod tensor_core;
