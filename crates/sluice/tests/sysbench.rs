//! sysbench through sluice: a real OLTP client with prepared statements and transactions.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

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
        common::sysbench(
            port,
            &[&["oltp_read_write"][..], &common, &["prepare"]].concat(),
        );
    })
    .await
    .unwrap();
    // `run` prepares its SELECTs (COM_STMT_PREPARE, outside any transaction) on the
    // replicas: they must have the tables `prepare` just created.
    env.sync();
    let deadlocks_before = deadlocks();
    let report = tokio::task::spawn_blocking(move || {
        common::sysbench(
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
    let transactions = common::sysbench_counter(&report, "transactions");
    // How many depends on the machine; that they ran, without errors, does not.
    assert!(transactions > 0, "no transactions:\n{report}");
    // The only errors are the deadlocks InnoDB itself reported (sysbench ignores 1213 and
    // retries the transaction): the proxy added none.
    let deadlocks = deadlocks() - deadlocks_before;
    assert_eq!(
        common::sysbench_counter(&report, "ignored errors"),
        deadlocks,
        "errors other than InnoDB's own deadlocks\n{report}"
    );
    assert_eq!(
        common::sysbench_counter(&report, "reconnects"),
        0,
        "{report}"
    );
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
        common::sysbench(
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
    assert_eq!(
        common::sysbench_counter(&report, "ignored errors"),
        0,
        "{report}"
    );
    assert_eq!(
        common::sysbench_counter(&report, "reconnects"),
        0,
        "{report}"
    );
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
