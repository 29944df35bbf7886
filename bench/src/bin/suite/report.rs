//! What suite prints after the runs: the table, the summary at one thread count, and the
//! charts.

use super::*;

/// The thread count the summary compares at.
const SUMMARY_THREADS: u32 = 16;

fn qps_of(rows: &[Row], workload: &str, threads: u32, target: &str) -> Option<f64> {
    rows.iter()
        .find(|r| r.workload == workload && r.threads == threads && r.target == target)
        .and_then(|r| r.result.as_ref().ok())
        .map(|r| r.qps)
}

pub(super) fn print_table(rows: &[Row]) {
    println!();
    println!("| workload | threads | target | qps | vs direct | p50 ms | p99 ms | proxy CPU µs/query | of which user | errors |");
    println!("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for row in rows {
        let r = match &row.result {
            Ok(r) => r,
            Err(_) => {
                println!(
                    "| {} | {} | {} | failed | — | — | — | — | — | run failed |",
                    row.workload, row.threads, row.target
                );
                continue;
            }
        };
        let vs = if row.target == "direct" {
            "1.00".to_string()
        } else {
            qps_of(rows, &row.workload, row.threads, "direct")
                .filter(|&d| d > 0.0)
                .map(|d| format!("{:.2}", r.qps / d))
                .unwrap_or_else(|| "—".into())
        };
        let errors = if r.reconnects > 0 {
            format!("{} ({} reconnects)", r.errors, r.reconnects)
        } else {
            r.errors.to_string()
        };
        println!(
            "| {} | {} | {} | {:.0} | {vs} | {:.3} | {:.2} | {} | {} | {errors} |",
            row.workload,
            row.threads,
            row.target,
            r.qps,
            r.p50_ms,
            r.p99_ms,
            row.cpu_us_per_query
                .map(|c| format!("{c:.1}"))
                .unwrap_or_else(|| "—".into()),
            row.user_us_per_query
                .map(|c| format!("{c:.1}"))
                .unwrap_or_else(|| "—".into()),
        );
    }
    let failures: Vec<&Row> = rows.iter().filter(|r| r.result.is_err()).collect();
    if !failures.is_empty() {
        println!("\nFailed runs:");
        for r in failures {
            if let Err(e) = &r.result {
                println!("- {} {} threads {}: {e}", r.workload, r.threads, r.target);
            }
        }
    }
}

pub(super) fn print_summary(rows: &[Row], targets: &[Target], o: &Opts) {
    // 16 threads, or the measured count nearest to it.
    let Some(&t) = o
        .threads
        .iter()
        .min_by_key(|&&t| (i64::from(t) - i64::from(SUMMARY_THREADS)).abs())
    else {
        return;
    };
    println!("\nSummary at {t} threads:");
    for target in targets.iter().filter(|t| t.proc.is_some()) {
        let cpu = rows
            .iter()
            .find(|r| {
                r.workload == "oltp_point_select" && r.threads == t && r.target == target.name
            })
            .and_then(|r| r.cpu_us_per_query)
            .map(|c| format!("{c:.1} µs/query on oltp_point_select"))
            .unwrap_or_else(|| "CPU per query on oltp_point_select not measured".into());
        let vs: Vec<String> = o
            .workloads
            .iter()
            .map(|w| {
                match (
                    qps_of(rows, w, t, target.name),
                    qps_of(rows, w, t, "direct").filter(|&d| d > 0.0),
                ) {
                    (Some(q), Some(d)) => format!("{w} {:.2}", q / d),
                    _ => format!("{w} —"),
                }
            })
            .collect();
        println!(
            "- {}: {cpu}; throughput vs direct: {}",
            target.name,
            vs.join(", ")
        );
    }
}

pub(super) fn write_plots(rows: &[Row], targets: &[Target], o: &Opts) -> Result<(), String> {
    std::fs::create_dir_all(&o.plots)
        .map_err(|e| format!("cannot create {}: {e}", o.plots.display()))?;
    let suffix = if o.db_cpu.is_some() {
        "-dbcpu"
    } else if o.db_core.is_some() {
        "-dbcore"
    } else {
        ""
    };
    let cap = o
        .db_cpu
        .map(|c| format!(", database capped at {c:?} CPUs"))
        .unwrap_or_default();
    let mut threads = o.threads.clone();
    threads.sort_unstable();
    threads.dedup();
    println!();
    for w in &o.workloads {
        let series = targets
            .iter()
            .map(|t| Series {
                name: t.name.to_string(),
                points: threads
                    .iter()
                    .filter_map(|&n| qps_of(rows, w, n, t.name).map(|q| (f64::from(n), q)))
                    .collect(),
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        let title = format!("sysbench {w}{cap}");
        let chart = Chart {
            title: &title,
            x_label: "client threads",
            y_label: "queries per second",
            log_x: true,
            series,
        };
        let path = o.plots.join(format!("suite-{w}{suffix}.svg"));
        std::fs::write(&path, chart.svg())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        println!("plot: {}", path.display());
    }
    Ok(())
}
