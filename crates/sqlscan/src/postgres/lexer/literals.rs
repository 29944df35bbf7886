//! Tokens other than words and single punctuation bytes: comments, strings, quoted
//! identifiers, numbers, parameters, operators.

use super::class::{is_ident_byte, is_ident_start, is_op_byte, Lead};
use super::{Kind, Lexer, Token};

impl Lexer<'_> {
    /// The token at `self.pos`, whose first byte leads to `lead` (neither blank nor a plain
    /// word or punctuation byte); `None` if it is a comment that is skipped.
    #[inline(never)]
    pub(super) fn other(&mut self, lead: Lead) -> Option<Token> {
        let s = self.src;
        let start = self.pos;
        let c = s.get(start).copied().unwrap_or(0);
        let next = self.peek(1);
        let kind = match lead {
            Lead::CommentStart if (c == b'-' && next == b'-') || (c == b'/' && next == b'*') => {
                if c == b'-' {
                    self.line_comment();
                } else {
                    self.block_comment();
                }
                if !self.comments {
                    return None;
                }
                Kind::Comment
            }
            Lead::Quote => {
                self.pos = self.quoted_end(start + 1, b'\'', false);
                Kind::Str
            }
            Lead::DoubleQuote => {
                self.pos = self.quoted_end(start + 1, b'"', false);
                Kind::QuotedIdent
            }
            Lead::Prefix => return Some(self.prefixed(start, c, next)),
            Lead::Dollar if next.is_ascii_digit() => {
                let mut i = start + 1;
                while i < s.len() && s[i].is_ascii_digit() {
                    i += 1;
                }
                self.pos = i;
                Kind::Param
            }
            Lead::Dollar => match self.dollar_quoted_end(start) {
                Some(end) => {
                    self.pos = end;
                    Kind::Str
                }
                None => {
                    self.pos += 1;
                    Kind::Punct(b'$')
                }
            },
            Lead::Digit => {
                self.pos = self.number_end(start);
                Kind::Number
            }
            Lead::Dot
                if next.is_ascii_digit()
                    && !matches!(s.get(start.wrapping_sub(1)),
                        Some(&b) if is_ident_byte(b) || matches!(b, b'"' | b')' | b']')) =>
            {
                self.pos = self.number_end(start);
                Kind::Number
            }
            Lead::Colon if next == b':' => {
                self.pos += 2;
                Kind::Cast
            }
            _ if is_op_byte(c) => {
                self.pos = self.operator_end(start);
                if self.pos - start == 1 {
                    Kind::Punct(c)
                } else {
                    Kind::Op
                }
            }
            _ => {
                self.pos += 1;
                Kind::Punct(c)
            }
        };
        Some(self.ends(kind, start, self.pos))
    }

    /// At `e`, `b`, `x`, `n` or `u` (either case) followed by `next`: a string or quoted
    /// identifier with a prefix, or a word.
    fn prefixed(&mut self, start: usize, c: u8, next: u8) -> Token {
        let (kind, end) = match c | 0x20 {
            b'e' if next == b'\'' => (Kind::Str, self.quoted_end(start + 2, b'\'', true)),
            b'b' | b'x' | b'n' if next == b'\'' => {
                (Kind::Str, self.quoted_end(start + 2, b'\'', false))
            }
            b'u' if next == b'&' && matches!(self.peek(2), b'\'' | b'"') => {
                let q = self.peek(2);
                let kind = if q == b'"' {
                    Kind::QuotedIdent
                } else {
                    Kind::Str
                };
                (kind, self.quoted_end(start + 3, q, false))
            }
            _ => return self.word(start),
        };
        self.ends(kind, start, end)
    }

    fn peek(&self, off: usize) -> u8 {
        self.src.get(self.pos + off).copied().unwrap_or(0)
    }

    /// At `--`: to the end of the line, which a carriage return ends as a line feed does
    /// (PostgreSQL's lexer: `newline [\n\r]`).
    fn line_comment(&mut self) {
        let body = self.pos + 2;
        let end = self.src[body..]
            .iter()
            .position(|&b| b == b'\n' || b == b'\r')
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
}
