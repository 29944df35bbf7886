//! From a client's first packet to its session: the login (TLS, startup, password), the
//! admission, the session's registration and settings, then the session itself until it
//! ends. The login and the session are futures of their own, so that an idle session's
//! memory holds neither the login's state nor a unit's.

use super::client::Client;
use super::login::{self, Outcome};
use super::session::Session;
use super::state::{pin, Settings};
use crate::front::PostgresFrontend;
use crate::wire::ReadyStatus;
use sluice_core::connecting::Connecting;
use sluice_core::{PoolKey, Protocol};
use sluice_runtime::admission::Admission;
use sluice_runtime::listener::ListenerInfo;
use sluice_runtime::tls::MaybeTls;
use sluice_runtime::SessionKey;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use tokio::net::TcpStream;
use tracing::level_filters::LevelFilter;

/// How long closing a cancel request's connection may take (a TLS close_notify to send).
const CANCEL_CLOSE: std::time::Duration = std::time::Duration::from_secs(1);

/// Serves one client from its first packet to its last. The login and the session are
/// futures of their own: the login is boxed, so that an idle session's memory holds none of
/// its state (nor the arguments it consumed), and the session lives in a box of its own.
pub fn serve(
    fe: Arc<PostgresFrontend>,
    admission: Arc<Admission>,
    place: Connecting,
    stream: TcpStream,
    peer: SocketAddr,
    listener: Arc<ListenerInfo>,
) -> impl Future<Output = ()> + Send {
    // A plain fn: the arguments live in the login's box only, not in the session's future.
    live_after(Box::pin(open(fe, admission, place, stream, peer, listener)))
}

/// The session, once the login gave one.
async fn live_after<F: Future<Output = Option<Box<Session>>>>(login: Pin<Box<F>>) {
    if let Some(session) = login.await {
        session.live().await;
    }
}

/// The login: a session (holding its admission permit), unless the client is refused, fails
/// to log in or only cancels a statement.
async fn open(
    fe: Arc<PostgresFrontend>,
    admission: Arc<Admission>,
    place: Connecting,
    stream: TcpStream,
    peer: SocketAddr,
    listener: Arc<ListenerInfo>,
) -> Option<Box<Session>> {
    let mut client = Client {
        stream: MaybeTls::Plain(stream),
        buf: sluice_runtime::buffers::read_buffer(),
        pending: Vec::new(),
        charge: fe.rt.request_memory.charge(),
        over_budget: None,
        fatal_sent: false,
    };
    let timeout = fe.rt.effective.load().login.handshake_timeout.get();
    let tls = fe.rt.tls.load_full();
    let users = fe.rt.users.load_full();
    let throttle = login::Throttle {
        throttle: &fe.rt.throttle,
        ip: peer.ip(),
    };
    let outcome = tokio::select! {
        // Boxed: the login's state is not kept in the session's future once it is done.
        r = tokio::time::timeout(timeout, Box::pin(login::accept(&mut client, &users, &fe.verifiers, (*tls).as_ref(), &throttle))) => match r {
            Ok(Ok(o)) => o,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "login failed");
                return None;
            }
            Err(_) => {
                let _ = client.fatal("08006", "sluice: login timed out").await;
                return None;
            }
        },
        _ = place.evicted() => return None,
    };
    drop(place);
    let (params, user) = match outcome {
        Outcome::Cancel { pid, secret } => {
            super::cancel::forward(&fe.rt.sessions, pid, secret, fe.connector.tls.as_ref()).await;
            // Closed as PostgreSQL closes it: over TLS with close_notify first (libpq 17's
            // cancel, `PQcancelBlocking`, reports a bare end of the stream as its failure).
            let close = tokio::io::AsyncWriteExt::shutdown(&mut client.stream);
            let _ = tokio::time::timeout(CANCEL_CLOSE, close).await;
            return None;
        }
        Outcome::LoggedIn(p, u, client_key) => {
            if let Some(key) = client_key.filter(|_| u.password.starts_with("SCRAM-SHA-256$")) {
                // Needed for server logins with the stored secret (SCRAM pass-through).
                fe.connector.remember_client_key(&u.name, &u.password, key);
            }
            (p, u)
        }
    };
    // The settings in `options` (`-c name=value`): applied before the packet's own, as
    // PostgreSQL applies them; anything else there is refused, not dropped.
    let options = params.get("options");
    let options = match options.map(super::state::startup_options).transpose() {
        Ok(o) => o.unwrap_or_default(),
        Err(msg) => {
            let _ = client.fatal("0A000", &msg).await;
            return None;
        }
    };
    let Ok(permit) = admission.clients.clone().try_acquire_owned() else {
        let _ = client.fatal("53300", admission.too_many).await;
        return None;
    };
    // The user's `max_connections`, refused in PostgreSQL's words for a role's limit.
    let Some(counted) = sluice_runtime::users::UserConnection::new(&user) else {
        let msg = format!("too many connections for role \"{}\"", user.name);
        let _ = client.fatal("53300", &msg).await;
        return None;
    };
    let database = fe
        .shared
        .databases
        .intern(params.database().unwrap_or(&user.name));
    let key = SessionKey {
        id: fe.rt.sessions.next_id(),
        secret: rand_u32(),
    };
    let handle = fe.rt.sessions.add(
        key,
        Protocol::Postgres,
        pin::labels,
        user.name.clone(),
        peer,
    );
    // The session span is at INFO: when that level is off, there is none to fill in.
    if LevelFilter::current() >= LevelFilter::INFO {
        let span = tracing::Span::current();
        span.record("id", key.id);
        span.record("user", &*user.name);
    }
    let startup = options.iter().map(|(k, v)| (k.as_str(), v.as_str())).chain(
        params
            .iter()
            .filter(|(k, _)| !matches!(*k, "user" | "database" | "options" | "replication")),
    );
    let settings =
        Settings::from_startup_packet(params.text().as_bytes(), startup, &fe.shared.startups);
    // The startup packet is not kept: what moves is in the settings now.
    drop(params);
    let s = Box::new(Session {
        key: PoolKey {
            user: user.name.clone(),
            database: Some(database),
            variant: 0,
        },
        fe: fe.clone(),
        client,
        handle,
        listener,
        settings,
        pins: 0,
        statements: Default::default(),
        unnamed: None,
        portals: Default::default(),
        lease: None,
        lease_generation: 0,
        lease_has_unnamed: false,
        status: ReadyStatus::Idle,
        ryw: super::ryw::Ryw::new(user.read_your_writes),
        reported: Arc::default(),
        deferred_begin: None,
        cancels_held: false,
        statement_budget: Default::default(),
        refused_to_sync: false,
        parsed_setting_changes: false,
        parsed_begin: false,
        block_settings: 0,
        held_by_flush: false,
        implicit_reads_only: true,
        implicit_suspended: false,
        implicit_open: false,
        implicit_failed: false,
        pending_unpins: 0,
        skipping: false,
        owed: Default::default(),
        owed_charge: None,
        copies_open: 0,
        sequences: Default::default(),
        _admitted: permit,
        _counted: counted,
    });
    Some(s)
}

impl Session {
    /// The session after its login, to its end; then its connection goes back to the pool
    /// (or is closed, when mid-transaction or pinned) and it leaves the registry.
    async fn live(mut self: Box<Self>) {
        let key = self.handle.key();
        // Matched apart: a result kept alive across run() would take room in every idle
        // session's future.
        let welcomed = match Box::pin(self.welcome(key)).await {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!(error = %e, "session ended during login");
                false
            }
        };
        // Matched apart too, and what follows an error boxed: an error kept alive across an
        // await would take room in every idle session's future.
        let failed = welcomed
            && match self.run().await {
                Ok(()) => false,
                Err(e) => {
                    tracing::debug!(error = %e, "session ended");
                    true
                }
            };
        if failed {
            Box::pin(self.after_failure()).await;
        }
        self.give_back_connection();
        // Dropped here: the session leaves the registry, then its admission permit goes
        // (see `Session::drop`).
    }

    /// The session's connection back to the pool, or closed: mid-transaction, pinned state,
    /// or a batch the client never ended with a Sync (its implicit transaction is open, and
    /// a disconnect is what rolls it back) cannot serve anyone else.
    fn give_back_connection(&mut self) {
        if let Some(mut lease) = self.lease.take() {
            if self.status != ReadyStatus::Idle || self.pins != 0 || lease.conn().unsynced {
                lease.discard();
            }
        }
    }

    /// The session failed: a client message the memory budget refused is answered, and
    /// after a FATAL the client is given the time to read it.
    async fn after_failure(&mut self) {
        if let Some((received, over)) = self.client.over_budget.take().map(|b| *b) {
            self.refuse_over_budget(received, over).await;
        }
        if self.client.fatal_sent {
            self.close_after_fatal().await;
        }
    }

    /// After a FATAL ended the session: its connection and what it holds against the
    /// process's budgets go first, then sluice reads what the client still sends until it
    /// leaves (at most `[login] handshake_timeout`), so that a client still sending reads the
    /// FATAL instead of a reset (see [`super::client::Client::close_after_fatal`]).
    async fn close_after_fatal(&mut self) {
        self.give_back_connection();
        self.owed = None;
        self.owed_charge = None;
        self.statements = Default::default();
        self.portals = Default::default();
        self.unnamed = None;
        let drain = self.fe.rt.effective.load().login.handshake_timeout.get();
        self.client.close_after_fatal(drain).await;
    }
}

/// A cancel secret: unpredictable, so that only the client given it can cancel.
fn rand_u32() -> u32 {
    let mut b = [0u8; 4];
    crate::scram::random_bytes(&mut b);
    u32::from_be_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::Session;

    fn future_size<F, Fut>(_: F) -> usize
    where
        F: FnOnce(Box<Session>) -> Fut,
    {
        std::mem::size_of::<Fut>()
    }

    /// Every idle session holds its `live` future (the idle client's cost, docs/benchmarks.md:
    /// under 2 KiB in all): what follows the session's end, an error above all, stays out of
    /// it, in boxes of its own, and nothing a unit or its look-up holds is kept across an
    /// await of the idle wait.
    #[test]
    fn an_idle_sessions_future_holds_no_more_than_waiting_takes() {
        let size = future_size(Session::live);
        assert!(size <= 232, "{size} bytes");
    }

    /// Every idle session holds its `Session` (504 bytes in a release build): what only a
    /// transaction block, a batch or a COPY needs is boxed, and only there while it is
    /// needed. (Counted without the client's connection, whose size tokio's test features
    /// change.)
    #[test]
    fn an_idle_session_holds_no_room_for_what_only_a_block_needs() {
        use std::mem::size_of;
        let size = size_of::<Session>() - size_of::<super::Client>();
        assert!(size <= 384, "{size} bytes");
    }
}
