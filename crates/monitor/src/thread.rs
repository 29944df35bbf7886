//! The monitor runs on a thread of its own, with its own single-threaded runtime: a burst of
//! client traffic that keeps the proxy's worker threads busy cannot delay its checks (a check
//! that times out because the monitor itself waited would take healthy servers out).

use crate::Monitor;
use std::sync::Arc;
use tokio::sync::{oneshot, watch};

impl Monitor {
    /// Starts the monitor on its own thread: one first round of checks and decisions (the
    /// returned receiver fires when it is done, so that clients find roles placed), then a
    /// round every `interval` until `shutdown` turns true.
    pub fn start(
        self: &Arc<Self>,
        mut shutdown: watch::Receiver<bool>,
    ) -> std::io::Result<oneshot::Receiver<()>> {
        let (ready, ready_rx) = oneshot::channel();
        let me = self.clone();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::Builder::new()
            .name("sluice-monitor".into())
            .spawn(move || {
                runtime.block_on(async move {
                    tokio::select! {
                        _ = me.first_round() => {}
                        _ = shutdown.changed() => return,
                    }
                    let _ = ready.send(());
                    me.run(shutdown).await;
                });
            })?;
        Ok(ready_rx)
    }

    /// Checks and decides every `interval` until `shutdown` turns true.
    pub async fn run(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut every = self.settings().interval;
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.changed() => return,
            }
            tokio::select! {
                _ = self.round() => {}
                _ = shutdown.changed() => return,
            }
            if self.settings().interval != every {
                every = self.settings().interval;
                tick = tokio::time::interval(every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                tick.tick().await;
            }
        }
    }
}
