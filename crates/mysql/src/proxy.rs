//! The running MySQL proxy: configuration, topology, users, keys, sessions, and listeners.

use crate::agent::MariaDbAgent;
use crate::backend::stmt_cache::StmtCache;
use crate::backend::{BackendConn, MysqlConnector};
use crate::frontend::login::Admission;
use crate::frontend::session;
use crate::server_info::ServerInfo;
use arc_swap::ArcSwap;
use sluice_config::Config;
use sluice_core::connecting::ConnectingGate;
use sluice_core::listener::{self, Handler, HandlerFuture, ListenerInfo};
use sluice_core::login_throttle::{LoginThrottle, ThrottleSettings};
use sluice_core::{DigestTable, Topology};
use sluice_monitor::coordinator::Local;
use sluice_monitor::{Monitor, Settings};
use sluice_runtime::registry::Registry;
use sluice_runtime::users::Users;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

mod reload;

/// Proxy-wide counters.
#[derive(Debug, Default)]
pub struct ProxyStats {
    /// Client connections accepted and authenticated.
    pub clients_connected: AtomicU64,
    /// Client connections refused (limit, bad password, bad handshake).
    pub clients_refused: AtomicU64,
    /// Statements received.
    pub statements: AtomicU64,
}

/// Everything sessions share.
pub struct Proxy {
    /// The configuration in force.
    pub config: Config,
    /// Hostgroups, pools, router.
    pub topology: Arc<Topology<Box<BackendConn>>>,
    /// Users.
    pub users: Arc<ArcSwap<Users>>,
    /// Failed logins per client address (`[login]`).
    pub throttle: LoginThrottle,
    /// The connection-phase budgets of the client listeners and the SQL admin listener.
    login_gates: parking_lot::Mutex<Vec<Arc<ConnectingGate>>>,
    /// Facts learned from servers.
    pub info: Arc<ServerInfo>,
    /// Opens backend connections.
    pub connector: Arc<MysqlConnector>,
    /// Live sessions.
    pub sessions: Registry,
    /// Counters.
    pub stats: ProxyStats,
    /// Statistics per statement shape.
    pub digests: DigestTable,
    /// Schemas recently checked at login, per user.
    pub schemas: crate::schemas::KnownSchemas,
    /// The initial character-set variables per client collation id (at most 256), for the
    /// server facts identified by the first field; shared by every session.
    pub charset_vars: parking_lot::Mutex<(usize, CharsetVars)>,
    /// TLS for clients that ask for it (replaced on reload: certificates are re-read).
    pub tls: ArcSwap<Option<tokio_rustls::TlsAcceptor>>,
    /// The configuration file's content as last applied (at start or by a reload).
    pub loaded: ArcSwap<Config>,
    /// The configuration running now: `loaded`, with servers added or removed over the
    /// admin API. The topology's server list is in its order.
    pub effective: ArcSwap<Config>,
    /// The configuration file, when the proxy was started from one (for reloads).
    pub config_path: std::sync::OnceLock<std::path::PathBuf>,
    /// Serialises reloads.
    reloading: tokio::sync::Mutex<()>,
    /// What new listeners need (set when the proxy starts).
    serving: std::sync::OnceLock<Serving>,
    /// The `[[listeners]]` being served now (a reload adds and removes them).
    extra_listeners: parking_lot::Mutex<Vec<ListenerSlot>>,
    /// Health checks, replication state, failover (unless `[monitor] enabled = false`).
    pub monitor: Option<Arc<Monitor>>,
    /// The monitor's MariaDB agent (a reload changes its credentials).
    monitor_agent: Option<Arc<MariaDbAgent>>,
    /// Bytes of large client requests all sessions may hold at once
    /// (`[proxy] max_request_memory`).
    pub request_memory: Arc<sluice_core::MemoryBudget>,
}

/// Character-set variables by collation id.
pub type CharsetVars =
    std::collections::HashMap<u16, Arc<std::collections::BTreeMap<String, String>>>;

/// Startup failures.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A listener could not be bound.
    #[error("cannot listen on {addr}: {error}")]
    Bind {
        /// The address.
        addr: String,
        /// Why.
        error: std::io::Error,
    },
    /// The TLS certificate or key could not be loaded.
    #[error("TLS: {0}")]
    Tls(String),
    /// The monitor's thread could not be started.
    #[error("cannot start the monitor: {0}")]
    Monitor(std::io::Error),
}

/// The TLS acceptor for `[proxy] tls_cert` / `tls_key`, if configured.
fn tls_acceptor(cfg: &Config) -> Result<Option<tokio_rustls::TlsAcceptor>, String> {
    match (&cfg.proxy.tls_cert, &cfg.proxy.tls_key) {
        (Some(c), Some(k)) => {
            sluice_runtime::tls::acceptor(std::path::Path::new(c), std::path::Path::new(k))
                .map(Some)
        }
        _ => Ok(None),
    }
}

/// A started proxy.
pub struct Running {
    /// The proxy.
    pub proxy: Arc<Proxy>,
    /// Bound addresses: the main listener first, then `[[listeners]]` in order.
    pub addrs: Vec<SocketAddr>,
    /// The MySQL-protocol admin listener's address, if configured.
    pub admin_sql_addr: Option<SocketAddr>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Running {
    /// Stops accepting clients and background work. Sessions in progress end with their
    /// clients.
    pub fn shutdown(&self) {
        let _ = self.shutdown.send(true);
    }

    /// A receiver that turns true when the proxy shuts down (for companion tasks).
    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    /// Waits for the listeners to stop.
    pub async fn wait(mut self) {
        for t in std::mem::take(&mut self.tasks) {
            let _ = t.await;
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

impl Proxy {
    /// Builds the proxy from a validated config.
    pub fn new(config: Config) -> Result<Arc<Proxy>, StartError> {
        let users = Arc::new(ArcSwap::from_pointee(Users::from_config(&config.users)));
        let info = Arc::new(ServerInfo::new(config.proxy.server_version.clone()));
        let backend_tls = match (&config.pool.tls, &config.pool.tls_ca) {
            (true, Some(ca)) => Some(
                crate::backend::BackendTls::from_ca_file(std::path::Path::new(ca))
                    .map_err(StartError::Tls)?,
            ),
            _ => None,
        };
        let connector = Arc::new(MysqlConnector {
            users: users.clone(),
            stmt_cache_size: config.pool.stmt_cache_size as usize,
            info: info.clone(),
            tls: backend_tls.clone(),
            read_timeout: crate::backend::ReadTimeout::new(config.pool.read_timeout.get()),
        });
        let throttle = LoginThrottle::new(ThrottleSettings::from_config(&config.login));
        let topology = Arc::new(Topology::from_config(&config));
        let monitor_agent = config.monitor.enabled.then(|| {
            let (user, password) = config.monitor_credentials();
            Arc::new(MariaDbAgent::new(
                user,
                password,
                config.replication_credentials(),
                backend_tls.clone(),
            ))
        });
        let monitor = monitor_agent.clone().map(|agent| {
            Monitor::new(
                agent,
                topology.clone(),
                Settings::from_config(&config),
                Arc::new(Local),
            )
        });
        let digests = DigestTable::new(if config.digests.enabled {
            config.digests.max_entries as usize
        } else {
            0
        });
        let tls = ArcSwap::from_pointee(tls_acceptor(&config).map_err(StartError::Tls)?);
        let request_memory = sluice_core::MemoryBudget::new(
            usize::try_from(config.proxy.max_request_memory).unwrap_or(usize::MAX),
        );
        let loaded = ArcSwap::from_pointee(config.clone());
        let effective = ArcSwap::from_pointee(config.clone());
        Ok(Arc::new(Proxy {
            topology,
            monitor,
            monitor_agent,
            config,
            users,
            throttle,
            login_gates: Default::default(),
            info,
            connector,
            sessions: Registry::new(),
            stats: ProxyStats::default(),
            digests,
            schemas: Default::default(),
            charset_vars: Default::default(),
            tls,
            loaded,
            effective,
            config_path: std::sync::OnceLock::new(),
            reloading: tokio::sync::Mutex::new(()),
            serving: std::sync::OnceLock::new(),
            extra_listeners: parking_lot::Mutex::new(Vec::new()),
            request_memory,
        }))
    }

    /// Binds every listener and starts serving. Port 0 in a listen address picks a free port;
    /// [`Running::addrs`] tells which.
    pub async fn start(self: &Arc<Self>) -> Result<Running, StartError> {
        let (tx, rx) = watch::channel(false);
        let mut tasks = Vec::new();
        let mut specs: Vec<(String, Option<Arc<str>>)> =
            vec![(self.config.proxy.listen.clone(), None)];
        for l in &self.config.listeners {
            specs.push((l.listen.clone(), l.hostgroup.as_deref().map(Arc::from)));
        }
        let mut bound: Vec<(TcpListener, Arc<ListenerInfo>)> = Vec::new();
        for (addr, hostgroup) in specs {
            let l = listener::bind(&addr, self.config.proxy.reuse_port).map_err(|error| {
                StartError::Bind {
                    addr: addr.clone(),
                    error,
                }
            })?;
            let local = l.local_addr().map_err(|error| StartError::Bind {
                addr: addr.clone(),
                error,
            })?;
            bound.push((
                l,
                Arc::new(ListenerInfo {
                    addr: local,
                    hostgroup,
                }),
            ));
        }
        if let Some(m) = &self.monitor {
            // On a thread of its own (client traffic cannot starve its checks). Roles first:
            // clients arriving at once find the primary placed.
            let first_round = m.start(rx.clone()).map_err(StartError::Monitor)?;
            let _ = first_round.await;
        }
        self.learn_servers().await;
        let max_clients = self.config.proxy.max_client_connections;
        let admission = Arc::new(Admission::new(
            max_clients as usize,
            self.config.login.connecting_budget(max_clients),
            "Too many connections",
        ));
        self.login_gates.lock().push(admission.connecting.clone());
        let handler = Arc::new(MysqlHandler {
            proxy: self.clone(),
            admission,
        });
        let serving = Serving {
            handler: handler.clone(),
            shutdown: rx.clone(),
        };
        let mut addrs = Vec::new();
        for (i, (l, info)) in bound.into_iter().enumerate() {
            addrs.push(info.addr);
            tracing::info!(listen = %info.addr, hostgroup = info.hostgroup.as_deref().unwrap_or("(read/write split)"), "listening");
            if i == 0 {
                tasks.push(tokio::spawn(listener::serve(
                    l,
                    info,
                    handler.clone(),
                    rx.clone(),
                )));
            } else {
                let spec = &self.config.listeners[i - 1];
                let slot = serving.spawn(l, info, spec.listen.clone());
                self.extra_listeners.lock().push(slot);
            }
        }
        let _ = self.serving.set(serving);
        let mut admin_sql_addr = None;
        if let Some((listen, user, password, max)) = self.config.admin.as_ref().and_then(|a| {
            Some((
                a.sql_listen.clone()?,
                a.sql_user.clone(),
                a.sql_password.clone()?,
                a.sql_max_connections,
            ))
        }) {
            let l = listener::bind(&listen, false).map_err(|error| StartError::Bind {
                addr: listen.clone(),
                error,
            })?;
            let info = Arc::new(ListenerInfo {
                addr: l.local_addr().map_err(|error| StartError::Bind {
                    addr: listen.clone(),
                    error,
                })?,
                hostgroup: None,
            });
            admin_sql_addr = Some(info.addr);
            tracing::info!(listen = %info.addr, "admin SQL listening");
            let users = Users::from_config(&[sluice_config::UserConfig {
                name: user,
                password,
                max_connections: 0,
                require_tls: false,
            }]);
            // Its own budgets: a flood of the client ports cannot lock the operator out.
            let admission = Arc::new(Admission::new(
                max as usize,
                self.config.login.connecting_budget(max_clients),
                "Too many admin connections",
            ));
            self.login_gates.lock().push(admission.connecting.clone());
            tasks.push(tokio::spawn(listener::serve(
                l,
                info,
                Arc::new(AdminSqlHandler {
                    proxy: self.clone(),
                    users: Arc::new(users),
                    admission,
                }),
                rx.clone(),
            )));
        }
        tasks.push(tokio::spawn(self.clone().maintain(rx)));
        Ok(Running {
            proxy: self.clone(),
            addrs,
            admin_sql_addr,
            shutdown: tx,
            tasks,
        })
    }

    /// The version string clients are greeted with: the configured one; else the one the
    /// writer (the primary) sends in its own handshake, byte for byte (MariaDB's `5.5.5-`
    /// prefix and `-log` suffix included), so that it follows the primary when it changes;
    /// else the one learned at start.
    pub fn announced_version(&self) -> Arc<str> {
        if let Some(v) = self.info.version_override() {
            return Arc::from(v);
        }
        let writer = self
            .topology
            .writer()
            .and_then(|w| w.servers().iter().find_map(|s| s.version()));
        writer.unwrap_or_else(|| Arc::from(self.info.get().version.as_str()))
    }

    /// Learns version and collations from the first server that answers (bounded in time),
    /// the writer first, logging in as the monitor or as any configured user; clients
    /// connecting before that see built-in defaults. Says why when no server could be used.
    async fn learn_servers(self: &Arc<Self>) {
        // The monitor's login first, then the users in the file's order (at most
        // `LEARN_LOGINS` of them: a user the servers refuse costs one round trip).
        const LEARN_LOGINS: usize = 16;
        let mut logins: Vec<(String, String)> = Vec::new();
        if self.config.monitor.enabled {
            logins.push(self.config.monitor_credentials());
        }
        for u in &self.config.users {
            let l = (u.name.clone(), u.password.clone());
            if !logins.contains(&l) && logins.len() < LEARN_LOGINS {
                logins.push(l);
            }
        }
        let mut servers = self.topology.servers();
        let writer = self
            .topology
            .writer()
            .map(|w| w.servers())
            .unwrap_or_default();
        servers.sort_by_key(|s| !writer.iter().any(|w| Arc::ptr_eq(w, s)));
        let mut failures = Vec::new();
        for server in servers {
            for (user, password) in &logins {
                let attempt = tokio::time::timeout(
                    self.config.pool.connect_timeout.get(),
                    BackendConn::connect_with(
                        &server.address,
                        user,
                        password,
                        0,
                        StmtCache::new(1, Default::default()),
                        self.connector.tls.as_ref(),
                    ),
                )
                .await;
                let mut conn = match attempt {
                    Ok(Ok(conn)) => conn,
                    Ok(Err(e)) => {
                        failures.push(format!("{} as {user}: {e}", server.name));
                        continue;
                    }
                    Err(_) => {
                        failures.push(format!(
                            "{}: no answer within the connect timeout",
                            server.name
                        ));
                        break;
                    }
                };
                server.set_version(&conn.server_version);
                match self.info.learn(&mut conn).await {
                    Ok(()) => {
                        tracing::info!(server = %server.name, version = %self.announced_version(), "learned server version and collations");
                        return;
                    }
                    Err(e) => failures.push(format!(
                        "{} as {user}: reading collations: {e}",
                        server.name
                    )),
                }
            }
        }
        if failures.is_empty() {
            return; // no servers configured
        }
        tracing::warn!(
            reasons = %failures.join("; "),
            "could not read version and collations from any server at startup; announcing a default version until one answers"
        );
    }

    /// Background upkeep: closes idle backend connections past their idle timeout.
    async fn maintain(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.changed() => return,
            }
            let now = Instant::now();
            for hg in self.topology.hostgroups().iter() {
                let closed = hg.close_idle(now);
                if closed > 0 {
                    tracing::debug!(hostgroup = %hg.name, closed, "closed idle backend connections");
                }
            }
        }
    }

    /// Applies `[login]` from a reload: throttling settings and connection-phase budgets.
    pub(crate) fn apply_login(&self, new: &Config) {
        self.throttle
            .set_settings(ThrottleSettings::from_config(&new.login));
        let budget = new
            .login
            .connecting_budget(new.proxy.max_client_connections);
        for gate in self.login_gates.lock().iter() {
            gate.set_capacity(budget);
        }
    }

    /// Counts a refused client.
    pub(crate) fn refused(&self) {
        self.stats.clients_refused.fetch_add(1, Relaxed);
    }
}

struct MysqlHandler {
    proxy: Arc<Proxy>,
    /// Shared by every client listener.
    admission: Arc<Admission>,
}

/// What a listener started after the proxy needs.
struct Serving {
    handler: Arc<MysqlHandler>,
    shutdown: watch::Receiver<bool>,
}

/// A `[[listeners]]` entry being served.
struct ListenerSlot {
    /// As configured.
    listen: String,
    /// Bound address.
    addr: SocketAddr,
    /// Stops accepting (sessions already accepted carry on).
    stop: watch::Sender<bool>,
}

impl Serving {
    /// Serves `l` until it is removed or the proxy shuts down.
    fn spawn(&self, l: TcpListener, info: Arc<ListenerInfo>, listen: String) -> ListenerSlot {
        let (stop, rx) = watch::channel(false);
        let addr = info.addr;
        // The proxy's shutdown stops it too; the relay ends with the listener.
        let relay = stop.clone();
        let mut global = self.shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = async { while !*global.borrow() { if global.changed().await.is_err() { break; } } } => {
                    let _ = relay.send(true);
                }
                _ = relay.closed() => {}
            }
        });
        tokio::spawn(listener::serve(l, info, self.handler.clone(), rx));
        ListenerSlot { listen, addr, stop }
    }
}

/// Serves the MySQL-protocol admin listener.
struct AdminSqlHandler {
    proxy: Arc<Proxy>,
    users: Arc<Users>,
    admission: Arc<Admission>,
}

impl Handler for AdminSqlHandler {
    fn handle(
        self: Arc<Self>,
        stream: TcpStream,
        peer: SocketAddr,
        _listener: Arc<ListenerInfo>,
    ) -> HandlerFuture {
        // Entered here, in the accept loop: places follow the order of acceptance.
        let place = self.admission.connecting.enter();
        Box::pin(crate::frontend::admin_sql::serve(
            self.proxy.clone(),
            self.users.clone(),
            stream,
            peer,
            self.admission.clone(),
            place,
        ))
    }
}

impl Handler for MysqlHandler {
    fn handle(
        self: Arc<Self>,
        stream: TcpStream,
        peer: SocketAddr,
        listener: Arc<ListenerInfo>,
    ) -> HandlerFuture {
        // Entered here, in the accept loop: places follow the order of acceptance.
        let place = self.admission.connecting.enter();
        Box::pin(session::serve(
            self.proxy.clone(),
            stream,
            peer,
            listener,
            self.admission.clone(),
            place,
        ))
    }
}
