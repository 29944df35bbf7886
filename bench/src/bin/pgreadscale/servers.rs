//! The PostgreSQL servers: psql against one of them, waiting for the standbys to replay the
//! primary's WAL, a server's committed transactions, and each server's processes in its CPU cgroup.

use super::*;

/// Runs `sql` with psql as `postgres` on `port` (bounded): its unaligned, tuples-only output.
pub(super) fn psql(port: u16, sql: &str) -> Result<String, String> {
    let mut cmd = Command::new(pg_bin_dir()?.join("psql"));
    cmd.args([
        "-h",
        "127.0.0.1",
        "-U",
        "postgres",
        "-d",
        "postgres",
        "-XAtq",
    ])
    .arg("-p")
    .arg(port.to_string())
    .arg("-c")
    .arg(sql)
    .env("PGCONNECT_TIMEOUT", "10");
    let (status, out, err) = run_bounded(cmd, Duration::from_secs(120))?;
    if !status.success() {
        return Err(format!("psql on port {port}: {sql:?}: {err}"));
    }
    Ok(out.trim().to_string())
}

/// Waits (at most 120 s) until every standby replayed the primary's current WAL position.
pub(super) fn wait_replayed(topo: &PgTopology) -> Result<(), String> {
    let lsn = psql(topo.primary().port, "SELECT pg_current_wal_lsn()")?;
    let q = format!("SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn");
    let deadline = Instant::now() + Duration::from_secs(120);
    for r in topo.replicas() {
        while psql(r.port, &q)? != "t" {
            if Instant::now() > deadline {
                return Err(format!(
                    "standby {} did not replay {lsn} in 120 s",
                    r.addr()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Ok(())
}

/// Transactions committed on a server, all databases (`pg_stat_database`).
pub(super) fn commits(port: u16) -> Result<u64, String> {
    let v = psql(port, "SELECT sum(xact_commit) FROM pg_stat_database")?;
    v.parse()
        .map_err(|_| format!("xact_commit on port {port}: {v:?}"))
}

/// Puts the postmaster `pid` and every process it already started into `cap`; returns how
/// many processes were moved. A process that ends meanwhile is skipped.
pub(super) fn cap_server(cap: &CpuCap, pid: u32) -> Result<usize, String> {
    cap.add(pid)?;
    let mut moved = 1;
    for p in process_tree(pid).into_iter().skip(1) {
        if cap.add(p).is_ok() {
            moved += 1;
        } else if Path::new(&format!("/proc/{p}")).exists() {
            return Err(format!("cannot move process {p} of postmaster {pid}"));
        }
    }
    Ok(moved)
}

/// Processes of the server with postmaster `pid` outside `cap` (0 if all are capped).
pub(super) fn uncapped(cap: &CpuCap, pid: u32) -> usize {
    let tasks: std::collections::HashSet<u32> = cap.tasks().into_iter().collect();
    process_tree(pid)
        .into_iter()
        .filter(|p| !tasks.contains(p) && Path::new(&format!("/proc/{p}")).exists())
        .count()
}
