//! COPY FROM STDIN: the client's data pumped to the server until its end, what the server
//! sends meanwhile passed on, and the Sync that ends an extended COPY forwarded as soon as
//! it is there.

use super::{RelayError, FLUSH_AT};
use crate::backend::PgConn;
use crate::frontend::client::Client;
use crate::frontend::unit::{Exps, Resp};
use std::io;

/// After COPY FROM STDIN through the extended protocol, the client sends the Sync (or a
/// Flush) that has the server answer it: passed on as soon as it is there, with what comes
/// before it of the COPY (its data and end, when the server ended the COPY first with an
/// error and discards them up to the Sync). The type of the last message sent, if any.
pub(super) async fn forward_sync(
    conn: &mut PgConn,
    client: &mut Client,
) -> Result<Option<u8>, RelayError> {
    let (mut n, mut last) = (0, None);
    while let Ok(Some((m, len))) = client.message_at(n) {
        if !copy_or_end(m.tag) {
            break;
        }
        n += len;
        last = Some(m.tag);
        if m.tag == b'S' {
            break;
        }
    }
    if n > 0 {
        let bytes = client.buf[..n].to_vec();
        client.consume(n);
        conn.send(&bytes).await.map_err(RelayError::Server)?;
    }
    Ok(last)
}

/// What may follow the data of an extended COPY up to the Sync that ends it: more of the
/// COPY (CopyData, CopyDone, CopyFail), a Flush, the Sync.
fn copy_or_end(tag: u8) -> bool {
    matches!(tag, b'd' | b'c' | b'f' | b'H' | b'S')
}

/// After an extended COPY's CopyDone: the client's next message is whole and neither COPY
/// data, a Sync nor a Flush, and what the unit still waits for is the COPY's CommandComplete
/// and the Sync the server ignored during the COPY.
pub(super) fn copy_followed_by_other(client: &Client, exps: &Exps) -> bool {
    matches!(client.message_at(0), Ok(Some((m, _))) if !copy_or_end(m.tag))
        && exps.front().is_some_and(|e| e.resp == Resp::Execute)
        && exps.iter().skip(1).all(|e| e.resp == Resp::Sync)
}

/// Pumps CopyData from the client to the server until CopyDone or CopyFail, or until the
/// server ends the COPY itself (an error in the data so far): its ErrorResponse reaches the
/// client at once, as on a direct connection, and the relay takes it from there.
pub(super) async fn copy_in(conn: &mut PgConn, client: &mut Client) -> Result<(), RelayError> {
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
            if wait_in_copy(conn, client).await? {
                return Ok(());
            }
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

/// Waits for the client's next bytes during COPY FROM STDIN, passing on what the server
/// sends meanwhile (a trigger's notice, a notification); true once the server ended the
/// COPY with an ErrorResponse (left in the buffer, for the relay).
async fn wait_in_copy(conn: &mut PgConn, client: &mut Client) -> Result<bool, RelayError> {
    loop {
        match conn.peek() {
            Ok(Some((m, _))) if m.tag == b'E' => return Ok(true),
            Ok(Some((m, len))) => {
                let (tag, bytes) = (m.tag, conn.buffered()[..len].to_vec());
                if tag == b'S' {
                    conn.note_parameter(&bytes[5..]);
                }
                conn.consume(len);
                client.send(&bytes).await.map_err(RelayError::Client)?;
                continue;
            }
            Ok(None) => {}
            Err(e) => {
                return Err(RelayError::Server(io::Error::new(
                    io::ErrorKind::InvalidData,
                    e,
                )))
            }
        }
        tokio::select! {
            // The client first: its data is what the COPY waits for.
            biased;
            r = client.fill() => {
                r.map_err(RelayError::Client)?;
                return Ok(false);
            }
            r = conn.readable() => {
                r.map_err(RelayError::Server)?;
                conn.try_fill().map_err(RelayError::Server)?;
            }
        }
    }
}
