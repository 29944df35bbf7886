//! Target `scanner`: the state machine that follows a server's response. Input: `[flags]
//! [chunk seed][server bytes...]`; the flags pick the expected response kind (bits 0-2), the
//! connection's CLIENT_DEPRECATE_EOF (bit 3), whether the client tracks session state (bit 4)
//! and whether PREPARE_OK's statement id is rewritten (bit 5).
//!
//! The scanner is driven the way `frontend::relay` drives it. Checked: every step moves
//! forward and never past the bytes given (it cannot claim a response ended beyond them),
//! replaced packets are well formed, and the bytes passed on and everything learned are the
//! same whether the bytes arrive at once or in the pieces the chunk seed says; a response said
//! to be complete ends on a packet boundary. A result set written by the proxy itself (values
//! taken from the input) is followed to its end with every row counted.

use crate::chunks::Chunks;
use sluice_mysql::frontend::scan::{Expect, Outcome, Scanner, Step};
use sluice_mysql::wire::ok::parse_ok;
use sluice_mysql::wire::resultset::{column_type, write_resultset, Column};
use sluice_mysql::wire::status;

const EXPECTS: [Expect; 7] = [
    Expect::Query,
    Expect::Execute,
    Expect::Fetch,
    Expect::FieldList,
    Expect::Simple,
    Expect::Statistics,
    Expect::Prepare,
];

/// The harness body.
pub fn run(data: &[u8]) {
    let [flags, seed, stream @ ..] = data else {
        return;
    };
    let whole = drive(*flags, stream, 0);
    let pieces = drive(*flags, stream, *seed);
    assert_eq!(
        whole, pieces,
        "the outcome depends on how the bytes were split"
    );
    if whole.done {
        assert!(
            whole_packets(&stream[..whole.consumed]),
            "the response ended inside a packet"
        );
    }
    own_resultset(*flags, *seed, stream);
}

/// True if `bytes` is a sequence of whole packets.
fn whole_packets(mut bytes: &[u8]) -> bool {
    while !bytes.is_empty() {
        let Some(h) = bytes.get(..4) else {
            return false;
        };
        let len = u32::from_le_bytes([h[0], h[1], h[2], 0]) as usize;
        let Some(rest) = bytes.get(4 + len..) else {
            return false;
        };
        bytes = rest;
    }
    true
}

/// A result set the proxy writes itself (`wire::resultset`), with values taken from the
/// input, is followed to its end by the scanner, every row counted.
fn own_resultset(flags: u8, seed: u8, data: &[u8]) {
    let ncols = 1 + usize::from(seed % 4);
    let values: Vec<Option<String>> = data
        .split(|&b| b == 0)
        .take(4 * ncols)
        .map(|v| (!v.is_empty()).then(|| String::from_utf8_lossy(v).into_owned()))
        .collect();
    let rows: Vec<Vec<Option<String>>> = values
        .chunks_exact(ncols)
        .map(<[Option<String>]>::to_vec)
        .collect();
    let names = ["a", "b", "c", "d"];
    let columns: Vec<Column<'_>> = names[..ncols]
        .iter()
        .map(|name| Column {
            name,
            kind: column_type::VAR_STRING,
        })
        .collect();
    let (deprecate_eof, tracks) = (flags & 8 != 0, flags & 16 != 0);
    let mut wire = Vec::new();
    write_resultset(
        &mut wire,
        &columns,
        &rows,
        status::AUTOCOMMIT,
        deprecate_eof,
        tracks,
    );
    let r = drive(
        if deprecate_eof { 8 } else { 0 } | if tracks { 16 } else { 0 },
        &wire,
        seed,
    );
    assert!(
        r.done && r.consumed == wire.len() && r.sent == wire,
        "own result set"
    );
    assert_eq!((r.out.rows, r.out.result_sets), (rows.len() as u64, 1));
    assert_eq!(r.out.status, status::AUTOCOMMIT);
}

/// The scanner as configured by `flags`.
pub fn scanner(flags: u8) -> Scanner {
    let expect = EXPECTS[usize::from(flags & 7) % EXPECTS.len()];
    let s = Scanner::new(expect, flags & 8 != 0, flags & 16 != 0);
    if flags & 32 != 0 {
        s.with_client_stmt_id(0x0102_0304)
    } else {
        s
    }
}

/// What a relay of `stream` produced.
#[derive(Debug, PartialEq, Eq)]
struct Relayed {
    /// Bytes sent on to the client.
    sent: Vec<u8>,
    /// Bytes of the stream consumed.
    consumed: usize,
    /// The scanner said the response was complete.
    done: bool,
    /// LOCAL INFILE requests seen.
    infiles: u32,
    /// Why the scanner refused the bytes (garbage, a packet out of sequence), if it did.
    malformed: Option<String>,
    out: Outcome,
    last_seq: u8,
}

fn drive(flags: u8, stream: &[u8], seed: u8) -> Relayed {
    let mut s = scanner(flags);
    let mut chunks = Chunks::new(seed);
    let mut buf: Vec<u8> = Vec::new();
    let mut fed = 0usize;
    let mut pos = 0usize;
    let mut r = Relayed {
        sent: Vec::new(),
        consumed: 0,
        done: false,
        infiles: 0,
        malformed: None,
        out: Outcome::default(),
        last_seq: 0,
    };
    // Each step consumes at least one byte or asks for more; a stall is a hang.
    let mut steps_left = 2 * stream.len() + 16;
    loop {
        assert!(steps_left > 0, "the scanner makes no progress");
        steps_left -= 1;
        let avail = buf.len() - pos;
        let _ = s.at_error_point();
        match s.step(&mut buf[pos..]) {
            Step::Forward(n) => {
                assert!(n > 0 && n <= avail, "forward {n} of {avail} bytes");
                r.sent.extend_from_slice(&buf[pos..pos + n]);
                pos += n;
            }
            Step::Replace(n, bytes) => {
                assert!(n > 4 && n <= avail, "replace {n} of {avail} bytes");
                assert_eq!(buf[pos + 3], bytes[3], "replacement keeps the sequence id");
                let len = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], 0]) as usize;
                assert_eq!(len + 4, bytes.len(), "replacement is one whole packet");
                let ok = parse_ok(&bytes[4..]).expect("replacement is an OK packet");
                assert_eq!(ok.status & status::SESSION_STATE_CHANGED, 0);
                r.sent.extend_from_slice(&bytes);
                pos += n;
            }
            Step::Infile(n) => {
                assert!(n >= 4 && n <= avail, "infile {n} of {avail} bytes");
                // The client answers with an empty file (one packet); the server's answer
                // follows it.
                let next = buf[pos + 3].wrapping_add(2);
                r.sent.extend_from_slice(&buf[pos..pos + n]);
                pos += n;
                r.infiles += 1;
                s.infile_done(next);
            }
            Step::Malformed(why) => {
                r.malformed = Some(why);
                break;
            }
            Step::Done => {
                assert!(s.is_done());
                r.done = true;
                break;
            }
            Step::NeedMore => {
                if fed == stream.len() {
                    break;
                }
                r.consumed += pos;
                buf.drain(..pos);
                pos = 0;
                let n = chunks.next(stream.len() - fed);
                buf.extend_from_slice(&stream[fed..fed + n]);
                fed += n;
            }
        }
    }
    r.consumed += pos;
    assert!(r.consumed <= stream.len());
    r.last_seq = s.last_seq;
    r.out = s.out;
    r
}
