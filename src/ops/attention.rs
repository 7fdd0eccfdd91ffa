//! Kernels: scaled dot-product attention (masks, causal, scale, grouped-query heads).

use super::kernels::special::SpecialFn as _;
use super::kernels::{
    check_rank, check_size, invalid_argument, non_negative, rank_mismatch, shape_mismatch,
    size_mismatch, unsupported_feature,
};
use super::linalg::{
    batched_matmul_t, compute_dtype, dispatch_real_compute, permute, reshape, shape_err,
    slice_mut_of, Real,
};
use super::shape::{squeeze_dims, unsqueeze};
use super::{gemm, Args, Registry};
#[allow(unused_imports)]
use crate::tensor::Element as _;
use crate::tensor::{DType, Tensor};
use crate::tensor::{RankRequirement, TensorError};
use crate::values::IValue;
#[allow(unused_imports)]
use num_traits::{Float as _, One as _, Zero as _};
use rayon::prelude::*;
use std::cell::RefCell;

thread_local! {
    /// Per-thread scores of one attention head (`sdpa_f32`), reused across calls.
    static SCORES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Repeat each head of `t [..., H, S, E]` `rep` times along the head dim (repeat_interleave).
fn repeat_heads(t: &Tensor, rep: usize) -> crate::Result<Tensor> {
    if rep == 1 {
        return Ok(t.clone());
    }
    let n = t.dim();
    let mut shape = t.shape()[..n - 2].to_vec();
    let mut strides = t.strides()[..n - 2].to_vec();
    shape.insert(n - 2, rep);
    strides.insert(n - 2, 0);
    shape.extend_from_slice(&t.shape()[n - 2..]);
    strides.extend_from_slice(&t.strides()[n - 2..]);
    let v = t.as_strided(&shape, &strides, t.storage_offset())?;
    let mut out_shape = t.shape().to_vec();
    out_shape[n - 3] *= rep;
    reshape(&v, &out_shape)
}

/// Row-wise softmax of a contiguous `[rows, s]` buffer, in place.
fn softmax_rows<T: Real>(buf: &mut [T], s: usize) {
    if s == 0 {
        return;
    }
    buf.par_chunks_mut(s).for_each(T::softmax_in_place);
}

/// `softmax(q @ k^T * scale + mask) @ v` over `[..., L, E]` operands.
#[allow(clippy::too_many_arguments)]
pub(crate) fn sdpa(
    op: &str,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    causal: bool,
    scale: Option<f64>,
    gqa: bool,
) -> crate::Result<Tensor> {
    check_qkv_ranks(op, [q, k, v], RankRequirement::AtLeast(2))?;
    for other in [k, v] {
        if other.dtype() != q.dtype() {
            return Err(TensorError::DTypeMismatch {
                expected: q.dtype(),
                got: other.dtype(),
            }
            .into());
        }
    }
    let dtype = q.dtype();
    let cd = compute_dtype(op, dtype)?;
    let (q, mut k, mut v) = (q.to_dtype(cd)?, k.to_dtype(cd)?, v.to_dtype(cd)?);
    let (l, e) = (q.shape()[q.dim() - 2], q.shape()[q.dim() - 1]);
    let s = k.shape()[k.dim() - 2];
    check_size(
        op,
        "key.size(-1) (query.size(-1))",
        e as i64,
        k.shape()[k.dim() - 1] as i64,
    )?;
    if gqa && q.dim() >= 3 && k.dim() >= 3 {
        let hq = q.shape()[q.dim() - 3];
        let hk = k.shape()[k.dim() - 3];
        let hv = v.shape()[v.dim() - 3];
        if hk == 0 || hv == 0 || hq % hk != 0 || hq % hv != 0 {
            return Err(invalid_argument(
                op,
                "the key and value head counts",
                format!("must divide the query's {hq}"),
                format!("{hk} and {hv}"),
            ));
        }
        k = repeat_heads(&k, hq / hk)?;
        v = repeat_heads(&v, hq / hv)?;
    }
    let scale = scale.unwrap_or(1.0 / (e as f64).sqrt());
    if mask.is_none() && !causal {
        if let Some(out) = sdpa_f32(&q, &k, &v, scale)? {
            return out.to_dtype(dtype);
        }
    }
    let mut perm: Vec<usize> = (0..k.dim()).collect();
    perm.swap(k.dim() - 1, k.dim() - 2);
    let kt = permute(&k, &perm)?;
    let mask_c = match mask {
        Some(m) if m.dtype() == DType::Bool => Some(m.clone()),
        Some(m) => Some(m.to_dtype(cd)?),
        None => None,
    };
    let out = dispatch_real_compute!(cd, op, |T| {
        let scores = batched_matmul_t::<T>(&q, &kt, None, T::from_f64(scale))?;
        let sc_shape = scores.shape().to_vec();
        {
            let mut buf_guard = scores.write::<T>()?;
            let buf = slice_mut_of(&mut buf_guard)?;
            if causal && s > 0 {
                for (r, row) in buf.chunks_mut(s).enumerate() {
                    let i = r % l.max(1);
                    for (j, x) in row.iter_mut().enumerate() {
                        if j > i {
                            *x = T::neg_infinity();
                        }
                    }
                }
            }
        }
        if let Some(m) = &mask_c {
            let mut sv_guard = scores.write::<T>()?;
            let mut sv = sv_guard.view_mut();
            if m.dtype() == DType::Bool {
                let mv_guard = m.read::<bool>()?;
                let mv = mv_guard.view();
                let mb = mv.broadcast(sc_shape.as_slice()).ok_or_else(|| {
                    invalid_argument(
                        op,
                        "attn_mask",
                        format!("must broadcast to {sc_shape:?}"),
                        format!("{:?}", m.shape()),
                    )
                })?;
                ndarray::Zip::from(&mut sv).and(&mb).for_each(|x, &keep| {
                    if !keep {
                        *x = T::neg_infinity();
                    }
                });
            } else {
                let mv_guard = m.read::<T>()?;
                let mv = mv_guard.view();
                let mb = mv.broadcast(sc_shape.as_slice()).ok_or_else(|| {
                    invalid_argument(
                        op,
                        "attn_mask",
                        format!("must broadcast to {sc_shape:?}"),
                        format!("{:?}", m.shape()),
                    )
                })?;
                ndarray::Zip::from(&mut sv)
                    .and(&mb)
                    .for_each(|x, &add| *x += add);
            }
        }
        softmax_rows(slice_mut_of(&mut scores.write::<T>()?)?, s);
        batched_matmul_t::<T>(&scores, &v, None, T::one())
    })?;
    out.to_dtype(dtype)
}

/// `softmax(q @ k^T * scale) @ v` for float32 `[B, H, L, E]` operands of one shape (but the
/// value's length), without mask, on the packed GEMM: per head, the scores `[L, S]` (operands
/// read in place through their strides), a vectorized softmax per row, and the product with
/// the value. The result is laid out `[B, L, H, E]` and returned as its `[B, H, L, E]`
/// transpose, as PyTorch's CPU flash attention returns it, so the usual `transpose(1, 2)
/// .contiguous()` that follows is a view. `None` for any other form (the generic path).
fn sdpa_f32(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64) -> crate::Result<Option<Tensor>> {
    let gemm::Backend::Packed(isa) = gemm::backend() else {
        return Ok(None);
    };
    if q.dtype() != DType::Float32
        || q.dim() != 4
        || k.dim() != 4
        || v.dim() != 4
        || q.shape()[..2] != k.shape()[..2]
        || q.shape()[..2] != v.shape()[..2]
        || k.shape()[2] != v.shape()[2]
        || q.numel() == 0
        || k.numel() == 0
        || v.numel() == 0
    {
        return Ok(None);
    }
    let (b, h, l, e) = (q.shape()[0], q.shape()[1], q.shape()[2], q.shape()[3]);
    let (s, ev) = (k.shape()[2], v.shape()[3]);
    let (qg, kg, vg) = (q.read::<f32>()?, k.read::<f32>()?, v.read::<f32>()?);
    let (qv, kv, vv) = (qg.view(), kg.view(), vg.view());
    // the elements from the first one on (strides are non-negative, so it is the lowest)
    let (Some(qs), Some(ks), Some(vs)) = (
        qv.as_slice_memory_order(),
        kv.as_slice_memory_order(),
        vv.as_slice_memory_order(),
    ) else {
        return Ok(None);
    };
    let st = |t: &Tensor| -> [usize; 4] {
        let s = t.strides();
        [s[0], s[1], s[2], s[3]].map(|x| x.unsigned_abs())
    };
    let (sq, sk, sv) = (st(q), st(k), st(v));
    let scale = scale as f32;
    // per head `out` ([L, Ev], at `i * l * ev` of `heads`): the scores in this thread's
    // scratch and the head's output in a pooled storage, so a steady stream of calls
    // allocates (and page-faults) nothing, also on rayon's threads
    let head = |i: usize, out: &mut [f32]| -> crate::Result<()> {
        let (bi, hi) = (i / h, i % h);
        let qm = head_operand(qs, sq, (bi, hi), (l, e), (sq[2], sq[3]))?;
        let ktm = head_operand(ks, sk, (bi, hi), (e, s), (sk[3], sk[2]))?;
        let vm = head_operand(vs, sv, (bi, hi), (s, ev), (sv[2], sv[3]))?;
        SCORES.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            scratch.resize(l * s, 0.0);
            let scores = &mut scratch[..];
            gemm::sgemm(
                isa,
                l,
                s,
                e,
                gemm::AOperand::Mat(qm),
                gemm::BOperand::Mat(ktm),
                scores,
                s,
                &gemm::Epilogue::NONE,
                false,
            )?;
            for row in scores.chunks_exact_mut(s) {
                row.iter_mut().for_each(|x| *x *= scale);
                f32::softmax_in_place(row);
            }
            let sm = gemm::MatRef::new(scores, l, s, s, 1)
                .ok_or_else(|| shape_err("sdpa: scores out of range"))?;
            gemm::sgemm(
                isa,
                l,
                ev,
                s,
                gemm::AOperand::Mat(sm),
                gemm::BOperand::Mat(vm),
                out,
                ev,
                &gemm::Epilogue::NONE,
                false,
            )
        })
    };
    let heads = Tensor::empty(&[b * h, l, ev], DType::Float32)?;
    {
        let mut hg = heads.write::<f32>()?;
        let hs = slice_mut_of(&mut hg)?;
        if b * h > 1 && l * s * (e + ev) >= 32 * 1024 {
            hs.par_chunks_mut(l * ev)
                .enumerate()
                .try_for_each(|(i, out)| head(i, out))?;
        } else {
            for (i, out) in hs.chunks_mut(l * ev).enumerate() {
                head(i, out)?;
            }
        }
    }
    // [B, L, H, Ev] memory, seen as [B, H, L, Ev]
    let out = Tensor::empty(&[b, l, h, ev], DType::Float32)?;
    {
        let hg = heads.read::<f32>()?;
        let hv = hg
            .as_slice()
            .ok_or_else(|| shape_err("sdpa: heads not contiguous"))?;
        let mut og = out.write::<f32>()?;
        let os = slice_mut_of(&mut og)?;
        for (i, head_out) in hv.chunks_exact(l * ev).enumerate() {
            let (bi, hi) = (i / h, i % h);
            for (li, src) in head_out.chunks_exact(ev).enumerate() {
                let at = ((bi * l + li) * h + hi) * ev;
                if let Some(dst) = os.get_mut(at..at + ev) {
                    dst.copy_from_slice(src);
                }
            }
        }
    }
    Ok(Some(permute(&out, &[0, 2, 1, 3])?))
}

/// The `(rows, cols)` matrix of head `(b, h)` of a `[B, H, ., .]` operand whose elements start
/// at `xs` with strides `sx`, rows and columns `(rs, cs)` apart.
fn head_operand(
    xs: &[f32],
    sx: [usize; 4],
    (b, h): (usize, usize),
    (rows, cols): (usize, usize),
    (rs, cs): (usize, usize),
) -> crate::Result<gemm::MatRef<'_>> {
    xs.get(b * sx[0] + h * sx[1]..)
        .and_then(|part| gemm::MatRef::new(part, rows, cols, rs, cs))
        .ok_or_else(|| shape_err("sdpa: operand view out of range"))
}

/// scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal, *, scale,
/// enable_gqa)
fn sdpa_op(a: &mut Args) -> crate::Result<IValue> {
    let (q, k, v, m) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?, a.opt_tensor(3)?);
    let dropout = a.double(4)?;
    if dropout != 0.0 {
        return Err(unsupported_feature(
            a.op,
            format!("dropout_p={dropout} (inference runtime)"),
        ));
    }
    let causal = a.bool(5)?;
    if causal && m.is_some() {
        return Err(invalid_argument(
            a.op,
            "attn_mask",
            "must not be set when is_causal=True",
            "a tensor",
        ));
    }
    let scale = if a.len() > 6 { a.opt_double(6)? } else { None };
    let gqa = if a.len() > 7 { a.bool(7)? } else { false };
    Ok(IValue::Tensor(sdpa(
        a.op,
        &q,
        &k,
        &v,
        m.as_ref(),
        causal,
        scale,
        gqa,
    )?))
}

/// Split the rows `[part*d, (part+1)*d)` out of a packed in-projection weight or bias.
fn rows(t: &Tensor, part: usize, d: usize) -> crate::Result<Tensor> {
    if t.shape().first().copied() != Some(3 * d) {
        return Err(size_mismatch(
            "multi_head_attention",
            format!(
                "size(0) of the packed qkv parameter of shape {:?}",
                t.shape()
            ),
            3 * d as i64,
            t.shape().first().map_or(-1, |&s| s as i64),
        ));
    }
    let off = t.storage_offset() + part * d * t.strides()[0] as usize;
    let mut shape = t.shape().to_vec();
    shape[0] = d;
    Ok(t.as_strided(&shape, t.strides(), off)?)
}

/// `[B, L, H*dh]` -> `[B, H, L, dh]` view.
fn split_heads(t: &Tensor, h: usize) -> crate::Result<Tensor> {
    let (b, l, d) = (t.shape()[0], t.shape()[1], t.shape()[2]);
    let v = reshape(t, &[b, l, h, d / h])?;
    permute(&v, &[0, 2, 1, 3])
}

/// Masked softmax as PyTorch's fused MHA uses it: a bool mask marks positions to ignore;
/// fully masked rows give zeros. `mask_type` 1 is a key-padding mask `[B, S]`.
fn masked_attention_weights<T: Real>(
    scores: &Tensor,
    mask: Option<&Tensor>,
    mask_type: Option<i64>,
) -> crate::Result<()> {
    let sh = scores.shape().to_vec();
    let (b, s) = (sh[0], sh[3]);
    if let Some(m) = mask {
        let m = if mask_type == Some(1) && m.dim() == 2 {
            reshape(m, &[b, 1, 1, s])?
        } else {
            m.clone()
        };
        let mut sv_guard = scores.write::<T>()?;
        let mut sv = sv_guard.view_mut();
        if m.dtype() == DType::Bool {
            let mv_guard = m.read::<bool>()?;
            let mv = mv_guard.view();
            let mb = mv.broadcast(sh.as_slice()).ok_or_else(|| {
                invalid_argument(
                    "multi_head_attention",
                    "mask",
                    format!("must broadcast to {sh:?}"),
                    format!("{:?}", m.shape()),
                )
            })?;
            ndarray::Zip::from(&mut sv).and(&mb).for_each(|x, &drop| {
                if drop {
                    *x = T::neg_infinity();
                }
            });
        } else {
            let mc = m.to_dtype(T::DTYPE)?;
            let mv_guard = mc.read::<T>()?;
            let mv = mv_guard.view();
            let mb = mv.broadcast(sh.as_slice()).ok_or_else(|| {
                invalid_argument(
                    "multi_head_attention",
                    "mask",
                    format!("must broadcast to {sh:?}"),
                    format!("{:?}", m.shape()),
                )
            })?;
            ndarray::Zip::from(&mut sv)
                .and(&mb)
                .for_each(|x, &add| *x += add);
        }
    }
    let mut buf_guard = scores.write::<T>()?;
    let buf = slice_mut_of(&mut buf_guard)?;
    if s == 0 {
        return Ok(());
    }
    buf.par_chunks_mut(s).for_each(|row| {
        let m = row.iter().copied().fold(T::neg_infinity(), T::max);
        if m == T::neg_infinity() {
            row.iter_mut().for_each(|v| *v = T::zero());
            return;
        }
        let mut sum = T::zero();
        for v in row.iter_mut() {
            *v = (*v - m).exp();
            sum += *v;
        }
        for v in row.iter_mut() {
            *v /= sum;
        }
    });
    Ok(())
}

/// Multi-head attention with packed in-projection, as `_native_multi_head_attention` computes
/// it. Returns (output [B, L, D], weights [B, H, L, S]).
#[allow(clippy::too_many_arguments)]
fn fused_mha(
    op: &str,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    heads: usize,
    qkv_w: &Tensor,
    qkv_b: &Tensor,
    proj_w: &Tensor,
    proj_b: &Tensor,
    mask: Option<&Tensor>,
    mask_type: Option<i64>,
) -> crate::Result<(Tensor, Tensor)> {
    check_qkv_ranks(op, [q, k, v], RankRequirement::Exactly(3))?;
    let d = q.shape()[2];
    if heads == 0 || !d.is_multiple_of(heads) {
        return Err(invalid_argument(
            op,
            "num_heads",
            format!("must divide embed_dim {d}"),
            heads,
        ));
    }
    let dtype = q.dtype();
    let cd = compute_dtype(op, dtype)?;
    let lin = |x: &Tensor, part: usize| -> crate::Result<Tensor> {
        super::linalg::linear(
            op,
            &x.to_dtype(cd)?,
            &rows(qkv_w, part, d)?.to_dtype(cd)?,
            Some(&rows(qkv_b, part, d)?.to_dtype(cd)?),
        )
    };
    let qh = split_heads(&lin(q, 0)?, heads)?;
    let kh = split_heads(&lin(k, 1)?, heads)?;
    let vh = split_heads(&lin(v, 2)?, heads)?;
    let dh = d / heads;
    let kt = permute(&kh, &[0, 1, 3, 2])?;
    let (ctx, weights) = dispatch_real_compute!(cd, op, |T| {
        let scores = batched_matmul_t::<T>(&qh, &kt, None, T::from_f64(1.0 / (dh as f64).sqrt()))?;
        masked_attention_weights::<T>(&scores, mask, mask_type)?;
        let ctx = batched_matmul_t::<T>(&scores, &vh, None, T::one())?;
        Ok::<_, crate::Error>((ctx, scores))
    })?;
    let (b, l) = (q.shape()[0], q.shape()[1]);
    let merged = reshape(&permute(&ctx, &[0, 2, 1, 3])?, &[b, l, d])?;
    let out = super::linalg::linear(
        op,
        &merged,
        &proj_w.to_dtype(cd)?,
        Some(&proj_b.to_dtype(cd)?),
    )?;
    Ok((out.to_dtype(dtype)?, weights.to_dtype(dtype)?))
}

/// _native_multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias,
/// proj_weight, proj_bias, mask, need_weights, average_attn_weights, mask_type)
fn native_mha(a: &mut Args) -> crate::Result<IValue> {
    let heads = non_negative(a.op, "num_head", a.int(4)?)?;
    let (qw, qb, pw, pb) = (a.tensor(5)?, a.tensor(6)?, a.tensor(7)?, a.tensor(8)?);
    let mask = a.opt_tensor(9)?;
    let (need, average) = (a.bool(10)?, a.bool(11)?);
    let mask_type = a.opt_int(12)?;
    let query = a.any_layout_tensor(0)?;
    if query.is_nested() {
        if mask.is_some() {
            return Err(unsupported_feature(a.op, "a nested tensor with a mask"));
        }
        // PyTorch's self-attention branch (`query.is_same(key)`); a key or value that is a
        // nested tensor of the same elements gives the same result
        let same = |i: usize| -> crate::Result<bool> {
            let other = a.any_layout_tensor(i)?;
            Ok(other.identity() == query.identity()
                || super::nested::same_elements(&other, &query)?)
        };
        if !same(1)? || !same(2)? || need {
            return Err(unsupported_feature(
                a.op,
                "a nested query other than as self-attention (query, key and value the same \
                 tensor) without need_weights",
            ));
        }
        // self-attention within each component, as PyTorch's padded computation masks the
        // other components' padding
        let out = super::nested::map_components(&query, a.op, |c| {
            let c = unsqueeze(c, 0)?;
            let (o, _) = fused_mha(a.op, &c, &c, &c, heads, &qw, &qb, &pw, &pb, None, None)?;
            squeeze_dims(&o, &[0])
        })?;
        return Ok(IValue::Tuple(crate::values::Tuple::new(vec![
            IValue::Tensor(out),
            IValue::None,
        ])));
    }
    let (q, k, v) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
    let (out, w) = fused_mha(
        a.op,
        &q,
        &k,
        &v,
        heads,
        &qw,
        &qb,
        &pw,
        &pb,
        mask.as_ref(),
        mask_type,
    )?;
    let weights = if !need {
        IValue::None
    } else if average {
        let cd = compute_dtype(a.op, w.dtype())?;
        let wc = w.to_dtype(cd)?;
        let (b, h, l, s) = (wc.shape()[0], wc.shape()[1], wc.shape()[2], wc.shape()[3]);
        let avg = Tensor::zeros(&[b, l, s], cd)?;
        dispatch_real_compute!(cd, a.op, |T| {
            let src_guard = wc.read::<T>()?;
            let src = super::linalg::slice_of(&src_guard)?;
            let mut dst_guard = avg.write::<T>()?;
            let dst = slice_mut_of(&mut dst_guard)?;
            let per = l * s;
            for bi in 0..b {
                for hi in 0..h {
                    let blk = &src[(bi * h + hi) * per..][..per];
                    for (o, &x) in dst[bi * per..][..per].iter_mut().zip(blk) {
                        *o += x;
                    }
                }
            }
            dst.iter_mut().for_each(|x| *x /= T::from_f64(h as f64));
            Ok::<(), crate::Error>(())
        })?;
        IValue::Tensor(avg.to_dtype(w.dtype())?)
    } else {
        IValue::Tensor(w)
    };
    Ok(IValue::Tuple(crate::values::Tuple::new(vec![
        IValue::Tensor(out),
        weights,
    ])))
}

/// `t + f(t)` elementwise-add helper in the compute dtype.
fn add(op: &str, x: &Tensor, y: &Tensor) -> crate::Result<Tensor> {
    let cd = compute_dtype(op, x.dtype())?;
    let out = contiguous_as_owned(x, cd)?;
    let yc = super::linalg::contiguous_as(y, cd)?;
    dispatch_real_compute!(cd, op, |T| {
        let ys_guard = yc.read::<T>()?;
        let ys = super::linalg::slice_of(&ys_guard)?;
        for (o, &v) in slice_mut_of(&mut out.write::<T>()?)?.iter_mut().zip(ys) {
            *o += v;
        }
        Ok::<(), crate::Error>(())
    })?;
    Ok(out)
}

/// A fresh contiguous copy in `dtype` (safe to write).
fn contiguous_as_owned(x: &Tensor, dtype: DType) -> crate::Result<Tensor> {
    let out = Tensor::zeros(x.shape(), dtype)?;
    out.copy_from(x)?;
    Ok(out)
}

/// _transformer_encoder_layer_fwd(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight,
/// proj_bias, use_gelu, norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2,
/// norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2, mask, mask_type)
fn transformer_encoder_layer(a: &mut Args) -> crate::Result<IValue> {
    let src = a.any_layout_tensor(0)?;
    let mask = a.opt_tensor(18)?;
    let mask_type = a.opt_int(19)?;
    let op = a.op;
    if src.is_nested() {
        // PyTorch runs each op of the layer on the nested tensor, which for every one of
        // them is the dense op on each component: attention stays within a component
        if mask.is_some() {
            return Err(unsupported_feature(a.op, "a nested tensor with a mask"));
        }
        let one = |c: &Tensor| encoder_layer_dense(a, &unsqueeze(c, 0)?, None, None);
        let out = super::nested::map_components(&src, op, |c| squeeze_dims(&one(c)?, &[0]))?;
        return Ok(IValue::Tensor(out));
    }
    let src = a.tensor(0)?;
    Ok(IValue::Tensor(encoder_layer_dense(
        a,
        &src,
        mask.as_ref(),
        mask_type,
    )?))
}

/// `_transformer_encoder_layer_fwd` on a strided `src` (arguments 1.. read from `a`).
fn encoder_layer_dense(
    a: &Args,
    src: &Tensor,
    mask: Option<&Tensor>,
    mask_type: Option<i64>,
) -> crate::Result<Tensor> {
    let heads = non_negative(a.op, "num_heads", a.int(2)?)?;
    let (qw, qb, pw, pb) = (a.tensor(3)?, a.tensor(4)?, a.tensor(5)?, a.tensor(6)?);
    let (gelu, norm_first, eps) = (a.bool(7)?, a.bool(8)?, a.double(9)?);
    let (n1w, n1b, n2w, n2b) = (a.tensor(10)?, a.tensor(11)?, a.tensor(12)?, a.tensor(13)?);
    let (f1w, f1b, f2w, f2b) = (a.tensor(14)?, a.tensor(15)?, a.tensor(16)?, a.tensor(17)?);
    let op = a.op;
    let dtype = src.dtype();
    let cd = compute_dtype(op, dtype)?;
    let x = src.to_dtype(cd)?;
    let conv = |t: &Tensor| t.to_dtype(cd);
    let ln = |t: &Tensor, w: &Tensor, b: &Tensor| -> crate::Result<Tensor> {
        super::norm::layer_norm_last(op, t, Some(w), Some(b), eps)
    };
    let attn = |t: &Tensor| -> crate::Result<Tensor> {
        Ok(fused_mha(op, t, t, t, heads, &qw, &qb, &pw, &pb, mask, mask_type)?.0)
    };
    let ffn = |t: &Tensor| -> crate::Result<Tensor> {
        let h = super::linalg::linear(op, t, &conv(&f1w)?, Some(&conv(&f1b)?))?;
        let h = contiguous_as_owned(&h, cd)?;
        dispatch_real_compute!(cd, op, |T| {
            for v in slice_mut_of(&mut h.write::<T>()?)?.iter_mut() {
                let f = v.as_f64();
                *v = T::from_f64(if gelu {
                    0.5 * f * (1.0 + (f / std::f64::consts::SQRT_2).erf_())
                } else {
                    f.max(0.0)
                });
            }
            Ok::<(), crate::Error>(())
        })?;
        super::linalg::linear(op, &h, &conv(&f2w)?, Some(&conv(&f2b)?))
    };
    let out = if norm_first {
        let x = add(op, &x, &attn(&ln(&x, &n1w, &n1b)?)?)?;
        add(op, &x, &ffn(&ln(&x, &n2w, &n2b)?)?)?
    } else {
        let x = ln(&add(op, &x, &attn(&x)?)?, &n1w, &n1b)?;
        ln(&add(op, &x, &ffn(&x)?)?, &n2w, &n2b)?
    };
    out.to_dtype(dtype)
}

fn pair(a: Tensor, b: Tensor) -> IValue {
    IValue::Tuple(crate::values::Tuple::new(vec![
        IValue::Tensor(a),
        IValue::Tensor(b),
    ]))
}

/// Reference attention in f64 over `q [..., L, E]`, `k [..., S, E]`, `v [..., S, Ev]` (key
/// and value broadcast to the query's batch dims, grouped-query heads repeated): returns the
/// output, the attention weights and each row's log-sum-exp of the scaled, masked scores. The
/// mask is added (a bool mask adds 1 where true, as PyTorch's math kernel does when called
/// directly); `drop` is (keep mask, p): weights zeroed where the mask is false and the value
/// scaled by 1 / (1 - p). A row with every score -inf gets zero weights.
#[allow(clippy::too_many_arguments)]
fn attention_reference(
    op: &str,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    causal: bool,
    scale: Option<f64>,
    gqa: bool,
    drop: Option<(&Tensor, f64)>,
) -> crate::Result<(Tensor, Tensor, Tensor)> {
    check_rank(op, "query", RankRequirement::AtLeast(2), q.shape())?;
    check_qkv_ranks(op, [q, k, v], RankRequirement::Exactly(q.dim()))?;
    let nd = q.dim();
    let (mut k, mut v) = (k.clone(), v.clone());
    if gqa && nd >= 3 {
        let (hq, hk, hv) = (q.shape()[nd - 3], k.shape()[nd - 3], v.shape()[nd - 3]);
        if hk == 0 || hv == 0 || hq % hk != 0 || hq % hv != 0 {
            return Err(invalid_argument(
                op,
                "the key and value head counts",
                format!("must divide the query's {hq}"),
                format!("{hk} and {hv}"),
            ));
        }
        k = repeat_heads(&k, hq / hk)?;
        v = repeat_heads(&v, hq / hv)?;
    }
    let batch = &q.shape()[..nd - 2];
    let (l, e) = (q.shape()[nd - 2], q.shape()[nd - 1]);
    let (s, ev) = (k.shape()[nd - 2], v.shape()[nd - 1]);
    if k.shape()[nd - 1] != e || v.shape()[nd - 2] != s {
        return Err(invalid_argument(
            op,
            "key and value",
            format!("must fit query {:?} (key.size(-1) == query.size(-1), value.size(-2) == key.size(-2))", q.shape()),
            format!("{:?} and {:?}", k.shape(), v.shape()),
        ));
    }
    let with = |tail: &[usize]| [batch, tail].concat();
    let f64s = |t: &Tensor, shape: &[usize]| -> crate::Result<Vec<f64>> {
        super::shape::expand_to(t, shape)?
            .contiguous()?
            .to_vec::<f64>()
    };
    let qs = f64s(q, &with(&[l, e]))?;
    let ks = f64s(&k, &with(&[s, e]))?;
    let vs = f64s(&v, &with(&[s, ev]))?;
    let ms = mask.map(|m| f64s(m, &with(&[l, s]))).transpose()?;
    let (keep, p) = match drop {
        Some((m, p)) => (Some(f64s(m, &with(&[l, s]))?), p),
        None => (None, 0.0),
    };
    let scale = scale.unwrap_or(1.0 / (e as f64).sqrt());
    let heads: usize = batch.iter().product();
    let mut out = vec![0.0; heads * l * ev];
    let mut attn = vec![0.0; heads * l * s];
    let mut lse = vec![0.0; heads * l];
    for h in 0..heads {
        for i in 0..l {
            let row = (h * l + i) * s;
            let scores = &mut attn[row..][..s];
            for (j, sc) in scores.iter_mut().enumerate() {
                let dot: f64 = (0..e)
                    .map(|c| qs[(h * l + i) * e + c] * ks[(h * s + j) * e + c])
                    .sum();
                *sc = dot * scale + ms.as_ref().map_or(0.0, |m| m[row + j]);
                if causal && j > i {
                    *sc = f64::NEG_INFINITY;
                }
            }
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            if max == f64::NEG_INFINITY {
                scores.fill(0.0);
                continue;
            }
            let sum: f64 = scores.iter().map(|x| (x - max).exp()).sum();
            lse[h * l + i] = max + sum.ln();
            scores.iter_mut().for_each(|x| *x = (*x - max).exp() / sum);
            if let Some(keep) = &keep {
                for (j, w) in scores.iter_mut().enumerate() {
                    if keep[row + j] == 0.0 {
                        *w = 0.0;
                    }
                }
            }
            let value_scale = if keep.is_some() { 1.0 / (1.0 - p) } else { 1.0 };
            for c in 0..ev {
                out[(h * l + i) * ev + c] = (0..s)
                    .map(|j| scores[j] * vs[(h * s + j) * ev + c] * value_scale)
                    .sum();
            }
        }
    }
    let dt = q.dtype();
    Ok((
        Tensor::from_vec(out, &with(&[l, ev]))?.to_dtype(dt)?,
        Tensor::from_vec(attn, &with(&[l, s]))?.to_dtype(dt)?,
        Tensor::from_vec(lse, &with(&[l]))?.to_dtype(if dt == DType::Float64 {
            dt
        } else {
            DType::Float32
        })?,
    ))
}

/// _scaled_dot_product_attention_math(query, key, value, attn_mask, dropout_p, is_causal,
/// dropout_mask, *, scale, enable_gqa) -> (output, attention weights). Dropout only with a
/// given dropout_mask (a random one would draw from PyTorch's bernoulli).
fn sdpa_math(a: &mut Args) -> crate::Result<IValue> {
    let (q, k, v, m) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?, a.opt_tensor(3)?);
    let p = a.double(4)?;
    let causal = a.bool(5)?;
    if causal && m.is_some() {
        return Err(invalid_argument(
            a.op,
            "attn_mask",
            "must not be set when is_causal=True",
            "a tensor",
        ));
    }
    let keep = a.opt_tensor(6)?;
    let drop = match (p > 0.0, keep.as_ref()) {
        (false, _) => None,
        (true, Some(keep)) => Some((keep, p)),
        (true, None) => {
            return Err(unsupported_feature(
                a.op,
                format!("dropout_p={p} without a dropout_mask (inference runtime)"),
            ))
        }
    };
    let (o, w, _) = attention_reference(
        a.op,
        &q,
        &k,
        &v,
        m.as_ref(),
        causal,
        a.opt_double(7)?,
        a.bool(8)?,
        drop,
    )?;
    Ok(pair(o, w))
}

/// _scaled_dot_product_flash_attention_for_cpu(query, key, value, dropout_p, is_causal, *,
/// attn_mask, scale) -> (output, logsumexp): `[B, H, L, E]` operands of one head size, an
/// additive mask of the query's dtype, no dropout (PyTorch's constraints).
fn sdpa_flash_cpu(a: &mut Args) -> crate::Result<IValue> {
    let (q, k, v) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
    let m = a.opt_tensor(5)?;
    let name = "scaled_dot_product_attention_flash_attention";
    if a.double(3)? > 0.0 {
        return Err(unsupported_feature(name, "dropout > 0"));
    }
    check_qkv_ranks(name, [&q, &k, &v], RankRequirement::Exactly(4))?;
    for (argument, t) in [("key.size(3)", &k), ("value.size(3)", &v)] {
        check_size(name, argument, q.shape()[3] as i64, t.shape()[3] as i64)?;
    }
    if let Some(m) = m.as_ref().filter(|m| m.dtype() != q.dtype()) {
        return Err(TensorError::DTypeMismatch {
            expected: q.dtype(),
            got: m.dtype(),
        }
        .into());
    }
    let (o, _, lse) = attention_reference(
        a.op,
        &q,
        &k,
        &v,
        m.as_ref(),
        a.bool(4)?,
        a.opt_double(6)?,
        false,
        None,
    )?;
    Ok(pair(o, lse))
}

/// _transform_bias_rescale_qkv(qkv [B, T, 3 * D], qkv_bias [3 * D], num_heads) -> (q, k, v),
/// each `[B, num_heads, T, D / num_heads]`: the bias added, q scaled by 1/sqrt(head dim).
fn transform_bias_rescale_qkv(a: &mut Args) -> crate::Result<IValue> {
    let (qkv, bias) = (a.tensor(0)?, a.tensor(1)?);
    let heads = a.int(2)?;
    let [b, t, d3] = *qkv.shape() else {
        return Err(rank_mismatch(
            a.op,
            "qkv ([B, T, 3 * D])",
            RankRequirement::Exactly(3),
            qkv.shape(),
        ));
    };
    let d = d3 / 3;
    let heads = usize::try_from(heads)
        .ok()
        .filter(|&h| h > 0 && d3 % 3 == 0 && d % h == 0)
        .ok_or_else(|| {
            invalid_argument(
                a.op,
                "num_heads",
                format!("must be positive with qkv.size(-1) ({d3}) = 3 * num_heads * head_dim"),
                heads,
            )
        })?;
    if bias.numel() != d3 {
        return Err(shape_mismatch(a.op, "qkv_bias", &[d3], bias.shape()));
    }
    let dh = d / heads;
    let xs = qkv.contiguous()?.to_vec::<f64>()?;
    let bs = bias.contiguous()?.to_vec::<f64>()?;
    let inv = 1.0 / (dh as f64).sqrt();
    let outs = (0..3)
        .map(|part| {
            let mut out = vec![0.0; b * heads * t * dh];
            for bi in 0..b {
                for ti in 0..t {
                    for h in 0..heads {
                        for c in 0..dh {
                            let f = part * d + h * dh + c;
                            let v = xs[(bi * t + ti) * d3 + f] + bs[f];
                            out[((bi * heads + h) * t + ti) * dh + c] =
                                if part == 0 { v * inv } else { v };
                        }
                    }
                }
            }
            Ok(IValue::Tensor(
                Tensor::from_vec(out, &[b, heads, t, dh])?.to_dtype(qkv.dtype())?,
            ))
        })
        .collect::<crate::Result<Vec<_>>>()?;
    Ok(IValue::Tuple(crate::values::Tuple::new(outs)))
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::scaled_dot_product_attention", sdpa_op);
    r.add("aten::_scaled_dot_product_attention_math", sdpa_math);
    r.add(
        "aten::_transform_bias_rescale_qkv",
        transform_bias_rescale_qkv,
    );
    r.add(
        "aten::_scaled_dot_product_flash_attention_for_cpu",
        sdpa_flash_cpu,
    );
    r.add("aten::_native_multi_head_attention", native_mha);
    r.add(
        "aten::_transformer_encoder_layer_fwd",
        transformer_encoder_layer,
    );
}

/// `op`'s query, key and value each meet `expected`.
fn check_qkv_ranks(
    op: &str,
    [q, k, v]: [&Tensor; 3],
    expected: RankRequirement,
) -> crate::Result<()> {
    for (argument, t) in [("query", q), ("key", k), ("value", v)] {
        check_rank(op, argument, expected.clone(), t.shape())?;
    }
    Ok(())
}
