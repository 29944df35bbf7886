//! Cancel requests. A client cancels with the key sluice gave it (BackendKeyData: its
//! session id and a secret); sluice passes the request on, with the server's own key, to the
//! server connection running that session's statement. A statement still waiting for its
//! connection (in line, or while sluice replays the session's settings there) is not sent at
//! all: the client gets 57014 as if it had been cancelled running. A session with no
//! statement has nothing to cancel: the request is dropped, as PostgreSQL drops one that
//! arrives late.

use sluice_core::Protocol;
use sluice_runtime::tls::BackendTls;
use sluice_runtime::{Registry, SessionKey};
use std::sync::Arc;
use std::time::Duration;

/// Forwards the cancel request for session `pid` if `secret` is its key (over TLS with `tls`,
/// as the server connections); true if one was sent to a server.
pub async fn forward(registry: &Registry, pid: u32, secret: u32, tls: Option<&BackendTls>) -> bool {
    let Some(session) = registry.by_key(SessionKey { id: pid, secret }) else {
        tracing::debug!(pid, "cancel request with an unknown key: dropped");
        return false;
    };
    if session.protocol != Protocol::Postgres {
        return false;
    }
    let current = session.current();
    let (Some((server, server_pid)), Some(ticket)) = (current.backend, current.cancel) else {
        if session.keep_cancel() {
            // Its statement waits for a connection: it will not run.
            tracing::debug!(pid, "cancel request for a statement not sent yet: kept");
            return true;
        }
        tracing::debug!(pid, "cancel request for an idle session: dropped");
        return false;
    };
    // Until the server has taken the request, the connection is not lent to anyone else;
    // if the session already gave it back, the statement is over: nothing to cancel.
    let Some(_in_flight) = ticket.begin() else {
        tracing::debug!(pid, "cancel request after the statement ended: dropped");
        return false;
    };
    session.note_cancel_sent();
    let (addr, server_secret) = (server.address.clone(), ticket.secret());
    match tokio::time::timeout(
        Duration::from_secs(5),
        send(&addr, server_pid, server_secret, tls),
    )
    .await
    {
        Ok(Ok(())) => true,
        Ok(Err(e)) => {
            tracing::warn!(pid, server = %addr, error = %e, "cannot pass a cancel request on");
            false
        }
        Err(_) => {
            tracing::warn!(pid, server = %addr, "cancel request: the server did not accept it in 5 s");
            false
        }
    }
}

/// The statement on server process `pid` (its key `secret`) at `addr` lost its client: it is
/// cancelled in the background, so that the server stops running what no one will read (the
/// connection is being closed, never lent again: the cancel cannot reach anyone else's
/// statement). Directly the backend would run on until the statement ended; through a pool
/// it would also run beyond `[pool] max_connections`, since the closed connection no longer
/// counts.
pub fn abandoned(addr: Arc<str>, pid: u32, secret: u32, tls: Option<BackendTls>) {
    tokio::spawn(async move {
        let sent = send(&addr, pid, secret, tls.as_ref());
        let sent = tokio::time::timeout(Duration::from_secs(5), sent).await;
        if !matches!(sent, Ok(Ok(()))) {
            tracing::debug!(server = %addr, "cannot cancel a statement whose client left");
        }
    });
}

/// A CancelRequest packet to `addr` (over TLS with `tls`: the server's key is not sent in
/// plain text where the statements are not).
async fn send(addr: &str, pid: u32, secret: u32, tls: Option<&BackendTls>) -> std::io::Result<()> {
    let mut s = crate::backend::connect::open_stream(addr, tls)
        .await
        .map_err(|e| std::io::Error::other(e.message))?;
    let mut packet = Vec::with_capacity(16);
    packet.extend_from_slice(&16u32.to_be_bytes());
    packet.extend_from_slice(&80_877_102u32.to_be_bytes());
    packet.extend_from_slice(&pid.to_be_bytes());
    packet.extend_from_slice(&secret.to_be_bytes());
    s.write_all_sent(&packet).await?;
    // The server closes the connection once it has read the request.
    let mut sink = [0u8; 1];
    let _ = tokio::io::AsyncReadExt::read(&mut s, &mut sink).await;
    Ok(())
}
