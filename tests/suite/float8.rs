//! float8 and complex32 tensors (issue 12): the float8 codecs against PyTorch on every code and
//! on the rounding boundaries between codes (fixtures/float8/codes.json), and op cases on float8
//! and complex32 tensors (fixtures/ops/float8.json), both written by fixtures/gen_float8.py.

use crate::common::{self, fixtures_dir};
use serde_json::Value;
use std::fs::File;
use tsrun::internals::tensor::float8::{
    Float8E4M3FN, Float8E4M3FNUZ, Float8E5M2, Float8E5M2FNUZ, Float8E8M0FNU,
};

fn check_format(name: &str, decode: fn(u8) -> f32, encode: fn(f32) -> u8) {
    let json: Value = serde_json::from_reader(
        File::open(fixtures_dir().join("float8/codes.json")).expect("open codes.json"),
    )
    .expect("json");
    let format = &json[name];
    let ints = |key: &str| -> Vec<u64> {
        format[key]
            .as_array()
            .unwrap_or_else(|| panic!("{name}.{key}"))
            .iter()
            .map(|v| v.as_u64().expect("int"))
            .collect()
    };
    let decoded = ints("decode");
    assert_eq!(decoded.len(), 256, "{name}: one value a code");
    for (code, &bits) in decoded.iter().enumerate() {
        let want = f32::from_bits(bits as u32);
        let got = decode(code as u8);
        assert!(
            got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
            "{name}: code {code:#04x} decodes to {got}, PyTorch {want}"
        );
    }
    let (inputs, outputs) = (ints("encode_in"), ints("encode_out"));
    assert_eq!(inputs.len(), outputs.len());
    assert!(inputs.len() > 1000, "{name}: the boundaries of every code");
    for (&bits, &want) in inputs.iter().zip(&outputs) {
        let v = f32::from_bits(bits as u32);
        let got = encode(v);
        assert_eq!(
            u64::from(got),
            want,
            "{name}: {v:e} ({bits:#010x}) encodes to {got:#04x}, PyTorch {want:#04x}"
        );
    }
}

/// Each format's (name, decode, encode).
type Codec = (&'static str, fn(u8) -> f32, fn(f32) -> u8);

const CODECS: [Codec; 5] = [
    (
        "float8_e5m2",
        |c| Float8E5M2(c).to_f32(),
        |v| Float8E5M2::from_f32(v).0,
    ),
    (
        "float8_e4m3fn",
        |c| Float8E4M3FN(c).to_f32(),
        |v| Float8E4M3FN::from_f32(v).0,
    ),
    (
        "float8_e5m2fnuz",
        |c| Float8E5M2FNUZ(c).to_f32(),
        |v| Float8E5M2FNUZ::from_f32(v).0,
    ),
    (
        "float8_e4m3fnuz",
        |c| Float8E4M3FNUZ(c).to_f32(),
        |v| Float8E4M3FNUZ::from_f32(v).0,
    ),
    (
        "float8_e8m0fnu",
        |c| Float8E8M0FNU(c).to_f32(),
        |v| Float8E8M0FNU::from_f32(v).0,
    ),
];

/// Every float8 format converts each of its 256 codes to float, and floats to codes (every
/// value, the midpoints between neighbours and the floats next to them, overflow, inf, NaN,
/// signed zeros, subnormals, random magnitudes), exactly as PyTorch does.
#[test]
fn float8_formats_match_pytorch_on_every_code_and_boundary() {
    for (name, decode, encode) in CODECS {
        check_format(name, decode, encode);
    }
}

/// Conversions, creation, copies, cat/index_select, `chalf`, `_scaled_mm` on float8 and
/// complex32 tensors, and PyTorch's errors for kernels its CPU wheel lacks for them.
#[test]
fn float8_and_complex32_ops_match_pytorch() {
    common::assert_op_cases("float8");
}
