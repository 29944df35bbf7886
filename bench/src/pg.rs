//! PostgreSQL pieces of the benchmarks: a PostgreSQL server of the benchmark's own settings
//! (run as the `postgres` user when running as root, like the testkit's), processes stopped
//! with their whole process tree, CPU time of a process tree, and pgbench runs with their
//! report parsed (latency percentiles from pgbench's transaction log).
//!
//! The testkit's `Postgres` starts servers with `max_connections=200`; the benchmarks need
//! more (every target's clients or pool at once), hence a server of their own here.

use crate::hist::Histogram;
use std::collections::HashMap;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Processes started through [`Proc`] that still run: what a signal handler must stop.
static RUNNING: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// The directory holding `initdb`, `postgres`, `pgbench` (the testkit's, with pgbench in it).
pub fn pg_bin_dir() -> Result<PathBuf, String> {
    let dir = sluice_testkit::pg_bin_dir().map_err(|e| e.to_string())?;
    if !dir.join("pgbench").is_file() {
        return Err(format!(
            "no pgbench in {} (install postgresql-client-15)",
            dir.display()
        ));
    }
    Ok(dir)
}

/// The user PostgreSQL (and the proxies that refuse root) run as: the testkit's.
pub fn server_user() -> Result<Option<(u32, u32)>, String> {
    sluice_testkit::pg_server_user().map_err(|e| e.to_string())
}

/// Makes `cmd` run as [`server_user`].
pub fn as_server_user(cmd: &mut Command) -> Result<(), String> {
    if let Some((uid, gid)) = server_user()? {
        cmd.uid(uid).gid(gid);
    }
    Ok(())
}

/// Creates `path` (empty) owned by [`server_user`].
pub fn owned_dir(path: &Path) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(path);
    std::fs::create_dir_all(path).map_err(|e| format!("{}: {e}", path.display()))?;
    chown_to_server_user(path)
}

/// Gives `path` to [`server_user`].
pub fn chown_to_server_user(path: &Path) -> Result<(), String> {
    if let Some((uid, gid)) = server_user()? {
        std::os::unix::fs::chown(path, Some(uid), Some(gid))
            .map_err(|e| format!("chown {}: {e}", path.display()))?;
    }
    Ok(())
}

/// Writes a file owned by [`server_user`].
pub fn write_owned(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    chown_to_server_user(path)
}

/// The direct children of every process: parent pid → children.
fn children_map() -> HashMap<u32, Vec<u32>> {
    let mut map: HashMap<u32, Vec<u32>> = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return map;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Some(f) = stat_fields(pid) {
            if let Some(ppid) = f.get(1).and_then(|p| p.parse::<u32>().ok()) {
                map.entry(ppid).or_default().push(pid);
            }
        }
    }
    map
}

/// The fields of `/proc/PID/stat` after the command name (the first is the state).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.get(stat.rfind(')')? + 2..)?;
    Some(after.split_whitespace().map(String::from).collect())
}

/// `pid` and every process descended from it.
pub fn process_tree(pid: u32) -> Vec<u32> {
    let map = children_map();
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() && out.len() < 100_000 {
        if let Some(c) = map.get(&out[i]) {
            for &p in c {
                if !out.contains(&p) {
                    out.push(p);
                }
            }
        }
        i += 1;
    }
    out
}

/// CPU time (user + system, and that of reaped children) of `pid` and all its descendants,
/// in microseconds: a multi-process proxy (Pgpool-II) counted whole.
pub fn tree_cpu_micros(pid: u32) -> Option<u64> {
    tree_micros(pid, &[11, 12, 13, 14])
}

/// User-mode CPU time (and that of reaped children) of `pid` and all its descendants, in
/// microseconds: the part of [`tree_cpu_micros`] spent outside the kernel.
pub fn tree_user_micros(pid: u32) -> Option<u64> {
    tree_micros(pid, &[11, 13])
}

/// The sum of the given clock-tick fields of /proc/PID/stat (counted after the command) over
/// `pid`'s process tree, in microseconds; `None` if `pid` is gone.
fn tree_micros(pid: u32, fields: &[usize]) -> Option<u64> {
    // SAFETY: sysconf has no preconditions.
    let hz = (unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64).max(1);
    let mut ticks = 0u64;
    let mut seen = false;
    for p in process_tree(pid) {
        let Some(f) = stat_fields(p) else { continue };
        seen |= p == pid;
        for &i in fields {
            ticks += f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        }
    }
    seen.then_some(ticks * 1_000_000 / hz)
}

/// Resident memory of a process (`VmRSS`), bytes.
pub fn rss_bytes(pid: u32) -> u64 {
    crate::proc_status_kib(pid, "VmRSS:") * 1024
}

/// Sends `sig` to `pid`.
fn signal(pid: u32, sig: i32) {
    // SAFETY: kill has no memory-safety preconditions; pid is one of our processes.
    unsafe {
        libc::kill(pid as i32, sig);
    }
}

/// Kills (SIGKILL) every process still registered by a [`Proc`] and its descendants: for a
/// signal handler that ends the program.
pub fn kill_all_registered() {
    let pids: Vec<u32> = RUNNING
        .lock()
        .map(|g| g.clone())
        .unwrap_or_else(|e| e.into_inner().clone());
    for pid in pids {
        for p in process_tree(pid) {
            signal(p, libc::SIGKILL);
        }
    }
}

/// A child process (a server or a proxy) stopped with its whole process tree when dropped:
/// first `stop_signal`, then SIGKILL for whatever is left after a grace period. It gets
/// SIGKILL too if this program dies (parent-death signal; spawn it from the main thread).
pub struct Proc {
    /// What it is, for messages.
    pub name: String,
    child: Option<Child>,
    stop_signal: i32,
}

impl Proc {
    /// Spawns `cmd` (output wherever `cmd` sends it).
    pub fn spawn(name: &str, mut cmd: Command, stop_signal: i32) -> Result<Proc, String> {
        // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe and touches no Rust state.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
                Ok(())
            });
        }
        let child = cmd
            .stdin(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {name}: {e}"))?;
        if let Ok(mut g) = RUNNING.lock() {
            g.push(child.id());
        }
        Ok(Proc {
            name: name.to_string(),
            child: Some(child),
            stop_signal,
        })
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// Why it is gone, if it is.
    pub fn exited(&mut self) -> Option<String> {
        let c = self.child.as_mut()?;
        match c.try_wait() {
            Ok(Some(status)) => Some(format!("{} exited ({status})", self.name)),
            _ => None,
        }
    }

    /// Stops it: `stop_signal`, up to 10 s to exit, then SIGKILL for it and every
    /// descendant left.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pid = child.id();
        let tree = process_tree(pid);
        signal(pid, self.stop_signal);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        for p in tree.into_iter().skip(1) {
            if Path::new(&format!("/proc/{p}")).exists() {
                signal(p, libc::SIGKILL);
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        if let Ok(mut g) = RUNNING.lock() {
            g.retain(|&p| p != pid);
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Runs `cmd` to its end or until `timeout` (then kills it): exit status, stdout, stderr.
pub fn run_bounded(
    mut cmd: Command,
    timeout: Duration,
) -> Result<(std::process::ExitStatus, String, String), String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{:?}: {e}", cmd.get_program()))?;
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut s);
            }
            String::from_utf8_lossy(&s).into_owned()
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{:?} did not finish within {timeout:?}: killed",
                    cmd.get_program()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(e.to_string()),
        }
    };
    Ok((
        status,
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    ))
}

/// One PostgreSQL server in a directory of its own (trust for `postgres` and `hba` for the
/// rest), on a free port of 127.0.0.1.
pub struct PgServer {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Its directory (data, socket, log).
    pub dir: PathBuf,
    bin: PathBuf,
    proc: Proc,
}

impl PgServer {
    /// `initdb` in `dir` (created), then starts `postgres` with `settings` (`name=value`,
    /// given with `-c`); `hba` lines are added to pg_hba.conf after trust for `postgres`.
    pub fn start(dir: &Path, settings: &[String], hba: &str) -> Result<PgServer, String> {
        let bin = pg_bin_dir()?;
        owned_dir(dir)?;
        let data = dir.join("data");
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .args([
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-sync",
                "-D",
            ])
            .arg(&data);
        as_server_user(&mut initdb)?;
        let (status, out, err) = run_bounded(initdb, Duration::from_secs(120))?;
        if !status.success() {
            return Err(format!("initdb failed ({status}):\n{out}{err}"));
        }
        write_owned(
            &data.join("pg_hba.conf"),
            &format!("local all all trust\nhost all postgres 127.0.0.1/32 trust\n{hba}"),
        )?;
        let port = sluice_testkit::free_port().map_err(|e| e.to_string())?;
        let log_path = dir.join("server.log");
        let log = std::fs::File::create(&log_path).map_err(|e| e.to_string())?;
        chown_to_server_user(&log_path)?;
        let mut cmd = Command::new(bin.join("postgres"));
        cmd.arg("-D").arg(&data).arg("-p").arg(port.to_string());
        cmd.arg("-c").arg("listen_addresses=127.0.0.1");
        cmd.arg("-c")
            .arg(format!("unix_socket_directories={}", dir.display()));
        for s in settings {
            cmd.arg("-c").arg(s);
        }
        cmd.stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        as_server_user(&mut cmd)?;
        // SIGINT: fast shutdown.
        let proc = Proc::spawn("postgres", cmd, libc::SIGINT)?;
        let mut server = PgServer {
            port,
            dir: dir.to_path_buf(),
            bin,
            proc,
        };
        let started = Instant::now();
        loop {
            if let Some(e) = server.proc.exited() {
                return Err(format!("{e}\n{}", server.log_tail()));
            }
            if server.sql("SELECT 1").is_ok() {
                return Ok(server);
            }
            if started.elapsed() > Duration::from_secs(60) {
                return Err(format!(
                    "postgres not ready within 60 s\n{}",
                    server.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// A program of the server's installation (`pgbench`, `psql`...).
    pub fn program(&self, name: &str) -> PathBuf {
        self.bin.join(name)
    }

    /// The postmaster's pid.
    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Runs `sql` with psql as `postgres` in database `postgres` (unaligned, tuples only).
    pub fn sql(&self, sql: &str) -> Result<String, String> {
        let mut cmd = Command::new(self.program("psql"));
        cmd.args([
            "-h",
            "127.0.0.1",
            "-U",
            "postgres",
            "-d",
            "postgres",
            "-XAtq",
        ])
        .args(["-v", "ON_ERROR_STOP=1"])
        .arg("-p")
        .arg(self.port.to_string())
        .arg("-c")
        .arg(sql)
        .env("PGCONNECT_TIMEOUT", "5");
        let (status, out, err) = run_bounded(cmd, Duration::from_secs(600))?;
        if !status.success() {
            return Err(format!("psql {sql:?}: {err}"));
        }
        Ok(out.trim_end().to_string())
    }
}

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
