//! Max pooling over the one-byte integers of a channels-last quantized tensor (ATen's
//! `qmaxpool_2d_nhwc_kernel`): each output pixel is the elementwise maximum of its window's
//! input pixels, runs of `C` bytes, so the work is whole-vector byte `max` (`vpmaxub` /
//! `vpmaxsb`) with no per-element index math. The loop is compiled three times (AVX-512BW,
//! AVX2, baseline SSE2) and chosen by runtime detection; rows of output split over the kernel
//! pool above a size threshold.

use crate::ops::kernels::parallel::for_each_chunk_mut;

/// Output bytes below which one thread pools the whole tensor (a pool task costs a few
/// microseconds; a 56x56x64 output takes about 20 us on one core).
const PARALLEL_OUTPUT_BYTES: usize = 1 << 17;

/// A 2-d pooling window: kernel, stride, padding, dilation per spatial dim (height, width).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Window2d {
    pub k: [i64; 2],
    pub s: [i64; 2],
    pub p: [i64; 2],
    pub d: [i64; 2],
}

/// A one-byte integer type whose maximum is a byte-wise vector op.
pub(crate) trait PoolByte: Copy + Ord + Send + Sync + 'static {
    /// The value no input is below (a window's starting maximum).
    const LOWEST: Self;
}

impl PoolByte for u8 {
    const LOWEST: u8 = u8::MIN;
}

impl PoolByte for i8 {
    const LOWEST: i8 = i8::MIN;
}

/// The geometry of one NHWC pooling call.
#[derive(Clone, Copy)]
struct Nhwc {
    /// Input height and width.
    hw: [usize; 2],
    /// Output height and width.
    out_hw: [usize; 2],
    channels: usize,
    window: Window2d,
}

/// Max pooling of `batch` NHWC images of `hw` pixels of `channels` bytes into `out_hw` pixels:
/// `out` (`batch * out_h * out_w * channels` bytes, NHWC) from `src`. A window with no tap
/// inside the image (padding PyTorch refuses) gives `T::LOWEST`.
pub(crate) fn max_pool2d_nhwc<T: PoolByte>(
    src: &[T],
    batch: usize,
    hw: [usize; 2],
    channels: usize,
    window: Window2d,
    out_hw: [usize; 2],
) -> Vec<T> {
    let geometry = Nhwc {
        hw,
        out_hw,
        channels,
        window,
    };
    let row = out_hw[1] * channels;
    let mut out = vec![T::LOWEST; batch * out_hw[0] * row];
    if row == 0 || src.len() < batch * hw[0] * hw[1] * channels {
        return out;
    }
    let par = out.len() >= PARALLEL_OUTPUT_BYTES;
    for_each_chunk_mut(&mut out, row, par, &|r, dst| {
        // output row `r` is row `r % out_h` of image `r / out_h`
        let (image, oy) = (r / out_hw[0], r % out_hw[0]);
        let image_len = hw[0] * hw[1] * channels;
        let image_src = &src[image * image_len..(image + 1) * image_len];
        pool_row_dispatch(&geometry, image_src, oy, dst);
    });
    out
}

/// [`pool_row`] compiled for the widest vector unit this CPU has.
fn pool_row_dispatch<T: PoolByte>(g: &Nhwc, src: &[T], oy: usize, dst: &mut [T]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512bw") {
            // SAFETY: the CPU has AVX-512BW (checked above), all the function enables.
            return unsafe { pool_row_avx512(g, src, oy, dst) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked above), all the function enables.
            return unsafe { pool_row_avx2(g, src, oy, dst) };
        }
    }
    pool_row(g, src, oy, dst);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn pool_row_avx512<T: PoolByte>(g: &Nhwc, src: &[T], oy: usize, dst: &mut [T]) {
    pool_row(g, src, oy, dst);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn pool_row_avx2<T: PoolByte>(g: &Nhwc, src: &[T], oy: usize, dst: &mut [T]) {
    pool_row(g, src, oy, dst);
}

/// The input positions along one dim that the window of output `o` covers, in range.
#[inline(always)]
fn taps(o: usize, k: i64, s: i64, p: i64, d: i64, n: usize) -> impl Iterator<Item = usize> {
    let start = o as i64 * s - p;
    (0..k)
        .map(move |t| start + t * d)
        .filter(move |&i| i >= 0 && (i as usize) < n)
        .map(|i| i as usize)
}

/// One output row (`out_w` pixels of `channels`) of one image, separably: the byte max of
/// the window's input rows (one long run of `w * channels` bytes per row), then per output
/// pixel the max of its taps' pixels in that reduced row.
#[inline(always)]
fn pool_row<T: PoolByte>(g: &Nhwc, src: &[T], oy: usize, dst: &mut [T]) {
    let Window2d { k, s, p, d } = g.window;
    let c = g.channels;
    let [h, w] = g.hw;
    let in_row = w * c;
    let line = |iy: usize| &src[iy * in_row..(iy + 1) * in_row];
    let mut rows = taps(oy, k[0], s[0], p[0], d[0], h);
    let Some(first) = rows.next() else {
        return;
    };
    let reduced: std::borrow::Cow<'_, [T]> = match rows.next() {
        None => line(first).into(),
        Some(second) => {
            let mut acc = line(first).to_vec();
            max_assign(&mut acc, line(second));
            for iy in rows {
                max_assign(&mut acc, line(iy));
            }
            acc.into()
        }
    };
    for (ox, out) in dst.chunks_exact_mut(c).enumerate().take(g.out_hw[1]) {
        for ix in taps(ox, k[1], s[1], p[1], d[1], w) {
            max_assign(out, &reduced[ix * c..(ix + 1) * c]);
        }
    }
}

/// `acc[i] = max(acc[i], v[i])` in fixed blocks of 64 and 16 bytes (one vector op each
/// whatever the runtime length, which a plain zip loop leaves to its scalar tail below 4
/// vectors), then bytewise.
#[inline(always)]
fn max_assign<T: PoolByte>(acc: &mut [T], v: &[T]) {
    let n = acc.len().min(v.len());
    let (acc, v) = (&mut acc[..n], &v[..n]);
    let wide = n / 64 * 64;
    for (a, b) in acc[..wide]
        .chunks_exact_mut(64)
        .zip(v[..wide].chunks_exact(64))
    {
        for i in 0..64 {
            a[i] = a[i].max(b[i]);
        }
    }
    let narrow = wide + (n - wide) / 16 * 16;
    for (a, b) in acc[wide..narrow]
        .chunks_exact_mut(16)
        .zip(v[wide..narrow].chunks_exact(16))
    {
        for i in 0..16 {
            a[i] = a[i].max(b[i]);
        }
    }
    for (a, &b) in acc[narrow..].iter_mut().zip(&v[narrow..]) {
        *a = (*a).max(b);
    }
}

/// Max pooling of `planes` contiguous (NCHW) uint8 planes of `hw` into `out_hw`: per output
/// row, the window's input rows are reduced elementwise first (a vectorizable byte max), then
/// each output takes its taps of that row. Planes split over the kernel pool above the
/// threshold. A window with no tap inside the image gives 0.
pub(crate) fn max_pool2d_planes(
    src: &[u8],
    planes: usize,
    [h, w]: [usize; 2],
    window: Window2d,
    [oh, ow]: [usize; 2],
) -> Vec<u8> {
    let Window2d { k, s, p, d } = window;
    let plane_out = oh * ow;
    let mut out = vec![0u8; planes * plane_out];
    if plane_out == 0 || src.len() < planes * h * w {
        return out;
    }
    let par = out.len() >= PARALLEL_OUTPUT_BYTES;
    for_each_chunk_mut(&mut out, plane_out, par, &|pl, dst| {
        let plane = &src[pl * h * w..(pl + 1) * h * w];
        let mut rows = vec![0u8; w];
        for (oy, out_row) in dst.chunks_mut(ow).enumerate() {
            rows.fill(0);
            for iy in taps(oy, k[0], s[0], p[0], d[0], h) {
                max_assign(&mut rows, &plane[iy * w..(iy + 1) * w]);
            }
            for (ox, o) in out_row.iter_mut().enumerate() {
                *o = taps(ox, k[1], s[1], p[1], d[1], w)
                    .map(|ix| rows[ix])
                    .max()
                    .unwrap_or(0);
            }
        }
    });
    out
}
