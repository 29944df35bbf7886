//! Building small text-protocol result sets, for statements the proxy answers itself.

use super::buf::{put_lenenc, put_lenenc_bytes};
use super::ok::{write_eof, write_ok, OkPacket};
use super::packet::{begin_packet, end_packet};

/// Column type codes used by locally built result sets.
pub mod column_type {
    /// MYSQL_TYPE_LONGLONG.
    pub const LONGLONG: u8 = 0x08;
    /// MYSQL_TYPE_VAR_STRING.
    pub const VAR_STRING: u8 = 0xfd;
}

/// A column of a locally built result set.
#[derive(Clone, Debug)]
pub struct Column<'a> {
    /// Column name.
    pub name: &'a str,
    /// Type code (see [`column_type`]).
    pub kind: u8,
}

/// Appends a whole text result set (column count, definitions, rows, terminator) starting at
/// sequence id 1. `deprecate_eof` and `session_track` describe the receiving client.
pub fn write_resultset(
    out: &mut Vec<u8>,
    columns: &[Column<'_>],
    rows: &[Vec<Option<String>>],
    status: u16,
    deprecate_eof: bool,
    session_track: bool,
) {
    let mut seq = 1u8;
    let at = begin_packet(out, seq);
    put_lenenc(out, columns.len() as u64);
    end_packet(out, at);
    for c in columns {
        seq = seq.wrapping_add(1);
        let at = begin_packet(out, seq);
        put_lenenc_bytes(out, b"def");
        put_lenenc_bytes(out, b"");
        put_lenenc_bytes(out, b"");
        put_lenenc_bytes(out, b"");
        put_lenenc_bytes(out, c.name.as_bytes());
        put_lenenc_bytes(out, c.name.as_bytes());
        out.push(0x0c);
        let (charset, length, flags, decimals): (u16, u32, u16, u8) = match c.kind {
            column_type::LONGLONG => (63, 21, 0x0080 | 0x0001, 0),
            _ => (45, 1024, 0, 0x1f),
        };
        out.extend_from_slice(&charset.to_le_bytes());
        out.extend_from_slice(&length.to_le_bytes());
        out.push(c.kind);
        out.extend_from_slice(&flags.to_le_bytes());
        out.push(decimals);
        out.extend_from_slice(&[0, 0]);
        end_packet(out, at);
    }
    if !deprecate_eof {
        seq = seq.wrapping_add(1);
        write_eof(out, seq, 0, status);
    }
    for row in rows {
        seq = seq.wrapping_add(1);
        let at = begin_packet(out, seq);
        for v in row {
            match v {
                Some(s) => put_lenenc_bytes(out, s.as_bytes()),
                None => out.push(0xfb),
            }
        }
        end_packet(out, at);
    }
    seq = seq.wrapping_add(1);
    if deprecate_eof {
        let ok = OkPacket {
            status,
            ..OkPacket::default()
        };
        write_ok(out, seq, &ok, 0xfe, session_track);
    } else {
        write_eof(out, seq, 0, status);
    }
}
