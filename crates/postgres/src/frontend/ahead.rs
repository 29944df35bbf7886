//! What sluice sends ahead of a lease's first unit, in the same write: `DISCARD SEQUENCES`
//! (see [`super::sequences`]) and the session's deferred `BEGIN`. Neither costs a round trip
//! of its own; their answers are read here, and what follows is the unit's.
//!
//! The `BEGIN` goes as Parse, Bind and Execute of the unnamed statement and portal, with no
//! Sync: if it fails, the server skips everything up to the next Sync, so the unit behind it
//! never runs outside the transaction the client was told it had opened (sluice then sends
//! the Sync the skipping waits for, reads to its ReadyForQuery, and the session ends as when
//! its connection is lost inside a transaction). A unit that is a simple query runs inside the
//! transaction the `BEGIN` opened, as if it had come after it on its own. Its answers come
//! with the unit's first ones, so only a unit after which the server answers without waiting
//! for more (a simple query, a batch ended by Sync or Flush) takes the `BEGIN` ahead.

use super::unit::End;
use crate::backend::PgConn;
use crate::wire::Writer;
use std::io;

/// The deferred `BEGIN` may go ahead of a unit that ends like this.
pub fn takes_begin(end: End) -> bool {
    matches!(end, End::Query | End::Sync | End::Flush)
}

/// Sends, in one write, `DISCARD SEQUENCES` if `discard`, the `BEGIN` of the simple query
/// `begin` if given, then `unit`; reads their answers. An error if the connection failed or
/// one of them did (the unit's outcome is then unknown, or, after a `BEGIN` that failed, it
/// never ran).
pub async fn send(
    conn: &mut PgConn,
    discard: bool,
    begin: Option<&[u8]>,
    unit: &[u8],
    end: End,
) -> io::Result<()> {
    // A buffer from the process's shelf, given back once sent.
    let mut w = Writer::with_buffer(sluice_runtime::buffers::write_buffer());
    if discard {
        w.bytes(super::sequences::DISCARD);
    }
    if let Some(begin) = begin {
        put_begin(&mut w, begin);
    }
    w.bytes(unit);
    let sent = conn.send(w.as_bytes()).await;
    sluice_runtime::buffers::give_write(w.into_bytes());
    sent?;
    if discard {
        let answered = super::lease::hidden_answers(conn, 1).await;
        // Its ReadyForQuery answered the discard, not what was sent after it.
        conn.unsynced = true;
        answered.map_err(|e| io::Error::other(format!("DISCARD SEQUENCES failed: {e}")))?;
    }
    if begin.is_some() {
        begun(conn, end).await?;
    }
    Ok(())
}

/// Parse, Bind and Execute of the simple query `begin`'s text (`Q`, length, text, NUL): the
/// unnamed statement and portal, no parameters.
fn put_begin(w: &mut Writer, begin: &[u8]) {
    // The text with its NUL, as the query message carries it.
    let text = begin.get(5..).unwrap_or_default();
    w.begin(b'P');
    w.cstr("");
    w.bytes(text);
    w.i16(0);
    w.end();
    w.begin(b'B');
    w.cstr("");
    w.cstr("");
    w.i16(0);
    w.i16(0);
    w.i16(0);
    w.end();
    w.begin(b'E');
    w.cstr("");
    w.i32(0);
    w.end();
}

/// Reads the `BEGIN`'s ParseComplete, BindComplete and CommandComplete. If an error comes
/// instead, the server is skipping to the next Sync: one is sent unless the unit ended with
/// its own, everything up to the ReadyForQuery is dropped, and the error returned.
async fn begun(conn: &mut PgConn, end: End) -> io::Result<()> {
    for want in [b'1', b'2', b'C'] {
        let (tag, body) = loop {
            let (tag, body) = conn.next_owned().await?;
            match tag {
                b'S' => conn.note_parameter(&body),
                b'N' => {}
                _ => break (tag, body),
            }
        };
        if tag == want {
            continue;
        }
        let message = crate::wire::error_message(&body)
            .unwrap_or_else(|| format!("unexpected message {:?}", tag as char));
        if tag == b'E' {
            if end != End::Sync {
                conn.send(crate::wire::SYNC).await?;
            }
            while conn.next_owned().await?.0 != b'Z' {}
        }
        return Err(io::Error::other(format!("BEGIN failed: {message}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_begin_goes_as_parse_bind_execute() {
        let mut q = Vec::new();
        crate::frontend::session::put_query(&mut q, b"BEGIN READ ONLY");
        let mut w = crate::wire::Writer::new();
        super::put_begin(&mut w, &q);
        let out = w.into_bytes();
        let mut at = 0;
        let mut seen = Vec::new();
        while let Some((m, len)) = crate::wire::read_message(&out[at..], 1 << 10).unwrap() {
            seen.push((m.tag, m.body.to_vec()));
            at += len;
        }
        assert_eq!(at, out.len());
        assert_eq!(
            seen,
            [
                (b'P', b"\0BEGIN READ ONLY\0\0\0".to_vec()),
                (b'B', vec![0; 8]),
                (b'E', vec![0; 5]),
            ]
        );
    }
}
