//! Sequence state across pooled connections. `currval(seq)` and `lastval()` read what
//! `nextval` (called directly, or by a column default such as `serial`) left in the server
//! process, and PostgreSQL keeps that per connection: through a pool, the connection a session
//! is lent may hold another client's values, which `currval` would return as the session's
//! own.
//!
//! So each server connection carries the mark of the session stretch whose sequence state it
//! holds, and each session the mark of its current stretch. A connection lent to a session
//! whose mark it does not carry has its sequence state discarded (`DISCARD SEQUENCES`)
//! before it runs anything of the session's, sent in the same write as what comes first
//! (see [`super::ahead`]; or with the session's deferred `BEGIN` when that takes a round trip
//! of its own), so that it costs no round trip. A statement that may advance
//! a sequence (anything routed as a write) starts a new stretch on a clean connection, or
//! continues the one the connection carries. A session
//! therefore reads either its own values or, where they were left on another connection, the
//! server's own error (55000 `currval of sequence "…" is not yet defined in this session`):
//! never another client's.

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
pub const DISCARD: &[u8] = b"Q\0\0\0\x16DISCARD SEQUENCES\0";

impl Sequences {
    /// A connection was leased.
    pub fn leased(&mut self) {
        self.fresh = true;
    }

    /// Before the first unit of a lease: true if `conn` holds someone else's sequence state,
    /// which the caller then discards (with [`DISCARD`], and [`Sequences::discarded`]).
    pub fn must_discard(&mut self, conn: &PgConn) -> bool {
        std::mem::take(&mut self.fresh) && conn.seq_mark != 0 && conn.seq_mark != self.mark
    }

    /// `conn`'s sequence state was discarded.
    pub fn discarded(conn: &mut PgConn) {
        conn.seq_mark = 0;
    }

    /// A unit that ran `ran` (and made a FunctionCall, if `calls`) goes to `conn`: after one
    /// that may advance a sequence, the connection carries this session's mark (a stretch goes
    /// on while the connection carries its mark; otherwise a new one starts). A FunctionCall
    /// may call `nextval` itself.
    pub fn forwarded(&mut self, conn: &mut PgConn, ran: &[Arc<StmtDef>], calls: bool) {
        if (conn.seq_mark != self.mark || self.mark == 0)
            && (calls || ran.iter().any(|d| d.info.route == Route::Write))
        {
            self.mark = next_mark();
            conn.seq_mark = self.mark;
        }
    }
}

/// `DISCARD SEQUENCES` and then `begin` (a client's deferred `BEGIN`, a simple query), as
/// two queries in one write: one round trip for both. (Not one query string: a statement
/// ahead of `BEGIN ISOLATION LEVEL ...` in the same string makes it fail, and one after it
/// would take the transaction's snapshot before a `SET TRANSACTION` could.)
pub fn discard_then(begin: &[u8]) -> Vec<u8> {
    [DISCARD, begin].concat()
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

    #[test]
    fn the_discard_goes_ahead_of_a_deferred_begin() {
        let mut begin = Vec::new();
        crate::frontend::session::put_query(&mut begin, b"BEGIN ISOLATION LEVEL REPEATABLE READ");
        let q = super::discard_then(&begin);
        assert_eq!(q, [super::DISCARD, &begin].concat());
    }
}
