//! The deadlines of the statements waiting in a hostgroup's line. While anyone waits, one task
//! per hostgroup sleeps until the earliest deadline and tells the waiters whose time is up,
//! instead of a timer per waiting statement: registering and dropping one cost about 500
//! instructions per wait at 256 clients on 100 connections, where most statements wait.
//! Deadlines are almost always in line order (one `queue_timeout` for all); the sweep still
//! reads them all, so a reload that shortens the timeout is honoured at once.
//!
//! The sweeper also looks, every [`RECHECK`] while anyone waits, whether any server of the
//! hostgroup may still take statements: once none may (drained, weight 0, removed, the
//! hostgroup itself removed), the waiters are let go to pick afresh, as a statement arriving
//! then does — a read falls back to the writer, a write to a vacant writer waits for the new
//! one — instead of waiting out their `queue_timeout` for a connection that cannot come.

use super::{Handoff, Hostgroup, State};
use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// How often the sweeper looks whether the waiters can still be served here.
pub(super) const RECHECK: Duration = Duration::from_millis(100);

impl<C: Send + 'static> Hostgroup<C> {
    /// Under the lock, after a waiter with `deadline` joined the line: the sweeper wakes by
    /// then (started if none runs).
    pub(super) fn arm_sweeper(&self, st: &mut State<C>, deadline: Instant) {
        match st.sweep_at {
            Some(at) if at <= deadline => {}
            Some(_) => {
                st.sweep_at = Some(deadline);
                self.sweep_wake.notify_one();
            }
            None => {
                // Without a runtime no one can wait either: the statement's own future awaits
                // its turn on one.
                let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                    return;
                };
                st.sweep_at = Some(deadline);
                runtime.spawn(sweep(self.me.clone(), self.sweep_wake.clone()));
            }
        }
    }

    /// Tells every waiter whose deadline has passed, drops those that left; the next deadline,
    /// or `None` when the line is empty (the sweeper then stops, under the same lock that
    /// [`Hostgroup::arm_sweeper`] starts it under).
    fn expire_waiters(&self) -> Option<Instant> {
        let now = Instant::now();
        let mut st = self.state.lock();
        if !st.members.iter().any(|m| m.server.is_usable()) {
            // No server here may take them: each picks again (its sender dropped), with the
            // deadline it had.
            st.waiters.clear();
            st.sweep_at = None;
            return None;
        }
        let mut next: Option<Instant> = None;
        let mut kept = VecDeque::with_capacity(st.waiters.len());
        for w in st.waiters.drain(..) {
            if w.tx.is_closed() {
                continue;
            }
            if w.deadline <= now {
                // It may have left since: then no one hears it.
                let _ = w.tx.send(Handoff::Expired);
                continue;
            }
            next = Some(next.map_or(w.deadline, |n| n.min(w.deadline)));
            kept.push_back(w);
        }
        st.waiters = kept;
        st.sweep_at = next;
        next
    }
}

/// The sweeper: holds the hostgroup only while it sweeps, so a hostgroup no one uses any more
/// goes away with its line.
async fn sweep<C: Send + 'static>(hostgroup: Weak<Hostgroup<C>>, wake: Arc<Notify>) {
    loop {
        let Some(at) = hostgroup.upgrade().and_then(|hg| hg.expire_waiters()) else {
            return;
        };
        tokio::select! {
            _ = tokio::time::sleep_until(at.min(Instant::now() + RECHECK)) => {}
            _ = wake.notified() => {}
        }
    }
}
