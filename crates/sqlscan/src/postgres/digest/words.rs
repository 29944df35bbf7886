//! Unquoted words in a digest: folded to lower case, or written in upper case if they are one
//! of a short list of keywords.
//!
//! Only display and sign handling depend on the list: unquoted words are case-folded either
//! way, so the list never splits one statement shape into two digests. The lexer has found
//! which keyword a word is (see [`Kw`]); other words of up to 16 bytes (nearly all) are read
//! as two little-endian `u64`s and case-folded eight bytes at a time.

use crate::postgres::keywords::Kw;
use crate::postgres::packed::SHORT;

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

/// The keywords the digest writes in upper case, sorted by spelling.
const WORDS: &[(Kw, Role)] = &[
    (Kw::Abort, Operand),
    (Kw::All, Operator),
    (Kw::Alter, Operand),
    (Kw::Analyze, Operand),
    (Kw::And, Operator),
    (Kw::Any, Operator),
    (Kw::Array, Array),
    (Kw::As, Operator),
    (Kw::Asc, Operand),
    (Kw::Atomic, Operand),
    (Kw::Avg, Operand),
    (Kw::Begin, Operand),
    (Kw::Between, Operator),
    (Kw::By, Operator),
    (Kw::Call, Operand),
    (Kw::Case, Operator),
    (Kw::Cast, Operand),
    (Kw::Coalesce, Operand),
    (Kw::Collate, Operator),
    (Kw::Commit, Operand),
    (Kw::Conflict, Operand),
    (Kw::Copy, Operand),
    (Kw::Count, Operand),
    (Kw::Create, Operator),
    (Kw::Cross, Operator),
    (Kw::CurrentDate, Operand),
    (Kw::CurrentTime, Operand),
    (Kw::CurrentUser, Operand),
    (Kw::Deallocate, Operand),
    (Kw::Declare, Operand),
    (Kw::Default, Literal),
    (Kw::Delete, Operand),
    (Kw::Desc, Operand),
    (Kw::Discard, Operand),
    (Kw::Distinct, Operator),
    (Kw::Do, Operator),
    (Kw::Drop, Operand),
    (Kw::Else, Operator),
    (Kw::End, Operand),
    (Kw::Except, Operator),
    (Kw::Execute, Operand),
    (Kw::Exists, Operand),
    (Kw::Explain, Operand),
    (Kw::Extract, Operand),
    (Kw::False, Literal),
    (Kw::Fetch, Operator),
    (Kw::For, Operator),
    (Kw::From, Operator),
    (Kw::Full, Operator),
    (Kw::Function, Operand),
    (Kw::Grant, Operator),
    (Kw::Greatest, Operand),
    (Kw::Group, Operator),
    (Kw::Having, Operator),
    (Kw::Ilike, Operator),
    (Kw::In, In),
    (Kw::Inner, Operator),
    (Kw::Insert, Operand),
    (Kw::Intersect, Operator),
    (Kw::Interval, Operand),
    (Kw::Into, Operator),
    (Kw::Is, Operator),
    (Kw::Join, Operator),
    (Kw::Lateral, Operator),
    (Kw::Least, Operand),
    (Kw::Left, Operator),
    (Kw::Like, Operator),
    (Kw::Limit, Operator),
    (Kw::Listen, Operand),
    (Kw::Lock, Operand),
    (Kw::Locked, Operand),
    (Kw::Max, Operand),
    (Kw::Min, Operand),
    (Kw::Natural, Operator),
    (Kw::Not, Operator),
    (Kw::Nothing, Operand),
    (Kw::Notify, Operand),
    (Kw::Now, Operand),
    (Kw::Nowait, Operand),
    (Kw::Null, Literal),
    (Kw::Nullif, Operand),
    (Kw::Offset, Operator),
    (Kw::On, Operator),
    (Kw::Only, Operator),
    (Kw::Or, Operator),
    (Kw::Order, Operator),
    (Kw::Outer, Operator),
    (Kw::Over, Operand),
    (Kw::Partition, Operand),
    (Kw::Prepare, Operand),
    (Kw::Recursive, Operand),
    (Kw::Release, Operand),
    (Kw::Reset, Operand),
    (Kw::Returning, Operator),
    (Kw::Right, Operator),
    (Kw::Rollback, Operand),
    (Kw::Savepoint, Operand),
    (Kw::Select, Operator),
    (Kw::Set, Operand),
    (Kw::Share, Operand),
    (Kw::Show, Operand),
    (Kw::Similar, Operator),
    (Kw::Skip, Operand),
    (Kw::Some, Operator),
    (Kw::Start, Operand),
    (Kw::Sum, Operand),
    (Kw::Table, Operator),
    (Kw::Then, Operator),
    (Kw::To, Operator),
    (Kw::Transaction, Operand),
    (Kw::True, Literal),
    (Kw::Truncate, Operand),
    (Kw::Union, Operator),
    (Kw::Unique, Operator),
    (Kw::Update, Operand),
    (Kw::Using, Operator),
    (Kw::Vacuum, Operand),
    (Kw::Values, Values),
    (Kw::When, Operator),
    (Kw::Where, Operator),
    (Kw::Window, Operator),
    (Kw::With, Operator),
];

/// A keyword as the digester uses it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Keyword {
    /// Its upper-case spelling, as two little-endian `u64`s padded with zeros.
    pub(super) upper: [u64; 2],
    pub(super) role: Role,
    /// `role` is [`Role::Operator`]: a sign may follow.
    pub(super) sign_ok: bool,
    /// The byte that may open a list of literals after it (`(`, `[`), or 0.
    pub(super) opener: u8,
    /// Not a function: a `(` after it is spaced (`WHERE (`, `IN (`, `VALUES (`).
    pub(super) spaced: bool,
}

/// What each keyword id is to the digest: `None` for the keywords of the scanner alone,
/// written in lower case like any other word.
static KEYWORDS: [Option<Keyword>; Kw::ALL.len()] = {
    let mut k = [None; Kw::ALL.len()];
    let mut i = 0;
    while i < WORDS.len() {
        let (kw, role) = WORDS[i];
        let w = kw.spelling().as_bytes();
        assert!(w.len() <= SHORT);
        let mut upper = [0u64; 2];
        let mut j = 0;
        while j < w.len() {
            upper[j / 8] |= (w[j] as u64) << (8 * (j % 8));
            j += 1;
        }
        k[kw as usize] = Some(Keyword {
            upper,
            role,
            sign_ok: matches!(role, Operator),
            opener: match role {
                In | Values => b'(',
                Array => b'[',
                _ => 0,
            },
            spaced: matches!(role, Operator | In | Values),
        });
        i += 1;
    }
    k
};

/// What keyword `kw` is to the digest, if anything.
#[inline(always)]
pub(super) fn keyword(kw: Kw) -> Option<&'static Keyword> {
    KEYWORDS.get(kw as usize)?.as_ref()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postgres::lexer::Lexer;

    #[test]
    fn every_keyword_is_found_in_any_case_and_others_are_not() {
        let mut sorted = WORDS.to_vec();
        sorted.sort_by_key(|(w, _)| w.spelling());
        assert_eq!(sorted, WORDS, "WORDS must stay sorted");
        for (kw, role) in WORDS {
            let w = kw.spelling();
            let long = format!("{w} and more than sixteen bytes after it");
            for spelling in [w.to_string(), w.to_ascii_lowercase(), long] {
                let t = Lexer::new(spelling.as_bytes()).next().unwrap();
                let k = keyword(t.kw).unwrap();
                assert_eq!(k.role, *role, "{spelling}");
                let up: Vec<u8> = [k.upper[0].to_le_bytes(), k.upper[1].to_le_bytes()]
                    .concat()
                    .into_iter()
                    .take(w.len())
                    .collect();
                assert_eq!(up, w.as_bytes());
            }
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
            "isolation",
            "pg_temp",
            "merge",
        ] {
            let t = Lexer::new(w.as_bytes()).next().unwrap();
            assert!(keyword(t.kw).is_none(), "{w}");
        }
    }
}
