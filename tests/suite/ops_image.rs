//! torchvision's image decoders (`image::decode_png`, `decode_gif`, `decode_webp`,
//! `decode_image`): goldens from fixtures/gen_ops_image.py (torchvision 0.29's pixels), the
//! inputs torchvision answers with uninitialized memory (refused here), size limits, and
//! corrupted files (typed errors, never a panic).

use crate::common::{assert_op_cases, decode, fixtures_dir, Arrays};
use serde_json::Value;
use std::fs::File;
use std::sync::Arc;
use tsrun::internals::ops::{Args, OpContext, Registry};
use tsrun::internals::tensor::budget::{with_budget, MemoryBudget};
use tsrun::internals::tensor::TensorError;
use tsrun::{IValue, Tensor};

#[test]
fn image_decoders_match_torchvision() {
    assert_op_cases("image_codecs");
}

fn call(op: &str, args: Vec<IValue>) -> tsrun::Result<IValue> {
    let kernel = Registry::global().lookup(op, "").expect("a kernel");
    let ctx = OpContext::default();
    let mut args = args;
    kernel(&mut Args::new(op, &mut args, &ctx))
}

fn unsupported(err: &tsrun::Error) -> bool {
    matches!(
        err,
        tsrun::Error::Tensor(TensorError::UnsupportedFeature { .. })
    )
}

fn bytes_arg(b: &[u8]) -> IValue {
    IValue::Tensor(Tensor::from_vec(b.to_vec(), &[b.len()]).expect("tensor"))
}

fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn chunk(kind: &[u8], data: &[u8]) -> Vec<u8> {
    let mut body = kind.to_vec();
    body.extend_from_slice(data);
    let mut out = (data.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&body);
    out.extend_from_slice(&crc32(&body).to_be_bytes());
    out
}

/// `raw` as a zlib stream of one stored block.
fn zlib_stored(raw: &[u8]) -> Vec<u8> {
    let n = raw.len() as u16;
    let mut out = vec![0x78, 0x01, 0x01];
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&(!n).to_le_bytes());
    out.extend_from_slice(raw);
    let (mut a, mut b) = (1u32, 0u32);
    for &x in raw {
        a = (a + u32::from(x)) % 65521;
        b = (b + a) % 65521;
    }
    out.extend_from_slice(&(b << 16 | a).to_be_bytes());
    out
}

/// A PNG of zero-filled rows (filter 0) for a small image, with `chunks` before the image data.
fn png_of_zeros(w: u32, h: u32, depth: u8, color_type: u8, chunks: &[Vec<u8>]) -> Vec<u8> {
    let channels = [1, 0, 3, 1, 2, 0, 4][usize::from(color_type)];
    let row = 1 + (w as usize * channels * usize::from(depth)).div_ceil(8);
    let mut out = png_head(w, h, depth, color_type, chunks);
    out.extend(chunk(b"IDAT", &zlib_stored(&vec![0; row * h as usize])));
    out.extend(chunk(b"IEND", &[]));
    out
}

/// A PNG header (IHDR plus optional chunks) without image data.
fn png_head(w: u32, h: u32, depth: u8, color_type: u8, chunks: &[Vec<u8>]) -> Vec<u8> {
    let mut ihdr = w.to_be_bytes().to_vec();
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[depth, color_type, 0, 0, 0]);
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    out.extend(chunk(b"IHDR", &ihdr));
    for c in chunks {
        out.extend_from_slice(c);
    }
    out
}

#[test]
fn decode_png_refuses_what_torchvision_leaves_uninitialized() {
    let plte = chunk(b"PLTE", &[10, 20, 30, 40, 50, 60]);
    // packed palette indices with UNCHANGED; a palette without tRNS asked for alpha
    for (depth, mode) in [(2u8, 0i64), (4, 0), (8, 2), (8, 4)] {
        let png = png_of_zeros(3, 2, depth, 3, std::slice::from_ref(&plte));
        let err = call(
            "image::decode_png",
            vec![bytes_arg(&png), IValue::Int(mode), IValue::Bool(false)],
        )
        .expect_err("refused");
        assert!(unsupported(&err), "{err}");
    }
    // gray conversion of a color image with a gAMA chunk (libpng's gamma tables)
    let gama = chunk(b"gAMA", &45455u32.to_be_bytes());
    let png = png_of_zeros(3, 2, 8, 2, std::slice::from_ref(&gama));
    // the same image decodes in the other modes, and without the chunk
    for (png, mode) in [(png.clone(), 3), (png_of_zeros(3, 2, 8, 2, &[]), 1)] {
        call(
            "image::decode_png",
            vec![bytes_arg(&png), IValue::Int(mode), IValue::Bool(false)],
        )
        .expect("decodes");
    }
    let err = call(
        "image::decode_png",
        vec![bytes_arg(&png), IValue::Int(1), IValue::Bool(false)],
    )
    .expect_err("refused");
    assert!(unsupported(&err), "{err}");
}

#[test]
fn image_decoders_bound_their_output_size() {
    // a 16-bit RGBA PNG of 60000 x 60000 (28.8 GB), a GIF screen and a JPEG frame of
    // 65535 x 65535
    let png = png_head(60000, 60000, 16, 6, &[]);
    let mut gif = b"GIF89a".to_vec();
    gif.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0x3b]);
    let mut jpeg = vec![0xff, 0xd8, 0xff, 0xc0, 0, 17, 8, 0xff, 0xff, 0xff, 0xff, 3];
    for id in 1..=3u8 {
        jpeg.extend_from_slice(&[id, 0x11, 0]);
    }
    for (op, data) in [
        ("image::decode_png", png),
        ("image::decode_gif", gif),
        ("image::decode_jpeg", jpeg),
    ] {
        let mut args = vec![bytes_arg(&data)];
        if op != "image::decode_gif" {
            args.extend([IValue::Int(0), IValue::Bool(false)]);
        }
        let err = call(op, args).expect_err("over the limit");
        assert!(err.limit().is_some(), "{op}: {err}");
    }
    // under a 1 MB budget, a WebP of 600 x 600 RGBA is refused before decoding
    let json: Value = serde_json::from_reader(
        File::open(fixtures_dir().join("ops/image_codecs.json")).expect("json"),
    )
    .expect("json");
    let budget = Arc::new(MemoryBudget::new(1 << 20, None));
    let mut vp8l = b"RIFF\x19\x00\x00\x00WEBPVP8L\x0d\x00\x00\x00\x2f".to_vec();
    // 14-bit width-1 and height-1 (599), alpha used, version 0
    let bits: u32 = 599 | (599 << 14) | (1 << 28);
    vp8l.extend_from_slice(&bits.to_le_bytes());
    vp8l.extend_from_slice(&[0; 8]);
    let err = with_budget(budget, || {
        call("image::decode_webp", vec![bytes_arg(&vp8l), IValue::Int(0)])
    })
    .expect_err("over the budget");
    assert!(err.limit().is_some(), "{err}");
    assert!(json["cases"].as_array().is_some_and(|c| !c.is_empty()));
}

#[test]
fn image_decoders_survive_corrupted_files() {
    let path = fixtures_dir().join("ops/image_codecs.json");
    let json: Value = serde_json::from_reader(File::open(&path).expect("json")).expect("json");
    let mut arrays = Arrays::open(&path.with_extension("npz"));
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    for case in json["cases"].as_array().expect("cases") {
        if case.get("error").is_some() || case["args"].as_array().is_none_or(|a| a.is_empty()) {
            continue;
        }
        let op = case["op"].as_str().expect("op").to_string();
        let IValue::Tensor(t) = decode(&case["args"][0], &mut arrays) else {
            panic!("bytes")
        };
        let bytes = t.to_vec::<u8>().expect("bytes");
        if !files.iter().any(|(o, b)| *o == op && *b == bytes) {
            files.push((op, bytes));
        }
    }
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut outcomes = [0usize; 2];
    for (op, bytes) in &files {
        let mut variants: Vec<Vec<u8>> = Vec::new();
        for cut in [1, 7, 9, 20, bytes.len() / 2, bytes.len() - 1] {
            variants.push(bytes.get(..cut).unwrap_or(bytes).to_vec());
        }
        for _ in 0..24 {
            let mut v = bytes.clone();
            for _ in 0..1 + next() % 4 {
                let i = (next() % v.len() as u64) as usize;
                v[i] = next() as u8;
            }
            variants.push(v);
        }
        for v in variants {
            let mut args = vec![bytes_arg(&v)];
            if op != "image::decode_gif" {
                args.push(IValue::Int((next() % 5) as i64));
            }
            if matches!(
                op.as_str(),
                "image::decode_png" | "image::decode_jpeg" | "image::decode_image"
            ) {
                args.push(IValue::Bool(next() % 2 == 0));
            }
            outcomes[usize::from(call(op, args).is_ok())] += 1;
        }
    }
    // both outcomes occur: damage in pixel data decodes, damage in headers is refused
    assert!(outcomes[0] > 0 && outcomes[1] > 0, "{outcomes:?}");
}

#[test]
fn scripted_torchvision_preprocessing_runs_end_to_end() {
    // torchvision.io.decode_image in a scripted forward (prim::CallFunction into torchvision's
    // TorchScript code, then image::decode_jpeg), as PyTorch ran it
    let dir = fixtures_dir().join("image_codecs");
    let m = tsrun::Module::load(dir.join("preprocess.pt")).expect("load");
    for name in ["sample_2x2_1x2_1x2", "sample_1x2_progressive_restart"] {
        let bytes = std::fs::read(dir.join(format!("{name}.jpg"))).expect("jpeg");
        let want =
            tsrun::internals::cli::inputs::read_npy(&dir.join(format!("{name}.preprocessed.npy")))
                .expect("golden");
        let IValue::Tensor(got) = m.call(&[bytes_arg(&bytes)]).expect("forward") else {
            panic!("{name}: not a tensor")
        };
        assert_eq!(got.shape(), want.shape(), "{name}");
        assert_eq!(
            got.to_vec::<f32>().expect("f32"),
            want.to_vec::<f32>().expect("f32"),
            "{name}"
        );
    }
}
