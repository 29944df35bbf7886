//! What sluice runs on a connection a session keeps, between the client's own messages
//! (reading back what `set_config` set, setting a startup value again after a `RESET` in a
//! block, the savepoint a changed statement is checked under), leaves the client's unnamed
//! statement and unnamed portal as they were; and a FunctionCall of a function that may make
//! session state pins the session. Each test runs the same steps through sluice and
//! directly and compares what every step gave, and what it should give.
//!
//! The pool has two connections (`pins::POOL`), and idle ones are reused most recent first:
//! a client that holds a connection makes the next one run on the other.

use super::pg::raw::Raw;
use super::pg::start;
use super::pins::{connect_with_startup, direct_then_sluice, protocol_shown, POOL};
use postgres_protocol::message::frontend;

/// Sends what `c.out` holds and shows the answers up to one ReadyForQuery.
pub(super) async fn round(c: &mut Raw) -> String {
    let (_, msgs) = c.round(1).await;
    protocol_shown(&msgs)
}

/// Runs `sql` as a simple query and shows its answers.
pub(super) async fn simple(c: &mut Raw, sql: &str) -> String {
    frontend::query(sql, &mut c.out).unwrap();
    round(c).await
}

fn parse(c: &mut Raw, name: &str, sql: &str) {
    frontend::parse(name, sql, [], &mut c.out).unwrap();
}

pub(super) fn bind(c: &mut Raw, portal: &str, statement: &str) {
    let none: [Option<&str>; 0] = [];
    frontend::bind(
        portal,
        statement,
        [0i16],
        none.iter(),
        |_: &Option<&str>, _| Ok(postgres_protocol::IsNull::Yes),
        [0i16],
        &mut c.out,
    )
    .map_err(|_| "bind")
    .unwrap();
}

pub(super) fn execute(c: &mut Raw, portal: &str, rows: i32) {
    frontend::execute(portal, rows, &mut c.out).unwrap();
}

/// Parse, Bind and Execute (at most `rows` rows) of `sql` as the unnamed statement and portal.
pub(super) fn unnamed(c: &mut Raw, sql: &str, rows: i32) {
    parse(c, "", sql);
    bind(c, "", "");
    execute(c, "", rows);
}

pub(super) fn sync(c: &mut Raw) {
    frontend::sync(&mut c.out);
}

/// A FunctionCall of the function `oid` with text arguments, a text result.
fn function_call(c: &mut Raw, oid: u32, args: &[&str]) {
    let mut body = Vec::new();
    body.extend_from_slice(&oid.to_be_bytes());
    body.extend_from_slice(&1i16.to_be_bytes());
    body.extend_from_slice(&0i16.to_be_bytes());
    body.extend_from_slice(&(args.len() as i16).to_be_bytes());
    for a in args {
        body.extend_from_slice(&(a.len() as i32).to_be_bytes());
        body.extend_from_slice(a.as_bytes());
    }
    body.extend_from_slice(&0i16.to_be_bytes());
    c.out.extend_from_slice(b"F");
    c.out
        .extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
    c.out.extend_from_slice(&body);
}

/// `set_config(text, text, boolean)` and `pg_advisory_lock(bigint)` (pg_proc.dat), and
/// `lo_creat(integer)`, a large-object function.
const SET_CONFIG: u32 = 2078;
const ADVISORY_LOCK: u32 = 2880;
const LO_CREAT: u32 = 957;

/// What another client sees on the connection it is given: the custom setting, and its
/// session advisory locks.
const SEEN: &str = "SELECT coalesce(current_setting('app.tenant', true), 'none') || ',' || (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid())";

/// A FunctionCall of `set_config(…, false)` or `pg_advisory_lock` made state on its server
/// connection, which was lent to the next client: it saw the first client's setting and
/// held its lock, and the first client, on another connection, lost both. Such a call pins
/// the session; a call of a large-object function does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_call_that_may_make_state_pins_the_session() {
    let env = start(0, POOL).await;
    let direct = direct_then_sluice(&env, async |port| {
        let mut a = Raw::connect(port, "app", "app", "postgres").await;
        let mut b = Raw::connect(port, "app", "app", "postgres").await;
        let mut steps = Vec::new();
        function_call(&mut a, SET_CONFIG, &["app.tenant", "42", "false"]);
        function_call(&mut a, ADVISORY_LOCK, &["4242"]);
        steps.push(round(&mut a).await);
        steps.push(round(&mut a).await);
        // The other client, on the connection it is given.
        steps.push(simple(&mut b, SEEN).await);
        steps.push(simple(&mut a, SEEN).await);
        steps.push(simple(&mut a, "SELECT pg_advisory_unlock(4242)").await);
        if port == env.port {
            let reasons = env.pin_reasons();
            assert!(
                reasons
                    .iter()
                    .any(|r| r.contains(&"call of a function sluice cannot name")),
                "{reasons:?}"
            );
        }
        // A large object's functions make no state beyond their transaction.
        let mut lo = Raw::connect(port, "app", "app", "postgres").await;
        steps.push(simple(&mut lo, "BEGIN").await);
        function_call(&mut lo, LO_CREAT, &["-1"]);
        steps.push(
            round(&mut lo)
                .await
                .replace(|c: char| c.is_ascii_digit(), ""),
        );
        steps.push(simple(&mut lo, "ROLLBACK").await);
        if port == env.port {
            let reasons = env.pin_reasons();
            assert_eq!(
                reasons.iter().filter(|r| !r.is_empty()).count(),
                1,
                "only the first client is pinned: {reasons:?}"
            );
        }
        steps
    })
    .await;
    assert_eq!(
        direct,
        [
            "V Z(I)",
            "V Z(I)",
            "T D(none,0) C(SELECT 1) Z(I)",
            "T D(42,1) C(SELECT 1) Z(I)",
            "T D(t) C(SELECT 1) Z(I)",
            "C(BEGIN) Z(T)",
            "V Z(T)",
            "C(ROLLBACK) Z(I)",
        ]
    );
}

/// sluice reads back what `set_config(…, false)` set, and where the primary's WAL is after a
/// write for a session that reads its own writes, with queries of its own on the connection
/// a pinned session keeps; a simple query there dropped the client's unnamed statement, and
/// its next Bind of it got 26000.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unnamed_statement_outlives_a_read_back() {
    let env = start(0, POOL).await;
    let direct = direct_then_sluice(&env, async |port| {
        let mut c = Raw::connect(port, "app", "app", "postgres").await;
        let mut steps = vec![simple(&mut c, "CREATE TEMP TABLE own_t (x int)").await];
        unnamed(&mut c, "SELECT set_config('work_mem', '8MB', false)", 0);
        sync(&mut c);
        steps.push(round(&mut c).await);
        bind(&mut c, "", "");
        execute(&mut c, "", 0);
        sync(&mut c);
        steps.push(round(&mut c).await);
        steps.push(simple(&mut c, "SHOW work_mem").await);
        steps.push(simple(&mut c, "SET sluice.read_your_writes = on").await);
        unnamed(&mut c, "INSERT INTO own_t VALUES (1)", 0);
        sync(&mut c);
        steps.push(round(&mut c).await);
        bind(&mut c, "", "");
        execute(&mut c, "", 0);
        sync(&mut c);
        steps.push(round(&mut c).await);
        steps
    })
    .await;
    assert_eq!(
        direct,
        [
            "C(CREATE TABLE) Z(I)",
            "1 2 D(8MB) C(SELECT 1) Z(I)",
            "2 D(8MB) C(SELECT 1) Z(I)",
            "T D(8MB) C(SHOW) Z(I)",
            "C(SET) Z(I)",
            "1 2 C(INSERT 0 1) Z(I)",
            "2 C(INSERT 0 1) Z(I)",
        ]
    );
}

/// After a `RESET` of a startup parameter inside a block, sluice sets the startup value
/// again before the block's next statement; as a simple query that dropped the unnamed
/// statement and the suspended unnamed portal (26000, 34000, and the block failed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unnamed_portal_outlives_a_startup_value_set_again_in_a_block() {
    let env = start(0, POOL).await;
    let direct = direct_then_sluice(&env, async |port| {
        let mut c = connect_with_startup(port, &[("application_name", "own_app")]).await;
        let mut steps = vec![simple(&mut c, "BEGIN").await];
        unnamed(&mut c, "SELECT g FROM generate_series(1, 3) g", 1);
        sync(&mut c);
        steps.push(round(&mut c).await);
        parse(&mut c, "r", "RESET application_name");
        bind(&mut c, "x", "r");
        execute(&mut c, "x", 0);
        sync(&mut c);
        steps.push(round(&mut c).await);
        execute(&mut c, "", 1);
        sync(&mut c);
        steps.push(round(&mut c).await);
        bind(&mut c, "", "");
        execute(&mut c, "", 0);
        sync(&mut c);
        steps.push(round(&mut c).await);
        steps.push(simple(&mut c, "SHOW application_name").await);
        steps.push(simple(&mut c, "COMMIT").await);
        steps
    })
    .await;
    assert_eq!(
        direct,
        [
            "C(BEGIN) Z(T)",
            "1 2 D(1) s Z(T)",
            "1 2 C(RESET) Z(T)",
            "D(2) s Z(T)",
            "2 D(1) D(2) D(3) C(SELECT 3) Z(T)",
            "T D(own_app) C(SHOW) Z(T)",
            "C(COMMIT) Z(I)",
        ]
    );
}

/// A described statement used inside a block on a connection that never had it is checked
/// under a savepoint first (`shapes`); as simple queries, the savepoint's statements dropped
/// the unnamed statement and portal the same unit went on with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unnamed_statement_and_portal_outlive_a_statement_checked_in_a_block() {
    let env = start(0, POOL).await;
    let direct = direct_then_sluice(&env, async |port| {
        let mut a = Raw::connect(port, "app", "app", "postgres").await;
        let mut b = Raw::connect(port, "app", "app", "postgres").await;
        parse(&mut a, "n1", "SELECT 1 AS x");
        frontend::describe(b'S', "n1", &mut a.out).unwrap();
        sync(&mut a);
        let mut steps = vec![round(&mut a).await];
        // b holds the connection n1 was prepared on: a's block runs on the other one.
        steps.push(simple(&mut b, "BEGIN").await);
        steps.push(simple(&mut b, "SELECT 1").await);
        steps.push(simple(&mut a, "BEGIN").await);
        unnamed(&mut a, "SELECT g FROM generate_series(40, 43) g", 1);
        sync(&mut a);
        steps.push(round(&mut a).await);
        steps.push(simple(&mut b, "COMMIT").await);
        bind(&mut a, "p", "n1");
        execute(&mut a, "p", 0);
        execute(&mut a, "", 1);
        sync(&mut a);
        steps.push(round(&mut a).await);
        bind(&mut a, "q", "n1");
        execute(&mut a, "q", 0);
        bind(&mut a, "", "");
        execute(&mut a, "", 0);
        sync(&mut a);
        steps.push(round(&mut a).await);
        steps.push(simple(&mut a, "COMMIT").await);
        steps
    })
    .await;
    assert_eq!(
        direct,
        [
            "1 t T Z(I)",
            "C(BEGIN) Z(T)",
            "T D(1) C(SELECT 1) Z(T)",
            "C(BEGIN) Z(T)",
            "1 2 D(40) s Z(T)",
            "C(COMMIT) Z(I)",
            "2 D(1) C(SELECT 1) D(41) s Z(T)",
            "2 D(1) C(SELECT 1) 2 D(40) D(41) D(42) D(43) C(SELECT 4) Z(T)",
            "C(COMMIT) Z(I)",
        ]
    );
}

/// The messages up to and including the first of type `tag` (after a Flush: no
/// ReadyForQuery ends them), shown as [`shown`] shows them.
pub(super) async fn until(c: &mut Raw, tag: u8) -> String {
    c.flush().await;
    let mut got = Vec::new();
    loop {
        let m = c.next().await;
        let done = m.tag == tag;
        if !matches!(m.tag, b'S' | b'N') {
            got.push(m);
        }
        if done {
            return protocol_shown(&got);
        }
    }
}

/// Inside a batch the client ended with a Flush, the server has not reached a Sync: what
/// sluice runs of its own there (settings set again after a `RESET` of a startup value, the
/// startup value set again inside a block) ran inside the client's implicit transaction. As
/// a simple query it committed the batch's INSERT although the batch then failed, and
/// dropped its suspended portal; in a block whose batch failed, it ended the session. It
/// now waits for the batch's Sync (the batch's later statements run with the server's
/// default, as after a `RESET` in one text).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_of_sluices_own_runs_inside_a_flushed_batch() {
    let env = start(0, POOL).await;
    env.psql("CREATE TABLE own_w (x int)");
    let direct = direct_then_sluice(&env, async |port| {
        let mut c = connect_with_startup(port, &[("application_name", "own_app")]).await;
        let mut steps = Vec::new();
        // A suspended portal after a RESET, in a batch ended with a Flush.
        unnamed(&mut c, "RESET application_name", 0);
        unnamed(&mut c, "SELECT g FROM generate_series(1, 3) g", 1);
        frontend::flush(&mut c.out);
        steps.push(until(&mut c, b's').await);
        execute(&mut c, "", 1);
        sync(&mut c);
        steps.push(round(&mut c).await);
        steps.push(simple(&mut c, "SHOW application_name").await);
        // A write, a RESET, Flush; then a failure before the Sync: the write rolls back.
        unnamed(&mut c, "INSERT INTO own_w VALUES (99)", 0);
        unnamed(&mut c, "RESET application_name", 0);
        frontend::flush(&mut c.out);
        steps.push(until(&mut c, b'C').await + " " + &until(&mut c, b'C').await);
        unnamed(&mut c, "SELECT 1/0", 0);
        sync(&mut c);
        steps.push(round(&mut c).await);
        steps.push(simple(&mut c, "SELECT count(*) FROM own_w").await);
        steps.push(simple(&mut c, "SHOW application_name").await);
        // In a block: a RESET and a failure, Flush, then the Sync.
        steps.push(simple(&mut c, "BEGIN").await);
        unnamed(&mut c, "RESET application_name", 0);
        unnamed(&mut c, "SELECT 1/0", 0);
        frontend::flush(&mut c.out);
        steps.push(until(&mut c, b'E').await);
        sync(&mut c);
        steps.push(round(&mut c).await);
        steps.push(simple(&mut c, "ROLLBACK").await);
        steps.push(simple(&mut c, "SHOW application_name").await);
        steps
    })
    .await;
    assert_eq!(
        direct,
        [
            "1 2 C(RESET) 1 2 D(1) s",
            "D(2) s Z(I)",
            "T D(own_app) C(SHOW) Z(I)",
            "1 2 C(INSERT 0 1) 1 2 C(RESET)",
            "1 E(22012) Z(I)",
            "T D(0) C(SELECT 1) Z(I)",
            "T D(own_app) C(SHOW) Z(I)",
            "C(BEGIN) Z(T)",
            "1 2 C(RESET) 1 E(22012)",
            "Z(E)",
            "C(ROLLBACK) Z(I)",
            "T D(own_app) C(SHOW) Z(I)",
        ]
    );
}

/// `COMMIT AND CHAIN` commits the block's settings, which the connection already holds:
/// sluice set them again inside the chained block with a simple query, which dropped the
/// unnamed portal the same batch opened there (34000, and the block failed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chained_block_keeps_its_unnamed_portal() {
    let env = start(0, POOL).await;
    let direct = direct_then_sluice(&env, async |port| {
        let mut c = Raw::connect(port, "app", "app", "postgres").await;
        let mut steps = vec![simple(&mut c, "BEGIN").await];
        steps.push(simple(&mut c, "SET work_mem = '8MB'").await);
        unnamed(&mut c, "COMMIT AND CHAIN", 0);
        unnamed(&mut c, "SELECT g FROM generate_series(1, 3) g", 1);
        sync(&mut c);
        steps.push(round(&mut c).await);
        execute(&mut c, "", 1);
        sync(&mut c);
        steps.push(round(&mut c).await);
        steps.push(simple(&mut c, "COMMIT").await);
        steps.push(simple(&mut c, "SHOW work_mem").await);
        steps
    })
    .await;
    assert_eq!(
        direct,
        [
            "C(BEGIN) Z(T)",
            "C(SET) Z(T)",
            "1 2 C(COMMIT) 1 2 D(1) s Z(T)",
            "D(2) s Z(T)",
            "C(COMMIT) Z(I)",
            "T D(8MB) C(SHOW) Z(I)",
        ]
    );
}

/// What `set_config(…, false)` set is read back on the connection that ran it, under the
/// settings the session just made there: a `statement_timeout` it set cancelled the read
/// back when that took longer (here: a superuser holds a lock on `pg_settings` for a while),
/// and sluice ended the session (08006). Such a session now keeps its connection, with what
/// the server has; and one whose read back succeeds has the value it set on its next
/// connection (another client holds the one it ran on).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_back_stopped_by_the_sessions_own_timeout_keeps_the_session() {
    let env = start(0, POOL).await;
    let direct = direct_then_sluice(&env, async |port| {
        let primary = env.topo.primary().port;
        let mut su = Raw::connect(primary, "postgres", "", "postgres").await;
        simple(&mut su, "BEGIN").await;
        simple(
            &mut su,
            "LOCK pg_catalog.pg_settings IN ACCESS EXCLUSIVE MODE",
        )
        .await;
        let mut c = Raw::connect(port, "app", "app", "postgres").await;
        let set = "SELECT set_config('statement_timeout', '1000', false)";
        let mut steps = vec![simple(&mut c, set).await];
        let release = async {
            tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
            simple(&mut su, "COMMIT").await
        };
        let (_, shown) = tokio::join!(release, simple(&mut c, "SHOW statement_timeout"));
        steps.push(shown);
        steps.push(simple(&mut c, "SELECT 1").await);
        // (Its connection, which it keeps, is closed with it.)
        drop(c);
        // Read back: the value the session set, wherever it runs next.
        let mut d = Raw::connect(port, "app", "app", "postgres").await;
        let mut other = Raw::connect(port, "app", "app", "postgres").await;
        let set = "SELECT set_config('statement_timeout', '1500', false)";
        steps.push(simple(&mut d, set).await);
        simple(&mut other, "BEGIN").await;
        simple(&mut other, "SELECT 1").await;
        steps.push(simple(&mut d, "SHOW statement_timeout").await);
        simple(&mut other, "COMMIT").await;
        steps
    })
    .await;
    assert_eq!(
        direct,
        [
            "T D(1s) C(SELECT 1) Z(I)",
            "T D(1s) C(SHOW) Z(I)",
            "T D(1) C(SELECT 1) Z(I)",
            "T D(1500ms) C(SELECT 1) Z(I)",
            "T D(1500ms) C(SHOW) Z(I)",
        ]
    );
}
