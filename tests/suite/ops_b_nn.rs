//! Golden operator cases for the nn families, written by fixtures/gen_ops_nn.py.

use crate::common;

#[test]
fn linalg_ops() {
    common::assert_op_cases("linalg");
}

#[test]
fn conv_ops() {
    common::assert_op_cases("conv");
}

#[test]
fn pool_ops() {
    common::assert_op_cases("pool");
}

#[test]
fn norm_ops() {
    common::assert_op_cases("norm");
}

#[test]
fn nn_ops() {
    common::assert_op_cases("nn");
}

#[test]
fn rnn_ops() {
    common::assert_op_cases("rnn");
}

/// The rnn cases on a one-thread and on a two-thread pool, whatever this machine's core count:
/// on two threads the large LSTM layers share their steps (`ops/lstm_split.rs`), on one they
/// run them alone, and both must give PyTorch's results.
#[test]
fn rnn_ops_on_one_and_two_threads() {
    for threads in [1, 2] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("pool");
        pool.install(|| common::assert_op_cases("rnn"));
    }
}

#[test]
fn vision_ops() {
    common::assert_op_cases("vision");
}

/// Losses, grid sampling, im2col/col2im, special functions and tensor queries
/// (fixtures/gen_ops_extra.py).
#[test]
fn extra_ops() {
    common::assert_op_cases("extra");
}
