//! Reads whose answer is the state of the server that runs them, not replicated data: the
//! statistics views (`pg_stat_…`, `pg_statio_…`, `pg_stat_statements`), locks
//! (`pg_locks`), prepared transactions (`pg_prepared_xacts`, which PgJDBC's XA recovery
//! reads), sequences' current values (`pg_sequences`: a standby logs them ahead), replication
//! slots and the server's memory. On a replica they answer about the replica — plausibly, and
//! wrongly for a client that takes the endpoint for one server — so they go to the primary.
//! A text naming one anywhere (also in a string or a comment: the safe way) counts.

/// Views read whole by name.
const VIEWS: &[&[u8]] = &[
    b"pg_backend_memory_contexts",
    b"pg_locks",
    b"pg_prepared_xacts",
    b"pg_replication_slots",
    b"pg_sequences",
    b"pg_shmem_allocations",
];

/// Families of views read by prefix.
const PREFIXES: &[&[u8]] = &[b"pg_stat_", b"pg_statio_"];

/// True if `sql` names one of the server's own state views (case-insensitive, as an
/// unquoted name is; a quoted one in lower case too).
pub fn reads_server_state(sql: &[u8]) -> bool {
    let mut from = 0;
    while let Some(i) = find_pg(&sql[from..]) {
        let at = from + i;
        from = at + 3;
        if at > 0 && is_name_byte(sql[at - 1]) {
            continue;
        }
        let end = sql[at..]
            .iter()
            .position(|b| !is_name_byte(*b))
            .map_or(sql.len(), |n| at + n);
        let word = &sql[at..end];
        if VIEWS.iter().any(|v| word.eq_ignore_ascii_case(v))
            || PREFIXES.iter().any(|p| {
                word.get(..p.len())
                    .is_some_and(|w| w.eq_ignore_ascii_case(p))
            })
        {
            return true;
        }
    }
    false
}

/// The first `pg_` (any case) in `s`: found by its `_`, rarer in a statement than the
/// letters (the scan runs once per statement shape, see the classifications kept by shape).
fn find_pg(s: &[u8]) -> Option<usize> {
    let mut from = 2;
    while from < s.len() {
        let u = from + s[from..].iter().position(|b| *b == b'_')?;
        if s[u - 2] | 0x20 == b'p' && s[u - 1] | 0x20 == b'g' {
            return Some(u - 2);
        }
        from = u + 1;
    }
    None
}

/// A byte that continues an unquoted name.
fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80
}

#[cfg(test)]
mod tests {
    use super::reads_server_state;

    #[test]
    fn names_of_the_servers_own_state_are_found() {
        for sql in [
            "SELECT * FROM pg_locks",
            "select count(*) from PG_LOCKS where locktype = 'advisory'",
            "SELECT gid FROM pg_catalog.pg_prepared_xacts WHERE database = current_database()",
            "SELECT last_value FROM pg_sequences WHERE sequencename = 's'",
            "SELECT * FROM pg_stat_activity",
            "SELECT n_live_tup FROM pg_stat_user_tables",
            "SELECT * FROM pg_statio_user_tables",
            "SELECT * FROM \"pg_stat_database\"",
            "SELECT query FROM pg_stat_statements",
            "SELECT 1 FROM x JOIN pg_replication_slots s ON true",
            "TABLE pg_locks",
            "pg_stat_activity",
        ] {
            assert!(reads_server_state(sql.as_bytes()), "{sql}");
        }
    }

    #[test]
    fn other_names_are_not_taken_for_them() {
        for sql in [
            "SELECT abalance FROM pgbench_accounts WHERE aid = 1",
            "SELECT * FROM my_pg_locks",
            "SELECT * FROM pg_lockset",
            "SELECT * FROM pg_class",
            "SELECT pg_is_in_recovery()",
            "SELECT * FROM pg_statistic_ext",
            "SELECT 1",
            "_",
            "pg",
            "",
        ] {
            assert!(!reads_server_state(sql.as_bytes()), "{sql}");
        }
    }
}
