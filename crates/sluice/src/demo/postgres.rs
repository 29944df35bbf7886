//! `sluice demo --postgres`: a PostgreSQL primary and two streaming replicas from the local
//! postgresql-15 binaries, the role `app` (SCRAM), sluice in front with a PostgreSQL listener
//! that splits reads from writes and its admin API, a short mixed workload, and which server
//! answered what.

mod workload;

use super::{fail, free_or_any, Options};
use sluice_config::{AdminConfig, Config};
use sluice_postgres::PostgresFrontend;
use sluice_runtime::{Process, Runtime};
use sluice_testkit::{find_program, PgTopology};
use std::process::ExitCode;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

pub async fn run(o: Options) -> ExitCode {
    if let Err(e) = installed() {
        return fail(e);
    }
    println!("sluice demo: starting a PostgreSQL primary and two streaming replicas in a temporary directory...");
    let topo = match tokio::task::spawn_blocking(start_servers).await {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => return fail(e),
        Err(e) => return fail(e),
    };
    let outcome = serve(&o, &topo).await;
    if outcome.is_ok() && !o.no_wait {
        println!("\nstopping...");
    }
    tokio::task::spawn_blocking(move || drop(topo)).await.ok();
    match outcome {
        Ok(()) if o.no_wait => ExitCode::SUCCESS,
        Ok(()) => {
            println!("stopped; temporary data removed.");
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

/// The server binaries PgTopology runs and psql: checked first, so that a machine without
/// PostgreSQL is told what to install.
fn installed() -> Result<(), String> {
    sluice_testkit::pg_bin_dir().map_err(|e| e.to_string())?;
    find_program("psql", "postgresql-client-15").map_err(|e| e.to_string())?;
    Ok(())
}

/// Starts the servers, creates the role `app` (password `app`, SCRAM on the servers) and
/// waits until the replicas have it.
fn start_servers() -> Result<PgTopology, String> {
    let topo = PgTopology::start(2).map_err(|e| e.to_string())?;
    let primary = topo.primary();
    primary
        .sql("SET password_encryption = 'scram-sha-256'; CREATE ROLE app LOGIN PASSWORD 'app'")
        .map_err(|e| e.to_string())?;
    primary
        .sql("GRANT CREATE ON SCHEMA public TO app")
        .map_err(|e| e.to_string())?;
    for s in &topo.servers {
        s.require_passwords(&[]).map_err(|e| e.to_string())?;
    }
    wait_replayed(&topo)?;
    Ok(topo)
}

/// Waits until every replica has replayed the primary's WAL as of now.
fn wait_replayed(topo: &PgTopology) -> Result<(), String> {
    let lsn = topo
        .primary()
        .sql("SELECT pg_current_wal_insert_lsn()")
        .map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(30);
    for r in topo.replicas() {
        let q = format!(
            "SELECT pg_last_wal_replay_lsn() >= '{}'::pg_lsn",
            lsn.trim()
        );
        while r.sql(&q).map_err(|e| e.to_string())?.trim() != "t" {
            if Instant::now() > deadline {
                return Err(format!("replica {} did not replay {lsn} in 30 s", r.addr()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    Ok(())
}

/// Sluice in front of the servers; the workload; then, unless `--no-wait`, until Ctrl-C.
async fn serve(o: &Options, topo: &PgTopology) -> Result<(), String> {
    for (i, s) in topo.servers.iter().enumerate() {
        let role = if i == 0 { "primary" } else { "replica" };
        println!("  {role:<8} {}", s.addr());
    }
    let listen = format!("127.0.0.1:{}", free_or_any(o.port));
    let text = config(topo, &listen);
    let cfg = Config::from_toml(&text)
        .map_err(|e| format!("the demo's configuration is invalid: {e}"))?;
    let rt = Runtime::new(cfg).map_err(|e| e.to_string())?;
    let pg = PostgresFrontend::new(rt.clone());
    let process = Process::new(rt, vec![pg.clone()]);
    let running = process.start().await.map_err(|e| e.to_string())?;
    let admin = AdminConfig::new(format!("127.0.0.1:{}", free_or_any(o.admin_port)));
    let admin = sluice_admin::serve(&admin, process.clone(), running.shutdown_signal())
        .await
        .map_err(|e| format!("admin API: {e}"))?;
    let addr = running.addrs[0];
    println!(
        "\nsluice is listening on {addr} (PostgreSQL). Connect with:\n\n    PGPASSWORD=app psql -h 127.0.0.1 -p {} -U app postgres\n",
        addr.port()
    );
    println!("Reads go to the replicas, writes and transactions to the primary: try\n    SELECT inet_server_port(), pg_is_in_recovery();\n");
    println!(
        "Dashboard: http://{}/  (admin API: http://{}/api/servers)\n",
        admin.addr, admin.addr
    );
    println!("Running a short mixed workload (8 clients: transactions, writes, reads)...");
    let started = Instant::now();
    workload::run(addr.port(), topo)
        .await
        .map_err(|e| format!("workload failed: {e}"))?;
    println!("done in {:.1} s.\n", started.elapsed().as_secs_f64());
    print_servers(&pg);
    if !o.no_wait {
        println!("\nPress Ctrl-C to stop sluice and the servers and remove their data.");
        let _ = tokio::signal::ctrl_c().await;
    }
    running.shutdown();
    Ok(())
}

/// A PostgreSQL listener that splits, user `app`, the primary in `writer`, the replicas in
/// `reader` (no monitor: sluice has none for PostgreSQL yet).
fn config(topo: &PgTopology, listen: &str) -> String {
    let mut text = format!(
        "[[listeners]]\nlisten = \"{listen}\"\nprotocol = \"postgres\"\n\n[[users]]\nname = \"app\"\npassword = \"app\"\n\n[monitor]\nenabled = false\n"
    );
    for (i, s) in topo.servers.iter().enumerate() {
        let hostgroup = if i == 0 { "writer" } else { "reader" };
        text.push_str(&format!(
            "\n[[servers]]\naddress = \"{}\"\nprotocol = \"postgres\"\nhostgroup = \"{hostgroup}\"\n",
            s.addr()
        ));
    }
    text
}

/// Per server, as sluice counted them: reads and writes (by what each statement is), and
/// the server connections sluice opened.
fn print_servers(pg: &PostgresFrontend) {
    println!(
        "{:<22} {:<9} {:>8} {:>8} {:>12}",
        "server", "hostgroup", "reads", "writes", "connections"
    );
    for s in pg.topology.servers().iter() {
        println!(
            "{:<22} {:<9} {:>8} {:>8} {:>12}",
            s.name,
            s.hostgroup(),
            s.stats.reads.load(Relaxed),
            s.stats.writes.load(Relaxed),
            s.stats.connects.load(Relaxed)
        );
    }
    println!("(reads inside transactions run on the primary with the transaction's writes)");
}
