//! Shared pieces of the benchmark programs: running sysbench, sampling a process's CPU time,
//! starting sluice and HAProxy in front of a server.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod cgroup;
pub mod client;
pub mod hist;
pub mod load;
pub mod pg;
pub mod pgclient;
pub mod pgmanaged;
pub mod plot;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// What one sysbench run reported.
#[derive(Clone, Debug, Default)]
pub struct SysbenchResult {
    /// Queries executed.
    pub queries: u64,
    /// Queries per second.
    pub qps: f64,
    /// Transactions per second.
    pub tps: f64,
    /// Average latency per event, ms.
    pub avg_ms: f64,
    /// 95th percentile latency per event, ms (sysbench's line with the default
    /// `--percentile=95`, else from the histogram when there is one).
    pub p95_ms: f64,
    /// 99th percentile latency per event, ms (sysbench's line with `--percentile=99`, else from
    /// the histogram when there is one).
    pub p99_ms: f64,
    /// Median latency per event, ms, from the histogram (`--histogram=on`); 0 without one.
    pub p50_ms: f64,
    /// The latency histogram (`--histogram=on`): (bucket value ms, events), in value order.
    pub histogram: Vec<(f64, u64)>,
    /// Errors sysbench ignored (and retried).
    pub errors: u64,
    /// Reconnects.
    pub reconnects: u64,
}

/// Runs sysbench; `args` are the test name and options (connection options are added).
pub fn sysbench(port: u16, db: &str, args: &[String]) -> Result<SysbenchResult, String> {
    let bin = sluice_testkit::find_program("sysbench", "sysbench").map_err(|e| e.to_string())?;
    let out = Command::new(bin)
        .args(args)
        .arg("--db-driver=mysql")
        .arg("--mysql-host=127.0.0.1")
        .arg(format!("--mysql-port={port}"))
        .arg("--mysql-user=app")
        .arg("--mysql-password=app")
        .arg(format!("--mysql-db={db}"))
        .output()
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!(
            "sysbench {args:?} failed:\n{text}{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(parse_sysbench(&text))
}

/// Parses sysbench 1.0's report.
pub fn parse_sysbench(text: &str) -> SysbenchResult {
    let num = |label: &str, idx: usize| -> f64 {
        text.lines()
            .find_map(|l| {
                let l = l.trim();
                l.strip_prefix(label).map(|r| {
                    r.trim_start_matches(':')
                        .split_whitespace()
                        .nth(idx)
                        .map(|s| s.trim_start_matches('(').to_string())
                        .unwrap_or_default()
                })
            })
            .and_then(|s| s.parse().ok())
            .unwrap_or(0.0)
    };
    let histogram = parse_histogram(text);
    let pct = |p: u32| {
        percentile_line(text)
            .filter(|&(q, _)| q == p)
            .map(|(_, v)| v)
            .or_else(|| histogram_percentile(&histogram, f64::from(p)))
            .unwrap_or(0.0)
    };
    SysbenchResult {
        queries: num("queries:", 0) as u64,
        qps: num("queries:", 1),
        tps: num("transactions:", 1),
        avg_ms: num("avg:", 0),
        p95_ms: pct(95),
        p99_ms: pct(99),
        p50_ms: histogram_percentile(&histogram, 50.0).unwrap_or(0.0),
        errors: num("ignored errors:", 0) as u64,
        reconnects: num("reconnects:", 0) as u64,
        histogram,
    }
}

/// sysbench's `Nth percentile:` line (N from `--percentile`): (N, ms).
fn percentile_line(text: &str) -> Option<(u32, f64)> {
    text.lines().find_map(|l| {
        let (label, value) = l.trim().split_once("th percentile:")?;
        Some((label.parse().ok()?, value.trim().parse().ok()?))
    })
}

/// The histogram sysbench prints with `--histogram=on`, lines like
/// `       0.105 |****                   1234` (bucket value in ms, events).
pub fn parse_histogram(text: &str) -> Vec<(f64, u64)> {
    let Some(start) = text.find("Latency histogram") else {
        return Vec::new();
    };
    text[start..]
        .lines()
        .skip(1)
        .skip_while(|l| !l.contains('|'))
        .map_while(|l| {
            let (value, rest) = l.split_once('|')?;
            Some((
                value.trim().parse().ok()?,
                rest.split_whitespace().last()?.parse().ok()?,
            ))
        })
        .collect()
}

/// The smallest bucket value at which the cumulative count reaches `p` percent of all events.
pub fn histogram_percentile(histogram: &[(f64, u64)], p: f64) -> Option<f64> {
    let total: u64 = histogram.iter().map(|b| b.1).sum();
    if total == 0 {
        return None;
    }
    let want = total as f64 * p / 100.0;
    let mut cum = 0u64;
    histogram.iter().find_map(|&(v, n)| {
        cum += n;
        (cum as f64 >= want).then_some(v)
    })
}

/// Starts one MariaDB server for a benchmark: `extra` server options, the user `app`/`app` with
/// all privileges, then `extra_sql`, then the database `sbtest` with `tables` sysbench tables
/// of `rows` rows.
pub fn sbtest_server(
    extra: &[&str],
    buffer_pool: &'static str,
    extra_sql: &str,
    tables: u32,
    rows: u64,
) -> Result<sluice_testkit::MariaDb, String> {
    let db = sluice_testkit::MariaDb::start(sluice_testkit::ServerOptions {
        server_id: 1,
        extra: extra.iter().map(|s| s.to_string()).collect(),
        buffer_pool,
    })
    .map_err(|e| e.to_string())?;
    db.sql(&format!(
        "CREATE USER 'app'@'%' IDENTIFIED BY 'app'; GRANT ALL ON *.* TO 'app'@'%'; {extra_sql} CREATE DATABASE sbtest"
    ))
    .map_err(|e| e.to_string())?;
    sysbench(
        db.port,
        "sbtest",
        &[
            "oltp_read_write".into(),
            format!("--tables={tables}"),
            format!("--table-size={rows}"),
            "prepare".into(),
        ],
    )?;
    Ok(db)
}

/// A server status counter (`SHOW GLOBAL STATUS`), e.g. `Com_select`, `Threads_connected`.
pub fn status_counter(db: &sluice_testkit::MariaDb, name: &str) -> Result<u64, String> {
    let out = db
        .sql(&format!("SHOW GLOBAL STATUS LIKE '{name}'"))
        .map_err(|e| e.to_string())?;
    out.split('\t')
        .nth(1)
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| format!("no {name} in {out:?}"))
}

/// A `kB` field of `/proc/<pid>/status` (`VmRSS:`, `VmHWM:`), KiB; 0 if unreadable.
pub fn proc_status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// CPU time (user + system) a process has used, in microseconds.
pub fn cpu_micros(pid: u32) -> Option<u64> {
    cpu_split_micros(pid).map(|(user, system)| user + system)
}

/// CPU time a process has used in user space and in the kernel, in microseconds.
pub fn cpu_split_micros(pid: u32) -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    let us = |ticks: u64| ticks * 1_000_000 / hz.max(1);
    Some((us(utime), us(stime)))
}

/// A child process killed on drop.
pub struct Guard(pub Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until something accepts TCP connections on `port`.
pub fn wait_port(port: u16) -> Result<(), String> {
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    Err(format!("nothing listens on port {port}"))
}

/// The sluice binary to benchmark: `SLUICE_BIN`, or target/release/sluice.
pub fn sluice_bin() -> PathBuf {
    std::env::var_os("SLUICE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/release/sluice")
        })
}

/// [`sluice_bin`], resolved, when it is a file; else an error saying how to build it.
pub fn existing_sluice_bin() -> Result<PathBuf, String> {
    let path = sluice_bin();
    let path = path.canonicalize().unwrap_or(path);
    if !path.is_file() {
        return Err(format!(
            "no sluice binary at {} (cargo build --release --bin sluice)",
            path.display()
        ));
    }
    Ok(path)
}

/// Starts sluice with `config` (TOML text); returns the process.
pub fn start_sluice(config: &str, port: u16) -> Result<Guard, String> {
    let path =
        std::env::temp_dir().join(format!("sluice-bench-{}-{port}.toml", std::process::id()));
    std::fs::write(&path, config).map_err(|e| e.to_string())?;
    let log = std::fs::File::create(std::env::temp_dir().join(format!("sluice-bench-{port}.log")))
        .map_err(|e| e.to_string())?;
    let out = log.try_clone().map_err(|e| e.to_string())?;
    let child = Command::new(sluice_bin())
        .arg("--config")
        .arg(&path)
        .stdout(out)
        .stderr(log)
        .spawn()
        .map_err(|e| {
            format!(
                "cannot start {}: {e} (build it: cargo build --release)",
                sluice_bin().display()
            )
        })?;
    let mut g = Guard(child);
    if let Err(e) = wait_port(port) {
        let status = g.0.try_wait().ok().flatten();
        return Err(format!(
            "{e}: sluice {} ({status:?})",
            sluice_bin().display()
        ));
    }
    Ok(g)
}

/// Starts HAProxy in TCP mode forwarding `port` to `backend`.
pub fn start_haproxy(port: u16, backend: &str) -> Result<Guard, String> {
    let bin = sluice_testkit::find_program("haproxy", "haproxy").map_err(|e| e.to_string())?;
    let path =
        std::env::temp_dir().join(format!("haproxy-bench-{}-{port}.cfg", std::process::id()));
    let cfg = format!(
        "global\n  maxconn 9000\n\ndefaults\n  mode tcp\n  timeout connect 5s\n  timeout client 1h\n  timeout server 1h\n\nlisten mysql\n  bind 127.0.0.1:{port}\n  server db1 {backend}\n"
    );
    std::fs::write(&path, cfg).map_err(|e| e.to_string())?;
    let child = Command::new(bin)
        .arg("-db")
        .arg("-f")
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let g = Guard(child);
    wait_port(port)?;
    Ok(g)
}

/// A short description of this machine for the results.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines().next().map(|l| {
                l.split_whitespace()
                    .nth(1)
                    .unwrap_or("0")
                    .parse::<u64>()
                    .unwrap_or(0)
            })
        })
        .unwrap_or(0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!(
        "{cores} cores ({cpu}), {:.0} GiB RAM, Linux {}",
        mem as f64 / 1048576.0,
        kernel.trim()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// sysbench 1.0.20 `oltp_read_write --percentile=99 --histogram=on` (histogram buckets
    /// thinned out).
    const RW_99_HISTOGRAM: &str = r#"sysbench 1.0.20 (using system LuaJIT 2.1.0-beta3)

Running the test with following options:
Number of threads: 2
Initializing random number generator from current time


Initializing worker threads...

Threads started!

Latency histogram (values are in milliseconds)
       value  ------------- distribution ------------- count
       0.690 |                                         2
       0.728 |                                         1
       0.741 |                                         1
       1.443 |****************                         83
       1.469 |**********************                   114
       1.496 |*****************************            148
       1.523 |********************************         166
       1.551 |****************************             146
       1.579 |***********************************      179
       1.608 |*******************************          159
       1.637 |**************************************** 207
       1.667 |**********************************       177
       1.697 |********************************         167
       1.728 |*****************************            150
       1.759 |*********************                    110
       2.615 |*                                        4
       4.737 |                                         1
       5.277 |                                         1
 
SQL statistics:
    queries performed:
        read:                            34958
        write:                           9988
        other:                           4994
        total:                           49940
    transactions:                        2497   (1246.19 per sec.)
    queries:                             49940  (24923.82 per sec.)
    ignored errors:                      0      (0.00 per sec.)
    reconnects:                          0      (0.00 per sec.)

General statistics:
    total time:                          2.0030s
    total number of events:              2497

Latency (ms):
         min:                                    0.69
         avg:                                    1.60
         max:                                    5.29
         99th percentile:                        2.61
         sum:                                 4000.42

Threads fairness:
    events (avg/stddev):           1248.5000/1.50
    execution time (avg/stddev):   2.0002/0.00
"#;

    #[test]
    fn parses_histogram_and_percentiles() {
        let r = parse_sysbench(RW_99_HISTOGRAM);
        assert_eq!(r.histogram.len(), 18);
        assert_eq!(r.histogram[0], (0.690, 2));
        assert_eq!(r.histogram[17], (5.277, 1));
        assert_eq!(r.histogram.iter().map(|b| b.1).sum::<u64>(), 1816);
        // Half of 1816 is 908: the cumulative count is 840 up to 1.579 and 999 at 1.608.
        assert_eq!(r.p50_ms, 1.608);
        // From sysbench's own "99th percentile:" line, not the (thinned) histogram.
        assert_eq!(r.p99_ms, 2.61);
        // No "95th percentile:" line: from the histogram.
        assert_eq!(r.p95_ms, 1.759);
        assert_eq!(r.queries, 49940);
        assert_eq!(r.qps, 24923.82);
        assert_eq!(r.tps, 1246.19);
        assert_eq!(r.avg_ms, 1.60);
        assert_eq!(r.errors, 0);
    }

    #[test]
    fn default_report_keeps_p95() {
        let text = "    queries:                             1000  (100.00 per sec.)\n    ignored errors:                      7      (0.70 per sec.)\nLatency (ms):\n         min:                                    0.69\n         avg:                                    1.60\n         max:                                    5.29\n         95th percentile:                        2.11\n";
        let r = parse_sysbench(text);
        assert_eq!(r.p95_ms, 2.11);
        assert_eq!(r.p99_ms, 0.0);
        assert_eq!(r.p50_ms, 0.0);
        assert!(r.histogram.is_empty());
        assert_eq!(r.errors, 7);
    }

    #[test]
    fn histogram_percentile_edges() {
        assert_eq!(histogram_percentile(&[], 50.0), None);
        let h = [(0.1, 1), (0.2, 1), (0.3, 2)];
        assert_eq!(histogram_percentile(&h, 50.0), Some(0.2));
        assert_eq!(histogram_percentile(&h, 50.1), Some(0.3));
        assert_eq!(histogram_percentile(&h, 100.0), Some(0.3));
    }
}
