//! Load for failover tests: a client writing numbered rows and recording what was
//! acknowledged.

use super::Env;
use mysql_async::prelude::*;
use mysql_async::{Conn, Opts};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A client writing rows `INSERT INTO w VALUES (n, @@server_id)` one after another through
/// the proxy, reconnecting after errors, recording what was acknowledged.
pub struct Writer {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<(u32, Instant)>>>,
    errors: Arc<Mutex<Vec<(u32, String, Instant)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Writer {
    pub fn start(url: String, first: u32) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(Vec::new()));
        let errors = Arc::new(Mutex::new(Vec::new()));
        let (s, a, e) = (stop.clone(), acked.clone(), errors.clone());
        let task = tokio::spawn(async move {
            let mut c: Option<Conn> = None;
            let mut n = first;
            let deadline = Instant::now() + Duration::from_secs(240);
            while !s.load(Relaxed) && Instant::now() < deadline {
                if c.is_none() {
                    match tokio::time::timeout(
                        Duration::from_secs(20),
                        Conn::new(Opts::from_url(&url).unwrap()),
                    )
                    .await
                    {
                        Ok(Ok(conn)) => c = Some(conn),
                        Ok(Err(err)) => {
                            e.lock()
                                .unwrap()
                                .push((0, format!("connect: {err}"), Instant::now()));
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                        Err(_) => {
                            e.lock()
                                .unwrap()
                                .push((0, "connect: timeout".into(), Instant::now()));
                            continue;
                        }
                    }
                }
                let conn = c.as_mut().expect("connected");
                let q = format!("INSERT INTO w VALUES ({n}, @@server_id)");
                match tokio::time::timeout(Duration::from_secs(30), conn.query_drop(q)).await {
                    Ok(Ok(())) => a.lock().unwrap().push((n, Instant::now())),
                    Ok(Err(err)) => {
                        e.lock().unwrap().push((n, err.to_string(), Instant::now()));
                        c = None;
                    }
                    Err(_) => {
                        e.lock()
                            .unwrap()
                            .push((n, "timeout".into(), Instant::now()));
                        c = None;
                    }
                }
                n += 1;
            }
        });
        Writer {
            stop,
            acked,
            errors,
            task,
        }
    }

    pub fn acked_ids(&self) -> BTreeSet<u32> {
        self.acked.lock().unwrap().iter().map(|a| a.0).collect()
    }

    pub fn first_ack_after(&self, t: Instant) -> Option<Instant> {
        self.acked
            .lock()
            .unwrap()
            .iter()
            .map(|a| a.1)
            .find(|at| *at > t)
    }

    pub async fn finish(self) -> (BTreeSet<u32>, Vec<(u32, String, Instant)>) {
        self.stop.store(true, Relaxed);
        let _ = self.task.await;
        let ids = self.acked.lock().unwrap().iter().map(|a| a.0).collect();
        let errors = self.errors.lock().unwrap().clone();
        (ids, errors)
    }
}

/// Ids in table `w` on server `i`, read directly.
pub fn ids_on(env: &Env, i: usize) -> BTreeSet<u32> {
    let out = env.topo.servers[i].sql("SELECT id FROM test.w").unwrap();
    out.lines().filter_map(|l| l.trim().parse().ok()).collect()
}
