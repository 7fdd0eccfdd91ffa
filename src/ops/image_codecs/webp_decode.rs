//! `image::decode_webp`: a still WebP image (lossless, or lossy with libwebp's default "fancy"
//! chroma upsampling) as torchvision's `WebPDecodeRGB` / `WebPDecodeRGBA` return it. The mode
//! only chooses RGB or RGBA: GRAY and GRAY_ALPHA keep the image's own channels, as in
//! torchvision.

use super::{channels_first, check_decoded_size, ReadMode};
use crate::ops::kernels::{invalid_argument, unsupported_feature};
use crate::tensor::Tensor;
use std::io::Cursor;

fn webp_err(e: image_webp::DecodingError) -> crate::Error {
    invalid_argument("decode_webp", "data", "must be a valid WebP file", e)
}

pub(super) fn decode(bytes: &[u8], mode: ReadMode) -> crate::Result<Tensor> {
    let mut decoder = image_webp::WebPDecoder::new(Cursor::new(bytes)).map_err(webp_err)?;
    if decoder.is_animated() {
        return Err(unsupported_feature("decode_webp", "animated WebP files"));
    }
    let has_alpha = decoder.has_alpha();
    let rgb_out = match mode {
        ReadMode::Rgb => true,
        ReadMode::RgbAlpha => false,
        _ => !has_alpha,
    };
    let (w, h) = decoder.dimensions();
    let (width, height) = (w as usize, h as usize);
    let channels = if rgb_out { 3 } else { 4 };
    check_decoded_size("decode_webp", &[height, width, 4], 1)?;
    let decoded_channels = if has_alpha { 4 } else { 3 };
    decoder.set_memory_limit(
        width
            .saturating_mul(height)
            .saturating_mul(8)
            .saturating_add(1 << 20),
    );
    let mut decoded = vec![0u8; width * height * decoded_channels];
    decoder.read_image(&mut decoded).map_err(webp_err)?;
    let pixels = if decoded_channels == channels {
        decoded
    } else {
        let mut out = Vec::with_capacity(width * height * channels);
        for px in decoded.chunks_exact(decoded_channels) {
            out.extend_from_slice(px.get(..3).unwrap_or_default());
            if channels == 4 {
                out.push(255);
            }
        }
        out
    };
    channels_first(pixels, &[height, width, channels])
}
