//! PostgreSQL statement digests, computed from the tokens the classification lexes anyway: the
//! shape of a statement with its literals taken out, so that `SELECT * FROM t WHERE id = 1` and
//! `select * from T where id=$1 -- x` count as one query.
//!
//! The digester is fed one token at a time and never looks ahead: a `-` that may be a sign is
//! held back until the next token says, and a list that may hold only literals is written as
//! it comes, then rewound (text and hash) and replaced by `(...)` once its `)` shows that it
//! does. The rules:
//! - strings of every kind (`'..'`, `E'..'`, `B'..'`, `X'..'`, `N'..'`, `U&'..'`, `$$..$$`),
//!   numbers and parameters `$1` become `?`; a `-` or `+` right before a number is part of it
//!   where it cannot be a binary operator (at the start, after `(`, `,`, an operator or a
//!   reserved word such as `SELECT`, `THEN`, `LIMIT`);
//! - comments and whitespace go; tokens are joined by single spaces, except after `(`, `[`, `.`
//!   and `::`, before `)`, `]`, `,`, `;`, `.` and `::`, and between a name (or a function-like
//!   keyword such as `COUNT`) and `(` or `[`; operators are written as lexed (`<>`, `->>`,
//!   `||`); a cast is `?::date`;
//! - `IN (`, `VALUES (` and `ARRAY[` followed by literals, parameters, `NULL`, `TRUE`,
//!   `FALSE`, `DEFAULT`, signed or cast (`'x'::date`), become ` (...)` (`[...]` for `ARRAY`),
//!   whatever their number; after `VALUES`, rows `, (...)` of such lists go too;
//! - the keywords of a short list are written in upper case, other unquoted words with their
//!   ASCII letters in lower case (PostgreSQL folds them: `FROM Foo` is `from foo`); quoted
//!   identifiers stay as written;
//! - every `;` stays, so that a string of several statements shows them all.
//!
//! The id is a 64-bit hash of the whole normalised text (see [`output`] for the hash, which is
//! not the MySQL digest's FNV-1a: it takes eight bytes at a time); the text kept is cut at
//! [`MAX_TEXT`](crate::digest::MAX_TEXT) bytes. `scan` computes the id in its lexing pass,
//! without the text (fed by its cursor); [`digest_text`] computes both, from its own lexer.

mod lists;
mod output;
mod words;

use super::lexer::{Kind, Lexer, Token};
use super::packed;
use lists::List;
pub(crate) use output::HashOnly;
use output::{Output, Sink, Text};
use words::Role;

/// Normalises `sql` (a simple-Query string) into `out`, cleared first and kept to at most
/// [`MAX_TEXT`](crate::digest::MAX_TEXT) bytes, and returns the digest id: the same id
/// [`scan`](super::scan) computes for `sql`. Reuse `out` across calls to avoid allocating. The
/// text is not necessarily UTF-8 (it keeps the input's words as they are).
pub fn digest_text(sql: &[u8], out: &mut Vec<u8>) -> u64 {
    let mut d = Digester::new(Text::new(out));
    for t in Lexer::new(sql) {
        d.feed(sql, &t);
    }
    d.finish()
}

/// The class of the last token written, for spacing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Space {
    Start,
    /// A word, a literal, a quoted identifier.
    Word,
    /// A keyword such as `WHERE`, `IN`, `VALUES`: unlike a name, not called, so a `(` after
    /// it is spaced.
    Key,
    /// An operator and any other punctuation.
    Op,
    /// `(`, `[`.
    Open,
    /// `)`, `]`.
    Close,
    /// `,`, `;`.
    Comma,
    Dot,
    Cast,
}

impl Space {
    /// Bit `last` is set if a space goes between a token of class `last` and one of this
    /// class: not after `(`, `[`, `.`, `::` or at the start, not before `)`, `]`, `,`, `;`,
    /// `.`, `::`, not between a name and `(` or `[` (a call, an array subscript).
    const fn after(self) -> u16 {
        let all = 0x1ff
            & !(1 << Space::Start as u8)
            & !(1 << Space::Open as u8)
            & !(1 << Space::Dot as u8)
            & !(1 << Space::Cast as u8);
        match self {
            Space::Close | Space::Comma | Space::Dot | Space::Cast | Space::Start => 0,
            Space::Open => all & !(1 << Space::Word as u8),
            Space::Word | Space::Key | Space::Op => all,
        }
    }

    /// Bit `next` is set if a space goes between a token of this class and one of class
    /// `next`: [`Space::after`] turned around, so that the digester keeps the spacing the
    /// last token leaves, and a token of a known class tests one bit.
    const fn before(self) -> u16 {
        const ALL: [Space; 9] = [
            Space::Start,
            Space::Word,
            Space::Key,
            Space::Op,
            Space::Open,
            Space::Close,
            Space::Comma,
            Space::Dot,
            Space::Cast,
        ];
        let mut bits = 0;
        let mut i = 0;
        while i < ALL.len() {
            if ALL[i].after() & (1 << self as u8) != 0 {
                bits |= 1 << ALL[i] as u8;
            }
            i += 1;
        }
        bits
    }
}

/// The spacing class of each single-byte token.
static PUNCT: [Space; 256] = {
    let mut t = [Space::Op; 256];
    t[b'(' as usize] = Space::Open;
    t[b'[' as usize] = Space::Open;
    t[b')' as usize] = Space::Close;
    t[b']' as usize] = Space::Close;
    t[b',' as usize] = Space::Comma;
    t[b';' as usize] = Space::Comma;
    t[b'.' as usize] = Space::Dot;
    t
};

/// What the previous token left to settle with the next one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pending {
    Nothing,
    /// A `-` or `+` held back: a number after it makes it a sign.
    Sign(u8),
    /// `IN`, `VALUES` or `ARRAY`: this byte next opens a list of literals.
    Opener(u8, Role),
}

/// Builds a digest from tokens, one at a time.
pub(crate) struct Digester<S> {
    out: Output<S>,
    /// The classes of token a space goes before, after the last token written (see
    /// [`Space::before`]).
    spaced: u16,
    /// A `-` or `+` here would be a sign: the previous token does not end an operand.
    sign_ok: bool,
    /// Something is pending or a list is followed: the next token takes the slow path.
    busy: bool,
    pending: Pending,
    list: List,
}

impl<S: Sink> Digester<S> {
    pub(crate) fn new(sink: S) -> Self {
        Digester {
            out: Output::new(sink),
            spaced: Space::Start.before(),
            sign_ok: true,
            busy: false,
            pending: Pending::Nothing,
            list: List::Off,
        }
    }

    /// Feeds the next token of the text (comments are ignored).
    #[inline(always)]
    pub(crate) fn feed(&mut self, src: &[u8], t: &Token) {
        if self.busy {
            self.feed_slow(src, t);
        } else if t.kind == Kind::Word {
            // Tests in order of frequency rather than a jump table.
            self.word(src, t);
        } else if let Kind::Punct(c) = t.kind {
            self.punct(c, None);
        } else if matches!(t.kind, Kind::Number | Kind::Param | Kind::Str) {
            self.literal();
        } else {
            self.other(src, t);
        }
    }

    /// Tokens other than words and single bytes.
    #[inline(never)]
    fn other(&mut self, src: &[u8], t: &Token) {
        match t.kind {
            Kind::Str | Kind::Number | Kind::Param => self.literal(),
            Kind::QuotedIdent => {
                self.span(Space::Word, src, t);
                self.sign_ok = false;
            }
            Kind::Cast => {
                // `::`, two bytes: a span too.
                self.span(Space::Cast, src, t);
                self.sign_ok = true;
            }
            Kind::Op => {
                self.span(Space::Op, src, t);
                self.sign_ok = true;
            }
            Kind::Word => self.word(src, t),
            Kind::Punct(c) => self.punct(c, None),
            Kind::Comment => {}
        }
    }

    /// An unquoted word: a keyword in upper case, any other in lower case.
    #[inline(always)]
    fn word(&mut self, src: &[u8], t: &Token) {
        let space = self.space(Space::Word);
        self.sign_ok = false;
        let len = t.end - t.start;
        if let Some(k) = words::keyword(t.kw) {
            if len <= 8 {
                self.out.push_word8(space, k.upper[0], len);
            } else {
                self.out.push_word(space, k.upper, len);
            }
            return self.keyword(k);
        }
        if len > 8 {
            return self.long_word(src, t, space);
        }
        let w = packed::read_n(src, t.start, len);
        self.out.push_word8(space, packed::lower(w), len);
    }

    /// A word of more than eight bytes that is not a keyword.
    #[inline(never)]
    fn long_word(&mut self, src: &[u8], t: &Token, space: bool) {
        let len = t.end - t.start;
        let Some(w) = packed::read(src, t.start, len) else {
            if space {
                self.out.push_byte(false, b' ');
            }
            return self.out.push_span(src, t.start, t.end, true);
        };
        let lower = [packed::lower(w[0]), packed::lower(w[1])];
        self.out.push_word(space, lower, len);
    }

    /// After keyword `k`.
    #[inline(always)]
    fn keyword(&mut self, k: &words::Keyword) {
        self.sign_ok = k.sign_ok;
        if k.spaced {
            self.spaced = Space::Key.before();
        }
        if k.opener != 0 {
            self.pending = Pending::Opener(k.opener, k.role);
            self.busy = true;
        }
    }

    /// A single-byte token; `opener` opens a list of literals here, if any.
    #[inline(always)]
    fn punct(&mut self, c: u8, opener: Option<(u8, Role)>) {
        if matches!(c, b'-' | b'+') && self.sign_ok {
            self.pending = Pending::Sign(c);
            self.busy = true;
            return;
        }
        if let Some((_, role)) = opener.filter(|o| o.0 == c) {
            self.open_list(c, role);
        }
        let class = PUNCT[usize::from(c)];
        let space = self.space(class);
        self.out.push_byte(space, c);
        self.sign_ok = class != Space::Close;
    }

    /// A literal: `?`.
    #[inline(always)]
    fn literal(&mut self) {
        let space = self.space(Space::Word);
        self.out.push_byte(space, b'?');
        self.sign_ok = false;
    }

    /// Writes token `t` of class `class` as it is, after the space it needs.
    #[inline(always)]
    fn span(&mut self, class: Space, src: &[u8], t: &Token) {
        if self.space(class) {
            self.out.push_byte(false, b' ');
        }
        self.out.push_span(src, t.start, t.end, false);
    }

    /// Whether a space goes before a token of class `class`, which becomes the last one.
    #[inline(always)]
    fn space(&mut self, class: Space) -> bool {
        let space = self.spaced & (1 << class as u8) != 0;
        self.spaced = class.before();
        space
    }

    /// Ends the text; returns the id.
    pub(crate) fn finish(&mut self) -> u64 {
        if let Pending::Sign(sign) = self.pending {
            let space = self.space(Space::Op);
            self.out.push_byte(space, sign);
        }
        self.out.id()
    }
}

#[cfg(test)]
mod tests;
