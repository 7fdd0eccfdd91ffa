//! `image::decode_gif`: every frame of the file composed on the canvas as torchvision composes
//! giflib's `DGifSlurp` output. Its rules, kept as they are: a frame starts from the previous
//! frame unless its own disposal method is "restore to background" (unspecified, "do not
//! dispose" and "restore to previous" all keep the previous frame); then it starts from the
//! logical screen filled with the global color map's background color (black without a global
//! map). The frame's transparent index leaves the canvas pixel as it was. The result is
//! `[N, 3, H, W]` (channels-last storage), or `[3, H, W]` for a single frame.

use super::{channels_first, check_decoded_size};
use crate::ops::kernels::{invalid_argument, unsupported_feature, value_err};
use crate::tensor::Tensor;
use std::io::Cursor;
use std::num::NonZeroU64;

const OP: &str = "decode_gif";

fn gif_err(e: gif::DecodingError) -> crate::Error {
    invalid_argument(OP, "data", "must be a valid GIF file", e)
}

/// Refuse reserved disposal methods (4 to 7): giflib reports them and torchvision then fills
/// the background, but the gif crate reads them as "unspecified". A walk over the block
/// structure; malformed structure is left for the decoder to report.
fn check_disposal_methods(bytes: &[u8]) -> crate::Result<()> {
    let at = |i: usize| bytes.get(i).copied();
    let table = |flags: u8| {
        if flags & 0x80 != 0 {
            3usize << ((flags & 7) + 1)
        } else {
            0
        }
    };
    // skip data sub-blocks from `i`; None on truncation
    let sub_blocks = |mut i: usize| -> Option<usize> {
        loop {
            let n = usize::from(at(i)?);
            i += 1 + n;
            if n == 0 {
                return Some(i);
            }
        }
    };
    let Some(flags) = at(10) else { return Ok(()) };
    let mut i = 13 + table(flags);
    while let Some(kind) = at(i) {
        match kind {
            0x21 => {
                if at(i + 1) == Some(0xf9) && at(i + 2).is_some_and(|n| n >= 1) {
                    let method = at(i + 3).map_or(0, |f| (f >> 2) & 7);
                    if method >= 4 {
                        return Err(unsupported_feature(
                            OP,
                            format!("reserved disposal method {method}"),
                        ));
                    }
                }
                let Some(next) = sub_blocks(i + 2) else {
                    return Ok(());
                };
                i = next;
            }
            0x2c => {
                let Some(local) = at(i + 9) else {
                    return Ok(());
                };
                let Some(next) = sub_blocks(i + 10 + table(local) + 1) else {
                    return Ok(());
                };
                i = next;
            }
            _ => return Ok(()),
        }
    }
    Ok(())
}

pub(super) fn decode(bytes: &[u8]) -> crate::Result<Tensor> {
    check_disposal_methods(bytes)?;
    // the logical screen, read ahead of the decoder to bound its per-frame buffer
    let screen = |i: usize| usize::from(bytes.get(i).copied().unwrap_or(0));
    let (width, height) = (screen(6) | screen(7) << 8, screen(8) | screen(9) << 8);
    let canvas = check_decoded_size("decode_gif", &[height, width, 3], 1)?;
    let mut options = gif::DecodeOptions::new();
    options.set_color_output(gif::ColorOutput::Indexed);
    // frames outside the screen are refused below, so a frame never needs more than the screen
    options.set_memory_limit(gif::MemoryLimit::Bytes(
        NonZeroU64::new((width * height) as u64).unwrap_or(NonZeroU64::MIN),
    ));
    let mut decoder = options.read_info(Cursor::new(bytes)).map_err(gif_err)?;
    let global: Option<Vec<u8>> = decoder.global_palette().map(<[u8]>::to_vec);
    let background: [u8; 3] = match &global {
        Some(map) => {
            let i = decoder.bg_color().unwrap_or(0);
            let rgb = map.get(3 * i..3 * i + 3).ok_or_else(|| {
                unsupported_feature(
                    OP,
                    format!(
                        "background color index {i} outside the global color map (giflib \
                         reads past it)"
                    ),
                )
            })?;
            [rgb[0], rgb[1], rgb[2]]
        }
        None => [0, 0, 0],
    };
    let mut out: Vec<u8> = Vec::new();
    let mut frames = 0usize;
    while let Some(frame) = decoder.read_next_frame().map_err(gif_err)? {
        let (left, top) = (usize::from(frame.left), usize::from(frame.top));
        let (fw, fh) = (usize::from(frame.width), usize::from(frame.height));
        if left + fw > width || top + fh > height {
            // torchvision writes such frames outside its output tensor
            return Err(unsupported_feature(
                OP,
                format!(
                    "frame {frames} ({fw}x{fh} at {left},{top}) beyond the {width}x{height} \
                     logical screen (torchvision writes outside its output)"
                ),
            ));
        }
        check_decoded_size("decode_gif", &[frames + 1, canvas], 1)?;
        let start = out.len();
        if frames > 0 && frame.dispose != gif::DisposalMethod::Background {
            out.extend_from_within(start - canvas..start);
        } else {
            for _ in 0..width * height {
                out.extend_from_slice(&background);
            }
        }
        let map: &[u8] = match (&frame.palette, &global) {
            (Some(local), _) => local,
            (None, Some(global)) => global,
            (None, None) => {
                return Err(invalid_argument(
                    OP,
                    format!("frame {frames}"),
                    "must have a color map (its own or the file's global one)",
                    "none",
                ))
            }
        };
        let dst = out
            .get_mut(start..)
            .ok_or_else(|| value_err("decode_gif: internal: canvas"))?;
        for y in 0..fh {
            for x in 0..fw {
                let c = frame.buffer.get(y * fw + x).copied().ok_or_else(|| {
                    invalid_argument(
                        OP,
                        format!("frame {frames}"),
                        format!("must hold its {fw}x{fh} pixels"),
                        frame.buffer.len(),
                    )
                })?;
                if Some(c) == frame.transparent {
                    continue;
                }
                let i = usize::from(c);
                let rgb = map.get(3 * i..3 * i + 3).ok_or_else(|| {
                    unsupported_feature(
                        OP,
                        format!(
                            "frame {frames}: color index {i} outside its color map (giflib \
                             reads past it)"
                        ),
                    )
                })?;
                let p = 3 * ((y + top) * width + x + left);
                if let Some(px) = dst.get_mut(p..p + 3) {
                    px.copy_from_slice(rgb);
                }
            }
        }
        frames += 1;
    }
    if frames == 0 {
        return Err(invalid_argument(
            OP,
            "data",
            "must contain at least one image",
            "a GIF without frames",
        ));
    }
    if frames == 1 {
        channels_first(out, &[height, width, 3])
    } else {
        channels_first(out, &[frames, height, width, 3])
    }
}
