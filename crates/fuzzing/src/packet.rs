//! Target `packet`: the packet codec. Input: `[limit selector][chunk seed][big fragments]
//! [stream...]`, where the stream is what a peer sends (client or server bytes).
//!
//! Logical packets are read with `read_packet` through a reader that hands the bytes over in
//! the pieces the chunk seed says, and compared with a simple reference framer. The reader
//! also checks that the buffer never offers much more room than the bytes delivered so far
//! (a length field alone must not make the proxy reserve memory). Each payload then goes
//! through the OK / ERR / EOF decoders with an encode round trip, and through the
//! session-state decoders.
//!
//! Split packets need 16 MiB fragments, too big to find by mutation: a third byte of 0xB1 or
//! 0xB2 puts one or two whole 16 MiB - 1 fragments before the stream.

use crate::chunks::Chunks;
use bytes::BytesMut;
use sluice_mysql::state::TrackedState;
use sluice_mysql::wire::consts::MAX_PAYLOAD;
use sluice_mysql::wire::ok::{
    parse_eof, parse_err, parse_ok, state_changes, write_eof, write_err, write_ok,
};
use sluice_mysql::wire::packet::{frame, read_packet, ReadError};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};

/// The limits tried (`read_packet`'s `max`): tiny, the handshake's, around one fragment, and
/// the backend's 1 GiB.
const LIMITS: [usize; 8] = [
    0,
    1,
    100,
    4096,
    MAX_PAYLOAD - 1,
    MAX_PAYLOAD,
    MAX_PAYLOAD + 1000,
    1 << 30,
];

/// Room a buffer may offer beyond what the data justifies: read-ahead and rounding.
const SLACK: usize = 256 * 1024;

/// Logical packets read from one input at most.
const MAX_PACKETS: usize = 64;

/// The harness body.
pub fn run(data: &[u8]) {
    let [limit, seed, bigs, rest @ ..] = data else {
        return;
    };
    let max = LIMITS[*limit as usize % LIMITS.len()];
    let bigs = match bigs {
        0xb1 => 1,
        0xb2 => 2,
        _ => 0,
    };
    let mut stream = Vec::with_capacity(bigs * (MAX_PAYLOAD + 4) + rest.len());
    for i in 0..bigs {
        stream.extend_from_slice(&[0xff, 0xff, 0xff, i as u8]);
        stream.resize(stream.len() + MAX_PAYLOAD, b'x');
    }
    stream.extend_from_slice(rest);
    framing(&stream, max, *seed);
}

fn framing(stream: &[u8], max: usize, seed: u8) {
    let mut reader = ChunkedReader {
        data: stream,
        pos: 0,
        chunks: Chunks::new(seed),
    };
    let mut reference = Reference {
        data: stream,
        pos: 0,
    };
    let mut buf = BytesMut::new();
    for _ in 0..MAX_PACKETS {
        let got = block_on(read_packet(&mut reader, &mut buf, max));
        let want = reference.next(max);
        match (got, want) {
            (Ok(p), Ok((seq, last_seq, payload))) => {
                assert_eq!((p.seq, p.last_seq), (seq, last_seq), "sequence ids");
                assert!(p.payload[..] == payload[..], "payload differs");
                assert!(p.payload.len() <= max, "packet over the limit");
                // What was read ahead is exactly what follows the packet.
                let ahead = reader.pos - reference.pos;
                assert!(buf[..] == stream[reference.pos..reference.pos + ahead]);
                payload_round_trips(&p.payload);
                reframe(&p.payload, seq);
            }
            (Err(ReadError::Closed), Err(Want::Closed)) => return,
            (Err(ReadError::Io(_)), Err(Want::Eof)) => return,
            (Err(ReadError::TooLarge { size, max: m }), Err(Want::TooLarge(s))) => {
                assert_eq!((size, m), (s, max), "reported size");
                return;
            }
            (got, want) => panic!(
                "read_packet gave {:?}, the reference {:?}",
                got.map(|p| p.payload.len()),
                want.map(|w| w.2.len())
            ),
        }
    }
}

/// A reader that always has its bytes ready, handed over in pieces.
struct ChunkedReader<'a> {
    data: &'a [u8],
    pos: usize,
    chunks: Chunks,
}

impl AsyncRead for ChunkedReader<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        // Everything ever delivered may legitimately sit in the buffer; a length field that
        // has not been backed by bytes may not.
        let room = buf.remaining();
        let bound = 4 * self.pos + SLACK;
        assert!(
            room <= bound,
            "{room} bytes reserved after {} bytes arrived",
            self.pos
        );
        let left = self.data.len() - self.pos;
        let n = self.chunks.next(left).min(room);
        let at = self.pos;
        buf.put_slice(&self.data[at..at + n]);
        self.pos += n;
        Poll::Ready(Ok(()))
    }
}

/// Polls a future whose I/O is always ready.
fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = Context::from_waker(std::task::Waker::noop());
    match f.as_mut().poll(&mut cx) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("pending on a reader that is always ready"),
    }
}

#[derive(Debug)]
enum Want {
    Closed,
    Eof,
    TooLarge(usize),
}

/// Framing written as plainly as possible, over the whole stream.
struct Reference<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Reference<'_> {
    fn header(&mut self) -> Result<(usize, u8), Want> {
        let h = self.data.get(self.pos..self.pos + 4).ok_or(Want::Eof)?;
        self.pos += 4;
        Ok((
            usize::from(h[0]) | usize::from(h[1]) << 8 | usize::from(h[2]) << 16,
            h[3],
        ))
    }

    fn body(&mut self, len: usize) -> Result<&[u8], Want> {
        let b = self.data.get(self.pos..self.pos + len).ok_or(Want::Eof)?;
        self.pos += len;
        Ok(b)
    }

    fn next(&mut self, max: usize) -> Result<(u8, u8, Vec<u8>), Want> {
        if self.pos == self.data.len() {
            return Err(Want::Closed);
        }
        let (len, seq) = self.header()?;
        if len > max {
            return Err(Want::TooLarge(len));
        }
        let mut payload = self.body(len)?.to_vec();
        let (mut last, mut frag) = (seq, len);
        while frag == MAX_PAYLOAD {
            let (l, s) = self.header()?;
            if payload.len() + l > max {
                return Err(Want::TooLarge(payload.len() + l));
            }
            payload.extend_from_slice(self.body(l)?);
            (last, frag) = (s, l);
        }
        Ok((seq, last, payload))
    }
}

/// Framing a payload again and reading it back gives the same payload.
fn reframe(payload: &[u8], seq: u8) {
    let mut wire = Vec::new();
    frame(&mut wire, seq, payload);
    let mut reader = ChunkedReader {
        data: &wire,
        pos: 0,
        chunks: Chunks::new(0),
    };
    let mut buf = BytesMut::new();
    let p = block_on(read_packet(&mut reader, &mut buf, usize::MAX)).expect("own framing");
    assert!(p.payload[..] == payload[..] && p.seq == seq && buf.is_empty());
}

/// OK / ERR / EOF: what decodes, encodes to something that decodes the same.
fn payload_round_trips(payload: &[u8]) {
    if let Some(ok) = parse_ok(payload) {
        let header = payload[0];
        let mut wire = Vec::new();
        write_ok(&mut wire, 1, &ok, header, true);
        assert_eq!(parse_ok(&wire[4..]), Some(ok), "OK round trip");
        wire.clear();
        write_ok(&mut wire, 1, &ok, header, false);
        let plain = parse_ok(&wire[4..]).expect("stripped OK decodes");
        assert_eq!(
            plain.status,
            ok.status & !sluice_mysql::wire::status::SESSION_STATE_CHANGED
        );
        assert!(plain.session_state.is_empty() && plain.info == ok.info);
        session_state(ok.session_state);
    }
    if let Some(e) = parse_err(payload) {
        if let Ok(msg) = std::str::from_utf8(e.message) {
            if msg.len() < 512 {
                let mut wire = Vec::new();
                write_err(&mut wire, 1, e.code, &e.sqlstate, msg);
                assert_eq!(parse_err(&wire[4..]), Some(e), "ERR round trip");
            }
        }
    }
    if let Some(eof) = parse_eof(payload) {
        let mut wire = Vec::new();
        write_eof(&mut wire, 1, eof.warnings, eof.status);
        assert_eq!(parse_eof(&wire[4..]), Some(eof), "EOF round trip");
    }
    // The payload itself as session-state data, as a scanner would collect it.
    session_state(payload);
}

/// Session-state entries: the iteration ends, and applying them never fails.
fn session_state(data: &[u8]) {
    // Each entry takes at least two bytes (type and length).
    assert!(state_changes(data).count() <= data.len() / 2);
    let mut tracked = TrackedState::default();
    tracked.apply(data);
}
