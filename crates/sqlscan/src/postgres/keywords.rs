//! The keywords the scanner and the digest react to, recognised once per word by the lexer:
//! a [`Token`](super::lexer::Token) carries its [`Kw`], so that the cursor, the walk, the
//! statement's dispatch and the digest compare one byte instead of the word's text again.
//!
//! A word is looked up by its bytes folded to lower case (see [`FOLD`]), read as two `u64`s:
//! one multiplication finds its slot in a table built at compile time, and most words that are
//! not keywords meet an empty slot at once.

use super::packed::{self, MASKS, SHORT};

macro_rules! keywords {
    ($($name:ident = $text:literal,)*) => {
        /// A keyword, or [`Kw::None`] for any other word and every token that is not a word.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        #[repr(u8)]
        pub(crate) enum Kw {
            #[default]
            None,
            $($name,)*
        }

        impl Kw {
            /// Every keyword, in the order of their ids (`Kw::None` first).
            pub(crate) const ALL: &'static [Kw] = &[Kw::None, $(Kw::$name,)*];
            /// Their upper-case spellings, in the same order (`""` for `Kw::None`).
            pub(crate) const SPELLINGS: &'static [&'static str] = &["", $($text,)*];
        }
    };
}

keywords! {
    Abort = "ABORT",
    All = "ALL",
    Alter = "ALTER",
    Analyse = "ANALYSE",
    Analyze = "ANALYZE",
    And = "AND",
    Any = "ANY",
    Array = "ARRAY",
    As = "AS",
    Asc = "ASC",
    Atomic = "ATOMIC",
    Authorization = "AUTHORIZATION",
    Avg = "AVG",
    Begin = "BEGIN",
    Between = "BETWEEN",
    By = "BY",
    Call = "CALL",
    Case = "CASE",
    Cast = "CAST",
    Chain = "CHAIN",
    Characteristics = "CHARACTERISTICS",
    Close = "CLOSE",
    Cluster = "CLUSTER",
    Coalesce = "COALESCE",
    Collate = "COLLATE",
    Columns = "COLUMNS",
    Comment = "COMMENT",
    Commit = "COMMIT",
    Committed = "COMMITTED",
    Conflict = "CONFLICT",
    Constraints = "CONSTRAINTS",
    Copy = "COPY",
    Count = "COUNT",
    Create = "CREATE",
    Cross = "CROSS",
    Cube = "CUBE",
    CurrentDate = "CURRENT_DATE",
    CurrentTime = "CURRENT_TIME",
    CurrentUser = "CURRENT_USER",
    Deallocate = "DEALLOCATE",
    Declare = "DECLARE",
    Default = "DEFAULT",
    Deferrable = "DEFERRABLE",
    Delete = "DELETE",
    Desc = "DESC",
    Discard = "DISCARD",
    Distinct = "DISTINCT",
    Do = "DO",
    Drop = "DROP",
    Else = "ELSE",
    End = "END",
    Except = "EXCEPT",
    Execute = "EXECUTE",
    Exists = "EXISTS",
    Explain = "EXPLAIN",
    Extract = "EXTRACT",
    False = "FALSE",
    Fetch = "FETCH",
    Filter = "FILTER",
    For = "FOR",
    From = "FROM",
    Full = "FULL",
    Function = "FUNCTION",
    Global = "GLOBAL",
    Grant = "GRANT",
    Greatest = "GREATEST",
    Group = "GROUP",
    Grouping = "GROUPING",
    Having = "HAVING",
    Hold = "HOLD",
    Ilike = "ILIKE",
    Import = "IMPORT",
    In = "IN",
    Inner = "INNER",
    Insert = "INSERT",
    Intersect = "INTERSECT",
    Interval = "INTERVAL",
    Into = "INTO",
    Is = "IS",
    Isolation = "ISOLATION",
    Join = "JOIN",
    Key = "KEY",
    Lateral = "LATERAL",
    Least = "LEAST",
    Left = "LEFT",
    Level = "LEVEL",
    Like = "LIKE",
    Limit = "LIMIT",
    Listen = "LISTEN",
    Load = "LOAD",
    Local = "LOCAL",
    Lock = "LOCK",
    Locked = "LOCKED",
    Materialized = "MATERIALIZED",
    Max = "MAX",
    Merge = "MERGE",
    Min = "MIN",
    Names = "NAMES",
    Natural = "NATURAL",
    No = "NO",
    Not = "NOT",
    Nothing = "NOTHING",
    Notify = "NOTIFY",
    Now = "NOW",
    Nowait = "NOWAIT",
    Null = "NULL",
    Nullif = "NULLIF",
    Offset = "OFFSET",
    On = "ON",
    Only = "ONLY",
    Option = "OPTION",
    Or = "OR",
    Order = "ORDER",
    Outer = "OUTER",
    Over = "OVER",
    Partition = "PARTITION",
    Passing = "PASSING",
    PgCatalog = "PG_CATALOG",
    PgTemp = "PG_TEMP",
    Precision = "PRECISION",
    Prepare = "PREPARE",
    Prepared = "PREPARED",
    Read = "READ",
    Reassign = "REASSIGN",
    Recursive = "RECURSIVE",
    Refresh = "REFRESH",
    Reindex = "REINDEX",
    Release = "RELEASE",
    Repeatable = "REPEATABLE",
    Replace = "REPLACE",
    Reset = "RESET",
    Returning = "RETURNING",
    Revoke = "REVOKE",
    Right = "RIGHT",
    Rollback = "ROLLBACK",
    Rollup = "ROLLUP",
    Savepoint = "SAVEPOINT",
    Schema = "SCHEMA",
    Security = "SECURITY",
    Select = "SELECT",
    Serializable = "SERIALIZABLE",
    Session = "SESSION",
    Set = "SET",
    Sets = "SETS",
    Share = "SHARE",
    Show = "SHOW",
    Similar = "SIMILAR",
    Skip = "SKIP",
    Some = "SOME",
    Start = "START",
    Stdout = "STDOUT",
    Sum = "SUM",
    Table = "TABLE",
    Tablesample = "TABLESAMPLE",
    Temp = "TEMP",
    Temporary = "TEMPORARY",
    Then = "THEN",
    Time = "TIME",
    To = "TO",
    Transaction = "TRANSACTION",
    True = "TRUE",
    Truncate = "TRUNCATE",
    Uncommitted = "UNCOMMITTED",
    Union = "UNION",
    Unique = "UNIQUE",
    Unlisten = "UNLISTEN",
    Update = "UPDATE",
    Using = "USING",
    Vacuum = "VACUUM",
    Values = "VALUES",
    Varying = "VARYING",
    Verbose = "VERBOSE",
    When = "WHEN",
    Where = "WHERE",
    Window = "WINDOW",
    With = "WITH",
    Work = "WORK",
    Write = "WRITE",
    Xml = "XML",
    Zone = "ZONE",
}

/// Number of ids, `Kw::None` included.
const COUNT: usize = Kw::ALL.len();

/// The shortest keyword's length (`AS`) and the longest's (`CHARACTERISTICS`).
const SHORTEST: usize = 2;
const LONGEST: usize = 15;

/// Setting bit 5 of every byte folds ASCII letters to lower case. It also changes `_`, `@`,
/// `[` ... and non-ASCII bytes, but no keyword holds those but `_`, which becomes DEL, a byte
/// no word holds: two words have the same key only if they are equal but for the case of
/// ASCII letters, or one of them is not a keyword.
const FOLD: u64 = packed::bytes(0x20);

/// Slots of the lookup table: a power of two, about five per keyword, so that most words that
/// are not keywords meet an empty slot at once.
const SLOTS: usize = 1024;

/// Where a key's probe starts.
#[inline(always)]
const fn slot(k: [u64; 2]) -> usize {
    let h = (k[0] ^ k[1].rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (h >> (64 - SLOTS.trailing_zeros())) as usize
}

/// Each keyword's key: its bytes folded with [`FOLD`], as two little-endian `u64`s padded
/// with zeros (`Kw::None`'s is all zeros, which no word has).
static KEYS: [[u64; 2]; COUNT] = {
    let mut keys = [[0u64; 2]; COUNT];
    let mut i = 1;
    while i < COUNT {
        let w = Kw::SPELLINGS[i].as_bytes();
        assert!(w.len() >= SHORTEST && w.len() <= LONGEST && LONGEST <= SHORT);
        let mut j = 0;
        while j < w.len() {
            assert!(w[j].is_ascii_uppercase() || w[j] == b'_');
            keys[i][j / 8] |= ((w[j] | 0x20) as u64) << (8 * (j % 8));
            j += 1;
        }
        // Sorted, so that a duplicate cannot hide.
        assert!(i == 1 || lt(Kw::SPELLINGS[i - 1].as_bytes(), w));
        i += 1;
    }
    keys
};

/// `a < b`, bytewise, at compile time.
const fn lt(a: &[u8], b: &[u8]) -> bool {
    let mut i = 0;
    while i < a.len() && i < b.len() {
        if a[i] != b[i] {
            return a[i] < b[i];
        }
        i += 1;
    }
    a.len() < b.len()
}

/// Open-addressing table over [`KEYS`]: the keyword, `Kw::None` for an empty slot.
static TABLE: [Kw; SLOTS] = {
    assert!(COUNT < 256 && COUNT * 4 < SLOTS);
    let mut t = [Kw::None; SLOTS];
    let mut k = 1;
    while k < COUNT {
        let mut i = slot(KEYS[k]);
        while !matches!(t[i], Kw::None) {
            i = (i + 1) & (SLOTS - 1);
        }
        t[i] = Kw::ALL[k];
        k += 1;
    }
    t
};

impl Kw {
    /// The keyword the word of `len` bytes at `start` in `src` is, in any case (the word's
    /// bytes are identifier bytes, as the lexer found them).
    #[cfg(test)]
    pub(crate) fn of_word(src: &[u8], start: usize, len: usize) -> Kw {
        let w = [packed::read8(src, start), packed::read8(src, start + 8)];
        Kw::of_packed(w, len)
    }

    /// The keyword a word of `len` bytes is, in any case, given its first sixteen bytes as two
    /// little-endian `u64`s (the bytes after the word are ignored; the word's bytes are
    /// identifier bytes, as the lexer found them).
    #[inline(always)]
    pub(crate) fn of_packed(w: [u64; 2], len: usize) -> Kw {
        if !(SHORTEST..=LONGEST).contains(&len) {
            return Kw::None;
        }
        let [ma, mb] = MASKS[len];
        let a = (w[0] | FOLD) & ma;
        // Most words fit in eight bytes: their key's second half is zero, known here.
        let b = if len > 8 { (w[1] | FOLD) & mb } else { 0 };
        Kw::by_key([a, b])
    }

    /// The keyword whose key is `k`.
    #[inline(always)]
    fn by_key(k: [u64; 2]) -> Kw {
        let mut i = slot(k);
        loop {
            let kw = TABLE[i & (SLOTS - 1)];
            if kw == Kw::None || KEYS[kw as usize] == k {
                return kw;
            }
            i += 1;
        }
    }

    /// The keyword's upper-case spelling (`""` for `Kw::None`).
    pub(crate) const fn spelling(self) -> &'static str {
        Kw::SPELLINGS[self as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(w: &str) -> Kw {
        Kw::of_word(w.as_bytes(), 0, w.len())
    }

    #[test]
    fn every_keyword_is_found_in_any_case_and_others_are_not() {
        assert_eq!(Kw::ALL.len(), Kw::SPELLINGS.len());
        for (i, &k) in Kw::ALL.iter().enumerate().skip(1) {
            assert_eq!(k as usize, i);
            let w = k.spelling();
            let mixed: String = w
                .chars()
                .enumerate()
                .map(|(i, c)| {
                    if i % 2 == 0 {
                        c.to_ascii_lowercase()
                    } else {
                        c
                    }
                })
                .collect();
            for spelling in [w.to_string(), w.to_ascii_lowercase(), mixed] {
                assert_eq!(of(&spelling), k, "{spelling}");
                // Inside a longer input too.
                let long = format!("{spelling} and more than sixteen bytes after it");
                assert_eq!(Kw::of_word(long.as_bytes(), 0, w.len()), k, "{long}");
                let late = format!("x {spelling}");
                assert_eq!(Kw::of_word(late.as_bytes(), 2, w.len()), k, "{late}");
            }
            // A byte more or less is another word.
            assert_eq!(
                Kw::of_word(format!("{w}Q").as_bytes(), 0, w.len() + 1),
                Kw::None
            );
            assert_ne!(Kw::of_word(w.as_bytes(), 0, w.len() - 1), k);
        }
        for w in [
            "",
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
            "current_timestamp",
            "pg_temp$",
            "s\u{c5}lect",
            "characteristicss",
        ] {
            assert_eq!(of(w), Kw::None, "{w}");
        }
    }
}
