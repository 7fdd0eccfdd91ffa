//! Kernels: the LDL^T factorization of symmetric matrices with Bunch-Kaufman pivoting —
//! `linalg_ldl_factor(_ex)` as LAPACK's `sytrf` computes it for PyTorch (lower triangle, the
//! unblocked `sytf2` sweep: 1x1 and 2x2 pivot blocks, LAPACK's 1-based `ipiv`, negative for the
//! two rows of a 2x2 block) and `linalg_ldl_solve` as `sytrs` applies it. Real float32/float64,
//! batched, computed in f64; for real input `hermitian` changes nothing (`sytrf` either way).

use super::kernels::{invalid_argument, shape_mismatch, wrong_dtype};
use super::linalg::value_err;
use super::linalg_decomp::{matrices, tensor, tuple};
use super::{Args, Registry};
use crate::tensor::Tensor;
use crate::tensor::TensorError;
use crate::values::IValue;

type R = crate::Result<IValue>;

/// `sytf2` with `uplo = 'L'` on one row-major `n x n` matrix (only its lower triangle read):
/// returns LAPACK's `ipiv` and `info` (the 1-based index of the first exactly-zero pivot block,
/// 0 when none); `a` holds L below the diagonal and D on it (and D's subdiagonal for 2x2
/// blocks), the strict upper triangle zeroed as PyTorch returns it.
fn sytf2_lower(a: &mut [f64], n: usize) -> (Vec<i32>, i32) {
    let alpha = (1.0 + 17f64.sqrt()) / 8.0;
    let sfmin = f64::MIN_POSITIVE;
    let at = |i: usize, j: usize| i * n + j;
    let mut ipiv = vec![0i32; n];
    let mut info = 0i32;
    // idamax: the first index of the largest |value|
    let argmax = |vals: &mut dyn Iterator<Item = (usize, f64)>| {
        let mut best: Option<(usize, f64)> = None;
        for (i, v) in vals {
            if best.is_none_or(|(_, b)| v.abs() > b) {
                best = Some((i, v.abs()));
            }
        }
        best
    };
    let mut k = 0;
    while k < n {
        let mut kstep = 1;
        let absakk = a[at(k, k)].abs();
        let (imax, colmax) = argmax(&mut (k + 1..n).map(|i| (i, a[at(i, k)]))).unwrap_or((k, 0.0));
        let kp;
        if absakk.max(colmax) == 0.0 || absakk.is_nan() {
            if info == 0 {
                info = k as i32 + 1;
            }
            kp = k;
        } else {
            if absakk >= alpha * colmax {
                kp = k;
            } else {
                // the largest off-diagonal element in row/column imax of the trailing matrix
                let row = argmax(&mut (k..imax).map(|j| (j, a[at(imax, j)])));
                let col = argmax(&mut (imax + 1..n).map(|j| (j, a[at(j, imax)])));
                let rowmax = row.map_or(0.0, |r| r.1).max(col.map_or(0.0, |c| c.1));
                if absakk >= alpha * colmax * (colmax / rowmax) {
                    kp = k;
                } else if a[at(imax, imax)].abs() >= alpha * rowmax {
                    kp = imax;
                } else {
                    kp = imax;
                    kstep = 2;
                }
            }
            let kk = k + kstep - 1;
            if kp != kk {
                // interchange rows and columns kk and kp of the trailing matrix
                for i in kp + 1..n {
                    a.swap(at(i, kk), at(i, kp));
                }
                for j in kk + 1..kp {
                    a.swap(at(j, kk), at(kp, j));
                }
                a.swap(at(kk, kk), at(kp, kp));
                if kstep == 2 {
                    a.swap(at(k + 1, k), at(kp, k));
                }
            }
            if kstep == 1 {
                let akk = a[at(k, k)];
                // LAPACK's two ways of scaling the column, by the reciprocal unless it overflows
                let scale_reciprocal = akk.abs() >= sfmin;
                let d11 = if scale_reciprocal { 1.0 / akk } else { akk };
                // rank-1 update of the trailing lower triangle: A -= x x^T / akk
                for j in k + 1..n {
                    let xj = a[at(j, k)];
                    for i in j..n {
                        let upd = if scale_reciprocal {
                            a[at(i, k)] * (d11 * xj)
                        } else {
                            (a[at(i, k)] / d11) * (xj / d11) * d11
                        };
                        a[at(i, j)] -= upd;
                    }
                }
                for i in k + 1..n {
                    if scale_reciprocal {
                        a[at(i, k)] *= d11;
                    } else {
                        a[at(i, k)] /= d11;
                    }
                }
            } else if k + 2 < n {
                let mut d21 = a[at(k + 1, k)];
                let d11 = a[at(k + 1, k + 1)] / d21;
                let d22 = a[at(k, k)] / d21;
                let t = 1.0 / (d11 * d22 - 1.0);
                d21 = t / d21;
                for j in k + 2..n {
                    let wk = d21 * (d11 * a[at(j, k)] - a[at(j, k + 1)]);
                    let wkp1 = d21 * (d22 * a[at(j, k + 1)] - a[at(j, k)]);
                    for i in j..n {
                        a[at(i, j)] = a[at(i, j)] - a[at(i, k)] * wk - a[at(i, k + 1)] * wkp1;
                    }
                    a[at(j, k)] = wk;
                    a[at(j, k + 1)] = wkp1;
                }
            }
        }
        if kstep == 1 {
            ipiv[k] = kp as i32 + 1;
        } else {
            ipiv[k] = -(kp as i32 + 1);
            ipiv[k + 1] = -(kp as i32 + 1);
        }
        k += kstep;
    }
    for i in 0..n {
        for j in i + 1..n {
            a[at(i, j)] = 0.0;
        }
    }
    (ipiv, info)
}

/// (LD, pivots, info) over the batch.
fn ldl_factor_batch(op: &str, x: &Tensor) -> crate::Result<(Tensor, Tensor, Vec<i32>)> {
    let b = matrices(op, x, true)?;
    let n = b.n;
    let (mut lds, mut pivots, mut infos) =
        (Vec::with_capacity(b.data.len()), Vec::new(), Vec::new());
    for i in 0..b.count() {
        let mut a = b.mat(i).to_vec();
        let (ipiv, info) = sytf2_lower(&mut a, n);
        lds.extend(a);
        pivots.extend(ipiv);
        infos.push(info);
    }
    Ok((
        tensor(lds, &b.shape(&[n, n]), b.dtype)?,
        Tensor::from_vec(pivots, &b.shape(&[n]))?,
        infos,
    ))
}

fn check_ldl_info(op: &str, infos: &[i32]) -> crate::Result<()> {
    match infos.iter().enumerate().find(|(_, &i)| i != 0) {
        None => Ok(()),
        Some((b, &i)) => Err(value_err(format!(
            "{op}: (Batch element {b}): The factorization could not be completed because the \
             input is not invertible (the {i}-th diagonal block of D is exactly zero)."
        ))),
    }
}

/// `linalg_ldl_factor_ex(self, *, hermitian, check_errors)`.
fn linalg_ldl_factor_ex(args: &mut Args<'_>) -> R {
    let op = "torch.linalg.ldl_factor_ex";
    let (ld, pivots, infos) = ldl_factor_batch(op, &args.tensor(0)?)?;
    if args.bool(2)? {
        check_ldl_info(op, &infos)?;
    }
    let batch = &ld.shape()[..ld.dim() - 2];
    let info = Tensor::from_vec(infos, batch)?;
    Ok(tuple(vec![ld, pivots, info]))
}

/// `linalg_ldl_factor(self, *, hermitian)`: the factorization, an error for a singular input.
fn linalg_ldl_factor(args: &mut Args<'_>) -> R {
    let op = "torch.linalg.ldl_factor";
    let (ld, pivots, infos) = ldl_factor_batch(op, &args.tensor(0)?)?;
    check_ldl_info(op, &infos)?;
    Ok(tuple(vec![ld, pivots]))
}

/// `sytrs` with `uplo = 'L'`: solves `A X = B` for one factorization (`ld` row-major `n x n`,
/// LAPACK's 1-based `ipiv`) and one row-major `n x k` right-hand side, in place.
fn sytrs_lower(ld: &[f64], ipiv: &[i32], n: usize, b: &mut [f64], k: usize) -> crate::Result<()> {
    let at = |i: usize, j: usize| i * n + j;
    let swap_rows = |b: &mut [f64], r: usize, s: usize| {
        if r != s {
            for c in 0..k {
                b.swap(r * k + c, s * k + c);
            }
        }
    };
    let pivot_row = |p: i32| -> crate::Result<usize> {
        let r = p.unsigned_abs() as usize;
        if r == 0 || r > n {
            return Err(invalid_argument(
                "linalg.ldl_solve",
                "pivots",
                format!("must be in [-{n}, {n}] without 0 ({n} x {n} matrices)"),
                p,
            ));
        }
        Ok(r - 1)
    };
    // solve L D Y = B
    let mut i = 0;
    while i < n {
        if ipiv[i] > 0 {
            swap_rows(b, i, pivot_row(ipiv[i])?);
            for r in i + 1..n {
                for c in 0..k {
                    b[r * k + c] -= ld[at(r, i)] * b[i * k + c];
                }
            }
            for c in 0..k {
                b[i * k + c] /= ld[at(i, i)];
            }
            i += 1;
        } else {
            if i + 1 >= n {
                return Err(invalid_argument(
                    "linalg.ldl_solve",
                    format!("pivots[{i}]"),
                    "must not start a 2x2 pivot block at the last row",
                    ipiv[i],
                ));
            }
            swap_rows(b, i + 1, pivot_row(ipiv[i])?);
            for r in i + 2..n {
                for c in 0..k {
                    b[r * k + c] -=
                        ld[at(r, i)] * b[i * k + c] + ld[at(r, i + 1)] * b[(i + 1) * k + c];
                }
            }
            let akm1k = ld[at(i + 1, i)];
            let akm1 = ld[at(i, i)] / akm1k;
            let ak = ld[at(i + 1, i + 1)] / akm1k;
            let denom = akm1 * ak - 1.0;
            for c in 0..k {
                let bkm1 = b[i * k + c] / akm1k;
                let bk = b[(i + 1) * k + c] / akm1k;
                b[i * k + c] = (ak * bkm1 - bk) / denom;
                b[(i + 1) * k + c] = (akm1 * bk - bkm1) / denom;
            }
            i += 2;
        }
    }
    // solve L^T X = Y, from the last row up
    let mut i = n;
    while i > 0 {
        let row = i - 1;
        let two = ipiv[row] < 0;
        let rows: &[usize] = if two && row > 0 {
            &[row, row - 1]
        } else {
            &[row]
        };
        for &r in rows {
            for c in 0..k {
                let dot: f64 = (row + 1..n).map(|s| ld[at(s, r)] * b[s * k + c]).sum();
                b[r * k + c] -= dot;
            }
        }
        swap_rows(b, row, pivot_row(ipiv[row])?);
        i -= rows.len();
    }
    Ok(())
}

/// `linalg_ldl_solve(LD, pivots, B, *, hermitian)`: `B`'s batch broadcasts against `LD`'s.
fn linalg_ldl_solve(args: &mut Args<'_>) -> R {
    let op = "torch.linalg.ldl_solve";
    let ld = matrices(op, &args.tensor(0)?, true)?;
    let pivots = args.tensor(1)?;
    let rhs = args.tensor(2)?;
    let n = ld.n;
    if !pivots.dtype().is_integral(false) {
        return Err(wrong_dtype(
            op,
            "pivots",
            "an integer tensor",
            pivots.dtype(),
        ));
    }
    if pivots.shape() != ld.shape(&[n]).as_slice() {
        return Err(shape_mismatch(
            op,
            "pivots (LD.shape[:-1])",
            &ld.shape(&[n]),
            pivots.shape(),
        ));
    }
    if rhs.dim() < 2 || rhs.shape()[rhs.dim() - 2] != n {
        return Err(invalid_argument(
            op,
            "B",
            format!(
                "must be a batch of matrices of {n} rows for A of shape {:?} (AX = B)",
                ld.shape(&[n, n])
            ),
            format!("a tensor of shape {:?}", rhs.shape()),
        ));
    }
    if rhs.dtype() != ld.dtype {
        return Err(TensorError::DTypeMismatch {
            expected: ld.dtype,
            got: rhs.dtype(),
        }
        .into());
    }
    let k = rhs.shape()[rhs.dim() - 1];
    let batch = crate::tensor::broadcast_shapes(&ld.batch, &rhs.shape()[..rhs.dim() - 2])?;
    let expand = |t: &Tensor, dims: &[usize]| -> crate::Result<Vec<f64>> {
        let mut shape = batch.to_vec();
        shape.extend_from_slice(dims);
        super::shape::expand_to(t, &shape)?
            .contiguous()?
            .to_vec::<f64>()
    };
    let lds = expand(&args.tensor(0)?, &[n, n])?;
    let pivs: Vec<i32> = {
        let mut shape = batch.to_vec();
        shape.push(n);
        super::shape::expand_to(&pivots, &shape)?
            .contiguous()?
            .to_vec::<i64>()?
            .into_iter()
            .map(|p| p as i32)
            .collect()
    };
    let mut xs = expand(&rhs, &[n, k])?;
    let count: usize = batch.iter().product();
    for bi in 0..count {
        sytrs_lower(
            &lds[bi * n * n..(bi + 1) * n * n],
            &pivs[bi * n..(bi + 1) * n],
            n,
            &mut xs[bi * n * k..(bi + 1) * n * k],
            k,
        )?;
    }
    let mut shape = batch.to_vec();
    shape.extend_from_slice(&[n, k]);
    Ok(IValue::Tensor(tensor(xs, &shape, ld.dtype)?))
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::linalg_ldl_factor_ex", linalg_ldl_factor_ex);
    r.add("aten::linalg_ldl_factor", linalg_ldl_factor);
    r.add("aten::linalg_ldl_solve", linalg_ldl_solve);
}
