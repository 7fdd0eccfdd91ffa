//! Kernels: dense matrix decompositions and what is built on them — determinants (`det`,
//! `slogdet`, `logdet`), inverses (`inverse`, `linalg_inv`, `linalg_inv_ex`), `linalg_solve`,
//! `linalg_cholesky` / `linalg_cholesky_ex` and `matrix_power`. Batched over leading dimensions; float32/float64, computed in f64 with
//! LU factorization under partial pivoting (as LAPACK's getrf) and rounded once to the dtype.

use super::linalg::{shape_err, value_err};
use super::{Args, Registry};
use crate::tensor::{broadcast_shapes, DType, Tensor};
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
        d => Err(value_err(format!(
            "{op}: Expected a floating point tensor of type float or double, got {d}"
        ))),
    }
}

/// `x` as a batch of square matrices (`(*, n, n)`).
fn square(op: &str, x: &Tensor) -> crate::Result<Mats> {
    let dtype = float_dtype(op, x)?;
    let nd = x.dim();
    if nd < 2 {
        return Err(shape_err(format!(
            "{op}: The input tensor A must have at least 2 dimensions."
        )));
    }
    let (r, c) = (x.shape()[nd - 2], x.shape()[nd - 1]);
    if r != c {
        return Err(shape_err(format!(
            "{op}: A must be batches of square matrices, but they are {r} by {c} matrices"
        )));
    }
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
/// sign, or `Err(k)` (1-based) at the first exactly-zero pivot.
fn lu(a: &mut [f64], n: usize) -> (Vec<usize>, f64, Option<usize>) {
    let mut perm: Vec<usize> = (0..n).collect();
    let mut sign = 1.0;
    let mut singular = None;
    for k in 0..n {
        let p = (k..n)
            .max_by(|&i, &j| a[i * n + k].abs().total_cmp(&a[j * n + k].abs()))
            .unwrap_or(k);
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
    (perm, sign, singular)
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

fn singular_err(op: &str, k: usize) -> crate::Error {
    value_err(format!(
        "{op}: The diagonal element {k} is zero, the inversion could not be completed because the input matrix is singular."
    ))
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
            return Err(shape_err(format!("{op}: B must have at least 1 dimension")));
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
        return Err(shape_err(format!(
            "{op}: Incompatible shapes of A and B for the equation {}",
            if left { "AX = B" } else { "XA = B" }
        )));
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
                return Err(value_err(format!(
                    "{op}: The solver failed because the input matrix is singular. (diagonal element {k} is zero)"
                )));
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
    let op = args.op;
    let a_t = args.tensor(0)?;
    let b_t = args.tensor(1)?;
    let (upper, left, unit) = (args.bool(2)?, args.bool(3)?, args.bool(4)?);
    let mut a = square(op, &a_t)?;
    let dtype = match (a.dtype, float_dtype(op, &b_t)?) {
        (DType::Float32, DType::Float32) => DType::Float32,
        _ => DType::Float64,
    };
    let n = a.n;
    let nd = b_t.dim();
    if nd < 2 {
        return Err(shape_err(format!(
            "{op}: The input tensor B must have at least 2 dimensions."
        )));
    }
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
        return Err(shape_err(format!(
            "{op}: Incompatible shapes of A and B for the equation {}",
            if left { "AX = B" } else { "XA = B" }
        )));
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
    Ok(IValue::Tensor(out(res, &shape, dtype)?))
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
                return Err(value_err(format!(
                    "{op}: The factorization could not be completed because the input is not positive-definite (the leading minor of order {} is not positive-definite).",
                    j + 1
                )));
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
    let x = args.tensor(0)?;
    let m = square(args.op, &x)?;
    let check_errors = args.bool(check_errors_at)?;
    let result = match factor(args) {
        Ok(IValue::Tensor(t)) => t,
        Ok(other) => {
            return Err(value_err(format!(
                "{}: expected a tensor result, got {}",
                args.op,
                other.kind_name()
            )))
        }
        Err(e) if check_errors => return Err(e),
        Err(e) => {
            return Err(crate::tensor::TensorError::Unsupported(format!(
                "{}: {e}; tsrun does not return LAPACK's partial result with a nonzero info \
                 (check_errors=True raises PyTorch's error)",
                args.op
            ))
            .into())
        }
    };
    let info = Tensor::zeros(&m.batch, DType::Int32)?;
    Ok(IValue::Tuple(Tuple::new(vec![
        IValue::Tensor(result),
        IValue::Tensor(info),
    ])))
}

/// `linalg_inv_ex(A, *, check_errors)`.
fn linalg_inv_ex(args: &mut Args<'_>) -> R {
    with_info(args, 1, inverse)
}

/// `linalg_cholesky_ex(self, *, upper, check_errors)`.
fn linalg_cholesky_ex(args: &mut Args<'_>) -> R {
    with_info(args, 2, linalg_cholesky)
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
    r.add_all(
        &["aten::matrix_power", "aten::linalg_matrix_power"],
        matrix_power,
    );
}
