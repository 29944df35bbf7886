//! Starting the targets pgsuite compares (sluice, PgBouncer, HAProxy, Pgpool-II, the floor),
//! each configured for the comparison, and checking that a login through them works.
//! Their ports and the log files of their output are here too.

use super::*;

/// sluice's configuration: one PostgreSQL listener that splits reads from writes (pooling by
/// transaction), the server in the writer and in the reader hostgroup (one pool each, at
/// most `writer_max` and `reader_max` connections).
pub(super) fn sluice_config(
    port: u16,
    server: &str,
    threads: u32,
    writer_max: u32,
    reader_max: u32,
) -> String {
    format!(
        "[proxy]\nworker_threads = {threads}\n\n[[listeners]]\nlisten = \"127.0.0.1:{port}\"\nprotocol = \"postgres\"\n\n[[users]]\nname = \"{ROLE}\"\npassword = \"{}\"\n\n[[servers]]\naddress = \"{server}\"\nprotocol = \"postgres\"\nhostgroup = \"writer\"\nmax_connections = {writer_max}\n\n[[servers]]\naddress = \"{server}\"\nprotocol = \"postgres\"\nhostgroup = \"reader\"\nmax_connections = {reader_max}\n\n[monitor]\nenabled = false\n\n[log]\nlevel = \"warn\"\n",
        stored_password()
    )
}

pub(super) fn start_sluice(dir: &Path, tag: &str, config: &str, port: u16) -> Result<Proc, String> {
    let path = dir.join(format!("sluice-{tag}.toml"));
    std::fs::write(&path, config).map_err(|e| e.to_string())?;
    let mut cmd = Command::new(sluice_bin());
    cmd.arg("--config").arg(&path);
    let log = format!("sluice-{tag}.log");
    with_log(&mut cmd, dir, &log)?;
    let what = format!("sluice {}", sluice_bin().display());
    spawn_listening("sluice", &what, cmd, libc::SIGTERM, port, dir, &[&log])
}

/// Spawns `cmd` (a [`Proc`] named `name`, stopped with `signal`) and waits until it listens
/// on `port`; if it does not, why, with how it exited and the tails of its `logs` in `dir`.
fn spawn_listening(
    name: &str,
    what: &str,
    cmd: Command,
    signal: i32,
    port: u16,
    dir: &Path,
    logs: &[&str],
) -> Result<Proc, String> {
    let mut p = Proc::spawn(name, cmd, signal)?;
    if let Err(e) = wait_port(port) {
        let tails: Vec<String> = logs.iter().map(|l| log_tail(dir, l)).collect();
        return Err(format!(
            "{e}: {what} ({:?})\n    {}",
            p.exited(),
            tails.join("\n    ")
        ));
    }
    Ok(p)
}

/// PgBouncer: transaction pooling, SCRAM-SHA-256 with the plaintext password in its auth file
/// (as sluice has it), a pool of at most `pool` server connections.
pub(super) fn start_pgbouncer(
    bin: &Path,
    dir: &Path,
    tag: &str,
    port: u16,
    server_port: u16,
    max_clients: u32,
    pool: u32,
) -> Result<Proc, String> {
    let d = dir.join(format!("pgbouncer-{tag}"));
    owned_dir(&d)?;
    write_owned(
        &d.join("userlist.txt"),
        &format!("\"{ROLE}\" \"{}\"\n", stored_password()),
    )?;
    let ini = format!(
        "[databases]\n{DATABASE} = host=127.0.0.1 port={server_port} dbname={DATABASE}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\nauth_type = scram-sha-256\nauth_file = {}\npool_mode = transaction\nmax_client_conn = {max_clients}\ndefault_pool_size = {pool}\nmax_db_connections = {pool}\nlog_connections = 0\nlog_disconnections = 0\nlogfile = {}\n",
        d.join("userlist.txt").display(),
        d.join("pgbouncer.log").display()
    );
    let ini_path = d.join("pgbouncer.ini");
    write_owned(&ini_path, &ini)?;
    let mut cmd = Command::new(bin);
    cmd.arg(&ini_path);
    with_log(&mut cmd, &d, "stderr.log")?;
    // PgBouncer refuses to run as root.
    as_server_user(&mut cmd)?;
    let logs = ["stderr.log", "pgbouncer.log"];
    spawn_listening(
        "pgbouncer",
        "pgbouncer",
        cmd,
        libc::SIGTERM,
        port,
        &d,
        &logs,
    )
}

/// HAProxy in TCP mode in front of the server.
pub(super) fn start_haproxy(
    bin: &Path,
    dir: &Path,
    port: u16,
    server: &str,
) -> Result<Proc, String> {
    let path = dir.join("haproxy.cfg");
    std::fs::write(
        &path,
        format!(
            "global\n  maxconn 9000\n\ndefaults\n  mode tcp\n  maxconn 9000\n  timeout connect 5s\n  timeout client 1h\n  timeout server 1h\n\nlisten postgres\n  bind 127.0.0.1:{port}\n  server db1 {server}\n"
        ),
    )
    .map_err(|e| e.to_string())?;
    let mut cmd = Command::new(bin);
    cmd.arg("-db").arg("-f").arg(&path);
    with_log(&mut cmd, dir, "haproxy.log")?;
    spawn_listening(
        "haproxy",
        "haproxy",
        cmd,
        libc::SIGTERM,
        port,
        dir,
        &["haproxy.log"],
    )
}

/// The floor (bench/src/bin/pgfloor.rs): its server connections from [`super::FLOOR_SOURCE`].
pub(super) fn start_floor(
    bin: &Path,
    dir: &Path,
    port: u16,
    server_port: u16,
) -> Result<Proc, String> {
    let mut cmd = Command::new(bin);
    cmd.arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--server")
        .arg(format!("127.0.0.1:{server_port}"))
        .arg("--source")
        .arg(super::FLOOR_SOURCE)
        .arg("--user")
        .arg(super::ROLE)
        .arg("--database")
        .arg(super::DATABASE);
    with_log(&mut cmd, dir, "floor.log")?;
    spawn_listening(
        "pgfloor",
        "pgfloor",
        cmd,
        libc::SIGTERM,
        port,
        dir,
        &["floor.log"],
    )
}

/// The Pgpool-II settings of the run (raw mode, one backend: no load balancing, no
/// replication checks; a child process per client, each keeping its backend connection).
pub(super) fn pgpool_conf(
    d: &Path,
    port: u16,
    pcp_port: u16,
    server_port: u16,
    children: u32,
) -> String {
    format!(
        "backend_clustering_mode = 'raw'\n\
         listen_addresses = '127.0.0.1'\n\
         port = {port}\n\
         socket_dir = '{dir}'\n\
         pcp_listen_addresses = ''\n\
         pcp_port = {pcp_port}\n\
         pcp_socket_dir = '{dir}'\n\
         wd_ipc_socket_dir = '{dir}'\n\
         pid_file_name = '{dir}/pgpool.pid'\n\
         logdir = '{dir}'\n\
         log_destination = 'stderr'\n\
         log_min_messages = warning\n\
         backend_hostname0 = '127.0.0.1'\n\
         backend_port0 = {server_port}\n\
         backend_weight0 = 1\n\
         backend_flag0 = 'DISALLOW_TO_FAILOVER'\n\
         num_init_children = {children}\n\
         max_pool = 1\n\
         reserved_connections = 0\n\
         child_life_time = 0\n\
         child_max_connections = 0\n\
         connection_life_time = 0\n\
         client_idle_limit = 0\n\
         connection_cache = on\n\
         load_balance_mode = off\n\
         memory_cache_enabled = off\n\
         enable_pool_hba = on\n\
         pool_passwd = '{dir}/pool_passwd'\n\
         health_check_period = 0\n\
         sr_check_period = 0\n\
         failover_on_backend_error = off\n\
         use_watchdog = off\n\
         ssl = off\n",
        dir = d.display()
    )
}

pub(super) fn start_pgpool(
    bin: &Path,
    dir: &Path,
    port: u16,
    server_port: u16,
    children: u32,
) -> Result<Proc, String> {
    let d = dir.join("pgpool");
    owned_dir(&d)?;
    let pcp_port = free_port()?;
    write_owned(
        &d.join("pgpool.conf"),
        &pgpool_conf(&d, port, pcp_port, server_port, children),
    )?;
    write_owned(
        &d.join("pool_hba.conf"),
        "local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n",
    )?;
    write_owned(&d.join("pool_passwd"), &format!("{ROLE}:TEXT{PASSWORD}\n"))?;
    write_owned(&d.join("pcp.conf"), "")?;
    let mut cmd = Command::new(bin);
    cmd.arg("-n")
        .arg("-f")
        .arg(d.join("pgpool.conf"))
        .arg("-a")
        .arg(d.join("pool_hba.conf"))
        .arg("-F")
        .arg(d.join("pcp.conf"))
        .env("HOME", &d);
    with_log(&mut cmd, &d, "pgpool.log")?;
    as_server_user(&mut cmd)?;
    // SIGINT: fast shutdown (its children too).
    spawn_listening(
        "pgpool",
        "pgpool",
        cmd,
        libc::SIGINT,
        port,
        &d,
        &["pgpool.log"],
    )
}

/// Logs in through `port` and runs `SELECT 1`: the target works.
pub(super) fn check_login(rt: &tokio::runtime::Runtime, port: u16) -> Result<(), String> {
    rt.block_on(async {
        let mut c =
            PgClient::connect_within(Duration::from_secs(20), port, ROLE, PASSWORD, DATABASE)
                .await?;
        let v = c.query_one("SELECT 1").await?;
        c.close().await;
        if v == "1" {
            Ok(())
        } else {
            Err(format!("SELECT 1 returned {v:?}"))
        }
    })
}

/// A free TCP port for a proxy to listen on.
pub(super) fn free_port() -> Result<u16, String> {
    sluice_testkit::free_port().map_err(|e| e.to_string())
}

/// A log file in the run's directory for a child's output.
fn log_file(dir: &Path, name: &str) -> Result<std::fs::File, String> {
    let path = dir.join(name);
    let f = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    sluice_bench::pg::chown_to_server_user(&path)?;
    Ok(f)
}

/// Sends `cmd`'s stdout and stderr to the log `name` in the run's directory.
fn with_log(cmd: &mut Command, dir: &Path, name: &str) -> Result<(), String> {
    let f = log_file(dir, name)?;
    cmd.stdout(f.try_clone().map_err(|e| e.to_string())?)
        .stderr(f);
    Ok(())
}

/// The last lines of a log in the run's directory.
fn log_tail(dir: &Path, name: &str) -> String {
    let text = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(8)..].join("\n    ")
}
