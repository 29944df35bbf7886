//! A text of a known shape kept with the places of its literals, to tell a text of the same
//! shape without building its key ([`ShapeSample::same_shape`]).
//!
//! Most traffic repeats one text with other values: `... WHERE aid = 12345`, then
//! `... WHERE aid = 731`. Building a [`shape_key`](super::shape_key) lexes the whole text;
//! comparing it with a sample of its shape compares the bytes between the literals (a
//! `memcmp`) and lexes only the literals.
//!
//! **Why a match has the sample's shape key.** The sample's text is lexed once; its
//! literals (strings, numbers, parameters) and the stretches between them are kept. A text
//! matches when each stretch is found again byte for byte, in order, and where the sample has a
//! literal the text has one of the same kind, lexed from that very byte. The lexer keeps no
//! state from one token to the next but its position, so lexing the text from its start
//! reaches each of those literals as a token boundary — provided no token of a stretch runs
//! into the literal after it. A sample is therefore taken only where the byte before each
//! literal (after the first byte of the text) is white space, `(`, `,`, `=`, `<` or `>`: no
//! token extends over a literal's first byte from there (a literal starts with a digit, `.`,
//! a quote, `$` or a string prefix letter, none of them an operator byte). The text then lexes
//! to the sample's tokens but for the literals' values and lengths: the same shape key. Comments
//! are compared as bytes, as any stretch (stricter than the key, which leaves their words out).

use super::lexer::{Kind, Lexer};

/// Longest text sampled.
pub const MAX_SAMPLE: usize = 1024;
/// Most literals in a sampled text.
pub const MAX_LITERALS: usize = 32;

/// See the module's documentation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShapeSample {
    text: Box<[u8]>,
    /// The literals: start, end, kind.
    literals: Box<[(u32, u32, Kind)]>,
}

impl ShapeSample {
    /// A sample of `sql`, if it can be taken: at most [`MAX_SAMPLE`] bytes and
    /// [`MAX_LITERALS`] literals, each at the start of the text or after a byte the module's
    /// documentation allows.
    pub fn of(sql: &[u8]) -> Option<ShapeSample> {
        if sql.len() > MAX_SAMPLE {
            return None;
        }
        let mut literals = Vec::new();
        for t in Lexer::new(sql).without_keywords() {
            if !matches!(t.kind, Kind::Str | Kind::Number | Kind::Param) {
                continue;
            }
            if t.start > 0 && !separates(*sql.get(t.start - 1)?) {
                return None;
            }
            if literals.len() == MAX_LITERALS {
                return None;
            }
            literals.push((
                u32::try_from(t.start).ok()?,
                u32::try_from(t.end).ok()?,
                t.kind,
            ));
        }
        Some(ShapeSample {
            text: sql.into(),
            literals: literals.into(),
        })
    }

    /// The sampled text.
    pub fn text(&self) -> &[u8] {
        &self.text
    }

    /// The bytes before the first literal (the same in every text that matches).
    pub fn fixed_prefix(&self) -> usize {
        self.literals
            .first()
            .map_or(self.text.len(), |l| l.0 as usize)
    }

    /// True if `sql` is the sample's text but for the literals' values (see the module's
    /// documentation): then it has the sample's shape key.
    pub fn same_shape(&self, sql: &[u8]) -> bool {
        let (mut p, mut q) = (0usize, 0usize);
        for &(start, end, kind) in self.literals.iter() {
            let (start, end) = (start as usize, end as usize);
            let Some(stretch) = self.text.get(p..start) else {
                return false;
            };
            if sql.get(q..q + stretch.len()) != Some(stretch) {
                return false;
            }
            q += stretch.len();
            match Lexer::new(sql).at(q).without_keywords().next() {
                Some(t) if t.start == q && t.kind == kind => q = t.end,
                _ => return false,
            }
            p = end;
        }
        sql.get(q..) == self.text.get(p..)
    }
}

/// A byte after which no token runs into a literal.
fn separates(b: u8) -> bool {
    matches!(
        b,
        b' ' | b'\t' | b'\n' | b'\r' | b'\x0c' | b'(' | b',' | b'=' | b'<' | b'>'
    )
}
