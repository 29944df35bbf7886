//! Locks inside a read-only transaction: on a standby, those that only mean something on
//! the primary are refused; on a readers' hostgroup that holds the primary, taken as directly
//! (found by a differential review of routing).

use super::pg::raw::{Msg, Raw};
use super::pg::start;
use super::pins::POOL;
use postgres_protocol::message::frontend;

/// Locks that only mean something on the primary — `LOCK` in the modes a standby grants, the
/// advisory lock functions of a transaction, unlocks — were taken on the replica inside a
/// read-only transaction that one serves: granted there, excluding no one on the primary
/// (another session's lock on the primary did not stop them). They are refused there
/// (0A000), and go to the primary as a read-only transaction's first statement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn primary_locks_are_never_taken_on_a_replica() {
    let env = start(1, POOL).await;
    env.topo
        .primary()
        .sql("CREATE TABLE rp_l (x int); CREATE FUNCTION rp_f() RETURNS text LANGUAGE sql AS 'SELECT 1::text'")
        .unwrap();
    super::pg::wait_replayed(&env.topo).await;
    // Another session holds advisory lock 42 on the primary.
    let mut holder = Raw::connect(env.topo.primary().port, "app", "app", "postgres").await;
    holder
        .try_simple("SELECT pg_advisory_lock(42)")
        .await
        .unwrap();
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    let one = |msgs: Vec<Msg>| Raw::column(&msgs).concat();
    // Prepared before the transaction, bound inside it.
    c.extended(
        "xl",
        Some("SELECT pg_try_advisory_xact_lock($1)"),
        &[Some("42")],
    );
    frontend::sync(&mut c.out);
    assert_eq!(
        Raw::column(&c.round(1).await.1),
        ["f"],
        "held by the other session"
    );
    for lock in [
        "SELECT pg_try_advisory_xact_lock(42)",
        "SELECT pg_catalog.PG_ADVISORY_XACT_LOCK_SHARED(43)",
        "SELECT pg_advisory_unlock(42)",
        "LOCK rp_l IN ACCESS SHARE MODE",
        "SELECT 1; /* c */ lock TABLE rp_l IN ROW SHARE MODE",
        "",
    ] {
        c.try_simple("BEGIN READ ONLY").await.unwrap();
        assert_eq!(
            one(c.try_simple("SELECT pg_is_in_recovery()").await.unwrap()),
            "t",
            "the read-only transaction is on the replica"
        );
        let err = if lock.is_empty() {
            c.extended("xl", None, &[Some("42")]);
            frontend::sync(&mut c.out);
            let msgs = c.round(1).await.1;
            let e = msgs.iter().find(|m| m.tag == b'E').expect("an error");
            format!("{} {}", e.sqlstate().unwrap_or_default(), e.text())
        } else {
            c.try_simple(lock).await.unwrap_err()
        };
        assert!(
            err.starts_with("0A000") && err.contains("lock the primary's sessions must see"),
            "{lock}: {err}"
        );
        c.try_simple("ROLLBACK").await.unwrap();
        // First in a read-only transaction: on the primary, where the other session's lock
        // is seen.
        if lock.contains("pg_try_advisory_xact_lock") {
            c.try_simple("BEGIN READ ONLY").await.unwrap();
            assert_eq!(one(c.try_simple(lock).await.unwrap()), "f");
            c.try_simple("COMMIT").await.unwrap();
        }
    }
    // A function of the user's own that reads still runs there.
    c.try_simple("BEGIN READ ONLY").await.unwrap();
    c.try_simple("SELECT pg_is_in_recovery()").await.unwrap();
    let own = "SELECT rp_f() || pg_is_in_recovery()::text";
    assert_eq!(one(c.try_simple(own).await.unwrap()), "1true");
    c.try_simple("COMMIT").await.unwrap();
}

/// Where the readers' hostgroup holds the primary itself, a read-only transaction there takes
/// its locks as directly (they were refused as on a replica).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_in_a_read_only_transaction_on_a_primary_reader_are_taken() {
    let env = super::pg::start_with(0, |topo| {
        let reader = format!(
            "[[servers]]\naddress = \"{}\"\nprotocol = \"postgres\"\nhostgroup = \"reader\"\n",
            topo.primary().addr()
        );
        super::pg::config(topo, POOL).replacen("\n[monitor]", &format!("{reader}\n[monitor]"), 1)
    })
    .await;
    env.topo.primary().sql("CREATE TABLE rp_p (x int)").unwrap();
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    let one = |msgs: Vec<Msg>| Raw::column(&msgs).concat();
    for lock in [
        "SELECT pg_try_advisory_xact_lock(42)",
        "LOCK rp_p IN ACCESS SHARE MODE",
    ] {
        c.try_simple("BEGIN READ ONLY").await.unwrap();
        c.try_simple("SELECT 1").await.unwrap();
        let got = c.try_simple(lock).await.map(one);
        assert!(got.is_ok(), "{lock}: {got:?}");
        c.try_simple("COMMIT").await.unwrap();
    }
}
