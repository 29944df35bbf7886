//! The connection-phase budget: how many accepted connections may be logging in at once.
//!
//! A connection holds a place here from accept until it has authenticated (or gone); only
//! then does it count against the client limit. When the budget is full, a new connection
//! closes the one that has been logging in the longest, so sockets that never log in (or
//! log in slowly) cannot keep a real client out: to evict a client that is logging in, a
//! flood must open as many sockets as the budget while that one client completes its few
//! round trips — and every socket it opens beyond the budget closes one of its own.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use tokio::sync::Notify;

/// The connections of one listener group that are still logging in.
#[derive(Debug)]
pub struct ConnectingGate {
    inner: Mutex<Inner>,
    evicted: AtomicU64,
}

#[derive(Debug)]
struct Inner {
    capacity: usize,
    next_id: u64,
    /// Oldest first: ids grow with arrival.
    pending: BTreeMap<u64, Arc<Notify>>,
}

/// A place in the gate, held while the connection logs in; dropping it leaves the gate.
#[derive(Debug)]
pub struct Connecting {
    gate: Arc<ConnectingGate>,
    id: u64,
    evict: Arc<Notify>,
}

impl ConnectingGate {
    /// A gate for at most `capacity` connections logging in at once (at least 1).
    pub fn new(capacity: usize) -> Arc<ConnectingGate> {
        Arc::new(ConnectingGate {
            inner: Mutex::new(Inner {
                capacity: capacity.max(1),
                next_id: 0,
                pending: BTreeMap::new(),
            }),
            evicted: AtomicU64::new(0),
        })
    }

    /// Changes the budget (a reload); connections over a lowered budget are evicted as new
    /// ones arrive.
    pub fn set_capacity(&self, capacity: usize) {
        self.inner.lock().capacity = capacity.max(1);
    }

    /// Enters a new connection, evicting the longest-waiting ones if the gate is full.
    pub fn enter(self: &Arc<Self>) -> Connecting {
        let evict = Arc::new(Notify::new());
        let mut inner = self.inner.lock();
        while inner.pending.len() >= inner.capacity {
            let Some((_, oldest)) = inner.pending.pop_first() else {
                break;
            };
            // A stored permit: the evicted connection sees it even if it is not waiting yet.
            oldest.notify_one();
            self.evicted.fetch_add(1, Relaxed);
        }
        let id = inner.next_id;
        inner.next_id += 1;
        inner.pending.insert(id, evict.clone());
        Connecting {
            gate: self.clone(),
            id,
            evict,
        }
    }

    /// Connections logging in now.
    pub fn len(&self) -> usize {
        self.inner.lock().pending.len()
    }

    /// True if no connection is logging in.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Connections closed so far to make room for newer ones.
    pub fn evicted(&self) -> u64 {
        self.evicted.load(Relaxed)
    }
}

impl Connecting {
    /// Resolves when the gate closes this connection to make room for a newer one.
    pub async fn evicted(&self) {
        self.evict.notified().await
    }
}

impl Drop for Connecting {
    fn drop(&mut self) {
        self.gate.inner.lock().pending.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn is_evicted(c: &Connecting) -> bool {
        tokio::time::timeout(Duration::from_millis(1), c.evicted())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn a_full_gate_evicts_the_oldest() {
        let gate = ConnectingGate::new(2);
        let a = gate.enter();
        let b = gate.enter();
        assert_eq!(gate.len(), 2);
        let c = gate.enter();
        assert_eq!(gate.len(), 2);
        assert!(is_evicted(&a).await, "the oldest goes");
        assert!(!is_evicted(&b).await);
        assert!(!is_evicted(&c).await);
        drop(b);
        assert_eq!(gate.len(), 1);
        let _d = gate.enter();
        assert!(
            !is_evicted(&c).await,
            "room was made by a leaving connection"
        );
        assert_eq!(gate.evicted(), 1);
        drop(a); // already gone from the gate: nothing else leaves
        assert_eq!(gate.len(), 2);
    }

    #[tokio::test]
    async fn a_lowered_budget_evicts_on_the_next_arrival() {
        let gate = ConnectingGate::new(3);
        let held: Vec<_> = (0..3).map(|_| gate.enter()).collect();
        gate.set_capacity(1);
        let _n = gate.enter();
        assert_eq!(gate.len(), 1);
        for c in &held {
            assert!(is_evicted(c).await);
        }
    }
}
