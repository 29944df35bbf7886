//! PostgreSQL failover timing: a PostgreSQL 15 primary and two streaming standbys behind
//! sluice (release binary) with the simplest configuration (`[failover] enabled = true`,
//! defaults for everything else), set up as `crates/sluice/tests/postgres_failover.rs` does.
//!
//! One client inserts numbered rows through sluice in a loop (reconnecting after any error);
//! after ~2 s the primary gets SIGKILL (dead) or SIGSTOP (hung, the whole server); measured is
//! the time from the signal to the first INSERT acknowledged by another server, the statements
//! that failed, and whether every acknowledged row is on the new primary (asked directly).
//! Replication asynchronous, or synchronous (`FIRST 1` of the three servers, `synchronous_commit
//! = on` for `app`): there a missing acknowledged row is an error. A fresh topology per run.
//!
//! Usage: pgfailover [--reps N] [--mode async|sync|both] [--death kill|stop|both]
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sluice_bench::machine;
use sluice_bench::pgclient::PgClient;
use sluice_bench::pgmanaged::{Managed, User};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Longest the writer runs, and most statements it sends (hang guards).
const WRITER_LIMIT: Duration = Duration::from_secs(90);
const WRITER_MAX_STATEMENTS: u64 = 500_000;
/// Longest one statement or login may take.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(20);
/// Longest a failover may take before the run is declared failed.
const FAILOVER_LIMIT: Duration = Duration::from_secs(30);

struct Opts {
    reps: u32,
    modes: Vec<bool>,
    deaths: Vec<Death>,
}

#[derive(Clone, Copy, PartialEq)]
enum Death {
    Kill,
    Stop,
}

impl Death {
    fn name(self) -> &'static str {
        match self {
            Death::Kill => "SIGKILL",
            Death::Stop => "SIGSTOP",
        }
    }
}

fn mode_name(sync: bool) -> &'static str {
    if sync {
        "synchronous"
    } else {
        "asynchronous"
    }
}

fn main() {
    let mut o = Opts {
        reps: 5,
        modes: vec![false, true],
        deaths: vec![Death::Kill, Death::Stop],
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().expect("a value after the option");
        match a.as_str() {
            "--reps" => o.reps = value().parse().expect("--reps N"),
            "--mode" => {
                o.modes = match value().as_str() {
                    "async" => vec![false],
                    "sync" => vec![true],
                    "both" => vec![false, true],
                    other => panic!("--mode async|sync|both, not {other}"),
                }
            }
            "--death" => {
                o.deaths = match value().as_str() {
                    "kill" => vec![Death::Kill],
                    "stop" => vec![Death::Stop],
                    "both" => vec![Death::Kill, Death::Stop],
                    other => panic!("--death kill|stop|both, not {other}"),
                }
            }
            other => panic!("unknown argument {other} (--reps N, --mode M, --death D)"),
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    if let Err(e) = run(&rt, &o) {
        eprintln!("pgfailover: {e}");
        std::process::exit(1);
    }
}

/// What one run measured.
struct RunResult {
    first_ms: u128,
    failed: usize,
    /// Failed statements by their error (SQLSTATE and message, or the transport error).
    errors: BTreeMap<String, usize>,
    logins_failed: usize,
    acked: usize,
    acked_by_old_after_signal: usize,
    missing: usize,
    new_primary: String,
    events: String,
}

fn run(rt: &tokio::runtime::Runtime, o: &Opts) -> Result<(), String> {
    println!("# machine: {}", machine());
    println!("# sluice: {}", sluice_bench::sluice_bin().display());
    println!(
        "# sluice defaults: monitor interval 250 ms, check timeout 500 ms, detection time 1 s, write_wait 10 s"
    );
    println!(
        "\n| replication | death | run | first write after (ms) | failed statements | their errors | failed logins | rows acknowledged | acked by the old primary after the signal | acknowledged rows missing | new primary |\n| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | --- |"
    );
    let mut summary = Vec::new();
    for &sync in &o.modes {
        for &death in &o.deaths {
            let mut runs = Vec::new();
            for rep in 1..=o.reps {
                let r = one_run(rt, sync, death)?;
                let errors: Vec<String> =
                    r.errors.iter().map(|(e, n)| format!("{n}× {e}")).collect();
                println!(
                    "| {} | {} | {rep} | {} | {} | {} | {} | {} | {} | {} | {} |",
                    mode_name(sync),
                    death.name(),
                    r.first_ms,
                    r.failed,
                    errors.join("; ").replace('|', "/"),
                    r.logins_failed,
                    r.acked,
                    r.acked_by_old_after_signal,
                    r.missing,
                    r.new_primary
                );
                if rep == 1 {
                    eprintln!(
                        "# {} {} run 1, monitor events (ms from the signal):\n{}",
                        mode_name(sync),
                        death.name(),
                        r.events
                    );
                }
                runs.push(r);
            }
            summary.push((sync, death, runs));
        }
    }
    println!(
        "\n| replication | death | first write after ({} runs: min / median / max) | failed statements per run | acknowledged rows missing per run |\n| --- | --- | ---: | ---: | ---: |",
        o.reps
    );
    for (sync, death, runs) in &summary {
        let mut t: Vec<u128> = runs.iter().map(|r| r.first_ms).collect();
        t.sort_unstable();
        let list = |f: &dyn Fn(&RunResult) -> usize| {
            runs.iter()
                .map(|r| f(r).to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        println!(
            "| {} | {} | {} / {} / {} ms | {} | {} |",
            mode_name(*sync),
            death.name(),
            t[0],
            t[t.len() / 2],
            t[t.len() - 1],
            list(&|r| r.failed),
            list(&|r| r.missing)
        );
    }
    Ok(())
}

/// The table, `synchronous_commit = on` for `app` and, in synchronous mode, the synchronous
/// replication settings.
fn prepare(topo: &sluice_testkit::PgTopology, sync: bool) -> Result<(), String> {
    let p = topo.primary();
    let sql = |s: &str| p.sql(s).map(drop).map_err(|e| format!("{s}: {e}"));
    sql("CREATE TABLE w (id bigint PRIMARY KEY)")?;
    if sync {
        let names: Vec<String> = topo
            .servers
            .iter()
            .map(|s| format!("pg{}", s.port))
            .collect();
        sql(&format!(
            "ALTER SYSTEM SET synchronous_standby_names = 'FIRST 1 ({})'",
            names.join(", ")
        ))?;
        sql("SELECT pg_reload_conf()")?;
    }
    // PostgreSQL's default: a commit is acknowledged once flushed locally (and, with
    // synchronous standbys, by one of them). The test servers run with it off, which would
    // lose every commit the WAL writer had not flushed yet, replication or not.
    sql("ALTER ROLE app SET synchronous_commit = on")?;
    Ok(())
}

/// One acknowledged row: when, which row, which server's port answered.
struct Ack {
    at: Instant,
    id: u64,
    port: u16,
}

/// What the writer saw, shared with the run.
#[derive(Default)]
struct Seen {
    acks: Mutex<Vec<Ack>>,
    errors: Mutex<Vec<String>>,
    logins_failed: Mutex<usize>,
    stop: AtomicBool,
}

/// One client inserting numbered rows through sluice, one autocommit INSERT at a time,
/// reconnecting after any error; bounded by [`WRITER_LIMIT`] and [`WRITER_MAX_STATEMENTS`].
async fn writer(port: u16, seen: Arc<Seen>) {
    let deadline = Instant::now() + WRITER_LIMIT;
    let mut conn: Option<PgClient> = None;
    let mut id = 0u64;
    while !seen.stop.load(Relaxed) && Instant::now() < deadline && id < WRITER_MAX_STATEMENTS {
        let c = match conn.as_mut() {
            Some(c) => c,
            None => {
                match PgClient::connect_within(STATEMENT_TIMEOUT, port, "app", "app", "postgres")
                    .await
                {
                    Ok(c) => conn.insert(c),
                    Err(_) => {
                        *seen.logins_failed.lock().unwrap() += 1;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                }
            }
        };
        id += 1;
        // The server that acknowledged it says who it is.
        let sql = format!("INSERT INTO w VALUES ({id}) RETURNING inet_server_port()");
        match tokio::time::timeout(STATEMENT_TIMEOUT, c.query_one(&sql)).await {
            Ok(Ok(p)) => seen.acks.lock().unwrap().push(Ack {
                at: Instant::now(),
                id,
                port: p.trim().parse().unwrap_or(0),
            }),
            Ok(Err(e)) => {
                seen.errors.lock().unwrap().push(e);
                conn = None;
            }
            Err(_) => {
                seen.errors
                    .lock()
                    .unwrap()
                    .push(format!("no answer within {STATEMENT_TIMEOUT:?}"));
                conn = None;
            }
        }
    }
}

/// One run on a fresh topology.
fn one_run(rt: &tokio::runtime::Runtime, sync: bool, death: Death) -> Result<RunResult, String> {
    let mut m = Managed::start(
        &[User {
            name: "app",
            read_your_writes: false,
        }],
        |topo| prepare(topo, sync),
    )?;
    let seen = Arc::new(Seen::default());
    let task = rt.spawn(writer(m.port, seen.clone()));
    let result = measure(&mut m, &seen, death);
    seen.stop.store(true, Relaxed);
    let _ = rt.block_on(task);
    let mut r = result?;
    // Every acknowledged row on the new primary, asked directly.
    let acks = std::mem::take(&mut *seen.acks.lock().unwrap());
    let new = m
        .topo
        .servers
        .iter()
        .find(|s| s.addr() == r.new_primary)
        .ok_or_else(|| format!("no server {}", r.new_primary))?;
    let role = new
        .sql("SELECT pg_is_in_recovery()")
        .map_err(|e| e.to_string())?;
    if role.trim() != "f" {
        return Err(format!(
            "{} acknowledged writes but is still in recovery\n{}",
            r.new_primary,
            m.log_tail(40)
        ));
    }
    let present: BTreeSet<u64> = new
        .sql("SELECT id FROM w")
        .map_err(|e| e.to_string())?
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    let missing: Vec<u64> = acks
        .iter()
        .map(|a| a.id)
        .filter(|id| !present.contains(id))
        .collect();
    r.acked = acks.len();
    r.missing = missing.len();
    let errors = std::mem::take(&mut *seen.errors.lock().unwrap());
    r.failed = errors.len();
    for e in errors {
        *r.errors.entry(short_error(&e)).or_default() += 1;
    }
    r.logins_failed = *seen.logins_failed.lock().unwrap();
    if sync && !missing.is_empty() {
        return Err(format!(
            "synchronous replication, {}: acknowledged rows missing on the new primary {}: {missing:?}\nmonitor events: {}\n{}",
            death.name(),
            r.new_primary,
            m.events(),
            m.log_tail(60)
        ));
    }
    Ok(r)
}

/// Waits (polling) until `ok`; after `limit`, an error with what the client and sluice saw.
fn wait_until(
    m: &Managed,
    seen: &Seen,
    what: &str,
    limit: Duration,
    ok: &dyn Fn() -> bool,
) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    while !ok() {
        if Instant::now() > deadline {
            return Err(format!(
                "{what} within {limit:?}; client errors: {:?}\nmonitor events: {}\n{}",
                seen.errors.lock().unwrap(),
                m.events(),
                m.log_tail(60)
            ));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(())
}

/// Writes for ~2 s, signals the primary, waits for the first write another server
/// acknowledges. Returns the partial result (timings, new primary, events).
fn measure(m: &mut Managed, seen: &Seen, death: Death) -> Result<RunResult, String> {
    wait_until(m, seen, "no first write", Duration::from_secs(30), &|| {
        !seen.acks.lock().unwrap().is_empty()
    })?;
    std::thread::sleep(Duration::from_secs(2));
    let old = m.topo.primary().port;
    let signal_epoch_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let t0 = Instant::now();
    match death {
        // Returns once the postmaster is gone (its backends notice and exit on their own).
        Death::Kill => m.topo.servers[0].kill(),
        Death::Stop => {
            m.paused.push(0);
            m.topo.servers[0].pause().map_err(|e| e.to_string())?;
        }
    }
    let first = || {
        seen.acks
            .lock()
            .unwrap()
            .iter()
            .find(|a| a.at > t0 && a.port != old)
            .map(|a| (a.at, a.port))
    };
    wait_until(
        m,
        seen,
        "no write acknowledged by another server",
        FAILOVER_LIMIT,
        &|| first().is_some(),
    )?;
    let (at, port) = first().unwrap();
    let acked_by_old_after_signal = seen
        .acks
        .lock()
        .unwrap()
        .iter()
        .filter(|a| a.at > t0 && a.port == old)
        .count();
    Ok(RunResult {
        first_ms: (at - t0).as_millis(),
        failed: 0,
        errors: BTreeMap::new(),
        logins_failed: 0,
        acked: 0,
        acked_by_old_after_signal,
        missing: 0,
        new_primary: format!("127.0.0.1:{port}"),
        events: events_since(&m.events(), signal_epoch_ms),
    })
}

/// A client error, short: SQLSTATE and the start of the message, or the transport error.
fn short_error(e: &str) -> String {
    let mut s: String = e.chars().take(110).collect();
    if s.len() < e.len() {
        s.push('…');
    }
    s
}

/// The monitor's events (`GET /api/events` text) from 1 s before `epoch_ms` on, one line
/// each, timed from `epoch_ms`.
fn events_since(json: &str, epoch_ms: u128) -> String {
    let field = |o: &str, key: &str| -> Option<String> {
        let at = o.find(&format!("\"{key}\":"))? + key.len() + 3;
        let rest = &o[at..];
        Some(match rest.strip_prefix('"') {
            Some(text) => text[..text.find("\",\"").unwrap_or(text.len())]
                .trim_end_matches(['}', ']'])
                .trim_end_matches('"')
                .to_string(),
            None => rest.split([',', '}']).next()?.to_string(),
        })
    };
    let mut out = Vec::new();
    for o in json.split("},{") {
        let Some(at) = field(o, "at_ms").and_then(|v| v.parse::<i128>().ok()) else {
            continue;
        };
        let rel = at - epoch_ms as i128;
        if rel >= -1000 {
            out.push(format!(
                "#   {rel:+6} ms {}: {}",
                field(o, "kind").unwrap_or_default(),
                field(o, "message").unwrap_or_default()
            ));
        }
    }
    out.join("\n")
}
