//! The errors forwarding gives in place of a message sluice refuses: PostgreSQL's own where
//! the server would have raised them, sluice's where a bound of its own is reached.

use crate::front::PORTALS_PER_SESSION;

/// The error of a Bind whose copy [`COPY_UNCHARGED`] the budget cannot hold; in a failed
/// transaction block, the server's own (it refuses any Bind there).
pub(super) fn copy_over_budget(
    over: &sluice_core::OverBudget,
    txn_failed: bool,
) -> (&'static str, String) {
    if txn_failed {
        return (
            "25P02",
            "current transaction is aborted, commands ignored until end of transaction block"
                .to_string(),
        );
    }
    (
        "53200",
        format!(
            "sluice: out of memory for client messages: this Bind's {} bytes of parameters are copied to name its statement on the server connection, but the messages of all clients may hold at most {} bytes ([proxy] max_request_memory) and {} are in use; retry later (a Bind of the unnamed statement is not copied)",
            over.wanted, over.limit, over.used
        ),
    )
}

/// PostgreSQL's error for a Bind or Describe of the unnamed statement when there is none.
pub(super) fn no_unnamed() -> (&'static str, String) {
    (
        "26000",
        "unnamed prepared statement does not exist".to_string(),
    )
}

/// PostgreSQL's error for a statement name the session does not have.
pub fn no_statement(name: &[u8]) -> (&'static str, String) {
    (
        "26000",
        format!(
            "prepared statement \"{}\" does not exist",
            String::from_utf8_lossy(name)
        ),
    )
}

/// The error for a session that opens more portals than sluice keeps for one.
pub(super) fn too_many_portals() -> String {
    format!(
        "sluice: a session keeps at most {PORTALS_PER_SESSION} open portals; close some or end the transaction first"
    )
}

/// PostgreSQL's error for an Execute or Describe of the unnamed portal when there is none.
pub(super) fn no_portal() -> (&'static str, String) {
    ("34000", "portal \"\" does not exist".to_string())
}
