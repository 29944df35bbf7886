//! The configuration types, with their defaults. Field-by-field documentation for users lives
//! in `docs/configuration.md`; keep the two in step.

use crate::{AdminConfig, DigestsConfig, FailoverConfig, HumanDuration, MonitorConfig, Protocol};
use serde::{Deserialize, Serialize};

/// The whole configuration file.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The main read/write-splitting listener and proxy-wide settings.
    #[serde(default)]
    pub proxy: ProxyConfig,
    /// Extra listeners, each optionally pinned to one hostgroup.
    #[serde(default)]
    pub listeners: Vec<ListenerConfig>,
    /// Client users; the same credentials log in to the servers.
    #[serde(default)]
    pub users: Vec<UserConfig>,
    /// Backend servers.
    #[serde(default)]
    pub servers: Vec<ServerConfig>,
    /// Optional per-hostgroup settings (balancing policy).
    #[serde(default)]
    pub hostgroups: Vec<HostgroupConfig>,
    /// Query rules, evaluated in order; the first match wins.
    #[serde(default)]
    pub rules: Vec<RuleConfig>,
    /// Backend connection pool settings.
    #[serde(default)]
    pub pool: PoolConfig,
    /// Logging.
    #[serde(default)]
    pub log: LogConfig,
    /// Health checks and replication monitoring.
    #[serde(default)]
    pub monitor: MonitorConfig,
    /// Automatic primary failover.
    #[serde(default)]
    pub failover: FailoverConfig,
    /// The HTTP admin API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin: Option<AdminConfig>,
    /// Query digest statistics.
    #[serde(default)]
    pub digests: DigestsConfig,
    /// The connection phase: handshake timeout and budget, failed-login throttling.
    #[serde(default)]
    pub login: crate::LoginConfig,
    /// What only MySQL clients and servers have.
    #[serde(default)]
    pub mysql: crate::MysqlConfig,
    /// What only PostgreSQL clients and servers have.
    #[serde(default, skip_serializing_if = "crate::PostgresConfig::is_default")]
    pub postgres: crate::PostgresConfig,
    /// `[[discovery]]`: sources of servers found at runtime.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub discovery: Vec<crate::DiscoveryConfig>,
}

/// `[proxy]`: the read/write-splitting listener and proxy-wide settings.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProxyConfig {
    /// Address of the MySQL read/write-splitting listener, `host:port`; optional when
    /// `[[listeners]]` exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    /// Name of the hostgroup that takes writes and transactions.
    #[serde(default = "default_writer")]
    pub writer_hostgroup: String,
    /// Name of the hostgroup that takes reads.
    #[serde(default = "default_reader")]
    pub reader_hostgroup: String,
    /// When no reader is usable, send reads to the writer hostgroup (otherwise fail them).
    #[serde(default = "yes")]
    pub reads_fallback_to_writer: bool,
    /// Maximum number of client connections across all listeners.
    #[serde(default = "default_max_clients")]
    pub max_client_connections: u32,
    /// First place of `mysql.max_packet_size` (still accepted; moved there on load).
    #[serde(default, skip_serializing)]
    pub max_packet_size: Option<u32>,
    /// Bytes of large client requests (over 16 KiB) the whole process may hold at once while
    /// they arrive and run; a request that would go beyond it is refused (error 1041).
    #[serde(default = "default_max_request_memory")]
    pub max_request_memory: u64,
    /// First place of `mysql.server_version` (still accepted; moved there on load).
    #[serde(default, skip_serializing)]
    pub server_version: Option<String>,
    /// PEM certificate chain offered to clients that ask for TLS (with `tls_key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_cert: Option<String>,
    /// PEM private key of `tls_cert`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<String>,
    /// Bind listeners with SO_REUSEPORT so several sluice processes can share a port.
    #[serde(default)]
    pub reuse_port: bool,
    /// Threads serving clients and servers; 0 (the default): one per CPU. On a machine whose
    /// CPUs the database or the applications also use, fewer threads mean fewer wake-ups of
    /// idle threads and less CPU per query.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub worker_threads: u32,
    /// First place of `mysql.default_auth_plugin` (still accepted; moved there on load).
    #[serde(default, skip_serializing)]
    pub default_auth_plugin: Option<AuthPlugin>,
}

/// A password authentication plugin.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, Default)]
pub enum AuthPlugin {
    /// `mysql_native_password` (MariaDB's default).
    #[default]
    #[serde(rename = "mysql_native_password")]
    MysqlNativePassword,
    /// `caching_sha2_password` (MySQL 8's default).
    #[serde(rename = "caching_sha2_password")]
    CachingSha2Password,
}

impl AuthPlugin {
    /// The plugin's protocol name.
    pub fn name(self) -> &'static str {
        match self {
            AuthPlugin::MysqlNativePassword => "mysql_native_password",
            AuthPlugin::CachingSha2Password => "caching_sha2_password",
        }
    }
}

/// `[[listeners]]`: an extra client port.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ListenerConfig {
    /// Address to listen on, `host:port`.
    pub listen: String,
    /// The protocol its clients speak.
    #[serde(default, skip_serializing_if = "Protocol::is_mysql")]
    pub protocol: Protocol,
    /// Send every statement from this port to this hostgroup; absent means read/write splitting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostgroup: Option<String>,
}

/// `[[users]]`: a client user.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    /// User name, as the client sends it.
    pub name: String,
    /// Password: authenticates the client and logs in to the servers.
    pub password: String,
    /// Maximum concurrent client connections for this user (0 = no per-user limit).
    #[serde(default)]
    pub max_connections: u32,
    /// Refuse this user's connections that do not use TLS.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub require_tls: bool,
    /// How PostgreSQL clients prove the password (MySQL clients use `[mysql]`'s plugins).
    #[serde(default, skip_serializing_if = "PgAuthMethod::is_default")]
    pub auth_method: PgAuthMethod,
    /// PostgreSQL: this user's sessions read their own writes (a read after a write goes
    /// only to a standby that replayed it, or to the primary). Sessions can change it with
    /// `SET sluice.read_your_writes`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_your_writes: bool,
}

/// The form a `[[users]]` password is given in: PostgreSQL's stored forms are not the
/// password, and a client must never log in by sending one as if it were.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PasswordForm {
    /// The password itself.
    Plain,
    /// PostgreSQL's SCRAM secret, `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`.
    ScramSecret,
    /// PostgreSQL's MD5 hash, `md5` and 32 hex digits (`md5(password || user)`).
    Md5Hash,
}

impl PasswordForm {
    /// The form of `password` (as PostgreSQL tells its stored forms apart).
    pub fn of(password: &str) -> PasswordForm {
        if password.starts_with("SCRAM-SHA-256$") {
            return PasswordForm::ScramSecret;
        }
        match password.strip_prefix("md5") {
            Some(h)
                if h.len() == 32 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) =>
            {
                PasswordForm::Md5Hash
            }
            _ => PasswordForm::Plain,
        }
    }
}

/// A PostgreSQL password exchange, as `pg_hba.conf` names it.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, Default)]
pub enum PgAuthMethod {
    /// SCRAM-SHA-256 (PostgreSQL's default). The password may be given as PostgreSQL's
    /// stored secret (`SCRAM-SHA-256$...`).
    #[default]
    #[serde(rename = "scram-sha-256")]
    ScramSha256,
    /// MD5 (challenge and response).
    #[serde(rename = "md5")]
    Md5,
    /// The password in cleartext: only over TLS.
    #[serde(rename = "password")]
    Password,
}

impl PgAuthMethod {
    /// True for SCRAM-SHA-256 (left out when a configuration is written).
    pub fn is_default(&self) -> bool {
        *self == PgAuthMethod::ScramSha256
    }
}

/// `[[servers]]`: a backend server.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// `host:port` of the server.
    pub address: String,
    /// The protocol it speaks.
    #[serde(default, skip_serializing_if = "Protocol::is_mysql")]
    pub protocol: Protocol,
    /// Hostgroup the server belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostgroup: Option<String>,
    /// Relative share of the hostgroup's traffic (0 = no new traffic).
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// Maximum backend connections to this server; defaults to `[pool] max_connections`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<u32>,
    /// Replication lag above which this replica takes no reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replication_lag: Option<HumanDuration>,
    /// Bytes of WAL behind the primary above which this PostgreSQL standby takes no reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replication_lag_bytes: Option<u64>,
    /// Added by `[[discovery]]` (its description), not by the file: set by sluice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovered: Option<String>,
}

/// How a hostgroup spreads statements over its servers.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum Balance {
    /// Random choice in proportion to the servers' weights.
    #[default]
    Weighted,
    /// The server with the fewest statements in flight per unit of weight.
    LeastOutstanding,
}

/// `[[hostgroups]]`: optional settings for a hostgroup.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HostgroupConfig {
    /// The hostgroup's name, as servers, rules and listeners refer to it.
    pub name: String,
    /// Balancing policy inside the hostgroup.
    #[serde(default)]
    pub balance: Balance,
    /// Replication lag above which its replicas take no reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replication_lag: Option<HumanDuration>,
    /// Bytes of WAL behind the primary above which its PostgreSQL standbys take no reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replication_lag_bytes: Option<u64>,
}

/// `[[rules]]`: a query rule.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// Regular expression (Rust `regex` syntax) matched against the statement text.
    #[serde(rename = "match")]
    pub pattern: String,
    /// Hostgroup that matching statements go to.
    pub hostgroup: String,
    /// Only apply to this user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Only apply when the session's current schema is this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    /// A name for the rule in stats and logs; defaults to `rule<N>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `[pool]`: backend connection pooling.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PoolConfig {
    /// Default maximum backend connections per server.
    #[serde(default = "default_pool_max")]
    pub max_connections: u32,
    /// Time allowed to open and log in a backend connection.
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout: HumanDuration,
    /// How long a statement waits for a free backend connection before it fails.
    #[serde(default = "default_queue_timeout")]
    pub queue_timeout: HumanDuration,
    /// How many statements may wait per hostgroup; beyond that they fail at once.
    #[serde(default = "default_queue_limit")]
    pub queue_limit: u32,
    /// Idle backend connections are closed after this long.
    #[serde(default = "default_idle_timeout")]
    pub idle_timeout: HumanDuration,
    /// A backend connection older than this is closed instead of being lent again (never
    /// while a session uses it). 0: no limit.
    #[serde(default = "default_max_lifetime")]
    pub max_lifetime: HumanDuration,
    /// A server that failed to connect is skipped for this long before it is tried again.
    #[serde(default = "default_retry_after")]
    pub retry_after: HumanDuration,
    /// First place of `mysql.stmt_cache_size` (still accepted; moved there on load).
    #[serde(default, skip_serializing)]
    pub stmt_cache_size: Option<u32>,
    /// Backend connections being opened at the same time per server while connections come
    /// back: a burst of short statements is served by returns rather than each opening one.
    /// While none come back (long statements), the limit doubles every connect round, up to
    /// the server's `max_connections` (see `sluice_core::pool_growth`). One by default, as
    /// PgBouncer opens one at a time per pool: more at once opened two to six times the
    /// connections a burst needed, and made it wait longer (`bench/run-pgburst.sh`).
    #[serde(default = "default_max_connecting")]
    pub max_connecting: u32,
    /// Connect to the servers over TLS, verifying their certificates against `tls_ca`.
    #[serde(default)]
    pub tls: bool,
    /// PEM file of the CA certificates servers' certificates must chain to (with `tls`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_ca: Option<String>,
    /// A server that sends nothing for this long while sluice waits for its answer is taken
    /// for hung: the statement fails and the connection is closed. 0: wait forever.
    #[serde(default = "default_read_timeout")]
    pub read_timeout: HumanDuration,
}

/// `[log]`: logging.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// `tracing` filter, e.g. `"info"` or `"sluice=debug"`.
    #[serde(default = "default_log_level")]
    pub level: String,
    /// Emit JSON lines instead of human-readable text.
    #[serde(default)]
    pub json: bool,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            max_connections: default_pool_max(),
            connect_timeout: default_connect_timeout(),
            queue_timeout: default_queue_timeout(),
            queue_limit: default_queue_limit(),
            idle_timeout: default_idle_timeout(),
            max_lifetime: default_max_lifetime(),
            retry_after: default_retry_after(),
            stmt_cache_size: None,
            max_connecting: default_max_connecting(),
            tls: false,
            tls_ca: None,
            read_timeout: default_read_timeout(),
        }
    }
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            listen: None,
            writer_hostgroup: default_writer(),
            reader_hostgroup: default_reader(),
            reads_fallback_to_writer: true,
            max_client_connections: default_max_clients(),
            max_packet_size: None,
            max_request_memory: default_max_request_memory(),
            server_version: None,
            tls_cert: None,
            tls_key: None,
            reuse_port: false,
            worker_threads: 0,
            default_auth_plugin: None,
        }
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: default_log_level(),
            json: false,
        }
    }
}

impl ServerConfig {
    /// The server's connection limit after applying the pool default.
    pub fn max_connections(&self, pool: &PoolConfig) -> u32 {
        self.max_connections.unwrap_or(pool.max_connections)
    }
}

impl Config {
    /// Balancing policy of a hostgroup (default when it has no `[[hostgroups]]` entry).
    pub fn balance_of(&self, hostgroup: &str) -> Balance {
        self.hostgroups
            .iter()
            .find(|h| h.name == hostgroup)
            .map(|h| h.balance)
            .unwrap_or_default()
    }

    /// The monitor's credentials: `[monitor]`'s, or the first user's.
    pub fn monitor_credentials(&self) -> (String, String) {
        match (&self.monitor.user, &self.monitor.password) {
            (Some(u), p) => (u.clone(), p.clone().unwrap_or_default()),
            _ => self
                .users
                .first()
                .map(|u| (u.name.clone(), u.password.clone()))
                .unwrap_or_default(),
        }
    }

    /// Credentials a rejoining server replicates with.
    pub fn replication_credentials(&self) -> (String, String) {
        match &self.failover.replication_user {
            Some(u) => (
                u.clone(),
                self.failover
                    .replication_password
                    .clone()
                    .unwrap_or_default(),
            ),
            None => self.monitor_credentials(),
        }
    }

    /// True if the server's writer/reader membership follows what the monitor sees (no
    /// hostgroup configured, or failover on and it is in the writer or reader hostgroup).
    pub fn is_managed(&self, server: &ServerConfig) -> bool {
        match &server.hostgroup {
            None => true,
            Some(h) => {
                self.failover.enabled
                    && (*h == self.proxy.writer_hostgroup || *h == self.proxy.reader_hostgroup)
            }
        }
    }

    /// The lag limit for a server: its own, its hostgroup's, or the monitor's.
    pub fn max_lag_of(&self, server: &ServerConfig) -> Option<std::time::Duration> {
        let hg = server
            .hostgroup
            .as_deref()
            .unwrap_or(&self.proxy.reader_hostgroup);
        server
            .max_replication_lag
            .or_else(|| {
                self.hostgroups
                    .iter()
                    .find(|h| h.name == hg)
                    .and_then(|h| h.max_replication_lag)
            })
            .or(self.monitor.max_replication_lag)
            .map(|d| d.get())
    }

    /// The WAL-bytes lag limit for a PostgreSQL server: its own, its hostgroup's, or the
    /// monitor's (none for MySQL servers: their positions are GTIDs, not bytes).
    pub fn max_lag_bytes_of(&self, server: &ServerConfig) -> Option<u64> {
        if server.protocol != crate::Protocol::Postgres {
            return None;
        }
        let hg = server
            .hostgroup
            .as_deref()
            .unwrap_or(&self.proxy.reader_hostgroup);
        server
            .max_replication_lag_bytes
            .or_else(|| {
                self.hostgroups
                    .iter()
                    .find(|h| h.name == hg)
                    .and_then(|h| h.max_replication_lag_bytes)
            })
            .or(self.monitor.max_replication_lag_bytes)
    }

    /// Every hostgroup name that servers or `[[hostgroups]]` define, in first-seen order.
    pub fn hostgroup_names(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        if self.servers.iter().any(|s| s.hostgroup.is_none()) {
            names.push(self.proxy.writer_hostgroup.clone());
            names.push(self.proxy.reader_hostgroup.clone());
        }
        let from_servers = self.servers.iter().filter_map(|s| s.hostgroup.clone());
        let from_tables = self.hostgroups.iter().map(|h| h.name.clone());
        for n in from_servers.chain(from_tables) {
            if !names.contains(&n) {
                names.push(n);
            }
        }
        names
    }
}

pub(crate) fn yes() -> bool {
    true
}
fn default_writer() -> String {
    "writer".into()
}
fn default_reader() -> String {
    "reader".into()
}
fn default_max_clients() -> u32 {
    10_000
}
fn default_max_request_memory() -> u64 {
    256 << 20
}
fn default_weight() -> u32 {
    1
}
fn default_pool_max() -> u32 {
    100
}
fn default_connect_timeout() -> HumanDuration {
    HumanDuration::from_millis(2_000)
}
fn default_read_timeout() -> HumanDuration {
    // As long as a server's own wait_timeout: long enough for any statement that is really
    // running (a silent ALTER TABLE, a long report), short of forever.
    HumanDuration::from_millis(8 * 3_600_000)
}
fn default_queue_timeout() -> HumanDuration {
    HumanDuration::from_millis(5_000)
}
fn default_queue_limit() -> u32 {
    10_000
}
fn default_idle_timeout() -> HumanDuration {
    HumanDuration::from_millis(300_000)
}
fn default_max_lifetime() -> HumanDuration {
    // PgBouncer's `server_lifetime`.
    HumanDuration::from_millis(3_600_000)
}
fn default_retry_after() -> HumanDuration {
    HumanDuration::from_millis(1_000)
}
fn default_max_connecting() -> u32 {
    1
}
fn default_log_level() -> String {
    "info".into()
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}
