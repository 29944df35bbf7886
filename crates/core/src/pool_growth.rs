//! How fast a server's pool grows while statements wait for a connection.
//!
//! A connection is opened only for a statement that waits, and the connection goes to
//! whichever waiter is first in line when it is ready: a connection coming back and a
//! connection just opened serve the queue alike. While connections come back, few connects
//! at a time (`[pool] max_connecting` per server) are enough: the queue is served by the
//! returns, and the pool grows only as far as the load needs.
//!
//! When a connect completes and no connection came back while it was being opened, the
//! connections in use are held by long statements and the queue is served by new connections
//! alone. Each such connect then raises the server's limit by one, so the number of connects
//! in flight doubles every round (like TCP's slow start), up to the server's
//! `max_connections`: a short statement behind N long ones waits about log2(N /
//! max_connecting) connect rounds instead of N / max_connecting. The first connection that
//! comes back sets the limit back to `max_connecting`.

/// The growth state of one server's pool. Pure: the hostgroup tells it what happened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Growth {
    /// Connects allowed in flight beyond `max_connecting`.
    extra: u32,
}

impl Growth {
    /// Connects that may be in flight at once to a server allowing `max_connections`.
    pub fn limit(self, max_connecting: u32, max_connections: u32) -> u32 {
        max_connecting
            .saturating_add(self.extra)
            .min(max_connections.max(max_connecting))
    }

    /// A connect completed; `returned_meanwhile` tells whether any connection came back to the
    /// hostgroup while it was being opened.
    pub fn connected(&mut self, returned_meanwhile: bool, max_connections: u32) {
        if !returned_meanwhile {
            self.extra = self.extra.saturating_add(1).min(max_connections);
        }
    }

    /// A connection came back: waiters are being served by returns again.
    pub fn returned(&mut self) {
        self.extra = 0;
    }
}

/// Connect rounds after which the statement at `position` in the queue (1 = first) has been
/// served by a new connection when nothing comes back and nothing limits the growth but
/// the doubling: the smallest `r` with `max_connecting * (2^r - 1) >= position`.
pub fn rounds_to_serve(position: u64, max_connecting: u32) -> u32 {
    let base = u64::from(max_connecting.max(1));
    let mut rounds = 0;
    let mut served = 0u64;
    while served < position {
        served = served.saturating_add(base << rounds.min(62));
        rounds += 1;
    }
    rounds
}
