//! OK, EOF and ERR packets, and the session-state information carried by OK packets.

use super::buf::{put_lenenc, put_lenenc_bytes, Reader};
use super::consts::{status, track};
use super::packet::{begin_packet, end_packet};

/// A parsed OK packet (header 0x00, or 0xFE when it terminates a result set with
/// CLIENT_DEPRECATE_EOF).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OkPacket<'a> {
    /// Affected rows.
    pub affected_rows: u64,
    /// Last insert id reported for the statement.
    pub last_insert_id: u64,
    /// Server status flags.
    pub status: u16,
    /// Warning count.
    pub warnings: u16,
    /// Human-readable info ("Rows matched: 1 ...").
    pub info: &'a [u8],
    /// Raw session-state information (when `status` has SESSION_STATE_CHANGED).
    pub session_state: &'a [u8],
}

/// Parses an OK packet sent to a connection that negotiated CLIENT_SESSION_TRACK (as every
/// backend connection of the proxy does).
pub fn parse_ok(payload: &[u8]) -> Option<OkPacket<'_>> {
    let mut r = Reader::new(payload);
    let h = r.u8()?;
    if h != 0x00 && h != 0xfe {
        return None;
    }
    let affected_rows = r.lenenc()?;
    let last_insert_id = r.lenenc()?;
    let status = r.u16()?;
    let warnings = r.u16()?;
    let mut ok = OkPacket {
        affected_rows,
        last_insert_id,
        status,
        warnings,
        info: &[],
        session_state: &[],
    };
    if r.remaining() > 0 {
        ok.info = r.lenenc_bytes()?;
        if status & status::SESSION_STATE_CHANGED != 0 && r.remaining() > 0 {
            ok.session_state = r.lenenc_bytes()?;
        }
    }
    Some(ok)
}

/// A parsed EOF packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EofPacket {
    /// Warning count.
    pub warnings: u16,
    /// Server status flags.
    pub status: u16,
}

/// True for a classic EOF packet (0xFE header, shorter than 9 bytes).
pub fn is_eof(payload: &[u8]) -> bool {
    payload.first() == Some(&0xfe) && payload.len() < 9
}

/// Parses a classic EOF packet.
pub fn parse_eof(payload: &[u8]) -> Option<EofPacket> {
    if !is_eof(payload) {
        return None;
    }
    let mut r = Reader::new(&payload[1..]);
    Some(EofPacket {
        warnings: r.u16().unwrap_or(0),
        status: r.u16().unwrap_or(0),
    })
}

/// A parsed ERR packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ErrPacket<'a> {
    /// Error code.
    pub code: u16,
    /// SQL state (`HY000` when the packet has none).
    pub sqlstate: [u8; 5],
    /// Message.
    pub message: &'a [u8],
}

/// Parses an ERR packet (0xFF header).
pub fn parse_err(payload: &[u8]) -> Option<ErrPacket<'_>> {
    let mut r = Reader::new(payload);
    if r.u8()? != 0xff {
        return None;
    }
    let code = r.u16()?;
    let mut sqlstate = *b"HY000";
    if r.rest().first() == Some(&b'#') && r.remaining() >= 6 {
        r.u8();
        sqlstate.copy_from_slice(r.take(5)?);
    }
    Some(ErrPacket {
        code,
        sqlstate,
        message: r.take_rest(),
    })
}

impl ErrPacket<'_> {
    /// The message as text.
    pub fn message_str(&self) -> String {
        String::from_utf8_lossy(self.message).into_owned()
    }
}

/// Appends an OK packet. `session_track` says whether the receiver negotiated
/// CLIENT_SESSION_TRACK (it changes how `info` is encoded).
pub fn write_ok(out: &mut Vec<u8>, seq: u8, ok: &OkPacket<'_>, header: u8, session_track: bool) {
    let at = begin_packet(out, seq);
    out.push(header);
    put_lenenc(out, ok.affected_rows);
    put_lenenc(out, ok.last_insert_id);
    let mut st = ok.status;
    if !session_track {
        st &= !status::SESSION_STATE_CHANGED;
    }
    out.extend_from_slice(&st.to_le_bytes());
    out.extend_from_slice(&ok.warnings.to_le_bytes());
    if session_track {
        if !ok.info.is_empty() || st & status::SESSION_STATE_CHANGED != 0 {
            put_lenenc_bytes(out, ok.info);
        }
        if st & status::SESSION_STATE_CHANGED != 0 {
            put_lenenc_bytes(out, ok.session_state);
        }
    } else if !ok.info.is_empty() {
        // Documented as string<EOF>, but servers send a length-encoded string and clients
        // (libmysqlclient, mysql_common) read one.
        put_lenenc_bytes(out, ok.info);
    }
    end_packet(out, at);
}

/// Appends a classic EOF packet.
pub fn write_eof(out: &mut Vec<u8>, seq: u8, warnings: u16, status: u16) {
    let at = begin_packet(out, seq);
    out.push(0xfe);
    out.extend_from_slice(&warnings.to_le_bytes());
    out.extend_from_slice(&status.to_le_bytes());
    end_packet(out, at);
}

/// Appends an ERR packet.
pub fn write_err(out: &mut Vec<u8>, seq: u8, code: u16, sqlstate: &[u8; 5], message: &str) {
    let at = begin_packet(out, seq);
    out.push(0xff);
    out.extend_from_slice(&code.to_le_bytes());
    out.push(b'#');
    out.extend_from_slice(sqlstate);
    // Messages are bounded like the server's (MYSQL_ERRMSG_SIZE = 512).
    let msg = message.as_bytes();
    out.extend_from_slice(&msg[..msg.len().min(511)]);
    end_packet(out, at);
}

/// One entry of an OK packet's session-state information.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateChange<'a> {
    /// A system variable's new value.
    SysVar(&'a [u8], &'a [u8]),
    /// The new current schema.
    Schema(&'a [u8]),
    /// Some session state changed (SESSION_TRACK_STATE_CHANGE).
    StateChanged,
    /// Characteristics of the next transaction, as statements that would recreate them.
    TrxCharacteristics(&'a [u8]),
    /// The transaction state string (8 characters, e.g. `T_______`).
    TrxState(&'a [u8]),
    /// Anything else (GTIDs, unknown types).
    Other(u8),
}

/// Iterates over session-state entries. Malformed data ends the iteration.
pub fn state_changes(data: &[u8]) -> impl Iterator<Item = StateChange<'_>> {
    let mut r = Reader::new(data);
    std::iter::from_fn(move || {
        let kind = r.u8()?;
        let body = r.lenenc_bytes()?;
        let mut b = Reader::new(body);
        Some(match kind {
            track::SYSTEM_VARIABLES => {
                let name = b.lenenc_bytes()?;
                let value = b.lenenc_bytes().unwrap_or(&[]);
                StateChange::SysVar(name, value)
            }
            track::SCHEMA => StateChange::Schema(b.lenenc_bytes()?),
            track::STATE_CHANGE => StateChange::StateChanged,
            track::TRANSACTION_CHARACTERISTICS => {
                StateChange::TrxCharacteristics(b.lenenc_bytes().unwrap_or(&[]))
            }
            track::TRANSACTION_STATE => StateChange::TrxState(b.lenenc_bytes().unwrap_or(&[])),
            other => StateChange::Other(other),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state_entry(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![kind];
        put_lenenc_bytes(&mut v, body);
        v
    }

    #[test]
    fn ok_with_session_state_round_trips_and_strips() {
        let mut var = Vec::new();
        put_lenenc_bytes(&mut var, b"autocommit");
        put_lenenc_bytes(&mut var, b"OFF");
        let mut schema = Vec::new();
        put_lenenc_bytes(&mut schema, b"test");
        let mut state = state_entry(track::SYSTEM_VARIABLES, &var);
        state.extend(state_entry(track::SCHEMA, &schema));
        state.extend(state_entry(track::TRANSACTION_STATE, &{
            let mut v = Vec::new();
            put_lenenc_bytes(&mut v, b"T_______");
            v
        }));
        let ok = OkPacket {
            affected_rows: 3,
            last_insert_id: 7,
            status: status::AUTOCOMMIT | status::SESSION_STATE_CHANGED,
            warnings: 1,
            info: b"Rows matched: 3",
            session_state: &state,
        };
        let mut wire = Vec::new();
        write_ok(&mut wire, 1, &ok, 0, true);
        let parsed = parse_ok(&wire[4..]).unwrap();
        assert_eq!(parsed, ok);
        let changes: Vec<_> = state_changes(parsed.session_state).collect();
        assert_eq!(
            changes,
            vec![
                StateChange::SysVar(b"autocommit", b"OFF"),
                StateChange::Schema(b"test"),
                StateChange::TrxState(b"T_______")
            ]
        );

        let mut plain = Vec::new();
        write_ok(&mut plain, 1, &ok, 0, false);
        // Without session tracking the state is dropped and the flag cleared.
        assert_eq!(
            &plain[4 + 1 + 1 + 1..4 + 1 + 1 + 1 + 2],
            &status::AUTOCOMMIT.to_le_bytes()
        );
        assert!(plain.ends_with(b"Rows matched: 3"));
    }

    #[test]
    fn minimal_ok_and_err_and_eof() {
        let ok = parse_ok(&[0, 0, 0, 2, 0, 0, 0]).unwrap();
        assert_eq!(ok.status, 2);
        assert!(ok.info.is_empty());
        let mut e = Vec::new();
        write_err(&mut e, 1, 1045, b"28000", "Access denied");
        let err = parse_err(&e[4..]).unwrap();
        assert_eq!(
            (err.code, &err.sqlstate, err.message),
            (1045, b"28000", &b"Access denied"[..])
        );
        let mut f = Vec::new();
        write_eof(&mut f, 5, 2, 3);
        assert_eq!(
            parse_eof(&f[4..]),
            Some(EofPacket {
                warnings: 2,
                status: 3
            })
        );
        assert!(parse_ok(&[0, 0xfc]).is_none());
        assert!(parse_err(&[0xff]).is_none());
    }
}
