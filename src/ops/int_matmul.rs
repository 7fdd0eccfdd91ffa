//! Matrix products of integer tensors (`torch.matmul` / `mm` / `bmm` / `addmm` on int8..int64
//! and uint8): exact, wrapping like the C++ arithmetic PyTorch accumulates in (integers have no
//! rounding, so products and sums modulo 2^bits match whatever the accumulation order).

use crate::tensor::{broadcast_shapes, DType, Tensor};

fn err(msg: impl Into<String>) -> crate::Error {
    crate::error::RuntimeError::Other(msg.into()).into()
}

/// Whether `matmul_nd` should come here.
pub(crate) fn is_integer(d: DType) -> bool {
    matches!(
        d,
        DType::UInt8 | DType::Int8 | DType::Int16 | DType::Int32 | DType::Int64
    )
}

/// `init_scale * init + scale * (a @ b)` for operands [.., n, k] and [.., k, m] (batch dims
/// broadcast), in the operands' integer dtype.
pub(crate) fn integer_matmul(
    op: &str,
    a: &Tensor,
    b: &Tensor,
    init: Option<(&Tensor, f64)>,
    scale: f64,
) -> crate::Result<Tensor> {
    let dtype = a.dtype();
    if b.dtype() != dtype {
        return Err(err(format!(
            "{op}: expected both operands to have the same dtype, but got {} and {}",
            dtype,
            b.dtype()
        )));
    }
    let (ad, bd) = (a.dim(), b.dim());
    if ad < 2 || bd < 2 {
        return Err(err(format!("{op}: operands must be matrices")));
    }
    let (n, k) = (a.shape()[ad - 2], a.shape()[ad - 1]);
    let (k2, m) = (b.shape()[bd - 2], b.shape()[bd - 1]);
    if k != k2 {
        return Err(crate::tensor::TensorError::MatmulShapes {
            op: op.to_string(),
            mat1: [n, k],
            mat2: [k2, m],
        }
        .into());
    }
    let batch = broadcast_shapes(&a.shape()[..ad - 2], &b.shape()[..bd - 2])?.to_vec();
    let full = |t: &Tensor, r: usize, c: usize| -> crate::Result<Vec<i64>> {
        let mut s = batch.clone();
        s.extend([r, c]);
        super::shape::expand_to(t, &s)?.to_vec::<i64>()
    };
    let (av, bv) = (full(a, n, k)?, full(b, k, m)?);
    let count: usize = batch.iter().product();
    let mut res = vec![0i64; count * n * m];
    for bi in 0..count {
        let (am, bm) = (&av[bi * n * k..][..n * k], &bv[bi * k * m..][..k * m]);
        let om = &mut res[bi * n * m..][..n * m];
        for i in 0..n {
            for p in 0..k {
                let x = am[i * k + p];
                for j in 0..m {
                    om[i * m + j] = om[i * m + j].wrapping_add(x.wrapping_mul(bm[p * m + j]));
                }
            }
        }
    }
    let alpha = scale as i64;
    if alpha != 1 {
        res.iter_mut().for_each(|v| *v = v.wrapping_mul(alpha));
    }
    if let Some((c, beta)) = init {
        let mut s = batch.clone();
        s.extend([n, m]);
        let cv = super::shape::expand_to(c, &s)?.to_vec::<i64>()?;
        let beta = beta as i64;
        for (v, c) in res.iter_mut().zip(cv) {
            *v = v.wrapping_add(c.wrapping_mul(beta));
        }
    }
    let mut shape = batch;
    shape.extend([n, m]);
    Tensor::from_vec(res, &shape)?.to_dtype(dtype)
}
