//! Settings changes: the names `SET` and `RESET` change, and those `set_config` sets for the
//! session.

use super::*;

fn set(sql: &str) -> Option<(bool, String, bool)> {
    scan(sql.as_bytes()).set.map(|s| (s.local, s.name, s.reset))
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
