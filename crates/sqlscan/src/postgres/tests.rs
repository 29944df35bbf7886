use super::*;

mod frozen;
mod lexing;
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

fn route(sql: &str) -> Route {
    scan(sql.as_bytes()).route()
}

fn command(sql: &str) -> PgCommand {
    scan(sql.as_bytes()).command
}

fn pins(sql: &str) -> Pins {
    scan(sql.as_bytes()).pins
}

fn unpins(sql: &str) -> Unpins {
    scan(sql.as_bytes()).unpins
}

fn set(sql: &str) -> Option<(bool, String, bool)> {
    scan(sql.as_bytes()).set.map(|s| (s.local, s.name, s.reset))
}

#[test]
fn reads() {
    for sql in [
        "SELECT 1",
        "SELECT abalance FROM pgbench_accounts WHERE aid = $1;",
        "select * from t where id = any($1) and name ilike $2 order by lower(name) limit 10",
        "SELECT count(*), sum(x), avg(x), min(x), max(x), coalesce(a, b), nullif(a, 0) FROM t",
        "SELECT now(), current_timestamp, CURRENT_TIMESTAMP(3), version(), pg_is_in_recovery()",
        "SELECT pg_catalog.now(), pg_catalog.format_type(t.oid, NULL) FROM pg_type t",
        "SELECT string_agg(name, ',' ORDER BY name), array_agg(DISTINCT x) FILTER (WHERE x > 0) FROM t",
        "SELECT row_number() OVER (PARTITION BY a ORDER BY b), rank() OVER w FROM t WINDOW w AS (ORDER BY b)",
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY x) FROM t",
        "SELECT x FROM generate_series(1, 10) AS g(x)",
        "SELECT * FROM unnest($1::int[]) WITH ORDINALITY AS u(v, n)",
        "SELECT 'x'::int, CAST(a AS numeric(10, 2)), b::varchar(20), c::character varying(5), d::double precision",
        "SELECT e::pg_catalog.int4, f::timestamp(3) with time zone FROM t",
        "SELECT * FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.id = t.id) AND a IN (1, 2, 3)",
        "SELECT ARRAY(SELECT 1), ROW(1, 2), (a, b) = ANY (ARRAY[(1, 2)]) FROM t",
        "SELECT EXTRACT(year FROM d), SUBSTRING(s FROM 1 FOR 2), POSITION('a' IN s), TRIM(BOTH ' ' FROM s) FROM t",
        "SELECT jsonb_build_object('a', 1) ->> 'a', jsonb_path_query(j, '$.a'), to_char(d, 'YYYY'), date_trunc('day', d)",
        "SELECT greatest(1, 2), least(1, 2), format('%s', 1), md5('x'), random(), abs(-1), round(1.5)",
        "SELECT current_setting('search_path'), current_user, pg_backend_pid(), upper(s), length(s), concat(a, b)",
        "WITH x AS (SELECT 1) SELECT * FROM x",
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 10) SELECT n FROM r",
        "WITH a(x) AS (SELECT 1), b(y) AS MATERIALIZED (SELECT 2) SELECT * FROM a, b",
        "WITH a AS NOT MATERIALIZED (SELECT 1) SELECT * FROM a",
        "(SELECT 1) UNION (SELECT 2) ORDER BY 1",
        "VALUES (1, 'a'), (2, 'b')",
        "TABLE t",
        "SELECT a, sum(b) FROM t GROUP BY ROLLUP(a), CUBE(b), GROUPING SETS ((a), ())",
        "SELECT * FROM t TABLESAMPLE SYSTEM (10) REPEATABLE (42)",
        "SELECT * FROM t1 JOIN t2 USING (id) LEFT JOIN LATERAL (SELECT 1) s ON (true)",
        "SELECT 'for update', 'nextval(1)', $$ DELETE $$ FROM t",
        "select \"for\", \"update\", \"insert\" from t",
        "SELECT a -- for update\nFROM t",
        "SELECT a /* FOR UPDATE */ FROM t",
        "SELECT E'\\' FOR UPDATE' FROM t",
        "SELECT $fn$ ' FOR UPDATE $fn$",
        "SELECT * FROM t FOR READ ONLY",
        "SELECT a FROM t WHERE b OPERATOR(pg_catalog.=) 1",
        "SELECT COLLATION FOR ('x')",
        "SHOW search_path",
        "show all",
        "COPY t TO STDOUT",
        "COPY (SELECT a FROM t WHERE b > 1) TO STDOUT WITH (FORMAT csv)",
        "COPY t (a, b) TO STDOUT",
        "EXPLAIN SELECT * FROM t",
        "EXPLAIN (FORMAT JSON, COSTS off) SELECT * FROM t",
        "EXPLAIN UPDATE t SET a = 1",
        "EXPLAIN DELETE FROM t",
        "EXPLAIN SELECT nextval('s')",
        "EXPLAIN ANALYZE SELECT * FROM t",
        "EXPLAIN (ANALYZE, BUFFERS) SELECT 1",
        "EXPLAIN (ANALYZE false) INSERT INTO t VALUES (1)",
        "EXPLAIN (\"analyze\" \"off\") INSERT INTO t VALUES (1)",
        "SELECT 1 -- x\r",
        "EXPLAIN ANALYZE VERBOSE SELECT 1",
        "BEGIN READ ONLY",
        "BEGIN TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY",
        "START TRANSACTION READ ONLY",
        "START TRANSACTION ISOLATION LEVEL READ COMMITTED READ ONLY DEFERRABLE",
        "SET TRANSACTION READ ONLY",
        "SELECT 1; SELECT 2",
        "/* sluice:reader */ SELECT 1",
    ] {
        assert_eq!(route(sql), Route::Read, "{sql}");
    }
}

#[test]
fn writes() {
    for sql in [
        // What says whether the server is a standby: the primary's answer.
        "SHOW transaction_read_only",
        "show IN_HOT_STANDBY",
        "INSERT INTO t VALUES (1)",
        "UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2;",
        "DELETE FROM t",
        "MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN UPDATE SET a = s.a",
        "TRUNCATE t",
        "SELECT * FROM t FOR UPDATE",
        "SELECT * FROM t FOR NO KEY UPDATE SKIP LOCKED",
        "SELECT * FROM t FOR SHARE",
        "SELECT * FROM t FOR KEY SHARE OF t NOWAIT",
        "SELECT * FROM (SELECT * FROM t FOR UPDATE) s",
        "SELECT * INTO new_t FROM t",
        "WITH w AS (DELETE FROM t RETURNING *) SELECT * FROM w",
        "WITH w AS (INSERT INTO t VALUES (1) RETURNING id) SELECT id FROM w",
        "WITH w AS (UPDATE t SET a = 1 RETURNING *) SELECT * FROM w",
        "WITH w AS (SELECT 1) UPDATE t SET a = 1",
        "SELECT nextval('s')",
        "SELECT setval('s', 1)",
        "SELECT currval('s'), lastval()",
        "SELECT \"nextval\"('s')",
        "SELECT pg_catalog.nextval('s')",
        "SELECT my_func(1)",
        "SELECT * FROM my_func(1)",
        "SELECT * FROM t, LATERAL my_srf(t.id)",
        "SELECT myschema.f()",
        "SELECT \"myschema\".\"now\"()",
        "SELECT \"NOW\"()",
        "SELECT \"exists\"(1)",
        "SELECT set_config('search_path', 'x', false)",
        "SELECT pg_advisory_lock(1)",
        "SELECT pg_advisory_xact_lock(1)",
        "SELECT pg_try_advisory_xact_lock(1)",
        "SELECT pg_advisory_unlock(1)",
        "SELECT pg_advisory_unlock_all()",
        "SELECT pg_notify('c', 'x')",
        "SELECT txid_current()",
        "SELECT pg_current_wal_lsn()",
        "SELECT a, count(*) FROM t GROUP BY a HAVING my_check(a)",
        "SELECT * FROM t ORDER BY my_rank(t)",
        "VALUES (my_func(1))",
        "SELECT 1; INSERT INTO t VALUES (1)",
        "INSERT INTO t VALUES (1); SELECT 1",
        "SELECT x::text FROM my_func(1)",
        "SELECT a AS b FROM my_func(1)",
        "SELECT a AS \"desc\", my_func(b) FROM t",
        "SELECT CAST(my_func(x) AS int)",
        "WITH a AS (SELECT 1), b AS (SELECT 2) SELECT * FROM a, my_func(1)",
        "WITH a AS (SELECT 1) (SELECT 1) UNION (SELECT 2) ORDER BY 1, my_func(1)",
        "WITH a AS (SELECT 1) SELECT (1), my_func(2)",
        "SELECT * FROM (WITH w(x) AS (SELECT 1) SELECT my_func(x) FROM w) s",
        "SELECT rollup(1)",
        "SELECT filter(1)",
        "SELECT 1 FROM t WHERE over(1)",
        "SELECT * FROM t1 JOIN t2 ON my_match(t1.a, t2.b)",
        "SELECT COALESCE(my_func(1), 0)",
        "SELECT * FROM t WHERE id IN (SELECT id FROM u FOR UPDATE)",
        "SELECT uuid_generate_v4()",
        "SELECT pg_terminate_backend(123)",
        "SELECT U&\"now\"()",
        "CALL p(1)",
        "DO $$ BEGIN PERFORM 1; END $$",
        "COPY t FROM STDIN",
        "COPY t (a, b) FROM '/tmp/x' WITH (FORMAT csv)",
        "COPY t TO '/tmp/x'",
        "COPY t TO PROGRAM 'gzip > /tmp/x'",
        "COPY (SELECT nextval('s')) TO STDOUT",
        "COPY (DELETE FROM t RETURNING *) TO STDOUT",
        "EXPLAIN ANALYZE UPDATE t SET a = 1",
        "EXPLAIN (ANALYZE) DELETE FROM t",
        "EXPLAIN (ANALYZE true, BUFFERS) INSERT INTO t VALUES (1)",
        // An option's name may be quoted.
        "EXPLAIN (\"analyze\") DELETE FROM t",
        "EXPLAIN (\"analyse\" true) INSERT INTO t VALUES (1)",
        // A carriage return ends a `--` comment.
        "SELECT 1 -- x\r, nextval('s')",
        "EXPLAIN ANALYZE SELECT nextval('s')",
        "EXPLAIN EXECUTE s(1)",
        "LISTEN c",
        "NOTIFY c, 'x'",
        "UNLISTEN *",
        "CREATE TABLE t (a int)",
        "CREATE TEMP TABLE t (a int)",
        "ALTER TABLE t ADD COLUMN b int",
        "DROP TABLE t",
        "GRANT SELECT ON t TO u",
        "BEGIN",
        "BEGIN READ WRITE",
        "START TRANSACTION",
        "BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY",
        "START TRANSACTION READ ONLY, ISOLATION LEVEL SERIALIZABLE",
        "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE",
        "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE, READ ONLY",
        "COMMIT",
        "ROLLBACK",
        "LOCK TABLE t IN ACCESS EXCLUSIVE MODE",
        "VACUUM t",
        "ANALYZE t",
        "CLUSTER t",
        "REINDEX TABLE t",
        "PREPARE s AS SELECT 1",
        "EXECUTE s",
        "SET search_path TO a",
        "RESET ALL",
        "DISCARD ALL",
        "DEALLOCATE ALL",
        "REFRESH MATERIALIZED VIEW v",
        "CHECKPOINT",
        "FETCH 10 FROM c",
        "DECLARE c CURSOR FOR SELECT 1",
        "",
        "  -- only a comment\n",
        "42",
        "frobnicate the database",
    ] {
        assert_eq!(route(sql), Route::Write, "{sql:?}");
    }
    assert_eq!(scan(b"").route, None);
    assert_eq!(scan(b"SELECT 1").route, Some(Route::Read));
}

#[test]
fn commands() {
    use PgCommand as C;
    let begin = |read_only, serializable| C::Begin {
        read_only,
        serializable,
    };
    let set_tx = |read_only, serializable| C::SetTransaction {
        read_only,
        serializable,
    };
    for (sql, want) in [
        ("", C::Empty),
        (" ;; -- x", C::Empty),
        ("select 1", C::Select),
        ("(select 1)", C::Select),
        ("VALUES (1)", C::Select),
        ("WITH x AS (SELECT 1) SELECT * FROM x", C::Select),
        (
            "WITH x AS (SELECT 1) INSERT INTO t SELECT * FROM x",
            C::Insert,
        ),
        ("WITH x AS (SELECT 1) UPDATE t SET a = 1", C::Update),
        (
            "WITH x AS (UPDATE t SET a = 1 RETURNING *) DELETE FROM u",
            C::Delete,
        ),
        ("INSERT INTO t VALUES (1)", C::Insert),
        ("update t set a = 1", C::Update),
        ("DELETE FROM t", C::Delete),
        (
            "MERGE INTO t USING s ON true WHEN MATCHED THEN DELETE",
            C::Merge,
        ),
        ("BEGIN", begin(None, false)),
        ("BEGIN WORK READ ONLY", begin(Some(true), false)),
        ("START TRANSACTION READ WRITE", begin(Some(false), false)),
        ("BEGIN ISOLATION LEVEL SERIALIZABLE", begin(None, true)),
        ("BEGIN ISOLATION LEVEL READ COMMITTED", begin(None, false)),
        (
            "START TRANSACTION ISOLATION LEVEL SERIALIZABLE, READ ONLY, DEFERRABLE",
            begin(Some(true), true),
        ),
        (
            "begin transaction isolation level repeatable read read write not deferrable;",
            begin(Some(false), false),
        ),
        ("BEGIN ISOLATION LEVEL READ UNCOMMITTED", begin(None, false)),
        // Not PostgreSQL's modes: the server's syntax error, not a BEGIN answered early.
        ("BEGIN ISOLATION LEVEL bogus", C::Other),
        ("BEGIN ISOLATION LEVEL READ", C::Other),
        ("BEGIN READ ONLY WRITE", C::Other),
        ("BEGIN READ", C::Other),
        ("BEGIN NOT", C::Other),
        ("BEGIN ISOLATION SERIALIZABLE", C::Other),
        ("BEGIN TRANSACTION TRANSACTION", C::Other),
        ("START TRANSACTION frobnicate", C::Other),
        ("BEGIN ,", C::Other),
        ("BEGIN ISOLATION LEVEL SERIALIZABLE,", C::Other),
        ("START TRANSACTION , READ ONLY", C::Other),
        ("BEGIN READ ONLY,, DEFERRABLE", C::Other),
        ("COMMIT foo", C::Other),
        ("ROLLBACK foo", C::Other),
        ("COMMIT AND", C::Other),
        ("END WORK WORK", C::Other),
        ("COMMIT;", C::Commit),
        ("COMMIT", C::Commit),
        ("END", C::Commit),
        ("COMMIT AND NO CHAIN", C::Commit),
        ("COMMIT PREPARED 'x'", C::Other),
        ("PREPARE TRANSACTION 'x'", C::Other),
        ("ROLLBACK", C::Rollback),
        ("ABORT", C::Rollback),
        ("ROLLBACK WORK AND NO CHAIN", C::Rollback),
        ("ROLLBACK TO SAVEPOINT a", C::RollbackToSavepoint),
        ("ROLLBACK TRANSACTION TO a", C::RollbackToSavepoint),
        ("ROLLBACK PREPARED 'x'", C::Other),
        ("COMMIT AND CHAIN", C::CommitAndChain),
        ("ROLLBACK WORK AND CHAIN", C::RollbackAndChain),
        ("END AND CHAIN x", C::Other),
        ("END TRANSACTION", C::Commit),
        ("SAVEPOINT a", C::Savepoint),
        ("RELEASE SAVEPOINT a", C::Release),
        ("RELEASE a", C::Release),
        ("SET TRANSACTION READ ONLY", set_tx(Some(true), false)),
        (
            "SET LOCAL TRANSACTION ISOLATION LEVEL SERIALIZABLE",
            set_tx(None, true),
        ),
        (
            "SET TRANSACTION SNAPSHOT '00000003-0000001B-1'",
            set_tx(None, false),
        ),
        ("SET x = 1", C::Set),
        ("SET SESSION AUTHORIZATION bob", C::Set),
        (
            "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY",
            C::Set,
        ),
        ("SET CONSTRAINTS ALL DEFERRED", C::Other),
        ("RESET x", C::Reset),
        ("DISCARD ALL", C::Discard { all: true }),
        ("DISCARD PLANS", C::Discard { all: false }),
        ("DEALLOCATE PREPARE ALL", C::Deallocate { all: true }),
        ("DEALLOCATE s", C::Deallocate { all: false }),
        ("PREPARE s (int) AS SELECT $1", C::Prepare),
        ("EXECUTE s (1)", C::Execute),
        ("LISTEN c", C::Listen),
        ("UNLISTEN c", C::Unlisten),
        ("NOTIFY c", C::Notify),
        (
            "COPY t FROM STDIN",
            C::Copy {
                from_stdin_or_file: true,
            },
        ),
        (
            "COPY t TO STDOUT",
            C::Copy {
                from_stdin_or_file: false,
            },
        ),
        (
            "COPY (SELECT 1) TO STDOUT",
            C::Copy {
                from_stdin_or_file: false,
            },
        ),
        ("SHOW x", C::Show),
        ("EXPLAIN SELECT 1", C::Explain),
        ("CALL p()", C::Call),
        ("DO $$ $$", C::Do),
        ("CREATE TABLE t (a int)", C::Ddl),
        ("TRUNCATE t", C::Ddl),
        ("COMMENT ON TABLE t IS 'x'", C::Ddl),
        ("VACUUM (ANALYZE) t", C::Vacuum),
        ("ANALYZE t", C::Vacuum),
        ("LOCK t", C::Other),
        ("DECLARE c CURSOR FOR SELECT 1", C::Other),
        ("LOAD 'x'", C::Other),
        ("SELECT 1; INSERT INTO t VALUES (1)", C::Select),
    ] {
        assert_eq!(command(sql), want, "{sql}");
    }
}

#[test]
fn pins_and_unpins() {
    for (sql, want) in [
        ("CREATE TEMP TABLE t (a int)", Pins::TEMP_TABLE),
        ("create temporary table t as select 1", Pins::TEMP_TABLE),
        ("CREATE GLOBAL TEMPORARY TABLE t (a int)", Pins::TEMP_TABLE),
        ("CREATE LOCAL TEMP SEQUENCE s", Pins::TEMP_TABLE),
        (
            "CREATE OR REPLACE TEMP VIEW v AS SELECT 1",
            Pins::TEMP_TABLE,
        ),
        ("CREATE TABLE pg_temp.t (a int)", Pins::TEMP_TABLE),
        ("SELECT * INTO TEMP t FROM u", Pins::TEMP_TABLE),
        ("SELECT a INTO TEMPORARY TABLE t FROM u", Pins::TEMP_TABLE),
        ("SELECT pg_advisory_lock(1)", Pins::ADVISORY_LOCK),
        ("SELECT pg_try_advisory_lock(1, 2)", Pins::ADVISORY_LOCK),
        ("SELECT pg_advisory_lock_shared(1)", Pins::ADVISORY_LOCK),
        ("SELECT PG_TRY_ADVISORY_LOCK_SHARED(1)", Pins::ADVISORY_LOCK),
        ("SELECT pg_catalog.pg_advisory_lock(1)", Pins::ADVISORY_LOCK),
        (
            "EXPLAIN ANALYZE SELECT pg_advisory_lock(1)",
            Pins::ADVISORY_LOCK,
        ),
        (
            "COPY (SELECT pg_advisory_lock(1)) TO STDOUT",
            Pins::ADVISORY_LOCK,
        ),
        ("LISTEN c", Pins::LISTEN),
        ("DECLARE c CURSOR WITH HOLD FOR SELECT 1", Pins::WITH_HOLD),
        (
            "DECLARE c NO SCROLL CURSOR WITH HOLD FOR WITH x AS (SELECT 1) SELECT * FROM x",
            Pins::WITH_HOLD,
        ),
        ("PREPARE s AS SELECT 1", Pins::PREPARE),
        ("LOAD 'auto_explain'", Pins::LOAD),
        ("SET SESSION AUTHORIZATION bob", Pins::SESSION_AUTHORIZATION),
        (
            "SET SESSION SESSION AUTHORIZATION 'bob'",
            Pins::SESSION_AUTHORIZATION,
        ),
        (
            "SET session_authorization = bob",
            Pins::SESSION_AUTHORIZATION,
        ),
        (
            "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY",
            Pins::SESSION_CHARACTERISTICS,
        ),
        (
            "LISTEN a; SELECT pg_advisory_lock(1)",
            Pins::LISTEN | Pins::ADVISORY_LOCK,
        ),
        // A session setting of a parameter of PostgreSQL's named by a literal: read back
        // from the server.
        (
            "SELECT set_config('search_path', 'x', false)",
            Pins::SET_CONFIG_READ,
        ),
        (
            "select pg_catalog.SET_CONFIG('statement_timeout', '1', 'off')",
            Pins::SET_CONFIG_READ,
        ),
        (
            "SELECT set_config('work_mem', '1MB', 1 = 1)",
            Pins::SET_CONFIG_READ,
        ),
        (
            "SELECT set_config('work_mem', '1MB')",
            Pins::SET_CONFIG_READ,
        ),
        ("SELECT set_config('jit', $1, false)", Pins::SET_CONFIG_READ),
        // Names not read back: custom ones, unreadable ones, the role, what the scanner's
        // reading depends on.
        ("SELECT set_config('a.b', 'c', 1 = 1)", Pins::SET_CONFIG),
        ("SELECT set_config('a.b', 'c')", Pins::SET_CONFIG),
        (
            "SELECT set_config('a.b', concat('x', ','), false), set_config('c.d', 'e', true)",
            Pins::SET_CONFIG,
        ),
        (
            "SELECT * FROM t WHERE set_config('a.b', 'c', (SELECT false))::text = 'c'",
            Pins::SET_CONFIG,
        ),
        ("SELECT set_config($1, $2, $3)", Pins::SET_CONFIG),
        ("SELECT set_config('role', 'bob', false)", Pins::SET_CONFIG),
        (
            "SELECT set_config('Client_Encoding', 'SJIS', false)",
            Pins::SET_CONFIG,
        ),
        (
            "SELECT set_config('standard_conforming_strings', 'off', false)",
            Pins::SET_CONFIG,
        ),
        ("SELECT setseed(0.5)", Pins::SETSEED),
        // The seed outlives the setting, a local one too.
        ("SET seed = 0.5", Pins::SETSEED),
        ("SET LOCAL Seed TO 0.25", Pins::SETSEED),
        ("SELECT set_config('SEED', '0.5', true)", Pins::SETSEED),
        // A name the scanner cannot read may be `seed`.
        ("SELECT set_config($1, '0.5', true)", Pins::SET_CONFIG),
        ("SELECT pg_catalog.SETSEED(0.5), random()", Pins::SETSEED),
        ("SELECT U&\"pg_advisory_lock\"(1)", Pins::UNREAD_CALL),
        ("SELECT \"a\"\"b\"(1)", Pins::UNREAD_CALL),
        ("SET search_path = pg_temp, public", Pins::TEMP_SEARCH_PATH),
        ("SET LOCAL search_path TO 'PG_TEMP'", Pins::TEMP_SEARCH_PATH),
        ("SET SCHEMA 'pg_temp'", Pins::TEMP_SEARCH_PATH),
        (
            "SELECT set_config('search_path', 'pg_temp, public', true)",
            Pins::TEMP_SEARCH_PATH,
        ),
        (
            "SELECT pg_catalog.set_config('SEARCH_PATH', 'app,' || 'PG_TEMP', 'on')",
            Pins::TEMP_SEARCH_PATH,
        ),
        (
            "SELECT set_config('search_path', 'pg_temp', false)",
            Pins::SET_CONFIG_READ | Pins::TEMP_SEARCH_PATH,
        ),
    ] {
        assert_eq!(pins(sql), want, "{sql}");
    }
    for sql in [
        "SELECT pg_advisory_xact_lock(1)",
        "SELECT pg_try_advisory_xact_lock_shared(1)",
        "SELECT pg_advisory_unlock(1)",
        "CREATE TABLE t (a int)",
        "CREATE TABLE temp (a int)",
        "INSERT INTO temp VALUES (1)",
        "SELECT * FROM pg_temp.t",
        "SELECT 'pg_advisory_lock(1)'",
        "DECLARE c CURSOR WITHOUT HOLD FOR SELECT 1",
        "DECLARE c CURSOR FOR SELECT 1",
        "EXPLAIN SELECT pg_advisory_lock(1)",
        "PREPARE TRANSACTION 'x'",
        "SET LOCAL SESSION AUTHORIZATION bob",
        "SET SESSION AUTHORIZATION DEFAULT",
        "SET ROLE bob",
        "SET search_path = public, app",
        "UNLISTEN c",
        "SELECT 1",
        // Settings for the transaction only.
        "SELECT set_config('request.jwt.claims', '{\"role\": \"x\"}', true)",
        "SELECT pg_catalog.set_config('a.b', concat('x', ',', (1)), TRUE)",
        "SELECT set_config('a.b', 'c', 'on'), set_config('d.e', 'f', 't')",
        "SELECT myschema.set_config('a', 'b', false)",
        "SELECT 'set_config(1, 2, false)'",
        "SELECT set_config('search_path', 'app, public', true)",
        "SELECT set_config('search_path', $1, true), set_config('role', $2, true)",
        "SELECT set_config('application_name', 'pg_temp', true)",
        "SELECT set_config('search_path', 'x', true), 'pg_temp'",
        // The transaction's own parameters end with it.
        "SELECT set_config('transaction_isolation', 'serializable', false)",
        "SELECT set_config('Transaction_Read_Only', 'on', false)",
    ] {
        assert!(pins(sql).is_empty(), "{sql}: {:?}", pins(sql));
    }
    for (sql, want) in [
        ("UNLISTEN *", Unpins::UNLISTEN_ALL),
        (
            "SELECT pg_advisory_unlock_all()",
            Unpins::ADVISORY_UNLOCK_ALL,
        ),
        ("DEALLOCATE ALL", Unpins::DEALLOCATE_ALL),
        ("DEALLOCATE PREPARE ALL", Unpins::DEALLOCATE_ALL),
        ("DISCARD ALL", Unpins::DISCARD_ALL),
        ("DISCARD TEMP", Unpins::DISCARD_TEMP),
        ("DISCARD TEMPORARY", Unpins::DISCARD_TEMP),
        (
            "RESET SESSION AUTHORIZATION",
            Unpins::RESET_SESSION_AUTHORIZATION,
        ),
        (
            "SET SESSION AUTHORIZATION DEFAULT",
            Unpins::RESET_SESSION_AUTHORIZATION,
        ),
        (
            "RESET session_authorization",
            Unpins::RESET_SESSION_AUTHORIZATION,
        ),
        ("CLOSE ALL", Unpins::CLOSE_ALL),
        (
            "UNLISTEN *; DISCARD ALL",
            Unpins::UNLISTEN_ALL | Unpins::DISCARD_ALL,
        ),
    ] {
        assert_eq!(unpins(sql), want, "{sql}");
    }
    for sql in [
        "UNLISTEN c",
        "DEALLOCATE s",
        "DISCARD PLANS",
        "CLOSE c",
        "RESET ALL",
    ] {
        assert!(unpins(sql).is_empty(), "{sql}");
    }
}

#[test]
fn flag_names() {
    let p = Pins::TEMP_TABLE | Pins::LISTEN | Pins::SESSION_CHARACTERISTICS;
    assert_eq!(
        p.names().collect::<Vec<_>>(),
        ["temporary table", "LISTEN", "SET SESSION CHARACTERISTICS"]
    );
    assert!(p.contains(Pins::LISTEN) && !p.contains(Pins::LOAD) && !p.is_empty());
    assert!(p.intersects(Pins::LISTEN | Pins::LOAD));
    assert!(Pins::default().is_empty());
    assert_eq!(
        Pins::ADVISORY_LOCK.names().next(),
        Some("session advisory lock")
    );
    assert_eq!(Pins::WITH_HOLD.names().next(), Some("WITH HOLD cursor"));
    assert_eq!(Pins::PREPARE.names().next(), Some("SQL PREPARE"));
    assert_eq!(Pins::LOAD.names().next(), Some("LOAD"));
    assert_eq!(
        Pins::SESSION_AUTHORIZATION.names().next(),
        Some("SET SESSION AUTHORIZATION")
    );
    assert_eq!(Unpins(0x7f).names().count(), 7);
}

#[test]
fn set_and_reset() {
    let s = |local, name: &str, reset| Some((local, name.to_owned(), reset));
    for (sql, want) in [
        (
            "SET search_path TO myschema, public",
            s(false, "search_path", false),
        ),
        ("set Search_Path = 'a'", s(false, "search_path", false)),
        (
            "SET SESSION statement_timeout = 0",
            s(false, "statement_timeout", false),
        ),
        (
            "SET LOCAL lock_timeout TO '1s'",
            s(true, "lock_timeout", false),
        ),
        ("SET \"Weird\" = 1", s(false, "weird", false)), // names are case-insensitive, quoted too
        ("SET myapp.Tenant = '42'", s(false, "myapp.tenant", false)),
        ("SET TIME ZONE 'UTC'", s(false, "timezone", false)),
        ("SET TIME ZONE LOCAL", s(false, "timezone", true)),
        ("SET TIME ZONE DEFAULT", s(false, "timezone", true)),
        ("SET timezone = DEFAULT", s(false, "timezone", true)),
        ("SET work_mem TO DEFAULT", s(false, "work_mem", true)),
        // PostgreSQL's old names: the same settings.
        ("SET sort_mem = '6MB'", s(false, "work_mem", false)),
        ("RESET Vacuum_Mem", s(false, "maintenance_work_mem", true)),
        ("SET ROLE admin", s(false, "role", false)),
        ("SET LOCAL ROLE NONE", s(true, "role", false)),
        ("SET NAMES 'UTF8'", s(false, "client_encoding", false)),
        ("SET SCHEMA 'app'", s(false, "search_path", false)),
        ("SET XML OPTION DOCUMENT", s(false, "xmloption", false)),
        (
            "RESET statement_timeout",
            s(false, "statement_timeout", true),
        ),
        ("RESET ALL", s(false, "all", true)),
        ("RESET TIME ZONE", s(false, "timezone", true)),
        ("RESET ROLE", s(false, "role", true)),
        (
            "RESET TRANSACTION ISOLATION LEVEL",
            s(true, "transaction_isolation", true),
        ),
        // The transaction's own parameters last until its end, as with LOCAL.
        (
            "SET transaction_isolation = 'repeatable read'",
            s(true, "transaction_isolation", false),
        ),
        (
            "SET SESSION transaction_read_only TO off",
            s(true, "transaction_read_only", false),
        ),
        (
            "SET Transaction_Deferrable = on",
            s(true, "transaction_deferrable", false),
        ),
        (
            "RESET transaction_read_only",
            s(true, "transaction_read_only", true),
        ),
        (
            "/* sluice:writer */ SET application_name = 'x';",
            s(false, "application_name", false),
        ),
        ("SET TRANSACTION READ ONLY", None),
        ("SET SESSION AUTHORIZATION bob", None),
        ("RESET SESSION AUTHORIZATION", None),
        (
            "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE",
            None,
        ),
        ("SET CONSTRAINTS ALL IMMEDIATE", None),
        ("SET a = 1; SET b = 2", None),
        ("SELECT 1", None),
    ] {
        assert_eq!(set(sql), want, "{sql}");
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

#[test]
fn the_names_set_config_sets_for_the_session_are_read_back() {
    use super::set_config_names;
    for (sql, want) in [
        (
            "SELECT current_setting('jit'), set_config('JIT', 'off', false)",
            &["jit"][..],
        ),
        (
            "SELECT pg_catalog.set_config('work_mem', $1, false), set_config('jit', 'x', true), set_config('WORK_MEM', 'y', 'off'), set_config('a.b', 'c', false)",
            &["work_mem"],
        ),
        ("SELECT set_config('role', 'x', false), set_config($1, 'y', false)", &[]),
        ("SELECT 'set_config(''a'', ''b'', false)'", &[]),
    ] {
        assert_eq!(set_config_names(sql.as_bytes()), want, "{sql}");
    }
}
