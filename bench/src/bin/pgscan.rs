//! Cost of classifying a PostgreSQL statement (`sluice_sqlscan::postgres::scan`, which also
//! computes the statement's digest id in the same pass), per statement, on pgbench's statements
//! and typical ORM queries; and of the digest's text (`postgres::digest_text`) when a new
//! digest needs it.
//!
//! It also times the scanner's shape key (`postgres::shape_key`: the lexing pass that finds a
//! text's shape) and the front end's classification (`sluice_postgres::classify::classify`)
//! of a text whose shape its thread has seen: since the twenty-sixth stop, the match against
//! the thread's sample of that shape (`postgres::ShapeSample`: no key built) and a copy of what
//! was kept (for the statements that are not kept by shape, `begin` and `set` here, that column
//! is the key and a scan: what a text that is never found costs).
//!
//! For comparison it also times `sluice_sqlscan::digest::normalize_into`, the digest the
//! PostgreSQL front end computed before (with the MySQL lexer, in a pass of its own), alone and
//! followed by a scan: that sum stands for the cost before the digest was fused into the scan
//! (it counts the fused digest once too many, so it overstates the old cost a little).
//!
//! Usage: cargo run --release -p sluice-bench --bin pgscan
//!
//! `pgscan --count N [I]` only calls `scan` N times on statement I of the list (on each in turn
//! without I), untimed, for an instruction count that does not depend on the machine's load:
//! the instructions of one call are the difference between two runs under callgrind, e.g.
//! `valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/pgscan --count 2000 0`
//! minus the same with `--count 1000`, divided by 1000.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sluice_sqlscan::digest::normalize_into;
use sluice_sqlscan::postgres::{digest_text, scan, shape_key, Route, ShapeKey};
use std::hint::black_box;
use std::time::{Duration, Instant};

const STATEMENTS: &[(&str, &str)] = &[
    (
        "pgbench select",
        "SELECT abalance FROM pgbench_accounts WHERE aid = $1;",
    ),
    (
        "pgbench select, literal",
        "SELECT abalance FROM pgbench_accounts WHERE aid = 12345;",
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

/// Rounds of a fixed number of calls; the median round resists other load on the machine, the
/// best one shows the cost undisturbed.
const ROUNDS: usize = 20;
const PER_ROUND: usize = 20_000;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().is_some_and(|a| a == "--count") {
        let n: usize = args
            .get(1)
            .expect("--count N [I]")
            .parse()
            .expect("a count");
        let only: Option<usize> = args.get(2).map(|i| i.parse().expect("a statement index"));
        return count(n, only);
    }
    let expected = [
        Route::Read,
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
    let mut text = Vec::with_capacity(4096);
    for ((name, sql), want) in STATEMENTS.iter().zip(expected) {
        let s = scan(sql.as_bytes());
        assert_eq!(s.route(), want, "{name}");
        assert_eq!(digest_text(sql.as_bytes(), &mut text), s.digest, "{name}");
    }
    let columns = [
        "scan (fused)",
        "shape key",
        "classify, kept",
        "digest_text",
        "old digest",
        "old digest+scan",
    ];
    print!("{:<30}", "ns per statement, median/best");
    for c in columns {
        print!(" {c:>15}");
    }
    println!();
    let mut totals = [(0.0, 0.0); 6];
    let mut key = Box::<ShapeKey>::default();
    for (name, sql) in STATEMENTS {
        let sql = sql.as_bytes();
        let times = [
            time(&mut || {
                black_box(scan(black_box(sql)));
            }),
            time(&mut || {
                black_box(shape_key(black_box(sql), &mut key));
            }),
            time(&mut || {
                black_box(sluice_postgres::classify::classify(black_box(sql)));
            }),
            time(&mut || {
                black_box(digest_text(black_box(sql), &mut text));
            }),
            time(&mut || {
                black_box(normalize_into(black_box(sql), true, &mut text));
            }),
            time(&mut || {
                black_box(normalize_into(black_box(sql), true, &mut text));
                black_box(scan(black_box(sql)));
            }),
        ];
        print!("{name:<30}");
        for ((median, best), total) in times.into_iter().zip(totals.iter_mut()) {
            total.0 += median;
            total.1 += best;
            print!(" {:>15}", format!("{median:.0}/{best:.0}"));
        }
        println!("   ({} bytes)", sql.len());
    }
    let n = STATEMENTS.len() as f64;
    print!("{:<30}", "mean");
    for (median, best) in totals {
        print!(" {:>15}", format!("{:.0}/{:.0}", median / n, best / n));
    }
    println!();
}

/// Calls `scan` `n` times on statement `only` of the list, or on each.
fn count(n: usize, only: Option<usize>) {
    for (i, (name, sql)) in STATEMENTS.iter().enumerate() {
        if only.is_some_and(|o| o != i) {
            continue;
        }
        for _ in 0..n {
            black_box(scan(black_box(sql.as_bytes())));
        }
        eprintln!("{i}: {name}");
    }
}

/// Median and best nanoseconds per call of `run`.
fn time(run: &mut dyn FnMut()) -> (f64, f64) {
    for _ in 0..1000 {
        run();
    }
    let mut times: Vec<f64> = (0..ROUNDS)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..PER_ROUND {
                run();
            }
            per(t.elapsed(), PER_ROUND)
        })
        .collect();
    times.sort_by(f64::total_cmp);
    (times[ROUNDS / 2], times[0])
}

fn per(d: Duration, n: usize) -> f64 {
    d.as_nanos() as f64 / n as f64
}
