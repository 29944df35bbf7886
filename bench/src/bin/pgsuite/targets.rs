//! The targets of the main runs, what pgbench connects to: the server itself (`direct`) and
//! each selected proxy, started and checked with a login.

use super::*;

/// Something pgbench connects to.
pub(super) struct Target {
    pub(super) name: &'static str,
    pub(super) port: u16,
    /// The proxy (none for the server itself).
    pub(super) proc: Option<Proc>,
    /// Why it cannot be measured (failed to start or to log in).
    pub(super) broken: Option<String>,
}

impl Target {
    /// A started proxy listening on its port, or one that did not start: broken, and said so.
    fn started(name: &'static str, started: Result<(Proc, u16), String>) -> Target {
        let (proc, port, broken) = match started {
            Ok((p, port)) => (Some(p), port, None),
            Err(e) => {
                println!("# {name}: did not start: {e}");
                (None, 0, Some(format!("did not start: {e}")))
            }
        };
        Target {
            name,
            port,
            proc,
            broken,
        }
    }

    /// Why it cannot be measured now, if it cannot: broken, or its proxy exited.
    pub(super) fn unusable(&mut self) -> Option<String> {
        if let Some(b) = &self.broken {
            return Some(b.clone());
        }
        self.proc.as_mut().and_then(Proc::exited)
    }

    /// The proxy's CPU time (its process tree), µs.
    pub(super) fn cpu(&self) -> Option<u64> {
        self.proc.as_ref().and_then(|p| tree_cpu_micros(p.pid()))
    }

    /// The proxy's CPU time in user mode (its process tree), µs.
    pub(super) fn cpu_user(&self) -> Option<u64> {
        self.proc.as_ref().and_then(|p| tree_user_micros(p.pid()))
    }
}

/// Starts the main runs' targets: the server itself, then each selected proxy (one that does
/// not start or let the role log in stays in the list, broken); prints the proxies' settings.
pub(super) fn start_targets(
    o: &Opts,
    rt: &tokio::runtime::Runtime,
    dir: &Path,
    server: &PgServer,
    programs: &Programs,
) -> Result<Vec<Target>, String> {
    let max_clients = o
        .clients
        .iter()
        .chain(&o.connect_clients)
        .copied()
        .max()
        .unwrap_or(1);
    let mut targets = vec![Target {
        name: "direct",
        port: server.port,
        proc: None,
        broken: None,
    }];
    let mut add = |name: &'static str, started: Result<(Proc, u16), String>| {
        targets.push(Target::started(name, started));
    };
    if o.wants("sluice") {
        let port = free_port()?;
        let cfg = sluice_config(port, &server.addr(), o.sluice_threads, POOL_SIZE, POOL_SIZE);
        add(
            "sluice",
            start_sluice(dir, "main", &cfg, port).map(|p| (p, port)),
        );
    }
    if let Some(bin) = &programs.pgbouncer {
        let port = free_port()?;
        add(
            "pgbouncer",
            start_pgbouncer(bin, dir, "main", port, server.port, 20_000, POOL_SIZE)
                .map(|p| (p, port)),
        );
    }
    if let Some(bin) = &programs.haproxy {
        let port = free_port()?;
        add(
            "haproxy",
            start_haproxy(bin, dir, port, &server.addr()).map(|p| (p, port)),
        );
    }
    if let Some(bin) = &programs.floor {
        let port = free_port()?;
        add(
            "floor",
            start_floor(bin, dir, port, server.port).map(|p| (p, port)),
        );
    }
    let pgpool_children = max_clients + 4;
    if let Some(bin) = &programs.pgpool {
        let port = free_port()?;
        add(
            "pgpool",
            start_pgpool(bin, dir, port, server.port, pgpool_children).map(|p| (p, port)),
        );
        println!(
            "# pgpool settings: raw mode, one backend, num_init_children = {pgpool_children}, max_pool = 1, connection_cache = on, load_balance_mode = off, child_life_time = 0, pool_hba scram-sha-256 with pool_passwd TEXT password (Pgpool-II pools per session: a child process and its cached backend connection per client, never per transaction)"
        );
    }
    println!("# pgbouncer settings: pool_mode = transaction, auth_type = scram-sha-256 (plaintext password in auth_file), default_pool_size = max_db_connections = {POOL_SIZE}, max_client_conn = 20000; haproxy: mode tcp, maxconn 9000");
    check_logins(rt, &mut targets);
    Ok(targets)
}

/// Logs in through every target that started and runs `SELECT 1`; one that fails is broken.
fn check_logins(rt: &tokio::runtime::Runtime, targets: &mut [Target]) {
    for t in targets.iter_mut().filter(|t| t.broken.is_none()) {
        if let Err(e) = check_login(rt, t.port) {
            println!("# {}: cannot log in and run SELECT 1: {e}", t.name);
            t.broken = Some(format!("login failed: {e}"));
        }
    }
}
