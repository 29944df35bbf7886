//! The PostgreSQL benchmark: pgbench against one PostgreSQL server directly, through sluice
//! (transaction pooling, read/write splitting), PgBouncer (transaction pooling), HAProxy (TCP
//! mode) and Pgpool-II (connection pooling), side by side in one run on one machine.
//!
//! - pgbench select-only and TPC-B-like, `-M simple` and `-M prepared`, at 1, 16, 64 and 256
//!   clients (`-j` min(clients, 2)): tps and the ratio to direct, average latency (pgbench's)
//!   and 99th percentile (from pgbench's transaction log, sampled), failed transactions and
//!   aborted clients, each proxy's CPU µs per transaction (utime + stime of its process tree
//!   from /proc, over the run, divided by the transactions) and the part of it in user mode;
//! - the CPU comparison with PgBouncer in rounds (`--cpu-runs N`): the select-only runs of
//!   sluice and PgBouncer again, back to back, N times in all; the verdict compares medians;
//! - with `--equal-rate PCT`, those rounds again with every compared target held to one rate
//!   (pgbench `-R`), PCT % of the slowest one's tps (`rate.rs`);
//! - connect-per-transaction (`-C`) select-only with SCRAM-SHA-256 logins;
//! - 1,000 clients through sluice limited to 50 server connections, sampling
//!   `pg_stat_activity`;
//! - idle client memory: N logged-in idle connections to sluice and to PgBouncer, RSS before
//!   and after;
//! - SVG charts of tps against clients per workload and protocol, a markdown table.
//!
//! Usage: cargo run --release -p sluice-bench --bin pgsuite -- [--time SECS]
//!        [--clients 1,16,64,256] [--workloads select-only,tpcb-like] [--modes simple,prepared]
//!        [--cpu-runs 3] [--equal-rate PCT] [--connect-clients 1,16] [--connect-runs 3] [--many-clients 1000]
//!        [--server-connections 50]
//!        [--idle 5000] [--scale 10] [--plots DIR] [--sluice-threads N]
//!        [--targets direct,sluice,pgbouncer,haproxy,pgpool]
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sluice_bench::pg::{
    as_server_user, owned_dir, pg_bin_dir, rss_bytes, tree_cpu_micros, tree_user_micros,
    write_owned, PgServer, Pgbench, PgbenchResult, Proc,
};
use sluice_bench::pgclient::PgClient;
use sluice_bench::plot::{Chart, Series};
use sluice_bench::{machine, sluice_bin, wait_port};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod opts;
mod proxies;
mod rate;
mod report;
mod scale;
use opts::*;
use proxies::*;
use report::*;
use scale::*;

/// The targets whose CPU per select-only transaction the goal compares, in rounds.
const CPU_COMPARED: [&str; 2] = ["sluice", "pgbouncer"];
const ALL_TARGETS: [&str; 5] = ["direct", "sluice", "pgbouncer", "haproxy", "pgpool"];
/// Targets run only when named in `--targets`: `floor` (bench/src/bin/pgfloor.rs), the least a
/// transaction pooler on tokio does, as a reference under sluice's CPU per transaction.
const OPT_IN_TARGETS: [&str; 1] = ["floor"];
/// The floor's source address: the server trusts it (the floor sends no password).
const FLOOR_SOURCE: &str = "127.0.0.2";
const WORKLOADS: [&str; 2] = ["select-only", "tpcb-like"];
const MODES: [&str; 3] = ["simple", "extended", "prepared"];

/// Whether `target` runs `workload` in `mode`: the floor speaks the simple protocol only, and
/// is there for select-only.
fn runs(target: &str, workload: &str, mode: &str) -> bool {
    target != "floor" || (workload == "select-only" && mode == "simple")
}

/// The role every client logs in as (SCRAM-SHA-256), and its password.
const ROLE: &str = "app";
const PASSWORD: &str = "app";
/// What the server, sluice and PgBouncer store for the role: the plaintext password (each
/// derives its own verifier with 4,096 iterations), or with `--scram-iterations` one SCRAM
/// secret of that many iterations, the same for all three (sluice and PgBouncer log in to
/// the server with the client key a client's proof reveals).
static STORED: std::sync::OnceLock<String> = std::sync::OnceLock::new();

fn stored_password() -> &'static str {
    STORED.get().map_or(PASSWORD, String::as_str)
}
const DATABASE: &str = "postgres";
/// PostgreSQL's `max_connections`: every target's clients or pool at once, with room.
const PG_MAX_CONNECTIONS: u32 = 1500;
/// Server connections each sluice hostgroup and PgBouncer's pool may open in the main runs
/// (more than the most clients: pooling, not queueing, is measured there).
const POOL_SIZE: u32 = 300;
/// Share of transactions pgbench logs for the percentiles.
const SAMPLING_RATE: f64 = 0.1;

/// The run's temporary directory, removed on drop (and by the signal handler).
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<TempDir, String> {
        let base = std::env::temp_dir();
        // Directories of earlier runs that were killed before they could clean up.
        if let Ok(entries) = std::fs::read_dir(&base) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if let Some(pid) = name
                    .strip_prefix("sluice-pgsuite-")
                    .and_then(|p| p.parse::<u32>().ok())
                {
                    if !Path::new(&format!("/proc/{pid}")).exists() {
                        let _ = std::fs::remove_dir_all(e.path());
                    }
                }
            }
        }
        let dir = base.join(format!("sluice-pgsuite-{}", std::process::id()));
        owned_dir(&dir)?;
        Ok(TempDir(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Something pgbench connects to.
struct Target {
    name: &'static str,
    port: u16,
    /// The proxy (none for the server itself).
    proc: Option<Proc>,
    /// Why it cannot be measured (failed to start or to log in).
    broken: Option<String>,
}

impl Target {
    fn unusable(&mut self) -> Option<String> {
        if let Some(b) = &self.broken {
            return Some(b.clone());
        }
        self.proc.as_mut().and_then(Proc::exited)
    }

    fn cpu(&self) -> Option<u64> {
        self.proc.as_ref().and_then(|p| tree_cpu_micros(p.pid()))
    }

    fn cpu_user(&self) -> Option<u64> {
        self.proc.as_ref().and_then(|p| tree_user_micros(p.pid()))
    }
}

/// One pgbench run against one target.
#[derive(Clone)]
struct Row {
    workload: String,
    mode: String,
    clients: u32,
    target: &'static str,
    result: Result<PgbenchResult, String>,
    cpu_us_per_txn: Option<f64>,
    /// The part of `cpu_us_per_txn` spent in user mode (over the steady state only).
    user_us_per_txn: Option<f64>,
    /// The server's CPU (postmaster and every backend) per transaction.
    server_us_per_txn: Option<f64>,
    /// pgbench's own CPU per transaction.
    client_us_per_txn: Option<f64>,
    /// `cpu_us_per_txn` is over the steady state (after the logins), not the whole run.
    cpu_steady: bool,
}

fn main() {
    let opts = match Opts::parse(std::env::args().skip(1)) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("pgsuite: {e}");
            std::process::exit(2);
        }
    };
    if let Some(n) = opts.scram_iterations {
        let v = sluice_postgres::scram::Verifier::from_password(PASSWORD, b"pgsuite-salt-16b", n);
        let _ = STORED.set(v.to_secret());
    }
    if let Err(e) = run(&opts) {
        eprintln!("pgsuite: {e}");
        std::process::exit(1);
    }
}

/// The first line a program prints for `arg`.
fn banner(program: &Path, arg: &str) -> String {
    Command::new(program)
        .arg(arg)
        .output()
        .ok()
        .and_then(|o| {
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            text.lines().next().map(|l| l.trim().to_string())
        })
        .unwrap_or_else(|| "version unknown".into())
}

fn find(name: &'static str, package: &'static str) -> Option<PathBuf> {
    sluice_testkit::find_program(name, package).ok()
}

fn free_port() -> Result<u16, String> {
    sluice_testkit::free_port().map_err(|e| e.to_string())
}

/// A log file in the run's directory for a child's output.
fn log_file(dir: &Path, name: &str) -> Result<std::fs::File, String> {
    let path = dir.join(name);
    let f = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    sluice_bench::pg::chown_to_server_user(&path)?;
    Ok(f)
}

fn with_log(cmd: &mut Command, dir: &Path, name: &str) -> Result<(), String> {
    let f = log_file(dir, name)?;
    cmd.stdout(f.try_clone().map_err(|e| e.to_string())?)
        .stderr(f);
    Ok(())
}

/// The last lines of a log in the run's directory.
fn log_tail(dir: &Path, name: &str) -> String {
    let text = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(8)..].join("\n    ")
}

fn jobs(clients: u32) -> u32 {
    clients.min(2)
}

fn per_txn(
    before: Option<u64>,
    after: Option<u64>,
    r: &Result<PgbenchResult, String>,
) -> Option<f64> {
    match (r, before, after) {
        (Ok(r), Some(b), Some(a)) if r.transactions > 0 => {
            Some(a.saturating_sub(b) as f64 / r.transactions as f64)
        }
        _ => None,
    }
}

fn run(o: &Opts) -> Result<(), String> {
    let nofile = rlimit::increase_nofile_limit(u64::MAX).map_err(|e| e.to_string())?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let tmp = TempDir::new()?;
    {
        // Ctrl-C or SIGTERM: stop every server and proxy, remove the directory, exit.
        let dir = tmp.0.clone();
        rt.spawn(async move {
            let Ok(mut term) =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            else {
                return;
            };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            eprintln!("pgsuite: interrupted: stopping the servers and proxies");
            sluice_bench::pg::kill_all_registered();
            std::thread::sleep(Duration::from_millis(200));
            let _ = std::fs::remove_dir_all(&dir);
            std::process::exit(130);
        });
    }

    println!("# machine: {}", machine());
    println!("# options: {}", o.describe());
    println!("# open files limit: {nofile}");
    let pg_bin = pg_bin_dir()?;
    let pgbench_bin = pg_bin.join("pgbench");
    println!(
        "# pgbench: {} (-n, -j min(clients, 2) but -j clients for -C, -T --time + 30 ms per client for its logins (its tps leaves them out); avg latency is pgbench's, p99 from --log --sampling-rate={SAMPLING_RATE}; TPC-B runs start after VACUUM of branches and tellers and TRUNCATE of history)",
        banner(&pgbench_bin, "--version")
    );
    println!("# proxy CPU µs/txn: utime + stime of the proxy's process tree (/proc/PID/stat, reaped children included: all of Pgpool-II's processes) from the moment every pgbench client is connected (ESTABLISHED sockets on the proxy's port) to the end, over the transactions of that window (pgbench's count × the share of the sampled log after that moment); † = over the whole run, logins included");

    let sluice_path = sluice_bin();
    let sluice_path = sluice_path.canonicalize().unwrap_or(sluice_path);
    if !sluice_path.is_file() {
        return Err(format!(
            "no sluice binary at {} (cargo build --release --bin sluice)",
            sluice_path.display()
        ));
    }
    let want = |t: &str| o.targets.iter().any(|x| x == t);
    let pgbouncer_bin = find("pgbouncer", "pgbouncer").filter(|_| want("pgbouncer"));
    let haproxy_bin = find("haproxy", "haproxy").filter(|_| want("haproxy"));
    let pgpool_bin = find("pgpool", "pgpool2").filter(|_| want("pgpool"));
    // Built beside pgsuite (sluice may be another build: SLUICE_BIN).
    let floor_bin = std::env::current_exe()
        .ok()
        .map(|p| p.with_file_name("pgfloor"))
        .filter(|_| want("floor"));
    let git = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(env!("CARGO_MANIFEST_DIR"))
            .args(args)
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    let mut rev = git(&["rev-parse", "--short", "HEAD"]);
    let changed = git(&["status", "--porcelain", "--", "../crates"])
        .lines()
        .count();
    if changed > 0 {
        rev += &format!(" + {changed} uncommitted files under crates/");
    }
    println!(
        "# sluice: {} ({}, commit {rev}), worker_threads = {}, [pool] max_connections {POOL_SIZE} per hostgroup (writer and reader: the same server)",
        sluice_path.display(),
        banner(&sluice_path, "--version"),
        o.sluice_threads
    );
    for (name, bin, wanted) in [
        ("pgbouncer", &pgbouncer_bin, want("pgbouncer")),
        ("haproxy", &haproxy_bin, want("haproxy")),
        ("pgpool", &pgpool_bin, want("pgpool")),
    ] {
        // (pgfloor is printed below: it has no --version.)
        match bin {
            Some(p) => println!(
                "# {name}: {} ({})",
                p.display(),
                banner(p, if name == "haproxy" { "-v" } else { "--version" })
            ),
            None if wanted => println!("# {name}: absent (not installed), skipped"),
            None => println!("# {name}: not selected"),
        }
    }

    if let Some(p) = &floor_bin {
        if !p.is_file() {
            return Err(format!(
                "no pgfloor binary at {} (cargo build --release -p sluice-bench --bin pgfloor)",
                p.display()
            ));
        }
        println!("# floor: {} (bench/src/bin/pgfloor.rs: one thread, a task per client, Query forwarded up to ReadyForQuery over a LIFO pool; no parsing, routing, session state, statistics or client password; select-only -M simple only; its server connections come from {FLOOR_SOURCE}, trusted by pg_hba)", p.display());
    }

    // The server.
    let settings: Vec<String> = [
        format!("max_connections={PG_MAX_CONNECTIONS}"),
        "shared_buffers=256MB".into(),
        "fsync=off".into(),
        "synchronous_commit=off".into(),
        "full_page_writes=off".into(),
        "max_wal_size=4GB".into(),
        "password_encryption=scram-sha-256".into(),
    ]
    .to_vec();
    eprintln!("starting PostgreSQL ...");
    // The floor sends no password: its address only is trusted, and only when it runs.
    let floor_hba = match &floor_bin {
        Some(_) => format!("host all {ROLE} {FLOOR_SOURCE}/32 trust\n"),
        None => String::new(),
    };
    let server = PgServer::start(
        &tmp.0.join("pg"),
        &settings,
        &format!("host all {ROLE} 127.0.0.1/32 scram-sha-256\n{floor_hba}"),
    )?;
    let version = server.sql("SHOW server_version")?;
    println!(
        "# server: PostgreSQL {version}, -c {} (pg_hba: {ROLE} by scram-sha-256 over TCP{})",
        settings.join(" -c "),
        if floor_hba.is_empty() {
            String::new()
        } else {
            format!("; trusted from {FLOOR_SOURCE}, the floor's address")
        }
    );
    println!(
        "# role {ROLE}: {}",
        match o.scram_iterations {
            Some(n) => format!(
                "one SCRAM-SHA-256 secret of {n} iterations stored by PostgreSQL, sluice and PgBouncer (Pgpool-II: the plaintext password)"
            ),
            None => "the plaintext password stored by every target (SCRAM-SHA-256 verifiers of 4,096 iterations)".into(),
        }
    );
    server.sql(&format!(
        "CREATE ROLE {ROLE} LOGIN PASSWORD '{}'; GRANT CREATE ON SCHEMA public TO {ROLE}",
        stored_password()
    ))?;
    eprintln!("pgbench -i -s {} ...", o.scale);
    {
        let mut init = Command::new(&pgbench_bin);
        init.env("PGPASSWORD", PASSWORD)
            .args(["-i", "-q", "-h", "127.0.0.1", "-U", ROLE])
            .arg("-s")
            .arg(o.scale.to_string())
            .arg("-p")
            .arg(server.port.to_string())
            .arg(DATABASE);
        let (status, out, err) = sluice_bench::pg::run_bounded(init, Duration::from_secs(900))?;
        if !status.success() {
            return Err(format!("pgbench -i failed ({status}): {out}{err}"));
        }
    }
    println!(
        "# data: pgbench -i -s {} as {ROLE} ({} accounts)",
        o.scale,
        server.sql("SELECT count(*) FROM pgbench_accounts")?
    );

    // The targets.
    let max_clients = o
        .clients
        .iter()
        .chain(&o.connect_clients)
        .copied()
        .max()
        .unwrap_or(1);
    let mut targets = vec![Target {
        name: "direct",
        port: server.port,
        proc: None,
        broken: None,
    }];
    let mut add = |name: &'static str, started: Result<(Proc, u16), String>| {
        let (proc, port, broken) = match started {
            Ok((p, port)) => (Some(p), port, None),
            Err(e) => {
                println!("# {name}: did not start: {e}");
                (None, 0, Some(format!("did not start: {e}")))
            }
        };
        targets.push(Target {
            name,
            port,
            proc,
            broken,
        });
    };
    if want("sluice") {
        let port = free_port()?;
        let cfg = sluice_config(port, &server.addr(), o.sluice_threads, POOL_SIZE, POOL_SIZE);
        add(
            "sluice",
            start_sluice(&tmp.0, "main", &cfg, port).map(|p| (p, port)),
        );
    }
    if let Some(bin) = &pgbouncer_bin {
        let port = free_port()?;
        add(
            "pgbouncer",
            start_pgbouncer(bin, &tmp.0, "main", port, server.port, 20_000, POOL_SIZE)
                .map(|p| (p, port)),
        );
    }
    if let Some(bin) = &haproxy_bin {
        let port = free_port()?;
        add(
            "haproxy",
            start_haproxy(bin, &tmp.0, port, &server.addr()).map(|p| (p, port)),
        );
    }
    if let Some(bin) = &floor_bin {
        let port = free_port()?;
        add(
            "floor",
            start_floor(bin, &tmp.0, port, server.port).map(|p| (p, port)),
        );
    }
    let pgpool_children = max_clients + 4;
    if let Some(bin) = &pgpool_bin {
        let port = free_port()?;
        add(
            "pgpool",
            start_pgpool(bin, &tmp.0, port, server.port, pgpool_children).map(|p| (p, port)),
        );
        println!(
            "# pgpool settings: raw mode, one backend, num_init_children = {pgpool_children}, max_pool = 1, connection_cache = on, load_balance_mode = off, child_life_time = 0, pool_hba scram-sha-256 with pool_passwd TEXT password (Pgpool-II pools per session: a child process and its cached backend connection per client, never per transaction)"
        );
    }
    println!("# pgbouncer settings: pool_mode = transaction, auth_type = scram-sha-256 (plaintext password in auth_file), default_pool_size = max_db_connections = {POOL_SIZE}, max_client_conn = 20000; haproxy: mode tcp, maxconn 9000");
    for t in targets.iter_mut().filter(|t| t.broken.is_none()) {
        if let Err(e) = check_login(&rt, t.port) {
            println!("# {}: cannot log in and run SELECT 1: {e}", t.name);
            t.broken = Some(format!("login failed: {e}"));
        }
    }

    let logs = tmp.0.join("pgbench-logs");
    std::fs::create_dir_all(&logs).map_err(|e| e.to_string())?;
    let pgbench = |port: u16, args: Vec<String>, log: bool| Pgbench {
        bin: &pgbench_bin,
        port,
        user: ROLE,
        password: PASSWORD,
        database: DATABASE,
        args,
        log: log.then_some((logs.as_path(), SAMPLING_RATE)),
        timeout: Duration::from_secs(u64::from(o.time) + 240),
    };

    let warm = o.time.min(3);
    eprintln!("warm-up: select-only, 8 clients, {warm} s, direct");
    pgbench(
        server.port,
        [
            "-b",
            "select-only",
            "-c",
            "8",
            "-j",
            "2",
            "-T",
            &warm.to_string(),
        ]
        .map(String::from)
        .to_vec(),
        false,
    )
    .run()
    .map_err(|e| format!("warm-up: {e}"))?;

    // One pgbench run of the grid.
    let grid_run = |t: &mut Target,
                    workload: &str,
                    mode: &str,
                    c: u32,
                    rate: Option<u32>|
     -> Result<Row, String> {
        if workload == "tpcb-like" {
            // What pgbench does before a run without -n: every run starts alike.
            for sql in [
                "VACUUM pgbench_branches",
                "VACUUM pgbench_tellers",
                "TRUNCATE pgbench_history",
            ] {
                server.sql(sql)?;
            }
        }
        let mut args: Vec<String> = vec![
            "-b".into(),
            workload.into(),
            "-M".into(),
            mode.into(),
            "-c".into(),
            c.to_string(),
            "-j".into(),
            jobs(c).to_string(),
            "-T".into(),
            duration(o, c).to_string(),
        ];
        if let Some(rate) = rate {
            args.extend(["-R".into(), rate.to_string()]);
        }
        let bench = pgbench(t.port, args, true);
        Ok(measure(t, &server, &bench, workload, mode, c, true))
    };

    // pgbench across workloads, protocols, client counts and targets.
    let cells = |w: &str, m: &str| targets.iter().filter(|t| runs(t.name, w, m)).count();
    let total: usize = o
        .workloads
        .iter()
        .flat_map(|w| o.modes.iter().map(move |m| (w, m)))
        .map(|(w, m)| cells(w, m) * o.clients.len())
        .sum();
    let mut rows: Vec<Row> = Vec::new();
    for workload in &o.workloads {
        for mode in &o.modes {
            for &c in &o.clients {
                for t in targets.iter_mut().filter(|t| runs(t.name, workload, mode)) {
                    let row = grid_run(t, workload, mode, c, None)?;
                    progress(rows.len() + 1, total, &row);
                    rows.push(row);
                }
            }
        }
    }

    // The CPU comparison's further rounds: sluice and PgBouncer (and the floor), select-only,
    // back to back.
    let compared = |t: &str| CPU_COMPARED.contains(&t) || t == "floor";
    let mut cpu_rounds: Vec<Row> = rows
        .iter()
        .filter(|r| r.workload == "select-only" && compared(r.target))
        .cloned()
        .collect();
    if o.workloads.iter().any(|w| w == "select-only") {
        let per_round: usize = o
            .modes
            .iter()
            .map(|m| {
                let n = targets
                    .iter()
                    .filter(|t| compared(t.name) && runs(t.name, "select-only", m));
                n.count() * o.clients.len()
            })
            .sum();
        let total = per_round * o.cpu_runs.saturating_sub(1) as usize;
        let mut done = 0;
        for _ in 1..o.cpu_runs {
            for mode in &o.modes {
                for &c in &o.clients {
                    for t in targets
                        .iter_mut()
                        .filter(|t| compared(t.name) && runs(t.name, "select-only", mode))
                    {
                        let row = grid_run(t, "select-only", mode, c, None)?;
                        done += 1;
                        progress(done, total, &row);
                        cpu_rounds.push(row);
                    }
                }
            }
        }
    }
    let cpu = cpu_compared(&cpu_rounds);

    // The same at an equal rate.
    let equal = if o.equal_rate > 0 {
        Some(rate::rounds(
            &rows,
            o.equal_rate,
            o.cpu_runs,
            &mut targets,
            compared,
            |t, mode, c, r| grid_run(t, "select-only", mode, c, Some(r)),
        )?)
    } else {
        None
    };

    // Connect per transaction.
    // Every round runs each target once, in turn; a target's row is its median round.
    let mut connect_runs: Vec<Row> = Vec::new();
    // (Not the floor: it asks no password, so its logins are not comparable.)
    let connecting = targets.iter().filter(|t| t.name != "floor").count();
    let total = o.connect_clients.len() * connecting * o.connect_runs as usize;
    for &c in (0..o.connect_runs).flat_map(|_| &o.connect_clients) {
        for t in targets.iter_mut().filter(|t| t.name != "floor") {
            let args: Vec<String> = vec![
                "-C".into(),
                "-b".into(),
                "select-only".into(),
                "-M".into(),
                "simple".into(),
                "-c".into(),
                c.to_string(),
                // A thread per client: pgbench logs in synchronously, so with fewer threads
                // than clients only as many logins as threads are ever under way.
                "-j".into(),
                c.to_string(),
                "-T".into(),
                o.time.to_string(),
            ];
            let bench = pgbench(t.port, args, true);
            let row = measure(t, &server, &bench, "select-only -C", "simple", c, false);
            progress(connect_runs.len() + 1, total, &row);
            connect_runs.push(row);
        }
    }
    let connect = ConnectRuns::new(connect_runs);

    // The other proxies' pooled connections would count in pg_stat_activity: stop them.
    let names: Vec<&'static str> = targets.iter().map(|t| t.name).collect();
    drop(targets);

    let mut many: Vec<ManyResult> = Vec::new();
    if o.many_clients > 0 {
        if want("sluice") {
            many.push(many_clients(o, &rt, &tmp.0, &server, &pgbench_bin, None));
        }
        // For scale: the same through PgBouncer with the same number of server connections.
        if let Some(bin) = &pgbouncer_bin {
            many.push(many_clients(
                o,
                &rt,
                &tmp.0,
                &server,
                &pgbench_bin,
                Some(bin),
            ));
        }
    }

    let mut idle: Vec<(&'static str, Result<IdleResult, String>)> = Vec::new();
    if o.idle > 0 {
        if want("sluice") {
            idle.push(("sluice", idle_memory(o, &rt, &tmp.0, &server, None)));
        }
        if let Some(bin) = &pgbouncer_bin {
            idle.push(("pgbouncer", idle_memory(o, &rt, &tmp.0, &server, Some(bin))));
        }
    }

    print_table(&rows);
    print_cpu_rounds(&cpu);
    if let Some(e) = &equal {
        e.print_rounds();
    }
    print_connect_table(&connect);
    print_many(o, &many);
    print_idle(o, &idle);
    print_goals(o, &cpu, &connect, &many, &idle);
    if let Some(e) = &equal {
        e.print_goal();
    }
    if let Some(dir) = &o.plots {
        write_plots(&rows, &names, o, dir)?;
    }
    drop(server);
    drop(tmp);
    rt.shutdown_timeout(Duration::from_secs(1));
    Ok(())
}

/// CPU time of this process's reaped children (pgbench, once it has exited), µs.
fn children_cpu_micros() -> Option<u64> {
    // SAFETY: getrusage writes into the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) } != 0 {
        return None;
    }
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    Some(us(ru.ru_utime) + us(ru.ru_stime))
}

/// Established TCP connections whose local port is `port`: a listener's accepted clients.
fn accepted_on(port: u16) -> usize {
    let suffix = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .map(|f| {
            std::fs::read_to_string(f)
                .unwrap_or_default()
                .lines()
                .skip(1)
                .filter(|l| {
                    let f: Vec<&str> = l.split_whitespace().take(4).collect();
                    f.len() == 4 && f[1].ends_with(&suffix) && f[3] == "01"
                })
                .count()
        })
        .sum()
}

fn epoch_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// pgbench's duration for a run: `--time` plus 30 ms per client for its logins (pgbench's
/// duration includes them, its tps leaves them out).
fn duration(o: &Opts, clients: u32) -> u32 {
    o.time + (clients * 30).div_ceil(1000)
}

/// Runs `run` while watching `port` until `clients` connections are established to it; then
/// notes the proxy's (`pid`) CPU time and the moment: the start of the steady state, after
/// the logins.
fn run_watched<T: Send>(
    pid: Option<u32>,
    port: u16,
    clients: u32,
    limit: Duration,
    run: impl FnOnce() -> T + Send,
) -> (T, Option<(u64, u64, u64)>) {
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let done = &done;
        let watcher = s.spawn(move || {
            let pid = pid?;
            let deadline = Instant::now() + limit;
            while !done.load(Ordering::Relaxed) && Instant::now() < deadline {
                if accepted_on(port) >= clients as usize {
                    let user = tree_user_micros(pid)?;
                    return Some((tree_cpu_micros(pid)?, user, epoch_us()));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            None
        });
        let out = run();
        done.store(true, Ordering::Relaxed);
        (out, watcher.join().ok().flatten())
    })
}

/// The proxy's CPU per transaction from the steady-state snapshot to the end, or over the
/// whole run (logins included) without one; and whether it is the steady state.
fn proxy_cpu_per_txn(
    snap: Option<(u64, u64, u64)>,
    before: Option<u64>,
    after: Option<u64>,
    result: &Result<PgbenchResult, String>,
) -> (Option<f64>, bool) {
    if let (Some((cpu0, _, at)), Some(a), Ok(r)) = (snap, after, result) {
        if let Some(n) = r.transactions_after(at).filter(|&n| n > 0.0) {
            return (Some(a.saturating_sub(cpu0) as f64 / n), true);
        }
    }
    (per_txn(before, after, result), false)
}

/// Runs one pgbench against a target, with the proxy's, the server's and pgbench's CPU time
/// around it; `steady`: the proxy's CPU from the moment every client is connected.
fn measure(
    t: &mut Target,
    server: &PgServer,
    bench: &Pgbench<'_>,
    workload: &str,
    mode: &str,
    clients: u32,
    steady: bool,
) -> Row {
    let pid = t.proc.as_ref().map(Proc::pid).filter(|_| steady);
    let before = t.cpu();
    let server_before = tree_cpu_micros(server.pid());
    let client_before = children_cpu_micros();
    let unusable = t.unusable();
    let (result, snap) = run_watched(pid, t.port, clients, bench.timeout, || match unusable {
        Some(e) => Err(e),
        None => bench.run(),
    });
    let client_after = children_cpu_micros();
    let after = t.cpu();
    let user_after = t.cpu_user();
    let server_after = tree_cpu_micros(server.pid());
    let result = match (result, t.unusable()) {
        (Ok(_), Some(e)) => Err(format!("{e} during the run")),
        (r, _) => r,
    };
    let (cpu, steady) = proxy_cpu_per_txn(snap, before, after, &result);
    // The user-mode part over the same steady window.
    let user = match (snap, user_after, &result) {
        (Some((_, user0, at)), Some(u), Ok(r)) => r
            .transactions_after(at)
            .filter(|&n| n > 0.0)
            .map(|n| u.saturating_sub(user0) as f64 / n),
        _ => None,
    };
    Row {
        workload: workload.to_string(),
        mode: mode.to_string(),
        clients,
        target: t.name,
        cpu_us_per_txn: cpu,
        user_us_per_txn: user,
        cpu_steady: steady,
        server_us_per_txn: per_txn(server_before, server_after, &result),
        client_us_per_txn: per_txn(client_before, client_after, &result),
        result,
    }
}

fn progress(n: usize, total: usize, row: &Row) {
    match &row.result {
        Ok(r) => eprintln!(
            "[{n}/{total}] {:<14} {:<8} {:>4} clients {:<9} {:>8.0} tps  avg {:>7.3} ms  p99 {:>8} ms  cpu/txn {:>8}  failed {}{}",
            row.workload,
            row.mode,
            row.clients,
            row.target,
            r.tps,
            r.avg_ms,
            r.p99_ms.map(|p| format!("{p:.3}")).unwrap_or("-".into()),
            row.cpu_us_per_txn
                .map(|c| match row.user_us_per_txn {
                    Some(u) => format!("{c:.1} us ({u:.1} user)"),
                    None => format!("{c:.1} us"),
                })
                .unwrap_or("-".into()),
            r.failed,
            if r.aborted_clients > 0 {
                format!(
                    "  ABORTED CLIENTS {}: {}",
                    r.aborted_clients,
                    r.first_error.as_deref().unwrap_or("")
                )
            } else {
                String::new()
            }
        ),
        Err(e) => eprintln!(
            "[{n}/{total}] {:<14} {:<8} {:>4} clients {:<9} FAILED: {e}",
            row.workload, row.mode, row.clients, row.target
        ),
    }
}

#[cfg(test)]
mod tests;
