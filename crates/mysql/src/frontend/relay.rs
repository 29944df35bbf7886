//! Streams a backend's response to the client through the [`Scanner`]. Bytes are written as
//! they arrive (one write per read in the common case), so memory per session stays at one
//! read buffer and a slow client slows the server down instead of filling the proxy.

use super::client::ClientConn;
use super::scan::{Outcome, Scanner, Step};
use crate::backend::BackendConn;
use crate::wire::consts::{cap, err};
use crate::wire::packet::{frame, read_packet};
use bytes::Buf;
use sluice_core::{Failure, Seen, Side};

/// Read size for responses.
const CHUNK: usize = 16 * 1024;

/// Where a relayed response goes.
pub enum Sink<'a> {
    /// To the client.
    Client(&'a mut ClientConn),
    /// Into a buffer (to be sent, or not, once the outcome is known).
    Buffer(&'a mut Vec<u8>),
    /// Nowhere.
    Discard,
}

impl Sink<'_> {
    /// The same sink, for another relay.
    pub fn reborrow(&mut self) -> Sink<'_> {
        match self {
            Sink::Client(c) => Sink::Client(c),
            Sink::Buffer(b) => Sink::Buffer(b),
            Sink::Discard => Sink::Discard,
        }
    }
}

/// Relays one response from `conn` into `sink`.
pub async fn relay(
    conn: &mut BackendConn,
    sink: Sink<'_>,
    mut scanner: Scanner,
) -> Result<Outcome, Failure> {
    let (client, buffer) = match sink {
        Sink::Client(c) => (Some(c), None),
        Sink::Buffer(b) => (None, Some(b)),
        Sink::Discard => (None, None),
    };
    let mut out = Out {
        client,
        buffer,
        pending: Vec::new(),
        forwarded_any: false,
    };
    let mut pos = 0usize;
    let mut fwd = 0usize;
    // LOCAL INFILE refused on the client's behalf: swallow the server's answer, then say why.
    let mut refused_infile: Option<u8> = None;
    loop {
        let step = scanner.step(&mut conn.rbuf[pos..]);
        match step {
            Step::Forward(n) => pos += n,
            Step::Replace(n, bytes) => {
                out.pending.extend_from_slice(&conn.rbuf[fwd..pos]);
                out.pending.extend_from_slice(&bytes);
                pos += n;
                fwd = pos;
            }
            Step::Infile(n) => {
                let seq = conn.rbuf[pos + 3];
                let allowed = out.client.as_ref().is_some_and(|c| c.has(cap::LOCAL_FILES));
                if allowed {
                    pos += n;
                    out.flush(conn, fwd, pos).await?;
                    out.forwarded_any = true;
                    conn.rbuf.advance(pos);
                    pos = 0;
                    fwd = 0;
                    let Some(c) = out.client.as_deref_mut() else {
                        // Allowed only when relaying to a client (checked above).
                        return Err(Failure::client(std::io::Error::other(
                            "LOCAL INFILE without a client",
                        )));
                    };
                    let next = pump_infile(c, conn).await?;
                    scanner.infile_done(next);
                } else {
                    // Do not show the request; answer the server with an empty file.
                    out.flush(conn, fwd, pos).await?;
                    conn.rbuf.advance(pos + n);
                    pos = 0;
                    fwd = 0;
                    refused_infile = Some(seq);
                    let mut empty = Vec::new();
                    frame(&mut empty, seq.wrapping_add(1), &[]);
                    conn.stream
                        .write_all_sent(&empty)
                        .await
                        .map_err(|e| backend_err(e, &scanner, false))?;
                    scanner.infile_done(seq.wrapping_add(2));
                }
            }
            Step::Malformed(what) => {
                // The packets before it were good: they go on; the rest is not forwarded.
                if refused_infile.is_none() {
                    out.pass_on(conn, fwd, pos).await?;
                }
                conn.rbuf.clear();
                let error = std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("sent a malformed response: {what}"),
                );
                return Err(backend_err(error, &scanner, out.forwarded_any));
            }
            Step::NeedMore | Step::Done => {
                let done = step == Step::Done;
                if refused_infile.is_none() {
                    out.pass_on(conn, fwd, pos).await?;
                }
                conn.rbuf.advance(pos);
                pos = 0;
                fwd = 0;
                if done {
                    if let (Some(seq), Some(c)) = (refused_infile, out.client.as_deref_mut()) {
                        c.send_err(
                            seq,
                            err::NOT_ALLOWED_COMMAND,
                            b"42000",
                            "The used command is not allowed because the client did not enable LOCAL INFILE",
                        )
                        .await
                        .map_err(Failure::client)?;
                    }
                    return Ok(scanner.out);
                }
                if conn.rbuf.capacity() - conn.rbuf.len() < CHUNK / 2 {
                    conn.rbuf.reserve(CHUNK);
                }
                match conn.read_more().await {
                    Ok(0) => {
                        return Err(backend_err(
                            std::io::ErrorKind::UnexpectedEof.into(),
                            &scanner,
                            out.forwarded_any,
                        ))
                    }
                    Ok(_) => {}
                    Err(e) => return Err(backend_err(e, &scanner, out.forwarded_any)),
                }
            }
        }
    }
}

/// The server's side failed (its connection broke, stayed silent too long — `TimedOut` — or
/// sent something that is not the protocol — `InvalidData`); what the client has seen decides
/// whether it can still be sent an ERR packet (between two packets) and whether its result
/// is incomplete.
fn backend_err(error: std::io::Error, scanner: &Scanner, forwarded_any: bool) -> Failure {
    let clean = !forwarded_any || scanner.at_error_point();
    Failure {
        side: Side::Server,
        server: None,
        error,
        seen: match (clean, forwarded_any) {
            (false, _) => Seen::MidMessage,
            (true, true) => Seen::Partial,
            (true, false) => Seen::Nothing,
        },
        next_seq: scanner.next_seq(),
    }
}

/// Where relayed bytes go, and what went.
struct Out<'a> {
    client: Option<&'a mut ClientConn>,
    buffer: Option<&'a mut Vec<u8>>,
    /// Bytes replacing part of the response (rewritten packets), not sent yet.
    pending: Vec<u8>,
    /// Part of the response was passed on already.
    forwarded_any: bool,
}

impl Out<'_> {
    /// Passes on `pending` and the read buffer's bytes `fwd..pos`, noting that something went.
    async fn pass_on(&mut self, conn: &BackendConn, fwd: usize, pos: usize) -> Result<(), Failure> {
        if pos > fwd || !self.pending.is_empty() {
            self.forwarded_any = true;
        }
        self.flush(conn, fwd, pos).await
    }

    /// Passes on `pending` and the read buffer's bytes `fwd..pos`.
    async fn flush(&mut self, conn: &BackendConn, fwd: usize, pos: usize) -> Result<(), Failure> {
        let pending = &mut self.pending;
        if let Some(b) = self.buffer.as_deref_mut() {
            if pending.is_empty() {
                b.extend_from_slice(&conn.rbuf[fwd..pos]);
            } else {
                b.extend_from_slice(pending);
                b.extend_from_slice(&conn.rbuf[fwd..pos]);
                pending.clear();
            }
            return Ok(());
        }
        let Some(c) = self.client.as_deref_mut() else {
            pending.clear();
            return Ok(());
        };
        let r = if pending.is_empty() {
            if pos == fwd {
                return Ok(());
            }
            c.stream.write_all_sent(&conn.rbuf[fwd..pos]).await
        } else {
            pending.extend_from_slice(&conn.rbuf[fwd..pos]);
            let r = c.stream.write_all_sent(pending).await;
            pending.clear();
            r
        };
        r.map_err(Failure::client)
    }
}

/// Copies LOCAL INFILE data packets from the client to the server, up to the empty packet;
/// returns the sequence id of the server's answer.
async fn pump_infile(client: &mut ClientConn, conn: &mut BackendConn) -> Result<u8, Failure> {
    let mut out = Vec::new();
    loop {
        let p = read_packet(
            &mut client.stream,
            &mut client.rbuf,
            client.max_packet.max(16 << 20),
        )
        .await
        .map_err(|e| Failure::client(std::io::Error::other(e.to_string())))?;
        out.clear();
        frame(&mut out, p.seq, &p.payload);
        conn.stream
            .write_all_sent(&out)
            .await
            .map_err(|e| Failure {
                side: Side::Server,
                server: None,
                error: e,
                seen: Seen::MidMessage,
                next_seq: 0,
            })?;
        if p.payload.is_empty() {
            return Ok(p.seq.wrapping_add(1));
        }
    }
}
