//! `image::decode_png`: the png crate reads the raw samples (no transformation), and the
//! conversions torchvision asks libpng for (`png_set_expand_gray_1_2_4_to_8`,
//! `png_set_palette_to_rgb`, `png_set_strip_alpha`, `png_set_rgb_to_gray(1, 0.2989, 0.587)`,
//! `png_set_gray_to_rgb`, `png_set_add_alpha`) are done here with libpng's integer arithmetic.

use super::{channels_first, check_decoded_size, exif_orientation, ReadMode};
use crate::ops::kernels::{invalid_argument, unsupported_feature};
use crate::tensor::Tensor;
use png::{BitDepth, ColorType, Transformations};
use std::io::Cursor;

/// libpng's rgb_to_gray coefficients for torchvision's (0.2989, 0.587): each weight in 1/100000
/// scaled to 1/32768 and truncated (`png_set_rgb_to_gray_fixed`); blue takes the rest.
const RED_COEFF: u32 = 29890 * 32768 / 100000;
const GREEN_COEFF: u32 = 58700 * 32768 / 100000;
const BLUE_COEFF: u32 = 32768 - RED_COEFF - GREEN_COEFF;

const OP: &str = "decode_png";

fn png_err(e: png::DecodingError) -> crate::Error {
    invalid_argument(OP, "data", "must be a valid PNG file", e)
}

/// An image whose buffers' sizes overflow.
fn too_large(width: usize, height: usize) -> crate::Error {
    invalid_argument(
        OP,
        "the image size",
        "must fit in memory",
        format!("{width}x{height}"),
    )
}

/// One pixel after palette expansion: gray or RGB, and alpha when the image has it.
#[derive(Clone, Copy)]
enum Color {
    Gray(u16),
    Rgb([u16; 3]),
}

pub(super) fn decode(
    bytes: &[u8],
    mode: ReadMode,
    apply_orientation: bool,
) -> crate::Result<Tensor> {
    if bytes.len() < 8 {
        return Err(invalid_argument(
            OP,
            "data",
            "must hold at least the 8-byte PNG signature",
            format!("{} bytes", bytes.len()),
        ));
    }
    if bytes.get(..8) != Some(b"\x89PNG\r\n\x1a\n") {
        return Err(invalid_argument(
            OP,
            "data",
            "must start with the PNG signature",
            format!("{:02x?}", bytes.get(..8)),
        ));
    }
    let mut decoder = png::Decoder::new(Cursor::new(bytes));
    decoder.set_transformations(Transformations::IDENTITY);
    decoder.set_ignore_text_chunk(true);
    let header = decoder.read_header_info().map_err(png_err)?;
    let (width, height) = (header.width as usize, header.height as usize);
    let (color_type, bit_depth) = (header.color_type, header.bit_depth);
    let depth = bit_depth as u32;
    let wide = bit_depth == BitDepth::Sixteen;
    let src_channels = color_type.samples();
    let channels = match mode {
        ReadMode::Unchanged => src_channels,
        ReadMode::Gray => 1,
        ReadMode::GrayAlpha => 2,
        ReadMode::Rgb => 3,
        ReadMode::RgbAlpha => 4,
        ReadMode::Other(m) => {
            return Err(invalid_argument(
                OP,
                "mode",
                "must be UNCHANGED, GRAY, GRAY_ALPHA, RGB or RGB_ALPHA (0 to 4)",
                m,
            ))
        }
    };
    if color_type == ColorType::Indexed && mode == ReadMode::Unchanged && depth < 8 {
        // libpng hands torchvision packed indices here, in a buffer sized for one byte each
        return Err(unsupported_feature(
            OP,
            "a palette PNG of bit depth < 8 with mode UNCHANGED (torchvision returns packed \
             indices and uninitialized bytes)",
        ));
    }
    let sample_bytes = if wide { 2 } else { 1 };
    let out_bytes = check_decoded_size("decode_png", &[height, width, channels], sample_bytes)?;
    // the decoder's own buffers: the raw image (at most 8 bytes a pixel) and its row buffers
    let raw_bytes = width
        .checked_mul(height)
        .and_then(|n| n.checked_mul(8))
        .ok_or_else(|| too_large(width, height))?;
    crate::tensor::budget::check_alloc(raw_bytes.max(out_bytes))?;
    decoder.set_limits(png::Limits {
        bytes: raw_bytes.saturating_mul(2).saturating_add(1 << 26),
    });
    let mut reader = decoder.read_info().map_err(png_err)?;
    let info = reader.info();
    // eXIf before the image data: torchvision reads no chunk after IDAT
    let orientation = if apply_orientation {
        info.exif_metadata.as_deref().map_or(-1, exif_orientation)
    } else {
        -1
    };
    let palette: Vec<u8> = info.palette.as_deref().unwrap_or_default().to_vec();
    let trns: Option<Vec<u8>> = info.trns.as_deref().map(<[u8]>::to_vec);
    let to_gray = matches!(mode, ReadMode::Gray | ReadMode::GrayAlpha)
        && matches!(
            color_type,
            ColorType::Rgb | ColorType::Rgba | ColorType::Indexed
        );
    if to_gray
        && (info.gama_chunk.is_some()
            || info.srgb.is_some()
            || info.icc_profile.is_some()
            || info.coding_independent_code_points.is_some())
    {
        // libpng then converts through its gamma tables
        return Err(unsupported_feature(
            OP,
            "gray conversion of a color PNG carrying gamma or color-space chunks (gAMA, sRGB, \
             iCCP, cICP)",
        ));
    }
    if color_type == ColorType::Indexed
        && matches!(mode, ReadMode::GrayAlpha | ReadMode::RgbAlpha)
        && trns.is_none()
    {
        // torchvision expects libpng to add an alpha channel, which it does not
        return Err(unsupported_feature(
            OP,
            "a palette PNG without tRNS in mode GRAY_ALPHA or RGB_ALPHA (torchvision returns \
             misplaced channels and uninitialized bytes)",
        ));
    }
    let size = reader
        .output_buffer_size()
        .ok_or_else(|| too_large(width, height))?;
    let mut raw = vec![0u8; size];
    let frame = reader.next_frame(&mut raw).map_err(png_err)?;
    let line = frame.line_size;

    let sample = |row: &[u8], i: usize| -> u16 {
        match depth {
            16 => u16::from_be_bytes([
                row.get(2 * i).copied().unwrap_or(0),
                row.get(2 * i + 1).copied().unwrap_or(0),
            ]),
            8 => u16::from(row.get(i).copied().unwrap_or(0)),
            d => {
                let bit = i * d as usize;
                let byte = row.get(bit / 8).copied().unwrap_or(0);
                let shift = 8 - d as usize - bit % 8;
                u16::from(byte >> shift) & ((1 << d) - 1)
            }
        }
    };
    // gray samples of 1, 2 or 4 bits scale to 8 (png_set_expand_gray_1_2_4_to_8)
    let gray_scale: u16 = match (color_type, depth) {
        (ColorType::Grayscale, 1) => 255,
        (ColorType::Grayscale, 2) => 85,
        (ColorType::Grayscale, 4) => 17,
        _ => 1,
    };
    // png_set_add_alpha's filler, (1 << bit_depth) - 1, as stored in an 8-bit sample
    let filler: u16 = if wide {
        0xffff
    } else {
        ((1u32 << depth) - 1) as u16 & 0xff
    };
    let gray_of = |rgb: [u16; 3]| -> u16 {
        let [r, g, b] = rgb.map(u32::from);
        let sum = RED_COEFF * r + GREEN_COEFF * g + BLUE_COEFF * b;
        if wide {
            ((sum + 16384) >> 15) as u16
        } else if r == g && r == b {
            r as u16
        } else {
            (sum >> 15) as u16
        }
    };

    let mut out: Vec<u16> = Vec::with_capacity(width * height * channels);
    let mut samples = [0u16; 4];
    for y in 0..height {
        let row = raw.get(y * line..(y + 1) * line).ok_or_else(|| {
            invalid_argument(
                OP,
                "data",
                "must hold every row of the image",
                "truncated rows",
            )
        })?;
        for x in 0..width {
            for (c, s) in samples.iter_mut().enumerate().take(src_channels) {
                *s = sample(row, x * src_channels + c);
            }
            samples[0] *= gray_scale;
            let keep = match mode {
                ReadMode::Unchanged => true,
                ReadMode::Gray => color_type == ColorType::Grayscale,
                ReadMode::GrayAlpha => color_type == ColorType::GrayscaleAlpha,
                ReadMode::Rgb => color_type == ColorType::Rgb,
                ReadMode::RgbAlpha => color_type == ColorType::Rgba,
                ReadMode::Other(_) => false,
            };
            if keep {
                out.extend_from_slice(samples.get(..src_channels).unwrap_or_default());
                continue;
            }
            let (color, alpha) = match color_type {
                ColorType::Grayscale => (Color::Gray(samples[0]), None),
                ColorType::GrayscaleAlpha => (Color::Gray(samples[0]), Some(samples[1])),
                ColorType::Rgb => (Color::Rgb([samples[0], samples[1], samples[2]]), None),
                ColorType::Rgba => (
                    Color::Rgb([samples[0], samples[1], samples[2]]),
                    Some(samples[3]),
                ),
                ColorType::Indexed => {
                    // libpng's palette has 256 zeroed entries; tRNS entries past its end are opaque
                    let i = usize::from(samples[0]);
                    let entry = |k: usize| u16::from(palette.get(3 * i + k).copied().unwrap_or(0));
                    let alpha = trns
                        .as_ref()
                        .map(|t| u16::from(t.get(i).copied().unwrap_or(255)));
                    (Color::Rgb([entry(0), entry(1), entry(2)]), alpha)
                }
            };
            let gray = |c: Color| match c {
                Color::Gray(g) => g,
                Color::Rgb(rgb) => gray_of(rgb),
            };
            let rgb = |c: Color| match c {
                Color::Gray(g) => [g, g, g],
                Color::Rgb(rgb) => rgb,
            };
            match mode {
                ReadMode::Gray => out.push(gray(color)),
                ReadMode::GrayAlpha => out.extend([gray(color), alpha.unwrap_or(filler)]),
                ReadMode::Rgb => out.extend(rgb(color)),
                ReadMode::RgbAlpha => {
                    out.extend(rgb(color));
                    out.push(alpha.unwrap_or(filler));
                }
                ReadMode::Unchanged | ReadMode::Other(_) => {}
            }
        }
    }
    let hwc = [height, width, channels];
    let image = if wide {
        channels_first(out, &hwc)?
    } else {
        channels_first(out.into_iter().map(|v| v as u8).collect::<Vec<u8>>(), &hwc)?
    };
    if apply_orientation {
        super::apply_exif_orientation(image, orientation)
    } else {
        Ok(image)
    }
}
