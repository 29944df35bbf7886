//! Statement digests: the shape of a statement with its literals taken out, so that
//! `SELECT * FROM t WHERE id = 1` and `select * from t where id=42 -- x` count as one query.
//!
//! One pass over the lexer's tokens: literals (strings, numbers, hex/bit strings, a leading
//! minus sign) become `?`, comments and whitespace disappear (tokens are re-joined with single
//! spaces by fixed rules), and a list of literals in `IN (...)` or the rows of `VALUES (...),
//! (...)` collapse to `(...)`, whatever their length. Common keywords and function names are
//! upper-cased; other unquoted words keep their case (table names may be case-sensitive). The digest id is a 64-bit FNV-1a hash of the whole
//! normalised text; the text kept for display is cut at [`MAX_TEXT`] bytes.

use crate::lexer::{Kind, Lexer, Token};

/// Longest digest text kept (the hash covers all of it).
pub const MAX_TEXT: usize = 2048;

/// A statement's digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Digest {
    /// FNV-1a 64 hash of the full normalised text.
    pub id: u64,
    /// The normalised text, cut at [`MAX_TEXT`] bytes (on a character boundary).
    pub text: String,
}

/// Normalises `sql` into `out` (cleared first) and returns the hash of the full text. `out`
/// keeps at most [`MAX_TEXT`] bytes; reuse it across calls to avoid allocating.
pub fn normalize_into(sql: &[u8], no_backslash_escapes: bool, out: &mut Vec<u8>) -> u64 {
    out.clear();
    let mut w = Writer {
        out,
        hash: FNV_OFFSET,
        full: false,
    };
    let tokens: Lexer<'_> = Lexer::new(sql).no_backslash_escapes(no_backslash_escapes);
    let mut toks = tokens.peekable();
    let mut prev: Option<Token> = None;
    // What the previous emitted token was, for spacing.
    let mut last = Last::Start;
    while let Some(t) = toks.next() {
        // A sign before a number, where it cannot be a binary minus, is part of the literal.
        if (t.is_punct(b'-') || t.is_punct(b'+'))
            && matches!(toks.peek(), Some(n) if n.kind == Kind::Number)
            && !prev.is_some_and(|p| is_operand(p.kind) || p.is_punct(b')'))
        {
            prev = Some(t);
            continue;
        }
        // `x'1F'`, `b'01'`, `N'..'`, `_utf8mb4'..'`: the prefix is part of the literal.
        if t.kind == Kind::Word
            && is_literal_prefix(t.text(sql))
            && matches!(toks.peek(), Some(n) if n.kind == Kind::Str && n.start == t.end)
        {
            continue;
        }
        // `IN (` or `VALUES (` followed by a list of literals: collapse.
        let collapsing = prev.is_some_and(|p| {
            p.is_word(sql, "IN") || p.is_word(sql, "VALUES") || p.is_word(sql, "VALUE")
        }) && t.is_punct(b'(');
        if collapsing {
            let mut look = toks.clone();
            if literal_rows(&mut look, sql).is_some() {
                w.push(b" (...)");
                last = Last::Close;
                toks = look;
                prev = Some(Token {
                    kind: Kind::Punct(b')'),
                    start: t.start,
                    end: t.start,
                });
                continue;
            }
        }
        let (bytes, kind): (&[u8], Last) = match t.kind {
            Kind::Str | Kind::Number => (b"?", Last::Operand),
            Kind::Placeholder => (b"?", Last::Operand),
            Kind::Word => match keyword(t.text(sql)) {
                Some(k) => (k.as_bytes(), Last::Operand),
                None => (t.text(sql), Last::Operand),
            },
            Kind::QuotedIdent | Kind::UserVar | Kind::SysVar => (t.text(sql), Last::Operand),
            Kind::Assign => (b":=", Last::Punct),
            Kind::Punct(b'(') => (b"(", Last::Open),
            Kind::Punct(b')') => (b")", Last::Close),
            Kind::Punct(b',') => (b",", Last::Comma),
            Kind::Punct(b'.') => (b".", Last::Dot),
            Kind::Punct(b';') => (b";", Last::Comma),
            Kind::Punct(_) => (t.text(sql), Last::Punct),
        };
        // Multi-byte operators (`<=`, `<>`, `!=`, `||`) stay together.
        let glued =
            kind == Last::Punct && last == Last::Punct && prev.is_some_and(|p| p.end == t.start);
        if !glued {
            w.space_before(last, kind);
        }
        w.push(bytes);
        last = kind;
        prev = Some(t);
    }
    w.hash
}

/// The digest of `sql`.
pub fn digest(sql: &[u8], no_backslash_escapes: bool) -> Digest {
    let mut out = Vec::with_capacity(sql.len().min(MAX_TEXT));
    let id = normalize_into(sql, no_backslash_escapes, &mut out);
    // Invalid UTF-8 becomes U+FFFD, three bytes for one: cut again to keep the bound.
    let mut text = String::from_utf8_lossy(&out).into_owned();
    if text.len() > MAX_TEXT {
        let mut cut = MAX_TEXT;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    Digest { id, text }
}

/// Common keywords and function names, written in upper case in digests whatever the case
/// they were typed in (other words keep theirs: table names may be case-sensitive). Sorted.
const KEYWORDS: &[&str] = &[
    "ADD",
    "ALL",
    "ALTER",
    "AND",
    "ANY",
    "AS",
    "ASC",
    "AVG",
    "BEGIN",
    "BETWEEN",
    "BINARY",
    "BY",
    "CALL",
    "CASE",
    "CAST",
    "COALESCE",
    "COLLATE",
    "COMMIT",
    "CONCAT",
    "COUNT",
    "CREATE",
    "CROSS",
    "CURRENT_DATE",
    "CURRENT_TIMESTAMP",
    "DATABASE",
    "DEALLOCATE",
    "DEFAULT",
    "DELETE",
    "DESC",
    "DESCRIBE",
    "DISTINCT",
    "DIV",
    "DO",
    "DROP",
    "DUPLICATE",
    "ELSE",
    "END",
    "ESCAPE",
    "EXECUTE",
    "EXISTS",
    "EXPLAIN",
    "FALSE",
    "FOR",
    "FORCE",
    "FROM",
    "FULL",
    "GROUP",
    "HAVING",
    "IF",
    "IFNULL",
    "IGNORE",
    "IN",
    "INDEX",
    "INNER",
    "INSERT",
    "INTERVAL",
    "INTO",
    "IS",
    "JOIN",
    "KEY",
    "KILL",
    "LEFT",
    "LIKE",
    "LIMIT",
    "LOCK",
    "MATCH",
    "MAX",
    "MIN",
    "MOD",
    "NATURAL",
    "NOT",
    "NOW",
    "NULL",
    "OFFSET",
    "ON",
    "OR",
    "ORDER",
    "OUTER",
    "PREPARE",
    "RELEASE",
    "REPLACE",
    "RIGHT",
    "ROLLBACK",
    "SAVEPOINT",
    "SELECT",
    "SET",
    "SHARE",
    "SHOW",
    "START",
    "STRAIGHT_JOIN",
    "SUM",
    "TABLE",
    "THEN",
    "TO",
    "TRANSACTION",
    "TRUE",
    "TRUNCATE",
    "UNION",
    "UNIQUE",
    "UNLOCK",
    "UPDATE",
    "USE",
    "USING",
    "VALUE",
    "VALUES",
    "WHEN",
    "WHERE",
    "WITH",
    "XOR",
];

/// Slots of the keyword lookup table (a power of two, well above `KEYWORDS.len()`).
const KEYWORD_SLOTS: usize = 512;

/// Case-insensitive hash of a word, for the keyword table.
fn word_hash(w: &[u8]) -> usize {
    let mut h = FNV_OFFSET;
    for &b in w {
        h = (h ^ u64::from(b.to_ascii_uppercase())).wrapping_mul(FNV_PRIME);
    }
    h as usize
}

/// Open-addressing table of [`KEYWORDS`]: one hash and usually one comparison per word
/// (a binary search over the list cost more than the rest of the normalisation).
fn keyword_table() -> &'static [Option<&'static str>; KEYWORD_SLOTS] {
    static TABLE: std::sync::OnceLock<[Option<&'static str>; KEYWORD_SLOTS]> =
        std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = [None; KEYWORD_SLOTS];
        for k in KEYWORDS {
            let mut i = word_hash(k.as_bytes()) % KEYWORD_SLOTS;
            while t[i].is_some() {
                i = (i + 1) % KEYWORD_SLOTS;
            }
            t[i] = Some(*k);
        }
        t
    })
}

/// The upper-case spelling of `w` if it is one of [`KEYWORDS`].
fn keyword(w: &[u8]) -> Option<&'static str> {
    if w.len() > 20 || !w.first().is_some_and(u8::is_ascii_alphabetic) {
        return None;
    }
    let t = keyword_table();
    let mut i = word_hash(w) % KEYWORD_SLOTS;
    while let Some(k) = t[i] {
        if k.as_bytes().eq_ignore_ascii_case(w) {
            return Some(k);
        }
        i = (i + 1) % KEYWORD_SLOTS;
    }
    None
}

/// Words that, written right before a string, make it a hex, bit, national or charset-
/// introduced literal.
fn is_literal_prefix(w: &[u8]) -> bool {
    matches!(w, b"x" | b"X" | b"b" | b"B" | b"n" | b"N") || w.first() == Some(&b'_')
}

fn is_operand(k: Kind) -> bool {
    matches!(
        k,
        Kind::Word
            | Kind::QuotedIdent
            | Kind::Str
            | Kind::Number
            | Kind::UserVar
            | Kind::SysVar
            | Kind::Placeholder
    )
}

/// After an opening `(`: if what follows is a list of literals `a, b, ...)`, optionally
/// followed by more such rows `, (...)` (for VALUES), consumes it.
fn literal_rows<I: Iterator<Item = Token> + Clone>(toks: &mut I, sql: &[u8]) -> Option<()> {
    loop {
        // Inside a row, just after `(`.
        let mut expect_value = true;
        loop {
            let t = toks.next()?;
            match t.kind {
                Kind::Str | Kind::Number | Kind::Placeholder if expect_value => {
                    expect_value = false
                }
                Kind::Word
                    if expect_value
                        && ["NULL", "TRUE", "FALSE", "DEFAULT"]
                            .iter()
                            .any(|k| t.is_word(sql, k)) =>
                {
                    expect_value = false
                }
                Kind::Punct(b'-' | b'+') if expect_value => {}
                Kind::Word if expect_value && is_literal_prefix(t.text(sql)) => {}
                Kind::Punct(b',') if !expect_value => expect_value = true,
                Kind::Punct(b')') if !expect_value => break,
                _ => return None,
            }
        }
        // Another row? Only `, (` continues the list.
        let mut look = toks.clone();
        match (look.next(), look.next()) {
            (Some(c), Some(o)) if c.is_punct(b',') && o.is_punct(b'(') => *toks = look,
            _ => return Some(()),
        }
    }
}

/// The kind of the last emitted token, for spacing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Last {
    Start,
    Operand,
    Punct,
    Open,
    Close,
    Comma,
    Dot,
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

struct Writer<'o> {
    out: &'o mut Vec<u8>,
    hash: u64,
    /// The text reached [`MAX_TEXT`]: only the hash goes on.
    full: bool,
}

impl Writer<'_> {
    fn push(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.hash = (self.hash ^ u64::from(b)).wrapping_mul(FNV_PRIME);
        }
        if self.full {
            return;
        }
        let room = MAX_TEXT - self.out.len();
        if bytes.len() <= room {
            self.out.extend_from_slice(bytes);
            return;
        }
        // Cut on a UTF-8 character boundary; nothing more is appended.
        let mut cut = room;
        while cut > 0 && (bytes[cut] & 0xC0) == 0x80 {
            cut -= 1;
        }
        self.out.extend_from_slice(&bytes[..cut]);
        self.full = true;
    }

    /// One space between tokens, except after `(` and `.`, before `)`, `,` and `.`, and at
    /// the start.
    fn space_before(&mut self, last: Last, next: Last) {
        let none = matches!(last, Last::Start | Last::Open | Last::Dot)
            || matches!(next, Last::Close | Last::Comma | Last::Dot)
            || (next == Last::Open && matches!(last, Last::Operand));
        if !none {
            self.push(b" ");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(sql: &str) -> String {
        digest(sql.as_bytes(), false).text
    }

    /// Found by fuzzing (target `sqlscan`): text that is not UTF-8 grew threefold in the
    /// digest text (U+FFFD for each byte), past [`MAX_TEXT`].
    #[test]
    fn invalid_utf8_keeps_the_text_bound() {
        let mut sql = b"SELECT ".to_vec();
        sql.extend(std::iter::repeat_n(0xfd, 3 * MAX_TEXT));
        let t = digest(&sql, false).text;
        assert!(t.len() <= MAX_TEXT, "{} bytes", t.len());
        assert!(t.starts_with("SELECT \u{fffd}"));
    }

    #[test]
    fn literals_comments_and_whitespace_go() {
        assert_eq!(
            d("SELECT * FROM t WHERE id = 1"),
            "SELECT * FROM t WHERE id = ?"
        );
        assert_eq!(
            d("  SELECT  *\n FROM t /* why */ WHERE id=42 -- trailing\n"),
            "SELECT * FROM t WHERE id = ?"
        );
        assert_eq!(
            d("SELECT name FROM users WHERE email = 'a@b.c' AND age > -3.5e2"),
            "SELECT name FROM users WHERE email = ? AND age > ?"
        );
        assert_eq!(d("SELECT x'1F', 0x1F, b'01', \"s\""), "SELECT ?, ?, ?, ?");
        assert_eq!(d("SELECT a-1, a - 1, f(-1)"), "SELECT a - ?, a - ?, f(?)");
        assert_eq!(d("SELECT COUNT(*) FROM t1"), "SELECT COUNT(*) FROM t1");
        assert_eq!(
            d("UPDATE t SET a=a+1 WHERE b<=2 AND c<>'x'"),
            "UPDATE t SET a = a + ? WHERE b <= ? AND c <> ?"
        );
        assert_eq!(
            d("SELECT `weird name`.c FROM db.`t` WHERE @v := @@session.sql_mode"),
            "SELECT `weird name`.c FROM db.`t` WHERE @v := @@session.sql_mode"
        );
    }

    #[test]
    fn lists_collapse_whatever_their_length() {
        let one = digest(b"SELECT * FROM t WHERE id IN (1)", false);
        let many = digest(b"select * from t where id in (1, 2, 3,'x', NULL)", false);
        assert_eq!(one.text, "SELECT * FROM t WHERE id IN (...)");
        assert_eq!(many.text, "SELECT * FROM t WHERE id IN (...)");
        assert_eq!(
            d("INSERT INTO t (a, b) VALUES (1, 'x'), (2, 'y'), (3, NULL)"),
            "INSERT INTO t(a, b) VALUES (...)"
        );
        assert_eq!(
            d("INSERT INTO t VALUES (1,2)"),
            d("INSERT INTO t VALUES (3, 4), (5, 6)")
        );
        // Not only literals: kept as written (normalised).
        assert_eq!(
            d("SELECT * FROM t WHERE id IN (SELECT id FROM u WHERE k = 1)"),
            "SELECT * FROM t WHERE id IN(SELECT id FROM u WHERE k = ?)"
        );
        assert_eq!(
            d("INSERT INTO t VALUES (1, NOW())"),
            "INSERT INTO t VALUES(?, NOW())"
        );
    }

    #[test]
    fn keywords_are_upper_cased_names_keep_their_case() {
        assert_eq!(
            d("select count(*) from Orders o left join items on o.id = items.oid"),
            "SELECT COUNT(*) FROM Orders o LEFT JOIN items ON o.id = items.oid"
        );
        assert_eq!(digest(b"select 1", false).id, digest(b"SELECT 2", false).id);
        let mut sorted = KEYWORDS.to_vec();
        sorted.sort();
        assert_eq!(sorted, KEYWORDS, "KEYWORDS must stay sorted");
    }

    #[test]
    fn same_shape_same_id_different_shape_different_id() {
        let a = digest(b"SELECT c FROM t WHERE id = 1", false);
        let b = digest(b"SELECT c FROM t WHERE id = 99", false);
        let c = digest(b"SELECT c FROM t WHERE k = 1", false);
        assert_eq!(a.id, b.id);
        assert_ne!(a.id, c.id);
        // Placeholders of prepared statements match literals.
        assert_eq!(digest(b"SELECT c FROM t WHERE id = ?", false).id, a.id);
    }

    #[test]
    fn long_text_is_cut_but_hashed_whole() {
        let cols: Vec<String> = (0..1000).map(|i| format!("column_{i}")).collect();
        let a = format!("SELECT {} FROM t", cols.join(", "));
        let b = format!("SELECT {} FROM u", cols.join(", "));
        let (da, db) = (digest(a.as_bytes(), false), digest(b.as_bytes(), false));
        assert!(da.text.len() <= MAX_TEXT);
        assert_eq!(da.text, db.text);
        assert_ne!(da.id, db.id);
        // Multi-byte characters are not split.
        let s = format!("SELECT {}ééé FROM t", "x".repeat(MAX_TEXT - 8));
        let t = digest(s.as_bytes(), false).text;
        assert!(t.len() <= MAX_TEXT && std::str::from_utf8(t.as_bytes()).is_ok());
    }

    #[test]
    fn malformed_input_never_panics() {
        for s in [
            "",
            "'",
            "SELECT 'unterminated",
            "IN (",
            "VALUES (1,",
            "-",
            "((((",
            "/*",
        ] {
            digest(s.as_bytes(), false);
        }
    }
}
