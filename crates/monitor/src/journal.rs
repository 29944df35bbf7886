//! What a procedure (failover, switchover) changed on servers, so that when a later step
//! fails everything is put back, newest first. What cannot be put back at once (the server
//! does not answer) becomes a repair the monitor keeps retrying.

use crate::agent::Threads;
use crate::repair::Action;
use crate::Monitor;
use sluice_core::Server;
use std::sync::Arc;

/// One change to undo.
pub(crate) enum Undo {
    /// The monitor stopped these replication threads of this server: start them again.
    Restart(Arc<Server>, Threads),
    /// The monitor changed `read_only`: set it back to this value.
    ReadOnly(Arc<Server>, bool),
    /// The monitor took this server out of service (to drain it): put it back.
    Online(Arc<Server>),
}

/// Changes made so far by one procedure.
#[derive(Default)]
pub(crate) struct Journal {
    steps: Vec<Undo>,
}

impl Journal {
    /// Records a change.
    pub fn push(&mut self, u: Undo) {
        self.steps.push(u);
    }
}

impl Monitor {
    /// Undoes everything in `journal`, newest first. Returns a sentence saying what was put
    /// back and what will be retried.
    pub(crate) async fn roll_back(&self, journal: Journal) -> String {
        let mut restored = Vec::new();
        let mut pending = Vec::new();
        for step in journal.steps.into_iter().rev() {
            match step {
                Undo::Restart(s, which) => match self.agent.resume(&s, which).await {
                    Ok(()) => restored.push(format!("replication restarted on {}", s.name)),
                    Err(e) => {
                        pending.push(format!("replication on {} not restarted yet ({e})", s.name));
                        self.repair_failed(&s, Action::Restart, &e.message);
                    }
                },
                Undo::ReadOnly(s, on) => match self.agent.set_read_only(&s, on).await {
                    Ok(()) => restored.push(format!("{} read_only={} again", s.name, u8::from(on))),
                    Err(e) => {
                        pending.push(format!(
                            "{} not set back to read_only={} yet ({e})",
                            s.name,
                            u8::from(on)
                        ));
                        self.repair_failed(&s, Action::ReadOnly(on), &e.message);
                    }
                },
                Undo::Online(s) => {
                    s.set_offline(None);
                    restored.push(format!("{} takes traffic again", s.name));
                }
            }
        }
        match (restored.is_empty(), pending.is_empty()) {
            (true, true) => "nothing to undo".to_string(),
            (false, true) => format!("undone: {}", restored.join(", ")),
            (true, false) => format!("{} (retrying)", pending.join(", ")),
            (false, false) => format!(
                "undone: {}; {} (retrying)",
                restored.join(", "),
                pending.join(", ")
            ),
        }
    }
}
