//! Proxy overhead: sysbench oltp_point_select and oltp_read_only at 1, 16 and 64 threads,
//! directly against one MariaDB server, through sluice, and through HAProxy (TCP mode) to the
//! same server, in one run. Prints queries per second, average latency, each proxy's CPU
//! microseconds per query, and the ratios to direct.
//!
//! Usage: cargo run --release -p sluice-bench --bin overhead -- [--time SECS] [--threads 1,16,64]

use sluice_bench::*;
use sluice_testkit::{MariaDb, ServerOptions};

struct Row {
    workload: &'static str,
    threads: u32,
    target: &'static str,
    r: SysbenchResult,
    cpu_us_per_query: Option<f64>,
}

fn main() {
    let mut time = 10u32;
    let mut threads = vec![1u32, 16, 64];
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--time" => {
                time = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--time SECS")
            }
            "--threads" => {
                threads = args
                    .next()
                    .expect("--threads LIST")
                    .split(',')
                    .map(|t| t.parse().expect("thread count"))
                    .collect()
            }
            other => panic!("unknown argument {other}"),
        }
    }
    if let Err(e) = run(time, &threads) {
        eprintln!("overhead: {e}");
        std::process::exit(1);
    }
}

fn run(time: u32, threads: &[u32]) -> Result<(), String> {
    println!("# machine: {}", machine());
    let db = MariaDb::start(ServerOptions {
        server_id: 1,
        extra: vec![
            "--max-connections=3000".into(),
            "--thread-cache-size=200".into(),
        ],
        buffer_pool: "512M",
    })
    .map_err(|e| e.to_string())?;
    db.sql("CREATE USER 'app'@'%' IDENTIFIED BY 'app'; GRANT ALL ON *.* TO 'app'@'%'; CREATE DATABASE sbtest")
        .map_err(|e| e.to_string())?;
    let tables = ["--tables=4".to_string(), "--table-size=50000".to_string()];
    let prep: Vec<String> = ["oltp_read_only".to_string()]
        .into_iter()
        .chain(tables.iter().cloned())
        .chain(["prepare".to_string()])
        .collect();
    sysbench(db.port, "sbtest", &prep)?;

    let sluice_port = sluice_testkit::free_port().map_err(|e| e.to_string())?;
    let config = format!(
        "[proxy]\nlisten = \"127.0.0.1:{sluice_port}\"\n[[users]]\nname = \"app\"\npassword = \"app\"\n[[servers]]\naddress = \"{}\"\nhostgroup = \"writer\"\nmax_connections = 300\n[log]\nlevel = \"warn\"\n",
        db.addr()
    );
    let sluice = start_sluice(&config, sluice_port)?;
    let haproxy_port = sluice_testkit::free_port().map_err(|e| e.to_string())?;
    let haproxy = start_haproxy(haproxy_port, &db.addr())?;

    let mut rows = Vec::new();
    for workload in ["oltp_point_select", "oltp_read_only"] {
        for &t in threads {
            for (target, port, pid) in [
                ("direct", db.port, None),
                ("sluice", sluice_port, Some(sluice.0.id())),
                ("haproxy", haproxy_port, Some(haproxy.0.id())),
            ] {
                let mut a: Vec<String> = vec![workload.into()];
                a.extend(tables.iter().cloned());
                a.extend([
                    format!("--threads={t}"),
                    format!("--time={time}"),
                    "--report-interval=0".into(),
                    "run".into(),
                ]);
                let before = pid.and_then(cpu_micros);
                let r = sysbench(port, "sbtest", &a)?;
                let after = pid.and_then(cpu_micros);
                let cpu = match (before, after) {
                    (Some(b), Some(a)) if r.queries > 0 => Some((a - b) as f64 / r.queries as f64),
                    _ => None,
                };
                eprintln!(
                    "{workload} {t:>3} threads {target:<8} {:>9.0} qps {:>7.2} ms avg  cpu/q {}",
                    r.qps,
                    r.avg_ms,
                    cpu.map(|c| format!("{c:.1} us")).unwrap_or("-".into())
                );
                rows.push(Row {
                    workload,
                    threads: t,
                    target,
                    r,
                    cpu_us_per_query: cpu,
                });
            }
        }
    }
    println!("\n| workload | threads | target | qps | vs direct | avg latency ms | p95 ms | proxy CPU µs/query | errors |");
    println!("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for row in &rows {
        let direct = rows
            .iter()
            .find(|d| {
                d.workload == row.workload && d.threads == row.threads && d.target == "direct"
            })
            .map(|d| d.r.qps)
            .unwrap_or(0.0);
        println!(
            "| {} | {} | {} | {:.0} | {} | {:.2} | {:.2} | {} | {} |",
            row.workload,
            row.threads,
            row.target,
            row.r.qps,
            if row.target == "direct" {
                "1.00".to_string()
            } else {
                format!("{:.2}", row.r.qps / direct.max(1.0))
            },
            row.r.avg_ms,
            row.r.p95_ms,
            row.cpu_us_per_query
                .map(|c| format!("{c:.1}"))
                .unwrap_or_else(|| "—".into()),
            row.r.errors
        );
    }
    drop(haproxy);
    drop(sluice);
    Ok(())
}
