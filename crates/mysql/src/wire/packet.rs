//! Packet framing: a 3-byte length, a sequence id, then the payload. Payloads of 16 MiB - 1
//! bytes continue in the next packet.

use super::consts::MAX_PAYLOAD;
use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// A logical packet: the payload of one or more physical packets.
#[derive(Debug)]
pub struct Packet {
    /// Sequence id of the first physical packet.
    pub seq: u8,
    /// Sequence id of the last physical packet (equal to `seq` unless the packet was split).
    pub last_seq: u8,
    /// The joined payload.
    pub payload: BytesMut,
}

/// Why a packet could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The peer closed the connection cleanly between packets.
    #[error("connection closed")]
    Closed,
    /// The connection broke or closed in the middle of a packet.
    #[error("connection error: {0}")]
    Io(#[from] std::io::Error),
    /// The logical packet is larger than allowed.
    #[error("packet of {size} bytes exceeds the {max}-byte limit")]
    TooLarge {
        /// Bytes announced so far.
        size: usize,
        /// The limit.
        max: usize,
    },
}

/// Reads one logical packet from `stream`, buffering through `buf`. A packet larger than
/// `max` bytes fails with [`ReadError::TooLarge`] before it is buffered whole.
pub async fn read_packet<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
    max: usize,
) -> Result<Packet, ReadError> {
    let (seq, len) = read_header(stream, buf, true).await?;
    if len > max {
        return Err(ReadError::TooLarge { size: len, max });
    }
    fill(stream, buf, len).await?;
    let mut payload = buf.split_to(len);
    let mut last_seq = seq;
    let mut frag_len = len;
    while frag_len == MAX_PAYLOAD {
        let (s, l) = read_header(stream, buf, false).await?;
        if payload.len() + l > max {
            return Err(ReadError::TooLarge {
                size: payload.len() + l,
                max,
            });
        }
        fill(stream, buf, l).await?;
        payload.extend_from_slice(&buf[..l]);
        buf.advance(l);
        last_seq = s;
        frag_len = l;
    }
    Ok(Packet {
        seq,
        last_seq,
        payload,
    })
}

async fn read_header<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
    first: bool,
) -> Result<(u8, usize), ReadError> {
    while buf.len() < 4 {
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(4096);
        }
        let n = stream.read_buf(buf).await?;
        if n == 0 {
            return Err(if first && buf.is_empty() {
                ReadError::Closed
            } else {
                ReadError::Io(std::io::ErrorKind::UnexpectedEof.into())
            });
        }
    }
    let len = u32::from_le_bytes([buf[0], buf[1], buf[2], 0]) as usize;
    let seq = buf[3];
    buf.advance(4);
    Ok((seq, len))
}

/// Room reserved at least when a packet body does not fit the buffer yet.
const GROW_MIN: usize = 64 * 1024;

async fn fill<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
    len: usize,
) -> Result<(), ReadError> {
    while buf.len() < len {
        // The buffer grows with the bytes that arrived (doubling), never ahead of them on the
        // strength of a length field alone: a peer announcing 16 MiB and sending nothing more
        // must not make the proxy reserve 16 MiB.
        let step = (len - buf.len()).min(buf.len().max(GROW_MIN));
        if buf.capacity() - buf.len() < step {
            buf.reserve(step);
        }
        let n = stream.read_buf(buf).await?;
        if n == 0 {
            return Err(ReadError::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
    }
    Ok(())
}

/// Appends `payload` to `out` as one logical packet starting at sequence id `seq`, split into
/// 16 MiB physical packets as needed. Returns the next sequence id.
pub fn frame(out: &mut Vec<u8>, mut seq: u8, payload: &[u8]) -> u8 {
    let mut rest = payload;
    loop {
        let n = rest.len().min(MAX_PAYLOAD);
        out.extend_from_slice(&(n as u32).to_le_bytes()[..3]);
        out.push(seq);
        out.extend_from_slice(&rest[..n]);
        seq = seq.wrapping_add(1);
        rest = &rest[n..];
        if n < MAX_PAYLOAD {
            return seq;
        }
    }
}

/// Starts a packet in `out` whose payload will be appended by the caller; finish it with
/// [`end_packet`]. Only for payloads below 16 MiB.
pub fn begin_packet(out: &mut Vec<u8>, seq: u8) -> usize {
    let at = out.len();
    out.extend_from_slice(&[0, 0, 0, seq]);
    at
}

/// Writes the length of a packet started with [`begin_packet`].
pub fn end_packet(out: &mut [u8], at: usize) {
    let len = out.len() - at - 4;
    debug_assert!(len < MAX_PAYLOAD);
    out[at..at + 3].copy_from_slice(&(len as u32).to_le_bytes()[..3]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn split_packets_round_trip() {
        for size in [
            0usize,
            10,
            MAX_PAYLOAD - 1,
            MAX_PAYLOAD,
            MAX_PAYLOAD + 5,
            2 * MAX_PAYLOAD,
        ] {
            let payload: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
            let mut wire = Vec::new();
            let next = frame(&mut wire, 3, &payload);
            let expected_packets = size / MAX_PAYLOAD + 1;
            assert_eq!(next, 3 + expected_packets as u8, "size {size}");
            let mut buf = BytesMut::new();
            let mut r = &wire[..];
            let p = read_packet(&mut r, &mut buf, usize::MAX).await.unwrap();
            assert_eq!(p.seq, 3);
            assert_eq!(p.last_seq, 3 + expected_packets as u8 - 1);
            assert!(p.payload[..] == payload[..], "size {size}");
            assert!(buf.is_empty());
        }
    }

    /// Found by fuzzing (target `packet`): a bare header announcing 3 MiB made the reader
    /// reserve 3 MiB before any of it arrived.
    #[tokio::test]
    async fn a_length_field_alone_reserves_no_memory() {
        let (mut client, mut server) = tokio::io::duplex(64);
        tokio::io::AsyncWriteExt::write_all(&mut client, b"0000")
            .await
            .unwrap();
        let mut buf = BytesMut::new();
        let read = read_packet(&mut server, &mut buf, 1 << 30);
        // The body never comes: the read stays pending, holding what it reserved.
        let pending = tokio::time::timeout(std::time::Duration::from_millis(50), read).await;
        assert!(pending.is_err());
        assert!(
            buf.capacity() <= 2 * GROW_MIN,
            "reserved {}",
            buf.capacity()
        );
    }

    #[tokio::test]
    async fn limits_and_truncation() {
        let mut wire = Vec::new();
        frame(&mut wire, 0, &[7u8; 100]);
        let mut buf = BytesMut::new();
        let err = read_packet(&mut &wire[..], &mut buf, 50).await.unwrap_err();
        assert!(matches!(err, ReadError::TooLarge { size: 100, max: 50 }));
        let mut buf = BytesMut::new();
        let err = read_packet(&mut &wire[..50], &mut buf, 1000)
            .await
            .unwrap_err();
        assert!(matches!(err, ReadError::Io(_)));
        let mut buf = BytesMut::new();
        let err = read_packet(&mut &b""[..], &mut buf, 1000)
            .await
            .unwrap_err();
        assert!(matches!(err, ReadError::Closed));
    }
}
