//! `sluice demo`: a primary and two replicas from the local MariaDB binaries, sluice in front
//! with its admin API and dashboard, a short mixed workload, and where it went; with
//! `--failover`, the primary is then killed under writes and the demo tells what happened;
//! with `--postgres`, the same with PostgreSQL streaming replicas (demo/postgres.rs).

mod acked_writes;
mod failover;
mod postgres;

use mysql_async::prelude::*;
use sluice_config::{AdminConfig, Config};
use sluice_testkit::{Topology, TopologyOptions};
use std::process::ExitCode;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What `sluice demo` was asked for.
pub struct Options {
    /// Port of the proxy's listener (another is picked if it is taken).
    pub port: u16,
    /// Port of the admin API and dashboard (another is picked if it is taken).
    pub admin_port: u16,
    /// Exit after the demo instead of waiting for Ctrl-C.
    pub no_wait: bool,
    /// Kill the primary after the workload and tell what sluice did (MySQL only).
    pub failover: bool,
    /// PostgreSQL servers and a PostgreSQL listener instead of MariaDB.
    pub postgres: bool,
}

pub async fn run(o: Options) -> ExitCode {
    if o.postgres {
        return postgres::run(o).await;
    }
    println!(
        "sluice demo: starting a MariaDB primary and two GTID replicas{} in a temporary directory...",
        if o.failover {
            " (semi-synchronous replication)"
        } else {
            ""
        }
    );
    let semi_sync = o.failover;
    let topo = match tokio::task::spawn_blocking(move || {
        Topology::start(TopologyOptions {
            replicas: 2,
            semi_sync,
            ..Default::default()
        })
    })
    .await
    {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => return fail(e),
        Err(e) => return fail(e),
    };
    for s in &topo.servers {
        let role = if s.server_id == 1 {
            "primary"
        } else {
            "replica"
        };
        println!("  {role:<8} {}  (server_id {})", s.addr(), s.server_id);
    }
    let listen = format!("127.0.0.1:{}", free_or_any(o.port));
    let text = if o.failover {
        failover::config(&topo, &listen)
    } else {
        split_config(&topo, &listen)
    };
    let cfg = match Config::from_toml(&text) {
        Ok(c) => c,
        Err(e) => return fail(format!("the demo's configuration is invalid: {e}")),
    };
    let (process, proxy) = match sluice_mysql::MysqlFrontend::process(cfg) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    let running = match process.start().await {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    let admin = AdminConfig::new(format!("127.0.0.1:{}", free_or_any(o.admin_port)));
    let admin = match sluice_admin::serve(&admin, process.clone(), running.shutdown_signal()).await
    {
        Ok(a) => a,
        Err(e) => return fail(format!("admin API: {e}")),
    };
    let addr = running.addrs[0];
    println!("\nsluice is listening on {addr}. Connect with:\n\n    mariadb -h127.0.0.1 -P{} -uapp -papp test\n", addr.port());
    println!(
        "Dashboard: http://{}/  (admin API: http://{}/api/servers)\n",
        admin.addr, admin.addr
    );
    println!("Running a short mixed workload (8 clients: transactions, writes, reads)...");
    let started = Instant::now();
    if let Err(e) = workload(addr.port(), &topo).await {
        return fail(format!("workload failed: {e}"));
    }
    println!("done in {:.1} s.\n", started.elapsed().as_secs_f64());
    print_servers(&proxy);
    if o.failover {
        if let Err(e) = failover::run(&proxy, &topo, addr.port()).await {
            running.shutdown();
            tokio::task::block_in_place(move || drop(topo));
            return fail(e);
        }
    }
    if o.no_wait {
        running.shutdown();
        tokio::task::block_in_place(move || drop(topo));
        return ExitCode::SUCCESS;
    }
    println!("\nPress Ctrl-C to stop sluice and the servers and remove their data.");
    let _ = tokio::signal::ctrl_c().await;
    println!("\nstopping...");
    running.shutdown();
    tokio::task::spawn_blocking(move || drop(topo)).await.ok();
    println!("stopped; temporary data removed.");
    ExitCode::SUCCESS
}

fn fail(e: impl std::fmt::Display) -> ExitCode {
    eprintln!("sluice demo: {e}");
    ExitCode::FAILURE
}

/// `port` if it is free on loopback, otherwise 0 (any).
fn free_or_any(port: u16) -> u16 {
    if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
        port
    } else {
        0
    }
}

/// The plain demo: fixed writer and reader hostgroups.
fn split_config(topo: &Topology, listen: &str) -> String {
    let mut text = format!(
        "[proxy]\nlisten = \"{listen}\"\n\n[[users]]\nname = \"app\"\npassword = \"app\"\n\n[[servers]]\naddress = \"{}\"\nhostgroup = \"writer\"\n",
        topo.primary().addr()
    );
    for r in topo.replicas() {
        text.push_str(&format!(
            "\n[[servers]]\naddress = \"{}\"\nhostgroup = \"reader\"\n",
            r.addr()
        ));
    }
    text
}

/// Reads and writes per server.
fn print_servers(proxy: &Arc<sluice_mysql::MysqlFrontend>) {
    println!(
        "{:<22} {:<9} {:>8} {:>8}",
        "server", "hostgroup", "reads", "writes"
    );
    for s in proxy.topology.servers() {
        println!(
            "{:<22} {:<9} {:>8} {:>8}",
            s.name,
            s.hostgroup(),
            s.stats.reads.load(Relaxed),
            s.stats.writes.load(Relaxed)
        );
    }
}

async fn workload(port: u16, topo: &Topology) -> Result<(), mysql_async::Error> {
    let url = format!("mysql://app:app@127.0.0.1:{port}/test?prefer_socket=false");
    let pool = mysql_async::Pool::new(url.as_str());
    let mut c = pool.get_conn().await?;
    c.query_drop("CREATE TABLE IF NOT EXISTS demo_accounts (id INT PRIMARY KEY, balance INT NOT NULL, updated TIMESTAMP DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP)").await?;
    c.query_drop(
        "INSERT IGNORE INTO demo_accounts (id, balance) SELECT seq, 1000 FROM seq_1_to_100",
    )
    .await?;
    drop(c);
    // The replicas apply the table and its rows before reads go to them.
    tokio::task::block_in_place(|| topo.sync_replicas(Duration::from_secs(30)))
        .map_err(|e| mysql_async::Error::Other(Box::new(e)))?;
    let mut tasks = Vec::new();
    for w in 0..8u32 {
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            let mut c = pool.get_conn().await?;
            for i in 0..60u32 {
                let x = (w * 31 + i * 7) % 100 + 1;
                let y = (w * 17 + i * 13) % 100 + 1;
                // Lock rows in id order so concurrent transfers cannot deadlock.
                let (a, b) = (x.min(y), x.max(y));
                if i % 3 == 0 {
                    let mut tx = c.start_transaction(mysql_async::TxOpts::default()).await?;
                    tx.exec_drop(
                        "UPDATE demo_accounts SET balance = balance - 1 WHERE id = ?",
                        (a,),
                    )
                    .await?;
                    tx.exec_drop(
                        "UPDATE demo_accounts SET balance = balance + 1 WHERE id = ?",
                        (b,),
                    )
                    .await?;
                    let _: Option<i64> = tx
                        .exec_first("SELECT SUM(balance) FROM demo_accounts", ())
                        .await?;
                    tx.commit().await?;
                } else {
                    let _: Option<(i64, i64)> = c
                        .exec_first("SELECT id, balance FROM demo_accounts WHERE id = ?", (a,))
                        .await?;
                    let _: Vec<u32> = c.query("SELECT @@server_id").await?;
                }
            }
            Ok::<_, mysql_async::Error>(())
        }));
    }
    for t in tasks {
        t.await
            .map_err(|e| mysql_async::Error::Other(Box::new(e)))??;
    }
    pool.disconnect().await?;
    Ok(())
}
