//! The integer sums of quantized convolutions and linear layers with AVX512-VNNI: `vpdpbusd`
//! multiplies 64 uint8 activations by 64 int8 weights and adds each group of four products
//! into a 32-bit lane, four times the multiply-adds per instruction of the float32 kernels
//! (the arithmetic of PyTorch's fbgemm and oneDNN int8 kernels on this hardware).
//!
//! Layout: a row (an output pixel, or a row of a linear layer's input) reads `taps` runs of
//! `c4` bytes (the channels of one kernel tap, padded to a multiple of 4) from a uint8 buffer,
//! each run at `row offset + tap offset`. A convolution lays its input out channels-last with
//! the padding border written in, so every tap of every output pixel is a plain run (implicit
//! GEMM, no im2col). The weights are packed once per weight storage into panels of up to 64
//! output channels, `[tap][c4 / 4][64 channels][4 bytes]`, so the kernel broadcasts 4 bytes of
//! a row and multiplies them into 16 output channels per register.
//!
//! Exactness: each lane adds products exactly and wraps in 32 bits, as fbgemm's accumulators
//! and the direct loop do, so `sum x * w` is the loop's value modulo 2^32. The zero points come
//! in afterwards: `sum (x - x_zp)(w - w_zp) = sum x w - w_zp sum x - x_zp sum w + K x_zp w_zp`
//! (wrapping), with `sum w` made at packing and `sum x` as an extra output column of ones when a
//! weight zero point is not 0.

use crate::ops::kernels::parallel::for_each_index;

/// Output channels per packed panel (four 16-lane registers).
const PANEL: usize = 64;
/// Rows per register tile: 6 rows x 4 registers = 24 accumulators, plus 4 weight registers
/// and one broadcast, within the 32 zmm registers.
const TILE_ROWS: usize = 6;
/// Rows per parallel task at most (a panel's weights stay in L2 while these rows pass).
const TASK_ROWS: usize = 96;
/// Multiply-adds below which the call runs on one thread (a few microseconds of work).
const PARALLEL_MACS: usize = 1 << 18;

/// Whether this CPU runs the kernel (AVX-512 F, BW and VL with VNNI; detected once; VL for
/// the 16-byte masked stores of the epilogue, which otherwise become calls).
pub(super) fn supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::sync::OnceLock;
        static VNNI: OnceLock<bool> = OnceLock::new();
        *VNNI.get_or_init(|| {
            is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("avx512vnni")
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// One panel of packed weights: output columns `first .. first + width`.
struct Panel {
    first: usize,
    width: usize,
    /// Offset of the panel's bytes in [`PackedWeights::data`].
    offset: usize,
}

/// Weights `w[j][t][c]` (`n` outputs, `taps` taps of `c` channels) packed for the kernel, with
/// what the zero-point terms need.
pub(super) struct PackedWeights {
    n: usize,
    taps: usize,
    c: usize,
    /// `c` rounded up to a multiple of 4 (the padding bytes' weights are 0).
    c4: usize,
    /// Columns the kernel writes: `n`, plus a column of row sums `sum x` when asked.
    columns: usize,
    panels: Vec<Panel>,
    data: Vec<i8>,
    /// `sum w[j]` over the real taps and channels (wrapping).
    column_sums: Vec<i32>,
}

impl PackedWeights {
    /// Pack `w` (`n * taps * c` values, row `j` then tap then channel). `None` when a value is
    /// not an int8. `row_sums` adds an output column of ones (its sums are `sum x` per row).
    pub(super) fn new(
        w: &[i32],
        n: usize,
        taps: usize,
        c: usize,
        row_sums: bool,
    ) -> Option<PackedWeights> {
        if n == 0 || taps == 0 || c == 0 || w.len() != n.checked_mul(taps)?.checked_mul(c)? {
            return None;
        }
        if w.iter().any(|&v| i8::try_from(v).is_err()) {
            return None;
        }
        let c4 = c.div_ceil(4) * 4;
        let columns = n + usize::from(row_sums);
        let value = |j: usize, t: usize, ch: usize| -> i8 {
            if ch >= c {
                0
            } else if j == n {
                1
            } else {
                w[(j * taps + t) * c + ch] as i8
            }
        };
        let mut panels = Vec::new();
        let mut data = Vec::new();
        let mut first = 0;
        while first < columns {
            let width = PANEL.min(columns - first);
            let lanes = width.div_ceil(16) * 16;
            panels.push(Panel {
                first,
                width,
                offset: data.len(),
            });
            for t in 0..taps {
                for g in 0..c4 / 4 {
                    for lane in 0..lanes {
                        let j = first + lane;
                        for b in 0..4 {
                            data.push(if j < columns {
                                value(j, t, g * 4 + b)
                            } else {
                                0
                            });
                        }
                    }
                }
            }
            first += width;
        }
        let column_sums = w
            .chunks(taps * c)
            .map(|row| row.iter().fold(0i32, |s, &v| s.wrapping_add(v)))
            .collect();
        Some(PackedWeights {
            n,
            taps,
            c,
            c4,
            columns,
            panels,
            data,
            column_sums,
        })
    }

    /// Output columns (`n`) of the weights.
    pub(super) fn outputs(&self) -> usize {
        self.n
    }

    /// The value added to column `j`'s raw sums for the zero points other than the row sums'
    /// term: `-x_zp sum w[j] + K x_zp w_zp[j]` (wrapping), `K` the real taps times channels.
    pub(super) fn zero_point_offsets(&self, x_zp: i32, w_zps: &[i32]) -> Vec<i32> {
        let k = (self.taps * self.c) as i32;
        let mut out: Vec<i32> = self
            .column_sums
            .iter()
            .zip(w_zps)
            .map(|(&s, &wz)| {
                x_zp.wrapping_neg()
                    .wrapping_mul(s)
                    .wrapping_add(k.wrapping_mul(x_zp).wrapping_mul(wz))
            })
            .collect();
        out.resize(self.columns, 0);
        out
    }
}

/// Where the rows' bytes are: row `i` reads tap `t` at `src[base + rows[i] + taps[t] ..][..c4]`.
#[derive(Clone, Copy)]
pub(super) struct RowSource<'a> {
    pub src: &'a [u8],
    pub base: usize,
    pub rows: &'a [usize],
    pub taps: &'a [usize],
}

/// How uint8 outputs are made from a column's sums (after the zero-point offsets), per output
/// column, as the scalar `Requant::apply` (fbgemm) and `OnednnRequant::apply` do.
pub(super) enum Requantizer {
    /// fbgemm: `y = (sum + bias_term) * multiplier`, converted to i32 with round-half-even
    /// (out of range: i32::MIN), saturated to i16, plus the zero point saturated to i16, then
    /// clamped to `floor..=255`.
    Fbgemm {
        bias_term: Vec<f32>,
        multiplier: Vec<f32>,
        zero_point: i32,
        floor: i32,
    },
    /// oneDNN: `y = (sum * x_scale) * w_scale + bias`, ReLU'd when asked, then
    /// `nearbyint(y * inv_out_scale + zero_point)` clamped to 0..=255 (NaN: the zero point), in
    /// float32 in that order (`jit_avx512_core_x8s8s32x_fwd_kernel::store_output`; the brgemm
    /// kernels agree). `x_scale` and `inv_out_scale` are the values oneDNN multiplies by, which
    /// reach it through reciprocals ([`onednn_conv_scales`]).
    ///
    /// The zero point is added in float before rounding (fbgemm adds it after): a product of
    /// 3.4999998 with zero point 58 sums to 61.5 in float and rounds to 62, where fbgemm gives 61
    /// (measured against PyTorch 2.15's x86 engine, resnet18's layer2).
    Onednn {
        x_scale: f32,
        w_scale: Vec<f32>,
        bias: Vec<f32>,
        inv_out_scale: f32,
        zero_point: f32,
        relu: bool,
    },
}

/// The input scale and the inverse output scale a PyTorch x86-engine convolution's oneDNN
/// kernel multiplies by, `(x_scale, inv_out_scale)` of [`Requantizer::Onednn`]. PyTorch hands
/// ideep reciprocals (`1.0 / input_scale` and `1.0 / output_scale` in double, stored as float);
/// ideep gives oneDNN their float reciprocals (`1.0f / scale`), and the kernel inverts the
/// destination scale once more (`1.f / dst_scales[0]`). Each float reciprocal can land an ulp
/// away from the plain float scale, which moves outputs near a half to the other neighbour
/// (resnext101_32x8d's layer2.0.conv2 rounded one output of 8192 to the other side).
pub(super) fn onednn_conv_scales(x_scale: f64, out_scale: f64) -> (f32, f32) {
    let src = 1.0f32 / ((1.0 / x_scale) as f32);
    let dst = 1.0f32 / ((1.0 / out_scale) as f32);
    (src, 1.0f32 / dst)
}

impl Requantizer {
    /// Column `j`'s uint8 value of `sum` (one lane of the vector epilogue; the scalar
    /// routes' requantization).
    pub(super) fn apply_one(&self, j: usize, sum: i32) -> u8 {
        match self {
            Requantizer::Fbgemm {
                bias_term,
                multiplier,
                zero_point,
                floor,
            } => {
                let y = (sum as f32 + bias_term[j]) * multiplier[j];
                let r = if (-2147483648.0..2147483648.0).contains(&y) {
                    super::round_ties_even(y) as i32
                } else {
                    i32::MIN // CVTPS2DQ's "integer indefinite"
                };
                let s16 = r.clamp(i16::MIN.into(), i16::MAX.into());
                let z = (s16 + zero_point).clamp(i16::MIN.into(), i16::MAX.into());
                z.clamp(*floor, 255) as u8
            }
            Requantizer::Onednn {
                x_scale,
                w_scale,
                bias,
                inv_out_scale,
                zero_point,
                relu,
            } => {
                let mut y = (sum as f32 * x_scale) * w_scale[j] + bias[j];
                if *relu {
                    y = y.max(0.0);
                }
                let q = super::round_ties_even(y * inv_out_scale + zero_point);
                if q.is_nan() {
                    *zero_point as u8
                } else {
                    q.clamp(0.0, 255.0) as u8
                }
            }
        }
    }

    fn columns(&self) -> usize {
        match self {
            Requantizer::Fbgemm {
                bias_term,
                multiplier,
                ..
            } => bias_term.len().min(multiplier.len()),
            Requantizer::Onednn { w_scale, bias, .. } => w_scale.len().min(bias.len()),
        }
    }
}

/// `out[i]` = column `column`'s uint8 value of `sums[i]` (sums of one output channel, as a
/// convolution's NCHW plane), vectorized with AVX-512 where the CPU has it.
pub(super) fn requantize_column(
    requant: &Requantizer,
    column: usize,
    sums: &[i32],
    out: &mut [u8],
) {
    if column >= requant.columns() {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if avx512() {
        // SAFETY: the CPU has AVX-512 F, BW and VL (`avx512`), and `column` is one of the
        // requantizer's columns (checked above).
        unsafe { vnni::requantize_column(requant, column, sums, out) };
        return;
    }
    for (o, &v) in out.iter_mut().zip(sums) {
        *o = requant.apply_one(column, v);
    }
}

/// Whether this CPU has AVX-512 F, BW and VL (the epilogue's instructions; detected once).
#[cfg(target_arch = "x86_64")]
fn avx512() -> bool {
    use std::sync::OnceLock;
    static AVX512: OnceLock<bool> = OnceLock::new();
    *AVX512.get_or_init(|| {
        is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vl")
    })
}

/// Where the sums go. Row `i` column `j` (of the packed weights, from `first_column` on in a
/// destination of `ldc` columns):
pub(super) enum Dest<'a> {
    /// `out[i * ldc + first_column + j]`, the sums plus the zero-point offsets.
    Sums {
        out: &'a mut [i32],
        ldc: usize,
        first_column: usize,
    },
    /// Requantized, `out[(i / plane) * ldc * plane + (first_column + j) * plane + i % plane]`:
    /// rows are `plane`-sized runs of a batch (an NCHW output with the pixels as rows; `plane`
    /// 1 is row-major). `requant` has the packed columns' parameters.
    Quantized {
        out: &'a mut [u8],
        ldc: usize,
        first_column: usize,
        plane: usize,
        requant: &'a Requantizer,
    },
}

/// Why [`run`] refused its operands (a caller's bug, never the input's).
#[derive(Debug)]
pub(super) enum Misuse {
    /// A row's taps reach past the source buffer.
    SourceTooShort,
    /// The destination cannot hold the rows with the columns at `first_column`.
    DestinationTooShort,
    /// The tap offsets, zero-point offsets or requantization parameters do not match the
    /// packed weights.
    Mismatch,
    /// This CPU lacks the kernel's instructions (see [`supported`]).
    NoVnni,
}

/// A raw destination pointer shared by the tasks of one [`run`].
#[derive(Clone, Copy)]
struct OutPtr<T>(*mut T);
// SAFETY: the tasks of one `run` write through it only at the positions of their own rows,
// which are disjoint (see `Dest`'s layouts), while `run` holds the destination's `&mut`.
unsafe impl<T: Send> Sync for OutPtr<T> {}
unsafe impl<T: Send> Send for OutPtr<T> {}

/// The destination as the kernel sees it: a base pointer and the layout.
#[derive(Clone, Copy)]
enum Target<'a> {
    Sums {
        out: OutPtr<i32>,
        ldc: usize,
        first_column: usize,
    },
    Quantized {
        out: OutPtr<u8>,
        ldc: usize,
        first_column: usize,
        plane: usize,
        requant: &'a Requantizer,
    },
}

/// The raw sums of `x`'s rows by the packed columns, plus `offsets` (the zero-point terms),
/// into `dest`. Rows are shared among the kernel pool's threads when the work is large
/// enough.
pub(super) fn run(
    w: &PackedWeights,
    x: &RowSource<'_>,
    offsets: &[i32],
    dest: Dest<'_>,
) -> Result<(), Misuse> {
    if x.taps.len() != w.taps || offsets.len() != w.columns {
        return Err(Misuse::Mismatch);
    }
    let rows = x.rows.len();
    let reach = x.rows.iter().max().copied().unwrap_or(0)
        + x.taps.iter().max().copied().unwrap_or(0)
        + x.base
        + w.c4;
    if rows > 0 && reach > x.src.len() {
        return Err(Misuse::SourceTooShort);
    }
    let target = match dest {
        Dest::Sums {
            out,
            ldc,
            first_column,
        } => {
            if first_column + w.columns > ldc || out.len() < rows * ldc {
                return Err(Misuse::DestinationTooShort);
            }
            Target::Sums {
                out: OutPtr(out.as_mut_ptr()),
                ldc,
                first_column,
            }
        }
        Dest::Quantized {
            out,
            ldc,
            first_column,
            plane,
            requant,
        } => {
            // every row's position lies inside `out`: rows fill whole planes
            if first_column + w.columns > ldc
                || plane == 0
                || !rows.is_multiple_of(plane)
                || out.len() < rows * ldc
            {
                return Err(Misuse::DestinationTooShort);
            }
            if requant.columns() != w.columns {
                return Err(Misuse::Mismatch);
            }
            Target::Quantized {
                out: OutPtr(out.as_mut_ptr()),
                ldc,
                first_column,
                plane,
                requant,
            }
        }
    };
    if !supported() {
        return Err(Misuse::NoVnni);
    }
    if rows == 0 {
        return Ok(());
    }
    let macs = rows * w.columns * w.taps * w.c4;
    let threads = rayon::current_num_threads().max(1);
    let per_task = if macs < PARALLEL_MACS || threads == 1 {
        rows
    } else {
        rows.div_ceil(threads * 3)
            .div_ceil(TILE_ROWS)
            .max(1)
            .saturating_mul(TILE_ROWS)
            .min(TASK_ROWS)
    };
    for_each_index(rows.div_ceil(per_task), &|k| {
        let first_row = k * per_task;
        let task_rows = &x.rows[first_row..rows.min(first_row + per_task)];
        if let Target::Quantized {
            out,
            ldc,
            first_column,
            plane,
            requant,
        } = target
        {
            if plane > 1 {
                planes_through_blocks(
                    w,
                    x,
                    task_rows,
                    first_row,
                    offsets,
                    out,
                    (ldc, first_column, plane),
                    requant,
                );
                return;
            }
        }
        for panel in &w.panels {
            for (t, tile_rows) in task_rows.chunks(TILE_ROWS).enumerate() {
                // SAFETY: the CPU has the kernel's features (`supported`); every row's taps
                // lie inside `x.src` (checked above: `reach`); the panel's bytes lie inside
                // `w.data` (made by `PackedWeights::new` for these taps and channels); the
                // destination holds every row's columns (checked above for each layout) and
                // this task alone writes the positions of rows `first_row ..` of its range.
                #[cfg(target_arch = "x86_64")]
                unsafe {
                    vnni::tile(
                        w,
                        panel,
                        x,
                        tile_rows,
                        first_row + t * TILE_ROWS,
                        offsets,
                        target,
                    );
                }
                #[cfg(not(target_arch = "x86_64"))]
                let _ = (panel, tile_rows, t, target);
            }
        }
    });
    Ok(())
}

/// The rows `task_rows` (from row `first_row` of the call) of an NCHW destination (`plane` > 1):
/// blocks of [`TASK_ROWS`] rows are written row-major into a scratch buffer by the kernel's
/// byte epilogue, then transposed into the planes (one run of rows per column), so the
/// output is stored 16 bytes at a time instead of byte by byte.
#[allow(clippy::too_many_arguments)]
fn planes_through_blocks(
    w: &PackedWeights,
    x: &RowSource<'_>,
    task_rows: &[usize],
    first_row: usize,
    offsets: &[i32],
    out: OutPtr<u8>,
    (ldc, first_column, plane): (usize, usize, usize),
    requant: &Requantizer,
) {
    let mut scratch = vec![0u8; TASK_ROWS * w.columns];
    for (b, block) in task_rows.chunks(TASK_ROWS).enumerate() {
        let block_first = first_row + b * TASK_ROWS;
        let rows_target = Target::Quantized {
            out: OutPtr(scratch.as_mut_ptr()),
            ldc: w.columns,
            first_column: 0,
            plane: 1,
            requant,
        };
        for panel in &w.panels {
            for (t, tile_rows) in block.chunks(TILE_ROWS).enumerate() {
                // SAFETY: as in `run` for the kernel's features and the rows' taps; the
                // scratch holds `TASK_ROWS` rows of every column and these tile rows are
                // rows `t * TILE_ROWS ..` of the block, below `TASK_ROWS`.
                #[cfg(target_arch = "x86_64")]
                unsafe {
                    vnni::tile(w, panel, x, tile_rows, t * TILE_ROWS, offsets, rows_target);
                }
                #[cfg(not(target_arch = "x86_64"))]
                let _ = (panel, tile_rows, t, rows_target);
            }
        }
        // the block's rows by planes: runs of rows of one image
        let mut i = 0;
        while i < block.len() {
            let row = block_first + i;
            let run = (plane - row % plane).min(block.len() - i);
            let start = (row / plane) * ldc * plane + first_column * plane + row % plane;
            // SAFETY: `run` checked that the destination holds every row's columns
            // (`rows * ldc` bytes, rows filling whole planes), so columns `first_column ..
            // first_column + w.columns` of these rows lie inside it, and this task alone
            // writes the positions of its rows; the scratch holds `TASK_ROWS` rows of
            // `w.columns` bytes, these being rows `i .. i + run` of the block.
            unsafe {
                super::byte_transpose::transpose_raw(
                    scratch.as_ptr().add(i * w.columns),
                    w.columns,
                    run,
                    w.columns,
                    out.0.add(start),
                    plane,
                );
            }
            i += run;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod vnni {
    use super::{PackedWeights, Panel, Requantizer, RowSource, Target};
    use std::arch::x86_64::*;

    /// One register tile: `rows.len()` (1 to 6) rows, the first being row `first_row` of the
    /// call, by the panel's columns.
    ///
    /// # Safety
    /// As at the call in [`super::run`]: AVX-512 F/BW/VNNI present, every row's taps inside
    /// `x.src`, the target's positions of these rows inside its buffer and written by no one
    /// else meanwhile.
    pub(super) unsafe fn tile(
        w: &PackedWeights,
        panel: &Panel,
        x: &RowSource<'_>,
        rows: &[usize],
        first_row: usize,
        offsets: &[i32],
        target: Target<'_>,
    ) {
        let vectors = panel.width.div_ceil(16);
        macro_rules! dispatch {
            ($($r:literal),*) => {
                match rows.len() {
                    $($r => match vectors {
                        1 => kernel::<$r, 1>(w, panel, x, rows, first_row, offsets, target),
                        2 => kernel::<$r, 2>(w, panel, x, rows, first_row, offsets, target),
                        3 => kernel::<$r, 3>(w, panel, x, rows, first_row, offsets, target),
                        _ => kernel::<$r, 4>(w, panel, x, rows, first_row, offsets, target),
                    },)*
                    _ => {}
                }
            };
        }
        dispatch!(1, 2, 3, 4, 5, 6);
    }

    /// `R` rows by `V` registers of 16 columns.
    ///
    /// # Safety
    /// As [`tile`], with `rows.len() == R` and `V` the panel's registers.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn kernel<const R: usize, const V: usize>(
        w: &PackedWeights,
        panel: &Panel,
        x: &RowSource<'_>,
        rows: &[usize],
        first_row: usize,
        offsets: &[i32],
        target: Target<'_>,
    ) {
        let mut acc = [[_mm512_setzero_si512(); V]; R];
        let src = x.src.as_ptr().add(x.base);
        let mut wp = w.data.as_ptr().add(panel.offset);
        let groups = w.c4 / 4;
        for &tap in x.taps {
            let mut p: [*const u8; R] = [std::ptr::null(); R];
            for r in 0..R {
                p[r] = src.add(rows[r] + tap);
            }
            // by value through a call: with the array updated in place here, LLVM stored every
            // accumulator to the stack after each multiply-add (24 stores per 24 vpdpbusd)
            (acc, wp) = tap_sums::<R, V>(acc, p, wp, groups);
        }
        for v in 0..V {
            let column = panel.first + v * 16;
            let lanes = panel.width.saturating_sub(v * 16).min(16);
            let mask: __mmask16 = if lanes == 16 {
                0xffff
            } else {
                (1u16 << lanes) - 1
            };
            let add = _mm512_maskz_loadu_epi32(mask, offsets.as_ptr().add(column));
            match target {
                Target::Sums {
                    out,
                    ldc,
                    first_column,
                } => {
                    for (r, row) in acc.iter().enumerate() {
                        let at = (first_row + r) * ldc + first_column + column;
                        _mm512_mask_storeu_epi32(
                            out.0.add(at),
                            mask,
                            _mm512_add_epi32(row[v], add),
                        );
                    }
                }
                Target::Quantized {
                    out,
                    ldc,
                    first_column,
                    plane,
                    requant,
                } => {
                    let convert = Convert::new(requant, column, mask);
                    for (r, row) in acc.iter().enumerate() {
                        let q = convert.apply(_mm512_add_epi32(row[v], add));
                        let i = first_row + r;
                        let base =
                            (i / plane) * ldc * plane + (first_column + column) * plane + i % plane;
                        let bytes = _mm512_cvtepi32_epi8(q);
                        if plane == 1 {
                            _mm_mask_storeu_epi8(out.0.add(base).cast(), mask, bytes);
                        } else {
                            let mut lane = [0u8; 16];
                            _mm_storeu_si128(lane.as_mut_ptr().cast(), bytes);
                            for (l, &b) in lane.iter().enumerate().take(lanes) {
                                *out.0.add(base + l * plane) = b;
                            }
                        }
                    }
                }
            }
        }
    }

    /// The multiply-adds of one tap: `groups` runs of 4 channels of each row's `p` by the
    /// panel's weights from `wp`; returns the sums and where the weights continue.
    ///
    /// # Safety
    /// As [`kernel`]: each `p[r]` has `4 * groups` readable bytes, `wp` `groups * V * 64`.
    #[inline(always)]
    unsafe fn tap_sums<const R: usize, const V: usize>(
        mut acc: [[__m512i; V]; R],
        mut p: [*const u8; R],
        mut wp: *const i8,
        groups: usize,
    ) -> ([[__m512i; V]; R], *const i8) {
        for _ in 0..groups {
            let mut wv = [_mm512_setzero_si512(); V];
            for (v, reg) in wv.iter_mut().enumerate() {
                *reg = _mm512_loadu_si512(wp.add(v * 64).cast());
            }
            for r in 0..R {
                let xb = _mm512_set1_epi32(p[r].cast::<i32>().read_unaligned());
                for v in 0..V {
                    acc[r][v] = _mm512_dpbusd_epi32(acc[r][v], xb, wv[v]);
                }
                p[r] = p[r].add(4);
            }
            wp = wp.add(V * 64);
        }
        (acc, wp)
    }

    /// [`super::requantize_column`] with AVX-512: 16 sums at a time, one column's
    /// parameters in every lane.
    ///
    /// # Safety
    /// AVX-512 F and BW present; `column` below the requantizer's columns.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub(super) unsafe fn requantize_column(
        requant: &Requantizer,
        column: usize,
        sums: &[i32],
        out: &mut [u8],
    ) {
        let convert = Convert::broadcast(requant, column);
        let len = sums.len().min(out.len());
        let mut i = 0;
        while i < len {
            let lanes = (len - i).min(16);
            let mask: __mmask16 = if lanes == 16 {
                0xffff
            } else {
                (1u16 << lanes) - 1
            };
            let v = _mm512_maskz_loadu_epi32(mask, sums.as_ptr().add(i));
            let q = convert.apply(v);
            _mm_mask_storeu_epi8(
                out.as_mut_ptr().add(i).cast(),
                mask,
                _mm512_cvtepi32_epi8(q),
            );
            i += 16;
        }
    }

    /// Which columns' parameters a register holds.
    #[derive(Clone, Copy)]
    enum Lanes {
        /// Columns `column ..`, the lanes of the mask (the rest 0).
        Columns(usize, __mmask16),
        /// One column's in every lane.
        Column(usize),
    }

    impl Lanes {
        /// The per-column values `v` for these lanes.
        ///
        /// # Safety
        /// AVX-512 F present; the columns lie inside `v`.
        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
        unsafe fn load(self, v: &[f32]) -> __m512 {
            match self {
                Lanes::Columns(column, mask) => _mm512_maskz_loadu_ps(mask, v.as_ptr().add(column)),
                Lanes::Column(column) => _mm512_set1_ps(v[column]),
            }
        }
    }

    /// One register of 16 columns' requantization parameters.
    enum Convert {
        Fbgemm {
            bias_term: __m512,
            multiplier: __m512,
            zero_point: __m512i,
            floor: __m512i,
        },
        Onednn {
            x_scale: __m512,
            w_scale: __m512,
            bias: __m512,
            inv_out_scale: __m512,
            zero_point: __m512,
            zero_point_int: __m512i,
            relu: bool,
        },
    }

    impl Convert {
        /// The parameters of columns `column ..` (the lanes of `mask`).
        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
        unsafe fn new(requant: &Requantizer, column: usize, mask: __mmask16) -> Convert {
            Convert::with(requant, Lanes::Columns(column, mask))
        }

        /// Column `column`'s parameters in every lane.
        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
        unsafe fn broadcast(requant: &Requantizer, column: usize) -> Convert {
            Convert::with(requant, Lanes::Column(column))
        }

        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
        unsafe fn with(requant: &Requantizer, lanes: Lanes) -> Convert {
            match requant {
                Requantizer::Fbgemm {
                    bias_term,
                    multiplier,
                    zero_point,
                    floor,
                } => Convert::Fbgemm {
                    bias_term: lanes.load(bias_term),
                    multiplier: lanes.load(multiplier),
                    zero_point: _mm512_set1_epi32(*zero_point),
                    floor: _mm512_set1_epi32(*floor),
                },
                Requantizer::Onednn {
                    x_scale,
                    w_scale,
                    bias,
                    inv_out_scale,
                    zero_point,
                    relu,
                } => Convert::Onednn {
                    x_scale: _mm512_set1_ps(*x_scale),
                    w_scale: lanes.load(w_scale),
                    bias: lanes.load(bias),
                    inv_out_scale: _mm512_set1_ps(*inv_out_scale),
                    zero_point: _mm512_set1_ps(*zero_point),
                    zero_point_int: _mm512_set1_epi32(*zero_point as i32),
                    relu: *relu,
                },
            }
        }

        /// The uint8 values (as i32 lanes in 0..=255) of 16 sums.
        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
        unsafe fn apply(&self, sums: __m512i) -> __m512i {
            match *self {
                Convert::Fbgemm {
                    bias_term,
                    multiplier,
                    zero_point,
                    floor,
                } => {
                    let y = _mm512_mul_ps(
                        _mm512_add_ps(_mm512_cvtepi32_ps(sums), bias_term),
                        multiplier,
                    );
                    // round half to even (the default MXCSR mode); out of range: i32::MIN
                    let r = _mm512_cvtps_epi32(y);
                    let (lo16, hi16) = (_mm512_set1_epi32(-32768), _mm512_set1_epi32(32767));
                    let s16 = _mm512_min_epi32(_mm512_max_epi32(r, lo16), hi16);
                    let z = _mm512_add_epi32(s16, zero_point);
                    let z16 = _mm512_min_epi32(_mm512_max_epi32(z, lo16), hi16);
                    _mm512_min_epi32(_mm512_max_epi32(z16, floor), _mm512_set1_epi32(255))
                }
                Convert::Onednn {
                    x_scale,
                    w_scale,
                    bias,
                    inv_out_scale,
                    zero_point,
                    zero_point_int,
                    relu,
                } => {
                    let f = _mm512_mul_ps(_mm512_cvtepi32_ps(sums), x_scale);
                    let mut y = _mm512_add_ps(_mm512_mul_ps(f, w_scale), bias);
                    if relu {
                        // NaN becomes 0, as f32::max(NaN, 0.0)
                        y = _mm512_max_ps(y, _mm512_setzero_ps());
                    }
                    let t = _mm512_add_ps(_mm512_mul_ps(y, inv_out_scale), zero_point);
                    let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(t, t);
                    let r = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                        t,
                    );
                    let clamped =
                        _mm512_min_ps(_mm512_max_ps(r, _mm512_setzero_ps()), _mm512_set1_ps(255.0));
                    let q = _mm512_cvtps_epi32(clamped);
                    _mm512_mask_blend_epi32(nan, q, zero_point_int)
                }
            }
        }
    }
}
