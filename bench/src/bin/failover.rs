//! Failover timing: a primary and two replicas (GTID replication) behind sluice with the
//! simplest configuration (`[failover] enabled = true`, defaults for everything else).
//!
//! 1. Time to the first write: one client writes rows through sluice in a loop; the primary
//!    is killed (SIGKILL) or frozen (SIGSTOP); measured is the time from the signal to the
//!    first write sluice acknowledges from the new primary, and the statements that failed.
//! 2. sysbench `oltp_read_write` through sluice with the primary killed mid-run: the errors
//!    clients saw, and throughput per second around the failover.
//!
//! Usage: cargo run --release -p sluice-bench --bin failover -- [--reps N] [--threads N] [--time SECS] [--semi-sync]
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use mysql_async::prelude::*;
use sluice_bench::*;
use sluice_testkit::{free_port, Topology, TopologyOptions};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct Opts {
    reps: u32,
    threads: u32,
    time: u32,
    semi_sync: bool,
}

fn main() {
    let mut o = Opts {
        reps: 5,
        threads: 8,
        time: 20,
        semi_sync: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = || args.next().and_then(|v| v.parse().ok()).expect("a number");
        match a.as_str() {
            "--reps" => o.reps = num(),
            "--threads" => o.threads = num(),
            "--time" => o.time = num(),
            "--semi-sync" => o.semi_sync = true,
            other => panic!("unknown argument {other}"),
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    if let Err(e) = rt.block_on(run(&o)) {
        eprintln!("failover: {e}");
        std::process::exit(1);
    }
}

/// A topology with sluice (the release binary) in front.
struct Setup {
    topo: Topology,
    port: u16,
    _sluice: Guard,
}

fn setup(o: &Opts) -> Result<Setup, String> {
    let topo = Topology::start(TopologyOptions {
        replicas: 2,
        semi_sync: o.semi_sync,
        buffer_pool: Some("128M"),
        ..Default::default()
    })
    .map_err(|e| e.to_string())?;
    let port = free_port().map_err(|e| e.to_string())?;
    let mut cfg = format!(
        "[proxy]\nlisten = \"127.0.0.1:{port}\"\n[monitor]\nuser = \"monitor\"\npassword = \"monitor\"\n[failover]\nenabled = true\n[[users]]\nname = \"app\"\npassword = \"app\"\n"
    );
    for s in &topo.servers {
        cfg.push_str(&format!("[[servers]]\naddress = \"{}\"\n", s.addr()));
    }
    let sluice = start_sluice(&cfg, port)?;
    Ok(Setup {
        topo,
        port,
        _sluice: sluice,
    })
}

async fn run(o: &Opts) -> Result<(), String> {
    println!("# machine: {}", machine());
    println!(
        "# sluice defaults: monitor interval 250 ms, check timeout 500 ms, detection time 1 s; replication: {}",
        if o.semi_sync { "semi-synchronous (AFTER_SYNC)" } else { "asynchronous" }
    );
    println!("\n| death | run | first write after (ms) | failed statements |\n| --- | ---: | ---: | ---: |");
    let mut summary = Vec::new();
    for (mode, sig) in [("SIGKILL", libc::SIGKILL), ("SIGSTOP", libc::SIGSTOP)] {
        let mut times = Vec::new();
        for rep in 1..=o.reps {
            let (ms, failed) = first_write(o, sig).await?;
            println!("| {mode} | {rep} | {ms} | {failed} |");
            times.push(ms);
        }
        times.sort();
        summary.push((mode, times));
    }
    println!();
    for (mode, t) in summary.iter().filter(|(_, t)| !t.is_empty()) {
        println!(
            "{mode}: first write after min {} ms, median {} ms, max {} ms over {} runs",
            t[0],
            t[t.len() / 2],
            t[t.len() - 1],
            t.len()
        );
    }
    sysbench_across_failover(o).await
}

/// One run: writes in a loop, the primary dies, returns (ms to the first write on the new
/// primary, statements that failed).
async fn first_write(o: &Opts, sig: i32) -> Result<(u128, usize), String> {
    let s = setup(o)?;
    let url = format!(
        "mysql://app:app@127.0.0.1:{}/test?prefer_socket=false",
        s.port
    );
    let mut c = mysql_async::Conn::new(mysql_async::Opts::from_url(&url).unwrap())
        .await
        .map_err(|e| e.to_string())?;
    c.query_drop("CREATE TABLE w (id INT PRIMARY KEY, sid INT)")
        .await
        .map_err(|e| e.to_string())?;
    let old_sid = s.topo.primary().server_id;
    let acks: Arc<Mutex<Vec<(Instant, u32)>>> = Arc::default();
    let failed = Arc::new(Mutex::new(0usize));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (acks, failed, stop) = (acks.clone(), failed.clone(), stop.clone());
        tokio::spawn(async move {
            let mut n = 0u32;
            let deadline = Instant::now() + Duration::from_secs(60);
            while !stop.load(Relaxed) && Instant::now() < deadline {
                n += 1;
                let r = async {
                    c.query_drop(format!("INSERT INTO w VALUES ({n}, @@server_id)"))
                        .await?;
                    c.query_first::<u32, _>(format!("SELECT sid FROM w WHERE id = {n} FOR UPDATE"))
                        .await
                };
                match tokio::time::timeout(Duration::from_secs(20), r).await {
                    Ok(Ok(Some(sid))) => acks.lock().unwrap().push((Instant::now(), sid)),
                    _ => {
                        *failed.lock().unwrap() += 1;
                        // The session may have ended with its connection: reconnect.
                        if let Ok(nc) =
                            mysql_async::Conn::new(mysql_async::Opts::from_url(&url).unwrap()).await
                        {
                            c = nc;
                        }
                    }
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let t0 = Instant::now();
    s.topo.primary().signal(sig).map_err(|e| e.to_string())?;
    let deadline = t0 + Duration::from_secs(30);
    let first = loop {
        let got = acks
            .lock()
            .unwrap()
            .iter()
            .find(|(t, sid)| *t > t0 && *sid != old_sid)
            .map(|(t, _)| *t);
        if let Some(t) = got {
            break t;
        }
        if Instant::now() > deadline {
            return Err("no write succeeded within 30 s of the primary's death".into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    stop.store(true, Relaxed);
    let _ = writer.await;
    if sig == libc::SIGSTOP {
        let _ = s.topo.primary().resume();
    }
    let failed = *failed.lock().unwrap();
    Ok(((first - t0).as_millis(), failed))
}

/// sysbench oltp_read_write through sluice; the primary is killed a third into the run.
async fn sysbench_across_failover(o: &Opts) -> Result<(), String> {
    let s = setup(o)?;
    let tables = ["--tables=4".to_string(), "--table-size=10000".to_string()];
    let mut prep = vec!["oltp_read_write".to_string()];
    prep.extend(tables.iter().cloned());
    prep.push("prepare".into());
    sysbench(s.port, "test", &prep)?;
    s.topo
        .sync_replicas(Duration::from_secs(60))
        .map_err(|e| e.to_string())?;
    let kill_at = Duration::from_secs(u64::from(o.time) / 3);
    let mut args = vec![
        "oltp_read_write".to_string(),
        format!("--threads={}", o.threads),
        format!("--time={}", o.time),
        "--report-interval=1".into(),
        // Deadlocks and lock waits (sysbench's default list), and what a failover can show:
        // 1213 for a transaction rolled back with the old primary; 1053 for a statement whose
        // outcome is unknown (if its session held state, sluice then closes it: 2013/2006 on
        // the next statement, and sysbench reconnects).
        "--mysql-ignore-errors=1213,1205,1020,1053,2013,2006,9001,1290".into(),
        // sysbench 1.0.20 crashes re-preparing statements after a reconnect.
        "--db-ps-mode=disable".into(),
    ];
    args.extend(tables.iter().cloned());
    args.push("run".into());
    let port = s.port;
    let bench = std::thread::spawn(move || sysbench_text(port, &args));
    std::thread::sleep(kill_at);
    s.topo.primary().kill().map_err(|e| e.to_string())?;
    let text = bench.join().map_err(|_| "sysbench thread panicked")??;
    let r = parse_sysbench(&text);
    println!(
        "\nsysbench oltp_read_write, {} threads, {} s, primary killed (SIGKILL) at {} s:",
        o.threads,
        o.time,
        kill_at.as_secs()
    );
    println!(
        "  transactions/s {:.1}, queries/s {:.1}, errors seen by clients (ignored and retried by sysbench) {}, reconnects {}",
        r.tps, r.qps, r.errors, r.reconnects
    );
    println!("  per-second report around the failover:");
    for l in text.lines().filter(|l| l.starts_with('[')) {
        let sec: u64 = l
            .trim_start_matches("[ ")
            .split('s')
            .next()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        if sec + 2 >= kill_at.as_secs() && sec <= kill_at.as_secs() + 4 {
            println!("    {l}");
        }
    }
    Ok(())
}

/// Runs sysbench and returns its whole output.
fn sysbench_text(port: u16, args: &[String]) -> Result<String, String> {
    let bin = sluice_testkit::find_program("sysbench", "sysbench").map_err(|e| e.to_string())?;
    let out = std::process::Command::new(bin)
        .args(args)
        .arg("--db-driver=mysql")
        .arg("--mysql-host=127.0.0.1")
        .arg(format!("--mysql-port={port}"))
        .arg("--mysql-user=app")
        .arg("--mysql-password=app")
        .arg("--mysql-db=test")
        .output()
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!(
            "sysbench failed ({}):\n{text}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(text)
}
