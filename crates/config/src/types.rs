//! The configuration types, with their defaults. Field-by-field documentation for users lives
//! in `docs/configuration.md`; keep the two in step.

use crate::HumanDuration;
use serde::{Deserialize, Serialize};

/// The whole configuration file.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The main read/write-splitting listener and proxy-wide settings.
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
}

/// `[proxy]`: the read/write-splitting listener and proxy-wide settings.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProxyConfig {
    /// Address of the read/write-splitting listener, `host:port`.
    pub listen: String,
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
    /// Largest client request (a whole, possibly split, packet) the proxy accepts, in bytes.
    #[serde(default = "default_max_packet")]
    pub max_packet_size: u32,
    /// Server version string announced to clients; by default the writer's own version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_version: Option<String>,
    /// Bind listeners with SO_REUSEPORT so several sluice processes can share a port.
    #[serde(default)]
    pub reuse_port: bool,
    /// Authentication plugin announced in the greeting. Clients may answer with either
    /// plugin regardless; this only decides what a client that follows the server uses.
    #[serde(default)]
    pub default_auth_plugin: AuthPlugin,
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
}

/// `[[servers]]`: a backend server.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// `host:port` of the MariaDB/MySQL server.
    pub address: String,
    /// Hostgroup the server belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostgroup: Option<String>,
    /// Relative share of the hostgroup's traffic (0 = no new traffic).
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// Maximum backend connections to this server; defaults to `[pool] max_connections`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<u32>,
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
    /// A server that failed to connect is skipped for this long before it is tried again.
    #[serde(default = "default_retry_after")]
    pub retry_after: HumanDuration,
    /// Prepared statements cached per backend connection; the oldest is closed beyond this.
    #[serde(default = "default_stmt_cache")]
    pub stmt_cache_size: u32,
    /// Backend connections being opened at the same time per server. Under a burst, other
    /// statements wait for connections coming back instead of each opening one.
    #[serde(default = "default_max_connecting")]
    pub max_connecting: u32,
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
            retry_after: default_retry_after(),
            stmt_cache_size: default_stmt_cache(),
            max_connecting: default_max_connecting(),
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

    /// Every hostgroup name that servers or `[[hostgroups]]` define, in first-seen order.
    pub fn hostgroup_names(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
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

fn yes() -> bool {
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
fn default_max_packet() -> u32 {
    64 << 20
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
fn default_queue_timeout() -> HumanDuration {
    HumanDuration::from_millis(5_000)
}
fn default_queue_limit() -> u32 {
    10_000
}
fn default_idle_timeout() -> HumanDuration {
    HumanDuration::from_millis(300_000)
}
fn default_retry_after() -> HumanDuration {
    HumanDuration::from_millis(1_000)
}
fn default_stmt_cache() -> u32 {
    256
}
fn default_max_connecting() -> u32 {
    4
}
fn default_log_level() -> String {
    "info".into()
}
