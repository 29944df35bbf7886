//! Why a statement could not be completed, in every protocol's pipeline: who failed (the
//! client, the server, the proxy), what the client has seen of the answer, and from that
//! whether the statement may be sent again and whether the client can still be told. Errors a
//! client is sent carry a protocol-neutral kind with the native code and SQLSTATE.

use std::io;
use std::sync::Arc;

/// Who failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The client went away or broke the protocol: its session ends.
    Client,
    /// The server's connection broke, stayed silent too long, or sent something that is not
    /// the protocol: the connection is discarded.
    Server,
    /// The proxy could not serve the statement (no connection could be had, a limit).
    Proxy,
}

/// How much of the answer the client has received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// Nothing: the statement may be retried elsewhere if that is safe.
    Nothing,
    /// Whole messages of it: the client can be sent an error now, and its result is
    /// incomplete.
    Partial,
    /// Part of a message: the client can only be disconnected.
    MidMessage,
}

/// What kind of error a client is sent (each protocol maps it to its native code and
/// SQLSTATE, and keeps the server's own when it has them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The server answered with an error.
    Server,
    /// The connection to the server was lost while the statement ran.
    ServerLost,
    /// No server connection could be had.
    NoBackend,
    /// The statement could not be routed.
    Routing,
    /// A proxy limit was reached (memory, connections).
    Limit,
    /// The client broke the protocol.
    Protocol,
}

/// An error as a client is sent it: a neutral kind, the protocol's native code (MySQL's
/// error number; 0 where the protocol has none) and SQLSTATE, and the message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ClientError {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// The native error code.
    pub code: u16,
    /// The SQLSTATE.
    pub sqlstate: [u8; 5],
    /// The message.
    pub message: String,
}

/// A statement that could not be completed.
#[derive(Debug)]
pub struct Failure {
    /// Who failed.
    pub side: Side,
    /// The server involved, if any (for messages).
    pub server: Option<Arc<str>>,
    /// What happened (`TimedOut`: silent too long; `InvalidData`: malformed).
    pub error: io::Error,
    /// How much of the answer the client has seen.
    pub seen: Seen,
    /// Where the protocol numbers its messages (MySQL's sequence id), the number the error
    /// sent to the client takes.
    pub next_seq: u8,
}

impl Failure {
    /// The client's side failed: the session ends.
    pub fn client(error: io::Error) -> Failure {
        Failure {
            side: Side::Client,
            server: None,
            error,
            seen: Seen::MidMessage,
            next_seq: 0,
        }
    }

    /// The server's connection failed before the client was sent anything; the client
    /// expects message `next_seq`.
    pub fn server_before_answer(server: Arc<str>, error: io::Error, next_seq: u8) -> Failure {
        Failure {
            side: Side::Server,
            server: Some(server),
            error,
            seen: Seen::Nothing,
            next_seq,
        }
    }

    /// True if the client can still be sent an error.
    pub fn can_tell_client(&self) -> bool {
        self.side != Side::Client && self.seen != Seen::MidMessage
    }

    /// Whether the statement may be sent again on another connection: only a read, outside
    /// a transaction, not on a connection the session holds, on the first attempt, when the
    /// server failed before the client saw anything, and not after a time-out (a server that
    /// stayed silent for the read timeout is not waited for twice).
    pub fn may_retry(&self, read: bool, held: bool, in_transaction: bool, attempt: u32) -> bool {
        self.side == Side::Server
            && self.seen == Seen::Nothing
            && self.error.kind() != io::ErrorKind::TimedOut
            && attempt == 0
            && read
            && !held
            && !in_transaction
    }

    /// What happened, for the client and the logs (e.g. "backend 10.0.0.1:3306 sent a
    /// malformed response: ...").
    pub fn what(&self) -> String {
        let server = self.server.as_deref().unwrap_or("?");
        match (self.side, self.error.kind()) {
            (Side::Client, _) => format!("client connection lost: {}", self.error),
            (_, io::ErrorKind::TimedOut | io::ErrorKind::InvalidData) => {
                format!("backend {server} {}", self.error)
            }
            (Side::Proxy, _) => self.error.to_string(),
            _ => format!("lost connection to backend {server}"),
        }
    }
}

/// What stops a statement in the pipeline (route → attach → sync → forward → conclude), for
/// text and prepared statements alike: either an error the client is to be sent as it is
/// (the server refused a step, no connection could be had), or a failure of a side while
/// the statement ran (see [`Failure`]), whose report depends on what the client saw and on
/// the session's transaction.
#[derive(Debug)]
pub enum StmtError {
    /// Tell the client this; the session carries on.
    Told(ClientError),
    /// A side failed while the statement ran.
    Failed(Failure),
}

impl StmtError {
    /// Who failed.
    pub fn side(&self) -> Side {
        match self {
            StmtError::Told(e) => match e.kind {
                ErrorKind::Server | ErrorKind::ServerLost => Side::Server,
                ErrorKind::Protocol => Side::Client,
                ErrorKind::NoBackend | ErrorKind::Routing | ErrorKind::Limit => Side::Proxy,
            },
            StmtError::Failed(f) => f.side,
        }
    }

    /// Whether the statement may be sent again on another connection (see
    /// [`Failure::may_retry`]; an error the client is told is never retried).
    pub fn may_retry(&self, read: bool, held: bool, in_transaction: bool, attempt: u32) -> bool {
        match self {
            StmtError::Told(_) => false,
            StmtError::Failed(f) => f.may_retry(read, held, in_transaction, attempt),
        }
    }
}

impl From<Failure> for StmtError {
    fn from(f: Failure) -> Self {
        StmtError::Failed(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lost(seen: Seen, kind: io::ErrorKind) -> Failure {
        Failure {
            side: Side::Server,
            server: Some(Arc::from("db1")),
            error: io::Error::from(kind),
            seen,
            next_seq: 1,
        }
    }

    #[test]
    fn only_untouched_reads_outside_transactions_are_retried_once() {
        use io::ErrorKind::{ConnectionReset as Reset, TimedOut};
        // (seen, error, read, held, in transaction, attempt) -> retry
        let table = [
            (Seen::Nothing, Reset, true, false, false, 0, true),
            (Seen::Nothing, Reset, true, false, false, 1, false),
            (Seen::Nothing, Reset, false, false, false, 0, false),
            (Seen::Nothing, Reset, true, true, false, 0, false),
            (Seen::Nothing, Reset, true, false, true, 0, false),
            (Seen::Nothing, TimedOut, true, false, false, 0, false),
            (Seen::Partial, Reset, true, false, false, 0, false),
            (Seen::MidMessage, Reset, true, false, false, 0, false),
        ];
        for (seen, kind, read, held, trx, attempt, want) in table {
            let f = lost(seen, kind);
            assert_eq!(
                f.may_retry(read, held, trx, attempt),
                want,
                "{seen:?} {kind:?} read={read} held={held} trx={trx} attempt={attempt}"
            );
        }
        let client = Failure::client(io::Error::from(Reset));
        assert!(!client.may_retry(true, false, false, 0));
        assert!(!client.can_tell_client());
        assert!(lost(Seen::Partial, Reset).can_tell_client());
        assert!(!lost(Seen::MidMessage, Reset).can_tell_client());
    }

    #[test]
    fn told_errors_say_who_failed_and_are_never_retried() {
        let told = |kind| {
            StmtError::Told(ClientError {
                kind,
                code: 0,
                sqlstate: *b"HY000",
                message: String::new(),
            })
        };
        assert_eq!(told(ErrorKind::Server).side(), Side::Server);
        assert_eq!(told(ErrorKind::NoBackend).side(), Side::Proxy);
        assert_eq!(told(ErrorKind::Protocol).side(), Side::Client);
        assert!(!told(ErrorKind::ServerLost).may_retry(true, false, false, 0));
        let failed = StmtError::from(lost(Seen::Nothing, io::ErrorKind::ConnectionReset));
        assert_eq!(failed.side(), Side::Server);
        assert!(failed.may_retry(true, false, false, 0));
    }

    #[test]
    fn messages_name_the_server_and_what_it_did() {
        let malformed = Failure {
            error: io::Error::new(io::ErrorKind::InvalidData, "sent a malformed response"),
            ..lost(Seen::Nothing, io::ErrorKind::Other)
        };
        assert_eq!(malformed.what(), "backend db1 sent a malformed response");
        assert_eq!(
            lost(Seen::Nothing, io::ErrorKind::ConnectionReset).what(),
            "lost connection to backend db1"
        );
    }
}
