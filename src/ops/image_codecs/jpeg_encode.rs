//! `image::encode_jpeg`: the bytes libjpeg-turbo writes for torchvision (`jpeg_set_defaults`,
//! `jpeg_set_quality(q, TRUE)`): JFIF 1.01 header, the Annex K tables scaled by the quality,
//! YCbCr 4:2:0 for RGB input (jccolor.c's fixed-point tables, jcsample.c's alternating-bias 2x2
//! average, edges replicated as jcprepct.c does, dummy blocks as jccoefct.c makes them), the
//! islow forward DCT of jfdctint.c, jcdctmgr.c's reciprocal quantization and the standard
//! Huffman tables.

use super::check_decoded_size;
use crate::ops::kernels::{check_rank, invalid_argument, wrong_dtype};
use crate::tensor::{DType, RankRequirement, Tensor};

use super::jpeg_decode::NATURAL_ORDER;

const STD_LUMINANCE: [u32; 64] = [
    16, 11, 10, 16, 24, 40, 51, 61, 12, 12, 14, 19, 26, 58, 60, 55, 14, 13, 16, 24, 40, 57, 69, 56,
    14, 17, 22, 29, 51, 87, 80, 62, 18, 22, 37, 56, 68, 109, 103, 77, 24, 35, 55, 64, 81, 104, 113,
    92, 49, 64, 78, 87, 103, 121, 120, 101, 72, 92, 95, 98, 112, 100, 103, 99,
];
const STD_CHROMINANCE: [u32; 64] = [
    17, 18, 24, 47, 99, 99, 99, 99, 18, 21, 26, 66, 99, 99, 99, 99, 24, 26, 56, 99, 99, 99, 99, 99,
    47, 66, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99,
    99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99,
];

/// The standard Huffman tables (jstdhuff.c): code-length counts and values.
const DC_LUMA_BITS: [u8; 16] = [0, 1, 5, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0];
const DC_CHROMA_BITS: [u8; 16] = [0, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0];
const DC_VALUES: [u8; 12] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11];
const AC_LUMA_BITS: [u8; 16] = [0, 2, 1, 3, 3, 2, 4, 3, 5, 5, 4, 4, 0, 0, 1, 0x7d];
const AC_LUMA_VALUES: [u8; 162] = [
    0x01, 0x02, 0x03, 0x00, 0x04, 0x11, 0x05, 0x12, 0x21, 0x31, 0x41, 0x06, 0x13, 0x51, 0x61, 0x07,
    0x22, 0x71, 0x14, 0x32, 0x81, 0x91, 0xa1, 0x08, 0x23, 0x42, 0xb1, 0xc1, 0x15, 0x52, 0xd1, 0xf0,
    0x24, 0x33, 0x62, 0x72, 0x82, 0x09, 0x0a, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x25, 0x26, 0x27, 0x28,
    0x29, 0x2a, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49,
    0x4a, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5a, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69,
    0x6a, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89,
    0x8a, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9a, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7,
    0xa8, 0xa9, 0xaa, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xb9, 0xba, 0xc2, 0xc3, 0xc4, 0xc5,
    0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 0xd9, 0xda, 0xe1, 0xe2,
    0xe3, 0xe4, 0xe5, 0xe6, 0xe7, 0xe8, 0xe9, 0xea, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8,
    0xf9, 0xfa,
];
const AC_CHROMA_BITS: [u8; 16] = [0, 2, 1, 2, 4, 4, 3, 4, 7, 5, 4, 4, 0, 1, 2, 0x77];
const AC_CHROMA_VALUES: [u8; 162] = [
    0x00, 0x01, 0x02, 0x03, 0x11, 0x04, 0x05, 0x21, 0x31, 0x06, 0x12, 0x41, 0x51, 0x07, 0x61, 0x71,
    0x13, 0x22, 0x32, 0x81, 0x08, 0x14, 0x42, 0x91, 0xa1, 0xb1, 0xc1, 0x09, 0x23, 0x33, 0x52, 0xf0,
    0x15, 0x62, 0x72, 0xd1, 0x0a, 0x16, 0x24, 0x34, 0xe1, 0x25, 0xf1, 0x17, 0x18, 0x19, 0x1a, 0x26,
    0x27, 0x28, 0x29, 0x2a, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48,
    0x49, 0x4a, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5a, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68,
    0x69, 0x6a, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87,
    0x88, 0x89, 0x8a, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9a, 0xa2, 0xa3, 0xa4, 0xa5,
    0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xb9, 0xba, 0xc2, 0xc3,
    0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 0xd9, 0xda,
    0xe2, 0xe3, 0xe4, 0xe5, 0xe6, 0xe7, 0xe8, 0xe9, 0xea, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8,
    0xf9, 0xfa,
];

/// Code and length of every symbol of a Huffman table (jchuff.c `jpeg_make_c_derived_tbl`).
struct Codes {
    code: [u32; 256],
    size: [u8; 256],
}

impl Codes {
    fn new(bits: &[u8; 16], values: &[u8]) -> Codes {
        let (mut code, mut size) = ([0u32; 256], [0u8; 256]);
        let (mut c, mut k) = (0u32, 0usize);
        for (l, &n) in bits.iter().enumerate() {
            for _ in 0..n {
                if let Some(&v) = values.get(k) {
                    code[usize::from(v)] = c;
                    size[usize::from(v)] = l as u8 + 1;
                }
                c += 1;
                k += 1;
            }
            c <<= 1;
        }
        Codes { code, size }
    }
}

/// The entropy-coded segment: bits packed MSB first, 0xFF stuffed with 0x00.
struct BitWriter {
    out: Vec<u8>,
    acc: u32,
    n: u32,
}

impl BitWriter {
    fn put(&mut self, value: u32, size: u32) {
        for i in (0..size).rev() {
            self.acc = (self.acc << 1) | ((value >> i) & 1);
            self.n += 1;
            if self.n == 8 {
                let b = self.acc as u8;
                self.out.push(b);
                if b == 0xff {
                    self.out.push(0);
                }
                self.acc = 0;
                self.n = 0;
            }
        }
    }

    fn symbol(&mut self, codes: &Codes, s: usize) {
        self.put(codes.code[s], u32::from(codes.size[s]));
    }

    /// Pad the last byte with 1 bits (jchuff.c `flush_bits`).
    fn flush(&mut self) {
        if self.n > 0 {
            let pad = 8 - self.n;
            self.put((1 << pad) - 1, pad);
        }
    }
}

/// jcparam.c `jpeg_quality_scaling` + `jpeg_add_quant_table` (force_baseline).
fn scaled_table(base: &[u32; 64], quality: i64) -> [u16; 64] {
    let q = quality.clamp(1, 100);
    let scale = if q < 50 { 5000 / q } else { 200 - q * 2 };
    base.map(|b| ((i64::from(b) * scale + 50) / 100).clamp(1, 255) as u16)
}

/// jfdctint.c `jpeg_fdct_islow` on level-shifted samples.
fn fdct_islow(data: &mut [i32; 64]) {
    const CONST_BITS: u32 = 13;
    const PASS1_BITS: u32 = 2;
    let descale = |x: i64, n: u32| ((x + (1 << (n - 1))) >> n) as i32;
    let pass = |d: [i64; 8], first: bool| -> [i32; 8] {
        let (tmp0, tmp7) = (d[0] + d[7], d[0] - d[7]);
        let (tmp1, tmp6) = (d[1] + d[6], d[1] - d[6]);
        let (tmp2, tmp5) = (d[2] + d[5], d[2] - d[5]);
        let (tmp3, tmp4) = (d[3] + d[4], d[3] - d[4]);
        let (tmp10, tmp13, tmp11, tmp12) = (tmp0 + tmp3, tmp0 - tmp3, tmp1 + tmp2, tmp1 - tmp2);
        let shift = if first {
            CONST_BITS - PASS1_BITS
        } else {
            CONST_BITS + PASS1_BITS
        };
        let mut o = [0i32; 8];
        if first {
            o[0] = ((tmp10 + tmp11) << PASS1_BITS) as i32;
            o[4] = ((tmp10 - tmp11) << PASS1_BITS) as i32;
        } else {
            o[0] = descale(tmp10 + tmp11, PASS1_BITS);
            o[4] = descale(tmp10 - tmp11, PASS1_BITS);
        }
        let z1 = (tmp12 + tmp13) * 4433;
        o[2] = descale(z1 + tmp13 * 6270, shift);
        o[6] = descale(z1 - tmp12 * 15137, shift);
        let (z1, z2, z3, z4) = (tmp4 + tmp7, tmp5 + tmp6, tmp4 + tmp6, tmp5 + tmp7);
        let z5 = (z3 + z4) * 9633;
        let (t4, t5, t6, t7) = (tmp4 * 2446, tmp5 * 16819, tmp6 * 25172, tmp7 * 12299);
        let (z1, z2) = (z1 * -7373, z2 * -20995);
        let (z3, z4) = (z3 * -16069 + z5, z4 * -3196 + z5);
        o[7] = descale(t4 + z1 + z3, shift);
        o[5] = descale(t5 + z2 + z4, shift);
        o[3] = descale(t6 + z2 + z3, shift);
        o[1] = descale(t7 + z1 + z4, shift);
        o
    };
    for r in 0..8 {
        let row: [i64; 8] = std::array::from_fn(|c| i64::from(data[r * 8 + c]));
        let o = pass(row, true);
        data[r * 8..r * 8 + 8].copy_from_slice(&o);
    }
    for c in 0..8 {
        let col: [i64; 8] = std::array::from_fn(|r| i64::from(data[r * 8 + c]));
        let o = pass(col, false);
        for r in 0..8 {
            data[r * 8 + c] = o[r];
        }
    }
}

/// jcdctmgr.c `compute_reciprocal` for the 16-bit DCT elements of libjpeg-turbo's SIMD build:
/// (reciprocal, correction, shift).
fn reciprocal(divisor: u32) -> (u32, u32, u32) {
    if divisor == 1 {
        return (1, 0, 0);
    }
    let b = 31 - divisor.leading_zeros();
    let mut r = 16 + b;
    let mut fq = (1u64 << r) / u64::from(divisor);
    let fr = (1u64 << r) % u64::from(divisor);
    let mut c = divisor / 2;
    if fr == 0 {
        fq >>= 1;
        r -= 1;
    } else if fr <= u64::from(divisor / 2) {
        c += 1;
    } else {
        fq += 1;
    }
    (fq as u32, c, r)
}

fn quantize(coefs: &[i32; 64], divisors: &[(u32, u32, u32); 64]) -> [i32; 64] {
    std::array::from_fn(|i| {
        let (recip, corr, shift) = divisors[i];
        let t = coefs[i];
        let q = ((u64::from(t.unsigned_abs() + corr) * u64::from(recip)) >> shift) as i32;
        if t < 0 {
            -q
        } else {
            q
        }
    })
}

/// jchuff.c `encode_one_block`: the DC difference, then run-length coded AC coefficients.
fn encode_block(
    bits: &mut BitWriter,
    block: &[i32; 64],
    last_dc: &mut i32,
    dc: &Codes,
    ac: &Codes,
) {
    let magnitude = |v: i32| 32 - v.unsigned_abs().leading_zeros();
    let diff = block[0] - *last_dc;
    *last_dc = block[0];
    let nbits = magnitude(diff);
    bits.symbol(dc, nbits as usize);
    if nbits > 0 {
        let v = if diff < 0 { diff - 1 } else { diff };
        bits.put(v as u32 & ((1 << nbits) - 1), nbits);
    }
    let mut run = 0;
    for &pos in NATURAL_ORDER.iter().take(64).skip(1) {
        let v = block[pos];
        if v == 0 {
            run += 1;
            continue;
        }
        while run > 15 {
            bits.symbol(ac, 0xf0);
            run -= 16;
        }
        let nbits = magnitude(v);
        bits.symbol(ac, (run << 4) + nbits as usize);
        let w = if v < 0 { v - 1 } else { v };
        bits.put(w as u32 & ((1 << nbits) - 1), nbits);
        run = 0;
    }
    if run > 0 {
        bits.symbol(ac, 0);
    }
}

/// One component's samples, padded to whole blocks.
struct Plane {
    data: Vec<u8>,
    /// Blocks per row and column holding image data (`width_in_blocks`, `height_in_blocks`).
    bw: usize,
    bh: usize,
}

/// An 8-bit `[C, H, W]` image (C = 1 or 3) as torchvision's `encode_jpeg` writes it.
const OP: &str = "encode_jpeg";

pub(super) fn encode(image: &Tensor, quality: i64) -> crate::Result<Tensor> {
    if image.dtype() != DType::UInt8 {
        return Err(wrong_dtype(OP, "input", "uint8", image.dtype()));
    }
    check_rank(OP, "input", RankRequirement::Exactly(3), image.shape())?;
    let (channels, height, width) = (image.shape()[0], image.shape()[1], image.shape()[2]);
    if channels != 1 && channels != 3 {
        return Err(invalid_argument(
            OP,
            "the number of channels",
            "must be 1 or 3",
            channels,
        ));
    }
    if width == 0 || height == 0 || width > 65500 || height > 65500 {
        return Err(invalid_argument(
            OP,
            "the image size",
            "must be non-empty and at most 65500x65500",
            format!("{width}x{height}"),
        ));
    }
    check_decoded_size("encode_jpeg", &[height + 16, width + 16, 6], 1)?;
    let px = image.to_vec::<u8>()?; // [C, H, W]
    let at = |c: usize, x: usize, y: usize| {
        px[(c * height + y.min(height - 1)) * width + x.min(width - 1)]
    };
    let color = channels == 3;
    // full-resolution planes (Y, or Y Cb Cr), rows and columns past the image replicating the
    // last ones
    let (mcu_w, mcu_h) = if color { (16, 16) } else { (8, 8) };
    let (mcux, mcuy) = (width.div_ceil(mcu_w), height.div_ceil(mcu_h));
    let (fw, fh) = (mcux * mcu_w, mcuy * mcu_h);
    let mut full: Vec<Vec<u8>> = vec![vec![0u8; fw * fh]; channels];
    const FIX: [i64; 8] = [19595, 38470, 7471, 11059, 21709, 32768, 27439, 5329];
    const HALF: i64 = 1 << 15;
    for y in 0..fh {
        for x in 0..fw {
            let i = y * fw + x;
            if !color {
                full[0][i] = at(0, x, y);
                continue;
            }
            let (r, g, b) = (
                i64::from(at(0, x, y)),
                i64::from(at(1, x, y)),
                i64::from(at(2, x, y)),
            );
            full[0][i] = ((FIX[0] * r + FIX[1] * g + FIX[2] * b + HALF) >> 16) as u8;
            let offset = (128 << 16) + HALF - 1;
            full[1][i] = ((-FIX[3] * r - FIX[4] * g + FIX[5] * b + offset) >> 16) as u8;
            full[2][i] = ((FIX[5] * r - FIX[6] * g - FIX[7] * b + offset) >> 16) as u8;
        }
    }
    // jcprepct.c pads rows and columns by replication before downsampling, so the padded
    // region of the full planes above is what libjpeg averages; the luma's own padding beyond
    // its blocks is never coded
    let planes: Vec<Plane> = full
        .iter()
        .enumerate()
        .map(|(c, plane)| {
            if c == 0 {
                let mut data = vec![0u8; fw * fh];
                for y in 0..fh {
                    for x in 0..fw {
                        // luma padding replicates the last real column / row
                        data[y * fw + x] = plane[y.min(height - 1) * fw + x.min(width - 1)];
                    }
                }
                Plane {
                    data,
                    bw: width.div_ceil(8),
                    bh: height.div_ceil(8),
                }
            } else {
                // h2v2_downsample: 2x2 sums with a bias alternating 1, 2 along each row
                let (cw, ch) = (fw / 2, fh / 2);
                let real_rows = height.div_ceil(2);
                let mut data = vec![0u8; cw * ch];
                for y in 0..ch {
                    let sy = y.min(real_rows - 1);
                    for x in 0..cw {
                        let s = |dx: usize, dy: usize| {
                            u32::from(plane[(2 * sy + dy) * fw + 2 * x + dx])
                        };
                        let bias = if x % 2 == 0 { 1 } else { 2 };
                        data[y * cw + x] =
                            ((s(0, 0) + s(1, 0) + s(0, 1) + s(1, 1) + bias) >> 2) as u8;
                    }
                }
                Plane {
                    data,
                    bw: width.div_ceil(16),
                    bh: height.div_ceil(16),
                }
            }
        })
        .collect();
    let lq = scaled_table(&STD_LUMINANCE, quality);
    let cq = scaled_table(&STD_CHROMINANCE, quality);
    let divisors = |q: &[u16; 64]| -> [(u32, u32, u32); 64] {
        std::array::from_fn(|i| reciprocal(u32::from(q[i]) << 3))
    };
    let (ld, cd) = (divisors(&lq), divisors(&cq));

    let mut out: Vec<u8> = vec![0xff, 0xd8];
    out.extend_from_slice(&[
        0xff, 0xe0, 0, 16, b'J', b'F', b'I', b'F', 0, 1, 1, 0, 0, 1, 0, 1, 0, 0,
    ]);
    let tables: &[&[u16; 64]] = if color { &[&lq, &cq] } else { &[&lq] };
    for (t, q) in tables.iter().enumerate() {
        out.extend_from_slice(&[0xff, 0xdb, 0, 67, t as u8]);
        out.extend((0..64).map(|k| q[NATURAL_ORDER[k]] as u8));
    }
    let n = channels as u8;
    out.extend_from_slice(&[0xff, 0xc0, 0, 8 + 3 * n, 8]);
    out.extend_from_slice(&(height as u16).to_be_bytes());
    out.extend_from_slice(&(width as u16).to_be_bytes());
    out.push(n);
    for c in 0..n {
        let (sampling, tq) = if c == 0 && color {
            (0x22, 0)
        } else if c == 0 {
            (0x11, 0)
        } else {
            (0x11, 1)
        };
        out.extend_from_slice(&[c + 1, sampling, tq]);
    }
    let dht = |out: &mut Vec<u8>, class_index: u8, bits: &[u8; 16], values: &[u8]| {
        let len = (2 + 1 + 16 + values.len()) as u16;
        out.extend_from_slice(&[0xff, 0xc4]);
        out.extend_from_slice(&len.to_be_bytes());
        out.push(class_index);
        out.extend_from_slice(bits);
        out.extend_from_slice(values);
    };
    dht(&mut out, 0x00, &DC_LUMA_BITS, &DC_VALUES);
    dht(&mut out, 0x10, &AC_LUMA_BITS, &AC_LUMA_VALUES);
    if color {
        dht(&mut out, 0x01, &DC_CHROMA_BITS, &DC_VALUES);
        dht(&mut out, 0x11, &AC_CHROMA_BITS, &AC_CHROMA_VALUES);
    }
    out.extend_from_slice(&[0xff, 0xda, 0, 6 + 2 * n, n]);
    for c in 0..n {
        out.extend_from_slice(&[c + 1, if c == 0 { 0x00 } else { 0x11 }]);
    }
    out.extend_from_slice(&[0, 63, 0]);

    let codes = [
        (
            Codes::new(&DC_LUMA_BITS, &DC_VALUES),
            Codes::new(&AC_LUMA_BITS, &AC_LUMA_VALUES),
        ),
        (
            Codes::new(&DC_CHROMA_BITS, &DC_VALUES),
            Codes::new(&AC_CHROMA_BITS, &AC_CHROMA_VALUES),
        ),
    ];
    let mut bits = BitWriter { out, acc: 0, n: 0 };
    let mut last_dc = vec![0i32; channels];
    let plane_width = |c: usize| if c == 0 { fw } else { fw / 2 };
    for my in 0..mcuy {
        for mx in 0..mcux {
            for (c, plane) in planes.iter().enumerate() {
                let (h, v) = if c == 0 && color { (2, 2) } else { (1, 1) };
                let (dc_codes, ac_codes) = &codes[usize::from(c > 0)];
                let div = if c == 0 { &ld } else { &cd };
                let pw = plane_width(c);
                let mut prev_dc = 0i32;
                for yy in 0..v {
                    for xx in 0..h {
                        let (bx, by) = (mx * h + xx, my * v + yy);
                        let block: [i32; 64] = if by >= plane.bh || bx >= plane.bw {
                            // jccoefct.c's dummy blocks past the image: no AC, the DC of the
                            // MCU's previous block (the left neighbour, or the end of the row
                            // above for a dummy row)
                            let mut b = [0; 64];
                            b[0] = prev_dc;
                            b
                        } else {
                            let mut d = [0i32; 64];
                            for r in 0..8 {
                                for col in 0..8 {
                                    let s = plane.data[(by * 8 + r) * pw + bx * 8 + col];
                                    d[r * 8 + col] = i32::from(s) - 128;
                                }
                            }
                            fdct_islow(&mut d);
                            quantize(&d, div)
                        };
                        prev_dc = block[0];
                        encode_block(&mut bits, &block, &mut last_dc[c], dc_codes, ac_codes);
                    }
                }
            }
        }
    }
    bits.flush();
    let mut out = bits.out;
    out.extend_from_slice(&[0xff, 0xd9]);
    let len = out.len();
    Ok(Tensor::from_vec(out, &[len])?)
}
