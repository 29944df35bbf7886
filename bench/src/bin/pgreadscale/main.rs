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

mod measure;
mod report;
mod servers;
mod sluice;
use measure::*;
use report::*;
use servers::*;
use sluice::*;

const STANDBYS: usize = 3;
const CG_PREFIX: &str = "sluice-pgreadscale-";
/// CpuCap's CFS period, µs (printed with the options).
const PERIOD_US: u64 = 100_000;

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
