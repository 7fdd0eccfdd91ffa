//! The pre-torchbind fbgemm API that archives of torch <= 1.4 (`torch.jit.quantized`, dynamic
//! quantized RNNs) and AOTInductor's wrapped ops still call: `fbgemm_pack_quantized_matrix`,
//! `fbgemm_linear_int8_weight*`, `fbgemm_pack_gemm_matrix_fp16`, `fbgemm_linear_fp16_weight*`,
//! the `quantized_{lstm,gru,rnn_relu,rnn_tanh}_cell` steps over those, and the
//! `_wrapped_linear_prepack` / `_wrapped_quantized_linear_prepacked` /
//! `wrapped_fbgemm_*` pairs.
//!
//! PyTorch returns the packed matrices as opaque byte tensors owning an fbgemm object
//! (`cpp_custom_type_hack`); tsrun's packed tensors are uint8 tensors holding a tagged
//! little-endian encoding of what that object holds (the int8 matrix, or a linear layer's
//! packed weight and bias), so they round-trip within a run (also through `set_`, which the
//! legacy modules' `_pack` methods use) and a tensor that is not one is refused as PyTorch
//! refuses it.
//!
//! Arithmetic: the int8 path quantizes the whole activation to quint8 per call with fbgemm's
//! own `ChooseQuantizationParams` over its min and max, multiplies exactly in int32 and
//! corrects with the row sums and the caller's `col_offsets` as fbgemm's
//! `ReQuantizeForFloat` does (`fma(raw, act_scale * w_scale, bias)`); the fp16 path saturates
//! the weights to the half range (in place, as PyTorch does to a contiguous weight), rounds
//! them to half and runs fbgemm's fp16 GEMM, then adds the bias.

use super::linear::{
    min_max, quantize_row_legacy, stretch_to_small_scale, Fp16Weights, HALF_MAX,
    SMALL_SCALE_THRESHOLD,
};
use super::rnn::{cell_state_arg, combine_cell_gates, CellOp};
use super::torchbind::LinearParams;
use super::unsupported;
use crate::ops::kernels::{
    check_rank, check_size, invalid_argument, rank_mismatch, shape_mismatch, size_mismatch,
    unsupported_feature,
};
use crate::ops::prims::via_aten;
use crate::ops::{Args, Registry};
use crate::tensor::{DType, Quantizer, Scalar, Tensor};
use crate::tensor::{RankRequirement, TensorError};
use crate::values::{IValue, Tuple};
use crate::Result;

pub fn register(r: &mut Registry) {
    r.add("aten::fbgemm_pack_quantized_matrix", pack_quantized_matrix);
    r.add(
        "aten::fbgemm_pack_quantized_matrix.KN",
        pack_quantized_matrix,
    );
    r.add_all(
        &[
            "aten::fbgemm_linear_int8_weight",
            "aten::fbgemm_linear_int8_weight_fp32_activation",
        ],
        linear_int8_weight,
    );
    r.add("aten::fbgemm_pack_gemm_matrix_fp16", pack_gemm_matrix_fp16);
    r.add(
        "_quantized::wrapped_fbgemm_pack_gemm_matrix_fp16",
        wrapped_pack_gemm_matrix_fp16,
    );
    r.add_all(
        &[
            "aten::fbgemm_linear_fp16_weight",
            "aten::fbgemm_linear_fp16_weight_fp32_activation",
            "_quantized::wrapped_fbgemm_linear_fp16_weight",
        ],
        linear_fp16_weight,
    );
    r.add_all(
        &[
            "aten::_wrapped_linear_prepack",
            "_quantized::_wrapped_linear_prepack",
        ],
        wrapped_linear_prepack,
    );
    r.add_all(
        &[
            "aten::_wrapped_quantized_linear_prepacked",
            "_quantized::_wrapped_quantized_linear_prepacked",
        ],
        wrapped_quantized_linear_prepacked,
    );
    r.add("aten::quantized_lstm_cell", quantized_cell::<LSTM>);
    r.add("aten::quantized_gru_cell", quantized_cell::<GRU>);
    r.add("aten::quantized_rnn_tanh_cell", quantized_cell::<TANH>);
    r.add("aten::quantized_rnn_relu_cell", quantized_cell::<RELU>);
}

/// The prefix of every tsrun packed-matrix byte tensor.
const MAGIC: &[u8; 8] = b"tsrunPK1";
/// The packed kinds: fbgemm's `PackBMatrix<int8_t>`, and a `LinearPackedParamsBase`.
const KIND_INT8_MATRIX: u8 = 1;
const KIND_LINEAR: u8 = 2;
/// A packed linear weight's kinds: float (the fp16 GEMM), per-tensor qint8.
const WEIGHT_FLOAT: u8 = 0;
const WEIGHT_QINT8: u8 = 1;

/// What a packed byte tensor holds.
enum Packed {
    /// `fbgemm_pack_quantized_matrix`: the int8 weight `[n, k]`.
    Int8Matrix { n: usize, k: usize, values: Vec<i8> },
    /// `fbgemm_pack_gemm_matrix_fp16` (a float weight, no bias) and `_wrapped_linear_prepack`
    /// (a per-tensor qint8 weight and bias).
    Linear(LinearParams),
}

/// PyTorch's `cpp_custom_type_hack::cast` error for a tensor that holds another type.
fn not_packed(op: &str, expected: &str) -> crate::Error {
    invalid_argument(
        op,
        "the packed tensor",
        format!("must be a temporary cpp type wrapper of type {expected}"),
        "a tensor holding another type",
    )
}

const INT8_MATRIX_TYPE: &str = "fbgemm::PackBMatrix<signed char>";
const LINEAR_TYPE: &str = "c10::intrusive_ptr<LinearPackedParamsBase>";

fn put_usize(out: &mut Vec<u8>, v: usize) {
    out.extend_from_slice(&(v as u64).to_le_bytes());
}

impl Packed {
    fn to_tensor(&self) -> Result<Tensor> {
        let mut out = MAGIC.to_vec();
        match self {
            Packed::Int8Matrix { n, k, values } => {
                out.push(KIND_INT8_MATRIX);
                put_usize(&mut out, *n);
                put_usize(&mut out, *k);
                out.extend(values.iter().map(|&v| v as u8));
            }
            Packed::Linear(p) => {
                out.push(KIND_LINEAR);
                let w = &p.weight;
                let [n, k] = *w.shape() else {
                    return Err(rank_mismatch(
                        "packed linear weight",
                        "weight",
                        RankRequirement::Exactly(2),
                        w.shape(),
                    ));
                };
                put_usize(&mut out, n);
                put_usize(&mut out, k);
                match w.quantizer().map(|q| &**q) {
                    None if w.dtype() == DType::Float32 => {
                        out.push(WEIGHT_FLOAT);
                        for v in w.contiguous()?.to_vec::<f32>()? {
                            out.extend_from_slice(&v.to_le_bytes());
                        }
                    }
                    Some(Quantizer::PerTensorAffine { scale, zero_point })
                        if w.dtype() == DType::QInt8 =>
                    {
                        out.push(WEIGHT_QINT8);
                        out.extend_from_slice(&scale.to_le_bytes());
                        out.extend_from_slice(&zero_point.to_le_bytes());
                        out.extend(super::int_values(w)?.into_iter().map(|v| v as i8 as u8));
                    }
                    _ => {
                        return Err(unsupported_feature(
                            "packed linear weight",
                            format!(
                                "packing a {} weight other than float32 or per-tensor qint8",
                                w.dtype()
                            ),
                        ))
                    }
                }
                match &p.bias {
                    Some(b) => {
                        let b = b.to_vec::<f32>()?;
                        check_size(
                            "packed linear weight",
                            "the number of bias elements",
                            n as i64,
                            b.len() as i64,
                        )?;
                        out.push(1);
                        for v in b {
                            out.extend_from_slice(&v.to_le_bytes());
                        }
                    }
                    None => out.push(0),
                }
            }
        }
        let len = out.len();
        Ok(Tensor::from_vec(out, &[len])?)
    }

    /// Decode packed tensor `t`, or the cast error naming `expected`.
    fn from_tensor(op: &str, t: &Tensor, expected: &str) -> Result<Packed> {
        if t.dtype() != DType::UInt8 || t.dim() != 1 {
            return Err(not_packed(op, expected));
        }
        let bytes = t.contiguous()?.to_vec::<u8>()?;
        let mut r = Reader {
            bytes: &bytes,
            pos: 0,
        };
        let bad = || not_packed(op, expected);
        if r.take(MAGIC.len()).ok() != Some(&MAGIC[..]) {
            return Err(bad());
        }
        let kind = r.byte()?;
        let (n, k) = (r.usize()?, r.usize()?);
        let count = n.checked_mul(k).ok_or_else(bad)?;
        match kind {
            KIND_INT8_MATRIX => {
                let values = r.take(count)?.iter().map(|&v| v as i8).collect();
                r.finish()?;
                Ok(Packed::Int8Matrix { n, k, values })
            }
            KIND_LINEAR => {
                let weight = match r.byte()? {
                    WEIGHT_FLOAT => {
                        let v = r.f32s(count)?;
                        Tensor::from_vec(v, &[n, k])?
                    }
                    WEIGHT_QINT8 => {
                        let scale = f64::from_le_bytes(r.array()?);
                        let zero_point = i64::from_le_bytes(r.array()?);
                        let ints: Vec<i8> = r.take(count)?.iter().map(|&v| v as i8).collect();
                        Tensor::quantized_from_ints(
                            &Tensor::from_vec(ints, &[n, k])?,
                            Quantizer::PerTensorAffine { scale, zero_point },
                        )?
                    }
                    _ => return Err(bad()),
                };
                let bias = match r.byte()? {
                    0 => None,
                    1 => Some(Tensor::from_vec(r.f32s(n)?, &[n])?),
                    _ => return Err(bad()),
                };
                r.finish()?;
                Ok(Packed::Linear(LinearParams { weight, bias }))
            }
            _ => Err(bad()),
        }
    }
}

/// A bounds-checked little-endian reader over a packed tensor's bytes.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn malformed() -> crate::Error {
        unsupported("packed fbgemm matrix", "malformed packed tensor")
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(len).ok_or_else(Self::malformed)?;
        let s = self.bytes.get(self.pos..end).ok_or_else(Self::malformed)?;
        self.pos = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn byte(&mut self) -> Result<u8> {
        Ok(self.array::<1>()?[0])
    }

    fn usize(&mut self) -> Result<usize> {
        usize::try_from(u64::from_le_bytes(self.array()?)).map_err(|_| Self::malformed())
    }

    fn f32s(&mut self, count: usize) -> Result<Vec<f32>> {
        let len = count.checked_mul(4).ok_or_else(Self::malformed)?;
        Ok(self
            .take(len)?
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    fn finish(&self) -> Result<()> {
        if self.pos == self.bytes.len() {
            Ok(())
        } else {
            Err(Self::malformed())
        }
    }
}

/// PyTorch's error for a tensor of the wrong dtype (`data_ptr<T>`: expected scalar type X but
/// found Y).
fn expect_dtype(t: &Tensor, want: DType) -> Result<()> {
    if t.dtype() == want {
        return Ok(());
    }
    Err(TensorError::DTypeMismatch {
        expected: want,
        got: t.dtype(),
    }
    .into())
}

/// fbgemm's `ChooseQuantizationParams` (no sparsity preservation, no power-of-two scale):
/// the float scale from the range widened to contain 0 (0.1 when it is 0 or its reciprocal
/// overflows; at least 6.1e-5, the range stretched to match), and the zero point from
/// whichever end adds the smaller terms, clamped, rounded half to even.
pub(crate) fn fbgemm_choose_qparams(min: f32, max: f32, qmin: i32, qmax: i32) -> (f32, i32) {
    let mut min = min.min(0.0);
    let mut max = max.max(0.0);
    let range = f64::from(qmax - qmin);
    let mut scale = ((f64::from(max) - f64::from(min)) / range) as f32;
    if scale == 0.0 || (1.0f32 / scale).is_infinite() {
        scale = 0.1;
    }
    if scale < SMALL_SCALE_THRESHOLD {
        stretch_to_small_scale(scale, &mut min, &mut max, qmin, qmax);
        scale = SMALL_SCALE_THRESHOLD;
    }
    let s = f64::from(scale);
    let from_min = f64::from(qmin) - f64::from(min) / s;
    let from_max = f64::from(qmax) - f64::from(max) / s;
    let err_min = f64::from(qmin).abs() + (f64::from(min) / s).abs();
    let err_max = f64::from(qmax).abs() + (f64::from(max) / s).abs();
    let initial = if err_min < err_max {
        from_min
    } else {
        from_max
    };
    let zp = if initial < f64::from(qmin) {
        qmin
    } else if initial > f64::from(qmax) {
        qmax
    } else {
        initial.round_ties_even() as i32
    };
    (scale, zp)
}

/// `fbgemm_pack_quantized_matrix(input)` / `.KN(input, K, N)` (K and N are ignored, as in
/// PyTorch): the int8 weight `[N, K]` packed for `fbgemm_linear_int8_weight`.
fn pack_quantized_matrix(a: &mut Args<'_>) -> Result<IValue> {
    let w = a.tensor(0)?;
    expect_dtype(&w, DType::Int8)?;
    let [n, k] = *w.shape() else {
        return Err(rank_mismatch(
            a.op,
            "weight",
            RankRequirement::Exactly(2),
            w.shape(),
        ));
    };
    let values = w.contiguous()?.to_vec::<i8>()?;
    Ok(IValue::Tensor(
        Packed::Int8Matrix { n, k, values }.to_tensor()?,
    ))
}

/// A `Scalar` argument PyTorch requires to be a float (`isFloatingPoint`).
fn float_scalar(a: &Args<'_>, i: usize, name: &str) -> Result<f64> {
    match a.scalar(i)? {
        Scalar::Float(v) => Ok(v),
        other => Err(invalid_argument(
            a.op,
            name,
            "must be a floating-point number",
            format!("{other:?}"),
        )),
    }
}

/// A `Scalar` argument PyTorch requires to be an integer (`isIntegral(false)`).
fn int_scalar(a: &Args<'_>, i: usize, name: &str) -> Result<i64> {
    match a.scalar(i)? {
        Scalar::Int(v) => Ok(v),
        other => Err(invalid_argument(
            a.op,
            name,
            "must be an integer",
            format!("{other:?}"),
        )),
    }
}

/// One int8 projection of `fbgemm_linear_int8_weight` (and of the quantized cells): the
/// packed int8 weight `[n, k]`, the column offsets, the weight's scale and zero point, the bias.
pub(crate) struct Int8Linear {
    pub(crate) n: usize,
    pub(crate) k: usize,
    values: Vec<i8>,
    col_offsets: Vec<i32>,
    w_scale: f32,
    w_zp: i32,
    bias: Vec<f32>,
}

impl Int8Linear {
    /// From arguments `[weight, packed, col_offsets, weight_scale, weight_zero_point, bias]`
    /// at `idx`, with PyTorch's checks (K from the input, `k`).
    fn from_args(a: &Args<'_>, idx: [usize; 6], k: usize) -> Result<Int8Linear> {
        let op = a.op;
        let weight = a.tensor(idx[0])?;
        check_rank(op, "weight", RankRequirement::Exactly(2), weight.shape())?;
        check_size(
            op,
            "weight.size(1) (the input's K)",
            k as i64,
            weight.shape()[1] as i64,
        )?;
        let n = weight.shape()[0];
        let bias = a.tensor(idx[5])?;
        if bias.shape() != [n] {
            return Err(shape_mismatch(op, "bias", &[n], bias.shape()));
        }
        let w_scale = float_scalar(a, idx[3], "weight_scale")?;
        let w_zp = int_scalar(a, idx[4], "weight_zero_point")?;
        let Packed::Int8Matrix {
            n: pn,
            k: pk,
            values,
        } = Packed::from_tensor(op, &a.tensor(idx[1])?, INT8_MATRIX_TYPE)?
        else {
            return Err(not_packed(op, INT8_MATRIX_TYPE));
        };
        if (pn, pk) != (n, k) {
            return Err(shape_mismatch(op, "packed matrix", &[n, k], &[pn, pk]));
        }
        Int8Linear::new(
            op,
            values,
            (n, k),
            &a.tensor(idx[2])?,
            (w_scale, w_zp),
            &bias,
        )
    }

    /// The projection of int8 weight `values` (`[n, k]`) with `col_offsets`, the weight's
    /// `(scale, zero_point)` and a float `bias` of `n` values.
    pub(crate) fn new(
        op: &str,
        values: Vec<i8>,
        (n, k): (usize, usize),
        col_offsets: &Tensor,
        (w_scale, w_zp): (f64, i64),
        bias: &Tensor,
    ) -> Result<Int8Linear> {
        expect_dtype(col_offsets, DType::Int32)?;
        let col_offsets = col_offsets.contiguous()?.to_vec::<i32>()?;
        expect_dtype(bias, DType::Float32)?;
        let bias = bias.contiguous()?.to_vec::<f32>()?;
        if col_offsets.len() < n {
            return Err(invalid_argument(
                op,
                "the number of column offsets",
                format!("must be at least the weight's rows ({n})"),
                col_offsets.len(),
            ));
        }
        let weights = n.saturating_mul(k);
        for (what, expected, got) in [
            ("the number of bias elements", n, bias.len()),
            ("the number of weight elements", weights, values.len()),
        ] {
            if got != expected {
                let count = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
                return Err(size_mismatch(op, what, count(expected), count(got)));
            }
        }
        Ok(Int8Linear {
            n,
            k,
            values,
            col_offsets,
            w_scale: w_scale as f32,
            w_zp: w_zp as i32,
            bias,
        })
    }

    /// `xs` (`m` rows of `k`) as `fbgemm_linear_int8_weight_fp32_activation` computes it.
    pub(crate) fn apply(&self, xs: &[f32], m: usize) -> Result<Vec<f32>> {
        let (n, k) = (self.n, self.k);
        if Some(xs.len()) != m.checked_mul(k) {
            return Err(size_mismatch(
                "fbgemm_linear_int8_weight",
                format!("the number of input elements ({m} rows of {k})"),
                i64::try_from(m.saturating_mul(k)).unwrap_or(i64::MAX),
                xs.len() as i64,
            ));
        }
        let (lo, hi) = min_max(xs);
        let (a_scale, a_zp) = fbgemm_choose_qparams(lo, hi, 0, 255);
        let mult = a_scale * self.w_scale;
        let mut out = vec![0f32; m * n];
        let mut xq = Vec::with_capacity(k);
        for (i, dst) in out.chunks_exact_mut(n.max(1)).enumerate().take(m) {
            xq.clear();
            quantize_row_legacy(&xs[i * k..(i + 1) * k], a_scale, a_zp, &mut xq);
            let row_offset = xq.iter().fold(0i32, |s, &v| s.wrapping_add(v));
            for (j, o) in dst.iter_mut().enumerate() {
                let w = &self.values[j * k..(j + 1) * k];
                let dot = xq
                    .iter()
                    .zip(w)
                    .fold(0i32, |s, (&x, &w)| s.wrapping_add(x * i32::from(w)));
                let raw = dot
                    .wrapping_sub(a_zp.wrapping_mul(self.col_offsets[j]))
                    .wrapping_sub(row_offset.wrapping_mul(self.w_zp));
                *o = (raw as f32).mul_add(mult, self.bias[j]);
            }
        }
        Ok(out)
    }
}

/// The output shape of a linear over `x` with `n` outputs.
fn out_shape(x: &Tensor, n: usize) -> Vec<usize> {
    let mut s = x.shape().to_vec();
    if let Some(last) = s.last_mut() {
        *last = n;
    }
    s
}

/// A float input of at least 2 dimensions: its rows and `(m, k)`.
fn float_rows(op: &str, x: &Tensor) -> Result<(Vec<f32>, usize, usize)> {
    expect_dtype(x, DType::Float32)?;
    check_rank(op, "input", RankRequirement::AtLeast(2), x.shape())?;
    let k = x.shape()[x.dim() - 1];
    let m = x.shape()[..x.dim() - 1].iter().product();
    Ok((x.contiguous()?.to_vec::<f32>()?, m, k))
}

/// `fbgemm_linear_int8_weight[_fp32_activation](input, weight, packed, col_offsets,
/// weight_scale, weight_zero_point, bias)`.
fn linear_int8_weight(a: &mut Args<'_>) -> Result<IValue> {
    let x = a.tensor(0)?;
    let (xs, m, k) = float_rows(a.op, &x)?;
    let lin = Int8Linear::from_args(a, [1, 2, 3, 4, 5, 6], k)?;
    let out = lin.apply(&xs, m)?;
    Ok(IValue::Tensor(Tensor::from_vec(
        out,
        &out_shape(&x, lin.n),
    )?))
}

/// `fbgemm_pack_gemm_matrix_fp16(input)`: the float weight `[N, K]` saturated to the half range
/// (PyTorch clamps a contiguous weight in place, the caller's tensor included) for
/// `fbgemm_linear_fp16_weight`.
fn pack_gemm_matrix_fp16(a: &mut Args<'_>) -> Result<IValue> {
    let w = a.tensor(0)?;
    check_rank(a.op, "weight", RankRequirement::Exactly(2), w.shape())?;
    expect_dtype(&w, DType::Float32)?;
    let mut values = w.contiguous()?.to_vec::<f32>()?;
    let mut saturated = false;
    for v in values.iter_mut() {
        if v.abs() > HALF_MAX {
            *v = v.clamp(-HALF_MAX, HALF_MAX);
            saturated = true;
        }
    }
    let weight = Tensor::from_vec(values, w.shape())?;
    if saturated && w.is_contiguous() {
        w.copy_from(&weight)?;
    }
    let p = LinearParams { weight, bias: None };
    Ok(IValue::Tensor(Packed::Linear(p).to_tensor()?))
}

/// `_quantized::wrapped_fbgemm_pack_gemm_matrix_fp16(W)`: a 2-d check, then
/// `fbgemm_pack_gemm_matrix_fp16`.
fn wrapped_pack_gemm_matrix_fp16(a: &mut Args<'_>) -> Result<IValue> {
    check_rank(
        a.op,
        "weight",
        RankRequirement::Exactly(2),
        a.tensor(0)?.shape(),
    )?;
    pack_gemm_matrix_fp16(a)
}

/// The `LinearPackedParamsBase` a packed tensor argument holds.
fn packed_linear(a: &Args<'_>, i: usize) -> Result<LinearParams> {
    match Packed::from_tensor(a.op, &a.tensor(i)?, LINEAR_TYPE)? {
        Packed::Linear(p) => Ok(p),
        Packed::Int8Matrix { .. } => Err(not_packed(a.op, LINEAR_TYPE)),
    }
}

/// `fbgemm_linear_fp16_weight[_fp32_activation](input, packed_weight, bias)` and
/// `_quantized::wrapped_fbgemm_linear_fp16_weight(X, W, B, out_channel)` (`out_channel` only
/// shapes PyTorch's meta function): fbgemm's fp16 GEMM, then `output.add_(bias)`.
fn linear_fp16_weight(a: &mut Args<'_>) -> Result<IValue> {
    let x = a.tensor(0)?;
    let p = packed_linear(a, 1)?;
    if !p.is_fp16() {
        // PyTorch's downcast to PackedLinearWeightFp16 fails on int8 weights
        return Err(not_packed(a.op, "PackedLinearWeightFp16"));
    }
    let (n, k) = (p.weight.shape()[0], p.weight.shape()[1]);
    expect_dtype(&x, DType::Float32)?;
    if x.shape().last() != Some(&k) {
        return Err(size_mismatch(
            a.op,
            "input.size(-1) (the packed weight's rows)",
            k as i64,
            x.shape().last().map_or(-1, |&d| d as i64),
        ));
    }
    let (xs, m, _) = float_rows(a.op, &x)?;
    let bias = match a.opt_tensor(2)? {
        None => None,
        Some(b) => {
            check_rank(a.op, "bias", RankRequirement::Exactly(1), b.shape())?;
            expect_dtype(&b, DType::Float32)?;
            // `add_` broadcasts a one-element bias
            let v = b.to_vec::<f32>()?;
            let v = match v.len() {
                len if len == n => v,
                1 => vec![v[0]; n],
                len => {
                    return Err(TensorError::Broadcast {
                        a: n,
                        b: len,
                        dim: 0,
                    }
                    .into())
                }
            };
            Some(Tensor::from_vec(v, &[n])?)
        }
    };
    let weights = Fp16Weights::new(&LinearParams {
        weight: p.weight,
        bias,
    })?;
    let out = weights.matmul(&xs, m, k, n)?;
    Ok(IValue::Tensor(Tensor::from_vec(out, &out_shape(&x, n))?))
}

/// `_wrapped_linear_prepack(W, W_scale, W_zero_point, B)`: W quantized to qint8 with the
/// given parameters and prepacked with B by `quantized::linear_prepack`, as a packed tensor.
fn wrapped_linear_prepack(a: &mut Args<'_>) -> Result<IValue> {
    check_rank(a.op, "W", RankRequirement::Exactly(2), a.tensor(0)?.shape())?;
    let arg = |i: usize| a.get(i).cloned();
    let qw = via_aten(
        a,
        "aten::quantize_per_tensor.tensor_qparams",
        vec![
            arg(0)?,
            arg(1)?,
            arg(2)?,
            IValue::Int(DType::QInt8.to_scalar_type()),
        ],
    )?;
    let packed = via_aten(a, "quantized::linear_prepack", vec![qw, arg(3)?])?;
    let IValue::Object(obj) = packed else {
        return Err(unsupported(
            a.op,
            "linear_prepack returned no packed object",
        ));
    };
    let p = LinearParams::from_object(&obj)?;
    Ok(IValue::Tensor(Packed::Linear(p).to_tensor()?))
}

/// `_wrapped_quantized_linear_prepacked(X, X_scale, X_zero_point, W_prepack, output_scale,
/// output_zero_point, out_channel)`: X quantized to quint8, `quantized::linear` with the
/// packed weight into `(float(output_scale), output_zero_point)`, dequantized.
fn wrapped_quantized_linear_prepacked(a: &mut Args<'_>) -> Result<IValue> {
    let p = packed_linear(a, 3)?;
    let arg = |i: usize| a.get(i).cloned();
    let qx = via_aten(
        a,
        "aten::quantize_per_tensor.tensor_qparams",
        vec![
            arg(0)?,
            arg(1)?,
            arg(2)?,
            IValue::Int(DType::QUInt8.to_scalar_type()),
        ],
    )?;
    let single = |i: usize| super::fake_quantize::single(a, i);
    let (out_scale, out_zp) = (single(4)? as f32, single(5)? as i64);
    let y = via_aten(
        a,
        "quantized::linear",
        vec![
            qx,
            IValue::Object(p.to_object()),
            IValue::Double(f64::from(out_scale)),
            IValue::Int(out_zp),
        ],
    )?;
    via_aten(a, "aten::dequantize.self", vec![y])
}

const LSTM: u8 = 0;
const GRU: u8 = 1;
const TANH: u8 = 2;
const RELU: u8 = 3;

/// `quantized_{lstm,gru,rnn_tanh,rnn_relu}_cell(input, hx, w_ih, w_hh, b_ih, b_hh, packed_ih,
/// packed_hh, col_offsets_ih, col_offsets_hh, scale_ih, scale_hh, zero_point_ih,
/// zero_point_hh)`: one step of ATen's cell over `QuantizedCellParams`, each projection an
/// `fbgemm_linear_int8_weight_fp32_activation` with its bias.
fn quantized_cell<const KIND: u8>(a: &mut Args<'_>) -> Result<IValue> {
    let op = match KIND {
        LSTM => CellOp::Lstm,
        GRU => CellOp::Gru,
        TANH => CellOp::Tanh,
        _ => CellOp::Relu,
    };
    let x = a.tensor(0)?;
    let (h, c) = cell_state_arg(a, op)?;
    check_rank(a.op, "input", RankRequirement::Exactly(2), x.shape())?;
    check_rank(a.op, "hx", RankRequirement::Exactly(2), h.shape())?;
    let (xs, b, f) = float_rows(a.op, &x)?;
    let (hs, hb, hsz) = float_rows(a.op, &h)?;
    let ih = Int8Linear::from_args(a, [2, 6, 8, 10, 12, 4], f)?;
    let hh = Int8Linear::from_args(a, [3, 7, 9, 11, 13, 5], hsz)?;
    let gates = match op {
        CellOp::Lstm => 4,
        CellOp::Gru => 3,
        _ => 1,
    };
    for (what, expected, got) in [
        ("hx.size(0) (the input's batch)", b, hb),
        ("w_ih.size(0) (gates x hidden)", gates * hsz, ih.n),
        ("w_hh.size(0) (gates x hidden)", gates * hsz, hh.n),
    ] {
        check_size(a.op, what, expected as i64, got as i64)?;
    }
    let c_in = match &c {
        Some(c) if c.shape() == h.shape() => Some(float_rows(a.op, c)?.0),
        Some(c) => return Err(shape_mismatch(a.op, "cx", h.shape(), c.shape())),
        None => None,
    };
    let ig = ih.apply(&xs, b)?;
    let hg = hh.apply(&hs, b)?;
    let (h_out, c_out) = combine_cell_gates(op, b, hsz, &ig, &hg, &hs, c_in)?;
    let h_out = Tensor::from_vec(h_out, h.shape())?;
    match c_out {
        Some(c_out) => Ok(IValue::Tuple(Tuple::new(vec![
            IValue::Tensor(h_out),
            IValue::Tensor(Tensor::from_vec(c_out, h.shape())?),
        ]))),
        None => Ok(IValue::Tensor(h_out)),
    }
}
