//! Cost of classifying a PostgreSQL statement (`sluice_sqlscan::postgres::scan`), per statement,
//! on pgbench's statements and typical ORM queries.
//!
//! Usage: cargo run --release -p sluice-bench --bin pgscan
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sluice_sqlscan::postgres::{scan, Route};
use std::hint::black_box;
use std::time::{Duration, Instant};

const STATEMENTS: &[(&str, &str)] = &[
    (
        "pgbench select",
        "SELECT abalance FROM pgbench_accounts WHERE aid = $1;",
    ),
    (
        "pgbench update accounts",
        "UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2;",
    ),
    (
        "pgbench update tellers",
        "UPDATE pgbench_tellers SET tbalance = tbalance + $1 WHERE tid = $2;",
    ),
    (
        "pgbench insert history",
        "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP);",
    ),
    (
        "3-table join with IN list",
        "SELECT o.id, o.total, c.name, p.title FROM orders o JOIN customers c ON c.id = o.customer_id \
         JOIN products p ON p.id = o.product_id WHERE o.created_at > $1 AND o.status IN ('open', 'paid', 'shipped') \
         ORDER BY o.created_at DESC LIMIT 50",
    ),
    (
        "ORM select, 10 quoted columns",
        "SELECT \"users\".\"id\", \"users\".\"email\", \"users\".\"name\", \"users\".\"created_at\", \
         \"users\".\"updated_at\", \"users\".\"role\", \"users\".\"active\", \"users\".\"last_login\", \
         \"users\".\"tenant_id\", \"users\".\"settings\" FROM \"users\" WHERE \"users\".\"id\" = $1 LIMIT $2",
    ),
    (
        "ORM select with functions",
        "SELECT count(*) AS \"count\", lower(\"t\".\"name\") FROM \"t\" WHERE \"t\".\"created\" > now() - interval '1 day' \
         GROUP BY lower(\"t\".\"name\")",
    ),
    (
        "locking read",
        "SELECT id, payload FROM jobs WHERE state = 'ready' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED",
    ),
    ("begin", "BEGIN"),
    ("set", "SET application_name = 'worker-3'"),
];

fn main() {
    let expected = [
        Route::Read,
        Route::Write,
        Route::Write,
        Route::Write,
        Route::Read,
        Route::Read,
        Route::Read,
        Route::Write,
        Route::Write,
        Route::Write,
    ];
    for ((name, sql), want) in STATEMENTS.iter().zip(expected) {
        assert_eq!(scan(sql.as_bytes()).route(), want, "{name}");
    }
    // Rounds of a fixed number of scans; the median round resists other load on the machine,
    // the best one shows the cost undisturbed.
    let (rounds, per_round) = (20, 25_000);
    let (mut total_median, mut total_best) = (0.0, 0.0);
    println!("{:<32} {:>8} {:>8}", "ns per statement", "median", "best");
    for (name, sql) in STATEMENTS {
        for _ in 0..1000 {
            black_box(scan(black_box(sql.as_bytes())));
        }
        let mut times: Vec<f64> = (0..rounds)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..per_round {
                    black_box(scan(black_box(sql.as_bytes())));
                }
                per(t.elapsed(), per_round)
            })
            .collect();
        times.sort_by(f64::total_cmp);
        let (median, best) = (times[rounds / 2], times[0]);
        total_median += median;
        total_best += best;
        println!(
            "{:<32} {median:>8.0} {best:>8.0}   ({} bytes)",
            name,
            sql.len()
        );
    }
    let n = STATEMENTS.len() as f64;
    println!(
        "{:<32} {:>8.0} {:>8.0}",
        "mean",
        total_median / n,
        total_best / n
    );
}

fn per(d: Duration, n: usize) -> f64 {
    d.as_nanos() as f64 / n as f64
}
