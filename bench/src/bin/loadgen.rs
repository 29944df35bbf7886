//! Load generator: a small MySQL client that holds many connections cheaply.
//!
//! ```text
//! loadgen cpq    --addr A --clients N --time S            connect, one query, quit, in a loop
//! loadgen hammer --addr A --clients N --time S            N connections, queries back to back
//! loadgen hold   --addr A --clients N                     open N connections, then obey stdin:
//!     "sweep"           one query on every connection
//!     "active K S MS"   K of them run queries for S seconds, MS ms apart
//!     "quit"            close everything and exit
//! ```
//! Common options: `--source IP[,IP…]` (local addresses to connect from), `--user`,
//! `--password`, `--db`, `--query 'SELECT … {id}'`, `--rows R`, `--concurrency C` (logins in
//! flight at once). Results are printed as one `phase key=value…` line per phase
//! (see `Report::line`), so that a driver can merge several processes.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sluice_bench::client::Target;
use sluice_bench::load::{self, Query, Report};
use std::io::BufRead;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

struct Opts {
    mode: String,
    addr: SocketAddr,
    sources: Vec<IpAddr>,
    user: String,
    password: String,
    db: Option<String>,
    clients: usize,
    time: u64,
    think_ms: u64,
    concurrency: usize,
    query: Query,
}

fn parse() -> Opts {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_default();
    let mut o = Opts {
        mode,
        addr: "127.0.0.1:3306".parse().expect("address"),
        sources: Vec::new(),
        user: "app".into(),
        password: "app".into(),
        db: Some("sbtest".into()),
        clients: 10,
        time: 10,
        think_ms: 0,
        concurrency: 200,
        query: Query {
            template: "SELECT c FROM sbtest1 WHERE id={id}".into(),
            rows: 10_000,
        },
    };
    while let Some(a) = args.next() {
        let v = args.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--addr" => o.addr = v.parse().expect("--addr HOST:PORT"),
            "--source" => {
                o.sources = v
                    .split(',')
                    .map(|s| s.parse().expect("--source IP"))
                    .collect()
            }
            "--user" => o.user = v,
            "--password" => o.password = v,
            "--db" => o.db = (!v.is_empty()).then_some(v),
            "--clients" => o.clients = v.parse().expect("--clients N"),
            "--time" => o.time = v.parse().expect("--time SECS"),
            "--think-ms" => o.think_ms = v.parse().expect("--think-ms MS"),
            "--concurrency" => o.concurrency = v.parse().expect("--concurrency N"),
            "--query" => o.query.template = v,
            "--rows" => o.query.rows = v.parse().expect("--rows N"),
            other => panic!("unknown option {other}"),
        }
    }
    o
}

fn targets(o: &Opts) -> Vec<Target> {
    let base = Target {
        addr: o.addr,
        source: None,
        user: o.user.clone(),
        password: o.password.clone(),
        database: o.db.clone(),
    };
    if o.sources.is_empty() {
        return vec![base];
    }
    o.sources
        .iter()
        .map(|s| Target {
            source: Some(*s),
            ..base.clone()
        })
        .collect()
}

fn emit(phase: &str, r: &Report) {
    println!("{phase} {}", r.line());
}

fn main() {
    let _ = rlimit::increase_nofile_limit(u64::MAX);
    let o = parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let ts = targets(&o);
        let time = Duration::from_secs(o.time);
        match o.mode.as_str() {
            "cpq" => emit(
                "cpq",
                &load::connect_per_query(&ts, o.clients, time, &o.query).await,
            ),
            "hammer" => {
                let (conns, opened) = load::open(&ts, o.clients, o.concurrency).await;
                emit("open", &opened);
                let think = Duration::from_millis(o.think_ms);
                let (_, r) = load::hammer(conns, time, think, &o.query).await;
                emit("hammer", &r);
            }
            "hold" => hold(&o, &ts).await,
            other => {
                eprintln!("loadgen: unknown mode {other:?} (cpq, hammer, hold)");
                std::process::exit(2);
            }
        }
    });
}

/// Opens the connections, reports, then follows commands from stdin.
async fn hold(o: &Opts, ts: &[Target]) {
    let (mut conns, opened) = load::open(ts, o.clients, o.concurrency).await;
    emit("open", &opened);
    let (tx, mut rx) = tokio::sync::mpsc::channel::<String>(4);
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.blocking_send(line).is_err() {
                break;
            }
        }
    });
    while let Some(cmd) = rx.recv().await {
        let words: Vec<&str> = cmd.split_whitespace().collect();
        match words.as_slice() {
            ["sweep"] => {
                let (kept, r) =
                    load::sweep(std::mem::take(&mut conns), o.concurrency, &o.query).await;
                conns = kept;
                emit("sweep", &r);
            }
            ["active", k, s, ms] => {
                let k: usize = k.parse().unwrap_or(0).min(conns.len());
                let s: u64 = s.parse().unwrap_or(5).min(600);
                let ms: u64 = ms.parse().unwrap_or(0);
                let active: Vec<_> = conns.drain(..k).collect();
                let (back, r) = load::hammer(
                    active,
                    Duration::from_secs(s),
                    Duration::from_millis(ms),
                    &o.query,
                )
                .await;
                conns.extend(back);
                emit("active", &r);
            }
            ["quit"] => break,
            _ => eprintln!("loadgen: unknown command {cmd:?}"),
        }
    }
    println!("held {}", conns.len());
    for c in conns {
        c.quit().await;
    }
}
