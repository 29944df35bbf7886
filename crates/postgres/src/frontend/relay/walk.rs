//! The usual answer to a simple query, walked in one loop: row descriptions, rows, notices
//! and command tags up to the ReadyForQuery, passed on as they are. The relay's
//! message-by-message loop (which matches each message against the unit's expectations)
//! takes over for anything else. A plain read's answer is relayed by such a loop alone
//! ([`relay_simple`]) until something else comes. Walking pgbench's select-only answer this
//! way (and reading a read's tag at its first byte) saved 191 of 9,431 instructions per
//! transaction at 16 clients (callgrind, `docs/benchmarks.md`).

use super::{large_at, relay_into, stream_large, wait, Out, RelayError, Relayed, FLUSH_AT};
use crate::backend::conn::MAX_SERVER_MESSAGE;
use crate::backend::PgConn;
use crate::frontend::client::Client;
use crate::frontend::unit::{Exp, Exps, Resp, Shared};
use crate::wire::read_message;
use std::collections::BTreeMap;

/// Relays the answer to a plain read (a client's lone simple query, its answer passed on as
/// it is): its usual messages walked (see [`walk_simple`]) until its ReadyForQuery; anything
/// else hands over to the relay that matches each message against what the unit expects.
/// `unit` is the length of the query, still at the front of the client's buffer: consumed
/// before that relay takes over (it may read the client's next messages: COPY), else left
/// for the caller, who may send it again.
pub async fn relay_simple(
    conn: &mut PgConn,
    client: &mut Client,
    reported: &mut std::sync::Arc<BTreeMap<String, String>>,
    own_pid: u32,
    unit: &mut usize,
) -> Result<Relayed, SimpleFailed> {
    let mut out = Out::default();
    let r = simple_into(conn, client, reported, own_pid, unit, &mut out).await;
    let untouched = !out.sent && *unit > 0;
    out.done();
    r.map_err(|error| SimpleFailed { error, untouched })
}

/// Why a plain read's relay stopped early, and whether its client was sent none of the
/// answer and its query is still in the client's buffer (so that it may run elsewhere).
#[derive(Debug)]
pub struct SimpleFailed {
    /// Why.
    pub error: RelayError,
    /// None of the answer went to the client, and the query is still in its buffer.
    pub untouched: bool,
}

async fn simple_into(
    conn: &mut PgConn,
    client: &mut Client,
    reported: &mut std::sync::Arc<BTreeMap<String, String>>,
    own_pid: u32,
    unit: &mut usize,
    out: &mut Out,
) -> Result<Relayed, RelayError> {
    let mut r = Relayed::default();
    loop {
        let (end, ready) = walk_simple(conn.buffered(), out.run, &mut r);
        out.run = end;
        if ready {
            conn.unsynced = false;
            out.flush(conn, client).await?;
            return Ok(r);
        }
        if out.run >= FLUSH_AT {
            out.flush(conn, client).await?;
            continue;
        }
        // A large row: passed on as it arrives (the read can no longer run again).
        if let Some(large) = large_at(conn.buffered(), out.run, b"D") {
            r.rows += Box::pin(stream_large(conn, client, out, large)).await?;
            continue;
        }
        if let Ok(None) = conn.peek_at(out.run) {
            // Before its first row, what came (a RowDescription) waits for the rest: if the
            // connection is lost meanwhile, the read may run again elsewhere, its client
            // none the wiser (see `Session::plain_read`).
            if r.rows > 0 {
                out.flush(conn, client).await?;
            }
            wait(conn, client, false).await?;
            continue;
        }
        client.consume(std::mem::take(unit));
        // An error, a ParameterStatus, a notification, COPY, a malformed message: from here
        // on, the relay that matches each message against the unit's expectations (boxed:
        // the plain read's future stays small).
        let mut exps = Exps::default();
        exps.push_back(Exp::pass(Resp::Query));
        let mut rest =
            Box::pin(relay_into(conn, client, &mut exps, reported, own_pid, out)).await?;
        // With what the walk counted before.
        rest.rows += r.rows;
        rest.affected += r.affected;
        rest.dropped_statements |= r.dropped_statements;
        return Ok(rest);
    }
}

/// A client's simple query, its answer passed on as it is.
pub(super) fn plain_query(e: &Exp) -> bool {
    e.resp == Resp::Query
        && e.forward
        && e.synth.is_none()
        && e.replace_error.is_none()
        && matches!(e.shared, Shared::None)
}

/// Walks the answer to a [`plain_query`] in `buf` from `at`: row descriptions, rows, notices
/// and command tags (counted in `r` as the relay counts them) up to and with its
/// ReadyForQuery (its status in `r`); the end of what was walked, and whether it came to the
/// ReadyForQuery. It stops before anything else (an error, a ParameterStatus, a notification,
/// COPY, a message not whole yet or of a length the relay refuses) and after [`FLUSH_AT`]
/// bytes.
pub(super) fn walk_simple(buf: &[u8], mut at: usize, r: &mut Relayed) -> (usize, bool) {
    while at < FLUSH_AT {
        let rest = buf.get(at..).unwrap_or_default();
        let Ok(Some((m, len))) = read_message(rest, MAX_SERVER_MESSAGE) else {
            break;
        };
        match m.tag {
            b'D' => r.rows += 1,
            b'T' | b'N' => {}
            b'C' => r.completed(m.body),
            b'Z' => {
                r.ready(m.body);
                return (at + len, true);
            }
            _ => break,
        }
        at += len;
    }
    (at, false)
}

/// The rows a CommandComplete tag reports written (`INSERT 0 5`, `UPDATE 3`, `COPY 7`).
pub(super) fn affected(tag: &[u8]) -> u64 {
    // (Most tags are a read's, `SELECT n`: left at their first byte.)
    if !matches!(tag.first(), Some(b'I' | b'U' | b'D' | b'M' | b'C')) {
        return 0;
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ReadyStatus;

    #[test]
    fn written_rows_come_from_the_tags_that_report_them() {
        assert_eq!(affected(b"INSERT 0 5\0"), 5);
        assert_eq!(affected(b"UPDATE 3\0"), 3);
        assert_eq!(affected(b"DELETE 0\0"), 0);
        assert_eq!(affected(b"MERGE 2\0"), 2);
        assert_eq!(affected(b"COPY 7\0"), 7);
        for read in [
            &b"SELECT 4\0"[..],
            b"MOVE 3\0",
            b"FETCH 2\0",
            b"CREATE TABLE\0",
            b"",
        ] {
            assert_eq!(affected(read), 0, "{:?}", String::from_utf8_lossy(read));
        }
    }

    fn msg(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![tag];
        m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    #[test]
    fn the_usual_answer_is_walked_to_its_ready_for_query() {
        let answer = [
            msg(b'T', b"\0\x01a\0"),
            msg(b'D', b"\0\x01\0\0\0\x011"),
            msg(b'N', b"SNOTICE\0\0"),
            msg(b'D', b"\0\x01\0\0\0\x012"),
            msg(b'C', b"SELECT 2\0"),
            msg(b'Z', b"I"),
        ]
        .concat();
        let mut r = Relayed::default();
        assert_eq!(walk_simple(&answer, 0, &mut r), (answer.len(), true));
        assert_eq!(
            (r.rows, r.affected, r.status),
            (2, 0, Some(ReadyStatus::Idle))
        );
        // From a run already walked; a write's count.
        let first = msg(b'C', b"INSERT 0 3\0");
        let both = [first.clone(), msg(b'Z', b"T")].concat();
        let mut r = Relayed::default();
        assert_eq!(walk_simple(&both, 0, &mut r), (both.len(), true));
        assert_eq!(
            (r.affected, r.status),
            (3, Some(ReadyStatus::InTransaction))
        );
    }

    #[test]
    fn what_the_relay_must_see_itself_stops_the_walk() {
        let t = msg(b'T', b"\0\0");
        for stop in [
            msg(b'E', b"SERROR\0\0"),
            msg(b'S', b"a\0b\0"),
            msg(b'A', b"\0\0\0\x01c\0\0"),
            msg(b'G', b"\0\0\0"),
            msg(b'X', b""),
        ] {
            let buf = [t.clone(), stop, msg(b'Z', b"I")].concat();
            let mut r = Relayed::default();
            assert_eq!(walk_simple(&buf, 0, &mut r), (t.len(), false));
            assert_eq!(r.status, None);
        }
        // Not whole yet, or a length the relay refuses: left to it.
        let z = msg(b'Z', b"I");
        let mut r = Relayed::default();
        assert_eq!(
            walk_simple(&[t.clone(), z[..5].to_vec()].concat(), 0, &mut r),
            (t.len(), false)
        );
        let bad = [t.clone(), vec![b'D', 0, 0, 0, 3]].concat();
        assert_eq!(walk_simple(&bad, 0, &mut r), (t.len(), false));
        // Past FLUSH_AT bytes, the relay flushes before the walk goes on.
        let big = msg(b'D', &vec![0; FLUSH_AT]);
        let buf = [big.clone(), z.clone()].concat();
        assert_eq!(walk_simple(&buf, 0, &mut r), (big.len(), false));
        assert!(!walk_simple(&buf, big.len(), &mut Relayed::default()).1);
    }
}
