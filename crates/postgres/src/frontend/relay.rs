//! Server responses on their way to the client: matched against what the unit expects (so
//! the answers to what sluice added are consumed and what sluice answers itself is inserted
//! in order), with ParameterStatus, notices and notifications passed on whenever they come,
//! COPY data pumped in either direction, and the ReadyForQuery status recorded. While it
//! waits for the server it keeps reading the client ahead (bounded), so that a pipelining
//! client and sluice never wait on each other.

use super::client::Client;
use super::unit::{Exp, Register, Resp};
use crate::backend::conn::parameter_status;
use crate::backend::PgConn;
use crate::wire::ReadyStatus;
use std::collections::{BTreeMap, VecDeque};
use std::io;

/// Client output is written once this much is gathered.
const FLUSH_AT: usize = 64 * 1024;

/// What the relay learned.
#[derive(Debug, Default)]
pub struct Relayed {
    /// The last ReadyForQuery status, if one came.
    pub status: Option<ReadyStatus>,
    /// An ErrorResponse came.
    pub failed: bool,
    /// Statements to register (their ParseComplete came).
    pub registered: Vec<Register>,
    /// DataRows the client was sent.
    pub rows: u64,
    /// Rows the server reported written (INSERT, UPDATE, DELETE, MERGE, COPY).
    pub affected: u64,
}

/// Why relaying stopped early.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// The server connection broke or sent garbage.
    #[error("server: {0}")]
    Server(io::Error),
    /// The client went away.
    #[error("client: {0}")]
    Client(io::Error),
}

/// Relays until every expectation is met.
pub async fn relay(
    conn: &mut PgConn,
    client: &mut Client,
    exps: &mut VecDeque<Exp>,
    reported: &mut std::sync::Arc<BTreeMap<String, String>>,
) -> Result<Relayed, RelayError> {
    // From the process's shelf, and back to it at the end: no allocation per unit.
    let mut out = sluice_runtime::buffers::write_buffer();
    let mut r = Relayed::default();
    let mut extended_copy_done = false;
    loop {
        // What sluice answers itself, when its turn comes.
        while let Some(tag) = exps.front().and_then(|e| e.synth) {
            out.extend_from_slice(&[tag, 0, 0, 0, 4]);
            if let Some(e) = exps.pop_front() {
                r.registered.extend(e.register);
            }
        }
        if exps.is_empty() {
            break;
        }
        let (tag, len) = match conn.peek() {
            Ok(Some((m, len))) => (m.tag, len),
            Ok(None) => {
                if !out.is_empty() {
                    client.send(&out).await.map_err(RelayError::Client)?;
                    out.clear();
                }
                // The Sync that ends an extended COPY may have come with its CopyDone.
                if extended_copy_done && forward_sync(conn, client).await? {
                    extended_copy_done = false;
                    continue;
                }
                wait(conn, client, extended_copy_done).await?;
                continue;
            }
            Err(e) => {
                return Err(RelayError::Server(io::Error::new(
                    io::ErrorKind::InvalidData,
                    e,
                )))
            }
        };
        let Some(head) = exps.front() else { break };
        let forward = head.forward;
        match tag {
            b'N' | b'A' => out.extend_from_slice(&conn.buffered()[..len]),
            b'S' => {
                let msg = &conn.buffered()[..len];
                out.extend_from_slice(msg);
                let kv = parameter_status(&msg[5..]).map(|(k, v)| (k.to_string(), v.to_string()));
                if let Some((k, v)) = kv {
                    std::sync::Arc::make_mut(reported).insert(k.clone(), v.clone());
                    std::sync::Arc::make_mut(&mut conn.params).insert(k, v);
                }
            }
            b'E' => {
                match &head.replace_error {
                    Some(e) => {
                        let mut w = crate::wire::Writer::new();
                        w.error("ERROR", e.0, &e.1);
                        out.extend_from_slice(w.as_bytes());
                    }
                    None => out.extend_from_slice(&conn.buffered()[..len]),
                }
                r.failed = true;
                // The server skips to the next Sync; a simple query goes on to its
                // ReadyForQuery.
                while let Some(e) = exps.front() {
                    if matches!(e.resp, Resp::Sync | Resp::Query) && e.synth.is_none() {
                        break;
                    }
                    if let Some(e) = exps.pop_front() {
                        if let Some(h) = e.prepared {
                            conn.statements.forget(h);
                        }
                    }
                }
            }
            b'Z' => {
                let msg = &conn.buffered()[..len];
                r.status = msg.get(5).copied().and_then(ReadyStatus::from_byte);
                if forward {
                    out.extend_from_slice(msg);
                }
                exps.pop_front();
            }
            b'G' => {
                // COPY FROM STDIN: the client's data goes to the server until CopyDone/Fail.
                out.extend_from_slice(&conn.buffered()[..len]);
                conn.consume(len);
                client.send(&out).await.map_err(RelayError::Client)?;
                out.clear();
                copy_in(conn, client).await?;
                extended_copy_done = head_is_extended(exps);
                continue;
            }
            b'W' => {
                return Err(RelayError::Server(io::Error::other(
                    "COPY BOTH (replication) is not supported through sluice",
                )))
            }
            _ => {
                let done = match head.resp {
                    Resp::Parse => tag == b'1',
                    Resp::Bind => tag == b'2',
                    Resp::Close => tag == b'3',
                    Resp::DescribeStatement | Resp::DescribePortal => tag == b'T' || tag == b'n',
                    Resp::Execute => matches!(tag, b'C' | b'I' | b's'),
                    Resp::Sync | Resp::Query => false,
                };
                if forward {
                    out.extend_from_slice(&conn.buffered()[..len]);
                }
                match tag {
                    b'D' => r.rows += 1,
                    b'C' => r.affected += affected(&conn.buffered()[5..len]),
                    _ => {}
                }
                if done {
                    if let Some(e) = exps.pop_front() {
                        r.registered.extend(e.register);
                    }
                }
            }
        }
        conn.consume(len);
        if out.len() >= FLUSH_AT {
            client.send(&out).await.map_err(RelayError::Client)?;
            out.clear();
        }
    }
    if !out.is_empty() {
        client.send(&out).await.map_err(RelayError::Client)?;
    }
    sluice_runtime::buffers::give_write(out);
    Ok(r)
}

/// The rows a CommandComplete tag reports written (`INSERT 0 5`, `UPDATE 3`, `COPY 7`).
fn affected(tag: &[u8]) -> u64 {
    let tag = tag.strip_suffix(b"\0").unwrap_or(tag);
    let writes = [&b"INSERT "[..], b"UPDATE ", b"DELETE ", b"MERGE ", b"COPY "];
    if !writes.iter().any(|w| tag.starts_with(w)) {
        return 0;
    }
    tag.rsplit(|&b| b == b' ')
        .next()
        .and_then(|n| std::str::from_utf8(n).ok()?.parse().ok())
        .unwrap_or(0)
}

/// True if the statement in progress came through the extended protocol (a Sync is still
/// expected, not a simple query's end).
fn head_is_extended(exps: &VecDeque<Exp>) -> bool {
    exps.iter().any(|e| e.resp == Resp::Sync) && !exps.iter().any(|e| e.resp == Resp::Query)
}

/// Waits for the server, reading the client ahead meanwhile.
async fn wait(conn: &mut PgConn, client: &mut Client, want_client: bool) -> Result<(), RelayError> {
    if client.may_read_ahead() || want_client {
        tokio::select! {
            r = conn.fill() => r.map_err(RelayError::Server),
            r = client.fill() => r.map_err(RelayError::Client),
        }
    } else {
        conn.fill().await.map_err(RelayError::Server)
    }
}

/// After COPY FROM STDIN through the extended protocol, the client sends the Sync that
/// ends it: passed on as soon as it is there. True once sent.
async fn forward_sync(conn: &mut PgConn, client: &mut Client) -> Result<bool, RelayError> {
    match client.message_at(0) {
        Ok(Some((m, len))) if m.tag == b'S' => {
            let bytes = client.buf[..len].to_vec();
            client.consume(len);
            conn.send(&bytes).await.map_err(RelayError::Server)?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// Pumps CopyData from the client to the server until CopyDone or CopyFail.
async fn copy_in(conn: &mut PgConn, client: &mut Client) -> Result<(), RelayError> {
    let mut batch: Vec<u8> = Vec::new();
    loop {
        let next = client
            .message_at(0)
            .map_err(|e| RelayError::Client(io::Error::new(io::ErrorKind::InvalidData, e)))?;
        let Some((m, len)) = next else {
            if !batch.is_empty() {
                conn.send(&batch).await.map_err(RelayError::Server)?;
                batch.clear();
            }
            client.fill().await.map_err(RelayError::Client)?;
            continue;
        };
        let tag = m.tag;
        batch.extend_from_slice(&client.buf[..len]);
        client.consume(len);
        match tag {
            b'c' | b'f' => {
                conn.send(&batch).await.map_err(RelayError::Server)?;
                return Ok(());
            }
            b'd' | b'H' | b'S' => {}
            _ => {
                // Anything else ends COPY on the server with an error; it goes on as it is.
                conn.send(&batch).await.map_err(RelayError::Server)?;
                return Ok(());
            }
        }
        if batch.len() >= FLUSH_AT {
            conn.send(&batch).await.map_err(RelayError::Server)?;
            batch.clear();
        }
    }
}
