//! sysbench through sluice: a real OLTP client with prepared statements and transactions.

mod common;

use std::process::Command;

fn sysbench(port: u16, args: &[&str]) -> String {
    let bin = sluice_testkit::find_program("sysbench", "sysbench").expect("sysbench");
    let out = Command::new(bin)
        .args(args)
        .arg("--db-driver=mysql")
        .arg("--mysql-host=127.0.0.1")
        .arg(format!("--mysql-port={port}"))
        .arg("--mysql-user=app")
        .arg("--mysql-password=app")
        .arg("--mysql-db=test")
        .output()
        .expect("run sysbench");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "sysbench {args:?} failed:\n{text}");
    text
}

/// The number after `label:` in sysbench's report.
fn counter(report: &str, label: &str) -> u64 {
    report
        .lines()
        .find_map(|l| {
            l.trim().strip_prefix(label).map(|r| {
                r.trim_start_matches(':')
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .to_string()
            })
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {label:?} in sysbench report:\n{report}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oltp_read_write_16_threads_no_proxy_errors_no_reconnects() {
    let env = common::start(2, "").await;
    let port = env.port;
    // Tables large enough, and rows picked uniformly, so that the workload itself rarely
    // deadlocks (it often does on small tables or hot rows, directly against MariaDB too:
    // sysbench then counts "ignored errors").
    let common = ["--tables=8", "--table-size=10000", "--rand-type=uniform"];
    let deadlocks = || -> u64 {
        env.topo
            .primary()
            .sql("SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'INNODB_DEADLOCKS'")
            .unwrap()
            .trim()
            .parse()
            .expect("Innodb_deadlocks")
    };
    tokio::task::spawn_blocking(move || {
        sysbench(
            port,
            &[&["oltp_read_write"][..], &common, &["prepare"]].concat(),
        );
    })
    .await
    .unwrap();
    let deadlocks_before = deadlocks();
    let report = tokio::task::spawn_blocking(move || {
        sysbench(
            port,
            &[
                &["oltp_read_write"][..],
                &common,
                &["--threads=16", "--time=8", "--report-interval=0", "run"],
            ]
            .concat(),
        )
    })
    .await
    .unwrap();
    let transactions = counter(&report, "transactions");
    assert!(transactions > 100, "too few transactions:\n{report}");
    // The only errors are the deadlocks InnoDB itself reported (sysbench ignores 1213 and
    // retries the transaction): the proxy added none.
    let deadlocks = deadlocks() - deadlocks_before;
    assert_eq!(
        counter(&report, "ignored errors"),
        deadlocks,
        "errors other than InnoDB's own deadlocks\n{report}"
    );
    assert_eq!(counter(&report, "reconnects"), 0, "{report}");
    // The work really went through the primary, and the row counts agree there.
    let rows = env
        .topo
        .primary()
        .sql("SELECT COUNT(*) FROM test.sbtest1")
        .unwrap();
    assert_eq!(rows, "10000");

    // Read-only without transactions is spread over the replicas.
    env.sync();
    let before: u64 = env
        .proxy
        .topology
        .hostgroup("reader")
        .unwrap()
        .servers()
        .iter()
        .map(|s| s.stats.reads.load(std::sync::atomic::Ordering::Relaxed))
        .sum();
    let report = tokio::task::spawn_blocking(move || {
        sysbench(
            port,
            &[
                &["oltp_read_only"][..],
                &common,
                &[
                    "--skip-trx=on",
                    "--threads=16",
                    "--time=3",
                    "--report-interval=0",
                    "run",
                ],
            ]
            .concat(),
        )
    })
    .await
    .unwrap();
    assert_eq!(counter(&report, "ignored errors"), 0, "{report}");
    assert_eq!(counter(&report, "reconnects"), 0, "{report}");
    let readers = env.proxy.topology.hostgroup("reader").unwrap().servers();
    for s in &readers {
        assert!(
            s.stats.reads.load(std::sync::atomic::Ordering::Relaxed) > 0,
            "replica {} served no reads",
            s.name
        );
    }
    let after: u64 = readers
        .iter()
        .map(|s| s.stats.reads.load(std::sync::atomic::Ordering::Relaxed))
        .sum();
    assert!(after > before);
}
