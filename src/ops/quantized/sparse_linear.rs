//! `sparse::qlinear*` (`ao.nn.sparse.quantized.Linear`): block-sparse int8 linear layers with
//! fbgemm's sparse kernels (`fbgemmSparseDenseInt8MM`, 1 x 4 weight blocks).
//!
//! The packed weight is a `__torch__.torch.classes.sparse.LinearPackedParamsBase` whose state is
//! PyTorch's BCSR serialization (version 2): `(2, bias?, out_block, in_block, weight_scales
//! (float), weight_zero_points (int8), per_tensor, row_block_indices, col_block_indices,
//! weight_values (int8 + 128, four a block, zero-padded past K), out_features, in_features)`.
//!
//! Arithmetic: the kernel multiplies uint8 activations by int8 weights with AVX2's `maddubs`,
//! so each pair of neighbouring products (`k = 2p, 2p + 1`) is summed with int16 saturation
//! before the exact int32 accumulation; the activation zero point is removed with the weight
//! row sums, and `trRequantizeOpt` requantizes: `(raw + bias / (x_scale * w_scale)) *
//! (x_scale * w_scale / out_scale)` in float, rounded half to even, saturated as fbgemm's
//! pack instructions do. The `_dynamic` overloads exist only for the QNNPACK engine in
//! PyTorch's x86 build and are not registered.

use super::linear::Requant;
use super::{arg_qtensor, per_tensor_params, per_tensor_quantized, unsupported};
use crate::ops::kernels::{
    check_rank, check_size, invalid_argument, rank_mismatch, shape_mismatch,
};
use crate::ops::{Args, Registry};
use crate::tensor::{DType, Quantizer, Tensor};
use crate::tensor::{RankRequirement, TensorError};
use crate::values::types::Type;
use crate::values::{IValue, List, Object, Tuple};
use crate::Result;

pub const SPARSE_LINEAR_CLASS: &str = "__torch__.torch.classes.sparse.LinearPackedParamsBase";

/// The BCSR serialization version PyTorch writes and tsrun reads.
const VERSION: i64 = 2;
/// fbgemm's only block shape: one output row by four input columns.
const BLOCK: (i64, i64) = (1, 4);
const BLOCK_COLS: usize = 4;

pub fn register(r: &mut Registry) {
    r.add("sparse::qlinear_prepack", qlinear_prepack);
    r.add("sparse::qlinear_unpack", qlinear_unpack);
    r.add("sparse::qlinear", qlinear::<false>);
    r.add("sparse::qlinear_relu", qlinear::<true>);
}

/// A sparse linear layer's weight (dense, int8 values), its quantization and bias.
struct SparseLinear {
    /// `[n, k]` row-major.
    values: Vec<i8>,
    n: usize,
    k: usize,
    /// One scale (per tensor) or `n` (per output channel), as float.
    scales: Vec<f32>,
    per_tensor: bool,
    bias: Option<Tensor>,
}

impl SparseLinear {
    /// The weight as the qint8 tensor `sparse::qlinear_unpack` gives back.
    fn weight(&self) -> Result<Tensor> {
        let ints = Tensor::from_vec(self.values.clone(), &[self.n, self.k])?;
        let quantizer = if self.per_tensor {
            Quantizer::PerTensorAffine {
                scale: f64::from(self.scales[0]),
                zero_point: 0,
            }
        } else {
            Quantizer::PerChannelAffine {
                scales: self.scales.iter().map(|&s| f64::from(s)).collect(),
                zero_points: vec![0i64; self.n].into(),
                axis: 0,
            }
        };
        Ok(Tensor::quantized_from_ints(&ints, quantizer)?)
    }

    /// Weight row `i` zero-padded to whole blocks.
    fn padded_row(&self, i: usize) -> Vec<i8> {
        let blocks = self.k.div_ceil(BLOCK_COLS);
        let mut row = self.values[i * self.k..(i + 1) * self.k].to_vec();
        row.resize(blocks * BLOCK_COLS, 0);
        row
    }

    fn to_object(&self) -> Result<Object> {
        let (mut row_ptr, mut col_idx, mut vals) = (vec![0i32], Vec::new(), Vec::new());
        for i in 0..self.n {
            for (b, block) in self.padded_row(i).chunks_exact(BLOCK_COLS).enumerate() {
                if block.iter().any(|&v| v != 0) {
                    col_idx.push(b as i32);
                    vals.extend(block.iter().map(|&v| (i16::from(v) + 128) as u8));
                }
            }
            row_ptr.push(col_idx.len() as i32);
        }
        let vector = |t: Tensor| IValue::Tensor(t);
        let (nr, nc, nv, ns) = (row_ptr.len(), col_idx.len(), vals.len(), self.scales.len());
        let state = vec![
            IValue::Int(VERSION),
            self.bias
                .clone()
                .map(IValue::Tensor)
                .unwrap_or(IValue::None),
            IValue::Int(BLOCK.0),
            IValue::Int(BLOCK.1),
            vector(Tensor::from_vec(self.scales.clone(), &[ns])?),
            vector(Tensor::from_vec(vec![0i8; ns], &[ns])?),
            IValue::Bool(self.per_tensor),
            vector(Tensor::from_vec(row_ptr, &[nr])?),
            vector(Tensor::from_vec(col_idx, &[nc])?),
            vector(Tensor::from_vec(vals, &[nv])?),
            IValue::Int(self.n as i64),
            IValue::Int(self.k as i64),
        ];
        Ok(Object::with_state(
            SPARSE_LINEAR_CLASS.into(),
            IValue::Tuple(Tuple::new(state)),
        ))
    }

    fn from_object(op: &str, obj: &Object) -> Result<SparseLinear> {
        let bad = |what: &str| {
            unsupported(
                op,
                format!("sparse packed linear state {what} (tsrun reads version 2)"),
            )
        };
        let Some(IValue::Tuple(state)) = obj.state() else {
            return Err(bad("is not a tuple"));
        };
        let [IValue::Int(VERSION), bias, IValue::Int(ob), IValue::Int(ib), IValue::Tensor(scales), IValue::Tensor(zps), IValue::Bool(per_tensor), IValue::Tensor(row_ptr), IValue::Tensor(col_idx), IValue::Tensor(vals), IValue::Int(n), IValue::Int(k)] =
            state.items()
        else {
            return Err(bad("is not the BCSR serialization"));
        };
        if (*ob, *ib) != BLOCK {
            return Err(bad("has a block shape other than 1 x 4"));
        }
        let (n, k) = (
            usize::try_from(*n).map_err(|_| bad("has a negative size"))?,
            usize::try_from(*k).map_err(|_| bad("has a negative size"))?,
        );
        let scales = scales.to_vec::<f32>()?;
        if scales.len() != if *per_tensor { 1 } else { n } {
            return Err(bad("has the wrong number of scales"));
        }
        if zps.to_vec::<i64>()?.iter().any(|&z| z != 0) {
            return Err(bad("has nonzero weight zero points"));
        }
        let count = n.checked_mul(k).ok_or_else(|| bad("is too large"))?;
        let mut values = vec![0i8; count];
        let (row_ptr, col_idx, vals) = (
            row_ptr.to_vec::<i64>()?,
            col_idx.to_vec::<i64>()?,
            vals.to_vec::<i64>()?,
        );
        if row_ptr.len() != n + 1 {
            return Err(bad("has the wrong number of row pointers"));
        }
        for i in 0..n {
            let (start, end) = (row_ptr[i], row_ptr[i + 1]);
            if start < 0 || end < start {
                return Err(bad("has unordered row pointers"));
            }
            for r in start as usize..end as usize {
                let b = *col_idx.get(r).ok_or_else(|| bad("lacks column indices"))?;
                let block = vals
                    .get(r * BLOCK_COLS..(r + 1) * BLOCK_COLS)
                    .ok_or_else(|| bad("lacks block values"))?;
                for (c, &v) in block.iter().enumerate() {
                    let col = usize::try_from(b)
                        .ok()
                        .and_then(|b| b.checked_mul(BLOCK_COLS))
                        .and_then(|x| x.checked_add(c))
                        .ok_or_else(|| bad("has a bad column index"))?;
                    if col < k {
                        values[i * k + col] = (v - 128) as i8;
                    } else if v != 128 {
                        return Err(bad("has nonzero padding"));
                    }
                }
            }
        }
        let bias = match bias {
            IValue::Tensor(b) => Some(b.clone()),
            _ => None,
        };
        Ok(SparseLinear {
            values,
            n,
            k,
            scales,
            per_tensor: *per_tensor,
            bias,
        })
    }
}

/// `sparse::qlinear_prepack(W, B, out_features_block_size, in_features_block_size)`.
fn qlinear_prepack(a: &mut Args<'_>) -> Result<IValue> {
    let w = arg_qtensor(a, 0)?;
    if w.dtype() != DType::QInt8 {
        return Err(TensorError::DTypeMismatch {
            expected: DType::QInt8,
            got: w.dtype(),
        }
        .into());
    }
    let [n, k] = *w.shape() else {
        return Err(rank_mismatch(
            a.op,
            "weight",
            RankRequirement::Exactly(2),
            w.shape(),
        ));
    };
    let (ob, ib) = (a.int(2)?, a.int(3)?);
    if (ob, ib) != BLOCK {
        return Err(invalid_argument(
            a.op,
            "(out_features_block_size, in_features_block_size)",
            format!("must be {BLOCK:?} with fbgemm"),
            format!("({ob}, {ib})"),
        ));
    }
    let zero_points_error = || {
        invalid_argument(
            a.op,
            "the weight's zero point(s)",
            "must be 0",
            "a non-zero zero point",
        )
    };
    let (scales, per_tensor) = match w.quantizer().map(|q| &**q) {
        Some(Quantizer::PerTensorAffine { scale, zero_point }) => {
            if *zero_point != 0 {
                return Err(zero_points_error());
            }
            (vec![*scale as f32], true)
        }
        Some(Quantizer::PerChannelAffine {
            scales,
            zero_points,
            axis: 0,
        }) => {
            if zero_points.iter().any(|&z| z != 0) {
                return Err(zero_points_error());
            }
            (scales.iter().map(|&s| s as f32).collect(), false)
        }
        _ => {
            return Err(invalid_argument(
                a.op,
                "the weight's qscheme",
                "must be per-tensor or per-channel along axis 0",
                "another quantization",
            ))
        }
    };
    // (its dtype is checked when the layer runs, as PyTorch does)
    let bias = a.opt_tensor(1)?;
    if let Some(b) = &bias {
        if b.shape() != [n] {
            return Err(shape_mismatch(a.op, "bias", &[n], b.shape()));
        }
    }
    let values = w
        .int_repr_view()?
        .contiguous()?
        .to_vec::<i32>()?
        .into_iter()
        .map(|v| v as i8)
        .collect();
    let p = SparseLinear {
        values,
        n,
        k,
        scales,
        per_tensor,
        bias,
    };
    Ok(IValue::Object(p.to_object()?))
}

fn sparse_arg(a: &Args<'_>, i: usize) -> Result<SparseLinear> {
    match a.get(i)? {
        IValue::Object(o) if &**o.class_name() == SPARSE_LINEAR_CLASS => {
            SparseLinear::from_object(a.op, o)
        }
        other => Err(invalid_argument(
            a.op,
            format!("argument {i}"),
            "must be sparse packed linear parameters",
            other.kind_name(),
        )),
    }
}

/// `sparse::qlinear_unpack(W_prepack) -> (W_origin, B_origin, block_pattern)`.
fn qlinear_unpack(a: &mut Args<'_>) -> Result<IValue> {
    let p = sparse_arg(a, 0)?;
    let pattern = List::new(Type::Int, vec![IValue::Int(BLOCK.0), IValue::Int(BLOCK.1)]);
    Ok(IValue::Tuple(Tuple::new(vec![
        IValue::Tensor(p.weight()?),
        p.bias.map(IValue::Tensor).unwrap_or(IValue::None),
        IValue::List(pattern),
    ])))
}

/// `sparse::qlinear(X, W_prepack, Y_scale_i, Y_zero_point_i)` and `qlinear_relu`.
fn qlinear<const RELU: bool>(a: &mut Args<'_>) -> Result<IValue> {
    let x = arg_qtensor(a, 0)?;
    if x.dtype() != DType::QUInt8 {
        return Err(TensorError::DTypeMismatch {
            expected: DType::QUInt8,
            got: x.dtype(),
        }
        .into());
    }
    check_rank(a.op, "input", RankRequirement::AtLeast(2), x.shape())?;
    let p = sparse_arg(a, 1)?;
    let (out_scale, out_zp) = (a.double(2)?, a.int(3)?);
    let (x_scale, x_zp) = per_tensor_params(a.op, &x)?;
    let (n, k) = (p.n, p.k);
    check_size(
        a.op,
        "input.size(-1) (the packed weight's K)",
        k as i64,
        x.shape()[x.dim() - 1] as i64,
    )?;
    let bias = match &p.bias {
        Some(b) if b.shape() != [n] => return Err(shape_mismatch(a.op, "bias", &[n], b.shape())),
        Some(b) if b.dtype() != DType::Float32 => {
            return Err(TensorError::DTypeMismatch {
                expected: DType::Float32,
                got: b.dtype(),
            }
            .into())
        }
        Some(b) => Some(b.to_vec::<f32>()?),
        None => None,
    };
    let scales = if p.per_tensor {
        vec![p.scales[0]; n]
    } else {
        p.scales.clone()
    };
    // trRequantizeOpt divides the bias by x_scale * w_scale (as the per-channel path does)
    let rq = Requant::new(x_scale, &scales, true, out_scale, out_zp, RELU).columns(
        bias.as_deref(),
        0,
        n,
    );
    let xv = super::int_values(&x)?;
    let m = xv.len() / k.max(1);
    let padded = k.div_ceil(BLOCK_COLS) * BLOCK_COLS;
    let rows: Vec<Vec<i8>> = (0..n).map(|i| p.padded_row(i)).collect();
    let row_sums: Vec<i32> = rows
        .iter()
        .map(|r| r.iter().map(|&v| i32::from(v)).sum())
        .collect();
    let xzp = x_zp as i32;
    let mut out = vec![0i32; m * n];
    let mut xrow = vec![0i32; padded];
    for (i, dst) in out.chunks_exact_mut(n.max(1)).enumerate().take(m) {
        xrow[..k].copy_from_slice(&xv[i * k..(i + 1) * k]);
        for (j, o) in dst.iter_mut().enumerate() {
            // maddubs: u8 x i8 products summed in pairs with int16 saturation
            let acc =
                xrow.chunks_exact(2)
                    .zip(rows[j].chunks_exact(2))
                    .fold(0i32, |s, (xp, wp)| {
                        let pair = xp[0] * i32::from(wp[0]) + xp[1] * i32::from(wp[1]);
                        s.wrapping_add(pair.clamp(i32::from(i16::MIN), i32::from(i16::MAX)))
                    });
            let raw = acc.wrapping_sub(xzp.wrapping_mul(row_sums[j]));
            *o = rq.apply_one(j, raw).into();
        }
    }
    let mut shape = x.shape().to_vec();
    if let Some(last) = shape.last_mut() {
        *last = n;
    }
    Ok(IValue::Tensor(per_tensor_quantized(
        &out,
        &shape,
        DType::QUInt8,
        out_scale,
        out_zp,
    )?))
}
