//! Cancel requests (PostgreSQL's CancelRequest, MySQL's `KILL QUERY`) against pooled server
//! connections. They travel out of band, on a connection of their own: by the time one
//! reaches the server, the statement it meant may be over and its connection lent to another
//! session, whose statement it would cancel instead. A [`CancelGate`] per server connection
//! prevents both ways that happens:
//!
//! - a cancel goes out only while the connection is still in the lease its
//!   [`CancelTicket`] was issued for (every new lease starts a new epoch; older tickets fail);
//! - while one is under way ([`CancelInFlight`]), the connection is not lent again: the next
//!   session to find it in the pool closes it instead ([`CancelGate::claim`] fails).

use std::sync::atomic::{AtomicU64, Ordering::AcqRel, Ordering::Acquire};
use std::sync::Arc;

/// Low half: cancels under way; high half: the lease epoch.
const IN_FLIGHT: u64 = 0xffff_ffff;
const EPOCH: u64 = IN_FLIGHT + 1;

/// One per server connection, for as long as it lives.
#[derive(Debug, Default)]
pub struct CancelGate {
    state: AtomicU64,
    /// The key a cancel request for the connection must quote (PostgreSQL's BackendKeyData
    /// secret; 0 for MySQL, whose `KILL` needs none).
    secret: u32,
}

impl CancelGate {
    /// A gate for a connection whose cancel requests quote `secret`.
    pub fn new(secret: u32) -> Arc<CancelGate> {
        Arc::new(CancelGate {
            state: AtomicU64::new(0),
            secret,
        })
    }

    /// Starts a new lease of the connection unless a cancel is under way for it (then it
    /// must not be lent: false). Tickets of earlier leases are void from here on.
    pub fn claim(&self) -> bool {
        self.state
            .fetch_update(AcqRel, Acquire, |s| {
                (s & IN_FLIGHT == 0).then(|| s.wrapping_add(EPOCH))
            })
            .is_ok()
    }

    /// The ticket for the connection's current lease (taken by the session that claimed it).
    pub fn ticket(self: &Arc<Self>) -> CancelTicket {
        CancelTicket {
            gate: self.clone(),
            epoch: (self.state.load(Acquire) >> 32) as u32,
        }
    }
}

/// What lets a cancel request reach one lease of a connection (published with the session's
/// backend for whoever handles cancels).
#[derive(Clone, Debug)]
pub struct CancelTicket {
    gate: Arc<CancelGate>,
    epoch: u32,
}

impl CancelTicket {
    /// The gate and the lease epoch, to be kept apart (in less room than a ticket takes).
    pub fn into_parts(self) -> (Arc<CancelGate>, u32) {
        (self.gate, self.epoch)
    }

    /// The ticket [`CancelTicket::into_parts`] took apart.
    pub fn from_parts(gate: Arc<CancelGate>, epoch: u32) -> CancelTicket {
        CancelTicket { gate, epoch }
    }

    /// The key the cancel request must quote.
    pub fn secret(&self) -> u32 {
        self.gate.secret
    }

    /// A cancel may go out: the connection is still in this ticket's lease. The guard keeps
    /// it from being lent again until the cancel has been delivered (dropped). `None`: the
    /// lease is over, and the statement with it; the cancel is dropped.
    pub fn begin(&self) -> Option<CancelInFlight> {
        self.gate
            .state
            .fetch_update(AcqRel, Acquire, |s| {
                ((s >> 32) as u32 == self.epoch && s & IN_FLIGHT < IN_FLIGHT).then_some(s + 1)
            })
            .ok()
            .map(|_| CancelInFlight {
                gate: self.gate.clone(),
            })
    }
}

/// A cancel under way to a connection: it is not lent again until this is dropped.
#[derive(Debug)]
pub struct CancelInFlight {
    gate: Arc<CancelGate>,
}

impl Drop for CancelInFlight {
    fn drop(&mut self) {
        self.gate.state.fetch_sub(1, AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancel_reaches_only_its_own_lease_and_holds_the_connection_back() {
        let gate = CancelGate::new(7);
        assert!(gate.claim());
        let first = gate.ticket();
        assert_eq!(first.secret(), 7);
        // Under way: the connection may not be lent again; a second cancel may still go.
        let a = first.begin().unwrap();
        let b = first.begin().unwrap();
        assert!(!gate.claim());
        drop(a);
        assert!(!gate.claim());
        drop(b);
        // Delivered: it may be lent; the next lease voids the first one's ticket.
        assert!(gate.claim());
        assert!(first.begin().is_none());
        let second = gate.ticket();
        assert!(second.begin().is_some());
        // A refused claim changes nothing: the current lease's ticket still works.
        let held = second.begin().unwrap();
        assert!(!gate.claim());
        assert!(second.begin().is_some());
        drop(held);
        // The epoch wraps after 2^32 leases without touching the count.
        let gate = CancelGate::new(0);
        gate.state
            .store(!IN_FLIGHT, std::sync::atomic::Ordering::SeqCst);
        let last = gate.ticket();
        assert!(gate.claim());
        assert_eq!(gate.state.load(Acquire), 0);
        assert!(last.begin().is_none());
        assert!(gate.ticket().begin().is_some());
    }
}
