//! Packing GEMM operands into the panel layouts the microkernels read, and the packed forms of
//! constant operands (weights) kept across calls.
//!
//! Layouts (K split into blocks of `KC`): the A block for rows `[i0, i0 + mc)` and depth
//! `[k0, k0 + kc)` is `ceil(mc / MR)` panels of `kc * MR` floats (`panel[k * MR + i]`); the B block
//! for columns `[j0, j0 + nc)` is `ceil(nc / NR)` panels of `kc * NR` floats (`panel[k * NR + j]`).
//! Rows or columns past the matrix edge are zero.

use super::{Isa, KC};
use crate::tensor::{Storage, WeakStorage};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// A read-only strided matrix over a slice, bounds checked at construction.
#[derive(Clone, Copy, Debug)]
pub struct MatRef<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    rs: usize,
    cs: usize,
}

impl<'a> MatRef<'a> {
    /// `rows x cols` with row stride `rs` and column stride `cs` (elements); `None` when an
    /// addressed element would fall outside `data`.
    pub fn new(data: &'a [f32], rows: usize, cols: usize, rs: usize, cs: usize) -> Option<Self> {
        if rows > 0 && cols > 0 {
            let last = (rows - 1)
                .checked_mul(rs)?
                .checked_add((cols - 1).checked_mul(cs)?)?;
            if last >= data.len() {
                return None;
            }
        }
        Some(MatRef {
            data,
            rows,
            cols,
            rs,
            cs,
        })
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The first element and the row stride of a row-major matrix (column stride 1), which
    /// kernels may read in place: element `(i, j)` is at `ptr + i * rs + j` for `i < rows`,
    /// `j < cols` (checked by [`MatRef::new`]). `None` for other layouts.
    pub(super) fn row_major(&self) -> Option<(*const f32, usize)> {
        (self.cs == 1 && self.rows > 0 && self.cols > 0).then_some((self.data.as_ptr(), self.rs))
    }

    #[inline]
    fn at(&self, i: usize, j: usize) -> f32 {
        self.data[i * self.rs + j * self.cs]
    }
}

/// The B operand of a convolution read straight from a `[c, D, H, W]` image: row
/// `k = (c, kz, ky, kx)`, column `n = (oz, oy, ox)`, the element im2col would have put there.
#[derive(Clone, Copy, Debug)]
pub struct ImageOperand<'a> {
    img: &'a [f32],
    channels: usize,
    image: [usize; 3],
    kernel: [usize; 3],
    grid: [usize; 3],
    stride: [usize; 3],
    pad: [usize; 3],
    dilation: [usize; 3],
}

impl<'a> ImageOperand<'a> {
    /// `None` when `img` is not exactly `channels * prod(image)` long or a geometry value is 0.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        img: &'a [f32],
        channels: usize,
        image: [usize; 3],
        kernel: [usize; 3],
        grid: [usize; 3],
        stride: [usize; 3],
        pad: [usize; 3],
        dilation: [usize; 3],
    ) -> Option<Self> {
        let il = image.iter().try_fold(channels, |a, &d| a.checked_mul(d))?;
        if il != img.len()
            || kernel.contains(&0)
            || stride.contains(&0)
            || dilation.contains(&0)
            || grid
                .iter()
                .try_fold(1usize, |a, &d| a.checked_mul(d))
                .is_none()
        {
            return None;
        }
        Some(ImageOperand {
            img,
            channels,
            image,
            kernel,
            grid,
            stride,
            pad,
            dilation,
        })
    }

    pub fn rows(&self) -> usize {
        self.channels * self.kernel.iter().product::<usize>()
    }

    pub fn cols(&self) -> usize {
        self.grid.iter().product()
    }

    /// Whether row k is image channel k read in place (1x1 kernel, stride 1, no padding).
    /// The image itself when B is its rows as they lie (a 1x1 convolution with stride 1 and
    /// no padding): row `k` of B is `img[k * cols..][..cols]`.
    pub(super) fn pointwise_rows(&self) -> Option<&'a [f32]> {
        self.pointwise().then_some(self.img)
    }

    fn pointwise(&self) -> bool {
        self.kernel == [1; 3]
            && self.stride == [1; 3]
            && self.pad == [0; 3]
            && self.grid == self.image
    }

    /// Input coordinate along dim `d` of grid position `o` and tap `t`, if inside the image.
    #[inline]
    fn coord(&self, d: usize, o: usize, t: usize) -> Option<usize> {
        let p = (o * self.stride[d] + t * self.dilation[d]).checked_sub(self.pad[d])?;
        (p < self.image[d]).then_some(p)
    }

    /// Columns `[j0, j0 + row.len())` of row `k` into `row`.
    fn fill_row(&self, k: usize, j0: usize, row: &mut [f32]) {
        let kvol = self.kernel.iter().product::<usize>();
        let (c, tap) = (k / kvol, k % kvol);
        let [_, kh, kw] = self.kernel;
        let (ta, tb, te) = (tap / (kh * kw), (tap / kw) % kh, tap % kw);
        let il = self.image.iter().product::<usize>();
        let src = &self.img[c * il..(c + 1) * il];
        let [_, oh, ow] = self.grid;
        let (sx, iw) = (self.stride[2], self.image[2]);
        let mut j = j0;
        let end = j0 + row.len();
        let mut out = 0;
        while j < end {
            let (z, y, x) = (j / (oh * ow), (j / ow) % oh, j % ow);
            // this output row's remaining span inside [j, end)
            let span = (ow - x).min(end - j);
            let dst = &mut row[out..out + span];
            match (self.coord(0, z, ta), self.coord(1, y, tb)) {
                (Some(iz), Some(iy)) => {
                    let line = &src[(iz * self.image[1] + iy) * iw..][..iw];
                    let first = (x * sx + te * self.dilation[2]) as isize - self.pad[2] as isize;
                    gather_line(line, first, sx, dst);
                }
                _ => dst.fill(0.0),
            }
            j += span;
            out += span;
        }
    }
}

/// The transposed im2col matrix of a 2-d convolution (`l x k`: a row per output position,
/// output row-major over an `oh x ow` grid) read in place from its image, for the wide tile's
/// direct kernel: element `(i, k)` is `src[base(i) + offsets[k]]` with
/// `base(i) = (i / ow) * row_step + (i % ow) * col_step`. The image must be zero-padded so that
/// every tap of every position is an element (the caller pads a copy; see `conv.rs`).
#[derive(Clone, Copy, Debug)]
pub struct DirectImage<'a> {
    src: &'a [f32],
    offsets: &'a [usize],
    rows: usize,
    ow: usize,
    row_step: usize,
    /// The convolution's column stride, 1 or 2 (the kernel's row spacing).
    col_step: usize,
}

impl<'a> DirectImage<'a> {
    /// `rows` positions over output rows of `ow`, depth `offsets.len()`. `None` unless
    /// `col_step` is 1 or 2, a tile of `mr` positions starting at a multiple of `mr` never
    /// spans two output rows (`ow` a multiple of `mr`, or one output row), and every element
    /// a tile reads, including the positions of a partial last tile, lies inside `src`
    /// (`row_step` at least `ow * col_step`).
    pub fn new(
        src: &'a [f32],
        offsets: &'a [usize],
        rows: usize,
        ow: usize,
        row_step: usize,
        col_step: usize,
        mr: usize,
    ) -> Option<Self> {
        // row_step >= ow * col_step: bases grow with i
        if !(1..=2).contains(&col_step) || ow == 0 || mr == 0 || row_step < ow * col_step {
            return None;
        }
        if !(ow.is_multiple_of(mr) || rows <= ow) {
            return None;
        }
        if rows > 0 && !offsets.is_empty() {
            // bases grow with i, so the last tile's last row reads the farthest
            let last_tile = (rows - 1) / mr * mr;
            let base = (last_tile / ow)
                .checked_mul(row_step)?
                .checked_add((last_tile % ow).checked_mul(col_step)?)?;
            let far = base
                .checked_add((mr - 1) * col_step)?
                .checked_add(*offsets.iter().max()?)?;
            if far >= src.len() {
                return None;
            }
        }
        Some(DirectImage {
            src,
            offsets,
            rows,
            ow,
            row_step,
            col_step,
        })
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.offsets.len()
    }

    /// Element offset in `src` of position `i`'s first tap.
    #[inline]
    pub(super) fn base(&self, i: usize) -> usize {
        (i / self.ow) * self.row_step + (i % self.ow) * self.col_step
    }

    pub(super) fn src(&self) -> &'a [f32] {
        self.src
    }

    pub(super) fn offsets(&self) -> &'a [usize] {
        self.offsets
    }

    pub(super) fn col_step(&self) -> usize {
        self.col_step
    }
}

/// `dst[i] = line[first + i * step]`, zero where that index falls outside `line` (padding).
/// The valid range is found first, so the copy itself has no per-element bounds test.
fn gather_line(line: &[f32], first: isize, step: usize, dst: &mut [f32]) {
    let (len, step_i) = (line.len() as isize, step as isize);
    // first i with first + i * step >= 0, and first i with first + i * step >= len
    let lo = if first >= 0 {
        0
    } else {
        (-first + step_i - 1) / step_i
    };
    let hi = if first >= len {
        0
    } else {
        (len - first + step_i - 1) / step_i
    };
    let span = dst.len();
    let (lo, hi) = ((lo as usize).min(span), (hi as usize).min(span));
    if lo >= hi {
        dst.fill(0.0);
        return;
    }
    dst[..lo].fill(0.0);
    dst[hi..].fill(0.0);
    let start = (first + lo as isize * step_i) as usize;
    let out = &mut dst[lo..hi];
    if step == 1 {
        out.copy_from_slice(&line[start..start + out.len()]);
    } else if step == 2 {
        // stride 2 (the stem of most image networks): whole pairs without index checks, which
        // vectorize; the last element may lack its pair's second half
        let src = &line[start..];
        let pairs = out.len().min(src.len() / 2);
        let (head, tail) = out.split_at_mut(pairs);
        for (d, pair) in head.iter_mut().zip(src.chunks_exact(2)) {
            *d = pair[0];
        }
        for (i, d) in tail.iter_mut().enumerate() {
            *d = src.get(2 * (pairs + i)).copied().unwrap_or(0.0);
        }
    } else {
        for (d, chunk) in out.iter_mut().zip(line[start..].chunks(step)) {
            *d = chunk[0];
        }
    }
}

/// Pack rows `[i0, i0 + mc)`, depth `[k0, k0 + kc)` of `a` into `dst` (A block layout).
pub(super) fn pack_a(
    a: &MatRef,
    mr: usize,
    k0: usize,
    kc: usize,
    i0: usize,
    mc: usize,
    dst: &mut [f32],
) {
    let panels = mc.div_ceil(mr);
    for p in 0..panels {
        let panel = &mut dst[p * kc * mr..(p + 1) * kc * mr];
        let first = i0 + p * mr;
        if a.cs == 1 && first + mr <= a.rows.min(i0 + mc) {
            // a whole panel of row-major rows: written in order, a column of MR values at a
            // time (a row at a time scatters MR-strided single floats, ~6% of BERT's time)
            let row = |i: usize| &a.data[(first + i) * a.rs + k0..][..kc];
            let packed = match mr {
                12 => pack_a_panel::<12>(std::array::from_fn(row), panel),
                7 => pack_a_panel::<7>(std::array::from_fn(row), panel),
                6 => pack_a_panel::<6>(std::array::from_fn(row), panel),
                4 => pack_a_panel::<4>(std::array::from_fn(row), panel),
                _ => false,
            };
            if packed {
                continue;
            }
        }
        for i in 0..mr {
            let r = i0 + p * mr + i;
            if r < a.rows && r < i0 + mc && a.cs == 1 {
                // a row-major row is one slice: bounds-checked once, then a strided scatter
                let src = &a.data[r * a.rs + k0..][..kc];
                for (d, &v) in panel[i..].iter_mut().step_by(mr).zip(src) {
                    *d = v;
                }
            } else if r < a.rows && r < i0 + mc {
                for k in 0..kc {
                    panel[k * mr + i] = a.at(r, k0 + k);
                }
            } else {
                for k in 0..kc {
                    panel[k * mr + i] = 0.0;
                }
            }
        }
    }
}

/// `panel[k * MR + i] = rows[i][k]`: one A panel from its `MR` rows (each at least as long
/// as the panel is deep). Returns true; `pack_a` falls back to its row loop for heights
/// without a copy of this.
#[inline(always)]
fn pack_a_panel<const MR: usize>(rows: [&[f32]; MR], panel: &mut [f32]) -> bool {
    let kc = panel.len() / MR;
    let rows = rows.map(|r| &r[..kc]);
    for (k, column) in panel.chunks_exact_mut(MR).enumerate() {
        for (d, r) in column.iter_mut().zip(&rows) {
            *d = r[k];
        }
    }
    true
}

/// Where B's values come from while packing.
#[derive(Clone, Copy)]
pub(super) enum BSource<'a> {
    Mat(MatRef<'a>),
    Image(ImageOperand<'a>),
}

/// Pack depth `[k0, k0 + kc)`, columns `[j0, j0 + nc)` of `b` into `dst` (B block layout);
/// `row` is scratch of at least `nc` floats.
#[allow(clippy::too_many_arguments)]
pub(super) fn pack_b(
    b: BSource,
    nr: usize,
    k0: usize,
    kc: usize,
    j0: usize,
    nc: usize,
    dst: &mut [f32],
    row: &mut [f32],
) {
    let panels = nc.div_ceil(nr);
    // the panel widths in use get copies of a constant size, which compile to a few vector
    // moves instead of a memcpy call per panel (7 floats wide for the wide tile's A)
    let scatter = |k: usize, vals: &[f32], dst: &mut [f32]| match nr {
        7 => scatter_row::<7>(k, kc, vals, dst),
        16 => scatter_row::<16>(k, kc, vals, dst),
        32 => scatter_row::<32>(k, kc, vals, dst),
        64 => scatter_row::<64>(k, kc, vals, dst),
        _ => {
            for (q, chunk) in vals.chunks(nr).enumerate() {
                let at = (q * kc + k) * nr;
                dst[at..at + chunk.len()].copy_from_slice(chunk);
                dst[at + chunk.len()..at + nr].fill(0.0);
            }
        }
    };
    match b {
        BSource::Mat(m) if m.cs == 1 => {
            for k in 0..kc {
                let start = (k0 + k) * m.rs + j0;
                scatter(k, &m.data[start..start + nc], dst);
            }
        }
        // column-major (a linear weight `[out, in]` read as its transpose, attention's K^T):
        // a panel is `nr` columns of `kc` contiguous values each, transposed in 8 x 8 register
        // blocks rather than gathered one strided element at a time; `cs >= kc` keeps the
        // columns apart, as `transpose_into` needs
        BSource::Mat(m) if m.rs == 1 && m.cs >= kc => {
            for (q, panel) in dst.chunks_exact_mut(kc * nr).take(panels).enumerate() {
                let width = nr.min(nc - q * nr);
                if width < nr {
                    panel.fill(0.0);
                }
                // columns j0 + q * nr.. from row k0 on: inside `data`, as `MatRef::new`
                // checked for every element of the matrix
                let first = (j0 + q * nr) * m.cs + k0;
                super::transpose_into(&m.data[first..], m.cs, panel, nr, width, kc);
            }
        }
        BSource::Mat(m) => {
            for q in 0..panels {
                for k in 0..kc {
                    let at = (q * kc + k) * nr;
                    for j in 0..nr {
                        let col = j0 + q * nr + j;
                        dst[at + j] = if col < j0 + nc {
                            m.at(k0 + k, col)
                        } else {
                            0.0
                        };
                    }
                }
            }
        }
        BSource::Image(im) if im.pointwise() => {
            let il = im.cols();
            for k in 0..kc {
                let start = (k0 + k) * il + j0;
                scatter(k, &im.img[start..start + nc], dst);
            }
        }
        BSource::Image(im) => {
            let row = &mut row[..nc];
            for k in 0..kc {
                im.fill_row(k0 + k, j0, row);
                scatter(k, row, dst);
            }
        }
    }
}

/// Row `k` of a block (`vals`, one value per column) into its place in each `NR`-wide panel of
/// `dst` (panels of `kc` rows), the last panel padded with zeros.
fn scatter_row<const NR: usize>(k: usize, kc: usize, vals: &[f32], dst: &mut [f32]) {
    let mut chunks = vals.chunks_exact(NR);
    let mut at = k * NR;
    for chunk in &mut chunks {
        dst[at..at + NR].copy_from_slice(chunk);
        at += kc * NR;
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        dst[at..at + rest.len()].copy_from_slice(rest);
        dst[at + rest.len()..at + NR].fill(0.0);
    }
}

/// Rows rounded up to whole panels.
fn padded(n: usize, panel: usize) -> usize {
    n.div_ceil(panel) * panel
}

/// A constant A operand (`m x k`) packed once for one instruction set.
#[derive(Debug)]
pub struct PackedA {
    pub(super) isa: Isa,
    pub(super) m: usize,
    pub(super) k: usize,
    data: Vec<f32>,
}

impl PackedA {
    pub fn new(isa: Isa, a: &MatRef) -> PackedA {
        let (m, k, mr) = (a.rows, a.cols, isa.mr());
        let mp = padded(m, mr);
        let mut data = vec![0.0; mp * k];
        let mut k0 = 0;
        while k0 < k {
            let kc = KC.min(k - k0);
            pack_a(a, mr, k0, kc, 0, m, &mut data[k0 * mp..(k0 + kc) * mp]);
            k0 += kc;
        }
        PackedA { isa, m, k, data }
    }

    /// Multiply row `i` by `scales[i]` in place (the layout of `new`: per depth block of
    /// `KC`, panels of MR rows, each stored a column of MR values at a time); scaling the
    /// packed copy needs no scaled copy of the matrix beside it.
    fn scale_rows(&mut self, scales: &[f32]) {
        let (mp, mr) = (padded(self.m, self.isa.mr()), self.isa.mr());
        let mut k0 = 0;
        while k0 < self.k {
            let kc = KC.min(self.k - k0);
            let block = &mut self.data[k0 * mp..(k0 + kc) * mp];
            for (t, v) in block.iter_mut().enumerate() {
                let row = t / (kc * mr) * mr + t % mr;
                *v *= scales.get(row).copied().unwrap_or(0.0);
            }
            k0 += kc;
        }
    }

    /// The packed block for depth block starting at `k0` (of length `kc`) and rows from `i0`
    /// (a multiple of MR).
    pub(super) fn block(&self, k0: usize, kc: usize, i0: usize) -> &[f32] {
        let mp = padded(self.m, self.isa.mr());
        &self.data[k0 * mp + i0 * kc..(k0 + kc) * mp]
    }

    fn bytes(&self) -> usize {
        self.data.len() * 4
    }
}

/// A constant B operand (`k x n`) packed once for one instruction set.
#[derive(Debug)]
pub struct PackedB {
    pub(super) isa: Isa,
    pub(super) k: usize,
    pub(super) n: usize,
    data: Vec<f32>,
}

impl PackedB {
    pub fn new(isa: Isa, b: &MatRef) -> PackedB {
        let (k, n, nr) = (b.rows, b.cols, isa.nr());
        let np = padded(n, nr);
        let mut data = vec![0.0; np * k];
        let mut k0 = 0;
        while k0 < k {
            let kc = KC.min(k - k0);
            pack_b(
                BSource::Mat(*b),
                nr,
                k0,
                kc,
                0,
                n,
                &mut data[k0 * np..(k0 + kc) * np],
                &mut [],
            );
            k0 += kc;
        }
        PackedB { isa, k, n, data }
    }

    /// Multiply column `j` by `scales[j]` in place (per depth block of `KC`, panels of NR
    /// columns, each stored a row of NR values at a time).
    fn scale_cols(&mut self, scales: &[f32]) {
        let (np, nr) = (padded(self.n, self.isa.nr()), self.isa.nr());
        let mut k0 = 0;
        while k0 < self.k {
            let kc = KC.min(self.k - k0);
            let block = &mut self.data[k0 * np..(k0 + kc) * np];
            for (t, v) in block.iter_mut().enumerate() {
                let col = t / (kc * nr) * nr + t % nr;
                *v *= scales.get(col).copied().unwrap_or(0.0);
            }
            k0 += kc;
        }
    }

    /// The packed block for the depth block at `k0` (length `kc`) and columns from `j0` (a
    /// multiple of NR).
    pub(super) fn block(&self, k0: usize, kc: usize, j0: usize) -> &[f32] {
        let np = padded(self.n, self.isa.nr());
        &self.data[k0 * np + j0 * kc..(k0 + kc) * np]
    }

    fn bytes(&self) -> usize {
        self.data.len() * 4
    }
}

/// Which operand a cached packing is for (a weight matrix may be packed either way).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Side {
    A,
    B,
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
struct Key {
    storage: usize,
    /// Element offset of the matrix inside the storage.
    offset: usize,
    geometry: [usize; 4],
    side: Side,
    isa: Isa,
    /// Packed with each output channel scaled (a batch norm folded in, see
    /// [`cached_packed_a_row_scaled`]); the scales are in the entry.
    scaled: bool,
}

enum Packed {
    A(Arc<PackedA>),
    B(Arc<PackedB>),
}

impl Packed {
    fn bytes(&self) -> usize {
        match self {
            Packed::A(p) => p.bytes(),
            Packed::B(p) => p.bytes(),
        }
    }
}

impl Key {
    fn new(isa: Isa, storage: &Storage, offset: usize, m: &MatRef, side: Side) -> Key {
        Key {
            storage: storage.id(),
            offset,
            geometry: [m.rows, m.cols, m.rs, m.cs],
            side,
            isa,
            scaled: false,
        }
    }

    /// The key of the same matrix packed the other way (scaled or not).
    fn other_scaling(&self) -> Key {
        Key {
            scaled: !self.scaled,
            ..self.clone()
        }
    }
}

struct Entry {
    owner: WeakStorage,
    version: u64,
    /// The per-channel scales the matrix was multiplied by when packed (empty: none).
    scales: Box<[f32]>,
    packed: Packed,
}

/// Packed weights kept across calls, keyed on the storage they were read from; an entry is
/// used only while that very storage is alive and unwritten since (its version unchanged).
#[derive(Default)]
struct PackCache {
    entries: HashMap<Key, Entry>,
    bytes: usize,
}

/// Upper bound on the memory kept in packed copies; beyond it weights are packed per call.
const CACHE_BYTES: usize = 512 << 20;

fn cache() -> &'static Mutex<PackCache> {
    static CACHE: OnceLock<Mutex<PackCache>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

impl PackCache {
    fn get(&self, key: &Key, storage: &Storage) -> Option<&Packed> {
        self.get_scaled(key, storage, &[])
    }

    /// The entry under `key` if packed from `storage` unwritten since, scaled by `scales`
    /// (compared bit for bit: a batch norm changed in any way gives other scales).
    fn get_scaled(&self, key: &Key, storage: &Storage, scales: &[f32]) -> Option<&Packed> {
        let e = self.entries.get(key)?;
        let same_scales = e.scales.len() == scales.len()
            && e.scales
                .iter()
                .zip(scales)
                .all(|(a, b)| a.to_bits() == b.to_bits());
        (e.owner.is(storage) && e.version == storage.version() && same_scales).then_some(&e.packed)
    }

    fn insert(&mut self, key: Key, storage: &Storage, version: u64, packed: Packed) {
        self.insert_scaled(key, storage, version, Box::new([]), packed)
    }

    fn insert_scaled(
        &mut self,
        key: Key,
        storage: &Storage,
        version: u64,
        scales: Box<[f32]>,
        packed: Packed,
    ) {
        // forget packings of freed storages first
        let mut freed = 0;
        self.entries.retain(|_, e| {
            let dead = e.owner.is_dead();
            if dead {
                freed += e.packed.bytes();
            }
            !dead
        });
        self.bytes -= freed;
        // one packed copy per weight: a folded packing replaces the plain one and back
        for k in [key.other_scaling(), key.clone()] {
            if let Some(old) = self.entries.remove(&k) {
                self.bytes -= old.packed.bytes();
            }
        }
        let bytes = packed.bytes();
        if self.bytes + bytes <= CACHE_BYTES {
            self.bytes += bytes;
            self.entries.insert(
                key,
                Entry {
                    owner: storage.downgrade(),
                    version,
                    scales,
                    packed,
                },
            );
        }
    }
}

/// `a` (which lies at element `offset` of `storage`) packed as an A operand, from the cache
/// when this storage was packed before and not written since.
pub fn cached_packed_a(isa: Isa, storage: &Storage, offset: usize, a: &MatRef) -> Arc<PackedA> {
    let key = Key::new(isa, storage, offset, a, Side::A);
    let extract = |p: &Packed| match p {
        Packed::A(p) => Some(p.clone()),
        Packed::B(_) => None,
    };
    cached(
        key,
        storage,
        extract,
        || Arc::new(PackedA::new(isa, a)),
        Packed::A,
    )
}

/// Whether `a` (at element `offset` of `storage`) is in the cache as an A operand, packed
/// after the storage's last write: what [`cached_packed_a`] would return without packing.
pub fn is_packed_a_cached(isa: Isa, storage: &Storage, offset: usize, a: &MatRef) -> bool {
    let key = Key::new(isa, storage, offset, a, Side::A);
    matches!(cache().lock().get(&key, storage), Some(Packed::A(_)))
}

/// Whether `b` (at element `offset` of `storage`) is in the cache as a B operand, current.
pub fn is_packed_b_cached(isa: Isa, storage: &Storage, offset: usize, b: &MatRef) -> bool {
    let key = Key::new(isa, storage, offset, b, Side::B);
    matches!(cache().lock().get(&key, storage), Some(Packed::B(_)))
}

/// Whether `m` (at element `offset` of `storage`, an A operand when `a_side`, else B) is in
/// the cache packed scaled per channel (a batch norm folded in), packed after the storage's
/// last write: what [`cached_packed_a_row_scaled`] / [`cached_packed_b_col_scaled`] return
/// without packing while the scales stay the same.
pub fn is_scaled_packing_cached(
    isa: Isa,
    storage: &Storage,
    offset: usize,
    m: &MatRef,
    a_side: bool,
) -> bool {
    let side = if a_side { Side::A } else { Side::B };
    let key = Key {
        scaled: true,
        ..Key::new(isa, storage, offset, m, side)
    };
    let guard = cache().lock();
    let scales = guard.entries.get(&key).map(|e| e.scales.clone());
    scales.is_some_and(|sc| guard.get_scaled(&key, storage, &sc).is_some())
}

/// `b` (at element `offset` of `storage`) packed as a B operand, cached as [`cached_packed_a`].
pub fn cached_packed_b(isa: Isa, storage: &Storage, offset: usize, b: &MatRef) -> Arc<PackedB> {
    let key = Key::new(isa, storage, offset, b, Side::B);
    let extract = |p: &Packed| match p {
        Packed::B(p) => Some(p.clone()),
        Packed::A(_) => None,
    };
    cached(
        key,
        storage,
        extract,
        || Arc::new(PackedB::new(isa, b)),
        Packed::B,
    )
}

/// `a` (at element `offset` of `storage`) with row `i` multiplied by `scales[i]`, packed as an
/// A operand: a convolution's weight with a batch norm folded in. Cached like
/// [`cached_packed_a`] and in place of it (the storage keeps one packed copy), valid while the
/// storage is unwritten and the scales are the same. `None` when `scales` is not one per row.
pub fn cached_packed_a_row_scaled(
    isa: Isa,
    storage: &Storage,
    offset: usize,
    a: &MatRef,
    scales: &[f32],
) -> Option<Arc<PackedA>> {
    (scales.len() == a.rows).then(|| {
        let key = Key::new(isa, storage, offset, a, Side::A);
        let extract = |p: &Packed| match p {
            Packed::A(p) => Some(p.clone()),
            Packed::B(_) => None,
        };
        let pack = || {
            let mut packed = PackedA::new(isa, a);
            packed.scale_rows(scales);
            Arc::new(packed)
        };
        cached_scaled(key, storage, scales, extract, pack, Packed::A)
    })
}

/// `b` (at element `offset` of `storage`) with column `j` multiplied by `scales[j]`, packed as
/// a B operand; cached as [`cached_packed_a_row_scaled`].
pub fn cached_packed_b_col_scaled(
    isa: Isa,
    storage: &Storage,
    offset: usize,
    b: &MatRef,
    scales: &[f32],
) -> Option<Arc<PackedB>> {
    (scales.len() == b.cols).then(|| {
        let key = Key::new(isa, storage, offset, b, Side::B);
        let extract = |p: &Packed| match p {
            Packed::B(p) => Some(p.clone()),
            Packed::A(_) => None,
        };
        let pack = || {
            let mut packed = PackedB::new(isa, b);
            packed.scale_cols(scales);
            Arc::new(packed)
        };
        cached_scaled(key, storage, scales, extract, pack, Packed::B)
    })
}

/// [`cached`] for a packing scaled by `scales` (keyed apart from the plain one, which it
/// replaces).
fn cached_scaled<T>(
    key: Key,
    storage: &Storage,
    scales: &[f32],
    extract: impl Fn(&Packed) -> Option<Arc<T>>,
    pack: impl FnOnce() -> Arc<T>,
    wrap: fn(Arc<T>) -> Packed,
) -> Arc<T> {
    let key = Key {
        scaled: true,
        ..key
    };
    if let Some(p) = cache()
        .lock()
        .get_scaled(&key, storage, scales)
        .and_then(&extract)
    {
        return p;
    }
    let version = storage.version();
    let p = pack();
    cache()
        .lock()
        .insert_scaled(key, storage, version, scales.into(), wrap(p.clone()));
    // packing read the archive's pages of the weight back in; the kernel reads only the
    // packed copy (as after `prepare`, which released them)
    storage.release_mapped_pages();
    p
}

/// The cached packing under `key`, or a new one from `pack`, remembered.
fn cached<T>(
    key: Key,
    storage: &Storage,
    extract: impl Fn(&Packed) -> Option<Arc<T>>,
    pack: impl FnOnce() -> Arc<T>,
    wrap: fn(Arc<T>) -> Packed,
) -> Arc<T> {
    if let Some(p) = cache().lock().get(&key, storage).and_then(&extract) {
        return p;
    }
    // read the version before packing: a write during packing then invalidates the entry
    let version = storage.version();
    let p = pack();
    cache()
        .lock()
        .insert(key, storage, version, wrap(p.clone()));
    p
}
