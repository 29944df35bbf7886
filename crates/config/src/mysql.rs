//! `[mysql]`: what only MySQL clients and servers have. These keys were first read from
//! `[proxy]` (`max_packet_size`, `server_version`, `default_auth_plugin`) and `[pool]`
//! (`stmt_cache_size`); there they are still accepted and moved here, and giving one in both
//! places with different values is an error naming both.

use crate::types::AuthPlugin;
use crate::{Config, ConfigError, HumanDuration};
use serde::{Deserialize, Serialize};

/// MySQL-only settings.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MysqlConfig {
    /// Largest client request (a whole, possibly split, packet) the proxy accepts, in bytes.
    #[serde(default = "default_max_packet")]
    pub max_packet_size: u32,
    /// Server version string announced to clients; by default the writer's own version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_version: Option<String>,
    /// Authentication plugin announced in the greeting. Clients may answer with either
    /// plugin regardless; this only decides what a client that follows the server uses.
    #[serde(default)]
    pub default_auth_plugin: AuthPlugin,
    /// Prepared statements cached per backend connection; the oldest is closed beyond this.
    #[serde(default = "default_stmt_cache")]
    pub stmt_cache_size: u32,
    /// Bytes of prepared statements' texts the whole process holds for its sessions at once
    /// (a COM_STMT_PREPARE beyond it fails with error 1041, and the session goes on).
    #[serde(default = "default_max_statement_memory")]
    pub max_statement_memory: u64,
    /// Of those bytes, what one session's statements may hold.
    #[serde(default = "default_max_statement_memory_per_session")]
    pub max_statement_memory_per_session: u64,
    /// Once a request has begun to arrive, how long sluice waits for each further part of it
    /// (MariaDB's `net_read_timeout`); a client stalled longer mid-request is disconnected.
    #[serde(default = "default_net_read_timeout")]
    pub net_read_timeout: HumanDuration,
}

impl Default for MysqlConfig {
    fn default() -> Self {
        MysqlConfig {
            max_packet_size: default_max_packet(),
            server_version: None,
            default_auth_plugin: AuthPlugin::default(),
            stmt_cache_size: default_stmt_cache(),
            max_statement_memory: default_max_statement_memory(),
            max_statement_memory_per_session: default_max_statement_memory_per_session(),
            net_read_timeout: default_net_read_timeout(),
        }
    }
}

/// The largest request by default: 64 MiB.
pub(crate) fn default_max_packet() -> u32 {
    64 << 20
}

/// Prepared statements' bytes for the whole process by default: 1 GiB.
fn default_max_statement_memory() -> u64 {
    1 << 30
}

/// Prepared statements' bytes for one session by default: 16 MiB.
fn default_max_statement_memory_per_session() -> u64 {
    16 << 20
}

/// MariaDB's default `net_read_timeout`: 30 s.
fn default_net_read_timeout() -> HumanDuration {
    HumanDuration::from_millis(30_000)
}

/// Statements cached per backend connection by default.
pub(crate) fn default_stmt_cache() -> u32 {
    256
}

/// Keys of `[mysql]` given in their first places, as read from the file.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Legacy {
    pub max_packet_size: Option<u32>,
    pub server_version: Option<String>,
    pub default_auth_plugin: Option<AuthPlugin>,
    pub stmt_cache_size: Option<u32>,
}

/// Moves one key given in its first place into `[mysql]`: refused when `[mysql]` gives a
/// different value too.
fn fold<T: PartialEq + std::fmt::Debug>(
    old: Option<T>,
    old_name: &str,
    new: &mut T,
    new_name: &str,
    new_given: bool,
) -> Result<(), ConfigError> {
    let Some(old) = old else { return Ok(()) };
    if new_given && *new != old {
        return Err(ConfigError::new(
            new_name,
            format!(
                "given as {new:?} here and as {old:?} in {old_name}: keep one (the [mysql] one)"
            ),
        ));
    }
    *new = old;
    Ok(())
}

impl Config {
    /// Moves the `[mysql]` keys given in `[proxy]` or `[pool]` into `[mysql]`; `given` says
    /// which `[mysql]` keys the file itself sets.
    pub(crate) fn fold_mysql_legacy(&mut self, given: &[&str]) -> Result<(), ConfigError> {
        let legacy = Legacy {
            max_packet_size: self.proxy.max_packet_size.take(),
            server_version: self.proxy.server_version.take(),
            default_auth_plugin: self.proxy.default_auth_plugin.take(),
            stmt_cache_size: self.pool.stmt_cache_size.take(),
        };
        let m = &mut self.mysql;
        let has = |k: &str| given.contains(&k);
        fold(
            legacy.max_packet_size,
            "proxy.max_packet_size",
            &mut m.max_packet_size,
            "mysql.max_packet_size",
            has("max_packet_size"),
        )?;
        let mut version = m.server_version.clone();
        fold(
            legacy.server_version.map(Some),
            "proxy.server_version",
            &mut version,
            "mysql.server_version",
            has("server_version"),
        )?;
        m.server_version = version;
        fold(
            legacy.default_auth_plugin,
            "proxy.default_auth_plugin",
            &mut m.default_auth_plugin,
            "mysql.default_auth_plugin",
            has("default_auth_plugin"),
        )?;
        fold(
            legacy.stmt_cache_size,
            "pool.stmt_cache_size",
            &mut m.stmt_cache_size,
            "mysql.stmt_cache_size",
            has("stmt_cache_size"),
        )
    }
}
