//! The MySQL front end: what the runtime needs to serve MySQL/MariaDB clients (the session
//! handler, the topology of MySQL connections, the MariaDB monitor agent, the MySQL-protocol
//! admin port) and the MySQL-only facts sessions share (server versions and collations,
//! character-set variables, recently checked schemas).

use crate::agent::MariaDbAgent;
use crate::backend::stmt_cache::StmtCache;
use crate::backend::{BackendConn, MysqlConnector};
use crate::frontend::login::Admission;
use crate::frontend::session;
use crate::server_info::ServerInfo;
use sluice_config::Config;
use sluice_core::{Cluster, Protocol, Topology};
use sluice_monitor::coordinator::Local;
use sluice_monitor::{Monitor, Settings};
use sluice_runtime::frontend::{BoxFuture, Started};
use sluice_runtime::listener::{self, Handler, HandlerFuture, ListenerInfo};
use sluice_runtime::{Frontend, ReloadError, Runtime, StartError, Users};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpStream;
use tokio::sync::watch;

/// The MySQL front end: everything MySQL sessions share beyond the runtime.
pub struct MysqlFrontend {
    /// The process's shared state.
    pub rt: Arc<Runtime>,
    /// Hostgroups, pools, router.
    pub topology: Arc<Topology<Box<BackendConn>>>,
    /// Facts learned from servers.
    pub info: Arc<ServerInfo>,
    /// Opens backend connections.
    pub connector: Arc<MysqlConnector>,
    /// Schemas recently checked at login, per user.
    pub schemas: crate::schemas::KnownSchemas,
    /// The initial character-set variables per client collation id (at most 256), for the
    /// server facts identified by the first field; shared by every session.
    pub charset_vars: parking_lot::Mutex<(usize, CharsetVars)>,
    /// Health checks, replication state, failover (unless `[monitor] enabled = false`).
    pub monitor: Option<Arc<Monitor>>,
    /// The monitor's MariaDB agent (a reload changes its credentials).
    monitor_agent: Option<Arc<MariaDbAgent>>,
    /// Bytes of prepared statements' texts the sessions, and each of them, hold (`[mysql]
    /// max_statement_memory`, `max_statement_memory_per_session`).
    pub statement_memory: sluice_core::StatementMemory,
}

/// Character-set variables by collation id.
pub type CharsetVars =
    std::collections::HashMap<u16, Arc<std::collections::BTreeMap<String, String>>>;

impl MysqlFrontend {
    /// The MySQL front end over `rt`, for its validated configuration.
    pub fn new(rt: Arc<Runtime>) -> Arc<MysqlFrontend> {
        let config = &rt.config.for_protocol(Protocol::Mysql);
        let info = Arc::new(ServerInfo::new(config.mysql.server_version.clone()));
        let connector = Arc::new(MysqlConnector {
            users: rt.users.clone(),
            stmt_cache_size: config.mysql.stmt_cache_size as usize,
            info: info.clone(),
            tls: rt.backend_tls.clone(),
            read_timeout: crate::backend::ReadTimeout::new(config.pool.read_timeout.get()),
            lifetime: sluice_core::Lifetime::new(config.pool.max_lifetime.get()),
            budgets: Default::default(),
        });
        let topology = Arc::new(Topology::from_config(config));
        let monitor_agent = config.monitor.enabled.then(|| {
            let (user, password) = config.monitor_credentials();
            Arc::new(MariaDbAgent::new(
                user,
                password,
                config.replication_credentials(),
                rt.backend_tls.clone(),
            ))
        });
        let monitor = monitor_agent.clone().map(|agent| {
            Monitor::new(
                agent,
                topology.clone(),
                Settings::from_config(config),
                Arc::new(Local),
            )
        });
        Arc::new(MysqlFrontend {
            topology,
            monitor,
            monitor_agent,
            info,
            connector,
            schemas: Default::default(),
            charset_vars: Default::default(),
            statement_memory: sluice_core::StatementMemory::new(
                "[mysql]",
                config.mysql.max_statement_memory,
                config.mysql.max_statement_memory_per_session,
            ),
            rt,
        })
    }

    /// A process serving MySQL only, for a validated configuration: the runtime, and this
    /// front end over it.
    pub fn process(
        config: Config,
    ) -> Result<(Arc<sluice_runtime::Process>, Arc<MysqlFrontend>), StartError> {
        let rt = Runtime::new(config)?;
        let mysql = MysqlFrontend::new(rt.clone());
        let process = sluice_runtime::Process::new(rt, vec![mysql.clone()]);
        Ok((process, mysql))
    }

    /// Starts the monitor (its first round places the servers), learns the servers, and
    /// opens the MySQL-protocol admin listener if configured.
    async fn start_mysql(
        self: Arc<Self>,
        rx: watch::Receiver<bool>,
    ) -> Result<Started, StartError> {
        let config = &self.rt.config;
        if let Some(m) = &self.monitor {
            // On a thread of its own (client traffic cannot starve its checks). Roles first:
            // clients arriving at once find the primary placed.
            let first_round = m.start(rx.clone()).map_err(StartError::Monitor)?;
            let _ = first_round.await;
        }
        self.learn_servers().await;
        let max_clients = config.proxy.max_client_connections;
        let admission = self.rt.client_admission("Too many connections");
        let handler: Arc<dyn Handler> = Arc::new(MysqlHandler {
            proxy: self.clone(),
            admission,
        });
        let mut started = Started {
            handler,
            own_listeners: Vec::new(),
            tasks: Vec::new(),
        };
        if let Some((listen, user, password, max)) = config.admin.as_ref().and_then(|a| {
            Some((
                a.sql_listen.clone()?,
                a.sql_user.clone(),
                a.sql_password.clone()?,
                a.sql_max_connections,
            ))
        }) {
            let bind_error = |error| StartError::Bind {
                addr: listen.clone(),
                error,
            };
            let l = listener::bind(&listen, false).map_err(bind_error)?;
            let info = Arc::new(ListenerInfo {
                addr: l.local_addr().map_err(bind_error)?,
                hostgroup: None,
            });
            started.own_listeners.push((ADMIN_SQL, info.addr));
            tracing::info!(listen = %info.addr, "admin SQL listening");
            let users = Users::from_config(&[sluice_config::UserConfig {
                name: user,
                password,
                max_connections: 0,
                require_tls: false,
                auth_method: Default::default(),
                read_your_writes: false,
            }]);
            // Its own budgets: a flood of the client ports cannot lock the operator out.
            let admission = Arc::new(Admission::new(
                max as usize,
                config.login.connecting_budget(max_clients),
                "Too many admin connections",
            ));
            self.rt.add_login_gate(admission.connecting.clone());
            started.tasks.push(tokio::spawn(listener::serve(
                l,
                info,
                Arc::new(AdminSqlHandler {
                    proxy: self.clone(),
                    users: Arc::new(users),
                    admission,
                }),
                rx,
            )));
        }
        Ok(started)
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
        if self.rt.config.monitor.enabled {
            logins.push(self.rt.config.monitor_credentials());
        }
        for u in &self.rt.config.users {
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
                    self.rt.config.pool.connect_timeout.get(),
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
}

struct MysqlHandler {
    proxy: Arc<MysqlFrontend>,
    /// Shared by every client listener.
    admission: Arc<Admission>,
}

/// Serves the MySQL-protocol admin listener.
struct AdminSqlHandler {
    proxy: Arc<MysqlFrontend>,
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

/// The name of the MySQL-protocol admin listener among the front end's own listeners.
pub const ADMIN_SQL: &str = "admin SQL";

impl Frontend for MysqlFrontend {
    fn protocol(&self) -> Protocol {
        Protocol::Mysql
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
        Box::pin(self.start_mysql(shutdown))
    }

    fn check_reload(&self, old: &Config, new: &Config) -> Result<(), ReloadError> {
        // The greeting, the packet limit and the statement caches are fixed at start; the
        // statements' memory limits and the stall limit are not.
        let fixed = |c: &Config| {
            let mut m = c.mysql.clone();
            m.max_statement_memory = 0;
            m.max_statement_memory_per_session = 0;
            m.net_read_timeout = sluice_config::HumanDuration::from_millis(0);
            m
        };
        if fixed(old) != fixed(new) {
            return Err(ReloadError::NeedsRestart(vec!["[mysql]".into()]));
        }
        Ok(())
    }

    fn apply_reload(&self, old: &Config, new: &Config) -> Vec<String> {
        let mut changes = Vec::new();
        if let Some(m) = &self.monitor {
            let creds = |c: &Config| (c.monitor_credentials(), c.replication_credentials());
            if creds(old) != creds(new) {
                let ((user, password), replication) = creds(new);
                if let Some(agent) = &self.monitor_agent {
                    agent.set_credentials(user, password, replication);
                }
                m.recheck_privileges();
                changes.push("monitor credentials".into());
            }
            let settings = Settings::from_config(new);
            if m.settings() != settings {
                m.set_settings(settings);
                changes.push("monitor and failover settings".into());
            }
        }
        if old.pool.read_timeout != new.pool.read_timeout {
            self.connector.read_timeout.set(new.pool.read_timeout.get());
            changes.push(format!("[pool] read_timeout {}", new.pool.read_timeout));
        }
        if old.pool.max_lifetime != new.pool.max_lifetime {
            self.connector.lifetime.set(new.pool.max_lifetime.get());
            changes.push(format!("[pool] max_lifetime {}", new.pool.max_lifetime));
        }
        if old.mysql.net_read_timeout != new.mysql.net_read_timeout {
            // Read at every request that does not arrive whole.
            changes.push(format!(
                "[mysql] net_read_timeout {}",
                new.mysql.net_read_timeout
            ));
        }
        if old.users != new.users {
            // A user's password or schemas may have changed.
            self.schemas.clear();
        }
        self.statement_memory.reload(
            new.mysql.max_statement_memory,
            new.mysql.max_statement_memory_per_session,
            &mut changes,
        );
        changes
    }
}
