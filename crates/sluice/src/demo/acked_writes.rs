//! A client inserting numbered rows through sluice, one after another, reconnecting after
//! errors, and recording which rows the server acknowledged (and when): what "no
//! acknowledged write lost" is checked against.

use mysql_async::prelude::*;
use mysql_async::{Conn, Opts};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The table written: `id`, and the `@@server_id` of the server that wrote the row.
pub const TABLE: &str = "demo_failover";
/// The writer stops on its own after this long, whatever happens.
const LIMIT: Duration = Duration::from_secs(180);
/// One statement (or connection attempt) may wait this long; the failover makes writes wait.
const STATEMENT_LIMIT: Duration = Duration::from_secs(30);

/// A running writer.
pub struct AckedWriter {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<(u32, Instant)>>>,
    failed: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

/// What the writer saw, once stopped.
pub struct Written {
    /// Rows the server acknowledged, in order, with when.
    pub acked: Vec<(u32, Instant)>,
    /// Statements (and connection attempts) that failed: their outcome is unknown to the
    /// client, so they are not counted as acknowledged.
    pub failed: u64,
}

impl Written {
    /// When row `id` was acknowledged, if it was.
    pub fn acked_at(&self, id: u32) -> Option<Instant> {
        self.acked.iter().find(|a| a.0 == id).map(|a| a.1)
    }
}

impl AckedWriter {
    /// Starts writing through `url` (the table must exist).
    pub fn start(url: String) -> AckedWriter {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(Vec::new()));
        let failed = Arc::new(AtomicU64::new(0));
        let (s, a, f) = (stop.clone(), acked.clone(), failed.clone());
        let task = tokio::spawn(async move {
            let Ok(opts) = Opts::from_url(&url) else {
                return;
            };
            let deadline = Instant::now() + LIMIT;
            let mut conn: Option<Conn> = None;
            let mut n: u32 = 1;
            while !s.load(Relaxed) && Instant::now() < deadline {
                let c = match conn.as_mut() {
                    Some(c) => c,
                    None => {
                        match tokio::time::timeout(STATEMENT_LIMIT, Conn::new(opts.clone())).await {
                            Ok(Ok(c)) => conn.insert(c),
                            _ => {
                                f.fetch_add(1, Relaxed);
                                tokio::time::sleep(Duration::from_millis(50)).await;
                                continue;
                            }
                        }
                    }
                };
                let q = format!("INSERT INTO {TABLE} VALUES ({n}, @@server_id)");
                match tokio::time::timeout(STATEMENT_LIMIT, c.query_drop(q)).await {
                    Ok(Ok(())) => a
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push((n, Instant::now())),
                    _ => {
                        f.fetch_add(1, Relaxed);
                        conn = None;
                    }
                }
                n += 1;
            }
        });
        AckedWriter {
            stop,
            acked,
            failed,
            task,
        }
    }

    /// Rows acknowledged so far.
    pub fn acked(&self) -> usize {
        self.acked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// When the first row after `t` was acknowledged.
    pub fn first_ack_after(&self, t: Instant) -> Option<Instant> {
        self.acked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|a| a.1)
            .find(|at| *at > t)
    }

    /// Rows acknowledged after `t`.
    pub fn acked_after(&self, t: Instant) -> usize {
        self.acked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|a| a.1 > t)
            .count()
    }

    /// Stops (after the statement in flight) and tells what was written.
    pub async fn finish(self) -> Written {
        self.stop.store(true, Relaxed);
        let _ = self.task.await;
        let acked = self
            .acked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        Written {
            acked,
            failed: self.failed.load(Relaxed),
        }
    }
}
