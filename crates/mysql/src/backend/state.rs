//! What the proxy knows about a backend connection's session.

use crate::state::TrackedState;

/// Session state of a backend connection.
#[derive(Clone, Debug, Default)]
pub struct BackendState {
    /// Replayable state currently in force.
    pub tracked: TrackedState,
    /// sql_mode of a fresh connection (to know NO_BACKSLASH_ESCAPES when the session never
    /// set sql_mode).
    pub baseline_sql_mode: String,
    /// The value LAST_INSERT_ID() returns on this connection, when the proxy knows it.
    pub last_insert_id: Option<u64>,
}
