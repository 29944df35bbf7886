//! A primary with GTID replicas.

use crate::server::{MariaDb, ServerOptions};
use crate::{Error, Result};
use std::time::{Duration, Instant};

/// Options for a topology.
#[derive(Clone, Debug, Default)]
pub struct TopologyOptions {
    /// Number of replicas.
    pub replicas: usize,
    /// Extra server options for every server.
    pub extra: Vec<String>,
    /// Buffer pool per server (default 64M).
    pub buffer_pool: Option<&'static str>,
    /// Semi-synchronous replication: every server acknowledges as a replica, the primary
    /// waits for an acknowledgement after the binlog sync (`AFTER_SYNC`) with no timeout in
    /// practice, even with no replica connected: the lossless configuration. Only the primary
    /// has `rpl_semi_sync_master_enabled` (a replica with it would wait for acknowledgements
    /// of what it applies); sluice moves it with the primary role.
    pub semi_sync: bool,
}

/// Server arguments for lossless semi-synchronous replication.
pub const SEMI_SYNC_ARGS: &[&str] = &[
    "--rpl-semi-sync-master-enabled=0",
    "--rpl-semi-sync-master-wait-no-slave=1",
    "--rpl-semi-sync-slave-enabled=1",
    "--rpl-semi-sync-master-wait-point=AFTER_SYNC",
    "--rpl-semi-sync-master-timeout=3600000",
];

/// A primary and its replicas, replicating with GTIDs. Users: `app`/`app` (all privileges),
/// `repl`/`repl` (replication), `monitor`/`monitor`. Database `test` exists.
pub struct Topology {
    /// servers[0] is the primary.
    pub servers: Vec<MariaDb>,
}

/// SQL run on the primary before replicas attach (so they replicate it).
const BOOTSTRAP: &str = "\
CREATE USER 'app'@'%' IDENTIFIED BY 'app';\
GRANT ALL PRIVILEGES ON *.* TO 'app'@'%' WITH GRANT OPTION;\
CREATE USER 'repl'@'%' IDENTIFIED BY 'repl';\
GRANT REPLICATION SLAVE, REPLICATION SLAVE ADMIN, BINLOG MONITOR ON *.* TO 'repl'@'%';\
CREATE USER 'monitor'@'%' IDENTIFIED BY 'monitor';\
GRANT REPLICA MONITOR, REPLICATION SLAVE ADMIN, REPLICATION MASTER ADMIN, REPLICATION SLAVE, RELOAD, READ_ONLY ADMIN, PROCESS, CONNECTION ADMIN ON *.* TO 'monitor'@'%';\
CREATE DATABASE IF NOT EXISTS test;";

impl Topology {
    /// Starts a primary and `replicas` replicas.
    pub fn start(opts: TopologyOptions) -> Result<Topology> {
        let mut extra = opts.extra.clone();
        if opts.semi_sync {
            extra.extend(SEMI_SYNC_ARGS.iter().map(|s| s.to_string()));
        }
        let server_opts = |id: u32| ServerOptions {
            server_id: id,
            extra: extra.clone(),
            buffer_pool: opts.buffer_pool.unwrap_or("64M"),
        };
        // Start them all first (in parallel), then wire replication.
        let handles: Vec<_> = (0..=opts.replicas)
            .map(|i| {
                let o = server_opts(i as u32 + 1);
                std::thread::spawn(move || MariaDb::start(o))
            })
            .collect();
        let mut servers = Vec::new();
        let mut first_err = None;
        for h in handles {
            match h
                .join()
                .map_err(|_| Error::Other("server start thread panicked".into()))?
            {
                Ok(s) => servers.push(s),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        servers.sort_by_key(|s| s.server_id);
        let topo = Topology { servers };
        topo.primary().sql(BOOTSTRAP)?;
        for r in &topo.servers[1..] {
            topo.attach_replica(r)?;
        }
        topo.sync_replicas(Duration::from_secs(30))?;
        if opts.semi_sync {
            topo.primary()
                .sql("SET GLOBAL rpl_semi_sync_master_enabled=1")?;
            // Wait until a replica's semi-synchronous connection is up.
            let start = Instant::now();
            while topo.primary().sql("SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME='RPL_SEMI_SYNC_MASTER_CLIENTS'")?.trim() == "0" {
                if start.elapsed() > Duration::from_secs(30) {
                    return Err(Error::Other("no semi-synchronous replica connected within 30 s".into()));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(topo)
    }

    /// The primary.
    pub fn primary(&self) -> &MariaDb {
        &self.servers[0]
    }

    /// The replicas.
    pub fn replicas(&self) -> &[MariaDb] {
        &self.servers[1..]
    }

    /// Points `replica` at the primary with GTID and starts replicating; sets it read-only.
    pub fn attach_replica(&self, replica: &MariaDb) -> Result<()> {
        replica.sql(&format!(
            "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={}, MASTER_USER='repl', \
             MASTER_PASSWORD='repl', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1; \
             START SLAVE; SET GLOBAL read_only=1;",
            self.primary().port
        ))?;
        Ok(())
    }

    /// Waits until every running replica has applied everything the primary has written.
    pub fn sync_replicas(&self, timeout: Duration) -> Result<()> {
        self.sync_replicas_of(0, timeout)
    }

    /// Like [`Topology::sync_replicas`], with `servers[primary]` as the primary (after a
    /// failover).
    pub fn sync_replicas_of(&self, primary: usize, timeout: Duration) -> Result<()> {
        let pos = self.servers[primary].sql("SELECT @@gtid_binlog_pos")?;
        let start = Instant::now();
        for (_, r) in self
            .servers
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != primary)
        {
            if !r.is_running() {
                continue;
            }
            let left = timeout.saturating_sub(start.elapsed()).as_secs().max(1);
            let got = r.sql(&format!("SELECT MASTER_GTID_WAIT('{pos}', {left})"))?;
            if got.trim() != "0" {
                let status = r.sql("SHOW SLAVE STATUS\\G").unwrap_or_default();
                return Err(Error::Other(format!(
                    "replica {} did not reach {pos} within {left} s:\n{status}",
                    r.addr()
                )));
            }
        }
        Ok(())
    }
}
