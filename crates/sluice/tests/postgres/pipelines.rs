//! Session state through extended-protocol pipelines that end or roll back a transaction
//! among their statements, against PostgreSQL itself (the steps of pins.rs: the same through
//! sluice and directly, compared). Which statements of such a pipeline took effect depends on
//! where each stands against the `COMMIT`/`ROLLBACK` and on where it failed: the session
//! keeps its connection, which has it right (pin `SET or release in a text or pipeline with its own COMMIT/ROLLBACK`), and
//! releases nothing.

use super::pg::raw::Raw;
use super::pg::start;
use super::pins::{differential, POOL, TEMPS_HERE};
use sluice_postgres::front::OWED_ANSWERS_PER_SESSION;

/// Client 0 runs `first`; client 1 looks at the connection client 0 gave back (if it gave it
/// back); then client 1 holds that one and client 0 looks at the connection it is on.
fn leak_and_loss<'a>(first: &[(usize, &'a str)]) -> Vec<(usize, &'a str)> {
    let mut steps = first.to_vec();
    steps.extend([
        (1, "SHOW work_mem"),
        (1, "SHOW lock_timeout"),
        (1, "BEGIN"),
        (1, "SELECT 1"),
        (0, "SHOW work_mem"),
        (0, "SHOW lock_timeout"),
        (1, "COMMIT"),
    ]);
    steps
}

/// Settings made before a `COMMIT` (or a `DISCARD ALL`, which commits at once) that a later
/// statement's error does not undo, and settings made after a `ROLLBACK`, are the session's:
/// never another client's, never lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_around_a_transaction_end_in_a_pipeline() {
    let env = start(0, POOL).await;
    for first in [
        &[(0, "X:SET work_mem = '7MB' ;; COMMIT ;; SELECT 1/0")][..],
        &[(0, "X:BEGIN ;; SET work_mem = '7MB' ;; COMMIT ;; SELECT 1/0")],
        &[
            (0, "BEGIN"),
            (0, "SET work_mem = '7MB'"),
            (0, "X:COMMIT ;; SELECT 1/0"),
        ],
        &[
            (0, "SET work_mem = '7MB'"),
            (0, "X:DISCARD ALL ;; SELECT 1/0"),
        ],
        &[(
            0,
            "X:BEGIN ;; SET lock_timeout = '3s' ;; ROLLBACK ;; SET work_mem = '7MB'",
        )],
        &[(
            0,
            "X:SET work_mem = '7MB' ;; COMMIT ;; SET lock_timeout = '3s' ;; ROLLBACK",
        )],
        // Followed as it is: it ran whole and committed.
        &[(0, "X:BEGIN ;; SET work_mem = '7MB' ;; COMMIT")],
    ] {
        differential(&env, 2, &leak_and_loss(first)).await;
    }
}

/// A release between a `BEGIN` and a `ROLLBACK` of one pipeline releases nothing: the
/// temporary table and the `LISTEN` stay the session's, out of another client's reach.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_rolled_back_in_a_pipeline_releases_nothing() {
    let env = start(0, POOL).await;
    differential(
        &env,
        2,
        &[
            (0, "CREATE TEMP TABLE pl_tmp (x text)"),
            (0, "INSERT INTO pl_tmp VALUES ('A-secret')"),
            (0, "X:BEGIN ;; DISCARD TEMP ;; ROLLBACK"),
            (1, TEMPS_HERE),
            (1, "SELECT x FROM pg_temp.pl_tmp"),
            (1, "BEGIN"),
            (1, "SELECT 1"),
            (0, "SELECT x FROM pl_tmp"),
            (1, "COMMIT"),
        ],
    )
    .await;
    differential(
        &env,
        2,
        &[
            (0, "LISTEN pl_chan"),
            (0, "X:BEGIN ;; UNLISTEN * ;; ROLLBACK"),
            (1, "SELECT count(*) FROM pg_listening_channels()"),
            (1, "NOTIFY pl_chan"),
            (1, "BEGIN"),
            (1, "SELECT 1"),
            (0, "SELECT count(*) FROM pg_listening_channels()"),
            (1, "COMMIT"),
        ],
    )
    .await;
}

/// A batch that never ends owes its answers in sluice's memory: past the bound the session
/// ends (54000), and no other session notices. `Close` of a statement no one prepared is
/// answered by sluice itself: the server, which would otherwise slow the client down, never
/// hears of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_never_ends_is_bounded() {
    let env = start(0, "").await;
    let mut victim = Raw::connect(env.port, "app", "app", "postgres").await;
    victim.try_simple("BEGIN").await.unwrap();
    victim.try_simple("SELECT 1").await.unwrap();
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    let mut close = bytes::BytesMut::new();
    postgres_protocol::message::frontend::close(b'S', "x", &mut close).unwrap();
    // A statement parsed first is the session's at once (its parts are not looked through
    // for it: each of the messages after it would look through all before).
    let mut batch = bytes::BytesMut::new();
    postgres_protocol::message::frontend::parse("kept", "SELECT 1", [], &mut batch).unwrap();
    batch.extend_from_slice(&close.repeat(OWED_ANSWERS_PER_SESSION + 100_000));
    // Refused part way; sluice reads the rest of what the client sends until it leaves, so
    // the FATAL is not lost to a reset. Nothing but the end: the answers owed are never sent.
    c.try_send_raw(&batch).await.unwrap();
    let e = c.try_next().await.unwrap_err();
    assert_eq!(
        e,
        format!(
            "54000 sluice: a batch of more than {OWED_ANSWERS_PER_SESSION} messages without a Sync or Flush"
        )
    );
    assert_eq!(
        Raw::column(&victim.try_simple("SELECT 2").await.unwrap()),
        ["2"]
    );
    victim.try_simple("COMMIT").await.unwrap();
    let mut next = Raw::connect(env.port, "app", "app", "postgres").await;
    assert_eq!(
        Raw::column(&next.try_simple("SELECT 3").await.unwrap()),
        ["3"]
    );
}

/// A batch of more than a unit's 1,000 messages without a Sync is forwarded in parts (as
/// psycopg's `executemany` of 2,000 rows sends it): a statement one part parsed is the
/// client's in the parts after it — bound, described and its name taken — as it would be
/// directly. (The Bind used to reach the server under the client's own name: 26000, or a
/// statement of that name the connection held for another reason.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_parsed_early_in_a_long_batch_is_the_clients_later_in_it() {
    use postgres_protocol::message::frontend;
    let env = start(0, "").await;
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    c.extended("p1", Some("SELECT $1::text"), &[Some("0")]);
    let rows: Vec<String> = (0..600).map(|i| format!("v{i}")).collect();
    for v in &rows[1..] {
        c.extended("p1", None, &[Some(v)]);
    }
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert!(
        !tags.contains('E'),
        "{:?}",
        msgs.iter().find(|m| m.tag == b'E')
    );
    let mut want = rows.clone();
    want[0] = "0".into();
    assert_eq!(Raw::column(&msgs), want);
    // Described after 1,200 other messages; parsed again there under its name: refused.
    let fillers = |c: &mut Raw| {
        for _ in 0..1200 {
            frontend::close(b'P', "zz", &mut c.out).unwrap();
        }
    };
    frontend::parse("s", "SELECT 1 AS one", [], &mut c.out).unwrap();
    fillers(&mut c);
    frontend::describe(b'S', "s", &mut c.out).unwrap();
    fillers(&mut c);
    frontend::parse("s", "SELECT 2 AS two", [], &mut c.out).unwrap();
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert!(tags.starts_with('1') && tags.contains("tT"), "{tags}");
    let errors: Vec<String> = msgs
        .iter()
        .filter(|m| m.tag == b'E')
        .map(|m| m.text())
        .collect();
    assert_eq!(
        errors,
        ["42P05 prepared statement \"s\" already exists".to_string()]
    );
    assert!(tags.ends_with("EZ"), "{tags}");
    // A Parse that fails in an early part: the name is not the session's afterwards (the
    // server skipped the rest of the batch, the Bind of it among it).
    frontend::parse("bad", "SELEC 1", [], &mut c.out).unwrap();
    fillers(&mut c);
    c.extended("bad", None, &[]);
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert_eq!(tags, "EZ", "{msgs:?}");
    assert_eq!(msgs[0].sqlstate().as_deref(), Some("42601"));
    c.extended("bad", None, &[]);
    frontend::sync(&mut c.out);
    let (tags, msgs) = c.round(1).await;
    assert_eq!(tags, "EZ");
    assert_eq!(
        msgs[0].text(),
        "26000 prepared statement \"bad\" does not exist"
    );
}

/// Bind and Execute of the unnamed `SELECT repeat('x', 100)`, `pairs` times (the statement
/// parsed first), then a Sync if `sync`.
pub(super) fn long_batch(pairs: usize, sync: bool) -> bytes::BytesMut {
    use postgres_protocol::message::frontend;
    let mut one = bytes::BytesMut::new();
    let none: [Option<&[u8]>; 0] = [];
    frontend::bind(
        "",
        "",
        [],
        none,
        |_, _| Ok(postgres_protocol::IsNull::No),
        [],
        &mut one,
    )
    .map_err(|_| "bind")
    .unwrap();
    frontend::execute("", 0, &mut one).unwrap();
    let mut batch = bytes::BytesMut::new();
    frontend::parse("", "SELECT repeat('x', 100)", [], &mut batch).unwrap();
    batch.extend_from_slice(&one.repeat(pairs));
    if sync {
        frontend::sync(&mut batch);
    }
    batch
}

/// The rows and the statements completed that answer a [`long_batch`] with a Sync, read up to
/// its ReadyForQuery (an error fails the test).
pub(super) async fn long_batch_answers(c: &mut Raw) -> (usize, usize) {
    let (mut rows, mut done) = (0, 0);
    loop {
        let m = c.next().await;
        match m.tag {
            b'D' => rows += 1,
            b'C' => done += 1,
            b'E' => panic!("{}", m.text()),
            b'Z' => return (rows, done),
            _ => {}
        }
    }
}

/// A batch too long for one unit is forwarded in parts, its answers relayed once its Sync
/// is there; meanwhile the server answers the parts already sent, and its answers are read
/// into sluice (up to `OWED_ANSWER_BYTES`): 300,000 statements answer with 40 MB, more than
/// the sockets between sluice and the server hold. sluice left them there, the server
/// stopped reading to write them, sluice stopped reading the client to send the next part:
/// the batch never ended, and a client that left half way held its server connection until
/// `[pool] read_timeout` (8 hours) while every other session waited for it in vain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_batch_whose_answers_outgrow_the_sockets_runs_to_its_end() {
    const PAIRS: usize = 300_000;
    // One connection: a session that kept it would keep every other one waiting.
    let env = start(
        0,
        "\n[pool]\nmax_connections = 1\nqueue_timeout = \"60s\"\n",
    )
    .await;
    let deadline = std::time::Duration::from_secs(120);
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    tokio::time::timeout(deadline, c.try_send_raw(&long_batch(PAIRS, true)))
        .await
        .expect("sluice stopped reading the batch")
        .unwrap();
    // (Each read is bounded by `Raw`'s own deadline.)
    assert_eq!(long_batch_answers(&mut c).await, (PAIRS, PAIRS));
    // A client that leaves half way through such a batch gives its connection back.
    let mut gone = Raw::connect(env.port, "app", "app", "postgres").await;
    tokio::time::timeout(deadline, gone.try_send_raw(&long_batch(PAIRS, false)))
        .await
        .expect("sluice stopped reading the batch")
        .unwrap();
    drop(gone);
    assert_eq!(
        Raw::column(&c.try_simple("SELECT 2").await.unwrap()),
        ["2"],
        "the one connection came back"
    );
}
