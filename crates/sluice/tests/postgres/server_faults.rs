//! What a dead, silent or lying server does to a session: the client hears of it as it would
//! directly (or as precisely as sluice can say it), and every other session carries on.

use super::fault_relays::{cutting_relay, muting_relay, notice_after_ready_relay, rewriting_relay};
use super::pg::raw::Raw;
use super::pg::{config, start, start_with};
use postgres_protocol::message::frontend;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What the server sends on its own while a session sits in a transaction reaches the
/// client, and the session goes on: here a notice that arrives in the same read as the
/// answer before it. (sluice once waited for more from the server before reading the
/// client's next statement: the transaction hung.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notice_between_statements_reaches_the_client_and_the_transaction_goes_on() {
    let env = start_with(0, |topo| {
        let primary = topo.primary().addr();
        let relay = notice_after_ready_relay(primary.clone());
        config(topo, "").replace(&primary, &relay)
    })
    .await;
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    let mut run = async |sql: &str| {
        frontend::query(sql, &mut c.out).unwrap();
        c.flush().await;
        let mut answer = vec![c.next().await];
        while answer.last().unwrap().tag != b'Z' {
            answer.push(c.next().await);
        }
        let tags: String = answer.iter().map(|m| m.tag as char).collect();
        (tags, Raw::column(&answer))
    };
    assert_eq!(run("BEGIN").await.0, "CZ");
    // Its ReadyForQuery comes with a notice after it (whether the BEGIN sluice sends before
    // it had one of its own depends on how it went).
    assert_eq!(run("SELECT 1").await.1, ["1"]);
    // Bounded by the raw client's deadline: a hang fails the test.
    assert_eq!(
        run("SELECT 2").await,
        ("NTDCZ".to_string(), vec!["2".to_string()]),
        "the notice, then the answer"
    );
    assert_eq!(run("COMMIT").await.0, "NCZ");
}

/// Asks `server` `sql` (directly, as `postgres`) until its answer is what `until` wants (within
/// 30 s, else the test fails with `what`): that answer.
async fn polled(
    server: &sluice_testkit::Postgres,
    sql: &str,
    until: impl Fn(&str) -> bool,
    what: &str,
) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let got = server.sql(sql).unwrap().trim().to_string();
        if until(&got) {
            return got;
        }
        assert!(std::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A server connection whose backend is terminated under a statement (`pg_terminate_backend`,
/// a server shutting down) sends its FATAL and closes: the client gets that FATAL alone and
/// then the end of the connection, as directly (no second FATAL of sluice's own after it),
/// and other sessions carry on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_fatal_reaches_the_client_alone() {
    let env = start(0, "").await;
    let primary = env.topo.primary();
    let mut a = Raw::connect(env.port, "app", "app", "postgres").await;
    frontend::query("SELECT /* sluice:writer */ pg_sleep(60)", &mut a.out).unwrap();
    a.flush().await;
    let find = "SELECT pid FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%pg_sleep(60)%' AND pid <> pg_backend_pid()";
    let pid = polled(primary, find, |p| !p.is_empty(), "the statement never ran").await;
    primary
        .sql(&format!("SELECT pg_terminate_backend({pid})"))
        .unwrap();
    let got = a.until_closed().await;
    let errors: Vec<String> = got
        .iter()
        .filter(|m| m.tag == b'E')
        .map(|m| format!("{} {}", m.field(b'S').unwrap_or_default(), m.text()))
        .collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with("FATAL 57P01 terminating connection"),
        "{errors:?}"
    );
    assert!(got.iter().all(|m| m.tag != b'Z'), "{got:?}");
    assert_eq!(env.psql("SELECT /* sluice:writer */ 7").trim(), "7");
}

/// Two sessions' connections to the primary, left idle in the pool once their transactions
/// end (their server process ids), and the sessions, to use again.
async fn two_idle(port: u16) -> (Vec<String>, Vec<Raw>) {
    let (mut pids, mut holders) = (Vec::new(), Vec::new());
    for _ in 0..2 {
        let mut c = Raw::connect(port, "app", "app", "postgres").await;
        c.simple_all("BEGIN").await;
        let pid = Raw::column(&c.simple_all("SELECT pg_backend_pid()").await);
        pids.push(pid[0].clone());
        holders.push(c);
    }
    for c in &mut holders {
        c.simple_all("COMMIT").await;
    }
    (pids, holders)
}

/// A connection lost under a statement, its server silent (when a server dies, its
/// connections die one by one as its process is torn down, and one still open when lent
/// would fail the next statement with an unknown outcome; here a relay cuts one), takes the
/// idle connections to its server with it: the two idle ones sluice held there are closed,
/// and the next statement gets a fresh connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_connection_takes_its_servers_idle_ones_with_it() {
    let armed = Arc::new(AtomicBool::new(false));
    let arm = armed.clone();
    let env = start_with(0, move |topo| {
        let primary = topo.primary().addr();
        let relay = cutting_relay(primary.clone(), b"cut-here", arm);
        config(topo, "").replace(&primary, &relay)
    })
    .await;
    let primary = env.topo.primary();
    let (idle_pids, mut holders) = two_idle(env.port).await;
    let alive = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE pid IN ({})",
        idle_pids.join(",")
    );
    assert_eq!(primary.sql(&alive).unwrap().trim(), "2", "idle in the pool");
    let mut a = Raw::connect(env.port, "app", "app", "postgres").await;
    armed.store(true, Ordering::SeqCst);
    // (A write: a read lost on the primary is not run again either, but ends its session
    // as a write does.)
    frontend::query("SELECT txid_current(), 'cut-here'", &mut a.out).unwrap();
    a.flush().await;
    a.until_closed().await;
    assert!(!armed.load(Ordering::SeqCst), "the connection was cut");
    let closed = format!("the idle connections {idle_pids:?} were not closed");
    polled(primary, &alive, |n| n == "0", &closed).await;
    let pid = Raw::column(&holders[0].simple_all("SELECT pg_backend_pid()").await);
    assert!(!idle_pids.contains(&pid[0]), "a fresh connection");
}

/// A server process the server ends alone, saying so (`pg_terminate_backend`, here the
/// client's own), takes only its connection: the FATAL reaches its client as directly, and
/// the idle connections to that server serve the next statements. (Any client could close
/// every idle connection to a server that way.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_ended_by_its_server_takes_no_other_connection() {
    let env = start(0, "").await;
    let (idle_pids, mut holders) = two_idle(env.port).await;
    let mut a = Raw::connect(env.port, "app", "app", "postgres").await;
    frontend::query(
        "SELECT /* sluice:writer */ pg_terminate_backend(pg_backend_pid())",
        &mut a.out,
    )
    .unwrap();
    a.flush().await;
    let got = a.until_closed().await;
    let fatal = got.iter().find(|m| m.tag == b'E').expect("a FATAL");
    assert_eq!(
        fatal.sqlstate().as_deref(),
        Some("57P01"),
        "{}",
        fatal.text()
    );
    // (A connection taken away would be gone from the pool by now: the client's end comes
    // after the session gave its connection up.)
    let pid = Raw::column(&holders[0].simple_all("SELECT pg_backend_pid()").await);
    assert!(
        idle_pids.contains(&pid[0]),
        "{pid:?} is not one of {idle_pids:?}"
    );
}

/// A plain read whose server connection dies under it before any of its answer came (here a
/// relay drops the standby's answer and closes the connection) runs again, routed afresh, on
/// another connection, and the session goes on; a read that had sent rows ends its session as
/// before, and so does any statement that may write. (The loss was a standby backend killed
/// with SIGKILL: the standby then restarts all of its processes, and on a loaded machine the
/// read's second connection could be opened before the postmaster noticed, then die under the
/// read too: a second loss, which ends the session by design.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_whose_connection_dies_before_it_answers_runs_again() {
    let armed = Arc::new(AtomicBool::new(false));
    let arm = armed.clone();
    let env = start_with(1, move |topo| {
        let replica = topo.replicas()[0].addr();
        let relay = muting_relay(replica.clone(), b"SELECT 7", arm);
        config(topo, "").replace(&replica, &relay)
    })
    .await;
    let mut a = Raw::connect(env.port, "app", "app", "postgres").await;
    // The session's connection to the standby exists, idle, before the read.
    let first = a.simple_all("SELECT pg_is_in_recovery()").await;
    assert_eq!(Raw::column(&first), ["t"], "reads go to the standby");
    armed.store(true, Ordering::SeqCst);
    frontend::query("SELECT 7", &mut a.out).unwrap();
    let (tags, msgs) = a.round(1).await;
    assert!(!armed.load(Ordering::SeqCst), "the answer was dropped");
    assert_eq!(tags, "TDCZ", "{msgs:?}");
    assert_eq!(Raw::column(&msgs), ["7"]);
    assert_eq!(
        Raw::column(&a.simple_all("SELECT 8").await),
        ["8"],
        "the session goes on"
    );
}

/// A read whose connection is lost on the primary, after it ran but before its answer came,
/// is not run again: through a view (an operator, a trigger) a read may write, which the
/// scanner cannot see, and on the primary it may have committed. The session ends as for a
/// write (08006), as directly; the write is there once. (It was run again, and written
/// twice, the client told it succeeded.) On a standby the write would have failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_lost_on_the_primary_after_it_ran_is_not_run_again() {
    let armed = Arc::new(AtomicBool::new(false));
    let arm = armed.clone();
    let env = start_with(0, move |topo| {
        let primary = topo.primary().addr();
        let relay = muting_relay(primary.clone(), b"audited", arm);
        config(topo, "").replace(&primary, &relay)
    })
    .await;
    let primary = env.topo.primary();
    primary
        .sql(
            "CREATE TABLE audit (x int); GRANT ALL ON audit TO app; \
             CREATE FUNCTION audit_hit() RETURNS int LANGUAGE sql AS 'INSERT INTO audit VALUES (1) RETURNING 1'; \
             CREATE VIEW audited AS SELECT audit_hit() AS n; GRANT ALL ON audited TO app",
        )
        .unwrap();
    let mut a = Raw::connect(env.port, "app", "app", "postgres").await;
    armed.store(true, Ordering::SeqCst);
    let got = a.try_simple("SELECT n FROM audited").await;
    assert!(!armed.load(Ordering::SeqCst), "the answer was dropped");
    let e = got.unwrap_err();
    assert!(e.starts_with("08006 "), "{e}");
    assert_eq!(
        primary.sql("SELECT count(*) FROM audit").unwrap().trim(),
        "1"
    );
}

/// A read on a standby whose client cancelled it, its connection then lost before the
/// answer (the cancel's 57014) came, is not run again: the client asked it to stop. (It ran
/// again, to its end.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_cancelled_then_lost_is_not_run_again() {
    let armed = Arc::new(AtomicBool::new(false));
    let arm = armed.clone();
    let env = start_with(1, move |topo| {
        let replica = topo.replicas()[0].addr();
        let relay = muting_relay(replica.clone(), b"muted", arm);
        config(topo, "").replace(&replica, &relay)
    })
    .await;
    let replica = &env.topo.replicas()[0];
    let mut a = Raw::connect(env.port, "app", "app", "postgres").await;
    armed.store(true, Ordering::SeqCst);
    frontend::query("SELECT 'muted' FROM pg_sleep(30)", &mut a.out).unwrap();
    a.flush().await;
    let find = "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE 'SELECT ''muted''%'";
    polled(
        replica,
        find,
        |n| n == "1",
        "the read never ran on the replica",
    )
    .await;
    super::pg::raw::cancel(env.port, a.key).await;
    let got = a.until_closed().await;
    assert!(got.iter().all(|m| m.tag != b'D'), "run again: {got:?}");
    let e = got.iter().find(|m| m.tag == b'E').expect("an error");
    assert_eq!(e.sqlstate().as_deref(), Some("08006"), "{}", e.text());
}

/// A connection lost while the session's settings are replayed on it, before its statement
/// went there (its server closed it after it was found open; here a relay cuts it at the
/// replay): another connection is leased, the statement runs there with the settings, and the
/// session goes on. It ended with 08006.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_lost_under_the_settings_replay_is_replaced() {
    let armed = Arc::new(AtomicBool::new(false));
    let arm = armed.clone();
    let env = start_with(0, move |topo| {
        let primary = topo.primary().addr();
        let relay = cutting_relay(primary.clone(), b"work_mem", arm);
        config(topo, "\n[pool]\nmax_connections = 2\n").replace(&primary, &relay)
    })
    .await;
    let mut a = Raw::connect(env.port, "app", "app", "postgres").await;
    let mut b = Raw::connect(env.port, "app", "app", "postgres").await;
    a.simple_all("SET work_mem = '7MB'").await;
    // `b` holds the connection `a` ran on: `a`'s next statement gets a new one, where its
    // setting is replayed first.
    b.simple_all("BEGIN").await;
    b.simple_all("SELECT 1").await;
    armed.store(true, Ordering::SeqCst);
    let got = a.try_simple("SELECT current_setting('work_mem')").await;
    assert!(!armed.load(Ordering::SeqCst), "the replay was cut");
    assert_eq!(Raw::column(&got.unwrap()), ["7MB"]);
    assert_eq!(
        Raw::column(&a.simple_all("SELECT 2").await),
        ["2"],
        "the session goes on"
    );
    b.simple_all("COMMIT").await;
}

/// Resumes a stopped server process when dropped (also when the test fails).
struct Stopped(u32);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &self.0.to_string()])
            .status();
    }
}

/// A server connection that sends nothing while its answer is awaited (its server process
/// stopped, as a hung process is) fails its statement after `[pool] read_timeout` (3 s here: a
/// busy machine answers the statements before it in time): the client
/// hears why (in a transaction, that it was rolled back), the connection is closed and its
/// place in the pool given back, so the next client is served. It hung for as long as the
/// process stayed stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_server_connection_fails_its_statement_after_the_read_timeout() {
    let env = start(
        0,
        "\n[pool]\nmax_connections = 1\nread_timeout = \"3s\"\nqueue_timeout = \"60s\"\n",
    )
    .await;
    let mut a = Raw::connect(env.port, "app", "app", "postgres").await;
    let msgs = a
        .try_simple("BEGIN; SELECT pg_backend_pid()")
        .await
        .unwrap();
    let pid: u32 = Raw::column(&msgs)[0].parse().unwrap();
    let status = std::process::Command::new("kill")
        .args(["-STOP", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let stopped = Stopped(pid);
    let e = tokio::time::timeout(Duration::from_secs(30), a.try_simple("SELECT 1"))
        .await
        .expect("the statement fails after read_timeout")
        .unwrap_err();
    assert!(
        e.contains("40001") && e.contains("sent nothing for 3s ([pool] read_timeout)"),
        "{e}"
    );
    drop(stopped);
    let mut b = Raw::connect(env.port, "app", "app", "postgres").await;
    let rows = tokio::time::timeout(Duration::from_secs(30), b.try_simple("SELECT 2"))
        .await
        .expect("the pool's place was given back")
        .unwrap();
    assert_eq!(Raw::column(&rows), ["2"]);
}

/// A server that sends a message of a type PostgreSQL never sends (here in place of a row)
/// is not believed: the statement's client gets a FATAL that says what came, its connection
/// is closed, and the next client is served on a fresh one. It was passed on to the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_type_no_server_sends_ends_the_statement_not_the_proxy() {
    let env = start_with(0, |topo| {
        let primary = topo.primary().addr();
        let relay = rewriting_relay(primary.clone(), |mut msg| {
            if msg[0] == b'D' && msg.ends_with(b"lie") {
                msg[0] = b'~';
            }
            msg
        });
        config(
            topo,
            "\n[pool]\nmax_connections = 1\nqueue_timeout = \"60s\"\n",
        )
        .replace(&primary, &relay)
    })
    .await;
    let mut a = Raw::connect(env.port, "app", "app", "postgres").await;
    let e = a.try_simple("SELECT 'lie'").await.unwrap_err();
    assert!(
        e.starts_with("08006 ") && e.contains("message of unknown type '~'"),
        "{e}"
    );
    let mut b = Raw::connect(env.port, "app", "app", "postgres").await;
    assert_eq!(
        Raw::column(&b.try_simple("SELECT 'truth'").await.unwrap()),
        ["truth"]
    );
}

/// A server that reports ever new parameters (here a thousand with every row of a query,
/// some of them with values of 5,000 bytes) is not believed beyond sluice's bounds, which
/// the unit tests of `keep_parameter` check: its client still gets every ParameterStatus, as
/// directly, with the rows, and the session and the next client go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_reporting_ever_new_parameters_is_passed_on_and_the_session_goes_on() {
    use std::sync::atomic::{AtomicU64, Ordering};
    static REPORTED: AtomicU64 = AtomicU64::new(0);
    let env = start_with(0, |topo| {
        let primary = topo.primary().addr();
        let relay = rewriting_relay(primary.clone(), |msg| {
            if msg[0] != b'D' || !msg.ends_with(b"flood") {
                return msg;
            }
            let mut out = Vec::new();
            for i in 0..1000 {
                let n = REPORTED.fetch_add(1, Ordering::Relaxed);
                let value = if i % 10 == 0 {
                    "x".repeat(5000)
                } else {
                    n.to_string()
                };
                let body = format!("x.flood{n}\0{value}\0");
                out.push(b'S');
                out.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
                out.extend_from_slice(body.as_bytes());
            }
            out.extend_from_slice(&msg);
            out
        });
        config(topo, "\n[pool]\nmax_connections = 1\n").replace(&primary, &relay)
    })
    .await;
    let mut a = Raw::connect(env.port, "app", "app", "postgres").await;
    for _ in 0..5 {
        let msgs = a.simple_all("SELECT 'flood'").await;
        let reported = msgs.iter().filter(|m| m.tag == b'S').count();
        assert_eq!(reported, 1000, "every ParameterStatus reaches the client");
        let rows: Vec<_> = msgs.iter().filter(|m| m.tag == b'D').collect();
        assert_eq!(rows.len(), 1);
    }
    assert_eq!(
        Raw::column(&a.try_simple("SELECT 'after'").await.unwrap()),
        ["after"]
    );
    let mut b = Raw::connect(env.port, "app", "app", "postgres").await;
    assert_eq!(
        Raw::column(&b.try_simple("SELECT 'next'").await.unwrap()),
        ["next"]
    );
}

/// A server connection that closes without a word (its backend killed) while its session sits
/// inside a transaction between statements: the client is told its transaction was rolled
/// back (40001), as when the connection is lost under a statement (it was told 08006).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_whose_connection_dies_between_statements_is_told_it_rolled_back() {
    let env = start(0, "").await;
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    c.try_simple("BEGIN").await.unwrap();
    let pid = Raw::column(&c.try_simple("SELECT pg_backend_pid()").await.unwrap()).concat();
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid])
        .status()
        .unwrap();
    assert!(killed.success(), "kill -KILL {pid}");
    let m = c.next().await;
    assert_eq!(m.tag, b'E', "{m:?}");
    assert_eq!(m.sqlstate().as_deref(), Some("40001"), "{}", m.text());
    assert!(m.text().contains("restart the transaction"), "{}", m.text());
}

/// A server that ends a connection a session holds between statements with a FATAL of its
/// own (`pg_terminate_backend`: 57P01): the client hears that FATAL and then the end of the
/// connection, as directly (sluice added a FATAL of its own after it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_fatal_between_statements_is_the_last_word() {
    let env = start(0, "").await;
    let mut c = Raw::connect(env.port, "app", "app", "postgres").await;
    c.try_simple("BEGIN").await.unwrap();
    let pid = Raw::column(&c.try_simple("SELECT pg_backend_pid()").await.unwrap()).concat();
    env.topo
        .primary()
        .sql(&format!("SELECT pg_terminate_backend({pid})"))
        .unwrap();
    let m = c.next().await;
    assert_eq!(m.tag, b'E', "{m:?}");
    assert_eq!(m.sqlstate().as_deref(), Some("57P01"), "{}", m.text());
    let rest = c.until_closed().await;
    assert!(rest.is_empty(), "{rest:?}");
}
