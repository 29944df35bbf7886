//! Session state that pins a session or must not leak to another client, against PostgreSQL
//! itself: each test runs the same steps through sluice and directly (one direct connection
//! per client) and compares what every step returned.
//!
//! The pool has two connections per server, so a client that is not pinned gives its
//! connection back and the other client gets that very connection (idle connections are
//! reused most recent first), while a pinned client keeps its own and the other client gets a
//! second one. `1: BEGIN` / `1: SELECT 1` makes client 1 hold a connection so that client 0's
//! next statement runs on the other one.

use super::pg::raw::{Msg, Raw};
use super::pg::{start, PgEnv};
use std::time::Duration;

pub(super) const POOL: &str = "\n[pool]\nmax_connections = 2\nqueue_timeout = \"5s\"\n";

/// The session advisory locks of the server connection the query runs on.
pub(super) const LOCKS_HERE: &str =
    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()";
/// The temporary objects of the server connection the query runs on.
pub(super) const TEMPS_HERE: &str =
    "SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema()";

/// sluice with the pool of [`POOL`] in front of a primary holding table `rp_src` (one row).
pub(super) async fn with_source() -> PgEnv {
    let env = start(0, POOL).await;
    env.topo
        .primary()
        .sql("CREATE TABLE rp_src (x int); INSERT INTO rp_src VALUES (1)")
        .unwrap();
    env
}

/// What one step gave: its rows (first column, comma-separated), its notifications, or its
/// error's SQLSTATE.
fn shown(r: Result<Vec<Msg>, String>) -> String {
    match r {
        Ok(msgs) => {
            let mut out = Raw::column(&msgs).join(",");
            for m in msgs.iter().filter(|m| m.tag == b'A') {
                // pid, channel, payload
                let rest = &m.body[4..];
                let ch_end = rest.iter().position(|&b| b == 0).unwrap();
                out.push_str(&format!(
                    " notify({})",
                    String::from_utf8_lossy(&rest[..ch_end])
                ));
            }
            out
        }
        Err(e) => format!("ERR {}", e.split(' ').next().unwrap_or_default()),
    }
}

/// Sends the statements of `spec` (separated by ` ;; `) through the extended protocol, each
/// unnamed (Parse, Bind, Execute), then one Sync; what came back: each message's type byte,
/// an error's SQLSTATE, a CommandComplete's tag, a DataRow's first column, and the
/// transaction status.
async fn pipeline(c: &mut Raw, spec: &str) -> String {
    for sql in spec.split(" ;; ") {
        c.extended("", Some(sql), &[]);
    }
    postgres_protocol::message::frontend::sync(&mut c.out);
    let (_, msgs) = c.round(1).await;
    protocol_shown(&msgs)
}

/// Messages as a line: each one's type byte, an error's SQLSTATE, a CommandComplete's tag,
/// a DataRow's first column, ReadyForQuery's status.
pub(super) fn protocol_shown(msgs: &[Msg]) -> String {
    let text = |b: &[u8]| String::from_utf8_lossy(b.strip_suffix(b"\0").unwrap_or(b)).into_owned();
    let shown: Vec<String> = msgs
        .iter()
        .map(|m| match m.tag {
            b'E' => format!("E({})", m.sqlstate().unwrap_or_default()),
            b'C' => format!("C({})", text(&m.body)),
            b'D' => format!("D({})", Raw::column(std::slice::from_ref(m)).concat()),
            b'Z' => format!("Z({})", m.body[0] as char),
            t => (t as char).to_string(),
        })
        .collect();
    shown.join(" ")
}

/// Runs `steps` against PostgreSQL directly, then through sluice (each run gets the port to
/// connect to and gives a transcript); asserts the two transcripts are equal and gives the
/// direct one.
pub(super) async fn direct_then_sluice(
    env: &PgEnv,
    steps: impl AsyncFn(u16) -> Vec<String>,
) -> Vec<String> {
    let direct = steps(env.topo.primary().port).await;
    let via = steps(env.port).await;
    assert_eq!(via, direct, "through sluice as directly");
    direct
}

/// Logs in as `app` to `postgres` with these startup parameters besides.
pub(super) async fn connect_with_startup(port: u16, params: &[(&str, &str)]) -> Raw {
    let mut all = vec![("user", "app"), ("database", "postgres")];
    all.extend_from_slice(params);
    Raw::connect_with(port, "app", &all).await.unwrap()
}

/// Runs `steps` (client index, SQL; `!quit` closes the client; `X:` then statements separated
/// by ` ;; ` is one extended-protocol pipeline, see [`pipeline`]) with `n` clients connected
/// to `port`, and returns what each step gave.
async fn run(port: u16, n: usize, steps: &[(usize, &str)]) -> Vec<String> {
    let mut clients = Vec::new();
    for _ in 0..n {
        clients.push(Some(Raw::connect(port, "app", "app", "postgres").await));
    }
    let mut out = Vec::new();
    for (i, sql) in steps {
        match *sql {
            "!quit" => {
                clients[*i] = None;
                out.push(String::new());
            }
            _ => {
                let c = clients[*i].as_mut().expect("client closed");
                out.push(match sql.strip_prefix("X:") {
                    Some(spec) => pipeline(c, spec).await,
                    None => shown(c.try_simple(sql).await),
                });
            }
        }
    }
    out
}

/// Runs `steps` through sluice and directly; panics with a table of the steps that differ.
pub(super) async fn differential(env: &PgEnv, n: usize, steps: &[(usize, &str)]) {
    // Directly first: what its clients leave ends with them.
    let direct = run(env.topo.primary().port, n, steps).await;
    let via = run(env.port, n, steps).await;
    let mut diffs = String::new();
    for (k, ((i, sql), (s, d))) in steps.iter().zip(via.iter().zip(&direct)).enumerate() {
        if s != d {
            diffs.push_str(&format!(
                "  step {k} client {i}: {sql}\n      sluice: {s:?}\n      direct: {d:?}\n"
            ));
        }
    }
    assert!(diffs.is_empty(), "sluice differs from PostgreSQL:\n{diffs}");
}

/// `SET search_path` naming `pg_temp` pins the session: a plain `CREATE TABLE` then makes a
/// temporary table, which stays its own (another client does not see it; its owner keeps it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_path_naming_pg_temp_pins_the_session() {
    let env = start(0, POOL).await;
    differential(
        &env,
        2,
        &[
            (0, "SET search_path = pg_temp, public"),
            (0, "CREATE TABLE rp_sp (x text)"),
            (0, "INSERT INTO rp_sp VALUES ('A-secret')"),
            (1, "SELECT x FROM rp_sp"),
            (
                1,
                "SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema()",
            ),
            (1, "BEGIN"),
            (1, "SELECT 1"),
            (0, "SELECT x FROM rp_sp"),
            (1, "COMMIT"),
        ],
    )
    .await;
}

/// So does `set_config('search_path', ..., true)` naming `pg_temp`: what the transaction
/// creates there outlives it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_search_path_naming_pg_temp_pins_the_session() {
    let env = start(0, POOL).await;
    differential(
        &env,
        2,
        &[
            (0, "BEGIN"),
            (
                0,
                "SELECT set_config('search_path', 'pg_temp, public', true)",
            ),
            (0, "CREATE TABLE rp_lsp (x text)"),
            (0, "INSERT INTO rp_lsp VALUES ('A-secret')"),
            (0, "COMMIT"),
            (1, "SELECT x FROM pg_temp.rp_lsp"),
            (1, TEMPS_HERE),
            (1, "BEGIN"),
            (1, "SELECT 1"),
            (0, "SELECT x FROM pg_temp.rp_lsp"),
            (1, "COMMIT"),
        ],
    )
    .await;
}

/// `setseed()` pins the session: the seed stays its own (the next client's `random()` is not
/// predictable from it; its own `random()` follows it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setseed_pins_the_session() {
    let env = start(0, POOL).await;
    // The first value after setseed(0.5), from a direct connection of its own.
    let mut d = Raw::connect(env.topo.primary().port, "app", "app", "postgres").await;
    d.try_simple("SELECT setseed(0.5)").await.unwrap();
    let r0 = Raw::column(&d.try_simple("SELECT random()::text").await.unwrap()).concat();
    let is_r0 = format!("SELECT random()::text = '{r0}'");
    differential(
        &env,
        2,
        &[(0, "SELECT setseed(0.5)"), (1, &is_r0), (0, &is_r0)],
    )
    .await;
}

/// What an `EXECUTE` of a statement prepared with SQL `PREPARE` makes (a setting by
/// `set_config`, a session advisory lock) stays with the session after `DEALLOCATE ALL`: it
/// released the `PREPARE`'s pin, and the session lost both on its next connection while the
/// next client was given them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_an_execute_made_outlives_deallocate_all() {
    let env = start(0, POOL).await;
    let seen = "SELECT current_setting('work_mem') || ',' || (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid())";
    differential(
        &env,
        2,
        &[
            (
                0,
                "PREPARE ps AS SELECT set_config('work_mem', '9MB', false), pg_advisory_lock(5)",
            ),
            (0, "EXECUTE ps"),
            (0, "DEALLOCATE ALL"),
            // The other client, on the connection it is given.
            (1, seen),
            (0, seen),
            (0, "SELECT pg_advisory_unlock_all()"),
            (1, seen),
            (0, seen),
        ],
    )
    .await;
}

/// A text with `set_config` has no shape key, so an `is_local` given as a string literal is read
/// every time, also after the same shape with `'true'` was seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_config_is_read_every_time() {
    let env = start(0, POOL).await;
    env.topo
        .primary()
        .sql("CREATE TABLE rp_cfg (id int primary key, v text); INSERT INTO rp_cfg VALUES (1, ''), (2, '')")
        .unwrap();
    let mut steps: Vec<(usize, &str)> = Vec::new();
    for _ in 0..12 {
        steps.push((
            0,
            "UPDATE rp_cfg SET v = set_config('rp.shape', 'local-only', 'true') WHERE id = 1",
        ));
    }
    steps.extend([
        (
            0,
            "UPDATE rp_cfg SET v = set_config('rp.shape', 'A-secret', 'false') WHERE id = 1",
        ),
        (
            1,
            "SELECT coalesce(current_setting('rp.shape', true), '<null>')",
        ),
        (1, "BEGIN"),
        (1, "SELECT 1"),
        (
            0,
            "SELECT coalesce(current_setting('rp.shape', true), '<null>')",
        ),
        (1, "COMMIT"),
    ]);
    differential(&env, 2, &steps).await;
}

/// The same statement without the warm-up pins as it should (control for the test above).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_config_false_in_an_update_pins() {
    let env = start(0, POOL).await;
    env.topo
        .primary()
        .sql(
            "CREATE TABLE rp_cfg2 (id int primary key, v text); INSERT INTO rp_cfg2 VALUES (1, '')",
        )
        .unwrap();
    differential(
        &env,
        2,
        &[
            (
                0,
                "UPDATE rp_cfg2 SET v = set_config('rp.ctl', 'A-secret', 'false') WHERE id = 1",
            ),
            (
                1,
                "SELECT coalesce(current_setting('rp.ctl', true), '<null>')",
            ),
            (1, "BEGIN"),
            (1, "SELECT 1"),
            (
                0,
                "SELECT coalesce(current_setting('rp.ctl', true), '<null>')",
            ),
            (1, "COMMIT"),
        ],
    )
    .await;
}

/// A call written with a Unicode-escaped identifier (`U&"..."`) may be any function: the
/// session is pinned, so a session advisory lock or a session `set_config` stays its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_of_names_sluice_cannot_read_pin_the_session() {
    let env = start(0, POOL).await;
    differential(
        &env,
        2,
        &[
            (0, "SELECT U&\"pg_advisory_lock\"(4242)"),
            (
                1,
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242 AND pid = pg_backend_pid()",
            ),
            (0, "SELECT U&\"set_config\"('rp.uesc', 'A-secret', false)"),
            (1, "SELECT coalesce(current_setting('rp.uesc', true), '<null>')"),
            (1, "BEGIN"),
            (1, "SELECT 1"),
            (0, "SELECT pg_advisory_unlock(4242)"),
            (0, "SELECT coalesce(current_setting('rp.uesc', true), '<null>')"),
            (1, "COMMIT"),
        ],
    )
    .await;
}

/// After the client that took a session advisory lock with `U&"pg_advisory_lock"` left, no
/// pooled server connection holds the lock (its pinned connection went with it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_taken_through_an_unread_name_ends_with_its_client() {
    let env = start(0, POOL).await;
    let mut a = Raw::connect(env.port, "app", "app", "postgres").await;
    a.try_simple("SELECT U&\"pg_advisory_lock\"(4343)")
        .await
        .unwrap();
    drop(a);
    // (Its connection closes once sluice has seen the client go: at most 60 s, a hang guard.)
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let held = env
            .topo
            .primary()
            .sql("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 4343")
            .unwrap();
        if held.trim() == "0" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "a lock of a client that left is still held"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Settings made before a `SET ROLE` are replayed before it on another connection:
/// `session_replication_role` (superuser-only), set by the login user, then `SET ROLE` to a
/// role that may not set it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_role_is_replayed_after_the_settings_made_before_it() {
    let env = start(0, POOL).await;
    differential(
        &env,
        2,
        &[
            (0, "SET session_replication_role = replica"),
            (0, "SET ROLE monitor"),
            (1, "BEGIN"),
            (1, "SELECT 1"),
            (
                0,
                "SELECT current_user || ' ' || current_setting('session_replication_role')",
            ),
            (1, "COMMIT"),
            (0, "SELECT 1"),
        ],
    )
    .await;
}

/// State that pins a session lives on the primary, where the session can still write: a
/// pinning statement outside a transaction, or first in a read-only one, goes there; inside a
/// read-only transaction a replica already serves it is refused (0A000: pinned to the replica,
/// the session could never write again), the transaction fails as after any error, and the
/// session writes once it has ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinning_state_is_never_made_on_a_replica() {
    let env = start(1, POOL).await;
    env.topo.primary().sql("CREATE TABLE rp_w (x int)").unwrap();
    super::pg::wait_replayed(&env.topo).await;
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    let one = |msgs: Vec<Msg>| Raw::column(&msgs).concat();
    for pin in [
        "SELECT set_config('rp.user', '42', false)",
        "DECLARE rp_c CURSOR WITH HOLD FOR SELECT 1",
        "PREPARE rp_p AS SELECT 1",
        "SELECT pg_advisory_lock(77)",
        "SET search_path = pg_temp, public",
    ] {
        c.try_simple("BEGIN READ ONLY").await.unwrap();
        assert_eq!(
            one(c.try_simple("SELECT pg_is_in_recovery()").await.unwrap()),
            "t",
            "the read-only transaction is on the replica"
        );
        let err = c.try_simple(pin).await.unwrap_err();
        assert!(
            err.starts_with("0A000") && err.contains("read-only transaction on a replica"),
            "{pin}: {err}"
        );
        let err = c.try_simple("SELECT 1").await.unwrap_err();
        assert!(err.starts_with("25P02"), "{pin}: {err}");
        let done = c.simple_all("COMMIT").await;
        assert!(
            done.iter()
                .any(|m| m.tag == b'C' && m.body.starts_with(b"ROLLBACK")),
            "{pin}: a failed transaction's COMMIT rolls back"
        );
        c.try_simple("INSERT INTO rp_w VALUES (1)").await.unwrap();
        // Outside a transaction, or first in a read-only one: on the primary.
        for begin in [None, Some("BEGIN READ ONLY")] {
            if let Some(b) = begin {
                c.try_simple(b).await.unwrap();
            }
            c.try_simple(pin).await.unwrap();
            if begin.is_some() {
                c.try_simple("COMMIT").await.unwrap();
            }
            assert_eq!(
                one(c.try_simple("SELECT pg_is_in_recovery()").await.unwrap()),
                "f",
                "{pin}: pinned to the primary"
            );
            c.try_simple("INSERT INTO rp_w VALUES (2)").await.unwrap();
            c.try_simple("DISCARD ALL").await.unwrap();
        }
    }
}

/// On a listener bound to the replicas' hostgroup the session goes nowhere else: state that
/// pins it is made there, inside a read-only transaction too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_bound_to_the_replicas_pins_there() {
    let env = super::pg::start_with(1, |topo| {
        super::pg::config(topo, POOL).replacen(
            "protocol = \"postgres\"\n\n[[users]]",
            "protocol = \"postgres\"\nhostgroup = \"reader\"\n\n[[users]]",
            1,
        )
    })
    .await;
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    let one = |msgs: Vec<Msg>| Raw::column(&msgs).concat();
    c.try_simple("BEGIN READ ONLY").await.unwrap();
    assert_eq!(
        one(c.try_simple("SELECT pg_is_in_recovery()").await.unwrap()),
        "t"
    );
    c.try_simple("DECLARE rp_c CURSOR WITH HOLD FOR SELECT 41 + 1")
        .await
        .unwrap();
    c.try_simple("COMMIT").await.unwrap();
    assert_eq!(one(c.try_simple("FETCH rp_c").await.unwrap()), "42");
}

/// A procedure (or a `DO` block) may `COMMIT` or `ROLLBACK` the implicit transaction of an
/// extended-protocol pipeline it is part of (PgJDBC sends a batch so): the `SET` or
/// `UNLISTEN *` before it then did not take effect, or took effect although the pipeline
/// failed after it. sluice followed the pipeline as one transaction: it replayed a `SET` the
/// procedure rolled back, lost one it committed before a later error, and let the session's
/// `LISTEN` go. Such a pipeline pins the session, as one with its own `COMMIT` does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_procedure_that_ends_the_pipelines_transaction_pins_the_session() {
    let env = start(0, POOL).await;
    env.topo
        .primary()
        .sql("CREATE PROCEDURE rp_rollback() LANGUAGE plpgsql AS $$ BEGIN ROLLBACK; END $$")
        .unwrap();
    // Client 1 holds the connection client 0 used: client 0 runs on the other one.
    let moved = |show: &'static str| [(1, "BEGIN"), (1, "SELECT 1"), (0, show), (1, "COMMIT")];
    let mut steps = vec![(0, "X:SET work_mem = '2MB' ;; CALL rp_rollback()")];
    steps.extend(moved("SHOW work_mem"));
    steps.push((
        0,
        "X:SET work_mem = '3MB' ;; DO $$ BEGIN COMMIT; END $$ ;; SELECT 1/0",
    ));
    steps.extend(moved("SHOW work_mem"));
    steps.push((1, "SHOW work_mem"));
    steps.extend([
        (0, "DISCARD ALL"),
        (0, "LISTEN rp_ch"),
        (0, "X:UNLISTEN * ;; CALL rp_rollback()"),
        (1, "NOTIFY rp_ch"),
        (0, "SELECT count(*) FROM pg_listening_channels()"),
    ]);
    differential(&env, 2, &steps).await;
}

/// Inside a block the client opened, a procedure cannot end the transaction (PostgreSQL
/// refuses with 2D000): a pipeline of `CALL`s there, with the block's `SET` in play, does not
/// pin the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_inside_a_block_pin_nothing() {
    let env = start(0, POOL).await;
    env.topo
        .primary()
        .sql("CREATE PROCEDURE rp_noop() LANGUAGE plpgsql AS $$ BEGIN END $$")
        .unwrap();
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    c.try_simple("BEGIN").await.unwrap();
    c.try_simple("SET work_mem = '5MB'").await.unwrap();
    assert_eq!(
        pipeline(&mut c, "CALL rp_noop() ;; CALL rp_noop()").await,
        "1 2 C(CALL) 1 2 C(CALL) Z(T)"
    );
    c.try_simple("COMMIT").await.unwrap();
    assert_eq!(env.pin_reasons(), [Vec::<&str>::new()]);
    let shown = c.try_simple("SHOW work_mem").await.unwrap();
    assert_eq!(Raw::column(&shown), ["5MB"]);
}

/// `PREPARE TRANSACTION` keeps what the block set for the session, as a commit does (its work
/// waits, prepared): the settings and the role stay the session's, wherever it runs next, and
/// no other client gets them. They were taken for rolled back: the session lost them, and the
/// next client on that connection ran as its role.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepare_transaction_keeps_the_blocks_settings() {
    let env = start(0, POOL).await;
    env.topo.primary().sql("CREATE ROLE r2").unwrap();
    let who = "SELECT current_user || '/' || current_setting('work_mem')";
    differential(
        &env,
        2,
        &[
            (0, "BEGIN"),
            (0, "SET work_mem = '7MB'"),
            (0, "SET ROLE r2"),
            (0, "SELECT 1"),
            (0, "PREPARE TRANSACTION 'pt1'"),
            (1, who),
            (1, "BEGIN"),
            (1, "SELECT 1"),
            (0, who),
            (1, "COMMIT"),
            (0, "BEGIN"),
            (0, "RESET ROLE"),
            (0, "RESET work_mem"),
            (0, "PREPARE TRANSACTION 'pt2'"),
            (0, who),
            (1, who),
            (0, "COMMIT PREPARED 'pt1'"),
            (0, "COMMIT PREPARED 'pt2'"),
            (0, who),
        ],
    )
    .await;
}
