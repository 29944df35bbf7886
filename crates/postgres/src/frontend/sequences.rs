//! Sequence state across pooled connections. `currval(seq)` and `lastval()` read what
//! `nextval` (called directly, or by a column default such as `serial`) left in the server
//! process, and PostgreSQL keeps that per connection: through a pool, the connection a session
//! is lent may hold another client's values, which `currval` would return as the session's
//! own.
//!
//! So each server connection carries the mark of the session stretch whose sequence state it
//! holds, and each session the mark of its current stretch. A connection lent to a session
//! whose mark it does not carry has its sequence state discarded (`DISCARD SEQUENCES`, sent
//! ahead of the session's first messages on it, its answer not relayed) before it runs
//! anything. A statement that may advance a sequence (anything routed as a write) starts a
//! new stretch on a clean connection, or continues the one the connection carries. A session
//! therefore reads either its own values or, where they were left on another connection, the
//! server's own error (55000 `currval of sequence "…" is not yet defined in this session`):
//! never another client's.

use super::unit::{Exp, Exps, Resp};
use crate::backend::statements::StmtDef;
use crate::backend::PgConn;
use sluice_core::router::Route;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// A session's side.
#[derive(Debug, Default)]
pub struct Sequences {
    /// The mark of the session's current stretch (0: it never touched a sequence).
    mark: u64,
    /// The connection was just leased: its first unit has not been forwarded.
    fresh: bool,
}

/// `DISCARD SEQUENCES` as a simple query.
const DISCARD: &[u8] = b"Q\0\0\0\x16DISCARD SEQUENCES\0";

impl Sequences {
    /// A connection was leased.
    pub fn leased(&mut self) {
        self.fresh = true;
    }

    /// Before a unit goes to `conn`: on the first unit of a lease, a connection that holds
    /// someone else's sequence state gets `DISCARD SEQUENCES` ahead of the unit (`client` is
    /// the unit as the client sent it, when `out` is `None`); after a unit that may advance
    /// a sequence, the connection carries this session's mark.
    pub fn before(
        &mut self,
        conn: &mut PgConn,
        ran: &[Arc<StmtDef>],
        client: &[u8],
        out: &mut Option<Vec<u8>>,
        exps: &mut Exps,
    ) {
        if std::mem::take(&mut self.fresh) && conn.seq_mark != 0 && conn.seq_mark != self.mark {
            // A new lease starts with the connection answered in full (only such connections
            // are lent), so the query runs on its own, before anything of the client's.
            let mut with = Vec::with_capacity(DISCARD.len() + client.len());
            with.extend_from_slice(DISCARD);
            with.extend_from_slice(out.as_deref().unwrap_or(client));
            if let Some(old) = out.replace(with) {
                sluice_runtime::buffers::give_write(old);
            }
            let mut first = Exps::default();
            first.push_back(Exp::swallow(Resp::Query));
            first.append(exps);
            *exps = first;
            conn.seq_mark = 0;
        }
        if conn.seq_mark != self.mark || self.mark == 0 {
            if ran.iter().any(|d| d.info.route == Route::Write) {
                self.mark = next_mark();
                conn.seq_mark = self.mark;
            }
        }
    }
}

/// A mark no stretch had before (process-wide).
fn next_mark() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Relaxed)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_discard_message_is_well_formed() {
        let (m, len) = crate::wire::read_message(super::DISCARD, 1 << 10)
            .unwrap()
            .unwrap();
        assert_eq!((m.tag, len), (b'Q', super::DISCARD.len()));
        assert_eq!(m.body, b"DISCARD SEQUENCES\0");
    }
}
