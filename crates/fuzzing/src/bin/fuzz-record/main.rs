//! Records real client/server traffic and turns it into seed inputs for the fuzz targets.
//!
//! Starts a MariaDB server (through `sluice-testkit`), a recording relay in front of it, and
//! real clients through the relay: the `mariadb` and `mariadb-admin` command-line clients,
//! sysbench (prepared statements), PyMySQL, mysql-connector-python (prepared statements and
//! long data) and mysql_async. Then it writes the seeds, at most a few per shape, into
//! `<out>/<target>/`. `bench/fuzz.sh record` runs it and minimises the result into
//! `fuzz/corpus/`.
//!
//! Usage: `fuzz-record <out-dir>`.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod clients;
mod relay;
mod seeds;

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = PathBuf::from(
        std::env::args()
            .nth(1)
            .ok_or("usage: fuzz-record <out-dir>")?,
    );
    let db = sluice_testkit::MariaDb::start(sluice_testkit::ServerOptions::default())?;
    db.sql(
        "CREATE USER 'app'@'%' IDENTIFIED BY 'app'; \
         GRANT ALL PRIVILEGES ON *.* TO 'app'@'%'; \
         CREATE DATABASE IF NOT EXISTS test; \
         SET GLOBAL local_infile = ON; \
         SET GLOBAL session_track_state_change = ON; \
         SET GLOBAL session_track_transaction_info = 'CHARACTERISTICS';",
    )?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let recordings = rt.block_on(async {
        let (port, recordings) = relay::start(db.addr()).await?;
        clients::run_all(port).await;
        Ok::<_, std::io::Error>(recordings)
    })?;
    // Let the relay tasks see the last closes.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut seeds = seeds::Seeds::default();
    let conns = recordings.lock().map_err(|_| "recordings poisoned")?;
    for rec in conns.iter() {
        let rec = rec.lock().map_err(|_| "recording poisoned")?;
        seeds.connection(&rec);
    }
    let mut counts = std::collections::BTreeMap::new();
    for (target, data) in seeds.files() {
        let dir = out.join(target);
        std::fs::create_dir_all(&dir)?;
        let name = format!("rec-{:016x}", fnv(&data));
        std::fs::write(dir.join(name), &data)?;
        *counts.entry(target).or_insert(0) += 1;
    }
    println!("recorded {} connections; seeds: {counts:?}", conns.len());
    drop(rt);
    Ok(())
}

/// FNV-1a: a stable file name for a seed.
fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
