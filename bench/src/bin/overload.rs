//! Tail latency under overload: 10,000 clients send queries back to back (no think time)
//! through one small pool (16 backend connections by default). Three scenarios, each with its
//! own sluice process:
//!
//! - A, *pool keeps up*: primary-key selects, `queue_timeout` 5 s. Every query should succeed;
//!   the wait queue is first come, first served, so p99 should stay close to p50.
//! - B, *timeout fires*: each query sleeps 10 ms, so the pool serves about 1,600 queries/s and
//!   most of the 10,000 waiters cannot get a connection within `queue_timeout` (1 s). They
//!   should fail with error 9001 after the timeout (not later), and the pool should keep
//!   serving at its capacity (no collapse).
//! - C, *queue full*: as B, with `queue_limit` 1000: statements beyond it fail at once with
//!   error 9001 (*overloaded*) while the pool keeps serving.
//!
//! The same 10,000 clients directly against MariaDB are not measured (MariaDB would need a
//! thread per client).
//!
//! Usage: cargo run --release -p sluice-bench --bin overload -- [--time SECS] [--clients N]
//!        [--pool N] [--concurrency N] [--timeout-a 5s] [--timeout 1s] [--limit 20000]
//!        [--limit-c 1000] [--sleep 0.01] [--only A,B,C]
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sluice_bench::client::Target;
use sluice_bench::load::{self, Query, Report};
use sluice_bench::*;
use sluice_testkit::MariaDb;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

struct Opts {
    time: u64,
    clients: usize,
    pool: u32,
    concurrency: usize,
    timeout_a: String,
    timeout: String,
    limit: u32,
    limit_c: u32,
    sleep: String,
    only: String,
}

/// One scenario's settings.
struct Scenario {
    name: &'static str,
    what: &'static str,
    template: String,
    queue_timeout: String,
    queue_limit: u32,
}

/// What one scenario measured.
struct Outcome {
    opened: Report,
    run: Report,
    backend_max: u64,
    threads_connected_max: u64,
    cpu_micros: Option<u64>,
    rss_open_kib: u64,
    rss_end_kib: u64,
    hwm_kib: u64,
    cli: String,
    log: Vec<String>,
    log_path: String,
    window: (String, String),
}

fn main() {
    let mut o = Opts {
        time: 20,
        clients: 10_000,
        pool: 16,
        concurrency: 200,
        timeout_a: "5s".into(),
        timeout: "1s".into(),
        limit: 20_000,
        limit_c: 1000,
        sleep: "0.01".into(),
        only: "A,B,C".into(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next().unwrap_or_else(|| panic!("{a} needs a value"));
        let num = |v: &str| -> u64 { v.parse().unwrap_or_else(|_| panic!("{a} needs a number")) };
        match a.as_str() {
            "--time" => o.time = num(&v),
            "--clients" => o.clients = num(&v) as usize,
            "--pool" => o.pool = num(&v) as u32,
            "--concurrency" => o.concurrency = num(&v) as usize,
            "--timeout-a" => o.timeout_a = v,
            "--timeout" => o.timeout = v,
            "--limit" => o.limit = num(&v) as u32,
            "--limit-c" => o.limit_c = num(&v) as u32,
            "--sleep" => o.sleep = v,
            "--only" => o.only = v.to_uppercase(),
            other => panic!("unknown argument {other}"),
        }
    }
    match run(&o) {
        Ok(true) => {}
        Ok(false) => std::process::exit(2),
        Err(e) => {
            eprintln!("overload: {e}");
            std::process::exit(1);
        }
    }
}

fn run(o: &Opts) -> Result<bool, String> {
    let nofile = rlimit::increase_nofile_limit(u64::MAX).map_err(|e| e.to_string())?;
    println!("# machine: {}", machine());
    println!(
        "# options: --time {} --clients {} --pool {} --concurrency {} --timeout-a {} --timeout {} --limit {} --limit-c {} --sleep {} --only {}",
        o.time, o.clients, o.pool, o.concurrency, o.timeout_a, o.timeout, o.limit, o.limit_c, o.sleep, o.only
    );
    println!(
        "# open files limit {nofile}; the load generator runs in this process ({} client sockets), think time 0",
        o.clients
    );
    if o.clients as u64 + 200 > nofile {
        return Err(format!(
            "{} clients need more than this process's {nofile} open files",
            o.clients
        ));
    }
    let rows = 10_000u64;
    let db = sbtest_server(
        &["--max-connections=500", "--thread-cache-size=100"],
        "256M",
        "CREATE USER 'sluice_monitor'@'%' IDENTIFIED BY 'mon'; GRANT REPLICA MONITOR ON *.* TO 'sluice_monitor'@'%';",
        1,
        rows,
    )?;
    let slow = format!("SELECT SLEEP({}), c FROM sbtest1 WHERE id={{id}}", o.sleep);
    let scenarios = [
        Scenario {
            name: "A",
            what: "pool keeps up",
            template: "SELECT c FROM sbtest1 WHERE id={id}".into(),
            queue_timeout: o.timeout_a.clone(),
            queue_limit: o.limit,
        },
        Scenario {
            name: "B",
            what: "timeout fires",
            template: slow.clone(),
            queue_timeout: o.timeout.clone(),
            queue_limit: o.limit,
        },
        Scenario {
            name: "C",
            what: "queue full",
            template: slow,
            queue_timeout: o.timeout.clone(),
            queue_limit: o.limit_c,
        },
    ];
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let mut results = Vec::new();
    for (i, s) in scenarios.iter().enumerate() {
        if !o.only.split(',').any(|x| x.trim() == s.name) {
            continue;
        }
        // Each scenario connects from its own loopback address: its own ephemeral ports,
        // whatever the previous scenario left in TIME_WAIT.
        let source = format!("127.0.0.{}", i + 2);
        let out = scenario(o, &db, &rt, s, &source, rows)?;
        results.push((s, out));
        std::thread::sleep(Duration::from_secs(2));
    }

    println!("\nQueries: A `SELECT c FROM sbtest1 WHERE id=?`; B and C `SELECT SLEEP({}), c FROM sbtest1 WHERE id=?`. Not measured: the same clients directly against MariaDB (it would need {} server threads).", o.sleep, o.clients);
    println!("\n| scenario | pool | queue timeout / limit | ok queries/s | p50 ms | p99 ms | p99.9 ms | max ms | p99/p50 | errors (code: count) | errors/s | error latency p50 / p99 / max ms | failed connections | backend conns max | sluice CPU | sluice RSS after login / end / peak MiB |");
    println!("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- | ---: | ---: | ---: | --- |");
    let mut ok = true;
    let mut notes = Vec::new();
    for (s, r) in &results {
        let run = &r.run;
        let lat = &run.latency;
        let el = &run.error_latency;
        let errors = if run.errors.is_empty() {
            "none".to_string()
        } else {
            run.errors
                .iter()
                .map(|(c, n)| format!("{c}: {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let secs = run.elapsed.as_secs_f64().max(1e-9);
        let cpu = r
            .cpu_micros
            .map(|c| format!("{:.0} %", c as f64 / 1e6 / secs * 100.0))
            .unwrap_or_else(|| "—".into());
        println!(
            "| {} {} | {} | {} / {} | {:.0} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} | {errors} | {:.0} | {} | {} | {} | {cpu} | {:.1} / {:.1} / {:.1} |",
            s.name,
            s.what,
            o.pool,
            s.queue_timeout,
            s.queue_limit,
            run.rate(),
            ms(lat.quantile(0.5)),
            ms(lat.quantile(0.99)),
            ms(lat.quantile(0.999)),
            ms(lat.max()),
            lat.quantile(0.99) as f64 / lat.quantile(0.5).max(1) as f64,
            run.error_count() as f64 / secs,
            if el.count() == 0 {
                "—".to_string()
            } else {
                format!(
                    "{:.1} / {:.1} / {:.1}",
                    ms(el.quantile(0.5)),
                    ms(el.quantile(0.99)),
                    ms(el.max())
                )
            },
            r.opened.failed + run.failed,
            r.backend_max,
            r.rss_open_kib as f64 / 1024.0,
            r.rss_end_kib as f64 / 1024.0,
            r.hwm_kib as f64 / 1024.0,
        );
        // Checks.
        let mut problems = Vec::new();
        if r.opened.failed > 0 || run.failed > 0 {
            problems.push(format!(
                "{} logins and {} connections broke: {}",
                r.opened.failed,
                run.failed,
                run.first_failure
                    .as_deref()
                    .or(r.opened.first_failure.as_deref())
                    .unwrap_or("?")
            ));
        }
        let unexpected: Vec<u16> = run
            .errors
            .keys()
            .copied()
            .filter(|&c| s.name == "A" || c != 9001)
            .collect();
        if !unexpected.is_empty() {
            problems.push(format!("unexpected error codes {unexpected:?}"));
        }
        if r.backend_max > u64::from(o.pool) {
            problems.push(format!(
                "{} backend connections, more than the pool's {}",
                r.backend_max, o.pool
            ));
        }
        if !problems.is_empty() {
            ok = false;
        }
        notes.push(note(s, r, &problems));
    }
    println!();
    for n in notes {
        println!("{n}");
    }
    drop(db);
    Ok(ok)
}

fn note(s: &Scenario, r: &Outcome, problems: &[String]) -> String {
    let log = if r.log.is_empty() {
        "nothing".to_string()
    } else {
        let shown: Vec<String> = r.log.iter().take(5).map(|l| format!("`{l}`")).collect();
        format!(
            "{} lines: {}{}",
            r.log.len(),
            shown.join("; "),
            if r.log.len() > 5 { "; …" } else { "" }
        )
    };
    format!(
        "- {}: {} logins in {:.1} s ({} failed); hammer {}–{} UTC: {} queries answered, {} errors in {:.1} s; \
         Threads_connected max {} (the pool's, the monitor's and this program's sampler); \
         one `mariadb` CLI query (connect, query) halfway through: {}; sluice log ({}) at warn and above: {}.{}",
        s.name,
        r.opened.ok,
        r.opened.elapsed.as_secs_f64(),
        r.opened.failed,
        r.window.0,
        r.window.1,
        r.run.ok,
        r.run.error_count(),
        r.run.elapsed.as_secs_f64(),
        r.threads_connected_max,
        r.cli,
        r.log_path,
        log,
        if problems.is_empty() {
            " Checks passed.".to_string()
        } else {
            format!(" **PROBLEMS: {}**", problems.join("; "))
        }
    )
}

/// Wall-clock time of day, UTC, `HH:MM:SS.mmm` (as in sluice's log).
fn utc_now() -> String {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let s = d.as_secs() % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        s / 3600,
        s / 60 % 60,
        s % 60,
        d.subsec_millis()
    )
}

/// Removes ANSI colour sequences.
fn strip_ansi(l: &str) -> String {
    let mut out = String::with_capacity(l.len());
    let mut it = l.chars();
    while let Some(c) = it.next() {
        if c == '\u{1b}' {
            for c in it.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn scenario(
    o: &Opts,
    db: &MariaDb,
    rt: &tokio::runtime::Runtime,
    s: &Scenario,
    source: &str,
    rows: u64,
) -> Result<Outcome, String> {
    let port = sluice_testkit::free_port().map_err(|e| e.to_string())?;
    let config = format!(
        "[proxy]\nlisten = \"127.0.0.1:{port}\"\nmax_client_connections = 15000\n\
         [[users]]\nname = \"app\"\npassword = \"app\"\n\
         [[servers]]\naddress = \"{}\"\nhostgroup = \"writer\"\nmax_connections = {}\n\
         [pool]\nqueue_timeout = \"{}\"\nqueue_limit = {}\n\
         [monitor]\nuser = \"sluice_monitor\"\npassword = \"mon\"\n\
         [log]\nlevel = \"warn\"\n",
        db.addr(),
        o.pool,
        s.queue_timeout,
        s.queue_limit
    );
    let sluice = start_sluice(&config, port)?;
    let pid = sluice.0.id();
    let log_path = std::env::temp_dir()
        .join(format!("sluice-bench-{port}.log"))
        .display()
        .to_string();
    let target = Target {
        addr: ([127, 0, 0, 1], port).into(),
        source: Some(source.parse().map_err(|e| format!("{source}: {e}"))?),
        user: "app".into(),
        password: "app".into(),
        database: Some("sbtest".into()),
    };
    eprintln!(
        "{} {}: opening {} connections to sluice (pool {}, queue_timeout {}, queue_limit {})",
        utc_now(),
        s.name,
        o.clients,
        o.pool,
        s.queue_timeout,
        s.queue_limit
    );
    let (conns, opened) = rt.block_on(load::open(
        std::slice::from_ref(&target),
        o.clients,
        o.concurrency,
    ));
    eprintln!("{} {}: login {}", utc_now(), s.name, opened.summary());
    if let Some(f) = &opened.first_failure {
        eprintln!("{}: first login failure: {f}", s.name);
    }
    let rss_open_kib = proc_status_kib(pid, "VmRSS:");
    let q = Query {
        template: s.template.clone(),
        rows,
    };
    let time = Duration::from_secs(o.time);
    let stop = AtomicBool::new(false);
    let samples = Mutex::new((0u64, 0u64));
    let cli = Mutex::new(String::from("not run"));
    let cpu0 = cpu_micros(pid);
    let from = utc_now();
    let (conns_left, run) = std::thread::scope(|scope| {
        scope.spawn(|| {
            let started = Instant::now();
            let mut cli_done = false;
            while !stop.load(Ordering::Relaxed) {
                if let Some((app, total)) = backend_connections(db) {
                    let mut m = samples.lock().unwrap();
                    m.0 = m.0.max(app);
                    m.1 = m.1.max(total);
                }
                if !cli_done && started.elapsed() >= time / 2 {
                    cli_done = true;
                    let text = cli_query(port, &s.template.replace("{id}", "1"));
                    *cli.lock().unwrap() = text;
                }
                std::thread::sleep(Duration::from_millis(250));
            }
        });
        let r = rt.block_on(load::hammer(conns, time, Duration::ZERO, &q));
        stop.store(true, Ordering::Relaxed);
        r
    });
    let cpu1 = cpu_micros(pid);
    let window = (from, utc_now());
    eprintln!("{} {}: hammer {}", utc_now(), s.name, run.summary());
    if let Some(f) = &run.first_failure {
        eprintln!("{}: first broken connection: {f}", s.name);
    }
    let rss_end_kib = proc_status_kib(pid, "VmRSS:");
    let hwm_kib = proc_status_kib(pid, "VmHWM:");
    let (backend_max, threads_connected_max) = *samples.lock().unwrap();
    // sluice closes first, so the TIME_WAIT sockets are on its side, not the client ports.
    drop(sluice);
    drop(conns_left);
    let log = std::fs::read_to_string(&log_path)
        .map(|t| t.lines().map(strip_ansi).collect())
        .unwrap_or_default();
    let cli = cli.into_inner().unwrap();
    Ok(Outcome {
        opened,
        run,
        backend_max,
        threads_connected_max,
        cpu_micros: match (cpu0, cpu1) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        },
        rss_open_kib,
        rss_end_kib,
        hwm_kib,
        cli,
        log,
        log_path,
        window,
    })
}

/// A `/proc/<pid>/status` field in KiB (`VmRSS:`, `VmHWM:`).
/// The server's connections of user `app` (sluice's pool) and its `Threads_connected`.
fn backend_connections(db: &MariaDb) -> Option<(u64, u64)> {
    let out = db
        .sql(
            "SELECT (SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER='app'), \
             (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME='THREADS_CONNECTED')",
        )
        .ok()?;
    let mut f = out.split_whitespace();
    Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
}

/// Runs one query through sluice with the `mariadb` CLI: how it ended and how long it took.
fn cli_query(port: u16, sql: &str) -> String {
    let Ok(client) = sluice_testkit::find_program("mariadb", "mariadb-client") else {
        return "no mariadb CLI".into();
    };
    let t0 = Instant::now();
    let out = Command::new(client)
        .arg("--no-defaults")
        .args(["--protocol=tcp", "-h127.0.0.1"])
        .arg(format!("-P{port}"))
        .args(["-uapp", "-papp", "sbtest", "--batch", "--skip-column-names"])
        .arg("--connect-timeout=10")
        .args(["-e", sql])
        .output();
    let took = t0.elapsed().as_millis();
    match out {
        Ok(o) if o.status.success() => format!("answered in {took} ms"),
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            let line = err
                .lines()
                .find(|l| l.starts_with("ERROR"))
                .unwrap_or(err.trim());
            format!("after {took} ms: `{line}`")
        }
        Err(e) => format!("cannot run: {e}"),
    }
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}
