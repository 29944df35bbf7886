//! Connect per transaction (`-C`): every round's runs, each target's median run, and their
//! table.

use super::*;

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
    pub(super) fn paired(&self, clients: u32, a: &str, b: &str) -> Vec<f64> {
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
