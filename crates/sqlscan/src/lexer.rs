//! A byte-level MySQL/MariaDB lexer.
//!
//! It never allocates and never fails: malformed input (an unterminated string, say) simply ends
//! the token stream. Comments are skipped, but executable comments (`/*! ... */`,
//! `/*!50001 ... */`, `/*M! ... */`) are lexed as code because the server runs them. Plain
//! comments are reported through [`Lexer::take_comment`] so routing hints can be read.

/// What a token is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A keyword or bare identifier.
    Word,
    /// A `` `quoted` `` identifier (the span includes the backticks).
    QuotedIdent,
    /// A `'string'` or `"string"` literal (the span includes the quotes).
    Str,
    /// A numeric literal, including hex/bit forms like `0x1F`, `X'1F'` handled as strings.
    Number,
    /// `@name` or `@'name'`: a user variable.
    UserVar,
    /// `@@name` or `@@session.name`: a system variable.
    SysVar,
    /// `?`: a placeholder.
    Placeholder,
    /// `:=`.
    Assign,
    /// Any other single punctuation byte (`(`, `)`, `,`, `;`, `=`, `.` ...).
    Punct(u8),
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
    pub fn text<'a>(&self, src: &'a [u8]) -> &'a [u8] {
        &src[self.start..self.end]
    }
    /// True if this is a word equal to `kw` (ASCII case-insensitive; `kw` must be uppercase).
    pub fn is_word(&self, src: &[u8], kw: &str) -> bool {
        self.kind == Kind::Word && self.text(src).eq_ignore_ascii_case(kw.as_bytes())
    }
    /// True if this is the punctuation byte `c`.
    pub fn is_punct(&self, c: u8) -> bool {
        self.kind == Kind::Punct(c)
    }
}

/// Iterator over the tokens of a statement (or several, separated by `;`).
#[derive(Clone)]
pub struct Lexer<'a> {
    src: &'a [u8],
    pos: usize,
    /// Inside an executable comment: its closing `*/` is whitespace.
    in_exec_comment: bool,
    /// `NO_BACKSLASH_ESCAPES` sql_mode: a backslash in a string is an ordinary character.
    no_backslash_escapes: bool,
    /// Span of the most recent plain comment's body, until taken.
    comment: Option<(usize, usize)>,
}

impl<'a> Lexer<'a> {
    /// A lexer over `src`.
    pub fn new(src: &'a [u8]) -> Self {
        Lexer {
            src,
            pos: 0,
            in_exec_comment: false,
            no_backslash_escapes: false,
            comment: None,
        }
    }

    /// Treats backslashes in strings as ordinary characters (sql_mode `NO_BACKSLASH_ESCAPES`).
    pub fn no_backslash_escapes(mut self, on: bool) -> Self {
        self.no_backslash_escapes = on;
        self
    }

    /// The body of the last plain comment skipped since the previous call, if any.
    pub fn take_comment(&mut self) -> Option<&'a [u8]> {
        self.comment.take().map(|(s, e)| &self.src[s..e])
    }

    /// Current byte offset.
    pub fn offset(&self) -> usize {
        self.pos
    }

    fn peek(&self, off: usize) -> u8 {
        self.src.get(self.pos + off).copied().unwrap_or(0)
    }

    /// Skips whitespace and comments; returns false at end of input.
    fn skip_trivia(&mut self) -> bool {
        loop {
            let Some(&c) = self.src.get(self.pos) else {
                return false;
            };
            match c {
                b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c => self.pos += 1,
                b'#' => self.skip_line_comment(1),
                b'-' if self.peek(1) == b'-' && matches!(self.peek(2), 0..=b' ') => {
                    self.skip_line_comment(2)
                }
                b'/' if self.peek(1) == b'*' => self.block_comment(),
                b'*' if self.in_exec_comment && self.peek(1) == b'/' => {
                    self.in_exec_comment = false;
                    self.pos += 2;
                }
                _ => return true,
            }
        }
    }

    fn skip_line_comment(&mut self, marker: usize) {
        let start = self.pos + marker;
        let end = memchr(b'\n', &self.src[start.min(self.src.len())..])
            .map(|i| start + i)
            .unwrap_or(self.src.len());
        self.comment = Some((start.min(end), end));
        self.pos = (end + 1).min(self.src.len());
    }

    fn block_comment(&mut self) {
        // `/*!`, `/*!12345`, `/*M!`, `/*M!123456`: executable, lex the body as code.
        let exec_prefix = match (self.peek(2), self.peek(3)) {
            (b'!', _) => Some(3),
            (b'M', b'!') => Some(4),
            _ => None,
        };
        if let Some(p) = exec_prefix {
            if !self.in_exec_comment {
                self.pos += p;
                while self.peek(0).is_ascii_digit() {
                    self.pos += 1;
                }
                self.in_exec_comment = true;
                return;
            }
        }
        let body = self.pos + 2;
        let end = find2(&self.src[body.min(self.src.len())..], b'*', b'/')
            .map(|i| body + i)
            .unwrap_or(self.src.len());
        self.comment = Some((body.min(end), end));
        self.pos = (end + 2).min(self.src.len());
    }

    fn quoted(&mut self, q: u8) {
        // self.pos is at the opening quote.
        let mut i = self.pos + 1;
        let s = self.src;
        while i < s.len() {
            let c = s[i];
            if c == b'\\' && q != b'`' && !self.no_backslash_escapes {
                i += 2;
            } else if c == q {
                if s.get(i + 1) == Some(&q) {
                    i += 2; // doubled quote
                } else {
                    i += 1;
                    self.pos = i;
                    return;
                }
            } else {
                i += 1;
            }
        }
        self.pos = s.len();
    }

    /// End of a numeric literal starting at `i`: `123`, `1.5`, `1e+10`, `0x1F`, `0b101`.
    fn number_end(&self, i: usize) -> usize {
        let s = self.src;
        let digits = |mut j: usize| {
            while j < s.len() && s[j].is_ascii_digit() {
                j += 1;
            }
            j
        };
        if s[i] == b'0' && matches!(s.get(i + 1), Some(b'x' | b'X' | b'b' | b'B')) {
            let mut j = i + 2;
            while j < s.len() && s[j].is_ascii_hexdigit() {
                j += 1;
            }
            if j > i + 2 {
                return j;
            }
        }
        let mut j = digits(i);
        if s.get(j) == Some(&b'.') {
            j = digits(j + 1);
        }
        if matches!(s.get(j), Some(b'e' | b'E')) {
            let k = if matches!(s.get(j + 1), Some(b'+' | b'-')) {
                j + 2
            } else {
                j + 1
            };
            if s.get(k).is_some_and(u8::is_ascii_digit) {
                j = digits(k);
            }
        }
        j
    }

    fn word_end(&self, mut i: usize) -> usize {
        while i < self.src.len() && is_word_byte(self.src[i]) {
            i += 1;
        }
        i
    }
}

impl Iterator for Lexer<'_> {
    type Item = Token;

    fn next(&mut self) -> Option<Token> {
        if !self.skip_trivia() {
            return None;
        }
        let start = self.pos;
        let c = self.src[start];
        let kind = match c {
            b'\'' | b'"' => {
                self.quoted(c);
                Kind::Str
            }
            b'`' => {
                self.quoted(b'`');
                Kind::QuotedIdent
            }
            b'@' => {
                if self.peek(1) == b'@' {
                    self.pos += 2;
                    // @@session.x, @@global.x, @@x
                    loop {
                        self.pos = self.word_end(self.pos);
                        if self.peek(0) == b'.' && is_word_byte(self.peek(1)) {
                            self.pos += 1;
                        } else {
                            break;
                        }
                    }
                    Kind::SysVar
                } else {
                    self.pos += 1;
                    match self.peek(0) {
                        q @ (b'\'' | b'"' | b'`') => self.quoted(q),
                        _ => self.pos = self.word_end(self.pos),
                    }
                    Kind::UserVar
                }
            }
            b'0'..=b'9' => {
                self.pos = self.number_end(start);
                if is_word_byte(self.peek(0)) {
                    // Not a number after all: an identifier such as `1abc`.
                    self.pos = self.word_end(self.pos);
                    Kind::Word
                } else {
                    Kind::Number
                }
            }
            b'.' if self.peek(1).is_ascii_digit()
                && !matches!(self.src.get(start.wrapping_sub(1)), Some(b) if is_word_byte(*b) || *b == b'`') =>
            {
                self.pos = self.word_end(start + 1);
                Kind::Number
            }
            b'?' => {
                self.pos += 1;
                Kind::Placeholder
            }
            b':' if self.peek(1) == b'=' => {
                self.pos += 2;
                Kind::Assign
            }
            c if is_word_byte(c) => {
                // N'..', X'..', B'..', _utf8'..' introducers lex as the word then a string.
                self.pos = self.word_end(start);
                Kind::Word
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

/// Bytes that can appear in an unquoted identifier (MySQL allows `$` and any non-ASCII byte).
pub fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80
}

fn memchr(needle: u8, hay: &[u8]) -> Option<usize> {
    hay.iter().position(|&b| b == needle)
}

fn find2(hay: &[u8], a: u8, b: u8) -> Option<usize> {
    hay.windows(2).position(|w| w[0] == a && w[1] == b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(sql: &str) -> Vec<(Kind, String)> {
        Lexer::new(sql.as_bytes())
            .map(|t| {
                (
                    t.kind,
                    String::from_utf8_lossy(t.text(sql.as_bytes())).into_owned(),
                )
            })
            .collect()
    }

    #[test]
    fn words_strings_and_comments() {
        let t = kinds("SELECT /* c */ 'a''b', \"x\\\"y\" -- tail\n FROM `t``x` # more\n");
        let texts: Vec<_> = t.iter().map(|(_, s)| s.as_str()).collect();
        assert_eq!(
            texts,
            ["SELECT", "'a''b'", ",", "\"x\\\"y\"", "FROM", "`t``x`"]
        );
    }

    #[test]
    fn executable_comments_are_code() {
        let t = kinds("/*!40101 SET NAMES utf8 */; /*M!100000 SELECT 1 */");
        let texts: Vec<_> = t.iter().map(|(_, s)| s.as_str()).collect();
        assert_eq!(texts, ["SET", "NAMES", "utf8", ";", "SELECT", "1"]);
    }

    #[test]
    fn variables() {
        let t = kinds("SELECT @x := @@session.sql_mode, @'q r', @@warning_count");
        assert_eq!(t[1], (Kind::UserVar, "@x".into()));
        assert_eq!(t[2].0, Kind::Assign);
        assert_eq!(t[3], (Kind::SysVar, "@@session.sql_mode".into()));
        assert_eq!(t[5], (Kind::UserVar, "@'q r'".into()));
        assert_eq!(t[7], (Kind::SysVar, "@@warning_count".into()));
    }

    #[test]
    fn numbers() {
        let t = kinds("1 1.5 1e+10 0x1F .5 t.col 1abc");
        let k: Vec<_> = t.iter().map(|(k, _)| *k).collect();
        assert_eq!(
            k,
            [
                Kind::Number,
                Kind::Number,
                Kind::Number,
                Kind::Number,
                Kind::Number,
                Kind::Word,
                Kind::Punct(b'.'),
                Kind::Word,
                Kind::Word
            ]
        );
    }

    #[test]
    fn unterminated_input_ends_quietly() {
        assert_eq!(kinds("SELECT 'abc").len(), 2);
        assert_eq!(kinds("SELECT /* abc").len(), 1);
        assert_eq!(kinds("").len(), 0);
    }

    #[test]
    fn no_backslash_escapes_mode() {
        let sql = br"SELECT 'a\', 1";
        let n = Lexer::new(sql).no_backslash_escapes(true).count();
        assert_eq!(n, 4); // SELECT 'a\' , 1
        let n = Lexer::new(sql).count();
        assert_eq!(n, 2); // SELECT and an unterminated string
    }
}
