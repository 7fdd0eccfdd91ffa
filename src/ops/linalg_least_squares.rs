//! Kernels: Householder-reflector products and least squares — `ormqr` (LAPACK's `ormqr`:
//! multiplies by the Q that `geqrf`'s reflectors represent, from either side, transposed or not)
//! and `linalg_lstsq` with PyTorch's CPU drivers: `gels` (QR, or LQ for wide matrices; full
//! rank assumed), `gelsy` (the default: QR with column pivoting, rank from the leading
//! triangle's condition number, minimum-norm solution), `gelsd` / `gelss` (SVD: rank from
//! `rcond * s_max`, singular values returned). Residuals, rank and singular values are filled
//! per driver as ATen does. Real float32/float64, batched (A and B broadcast), computed in f64.
//!
//! `gelsy` decides the rank from the exact condition number of each leading triangle of R,
//! where LAPACK uses an incremental estimate (`dlaic1`); the two agree except for a triangle
//! whose condition number is within the estimate's error of `1 / rcond`.

use super::linalg_decomp::{
    geqr2, householder_step, matrices, matrix_singular_values, svd_of, tensor, transpose, tuple,
};
use super::{Args, Registry};
use crate::ops::kernels::{
    check_rank, check_size, invalid_argument, shape_mismatch, size_mismatch, wrong_dtype,
};
use crate::tensor::RankRequirement;
use crate::tensor::{DType, Tensor};
use crate::values::IValue;

type R = crate::Result<IValue>;

/// Householder reflector `i` of a row-major `rows x cols` reflector matrix: 1 at `i`, the
/// entries below the diagonal of column `i` after it, 0 before.
fn reflector(a: &[f64], rows: usize, cols: usize, i: usize) -> Vec<f64> {
    (0..rows)
        .map(|r| match r.cmp(&i) {
            std::cmp::Ordering::Less => 0.0,
            std::cmp::Ordering::Equal => 1.0,
            std::cmp::Ordering::Greater => a[r * cols + i],
        })
        .collect()
}

/// `C := H C` (`left`) or `C := C H` for `H = I - tau v v^T`; `c` is row-major `rows x cols`.
fn apply_reflector(c: &mut [f64], rows: usize, cols: usize, v: &[f64], tau: f64, left: bool) {
    if tau == 0.0 {
        return;
    }
    if left {
        for j in 0..cols {
            let w: f64 = (0..rows).map(|r| v[r] * c[r * cols + j]).sum();
            for r in 0..rows {
                c[r * cols + j] -= tau * w * v[r];
            }
        }
    } else {
        for r in 0..rows {
            let w: f64 = (0..cols).map(|j| c[r * cols + j] * v[j]).sum();
            for j in 0..cols {
                c[r * cols + j] -= tau * w * v[j];
            }
        }
    }
}

/// `Q C`, `Q^T C`, `C Q` or `C Q^T` for `Q = H(0) ... H(t-1)` from the reflectors of `a`
/// (`nq x k`, row-major) and their `tau` (`t` values); `c` is `rows x cols`.
#[allow(clippy::too_many_arguments)]
fn apply_q(
    a: &[f64],
    nq: usize,
    k: usize,
    tau: &[f64],
    c: &mut [f64],
    rows: usize,
    cols: usize,
    left: bool,
    transpose: bool,
) {
    // H(0) acts first for Q^T C and C Q, last for Q C and C Q^T
    let forward = left == transpose;
    let order: Vec<usize> = if forward {
        (0..tau.len()).collect()
    } else {
        (0..tau.len()).rev().collect()
    };
    for i in order {
        let v = reflector(a, nq, k, i);
        apply_reflector(c, rows, cols, &v, tau[i], left);
    }
}

/// `ormqr(self, input2 = tau, input3 = C, left, transpose)`.
fn ormqr(args: &mut Args<'_>) -> R {
    let op = "torch.ormqr";
    let input = args.tensor(0)?;
    let tau = args.tensor(1)?;
    let other = args.tensor(2)?;
    let (left, transpose) = (args.bool(3)?, args.bool(4)?);
    let nd = input.dim();
    check_rank(op, "input", RankRequirement::AtLeast(2), input.shape())?;
    check_rank(op, "other", RankRequirement::AtLeast(2), other.shape())?;
    check_rank(op, "tau", RankRequirement::Exactly(nd - 1), tau.shape())?;
    check_rank(op, "other", RankRequirement::Exactly(nd), other.shape())?;
    let (nq, k) = (input.shape()[nd - 2], input.shape()[nd - 1]);
    let (rows, cols) = (other.shape()[nd - 2], other.shape()[nd - 1]);
    let batch = &input.shape()[..nd - 2];
    for (name, x) in [("tau", &tau), ("other", &other)] {
        if x.shape()[..nd - 2] != *batch {
            return Err(shape_mismatch(
                op,
                format!("the batch dimensions of {name} (input.shape[:-2])"),
                batch,
                &x.shape()[..nd - 2],
            ));
        }
    }
    let (side, side_len) = if left { (-2, rows) } else { (-1, cols) };
    if side_len != nq {
        return Err(size_mismatch(
            op,
            format!("other.shape[{side}] (input.shape[-2])"),
            nq as i64,
            side_len as i64,
        ));
    }
    let t = tau.shape()[nd - 2];
    if t != nq.min(k) {
        return Err(size_mismatch(
            op,
            format!("tau.shape[-1] (min(other.shape[{side}], input.shape[-1]))"),
            nq.min(k) as i64,
            t as i64,
        ));
    }
    for (name, x) in [("other", &other), ("tau", &tau)] {
        if x.dtype() != input.dtype() {
            return Err(wrong_dtype(
                op,
                name,
                format!("{} (the input's dtype)", input.dtype()),
                x.dtype(),
            ));
        }
    }
    let a = matrices(op, &input, false)?;
    let taus = tau.contiguous()?.to_vec::<f64>()?;
    let mut cs = other.contiguous()?.to_vec::<f64>()?;
    for b in 0..a.count() {
        apply_q(
            a.mat(b),
            nq,
            k,
            &taus[b * t..(b + 1) * t],
            &mut cs[b * rows * cols..(b + 1) * rows * cols],
            rows,
            cols,
            left,
            transpose,
        );
    }
    Ok(IValue::Tensor(tensor(cs, other.shape(), a.dtype)?))
}

#[derive(Clone, Copy, PartialEq)]
enum Driver {
    Gels,
    Gelsy,
    Gelsd,
    Gelss,
}

/// One least-squares problem's answer: the `n x k` solution, LAPACK's rows `n..m` of the
/// transformed right-hand side where the driver leaves them (for the residuals), the rank and
/// the singular values.
struct Solved {
    x: Vec<f64>,
    residual_rows: Option<Vec<f64>>,
    rank: i64,
    singular: Vec<f64>,
}

/// Solves the upper-triangular `r x r` system held in the leading block of the row-major
/// `cols`-wide matrix `t`, for the `r x k` right-hand side `b`, in place.
fn back_substitute(t: &[f64], cols: usize, r: usize, b: &mut [f64], k: usize) {
    for i in (0..r).rev() {
        for c in 0..k {
            let s: f64 = (i + 1..r).map(|j| t[i * cols + j] * b[j * k + c]).sum();
            b[i * k + c] = (b[i * k + c] - s) / t[i * cols + i];
        }
    }
}

fn full_rank_err(i: usize) -> crate::Error {
    invalid_argument(
        "torch.linalg.lstsq",
        "input",
        "must have full rank for the least squares solution",
        format!("a rank-deficient matrix (error code: {i})"),
    )
}

/// `gels`: QR (`m >= n`) or LQ (`m < n`) of a full-rank A; an all-zero A gives zero (LAPACK
/// zeroes B then, residual rows included).
fn gels(a: &[f64], m: usize, n: usize, b: &[f64], k: usize) -> crate::Result<Solved> {
    if a.iter().all(|&v| v == 0.0) {
        return Ok(Solved {
            x: vec![0.0; n * k],
            residual_rows: (m > n).then(|| vec![0.0; (m - n) * k]),
            rank: 0,
            singular: Vec::new(),
        });
    }
    if m >= n {
        let mut qr = a.to_vec();
        let tau = geqr2(&mut qr, m, n);
        let mut c = b.to_vec();
        apply_q(&qr, m, n, &tau, &mut c, m, k, true, true);
        if let Some(i) = (0..n).find(|&i| qr[i * n + i] == 0.0) {
            return Err(full_rank_err(i + 1));
        }
        back_substitute(&qr, n, n, &mut c, k);
        Ok(Solved {
            x: c[..n * k].to_vec(),
            residual_rows: Some(c[n * k..].to_vec()),
            rank: 0,
            singular: Vec::new(),
        })
    } else {
        // A = L Q with L = R'^T from the QR of A^T (n x m): solve L y = b, x = Q'[y; 0]
        let mut qr = transpose(a, m, n);
        let tau = geqr2(&mut qr, n, m);
        if let Some(i) = (0..m).find(|&i| qr[i * m + i] == 0.0) {
            return Err(full_rank_err(i + 1));
        }
        let mut y = vec![0.0; n * k];
        for i in 0..m {
            for c in 0..k {
                let s: f64 = (0..i).map(|j| qr[j * m + i] * y[j * k + c]).sum();
                y[i * k + c] = (b[i * k + c] - s) / qr[i * m + i];
            }
        }
        apply_q(&qr, n, m, &tau, &mut y, n, k, true, false);
        Ok(Solved {
            x: y,
            residual_rows: None,
            rank: 0,
            singular: Vec::new(),
        })
    }
}

/// `gelsy`: QR with column pivoting (`geqp3`: the largest remaining column norm, LAPACK's
/// norm downdating), the rank as the largest leading triangle R11 with condition number below
/// `1 / rcond`, then the minimum-norm solution of `[R11 R12] P^T x = (Q^T b)[..rank]`.
fn gelsy(a: &[f64], m: usize, n: usize, b: &[f64], k: usize, rcond: f64) -> Solved {
    let mn = m.min(n);
    let mut qr = a.to_vec();
    let mut perm: Vec<usize> = (0..n).collect();
    let col_norm = |qr: &[f64], j: usize, from: usize| {
        (from..m).map(|r| qr[r * n + j].powi(2)).sum::<f64>().sqrt()
    };
    let mut vn1: Vec<f64> = (0..n).map(|j| col_norm(&qr, j, 0)).collect();
    let mut vn2 = vn1.clone();
    let tol3z = f64::EPSILON.sqrt();
    let mut tau = vec![0.0; mn];
    for i in 0..mn {
        // the first column of largest partial norm
        let mut p = i;
        for j in i + 1..n {
            if vn1[j].abs() > vn1[p].abs() {
                p = j;
            }
        }
        if p != i {
            for r in 0..m {
                qr.swap(r * n + p, r * n + i);
            }
            perm.swap(p, i);
            vn1[p] = vn1[i];
            vn2[p] = vn2[i];
        }
        // one Householder step on column i (geqr2's, on the trailing block)
        tau[i] = householder_step(&mut qr, m, n, i);
        // downdate the partial column norms (dlaqp2)
        for j in i + 1..n {
            if vn1[j] != 0.0 {
                let temp = (1.0 - (qr[i * n + j].abs() / vn1[j]).powi(2)).max(0.0);
                let temp2 = temp * (vn1[j] / vn2[j]).powi(2);
                if temp2 <= tol3z {
                    vn1[j] = if i + 1 < m {
                        col_norm(&qr, j, i + 1)
                    } else {
                        0.0
                    };
                    vn2[j] = vn1[j];
                } else {
                    vn1[j] *= temp.sqrt();
                }
            }
        }
    }
    // rank: the largest leading triangle whose condition number stays below 1 / rcond
    let mut rank = 0;
    if mn > 0 && qr[0] != 0.0 {
        rank = 1;
        while rank < mn {
            let r = rank + 1;
            let tri: Vec<f64> = (0..r)
                .flat_map(|i| (0..r).map(move |j| (i, j)))
                .map(|(i, j)| if j >= i { qr[i * n + j] } else { 0.0 })
                .collect();
            let s = matrix_singular_values(&tri, r, r);
            let (smax, smin) = (
                s.first().copied().unwrap_or(0.0),
                s.last().copied().unwrap_or(0.0),
            );
            if smax * rcond <= smin {
                rank = r;
            } else {
                break;
            }
        }
    }
    let mut c = b.to_vec();
    apply_q(&qr, m, n, &tau, &mut c, m, k, true, true);
    // minimum-norm solution of T y = c[..rank], T = [R11 R12] (rank x n): QR of T^T
    let mut t_t = vec![0.0; n * rank];
    for i in 0..rank {
        for j in i..n {
            t_t[j * rank + i] = qr[i * n + j];
        }
    }
    let tau2 = geqr2(&mut t_t, n, rank);
    let mut y = vec![0.0; n * k];
    for i in 0..rank {
        for col in 0..k {
            let s: f64 = (0..i).map(|j| t_t[j * rank + i] * y[j * k + col]).sum();
            y[i * k + col] = (c[i * k + col] - s) / t_t[i * rank + i];
        }
    }
    apply_q(&t_t, n, rank, &tau2, &mut y, n, k, true, false);
    // undo the column permutation: x[perm[j]] = y[j]
    let mut x = vec![0.0; n * k];
    for (j, &pj) in perm.iter().enumerate() {
        x[pj * k..(pj + 1) * k].copy_from_slice(&y[j * k..(j + 1) * k]);
    }
    Solved {
        x,
        residual_rows: None,
        rank: rank as i64,
        singular: Vec::new(),
    }
}

/// `gelsd` / `gelss`: through the SVD; singular values `<= rcond * s_max` count as zero.
fn gelsd(a: &[f64], m: usize, n: usize, b: &[f64], k: usize, rcond: f64) -> Solved {
    let mn = m.min(n);
    let (u, s, vh) = svd_of(a, m, n, false);
    let smax = s.first().copied().unwrap_or(0.0);
    let rank = s.iter().filter(|&&v| v > rcond * smax).count();
    let mut x = vec![0.0; n * k];
    for i in 0..rank {
        for col in 0..k {
            let ub: f64 = (0..m).map(|r| u[r * mn + i] * b[r * k + col]).sum::<f64>() / s[i];
            for j in 0..n {
                x[j * k + col] += vh[i * n + j] * ub;
            }
        }
    }
    // the residual rows' squared sums equal |A x - b|^2 per column
    let residual_rows = (m > n).then(|| {
        (0..m)
            .flat_map(|r| (0..k).map(move |col| (r, col)))
            .map(|(r, col)| {
                let ax: f64 = (0..n).map(|j| a[r * n + j] * x[j * k + col]).sum();
                ax - b[r * k + col]
            })
            .collect()
    });
    Solved {
        x,
        residual_rows,
        rank: rank as i64,
        singular: s,
    }
}

/// `linalg_lstsq(self, b, rcond, *, driver)`: (solution, residuals, rank, singular_values).
fn linalg_lstsq(args: &mut Args<'_>) -> R {
    let op = "torch.linalg.lstsq";
    let input = args.tensor(0)?;
    let other = args.tensor(1)?;
    let driver = match args.opt_str(3)?.as_deref() {
        None | Some("gelsy") => Driver::Gelsy,
        Some("gels") => Driver::Gels,
        Some("gelsd") => Driver::Gelsd,
        Some("gelss") => Driver::Gelss,
        Some(other) => {
            return Err(invalid_argument(
                op,
                "driver",
                "must be one of (gels, gelsy, gelsd, gelss)",
                format!("'{other}'"),
            ))
        }
    };
    check_rank(op, "input", RankRequirement::AtLeast(2), input.shape())?;
    check_rank(op, "other", RankRequirement::AtLeast(1), other.shape())?;
    if input.dtype() != other.dtype() {
        return Err(wrong_dtype(
            op,
            "other",
            format!("{} (the input's dtype)", input.dtype()),
            other.dtype(),
        ));
    }
    let a = matrices(op, &input, false)?;
    let (m, n) = (a.m, a.n);
    // a vector right-hand side has one dimension less than A
    let vector = other.dim() + 1 == input.dim();
    let other = if vector {
        super::shape::unsqueeze(&other, -1)?
    } else {
        other
    };
    let od = other.dim();
    check_size(
        op,
        "other.size(-2) (input.size(-2))",
        m as i64,
        other.shape()[od - 2] as i64,
    )?;
    let k = other.shape()[od - 1];
    let batch = crate::tensor::broadcast_shapes(&a.batch, &other.shape()[..od - 2])?.to_vec();
    let expand = |t: &Tensor, dims: &[usize]| -> crate::Result<Vec<f64>> {
        let mut shape = batch.clone();
        shape.extend_from_slice(dims);
        super::shape::expand_to(t, &shape)?
            .contiguous()?
            .to_vec::<f64>()
    };
    let aa = expand(&input, &[m, n])?;
    let bb = expand(&other, &[m, k])?;
    let eps = if a.dtype == DType::Float32 {
        f32::EPSILON as f64
    } else {
        f64::EPSILON
    };
    let rcond = match args.opt_double(2)? {
        Some(r) if r >= 0.0 => r,
        Some(_) => eps,
        None => eps * m.max(n) as f64,
    };
    let count: usize = batch.iter().product();
    let mut solved = Vec::with_capacity(count);
    for bi in 0..count {
        let am = &aa[bi * m * n..(bi + 1) * m * n];
        let bm = &bb[bi * m * k..(bi + 1) * m * k];
        solved.push(match driver {
            Driver::Gels => gels(am, m, n, bm, k)?,
            Driver::Gelsy => gelsy(am, m, n, bm, k, rcond),
            Driver::Gelsd | Driver::Gelss => gelsd(am, m, n, bm, k, rcond),
        });
    }
    let with = |dims: &[usize]| {
        let mut s = batch.clone();
        s.extend_from_slice(dims);
        s
    };
    let solution_dims: &[usize] = if vector { &[n] } else { &[n, k] };
    let x: Vec<f64> = solved.iter().flat_map(|s| s.x.iter().copied()).collect();
    let solution = tensor(x, &with(solution_dims), a.dtype)?;
    // residuals: m > n, not gelsy, and for the SVD drivers every matrix of full rank
    let full_rank = solved.iter().all(|s| s.rank == n as i64);
    let residuals = if m > n
        && (driver == Driver::Gels
            || (matches!(driver, Driver::Gelsd | Driver::Gelss) && full_rank))
    {
        let mut sums = Vec::with_capacity(count * k);
        for s in &solved {
            let rows = s.residual_rows.as_deref().unwrap_or(&[]);
            for col in 0..k {
                sums.push(rows.iter().skip(col).step_by(k).map(|v| v * v).sum::<f64>());
            }
        }
        tensor(sums, &with(&[k]), a.dtype)?
    } else {
        Tensor::zeros(&[0], a.dtype)?
    };
    let rank = if driver == Driver::Gels {
        Tensor::zeros(&[0], DType::Int64)?
    } else {
        Tensor::from_vec(solved.iter().map(|s| s.rank).collect::<Vec<i64>>(), &batch)?
    };
    let singular = if matches!(driver, Driver::Gelsd | Driver::Gelss) {
        let s: Vec<f64> = solved
            .iter()
            .flat_map(|s| s.singular.iter().copied())
            .collect();
        tensor(s, &with(&[m.min(n)]), a.dtype)?
    } else {
        Tensor::zeros(&[0], a.dtype)?
    };
    Ok(tuple(vec![solution, residuals, rank, singular]))
}

pub(crate) fn register(r: &mut Registry) {
    r.add("aten::ormqr", ormqr);
    r.add("aten::linalg_lstsq", linalg_lstsq);
}
