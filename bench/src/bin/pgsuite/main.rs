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

mod connect_runs;
mod cpu_rounds;
mod measure;
mod opts;
mod phases;
mod programs;
mod proxies;
mod rate;
mod report;
mod scale;
mod server;
mod targets;
use connect_runs::*;
use cpu_rounds::*;
use measure::*;
use opts::*;
use phases::*;
use programs::*;
use proxies::*;
use report::*;
use scale::*;
use server::*;
use targets::*;

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

/// The whole suite: the server and the targets, every phase in turn, then the report.
fn run(o: &Opts) -> Result<(), String> {
    let nofile = rlimit::increase_nofile_limit(u64::MAX).map_err(|e| e.to_string())?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let tmp = TempDir::new()?;
    stop_on_signal(&rt, &tmp.0);

    print_header(o, nofile);
    let pgbench_bin = pg_bin_dir()?.join("pgbench");
    print_method(&pgbench_bin);
    let programs = Programs::find(o)?;
    programs.print(o)?;

    let server = start_server(o, &tmp.0, programs.floor.is_some())?;
    load_tables(o, &server, &pgbench_bin)?;
    let mut targets = start_targets(o, &rt, &tmp.0, &server, &programs)?;

    let runner = Runner::new(o, &server, &pgbench_bin, &tmp.0)?;
    runner.warm_up()?;
    let rows = runner.grid(&mut targets)?;
    let cpu = cpu_compared(&runner.cpu_rounds(&mut targets, &rows)?);
    let equal = runner.equal_rate(&mut targets, &rows)?;
    let connect = runner.connect_rounds(&mut targets);

    // The other proxies' pooled connections would count in pg_stat_activity: stop them.
    let names: Vec<&'static str> = targets.iter().map(|t| t.name).collect();
    drop(targets);

    let pgbouncer = programs.pgbouncer.as_ref();
    let many = many_clients_runs(o, &rt, &tmp.0, &server, &pgbench_bin, pgbouncer);
    let idle = idle_runs(o, &rt, &tmp.0, &server, pgbouncer);

    let results = Results {
        rows,
        cpu,
        equal,
        connect,
        many,
        idle,
        names,
    };
    results.print(o)?;
    drop(server);
    drop(tmp);
    rt.shutdown_timeout(Duration::from_secs(1));
    Ok(())
}

/// On Ctrl-C or SIGTERM: stops every server and proxy, removes `dir`, exits with 130.
fn stop_on_signal(rt: &tokio::runtime::Runtime, dir: &Path) {
    let dir = dir.to_path_buf();
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

/// The report's first lines: the machine, the options, the open files limit.
fn print_header(o: &Opts, nofile: u64) {
    println!("# machine: {}", machine());
    println!("# options: {}", o.describe());
    println!("# open files limit: {nofile}");
}

/// The report's lines on how pgbench runs and how a proxy's CPU per transaction is measured.
fn print_method(pgbench_bin: &Path) {
    println!(
        "# pgbench: {} (-n, -j min(clients, 2) but -j clients for -C, -T --time + 30 ms per client for its logins (its tps leaves them out); avg latency is pgbench's, p99 from --log --sampling-rate={SAMPLING_RATE}; TPC-B runs start after VACUUM of branches and tellers and TRUNCATE of history)",
        banner(pgbench_bin, "--version")
    );
    println!("# proxy CPU µs/txn: utime + stime of the proxy's process tree (/proc/PID/stat, reaped children included: all of Pgpool-II's processes) from the moment every pgbench client is connected (ESTABLISHED sockets on the proxy's port) to the end, over the transactions of that window (pgbench's count × the share of the sampled log after that moment); † = over the whole run, logins included");
}

/// What the phases measured, for the report.
struct Results {
    /// The grid's runs.
    rows: Vec<Row>,
    cpu: Vec<CpuCompared>,
    equal: Option<rate::EqualRate>,
    connect: ConnectRuns,
    many: Vec<ManyResult>,
    idle: Vec<(&'static str, Result<IdleResult, String>)>,
    /// The targets of the grid, for the charts.
    names: Vec<&'static str>,
}

impl Results {
    /// Prints the tables and the goals, and with `--plots` writes the charts.
    fn print(&self, o: &Opts) -> Result<(), String> {
        print_table(&self.rows);
        print_cpu_rounds(&self.cpu);
        if let Some(e) = &self.equal {
            e.print_rounds();
        }
        print_connect_table(&self.connect);
        print_many(o, &self.many);
        print_idle(o, &self.idle);
        print_goals(o, &self.cpu, &self.connect, &self.many, &self.idle);
        if let Some(e) = &self.equal {
            e.print_goal();
        }
        if let Some(dir) = &o.plots {
            write_plots(&self.rows, &self.names, o, dir)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
