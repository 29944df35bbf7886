//! pgbench runs: its report parsed, the latencies and end times of its sampled transaction
//! log, and one run with its options.

use super::run_bounded;
use crate::hist::Histogram;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// What one pgbench run reported.
#[derive(Clone, Debug, Default)]
pub struct PgbenchResult {
    /// Transactions completed.
    pub transactions: u64,
    /// Transactions per second (pgbench's `tps =` line).
    pub tps: f64,
    /// Average latency, ms (pgbench's `latency average`).
    pub avg_ms: f64,
    /// 99th percentile latency, ms, from the sampled transaction log (none without it).
    pub p99_ms: Option<f64>,
    /// Transactions in the sampled log.
    pub sampled: u64,
    /// When each sampled transaction ended, µs since the epoch, sorted.
    pub sample_ends_us: Vec<u64>,
    /// pgbench's `initial connection time`, ms (0 with `-C`).
    pub connect_ms: f64,
    /// pgbench's `number of failed transactions`.
    pub failed: u64,
    /// Clients pgbench aborted on an error (pgbench 15 aborts a client on any error but a
    /// serialization failure or a deadlock).
    pub aborted_clients: u64,
    /// The first error pgbench printed, if any.
    pub first_error: Option<String>,
}

impl PgbenchResult {
    /// The transactions that ended after `epoch_us` (µs since the epoch), estimated from the
    /// sampled log; none without one.
    pub fn transactions_after(&self, epoch_us: u64) -> Option<f64> {
        if self.sample_ends_us.is_empty() {
            return None;
        }
        let before = self.sample_ends_us.partition_point(|&t| t <= epoch_us);
        let share = (self.sample_ends_us.len() - before) as f64 / self.sample_ends_us.len() as f64;
        Some(self.transactions as f64 * share)
    }
}

/// Parses pgbench 15's report (stdout) and its error lines (stderr).
pub fn parse_pgbench(stdout: &str, stderr: &str) -> Option<PgbenchResult> {
    let after = |label: &str| -> Option<&str> {
        stdout
            .lines()
            .find_map(|l| l.trim().strip_prefix(label).map(str::trim))
    };
    let first_num = |s: &str| -> Option<f64> {
        s.split(|c: char| c.is_whitespace() || c == '/')
            .next()?
            .parse()
            .ok()
    };
    let tps = after("tps =").and_then(first_num)?;
    let transactions = after("number of transactions actually processed:")
        .and_then(first_num)
        .unwrap_or(0.0) as u64;
    let failed = after("number of failed transactions:")
        .and_then(first_num)
        .unwrap_or(0.0) as u64;
    let avg_ms = after("latency average =")
        .and_then(first_num)
        .unwrap_or(0.0);
    let connect_ms = after("initial connection time =")
        .and_then(first_num)
        .unwrap_or(0.0);
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("aborted in command") || l.contains("error:"))
        .collect();
    let aborted_clients = stderr
        .lines()
        .filter(|l| l.contains("aborted in command"))
        .count() as u64;
    Some(PgbenchResult {
        transactions,
        tps,
        avg_ms,
        connect_ms,
        p99_ms: None,
        sampled: 0,
        sample_ends_us: Vec::new(),
        failed,
        aborted_clients,
        first_error: errors.first().map(|l| l.trim().to_string()),
    })
}

/// The sampled transaction log files `prefix*` in `dir` (removed once read): a histogram
/// of the latencies (µs, third field) and the transactions' end times (µs since the epoch,
/// fifth and sixth fields), sorted.
pub fn pgbench_log(dir: &Path, prefix: &str) -> (Histogram, Vec<u64>) {
    let mut h = Histogram::default();
    let mut ends = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (h, ends);
    };
    for e in entries.flatten() {
        if !e.file_name().to_string_lossy().starts_with(prefix) {
            continue;
        }
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        for l in text.lines() {
            let f: Vec<&str> = l.split_whitespace().collect();
            // Failed transactions say "failed" instead of a latency.
            if let Some(us) = f.get(2).and_then(|v| v.parse::<u64>().ok()) {
                h.record(us);
                let sec = f.get(4).and_then(|v| v.parse::<u64>().ok());
                let usec = f.get(5).and_then(|v| v.parse::<u64>().ok());
                if let (Some(sec), Some(usec)) = (sec, usec) {
                    ends.push(sec * 1_000_000 + usec);
                }
            }
        }
        let _ = std::fs::remove_file(e.path());
    }
    ends.sort_unstable();
    (h, ends)
}

/// One pgbench run.
pub struct Pgbench<'a> {
    /// The pgbench binary.
    pub bin: &'a Path,
    /// Port on 127.0.0.1.
    pub port: u16,
    /// User and password.
    pub user: &'a str,
    /// Its password.
    pub password: &'a str,
    /// Database.
    pub database: &'a str,
    /// Options (`-c`, `-j`, `-T`, `-M`, `-S`, `-C`...).
    pub args: Vec<String>,
    /// Where the sampled transaction log goes (`--log --sampling-rate`); none: no log.
    pub log: Option<(&'a Path, f64)>,
    /// Longest the run may take.
    pub timeout: Duration,
}

impl Pgbench<'_> {
    /// Runs it; the parsed report, or the reason it gave none.
    pub fn run(&self) -> Result<PgbenchResult, String> {
        let mut cmd = Command::new(self.bin);
        cmd.env("PGPASSWORD", self.password)
            .env("PGCONNECT_TIMEOUT", "30")
            .args(["-h", "127.0.0.1", "-n", "-U", self.user])
            .arg("-p")
            .arg(self.port.to_string())
            .args(&self.args);
        let prefix = format!("pgbench-{}", std::process::id());
        if let Some((dir, rate)) = self.log {
            cmd.arg("--log")
                .arg(format!("--log-prefix={}", dir.join(&prefix).display()))
                .arg(format!("--sampling-rate={rate}"));
        }
        cmd.arg(self.database);
        let (status, out, err) = run_bounded(cmd, self.timeout)?;
        let mut r = parse_pgbench(&out, &err).ok_or_else(|| {
            let aborted = err.lines().filter(|l| l.contains("aborted in command")).count();
            let first = err
                .lines()
                .find(|l| l.contains("error") || l.contains("FATAL"))
                .unwrap_or("")
                .trim();
            let processed = out
                .lines()
                .find(|l| l.contains("actually processed"))
                .unwrap_or("")
                .trim();
            format!(
                "pgbench {} failed ({status}): {processed}; {aborted} clients aborted; first error: {first}",
                self.args.join(" "),
            )
        })?;
        if let Some((dir, _)) = self.log {
            let (h, ends) = pgbench_log(dir, &prefix);
            r.sampled = h.count();
            r.p99_ms = (h.count() > 0).then(|| h.quantile(0.99) as f64 / 1000.0);
            r.sample_ends_us = ends;
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_pgbench_report() {
        let out = "transaction type: <builtin: select only>\nscaling factor: 10\nquery mode: prepared\nnumber of clients: 16\nnumber of threads: 2\nmaximum number of tries: 1\nduration: 10 s\nnumber of transactions actually processed: 301234\nnumber of failed transactions: 0 (0.000%)\nlatency average = 0.531 ms\ninitial connection time = 20.118 ms\ntps = 30123.456789 (without initial connection time)\n";
        let r = parse_pgbench(out, "").unwrap();
        assert_eq!(r.transactions, 301234);
        assert_eq!(r.tps, 30123.456789);
        assert_eq!(r.avg_ms, 0.531);
        assert_eq!(r.connect_ms, 20.118);
        assert_eq!(r.failed, 0);
        assert_eq!(r.aborted_clients, 0);
        let err = "pgbench: error: client 3 script 0 aborted in command 1 query 0: ERROR:  prepared statement \"P_0\" does not exist\npgbench: error: client 5 script 0 aborted in command 1 query 0: ERROR:  prepared statement \"P_0\" does not exist\npgbench: error: Run was aborted; the above results are incomplete.\n";
        let r = parse_pgbench(out, err).unwrap();
        assert_eq!(r.aborted_clients, 2);
        assert!(r.first_error.unwrap().contains("P_0"));
        assert!(parse_pgbench("pgbench: error: connection failed", "").is_none());
    }
}
