//! Kernels: torchvision's image decoders (`image::decode_png`, `decode_gif`, `decode_webp` and
//! the `decode_image` dispatcher), which a scripted preprocessing step calls on the bytes of an
//! encoded file. Pixels and the channel conversions of each `ImageReadMode` follow the C
//! libraries torchvision links (libpng, giflib, libwebp) step for step, so outputs are
//! bit-identical; input shapes torchvision's own decoders answer with uninitialized memory are
//! refused instead. Every decoder charges its output size against the call's memory budget
//! before decoding.
//!
//! `decode_jpeg` reproduces libjpeg-turbo (the library torchvision's CPU wheel links, whose
//! `_jpeg_version` / `_is_compiled_against_turbo` constants are reported). Not provided:
//! `encode_png` / `encode_jpeg` (their bytes depend on zlib's deflate and libjpeg-turbo's
//! encoder matching byte for byte) and `read_file` / `write_file` (file access named by an
//! archive).

mod gif_decode;
mod jpeg_decode;
mod jpeg_encode;
mod png_decode;
mod webp_decode;

use super::{Args, Registry};
use crate::ops::kernels::{check_rank, invalid_argument, unsupported_feature, wrong_dtype};
use crate::tensor::{DType, Element, RankRequirement, Tensor};
use crate::values::IValue;

pub fn register(r: &mut Registry) {
    r.add("image::decode_png", decode_png);
    r.add("image::decode_gif", decode_gif);
    r.add("image::decode_webp", decode_webp);
    r.add("image::decode_image", decode_image);
    r.add("image::decode_jpeg", decode_jpeg);
    r.add("image::encode_jpeg", encode_jpeg);
    r.add("image::_jpeg_version", jpeg_version);
    r.add(
        "image::_is_compiled_against_turbo",
        is_compiled_against_turbo,
    );
}

/// `JPEG_LIB_VERSION` of the libjpeg-turbo build torchvision's CPU wheel links (jpeg8 API),
/// whose decoder `decode_jpeg` reproduces.
fn jpeg_version(_: &mut Args<'_>) -> crate::Result<IValue> {
    Ok(IValue::Int(80))
}

/// That build is libjpeg-turbo.
fn is_compiled_against_turbo(_: &mut Args<'_>) -> crate::Result<IValue> {
    Ok(IValue::Bool(true))
}

/// encode_jpeg(Tensor data, int quality) -> Tensor
fn encode_jpeg(a: &mut Args<'_>) -> crate::Result<IValue> {
    let image = a.tensor(0)?;
    let quality = a.int(1)?;
    Ok(IValue::Tensor(jpeg_encode::encode(&image, quality)?))
}

/// decode_jpeg(Tensor data, int mode, bool apply_exif_orientation=False) -> Tensor
fn decode_jpeg(a: &mut Args<'_>) -> crate::Result<IValue> {
    let bytes = encoded_bytes(a.op, &a.tensor(0)?)?;
    let mode = ReadMode::from_int(a.int(1)?);
    let orient = a.bool(2)?;
    Ok(IValue::Tensor(jpeg_decode::decode(&bytes, mode, orient)?))
}

/// torchvision's `ImageReadMode` values (the `int mode` argument).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReadMode {
    Unchanged,
    Gray,
    GrayAlpha,
    Rgb,
    RgbAlpha,
    /// Any other number: each decoder decides (PNG refuses it, WebP treats it as UNCHANGED).
    Other(i64),
}

impl ReadMode {
    fn from_int(mode: i64) -> ReadMode {
        match mode {
            0 => ReadMode::Unchanged,
            1 => ReadMode::Gray,
            2 => ReadMode::GrayAlpha,
            3 => ReadMode::Rgb,
            4 => ReadMode::RgbAlpha,
            m => ReadMode::Other(m),
        }
    }
}

/// The encoded bytes: torchvision's `validate_encoded_data` (a contiguous, non-empty, 1-D uint8
/// tensor).
fn encoded_bytes(op: &str, data: &Tensor) -> crate::Result<Vec<u8>> {
    if !data.is_contiguous() {
        return Err(invalid_argument(
            op,
            "data",
            "must be contiguous",
            format!("strides {:?}", data.strides()),
        ));
    }
    if data.dtype() != DType::UInt8 {
        return Err(wrong_dtype(op, "data", "uint8", data.dtype()));
    }
    check_rank(op, "data", RankRequirement::Exactly(1), data.shape())?;
    if data.numel() == 0 {
        return Err(invalid_argument(op, "data", "must not be empty", "0 bytes"));
    }
    data.to_vec::<u8>()
}

/// Refuse an image whose decoded size (`dims` multiplied, in elements of `elem_bytes`) would
/// exceed the call's single-allocation limit, before any decoding work is done.
fn check_decoded_size(op: &str, dims: &[usize], elem_bytes: usize) -> crate::Result<usize> {
    let n = dims
        .iter()
        .try_fold(elem_bytes, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| {
            invalid_argument(
                op,
                "the image dimensions",
                "must fit in memory",
                format!("{dims:?}"),
            )
        })?;
    crate::tensor::budget::check_alloc(n)?;
    Ok(n)
}

/// An `[H, W, C]` (or `[N, H, W, C]`) pixel buffer as torchvision returns it: the channels-first
/// permuted view of the channels-last storage.
fn channels_first<T: Element>(pixels: Vec<T>, hwc: &[usize]) -> crate::Result<Tensor> {
    let t = Tensor::from_vec(pixels, hwc)?;
    let perm: &[usize] = if hwc.len() == 4 {
        &[0, 3, 1, 2]
    } else {
        &[2, 0, 1]
    };
    super::linalg::permute(&t, perm)
}

/// The EXIF orientation tag (0x0112) of a TIFF-structured EXIF block, read as torchvision's
/// `fetch_exif_orientation` (taken from OpenCV) reads it, including its treatment of short or
/// malformed blocks (out-of-range reads give 0xffff, offsets wrap in 32 bits): -1 when absent.
fn exif_orientation(exif: &[u8]) -> i64 {
    const INCORRECT_TAG: u16 = 0xffff;
    const REQ_EXIF_TAG_MARK: u16 = 0x2a;
    const ORIENTATION_EXIF_TAG: u16 = 0x0112;
    // `II` is little-endian; `MM`, and anything else, is read big-endian
    let intel = match exif {
        [a, b, ..] => a == b && *a == b'I',
        [a] => *a == b'I',
        [] => false,
    };
    let byte = |i: usize| u32::from(exif.get(i).copied().unwrap_or(0));
    let u16_at = |offset: usize| -> u16 {
        if offset.checked_add(1).is_none_or(|e| e >= exif.len()) {
            return INCORRECT_TAG;
        }
        if intel {
            (byte(offset) | byte(offset + 1) << 8) as u16
        } else {
            (byte(offset) << 8 | byte(offset + 1)) as u16
        }
    };
    let u32_at = |offset: usize| -> u32 {
        if offset.checked_add(3).is_none_or(|e| e >= exif.len()) {
            return u32::from(INCORRECT_TAG);
        }
        if intel {
            byte(offset) | byte(offset + 1) << 8 | byte(offset + 2) << 16 | byte(offset + 3) << 24
        } else {
            byte(offset) << 24 | byte(offset + 1) << 16 | byte(offset + 2) << 8 | byte(offset + 3)
        }
    };
    if u16_at(2) != REQ_EXIF_TAG_MARK {
        return -1;
    }
    let mut offset = u32_at(4);
    let num_entry = u16_at(offset as usize);
    offset = offset.wrapping_add(2);
    for _ in 0..num_entry {
        let tag = u16_at(offset as usize);
        if tag == INCORRECT_TAG {
            break;
        }
        if tag == ORIENTATION_EXIF_TAG {
            return i64::from(u16_at(offset.wrapping_add(8) as usize));
        }
        offset = offset.wrapping_add(12);
    }
    -1
}

/// torchvision's `exif_orientation_transform` on a `[..., H, W]` image.
fn apply_exif_orientation(image: Tensor, orientation: i64) -> crate::Result<Tensor> {
    let n = image.dim();
    let transposed = || -> crate::Result<Tensor> {
        let mut perm: Vec<usize> = (0..n).collect();
        perm.swap(n - 1, n - 2);
        super::linalg::permute(&image, &perm)
    };
    use super::shape::flip;
    Ok(match orientation {
        2 => flip(&image, &[-1])?,
        3 => flip(&image, &[-2, -1])?,
        4 => flip(&image, &[-2])?,
        5 => transposed()?,
        6 => flip(&transposed()?, &[-1])?,
        7 => flip(&transposed()?, &[-2, -1])?,
        8 => flip(&transposed()?, &[-2])?,
        _ => image,
    })
}

/// decode_png(Tensor data, int mode, bool apply_exif_orientation=False) -> Tensor
fn decode_png(a: &mut Args<'_>) -> crate::Result<IValue> {
    let bytes = encoded_bytes(a.op, &a.tensor(0)?)?;
    let mode = ReadMode::from_int(a.int(1)?);
    let orient = a.bool(2)?;
    Ok(IValue::Tensor(png_decode::decode(&bytes, mode, orient)?))
}

/// decode_gif(Tensor data) -> Tensor
fn decode_gif(a: &mut Args<'_>) -> crate::Result<IValue> {
    let bytes = encoded_bytes(a.op, &a.tensor(0)?)?;
    Ok(IValue::Tensor(gif_decode::decode(&bytes)?))
}

/// decode_webp(Tensor encoded_data, int mode) -> Tensor
fn decode_webp(a: &mut Args<'_>) -> crate::Result<IValue> {
    let bytes = encoded_bytes(a.op, &a.tensor(0)?)?;
    let mode = ReadMode::from_int(a.int(1)?);
    Ok(IValue::Tensor(webp_decode::decode(&bytes, mode)?))
}

/// decode_image(Tensor data, int mode, bool apply_exif_orientation=False) -> Tensor: the
/// decoder chosen by the file's signature, in torchvision's order.
fn decode_image(a: &mut Args<'_>) -> crate::Result<IValue> {
    let bytes = encoded_bytes(a.op, &a.tensor(0)?)?;
    let mode = ReadMode::from_int(a.int(1)?);
    let orient = a.bool(2)?;
    let starts = |n: usize, sig: &[u8]| bytes.len() >= n && bytes.get(..sig.len()) == Some(sig);
    if bytes.len() < 3 {
        return Err(unknown_format());
    }
    if starts(3, b"\xff\xd8\xff") {
        return Ok(IValue::Tensor(jpeg_decode::decode(&bytes, mode, orient)?));
    }
    if bytes.len() < 4 {
        return Err(unknown_format());
    }
    if starts(4, b"\x89PNG") {
        return Ok(IValue::Tensor(png_decode::decode(&bytes, mode, orient)?));
    }
    if bytes.len() < 6 {
        return Err(unknown_format());
    }
    if starts(6, b"GIF89a") || starts(6, b"GIF87a") {
        return Ok(IValue::Tensor(gif_decode::decode(&bytes)?));
    }
    if bytes.len() < 12 {
        return Err(unknown_format());
    }
    if bytes.get(4..12) == Some(b"ftypavif") || bytes.get(4..12) == Some(b"ftypheic") {
        return Err(unsupported_feature(
            "image::decode_image",
            "AVIF and HEIC images (torchvision's optional decoders)",
        ));
    }
    if bytes.len() >= 15 && starts(4, b"RIFF") && bytes.get(8..15) == Some(b"WEBPVP8") {
        return Ok(IValue::Tensor(webp_decode::decode(&bytes, mode)?));
    }
    Err(unknown_format())
}

/// `decode_image` of bytes in none of the formats it reads.
fn unknown_format() -> crate::Error {
    invalid_argument(
        "image::decode_image",
        "data",
        "must be a JPEG, PNG, GIF or WebP file",
        "bytes of another format",
    )
}
