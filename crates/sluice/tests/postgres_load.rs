//! PostgreSQL through sluice under load: a thousand pgbench clients multiplexed onto a pool of
//! ten connections per server, and results bigger than any buffer streamed to a slow reader
//! with bounded proxy memory (sluice as its own process, so that its memory is its own); a
//! row bigger than sluice's message limit ends that session with a precise error.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod pg;

use pg::raw::Raw;
use postgres_protocol::message::frontend;
use sluice_testkit::PgTopology;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Server connections sluice may open per server in the thousand-client test.
const POOL: u64 = 10;

/// Server connections the `app` role has open on the server at `port` now.
fn app_connections(port: u16) -> u64 {
    let out = pg::psql(
        port,
        "postgres",
        "",
        "postgres",
        &["-c", "SELECT count(*) FROM pg_stat_activity WHERE usename = 'app' AND backend_type = 'client backend'"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_clients_share_ten_connections_per_server() {
    // 1,000 client sockets in this process (sluice runs in it), 1,000 in pgbench's.
    rlimit::increase_nofile_limit(8192).unwrap();
    let env = pg::start(
        1,
        &format!("\n[pool]\nmax_connections = {POOL}\nqueue_timeout = \"120s\"\n"),
    )
    .await;
    pg::pgbench_init(&env).await;

    // Watch the servers while pgbench runs: the pool's bound holds at every sample.
    let done = Arc::new(AtomicBool::new(false));
    let most = Arc::new(AtomicU64::new(0));
    let servers: Vec<String> = env.topo.servers.iter().map(|s| s.addr()).collect();
    let watcher = {
        let (done, most) = (done.clone(), most.clone());
        let ports: Vec<u16> = env.topo.servers.iter().map(|s| s.port).collect();
        tokio::task::spawn_blocking(move || {
            while !done.load(Relaxed) {
                for &port in &ports {
                    most.fetch_max(app_connections(port), Relaxed);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let pgbench = sluice_testkit::find_program("pgbench", "postgresql-client-15").unwrap();
    let port = env.port;
    let out = tokio::task::spawn_blocking(move || {
        // pgbench needs a descriptor per client.
        Command::new("sh")
            .arg("-c")
            .arg(format!(
                "ulimit -n 4096 && exec {} -h 127.0.0.1 -p {port} -U app -n -c 1000 -j 4 -t 3 -S -M extended postgres",
                pgbench.display()
            ))
            .env("PGPASSWORD", "app")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    done.store(true, Relaxed);
    watcher.await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "pgbench: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for want in [
        "number of clients: 1000",
        "number of transactions actually processed: 3000/3000",
        "number of failed transactions: 0",
    ] {
        assert!(stdout.contains(want), "{want:?} not in {stdout}");
    }
    let most = most.load(Relaxed);
    println!("most server connections seen on one server: {most} (pool: {POOL})");
    assert!(
        most <= POOL,
        "{most} server connections on one of {servers:?}: the pool allows {POOL}"
    );
}

/// A PostgreSQL primary alone, role `app` (password `app`) a superuser.
async fn primary_with_app() -> PgTopology {
    tokio::task::spawn_blocking(|| {
        let topo = PgTopology::start(0).expect("PostgreSQL must start");
        topo.primary()
            .sql("CREATE ROLE app LOGIN SUPERUSER PASSWORD 'app'")
            .unwrap();
        topo.primary().require_passwords(&[]).unwrap();
        topo
    })
    .await
    .unwrap()
}

/// sluice as its own process with a PostgreSQL listener in front of `topo`'s primary.
struct Sluice {
    child: std::process::Child,
    port: u16,
    cfg: std::path::PathBuf,
}

impl Sluice {
    fn start(topo: &PgTopology) -> Sluice {
        let port = sluice_testkit::free_port().unwrap();
        let cfg = std::env::temp_dir().join(format!(
            "sluice-pg-memory-{}-{port}.toml",
            std::process::id()
        ));
        let text = pg::config(topo, "\n[log]\nlevel = \"warn\"\n")
            .replace("127.0.0.1:0", &format!("127.0.0.1:{port}"));
        std::fs::write(&cfg, text).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .arg("--config")
            .arg(&cfg)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            // A hang guard: a busy machine may take a while to start a debug build.
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "sluice does not listen"
            );
            std::thread::sleep(Duration::from_millis(25));
        }
        Sluice { child, port, cfg }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Sluice {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::fs::remove_file(&self.cfg).ok();
    }
}

/// Rows of the large result, and the bytes of each.
const ROWS: u64 = 200_000;
const WIDTH: usize = 1000;

/// More than sluice may hold for one session (its buffers are far smaller): the result is
/// ten times this.
const BOUND_KIB: u64 = 20 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_of_a_large_result_costs_bounded_memory() {
    let topo = primary_with_app().await;
    let sluice = Sluice::start(&topo);
    let mut c = Raw::connect(sluice.port, "app", "app", "postgres").await;
    let baseline = sluice_bench::proc_status_kib(sluice.pid(), "VmRSS:");

    // About 200 MB of rows; the client reads none of it for a while.
    let sql = format!("SELECT g, repeat('x', {WIDTH}) FROM generate_series(1, {ROWS}) g");
    frontend::query(&sql, &mut c.out).unwrap();
    c.flush().await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stalled = sluice_bench::proc_status_kib(sluice.pid(), "VmRSS:");
    assert!(
        stalled < baseline + BOUND_KIB,
        "sluice holds {} KiB more for a client that reads nothing",
        stalled - baseline
    );

    // Then it reads everything, slowly at first.
    let mut rows = 0u64;
    let mut bytes = 0u64;
    loop {
        let m = c.next().await;
        match m.tag {
            b'D' => {
                rows += 1;
                bytes += m.body.len() as u64;
                if rows.is_multiple_of(20_000) && rows <= 60_000 {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
            b'Z' => break,
            b'E' => panic!("error: {:?}", m.field(b'M')),
            _ => {}
        }
    }
    assert_eq!(rows, ROWS);
    println!(
        "sluice RSS: {baseline} KiB before, {stalled} KiB with the reader stalled, peak {} KiB after {} MB",
        sluice_bench::proc_status_kib(sluice.pid(), "VmHWM:"),
        bytes >> 20
    );
    assert!(bytes > ROWS * WIDTH as u64);
    let peak = sluice_bench::proc_status_kib(sluice.pid(), "VmHWM:");
    assert!(
        peak < baseline + BOUND_KIB,
        "sluice's peak memory grew by {} KiB relaying {} MB",
        peak - baseline,
        bytes >> 20
    );

    // Rows larger than anything sluice buffers, to clients that do not read them: each is
    // passed on as it arrives, never held whole (four of 60 MB once took 240 MB more).
    const BIG: usize = 60_000_000;
    let mut idle_readers = Vec::new();
    for _ in 0..4 {
        let mut r = Raw::connect(sluice.port, "app", "app", "postgres").await;
        frontend::query(&format!("SELECT repeat('x', {BIG})"), &mut r.out).unwrap();
        r.flush().await;
        idle_readers.push(r);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let held = sluice_bench::proc_status_kib(sluice.pid(), "VmRSS:");
    assert!(
        held < baseline + BOUND_KIB,
        "sluice holds {} KiB more for four clients not reading a {BIG}-byte row each",
        held - baseline
    );
    for r in &mut idle_readers {
        let (_, msgs) = r.round(1).await;
        let row = msgs.iter().find(|m| m.tag == b'D').expect("the row");
        // Column count (2), length (4), the value.
        assert_eq!(row.body.len(), 2 + 4 + BIG);
    }
    let peak = sluice_bench::proc_status_kib(sluice.pid(), "VmHWM:");
    assert!(
        peak < baseline + BOUND_KIB,
        "sluice's peak memory grew by {} KiB relaying four {BIG}-byte rows",
        peak - baseline
    );

    // A row bigger than the largest message sluice reads whole from a server (64 MiB)
    // passes too, as directly.
    let huge = 70 * 1024 * 1024;
    frontend::query(&format!("SELECT repeat('x', {huge})"), &mut c.out).unwrap();
    let (_, msgs) = c.round(1).await;
    let row = msgs.iter().find(|m| m.tag == b'D').expect("the row");
    assert_eq!(row.body.len(), 2 + 4 + huge);

    // COPY data as large, streamed the same way.
    frontend::query(
        &format!("COPY (SELECT repeat('x', {huge})) TO STDOUT"),
        &mut c.out,
    )
    .unwrap();
    let (tags, msgs) = c.round(1).await;
    assert_eq!(tags, "HdcCZ");
    assert_eq!(msgs[1].body.len(), huge + 1, "the row and its newline");

    // A message over that limit that the relay must read whole (a notice): the session ends
    // with an error that says so; the next session works.
    frontend::query(
        &format!("DO $$ BEGIN RAISE NOTICE '%', repeat('x', {huge}); END $$"),
        &mut c.out,
    )
    .unwrap();
    c.flush().await;
    let m = loop {
        let m = c.next().await;
        if m.tag == b'E' {
            break m;
        }
    };
    assert_eq!(m.field(b'S').as_deref(), Some("FATAL"));
    let msg = m.field(b'M').unwrap();
    assert!(msg.contains("is over the limit of 67108864"), "{msg}");
    let mut again = Raw::connect(sluice.port, "app", "app", "postgres").await;
    frontend::query("SELECT 1", &mut again.out).unwrap();
    assert_eq!(Raw::column(&again.round(1).await.1), ["1"]);
}

/// Bytes of each large query, and how many run at once: four of 48 MiB fit in the default
/// `[proxy] max_request_memory` (256 MiB) once, not twice.
const QUERY_BYTES: usize = 48 << 20;
const QUERIES: usize = 4;

/// A simple query's message is held once while it runs: in the client's buffer, charged to
/// `[proxy] max_request_memory`; the statement's record (what the admin API shows in flight,
/// what counts its digest) keeps only the start of its text. Four queries of 48 MiB each
/// wait on the server at once (behind an advisory lock held directly): sluice's RSS grows by
/// less than their 192 MiB and a quarter (153–171 MiB here; 242–295 with a whole copy of
/// each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_simple_queries_are_held_once_while_they_run() {
    let topo = primary_with_app().await;
    let sluice = Sluice::start(&topo);
    let server = topo.primary().port;
    let mut holder = Raw::connect(server, "app", "app", "postgres").await;
    holder
        .try_simple("SELECT pg_advisory_lock(7)")
        .await
        .unwrap();
    let mut clients = Vec::new();
    for _ in 0..QUERIES {
        clients.push(Raw::connect(sluice.port, "app", "app", "postgres").await);
    }
    let baseline = sluice_bench::proc_status_kib(sluice.pid(), "VmRSS:");
    let sql = format!(
        "SELECT length('{}') FROM pg_advisory_xact_lock_shared(7)",
        "x".repeat(QUERY_BYTES)
    );
    for c in &mut clients {
        frontend::query(&sql, &mut c.out).unwrap();
        c.flush().await;
    }
    // All four are on the server, each waiting for the lock.
    let waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'advisory'";
    let started = Instant::now();
    loop {
        let n = Raw::column(&holder.try_simple(waiting).await.unwrap());
        if n == [QUERIES.to_string()] {
            break;
        }
        // A hang guard only: the queries arrive in well under a second.
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "waiting: {n:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let held = sluice_bench::proc_status_kib(sluice.pid(), "VmRSS:");
    holder
        .try_simple("SELECT pg_advisory_unlock(7)")
        .await
        .unwrap();
    for c in &mut clients {
        assert_eq!(
            Raw::column(&c.round(1).await.1),
            [format!("{QUERY_BYTES}")],
            "each query ran whole"
        );
    }
    let messages = (QUERIES * QUERY_BYTES / 1024) as u64;
    println!(
        "sluice RSS: {baseline} KiB before, {held} KiB with {QUERIES} queries of {} MiB waiting",
        QUERY_BYTES >> 20
    );
    assert!(
        held < baseline + messages + messages / 4,
        "sluice holds {} KiB for {messages} KiB of queries",
        held - baseline
    );
}
