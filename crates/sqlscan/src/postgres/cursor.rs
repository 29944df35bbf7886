//! The classification's token source: the tokens of one statement at a time, with look-ahead
//! and look-back.
//!
//! The cursor lexes ahead into a small buffer: one loop lexes up to [`AHEAD`] tokens, reads
//! comments for a routing hint and finds the `;` that ends the statement, then another feeds
//! the new tokens (comments aside) to the digest, each once, in order. The classification
//! takes its tokens from the buffer: a look-ahead is a read of it, and the calls into the
//! lexer and the digester are paid per buffer rather than per token. The last [`KEEP`] tokens
//! taken stay in the buffer when it is refilled, so that the walk can look back at the
//! tokens before a `(` instead of recording every token it passes.

use super::digest::{Digester, HashOnly};
use super::keywords::Kw;
use super::lexer::{Kind, Lexer, Token};
use super::Boundary;

/// Tokens lexed ahead at most, with those kept for look-back.
const AHEAD: usize = 16;

/// Tokens kept for look-back: the last one taken and the three before it.
pub(super) const KEEP: usize = 4;

/// No token: what fills the buffer before the lexer does. A word (`Kind`'s first variant)
/// with nothing else set is all zero bytes as laid out today: filling the buffer with zeros
/// costs less than copying another value into it.
const NONE: Token = Token {
    kind: Kind::Word,
    kw: Kw::None,
    start: 0,
    end: 0,
};

/// Tokens of one statement at a time; see the module's documentation.
pub(super) struct Cursor<'a> {
    lx: Lexer<'a>,
    pub(super) src: &'a [u8],
    /// Tokens lexed: `buf[..head]` taken (the last [`KEEP`] of them can be looked back at),
    /// `buf[head..limit]` the current statement's still to be taken, and when `ended` by a
    /// `;`, that `;` is `buf[limit]` (`tail` is `limit + 1`).
    buf: [Token; AHEAD],
    head: usize,
    limit: usize,
    tail: usize,
    /// How many tokens (comments aside) came before `buf[0]`.
    base: usize,
    bound: Boundary,
    /// The current statement's `;` (or the end of input) has been lexed.
    ended: bool,
    /// The end of input has been lexed.
    eof: bool,
    hint: Option<(usize, usize)>,
    /// The whole text's digest, without its text.
    digest: Digester<HashOnly>,
}

impl<'a> Cursor<'a> {
    pub(super) fn new(src: &'a [u8]) -> Self {
        Cursor {
            lx: Lexer::new(src).comments(true),
            src,
            buf: [NONE; AHEAD],
            head: 0,
            limit: 0,
            tail: 0,
            base: 0,
            bound: Boundary::default(),
            // Before the first statement: `start_statement` begins one.
            ended: true,
            eof: false,
            hint: None,
            digest: Digester::new(HashOnly),
        }
    }

    /// The next token of the current statement.
    #[inline(always)]
    pub(super) fn next(&mut self) -> Option<Token> {
        if self.head < self.limit {
            if let Some(&t) = self.buf.get(self.head) {
                self.head += 1;
                return Some(t);
            }
        }
        if self.ended {
            return None;
        }
        let t = self.peek_ahead();
        self.head += usize::from(t.is_some());
        t
    }

    /// Takes the tokens of the current statement lexed already for which `passed` holds.
    #[inline(always)]
    pub(super) fn skip(&mut self, passed: impl Fn(&Token) -> bool) {
        while let Some(t) = self.buf.get(self.head).filter(|_| self.head < self.limit) {
            if !passed(t) {
                break;
            }
            self.head += 1;
        }
    }

    /// The next token of the current statement, left unconsumed.
    #[inline(always)]
    pub(super) fn peek(&mut self) -> Option<Token> {
        if self.head < self.limit {
            return self.buf.get(self.head).copied();
        }
        if self.ended {
            return None;
        }
        self.peek_ahead()
    }

    /// [`Cursor::peek`] when the buffer holds no more of the statement's tokens, which does
    /// not end there.
    #[inline(never)]
    fn peek_ahead(&mut self) -> Option<Token> {
        self.fill();
        if self.head < self.limit {
            self.buf.get(self.head).copied()
        } else {
            None
        }
    }

    /// Lexes ahead, after the tokens kept for look-back, up to the end of the buffer, of the
    /// statement or of the input. All tokens lexed before have been taken or skipped.
    #[inline(never)]
    fn fill(&mut self) {
        let src = self.src;
        let keep = self.tail.min(KEEP);
        let from = self.tail - keep;
        if from > 0 {
            self.buf.copy_within(from..self.tail, 0);
            self.base += from;
        }
        let mut n = keep;
        let mut limit = None;
        while n < AHEAD {
            let Some(t) = self.lx.next() else {
                self.eof = true;
                self.ended = true;
                break;
            };
            if t.kind == Kind::Comment {
                if self.hint.is_none() {
                    self.hint = find_hint(src, &t);
                }
                continue;
            }
            if let Some(slot) = self.buf.get_mut(n) {
                // Field by field: a copy of the whole token would copy its padding too.
                slot.kind = t.kind;
                slot.kw = t.kw;
                slot.start = t.start;
                slot.end = t.end;
            }
            n += 1;
            if self.bound.feed(&t) {
                self.ended = true;
                // A text that ends with its `;` needs no other call to find that it ended.
                self.eof = t.end == src.len();
                limit = Some(n - 1);
                break;
            }
        }
        for t in self.buf.get(keep..n).unwrap_or_default() {
            self.digest.feed(src, t);
        }
        self.head = keep;
        self.tail = n;
        self.limit = limit.unwrap_or(n);
    }

    /// How many tokens (comments aside) came before the next one.
    #[inline(always)]
    pub(super) fn position(&self) -> usize {
        self.base + self.head
    }

    /// The token `i` before the last one taken (`i` below [`KEEP`]), with its position.
    #[inline(always)]
    pub(super) fn back(&self, i: usize) -> Option<(usize, &Token)> {
        let at = self.head.checked_sub(i + 1)?;
        Some((self.base + at, self.buf.get(at)?))
    }

    /// The next token of the current statement is the keyword `kw`.
    #[inline(always)]
    pub(super) fn peek_is(&mut self, kw: Kw) -> bool {
        self.peek().is_some_and(|t| t.is(kw))
    }

    /// The next token of the current statement is the punctuation byte `c`.
    #[inline(always)]
    pub(super) fn peek_punct(&mut self, c: u8) -> bool {
        self.peek().is_some_and(|t| t.is_punct(c))
    }

    /// Consumes the next token if it is the keyword `kw`.
    #[inline(always)]
    pub(super) fn eat(&mut self, kw: Kw) -> bool {
        let hit = self.peek_is(kw);
        self.head += usize::from(hit);
        hit
    }

    /// Skips what is left of the current statement, then returns the first token of the next
    /// non-empty one, or `None` at the end of input.
    pub(super) fn start_statement(&mut self) -> Option<Token> {
        loop {
            while !self.ended {
                self.head = self.limit;
                self.fill();
            }
            if self.eof {
                return None;
            }
            // Past the `;` that ended the statement.
            self.head = self.tail;
            self.limit = self.tail;
            self.ended = false;
            self.bound = Boundary::default();
            if let Some(t) = self.next() {
                return Some(t);
            }
        }
    }

    /// The routing hint found in the comments, once the input is consumed.
    pub(super) fn hint(&self) -> Option<(usize, usize)> {
        self.hint
    }

    /// The digest id of the whole text, once the input is consumed.
    pub(super) fn digest(&mut self) -> u64 {
        self.digest.finish()
    }
}

/// Finds `sluice:<target>` in a comment; returns the target's span in `src`.
fn find_hint(src: &[u8], comment: &Token) -> Option<(usize, usize)> {
    const MARK: &[u8] = b"sluice:";
    let text = comment.text(src);
    let at = crate::find_ignore_case(text, MARK)?;
    let start = comment.start + at + MARK.len();
    let len = src[start..comment.end]
        .iter()
        .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        .count();
    (len > 0).then_some((start, start + len))
}
