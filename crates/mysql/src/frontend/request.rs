//! Reading a client's request within the process-wide memory budget
//! (`[proxy] max_request_memory`).
//!
//! Small requests are read through the session's buffer as always. A larger one (its first
//! packet announces [`SMALL`] bytes or more) is assembled in a buffer of its own, sized exactly,
//! and charged to the budget as its bytes arrive — not as its header claims, so a client that
//! announces 64 MiB and sends nothing holds nothing. The charge lasts until the command is
//! done. A request the budget cannot hold is read to its end and thrown away, so the client
//! can be told why and go on: the budget protects the process; only the client that would
//! exceed it is refused.

use super::client::ClientConn;
use super::session::{Fatal, Session};
use super::stalled::Stalled;
use crate::wire::consts::err;
use crate::wire::consts::MAX_PAYLOAD;
use crate::wire::packet::{read_packet, Packet, ReadError};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use sluice_core::{Charge, MemoryBudget, OverBudget};
use sluice_runtime::tls::MaybeTls;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};

/// Requests below this size are not charged (each session may hold this much on its own).
pub const SMALL: usize = 16 * 1024;

/// Bytes read (and charged) at a time while a large request arrives.
const STEP: usize = 256 * 1024;

/// Why no request could be had.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The connection broke, closed, or the request exceeds `max_packet_size`.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The budget could not hold the request. It was read to its end and dropped: the client
    /// expects an answer with sequence id `next_seq`.
    #[error("{over}")]
    OverBudget {
        /// Why.
        over: OverBudget,
        /// Bytes of the request received before it was refused.
        received: usize,
        /// The sequence id of the answer.
        next_seq: u8,
    },
    /// The request exceeds `max_packet_size`. It was read to its end and dropped (never
    /// held): the client expects an answer with sequence id `next_seq`.
    #[error("Got a packet bigger than 'max_allowed_packet' bytes ({size} > {max})")]
    TooLarge {
        /// Its size, as far as it was counted.
        size: usize,
        /// `max_packet_size`.
        max: usize,
        /// The sequence id of the answer.
        next_seq: u8,
    },
}

impl ClientConn {
    /// Reads the next command (see [`ClientConn::read_command`]); a large one comes with its
    /// charge against `budget`, to be held until the command is done. Once it has begun to
    /// arrive, each further part must come within `stall_limit` (see [`Stalled`]).
    pub async fn read_request(
        &mut self,
        budget: &Arc<MemoryBudget>,
        stall_limit: Duration,
    ) -> Result<(Packet, Option<Charge>), RequestError> {
        if self.rbuf.is_empty() {
            // Like read_command: no buffer while waiting.
            self.release_buffers();
            self.stream.readable().await.map_err(ReadError::Io)?;
            self.take_buffers();
        }
        let begun = !self.rbuf.is_empty();
        let mut stream = Stalled::new(&mut self.stream, stall_limit, begun);
        read_budgeted(&mut stream, &mut self.rbuf, self.max_packet, budget).await
    }

    /// The next request if it is had without waiting: a whole small one (a single packet of
    /// less than [`SMALL`] bytes) already buffered, or readable now from a plain socket. The
    /// usual case, read without the future [`ClientConn::read_request`] makes (the session
    /// boxes that one, to keep an idle session small).
    pub fn request_now(&mut self) -> Now {
        if self.rbuf.is_empty() {
            // (Checked before the buffers are taken, then matched again once they are.)
            if !matches!(self.stream, MaybeTls::Plain(_)) {
                return Now::LongWay;
            }
            self.take_buffers();
            let MaybeTls::Plain(tcp) = &self.stream else {
                return Now::LongWay;
            };
            match tcp.try_read_buf(&mut self.rbuf) {
                Ok(n) if n > 0 => {}
                // The readiness was stale (a read that emptied the socket does not clear it):
                // the session waits again, holding no buffer.
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    self.release_buffers();
                    return Now::Nothing;
                }
                // The end of the stream or an error is met again, and reported, the long way.
                _ => return Now::LongWay,
            }
        }
        let b = &self.rbuf;
        let (Some(&l0), Some(&l1), Some(&l2), Some(&seq)) =
            (b.first(), b.get(1), b.get(2), b.get(3))
        else {
            return Now::LongWay;
        };
        let len = u32::from_le_bytes([l0, l1, l2, 0]) as usize;
        if len >= SMALL || len > self.max_packet || b.len() < 4 + len {
            return Now::LongWay;
        }
        // Shorter than a full payload: no packet continues it.
        self.rbuf.advance(4);
        Now::Request(Packet {
            seq,
            last_seq: seq,
            payload: self.rbuf.split_to(len),
        })
    }
}

/// What [`ClientConn::request_now`] found.
pub enum Now {
    /// A whole request.
    Request(Packet),
    /// Nothing to read after all: wait for the client again.
    Nothing,
    /// Part of a request, a large one, or a stream read only through its future: read it the
    /// long way (what was read is in the buffer).
    LongWay,
}

impl Session {
    /// Reads the client's next command. A KILL also ends a read the client leaves unfinished
    /// (a packet cut short by a slow or hostile client, or readiness that was stale). Biased:
    /// a command already there is read without the kill signal being registered.
    pub(crate) async fn read_next(
        &mut self,
    ) -> Result<Result<(Packet, Option<Charge>), RequestError>, Fatal> {
        let stall_limit = self.proxy.rt.effective.load().mysql.net_read_timeout.get();
        tokio::select! {
            biased;
            r = self.client.read_request(&self.proxy.rt.request_memory, stall_limit) => Ok(r),
            _ = self.handle.wait_killed() => Err(Fatal("killed".into())),
        }
    }

    /// Answers a request over `max_packet_size` with error 1153 (sequence id `seq`); the
    /// session ends, closing gently: the client may still be sending it.
    pub(crate) async fn refuse_too_large(&mut self, size: usize, max: usize, seq: u8) -> Fatal {
        let e = RequestError::TooLarge {
            size,
            max,
            next_seq: seq,
        };
        let msg = e.to_string();
        let _ = self
            .client
            .send_err(seq, err::PACKET_TOO_LARGE, b"08S01", &msg)
            .await;
        self.close_gently = true;
        Fatal(msg)
    }

    /// Tells the client its request did not fit in the budget (it was read to its end and
    /// dropped: the session goes on).
    pub(crate) async fn refuse_over_budget(
        &mut self,
        over: OverBudget,
        received: usize,
        seq: u8,
    ) -> Result<(), Fatal> {
        tracing::warn!(
            session = self.id,
            peer = %self.handle.peer,
            received,
            in_use = over.used,
            limit = over.limit,
            "request refused: max_request_memory exhausted"
        );
        let msg = format!(
            "sluice: out of memory for requests: this request was refused after {received} bytes because the requests of all clients may hold at most {} bytes ([proxy] max_request_memory) and {} are in use; retry later",
            over.limit, over.used
        );
        Ok(self
            .client
            .send_err(seq, err::OUT_OF_RESOURCES, b"HY000", &msg)
            .await?)
    }
}

/// Reads one logical packet of at most `max` bytes from `stream` through `buf`; one of
/// [`SMALL`] bytes or more is charged to `budget` as it arrives.
pub async fn read_budgeted<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
    max: usize,
    budget: &Arc<MemoryBudget>,
) -> Result<(Packet, Option<Charge>), RequestError> {
    let Some((len, seq)) = peek_header(stream, buf).await? else {
        return Err(ReadError::Closed.into());
    };
    if len < SMALL {
        return Ok((read_packet(stream, buf, max).await?, None));
    }
    if len > max {
        buf.advance(4);
        let last = skip_rest(stream, buf, len, len, seq).await?;
        return Err(RequestError::TooLarge {
            size: len,
            max,
            next_seq: last.wrapping_add(1),
        });
    }
    buf.advance(4);
    let mut charge = budget.charge();
    let mut payload: Vec<u8> = Vec::new();
    let (mut last_seq, mut fragment) = (seq, len);
    loop {
        // Exactly the room this fragment needs: the buffer never holds spare capacity that
        // could be touched (and become resident) without being charged.
        payload.reserve_exact(fragment);
        let end = payload.len() + fragment;
        while payload.len() < end {
            let step = (end - payload.len()).min(STEP);
            if let Err(over) = charge.cover(payload.len() + step) {
                let received = payload.len();
                drop(payload);
                drop(charge);
                let last = skip_rest(stream, buf, end - received, fragment, last_seq).await?;
                return Err(RequestError::OverBudget {
                    over,
                    received,
                    next_seq: last.wrapping_add(1),
                });
            }
            take(stream, buf, &mut payload, step).await?;
        }
        if fragment < MAX_PAYLOAD {
            break;
        }
        let (next, s) = read_next_header(stream, buf).await?;
        if payload.len() + next > max {
            let size = payload.len() + next;
            drop(payload);
            drop(charge);
            let last = skip_rest(stream, buf, next, next, s).await?;
            return Err(RequestError::TooLarge {
                size,
                max,
                next_seq: last.wrapping_add(1),
            });
        }
        (fragment, last_seq) = (next, s);
    }
    // Exactly sized, so this hands the allocation over without copying it.
    let payload = BytesMut::from(Bytes::from(payload));
    Ok((
        Packet {
            seq,
            last_seq,
            payload,
        },
        Some(charge),
    ))
}

/// The length and sequence id of the next packet, left in `buf`; `None` if the peer closed
/// cleanly before it.
async fn peek_header<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
) -> Result<Option<(usize, u8)>, ReadError> {
    while buf.len() < 4 {
        if buf.capacity() - buf.len() < 64 {
            buf.reserve(4096);
        }
        if stream.read_buf(buf).await? == 0 {
            if buf.is_empty() {
                return Ok(None);
            }
            return Err(ReadError::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
    }
    let len = u32::from_le_bytes([buf[0], buf[1], buf[2], 0]) as usize;
    Ok(Some((len, buf[3])))
}

/// The header of a continuation packet, consumed.
async fn read_next_header<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
) -> Result<(usize, u8), ReadError> {
    let (len, seq) = peek_header(stream, buf)
        .await?
        .ok_or(ReadError::Io(std::io::ErrorKind::UnexpectedEof.into()))?;
    buf.advance(4);
    Ok((len, seq))
}

/// Appends `n` bytes of the stream to `out`: first those already in `buf`, then straight from
/// the socket (never reading past them).
async fn take<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
    out: &mut Vec<u8>,
    n: usize,
) -> Result<(), ReadError> {
    let from_buf = n.min(buf.len());
    out.extend_from_slice(&buf[..from_buf]);
    buf.advance(from_buf);
    let mut left = n - from_buf;
    while left > 0 {
        let mut room = (&mut *out).limit(left);
        let got = stream.read_buf(&mut room).await?;
        if got == 0 {
            return Err(ReadError::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
        left -= got;
    }
    Ok(())
}

/// Reads and drops the rest of a request: `left` bytes of the current fragment (of length
/// `fragment`, sequence id `seq`), then any packets continuing it. Returns the last sequence
/// id.
async fn skip_rest<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
    mut left: usize,
    mut fragment: usize,
    mut seq: u8,
) -> Result<u8, ReadError> {
    let mut scratch = vec![0u8; 64 * 1024];
    loop {
        while left > 0 {
            if !buf.is_empty() {
                let n = left.min(buf.len());
                buf.advance(n);
                left -= n;
                continue;
            }
            let want = left.min(scratch.len());
            let got = stream.read(&mut scratch[..want]).await?;
            if got == 0 {
                return Err(ReadError::Io(std::io::ErrorKind::UnexpectedEof.into()));
            }
            left -= got;
        }
        if fragment < MAX_PAYLOAD {
            return Ok(seq);
        }
        (fragment, seq) = read_next_header(stream, buf).await?;
        left = fragment;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::packet::frame;

    fn wire(sizes: &[usize]) -> Vec<u8> {
        let mut w = Vec::new();
        for &n in sizes {
            let payload: Vec<u8> = (0..n).map(|i| (i % 253) as u8).collect();
            frame(&mut w, 0, &payload);
        }
        w
    }

    #[tokio::test]
    async fn large_requests_are_charged_and_small_ones_are_not() {
        let budget = MemoryBudget::new(64 << 20);
        let sizes = [10, SMALL + 5, MAX_PAYLOAD + 100, 3];
        let w = wire(&sizes);
        let mut r = &w[..];
        let mut buf = BytesMut::with_capacity(4096);
        for &n in &sizes {
            let (p, charge) = read_budgeted(&mut r, &mut buf, 32 << 20, &budget)
                .await
                .unwrap();
            assert_eq!(p.payload.len(), n);
            assert!(p
                .payload
                .iter()
                .enumerate()
                .all(|(i, &b)| b == (i % 253) as u8));
            assert_eq!(p.seq, 0);
            assert_eq!(p.last_seq as usize, n / MAX_PAYLOAD);
            match charge {
                Some(c) => {
                    assert!(n >= SMALL);
                    assert_eq!(c.bytes(), n);
                    assert_eq!(budget.used(), n);
                    // Sized exactly: nothing was allocated beyond what was charged.
                    assert_eq!(p.payload.capacity(), n);
                }
                None => assert!(n < SMALL),
            }
            assert_eq!(budget.used(), 0);
        }
        assert!(matches!(
            read_budgeted(&mut r, &mut buf, 1 << 20, &budget).await,
            Err(RequestError::Read(ReadError::Closed))
        ));
    }

    #[test]
    fn an_exactly_sized_vec_becomes_a_payload_without_a_copy() {
        let mut v = Vec::with_capacity(1000);
        v.resize(1000, 7u8);
        let at = v.as_ptr();
        let b = BytesMut::from(Bytes::from(v));
        assert_eq!(b.as_ptr(), at);
    }

    #[tokio::test]
    async fn over_budget_requests_are_skipped_and_the_next_one_is_read() {
        let budget = MemoryBudget::new(1 << 20);
        let held = {
            let mut c = budget.charge();
            c.grow(512 << 10).unwrap();
            c
        };
        let w = wire(&[MAX_PAYLOAD + 10, 7]);
        let mut r = &w[..];
        let mut buf = BytesMut::new();
        match read_budgeted(&mut r, &mut buf, 64 << 20, &budget).await {
            Err(RequestError::OverBudget {
                over,
                received,
                next_seq,
            }) => {
                assert_eq!(over.limit, 1 << 20);
                assert!(received <= 512 << 10, "{received}");
                assert_eq!(next_seq, 2);
            }
            other => panic!("expected over budget, got {other:?}"),
        }
        assert_eq!(budget.used(), 512 << 10);
        let (p, c) = read_budgeted(&mut r, &mut buf, 64 << 20, &budget)
            .await
            .unwrap();
        assert_eq!((p.payload.len(), c.is_none()), (7, true));
        drop(held);
        assert_eq!(budget.used(), 0);
        // Larger than max_packet_size: refused by its header, read to its end and dropped,
        // answered after its last packet (a request of several packets, here three).
        let w = wire(&[SMALL * 4]);
        assert!(matches!(
            read_budgeted(&mut &w[..], &mut BytesMut::new(), SMALL, &budget).await,
            Err(RequestError::TooLarge { next_seq: 1, .. })
        ));
        let mut w = Vec::new();
        let payload = vec![7u8; 2 * MAX_PAYLOAD + 3];
        frame(&mut w, 0, &payload);
        w.extend_from_slice(&wire(&[7]));
        let mut r = &w[..];
        let mut buf = BytesMut::new();
        match read_budgeted(&mut r, &mut buf, SMALL, &budget).await {
            Err(RequestError::TooLarge { size, next_seq, .. }) => {
                assert_eq!((size, next_seq), (MAX_PAYLOAD, 3));
            }
            other => panic!("expected too large, got {other:?}"),
        }
        let (p, _) = read_budgeted(&mut r, &mut buf, 64 << 20, &budget)
            .await
            .unwrap();
        assert_eq!(p.payload.len(), 7, "the next request is read whole");
        assert_eq!(budget.used(), 0);
    }
}

#[cfg(test)]
mod now_tests {
    use super::*;
    use crate::wire::packet::frame;
    use tokio::io::AsyncWriteExt;

    /// A whole small command is read at once; a readiness with nothing behind it sends the
    /// session back to wait holding no buffer (waiting inside the long way's future would keep
    /// that future, and the buffers, while the client is idle); part of a command, or a large
    /// one, goes the long way with what was read kept.
    #[tokio::test]
    async fn a_command_there_is_read_at_once_and_nothing_there_holds_nothing() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let mut conn = ClientConn::new(server, 1 << 20);

        let mut w = Vec::new();
        frame(&mut w, 0, b"\x03SELECT 1");
        client.write_all(&w).await.unwrap();
        conn.stream.readable().await.unwrap();
        let Now::Request(p) = conn.request_now() else {
            panic!("a whole command is read at once");
        };
        assert_eq!(
            (&p.payload[..], p.seq, p.last_seq),
            (&b"\x03SELECT 1"[..], 0, 0)
        );
        drop(p);
        // The socket is empty, whatever its readiness says.
        assert!(matches!(conn.request_now(), Now::Nothing));
        assert_eq!((conn.rbuf.capacity(), conn.wbuf.capacity()), (0, 0));

        // Half a command: the long way, with the half kept.
        client.write_all(&w[..6]).await.unwrap();
        conn.stream.readable().await.unwrap();
        assert!(matches!(conn.request_now(), Now::LongWay));
        assert_eq!(&conn.rbuf[..], &w[..6]);
        client.write_all(&w[6..]).await.unwrap();
        let budget = MemoryBudget::new(1 << 20);
        let (p, charge) = conn
            .read_request(&budget, Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(&p.payload[..], b"\x03SELECT 1");
        assert!(charge.is_none());

        // A large command (SMALL bytes or more): the long way, charged to the budget.
        let mut big = Vec::new();
        frame(&mut big, 0, &vec![b'x'; SMALL]);
        client.write_all(&big).await.unwrap();
        conn.stream.readable().await.unwrap();
        assert!(matches!(conn.request_now(), Now::LongWay));
        let (p, charge) = conn
            .read_request(&budget, Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(p.payload.len(), SMALL);
        assert!(charge.is_some());
    }
}
