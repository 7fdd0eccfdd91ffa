//! Kernels: the dense conversions between a jagged batch (packed `values` rows plus `offsets`,
//! one ragged dimension) and a padded dense tensor — `_jagged_to_padded_dense_forward` and
//! `_padded_dense_to_jagged_forward`, as ATen's CPU kernels compute them (the nested-tensor
//! layouts themselves are not modelled; these two take and return plain tensors).

use super::creation::full_tensor;
use super::kernels::{invalid_argument, rank_mismatch, size_mismatch, unsupported_feature};
use super::shape::{narrow, select};
use super::{Args, Registry};
use crate::tensor::RankRequirement;
use crate::tensor::{Scalar, Tensor};
use crate::values::IValue;

type R = crate::Result<IValue>;

/// The single offsets tensor (ATen supports one jagged dimension) as non-decreasing row bounds.
fn offsets(args: &Args<'_>, i: usize) -> crate::Result<Vec<i64>> {
    let list = args.tensor_list(i)?;
    let [offsets] = list.as_slice() else {
        return Err(unsupported_feature(
            args.op,
            format!("{} offsets tensors (only a single jagged dim)", list.len()),
        ));
    };
    if offsets.dim() != 1 {
        return Err(rank_mismatch(
            args.op,
            "offsets",
            RankRequirement::Exactly(1),
            offsets.shape(),
        ));
    }
    let v = offsets.contiguous()?.to_vec::<i64>()?;
    if v.first().is_some_and(|&o| o < 0) || v.windows(2).any(|w| w[1] < w[0]) {
        return Err(invalid_argument(
            args.op,
            "offsets",
            "must be non-negative and non-decreasing",
            format!("{v:?}"),
        ));
    }
    Ok(v)
}

fn check_rows(op: &str, what: &str, end: i64, rows: usize) -> crate::Result<()> {
    if end as u64 > rows as u64 {
        return Err(invalid_argument(
            op,
            "offsets",
            format!("must end within the {rows} rows of {what}"),
            end,
        ));
    }
    Ok(())
}

/// `_jagged_to_padded_dense_forward(values, offsets, max_lengths, padding_value)`: batch item i
/// is `values[offsets[i]..offsets[i+1]]`, truncated to `max_lengths[0]` rows and padded with
/// `padding_value` (converted to the dtype).
fn jagged_to_padded_dense(args: &mut Args<'_>) -> R {
    let values = args.tensor(0)?;
    let offs = offsets(args, 1)?;
    let max_lengths = args.int_list(2)?;
    let [max_length] = max_lengths.as_slice() else {
        return Err(unsupported_feature(
            args.op,
            format!("max_lengths {max_lengths:?} (only a single jagged dim)"),
        ));
    };
    let max_length = usize::try_from(*max_length).map_err(|_| {
        invalid_argument(args.op, "max_lengths", "must be non-negative", max_length)
    })?;
    if values.dim() < 1 {
        return Err(rank_mismatch(
            args.op,
            "values",
            RankRequirement::AtLeast(1),
            values.shape(),
        ));
    }
    let batch = offs.len().saturating_sub(1);
    let mut shape = vec![batch, max_length];
    shape.extend_from_slice(&values.shape()[1..]);
    let padded = full_tensor(&shape, Scalar::Float(args.double(3)?), values.dtype())?;
    for (i, w) in offs.windows(2).enumerate() {
        check_rows(args.op, "values", w[1], values.shape()[0])?;
        let length = (w[1] - w[0]).min(max_length as i64);
        let source = narrow(&values, 0, w[0], length)?;
        narrow(&select(&padded, 0, i as i64)?, 0, 0, length)?.copy_from(&source)?;
    }
    Ok(IValue::Tensor(padded))
}

/// `_padded_dense_to_jagged_forward(dense, offsets, total_L)`: the rows of each batch item
/// packed into `values` at its offsets (`total_L`, when given, must equal the last offset).
/// Rows no offset range covers stay zero (ATen leaves them uninitialized).
fn padded_dense_to_jagged(args: &mut Args<'_>) -> R {
    let padded = args.tensor(0)?;
    let offs = offsets(args, 1)?;
    let final_offset = offs.last().copied().unwrap_or(0);
    let total = match args.opt_int(2)? {
        Some(t) if t != final_offset => {
            return Err(size_mismatch(
                args.op,
                "total_L (the final offset)",
                final_offset,
                t,
            ))
        }
        Some(t) => t,
        None => final_offset,
    };
    if padded.dim() < 2 {
        return Err(rank_mismatch(
            args.op,
            "padded",
            RankRequirement::AtLeast(2),
            padded.shape(),
        ));
    }
    let mut shape = vec![total as usize];
    shape.extend_from_slice(&padded.shape()[2..]);
    let values = Tensor::zeros(&shape, padded.dtype())?;
    let max_length = padded.shape()[1] as i64;
    for (i, w) in offs.windows(2).enumerate() {
        let length = w[1] - w[0];
        if length > max_length {
            return Err(invalid_argument(
                args.op,
                format!("the length of batch item {i}"),
                format!("must be at most padded's max length {max_length}"),
                length,
            ));
        }
        if i >= padded.shape()[0] {
            return Err(invalid_argument(
                args.op,
                "the number of offsets",
                format!(
                    "must be at most padded.size(0) + 1 ({})",
                    padded.shape()[0] + 1
                ),
                offs.len(),
            ));
        }
        let source = narrow(&select(&padded, 0, i as i64)?, 0, 0, length)?;
        narrow(&values, 0, w[0], length)?.copy_from(&source)?;
    }
    Ok(IValue::Tensor(values))
}

pub(crate) fn register(r: &mut Registry) {
    r.add(
        "aten::_jagged_to_padded_dense_forward",
        jagged_to_padded_dense,
    );
    r.add(
        "aten::_padded_dense_to_jagged_forward",
        padded_dense_to_jagged,
    );
}
