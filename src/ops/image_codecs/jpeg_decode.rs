//! `image::decode_jpeg`: a baseline and progressive Huffman JPEG decoder whose arithmetic is
//! libjpeg-turbo's as torchvision configures it (the default "islow" integer IDCT of
//! jidctint.c with its range-limit table, "fancy" triangular chroma upsampling of jdsample.c
//! with libjpeg's edge handling, and jdcolor.c's fixed-point YCbCr -> RGB tables), so pixels
//! are bit-identical. Refused (never approximated): arithmetic coding, lossless and 12-bit
//! JPEGs, CMYK / YCCK / RGB-coded files, and corrupt entropy data that libjpeg would patch
//! with zeros.

use super::{channels_first, check_decoded_size, exif_orientation, ReadMode};
use crate::ops::kernels::{invalid_argument, unsupported_feature};
use crate::tensor::Tensor;

/// Natural (row-major) position of the k-th zigzag coefficient, with libjpeg's 16 extra
/// entries so corrupt run lengths past 63 land on the last coefficient.
pub(super) const NATURAL_ORDER: [usize; 80] = [
    0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5, 12, 19, 26, 33, 40, 48, 41, 34, 27, 20,
    13, 6, 7, 14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51, 58, 59,
    52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63,
    63, 63, 63, 63, 63, 63,
];

/// Scans per file (a progressive JPEG has about ten; libjpeg-turbo's TurboJPEG API stops at 500).
const MAX_SCANS: usize = 1000;

const OP: &str = "decode_jpeg";

fn corrupt(what: &str) -> crate::Error {
    invalid_argument(
        OP,
        "data",
        "must be a valid JPEG file",
        format!("corrupt data: {what}"),
    )
}

/// A file that ends before its image does.
fn truncated() -> crate::Error {
    invalid_argument(
        OP,
        "data",
        "must be a complete JPEG file",
        "a truncated image",
    )
}

/// A Huffman table in libjpeg's derived form (jdhuff.c `jpeg_make_d_derived_tbl`).
#[derive(Clone)]
struct Huffman {
    maxcode: [i32; 18],
    valoffset: [i32; 17],
    values: Vec<u8>,
    /// Codes of at most LOOKAHEAD bits, indexed by the next LOOKAHEAD bits: (length, symbol);
    /// length 0 sends longer codes to the bit-by-bit walk.
    fast: Vec<(u8, u8)>,
}

const LOOKAHEAD: u32 = 9;

impl Huffman {
    fn new(counts: &[u8; 16], values: Vec<u8>) -> crate::Result<Huffman> {
        let mut maxcode = [-1i32; 18];
        let mut valoffset = [0i32; 17];
        let (mut code, mut p) = (0i32, 0i32);
        for l in 1..=16 {
            let n = i32::from(counts[l - 1]);
            if n > 0 {
                valoffset[l] = p - code;
                code += n;
                p += n;
                maxcode[l] = code - 1;
                if code > (1 << l) {
                    return Err(corrupt("bad Huffman table"));
                }
            }
            code <<= 1;
        }
        maxcode[17] = i32::MAX;
        if p as usize > values.len() || p > 256 {
            return Err(corrupt("bad Huffman table"));
        }
        let mut fast = vec![(0u8, 0u8); 1 << LOOKAHEAD];
        let (mut code, mut k) = (0usize, 0usize);
        for l in 1..=LOOKAHEAD as usize {
            for _ in 0..counts[l - 1] {
                let shift = LOOKAHEAD as usize - l;
                for slot in fast.iter_mut().skip(code << shift).take(1 << shift) {
                    *slot = (l as u8, values.get(k).copied().unwrap_or(0));
                }
                code += 1;
                k += 1;
            }
            code <<= 1;
        }
        Ok(Huffman {
            maxcode,
            valoffset,
            values,
            fast,
        })
    }
}

/// Reads the entropy-coded bits of one scan: byte stuffing removed, stopping at a marker.
struct Bits<'a> {
    data: &'a [u8],
    pos: usize,
    acc: u64,
    n: u32,
    /// A marker was reached: libjpeg would go on with zero bits, which is refused here.
    at_marker: bool,
}

impl<'a> Bits<'a> {
    fn new(data: &'a [u8], pos: usize) -> Bits<'a> {
        Bits {
            data,
            pos,
            acc: 0,
            n: 0,
            at_marker: false,
        }
    }

    fn fill(&mut self) -> crate::Result<()> {
        while self.n <= 56 {
            if self.at_marker {
                return Ok(());
            }
            let Some(&b) = self.data.get(self.pos) else {
                return Err(truncated());
            };
            if b == 0xff {
                let next = self.data.get(self.pos + 1).copied();
                match next {
                    Some(0) => self.pos += 2,
                    _ => {
                        self.at_marker = true;
                        return Ok(());
                    }
                }
            } else {
                self.pos += 1;
            }
            self.acc |= u64::from(b) << (56 - self.n);
            self.n += 8;
        }
        Ok(())
    }

    fn bits(&mut self, k: u32) -> crate::Result<u32> {
        if k == 0 {
            return Ok(0);
        }
        if self.n < k {
            self.fill()?;
            if self.n < k {
                return Err(corrupt("premature end of entropy-coded data"));
            }
        }
        let v = (self.acc >> (64 - k)) as u32;
        self.acc <<= k;
        self.n -= k;
        Ok(v)
    }

    fn bit(&mut self) -> crate::Result<bool> {
        Ok(self.bits(1)? != 0)
    }

    fn decode(&mut self, h: &Huffman) -> crate::Result<u8> {
        if self.n < LOOKAHEAD {
            self.fill()?;
        }
        if self.n >= LOOKAHEAD {
            let peek = (self.acc >> (64 - LOOKAHEAD)) as usize;
            if let Some(&(len, symbol)) = h.fast.get(peek) {
                if len > 0 {
                    self.acc <<= len;
                    self.n -= u32::from(len);
                    return Ok(symbol);
                }
            }
        }
        let mut code = self.bits(1)? as i32;
        let mut l = 1;
        while code > h.maxcode[l] {
            code = (code << 1) | self.bits(1)? as i32;
            l += 1;
            if l > 16 {
                return Err(corrupt("bad Huffman code"));
            }
        }
        let i = (code + h.valoffset[l]) as usize;
        h.values
            .get(i)
            .copied()
            .ok_or_else(|| corrupt("bad Huffman code"))
    }

    /// `s` bits, sign-extended as JPEG's HUFF_EXTEND.
    fn receive_extend(&mut self, s: u32) -> crate::Result<i32> {
        if s == 0 {
            return Ok(0);
        }
        if s > 16 {
            return Err(corrupt("coefficient size over 16 bits"));
        }
        let v = self.bits(s)? as i32;
        Ok(if v < (1 << (s - 1)) {
            v + (-1 << s) + 1
        } else {
            v
        })
    }

    /// The length of an end-of-band run whose symbol carried `r`: `2^r` plus `r` more bits.
    fn eob_run(&mut self, r: u32) -> crate::Result<u32> {
        Ok((1 << r) + self.bits(r)?)
    }

    /// Drop the rest of the current byte run and step over a restart marker.
    fn restart(&mut self) -> crate::Result<()> {
        self.acc = 0;
        self.n = 0;
        self.at_marker = false;
        match (self.data.get(self.pos), self.data.get(self.pos + 1)) {
            (Some(0xff), Some(m)) if (0xd0..=0xd7).contains(m) => {
                self.pos += 2;
                Ok(())
            }
            _ => Err(corrupt("missing restart marker")),
        }
    }
}

struct Component {
    id: u8,
    h: usize,
    v: usize,
    tq: usize,
    /// Blocks per row and column of the MCU-padded grid.
    bw: usize,
    bh: usize,
    /// Quantization table latched at the component's first scan (natural order).
    quant: Option<[u16; 64]>,
    coefs: Vec<i16>,
}

struct Frame {
    width: usize,
    height: usize,
    progressive: bool,
    hmax: usize,
    vmax: usize,
    mcux: usize,
    mcuy: usize,
    comps: Vec<Component>,
}

impl Frame {
    /// The component's sample size: ceil(image size * factor / max factor).
    fn comp_size(&self, c: &Component) -> (usize, usize) {
        (
            (self.width * c.h).div_ceil(self.hmax),
            (self.height * c.v).div_ceil(self.vmax),
        )
    }
}

struct Scan {
    comps: Vec<(usize, usize, usize)>, // (frame component index, dc table, ac table)
    ss: usize,
    se: usize,
    ah: u32,
    al: u32,
}

fn u16_at(data: &[u8], i: usize) -> crate::Result<usize> {
    match (data.get(i), data.get(i + 1)) {
        (Some(&a), Some(&b)) => Ok(usize::from(a) << 8 | usize::from(b)),
        _ => Err(truncated()),
    }
}

/// The decoded header and coefficients of a file.
struct Decoded {
    frame: Frame,
    adobe_transform: Option<u8>,
    first_app1: Option<Vec<u8>>,
}

fn decode_coefficients(data: &[u8]) -> crate::Result<Decoded> {
    if data.get(..2) != Some(&[0xff, 0xd8]) {
        return Err(invalid_argument(
            OP,
            "data",
            "must start with the JPEG SOI marker ff d8",
            format!("{:02x?}", data.get(..2)),
        ));
    }
    let mut qt: [Option<[u16; 64]>; 4] = [None; 4];
    let mut dc: [Option<Huffman>; 4] = [None, None, None, None];
    let mut ac: [Option<Huffman>; 4] = [None, None, None, None];
    let mut restart_interval = 0usize;
    let mut frame: Option<Frame> = None;
    let (mut adobe_transform, mut first_app1) = (None, None);
    let mut pos = 2usize;
    let mut scans = 0usize;
    loop {
        // the next marker (libjpeg skips fill bytes)
        if *data.get(pos).ok_or_else(truncated)? != 0xff {
            return Err(corrupt("expected a marker"));
        }
        pos += 1;
        let mut marker = *data.get(pos).ok_or_else(truncated)?;
        while marker == 0xff {
            pos += 1;
            marker = *data.get(pos).ok_or_else(truncated)?;
        }
        pos += 1;
        match marker {
            0xd9 => break, // EOI
            0xd0..=0xd7 | 0x01 => continue,
            _ => {}
        }
        let len = u16_at(data, pos)?;
        if len < 2 {
            return Err(corrupt("marker length"));
        }
        let seg = data.get(pos + 2..pos + len).ok_or_else(truncated)?;
        pos += len;
        match marker {
            0xdb => {
                let mut i = 0;
                while i < seg.len() {
                    let (pq, tq) = (seg[i] >> 4, usize::from(seg[i] & 15));
                    if tq > 3 {
                        return Err(corrupt("quantization table index"));
                    }
                    let mut table = [0u16; 64];
                    for k in 0..64 {
                        let v = if pq == 0 {
                            seg.get(i + 1 + k).map(|&v| u16::from(v))
                        } else {
                            seg.get(i + 1 + 2 * k..i + 3 + 2 * k)
                                .map(|b| u16::from_be_bytes([b[0], b[1]]))
                        };
                        table[NATURAL_ORDER[k]] = v.ok_or_else(|| corrupt("short DQT"))?;
                    }
                    qt[tq] = Some(table);
                    i += 1 + if pq == 0 { 64 } else { 128 };
                }
            }
            0xc4 => {
                let mut i = 0;
                while i < seg.len() {
                    let (tc, th) = (seg[i] >> 4, usize::from(seg[i] & 15));
                    let counts: [u8; 16] = seg
                        .get(i + 1..i + 17)
                        .and_then(|c| c.try_into().ok())
                        .ok_or_else(|| corrupt("short DHT"))?;
                    let total: usize = counts.iter().map(|&c| usize::from(c)).sum();
                    let values = seg
                        .get(i + 17..i + 17 + total)
                        .ok_or_else(|| corrupt("short DHT"))?
                        .to_vec();
                    if th > 3 || tc > 1 {
                        return Err(corrupt("Huffman table index"));
                    }
                    let table = Some(Huffman::new(&counts, values)?);
                    if tc == 0 {
                        dc[th] = table;
                    } else {
                        ac[th] = table;
                    }
                    i += 17 + total;
                }
            }
            0xdd => restart_interval = u16_at(seg, 0)?,
            0xe1 if first_app1.is_none() => first_app1 = Some(seg.to_vec()),
            0xee if seg.len() >= 12 && seg.get(..5) == Some(b"Adobe") => {
                adobe_transform = seg.get(11).copied();
            }
            0xc0..=0xc2 => {
                if frame.is_some() {
                    return Err(corrupt("more than one frame"));
                }
                if seg.first() != Some(&8) {
                    return Err(unsupported_feature(
                        OP,
                        format!(
                            "{}-bit samples (only 8-bit JPEGs are decoded)",
                            seg.first().copied().unwrap_or(0)
                        ),
                    ));
                }
                let height = u16_at(seg, 1)?;
                let width = u16_at(seg, 3)?;
                let n = usize::from(*seg.get(5).ok_or_else(|| corrupt("short SOF"))?);
                if width == 0 || height == 0 || n == 0 {
                    return Err(corrupt("empty image"));
                }
                let mut comps = Vec::with_capacity(n);
                for c in 0..n {
                    let b = seg
                        .get(6 + 3 * c..9 + 3 * c)
                        .ok_or_else(|| corrupt("short SOF"))?;
                    let (h, v) = (usize::from(b[1] >> 4), usize::from(b[1] & 15));
                    if !(1..=4).contains(&h) || !(1..=4).contains(&v) || b[2] > 3 {
                        return Err(corrupt("bad sampling factors"));
                    }
                    comps.push(Component {
                        id: b[0],
                        h,
                        v,
                        tq: usize::from(b[2]),
                        bw: 0,
                        bh: 0,
                        quant: None,
                        coefs: Vec::new(),
                    });
                }
                let hmax = comps.iter().map(|c| c.h).max().unwrap_or(1);
                let vmax = comps.iter().map(|c| c.v).max().unwrap_or(1);
                let (mcux, mcuy) = (width.div_ceil(8 * hmax), height.div_ceil(8 * vmax));
                let mut total = 0usize;
                for c in &mut comps {
                    c.bw = mcux * c.h;
                    c.bh = mcuy * c.v;
                    total = total.saturating_add(c.bw * c.bh * 64);
                }
                // coefficients (2 bytes each) and the output planes
                check_decoded_size("decode_jpeg", &[total, 3], 1)?;
                for c in &mut comps {
                    c.coefs = vec![0i16; c.bw * c.bh * 64];
                }
                frame = Some(Frame {
                    width,
                    height,
                    progressive: marker == 0xc2,
                    hmax,
                    vmax,
                    mcux,
                    mcuy,
                    comps,
                });
            }
            0xc3 | 0xc5..=0xc7 | 0xc9..=0xcb | 0xcd..=0xcf => {
                return Err(unsupported_feature(
                    OP,
                    "arithmetic-coded, lossless or hierarchical JPEG",
                ))
            }
            0xda => {
                scans += 1;
                if scans > MAX_SCANS {
                    // each scan walks every block: bound the work a small file can ask for
                    return Err(unsupported_feature(
                        OP,
                        format!("more than {MAX_SCANS} scans"),
                    ));
                }
                let f = frame.as_mut().ok_or_else(|| corrupt("scan before frame"))?;
                let n = usize::from(*seg.first().ok_or_else(|| corrupt("short SOS"))?);
                if n == 0 || n > 4 {
                    return Err(corrupt("scan component count"));
                }
                let mut comps = Vec::with_capacity(n);
                for i in 0..n {
                    let b = seg
                        .get(1 + 2 * i..3 + 2 * i)
                        .ok_or_else(|| corrupt("short SOS"))?;
                    let ci = f
                        .comps
                        .iter()
                        .position(|c| c.id == b[0])
                        .ok_or_else(|| corrupt("scan names an unknown component"))?;
                    comps.push((ci, usize::from(b[1] >> 4), usize::from(b[1] & 15)));
                }
                let p = seg
                    .get(1 + 2 * n..4 + 2 * n)
                    .ok_or_else(|| corrupt("short SOS"))?;
                let scan = Scan {
                    comps,
                    ss: usize::from(p[0]),
                    se: usize::from(p[1]),
                    ah: u32::from(p[2] >> 4),
                    al: u32::from(p[2] & 15),
                };
                pos = decode_scan(f, &scan, &qt, &dc, &ac, restart_interval, data, pos)?;
            }
            _ => {}
        }
    }
    let frame = frame.ok_or_else(|| corrupt("no frame"))?;
    if frame.comps.iter().any(|c| c.quant.is_none()) {
        return Err(corrupt("a component appears in no scan"));
    }
    Ok(Decoded {
        frame,
        adobe_transform,
        first_app1,
    })
}

#[allow(clippy::too_many_arguments)]
fn decode_scan(
    f: &mut Frame,
    scan: &Scan,
    qt: &[Option<[u16; 64]>; 4],
    dc: &[Option<Huffman>; 4],
    ac: &[Option<Huffman>; 4],
    restart_interval: usize,
    data: &[u8],
    pos: usize,
) -> crate::Result<usize> {
    let (ss, se, ah, al) = (scan.ss, scan.se, scan.ah, scan.al);
    let is_dc = ss == 0;
    if f.progressive {
        if ss > se || se > 63 || (is_dc && se != 0) || (!is_dc && scan.comps.len() != 1) || al > 13
        {
            return Err(corrupt("bad progressive scan parameters"));
        }
    } else if ss != 0 || se != 63 || ah != 0 || al != 0 {
        return Err(corrupt("bad sequential scan parameters"));
    }
    for &(ci, td, ta) in &scan.comps {
        let c = f.comps.get_mut(ci).ok_or_else(|| corrupt("component"))?;
        if c.quant.is_none() {
            c.quant = Some(qt[c.tq].ok_or_else(|| corrupt("missing quantization table"))?);
        }
        if (is_dc && ah == 0 && dc.get(td).is_none_or(Option::is_none))
            || (!(f.progressive && is_dc) && ac.get(ta).is_none_or(Option::is_none))
        {
            return Err(corrupt("missing Huffman table"));
        }
    }
    let table = |t: &[Option<Huffman>; 4], i: usize| -> crate::Result<Huffman> {
        t.get(i)
            .cloned()
            .flatten()
            .ok_or_else(|| corrupt("missing Huffman table"))
    };
    let tables: Vec<(Option<Huffman>, Option<Huffman>)> = scan
        .comps
        .iter()
        .map(|&(_, td, ta)| (table(dc, td).ok(), table(ac, ta).ok()))
        .collect();
    // the units of the scan: MCUs of the interleaved grid, or a component's own blocks
    let single = scan.comps.len() == 1;
    let units: Vec<Vec<(usize, usize, usize)>> = if single {
        let (ci, ..) = scan.comps[0];
        let c = &f.comps[ci];
        let (dw, dh) = f.comp_size(c);
        let (bx, by) = (dw.div_ceil(8), dh.div_ceil(8));
        (0..by)
            .flat_map(|y| (0..bx).map(move |x| vec![(0, x, y)]))
            .collect()
    } else {
        let mut all = Vec::with_capacity(f.mcux * f.mcuy);
        for my in 0..f.mcuy {
            for mx in 0..f.mcux {
                let mut blocks = Vec::new();
                for (k, &(ci, ..)) in scan.comps.iter().enumerate() {
                    let c = &f.comps[ci];
                    for v in 0..c.v {
                        for h in 0..c.h {
                            blocks.push((k, mx * c.h + h, my * c.v + v));
                        }
                    }
                }
                all.push(blocks);
            }
        }
        all
    };
    let mut bits = Bits::new(data, pos);
    let mut pred = vec![0i32; scan.comps.len()];
    let mut eobrun = 0u32;
    for (u, blocks) in units.iter().enumerate() {
        if restart_interval > 0 && u > 0 && u % restart_interval == 0 {
            bits.restart()?;
            pred.iter_mut().for_each(|p| *p = 0);
            eobrun = 0;
        }
        for &(k, bx, by) in blocks {
            let (ci, ..) = scan.comps[k];
            let c = &mut f.comps[ci];
            let start = (by * c.bw + bx) * 64;
            let block = c
                .coefs
                .get_mut(start..start + 64)
                .ok_or_else(|| corrupt("block outside the frame"))?;
            let (dct, act) = &tables[k];
            if !f.progressive {
                let (Some(dct), Some(act)) = (dct, act) else {
                    return Err(corrupt("missing Huffman table"));
                };
                let s = u32::from(bits.decode(dct)?);
                pred[k] = pred[k].wrapping_add(bits.receive_extend(s)?);
                block[0] = pred[k] as i16;
                let mut i = 1;
                while i < 64 {
                    let rs = bits.decode(act)?;
                    let (r, s) = (usize::from(rs >> 4), u32::from(rs & 15));
                    if s != 0 {
                        i += r;
                        block[NATURAL_ORDER[i]] = bits.receive_extend(s)? as i16;
                    } else if r != 15 {
                        break;
                    } else {
                        i += 15;
                    }
                    i += 1;
                }
            } else if is_dc {
                if ah == 0 {
                    let dct = dct
                        .as_ref()
                        .ok_or_else(|| corrupt("missing Huffman table"))?;
                    let s = u32::from(bits.decode(dct)?);
                    pred[k] = pred[k].wrapping_add(bits.receive_extend(s)?);
                    block[0] = (pred[k].wrapping_shl(al)) as i16;
                } else if bits.bit()? {
                    block[0] |= 1 << al;
                }
            } else {
                let act = act
                    .as_ref()
                    .ok_or_else(|| corrupt("missing Huffman table"))?;
                decode_ac(&mut bits, act, block, scan, &mut eobrun)?;
            }
        }
    }
    // the scan ends at the next marker: skip the rest of its bytes
    let mut p = bits.pos;
    loop {
        match (data.get(p), data.get(p + 1)) {
            (Some(0xff), Some(0)) => p += 2,
            (Some(0xff), Some(m)) if (0xd0..=0xd7).contains(m) => p += 2,
            (Some(0xff), Some(_)) => return Ok(p),
            (Some(_), _) => p += 1,
            (None, _) => return Err(truncated()),
        }
    }
}

/// jdphuff.c `decode_mcu_AC_first` (first scan of a band, `Ah` = 0) and
/// `decode_mcu_AC_refine` (its later bits) for one block.
fn decode_ac(
    bits: &mut Bits<'_>,
    act: &Huffman,
    block: &mut [i16],
    scan: &Scan,
    eobrun: &mut u32,
) -> crate::Result<()> {
    let (ss, se, al) = (scan.ss, scan.se, scan.al);
    if scan.ah == 0 {
        if *eobrun > 0 {
            *eobrun -= 1;
            return Ok(());
        }
        let mut k = ss;
        while k <= se {
            let rs = bits.decode(act)?;
            let (r, s) = (u32::from(rs >> 4), u32::from(rs & 15));
            if s != 0 {
                k += r as usize;
                let v = bits.receive_extend(s)?;
                block[NATURAL_ORDER[k]] = v.wrapping_shl(al) as i16;
            } else if r == 15 {
                k += 15;
            } else {
                *eobrun = bits.eob_run(r)? - 1;
                break;
            }
            k += 1;
        }
        return Ok(());
    }
    let p1: i16 = 1 << al;
    let m1: i16 = (-1i16).wrapping_shl(al);
    let mut k = ss;
    let refine = |bits: &mut Bits<'_>, coef: &mut i16| -> crate::Result<()> {
        if bits.bit()? && (*coef & p1) == 0 {
            *coef = if *coef >= 0 {
                coef.wrapping_add(p1)
            } else {
                coef.wrapping_add(m1)
            };
        }
        Ok(())
    };
    if *eobrun == 0 {
        while k <= se {
            let rs = bits.decode(act)?;
            let (mut r, s) = (i32::from(rs >> 4), rs & 15);
            let mut value = 0i16;
            if s != 0 {
                value = if bits.bit()? { p1 } else { m1 };
            } else if r != 15 {
                *eobrun = bits.eob_run(r as u32)?;
                break;
            }
            loop {
                let coef = &mut block[NATURAL_ORDER[k]];
                if *coef != 0 {
                    refine(bits, coef)?;
                } else {
                    r -= 1;
                    if r < 0 {
                        break;
                    }
                }
                k += 1;
                if k > se {
                    break;
                }
            }
            if s != 0 {
                block[NATURAL_ORDER[k]] = value;
            }
            k += 1;
        }
    }
    if *eobrun > 0 {
        while k <= se {
            let coef = &mut block[NATURAL_ORDER[k]];
            if *coef != 0 {
                refine(bits, coef)?;
            }
            k += 1;
        }
        *eobrun -= 1;
    }
    Ok(())
}

/// libjpeg's post-IDCT range limit: `range_limit[x & 1023]` of a value centred on 0.
fn range_limit(x: i64) -> u8 {
    match (x & 1023) as usize {
        i if i < 128 => (i + 128) as u8,
        i if i < 512 => 255,
        i if i < 896 => 0,
        i => (i - 896) as u8,
    }
}

/// jidctint.c `jpeg_idct_islow`: one dequantized 8x8 block into `out` (row stride `stride`).
fn idct_islow(coefs: &[i16], quant: &[u16; 64], out: &mut [u8], stride: usize) {
    const CONST_BITS: u32 = 13;
    const PASS1_BITS: u32 = 2;
    const F0_298: i64 = 2446;
    const F0_390: i64 = 3196;
    const F0_541: i64 = 4433;
    const F0_765: i64 = 6270;
    const F0_899: i64 = 7373;
    const F1_175: i64 = 9633;
    const F1_501: i64 = 12299;
    const F1_847: i64 = 15137;
    const F1_961: i64 = 16069;
    const F2_053: i64 = 16819;
    const F2_562: i64 = 20995;
    const F3_072: i64 = 25172;
    let descale = |x: i64, n: u32| (x + (1 << (n - 1))) >> n;
    // the shared even/odd butterfly: eight inputs in natural order -> eight outputs
    let butterfly = |v: [i64; 8]| -> [i64; 8] {
        let (z2, z3) = (v[2], v[6]);
        let z1 = (z2 + z3) * F0_541;
        let tmp2 = z1 + z3 * -F1_847;
        let tmp3 = z1 + z2 * F0_765;
        let tmp0 = (v[0] + v[4]) << CONST_BITS;
        let tmp1 = (v[0] - v[4]) << CONST_BITS;
        let (tmp10, tmp13, tmp11, tmp12) = (tmp0 + tmp3, tmp0 - tmp3, tmp1 + tmp2, tmp1 - tmp2);
        let (mut t0, mut t1, mut t2, mut t3) = (v[7], v[5], v[3], v[1]);
        let (mut z1, mut z2, mut z3, mut z4) = (t0 + t3, t1 + t2, t0 + t2, t1 + t3);
        let z5 = (z3 + z4) * F1_175;
        t0 *= F0_298;
        t1 *= F2_053;
        t2 *= F3_072;
        t3 *= F1_501;
        z1 *= -F0_899;
        z2 *= -F2_562;
        z3 *= -F1_961;
        z4 *= -F0_390;
        z3 += z5;
        z4 += z5;
        t0 += z1 + z3;
        t1 += z2 + z4;
        t2 += z2 + z3;
        t3 += z1 + z4;
        [
            tmp10 + t3,
            tmp11 + t2,
            tmp12 + t1,
            tmp13 + t0,
            tmp13 - t0,
            tmp12 - t1,
            tmp11 - t2,
            tmp10 - t3,
        ]
    };
    let mut ws = [0i32; 64];
    for col in 0..8 {
        let v: [i64; 8] =
            std::array::from_fn(|r| i64::from(coefs[r * 8 + col]) * i64::from(quant[r * 8 + col]));
        if v[1..].iter().all(|&x| x == 0) {
            let dc = (v[0] << PASS1_BITS) as i32;
            for r in 0..8 {
                ws[r * 8 + col] = dc;
            }
            continue;
        }
        let o = butterfly(v);
        for r in 0..8 {
            ws[r * 8 + col] = descale(o[r], CONST_BITS - PASS1_BITS) as i32;
        }
    }
    for row in 0..8 {
        let v: [i64; 8] = std::array::from_fn(|c| i64::from(ws[row * 8 + c]));
        let o = butterfly(v);
        let dst = &mut out[row * stride..row * stride + 8];
        for c in 0..8 {
            dst[c] = range_limit(descale(o[c], CONST_BITS + PASS1_BITS + 3));
        }
    }
}

/// A component's samples after the IDCT: `stride` x rows, of which the first `w` x `h` are
/// the component's real samples.
struct Plane {
    data: Vec<u8>,
    stride: usize,
    w: usize,
    h: usize,
}

fn idct_component(f: &Frame, c: &Component) -> crate::Result<Plane> {
    let stride = c.bw * 8;
    let mut data = vec![0u8; stride * c.bh * 8];
    let quant = c.quant.ok_or_else(|| corrupt("component without a scan"))?;
    for by in 0..c.bh {
        for bx in 0..c.bw {
            let start = (by * c.bw + bx) * 64;
            let off = by * 8 * stride + bx * 8;
            let (Some(coefs), Some(out)) = (c.coefs.get(start..start + 64), data.get_mut(off..))
            else {
                return Err(corrupt("block outside the frame"));
            };
            idct_islow(coefs, &quant, out, stride);
        }
    }
    let (w, h) = f.comp_size(c);
    Ok(Plane { data, stride, w, h })
}

/// jdsample.c: a component plane brought to the full `width` x `height` grid, fancy
/// (triangular) for 2:1 horizontal and/or vertical factors, replication otherwise.
fn upsample(f: &Frame, c: &Component, p: &Plane) -> crate::Result<Vec<u8>> {
    let (width, height) = (f.width, f.height);
    let mut out = vec![0u8; width * height];
    let at = |x: usize, y: usize| -> i32 {
        // rows past the real ones repeat the last (jdmainct's context rows); so does row -1
        let y = y.min(p.h - 1);
        i32::from(p.data.get(y * p.stride + x).copied().unwrap_or(0))
    };
    let (hs, vs) = (f.hmax / c.h, f.vmax / c.v);
    let (fancy_h, fancy_v) = (c.h * 2 == f.hmax, c.v * 2 == f.vmax);
    let dw = p.w;
    for y in 0..height {
        let row = &mut out[y * width..(y + 1) * width];
        if hs == 1 && vs == 1 {
            for (x, o) in row.iter_mut().enumerate() {
                *o = at(x, y) as u8;
            }
        } else if fancy_h && vs == 1 && dw > 2 {
            // h2v1_fancy_upsample
            for (x, o) in row.iter_mut().enumerate() {
                let i = x / 2;
                *o = if x == 0 {
                    at(0, y)
                } else if x == 2 * dw - 1 {
                    at(dw - 1, y)
                } else if x % 2 == 0 {
                    (at(i, y) * 3 + at(i - 1, y) + 1) >> 2
                } else {
                    (at(i, y) * 3 + at(i + 1, y) + 2) >> 2
                } as u8;
            }
        } else if hs == 1 && fancy_v {
            // h1v2_fancy_upsample
            let (iy, below) = (y / 2, y % 2 == 1);
            let other = if below { iy + 1 } else { iy.saturating_sub(1) };
            let bias = if below { 2 } else { 1 };
            for (x, o) in row.iter_mut().enumerate() {
                *o = ((at(x, iy) * 3 + at(x, other) + bias) >> 2) as u8;
            }
        } else if fancy_h && fancy_v && dw > 2 {
            // h2v2_fancy_upsample
            let (iy, below) = (y / 2, y % 2 == 1);
            let other = if below { iy + 1 } else { iy.saturating_sub(1) };
            let colsum = |i: usize| at(i, iy) * 3 + at(i, other);
            for (x, o) in row.iter_mut().enumerate() {
                let i = x / 2;
                *o = if x == 0 {
                    (colsum(0) * 4 + 8) >> 4
                } else if x == 2 * dw - 1 {
                    (colsum(dw - 1) * 4 + 7) >> 4
                } else if x % 2 == 0 {
                    (colsum(i) * 3 + colsum(i - 1) + 8) >> 4
                } else {
                    (colsum(i) * 3 + colsum(i + 1) + 7) >> 4
                } as u8;
            }
        } else if f.hmax.is_multiple_of(c.h) && f.vmax.is_multiple_of(c.v) {
            // h2v1_upsample / h2v2_upsample / int_upsample: replication
            for (x, o) in row.iter_mut().enumerate() {
                *o = at(x / hs, y / vs) as u8;
            }
        } else {
            return Err(invalid_argument(
                OP,
                "data",
                "must not use fractional sampling factors (libjpeg refuses them too)",
                format!("{}x{} sampling of a component", c.h, c.v),
            ));
        }
    }
    Ok(out)
}

/// jdcolor.c `build_ycc_rgb_table` / `ycc_rgb_convert`.
fn ycc_to_rgb(y: &[u8], cb: &[u8], cr: &[u8]) -> Vec<u8> {
    const SCALEBITS: u32 = 16;
    const ONE_HALF: i64 = 1 << (SCALEBITS - 1);
    const FIX_1_40200: i64 = 91881;
    const FIX_1_77200: i64 = 116130;
    const FIX_0_71414: i64 = 46802;
    const FIX_0_34414: i64 = 22554;
    let cr_r: Vec<i32> = (0..256)
        .map(|i| ((FIX_1_40200 * (i - 128) + ONE_HALF) >> SCALEBITS) as i32)
        .collect();
    let cb_b: Vec<i32> = (0..256)
        .map(|i| ((FIX_1_77200 * (i - 128) + ONE_HALF) >> SCALEBITS) as i32)
        .collect();
    let cr_g: Vec<i64> = (0..256).map(|i| -FIX_0_71414 * (i - 128)).collect();
    let cb_g: Vec<i64> = (0..256)
        .map(|i| -FIX_0_34414 * (i - 128) + ONE_HALF)
        .collect();
    let clamp = |v: i32| v.clamp(0, 255) as u8;
    let mut out = Vec::with_capacity(y.len() * 3);
    for ((&y, &cb), &cr) in y.iter().zip(cb).zip(cr) {
        let (y, cb, cr) = (i32::from(y), usize::from(cb), usize::from(cr));
        out.push(clamp(y + cr_r[cr]));
        out.push(clamp(y + ((cb_g[cb] + cr_g[cr]) >> SCALEBITS) as i32));
        out.push(clamp(y + cb_b[cb]));
    }
    out
}

pub(super) fn decode(
    bytes: &[u8],
    mode: ReadMode,
    apply_orientation: bool,
) -> crate::Result<Tensor> {
    let decoded = decode_coefficients(bytes)?;
    let f = &decoded.frame;
    let n = f.comps.len();
    let ycc = match n {
        1 => false,
        3 => {
            let ids: Vec<u8> = f.comps.iter().map(|c| c.id).collect();
            if ids == b"RGB" || decoded.adobe_transform == Some(0) {
                return Err(unsupported_feature(
                    OP,
                    "RGB-coded JPEG (no YCbCr transform)",
                ));
            }
            true
        }
        _ => {
            return Err(unsupported_feature(
                OP,
                format!("{n}-component JPEG (CMYK / YCCK or unknown color space)"),
            ))
        }
    };
    let channels = match (mode, ycc) {
        (ReadMode::Unchanged, false) | (ReadMode::Gray, _) => 1,
        (ReadMode::Unchanged, true) | (ReadMode::Rgb, _) => 3,
        _ => {
            return Err(invalid_argument(
                OP,
                "mode",
                "must be UNCHANGED, GRAY or RGB for JPEG files",
                format!("{mode:?}"),
            ))
        }
    };
    let (width, height) = (f.width, f.height);
    check_decoded_size("decode_jpeg", &[height, width, channels], 1)?;
    let luma = {
        let c = &f.comps[0];
        let plane = idct_component(f, c)?;
        upsample(f, c, &plane)?
    };
    let pixels = if channels == 1 {
        luma
    } else if !ycc {
        luma.iter().flat_map(|&g| [g, g, g]).collect()
    } else {
        let mut chroma = Vec::with_capacity(2);
        for c in &f.comps[1..] {
            let plane = idct_component(f, c)?;
            chroma.push(upsample(f, c, &plane)?);
        }
        ycc_to_rgb(&luma, &chroma[0], &chroma[1])
    };
    let image = channels_first(pixels, &[height, width, channels])?;
    if !apply_orientation {
        return Ok(image);
    }
    // torchvision reads the first APP1 marker from its 7th byte, whatever it holds
    let orientation = match &decoded.first_app1 {
        Some(app1) if app1.len() > 6 => exif_orientation(app1.get(6..).unwrap_or_default()),
        _ => -1,
    };
    super::apply_exif_orientation(image, orientation)
}
