//! Admission of a client through the connection phase, for the client listeners and the SQL
//! admin listener alike: an address blocked after repeated failed logins is refused at once
//! (error 1129), the connection logs in within `[login] handshake_timeout` while holding a
//! place in its listener group's connection-phase budget (which may evict it for a newer
//! connection), and only once authenticated does it take a place under the client limit.

use super::client::ClientConn;
use super::handshake::{self, Authenticated, HandshakeContext};
use crate::wire::consts::err;
use sluice_core::connecting::Connecting;
use std::time::Instant;
use tokio::sync::OwnedSemaphorePermit;

pub use sluice_runtime::admission::Admission;

/// Why a client did not get in (it has been told where the protocol allows).
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// Its address is blocked.
    #[error("address blocked after repeated failed logins")]
    Blocked,
    /// The connection phase failed.
    #[error("{0}")]
    Handshake(#[from] handshake::HandshakeError),
    /// It took longer than `[login] handshake_timeout`.
    #[error("handshake timed out")]
    TimedOut,
    /// Newer connections needed its place in the connection-phase budget.
    #[error("closed to make room for newer connections logging in")]
    Evicted,
    /// The logged-in client limit is reached.
    #[error("too many connections")]
    Full,
}

/// Runs the connection phase for `client` under `admission` and the proxy's `[login]`
/// settings, holding `place` in the connection-phase budget (taken when the connection was
/// accepted, so that "oldest" means first accepted). On success the client holds a place
/// under the client limit.
pub async fn admit(
    client: &mut ClientConn,
    cx: &HandshakeContext<'_>,
    admission: &Admission,
    place: Connecting,
    timeout: std::time::Duration,
) -> Result<(Authenticated, OwnedSemaphorePermit), Refused> {
    let ip = cx.peer.ip();
    if let Some(remaining) = cx.throttle.blocked(ip, Instant::now()) {
        let msg = format!(
            "Host '{ip}' is blocked because of many failed logins; try again in {} s",
            remaining.as_secs().max(1)
        );
        let _ = client
            .send_err(0, err::HOST_IS_BLOCKED, b"HY000", &msg)
            .await;
        return Err(Refused::Blocked);
    }
    let auth = tokio::select! {
        r = tokio::time::timeout(timeout, handshake::accept(client, cx)) => match r {
            Ok(r) => r?,
            Err(_) => return Err(Refused::TimedOut),
        },
        _ = place.evicted() => return Err(Refused::Evicted),
    };
    drop(place);
    match admission.clients.clone().try_acquire_owned() {
        Ok(permit) => Ok((auth, permit)),
        Err(_) => {
            let _ = client
                .send_err(
                    auth.next_seq,
                    err::TOO_MANY_CONNECTIONS,
                    b"08004",
                    admission.too_many,
                )
                .await;
            Err(Refused::Full)
        }
    }
}
