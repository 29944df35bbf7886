//! Every message after the startup packet: a type byte, a length (which counts itself), and
//! a body. Reading is bounded (a client announcing a gigabyte is refused before anything is
//! buffered); writing fills in the length when the message ends.

use super::startup::WireError;

/// One message, borrowed from the read buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message<'a> {
    /// Its type byte (`Q` query, `P` parse, `X` terminate, `Z` ready for query...).
    pub tag: u8,
    /// Its body, without type and length.
    pub body: &'a [u8],
}

/// Reads the message at the start of `buf`: `Ok(None)` while incomplete, else the message and
/// the bytes it took. A length over `max_len` (or below 4) is refused at once.
pub fn read_message(buf: &[u8], max_len: usize) -> Result<Option<(Message<'_>, usize)>, WireError> {
    let Some(head) = buf.get(..5) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if len < 4 {
        return Err(WireError::MessageLength(len as u32));
    }
    if len > max_len {
        return Err(WireError::TooLong {
            len,
            limit: max_len,
        });
    }
    let Some(body) = buf.get(5..1 + len) else {
        return Ok(None);
    };
    Ok(Some((Message { tag: head[0], body }, 1 + len)))
}

/// The transaction status a ReadyForQuery carries: the authority on whether the server
/// connection may be given back (idle) or must stay with the session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadyStatus {
    /// `I`: not in a transaction.
    Idle,
    /// `T`: in a transaction block.
    InTransaction,
    /// `E`: in a failed transaction block (statements refused until it ends).
    Failed,
}

impl ReadyStatus {
    /// From its byte.
    pub fn from_byte(b: u8) -> Option<ReadyStatus> {
        Some(match b {
            b'I' => ReadyStatus::Idle,
            b'T' => ReadyStatus::InTransaction,
            b'E' => ReadyStatus::Failed,
            _ => return None,
        })
    }

    /// Its byte.
    pub fn byte(self) -> u8 {
        match self {
            ReadyStatus::Idle => b'I',
            ReadyStatus::InTransaction => b'T',
            ReadyStatus::Failed => b'E',
        }
    }
}

/// An ErrorResponse's message field (`M`), if it has one.
pub fn error_message(body: &[u8]) -> Option<String> {
    let fields = error_fields(body).ok()?;
    fields.into_iter().find(|(k, _)| *k == b'M').map(|(_, m)| m)
}

/// Sync, the message that ends an extended-protocol batch.
pub const SYNC: &[u8] = b"S\0\0\0\x04";
/// A Flush message.
pub const FLUSH: &[u8] = b"H\0\0\0\x04";

/// The fields of an ErrorResponse or NoticeResponse: (field type, value) in order, every
/// field kept (they are passed through to clients as the server sent them).
pub fn error_fields(body: &[u8]) -> Result<Vec<(u8, String)>, WireError> {
    let mut fields = Vec::new();
    let mut rest = body;
    loop {
        match rest.split_first() {
            Some((0, [])) => return Ok(fields),
            Some((&kind, after)) if kind != 0 => {
                let end = after
                    .iter()
                    .position(|&b| b == 0)
                    .ok_or(WireError::Layout("error field without its terminating NUL"))?;
                fields.push((kind, String::from_utf8_lossy(&after[..end]).into_owned()));
                rest = &after[end + 1..];
            }
            _ => return Err(WireError::Layout("error fields not ended by a NUL")),
        }
    }
}

/// An ErrorResponse body whose severity ends the session (`FATAL`, `PANIC`): the server
/// closes the connection after it. The non-localised severity (`V`) decides where there is
/// one, else the localised (`S`).
pub fn ends_session(body: &[u8]) -> bool {
    let Ok(fields) = error_fields(body) else {
        return false;
    };
    let severity = |k: u8| {
        fields
            .iter()
            .find(|(f, _)| *f == k)
            .map(|(_, v)| v.as_str())
    };
    matches!(
        severity(b'V').or_else(|| severity(b'S')),
        Some("FATAL" | "PANIC")
    )
}

/// An ErrorResponse taken apart: its SQLSTATE and message, and its other fields but the
/// severity (`S`, `V`), in order: what a client is given of a server's error whose severity
/// sluice says itself.
#[derive(Debug, Default)]
pub struct ErrorParts {
    /// `C`.
    pub code: Option<String>,
    /// `M`.
    pub message: Option<String>,
    /// Detail, hint, where in the server's source...
    pub rest: Vec<(u8, String)>,
}

/// An ErrorResponse's body taken apart (see [`ErrorParts`]).
pub fn error_parts(body: &[u8]) -> Result<ErrorParts, WireError> {
    let mut parts = ErrorParts::default();
    for (kind, value) in error_fields(body)? {
        match kind {
            b'C' if parts.code.is_none() => parts.code = Some(value),
            b'M' if parts.message.is_none() => parts.message = Some(value),
            b'S' | b'V' => {}
            _ => parts.rest.push((kind, value)),
        }
    }
    Ok(parts)
}

/// What a writer's buffer starts with.
const FIRST_CAPACITY: usize = 512;

/// Builds messages into one buffer.
#[derive(Debug, Default)]
pub struct Writer {
    buf: Vec<u8>,
    start: usize,
}

impl Writer {
    /// An empty writer.
    pub fn new() -> Writer {
        Writer::default()
    }

    /// A writer appending to `buf` (what [`Writer::into_bytes`] gives back).
    pub fn with_buffer(buf: Vec<u8>) -> Writer {
        Writer { buf, start: 0 }
    }

    /// Starts a message of type `tag`.
    pub fn begin(&mut self, tag: u8) {
        self.room(5);
        self.buf.push(tag);
        self.start = self.buf.len();
        self.buf.extend_from_slice(&[0; 4]);
    }

    /// Room for `n` more bytes; a first buffer has room for a few messages at once (growing
    /// from a few bytes by doubling would copy them again at every step).
    fn room(&mut self, n: usize) {
        if self.buf.capacity() == 0 {
            self.buf.reserve(FIRST_CAPACITY.max(n));
        } else {
            self.buf.reserve(n);
        }
    }

    /// Ends the current message: fills in its length.
    pub fn end(&mut self) {
        let len = (self.buf.len() - self.start) as u32;
        self.buf[self.start..self.start + 4].copy_from_slice(&len.to_be_bytes());
    }

    /// A 32-bit integer.
    pub fn i32(&mut self, v: i32) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    /// A 16-bit integer.
    pub fn i16(&mut self, v: i16) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    /// A NUL-terminated string.
    pub fn cstr(&mut self, s: &str) {
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
    }

    /// Raw bytes.
    pub fn bytes(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }

    /// AuthenticationOk.
    pub fn auth_ok(&mut self) {
        self.begin(b'R');
        self.i32(0);
        self.end();
    }

    /// ParameterStatus.
    pub fn parameter_status(&mut self, name: &str, value: &str) {
        // Written in one go (a login sends a dozen or more): its length is known.
        let len = 4 + name.len() + 1 + value.len() + 1;
        self.room(1 + len);
        self.buf.push(b'S');
        self.buf.extend_from_slice(&(len as u32).to_be_bytes());
        self.cstr(name);
        self.cstr(value);
    }

    /// BackendKeyData: the process id and secret a client quotes to cancel.
    pub fn backend_key_data(&mut self, pid: u32, secret: u32) {
        self.begin(b'K');
        self.buf.extend_from_slice(&pid.to_be_bytes());
        self.buf.extend_from_slice(&secret.to_be_bytes());
        self.end();
    }

    /// ReadyForQuery.
    pub fn ready_for_query(&mut self, status: ReadyStatus) {
        self.begin(b'Z');
        self.buf.push(status.byte());
        self.end();
    }

    /// ErrorResponse with these fields (`S`/`V` severity, `C` SQLSTATE, `M` message...).
    pub fn error_response(&mut self, fields: &[(u8, &str)]) {
        self.fields(b'E', fields.iter().copied());
    }

    /// NoticeResponse with these fields, as [`Writer::error_response`].
    pub fn notice_response(&mut self, fields: &[(u8, &str)]) {
        self.fields(b'N', fields.iter().copied());
    }

    fn fields<'a>(&mut self, tag: u8, fields: impl Iterator<Item = (u8, &'a str)>) {
        self.begin(tag);
        for (kind, value) in fields {
            self.buf.push(kind);
            self.cstr(value);
        }
        self.buf.push(0);
        self.end();
    }

    /// An error as PostgreSQL words one: severity `FATAL` or `ERROR`, SQLSTATE, message.
    pub fn error(&mut self, severity: &str, sqlstate: &str, message: &str) {
        self.error_with(severity, sqlstate, message, &[]);
    }

    /// As [`Writer::error`], followed by `more` fields (a server's detail, hint...).
    pub fn error_with(
        &mut self,
        severity: &str,
        sqlstate: &str,
        message: &str,
        more: &[(u8, String)],
    ) {
        let first = [
            (b'S', severity),
            (b'V', severity),
            (b'C', sqlstate),
            (b'M', message),
        ];
        let more = more.iter().map(|(k, v)| (*k, v.as_str()));
        self.fields(b'E', first.into_iter().chain(more));
    }

    /// The bytes written.
    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    /// The bytes written so far.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }
}

/// The messages `bytes` holds, whole (type byte, body): for tests of what sluice writes.
#[cfg(test)]
pub fn split_messages(bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut at = 0;
    let mut seen = Vec::new();
    while let Some((m, len)) = read_message(&bytes[at..], 1 << 20).unwrap() {
        seen.push((m.tag, m.body.to_vec()));
        at += len;
    }
    assert_eq!(at, bytes.len(), "a message cut short");
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fatal_and_panic_errors_end_the_session_by_their_unlocalised_severity() {
        let body = |fields: &[(u8, &str)]| {
            let mut b = Vec::new();
            for (k, v) in fields {
                b.push(*k);
                b.extend_from_slice(v.as_bytes());
                b.push(0);
            }
            b.push(0);
            b
        };
        assert!(ends_session(&body(&[
            (b'S', "FATAL"),
            (b'V', "FATAL"),
            (b'C', "57P01")
        ])));
        assert!(ends_session(&body(&[(b'S', "PANIC"), (b'C', "XX000")])));
        // Localised otherwise ("SCHWERWIEGEND"): the unlocalised one decides.
        assert!(ends_session(&body(&[
            (b'S', "SCHWERWIEGEND"),
            (b'V', "FATAL")
        ])));
        assert!(!ends_session(&body(&[(b'S', "FATAL"), (b'V', "ERROR")])));
        assert!(!ends_session(&body(&[(b'S', "ERROR"), (b'C', "42601")])));
        assert!(!ends_session(b"SFATAL"));
    }

    #[test]
    fn messages_are_read_whole_and_bounded() {
        let mut w = Writer::new();
        w.begin(b'Q');
        w.cstr("SELECT 1");
        w.end();
        w.begin(b'X');
        w.end();
        let bytes = w.into_bytes();
        let (q, used) = read_message(&bytes, 1 << 20).unwrap().unwrap();
        assert_eq!((q.tag, q.body), (b'Q', &b"SELECT 1\0"[..]));
        let (x, used2) = read_message(&bytes[used..], 1 << 20).unwrap().unwrap();
        assert_eq!((x.tag, x.body.len()), (b'X', 0));
        assert_eq!(used + used2, bytes.len());
        for cut in 0..used {
            assert_eq!(read_message(&bytes[..cut], 1 << 20).unwrap(), None);
        }
        // A huge announced length is refused from its header alone.
        let huge = [b'Q', 0x40, 0, 0, 0];
        assert_eq!(
            read_message(&huge, 1 << 20),
            Err(WireError::TooLong {
                len: 0x4000_0000,
                limit: 1 << 20
            })
        );
        assert_eq!(
            read_message(&[b'Q', 0, 0, 0, 3], 64),
            Err(WireError::MessageLength(3))
        );
    }

    #[test]
    fn errors_keep_every_field_in_order() {
        let mut w = Writer::new();
        w.error_response(&[
            (b'S', "ERROR"),
            (b'C', "25P02"),
            (b'M', "current transaction is aborted"),
            (b'H', "roll back"),
        ]);
        let bytes = w.into_bytes();
        let (m, _) = read_message(&bytes, 1024).unwrap().unwrap();
        assert_eq!(m.tag, b'E');
        let fields = error_fields(m.body).unwrap();
        assert_eq!(
            fields,
            [
                (b'S', "ERROR".to_string()),
                (b'C', "25P02".to_string()),
                (b'M', "current transaction is aborted".to_string()),
                (b'H', "roll back".to_string()),
            ]
        );
        assert!(error_fields(b"Mno end").is_err());
        assert!(error_fields(b"").is_err());
    }

    #[test]
    fn a_writer_appends_to_the_buffer_it_is_given() {
        let mut w = Writer::with_buffer(b"queued".to_vec());
        w.ready_for_query(ReadyStatus::Idle);
        let b = w.into_bytes();
        assert_eq!(&b[..6], b"queued");
        let (z, used) = read_message(&b[6..], 64).unwrap().unwrap();
        assert_eq!((z.tag, z.body, used), (b'Z', &b"I"[..], 6));
    }

    #[test]
    fn session_messages_have_their_fixed_layouts() {
        let mut w = Writer::new();
        w.auth_ok();
        w.parameter_status("server_version", "15.18");
        w.backend_key_data(42, 7);
        w.ready_for_query(ReadyStatus::InTransaction);
        let b = w.into_bytes();
        assert_eq!(&b[..9], &[b'R', 0, 0, 0, 8, 0, 0, 0, 0]);
        let (s, n1) = read_message(&b[9..], 64).unwrap().unwrap();
        assert_eq!((s.tag, s.body), (b'S', &b"server_version\x0015.18\0"[..]));
        let (k, n2) = read_message(&b[9 + n1..], 64).unwrap().unwrap();
        assert_eq!((k.tag, k.body), (b'K', &[0, 0, 0, 42, 0, 0, 0, 7][..]));
        let (z, _) = read_message(&b[9 + n1 + n2..], 64).unwrap().unwrap();
        assert_eq!(
            ReadyStatus::from_byte(z.body[0]),
            Some(ReadyStatus::InTransaction)
        );
        assert_eq!(ReadyStatus::from_byte(b'x'), None);
    }
}
