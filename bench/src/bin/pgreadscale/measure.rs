//! The measurements: one pgbench run with its percentiles and per-second rates, CPU and
//! throttling sampled around it, and the four steps (0 to 3 standbys discovered).

use super::*;

/// A PostgreSQL 15 backend flushes its statistics at most once a second and, once idle,
/// after 10 s: waiting this long after a run puts all of its transactions in the counters.
const STATS_SETTLE: Duration = Duration::from_secs(11);

/// One pgbench run's report, its 95th percentile from the transaction log, and the lowest and
/// highest per-second rate of its `-P 1` lines.
pub(super) struct Bench {
    pub(super) r: PgbenchResult,
    pub(super) p95_ms: f64,
    pub(super) tps_range: (f64, f64),
    /// CPU time pgbench used, µs.
    pub(super) cpu_us: u64,
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
pub(super) struct Step {
    pub(super) standbys: usize,
    pub(super) b: Bench,
    /// `xact_commit` delta per server (all four).
    pub(super) commits: Vec<u64>,
    /// sluice's statements per server.
    pub(super) routed: Vec<u64>,
    pub(super) sluice_cpus: f64,
    pub(super) pgbench_cpus: f64,
    pub(super) server_cpus: Vec<f64>,
    pub(super) throttled: Vec<f64>,
    pub(super) idle: f64,
    pub(super) placed_ms: u128,
}

impl Step {
    pub(super) fn serving(&self) -> usize {
        self.standbys.max(1)
    }
}

/// The four steps: 0, 1, 2, 3 standbys in the discovery file.
pub(super) fn measure(
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
                .map(|(a, b)| a.throttled_share_since(b))
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
