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

/// A run at a rate: the rate, and the run.
pub(super) type Rated = (u32, Row);

/// The CPU values of `target`'s runs for one configuration, in round order (runs with
/// aborted clients or without a steady-state figure left out), and the user-mode part.
fn series(rated: &[Rated], mode: &str, clients: u32, target: &str) -> (Vec<f64>, Vec<f64>) {
    rated
        .iter()
        .map(|(_, r)| r)
        .filter(|r| r.mode == mode && r.clients == clients && r.target == target)
        .filter(|r| r.result.as_ref().is_ok_and(|p| p.aborted_clients == 0))
        .filter_map(|r| Some((r.cpu_us_per_txn?, r.user_us_per_txn?)))
        .unzip()
}

/// The lowest share of its rate any run of the configuration reached (pgbench falls behind a
/// rate the target cannot serve).
fn kept_up(rated: &[Rated], mode: &str, clients: u32) -> Option<f64> {
    rated
        .iter()
        .filter(|(_, r)| r.mode == mode && r.clients == clients)
        .filter_map(|(rate, r)| Some(r.result.as_ref().ok()?.tps / f64::from(*rate)))
        .reduce(f64::min)
}

/// The configurations in the order they first ran, with their rates.
fn configurations(rated: &[Rated]) -> Vec<(String, u32, u32)> {
    let mut out: Vec<(String, u32, u32)> = Vec::new();
    for (rate, r) in rated {
        if !out.iter().any(|(m, c, _)| *m == r.mode && *c == r.clients) {
            out.push((r.mode.clone(), r.clients, *rate));
        }
    }
    out
}

pub(super) fn print_rate_rounds(rated: &[Rated], pct: u32) {
    if rated.is_empty() {
        return;
    }
    println!();
    println!("Proxy CPU µs per select-only transaction at an equal rate (pgbench -R: {pct} % of the slowest compared target's tps in the grid round), in rounds (each round runs every target back to back; runs with aborted clients are left out; *kept up*: the lowest tps / rate of any run):");
    println!();
    let floor = rated.iter().any(|(_, r)| r.target == "floor");
    let (head, rule) = if floor {
        (" floor median | floor user |", " ---: | ---: |")
    } else {
        ("", "")
    };
    println!("| protocol | clients | rate | kept up | sluice median | sluice each | PgBouncer median | PgBouncer each | sluice / PgBouncer each round | user µs, medians: sluice / PgBouncer |{head}");
    println!("| --- | ---: | ---: | ---: | ---: | --- | ---: | --- | --- | --- |{rule}");
    for (mode, clients, rate) in configurations(rated) {
        let (s, su) = series(rated, &mode, clients, "sluice");
        let (b, bu) = series(rated, &mode, clients, "pgbouncer");
        let floor_cells = if floor {
            let (f, fu) = series(rated, &mode, clients, "floor");
            format!(
                " {} | {} |",
                fmt_opt(median(&f), 1),
                fmt_opt(median(&fu), 1)
            )
        } else {
            String::new()
        };
        println!(
            "| {mode} | {clients} | {rate} | {} | {} | {} | {} | {} | {} | {} / {} |{floor_cells}",
            kept_up(rated, &mode, clients).map_or("—".into(), |k| format!("{:.1} %", k * 100.0)),
            fmt_opt(median(&s), 1),
            joined(&s, 1),
            fmt_opt(median(&b), 1),
            joined(&b, 1),
            joined(&paired_ratios(rated, &mode, clients), 2),
            fmt_opt(median(&su), 1),
            fmt_opt(median(&bu), 1),
        );
    }
}

/// sluice's CPU over PgBouncer's in each round where both have a figure (rounds are told
/// apart by order: the n-th run of each in the configuration).
fn paired_ratios(rated: &[Rated], mode: &str, clients: u32) -> Vec<f64> {
    let each = |t: &str| -> Vec<Option<f64>> {
        rated
            .iter()
            .map(|(_, r)| r)
            .filter(|r| r.mode == mode && r.clients == clients && r.target == t)
            .map(|r| {
                r.cpu_us_per_txn
                    .filter(|_| r.result.as_ref().is_ok_and(|p| p.aborted_clients == 0))
            })
            .collect()
    };
    each("sluice")
        .into_iter()
        .zip(each("pgbouncer"))
        .filter_map(|(s, b)| Some(s? / b?.max(f64::MIN_POSITIVE)))
        .collect()
}

/// The goals' line for the equal-rate rounds.
pub(super) fn print_goal(rated: &[Rated]) {
    let mut cells = Vec::new();
    let (mut below, mut total) = (0, 0);
    for (mode, clients, rate) in configurations(rated) {
        let (s, _) = series(rated, &mode, clients, "sluice");
        let (b, _) = series(rated, &mode, clients, "pgbouncer");
        if let (Some(s), Some(b)) = (median(&s), median(&b)) {
            total += 1;
            if s < b {
                below += 1;
            }
            let ratios = paired_ratios(rated, &mode, clients);
            cells.push(format!(
                "{mode}/{clients} at {rate} tps: {s:.1} vs {b:.1}, below in {} of {} rounds",
                ratios.iter().filter(|&&r| r < 1.0).count(),
                ratios.len()
            ));
        }
    }
    if total > 0 {
        println!(
            "- the same at an equal rate: sluice below PgBouncer in {below} of {total} configurations ({}; µs, medians)",
            cells.join("; ")
        );
    }
}
