//! A byte-level PostgreSQL lexer.
//!
//! It never allocates and never fails: malformed input (an unterminated string, say) simply ends
//! the token stream. It follows PostgreSQL's lexical rules with `standard_conforming_strings`
//! on (the default since 9.1): a backslash is an ordinary character in `'...'` and only escapes
//! in `E'...'`. Comments (`-- ...` and nested `/* /* */ */`) are skipped and their bodies
//! reported through [`Lexer::take_comment`], or yielded as [`Kind::Comment`] tokens on request.

/// What a token is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A keyword or bare identifier (ASCII letters fold to lower case in PostgreSQL).
    Word,
    /// A `"quoted identifier"` or `U&"..."` (the span includes the quotes and prefix).
    QuotedIdent,
    /// A string: `'...'`, `E'...'`, `U&'...'`, `B'...'`, `X'...'`, `N'...'`, `$$...$$` or
    /// `$tag$...$tag$` (the span includes the quotes, prefix and tags).
    Str,
    /// A numeric literal: `42`, `1.5`, `.5`, `1e-3`, `0x1F`, `1_000`.
    Number,
    /// A positional parameter: `$1`.
    Param,
    /// `::`, the type cast operator.
    Cast,
    /// An operator of two or more characters: `<>`, `>=`, `->>`, `||`, `@>` ...
    Op,
    /// A single punctuation or operator byte: `(`, `)`, `,`, `;`, `.`, `=`, `*`, `[` ...
    Punct(u8),
    /// A comment, only with [`Lexer::comments`] on (the span covers its delimiters).
    Comment,
}

/// A token: its kind and byte span in the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Token {
    /// Token kind.
    pub kind: Kind,
    /// Start offset (inclusive).
    pub start: usize,
    /// End offset (exclusive).
    pub end: usize,
}

impl Token {
    /// The token's bytes.
    #[inline]
    pub fn text<'a>(&self, src: &'a [u8]) -> &'a [u8] {
        &src[self.start..self.end]
    }
    /// True if this is a word equal to `kw` (ASCII case-insensitive; `kw` must be uppercase).
    #[inline]
    pub fn is_word(&self, src: &[u8], kw: &str) -> bool {
        self.kind == Kind::Word
            && self.end - self.start == kw.len()
            && self.text(src).eq_ignore_ascii_case(kw.as_bytes())
    }
    /// True if this is the punctuation byte `c`.
    #[inline]
    pub fn is_punct(&self, c: u8) -> bool {
        self.kind == Kind::Punct(c)
    }
}

/// Iterator over the tokens of a statement text (one or several statements).
#[derive(Clone)]
pub struct Lexer<'a> {
    src: &'a [u8],
    pos: usize,
    /// Yield comments as tokens instead of skipping them.
    comments: bool,
    /// Span of the most recent comment's body, until taken.
    comment: Option<(usize, usize)>,
}

impl<'a> Lexer<'a> {
    /// A lexer over `src`.
    pub fn new(src: &'a [u8]) -> Self {
        Lexer {
            src,
            pos: 0,
            comments: false,
            comment: None,
        }
    }

    /// Yields comments as [`Kind::Comment`] tokens instead of skipping them.
    pub fn comments(mut self, on: bool) -> Self {
        self.comments = on;
        self
    }

    /// The body of the last comment skipped since the previous call, if any.
    pub fn take_comment(&mut self) -> Option<&'a [u8]> {
        self.comment.take().map(|(s, e)| &self.src[s..e])
    }

    /// Current byte offset: the end of the last token returned.
    pub fn offset(&self) -> usize {
        self.pos
    }

    fn peek(&self, off: usize) -> u8 {
        self.src.get(self.pos + off).copied().unwrap_or(0)
    }

    /// Skips whitespace, and comments unless they are yielded; false at end of input.
    fn skip_trivia(&mut self) -> bool {
        loop {
            let Some(&c) = self.src.get(self.pos) else {
                return false;
            };
            match c {
                b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c => self.pos += 1,
                b'-' if self.peek(1) == b'-' && !self.comments => {
                    self.line_comment();
                }
                b'/' if self.peek(1) == b'*' && !self.comments => {
                    self.block_comment();
                }
                _ => return true,
            }
        }
    }

    /// At `--`: to the end of the line.
    fn line_comment(&mut self) {
        let body = self.pos + 2;
        let end = self.src[body..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(self.src.len(), |i| body + i);
        self.comment = Some((body, end));
        self.pos = end;
    }

    /// At `/*`: to the matching `*/`, counting nested `/*`.
    fn block_comment(&mut self) {
        let s = self.src;
        let body = self.pos + 2;
        let mut i = body;
        let mut depth = 1u32;
        while i + 1 < s.len() {
            if s[i] == b'/' && s[i + 1] == b'*' {
                depth += 1;
                i += 2;
            } else if s[i] == b'*' && s[i + 1] == b'/' {
                depth -= 1;
                if depth == 0 {
                    self.comment = Some((body, i));
                    self.pos = i + 2;
                    return;
                }
                i += 2;
            } else {
                i += 1;
            }
        }
        self.comment = Some((body, s.len()));
        self.pos = s.len();
    }

    /// From `i` (just past the opening quote `q`) to just past the closing one; a doubled quote
    /// is part of the text, and with `backslash` a backslash escapes the next byte.
    fn quoted_end(&self, mut i: usize, q: u8, backslash: bool) -> usize {
        let s = self.src;
        while i < s.len() {
            let c = s[i];
            if backslash && c == b'\\' {
                i += 2;
            } else if c == q {
                if s.get(i + 1) == Some(&q) {
                    i += 2;
                } else {
                    return i + 1;
                }
            } else {
                i += 1;
            }
        }
        s.len()
    }

    /// At `$` not followed by a digit: the end of a dollar-quoted string, if `$tag$` opens one.
    fn dollar_quoted_end(&self, start: usize) -> Option<usize> {
        let s = self.src;
        let mut i = start + 1;
        // The tag is an identifier without `$`: it cannot start with a digit.
        if s.get(i).is_some_and(|&b| is_ident_start(b)) {
            while s
                .get(i)
                .is_some_and(|&b| is_ident_start(b) || b.is_ascii_digit())
            {
                i += 1;
            }
        }
        if s.get(i) != Some(&b'$') {
            return None;
        }
        let delim = &s[start..=i];
        let mut j = i + 1;
        while j < s.len() {
            if s[j] == b'$' && s[j..].starts_with(delim) {
                return Some(j + delim.len());
            }
            j += 1;
        }
        Some(s.len())
    }

    /// End of a numeric literal starting at `i` (a digit, or `.` before a digit).
    fn number_end(&self, i: usize) -> usize {
        let s = self.src;
        let digits = |mut j: usize, hex: bool| {
            while j < s.len()
                && (s[j].is_ascii_digit()
                    || (hex && s[j].is_ascii_hexdigit())
                    || (s[j] == b'_' && j + 1 < s.len() && s[j + 1].is_ascii_alphanumeric()))
            {
                j += 1;
            }
            j
        };
        if s[i] == b'0' && matches!(s.get(i + 1), Some(b'x' | b'X' | b'o' | b'O' | b'b' | b'B')) {
            let j = digits(i + 2, true);
            if j > i + 2 {
                return j;
            }
        }
        let mut j = digits(i, false);
        // `1.5` and `1.`, but `1..2` is the integer 1 then `..` (PL/pgSQL ranges).
        if s.get(j) == Some(&b'.') && s.get(j + 1) != Some(&b'.') {
            j = digits(j + 1, false);
        }
        if matches!(s.get(j), Some(b'e' | b'E')) {
            let k = if matches!(s.get(j + 1), Some(b'+' | b'-')) {
                j + 2
            } else {
                j + 1
            };
            if s.get(k).is_some_and(u8::is_ascii_digit) {
                j = digits(k, false);
            }
        }
        j
    }

    /// End of an operator starting at `i`. It stops before a `--` or `/*` inside it, and a
    /// multi-character operator does not end in `+` or `-` unless it contains one of
    /// `~ ! @ # % ^ & | \` ?` (so `=-1` is `=` then `-1`), as PostgreSQL lexes them.
    fn operator_end(&self, i: usize) -> usize {
        let s = self.src;
        let mut j = i;
        let mut special = false;
        while j < s.len() && is_op_byte(s[j]) {
            if j > i
                && matches!(
                    (s[j], s.get(j + 1)),
                    (b'-', Some(b'-')) | (b'/', Some(b'*'))
                )
            {
                break;
            }
            special |= matches!(
                s[j],
                b'~' | b'!' | b'@' | b'#' | b'%' | b'^' | b'&' | b'|' | b'`' | b'?'
            );
            j += 1;
        }
        if !special {
            while j > i + 1 && matches!(s[j - 1], b'+' | b'-') {
                j -= 1;
            }
        }
        j
    }

    /// End of the identifier bytes from `i` (at most the input's length).
    fn word_end(&self, i: usize) -> usize {
        let rest = self.src.get(i..).unwrap_or_default();
        // Four bytes a round: words are most of a statement's bytes.
        let mut quads = rest.chunks_exact(4);
        let mut n = 0;
        for q in &mut quads {
            if let Some(k) = q.iter().position(|&b| !is_ident_byte(b)) {
                return i + n + k;
            }
            n += 4;
        }
        let tail = quads.remainder();
        i + n
            + tail
                .iter()
                .position(|&b| !is_ident_byte(b))
                .unwrap_or(tail.len())
    }
}

impl Iterator for Lexer<'_> {
    type Item = Token;

    fn next(&mut self) -> Option<Token> {
        if !self.skip_trivia() {
            return None;
        }
        let start = self.pos;
        let s = self.src;
        let c = s[start];
        let next = self.peek(1);
        // The common case first: a word that does not introduce a string.
        if is_ident_start(c)
            && !(next == b'\'' && matches!(c | 0x20, b'e' | b'b' | b'x' | b'n'))
            && !((c | 0x20) == b'u' && next == b'&')
        {
            self.pos = self.word_end(start + 1);
            return Some(Token {
                kind: Kind::Word,
                start,
                end: self.pos,
            });
        }
        let kind = match c {
            b'-' if next == b'-' => {
                self.line_comment();
                Kind::Comment
            }
            b'/' if next == b'*' => {
                self.block_comment();
                Kind::Comment
            }
            b'\'' => {
                self.pos = self.quoted_end(start + 1, b'\'', false);
                Kind::Str
            }
            b'"' => {
                self.pos = self.quoted_end(start + 1, b'"', false);
                Kind::QuotedIdent
            }
            b'e' | b'E' if next == b'\'' => {
                self.pos = self.quoted_end(start + 2, b'\'', true);
                Kind::Str
            }
            b'b' | b'B' | b'x' | b'X' | b'n' | b'N' if next == b'\'' => {
                self.pos = self.quoted_end(start + 2, b'\'', false);
                Kind::Str
            }
            b'u' | b'U' if next == b'&' && matches!(self.peek(2), b'\'' | b'"') => {
                let q = self.peek(2);
                self.pos = self.quoted_end(start + 3, q, false);
                if q == b'"' {
                    Kind::QuotedIdent
                } else {
                    Kind::Str
                }
            }
            b'$' if next.is_ascii_digit() => {
                let mut i = start + 1;
                while i < s.len() && s[i].is_ascii_digit() {
                    i += 1;
                }
                self.pos = i;
                Kind::Param
            }
            b'$' => match self.dollar_quoted_end(start) {
                Some(end) => {
                    self.pos = end;
                    Kind::Str
                }
                None => {
                    self.pos += 1;
                    Kind::Punct(b'$')
                }
            },
            b'0'..=b'9' => {
                self.pos = self.number_end(start);
                Kind::Number
            }
            b'.' if next.is_ascii_digit()
                && !matches!(s.get(start.wrapping_sub(1)),
                    Some(&b) if is_ident_byte(b) || matches!(b, b'"' | b')' | b']')) =>
            {
                self.pos = self.number_end(start);
                Kind::Number
            }
            b':' if next == b':' => {
                self.pos += 2;
                Kind::Cast
            }
            c if is_ident_start(c) => {
                self.pos = self.word_end(start + 1);
                Kind::Word
            }
            c if is_op_byte(c) => {
                self.pos = self.operator_end(start);
                if self.pos - start == 1 {
                    Kind::Punct(c)
                } else {
                    Kind::Op
                }
            }
            other => {
                self.pos += 1;
                Kind::Punct(other)
            }
        };
        Some(Token {
            kind,
            start,
            end: self.pos,
        })
    }
}

const START: u8 = 1;
const IDENT: u8 = 2;
const OP: u8 = 4;

/// Byte classes: identifier start, identifier continuation, operator.
static CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0usize;
    while b < 256 {
        let c = b as u8;
        if c.is_ascii_alphabetic() || c == b'_' || c >= 0x80 {
            t[b] = START | IDENT;
        } else if c.is_ascii_digit() || c == b'$' {
            t[b] = IDENT;
        } else if matches!(
            c,
            b'+' | b'-'
                | b'*'
                | b'/'
                | b'<'
                | b'>'
                | b'='
                | b'~'
                | b'!'
                | b'@'
                | b'#'
                | b'%'
                | b'^'
                | b'&'
                | b'|'
                | b'`'
                | b'?'
        ) {
            t[b] = OP;
        }
        b += 1;
    }
    t
};

/// Bytes that can start an unquoted identifier: ASCII letters, `_` and any non-ASCII byte.
#[inline]
pub fn is_ident_start(b: u8) -> bool {
    CLASS[b as usize] & START != 0
}

/// Bytes that can continue an unquoted identifier: also digits and `$`.
#[inline]
pub fn is_ident_byte(b: u8) -> bool {
    CLASS[b as usize] & IDENT != 0
}

/// Bytes that make up operators.
#[inline]
fn is_op_byte(b: u8) -> bool {
    CLASS[b as usize] & OP != 0
}
