//! Channels-last quantized tensors as PyTorch keeps them. Every quantized convolution (fbgemm,
//! x86, QNNPACK, 1-d to 3-d, transposed too) returns its output channels-last (a conv1d's as
//! the `[N, C, L]` squeeze of `[N, C, 1, L]`: strides `(L*C, 1, C)`), and the ops after it
//! allocate their outputs in the input's `suggest_memory_format()`, so a chain of convolution,
//! add, relu and pooling stays channels-last; the layout is a strided view, not another value.
//! It matters to values where a kernel depends on it: QNNPACK's `clamp` / `hardtanh` copies
//! the input's bytes in its own memory order into a contiguous output, and ATen's quantized
//! average pooling has separate NCHW and NHWC kernels with different rounding.

use super::byte_transpose;
use crate::ops::kernels::parallel::for_each_chunk_mut;
use crate::ops::linalg::permute;
use crate::ops::tensor_queries::strides_like_channels_last;
use crate::ops::Args;
use crate::tensor::{DType, Quantizer, Tensor};
use crate::values::IValue;
use crate::Result;

/// The dim orders of the channels-last formats: memory order (outermost first) and back.
const ORDER_4D: ([usize; 4], [usize; 4]) = ([0, 2, 3, 1], [0, 3, 1, 2]);
const ORDER_5D: ([usize; 5], [usize; 5]) = ([0, 2, 3, 4, 1], [0, 4, 1, 2, 3]);

/// c10's `suggest_memory_format() != Contiguous`: a 4-d or 5-d tensor whose strides are
/// channels-last-like (what an op allocating "like the input" gives channels-last strides).
pub(crate) fn suggests_channels_last(t: &Tensor) -> bool {
    match t.dim() {
        4 => strides_like_channels_last(t.shape(), t.strides(), &[1, 3, 2, 0]),
        5 => strides_like_channels_last(t.shape(), t.strides(), &[1, 4, 3, 2, 0]),
        _ => false,
    }
}

/// The permutations to memory order and back of a tensor that suggests channels-last, whose
/// dims may be permuted: a float tensor or a per-tensor quantized one (a per-channel
/// quantizer names its axis by position).
fn channels_last_orders(t: &Tensor) -> Option<(&'static [usize], &'static [usize])> {
    let per_tensor = match t.quantizer().map(|q| &**q) {
        None => true,
        Some(q) => matches!(q, Quantizer::PerTensorAffine { .. }),
    };
    if !per_tensor || !suggests_channels_last(t) {
        return None;
    }
    match t.dim() {
        4 => Some((&ORDER_4D.0, &ORDER_4D.1)),
        5 => Some((&ORDER_5D.0, &ORDER_5D.1)),
        _ => None,
    }
}

/// `f(x)` with the result in `x`'s suggested memory format, for a kernel that works on any
/// layout and returns a contiguous tensor of `x`'s shape (elementwise ops): a channels-last
/// `x` goes in as its memory-order (NHWC) view, and `f`'s contiguous result comes back as the
/// channels-last view of it, as ATen's kernels allocating `suggest_memory_format()` leave it.
pub(crate) fn in_memory_order(
    x: &Tensor,
    f: impl FnOnce(&Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    match channels_last_orders(x) {
        Some((to, back)) => permute(&f(&permute(x, to)?)?, back),
        None => f(x),
    }
}

/// A channels-last copy of `t` (4-d or 5-d; itself when it already is dense channels-last,
/// and when it has another rank); quint8 values by byte transposes.
pub(crate) fn to_channels_last(t: &Tensor) -> Result<Tensor> {
    let (to, back): (&[usize], &[usize]) = match t.dim() {
        4 => (&ORDER_4D.0, &ORDER_4D.1),
        5 => (&ORDER_5D.0, &ORDER_5D.1),
        _ => return Ok(t.clone()),
    };
    if is_dense_in(t, to) {
        return Ok(t.clone());
    }
    if let (Some(q), DType::QUInt8, true) = (t.quantizer(), t.dtype(), t.is_contiguous()) {
        let shape = t.shape();
        let (n, c) = (shape[0], shape[1]);
        let plane: usize = shape[2..].iter().product();
        let ints = t.int_repr_view()?;
        let bytes = {
            let read = ints.read::<u8>()?;
            planes_to_pixels(read.as_slice().unwrap_or(&[]), n, c, plane)
        };
        let nhwc_shape: Vec<usize> = to.iter().map(|&d| shape[d]).collect();
        let nhwc = Tensor::from_vec(bytes, &nhwc_shape)?;
        return permute(&Tensor::quantized_from_ints(&nhwc, (**q).clone())?, back);
    }
    permute(&permute(t, to)?.contiguous()?, back)
}

/// Whether `t` permuted by `order` is contiguous.
fn is_dense_in(t: &Tensor, order: &[usize]) -> bool {
    permute(t, order).is_ok_and(|p| p.is_contiguous())
}

/// Bytes of one image above which its transpose is split over the kernel pool.
const PARALLEL_IMAGE_BYTES: usize = 1 << 15;

/// `n` images of `c` planes of `plane` bytes (NCHW) as `n` images of `plane` pixels of `c`
/// bytes (NHWC). An image is split into runs of 64 pixels, the pool's tasks.
pub(crate) fn planes_to_pixels(src: &[u8], n: usize, c: usize, plane: usize) -> Vec<u8> {
    const PIXELS: usize = 64;
    let image = c * plane;
    let mut out = vec![0u8; src.len()];
    if image == 0 || src.len() != n * image {
        out.copy_from_slice(src);
        return out;
    }
    let par = image > PARALLEL_IMAGE_BYTES;
    for (from, to) in src.chunks(image).zip(out.chunks_mut(image)) {
        for_each_chunk_mut(to, PIXELS * c, par, &|k, dst| {
            let first = k * PIXELS;
            let pixels = dst.len() / c;
            if !byte_transpose::transpose(&from[first..], plane, c, pixels, dst, c) {
                for ch in 0..c {
                    for p in 0..pixels {
                        dst[p * c + ch] = from[ch * plane + first + p];
                    }
                }
            }
        });
    }
    out
}

/// `n` images of `plane` pixels of `c` bytes (NHWC) as `n` images of `c` planes (NCHW). An
/// image is split into blocks of 16 (or 8) channels, the pool's tasks.
pub(crate) fn pixels_to_planes(src: &[u8], n: usize, c: usize, plane: usize) -> Vec<u8> {
    let image = c * plane;
    let mut out = vec![0u8; src.len()];
    if image == 0 || src.len() != n * image {
        out.copy_from_slice(src);
        return out;
    }
    let block = [16, 8]
        .into_iter()
        .find(|&b| c.is_multiple_of(b))
        .unwrap_or(c);
    let par = image > PARALLEL_IMAGE_BYTES;
    for (from, to) in src.chunks(image).zip(out.chunks_mut(image)) {
        for_each_chunk_mut(to, block * plane, par, &|k, dst| {
            let first = k * block;
            let channels = dst.len() / plane;
            if !byte_transpose::transpose(&from[first..], c, plane, channels, dst, plane) {
                for p in 0..plane {
                    for ch in 0..channels {
                        dst[ch * plane + p] = from[p * c + first + ch];
                    }
                }
            }
        });
    }
    out
}

/// The integers of quantized `x` (`[n, c, *spatial]`) as a contiguous (NCHW) tensor: a dense
/// channels-last quint8 `x` by byte transposes, any other layout by a strided copy.
pub(crate) fn planar_ints(x: &Tensor) -> Result<Tensor> {
    let ints = x.int_repr_view()?;
    if x.dtype() == DType::QUInt8 && !x.is_contiguous() {
        if let Some((to, _)) = channels_last_orders(x).filter(|(to, _)| is_dense_in(x, to)) {
            let shape = x.shape();
            let (n, c) = (shape[0], shape[1]);
            let plane: usize = shape[2..].iter().product();
            let bytes = {
                let nhwc = permute(&ints, to)?;
                let read = nhwc.read::<u8>()?;
                read.as_slice()
                    .map(|src| pixels_to_planes(src, n, c, plane))
            };
            if let Some(bytes) = bytes {
                return Ok(Tensor::from_vec(bytes, shape)?);
            }
        }
    }
    ints.contiguous()
}

/// The one-byte integers of quantized `x` (`[n, c, *spatial]`) when its layout is dense
/// channels-last, as its memory-order (`[n, *spatial, c]`) contiguous int tensor.
pub(crate) fn channels_last_ints(x: &Tensor) -> Result<Option<Tensor>> {
    match channels_last_orders(x) {
        Some((to, _)) if x.dtype().size() == 1 && is_dense_in(x, to) => {
            Ok(Some(permute(&x.int_repr_view()?, to)?))
        }
        _ => Ok(None),
    }
}

/// Run elementwise `kernel` with its tensor arguments at `operands` (the first deciding the
/// layout) in memory order, the tensor result viewed back: ATen's elementwise quantized
/// kernels (relu, add, mul, clamp, sigmoid, quantize, dequantize, ...) allocate their output
/// in the first input's `suggest_memory_format()`, so a channels-last input gives a
/// channels-last output. Operands of other shapes (a broadcast one) leave the call as it is.
pub(crate) fn elementwise(
    a: &mut Args<'_>,
    operands: &[usize],
    kernel: impl FnOnce(&mut Args<'_>) -> Result<IValue>,
) -> Result<IValue> {
    let Some(IValue::Tensor(x)) = a.values.first() else {
        return kernel(a);
    };
    let Some((to, back)) = channels_last_orders(x) else {
        return kernel(a);
    };
    let shape = x.shape().to_vec();
    let same_shape = operands.iter().all(|&i| match a.values.get(i) {
        Some(IValue::Tensor(t)) => t.shape() == shape.as_slice(),
        _ => true,
    });
    if !same_shape {
        // a broadcast operand: the kernel's row-major result, laid out like `x`
        return like_first_input(a, kernel);
    }
    let mut originals = Vec::with_capacity(operands.len());
    for &i in operands {
        if let Some(IValue::Tensor(t)) = a.values.get(i) {
            let permuted = IValue::Tensor(permute(t, to)?);
            originals.push((i, std::mem::replace(&mut a.values[i], permuted)));
        }
    }
    let out = kernel(a);
    for (i, v) in originals {
        a.values[i] = v;
    }
    match out? {
        IValue::Tensor(t) if t.dim() == shape.len() => Ok(IValue::Tensor(permute(&t, back)?)),
        other => Ok(other),
    }
}

/// QNNPACK's `clamp` / `hardtanh` (`qnnpack_clamp`): it clamps
/// `input.contiguous(input.suggest_memory_format())` as one flat run of bytes into an output
/// allocated contiguous, so a channels-last input's bytes land in NCHW positions in their
/// channels-last order (the values move). `kernel` is the clamp itself.
pub(crate) fn qnnpack_clamp(
    a: &mut Args<'_>,
    kernel: impl FnOnce(&mut Args<'_>) -> Result<IValue>,
) -> Result<IValue> {
    let Some(IValue::Tensor(x)) = a.values.first() else {
        return kernel(a);
    };
    if channels_last_orders(x).is_none() {
        return kernel(a);
    }
    let shape = x.shape().to_vec();
    let out = elementwise(a, &[0], kernel)?;
    let IValue::Tensor(y) = out else {
        return Ok(out);
    };
    // the clamped bytes in channels-last order, read as a contiguous tensor of the input's
    // shape
    let flat = to_channels_last(&y)?;
    let offset = flat.storage_offset();
    Ok(IValue::Tensor(flat.as_strided(
        &shape,
        &crate::tensor::contiguous_strides(&shape),
        offset,
    )?))
}

/// Run `kernel` (a pooling or resampling op returning a contiguous tensor) and give its result
/// the layout ATen allocates: the first argument's `suggest_memory_format()`.
pub(crate) fn like_first_input(
    a: &mut Args<'_>,
    kernel: impl FnOnce(&mut Args<'_>) -> Result<IValue>,
) -> Result<IValue> {
    let channels_last =
        matches!(a.values.first(), Some(IValue::Tensor(x)) if channels_last_orders(x).is_some());
    let rank = match a.values.first() {
        Some(IValue::Tensor(x)) => x.dim(),
        _ => 0,
    };
    match kernel(a)? {
        IValue::Tensor(t) if channels_last && t.dim() == rank => {
            Ok(IValue::Tensor(to_channels_last(&t)?))
        }
        other => Ok(other),
    }
}

/// c10's `is_contiguous(MemoryFormat::ChannelsLast)` of a 4-d tensor (ChannelsLast3d of a
/// 5-d one): dense in channels-last order.
pub(crate) fn is_channels_last_contiguous(t: &Tensor) -> bool {
    match t.dim() {
        4 => is_dense_in(t, &ORDER_4D.0),
        5 => is_dense_in(t, &ORDER_5D.0),
        _ => false,
    }
}

/// The integers of quantized `x` in row-major (NCHW) order, for the pooling kernels: a dense
/// channels-last quint8 `x` through byte transposes rather than a strided gather.
pub(crate) fn planar_values(x: &Tensor) -> Result<Vec<i32>> {
    if x.is_contiguous() {
        return super::int_values(x);
    }
    planar_ints(x)?.to_vec::<i32>()
}
