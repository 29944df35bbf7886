//! Connection ids a session can observe agree with each other. A session's id is sluice's own
//! (the handshake's, `CONNECTION_ID()`, what `KILL` takes), so whatever else reports a
//! connection id is translated to it: `IS_USED_LOCK()` reports the backend thread holding a
//! lock — the thread of a sluice session's pinned connection reads as that session's id — and
//! `@@pseudo_thread_id` reads as the session's id unless the session set it. (docs/sessions.md)

use super::exec::Target;
use super::session::Session;
use sluice_sqlscan::rewrite;
use sluice_sqlscan::Effects;
use std::sync::Arc;

/// Most lock-holding sessions listed in one translated statement.
const MAX_HOLDERS: usize = 10_000;

impl Session {
    /// `sql` with the session's own ids in place of what it reads about itself, or `None` if
    /// nothing needed replacing. `target`: where it will run (whose lock holders matter);
    /// `None` for a statement being prepared, which may run later on any connection: then
    /// only the session's own locks are translated (computed where it runs).
    pub(crate) fn own_ids(
        &self,
        effects: Effects,
        sql: &[u8],
        target: Option<&Target>,
    ) -> Option<Vec<u8>> {
        let mut text: Option<Vec<u8>> = None;
        if effects.intersects(Effects::CONNECTION_ID) {
            text = rewrite::replace_calls(sql, &[("CONNECTION_ID", self.id.to_string())]);
        }
        if !effects.intersects(Effects::THREAD_ID_READ) {
            return text;
        }
        let set_by_client = self.st.tracked.vars.contains_key("pseudo_thread_id");
        if !set_by_client {
            let cur = text.as_deref().unwrap_or(sql);
            if let Some(t) = rewrite::replace_sysvar(cur, "pseudo_thread_id", &self.id.to_string())
            {
                text = Some(t);
            }
        }
        // The backend's own CONNECTION_ID() — where the statement runs — is this session's
        // thread when it holds the lock; other sessions' pinned threads are listed.
        let mut ids = vec![("CONNECTION_ID()".to_string(), u64::from(self.id))];
        if let Some(target) = target {
            let servers = self.lock_servers(target);
            for (thread, session) in self
                .proxy
                .rt
                .sessions
                .lock_holders_on(&servers, MAX_HOLDERS)
            {
                if session != self.id {
                    ids.push((thread.to_string(), u64::from(session)));
                }
            }
        }
        let cur = text.as_deref().unwrap_or(sql);
        if let Some(t) = rewrite::map_call_results(cur, "IS_USED_LOCK", &ids) {
            text = Some(t);
        }
        text
    }

    /// Servers a lock function for `target` may run on: the held connection's, or the
    /// target hostgroup's.
    fn lock_servers(&self, target: &Target) -> Vec<Arc<str>> {
        match target {
            Target::Held | Target::Previous => {
                let att = match target {
                    Target::Held => self.held.as_ref(),
                    _ => self.prev.as_ref(),
                };
                att.map(|a| vec![a.lease.server().name.clone()])
                    .unwrap_or_default()
            }
            Target::Group(d) => self
                .proxy
                .topology
                .hostgroup(&d.hostgroup)
                .map(|h| h.servers().iter().map(|s| s.name.clone()).collect())
                .unwrap_or_default(),
        }
    }
}
