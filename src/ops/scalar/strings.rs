//! Strings: the `str` methods TorchScript supports, formatting and `str(v)`.

use super::*;
use crate::values::format::{fmt_e, fmt_nonfinite};

/// `(self[start:end], substr)` for the `str` methods taking `substr, start=0, end=-1`.
pub(super) fn str_range(a: &Args) -> crate::Result<(String, String)> {
    let s = a.str(0)?;
    let sub = a.str(1)?.to_string();
    let chars: Vec<char> = s.chars().collect();
    let n = chars.len() as i64;
    let start = if a.len() > 2 { a.int(2)? } else { 0 };
    let end = if a.len() > 3 { a.int(3)? } else { -1 };
    let norm = |x: i64| (if x < 0 { x + n } else { x }).clamp(0, n) as usize;
    let (b, e) = (norm(start), if end == -1 { n as usize } else { norm(end) });
    let text: String = chars.get(b..e.max(b)).unwrap_or(&[]).iter().collect();
    Ok((text, sub))
}
pub(super) fn str_start(a: &Args) -> crate::Result<usize> {
    let s = a.str(0)?;
    let n = s.chars().count() as i64;
    let start = if a.len() > 2 { a.int(2)? } else { 0 };
    Ok((if start < 0 { start + n } else { start }).clamp(0, n) as usize)
}
pub(super) fn startswith(a: &mut Args) -> R {
    let (s, sub) = str_range(a)?;
    Ok(IValue::Bool(s.starts_with(&sub)))
}
pub(super) fn endswith(a: &mut Args) -> R {
    let (s, sub) = str_range(a)?;
    Ok(IValue::Bool(s.ends_with(&sub)))
}
pub(super) fn char_index(s: &str, byte: usize) -> i64 {
    s.get(..byte).map(|p| p.chars().count() as i64).unwrap_or(0)
}
pub(super) fn find(a: &mut Args) -> R {
    let (s, sub) = str_range(a)?;
    let off = str_start(a)? as i64;
    Ok(IValue::Int(
        s.find(&sub).map(|b| char_index(&s, b) + off).unwrap_or(-1),
    ))
}
pub(super) fn rfind(a: &mut Args) -> R {
    let (s, sub) = str_range(a)?;
    let off = str_start(a)? as i64;
    Ok(IValue::Int(
        s.rfind(&sub).map(|b| char_index(&s, b) + off).unwrap_or(-1),
    ))
}
pub(super) fn str_index(a: &mut Args) -> R {
    match find(a)? {
        IValue::Int(-1) => Err(script_error("ValueError: substring not found")),
        v => Ok(v),
    }
}
pub(super) fn rindex(a: &mut Args) -> R {
    match rfind(a)? {
        IValue::Int(-1) => Err(script_error("ValueError: substring not found")),
        v => Ok(v),
    }
}
pub(super) fn join(a: &mut Args) -> R {
    let sep = a.str(0)?;
    let l = a.list(1)?;
    let parts: Vec<String> = l.items().iter().map(python_str).collect();
    Ok(IValue::str(parts.join(&sep)))
}
pub(super) fn str_list(items: Vec<String>) -> IValue {
    IValue::List(List::new(
        Type::Str,
        items.into_iter().map(IValue::str).collect(),
    ))
}
pub(super) fn split(a: &mut Args) -> R {
    let s = a.str(0)?;
    let sep = a.opt_str(1)?;
    let max = if a.len() > 2 { a.int(2)? } else { -1 };
    let parts: Vec<String> = match sep {
        // PyTorch's `splitNoneSeparator`: runs of ASCII whitespace separate the words and
        // `max` is ignored (`"a b c".split(None, 1)` is three words, unlike Python)
        None => s
            .split([' ', '\t', '\n', '\r', '\x0b', '\x0c'])
            .filter(|w| !w.is_empty())
            .map(str::to_string)
            .collect(),
        Some(sep) if sep.is_empty() => return Err(script_error("ValueError: empty separator")),
        Some(sep) => {
            if max < 0 {
                s.split(&*sep).map(str::to_string).collect()
            } else {
                s.splitn(max as usize + 1, &*sep)
                    .map(str::to_string)
                    .collect()
            }
        }
    };
    Ok(str_list(parts))
}
pub(super) fn rsplit(a: &mut Args) -> R {
    let s = a.str(0)?;
    let sep = a.str(1)?;
    let max = if a.len() > 2 { a.int(2)? } else { -1 };
    let mut parts: Vec<String> = if max < 0 {
        s.rsplit(&*sep).map(str::to_string).collect()
    } else {
        s.rsplitn(max as usize + 1, &*sep)
            .map(str::to_string)
            .collect()
    };
    parts.reverse();
    Ok(str_list(parts))
}
pub(super) fn strip_chars(a: &Args) -> crate::Result<Vec<char>> {
    Ok(if a.len() > 1 {
        a.str(1)?.chars().collect()
    } else {
        vec![' ', '\n', '\t', '\x0c', '\x0b']
    })
}
pub(super) fn strip(a: &mut Args) -> R {
    let cs = strip_chars(a)?;
    Ok(IValue::str(a.str(0)?.trim_matches(|c| cs.contains(&c))))
}
pub(super) fn lstrip(a: &mut Args) -> R {
    let cs = strip_chars(a)?;
    Ok(IValue::str(
        a.str(0)?.trim_start_matches(|c| cs.contains(&c)),
    ))
}
pub(super) fn rstrip(a: &mut Args) -> R {
    let cs = strip_chars(a)?;
    Ok(IValue::str(a.str(0)?.trim_end_matches(|c| cs.contains(&c))))
}
pub(super) fn lower(a: &mut Args) -> R {
    Ok(IValue::str(a.str(0)?.to_lowercase()))
}
pub(super) fn upper(a: &mut Args) -> R {
    Ok(IValue::str(a.str(0)?.to_uppercase()))
}
pub(super) fn swapcase(a: &mut Args) -> R {
    Ok(IValue::str(
        a.str(0)?
            .chars()
            .map(|c| {
                if c.is_uppercase() {
                    c.to_lowercase().collect::<String>()
                } else {
                    c.to_uppercase().collect()
                }
            })
            .collect::<String>(),
    ))
}
pub(super) fn capitalize(a: &mut Args) -> R {
    let s = a.str(0)?;
    let mut cs = s.chars();
    Ok(IValue::str(match cs.next() {
        Some(c) => c.to_uppercase().collect::<String>() + &cs.as_str().to_lowercase(),
        None => String::new(),
    }))
}
pub(super) fn title(a: &mut Args) -> R {
    let mut out = String::new();
    let mut prev_cased = false;
    for c in a.str(0)?.chars() {
        if c.is_alphabetic() {
            if prev_cased {
                out.extend(c.to_lowercase());
            } else {
                out.extend(c.to_uppercase());
            }
            prev_cased = true;
        } else {
            out.push(c);
            prev_cased = false;
        }
    }
    Ok(IValue::str(out))
}
pub(super) fn replace(a: &mut Args) -> R {
    let s = a.str(0)?;
    let (old, new) = (a.str(1)?, a.str(2)?);
    let max = if a.len() > 3 { a.int(3)? } else { -1 };
    Ok(IValue::str(if max < 0 {
        s.replace(&*old, &new)
    } else {
        s.replacen(&*old, &new, max as usize)
    }))
}
pub(super) fn char_pred(a: &Args, f: fn(char) -> bool) -> R {
    let s = a.str(0)?;
    Ok(IValue::Bool(!s.is_empty() && s.chars().all(f)))
}
pub(super) fn isdigit(a: &mut Args) -> R {
    char_pred(a, |c| c.is_ascii_digit())
}
pub(super) fn isalpha(a: &mut Args) -> R {
    char_pred(a, char::is_alphabetic)
}
pub(super) fn isalnum(a: &mut Args) -> R {
    char_pred(a, char::is_alphanumeric)
}
pub(super) fn isspace(a: &mut Args) -> R {
    char_pred(a, char::is_whitespace)
}
pub(super) fn islower(a: &mut Args) -> R {
    let s = a.str(0)?;
    Ok(IValue::Bool(
        s.chars().any(char::is_lowercase) && !s.chars().any(char::is_uppercase),
    ))
}
pub(super) fn isupper(a: &mut Args) -> R {
    let s = a.str(0)?;
    Ok(IValue::Bool(
        s.chars().any(char::is_uppercase) && !s.chars().any(char::is_lowercase),
    ))
}
/// Longest string a padding method builds (a hostile width must not exhaust memory).
pub(super) const MAX_PADDED_LEN: usize = 1 << 28;

/// `isidentifier`: TorchScript's Python 2 rule (non-empty, no leading digit, ASCII letters and
/// digits only: `_` does not count).
pub(super) fn isidentifier(a: &mut Args) -> R {
    let s = a.str(0)?;
    let b = s.as_bytes();
    Ok(IValue::Bool(
        !b.is_empty() && !b[0].is_ascii_digit() && b.iter().all(u8::is_ascii_alphanumeric),
    ))
}
/// `isprintable`: every byte printable ASCII (C's `isprint`); true for "".
pub(super) fn isprintable(a: &mut Args) -> R {
    let s = a.str(0)?;
    Ok(IValue::Bool(s.bytes().all(|c| (0x20..0x7f).contains(&c))))
}
/// `istitle` as TorchScript's byte loop: an uppercase (or caseless) byte after a non-letter, a
/// lowercase one after a letter, and at least one letter starting a word.
pub(super) fn istitle(a: &mut Args) -> R {
    let s = a.str(0)?;
    let mut result = false;
    let mut prev_alpha = false;
    for c in s.bytes() {
        if prev_alpha {
            if c != c.to_ascii_lowercase() {
                result = false;
                break;
            }
        } else {
            if c != c.to_ascii_uppercase() {
                result = false;
                break;
            }
            if c.is_ascii_alphabetic() {
                result = true;
            }
        }
        prev_alpha = c.is_ascii_alphabetic();
    }
    Ok(IValue::Bool(result))
}
fn str_triple(a: &str, b: &str, c: &str) -> R {
    Ok(IValue::Tuple(Tuple::new(vec![
        IValue::str(a.to_string()),
        IValue::str(b.to_string()),
        IValue::str(c.to_string()),
    ])))
}
/// `partition(sep)`: around the first `sep`; (s, "", "") without one.
pub(super) fn partition(a: &mut Args) -> R {
    let (s, sep) = (a.str(0)?, a.str(1)?);
    match s.find(&*sep) {
        Some(i) => str_triple(&s[..i], &sep, &s[i + sep.len()..]),
        None => str_triple(&s, "", ""),
    }
}
/// `rpartition(sep)`: around the last `sep` (TorchScript steps one byte past each match, so
/// overlapping matches count); ("", "", s) without one.
pub(super) fn rpartition(a: &mut Args) -> R {
    let (s, sep) = (a.str(0)?, a.str(1)?);
    let Some(mut pos) = s.find(&*sep) else {
        return str_triple("", "", &s);
    };
    while let Some(next) = s
        .get(pos + 1..)
        .and_then(|rest| rest.find(&*sep))
        .map(|j| pos + 1 + j)
    {
        pos = next;
    }
    str_triple(&s[..pos], &sep, &s[pos + sep.len()..])
}
/// `expandtabs(tabsize)`: each tab padded with spaces to the next multiple of `tabsize`
/// (counted in characters from the start of the string); a tab vanishes for `tabsize <= 0`.
pub(super) fn expandtabs(a: &mut Args) -> R {
    let s = a.str(0)?;
    let tab = a.int(1)?;
    if tab > MAX_PADDED_LEN as i64 {
        return Err(err("expandtabs tabsize is too large"));
    }
    let mut out = String::with_capacity(s.len());
    let mut index = 0i64;
    for c in s.chars() {
        if c != '\t' {
            out.push(c);
            index += 1;
        } else if tab > 0 {
            loop {
                out.push(' ');
                index += 1;
                if index % tab == 0 {
                    break;
                }
            }
        }
    }
    Ok(IValue::str(out))
}
pub(super) fn zfill(a: &mut Args) -> R {
    let s = a.str(0)?;
    let width = a.int(1)?.max(0) as usize;
    if width > MAX_PADDED_LEN {
        return Err(err("zfill width is too large"));
    }
    let n = s.chars().count();
    if n >= width {
        return Ok(IValue::String(s));
    }
    // unlike CPython, TorchScript pads in front of a sign too
    Ok(IValue::str(format!("{}{s}", "0".repeat(width - n))))
}
pub(super) fn justify(a: &Args, left: f64) -> R {
    let s = a.str(0)?;
    let width = a.int(1)?.max(0) as usize;
    if width > MAX_PADDED_LEN {
        return Err(err("padding width is too large"));
    }
    let fill = if a.len() > 2 {
        a.str(2)?.chars().next().unwrap_or(' ')
    } else {
        ' '
    };
    let n = s.chars().count();
    if n >= width {
        return Ok(IValue::String(s));
    }
    let total = width - n;
    // center puts the extra pad on the right unless the width is odd (CPython's rule)
    let l = if left == 0.5 {
        total / 2 + (total & width & 1)
    } else {
        (total as f64 * left) as usize
    };
    let r = total - l;
    Ok(IValue::str(format!(
        "{}{s}{}",
        fill.to_string().repeat(l),
        fill.to_string().repeat(r)
    )))
}
pub(super) fn ljust(a: &mut Args) -> R {
    justify(a, 0.0)
}
pub(super) fn rjust(a: &mut Args) -> R {
    justify(a, 1.0)
}
pub(super) fn center(a: &mut Args) -> R {
    justify(a, 0.5)
}
pub(super) fn ord(a: &mut Args) -> R {
    let s = a.str(0)?;
    let mut cs = s.chars();
    match (cs.next(), cs.next()) {
        (Some(c), None) => Ok(IValue::Int(c as i64)),
        _ => Err(err("ord() expected a character")),
    }
}
pub(super) fn chr(a: &mut Args) -> R {
    let i = a.int(0)?;
    u32::try_from(i)
        .ok()
        .and_then(char::from_u32)
        .map(|c| IValue::str(c.to_string()))
        .ok_or_else(|| script_error(format!("chr() arg not in range(0x110000), found {i}")))
}
pub(super) fn splitlines(a: &mut Args) -> R {
    let s = a.str(0)?;
    let keep = if a.len() > 1 { a.bool(1)? } else { false };
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in s.chars() {
        if c == '\n' || c == '\r' {
            if keep {
                cur.push(c);
            }
            out.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    Ok(str_list(out))
}
pub(super) fn to_str(a: &mut Args) -> R {
    Ok(IValue::str(python_str(a.get(0)?)))
}
pub(super) fn format(a: &mut Args) -> R {
    let fmt = a.str(0)?;
    let mut out = String::new();
    let mut next = 1;
    let mut rest = &*fmt;
    while let Some(p) = rest.find("{}") {
        out.push_str(&rest[..p]);
        match a.values.get(next) {
            Some(v) => out.push_str(&python_str(v)),
            None => return Err(err("format(): too few arguments for the format string")),
        }
        next += 1;
        rest = &rest[p + 2..];
    }
    out.push_str(rest);
    Ok(IValue::str(out))
}

/// One `%<key>` of `percentFormat` (TorchScript's `addFormattedArg`): numbers print as float32
/// for `%e` / `%f`, `%d` truncates floats to a C int.
fn percent_arg(key: char, v: &IValue, out: &mut String) -> crate::Result<()> {
    let number = |v: &IValue| -> crate::Result<f64> {
        match v {
            IValue::Int(i) => Ok(*i as f64),
            IValue::Double(d) => Ok(*d),
            other => Err(err(format!(
                "%{key} requires a number for formatting, but got {}",
                other.kind_name()
            ))),
        }
    };
    match key {
        'd' | 'i' => match v {
            IValue::Int(i) => out.push_str(&i.to_string()),
            other => out.push_str(&(number(other)? as i32).to_string()),
        },
        // C++ `std::scientific`: 6 digits, at least two exponent digits
        'e' | 'E' => {
            let s = fmt_e(f64::from(number(v)? as f32), 6);
            out.push_str(&if key == 'E' { s.to_uppercase() } else { s });
        }
        'f' | 'F' => {
            let x = number(v)? as f32;
            if x.is_finite() {
                out.push_str(&format!("{:.6}", f64::from(x)));
            } else {
                out.push_str(&fmt_nonfinite(f64::from(x)));
            }
        }
        'c' => match v {
            IValue::Int(i) => out.push(char::from(*i as u8)),
            IValue::String(s) if s.len() == 1 => out.push_str(s),
            other => {
                return Err(err(format!(
                    "%c requires an int or char for formatting, but got {}",
                    other.kind_name()
                )))
            }
        },
        's' => match v {
            IValue::String(s) => out.push_str(s),
            other => out.push_str(&python_str(other)),
        },
        other => {
            return Err(err(format!(
                "The specifier %{other} is not supported in TorchScript format strings"
            )))
        }
    }
    Ok(())
}
/// `percentFormat(fmt, args)`: Python's `fmt % args` (one value or a tuple of them) with the
/// specifiers TorchScript supports (`%d %i %e %E %f %F %c %s %%`, no flags or widths).
pub(super) fn percent_format(a: &mut Args) -> R {
    let fmt = a.str(0)?;
    let arg = a.get(1)?.clone();
    let args: Vec<IValue> = match &arg {
        IValue::Tuple(t) => t.items().to_vec(),
        v => vec![v.clone()],
    };
    let mut out = String::new();
    let mut used = 0;
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let key = chars
            .next()
            .ok_or_else(|| err("Incomplete format specifier"))?;
        if key == '%' {
            out.push('%');
            continue;
        }
        let v = args
            .get(used)
            .ok_or_else(|| err("Too few arguments for format string"))?;
        percent_arg(key, v, &mut out)?;
        used += 1;
    }
    if used != args.len() {
        return Err(err("Too many arguments for format string"));
    }
    Ok(IValue::str(out))
}

/// String methods and builtins.
pub(super) fn register(r: &mut Registry) {
    r.add("aten::str", to_str);
    r.add("aten::format", format);
    r.add("aten::percentFormat", percent_format);
    // `_print(s)`: the string and a newline on stdout, as ATen's `_print`
    r.add("aten::_print", |a| {
        println!("{}", a.str(0)?);
        Ok(IValue::None)
    });
    r.add("aten::join", join);
    r.add("aten::split.str", split);
    r.add("aten::rsplit", rsplit);
    r.add("aten::strip", strip);
    r.add("aten::lstrip", lstrip);
    r.add("aten::rstrip", rstrip);
    r.add("aten::lower", lower);
    r.add("aten::upper", upper);
    r.add("aten::swapcase", swapcase);
    r.add("aten::capitalize", capitalize);
    r.add("aten::title", title);
    r.add("aten::replace", replace);
    r.add("aten::startswith", startswith);
    r.add("aten::endswith", endswith);
    r.add("aten::find", find);
    r.add("aten::rfind", rfind);
    r.add("aten::rindex", rindex);
    r.add("aten::isdigit", isdigit);
    r.add("aten::isdecimal", isdigit);
    r.add("aten::isnumeric", isdigit);
    r.add("aten::isalpha", isalpha);
    r.add("aten::isalnum", isalnum);
    r.add("aten::isspace", isspace);
    r.add("aten::islower", islower);
    r.add("aten::isupper", isupper);
    r.add("aten::zfill", zfill);
    r.add("aten::isidentifier", isidentifier);
    r.add("aten::isprintable", isprintable);
    r.add("aten::istitle", istitle);
    r.add("aten::partition", partition);
    r.add("aten::rpartition", rpartition);
    r.add("aten::expandtabs", expandtabs);
    r.add("aten::ljust", ljust);
    r.add("aten::rjust", rjust);
    r.add("aten::center", center);
    r.add("aten::ord", ord);
    r.add("aten::chr", chr);
    r.add("aten::bin", bin);
    r.add("aten::oct", oct);
    r.add("aten::hex", hex);
    r.add("aten::splitlines", splitlines);
    r.add("aten::hash.generic", hash);
}
