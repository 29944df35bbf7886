use super::*;
use crate::wire::buf::{put_lenenc, put_lenenc_bytes};
use crate::wire::ok::{write_eof, write_err, write_ok, OkPacket};
use crate::wire::packet::frame;

fn pkt(out: &mut Vec<u8>, seq: u8, payload: &[u8]) -> u8 {
    frame(out, seq, payload)
}

fn coldef(name: &str) -> Vec<u8> {
    let mut c = Vec::new();
    for s in ["def", "", "t", "t", name, name] {
        put_lenenc_bytes(&mut c, s.as_bytes());
    }
    c.extend_from_slice(&[0x0c, 45, 0, 0, 1, 0, 0, 0xfd, 0, 0, 0, 0, 0]);
    c
}

fn text_row(vals: &[&[u8]]) -> Vec<u8> {
    let mut r = Vec::new();
    for v in vals {
        put_lenenc_bytes(&mut r, v);
    }
    r
}

/// A result set with `rows`, ending with status `st`.
fn resultset(out: &mut Vec<u8>, mut seq: u8, rows: &[Vec<u8>], st: u16, deprecate_eof: bool) -> u8 {
    let mut n = Vec::new();
    put_lenenc(&mut n, 2);
    seq = pkt(out, seq, &n);
    seq = pkt(out, seq, &coldef("a"));
    seq = pkt(out, seq, &coldef("b"));
    if !deprecate_eof {
        write_eof(out, seq, 0, st & !status::MORE_RESULTS_EXISTS);
        seq += 1;
    }
    for r in rows {
        seq = pkt(out, seq, r);
    }
    if deprecate_eof {
        write_ok(
            out,
            seq,
            &OkPacket {
                status: st,
                ..Default::default()
            },
            0xfe,
            true,
        );
    } else {
        write_eof(out, seq, 1, st);
    }
    seq + 1
}

/// Runs the scanner over `wire` delivered in chunks of `chunk` bytes; returns the forwarded
/// bytes and the scanner.
fn run(mut s: Scanner, wire: &[u8], chunk: usize) -> (Vec<u8>, Scanner) {
    let mut buf: Vec<u8> = Vec::new();
    let mut fed = 0;
    let mut out = Vec::new();
    loop {
        match s.step(&mut buf) {
            Step::NeedMore => {
                assert!(fed < wire.len(), "scanner wants more than the response has");
                let n = chunk.min(wire.len() - fed);
                buf.extend_from_slice(&wire[fed..fed + n]);
                fed += n;
            }
            Step::Forward(n) => {
                out.extend_from_slice(&buf[..n]);
                buf.drain(..n);
            }
            Step::Replace(n, with) => {
                out.extend_from_slice(&with);
                buf.drain(..n);
            }
            Step::Infile(_) => panic!("unexpected infile"),
            Step::Malformed(why) => panic!("unexpected malformed response: {why}"),
            Step::Done => {
                assert!(
                    buf.is_empty() && fed == wire.len(),
                    "response fully consumed"
                );
                return (out, s);
            }
        }
    }
}

#[test]
fn result_sets_in_both_eof_styles_and_any_chunking() {
    for deprecate in [false, true] {
        let rows = vec![
            text_row(&[b"1", b"x"]),
            text_row(&[b"2", b"y"]),
            text_row(&[b"3", &[0xfe; 3]]),
        ];
        let mut wire = Vec::new();
        resultset(&mut wire, 1, &rows, status::AUTOCOMMIT, deprecate);
        for chunk in [1, 3, 7, 64, 100_000] {
            let (out, s) = run(Scanner::new(Expect::Query, deprecate, true), &wire, chunk);
            assert_eq!(out, wire);
            assert_eq!(s.out.rows, 3, "deprecate={deprecate} chunk={chunk}");
            assert_eq!(s.out.result_sets, 1);
            assert_eq!(s.out.status, status::AUTOCOMMIT);
        }
    }
}

#[test]
fn multiple_results_and_final_ok() {
    let mut wire = Vec::new();
    let seq = resultset(
        &mut wire,
        1,
        &[text_row(&[b"1", b"2"])],
        status::MORE_RESULTS_EXISTS,
        false,
    );
    let seq = resultset(
        &mut wire,
        seq,
        &[],
        status::MORE_RESULTS_EXISTS | status::IN_TRANS,
        false,
    );
    write_ok(
        &mut wire,
        seq,
        &OkPacket {
            affected_rows: 4,
            last_insert_id: 9,
            status: status::IN_TRANS,
            ..Default::default()
        },
        0,
        true,
    );
    let (out, s) = run(Scanner::new(Expect::Query, false, true), &wire, 5);
    assert_eq!(out, wire);
    assert_eq!((s.out.result_sets, s.out.rows), (2, 1));
    assert_eq!(
        (s.out.affected_rows, s.out.last_insert_id, s.out.status),
        (4, 9, status::IN_TRANS)
    );
    assert!(s.out.saw_insert_id);
}

#[test]
fn errors_end_the_response() {
    let mut wire = Vec::new();
    let mut n = Vec::new();
    put_lenenc(&mut n, 1);
    let mut seq = pkt(&mut wire, 1, &n);
    seq = pkt(&mut wire, seq, &coldef("a"));
    write_eof(&mut wire, seq, 0, 0);
    seq += 1;
    seq = pkt(&mut wire, seq, &text_row(&[b"1"]));
    write_err(
        &mut wire,
        seq,
        1317,
        b"70100",
        "Query execution was interrupted",
    );
    let (out, s) = run(Scanner::new(Expect::Query, false, true), &wire, 4);
    assert_eq!(out, wire);
    let e = s.out.error.unwrap();
    assert_eq!((e.code, &e.sqlstate), (1317, b"70100"));
}

#[test]
fn huge_rows_stream_through() {
    let big = vec![b'z'; MAX_PAYLOAD + 1000];
    let mut wire = Vec::new();
    resultset(&mut wire, 1, &[text_row(&[&big, b"q"])], 0, true);
    let (out, s) = run(Scanner::new(Expect::Query, true, true), &wire, 1 << 20);
    assert_eq!(out.len(), wire.len());
    assert!(out == wire);
    assert_eq!(s.out.rows, 1);
}

#[test]
fn ok_is_rewritten_for_clients_without_session_tracking() {
    let mut state = vec![1u8];
    let mut body = Vec::new();
    put_lenenc_bytes(&mut body, b"db2");
    put_lenenc_bytes(&mut state, &body);
    let ok = OkPacket {
        status: status::AUTOCOMMIT | status::SESSION_STATE_CHANGED,
        session_state: &state,
        ..Default::default()
    };
    let mut wire = Vec::new();
    write_ok(&mut wire, 1, &ok, 0, true);
    let (out, s) = run(Scanner::new(Expect::Query, false, false), &wire, 100);
    assert_eq!(s.out.tracker, state);
    let mut expected = Vec::new();
    write_ok(&mut expected, 1, &ok, 0, false);
    assert_eq!(out, expected);
    let (out, _) = run(Scanner::new(Expect::Query, false, true), &wire, 100);
    assert_eq!(out, wire);
}

#[test]
fn prepare_ok_gets_the_proxy_statement_id() {
    for deprecate in [false, true] {
        let mut wire = Vec::new();
        let mut p = vec![0u8];
        p.extend_from_slice(&77u32.to_le_bytes());
        p.extend_from_slice(&2u16.to_le_bytes()); // columns
        p.extend_from_slice(&1u16.to_le_bytes()); // params
        p.extend_from_slice(&[0, 0, 0]);
        let mut seq = pkt(&mut wire, 1, &p);
        seq = pkt(&mut wire, seq, &coldef("?"));
        if !deprecate {
            write_eof(&mut wire, seq, 0, 2);
            seq += 1;
        }
        seq = pkt(&mut wire, seq, &coldef("a"));
        seq = pkt(&mut wire, seq, &coldef("b"));
        if !deprecate {
            write_eof(&mut wire, seq, 0, 2);
        }
        let (out, s) = run(
            Scanner::new(Expect::Prepare, deprecate, true).with_client_stmt_id(5),
            &wire,
            3,
        );
        assert_eq!(
            s.out.prepared,
            Some(Prepared {
                stmt_id: 77,
                columns: 2,
                params: 1,
                warnings: 0
            })
        );
        assert_eq!(&out[5..9], &5u32.to_le_bytes());
        assert_eq!(out.len(), wire.len());
    }
}

#[test]
fn cursor_and_fetch() {
    // EXECUTE with a cursor: column definitions, then EOF with CURSOR_EXISTS, nothing else.
    let mut wire = Vec::new();
    let mut n = Vec::new();
    put_lenenc(&mut n, 1);
    let seq = pkt(&mut wire, 1, &n);
    let seq = pkt(&mut wire, seq, &coldef("a"));
    write_eof(
        &mut wire,
        seq,
        0,
        status::CURSOR_EXISTS | status::AUTOCOMMIT,
    );
    let (_, s) = run(Scanner::new(Expect::Execute, false, true), &wire, 2);
    assert!(s.out.cursor_open);

    let mut wire = Vec::new();
    let seq = pkt(&mut wire, 1, &[0, 0, 1, 2]);
    write_eof(
        &mut wire,
        seq,
        0,
        status::CURSOR_EXISTS | status::LAST_ROW_SENT,
    );
    let (_, s) = run(Scanner::new(Expect::Fetch, false, true), &wire, 2);
    assert_eq!(s.out.rows, 1);
    assert!(s.out.last_row_sent);
}

#[test]
fn simple_and_statistics() {
    let mut wire = Vec::new();
    write_eof(&mut wire, 1, 0, 2);
    let (_, s) = run(Scanner::new(Expect::Simple, false, true), &wire, 1);
    assert!(s.is_done());
    let mut wire = Vec::new();
    pkt(&mut wire, 1, b"Uptime: 5  Threads: 1");
    let (out, _) = run(Scanner::new(Expect::Statistics, false, true), &wire, 4);
    assert_eq!(out, wire);
}

#[test]
fn field_list_until_terminator() {
    for deprecate in [false, true] {
        let mut wire = Vec::new();
        let seq = pkt(&mut wire, 1, &coldef("a"));
        let seq = pkt(&mut wire, seq, &coldef("b"));
        if deprecate {
            write_ok(
                &mut wire,
                seq,
                &OkPacket {
                    status: 2,
                    ..Default::default()
                },
                0xfe,
                true,
            );
        } else {
            write_eof(&mut wire, seq, 0, 2);
        }
        let (out, s) = run(Scanner::new(Expect::FieldList, deprecate, true), &wire, 3);
        assert_eq!(out, wire);
        assert_eq!(s.out.rows, 0);
    }
}

/// Feeds `wire` in chunks of `chunk` bytes until the scanner finds it malformed; returns why
/// and how many bytes were forwarded before.
fn malformed(mut s: Scanner, wire: &[u8], chunk: usize) -> (String, usize) {
    let mut buf: Vec<u8> = Vec::new();
    let (mut fed, mut forwarded) = (0, 0);
    loop {
        match s.step(&mut buf) {
            Step::NeedMore => {
                assert!(fed < wire.len(), "waits for more instead of seeing garbage");
                let n = chunk.min(wire.len() - fed);
                buf.extend_from_slice(&wire[fed..fed + n]);
                fed += n;
            }
            Step::Forward(n) | Step::Replace(n, _) => {
                forwarded += n;
                buf.drain(..n);
            }
            Step::Malformed(why) => return (why, forwarded),
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[test]
fn small_packets_pass_whole_so_a_broken_response_can_end_with_an_error() {
    let rows: Vec<Vec<u8>> = (0..50)
        .map(|i| text_row(&[format!("{i}").as_bytes(), &vec![b'r'; 300 * i]]))
        .collect();
    let mut wire = Vec::new();
    resultset(&mut wire, 1, &rows, 0, true);
    let mut s = Scanner::new(Expect::Query, true, true);
    let mut buf: Vec<u8> = Vec::new();
    let mut fed = 0;
    loop {
        match s.step(&mut buf) {
            Step::NeedMore => {
                // Whatever was passed on so far ends between two packets.
                assert!(s.at_error_point(), "mid-packet after {fed} bytes");
                let n = 1000.min(wire.len() - fed);
                buf.extend_from_slice(&wire[fed..fed + n]);
                fed += n;
            }
            Step::Forward(n) => {
                buf.drain(..n);
            }
            Step::Done => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(s.out.rows, 50);
    // A row larger than that streams through: in the middle of it, no error can be sent.
    let mut s = Scanner::new(Expect::Fetch, true, true);
    let mut big = Vec::new();
    pkt(&mut big, 1, &text_row(&[&vec![b'x'; WHOLE_UP_TO]]));
    let mut part = big[..WHOLE_UP_TO / 2].to_vec();
    assert_eq!(s.step(&mut part), Step::Forward(WHOLE_UP_TO / 2));
    assert!(!s.at_error_point());
}

#[test]
fn garbage_is_told_from_a_response() {
    // Rows whose terminator is replaced by a packet out of sequence (something else took
    // over the connection): the rows pass, the stranger does not.
    let mut wire = Vec::new();
    let mut n = Vec::new();
    put_lenenc(&mut n, 1);
    let mut seq = pkt(&mut wire, 1, &n);
    seq = pkt(&mut wire, seq, &coldef("a"));
    seq = pkt(&mut wire, seq, &text_row(&[b"1"]));
    let rows_end = wire.len();
    pkt(&mut wire, seq + 3, b"garbage");
    let mut s = Scanner::new(Expect::Query, true, true);
    s.expect_first_seq(1);
    let (why, forwarded) = malformed(s.clone(), &wire, 7);
    assert!(why.contains("sequence id"), "{why}");
    assert_eq!(forwarded, rows_end);

    // Text where the response should start: refused at its header, not waited for.
    let http = b"HTTP/1.1 400 Bad Request\r\n\r\n";
    let (why, forwarded) = malformed(s.clone(), http, 64);
    assert!(why.contains("sequence id 80 where 1 was expected"), "{why}");
    assert_eq!(forwarded, 0);

    // A first packet that is neither OK, ERR, LOCAL INFILE nor a column count.
    let mut wire = Vec::new();
    pkt(&mut wire, 1, &[3, 1, 2]);
    let (why, _) = malformed(s.clone(), &wire, 64);
    assert!(why.contains("column count"), "{why}");
    // An OK that does not parse, an answer to COM_PING that is not OK.
    let mut wire = Vec::new();
    pkt(&mut wire, 1, &[0, 0xfc]);
    assert!(malformed(s.clone(), &wire, 64).0.contains("OK packet"));
    let mut wire = Vec::new();
    pkt(&mut wire, 1, b"hello");
    let mut simple = Scanner::new(Expect::Simple, true, true);
    simple.expect_first_seq(1);
    assert!(malformed(simple, &wire, 64).0.contains("OK or ERR"));

    // An error answering the command is taken whatever its sequence id.
    let mut wire = Vec::new();
    write_err(
        &mut wire,
        3,
        1153,
        b"08S01",
        "Got a packet bigger than 'max_allowed_packet'",
    );
    let (out, s) = run(s, &wire, 64);
    assert_eq!(out, wire);
    assert_eq!(s.out.error.map(|e| e.code), Some(1153));
}

/// Found by fuzzing (target `scanner`): a packet header that arrived without its body was,
/// when read again with more bytes, taken for the continuation of itself.
#[test]
fn a_header_read_twice_is_not_its_own_continuation() {
    let mut s = Scanner::new(Expect::Query, true, true);
    let mut wire = vec![0xff, 0xff, 0xff, 1];
    assert_eq!(s.step(&mut wire), Step::NeedMore);
    wire.extend_from_slice(&[0; 10]);
    // Still the first packet and still incomplete: nothing may pass yet.
    assert_eq!(s.step(&mut wire), Step::NeedMore);
}

/// The same with a 16 MiB row whose header arrives alone: the row is counted once.
#[test]
fn a_big_row_whose_header_arrives_alone_is_counted() {
    let mut wire = Vec::new();
    let seq = pkt(&mut wire, 1, &vec![0u8; MAX_PAYLOAD + 3]);
    let ok = OkPacket::default();
    write_ok(&mut wire, seq, &ok, 0xfe, true);
    let mut s = Scanner::new(Expect::Fetch, true, true);
    assert_eq!(s.step(&mut wire[..4].to_vec()), Step::NeedMore);
    let (out, s) = run(s, &wire, 1 << 20);
    assert_eq!(out.len(), wire.len());
    assert_eq!(s.out.rows, 1);
}

/// Found by fuzzing (target `scanner`): an empty packet among rows was judged by the first
/// byte of the packet after it. When that byte (the next packet's length) was 0xFE, the
/// response was taken to end there; and the answer depended on how the bytes arrived.
#[test]
fn an_empty_packet_is_judged_by_itself() {
    let mut wire = Vec::new();
    let mut seq = pkt(&mut wire, 1, &[]);
    seq = pkt(&mut wire, seq, &[b'x'; 0xfe]);
    write_ok(&mut wire, seq, &OkPacket::default(), 0xfe, true);
    for chunk in [1, 3, 4, 5, wire.len()] {
        let (out, s) = run(Scanner::new(Expect::Fetch, true, true), &wire, chunk);
        assert_eq!(out, wire, "chunk {chunk}");
        assert_eq!(s.out.rows, 2, "chunk {chunk}");
    }
    // Column definitions of COM_FIELD_LIST are not rows, however they arrive.
    let mut wire = Vec::new();
    let seq = pkt(&mut wire, 1, &[]);
    write_eof(&mut wire, seq, 0, 2);
    for chunk in [1, 4, wire.len()] {
        let (_, s) = run(Scanner::new(Expect::FieldList, false, true), &wire, chunk);
        assert_eq!(s.out.rows, 0, "chunk {chunk}");
    }
}

/// Found by fuzzing the merged scanner (target `scanner`): an empty packet out of sequence
/// where an answer starts was taken for an error packet when the next header's first byte
/// (a length of 255: 0xFF) arrived with it, and refused when it did not.
#[test]
fn an_empty_packet_out_of_sequence_is_refused_however_it_arrives() {
    let mut wire = Vec::new();
    pkt(&mut wire, 7, &[]);
    pkt(&mut wire, 8, &[b'x'; 255]);
    for chunk in [1, 4, 5, wire.len()] {
        let mut s = Scanner::new(Expect::Query, true, true);
        s.expect_first_seq(1);
        let (why, forwarded) = malformed(s, &wire, chunk);
        assert!(
            why.contains("sequence id 7 where 1"),
            "chunk {chunk}: {why}"
        );
        assert_eq!(forwarded, 0);
    }
}
