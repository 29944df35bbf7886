//! A bounded log of what the monitor did, for operators and the admin API (also logged).

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::time::SystemTime;

/// Events kept.
const KEEP: usize = 500;

/// One event.
#[derive(Clone, Debug)]
pub struct Event {
    /// When.
    pub at: SystemTime,
    /// What kind (`failover`, `switchover`, `fence`, `rejoin`, `role`, `health`).
    pub kind: &'static str,
    /// What happened.
    pub message: String,
}

/// The event log.
#[derive(Default)]
pub struct Events {
    list: Mutex<VecDeque<Event>>,
}

impl Events {
    /// Records (and logs) an event.
    pub fn push(&self, kind: &'static str, message: String) {
        tracing::info!(kind, "{message}");
        let mut l = self.list.lock();
        if l.len() >= KEEP {
            l.pop_front();
        }
        l.push_back(Event {
            at: SystemTime::now(),
            kind,
            message,
        });
    }

    /// All events, oldest first.
    pub fn all(&self) -> Vec<Event> {
        self.list.lock().iter().cloned().collect()
    }
}
