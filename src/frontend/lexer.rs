//! TorchScript tokens (logos) plus the layout pass that turns line starts into
//! `Newline` / `Indent` / `Dedent`, as Python's tokenizer does.

use logos::Logos;

/// Why a piece of text is not a token.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum LexErrorKind {
    #[default]
    UnexpectedChar,
    UnterminatedString,
    BadEscape,
    IntTooLarge,
    BadNumber,
    InconsistentDedent,
    UnbalancedBracket,
    /// A construct the grammar accepts but TorchScript does not (reported by parser actions).
    Invalid(String),
}

impl std::fmt::Display for LexErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LexErrorKind::UnexpectedChar => "unexpected character",
            LexErrorKind::UnterminatedString => "unterminated string literal",
            LexErrorKind::BadEscape => "invalid escape sequence in string literal",
            LexErrorKind::IntTooLarge => "integer literal too large",
            LexErrorKind::BadNumber => "malformed number",
            LexErrorKind::InconsistentDedent => {
                "unindent does not match any outer indentation level"
            }
            LexErrorKind::UnbalancedBracket => "unbalanced closing bracket",
            LexErrorKind::Invalid(message) => message,
        })
    }
}

/// A lexing error at a byte range.
#[derive(Clone, Debug, PartialEq)]
pub struct LexError {
    pub kind: LexErrorKind,
    pub start: usize,
    pub end: usize,
}

#[derive(Logos, Clone, Debug, PartialEq)]
#[logos(error = LexErrorKind)]
#[logos(skip r"[ \t\f]+")]
#[logos(skip r"#[^\n]*")]
#[logos(skip r"\\\r?\n")]
pub enum Tok {
    /// A line break plus the indentation width of the next line (only from the raw lexer).
    #[regex(r"\r?\n[ \t]*", indent_width)]
    RawNewline(usize),
    Newline,
    Indent,
    Dedent,

    #[regex(r"[A-Za-z_][A-Za-z0-9_]*", |lex| lex.slice().to_string())]
    Ident(String),
    /// Integer literal; `u64` so that `-9223372036854775808` can be folded by the parser.
    #[regex(r"[0-9]+", |lex| lex.slice().parse::<u64>().map_err(|_| LexErrorKind::IntTooLarge))]
    #[regex(r"0[xX][0-9a-fA-F]+", |lex| radix_int(lex.slice(), 16))]
    #[regex(r"0[oO][0-7]+", |lex| radix_int(lex.slice(), 8))]
    #[regex(r"0[bB][01]+", |lex| radix_int(lex.slice(), 2))]
    Int(u64),
    #[regex(r"[0-9]+\.[0-9]*([eE][+-]?[0-9]+)?", parse_float)]
    #[regex(r"\.[0-9]+([eE][+-]?[0-9]+)?", parse_float)]
    #[regex(r"[0-9]+[eE][+-]?[0-9]+", parse_float)]
    // PyTorch prints non-finite doubles as bare `inf` / `nan` (both reserved names in its printer).
    #[token("inf", |_| f64::INFINITY)]
    #[token("nan", |_| f64::NAN)]
    Float(f64),
    #[regex(r"([0-9]+\.[0-9]*([eE][+-]?[0-9]+)?|\.[0-9]+([eE][+-]?[0-9]+)?|[0-9]+([eE][+-]?[0-9]+)?)[jJ]", parse_imag)]
    #[token("infj", |_| f64::INFINITY)]
    #[token("nanj", |_| f64::NAN)]
    Imag(f64),
    #[token("\"", |lex| lex_string(lex, b'"'))]
    #[token("'", |lex| lex_string(lex, b'\''))]
    #[regex(r#"[rR]""#, |lex| lex_raw_string(lex, b'"'))]
    #[regex(r#"[rR]'"#, |lex| lex_raw_string(lex, b'\''))]
    Str(String),

    #[token("def")]
    Def,
    #[token("class")]
    Class,
    #[token("if")]
    If,
    #[token("elif")]
    Elif,
    #[token("else")]
    Else,
    #[token("for")]
    For,
    #[token("while")]
    While,
    #[token("in")]
    In,
    #[token("not")]
    Not,
    #[token("and")]
    And,
    #[token("or")]
    Or,
    #[token("is")]
    Is,
    #[token("return")]
    Return,
    #[token("raise")]
    Raise,
    #[token("from")]
    From,
    #[token("assert")]
    Assert,
    #[token("pass")]
    Pass,
    #[token("break")]
    Break,
    #[token("continue")]
    Continue,
    #[token("del")]
    Del,
    #[token("global")]
    Global,
    #[token("nonlocal")]
    Nonlocal,
    #[token("with")]
    With,
    #[token("as")]
    As,
    #[token("import")]
    Import,
    #[token("lambda")]
    Lambda,
    #[token("True")]
    True,
    #[token("False")]
    False,
    #[token("None")]
    None,

    #[token("(")]
    LParen,
    #[token(")")]
    RParen,
    #[token("[")]
    LBracket,
    #[token("]")]
    RBracket,
    #[token("{")]
    LBrace,
    #[token("}")]
    RBrace,
    #[token(",")]
    Comma,
    #[token(":")]
    Colon,
    #[token(";")]
    Semi,
    #[token(".")]
    Dot,
    #[token("...")]
    Ellipsis,
    #[token("->")]
    Arrow,
    #[token("@")]
    At,
    #[token("=")]
    Assign,

    #[token("+")]
    Plus,
    #[token("-")]
    Minus,
    #[token("*")]
    Star,
    #[token("/")]
    Slash,
    #[token("//")]
    DoubleSlash,
    #[token("%")]
    Percent,
    #[token("**")]
    DoubleStar,
    #[token("<<")]
    LShift,
    #[token(">>")]
    RShift,
    #[token("&")]
    Amp,
    #[token("|")]
    Pipe,
    #[token("^")]
    Caret,
    #[token("~")]
    Tilde,

    #[token("==")]
    EqEq,
    #[token("!=")]
    NotEq,
    #[token("<")]
    Lt,
    #[token("<=")]
    Le,
    #[token(">")]
    Gt,
    #[token(">=")]
    Ge,

    #[token("+=")]
    PlusEq,
    #[token("-=")]
    MinusEq,
    #[token("*=")]
    StarEq,
    #[token("/=")]
    SlashEq,
    #[token("//=")]
    DoubleSlashEq,
    #[token("%=")]
    PercentEq,
    #[token("**=")]
    DoubleStarEq,
    #[token("@=")]
    AtEq,
    #[token("&=")]
    AmpEq,
    #[token("|=")]
    PipeEq,
    #[token("^=")]
    CaretEq,
    #[token("<<=")]
    LShiftEq,
    #[token(">>=")]
    RShiftEq,
}

impl std::fmt::Display for Tok {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Tok::RawNewline(_) | Tok::Newline => f.write_str("newline"),
            Tok::Indent => f.write_str("indent"),
            Tok::Dedent => f.write_str("dedent"),
            Tok::Ident(s) => write!(f, "identifier `{s}`"),
            Tok::Int(i) => write!(f, "integer `{i}`"),
            Tok::Float(x) => write!(f, "float `{x}`"),
            Tok::Imag(x) => write!(f, "imaginary `{x}j`"),
            Tok::Str(s) => write!(f, "string {s:?}"),
            other => write!(f, "`{}`", other.spelling()),
        }
    }
}

impl Tok {
    /// Source spelling of keyword and punctuation tokens.
    pub fn spelling(&self) -> &'static str {
        match self {
            Tok::Def => "def",
            Tok::Class => "class",
            Tok::If => "if",
            Tok::Elif => "elif",
            Tok::Else => "else",
            Tok::For => "for",
            Tok::While => "while",
            Tok::In => "in",
            Tok::Not => "not",
            Tok::And => "and",
            Tok::Or => "or",
            Tok::Is => "is",
            Tok::Return => "return",
            Tok::Raise => "raise",
            Tok::From => "from",
            Tok::Assert => "assert",
            Tok::Pass => "pass",
            Tok::Break => "break",
            Tok::Continue => "continue",
            Tok::Del => "del",
            Tok::Global => "global",
            Tok::Nonlocal => "nonlocal",
            Tok::With => "with",
            Tok::As => "as",
            Tok::Import => "import",
            Tok::Lambda => "lambda",
            Tok::True => "True",
            Tok::False => "False",
            Tok::None => "None",
            Tok::LParen => "(",
            Tok::RParen => ")",
            Tok::LBracket => "[",
            Tok::RBracket => "]",
            Tok::LBrace => "{",
            Tok::RBrace => "}",
            Tok::Comma => ",",
            Tok::Colon => ":",
            Tok::Semi => ";",
            Tok::Dot => ".",
            Tok::Ellipsis => "...",
            Tok::Arrow => "->",
            Tok::At => "@",
            Tok::Assign => "=",
            Tok::Plus => "+",
            Tok::Minus => "-",
            Tok::Star => "*",
            Tok::Slash => "/",
            Tok::DoubleSlash => "//",
            Tok::Percent => "%",
            Tok::DoubleStar => "**",
            Tok::LShift => "<<",
            Tok::RShift => ">>",
            Tok::Amp => "&",
            Tok::Pipe => "|",
            Tok::Caret => "^",
            Tok::Tilde => "~",
            Tok::EqEq => "==",
            Tok::NotEq => "!=",
            Tok::Lt => "<",
            Tok::Le => "<=",
            Tok::Gt => ">",
            Tok::Ge => ">=",
            Tok::PlusEq => "+=",
            Tok::MinusEq => "-=",
            Tok::StarEq => "*=",
            Tok::SlashEq => "/=",
            Tok::DoubleSlashEq => "//=",
            Tok::PercentEq => "%=",
            Tok::DoubleStarEq => "**=",
            Tok::AtEq => "@=",
            Tok::AmpEq => "&=",
            Tok::PipeEq => "|=",
            Tok::CaretEq => "^=",
            Tok::LShiftEq => "<<=",
            Tok::RShiftEq => ">>=",
            _ => "",
        }
    }
}

fn indent_width(lex: &mut logos::Lexer<Tok>) -> usize {
    let s = lex.slice();
    let after = s.find('\n').map(|i| &s[i + 1..]).unwrap_or("");
    after
        .bytes()
        .fold(0, |w, b| if b == b'\t' { (w / 8 + 1) * 8 } else { w + 1 })
}

fn radix_int(s: &str, radix: u32) -> Result<u64, LexErrorKind> {
    u64::from_str_radix(&s[2..], radix).map_err(|_| LexErrorKind::IntTooLarge)
}

fn parse_float(lex: &mut logos::Lexer<Tok>) -> Result<f64, LexErrorKind> {
    lex.slice()
        .parse::<f64>()
        .map_err(|_| LexErrorKind::BadNumber)
}

fn parse_imag(lex: &mut logos::Lexer<Tok>) -> Result<f64, LexErrorKind> {
    let s = lex.slice();
    s[..s.len() - 1]
        .parse::<f64>()
        .map_err(|_| LexErrorKind::BadNumber)
}

/// Scan a string literal whose opening quote was just matched: single or triple quoted,
/// with Python escapes (PyTorch's printer writes `\n`, `\'`, `\"`, `\\` and octal `\ooo`).
fn lex_string(lex: &mut logos::Lexer<Tok>, quote: u8) -> Result<String, LexErrorKind> {
    let rest = lex.remainder().as_bytes();
    let triple = rest.len() >= 2 && rest[0] == quote && rest[1] == quote;
    let mut i = if triple { 2 } else { 0 };
    let mut out: Vec<u8> = Vec::new();
    loop {
        let Some(&c) = rest.get(i) else {
            return Err(LexErrorKind::UnterminatedString);
        };
        if c == quote {
            if !triple {
                i += 1;
                break;
            }
            if rest.get(i + 1) == Some(&quote) && rest.get(i + 2) == Some(&quote) {
                i += 3;
                break;
            }
            out.push(c);
            i += 1;
        } else if c == b'\\' {
            i += 1;
            let Some(&e) = rest.get(i) else {
                return Err(LexErrorKind::UnterminatedString);
            };
            i += 1;
            match e {
                b'\n' => {}
                b'\\' => out.push(b'\\'),
                b'\'' => out.push(b'\''),
                b'"' => out.push(b'"'),
                b'a' => out.push(7),
                b'b' => out.push(8),
                b'f' => out.push(12),
                b'n' => out.push(b'\n'),
                b'r' => out.push(b'\r'),
                b't' => out.push(b'\t'),
                b'v' => out.push(11),
                b'0'..=b'7' => {
                    let mut v: u32 = u32::from(e - b'0');
                    for _ in 0..2 {
                        match rest.get(i) {
                            Some(&d @ b'0'..=b'7') => {
                                v = v * 8 + u32::from(d - b'0');
                                i += 1;
                            }
                            _ => break,
                        }
                    }
                    out.push((v & 0xff) as u8);
                }
                b'x' => {
                    let hex = rest.get(i..i + 2).ok_or(LexErrorKind::BadEscape)?;
                    let s = std::str::from_utf8(hex).map_err(|_| LexErrorKind::BadEscape)?;
                    let v = u8::from_str_radix(s, 16).map_err(|_| LexErrorKind::BadEscape)?;
                    out.push(v);
                    i += 2;
                }
                b'u' | b'U' => {
                    let n = if e == b'u' { 4 } else { 8 };
                    let hex = rest.get(i..i + n).ok_or(LexErrorKind::BadEscape)?;
                    let s = std::str::from_utf8(hex).map_err(|_| LexErrorKind::BadEscape)?;
                    let v = u32::from_str_radix(s, 16).map_err(|_| LexErrorKind::BadEscape)?;
                    let ch = char::from_u32(v).ok_or(LexErrorKind::BadEscape)?;
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                    i += n;
                }
                // Python keeps unknown escapes verbatim.
                other => {
                    out.push(b'\\');
                    out.push(other);
                }
            }
        } else if c == b'\n' && !triple {
            return Err(LexErrorKind::UnterminatedString);
        } else {
            out.push(c);
            i += 1;
        }
    }
    lex.bump(i);
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// A raw string (`r"..."`): backslashes are kept, but `\<quote>` does not end it.
fn lex_raw_string(lex: &mut logos::Lexer<Tok>, quote: u8) -> Result<String, LexErrorKind> {
    let rest = lex.remainder().as_bytes();
    let triple = rest.len() >= 2 && rest[0] == quote && rest[1] == quote;
    let mut i = if triple { 2 } else { 0 };
    let start = i;
    loop {
        let Some(&c) = rest.get(i) else {
            return Err(LexErrorKind::UnterminatedString);
        };
        if c == b'\\' {
            i += 2;
            continue;
        }
        if c == quote {
            if !triple {
                let text = String::from_utf8_lossy(&rest[start..i]).into_owned();
                lex.bump(i + 1);
                return Ok(text);
            }
            if rest.get(i + 1) == Some(&quote) && rest.get(i + 2) == Some(&quote) {
                let text = String::from_utf8_lossy(&rest[start..i]).into_owned();
                lex.bump(i + 3);
                return Ok(text);
            }
        }
        if c == b'\n' && !triple {
            return Err(LexErrorKind::UnterminatedString);
        }
        i += 1;
    }
}

/// The quoted string literal at the start of `text` (`"..."` or `'...'`, with Python's
/// escapes) and the number of bytes it spans; `None` unless `text` starts with a complete one.
pub fn leading_string_literal(text: &str) -> Option<(String, usize)> {
    if !text.starts_with(['"', '\'']) {
        return None;
    }
    let mut lex = Tok::lexer(text);
    match lex.next()? {
        Ok(Tok::Str(s)) => Some((s, lex.span().end)),
        _ => None,
    }
}

/// A token with its byte range, as lalrpop's external-lexer interface wants it.
pub type Spanned = (usize, Tok, usize);

/// Tokenize `text` and apply the layout rules: `Newline` ends a logical line (not inside
/// brackets), `Indent`/`Dedent` bracket each deeper block. The stream always ends with a
/// `Newline` (if non-empty) and closes every open block.
pub fn tokenize(text: &str) -> Result<Vec<Spanned>, LexError> {
    let mut out: Vec<Spanned> = Vec::new();
    let mut indents: Vec<usize> = vec![0];
    let mut depth: usize = 0;
    // Indentation of the first line: the raw lexer only measures it after a line break.
    let first_indent = text
        .bytes()
        .take_while(|b| *b == b' ' || *b == b'\t')
        .count();
    let mut pending: Option<(usize, usize)> = Some((0, first_indent));
    let mut lex = Tok::lexer(text);
    while let Some(tok) = lex.next() {
        let span = lex.span();
        let tok = tok.map_err(|kind| LexError {
            kind,
            start: span.start,
            end: span.end,
        })?;
        if let Tok::RawNewline(width) = tok {
            if depth == 0 {
                pending = Some((span.start, width));
            }
            continue;
        }
        if let Some((pos, width)) = pending.take() {
            if !out.is_empty() {
                out.push((pos, Tok::Newline, pos + 1));
            }
            let top = indents.last().copied().unwrap_or(0);
            if width > top {
                indents.push(width);
                out.push((span.start, Tok::Indent, span.start));
            } else {
                while width < indents.last().copied().unwrap_or(0) {
                    indents.pop();
                    out.push((span.start, Tok::Dedent, span.start));
                }
                if width != indents.last().copied().unwrap_or(0) {
                    return Err(LexError {
                        kind: LexErrorKind::InconsistentDedent,
                        start: span.start,
                        end: span.end,
                    });
                }
            }
        }
        match tok {
            Tok::LParen | Tok::LBracket | Tok::LBrace => depth += 1,
            Tok::RParen | Tok::RBracket | Tok::RBrace => {
                depth = depth.checked_sub(1).ok_or(LexError {
                    kind: LexErrorKind::UnbalancedBracket,
                    start: span.start,
                    end: span.end,
                })?;
            }
            _ => {}
        }
        out.push((span.start, tok, span.end));
    }
    let end = text.len();
    if !out.is_empty() {
        // The final line break (if any) is where the last logical line ends.
        let pos = pending.map(|(p, _)| p).unwrap_or(end);
        out.push((pos, Tok::Newline, (pos + 1).min(end)));
    }
    while indents.len() > 1 {
        indents.pop();
        out.push((end, Tok::Dedent, end));
    }
    Ok(out)
}

/// The position of the first token at which the code nests deeper than `max` levels, if any.
///
/// An upper bound on the AST depth, from the tokens alone: open blocks, open brackets, and
/// every token that can make an AST node a child of another (operators, `.`, calls and
/// subscripts, keywords) since the last separator (`,`, `=`, a line end) of each open bracket.
pub fn nesting_exceeds(tokens: &[Spanned], max: usize) -> Option<usize> {
    let mut blocks: usize = 0;
    // operator-like tokens since the last separator, per open bracket level (index 0: outside)
    let mut levels: Vec<usize> = vec![0];
    let mut ops: usize = 0;
    for (start, tok, _) in tokens {
        match tok {
            Tok::Indent => blocks += 1,
            Tok::Dedent => blocks = blocks.saturating_sub(1),
            Tok::Newline | Tok::Semi => {
                levels.truncate(1);
                levels[0] = 0;
                ops = 0;
            }
            Tok::Comma
            | Tok::Assign
            | Tok::PlusEq
            | Tok::MinusEq
            | Tok::StarEq
            | Tok::SlashEq
            | Tok::DoubleSlashEq
            | Tok::PercentEq
            | Tok::DoubleStarEq
            | Tok::AtEq
            | Tok::AmpEq
            | Tok::PipeEq
            | Tok::CaretEq
            | Tok::LShiftEq
            | Tok::RShiftEq => {
                if let Some(top) = levels.last_mut() {
                    ops -= *top;
                    *top = 0;
                }
            }
            Tok::LParen | Tok::LBracket | Tok::LBrace => {
                if let Some(top) = levels.last_mut() {
                    *top += 1;
                }
                ops += 1;
                levels.push(0);
            }
            Tok::RParen | Tok::RBracket | Tok::RBrace => {
                if levels.len() > 1 {
                    if let Some(top) = levels.pop() {
                        ops -= top;
                    }
                }
            }
            Tok::Ident(_)
            | Tok::Int(_)
            | Tok::Float(_)
            | Tok::Imag(_)
            | Tok::Str(_)
            | Tok::True
            | Tok::False
            | Tok::None
            | Tok::Ellipsis
            | Tok::Colon
            | Tok::RawNewline(_) => {}
            _ => {
                if let Some(top) = levels.last_mut() {
                    *top += 1;
                }
                ops += 1;
            }
        }
        if blocks + levels.len() + ops > max {
            return Some(*start);
        }
    }
    None
}
