//! Unquoted words in a digest: folded to lower case, or written in upper case if they are one
//! of a short list of keywords.
//!
//! Only display and sign handling depend on the list: unquoted words are case-folded either
//! way, so the list never splits one statement shape into two digests. Words of up to 16
//! bytes (nearly all) are read as two little-endian `u64`s and case-folded eight bytes at a
//! time; a keyword is then found with one multiplication and one comparison.

/// What a keyword means to the digester.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Role {
    /// A reserved word after which a `-` or `+` before a number is a sign (`SELECT -1`,
    /// `THEN -1`, `LIMIT -1`).
    Operator,
    /// A word that can end an operand (a column may bear the name, a function call): a `-`
    /// after it is a binary minus.
    Operand,
    /// `NULL`, `TRUE`, `FALSE`, `DEFAULT`: may stand in a list of literals.
    Literal,
    /// `IN`: a `(` after it may open a list of literals.
    In,
    /// `VALUES`: a `(` after it may open rows of literals.
    Values,
    /// `ARRAY`: a `[` after it may open a list of literals.
    Array,
}

use Role::{Array, In, Literal, Operand, Operator, Values};

/// The keywords, upper case, sorted; at most [`SHORT`] bytes each.
const WORDS: &[(&str, Role)] = &[
    ("ABORT", Operand),
    ("ALL", Operator),
    ("ALTER", Operand),
    ("ANALYZE", Operand),
    ("AND", Operator),
    ("ANY", Operator),
    ("ARRAY", Array),
    ("AS", Operator),
    ("ASC", Operand),
    ("ATOMIC", Operand),
    ("AVG", Operand),
    ("BEGIN", Operand),
    ("BETWEEN", Operator),
    ("BY", Operator),
    ("CALL", Operand),
    ("CASE", Operator),
    ("CAST", Operand),
    ("COALESCE", Operand),
    ("COLLATE", Operator),
    ("COMMIT", Operand),
    ("CONFLICT", Operand),
    ("COPY", Operand),
    ("COUNT", Operand),
    ("CREATE", Operator),
    ("CROSS", Operator),
    ("CURRENT_DATE", Operand),
    ("CURRENT_TIME", Operand),
    ("CURRENT_USER", Operand),
    ("DEALLOCATE", Operand),
    ("DECLARE", Operand),
    ("DEFAULT", Literal),
    ("DELETE", Operand),
    ("DESC", Operand),
    ("DISCARD", Operand),
    ("DISTINCT", Operator),
    ("DO", Operator),
    ("DROP", Operand),
    ("ELSE", Operator),
    ("END", Operand),
    ("EXCEPT", Operator),
    ("EXECUTE", Operand),
    ("EXISTS", Operand),
    ("EXPLAIN", Operand),
    ("EXTRACT", Operand),
    ("FALSE", Literal),
    ("FETCH", Operator),
    ("FOR", Operator),
    ("FROM", Operator),
    ("FULL", Operator),
    ("FUNCTION", Operand),
    ("GRANT", Operator),
    ("GREATEST", Operand),
    ("GROUP", Operator),
    ("HAVING", Operator),
    ("ILIKE", Operator),
    ("IN", In),
    ("INNER", Operator),
    ("INSERT", Operand),
    ("INTERSECT", Operator),
    ("INTERVAL", Operand),
    ("INTO", Operator),
    ("IS", Operator),
    ("JOIN", Operator),
    ("LATERAL", Operator),
    ("LEAST", Operand),
    ("LEFT", Operator),
    ("LIKE", Operator),
    ("LIMIT", Operator),
    ("LISTEN", Operand),
    ("LOCK", Operand),
    ("LOCKED", Operand),
    ("MAX", Operand),
    ("MIN", Operand),
    ("NATURAL", Operator),
    ("NOT", Operator),
    ("NOTHING", Operand),
    ("NOTIFY", Operand),
    ("NOW", Operand),
    ("NOWAIT", Operand),
    ("NULL", Literal),
    ("NULLIF", Operand),
    ("OFFSET", Operator),
    ("ON", Operator),
    ("ONLY", Operator),
    ("OR", Operator),
    ("ORDER", Operator),
    ("OUTER", Operator),
    ("OVER", Operand),
    ("PARTITION", Operand),
    ("PREPARE", Operand),
    ("RECURSIVE", Operand),
    ("RELEASE", Operand),
    ("RESET", Operand),
    ("RETURNING", Operator),
    ("RIGHT", Operator),
    ("ROLLBACK", Operand),
    ("SAVEPOINT", Operand),
    ("SELECT", Operator),
    ("SET", Operand),
    ("SHARE", Operand),
    ("SHOW", Operand),
    ("SIMILAR", Operator),
    ("SKIP", Operand),
    ("SOME", Operator),
    ("START", Operand),
    ("SUM", Operand),
    ("TABLE", Operator),
    ("THEN", Operator),
    ("TO", Operator),
    ("TRANSACTION", Operand),
    ("TRUE", Literal),
    ("TRUNCATE", Operand),
    ("UNION", Operator),
    ("UNIQUE", Operator),
    ("UPDATE", Operand),
    ("USING", Operator),
    ("VACUUM", Operand),
    ("VALUES", Values),
    ("WHEN", Operator),
    ("WHERE", Operator),
    ("WINDOW", Operator),
    ("WITH", Operator),
];

/// Words up to this length are read as two `u64`s; longer ones are never keywords.
const SHORT: usize = 16;

/// A keyword as the digester uses it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Keyword {
    /// Its bytes folded with [`FOLD`], as two little-endian `u64`s padded with zeros.
    key: [u64; 2],
    /// Its upper-case spelling, the same way.
    pub(super) upper: [u64; 2],
    pub(super) role: Role,
    /// `role` is [`Role::Operator`]: a sign may follow.
    pub(super) sign_ok: bool,
    /// The byte that may open a list of literals after it (`(`, `[`), or 0.
    pub(super) opener: u8,
    /// Not a function: a `(` after it is spaced (`WHERE (`, `IN (`, `VALUES (`).
    pub(super) spaced: bool,
}

/// Slots of the lookup table: a power of two, about four per keyword, so that most words that
/// are not keywords meet an empty slot at once.
const SLOTS: usize = 512;

/// Setting bit 5 of every byte folds ASCII letters to lower case. It also changes `_`, `@`,
/// `[` ... and non-ASCII bytes, but no keyword holds those and `_` becomes DEL, which no word
/// holds: two words have the same key only if they are equal but for the case of ASCII
/// letters, or one of them is not a keyword.
const FOLD: u64 = 0x2020_2020_2020_2020;

/// Where a key's probe starts.
#[inline(always)]
const fn slot(k: [u64; 2]) -> usize {
    let h = (k[0] ^ k[1].rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (h >> (64 - SLOTS.trailing_zeros())) as usize
}

/// The bytes of a word of `n` bytes (1 to [`SHORT`]) among 16 read: masks for the two `u64`s
/// (none for an empty word, which [`keyword`] does not look up).
const MASKS: [[u64; 2]; SHORT + 1] = {
    let mut m = [[0u64; 2]; SHORT + 1];
    let mut n = 1;
    while n <= SHORT {
        let lo = if n >= 8 { 8 } else { n };
        m[n][0] = u64::MAX >> (64 - 8 * lo);
        if n > 8 {
            m[n][1] = u64::MAX >> (64 - 8 * (n - 8));
        }
        n += 1;
    }
    m
};

/// The keywords, in [`WORDS`]' order.
static KEYWORDS: [Keyword; WORDS.len()] = {
    let mut k = [Keyword {
        key: [0; 2],
        upper: [0; 2],
        role: Operand,
        sign_ok: false,
        opener: 0,
        spaced: false,
    }; WORDS.len()];
    let mut i = 0;
    while i < WORDS.len() {
        let w = WORDS[i].0.as_bytes();
        assert!(!w.is_empty() && w.len() <= SHORT);
        let (mut key, mut upper) = ([0u64; 2], [0u64; 2]);
        let mut j = 0;
        while j < w.len() {
            key[j / 8] |= ((w[j] | 0x20) as u64) << (8 * (j % 8));
            upper[j / 8] |= (w[j] as u64) << (8 * (j % 8));
            j += 1;
        }
        let role = WORDS[i].1;
        k[i] = Keyword {
            key,
            upper,
            role,
            sign_ok: matches!(role, Operator),
            opener: match role {
                In | Values => b'(',
                Array => b'[',
                _ => 0,
            },
            spaced: matches!(role, Operator | In | Values),
        };
        i += 1;
    }
    k
};

/// Open-addressing table over [`KEYWORDS`]: index + 1, 0 for an empty slot.
static TABLE: [u8; SLOTS] = {
    assert!(WORDS.len() < 255 && WORDS.len() * 3 < SLOTS);
    let mut t = [0u8; SLOTS];
    let mut k = 0;
    while k < WORDS.len() {
        let mut i = slot(KEYWORDS[k].key);
        while t[i] != 0 {
            i = (i + 1) & (SLOTS - 1);
        }
        t[i] = k as u8 + 1;
        k += 1;
    }
    t
};

/// Eight bytes of `src` from `at`, little-endian; zeros past the end.
#[inline(always)]
fn read8(src: &[u8], at: usize) -> u64 {
    match src.get(at..at + 8) {
        Some(s) => {
            let mut w = [0u8; 8];
            w.copy_from_slice(s);
            u64::from_le_bytes(w)
        }
        None => read8_tail(src, at),
    }
}

/// [`read8`] within eight bytes of the end: the last eight bytes, shifted.
#[inline(never)]
fn read8_tail(src: &[u8], at: usize) -> u64 {
    match src.len().checked_sub(8) {
        Some(from) if at >= from && at < src.len() => read8(src, from) >> (8 * (at - from)),
        _ => src
            .get(at..)
            .unwrap_or_default()
            .iter()
            .take(8)
            .rev()
            .fold(0, |w, &b| (w << 8) | u64::from(b)),
    }
}

/// The word of `len` bytes (1 to [`SHORT`]) at `start` in `src`, as two little-endian `u64`s
/// padded with zeros; `None` if it is longer.
#[inline(always)]
pub(super) fn read(src: &[u8], start: usize, len: usize) -> Option<[u64; 2]> {
    let [ma, mb] = *MASKS.get(len)?;
    let a = read8(src, start) & ma;
    let b = if len > 8 {
        read8(src, start + 8) & mb
    } else {
        0
    };
    Some([a, b])
}

/// The keyword whose key (its bytes folded by [`FOLD`], padded with zeros) is `k`.
#[inline(always)]
fn keyword_by_key(k: [u64; 2]) -> Option<&'static Keyword> {
    let mut i = slot(k);
    loop {
        let kw = KEYWORDS.get(usize::from(*TABLE.get(i)?).checked_sub(1)?)?;
        if kw.key == k {
            return Some(kw);
        }
        i = (i + 1) & (SLOTS - 1);
    }
}

/// The `n` bytes (1 to 8) at `at` in `src`, as a little-endian `u64` padded with zeros.
#[inline(always)]
pub(super) fn read_n(src: &[u8], at: usize, n: usize) -> u64 {
    read8(src, at) & MASKS.get(n).map_or(0, |m| m[0])
}

/// The keyword the word of `len` bytes [`read`] as `w` is, in any case.
#[inline(always)]
pub(super) fn keyword(w: [u64; 2], len: usize) -> Option<&'static Keyword> {
    // Fold only the word's bytes: the padding stays zero.
    let [ma, mb] = *MASKS.get(len)?;
    keyword_by_key([(w[0] | FOLD) & ma, (w[1] | FOLD) & mb])
}

/// `b` in each byte of a `u64`.
const fn bytes(b: u8) -> u64 {
    0x0101_0101_0101_0101 * b as u64
}

/// ASCII letters of eight bytes at once to lower case (other bytes, non-ASCII ones included,
/// are left alone).
#[inline(always)]
pub(super) fn lower(x: u64) -> u64 {
    let low7 = x & bytes(0x7f);
    // The top bit of a byte is set if its low seven bits are >= 'A', resp. > 'Z'; no carry
    // crosses bytes.
    let from_a = low7.wrapping_add(bytes(0x80 - b'A'));
    let past_z = low7.wrapping_add(bytes(0x80 - b'Z' - 1));
    let upper = from_a & !past_z & !x & bytes(0x80);
    x | (upper >> 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find(src: &str, len: usize) -> Option<&'static Keyword> {
        keyword(read(src.as_bytes(), 0, len)?, len)
    }

    #[test]
    fn every_keyword_is_found_in_any_case_and_others_are_not() {
        let mut sorted = WORDS.to_vec();
        sorted.sort_by_key(|(w, _)| *w);
        assert_eq!(sorted, WORDS, "WORDS must stay sorted");
        for (i, (w, role)) in WORDS.iter().enumerate() {
            let long = format!("{w} and more than sixteen bytes after it");
            // Read at the end of the input and inside it.
            for spelling in [w.to_string(), w.to_ascii_lowercase(), long] {
                let k = find(&spelling, w.len()).unwrap();
                assert_eq!((k.upper, k.role), (KEYWORDS[i].upper, *role), "{spelling}");
            }
            let up: Vec<u8> = [k_bytes(KEYWORDS[i].upper[0]), k_bytes(KEYWORDS[i].upper[1])]
                .concat()
                .into_iter()
                .take(w.len())
                .collect();
            assert_eq!(up, w.as_bytes());
        }
        for w in [
            "a",
            "abalance",
            "pgbench_accounts",
            "selec",
            "selects",
            "ins",
            "é",
            "SELECT\u{e9}",
            "l\u{c9}ft",
            "current_dat\u{c5}",
            "current_date_",
            "nul\u{7f}",
        ] {
            assert!(find(w, w.len()).is_none(), "{w}");
        }
        assert!(find("SELECT", 0).is_none());
        assert!(find("SELECT and more words", 17).is_none());
        assert!(find("SELECT", 5).is_none());
    }

    fn k_bytes(w: u64) -> [u8; 8] {
        w.to_le_bytes()
    }

    #[test]
    fn reads_eight_bytes_anywhere() {
        let src: Vec<u8> = (1..=20).collect();
        for len in 0..=src.len() {
            for at in 0..=len + 2 {
                let mut want = [0u8; 8];
                for (i, w) in want.iter_mut().enumerate() {
                    *w = src[..len].get(at + i).copied().unwrap_or(0);
                }
                assert_eq!(
                    read8(&src[..len], at),
                    u64::from_le_bytes(want),
                    "{len} {at}"
                );
            }
        }
    }

    #[test]
    fn words_fold_eight_bytes_at_a_time() {
        let text = b"SELECT aBc_$9 \xc3\x89t\xc3\xa9 @[`{ZZ";
        for start in 0..text.len() {
            for len in 1..=SHORT.min(text.len() - start) {
                let [a, b] = read(text, start, len).unwrap();
                let mut got = [lower(a).to_le_bytes(), lower(b).to_le_bytes()].concat();
                assert!(got[len..].iter().all(|&b| b == 0), "padded with zeros");
                got.truncate(len);
                assert_eq!(got, text[start..start + len].to_ascii_lowercase());
            }
        }
    }
}
