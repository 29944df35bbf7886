//! `sluice`: run the proxy, check a config, or run the local demo.
#![forbid(unsafe_code)]

mod demo;

use clap::{Parser, Subcommand};
use sluice_config::Config;
use std::path::PathBuf;
use std::process::ExitCode;

/// mimalloc (its v2 line, as Debian ships it; without transparent huge pages) instead of
/// glibc's malloc: an idle client costs about 1.6 KB instead of 1.9 (docs/benchmarks.md,
/// "mimalloc"), and with hundreds of statements in flight, where glibc's per-thread cache no
/// longer holds a statement's few short-lived allocations, allocating costs less.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "sluice",
    version,
    about = "A read/write-splitting, pooling proxy for MySQL/MariaDB and PostgreSQL"
)]
struct Cli {
    /// Configuration file (runs the proxy when no subcommand is given).
    #[arg(long, short, global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Cmd>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the proxy (same as giving only --config).
    Run,
    /// Validate a configuration file and exit non-zero naming the bad field.
    Check,
    /// Start a primary and two replicas from the local MariaDB binaries (PostgreSQL with
    /// --postgres), put sluice in front (with its admin API and dashboard), run a short
    /// workload and show where it went. Ctrl-C stops and cleans up.
    Demo {
        /// Port for the demo's proxy listener [default: 6033, 6432 with --postgres].
        #[arg(long)]
        port: Option<u16>,
        /// Port for the demo's admin API and dashboard.
        #[arg(long, default_value_t = 6080)]
        admin_port: u16,
        /// Exit after the demo instead of waiting for Ctrl-C.
        #[arg(long)]
        no_wait: bool,
        /// After the workload, kill the primary while a client writes, and tell what sluice
        /// does: who is promoted, how long until the first write, whether any acknowledged
        /// write was lost (semi-synchronous replication). MariaDB only.
        #[arg(long)]
        failover: bool,
        /// PostgreSQL instead of MariaDB: a primary and two streaming replicas from the local
        /// postgresql-15 binaries, behind a PostgreSQL listener that splits reads from writes.
        #[arg(long)]
        postgres: bool,
    },
    /// Ask the running proxy (through its admin API, `[admin] listen`) to make a replica the
    /// primary: writes drain, the replica catches up, roles swap. Clients see no errors.
    Switchover {
        /// Address or name of the replica to promote (default: the most advanced one).
        #[arg(long)]
        to: Option<String>,
    },
    /// Ask the running proxy (through its admin API) to re-read its configuration file and
    /// apply it without a restart (as SIGHUP does). A file that does not validate, or that
    /// changes what needs a restart, is refused whole with the reason.
    Reload,
    /// The running proxy's configuration.
    Config {
        #[command(subcommand)]
        action: ConfigCmd,
    },
}

#[derive(Subcommand)]
enum ConfigCmd {
    /// Print the running proxy's effective configuration as TOML: the file as last applied,
    /// with runtime changes made over the admin API (weights) folded in.
    Dump,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Cmd::Demo {
            port,
            admin_port,
            no_wait,
            failover,
            postgres,
        }) => {
            if postgres && failover {
                eprintln!(
                    "sluice demo: --failover is MySQL-only: sluice has no PostgreSQL monitor or failover yet. Run `sluice demo --failover` (MariaDB) or `sluice demo --postgres`."
                );
                return ExitCode::from(2);
            }
            // The failover demo tells the story itself, from the monitor's own record.
            init_logging(if failover { "error" } else { "warn" }, false);
            runtime().block_on(demo::run(demo::Options {
                port: port.unwrap_or(if postgres { 6432 } else { 6033 }),
                admin_port,
                no_wait,
                failover,
                postgres,
            }))
        }
        Some(Cmd::Check) => match load(cli.config.as_deref()) {
            Ok(cfg) => {
                println!(
                    "config OK: {} listener(s), {} user(s), {} server(s) in {} hostgroup(s), {} rule(s)",
                    1 + cfg.listeners.len(),
                    cfg.users.len(),
                    cfg.servers.len(),
                    cfg.hostgroup_names().len(),
                    cfg.rules.len()
                );
                ExitCode::SUCCESS
            }
            Err(msg) => {
                eprintln!("{msg}");
                ExitCode::from(2)
            }
        },
        Some(Cmd::Switchover { to }) => {
            let mut path = "/api/switchover".to_string();
            if let Some(t) = &to {
                path.push_str(&format!("?to={}", percent_encode(t)));
            }
            admin_call(cli.config.as_deref(), "switchover", "POST", &path)
        }
        Some(Cmd::Reload) => admin_call(cli.config.as_deref(), "reload", "POST", "/api/reload"),
        Some(Cmd::Config {
            action: ConfigCmd::Dump,
        }) => admin_call(cli.config.as_deref(), "config dump", "GET", "/api/config"),
        Some(Cmd::Run) | None => {
            let cfg = match load(cli.config.as_deref()) {
                Ok(cfg) => cfg,
                Err(msg) => {
                    eprintln!("{msg}");
                    return ExitCode::from(2);
                }
            };
            init_logging(&cfg.log.level, cfg.log.json);
            raise_file_limit(&cfg);
            let path = cli.config.clone().unwrap_or_default();
            runtime_with(cfg.proxy.worker_threads).block_on(run(cfg, path))
        }
    }
}

/// Calls the running proxy's admin API (from the configuration's `[admin]`) and prints the
/// answer: a JSON `result` (a string or a list of lines), or plain text.
fn admin_call(config: Option<&std::path::Path>, what: &str, method: &str, path: &str) -> ExitCode {
    let cfg = match load(config) {
        Ok(cfg) => cfg,
        Err(msg) => {
            eprintln!("{msg}");
            return ExitCode::from(2);
        }
    };
    let Some(admin) = &cfg.admin else {
        eprintln!("sluice: {what} needs the admin API: set [admin] listen in the configuration");
        return ExitCode::from(2);
    };
    match admin_request(&admin.listen, admin.token.as_deref(), method, path) {
        Ok((200, body)) => {
            match serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v.get("result").cloned())
            {
                Some(serde_json::Value::String(s)) => println!("{s}"),
                Some(serde_json::Value::Array(lines)) if lines.is_empty() => {
                    println!("nothing changed")
                }
                Some(serde_json::Value::Array(lines)) => {
                    for l in lines {
                        println!("{}", l.as_str().unwrap_or_default());
                    }
                }
                _ => print!("{body}"),
            }
            ExitCode::SUCCESS
        }
        Ok((status, body)) => {
            eprintln!(
                "sluice: {what} failed ({status}): {}",
                json_field(&body, "error").unwrap_or(body)
            );
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!(
                "sluice: cannot reach the admin API at {}: {e}",
                admin.listen
            );
            ExitCode::FAILURE
        }
    }
}

fn load(path: Option<&std::path::Path>) -> Result<Config, String> {
    let path = path.ok_or("sluice: --config FILE is required (see `sluice --help`)")?;
    Config::load(path).map_err(|e| format!("{}: invalid configuration: {e}", path.display()))
}

fn runtime() -> tokio::runtime::Runtime {
    runtime_with(0)
}

/// A runtime with `threads` workers (0: one per CPU). One worker is a current-thread
/// runtime: every task runs on the thread that started it, with no hand-offs between a
/// worker and the I/O driver (the monitor has a thread of its own either way).
#[allow(clippy::expect_used)] // start-up: without a runtime there is nothing to run
fn runtime_with(threads: u32) -> tokio::runtime::Runtime {
    let mut b = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        if threads > 0 {
            b.worker_threads(threads as usize);
        }
        b
    };
    b.enable_all().build().expect("tokio runtime")
}

fn init_logging(level: &str, json: bool) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    if json {
        b.json().init();
    } else {
        b.init();
    }
}

/// Raises the soft open-files limit to the hard limit; warns if that is below what the
/// configuration may need (clients, connections still logging in, backend connections).
fn raise_file_limit(cfg: &Config) {
    let clients = cfg.proxy.max_client_connections;
    let want = clients as u64
        + cfg.login.connecting_budget(clients) as u64
        + cfg
            .servers
            .iter()
            .map(|s| s.max_connections(&cfg.pool) as u64)
            .sum::<u64>()
        + cfg.admin.as_ref().map_or(0, |a| a.max_connections as u64)
        + 64;
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(got) if got < want => tracing::warn!(
            limit = got,
            needed = want,
            "open-files limit is below what max_client_connections and the pools allow; run several sluice processes with reuse_port, or raise the hard limit"
        ),
        Ok(got) => tracing::debug!(limit = got, "open-files limit"),
        Err(e) => tracing::warn!(error = %e, "cannot raise the open-files limit"),
    }
}

/// The runtime and a front end for each protocol the configuration's servers speak.
fn process_for(
    cfg: Config,
) -> Result<std::sync::Arc<sluice_runtime::Process>, sluice_runtime::StartError> {
    let protocols = cfg.protocols();
    let rt = sluice_runtime::Runtime::new(cfg)?;
    let mut frontends: Vec<std::sync::Arc<dyn sluice_runtime::Frontend>> = Vec::new();
    for p in protocols {
        match p {
            sluice_config::Protocol::Mysql => {
                frontends.push(sluice_mysql::MysqlFrontend::new(rt.clone()))
            }
            sluice_config::Protocol::Postgres => {
                frontends.push(sluice_postgres::PostgresFrontend::new(rt.clone()))
            }
        }
    }
    Ok(sluice_runtime::Process::new(rt, frontends))
}

#[allow(clippy::expect_used)] // start-up: signal handlers are installed once, before serving
async fn run(cfg: Config, path: PathBuf) -> ExitCode {
    // The runtime and a front end for each protocol the configuration has servers for.
    let process = match process_for(cfg) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("sluice: {e}");
            return ExitCode::FAILURE;
        }
    };
    let _ = process.runtime.config_path.set(path);
    // SIGHUP: re-read the configuration file.
    {
        use tokio::signal::unix::{signal, SignalKind};
        let process = process.clone();
        let mut hup = signal(SignalKind::hangup()).expect("SIGHUP handler");
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                match process.reload_from_file().await {
                    Ok(changes) => {
                        tracing::info!(changes = changes.len(), "SIGHUP: configuration reloaded")
                    }
                    Err(e) => tracing::warn!(error = %e, "SIGHUP: configuration not reloaded"),
                }
            }
        });
    }
    let running = match process.start().await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("sluice: {e}");
            return ExitCode::FAILURE;
        }
    };
    let _admin = match &process.runtime.config.admin {
        Some(a) => match sluice_admin::serve(a, process.clone(), running.shutdown_signal()).await {
            Ok(admin) => Some(admin),
            Err(e) => {
                eprintln!("sluice: cannot listen on {} (admin): {e}", a.listen);
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    wait_for_shutdown().await;
    tracing::info!("shutting down");
    running.shutdown();
    running.wait().await;
    ExitCode::SUCCESS
}

#[allow(clippy::expect_used)] // start-up: signal handlers are installed once, before serving
async fn wait_for_shutdown() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// One HTTP/1.1 request to the admin API; returns the status and body.
fn admin_request(
    addr: &str,
    token: Option<&str>,
    method: &str,
    path: &str,
) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    use std::time::Duration;
    let mut s = std::net::TcpStream::connect(addr)?;
    // A switchover waits for writes to drain and a replica to catch up.
    s.set_read_timeout(Some(Duration::from_secs(300)))?;
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(s, "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Length: 0\r\nConnection: close\r\n\r\n")?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other("malformed HTTP response"))?;
    Ok((status, body.to_string()))
}

/// Percent-encodes a query value.
fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A string field of a JSON object.
fn json_field(body: &str, field: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    v.get(field)?.as_str().map(str::to_string)
}
