//! `sluice demo`: a primary and two replicas from the local MariaDB binaries, sluice in front,
//! a short mixed workload, and where it went.

use mysql_async::prelude::*;
use sluice_config::Config;
use sluice_testkit::{Topology, TopologyOptions};
use std::process::ExitCode;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

pub async fn run(port: u16, no_wait: bool) -> ExitCode {
    println!(
        "sluice demo: starting a MariaDB primary and two GTID replicas in a temporary directory..."
    );
    let topo = match tokio::task::spawn_blocking(|| {
        Topology::start(TopologyOptions {
            replicas: 2,
            ..Default::default()
        })
    })
    .await
    {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => {
            eprintln!("sluice demo: {e}");
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("sluice demo: {e}");
            return ExitCode::FAILURE;
        }
    };
    for s in &topo.servers {
        let role = if s.server_id == 1 {
            "primary"
        } else {
            "replica"
        };
        println!("  {role:<8} {}  (server_id {})", s.addr(), s.server_id);
    }
    let listen_port = if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
        port
    } else {
        0
    };
    let mut text = format!(
        "[proxy]\nlisten = \"127.0.0.1:{listen_port}\"\n\n[[users]]\nname = \"app\"\npassword = \"app\"\n\n[[servers]]\naddress = \"{}\"\nhostgroup = \"writer\"\n",
        topo.primary().addr()
    );
    for r in topo.replicas() {
        text.push_str(&format!(
            "\n[[servers]]\naddress = \"{}\"\nhostgroup = \"reader\"\n",
            r.addr()
        ));
    }
    let cfg = Config::from_toml(&text).expect("demo config is valid");
    let proxy = match sluice_mysql::Proxy::new(cfg) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("sluice demo: {e}");
            return ExitCode::FAILURE;
        }
    };
    let running = match proxy.start().await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("sluice demo: {e}");
            return ExitCode::FAILURE;
        }
    };
    let addr = running.addrs[0];
    println!("\nsluice is listening on {addr}. Connect with:\n\n    mariadb -h127.0.0.1 -P{} -uapp -papp test\n", addr.port());
    println!("Running a short mixed workload (8 clients: transactions, writes, reads)...");
    let started = Instant::now();
    if let Err(e) = workload(addr.port()).await {
        eprintln!("sluice demo: workload failed: {e}");
        return ExitCode::FAILURE;
    }
    println!("done in {:.1} s.\n", started.elapsed().as_secs_f64());
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
    if no_wait {
        running.shutdown();
        drop(topo);
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

async fn workload(port: u16) -> Result<(), mysql_async::Error> {
    let url = format!("mysql://app:app@127.0.0.1:{port}/test?prefer_socket=false");
    let pool = mysql_async::Pool::new(url.as_str());
    let mut c = pool.get_conn().await?;
    c.query_drop("CREATE TABLE IF NOT EXISTS demo_accounts (id INT PRIMARY KEY, balance INT NOT NULL, updated TIMESTAMP DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP)").await?;
    c.query_drop(
        "INSERT IGNORE INTO demo_accounts (id, balance) SELECT seq, 1000 FROM seq_1_to_100",
    )
    .await?;
    drop(c);
    // Let the replicas catch up with the table before reading from them.
    tokio::time::sleep(Duration::from_millis(300)).await;
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
