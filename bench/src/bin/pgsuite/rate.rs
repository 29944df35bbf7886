//! CPU per transaction at an equal rate (`--equal-rate PCT`): the select-only runs of sluice
//! and PgBouncer (and the floor) again, each held by pgbench's `-R` to the same rate, PCT % of
//! what the slowest of them reached in the grid's round.
//!
//! Run flat out, a proxy's CPU per transaction depends on its rate as well as on its work:
//! the faster one handles more events per wake-up (more readiness events per `epoll_wait`,
//! fewer sleeps), and on a machine the proxy shares with the server and pgbench, a slower
//! proxy leaves CPUs idle more often, and waking a process on an idle CPU costs more. Held to
//! one rate, both proxies serve the same load the same way, and what differs is the work each
//! does per transaction.

use super::*;

/// One configuration's rate: `pct` % of the lowest tps any compared target reached in the
/// grid's round (a failed or aborted run leaves the configuration out), rounded down to a
/// multiple of 100, at least 100.
pub(super) fn equal_rates(grid: &[Row], compared: &[&str], pct: u32) -> Vec<(String, u32, u32)> {
    let mut out: Vec<(String, u32, u32)> = Vec::new();
    for row in grid.iter().filter(|r| r.workload == "select-only") {
        if out
            .iter()
            .any(|(m, c, _)| *m == row.mode && *c == row.clients)
        {
            continue;
        }
        let same: Vec<&Row> = grid
            .iter()
            .filter(|r| {
                r.workload == "select-only"
                    && r.mode == row.mode
                    && r.clients == row.clients
                    && compared.contains(&r.target)
            })
            .collect();
        let tps: Option<Vec<f64>> = same
            .iter()
            .map(|r| {
                r.result
                    .as_ref()
                    .ok()
                    .filter(|p| p.aborted_clients == 0)
                    .map(|p| p.tps)
            })
            .collect();
        let Some(lowest) = tps.and_then(|t| t.into_iter().reduce(f64::min)) else {
            continue;
        };
        let rate = (lowest * f64::from(pct) / 100.0 / 100.0).floor() as u32 * 100;
        out.push((row.mode.clone(), row.clients, rate.max(100)));
    }
    out
}

/// The equal-rate rounds: each configuration's rate, and every run in the order they ran.
pub(super) struct EqualRate {
    pub(super) pct: u32,
    pub(super) rates: Vec<(String, u32, u32)>,
    pub(super) rows: Vec<Row>,
}

/// Runs `rounds` rounds at the rates [`equal_rates`] sets from the grid: in each, every
/// compared target (`compared`) once per configuration, back to back; `run` runs one
/// (target, protocol, clients, rate).
pub(super) fn rounds(
    grid: &[Row],
    pct: u32,
    rounds: u32,
    targets: &mut [Target],
    compared: impl Fn(&str) -> bool,
    mut run: impl FnMut(&mut Target, &str, u32, u32) -> Result<Row, String>,
) -> Result<EqualRate, String> {
    let names: Vec<&str> = targets
        .iter()
        .map(|t| t.name)
        .filter(|&n| compared(n))
        .collect();
    let rates = equal_rates(grid, &names, pct);
    let per_round: usize = rates
        .iter()
        .map(|(m, _, _)| names.iter().filter(|n| runs(n, "select-only", m)).count())
        .sum();
    let total = per_round * rounds as usize;
    let mut rows = Vec::new();
    for _ in 0..rounds {
        for (mode, c, r) in &rates {
            for t in targets
                .iter_mut()
                .filter(|t| compared(t.name) && runs(t.name, "select-only", mode))
            {
                let row = run(t, mode, *c, *r)?;
                progress(rows.len() + 1, total, &row);
                rows.push(row);
            }
        }
    }
    Ok(EqualRate { pct, rates, rows })
}

impl EqualRate {
    fn rate(&self, c: &CpuCompared) -> u32 {
        self.rates
            .iter()
            .find(|(m, n, _)| *m == c.mode && *n == c.clients)
            .map_or(0, |r| r.2)
    }

    /// The median user-mode CPU of `target`'s runs of a configuration without aborted
    /// clients.
    fn user(&self, c: &CpuCompared, target: &str) -> Option<f64> {
        let user: Vec<f64> = self
            .rows
            .iter()
            .filter(|r| r.mode == c.mode && r.clients == c.clients && r.target == target)
            .filter(|r| r.result.as_ref().is_ok_and(|p| p.aborted_clients == 0))
            .filter_map(|r| r.user_us_per_txn)
            .collect();
        median(&user)
    }

    /// The lowest share of its rate any run of a configuration reached (pgbench falls behind
    /// a rate the target cannot serve).
    fn kept_up(&self, c: &CpuCompared) -> Option<f64> {
        let rate = f64::from(self.rate(c));
        self.rows
            .iter()
            .filter(|r| r.mode == c.mode && r.clients == c.clients)
            .filter_map(|r| Some(r.result.as_ref().ok()?.tps / rate))
            .reduce(f64::min)
    }

    pub(super) fn print_rounds(&self) {
        if self.rows.is_empty() {
            return;
        }
        println!();
        println!("Proxy CPU µs per select-only transaction at an equal rate (pgbench -R: {} % of the slowest compared target's tps in the grid round), in rounds (each round runs every target back to back; rounds where either had aborted clients are left out; *kept up*: the lowest tps / rate of any run):", self.pct);
        println!();
        let compared = cpu_compared(&self.rows);
        let floor = compared.iter().any(|c| !c.floor.is_empty());
        let (head, rule) = if floor {
            (" floor median | floor user |", " ---: | ---: |")
        } else {
            ("", "")
        };
        println!("| protocol | clients | rate | kept up | sluice median | sluice each | PgBouncer median | PgBouncer each | sluice / PgBouncer each round | user µs, medians: sluice / PgBouncer |{head}");
        println!("| --- | ---: | ---: | ---: | ---: | --- | ---: | --- | --- | --- |{rule}");
        for c in &compared {
            let floor_cells = if floor {
                format!(
                    " {} | {} |",
                    fmt_opt(median(&c.floor), 1),
                    fmt_opt(self.user(c, "floor"), 1)
                )
            } else {
                String::new()
            };
            println!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} |{floor_cells}",
                c.mode,
                c.clients,
                self.rate(c),
                self.kept_up(c)
                    .map_or("—".into(), |k| format!("{:.1} %", k * 100.0)),
                fmt_opt(median(&c.sluice), 1),
                joined(&c.sluice, 1),
                fmt_opt(median(&c.pgbouncer), 1),
                joined(&c.pgbouncer, 1),
                joined(&c.ratios(), 2),
                fmt_opt(self.user(c, "sluice"), 1),
                fmt_opt(self.user(c, "pgbouncer"), 1),
            );
        }
    }

    /// The goals' line for the equal-rate rounds.
    pub(super) fn print_goal(&self) {
        let (below, cells) = goal_cells(&cpu_compared(&self.rows), |c| {
            format!(" at {} tps", self.rate(c))
        });
        if !cells.is_empty() {
            println!(
                "- the same at an equal rate: sluice below PgBouncer in {below} of {} configurations ({}; µs, medians)",
                cells.len(),
                cells.join("; ")
            );
        }
    }
}
