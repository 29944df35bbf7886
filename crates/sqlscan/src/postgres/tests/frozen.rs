//! What the scanner computes, frozen: digest ids of a few statements, and fingerprints of the
//! digests (ids and texts) and of the whole classification over a generated corpus, as the
//! implementation of commit 3baed59 (before the scanner's rework for speed) computed them.
//!
//! A digest id must never change: statistics are kept by it, across versions. The
//! classification's fingerprint changes with any difference in what `scan` returns for any
//! of the corpus's inputs (route, command, pins, hint, `SET` tracking, calls, digest): one
//! that is meant must come with the tests that say why, and a new fingerprint.

use super::super::{digest_text, scan};
use super::Rng;

/// Words and tokens the corpus is made of: every keyword the scanner or the digest reacts to,
/// names, literals of every kind, operators, comments (with and without a routing hint).
#[rustfmt::skip]
const VOCABULARY: &[&str] = &[
    "ABORT", "ALL", "ALTER", "ANALYZE", "ANALYSE", "AND", "ANY", "ARRAY", "AS", "ASC", "ATOMIC",
    "AUTHORIZATION", "AVG", "BEGIN", "BETWEEN", "BY", "CALL", "CASE", "CAST", "CHAIN",
    "CHARACTERISTICS", "CLOSE", "CLUSTER", "COALESCE", "COLLATE", "COLUMNS", "COMMENT", "COMMIT",
    "CONFLICT", "CONSTRAINTS", "COPY", "COUNT", "CREATE", "CROSS", "CUBE", "CURRENT_DATE",
    "CURRENT_TIME", "CURRENT_USER", "CURRENT_TIMESTAMP", "DEALLOCATE", "DECLARE", "DEFAULT",
    "DELETE", "DESC", "DISCARD", "DISTINCT", "DO", "DROP", "ELSE", "END", "EXCEPT", "EXECUTE",
    "EXISTS", "EXPLAIN", "EXTRACT", "FALSE", "FETCH", "FILTER", "FOR", "FROM", "FULL", "FUNCTION",
    "GLOBAL", "GRANT", "GREATEST", "GROUP", "GROUPING", "HAVING", "HOLD", "ILIKE", "IMPORT", "IN",
    "INNER", "INSERT", "INTERSECT", "INTERVAL", "INTO", "IS", "ISOLATION", "JOIN", "KEY",
    "LATERAL", "LEAST", "LEFT", "LEVEL", "LIKE", "LIMIT", "LISTEN", "LOAD", "LOCAL", "LOCK",
    "LOCKED", "MATERIALIZED", "MAX", "MERGE", "MIN", "NAMES", "NATURAL", "NO", "NOT", "NOTHING",
    "NOTIFY", "NOW", "NOWAIT", "NULL", "NULLIF", "OFFSET", "ON", "ONLY", "OPTION", "OR", "ORDER",
    "OUTER", "OVER", "PARTITION", "PASSING", "PG_CATALOG", "PG_TEMP", "PRECISION", "PREPARE",
    "PREPARED", "READ", "REASSIGN", "RECURSIVE", "REFRESH", "REINDEX", "RELEASE", "REPEATABLE",
    "REPLACE", "RESET", "RETURNING", "REVOKE", "RIGHT", "ROLLBACK", "ROLLUP", "SAVEPOINT",
    "SCHEMA", "SECURITY", "SELECT", "SERIALIZABLE", "SESSION", "SET", "SETS", "SHARE", "SHOW",
    "SIMILAR", "SKIP", "SOME", "START", "STDOUT", "SUM", "TABLE", "TABLESAMPLE", "TEMP",
    "TEMPORARY", "THEN", "TIME", "TO", "TRANSACTION", "TRUE", "TRUNCATE", "UNION", "UNIQUE",
    "UNLISTEN", "UPDATE", "USING", "VACUUM", "VALUES", "VARYING", "VERBOSE", "WHEN", "WHERE",
    "WINDOW", "WITH", "WORK", "WRITE", "XML", "ZONE", "CHARACTER", "DOUBLE", "int", "text",
    "json_table", "xmltable", "nextval", "pg_advisory_lock", "pg_advisory_unlock_all", "lower",
    "myfunc", "f", "x", "Foo", "abalance", "pgbench_accounts", "a_long_name_of_some_column",
    "selec", "selects", "\u{e9}t\u{e9}", "(", ")", "(", ")", "[", "]", ",", ",", ";", ";", ".",
    ".", "*", "=", "-", "+", "<>", "->>", "::", ":", "$1", "$2", "1", "-2.5", "1e3", "0x1f",
    ".5", "1..2", "'x'", "E'\\''", "$$", "$$;$$", "$a$ b $a$", "/*", "*/", "/* sluice:reader */",
    "-- sluice:writer\n", "--", "\n", "\"Q\"", "\"pg_temp\"", "\"pg_catalog\"", "\"nextval\"",
    "\"a\"\"b\"", "U&\"x\"", "U&'x'", "B'1'", "x'1f'",
];

/// Statement beginnings that lead the classification down each of its paths.
#[rustfmt::skip]
const HEADS: &[&str] = &[
    "", "", "", "SELECT ", "WITH x AS (", "WITH RECURSIVE r(a) AS (", "CREATE TEMP TABLE ",
    "CREATE TABLE ", "SET ", "SET LOCAL ", "SET SESSION ", "RESET ", "BEGIN ", "START TRANSACTION ",
    "COMMIT AND ", "ROLLBACK TO ", "EXPLAIN ANALYZE ", "EXPLAIN (ANALYZE false) ", "COPY (",
    "COPY t FROM ", "DECLARE c CURSOR WITH HOLD FOR ", "INSERT INTO t ", "UPDATE t SET ",
    "VALUES (", "DISCARD ", "DEALLOCATE ", "PREPARE ", "UNLISTEN ", "CLOSE ", "CALL ", "LOCK ",
    "SELECT * FROM t GROUP BY ", "SELECT * FROM t FOR ", "SELECT 1 INTO ", "SELECT x::",
    "SELECT pg_catalog.", "SELECT f() OVER (",
];

/// An input of the corpus: a statement beginning and words of the vocabulary, in
/// mixed case, with and without spaces between them.
pub(super) fn corpus(rng: &mut Rng) -> String {
    let mut sql = HEADS[rng.below(HEADS.len())].to_string();
    for _ in 0..rng.below(20) {
        let w = VOCABULARY[rng.below(VOCABULARY.len())];
        match rng.below(4) {
            0 => sql.push_str(&w.to_ascii_lowercase()),
            1 => sql.extend(w.chars().enumerate().map(|(i, c)| {
                if i % 2 == 0 {
                    c.to_ascii_lowercase()
                } else {
                    c
                }
            })),
            _ => sql.push_str(w),
        }
        match rng.below(6) {
            0 => {}
            1 => sql.push('\t'),
            _ => sql.push(' '),
        }
    }
    sql
}

/// FNV-1a: folds `bytes` into `h`.
fn fold(h: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(h, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// Statements and their digest ids.
const IDS: &[(&str, u64)] = &[
    (
        "SELECT abalance FROM pgbench_accounts WHERE aid = $1;",
        0x4d35_9ada_aafa_df47,
    ),
    (
        "SELECT abalance FROM pgbench_accounts WHERE aid = 12345;",
        0x4d35_9ada_aafa_df47,
    ),
    (
        "UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2;",
        0xd812_bf46_54ce_32bf,
    ),
    (
        "UPDATE pgbench_tellers SET tbalance = tbalance + $1 WHERE tid = $2;",
        0x4fd3_841f_5ffd_9848,
    ),
    (
        "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP);",
        0x8b7f_3aec_8f53_4733,
    ),
    (
        "SELECT o.id, o.total, c.name, p.title FROM orders o JOIN customers c ON c.id = o.customer_id JOIN products p ON p.id = o.product_id WHERE o.created_at > $1 AND o.status IN ('open', 'paid', 'shipped') ORDER BY o.created_at DESC LIMIT 50",
        0xa699_cae3_6d76_d72c,
    ),
    (
        "SELECT \"users\".\"id\", \"users\".\"email\" FROM \"users\" WHERE \"users\".\"id\" = $1 LIMIT $2",
        0xf9e7_8f4d_c20e_1447,
    ),
    (
        "SELECT count(*) AS \"count\", lower(\"t\".\"name\") FROM \"t\" WHERE \"t\".\"created\" > now() - interval '1 day' GROUP BY lower(\"t\".\"name\")",
        0xf8c4_68db_ad53_c582,
    ),
    (
        "SELECT id, payload FROM jobs WHERE state = 'ready' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED",
        0x55a1_4f46_47a3_2365,
    ),
    ("BEGIN", 0x1a6b_1fec_f492_10d2),
    ("SET application_name = 'worker-3'", 0xe04d_f61b_166c_5f6b),
    (
        "select * from T where id in (1, 2, -3) and x = any(ARRAY[1,2]) and d in ('2020-01-01'::date)",
        0x7583_c152_27d7_e84c,
    ),
    (
        "INSERT INTO t (a, b) VALUES (1, 'x'), ($1, NULL), (-2, E'\\n'), (DEFAULT, 3) RETURNING id",
        0x3979_7d94_f901_1e56,
    ),
    (
        "SELECT -1, a-1, a - -1, f(-1), - 1, (-1), [+1], a=-1, a*-1, 1-1, (1)-1",
        0x91e8_74d5_6511_4f37,
    ),
    (
        "SELECT $1::timestamp with time zone, $2 :: varchar(10), CAST($3 AS numeric(10, 2))",
        0x80ec_b9d4_f87f_172c,
    ),
    (
        "CREATE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT 1; SELECT 2; END; SELECT f()",
        0x23e5_f3f0_04f6_9856,
    ),
    (
        "/* sluice:reader */ SELECT a_very_long_column_name_indeed FROM Some_Long_Schema_Name.Another_Table_Name -- x",
        0x8a48_f920_c744_b5a9,
    ),
    (
        "SELECT Pgbench_Accountsxyz, \u{c9}t\u{c9}, A_b$1 FROM t; ; VALUES (1), (f(x)), (2)",
        0xe1a8_8eee_8225_317c,
    ),
    ("", 0x5cb8_22d4_d761_de85),
];

#[test]
fn digest_ids_do_not_change() {
    let mut text = Vec::new();
    for (sql, id) in IDS {
        assert_eq!(digest_text(sql.as_bytes(), &mut text), *id, "{sql}");
        assert_eq!(scan(sql.as_bytes()).digest, *id, "{sql}");
    }
}

#[test]
fn digests_and_classification_do_not_change_over_a_corpus() {
    let mut rng = Rng(0x005e_ed0f_f00d);
    let mut text = Vec::new();
    let (mut digests, mut scans) = (0xcbf2_9ce4_8422_2325, 0xcbf2_9ce4_8422_2325);
    for _ in 0..20_000 {
        let sql = corpus(&mut rng);
        let id = digest_text(sql.as_bytes(), &mut text);
        digests = fold(fold(digests, &id.to_le_bytes()), &text);
        let s = scan(sql.as_bytes());
        assert_eq!(s.digest, id, "{sql}");
        scans = fold(scans, format!("{s:?}").as_bytes());
    }
    assert_eq!(
        digests, 0xf6e2_4cae_81fd_986c,
        "digest ids or texts changed"
    );
    // Changed on purpose twice: a BEGIN with modes that are not PostgreSQL's is no Begin
    // (`commands`' cases say why), nor is a COMMIT or ROLLBACK followed by anything its
    // grammar does not have, nor a BEGIN with a comma that is not between two modes. The
    // last change moved 552 of the 20,000 texts, all of them `COMMIT`/`ROLLBACK`/`ABORT`
    // followed by random words, to Other (and two EXPLAINs of such to the primary). And
    // once more: a quoted parameter name is folded to lower case as PostgreSQL folds it (5
    // texts, all `SET "Q" ...`). And again: calls of names sluice cannot read (`U&"x"(`,
    // `"a""b"(`) and a `SET` of `search_path` naming `pg_temp` pin the session (6 texts).
    // And: the transaction's own parameters (`RESET TRANSACTION ISOLATION LEVEL`) are set
    // for the transaction only, as with LOCAL (2 texts, both `RESET TRANSACTION ...`).
    assert_eq!(scans, 0x62f0_f788_3bc1_456f, "classification changed");
}
