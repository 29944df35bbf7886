//! 100,000 concurrent client connections on one machine.
//!
//! One process may hold at most 20,000 open files here, so several sluice processes share
//! the port with SO_REUSEPORT (`[proxy] reuse_port`), and several `loadgen hold` processes
//! connect from several loopback source addresses (127.0.0.2, 127.0.0.3, …). Every
//! connection logs in (mysql_native_password, initial schema); then every connection runs one
//! query (proving each can query at any time); then a small active share runs queries for a
//! while with the rest idle, and their latency is reported. sluice's memory per idle client
//! connection is the growth of the sluice processes' resident memory (VmRSS) divided by the
//! connections they hold; kernel socket memory is reported separately.
//!
//! Usage: cargo run --release -p sluice-bench --bin connections -- [--clients 100000]
//!        [--proxies 8] [--generators 8] [--active 1000] [--active-time 10] [--think-ms 10]
//!        [--pool 32]
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sluice_bench::load::Report;
use sluice_bench::*;
use std::io::{BufRead, BufReader, Write};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

struct Opts {
    clients: usize,
    proxies: usize,
    generators: usize,
    active: usize,
    active_time: u64,
    think_ms: u64,
    pool: u32,
}

fn main() {
    let mut o = Opts {
        clients: 100_000,
        proxies: 8,
        generators: 8,
        active: 1000,
        active_time: 10,
        think_ms: 10,
        pool: 32,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v: u64 = args
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{a} needs a number"));
        match a.as_str() {
            "--clients" => o.clients = v as usize,
            "--proxies" => o.proxies = v as usize,
            "--generators" => o.generators = v as usize,
            "--active" => o.active = v as usize,
            "--active-time" => o.active_time = v,
            "--think-ms" => o.think_ms = v,
            "--pool" => o.pool = v as u32,
            other => panic!("unknown argument {other}"),
        }
    }
    if let Err(e) = run(&o) {
        eprintln!("connections: {e}");
        std::process::exit(1);
    }
}

/// Open file descriptors of a process.
fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Kernel memory held by TCP sockets, KiB (`/proc/net/sockstat`, pages).
fn tcp_kernel_kib() -> u64 {
    std::fs::read_to_string("/proc/net/sockstat")
        .ok()
        .and_then(|s| {
            let l = s.lines().find(|l| l.starts_with("TCP:"))?;
            let w: Vec<&str> = l.split_whitespace().collect();
            let i = w.iter().position(|x| *x == "mem")?;
            w.get(i + 1)?.parse::<u64>().ok()
        })
        .map(|pages| pages * 4)
        .unwrap_or(0)
}

struct Generator {
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    _child: Guard,
}

impl Generator {
    /// Waits for the next result line starting with `phase`.
    fn expect(&self, phase: &str, timeout: Duration) -> Result<Report, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .map_err(|_| format!("no '{phase}' result from a load generator"))?;
            if let Some(rest) = line.strip_prefix(phase) {
                return Report::parse(rest.trim()).ok_or_else(|| format!("bad line {line}"));
            }
        }
    }

    fn send(&mut self, cmd: &str) -> Result<(), String> {
        writeln!(self.stdin, "{cmd}").map_err(|e| e.to_string())
    }
}

fn all(gens: &[Generator], phase: &str, timeout: Duration) -> Result<Report, String> {
    let mut total = Report::default();
    for g in gens {
        total.merge(&g.expect(phase, timeout)?);
    }
    Ok(total)
}

fn run(o: &Opts) -> Result<(), String> {
    println!("# machine: {}", machine());
    println!(
        "# options: --clients {} --proxies {} --generators {} --active {} --active-time {} --think-ms {} --pool {}",
        o.clients, o.proxies, o.generators, o.active, o.active_time, o.think_ms, o.pool
    );
    let per_proxy = o.clients / o.proxies + 2000;
    if per_proxy + o.pool as usize + 100 > 20_000 {
        return Err(format!(
            "{} clients over {} proxies is more than 20,000 open files per process: add --proxies",
            o.clients, o.proxies
        ));
    }
    let db = sbtest_server(
        &["--max-connections=2000", "--thread-cache-size=200"],
        "256M",
        "",
        1,
        10_000,
    )?;
    let threads_before = status_counter(&db, "Threads_connected")?;

    let port = sluice_testkit::free_port().map_err(|e| e.to_string())?;
    let config = format!(
        "[proxy]\nlisten = \"127.0.0.1:{port}\"\nreuse_port = true\nmax_client_connections = {per_proxy}\n[[users]]\nname = \"app\"\npassword = \"app\"\n[[servers]]\naddress = \"{}\"\nhostgroup = \"writer\"\nmax_connections = {}\n[log]\nlevel = \"warn\"\n",
        db.addr(),
        o.pool
    );
    let mut proxies = Vec::new();
    for _ in 0..o.proxies {
        proxies.push(start_sluice(&config, port)?);
        std::thread::sleep(Duration::from_millis(300));
    }
    let pids: Vec<u32> = proxies.iter().map(|p| p.0.id()).collect();
    let loadgen = sluice_bin().with_file_name("loadgen");
    // Warm up: pools open, allocators settle (not counted).
    let warm = Command::new(&loadgen)
        .args(["hammer", "--addr", &format!("127.0.0.1:{port}")])
        .args(["--clients", &(o.proxies * 40).to_string(), "--time", "3"])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", loadgen.display()))?;
    if !warm.status.success() {
        return Err(format!(
            "warm-up failed: {}",
            String::from_utf8_lossy(&warm.stderr)
        ));
    }
    std::thread::sleep(Duration::from_secs(2));
    let rss0: u64 = pids.iter().map(|&p| proc_status_kib(p, "VmRSS:")).sum();
    let kmem0 = tcp_kernel_kib();
    eprintln!(
        "baseline: {} sluice processes, {rss0} KiB resident in all",
        o.proxies
    );

    // Two waves: memory is read after each, so that the growth per connection between them
    // (the slope) excludes fixed costs such as the buffer shelf filling up.
    let mut gens = Vec::new();
    let per_gen = o.clients.div_ceil(o.generators);
    let first_wave = o.generators.div_ceil(2);
    let mut opened = Report::default();
    let mut half = (0u64, 0u64);
    let started = Instant::now();
    for i in 0..o.generators {
        if i == first_wave {
            let wave = all(&gens, "open", Duration::from_secs(600))?;
            std::thread::sleep(Duration::from_secs(2));
            half = (
                wave.ok,
                pids.iter().map(|&p| proc_status_kib(p, "VmRSS:")).sum(),
            );
            opened.merge(&wave);
        }
        let n = per_gen.min(o.clients - i * per_gen);
        let source = format!("127.0.0.{}", i + 2);
        let mut child = Command::new(&loadgen)
            .args(["hold", "--addr", &format!("127.0.0.1:{port}")])
            .args(["--source", &source, "--clients", &n.to_string()])
            .args(["--concurrency", "64"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", loadgen.display()))?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        gens.push(Generator {
            stdin,
            lines: rx,
            _child: Guard(child),
        });
    }
    opened.merge(&all(&gens[first_wave..], "open", Duration::from_secs(600))?);
    let connect_time = started.elapsed();
    eprintln!(
        "opened {} connections in {:.1} s ({} failed: {:?})",
        opened.ok,
        connect_time.as_secs_f64(),
        opened.failed,
        opened.first_failure
    );
    // Past sluice's idle-buffer release (500 ms).
    std::thread::sleep(Duration::from_secs(3));
    let rss1: u64 = pids.iter().map(|&p| proc_status_kib(p, "VmRSS:")).sum();
    let kmem1 = tcp_kernel_kib();
    let fd_counts: Vec<usize> = pids.iter().map(|&p| fds(p)).collect();
    let backends = status_counter(&db, "Threads_connected")?.saturating_sub(threads_before);

    for g in &mut gens {
        g.send("sweep")?;
    }
    let swept = all(&gens, "sweep", Duration::from_secs(600))?;
    eprintln!("sweep: {}", swept.summary());
    let backends_sweep = status_counter(&db, "Threads_connected")?.saturating_sub(threads_before);

    let per_gen_active = o.active.div_ceil(o.generators);
    for g in &mut gens {
        g.send(&format!(
            "active {per_gen_active} {} {}",
            o.active_time, o.think_ms
        ))?;
    }
    let active = all(&gens, "active", Duration::from_secs(o.active_time + 120))?;
    eprintln!("active share: {}", active.summary());
    std::thread::sleep(Duration::from_secs(2));
    let rss2: u64 = pids.iter().map(|&p| proc_status_kib(p, "VmRSS:")).sum();

    for g in &mut gens {
        let _ = g.send("quit");
    }
    let held = opened.ok.max(1);
    let per_conn = |a: u64, b: u64| (b.saturating_sub(a)) as f64 * 1024.0 / held as f64;
    let slope = rss1.saturating_sub(half.1) as f64 * 1024.0
        / (opened.ok.saturating_sub(half.0)).max(1) as f64;
    println!();
    println!("| measure | value |");
    println!("| --- | ---: |");
    println!(
        "| client connections opened (authenticated, with a schema) | {} |",
        opened.ok
    );
    println!("| failed logins | {} |", opened.failed);
    println!(
        "| time to open them all | {:.1} s ({:.0} logins/s) |",
        connect_time.as_secs_f64(),
        opened.ok as f64 / connect_time.as_secs_f64()
    );
    println!(
        "| login latency p50 / p99 | {:.2} / {:.2} ms |",
        ms(opened.latency.quantile(0.5)),
        ms(opened.latency.quantile(0.99))
    );
    println!(
        "| open files per sluice process | {} |",
        fd_counts
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!("| server connections (all sluice processes), idle / after the sweep | {backends} / {backends_sweep} |");
    println!(
        "| sluice resident memory: baseline / all connected idle / after queries, idle again | {:.1} / {:.1} / {:.1} MiB |",
        rss0 as f64 / 1024.0,
        rss1 as f64 / 1024.0,
        rss2 as f64 / 1024.0
    );
    println!(
        "| **sluice memory per idle client connection**: growth from {} to {} connections | **{slope:.0} B** |",
        half.0, opened.ok
    );
    println!(
        "| sluice memory per idle client connection, everything above the warmed-up baseline (after login / after a query each) | {:.0} B / {:.0} B |",
        per_conn(rss0, rss1),
        per_conn(rss0, rss2)
    );
    println!(
        "| kernel TCP memory (both ends of every socket, not sluice's) | {:.0} MiB more |",
        kmem1.saturating_sub(kmem0) as f64 / 1024.0
    );
    println!(
        "| every connection runs one query: answered / errors / broken | {} / {} / {} (p50 {:.2} ms, p99 {:.2} ms) |",
        swept.ok,
        swept.error_count(),
        swept.failed,
        ms(swept.latency.quantile(0.5)),
        ms(swept.latency.quantile(0.99))
    );
    println!(
        "| active share ({} connections, {} ms think time, {} s) | {:.0} queries/s, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms, errors {} |",
        per_gen_active * o.generators,
        o.think_ms,
        o.active_time,
        active.rate(),
        ms(active.latency.quantile(0.5)),
        ms(active.latency.quantile(0.99)),
        ms(active.latency.max()),
        active.error_count() + active.failed
    );
    drop(gens);
    drop(proxies);
    if opened.ok as usize != o.clients || swept.ok as usize != o.clients {
        return Err(format!(
            "not every connection logged in and queried: {} opened, {} answered",
            opened.ok, swept.ok
        ));
    }
    Ok(())
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}
