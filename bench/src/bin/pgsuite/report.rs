//! What pgsuite prints: the tables, the goals' verdicts and the charts.

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

/// One configuration's comparison: each target's CPU µs per transaction, round by round.
pub(super) struct CpuCompared {
    pub(super) mode: String,
    pub(super) clients: u32,
    pub(super) sluice: Vec<f64>,
    pub(super) pgbouncer: Vec<f64>,
    /// The floor's (bench/src/bin/pgfloor.rs) in every round it ran, when it was a target.
    pub(super) floor: Vec<f64>,
}

impl CpuCompared {
    /// sluice's CPU over PgBouncer's, round by round (a round's two runs ran back to back).
    pub(super) fn ratios(&self) -> Vec<f64> {
        ratios(&self.sluice, &self.pgbouncer)
    }

    /// This configuration's cell in a CPU goal's line (`at` after its name, e.g. the rate)
    /// and whether sluice's median is below PgBouncer's; `None` without both medians.
    pub(super) fn goal_cell(&self, at: &str) -> Option<(bool, String)> {
        let (s, b) = (median(&self.sluice)?, median(&self.pgbouncer)?);
        let ratios = self.ratios();
        let cell = format!(
            "{}/{}{at}: {s:.1} vs {b:.1}, below in {} of {} rounds",
            self.mode,
            self.clients,
            ratios.iter().filter(|&&r| r < 1.0).count(),
            ratios.len()
        );
        Some((s < b, cell))
    }
}

/// The cells of a CPU goal's line over `compared` (see [`CpuCompared::goal_cell`]), and in
/// how many configurations sluice's median was below PgBouncer's.
pub(super) fn goal_cells(
    compared: &[CpuCompared],
    at: impl Fn(&CpuCompared) -> String,
) -> (usize, Vec<String>) {
    let mut below = 0;
    let cells = compared
        .iter()
        .filter_map(|c| c.goal_cell(&at(c)))
        .map(|(is_below, cell)| {
            below += usize::from(is_below);
            cell
        })
        .collect();
    (below, cells)
}

/// `a` over `b`, pair by pair.
fn ratios(a: &[f64], b: &[f64]) -> Vec<f64> {
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

/// From the select-only runs of sluice and PgBouncer in the order they ran (round by round,
/// the grid's first), per protocol and clients in the order they first ran: both targets'
/// CPU per transaction in each round where both ran without aborted clients.
pub(super) fn cpu_compared(all: &[Row]) -> Vec<CpuCompared> {
    let usable = |r: &Row| r.result.as_ref().is_ok_and(|r| r.aborted_clients == 0);
    let mut out: Vec<CpuCompared> = Vec::new();
    for row in all {
        if out
            .iter()
            .any(|c| c.mode == row.mode && c.clients == row.clients)
        {
            continue;
        }
        let series = |t: &str| -> Vec<Option<f64>> {
            all.iter()
                .filter(|r| r.mode == row.mode && r.clients == row.clients && r.target == t)
                .map(|r| r.cpu_us_per_txn.filter(|_| usable(r)))
                .collect()
        };
        let (sluice, pgbouncer) = series("sluice")
            .into_iter()
            .zip(series("pgbouncer"))
            .filter_map(|(s, b)| Some((s?, b?)))
            .unzip();
        out.push(CpuCompared {
            mode: row.mode.clone(),
            clients: row.clients,
            sluice,
            pgbouncer,
            floor: series("floor").into_iter().flatten().collect(),
        });
    }
    out
}

pub(super) fn print_cpu_rounds(compared: &[CpuCompared]) {
    if compared.iter().all(|c| c.sluice.is_empty()) {
        return;
    }
    println!();
    println!("Proxy CPU µs per select-only transaction, sluice and PgBouncer in rounds (each round runs both back to back; rounds where either had aborted clients are left out; medians compared):");
    println!();
    // The floor's columns only when it ran.
    let floor = compared.iter().any(|c| !c.floor.is_empty());
    let (head, rule) = if floor {
        (" floor median | floor each |", " ---: | --- |")
    } else {
        ("", "")
    };
    println!("| protocol | clients | rounds | sluice median | sluice each | PgBouncer median | PgBouncer each | sluice / PgBouncer each round |{head}");
    println!("| --- | ---: | ---: | ---: | --- | ---: | --- | --- |{rule}");
    for c in compared.iter().filter(|c| !c.sluice.is_empty()) {
        let floor_cells = if floor {
            format!(
                " {} | {} |",
                fmt_opt(median(&c.floor), 1),
                joined(&c.floor, 1)
            )
        } else {
            String::new()
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |{floor_cells}",
            c.mode,
            c.clients,
            c.sluice.len(),
            fmt_opt(median(&c.sluice), 1),
            joined(&c.sluice, 1),
            fmt_opt(median(&c.pgbouncer), 1),
            joined(&c.pgbouncer, 1),
            joined(&c.ratios(), 2)
        );
    }
}

/// The `-C` runs of every round, and each target's median round.
pub(super) struct ConnectRuns {
    /// In the order they ran: round by round, clients by clients, target by target.
    pub(super) all: Vec<Row>,
    /// Per clients and target, the run of median tps (the lower middle of an even count).
    pub(super) medians: Vec<Row>,
}

impl ConnectRuns {
    pub(super) fn new(all: Vec<Row>) -> ConnectRuns {
        let mut medians: Vec<Row> = Vec::new();
        for row in &all {
            if medians
                .iter()
                .any(|m| m.clients == row.clients && m.target == row.target)
            {
                continue;
            }
            let mut same: Vec<&Row> = all
                .iter()
                .filter(|r| r.clients == row.clients && r.target == row.target)
                .collect();
            same.sort_by(|a, b| Self::tps(a).total_cmp(&Self::tps(b)));
            medians.push(same[(same.len() - 1) / 2].clone());
        }
        ConnectRuns { all, medians }
    }

    /// A run's tps; a failed run counts as 0.
    fn tps(r: &Row) -> f64 {
        r.result.as_ref().map_or(0.0, |r| r.tps)
    }

    /// Every run's tps for `clients` and `target`, in round order.
    fn series(&self, clients: u32, target: &str) -> Vec<f64> {
        self.all
            .iter()
            .filter(|r| r.clients == clients && r.target == target)
            .map(Self::tps)
            .collect()
    }

    /// "min–max" of the runs' tps.
    fn spread(&self, clients: u32, target: &str) -> String {
        let v = self.series(clients, target);
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        let max = v.iter().copied().fold(0.0, f64::max);
        format!("{min:.0}–{max:.0}")
    }

    /// `a`'s tps over `b`'s, round by round (runs of one round ran back to back).
    fn paired(&self, clients: u32, a: &str, b: &str) -> Vec<f64> {
        ratios(&self.series(clients, a), &self.series(clients, b))
    }
}

pub(super) fn print_connect_table(connect: &ConnectRuns) {
    let rows = &connect.medians;
    if rows.is_empty() {
        return;
    }
    let runs = connect.all.len() / rows.len();
    println!();
    println!("Connect per transaction (pgbench -C -b select-only -M simple, a thread per client, SCRAM-SHA-256 login each time; {runs} rounds, each target once a round in turn, the median round shown):");
    println!();
    println!("| clients | target | tps (connect + SELECT + close) | tps min–max | vs direct | avg ms | proxy CPU µs/txn | server CPU µs/txn | pgbench CPU µs/txn | failed |");
    println!("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for row in rows {
        match &row.result {
            Err(_) => println!(
                "| {} | {} | failed | {} | — | — | — | — | — | run failed |",
                row.clients,
                row.target,
                connect.spread(row.clients, row.target)
            ),
            Ok(r) => println!(
                "| {} | {} | {} | {} | {} | {:.3} | {} | {} | {} | {} |",
                row.clients,
                row.target,
                tps_cell(r),
                connect.spread(row.clients, row.target),
                if r.aborted_clients > 0 {
                    "—".into()
                } else {
                    vs_direct(rows, row, r.tps)
                },
                r.avg_ms,
                fmt_opt(row.cpu_us_per_txn, 1),
                fmt_opt(row.server_us_per_txn, 1),
                fmt_opt(row.client_us_per_txn, 1),
                failed_cell(r)
            ),
        }
    }
    println!();
    let mut clients: Vec<u32> = rows.iter().map(|r| r.clients).collect();
    clients.dedup();
    for c in clients {
        for (a, b) in [("sluice", "direct"), ("sluice", "pgbouncer")] {
            let ratios = connect.paired(c, a, b);
            if !ratios.is_empty() {
                println!(
                    "- {c} clients, {a} / {b}, round by round: {}",
                    joined(&ratios, 2)
                );
            }
        }
    }
    print_failures(rows);
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
