//! Target `pgwire`: the PostgreSQL wire decoders, for bytes from either side. Input:
//! `[side][chunk seed][stream...]`; side bit 0 picks the client (0) or the server (1).
//!
//! Client bytes: the startup packet (`read_startup`) as it arrives in the pieces the chunk
//! seed says, which must decode the same as the whole and never need more than
//! [`MAX_STARTUP`] bytes; its parameters through every accessor and the `options` reader;
//! then what follows it cut into units (`next_unit` over `read_message`) in order, each
//! inside the bytes, with every message's body through the C-string reader and the whole
//! unit through the unnamed-portal reading. The stream is also given to SCRAM as a client's
//! first and final messages (split at the first NUL): an exchange that accepts a proof it
//! could not have made is a broken invariant.
//!
//! Server bytes: framed with `read_message` in pieces as from a socket, compared with the
//! whole; each message through the decoder of its type (ErrorResponse and NoticeResponse
//! fields, ParameterStatus, ReadyForQuery).

use crate::chunks::Chunks;
use sluice_postgres::backend::conn::{parameter_status, MAX_SERVER_MESSAGE};
use sluice_postgres::frontend::client::MAX_CLIENT_MESSAGE;
use sluice_postgres::frontend::state::startup_options;
use sluice_postgres::frontend::unit::{self, End};
use sluice_postgres::scram::{Prepared, ServerExchange, Verifier};
use sluice_postgres::wire::startup::MAX_STARTUP;
use sluice_postgres::wire::{self, read_message, read_startup, ReadyStatus, Startup};

/// A message limit small enough that inputs reach it (the real ones are 64 MiB).
const SMALL_LIMIT: usize = 4096;

/// The harness body.
pub fn run(data: &[u8]) {
    let [side, seed, stream @ ..] = data else {
        return;
    };
    if side & 1 == 0 {
        client(*seed, stream);
        scram(stream);
    } else {
        server(*seed, stream);
    }
}

/// A client's bytes: the startup packet, then units of messages.
fn client(seed: u8, stream: &[u8]) {
    let whole = read_startup(stream);
    // As it arrives: undecided (`None`) until the packet is whole, then the same answer.
    let mut chunks = Chunks::new(seed);
    let mut have = 0;
    while have < stream.len() {
        have += chunks.next(stream.len() - have);
        match read_startup(&stream[..have]) {
            Ok(None) => assert!(have <= MAX_STARTUP, "undecided after {have} bytes"),
            partial => {
                assert_eq!(partial, whole, "decided differently after {have} bytes");
                break;
            }
        }
    }
    let Ok(Some((startup, used))) = whole else {
        return;
    };
    assert!(
        used <= stream.len() && used <= MAX_STARTUP,
        "took {used} bytes"
    );
    if let Startup::Start(params) = &startup {
        let text = params.text();
        for (k, v) in params.iter() {
            assert!(text.contains(k) && text.contains(v));
            let _ = params.get(k);
        }
        let _ = params.get_all(["user", "database", "options"]);
        let _ = params.database();
        if params.needs_negotiation() {
            let reply = params.negotiate_protocol_version();
            assert_eq!(reply.first(), Some(&b'v'));
        }
        if let Some(options) = params.get("options") {
            let _ = startup_options(options);
        }
    }
    units(&stream[used..]);
}

/// What follows a login: cut into units, each decoded; how many.
fn units(buf: &[u8]) -> usize {
    let (mut at, mut n) = (0, 0);
    while at < buf.len() {
        let rest = &buf[at..];
        let read = |offset: usize| {
            read_message(&rest[offset..], SMALL_LIMIT.min(MAX_CLIENT_MESSAGE))
                .map(|m| m.map(|(m, len)| (m.tag, len)))
        };
        let Ok(Some(u)) = unit::next_unit(rest, read) else {
            return n;
        };
        n += 1;
        assert!(u.len > 0 && u.len <= rest.len(), "unit of {} bytes", u.len);
        let mut end = 0;
        for (tag, start, len) in u.iter() {
            assert_eq!(start, end, "messages in order");
            assert!(len >= 5 && start + len <= u.len, "message inside its unit");
            assert_eq!(rest[start], tag);
            let body = &rest[start + 5..start + len];
            if let Some((s, tail)) = unit::cstr(body) {
                assert_eq!(s.len() + 1 + tail.len(), body.len());
            }
            end = start + len;
        }
        assert_eq!(end, u.len, "the unit is its messages");
        let _ = unit::unnamed_portal_use(rest, &u);
        if u.end == End::Terminate {
            return n;
        }
        at += u.len;
    }
    n
}

/// SCRAM's server side given the stream as a client's two messages.
fn scram(stream: &[u8]) {
    let (first, last) = match stream.iter().position(|&b| b == 0) {
        Some(i) => (&stream[..i], &stream[i + 1..]),
        None => (stream, &b""[..]),
    };
    let (Ok(first), Ok(last)) = (std::str::from_utf8(first), std::str::from_utf8(last)) else {
        return;
    };
    let Ok(exchange) = exchange(first) else {
        return;
    };
    assert!(exchange.server_first().starts_with("r="));
    // A proof the input could not know (it never saw the password's keys).
    assert!(
        exchange.finish(last).is_err(),
        "accepted a final message made without the password"
    );
}

/// The password the harness's SCRAM exchanges check proofs against.
const PASSWORD: &str = "pencil";

/// SCRAM's server side for a client's first message, with a fixed verifier and nonce.
fn exchange(client_first: &str) -> Result<ServerExchange, sluice_postgres::scram::ScramError> {
    let verifier = Verifier::from_password(PASSWORD, b"fuzzing salt", 1);
    ServerExchange::start(&Prepared::new(&verifier), client_first, "srvnonce")
}

/// A server's bytes: framed as they arrive, each message decoded.
fn server(seed: u8, stream: &[u8]) {
    let limit = if seed & 0x80 != 0 {
        SMALL_LIMIT
    } else {
        MAX_SERVER_MESSAGE
    };
    // The reference: framed from the whole stream.
    let mut whole = Vec::new();
    let mut at = 0;
    let whole_end = loop {
        match read_message(&stream[at..], limit) {
            Ok(Some((m, len))) => {
                assert!(len >= 5 && at + len <= stream.len() && len - 5 == m.body.len());
                assert!(len <= limit.saturating_add(1), "{len} bytes over {limit}");
                whole.push((m.tag, at, len));
                decode(m.tag, m.body);
                at += len;
            }
            Ok(None) => break Ok(at),
            Err(e) => break Err(e),
        }
    };
    // As it arrives: the same messages, and the same error at the same place.
    let mut chunks = Chunks::new(seed & 0x7f);
    let (mut have, mut at, mut seen) = (0, 0, 0);
    let arrived_end = 'read: loop {
        let more = chunks.next(stream.len() - have);
        if more == 0 {
            break Ok(at);
        }
        have += more;
        loop {
            match read_message(&stream[at..have], limit) {
                Ok(Some((m, len))) => {
                    assert_eq!(whole.get(seen), Some(&(m.tag, at, len)), "message {seen}");
                    seen += 1;
                    at += len;
                }
                Ok(None) => break,
                Err(e) => break 'read Err(e),
            }
        }
    };
    assert_eq!(seen, whole.len(), "messages framed as they arrived");
    assert_eq!(arrived_end, whole_end, "where framing ended");
}

/// One server message's decoder, by type.
fn decode(tag: u8, body: &[u8]) {
    match tag {
        b'E' | b'N' => {
            let fields = wire::error_fields(body);
            let parts = wire::error_parts(body);
            assert_eq!(fields.is_ok(), parts.is_ok());
            let _ = wire::ends_session(body);
            let _ = wire::error_message(body);
        }
        b'S' => {
            // (The value's closing NUL may be missing: read up to the end.)
            if let Some((name, value)) = parameter_status(body) {
                assert!(name.len() + 1 + value.len() <= body.len());
            }
        }
        b'Z' => {
            let _ = body.first().copied().and_then(ReadyStatus::from_byte);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_postgres::scram_client::{ClientExchange, ClientSecret};

    fn message(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![tag];
        m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    /// The harness reaches the units: a query, an extended batch ended by a Sync, and a
    /// Terminate after which nothing is read.
    #[test]
    fn units_after_a_login_are_cut_and_counted() {
        let mut buf = message(b'Q', b"SELECT 1\0");
        buf.extend(message(b'P', b"\0SELECT 2\0\0\0"));
        buf.extend(message(b'S', b""));
        buf.extend(message(b'X', b""));
        buf.extend(message(b'Q', b"SELECT 3\0"));
        assert_eq!(units(&buf), 3);
    }

    /// The SCRAM invariant is not vacuous: the exchange the harness builds accepts the proof
    /// of a client that knows the password, and refuses one that does not.
    #[test]
    fn the_harness_exchange_accepts_only_a_proof_made_with_the_password() {
        for (password, accepted) in [(PASSWORD, true), ("not it", false)] {
            let (mut client, first) =
                ClientExchange::start(ClientSecret::Password(password.into()), "clientnonce");
            let server = exchange(&first).unwrap();
            let last = client.respond(server.server_first()).unwrap();
            assert_eq!(server.finish(&last).is_ok(), accepted, "{password}");
        }
    }
}
