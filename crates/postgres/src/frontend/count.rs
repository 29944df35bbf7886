//! Counting what a session ran, as the MySQL front end counts it: per server (statements,
//! errors, reads, writes) and in the shared digest table (by normalised text, user,
//! database and hostgroup).

use super::relay::Relayed;
use super::session::Session;
use crate::backend::statements::StmtDef;
use sluice_core::{DigestKey, DigestSample, Server};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

impl Session {
    /// Counts a unit's statements on the server that ran them. The unit's rows, time and
    /// error go to its last statement's digest (a unit is nearly always one statement).
    // (Inlined into both paths that call it, for every unit: the call cost more than it
    // saved, callgrind.)
    #[inline(always)]
    pub(super) fn count(
        &self,
        server: &Server,
        hostgroup: &str,
        ran: &[Arc<StmtDef>],
        relayed: &Relayed,
        started: Instant,
    ) {
        let stats = &server.stats;
        for def in ran {
            stats.queries.fetch_add(1, Relaxed);
            match self.fe.route_of(&def.info) {
                sluice_core::router::Route::Read => stats.reads.fetch_add(1, Relaxed),
                sluice_core::router::Route::Write => stats.writes.fetch_add(1, Relaxed),
            };
        }
        if relayed.failed {
            stats.errors.fetch_add(1, Relaxed);
        }
        let digests = &self.fe.rt.digests;
        if digests.capacity() == 0 {
            return;
        }
        // One clock read for the time and the digest's last sighting.
        let ended = Instant::now();
        let elapsed = ended.saturating_duration_since(started);
        let database = self.key.database.as_deref().unwrap_or("");
        for (i, def) in ran.iter().enumerate() {
            let last = i + 1 == ran.len();
            digests.record_with(
                DigestKey {
                    id: def.info.digest,
                    user: &self.key.user,
                    schema: database,
                    hostgroup,
                },
                // Only for a digest not in the table yet.
                || def.digest_text(),
                DigestSample {
                    elapsed: if last { elapsed } else { Duration::ZERO },
                    rows_sent: if last { relayed.rows } else { 0 },
                    rows_affected: if last { relayed.affected } else { 0 },
                    error: last && relayed.failed,
                    ended: Some(ended),
                },
            );
        }
    }
}
