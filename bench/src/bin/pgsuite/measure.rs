//! One pgbench run measured: the proxy's CPU time (over the steady state, once every client is
//! connected), the server's and pgbench's around it, and the run's progress line.

use super::*;

/// One pgbench run against one target.
#[derive(Clone)]
pub(super) struct Row {
    pub(super) workload: String,
    pub(super) mode: String,
    pub(super) clients: u32,
    pub(super) target: &'static str,
    pub(super) result: Result<PgbenchResult, String>,
    pub(super) cpu_us_per_txn: Option<f64>,
    /// The part of `cpu_us_per_txn` spent in user mode (over the steady state only).
    pub(super) user_us_per_txn: Option<f64>,
    /// The server's CPU (postmaster and every backend) per transaction.
    pub(super) server_us_per_txn: Option<f64>,
    /// pgbench's own CPU per transaction.
    pub(super) client_us_per_txn: Option<f64>,
    /// `cpu_us_per_txn` is over the steady state (after the logins), not the whole run.
    pub(super) cpu_steady: bool,
}

/// CPU µs per transaction between the `before` and `after` readings, for a run that did
/// any.
fn per_txn(
    before: Option<u64>,
    after: Option<u64>,
    r: &Result<PgbenchResult, String>,
) -> Option<f64> {
    match (r, before, after) {
        (Ok(r), Some(b), Some(a)) if r.transactions > 0 => {
            Some(a.saturating_sub(b) as f64 / r.transactions as f64)
        }
        _ => None,
    }
}

/// CPU time of this process's reaped children (pgbench, once it has exited), µs.
fn children_cpu_micros() -> Option<u64> {
    // SAFETY: getrusage writes into the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) } != 0 {
        return None;
    }
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    Some(us(ru.ru_utime) + us(ru.ru_stime))
}

/// Established TCP connections whose local port is `port`: a listener's accepted clients.
fn accepted_on(port: u16) -> usize {
    let suffix = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .map(|f| {
            std::fs::read_to_string(f)
                .unwrap_or_default()
                .lines()
                .skip(1)
                .filter(|l| {
                    let f: Vec<&str> = l.split_whitespace().take(4).collect();
                    f.len() == 4 && f[1].ends_with(&suffix) && f[3] == "01"
                })
                .count()
        })
        .sum()
}

/// Now, µs since the epoch.
fn epoch_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Runs `run` while watching `port` until `clients` connections are established to it; then
/// notes the proxy's (`pid`) CPU time and the moment: the start of the steady state, after
/// the logins.
pub(super) fn run_watched<T: Send>(
    pid: Option<u32>,
    port: u16,
    clients: u32,
    limit: Duration,
    run: impl FnOnce() -> T + Send,
) -> (T, Option<(u64, u64, u64)>) {
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let done = &done;
        let watcher = s.spawn(move || {
            let pid = pid?;
            let deadline = Instant::now() + limit;
            while !done.load(Ordering::Relaxed) && Instant::now() < deadline {
                if accepted_on(port) >= clients as usize {
                    let user = tree_user_micros(pid)?;
                    return Some((tree_cpu_micros(pid)?, user, epoch_us()));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            None
        });
        let out = run();
        done.store(true, Ordering::Relaxed);
        (out, watcher.join().ok().flatten())
    })
}

/// The proxy's CPU per transaction from the steady-state snapshot to the end, or over the
/// whole run (logins included) without one; and whether it is the steady state.
pub(super) fn proxy_cpu_per_txn(
    snap: Option<(u64, u64, u64)>,
    before: Option<u64>,
    after: Option<u64>,
    result: &Result<PgbenchResult, String>,
) -> (Option<f64>, bool) {
    if let (Some((cpu0, _, at)), Some(a), Ok(r)) = (snap, after, result) {
        if let Some(n) = r.transactions_after(at).filter(|&n| n > 0.0) {
            return (Some(a.saturating_sub(cpu0) as f64 / n), true);
        }
    }
    (per_txn(before, after, result), false)
}

/// Runs one pgbench against a target, with the proxy's, the server's and pgbench's CPU time
/// around it; `steady`: the proxy's CPU from the moment every client is connected.
pub(super) fn measure(
    t: &mut Target,
    server: &PgServer,
    bench: &Pgbench<'_>,
    workload: &str,
    mode: &str,
    clients: u32,
    steady: bool,
) -> Row {
    let pid = t.proc.as_ref().map(Proc::pid).filter(|_| steady);
    let before = t.cpu();
    let server_before = tree_cpu_micros(server.pid());
    let client_before = children_cpu_micros();
    let unusable = t.unusable();
    let (result, snap) = run_watched(pid, t.port, clients, bench.timeout, || match unusable {
        Some(e) => Err(e),
        None => bench.run(),
    });
    let client_after = children_cpu_micros();
    let after = t.cpu();
    let user_after = t.cpu_user();
    let server_after = tree_cpu_micros(server.pid());
    let result = match (result, t.unusable()) {
        (Ok(_), Some(e)) => Err(format!("{e} during the run")),
        (r, _) => r,
    };
    let (cpu, steady) = proxy_cpu_per_txn(snap, before, after, &result);
    // The user-mode part over the same steady window.
    let user = match (snap, user_after, &result) {
        (Some((_, user0, at)), Some(u), Ok(r)) => r
            .transactions_after(at)
            .filter(|&n| n > 0.0)
            .map(|n| u.saturating_sub(user0) as f64 / n),
        _ => None,
    };
    Row {
        workload: workload.to_string(),
        mode: mode.to_string(),
        clients,
        target: t.name,
        cpu_us_per_txn: cpu,
        user_us_per_txn: user,
        cpu_steady: steady,
        server_us_per_txn: per_txn(server_before, server_after, &result),
        client_us_per_txn: per_txn(client_before, client_after, &result),
        result,
    }
}

/// Prints run `n` of `total`'s line: its tps, latencies, the proxy's CPU, failures.
pub(super) fn progress(n: usize, total: usize, row: &Row) {
    match &row.result {
        Ok(r) => eprintln!(
            "[{n}/{total}] {:<14} {:<8} {:>4} clients {:<9} {:>8.0} tps  avg {:>7.3} ms  p99 {:>8} ms  cpu/txn {:>8}  failed {}{}",
            row.workload,
            row.mode,
            row.clients,
            row.target,
            r.tps,
            r.avg_ms,
            r.p99_ms.map(|p| format!("{p:.3}")).unwrap_or("-".into()),
            row.cpu_us_per_txn
                .map(|c| match row.user_us_per_txn {
                    Some(u) => format!("{c:.1} us ({u:.1} user)"),
                    None => format!("{c:.1} us"),
                })
                .unwrap_or("-".into()),
            r.failed,
            if r.aborted_clients > 0 {
                format!(
                    "  ABORTED CLIENTS {}: {}",
                    r.aborted_clients,
                    r.first_error.as_deref().unwrap_or("")
                )
            } else {
                String::new()
            }
        ),
        Err(e) => eprintln!(
            "[{n}/{total}] {:<14} {:<8} {:>4} clients {:<9} FAILED: {e}",
            row.workload, row.mode, row.clients, row.target
        ),
    }
}
