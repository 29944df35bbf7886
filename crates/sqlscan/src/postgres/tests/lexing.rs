//! The lexer, the statement splitter, and both against generated input.

use super::super::lexer::{Kind, Lexer};
use super::super::{scan, statements};
use super::Rng;

fn tokens(sql: &str) -> Vec<(Kind, &str)> {
    Lexer::new(sql.as_bytes())
        .map(|t| (t.kind, &sql[t.start..t.end]))
        .collect()
}

fn split(sql: &str) -> Vec<&str> {
    statements(sql.as_bytes())
        .map(|(s, e)| &sql[s..e])
        .collect()
}

#[test]
fn lexes_strings_identifiers_and_comments() {
    let t = tokens(
        "SELECT 'a''b', E'x\\'y', U&'d\\0061t', B'101', X'1F', N'n', \"q\"\"i\" -- c\n FROM t /* a /* b */ c */",
    );
    let texts: Vec<_> = t.iter().map(|(_, s)| *s).collect();
    assert_eq!(
        texts,
        [
            "SELECT",
            "'a''b'",
            ",",
            "E'x\\'y'",
            ",",
            "U&'d\\0061t'",
            ",",
            "B'101'",
            ",",
            "X'1F'",
            ",",
            "N'n'",
            ",",
            "\"q\"\"i\"",
            "FROM",
            "t"
        ]
    );
    assert_eq!(t[13].0, Kind::QuotedIdent);
    assert!(t[1..12].iter().step_by(2).all(|(k, _)| *k == Kind::Str));
}

#[test]
fn lexes_dollar_quotes_params_numbers_and_operators() {
    let t = tokens(
        "$$a;b$$ $fn$ $$ x $fn$ $1 $23 a$b 1.5 .5 1e-3 0x1F 1_000 x::int a<>b c->>'k' d=-1 e[1:2]",
    );
    assert_eq!(
        t,
        [
            (Kind::Str, "$$a;b$$"),
            (Kind::Str, "$fn$ $$ x $fn$"),
            (Kind::Param, "$1"),
            (Kind::Param, "$23"),
            (Kind::Word, "a$b"),
            (Kind::Number, "1.5"),
            (Kind::Number, ".5"),
            (Kind::Number, "1e-3"),
            (Kind::Number, "0x1F"),
            (Kind::Number, "1_000"),
            (Kind::Word, "x"),
            (Kind::Cast, "::"),
            (Kind::Word, "int"),
            (Kind::Word, "a"),
            (Kind::Op, "<>"),
            (Kind::Word, "b"),
            (Kind::Word, "c"),
            (Kind::Op, "->>"),
            (Kind::Str, "'k'"),
            (Kind::Word, "d"),
            (Kind::Punct(b'='), "="),
            (Kind::Punct(b'-'), "-"),
            (Kind::Number, "1"),
            (Kind::Word, "e"),
            (Kind::Punct(b'['), "["),
            (Kind::Number, "1"),
            (Kind::Punct(b':'), ":"),
            (Kind::Number, "2"),
            (Kind::Punct(b']'), "]"),
        ]
    );
    // An operator stops before a comment; `t.col` is not a number.
    assert_eq!(
        tokens("a*/* c */b t.col"),
        [
            (Kind::Word, "a"),
            (Kind::Punct(b'*'), "*"),
            (Kind::Word, "b"),
            (Kind::Word, "t"),
            (Kind::Punct(b'.'), "."),
            (Kind::Word, "col")
        ]
    );
}

#[test]
fn lexer_reports_comments_and_ends_quietly() {
    let mut lx = Lexer::new(b"/* outer /* inner */ sluice:reader */ SELECT");
    assert!(lx.next().is_some());
    assert_eq!(
        lx.take_comment(),
        Some(&b" outer /* inner */ sluice:reader "[..])
    );
    let with: Vec<_> = Lexer::new(b"-- a\nSELECT /* b */ 1")
        .comments(true)
        .map(|t| t.kind)
        .collect();
    assert_eq!(
        with,
        [Kind::Comment, Kind::Word, Kind::Comment, Kind::Number]
    );
    for sql in [
        "SELECT 'abc",
        "SELECT E'a\\",
        "$$ abc",
        "/* /* */",
        "\"x",
        "U&",
        "$",
    ] {
        let _ = tokens(sql);
    }
    assert_eq!(tokens("SELECT 'abc").len(), 2);
    assert_eq!(tokens("SELECT $tag$ abc").len(), 2);
}

#[test]
fn splits_statements() {
    assert_eq!(split("SELECT 1; SELECT 2;"), ["SELECT 1", "SELECT 2"]);
    assert_eq!(
        split(" ; ;\n SELECT ';' ; -- only a comment\n"),
        ["SELECT ';'"]
    );
    assert_eq!(
        split(
            "CREATE FUNCTION f() RETURNS int AS $$ SELECT 1; SELECT 2; $$ LANGUAGE sql; SELECT f()"
        ),
        [
            "CREATE FUNCTION f() RETURNS int AS $$ SELECT 1; SELECT 2; $$ LANGUAGE sql",
            "SELECT f()"
        ]
    );
    assert_eq!(
        split("SELECT /* ; /* ; */ ; */ 1; SELECT \"a;b\" FROM t; SELECT E'\\';'"),
        [
            "SELECT /* ; /* ; */ ; */ 1",
            "SELECT \"a;b\" FROM t",
            "SELECT E'\\';'"
        ]
    );
    assert_eq!(
        split("CREATE RULE r AS ON INSERT TO t DO ALSO (INSERT INTO a VALUES (1); INSERT INTO b VALUES (2)); NOTIFY x"),
        [
            "CREATE RULE r AS ON INSERT TO t DO ALSO (INSERT INTO a VALUES (1); INSERT INTO b VALUES (2))",
            "NOTIFY x"
        ]
    );
    assert_eq!(
        split("CREATE PROCEDURE p() LANGUAGE sql BEGIN ATOMIC INSERT INTO t VALUES (1); SELECT CASE WHEN true THEN 1 END; END; BEGIN; COMMIT"),
        [
            "CREATE PROCEDURE p() LANGUAGE sql BEGIN ATOMIC INSERT INTO t VALUES (1); SELECT CASE WHEN true THEN 1 END; END",
            "BEGIN",
            "COMMIT"
        ]
    );
    // A leading comment stays with its statement, so its hint does too.
    assert_eq!(
        split("SELECT 1;\n/* sluice:reader */ SELECT 2"),
        ["SELECT 1", "/* sluice:reader */ SELECT 2"]
    );
    assert!(split("").is_empty());
    assert_eq!(scan(b"SELECT 1; SELECT $$;$$; ;").statements, 2);
    assert_eq!(scan(b";;").statements, 0);
}

#[test]
fn never_panics_on_garbage() {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let alphabet: &[u8] =
        b"SELECT $1:;'\"()/*-\n xyFORUPDATE0.9eEU&$tag\\,=*SETLOCALWITHASBEGINATOMICCASEEND;\xc3";
    let mut bytes = 0;
    for _ in 0..30_000 {
        let len = rng.below(64);
        let buf: Vec<u8> = (0..len)
            .map(|_| alphabet[rng.below(alphabet.len())])
            .collect();
        bytes += buf.len();
        let s = scan(&buf);
        let _ = s.hint(&buf);
        let mut n = 0;
        for (a, b) in statements(&buf) {
            assert!(a <= b && b <= buf.len());
            n += 1;
        }
        // The splitter and the scanner agree on where statements end.
        assert_eq!(n, s.statements, "{:?}", String::from_utf8_lossy(&buf));
    }
    assert!(bytes > 500_000, "the generator must not get stuck: {bytes}");
    // The same with whole words, which reach BEGIN ATOMIC bodies, dollar quotes and the like.
    let words: &[&str] = &[
        "BEGIN",
        "ATOMIC",
        "CASE",
        "END",
        ";",
        "(",
        ")",
        "'x'",
        "$$",
        "$a$",
        "/*",
        "*/",
        "--",
        "\n",
        "SELECT",
        "f",
        "SET",
        "LOCAL",
        "x",
        "=",
        "E'\\'",
        "\"q\"",
        "FOR",
        "UPDATE",
        "WITH",
        "AS",
        "::",
        ".",
        ",",
        "EXPLAIN",
        "COPY",
        "TO",
        "STDOUT",
        "INTO",
        "TEMP",
        "pg_catalog",
    ];
    let mut statements_seen = 0;
    for _ in 0..30_000 {
        let len = rng.below(24);
        let mut sql = String::new();
        for _ in 0..len {
            sql.push_str(words[rng.below(words.len())]);
            sql.push(' ');
        }
        let s = scan(sql.as_bytes());
        statements_seen += s.statements;
        assert_eq!(
            statements(sql.as_bytes()).count() as u32,
            s.statements,
            "{sql:?}"
        );
        // Each span, scanned alone, is one statement.
        for (a, b) in statements(sql.as_bytes()) {
            assert_eq!(
                scan(&sql.as_bytes()[a..b]).statements,
                1,
                "{:?}",
                &sql[a..b]
            );
        }
    }
    assert!(statements_seen > 30_000, "{statements_seen}");
}
