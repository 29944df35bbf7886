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

use super::begin::DeferredBegin;
use super::client::Client;
use super::relay::RelayError;
use super::unit::End;
use crate::backend::PgConn;
use crate::wire::Writer;
use std::io;

/// The deferred `BEGIN` may go ahead of a unit that ends like this.
pub fn takes_begin(end: End) -> bool {
    matches!(end, End::Query | End::Sync | End::Flush)
}

/// Sends, in one write, `DISCARD SEQUENCES` if `discard`, the held `BEGIN` if given, then
/// `unit`; reads the discard's answer (the `BEGIN`'s come with the unit's: [`begun`] reads
/// them). An error if the connection failed or the discard did.
pub async fn send(
    conn: &mut PgConn,
    discard: bool,
    begin: Option<&DeferredBegin>,
    unit: &[u8],
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
    Ok(())
}

/// Parse, Bind and Execute of each statement of the held `BEGIN` (the `BEGIN`, and the `SET
/// TRANSACTION`s sluice answered after it): the unnamed statement and portal, no parameters.
fn put_begin(w: &mut Writer, begin: &DeferredBegin) {
    let text = begin.text();
    if begin.statements == 1 {
        return put_statement(w, text);
    }
    for (s, e) in sluice_sqlscan::postgres::statements(text) {
        put_statement(w, &text[s..e]);
    }
}

fn put_statement(w: &mut Writer, text: &[u8]) {
    w.begin(b'P');
    w.cstr("");
    w.bytes(text);
    w.bytes(b"\0");
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
/// Reads the answers to the `BEGIN` [`send`] put ahead of a unit, the client watched
/// meanwhile: they come only with the unit's first (a long statement's, when it ends), and a
/// client that leaves before then ends the wait (its statement is then cancelled). An error
/// if the connection failed, the client left, or the `BEGIN` failed (the unit never ran).
pub async fn begun(
    conn: &mut PgConn,
    client: &mut Client,
    end: End,
    begin: &DeferredBegin,
) -> Result<(), RelayError> {
    let failed = |e: String| RelayError::Server(io::Error::other(e));
    let answers = usize::from(begin.statements) * 3;
    for want in [b'1', b'2', b'C'].into_iter().cycle().take(answers) {
        let (tag, body) = loop {
            let (tag, body) = next_watching(conn, client).await?;
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
                conn.send(crate::wire::SYNC)
                    .await
                    .map_err(RelayError::Server)?;
            }
            while conn.next_owned().await.map_err(RelayError::Server)?.0 != b'Z' {}
        }
        return Err(failed(format!("BEGIN failed: {message}")));
    }
    Ok(())
}

/// The server's next message, reading the client ahead while it waits (see
/// [`super::relay`]).
async fn next_watching(
    conn: &mut PgConn,
    client: &mut Client,
) -> Result<(u8, Vec<u8>), RelayError> {
    loop {
        match conn.take_owned().map_err(RelayError::Server)? {
            Some(m) => return Ok(m),
            None => super::relay::wait(conn, client, false).await?,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::frontend::begin::DeferredBegin;

    /// A held `BEGIN` of the simple query `sql`.
    fn held(sql: &[u8]) -> DeferredBegin {
        let mut q = Vec::new();
        crate::frontend::session::put_query(&mut q, sql);
        DeferredBegin::new(q.into(), false, false)
    }

    #[test]
    fn the_begin_goes_as_parse_bind_execute() {
        let mut w = crate::wire::Writer::new();
        super::put_begin(&mut w, &held(b"BEGIN READ ONLY"));
        let out = w.into_bytes();
        assert_eq!(
            crate::wire::message::split_messages(&out),
            [
                (b'P', b"\0BEGIN READ ONLY\0\0\0".to_vec()),
                (b'B', vec![0; 8]),
                (b'E', vec![0; 5]),
            ]
        );
    }

    #[test]
    fn a_begin_and_its_set_transaction_go_as_two_statements() {
        let mut begin = held(b"BEGIN -- ; a comment");
        begin.also(b"SET TRANSACTION READ ONLY;\0");
        assert_eq!(
            begin.text(),
            b"BEGIN -- ; a comment\n;SET TRANSACTION READ ONLY;"
        );
        let mut w = crate::wire::Writer::new();
        super::put_begin(&mut w, &begin);
        let out = w.into_bytes();
        let parses: Vec<Vec<u8>> = crate::wire::message::split_messages(&out)
            .into_iter()
            .filter(|(t, _)| *t == b'P')
            .map(|(_, body)| body)
            .collect();
        assert_eq!(
            parses,
            [
                b"\0BEGIN\0\0\0".to_vec(),
                b"\0SET TRANSACTION READ ONLY\0\0\0".to_vec()
            ]
        );
    }
}
