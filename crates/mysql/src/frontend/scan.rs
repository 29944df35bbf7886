//! A packet-level state machine over a server's response. It finds where the response ends,
//! picks out what the proxy must learn (status flags, errors, session-state changes, insert
//! ids, row counts) and rewrites the few packets a client must see differently. Rows pass
//! through untouched and are never buffered whole.

use crate::wire::buf::Reader;
use crate::wire::consts::MAX_PAYLOAD;
use crate::wire::ok::{parse_eof, parse_err, parse_ok, write_ok};
use crate::wire::status;

/// Packets up to this size (header included) are passed on only once complete, so that a
/// server lost in the middle of a response almost always leaves the client between two
/// packets, where it can be sent an error instead of being disconnected. Larger ones stream
/// through as they arrive.
pub const WHOLE_UP_TO: usize = 16 * 1024;

/// What kind of response is expected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// COM_QUERY: OK, ERR, LOCAL INFILE request, or text result sets; possibly several.
    Query,
    /// COM_STMT_EXECUTE: like `Query` with binary rows (or an open cursor).
    Execute,
    /// COM_STMT_FETCH: rows and a terminator.
    Fetch,
    /// COM_FIELD_LIST: column definitions up to a terminator.
    FieldList,
    /// A single OK, EOF or ERR packet (COM_PING, COM_INIT_DB, COM_SET_OPTION, ...).
    Simple,
    /// COM_STATISTICS: one string packet.
    Statistics,
    /// COM_STMT_PREPARE: PREPARE_OK with parameter and column definitions, or ERR.
    Prepare,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    First,
    Columns(u64),
    ColumnsEof,
    Rows,
    PrepParams(u64),
    PrepParamsEof,
    PrepColumns(u64),
    PrepColumnsEof,
    /// Waiting for the OK/ERR that follows a LOCAL INFILE transfer.
    AfterInfile,
    Done,
}

/// The result of a prepare, as seen in PREPARE_OK.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Prepared {
    /// Server statement id.
    pub stmt_id: u32,
    /// Result columns.
    pub columns: u16,
    /// Parameters.
    pub params: u16,
    /// Warnings.
    pub warnings: u16,
}

/// An error packet, owned: the protocol-neutral form every error a client is sent takes
/// (kind [`sluice_core::ErrorKind::Server`] when the server sent it).
pub type ServerError = sluice_core::ClientError;

/// What the proxy learned from a response.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Status flags of the last OK/EOF seen.
    pub status: u16,
    /// True once any OK/EOF carried status flags.
    pub status_known: bool,
    /// The error that ended the response, if any.
    pub error: Option<ServerError>,
    /// Affected rows of the last OK.
    pub affected_rows: u64,
    /// Insert id of the last OK.
    pub last_insert_id: u64,
    /// Some OK reported a non-zero insert id.
    pub saw_insert_id: bool,
    /// Warning count of the last OK/EOF.
    pub warnings: u16,
    /// Data rows seen.
    pub rows: u64,
    /// Result sets seen.
    pub result_sets: u32,
    /// Concatenated session-state data of every OK packet.
    pub tracker: Vec<u8>,
    /// The server opened a cursor (COM_STMT_EXECUTE with a cursor type).
    pub cursor_open: bool,
    /// A fetch returned the cursor's last row.
    pub last_row_sent: bool,
    /// Prepare result.
    pub prepared: Option<Prepared>,
}

/// What to do with the bytes at the front of the buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Not enough bytes to decide: read more.
    NeedMore,
    /// Forward these many bytes unchanged.
    Forward(usize),
    /// Consume these many bytes and send the given bytes instead.
    Replace(usize, Vec<u8>),
    /// A LOCAL INFILE request of this many bytes (the caller handles the transfer).
    Infile(usize),
    /// The response is complete.
    Done,
    /// The bytes at the front are not what the protocol allows here (what was wrong): the
    /// server is broken, or something else answered.
    Malformed(String),
}

/// The state machine.
#[derive(Clone)]
pub struct Scanner {
    expect: Expect,
    phase: Phase,
    deprecate_eof: bool,
    /// The receiving client negotiated CLIENT_SESSION_TRACK.
    client_tracks: bool,
    /// Bytes of the current pass-through packet still to come.
    passing: usize,
    /// The previous physical packet was 16 MiB - 1 bytes: this one continues it.
    continued: bool,
    /// Sequence id of the last packet header seen.
    pub last_seq: u8,
    /// What was learned.
    pub out: Outcome,
    /// Rewrite PREPARE_OK's statement id to this one.
    stmt_id_for_client: Option<u32>,
    /// Sequence id the response's first packet must carry, when known.
    first_seq: Option<u8>,
    /// A packet of this response was consumed (later ones follow `last_seq`).
    started: bool,
}

impl Scanner {
    /// A scanner for a response of kind `expect`. `deprecate_eof` is the connection's
    /// CLIENT_DEPRECATE_EOF; `client_tracks` whether the client negotiated CLIENT_SESSION_TRACK.
    pub fn new(expect: Expect, deprecate_eof: bool, client_tracks: bool) -> Scanner {
        let phase = match expect {
            Expect::Fetch => Phase::Rows,
            Expect::FieldList => Phase::Columns(u64::MAX),
            _ => Phase::First,
        };
        Scanner {
            expect,
            phase,
            deprecate_eof,
            client_tracks,
            passing: 0,
            continued: false,
            last_seq: 0,
            out: Outcome::default(),
            stmt_id_for_client: None,
            first_seq: None,
            started: false,
        }
    }

    /// The response's first packet must carry sequence id `seq` (the one after the
    /// command's last packet).
    pub fn expect_first_seq(&mut self, seq: u8) {
        self.first_seq = Some(seq);
    }

    /// Sequence id the client's next packet of this exchange carries: after the last packet
    /// passed on, or the response's first.
    pub fn next_seq(&self) -> u8 {
        if self.started {
            self.last_seq.wrapping_add(1)
        } else {
            self.first_seq.unwrap_or(1)
        }
    }

    /// Rewrites the statement id in PREPARE_OK to `id` (the proxy's own).
    pub fn with_client_stmt_id(mut self, id: u32) -> Scanner {
        self.stmt_id_for_client = Some(id);
        self
    }

    /// True when the response is complete.
    pub fn is_done(&self) -> bool {
        self.phase == Phase::Done && self.passing == 0
    }

    /// True when the client could take an ERR packet now: between two packets (clients
    /// accept an error in place of any packet of a response: a row, a terminator, a column
    /// or parameter definition), not inside one.
    pub fn at_error_point(&self) -> bool {
        self.passing == 0 && !self.continued
    }

    /// The LOCAL INFILE transfer ended; the server's OK/ERR comes next, with sequence id
    /// `next` (it follows the data packets, which this scanner did not see).
    pub fn infile_done(&mut self, next: u8) {
        self.phase = Phase::AfterInfile;
        self.started = false;
        self.first_seq = Some(next);
    }

    /// Decides what to do with `buf`, which starts at a packet boundary (or inside a packet
    /// being passed through). May modify the packet in place (statement id).
    pub fn step(&mut self, buf: &mut [u8]) -> Step {
        if self.passing > 0 {
            let n = self.passing.min(buf.len());
            if n == 0 {
                return Step::NeedMore;
            }
            self.passing -= n;
            return Step::Forward(n);
        }
        if self.phase == Phase::Done {
            return Step::Done;
        }
        if buf.len() < 4 {
            return Step::NeedMore;
        }
        let len = u32::from_le_bytes([buf[0], buf[1], buf[2], 0]) as usize;
        let seq = buf[3];
        if let Some(problem) = self.out_of_sequence(buf, len, seq) {
            return problem;
        }
        if buf.len() < 4 + len && 4 + len <= WHOLE_UP_TO {
            return Step::NeedMore;
        }
        let step = self.header(buf, len, seq);
        if matches!(step, Step::Forward(_) | Step::Replace(..) | Step::Infile(_)) {
            self.started = true;
        }
        step
    }

    /// A packet that is not the next of the exchange: garbage, or a server that lost track.
    /// (A first packet that is an error is let through whatever its sequence id: a server
    /// refusing an oversized command answers before reading all of it.)
    fn out_of_sequence(&self, buf: &[u8], len: usize, seq: u8) -> Option<Step> {
        let expected = if self.started {
            self.last_seq.wrapping_add(1)
        } else {
            self.first_seq?
        };
        if seq == expected {
            return None;
        }
        // (An empty packet has no first byte: buf[4] would belong to the next packet.)
        if !self.started && len > 0 {
            match buf.get(4) {
                Some(0xff) => return None,
                None => return Some(Step::NeedMore),
                _ => {}
            }
        }
        Some(Step::Malformed(format!(
            "a packet with sequence id {seq} where {expected} was expected"
        )))
    }

    /// Decides about the packet whose header is at the front of `buf`.
    fn header(&mut self, buf: &mut [u8], len: usize, seq: u8) -> Step {
        let step = self.packet(buf, len, seq);
        // Only a packet taken on tells whether the next one continues it: after NeedMore the
        // same header is read again.
        if step != Step::NeedMore {
            self.continued = len == MAX_PAYLOAD;
        }
        step
    }

    /// [`Scanner::header`] without the continuation bookkeeping.
    fn packet(&mut self, buf: &mut [u8], len: usize, seq: u8) -> Step {
        if self.continued {
            self.last_seq = seq;
            return self.pass(buf.len(), len);
        }
        // Packets that only need counting pass through without being buffered whole.
        match self.phase {
            Phase::Columns(n) if self.expect != Expect::FieldList => {
                self.last_seq = seq;
                let next = n - 1;
                self.phase = if next > 0 {
                    Phase::Columns(next)
                } else if self.deprecate_eof {
                    Phase::Rows
                } else {
                    Phase::ColumnsEof
                };
                return self.pass(buf.len(), len);
            }
            Phase::PrepParams(n) | Phase::PrepColumns(n) => {
                self.last_seq = seq;
                let next = n - 1;
                self.phase = match (self.phase, next) {
                    (Phase::PrepParams(_), 0) if !self.deprecate_eof => Phase::PrepParamsEof,
                    (Phase::PrepParams(_), 0) => self.after_params(),
                    (Phase::PrepParams(_), k) => Phase::PrepParams(k),
                    (_, 0) if !self.deprecate_eof => Phase::PrepColumnsEof,
                    (_, 0) => Phase::Done,
                    (_, k) => Phase::PrepColumns(k),
                };
                return self.pass(buf.len(), len);
            }
            Phase::Rows | Phase::Columns(_) => {
                // A row unless it is a terminator (0xFE, short) or an error (0xFF). An empty
                // packet has no first byte: buf[4] would belong to the next packet.
                if len == 0 {
                    self.last_seq = seq;
                    if self.phase == Phase::Rows {
                        self.out.rows += 1;
                    }
                    return Step::Forward(4);
                }
                if buf.len() < 5 {
                    return Step::NeedMore;
                }
                let b = buf[4];
                let terminator = b == 0xfe
                    && if self.deprecate_eof {
                        len < MAX_PAYLOAD
                    } else {
                        len < 9
                    };
                if !terminator && b != 0xff {
                    self.last_seq = seq;
                    if self.phase == Phase::Rows {
                        self.out.rows += 1;
                    }
                    return self.pass(buf.len(), len);
                }
            }
            _ => {}
        }
        // Everything else is small and inspected whole.
        if buf.len() < 4 + len {
            return Step::NeedMore;
        }
        self.last_seq = seq;
        self.inspect(buf, len)
    }

    fn after_params(&self) -> Phase {
        match self.out.prepared.map(|p| p.columns).unwrap_or(0) {
            0 => Phase::Done,
            n => Phase::PrepColumns(n as u64),
        }
    }

    fn pass(&mut self, avail: usize, len: usize) -> Step {
        let total = 4 + len;
        if avail >= total {
            Step::Forward(total)
        } else {
            self.passing = total - avail;
            Step::Forward(avail)
        }
    }

    fn inspect(&mut self, buf: &mut [u8], len: usize) -> Step {
        let total = 4 + len;
        let payload = &buf[4..total];
        let first = payload.first().copied();
        if first == Some(0xff) && self.expect != Expect::Statistics {
            if let Some(e) = parse_err(payload) {
                self.out.error = Some(ServerError {
                    kind: sluice_core::ErrorKind::Server,
                    code: e.code,
                    sqlstate: e.sqlstate,
                    message: e.message_str(),
                });
            }
            self.phase = Phase::Done;
            return Step::Forward(total);
        }
        match self.phase {
            Phase::First | Phase::AfterInfile => match (self.expect, first) {
                (Expect::Statistics, _) => {
                    self.phase = Phase::Done;
                    Step::Forward(total)
                }
                (Expect::Prepare, Some(0x00)) => self.prepare_ok(buf, len),
                (Expect::Prepare | Expect::Simple, Some(b)) if b != 0xfe && b != 0x00 => {
                    Step::Malformed(format!(
                        "a packet starting with {b:#04x} where OK or ERR was expected"
                    ))
                }
                (_, Some(0x00)) => self.ok(buf, len),
                (_, Some(0xfe)) if self.expect == Expect::Simple || payload.len() < 9 => {
                    // EOF answer (COM_SET_OPTION, COM_DEBUG) or an OK with a 0xFE header.
                    self.terminator(buf, len)
                }
                (Expect::Query, Some(0xfb)) if self.phase == Phase::First => Step::Infile(total),
                (Expect::Query | Expect::Execute, Some(_)) if self.phase == Phase::First => {
                    let mut r = Reader::new(payload);
                    let n = match r.lenenc() {
                        Some(n) if n > 0 && r.rest().is_empty() => n,
                        _ => {
                            return Step::Malformed(format!(
                                "a packet starting with {:#04x} where OK, ERR, a LOCAL INFILE request or a column count was expected",
                                payload[0]
                            ))
                        }
                    };
                    self.out.result_sets += 1;
                    self.phase = if n == 0 {
                        Phase::Rows
                    } else {
                        Phase::Columns(n)
                    };
                    Step::Forward(total)
                }
                _ => {
                    self.phase = Phase::Done;
                    Step::Forward(total)
                }
            },
            Phase::ColumnsEof => {
                if let Some(eof) = parse_eof(payload) {
                    self.note_status(eof.status, eof.warnings);
                    if eof.status & status::CURSOR_EXISTS != 0 {
                        self.out.cursor_open = true;
                        self.phase = Phase::Done;
                        return Step::Forward(total);
                    }
                }
                self.phase = Phase::Rows;
                Step::Forward(total)
            }
            Phase::PrepParamsEof => {
                self.phase = self.after_params();
                Step::Forward(total)
            }
            Phase::PrepColumnsEof => {
                self.phase = Phase::Done;
                Step::Forward(total)
            }
            Phase::Rows | Phase::Columns(_) => self.terminator(buf, len),
            _ => {
                self.phase = Phase::Done;
                Step::Forward(total)
            }
        }
    }

    fn note_status(&mut self, st: u16, warnings: u16) {
        self.out.status = st;
        self.out.status_known = true;
        self.out.warnings = warnings;
    }

    /// An OK packet (0x00) answering a command or ending a statement of a multi-statement.
    fn ok(&mut self, buf: &mut [u8], len: usize) -> Step {
        let total = 4 + len;
        let Some(ok) = parse_ok(&buf[4..total]) else {
            return Step::Malformed("an OK packet that does not parse".into());
        };
        self.note_ok(&ok);
        self.phase = if ok.status & status::MORE_RESULTS_EXISTS != 0 {
            Phase::First
        } else {
            Phase::Done
        };
        self.maybe_strip(&ok, 0x00, buf[3], total)
    }

    /// End of a result set: EOF, or OK with a 0xFE header under CLIENT_DEPRECATE_EOF.
    fn terminator(&mut self, buf: &mut [u8], len: usize) -> Step {
        let total = 4 + len;
        let payload = &buf[4..total];
        let (st, step) = if self.deprecate_eof && payload.len() >= 7 {
            match parse_ok(payload) {
                Some(ok) => {
                    self.note_ok(&ok);
                    let st = ok.status;
                    (st, self.maybe_strip(&ok, 0xfe, buf[3], total))
                }
                None => (0, Step::Forward(total)),
            }
        } else {
            let eof = parse_eof(payload).unwrap_or(crate::wire::ok::EofPacket {
                warnings: 0,
                status: 0,
            });
            self.note_status(eof.status, eof.warnings);
            (eof.status, Step::Forward(total))
        };
        if st & status::CURSOR_EXISTS != 0 && self.expect == Expect::Execute {
            self.out.cursor_open = true;
        }
        if st & status::LAST_ROW_SENT != 0 {
            self.out.last_row_sent = true;
        }
        self.phase = if st & status::MORE_RESULTS_EXISTS != 0 && self.expect != Expect::FieldList {
            Phase::First
        } else {
            Phase::Done
        };
        step
    }

    fn note_ok(&mut self, ok: &crate::wire::ok::OkPacket<'_>) {
        self.note_status(ok.status, ok.warnings);
        self.out.affected_rows = ok.affected_rows;
        self.out.last_insert_id = ok.last_insert_id;
        if ok.last_insert_id != 0 {
            self.out.saw_insert_id = true;
        }
        if !ok.session_state.is_empty() {
            self.out.tracker.extend_from_slice(ok.session_state);
        }
    }

    /// Clients without CLIENT_SESSION_TRACK get OK packets without session-state data.
    fn maybe_strip(
        &self,
        ok: &crate::wire::ok::OkPacket<'_>,
        header: u8,
        seq: u8,
        total: usize,
    ) -> Step {
        if self.client_tracks || ok.status & status::SESSION_STATE_CHANGED == 0 {
            return Step::Forward(total);
        }
        let mut out = Vec::with_capacity(total);
        write_ok(&mut out, seq, ok, header, false);
        Step::Replace(total, out)
    }

    fn prepare_ok(&mut self, buf: &mut [u8], len: usize) -> Step {
        let total = 4 + len;
        let mut r = Reader::new(&buf[5..total]);
        let (Some(id), Some(columns), Some(params)) = (r.u32(), r.u16(), r.u16()) else {
            return Step::Malformed("a PREPARE_OK packet that does not parse".into());
        };
        r.u8();
        let warnings = r.u16().unwrap_or(0);
        self.out.prepared = Some(Prepared {
            stmt_id: id,
            columns,
            params,
            warnings,
        });
        if let Some(client_id) = self.stmt_id_for_client {
            buf[5..9].copy_from_slice(&client_id.to_le_bytes());
        }
        self.phase = if params > 0 {
            Phase::PrepParams(params as u64)
        } else {
            self.after_params()
        };
        Step::Forward(total)
    }
}

#[cfg(test)]
#[path = "scan_tests.rs"]
mod tests;
