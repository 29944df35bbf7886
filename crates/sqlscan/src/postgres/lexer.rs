//! A byte-level PostgreSQL lexer.
//!
//! It never allocates and never fails: malformed input (an unterminated string, say) simply ends
//! the token stream. It follows PostgreSQL's lexical rules with `standard_conforming_strings`
//! on (the default since 9.1): a backslash is an ordinary character in `'...'` and only escapes
//! in `E'...'`. Comments (`-- ...` and nested `/* /* */ */`) are skipped and their bodies
//! reported through [`Lexer::take_comment`], or yielded as [`Kind::Comment`] tokens on request.
//!
//! Every word is looked up once here for the keyword it may be ([`Kw`]): the classification
//! and the digest compare that instead of the word's bytes. A table of byte classes
//! ([`class`]) dispatches on a token's first byte, and the common tokens (words, single
//! punctuation, parameters, integers) are lexed inline; the other literals, operators and
//! comments have their own file ([`literals`]).

mod class;
mod literals;

use super::keywords::Kw;
use super::packed;
pub use class::{is_ident_byte, is_ident_start};
use class::{Lead, LEAD};

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
    /// The keyword a [`Kind::Word`] is, found once here for every reader of the token.
    pub(crate) kw: Kw,
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
    /// True if this is the keyword `kw` (a word, in any case).
    #[inline(always)]
    pub(crate) fn is(&self, kw: Kw) -> bool {
        self.kw == kw
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
    /// Look every word up for the keyword it may be (else words are [`Kw::None`]).
    keywords: bool,
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
            keywords: true,
            comment: None,
        }
    }

    /// Starts lexing at byte `pos` (a token boundary of the text: what a lexer from the
    /// start would reach there).
    pub(crate) fn at(mut self, pos: usize) -> Self {
        self.pos = pos;
        self
    }

    /// Yields comments as [`Kind::Comment`] tokens instead of skipping them.
    pub fn comments(mut self, on: bool) -> Self {
        self.comments = on;
        self
    }

    /// Leaves words without their keyword ([`Kw::None`]): for a reader that needs only the
    /// tokens' kinds and spans, which cost less without the look-up.
    pub(crate) fn without_keywords(mut self) -> Self {
        self.keywords = false;
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

    /// The word starting at `start`, an identifier-start byte that does not begin a string.
    #[inline(always)]
    fn word(&mut self, start: usize) -> Token {
        let s = self.src;
        let end = word_end(s, start + 1);
        self.pos = end;
        let len = end - start;
        let kw = if !self.keywords {
            Kw::None
        } else if len <= 8 {
            Kw::of_packed([packed::read8(s, start), 0], len)
        } else {
            Kw::of_packed([packed::read8(s, start), packed::read8(s, start + 8)], len)
        };
        Token {
            kind: Kind::Word,
            kw,
            start,
            end,
        }
    }

    /// A token of `kind` from `start` to the end of the digits from `from`.
    #[inline(always)]
    fn digits(&mut self, start: usize, from: usize, kind: Kind) -> Token {
        let s = self.src;
        let rest = s.get(from..).unwrap_or_default();
        let end = from + rest.iter().take_while(|b| b.is_ascii_digit()).count();
        self.ends(kind, start, end)
    }

    /// A token of `kind` (not a keyword) from `start` to `end`, where the lexer goes on.
    #[inline(always)]
    fn ends(&mut self, kind: Kind, start: usize, end: usize) -> Token {
        self.pos = end;
        Token {
            kind,
            kw: Kw::None,
            start,
            end,
        }
    }

    /// The single byte `c` at `start`, a token by itself.
    #[inline(always)]
    fn single(&mut self, start: usize, c: u8) -> Token {
        self.ends(Kind::Punct(c), start, start + 1)
    }
}

/// The end of the identifier bytes of `s` from `from`, four bytes a round: the loop's own
/// work is shared by four bytes (words are most of a statement's bytes).
#[inline(always)]
fn word_end(s: &[u8], from: usize) -> usize {
    let rest = s.get(from..).unwrap_or_default();
    let mut quads = rest.chunks_exact(4);
    let mut n = from;
    for q in &mut quads {
        if let &[a, b, c, d] = q {
            if !is_ident_byte(a) {
                return n;
            }
            if !is_ident_byte(b) {
                return n + 1;
            }
            if !is_ident_byte(c) {
                return n + 2;
            }
            if !is_ident_byte(d) {
                return n + 3;
            }
        }
        n += 4;
    }
    let tail = quads.remainder();
    n + tail
        .iter()
        .position(|&b| !is_ident_byte(b))
        .unwrap_or(tail.len())
}

impl Iterator for Lexer<'_> {
    type Item = Token;

    // Inlined into the loops that drive it (the cursor's, the digest's, the splitter's): a
    // call per token costs more than the lexing of most tokens.
    #[inline(always)]
    fn next(&mut self) -> Option<Token> {
        let s = self.src;
        let mut start = self.pos;
        loop {
            let Some(&c) = s.get(start) else {
                self.pos = start;
                return None;
            };
            // Most tokens follow a single space: it costs no look-up.
            if c == b' ' {
                start += 1;
                continue;
            }
            let next = || s.get(start + 1).copied().unwrap_or(0);
            match LEAD[usize::from(c)] {
                Lead::Word => return Some(self.word(start)),
                Lead::Blank => start += 1,
                // `e`, `b`, `x`, `n`, `u`: a string only before a quote or `&`.
                Lead::Prefix if !matches!(next(), b'\'' | b'&') => return Some(self.word(start)),
                Lead::Punct => return Some(self.single(start, c)),
                // An operator byte alone (which cannot start a comment either).
                Lead::Op | Lead::CommentStart if !class::is_op_byte(next()) => {
                    return Some(self.single(start, c));
                }
                Lead::Dollar if next().is_ascii_digit() => {
                    return Some(self.digits(start, start + 2, Kind::Param));
                }
                Lead::Digit => {
                    let t = self.digits(start, start + 1, Kind::Number);
                    if !s.get(t.end).is_some_and(|&b| b == b'.' || is_ident_byte(b)) {
                        return Some(t);
                    }
                    // `1.5`, `1e3`, `0x1F`, `1_000`: the rules of a whole number (which is
                    // never a comment skipped).
                    self.pos = start;
                    return self.other(Lead::Digit);
                }
                lead => {
                    self.pos = start;
                    if let Some(t) = self.other(lead) {
                        return Some(t);
                    }
                    // A comment skipped.
                    start = self.pos;
                }
            }
        }
    }
}
