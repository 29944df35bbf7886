//! Prepared statements shared on pooled connections: what one client's batch does to the
//! statements sluice holds there must never break another client's.

use super::pg::raw::Raw;
use super::pg::start;
use postgres_protocol::message::frontend;

const ONE_CONNECTION: &str = "\n[pool]\nmax_connections = 1\nqueue_timeout = \"30s\"\n";

/// A batch that fails early makes the server skip the rest up to its Sync, including what
/// sluice added there: the Close and Parse that prepare a text afresh on the connection.
/// The connection still has the statement another client uses, and sluice must know it:
/// that client's statement keeps working (it got 42P05 `already exists` at every later use).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_server_skips_after_an_error_leaves_other_clients_statements_working() {
    let env = start(0, ONE_CONNECTION).await;
    let mut a = Raw::connect(env.port, "app", "app", "postgres").await;
    let mut b = Raw::connect(env.port, "app", "app", "postgres").await;
    a.extended("a", Some("SELECT 41 AS v"), &[]);
    frontend::sync(&mut a.out);
    assert_eq!(a.round(1).await.0, "12DCZ");
    // B: an error, then a Parse of the same text (skipped by the server).
    b.extended("", Some("SELECT 1/0"), &[]);
    frontend::parse("b", "SELECT 41 AS v", [], &mut b.out).unwrap();
    frontend::sync(&mut b.out);
    let (tags, msgs) = b.round(1).await;
    // (PostgreSQL folds 1/0 when it plans the Bind.)
    assert_eq!(tags, "1EZ");
    assert_eq!(msgs[1].sqlstate().as_deref(), Some("22012"));
    for _ in 0..2 {
        a.extended("a", None, &[]);
        frontend::sync(&mut a.out);
        let (tags, msgs) = a.round(1).await;
        assert_eq!(tags, "2DCZ", "{msgs:?}");
        assert_eq!(Raw::column(&msgs), ["41"]);
    }
    // B never had "b": directly, binding it fails.
    b.extended("b", None, &[]);
    frontend::sync(&mut b.out);
    let (tags, msgs) = b.round(1).await;
    assert_eq!(tags, "EZ");
    assert_eq!(msgs[0].sqlstate().as_deref(), Some("26000"));
}

/// In a failed transaction PostgreSQL refuses to parse anything but what ends it: a
/// `ROLLBACK` (or `COMMIT`, `ROLLBACK TO`) prepared there, named or not, parses, binds and
/// runs, and the session leaves the failed transaction (it stayed in it, holding the pool's
/// one connection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_prepared_in_a_failed_transaction_ends_it() {
    let env = start(0, ONE_CONNECTION).await;
    let mut a = Raw::connect(env.port, "app", "app", "postgres").await;
    for name in ["", "rb"] {
        a.try_simple("BEGIN").await.unwrap();
        assert!(a.try_simple("SELECT 1/0").await.is_err());
        a.extended(name, Some("ROLLBACK"), &[]);
        frontend::sync(&mut a.out);
        let (tags, msgs) = a.round(1).await;
        assert_eq!(tags, "12CZ", "{name:?}: {msgs:?}");
        assert_eq!(msgs[3].body, b"I", "{name:?}");
    }
    // A COMMIT of a failed transaction rolls it back, and a ROLLBACK TO recovers it.
    a.try_simple("CREATE TABLE kept (id int)").await.unwrap();
    a.try_simple("BEGIN").await.unwrap();
    a.try_simple("INSERT INTO kept VALUES (1); SAVEPOINT s")
        .await
        .unwrap();
    assert!(a.try_simple("SELECT 1/0").await.is_err());
    a.extended("", Some("ROLLBACK TO s"), &[]);
    frontend::sync(&mut a.out);
    let (tags, msgs) = a.round(1).await;
    assert_eq!(
        (tags.as_str(), msgs[3].body.as_slice()),
        ("12CZ", &b"T"[..])
    );
    a.extended("", Some("COMMIT"), &[]);
    frontend::sync(&mut a.out);
    let (tags, msgs) = a.round(1).await;
    assert_eq!(
        (tags.as_str(), msgs[3].body.as_slice()),
        ("12CZ", &b"I"[..])
    );
    let rows = a.try_simple("SELECT count(*) FROM kept").await.unwrap();
    assert_eq!(Raw::column(&rows), ["1"]);
    // Another client is served: nothing holds the connection.
    let mut b = Raw::connect(env.port, "app", "app", "postgres").await;
    b.try_simple("SELECT 1").await.unwrap();
}
