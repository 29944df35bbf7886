//! PostgreSQL read scaling with replicas discovered at runtime: a PostgreSQL 15 primary and
//! three streaming standbys, every PostgreSQL process of each server capped with a cgroup v1
//! CPU quota (as if each server ran on its own small host), sluice (the release binary) in
//! front with only the primary in its file and a `[[discovery]]` command that prints a file
//! this program writes. pgbench select-only runs through sluice with the file empty (the
//! primary alone serves reads), then after one, two and three standby addresses were written
//! into it and sluice's monitor placed each of them in the reader hostgroup.
//!
//! With roles from the monitor, the primary stops serving reads once a standby does: the
//! servers serving reads are the primary alone, then one, two and three standbys. Each
//! server's own `pg_stat_database` (`xact_commit`) delta shows where the transactions went;
//! sluice's and pgbench's CPU, the servers' CPU and throttling and the machine's idle share
//! show that the capped servers, not the client or the proxy, are the bottleneck.
//!
//! The postmaster goes into its cgroup before any client connects, so every backend it forks
//! later inherits the cap; the processes it already started (checkpointer, WAL writer,
//! startup, WAL receiver…) are added one by one. sluice, pgbench and this program run in a
//! cgroup without a quota and with a high `cpu.shares` (`--bench-shares`, 0: off), the servers'
//! cgroups get a high `cpu.shares` too (`--db-shares`), so that both get their CPU when other
//! processes keep the machine busy.
//!
//! Needs root (to write /sys/fs/cgroup/cpu), postgresql-15 and postgresql-client-15, and
//! target/release/sluice (`SLUICE_BIN` to use another).
//!
//! Usage: pgreadscale [--db-cpu F] [--db-shares N] [--bench-shares N] [--threads N]
//! [--time SECS] [--warmup SECS] [--scale N] [--balance weighted|least_outstanding]
//! (`--balance`: a `[[hostgroups]]` entry for `reader`; without it, sluice's default)
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sluice_bench::cgroup::{children_cpu_micros, machine_jiffies, CpuCap, CpuStat};
use sluice_bench::hist::Histogram;
use sluice_bench::pg::{parse_pgbench, pg_bin_dir, process_tree, run_bounded, tree_cpu_micros};
use sluice_bench::pg::{PgbenchResult, Proc};
use sluice_bench::pgmanaged::http_get;
use sluice_bench::{cpu_micros, machine, sluice_bin, wait_port};
use sluice_testkit::{free_port, PgTopology};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const STANDBYS: usize = 3;
const CG_PREFIX: &str = "sluice-pgreadscale-";
/// CpuCap's CFS period, µs (printed with the options).
const PERIOD_US: u64 = 100_000;
/// Longest a discovered standby may take to be ONLINE in the reader hostgroup.
const PLACE_LIMIT: Duration = Duration::from_secs(60);
/// A PostgreSQL 15 backend flushes its statistics at most once a second and, once idle,
/// after 10 s: waiting this long after a run puts all of its transactions in the counters.
const STATS_SETTLE: Duration = Duration::from_secs(11);

struct Opts {
    db_cpu: f64,
    db_shares: u64,
    bench_shares: u64,
    threads: u32,
    time: u32,
    warmup: u32,
    scale: u32,
    /// `[[hostgroups]] balance` for `reader`; none: sluice's default (`weighted`).
    balance: Option<String>,
}

fn main() {
    let mut o = Opts {
        db_cpu: 0.15,
        db_shares: 8192,
        bench_shares: 8192,
        threads: 32,
        time: 20,
        warmup: 3,
        scale: 10,
        balance: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args
            .next()
            .unwrap_or_else(|| usage(&format!("{a} needs a value")));
        let num = |v: &str| -> f64 {
            v.parse()
                .unwrap_or_else(|_| usage(&format!("{a}: not a number: {v}")))
        };
        match a.as_str() {
            "--db-cpu" => o.db_cpu = num(&v),
            "--db-shares" => o.db_shares = num(&v) as u64,
            "--bench-shares" => o.bench_shares = num(&v) as u64,
            "--threads" => o.threads = num(&v) as u32,
            "--time" => o.time = num(&v) as u32,
            "--warmup" => o.warmup = num(&v) as u32,
            "--scale" => o.scale = num(&v) as u32,
            "--balance" => match v.as_str() {
                "weighted" | "least_outstanding" => o.balance = Some(v),
                _ => usage("--balance is weighted or least_outstanding"),
            },
            other => usage(&format!("unknown argument {other}")),
        }
    }
    if !(0.01..=4.0).contains(&o.db_cpu) {
        usage("--db-cpu must be between 0.01 and 4 (CPUs per server)");
    }
    if o.threads == 0 || o.time == 0 || o.scale == 0 || o.threads > 150 {
        usage("--threads (1-150), --time and --scale must be positive");
    }
    if let Err(e) = run(&o) {
        eprintln!("pgreadscale: {e}");
        std::process::exit(1);
    }
}

fn usage(why: &str) -> ! {
    eprintln!(
        "pgreadscale: {why}\nusage: pgreadscale [--db-cpu F] [--db-shares N] [--bench-shares N] [--threads N] [--time SECS] [--warmup SECS] [--scale N] [--balance weighted|least_outstanding]"
    );
    std::process::exit(2);
}

// ---------------------------------------------------------------------------------------------
// Servers

/// Runs `sql` with psql as `postgres` on `port` (bounded): its unaligned, tuples-only output.
fn psql(port: u16, sql: &str) -> Result<String, String> {
    let mut cmd = Command::new(pg_bin_dir()?.join("psql"));
    cmd.args([
        "-h",
        "127.0.0.1",
        "-U",
        "postgres",
        "-d",
        "postgres",
        "-XAtq",
    ])
    .arg("-p")
    .arg(port.to_string())
    .arg("-c")
    .arg(sql)
    .env("PGCONNECT_TIMEOUT", "10");
    let (status, out, err) = run_bounded(cmd, Duration::from_secs(120))?;
    if !status.success() {
        return Err(format!("psql on port {port}: {sql:?}: {err}"));
    }
    Ok(out.trim().to_string())
}

/// Waits (at most 120 s) until every standby replayed the primary's current WAL position.
fn wait_replayed(topo: &PgTopology) -> Result<(), String> {
    let lsn = psql(topo.primary().port, "SELECT pg_current_wal_lsn()")?;
    let q = format!("SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn");
    let deadline = Instant::now() + Duration::from_secs(120);
    for r in topo.replicas() {
        while psql(r.port, &q)? != "t" {
            if Instant::now() > deadline {
                return Err(format!(
                    "standby {} did not replay {lsn} in 120 s",
                    r.addr()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Ok(())
}

/// Transactions committed on a server, all databases (`pg_stat_database`).
fn commits(port: u16) -> Result<u64, String> {
    let v = psql(port, "SELECT sum(xact_commit) FROM pg_stat_database")?;
    v.parse()
        .map_err(|_| format!("xact_commit on port {port}: {v:?}"))
}

/// Puts the postmaster `pid` and every process it already started into `cap`; returns how
/// many processes were moved. A process that ends meanwhile is skipped.
fn cap_server(cap: &CpuCap, pid: u32) -> Result<usize, String> {
    cap.add(pid)?;
    let mut moved = 1;
    for p in process_tree(pid).into_iter().skip(1) {
        if cap.add(p).is_ok() {
            moved += 1;
        } else if Path::new(&format!("/proc/{p}")).exists() {
            return Err(format!("cannot move process {p} of postmaster {pid}"));
        }
    }
    Ok(moved)
}

/// Processes of the server with postmaster `pid` outside `cap` (0 if all are capped).
fn uncapped(cap: &CpuCap, pid: u32) -> usize {
    let tasks: std::collections::HashSet<u32> = cap.tasks().into_iter().collect();
    process_tree(pid)
        .into_iter()
        .filter(|p| !tasks.contains(p) && Path::new(&format!("/proc/{p}")).exists())
        .count()
}

// ---------------------------------------------------------------------------------------------
// sluice and its admin API

/// The objects of `GET /api/servers` (flat JSON objects) for `address`.
fn server_entries(admin: u16, address: &str) -> Result<Vec<String>, String> {
    let body = http_get(admin, "/api/servers")?;
    let addr = format!("\"address\":\"{address}\"");
    Ok(body
        .split("},{")
        .filter(|o| o.contains(&addr))
        .map(str::to_string)
        .collect())
}

/// A numeric field of a flat JSON object.
fn num_field(obj: &str, name: &str) -> u64 {
    obj.split(&format!("\"{name}\":"))
        .nth(1)
        .and_then(|r| r.split([',', '}']).next()?.trim().parse().ok())
        .unwrap_or(0)
}

/// Waits (at most [`PLACE_LIMIT`]) until sluice shows `address` with `role` in `hostgroup`,
/// ONLINE; how long that took.
fn wait_placed(admin: u16, address: &str, role: &str, hostgroup: &str) -> Result<Duration, String> {
    let start = Instant::now();
    let want = [
        format!("\"role\":\"{role}\""),
        format!("\"hostgroup\":\"{hostgroup}\""),
        "\"state\":\"ONLINE\"".to_string(),
    ];
    let mut last = Vec::new();
    while start.elapsed() < PLACE_LIMIT {
        last = server_entries(admin, address)?;
        if last.iter().any(|o| want.iter().all(|w| o.contains(w))) {
            return Ok(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!(
        "sluice did not show {address} as an ONLINE {role} in hostgroup {hostgroup} within {PLACE_LIMIT:?}; last seen: {last:?}"
    ))
}

/// sluice's own count of statements sent to `address` (all its entries).
fn sluice_queries(admin: u16, address: &str) -> u64 {
    server_entries(admin, address)
        .unwrap_or_default()
        .iter()
        .map(|o| num_field(o, "queries"))
        .sum()
}

/// sluice running, with what is needed to explain a failure.
struct Sluice {
    proc: Proc,
    admin: u16,
    log: PathBuf,
}

impl Sluice {
    fn start(config: &str, port: u16, admin: u16) -> Result<Sluice, String> {
        let dir = std::env::temp_dir();
        let path = dir.join(format!("sluice-pgreadscale-{}.toml", std::process::id()));
        std::fs::write(&path, config).map_err(|e| e.to_string())?;
        let log = dir.join(format!("sluice-pgreadscale-{}.log", std::process::id()));
        let out = std::fs::File::create(&log).map_err(|e| e.to_string())?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = Command::new(sluice_bin());
        cmd.arg("--config").arg(&path).stdout(out).stderr(err);
        let mut s = Sluice {
            proc: Proc::spawn("sluice", cmd, libc::SIGTERM)?,
            admin,
            log,
        };
        if let Err(e) = wait_port(port).and_then(|()| wait_port(admin)) {
            let why = s.proc.exited().unwrap_or_default();
            return Err(format!("{e} {why}\n{}", s.diagnosis()));
        }
        Ok(s)
    }

    /// The end of sluice's log and its events: what to show when something went wrong.
    fn diagnosis(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        format!(
            "--- sluice log {} (last 40 lines) ---\n{}\n--- GET /api/events ---\n{}\n--- GET /api/servers ---\n{}",
            self.log.display(),
            lines[lines.len().saturating_sub(40)..].join("\n"),
            http_get(self.admin, "/api/events").unwrap_or_else(|e| e),
            http_get(self.admin, "/api/servers").unwrap_or_else(|e| e)
        )
    }
}

/// The file the `[[discovery]]` command prints, removed on drop.
struct DiscoveryFile(PathBuf);

impl DiscoveryFile {
    /// Replaces its contents at once (a rename), so a look never reads half a file.
    fn list(&self, addresses: &[String]) -> Result<(), String> {
        let tmp = self.0.with_extension("tmp");
        let mut text = addresses.join("\n");
        text.push('\n');
        std::fs::write(&tmp, text).map_err(|e| format!("{}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, &self.0).map_err(|e| format!("{}: {e}", self.0.display()))
    }
}

impl Drop for DiscoveryFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

// ---------------------------------------------------------------------------------------------
// pgbench and measurements

/// One pgbench run's report, its 95th percentile from the transaction log, and the lowest and
/// highest per-second rate of its `-P 1` lines.
struct Bench {
    r: PgbenchResult,
    p95_ms: f64,
    tps_range: (f64, f64),
    /// CPU time pgbench used, µs.
    cpu_us: u64,
}

fn pgbench(port: u16, o: &Opts, secs: u32, log_dir: Option<&Path>) -> Result<Bench, String> {
    let mut cmd = Command::new(pg_bin_dir()?.join("pgbench"));
    cmd.env("PGPASSWORD", "app")
        .env("PGCONNECT_TIMEOUT", "30")
        .args(["-h", "127.0.0.1", "-U", "app", "-S", "-n", "-M", "simple"])
        .arg("-p")
        .arg(port.to_string())
        .arg(format!("-c{}", o.threads))
        .args(["-j", "2", "-P", "1"])
        .arg(format!("-T{secs}"));
    let prefix = format!("pgreadscale-{}", std::process::id());
    if let Some(dir) = log_dir {
        cmd.arg("--log")
            .arg(format!("--log-prefix={}", dir.join(&prefix).display()));
    }
    cmd.arg("postgres");
    let before = children_cpu_micros();
    let (status, out, err) = run_bounded(cmd, Duration::from_secs(u64::from(secs) + 120))?;
    let cpu_us = children_cpu_micros().saturating_sub(before);
    let r = parse_pgbench(&out, &err).ok_or_else(|| {
        let first = err.lines().find(|l| l.contains("error")).unwrap_or("");
        format!("pgbench -T {secs} through sluice failed ({status}): {first}")
    })?;
    let per_second: Vec<f64> = err
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("progress: ")?;
            rest.split(", ").nth(1)?.strip_suffix(" tps")?.parse().ok()
        })
        .collect();
    let tps_range = per_second
        .iter()
        .fold((f64::MAX, 0.0f64), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let mut p95_ms = 0.0;
    if let Some(dir) = log_dir {
        let (h, _) = sluice_bench::pg::pgbench_log(dir, &prefix);
        let h: Histogram = h;
        p95_ms = h.quantile(0.95) as f64 / 1000.0;
    }
    Ok(Bench {
        r,
        p95_ms,
        tps_range: if per_second.is_empty() {
            (0.0, 0.0)
        } else {
            tps_range
        },
        cpu_us,
    })
}

/// What is sampled around the measured run (CPU and throttling right around pgbench).
struct Sample {
    at: Instant,
    sluice_us: u64,
    server_us: Vec<u64>,
    throttle: Vec<CpuStat>,
    jiffies: (u64, u64),
}

fn sample(pids: &[u32], sluice_pid: u32, caps: &[CpuCap]) -> Sample {
    Sample {
        at: Instant::now(),
        sluice_us: cpu_micros(sluice_pid).unwrap_or(0),
        server_us: pids
            .iter()
            .map(|&p| tree_cpu_micros(p).unwrap_or(0))
            .collect(),
        throttle: caps.iter().map(|c| c.stat().unwrap_or_default()).collect(),
        jiffies: machine_jiffies(),
    }
}

/// One step's result.
struct Step {
    standbys: usize,
    b: Bench,
    /// `xact_commit` delta per server (all four).
    commits: Vec<u64>,
    /// sluice's statements per server.
    routed: Vec<u64>,
    sluice_cpus: f64,
    pgbench_cpus: f64,
    server_cpus: Vec<f64>,
    throttled: Vec<f64>,
    idle: f64,
    placed_ms: u128,
}

impl Step {
    fn serving(&self) -> usize {
        self.standbys.max(1)
    }
}

// ---------------------------------------------------------------------------------------------

fn run(o: &Opts) -> Result<(), String> {
    println!("# machine: {}", machine());
    println!(
        "# options: --db-cpu {} --db-shares {} --bench-shares {} --threads {} --time {} --warmup {} --scale {} --balance {}",
        o.db_cpu,
        o.db_shares,
        o.bench_shares,
        o.threads,
        o.time,
        o.warmup,
        o.scale,
        o.balance.as_deref().unwrap_or("(default)")
    );
    println!(
        "# every PostgreSQL process of each server (postmaster and all its children) in one cgroup v1 cpu cgroup: cfs_period_us={PERIOD_US}, cfs_quota_us={} ({} CPU), cpu.shares={}; sluice and pgbench uncapped",
        ((o.db_cpu * PERIOD_US as f64).round() as u64).max(1000),
        o.db_cpu,
        if o.db_shares > 0 { o.db_shares.to_string() } else { "1024 (default)".into() }
    );
    println!(
        "# pgbench -S -n -M simple -c {} -j 2 -T {} -P 1 through sluice's PostgreSQL listener (read/write splitting); sluice lists only the primary, standbys come from a [[discovery]] command",
        o.threads, o.time
    );
    CpuCap::remove_stale(CG_PREFIX);
    let me = std::process::id();
    // This program, and so sluice and pgbench, in a cgroup without a quota and with a high
    // weight. Declared first: dropped last, after the servers.
    let _bench_cgroup = if o.bench_shares > 0 {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let cap = CpuCap::new(&format!("{CG_PREFIX}bench-{me}"), cpus)?;
        cap.set_shares(o.bench_shares)?;
        cap.add(me)?;
        println!(
            "# sluice, pgbench and this program in a cgroup with cpu.shares={} and no quota (the machine's {cpus} CPUs)",
            o.bench_shares
        );
        Some(cap)
    } else {
        None
    };
    let pgbench_bin = pg_bin_dir()?.join("pgbench");
    if !sluice_bin().is_file() {
        return Err(format!(
            "no {} (cargo build --release -p sluice)",
            sluice_bin().display()
        ));
    }

    eprintln!("starting a PostgreSQL 15 primary and {STANDBYS} streaming standbys");
    let topo = PgTopology::start(STANDBYS).map_err(|e| format!("PostgreSQL: {e}"))?;
    let primary = topo.primary().port;
    psql(primary, "CREATE ROLE app LOGIN SUPERUSER PASSWORD 'app'")?;
    psql(
        primary,
        "CREATE ROLE monitor LOGIN PASSWORD 'monitor'; GRANT pg_monitor TO monitor",
    )?;
    for s in &topo.servers {
        s.require_passwords(&[]).map_err(|e| e.to_string())?;
    }
    eprintln!("pgbench -i -s {} on the primary", o.scale);
    let mut init = Command::new(&pgbench_bin);
    init.args(["-i", "-q", "-h", "127.0.0.1", "-U", "postgres"])
        .arg(format!("-s{}", o.scale))
        .arg("-p")
        .arg(primary.to_string())
        .arg("postgres");
    let (status, _, err) = run_bounded(init, Duration::from_secs(600))?;
    if !status.success() {
        return Err(format!("pgbench -i: {err}"));
    }
    wait_replayed(&topo)?;
    // Every server reads the whole data set once: each step starts with warm caches.
    for s in &topo.servers {
        psql(
            s.port,
            "SELECT count(*), sum(abalance) FROM pgbench_accounts",
        )?;
    }

    // Capped before sluice starts: every backend a client opens inherits the cap.
    let pids: Vec<u32> = topo
        .servers
        .iter()
        .map(|s| s.pid().ok_or("a server is not running"))
        .collect::<Result<_, _>>()?;
    let mut caps = Vec::new();
    for (i, &pid) in pids.iter().enumerate() {
        let cap = CpuCap::new(&format!("{CG_PREFIX}{i}-{me}"), o.db_cpu)?;
        if o.db_shares > 0 {
            cap.set_shares(o.db_shares)?;
        }
        let n = cap_server(&cap, pid)?;
        eprintln!(
            "server {i}: postmaster {pid} and {} processes capped",
            n - 1
        );
        caps.push(cap);
    }

    let port = free_port().map_err(|e| e.to_string())?;
    let admin = free_port().map_err(|e| e.to_string())?;
    let file = DiscoveryFile(std::env::temp_dir().join(format!("sluice-pgreadscale-{me}.list")));
    file.list(&[])?;
    let config = format!(
        "[[listeners]]\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"postgres\"\n\n\
         [admin]\nlisten = \"127.0.0.1:{admin}\"\n\n\
         [[users]]\nname = \"app\"\npassword = \"app\"\n\n\
         [[servers]]\naddress = \"{}\"\nprotocol = \"postgres\"\n\n\
         [monitor]\nuser = \"monitor\"\npassword = \"monitor\"\ninterval = \"200ms\"\n\n\
         [[discovery]]\nprotocol = \"postgres\"\ncommand = \"cat {}\"\ninterval = \"500ms\"\n\n\
         [log]\nlevel = \"warn\"\n",
        topo.primary().addr(),
        file.0.display()
    );
    let config = match &o.balance {
        Some(b) => format!("{config}\n[[hostgroups]]\nname = \"reader\"\nbalance = \"{b}\"\n"),
        None => config,
    };
    let sluice = Sluice::start(&config, port, admin)?;
    let measured = measure(o, &topo, &pids, &caps, &sluice, &file, port);
    if measured.is_err() {
        eprintln!("{}", sluice.diagnosis());
    }
    let steps = measured?;
    for (i, (cap, &pid)) in caps.iter().zip(&pids).enumerate() {
        let n = uncapped(cap, pid);
        if n > 0 {
            println!("warning: server {i}: {n} PostgreSQL processes were outside its cgroup");
        }
    }
    drop(sluice);
    drop(caps);
    report(&steps);
    Ok(())
}

/// The four steps: 0, 1, 2, 3 standbys in the discovery file.
fn measure(
    o: &Opts,
    topo: &PgTopology,
    pids: &[u32],
    caps: &[CpuCap],
    sluice: &Sluice,
    file: &DiscoveryFile,
    port: u16,
) -> Result<Vec<Step>, String> {
    let admin = sluice.admin;
    let addrs: Vec<String> = topo.servers.iter().map(|s| s.addr()).collect();
    wait_placed(admin, &addrs[0], "primary", "writer")?;
    let log_dir = std::env::temp_dir();
    let mut steps = Vec::new();
    for k in 0..=STANDBYS {
        file.list(&addrs[1..=k])?;
        let mut placed = Duration::ZERO;
        for a in &addrs[1..=k] {
            placed = placed.max(wait_placed(admin, a, "replica", "reader")?);
        }
        if k > 0 {
            eprintln!(
                "{k} standby(s) in the discovery file; all ONLINE in reader after {} ms",
                placed.as_millis()
            );
        }
        if o.warmup > 0 {
            pgbench(port, o, o.warmup, None)?;
        }
        std::thread::sleep(STATS_SETTLE);
        let commits_before: Vec<u64> = topo
            .servers
            .iter()
            .map(|s| commits(s.port))
            .collect::<Result<_, _>>()?;
        let routed_before: Vec<u64> = addrs.iter().map(|a| sluice_queries(admin, a)).collect();
        let before = sample(pids, sluice.proc.pid(), caps);
        let b = pgbench(port, o, o.time, Some(&log_dir))?;
        let after = sample(pids, sluice.proc.pid(), caps);
        let routed_after: Vec<u64> = addrs.iter().map(|a| sluice_queries(admin, a)).collect();
        std::thread::sleep(STATS_SETTLE);
        let commits_after: Vec<u64> = topo
            .servers
            .iter()
            .map(|s| commits(s.port))
            .collect::<Result<_, _>>()?;
        let secs = after.at.duration_since(before.at).as_secs_f64().max(1e-3);
        let cpus = |a: u64, b: u64| a.saturating_sub(b) as f64 / 1e6 / secs;
        let busy = after.jiffies.0.saturating_sub(before.jiffies.0) as f64;
        let total = after.jiffies.1.saturating_sub(before.jiffies.1).max(1) as f64;
        let delta = |a: &[u64], b: &[u64]| -> Vec<u64> {
            a.iter().zip(b).map(|(a, b)| a.saturating_sub(*b)).collect()
        };
        let step = Step {
            standbys: k,
            commits: delta(&commits_after, &commits_before),
            routed: delta(&routed_after, &routed_before),
            sluice_cpus: cpus(after.sluice_us, before.sluice_us),
            pgbench_cpus: b.cpu_us as f64 / 1e6 / secs,
            server_cpus: after
                .server_us
                .iter()
                .zip(&before.server_us)
                .map(|(a, b)| cpus(*a, *b))
                .collect(),
            throttled: after
                .throttle
                .iter()
                .zip(&before.throttle)
                .map(|(a, b)| {
                    let periods = a.nr_periods.saturating_sub(b.nr_periods);
                    a.nr_throttled.saturating_sub(b.nr_throttled) as f64 / periods.max(1) as f64
                })
                .collect(),
            idle: 1.0 - busy / total,
            placed_ms: placed.as_millis(),
            b,
        };
        eprintln!(
            "{} server(s) serving reads: {:.0} tps, avg {:.1} ms, p95 {:.1} ms, {} failed, {} clients aborted; sluice {:.2} CPU, pgbench {:.2} CPU, idle {:.0}%",
            step.serving(),
            step.b.r.tps,
            step.b.r.avg_ms,
            step.b.p95_ms,
            step.b.r.failed,
            step.b.r.aborted_clients,
            step.sluice_cpus,
            step.pgbench_cpus,
            step.idle * 100.0
        );
        if step.b.r.failed > 0 || step.b.r.aborted_clients > 0 {
            eprintln!(
                "pgbench reported errors: {:?}\n{}",
                step.b.r.first_error,
                sluice.diagnosis()
            );
        }
        steps.push(step);
    }
    Ok(steps)
}

fn report(steps: &[Step]) {
    let names = ["primary", "standby 1", "standby 2", "standby 3"];
    let base = steps[0].b.r.tps.max(1e-9);
    let share = |v: &[u64]| -> Vec<String> {
        let total = v.iter().sum::<u64>().max(1) as f64;
        v.iter()
            .enumerate()
            .map(|(i, &x)| format!("{} {:.0}%", names[i], x as f64 * 100.0 / total))
            .collect()
    };
    println!(
        "\n| servers serving reads | standbys discovered | tps | avg ms | p95 ms | per-second tps (min-max) | vs primary alone | share of transactions (xact_commit) |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    let mut warnings = Vec::new();
    for s in steps {
        let serving: Vec<usize> = if s.standbys == 0 {
            vec![0]
        } else {
            (1..=s.standbys).collect()
        };
        let total = s.commits.iter().sum::<u64>().max(1) as f64;
        let fair = 1.0 / serving.len() as f64;
        for (i, &c) in s.commits.iter().enumerate() {
            let part = c as f64 / total;
            if serving.contains(&i) && part < fair * 0.5 {
                warnings.push(format!(
                    "{} standby(s): {} served only {:.1}% of the transactions (even share {:.1}%)",
                    s.standbys,
                    names[i],
                    part * 100.0,
                    fair * 100.0
                ));
            }
            if !serving.contains(&i) && part > 0.02 {
                warnings.push(format!(
                    "{} standby(s): {} does not serve reads but committed {:.1}% of the transactions",
                    s.standbys,
                    names[i],
                    part * 100.0
                ));
            }
        }
        println!(
            "| {} | {} | {:.0} | {:.1} | {:.1} | {:.0}-{:.0} | {:.2}x | {} |",
            s.serving(),
            s.standbys,
            s.b.r.tps,
            s.b.r.avg_ms,
            s.b.p95_ms,
            s.b.tps_range.0,
            s.b.tps_range.1,
            s.b.r.tps / base,
            share(&s.commits).join(", ")
        );
    }
    println!(
        "\nWhere the CPU went (CPUs used over each run; PostgreSQL: the postmaster and all its processes; throttled: share of a server's active CFS periods in which it hit its quota):\n"
    );
    println!(
        "| servers serving reads | sluice CPU | pgbench CPU | PostgreSQL CPU (primary, standby 1, 2, 3) | throttled | transactions per PostgreSQL CPU-second | machine idle | pgbench failed / aborted clients |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for s in steps {
        let list = |v: &[f64], pct: bool| {
            v.iter()
                .map(|x| {
                    if pct {
                        format!("{:.0}%", x * 100.0)
                    } else {
                        format!("{x:.2}")
                    }
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        println!(
            "| {} | {:.2} | {:.2} | {} | {} | {:.0} | {:.0}% | {} / {} |",
            s.serving(),
            s.sluice_cpus,
            s.pgbench_cpus,
            list(&s.server_cpus, false),
            list(&s.throttled, true),
            s.b.r.tps / s.server_cpus.iter().sum::<f64>().max(1e-9),
            s.idle * 100.0,
            s.b.r.failed,
            s.b.r.aborted_clients
        );
    }
    println!("\nsluice's own count of statements per server (GET /api/servers \"queries\"), and how long the monitor took to put the listed standbys ONLINE in reader:\n");
    for s in steps {
        println!(
            "- {} standby(s): {}; placed in {} ms",
            s.standbys,
            share(&s.routed).join(", "),
            s.placed_ms
        );
    }
    println!();
    if let Some(s3) = steps.iter().find(|s| s.standbys == 3) {
        let r3 = s3.b.r.tps / base;
        println!(
            "3 servers serving reads vs 1: {r3:.2}x ({} the 2.7x goal)",
            if r3 >= 2.7 { "meets" } else { "misses" }
        );
    }
    for w in &warnings {
        println!("warning: {w}");
    }
}
