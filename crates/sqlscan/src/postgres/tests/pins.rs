//! Pins and unpins: the statements that tie a client to its server connection and those that
//! release it, and the names of both flag sets.

use super::*;

fn pins(sql: &str) -> Pins {
    scan(sql.as_bytes()).pins
}

fn unpins(sql: &str) -> Unpins {
    scan(sql.as_bytes()).unpins
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
        // What an EXECUTE of it will make pins at the PREPARE.
        (
            "PREPARE s AS SELECT pg_advisory_lock(5)",
            Pins::PREPARE | Pins::ADVISORY_LOCK,
        ),
        (
            "PREPARE s (text) AS SELECT set_config('role', $1, false)",
            Pins::PREPARE | Pins::SET_CONFIG,
        ),
        (
            "prepare s(int) as select setseed(0.5)",
            Pins::PREPARE | Pins::SETSEED,
        ),
        // Its name and parameter types are not calls.
        ("PREPARE set_config(text) AS SELECT $1", Pins::PREPARE),
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
        // Prepared, not run.
        (
            "PREPARE s AS SELECT pg_advisory_unlock_all()",
            Unpins::default(),
        ),
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
