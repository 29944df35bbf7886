//! What pgsuite prints: the main table, the runs at scale, the goals' verdicts and the charts,
//! and the cells and numbers every table uses (the CPU rounds' table is in `cpu_rounds.rs`, the
//! connect per transaction table in `connect_runs.rs`).

use super::*;

pub(super) fn tps_of(
    rows: &[Row],
    workload: &str,
    mode: &str,
    clients: u32,
    target: &str,
) -> Option<f64> {
    rows.iter()
        .find(|r| {
            r.workload == workload && r.mode == mode && r.clients == clients && r.target == target
        })
        .and_then(|r| r.result.as_ref().ok())
        .map(|r| r.tps)
}

pub(super) fn row_of<'a>(
    rows: &'a [Row],
    workload: &str,
    mode: &str,
    clients: u32,
    target: &str,
) -> Option<&'a Row> {
    rows.iter().find(|r| {
        r.workload == workload && r.mode == mode && r.clients == clients && r.target == target
    })
}

pub(super) fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map(|v| format!("{v:.digits$}"))
        .unwrap_or_else(|| "—".into())
}

/// The proxy's CPU per transaction; marked † when it covers the whole run, logins included
/// (no steady state was seen).
pub(super) fn cpu_cell(row: &Row) -> String {
    match row.cpu_us_per_txn {
        Some(c) if row.cpu_steady => format!("{c:.1}"),
        Some(c) => format!("{c:.1}†"),
        None => "—".into(),
    }
}

/// tps, marked ¹ when clients aborted (then it is what the others did before the end).
pub(super) fn tps_cell(r: &PgbenchResult) -> String {
    if r.aborted_clients > 0 {
        format!("{:.0}¹", r.tps)
    } else {
        format!("{:.0}", r.tps)
    }
}

pub(super) fn failed_cell(r: &PgbenchResult) -> String {
    if r.aborted_clients > 0 {
        format!("{} (+{} clients aborted)", r.failed, r.aborted_clients)
    } else {
        r.failed.to_string()
    }
}

pub(super) fn vs_direct(rows: &[Row], row: &Row, tps: f64) -> String {
    if row.target == "direct" {
        return "1.00".into();
    }
    tps_of(rows, &row.workload, &row.mode, row.clients, "direct")
        .filter(|&d| d > 0.0)
        .map(|d| format!("{:.2}", tps / d))
        .unwrap_or_else(|| "—".into())
}

pub(super) fn print_failures(rows: &[Row]) {
    let mut notes: Vec<String> = Vec::new();
    for r in rows {
        match &r.result {
            Err(e) => notes.push(format!(
                "- {} -M {} {} clients {}: {e}",
                r.workload, r.mode, r.clients, r.target
            )),
            Ok(res) if res.aborted_clients > 0 => notes.push(format!(
                "- ¹ {} -M {} {} clients {}: {} of {} clients aborted (the tps counts what every client did until it aborted or the run ended); first error: `{}`",
                r.workload,
                r.mode,
                r.clients,
                r.target,
                res.aborted_clients,
                r.clients,
                res.first_error.as_deref().unwrap_or("?")
            )),
            Ok(_) => {}
        }
    }
    if !notes.is_empty() {
        println!("\nFailed runs and aborted clients:");
        for n in notes {
            println!("{n}");
        }
    }
}

pub(super) fn print_table(rows: &[Row]) {
    if rows.is_empty() {
        return;
    }
    println!();
    println!("| workload | protocol | clients | target | tps | vs direct | avg ms | p99 ms | proxy CPU µs/txn | of it user | failed |");
    println!("| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for row in rows {
        match &row.result {
            Err(_) => println!(
                "| {} | {} | {} | {} | failed | — | — | — | — | — | run failed |",
                row.workload, row.mode, row.clients, row.target
            ),
            Ok(r) => println!(
                "| {} | {} | {} | {} | {} | {} | {:.3} | {} | {} | {} | {} |",
                row.workload,
                row.mode,
                row.clients,
                row.target,
                tps_cell(r),
                if r.aborted_clients > 0 {
                    "—".into()
                } else {
                    vs_direct(rows, row, r.tps)
                },
                r.avg_ms,
                fmt_opt(r.p99_ms, 3),
                cpu_cell(row),
                fmt_opt(row.user_us_per_txn, 1),
                failed_cell(r)
            ),
        }
    }
    print_failures(rows);
}

/// `a` over `b`, pair by pair.
pub(super) fn ratios(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter()
        .zip(b)
        .map(|(x, y)| x / y.max(f64::MIN_POSITIVE))
        .collect()
}

/// The values with `digits` decimals, comma-separated.
pub(super) fn joined(v: &[f64], digits: usize) -> String {
    let s: Vec<String> = v.iter().map(|x| format!("{x:.digits$}")).collect();
    s.join(", ")
}

/// The median (the mean of the middle two of an even count); `None` for no values.
pub(super) fn median(v: &[f64]) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => v.get(n / 2).copied(),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

pub(super) fn print_many(o: &Opts, many: &[ManyResult]) {
    if many.is_empty() {
        return;
    }
    println!();
    println!(
        "{} clients on at most {} server connections (pgbench -b select-only -M simple -c {} -j 2 -T {}; tps without the initial connection time; proxy CPU from the moment all clients were connected):",
        o.many_clients,
        o.server_connections,
        o.many_clients,
        duration(o, o.many_clients)
    );
    println!();
    println!("| proxy | clients | server connections allowed | most server connections seen | tps | avg ms | p99 ms | logins took | proxy CPU µs/txn | failed | aborted clients |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for m in many {
        match &m.result {
            Ok(r) => println!(
                "| {} | {} | {} | {} ({} samples) | {:.0} | {:.3} | {} | {:.1} s | {} | {} | {} |",
                m.proxy,
                o.many_clients,
                o.server_connections,
                m.max_server_connections,
                m.samples,
                r.tps,
                r.avg_ms,
                fmt_opt(r.p99_ms, 3),
                r.connect_ms / 1000.0,
                fmt_opt(m.cpu_us_per_txn, 1),
                r.failed,
                r.aborted_clients
            ),
            Err(e) => println!(
                "| {} | {} | {} | {} ({} samples) | failed: {e} | — | — | — | — | — | — |",
                m.proxy, o.many_clients, o.server_connections, m.max_server_connections, m.samples
            ),
        }
        if let Ok(r) = &m.result {
            if let Some(e) = &r.first_error {
                println!("\n{}: first error: `{e}`", m.proxy);
            }
        }
        if let Some(e) = &m.sample_error {
            println!("\n{}: sampling pg_stat_activity failed: {e}", m.proxy);
        }
    }
}

pub(super) fn print_idle(o: &Opts, idle: &[(&'static str, Result<IdleResult, String>)]) {
    if idle.is_empty() {
        return;
    }
    println!();
    println!(
        "Idle clients ({} logged-in connections, SCRAM-SHA-256, held open; RSS = VmRSS):",
        o.idle
    );
    println!();
    println!("| proxy | idle clients | RSS before | RSS with them idle | bytes per idle client | RSS after one SELECT 1 each | bytes per client after a query | logins took |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (name, r) in idle {
        match r {
            Ok(r) => println!(
                "| {name} | {} | {} KiB | {} KiB | {:.0} | {} KiB | {:.0} | {:.1} s |",
                r.clients,
                r.rss_before / 1024,
                r.rss_idle / 1024,
                per_client(r.rss_idle, r.rss_before, r.clients),
                r.rss_after_query / 1024,
                per_client(r.rss_after_query, r.rss_before, r.clients),
                r.login_secs
            ),
            Err(e) => println!("| {name} | failed: {e} | — | — | — | — | — | — |"),
        }
    }
}

pub(super) fn per_client(after: u64, before: u64, n: u64) -> f64 {
    (after as f64 - before as f64) / n.max(1) as f64
}

pub(super) fn print_goals(
    o: &Opts,
    cpu: &[CpuCompared],
    connect: &ConnectRuns,
    many: &[ManyResult],
    idle: &[(&'static str, Result<IdleResult, String>)],
) {
    println!();
    println!("Goals:");
    // CPU per select-only transaction: sluice against PgBouncer, medians of the rounds.
    let (wins, cmp) = goal_cells(cpu, |_| String::new());
    if !cmp.is_empty() {
        println!(
            "- sluice CPU per select-only transaction below PgBouncer's: {wins} of {} configurations ({}; µs, medians of {} rounds)",
            cmp.len(),
            cmp.join("; "),
            o.cpu_runs
        );
    }
    for &c in &o.connect_clients {
        let tps = |t: &str| {
            connect
                .medians
                .iter()
                .find(|r| r.clients == c && r.target == t)
                .and_then(|r| r.result.as_ref().ok())
                .map(|r| r.tps)
        };
        if let (Some(s), Some(d)) = (tps("sluice"), tps("direct")) {
            let b = tps("pgbouncer");
            println!(
                "- -C at {c} clients: sluice {s:.0} tps = {:.2}× direct (goal ≥ 10×){}",
                s / d.max(f64::MIN_POSITIVE),
                b.map(|b| {
                    let rounds = connect.paired(c, "sluice", "pgbouncer");
                    format!(
                        "; PgBouncer {b:.0} tps ({:.2}× direct): sluice {} (medians), ahead in {} of {} rounds",
                        b / d.max(f64::MIN_POSITIVE),
                        if s > b { "ahead" } else { "behind" },
                        rounds.iter().filter(|&&r| r > 1.0).count(),
                        rounds.len()
                    )
                })
                .unwrap_or_default()
            );
        }
    }
    for m in many {
        match &m.result {
            Ok(r) => println!(
                "- {} clients through {} on ≤ {} server connections: most seen {}, {:.0} tps, {} failed, {} aborted clients",
                o.many_clients,
                m.proxy,
                o.server_connections,
                m.max_server_connections,
                r.tps,
                r.failed,
                r.aborted_clients
            ),
            Err(e) => println!("- {} clients through {}: failed: {e}", o.many_clients, m.proxy),
        }
    }
    for (name, r) in idle {
        if let Ok(r) = r {
            println!(
                "- idle client memory, {name}: {:.0} B per client (goal < 2048 B for sluice)",
                per_client(r.rss_idle, r.rss_before, r.clients)
            );
        }
    }
}

pub(super) fn write_plots(
    rows: &[Row],
    targets: &[&'static str],
    o: &Opts,
    dir: &Path,
) -> Result<(), String> {
    if rows.is_empty() {
        return Ok(());
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut clients = o.clients.clone();
    clients.sort_unstable();
    clients.dedup();
    println!();
    for w in &o.workloads {
        for mode in &o.modes {
            let series = targets
                .iter()
                .map(|t| Series {
                    name: t.to_string(),
                    points: clients
                        .iter()
                        .filter(|&&c| {
                            row_of(rows, w, mode, c, t).is_some_and(|r| {
                                r.result.as_ref().is_ok_and(|r| r.aborted_clients == 0)
                            })
                        })
                        .filter_map(|&c| tps_of(rows, w, mode, c, t).map(|q| (f64::from(c), q)))
                        .collect(),
                })
                .filter(|s| !s.points.is_empty())
                .collect();
            let title = format!("pgbench {w}, -M {mode} (runs with aborted clients left out)");
            let chart = Chart {
                title: &title,
                x_label: "clients",
                y_label: "transactions per second",
                log_x: true,
                series,
            };
            let path = dir.join(format!("pg-{w}-{mode}.svg"));
            std::fs::write(&path, chart.svg())
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            println!("plot: {}", path.display());
        }
    }
    Ok(())
}
