//! Kernels: discrete Fourier transforms (`torch.fft.*`), `stft`/`istft`, the spectral windows
//! (`hann_window`, ...), and the complex <-> real views (`view_as_real`, `view_as_complex`).
//!
//! Transforms compute in complex128 with an iterative radix-2 FFT for power-of-two lengths and
//! Bluestein's chirp-z algorithm (over a power-of-two FFT) for every other length; results are
//! rounded once to the output dtype (complex64 unless the input is double/complex128, as PyTorch).

use super::creation::factory_dtype;
use super::kernels::{
    check_rank, check_size, invalid_argument, size_mismatch, unsupported_feature, wrong_dtype,
};
use super::{Args, Registry};
use crate::tensor::RankRequirement;
use crate::tensor::{wrap_dim, DType, Tensor};
use crate::values::IValue;
use num_complex::Complex64 as C;
use std::f64::consts::PI;

type R = crate::Result<IValue>;

fn t(x: Tensor) -> R {
    Ok(IValue::Tensor(x))
}

// ---------------------------------------------------------------- the 1-D transform

/// A reusable unnormalized DFT of one length, either direction.
struct Plan {
    n: usize,
    kind: Kind,
}

enum Kind {
    /// `tw[k] = exp(-2πik/n)` for `k < n/2`.
    Pow2 { tw: Vec<C> },
    /// Bluestein: a length-`m` power-of-two convolution. `chirp[k] = exp(-πik²/n)`;
    /// `bfft`/`bfft_inv` are the FFTs of the conjugate chirp for the forward/inverse direction.
    Bluestein {
        m: usize,
        tw: Vec<C>,
        chirp: Vec<C>,
        bfft: Vec<C>,
        bfft_inv: Vec<C>,
    },
}

fn twiddles(n: usize) -> Vec<C> {
    (0..n / 2)
        .map(|k| C::from_polar(1.0, -2.0 * PI * k as f64 / n as f64))
        .collect()
}

/// In-place iterative radix-2 FFT (`a.len()` a power of two, `tw` its twiddles).
fn fft_pow2(a: &mut [C], tw: &[C], inverse: bool) {
    let n = a.len();
    if n <= 1 {
        return;
    }
    let mut j = 0usize;
    for i in 1..n {
        let mut bit = n >> 1;
        while j & bit != 0 {
            j ^= bit;
            bit >>= 1;
        }
        j |= bit;
        if i < j {
            a.swap(i, j);
        }
    }
    let mut len = 2;
    while len <= n {
        let step = n / len;
        let half = len / 2;
        for s in (0..n).step_by(len) {
            for k in 0..half {
                let w = if inverse {
                    tw[k * step].conj()
                } else {
                    tw[k * step]
                };
                let u = a[s + k];
                let v = a[s + k + half] * w;
                a[s + k] = u + v;
                a[s + k + half] = u - v;
            }
        }
        len <<= 1;
    }
}

impl Plan {
    fn new(n: usize) -> Plan {
        if n.is_power_of_two() || n <= 1 {
            return Plan {
                n,
                kind: Kind::Pow2 { tw: twiddles(n) },
            };
        }
        let m = (2 * n - 1).next_power_of_two();
        let tw = twiddles(m);
        // k² mod 2n keeps the phase argument small and exact
        let chirp: Vec<C> = (0..n)
            .map(|k| {
                let k2 = (k as u128 * k as u128 % (2 * n as u128)) as f64;
                C::from_polar(1.0, -PI * k2 / n as f64)
            })
            .collect();
        let conv = |c: &dyn Fn(C) -> C| {
            let mut b = vec![C::new(0.0, 0.0); m];
            for k in 0..n {
                b[k] = c(chirp[k]);
                if k > 0 {
                    b[m - k] = c(chirp[k]);
                }
            }
            fft_pow2(&mut b, &tw, false);
            b
        };
        let bfft = conv(&|w: C| w.conj());
        let bfft_inv = conv(&|w: C| w);
        Plan {
            n,
            kind: Kind::Bluestein {
                m,
                tw,
                chirp,
                bfft,
                bfft_inv,
            },
        }
    }

    /// Unnormalized DFT of `a` (length `n`) in place; `inverse` uses `exp(+2πi...)`.
    fn run(&self, a: &mut [C], scratch: &mut Vec<C>, inverse: bool) {
        match &self.kind {
            Kind::Pow2 { tw } => fft_pow2(a, tw, inverse),
            Kind::Bluestein {
                m,
                tw,
                chirp,
                bfft,
                bfft_inv,
            } => {
                let w = |k: usize| if inverse { chirp[k].conj() } else { chirp[k] };
                scratch.clear();
                scratch.resize(*m, C::new(0.0, 0.0));
                for k in 0..self.n {
                    scratch[k] = a[k] * w(k);
                }
                fft_pow2(scratch, tw, false);
                let b = if inverse { bfft_inv } else { bfft };
                for (x, y) in scratch.iter_mut().zip(b) {
                    *x *= y;
                }
                fft_pow2(scratch, tw, true);
                let inv_m = 1.0 / *m as f64;
                for k in 0..self.n {
                    a[k] = scratch[k] * w(k) * inv_m;
                }
            }
        }
    }
}

// ---------------------------------------------------------------- n-d buffers

/// A contiguous complex128 buffer with its shape.
struct Buf {
    data: Vec<C>,
    shape: Vec<usize>,
}

impl Buf {
    fn from_tensor(x: &Tensor) -> crate::Result<Buf> {
        Ok(Buf {
            data: x.to_vec::<C>()?,
            shape: x.shape().to_vec(),
        })
    }

    fn split(&self, dim: usize) -> (usize, usize, usize) {
        let outer = self.shape[..dim].iter().product();
        let inner = self.shape[dim + 1..].iter().product();
        (outer, self.shape[dim], inner)
    }

    /// Zero-pad or truncate dimension `dim` to `n` (keeping the leading elements).
    fn resize(&mut self, dim: usize, n: usize) {
        let (outer, len, inner) = self.split(dim);
        if len == n {
            return;
        }
        let mut out = vec![C::new(0.0, 0.0); outer * n * inner];
        let keep = len.min(n);
        for o in 0..outer {
            let src = &self.data[o * len * inner..o * len * inner + keep * inner];
            out[o * n * inner..o * n * inner + keep * inner].copy_from_slice(src);
        }
        self.data = out;
        self.shape[dim] = n;
    }

    /// Unnormalized DFT along `dim`, each result multiplied by `scale`.
    fn transform(&mut self, dim: usize, inverse: bool, scale: f64) {
        let (outer, len, inner) = self.split(dim);
        if len == 0 || outer * inner == 0 {
            return;
        }
        let plan = Plan::new(len);
        let mut line = vec![C::new(0.0, 0.0); len];
        let mut scratch = Vec::new();
        for o in 0..outer {
            for i in 0..inner {
                let base = o * len * inner + i;
                for (k, x) in line.iter_mut().enumerate() {
                    *x = self.data[base + k * inner];
                }
                plan.run(&mut line, &mut scratch, inverse);
                for (k, x) in line.iter().enumerate() {
                    self.data[base + k * inner] = x * scale;
                }
            }
        }
    }

    /// Complex tensor of `dtype` (complex64 or complex128).
    fn into_complex(self, dtype: DType) -> crate::Result<Tensor> {
        Tensor::from_vec(self.data, &self.shape)?.to_dtype(dtype)
    }

    /// The real parts as a tensor of `dtype`.
    fn into_real(self, dtype: DType) -> crate::Result<Tensor> {
        let re: Vec<f64> = self.data.iter().map(|c| c.re).collect();
        Tensor::from_vec(re, &self.shape)?.to_dtype(dtype)
    }
}

/// The complex dtype a transform of `d` produces.
fn complex_out(d: DType) -> DType {
    match d {
        DType::Float64 | DType::Complex128 => DType::Complex128,
        _ => DType::Complex64,
    }
}

fn real_out(d: DType) -> DType {
    complex_out(d).to_real()
}

fn check_input(op: &str, x: &Tensor, real_only: bool) -> crate::Result<()> {
    if real_only && x.dtype().is_complex() {
        return Err(wrong_dtype(op, "input", "a real tensor", x.dtype()));
    }
    check_rank(op, "input", RankRequirement::AtLeast(1), x.shape())?;
    Ok(())
}

/// The factor a transform of total length `n` is multiplied by under `norm`.
fn norm_scale(op: &str, norm: Option<&str>, n: usize, forward: bool) -> crate::Result<f64> {
    let n = n.max(1) as f64;
    Ok(match (norm.unwrap_or("backward"), forward) {
        ("backward", true) | ("forward", false) => 1.0,
        ("backward", false) | ("forward", true) => 1.0 / n,
        ("ortho", _) => 1.0 / n.sqrt(),
        (other, _) => {
            return Err(invalid_argument(
                op,
                "norm",
                "must be one of backward, forward, ortho",
                format!("'{other}'"),
            ))
        }
    })
}

fn signal_len(op: &str, n: i64) -> crate::Result<usize> {
    if n < 1 {
        return Err(invalid_argument(op, "n", "must be at least 1", n));
    }
    Ok(n as usize)
}

/// The (dims, sizes) an n-d transform covers: PyTorch's `canonicalize_fft_shape_and_dim_args`.
/// A size of `None` keeps the input's size (irfft fills in its own default for the last one).
fn fft_dims(
    op: &str,
    x: &Tensor,
    s: Option<Vec<i64>>,
    dim: Option<Vec<i64>>,
) -> crate::Result<(Vec<usize>, Vec<Option<usize>>)> {
    let nd = x.dim();
    let dims: Vec<usize> = match (&dim, &s) {
        (Some(d), _) => d
            .iter()
            .map(|&d| wrap_dim(d, nd))
            .collect::<Result<_, _>>()?,
        (None, Some(s)) => {
            if s.len() > nd {
                return Err(invalid_argument(
                    op,
                    "the length of s",
                    format!("must be at most the input's {nd} dimensions"),
                    s.len(),
                ));
            }
            (nd - s.len()..nd).collect()
        }
        (None, None) => (0..nd).collect(),
    };
    let mut seen = dims.clone();
    seen.sort_unstable();
    seen.dedup();
    if seen.len() != dims.len() {
        return Err(invalid_argument(
            op,
            "dim",
            "must be unique",
            format!("{dims:?}"),
        ));
    }
    let sizes = match s {
        Some(s) => {
            check_size(
                op,
                "the length of s (one per dim)",
                dims.len() as i64,
                s.len() as i64,
            )?;
            s.iter()
                .map(|&n| {
                    if n == -1 {
                        Ok(None)
                    } else {
                        signal_len(op, n).map(Some)
                    }
                })
                .collect::<crate::Result<_>>()?
        }
        None => vec![None; dims.len()],
    };
    Ok((dims, sizes))
}

/// How a transform's result is scaled: a `norm=` name for the given direction, or the integer
/// mode of the `_fft_*` operators (0 none, 1 by 1/sqrt(n), 2 by 1/n, n the signal size).
#[derive(Clone, Copy)]
enum Scaling<'a> {
    Named {
        norm: Option<&'a str>,
        forward: bool,
    },
    Mode(i64),
}

impl Scaling<'_> {
    fn factor(self, op: &str, n: usize) -> crate::Result<f64> {
        match self {
            Scaling::Named { norm, forward } => norm_scale(op, norm, n, forward),
            Scaling::Mode(mode) => {
                let n = n.max(1) as f64;
                match mode {
                    0 => Ok(1.0),
                    1 => Ok(1.0 / n.sqrt()),
                    2 => Ok(1.0 / n),
                    other => Err(invalid_argument(
                        op,
                        "normalization",
                        "must be 0, 1 or 2",
                        other,
                    )),
                }
            }
        }
    }
}

/// Complex-to-complex over `dims` with `sizes`.
fn c2c(
    op: &str,
    x: &Tensor,
    dims: &[usize],
    sizes: &[Option<usize>],
    norm: Option<&str>,
    forward: bool,
) -> crate::Result<Tensor> {
    c2c_scaled(
        op,
        x,
        dims,
        sizes,
        Scaling::Named { norm, forward },
        forward,
    )
}

fn c2c_scaled(
    op: &str,
    x: &Tensor,
    dims: &[usize],
    sizes: &[Option<usize>],
    scaling: Scaling<'_>,
    forward: bool,
) -> crate::Result<Tensor> {
    let mut b = Buf::from_tensor(x)?;
    let mut total = 1usize;
    for (&d, s) in dims.iter().zip(sizes) {
        b.resize(d, s.unwrap_or(b.shape[d]));
        total *= b.shape[d];
    }
    let scale = scaling.factor(op, total)?;
    for &d in dims {
        b.transform(d, !forward, 1.0);
    }
    if scale != 1.0 {
        b.data.iter_mut().for_each(|v| *v *= scale);
    }
    b.into_complex(complex_out(x.dtype()))
}

/// Real-to-complex: c2c over `dims`, then the last one keeps its `n/2 + 1` non-redundant bins.
fn r2c(
    op: &str,
    x: &Tensor,
    dims: &[usize],
    sizes: &[Option<usize>],
    norm: Option<&str>,
) -> crate::Result<Tensor> {
    let scaling = Scaling::Named {
        norm,
        forward: true,
    };
    r2c_scaled(op, x, dims, sizes, scaling, true, true)
}

/// Real-to-complex in either direction (ihfft is the inverse one), `onesided` or the full
/// spectrum.
fn r2c_scaled(
    op: &str,
    x: &Tensor,
    dims: &[usize],
    sizes: &[Option<usize>],
    scaling: Scaling<'_>,
    forward: bool,
    onesided: bool,
) -> crate::Result<Tensor> {
    check_input(op, x, true)?;
    let full = c2c_scaled(op, x, dims, sizes, scaling, forward)?;
    if !onesided {
        return Ok(full);
    }
    let Some(&last) = dims.last() else {
        return Ok(full);
    };
    let n = full.shape()[last];
    let mut b = Buf::from_tensor(&full)?;
    b.resize(last, n / 2 + 1);
    b.into_complex(full.dtype())
}

/// Complex-to-real: inverse c2c over all but the last of `dims`, then a Hermitian inverse over
/// the last one, whose output length is its size (default `2 * (m - 1)`).
fn c2r(
    op: &str,
    x: &Tensor,
    dims: &[usize],
    sizes: &[Option<usize>],
    norm: Option<&str>,
) -> crate::Result<Tensor> {
    let scaling = Scaling::Named {
        norm,
        forward: false,
    };
    c2r_scaled(op, x, dims, sizes, scaling, false)
}

/// Complex-to-real of `x`, or of its conjugate (`conjugate`: hfft, the forward transform of a
/// Hermitian signal, is the inverse one of the conjugate).
fn c2r_scaled(
    op: &str,
    x: &Tensor,
    dims: &[usize],
    sizes: &[Option<usize>],
    scaling: Scaling<'_>,
    conjugate: bool,
) -> crate::Result<Tensor> {
    check_input(op, x, false)?;
    let (Some(&last), Some(&last_size)) = (dims.last(), sizes.last()) else {
        return Err(invalid_argument(
            op,
            "dim",
            "must name at least one axis",
            "no axes",
        ));
    };
    let m = x.shape()[last];
    let n = match last_size {
        Some(n) => n,
        None => {
            if m < 2 {
                return Err(invalid_argument(
                    op,
                    "n (2 * (input.size(-1) - 1) by default)",
                    "must be at least 1",
                    2 * m as i64 - 2,
                ));
            }
            2 * (m - 1)
        }
    };
    let mut b = Buf::from_tensor(x)?;
    if conjugate {
        b.data.iter_mut().for_each(|v| *v = v.conj());
    }
    let mut total = n;
    for (&d, s) in dims.iter().zip(sizes).take(dims.len() - 1) {
        b.resize(d, s.unwrap_or(b.shape[d]));
        total *= b.shape[d];
        b.transform(d, true, 1.0);
    }
    // Hermitian extension of the last dim to n
    let half = n / 2 + 1;
    b.resize(last, half);
    let (outer, _, inner) = b.split(last);
    let mut ext = Buf {
        data: vec![C::new(0.0, 0.0); outer * n * inner],
        shape: {
            let mut s = b.shape.clone();
            s[last] = n;
            s
        },
    };
    for o in 0..outer {
        for i in 0..inner {
            for k in 0..n {
                let v = if k < half {
                    b.data[(o * half + k) * inner + i]
                } else {
                    b.data[(o * half + (n - k)) * inner + i].conj()
                };
                ext.data[(o * n + k) * inner + i] = v;
            }
        }
    }
    // like pocketfft's c2r, the imaginary parts of the DC and Nyquist bins are ignored
    for o in 0..outer {
        for i in 0..inner {
            ext.data[(o * n) * inner + i].im = 0.0;
            if n % 2 == 0 && n > 0 {
                ext.data[(o * n + n / 2) * inner + i].im = 0.0;
            }
        }
    }
    let scale = scaling.factor(op, total)?;
    ext.transform(last, true, scale);
    ext.into_real(real_out(x.dtype()))
}

fn one_dim(args: &Args<'_>) -> crate::Result<(Tensor, Vec<usize>, Vec<Option<usize>>)> {
    let x = args.tensor(0)?;
    check_input(args.op, &x, false)?;
    let n = args
        .opt_int(1)?
        .map(|n| signal_len(args.op, n))
        .transpose()?;
    let d = wrap_dim(args.int(2)?, x.dim())?;
    Ok((x, vec![d], vec![n]))
}

fn n_dim(
    args: &Args<'_>,
    default_dims: Option<&[i64]>,
) -> crate::Result<(Tensor, Vec<usize>, Vec<Option<usize>>)> {
    let x = args.tensor(0)?;
    check_input(args.op, &x, false)?;
    let s = args.opt_int_list(1)?;
    let dim = args
        .opt_int_list(2)?
        .or_else(|| default_dims.map(|d| d.to_vec()));
    let (dims, sizes) = fft_dims(args.op, &x, s, dim)?;
    Ok((x, dims, sizes))
}

fn norm_arg(args: &Args<'_>) -> crate::Result<Option<String>> {
    Ok(args.opt_str(3)?.map(|s| s.to_string()))
}

fn fft_fft(args: &mut Args<'_>) -> R {
    let (x, d, s) = one_dim(args)?;
    t(c2c(args.op, &x, &d, &s, norm_arg(args)?.as_deref(), true)?)
}
fn fft_ifft(args: &mut Args<'_>) -> R {
    let (x, d, s) = one_dim(args)?;
    t(c2c(args.op, &x, &d, &s, norm_arg(args)?.as_deref(), false)?)
}
fn fft_rfft(args: &mut Args<'_>) -> R {
    let (x, d, s) = one_dim(args)?;
    t(r2c(args.op, &x, &d, &s, norm_arg(args)?.as_deref())?)
}
fn fft_irfft(args: &mut Args<'_>) -> R {
    let (x, d, s) = one_dim(args)?;
    t(c2r(args.op, &x, &d, &s, norm_arg(args)?.as_deref())?)
}

const LAST2: &[i64] = &[-2, -1];

fn fft_fftn(args: &mut Args<'_>) -> R {
    let (x, d, s) = n_dim(args, None)?;
    t(c2c(args.op, &x, &d, &s, norm_arg(args)?.as_deref(), true)?)
}
fn fft_ifftn(args: &mut Args<'_>) -> R {
    let (x, d, s) = n_dim(args, None)?;
    t(c2c(args.op, &x, &d, &s, norm_arg(args)?.as_deref(), false)?)
}
fn fft_rfftn(args: &mut Args<'_>) -> R {
    let (x, d, s) = n_dim(args, None)?;
    t(r2c(args.op, &x, &d, &s, norm_arg(args)?.as_deref())?)
}
fn fft_irfftn(args: &mut Args<'_>) -> R {
    let (x, d, s) = n_dim(args, None)?;
    t(c2r(args.op, &x, &d, &s, norm_arg(args)?.as_deref())?)
}
fn fft_fft2(args: &mut Args<'_>) -> R {
    let (x, d, s) = n_dim(args, Some(LAST2))?;
    t(c2c(args.op, &x, &d, &s, norm_arg(args)?.as_deref(), true)?)
}
fn fft_ifft2(args: &mut Args<'_>) -> R {
    let (x, d, s) = n_dim(args, Some(LAST2))?;
    t(c2c(args.op, &x, &d, &s, norm_arg(args)?.as_deref(), false)?)
}
fn fft_rfft2(args: &mut Args<'_>) -> R {
    let (x, d, s) = n_dim(args, Some(LAST2))?;
    t(r2c(args.op, &x, &d, &s, norm_arg(args)?.as_deref())?)
}
fn fft_irfft2(args: &mut Args<'_>) -> R {
    let (x, d, s) = n_dim(args, Some(LAST2))?;
    t(c2r(args.op, &x, &d, &s, norm_arg(args)?.as_deref())?)
}

/// hfft (the forward transform of a Hermitian signal given by its first half: real) or, when
/// `INVERSE`, ihfft (the inverse transform of a real signal: its non-redundant half), over one
/// dim (`DIMS` 1), the last two by default (2) or all by default (0).
fn hermitian_fft<const INVERSE: bool, const DIMS: u8>(args: &mut Args<'_>) -> R {
    let (x, d, s) = match DIMS {
        1 => one_dim(args)?,
        2 => n_dim(args, Some(LAST2))?,
        _ => n_dim(args, None)?,
    };
    let norm = norm_arg(args)?;
    let scaling = Scaling::Named {
        norm: norm.as_deref(),
        forward: !INVERSE,
    };
    t(if INVERSE {
        r2c_scaled(args.op, &x, &d, &s, scaling, false, true)?
    } else {
        c2r_scaled(args.op, &x, &d, &s, scaling, true)?
    })
}

/// The `dim` list of the `_fft_*` / `prims::fft_*` operators (no resizing: sizes as given).
fn raw_dims(args: &Args<'_>, x: &Tensor) -> crate::Result<(Vec<usize>, Vec<Option<usize>>)> {
    let dims = args
        .int_list(1)?
        .iter()
        .map(|&d| wrap_dim(d, x.dim()))
        .collect::<Result<Vec<_>, _>>()?;
    let sizes = vec![None; dims.len()];
    Ok((dims, sizes))
}

fn require_complex(op: &str, x: &Tensor) -> crate::Result<()> {
    if !x.dtype().is_complex() {
        return Err(wrong_dtype(op, "input", "a complex tensor", x.dtype()));
    }
    Ok(())
}

/// `_fft_c2c(self, dim, normalization, forward)` / `prims::fft_c2c(self, *, dim, forward)`
/// (mode 0): the transform over exactly `dim`.
fn fft_c2c_with<const MODE_ARG: bool>(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    require_complex(args.op, &x)?;
    let (dims, sizes) = raw_dims(args, &x)?;
    let (mode, forward) = if MODE_ARG {
        (args.int(2)?, args.bool(3)?)
    } else {
        (0, args.bool(2)?)
    };
    t(c2c_scaled(
        args.op,
        &x,
        &dims,
        &sizes,
        Scaling::Mode(mode),
        forward,
    )?)
}
/// `_fft_r2c(self, dim, normalization, onesided)` / `prims::fft_r2c(self, *, dim, onesided)`.
fn fft_r2c_with<const MODE_ARG: bool>(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let (dims, sizes) = raw_dims(args, &x)?;
    let (mode, onesided) = if MODE_ARG {
        (args.int(2)?, args.bool(3)?)
    } else {
        (0, args.bool(2)?)
    };
    let scaling = Scaling::Mode(mode);
    t(r2c_scaled(
        args.op, &x, &dims, &sizes, scaling, true, onesided,
    )?)
}
/// `_fft_c2r(self, dim, normalization, last_dim_size)` / `prims::fft_c2r(self, *, dim,
/// last_dim_size)`: inverse transforms, the last of `dim` Hermitian with that output length.
fn fft_c2r_with<const MODE_ARG: bool>(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    require_complex(args.op, &x)?;
    let (dims, mut sizes) = raw_dims(args, &x)?;
    let (mode, last) = if MODE_ARG {
        (args.int(2)?, args.int(3)?)
    } else {
        (0, args.int(2)?)
    };
    if let Some(s) = sizes.last_mut() {
        *s = Some(signal_len(args.op, last)?);
    }
    t(c2r_scaled(
        args.op,
        &x,
        &dims,
        &sizes,
        Scaling::Mode(mode),
        false,
    )?)
}

fn shift(args: &Args<'_>, inverse: bool) -> R {
    let x = args.tensor(0)?;
    let dims: Vec<i64> = match args.opt_int_list(1)? {
        Some(d) => d,
        None => (0..x.dim() as i64).collect(),
    };
    let mut shifts = Vec::with_capacity(dims.len());
    for &d in &dims {
        let n = x.shape()[wrap_dim(d, x.dim())?] as i64;
        shifts.push(if inverse { (n + 1) / 2 } else { n / 2 });
    }
    if dims.is_empty() {
        return t(x);
    }
    t(super::shape::roll(&x, &shifts, &dims)?)
}
fn fft_fftshift(args: &mut Args<'_>) -> R {
    shift(args, false)
}
fn fft_ifftshift(args: &mut Args<'_>) -> R {
    shift(args, true)
}

fn freq(args: &Args<'_>, onesided: bool) -> R {
    let n = args.int(0)?;
    if n < 0 {
        return Err(invalid_argument(args.op, "n", "must be non-negative", n));
    }
    let d = args.double(1)?;
    let dtype = factory_dtype(args, 2, DType::Float32)?;
    if !dtype.is_floating_point() {
        return Err(wrong_dtype(
            args.op,
            "dtype",
            "a floating point dtype",
            dtype,
        ));
    }
    let n = n as usize;
    let scale = 1.0 / (n as f64 * d);
    let v: Vec<f64> = if onesided {
        (0..n / 2 + 1).map(|k| k as f64 * scale).collect()
    } else {
        (0..n)
            .map(|k| {
                let k = if k < n.div_ceil(2) {
                    k as f64
                } else {
                    k as f64 - n as f64
                };
                k * scale
            })
            .collect()
    };
    let len = v.len();
    t(Tensor::from_vec(v, &[len])?.to_dtype(dtype)?)
}
fn fft_fftfreq(args: &mut Args<'_>) -> R {
    freq(args, false)
}
fn fft_rfftfreq(args: &mut Args<'_>) -> R {
    freq(args, true)
}

// ---------------------------------------------------------------- complex views

/// `view_as_real` (`COPY = false`) and `view_as_real_copy`.
fn view_as_real<const COPY: bool>(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    if !x.dtype().is_complex() {
        return Err(wrong_dtype(args.op, "self", "a complex tensor", x.dtype()));
    }
    let mut shape = x.shape().to_vec();
    shape.push(2);
    let mut strides: Vec<isize> = x.strides().iter().map(|s| s * 2).collect();
    strides.push(1);
    let v = Tensor::from_parts(
        x.storage().clone(),
        x.storage_offset() * 2,
        &shape,
        &strides,
        x.dtype().to_real(),
    )?;
    if COPY {
        return t(v.deep_clone()?);
    }
    t(v)
}

/// `view_as_complex` (`COPY = false`) and `view_as_complex_copy`.
fn view_as_complex<const COPY: bool>(args: &mut Args<'_>) -> R {
    let x = args.tensor(0)?;
    let op = args.op;
    let cd = match x.dtype() {
        DType::Float32 => DType::Complex64,
        DType::Float64 => DType::Complex128,
        DType::Float16 => DType::Complex32,
        d => return Err(wrong_dtype(op, "self", "a float, double or half tensor", d)),
    };
    let nd = x.dim();
    if nd == 0 || x.shape()[nd - 1] != 2 {
        return Err(size_mismatch(
            op,
            "the last dimension's size",
            2,
            x.shape().last().map_or(0, |&s| s as i64),
        ));
    }
    check_size(
        op,
        "the last dimension's stride",
        1,
        x.strides()[nd - 1] as i64,
    )?;
    let strides = &x.strides()[..nd - 1];
    if strides.iter().any(|s| s % 2 != 0) || x.storage_offset() % 2 != 0 {
        return Err(invalid_argument(
            op,
            "self's strides and storage offset",
            "must be divisible by 2 (but the last stride)",
            format!("strides {:?}, offset {}", x.strides(), x.storage_offset()),
        ));
    }
    let cs: Vec<isize> = strides.iter().map(|s| s / 2).collect();
    let v = Tensor::from_parts(
        x.storage().clone(),
        x.storage_offset() / 2,
        &x.shape()[..nd - 1],
        &cs,
        cd,
    )?;
    if COPY {
        return t(v.deep_clone()?);
    }
    t(v)
}

// ---------------------------------------------------------------- windows

#[derive(Clone, Copy)]
enum Window {
    Hamming(f64, f64),
    Blackman,
    Bartlett,
    Kaiser(f64),
}

/// `window_length` values of a symmetric (or periodic) window, as a tensor of `dtype`.
fn window(op: &str, len: i64, periodic: bool, w: Window, dtype: DType) -> crate::Result<Tensor> {
    if len < 0 {
        return Err(invalid_argument(
            op,
            "window_length",
            "must be non-negative",
            len,
        ));
    }
    if !dtype.is_floating_point() {
        return Err(wrong_dtype(op, "dtype", "a floating point dtype", dtype));
    }
    let len = len as usize;
    if len <= 1 {
        return Tensor::from_vec(vec![1.0f64; len], &[len])?.to_dtype(dtype);
    }
    let n = if periodic { len + 1 } else { len };
    let m = (n - 1) as f64;
    let v: Vec<f64> = (0..len)
        .map(|k| {
            let k = k as f64;
            match w {
                Window::Hamming(a, b) => a - b * (2.0 * PI * k / m).cos(),
                Window::Blackman => {
                    0.42 - 0.5 * (2.0 * PI * k / m).cos() + 0.08 * (4.0 * PI * k / m).cos()
                }
                Window::Bartlett => 1.0 - (2.0 * k / m - 1.0).abs(),
                Window::Kaiser(beta) => {
                    let r = 2.0 * k / m - 1.0;
                    super::elementwise::bessel_i0(beta * (1.0 - r * r).max(0.0).sqrt())
                        / super::elementwise::bessel_i0(beta)
                }
            }
        })
        .collect();
    Tensor::from_vec(v, &[len])?.to_dtype(dtype)
}

/// Shared by every window overload: `(len, [periodic, [p1, [p2]]], dtype, layout, device, pin)`.
fn window_kernel(args: &Args<'_>, w: fn(&[f64]) -> Window, nparams: usize) -> R {
    let len = args.int(0)?;
    // the overload without `periodic` has its factory arguments at 1
    let has_periodic = args.len() >= 6 + nparams;
    let periodic = if has_periodic { args.bool(1)? } else { true };
    let first = if has_periodic { 2 } else { 1 };
    let params: Vec<f64> = (0..nparams)
        .map(|i| args.double(first + i))
        .collect::<crate::Result<_>>()?;
    let dtype = factory_dtype(args, first + nparams, DType::Float32)?;
    t(window(args.op, len, periodic, w(&params), dtype)?)
}

fn hann_window(args: &mut Args<'_>) -> R {
    window_kernel(args, |_| Window::Hamming(0.5, 0.5), 0)
}
fn hamming_window(args: &mut Args<'_>) -> R {
    window_kernel(args, |_| Window::Hamming(0.54, 0.46), 0)
}
fn hamming_window_alpha(args: &mut Args<'_>) -> R {
    window_kernel(args, |p| Window::Hamming(p[0], 0.46), 1)
}
fn hamming_window_alpha_beta(args: &mut Args<'_>) -> R {
    window_kernel(args, |p| Window::Hamming(p[0], p[1]), 2)
}
fn blackman_window(args: &mut Args<'_>) -> R {
    window_kernel(args, |_| Window::Blackman, 0)
}
fn bartlett_window(args: &mut Args<'_>) -> R {
    window_kernel(args, |_| Window::Bartlett, 0)
}
fn kaiser_window(args: &mut Args<'_>) -> R {
    window_kernel(args, |_| Window::Kaiser(12.0), 0)
}
fn kaiser_window_beta(args: &mut Args<'_>) -> R {
    window_kernel(args, |p| Window::Kaiser(p[0]), 1)
}

// ---------------------------------------------------------------- stft / istft

/// The analysis window padded (centered) to `n_fft`, as complex values.
fn stft_window(
    op: &str,
    window: Option<&Tensor>,
    n_fft: usize,
    win_length: usize,
) -> crate::Result<Vec<C>> {
    if win_length == 0 || win_length > n_fft {
        return Err(invalid_argument(
            op,
            "win_length",
            format!("must be in (0, n_fft = {n_fft}]"),
            win_length,
        ));
    }
    let w: Vec<C> = match window {
        Some(w) => {
            check_rank(op, "window", RankRequirement::Exactly(1), w.shape())?;
            check_size(
                op,
                "the window's size (win_length)",
                win_length as i64,
                w.shape()[0] as i64,
            )?;
            w.to_vec::<C>()?
        }
        None => vec![C::new(1.0, 0.0); win_length],
    };
    let left = (n_fft - win_length) / 2;
    let mut out = vec![C::new(0.0, 0.0); n_fft];
    out[left..left + win_length].copy_from_slice(&w);
    Ok(out)
}

/// Pads a (batch, len) signal by `p` on both sides with `mode`.
fn pad_signal(op: &str, x: &[C], len: usize, p: usize, mode: &str) -> crate::Result<Vec<C>> {
    let batch = x.len().checked_div(len).unwrap_or(0);
    let out_len = len + 2 * p;
    let mut out = Vec::with_capacity(batch * out_len);
    if len == 0 && p > 0 && mode != "constant" {
        return Err(invalid_argument(
            op,
            "input",
            format!("must not be empty to pad with {mode}"),
            format!("a signal of length {len}"),
        ));
    }
    if mode == "reflect" && p >= len {
        return Err(invalid_argument(
            op,
            "the padding (n_fft / 2)",
            format!("must be less than the signal's length {len} for reflect padding"),
            p,
        ));
    }
    for b in 0..batch {
        let row = &x[b * len..(b + 1) * len];
        for j in 0..out_len {
            let i = j as i64 - p as i64;
            let l = len as i64;
            let v = if (0..l).contains(&i) {
                row[i as usize]
            } else {
                match mode {
                    "constant" => C::new(0.0, 0.0),
                    "reflect" => row[if i < 0 { -i } else { 2 * (l - 1) - i } as usize],
                    "replicate" => row[i.clamp(0, l - 1) as usize],
                    "circular" => row[i.rem_euclid(l) as usize],
                    other => {
                        return Err(invalid_argument(
                            op,
                            "pad_mode",
                            "must be one of constant, reflect, replicate, circular",
                            format!("'{other}'"),
                        ))
                    }
                }
            };
            out.push(v);
        }
    }
    Ok(out)
}

fn stft(args: &mut Args<'_>) -> R {
    let op = args.op;
    let centered = args.len() >= 11;
    let x = args.tensor(0)?;
    let n_fft = args.int(1)?;
    let hop = args.opt_int(2)?;
    let win_length = args.opt_int(3)?;
    let window = args.opt_tensor(4)?;
    let (center, pad_mode, k) = if centered {
        (args.bool(5)?, args.str(6)?.to_string(), 7)
    } else {
        (false, "reflect".to_string(), 5)
    };
    let normalized = args.bool(k)?;
    let onesided = args.opt_bool(k + 1)?;
    let return_complex = args.opt_bool(k + 2)?;
    if args.opt_bool(k + 3)? == Some(true) {
        return Err(unsupported_feature(op, "align_to_window=True"));
    }
    let complex_in =
        x.dtype().is_complex() || window.as_ref().is_some_and(|w| w.dtype().is_complex());
    let return_complex = match return_complex {
        Some(r) => r,
        None if complex_in => true,
        None => {
            return Err(invalid_argument(
                op,
                "return_complex",
                "must be given for real inputs",
                "None",
            ))
        }
    };
    check_rank(op, "input", RankRequirement::OneOf(vec![1, 2]), x.shape())?;
    if n_fft <= 0 {
        return Err(invalid_argument(op, "n_fft", "must be positive", n_fft));
    }
    let n_fft = n_fft as usize;
    let hop = hop.unwrap_or((n_fft / 4) as i64);
    if hop <= 0 {
        return Err(invalid_argument(op, "hop_length", "must be positive", hop));
    }
    let hop = hop as usize;
    let win_length = win_length.unwrap_or(n_fft as i64).max(0) as usize;
    let w = stft_window(op, window.as_ref(), n_fft, win_length)?;
    let batched = x.dim() == 2;
    let len = x.shape()[x.dim() - 1];
    let batch = if batched { x.shape()[0] } else { 1 };
    let mut sig = x.to_vec::<C>()?;
    let mut len = len;
    if center {
        sig = pad_signal(op, &sig, len, n_fft / 2, &pad_mode)?;
        len += 2 * (n_fft / 2);
    }
    if n_fft > len {
        return Err(invalid_argument(
            op,
            "n_fft",
            format!("must be in (0, {len}] (the padded signal's length)"),
            n_fft,
        ));
    }
    let frames = 1 + (len - n_fft) / hop;
    let onesided = onesided.unwrap_or(!complex_in);
    if onesided && complex_in {
        return Err(invalid_argument(
            op,
            "onesided",
            "must be False when the window or input is complex",
            "True",
        ));
    }
    let bins = if onesided { n_fft / 2 + 1 } else { n_fft };
    let plan = Plan::new(n_fft);
    let scale = if normalized {
        1.0 / (n_fft as f64).sqrt()
    } else {
        1.0
    };
    let mut out = vec![C::new(0.0, 0.0); batch * bins * frames];
    let mut line = vec![C::new(0.0, 0.0); n_fft];
    let mut scratch = Vec::new();
    for b in 0..batch {
        for f in 0..frames {
            let start = b * len + f * hop;
            for k in 0..n_fft {
                line[k] = sig[start + k] * w[k];
            }
            plan.run(&mut line, &mut scratch, false);
            for k in 0..bins {
                out[(b * bins + k) * frames + f] = line[k] * scale;
            }
        }
    }
    let mut shape = vec![bins, frames];
    if batched {
        shape.insert(0, batch);
    }
    let dt = if x.dtype() == DType::Float64
        || x.dtype() == DType::Complex128
        || window
            .as_ref()
            .is_some_and(|w| matches!(w.dtype(), DType::Float64 | DType::Complex128))
    {
        DType::Complex128
    } else {
        DType::Complex64
    };
    let res = Buf { data: out, shape }.into_complex(dt)?;
    if return_complex {
        return t(res);
    }
    let mut a = vec![IValue::Tensor(res)];
    view_as_real::<false>(&mut Args::new("aten::view_as_real", &mut a, args.ctx))
}

fn istft(args: &mut Args<'_>) -> R {
    let op = args.op;
    let x = args.tensor(0)?;
    let n_fft = args.int(1)?;
    let hop = args.opt_int(2)?;
    let win_length = args.opt_int(3)?;
    let window = args.opt_tensor(4)?;
    let center = args.bool(5)?;
    let normalized = args.bool(6)?;
    let onesided = args.opt_bool(7)?;
    let length = args.opt_int(8)?;
    let return_complex = args.bool(9)?;
    if !x.dtype().is_complex() {
        return Err(wrong_dtype(
            op,
            "input",
            "a complex tensor (stft's output with return_complex=True)",
            x.dtype(),
        ));
    }
    check_rank(op, "input", RankRequirement::OneOf(vec![2, 3]), x.shape())?;
    if n_fft <= 0 {
        return Err(invalid_argument(op, "n_fft", "must be positive", n_fft));
    }
    let n_fft = n_fft as usize;
    let hop = hop.unwrap_or((n_fft / 4) as i64);
    if hop <= 0 || hop as usize > n_fft.max(1) {
        return Err(invalid_argument(
            op,
            "hop_length",
            "must be in (0, win_length]",
            hop,
        ));
    }
    let hop = hop as usize;
    let win_length = win_length.unwrap_or(n_fft as i64).max(0) as usize;
    let w = stft_window(op, window.as_ref(), n_fft, win_length)?;
    let batched = x.dim() == 3;
    let nd = x.dim();
    let bins = x.shape()[nd - 2];
    let frames = x.shape()[nd - 1];
    let batch = if batched { x.shape()[0] } else { 1 };
    if frames == 0 {
        return Err(invalid_argument(
            op,
            "input",
            "must have at least one frame",
            format!("shape {:?}", x.shape()),
        ));
    }
    let onesided = onesided.unwrap_or(bins != n_fft);
    if onesided {
        check_size(
            op,
            "the frequency dimension (n_fft / 2 + 1 when onesided=True)",
            (n_fft / 2 + 1) as i64,
            bins as i64,
        )?;
        if return_complex {
            return Err(invalid_argument(
                op,
                "onesided",
                "must be False when return_complex=True",
                "True",
            ));
        }
    } else {
        check_size(
            op,
            "the frequency dimension (n_fft when onesided=False)",
            n_fft as i64,
            bins as i64,
        )?;
    }
    let data = x.to_vec::<C>()?;
    let pre = if normalized {
        (n_fft as f64).sqrt()
    } else {
        1.0
    };
    let plan = Plan::new(n_fft);
    let mut scratch = Vec::new();
    let expected = n_fft + hop * (frames - 1);
    let mut y = vec![C::new(0.0, 0.0); batch * expected];
    let mut env = vec![C::new(0.0, 0.0); expected];
    let mut line = vec![C::new(0.0, 0.0); n_fft];
    let inv_n = 1.0 / n_fft as f64;
    for b in 0..batch {
        for f in 0..frames {
            for (k, v) in line.iter_mut().enumerate() {
                let src = if k < bins {
                    Some(k)
                } else if onesided {
                    None
                } else {
                    Some(k)
                };
                *v = match src {
                    Some(k) => data[(b * bins + k) * frames + f] * pre,
                    // Hermitian half of a onesided spectrum
                    None => (data[(b * bins + (n_fft - k)) * frames + f] * pre).conj(),
                };
            }
            if onesided {
                line[0].im = 0.0;
                if n_fft.is_multiple_of(2) {
                    line[n_fft / 2].im = 0.0;
                }
            }
            plan.run(&mut line, &mut scratch, true);
            for k in 0..n_fft {
                y[b * expected + f * hop + k] += line[k] * inv_n * w[k];
            }
        }
    }
    for f in 0..frames {
        for k in 0..n_fft {
            env[f * hop + k] += w[k] * w[k];
        }
    }
    let start = if center { n_fft / 2 } else { 0 };
    let end = match length {
        Some(l) if l >= 0 => start + l as usize,
        Some(l) => return Err(invalid_argument(op, "length", "must be non-negative", l)),
        None if center => expected.saturating_sub(n_fft / 2),
        None => expected,
    };
    let stop = end.min(expected);
    if start > stop {
        return Err(invalid_argument(
            op,
            "length",
            format!("must leave more than the {start} samples center=True removes"),
            stop,
        ));
    }
    let env_min = env[start..stop]
        .iter()
        .fold(f64::INFINITY, |a, b| a.min(b.norm()));
    if env_min < 1e-11 {
        return Err(invalid_argument(
            op,
            "window",
            "must satisfy the NOLA condition (window overlap add min > 1e-11)",
            env_min,
        ));
    }
    let out_len = end - start;
    let mut out = vec![C::new(0.0, 0.0); batch * out_len];
    for b in 0..batch {
        for j in start..stop {
            out[b * out_len + j - start] = y[b * expected + j] / env[j];
        }
    }
    let mut shape = vec![out_len];
    if batched {
        shape.insert(0, batch);
    }
    let cdt = if x.dtype() == DType::Complex128
        || window.as_ref().is_some_and(|w| w.dtype() == DType::Float64)
    {
        DType::Complex128
    } else {
        DType::Complex64
    };
    let b = Buf { data: out, shape };
    if return_complex {
        t(b.into_complex(cdt)?)
    } else {
        t(b.into_real(cdt.to_real())?)
    }
}

pub fn register(r: &mut Registry) {
    r.add("aten::fft_fft", fft_fft);
    r.add("aten::fft_ifft", fft_ifft);
    r.add("aten::fft_rfft", fft_rfft);
    r.add("aten::fft_irfft", fft_irfft);
    r.add("aten::fft_fftn", fft_fftn);
    r.add("aten::fft_ifftn", fft_ifftn);
    r.add("aten::fft_rfftn", fft_rfftn);
    r.add("aten::fft_irfftn", fft_irfftn);
    r.add("aten::fft_fft2", fft_fft2);
    r.add("aten::fft_ifft2", fft_ifft2);
    r.add("aten::fft_rfft2", fft_rfft2);
    r.add("aten::fft_irfft2", fft_irfft2);
    r.add("aten::fft_hfft", hermitian_fft::<false, 1>);
    r.add("aten::fft_hfft2", hermitian_fft::<false, 2>);
    r.add("aten::fft_hfftn", hermitian_fft::<false, 0>);
    r.add("aten::fft_ihfft", hermitian_fft::<true, 1>);
    r.add("aten::fft_ihfft2", hermitian_fft::<true, 2>);
    r.add("aten::fft_ihfftn", hermitian_fft::<true, 0>);
    r.add("aten::_fft_c2c", fft_c2c_with::<true>);
    r.add("aten::_fft_r2c", fft_r2c_with::<true>);
    r.add("aten::_fft_c2r", fft_c2r_with::<true>);
    r.add("prims::fft_c2c", fft_c2c_with::<false>);
    r.add("prims::fft_r2c", fft_r2c_with::<false>);
    r.add("prims::fft_c2r", fft_c2r_with::<false>);
    r.add("aten::fft_fftshift", fft_fftshift);
    r.add("aten::fft_ifftshift", fft_ifftshift);
    r.add("aten::fft_fftfreq", fft_fftfreq);
    r.add("aten::fft_rfftfreq", fft_rfftfreq);
    r.add("aten::view_as_real", view_as_real::<false>);
    r.add("aten::view_as_real_copy", view_as_real::<true>);
    r.add("aten::view_as_complex", view_as_complex::<false>);
    r.add("aten::view_as_complex_copy", view_as_complex::<true>);
    r.add_all(
        &["aten::hann_window", "aten::hann_window.periodic"],
        hann_window,
    );
    r.add_all(
        &["aten::hamming_window", "aten::hamming_window.periodic"],
        hamming_window,
    );
    r.add("aten::hamming_window.periodic_alpha", hamming_window_alpha);
    r.add(
        "aten::hamming_window.periodic_alpha_beta",
        hamming_window_alpha_beta,
    );
    r.add_all(
        &["aten::blackman_window", "aten::blackman_window.periodic"],
        blackman_window,
    );
    r.add_all(
        &["aten::bartlett_window", "aten::bartlett_window.periodic"],
        bartlett_window,
    );
    r.add_all(
        &["aten::kaiser_window", "aten::kaiser_window.periodic"],
        kaiser_window,
    );
    r.add("aten::kaiser_window.beta", kaiser_window_beta);
    r.add_all(&["aten::stft", "aten::stft.center"], stft);
    r.add("aten::istft", istft);
}
