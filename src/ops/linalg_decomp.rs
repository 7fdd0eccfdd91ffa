//! Kernels: orthogonal decompositions and what is built on them — `linalg_qr` (Householder, with
//! LAPACK's `geqrf` reflector convention, so Q and R match PyTorch's signs), `linalg_svd` / `svd`
//! / `linalg_svdvals` (one-sided Jacobi), `linalg_eigh` / `linalg_eigvalsh` (cyclic Jacobi),
//! `linalg_pinv` / `pinverse` (through the SVD or, for Hermitian input, the eigendecomposition,
//! with ATen's tolerance rules), `linalg_matrix_rank` (the same tolerance rules over the singular
//! values or |eigenvalues|) and `matrix_exp` (scaling and squaring). Batched over leading
//! dimensions; float32/float64, computed in f64 and rounded once to the dtype.
//!
//! The signs of singular vectors and eigenvectors are implementation-defined (PyTorch documents
//! them as such); these kernels return Jacobi's, which can differ from LAPACK's by a sign per
//! vector.

use super::{Args, Registry};
use crate::ops::kernels::{
    check_rank, invalid_argument, shape_mismatch, size_mismatch, unsupported_feature, wrong_dtype,
};
use crate::tensor::RankRequirement;
use crate::tensor::{DType, Tensor};
use crate::values::{IValue, Tuple};

type R = crate::Result<IValue>;

/// A batch of `m x n` matrices in f64, row-major.
pub(super) struct Batch {
    pub(super) data: Vec<f64>,
    pub(super) batch: Vec<usize>,
    pub(super) m: usize,
    pub(super) n: usize,
    pub(super) dtype: DType,
}

impl Batch {
    pub(super) fn count(&self) -> usize {
        self.batch.iter().product()
    }
    pub(super) fn mat(&self, b: usize) -> &[f64] {
        let size = self.m * self.n;
        &self.data[b * size..(b + 1) * size]
    }
    /// `batch ++ dims`: the shape of a result with per-matrix shape `dims`.
    pub(super) fn shape(&self, dims: &[usize]) -> Vec<usize> {
        let mut s = self.batch.clone();
        s.extend_from_slice(dims);
        s
    }
}

/// `x` as a batch of matrices; `op` names the function in PyTorch's messages (`linalg.svd`).
pub(super) fn matrices(op: &str, x: &Tensor, square: bool) -> crate::Result<Batch> {
    let dtype = match x.dtype() {
        d @ (DType::Float32 | DType::Float64) => d,
        d if d.is_complex() => {
            return Err(unsupported_feature(op, format!("a {d} input (complex)")))
        }
        d => {
            return Err(wrong_dtype(
                op,
                "A",
                "a floating point or complex tensor",
                d,
            ))
        }
    };
    let nd = x.dim();
    check_rank(op, "A", RankRequirement::AtLeast(2), x.shape())?;
    let (m, n) = (x.shape()[nd - 2], x.shape()[nd - 1]);
    if square && m != n {
        return Err(size_mismatch(
            op,
            "A.size(-1) (square matrices: A.size(-2))",
            m as i64,
            n as i64,
        ));
    }
    Ok(Batch {
        data: x.to_vec::<f64>()?,
        batch: x.shape()[..nd - 2].to_vec(),
        m,
        n,
        dtype,
    })
}

pub(super) fn tensor(data: Vec<f64>, shape: &[usize], dtype: DType) -> crate::Result<Tensor> {
    Tensor::from_vec(data, shape)?.to_dtype(dtype)
}

pub(super) fn tuple(items: Vec<Tensor>) -> IValue {
    IValue::Tuple(Tuple::new(items.into_iter().map(IValue::Tensor).collect()))
}

/// Row-major `r x c` transpose.
pub(super) fn transpose(a: &[f64], r: usize, c: usize) -> Vec<f64> {
    let mut t = vec![0.0; r * c];
    for i in 0..r {
        for j in 0..c {
            t[j * r + i] = a[i * c + j];
        }
    }
    t
}

/// Householder QR of a row-major `m x n` matrix as LAPACK's `geqrf` + `orgqr`: reflector `j`
/// maps column `j` below the diagonal to `beta e_j` with `beta = -sign(alpha) ||x||` (no
/// reflection when the subcolumn is already zero). Returns (Q with `q_cols` columns, R as the
/// upper-trapezoidal `m x n` factor).
fn householder_qr(a: &[f64], m: usize, n: usize, q_cols: usize) -> (Vec<f64>, Vec<f64>) {
    let mut r = a.to_vec();
    let k = m.min(n);
    let mut reflectors: Vec<(Vec<f64>, f64)> = Vec::with_capacity(k);
    for j in 0..k {
        let alpha = r[j * n + j];
        let tail_norm = (j + 1..m)
            .map(|i| r[i * n + j] * r[i * n + j])
            .sum::<f64>()
            .sqrt();
        if tail_norm == 0.0 {
            reflectors.push((Vec::new(), 0.0));
            continue;
        }
        let beta = -alpha.hypot(tail_norm).copysign(alpha);
        let tau = (beta - alpha) / beta;
        // v = [1, x[1..] / (alpha - beta)]
        let mut v = vec![1.0; m - j];
        for i in j + 1..m {
            v[i - j] = r[i * n + j] / (alpha - beta);
        }
        // apply H = I - tau v v^T to the trailing columns
        for c in j..n {
            let dot: f64 = (j..m).map(|i| v[i - j] * r[i * n + c]).sum();
            for i in j..m {
                r[i * n + c] -= tau * v[i - j] * dot;
            }
        }
        for i in j + 1..m {
            r[i * n + j] = 0.0;
        }
        reflectors.push((v, tau));
    }
    // Q = H_0 H_1 ... H_{k-1} applied to the first q_cols columns of the identity
    let mut q = vec![0.0; m * q_cols];
    for i in 0..m.min(q_cols) {
        q[i * q_cols + i] = 1.0;
    }
    for (j, (v, tau)) in reflectors.iter().enumerate().rev() {
        if *tau == 0.0 {
            continue;
        }
        for c in 0..q_cols {
            let dot: f64 = (j..m).map(|i| v[i - j] * q[i * q_cols + c]).sum();
            for i in j..m {
                q[i * q_cols + c] -= tau * v[i - j] * dot;
            }
        }
    }
    (q, r)
}

fn linalg_qr(args: &mut Args<'_>) -> R {
    let a = matrices("linalg.qr", &args.tensor(0)?, false)?;
    let mode = args.str(1)?;
    let (m, n) = (a.m, a.n);
    let k = m.min(n);
    let (q_cols, r_rows, want_q) = match &*mode {
        "reduced" => (k, k, true),
        "complete" => (m, m, true),
        "r" => (k, k, false),
        other => {
            return Err(invalid_argument(
                "linalg.qr",
                "mode",
                "must be one of 'reduced' (default), 'r', or 'complete'",
                format!("'{other}'"),
            ))
        }
    };
    let (mut qs, mut rs) = (Vec::new(), Vec::new());
    for b in 0..a.count() {
        let (q, r) = householder_qr(a.mat(b), m, n, q_cols);
        qs.extend(q);
        rs.extend_from_slice(&r[..r_rows * n]);
    }
    let r = tensor(rs, &a.shape(&[r_rows, n]), a.dtype)?;
    let q = if want_q {
        tensor(qs, &a.shape(&[m, q_cols]), a.dtype)?
    } else {
        Tensor::zeros(&[0], a.dtype)?
    };
    Ok(tuple(vec![q, r]))
}

/// The thin SVD of a row-major `m x n` matrix with `m >= n` by one-sided (Hestenes) Jacobi:
/// column pairs are rotated until orthogonal to working precision. Returns (U `m x n`, S
/// descending, V `n x n`); columns of U for zero singular values are left zero (see
/// [`complete_orthonormal`]).
fn jacobi_svd_tall(a: &[f64], m: usize, n: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    // column-major copies make the pair updates contiguous
    let mut cols: Vec<Vec<f64>> = (0..n)
        .map(|j| (0..m).map(|i| a[i * n + j]).collect())
        .collect();
    let mut v: Vec<Vec<f64>> = (0..n)
        .map(|j| (0..n).map(|i| f64::from(u8::from(i == j))).collect())
        .collect();
    const MAX_SWEEPS: usize = 80;
    for _ in 0..MAX_SWEEPS {
        let mut rotated = false;
        for p in 0..n {
            for q in p + 1..n {
                let alpha: f64 = cols[p].iter().map(|x| x * x).sum();
                let beta: f64 = cols[q].iter().map(|x| x * x).sum();
                let gamma: f64 = cols[p].iter().zip(&cols[q]).map(|(x, y)| x * y).sum();
                if gamma == 0.0 || gamma.abs() <= f64::EPSILON * (alpha * beta).sqrt() {
                    continue;
                }
                rotated = true;
                let zeta = (beta - alpha) / (2.0 * gamma);
                let t = zeta.signum() / (zeta.abs() + (1.0 + zeta * zeta).sqrt());
                let t = if zeta == 0.0 { 1.0 } else { t };
                let c = 1.0 / (1.0 + t * t).sqrt();
                let s = c * t;
                rotate(&mut cols, p, q, c, s);
                rotate(&mut v, p, q, c, s);
            }
        }
        if !rotated {
            break;
        }
    }
    let norms: Vec<f64> = cols
        .iter()
        .map(|c| c.iter().map(|x| x * x).sum::<f64>().sqrt())
        .collect();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&i, &j| norms[j].total_cmp(&norms[i]));
    let s: Vec<f64> = order.iter().map(|&j| norms[j]).collect();
    let s_max = s.first().copied().unwrap_or(0.0);
    let mut u = vec![0.0; m * n];
    let mut vm = vec![0.0; n * n];
    for (k, &j) in order.iter().enumerate() {
        // a column that is rounding noise relative to the largest has no direction
        if norms[j] > s_max * f64::EPSILON * (m.max(n) as f64) && norms[j] > 0.0 {
            for i in 0..m {
                u[i * n + k] = cols[j][i] / norms[j];
            }
        }
        for i in 0..n {
            vm[i * n + k] = v[j][i];
        }
    }
    (u, s, vm)
}

fn rotate(cols: &mut [Vec<f64>], p: usize, q: usize, c: f64, s: f64) {
    let (lo, hi) = cols.split_at_mut(q);
    for (x, y) in lo[p].iter_mut().zip(hi[0].iter_mut()) {
        let (xp, xq) = (*x, *y);
        *x = c * xp - s * xq;
        *y = s * xp + c * xq;
    }
}

/// Widen a row-major `rows x have` matrix with orthonormal (or zero) columns to `rows x want`
/// orthonormal columns: zero columns and the new ones are filled by Gram-Schmidt (twice, for
/// orthogonality in floating point) over the standard basis.
fn complete_orthonormal(a: &[f64], rows: usize, have: usize, want: usize) -> Vec<f64> {
    let mut cols: Vec<Vec<f64>> = (0..want)
        .map(|j| {
            (0..rows)
                .map(|i| if j < have { a[i * have + j] } else { 0.0 })
                .collect()
        })
        .collect();
    let is_set: Vec<bool> = cols.iter().map(|c| c.iter().any(|&x| x != 0.0)).collect();
    let mut candidate = 0;
    for j in 0..want {
        if is_set[j] {
            continue;
        }
        while candidate < rows {
            let mut v = vec![0.0; rows];
            v[candidate] = 1.0;
            candidate += 1;
            for _ in 0..2 {
                for (k, c) in cols.iter().enumerate() {
                    if k == j || (!is_set[k] && k > j) {
                        continue;
                    }
                    let d: f64 = c.iter().zip(&v).map(|(x, y)| x * y).sum();
                    v.iter_mut().zip(c).for_each(|(x, y)| *x -= d * y);
                }
            }
            let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
            if norm > 0.5 {
                cols[j] = v.iter().map(|x| x / norm).collect();
                break;
            }
        }
    }
    let mut out = vec![0.0; rows * want];
    for (j, c) in cols.iter().enumerate() {
        for i in 0..rows {
            out[i * want + j] = c[i];
        }
    }
    out
}

/// One matrix's SVD: (U `m x u_cols`, S (`min(m, n)`), Vh `vh_rows x n`), with `full` giving
/// square U and Vh.
pub(super) fn svd_of(a: &[f64], m: usize, n: usize, full: bool) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let k = m.min(n);
    // Jacobi works on the tall orientation: the SVD of A^T swaps U and V.
    let (u, s, v) = if m >= n {
        jacobi_svd_tall(a, m, n)
    } else {
        let (u_t, s, v_t) = jacobi_svd_tall(&transpose(a, m, n), n, m);
        (v_t, s, u_t)
    };
    // here u is m x k and v is n x k (columns may be zero for zero singular values)
    let (u_cols, v_cols) = if full { (m, n) } else { (k, k) };
    let u = complete_orthonormal(&u, m, k, u_cols);
    let v = complete_orthonormal(&v, n, k, v_cols);
    (u, s, transpose(&v, n, v_cols))
}

fn check_cpu_driver(args: &Args<'_>, i: usize, op: &str) -> crate::Result<()> {
    if args.is_none(i) {
        Ok(())
    } else {
        Err(invalid_argument(
            op,
            "driver",
            "must be None on CPU (cuSOLVER drivers are CUDA-only)",
            format!("{:?}", args.get(i)?),
        ))
    }
}

/// (U, S, Vh) over the batch.
fn svd_batch(a: &Batch, full: bool) -> crate::Result<(Tensor, Tensor, Tensor)> {
    let (m, n) = (a.m, a.n);
    let k = m.min(n);
    let (u_cols, vh_rows) = if full { (m, n) } else { (k, k) };
    let (mut us, mut ss, mut vhs) = (Vec::new(), Vec::new(), Vec::new());
    for b in 0..a.count() {
        let (u, s, vh) = svd_of(a.mat(b), m, n, full);
        us.extend(u);
        ss.extend(s);
        vhs.extend(vh);
    }
    Ok((
        tensor(us, &a.shape(&[m, u_cols]), a.dtype)?,
        tensor(ss, &a.shape(&[k]), a.dtype)?,
        tensor(vhs, &a.shape(&[vh_rows, n]), a.dtype)?,
    ))
}

/// The singular values of one row-major `m x n` matrix, descending.
pub(crate) fn matrix_singular_values(a: &[f64], m: usize, n: usize) -> Vec<f64> {
    if m >= n {
        jacobi_svd_tall(a, m, n).1
    } else {
        jacobi_svd_tall(&transpose(a, m, n), n, m).1
    }
}

fn singular_values(a: &Batch) -> Vec<f64> {
    let mut ss = Vec::new();
    for b in 0..a.count() {
        let (m, n) = (a.m, a.n);
        let (_, s, _) = if m >= n {
            jacobi_svd_tall(a.mat(b), m, n)
        } else {
            jacobi_svd_tall(&transpose(a.mat(b), m, n), n, m)
        };
        ss.extend(s);
    }
    ss
}

fn linalg_svd(args: &mut Args<'_>) -> R {
    check_cpu_driver(args, 2, "torch.linalg.svd")?;
    let a = matrices("linalg.svd", &args.tensor(0)?, false)?;
    let (u, s, vh) = svd_batch(&a, args.bool(1)?)?;
    Ok(tuple(vec![u, s, vh]))
}

/// `_linalg_svd(A, full_matrices, compute_uv, *, driver)`: (U, S, Vh), U and Vh empty without
/// `compute_uv`.
fn linalg_svd_impl(args: &mut Args<'_>) -> R {
    check_cpu_driver(args, 3, "torch.linalg.svd")?;
    let a = matrices("linalg.svd", &args.tensor(0)?, false)?;
    if args.bool(2)? {
        let (u, s, vh) = svd_batch(&a, args.bool(1)?)?;
        return Ok(tuple(vec![u, s, vh]));
    }
    let k = a.m.min(a.n);
    let s = tensor(singular_values(&a), &a.shape(&[k]), a.dtype)?;
    let empty = || Tensor::zeros(&[0], a.dtype);
    Ok(tuple(vec![empty()?, s, empty()?]))
}

/// `prims::svd(A, *, full_matrices)`: `linalg_svd` without a driver argument.
fn prims_svd(args: &mut Args<'_>) -> R {
    let a = matrices("linalg.svd", &args.tensor(0)?, false)?;
    let (u, s, vh) = svd_batch(&a, args.bool(1)?)?;
    Ok(tuple(vec![u, s, vh]))
}

/// `linalg_polar(A)`: `A = U H` from the reduced SVD `A = W S Vh` as ATen computes it,
/// `U = W Vh` (`m x n`) and `H = Vh^T S Vh` (`n x n`); both are independent of the singular
/// vectors' signs. Needs `m >= n`.
fn linalg_polar(args: &mut Args<'_>) -> R {
    let a = matrices("linalg.polar", &args.tensor(0)?, false)?;
    let (m, n) = (a.m, a.n);
    if m < n {
        return Err(invalid_argument(
            "linalg.polar",
            "the input's rows",
            format!("must be at least its columns ({n})"),
            m,
        ));
    }
    let (mut us, mut hs) = (Vec::with_capacity(a.data.len()), Vec::new());
    for b in 0..a.count() {
        // reduced: W is m x n, s has n values, Vh is n x n
        let (w, s, vh) = svd_of(a.mat(b), m, n, false);
        for i in 0..m {
            for j in 0..n {
                us.push((0..n).map(|k| w[i * n + k] * vh[k * n + j]).sum::<f64>());
            }
        }
        hs.extend(scaled_gram(&transpose(&vh, n, n), &s, n));
    }
    Ok(tuple(vec![
        tensor(us, &a.shape(&[m, n]), a.dtype)?,
        tensor(hs, &a.shape(&[n, n]), a.dtype)?,
    ]))
}

/// `Q diag(d) Q^T` for a row-major `n x n` Q.
fn scaled_gram(q: &[f64], d: &[f64], n: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(n * n);
    for i in 0..n {
        for j in 0..n {
            out.push(
                (0..n)
                    .map(|k| q[i * n + k] * d[k] * q[j * n + k])
                    .sum::<f64>(),
            );
        }
    }
    out
}

/// `linalg_matrix_sqrth(A)`: `Q diag(sqrt(max(l, 0))) Q^T` from the eigendecomposition of the
/// lower triangle (negative eigenvalues clamp to 0, as ATen's kernel does).
fn linalg_matrix_sqrth(args: &mut Args<'_>) -> R {
    let a = matrices("linalg.matrix_sqrth", &args.tensor(0)?, true)?;
    let n = a.n;
    let mut out = Vec::with_capacity(a.data.len());
    for b in 0..a.count() {
        let (l, q) = jacobi_eigh(a.mat(b), n, false);
        let root: Vec<f64> = l.iter().map(|v| v.max(0.0).sqrt()).collect();
        out.extend(scaled_gram(&q, &root, n));
    }
    Ok(IValue::Tensor(tensor(out, &a.shape(&[n, n]), a.dtype)?))
}

fn linalg_svdvals(args: &mut Args<'_>) -> R {
    check_cpu_driver(args, 1, "torch.linalg.svd")?;
    let a = matrices("linalg.svdvals", &args.tensor(0)?, false)?;
    let k = a.m.min(a.n);
    Ok(IValue::Tensor(tensor(
        singular_values(&a),
        &a.shape(&[k]),
        a.dtype,
    )?))
}

/// `torch.svd`: V instead of Vh; without `compute_uv`, zero U (`m x m`) and V (`n x n`).
fn svd(args: &mut Args<'_>) -> R {
    let a = matrices("svd", &args.tensor(0)?, false)?;
    let (some, compute_uv) = (args.bool(1)?, args.bool(2)?);
    let (m, n) = (a.m, a.n);
    if !compute_uv {
        let k = m.min(n);
        let s = tensor(singular_values(&a), &a.shape(&[k]), a.dtype)?;
        let u = Tensor::zeros(&a.shape(&[m, m]), a.dtype)?;
        let v = Tensor::zeros(&a.shape(&[n, n]), a.dtype)?;
        return Ok(tuple(vec![u, s, v]));
    }
    let (u, s, vh) = svd_batch(&a, !some)?;
    let nd = vh.dim();
    let v = super::shape::transpose(&vh, nd as i64 - 2, nd as i64 - 1)?.contiguous()?;
    Ok(tuple(vec![u, s, v]))
}

/// Eigen-decomposition of a symmetric `n x n` matrix (only the `upper` or lower triangle read)
/// by cyclic Jacobi: (eigenvalues ascending, eigenvectors as columns, row-major).
fn jacobi_eigh(a: &[f64], n: usize, upper: bool) -> (Vec<f64>, Vec<f64>) {
    let mut s = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..n {
            let (lo, hi) = (i.min(j), i.max(j));
            let (r, c) = if upper { (lo, hi) } else { (hi, lo) };
            s[i * n + j] = a[r * n + c];
        }
    }
    let mut v = vec![0.0; n * n];
    for i in 0..n {
        v[i * n + i] = 1.0;
    }
    const MAX_SWEEPS: usize = 80;
    for _ in 0..MAX_SWEEPS {
        let off: f64 = (0..n)
            .flat_map(|i| (0..n).filter(move |&j| j != i).map(move |j| (i, j)))
            .map(|(i, j)| s[i * n + j] * s[i * n + j])
            .sum();
        let diag: f64 = (0..n).map(|i| s[i * n + i] * s[i * n + i]).sum();
        if off == 0.0 || off <= f64::EPSILON * f64::EPSILON * diag {
            break;
        }
        for p in 0..n {
            for q in p + 1..n {
                let apq = s[p * n + q];
                if apq == 0.0 {
                    continue;
                }
                let theta = (s[q * n + q] - s[p * n + p]) / (2.0 * apq);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let t = if theta == 0.0 { 1.0 } else { t };
                let c = 1.0 / (t * t + 1.0).sqrt();
                let sn = t * c;
                for k in 0..n {
                    let (skp, skq) = (s[k * n + p], s[k * n + q]);
                    s[k * n + p] = c * skp - sn * skq;
                    s[k * n + q] = sn * skp + c * skq;
                }
                for k in 0..n {
                    let (spk, sqk) = (s[p * n + k], s[q * n + k]);
                    s[p * n + k] = c * spk - sn * sqk;
                    s[q * n + k] = sn * spk + c * sqk;
                }
                for k in 0..n {
                    let (vkp, vkq) = (v[k * n + p], v[k * n + q]);
                    v[k * n + p] = c * vkp - sn * vkq;
                    v[k * n + q] = sn * vkp + c * vkq;
                }
            }
        }
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&i, &j| s[i * n + i].total_cmp(&s[j * n + j]));
    let values: Vec<f64> = order.iter().map(|&i| s[i * n + i]).collect();
    let mut vectors = vec![0.0; n * n];
    for (k, &j) in order.iter().enumerate() {
        for i in 0..n {
            vectors[i * n + k] = v[i * n + j];
        }
    }
    (values, vectors)
}

fn uplo(args: &Args<'_>, i: usize) -> crate::Result<bool> {
    match &*args.str(i)? {
        "U" | "u" => Ok(true),
        "L" | "l" => Ok(false),
        other => Err(invalid_argument(
            args.op,
            "UPLO",
            "must be 'L' or 'U'",
            format!("'{other}'"),
        )),
    }
}

fn eigh_batch(a: &Batch, upper: bool) -> (Vec<f64>, Vec<f64>) {
    let (mut ls, mut qs) = (Vec::new(), Vec::new());
    for b in 0..a.count() {
        let (l, q) = jacobi_eigh(a.mat(b), a.n, upper);
        ls.extend(l);
        qs.extend(q);
    }
    (ls, qs)
}

fn linalg_eigh(args: &mut Args<'_>) -> R {
    let a = matrices("linalg.eigh", &args.tensor(0)?, true)?;
    let (l, q) = eigh_batch(&a, uplo(args, 1)?);
    let n = a.n;
    Ok(tuple(vec![
        tensor(l, &a.shape(&[n]), a.dtype)?,
        tensor(q, &a.shape(&[n, n]), a.dtype)?,
    ]))
}

/// `_linalg_eigh(A, UPLO, compute_v)`: (eigenvalues, eigenvectors), the vectors empty without
/// `compute_v`.
fn linalg_eigh_impl(args: &mut Args<'_>) -> R {
    let a = matrices("linalg.eigh", &args.tensor(0)?, true)?;
    let (l, q) = eigh_batch(&a, uplo(args, 1)?);
    let n = a.n;
    let vectors = if args.bool(2)? {
        tensor(q, &a.shape(&[n, n]), a.dtype)?
    } else {
        Tensor::zeros(&[0], a.dtype)?
    };
    Ok(tuple(vec![tensor(l, &a.shape(&[n]), a.dtype)?, vectors]))
}

fn linalg_eigvalsh(args: &mut Args<'_>) -> R {
    let a = matrices("linalg.eigvalsh", &args.tensor(0)?, true)?;
    let (l, _) = eigh_batch(&a, uplo(args, 1)?);
    Ok(IValue::Tensor(tensor(l, &a.shape(&[a.n]), a.dtype)?))
}

/// Per-matrix tolerance values: a 0-d/None default, or a tensor broadcast to the batch shape.
fn tolerance(t: Option<Tensor>, batch: &[usize], default: f64) -> crate::Result<Vec<f64>> {
    let count: usize = batch.iter().product();
    match t {
        None => Ok(vec![default; count]),
        Some(t) => {
            if t.dtype().is_complex() {
                return Err(wrong_dtype("linalg.pinv", "rtol", "real", t.dtype()));
            }
            super::shape::expand_to(&t, batch)?.to_vec::<f64>()
        }
    }
}

/// The pseudo-inverse with ATen's rule: singular values (or |eigenvalues| when `hermitian`)
/// above `max(atol, rtol * largest)` are inverted, the rest dropped. `atol`/`rtol` are per
/// matrix; `rtol: None` is `eps(dtype) * max(m, n)` unless a positive `atol` is given, then 0.
fn pinv(
    a: &Batch,
    atol: Option<Vec<f64>>,
    rtol: Option<Vec<f64>>,
    hermitian: bool,
) -> crate::Result<Tensor> {
    let (m, n) = (a.m, a.n);
    let count = a.count();
    let eps = if a.dtype == DType::Float32 {
        f32::EPSILON as f64
    } else {
        f64::EPSILON
    };
    let default_rtol = eps * m.max(n) as f64;
    let atols = atol.clone().unwrap_or_else(|| vec![0.0; count]);
    let rtols = match rtol {
        Some(r) => r,
        None => (0..count)
            .map(|b| match &atol {
                Some(at) if at[b] > 0.0 => 0.0,
                _ => default_rtol,
            })
            .collect(),
    };
    let mut out = Vec::with_capacity(count * n * m);
    for b in 0..count {
        let mat = a.mat(b);
        if hermitian {
            let (l, q) = jacobi_eigh(mat, n, false);
            let largest = l.iter().fold(0.0f64, |acc, v| acc.max(v.abs()));
            let tol = atols[b].max(rtols[b] * largest);
            let inv: Vec<f64> = l
                .iter()
                .map(|&v| if v.abs() > tol { 1.0 / v } else { 0.0 })
                .collect();
            for i in 0..n {
                for j in 0..n {
                    out.push((0..n).map(|k| q[i * n + k] * inv[k] * q[j * n + k]).sum());
                }
            }
        } else {
            let k = m.min(n);
            let (u, s, vh) = svd_of(mat, m, n, false);
            let largest = s.first().copied().unwrap_or(0.0);
            let tol = atols[b].max(rtols[b] * largest);
            let inv: Vec<f64> = s
                .iter()
                .map(|&v| if v > tol { 1.0 / v } else { 0.0 })
                .collect();
            // pinv = V diag(1/s) U^T: (n x k)(k x m)
            for i in 0..n {
                for j in 0..m {
                    out.push((0..k).map(|c| vh[c * n + i] * inv[c] * u[j * k + c]).sum());
                }
            }
        }
    }
    let shape = if hermitian {
        a.shape(&[n, n])
    } else {
        a.shape(&[n, m])
    };
    tensor(out, &shape, a.dtype)
}

fn linalg_pinv_tensors(args: &mut Args<'_>) -> R {
    let a = matrices("linalg.pinv", &args.tensor(0)?, args.bool(3)?)?;
    let atol = args
        .opt_tensor(1)?
        .map(|t| tolerance(Some(t), &a.batch, 0.0))
        .transpose()?;
    let rtol = args
        .opt_tensor(2)?
        .map(|t| tolerance(Some(t), &a.batch, 0.0))
        .transpose()?;
    Ok(IValue::Tensor(pinv(&a, atol, rtol, args.bool(3)?)?))
}

fn linalg_pinv_floats(args: &mut Args<'_>) -> R {
    let hermitian = args.bool(3)?;
    let a = matrices("linalg.pinv", &args.tensor(0)?, hermitian)?;
    let count = a.count();
    let atol = args.opt_double(1)?.map(|v| vec![v; count]);
    let rtol = args.opt_double(2)?.map(|v| vec![v; count]);
    Ok(IValue::Tensor(pinv(&a, atol, rtol, hermitian)?))
}

/// `linalg_pinv(self, rcond, hermitian)` (float or tensor `rcond`) and `pinverse`: `atol = 0`,
/// `rtol = rcond`.
fn linalg_pinv_rcond(args: &mut Args<'_>) -> R {
    let hermitian = if args.len() > 2 { args.bool(2)? } else { false };
    let a = matrices("linalg.pinv", &args.tensor(0)?, hermitian)?;
    let rcond = match args.get(1)? {
        IValue::Tensor(t) => tolerance(Some(t.clone()), &a.batch, 0.0)?,
        _ => vec![args.double(1)?; a.count()],
    };
    let zeros = vec![0.0; a.count()];
    Ok(IValue::Tensor(pinv(
        &a,
        Some(zeros),
        Some(rcond),
        hermitian,
    )?))
}

/// `linalg_matrix_rank` as ATen's `matrix_rank_impl`: per matrix, the count of singular values
/// (|eigenvalues| when `hermitian`) above `max(atol, rtol * largest)`, as int64 over the batch.
/// Tolerances follow `pinv`'s defaults: `atol` 0, `rtol` `eps * max(m, n)` unless `atol > 0`.
fn matrix_rank(
    x: &Tensor,
    atol: Option<Vec<f64>>,
    rtol: Option<Vec<f64>>,
    hermitian: bool,
) -> crate::Result<Tensor> {
    let a = matrices("torch.linalg.matrix_rank", x, hermitian)?;
    let count = a.count();
    if x.numel() == 0 {
        return Ok(Tensor::zeros(&a.batch, DType::Int64)?);
    }
    let eps = if a.dtype == DType::Float32 {
        f32::EPSILON as f64
    } else {
        f64::EPSILON
    };
    let default_rtol = eps * a.m.max(a.n) as f64;
    let atols = atol.clone().unwrap_or_else(|| vec![0.0; count]);
    let rtols = rtol.unwrap_or_else(|| {
        atols
            .iter()
            .map(|&at| {
                if atol.is_some() && at > 0.0 {
                    0.0
                } else {
                    default_rtol
                }
            })
            .collect()
    });
    let mut ranks = Vec::with_capacity(count);
    for b in 0..count {
        let values: Vec<f64> = if hermitian {
            jacobi_eigh(a.mat(b), a.n, false)
                .0
                .iter()
                .map(|v| v.abs())
                .collect()
        } else {
            matrix_singular_values(a.mat(b), a.m, a.n)
        };
        let largest = values.iter().copied().fold(0.0f64, f64::max);
        let tol = atols[b].max(rtols[b] * largest);
        ranks.push(values.iter().filter(|&&v| v > tol).count() as i64);
    }
    Ok(Tensor::from_vec(ranks, &a.batch)?)
}

/// `linalg_matrix_rank.atol_rtol_tensor(input, *, atol, rtol, hermitian)`.
fn matrix_rank_tolerance_tensors(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let batch = &x.shape()[..x.dim().saturating_sub(2)];
    let atol = args
        .opt_tensor(1)?
        .map(|t| tolerance(Some(t), batch, 0.0))
        .transpose()?;
    let rtol = args
        .opt_tensor(2)?
        .map(|t| tolerance(Some(t), batch, 0.0))
        .transpose()?;
    Ok(IValue::Tensor(matrix_rank(&x, atol, rtol, args.bool(3)?)?))
}

/// `linalg_matrix_rank.atol_rtol_float(self, *, atol, rtol, hermitian)`.
fn matrix_rank_tolerance_floats(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let count: usize = x.shape()[..x.dim().saturating_sub(2)].iter().product();
    let atol = args.opt_double(1)?.map(|v| vec![v; count]);
    let rtol = args.opt_double(2)?.map(|v| vec![v; count]);
    Ok(IValue::Tensor(matrix_rank(&x, atol, rtol, args.bool(3)?)?))
}

/// `linalg_matrix_rank(self, float tol, hermitian)`: `tol` is an absolute tolerance (NumPy's).
fn matrix_rank_tol_float(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let count: usize = x.shape()[..x.dim().saturating_sub(2)].iter().product();
    let atol = vec![args.double(1)?; count];
    Ok(IValue::Tensor(matrix_rank(
        &x,
        Some(atol),
        Some(vec![0.0; count]),
        args.bool(2)?,
    )?))
}

/// `linalg_matrix_rank.tol_tensor(input, Tensor tol, hermitian)`: an absolute tolerance per matrix.
fn matrix_rank_tol_tensor(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let batch = &x.shape()[..x.dim().saturating_sub(2)];
    let atol = tolerance(Some(args.tensor(1)?), batch, 0.0)?;
    let rtol = vec![0.0; atol.len()];
    Ok(IValue::Tensor(matrix_rank(
        &x,
        Some(atol),
        Some(rtol),
        args.bool(2)?,
    )?))
}

fn matmul(a: &[f64], b: &[f64], n: usize) -> Vec<f64> {
    let mut c = vec![0.0; n * n];
    for i in 0..n {
        for k in 0..n {
            let aik = a[i * n + k];
            if aik == 0.0 {
                continue;
            }
            for j in 0..n {
                c[i * n + j] += aik * b[k * n + j];
            }
        }
    }
    c
}

/// `exp(A)` by scaling and squaring: `A / 2^s` with 1-norm at most 1/2, a degree-24 Taylor
/// polynomial (truncation far below f64 rounding at that norm), then `s` squarings.
fn expm(a: &[f64], n: usize) -> Vec<f64> {
    let norm1 = (0..n)
        .map(|j| (0..n).map(|i| a[i * n + j].abs()).sum::<f64>())
        .fold(0.0, f64::max);
    if !norm1.is_finite() {
        return vec![f64::NAN; n * n];
    }
    let squarings = if norm1 > 0.5 {
        (norm1 / 0.5).log2().ceil() as i32
    } else {
        0
    };
    let scale = 0.5f64.powi(squarings);
    let x: Vec<f64> = a.iter().map(|v| v * scale).collect();
    let mut result = vec![0.0; n * n];
    let mut term = vec![0.0; n * n];
    for i in 0..n {
        result[i * n + i] = 1.0;
        term[i * n + i] = 1.0;
    }
    const DEGREE: usize = 24;
    for k in 1..=DEGREE {
        term = matmul(&term, &x, n);
        term.iter_mut().for_each(|v| *v /= k as f64);
        result.iter_mut().zip(&term).for_each(|(r, t)| *r += t);
    }
    for _ in 0..squarings {
        result = matmul(&result, &result, n);
    }
    result
}

fn matrix_exp(args: &mut Args<'_>) -> R {
    let a = matrices("linalg.matrix_exp", &args.tensor(0)?, true)?;
    let n = a.n;
    let mut out = Vec::with_capacity(a.data.len());
    for b in 0..a.count() {
        out.extend(expm(a.mat(b), n));
    }
    Ok(IValue::Tensor(tensor(out, &a.shape(&[n, n]), a.dtype)?))
}

/// LAPACK's unblocked `geqr2` on one row-major `m x n` matrix: R on and above the diagonal, the
/// Householder vectors (implicit leading 1) below it, and their `tau`s (`dlarfg`'s convention:
/// `beta = -sign(alpha) |(alpha, x)|`, `tau = (beta - alpha) / beta`, 0 for a zero column).
pub(super) fn geqr2(a: &mut [f64], m: usize, n: usize) -> Vec<f64> {
    (0..m.min(n))
        .map(|i| householder_step(a, m, n, i))
        .collect()
}

/// Step `i` of [`geqr2`] on a row-major `m x n` matrix: the reflector that zeroes column `i`
/// below the diagonal, stored there, applied to the columns right of `i`; returns its `tau`.
pub(super) fn householder_step(a: &mut [f64], m: usize, n: usize, i: usize) -> f64 {
    let alpha = a[i * n + i];
    let xnorm = (i + 1..m).map(|r| a[r * n + i].powi(2)).sum::<f64>().sqrt();
    if xnorm == 0.0 {
        return 0.0;
    }
    let beta = -alpha.signum() * alpha.hypot(xnorm);
    let tau = (beta - alpha) / beta;
    let scale = 1.0 / (alpha - beta);
    for r in i + 1..m {
        a[r * n + i] *= scale;
    }
    a[i * n + i] = beta;
    // apply H = I - tau v v^T (v = [1, a[i+1.., i]]) to the columns right of i
    for c in i + 1..n {
        let w = a[i * n + c] + (i + 1..m).map(|r| a[r * n + i] * a[r * n + c]).sum::<f64>();
        a[i * n + c] -= tau * w;
        for r in i + 1..m {
            a[r * n + c] -= tau * w * a[r * n + i];
        }
    }
    tau
}

/// `geqrf(self)`: (a, tau) as LAPACK's QR factorization returns them.
fn geqrf(args: &mut Args<'_>) -> R {
    let b = matrices("geqrf", &args.tensor(0)?, false)?;
    let (m, n) = (b.m, b.n);
    let mut a_out = Vec::with_capacity(b.data.len());
    let mut tau_out = Vec::new();
    for i in 0..b.count() {
        let mut a = b.mat(i).to_vec();
        tau_out.extend(geqr2(&mut a, m, n));
        a_out.extend(a);
    }
    let a = Tensor::from_vec(a_out, &b.shape(&[m, n]))?.to_dtype(b.dtype)?;
    let tau = Tensor::from_vec(tau_out, &b.shape(&[m.min(n)]))?.to_dtype(b.dtype)?;
    Ok(IValue::Tuple(Tuple::new(vec![a.into(), tau.into()])))
}

/// `linalg_householder_product(input, tau)` / `orgqr`: the first n columns of
/// `H(0) H(1) ... H(k-1)`, `H(i) = I - tau[i] v_i v_i^T` with `v_i` column i of `input` below the
/// diagonal (implicit leading 1).
fn householder_product(args: &mut Args<'_>) -> R {
    let op = "torch.linalg.householder_product";
    let b = matrices(op, &args.tensor(0)?, false)?;
    let tau = args.tensor(1)?;
    let (m, n) = (b.m, b.n);
    let k = tau.shape().last().copied().unwrap_or(0);
    if m < n {
        return Err(invalid_argument(
            op,
            "the input's rows",
            format!("must be at least its columns ({n})"),
            m,
        ));
    }
    check_rank(
        op,
        "tau",
        RankRequirement::Exactly(b.batch.len() + 1),
        tau.shape(),
    )?;
    if tau.shape()[..b.batch.len()] != b.batch {
        return Err(shape_mismatch(
            op,
            "the batch dimensions of tau (the input's)",
            &b.batch,
            &tau.shape()[..b.batch.len()],
        ));
    }
    if k > n {
        return Err(invalid_argument(
            op,
            "tau.size(-1)",
            format!("must be at most the input's columns ({n})"),
            k,
        ));
    }
    if tau.dtype() != b.dtype {
        return Err(wrong_dtype(
            op,
            "tau",
            format!("{} (the input's dtype)", b.dtype),
            tau.dtype(),
        ));
    }
    let taus = tau.contiguous()?.to_vec::<f64>()?;
    let mut out = Vec::with_capacity(b.data.len());
    for bi in 0..b.count() {
        let a = b.mat(bi);
        let mut q: Vec<f64> = (0..m * n)
            .map(|x| if x / n == x % n { 1.0 } else { 0.0 })
            .collect();
        for i in (0..k).rev() {
            let t = taus[bi * k + i];
            let v = |r: usize| if r == i { 1.0 } else { a[r * n + i] };
            for c in 0..n {
                let w: f64 = (i..m).map(|r| v(r) * q[r * n + c]).sum();
                for r in i..m {
                    q[r * n + c] -= t * w * v(r);
                }
            }
        }
        out.extend(q);
    }
    Ok(IValue::Tensor(
        Tensor::from_vec(out, &b.shape(&[m, n]))?.to_dtype(b.dtype)?,
    ))
}

pub fn register(r: &mut Registry) {
    r.add("aten::linalg_qr", linalg_qr);
    r.add(
        "aten::linalg_matrix_rank.atol_rtol_tensor",
        matrix_rank_tolerance_tensors,
    );
    r.add(
        "aten::linalg_matrix_rank.atol_rtol_float",
        matrix_rank_tolerance_floats,
    );
    r.add("aten::linalg_matrix_rank", matrix_rank_tol_float);
    r.add(
        "aten::linalg_matrix_rank.tol_tensor",
        matrix_rank_tol_tensor,
    );
    r.add("aten::linalg_matrix_rank.out_tol_tensor", |a| {
        let rank = matrix_rank_tol_tensor(a)?;
        a.write_outs(3, rank)
    });
    r.add("aten::linalg_svd", linalg_svd);
    r.add("aten::linalg_svd.U", |a| {
        let r = linalg_svd(a)?;
        a.write_outs(3, r)
    });
    r.add("aten::svd", svd);
    r.add("aten::svd.U", |a| {
        let r = svd(a)?;
        a.write_outs(3, r)
    });
    r.add("aten::linalg_svdvals", linalg_svdvals);
    r.add("aten::_linalg_svd", linalg_svd_impl);
    r.add("aten::_linalg_svd.U", |a| {
        let r = linalg_svd_impl(a)?;
        a.write_outs(4, r)
    });
    r.add("prims::svd", prims_svd);
    r.add("aten::linalg_polar", linalg_polar);
    r.add("aten::linalg_matrix_sqrth", linalg_matrix_sqrth);

    r.add("aten::_linalg_eigh", linalg_eigh_impl);
    r.add("aten::_linalg_eigh.eigenvalues", |a| {
        let r = linalg_eigh_impl(a)?;
        a.write_outs(3, r)
    });

    r.add("aten::linalg_eigh", linalg_eigh);
    r.add("aten::linalg_eigh.eigvals", |a| {
        let r = linalg_eigh(a)?;
        a.write_outs(2, r)
    });
    r.add("aten::linalg_eigvalsh", linalg_eigvalsh);
    r.add_overloads(
        "aten::linalg_pinv",
        &["", "rcond_tensor"],
        linalg_pinv_rcond,
    );
    r.add("aten::pinverse", linalg_pinv_rcond);
    r.add("aten::linalg_pinv.atol_rtol_tensor", linalg_pinv_tensors);
    r.add("aten::linalg_pinv.atol_rtol_float", linalg_pinv_floats);
    r.add_all(&["aten::matrix_exp", "aten::linalg_matrix_exp"], matrix_exp);
    r.add("aten::geqrf", geqrf);
    r.add("aten::geqrf.a", |a| {
        let r = geqrf(a)?;
        a.write_outs(1, r)
    });
    r.add("aten::linalg_pinv.out_rcond_tensor", |a| {
        let r = linalg_pinv_rcond(a)?;
        a.write_outs(3, r)
    });
    r.add_all(
        &["aten::linalg_householder_product", "aten::orgqr"],
        householder_product,
    );
}
