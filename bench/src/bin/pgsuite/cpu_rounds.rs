//! The CPU comparison with PgBouncer in rounds: each configuration's select-only runs paired
//! round by round, the goal's cells, and the rounds' table.

use super::*;

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
