//! `sluice demo --failover`: a client keeps writing numbered rows through sluice while the
//! primary is killed with SIGKILL. The story is told from structured state — the monitor's
//! `primary()`, its counters and event list, the client's acknowledgements — and every
//! acknowledged row is then looked for on the new primary.

use super::acked_writes::{AckedWriter, TABLE};
use mysql_async::prelude::*;
use sluice_mysql::MysqlFrontend as Proxy;
use sluice_testkit::Topology;
use std::collections::BTreeSet;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// The longest the demo waits for sluice to promote a replica and writes to flow again.
const PROMOTION_LIMIT: Duration = Duration::from_secs(90);
/// Rows written before the kill, and after writes resume, to show both sides.
const ROWS_EACH_SIDE: usize = 50;

/// The configuration: servers without hostgroups (the monitor places them by role),
/// automatic failover on.
pub fn config(topo: &Topology, listen: &str) -> String {
    let mut text = format!(
        "[proxy]\nlisten = \"{listen}\"\n\n[monitor]\nuser = \"monitor\"\npassword = \"monitor\"\n\n[failover]\nenabled = true\n\n[[users]]\nname = \"app\"\npassword = \"app\"\n"
    );
    for s in &topo.servers {
        text.push_str(&format!("\n[[servers]]\naddress = \"{}\"\n", s.addr()));
    }
    text
}

/// Kills the primary under writes and tells what happened; an error if no replica took over
/// in time or an acknowledged row is missing on the new primary.
pub async fn run(proxy: &Arc<Proxy>, topo: &Topology, port: u16) -> Result<(), String> {
    let monitor = proxy.monitor.as_ref().ok_or("the monitor is disabled")?;
    let old = monitor.primary().ok_or("sluice sees no primary")?;
    let server_id = |addr: &str| {
        topo.servers
            .iter()
            .find(|s| s.addr() == addr)
            .map_or(0, |s| s.server_id)
    };
    let victim = topo
        .servers
        .iter()
        .find(|s| s.addr() == *old.address)
        .ok_or("the primary is not one of the demo's servers")?;
    let url = format!("mysql://app:app@127.0.0.1:{port}/test?prefer_socket=false");
    create_table(&url).await.map_err(|e| e.to_string())?;

    println!("\nFailover: a client inserts numbered rows through sluice, one after another, and");
    println!("records each one the server acknowledges. Replication is semi-synchronous: the");
    println!("primary acknowledges a commit only once a replica has it.");
    let writer = AckedWriter::start(url);
    if !wait_until(Duration::from_secs(60), || writer.acked() >= ROWS_EACH_SIDE).await {
        let written = writer.finish().await;
        return Err(format!(
            "the client could not write before the kill ({} statements failed)",
            written.failed
        ));
    }
    let killed_wall = SystemTime::now();
    tokio::task::block_in_place(|| victim.kill()).map_err(|e| e.to_string())?;
    // Reaped: from here on, no write can land on it.
    let killed = Instant::now();
    println!(
        "\nkilled: {} (server_id {}), the primary, with SIGKILL after {} acknowledged rows",
        old.address,
        victim.server_id,
        writer.acked()
    );

    let promoted = wait_until(PROMOTION_LIMIT, || {
        monitor.primary().is_some_and(|p| p.address != old.address)
            && writer.first_ack_after(killed).is_some()
    })
    .await;
    if !promoted {
        let written = writer.finish().await;
        print_events(proxy, killed_wall);
        return Err(format!(
            "no replica took the writes within {} s ({} rows acknowledged, {} statements failed)",
            PROMOTION_LIMIT.as_secs(),
            written.acked.len(),
            written.failed
        ));
    }
    let new = monitor.primary().ok_or("the new primary vanished")?;
    let new_id = server_id(&new.address);
    wait_until(Duration::from_secs(30), || {
        writer.acked_after(killed) >= ROWS_EACH_SIDE
    })
    .await;
    let written = writer.finish().await;
    let rows = read_rows(&new.address, new_id).await?;

    println!(
        "promoted: {} (server_id {new_id}) is the primary now",
        new.address
    );
    println!(
        "sluice declared the primary failed after [failover] detection_time = {} of failed checks,",
        proxy.rt.config.failover.detection_time
    );
    println!(
        "then took {} ms from its decision to writes rerouted (failovers so far: {})",
        monitor.stats.last_failover_ms.load(Relaxed),
        monitor.stats.failovers.load(Relaxed)
    );
    let first_on_new = rows
        .first_on_new
        .and_then(|id| written.acked_at(id))
        .ok_or(format!("no acknowledged write reached {}", new.address))?;
    println!(
        "first write acknowledged by the new primary: {} ms after the kill",
        first_on_new.saturating_duration_since(killed).as_millis()
    );
    println!(
        "statements that failed meanwhile: {} (their outcome is unknown to the client; not counted as acknowledged)",
        written.failed
    );
    print_events(proxy, killed_wall);
    let by_server: Vec<String> = rows
        .by_server
        .iter()
        .map(|(sid, n)| format!("{n} by server_id {sid}"))
        .collect();
    println!("rows on the new primary: {}", by_server.join(", "));
    let lost: Vec<u32> = written
        .acked
        .iter()
        .map(|a| a.0)
        .filter(|id| !rows.ids.contains(id))
        .collect();
    if !lost.is_empty() {
        return Err(format!(
            "{} of {} acknowledged rows are missing on the new primary: {lost:?}",
            lost.len(),
            written.acked.len()
        ));
    }
    println!(
        "no acknowledged write lost: all {} acknowledged rows are on the new primary",
        written.acked.len()
    );
    println!("\nServers now:");
    for s in proxy.topology.all().iter() {
        println!(
            "  {:<22} {:<8} {:<12} {}",
            s.name,
            s.observed().role.as_str(),
            s.hostgroup(),
            s.state_text()
        );
    }
    Ok(())
}

async fn create_table(url: &str) -> Result<(), mysql_async::Error> {
    let mut c = mysql_async::Conn::new(mysql_async::Opts::from_url(url)?).await?;
    c.query_drop(format!("DROP TABLE IF EXISTS {TABLE}"))
        .await?;
    c.query_drop(format!(
        "CREATE TABLE {TABLE} (id INT PRIMARY KEY, server_id INT NOT NULL)"
    ))
    .await?;
    c.disconnect().await
}

/// The rows as the new primary has them, read directly (not through sluice).
struct Rows {
    ids: BTreeSet<u32>,
    /// Rows per writing server, in the order they took the writes.
    by_server: Vec<(u32, u64)>,
    /// The first row the new primary wrote.
    first_on_new: Option<u32>,
}

async fn read_rows(primary: &str, primary_id: u32) -> Result<Rows, String> {
    let url = format!("mysql://app:app@{primary}/test?prefer_socket=false");
    let read = async {
        let mut c = mysql_async::Conn::new(mysql_async::Opts::from_url(&url)?).await?;
        let ids: Vec<u32> = c.query(format!("SELECT id FROM {TABLE}")).await?;
        let by_server: Vec<(u32, u64)> = c
            .query(format!(
                "SELECT server_id, COUNT(*) FROM {TABLE} GROUP BY server_id ORDER BY MIN(id)"
            ))
            .await?;
        let first_on_new: Option<Option<u32>> = c
            .exec_first(
                format!("SELECT MIN(id) FROM {TABLE} WHERE server_id = ?"),
                (primary_id,),
            )
            .await?;
        c.disconnect().await?;
        Ok::<_, mysql_async::Error>(Rows {
            ids: ids.into_iter().collect(),
            by_server,
            first_on_new: first_on_new.flatten(),
        })
    };
    tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .map_err(|_| format!("the new primary {primary} did not answer"))?
        .map_err(|e| format!("reading the new primary {primary}: {e}"))
}

/// What the monitor recorded since `since`, as it wrote it.
fn print_events(proxy: &Proxy, since: SystemTime) {
    let Some(m) = &proxy.monitor else {
        return;
    };
    println!("The monitor's events since the kill:");
    for e in m.events.all().iter().filter(|e| e.at >= since) {
        println!("    [{}] {}", e.kind, e.message);
    }
}

/// Polls `cond` until it holds (true) or `limit` passes (false).
async fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while !cond() {
        if start.elapsed() > limit {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}
