//! Kernels: dense matrix decompositions and what is built on them — determinants (`det`,
//! `slogdet`, `logdet`), inverses (`inverse`, `linalg_inv`, `linalg_inv_ex`), `linalg_solve`,
//! `linalg_cholesky` / `linalg_cholesky_ex` and `matrix_power`. Batched over leading dimensions; float32/float64, computed in f64 with
//! LU factorization under partial pivoting (as LAPACK's getrf) and rounded once to the dtype.

use super::kernels::{
    check_rank, check_size, invalid_argument, rank_mismatch, shape_mismatch, size_mismatch,
    unsupported_feature, wrong_dtype,
};
use super::linalg::value_err;
use super::{Args, Registry};
use crate::tensor::{broadcast_shapes, DType, RankRequirement, Tensor};
use crate::values::{IValue, Tuple};

type R = crate::Result<IValue>;

/// A batch of square matrices in f64, row-major.
struct Mats {
    data: Vec<f64>,
    batch: Vec<usize>,
    n: usize,
    dtype: DType,
}

impl Mats {
    fn count(&self) -> usize {
        self.batch.iter().product()
    }
    fn mat(&self, b: usize) -> &[f64] {
        &self.data[b * self.n * self.n..(b + 1) * self.n * self.n]
    }
}

fn float_dtype(op: &str, x: &Tensor) -> crate::Result<DType> {
    match x.dtype() {
        d @ (DType::Float32 | DType::Float64) => Ok(d),
        d => Err(wrong_dtype(op, "input", "float or double", d)),
    }
}

/// `x` as a batch of square matrices (`(*, n, n)`).
fn square(op: &str, x: &Tensor) -> crate::Result<Mats> {
    let dtype = float_dtype(op, x)?;
    let nd = x.dim();
    check_rank(op, "A", RankRequirement::AtLeast(2), x.shape())?;
    let (r, c) = (x.shape()[nd - 2], x.shape()[nd - 1]);
    check_size(
        op,
        "A.size(-1) (A must be batches of square matrices)",
        r as i64,
        c as i64,
    )?;
    Ok(Mats {
        data: x.to_vec::<f64>()?,
        batch: x.shape()[..nd - 2].to_vec(),
        n: r,
        dtype,
    })
}

fn out(data: Vec<f64>, shape: &[usize], dtype: DType) -> crate::Result<Tensor> {
    Tensor::from_vec(data, shape)?.to_dtype(dtype)
}

/// In-place LU with partial pivoting of an n x n matrix: returns the row permutation and its
/// sign, or `Err(k)` (1-based) at the first exactly-zero pivot. The pivot is the first row of
/// largest magnitude (BLAS `idamax`), as LAPACK's getrf picks it.
fn lu(a: &mut [f64], n: usize) -> (Vec<usize>, f64, Option<usize>) {
    let (perm, _, sign, singular) = lu_ipiv(a, n);
    (perm, sign, singular)
}

/// [`lu`], also returning getrf's `ipiv`: the 1-based row swapped with row `k` at step `k`.
fn lu_ipiv(a: &mut [f64], n: usize) -> (Vec<usize>, Vec<i32>, f64, Option<usize>) {
    let mut perm: Vec<usize> = (0..n).collect();
    let mut ipiv: Vec<i32> = Vec::with_capacity(n);
    let mut sign = 1.0;
    let mut singular = None;
    for k in 0..n {
        let p = (k..n).fold(k, |best, i| {
            if a[i * n + k].abs() > a[best * n + k].abs() {
                i
            } else {
                best
            }
        });
        ipiv.push(p as i32 + 1);
        if a[p * n + k] == 0.0 {
            singular.get_or_insert(k + 1);
            continue;
        }
        if p != k {
            for j in 0..n {
                a.swap(k * n + j, p * n + j);
            }
            perm.swap(k, p);
            sign = -sign;
        }
        let piv = a[k * n + k];
        for i in k + 1..n {
            let f = a[i * n + k] / piv;
            a[i * n + k] = f;
            for j in k + 1..n {
                a[i * n + j] -= f * a[k * n + j];
            }
        }
    }
    (perm, ipiv, sign, singular)
}

/// Solves `A X = B` for an LU-factored `A` (n x n) and `B` (n x k), in place in `b`.
fn lu_solve(lu: &[f64], perm: &[usize], n: usize, b: &[f64], k: usize) -> Vec<f64> {
    let mut x = vec![0.0; n * k];
    for (i, &p) in perm.iter().enumerate() {
        x[i * k..(i + 1) * k].copy_from_slice(&b[p * k..(p + 1) * k]);
    }
    for i in 0..n {
        for r in 0..i {
            let f = lu[i * n + r];
            for c in 0..k {
                x[i * k + c] -= f * x[r * k + c];
            }
        }
    }
    for i in (0..n).rev() {
        for r in i + 1..n {
            let f = lu[i * n + r];
            for c in 0..k {
                x[i * k + c] -= f * x[r * k + c];
            }
        }
        let d = lu[i * n + i];
        for c in 0..k {
            x[i * k + c] /= d;
        }
    }
    x
}

/// (sign, log|det|) of each matrix.
fn slogdet_of(m: &Mats) -> (Vec<f64>, Vec<f64>) {
    let n = m.n;
    let (mut signs, mut logs) = (Vec::new(), Vec::new());
    for b in 0..m.count() {
        let mut a = m.mat(b).to_vec();
        let (_, mut sign, singular) = lu(&mut a, n);
        if singular.is_some() {
            signs.push(0.0);
            logs.push(f64::NEG_INFINITY);
            continue;
        }
        let mut l = 0.0;
        for i in 0..n {
            let d = a[i * n + i];
            if d < 0.0 {
                sign = -sign;
            }
            l += d.abs().ln();
        }
        signs.push(sign);
        logs.push(l);
    }
    (signs, logs)
}

fn det(args: &mut Args<'_>) -> R {
    let m = square(args.op, &args.tensor(0)?)?;
    let (s, l) = slogdet_of(&m);
    let d = s.iter().zip(&l).map(|(s, l)| s * l.exp()).collect();
    Ok(IValue::Tensor(out(d, &m.batch, m.dtype)?))
}

fn slogdet(args: &mut Args<'_>) -> R {
    let m = square(args.op, &args.tensor(0)?)?;
    let (s, l) = slogdet_of(&m);
    Ok(IValue::Tuple(Tuple::new(vec![
        IValue::Tensor(out(s, &m.batch, m.dtype)?),
        IValue::Tensor(out(l, &m.batch, m.dtype)?),
    ])))
}

fn logdet(args: &mut Args<'_>) -> R {
    let m = square(args.op, &args.tensor(0)?)?;
    let (s, l) = slogdet_of(&m);
    let d = s
        .iter()
        .zip(&l)
        .map(|(&s, &l)| if s < 0.0 { f64::NAN } else { l })
        .collect();
    Ok(IValue::Tensor(out(d, &m.batch, m.dtype)?))
}

/// A matrix LU finds singular: diagonal element `k` (1-based, as PyTorch counts) of U is zero.
fn singular_matrix(op: &str, k: impl std::fmt::Display) -> crate::Error {
    invalid_argument(
        op,
        "A",
        "must be invertible",
        format!("a singular matrix (diagonal element {k} of its LU factor U is zero)"),
    )
}

fn singular_err(op: &str, k: usize) -> crate::Error {
    singular_matrix(op, k)
}

/// B whose rows (columns for `XA = B`) do not match A's size `n`.
fn incompatible_b(op: &str, left: bool, n: usize, rows: usize) -> crate::Error {
    size_mismatch(
        op,
        if left {
            "B.size(-2) (A.size(-1), for AX = B)"
        } else {
            "B.size(-1) (A.size(-1), for XA = B)"
        },
        n as i64,
        rows as i64,
    )
}

fn inv_of(op: &str, m: &Mats) -> crate::Result<Vec<f64>> {
    let n = m.n;
    let eye: Vec<f64> = (0..n * n)
        .map(|i| if i / n == i % n { 1.0 } else { 0.0 })
        .collect();
    let mut res = Vec::with_capacity(m.data.len());
    for b in 0..m.count() {
        let mut a = m.mat(b).to_vec();
        let (perm, _, singular) = lu(&mut a, n);
        if let Some(k) = singular {
            return Err(singular_err(op, k));
        }
        res.extend(lu_solve(&a, &perm, n, &eye, n));
    }
    Ok(res)
}

fn inverse(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let m = square(args.op, &x)?;
    let d = inv_of(args.op, &m)?;
    Ok(IValue::Tensor(out(d, x.shape(), m.dtype)?))
}

/// Index into a broadcast operand: the linear batch index `i` of `out` mapped onto `shape`.
fn bcast_index(mut i: usize, out: &[usize], shape: &[usize]) -> usize {
    let off = out.len() - shape.len();
    let (mut idx, mut stride) = (0, 1);
    for d in (0..out.len()).rev() {
        let coord = i % out[d];
        i /= out[d];
        if d >= off {
            let s = shape[d - off];
            if s != 1 {
                idx += coord * stride;
            }
            stride *= s;
        }
    }
    idx
}

fn transpose_last2(data: &[f64], count: usize, r: usize, c: usize) -> Vec<f64> {
    let mut o = vec![0.0; data.len()];
    for b in 0..count {
        for i in 0..r {
            for j in 0..c {
                o[b * r * c + j * r + i] = data[b * r * c + i * c + j];
            }
        }
    }
    o
}

fn linalg_solve(args: &mut Args<'_>) -> R {
    let op = args.op;
    let a_t = args.tensor(0)?;
    let b_t = args.tensor(1)?;
    let left = args.bool(2)?;
    let mut a = square(op, &a_t)?;
    let dtype = match (a.dtype, float_dtype(op, &b_t)?) {
        (DType::Float32, DType::Float32) => DType::Float32,
        _ => DType::Float64,
    };
    let n = a.n;
    // B is a (batch of) vector(s) when it has one dimension less than A and matches its batch
    let vector = b_t.dim() == 1
        || (b_t.dim() + 1 == a_t.dim() && b_t.shape() == &a_t.shape()[..a_t.dim() - 1]);
    let (b_batch, br, bc) = if vector {
        let nd = b_t.dim();
        (b_t.shape()[..nd - 1].to_vec(), b_t.shape()[nd - 1], 1)
    } else {
        let nd = b_t.dim();
        if nd < 2 {
            return Err(rank_mismatch(
                op,
                "B",
                RankRequirement::AtLeast(1),
                b_t.shape(),
            ));
        }
        (
            b_t.shape()[..nd - 2].to_vec(),
            b_t.shape()[nd - 2],
            b_t.shape()[nd - 1],
        )
    };
    let mut b_data = b_t.to_vec::<f64>()?;
    let b_count: usize = b_batch.iter().product();
    // left=False solves X A = B, i.e. A^T X^T = B^T
    let (rows, cols) = if left || vector { (br, bc) } else { (bc, br) };
    if !left && !vector {
        b_data = transpose_last2(&b_data, b_count, br, bc);
        a.data = transpose_last2(&a.data, a.count(), n, n);
    }
    if rows != n {
        return Err(incompatible_b(op, left, n, rows));
    }
    let batch = broadcast_shapes(&a.batch, &b_batch)?.to_vec();
    let count: usize = batch.iter().product();
    let mut res = Vec::with_capacity(count * n * cols);
    let mut cache: Option<(usize, Vec<f64>, Vec<usize>)> = None;
    for i in 0..count {
        let ai = bcast_index(i, &batch, &a.batch);
        let bi = bcast_index(i, &batch, &b_batch);
        if cache.as_ref().is_none_or(|c| c.0 != ai) {
            let mut f = a.mat(ai).to_vec();
            let (perm, _, singular) = lu(&mut f, n);
            if let Some(k) = singular {
                return Err(singular_matrix(op, k));
            }
            cache = Some((ai, f, perm));
        }
        if let Some((_, f, perm)) = &cache {
            res.extend(lu_solve(
                f,
                perm,
                n,
                &b_data[bi * n * cols..(bi + 1) * n * cols],
                cols,
            ));
        }
    }
    let mut shape = batch;
    if vector {
        shape.push(n);
    } else if left {
        shape.extend([n, cols]);
    } else {
        res = transpose_last2(&res, count, n, cols);
        shape.extend([cols, n]);
    }
    Ok(IValue::Tensor(out(res, &shape, dtype)?))
}

/// Solve `t x = b` for one n x n triangular `t` (row-major) and `k` right-hand columns.
fn triangular_solve(t: &[f64], n: usize, b: &[f64], k: usize, upper: bool, unit: bool) -> Vec<f64> {
    let mut x = b.to_vec();
    let rows: Vec<usize> = if upper {
        (0..n).rev().collect()
    } else {
        (0..n).collect()
    };
    for &i in &rows {
        for c in 0..k {
            let mut s = x[i * k + c];
            let others: Box<dyn Iterator<Item = usize>> = if upper {
                Box::new(i + 1..n)
            } else {
                Box::new(0..i)
            };
            for j in others {
                s -= t[i * n + j] * x[j * k + c];
            }
            x[i * k + c] = if unit { s } else { s / t[i * n + i] };
        }
    }
    x
}

/// linalg_solve_triangular(A, B, *, upper, left=True, unitriangular=False): batched, batch
/// dims broadcast; only the triangle `upper` names is read.
fn linalg_solve_triangular(args: &mut Args<'_>) -> R {
    let (a_t, b_t) = (args.tensor(0)?, args.tensor(1)?);
    let (upper, left, unit) = (args.bool(2)?, args.bool(3)?, args.bool(4)?);
    Ok(IValue::Tensor(solve_triangular(
        args.op, &a_t, &b_t, upper, left, unit,
    )?))
}

/// `A X = B` (or `X A = B` without `left`) for triangular `A` (the `upper` triangle read, a
/// unit diagonal assumed with `unit`), batch dims broadcast; float32 only if both are.
fn solve_triangular(
    op: &str,
    a_t: &Tensor,
    b_t: &Tensor,
    upper: bool,
    left: bool,
    unit: bool,
) -> crate::Result<Tensor> {
    let mut a = square(op, a_t)?;
    let dtype = match (a.dtype, float_dtype(op, b_t)?) {
        (DType::Float32, DType::Float32) => DType::Float32,
        _ => DType::Float64,
    };
    let n = a.n;
    let nd = b_t.dim();
    check_rank(op, "B", RankRequirement::AtLeast(2), b_t.shape())?;
    let (b_batch, br, bc) = (
        b_t.shape()[..nd - 2].to_vec(),
        b_t.shape()[nd - 2],
        b_t.shape()[nd - 1],
    );
    let b_count: usize = b_batch.iter().product();
    let mut b_data = b_t.to_vec::<f64>()?;
    // X A = B is A^T X^T = B^T, and A^T is triangular the other way
    let (rows, cols, tri_upper) = if left {
        (br, bc, upper)
    } else {
        b_data = transpose_last2(&b_data, b_count, br, bc);
        a.data = transpose_last2(&a.data, a.count(), n, n);
        (bc, br, !upper)
    };
    if rows != n {
        return Err(incompatible_b(op, left, n, rows));
    }
    let batch = broadcast_shapes(&a.batch, &b_batch)?.to_vec();
    let count: usize = batch.iter().product();
    let mut res = Vec::with_capacity(count * n * cols);
    for i in 0..count {
        let ai = bcast_index(i, &batch, &a.batch);
        let bi = bcast_index(i, &batch, &b_batch);
        res.extend(triangular_solve(
            a.mat(ai),
            n,
            &b_data[bi * n * cols..(bi + 1) * n * cols],
            cols,
            tri_upper,
            unit,
        ));
    }
    let mut shape = batch;
    if left {
        shape.extend([n, cols]);
    } else {
        res = transpose_last2(&res, count, n, cols);
        shape.extend([cols, n]);
    }
    out(res, &shape, dtype)
}

fn linalg_cholesky(args: &mut Args<'_>) -> R {
    let op = args.op;
    let x = args.tensor(0)?;
    let upper = args.bool(1)?;
    let m = square(op, &x)?;
    let n = m.n;
    let mut res = Vec::with_capacity(m.data.len());
    for b in 0..m.count() {
        let a = m.mat(b);
        let mut l = vec![0.0; n * n];
        for j in 0..n {
            let mut d = a[j * n + j];
            for k in 0..j {
                d -= l[j * n + k] * l[j * n + k];
            }
            if d.is_nan() || d <= 0.0 {
                return Err(invalid_argument(
                    op,
                    "A",
                    "must be positive-definite",
                    format!("a matrix whose leading minor of order {} is not", j + 1),
                ));
            }
            let d = d.sqrt();
            l[j * n + j] = d;
            for i in j + 1..n {
                let mut s = a[i * n + j];
                for k in 0..j {
                    s -= l[i * n + k] * l[j * n + k];
                }
                l[i * n + j] = s / d;
            }
        }
        if upper {
            l = transpose_last2(&l, 1, n, n);
        }
        res.extend(l);
    }
    Ok(IValue::Tensor(out(res, x.shape(), m.dtype)?))
}

fn matmul_sq(a: &[f64], b: &[f64], n: usize) -> Vec<f64> {
    let mut c = vec![0.0; n * n];
    for i in 0..n {
        for k in 0..n {
            let f = a[i * n + k];
            for j in 0..n {
                c[i * n + j] += f * b[k * n + j];
            }
        }
    }
    c
}

fn matrix_power(args: &mut Args<'_>) -> R {
    let op = args.op;
    let x = args.tensor(0)?;
    let p = args.int(1)?;
    let mut m = square(op, &x)?;
    let n = m.n;
    if p < 0 {
        m.data = inv_of(op, &m)?;
    }
    let e = p.unsigned_abs();
    let mut res = Vec::with_capacity(m.data.len());
    for b in 0..m.count() {
        let mut acc: Vec<f64> = (0..n * n)
            .map(|i| if i / n == i % n { 1.0 } else { 0.0 })
            .collect();
        let mut base = m.mat(b).to_vec();
        let mut k = e;
        while k > 0 {
            if k & 1 == 1 {
                acc = matmul_sq(&acc, &base, n);
            }
            k >>= 1;
            if k > 0 {
                base = matmul_sq(&base, &base, n);
            }
        }
        res.extend(acc);
    }
    Ok(IValue::Tensor(out(res, x.shape(), m.dtype)?))
}

/// The `_ex` variants (`linalg_inv_ex`, `linalg_cholesky_ex`): `factor`'s result with an int32
/// `info` of zeros over the batch. Shape and dtype errors are raised as by the plain op; a
/// numerical failure (a singular or non-positive-definite matrix) is PyTorch's error with
/// `check_errors`, and without it a typed unsupported error: PyTorch then returns LAPACK's
/// partial factorization and the failing order in `info`, which tsrun does not reproduce.
fn with_info(args: &mut Args<'_>, check_errors_at: usize, factor: fn(&mut Args<'_>) -> R) -> R {
    let (result, m) = checked_factor(args, check_errors_at, factor)?;
    let info = Tensor::zeros(&m.batch, DType::Int32)?;
    Ok(tuple(vec![result, info]))
}

/// `factor`'s tensor result for an `_ex` overload (argument 0 the square input,
/// `check_errors_at` its flag), and the input's matrices: a numerical failure is `factor`'s own
/// error with `check_errors`, else a typed unsupported error (PyTorch would return LAPACK's
/// partial result and a nonzero `info`).
fn checked_factor(
    args: &mut Args<'_>,
    check_errors_at: usize,
    factor: fn(&mut Args<'_>) -> R,
) -> crate::Result<(Tensor, Mats)> {
    let x = args.tensor(0)?;
    let m = square(args.op, &x)?;
    let check_errors = args.bool(check_errors_at)?;
    match factor(args) {
        Ok(IValue::Tensor(t)) => Ok((t, m)),
        Ok(other) => Err(value_err(format!(
            "{}: expected a tensor result, got {}",
            args.op,
            other.kind_name()
        ))),
        Err(e) if check_errors => Err(e),
        Err(e) => Err(unsupported_feature(
            args.op,
            format!("LAPACK's partial result with a nonzero info (check_errors=False) after: {e}"),
        )),
    }
}

/// `linalg_inv_ex(A, *, check_errors)`.
fn linalg_inv_ex(args: &mut Args<'_>) -> R {
    with_info(args, 1, inverse)
}

/// `linalg_cholesky_ex(self, *, upper, check_errors)`.
fn linalg_cholesky_ex(args: &mut Args<'_>) -> R {
    with_info(args, 2, linalg_cholesky)
}

/// A tuple result.
fn tuple(items: Vec<Tensor>) -> IValue {
    IValue::Tuple(Tuple::new(items.into_iter().map(IValue::Tensor).collect()))
}

/// Each matrix's LU factorization as LAPACK's getrf leaves it: (LU row-major, 1-based pivots,
/// info = the first zero pivot or 0), over the batch.
fn lu_factor_batch(m: &Mats) -> (Vec<f64>, Vec<i32>, Vec<i32>) {
    let n = m.n;
    let (mut lu_data, mut pivots, mut info) =
        (Vec::with_capacity(m.data.len()), Vec::new(), Vec::new());
    for b in 0..m.count() {
        let mut a = m.mat(b).to_vec();
        let (_, ipiv, _, singular) = lu_ipiv(&mut a, n);
        lu_data.extend(a);
        pivots.extend(ipiv);
        info.push(singular.map_or(0, |k| k as i32));
    }
    (lu_data, pivots, info)
}

/// The square input of an LU overload with `pivot` (PyTorch's CPU kernels only pivot).
fn lu_input(args: &Args<'_>, pivot_at: Option<usize>) -> crate::Result<Mats> {
    if let Some(i) = pivot_at {
        if !args.bool(i)? {
            return Err(unsupported_feature(
                args.op,
                "LU without pivoting (PyTorch lacks it on the CPU too)",
            ));
        }
    }
    let x = args.tensor(0)?;
    if x.dim() >= 2 && x.shape()[x.dim() - 1] != x.shape()[x.dim() - 2] {
        return Err(unsupported_feature(
            args.op,
            format!("LU of non-square matrices ({:?})", x.shape()),
        ));
    }
    square(args.op, &x)
}

/// (LU, pivots int32, info int32) tensors of a batch.
fn lu_tensors(m: &Mats) -> crate::Result<(Tensor, Tensor, Vec<i32>)> {
    let (lu_data, pivots, info) = lu_factor_batch(m);
    let mut shape = m.batch.clone();
    shape.extend([m.n, m.n]);
    let mut pshape = m.batch.clone();
    pshape.push(m.n);
    Ok((
        out(lu_data, &shape, m.dtype)?,
        Tensor::from_vec(pivots, &pshape)?,
        info,
    ))
}

/// `linalg_lu_factor_ex(A, *, pivot, check_errors)`: (LU, pivots, info); `info` names the first
/// zero pivot of a singular matrix (an error with `check_errors`).
fn linalg_lu_factor_ex(args: &mut Args<'_>) -> R {
    let m = lu_input(args, Some(1))?;
    let (lu_t, piv, info) = lu_tensors(&m)?;
    if args.bool(2)? {
        check_lu_info(args.op, &info)?;
    }
    let info_t = Tensor::from_vec(info, &m.batch)?;
    Ok(tuple(vec![lu_t, piv, info_t]))
}

fn check_lu_info(op: &str, info: &[i32]) -> crate::Result<()> {
    match info.iter().find(|&&k| k > 0) {
        Some(k) => Err(singular_matrix(op, k)),
        None => Ok(()),
    }
}

/// `linalg_lu_factor(A, *, pivot)`: (LU, pivots); a singular matrix is an error.
fn linalg_lu_factor(args: &mut Args<'_>) -> R {
    let m = lu_input(args, Some(1))?;
    let (lu_t, piv, info) = lu_tensors(&m)?;
    check_lu_info(args.op, &info)?;
    Ok(tuple(vec![lu_t, piv]))
}

/// P, L, U of packed LU data (row-major n x n matrices) and 1-based pivots: `A = P L U`.
fn unpack_lu(
    lu_data: &[f64],
    pivots: &[i32],
    count: usize,
    n: usize,
) -> crate::Result<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    let (mut p, mut l, mut u) = (Vec::new(), Vec::new(), Vec::new());
    for b in 0..count {
        let a = &lu_data[b * n * n..(b + 1) * n * n];
        let mut perm: Vec<usize> = (0..n).collect();
        for (k, &piv) in pivots[b * n..(b + 1) * n].iter().enumerate() {
            let j = usize::try_from(piv - 1)
                .ok()
                .filter(|&j| j < n)
                .ok_or_else(|| {
                    invalid_argument("lu_unpack", "LU_pivots", format!("must be in 1..={n}"), piv)
                })?;
            perm.swap(k, j);
        }
        let mut pm = vec![0.0; n * n];
        for (i, &r) in perm.iter().enumerate() {
            pm[r * n + i] = 1.0;
        }
        p.extend(pm);
        for i in 0..n {
            for j in 0..n {
                l.push(match j.cmp(&i) {
                    std::cmp::Ordering::Less => a[i * n + j],
                    std::cmp::Ordering::Equal => 1.0,
                    std::cmp::Ordering::Greater => 0.0,
                });
                u.push(if j >= i { a[i * n + j] } else { 0.0 });
            }
        }
    }
    Ok((p, l, u))
}

/// `linalg_lu(A, *, pivot)`: (P, L, U) with `A = P L U`.
fn linalg_lu(args: &mut Args<'_>) -> R {
    let m = lu_input(args, Some(1))?;
    let (lu_data, pivots, _) = lu_factor_batch(&m);
    let (p, l, u) = unpack_lu(&lu_data, &pivots, m.count(), m.n)?;
    let mut shape = m.batch.clone();
    shape.extend([m.n, m.n]);
    Ok(tuple(vec![
        out(p, &shape, m.dtype)?,
        out(l, &shape, m.dtype)?,
        out(u, &shape, m.dtype)?,
    ]))
}

/// `lu_unpack(LU_data, LU_pivots, unpack_data, unpack_pivots)`: (P, L, U); the parts not
/// unpacked are empty tensors, as PyTorch returns them.
fn lu_unpack(args: &mut Args<'_>) -> R {
    let m = square(args.op, &args.tensor(0)?)?;
    let piv_t = args.tensor(1)?;
    let mut pshape = m.batch.clone();
    pshape.push(m.n);
    if piv_t.shape() != pshape.as_slice() {
        return Err(shape_mismatch(args.op, "LU_pivots", &pshape, piv_t.shape()));
    }
    if !piv_t.dtype().is_integral(false) {
        return Err(wrong_dtype(
            args.op,
            "LU_pivots",
            "an integer tensor",
            piv_t.dtype(),
        ));
    }
    let pivots: Vec<i32> = piv_t
        .to_vec::<i64>()?
        .into_iter()
        .map(|v| v as i32)
        .collect();
    let (p, l, u) = unpack_lu(&m.data, &pivots, m.count(), m.n)?;
    let mut shape = m.batch.clone();
    shape.extend([m.n, m.n]);
    let empty = || Tensor::zeros(&[0], m.dtype);
    let (l, u) = if args.bool(2)? {
        (out(l, &shape, m.dtype)?, out(u, &shape, m.dtype)?)
    } else {
        (empty()?, empty()?)
    };
    let p = if args.bool(3)? {
        out(p, &shape, m.dtype)?
    } else {
        empty()?
    };
    Ok(tuple(vec![p, l, u]))
}

/// `linalg_lu_solve(LU, pivots, B, *, left, adjoint)`: solves `A X = B` (`A^T X = B` with
/// `adjoint`; `X A = B` without `left`) for `A = P L U`.
fn linalg_lu_solve(args: &mut Args<'_>) -> R {
    let op = args.op;
    let lu_t = args.tensor(0)?;
    let (left, adjoint) = (args.bool(3)?, args.bool(4)?);
    let m = square(op, &lu_t)?;
    let n = m.n;
    let pivots: Vec<i32> = args
        .tensor(1)?
        .to_vec::<i64>()?
        .into_iter()
        .map(|v| v as i32)
        .collect();
    check_size(
        op,
        "the number of pivots",
        (m.count() * n) as i64,
        pivots.len() as i64,
    )?;
    let (p, l, u) = unpack_lu(&m.data, &pivots, m.count(), n)?;
    let mut shape = m.batch.clone();
    shape.extend([n, n]);
    let (p, l, u) = (
        out(p, &shape, DType::Float64)?,
        out(l, &shape, DType::Float64)?,
        out(u, &shape, DType::Float64)?,
    );
    let b = args.tensor(2)?;
    let dtype = match (m.dtype, float_dtype(op, &b)?) {
        (DType::Float32, DType::Float32) => DType::Float32,
        _ => DType::Float64,
    };
    let b = b.to_dtype(DType::Float64)?;
    let t = |x: &Tensor| super::shape::transpose(x, -2, -1);
    let matmul = |x: &Tensor, y: &Tensor| super::linalg::matmul_nd(op, x, y, None, 1.0);
    // A = P L U: A X = B is L U X = P^T B; A^T X = B is U^T L^T P^T X = B
    let x = match (left, adjoint) {
        (true, false) => {
            let y = solve_triangular(op, &l, &matmul(&t(&p)?, &b)?, false, true, true)?;
            solve_triangular(op, &u, &y, true, true, false)?
        }
        (true, true) => {
            let y = solve_triangular(op, &t(&u)?, &b, false, true, false)?;
            let z = solve_triangular(op, &t(&l)?, &y, true, true, true)?;
            matmul(&p, &z)?
        }
        // X A = B: X P L U = B, so Y = X P solves Y L U = B
        (false, false) => {
            let y = solve_triangular(op, &u, &b, true, false, false)?;
            let y = solve_triangular(op, &l, &y, false, false, true)?;
            matmul(&y, &t(&p)?)?
        }
        // X A^T = B: X U^T L^T P^T = B, so W = X U^T L^T = B P
        (false, true) => {
            let w = matmul(&b, &p)?;
            let y = solve_triangular(op, &t(&l)?, &w, true, false, true)?;
            solve_triangular(op, &t(&u)?, &y, false, false, false)?
        }
    };
    Ok(IValue::Tensor(x.to_dtype(dtype)?))
}

/// The batch of transposed matrices: ATen factors `A.mT` in `_linalg_det` / `_linalg_slogdet`
/// (LAPACK's column-major view of the row-major input), so their LU and pivots are those of
/// `A^T`.
fn transposed(m: &Mats) -> Mats {
    Mats {
        data: transpose_last2(&m.data, m.count(), m.n, m.n),
        batch: m.batch.clone(),
        n: m.n,
        dtype: m.dtype,
    }
}

/// `_linalg_det(A)`: (det, LU, pivots), the LU of `A^T` as ATen returns it.
fn linalg_det_lu(args: &mut Args<'_>) -> R {
    let m = transposed(&square(args.op, &args.tensor(0)?)?);
    let (s, l) = slogdet_of(&m);
    let d = s.iter().zip(&l).map(|(s, l)| s * l.exp()).collect();
    let (lu_t, piv, _) = lu_tensors(&m)?;
    Ok(tuple(vec![out(d, &m.batch, m.dtype)?, lu_t, piv]))
}

/// `_linalg_slogdet(A)`: (sign, logabsdet, LU, pivots), the LU of `A^T` as ATen returns it.
fn linalg_slogdet_lu(args: &mut Args<'_>) -> R {
    let m = transposed(&square(args.op, &args.tensor(0)?)?);
    let (s, l) = slogdet_of(&m);
    let (lu_t, piv, _) = lu_tensors(&m)?;
    Ok(tuple(vec![
        out(s, &m.batch, m.dtype)?,
        out(l, &m.batch, m.dtype)?,
        lu_t,
        piv,
    ]))
}

/// `linalg_solve_ex(A, B, *, left, check_errors)` (`LU`: `_linalg_solve_ex`, which also
/// returns A's LU and pivots): the solution and an int32 `info` of zeros. A singular `A` is
/// PyTorch's error with `check_errors`; without it PyTorch returns LAPACK's partial result,
/// which tsrun does not reproduce (a typed unsupported error).
fn linalg_solve_ex<const LU: bool>(args: &mut Args<'_>) -> R {
    let (result, m) = checked_factor(args, 3, linalg_solve)?;
    let info = Tensor::zeros(&m.batch, DType::Int32)?;
    if LU {
        let (lu_t, piv, _) = lu_tensors(&m)?;
        return Ok(tuple(vec![result, lu_t, piv, info]));
    }
    Ok(tuple(vec![result, info]))
}

/// `triangular_solve(self=B, A, upper, transpose, unitriangular)`: (X solving `op(A) X = B`,
/// a copy of `A`).
fn triangular_solve_op(args: &mut Args<'_>) -> R {
    let (b, a) = (args.tensor(0)?, args.tensor(1)?);
    let (upper, transpose, unit) = (args.bool(2)?, args.bool(3)?, args.bool(4)?);
    let x = if transpose {
        let at = super::shape::transpose(&a, -2, -1)?;
        solve_triangular(args.op, &at, &b, !upper, true, unit)?
    } else {
        solve_triangular(args.op, &a, &b, upper, true, unit)?
    };
    Ok(tuple(vec![x, a.deep_clone()?]))
}

/// `X` solving `A X = B` for `A = L L^T` (or `U^T U` with `upper`) given its Cholesky factor.
fn cholesky_solve_with(
    op: &str,
    b: &Tensor,
    factor: &Tensor,
    upper: bool,
) -> crate::Result<Tensor> {
    let ft = super::shape::transpose(factor, -2, -1)?;
    let (first, second) = if upper { (&ft, factor) } else { (factor, &ft) };
    let y = solve_triangular(op, first, b, false, true, false)?;
    solve_triangular(op, second, &y, true, true, false)
}

/// `cholesky_solve(self=B, input2=L, upper)`.
fn cholesky_solve(args: &mut Args<'_>) -> R {
    let (b, factor) = (args.tensor(0)?, args.tensor(1)?);
    Ok(IValue::Tensor(cholesky_solve_with(
        args.op,
        &b,
        &factor,
        args.bool(2)?,
    )?))
}

/// `cholesky_inverse(L, upper)`: the inverse of `L L^T` (`U^T U`).
fn cholesky_inverse(args: &mut Args<'_>) -> R {
    let factor = args.tensor(0)?;
    let m = square(args.op, &factor)?;
    let n = m.n;
    let eye: Vec<f64> = (0..n * n)
        .map(|i| if i / n == i % n { 1.0 } else { 0.0 })
        .collect();
    let eye = out(eye, &[n, n], m.dtype)?;
    Ok(IValue::Tensor(cholesky_solve_with(
        args.op,
        &eye,
        &factor,
        args.bool(1)?,
    )?))
}

/// A matrix norm of one n x n matrix for `linalg_cond`: `fro`, `nuc` (from `singular`), or the
/// max/min absolute column (`1`, `-1`) or row (`inf`, `-inf`) sums.
fn cond_norm(a: &[f64], n: usize, p: &CondOrder, singular: impl Fn(&[f64]) -> Vec<f64>) -> f64 {
    let col = |j: usize| (0..n).map(|i| a[i * n + j].abs()).sum::<f64>();
    let row = |i: usize| (0..n).map(|j| a[i * n + j].abs()).sum::<f64>();
    let fold_max = |v: Vec<f64>| v.into_iter().fold(f64::NEG_INFINITY, f64::max);
    let fold_min = |v: Vec<f64>| v.into_iter().fold(f64::INFINITY, f64::min);
    match p {
        CondOrder::Fro => a.iter().map(|v| v * v).sum::<f64>().sqrt(),
        CondOrder::Nuc => singular(a).iter().sum(),
        CondOrder::Num(x) if *x == 1.0 => fold_max((0..n).map(col).collect()),
        CondOrder::Num(x) if *x == -1.0 => fold_min((0..n).map(col).collect()),
        CondOrder::Num(x) if *x > 0.0 => fold_max((0..n).map(row).collect()),
        CondOrder::Num(_) => fold_min((0..n).map(row).collect()),
    }
}

enum CondOrder {
    Fro,
    Nuc,
    Num(f64),
}

/// `linalg_cond(A, p)` (`p_str`: `'fro'` / `'nuc'`): for p None, 2 and -2 the ratio of the
/// extreme singular values; for the other orders `norm(A) * norm(inv(A))`, with inf for a
/// singular matrix as PyTorch.
fn linalg_cond<const STR: bool>(args: &mut Args<'_>) -> R {
    let op = args.op;
    let x = args.tensor(0)?;
    let svd_order = |a: &[f64], n: usize, hi_over_lo: bool| {
        let s = super::linalg_decomp::matrix_singular_values(a, n, n);
        let hi = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let lo = s.iter().copied().fold(f64::INFINITY, f64::min);
        if hi_over_lo {
            hi / lo
        } else {
            lo / hi
        }
    };
    let order = if STR {
        match &*args.str(1)? {
            "fro" => CondOrder::Fro,
            "nuc" => CondOrder::Nuc,
            other => {
                return Err(invalid_argument(
                    op,
                    "p",
                    "must be a valid norm type (fro, nuc, 1, -1, 2, -2, inf, -inf)",
                    format!("'{other}'"),
                ))
            }
        }
    } else {
        match args.opt_scalar(1)? {
            None => CondOrder::Num(2.0),
            Some(p) => CondOrder::Num(p.to_f64()),
        }
    };
    if let CondOrder::Num(p) = order {
        if ![1.0, -1.0, 2.0, -2.0, f64::INFINITY, f64::NEG_INFINITY].contains(&p) {
            return Err(invalid_argument(
                op,
                "p",
                "must be a valid norm type (fro, nuc, 1, -1, 2, -2, inf, -inf)",
                p,
            ));
        }
    }
    let m = square(op, &x)?;
    let n = m.n;
    let mut res = Vec::with_capacity(m.count());
    for b in 0..m.count() {
        let a = m.mat(b);
        res.push(match order {
            CondOrder::Num(2.0) => svd_order(a, n, true),
            CondOrder::Num(-2.0) => svd_order(a, n, false),
            ref other => {
                let mut f = a.to_vec();
                let (perm, _, singular) = lu(&mut f, n);
                if singular.is_some() {
                    f64::INFINITY
                } else {
                    let eye: Vec<f64> = (0..n * n)
                        .map(|i| if i / n == i % n { 1.0 } else { 0.0 })
                        .collect();
                    let inv = lu_solve(&f, &perm, n, &eye, n);
                    let sv = |v: &[f64]| super::linalg_decomp::matrix_singular_values(v, n, n);
                    cond_norm(a, n, other, sv) * cond_norm(&inv, n, other, sv)
                }
            }
        });
    }
    Ok(IValue::Tensor(out(res, &m.batch, m.dtype)?))
}

pub fn register(r: &mut Registry) {
    r.add("aten::linalg_inv_ex", linalg_inv_ex);
    r.add("aten::linalg_inv_ex.inverse", |a| {
        let r = linalg_inv_ex(a)?;
        a.write_outs(2, r)
    });
    r.add("aten::linalg_cholesky_ex", linalg_cholesky_ex);
    r.add("aten::linalg_cholesky_ex.L", |a| {
        let r = linalg_cholesky_ex(a)?;
        a.write_outs(3, r)
    });
    r.add_all(&["aten::det", "aten::linalg_det"], det);
    r.add_all(&["aten::slogdet", "aten::linalg_slogdet"], slogdet);
    r.add("aten::logdet", logdet);
    r.add_all(&["aten::inverse", "aten::linalg_inv"], inverse);
    r.add("aten::linalg_solve", linalg_solve);
    r.add("aten::linalg_solve_triangular", linalg_solve_triangular);
    r.add("aten::linalg_cholesky", linalg_cholesky);
    r.add("aten::linalg_lu_factor_ex", linalg_lu_factor_ex);
    r.add("aten::linalg_lu_factor", linalg_lu_factor);
    r.add("aten::linalg_lu", linalg_lu);
    r.add("aten::lu_unpack", lu_unpack);
    r.add("aten::linalg_lu_solve", linalg_lu_solve);
    r.add("aten::_linalg_det", linalg_det_lu);
    r.add("aten::_linalg_det.result", |a| {
        let r = linalg_det_lu(a)?;
        a.write_outs(1, r)
    });
    r.add("aten::_linalg_slogdet", linalg_slogdet_lu);
    r.add("aten::_linalg_slogdet.sign", |a| {
        let r = linalg_slogdet_lu(a)?;
        a.write_outs(1, r)
    });
    r.add("aten::linalg_solve_ex", linalg_solve_ex::<false>);
    r.add("aten::_linalg_solve_ex", linalg_solve_ex::<true>);
    r.add("aten::_linalg_solve_ex.result", |a| {
        let r = linalg_solve_ex::<true>(a)?;
        a.write_outs(4, r)
    });
    r.add("aten::triangular_solve", triangular_solve_op);
    r.add("aten::triangular_solve.X", |a| {
        let r = triangular_solve_op(a)?;
        a.write_outs(5, r)
    });
    r.add("aten::cholesky_solve", cholesky_solve);
    r.add("aten::cholesky_inverse", cholesky_inverse);
    r.add("aten::linalg_cond", linalg_cond::<false>);
    r.add("aten::linalg_cond.p_str", linalg_cond::<true>);
    r.add_all(
        &["aten::matrix_power", "aten::linalg_matrix_power"],
        matrix_power,
    );
}
