//! What pgreadscale prints after the steps: the throughput and transaction-share table, where
//! the CPU went, sluice's own routing counts, the 2.7x goal's verdict and the warnings.

use super::*;

pub(super) fn report(steps: &[Step]) {
    let names = ["primary", "standby 1", "standby 2", "standby 3"];
    let base = steps[0].b.r.tps.max(1e-9);
    let share = |v: &[u64]| -> Vec<String> {
        let total = v.iter().sum::<u64>().max(1) as f64;
        v.iter()
            .enumerate()
            .map(|(i, &x)| format!("{} {:.0}%", names[i], x as f64 * 100.0 / total))
            .collect()
    };
    println!(
        "\n| servers serving reads | standbys discovered | tps | avg ms | p95 ms | per-second tps (min-max) | vs primary alone | share of transactions (xact_commit) |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    let mut warnings = Vec::new();
    for s in steps {
        let serving: Vec<usize> = if s.standbys == 0 {
            vec![0]
        } else {
            (1..=s.standbys).collect()
        };
        let total = s.commits.iter().sum::<u64>().max(1) as f64;
        let fair = 1.0 / serving.len() as f64;
        for (i, &c) in s.commits.iter().enumerate() {
            let part = c as f64 / total;
            if serving.contains(&i) && part < fair * 0.5 {
                warnings.push(format!(
                    "{} standby(s): {} served only {:.1}% of the transactions (even share {:.1}%)",
                    s.standbys,
                    names[i],
                    part * 100.0,
                    fair * 100.0
                ));
            }
            if !serving.contains(&i) && part > 0.02 {
                warnings.push(format!(
                    "{} standby(s): {} does not serve reads but committed {:.1}% of the transactions",
                    s.standbys,
                    names[i],
                    part * 100.0
                ));
            }
        }
        println!(
            "| {} | {} | {:.0} | {:.1} | {:.1} | {:.0}-{:.0} | {:.2}x | {} |",
            s.serving(),
            s.standbys,
            s.b.r.tps,
            s.b.r.avg_ms,
            s.b.p95_ms,
            s.b.tps_range.0,
            s.b.tps_range.1,
            s.b.r.tps / base,
            share(&s.commits).join(", ")
        );
    }
    println!(
        "\nWhere the CPU went (CPUs used over each run; PostgreSQL: the postmaster and all its processes; throttled: share of a server's active CFS periods in which it hit its quota):\n"
    );
    println!(
        "| servers serving reads | sluice CPU | pgbench CPU | PostgreSQL CPU (primary, standby 1, 2, 3) | throttled | transactions per PostgreSQL CPU-second | machine idle | pgbench failed / aborted clients |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for s in steps {
        let list = |v: &[f64], pct: bool| {
            v.iter()
                .map(|x| {
                    if pct {
                        format!("{:.0}%", x * 100.0)
                    } else {
                        format!("{x:.2}")
                    }
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        println!(
            "| {} | {:.2} | {:.2} | {} | {} | {:.0} | {:.0}% | {} / {} |",
            s.serving(),
            s.sluice_cpus,
            s.pgbench_cpus,
            list(&s.server_cpus, false),
            list(&s.throttled, true),
            s.b.r.tps / s.server_cpus.iter().sum::<f64>().max(1e-9),
            s.idle * 100.0,
            s.b.r.failed,
            s.b.r.aborted_clients
        );
    }
    println!("\nsluice's own count of statements per server (GET /api/servers \"queries\"), and how long the monitor took to put the listed standbys ONLINE in reader:\n");
    for s in steps {
        println!(
            "- {} standby(s): {}; placed in {} ms",
            s.standbys,
            share(&s.routed).join(", "),
            s.placed_ms
        );
    }
    println!();
    if let Some(s3) = steps.iter().find(|s| s.standbys == 3) {
        let r3 = s3.b.r.tps / base;
        println!(
            "3 servers serving reads vs 1: {r3:.2}x ({} the 2.7x goal)",
            if r3 >= 2.7 { "meets" } else { "misses" }
        );
    }
    for w in &warnings {
        println!("warning: {w}");
    }
}
