//! `WITH HOLD` cursors: a session pinned for them is released when it closes the last one by
//! name, as by `CLOSE ALL` (PgBouncer users close them one by one); what sluice cannot name
//! keeps it pinned until `CLOSE ALL`. Against PostgreSQL itself (see [`differential`]), and
//! the session's pins as the admin API shows them.

use super::pg::raw::Raw;
use super::pg::{start, PgEnv};
use super::pins::{differential, POOL};

const HOLD: &str = "WITH HOLD cursor";

/// Whether a session is pinned for held cursors, once the statement before `c`'s `SELECT 1`
/// was followed (a unit is followed before the next one starts).
async fn held(env: &PgEnv, c: &mut Raw) -> bool {
    c.try_simple("SELECT 1").await.unwrap();
    env.pin_reasons().iter().any(|r| r.contains(&HOLD))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_the_last_held_cursor_by_name_releases_the_session() {
    let env = start(0, POOL).await;
    // The same answers as directly, the connection lent on as soon as nothing holds it.
    differential(
        &env,
        2,
        &[
            (0, "DECLARE \"Cur\" CURSOR WITH HOLD FOR SELECT 1"),
            (0, "BEGIN"),
            (0, "DECLARE c2 CURSOR WITH HOLD FOR SELECT 2"),
            (0, "COMMIT"),
            (1, "BEGIN"),
            (1, "SELECT 10"),
            (0, "FETCH 1 FROM \"Cur\""),
            (0, "CLOSE \"Cur\""),
            (0, "FETCH 1 FROM c2"),
            (1, "COMMIT"),
            (0, "BEGIN"),
            (0, "CLOSE C2"),
            (0, "COMMIT"),
            (1, "BEGIN"),
            (1, "SELECT 11"),
            (0, "SELECT 3"),
            (1, "COMMIT"),
        ],
    )
    .await;

    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    c.try_simple("DECLARE \"Cur\" CURSOR WITH HOLD FOR SELECT 1")
        .await
        .unwrap();
    c.try_simple("BEGIN; DECLARE c2 CURSOR WITH HOLD FOR SELECT 2; COMMIT")
        .await
        .unwrap();
    assert!(held(&env, &mut c).await);
    c.try_simple("CLOSE \"Cur\"").await.unwrap();
    assert!(held(&env, &mut c).await, "c2 is still open");
    // A CLOSE that fails (no such cursor) releases nothing.
    assert!(c.try_simple("CLOSE cur").await.is_err());
    assert!(held(&env, &mut c).await);
    // Inside a block, released by its commit.
    c.try_simple("BEGIN").await.unwrap();
    c.try_simple("CLOSE C2").await.unwrap();
    assert!(held(&env, &mut c).await, "released once the block commits");
    c.try_simple("COMMIT").await.unwrap();
    assert!(!held(&env, &mut c).await);

    // A name sluice cannot read: only CLOSE ALL releases.
    c.try_simple("DECLARE U&\"c\\0033\" CURSOR WITH HOLD FOR SELECT 3")
        .await
        .unwrap();
    c.try_simple("CLOSE c3").await.unwrap();
    assert!(held(&env, &mut c).await);
    c.try_simple("CLOSE ALL").await.unwrap();
    assert!(!held(&env, &mut c).await);
}
