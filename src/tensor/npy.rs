//! Reading numpy's `.npy` format into a [`Tensor`] of the array's own dtype.
//!
//! ndarray-npy reads a fixed set of element types and has no float16; numpy writes `<f2` for
//! float16 and ml_dtypes (the bfloat16 numpy users have, e.g. from JAX) writes `<V2`, so the
//! header is parsed here and the data becomes the tensor's storage as it is.

use super::{contiguous_strides, DType, Storage, Tensor, TensorError};

type NpyResult<T> = std::result::Result<T, TensorError>;

fn npy_err(msg: impl Into<String>) -> TensorError {
    TensorError::Value(msg.into())
}

/// The dtype of a numpy `descr` string (little-endian or byte-order-free only).
fn dtype_of_descr(descr: &str) -> NpyResult<DType> {
    Ok(match descr {
        "<f2" => DType::Float16,
        // ml_dtypes' bfloat16 has no numpy type code and is saved as 2-byte void
        "<V2" | "|V2" => DType::BFloat16,
        "<f4" => DType::Float32,
        "<f8" => DType::Float64,
        "|i1" | "<i1" => DType::Int8,
        "<i2" => DType::Int16,
        "<i4" => DType::Int32,
        "<i8" => DType::Int64,
        "|u1" | "<u1" => DType::UInt8,
        "<u2" => DType::UInt16,
        "<u4" => DType::UInt32,
        "<u8" => DType::UInt64,
        "|b1" => DType::Bool,
        "<c8" => DType::Complex64,
        "<c16" => DType::Complex128,
        other if other.starts_with('>') => {
            return Err(npy_err(format!(
                "big-endian arrays ({other}) are not supported; save with `arr.astype(arr.dtype.newbyteorder('<'))`"
            )))
        }
        other => return Err(npy_err(format!("unsupported npy dtype {other}"))),
    })
}

/// The value of `key` in the header dict text (`{'descr': '<f4', 'fortran_order': False, ...}`).
fn header_field<'h>(header: &'h str, key: &str) -> NpyResult<&'h str> {
    let quoted = format!("'{key}':");
    let start = header
        .find(&quoted)
        .ok_or_else(|| npy_err(format!("npy header has no '{key}'")))?
        + quoted.len();
    let rest = header[start..].trim_start();
    // a tuple value runs to its closing parenthesis, others to the next comma or brace
    let end = if rest.starts_with('(') {
        rest.find(')').map(|i| i + 1)
    } else {
        rest.find([',', '}'])
    }
    .ok_or_else(|| npy_err(format!("npy header field '{key}' is not terminated")))?;
    Ok(rest[..end].trim())
}

fn parse_shape(text: &str) -> NpyResult<Vec<usize>> {
    let inner = text
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .ok_or_else(|| npy_err(format!("npy shape {text} is not a tuple")))?;
    inner
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<usize>()
                .map_err(|_| npy_err(format!("npy shape {text} has a bad dimension {s}")))
        })
        .collect()
}

/// The header text of a `.npy` file (format versions 1 to 3) and where its data starts.
fn split_header(bytes: &[u8]) -> NpyResult<(&str, usize)> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(npy_err("not a .npy file (no \\x93NUMPY magic)"));
    }
    let (header_len, header_start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10usize),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(npy_err(format!("unsupported npy format version {v}"))),
    };
    let data_start = header_start
        .checked_add(header_len)
        .filter(|&end| end <= bytes.len())
        .ok_or_else(|| npy_err("npy header runs past the end of the file"))?;
    let header = std::str::from_utf8(&bytes[header_start..data_start])
        .map_err(|_| npy_err("npy header is not text"))?;
    Ok((header, data_start))
}

/// Whether the bytes of a `.npy` file hold a numpy unicode string array (`<U{n}`).
pub fn is_string_npy(bytes: &[u8]) -> bool {
    split_header(bytes)
        .and_then(|(header, _)| header_field(header, "descr"))
        .is_ok_and(|d| string_width(d.trim_matches(['\'', '"'])).is_some())
}

/// The code units per element of a little-endian or byte-order-free unicode `descr` (`<U5`).
fn string_width(descr: &str) -> Option<usize> {
    descr
        .strip_prefix("<U")
        .or_else(|| descr.strip_prefix("|U"))
        .and_then(|n| n.parse().ok())
}

/// The shape and elements (row-major) of a numpy unicode string array (`<U{n}`: n UTF-32LE
/// code units per element, NUL-padded, as `np.array("text")` and `np.savez` write strings).
pub fn strings_from_npy(bytes: &[u8]) -> NpyResult<(Vec<usize>, Vec<String>)> {
    let (header, data_start) = split_header(bytes)?;
    let descr = header_field(header, "descr")?.trim_matches(['\'', '"']);
    let width = string_width(descr)
        .ok_or_else(|| npy_err(format!("npy dtype {descr} is not a unicode string array")))?;
    if header_field(header, "fortran_order")? == "True" {
        return Err(npy_err("column-major string arrays are not supported"));
    }
    let shape = parse_shape(header_field(header, "shape")?)?;
    let numel = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| npy_err(format!("npy shape {shape:?} overflows")))?;
    let nbytes = numel
        .checked_mul(width)
        .and_then(|n| n.checked_mul(4))
        .ok_or_else(|| npy_err(format!("npy shape {shape:?} overflows")))?;
    let data = bytes
        .get(data_start..data_start + nbytes)
        .ok_or_else(|| npy_err(format!("npy data is truncated: {shape:?} {descr}")))?;
    let mut out = Vec::with_capacity(numel);
    for element in data.chunks_exact(4 * width.max(1)).take(numel) {
        let mut s = String::with_capacity(width);
        for unit in element.chunks_exact(4) {
            let code = u32::from_le_bytes([unit[0], unit[1], unit[2], unit[3]]);
            // numpy pads with NULs and strips them on reading
            if code == 0 {
                break;
            }
            s.push(char::from_u32(code).ok_or_else(|| {
                npy_err(format!("npy string holds an invalid code point {code:#x}"))
            })?);
        }
        out.push(s);
    }
    // `<U0` elements are empty strings with no bytes
    out.resize(numel, String::new());
    Ok((shape, out))
}

/// `.npy` bytes of a 0-d numpy unicode array (`<U{n}`: n UTF-32LE code units, n >= 1 as numpy
/// writes `np.array("")`), format version 1.0 with the header padded to 64 bytes.
pub fn string_to_npy(s: &str) -> Vec<u8> {
    let n = s.chars().count().max(1);
    let mut header =
        format!("{{'descr': '<U{n}', 'fortran_order': False, 'shape': (), }}").into_bytes();
    // magic (6) + version (2) + length (2) + header + '\n' is a multiple of 64
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(b' ');
    }
    header.push(b'\n');
    let mut out = Vec::with_capacity(10 + header.len() + 4 * n);
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    // the header is under 100 bytes plus the digits of n: it fits the 16-bit length
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(&header);
    let mut written = 0;
    for c in s.chars() {
        out.extend_from_slice(&(c as u32).to_le_bytes());
        written += 1;
    }
    for _ in written..n {
        out.extend_from_slice(&0u32.to_le_bytes());
    }
    out
}

/// A tensor from the bytes of a `.npy` file (format versions 1 to 3).
pub fn tensor_from_npy(bytes: &[u8]) -> NpyResult<Tensor> {
    let (header, data_start) = split_header(bytes)?;
    let descr = header_field(header, "descr")?.trim_matches(['\'', '"']);
    if string_width(descr).is_some() {
        return Err(npy_err(format!(
            "the array holds strings ({descr}), not numbers"
        )));
    }
    let dtype = dtype_of_descr(descr)?;
    let fortran = match header_field(header, "fortran_order")? {
        "True" => true,
        "False" => false,
        other => return Err(npy_err(format!("npy fortran_order is {other}"))),
    };
    let shape = parse_shape(header_field(header, "shape")?)?;
    let numel = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| npy_err(format!("npy shape {shape:?} overflows")))?;
    let nbytes = numel
        .checked_mul(dtype.size())
        .ok_or_else(|| npy_err(format!("npy shape {shape:?} overflows")))?;
    let data = bytes.get(data_start..data_start + nbytes).ok_or_else(|| {
        npy_err(format!(
            "npy data is truncated: {shape:?} {descr} needs {nbytes} bytes, the file has {}",
            bytes.len() - data_start
        ))
    })?;
    let storage = Storage::from_bytes(data)?;
    let strides = if fortran {
        // column-major: the first dimension varies fastest
        let reversed: Vec<usize> = shape.iter().rev().copied().collect();
        let mut s: Vec<isize> = contiguous_strides(&reversed).to_vec();
        s.reverse();
        s
    } else {
        contiguous_strides(&shape).to_vec()
    };
    let t = Tensor::from_parts(storage, 0, &shape, &strides, dtype)?;
    if dtype == DType::Bool {
        // numpy bools are bytes 0/1; any other byte would break `bool` reads later
        if data.iter().any(|&b| b > 1) {
            return Err(npy_err("npy bool array holds bytes other than 0 and 1"));
        }
    }
    Ok(t)
}

/// The numpy `descr` of a dtype that `.npy` can hold natively (bfloat16 has none).
fn descr_of_dtype(dtype: DType) -> NpyResult<&'static str> {
    Ok(match dtype {
        DType::Float16 => "<f2",
        DType::Float32 => "<f4",
        DType::Float64 => "<f8",
        DType::Int8 => "|i1",
        DType::Int16 => "<i2",
        DType::Int32 => "<i4",
        DType::Int64 => "<i8",
        DType::UInt8 => "|u1",
        DType::UInt16 => "<u2",
        DType::UInt32 => "<u4",
        DType::UInt64 => "<u8",
        DType::Bool => "|b1",
        DType::Complex64 => "<c8",
        DType::Complex128 => "<c16",
        other => {
            return Err(TensorError::UnsupportedDType {
                what: "writing .npy".into(),
                dtype: other,
            })
        }
    })
}

/// The `.npy` bytes (format 1.0, C order, header padded to 64 bytes as numpy pads it) of a
/// tensor of a dtype numpy has.
pub fn tensor_to_npy(t: &Tensor) -> crate::Result<Vec<u8>> {
    let descr = descr_of_dtype(t.dtype())?;
    let shape = match t.shape() {
        [] => "()".to_string(),
        [d] => format!("({d},)"),
        dims => format!(
            "({})",
            dims.iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header =
        format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}").into_bytes();
    // magic (6) + version (2) + length (2) + header + '\n' is a multiple of 64
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(b' ');
    }
    header.push(b'\n');
    let header_len = u16::try_from(header.len())
        .map_err(|_| npy_err(format!("npy header for shape {shape} is too long")))?;
    let data = t.to_contiguous_bytes()?;
    let mut out = Vec::with_capacity(10 + header.len() + data.len());
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&header_len.to_le_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(&data);
    Ok(out)
}

/// Read a `.npy` file as a tensor of its own dtype; errors name the path.
pub fn read_npy_file(path: &std::path::Path) -> crate::Result<Tensor> {
    let bytes = std::fs::read(path).map_err(|e| {
        crate::Error::Io(std::io::Error::new(
            e.kind(),
            format!("{}: {e}", path.display()),
        ))
    })?;
    tensor_from_npy(&bytes).map_err(|e| crate::Error::Module(format!("{}: {e}", path.display())))
}
