//! Shape keys: what a statement text is to the scanner, literal values left out.
//!
//! The scan of a text depends on its tokens — their kinds, the words, operators and
//! punctuation as written, and comments only through a routing hint — and, for a few
//! statements only, on where the tokens are or what a literal says (a routing hint's span,
//! the spans of unknown functions' names, the value a `SET` gives, `EXPLAIN (ANALYZE 'off')`).
//! A text's shape key writes every token but a literal or a comment as it is, a literal
//! (string, number, parameter) as its kind alone and a comment as a comment (a text with a
//! comment that mentions `sluice:` has no key): two texts with the same key lex to the same
//! tokens but for the literals' values and the comments' words. So wherever
//! [`PgScan::same_for_shape`] holds of one text's scan, every text of its key scans the same
//! (routing, commands, pins, digest id), and a caller may keep the scan by the key instead of
//! scanning again (`SELECT ... WHERE id = 7` and `... id = 8` are one entry).
//!
//! Building a key is a lexing pass without the classification and the digest: 40–60 % of a
//! scan's cost (`bench/src/bin/pgscan.rs`).

use super::lexer::{Kind, Lexer};
use super::{PgCommand, PgScan};

/// Longest key built (in bytes): a text with a longer one has none (it is scanned every time).
pub const MAX_SHAPE_KEY: usize = 1024;

/// Key bytes that say a literal of each kind came (the other tokens start with a byte above).
const STRING: u8 = 1;
const NUMBER: u8 = 2;
const PARAM: u8 = 3;
/// Lead byte of the other tokens: a single byte (`(`, `=`, ...) and the byte itself.
const SINGLE: u8 = 4;
/// Lead bytes of the tokens written whole: then the text's length (two bytes) and the text.
const WORD: u8 = 5;
const QUOTED: u8 = 6;
const CAST: u8 = 7;
const OP: u8 = 8;
const COMMENT: u8 = 9;

/// A shape key, built in place (no allocation): see [`shape_key`].
pub struct ShapeKey {
    buf: [u8; MAX_SHAPE_KEY],
    len: usize,
}

impl Default for ShapeKey {
    fn default() -> Self {
        ShapeKey {
            buf: [0; MAX_SHAPE_KEY],
            len: 0,
        }
    }
}

impl ShapeKey {
    /// The key's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or_default()
    }

    /// Appends `bytes`; `None` if they do not fit.
    #[inline(always)]
    fn put(&mut self, bytes: &[u8]) -> Option<()> {
        let end = self.len + bytes.len();
        self.buf.get_mut(self.len..end)?.copy_from_slice(bytes);
        self.len = end;
        Some(())
    }

    /// Appends a token written whole: `lead`, the length of `sql[start..end]` (two bytes),
    /// then those bytes. A short token (most are: keywords, names) is copied as a fixed 16
    /// bytes where both sides have them — a move of its own, not a call of `memcpy` per token
    /// (what lies past the token in the key is overwritten by the next one, or past its end).
    #[inline(always)]
    fn put_token(&mut self, lead: u8, sql: &[u8], start: usize, end: usize) -> Option<()> {
        const SHORT: usize = 16;
        let n = end.checked_sub(start)?;
        let len = u16::try_from(n).ok()?.to_le_bytes();
        let at = self.len;
        if n <= SHORT {
            if let (Some(dst), Some(src)) = (
                self.buf.get_mut(at..at + 3 + SHORT),
                sql.get(start..start + SHORT),
            ) {
                dst[..3].copy_from_slice(&[lead, len[0], len[1]]);
                dst[3..].copy_from_slice(src);
                self.len = at + 3 + n;
                return Some(());
            }
        }
        self.put(&[lead, len[0], len[1]])?;
        self.put(sql.get(start..end)?)
    }
}

/// Builds the shape key of `sql` in `key`. False, with `key` unspecified, if it would be longer
/// than [`MAX_SHAPE_KEY`] bytes.
pub fn shape_key(sql: &[u8], key: &mut ShapeKey) -> bool {
    key.len = 0;
    build(sql, key).is_some()
}

fn build(sql: &[u8], key: &mut ShapeKey) -> Option<()> {
    for t in Lexer::new(sql).comments(true).without_keywords() {
        let lead = match t.kind {
            Kind::Str => {
                key.put(&[STRING])?;
                continue;
            }
            Kind::Number => {
                key.put(&[NUMBER])?;
                continue;
            }
            Kind::Param => {
                key.put(&[PARAM])?;
                continue;
            }
            Kind::Punct(c) => {
                key.put(&[SINGLE, c])?;
                continue;
            }
            Kind::Comment => {
                // What a comment says matters only through a routing hint (such a text has no
                // key: it is scanned every time); otherwise it is left out, so that comments
                // that differ from one statement to the next (a request id, a trace context)
                // do not make shapes of their own.
                if mentions_hint(t.text(sql)) {
                    return None;
                }
                key.put(&[COMMENT])?;
                continue;
            }
            // `set_config`'s third argument, a literal, decides whether the text pins
            // (`is_local`): such a text has no key, it is scanned every time.
            Kind::Word if t.text(sql).eq_ignore_ascii_case(b"set_config") => return None,
            Kind::QuotedIdent if t.text(sql) == b"\"set_config\"" => return None,
            Kind::Word => WORD,
            Kind::QuotedIdent => QUOTED,
            Kind::Cast => CAST,
            Kind::Op => OP,
        };
        // The length keeps the key unambiguous whatever bytes a token holds (one that fits in
        // a key is shorter than 64 KiB).
        key.put_token(lead, sql, t.start, t.end)?;
    }
    Some(())
}

/// The comment `text` mentions `sluice:` (in any case), as a routing hint does.
fn mentions_hint(text: &[u8]) -> bool {
    const MARK: &[u8] = b"sluice:";
    crate::find_ignore_case(text, MARK).is_some()
}

impl PgScan {
    /// True if every text with the same [`shape_key`] as the one scanned scans the same: a
    /// single query or data-modifying statement (`SELECT`, `VALUES`, `TABLE`, `WITH`,
    /// `INSERT`, `UPDATE`, `DELETE`, `MERGE`) without a routing hint and without a call to a
    /// function sluice does not know (both are reported by their place in the text). What
    /// else a text can say through a literal's value or a token's place (a `SET`'s value,
    /// `EXPLAIN`'s options, a `DEALLOCATE`'s name, the statements of a multi-statement text)
    /// is in none of these.
    pub fn same_for_shape(&self) -> bool {
        self.statements == 1
            && self.hint.is_none()
            && self.user_calls.is_none()
            && self.set.is_none()
            && matches!(
                self.command,
                PgCommand::Select
                    | PgCommand::Insert
                    | PgCommand::Update
                    | PgCommand::Delete
                    | PgCommand::Merge
            )
    }
}
