//! Who may decide a failover. A single sluice instance decides alone ([`Local`]); a
//! coordinated multi-instance mode implements [`Coordinator`] (a lease in a shared store, a
//! quorum of instances that agree the primary is down) without touching the procedure.

use crate::agent::BoxFuture;

/// A failover proposal.
#[derive(Clone, Debug)]
pub struct Proposal {
    /// The failed primary.
    pub primary: String,
    /// The replica to promote.
    pub candidate: String,
    /// How long the primary has been unreachable, in ms.
    pub down_for_ms: u128,
}

/// Decides whether this instance may carry out a failover now.
pub trait Coordinator: Send + Sync + 'static {
    /// Returns true if this instance is allowed to fail over as proposed.
    fn approve<'a>(&'a self, proposal: &'a Proposal) -> BoxFuture<'a, bool>;
}

/// The single-instance coordinator: always approves.
pub struct Local;

impl Coordinator for Local {
    fn approve<'a>(&'a self, _proposal: &'a Proposal) -> BoxFuture<'a, bool> {
        Box::pin(async { true })
    }
}
