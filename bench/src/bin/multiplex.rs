//! Multiplexing: 1,000 sysbench client connections running a light oltp_read_write mix through
//! sluice (primary + two replicas), while the servers' own `Threads_connected` is sampled to
//! count the backend connections sluice actually holds: the peak (sysbench's start-up burst:
//! every thread connects and prepares its statements at once) and the steady state (after
//! `--warmup` seconds; sluice closes idle connections after 2 s here). The same clients
//! directly against the primary show what the servers would otherwise carry.
//!
//! Usage: cargo run --release -p sluice-bench --bin multiplex -- [--clients N] [--rate TPS] [--time SECS] [--warmup SECS]
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sluice_bench::*;
use sluice_testkit::{Topology, TopologyOptions};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

struct Opts {
    clients: u32,
    rate: u32,
    time: u32,
    warmup: u32,
}

fn main() {
    let mut o = Opts {
        clients: 1000,
        rate: 200,
        time: 40,
        warmup: 15,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next().and_then(|v| v.parse().ok()).expect("a number");
        match a.as_str() {
            "--clients" => o.clients = v,
            "--rate" => o.rate = v,
            "--time" => o.time = v,
            "--warmup" => o.warmup = v,
            other => panic!("unknown argument {other}"),
        }
    }
    if let Err(e) = run(&o) {
        eprintln!("multiplex: {e}");
        std::process::exit(1);
    }
}

/// Max backend connections per server: over the whole run, and after the warm-up.
#[derive(Default, Clone)]
struct Sampled {
    peak: Vec<u64>,
    steady: Vec<u64>,
}

fn sample(topo: &Topology, stop: &AtomicBool, warmup: Duration) -> Sampled {
    let n = topo.servers.len();
    let mut s = Sampled {
        peak: vec![0; n],
        steady: vec![0; n],
    };
    let started = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        for (i, srv) in topo.servers.iter().enumerate() {
            if let Ok(out) = srv.sql("SHOW GLOBAL STATUS LIKE 'Threads_connected'") {
                // Minus the sampling connection, and the replication thread on the primary
                // (one per replica).
                let v: u64 = out
                    .split('\t')
                    .nth(1)
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                let own = 1 + if i == 0 { (n - 1) as u64 } else { 0 };
                let v = v.saturating_sub(own);
                s.peak[i] = s.peak[i].max(v);
                if started.elapsed() >= warmup {
                    s.steady[i] = s.steady[i].max(v);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    s
}

fn run(o: &Opts) -> Result<(), String> {
    println!("# machine: {}", machine());
    let topo = Topology::start(TopologyOptions {
        replicas: 2,
        extra: vec!["--max-connections=3000".into()],
        buffer_pool: Some("256M"),
        ..Default::default()
    })
    .map_err(|e| e.to_string())?;
    let tables = ["--tables=8".to_string(), "--table-size=10000".to_string()];
    let mut prep = vec!["oltp_read_write".to_string()];
    prep.extend(tables.iter().cloned());
    prep.push("prepare".into());
    sysbench(topo.primary().port, "test", &prep)?;
    topo.sync_replicas(Duration::from_secs(60))
        .map_err(|e| e.to_string())?;

    let port = sluice_testkit::free_port().map_err(|e| e.to_string())?;
    let mut config = format!(
        "[proxy]\nlisten = \"127.0.0.1:{port}\"\nmax_client_connections = 5000\n[pool]\nidle_timeout = \"2s\"\n[[users]]\nname = \"app\"\npassword = \"app\"\n[[servers]]\naddress = \"{}\"\nhostgroup = \"writer\"\n",
        topo.primary().addr()
    );
    for r in topo.replicas() {
        config.push_str(&format!(
            "[[servers]]\naddress = \"{}\"\nhostgroup = \"reader\"\n",
            r.addr()
        ));
    }
    config.push_str("[log]\nlevel = \"warn\"\n");
    let sluice = start_sluice(&config, port)?;

    let runs = [
        ("sluice", port, "auto"),
        ("direct to primary", topo.primary().port, "auto"),
        (
            "direct to primary, no prepared statements",
            topo.primary().port,
            "disable",
        ),
    ];
    let mut rows = Vec::new();
    for (target, p, ps) in runs {
        let stop = AtomicBool::new(false);
        let mut a = vec!["oltp_read_write".to_string()];
        a.extend(tables.iter().cloned());
        a.extend([
            format!("--threads={}", o.clients),
            format!("--rate={}", o.rate),
            format!("--time={}", o.time),
            format!("--db-ps-mode={ps}"),
            "--report-interval=0".into(),
            "run".into(),
        ]);
        let (r, s) = std::thread::scope(|sc| {
            let sampler = sc.spawn(|| sample(&topo, &stop, Duration::from_secs(o.warmup as u64)));
            let r = sysbench(p, "test", &a);
            stop.store(true, Ordering::Relaxed);
            (r, sampler.join().unwrap_or_default())
        });
        let outcome = match &r {
            Ok(r) => format!(
                "{:.1} tps, avg {:.2} ms, p95 {:.2} ms, {} errors",
                r.tps, r.avg_ms, r.p95_ms, r.errors
            ),
            Err(e) => {
                let why = e
                    .lines()
                    .find(|l| l.contains("MySQL error"))
                    .unwrap_or("failed")
                    .trim()
                    .to_string();
                format!("failed: {why}")
            }
        };
        eprintln!(
            "{target}: {outcome}; backend connections peak {:?}, steady {:?}",
            s.peak, s.steady
        );
        rows.push((target, outcome, s));
        // Let the servers settle (client threads to exit, sluice's idle connections to close).
        std::thread::sleep(Duration::from_secs(4));
    }
    drop(sluice);
    println!(
        "\n{} client connections, sysbench oltp_read_write --rate={} --time={} (8 tables x 10,000 rows); backend connections = servers' Threads_connected (primary, replica 1, replica 2)\n",
        o.clients, o.rate, o.time
    );
    println!(
        "| target | result | peak backend connections | after {} s warm-up |",
        o.warmup
    );
    println!("| --- | --- | --- | --- |");
    for (target, outcome, s) in &rows {
        let fmt = |v: &Vec<u64>| {
            format!(
                "{} (total {})",
                v.iter()
                    .map(|n| n.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                v.iter().sum::<u64>()
            )
        };
        println!(
            "| {target} | {outcome} | {} | {} |",
            fmt(&s.peak),
            fmt(&s.steady)
        );
    }
    Ok(())
}
