//! `aten::_fused_sdp_choice`: the scaled-dot-product-attention backend PyTorch's CPU selection
//! (`sdp::select_sdp_backend_cpp`, aten/src/ATen/native/transformers/sdp_utils_cpp) picks for
//! the arguments, as its `SDPBackend` code: flash attention (1) when every constraint of the
//! CPU flash kernel holds, else the math kernel (0). tsrun has no switches to disable a
//! backend, so both stay enabled, as they are by default in PyTorch.

use super::{Args, Registry};
use crate::ops::kernels::invalid_argument;
use crate::tensor::{wrap_dim, DType, Tensor};
use crate::values::IValue;

/// `at::SDPBackend` codes.
const MATH: i64 = 0;
const FLASH_ATTENTION: i64 = 1;

fn stride_from_end(t: &Tensor, d: usize) -> Option<isize> {
    t.strides().len().checked_sub(d).map(|i| t.strides()[i])
}

/// `check_attn_mask_shape`: a mask the CPU flash kernel broadcasts itself, not requiring
/// grad, its last two dims `[L or 1, S or 1]`: 2-D; or for 4-D operands `[B or 1, heads or 1,
/// ., .]`; or for 3-D ones (heads without a batch) `[heads or 1, ., .]` or `[1, heads or 1,
/// ., .]`. (PyTorch 2.15 no longer checks the mask's strides.)
fn mask_shape_ok(q: &Tensor, k: &Tensor, m: &Tensor) -> crate::Result<bool> {
    // PyTorch reads `attn_mask.size(-2)` first: a mask of fewer dims is out of range
    let ml = m.shape()[wrap_dim(-2, m.dim())?];
    let ms = m.shape()[m.dim() - 1];
    if m.requires_grad() {
        return Ok(false);
    }
    let (l, s) = (q.shape()[q.dim() - 2], k.shape()[k.dim() - 2]);
    if (ml != l && ml != 1) || (ms != s && ms != 1) {
        return Ok(false);
    }
    let heads = q.shape()[q.dim() - 3];
    let either = |have: usize, want: usize| have == 1 || have == want;
    Ok(match (q.dim(), m.shape()) {
        (_, [_, _]) => true,
        (3, [mh, _, _]) => either(*mh, heads),
        (3, [mb, mh, _, _]) => *mb == 1 && either(*mh, heads),
        (4, [mb, mh, _, _]) => either(*mb, q.shape()[0]) && either(*mh, heads),
        _ => false,
    })
}

/// `use_flash_attention_cpp`: the constraints of PyTorch's CPU flash attention, in its order.
fn use_flash_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    dropout: f64,
    enable_gqa: bool,
) -> crate::Result<bool> {
    // check_for_dropout
    if dropout > 0.0 {
        return Ok(false);
    }
    // check_tensor_shapes: all 4-D `[B, heads, L, E]`, or all 3-D `[heads, L, E]`
    let rank = q.dim();
    if !(rank == 3 || rank == 4) || k.dim() != rank || v.dim() != rank {
        return Ok(false);
    }
    // check_batch_size_and_num_heads_dense (grouped-query heads supported)
    if rank == 4 && (q.shape()[0] != k.shape()[0] || q.shape()[0] != v.shape()[0]) {
        return Ok(false);
    }
    let heads = |t: &Tensor| t.shape()[rank - 3];
    let (hq, hk, hv) = (heads(q), heads(k), heads(v));
    if enable_gqa {
        if hk != hv {
            return Ok(false);
        }
        if hk == 0 {
            return Err(invalid_argument(
                "_fused_sdp_choice",
                "the number of key heads",
                "must be positive with enable_gqa (PyTorch divides by it)",
                0,
            ));
        }
        if hq % hk != 0 {
            return Ok(false);
        }
    } else if hq != hk || hq != hv {
        return Ok(false);
    }
    // check_attn_mask_shape
    if let Some(m) = mask {
        if !mask_shape_ok(q, k, m)? {
            return Ok(false);
        }
    }
    // check_head_dim_size_cpp: one head size
    let (e, l) = (rank - 1, rank - 2);
    if q.shape()[e] != k.shape()[e] || q.shape()[e] != v.shape()[e] {
        return Ok(false);
    }
    // check_nonzero_sequence_lengths_dense
    if q.shape()[l] == 0 || k.shape()[l] == 0 {
        return Ok(false);
    }
    // check_last_dim_stride_equals_1_dense (a size-1 head dim not excepted; the mask's stride
    // no longer matters)
    let unit = |t: &Tensor| stride_from_end(t, 1) == Some(1);
    if !unit(q) || !unit(k) || !unit(v) {
        return Ok(false);
    }
    // check_tensor_dtype
    let dtype = q.dtype();
    Ok(dtype == k.dtype()
        && dtype == v.dtype()
        && matches!(
            dtype,
            DType::Float32 | DType::Float64 | DType::BFloat16 | DType::Float16
        ))
}

/// _fused_sdp_choice(query, key, value, attn_mask, dropout_p, is_causal, *, scale, enable_gqa)
/// -> int
fn fused_sdp_choice(a: &mut Args<'_>) -> crate::Result<IValue> {
    let (q, k, v) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
    let mask = a.opt_tensor(3)?;
    let dropout = a.double(4)?;
    a.bool(5)?;
    a.opt_double(6)?;
    let enable_gqa = a.bool(7)?;
    let flash = use_flash_attention(&q, &k, &v, mask.as_ref(), dropout, enable_gqa)?;
    Ok(IValue::Int(if flash { FLASH_ATTENTION } else { MATH }))
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::_fused_sdp_choice", fused_sdp_choice);
}
