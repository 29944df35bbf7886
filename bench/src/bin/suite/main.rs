//! The benchmark suite: sysbench `oltp_point_select`, `oltp_read_only` and `oltp_read_write` at
//! 1, 16, 64 and 256 threads against one MariaDB server directly, through sluice and through
//! HAProxy (TCP mode), side by side in one run on one machine. For every run: queries per
//! second and the ratio to direct, median and 99th percentile latency (from one sysbench run:
//! p50 from its latency histogram, p99 from its own percentile line), each proxy's CPU
//! microseconds per query, and the errors sysbench ignored. Writes one SVG chart per workload
//! (queries/s against threads, one line per target).
//!
//! `--db-cpu F` caps the server at F CPUs (cgroup v1 CPU quota) to emulate a database on its
//! own host, so that the proxies' CPU use does not come out of the database's share as much.
//!
//! ProxySQL and MaxScale are looked for; they are not wired in yet.
//!
//! Usage: cargo run --release -p sluice-bench --bin suite -- [--time SECS] [--threads 1,16,64,256]
//!        [--workloads oltp_point_select,oltp_read_only,oltp_read_write] [--plots DIR] [--db-cpu F]
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sluice_bench::cgroup::CpuCap;
use sluice_bench::plot::{Chart, Series};
use sluice_bench::*;
use std::path::PathBuf;
use std::process::Command;

mod opts;
mod report;
mod sysbench_cmd;
#[cfg(test)]
mod tests;
use opts::*;
use report::*;
use sysbench_cmd::*;

/// Tables sysbench prepares and every run uses.
const TABLES: [&str; 2] = ["--tables=4", "--table-size=50000"];
/// The same, as numbers (for preparing them).
const TABLES_N: u32 = 4;
const TABLE_ROWS: u64 = 50_000;

/// Something sysbench connects to.
struct Target {
    name: &'static str,
    port: u16,
    /// The proxy process (none for the server itself).
    proc: Option<Guard>,
}

impl Target {
    fn pid(&self) -> Option<u32> {
        self.proc.as_ref().map(|g| g.0.id())
    }

    /// Why the proxy process is gone, if it is.
    fn exited(&mut self) -> Option<String> {
        let g = self.proc.as_mut()?;
        match g.0.try_wait() {
            Ok(Some(status)) => Some(format!("{} exited ({status})", self.name)),
            _ => None,
        }
    }
}

struct Row {
    workload: String,
    threads: u32,
    target: &'static str,
    result: Result<SysbenchResult, String>,
    cpu_us_per_query: Option<f64>,
    /// The user-space part of it.
    user_us_per_query: Option<f64>,
}

fn main() {
    let opts = match Opts::parse(std::env::args().skip(1)) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("suite: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&opts) {
        eprintln!("suite: {e}");
        std::process::exit(1);
    }
}

fn run(o: &Opts) -> Result<(), String> {
    println!("# machine: {}", machine());
    println!("# options: {}", o.describe());
    let sysbench_bin =
        sluice_testkit::find_program("sysbench", "sysbench").map_err(|e| e.to_string())?;
    println!(
        "# sysbench: {} ({} {} --percentile=99 --histogram=on --report-interval=0; oltp_read_write with --rand-type=uniform); latency is per sysbench event (a transaction for read_only/read_write), p50 from sysbench's histogram, p99 its 99th percentile line",
        banner(&sysbench_bin, "--version").unwrap_or_else(|| "version unknown".into()),
        TABLES[0],
        TABLES[1]
    );

    // Which targets there are.
    let sluice_path = sluice_bench::existing_sluice_bin()?;
    let haproxy_bin = sluice_testkit::find_program("haproxy", "haproxy").ok();
    println!("# target direct: the MariaDB server");
    println!("# target sluice: {}", sluice_path.display());
    match &haproxy_bin {
        Some(p) => println!(
            "# target haproxy: {} ({}), TCP mode",
            p.display(),
            banner(p, "-v").unwrap_or_default()
        ),
        None => println!("# target haproxy: absent (not installed), skipped"),
    }
    for (name, package) in [("proxysql", "proxysql"), ("maxscale", "maxscale")] {
        match sluice_testkit::find_program(name, package) {
            Ok(p) => println!(
                "# target {name}: found at {} but not yet wired into the suite, skipped",
                p.display()
            ),
            Err(_) => println!("# target {name}: absent (not installed), skipped"),
        }
    }

    eprintln!("preparing sbtest ({} {}) ...", TABLES[0], TABLES[1]);
    let db = sbtest_server(
        &[
            "--max-connections=3000",
            "--thread-cache-size=200",
            // 256 sysbench threads prepare ~18 statements per table each: more than the
            // default 16,382 for direct connections (sluice shares them over its pool).
            "--max-prepared-stmt-count=1048576",
        ],
        "512M",
        "",
        TABLES_N,
        TABLE_ROWS,
    )
    .map_err(|e| condense(&e))?;
    let version = db
        .sql("SELECT VERSION()")
        .map(|v| v.trim().to_string())
        .unwrap_or_default();
    println!("# server: MariaDB {version}, --max-connections=3000 --thread-cache-size=200 --max-prepared-stmt-count=1048576, buffer pool 512M");

    // Declared after the server, so dropped (the server moved back out) before it stops.
    let cap = match o.db_cpu {
        Some(cores) => {
            CpuCap::remove_stale("sluice-bench-db-");
            let pid = db.pid().ok_or("the server is not running")?;
            let cap = CpuCap::new(&format!("sluice-bench-db-{}", std::process::id()), cores)?;
            cap.add(pid)?;
            println!(
                "# db CPU cap: {cores:?} CPUs (cfs_quota_us {} per 100000), cgroup {} holds mariadbd (pid {pid}, {} threads)",
                (cores * 100_000.0).round(),
                cap.path().display(),
                cap.tasks().len()
            );
            Some(cap)
        }
        None => None,
    };

    if let Some(core) = o.db_core {
        let pid = db.pid().ok_or("the server is not running")?;
        let ok = Command::new("taskset")
            .args(["-a", "-c", "-p", &core.to_string(), &pid.to_string()])
            .output()
            .map_err(|e| format!("taskset (util-linux): {e}"))?;
        if !ok.status.success() {
            return Err(format!("taskset: {}", String::from_utf8_lossy(&ok.stderr)));
        }
        println!("# mariadbd (pid {pid}, all threads) pinned to CPU {core}; this program, sysbench and the proxies run on the CPUs it was started on");
    }

    let mut targets = vec![Target {
        name: "direct",
        port: db.port,
        proc: None,
    }];
    let sluice_port = sluice_testkit::free_port().map_err(|e| e.to_string())?;
    let config = format!(
        "[proxy]\nlisten = \"127.0.0.1:{sluice_port}\"\nworker_threads = {}\n[[users]]\nname = \"app\"\npassword = \"app\"\n[[servers]]\naddress = \"{}\"\nhostgroup = \"writer\"\nmax_connections = 300\n[log]\nlevel = \"warn\"\n",
        o.sluice_threads,
        db.addr()
    );
    targets.push(Target {
        name: "sluice",
        port: sluice_port,
        proc: Some(start_sluice(&config, sluice_port)?),
    });
    if haproxy_bin.is_some() {
        let port = sluice_testkit::free_port().map_err(|e| e.to_string())?;
        targets.push(Target {
            name: "haproxy",
            port,
            proc: Some(start_haproxy(port, &db.addr())?),
        });
    }

    // Warm the server up (connections, thread cache, adaptive hash) before measuring.
    let warm = o.time.min(3);
    eprintln!("warm-up: oltp_read_only, 8 threads, {warm} s, direct");
    let mut w = run_args("oltp_read_only", 8, warm);
    w.retain(|a| a != "--histogram=on");
    sysbench(db.port, "sbtest", &w).map_err(|e| format!("warm-up: {}", condense(&e)))?;

    let total = o.workloads.len() * o.threads.len() * targets.len();
    let mut rows: Vec<Row> = Vec::new();
    for workload in &o.workloads {
        for &t in &o.threads {
            for target in targets.iter_mut() {
                let args = run_args(workload, t, o.time);
                let pid = target.pid();
                let before = pid.and_then(cpu_split_micros);
                let stat_before = cap.as_ref().and_then(|c| c.stat().ok());
                let result = match target.exited() {
                    Some(e) => Err(e),
                    None => sysbench(target.port, "sbtest", &args).map_err(|e| condense(&e)),
                };
                let after = pid.and_then(cpu_split_micros);
                let stat_after = cap.as_ref().and_then(|c| c.stat().ok());
                let per_query = |f: fn((u64, u64)) -> u64| match (&result, before, after) {
                    (Ok(r), Some(b), Some(a)) if r.queries > 0 => {
                        Some(f(a).saturating_sub(f(b)) as f64 / r.queries as f64)
                    }
                    _ => None,
                };
                let cpu = per_query(|(u, s)| u + s);
                let user = per_query(|(u, _)| u);
                let throttle = match (stat_before, stat_after) {
                    (Some(b), Some(a)) => format!(
                        "  db throttled {}/{} periods",
                        a.nr_throttled - b.nr_throttled,
                        a.nr_periods - b.nr_periods
                    ),
                    _ => String::new(),
                };
                let n = rows.len() + 1;
                match &result {
                    Ok(r) => eprintln!(
                        "[{n}/{total}] {workload:<17} {t:>3} threads {:<8} {:>9.0} qps  p50 {:>7.3} ms  p99 {:>7.2} ms  cpu/q {:>8}  errors {}{throttle}",
                        target.name,
                        r.qps,
                        r.p50_ms,
                        r.p99_ms,
                        cpu.map(|c| format!("{c:.1} us")).unwrap_or("-".into()),
                        r.errors,
                    ),
                    Err(e) => eprintln!(
                        "[{n}/{total}] {workload:<17} {t:>3} threads {:<8} FAILED: {e}",
                        target.name
                    ),
                }
                rows.push(Row {
                    workload: workload.clone(),
                    threads: t,
                    target: target.name,
                    result,
                    cpu_us_per_query: cpu,
                    user_us_per_query: user,
                });
            }
        }
    }
    if let Some(cap) = &cap {
        if let Ok(s) = cap.stat() {
            println!(
                "# db CPU cap over the whole run: throttled in {} of {} periods, {:.1} s throttled in all",
                s.nr_throttled,
                s.nr_periods,
                s.throttled_time_ns as f64 / 1e9
            );
        }
    }

    print_table(&rows);
    print_summary(&rows, &targets, o);
    write_plots(&rows, &targets, o)?;

    // Stop the proxies, then release the server from its cgroup.
    drop(targets);
    drop(cap);
    let failed = rows.iter().filter(|r| r.result.is_err()).count();
    if failed > 0 {
        return Err(format!(
            "{failed} of {} runs failed (see above)",
            rows.len()
        ));
    }
    Ok(())
}
