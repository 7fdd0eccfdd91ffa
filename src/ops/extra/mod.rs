//! Losses, sampling grids (`grid_sampler_2d`/`_3d`, `affine_grid_generator`), `im2col`/`col2im`,
//! special functions and their `special_*` aliases, and small tensor queries: a file per concern
//! (`special.rs`, `losses.rs`, `grids.rs`, `queries.rs`); this file holds the shared helpers and
//! `register`, which runs last of all families (it reuses kernels registered before it).
//!
//! Kernels here compute in f64 and cast the result back to the floating dtype PyTorch would
//! produce (integral inputs promote to float32), which is exact enough for every float type.

use super::kernels::map::map_binary;
use super::kernels::operand::{common_dtype, float_dtype, inplace_result, Operand};
use super::kernels::special::SpecialFn;
use super::kernels::value_err;
use super::{Args, Registry};
use crate::float_unary;
use crate::tensor::{broadcast_shapes, DType, Tensor};
use crate::values::IValue;

mod grids;
mod losses;
mod queries;
mod special;

use grids::*;
use losses::*;
use queries::*;
use special::*;

type R = crate::Result<IValue>;

fn t(x: Tensor) -> R {
    Ok(IValue::Tensor(x))
}

/// A tensor's elements as f64, row-major.
fn vals(x: &Tensor) -> crate::Result<Vec<f64>> {
    x.to_vec::<f64>()
}

/// A tensor of `dt` from f64 values.
fn build(v: Vec<f64>, shape: &[usize], dt: DType) -> crate::Result<Tensor> {
    Tensor::from_vec(v, shape)?.to_dtype(dt)
}

/// Floating result dtype of two operands (ints -> float32).
fn float_common(a: &Operand, b: &Operand) -> crate::Result<DType> {
    let dt = float_dtype(common_dtype(&[a, b]));
    if dt.is_complex() {
        return Err(value_err(format!("complex dtype {dt} is not supported")));
    }
    Ok(dt)
}

/// `f(a, b)` elementwise in f64 with broadcasting; the result has the floating common dtype.
fn float_binary_op(
    a: &Operand,
    b: &Operand,
    f: impl Fn(f64, f64) -> f64 + Sync + Send,
) -> crate::Result<Tensor> {
    let dt = float_common(a, b)?;
    let (x, y) = (
        a.as_tensor_of(DType::Float64)?,
        b.as_tensor_of(DType::Float64)?,
    );
    map_binary::<f64, f64, f64, _>(&x, &y, f)?.to_dtype(dt)
}

/// Registered after every other family (aliases look up kernels registered elsewhere).
pub(crate) fn register(r: &mut Registry) {
    register_unary(r);
    r.add("aten::special_psi", digamma_k);
    r.add("aten::special_digamma", digamma_k);
    r.add("aten::special_gammaln", lgamma);
    r.add("aten::polygamma", polygamma);
    r.add("aten::special_polygamma", polygamma);
    r.add("aten::polygamma_", polygamma_);
    r.add("aten::mvlgamma", mvlgamma);
    r.add("aten::mvlgamma_", mvlgamma_);
    r.add("aten::special_multigammaln", mvlgamma);
    r.add("aten::positive", positive);
    r.add("aten::signbit", signbit);
    r.add("aten::logaddexp", logaddexp);
    r.add("aten::logaddexp2", logaddexp2);
    for n in [
        "aten::xlogy.Tensor",
        "aten::xlogy.Scalar_Self",
        "aten::xlogy.Scalar_Other",
        "aten::special_xlogy",
        "aten::special_xlogy.self_scalar",
        "aten::special_xlogy.other_scalar",
    ] {
        r.add(n, xlogy);
    }
    r.add_all(
        &[
            "aten::special_zeta",
            "aten::special_zeta.self_scalar",
            "aten::special_zeta.other_scalar",
        ],
        special_zeta,
    );
    r.add("aten::xlogy_.Tensor", xlogy_);
    r.add("aten::xlogy_.Scalar_Other", xlogy_);
    for n in [
        "aten::special_xlog1py",
        "aten::special_xlog1py.self_scalar",
        "aten::special_xlog1py.other_scalar",
    ] {
        r.add(n, xlog1py);
    }
    r.add("aten::heaviside", heaviside);
    r.add("aten::heaviside_", heaviside_);

    r.add("aten::mse_loss", mse_loss);
    r.add("aten::l1_loss", l1_loss);
    r.add("aten::smooth_l1_loss", smooth_l1_loss);
    r.add("aten::huber_loss", huber_loss);
    r.add("aten::soft_margin_loss", soft_margin_loss);
    r.add("aten::kl_div", kl_div);
    r.add("aten::binary_cross_entropy", binary_cross_entropy);
    r.add("aten::binary_cross_entropy_with_logits", bce_with_logits);
    r.add("aten::margin_ranking_loss", margin_ranking_loss);
    r.add("aten::hinge_embedding_loss", hinge_embedding_loss);
    r.add("aten::poisson_nll_loss", poisson_nll_loss);
    r.add("aten::cosine_embedding_loss", cosine_embedding_loss);
    r.add("aten::triplet_margin_loss", triplet_margin_loss);
    r.add_all(
        &["aten::nll_loss", "aten::nll_loss_nd", "aten::nll_loss2d"],
        |a| nll_loss(a, false),
    );
    // the `_forward` twins also return the total weight
    r.add_all(
        &["aten::nll_loss_forward", "aten::nll_loss2d_forward"],
        |a| nll_loss(a, true),
    );
    r.add_all(
        &[
            "aten::nll_loss_forward.output",
            "aten::nll_loss2d_forward.output",
        ],
        |a| {
            let r = nll_loss(a, true)?;
            a.write_outs(5, r)
        },
    );
    r.add("aten::cross_entropy_loss", cross_entropy_loss);

    r.add("aten::affine_grid_generator", affine_grid_generator);
    r.add("aten::grid_sampler", grid_sampler);
    r.add("aten::grid_sampler_3d", grid_sampler_3d);
    r.add("aten::grid_sampler_2d", grid_sampler_2d);
    r.add("aten::im2col", im2col);
    r.add("aten::col2im", col2im);

    r.add("aten::element_size", element_size);
    r.add_all(
        &[
            "aten::_is_zerotensor",
            "aten::cudnn_is_acceptable",
            "aten::is_pinned",
        ],
        no_tensor_feature,
    );
    r.add_all(
        // (`_nnpack_available` and `_use_cudnn_rnn_flatten_weight` answer for PyTorch's build,
        // true on its CPU wheels: a graph branching on them would then call kernels tsrun
        // lacks, so they stay unsupported)
        &["aten::is_vulkan_available"],
        no_backend,
    );
    r.add("aten::_has_same_storage_numel", has_same_storage_numel);
    r.add(
        "aten::_has_compatible_shallow_copy_type",
        compatible_shallow_copy,
    );
    r.add("aten::is_set_to", is_set_to);
    r.add(
        "aten::_debug_has_internal_overlap",
        debug_has_internal_overlap,
    );
    r.add("aten::get_autocast_dtype", get_autocast_dtype);
    r.add("aten::_autocast_to_reduced_precision", autocast_to_reduced);
    r.add("aten::_autocast_to_full_precision", autocast_to_full);
    r.add_all(
        &["aten::_assert_async", "aten::_assert_async.msg"],
        assert_async,
    );
    r.add(
        "aten::_functional_assert_async.msg",
        functional_assert_async,
    );
    r.add("aten::_make_dep_token", make_dep_token);
    r.add_all(
        &[
            "aten::_functional_sym_constrain_range",
            "aten::_functional_sym_constrain_range_for_size",
        ],
        functional_constrain_range,
    );
    r.add("aten::_assert_tensor_metadata", assert_tensor_metadata);
    // the CPU fallback computes what grid_sampler_2d does
    r.alias(
        "aten::_grid_sampler_2d_cpu_fallback",
        "aten::grid_sampler_2d",
    );
    r.alias("aten::_embedding_bag_forward_only", "aten::_embedding_bag");
    // out= twins whose names do not end in `out`
    r.add_all(&["aten::div.out_mode", "aten::divide.out_mode"], |a| {
        let r = crate::ops::Registry::global()
            .lookup("aten::div", "Tensor_mode")
            .ok_or_else(|| value_err("div.Tensor_mode has no kernel"))?(a)?;
        a.write_outs(3, r)
    });
    r.add("aten::get_device", get_device);
    r.add("aten::is_nonzero", is_nonzero);
    r.add("aten::is_same_size", is_same_size);
    r.add("aten::equal", equal);
    r.add("aten::isclose", isclose);
    r.add("aten::allclose", allclose);
    r.add("aten::trace", trace);
    r.add("aten::cross", cross);
    r.add("aten::linalg_cross", cross);

    for (new, old) in [
        ("aten::special_expm1", "aten::expm1"),
        ("aten::special_log1p", "aten::log1p"),
        ("aten::special_exp2", "aten::exp2"),
        ("aten::special_logit", "aten::logit"),
        ("aten::special_round", "aten::round.decimals"),
        ("aten::special_sinc", "aten::sinc"),
        ("aten::special_i0", "aten::i0"),
        ("aten::special_log_softmax", "aten::log_softmax.int"),
        ("aten::special_softmax", "aten::softmax.int"),
    ] {
        r.alias(new, old);
    }
}
