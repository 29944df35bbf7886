//! The PostgreSQL front end: what the runtime needs to serve PostgreSQL clients (the session
//! handler, the topology of PostgreSQL connections) and what its sessions share.

use crate::agent::PgAgent;
use crate::backend::{PgConn, PgConnector};
use sluice_config::Config;
use sluice_core::{Cluster, Protocol, Topology};
use sluice_monitor::coordinator::Local;
use sluice_monitor::{Monitor, Settings};
use sluice_runtime::admission::Admission;
use sluice_runtime::frontend::{BoxFuture, Started};
use sluice_runtime::intern::Interner;
use sluice_runtime::listener::{Handler, HandlerFuture, ListenerInfo};
use sluice_runtime::{Frontend, Runtime, StartError};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpStream;
use tokio::sync::watch;

/// Prepared statements each server connection holds at most (the least recently used one is
/// closed beyond it).
pub const STATEMENTS_PER_CONNECTION: usize = 256;

/// Prepared statements one client session may hold at most.
pub const STATEMENTS_PER_SESSION: usize = 10_000;

/// Portals one client session may have open at most (inside a transaction a client may bind
/// any number; sluice keeps an entry for each until the transaction ends).
pub const PORTALS_PER_SESSION: usize = 10_000;

/// The most answers a session's batch may owe while the client has sent neither Sync nor
/// Flush (see docs/sessions.md, "Long batches"): they are kept in sluice's memory, tens of
/// bytes each, and a batch whose messages the server does not answer (sluice answers them,
/// or the server skips them after an error) would grow them without limit.
pub const OWED_ANSWERS_PER_SESSION: usize = 1_000_000;

/// The most bytes of the server's answers sluice reads ahead for a batch the client sends
/// in parts without a Sync or Flush (see [`crate::backend::PgConn::send_reading`]): they wait
/// in its memory, charged to `[proxy] max_request_memory`, until the batch's end is relayed.
pub const OWED_ANSWER_BYTES: usize = 64 << 20;

/// The PostgreSQL front end.
pub struct PostgresFrontend {
    /// The process's shared state.
    pub rt: Arc<Runtime>,
    /// Hostgroups, pools, router of the PostgreSQL servers.
    pub topology: Arc<Topology<Box<PgConn>>>,
    /// Opens server connections.
    pub connector: Arc<PgConnector>,
    /// Functions configured as read-only (`[postgres] read_only_functions`).
    pub read_only_functions: std::collections::HashSet<String>,
    /// Bytes of prepared statements the process, and each session, holds (`[postgres]
    /// max_statement_memory`, `max_statement_memory_per_session`).
    pub statement_memory: sluice_core::StatementMemory,
    /// SCRAM verifiers of configured passwords.
    pub verifiers: crate::frontend::password::Verifiers,
    /// Database names and startup settings, shared by the sessions that have them alike.
    pub shared: Shared,
    /// What logins were told, by kind: the next alike needs no server connection.
    pub welcomes: crate::frontend::welcomes::Welcomes,
    /// The monitor of the PostgreSQL servers (`[monitor] enabled`).
    monitor: Option<Arc<Monitor>>,
    /// Its agent (a reload changes its credentials).
    monitor_agent: Option<Arc<PgAgent>>,
}

/// The monitor's settings for PostgreSQL: the configured ones, without failover and rejoin,
/// which the PostgreSQL agent does not do yet.
fn monitor_settings(config: &Config) -> Settings {
    Settings::from_config(config)
}

/// `[failover] rewind_command` and its time limit.
fn rewind_command(config: &Config) -> Option<crate::agent::RewindCommand> {
    config
        .failover
        .rewind_command
        .clone()
        .map(|command| crate::agent::RewindCommand {
            command,
            timeout: config.failover.rewind_timeout.get(),
        })
}

/// What sessions share instead of holding a copy each.
#[derive(Debug)]
pub struct Shared {
    /// Database names.
    pub databases: Interner<str>,
    /// Startup settings (as [`crate::frontend::state::Settings`] keeps them).
    pub startups: Interner<crate::backend::conn::StartupSettings>,
}

/// Distinct values of each kind shared at most: beyond them (values no session holds are
/// dropped first), a session holds its own copy.
const SHARED_VALUES: usize = 1024;

impl Default for Shared {
    fn default() -> Self {
        Shared {
            databases: Interner::new(SHARED_VALUES),
            startups: Interner::new(SHARED_VALUES),
        }
    }
}

impl PostgresFrontend {
    /// The front end over `rt`, for the PostgreSQL part of its configuration.
    pub fn new(rt: Arc<Runtime>) -> Arc<PostgresFrontend> {
        let config = rt.config.for_protocol(Protocol::Postgres);
        let topology = Arc::new(Topology::from_config(&config));
        let connector = Arc::new(PgConnector {
            users: rt.users.clone(),
            statements_per_connection: STATEMENTS_PER_CONNECTION,
            client_keys: Default::default(),
            read_timeout: sluice_core::ReadTimeout::new(config.pool.read_timeout.get()),
            lifetime: sluice_core::Lifetime::new(config.pool.max_lifetime.get()),
            tls: rt.backend_tls.clone(),
        });
        let read_only_functions = config
            .postgres
            .read_only_functions
            .iter()
            .cloned()
            .collect();
        let statement_memory = sluice_core::StatementMemory::new(
            "[postgres]",
            config.postgres.max_statement_memory,
            config.postgres.max_statement_memory_per_session,
        );
        let monitor_agent = config.monitor.enabled.then(|| {
            let (user, password) = config.monitor_credentials();
            let agent = PgAgent::new(user, password, rt.backend_tls.clone());
            agent.set_rewind_command(rewind_command(&config));
            Arc::new(agent)
        });
        let monitor = monitor_agent.clone().map(|agent| {
            Monitor::new(
                agent,
                topology.clone(),
                monitor_settings(&config),
                Arc::new(Local),
            )
        });
        Arc::new(PostgresFrontend {
            rt,
            topology,
            connector,
            read_only_functions,
            statement_memory,
            verifiers: Default::default(),
            shared: Default::default(),
            welcomes: Default::default(),
            monitor,
            monitor_agent,
        })
    }
}

impl PostgresFrontend {
    /// Where a statement may run: the scanner's route, except that a query writing only by
    /// calling functions configured as read-only is a read.
    pub fn route_of(&self, info: &crate::classify::Scanned) -> sluice_core::router::Route {
        use sluice_core::router::Route;
        match &info.user_calls {
            Some(calls)
                if info.route == Route::Write
                    && calls.iter().all(|f| self.read_only_functions.contains(f)) =>
            {
                Route::Read
            }
            _ => info.route,
        }
    }
}

impl Frontend for PostgresFrontend {
    fn protocol(&self) -> Protocol {
        Protocol::Postgres
    }

    fn cluster(&self) -> Arc<dyn Cluster> {
        self.topology.clone()
    }

    fn monitor(&self) -> Option<&Arc<Monitor>> {
        self.monitor.as_ref()
    }

    fn start(
        self: Arc<Self>,
        shutdown: watch::Receiver<bool>,
    ) -> BoxFuture<'static, Result<Started, StartError>> {
        Box::pin(async move {
            if let Some(m) = &self.monitor {
                // On a thread of its own; roles first, so that the first clients find the
                // primary placed.
                let first_round = m.start(shutdown.clone()).map_err(StartError::Monitor)?;
                let _ = first_round.await;
            }
            let admission = self.rt.client_admission("sorry, too many clients already");
            let handler: Arc<dyn Handler> = Arc::new(PgHandler {
                fe: self.clone(),
                admission,
            });
            Ok(Started {
                handler,
                own_listeners: Vec::new(),
                tasks: Vec::new(),
            })
        })
    }

    fn apply_reload(&self, old: &Config, new: &Config) -> Vec<String> {
        let mut changes = Vec::new();
        if old.pool.read_timeout != new.pool.read_timeout {
            self.connector.read_timeout.set(new.pool.read_timeout.get());
            changes.push(format!(
                "[pool] read_timeout {} (PostgreSQL)",
                new.pool.read_timeout
            ));
        }
        if old.pool.max_lifetime != new.pool.max_lifetime {
            self.connector.lifetime.set(new.pool.max_lifetime.get());
            changes.push(format!(
                "[pool] max_lifetime {} (PostgreSQL)",
                new.pool.max_lifetime
            ));
        }
        self.statement_memory.reload(
            new.postgres.max_statement_memory,
            new.postgres.max_statement_memory_per_session,
            &mut changes,
        );
        if let (Some(m), Some(agent)) = (&self.monitor, &self.monitor_agent) {
            if old.monitor_credentials() != new.monitor_credentials() {
                let (user, password) = new.monitor_credentials();
                agent.set_credentials(user, password);
                m.recheck_privileges();
                changes.push("PostgreSQL monitor credentials".into());
            }
            if rewind_command(old) != rewind_command(new) {
                agent.set_rewind_command(rewind_command(new));
                changes.push("PostgreSQL rewind_command".into());
            }
            let settings = monitor_settings(&new.for_protocol(Protocol::Postgres));
            if m.settings() != settings {
                m.set_settings(settings);
                changes.push("PostgreSQL monitor settings".into());
            }
        }
        changes
    }
}

struct PgHandler {
    fe: Arc<PostgresFrontend>,
    admission: Arc<Admission>,
}

impl Handler for PgHandler {
    fn handle(
        self: Arc<Self>,
        stream: TcpStream,
        peer: SocketAddr,
        listener: Arc<ListenerInfo>,
    ) -> HandlerFuture {
        let place = self.admission.connecting.enter();
        Box::pin(crate::frontend::serve(
            self.fe.clone(),
            self.admission.clone(),
            place,
            stream,
            peer,
            listener,
        ))
    }
}
