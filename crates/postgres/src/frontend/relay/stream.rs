//! A large DataRow or CopyData passed on as it arrives: what is gathered before it goes to
//! the client first, then its bytes as the server sends them, so that the connection's
//! buffer holds a read's worth of it and never the whole message. A client that reads slowly
//! (or not at all) holds the server back, not sluice's memory: without this, each session
//! held its largest row whole (sixteen clients not reading a 60 MB value each took 1.2 GB),
//! charged to no budget. Such messages need no look inside (the relay only counts rows), so
//! none is over the size limit the relay puts on the messages it reads whole.

use super::{wait, Out, RelayError};
use crate::backend::PgConn;
use crate::frontend::client::Client;

/// Messages of at least this many bytes are streamed.
pub(super) const STREAM_AT: usize = 256 * 1024;

/// The type and length of the message at `at` in `buf` if it has one of `tags` and at least
/// [`STREAM_AT`] bytes (its header is there): to be passed on by [`stream_large`]. Cheap:
/// the relay asks before every message it has not read whole.
pub(super) fn large_at(buf: &[u8], at: usize, tags: &[u8]) -> Option<(u8, usize)> {
    let &[tag, l0, l1, l2, l3] = buf.get(at..at + 5)? else {
        return None;
    };
    let len = u32::from_be_bytes([l0, l1, l2, l3]) as usize;
    // (Over what the protocol's length can say, it is the relay's to refuse.)
    (tags.contains(&tag) && (STREAM_AT..=i32::MAX as usize).contains(&len)).then_some((tag, len))
}

/// Passes the message at the front of what is not passed on yet (`out.run`), of the type
/// and length [`large_at`] found (`message`), to the client as it arrives (see the module);
/// the rows it was (1 for a DataRow, 0 for CopyData).
pub(super) async fn stream_large(
    conn: &mut PgConn,
    client: &mut Client,
    out: &mut Out,
    (tag, len): (u8, usize),
) -> Result<u64, RelayError> {
    // What comes before it first: the message is then at the front of the buffer.
    out.flush(conn, client).await?;
    let mut left = 1 + len;
    loop {
        let n = left.min(conn.buffered().len());
        if n > 0 {
            out.sent = true;
            client
                .send(&conn.buffered()[..n])
                .await
                .map_err(RelayError::Client)?;
            conn.consume(n);
            left -= n;
        }
        if left == 0 {
            return Ok(u64::from(tag == b'D'));
        }
        wait(conn, client, false).await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(tag: u8, len: u32) -> Vec<u8> {
        let mut h = vec![tag];
        h.extend_from_slice(&len.to_be_bytes());
        h
    }

    #[test]
    fn only_large_rows_and_copy_data_are_streamed() {
        let big = STREAM_AT as u32;
        assert!(large_at(&head(b'D', big), 0, b"Dd").is_some());
        assert!(large_at(&head(b'd', big), 0, b"Dd").is_some());
        assert!(large_at(&head(b'd', big), 0, b"D").is_none());
        assert!(large_at(&[vec![0; 3], head(b'D', big)].concat(), 3, b"D").is_some());
        // Smaller, another type, a header not whole yet, a length no protocol message has.
        assert!(large_at(&head(b'D', big - 1), 0, b"Dd").is_none());
        assert!(large_at(&head(b'N', big), 0, b"Dd").is_none());
        assert!(large_at(&head(b'D', big)[..4], 0, b"Dd").is_none());
        assert!(large_at(&head(b'D', u32::MAX), 0, b"Dd").is_none());
        assert!(large_at(&head(b'D', i32::MAX as u32), 0, b"Dd").is_some());
    }
}
