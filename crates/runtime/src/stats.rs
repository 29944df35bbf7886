//! Process-wide counters, whatever protocol the clients speak.

use std::sync::atomic::AtomicU64;

/// Process-wide counters.
#[derive(Debug, Default)]
pub struct ProcessStats {
    /// Client connections accepted and authenticated.
    pub clients_connected: AtomicU64,
    /// Client connections refused (limit, bad password, bad handshake).
    pub clients_refused: AtomicU64,
    /// Statements received.
    pub statements: AtomicU64,
}
