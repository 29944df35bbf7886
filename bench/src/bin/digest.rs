//! Cost of digest normalisation (`sluice_sqlscan::digest::normalize_into`) and of recording a
//! statement in the digest table, per statement, on sysbench-like statements.
//!
//! Usage: cargo run --release -p sluice-bench --bin digest
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sluice_core::{DigestKey, DigestSample, DigestTable};
use std::hint::black_box;
use std::time::{Duration, Instant};

const STATEMENTS: &[&str] = &[
    "SELECT c FROM sbtest1 WHERE id=5032",
    "SELECT c FROM sbtest3 WHERE id BETWEEN 4986 AND 5085",
    "SELECT SUM(k) FROM sbtest2 WHERE id BETWEEN 5013 AND 5112",
    "SELECT c FROM sbtest4 WHERE id BETWEEN 4997 AND 5096 ORDER BY c",
    "SELECT DISTINCT c FROM sbtest1 WHERE id BETWEEN 4985 AND 5084 ORDER BY c",
    "UPDATE sbtest4 SET k=k+1 WHERE id=5042",
    "UPDATE sbtest3 SET c='53301874892-58133931364-10008025989-98776423155-32291064364-65765063411-57225419325-21845455436-75293225627-55040924128' WHERE id=5027",
    "DELETE FROM sbtest3 WHERE id=5027",
    "INSERT INTO sbtest3 (id, k, c, pad) VALUES (5027, 4956, '61113660714-81187235463-30427376316-08432359458-18813383223-71006468219-50963826823-47436011478-28036412232-37566658327', '58771446082-76393470839-65212773325-71519893290-65436281606')",
    "SELECT o.id, o.total, c.name FROM orders o JOIN customers c ON c.id = o.customer_id WHERE o.created_at > '2026-01-01' AND o.status IN ('open', 'paid', 'shipped') ORDER BY o.created_at DESC LIMIT 50",
];

fn main() {
    let rounds = 200_000;
    let bytes: usize = STATEMENTS.iter().map(|s| s.len()).sum();
    let mut buf = Vec::new();
    // Warm up.
    for s in STATEMENTS {
        black_box(sluice_sqlscan::digest::normalize_into(
            s.as_bytes(),
            false,
            &mut buf,
        ));
    }
    let t = Instant::now();
    for _ in 0..rounds {
        for s in STATEMENTS {
            black_box(sluice_sqlscan::digest::normalize_into(
                black_box(s.as_bytes()),
                false,
                &mut buf,
            ));
        }
    }
    let norm = per(t.elapsed(), rounds * STATEMENTS.len());
    // For scale: the classification sluice already does on every statement.
    let t = Instant::now();
    for _ in 0..rounds {
        for s in STATEMENTS {
            black_box(sluice_sqlscan::scan(black_box(s.as_bytes())));
        }
    }
    let scan = per(t.elapsed(), rounds * STATEMENTS.len());
    let ids: Vec<u64> = STATEMENTS
        .iter()
        .map(|s| sluice_sqlscan::digest::normalize_into(s.as_bytes(), false, &mut buf))
        .collect();
    let table = DigestTable::new(10_000);
    let t = Instant::now();
    for r in 0..rounds {
        for id in &ids {
            table.record(
                DigestKey {
                    id: *id,
                    user: "app",
                    schema: "sbtest",
                    hostgroup: if r % 2 == 0 { "reader" } else { "writer" },
                },
                b"text",
                DigestSample {
                    elapsed: Duration::from_micros(300),
                    rows_sent: 1,
                    rows_affected: 0,
                    error: false,
                    ended: None,
                },
            );
        }
    }
    let record = per(t.elapsed(), rounds * STATEMENTS.len());
    println!(
        "digest normalisation: {norm:.0} ns per statement (average statement {} bytes, {:.0} MB/s)",
        bytes / STATEMENTS.len(),
        (bytes as f64 / STATEMENTS.len() as f64) / norm * 1000.0
    );
    println!("for scale, classification (sqlscan::scan): {scan:.0} ns per statement");
    println!(
        "digest table record: {record:.0} ns per statement (one thread, {} entries)",
        table.len()
    );
}

fn per(d: Duration, n: usize) -> f64 {
    d.as_nanos() as f64 / n as f64
}
