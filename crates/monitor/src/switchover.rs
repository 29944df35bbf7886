//! Switchover on request: drain writes, make the primary read-only, let the chosen replica
//! catch up, swap roles. Statements arriving meanwhile wait (the writer hostgroup holds them)
//! so clients see no errors. If a step fails before the target is writable, everything is put
//! back (the old primary writable and in service, the target replicating again).

use crate::agent::Threads;
use crate::journal::{Journal, Undo};
use crate::repair::Action;
use crate::Monitor;
use sluice_core::{Role, Server};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

impl Monitor {
    /// Makes `to` (an address or server name; by default the most advanced replica) the
    /// primary. Returns a summary, or why it could not.
    pub async fn switchover(&self, to: Option<&str>) -> Result<String, String> {
        let _guard = self.changing.lock().await;
        // Decide on what the servers say now (a switchover just done changed them).
        self.check_all(false).await;
        let started = Instant::now();
        let old = self.primary().ok_or("no primary is known")?;
        if !self.reachable(&old) {
            return Err(format!(
                "the primary {} does not answer: that is a failover, not a switchover",
                old.name
            ));
        }
        let candidates = self.candidates(&old);
        let target = match to {
            Some(t) => candidates
                .iter()
                .find(|(s, _, _)| *s.address == *t || *s.name == *t)
                .map(|(s, _, _)| s.clone())
                .ok_or_else(|| format!("{t} is not a reachable replica of {}", old.name))?,
            // Any replica is safe (it catches up with the primary first): the best.
            None => candidates
                .first()
                .map(|(s, _, _)| s.clone())
                .ok_or("no replica to switch over to")?,
        };
        self.events.push(
            "switchover",
            format!(
                "switchover from {} to {}: draining writes",
                old.name, target.name
            ),
        );
        let mut journal = Journal::default();

        // 1. No new statements on the old primary (they wait for the new one); wait for the
        //    ones in flight (transactions) to finish.
        old.set_offline(Some("switchover: draining".into()));
        journal.push(Undo::Online(old.clone()));
        let drained = self.wait_drained(&old, self.settings().drain_timeout).await;
        if let Err(busy) = drained {
            let why = format!(
                "{busy} connections still busy on {} after {} ms",
                old.name,
                self.settings().drain_timeout.as_millis()
            );
            return Err(self.abort_switchover(journal, why).await);
        }
        // 2. The old primary stops writing; where did it stop?
        if let Err(e) = self.agent.set_read_only(&old, true).await {
            let why = format!("cannot make {} read-only: {e}", old.name);
            return Err(self.abort_switchover(journal, why).await);
        }
        journal.push(Undo::ReadOnly(old.clone(), false));
        let position = match self.agent.write_position(&old).await {
            Ok(p) => p,
            Err(e) => {
                let why = format!("cannot read the position of {}: {e}", old.name);
                return Err(self.abort_switchover(journal, why).await);
            }
        };

        // 3. The target catches up with it, stops replicating and is promoted.
        let t = Instant::now();
        if let Err(e) = self
            .agent
            .catch_up(&target, &position, self.settings().catchup_timeout)
            .await
        {
            let why = format!("{} did not catch up to {position}: {e}", target.name);
            return Err(self.abort_switchover(journal, why).await);
        }
        self.events.push(
            "switchover",
            format!(
                "{} caught up to {position} in {} ms",
                target.name,
                t.elapsed().as_millis()
            ),
        );
        if let Err(e) = self.agent.detach(&target, false, Threads::All).await {
            let why = format!("cannot stop replication on {}: {e}", target.name);
            return Err(self.abort_switchover(journal, why).await);
        }
        journal.push(Undo::Restart(target.clone(), Threads::All));
        if let Err(e) = self.agent.promote(&target).await {
            let why = format!("cannot promote {}: {e}", target.name);
            return Err(self.abort_switchover(journal, why).await);
        }

        // 4. Swap: from here on the switchover is done.
        target.set_monitor_block(None);
        target.set_offline(None);
        self.set_primary(Some(target.clone()));
        self.set_role(&target, Role::Primary);
        let writes_after = started.elapsed();
        match self.agent.replicate_from(&old, &target, true).await {
            Ok(()) => {
                // Out of the writer hostgroup before it takes traffic again: online there even
                // for an instant, it could be lent a held write, which a read-only server
                // still takes from a user with READ_ONLY ADMIN (or SUPER), and which its new
                // primary would never have.
                self.set_role(&old, Role::Replica);
                old.set_offline(None);
            }
            Err(e) => {
                // Read-only, and everything it has the new primary has: it rejoins as soon
                // as it can (retried), and takes no traffic meanwhile.
                old.set_offline(Some(format!("rejoin failed: {e}")));
                self.set_role(&old, Role::Fenced);
                self.repair_failed(&old, Action::Rejoin, &e.message);
            }
        }
        for (r, _, _) in candidates
            .iter()
            .filter(|(s, _, _)| !Arc::ptr_eq(s, &target))
        {
            if let Err(e) = self.agent.replicate_from(r, &target, false).await {
                self.repair_failed(r, Action::Follow, &e.message);
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

    /// Puts back what a failed switchover changed; returns the error for the caller.
    async fn abort_switchover(&self, journal: Journal, why: String) -> String {
        self.stats.switchover_failures.fetch_add(1, Relaxed);
        let undone = self.roll_back(journal).await;
        let msg = format!("switchover aborted: {why}; {undone}");
        tracing::warn!("{msg}");
        self.events.push("switchover", msg.clone());
        self.state.lock().preflight.recheck_now();
        msg
    }

    /// Waits until no connection to `server` is lent out; `Err(busy)` after `timeout`.
    async fn wait_drained(&self, server: &Arc<Server>, timeout: Duration) -> Result<(), u32> {
        let deadline = Instant::now() + timeout;
        loop {
            let busy = self.cluster.in_use(server);
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
