//! Operators that PyTorch's Python libraries define on top of aten (`torch.library`
//! fragments): FSDP's copy-in/out helpers (`fsdp::`), Inductor's buffer reinterpretation and
//! fused matmul (`inductor::`), the ONNX exporter's runtime ops (`onnx::`), FlexAttention's and
//! FlexGEMM's helpers (`flex_lib::`, `flex_gemm::`), the dispatcher's test namespace
//! (`_test::`, Inductor's `_inductor_test::`), `debug_mode_ops::annotate`, and NNPACK's convolution entry points. Each runs
//! the aten computation its Python or C++ definition runs, composed from tsrun's aten kernels.

use super::jit_builtins::int_list;
use super::kernels::{
    check_rank, check_size, invalid_argument, rank_mismatch, shape_mismatch, unsupported_feature,
    value_err, wrong_dtype,
};
use super::prims::via_aten;
use super::{Args, Registry};
use crate::tensor::{RankRequirement, Tensor};
use crate::values::{IValue, List, Type};

type R = crate::Result<IValue>;

const ROTARY: &str = "onnx::RotaryEmbedding";

fn tensor_of(r: IValue, op: &str) -> crate::Result<Tensor> {
    match r {
        IValue::Tensor(t) => Ok(t),
        other => Err(value_err(format!(
            "{op}: expected a tensor result, got {}",
            other.kind_name()
        ))),
    }
}

/// Copy `src` into the caller's `out` (no resizing: tsrun cannot resize a caller's tensor).
fn copy_into(op: &str, out: &Tensor, src: &Tensor) -> crate::Result<()> {
    if out.shape() != src.shape() {
        return Err(unsupported_feature(
            op,
            format!(
                "resizing out (shape {:?}) to the result's shape {:?}",
                out.shape(),
                src.shape()
            ),
        ));
    }
    out.copy_from(src)
}

/// `_test::cat(inputs)`: `torch.cat(inputs)` along dim 0.
fn test_cat(a: &mut Args<'_>) -> R {
    let inputs = a.get(0)?.clone();
    via_aten(a, "aten::cat", vec![inputs, IValue::Int(0)])
}

/// `_test::get_first(str[][])`: the first string of the first list.
fn test_get_first(a: &mut Args<'_>) -> R {
    let outer = a.list(0)?;
    let first = outer
        .get(0)
        .ok_or_else(|| invalid_argument(a.op, "self", "must not be empty", "[]"))?;
    match first {
        IValue::List(inner) => inner
            .get(0)
            .ok_or_else(|| invalid_argument(a.op, "self[0]", "must not be empty", "[]")),
        other => Err(invalid_argument(
            a.op,
            "self[0]",
            "must be a list of strings",
            format!("a {}", other.kind_name()),
        )),
    }
}

/// `_test::leaky_relu(self, v)`: `aten::leaky_relu` with slope `v`.
fn test_leaky_relu(a: &mut Args<'_>) -> R {
    let x = a.get(0)?.clone();
    let slope = a.get(1)?.clone();
    via_aten(a, "aten::leaky_relu", vec![x, slope])
}

/// `_inductor_test::realize(self)`: Inductor's test op that forces a buffer, `self.clone()`.
fn inductor_test_realize(a: &mut Args<'_>) -> R {
    let x = a.get(0)?.clone();
    via_aten(a, "aten::clone", vec![x, IValue::None])
}

/// `inductor::_reinterpret_tensor(self, size, stride, offset_increment)`: a view of `self`'s
/// storage with the given geometry, its offset moved by `offset_increment` elements.
fn reinterpret_tensor(a: &mut Args<'_>) -> R {
    let x = a.tensor(0)?;
    let size = a.get(1)?.clone();
    let stride = a.get(2)?.clone();
    let offset = x.storage_offset() as i64 + a.int(3)?;
    via_aten(
        a,
        "aten::as_strided",
        vec![IValue::Tensor(x), size, stride, IValue::Int(offset)],
    )
}

/// `inductor::_alloc_from_pool(self, offset_bytes, dtype, size, stride)`: a tensor of `dtype`
/// over `self`'s storage (a byte pool) starting `offset_bytes` in (rounded down to whole
/// elements), bounds-checked against the storage.
fn alloc_from_pool(a: &mut Args<'_>) -> R {
    let pool = a.tensor(0)?;
    let offset_bytes = a.int(1)?;
    let dtype = a.dtype(2)?;
    let size = a.int_list(3)?;
    let stride = a.int_list(4)?;
    if pool.storage_offset() != 0 {
        return Err(invalid_argument(
            a.op,
            "self.storage_offset()",
            "must be 0",
            pool.storage_offset(),
        ));
    }
    let shape = size
        .iter()
        .map(|&s| usize::try_from(s))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| invalid_argument(a.op, "size", "must be non-negative", format!("{size:?}")))?;
    let strides: Vec<isize> = stride.iter().map(|&s| s as isize).collect();
    let offset = usize::try_from(offset_bytes).map_err(|_| {
        invalid_argument(a.op, "offset_bytes", "must be non-negative", offset_bytes)
    })? / dtype.size().max(1);
    let t = Tensor::from_parts(pool.storage().clone(), offset, &shape, &strides, dtype)?;
    Ok(IValue::Tensor(t))
}

/// `inductor::_mm_plus_mm(a, b, c, d, out)`: `out = a @ b`, then `out += c @ d` (ATen's
/// `mm_out` followed by `addmm_`); returns `out`.
fn mm_plus_mm(a: &mut Args<'_>) -> R {
    let vals: Vec<IValue> = (0..4)
        .map(|i| a.get(i).cloned())
        .collect::<Result<_, _>>()?;
    let out = a.tensor(4)?;
    let ab = tensor_of(
        via_aten(a, "aten::mm", vec![vals[0].clone(), vals[1].clone()])?,
        a.op,
    )?;
    let sum = tensor_of(
        via_aten(
            a,
            "aten::addmm",
            vec![
                IValue::Tensor(ab),
                vals[2].clone(),
                vals[3].clone(),
                IValue::Int(1),
                IValue::Int(1),
            ],
        )?,
        a.op,
    )?;
    copy_into(a.op, &out, &sum)?;
    Ok(IValue::Tensor(out))
}

/// `onnx::Shape(t)`: the sizes as an int64 tensor.
fn onnx_shape(a: &mut Args<'_>) -> R {
    let t = a.tensor(0)?;
    let dims: Vec<i64> = t.shape().iter().map(|&d| d as i64).collect();
    let n = dims.len();
    Ok(IValue::Tensor(Tensor::from_vec(dims, &[n])?))
}

/// `onnx::Reshape(input, shape)`: `aten::reshape` to the int64 sizes in `shape`.
fn onnx_reshape(a: &mut Args<'_>) -> R {
    let x = a.get(0)?.clone();
    let shape = a.tensor(1)?;
    if shape.dim() > 1 || shape.dtype().is_floating_point() {
        check_rank(a.op, "shape", RankRequirement::AtMost(1), shape.shape())?;
        return Err(wrong_dtype(
            a.op,
            "shape",
            "an integer tensor",
            shape.dtype(),
        ));
    }
    let sizes = shape.contiguous()?.to_vec::<i64>()?;
    via_aten(a, "aten::reshape", vec![x, int_list(sizes)])
}

/// Call the aten overload `name` and take its tensor result.
fn aten(a: &Args<'_>, name: &str, values: Vec<IValue>) -> crate::Result<Tensor> {
    tensor_of(via_aten(a, name, values)?, a.op)
}

/// `x[..., start:end:step]` on the last dim.
fn last_dim_slice(
    a: &Args<'_>,
    x: &Tensor,
    start: i64,
    end: i64,
    step: i64,
) -> crate::Result<Tensor> {
    aten(
        a,
        "aten::slice.Tensor",
        vec![
            IValue::Tensor(x.clone()),
            IValue::Int(-1),
            IValue::Int(start),
            IValue::Int(end),
            IValue::Int(step),
        ],
    )
}

/// `x op y` for `aten::mul.Tensor`, or `aten::add.Tensor` / `aten::sub.Tensor` with alpha 1.
fn binary(a: &Args<'_>, name: &str, x: &Tensor, y: &Tensor) -> crate::Result<Tensor> {
    let mut values = vec![IValue::Tensor(x.clone()), IValue::Tensor(y.clone())];
    if name != "aten::mul.Tensor" {
        values.push(IValue::Int(1));
    }
    aten(a, name, values)
}

fn cat_last(a: &Args<'_>, parts: Vec<Tensor>) -> crate::Result<Tensor> {
    let list = IValue::List(List::new(
        Type::Tensor,
        parts.into_iter().map(IValue::Tensor).collect(),
    ));
    aten(a, "aten::cat", vec![list, IValue::Int(-1)])
}

/// `onnx::RotaryEmbedding.opset23(x, cos_cache, sin_cache, position_ids, interleaved,
/// num_heads, rotary_embedding_dim)`: torch/onnx/ops' reference implementation step by step
/// (x as `[batch, heads, seq, head]` or `[batch, seq, hidden]` with `num_heads`; caches
/// `[batch, seq, dim/2]`, or `[max_pos, dim/2]` indexed by `position_ids`).
fn rotary_embedding(a: &mut Args<'_>) -> R {
    let x_in = a.tensor(0)?;
    let cos_cache = a.tensor(1)?;
    let sin_cache = a.tensor(2)?;
    let position_ids = a.opt_tensor(3)?;
    let interleaved = a.bool(4)?;
    let num_heads = a.int(5)?;
    let mut rot_dim = a.int(6)?;
    let input_shape = x_in.shape().to_vec();
    let rank = input_shape.len();
    if rank != 3 && rank != 4 {
        return Err(rank_mismatch(
            ROTARY,
            "x",
            RankRequirement::OneOf(vec![3, 4]),
            &input_shape,
        ));
    }
    let (batch, seq) = (input_shape[0], input_shape[rank - 2]);
    match &position_ids {
        Some(p) => {
            if p.dim() != 2 || p.shape()[0] != batch || p.shape()[1] != seq {
                return Err(shape_mismatch(
                    ROTARY,
                    "position_ids",
                    &[batch, seq],
                    p.shape(),
                ));
            }
            if cos_cache.dim() != 2 || sin_cache.dim() != 2 {
                check_rank(
                    ROTARY,
                    "cos_cache",
                    RankRequirement::Exactly(2),
                    cos_cache.shape(),
                )?;
                check_rank(
                    ROTARY,
                    "sin_cache",
                    RankRequirement::Exactly(2),
                    sin_cache.shape(),
                )?;
            }
        }
        None => {
            if cos_cache.dim() != 3 || sin_cache.dim() != 3 {
                check_rank(
                    ROTARY,
                    "cos_cache",
                    RankRequirement::Exactly(3),
                    cos_cache.shape(),
                )?;
                check_rank(
                    ROTARY,
                    "sin_cache",
                    RankRequirement::Exactly(3),
                    sin_cache.shape(),
                )?;
            }
        }
    }
    let x = if rank == 4 {
        aten(
            a,
            "aten::permute",
            vec![IValue::Tensor(x_in.clone()), int_list([0, 2, 1, 3])],
        )?
    } else {
        if num_heads <= 0 {
            return Err(invalid_argument(
                ROTARY,
                "num_heads",
                "must be positive for 3-D inputs",
                num_heads,
            ));
        }
        let head = input_shape[2] as i64 / num_heads;
        aten(
            a,
            "aten::reshape",
            vec![
                IValue::Tensor(x_in.clone()),
                int_list([batch as i64, seq as i64, num_heads, head]),
            ],
        )?
    };
    let head_size = x.shape()[3] as i64;
    if rot_dim == 0 {
        rot_dim = head_size;
    }
    let x_rotate = last_dim_slice(a, &x, 0, rot_dim, 1)?;
    let x_keep = last_dim_slice(a, &x, rot_dim, i64::MAX, 1)?;
    let half = rot_dim / 2;
    let (cos, sin) = match &position_ids {
        Some(p) => {
            let pick = |cache: &Tensor| {
                let idx = IValue::List(List::new(
                    Type::Optional(Box::new(Type::Tensor)),
                    vec![IValue::Tensor(p.clone())],
                ));
                aten(
                    a,
                    "aten::index.Tensor",
                    vec![IValue::Tensor(cache.clone()), idx],
                )
            };
            (pick(&cos_cache)?, pick(&sin_cache)?)
        }
        None => (cos_cache.clone(), sin_cache.clone()),
    };
    for (name, c) in [("cos", &cos), ("sin", &sin)] {
        let s = c.shape();
        check_rank(ROTARY, name, RankRequirement::AtLeast(3), s)?;
        if s[0] != batch || s[1] != seq || s[s.len() - 1] as i64 != half {
            return Err(shape_mismatch(
                ROTARY,
                format!("{name} (first, second and last dims)"),
                &[batch, seq, half.max(0) as usize],
                &[s[0], s[1], s[s.len() - 1]],
            ));
        }
    }
    let unsq = |t: &Tensor| {
        aten(
            a,
            "aten::unsqueeze",
            vec![IValue::Tensor(t.clone()), IValue::Int(2)],
        )
    };
    let (cos, sin) = (unsq(&cos)?, unsq(&sin)?);
    let (x1, x2) = if interleaved {
        (
            last_dim_slice(a, &x_rotate, 0, i64::MAX, 2)?,
            last_dim_slice(a, &x_rotate, 1, i64::MAX, 2)?,
        )
    } else {
        // torch.chunk(x, 2, -1): the first half rounded up
        let first = (x_rotate.shape()[3] as i64 + 1) / 2;
        (
            last_dim_slice(a, &x_rotate, 0, first, 1)?,
            last_dim_slice(a, &x_rotate, first, i64::MAX, 1)?,
        )
    };
    let real = binary(
        a,
        "aten::sub.Tensor",
        &binary(a, "aten::mul.Tensor", &cos, &x1)?,
        &binary(a, "aten::mul.Tensor", &sin, &x2)?,
    )?;
    let imag = binary(
        a,
        "aten::add.Tensor",
        &binary(a, "aten::mul.Tensor", &sin, &x1)?,
        &binary(a, "aten::mul.Tensor", &cos, &x2)?,
    )?;
    let rotated = if interleaved {
        let u = |t: &Tensor| {
            aten(
                a,
                "aten::unsqueeze",
                vec![IValue::Tensor(t.clone()), IValue::Int(-1)],
            )
        };
        let joined = cat_last(a, vec![u(&real)?, u(&imag)?])?;
        let dims = x_rotate.shape().iter().map(|&d| d as i64);
        aten(
            a,
            "aten::reshape",
            vec![IValue::Tensor(joined), int_list(dims)],
        )?
    } else {
        cat_last(a, vec![real, imag])?
    };
    let output = cat_last(a, vec![rotated, x_keep])?;
    let r = if rank == 3 {
        let dims = input_shape.iter().map(|&d| d as i64);
        aten(
            a,
            "aten::reshape",
            vec![IValue::Tensor(output), int_list(dims)],
        )?
    } else {
        aten(
            a,
            "aten::permute",
            vec![IValue::Tensor(output), int_list([0, 2, 1, 3])],
        )?
    };
    Ok(IValue::Tensor(r))
}

/// `torch._chunk_cat(tensors, dim, num_chunks)` written into `out`; `cast`: each tensor first
/// converted to `out`'s dtype (`chunk_cat_mixed_dtype`), else all of `out`'s dtype.
fn chunk_cat_into(a: &mut Args<'_>, cast: bool) -> R {
    let (dim, chunks) = (a.int(1)?, a.int(2)?);
    let out = a.tensor(3)?;
    let mut tensors = a.tensor_list(0)?;
    for t in tensors.iter_mut() {
        if cast {
            *t = t.to_dtype(out.dtype())?;
        } else if t.dtype() != out.dtype() {
            return Err(crate::tensor::TensorError::DTypeMismatch {
                expected: out.dtype(),
                got: t.dtype(),
            }
            .into());
        }
    }
    let list = IValue::List(List::new(
        Type::Tensor,
        tensors.into_iter().map(IValue::Tensor).collect(),
    ));
    let r = aten(
        a,
        "aten::_chunk_cat",
        vec![list, IValue::Int(dim), IValue::Int(chunks)],
    )?;
    copy_into(a.op, &out, &r)?;
    Ok(IValue::None)
}

/// `fsdp::copy_(tensor, data)`: `tensor.copy_(data)`; returns nothing.
fn fsdp_copy(a: &mut Args<'_>) -> R {
    let dst = a.tensor(0)?;
    let src = a.tensor(1)?;
    dst.copy_from(&src)?;
    Ok(IValue::None)
}

/// The pieces of `torch.split_with_sizes(x, sizes, dim)`, which must be `count` (one per
/// tensor they pair with).
fn split_pieces(
    a: &Args<'_>,
    x: IValue,
    sizes: IValue,
    dim: i64,
    count: usize,
) -> crate::Result<Vec<Tensor>> {
    let pieces = via_aten(
        a,
        "aten::split_with_sizes",
        vec![x, sizes, IValue::Int(dim)],
    )?;
    let IValue::List(pieces) = pieces else {
        return Err(value_err(format!("{}: split gave no list", a.op)));
    };
    check_size(
        a.op,
        "the number of split pieces (one per tensor)",
        count as i64,
        pieces.len() as i64,
    )?;
    pieces
        .to_vec()
        .into_iter()
        .map(|p| tensor_of(p, a.op))
        .collect()
}

/// `fsdp::split_with_sizes_copy(all_gather_output, sizes, dim, out=[...])`: the pieces of
/// `torch.split_with_sizes` copied into the `out` tensors; returns nothing.
fn fsdp_split_with_sizes_copy(a: &mut Args<'_>) -> R {
    let outs = a.tensor_list(3)?;
    let pieces = split_pieces(
        a,
        a.get(0)?.clone(),
        a.get(1)?.clone(),
        a.int(2)?,
        outs.len(),
    )?;
    for (piece, out) in pieces.iter().zip(&outs) {
        copy_into(a.op, out, piece)?;
    }
    Ok(IValue::None)
}

/// `fsdp::all_gather_copy_in(inputs, output, inp_split_sizes, input_numel, rank)`: this rank's
/// window of the flat `output` (a view), split by `inp_split_sizes`, each piece filled from
/// its input; returns `(window, output)`.
fn fsdp_all_gather_copy_in(a: &mut Args<'_>) -> R {
    let inputs = a.tensor_list(0)?;
    let output = a.tensor(1)?;
    let (numel, rank) = (a.int(3)?, a.int(4)?);
    let start = numel.checked_mul(rank).ok_or_else(|| {
        invalid_argument(
            a.op,
            "all_gather_input_numel * rank",
            "must fit in 64 bits",
            format!("{numel} * {rank}"),
        )
    })?;
    let window = aten(
        a,
        "aten::narrow",
        vec![
            IValue::Tensor(output.clone()),
            IValue::Int(0),
            IValue::Int(start),
            IValue::Int(numel),
        ],
    )?;
    let sizes = a.get(2)?.clone();
    let pieces = split_pieces(a, IValue::Tensor(window.clone()), sizes, 0, inputs.len())?;
    for (piece, input) in pieces.iter().zip(&inputs) {
        piece.copy_from(input)?;
    }
    Ok(IValue::Tuple(crate::values::Tuple::new(vec![
        IValue::Tensor(window),
        IValue::Tensor(output),
    ])))
}

/// `flex_lib::zeros_and_scatter(shape, indices, vals)`: `zeros(shape).index_put(indices, vals,
/// accumulate=True)`; without indices (a scalar output) `vals.sum()`.
fn zeros_and_scatter(a: &mut Args<'_>) -> R {
    let shape = a.int_list(0)?;
    let indices = a.get(1)?.clone();
    let vals = a.tensor(2)?;
    let no_indices = matches!(&indices, IValue::List(l) if l.is_empty());
    if no_indices {
        if !shape.is_empty() {
            return Err(invalid_argument(
                a.op,
                "shape",
                "must be empty (a scalar output) when there are no indices",
                format!("{shape:?}"),
            ));
        }
        return via_aten(a, "aten::sum", vec![IValue::Tensor(vals), IValue::None]);
    }
    let dims = shape
        .iter()
        .map(|&s| usize::try_from(s))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| {
            invalid_argument(a.op, "shape", "must be non-negative", format!("{shape:?}"))
        })?;
    let zeros = Tensor::zeros(&dims, vals.dtype())?;
    let indices = match indices {
        IValue::List(l) => IValue::List(List::new(
            Type::Optional(Box::new(Type::Tensor)),
            l.to_vec(),
        )),
        other => other,
    };
    via_aten(
        a,
        "aten::index_put",
        vec![
            IValue::Tensor(zeros),
            indices,
            IValue::Tensor(vals),
            IValue::Bool(true),
        ],
    )
}

/// `flex_gemm::to_blocked(scales)`: a 2-d scale matrix zero-padded to 128-row, 4-column
/// tiles, each tile stored as cuBLAS's blocked layout (`[4, 32, 4]` transposed to
/// `[32, 4, 4]`), flattened.
fn to_blocked(a: &mut Args<'_>) -> R {
    let x = a.tensor(0)?;
    check_rank(a.op, "input", RankRequirement::Exactly(2), x.shape())?;
    let (rows, cols) = (x.shape()[0] as i64, x.shape()[1] as i64);
    if rows == 0 || cols == 0 {
        return Ok(IValue::Tensor(Tensor::zeros(&[0], x.dtype())?));
    }
    let (row_blocks, col_blocks) = ((rows + 127) / 128, (cols + 3) / 4);
    let padded = aten(
        a,
        "aten::constant_pad_nd",
        vec![
            IValue::Tensor(x),
            int_list([0, col_blocks * 4 - cols, 0, row_blocks * 128 - rows]),
            IValue::Int(0),
        ],
    )?;
    let view = |t: Tensor, name: &str, dims: Vec<i64>| {
        aten(a, name, vec![IValue::Tensor(t), int_list(dims)])
    };
    let blocks = view(
        padded,
        "aten::reshape",
        vec![row_blocks, 128, col_blocks, 4],
    )?;
    let blocks = view(blocks, "aten::permute", vec![0, 2, 1, 3])?;
    let tiles = view(blocks, "aten::reshape", vec![-1, 4, 32, 4])?;
    let tiles = aten(
        a,
        "aten::transpose.int",
        vec![IValue::Tensor(tiles), IValue::Int(1), IValue::Int(2)],
    )?;
    Ok(IValue::Tensor(view(tiles, "aten::reshape", vec![-1])?))
}

/// `aten::_nnpack_spatial_convolution(input, weight, bias, padding, stride)`: NNPACK's float32
/// 2-d convolution (no dilation, one group), computed by tsrun's convolution.
fn nnpack_spatial_convolution(a: &mut Args<'_>) -> R {
    let input = a.tensor(0)?;
    let weight = a.tensor(1)?;
    check_rank(a.op, "input", RankRequirement::Exactly(4), input.shape())?;
    check_rank(a.op, "weight", RankRequirement::Exactly(4), weight.shape())?;
    let float32 = crate::tensor::DType::Float32;
    let bias = a.opt_tensor(2)?;
    if input.dtype() != float32
        || weight.dtype() != float32
        || bias.as_ref().is_some_and(|b| b.dtype() != float32)
    {
        let bad = [Some(&input), Some(&weight), bias.as_ref()]
            .into_iter()
            .flatten()
            .map(Tensor::dtype)
            .find(|&d| d != float32)
            .unwrap_or(float32);
        return Err(wrong_dtype(a.op, "input, weight and bias", "float32", bad));
    }
    let padding = a.get(3)?.clone();
    let stride = a.get(4)?.clone();
    via_aten(
        a,
        "aten::conv2d",
        vec![
            IValue::Tensor(input),
            IValue::Tensor(weight),
            bias.map_or(IValue::None, IValue::Tensor),
            stride,
            padding,
            int_list([1, 1]),
            IValue::Int(1),
        ],
    )
}

pub(crate) fn register(r: &mut Registry) {
    r.add("_test::cat", test_cat);
    r.add("_test::get_first", test_get_first);
    r.add("_test::leaky_relu", test_leaky_relu);
    r.add("_inductor_test::realize", inductor_test_realize);
    r.add("inductor::_reinterpret_tensor", reinterpret_tensor);
    r.add("inductor::_alloc_from_pool", alloc_from_pool);
    r.add("inductor::_mm_plus_mm", mm_plus_mm);
    r.add("onnx::Shape", onnx_shape);
    r.add("onnx::Reshape", onnx_reshape);
    r.add("onnx::RotaryEmbedding.opset23", rotary_embedding);
    r.add("fsdp::chunk_cat", |a| chunk_cat_into(a, false));
    r.add("fsdp::chunk_cat_mixed_dtype", |a| chunk_cat_into(a, true));
    r.add("fsdp::copy_", fsdp_copy);
    // (a CPU buffer has no device stream to record: FSDP's default implementation does nothing)
    r.add("fsdp::record_grad_output_stream", |_| Ok(IValue::None));
    r.add("fsdp::split_with_sizes_copy", fsdp_split_with_sizes_copy);
    r.add("fsdp::all_gather_copy_in", fsdp_all_gather_copy_in);
    r.add("flex_lib::zeros_and_scatter", zeros_and_scatter);
    r.add("flex_gemm::to_blocked", to_blocked);
    r.add("debug_mode_ops::annotate", |_| Ok(IValue::None));
    r.add("aten::_nnpack_available", |_| Ok(IValue::Bool(true)));
    r.add(
        "aten::_nnpack_spatial_convolution",
        nnpack_spatial_convolution,
    );
}
