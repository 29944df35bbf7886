//! suite's own tests: a failed run's message condensed, the options parsed and said back.

use super::*;

#[test]
fn condenses_a_failed_run() {
    // What sluice_bench::sysbench returns when sysbench cannot connect.
    let err = "sysbench [\"oltp_point_select\", \"run\"] failed:\nsysbench 1.0.20 (using system LuaJIT 2.1.0-beta3)\n\nRunning the test with following options:\nNumber of threads: 1\nInitializing random number generator from current time\n\n\nInitializing worker threads...\n\nFATAL: unable to connect to MySQL server on host '127.0.0.1', port 1, aborting...\nFATAL: error 2002: Can't connect to server on '127.0.0.1' (115)\nFATAL: `thread_init' function failed: /usr/share/sysbench/oltp_common.lua:349: connection creation failed\nFATAL: Thread initialization failed!\n";
    let c = condense(err);
    assert!(c.starts_with("sysbench [\"oltp_point_select\", \"run\"] failed:"));
    assert!(c.contains("error 2002"));
    assert!(!c.contains("Initializing random"));
    assert_eq!(c.lines().count(), 5);
}

#[test]
fn parses_options() {
    let o = Opts::parse(
        [
            "--time",
            "2",
            "--threads",
            "1,16",
            "--db-cpu",
            "1.0",
            "--db-core",
            "0",
        ]
        .map(String::from)
        .into_iter(),
    )
    .unwrap();
    assert_eq!(o.threads, [1, 16]);
    assert_eq!(o.workloads.len(), 3);
    assert_eq!(
        o.describe(),
        "--time 2 --threads 1,16 --workloads oltp_point_select,oltp_read_only,oltp_read_write --plots docs/img --sluice-threads 1 --db-cpu 1.0 --db-core 0"
    );
    assert!(Opts::parse(["--workloads", "oltp_nope"].map(String::from).into_iter()).is_err());
    assert!(Opts::parse(["--threads", "0"].map(String::from).into_iter()).is_err());
    assert!(Opts::parse(["--time"].map(String::from).into_iter()).is_err());
}
