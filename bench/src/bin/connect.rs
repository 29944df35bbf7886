//! Connect-per-query: the seed's test client (connect, one primary-key SELECT, disconnect, in a
//! loop) at 1, 10 and 100 parallel clients, directly against MariaDB and through sluice.
//! sluice answers the handshake itself and reuses its server connections, so the loop costs
//! the server nothing but the SELECT.
//!
//! With `--db-cpu F`, mariadbd runs in a cgroup capped at F CPUs: a database on a host of its
//! own, which pays for every connection it accepts.
//!
//! Usage: cargo run --release -p sluice-bench --bin connect -- [--time SECS] [--clients 1,10,100]
//!        [--db-cpu F]
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sluice_bench::client::Target;
use sluice_bench::load::{self, Query};
use sluice_bench::*;
use std::time::Duration;

fn main() {
    let mut time = 10u64;
    let mut clients = vec![1usize, 10, 100];
    let mut db_cpu: Option<f64> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next().expect("a value");
        match a.as_str() {
            "--time" => time = v.parse().expect("--time SECS"),
            "--db-cpu" => db_cpu = Some(v.parse().expect("--db-cpu CPUS")),
            "--clients" => {
                clients = v
                    .split(',')
                    .map(|c| c.parse().expect("client count"))
                    .collect()
            }
            other => panic!("unknown argument {other}"),
        }
    }
    if let Err(e) = run(time, &clients, db_cpu) {
        eprintln!("connect: {e}");
        std::process::exit(1);
    }
}

fn run(time: u64, clients: &[usize], db_cpu: Option<f64>) -> Result<(), String> {
    println!("# machine: {}", machine());
    println!("# options: --time {time} --clients {clients:?} --db-cpu {db_cpu:?}");
    let rows = 10_000u64;
    let db = sbtest_server(
        &["--max-connections=3000", "--thread-cache-size=200"],
        "256M",
        "",
        1,
        rows,
    )?;
    let _cap = match db_cpu {
        Some(cores) => {
            let cap = sluice_bench::cgroup::CpuCap::new(
                &format!("sluice-bench-connect-{}", std::process::id()),
                cores,
            )?;
            cap.add(db.pid().ok_or("mariadbd has no pid")?)?;
            println!("# mariadbd capped at {cores} CPUs (cgroup v1 cpu quota)");
            Some(cap)
        }
        None => None,
    };
    let sluice_port = sluice_testkit::free_port().map_err(|e| e.to_string())?;
    let config = format!(
        "[proxy]\nlisten = \"127.0.0.1:{sluice_port}\"\n[[users]]\nname = \"app\"\npassword = \"app\"\n[[servers]]\naddress = \"{}\"\nhostgroup = \"writer\"\nmax_connections = 100\n[log]\nlevel = \"warn\"\n",
        db.addr()
    );
    let sluice = start_sluice(&config, sluice_port)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let q = Query {
        template: "SELECT c FROM sbtest1 WHERE id={id}".into(),
        rows,
    };
    let target = |port: u16| Target {
        addr: ([127, 0, 0, 1], port).into(),
        source: None,
        user: "app".into(),
        password: "app".into(),
        database: Some("sbtest".into()),
    };
    // Warm up both paths (sluice opens its pool on first use).
    rt.block_on(load::connect_per_query(
        &[target(sluice_port)],
        10,
        Duration::from_secs(1),
        &q,
    ));
    println!("\n| parallel clients | target | connect+query+quit loops/s | vs direct | p50 ms | p99 ms | sluice CPU µs/loop | errors | failed |");
    println!("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for &n in clients {
        let mut direct_rate = 0.0;
        for (name, port) in [("direct", db.port), ("sluice", sluice_port)] {
            let cpu0 = cpu_micros(sluice.0.id());
            let r = rt.block_on(load::connect_per_query(
                &[target(port)],
                n,
                Duration::from_secs(time),
                &q,
            ));
            let cpu1 = cpu_micros(sluice.0.id());
            eprintln!("{n:>4} clients {name:<7} {}", r.summary());
            if let Some(f) = &r.first_failure {
                eprintln!("     first failure: {f}");
            }
            if name == "direct" {
                direct_rate = r.rate();
            }
            let cpu = match (cpu0, cpu1, name) {
                (Some(a), Some(b), "sluice") if r.ok > 0 => {
                    format!("{:.1}", (b - a) as f64 / r.ok as f64)
                }
                _ => "—".into(),
            };
            println!(
                "| {n} | {name} | {:.0} | {:.2} | {:.2} | {:.2} | {cpu} | {} | {} |",
                r.rate(),
                r.rate() / direct_rate.max(1e-9),
                r.latency.quantile(0.5) as f64 / 1000.0,
                r.latency.quantile(0.99) as f64 / 1000.0,
                r.error_count(),
                r.failed
            );
            // Let TIME_WAIT sockets and the server's thread cache settle between runs.
            std::thread::sleep(Duration::from_secs(2));
        }
    }
    drop(sluice);
    Ok(())
}
