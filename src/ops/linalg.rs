//! Kernels: matrix products (mm, bmm, matmul, addmm, linear, einsum, tensordot, ...) over the
//! `gemm` crate, and the float-compute helpers the other nn families (conv, norm, rnn, ...) share.
//!
//! Half and bfloat16 inputs are computed in f32 and rounded once at the end, as PyTorch's CPU
//! kernels accumulate them in float.

use super::{gemm, Args, Registry};
#[allow(unused_imports)]
use crate::tensor::Element as _;
use crate::tensor::{
    contiguous_strides, DType, Element, Scalar, Tensor, TensorError, TensorRead, TensorWrite,
};
use crate::values::IValue;
#[allow(unused_imports)]
use num_traits::{Float as _, One as _, Zero as _};
use rayon::prelude::*;

/// The float types kernels compute in.
pub(crate) trait Real:
    Element
    + num_traits::Float
    + std::iter::Sum
    + std::ops::AddAssign
    + std::ops::SubAssign
    + std::ops::MulAssign
    + std::ops::DivAssign
{
    /// The value as f64 (`Element::to_f64`; named apart from `ToPrimitive::to_f64`).
    #[inline]
    fn as_f64(self) -> f64 {
        Element::to_f64(self)
    }

    /// `x = exp(x)` over a slice (float32: the vector kernel softmax uses).
    fn exp_in_place(xs: &mut [Self]) {
        xs.iter_mut().for_each(|v| *v = v.exp());
    }

    /// `row = softmax(row)` in place (float32: the vectorized row kernel).
    fn softmax_in_place(row: &mut [Self]) {
        if row.is_empty() {
            return;
        }
        let m = row.iter().copied().fold(Self::neg_infinity(), Self::max);
        row.iter_mut().for_each(|v| *v -= m);
        Self::exp_in_place(row);
        let sum = row.iter().fold(Self::zero(), |acc, &v| acc + v);
        for v in row.iter_mut() {
            *v /= sum;
        }
    }
}
impl Real for f32 {
    fn exp_in_place(xs: &mut [f32]) {
        super::kernels::vmath::apply(super::kernels::vmath::VecFn::Exp, xs)
    }

    fn softmax_in_place(row: &mut [f32]) {
        super::kernels::rowwise::softmax_row_f32(row)
    }
}
impl Real for f64 {}

/// Run `$body` with `$T` = f32 or f64 for a compute dtype (see [`compute_dtype`]).
#[macro_export]
#[doc(hidden)]
macro_rules! dispatch_real_compute {
    ($dtype:expr, $what:expr, |$T:ident| $body:expr) => {
        $crate::__dispatch!($dtype, $what, $T, $body, Float32 => f32, Float64 => f64)
    };
}
pub(crate) use dispatch_real_compute;

/// The dtype a float kernel computes in: f32 for half/bfloat16/float, f64 for double.
pub(crate) fn compute_dtype(what: &str, d: DType) -> crate::Result<DType> {
    match d {
        DType::Float16 | DType::BFloat16 | DType::Float32 => Ok(DType::Float32),
        DType::Float64 => Ok(DType::Float64),
        other => Err(TensorError::UnsupportedDType {
            what: what.to_string(),
            dtype: other,
        }
        .into()),
    }
}

/// `t` converted to `dtype` and made contiguous (no copy when already so).
pub(crate) fn contiguous_as(t: &Tensor, dtype: DType) -> crate::Result<Tensor> {
    t.to_dtype(dtype)?.contiguous()
}

/// The elements of a contiguous tensor.
pub(crate) fn slice_of<T: Element>(t: &TensorRead<T>) -> crate::Result<&[T]> {
    t.as_slice()
        .ok_or_else(|| TensorError::Value("internal: tensor is not contiguous".into()).into())
}

/// The elements of a contiguous tensor, writable (fresh outputs only).
pub(crate) fn slice_mut_of<T: Element>(t: &mut TensorWrite<T>) -> crate::Result<&mut [T]> {
    t.as_slice_mut()
        .ok_or_else(|| TensorError::Value("internal: tensor is not contiguous".into()).into())
}

// one definition each, in kernels; re-exported for the many kernels that import them from here
use super::kernels::{check_size, invalid_argument, rank_mismatch, shape_mismatch, size_mismatch};
pub(crate) use super::kernels::{shape_err, value_err};
use crate::tensor::RankRequirement;

/// A view with dims reordered (`permute`).
pub(crate) fn permute(t: &Tensor, perm: &[usize]) -> crate::Result<Tensor> {
    let shape: Vec<usize> = perm.iter().map(|&p| t.shape()[p]).collect();
    let strides: Vec<isize> = perm.iter().map(|&p| t.strides()[p]).collect();
    Ok(t.as_strided(&shape, &strides, t.storage_offset())?)
}

/// A contiguous tensor with `shape` holding `t`'s elements in row-major order.
pub(crate) fn reshape(t: &Tensor, shape: &[usize]) -> crate::Result<Tensor> {
    if shape.iter().product::<usize>() != t.numel() {
        return Err(TensorError::InvalidShape {
            shape: shape.iter().map(|&s| s as i64).collect(),
            numel: t.numel(),
        }
        .into());
    }
    let c = t.contiguous()?;
    Ok(c.as_strided(shape, &contiguous_strides(shape), c.storage_offset())?)
}

/// Raw pointer that may cross rayon threads: every user writes disjoint regions.
#[derive(Clone, Copy)]
pub(crate) struct SendPtr<T>(pub *mut T);
unsafe impl<T> Send for SendPtr<T> {}
unsafe impl<T> Sync for SendPtr<T> {}
impl<T> SendPtr<T> {
    /// The pointer (a method, so closures capture the whole Send wrapper).
    #[inline]
    pub(crate) fn get(self) -> *mut T {
        self.0
    }
}

/// One strided matrix operand: element pointer and row/column strides (in elements).
#[derive(Clone, Copy)]
pub(crate) struct Mat<T> {
    pub ptr: *const T,
    pub rs: isize,
    pub cs: isize,
}

/// `dst[m x n] = acc_scale * dst + scale * lhs[m x k] @ rhs[k x n]` where `acc_scale = None`
/// overwrites dst. All strides in elements.
///
/// # Safety
/// Every addressed element of the operands must be valid; dst must not alias lhs/rhs.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_strided<T: Real>(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut T,
    dst_rs: isize,
    dst_cs: isize,
    acc_scale: Option<T>,
    lhs: Mat<T>,
    rhs: Mat<T>,
    scale: T,
    parallel: bool,
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        for i in 0..m {
            for j in 0..n {
                let p = dst.offset(i as isize * dst_rs + j as isize * dst_cs);
                *p = match acc_scale {
                    Some(a) if a != T::zero() => *p * a,
                    _ => T::zero(),
                };
            }
        }
        return;
    }
    let macs = m.saturating_mul(n).saturating_mul(k);
    let par = if parallel && crate::tensor::split_work(macs, crate::tensor::PARALLEL_MACS) {
        ::gemm::Parallelism::Rayon(rayon::current_num_threads())
    } else {
        ::gemm::Parallelism::None
    };
    let (read_dst, alpha) = match acc_scale {
        Some(a) if a != T::zero() => (true, a),
        _ => (false, T::zero()),
    };
    ::gemm::gemm(
        m, n, k, dst, dst_cs, dst_rs, read_dst, lhs.ptr, lhs.cs, lhs.rs, rhs.ptr, rhs.cs, rhs.rs,
        alpha, scale, false, false, false, par,
    );
}

/// Run one small product through the gemm crate, once per process: its first blocked product
/// reads the CPU's cache hierarchy from sysfs (about a millisecond, seen in the LSTM tagger's
/// first call), which `Module::prepare` pays here instead. 64^3 takes the blocked path; tiny
/// products do not, and would leave the probe to the first call.
pub(crate) fn warm_up_gemm_crate() {
    static DONE: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    DONE.get_or_init(|| {
        const N: usize = 64;
        let (a, b) = (vec![1f32; N * N], vec![1f32; N * N]);
        let mut c = vec![0f32; N * N];
        // SAFETY: N x N row-major matrices: every pointer addresses N * N floats, strides
        // (1, N) stay inside them, and `c` is not aliased by `a` or `b`.
        unsafe {
            ::gemm::gemm(
                N,
                N,
                N,
                c.as_mut_ptr(),
                1,
                N as isize,
                false,
                a.as_ptr(),
                1,
                N as isize,
                b.as_ptr(),
                1,
                N as isize,
                0.0,
                1.0,
                false,
                false,
                false,
                ::gemm::Parallelism::None,
            )
        };
    });
}

/// Offsets (in elements) of every batch entry of `t`'s leading `batch.len()` dims broadcast to
/// `batch`, in row-major order.
fn batch_offsets(t: &Tensor, batch: &[usize]) -> Vec<isize> {
    let nb = batch.len();
    let lead = nb - (t.dim() - 2);
    let strides: Vec<isize> = (0..nb)
        .map(|i| {
            if i < lead || t.shape()[i - lead] == 1 {
                0
            } else {
                t.strides()[i - lead]
            }
        })
        .collect();
    let total: usize = batch.iter().product();
    let mut out = Vec::with_capacity(total);
    let mut idx = vec![0usize; nb];
    for _ in 0..total {
        out.push(
            idx.iter()
                .zip(&strides)
                .map(|(&i, &s)| i as isize * s)
                .sum(),
        );
        for d in (0..nb).rev() {
            idx[d] += 1;
            if idx[d] < batch[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    out
}

/// Batched, broadcasting matmul of `a [..., M, K]` and `b [..., K, N]` (both of dtype `T`, any
/// strides), optionally accumulating into `init` (broadcastable to the output) scaled by
/// `init_scale`: `out = init_scale * init + scale * a @ b`. Output is contiguous `T`.
pub(crate) fn batched_matmul_t<T: Real>(
    a: &Tensor,
    b: &Tensor,
    init: Option<(&Tensor, T)>,
    scale: T,
) -> crate::Result<Tensor> {
    let (ad, bd) = (a.dim(), b.dim());
    if ad < 2 || bd < 2 {
        return Err(shape_err("internal: batched matmul needs 2-d operands"));
    }
    let (m, k) = (a.shape()[ad - 2], a.shape()[ad - 1]);
    let (k2, n) = (b.shape()[bd - 2], b.shape()[bd - 1]);
    if k != k2 {
        return Err(TensorError::MatmulShapes {
            op: "mm".into(),
            mat1: [m, k],
            mat2: [k2, n],
        }
        .into());
    }
    let batch =
        crate::tensor::broadcast_shapes(&a.shape()[..ad - 2], &b.shape()[..bd - 2])?.to_vec();
    let mut out_shape = batch.clone();
    out_shape.extend([m, n]);
    let out = Tensor::empty(&out_shape, T::DTYPE)?;
    let mut init_scale = None;
    if let Some((c, s)) = init {
        if s != T::zero() {
            out.copy_from(c)?;
            init_scale = Some(s);
        }
    }
    let a_off = batch_offsets(a, &batch);
    let b_off = batch_offsets(b, &batch);
    let av_guard = a.read::<T>()?;
    let av = av_guard.view();
    let bv_guard = b.read::<T>()?;
    let bv = bv_guard.view();
    let (ap, bp) = (
        SendPtr(av.as_ptr() as *mut T),
        SendPtr(bv.as_ptr() as *mut T),
    );
    let (ars, acs) = (a.strides()[ad - 2], a.strides()[ad - 1]);
    let (brs, bcs) = (b.strides()[bd - 2], b.strides()[bd - 1]);
    let mut out_guard = out.write::<T>()?;
    let dst = SendPtr(slice_mut_of(&mut out_guard)?.as_mut_ptr());
    let nbatch = a_off.len();
    let per = m * n;
    let run = |i: usize, parallel: bool| {
        // SAFETY: offsets come from the operands' own shapes and strides (views checked at
        // construction); each batch entry writes its own m*n block of the fresh output.
        unsafe {
            gemm_strided(
                m,
                n,
                k,
                dst.get().add(i * per),
                n as isize,
                1,
                init_scale,
                Mat {
                    ptr: ap.get().offset(a_off[i]),
                    rs: ars,
                    cs: acs,
                },
                Mat {
                    ptr: bp.get().offset(b_off[i]),
                    rs: brs,
                    cs: bcs,
                },
                scale,
                parallel,
            )
        }
    };
    let flops = m.saturating_mul(n).saturating_mul(k);
    if nbatch > 1 && flops < 128 * 128 * 128 {
        (0..nbatch).into_par_iter().for_each(|i| run(i, false));
    } else {
        (0..nbatch).for_each(|i| run(i, true));
    }
    Ok(out)
}

/// Check both matmul operands are floating tensors of one dtype; returns (dtype, compute dtype).
fn matmul_dtypes(op: &str, a: &Tensor, b: &Tensor) -> crate::Result<(DType, DType)> {
    if a.dtype() != b.dtype() {
        return Err(TensorError::OperandDTypes {
            op: op.to_string(),
            left: a.dtype(),
            right: b.dtype(),
        }
        .into());
    }
    Ok((a.dtype(), compute_dtype(op, a.dtype())?))
}

/// `init_scale * init + scale * (a @ b)` over operands with matrix dims last (see
/// [`batched_matmul_t`]), returned in the operands' dtype.
pub(crate) fn matmul_nd(
    op: &str,
    a: &Tensor,
    b: &Tensor,
    init: Option<(&Tensor, f64)>,
    scale: f64,
) -> crate::Result<Tensor> {
    if super::int_matmul::is_integer(a.dtype()) {
        return super::int_matmul::integer_matmul(op, a, b, init, scale);
    }
    let (dtype, cd) = matmul_dtypes(op, a, b)?;
    let (a, b) = (a.to_dtype(cd)?, b.to_dtype(cd)?);
    let init_c = match init {
        Some((c, s)) => Some((c.to_dtype(cd)?, s)),
        None => None,
    };
    let out = dispatch_real_compute!(cd, op, |T| {
        batched_matmul_t::<T>(
            &a,
            &b,
            init_c.as_ref().map(|(c, s)| (c, T::from_f64(*s))),
            T::from_f64(scale),
        )
    })?;
    out.to_dtype(dtype)
}

/// `torch.matmul` semantics for every rank combination.
pub(crate) fn matmul(op: &str, a: &Tensor, b: &Tensor) -> crate::Result<Tensor> {
    let (ad, bd) = (a.dim(), b.dim());
    if ad == 0 || bd == 0 {
        let (argument, t) = if ad == 0 { ("self", a) } else { ("other", b) };
        return Err(rank_mismatch(
            op,
            argument,
            RankRequirement::AtLeast(1),
            t.shape(),
        ));
    }
    let a2 = if ad == 1 {
        a.as_strided(&[1, a.shape()[0]], &[0, a.strides()[0]], a.storage_offset())?
    } else {
        a.clone()
    };
    let b2 = if bd == 1 {
        b.as_strided(&[b.shape()[0], 1], &[b.strides()[0], 0], b.storage_offset())?
    } else {
        b.clone()
    };
    // Fold the batch of a 3+-d left operand into its rows when the right one is a plain matrix.
    let out = matmul_nd(op, &a2, &b2, None, 1.0)?;
    let mut shape: Vec<usize> = out.shape().to_vec();
    let r = shape.len();
    if bd == 1 {
        shape.remove(r - 1);
    }
    if ad == 1 {
        shape.remove(r - 2);
    }
    reshape(&out, &shape)
}

fn check_dim(op: &str, t: &Tensor, d: usize, what: &str) -> crate::Result<()> {
    if t.dim() != d {
        return Err(rank_mismatch(
            op,
            what,
            RankRequirement::Exactly(d),
            t.shape(),
        ));
    }
    Ok(())
}

/// A product with a sparse operand (PyTorch's SparseCPU/SparseCsrCPU `mm`, and `matmul` of
/// 2-D operands), else `None`.
fn sparse_product(a: &Args) -> crate::Result<Option<IValue>> {
    let (x, y) = (a.any_layout_tensor(0)?, a.any_layout_tensor(1)?);
    if x.sparse_parts().is_none() && y.sparse_parts().is_none() {
        return Ok(None);
    }
    Ok(Some(super::sparse::sparse_mm(a.op, &x, &y)?.into()))
}

fn mm(a: &mut Args) -> crate::Result<IValue> {
    if let Some(p) = sparse_product(a)? {
        return Ok(p);
    }
    let (x, y) = (a.tensor(0)?, a.tensor(1)?);
    check_dim(a.op, &x, 2, "self")?;
    check_dim(a.op, &y, 2, "mat2")?;
    Ok(IValue::Tensor(matmul_nd(a.op, &x, &y, None, 1.0)?))
}

fn bmm(a: &mut Args) -> crate::Result<IValue> {
    let (x, y) = (a.tensor(0)?, a.tensor(1)?);
    check_dim(a.op, &x, 3, "batch1")?;
    check_dim(a.op, &y, 3, "batch2")?;
    if x.shape()[0] != y.shape()[0] || x.shape()[2] != y.shape()[1] {
        // PyTorch's message, kept: tests compare it
        return Err(shape_err(format!(
            "{}: Expected size for first two dimensions of batch2 tensor to be: [{}, {}] but got: [{}, {}].",
            a.op,
            x.shape()[0],
            x.shape()[2],
            y.shape()[0],
            y.shape()[1]
        )));
    }
    Ok(IValue::Tensor(matmul_nd(a.op, &x, &y, None, 1.0)?))
}

fn matmul_op(a: &mut Args) -> crate::Result<IValue> {
    if let Some(p) = sparse_product(a)? {
        return Ok(p);
    }
    Ok(IValue::Tensor(matmul(a.op, &a.tensor(0)?, &a.tensor(1)?)?))
}

fn scalar_f64(s: Scalar) -> f64 {
    s.to_f64()
}

pub(crate) fn addmm(a: &mut Args) -> crate::Result<IValue> {
    let mat1 = a.any_layout_tensor(1)?;
    if mat1.sparse_parts().is_some() {
        let (c, y) = (a.tensor(0)?, a.tensor(2)?);
        let (beta, alpha) = (a.scalar(3)?, a.scalar(4)?);
        return Ok(super::sparse::sparse_addmm(a.op, Some(&c), &mat1, &y, beta, alpha)?.into());
    }
    let (c, x, y) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
    let (beta, alpha) = (scalar_f64(a.scalar(3)?), scalar_f64(a.scalar(4)?));
    check_dim(a.op, &x, 2, "mat1")?;
    check_dim(a.op, &y, 2, "mat2")?;
    Ok(IValue::Tensor(matmul_nd(
        a.op,
        &x,
        &y,
        Some((&c, beta)),
        alpha,
    )?))
}

fn baddbmm(a: &mut Args) -> crate::Result<IValue> {
    let (c, x, y) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
    let (beta, alpha) = (scalar_f64(a.scalar(3)?), scalar_f64(a.scalar(4)?));
    check_dim(a.op, &x, 3, "batch1")?;
    check_dim(a.op, &y, 3, "batch2")?;
    Ok(IValue::Tensor(matmul_nd(
        a.op,
        &x,
        &y,
        Some((&c, beta)),
        alpha,
    )?))
}

fn addbmm(a: &mut Args) -> crate::Result<IValue> {
    let (c, x, y) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
    let (beta, alpha) = (scalar_f64(a.scalar(3)?), scalar_f64(a.scalar(4)?));
    check_dim(a.op, &x, 3, "batch1")?;
    check_dim(a.op, &y, 3, "batch2")?;
    // sum_b x[b] @ y[b] == [x0 x1 ...] (m x bk) @ [y0; y1; ...] (bk x n)
    let (bn, m, k) = (x.shape()[0], x.shape()[1], x.shape()[2]);
    let n = y.shape()[2];
    if y.shape()[0] != bn || y.shape()[1] != k {
        return Err(shape_mismatch(
            a.op,
            "the first two dimensions of batch2",
            &[bn, k],
            &y.shape()[..2],
        ));
    }
    let xs = reshape(&permute(&x, &[1, 0, 2])?, &[m, bn * k])?;
    let ys = reshape(&y, &[bn * k, n])?;
    Ok(IValue::Tensor(matmul_nd(
        a.op,
        &xs,
        &ys,
        Some((&c, beta)),
        alpha,
    )?))
}

fn addmv(a: &mut Args) -> crate::Result<IValue> {
    let (c, x, v) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
    let (beta, alpha) = (scalar_f64(a.scalar(3)?), scalar_f64(a.scalar(4)?));
    check_dim(a.op, &x, 2, "mat")?;
    check_dim(a.op, &v, 1, "vec")?;
    let v2 = v.as_strided(&[v.shape()[0], 1], &[v.strides()[0], 0], v.storage_offset())?;
    let c2 = if c.dim() == 1 {
        c.as_strided(&[c.shape()[0], 1], &[c.strides()[0], 0], c.storage_offset())?
    } else {
        c
    };
    let out = matmul_nd(a.op, &x, &v2, Some((&c2, beta)), alpha)?;
    Ok(IValue::Tensor(reshape(&out, &[x.shape()[0]])?))
}

/// `addr(self, vec1, vec2, beta, alpha)`: `beta * self + alpha * outer(vec1, vec2)`.
fn addr(a: &mut Args) -> crate::Result<IValue> {
    let (c, x, y) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
    let (beta, alpha) = (scalar_f64(a.scalar(3)?), scalar_f64(a.scalar(4)?));
    check_dim(a.op, &x, 1, "vec1")?;
    check_dim(a.op, &y, 1, "vec2")?;
    let x2 = x.as_strided(&[x.shape()[0], 1], &[x.strides()[0], 0], x.storage_offset())?;
    let y2 = y.as_strided(&[1, y.shape()[0]], &[0, y.strides()[0]], y.storage_offset())?;
    Ok(IValue::Tensor(matmul_nd(
        a.op,
        &x2,
        &y2,
        Some((&c, beta)),
        alpha,
    )?))
}

fn mv(a: &mut Args) -> crate::Result<IValue> {
    let (x, v) = (a.tensor(0)?, a.tensor(1)?);
    check_dim(a.op, &x, 2, "self")?;
    check_dim(a.op, &v, 1, "vec")?;
    Ok(IValue::Tensor(matmul(a.op, &x, &v)?))
}

fn dot(a: &mut Args) -> crate::Result<IValue> {
    let (x, y) = (a.tensor(0)?, a.tensor(1)?);
    check_dim(a.op, &x, 1, "self")?;
    check_dim(a.op, &y, 1, "tensor")?;
    check_size(
        a.op,
        "the number of elements of tensor (of self)",
        x.shape()[0] as i64,
        y.shape()[0] as i64,
    )?;
    Ok(IValue::Tensor(matmul(a.op, &x, &y)?))
}

fn outer(a: &mut Args) -> crate::Result<IValue> {
    let (x, y) = (a.tensor(0)?, a.tensor(1)?);
    check_dim(a.op, &x, 1, "self")?;
    check_dim(a.op, &y, 1, "vec2")?;
    let x2 = x.as_strided(&[x.shape()[0], 1], &[x.strides()[0], 0], x.storage_offset())?;
    let y2 = y.as_strided(&[1, y.shape()[0]], &[0, y.strides()[0]], y.storage_offset())?;
    Ok(IValue::Tensor(matmul_nd(a.op, &x2, &y2, None, 1.0)?))
}

/// `F.linear`: `input @ weight.T + bias` for any leading dims of input.
pub(crate) fn linear(
    op: &str,
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
) -> crate::Result<Tensor> {
    if w.dim() == 1 {
        let out = matmul(op, x, w)?;
        return match bias {
            Some(b) => {
                let (dtype, cd) = matmul_dtypes(op, &out, b)?;
                let o = out.to_dtype(cd)?;
                let res = Tensor::zeros(o.shape(), cd)?;
                dispatch_real_compute!(cd, op, |T| {
                    let bv = b.to_dtype(cd)?;
                    let bview_guard = bv.read::<T>()?;
                    let bview = bview_guard.view();
                    let bb = bview.broadcast(o.shape()).ok_or_else(|| {
                        invalid_argument(
                            op,
                            "bias",
                            format!("must broadcast to the output shape {:?}", o.shape()),
                            format!("{:?}", b.shape()),
                        )
                    })?;
                    let mut rv_guard = res.write::<T>()?;
                    let mut rv = rv_guard.view_mut();
                    ndarray::Zip::from(&mut rv)
                        .and(&o.read::<T>()?.view())
                        .and(&bb)
                        .for_each(|r, &x, &y| *r = x + y);
                    Ok::<(), crate::Error>(())
                })?;
                Ok(res.to_dtype(dtype)?)
            }
            None => Ok(out),
        };
    }
    check_dim(op, w, 2, "weight")?;
    if x.dim() == 0 {
        return Err(rank_mismatch(
            op,
            "input",
            RankRequirement::AtLeast(1),
            x.shape(),
        ));
    }
    if let Some(out) = linear_packed_f32(x, w, bias)? {
        return Ok(out);
    }
    if let Some(out) = linear_few_rows_f32(x, w, bias)? {
        return Ok(out);
    }
    let wt = permute(w, &[1, 0])?;
    let k = x.shape()[x.dim() - 1];
    let lead: Vec<usize> = x.shape()[..x.dim() - 1].to_vec();
    let rows: usize = lead.iter().product();
    // Collapse leading dims into rows (a copy only when they are not uniformly strided).
    let x2 = if x.dim() == 2 {
        x.clone()
    } else {
        reshape(x, &[rows, k])?
    };
    let out = match bias {
        Some(b) => matmul_nd(op, &x2, &wt, Some((b, 1.0)), 1.0)?,
        None => matmul_nd(op, &x2, &wt, None, 1.0)?,
    };
    let mut shape = lead;
    shape.push(w.shape()[0]);
    reshape(&out, &shape)
}

/// Rows of input below which `linear` leaves the product to the gemm crate's matrix-vector
/// path (a packed register tile is at least this many rows tall).
const PACKED_LINEAR_MIN_ROWS: usize = 4;

/// The transposed `out_f x k` float32 weight of `linear` packed as the GEMM's B operand, from
/// the cache on its storage when packed before.
fn packed_linear_weight(
    isa: gemm::Isa,
    w: &Tensor,
) -> crate::Result<std::sync::Arc<gemm::PackedB>> {
    let (out_f, k) = (w.shape()[0], w.shape()[1]);
    let wg = w.read::<f32>()?;
    let ws = slice_of(&wg)?;
    let wt = gemm::MatRef::new(ws, k, out_f, 1, k)
        .ok_or_else(|| shape_err(format!("linear: weight {:?} too small", w.shape())))?;
    Ok(gemm::cached_packed_b(
        isa,
        w.storage(),
        w.storage_offset(),
        &wt,
    ))
}

/// Pack the weight of `linear` into the cache its float32 kernel reads (a module's
/// `prepare`), for weights that kernel would pack: contiguous, float32, 2-D.
pub(crate) fn prepack_linear_weight(w: &Tensor) -> crate::Result<()> {
    let gemm::Backend::Packed(isa) = gemm::backend() else {
        return Ok(());
    };
    if w.dtype() != DType::Float32 || w.dim() != 2 || !w.is_contiguous() || w.numel() == 0 {
        return Ok(());
    }
    packed_linear_weight(isa, w).map(drop)
}

/// `linear` for float32 operands with a contiguous weight: the transposed weight packed once
/// (cached on its storage) and the bias added in the GEMM's output pass. `None` when the
/// operands do not have that form.
fn linear_packed_f32(
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
) -> crate::Result<Option<Tensor>> {
    let (out_f, k) = (w.shape()[0], w.shape()[1]);
    if x.dtype() != DType::Float32
        || w.dtype() != DType::Float32
        || !w.is_contiguous()
        || x.shape()[x.dim() - 1] != k
        || bias.is_some_and(|b| b.dtype() != DType::Float32 || b.dim() != 1 || b.numel() != out_f)
    {
        return Ok(None);
    }
    let lead: Vec<usize> = x.shape()[..x.dim() - 1].to_vec();
    let rows: usize = lead.iter().product();
    let gemm::Backend::Packed(isa) = gemm::backend() else {
        return Ok(None);
    };
    if rows < PACKED_LINEAR_MIN_ROWS || k == 0 || out_f == 0 {
        return Ok(None);
    }
    let xc = reshape(x, &[rows, k])?;
    let packed = packed_linear_weight(isa, w)?;
    let xg = xc.read::<f32>()?;
    let xs = slice_of(&xg)?;
    let xm = gemm::MatRef::new(xs, rows, k, k, 1)
        .ok_or_else(|| shape_err(format!("linear: input {:?} too small", x.shape())))?;
    let bc = bias.map(|b| b.contiguous()).transpose()?;
    let bg = bc.as_ref().map(|b| b.read::<f32>()).transpose()?;
    let bs = bg.as_ref().map(slice_of).transpose()?;
    let mut shape = lead;
    shape.push(out_f);
    let out = Tensor::empty(&shape, DType::Float32)?;
    let mut og = out.write::<f32>()?;
    gemm::sgemm(
        isa,
        rows,
        out_f,
        k,
        gemm::AOperand::Mat(xm),
        gemm::BOperand::Packed(&packed),
        slice_mut_of(&mut og)?,
        out_f,
        &gemm::Epilogue {
            bias: bs.map_or(gemm::Bias::None, gemm::Bias::PerColumn),
            ..gemm::Epilogue::NONE
        },
        true,
    )?;
    Ok(Some(out))
}

/// `linear` for a few rows of float32 input (batch-1 inference): each output row is the
/// row-major weight times the input row, with the bias as its starting value. No GEMM set-up,
/// packing or temporary transposed view, which cost more than the arithmetic at this size.
fn linear_few_rows_f32(
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
) -> crate::Result<Option<Tensor>> {
    let (out_f, k) = (w.shape()[0], w.shape()[1]);
    let rows: usize = x.shape()[..x.dim() - 1].iter().product();
    if x.dtype() != DType::Float32
        || w.dtype() != DType::Float32
        || !w.is_contiguous()
        || !x.is_contiguous()
        || x.shape()[x.dim() - 1] != k
        || rows >= PACKED_LINEAR_MIN_ROWS
        || bias.is_some_and(|b| b.dtype() != DType::Float32 || b.dim() != 1 || b.numel() != out_f)
    {
        return Ok(None);
    }
    let mut shape = x.shape()[..x.dim() - 1].to_vec();
    shape.push(out_f);
    let out = Tensor::zeros(&shape, DType::Float32)?;
    if out_f == 0 {
        return Ok(Some(out));
    }
    {
        let wg = w.read::<f32>()?;
        let ws = slice_of(&wg)?;
        let xg = x.read::<f32>()?;
        let xs = slice_of(&xg)?;
        let bc = bias.map(|b| b.contiguous()).transpose()?;
        let bg = bc.as_ref().map(|b| b.read::<f32>()).transpose()?;
        let bs = bg.as_ref().map(slice_of).transpose()?;
        let mut og = out.write::<f32>()?;
        let os = slice_mut_of(&mut og)?;
        for (r, o_row) in os.chunks_exact_mut(out_f).enumerate() {
            if let Some(b) = bs {
                o_row.copy_from_slice(b);
            }
            if let Some(x_row) = xs.get(r * k..(r + 1) * k) {
                super::kernels::vmath::matvec_split(ws, out_f, k, x_row, o_row, true);
            }
        }
    }
    Ok(Some(out))
}

fn linear_op(a: &mut Args) -> crate::Result<IValue> {
    let (x, w, b) = (a.tensor(0)?, a.tensor(1)?, a.opt_tensor(2)?);
    Ok(IValue::Tensor(linear(a.op, &x, &w, b.as_ref())?))
}

fn bilinear(a: &mut Args) -> crate::Result<IValue> {
    let (x1, x2, w, b) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?, a.opt_tensor(3)?);
    check_dim(a.op, &w, 3, "weight")?;
    let (o, i, j) = (w.shape()[0], w.shape()[1], w.shape()[2]);
    if x1.dim() == 0
        || x2.dim() == 0
        || x1.shape()[x1.dim() - 1] != i
        || x2.shape()[x2.dim() - 1] != j
    {
        return Err(invalid_argument(
            a.op,
            "input1 and input2",
            format!("must end in sizes {i} and {j} (weight {:?})", w.shape()),
            format!("shapes {:?} and {:?}", x1.shape(), x2.shape()),
        ));
    }
    let lead: Vec<usize> = x1.shape()[..x1.dim() - 1].to_vec();
    let rows: usize = lead.iter().product();
    let x1r = reshape(&x1, &[rows, i])?;
    let x2r = reshape(&x2, &[rows, j])?;
    let mut out = einsum_tensors(a.op, "bi,oij,bj->bo", &[x1r, w, x2r])?;
    if let Some(b) = b {
        out = add_broadcast(a.op, &out, &b)?;
    }
    let mut shape = lead;
    shape.push(o);
    Ok(IValue::Tensor(reshape(&out, &shape)?))
}

/// `x + y` with broadcasting, in `x`'s dtype (float operands).
fn add_broadcast(op: &str, x: &Tensor, y: &Tensor) -> crate::Result<Tensor> {
    let cd = compute_dtype(op, x.dtype())?;
    let shape = crate::tensor::broadcast_shapes(x.shape(), y.shape())?;
    let out = Tensor::zeros(&shape, cd)?;
    out.copy_from(x)?;
    let yc = y.to_dtype(cd)?;
    dispatch_real_compute!(cd, op, |T| {
        let yv_guard = yc.read::<T>()?;
        let yv = yv_guard.view();
        let yb = yv
            .broadcast(shape.as_slice())
            .ok_or_else(|| shape_err("broadcast failed"))?;
        let mut ov_guard = out.write::<T>()?;
        let mut ov = ov_guard.view_mut();
        ndarray::Zip::from(&mut ov)
            .and(&yb)
            .for_each(|o, &v| *o += v);
        Ok::<(), crate::Error>(())
    })?;
    out.to_dtype(x.dtype())
}

fn tensordot(a: &mut Args) -> crate::Result<IValue> {
    let (x, y) = (a.tensor(0)?, a.tensor(1)?);
    let (dx, dy) = (a.int_list(2)?, a.int_list(3)?);
    check_size(
        a.op,
        "the length of dims_other (of dims_self)",
        dx.len() as i64,
        dy.len() as i64,
    )?;
    let wrap = |ds: &[i64], n: usize| -> crate::Result<Vec<usize>> {
        ds.iter()
            .map(|&d| Ok(crate::tensor::wrap_dim(d, n)?))
            .collect()
    };
    let (cx, cy) = (wrap(&dx, x.dim())?, wrap(&dy, y.dim())?);
    for (&i, &j) in cx.iter().zip(&cy) {
        if x.shape()[i] != y.shape()[j] {
            return Err(size_mismatch(
                a.op,
                format!("other.size({j}) (contracted with self.size({i}))"),
                x.shape()[i] as i64,
                y.shape()[j] as i64,
            ));
        }
    }
    let fx: Vec<usize> = (0..x.dim()).filter(|d| !cx.contains(d)).collect();
    let fy: Vec<usize> = (0..y.dim()).filter(|d| !cy.contains(d)).collect();
    let ksz: usize = cx.iter().map(|&d| x.shape()[d]).product();
    let msz: usize = fx.iter().map(|&d| x.shape()[d]).product();
    let nsz: usize = fy.iter().map(|&d| y.shape()[d]).product();
    let xp = reshape(&permute(&x, &[fx.clone(), cx].concat())?, &[msz, ksz])?;
    let yp = reshape(&permute(&y, &[cy, fy.clone()].concat())?, &[ksz, nsz])?;
    let out = matmul_nd(a.op, &xp, &yp, None, 1.0)?;
    let shape: Vec<usize> = fx
        .iter()
        .map(|&d| x.shape()[d])
        .chain(fy.iter().map(|&d| y.shape()[d]))
        .collect();
    Ok(IValue::Tensor(reshape(&out, &shape)?))
}

/// Sum a compute-dtype tensor over `dims` (removed from the result).
fn sum_dims(op: &str, t: &Tensor, dims: &[usize]) -> crate::Result<Tensor> {
    if dims.is_empty() {
        return Ok(t.clone());
    }
    let keep: Vec<usize> = (0..t.dim()).filter(|d| !dims.contains(d)).collect();
    let perm: Vec<usize> = keep.iter().chain(dims.iter()).copied().collect();
    let p = permute(t, &perm)?.contiguous()?;
    let inner: usize = dims.iter().map(|&d| t.shape()[d]).product();
    let shape: Vec<usize> = keep.iter().map(|&d| t.shape()[d]).collect();
    let out = Tensor::zeros(&shape, t.dtype())?;
    dispatch_real_compute!(t.dtype(), op, |T| {
        let src_guard = p.read::<T>()?;
        let src = slice_of(&src_guard)?;
        let mut dst_guard = out.write::<T>()?;
        let dst = slice_mut_of(&mut dst_guard)?;
        if inner > 0 {
            for (o, chunk) in dst.iter_mut().zip(src.chunks(inner)) {
                *o = chunk.iter().copied().sum();
            }
        }
        Ok::<(), crate::Error>(())
    })?;
    Ok(out)
}

/// One einsum operand during evaluation: a compute-dtype tensor and the label of each dim.
struct Labeled {
    t: Tensor,
    labels: Vec<u32>,
}

/// Parse one side of an einsum equation into labels; `...` becomes `ell` labels starting at
/// `ELLIPSIS_BASE` (right-aligned so they broadcast).
const ELLIPSIS_BASE: u32 = 1000;

fn parse_term(op: &str, term: &str, ndim: Option<usize>, ell: usize) -> crate::Result<Vec<u32>> {
    let term = term.trim();
    let mut labels = Vec::new();
    let mut rest = term;
    let mut seen_ellipsis = false;
    while let Some(c) = rest.chars().next() {
        if rest.starts_with("...") {
            if seen_ellipsis {
                return Err(invalid_argument(
                    op,
                    "equation",
                    "must have at most one ellipsis per term",
                    format!("'{term}'"),
                ));
            }
            seen_ellipsis = true;
            let n = match ndim {
                Some(nd) => {
                    let named = term
                        .replace("...", "")
                        .chars()
                        .filter(|c| !c.is_whitespace())
                        .count();
                    nd.checked_sub(named).ok_or_else(|| {
                        invalid_argument(
                            op,
                            "equation",
                            format!("must have at most {nd} subscripts (the operand's dims)"),
                            format!("'{term}'"),
                        )
                    })?
                }
                None => ell,
            };
            for i in (ell - n.min(ell))..ell {
                labels.push(ELLIPSIS_BASE + i as u32);
            }
            rest = &rest[3..];
            continue;
        }
        if c.is_ascii_alphabetic() {
            labels.push(c as u32);
        } else if !c.is_whitespace() {
            return Err(invalid_argument(
                op,
                "equation",
                "must use letters as subscripts",
                format!("'{c}'"),
            ));
        }
        rest = &rest[c.len_utf8()..];
    }
    Ok(labels)
}

/// Take the diagonal for labels repeated within one operand.
fn dedup_labels(x: Labeled) -> crate::Result<Labeled> {
    let mut labels: Vec<u32> = Vec::new();
    let mut shape: Vec<usize> = Vec::new();
    let mut strides: Vec<isize> = Vec::new();
    for (i, &l) in x.labels.iter().enumerate() {
        if let Some(p) = labels.iter().position(|&m| m == l) {
            if shape[p] != x.t.shape()[i] {
                return Err(size_mismatch(
                    "einsum",
                    format!("the size of dim {i} (its subscript repeats an earlier one)"),
                    shape[p] as i64,
                    x.t.shape()[i] as i64,
                ));
            }
            strides[p] += x.t.strides()[i];
        } else {
            labels.push(l);
            shape.push(x.t.shape()[i]);
            strides.push(x.t.strides()[i]);
        }
    }
    let t = x.t.as_strided(&shape, &strides, x.t.storage_offset())?;
    Ok(Labeled { t, labels })
}

/// `x` summed over the dims whose label is in `labels` (those labels removed).
fn sum_out_labels(op: &str, x: Labeled, labels: &[u32]) -> crate::Result<Labeled> {
    let dims: Vec<usize> = (0..x.labels.len())
        .filter(|&d| labels.contains(&x.labels[d]))
        .collect();
    if dims.is_empty() {
        return Ok(x);
    }
    let t = sum_dims(op, &x.t, &dims)?;
    let labels = x
        .labels
        .iter()
        .enumerate()
        .filter(|(d, _)| !dims.contains(d))
        .map(|(_, &l)| l)
        .collect();
    Ok(Labeled { t, labels })
}

/// The size of label `l` in `x` (1 when `x` lacks it).
fn label_size(x: &Labeled, l: u32) -> usize {
    x.labels
        .iter()
        .position(|&m| m == l)
        .map(|p| x.t.shape()[p])
        .unwrap_or(1)
}

/// Contract two operands over the labels not needed later (`keep`).
fn contract_pair(op: &str, a: Labeled, b: Labeled, keep: &[u32]) -> crate::Result<Labeled> {
    // A contracted label of size 1 on one side broadcasts against the other side's size, as
    // in PyTorch's einsum: `sum_j a[.., 0] b[j, ..]` is `a[.., 0] * sum_j b[j, ..]`, so the
    // label is summed out of both sides first.
    let broadcast: Vec<u32> = a
        .labels
        .iter()
        .copied()
        .filter(|l| !keep.contains(l) && b.labels.contains(l))
        .filter(|&l| {
            let (sa, sb) = (label_size(&a, l), label_size(&b, l));
            sa != sb && (sa == 1 || sb == 1)
        })
        .collect();
    let a = sum_out_labels(op, a, &broadcast)?;
    let b = sum_out_labels(op, b, &broadcast)?;
    let in_a = |l: &u32| a.labels.contains(l);
    let in_b = |l: &u32| b.labels.contains(l);
    let mut batch = Vec::new();
    let mut left = Vec::new();
    let mut right = Vec::new();
    let mut contracted = Vec::new();
    for &l in &a.labels {
        if in_b(&l) {
            if keep.contains(&l) {
                batch.push(l);
            } else {
                contracted.push(l);
            }
        } else {
            left.push(l);
        }
    }
    for &l in &b.labels {
        if !in_a(&l) {
            right.push(l);
        }
    }
    let pos = |x: &Labeled, l: u32| x.labels.iter().position(|&m| m == l).unwrap_or(0);
    // a -> [batch..., left, contracted], b -> [batch..., contracted, right]
    let ap: Vec<usize> = batch
        .iter()
        .chain(&left)
        .chain(&contracted)
        .map(|&l| pos(&a, l))
        .collect();
    let bp: Vec<usize> = batch
        .iter()
        .chain(&contracted)
        .chain(&right)
        .map(|&l| pos(&b, l))
        .collect();
    let at = permute(&a.t, &ap)?;
    let bt = permute(&b.t, &bp)?;
    let bshape_a: Vec<usize> = batch.iter().map(|&l| label_size(&a, l)).collect();
    let bshape_b: Vec<usize> = batch.iter().map(|&l| label_size(&b, l)).collect();
    let m: usize = left.iter().map(|&l| label_size(&a, l)).product();
    let n: usize = right.iter().map(|&l| label_size(&b, l)).product();
    let ka: usize = contracted.iter().map(|&l| label_size(&a, l)).product();
    let kb: usize = contracted.iter().map(|&l| label_size(&b, l)).product();
    if ka != kb {
        return Err(size_mismatch(
            op,
            "the contracted size of the second operand (of the first)",
            ka as i64,
            kb as i64,
        ));
    }
    let a3 = reshape(&at, &[bshape_a.clone(), vec![m, ka]].concat())?;
    let b3 = reshape(&bt, &[bshape_b.clone(), vec![kb, n]].concat())?;
    let out = dispatch_real_compute!(a3.dtype(), op, |T| batched_matmul_t::<T>(
        &a3,
        &b3,
        None,
        T::one()
    ))?;
    let bshape: Vec<usize> = out.shape()[..batch.len()].to_vec();
    let full: Vec<usize> = bshape
        .into_iter()
        .chain(left.iter().map(|&l| label_size(&a, l)))
        .chain(right.iter().map(|&l| label_size(&b, l)))
        .collect();
    let t = reshape(&out, &full)?;
    let labels = batch.into_iter().chain(left).chain(right).collect();
    Ok(Labeled { t, labels })
}

/// Evaluate an einsum equation over float tensors of one dtype.
pub(crate) fn einsum_tensors(op: &str, equation: &str, ts: &[Tensor]) -> crate::Result<Tensor> {
    let Some(first) = ts.first() else {
        return Err(invalid_argument(op, "operands", "must be non-empty", "[]"));
    };
    let dtype = first.dtype();
    let cd = compute_dtype(op, dtype)?;
    let (lhs, rhs) = match equation.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (equation, None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != ts.len() {
        return Err(size_mismatch(
            op,
            format!("the number of operands (terms of '{equation}')"),
            terms.len() as i64,
            ts.len() as i64,
        ));
    }
    let mut ell = 0usize;
    for (term, t) in terms.iter().zip(ts) {
        if term.contains("...") {
            let named = term
                .replace("...", "")
                .chars()
                .filter(|c| !c.is_whitespace())
                .count();
            ell = ell.max(t.dim().saturating_sub(named));
        }
    }
    let mut ops: Vec<Labeled> = Vec::new();
    // Label occurrence counts over the raw terms (a label repeated in one term is a diagonal and
    // still counts twice for the implicit output).
    let mut counts: std::collections::BTreeMap<u32, usize> = Default::default();
    for (term, t) in terms.iter().zip(ts) {
        let labels = parse_term(op, term, Some(t.dim()), ell)?;
        if labels.len() != t.dim() {
            return Err(size_mismatch(
                op,
                format!("the number of subscripts in '{term}' (the operand's dims)"),
                t.dim() as i64,
                labels.len() as i64,
            ));
        }
        for &l in &labels {
            *counts.entry(l).or_default() += 1;
        }
        ops.push(dedup_labels(Labeled {
            t: t.to_dtype(cd)?,
            labels,
        })?);
    }
    let out_labels: Vec<u32> = match rhs {
        Some(r) => parse_term(op, r, None, ell)?,
        None => {
            let mut v: Vec<u32> = (0..ell as u32).map(|i| ELLIPSIS_BASE + i).collect();
            v.retain(|l| counts.contains_key(l));
            v.extend(
                counts
                    .iter()
                    .filter(|(&l, &c)| c == 1 && l < ELLIPSIS_BASE)
                    .map(|(&l, _)| l),
            );
            v
        }
    };
    // Sum out labels that appear in one operand only and not in the output.
    let all: Vec<Vec<u32>> = ops.iter().map(|o| o.labels.clone()).collect();
    let mut reduced = Vec::new();
    for (i, o) in ops.into_iter().enumerate() {
        let own: Vec<u32> = o
            .labels
            .iter()
            .copied()
            .filter(|l| {
                !out_labels.contains(l)
                    && !all
                        .iter()
                        .enumerate()
                        .any(|(j, ls)| j != i && ls.contains(l))
            })
            .collect();
        reduced.push(sum_out_labels(op, o, &own)?);
    }
    let mut iter = reduced.into_iter();
    let mut acc = iter
        .next()
        .ok_or_else(|| value_err(format!("{op}: no operands")))?;
    let rest: Vec<Labeled> = iter.collect();
    for (i, b) in rest.iter().enumerate() {
        let mut keep: Vec<u32> = out_labels.clone();
        for later in &rest[i + 1..] {
            keep.extend(&later.labels);
        }
        let b = Labeled {
            t: b.t.clone(),
            labels: b.labels.clone(),
        };
        acc = contract_pair(op, acc, b, &keep)?;
    }
    // Remaining labels not in the output (single-operand contraction like "ii->").
    let extra: Vec<usize> = acc
        .labels
        .iter()
        .enumerate()
        .filter(|(_, l)| !out_labels.contains(l))
        .map(|(d, _)| d)
        .collect();
    let t = sum_dims(op, &acc.t, &extra)?;
    let labels: Vec<u32> = acc
        .labels
        .iter()
        .enumerate()
        .filter(|(d, _)| !extra.contains(d))
        .map(|(_, &l)| l)
        .collect();
    let perm = out_labels
        .iter()
        .map(|l| {
            labels.iter().position(|m| m == l).ok_or_else(|| {
                invalid_argument(
                    op,
                    "equation",
                    "must have output subscripts that appear in the inputs",
                    format!("'{equation}'"),
                )
            })
        })
        .collect::<crate::Result<Vec<usize>>>()?;
    let out = permute(&t, &perm)?.contiguous()?;
    out.to_dtype(dtype)
}

fn einsum(a: &mut Args) -> crate::Result<IValue> {
    let eq = a.str(0)?;
    let ts = a.tensor_list(1)?;
    Ok(IValue::Tensor(einsum_tensors(a.op, &eq, &ts)?))
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::mm", mm);
    r.add("aten::bmm", bmm);
    r.add("aten::matmul", matmul_op);
    r.add("aten::addmm", addmm);
    r.add("aten::addmm_", |a| {
        let r = addmm(a)?;
        a.write_outs(0, r)
    });
    r.add("aten::baddbmm", baddbmm);
    r.add("aten::addbmm", addbmm);
    r.add("aten::addmv", addmv);
    r.add("aten::addr", addr);
    // the in-place twins: the result written into self (whose shape it must have)
    r.add("aten::baddbmm_", |a| {
        let r = baddbmm(a)?;
        a.write_outs(0, r)
    });
    r.add("aten::addbmm_", |a| {
        let r = addbmm(a)?;
        a.write_outs(0, r)
    });
    r.add("aten::addmv_", |a| {
        let r = addmv(a)?;
        a.write_outs(0, r)
    });
    r.add("aten::addr_", |a| {
        let r = addr(a)?;
        a.write_outs(0, r)
    });
    r.add("aten::mv", mv);
    r.add_all(&["aten::dot", "aten::vdot"], dot);
    r.add_all(&["aten::outer", "aten::ger"], outer);
    r.add("aten::linear", linear_op);
    r.add("aten::bilinear", bilinear);
    r.add("aten::tensordot", tensordot);
    r.add("aten::einsum", einsum);
}
