//! Read scaling on one machine: every mariadbd is capped with a cgroup v1 CPU quota (as if
//! each ran on its own small host), then sysbench oltp_read_only runs through sluice with the
//! primary alone in the reader set, and again after each of three replicas is added at runtime
//! over the admin API. Each server's `Com_select` delta shows where the reads went; sluice's
//! and sysbench's CPU, the servers' CPU and throttling, and the machine's idle share show that
//! the capped servers, not the client or the proxy, are the bottleneck.
//!
//! sysbench connects to a `[[listeners]]` port pinned to the `reader` hostgroup, of which the
//! primary is a member from the start (it is also the only member of `writer`). A pinned
//! listener sends every statement there, `BEGIN`/`COMMIT` included: each sysbench transaction
//! runs on one server of the reader set, chosen per transaction.
//!
//! The machine's CPUs are shared by everything, so the cap must be small enough that at four
//! servers sluice and sysbench still have room: `--db-cpu 0.15` (CPU per server) by default.
//! Each server's cgroup also gets a high `cpu.shares` (`--db-shares`), so that it receives its
//! quota even when other processes keep the CPUs busy (as a host of its own would); sluice and
//! sysbench run in a cgroup without a quota and with a high weight (`--bench-shares`, 0: off)
//! for the same reason.
//!
//! Needs root (to write /sys/fs/cgroup/cpu), mariadb-server and sysbench.
//!
//! Usage: cargo run --release -p sluice-bench --bin readscale -- [--db-cpu F] [--db-shares N]
//! [--bench-shares N] [--threads N] [--time SECS] [--warmup SECS] [--tables N]
//! [--table-size ROWS] [--plots DIR]
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sluice_bench::cgroup::{children_cpu_micros, machine_jiffies, CpuCap, CpuStat};
use sluice_bench::plot::{Chart, Series};
use sluice_bench::*;
use sluice_testkit::{Topology, TopologyOptions};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

const REPLICAS: usize = 3;

struct Opts {
    db_cpu: f64,
    db_shares: u64,
    bench_shares: u64,
    threads: u32,
    time: u32,
    warmup: u32,
    tables: u32,
    table_size: u32,
    plots: PathBuf,
}

fn main() {
    let mut o = Opts {
        db_cpu: 0.15,
        db_shares: 8192,
        bench_shares: 8192,
        threads: 32,
        time: 20,
        warmup: 3,
        tables: 4,
        table_size: 20_000,
        plots: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/img"),
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
            "--tables" => o.tables = num(&v) as u32,
            "--table-size" => o.table_size = num(&v) as u32,
            "--plots" => o.plots = PathBuf::from(v),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    if !(0.01..=4.0).contains(&o.db_cpu) {
        usage("--db-cpu must be between 0.01 and 4 (CPUs per server)");
    }
    if o.threads == 0 || o.time == 0 {
        usage("--threads and --time must be positive");
    }
    if let Err(e) = run(&o) {
        eprintln!("readscale: {e}");
        std::process::exit(1);
    }
}

fn usage(why: &str) -> ! {
    eprintln!(
        "readscale: {why}\nusage: readscale [--db-cpu F] [--db-shares N] [--bench-shares N] [--threads N] [--time SECS] [--warmup SECS] [--tables N] [--table-size ROWS] [--plots DIR]"
    );
    std::process::exit(2);
}

// ---------------------------------------------------------------------------------------------
// cgroup v1 CPU caps: sluice_bench::cgroup::CpuCap (cfs_period_us = 100000, one cgroup per
// server, moved back and removed on drop, also on error and panic)

const CG_PREFIX: &str = "sluice-readscale-";
/// CpuCap's CFS period, µs (printed with the options).
const PERIOD_US: u64 = 100_000;

// ---------------------------------------------------------------------------------------------
// Measurements

fn com_selects(topo: &Topology) -> Result<Vec<u64>, String> {
    topo.servers
        .iter()
        .map(|s| status_counter(s, "Com_select"))
        .collect()
}

/// Everything sampled around one measured run.
struct Sample {
    at: Instant,
    selects: Vec<u64>,
    sluice_us: u64,
    children_us: u64,
    server_us: Vec<u64>,
    throttle: Vec<CpuStat>,
    jiffies: (u64, u64),
}

fn sample(topo: &Topology, sluice_pid: u32, caps: &[CpuCap]) -> Result<Sample, String> {
    Ok(Sample {
        selects: com_selects(topo)?,
        at: Instant::now(),
        sluice_us: cpu_micros(sluice_pid).unwrap_or(0),
        children_us: children_cpu_micros(),
        server_us: topo
            .servers
            .iter()
            .map(|s| s.pid().and_then(cpu_micros).unwrap_or(0))
            .collect(),
        throttle: caps.iter().map(|c| c.stat().unwrap_or_default()).collect(),
        jiffies: machine_jiffies(),
    })
}

/// One step's result.
struct Step {
    servers: usize,
    r: SysbenchResult,
    /// Com_select delta per server (all four, also those outside the reader set).
    selects: Vec<u64>,
    /// CPUs used over the run.
    sluice_cpus: f64,
    sysbench_cpus: f64,
    server_cpus: Vec<f64>,
    /// Share of the servers' active CFS periods in which they were throttled.
    throttled: Vec<f64>,
    idle: f64,
}

// ---------------------------------------------------------------------------------------------
// Admin API (plain HTTP/1.1 over std)

fn http(port: u16, method: &str, path: &str) -> Result<(u16, String), String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))
        .map_err(|e| format!("admin API on port {port}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut text = String::new();
    s.read_to_string(&mut text).map_err(|e| e.to_string())?;
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("{method} {path}: not an HTTP answer: {text:?}"))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

/// The entry of `GET /api/servers` for `address` in `hostgroup` (the JSON object's text).
fn server_entry(admin: u16, address: &str, hostgroup: &str) -> Result<Option<String>, String> {
    let (status, body) = http(admin, "GET", "/api/servers")?;
    if status != 200 {
        return Err(format!("GET /api/servers: {status} {body}"));
    }
    let addr = format!("\"address\":\"{address}\"");
    let hg = format!("\"hostgroup\":\"{hostgroup}\"");
    Ok(body
        .split("},{")
        .find(|o| o.contains(&addr) && o.contains(&hg))
        .map(str::to_string))
}

/// Waits until sluice reports `address` in `hostgroup` as ONLINE and reachable.
fn wait_usable(admin: u16, address: &str, hostgroup: &str) -> Result<Duration, String> {
    let start = Instant::now();
    let mut last = None;
    while start.elapsed() < Duration::from_secs(30) {
        last = server_entry(admin, address, hostgroup)?;
        if last
            .as_deref()
            .is_some_and(|o| o.contains("\"state\":\"ONLINE\"") && o.contains("\"reachable\":true"))
        {
            return Ok(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!(
        "sluice did not report {address} ONLINE in hostgroup {hostgroup} within 30 s: {last:?}"
    ))
}

// ---------------------------------------------------------------------------------------------

fn run(o: &Opts) -> Result<(), String> {
    println!("# machine: {}", machine());
    println!(
        "# options: --db-cpu {} --db-shares {} --bench-shares {} --threads {} --time {} --warmup {} --tables {} --table-size {}",
        o.db_cpu, o.db_shares, o.bench_shares, o.threads, o.time, o.warmup, o.tables, o.table_size
    );
    println!(
        "# each mariadbd in its own cgroup v1 cpu cgroup: cfs_period_us={PERIOD_US}, cfs_quota_us={} ({} CPU), cpu.shares={} (so it gets its quota when other processes compete: a host of its own); sysbench and sluice uncapped",
        ((o.db_cpu * PERIOD_US as f64).round() as u64).max(1000),
        o.db_cpu,
        if o.db_shares > 0 { o.db_shares.to_string() } else { "1024 (default)".into() }
    );
    println!(
        "# sysbench oltp_read_only (transactions kept, no --skip_trx) connects to a sluice listener pinned to the reader hostgroup: BEGIN, the 14 selects and COMMIT of each transaction run on one server of the reader set; the primary is in the reader set from the start"
    );
    CpuCap::remove_stale(CG_PREFIX);
    let me = std::process::id();
    // This program, and so sluice and sysbench (children inherit the cgroup), in a cgroup
    // without a quota and with a high weight: other processes on the machine do not starve
    // the client and the proxy. Declared before the topology: dropped after the servers.
    let _bench_cgroup = if o.bench_shares > 0 {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let cap = CpuCap::new(&format!("{CG_PREFIX}bench-{me}"), cpus)?;
        cap.set_shares(o.bench_shares)?;
        cap.add(me)?;
        println!(
            "# sluice, sysbench and this program in a cgroup with cpu.shares={} and no quota (the machine's {cpus} CPUs)",
            o.bench_shares
        );
        Some(cap)
    } else {
        None
    };

    eprintln!("starting a primary and {REPLICAS} replicas");
    let topo = Topology::start(TopologyOptions {
        replicas: REPLICAS,
        extra: vec!["--max-connections=1000".into()],
        buffer_pool: Some("128M"),
        ..Default::default()
    })
    .map_err(|e| e.to_string())?;
    topo.primary()
        .sql("CREATE DATABASE sbtest")
        .map_err(|e| e.to_string())?;
    let tables = [
        format!("--tables={}", o.tables),
        format!("--table-size={}", o.table_size),
    ];
    let mut prep = vec!["oltp_read_only".to_string()];
    prep.extend(tables.iter().cloned());
    prep.push("prepare".into());
    eprintln!(
        "sysbench prepare: {} tables x {} rows",
        o.tables, o.table_size
    );
    sysbench(topo.primary().port, "sbtest", &prep)?;
    topo.sync_replicas(Duration::from_secs(120))
        .map_err(|e| e.to_string())?;
    // Every server reads the whole data set once, so each step starts with a warm buffer pool.
    for s in &topo.servers {
        for t in 1..=o.tables {
            s.sql(&format!("SELECT COUNT(*), SUM(k) FROM sbtest.sbtest{t}"))
                .map_err(|e| e.to_string())?;
        }
    }

    let mut caps = Vec::new();
    for (i, s) in topo.servers.iter().enumerate() {
        let pid = s.pid().ok_or("a server is not running")?;
        let cap = CpuCap::new(&format!("{CG_PREFIX}{i}-{me}"), o.db_cpu)?;
        if o.db_shares > 0 {
            cap.set_shares(o.db_shares)?;
        }
        cap.add(pid)?;
        caps.push(cap);
    }

    let port = sluice_testkit::free_port().map_err(|e| e.to_string())?;
    let read_port = sluice_testkit::free_port().map_err(|e| e.to_string())?;
    let admin = sluice_testkit::free_port().map_err(|e| e.to_string())?;
    let config = format!(
        "[proxy]\nlisten = \"127.0.0.1:{port}\"\n\
         [[listeners]]\nlisten = \"127.0.0.1:{read_port}\"\nhostgroup = \"reader\"\n\
         [admin]\nlisten = \"127.0.0.1:{admin}\"\n\
         [monitor]\nuser = \"monitor\"\npassword = \"monitor\"\n\
         [[users]]\nname = \"app\"\npassword = \"app\"\n\
         [[servers]]\naddress = \"{p}\"\nhostgroup = \"writer\"\n\
         [[servers]]\naddress = \"{p}\"\nhostgroup = \"reader\"\n\
         [log]\nlevel = \"warn\"\n",
        p = topo.primary().addr()
    );
    let sluice = start_sluice(&config, read_port)?;
    let sluice_pid = sluice.0.id();
    wait_port(admin)?;
    wait_usable(admin, &topo.primary().addr(), "reader")?;

    let mut run_args = vec!["oltp_read_only".to_string()];
    run_args.extend(tables.iter().cloned());
    run_args.extend([
        format!("--threads={}", o.threads),
        "--report-interval=0".into(),
    ]);
    let with_time = |secs: u32| {
        let mut a = run_args.clone();
        a.extend([format!("--time={secs}"), "run".into()]);
        a
    };

    let names: Vec<String> = (0..topo.servers.len())
        .map(|i| {
            if i == 0 {
                "primary".to_string()
            } else {
                format!("replica {i}")
            }
        })
        .collect();
    let mut steps: Vec<Step> = Vec::new();
    for n in 1..=topo.servers.len() {
        if n > 1 {
            let r = &topo.servers[n - 1];
            let path = format!("/api/servers?address={}&hostgroup=reader", r.addr());
            let (status, body) = http(admin, "POST", &path)?;
            if status != 200 {
                return Err(format!("POST {path}: {status} {body}"));
            }
            let took = wait_usable(admin, &r.addr(), "reader")?;
            eprintln!(
                "added {} ({}) to the reader hostgroup; ONLINE after {} ms",
                names[n - 1],
                r.addr(),
                took.as_millis()
            );
        }
        if o.warmup > 0 {
            sysbench(read_port, "sbtest", &with_time(o.warmup))?;
        }
        let before = sample(&topo, sluice_pid, &caps)?;
        let r = sysbench(read_port, "sbtest", &with_time(o.time))?;
        let after = sample(&topo, sluice_pid, &caps)?;
        let secs = after.at.duration_since(before.at).as_secs_f64().max(1e-3);
        let cpus = |a: u64, b: u64| a.saturating_sub(b) as f64 / 1e6 / secs;
        let busy = after.jiffies.0.saturating_sub(before.jiffies.0) as f64;
        let total = after.jiffies.1.saturating_sub(before.jiffies.1).max(1) as f64;
        let step = Step {
            servers: n,
            selects: after
                .selects
                .iter()
                .zip(&before.selects)
                .map(|(a, b)| a.saturating_sub(*b))
                .collect(),
            sluice_cpus: cpus(after.sluice_us, before.sluice_us),
            sysbench_cpus: cpus(after.children_us, before.children_us),
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
                .map(|(a, b)| a.throttled_share_since(b))
                .collect(),
            idle: 1.0 - busy / total,
            r,
        };
        eprintln!(
            "{n} server(s): {:.0} qps, {:.1} tps, p95 {:.1} ms, {} errors; sluice {:.2} CPU, sysbench {:.2} CPU, idle {:.0}%",
            step.r.qps,
            step.r.tps,
            step.r.p95_ms,
            step.r.errors,
            step.sluice_cpus,
            step.sysbench_cpus,
            step.idle * 100.0
        );
        steps.push(step);
    }
    drop(sluice);
    drop(caps);

    // Results.
    let base = steps[0].r.qps.max(1e-9);
    println!("\n| servers | qps | tps | p95 ms | vs 1 server | per-server share of selects |");
    println!("| --- | --- | --- | --- | --- | --- |");
    let mut warnings = Vec::new();
    for s in &steps {
        let total: u64 = s.selects.iter().sum::<u64>().max(1);
        let share: Vec<String> = s
            .selects
            .iter()
            .take(s.servers)
            .enumerate()
            .map(|(i, &v)| format!("{} {:.0}%", names[i], v as f64 * 100.0 / total as f64))
            .collect();
        let fair = 1.0 / s.servers as f64;
        for (i, &v) in s.selects.iter().enumerate() {
            let part = v as f64 / total as f64;
            if i < s.servers && part < fair * 0.5 {
                warnings.push(format!(
                    "{} servers: {} took only {:.1}% of the selects (even share {:.1}%)",
                    s.servers,
                    names[i],
                    part * 100.0,
                    fair * 100.0
                ));
            }
            if i >= s.servers && part > 0.01 {
                warnings.push(format!(
                    "{} servers: {} is not in the reader set but took {:.1}% of the selects",
                    s.servers,
                    names[i],
                    part * 100.0
                ));
            }
        }
        println!(
            "| {} | {:.0} | {:.1} | {:.1} | {:.2}x | {} |",
            s.servers,
            s.r.qps,
            s.r.tps,
            s.r.p95_ms,
            s.r.qps / base,
            share.join(", ")
        );
    }
    println!(
        "\nWhere the CPU went (CPUs used over each run; throttled: share of a server's active CFS periods in which it hit its quota; queries per mariadbd CPU-second: sysbench's qps over the servers' CPU, constant if throughput follows the servers' CPU):\n"
    );
    println!(
        "| servers | sluice CPU | sysbench CPU | mariadbd CPU (primary, replica 1, 2, 3) | throttled | queries per mariadbd CPU-second | machine idle | sysbench errors |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for s in &steps {
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
            "| {} | {:.2} | {:.2} | {} | {} | {:.0} | {:.0}% | {} |",
            s.servers,
            s.sluice_cpus,
            s.sysbench_cpus,
            list(&s.server_cpus, false),
            list(&s.throttled, true),
            s.r.qps / s.server_cpus.iter().sum::<f64>().max(1e-9),
            s.idle * 100.0,
            s.r.errors
        );
    }
    let ratio = |n: usize| {
        steps
            .iter()
            .find(|s| s.servers == n)
            .map(|s| s.r.qps / base)
    };
    println!();
    if let Some(r3) = ratio(3) {
        println!(
            "3 servers vs 1: {r3:.2}x ({} the 2.7x goal)",
            if r3 >= 2.7 { "meets" } else { "misses" }
        );
    }
    if let Some(r4) = ratio(4) {
        println!("4 servers vs 1: {r4:.2}x");
    }
    for w in &warnings {
        println!("warning: {w}");
    }

    let title = format!(
        "sysbench oltp_read_only through sluice, each mariadbd capped at {} CPU",
        o.db_cpu
    );
    let chart = Chart {
        title: &title,
        x_label: "servers in the reader set (primary + replicas added at runtime)",
        y_label: "queries per second",
        log_x: false,
        series: vec![
            Series {
                name: "through sluice".into(),
                points: steps.iter().map(|s| (s.servers as f64, s.r.qps)).collect(),
            },
            Series {
                name: "ideal linear".into(),
                points: steps
                    .iter()
                    .map(|s| (s.servers as f64, base * s.servers as f64))
                    .collect(),
            },
        ],
    };
    std::fs::create_dir_all(&o.plots).map_err(|e| format!("create {}: {e}", o.plots.display()))?;
    let svg = o.plots.join("readscale.svg");
    std::fs::write(&svg, chart.svg()).map_err(|e| format!("write {}: {e}", svg.display()))?;
    let svg = std::fs::canonicalize(&svg).unwrap_or(svg);
    println!("plot: {}", svg.display());
    Ok(())
}
