//! Shared pieces of the benchmark programs: running sysbench, sampling a process's CPU time,
//! starting sluice and HAProxy in front of a server.

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
    /// 95th percentile latency per event, ms.
    pub p95_ms: f64,
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
    SysbenchResult {
        queries: num("queries:", 0) as u64,
        qps: num("queries:", 1),
        tps: num("transactions:", 1),
        avg_ms: num("avg:", 0),
        p95_ms: num("95th percentile:", 0),
        errors: num("ignored errors:", 0) as u64,
        reconnects: num("reconnects:", 0) as u64,
    }
}

/// CPU time (user + system) a process has used, in microseconds.
pub fn cpu_micros(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Some((utime + stime) * 1_000_000 / hz.max(1))
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
