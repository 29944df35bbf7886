//! Parameters whose `SET` does not move from one server connection to another as the others
//! do, against PostgreSQL itself (the steps run through sluice and directly, see
//! [`differential`]): `seed`, which seeds the server process's `random()`; the transaction's
//! own parameters; `temp_buffers`, which a server process that used temporary tables no
//! longer takes; and a `DateStyle` of one part given at startup.

use super::pg::raw::Raw;
use super::pg::start;
use super::pins::{differential, POOL};

/// `SET seed` (also `SET LOCAL`) pins the session, as `setseed()` does: the seed stays its
/// own, and the next client's `random()` is not predictable from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seed_set_stays_with_its_session() {
    let env = start(0, POOL).await;
    // The first value after seed 0.5, from a direct connection of its own.
    let mut d = Raw::connect(env.topo.primary().port, "app", "app", "postgres").await;
    d.try_simple("SET seed = 0.5").await.unwrap();
    let r0 = Raw::column(&d.try_simple("SELECT random()::text").await.unwrap()).concat();
    let is_r0 = format!("SELECT random()::text = '{r0}'");
    differential(&env, 2, &[(0, "SET seed = 0.5"), (1, &is_r0), (0, &is_r0)]).await;
    differential(
        &env,
        2,
        &[
            (0, "BEGIN"),
            (0, "SET LOCAL seed = 0.5"),
            (0, "COMMIT"),
            (1, &is_r0),
            (0, &is_r0),
        ],
    )
    .await;
    differential(
        &env,
        2,
        &[
            (0, "SELECT set_config('seed', '0.5', true) IS NOT NULL"),
            (1, &is_r0),
            (0, &is_r0),
        ],
    )
    .await;
}

/// `SET transaction_isolation`, `transaction_read_only` or `transaction_deferrable` outside a
/// transaction block sets its own implicit transaction only (PostgreSQL takes it and nothing
/// lasts); it is not the session's to replay on another connection, where PostgreSQL would
/// refuse it once the transaction has run a query, and a standby refuses `serializable`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_transactions_own_parameters_end_with_it() {
    // Reads go to the replica.
    let env = start(1, POOL).await;
    // (Not `transaction_read_only`: a replica's is on, whatever was set. The CREATE below is
    // what shows that a `SET transaction_read_only = on` did not last.)
    let show =
        "SELECT current_setting('transaction_isolation') || current_setting('transaction_deferrable')";
    differential(
        &env,
        2,
        &[
            (0, "SET transaction_isolation = 'serializable'"),
            (0, show),
            (0, "SET transaction_isolation = 'repeatable read'"),
            (0, "SET transaction_read_only = on"),
            (0, "SET SESSION transaction_deferrable = on"),
            // Client 1 holds the connection client 0 used: its next statement runs on
            // the other one.
            (1, "BEGIN"),
            (1, "SELECT 1"),
            (0, show),
            (0, "CREATE TEMP TABLE tp_written (x int)"),
            (0, "DISCARD TEMP"),
            (1, "COMMIT"),
            (0, "BEGIN"),
            (0, "SET transaction_isolation = 'serializable'"),
            (0, show),
            (0, "COMMIT"),
            (0, show),
        ],
    )
    .await;
}

/// A server process that used temporary tables no longer takes a change of `temp_buffers`:
/// the connection of a session whose temporary tables are gone (`DISCARD TEMP`) is closed
/// when it comes back, so that another session's `SET temp_buffers`, made or replayed, never
/// meets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn temp_buffers_can_be_set_whoever_used_temporary_tables() {
    let env = start(0, POOL).await;
    differential(
        &env,
        2,
        &[
            // Made where another session's temporary tables were.
            (1, "CREATE TEMP TABLE tb (x int)"),
            (1, "INSERT INTO tb VALUES (1)"),
            (1, "DISCARD TEMP"),
            (0, "SET temp_buffers = '32MB'"),
            (0, "SHOW temp_buffers"),
            // Replayed there.
            (1, "CREATE TEMP TABLE tb (x int)"),
            (1, "INSERT INTO tb VALUES (1)"),
            (1, "DISCARD ALL"),
            (0, "SHOW temp_buffers"),
            (1, "SHOW temp_buffers"),
        ],
    )
    .await;
}

/// A `DateStyle` of one part given at startup (PgJDBC always sends `DateStyle=ISO`) keeps the
/// other part from the server's default, as on a login of its own, not from what another
/// session left on the pooled connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_startup_datestyle_of_one_part_is_the_logins_own() {
    let env = start(0, POOL).await;
    let params = [
        ("user", "app"),
        ("database", "postgres"),
        ("DateStyle", "ISO"),
    ];
    let query = "SELECT current_setting('DateStyle') || ' ' || '01/02/2020'::date";
    let mut got = Vec::new();
    for port in [env.topo.primary().port, env.port] {
        let mut other = Raw::connect(port, "app", "app", "postgres").await;
        other
            .try_simple("SET DateStyle = 'SQL, DMY'")
            .await
            .unwrap();
        other.try_simple("SELECT 1").await.unwrap();
        drop(other);
        let mut jdbc = Raw::connect_with(port, "app", &params).await.unwrap();
        got.push(Raw::column(&jdbc.try_simple(query).await.unwrap()).concat());
    }
    assert_eq!(got[0], "ISO, MDY 2020-01-02");
    assert_eq!(got[1], got[0], "through sluice");
}

/// `set_config(name, value, false)` of one of PostgreSQL's parameters, named by a literal,
/// moves with the session as a `SET` does, its value read back from the server once the
/// transaction is over (the value may be an expression or a parameter; a rollback undoes
/// it): the session is not pinned, so asyncpg's first use of a custom type
/// (`set_config('jit', 'off', false)`) also works in a read-only transaction on a replica,
/// and no other client sees the setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setting_made_with_set_config_moves_with_its_session() {
    let env = start(1, POOL).await;
    // (Empty or missing alike: a custom setting's name stays known on a connection it was
    // made on, see docs/sessions.md.)
    differential(
        &env,
        2,
        &[
            (
                0,
                "SELECT set_config('statement_timeout', (1000 + 234)::text, false)",
            ),
            (0, "SELECT set_config('work_mem', '7MB', false)"),
            // Client 1 holds the connection client 0 used.
            (1, "BEGIN"),
            (1, "SELECT 1"),
            (0, "SHOW statement_timeout"),
            (0, "SHOW work_mem"),
            (1, "SHOW statement_timeout"),
            (1, "SHOW work_mem"),
            (1, "COMMIT"),
            // Rolled back: as if never made.
            (0, "BEGIN"),
            (0, "SELECT set_config('work_mem', '9MB', false)"),
            (0, "ROLLBACK"),
            (1, "BEGIN"),
            (1, "SELECT 1"),
            (0, "SHOW work_mem"),
            (1, "COMMIT"),
            // A call that failed set nothing to replay (the parameter cannot be changed).
            (0, "SELECT set_config('server_version', '1', false)"),
            (0, "SELECT 2"),
            (1, "BEGIN"),
            (1, "SELECT 1"),
            (0, "SELECT 3"),
            (1, "COMMIT"),
            (1, "SELECT 4"),
            // asyncpg's introspection, in a read-only transaction (a replica serves it).
            (0, "BEGIN READ ONLY"),
            (0, "SELECT 1"),
            (
                0,
                "SELECT current_setting('jit'), set_config('jit', 'off', false)",
            ),
            (0, "COMMIT"),
            (0, "SHOW jit"),
            (0, "X:SELECT set_config('jit', 'on', false)"),
            (0, "SHOW jit"),
            (1, "SHOW jit"),
        ],
    )
    .await;
    // Nothing pinned a session.
    let pins = env.pin_reasons();
    assert!(pins.iter().all(|p| p.is_empty()), "{pins:?}");
}

/// A role's defaults altered while sluice runs (`ALTER ROLE … SET`): a client keeps the
/// values it was told at login (its time zone, its string syntax) on every pooled
/// connection, those opened before the change and those opened after it, as a direct
/// connection keeps them (it reads its defaults once, at login) and as PgBouncer does. A
/// client told `standard_conforming_strings` off is pinned as if it had set it: a `SET`
/// the scanner cannot see in its text stays with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_client_was_told_at_login_holds_after_its_roles_defaults_change() {
    let env = start(0, "\n[pool]\nmax_connections = 2\n").await;
    let told = |r: &Raw, k: &str| -> String {
        let p = r.params.iter().find(|(n, _)| n == k);
        p.map(|(_, v)| v.clone()).unwrap_or_default()
    };
    let settings = "SELECT current_setting('TimeZone') || ' ' \
                    || current_setting('standard_conforming_strings')";
    let mut a = Raw::connect(env.port, "app", "app", "postgres").await;
    let before = format!("{} on", told(&a, "TimeZone"));
    assert_eq!(told(&a, "standard_conforming_strings"), "on");
    assert!(!before.starts_with("Asia/Tokyo"));
    // One connection opened before the change, held; the next is opened after it.
    let mut holder = Raw::connect(env.port, "app", "app", "postgres").await;
    holder.try_simple("BEGIN; SELECT 1").await.unwrap();
    env.topo
        .primary()
        .sql("ALTER ROLE app SET timezone = 'Asia/Tokyo'; ALTER ROLE app SET standard_conforming_strings = off")
        .unwrap();
    for round in 0..4 {
        let msgs = a.try_simple(settings).await.unwrap();
        assert_eq!(
            Raw::column(&msgs),
            std::slice::from_ref(&before),
            "round {round}"
        );
        if round == 1 {
            holder.try_simple("COMMIT").await.unwrap();
        }
    }
    drop(holder);
    drop(a);
    // Every connection now has the new defaults, and a login unlike the first is told them.
    env.topo
        .primary()
        .sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'app'")
        .unwrap();
    // Gone (their FATAL and end sent) before sluice may lend one again: the termination is
    // a signal, and a busy machine runs the backends' exit later.
    let gone = "SELECT count(*) FROM pg_stat_activity WHERE usename = 'app'";
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while env.topo.primary().sql(gone).unwrap() != "0" {
        assert!(
            std::time::Instant::now() < deadline,
            "the backends did not exit"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // A login of a kind unlike the first's (its own DateStyle).
    let kind = [
        ("user", "app"),
        ("database", "postgres"),
        ("DateStyle", "ISO, DMY"),
    ];
    let mut c = Raw::connect_with(env.port, "app", &kind).await.unwrap();
    assert_eq!(told(&c, "standard_conforming_strings"), "off");
    let msgs = c.try_simple(settings).await.unwrap();
    assert_eq!(Raw::column(&msgs), ["Asia/Tokyo off"]);
    // With backslashes ordinary characters, the scanner reads this as one SELECT; the server
    // runs the SET after it.
    c.try_simple(r"SELECT '\''; SET search_path = elsewhere; --'")
        .await
        .unwrap();
    let mut d = Raw::connect(env.port, "app", "app", "postgres").await;
    for _ in 0..3 {
        let msgs = d.try_simple("SHOW search_path").await.unwrap();
        assert_eq!(Raw::column(&msgs), ["\"$user\", public"]);
    }
    let msgs = c.try_simple("SHOW search_path").await.unwrap();
    assert_eq!(Raw::column(&msgs), ["elsewhere"]);
    // A second login of the same kind is told what the first was without a connection of
    // its own (see `welcomes`), and is pinned alike. (The pool has two connections: the
    // first login's goes first.)
    drop(c);
    let mut e = Raw::connect_with(env.port, "app", &kind).await.unwrap();
    assert_eq!(told(&e, "standard_conforming_strings"), "off");
    e.try_simple(r"SELECT '\''; SET search_path = another; --'")
        .await
        .unwrap();
    for _ in 0..3 {
        let msgs = d.try_simple("SHOW search_path").await.unwrap();
        assert_eq!(Raw::column(&msgs), ["\"$user\", public"]);
    }
    let msgs = e.try_simple("SHOW search_path").await.unwrap();
    assert_eq!(Raw::column(&msgs), ["another"]);
}

/// `SET SESSION CHARACTERISTICS AS TRANSACTION …` moves with its session as the
/// `default_transaction_*` settings it makes: replayed on the next connection, never seen by
/// another client, undone by a rollback and by `DISCARD ALL` — and the session is not
/// pinned for it. Serializable by default, its reads go to the primary (a standby refuses
/// serializable transactions).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_characteristics_move_with_their_session() {
    let env = start(1, POOL).await;
    env.topo.primary().sql("CREATE TABLE sc_t (x int)").unwrap();
    const SHOWN: &str = "SELECT current_setting('default_transaction_read_only') || ' ' || \
                         current_setting('default_transaction_isolation') || ' ' || \
                         current_setting('default_transaction_deferrable')";
    differential(
        &env,
        2,
        &[
            (0, "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY, ISOLATION LEVEL REPEATABLE READ DEFERRABLE"),
            // Client 1 holds the connection client 0 used.
            (1, "BEGIN"),
            (1, "SELECT 1"),
            (0, SHOWN),
            (0, "INSERT INTO sc_t VALUES (1)"),
            (1, SHOWN),
            (1, "COMMIT"),
            // Rolled back: as if never made.
            (0, "BEGIN"),
            (0, "SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE"),
            (0, "ROLLBACK"),
            (1, "BEGIN"),
            (1, "SELECT 1"),
            (0, SHOWN),
            (1, "COMMIT"),
            (0, "SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE NOT DEFERRABLE"),
            (0, "INSERT INTO sc_t VALUES (2)"),
            (0, SHOWN),
            (0, "DISCARD ALL"),
            (1, "BEGIN"),
            (1, "SELECT 1"),
            (0, SHOWN),
            (1, "COMMIT"),
        ],
    )
    .await;

    // Not pinned, and serializable by default: the read runs on the primary, where it
    // succeeds (a replica refuses it).
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    c.try_simple("SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE")
        .await
        .unwrap();
    let got = c
        .try_simple(
            "SELECT pg_is_in_recovery()::text || ' ' || current_setting('transaction_isolation')",
        )
        .await
        .unwrap();
    assert_eq!(Raw::column(&got), vec!["false serializable".to_string()]);
    let mine = env.pin_reasons();
    assert!(
        !mine.is_empty() && mine.iter().all(|p| p.is_empty()),
        "{mine:?}"
    );
}
