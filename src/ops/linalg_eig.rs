//! Kernels: the eigendecomposition of general (non-symmetric) real matrices — `linalg_eig`,
//! `linalg_eigvals` and `_linalg_eigvals`, complex results (complex64 for float32 input,
//! complex128 for float64) as LAPACK's `geev` gives PyTorch. Eigenvalues come from the
//! Hessenberg form by the shifted QR algorithm (complex arithmetic, Wilkinson shifts); each
//! eigenvector by inverse iteration on `A - lambda I`, normalized as `geev` normalizes: unit
//! Euclidean norm with its largest component real.
//!
//! The ORDER of the eigenvalues is whatever LAPACK's deflation produces and is not reproduced:
//! tests match eigenpairs by value. Each eigenvector is then fixed up to a sign (as in
//! `geev`, where it is implementation-defined too), or a phase where two components tie for
//! largest (`geev` breaks the tie by rounding). Complex input, and non-finite input to
//! `eigvals` (whatever LAPACK makes of it), are refused loudly.

use super::kernels::{invalid_argument, unsupported_feature};
use super::linalg::shape_err;
use super::linalg_decomp::matrices;
use super::{Args, Registry};
use crate::tensor::{DType, Tensor};
use crate::values::{IValue, Tuple};
use num_complex::Complex64 as C;

type R = crate::Result<IValue>;

/// Upper Hessenberg form of a row-major `n x n` matrix by Householder similarity transforms.
fn hessenberg(a: &mut [C], n: usize) {
    for k in 0..n.saturating_sub(2) {
        let norm = (k + 1..n)
            .map(|r| a[r * n + k].norm_sqr())
            .sum::<f64>()
            .sqrt();
        if norm == 0.0 {
            continue;
        }
        let x0 = a[(k + 1) * n + k];
        let phase = if x0.norm() == 0.0 {
            C::new(1.0, 0.0)
        } else {
            x0 / x0.norm()
        };
        let mut v: Vec<C> = (k + 1..n).map(|r| a[r * n + k]).collect();
        v[0] += phase * norm;
        let vnorm = v.iter().map(|z| z.norm_sqr()).sum::<f64>().sqrt();
        if vnorm == 0.0 {
            continue;
        }
        v.iter_mut().for_each(|z| *z /= vnorm);
        // A := (I - 2 v v^H) A (I - 2 v v^H) on rows / columns k+1..n
        for c in 0..n {
            let w: C = v
                .iter()
                .enumerate()
                .map(|(i, vi)| vi.conj() * a[(k + 1 + i) * n + c])
                .sum();
            for (i, vi) in v.iter().enumerate() {
                a[(k + 1 + i) * n + c] -= *vi * w * 2.0;
            }
        }
        for r in 0..n {
            let w: C = v
                .iter()
                .enumerate()
                .map(|(i, vi)| a[r * n + k + 1 + i] * vi)
                .sum();
            for (i, vi) in v.iter().enumerate() {
                a[r * n + k + 1 + i] -= w * vi.conj() * 2.0;
            }
        }
    }
}

/// The eigenvalues of a row-major upper Hessenberg matrix by single-shift complex QR with
/// Wilkinson shifts and deflation; `None` when it does not converge.
fn hessenberg_eigenvalues(h: &mut [C], n: usize) -> Option<Vec<C>> {
    let mut out = vec![C::new(0.0, 0.0); n];
    let mut hi = n;
    let mut iterations = 0usize;
    let max_iterations = 100 * n.max(1);
    while hi > 0 {
        let end = hi - 1;
        if end == 0 {
            out[0] = h[0];
            break;
        }
        // the lowest start of an unreduced block ending at `end`
        let mut lo = end;
        while lo > 0 {
            let s = h[(lo - 1) * n + lo - 1].norm() + h[lo * n + lo].norm();
            let scale = if s == 0.0 { 1.0 } else { s };
            if h[lo * n + lo - 1].norm() <= f64::EPSILON * scale {
                h[lo * n + lo - 1] = C::new(0.0, 0.0);
                break;
            }
            lo -= 1;
        }
        if lo == end {
            out[end] = h[end * n + end];
            hi -= 1;
            iterations = 0;
            continue;
        }
        iterations += 1;
        if iterations > max_iterations {
            return None;
        }
        // Wilkinson shift: the eigenvalue of the trailing 2x2 block nearer its last entry;
        // an exceptional shift every tenth iteration breaks cycles
        let (a, b) = (h[(end - 1) * n + end - 1], h[(end - 1) * n + end]);
        let (c, d) = (h[end * n + end - 1], h[end * n + end]);
        let mu = if iterations.is_multiple_of(10) {
            d + C::new(h[end * n + end - 1].norm(), 0.0)
        } else {
            let tr = (a + d) * 0.5;
            let disc = ((a - d) * 0.5 * ((a - d) * 0.5) + b * c).sqrt();
            let (l1, l2) = (tr + disc, tr - disc);
            if (l1 - d).norm() <= (l2 - d).norm() {
                l1
            } else {
                l2
            }
        };
        // one QR step on the block lo..=end of H - mu I, by Givens rotations
        for i in lo..=end {
            h[i * n + i] -= mu;
        }
        let mut rotations = Vec::with_capacity(end - lo);
        for k in lo..end {
            let (x, y) = (h[k * n + k], h[(k + 1) * n + k]);
            let r = (x.norm_sqr() + y.norm_sqr()).sqrt();
            let (cs, sn) = if r == 0.0 {
                (C::new(1.0, 0.0), C::new(0.0, 0.0))
            } else {
                (x / r, y / r)
            };
            for col in k..n {
                let (p, q) = (h[k * n + col], h[(k + 1) * n + col]);
                h[k * n + col] = cs.conj() * p + sn.conj() * q;
                h[(k + 1) * n + col] = -sn * p + cs * q;
            }
            rotations.push((k, cs, sn));
        }
        for (k, cs, sn) in rotations {
            for row in 0..=(k + 2).min(end) {
                let (p, q) = (h[row * n + k], h[row * n + k + 1]);
                h[row * n + k] = p * cs + q * sn;
                h[row * n + k + 1] = -p * sn.conj() + q * cs.conj();
            }
        }
        for i in lo..=end {
            h[i * n + i] += mu;
        }
    }
    Some(out)
}

/// Solves `m x = b` for a row-major complex `n x n` matrix by LU with partial pivoting; a zero
/// pivot is replaced by `tiny` (inverse iteration's shifted matrix is singular by design).
fn solve_perturbed(m: &mut [C], n: usize, b: &mut [C], tiny: f64) {
    for k in 0..n {
        let p = (k..n)
            .max_by(|&i, &j| m[i * n + k].norm().total_cmp(&m[j * n + k].norm()))
            .unwrap_or(k);
        if p != k {
            for c in 0..n {
                m.swap(k * n + c, p * n + c);
            }
            b.swap(k, p);
        }
        if m[k * n + k].norm() == 0.0 {
            m[k * n + k] = C::new(tiny, 0.0);
        }
        for r in k + 1..n {
            let f = m[r * n + k] / m[k * n + k];
            if f.norm() == 0.0 {
                continue;
            }
            for c in k..n {
                let v = m[k * n + c];
                m[r * n + c] -= f * v;
            }
            let v = b[k];
            b[r] -= f * v;
        }
    }
    for k in (0..n).rev() {
        let s: C = (k + 1..n).map(|c| m[k * n + c] * b[c]).sum();
        b[k] = (b[k] - s) / m[k * n + k];
    }
}

/// The eigenvector of `a` (row-major real `n x n`) for eigenvalue `lambda` by inverse
/// iteration, normalized like LAPACK's `geev`: unit norm, largest component real.
fn eigenvector(a: &[f64], n: usize, lambda: C, scale: f64) -> Vec<C> {
    let tiny = f64::EPSILON * scale.max(f64::MIN_POSITIVE);
    let shifted: Vec<C> = (0..n * n)
        .map(|i| {
            let d = if i / n == i % n {
                lambda
            } else {
                C::new(0.0, 0.0)
            };
            C::new(a[i], 0.0) - d
        })
        .collect();
    let mut v: Vec<C> = vec![C::new(1.0, 0.0); n];
    for _ in 0..3 {
        let mut m = shifted.clone();
        solve_perturbed(&mut m, n, &mut v, tiny);
        let norm = v.iter().map(|z| z.norm_sqr()).sum::<f64>().sqrt();
        if !norm.is_finite() || norm == 0.0 {
            break;
        }
        v.iter_mut().for_each(|z| *z /= norm);
    }
    // largest component (by |z|^2, first of equals) made real
    let mut big = 0;
    for (i, z) in v.iter().enumerate() {
        if z.norm_sqr() > v[big].norm_sqr() {
            big = i;
        }
    }
    if let Some(&z) = v.get(big) {
        if z.norm() > 0.0 {
            let phase = z.conj() / z.norm();
            v.iter_mut().for_each(|w| *w *= phase);
            v[big] = C::new(v[big].re, 0.0);
        }
    }
    v
}

/// (eigenvalues, eigenvectors as columns, row-major) of every matrix of `x`, with the complex
/// result dtype.
fn eig_batch(op: &str, x: &Tensor, vectors: bool) -> crate::Result<(Tensor, Option<Tensor>)> {
    let b = matrices(op, x, true)?;
    if b.data.iter().any(|v| !v.is_finite()) {
        // linalg.eig refuses them; eigvals returns whatever LAPACK makes of them, which tsrun
        // does not reproduce
        return Err(if vectors {
            invalid_argument(
                op,
                "input",
                "must not contain infs or NaNs",
                "a non-finite element",
            )
        } else {
            unsupported_feature(op, "the eigenvalues of a matrix with infs or NaNs")
        });
    }
    let n = b.n;
    let dtype = if b.dtype == DType::Float32 {
        DType::Complex64
    } else {
        DType::Complex128
    };
    let (mut values, mut vecs) = (Vec::with_capacity(b.count() * n), Vec::new());
    for i in 0..b.count() {
        let a = b.mat(i);
        let mut h: Vec<C> = a.iter().map(|&v| C::new(v, 0.0)).collect();
        hessenberg(&mut h, n);
        let mut ls = hessenberg_eigenvalues(&mut h, n).ok_or_else(|| {
            invalid_argument(
                op,
                format!("input (batch element {i})"),
                "must be well-conditioned enough for the eigenvalue iteration to converge",
                "an ill-conditioned matrix or one with too many repeated eigenvalues",
            )
        })?;
        // a real matrix: eigenvalues are real or come in conjugate pairs, as geev returns them
        let scale = a.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        for l in ls.iter_mut() {
            if l.im.abs() <= 8.0 * f64::EPSILON * scale.max(l.norm()) {
                l.im = 0.0;
            }
        }
        if vectors {
            let mut cols: Vec<Vec<C>> = ls.iter().map(|&l| eigenvector(a, n, l, scale)).collect();
            for r in 0..n {
                for col in cols.iter_mut() {
                    vecs.push(std::mem::take(&mut col[r]));
                }
            }
        }
        values.extend(ls);
    }
    let values = Tensor::from_vec(values, &b.shape(&[n]))?.to_dtype(dtype)?;
    let vecs = if vectors {
        Some(Tensor::from_vec(vecs, &b.shape(&[n, n]))?.to_dtype(dtype)?)
    } else {
        None
    };
    Ok((values, vecs))
}

fn linalg_eig(args: &mut Args<'_>) -> R {
    let (values, vectors) = eig_batch("linalg.eig", &args.tensor(0)?, true)?;
    let vectors = vectors.ok_or_else(|| shape_err("linalg.eig: no eigenvectors computed"))?;
    Ok(IValue::Tuple(Tuple::new(vec![
        values.into(),
        vectors.into(),
    ])))
}

fn linalg_eigvals(args: &mut Args<'_>) -> R {
    let (values, _) = eig_batch("linalg.eigvals", &args.tensor(0)?, false)?;
    Ok(IValue::Tensor(values))
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::linalg_eig", linalg_eig);
    r.add_all(
        &["aten::linalg_eigvals", "aten::_linalg_eigvals"],
        linalg_eigvals,
    );
}
