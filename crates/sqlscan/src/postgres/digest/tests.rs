use super::super::scan;
use super::digest_text;
use super::output::id_of;
use crate::digest::MAX_TEXT;
use crate::postgres::tests::Rng;

fn text(sql: &str) -> String {
    let mut out = Vec::new();
    digest_text(sql.as_bytes(), &mut out);
    String::from_utf8(out).unwrap()
}

fn id(sql: &str) -> u64 {
    digest_text(sql.as_bytes(), &mut Vec::new())
}

/// Statements and their normalised text.
const TEXTS: &[(&str, &str)] = &[
    // pgbench
    (
        "SELECT abalance FROM pgbench_accounts WHERE aid = 12345;",
        "SELECT abalance FROM pgbench_accounts WHERE aid = ?;",
    ),
    (
        "UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2;",
        "UPDATE pgbench_accounts SET abalance = abalance + ? WHERE aid = ?;",
    ),
    (
        "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP);",
        "INSERT INTO pgbench_history(tid, bid, aid, delta, mtime) VALUES (?, ?, ?, ?, current_timestamp);",
    ),
    // Literals of every kind, comments, whitespace.
    (
        "select U&'d\\0061t' UESCAPE '!', B'101', X'1F', N'n', e'x\\'y', 'a''b', $$ a ; b $$, $f$ $$ $f$ from t",
        "SELECT ? uescape ?, ?, ?, ?, ?, ?, ?, ? FROM t",
    ),
    (
        "  SELECT\t1.5, .5, 1e10, 0x1F, 1_000 /* a /* nested */ comment */ -- trailing\n",
        "SELECT ?, ?, ?, ?, ?",
    ),
    ("SELECT 'unterminated", "SELECT ?"),
    ("SELECT $$ unterminated ; body", "SELECT ?"),
    // Case: keywords upper, names lower, quoted names as written.
    (
        "select Count(*) AS \"Count\", LOWER(\"T\".\"Name\") from \"T\" Where \"T\".\"C\" > now() - interval '1 day'",
        "SELECT COUNT(*) AS \"Count\", lower(\"T\".\"Name\") FROM \"T\" WHERE \"T\".\"C\" > NOW() - INTERVAL ?",
    ),
    (
        "SELECT O.Id FROM Orders O JOIN customers c ON c.id = o.customer_id ORDER BY O.Created_At DESC LIMIT 50 OFFSET $3",
        "SELECT o.id FROM orders o JOIN customers c ON c.id = o.customer_id ORDER BY o.created_at DESC LIMIT ? OFFSET ?",
    ),
    (
        "SELECT id FROM jobs WHERE state = 'ready' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED",
        "SELECT id FROM jobs WHERE state = ? ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED",
    ),
    // PostgreSQL folds ASCII letters only.
    ("SELECT Pgbench_Accountsxyz, ÉtÉ, A_b$1 FROM t", "SELECT pgbench_accountsxyz, ÉtÉ, a_b$1 FROM t"),
    (
        "SELECT a_very_long_column_name_indeed FROM Some_Long_Schema_Name.Another_Table_Name",
        "SELECT a_very_long_column_name_indeed FROM some_long_schema_name.another_table_name",
    ),
    // Operators and casts.
    (
        "SELECT a->>'k', b #> '{a,b}', c @> '{}'::jsonb, d || e, f <> g, h != i, j>=k, l::text[]",
        "SELECT a ->> ?, b #> ?, c @> ?::jsonb, d || e, f <> g, h != i, j >= k, l::text[]",
    ),
    (
        "SELECT $1::timestamp with time zone, $2 :: varchar(10), CAST($3 AS numeric(10, 2))",
        "SELECT ?::timestamp WITH time zone, ?::varchar(?), CAST(? AS numeric(?, ?))",
    ),
    (
        "SELECT CASE WHEN a > 0 THEN -1 ELSE +2 END, a[1], a[1:2], (a).b, t.*, f(x, y)",
        "SELECT CASE WHEN a > ? THEN ? ELSE ? END, a[?], a[? : ?], (a).b, t.*, f(x, y)",
    ),
    // Signs: part of the literal where no operand precedes.
    (
        "SELECT -1, a-1, a - -1, f(-1), - 1, (-1), [+1], a=-1, a*-1, 1-1, (1)-1",
        "SELECT ?, a - ?, a - ?, f(?), ?, (?), [?], a = ?, a * ?, ? - ?, (?) - ?",
    ),
    ("SELECT -x, -'1', -$1, - -1", "SELECT - x, - ?, - ?, - ?"),
    ("SELECT 1 -", "SELECT ? -"),
    ("-", "-"),
    // Lists of literals.
    (
        "select * from T where id in (1, 2, -3) and x = any(ARRAY[1,2]) and d in ('2020-01-01'::date)",
        "SELECT * FROM t WHERE id IN (...) AND x = ANY (ARRAY[...]) AND d IN (...)",
    ),
    (
        "SELECT * FROM t WHERE c IN ($1, +4, NULL, TRUE, false, '2'::text, 1::pg_catalog.int4, 2::int[], $2::timestamp with time zone)",
        "SELECT * FROM t WHERE c IN (...)",
    ),
    (
        "INSERT INTO t (a, b) VALUES (1, 'x'), ($1, NULL), (-2, E'\\n'), (DEFAULT, 3) RETURNING id",
        "INSERT INTO t(a, b) VALUES (...) RETURNING id",
    ),
    (
        "INSERT INTO t VALUES (1), (2) ON CONFLICT (a) DO NOTHING",
        "INSERT INTO t VALUES (...) ON CONFLICT(a) DO NOTHING",
    ),
    // Not only literals: kept, normalised.
    (
        "SELECT * FROM t WHERE a IN (SELECT b FROM u WHERE c = 1) AND d IN (e, 1) AND f IN (1 + 2)",
        "SELECT * FROM t WHERE a IN (SELECT b FROM u WHERE c = ?) AND d IN (e, ?) AND f IN (? + ?)",
    ),
    ("VALUES (1), (f(x)), (2)", "VALUES (...), (f(x)), (?)"),
    ("VALUES (f(x)), (1)", "VALUES (f(x)), (?)"),
    (
        "SELECT * FROM t WHERE (a, b) IN ((1, 2), (3, 4))",
        "SELECT * FROM t WHERE (a, b) IN ((?, ?), (?, ?))",
    ),
    (
        "SELECT ARRAY[[1, 2], [3, 4]], ARRAY(SELECT 1), ARRAY[], a IN (), a IN (1,",
        "SELECT ARRAY[[?, ?], [?, ?]], ARRAY(SELECT ?), ARRAY[], a IN (), a IN (?,",
    ),
    ("SELECT 1 IN (1) IN (2)", "SELECT ? IN (...) IN (...)"),
    // Several statements, empty ones, routine bodies.
    ("SELECT 1; ; SELECT 2;", "SELECT ?;; SELECT ?;"),
    (
        "CREATE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT 1; SELECT 2; END; SELECT f()",
        "CREATE FUNCTION f() returns int language sql BEGIN ATOMIC SELECT ?; SELECT ?; END; SELECT f()",
    ),
    ("BEGIN; SET LOCAL x = 'y'; COMMIT", "BEGIN; SET local x = ?; COMMIT"),
    ("/* only a comment */ -- and another", ""),
    ("", ""),
];

#[test]
fn normalises_as_documented() {
    for (sql, want) in TEXTS {
        assert_eq!(text(sql), *want, "{sql}");
    }
}

#[test]
fn same_shape_same_id() {
    for group in [
        &[
            "SELECT abalance FROM pgbench_accounts WHERE aid = 12345;",
            "select abalance from pgbench_accounts where aid=$1;",
            "  SELECT ABALANCE\n FROM Pgbench_Accounts /* c */ WHERE aid = -7; -- x",
            "SELECT abalance FROM pgbench_accounts WHERE aid = 'x';",
        ][..],
        &[
            "SELECT * FROM t WHERE id IN (1)",
            "SELECT * FROM t WHERE id IN ($1, $2, $3)",
            "select * from T where ID in (1, 'a', NULL, -2.5, TRUE, $9::int)",
        ],
        &[
            "INSERT INTO t (a, b) VALUES (1, 2)",
            "INSERT INTO t (a, b) VALUES ($1, $2), ($3, $4), (5, 6)",
            "insert into T (A, B) values (DEFAULT, 'x')",
        ],
        &["SELECT x::date", "SELECT x :: DATE", "SELECT X::Date"],
    ] {
        let ids: Vec<u64> = group.iter().map(|s| id(s)).collect();
        assert!(ids.iter().all(|&i| i == ids[0]), "{group:?}: {ids:x?}");
        let scans: Vec<u64> = group.iter().map(|s| scan(s.as_bytes()).digest).collect();
        assert_eq!(ids, scans, "{group:?}");
    }
}

#[test]
fn different_shapes_different_ids() {
    for (a, b) in [
        (
            "SELECT a FROM t WHERE id = 1",
            "SELECT a FROM t WHERE k = 1",
        ),
        ("SELECT a FROM t", "SELECT a FROM u"),
        ("SELECT a FROM t", "SELECT \"a\" FROM t"),
        ("SELECT \"A\" FROM t", "SELECT \"a\" FROM t"),
        ("SELECT 1", "SELECT 1;"),
        ("SELECT a - 1", "SELECT a, -1"),
        (
            "SELECT * FROM t WHERE a IN (1)",
            "SELECT * FROM t WHERE a IN (b)",
        ),
        ("VALUES (1)", "VALUES (1), (x)"),
        ("SELECT 1 UNION SELECT 2", "SELECT 1 UNION ALL SELECT 2"),
    ] {
        assert_ne!(id(a), id(b), "{a} | {b}");
    }
    // "f (1)" and "f(1)" are one shape: spacing is the digest's, not the input's.
    assert_eq!(text("SELECT f (1)"), "SELECT f(?)");
}

#[test]
fn the_id_is_the_hash_of_the_text() {
    for (sql, _) in TEXTS {
        let mut out = Vec::new();
        let id = digest_text(sql.as_bytes(), &mut out);
        assert_eq!(id, id_of(&out), "{sql}");
    }
}

/// Inputs where the lexer, the statement splitter and the digester have edges to fall off.
const TRICKY: &[&[u8]] = &[
    b"",
    b";",
    b";;;",
    b"   \n\t",
    b"/* only */ -- comments",
    b"/* unterminated /* nested */",
    b"SELECT 'unterminated",
    b"SELECT E'\\'",
    b"SELECT \"unterminated",
    b"SELECT $$ body ; with ; semicolons $$; SELECT 2",
    b"SELECT $a$ $$ ; $a$ ; SELECT $b$ unterminated ;",
    b"CREATE PROCEDURE p() BEGIN ATOMIC INSERT INTO t VALUES (1); SELECT CASE WHEN 1 IN (1) THEN 2 END; END; CALL p()",
    b"BEGIN ATOMIC; END; ( ; ) ;",
    b"SELECT 1; SELECT 2; SELECT 3",
    b"SELECT -",
    b"SELECT 1 IN (",
    b"VALUES (1), (",
    b"VALUES (1),",
    b"VALUES (1), 2",
    b"SELECT ARRAY[1",
    b"SELECT \xff\xfe, '\xc3', \xc3\xa9t\xc3\xa9 FROM \xe2\x82",
    b"SELECT \x00, \x01 FROM t",
    b"/* sluice:reader */ SELECT 1",
    b"select $1::int, $2 :: text[], $3::\"char\"",
    b"e'", b"u&'", b"u&\"", b"$", b"$1", b"$a", b"::", b"-1", b"+", b".5", b"1.", b"1..2",
];

/// The classification's fused digest and [`digest_text`] agree, and the text stays bounded.
fn agree(sql: &[u8]) {
    let mut out = Vec::new();
    let id = digest_text(sql, &mut out);
    assert_eq!(scan(sql).digest, id, "{:?}", String::from_utf8_lossy(sql));
    assert!(out.len() <= MAX_TEXT);
    if out.len() < MAX_TEXT {
        assert_eq!(id, id_of(&out), "{:?}", String::from_utf8_lossy(sql));
    }
}

#[test]
fn scan_gives_the_id_digest_text_gives() {
    for (sql, _) in TEXTS {
        agree(sql.as_bytes());
    }
    for sql in TRICKY {
        agree(sql);
    }
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let words: &[&str] = &[
        "SELECT",
        "select",
        "IN",
        "in",
        "VALUES",
        "ARRAY",
        "(",
        ")",
        "[",
        "]",
        ",",
        ";",
        "-",
        "+",
        "1",
        "-2.5",
        "$1",
        "'x'",
        "E'\\''",
        "$$",
        "$$;$$",
        "$a$",
        "/*",
        "*/",
        "--",
        "\n",
        "NULL",
        "DEFAULT",
        "::",
        "int",
        "BEGIN",
        "ATOMIC",
        "CASE",
        "END",
        "x",
        "Foo",
        "\"Q\"",
        "=",
        "<>",
        "->>",
        ".",
        "\u{e9}",
        "\u{ff}",
        "pgbench_accounts",
        "current_timestamp",
        "a_long_name_of_some_column",
    ];
    for _ in 0..20_000 {
        let len = rng.below(20);
        let mut sql = String::new();
        for _ in 0..len {
            sql.push_str(words[rng.below(words.len())]);
            if rng.below(3) > 0 {
                sql.push(' ');
            }
        }
        agree(sql.as_bytes());
    }
    // Raw bytes too.
    let alphabet: &[u8] = b"SELECT IN(1,2)VALUES $1:;'\"/*-\n xy0.9eE\\\xc3\xff[]";
    for _ in 0..20_000 {
        let len = rng.below(48);
        let buf: Vec<u8> = (0..len)
            .map(|_| alphabet[rng.below(alphabet.len())])
            .collect();
        agree(&buf);
    }
}

#[test]
fn long_texts_are_cut_but_hashed_whole() {
    let cols: Vec<String> = (0..500).map(|i| format!("column_{i}")).collect();
    let a = format!("SELECT {} FROM t", cols.join(", "));
    let b = format!("SELECT {} FROM u", cols.join(", "));
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    let (ia, ib) = (
        digest_text(a.as_bytes(), &mut ta),
        digest_text(b.as_bytes(), &mut tb),
    );
    assert!(ta.len() <= MAX_TEXT && ta.len() > MAX_TEXT - 16);
    assert_eq!(ta, tb);
    assert_ne!(ia, ib);
    assert_eq!(scan(a.as_bytes()).digest, ia);
    // Multi-byte characters are not split, in short words or long ones (which are written
    // eight bytes at a time).
    for pad in MAX_TEXT - 24..MAX_TEXT - 4 {
        for word in ["xéééééééééé", "xx€€€€€€", "é", "x€"] {
            let s = format!("SELECT {} {word}{word}{word} FROM t", "x".repeat(pad));
            let mut t = Vec::new();
            let id = digest_text(s.as_bytes(), &mut t);
            assert!(
                t.len() <= MAX_TEXT && std::str::from_utf8(&t).is_ok(),
                "{pad}"
            );
            assert_eq!(scan(s.as_bytes()).digest, id);
        }
    }
    // Text that is not UTF-8 stays bounded.
    let mut sql = b"SELECT ".to_vec();
    sql.extend(std::iter::repeat_n(0xfd, 3 * MAX_TEXT));
    let mut t = Vec::new();
    digest_text(&sql, &mut t);
    assert!(t.len() <= MAX_TEXT);
}

/// A list that starts before the text's bound and ends after it is still replaced.
#[test]
fn lists_collapse_across_the_text_bound() {
    let pad = "x".repeat(MAX_TEXT - 40);
    let values: Vec<String> = (0..200).map(|i| format!("({i}, 'v{i}')")).collect();
    let sql = format!(
        "INSERT INTO {pad} VALUES {} RETURNING id",
        values.join(", ")
    );
    let mut t = Vec::new();
    let id = digest_text(sql.as_bytes(), &mut t);
    let want = format!("INSERT INTO {pad} VALUES (...) RETURNING id");
    assert_eq!(String::from_utf8(t).unwrap(), want);
    assert_eq!(id, id_of(want.as_bytes()));
    assert_eq!(scan(sql.as_bytes()).digest, id);
    // The same past the bound: the text is cut, the id is that of the whole text.
    let pad = "x".repeat(MAX_TEXT - 5);
    let sql = format!("SELECT {pad} IN (1, 2, 3) AND y IN (4)");
    let mut t = Vec::new();
    let id = digest_text(sql.as_bytes(), &mut t);
    assert_eq!(t.len(), MAX_TEXT);
    assert_eq!(
        id,
        id_of(format!("SELECT {pad} IN (...) AND y IN (...)").as_bytes())
    );
}
