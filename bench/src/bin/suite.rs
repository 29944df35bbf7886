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

const USAGE: &str = "usage: suite [--time SECS] [--threads 1,16,64,256] [--workloads oltp_point_select,oltp_read_only,oltp_read_write] [--plots DIR] [--db-cpu CPUS] [--db-core N] [--sluice-threads N]";

/// The sysbench tests (bundled Lua scripts) the suite can run against the prepared tables.
const KNOWN_WORKLOADS: [&str; 10] = [
    "oltp_point_select",
    "oltp_read_only",
    "oltp_read_write",
    "oltp_write_only",
    "oltp_update_index",
    "oltp_update_non_index",
    "oltp_insert",
    "oltp_delete",
    "select_random_points",
    "select_random_ranges",
];

/// Tables sysbench prepares and every run uses.
const TABLES: [&str; 2] = ["--tables=4", "--table-size=50000"];
/// The same, as numbers (for preparing them).
const TABLES_N: u32 = 4;
const TABLE_ROWS: u64 = 50_000;

/// The thread count the summary compares at.
const SUMMARY_THREADS: u32 = 16;

struct Opts {
    time: u32,
    threads: Vec<u32>,
    workloads: Vec<String>,
    plots: PathBuf,
    db_cpu: Option<f64>,
    /// sluice's `[proxy] worker_threads` (0: one per CPU).
    sluice_threads: u32,
    /// Pin mariadbd (every thread) to this CPU: a database host of its own, while sysbench
    /// and the proxies run where the suite runs (start it with `taskset -c` on the others).
    db_core: Option<u32>,
}

impl Opts {
    fn parse(args: impl Iterator<Item = String>) -> Result<Opts, String> {
        let mut o = Opts {
            time: 10,
            threads: vec![1, 16, 64, 256],
            workloads: ["oltp_point_select", "oltp_read_only", "oltp_read_write"]
                .map(String::from)
                .to_vec(),
            plots: PathBuf::from("docs/img"),
            db_cpu: None,
            sluice_threads: 1,
            db_core: None,
        };
        let mut args = args;
        while let Some(a) = args.next() {
            if a == "--help" || a == "-h" {
                return Err(USAGE.into());
            }
            let v = args
                .next()
                .ok_or_else(|| format!("{a} needs a value\n{USAGE}"))?;
            match a.as_str() {
                "--time" => {
                    o.time = v
                        .parse()
                        .ok()
                        .filter(|&t| t > 0)
                        .ok_or(format!("--time {v}: want seconds > 0"))?
                }
                "--threads" => {
                    o.threads = v
                        .split(',')
                        .map(|t| t.trim().parse().ok().filter(|&n: &u32| n > 0))
                        .collect::<Option<Vec<u32>>>()
                        .filter(|t| !t.is_empty())
                        .ok_or(format!("--threads {v}: want a list like 1,16,64"))?
                }
                "--workloads" => {
                    o.workloads = v.split(',').map(|w| w.trim().to_string()).collect();
                    if let Some(w) = o
                        .workloads
                        .iter()
                        .find(|w| !KNOWN_WORKLOADS.contains(&w.as_str()))
                    {
                        return Err(format!(
                            "--workloads: unknown sysbench test {w:?} (one of {})",
                            KNOWN_WORKLOADS.join(", ")
                        ));
                    }
                }
                "--plots" => o.plots = PathBuf::from(v),
                "--db-cpu" => {
                    o.db_cpu = Some(
                        v.parse()
                            .ok()
                            .filter(|&c: &f64| c >= 0.01)
                            .ok_or(format!("--db-cpu {v}: want CPUs >= 0.01, like 1.0"))?,
                    )
                }
                "--db-core" => {
                    o.db_core = Some(
                        v.parse()
                            .map_err(|_| format!("--db-core {v}: want a CPU number"))?,
                    )
                }
                "--sluice-threads" => {
                    o.sluice_threads = v.parse().map_err(|_| {
                        format!("--sluice-threads {v}: want a number (0: one per CPU)")
                    })?
                }
                other => return Err(format!("unknown argument {other}\n{USAGE}")),
            }
        }
        Ok(o)
    }

    /// The options as a command line (every default spelled out).
    fn describe(&self) -> String {
        let threads: Vec<String> = self.threads.iter().map(u32::to_string).collect();
        let mut s = format!(
            "--time {} --threads {} --workloads {} --plots {} --sluice-threads {}",
            self.time,
            threads.join(","),
            self.workloads.join(","),
            self.plots.display(),
            self.sluice_threads
        );
        if let Some(c) = self.db_cpu {
            s += &format!(" --db-cpu {c:?}");
        }
        if let Some(c) = self.db_core {
            s += &format!(" --db-core {c}");
        }
        s
    }
}

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

/// The first line of `program args` (a version banner), if the program runs.
fn banner(program: &std::path::Path, arg: &str) -> Option<String> {
    let out = Command::new(program).arg(arg).output().ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .map(|l| l.trim().to_string())
}

/// A failed sysbench run's message without the bulk of its report: the command, the lines
/// that say what went wrong, and the last lines.
fn condense(err: &str) -> String {
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut keep: Vec<&str> = Vec::new();
    if let Some(first) = lines.first() {
        keep.push(first);
    }
    for l in lines.iter().skip(1) {
        let low = l.to_ascii_lowercase();
        if (low.contains("fatal") || low.contains("error") || low.contains("failed"))
            && !low.contains("ignored errors:")
            && keep.len() < 8
        {
            keep.push(l);
        }
    }
    for l in lines.iter().skip(1).skip(lines.len().saturating_sub(4)) {
        if !keep.contains(l) {
            keep.push(l);
        }
    }
    keep.join("\n    ")
}

/// sysbench arguments for one measured run.
fn run_args(workload: &str, threads: u32, time: u32) -> Vec<String> {
    let mut a: Vec<String> = vec![workload.into()];
    a.extend(TABLES.map(String::from));
    a.extend([
        format!("--threads={threads}"),
        format!("--time={time}"),
        "--report-interval=0".into(),
        "--percentile=99".into(),
        "--histogram=on".into(),
    ]);
    if workload == "oltp_read_write" {
        // Uniform keys: fewer genuine InnoDB deadlocks between the writing threads.
        a.push("--rand-type=uniform".into());
    }
    a.push("run".into());
    a
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

fn qps_of(rows: &[Row], workload: &str, threads: u32, target: &str) -> Option<f64> {
    rows.iter()
        .find(|r| r.workload == workload && r.threads == threads && r.target == target)
        .and_then(|r| r.result.as_ref().ok())
        .map(|r| r.qps)
}

fn print_table(rows: &[Row]) {
    println!();
    println!("| workload | threads | target | qps | vs direct | p50 ms | p99 ms | proxy CPU µs/query | of which user | errors |");
    println!("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for row in rows {
        let r = match &row.result {
            Ok(r) => r,
            Err(_) => {
                println!(
                    "| {} | {} | {} | failed | — | — | — | — | — | run failed |",
                    row.workload, row.threads, row.target
                );
                continue;
            }
        };
        let vs = if row.target == "direct" {
            "1.00".to_string()
        } else {
            qps_of(rows, &row.workload, row.threads, "direct")
                .filter(|&d| d > 0.0)
                .map(|d| format!("{:.2}", r.qps / d))
                .unwrap_or_else(|| "—".into())
        };
        let errors = if r.reconnects > 0 {
            format!("{} ({} reconnects)", r.errors, r.reconnects)
        } else {
            r.errors.to_string()
        };
        println!(
            "| {} | {} | {} | {:.0} | {vs} | {:.3} | {:.2} | {} | {} | {errors} |",
            row.workload,
            row.threads,
            row.target,
            r.qps,
            r.p50_ms,
            r.p99_ms,
            row.cpu_us_per_query
                .map(|c| format!("{c:.1}"))
                .unwrap_or_else(|| "—".into()),
            row.user_us_per_query
                .map(|c| format!("{c:.1}"))
                .unwrap_or_else(|| "—".into()),
        );
    }
    let failures: Vec<&Row> = rows.iter().filter(|r| r.result.is_err()).collect();
    if !failures.is_empty() {
        println!("\nFailed runs:");
        for r in failures {
            if let Err(e) = &r.result {
                println!("- {} {} threads {}: {e}", r.workload, r.threads, r.target);
            }
        }
    }
}

fn print_summary(rows: &[Row], targets: &[Target], o: &Opts) {
    // 16 threads, or the measured count nearest to it.
    let Some(&t) = o
        .threads
        .iter()
        .min_by_key(|&&t| (i64::from(t) - i64::from(SUMMARY_THREADS)).abs())
    else {
        return;
    };
    println!("\nSummary at {t} threads:");
    for target in targets.iter().filter(|t| t.proc.is_some()) {
        let cpu = rows
            .iter()
            .find(|r| {
                r.workload == "oltp_point_select" && r.threads == t && r.target == target.name
            })
            .and_then(|r| r.cpu_us_per_query)
            .map(|c| format!("{c:.1} µs/query on oltp_point_select"))
            .unwrap_or_else(|| "CPU per query on oltp_point_select not measured".into());
        let vs: Vec<String> = o
            .workloads
            .iter()
            .map(|w| {
                match (
                    qps_of(rows, w, t, target.name),
                    qps_of(rows, w, t, "direct").filter(|&d| d > 0.0),
                ) {
                    (Some(q), Some(d)) => format!("{w} {:.2}", q / d),
                    _ => format!("{w} —"),
                }
            })
            .collect();
        println!(
            "- {}: {cpu}; throughput vs direct: {}",
            target.name,
            vs.join(", ")
        );
    }
}

fn write_plots(rows: &[Row], targets: &[Target], o: &Opts) -> Result<(), String> {
    std::fs::create_dir_all(&o.plots)
        .map_err(|e| format!("cannot create {}: {e}", o.plots.display()))?;
    let suffix = if o.db_cpu.is_some() {
        "-dbcpu"
    } else if o.db_core.is_some() {
        "-dbcore"
    } else {
        ""
    };
    let cap = o
        .db_cpu
        .map(|c| format!(", database capped at {c:?} CPUs"))
        .unwrap_or_default();
    let mut threads = o.threads.clone();
    threads.sort_unstable();
    threads.dedup();
    println!();
    for w in &o.workloads {
        let series = targets
            .iter()
            .map(|t| Series {
                name: t.name.to_string(),
                points: threads
                    .iter()
                    .filter_map(|&n| qps_of(rows, w, n, t.name).map(|q| (f64::from(n), q)))
                    .collect(),
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        let title = format!("sysbench {w}{cap}");
        let chart = Chart {
            title: &title,
            x_label: "client threads",
            y_label: "queries per second",
            log_x: true,
            series,
        };
        let path = o.plots.join(format!("suite-{w}{suffix}.svg"));
        std::fs::write(&path, chart.svg())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        println!("plot: {}", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn condenses_a_failed_run() {
        // What sluice_bench::sysbench returns when sysbench cannot connect.
        let err = "sysbench [\"oltp_point_select\", \"run\"] failed:\nsysbench 1.0.20 (using system LuaJIT 2.1.0-beta3)\n\nRunning the test with following options:\nNumber of threads: 1\nInitializing random number generator from current time\n\n\nInitializing worker threads...\n\nFATAL: unable to connect to MySQL server on host '127.0.0.1', port 1, aborting...\nFATAL: error 2002: Can't connect to server on '127.0.0.1' (115)\nFATAL: `thread_init' function failed: /usr/share/sysbench/oltp_common.lua:349: connection creation failed\nFATAL: Thread initialization failed!\n";
        let c = condense(err);
        assert!(c.starts_with("sysbench [\"oltp_point_select\", \"run\"] failed:"));
        assert!(c.contains("error 2002"));
        assert!(!c.contains("Initializing random"));
        assert_eq!(c.lines().count(), 5);
    }

    #[test]
    fn parses_options() {
        let o = Opts::parse(
            [
                "--time",
                "2",
                "--threads",
                "1,16",
                "--db-cpu",
                "1.0",
                "--db-core",
                "0",
            ]
            .map(String::from)
            .into_iter(),
        )
        .unwrap();
        assert_eq!(o.threads, [1, 16]);
        assert_eq!(o.workloads.len(), 3);
        assert_eq!(
            o.describe(),
            "--time 2 --threads 1,16 --workloads oltp_point_select,oltp_read_only,oltp_read_write --plots docs/img --sluice-threads 1 --db-cpu 1.0 --db-core 0"
        );
        assert!(Opts::parse(["--workloads", "oltp_nope"].map(String::from).into_iter()).is_err());
        assert!(Opts::parse(["--threads", "0"].map(String::from).into_iter()).is_err());
        assert!(Opts::parse(["--time"].map(String::from).into_iter()).is_err());
    }
}
