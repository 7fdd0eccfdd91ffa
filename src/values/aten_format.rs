//! ATen's tensor formatter (`operator<<(std::ostream&, const Tensor&)` in
//! aten/src/ATen/core/Formatting.cpp), as TorchScript's `str(tensor)` / `print` give it and as
//! `Node::printAttrValue` uses it for tensor constants of 2..=10 elements (and empty ones), with
//! newlines turned into spaces. The numbers are {fmt}'s: a 0-d tensor's value and a matrix's
//! scale in the shortest text that reads back to the same double (`{}`), general-style
//! columns as `%g` at 6 digits, whatever precision the caller's stream had:
//! `prim::Constant[value= 1  2  3 [ CPULongType{3} ]]()`. And the way back, so the graph text
//! parser can rebuild such a constant. The text holds at most four decimals, so a parsed
//! tensor reprints the same text but need not hold the original values exactly.

use crate::tensor::{DType, Tensor};

/// Elements above which `printAttrValue` writes `<Tensor>` instead.
pub const MAX_TENSOR_DISPLAY_SIZE: usize = 10;

/// The line width ATen lays matrices out for.
const LINE_SIZE: usize = 80;

/// How one matrix (or vector) prints its numbers (`__printFormat`).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Style {
    /// `{:g}`: `%g` at 6 digits.
    General,
    /// `std::scientific`, 4 digits.
    Scientific,
    /// `std::fixed`, 4 digits.
    Fixed,
}

/// The text being written.
struct Stream {
    out: String,
}

/// `c10::toString(ScalarType)`: the storage class name without `Storage`.
fn scalar_type_name(d: DType) -> &'static str {
    let s = d.storage_class();
    s.strip_suffix("Storage").unwrap_or(s)
}

/// `DeprecatedTypeProperties::toString()` of a CPU tensor.
fn type_string(d: DType) -> String {
    format!("CPU{}Type", scalar_type_name(d))
}

/// The text ATen prints for `t` on one line, as a graph's tensor constant shows it, or `None`
/// when tsrun cannot reproduce it (complex tensors, whose printing differs).
pub fn format_tensor(t: &Tensor) -> Option<String> {
    aten_text(t).map(|text| text.replace('\n', " "))
}

/// The text ATen's `operator<<` prints for `t` (behind TorchScript's `str(t)`, `print(t)` and
/// `"{}".format(t)`), or `None` when tsrun cannot reproduce it (complex tensors).
pub fn aten_text(t: &Tensor) -> Option<String> {
    if t.sparse_parts().is_some() || t.nested_parts().is_some() {
        return None;
    }
    if matches!(
        t.dtype(),
        DType::Complex32 | DType::Complex64 | DType::Complex128
    ) {
        return None;
    }
    let values: Vec<f64> = t.contiguous().ok()?.to_vec::<f64>().ok()?;
    let shape = t.shape().to_vec();
    let mut s = Stream { out: String::new() };
    match shape.len() {
        0 => {
            // numel 1: printAttrValue prints it as `{v}` before reaching here
            s.out.push_str(&fmt_shortest(*values.first()?));
            s.out.push('\n');
        }
        1 => {
            if !values.is_empty() {
                let (scale, sz, style) = print_format(&values);
                if scale != 1.0 {
                    print_scale(&mut s, scale);
                }
                for v in &values {
                    let text = number(style, v / scale);
                    s.out.push_str(&format!("{text:>sz$}\n"));
                }
            }
        }
        2 => {
            if !values.is_empty() {
                print_matrix(&mut s, &values, shape[0], shape[1], 0);
            }
        }
        _ => {
            if !values.is_empty() {
                print_tensor(&mut s, &values, &shape);
            }
        }
    }
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let mut out = s.out;
    out.push_str(&format!(
        "[ {}{{{}}} ]",
        type_string(t.dtype()),
        dims.join(",")
    ));
    Some(out)
}

/// `__printFormat`: (scale, column width, style). The exponents come from the smallest and
/// largest magnitudes (a negative value can be the largest: `[0.0001, -0.5, 0.01]` prints
/// unscaled).
fn print_format(values: &[f64]) -> (f64, usize, Style) {
    let int_mode = values.iter().all(|&z| !z.is_finite() || z == z.ceil());
    let offset = values.iter().position(|z| z.is_finite());
    let (mut exp_min, mut exp_max) = (1.0f64, 1.0f64);
    if let Some(offset) = offset {
        exp_min = values[offset].abs();
        exp_max = values[offset].abs();
        for z in values[offset..]
            .iter()
            .map(|v| v.abs())
            .filter(|z| z.is_finite())
        {
            exp_min = exp_min.min(z);
            exp_max = exp_max.max(z);
        }
        exp_min = if exp_min != 0.0 {
            exp_min.log10().floor() + 1.0
        } else {
            1.0
        };
        exp_max = if exp_max != 0.0 {
            exp_max.log10().floor() + 1.0
        } else {
            1.0
        };
    }
    let mut scale = 1.0;
    let (sz, style) = if int_mode {
        if exp_max > 9.0 {
            (11, Style::Scientific)
        } else {
            ((exp_max + 1.0) as usize, Style::General)
        }
    } else if exp_max - exp_min > 4.0 {
        let sz = if exp_max.abs() > 99.0 || exp_min.abs() > 99.0 {
            12
        } else {
            11
        };
        (sz, Style::Scientific)
    } else {
        if !(0.0..=5.0).contains(&exp_max) {
            scale = 10f64.powf(exp_max - 1.0);
            (7, Style::Fixed)
        } else if exp_max == 0.0 {
            (7, Style::Fixed)
        } else {
            ((exp_max + 6.0) as usize, Style::Fixed)
        }
    };
    (scale, sz, style)
}

/// One number as the stream writes it in `style`.
fn number(style: Style, v: f64) -> String {
    if !v.is_finite() {
        // iostreams write `inf`, `-inf`, `nan`, `-nan` in every notation
        return fmt_g(v, 6);
    }
    match style {
        Style::General => fmt_g(v, 6),
        Style::Fixed => format!("{v:.4}"),
        Style::Scientific => {
            // `%.4e`: the exponent signed and at least two digits
            let text = format!("{v:.4e}");
            match text.split_once('e') {
                Some((mantissa, exp)) => {
                    let (sign, digits) = match exp.strip_prefix('-') {
                        Some(d) => ('-', d),
                        None => ('+', exp),
                    };
                    format!("{mantissa}e{sign}{digits:0>2}")
                }
                None => text,
            }
        }
    }
}

/// `printScale`: the scale in its shortest text (`1000000 *`, `1e-05 *`), then ` *` and a
/// newline.
fn print_scale(s: &mut Stream, scale: f64) {
    let text = fmt_shortest(scale);
    s.out.push_str(&format!("{text} *\n"));
}

fn print_indent(s: &mut Stream, indent: usize) {
    s.out.push_str(&" ".repeat(indent));
}

/// `__printMatrix` of a row-major `rows x cols` matrix.
fn print_matrix(s: &mut Stream, values: &[f64], rows: usize, cols: usize, indent: usize) {
    let (scale, sz, style) = print_format(values);
    // the indent goes before later rows and headers only (PyTorch prints `(1,.,.) =   1`)
    let per_line = (LINE_SIZE.saturating_sub(indent) / (sz + 1)).max(1);
    let mut first = 0;
    while first < cols {
        let last = (first + per_line).min(cols) - 1;
        if per_line < cols {
            if first != 0 {
                s.out.push('\n');
            }
            s.out
                .push_str(&format!("Columns {} to {}", first + 1, last + 1));
            print_indent(s, indent);
        }
        if scale != 1.0 {
            print_scale(s, scale);
            print_indent(s, indent);
        }
        for l in 0..rows {
            for c in first..=last {
                let v = values.get(l * cols + c).copied().unwrap_or(0.0);
                let text = number(style, v / scale);
                s.out.push_str(&format!("{text:>sz$}"));
                if c == last {
                    s.out.push('\n');
                    if l + 1 != rows {
                        print_indent(s, indent);
                        if scale != 1.0 {
                            s.out.push(' ');
                        }
                    }
                } else {
                    s.out.push(' ');
                }
            }
        }
        first = last + 1;
    }
}

/// `__printTensor`: each trailing matrix under a `(i,j,.,.) = ` header, the leading index
/// that varies fastest being the first.
fn print_tensor(s: &mut Stream, values: &[f64], shape: &[usize]) {
    let lead = shape.len() - 2;
    let (rows, cols) = (shape[lead], shape[lead + 1]);
    let mut counter = vec![0usize; lead];
    let mut first = true;
    loop {
        if !first {
            // advance the odometer, first index fastest
            let mut i = 0;
            loop {
                counter[i] += 1;
                if counter[i] < shape[i] {
                    break;
                }
                counter[i] = 0;
                i += 1;
                if i == lead {
                    return;
                }
            }
            s.out.push('\n');
        }
        first = false;
        s.out.push('(');
        let mut offset = 0;
        for (i, &c) in counter.iter().enumerate() {
            s.out.push_str(&format!("{},", c + 1));
            offset = offset * shape[i] + c;
        }
        s.out.push_str(".,.) = \n");
        let start = offset * rows * cols;
        let slice = values.get(start..start + rows * cols).unwrap_or(&[]);
        print_matrix(s, slice, rows, cols, 1);
    }
}

/// Pieces of the formatter's text.
#[derive(Debug, PartialEq)]
enum Token {
    Number(f64),
    /// `1e+06 *`: what the following numbers are multiplied by.
    Scale(f64),
    /// `Columns 7 to 10`: the (1-based, inclusive) columns the following rows hold.
    Columns(usize, usize),
    /// `(1,2,.,.) =`: the leading indices of the next matrix.
    Header,
}

/// If `text` starts with a tensor in ATen's format, the tensor and the bytes it took;
/// `None` if it does not look like one (the caller parses another kind of value), an error
/// if it does but is malformed.
pub fn parse_tensor(text: &str) -> Option<Result<(Tensor, usize), String>> {
    // The values come first, then `[ CPUFloatType{2,3} ]`; the values use no brackets.
    // Newlines were replaced by spaces, so the tensor ends on this line.
    let text = text.split('\n').next().unwrap_or("");
    let open = text.find('[')?;
    let body = &text[..open];
    if !body
        .chars()
        .all(|c| c.is_ascii_digit() || " .+-eE*(),=infaColumst".contains(c))
    {
        return None;
    }
    let rest = text[open..].strip_prefix("[ ")?;
    let brace = rest.find('{')?;
    let type_name = &rest[..brace];
    let dtype = dtype_of(type_name)?;
    let close = brace + rest[brace..].find('}')?;
    let dims_text = &rest[brace + 1..close];
    if !rest[close..].starts_with("} ]") {
        return None;
    }
    let used = open + 2 + close + 3;
    Some(build(body, dims_text, dtype).map(|t| (t, used)))
}

/// `CPUFloatType` -> Float32.
fn dtype_of(type_name: &str) -> Option<DType> {
    let name = type_name.strip_prefix("CPU")?.strip_suffix("Type")?;
    DType::ALL
        .iter()
        .copied()
        .find(|&d| scalar_type_name(d) == name)
}

fn build(body: &str, dims_text: &str, dtype: DType) -> Result<Tensor, String> {
    let shape: Vec<usize> = dims_text
        .split(',')
        .map(|d| d.trim().parse::<usize>())
        .collect::<Result<_, _>>()
        .map_err(|_| format!("malformed tensor sizes `{{{dims_text}}}`"))?;
    let numel = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|&n| n <= MAX_TENSOR_DISPLAY_SIZE)
        .ok_or_else(|| format!("tensor of sizes {{{dims_text}}} is too large to be printed"))?;
    let tokens = tokenize(body)?;
    let values = layout_values(&tokens, &shape, numel)?;
    let t = Tensor::from_vec(values, &shape).map_err(|e| e.to_string())?;
    t.to_dtype(dtype).map_err(|e| e.to_string())
}

/// Put the numbers back in row-major order: each matrix may be split into column chunks,
/// each chunk holding all its rows, each number scaled by the chunk's scale; matrices come
/// in `__printTensor`'s order (first leading index fastest).
fn layout_values(tokens: &[Token], shape: &[usize], numel: usize) -> Result<Vec<f64>, String> {
    let (rows, cols) = match shape.len() {
        0 | 1 => (1, numel),
        n => (shape[n - 2], shape[n - 1]),
    };
    let lead = &shape[..shape.len().saturating_sub(2)];
    let mut counter = vec![0usize; lead.len()];
    let mut values = vec![0.0; numel];
    let matrix = rows * cols;
    let (mut base, mut scale) = (0usize, 1.0);
    let (mut first_col, mut last_col) = (0usize, cols.saturating_sub(1));
    let mut k = 0usize; // numbers seen in the current chunk
    let mut seen = 0usize;
    let mut started = false;
    for tok in tokens {
        match *tok {
            Token::Header => {
                if started {
                    // the next leading index, first fastest
                    let mut i = 0;
                    loop {
                        let Some(c) = counter.get_mut(i) else {
                            return Err("more matrices than the tensor has".to_string());
                        };
                        *c += 1;
                        if *c < lead[i] {
                            break;
                        }
                        *c = 0;
                        i += 1;
                    }
                    let offset = counter
                        .iter()
                        .zip(lead)
                        .fold(0usize, |acc, (&c, &d)| acc * d + c);
                    base = offset * matrix;
                }
                started = true;
                scale = 1.0;
                k = 0;
                first_col = 0;
                last_col = cols.saturating_sub(1);
            }
            Token::Scale(s) => scale = s,
            Token::Columns(a, b) => {
                if a == 0 || b < a || b > cols {
                    return Err(format!("malformed column range {a} to {b}"));
                }
                first_col = a - 1;
                last_col = b - 1;
                k = 0;
            }
            Token::Number(v) => {
                let width = last_col + 1 - first_col;
                let (r, c) = (k / width, first_col + k % width);
                let idx = base + r * cols + c;
                if r >= rows.max(1) || idx >= numel {
                    return Err("more numbers than the tensor has elements".to_string());
                }
                values[idx] = v * scale;
                k += 1;
                seen += 1;
            }
        }
    }
    if seen != numel {
        return Err(format!("{seen} numbers for a tensor of {numel} elements"));
    }
    Ok(values)
}

fn tokenize(body: &str) -> Result<Vec<Token>, String> {
    let b = body.as_bytes();
    let mut i = 0;
    let mut out = Vec::new();
    let skip_ws = |i: &mut usize| {
        while *i < b.len() && b[*i] == b' ' {
            *i += 1;
        }
    };
    loop {
        skip_ws(&mut i);
        if i >= b.len() {
            return Ok(out);
        }
        let rest = &body[i..];
        if let Some(r) = rest.strip_prefix("Columns ") {
            // `Columns 1 to 6`: plain integers (a value may follow with no space)
            let (a, n1) = leading_int(r).ok_or("malformed `Columns` line")?;
            let r2 = r[n1..]
                .strip_prefix(" to ")
                .ok_or("malformed `Columns` line")?;
            let (c, n2) = leading_int(r2).ok_or("malformed `Columns` line")?;
            out.push(Token::Columns(a, c));
            i += "Columns ".len() + n1 + " to ".len() + n2;
            continue;
        }
        if rest.starts_with('(') {
            let end = rest.find(") =").ok_or("malformed matrix header")?;
            out.push(Token::Header);
            i += end + 3;
            continue;
        }
        let (v, n) = leading_number(rest).ok_or_else(|| format!("unexpected `{rest}`"))?;
        i += n;
        let after = &body[i..];
        if let Some(r) = after.strip_prefix(" *") {
            out.push(Token::Scale(v));
            i += after.len() - r.len();
        } else {
            out.push(Token::Number(v));
        }
    }
}

fn leading_int(s: &str) -> Option<(usize, usize)> {
    let n = s.bytes().take_while(u8::is_ascii_digit).count();
    Some((s[..n].parse().ok()?, n))
}

/// A number as iostreams write it (`-1.5000`, `1.0000e+10`, `7`, `inf`, `-nan`), and its
/// length. The longest prefix that parses, so a value glued to the next one splits right.
fn leading_number(s: &str) -> Option<(f64, usize)> {
    let b = s.as_bytes();
    let mut i = usize::from(matches!(b.first(), Some(b'-') | Some(b'+')));
    for word in ["inf", "nan"] {
        if s[i..].starts_with(word) {
            let v = if word == "inf" {
                f64::INFINITY
            } else {
                f64::NAN
            };
            let neg = b.first() == Some(&b'-');
            return Some((if neg { -v } else { v }, i + 3));
        }
    }
    let digits = |i: &mut usize| {
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
    };
    digits(&mut i);
    if i < b.len() && b[i] == b'.' {
        i += 1;
        digits(&mut i);
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        let mut j = i + 1;
        if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
            j += 1;
        }
        let start = j;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        if j > start {
            i = j;
        }
    }
    Some((s[..i].parse().ok()?, i))
}

/// {fmt}'s `{}` of a double: the fewest significant digits that read back to `d`, written
/// plainly (`6000000000`, `0.0001`, no `.0`) while the decimal exponent is in -4..16, else
/// as `1e+16` / `9.99999993922529e-09`; non-finite values as `%g` writes them.
pub fn fmt_shortest(d: f64) -> String {
    if !d.is_finite() || d == 0.0 {
        return fmt_g(d, 6);
    }
    // Rust's `{:e}` is the shortest round-trip form: `1.2345e-7`, `1e16`
    let sci = format!("{d:e}");
    let (mantissa, exp) = match sci.split_once('e') {
        Some((m, e)) => (m, e.parse::<i32>().unwrap_or(0)),
        None => (sci.as_str(), 0),
    };
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    if !(-4..16).contains(&exp) {
        let sign_e = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{mantissa}e{sign_e}{:02}", exp.abs());
    }
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    let n = digits.len() as i32;
    let body = if exp >= n - 1 {
        format!("{digits}{}", "0".repeat((exp - n + 1) as usize))
    } else if exp >= 0 {
        let (int, frac) = digits.split_at(exp as usize + 1);
        format!("{int}.{frac}")
    } else {
        format!("0.{}{digits}", "0".repeat((-exp - 1) as usize))
    };
    format!("{sign}{body}")
}

/// C's `%.{precision}g` (what `std::ostream << double` does at that precision).
pub fn fmt_g(d: f64, precision: usize) -> String {
    if d.is_nan() {
        return if d.is_sign_negative() { "-nan" } else { "nan" }.to_string();
    }
    if d.is_infinite() {
        return if d < 0.0 { "-inf" } else { "inf" }.to_string();
    }
    let p = precision.max(1);
    if d == 0.0 {
        return if d.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    let sci = format!("{:.*e}", p - 1, d);
    let (mantissa, exp) = match sci.split_once('e') {
        Some((m, e)) => (m.to_string(), e.parse::<i32>().unwrap_or(0)),
        None => (sci.clone(), 0),
    };
    let strip = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if exp < -4 || exp >= p as i32 {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{}{:02}", strip(&mantissa), sign, exp.abs())
    } else {
        let decimals = (p as i32 - 1 - exp).max(0) as usize;
        strip(&format!("{:.*}", decimals, d))
    }
}
