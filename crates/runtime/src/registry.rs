//! Live sessions of every protocol, by the id the proxy gave each client: for KILL and
//! cancel requests, and for the admin views (who is connected, pinned or not and why, what
//! they are running).

use crate::HashMap;
use futures_util::task::AtomicWaker;
use parking_lot::Mutex;
use sluice_core::{CancelGate, CancelTicket, Protocol, Server};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::Arc;
use std::task::Poll;
use std::time::Instant;

/// Names the reasons set in a session's pin bits (each protocol has its own).
pub type PinLabels = fn(u32) -> Vec<&'static str>;

/// What identifies a session from outside it: its id (MySQL's connection id, PostgreSQL's
/// process id) and, where the protocol has one, the secret a cancel request must quote.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SessionKey {
    /// The id given to the client.
    pub id: u32,
    /// The cancel secret (0 for protocols without one).
    pub secret: u32,
}

/// Bytes of a statement in flight that views show.
pub const STATEMENT_SHOWN: usize = 256;

/// The shared view of one session.
#[derive(Debug)]
pub struct SessionHandle {
    /// Connection id given to the client.
    pub id: u32,
    /// The protocol the client speaks.
    pub protocol: Protocol,
    /// The cancel secret given to the client (0 for protocols without one).
    pub secret: u32,
    pin_labels: PinLabels,
    /// User name.
    pub user: Arc<str>,
    /// Client address.
    pub peer: SocketAddr,
    /// When the client connected.
    pub connected: Instant,
    pins: AtomicU32,
    current: Mutex<Doing>,
    killed: AtomicBool,
    /// The session's task, when it waits for a kill or, in line for a connection, for a
    /// kept cancel (only that task ever waits).
    kill_waker: AtomicWaker,
    /// Cancels while the session gets a statement's connection ready (see
    /// [`SessionHandle::hold_cancels`]): [`NOT_HOLDING`], [`HOLDING`] or [`HELD`].
    cancels: AtomicU8,
}

const NOT_HOLDING: u8 = 0;
const HOLDING: u8 = 1;
const HELD: u8 = 2;

/// What a session is doing now.
#[derive(Clone, Debug, Default)]
pub struct Current {
    /// The backend connection serving it (server, thread id), if any.
    pub backend: Option<(Arc<Server>, u32)>,
    /// The statement in flight (its text, shared with the session, or its first
    /// [`STATEMENT_SHOWN`] bytes) and when it started.
    pub statement: Option<(Arc<[u8]>, Instant)>,
    /// What lets a cancel or kill reach that connection while it still serves this session,
    /// with the key a cancel quotes (see [`sluice_core::cancel_gate`]); `None`: nothing may
    /// be cancelled there.
    pub cancel: Option<CancelTicket>,
}

/// [`Current`] as kept: the cancel ticket in two parts, the lease epoch in room the backend's
/// leaves (every session has one of these, idle or not).
#[derive(Debug, Default)]
struct Doing {
    backend: Option<(Arc<Server>, u32)>,
    statement: Option<(Arc<[u8]>, Instant)>,
    gate: Option<Arc<CancelGate>>,
    epoch: u32,
    /// A cancel request was passed on to the server for the statement in flight.
    cancel_sent: bool,
}

impl SessionHandle {
    /// Pin reasons now, as the protocol names them.
    pub fn pin_reasons(&self) -> Vec<&'static str> {
        (self.pin_labels)(self.pins.load(Relaxed))
    }
    /// Publishes the pin reasons (the protocol's bits).
    pub fn set_pins(&self, bits: u32) {
        self.pins.store(bits, Relaxed)
    }
    /// Its key, as a kill or cancel request names it.
    pub fn key(&self) -> SessionKey {
        SessionKey {
            id: self.id,
            secret: self.secret,
        }
    }
    /// What it is doing.
    pub fn current(&self) -> Current {
        let d = self.current.lock();
        Current {
            backend: d.backend.clone(),
            statement: d.statement.clone(),
            cancel: d.gate.clone().map(|g| CancelTicket::from_parts(g, d.epoch)),
        }
    }
    /// Records the backend in use (None when it has none), with no way to cancel there.
    pub fn set_backend(&self, b: Option<(Arc<Server>, u32)>) {
        self.set_backend_for_cancel(b, None);
    }

    /// Records the server connection serving the session now (server, process or thread id)
    /// with the ticket a cancel needs to reach it while it serves this session, or that none
    /// is.
    pub fn set_backend_for_cancel(
        &self,
        b: Option<(Arc<Server>, u32)>,
        ticket: Option<CancelTicket>,
    ) {
        let mut d = self.current.lock();
        d.backend = b;
        (d.gate, d.epoch) = match ticket.map(CancelTicket::into_parts) {
            Some((gate, epoch)) => (Some(gate), epoch),
            None => (None, 0),
        };
    }
    /// The statement in flight ended: none is shown, and (with `backend_too`) no server
    /// connection serves the session for cancels any more. One lock for both.
    pub fn end_statement(&self, backend_too: bool) {
        let mut d = self.current.lock();
        d.statement = None;
        if backend_too {
            d.backend = None;
            (d.gate, d.epoch) = (None, 0);
        }
    }
    /// From now until [`SessionHandle::take_held_cancel`], a cancel request for the session
    /// is kept rather than dropped: it has a statement in hand but no server connection
    /// running it yet (waiting in line, or having the session's settings replayed), and a
    /// cancel then means that statement must not run.
    pub fn hold_cancels(&self) {
        self.cancels.store(HOLDING, SeqCst);
    }

    /// Keeps a cancel request if the session holds them now; true if kept.
    pub fn keep_cancel(&self) -> bool {
        let kept = self
            .cancels
            .compare_exchange(HOLDING, HELD, SeqCst, SeqCst)
            .is_ok();
        if kept {
            // The session's own task waits on `kill_waker` for both (a spurious wake of a
            // wait for a kill only checks again).
            self.kill_waker.wake();
        }
        kept
    }

    /// Resolves once a cancel was kept (see [`SessionHandle::keep_cancel`]): the session's
    /// own task waits for it beside its wait for a connection, one wait at a time.
    pub fn cancel_kept(&self) -> impl std::future::Future<Output = ()> + '_ {
        std::future::poll_fn(move |cx| {
            if self.cancels.load(SeqCst) == HELD {
                return Poll::Ready(());
            }
            self.kill_waker.register(cx.waker());
            // Kept between the check and the registration: its wake found no waker.
            if self.cancels.load(SeqCst) == HELD {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
    }

    /// Stops holding cancels; true if one came meanwhile (a cancel that arrives later, after
    /// this, finds the session not holding and is dropped: never one kept for a later
    /// statement).
    pub fn take_held_cancel(&self) -> bool {
        self.cancels.swap(NOT_HOLDING, SeqCst) == HELD
    }

    /// Asks the session to end (KILL CONNECTION).
    pub fn kill(&self) {
        self.killed.store(true, SeqCst);
        self.kill_waker.wake();
    }
    /// True once killed.
    pub fn is_killed(&self) -> bool {
        self.killed.load(SeqCst)
    }
    /// Resolves when the session is killed. Only the session's own task waits for it, one
    /// wait at a time: the future holds nothing but a reference (it sits in every idle
    /// session's state).
    pub fn wait_killed(&self) -> impl std::future::Future<Output = ()> + '_ {
        std::future::poll_fn(move |cx| {
            if self.is_killed() {
                return Poll::Ready(());
            }
            self.kill_waker.register(cx.waker());
            // Killed between the check and the registration: its wake found no waker.
            if self.is_killed() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
    }
    /// Records the statement in flight (None when idle). The text is truncated.
    pub fn set_statement(&self, sql: Option<&[u8]>) {
        let sql = sql.map(|s| Arc::from(&s[..s.len().min(STATEMENT_SHOWN)]));
        self.current.lock().statement = sql.map(|s| (s, Instant::now()));
    }

    /// Sets the statement in flight from a text the session already shares (no copy), started
    /// at `at`.
    pub fn set_statement_shared(&self, sql: Arc<[u8]>, at: Instant) {
        self.current.lock().statement = Some((sql, at));
    }

    /// A statement starts on a server connection: [`SessionHandle::set_backend_for_cancel`]
    /// and, when given, [`SessionHandle::set_statement_shared`], under one lock (this runs for
    /// every statement).
    pub fn begin_statement(
        &self,
        backend: (Arc<Server>, u32),
        ticket: CancelTicket,
        statement: Option<(Arc<[u8]>, Instant)>,
    ) {
        let (gate, epoch) = ticket.into_parts();
        let mut d = self.current.lock();
        d.backend = Some(backend);
        (d.gate, d.epoch) = (Some(gate), epoch);
        d.cancel_sent = false;
        if statement.is_some() {
            d.statement = statement;
        }
    }

    /// A cancel request goes to the server for the statement begun last
    /// ([`SessionHandle::begin_statement`]).
    pub fn note_cancel_sent(&self) {
        self.current.lock().cancel_sent = true;
    }

    /// True if a cancel request went to the server for the statement begun last: whatever
    /// became of that statement, the client asked for it to stop (it must not be run again).
    pub fn cancel_sent(&self) -> bool {
        self.current.lock().cancel_sent
    }
}

/// All sessions.
#[derive(Default)]
pub struct Registry {
    next_id: AtomicU32,
    sessions: Mutex<HashMap<u32, Arc<SessionHandle>>>,
    /// Sessions that may hold user-level locks (`GET_LOCK`), with the backend connection
    /// (server name, thread id) the locks live on: a thread id a lock function reports is
    /// shown as the holding session's id.
    lock_holders: Mutex<HashMap<u32, (Arc<str>, u32)>>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Registry {
        Registry {
            next_id: AtomicU32::new(1),
            sessions: Mutex::new(HashMap::default()),
            lock_holders: Mutex::new(HashMap::default()),
        }
    }

    /// A fresh connection id.
    pub fn next_id(&self) -> u32 {
        loop {
            let id = self.next_id.fetch_add(1, Relaxed);
            if id != 0 {
                return id;
            }
        }
    }

    /// Registers a session of `protocol`, whose pin bits `pin_labels` names.
    pub fn add(
        &self,
        key: SessionKey,
        protocol: Protocol,
        pin_labels: PinLabels,
        user: Arc<str>,
        peer: SocketAddr,
    ) -> Arc<SessionHandle> {
        let id = key.id;
        let h = Arc::new(SessionHandle {
            id,
            protocol,
            secret: key.secret,
            pin_labels,
            user,
            peer,
            connected: Instant::now(),
            pins: AtomicU32::new(0),
            current: Mutex::new(Doing::default()),
            killed: AtomicBool::new(false),
            kill_waker: AtomicWaker::new(),
            cancels: AtomicU8::new(NOT_HOLDING),
        });
        self.sessions.lock().insert(id, h.clone());
        h
    }

    /// Forgets a session.
    pub fn remove(&self, id: u32) {
        self.sessions.lock().remove(&id);
        let mut holders = self.lock_holders.lock();
        // Nearly always empty (MySQL user-level locks): no hashing then.
        if !holders.is_empty() {
            holders.remove(&id);
        }
    }

    /// Records on which backend connection (server name, thread id) session `id` may hold
    /// user-level locks (`None`: it holds none).
    pub fn set_lock_holder(&self, id: u32, on: Option<(Arc<str>, u32)>) {
        let mut h = self.lock_holders.lock();
        match on {
            Some(b) => {
                if h.get(&id) != Some(&b) {
                    h.insert(id, b);
                }
            }
            None => {
                h.remove(&id);
            }
        }
    }

    /// `(backend thread id, session id)` of the sessions that may hold user-level locks on
    /// the servers named `servers`, at most `limit` of them.
    pub fn lock_holders_on(&self, servers: &[Arc<str>], limit: usize) -> Vec<(u32, u32)> {
        self.lock_holders
            .lock()
            .iter()
            .filter(|(_, (server, _))| servers.contains(server))
            .map(|(id, (_, thread))| (*thread, *id))
            .take(limit)
            .collect()
    }

    /// Looks a session up.
    pub fn get(&self, id: u32) -> Option<Arc<SessionHandle>> {
        self.sessions.lock().get(&id).cloned()
    }

    /// Looks a session up by the key a cancel request quotes: the secret must match.
    pub fn by_key(&self, key: SessionKey) -> Option<Arc<SessionHandle>> {
        self.get(key.id).filter(|h| h.secret == key.secret)
    }

    /// Every session.
    pub fn all(&self) -> Vec<Arc<SessionHandle>> {
        self.sessions.lock().values().cloned().collect()
    }

    /// Number of sessions.
    pub fn len(&self) -> usize {
        self.sessions.lock().len()
    }

    /// True if there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(bits: u32) -> Vec<&'static str> {
        if bits & 1 != 0 {
            vec!["transaction"]
        } else {
            vec![]
        }
    }

    #[test]
    fn a_cancel_key_must_quote_the_secret_and_pins_are_named_by_the_protocol() {
        let r = Registry::new();
        let peer: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let key = SessionKey {
            id: r.next_id(),
            secret: 0x5eed,
        };
        let h = r.add(key, Protocol::Postgres, labels, Arc::from("app"), peer);
        assert_eq!(h.key(), key);
        assert!(r.by_key(key).is_some());
        assert!(r.by_key(SessionKey { secret: 1, ..key }).is_none());
        assert!(h.pin_reasons().is_empty());
        h.set_pins(1);
        assert_eq!(h.pin_reasons(), ["transaction"]);
        r.remove(key.id);
        assert!(r.by_key(key).is_none() && r.is_empty());
    }

    #[test]
    fn a_cancel_is_kept_only_while_the_session_holds_them() {
        let r = Registry::new();
        let key = SessionKey {
            id: r.next_id(),
            secret: 1,
        };
        let h = r.add(
            key,
            Protocol::Postgres,
            labels,
            Arc::from("app"),
            "127.0.0.1:1".parse().unwrap(),
        );
        assert!(!h.keep_cancel(), "not holding: dropped");
        assert!(!h.take_held_cancel());
        h.hold_cancels();
        assert!(!h.take_held_cancel(), "none came");
        assert!(!h.keep_cancel(), "no longer holding");
        h.hold_cancels();
        assert!(h.keep_cancel());
        assert!(!h.keep_cancel(), "one is enough");
        assert!(h.take_held_cancel());
        assert!(!h.take_held_cancel(), "taken once");
    }
}
