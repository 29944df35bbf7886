//! Switchover on request: drain writes, make the primary read-only, let the chosen replica
//! catch up, swap roles. Statements arriving meanwhile wait (the writer hostgroup holds them)
//! so clients see no errors.

use crate::agent::Agent;
use crate::Monitor;
use sluice_core::{Role, Server};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

impl<A: Agent, C: Send + 'static> Monitor<A, C> {
    /// Makes `to` (an address or server name; by default the most advanced replica) the
    /// primary. Returns a summary, or why it could not.
    pub async fn switchover(&self, to: Option<&str>) -> Result<String, String> {
        let _guard = self.changing.lock().await;
        let started = Instant::now();
        let old = self.primary().ok_or("no primary is known")?;
        let candidates = self.candidates(&old);
        let target = match to {
            Some(t) => candidates
                .iter()
                .find(|(s, _)| *s.address == *t || *s.name == *t)
                .map(|(s, _)| s.clone())
                .ok_or_else(|| format!("{t} is not a reachable replica of {}", old.name))?,
            None => candidates
                .first()
                .map(|(s, _)| s.clone())
                .ok_or("no replica to switch over to")?,
        };
        self.events.push(
            "switchover",
            format!(
                "switchover from {} to {}: draining writes",
                old.name, target.name
            ),
        );

        // 1. No new statements on the old primary (they wait for the new one); wait for the
        //    ones in flight (transactions) to finish.
        old.set_offline(Some("switchover: draining".into()));
        let drained = self.wait_drained(&old, self.settings().drain_timeout).await;
        if let Err(busy) = drained {
            old.set_offline(None);
            let msg = format!(
                "switchover aborted: {busy} connections still busy on {} after {} ms",
                old.name,
                self.settings().drain_timeout.as_millis()
            );
            self.events.push("switchover", msg.clone());
            return Err(msg);
        }
        // 2. The old primary stops writing; where did it stop?
        if let Err(e) = self.agent.set_read_only(&old, true).await {
            return self
                .abort_switchover(&old, format!("cannot make {} read-only: {e}", old.name))
                .await;
        }
        let position = match self.agent.write_position(&old).await {
            Ok(p) => p,
            Err(e) => {
                return self
                    .abort_switchover(
                        &old,
                        format!("cannot read the position of {}: {e}", old.name),
                    )
                    .await
            }
        };

        // 3. The target catches up with it.
        let t = Instant::now();
        if let Err(e) = self
            .agent
            .catch_up(&target, &position, self.settings().catchup_timeout)
            .await
        {
            return self
                .abort_switchover(
                    &old,
                    format!("{} did not catch up to {position}: {e}", target.name),
                )
                .await;
        }
        self.events.push(
            "switchover",
            format!(
                "{} caught up to {position} in {} ms",
                target.name,
                t.elapsed().as_millis()
            ),
        );

        // 4. Swap.
        if let Err(e) = self.agent.promote(&target).await {
            return self
                .abort_switchover(&old, format!("cannot promote {}: {e}", target.name))
                .await;
        }
        target.set_monitor_block(None);
        target.set_offline(None);
        self.set_primary(Some(target.clone()));
        self.set_role(&target, Role::Primary);
        let writes_after = started.elapsed();
        match self.agent.replicate_from(&old, &target, true).await {
            Ok(()) => {
                old.set_offline(None);
                self.set_role(&old, Role::Replica);
            }
            Err(e) => {
                self.events.push(
                    "switchover",
                    format!(
                        "{} could not start replicating from {}: {e}",
                        old.name, target.name
                    ),
                );
                self.set_role(&old, Role::Fenced);
            }
        }
        for (r, _) in candidates.iter().filter(|(s, _)| !Arc::ptr_eq(s, &target)) {
            if let Err(e) = self.agent.replicate_from(r, &target, false).await {
                self.events.push(
                    "switchover",
                    format!("cannot repoint {} to {}: {e}", r.name, target.name),
                );
            }
        }
        self.stats.switchovers.fetch_add(1, Relaxed);
        let msg = format!(
            "switchover from {} to {} complete in {} ms (writes paused {} ms)",
            old.name,
            target.name,
            started.elapsed().as_millis(),
            writes_after.as_millis()
        );
        self.events.push("switchover", msg.clone());
        Ok(msg)
    }

    /// Gives the old primary its writes back after a failed switchover step.
    async fn abort_switchover(&self, old: &Arc<Server>, msg: String) -> Result<String, String> {
        let _ = self.agent.set_read_only(old, false).await;
        old.set_offline(None);
        self.events
            .push("switchover", format!("switchover aborted: {msg}"));
        Err(format!("switchover aborted: {msg}"))
    }

    /// Waits until no connection to `server` is lent out; `Err(busy)` after `timeout`.
    async fn wait_drained(&self, server: &Arc<Server>, timeout: Duration) -> Result<(), u32> {
        let deadline = Instant::now() + timeout;
        loop {
            let busy: u32 = self
                .topology
                .hostgroups()
                .iter()
                .flat_map(|h| h.pool_stats())
                .filter(|p| Arc::ptr_eq(&p.server, server))
                .map(|p| p.in_use)
                .sum();
            if busy == 0 {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(busy);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
