//! Pins and session state as PostgreSQL itself keeps them, in the usual spellings: each test
//! runs the same steps through sluice and directly and compares what every step returned
//! (see [`super::pins`] for the pool and the steps' notation).

use super::pins::{differential, with_source, LOCKS_HERE, TEMPS_HERE};

/// What behaves correctly: pins taken in the usual spellings, released by what releases them,
/// nothing left to the next client; custom settings move with the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn as_postgres_advisory() {
    let env = with_source().await;
    // Advisory locks in several places: held by A wherever it runs, never by B's connection.
    differential(
        &env,
        2,
        &[
            (0, "WITH l AS (SELECT pg_advisory_lock(1)) SELECT 1 FROM l"),
            (1, LOCKS_HERE),
            (0, "SELECT 1 FROM rp_src WHERE pg_try_advisory_lock(2)"),
            (0, "SELECT PG_ADVISORY_LOCK(3)"),
            (0, "SELECT pg_catalog.pg_advisory_lock(4)"),
            (0, "SELECT * FROM pg_advisory_lock_shared(5)"),
            (0, "SELECT \"pg_advisory_lock\"(6)"),
            (0, "SELECT (SELECT pg_try_advisory_lock_shared(7))"),
            (1, LOCKS_HERE),
            (1, "BEGIN"),
            (1, "SELECT 1"),
            (0, LOCKS_HERE),
            (1, "COMMIT"),
            (0, "SELECT pg_advisory_unlock_all()"),
            (1, LOCKS_HERE),
            (0, "SELECT pg_advisory_xact_lock(8)"),
            (1, LOCKS_HERE),
            (0, "BEGIN"),
            (0, "SELECT pg_advisory_xact_lock(9)"),
            (0, "COMMIT"),
            (1, LOCKS_HERE),
            (0, LOCKS_HERE),
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn as_postgres_temp() {
    let env = with_source().await;
    // Temporary objects in their spellings; DISCARD TEMP releases.
    differential(
        &env,
        2,
        &[
            (0, "CREATE TEMP VIEW rp_v AS SELECT 1 AS a"),
            (1, TEMPS_HERE),
            (0, "CREATE TEMPORARY SEQUENCE rp_s"),
            (0, "SELECT * INTO TEMP rp_into FROM rp_src"),
            (0, "CREATE TABLE pg_temp.rp_q (x int)"),
            (0, "CREATE TABLE \"pg_temp\".rp_q2 (x int)"),
            (0, "CREATE TEMP TABLE rp_as AS SELECT 1"),
            (0, "BEGIN"),
            (0, "CREATE TEMP TABLE rp_ocd (x int) ON COMMIT DROP"),
            (0, "COMMIT"),
            (1, TEMPS_HERE),
            (1, "BEGIN"),
            (1, "SELECT 1"),
            (0, TEMPS_HERE),
            (1, "COMMIT"),
            (0, "DISCARD TEMP"),
            (0, TEMPS_HERE),
            (1, TEMPS_HERE),
            (0, "CREATE TEMP TABLE rp_last (x int)"),
            (0, "DROP TABLE rp_last"),
            (1, TEMPS_HERE),
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn as_postgres_set_config() {
    let env = with_source().await;
    // set_config in its spellings; SET of custom settings moves.
    differential(
        &env,
        2,
        &[
            (0, "WITH c AS (SELECT set_config('rp.a', 'A1', false)) SELECT * FROM c"),
            (0, "SELECT pg_catalog.set_config('rp.b', 'A2', 'off')"),
            (0, "SELECT 1 FROM rp_src WHERE set_config('rp.c', 'A3', 'f') IS NOT NULL"),
            (1, "SELECT coalesce(current_setting('rp.a', true), '<null>')"),
            (1, "SELECT coalesce(current_setting('rp.b', true), '<null>')"),
            (1, "SELECT coalesce(current_setting('rp.c', true), '<null>')"),
            (1, "BEGIN"),
            (1, "SELECT 1"),
            (0, "SELECT current_setting('rp.a') || current_setting('rp.b') || current_setting('rp.c')"),
            (1, "COMMIT"),
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn as_postgres_moves() {
    let env = with_source().await;
    differential(
        &env,
        2,
        &[
            (0, "SET rp.tenant = 't-A'"),
            (0, "SET search_path = pg_catalog, public"),
            (0, "SET ROLE monitor"),
            (1, "BEGIN"),
            (1, "SELECT 1"),
            (0, "SELECT current_setting('rp.tenant') || current_user || current_setting('search_path')"),
            (1, "COMMIT"),
            (1, "SELECT current_user || current_setting('search_path')"),
            (0, "BEGIN"),
            (0, "SELECT set_config('rp.tenant', 'local', true)"),
            (0, "COMMIT"),
            (0, "SELECT current_setting('rp.tenant')"),
            (0, "BEGIN"),
            (0, "SET rp.tenant = 'rolled-back'"),
            (0, "ROLLBACK"),
            (0, "SELECT current_setting('rp.tenant')"),
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn as_postgres_release() {
    let env = with_source().await;
    // Session authorization, cursors, prepared statements and their releases.
    differential(
        &env,
        3,
        &[
            (0, "SET SESSION AUTHORIZATION monitor"),
            (1, "SELECT session_user || current_user"),
            (0, "SELECT session_user"),
            (0, "RESET SESSION AUTHORIZATION"),
            (1, "SELECT session_user || current_user"),
            (0, "BEGIN"),
            (
                0,
                "DECLARE rp_cur CURSOR WITH HOLD FOR SELECT x FROM rp_src",
            ),
            (0, "COMMIT"),
            (1, "FETCH rp_cur"),
            (0, "FETCH rp_cur"),
            (0, "CLOSE ALL"),
            (1, "FETCH rp_cur"),
            (0, "PREPARE rp_prep AS SELECT 7"),
            (1, "EXECUTE rp_prep"),
            (0, "EXECUTE rp_prep"),
            (0, "DEALLOCATE ALL"),
            (1, "EXECUTE rp_prep"),
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn as_postgres_quit() {
    let env = with_source().await;
    // A pinned session that leaves: its connection is not lent again.
    differential(
        &env,
        2,
        &[
            (0, "CREATE TEMP TABLE rp_gone (x int)"),
            (0, "SELECT pg_advisory_lock(11)"),
            (0, "SELECT set_config('rp.gone', 'A', false)"),
            (0, "!quit"),
            (1, TEMPS_HERE),
            (1, LOCKS_HERE),
            (
                1,
                "SELECT coalesce(current_setting('rp.gone', true), '<null>')",
            ),
        ],
    )
    .await;
}
