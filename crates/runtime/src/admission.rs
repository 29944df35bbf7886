//! What a listener group admits, whatever its protocol: connections logging in (a bounded
//! connection-phase budget that evicts the oldest), then logged-in clients (a limit). Each
//! protocol's login runs its own exchange under it and tells refused clients in its own
//! words.

use sluice_core::connecting::ConnectingGate;
use std::sync::Arc;
use tokio::sync::Semaphore;

/// What one listener group admits: connections logging in, then logged-in clients.
pub struct Admission {
    /// Connections in the connection phase.
    pub connecting: Arc<ConnectingGate>,
    /// Logged-in clients.
    pub clients: Arc<Semaphore>,
    /// Error message for a client over the limit.
    pub too_many: &'static str,
}

impl Admission {
    /// A group with `clients` places for logged-in clients and `connecting` for connections
    /// logging in.
    pub fn new(clients: usize, connecting: usize, too_many: &'static str) -> Admission {
        Admission {
            connecting: ConnectingGate::new(connecting),
            clients: Arc::new(Semaphore::new(clients)),
            too_many,
        }
    }
}
