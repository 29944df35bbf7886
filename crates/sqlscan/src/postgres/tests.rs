use super::*;

mod frozen;
mod lexing;
mod pins;
mod routes;
mod sample;
mod settings;
mod shape;

/// A xorshift generator: deterministic pseudo-random input (shared by the generated-input
/// tests here and the digest's).
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

#[test]
fn hints() {
    let sql = b"/* sluice:reader */ SELECT 1";
    assert_eq!(scan(sql).hint(sql), Some("reader"));
    let sql = b"SELECT 1 -- sluice:writer";
    assert_eq!(scan(sql).hint(sql), Some("writer"));
    let sql = b"/* app */ /* sluice:analytics-1 */ SELECT 1";
    assert_eq!(scan(sql).hint(sql), Some("analytics-1"));
    let sql = b"/* outer /* sluice:reader */ */ SELECT 1";
    assert_eq!(scan(sql).hint(sql), Some("reader"));
    let sql = b"SELECT '/* sluice:writer */', $$ -- sluice:writer $$";
    assert_eq!(scan(sql).hint(sql), None);
    let sql = b"SELECT /* sluice: */ 1";
    assert_eq!(scan(sql).hint(sql), None);
    let sql = b"SELECT 1; /* sluice:writer */ SELECT 2";
    assert_eq!(scan(sql).hint(sql), Some("writer"));
}

#[test]
fn statement_counts_and_merging() {
    let s = scan(b"BEGIN READ ONLY; SELECT 1; COMMIT;");
    assert_eq!(s.statements, 3);
    assert_eq!(
        s.command,
        PgCommand::Begin {
            read_only: Some(true),
            serializable: false
        }
    );
    assert_eq!(s.route, Some(Route::Write)); // COMMIT
    let s = scan(b"SELECT 1; SELECT 2");
    assert_eq!((s.statements, s.route), (2, Some(Route::Read)));
    // Statements after a dollar-quoted function body are still seen.
    let s = scan(b"CREATE FUNCTION f() RETURNS void AS $fn$ SELECT 1; $fn$ LANGUAGE sql; LISTEN c");
    assert_eq!(s.statements, 2);
    assert!(s.pins.contains(Pins::LISTEN));
    let s = scan(
        b"CREATE PROCEDURE p() LANGUAGE sql BEGIN ATOMIC SELECT 1; SELECT CASE WHEN true THEN 1 END; END; LISTEN c",
    );
    assert_eq!((s.statements, s.command), (2, PgCommand::Ddl));
    assert!(s.pins.contains(Pins::LISTEN));
}

#[test]
fn writes_only_by_unknown_functions_name_them() {
    let names = |sql: &str| {
        scan(sql.as_bytes()).user_calls.map(|c| {
            c.iter()
                .map(|&(s, e)| sql[s..e].to_string())
                .collect::<Vec<_>>()
        })
    };
    assert_eq!(names("SELECT my_report(1)"), Some(vec!["my_report".into()]));
    assert_eq!(
        names("SELECT * FROM app.totals() t"),
        Some(vec!["totals".into()])
    );
    assert_eq!(
        names("SELECT \"Quoted\"(1); SELECT upper(x), g() FROM t"),
        Some(vec!["\"Quoted\"".into(), "g".into()])
    );
    for sql in [
        "SELECT 1",
        "SELECT upper('x')",
        "SELECT f() FROM t FOR UPDATE",
        "SELECT f(), nextval('s')",
        "SELECT f(); INSERT INTO t VALUES (1)",
        "WITH w AS (DELETE FROM t RETURNING f(x)) SELECT * FROM w",
        "SELECT pg_advisory_lock(1), f()",
        "INSERT INTO t VALUES (f())",
        "CALL p()",
    ] {
        assert_eq!(names(sql), None, "{sql}");
    }
}
