//! Shape keys: texts of one key scan alike wherever `same_for_shape` holds of one of them,
//! and the statements whose scan depends on a literal's value or a token's place say so.

use super::super::lexer::{Kind, Lexer};
use super::super::{scan, shape_key, ShapeKey, MAX_SHAPE_KEY};
use super::frozen::corpus;
use super::Rng;

fn key(sql: &str) -> Option<Vec<u8>> {
    let mut out = ShapeKey::default();
    shape_key(sql.as_bytes(), &mut out).then(|| out.as_bytes().to_vec())
}

/// `sql` with each literal replaced by another of its kind, and each comment that does not
/// mention `sluice:` by another comment, drawn from `rng`.
fn other_literals(sql: &str, rng: &mut Rng) -> String {
    const COMMENTS: &[&str] = &["/* other words */", "/**/", "/* traceparent='00-4bf9' */"];
    const STRINGS: &[&str] = &[
        "'y'",
        "'a much longer string'",
        "''",
        "$$x$$",
        "E'\\n'",
        "$q$ ; $q$",
    ];
    const NUMBERS: &[&str] = &["7", "123456789", "0.25", "1e9", "42"];
    const PARAMS: &[&str] = &["$3", "$12"];
    let src = sql.as_bytes();
    let mut out = String::new();
    let mut at = 0;
    for t in Lexer::new(src).comments(true) {
        let pick = match t.kind {
            Kind::Str => STRINGS,
            Kind::Number => NUMBERS,
            Kind::Param => PARAMS,
            Kind::Comment if !mentions_hint(t.text(src)) => COMMENTS,
            _ => continue,
        };
        out.push_str(&String::from_utf8_lossy(&src[at..t.start]));
        out.push_str(pick[rng.below(pick.len())]);
        at = t.end;
    }
    out.push_str(&String::from_utf8_lossy(&src[at..]));
    out
}

fn mentions_hint(comment: &[u8]) -> bool {
    comment
        .to_ascii_lowercase()
        .windows(7)
        .any(|w| w == b"sluice:")
}

#[test]
fn texts_of_one_shape_scan_alike_where_the_scan_says_so() {
    let mut rng = Rng(0x5eed_0f5a);
    let (mut pairs, mut same_key, mut kept) = (0, 0, 0);
    for _ in 0..40_000 {
        let a = corpus(&mut rng);
        let b = other_literals(&a, &mut rng);
        pairs += 1;
        let (Some(ka), Some(kb)) = (key(&a), key(&b)) else {
            continue;
        };
        if ka != kb {
            continue;
        }
        same_key += 1;
        let (sa, sb) = (scan(a.as_bytes()), scan(b.as_bytes()));
        assert_eq!(
            sa.same_for_shape(),
            sb.same_for_shape(),
            "{a:?} / {b:?}: one key, and only one of them says its scan holds for it"
        );
        if sa.same_for_shape() {
            kept += 1;
            assert_eq!(sa, sb, "{a:?} / {b:?}: one key, different scans");
        }
    }
    // The generated pairs mostly keep their key (a replaced literal rarely lexes into its
    // neighbours), and a good share of them are statements a cache would keep.
    assert!(
        same_key * 10 > pairs * 8,
        "{same_key} of {pairs} pairs kept their key"
    );
    assert!(
        kept * 20 > same_key,
        "{kept} of {same_key} pairs kept by shape"
    );
}

#[test]
fn literals_are_left_out_and_everything_else_kept() {
    let pgbench = key("SELECT abalance FROM pgbench_accounts WHERE aid = 12345;");
    assert!(pgbench.is_some());
    assert_eq!(
        pgbench,
        key("SELECT abalance FROM pgbench_accounts WHERE aid = 7;")
    );
    assert_eq!(key("SELECT 'a', $1"), key("SELECT $$long text$$, $22"));
    // A comment's words are left out (a request id in it makes no shape of its own); a comment
    // that mentions a routing hint gives no key at all.
    assert_eq!(
        key("/* request 1 */ SELECT a -- x\n"),
        key("/* request 22, user 7 */ SELECT a /* y */")
    );
    assert_eq!(key("SELECT a /* sluice:reader */"), None);
    // set_config's third argument, a literal, decides whether it pins: no key.
    assert_eq!(
        key("INSERT INTO t SELECT length(set_config('a.b', '1', 'true'))"),
        None
    );
    assert_eq!(key("UPDATE t SET v = \"set_config\"('a.b', v, true)"), None);
    assert_eq!(key("SELECT a -- SLUICE:writer"), None);
    // A literal's kind stays; so do words, their case, operators, comments and token bounds.
    for (a, b) in [
        ("SELECT 1", "SELECT '1'"),
        ("SELECT 1", "SELECT $1"),
        ("SELECT ab", "SELECT a b"),
        ("SELECT a FROM t", "select a from t"),
        ("SELECT a /* x */", "SELECT a"),
        ("SELECT a <> b", "SELECT a < > b"),
        ("SELECT \"a\"", "SELECT a"),
        ("SELECT x::int", "SELECT x: :int"),
    ] {
        assert_ne!(key(a), key(b), "{a:?} / {b:?}");
    }
}

#[test]
fn scans_that_depend_on_a_literal_or_a_place_are_not_kept_by_shape() {
    for (a, b) in [
        // EXPLAIN's options by value: only an ANALYZE that is on runs the statement.
        (
            "EXPLAIN (ANALYZE 'off') DELETE FROM t",
            "EXPLAIN (ANALYZE 'on') DELETE FROM t",
        ),
        (
            "EXPLAIN (ANALYZE 0) DELETE FROM t",
            "EXPLAIN (ANALYZE 1) DELETE FROM t",
        ),
        // The value a SET gives is the session's state.
        ("SET search_path = 'a'", "SET search_path = 'b'"),
        // Spans: an unknown function's name moves with the literals.
        ("SELECT myfunc('a')", "SELECT myfunc('aaaa')"),
        // Several statements are scanned one by one by the session.
        ("SELECT 1; SELECT 2", "SELECT 3; SELECT 4"),
    ] {
        assert_eq!(key(a), key(b), "{a:?} / {b:?}");
        assert!(!scan(a.as_bytes()).same_for_shape(), "{a:?}");
    }
    assert_ne!(
        scan(b"EXPLAIN (ANALYZE 'off') DELETE FROM t").route,
        scan(b"EXPLAIN (ANALYZE 'on') DELETE FROM t").route
    );
    for kept in [
        "SELECT abalance FROM pgbench_accounts WHERE aid = $1",
        "UPDATE t SET a = 1 WHERE id = 2",
        "INSERT INTO t VALUES (1, 'x')",
        "DELETE FROM t WHERE id = 3",
        "WITH x AS (INSERT INTO t VALUES (1) RETURNING *) SELECT * FROM x",
        "SELECT * FROM jobs LIMIT 1 FOR UPDATE SKIP LOCKED",
        "SELECT nextval('s')",
    ] {
        assert!(scan(kept.as_bytes()).same_for_shape(), "{kept:?}");
    }
}

#[test]
fn keys_are_bounded() {
    let long = format!("SELECT {}", "1, ".repeat(MAX_SHAPE_KEY));
    assert_eq!(key(&long), None);
    let word = format!("SELECT {}", "a".repeat(MAX_SHAPE_KEY));
    assert_eq!(key(&word), None);
    let fits = format!("SELECT {}", "a".repeat(MAX_SHAPE_KEY - 20));
    assert!(key(&fits).is_some_and(|k| k.len() <= MAX_SHAPE_KEY));
}
