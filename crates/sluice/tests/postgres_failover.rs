//! PostgreSQL failover, rejoin and switchover against a real primary with two streaming
//! standbys under synchronous replication (`FIRST 1` of all three servers, by their
//! `cluster_name`), with a client writing numbered rows through sluice all along:
//!
//! 1. the primary is killed (SIGKILL), twice: its synchronous standby is promoted, the other one
//!    follows it, writes resume there, and every acknowledged row is on it; the old primary,
//!    started again, is kept out of traffic at once, found diverged (its crash recovery
//!    wrote past the fork point) and brought back as a standby by `rewind_command`;
//! 2. then the primary hangs (SIGSTOP): the same, and the statement in flight on it fails
//!    with a clear error instead of hanging; thawed, it is fenced and rewound as well;
//! 3. a switchover under pgbench load: no client error, the old primary rejoins.
//!
//! The monitor logs in as a role that is not a superuser, with the grants
//! `docs/configuration.md` lists. Waits are bounded at 60 s as hang guards only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod pg;

use pg::http::{get_json, request};
use pg::raw::Raw;
use pg::{server_view, wait_view};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);

/// The grants the monitor's role needs for failover, switchover and rejoin.
const GRANTS: &[&str] = &[
    "GRANT EXECUTE ON FUNCTION pg_promote(boolean, integer) TO monitor",
    "GRANT EXECUTE ON FUNCTION pg_reload_conf() TO monitor",
    "GRANT EXECUTE ON FUNCTION pg_read_file(text) TO monitor",
    "GRANT ALTER SYSTEM ON PARAMETER primary_conninfo, default_transaction_read_only, synchronous_standby_names TO monitor",
];

/// A client inserting numbered rows through sluice, one autocommit INSERT at a time,
/// reconnecting after an error: the rows acknowledged, and the errors seen.
struct Writer {
    acked: Arc<Mutex<BTreeSet<u64>>>,
    errors: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Writer {
    fn start(port: u16) -> Writer {
        let acked = Arc::new(Mutex::new(BTreeSet::new()));
        let errors = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (a, e, s) = (acked.clone(), errors.clone(), stop.clone());
        let task = tokio::spawn(async move {
            let mut conn: Option<Raw> = None;
            let mut id = 0u64;
            while !s.load(Relaxed) {
                let c = match conn.as_mut() {
                    Some(c) => c,
                    None => match Raw::try_connect(port, "app", "app", "postgres").await {
                        Ok(c) => conn.insert(c),
                        Err(err) => {
                            e.lock().unwrap().push(format!("connect: {err}"));
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    },
                };
                id += 1;
                match c.try_simple(&format!("INSERT INTO w VALUES ({id})")).await {
                    Ok(_) => {
                        a.lock().unwrap().insert(id);
                    }
                    Err(err) => {
                        e.lock().unwrap().push(format!("row {id}: {err}"));
                        conn = None;
                    }
                }
            }
        });
        Writer {
            acked,
            errors,
            stop,
            task,
        }
    }

    fn acked(&self) -> BTreeSet<u64> {
        self.acked.lock().unwrap().clone()
    }

    /// Waits until `n` more rows than now are acknowledged.
    async fn more(&self, n: usize, events: impl Fn() -> String) {
        let target = self.acked.lock().unwrap().len() + n;
        let deadline = Instant::now() + LONG;
        while self.acked.lock().unwrap().len() < target {
            assert!(
                Instant::now() < deadline,
                "writes did not resume; errors: {:?}\n{}",
                self.errors.lock().unwrap(),
                events()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn finish(self) -> (BTreeSet<u64>, Vec<String>) {
        self.stop.store(true, Relaxed);
        self.task.await.unwrap();
        let errors = self.errors.lock().unwrap().clone();
        let acked = self.acked.lock().unwrap().clone();
        (acked, errors)
    }
}

/// The address the admin API gives the primary role, if any.
fn primary(admin: SocketAddr) -> Option<String> {
    get_json(admin, "/api/servers")
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["role"] == "primary")
        .map(|s| s["address"].as_str().unwrap().to_string())
}

/// The monitor's events, for failure messages.
fn events(admin: SocketAddr) -> String {
    get_json(admin, "/api/events").to_string()
}

/// The events and every server's recent log, for a failure message.
fn diagnosis(env: &pg::PgEnv, admin: SocketAddr) -> String {
    let mut out = events(admin);
    for s in &env.topo.servers {
        out.push_str(&format!("\n--- {} ---\n{}", s.addr(), s.log_tail(25)));
    }
    out
}

/// Waits until a server other than `old` holds the primary role; returns it.
async fn new_primary(admin: SocketAddr, old: &str) -> String {
    let deadline = Instant::now() + LONG;
    loop {
        if let Some(p) = primary(admin).filter(|p| p != old) {
            return p;
        }
        assert!(
            Instant::now() < deadline,
            "no failover from {old}\n{}",
            events(admin)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the former primary `addr` is a replica of `primary` (brought back by
/// `rewind_command`), checking at every look that it never takes writes meanwhile.
async fn rejoins(env: &pg::PgEnv, admin: SocketAddr, addr: &str, primary: &str) {
    let deadline = Instant::now() + LONG;
    loop {
        let v = server_view(admin, addr);
        assert_ne!(v.0, "writer", "{addr} took writes: {v:?}");
        assert_ne!(v.1, "primary", "{addr} given the primary role: {v:?}");
        if v.1 == "replica" && v.2 == "ONLINE" && v.3 == primary {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{addr} did not rejoin as a replica of {primary}: still {v:?}\n{}\n--- its log ---\n{}",
            events(admin),
            env.topo
                .servers
                .iter()
                .find(|s| s.addr() == addr)
                .map(|s| s.log_tail(40))
                .unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every acknowledged row is on the server at `addr`.
fn all_present(env: &pg::PgEnv, addr: &str, acked: &BTreeSet<u64>, what: &str) {
    let server = env.topo.servers.iter().find(|s| s.addr() == addr).unwrap();
    let present: BTreeSet<u64> = server
        .sql("SELECT id FROM w")
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    let lost: Vec<_> = acked.difference(&present).collect();
    assert!(
        lost.is_empty(),
        "{what}: acknowledged rows missing on {addr}: {lost:?}"
    );
}

/// `kill -SIG pid`.
fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{sig} {pid}");
}

/// The server that is neither `a` nor `b`.
fn other_than(env: &pg::PgEnv, a: &str, b: &str) -> String {
    env.topo
        .servers
        .iter()
        .map(|s| s.addr())
        .find(|s| s != a && s != b)
        .unwrap()
}

/// Freezes the WAL receiver of the standby at `sync`, has the primary write (as `postgres`,
/// whose commits wait for no standby) far more WAL than the frozen connection's socket
/// buffers hold, and waits until the standby at `ahead` received it: `ahead` then has more
/// WAL than `sync` will ever get from this primary. Returns the frozen process.
async fn freeze_receiver(env: &pg::PgEnv, sync: &str, ahead: &str) -> u32 {
    let by_addr = |a: &str| env.topo.servers.iter().find(|s| s.addr() == a).unwrap();
    let pid: u32 = by_addr(sync)
        .sql("SELECT pid FROM pg_stat_wal_receiver")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    signal(pid, "STOP");
    let primary = env
        .topo
        .servers
        .iter()
        .find(|s| s.addr() != sync && s.addr() != ahead)
        .unwrap();
    primary
        .sql("CREATE TABLE IF NOT EXISTS unsynced (x int); INSERT INTO unsynced SELECT generate_series(1, 500000)")
        .unwrap();
    let lsn = primary.sql("SELECT pg_current_wal_lsn()").unwrap();
    pg::wait_received(&[by_addr(ahead)], &lsn).await;
    pid
}

/// The standby the primary at `addr` holds synchronous, once every other server streams from
/// it: with `FIRST 1 (...)` that is the first listed of the streaming standbys, so a standby
/// that just rejoined and still catches up may take the place of another once it streams
/// (read before, the answer would be stale by the time the test kills the primary).
async fn synchronous_standby(env: &pg::PgEnv, addr: &str) -> String {
    let server = env.topo.servers.iter().find(|s| s.addr() == addr).unwrap();
    let standbys = env.topo.servers.len() - 1;
    let deadline = Instant::now() + LONG;
    loop {
        let rows = server
            .sql("SELECT application_name || ' ' || state || ' ' || sync_state FROM pg_stat_replication")
            .unwrap();
        let rows: Vec<Vec<&str>> = rows
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        let streaming = rows
            .iter()
            .filter(|r| r.get(1) == Some(&"streaming"))
            .count();
        let sync: Vec<&str> = rows
            .iter()
            .filter(|r| r.get(2) == Some(&"sync"))
            .filter_map(|r| r.first().copied())
            .collect();
        if let ([name], true) = (sync.as_slice(), streaming == standbys) {
            let port = name.strip_prefix("pg").expect("cluster_name pg<port>");
            return format!("127.0.0.1:{port}");
        }
        assert!(
            Instant::now() < deadline,
            "{addr}: not every standby streams with one synchronous: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The monitor's check rounds begun so far.
fn monitor_rounds(env: &pg::PgEnv) -> u64 {
    env.process
        .frontend(sluice_core::Protocol::Postgres)
        .and_then(|f| f.monitor())
        .expect("the PostgreSQL monitor")
        .stats
        .rounds
        .load(Relaxed)
}

/// Waits until a round of the monitor's that began after now has ended (two more begun: the
/// rounds run one after another), so that its view of the primary is no older than now.
async fn monitor_caught_up(env: &pg::PgEnv) {
    let target = monitor_rounds(env) + 2;
    let deadline = Instant::now() + LONG;
    while monitor_rounds(env) < target {
        assert!(
            Instant::now() < deadline,
            "the monitor ran no round in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_fails_over_to_a_synchronous_standby_rejoins_and_switches_over() {
    let env = pg::start_prepared(
        2,
        |topo| {
            let p = topo.primary();
            for g in GRANTS {
                p.sql(g).unwrap();
            }
            let names: Vec<String> = topo
                .servers
                .iter()
                .map(|s| format!("pg{}", s.port))
                .collect();
            p.sql(&format!(
                "ALTER SYSTEM SET synchronous_standby_names = 'FIRST 1 ({})'",
                names.join(", ")
            ))
            .unwrap();
            p.sql("SELECT pg_reload_conf()").unwrap();
            p.sql("ALTER ROLE app SET synchronous_commit = on").unwrap();
        },
        |topo| {
            pg::managed_config(
                topo,
                &[],
                &format!(
                    "interval = \"100ms\"\ntimeout = \"500ms\"\n\n[failover]\nenabled = true\ndetection_time = \"1s\"\nwrite_wait = \"30s\"\nrewind_command = '{}'\nrewind_timeout = \"60s\"\n",
                    topo.rewind_command().unwrap()
                ),
            )
        },
    )
    .await;
    pg::wait_replayed(&env.topo).await;
    let admin = env.admin().await;
    let a = admin.addr;
    let original = env.topo.primary().addr();
    // (The first round places it unless its check outlived the 500 ms limit: a busy machine.)
    wait_view(a, &original, "the primary", |v| v.1 == "primary").await;
    assert_eq!(primary(a).as_deref(), Some(&*original));
    for r in env.topo.replicas() {
        wait_view(a, &r.addr(), "a streaming replica", |v| {
            v.1 == "replica" && v.2 == "ONLINE"
        })
        .await;
    }
    // The monitor's grants suffice: failover is not refused.
    let monitor = get_json(a, "/api/monitor");
    assert_eq!(
        monitor["failover_refused"],
        serde_json::Value::Null,
        "{monitor}"
    );
    env.psql("CREATE TABLE w (id bigint PRIMARY KEY)");
    let w = Writer::start(env.port);
    w.more(20, || events(a)).await;

    // 1. Rounds of SIGKILL, then SIGSTOP, of whichever server is the primary: its
    //    synchronous standby takes over, the other standby follows it, writes resume with
    //    every acknowledged row on it, and the old primary comes back as a standby.
    let mut env = env;
    let mut current = original.clone();
    for (round, hang) in [(1, false), (2, false), (3, true)] {
        let how = if hang { "SIGSTOP" } else { "SIGKILL" };
        let sync = synchronous_standby(&env, &current).await;
        // The monitor promotes a standby its last check of the primary listed as synchronous:
        // let it check once more after the test read it (a rejoined standby takes the place
        // of another as it starts streaming).
        monitor_caught_up(&env).await;
        let at = env
            .topo
            .servers
            .iter()
            .position(|s| s.addr() == current)
            .unwrap();
        let acked_before = w.acked().len();
        // In the first round the synchronous standby stops receiving (its WAL receiver
        // frozen) while the primary writes a commit that waits for no standby: the
        // asynchronous standby then has more WAL than the one that may be promoted, which
        // must first fetch it from there (or the other could not follow it).
        let frozen = if round == 1 {
            Some(freeze_receiver(&env, &sync, &other_than(&env, &current, &sync)).await)
        } else {
            None
        };
        if hang {
            env.topo.servers[at].pause().unwrap();
        } else {
            env.topo.servers[at].kill();
        }
        // (Thawed once the primary is dead: it finds nothing more to receive.)
        if let Some(pid) = frozen {
            signal(pid, "CONT");
        }
        let next = new_primary(a, &current).await;
        if frozen.is_some() {
            let ev = events(a);
            assert!(ev.contains("fetched from"), "no fast-forward: {ev}");
        }
        assert_eq!(
            next, sync,
            "round {round}: promoted a standby that was not synchronous"
        );
        w.more(20, || diagnosis(&env, a)).await;
        all_present(&env, &next, &w.acked(), how);
        let other = env
            .topo
            .servers
            .iter()
            .map(|s| s.addr())
            .find(|s| *s != current && *s != next)
            .unwrap();
        wait_view(a, &other, "following the new primary", |v| {
            v.1 == "replica" && v.2 == "ONLINE" && v.3 == next
        })
        .await;
        eprintln!(
            "round {round} ({how}): {next} promoted; {acked_before} rows acknowledged before, {} now, all on it",
            w.acked().len()
        );
        // The old primary comes back: kept out, found diverged or not, rewound, a standby
        // of the new one. (After a SIGKILL sluice may fence, stop and rewind it before the
        // testkit sees it answer: then the testkit says the process it started exited; what
        // counts is that it rejoins.)
        if hang {
            env.topo.servers[at].resume().unwrap();
        } else if let Err(e) = tokio::task::block_in_place(|| env.topo.servers[at].start_again()) {
            eprintln!("the old primary's first start: {e}");
        }
        rejoins(&env, a, &current, &next).await;
        current = next;
    }
    let p2 = current;
    for s in env
        .topo
        .servers
        .iter()
        .map(|s| s.addr())
        .filter(|s| *s != p2)
    {
        wait_view(a, &s, "following the new primary", |v| {
            v.1 == "replica" && v.2 == "ONLINE" && v.3 == p2
        })
        .await;
    }
    let (acked, errors) = w.finish().await;
    all_present(&env, &p2, &acked, "at the end of the failovers");
    // Errors only where a statement was in flight on a failed primary or waited too long:
    // each says what happened to it.
    for e in &errors {
        assert!(
            e.contains("40001")
                || e.contains("08007")
                || e.contains("08006")
                || e.contains("connect"),
            "unexpected client error: {e}"
        );
    }
    eprintln!(
        "SIGSTOP: {p2} promoted; {} rows acknowledged in all, all on it; client errors: {errors:?}",
        acked.len()
    );

    // 3. Switchover under pgbench load: no client error.
    let script = env.topo.servers[0].dir().join("switchover.sql");
    std::fs::write(
        &script,
        "INSERT INTO w VALUES (1000000 + :client_id * 100000 + (random() * 99999)::int) ON CONFLICT DO NOTHING;\nSELECT count(*) FROM w;\n",
    )
    .unwrap();
    let pgbench = sluice_testkit::find_program("pgbench", "postgresql-client-15").unwrap();
    let port = env.port.to_string();
    let bench = tokio::task::spawn_blocking(move || {
        std::process::Command::new(pgbench)
            .env("PGPASSWORD", "app")
            .args([
                "-n",
                "-c",
                "4",
                "-T",
                "8",
                "-h",
                "127.0.0.1",
                "-U",
                "app",
                "-p",
            ])
            .arg(port)
            .arg("-f")
            .arg(script)
            .arg("postgres")
            .output()
            .unwrap()
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (status, body) =
        tokio::task::spawn_blocking(move || request(a, "POST", "/api/switchover", None))
            .await
            .unwrap();
    assert_eq!(status, 200, "{body}\n{}", events(a));
    assert!(body.contains("complete"), "{body}");
    let p3 = primary(a).unwrap();
    assert_ne!(p3, p2);
    let out = bench.await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("number of failed transactions: 0"),
        "pgbench saw errors during the switchover:\n{stdout}\n{stderr}\n{}",
        events(a)
    );
    eprintln!("switchover to {p3}: {body}");
    // The admin API answers for the PostgreSQL cluster by protocol, and says which
    // protocol each event is about.
    let m = get_json(a, "/api/monitor?protocol=postgres");
    assert_eq!(m["primary"], p3, "{m}");
    let (status, _) = request(a, "GET", "/api/monitor?protocol=mysql", None);
    assert_eq!(status, 404);
    assert!(events(a).contains("\"protocol\":\"postgres\""));
    // Every promotion started a timeline: the primary is on the fifth (three failovers and a
    // switchover), as the API and the metrics say.
    let view = get_json(a, "/api/servers");
    let tl = view
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["address"] == p3)
        .unwrap()["timeline"]
        .as_u64();
    assert_eq!(tl, Some(5), "{view}");
    let (_, metrics) = request(a, "GET", "/metrics", None);
    assert!(
        metrics.contains(&format!(
            "sluice_server_timeline{{server=\"{p3}\",protocol=\"postgres\"}} 5"
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains("sluice_replication_lag_bytes{"),
        "{metrics}"
    );
    rejoins(&env, a, &p2, &p3).await;
}
