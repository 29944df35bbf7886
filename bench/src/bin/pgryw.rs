//! What PostgreSQL read-your-writes costs: pgbench through sluice (release binary) in front of
//! a PostgreSQL 15 primary and two asynchronous streaming standbys managed by sluice (the
//! failover test's set-up), as user `app` (read-your-writes off) and as user `ryw`
//! (`[[users]] read_your_writes = true`), one after the other on the same servers.
//!
//! Workloads (pgbench script files, `-n -M simple`), on a table `t` of 100,000 rows:
//! - write-then-read: an upsert of a random row, then a `SELECT` of that row;
//! - read-only: the `SELECT` alone.
//!
//! Reported per user, workload and client count: tps, average latency, failures, and where the
//! statements went (sluice's per-server read and write counters, `/metrics`, before and after).
//!
//! Usage: pgryw [--time SECS] [--clients 1,8]
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sluice_bench::machine;
use sluice_bench::pg::Pgbench;
use sluice_bench::pgmanaged::{http_get, pgbench_bin, pgbench_version, Managed, User};
use std::collections::BTreeMap;
use std::time::Duration;

/// Rows in `t`; the scripts pick ids in 1..=ROWS.
const ROWS: u32 = 100_000;

struct Opts {
    time: u32,
    clients: Vec<u32>,
}

fn main() {
    let mut o = Opts {
        time: 10,
        clients: vec![1, 8],
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().expect("a value after the option");
        match a.as_str() {
            "--time" => o.time = value().parse().expect("--time SECS"),
            "--clients" => {
                o.clients = value()
                    .split(',')
                    .map(|c| c.trim().parse().expect("--clients 1,8"))
                    .collect()
            }
            other => panic!("unknown argument {other} (--time SECS, --clients LIST)"),
        }
    }
    if let Err(e) = run(&o) {
        eprintln!("pgryw: {e}");
        std::process::exit(1);
    }
}

/// Statements each server answered, by sluice's counters: server → (reads, writes).
fn counters(admin: u16) -> Result<BTreeMap<String, (u64, u64)>, String> {
    let text = http_get(admin, "/metrics")?;
    let mut out: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for l in text.lines() {
        let (is_read, rest) = if let Some(r) = l.strip_prefix("sluice_server_reads_total{") {
            (true, r)
        } else if let Some(r) = l.strip_prefix("sluice_server_writes_total{") {
            (false, r)
        } else {
            continue;
        };
        let server = rest
            .split("server=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .ok_or_else(|| format!("no server label in {l:?}"))?;
        let n: u64 = rest
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("no value in {l:?}"))?;
        let e = out.entry(server.to_string()).or_default();
        if is_read {
            e.0 = n;
        } else {
            e.1 = n;
        }
    }
    Ok(out)
}

fn run(o: &Opts) -> Result<(), String> {
    let bin = pgbench_bin()?;
    println!("# machine: {}", machine());
    println!("# {} ({})", pgbench_version(&bin)?, bin.display());
    println!("# sluice: {}", sluice_bench::sluice_bin().display());
    let users = [
        User {
            name: "app",
            read_your_writes: false,
        },
        User {
            name: "ryw",
            read_your_writes: true,
        },
    ];
    let m = Managed::start(&users, |topo| {
        // One statement per call: psql -c runs several in one transaction, VACUUM cannot.
        for sql in [
            "CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL)".to_string(),
            format!("INSERT INTO t SELECT g, 0 FROM generate_series(1, {ROWS}) g"),
            "VACUUM ANALYZE t".to_string(),
        ] {
            topo.primary()
                .sql(&sql)
                .map_err(|e| format!("{sql}: {e}"))?;
        }
        Ok(())
    })?;
    let primary = m.topo.primary().addr();
    let standbys: Vec<String> = m.topo.replicas().iter().map(|s| s.addr()).collect();
    println!(
        "# primary {primary}, standbys {} (asynchronous streaming)",
        standbys.join(", ")
    );
    let dir = std::env::temp_dir().join(format!("pgryw-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let set = format!("\\set id random(1, {ROWS})\n");
    let select = "SELECT v FROM t WHERE id = :id;\n";
    let workloads = [
        (
            "write-then-read",
            format!(
                "{set}INSERT INTO t VALUES (:id, 1) ON CONFLICT (id) DO UPDATE SET v = t.v + 1;\n{select}"
            ),
        ),
        ("read-only", format!("{set}{select}")),
    ];
    println!(
        "\n| workload | clients | user | tps | avg latency (ms) | failed | reads on the primary | reads on standby 1 / 2 | writes on the primary |\n| --- | ---: | --- | ---: | ---: | ---: | ---: | --- | ---: |"
    );
    let result = (|| -> Result<(), String> {
        for (name, text) in &workloads {
            let script = dir.join(format!("{name}.sql"));
            std::fs::write(&script, text).map_err(|e| e.to_string())?;
            for &c in &o.clients {
                for u in &users {
                    let before = counters(m.admin)?;
                    let r = Pgbench {
                        bin: &bin,
                        port: m.port,
                        user: u.name,
                        password: u.name,
                        database: "postgres",
                        args: vec![
                            "-M".into(),
                            "simple".into(),
                            "-f".into(),
                            script.display().to_string(),
                            "-c".into(),
                            c.to_string(),
                            "-j".into(),
                            c.min(2).to_string(),
                            "-T".into(),
                            o.time.to_string(),
                        ],
                        log: None,
                        timeout: Duration::from_secs(u64::from(o.time) + 60),
                    }
                    .run()
                    .map_err(|e| format!("{e}\n{}", m.log_tail(30)))?;
                    let after = counters(m.admin)?;
                    let delta = |addr: &str| {
                        let a = after.get(addr).copied().unwrap_or_default();
                        let b = before.get(addr).copied().unwrap_or_default();
                        (a.0 - b.0, a.1 - b.1)
                    };
                    let on_standbys: Vec<String> =
                        standbys.iter().map(|s| delta(s).0.to_string()).collect();
                    let standby_writes: u64 = standbys.iter().map(|s| delta(s).1).sum();
                    if standby_writes > 0 {
                        return Err(format!("{standby_writes} writes went to a standby"));
                    }
                    println!(
                        "| {name} | {c} | {} | {:.0} | {:.3} | {} | {} | {} | {} |",
                        u.name,
                        r.tps,
                        r.avg_ms,
                        r.failed + r.aborted_clients,
                        delta(&primary).0,
                        on_standbys.join(" / "),
                        delta(&primary).1
                    );
                }
            }
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}
