//! pgsuite's own tests: the CPU rounds' pairing, the equal rates, the floor's cells, Pgpool-II's settings.

use super::*;

fn cpu_row(mode: &str, clients: u32, target: &'static str, cpu: f64, aborted: u64) -> Row {
    Row {
        workload: "select-only".into(),
        mode: mode.into(),
        clients,
        target,
        result: Ok(PgbenchResult {
            aborted_clients: aborted,
            ..Default::default()
        }),
        cpu_us_per_txn: Some(cpu),
        user_us_per_txn: None,
        server_us_per_txn: None,
        client_us_per_txn: None,
        cpu_steady: true,
    }
}

#[test]
fn cpu_rounds_pair_each_round_and_leave_out_aborted_ones() {
    assert_eq!(report::median(&[]), None);
    assert_eq!(report::median(&[3.0, 1.0, 2.0]), Some(2.0));
    assert_eq!(report::median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    let c = cpu_compared(&[
        cpu_row("simple", 1, "sluice", 10.0, 0),
        cpu_row("simple", 1, "pgbouncer", 8.0, 0),
        cpu_row("simple", 1, "sluice", 12.0, 0),
        cpu_row("simple", 1, "pgbouncer", 16.0, 0),
        // PgBouncer's clients aborted in this round: the round is left out for both.
        cpu_row("simple", 1, "sluice", 11.0, 0),
        cpu_row("simple", 1, "pgbouncer", 1.0, 3),
    ]);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].sluice, [10.0, 12.0]);
    assert_eq!(c[0].pgbouncer, [8.0, 16.0]);
    assert_eq!(c[0].ratios(), [1.25, 0.75]);
    assert!(c[0].floor.is_empty());

    // The floor, when it ran: its own rounds, whatever the other two did.
    let c = cpu_compared(&[
        cpu_row("simple", 16, "sluice", 10.0, 0),
        cpu_row("simple", 16, "pgbouncer", 8.0, 0),
        cpu_row("simple", 16, "floor", 6.0, 0),
        cpu_row("simple", 16, "sluice", 11.0, 0),
        cpu_row("simple", 16, "pgbouncer", 1.0, 3),
        cpu_row("simple", 16, "floor", 7.0, 0),
    ]);
    assert_eq!(c[0].sluice, [10.0]);
    assert_eq!(c[0].floor, [6.0, 7.0]);
}

#[test]
fn the_floor_runs_select_only_over_the_simple_protocol_only() {
    assert!(runs("floor", "select-only", "simple"));
    assert!(!runs("floor", "select-only", "prepared"));
    assert!(!runs("floor", "tpcb-like", "simple"));
    assert!(runs("sluice", "tpcb-like", "prepared"));
    let o = Opts::parse(["--targets", "sluice,floor"].map(String::from).into_iter()).unwrap();
    assert_eq!(o.targets, ["direct", "sluice", "floor"]);
    // Not in the default run.
    let o = Opts::parse(std::iter::empty()).unwrap();
    assert!(!o.targets.iter().any(|t| t == "floor"));
}

#[test]
fn pgpool_settings_pin_the_comparison() {
    let c = pgpool_conf(Path::new("/tmp/x"), 1, 2, 3, 260);
    assert!(c.contains("num_init_children = 260\n"));
    assert!(c.contains("load_balance_mode = off\n"));
    assert!(c.contains("backend_port0 = 3\n"));
}

fn tps_row(mode: &str, clients: u32, target: &'static str, tps: f64, aborted: u64) -> Row {
    let mut r = cpu_row(mode, clients, target, 1.0, aborted);
    if let Ok(p) = &mut r.result {
        p.tps = tps;
    }
    r
}

#[test]
fn an_equal_rate_is_a_share_of_the_slowest_compared_target() {
    let grid = [
        // Direct and HAProxy are not compared: their tps does not count.
        tps_row("simple", 16, "direct", 1_000.0, 0),
        tps_row("simple", 16, "sluice", 24_710.0, 0),
        tps_row("simple", 16, "pgbouncer", 25_467.0, 0),
        tps_row("simple", 64, "sluice", 14_420.0, 0),
        tps_row("simple", 64, "pgbouncer", 16_686.0, 0),
        // A configuration with aborted clients has no rate.
        tps_row("prepared", 16, "sluice", 30_000.0, 0),
        tps_row("prepared", 16, "pgbouncer", 31_000.0, 2),
        // Far below 100 tps: the rate is still 100.
        tps_row("prepared", 1, "sluice", 40.0, 0),
        tps_row("prepared", 1, "pgbouncer", 50.0, 0),
    ];
    let rates = rate::equal_rates(&grid, &["sluice", "pgbouncer"], 80);
    let rates: Vec<(&str, u32, u32)> = rates.iter().map(|(m, c, r)| (m.as_str(), *c, *r)).collect();
    assert_eq!(
        rates,
        [
            ("simple", 16, 19_700),
            ("simple", 64, 11_500),
            ("prepared", 1, 100)
        ]
    );
}
